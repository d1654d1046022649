//! `merge`: packs → one pack. The arguments become [`MergeOptions`] for the library's
//! [`merge`](crate::merge()) (which checks the inputs, copies, publishes and deletes inputs);
//! this prints its summary, as text or `--json`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use serde_json::json;

use crate::merge::{MergeOptions, MergeSummary};
use crate::progress::{count, thousands};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer merge packs/d6 packs/d7 --output packs/d6d7
  dataset-packer merge part-0 part-1 part-2 --output packs/all --shard-rows 10000000
  dataset-packer merge old new --output merged --overwrite --delete-inputs
  dataset-packer merge packs/a packs/b --output packs/ab --dedupe
  dataset-packer merge packs/d6 packs/d7 --output s3://training/team/d6d7   # to object storage

The input packs are positional, like every command's; the older spellings --left A --right B
and --input A --input B … still work and mean the same.

Legacy 46-byte inputs (the reference packer's, 2048former) are upgraded: 48-byte rows, run
index, fingerprints, and ev_legal recomputed from the board (the rows it changes are counted).

Runs are renumbered in input order. A run with the same content (fingerprint) as an earlier
one is a duplicate: reported as a duplicate_run finding, or left out with --dedupe. Inputs must
be in run order: merge the unshuffled packs, then shuffle the result.

Companion arrays (NAME-NNNNN.npy aligned with the shards, e.g. embeddings) present in every
input with one dtype and shape are carried, their rows in the output's row order.
--delete-inputs deletes an input's companion files with its shards, once they are in the
verified output; it refuses an input holding a *.npy file it cannot account for.")]
pub struct MergeArgs {
    /// The input packs, in order (runs are renumbered in this order).
    #[arg(value_name = "PACK", conflicts_with_all = ["left", "inputs"])]
    pub packs: Vec<PathBuf>,
    /// First input pack, with --right (an alias: `merge A B` is the same).
    #[arg(
        long,
        value_name = "PACK",
        requires = "right",
        conflicts_with = "inputs"
    )]
    pub left: Option<PathBuf>,
    /// Second input pack, with --left (an alias: `merge A B` is the same).
    #[arg(long, value_name = "PACK", requires = "left")]
    pub right: Option<PathBuf>,
    /// An input pack, repeated for each (an alias: `merge A B C` is the same).
    #[arg(long = "input", value_name = "PACK")]
    pub inputs: Vec<PathBuf>,
    /// Folder to write the merged pack into, or a URL in object storage (s3://bucket/prefix,
    /// gs://, az://): built in the cache folder's staging/, then published there as a
    /// commit.
    #[arg(long, value_name = "PACK_DIR")]
    pub output: PathBuf,
    /// Rows per output shard, e.g. 10M (k, M, G = 10^3, 10^6, 10^9) [default: the inputs'
    /// shard size when every input has shards (the largest if they differ), else one
    /// steps.npy].
    #[arg(long, value_name = "N", value_parser = crate::cli::parse_rows)]
    pub shard_rows: Option<u64>,
    /// Replace a pack already in the output folder, with the companion families its
    /// metadata.db records (search, attached ones); the old one stays until the new one
    /// is complete. Companion files it does not record are refused.
    #[arg(long)]
    pub overwrite: bool,
    /// Delete the input packs' files once the output is published and re-validated.
    #[arg(long)]
    pub delete_inputs: bool,
    /// Leave out runs whose content equals an earlier run's (in output order), so overlapping
    /// packs merge into what a pack of their union would be; they are listed in skipped_runs.
    #[arg(long)]
    pub dedupe: bool,
    /// Leave the companion array family NAME out of the output (repeatable); without it a
    /// family missing from some input, or of another dtype or shape there, is an error.
    #[arg(long = "drop-companion", value_name = "NAME")]
    pub drop_companion: Vec<String>,
    /// Threads for validating inputs [default: all cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: Option<u64>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

impl MergeArgs {
    fn input_list(&self) -> Result<Vec<PathBuf>> {
        let list: Vec<PathBuf> = match (&self.left, &self.right) {
            (Some(l), Some(r)) => vec![l.clone(), r.clone()],
            _ if !self.packs.is_empty() => self.packs.clone(),
            _ => self.inputs.clone(),
        };
        if list.is_empty() {
            return Err(crate::Error::new(
                crate::ErrorKind::Refused,
                "name the input packs: `merge A B … --output M` (or --left A --right B, or --input A --input B …)",
            )
            .into());
        }
        Ok(list)
    }
}

