//! Writing packs from raw runs: [`pack_raw`] (the public call, with its options and summary)
//! runs a new pack ([`create`]) or an update ([`update`]), each taking a [`Job`] (the checked
//! options) and returning a summary that the command prints. Both drive the single writer
//! here, [`Packer`]: runs are parsed on worker threads (each also fingerprints its run and
//! computes its checksums), and the worker that completes the next run in run-id order gives it
//! to the writer, within a bounded window; the writer places their rows in the staged shards
//! (and the `search` family when the statistics are kept), which the workers then copy there,
//! and records their facts in metadata.db; a run whose content is already in the pack is a
//! duplicate, reported or left out. The caller opens the output, adds its session facts and
//! publishes.

mod carry;
pub(crate) mod create;
mod existing;
mod pack_raw;
pub(crate) mod update;

pub use pack_raw::{RawPackOptions, RawPackSummary, pack_raw};

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use serde_json::json;

use crate::crc::crc32c;
use crate::error::{Error, ErrorKind, Result, fail};
use crate::findings::{DUPLICATE_RUN, Duplicates, Tally, duplicate_detail};
use crate::format::board::LineTables;
use crate::format::fingerprint::{self, Fingerprint, RunFacts};
use crate::format::metadata::{FindingRecord, MetadataWriter, RunDetails, RunRecord, ShardRecord};
use crate::format::row::remap_rows;
use crate::format::valuation::{MAX_NAMES, ValuationTable};
use crate::ordered::ordered_try_commit;
use crate::pack::StagedPack;
use crate::pack::shard_writer::Placement;
use crate::progress::{Bar, Observer, Unit, thousands};
use crate::raw::discover::{Discovery, RunSource, discover, orphan_detail};
use crate::raw::run::{FindingKind, ParsedRun, RunError, RunParser};
use crate::thread_cpu::Span;

/// How the writer treats invalid and duplicate runs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PackOptions {
    /// Leave invalid runs out (recorded in skipped_runs) instead of failing.
    pub skip_invalid: bool,
    /// Leave out runs whose content equals an earlier run's.
    pub dedupe: bool,
}

/// What a pack is asked to do, as plain values: [`RawPackOptions`] once checked, with the
/// input and output folders.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    /// The raw drop, walked recursively.
    pub input: PathBuf,
    /// The pack's folder.
    pub output: PathBuf,
    /// Rows per shard; `None` is one `steps.npy` (for an update: the pack's own layout).
    pub shard_rows: Option<u64>,
    /// Parser threads.
    pub workers: usize,
    /// Replace a pack already in `output` (not with an update).
    pub overwrite: bool,
    pub options: PackOptions,
    /// Keep the rows' search statistics in the `search` family.
    pub search_stats: bool,
    /// Pack only this slice of the drop's runs (not with an update).
    pub partition: Option<create::Partition>,
    /// Companion families an update removes.
    pub drop_companions: Vec<String>,
    /// Where progress goes.
    pub progress: Observer,
    /// The command line, as the pack's session records it.
    pub command_line: String,
}

/// Walks the input on `workers` threads (as many as the parsers: `--workers` bounds every
/// thread the pack runs on, rayon's global pool would take every core); a drop without runs
/// is an error.
pub(crate) fn discover_runs(input: &Path, workers: usize) -> Result<Discovery> {
    let pool = match rayon::ThreadPoolBuilder::new()
        .num_threads(workers.max(1))
        .thread_name(|i| format!("discover-{i}"))
        .build()
    {
        Ok(pool) => pool,
        Err(e) => fail!(Io, "cannot start the threads that walk the input: {e}"),
    };
    let found = pool.install(|| discover(input))?;
    for w in &found.warnings {
        log::warn!("{w}");
    }
    if found.runs.is_empty() {
        fail!(
            InvalidInput,
            "no runs in {}: no *.meta.json or *.meta.json.gz sidecars found{}",
            input.display(),
            if found.orphans.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} rows files, .jsonl.gz or .jsonl, without a sidecar)",
                    found.orphans.len()
                )
            }
        );
    }
    Ok(found)
}

