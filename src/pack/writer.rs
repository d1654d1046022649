//! Writing a pack: the staged output every writing command shares ([`StagedPack`]: a locked
//! target, a hidden staging folder beside it, the steps' shard writer, a writer per companion
//! family, `metadata.db`; published by one rename), and on top of it the public
//! [`PackWriter`], which turns runs of steps into a pack that `validate` passes.
//!
//! Nothing is visible at the target until [`PackWriter::publish`] (or
//! [`StagedPack::publish`]) returns: a writer dropped before that, or a process killed
//! midway, leaves the target as it was and removes its staging folder.

use std::path::{Path, PathBuf};

use crate::error::{Result, ensure, fail};

use crate::findings::{DUPLICATE_RUN, Duplicates, RowFindings, Tally, duplicate_detail};
use crate::format::board;
use crate::format::fingerprint::{self, RunFacts};
use crate::format::metadata::{
    self, FindingRecord, MetadataWriter, PackFacts, RunDetails, RunRecord, ShardRecord,
};
use crate::format::row::StepRow;
use crate::format::valuation::ValuationTable;
use crate::pack::families;
use crate::pack::publish::{OutputDir, write_valuations};
use crate::pack::shard_writer::{FileLayout, ShardWriter};

/// A new pack being written into a staging folder: the crate's commands write their shards,
/// companion families and `metadata.db` through it and publish it in one step.
pub(crate) struct StagedPack {
    out: OutputDir,
    staging: PathBuf,
    shard_rows: Option<u64>,
    /// None once [`StagedPack::finish_files`] closed the files.
    steps: Option<ShardWriter>,
    families: Vec<(FileLayout, ShardWriter)>,
    db: MetadataWriter,
}

impl StagedPack {
    /// Locks `dir` (a new folder, an empty one, or with `overwrite` a pack this tool wrote)
    /// and opens the writers in a fresh staging folder beside it.
    pub fn create(dir: &Path, overwrite: bool, shard_rows: Option<u64>) -> Result<StagedPack> {
        StagedPack::begin(OutputDir::open(dir, overwrite)?, shard_rows)
    }

    /// Opens the writers of a new pack in a fresh staging folder of `out` (an output the
    /// caller has locked and checked already).
    pub fn begin(out: OutputDir, shard_rows: Option<u64>) -> Result<StagedPack> {
        let staging = out.begin_staging()?;
        let steps = ShardWriter::new(&staging, shard_rows);
        let db = MetadataWriter::create(&staging.join(metadata::FILE_NAME))?;
        Ok(StagedPack::from_parts(out, staging, shard_rows, steps, db))
    }

    /// Wraps writers the caller prepared in `staging` of `out`: for a pack being extended,
    /// the steps' writer after its kept shards and a staged copy of its `metadata.db`.
    pub fn from_parts(
        out: OutputDir,
        staging: PathBuf,
        shard_rows: Option<u64>,
        steps: ShardWriter,
        db: MetadataWriter,
    ) -> StagedPack {
        StagedPack {
            out,
            staging,
            shard_rows,
            steps: Some(steps),
            families: Vec::new(),
            db,
        }
    }

    /// Adds a companion family written beside the steps, split like them; returns its index
    /// for [`StagedPack::family`].
    pub fn add_family(&mut self, layout: FileLayout) -> usize {
        let writer = ShardWriter::with_layout(&self.staging, self.shard_rows, layout.clone());
        self.families.push((layout, writer));
        self.families.len() - 1
    }

    /// Adds a companion family whose writer the caller prepared (one that continues an
    /// extended pack's files); returns its index for [`StagedPack::family`].
    pub fn add_family_writer(&mut self, layout: FileLayout, writer: ShardWriter) -> usize {
        self.families.push((layout, writer));
        self.families.len() - 1
    }

    /// The writer of family `index` (as [`StagedPack::add_family`] returned it).
    pub fn family(&mut self, index: usize) -> &mut ShardWriter {
        &mut self.families[index].1
    }

    /// The staging folder (the pack's files as they are written).
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// The rows per shard the pack is written with (None: one file).
    pub fn shard_rows(&self) -> Option<u64> {
        self.shard_rows
    }

    /// Tells every writer how many rows are coming, so it reserves each file's space up front.
    pub fn expect_rows(&mut self, rows: u64) {
        self.steps().expect_rows(rows);
        for (_, w) in &mut self.families {
            w.expect_rows(rows);
        }
    }

