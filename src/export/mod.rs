//! Taking data out of a pack (`dataset-packer export`). This module is the shared reading side:
//! open the source pack, read the rows of the selected runs in bounded pieces (memory-mapped,
//! legacy 46-byte shards converted), and hand them to one of the writers: [`jsonl`] (the raw
//! Macroxue format), [`parquet`] (columnar, for DuckDB/Polars/pyarrow) or [`pack`] (a new pack
//! holding a subset). [`select`] turns `--runs`/`--where` into a run selection; [`output`] makes
//! file and folder outputs appear atomically.

pub mod companion_columns;
pub mod jsonl;
pub mod output;
pub mod pack;
pub mod parquet;
pub mod run_columns;
pub mod select;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rusqlite::Connection;

use crate::format::metadata::{self, RunDetails, RunRow};
use crate::format::row::{ROW_BYTES, offset};
use crate::format::valuation::ValuationTable;
use crate::pack::families::{self, Family, Scan};
use crate::pack::shards::{self, AlignedRows, RunSlots, Shard};
use crate::pack::versions::{self, VersionSpec};

/// Source rows read per piece (≈ 3 MiB of 48-byte rows): the unit of parallel work.
pub const PIECE_ROWS: u64 = 65_536;

/// An opened source pack.
pub struct SourcePack {
    pub dir: PathBuf,
    pub shards: Vec<Shard>,
    /// Global row of each shard's first row, then the total row count.
    shard_starts: Vec<u64>,
    /// The `runs` table, by id.
    pub runs: Vec<RunRow>,
    pub details: HashMap<i64, RunDetails>,
    pub valuations: ValuationTable,
    /// Global row where each run's rows start in an unshuffled pack (prefix sums of
    /// `runs.steps`), then the end.
    run_first_row: Vec<u64>,
    /// Rows are not grouped by run (a shuffled pack): runs cannot be read as row ranges.
    pub shuffled: bool,
    /// Its companion arrays.
    pub companions: Scan,
    /// Its `pack_id` (None: made before versions) and the version read.
    pub identity: (Option<String>, u32),
}

impl SourcePack {
    /// Opens a pack for reading (spec or legacy packed shards); fails on structural problems.
    pub fn open(dir: &Path, version: &VersionSpec) -> Result<SourcePack> {
        let opened = versions::open(dir, version, true)?;
        let companions = opened.families(dir)?;
        let versions::Opened {
            conn, shards, view, ..
        } = opened;
        let shard_starts = shards::shard_starts(&shards);
        let runs = metadata::read_runs(&conn)?;
        if let Some(bad) = runs.iter().find(|r| u32::try_from(r.id).is_err()) {
            bail!(
                "{}: runs.id {} is not a valid run id",
                dir.display(),
                bad.id
            );
        }
        let mut run_first_row = vec![0u64];
        for r in &runs {
            run_first_row.push(run_first_row.last().unwrap() + r.steps.max(0) as u64);
        }
        Ok(SourcePack {
            dir: dir.to_path_buf(),
            shard_starts,
            run_first_row,
            details: metadata::read_run_details(&conn)?,
            valuations: shards::read_valuations(dir)?,
            shuffled: metadata::session_value(&conn, "shuffled")?.as_deref() == Some("true"),
            companions,
            identity: (view.history.pack_id.clone(), view.version().version),
            shards,
            runs,
        })
    }

    /// The companion families an export carries: every one that lines up, except `dropped`;
    /// one that does not line up is an error naming it, unless dropped.
    pub fn carried_companions(&self, dropped: &[String]) -> Result<Vec<&Family>> {
        for (name, problem) in &self.companions.problems {
            if !dropped.contains(name) {
                bail!(
                    "{}: companion {name} does not line up with the shards: {problem} (pass --drop-companion {name} to export without it)",
                    self.dir.display()
                );
            }
        }
        Ok(self
            .companions
            .families
            .iter()
            .filter(|f| !dropped.contains(&f.name))
            .collect())
    }

