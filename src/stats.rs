//! What a pack holds, as numbers: [`stats()`] returns the figures `dataset-packer stats` prints
//! (as text, or as [`Stats::to_json`] with `--json`) and `report` draws. The story: read the run
//! table, session and findings from metadata.db (with an SQL selection, only the runs it
//! selects); make one parallel pass over the rows (memory-mapped chunks, checked against their
//! recorded checksums) counting rows per (max_rank, valuation type) and per move, and the EVs of
//! legal moves per valuation type; turn these into figures (steps and scores per run, runs by
//! depth, tiles reached, valuation types overall and by phase of game, EV distributions, moves)
//! returned as one [`Stats`] struct. Printing is the commands' job.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
//! # let pack = fixture.path();
//! use dataset_packer::{StatsOptions, stats};
//!
//! let all = stats(pack, &StatsOptions::default())?;
//! let deep = stats(pack, &StatsOptions::default().select_sql("max_score > 3000"))?;
//! assert!(deep.runs < all.runs && deep.rows < all.rows);
//! println!("{} runs, median score {:?}", all.runs, all.score.map(|s| s.median));
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Value, json};

use crate::error::{Result, err};
use crate::export::select::selected_ids;
use crate::format::board::MOVE_NAMES;
use crate::format::metadata::{self, RunDetails, RunRow};
use crate::format::row::{ROW_BYTES, offset};
use crate::format::search;
use crate::format::valuation::ValuationTable;
use crate::ordered::ordered_try_map;
use crate::pack::families;
use crate::pack::open::Located;
use crate::pack::query::{Param, RunFilter, SqlLimits};
use crate::pack::shards::{self, Access, RunSlots, Shard};
use crate::pack::versions::{self, VersionSpec};

/// Rows per memory-mapped chunk (6 MiB), as in validate.
pub(crate) const CHUNK_ROWS: u64 = 128 * 1024;
/// Step buckets of the by-step figures; the last one also holds every later step.
pub const STEP_BUCKETS: usize = 40;
/// Skipped runs listed by name (the count covers them all).
pub const SKIPPED_EXAMPLES: usize = 3;
/// Bins (at most, plus one) of the run-length and EV histograms.
pub const HISTOGRAM_BINS: usize = 40;
/// The tiles the highest-tile table always lists (more when runs end lower or higher).
pub const LANDMARK_TILES: (i64, i64) = (2048, 65536);

// ---------------------------------------------------------------------------------------------
// The row pass

/// What the pass over the rows counts: rows per (max_rank, valuation type) and per move, and
/// the EVs of legal moves per valuation type. The columns it reads sit at the same offsets in
/// the legacy packed 46-byte layout up to byte 26; the EVs start 2 bytes earlier there.
pub(crate) struct RowCounts {
    /// Rows per (max_rank, valuation_type), indexed `max_rank * 256 + valuation_type`.
    pub by_rank_type: Vec<u64>,
    /// Rows per move_dir: up, down, left, right, then any value above 3.
    pub moves: [u64; 5],
    /// EVs of legal moves, per valuation type id.
    pub evs: Vec<Option<EvHistogram>>,
    /// Steps per step bucket: `step_index / step_width`, the last bucket open-ended.
    step_width: u64,
    /// Rows per (step bucket, valuation_type), indexed `bucket * 256 + valuation_type`.
    by_step_type: Vec<u64>,
    /// board_eval per step bucket.
    eval_by_step: Vec<EvalSum>,
}

/// board_eval of the rows of one step bucket: exact sum, min and max.
#[derive(Debug, Clone, Copy)]
struct EvalSum {
    rows: u64,
    sum: i128,
    min: i32,
    max: i32,
}

impl EvalSum {
    const EMPTY: EvalSum = EvalSum {
        rows: 0,
        sum: 0,
        min: i32::MAX,
        max: i32::MIN,
    };

    fn add(&mut self, v: i32) {
        self.rows += 1;
        self.sum += i128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    fn merge(&mut self, o: &EvalSum) {
        self.rows += o.rows;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }
}

impl RowCounts {
    fn new(step_width: u64) -> RowCounts {
        RowCounts {
            by_rank_type: vec![0; 256 * 256],
            moves: [0; 5],
            evs: (0..256).map(|_| None).collect(),
            step_width: step_width.max(1),
            by_step_type: vec![0; STEP_BUCKETS * 256],
            eval_by_step: vec![EvalSum::EMPTY; STEP_BUCKETS],
        }
    }

    /// Counts `rows`, or (with `only`) just the rows of the runs it holds.
    fn count(&mut self, rows: &[u8], row_bytes: usize, only: Option<&RunSlots>) {
        let ev_at = if row_bytes == ROW_BYTES {
            offset::BRANCH_EVS
        } else {
            offset::BRANCH_EVS - 2
        };
        for row in rows.chunks_exact(row_bytes) {
            if let Some(only) = only {
                let id = u32::from_le_bytes(row[..4].try_into().unwrap());
                if only.get(id).is_none() {
                    continue;
                }
            }
            let rank = row[offset::MAX_RANK] as usize;
            let kind = row[offset::VALUATION_TYPE] as usize;
            self.by_rank_type[rank << 8 | kind] += 1;
            self.moves[(row[offset::MOVE_DIR] as usize).min(4)] += 1;
            let step = u32::from_le_bytes(row[offset::STEP_INDEX..][..4].try_into().unwrap());
            let bucket = ((u64::from(step) / self.step_width) as usize).min(STEP_BUCKETS - 1);
            self.by_step_type[bucket << 8 | kind] += 1;
            let eval = i32::from_le_bytes(row[offset::BOARD_EVAL..][..4].try_into().unwrap());
            self.eval_by_step[bucket].add(eval);
            let legal = row[offset::EV_LEGAL];
            let hist = self.evs[kind].get_or_insert_with(EvHistogram::new);
            for k in 0..4 {
                if legal & (1 << k) != 0 {
                    let at = ev_at + 4 * k;
                    hist.add(f32::from_le_bytes(row[at..at + 4].try_into().unwrap()));
                }
            }
        }
    }

    fn merge(&mut self, other: &RowCounts) {
        for (a, b) in self.by_rank_type.iter_mut().zip(&other.by_rank_type) {
            *a += b;
        }
        for (a, b) in self.moves.iter_mut().zip(other.moves) {
            *a += b;
        }
        for (a, b) in self.by_step_type.iter_mut().zip(&other.by_step_type) {
            *a += b;
        }
        for (a, b) in self.eval_by_step.iter_mut().zip(&other.eval_by_step) {
            a.merge(b);
        }
        for (a, b) in self.evs.iter_mut().zip(&other.evs) {
            if let Some(b) = b {
                a.get_or_insert_with(EvHistogram::new).merge(b);
            }
        }
    }