    /// Lets the writers of placed rows fault their pages in before writing them, in every
    /// file (see `Placement::prefault`): worth it when many threads write into the same file.
    pub(crate) fn prefault_placements(&mut self, yes: bool) {
        self.steps().prefault_placements(yes);
        for (_, w) in &mut self.families {
            w.prefault_placements(yes);
        }
    }

    /// The steps' writer (until [`StagedPack::finish_files`]).
    pub fn steps(&mut self) -> &mut ShardWriter {
        self.steps
            .as_mut()
            .expect("rows are written before the files are finished")
    }

    /// The steps' writer, every family's (in the order they were added) and `metadata.db`
    /// at once, for code that writes one chunk to all of them and records as it goes.
    pub fn parts(&mut self) -> StagedParts<'_> {
        StagedParts {
            steps: self
                .steps
                .as_mut()
                .expect("rows are written before the files are finished"),
            families: self.families.iter_mut().map(|(_, w)| w).collect(),
            db: &self.db,
        }
    }

    /// The new `metadata.db`.
    pub fn db(&self) -> &MetadataWriter {
        &self.db
    }

    /// Closes every shard file (synced, checksummed), records the families' files in
    /// `metadata.db` (in place of what an extended pack recorded of them), and returns the
    /// steps' shard records for the caller to record with its runs. Writing rows after this is
    /// a bug, and panics.
    pub fn finish_files(&mut self) -> Result<Vec<ShardRecord>> {
        let steps = self.steps.take().expect("the files are finished once");
        let shards = steps.finish()?;
        for (layout, writer) in std::mem::take(&mut self.families) {
            // An extended pack's kept files come first in `finish`: the family is recorded whole.
            self.db.delete_companion(&layout.prefix)?;
            for record in families::records(&layout, &writer.finish()?) {
                self.db.insert_companion(&record)?;
            }
        }
        Ok(shards)
    }

    /// Commits `metadata.db`, writes `valuation_types.json`, and moves the staged pack into
    /// place.
    pub fn publish(self, valuations: &ValuationTable) -> Result<()> {
        self.publish_keeping(valuations, &[], &[])
    }

    /// [`StagedPack::publish`] for a pack extended in place: the old pack's files `kept` stay
    /// (they were not staged), and its files `retired` (a family dropped) go with the rest of
    /// the old pack, in the same commit.
    pub fn publish_keeping(
        self,
        valuations: &ValuationTable,
        kept: &[String],
        retired: &[String],
    ) -> Result<()> {
        self.db.finish()?;
        write_valuations(&self.staging, valuations)?;
        self.out.publish_with(kept, retired)
    }
}

/// The writers of a [`StagedPack`], borrowed together ([`StagedPack::parts`]).
pub(crate) struct StagedParts<'a> {
    pub steps: &'a mut ShardWriter,
    pub families: Vec<&'a mut ShardWriter>,
    pub db: &'a MetadataWriter,
}

/// How a [`PackWriter`] writes: one shard or shards of a fixed row count, and whether it may
/// replace an existing pack.
///
/// ```
/// use dataset_packer::WriterOptions;
///
/// let options = WriterOptions::default().shard_rows(1_000_000).overwrite(true);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
pub struct WriterOptions {
    shard_rows: Option<u64>,
    overwrite: bool,
}

impl WriterOptions {
    /// Split the steps into shards of `rows` rows (`steps-00000.npy`, …), as `pack
    /// --shard-rows` does; by default the pack has one `steps.npy`.
    ///
    /// ```
    /// # let _ = dataset_packer::WriterOptions::default().shard_rows(250_000);
    /// ```
    pub fn shard_rows(mut self, rows: u64) -> WriterOptions {
        self.shard_rows = Some(rows);
        self
    }

    /// Replace an existing pack at the target (as `--overwrite` does); without it, a target
    /// that holds a pack is refused. Either way, files of other tools in the folder stay as
    /// they are, and a folder holding companion arrays of the old pack (which the new one
    /// would orphan) or `steps` files this tool did not write is refused.
    ///
    /// ```
    /// # let _ = dataset_packer::WriterOptions::default().overwrite(true);
    /// ```
    pub fn overwrite(mut self, yes: bool) -> WriterOptions {
        self.overwrite = yes;
        self
    }
}

