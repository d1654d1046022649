//! `detach`: remove a companion family from a pack, atomically: its files and its records in
//! `metadata.db` go in one publish (a staged copy of `metadata.db` without them is the commit
//! point), so the pack never records a family whose files are gone, nor the reverse.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;

use crate::cmd::attach::check_name;
use crate::format::metadata::{self, MetadataWriter};
use crate::pack::files;
use crate::pack::publish::{OutputDir, list_names};
use crate::pack::shards;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer detach packs/d6 --name embeddings
  dataset-packer detach packs/d6 --name embeddings --json

Removes the files NAME-NNNNN.npy (or NAME.npy) and their records in metadata.db in one
atomic step. The shards are not touched.")]
pub struct DetachArgs {
    /// The pack to remove the companion from.
    #[arg(value_name = "PACK")]
    pub pack: PathBuf,
    /// Name of the family to remove.
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &DetachArgs) -> Result<()> {
    check_name(&args.name)?;
    let out = OutputDir::open_existing(&args.pack)?;
    let files = files::family_files(&args.pack, &args.name)?;
    let recorded = metadata::read_companions(&shards::open_metadata(&args.pack)?)?
        .iter()
        .any(|r| r.name == args.name);
    if files.is_empty() && !recorded {
        bail!(
            "{} has no companion {} (no {}-NNNNN.npy or {}.npy)",
            args.pack.display(),
            args.name,
            args.name,
            args.name
        );
    }
    let bytes: u64 = files
        .iter()
        .map(|f| {
            std::fs::metadata(args.pack.join(f))
                .map(|m| m.len())
                .unwrap_or(0)
        })
        .sum();
    let staging = out.begin_staging()?;
    let db = MetadataWriter::extend_copy(&args.pack, &staging)?;
    db.delete_companion(&args.name)?;
    db.finish()?;
    let mut kept = out.pack_files()?;
    kept.retain(|n| n != metadata::FILE_NAME);
    out.publish_with(&kept, &files)?;
    if args.json {
        let doc = serde_json::json!({
            "pack": args.pack.display().to_string(),
            "name": args.name,
            "removed": files,
            "bytes": bytes,
        });
        println!("{doc}");
    } else {
        println!(
            "detached {} from {}: removed {} ({:.1} MB)",
            args.name,
            args.pack.display(),
            if files.is_empty() {
                "its records (no files were left)".to_string()
            } else {
                list_names(&files)
            },
            bytes as f64 / 1e6
        );
    }
    Ok(())
}