    /// Rows of one (max_rank, valuation_type) cell.
    pub fn at(&self, rank: usize, kind: usize) -> u64 {
        self.by_rank_type[rank << 8 | kind]
    }
}

/// EVs in `from..to` (the last bin includes `to`).
#[derive(Debug, Clone, Copy)]
pub struct EvBin {
    pub from: f64,
    pub to: f64,
    pub evs: u64,
}

/// A distribution of float32 values in bounded memory: exact count, sum, min and max, and a
/// histogram over the top 16 bits of each value's order-preserving key (sign, exponent and
/// 7 bits of mantissa), from which quartiles are read to within 1% of their value. Each bucket
/// also keeps the lowest and highest key it saw, so a quantile is interpolated between values
/// that occur: a bucket of exact zeros reads as 0, not as a point inside the denormals its key
/// range also spans.
pub(crate) struct EvHistogram {
    pub counts: Vec<u64>,
    /// Per bucket, the highest low 16 bits of a key seen, and the complement of the lowest
    /// (complemented so that zeroed memory means "none seen" for both).
    pub high_low: Vec<u16>,
    pub low_low_inv: Vec<u16>,
    pub n: u64,
    pub sum: f64,
    pub min: f32,
    pub max: f32,
}

impl EvHistogram {
    fn new() -> EvHistogram {
        EvHistogram {
            counts: vec![0; 1 << 16],
            high_low: vec![0; 1 << 16],
            low_low_inv: vec![0; 1 << 16],
            n: 0,
            sum: 0.0,
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
        }
    }

    /// The key that orders floats as their values: negative ones bit-inverted.
    fn key(v: f32) -> u32 {
        let bits = v.to_bits();
        if bits & 0x8000_0000 != 0 {
            !bits
        } else {
            bits | 0x8000_0000
        }
    }

    fn value(key: u32) -> f32 {
        if key & 0x8000_0000 != 0 {
            f32::from_bits(key & 0x7fff_ffff)
        } else {
            f32::from_bits(!key)
        }
    }

    fn add(&mut self, v: f32) {
        if !v.is_finite() {
            return; // validate reports those; a pack this tool wrote has none
        }
        let key = Self::key(v);
        let (bucket, low) = ((key >> 16) as usize, key as u16);
        self.counts[bucket] += 1;
        self.high_low[bucket] = self.high_low[bucket].max(low);
        self.low_low_inv[bucket] = self.low_low_inv[bucket].max(!low);
        self.n += 1;
        self.sum += f64::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    fn merge(&mut self, other: &EvHistogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        for (a, b) in self.high_low.iter_mut().zip(&other.high_low) {
            *a = (*a).max(*b);
        }
        for (a, b) in self.low_low_inv.iter_mut().zip(&other.low_low_inv) {
            *a = (*a).max(*b);
        }
        self.n += other.n;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// The q-quantile, interpolated between the lowest and highest value of its bucket.
    fn quantile(&self, q: f64) -> f64 {
        let rank = q * (self.n - 1) as f64;
        let mut before = 0u64;
        for (bucket, &c) in self.counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            if (before + c) as f64 > rank {
                let base = (bucket as u32) << 16;
                let lo = f64::from(Self::value(base | u32::from(!self.low_low_inv[bucket])));
                let hi = f64::from(Self::value(base | u32::from(self.high_low[bucket])));
                let within = (rank - before as f64 + 0.5) / c as f64;
                let v = lo + (hi - lo) * within.clamp(0.0, 1.0);
                return v.clamp(f64::from(self.min), f64::from(self.max));
            }
            before += c;
        }
        f64::from(self.max)
    }

    /// About [`HISTOGRAM_BINS`] equal-width bins over min..=max, each counting the values of the
    /// key buckets whose middle falls in it: exact total, edges good to 1% of the value.
    pub fn bins(&self) -> Vec<EvBin> {
        if self.n == 0 {
            return Vec::new();
        }
        let (min, max) = (f64::from(self.min), f64::from(self.max));
        let n = if max > min { HISTOGRAM_BINS } else { 1 };
        let width = (max - min) / n as f64;
        let mut counts = vec![0u64; n];
        for (bucket, &c) in self.counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            // Midway between the lowest and highest value the bucket saw: a bucket of exact
            // zeros lands on 0.
            let base = (bucket as u32) << 16;
            let lo = f64::from(Self::value(base | u32::from(!self.low_low_inv[bucket])));
            let hi = f64::from(Self::value(base | u32::from(self.high_low[bucket])));
            let mid = ((lo + hi) / 2.0).clamp(min, max);
            let at = if width > 0.0 {
                (((mid - min) / width) as usize).min(n - 1)
            } else {
                0
            };
            counts[at] += c;
        }
        (0..n)
            .map(|k| EvBin {
                from: min + width * k as f64,
                to: if k + 1 == n {
                    max
                } else {
                    min + width * (k + 1) as f64
                },
                evs: counts[k],
            })
            .collect()
    }

    pub fn spread(&self) -> Option<Spread> {
        (self.n > 0).then(|| Spread {
            min: f64::from(self.min),
            p25: self.quantile(0.25),
            median: self.quantile(0.5),
            mean: self.sum / self.n as f64,
            p75: self.quantile(0.75),
            max: f64::from(self.max),
        })
    }
}

pub(crate) fn count_chunk(
    shard: &Shard,
    start: u64,
    count: u64,
    only: Option<&RunSlots>,
    step_width: u64,
) -> Result<RowCounts> {
    let map = shard.map_rows(start, count, Access::Sequential)?;
    let mut counts = RowCounts::new(step_width);
    counts.count(&map, shard.row_bytes(), only);
    Ok(counts)
}

/// One pass over every row of `shards` (or, with `only`, the rows of those runs), `workers`
/// chunks at a time, bucketing steps by `step_width`.
pub(crate) fn count_rows(
    shards: &[Shard],
    workers: usize,
    only: Option<&RunSlots>,
    step_width: u64,
) -> Result<RowCounts> {
    let chunks = shards::chunks(shards, CHUNK_ROWS);
    let mut total = RowCounts::new(step_width);
    // A remote pack streamed block by block keeps only the shards being read.
    let mut behind = shards::release_behind(shards);
    ordered_try_map(
        &chunks,
        workers,
        workers * 2,
        || (),
        |_, &(si, start, count)| count_chunk(&shards[si], start, count, only, step_width),
        |i, counts| {
            behind.reached(chunks[i].0);
            total.merge(&counts?);
            Ok(())
        },
    )?;
    Ok(total)
}

// ---------------------------------------------------------------------------------------------
// The figures

/// min / quartiles / median / mean / max of a list of per-run values.
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    pub min: f64,
    /// The first quartile.
    pub p25: f64,
    pub median: f64,
    pub mean: f64,
    /// The third quartile.
    pub p75: f64,
    pub max: f64,
}

