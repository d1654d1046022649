//! One page of one run, read for `show`: the run looked up in metadata.db (its `runs` and
//! `run_details` rows, and from `run_index` the shard and row where its rows start: an O(1)
//! seek, no scan; rebuilt for a pack that records no index), the page's first row found by
//! binary search on step_index within the run, and only the rows of that page mapped,
//! following the run into the next shards when it straddles a boundary. The shards it touches
//! are checksummed first. Unlike [`crate::Pack`], it also reads legacy 46-byte packs.

use std::path::Path;

use serde_json::{Value, json};

use crate::error::{Result, fail};
use crate::format::board::{self, MOVE_NAMES};
use crate::format::metadata::{self, RowLocation, RunLookup};
use crate::format::row::{ROW_BYTES, StepRow};
use crate::format::search::{self, FieldValue, SearchStats};
use crate::format::valuation::ValuationTable;
use crate::pack::families;
use crate::pack::run_index;
use crate::pack::shards::{self, Shard};
use crate::pack::versions::{VersionSpec, View};
use crate::progress::thousands;

/// Which rows of the run a page holds.
pub enum Window {
    /// The first `limit` rows whose step_index is at least `step`.
    Step { step: u64, limit: u64 },
    /// The run's last `n` rows.
    Last(u64),
}

/// Reads one page of run `id` of the pack in `dir` (or at a URL: the pack fetched into the
/// cache first).
pub fn read(dir: &Path, version: &VersionSpec, id: u64, window: Window) -> Result<Page> {
    // One run of a remote pack: only the blocks holding its rows are fetched.
    crate::pack::open::with_located(dir, crate::pack::open::Wanted::Lazy, |pack| {
        read_in(pack.dir(), version, id, window)
    })
}

fn read_in(dir: &Path, version: &VersionSpec, id: u64, window: Window) -> Result<Page> {
    let opened = crate::pack::open::open(dir, version, true)?;
    let run = find_run(&opened.conn, &opened.view, dir, id)?;
    let search = search_family(&opened)?;
    let names = opened.valuations()?;
    let crate::pack::open::Opened { conn, shards, .. } = opened;
    let first_row = match run.first_row {
        Some(at) => at,
        None => run_index::locate_unindexed(&conn, &shards, run.run.id, run.run.steps as u64)?,
    };
    let run = RunLookup {
        first_row: Some(first_row),
        ..run
    };
    let rows = RunRows::locate(&shards, run.run.id, first_row, run.run.steps as u64)?;
    let touched: Vec<usize> = rows.segments.iter().map(|&(si, _, _)| si).collect();
    shards::verify_shards(dir, &conn, &shards, &touched, 1)?;
    let (start, limit) = match window {
        Window::Last(n) => (rows.len.saturating_sub(n), n),
        Window::Step { step, limit } => (rows.first_at_or_after(step)?, limit),
    };
    // One row past the page tells the step the next page starts at.
    let mut page = rows.read(start, limit + 1)?;
    let next = (page.len() as u64 > limit).then(|| page.pop().expect("a row past the page"));
    let search = match search {
        Some(family) => Some(rows.read_search(&family, start, page.len() as u64)?),
        None => None,
    };
    let last_step = match (page.is_empty(), rows.len) {
        (true, n) if n > 0 => Some(rows.read(n - 1, 1)?[0].step_index),
        _ => None,
    };
    Ok(Page {
        first_file: rows
            .segments
            .first()
            .map(|&(si, _, _)| rows.shards[si].name.clone()),
        rows_at: rows.describe_start(),
        names,
        run,
        start,
        steps: page,
        search,
        next_from: next.map(|r| r.step_index),
        last_step,
    })
}

/// The run, checked to be showable: it exists and the pack has an index of where it starts.
fn find_run(conn: &rusqlite::Connection, view: &View, dir: &Path, id: u64) -> Result<RunLookup> {
    if metadata::session_value(conn, "shuffled")?.as_deref() == Some("true") {
        fail!(
            Unsupported,
            "show needs an unshuffled pack: {} is shuffled (session shuffled=true), so a run's rows \
             are scattered and there is no run index to seek with; show the run in the pack it was \
             shuffled from",
            dir.display()
        );
    }
    let found = match i64::try_from(id) {
        Ok(id) => metadata::read_run(conn, id)?,
        Err(_) => None,
    };
    let Some(run) = found else {
        return Err(view.missing_run(conn, dir, id));
    };
    // A pack without the table (the reference packer's) has its index rebuilt by the caller.
    if run.first_row.is_none() && metadata::has_table(conn, "run_index")? {
        fail!(
            Unsupported,
            "show needs an unshuffled pack with a run index: {}/metadata.db has no run_index entry \
             for run {id}",
            dir.display()
        );
    }
    Ok(run)
}