/// A parsed run, its fingerprint, and the CRC-32C of its rows and of its search statistics
/// (computed on the worker, so the writer only combines them into the shards' checksums).
pub(crate) struct Parsed {
    run: ParsedRun,
    fingerprint: Fingerprint,
    crcs: RowCrcs,
}

/// The CRC-32C of a run's rows (as parsed) and of its search statistics, when kept.
#[derive(Clone, Copy)]
struct RowCrcs {
    rows: u32,
    search: Option<u32>,
}

impl RowCrcs {
    fn of(run: &ParsedRun) -> RowCrcs {
        RowCrcs {
            rows: crc32c(&run.rows),
            search: run.search.as_deref().map(crc32c),
        }
    }
}

/// A written run's rows and search statistics, placed in the files and waiting to be copied
/// there: the workers copy them between runs, outside the commit (the serial part only places
/// and records each run).
struct Copy {
    /// Per file (the steps, then the `search` family when kept): the bytes and where they go.
    files: Vec<(Vec<u8>, Vec<Placement>)>,
}

impl Copy {
    /// Writes the run's bytes into each file, faulting their pages in first (with
    /// [`prefault_for`]), which moves their allocation out of the file's lock.
    fn write(self) {
        let prefault = Span::start("copy: prefault");
        for (bytes, placed) in &self.files {
            for p in placed {
                p.prefault(bytes);
            }
        }
        drop(prefault);
        for (bytes, placed) in self.files {
            for p in placed {
                p.write(&bytes);
            }
        }
    }
}

/// Copies the runs waiting in `copies` (on whichever thread calls it).
fn copy_waiting(copies: &Mutex<VecDeque<Copy>>) {
    loop {
        let next = copies.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
        let Some(copy) = next else {
            return;
        };
        copy.write();
    }
}

/// From this many workers on, the copies into files on tmpfs fault their pages in before
/// writing them (`Placement::prefault`). The kernel takes one write into a file at a time,
/// and a write into fresh pages spends most of its time allocating them under that lock: on
/// the 2-core benchmark VM the writes into the busiest file are 4-8% of the CPU time on tmpfs,
/// so they queue from about 12 workers on and saturate at 12-21. Faulted in first, the pages
/// are allocated in parallel and the write under the lock only copies (1.2-2.0% of the CPU
/// time), for 2-15% more CPU time in all (the faults, zeroing and unmapping cost more than the
/// write's own allocation). With fewer workers the lock is mostly free, and the plain write is
/// cheaper.
const PREFAULT_WORKERS_TMPFS: usize = 12;

/// The same on other filesystems. On ext4 the plain write is cheaper (the busiest file's
/// writes about 5% of the CPU time with `--search-stats`, saturating at about 21 workers) and
/// prefaulting dearer (about 30% more CPU time, and ext4's large folios allocate some pages of
/// zeros the plain write leaves as holes), so it pays only once the lock saturates.
const PREFAULT_WORKERS_OTHER: usize = 24;

/// Whether a pack on `workers` threads writing into `dir` prefaults its copies: from
/// [`PREFAULT_WORKERS_TMPFS`] or [`PREFAULT_WORKERS_OTHER`] workers on, or as
/// `DATASET_PACKER_PREFAULT` (`1` or `0`) says.
fn prefault_for(workers: usize, dir: &Path) -> bool {
    match std::env::var("DATASET_PACKER_PREFAULT").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ if on_tmpfs(dir) => workers >= PREFAULT_WORKERS_TMPFS,
        _ => workers >= PREFAULT_WORKERS_OTHER,
    }
}

/// Whether `dir` is on tmpfs (false when that cannot be told).
fn on_tmpfs(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    let mut fs = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: a NUL-terminated path and a buffer of the right type, read only on success.
    let ok = unsafe { libc::statfs(path.as_ptr(), fs.as_mut_ptr()) } == 0;
    // SAFETY: statfs filled it.
    ok && unsafe { fs.assume_init() }.f_type == libc::TMPFS_MAGIC
}

