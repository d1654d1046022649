//! `pack`: raw drop → pack. The story: find the runs, parse them in parallel, write them in
//! run-id order through a bounded window into staged shards + metadata.db, publish, summarise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::json;

use crate::format::board::LineTables;
use crate::format::metadata::{
    self, FindingRecord, MetadataWriter, PackFacts, RunDetails, RunRecord, ShardRecord,
};
use crate::format::row::remap_rows;
use crate::format::valuation::{MAX_NAMES, ValuationTable};
use crate::ordered::ordered_try_map;
use crate::pack_dir::{OutputDir, write_valuations};
use crate::progress::{self, thousands};
use crate::raw::discover::{Discovery, RunSource, discover};
use crate::raw::run::{FindingKind, ParsedRun, RunError, RunParser};
use crate::shard_writer::ShardWriter;

/// Examples of each finding kind kept for the summary and metadata.db.
const EXAMPLES_KEPT: usize = 20;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer pack --input raw/ --output packs/d6
  dataset-packer pack --input raw/ --output packs/d6 --shard-rows 10000000 --workers 8 --overwrite
  dataset-packer pack --input raw/ --output packs/d6 --skip-invalid --json > summary.json")]
pub struct PackArgs {
    /// Folder of raw self-play logs (BASE.meta.json[.gz] + BASE.jsonl.gz), walked recursively.
    #[arg(long, value_name = "RAW_DIR")]
    pub input: PathBuf,
    /// Folder to write the pack into (created if missing).
    #[arg(long, value_name = "PACK_DIR")]
    pub output: PathBuf,
    /// Rows per shard (steps-00000.npy, …); without it, one steps.npy.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub shard_rows: Option<u64>,
    /// Parser threads [default: all cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: Option<u64>,
    /// Replace a pack already in the output folder (the old one stays until the new one is complete).
    #[arg(long)]
    pub overwrite: bool,
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
    #[arg(long, value_name = "I/N", value_parser = parse_partition)]
    pub partition: Option<Partition>,
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

pub fn run(args: &PackArgs) -> Result<()> {
    let started = Instant::now();
    let workers = args
        .workers
        .map_or_else(crate::default_workers, |w| w as usize);
    let out = OutputDir::open(&args.output, args.overwrite)?;
    let mut found = discover(&args.input)?;
    for w in &found.warnings {
        log::warn!("{w}");
    }
    let full_run_count = found.runs.len();
    if found.runs.is_empty() {
        bail!(
            "no runs in {}: no *.meta.json or *.meta.json.gz sidecars found{}",
            args.input.display(),
            if found.orphans.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} .jsonl.gz files without a sidecar)",
                    found.orphans.len()
                )
            }
        );
    }
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
    let summary = build(args, &found, &staging, workers, started, full_run_count)?;
    out.publish()?;
    summary.print(args.json, &args.output, started.elapsed().as_secs_f64());
    Ok(())
}

/// Parses every run and writes the pack into `staging`.
fn build(
    args: &PackArgs,
    found: &Discovery,
    staging: &Path,
    workers: usize,
    started: Instant,
    full_run_count: usize,
) -> Result<Summary> {
    let mut packer = Packer::new(staging, args.shard_rows, args.skip_invalid)?;
    let tables = LineTables::new();
    let total_bytes: u64 = found.runs.iter().map(|r| r.compressed_bytes).sum();
    let bar = progress::bytes_bar(total_bytes, args.quiet, "pack");
    // Each run carries the id it gets if no run before it is left out.
    let items: Vec<(u32, &RunSource)> = (0u32..).zip(&found.runs).collect();
    let outcome = ordered_try_map(
        &items,
        workers,
        workers * 2,
        || RunParser::new(&tables),
        |parser, &(id, src)| parser.parse(src, id),
        |i, parsed| {
            let src = &found.runs[i];
            let accepted = packer.accept(src, parsed);
            bar.inc(src.compressed_bytes);
            let rows = packer.shards.total_rows();
            let rate = rows as f64 / started.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!(
                "{} rows, {} rows/s",
                thousands(rows),
                thousands(rate as u64)
            ));
            accepted
        },
    );
    bar.finish_and_clear();
    outcome?;
    packer.finish(args, found, total_bytes, full_run_count)
}