pub fn run(args: &MergeArgs) -> Result<()> {
    let started = Instant::now();
    let summary = crate::merge(&args.input_list()?, &args.output, &options(args))?;
    print(&summary, args, started.elapsed().as_secs_f64());
    Ok(())
}

/// The library's options from the arguments (what they do not set stays the default).
fn options(args: &MergeArgs) -> MergeOptions {
    let mut options = MergeOptions::default()
        .overwrite(args.overwrite)
        .delete_inputs(args.delete_inputs)
        .dedupe(args.dedupe)
        .progress(crate::cmd::progress::Bars::unless(args.quiet));
    if let Some(rows) = args.shard_rows {
        options = options.shard_rows(rows);
    }
    if let Some(workers) = args.workers {
        options = options.workers(workers as usize);
    }
    for name in &args.drop_companion {
        options = options.drop_companion(name);
    }
    options
}

fn print(summary: &MergeSummary, args: &MergeArgs, elapsed: f64) {
    let mbps = summary.bytes as f64 / 1e6 / elapsed.max(1e-9);
    if args.json {
        let doc = json!({
            "output": args.output.display().to_string(),
            "runs": summary.runs,
            "rows": summary.rows,
            "shards": summary.shards,
            "bytes": summary.bytes,
            "inputs": summary.inputs.iter().map(|i| json!({"path": i.path.display().to_string(), "runs": i.runs, "rows": i.rows, "left_out": i.left_out})).collect::<Vec<_>>(),
            "duplicate_runs": summary.duplicates,
            "legacy_ev_legal_changed": summary.upgraded,
            "companions": summary.companions.iter().map(|(n, d)| json!({"name": n, "dtype": d})).collect::<Vec<_>>(),
            "skipped_runs": summary.left_out.iter().map(|(p, r)| json!({"path": p, "reason": r})).collect::<Vec<_>>(),
            "deleted": summary.deleted.iter().map(|d| json!({"path": d.path.display().to_string(), "files": d.files, "bytes": d.bytes})).collect::<Vec<_>>(),
            "published": summary.uploaded,
            "elapsed_s": elapsed,
            "mb_per_s": mbps,
        });
        println!("{doc}");
        return;
    }
    println!(
        "merged {}: {}, {} into {} in {}",
        count(summary.inputs.len() as u64, "input", "inputs"),
        count(summary.runs, "run", "runs"),
        count(summary.rows, "row", "rows"),
        count(summary.shards as u64, "shard", "shards"),
        args.output.display()
    );
    if let Some(up) = &summary.uploaded {
        println!("  published to {up}");
    }
    for i in &summary.inputs {
        let now = match i.ids {
            Some((first, last)) => format!("now {first}..={last}"),
            None => "none carried".to_string(),
        };
        let left = if i.left_out > 0 {
            format!(", {} left out as duplicates", thousands(i.left_out as u64))
        } else {
            String::new()
        };
        println!(
            "  {}: {} ({now}{left}), {}",
            i.path.display(),
            count(i.runs as u64, "run", "runs"),
            count(i.rows, "row", "rows")
        );
    }
    for (name, dtype) in &summary.companions {
        println!("  companion {name} ({dtype}) carried with its rows");
    }
    if let Some(n) = summary.upgraded {
        println!(
            "  legacy 46-byte input rows upgraded: recomputing ev_legal from the board changed {}",
            count(n, "row", "rows")
        );
    }
    if summary.duplicates > 0 {
        println!(
            "  duplicate runs: {} (same content as an earlier run; kept and listed as duplicate_run findings; --dedupe leaves them out)",
            thousands(summary.duplicates)
        );
    }
    for (source, reason) in summary.left_out.iter().take(10) {
        println!("  left out {source}: {reason}");
    }
    for d in &summary.deleted {
        println!(
            "  deleted {}: {}, {:.1} MB",
            d.path.display(),
            count(d.files as u64, "file", "files"),
            d.bytes as f64 / 1e6
        );
    }
    println!("  elapsed {elapsed:.2} s, {mbps:.0} MB/s written");
}