impl Spread {
    pub const NAMES: [&'static str; 6] = ["min", "p25", "median", "mean", "p75", "max"];

    /// None for an empty list. Quantiles interpolate linearly between ranks (NumPy's default),
    /// so the median of an even count is the mean of the two middle values.
    pub fn of(mut values: Vec<i64>) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let sum: f64 = values.iter().map(|&v| v as f64).sum();
        Some(Spread {
            min: values[0] as f64,
            p25: quantile(&values, 0.25),
            median: quantile(&values, 0.5),
            mean: sum / values.len() as f64,
            p75: quantile(&values, 0.75),
            max: values[values.len() - 1] as f64,
        })
    }

    pub fn values(&self) -> [f64; 6] {
        [
            self.min,
            self.p25,
            self.median,
            self.mean,
            self.p75,
            self.max,
        ]
    }
}

pub(crate) fn quantile(sorted: &[i64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] as f64 + (sorted[hi] - sorted[lo]) as f64 * (pos - lo as f64)
}

/// Runs whose max_score lies in `from..=to` (a power-of-two bin).
#[derive(Debug, Clone, Copy)]
pub struct ScoreBin {
    pub from: i64,
    pub to: i64,
    pub runs: u64,
}

/// Power-of-two bins from the lowest to the highest non-empty one: [2^k, 2^(k+1) - 1]
/// (the first bin, k = 0, also holds 0).
pub(crate) fn score_bins<'a>(runs: impl IntoIterator<Item = &'a RunRow>) -> Vec<ScoreBin> {
    let bin = |score: i64| 63 - (score.max(1) as u64).leading_zeros() as usize;
    let mut counts = [0u64; 64];
    for r in runs {
        counts[bin(r.max_score)] += 1;
    }
    let Some(first) = counts.iter().position(|&c| c > 0) else {
        return Vec::new();
    };
    let last = counts
        .iter()
        .rposition(|&c| c > 0)
        .expect("one is non-empty");
    (first..=last)
        .map(|k| ScoreBin {
            from: if k == 0 { 0 } else { 1i64 << k },
            to: ((1i128 << (k + 1)) - 1).min(i64::MAX as i128) as i64,
            runs: counts[k],
        })
        .collect()
}

/// A "nice" bin width (1, 2 or 5 times a power of ten) that covers `0..=max` in about `bins`
/// bins.
pub(crate) fn nice_width(max: u64, bins: usize) -> u64 {
    let want = max.div_ceil(bins as u64).max(1);
    let mut unit = 1u64;
    loop {
        for m in [1, 2, 5] {
            if unit.saturating_mul(m) >= want {
                return unit.saturating_mul(m);
            }
        }
        unit = unit.saturating_mul(10);
    }
}

/// Runs per run length (`runs.steps`) in bins of `width` steps: [from, to].
#[derive(Debug, Clone, Copy)]
pub struct LengthBin {
    pub from: i64,
    pub to: i64,
    pub runs: u64,
}

/// Equal-width bins from 0 to the longest run, every run counted.
pub(crate) fn length_bins(runs: &[RunRow]) -> Vec<LengthBin> {
    let Some(longest) = runs.iter().map(|r| r.steps.max(0) as u64).max() else {
        return Vec::new();
    };
    let width = nice_width(longest, HISTOGRAM_BINS);
    let mut counts = vec![0u64; (longest / width) as usize + 1];
    for r in runs {
        counts[(r.steps.max(0) as u64 / width) as usize] += 1;
    }
    let width = width as i64;
    (0..counts.len())
        .map(|k| LengthBin {
            from: k as i64 * width,
            to: (k as i64 + 1) * width - 1,
            runs: counts[k],
        })
        .collect()
}

/// The rows of one step bucket: step_index in `from..=to` (`to` None: the last bucket, every
/// later step too), per valuation type (same order as the type list), and their board_eval.
#[derive(Debug, Clone)]
pub struct StepBucket {
    pub from: u64,
    pub to: Option<u64>,
    pub rows: u64,
    pub by_type: Vec<u64>,
    /// board_eval min, mean and max (None without rows).
    pub board_eval: Option<(i64, f64, i64)>,
}

/// The step buckets up to the last one with rows.
fn step_buckets(counts: &RowCounts, types: &[TypeRows]) -> Vec<StepBucket> {
    let w = counts.step_width;
    let last = counts.eval_by_step.iter().rposition(|e| e.rows > 0);
    let Some(last) = last else {
        return Vec::new();
    };
    (0..=last)
        .map(|b| {
            let e = counts.eval_by_step[b];
            StepBucket {
                from: b as u64 * w,
                to: (b + 1 < STEP_BUCKETS).then(|| (b as u64 + 1) * w - 1),
                rows: e.rows,
                by_type: types
                    .iter()
                    .map(|t| counts.by_step_type[b << 8 | t.id])
                    .collect(),
                board_eval: (e.rows > 0).then(|| {
                    (
                        i64::from(e.min),
                        e.sum as f64 / e.rows as f64,
                        i64::from(e.max),
                    )
                }),
            }
        })
        .collect()
}

/// How many runs reached a tile (highest_tile ≥ tile) and how many ended with it as their
/// highest tile exactly.
#[derive(Debug, Clone, Copy)]
pub struct TileRow {
    pub tile: i64,
    pub reached: u64,
    pub highest: u64,
}

/// Every power of two from 2048 (or the lowest highest tile, when lower) to 65536 (or the
/// largest, when higher).
pub(crate) fn tile_rows(runs: &[RunRow]) -> Vec<TileRow> {
    let pow2_floor = |t: i64| {
        if t < 2 {
            2
        } else {
            1i64 << (63 - t.leading_zeros())
        }
    };
    let lowest = runs.iter().map(|r| pow2_floor(r.highest_tile)).min();
    let highest = runs.iter().map(|r| pow2_floor(r.highest_tile)).max();
    let mut tile = lowest.map_or(LANDMARK_TILES.0, |t| t.min(LANDMARK_TILES.0));
    let top = highest.map_or(LANDMARK_TILES.1, |t| t.max(LANDMARK_TILES.1));
    let mut out = Vec::new();
    while tile <= top {
        out.push(TileRow {
            tile,
            reached: runs.iter().filter(|r| r.highest_tile >= tile).count() as u64,
            highest: runs.iter().filter(|r| r.highest_tile == tile).count() as u64,
        });
        // 2^62 is the last power of two an i64 holds (a damaged runs table can get there).
        let Some(next) = tile.checked_mul(2) else {
            break;
        };
        tile = next;
    }
    out
}

/// The runs of one search depth (`run_details.depth`; None when not recorded).
#[derive(Debug, Clone)]
pub struct DepthRow {
    pub depth: Option<i64>,
    pub runs: u64,
    pub rows: i64,
    pub median_score: f64,
    pub max_score: i64,
    pub max_tile: i64,
    /// The final-score distribution of these runs, in the score bins the figures use.
    pub score_bins: Vec<ScoreBin>,
}