/// Where one run's rows are: a list of (shard, first row, rows) stretches, in order (more than
/// one when the run continues into the next shard). Rows are only mapped when read.
struct RunRows<'a> {
    shards: &'a [Shard],
    run_id: i64,
    segments: Vec<(usize, u64, u64)>,
    len: u64,
}

impl<'a> RunRows<'a> {
    /// The stretches holding `len` rows from `at`, checked against the shards' row counts.
    fn locate(shards: &'a [Shard], run_id: i64, at: RowLocation, len: u64) -> Result<RunRows<'a>> {
        let mut segments = Vec::new();
        let (mut shard, mut offset, mut left) = (at.shard as usize, at.row_offset, len);
        while left > 0 {
            let Some(s) = shards.get(shard) else {
                fail!(
                    Corrupt,
                    "metadata.db says run {run_id} has {len} rows from shard {} row {}, but the \
                     shards end {left} rows short: the pack is inconsistent (run `dataset-packer \
                     validate`)",
                    at.shard,
                    at.row_offset
                );
            };
            let take = left.min(s.header.rows.saturating_sub(offset));
            if take > 0 {
                segments.push((shard, offset, take));
            }
            left -= take;
            shard += 1;
            offset = 0;
        }
        Ok(RunRows {
            shards,
            run_id,
            segments,
            len,
        })
    }

    /// Rows `from..from + count` of the run (fewer at its end), decoded.
    fn read(&self, from: u64, count: u64) -> Result<Vec<StepRow>> {
        let mut out = Vec::new();
        for (si, start, n) in self.pieces(from, count) {
            out.extend(self.map(si, start, n)?);
        }
        Ok(out)
    }

    /// Where rows `from..from + count` of the run (fewer at its end) are: (shard, first row
    /// in it, rows), in order.
    fn pieces(&self, from: u64, count: u64) -> Vec<(usize, u64, u64)> {
        let mut out = Vec::new();
        let (mut skip, mut want) = (from, count.min(self.len.saturating_sub(from)));
        for &(si, start, rows) in &self.segments {
            if want == 0 {
                break;
            }
            if skip >= rows {
                skip -= rows;
                continue;
            }
            let n = want.min(rows - skip);
            out.push((si, start + skip, n));
            want -= n;
            skip = 0;
        }
        out
    }

    /// The search statistics of the same rows as [`RunRows::read`], from the pack's `search`
    /// family.
    fn read_search(
        &self,
        family: &families::Family,
        from: u64,
        count: u64,
    ) -> Result<Vec<SearchStats>> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for (si, start, n) in self.pieces(from, count) {
            family.open(si)?.read_rows(start, n, &mut buf)?;
            out.extend(
                buf.chunks_exact(search::ROW_BYTES)
                    .map(SearchStats::from_bytes),
            );
        }
        Ok(out)
    }

    /// Maps `count` rows of one shard and decodes them, checking they belong to the run.
    fn map(&self, si: usize, start: u64, count: u64) -> Result<Vec<StepRow>> {
        let shard = &self.shards[si];
        let rows: Vec<StepRow> = shard
            .read_aligned(start, count)?
            .chunks_exact(ROW_BYTES)
            .map(StepRow::from_bytes)
            .collect();
        if let Some((i, r)) = rows
            .iter()
            .enumerate()
            .find(|(_, r)| i64::from(r.run_id) != self.run_id)
        {
            fail!(
                Corrupt,
                "{} row {} belongs to run {}, but metadata.db's run_index places run {} there: \
                 the pack is inconsistent (run `dataset-packer validate`)",
                shard.name,
                start + i as u64,
                r.run_id,
                self.run_id
            );
        }
        Ok(rows)
    }

