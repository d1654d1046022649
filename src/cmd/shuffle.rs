//! `shuffle`: a pack → a pack whose rows are a uniformly random permutation, in bounded memory.
//! The command turns its arguments into the library's options, prints what the shuffle tells
//! on the way, and prints the summary and quality report (text or `--json`); the work (plan,
//! scatter and gather passes, resume, metadata, publish) is `shuffle`'s, and
//! docs/shuffle.md says why it gives an exactly uniform permutation.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use serde_json::json;

use crate::format::row::ROW_BYTES;
use crate::progress::{self, thousands};
use crate::shuffle::{ShuffleNotice, ShuffleOptions, ShuffleSummary, WINDOW};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer shuffle packs/d6 --output packs/d6-shuffled --seed 7
  dataset-packer shuffle big --output big-shuffled --memory 4GiB --temp /scratch --shard-rows 10000000
  dataset-packer shuffle big --output big-shuffled --memory 4GiB --temp /scratch --resume
  dataset-packer shuffle packs/d6 --output s3://training/team/d6-shuffled --temp /scratch

The pack is positional, like every command's; the older spelling --input PACK still works.")]
pub struct ShuffleArgs {
    /// The pack to shuffle.
    #[arg(
        value_name = "PACK",
        required_unless_present = "input_flag",
        conflicts_with = "input_flag"
    )]
    pub pack: Option<PathBuf>,
    /// The pack to shuffle (an alias: `shuffle PACK` is the same).
    #[arg(long = "input", id = "input_flag", value_name = "PACK")]
    pub input_flag: Option<PathBuf>,
    /// Folder for the shuffled pack, or a URL in object storage (s3://bucket/prefix, gs://,
    /// az://): built in --temp (else the cache folder's staging/), then published there as a
    /// commit (not with --resume).
    #[arg(long, value_name = "PACK_DIR")]
    pub output: PathBuf,
    /// Random seed: the same seed gives the same bytes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Rows per output shard, e.g. 1M (k, M, G = 10^3, 10^6, 10^9) [default: the input's].
    #[arg(long, value_name = "N", value_parser = crate::cli::parse_rows)]
    pub shard_rows: Option<u64>,
    /// Memory for one bucket and the write buffers (e.g. 512MiB, 4GiB).
    #[arg(long, default_value = "1GiB", value_parser = crate::cli::parse_size)]
    pub memory: u64,
    /// Folder for the bucket files (≈ the pack's size) [default: the output folder]; for a
    /// URL output, also where the pack is staged before it is uploaded.
    #[arg(long, value_name = "DIR")]
    pub temp: Option<PathBuf>,
    /// Threads for validating the input [default: all cores]; the result never depends on it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: Option<u64>,
    /// Replace a pack already in the output folder, with the companion families its
    /// metadata.db records (search, attached ones); the old one stays until the new one
    /// is complete. Companion files it does not record are refused.
    #[arg(long)]
    pub overwrite: bool,
    /// Continue an interrupted shuffle (same options) from its last completed bucket.
    #[arg(long)]
    pub resume: bool,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
    /// Print the summary and quality report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

impl ShuffleArgs {
    /// The pack to shuffle, however it was given.
    pub fn input(&self) -> &Path {
        self.pack
            .as_deref()
            .or(self.input_flag.as_deref())
            .expect("clap requires PACK or --input")
    }
}

/// Shuffles the pack `args` name, telling what the library notices on stderr, and prints the
/// summary on stdout.
pub fn run(args: &ShuffleArgs) -> Result<()> {
    let started = Instant::now();
    let summary = crate::shuffle(args.input(), &args.output, &options(args))?;
    print_summary(args, &summary, started.elapsed().as_secs_f64());
    Ok(())
}

/// The library's options from the arguments (what they do not set stays the default).
fn options(args: &ShuffleArgs) -> ShuffleOptions {
    let mut options = ShuffleOptions::default()
        .seed(args.seed)
        .memory(args.memory)
        .overwrite(args.overwrite)
        .resume(args.resume)
        .progress(crate::cmd::progress::Bars::unless(args.quiet))
        .on_notice(print_notice);
    if let Some(rows) = args.shard_rows {
        options = options.shard_rows(rows);
    }
    if let Some(temp) = &args.temp {
        options = options.temp(temp);
    }
    if let Some(workers) = args.workers {
        options = options.workers(workers as usize);
    }
    options
}

/// What the shuffle tells on the way, as the command has always said it.
fn print_notice(notice: &ShuffleNotice) {
    match notice {
        ShuffleNotice::StartingOver {
            work,
            buckets_done,
            buckets,
        } => eprintln!(
            "found an interrupted shuffle in {} ({buckets_done} of {buckets} buckets done); starting over (`--resume` with the same options would continue it)",
            work.display(),
        ),
    }
}

/// The summary and quality report: a line each in text, one document with `--json`.
fn print_summary(args: &ShuffleArgs, summary: &ShuffleSummary, elapsed: f64) {
    let (q, rows) = (&summary.quality, summary.rows);
    let max_share = q.shard_max_run_share.iter().copied().fold(0.0, f64::max);
    let mbps = rows as f64 * ROW_BYTES as f64 / 1e6 / elapsed.max(1e-9);
    if args.json {
        println!(
            "{}",
            json!({
                "output": args.output.display().to_string(),
                "rows": rows,
                "seed": args.seed,
                "buckets": summary.buckets,
                "quality": q,
                "legacy_ev_legal_changed": summary.legacy_ev_legal_changed,
                "published": summary.uploaded,
                "elapsed_s": elapsed,
                "mb_per_s": mbps,
            })
        );
        return;
    }
    println!(
        "shuffled {} rows into {} ({} shard{}, seed {}, {} buckets)",
        thousands(rows),
        args.output.display(),
        q.shard_max_run_share.len(),
        if q.shard_max_run_share.len() == 1 {
            ""
        } else {
            "s"
        },
        args.seed,
        summary.buckets
    );
    if let Some(up) = &summary.uploaded {
        println!("  published to {up}");
    }
    println!(
        "  largest share of one run in a shard: {:.3}% ({})",
        max_share * 100.0,
        q.verdict()
    );
    println!(
        "  rows from one run per {WINDOW}-row window: mean of the max {:.2}, max {} ({} windows)",
        q.window_mean_max_run_rows, q.window_max_run_rows, q.windows
    );
    if let Some(n) = summary.legacy_ev_legal_changed {
        println!(
            "  legacy 46-byte input rows upgraded: recomputing ev_legal from the board changed {}",
            progress::count(n, "row", "rows")
        );
    }
    println!("  elapsed {elapsed:.2} s, {mbps:.0} MB/s");
}