pub(crate) fn depth_rows(
    runs: &[RunRow],
    details: &std::collections::HashMap<i64, RunDetails>,
) -> Vec<DepthRow> {
    let mut by_depth: std::collections::BTreeMap<Option<i64>, Vec<&RunRow>> = Default::default();
    for r in runs {
        let depth = details.get(&r.id).and_then(|d| d.depth);
        by_depth.entry(depth).or_default().push(r);
    }
    by_depth
        .into_iter()
        .map(|(depth, rs)| DepthRow {
            depth,
            runs: rs.len() as u64,
            rows: rs.iter().map(|r| r.steps).sum(),
            median_score: Spread::of(rs.iter().map(|r| r.max_score).collect())
                .map_or(0.0, |s| s.median),
            max_score: rs.iter().map(|r| r.max_score).max().unwrap_or(0),
            max_tile: rs.iter().map(|r| r.highest_tile).max().unwrap_or(0),
            score_bins: score_bins(rs.iter().copied()),
        })
        .collect()
}

/// One valuation type and its rows.
#[derive(Debug, Clone)]
pub struct TypeRows {
    pub id: usize,
    pub name: String,
    pub rows: u64,
}

/// Every name of the table plus any id the rows use that it does not define, with row counts.
pub(crate) fn type_rows(counts: &RowCounts, table: &ValuationTable) -> Vec<TypeRows> {
    (0..256)
        .filter_map(|id| {
            let rows: u64 = (0..256).map(|rank| counts.at(rank, id)).sum();
            let name = table.name(id as u8).map(str::to_string);
            (name.is_some() || rows > 0).then(|| TypeRows {
                id,
                name: name.unwrap_or_else(|| format!("#{id} (undefined)")),
                rows,
            })
        })
        .collect()
}

/// Rows at one max_rank, per valuation id (same order as the type list).
#[derive(Debug, Clone)]
pub struct Phase {
    pub max_rank: usize,
    pub rows: u64,
    pub by_type: Vec<u64>,
}

pub(crate) fn phases(counts: &RowCounts, types: &[TypeRows]) -> Vec<Phase> {
    (0..256)
        .filter_map(|rank| {
            let by_type: Vec<u64> = types.iter().map(|t| counts.at(rank, t.id)).collect();
            let rows = by_type.iter().sum();
            (rows > 0).then_some(Phase {
                max_rank: rank,
                rows,
                by_type,
            })
        })
        .collect()
}

/// Everything `stats` reports about a pack (or the runs an SQL selection picks): what
/// [`stats()`] returns.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Stats {
    /// The pack's folder, as given.
    pub pack: PathBuf,
    /// The pack's identity (None: made before versions), the version described, whether it
    /// is the latest, and the packs the pack was made from (its lineage).
    pub pack_id: Option<String>,
    pub version: u32,
    pub latest: bool,
    pub sources: Vec<versions::Source>,
    /// The SQL selection the figures are restricted to, and its parameter values (as
    /// [`Param`]s print).
    pub selection: Option<String>,
    pub params: Vec<String>,
    /// Runs described.
    pub runs: usize,
    /// Rows described (of the selected runs, with a selection).
    pub rows: u64,
    /// Σ runs.steps: equals `rows` in a consistent pack.
    pub rows_in_runs: i64,
    /// The shard files, in order, and their bytes; the bytes of `metadata.db`.
    pub shard_names: Vec<String>,
    pub shard_bytes: u64,
    pub metadata_bytes: u64,
    /// Whether the pack is shuffled (rows not grouped by run).
    pub shuffled: bool,
    /// Steps per run, and final score (`max_score`) per run; None without runs.
    pub steps: Option<Spread>,
    pub score: Option<Spread>,
    /// Runs by final score, in power-of-two bins.
    pub score_bins: Vec<ScoreBin>,
    /// Runs reaching each tile, and having it as their highest.
    pub tiles: Vec<TileRow>,
    /// Runs, rows and scores per search depth (`run_details.depth`).
    pub depths: Vec<DepthRow>,
    /// EVs of legal moves per valuation type: name, count, spread.
    pub evs: Vec<(String, u64, Spread)>,
    /// Histograms of the same EVs, in the order of `evs`.
    pub ev_bins: Vec<Vec<EvBin>>,
    /// Runs by length (`runs.steps`).
    pub length_bins: Vec<LengthBin>,
    /// Rows by step_index bucket: valuation mix and board_eval along the game.
    pub step_buckets: Vec<StepBucket>,
    /// Rows per valuation type, and per phase of game (highest tile on the board).
    pub types: Vec<TypeRows>,
    pub phases: Vec<Phase>,
    /// Rows per move: up, down, left, right, then any invalid value.
    pub moves: [u64; 5],
    /// None when the pack records no findings table.
    pub findings: Option<Vec<(String, i64)>>,
    /// Rows of `skipped_runs` (invalid input left out at pack time); None without that table.
    pub skipped_runs: Option<u64>,
    /// The first few of those runs: source path and reason.
    pub skipped_examples: Vec<(String, String)>,
    /// The pack's `session` facts, as recorded.
    pub session: Vec<(String, String)>,
    /// Search effort per depth, when the pack has a `search` companion family.
    pub search: Option<SearchEffort>,
    /// Rows whose search statistics were read but not kept (packed without --search-stats),
    /// as the session records them (summed over a merge's inputs); None when it does not.
    pub search_rows_not_kept: Option<u64>,
    /// Companion arrays: name, dtype and trailing shape, bytes; and families that do not line up.
    pub companions: Vec<(String, String, u64)>,
    pub companion_problems: Vec<String>,
    /// Staging or work folders interrupted runs left in the pack folder.
    pub leftovers: Vec<String>,
    /// Threads the row pass used, and the seconds the whole took.
    pub workers: usize,
    pub elapsed: f64,
}

/// What [`stats()`] describes and how; `StatsOptions::default()` does what `dataset-packer
/// stats PACK` does: every run of the latest version, all cores.
///
/// ```
/// use dataset_packer::{Param, StatsOptions, VersionSpec};
/// let options = StatsOptions::default()
///     .version(VersionSpec::Number(1))
///     .select_sql("SELECT id FROM runs WHERE max_score > :min")
///     .param(Param::parse("min=50000").unwrap())
///     .workers(2);
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct StatsOptions {
    version: VersionSpec,
    sql: Option<String>,
    params: Vec<Param>,
    sql_limits: SqlLimits,
    workers: usize,
}

impl Default for StatsOptions {
    fn default() -> StatsOptions {
        StatsOptions {
            version: VersionSpec::Latest,
            sql: None,
            params: Vec::new(),
            sql_limits: SqlLimits::default(),
            workers: crate::default_workers(),
        }
    }
}