    /// The position of the first row whose step_index is ≥ `step` (`len` when none is).
    /// step_index increases along a run, so a binary search reads about log2(len) rows.
    fn first_at_or_after(&self, step: u64) -> Result<u64> {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if u64::from(self.read(mid, 1)?[0].step_index) < step {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Where the run's first row is, for the facts ("steps-00007.npy row 80").
    fn describe_start(&self) -> String {
        match self.segments.first() {
            None => "no rows".into(),
            Some(&(si, start, _)) => {
                let more = match self.segments.len() {
                    1 => String::new(),
                    n => format!(", continuing into {} more shard(s)", n - 1),
                };
                format!("{} row {}{more}", self.shards[si].name, thousands(start))
            }
        }
    }
}

/// One page of a run.
pub struct Page {
    /// The run's `runs`, `run_details` and (found or rebuilt) `run_index` rows.
    pub run: RunLookup,
    /// The shard file holding the run's first row (None for a run without rows).
    pub first_file: Option<String>,
    /// Where the run's rows are, in words ("steps-00007.npy row 80").
    pub rows_at: String,
    /// Position in the run of the page's first row.
    pub start: u64,
    pub steps: Vec<StepRow>,
    /// The steps' search statistics, when the pack keeps them (`pack --search-stats`).
    pub search: Option<Vec<SearchStats>>,
    /// The step_index the next page starts at, if there are more rows.
    pub next_from: Option<u32>,
    /// The run's last step_index (None for a run without rows); read only for an empty page.
    pub last_step: Option<u32>,
    /// The pack's valuation table, for the steps' `valuation_type` names.
    pub names: ValuationTable,
}

/// The pack's `search` family when it holds the search statistics of `pack --search-stats`
/// (a family of that name from another tool is not shown).
fn search_family(opened: &crate::pack::open::Opened) -> Result<Option<families::Family>> {
    let scan = opened.families();
    Ok(scan
        .family(search::FAMILY)
        .filter(|f| f.holds_search_stats())
        .cloned())
}

// ---------------------------------------------------------------------------------------------
// A step as people read it: what `show` prints and `show --json` and the viewer's API answer

/// The 4×4 board as tile values (0 = empty), row-major.
pub fn tiles(r: &StepRow) -> [[u64; 4]; 4] {
    let cells = board::unpack(r.board, r.tile_65536_mask);
    std::array::from_fn(|y| {
        std::array::from_fn(|x| match cells[4 * y + x] {
            0 => 0,
            e => 1u64 << e,
        })
    })
}

/// Whether move `k` (0 up … 3 right) is legal on the row's board.
pub fn legal(r: &StepRow, k: usize) -> bool {
    r.ev_legal & (1 << k) != 0
}

/// The name of valuation type `id`, or `#id (undefined)` when the table has none.
pub fn valuation_name(names: &ValuationTable, id: u8) -> String {
    names
        .name(id)
        .map_or_else(|| format!("#{id} (undefined)"), str::to_string)
}

/// `up`, `down`, `left`, `right`, or `#dir (invalid)`.
pub fn move_name(dir: u8) -> String {
    MOVE_NAMES
        .get(dir as usize)
        .map_or_else(|| format!("#{dir} (invalid)"), |n| n.to_string())
}

/// A step as `show --json` prints it: board as tile values, move, valuation type, the four
/// EVs and their legality by move name, and the search statistics when the pack keeps them.
pub fn step_json(s: &StepRow, names: &ValuationTable, search: Option<&SearchStats>) -> Value {
    let by_move = |f: &dyn Fn(usize) -> Value| -> serde_json::Map<String, Value> {
        MOVE_NAMES
            .iter()
            .enumerate()
            .map(|(k, m)| (m.to_string(), f(k)))
            .collect()
    };
    let mut step = json!({
        "step_index": s.step_index,
        "board": tiles(s),
        "board_eval": s.board_eval,
        "max_rank": s.max_rank,
        "move": move_name(s.move_dir),
        "valuation_type": valuation_name(names, s.valuation_type),
        "branch_evs": by_move(&|k| f32_json(s.branch_evs[k])),
        "legal": by_move(&|k| json!(legal(s, k))),
        "seed": s.seed,
    });
    if let Some(stats) = search {
        step["search"] = search_json(stats);
    }
    step
}

/// A step's search statistics under their log names (`null` counts when not used, as logged).
pub fn search_json(s: &SearchStats) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("used".into(), json!(s.used));
    for (name, value) in s.fields() {
        let v = match value {
            FieldValue::Count(c) => json!(c),
            FieldValue::Rate(r) => f32_json(r),
        };
        m.insert(name.to_string(), if s.used { v } else { Value::Null });
    }
    m.into()
}

/// An f32 as the JSON number with the fewest digits that reads back as the same f32 (`json!`
/// would widen it to f64 first and print `-13502.326171875` for `-13502.326`); null for NaN
/// and infinities, which JSON has no numbers for.
pub fn f32_json(v: f32) -> Value {
    format!("{v}")
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}
