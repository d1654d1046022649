//! `gc`: delete the objects of a pack in object storage that no kept commit names (those of
//! dropped commits, of writers that died before their commit), never one younger than the
//! age window.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use crate::cli::UsageError;
use crate::store::{self, GcOptions, Location, Store};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer gc s3://training/team/d6 --dry-run          # what would go, nothing deleted
  dataset-packer gc s3://training/team/d6                    # every version kept: only orphans
  dataset-packer gc s3://training/team/d6 --keep-versions 10 --older-than 2d --json

A pack in object storage never changes an object: each commit names the objects of its files,
and objects no commit names (a writer killed before its commit, commits dropped here) stay
until gc deletes them. Nothing written less than --older-than ago is deleted: a writer may
still be uploading it, or a reader may have just opened the commit that names it. Only the
pack's _versions/, _objects/ and _probes/ are touched, never other keys under the URL.")]
pub struct GcArgs {
    /// The pack's URL (s3://, gs://, az://).
    #[arg(value_name = "URL")]
    pub pack: PathBuf,
    /// Keep only the latest K commits (and every commit younger than --older-than) [default:
    /// every commit].
    #[arg(long = "keep-versions", value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    pub keep_versions: Option<u64>,
    /// Delete nothing written more recently than this: 7d, 12h, 30m, 45s.
    #[arg(long = "older-than", value_name = "AGE", default_value = "7d", value_parser = age)]
    pub older_than: Duration,
    /// Print what would be deleted; delete nothing.
    #[arg(long = "dry-run")]
    pub dry_run: bool,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

fn age(text: &str) -> Result<Duration, String> {
    store::parse_age(text).map_err(|e| e.to_string())
}

pub fn run(args: &GcArgs) -> Result<()> {
    let url = match args.pack.to_str().map(Location::parse) {
        Some(Ok(Location::Remote(url))) => url,
        Some(Err(e)) => return Err(e.into()),
        _ => {
            return Err(UsageError(format!(
                "{}: gc is for packs in object storage (s3://, gs://, az://); a local pack \
                 keeps no objects that no version names",
                args.pack.display()
            ))
            .into());
        }
    };
    let options = GcOptions {
        keep_versions: args.keep_versions,
        older_than: args.older_than,
        dry_run: args.dry_run,
    };
    let done = store::gc(&Store::from_env()?, &url, &options)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&done)?);
        return Ok(());
    }
    let verb = if done.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    for key in &done.deleted {
        println!("{verb} {url}/{key}");
    }
    println!(
        "{url}: {verb} {} objects ({} bytes); kept commits {}; {} unnamed objects younger \
         than the window left",
        done.deleted.len(),
        done.deleted_bytes,
        ranges(&done.kept_commits),
        done.young.len()
    );
    Ok(())
}

/// `1-3, 7` for [1, 2, 3, 7].
fn ranges(numbers: &[u64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < numbers.len() {
        let start = numbers[i];
        while i + 1 < numbers.len() && numbers[i + 1] == numbers[i] + 1 {
            i += 1;
        }
        parts.push(if numbers[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", numbers[i])
        });
        i += 1;
    }
    parts.join(", ")
}