/// Counts and first examples of each finding kind over the whole pack.
#[derive(Default)]
struct Findings {
    counts: BTreeMap<&'static str, u64>,
    examples: Vec<FindingRecord>,
}

impl Findings {
    fn add(
        &mut self,
        kind: &'static str,
        n: u64,
        examples: impl IntoIterator<Item = FindingRecord>,
    ) {
        if n == 0 {
            return;
        }
        let before = *self.counts.get(kind).unwrap_or(&0);
        *self.counts.entry(kind).or_default() += n;
        let room = EXAMPLES_KEPT.saturating_sub(before as usize);
        self.examples.extend(examples.into_iter().take(room));
    }
}

/// The single writer: receives parsed runs in run order and writes them.
struct Packer {
    staging: PathBuf,
    shards: ShardWriter,
    db: MetadataWriter,
    valuations: ValuationTable,
    skip_invalid: bool,
    next_run_id: u32,
    skipped: Vec<(String, String)>,
    findings: Findings,
}

impl Packer {
    fn new(staging: &Path, shard_rows: Option<u64>, skip_invalid: bool) -> Result<Packer> {
        Ok(Packer {
            staging: staging.to_path_buf(),
            shards: ShardWriter::new(staging, shard_rows),
            db: MetadataWriter::create(&staging.join(metadata::FILE_NAME))?,
            valuations: ValuationTable::new(),
            skip_invalid,
            next_run_id: 0,
            skipped: Vec::new(),
            findings: Findings::default(),
        })
    }

    /// Writes a parsed run, or deals with an invalid one; an error ends the pack.
    fn accept(&mut self, src: &RunSource, parsed: Result<ParsedRun, RunError>) -> Result<()> {
        match parsed.and_then(|run| self.assign_valuations(src, run)) {
            Ok(run) => self.write_run(src, run),
            Err(e) => self.reject(src, e),
        }
    }

    /// An invalid run: skipped and recorded with --skip-invalid, otherwise the end of the pack.
    fn reject(&mut self, src: &RunSource, e: RunError) -> Result<()> {
        if !self.skip_invalid {
            bail!(
                "invalid run: {e}\n(nothing was written; pass --skip-invalid to leave invalid runs out)"
            );
        }
        log::warn!("skipping invalid run: {e}");
        let path = rel_string(&src.rel_sidecar);
        self.db.insert_skipped(&path, &e.to_string())?;
        self.skipped.push((path, e.to_string()));
        Ok(())
    }

    /// Maps the run's local valuation ids to pack ids, adding new names in first-appearance
    /// order; a run that would bring a 257th name is invalid.
    fn assign_valuations(
        &mut self,
        src: &RunSource,
        mut run: ParsedRun,
    ) -> Result<ParsedRun, RunError> {
        if !run.has_extra_valuations() {
            return Ok(run);
        }
        let names = run.valuation_names.iter().map(String::as_str);
        let new = self.valuations.count_new(names);
        if self.valuations.len() + new > MAX_NAMES {
            // Find the line of the name that would be the 257th.
            let mut room = MAX_NAMES - self.valuations.len();
            let mut line = None;
            for (name, first_line) in run.valuation_names.iter().zip(&run.valuation_first_lines) {
                if self.valuations.id(name).is_none() {
                    if room == 0 {
                        line = Some((*first_line, name.clone()));
                        break;
                    }
                    room -= 1;
                }
            }
            let (line, name) = line.expect("an overflowing name exists");
            return Err(RunError {
                file: src.rows.clone(),
                line: Some(line),
                message: format!(
                    "valuation_type {name:?} would be the 257th distinct name; at most {MAX_NAMES} fit"
                ),
            });
        }
        let mut map = [0u8; 256];
        for (local, name) in run.valuation_names.iter().enumerate() {
            map[local] = self.valuations.intern(name).expect("room was checked");
        }
        remap_rows(&mut run.rows, |id| id, Some(&map));
        Ok(run)
    }