    /// Checks every shard the export of `selection` reads (whole, against the CRC-32C the pack
    /// records), and the files of the companion families it carries: a damaged pack never
    /// leaves the tool as a clean-looking export.
    pub fn verify(
        &self,
        selection: &Selection,
        families: &[&Family],
        workers: usize,
    ) -> Result<()> {
        let mut touched: Vec<usize> = self.plan(selection).iter().map(|p| p.shard).collect();
        touched.dedup();
        let conn = self.db()?;
        shards::verify_shards(&self.dir, &conn, &self.shards, &touched, workers)?;
        let recorded = metadata::read_companions(&conn)?;
        for family in families {
            families::verify_family(&self.dir, family, &recorded, &touched, workers)?;
        }
        Ok(())
    }

    /// The pack's shard size (`session.shard_rows`), None for a single `steps.npy`.
    pub fn shard_rows(&self) -> Option<u64> {
        self.session_value("shard_rows")
            .ok()
            .flatten()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
    }

    /// Whether any shard is in the legacy packed 46-byte layout (a pack of the reference
    /// packer, or of an older version of this tool).
    pub fn legacy(&self) -> bool {
        self.shards.iter().any(Shard::is_legacy)
    }

    /// A `session` value of the pack.
    pub fn session_value(&self, key: &str) -> Result<Option<String>> {
        Ok(metadata::session_value(&self.db()?, key)?)
    }

    /// A read-only connection to the pack's `metadata.db` (not kept open: a connection cannot
    /// be shared between the worker threads that read the pack).
    pub fn db(&self) -> Result<Connection> {
        Ok(metadata::open_read_only(&self.dir.join(metadata::FILE_NAME))?)
    }

    pub fn total_rows(&self) -> u64 {
        *self.shard_starts.last().unwrap()
    }

    /// The pack's path as recorded in the metadata of what is exported from it.
    pub fn canonical_path(&self) -> String {
        std::fs::canonicalize(&self.dir)
            .unwrap_or_else(|_| self.dir.clone())
            .display()
            .to_string()
    }

    /// The source rows to read for `selection`, as pieces of at most [`PIECE_ROWS`] rows. In an
    /// unshuffled pack runs are contiguous and in id order, so only the selected runs' rows are
    /// read (located from the `runs.steps` counts); a shuffled pack is scanned whole.
    pub fn plan(&self, selection: &Selection) -> Vec<Piece> {
        if self.shuffled {
            return self.pieces_of(std::iter::once(0..self.total_rows()));
        }
        let mut ranges: Vec<std::ops::Range<u64>> = Vec::new();
        for &slot in &selection.slots {
            let r = self.run_range(slot);
            match ranges.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                _ if r.is_empty() => {}
                _ => ranges.push(r),
            }
        }
        self.pieces_of(ranges)
    }

    /// The pieces holding one run's rows (unshuffled packs only).
    pub fn run_pieces(&self, slot: usize) -> Vec<Piece> {
        debug_assert!(!self.shuffled);
        self.pieces_of(std::iter::once(self.run_range(slot)))
    }

    /// Global rows of the run at `slot` in an unshuffled pack, as `runs.steps` places them.
    pub fn run_range(&self, slot: usize) -> std::ops::Range<u64> {
        self.run_first_row[slot]..self.run_first_row[slot + 1]
    }

    /// Splits global row ranges at shard boundaries and into pieces of at most PIECE_ROWS.
    fn pieces_of(&self, ranges: impl IntoIterator<Item = std::ops::Range<u64>>) -> Vec<Piece> {
        let mut out = Vec::new();
        for r in ranges {
            shards::pieces_of(&self.shard_starts, r, PIECE_ROWS, &mut out);
        }
        out
    }

    /// The rows of one piece in the 48-byte layout.
    pub fn read(&self, piece: &Piece) -> Result<AlignedRows> {
        Ok(self.shards[piece.shard].read_aligned(piece.start, piece.count)?)
    }

    /// Where a piece is, for error messages.
    pub fn describe(&self, piece: &Piece, row_in_piece: usize) -> String {
        format!(
            "{} row {}",
            self.shards[piece.shard].name,
            piece.start + row_in_piece as u64
        )
    }
}

