//! `detach`: remove a companion family from a pack, atomically (the library's
//! [`crate::detach`]: its files and its records in `metadata.db` go in one publish), and say
//! what was removed.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::detach;
use crate::pack::publish::list_names;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer detach packs/d6 --name embeddings
  dataset-packer detach packs/d6 --name embeddings --json
  dataset-packer detach s3://training/team/d6 --name embeddings   # a new commit

Removes the files NAME-NNNNN.npy (or NAME.npy) and their records in metadata.db in one
atomic step. The shards are not touched.")]
pub struct DetachArgs {
    /// The pack to remove the companion from (a folder, or an s3://, gs://, az:// URL).
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
    let removed = detach(&args.pack, &args.name)?;
    let (files, bytes) = (removed.files(), removed.bytes());
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
                list_names(files)
            },
            bytes as f64 / 1e6
        );
    }
    Ok(())
}