/// Parses `runs` on `workers` threads and hands them to `packer` in order.
pub(crate) fn parse_and_write(
    runs: &[&RunSource],
    packer: &mut Packer,
    workers: usize,
    observer: &Observer,
    started: Instant,
) -> Result<()> {
    let tables = LineTables::new();
    let total_bytes: u64 = runs.iter().map(|r| r.rows_bytes).sum();
    let bar = Bar::start(observer, "pack", total_bytes, Unit::Bytes);
    // Each run carries the id it gets if no run before it is left out.
    let first_id = packer.next_run_id;
    let keep_search = packer.search.is_some();
    let items: Vec<(u32, &RunSource)> = (first_id..).zip(runs.iter().copied()).collect();
    let rows_before = packer.staged.steps().total_rows();
    let prefault = prefault_for(workers, packer.staged.staging());
    packer.staged.prefault_placements(prefault);
    let copies = Mutex::new(VecDeque::new());
    // Whichever worker completes the next run in order writes it (`commit`): no thread waits
    // to be handed each run.
    let outcome = ordered_try_commit(
        &items,
        workers,
        workers * 2,
        || {
            RunParser::new(&tables)
                .keep_search_stats(keep_search)
                .workers(workers)
        },
        |parser, &(id, src)| {
            copy_waiting(&copies);
            parse_one(parser, src, id)
        },
        |i, parsed| {
            let _writer = Span::start("commit");
            let src = items[i].1;
            let accepted = packer.accept(src, parsed);
            copies
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(packer.copies.drain(..));
            bar.inc(src.rows_bytes);
            if bar.is_observed() {
                let rows = packer.staged.steps().total_rows() - rows_before;
                let rate = rows as f64 / started.elapsed().as_secs_f64().max(1e-9);
                bar.set_message(format!(
                    "{} rows, {} rows/s",
                    thousands(rows),
                    thousands(rate as u64)
                ));
            }
            accepted
        },
    );
    bar.finish_and_clear();
    // The last runs' copies, which no worker came back for, on as many threads (so the tail
    // stays parallel). After a failure they are dropped unwritten: nothing is published then.
    if outcome.is_ok() {
        copy_on_threads(&copies, workers);
    }
    outcome
}

/// Copies the runs waiting in `copies` on `threads` threads.
fn copy_on_threads(copies: &Mutex<VecDeque<Copy>>, threads: usize) {
    std::thread::scope(|scope| {
        for i in 0..threads {
            std::thread::Builder::new()
                .name(format!("copy-{i}"))
                .spawn_scoped(scope, || {
                    copy_waiting(copies);
                    crate::thread_cpu::thread_done();
                })
                .expect("spawning a copy thread");
        }
    });
}

/// Parses and fingerprints one run (on a worker thread).
fn parse_one(parser: &mut RunParser, src: &RunSource, id: u32) -> Result<Parsed, RunError> {
    let parse = Span::start("parse");
    let run = parser.parse(src, id)?;
    drop(parse);
    let fingerprint_span = Span::start("fingerprint");
    let facts = RunFacts {
        seed: i64::from(run.sidecar.seed),
        steps: run.row_count,
        max_score: run.sidecar.score,
        highest_tile: run.sidecar.max_tile,
    };
    let fingerprint =
        fingerprint::of_rows(facts, &run.rows, &run.valuation_names).map_err(|e| RunError {
            file: src.rows.clone(),
            line: None,
            message: format!("{e:#}"),
        })?;
    drop(fingerprint_span);
    let _crc = Span::start("crc");
    let crcs = RowCrcs::of(&run);
    Ok(Parsed {
        run,
        fingerprint,
        crcs,
    })
}

/// What the writer starts from: nothing (a new pack) or an existing pack it extends.
pub(crate) struct PackerStart {
    /// The staged pack the runs are written into.
    pub staged: StagedPack,
    /// The `search` family's index in `staged`, when the search statistics are kept.
    pub search: Option<usize>,
    pub next_run_id: u32,
    pub valuations: ValuationTable,
    /// Fingerprints of the runs already in the pack, with their ids.
    pub in_pack: HashMap<Fingerprint, u32>,
    /// Packed runs (by sidecar path) whose rows file changed form since (gzipped or unzipped):
    /// their id and fingerprint, which the new file's content must match.
    pub recheck: HashMap<String, (u32, Fingerprint)>,
    /// The pack's finding counts so far.
    pub finding_counts: BTreeMap<String, u64>,
}