    fn write_run(&mut self, src: &RunSource, mut run: ParsedRun) -> Result<()> {
        let run_id = self.next_run_id;
        self.next_run_id = run_id.checked_add(1).context("more than 2^32 runs")?;
        if run.stamped_run_id != run_id {
            remap_rows(&mut run.rows, |_| run_id, None);
        }
        let first_row = self.shards.position();
        self.shards.write_rows(&run.rows)?;
        let s = &run.sidecar;
        let source_path = rel_string(&src.rel_sidecar);
        self.db.insert_run(&RunRecord {
            run_id,
            seed: s.seed,
            steps: run.row_count,
            max_score: s.score,
            highest_tile: s.max_tile,
            details: RunDetails {
                source_path: Some(source_path.clone()),
                rows_path: Some(rel_string(&src.rel_rows)),
                depth: s.depth,
                game_index: s.game_index,
                num_moves: Some(s.num_moves),
                max_rank: s.max_rank,
                sum_tile: s.sum_tile,
                seconds: s.seconds,
                source_pack: None,
                source_run_id: None,
            },
            first_row: Some(first_row),
        })?;
        self.record_findings(run_id, &source_path, &rel_string(&src.rel_rows), &run);
        Ok(())
    }

    /// Tallies a run's findings; row findings name the rows file, run findings the sidecar.
    fn record_findings(
        &mut self,
        run_id: u32,
        sidecar_path: &str,
        rows_path: &str,
        run: &ParsedRun,
    ) {
        let record = |kind: &str, line: Option<u64>, step_index, detail: String| FindingRecord {
            kind: kind.to_string(),
            run_id: Some(run_id),
            source_path: if line.is_some() {
                rows_path
            } else {
                sidecar_path
            }
            .to_string(),
            line,
            step_index,
            detail,
        };
        for kind in [
            FindingKind::IllegalMovePlayed,
            FindingKind::EvOnIllegalMove,
            FindingKind::StepIndexGap,
        ] {
            let examples = run
                .findings
                .examples
                .iter()
                .filter(|f| f.kind == kind)
                .map(|f| {
                    record(
                        kind.name(),
                        Some(f.line),
                        Some(f.step_index),
                        f.detail.clone(),
                    )
                });
            self.findings
                .add(kind.name(), run.findings.counts[kind as usize], examples);
        }
        if run.row_count as i64 != run.sidecar.num_moves {
            let detail = format!(
                "sidecar num_moves {} but {} rows",
                run.sidecar.num_moves, run.row_count
            );
            self.findings.add(
                "num_moves_mismatch",
                1,
                [record("num_moves_mismatch", None, None, detail)],
            );
        }
        if run.row_count == 0 {
            self.findings.add(
                "empty_run",
                1,
                [record(
                    "empty_run",
                    None,
                    None,
                    "the run has no rows".into(),
                )],
            );
        }
    }

    fn finish(
        mut self,
        args: &PackArgs,
        found: &Discovery,
        compressed_bytes: u64,
        full_run_count: usize,
    ) -> Result<Summary> {
        let orphan_examples = found.orphans.iter().map(|p| FindingRecord {
            kind: "orphan_rows_file".into(),
            run_id: None,
            source_path: rel_string(p),
            line: None,
            step_index: None,
            detail: "rows file without a sidecar (game still running or killed); skipped".into(),
        });
        self.findings.add(
            "orphan_rows_file",
            found.orphans.len() as u64,
            orphan_examples,
        );
        for orphan in &found.orphans {
            self.db.insert_orphan(&rel_string(orphan))?;
        }
        if self.next_run_id == 0 && args.partition.is_none() {
            bail!(
                "no valid runs in {}: all {} runs were invalid and skipped",
                args.input.display(),
                self.skipped.len()
            );
        }
        let rows = self.shards.total_rows();
        let shards = self.shards.finish()?;
        for shard in &shards {
            self.db.insert_shard(shard)?;
        }
        for (kind, count) in &self.findings.counts {
            self.db.set_finding_count(kind, *count)?;
        }
        for example in &self.findings.examples {
            self.db.insert_finding(example)?;
        }
        let input = std::fs::canonicalize(&args.input).unwrap_or_else(|_| args.input.clone());
        self.db.set_pack_facts(&PackFacts {
            command: "pack",
            shard_rows: args.shard_rows,
            total_rows: rows,
            total_runs: u64::from(self.next_run_id),
            shard_count: shards.len(),
            shuffled: false,
        })?;
        let session = [
            ("source_root", input.display().to_string()),
            ("skipped_runs", self.skipped.len().to_string()),
            ("orphan_rows_files", found.orphans.len().to_string()),
        ];
        for (k, v) in &session {
            self.db.set_session(k, v)?;
        }
        if let Some(p) = args.partition {
            let range = p.range(full_run_count);
            self.db
                .set_session("partition", &format!("{}/{}", p.index, p.count))?;
            self.db
                .set_session("partition_first_run", &range.start.to_string())?;
            self.db
                .set_session("partition_runs", &range.len().to_string())?;
            self.db
                .set_session("full_run_count", &full_run_count.to_string())?;
        }
        self.db.finish()?;
        write_valuations(&self.staging, &self.valuations)?;
        Ok(Summary {
            runs: self.next_run_id,
            rows,
            shards,
            skipped: self.skipped,
            findings: self.findings,
            compressed_bytes,
        })
    }
}