pub use shards::Piece;

/// The runs an export takes, in source id order; each gets an output position 0, 1, ….
pub struct Selection {
    /// Slots (indices into `SourcePack::runs`) of the selected runs, ascending.
    pub slots: Vec<usize>,
    /// Source run id → slot, over every run of the pack.
    slot_of: RunSlots,
    /// Slot → output position, or u32::MAX when not selected.
    position: Vec<u32>,
}

impl Selection {
    /// Selects the runs at `slots` (ascending) of `source`.
    pub fn new(source: &SourcePack, slots: Vec<usize>) -> Selection {
        let ids: Vec<u32> = source.runs.iter().map(|r| r.id as u32).collect();
        let mut position = vec![u32::MAX; ids.len()];
        for (pos, &slot) in slots.iter().enumerate() {
            position[slot] = pos as u32;
        }
        Selection {
            slots,
            slot_of: RunSlots::new(&ids),
            position,
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The output position of source run `run_id`: None when the run is not selected, an
    /// error when the pack has no such run.
    #[inline]
    pub fn position(&self, run_id: u32) -> Result<Option<u32>> {
        let slot = self
            .slot_of
            .get(run_id)
            .with_context(|| format!("a row belongs to run {run_id}, which is not in the runs table (the pack is inconsistent; run `dataset-packer validate`)"))?;
        let pos = self.position[slot as usize];
        Ok((pos != u32::MAX).then_some(pos))
    }

    /// Calls `f(index, position, row)` for every row of `rows` whose run is selected: the row's
    /// index in `rows` (to find its companion rows) and its run's position in the selection.
    pub fn for_each_row_at(
        &self,
        rows: &[u8],
        mut f: impl FnMut(usize, u32, &[u8]) -> Result<()>,
    ) -> Result<()> {
        for (at, row) in rows.chunks_exact(ROW_BYTES).enumerate() {
            let id =
                u32::from_le_bytes(row[offset::RUN_ID..offset::RUN_ID + 4].try_into().unwrap());
            if let Some(pos) = self.position(id)? {
                f(at, pos, row)?;
            }
        }
        Ok(())
    }
}

/// Rows met per output position, checked against `runs.steps` at the end: a pack whose
/// shards disagree with its runs table is reported rather than exported short.
pub struct RowCounts(Vec<u64>);

impl RowCounts {
    pub fn new(selection: &Selection) -> RowCounts {
        RowCounts(vec![0; selection.len()])
    }

    /// Adds a piece's run-length tally of (position, rows).
    pub fn add(&mut self, tally: &[(u32, u64)]) {
        for &(pos, n) in tally {
            self.0[pos as usize] += n;
        }
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    pub fn of(&self, pos: u32) -> u64 {
        self.0[pos as usize]
    }

    /// Fails when a run's row count differs from its `runs.steps`.
    pub fn verify(&self, source: &SourcePack, selection: &Selection) -> Result<()> {
        for (pos, &slot) in selection.slots.iter().enumerate() {
            let run = &source.runs[slot];
            if self.0[pos] != run.steps.max(0) as u64 {
                bail!(
                    "{}: run {} has {} rows in the shards but runs.steps says {} (the pack is inconsistent; run `dataset-packer validate`)",
                    source.dir.display(),
                    run.id,
                    self.0[pos],
                    run.steps
                );
            }
        }
        Ok(())
    }
}

/// Counts one more row of output position `pos` in a run-length tally.
#[inline]
pub fn tally(runs: &mut Vec<(u32, u64)>, pos: u32) {
    match runs.last_mut() {
        Some((p, n)) if *p == pos => *n += 1,
        _ => runs.push((pos, 1)),
    }
}