/// One step of a run handed to [`PackWriter::add_run`]: what the game logged. The writer
/// derives the rest of the row as `pack` does (the packed board and its `tile_65536_mask`,
/// `board_eval`, `ev_legal` from the board, the run's id and seed).
///
/// ```
/// use dataset_packer::NewStep;
///
/// let mut exponents = [0u8; 16];
/// exponents[0] = 1; // a 2 in the top-left corner
/// exponents[5] = 2; // a 4
/// let step = NewStep {
///     step_index: 0,
///     exponents,
///     move_dir: 2, // left
///     branch_evs: [0.0, 1.5, 2.0, 1.0],
///     valuation_type: 0, // "search"
/// };
/// # let _ = step;
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NewStep {
    /// The step's index in its run; strictly increasing along a run (gaps allowed).
    pub step_index: u32,
    /// The board, row-major, as exponents: 0 empty, 1 for a 2, …, 16 for 65536.
    pub exponents: [u8; 16],
    /// The move played: 0 up, 1 down, 2 left, 3 right.
    pub move_dir: u8,
    /// The search's value of each move, in [up, down, left, right] order; 0.0 where none.
    pub branch_evs: [f32; 4],
    /// An id of the pack's valuation table ([`PackWriter::valuation_type`]).
    pub valuation_type: u8,
}

/// The facts of a run handed to [`PackWriter::add_run`]: its `runs` row (the id is the
/// writer's) and the sidecar facts kept in `run_details`.
///
/// ```
/// use dataset_packer::NewRun;
///
/// let run = NewRun { seed: 42, max_score: 3_200, highest_tile: 256, ..NewRun::default() };
/// # let _ = run;
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewRun {
    /// The game's seed (every step of the run gets it).
    pub seed: u32,
    /// The final score, as the sidecar's `score`.
    pub max_score: i64,
    /// The highest tile reached, as the sidecar's `max_tile` (2048, not 11).
    pub highest_tile: i64,
    /// The search depth, when the run came from an expectimax search of a fixed depth.
    pub depth: Option<i64>,
    /// Where the run came from (a path or any name), recorded as `run_details.source_path`.
    pub source: Option<String>,
}

/// What [`PackWriter::publish`] wrote.
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let dir = dataset_packer::pack::doc_support::temp_dir();
/// let mut writer = dataset_packer::PackWriter::create(&dir)?;
/// let published = writer.publish()?;
/// assert_eq!((published.runs, published.rows, published.shards), (0, 0, 1));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// Runs in the pack.
    pub runs: u32,
    /// Rows (steps) in the pack.
    pub rows: u64,
    /// Step shard files written.
    pub shards: usize,
}

/// Writes a new pack from runs of steps, for Rust programs that make their own data (a
/// self-play engine, a converter from another format). The pack has everything `pack`
/// writes for its runs: shards, `metadata.db` (runs, run details with each run's content
/// fingerprint, the run index, shard checksums, findings), `valuation_types.json`; it passes
/// `dataset-packer validate`, reads with [`Pack`](crate::Pack) and the Python package, and
/// merges with packs made by `pack`.
///
/// Everything is staged in a hidden folder beside the target and published atomically by
/// [`PackWriter::publish`]; dropping the writer (or an error) leaves no trace at the target.
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let dir = dataset_packer::pack::doc_support::temp_dir();
/// use dataset_packer::{NewRun, NewStep, Pack, PackWriter};
///
/// let mut writer = PackWriter::create(&dir)?;
/// let search = writer.valuation_type("search")?;
/// let mut board = [0u8; 16];
/// board[0] = 1;
/// board[1] = 1;
/// let steps = [NewStep {
///     step_index: 0,
///     exponents: board,
///     move_dir: 2, // left: merges the two 2s
///     branch_evs: [0.0, 3.0, 4.0, 3.5],
///     valuation_type: search,
/// }];
/// let run = NewRun { seed: 7, max_score: 4, highest_tile: 4, ..NewRun::default() };
/// assert_eq!(writer.add_run(&run, &steps)?, 0); // the run's id
/// writer.publish()?;
///
/// let pack = Pack::open(&dir)?;
/// pack.verify()?;
/// let step = pack.row(0)?;
/// assert_eq!((step.seed(), step.move_dir(), step.exponents()), (7, 2, board));
/// assert_eq!(step.legal(), [false, true, true, true]); // up cannot change this board
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
pub struct PackWriter {
    staged: StagedPack,
    valuations: ValuationTable,
    /// Runs added (the next run's id).
    runs: u32,
    findings: RowFindings,
    duplicates: Duplicates,
    duplicate_findings: Tally,
    rows: Vec<u8>,
}

