//! `versions`: list a pack's history (every version: when, by what, rows, runs, families,
//! tags, and for a new pack the packs it came from), as text or `--json`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::pack::versions::{History, Version};
use crate::progress::thousands;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer versions packs/d6
  dataset-packer versions packs/d6 --json | jq '.versions[-1].rows'
  dataset-packer versions s3://training/team/d6              # reads metadata.db only

Every command that changes a pack records a version in its metadata.db: pack, merge, shuffle
and export --format pack make version 1 of a new pack (with a new pack_id); pack --update,
attach and detach add a version and keep the pack_id. Read an earlier version with
--version N (or a tag) on validate, stats, show, export and report. A pack made before
versions reads as version 1 of itself, with no pack_id.")]
pub struct VersionsArgs {
    /// The pack (a folder, or an s3://, gs://, az://, https:// URL).
    #[arg(value_name = "PACK")]
    pub pack: PathBuf,
    /// Print the history as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &VersionsArgs) -> Result<()> {
    let history = History::of_pack(&args.pack)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&history)?);
        return Ok(());
    }
    println!(
        "{}: pack_id {}{}",
        args.pack.display(),
        history.pack_id.as_deref().unwrap_or("none"),
        if history.recorded {
            ""
        } else {
            " (made before versions: read as version 1 of itself)"
        }
    );
    for v in &history.versions {
        print_version(v);
    }
    Ok(())
}

fn print_version(v: &Version) {
    let tags = if v.tags.is_empty() {
        String::new()
    } else {
        format!("  [{}]", v.tags.join(", "))
    };
    println!(
        "  {:>4}  {:<20}  {:<10}  {:>14} rows  {:>9} runs{tags}",
        v.version,
        if v.created_utc.is_empty() {
            "-"
        } else {
            &v.created_utc
        },
        v.operation,
        thousands(v.rows),
        thousands(v.runs),
    );
    if !v.families.is_empty() {
        println!("        families: {}", v.families.join(", "));
    }
    for s in &v.sources {
        println!("        from {s} ({})", s.path);
    }
}
