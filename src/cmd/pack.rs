//! `pack`: raw drop → pack. The story: find the runs, parse them in parallel (each worker also
//! fingerprints its run), write them in run-id order through a bounded window into staged
//! shards + metadata.db (a run whose content is already in the pack is a duplicate: reported,
//! or left out with `--dedupe`), publish, summarise. The work is the library's
//! ([`crate::pack_raw`]); this module holds the arguments, turns them into
//! [`RawPackOptions`], and prints the summary. `--update` adds a drop's new runs to an
//! existing pack instead: see [`crate::cmd::pack_update`].

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use clap::Args;

use crate::packer::Summary;
use crate::progress::{count, thousands};
use crate::{RawPackOptions, RawPackSummary, Uploaded, pack_raw};

/// The hint for plain paths given to `pack` (`pack raw/ packs/d6`): the command with
/// `--input` and `--output` in their place when there are two, else where the folders go.
///
/// ```
/// use dataset_packer::cmd::pack::positional_hint;
/// let args: Vec<String> = ["real", "packs/pos", "--workers", "2"].map(String::from).into();
/// assert!(positional_hint(&args).contains("dataset-packer pack --input real --output packs/pos --workers 2"));
/// ```
pub fn positional_hint(args: &[String]) -> String {
    // Options of `pack` that take a value: the word after them is not a stray path.
    const VALUED: [&str; 6] = [
        "--input",
        "--output",
        "--shard-rows",
        "--workers",
        "--partition",
        "--drop-companion",
    ];
    let stray: Vec<usize> = (0..args.len())
        .filter(|&i| {
            !args[i].starts_with('-') && (i == 0 || !VALUED.contains(&args[i - 1].as_str()))
        })
        .collect();
    let general = "pack takes its folders as options: --input RAW_DIR --output PACK_DIR";
    if let [raw, out] = stray[..] {
        let mut line = format!(
            "dataset-packer pack --input {} --output {}",
            args[raw], args[out]
        );
        for (i, a) in args.iter().enumerate() {
            if i != raw && i != out {
                line.push(' ');
                line.push_str(a);
            }
        }
        format!("{general}, e.g.\n  {line}")
    } else {
        general.to_string()
    }
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer pack --input raw/ --output packs/d6
  dataset-packer pack --input raw/ --output packs/d6 --shard-rows 10000000 --workers 8 --overwrite
  dataset-packer pack --input raw/ --output packs/d6 --skip-invalid --json > summary.json
  dataset-packer pack --input raw/ --output packs/d6 --update --dedupe --skip-invalid   # from cron
  dataset-packer pack --input raw/ --output s3://training/team/d6 --shard-rows 10M   # to object storage
  dataset-packer pack --input raw/ --output s3://training/team/d6 --update   # downloads, updates, publishes

Duplicates: every run gets a content fingerprint (run_details.fingerprint). A run with the same
content as an earlier one (a replayed seed, a copied folder) is packed and reported as a
duplicate_run finding; with --dedupe it is left out and listed in skipped_runs.

--update adds the runs of RAW_DIR that are not in PACK_DIR yet, in time proportional to what is
new: a run already packed from the same sidecar path with the same file sizes is not read again,
and one whose content is already in the pack (a moved or copied folder) is skipped. New runs get
the next ids; existing runs, rows and shards never change. A sharded pack gets its last, partial
shard rewritten (as a staged copy) and new shards after it; a single-file pack (steps.npy) is
copied whole to be extended, so pack growing datasets with --shard-rows. A run packed from
BASE.jsonl whose rows were gzipped since (or unzipped) is read once: the same content is the same
run (nothing added, the pack records the new file), other content is a changed run. If PACK_DIR
holds no pack yet, --update is a plain pack.

Search statistics: rows of the current logger end with a `search` object (nodes searched, cache
hits, …). Without --search-stats they are read (and checked) but not kept, and the session fact
search_rows_not_kept counts the rows whose statistics were dropped. With --search-stats they are
kept as the companion family `search`: read it with NumPy (np.load(\"search-00000.npy\")), with
Pack(...).batches(companions=[\"search\"]) in Python, or see it in `stats` and `show`:
  dataset-packer pack --input raw/ --output packs/d6 --search-stats

Rows files: BASE.jsonl.gz (any number of gzip members) or plain BASE.jsonl (the logger without
-Z); one drop can mix both, e.g.
  dataset-packer pack --input raw_plain_and_gzipped/ --output packs/d2

Speed: on x86-64 CPUs with AVX2 (2015 on) rows in the logger's layout are read with vector
instructions; DATASET_PACKER_SCALAR=1 turns that off (same output, slower).")]
pub struct PackArgs {
    /// Folder of raw self-play logs (BASE.meta.json[.gz] + BASE.jsonl.gz or plain BASE.jsonl),
    /// walked recursively.
    #[arg(long, value_name = "RAW_DIR")]
    pub input: PathBuf,
    /// Folder to write the pack into (created if missing), or a URL in object storage
    /// (s3://bucket/prefix, gs://, az://): the pack is built in the cache folder's staging/
    /// and published there as a commit (see `gc` for what old commits leave).
    #[arg(long, value_name = "PACK_DIR")]
    pub output: PathBuf,
    /// Rows per shard (steps-00000.npy, …), e.g. 1000000 or 1M (k, M, G = 10^3, 10^6, 10^9);
    /// without it, one steps.npy. With --update it must match the pack's (taken from it when
    /// not given).
    #[arg(long, value_name = "N", value_parser = crate::cli::parse_rows)]
    pub shard_rows: Option<u64>,
    /// Parser threads [default: all cores]. Peak memory ≈ 10 MiB + per worker: a run's
    /// .jsonl.gz size, + its decompressed size when at most 8 MiB (longer runs are streamed:
    /// 1 MiB; a plain .jsonl always is), + 96 bytes per row of a run.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: Option<u64>,
    /// Replace a pack already in the output folder, with the companion families its
    /// metadata.db records (search, attached ones); the old one stays until the new one
    /// is complete. Companion files it does not record are refused.
    #[arg(long, conflicts_with = "update")]
    pub overwrite: bool,
    /// Add the new runs of the input to the pack already in the output folder.
    #[arg(long)]
    pub update: bool,
    /// Leave out runs whose content equals an earlier run's (listed in skipped_runs).
    #[arg(long)]
    pub dedupe: bool,
    /// With --update: remove the pack's companion array family NAME (its rows would not cover
    /// the new runs); repeatable. Without it, --update refuses a pack that has companions.
    #[arg(long = "drop-companion", value_name = "NAME", requires = "update")]
    pub drop_companion: Vec<String>,
    /// Keep each row's search statistics (the current logger's `search` object) in the
    /// companion family `search` (search-NNNNN.npy beside the shards, one structured row per
    /// step row). With --update, required when the pack has that family, refused when it has not.
    #[arg(long)]
    pub search_stats: bool,
    /// Leave invalid runs out (listed in the summary and metadata.db) instead of stopping.
    #[arg(long)]
    pub skip_invalid: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Print the final summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Pack only the I-th of N contiguous, near-equal slices of the drop's runs (0 ≤ I < N), to
    /// pack one drop on several machines and `merge` the parts in order.
    #[arg(long, value_name = "I/N", value_parser = parse_partition, conflicts_with = "update")]
    pub partition: Option<(u64, u64)>,
}

impl PackArgs {
    /// The library's options for these arguments (the command line the pack records is this
    /// process's, the library's default).
    pub fn options(&self) -> RawPackOptions {
        let mut o = RawPackOptions::default()
            .update(self.update)
            .overwrite(self.overwrite)
            .dedupe(self.dedupe)
            .search_stats(self.search_stats)
            .skip_invalid(self.skip_invalid)
            .progress(crate::cmd::progress::Bars::unless(self.quiet));
        if let Some(rows) = self.shard_rows {
            o = o.shard_rows(rows);
        }
        if let Some(workers) = self.workers {
            o = o.workers(workers as usize);
        }
        if let Some((index, count)) = self.partition {
            o = o.partition(index, count);
        }
        for name in &self.drop_companion {
            o = o.drop_companion(name);
        }
        o
    }

    /// Runs the library with these arguments, timing it.
    pub(crate) fn pack(&self) -> Result<(RawPackSummary, f64)> {
        let started = Instant::now();
        let summary = pack_raw(&self.input, &self.output, &self.options())?;
        Ok((summary, started.elapsed().as_secs_f64()))
    }
}

fn parse_partition(text: &str) -> Result<(u64, u64), String> {
    let (i, n) = text.split_once('/').ok_or("expected I/N, e.g. 0/4")?;
    let index: u64 = i
        .trim()
        .parse()
        .map_err(|_| format!("{i:?} is not a number"))?;
    let count: u64 = n
        .trim()
        .parse()
        .map_err(|_| format!("{n:?} is not a number"))?;
    if count == 0 || index >= count {
        return Err(format!("need 0 <= I < N, got {index}/{count}"));
    }
    Ok((index, count))
}

/// A new pack (`--update` is [`crate::cmd::pack_update::run`], which `main` calls instead).
pub fn run(args: &PackArgs) -> Result<()> {
    let (summary, elapsed) = args.pack()?;
    print_summary(
        &summary.summary,
        args.json,
        &args.output,
        elapsed,
        summary.uploaded(),
    );
    Ok(())
}

/// Prints the summary: the headline, what was uploaded (for a URL) and [`print_details`], or
/// one JSON document.
pub(crate) fn print_summary(
    summary: &Summary,
    as_json: bool,
    output: &Path,
    elapsed: f64,
    uploaded: Option<&Uploaded>,
) {
    let s = summary;
    if as_json {
        let mut doc = s.to_json(output, elapsed);
        doc["published"] = serde_json::json!(uploaded);
        println!("{doc}");
        return;
    }
    println!(
        "packed {}, {} into {} in {}",
        count(u64::from(s.runs), "run", "runs"),
        count(s.rows, "row", "rows"),
        count(s.shards.len() as u64, "shard", "shards"),
        output.display()
    );
    if let Some(up) = uploaded {
        println!("  published to {up}");
    }
    print_details(s, elapsed);
}

/// Skipped runs, findings and speed: the lines after the headline.
pub(crate) fn print_details(summary: &Summary, elapsed: f64) {
    let s = summary;
    let orphans = s.findings.count("orphan_rows_file");
    println!(
        "  skipped: {} (invalid or duplicate), {} without a sidecar",
        count(s.skipped.len() as u64, "run", "runs"),
        count(orphans, "rows file", "rows files")
    );
    for (path, reason) in &s.skipped {
        println!("    {path}: {reason}");
    }
    if s.findings.counts.is_empty() {
        println!("  findings: none");
    } else {
        println!("  findings:");
        for (kind, count) in &s.findings.counts {
            println!("    {kind}: {}", thousands(*count));
            for f in s
                .findings
                .examples
                .iter()
                .filter(|f| f.kind == *kind)
                .take(3)
            {
                let at = match f.line {
                    Some(line) => format!("{}:{line}", f.source_path),
                    None => f.source_path.clone(),
                };
                println!("      e.g. {at}: {}", f.detail);
            }
        }
    }
    println!(
        "  elapsed {elapsed:.2} s, {} rows/s, {:.1} MB/s compressed input",
        thousands((s.rows as f64 / elapsed.max(1e-9)) as u64),
        s.compressed_bytes as f64 / 1e6 / elapsed.max(1e-9)
    );
}
