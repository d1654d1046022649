//! `pack`: raw drop → pack. The story: find the runs, parse them in parallel (each worker also
//! fingerprints its run), write them in run-id order through a bounded window into staged
//! shards + metadata.db (a run whose content is already in the pack is a duplicate: reported,
//! or left out with `--dedupe`), publish, summarise. `--update` adds a drop's new runs to an
//! existing pack instead: see [`crate::cmd::pack_update`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;

use crate::format::metadata::{self, MetadataWriter, PackFacts};
use crate::format::search;
use crate::format::valuation::ValuationTable;
use crate::pack::publish::OutputDir;
use crate::pack::shard_writer::{FileLayout, ShardWriter};
use crate::packer::{PackOptions, Packer, PackerStart, Summary, discover_runs, parse_and_write};
use crate::progress::{count, thousands};
use crate::raw::discover::RunSource;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer pack --input raw/ --output packs/d6
  dataset-packer pack --input raw/ --output packs/d6 --shard-rows 10000000 --workers 8 --overwrite
  dataset-packer pack --input raw/ --output packs/d6 --skip-invalid --json > summary.json
  dataset-packer pack --input raw/ --output packs/d6 --update --dedupe --skip-invalid   # from cron

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
    /// Folder to write the pack into (created if missing).
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
    /// Replace a pack already in the output folder (the old one stays until the new one is complete).
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
    pub partition: Option<Partition>,
}

impl PackArgs {
    pub fn workers(&self) -> usize {
        self.workers
            .map_or_else(crate::default_workers, |w| w as usize)
    }
}

/// `--partition I/N`: the I-th of N contiguous slices of the run list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub index: u64,
    pub count: u64,
}

impl Partition {
    /// The run positions (in full-drop order) this partition holds.
    pub fn range(&self, runs: usize) -> std::ops::Range<usize> {
        let at = |i: u64| (i as u128 * runs as u128 / self.count as u128) as usize;
        at(self.index)..at(self.index + 1)
    }
}

fn parse_partition(text: &str) -> Result<Partition, String> {
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
    Ok(Partition { index, count })
}

/// A new pack (`--update` is [`crate::cmd::pack_update::run`], which `main` calls instead).
pub fn run(args: &PackArgs) -> Result<()> {
    let started = Instant::now();
    let out = OutputDir::open(&args.output, args.overwrite)?;
    pack_new(args, out, started)
}

/// A plain pack of the whole input (or of one partition of it) into `out`.
pub(crate) fn pack_new(args: &PackArgs, out: OutputDir, started: Instant) -> Result<()> {
    let workers = args.workers();
    let mut found = discover_runs(&args.input)?;
    let full_run_count = found.runs.len();
    if let Some(p) = args.partition {
        let range = p.range(full_run_count);
        log::info!(
            "partition {}/{}: runs {range:?} of {full_run_count}",
            p.index,
            p.count
        );
        found.runs = found.runs.drain(range).collect();
        if p.index != 0 {
            // Orphans belong to the whole drop: partition 0 reports them, so a merge counts them once.
            found.orphans.clear();
        }
    }
    log::info!(
        "{} runs, {} orphan rows files, {} workers",
        found.runs.len(),
        found.orphans.len(),
        workers
    );

    let staging = out.begin_staging()?;
    let mut packer = Packer::new(
        PackerStart {
            shards: ShardWriter::new(&staging, args.shard_rows),
            search: args
                .search_stats
                .then(|| ShardWriter::with_layout(&staging, args.shard_rows, FileLayout::search())),
            db: MetadataWriter::create(&staging.join(metadata::FILE_NAME))?,
            next_run_id: 0,
            valuations: ValuationTable::new(),
            in_pack: HashMap::new(),
            recheck: HashMap::new(),
            finding_counts: BTreeMap::new(),
        },
        PackOptions {
            skip_invalid: args.skip_invalid,
            dedupe: args.dedupe,
        },
    );
    let runs: Vec<&RunSource> = found.runs.iter().collect();
    parse_and_write(&runs, &mut packer, workers, args.quiet, started)?;
    if packer.runs_written() == 0 && args.partition.is_none() {
        bail!(
            "no valid runs in {}: all {} runs were {}",
            args.input.display(),
            packer.skipped_runs(),
            if args.dedupe {
                "invalid or duplicates, and skipped"
            } else {
                "invalid and skipped"
            }
        );
    }
    let packed = packer.finish(&found.orphans)?;
    let input = std::fs::canonicalize(&args.input).unwrap_or_else(|_| args.input.clone());
    packed.db.set_pack_facts(&PackFacts {
        command_line: crate::cli::command_line(),
        command: "pack",
        shard_rows: args.shard_rows,
        total_rows: packed.total_rows,
        total_runs: u64::from(packed.next_run_id),
        shard_count: packed.shards.len(),
        shuffled: false,
    })?;
    let session = [
        ("source_root", input.display().to_string()),
        ("skipped_runs", packed.skipped.len().to_string()),
        ("orphan_rows_files", found.orphans.len().to_string()),
        (
            search::ROWS_NOT_KEPT,
            packed.search_rows_not_kept.to_string(),
        ),
    ];
    for (k, v) in &session {
        packed.db.set_session(k, v)?;
    }
    if let Some(p) = args.partition {
        let range = p.range(full_run_count);
        let facts = [
            ("partition", format!("{}/{}", p.index, p.count)),
            ("partition_first_run", range.start.to_string()),
            ("partition_runs", range.len().to_string()),
            ("full_run_count", full_run_count.to_string()),
        ];
        for (k, v) in &facts {
            packed.db.set_session(k, v)?;
        }
    }
    let summary = packed.commit(found.runs.iter().map(|r| r.rows_bytes).sum())?;
    out.publish()?;
    print_summary(
        &summary,
        args.json,
        &args.output,
        started.elapsed().as_secs_f64(),
    );
    Ok(())
}

/// Prints the summary: the headline and [`print_details`], or one JSON document.
fn print_summary(summary: &Summary, as_json: bool, output: &Path, elapsed: f64) {
    let s = summary;
    if as_json {
        println!("{}", s.to_json(output, elapsed));
        return;
    }
    println!(
        "packed {}, {} into {} in {}",
        count(u64::from(s.runs), "run", "runs"),
        count(s.rows, "row", "rows"),
        count(s.shards.len() as u64, "shard", "shards"),
        output.display()
    );
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
