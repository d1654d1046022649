//! `pack --update`: add a drop's new runs to the pack already in the output folder. The work
//! is the library's ([`crate::pack_raw`] with `update`; `packer::update` says how an update
//! sorts the drop's runs and what it rewrites); this module prints what it did.

use anyhow::Result;
use serde_json::json;

use crate::Uploaded;
use crate::cmd::pack::{self, PackArgs};
use crate::packer::Summary;
use crate::packer::update::Report;
use crate::progress::{count, thousands};

/// `pack --update` (`main` calls it instead of [`pack::run`] when `--update` is given).
pub fn run(args: &PackArgs) -> Result<()> {
    let (packed, elapsed) = args.pack()?;
    match &packed.update {
        None => pack::print_summary(
            &packed.summary,
            args.json,
            &args.output,
            elapsed,
            packed.uploaded(),
        ),
        Some(report) => print_report(&packed.summary, report, args, elapsed, packed.uploaded()),
    }
    Ok(())
}

/// Prints what the update did: the headline, what the pack already held, the shards touched,
/// and [`pack::print_details`]; or one JSON document.
fn print_report(
    s: &Summary,
    report: &Report,
    args: &PackArgs,
    elapsed: f64,
    uploaded: Option<&Uploaded>,
) {
    if args.json {
        print_json(s, report, args, elapsed, uploaded);
        return;
    }
    println!(
        "updated {}: {}, {} (now {}, {})",
        args.output.display(),
        count(u64::from(s.runs), "new run", "new runs"),
        count(s.rows, "new row", "new rows"),
        count(report.total_runs, "run", "runs"),
        count(report.total_rows, "row", "rows")
    );
    match uploaded {
        Some(up) if up.files.is_empty() => {
            println!("  nothing new to publish: {} is unchanged", up.url)
        }
        Some(up) => println!("  published to {up}"),
        None => {}
    }
    println!(
        "  already packed: {} by path, {} by content (moved or copied)",
        count(report.packed_by_path as u64, "run", "runs"),
        thousands(report.already_packed.len() as u64)
    );
    for (path, id) in report.already_packed.iter().take(10) {
        println!("    {path}: same content as run {id}");
    }
    if !report.reformed.is_empty() {
        println!(
            "  rows file gzipped or unzipped since packing, same content: {} (the pack records the new file)",
            count(report.reformed.len() as u64, "run", "runs")
        );
        for (path, id) in report.reformed.iter().take(10) {
            println!("    {path}: run {id}");
        }
    }
    println!(
        "  shards: {} rewritten{}, {} added{}",
        report.rewritten.len(),
        list(&report.rewritten),
        report.added.len(),
        list(&report.added)
    );
    if !report.removed_companions.is_empty() {
        println!(
            "  companions removed (--drop-companion): {}",
            report.removed_companions.join(", ")
        );
    }
    pack::print_details(s, elapsed);
}

/// The update's summary as JSON: `pack`'s fields (without `shards`) and the update's own.
fn print_json(
    s: &Summary,
    report: &Report,
    args: &PackArgs,
    elapsed: f64,
    uploaded: Option<&Uploaded>,
) {
    let mut doc = s.to_json(&args.output, elapsed);
    doc["published"] = json!(uploaded);
    let extra = json!({
        "update": true,
        "new_runs": s.runs,
        "new_rows": s.rows,
        "total_runs": report.total_runs,
        "total_rows": report.total_rows,
        "already_packed_by_path": report.packed_by_path,
        "already_packed_by_content": report.already_packed.iter().map(|(p, id)| json!({"path": p, "run_id": id})).collect::<Vec<_>>(),
        "rows_file_changed_form": report.reformed.iter().map(|(p, id)| json!({"path": p, "run_id": id})).collect::<Vec<_>>(),
        "shards_rewritten": report.rewritten,
        "shards_added": report.added,
        "companions_removed": report.removed_companions,
    });
    if let (Some(doc), Some(extra)) = (doc.as_object_mut(), extra.as_object()) {
        doc.remove("shards");
        doc.extend(extra.clone());
    }
    println!("{doc}");
}

/// ` (first … last)` of a list of shard names, or nothing for none.
fn list(names: &[String]) -> String {
    match names {
        [] => String::new(),
        [one] => format!(" ({one})"),
        [first, .., last] => format!(" ({first} … {last})"),
    }
}
