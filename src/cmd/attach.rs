//! `attach`: add a companion family to a pack (the library's [`crate::attach`] does the work:
//! lines the arrays up with the shards, copies them into checksummed files, publishes them
//! with a staged `metadata.db`), and say what was added.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;

use crate::progress::thousands;
use crate::{AttachOptions, attach};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer attach packs/d6 --name embeddings --from emb-00000.npy emb-00001.npy emb-00002.npy
  dataset-packer attach packs/d6 --name embeddings --from all-embeddings.npy
  dataset-packer attach packs/d6 --name labels --from labels.npy --json
  dataset-packer attach s3://training/team/d6 --name labels --from labels.npy  # a new commit
  dataset-packer attach packs/d6 --name annotation --from annotations-0*.npy   # 2048former's

A companion is an array aligned row by row with the pack: row i of its file k belongs to row i
of steps-0000k.npy. Give one array per shard, in shard order, each with that shard's row
count; one array with a row for every row of the pack; or any arrays, in order, whose rows add
up to the pack's (the trainer's annotation shards, say): they are cut at the pack's shard
boundaries. Arrays whose rows have run_id and step_index fields (2048former's AnnotationRow)
have every row checked against the pack's row it lands on; a mismatch is refused, naming the
first row that differs. Any dtype and trailing shape (C order, no Python objects). merge, shuffle and
export carry companions with their rows; validate checks them. On a URL the pack's latest
commit is downloaded, changed and committed; exit 2 if another writer committed first.")]
pub struct AttachArgs {
    /// The pack to add the companion to (a folder, or an s3://, gs://, az:// URL).
    #[arg(value_name = "PACK")]
    pub pack: PathBuf,
    // The help is an attribute, not a doc comment: rustdoc would read its brackets as links.
    #[arg(
        long,
        value_name = "NAME",
        help = "Name of the family: [a-z][a-z0-9_]*, not \"steps\" (files NAME-NNNNN.npy)"
    )]
    pub name: String,
    /// The arrays (.npy), in order: one per shard, one for the whole pack, or any whose
    /// rows add up to the pack's.
    #[arg(long = "from", value_name = "PATH", num_args = 1.., required = true)]
    pub from: Vec<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &AttachArgs) -> Result<()> {
    let started = Instant::now();
    let options = AttachOptions::default().progress(crate::cmd::progress::Bars::unless(args.quiet));
    let added = attach(&args.pack, &args.name, &args.from, &options)?;
    let (files, total) = (added.files(), added.rows());

    let bytes: u64 = files.iter().map(|f| f.bytes).sum();
    let elapsed = started.elapsed().as_secs_f64();
    if args.json {
        let doc = serde_json::json!({
            "pack": args.pack.display().to_string(),
            "name": args.name,
            "dtype": added.descr(),
            "trailing_shape": added.trailing_shape(),
            "rows": total,
            "files": files.iter().map(|f| serde_json::json!({"file": f.file_name, "rows": f.rows, "bytes": f.bytes, "crc32c": format!("{:08x}", f.crc32c)})).collect::<Vec<_>>(),
            "bytes": bytes,
            "elapsed_s": elapsed,
        });
        println!("{doc}");
    } else {
        println!(
            "attached {} ({}) to {}: {} file{}, {} rows, {:.1} MB in {elapsed:.2} s",
            args.name,
            added.describe(),
            args.pack.display(),
            files.len(),
            if files.len() == 1 { "" } else { "s" },
            thousands(total),
            bytes as f64 / 1e6
        );
    }
    Ok(())
}