/// The single writer: receives parsed runs in run order and writes them.
pub(crate) struct Packer {
    staged: StagedPack,
    search: Option<usize>,
    /// Rows written whose search statistics (`"used":true`) were not kept.
    search_rows_not_kept: u64,
    valuations: ValuationTable,
    skip_invalid: bool,
    dedupe: bool,
    first_run_id: u32,
    next_run_id: u32,
    /// Rows in the writer before the first run of this command (an extended pack's).
    rows_before: u64,
    skipped: Vec<(String, String)>,
    findings: Tally,
    in_pack: HashMap<Fingerprint, u32>,
    /// Runs written by this command, by fingerprint.
    written: Duplicates,
    /// Runs skipped because the pack already holds their content: (sidecar path, run id).
    already_packed: Vec<(String, u32)>,
    recheck: HashMap<String, (u32, Fingerprint)>,
    /// Rechecked runs whose new rows file holds their packed content: (sidecar path, run id).
    reformed: Vec<(String, u32)>,
    /// Runs written whose rows are placed but not yet copied into the files.
    copies: Vec<Copy>,
}

impl Packer {
    pub fn new(mut start: PackerStart, options: PackOptions) -> Packer {
        let rows_before = start.staged.steps().total_rows();
        Packer {
            staged: start.staged,
            search: start.search,
            search_rows_not_kept: 0,
            valuations: start.valuations,
            skip_invalid: options.skip_invalid,
            dedupe: options.dedupe,
            first_run_id: start.next_run_id,
            next_run_id: start.next_run_id,
            rows_before,
            skipped: Vec::new(),
            findings: Tally {
                counts: start.finding_counts,
                examples: Vec::new(),
            },
            in_pack: start.in_pack,
            written: Duplicates::default(),
            already_packed: Vec::new(),
            recheck: start.recheck,
            reformed: Vec::new(),
            copies: Vec::new(),
        }
    }

    /// Runs left out so far (invalid, or duplicates with `dedupe`).
    pub fn skipped_runs(&self) -> usize {
        self.skipped.len()
    }

    pub fn runs_written(&self) -> u32 {
        self.next_run_id - self.first_run_id
    }

    /// Writes a parsed run, or deals with an invalid or duplicate one; an error ends the pack.
    fn accept(&mut self, src: &RunSource, parsed: Result<Parsed, RunError>) -> Result<()> {
        let parsed = match parsed {
            Ok(p) => p,
            Err(e) => return self.reject(src, e),
        };
        let path = rel_string(&src.rel_sidecar);
        if let Some(&(id, packed)) = self.recheck.get(&path) {
            return self.recheck(src, path, id, packed, parsed.fingerprint);
        }
        if let Some(&id) = self.in_pack.get(&parsed.fingerprint) {
            log::info!("{path}: already packed as run {id} (same content)");
            self.already_packed.push((path, id));
            return Ok(());
        }
        let earlier = self.written.get(&parsed.fingerprint).cloned();
        if let Some(kept) = &earlier
            && self.dedupe
        {
            let reason = format!("duplicate: {}", duplicate_detail(kept, &parsed.fingerprint));
            return self.skip(path, reason);
        }
        let mut crcs = Some(parsed.crcs);
        let run = match self.assign_valuations(src, parsed.run) {
            Ok((run, remapped)) => {
                if remapped {
                    crcs = None;
                }
                run
            }
            Err(e) => return self.reject(src, e),
        };
        let run_id = self.write_run(src, run, crcs, parsed.fingerprint)?;
        match earlier {
            Some(kept) => {
                let example = FindingRecord {
                    kind: DUPLICATE_RUN.into(),
                    run_id: Some(run_id),
                    source_path: path,
                    line: None,
                    step_index: None,
                    detail: duplicate_detail(&kept, &parsed.fingerprint),
                };
                self.findings.add(DUPLICATE_RUN, 1, [example]);
            }
            None => self.written.insert(parsed.fingerprint, (run_id, path)),
        }
        Ok(())
    }