impl StatsOptions {
    /// Describe the pack as `version` of it was (`--version`); by default its latest.
    pub fn version(mut self, version: VersionSpec) -> StatsOptions {
        self.version = version;
        self
    }

    /// Describe only the runs `sql` selects, and their rows (`--where`): a WHERE expression
    /// over the columns of `runs` and `run_details`, or a query that returns run ids (see
    /// [`crate::Pack::select`]). A selection of no runs is an error.
    pub fn select_sql(mut self, sql: &str) -> StatsOptions {
        self.sql = Some(sql.to_string());
        self
    }

    /// A value for the next parameter of the SQL (`--param`, repeatable).
    pub fn param(mut self, param: Param) -> StatsOptions {
        self.params.push(param);
        self
    }

    /// The values of the SQL's parameters (`--param …`), replacing any given before.
    pub fn params(mut self, params: Vec<Param>) -> StatsOptions {
        self.params = params;
        self
    }

    /// How long and how much memory the SQL selection may take (`--sql-timeout`,
    /// `--sql-memory`).
    pub fn sql_limits(mut self, limits: SqlLimits) -> StatsOptions {
        self.sql_limits = limits;
        self
    }

    /// Threads for the row pass (`--workers`); by default all cores.
    pub fn workers(mut self, workers: usize) -> StatsOptions {
        self.workers = workers.max(1);
        self
    }

    /// The SQL selection, if any.
    pub(crate) fn filter(&self) -> Option<RunFilter> {
        self.sql.as_ref().map(|sql| RunFilter {
            sql: sql.clone(),
            params: self.params.clone(),
            limits: self.sql_limits,
        })
    }
}

/// The figures of the pack at `pack` (or of the runs `options` select), as `dataset-packer
/// stats` prints them: one pass over its rows, each shard checked against its recorded
/// checksum first.
///
/// Errors: `NotAPack` when `pack` is not one; `InvalidInput` for a selection SQLite cannot
/// run or one of no runs (with [`Error::option`](crate::Error::option) `selection`); `Corrupt`
/// when a shard's bytes differ from its checksum.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// # let pack = fixture.path();
/// use dataset_packer::{Pack, StatsOptions, stats};
///
/// let figures = stats(pack, &StatsOptions::default())?;
/// assert_eq!(figures.rows, Pack::open(pack)?.len());
/// assert_eq!(figures.to_json()["runs"], figures.runs);
/// # Ok(()) }
/// ```
pub fn stats(pack: impl AsRef<Path>, options: &StatsOptions) -> Result<Stats> {
    crate::pack::open::with_located(pack.as_ref(), crate::pack::open::Wanted::Streamed, |pack| {
        gather(pack, options, None)
    })
}

/// The steps of the longest run of the version `options` read (of the runs they select):
/// what sets the width of the step buckets.
pub(crate) fn longest_run(pack: &Located, options: &StatsOptions) -> Result<u64> {
    let opened = crate::pack::open::open(pack.dir(), &options.version, true)?;
    let mut runs = metadata::read_runs(&opened.conn)?;
    if let Some(filter) = options.filter() {
        let ids = selected_ids(&filter, &opened.conn)?;
        runs.retain(|r| ids.binary_search(&r.id).is_ok());
    }
    Ok(runs
        .iter()
        .map(|r| r.steps.max(0) as u64)
        .max()
        .unwrap_or(0))
}