/// A path relative to the input root as stored in metadata.db: '/'-separated.
fn rel_string(p: &Path) -> String {
    p.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// What a pack run did, for the user.
struct Summary {
    runs: u32,
    rows: u64,
    shards: Vec<ShardRecord>,
    skipped: Vec<(String, String)>,
    findings: Findings,
    compressed_bytes: u64,
}

impl Summary {
    fn print(&self, as_json: bool, output: &Path, elapsed: f64) {
        let rows_per_s = self.rows as f64 / elapsed.max(1e-9);
        if as_json {
            let doc = json!({
                "output": output.display().to_string(),
                "runs": self.runs,
                "rows": self.rows,
                "shards": self.shards.iter().map(|s| json!({"file": s.file_name, "rows": s.rows, "bytes": s.bytes, "crc32c": format!("{:08x}", s.crc32c)})).collect::<Vec<_>>(),
                "skipped_runs": self.skipped.iter().map(|(p, r)| json!({"path": p, "reason": r})).collect::<Vec<_>>(),
                "orphan_rows_files": self.findings.counts.get("orphan_rows_file").copied().unwrap_or(0),
                "findings": self.findings.counts,
                "finding_examples": self.findings.examples.iter().map(|f| json!({"kind": f.kind, "run_id": f.run_id, "source_path": f.source_path, "line": f.line, "step_index": f.step_index, "detail": f.detail})).collect::<Vec<_>>(),
                "compressed_bytes": self.compressed_bytes,
                "elapsed_s": elapsed,
                "rows_per_s": rows_per_s,
            });
            println!("{doc}");
            return;
        }
        let shard_word = if self.shards.len() == 1 {
            "shard"
        } else {
            "shards"
        };
        println!(
            "packed {} runs, {} rows into {} {shard_word} in {}",
            thousands(u64::from(self.runs)),
            thousands(self.rows),
            self.shards.len(),
            output.display()
        );
        let orphans = self
            .findings
            .counts
            .get("orphan_rows_file")
            .copied()
            .unwrap_or(0);
        println!(
            "  skipped: {} invalid runs, {} rows files without a sidecar",
            self.skipped.len(),
            orphans
        );
        for (path, reason) in &self.skipped {
            println!("    {path}: {reason}");
        }
        let row_findings: Vec<_> = self
            .findings
            .counts
            .iter()
            .filter(|(k, _)| **k != "orphan_rows_file")
            .collect();
        if row_findings.is_empty() && orphans == 0 {
            println!("  findings: none");
        } else {
            println!("  findings:");
            for (kind, count) in &self.findings.counts {
                println!("    {kind}: {}", thousands(*count));
                for f in self
                    .findings
                    .examples
                    .iter()
                    .filter(|f| f.kind == **kind)
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
            thousands(rows_per_s as u64),
            self.compressed_bytes as f64 / 1e6 / elapsed.max(1e-9)
        );
    }
}