impl PackWriter {
    /// Starts a new pack at `path` with default [`WriterOptions`] (one shard, no overwrite).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let dir = dataset_packer::pack::doc_support::temp_dir();
    /// let writer = dataset_packer::PackWriter::create(&dir)?;
    /// drop(writer); // nothing published: the target stays as it was
    /// assert!(!dir.join("metadata.db").exists());
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// # Ok(()) }
    /// ```
    pub fn create(path: impl AsRef<Path>) -> Result<PackWriter> {
        PackWriter::create_with(path, &WriterOptions::default())
    }

    /// Starts a new pack at `path` written as `options` say.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let dir = dataset_packer::pack::doc_support::temp_dir();
    /// use dataset_packer::{PackWriter, WriterOptions};
    ///
    /// let options = WriterOptions::default().shard_rows(100_000);
    /// let writer = PackWriter::create_with(&dir, &options)?;
    /// # drop(writer);
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// # Ok(()) }
    /// ```
    pub fn create_with(path: impl AsRef<Path>, options: &WriterOptions) -> Result<PackWriter> {
        Ok(PackWriter {
            staged: StagedPack::create(path.as_ref(), options.overwrite, options.shard_rows)?,
            valuations: ValuationTable::new(),
            runs: 0,
            findings: RowFindings::new(0, true),
            duplicates: Duplicates::default(),
            duplicate_findings: Tally::default(),
            rows: Vec::new(),
        })
    }

    /// The id of valuation type `name` in the pack's table, added to it when new. Ids 0, 1
    /// and 2 are always `search`, `tuple11` and `tuple10`; at most 256 names.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let dir = dataset_packer::pack::doc_support::temp_dir();
    /// let mut writer = dataset_packer::PackWriter::create(&dir)?;
    /// assert_eq!(writer.valuation_type("tuple10")?, 2);
    /// assert_eq!(writer.valuation_type("nnue")?, 3);
    /// # drop(writer);
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// # Ok(()) }
    /// ```
    pub fn valuation_type(&mut self, name: &str) -> Result<u8> {
        self.valuations.intern(name)
    }

    /// Appends a run and returns its id (0, 1, … in the order runs are added). The steps are
    /// checked before anything is written: step indexes strictly increasing, exponents at
    /// most 16, a move 0..=3, finite EVs, valuation ids in the table. A run without steps is
    /// allowed (and counted as an `empty_run` finding, as `pack` counts it).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let dir = dataset_packer::pack::doc_support::temp_dir();
    /// use dataset_packer::{NewRun, NewStep, PackWriter};
    ///
    /// let mut writer = PackWriter::create(&dir)?;
    /// let bad = NewStep {
    ///     step_index: 0,
    ///     exponents: [17; 16], // 131072 does not fit the format
    ///     move_dir: 0,
    ///     branch_evs: [0.0; 4],
    ///     valuation_type: 0,
    /// };
    /// let err = writer.add_run(&NewRun::default(), &[bad]).unwrap_err();
    /// assert!(err.to_string().contains("exponent 17"));
    /// # drop(writer);
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// # Ok(()) }
    /// ```
    pub fn add_run(&mut self, run: &NewRun, steps: &[NewStep]) -> Result<u32> {
        let id = self.runs;
        ensure!(
            id < u32::MAX,
            Refused,
            "a pack holds at most {} runs",
            u32::MAX
        );
        self.encode(id, run.seed, steps)?;
        let facts = RunFacts {
            seed: i64::from(run.seed),
            steps: steps.len() as u64,
            max_score: run.max_score,
            highest_tile: run.highest_tile,
        };
        let fingerprint = fingerprint::of_rows(facts, &self.rows, self.valuations.names())?;
        let name = run.source.clone().unwrap_or_else(|| format!("run {id}"));
        if let Some(kept) = self.duplicates.check(fingerprint, (id, name.clone())) {
            let example = FindingRecord {
                kind: DUPLICATE_RUN.into(),
                run_id: Some(id),
                source_path: name,
                line: None,
                step_index: None,
                detail: duplicate_detail(kept, &fingerprint),
            };
            self.duplicate_findings.add(DUPLICATE_RUN, 1, [example]);
        }
        self.findings.run_level(None, steps.len() as i64);
        let steps_writer = self.staged.steps();
        let first_row = steps_writer.location_of(steps_writer.total_rows());
        steps_writer.write_rows(&self.rows)?;
        self.staged.db().insert_run(&RunRecord {
            run_id: id,
            seed: run.seed,
            steps: steps.len() as u64,
            max_score: run.max_score,
            highest_tile: run.highest_tile,
            details: RunDetails {
                source_path: run.source.clone(),
                depth: run.depth,
                fingerprint: Some(fingerprint.to_string()),
                ..RunDetails::default()
            },
            first_row: Some(first_row),
        })?;
        self.runs += 1;
        Ok(id)
    }