/// [`stats()`], with step buckets sized for runs of `longest` steps instead of the pack's own
/// longest run when given, so that packs compared side by side share their buckets.
pub(crate) fn gather(
    pack: &Located,
    options: &StatsOptions,
    longest: Option<u64>,
) -> Result<Stats> {
    let dir = pack.dir();
    let started = Instant::now();
    let workers = options.workers;
    let filter = options.filter();
    let filter = filter.as_ref();
    let opened = crate::pack::open::open(dir, &options.version, true)?;
    let all: Vec<usize> = (0..opened.shards.len()).collect();
    shards::verify_shards(dir, &opened.conn, &opened.shards, &all, workers)?;
    let scan = opened.families();
    let table = opened.valuations()?;
    let crate::pack::open::Opened {
        conn,
        shards,
        view,
        metadata_bytes,
        ..
    } = opened;
    let mut runs = metadata::read_runs(&conn)?;
    let details = metadata::read_run_details(&conn)?;
    let shuffled = metadata::session_value(&conn, "shuffled")?.as_deref() == Some("true");
    let findings = if metadata::has_table(&conn, "finding_counts")? {
        Some(metadata::read_finding_counts(&conn)?)
    } else {
        None
    };
    let session = metadata::read_session(&conn)?;
    let skipped = metadata::read_skipped(&conn)?;
    let only = match filter.map(|f| selected_ids(f, &conn)).transpose()? {
        None => None,
        Some(ids) => {
            if ids.is_empty() {
                let what = filter.map(RunFilter::describe).unwrap_or_default();
                let depths = details.values().map(|d| d.depth);
                let e = match metadata::no_depth_note(&what, depths) {
                    Some(note) => err!(
                        InvalidInput,
                        "{what} selects no runs of {}: {note}",
                        dir.display()
                    ),
                    None => err!(InvalidInput, "{what} selects no runs of {}", dir.display()),
                };
                return Err(e.with_option("selection"));
            }
            runs.retain(|r| ids.binary_search(&r.id).is_ok());
            let ids: Vec<u32> = runs.iter().map(|r| r.id as u32).collect();
            Some(RunSlots::new(&ids))
        }
    };
    let own = runs
        .iter()
        .map(|r| r.steps.max(0) as u64)
        .max()
        .unwrap_or(0);
    let longest = longest.unwrap_or(own).max(own);
    let step_width = nice_width(longest, STEP_BUCKETS);
    let counts = count_rows(&shards, workers, only.as_ref(), step_width)?;
    // The companion family `search`: the statistics `pack --search-stats` keeps (nodes
    // searched per move: `total_nodes` of the rows whose search was used), or one number per
    // row written by another tool.
    let search = match scan.family(search::FAMILY) {
        Some(family) => Some(search_effort(family, &shards, &runs, &details, workers)?),
        None => None,
    };
    let mut types = type_rows(&counts, &table);
    if !view.is_latest() {
        // The names a later version appended are not the version's: valuation_types.json
        // only grows, and a version's rows use a prefix of it (as export writes it).
        let used = types.iter().filter(|t| t.rows > 0).map(|t| t.id + 1).max();
        types = type_rows(&counts, &table.prefix(used.unwrap_or(0)));
    }
    let rows = if only.is_some() {
        counts.moves.iter().sum()
    } else {
        shards.iter().map(|s| s.header.rows).sum()
    };
    Ok(Stats {
        pack: pack.given().to_path_buf(),
        pack_id: view.history.pack_id.clone(),
        version: view.version().version,
        latest: view.is_latest(),
        sources: view.history.versions[0].sources.clone(),
        selection: filter.map(|f| f.sql.clone()),
        params: filter.map_or_else(Vec::new, |f| {
            f.params.iter().map(|p| p.to_string()).collect()
        }),
        runs: runs.len(),
        rows,
        rows_in_runs: runs.iter().map(|r| r.steps).sum(),
        shard_names: shards.iter().map(|s| s.name.clone()).collect(),
        shard_bytes: shards.iter().map(|s| s.file_len).sum(),
        metadata_bytes,
        shuffled,
        steps: Spread::of(runs.iter().map(|r| r.steps).collect()),
        score: Spread::of(runs.iter().map(|r| r.max_score).collect()),
        score_bins: score_bins(&runs),
        length_bins: length_bins(&runs),
        step_buckets: step_buckets(&counts, &types),
        tiles: tile_rows(&runs),
        depths: depth_rows(&runs, &details),
        evs: types
            .iter()
            .filter_map(|t| {
                let spread = counts.evs[t.id].as_ref()?.spread()?;
                Some((t.name.clone(), counts.evs[t.id].as_ref()?.n, spread))
            })
            .collect(),
        ev_bins: types
            .iter()
            .filter_map(|t| counts.evs[t.id].as_ref().filter(|h| h.n > 0))
            .map(EvHistogram::bins)
            .collect(),
        phases: phases(&counts, &types),
        types,
        moves: counts.moves,
        findings,
        skipped_runs: if metadata::has_table(&conn, "skipped_runs")? {
            Some(skipped.len() as u64)
        } else {
            None
        },
        skipped_examples: skipped.into_iter().take(SKIPPED_EXAMPLES).collect(),
        // Counted by the pack's writers as a whole, not kept per version.
        search_rows_not_kept: view
            .is_latest()
            .then(|| inherited_count(&session, "", search::ROWS_NOT_KEPT))
            .flatten(),
        session,
        search,
        companions: scan
            .families
            .iter()
            .map(|f| (f.name.clone(), f.describe(), f.bytes()))
            .collect(),
        companion_problems: scan.problems.into_iter().map(|(_, p)| p).collect(),
        leftovers: crate::pack::publish::leftovers(dir),
        workers,
        elapsed: started.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------------------------------------
// As JSON

fn spread_json(s: &Option<Spread>) -> Value {
    match s {
        None => Value::Null,
        Some(s) => Spread::NAMES
            .iter()
            .zip(s.values())
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
    }
}

pub(crate) fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

impl Stats {
    /// The figures as the JSON document `dataset-packer stats --json` prints (with shares,
    /// tile values and means worked out).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let figures = dataset_packer::stats(fixture.path(), &Default::default())?;
    /// let json = figures.to_json();
    /// assert_eq!(json["rows"], figures.rows);
    /// assert_eq!(json["valuation_types"].as_array().unwrap().len(), figures.types.len());
    /// # Ok(()) }
    /// ```
    pub fn to_json(&self) -> Value {
        to_json(self)
    }
}

fn to_json(s: &Stats) -> Value {
    let mut score = spread_json(&s.score);
    if let Value::Object(m) = &mut score {
        let bins = s.score_bins.iter();
        let bins = bins.map(|b| json!({"from": b.from, "to": b.to, "runs": b.runs}));
        m.insert("histogram".into(), bins.collect::<Vec<_>>().into());
    }
    let mut steps = spread_json(&s.steps);
    if let Value::Object(m) = &mut steps {
        let bins = s.length_bins.iter();
        let bins = bins.map(|b| json!({"from": b.from, "to": b.to, "runs": b.runs}));
        m.insert("histogram".into(), bins.collect::<Vec<_>>().into());
    }
    let runs = s.runs as u64;
    json!({
        "pack": s.pack.display().to_string(),
        "pack_id": s.pack_id,
        "version": s.version,
        "latest_version": s.latest,
        "made_from": s.sources,
        "runs": s.runs,
        "rows": s.rows,
        "rows_in_runs": s.rows_in_runs,
        "shards": s.shard_names.len(),
        "bytes": s.shard_bytes,
        "metadata_bytes": s.metadata_bytes,
        "shuffled": s.shuffled,
        "steps_per_run": steps,
        "score": score,
        "highest_tile": s.tiles.iter().map(|t| json!({
            "tile": t.tile, "reached": t.reached, "share": share(t.reached, runs), "highest": t.highest,
        })).collect::<Vec<_>>(),
        "valuation_types": s.types.iter().map(|t| json!({
            "id": t.id, "name": t.name, "rows": t.rows, "share": share(t.rows, s.rows),
        })).collect::<Vec<_>>(),
        "phases": s.phases.iter().map(|p| json!({
            "max_rank": p.max_rank,
            "tile": tile_value(p.max_rank),
            "rows": p.rows,
            "rows_by_type": by_name(&s.types, &p.by_type, |n| json!(n)),
            "share_by_type": by_name(&s.types, &p.by_type, |n| json!(share(n, p.rows))),
        })).collect::<Vec<_>>(),
        "moves": MOVE_NAMES.iter().copied().chain(["invalid"]).zip(s.moves)
            .map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "findings": s.findings.as_ref().map(|f| f.iter()
            .map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>()),
        "skipped_runs": s.skipped_runs,
        "search": s.search.as_ref().map(|e| json!({
            "dtype": e.dtype,
            "problem": e.problem,
            "depths": e.depths.iter().map(|d| json!({
                "depth": d.depth, "rows": d.rows, "sum": d.sum, "max": d.max,
                "mean": if d.rows == 0 { 0.0 } else { d.sum / d.rows as f64 },
                "median": d.median(),
            })).collect::<Vec<_>>(),
        })),
        "search_rows_not_kept": s.search_rows_not_kept,
        "findings_scope": if s.selection.is_some() { "whole pack" } else { "pack" },
        "where": s.selection,
        "params": s.params,
        "depths": s.depths.iter().map(|d| json!({
            "depth": d.depth, "runs": d.runs, "rows": d.rows, "median_max_score": d.median_score,
            "max_score": d.max_score, "highest_tile": d.max_tile,
            "score_histogram": d.score_bins.iter()
                .map(|b| json!({"from": b.from, "to": b.to, "runs": b.runs})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "by_step": s.step_buckets.iter().map(|b| json!({
            "from": b.from, "to": b.to, "rows": b.rows,
            "rows_by_type": by_name(&s.types, &b.by_type, |n| json!(n)),
            "board_eval": b.board_eval.map(|(min, mean, max)| json!({
                "min": min, "mean": mean, "max": max,
            })),
        })).collect::<Vec<_>>(),
        "ev_legal_moves": s.evs.iter().zip(&s.ev_bins).map(|((name, n, spread), bins)| {
            let mut v = spread_json(&Some(*spread));
            if let Value::Object(m) = &mut v {
                m.insert("evs".into(), json!(n));
                let bins = bins.iter().map(|b| json!({"from": b.from, "to": b.to, "evs": b.evs}));
                m.insert("histogram".into(), bins.collect::<Vec<_>>().into());
            }
            (name.clone(), v)
        }).collect::<serde_json::Map<_, _>>(),
        "companions": s.companions.iter().map(|(name, dtype, bytes)| json!({
            "name": name, "dtype": dtype, "bytes": bytes,
        })).collect::<Vec<_>>(),
        "companion_problems": s.companion_problems,
        "leftovers": s.leftovers,
        "workers": s.workers,
        "elapsed_s": s.elapsed,
    })
}

/// `{name: f(rows)}` for the types with rows in this phase.
fn by_name(types: &[TypeRows], rows: &[u64], f: impl Fn(u64) -> Value) -> Value {
    types
        .iter()
        .zip(rows)
        .filter(|(_, n)| **n > 0)
        .map(|(t, n)| (t.name.clone(), f(*n)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// 2^rank (0 for rank 0, an empty board); None beyond what a u64 holds.
pub(crate) fn tile_value(rank: usize) -> Option<u64> {
    match rank {
        0 => Some(0),
        r if r < 64 => Some(1 << r),
        _ => None,
    }
}

/// A count the session records under `prefix` + `key`, or else the sum of the inputs' own
/// (a shuffle records its input's session under `input.`, a merge each input's under
/// `input.N.`); None when neither records it.
fn inherited_count(session: &[(String, String)], prefix: &str, key: &str) -> Option<u64> {
    let get = |k: &str| session.iter().find(|(name, _)| name == k).map(|(_, v)| v);
    if let Some(v) = get(&format!("{prefix}{key}")) {
        return v.parse().ok();
    }
    let shuffled_from = format!("{prefix}input.");
    if get(&format!("{shuffled_from}command")).is_some() {
        return inherited_count(session, &shuffled_from, key);
    }
    let mut total = None;
    for i in 0.. {
        let input = format!("{prefix}input.{i}.");
        if get(&format!("{input}command")).is_none() {
            break;
        }
        if let Some(n) = inherited_count(session, &input, key) {
            total = Some(total.unwrap_or(0) + n);
        }
    }
    total
}

/// The `search` family summed per depth, or why it cannot be.
#[derive(Debug, Clone)]
pub struct SearchEffort {
    /// Its dtype and trailing shape, as `stats` prints companions.
    pub dtype: String,
    /// Whether it holds the search statistics of `pack --search-stats` (the values are then
    /// nodes searched per move).
    pub of_search_stats: bool,
    /// Per depth (`run_details.depth`; None when not recorded), ascending; empty when
    /// `problem` is set.
    pub depths: Vec<SearchDepth>,
    /// Set when the family is not one plain number per row.
    pub problem: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct SearchDepth {
    pub depth: Option<i64>,
    /// Rows with a value: for the search statistics, the rows whose search was used.
    pub rows: u64,
    pub sum: f64,
    pub max: f64,
    /// The values' distribution, for the median (see [`CountHistogram`]); only for
    /// non-negative integer values (the search statistics' `total_nodes`).
    pub counts: Option<CountHistogram>,
}

impl SearchDepth {
    /// The median of the values (nodes per move), when they are counts and there are any.
    pub fn median(&self) -> Option<f64> {
        self.counts.as_ref().and_then(CountHistogram::median)
    }

    fn add(&mut self, v: f64) {
        self.rows += 1;
        self.sum += v;
        self.max = if self.rows == 1 { v } else { self.max.max(v) };
    }

    fn merge(&mut self, p: SearchDepth) {
        if p.rows > 0 {
            self.max = if self.rows == 0 {
                p.max
            } else {
                self.max.max(p.max)
            };
        }
        self.rows += p.rows;
        self.sum += p.sum;
        match (&mut self.counts, p.counts) {
            (Some(a), Some(b)) => a.merge(&b),
            (a @ None, b) => *a = b,
            _ => {}
        }
    }
}

/// Non-negative integers in bounded memory, for their median: exact below 4,096, then in
/// buckets 1/2,048 of their value wide (a median there is its bucket's lowest value, within
/// 0.05% below the true one). Node counts span 10 to 10^8, so most buckets stay empty: they
/// are kept in an ordered map.
#[derive(Debug, Clone, Default)]
pub struct CountHistogram {
    buckets: BTreeMap<u64, u64>,
    n: u64,
}

impl CountHistogram {
    /// The lowest value of `v`'s bucket.
    fn bucket(v: u64) -> u64 {
        if v < 4096 {
            return v;
        }
        let shift = 63 - v.leading_zeros() - 11;
        (v >> shift) << shift
    }

    pub fn add(&mut self, v: u64) {
        *self.buckets.entry(Self::bucket(v)).or_default() += 1;
        self.n += 1;
    }

    fn merge(&mut self, other: &CountHistogram) {
        for (&b, &c) in &other.buckets {
            *self.buckets.entry(b).or_default() += c;
        }
        self.n += other.n;
    }

    /// The median: the middle value, or the mean of the two middle values; None when empty.
    pub fn median(&self) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        let nth = |rank: u64| {
            let mut before = 0;
            for (&b, &c) in &self.buckets {
                before += c;
                if before > rank {
                    return b as f64;
                }
            }
            unreachable!("rank below n")
        };
        let (lo, hi) = ((self.n - 1) / 2, self.n / 2);
        Some((nth(lo) + nth(hi)) / 2.0)
    }
}

/// Reads one value of a companion row as f64.
type ReadValue = fn(&[u8]) -> f64;

/// The size and reader of one little-endian number of a scalar NumPy dtype (`<u4`, `|u1`,
/// `<f8`, …).
fn scalar_reader(descr: &str) -> Option<(usize, ReadValue)> {
    let descr = descr.trim_matches(['\'', '"']);
    let f: ReadValue = match descr.trim_start_matches(['<', '|', '=']) {
        "u1" => |b| f64::from(b[0]),
        "i1" => |b| f64::from(b[0] as i8),
        "u2" => |b| f64::from(u16::from_le_bytes([b[0], b[1]])),
        "i2" => |b| f64::from(i16::from_le_bytes([b[0], b[1]])),
        "u4" => |b| f64::from(u32::from_le_bytes(b[..4].try_into().unwrap())),
        "i4" => |b| f64::from(i32::from_le_bytes(b[..4].try_into().unwrap())),
        "u8" => |b| u64::from_le_bytes(b[..8].try_into().unwrap()) as f64,
        "i8" => |b| i64::from_le_bytes(b[..8].try_into().unwrap()) as f64,
        "f4" => |b| f64::from(f32::from_le_bytes(b[..4].try_into().unwrap())),
        "f8" => |b| f64::from_le_bytes(b[..8].try_into().unwrap()),
        _ => return None,
    };
    let size = descr[descr.len() - 1..].parse().ok()?;
    Some((size, f))
}

/// How a row of the `search` family gives its value: the search statistics' `total_nodes`
/// (rows whose search was not used give none), or a scalar number.
#[derive(Clone, Copy)]
enum SearchValue {
    Stats,
    Scalar(ReadValue),
}

/// One pass over the `search` family beside the shards' run ids, summing its values per depth
/// over the selected `runs`.
fn search_effort(
    family: &families::Family,
    shards: &[Shard],
    runs: &[RunRow],
    details: &std::collections::HashMap<i64, RunDetails>,
    workers: usize,
) -> Result<SearchEffort> {
    let dtype = family.describe();
    let reader = if family.holds_search_stats() {
        Some((search::ROW_BYTES, SearchValue::Stats))
    } else {
        scalar_reader(&family.descr)
            .filter(|_| family.trailing.is_empty())
            .map(|(size, read)| (size, SearchValue::Scalar(read)))
    };
    let Some((size, value_of)) = reader else {
        return Ok(SearchEffort {
            dtype: dtype.clone(),
            of_search_stats: false,
            depths: Vec::new(),
            problem: Some(format!(
                "the search family holds {dtype}, neither the search statistics of pack --search-stats nor one number per row"
            )),
        });
    };
    let mut depths: Vec<Option<i64>> = runs
        .iter()
        .map(|r| details.get(&r.id).and_then(|d| d.depth))
        .collect();
    depths.sort_unstable();
    depths.dedup();
    // Slot of each selected run's depth, by run id (u32::MAX: not selected).
    let mut slot_of = vec![u32::MAX; runs.iter().map(|r| r.id as usize + 1).max().unwrap_or(0)];
    for r in runs {
        let d = details.get(&r.id).and_then(|d| d.depth);
        slot_of[r.id as usize] = depths.binary_search(&d).expect("listed") as u32;
    }
    let empty = || match value_of {
        SearchValue::Stats => SearchDepth {
            counts: Some(CountHistogram::default()),
            ..SearchDepth::default()
        },
        SearchValue::Scalar(_) => SearchDepth::default(),
    };
    let chunks = shards::chunks(shards, CHUNK_ROWS);
    let mut total = vec![empty(); depths.len()];
    // A remote pack streamed block by block keeps only the shards (and the family's files)
    // being read.
    let mut behind = shards::ReleaseBehind::new(|i| {
        shards[i].release();
        family.release(i);
    });
    ordered_try_map(
        &chunks,
        workers,
        workers * 2,
        Vec::new,
        |buf, &(si, start, count)| -> Result<Vec<SearchDepth>> {
            let rows = shards[si].map_rows(start, count, Access::Sequential)?;
            family.open(si)?.read_rows(start, count, buf)?;
            let mut part = vec![empty(); depths.len()];
            let row_ids = rows.chunks_exact(shards[si].row_bytes());
            for (row, value) in row_ids.zip(buf.chunks_exact(size)) {
                let id = u32::from_le_bytes(row[..4].try_into().unwrap()) as usize;
                let Some(&slot) = slot_of.get(id).filter(|&&s| s != u32::MAX) else {
                    continue;
                };
                let p = &mut part[slot as usize];
                match value_of {
                    SearchValue::Stats => {
                        let stats = search::SearchStats::from_bytes(value);
                        if stats.used {
                            p.add(stats.total_nodes() as f64);
                            if let Some(h) = &mut p.counts {
                                h.add(stats.total_nodes());
                            }
                        }
                    }
                    SearchValue::Scalar(read) => p.add(read(value)),
                }
            }
            Ok(part)
        },
        |i, part| {
            behind.reached(chunks[i].0);
            for (t, p) in total.iter_mut().zip(part?) {
                t.merge(p);
            }
            Ok(())
        },
    )?;
    for (t, d) in total.iter_mut().zip(&depths) {
        t.depth = *d;
    }
    Ok(SearchEffort {
        dtype,
        of_search_stats: matches!(value_of, SearchValue::Stats),
        depths: total,
        problem: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(values: &[f32]) -> EvHistogram {
        let mut h = EvHistogram::new();
        for &v in values {
            h.add(v);
        }
        h
    }

    /// A quartile that falls among exact zeros is 0, not a denormal inside the zero bucket's
    /// key range (tuple rows log `0.000000` as a legal move's value, so this is common).
    #[test]
    fn quartiles_among_repeated_values_are_those_values() {
        let mut values = vec![0.0f32; 400];
        values.extend((1..=600).map(|i| i as f32 / 1000.0));
        let s = histogram(&values).spread().unwrap();
        assert_eq!(s.p25, 0.0);
        assert_eq!(s.min, 0.0);
        let s = histogram(&[-0.5, 0.75, 0.75, 0.75, 0.75, 2.0])
            .spread()
            .unwrap();
        assert_eq!((s.p25, s.median, s.p75), (0.75, 0.75, 0.75));
        // Negative values and -0.0 too.
        let s = histogram(&[-3.0, -3.0, -3.0, -3.0, -0.0, -0.0, -0.0, 1.0])
            .spread()
            .unwrap();
        assert_eq!(s.p25, -3.0);
        assert_eq!(s.p75, 0.0);
    }

    /// EV bins span min..=max, count every value once, and put exact zeros in the bin of 0.
    #[test]
    fn ev_bins_count_every_value_in_its_bin() {
        let mut values = vec![0.0f32; 10];
        values.extend([-1.0, 1.0, 0.5, 0.5, 0.26]);
        let bins = histogram(&values).bins();
        assert_eq!(bins.len(), HISTOGRAM_BINS);
        assert_eq!((bins[0].from, bins[HISTOGRAM_BINS - 1].to), (-1.0, 1.0));
        let count = |v: f64| {
            let b = bins.iter().find(|b| b.from <= v && v < b.to).unwrap();
            b.evs
        };
        assert_eq!(
            (count(-1.0), count(0.0), count(0.5), count(0.26)),
            (1, 10, 2, 1)
        );
        assert_eq!(bins[HISTOGRAM_BINS - 1].evs, 1);
        assert_eq!(bins.iter().map(|b| b.evs).sum::<u64>(), 15);
        assert_eq!(histogram(&[2.0, 2.0]).bins().len(), 1);
    }

    /// Merging histograms keeps each bucket's extremes: the same quantiles as one histogram.
    #[test]
    fn merged_histograms_read_as_one() {
        let values: Vec<f32> = (0..2000)
            .map(|i| ((i * 37) % 1001) as f32 / 7.0 - 50.0)
            .collect();
        let whole = histogram(&values).spread().unwrap();
        let mut merged = histogram(&values[..700]);
        merged.merge(&histogram(&values[700..]));
        let merged = merged.spread().unwrap();
        assert_eq!(whole.values(), merged.values());
    }
}