    /// A packed run whose rows file changed form (`BASE.jsonl` gzipped, or the other way): the
    /// same run when its content is the packed run's (the pack then records the new file),
    /// otherwise a changed source, which is never packed again: skipped with --skip-invalid,
    /// else the end of the update.
    fn recheck(
        &mut self,
        src: &RunSource,
        path: String,
        id: u32,
        packed: Fingerprint,
        now: Fingerprint,
    ) -> Result<()> {
        if now == packed {
            log::info!(
                "{path}: rows file now {}, same content as run {id}",
                src.rel_rows.display()
            );
            let rows_path = rel_string(&src.rel_rows);
            self.staged
                .db()
                .set_rows_file(i64::from(id), &rows_path, src.rows_bytes as i64)?;
            self.reformed.push((path, id));
            return Ok(());
        }
        let reason = format!(
            "{path}: changed since it was packed as run {id} (its rows file is now {} and its content differs)",
            src.rel_rows.display()
        );
        if !self.skip_invalid {
            return Err(changed_sources(&[&reason]));
        }
        self.skip(path, reason)
    }

    /// An invalid run: skipped and recorded with --skip-invalid, otherwise the end of the pack.
    fn reject(&mut self, src: &RunSource, e: RunError) -> Result<()> {
        if !self.skip_invalid {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("invalid run: {e}\n(nothing was written; invalid runs can be skipped instead, and listed)"),
            )
            .with_option("skip_invalid"));
        }
        log::info!("skipping invalid run: {e}"); // the summary lists it
        self.skip(rel_string(&src.rel_sidecar), e.to_string())
    }

    /// Records a run left out (and why) in metadata.db and the summary.
    pub fn skip(&mut self, path: String, reason: String) -> Result<()> {
        self.staged.db().insert_skipped(&path, &reason)?;
        self.skipped.push((path, reason));
        Ok(())
    }

    /// Maps the run's local valuation ids to pack ids, adding new names in first-appearance
    /// order; a run that would bring a 257th name is invalid. Says whether the rows changed.
    fn assign_valuations(
        &mut self,
        src: &RunSource,
        mut run: ParsedRun,
    ) -> Result<(ParsedRun, bool), RunError> {
        if !run.has_extra_valuations() {
            return Ok((run, false));
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
        let local_ids = run.valuation_names.len();
        if map[..local_ids]
            .iter()
            .enumerate()
            .all(|(i, &id)| usize::from(id) == i)
        {
            // The pack's ids are the run's own: the rows stay as they are (and their CRC good).
            return Ok((run, false));
        }
        remap_rows(&mut run.rows, |id| id, Some(&map));
        Ok((run, true))
    }

    /// Writes the run's rows and metadata under the next run id, which it returns.
    /// `crcs` are those of the rows as they are (None when they changed since they were
    /// computed). The rows are placed in the files here and copied there later, by a worker
    /// ([`Packer::copies`]).
    fn write_run(
        &mut self,
        src: &RunSource,
        mut run: ParsedRun,
        mut crcs: Option<RowCrcs>,
        fingerprint: Fingerprint,
    ) -> Result<u32> {
        let run_id = self.next_run_id;
        self.next_run_id = run_id
            .checked_add(1)
            .ok_or_else(|| Error::new(ErrorKind::Unsupported, "more than 2^32 runs"))?;
        if run.stamped_run_id != run_id {
            // A run before this one was left out: rare, and then the CRC is computed again here.
            remap_rows(&mut run.rows, |_| run_id, None);
            crcs = None;
        }
        let crcs = match crcs {
            Some(crcs) => crcs,
            None => {
                let _crc = Span::start("writer: crc of changed rows");
                RowCrcs::of(&run)
            }
        };
        let first_row = self.staged.steps().position();
        let place = Span::start("writer: place");
        let rows_placed = self.staged.steps().place_rows(&run.rows, crcs.rows)?;
        let search = match (self.search, run.search.take(), crcs.search) {
            (Some(family), Some(stats), Some(crc)) => {
                let placed = self.staged.family(family).place_rows(&stats, crc)?;
                Some((stats, placed))
            }
            (None, _, _) => {
                self.search_rows_not_kept += run.searched_rows;
                None
            }
            (Some(_), _, _) => {
                fail!(
                    Corrupt,
                    "internal error: a run parsed without its search statistics"
                )
            }
        };
        let steps = (std::mem::take(&mut run.rows), rows_placed);
        self.copies.push(Copy {
            files: std::iter::once(steps).chain(search).collect(),
        });
        drop(place);
        let _db = Span::start("writer: metadata.db");
        let s = &run.sidecar;
        let source_path = rel_string(&src.rel_sidecar);
        let db = self.staged.db();
        db.forget_skipped(&source_path)?;
        db.insert_run(&RunRecord {
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
                fingerprint: Some(fingerprint.to_string()),
                sidecar_bytes: Some(src.sidecar_bytes as i64),
                rows_bytes: Some(src.rows_bytes as i64),
            },
            first_row: Some(first_row),
        })?;
        self.record_findings(run_id, &source_path, &rel_string(&src.rel_rows), &run);
        Ok(run_id)
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

    /// Closes the shards and records shards, findings and the drop's orphan rows files (which
    /// replace any recorded before). The caller adds its session facts, then commits.
    pub fn finish(mut self, orphans: &[PathBuf]) -> Result<Packed> {
        let orphan_examples = orphans.iter().map(|p| FindingRecord {
            kind: "orphan_rows_file".into(),
            run_id: None,
            source_path: rel_string(p),
            line: None,
            step_index: None,
            detail: orphan_detail(p),
        });
        self.findings.counts.remove("orphan_rows_file");
        self.findings
            .add("orphan_rows_file", orphans.len() as u64, orphan_examples);
        let orphan_paths: Vec<String> = orphans.iter().map(|p| rel_string(p)).collect();
        self.staged.db().replace_orphans(&orphan_paths)?;
        let rows_written = self.staged.steps().total_rows();
        let shards = self.staged.finish_files()?;
        let db = self.staged.db();
        for shard in &shards {
            db.insert_shard(shard)?;
        }
        for (kind, count) in &self.findings.counts {
            db.set_finding_count(kind, *count)?;
        }
        for example in &self.findings.examples {
            db.insert_finding(example)?;
        }
        Ok(Packed {
            search_rows_not_kept: self.search_rows_not_kept,
            staged: self.staged,
            valuations: self.valuations,
            total_rows: rows_written,
            rows_added: rows_written - self.rows_before,
            first_run_id: self.first_run_id,
            next_run_id: self.next_run_id,
            shards,
            skipped: self.skipped,
            findings: self.findings,
            already_packed: self.already_packed,
            reformed: self.reformed,
        })
    }
}

