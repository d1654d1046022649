//! A new pack: the whole drop (or one partition of it) parsed and written through the
//! [`Packer`], its session facts recorded, then published. [`super::pack_raw`] runs it, and
//! an update when the output holds no pack yet.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use super::{Job, Packed, Packer, PackerStart, Summary, discover_runs, parse_and_write};
use crate::error::{Result, fail};
use crate::format::metadata::PackFacts;
use crate::format::search;
use crate::format::valuation::ValuationTable;
use crate::pack::StagedPack;
use crate::pack::publish::OutputDir;
use crate::pack::shard_writer::FileLayout;
use crate::raw::discover::{Discovery, RunSource};
use crate::thread_cpu;

/// A partition: the I-th of N contiguous slices of the run list.
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

/// Packs `job.input` into a new pack in `job.output` (replacing one there with
/// `job.overwrite`), and publishes it.
pub(crate) fn pack(job: &Job) -> Result<Summary> {
    let out = OutputDir::open(&job.output, job.overwrite)?;
    pack_into(job, out)
}

/// A plain pack of the whole input (or of one partition of it) into `out`.
pub(crate) fn pack_into(job: &Job, out: OutputDir) -> Result<Summary> {
    let started = Instant::now();
    thread_cpu::enabled(); // the probe's clock starts here
    let discover = thread_cpu::Span::start("main: discover");
    let mut found = discover_runs(&job.input, job.workers)?;
    drop(discover);
    let full_run_count = found.runs.len();
    if let Some(p) = job.partition {
        keep_partition(&mut found, p);
    }
    log::info!(
        "{} runs, {} orphan rows files, {} workers",
        found.runs.len(),
        found.orphans.len(),
        job.workers
    );

    let mut staged = StagedPack::begin(out, job.shard_rows)?;
    let search = job
        .search_stats
        .then(|| staged.add_family(FileLayout::search()));
    let mut packer = Packer::new(
        PackerStart {
            staged,
            search,
            next_run_id: 0,
            valuations: ValuationTable::new(),
            in_pack: HashMap::new(),
            recheck: HashMap::new(),
            finding_counts: BTreeMap::new(),
        },
        job.options,
    );
    let runs: Vec<&RunSource> = found.runs.iter().collect();
    parse_and_write(&runs, &mut packer, job.workers, &job.progress, started)?;
    if packer.runs_written() == 0 && job.partition.is_none() {
        fail!(
            InvalidInput,
            "no valid runs in {}: all {} runs were {}",
            job.input.display(),
            packer.skipped_runs(),
            if job.options.dedupe {
                "invalid or duplicates, and skipped"
            } else {
                "invalid and skipped"
            }
        );
    }
    let finish = thread_cpu::Span::start("main: finish (close, sync, record)");
    let packed = packer.finish(&found.orphans)?;
    record_session(job, &packed, found.orphans.len(), full_run_count)?;
    drop(finish);
    let (summary, ready) = packed.commit(found.runs.iter().map(|r| r.rows_bytes).sum());
    let publish = thread_cpu::Span::start("main: publish");
    ready.publish()?;
    drop(publish);
    thread_cpu::write_report()?;
    Ok(summary)
}

/// Keeps the partition's runs of the drop (and its orphans in partition 0 only).
fn keep_partition(found: &mut Discovery, p: Partition) {
    let full_run_count = found.runs.len();
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

/// The session facts of a new pack (and of the partition it holds).
fn record_session(job: &Job, packed: &Packed, orphans: usize, full_run_count: usize) -> Result<()> {
    let input = std::fs::canonicalize(&job.input).unwrap_or_else(|_| job.input.clone());
    packed.db().set_pack_facts(&PackFacts {
        command_line: job.command_line.clone(),
        command: "pack",
        shard_rows: job.shard_rows,
        total_rows: packed.total_rows,
        total_runs: u64::from(packed.next_run_id),
        shard_count: packed.shards.len(),
        shuffled: false,
    })?;
    let session = [
        ("source_root", input.display().to_string()),
        ("skipped_runs", packed.skipped.len().to_string()),
        ("orphan_rows_files", orphans.to_string()),
        (
            search::ROWS_NOT_KEPT,
            packed.search_rows_not_kept.to_string(),
        ),
    ];
    for (k, v) in &session {
        packed.db().set_session(k, v)?;
    }
    if let Some(p) = job.partition {
        let range = p.range(full_run_count);
        let facts = [
            ("partition", format!("{}/{}", p.index, p.count)),
            ("partition_first_run", range.start.to_string()),
            ("partition_runs", range.len().to_string()),
            ("full_run_count", full_run_count.to_string()),
        ];
        for (k, v) in &facts {
            packed.db().set_session(k, v)?;
        }
    }
    Ok(())
}
