//! `validate`: prove a pack is complete, consistent and loader-ready. The checks themselves
//! are the library's ([`crate::verify`], one function per family); this command takes
//! the arguments, runs them and prints every failed check with examples and a one-line verdict.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use serde_json::json;

use crate::pack::shards;
use crate::pack::versions::{History, VersionSpec};
use crate::progress::{count, thousands};
use crate::store::Location;
// Merge and shuffle validate their inputs through these names.
pub use crate::verify::{Options, Report, check};

#[derive(Args, Debug)]
#[command(after_help = "Exit status: 0 valid, 1 invalid, 2 usage error.

Examples:
  dataset-packer validate packs/d6
  dataset-packer validate s3://training/team/d6
  dataset-packer validate packs/d6 --deep --json > report.json")]
pub struct ValidateArgs {
    /// The pack folder (or s3://, gs://, az://, https:// URL) to check.
    #[arg(value_name = "PACK_DIR")]
    pub pack: PathBuf,
    /// Also recompute board_eval and ev_legal from every board.
    #[arg(long)]
    pub deep: bool,
    /// Print the report as one JSON document.
    #[arg(long)]
    pub json: bool,
    /// Threads for the row pass [default: all cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: Option<u64>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Also name the version N (or tag) whose rows the checks vouch for: an earlier
    /// version's rows are the first rows of the files checked, and the history check covers
    /// every version's files [default: latest].
    #[command(flatten)]
    pub version: crate::cli::VersionArg,
}

pub fn run(args: &ValidateArgs) -> Result<bool> {
    let started = Instant::now();
    // A folder with shards but no metadata.db is a damaged pack: its checks say what is wrong.
    // (A URL is located by `check`, which says what is at it.)
    if is_local(&args.pack)
        && !args.pack.join("steps.npy").exists()
        && !args.pack.join("steps-00000.npy").exists()
    {
        shards::check_is_pack(&args.pack)?;
    }
    let options = Options {
        deep: args.deep,
        workers: args
            .workers
            .map_or_else(crate::default_workers, |w| w as usize),
        progress: crate::cmd::progress::Bars::unless(args.quiet),
        legacy_ok: false,
        scan_rows: true,
    };
    let version = match &args.version.version {
        VersionSpec::Latest => None,
        spec => {
            let history = History::of_pack(&args.pack)?;
            let v = history.find(&args.pack, spec)?;
            Some((history.identity(v.version), v.rows, v.runs))
        }
    };
    let report = check(&args.pack, &options)?;
    let elapsed = started.elapsed().as_secs_f64();
    if args.json {
        print_json(&report, elapsed, version.as_ref());
    } else {
        if let Some((identity, rows, runs)) = &version {
            println!(
                "version {identity}: {} and {}, the first rows of the files checked below",
                count(*rows, "row", "rows"),
                count(*runs, "run", "runs")
            );
        }
        print_human(&report, elapsed);
    }
    Ok(report.valid())
}
/// Whether `pack` names a local folder (not a URL, nor something that fails to parse as one).
fn is_local(pack: &std::path::Path) -> bool {
    pack.to_str()
        .is_none_or(|t| matches!(Location::parse(t), Ok(Location::Local(_))))
}

fn print_human(r: &Report, elapsed: f64) {
    println!(
        "validate {}{}",
        r.pack.display(),
        if r.deep { " (deep)" } else { "" }
    );
    for c in &r.checks {
        let status = if !c.ran {
            "skip"
        } else if c.failures == 0 {
            "ok"
        } else {
            "FAIL"
        };
        let count = if c.failures > 0 {
            format!(" ({} failures)", thousands(c.failures))
        } else {
            String::new()
        };
        let note = c
            .note
            .as_ref()
            .map(|n| format!(": {n}"))
            .unwrap_or_default();
        println!("  {status:<4}  {}{count}{note}", c.name);
        for e in &c.examples {
            println!("          {e}");
        }
    }
    let findings: Vec<_> = r.findings.iter().filter(|(_, t)| t.count > 0).collect();
    if !findings.is_empty() {
        println!("  findings (from the source logs; reported, not failures):");
        for (kind, t) in findings {
            println!("    {kind}: {}", thousands(t.count));
            for e in t.examples.iter().take(3) {
                println!("      e.g. {e}");
            }
        }
    }
    print_skipped(&r.skipped_runs);
    let failed = r.checks.iter().filter(|c| c.failures > 0).count();
    let gbps = r.bytes as f64 / 1e9 / elapsed.max(1e-9);
    if failed == 0 {
        println!(
            "VALID: {}, {}, {} ({:.1} MB) checked in {elapsed:.2} s ({gbps:.2} GB/s)",
            count(r.rows, "row", "rows"),
            count(r.runs as u64, "run", "runs"),
            count(r.shards as u64, "shard", "shards"),
            r.bytes as f64 / 1e6
        );
    } else {
        println!(
            "INVALID: {failed} of {} failed",
            count(r.checks.len() as u64, "check", "checks")
        );
    }
}

/// The runs `pack --skip-invalid` left out: not failures of the pack, but games it lacks.
fn print_skipped(skipped: &[(String, String)]) {
    if skipped.is_empty() {
        return;
    }
    println!(
        "  skipped at pack time (--skip-invalid; metadata.db table skipped_runs; not failures): {}",
        count(skipped.len() as u64, "run", "runs")
    );
    for (path, reason) in skipped.iter().take(3) {
        println!("      e.g. {path}: {reason}");
    }
}

fn print_json(r: &Report, elapsed: f64, version: Option<&(String, u64, u64)>) {
    let doc = json!({
        "pack": r.pack.display().to_string(),
        "version": version.map(|(identity, rows, runs)| json!({
            "identity": identity, "rows": rows, "runs": runs,
        })),
        "valid": r.valid(),
        "deep": r.deep,
        "rows": r.rows,
        "runs": r.runs,
        "shards": r.shards,
        "bytes": r.bytes,
        "elapsed_s": elapsed,
        "checks": r.checks.iter().map(|c| json!({
            "name": c.name,
            "status": if !c.ran { "skipped" } else if c.failures == 0 { "ok" } else { "failed" },
            "failures": c.failures,
            "examples": c.examples,
            "note": c.note,
        })).collect::<Vec<_>>(),
        "findings": r.findings.iter().map(|(k, t)| (k.to_string(), json!({"count": t.count, "examples": t.examples}))).collect::<serde_json::Map<_, _>>(),
        "skipped_runs": r.skipped_runs.iter().map(|(path, reason)| json!({"source_path": path, "reason": reason})).collect::<Vec<_>>(),
    });
    println!("{doc}");
}