/// A pack whose rows are written, with its metadata still open for the caller's session facts.
pub(crate) struct Packed {
    staged: StagedPack,
    /// Rows this command wrote whose search statistics were not kept.
    pub search_rows_not_kept: u64,
    pub valuations: ValuationTable,
    pub total_rows: u64,
    /// Rows of the runs this command wrote.
    pub rows_added: u64,
    pub first_run_id: u32,
    pub next_run_id: u32,
    pub shards: Vec<ShardRecord>,
    pub skipped: Vec<(String, String)>,
    pub findings: Tally,
    pub already_packed: Vec<(String, u32)>,
    /// Packed runs whose rows file changed form, content unchanged: (sidecar path, run id).
    pub reformed: Vec<(String, u32)>,
}

impl Packed {
    /// The staged `metadata.db`, for the caller's session facts.
    pub fn db(&self) -> &MetadataWriter {
        self.staged.db()
    }

    /// The summary of what was written, and the staged pack ready to publish.
    pub fn commit(self, compressed_bytes: u64) -> (Summary, Ready) {
        let summary = Summary {
            runs: self.next_run_id - self.first_run_id,
            rows: self.rows_added,
            shards: self.shards,
            skipped: self.skipped,
            findings: self.findings,
            compressed_bytes,
        };
        let ready = Ready {
            staged: self.staged,
            valuations: self.valuations,
        };
        (summary, ready)
    }
}