    /// Checks `steps` and encodes them as rows of run `id` into `self.rows`, counting the
    /// row findings `pack` counts.
    fn encode(&mut self, id: u32, seed: u32, steps: &[NewStep]) -> Result<()> {
        self.rows.clear();
        let mut findings = RowFindings::new(1, true);
        let mut previous: Option<u32> = None;
        for (n, step) in steps.iter().enumerate() {
            let at = || format!("run {id}, step {n} (step_index {})", step.step_index);
            if previous.is_some_and(|p| step.step_index <= p) {
                fail!(
                    InvalidInput,
                    "{}: step indexes must increase along a run",
                    at()
                );
            }
            previous = Some(step.step_index);
            if let Some(cell) = step.exponents.iter().position(|&e| e > 16) {
                fail!(
                    InvalidInput,
                    "{}: cell {cell} has exponent {}, above 16 (65536)",
                    at(),
                    step.exponents[cell]
                );
            }
            ensure!(
                step.move_dir < 4,
                InvalidInput,
                "{}: move_dir {} is not 0..=3",
                at(),
                step.move_dir
            );
            ensure!(
                step.branch_evs.iter().all(|v| v.is_finite()),
                InvalidInput,
                "{}: branch EVs must be finite, got {:?}",
                at(),
                step.branch_evs
            );
            ensure!(
                usize::from(step.valuation_type) < self.valuations.len(),
                InvalidInput,
                "{}: valuation_type {} is not in the pack's table ({} names; add names with \
                 PackWriter::valuation_type)",
                at(),
                step.valuation_type,
                self.valuations.len()
            );
            let (packed, mask) = board::pack(&step.exponents);
            let row = StepRow {
                run_id: id,
                step_index: step.step_index,
                board: packed,
                board_eval: board::board_eval(&step.exponents),
                tile_65536_mask: mask,
                move_dir: step.move_dir,
                valuation_type: step.valuation_type,
                ev_legal: board::legal_moves(&step.exponents),
                max_rank: board::max_rank(&step.exponents),
                seed,
                branch_evs: step.branch_evs,
            };
            findings.observe(0, &row);
            self.rows.extend_from_slice(&row.to_bytes());
        }
        for (kind, n) in findings.counts {
            *self.findings.counts.entry(kind).or_default() += n;
        }
        Ok(())
    }

    /// Finishes every file, records the runs, the run index, the shards and the findings in
    /// `metadata.db`, and moves the pack into place in one rename. Until this returns, the
    /// target is as it was.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let dir = dataset_packer::pack::doc_support::temp_dir();
    /// use dataset_packer::{NewRun, Pack, PackWriter};
    ///
    /// let mut writer = PackWriter::create(&dir)?;
    /// writer.add_run(&NewRun::default(), &[])?;
    /// let published = writer.publish()?;
    /// assert_eq!(published.runs, 1);
    /// assert_eq!(Pack::open(&dir)?.num_runs(), 1);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(()) }
    /// ```
    pub fn publish(mut self) -> Result<Published> {
        let rows = self.staged.steps().total_rows();
        let shards = self.staged.finish_files()?;
        let db = self.staged.db();
        for shard in &shards {
            db.insert_shard(shard)?;
        }
        for (kind, n) in &self.findings.counts {
            db.set_finding_count(kind, *n)?;
        }
        for (kind, n) in &self.duplicate_findings.counts {
            db.set_finding_count(kind, *n)?;
        }
        for example in &self.duplicate_findings.examples {
            db.insert_finding(example)?;
        }
        db.set_pack_facts(&PackFacts {
            command: "PackWriter",
            command_line: String::new(),
            shard_rows: self.staged.shard_rows(),
            total_rows: rows,
            total_runs: u64::from(self.runs),
            shard_count: shards.len(),
            shuffled: false,
        })?;
        let published = Published {
            runs: self.runs,
            rows,
            shards: shards.len(),
        };
        self.staged.publish(&self.valuations)?;
        Ok(published)
    }
}