/// A staged pack whose writing is done, with the valuation table it is published with.
pub(crate) struct Ready {
    staged: StagedPack,
    valuations: ValuationTable,
}

impl Ready {
    /// The staging folder.
    pub fn staging(&self) -> &Path {
        self.staged.staging()
    }

    /// Publishes a new pack.
    pub fn publish(self) -> Result<()> {
        self.staged.publish(&self.valuations)
    }

    /// Publishes an extended pack: see [`StagedPack::publish_keeping`].
    pub fn publish_keeping(self, kept: &[String], retired: &[String]) -> Result<()> {
        self.staged.publish_keeping(&self.valuations, kept, retired)
    }
}

/// A path relative to the input root as stored in metadata.db: '/'-separated.
pub(crate) fn rel_string(p: &Path) -> String {
    p.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// The error for packed runs whose source changed (one reason per run).
pub(crate) fn changed_sources(reasons: &[&str]) -> Error {
    let message = format!(
        "{} changed after it was packed; nothing was written:\n{}\n(a packed run is never re-packed or duplicated; move the changed file out of the input, or skip it to record it as skipped)",
        if reasons.len() == 1 {
            "a source run".to_string()
        } else {
            format!("{} source runs", reasons.len())
        },
        reasons
            .iter()
            .map(|r| format!("  {r}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    Error::new(ErrorKind::InvalidInput, message).with_option("skip_invalid")
}

/// What a pack run did, for the user.
#[derive(Debug)]
pub(crate) struct Summary {
    pub runs: u32,
    pub rows: u64,
    pub shards: Vec<ShardRecord>,
    pub skipped: Vec<(String, String)>,
    pub findings: Tally,
    pub compressed_bytes: u64,
}

impl Summary {
    /// The summary as JSON (the update adds its own fields).
    pub fn to_json(&self, output: &Path, elapsed: f64) -> serde_json::Value {
        json!({
            "output": output.display().to_string(),
            "runs": self.runs,
            "rows": self.rows,
            "shards": self.shards.iter().map(|s| json!({"file": s.file_name, "rows": s.rows, "bytes": s.bytes, "crc32c": format!("{:08x}", s.crc32c)})).collect::<Vec<_>>(),
            "skipped_runs": self.skipped.iter().map(|(p, r)| json!({"path": p, "reason": r})).collect::<Vec<_>>(),
            "orphan_rows_files": self.findings.count("orphan_rows_file"),
            "duplicate_runs": self.findings.count(DUPLICATE_RUN),
            "findings": self.findings.counts,
            "finding_examples": self.findings.examples.iter().map(|f| json!({"kind": f.kind, "run_id": f.run_id, "source_path": f.source_path, "line": f.line, "step_index": f.step_index, "detail": f.detail})).collect::<Vec<_>>(),
            "compressed_bytes": self.compressed_bytes,
            "elapsed_s": elapsed,
            "rows_per_s": self.rows as f64 / elapsed.max(1e-9),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_prefaulted_from_twelve_workers_on_tmpfs_and_24_elsewhere() {
        // DATASET_PACKER_PREFAULT decides instead when it is set.
        if std::env::var_os("DATASET_PACKER_PREFAULT").is_some() {
            return;
        }
        let disk = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let shm = Path::new("/dev/shm");
        // The repository itself may be on tmpfs: each folder's threshold follows its own.
        let dirs = [shm, disk.path()];
        for dir in dirs.into_iter().filter(|d| *d != shm || on_tmpfs(shm)) {
            let from = if on_tmpfs(dir) {
                PREFAULT_WORKERS_TMPFS
            } else {
                PREFAULT_WORKERS_OTHER
            };
            assert!(!prefault_for(1, dir), "{}", dir.display());
            assert!(!prefault_for(from - 1, dir), "{}", dir.display());
            assert!(prefault_for(from, dir), "{}", dir.display());
        }
        // README.md and docs/architecture.md give these numbers.
        assert_eq!((PREFAULT_WORKERS_TMPFS, PREFAULT_WORKERS_OTHER), (12, 24));
    }
}
