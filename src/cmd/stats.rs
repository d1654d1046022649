//! `stats`: what is in a pack, or in the runs an SQL expression picks, at a glance. The story:
//! read the run table, session and findings from metadata.db (with `--where`, only the runs it
//! selects); make one parallel pass over the rows (memory-mapped chunks, checked against their
//! recorded checksums) counting rows per (max_rank, valuation type) and per move, and the EVs
//! of legal moves per valuation type; turn these into figures (steps and scores per run, runs by
//! depth, tiles reached, valuation types overall and by phase of game, EV distributions, moves)
//! and print them as aligned tables with small histograms, or as one JSON document.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::cli::WhereArgs;
use crate::companions;
use crate::format::board::MOVE_NAMES;
use crate::format::metadata::{self, RunDetails, RunRow};
use crate::format::row::{ROW_BYTES, offset};
use crate::format::valuation::ValuationTable;
use crate::ordered::ordered_try_map;
use crate::pack_reader::{self, RunSlots, Shard};
use crate::progress::thousands;

/// Rows per memory-mapped chunk (6 MiB), as in validate.
const CHUNK_ROWS: u64 = 128 * 1024;
/// Width of the histogram bars, in terminal cells.
const BAR_WIDTH: usize = 36;
/// Valuation types given their own column in the phase table; the rest are summed as "other".
const PHASE_COLUMNS: usize = 5;
/// The tiles the highest-tile table always lists (more when runs end lower or higher).
const LANDMARK_TILES: (i64, i64) = (2048, 65536);

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer stats packs/d6
  dataset-packer stats packs/d6 --json | jq '.highest_tile'
  dataset-packer stats packs/d6 --workers 2
  dataset-packer stats packs/d6 --where \"depth = 7 AND max_score > 600000\"

  dataset-packer stats packs/d6 --where \"SELECT id FROM runs WHERE max_score > ?\" --param 600000

--where takes the same SQL as export --where: an expression over the columns of runs and
run_details, or a query that returns run ids (with --param values for its parameters); the
figures then describe only those runs and their rows.")]
pub struct StatsArgs {
    /// The pack folder to describe.
    #[arg(value_name = "PACK_DIR")]
    pub pack: PathBuf,
    #[command(flatten)]
    pub where_args: WhereArgs,
    /// Print the figures as one JSON document.
    #[arg(long)]
    pub json: bool,
    /// Threads for the row pass [default: all cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: Option<u64>,
}

pub fn run(args: &StatsArgs) -> Result<()> {
    let workers = args
        .workers
        .map_or_else(crate::default_workers, |w| w as usize);
    let stats = gather(&args.pack, workers, &args.where_args)?;
    if args.json {
        println!("{}", to_json(&stats));
    } else {
        print_human(&stats);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The row pass

/// What the pass over the rows counts: rows per (max_rank, valuation type) and per move, and
/// the EVs of legal moves per valuation type. The columns it reads sit at the same offsets in
/// the legacy packed 46-byte layout up to byte 26; the EVs start 2 bytes earlier there.
struct RowCounts {
    /// Rows per (max_rank, valuation_type), indexed `max_rank * 256 + valuation_type`.
    by_rank_type: Vec<u64>,
    /// Rows per move_dir: up, down, left, right, then any value above 3.
    moves: [u64; 5],
    /// EVs of legal moves, per valuation type id.
    evs: Vec<Option<EvHistogram>>,
}

impl RowCounts {
    fn new() -> RowCounts {
        RowCounts {
            by_rank_type: vec![0; 256 * 256],
            moves: [0; 5],
            evs: (0..256).map(|_| None).collect(),
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
        for (a, b) in self.evs.iter_mut().zip(&other.evs) {
            if let Some(b) = b {
                a.get_or_insert_with(EvHistogram::new).merge(b);
            }
        }
    }

    /// Rows of one (max_rank, valuation_type) cell.
    fn at(&self, rank: usize, kind: usize) -> u64 {
        self.by_rank_type[rank << 8 | kind]
    }
}

/// A distribution of float32 values in bounded memory: exact count, sum, min and max, and a
/// histogram over the top 16 bits of each value's order-preserving key (sign, exponent and
/// 7 bits of mantissa), from which quartiles are read to within 1% of their value. Each bucket
/// also keeps the lowest and highest key it saw, so a quantile is interpolated between values
/// that occur: a bucket of exact zeros reads as 0, not as a point inside the denormals its key
/// range also spans.
struct EvHistogram {
    counts: Vec<u64>,
    /// Per bucket, the highest low 16 bits of a key seen, and the complement of the lowest
    /// (complemented so that zeroed memory means "none seen" for both).
    high_low: Vec<u16>,
    low_low_inv: Vec<u16>,
    n: u64,
    sum: f64,
    min: f32,
    max: f32,
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

    fn spread(&self) -> Option<Spread> {
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

fn count_chunk(
    shard: &Shard,
    start: u64,
    count: u64,
    only: Option<&RunSlots>,
) -> Result<RowCounts> {
    let map = shard.map_rows(start, count)?;
    let mut counts = RowCounts::new();
    counts.count(&map, shard.row_bytes(), only);
    Ok(counts)
}

/// One pass over every row of `shards` (or, with `only`, the rows of those runs), `workers`
/// chunks at a time.
fn count_rows(shards: &[Shard], workers: usize, only: Option<&RunSlots>) -> Result<RowCounts> {
    let chunks = pack_reader::chunks(shards, CHUNK_ROWS);
    let mut total = RowCounts::new();
    ordered_try_map(
        &chunks,
        workers,
        workers * 2,
        || (),
        |_, &(si, start, count)| count_chunk(&shards[si], start, count, only),
        |_, counts| {
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
struct Spread {
    min: f64,
    p25: f64,
    median: f64,
    mean: f64,
    p75: f64,
    max: f64,
}

impl Spread {
    const NAMES: [&'static str; 6] = ["min", "p25", "median", "mean", "p75", "max"];

    /// None for an empty list. Quantiles interpolate linearly between ranks (NumPy's default),
    /// so the median of an even count is the mean of the two middle values.
    fn of(mut values: Vec<i64>) -> Option<Spread> {
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

    fn values(&self) -> [f64; 6] {
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

fn quantile(sorted: &[i64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] as f64 + (sorted[hi] - sorted[lo]) as f64 * (pos - lo as f64)
}

/// Runs whose max_score lies in `from..=to` (a power-of-two bin).
#[derive(Debug, Clone, Copy)]
struct ScoreBin {
    from: i64,
    to: i64,
    runs: u64,
}

/// Power-of-two bins from the lowest to the highest non-empty one: [2^k, 2^(k+1) - 1]
/// (the first bin, k = 0, also holds 0).
fn score_bins(runs: &[RunRow]) -> Vec<ScoreBin> {
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

/// How many runs reached a tile (highest_tile ≥ tile) and how many ended with it as their
/// highest tile exactly.
#[derive(Debug, Clone, Copy)]
struct TileRow {
    tile: i64,
    reached: u64,
    highest: u64,
}

/// Every power of two from 2048 (or the lowest highest tile, when lower) to 65536 (or the
/// largest, when higher).
fn tile_rows(runs: &[RunRow]) -> Vec<TileRow> {
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
struct DepthRow {
    depth: Option<i64>,
    runs: u64,
    rows: i64,
    median_score: f64,
    max_score: i64,
    max_tile: i64,
}

fn depth_rows(
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
        })
        .collect()
}

/// One valuation type and its rows.
#[derive(Debug, Clone)]
struct TypeRows {
    id: usize,
    name: String,
    rows: u64,
}

/// Every name of the table plus any id the rows use that it does not define, with row counts.
fn type_rows(counts: &RowCounts, table: &ValuationTable) -> Vec<TypeRows> {
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
struct Phase {
    max_rank: usize,
    rows: u64,
    by_type: Vec<u64>,
}

fn phases(counts: &RowCounts, types: &[TypeRows]) -> Vec<Phase> {
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

/// Everything stats reports.
struct Stats {
    pack: PathBuf,
    /// The `--where` SQL the figures are restricted to, and its `--param` values.
    selection: Option<String>,
    params: Vec<String>,
    runs: usize,
    rows: u64,
    /// Σ runs.steps: equals `rows` in a consistent pack.
    rows_in_runs: i64,
    shard_names: Vec<String>,
    shard_bytes: u64,
    metadata_bytes: u64,
    shuffled: bool,
    steps: Option<Spread>,
    score: Option<Spread>,
    score_bins: Vec<ScoreBin>,
    tiles: Vec<TileRow>,
    depths: Vec<DepthRow>,
    /// EVs of legal moves per valuation type: name, count, spread.
    evs: Vec<(String, u64, Spread)>,
    types: Vec<TypeRows>,
    phases: Vec<Phase>,
    moves: [u64; 5],
    /// None when the pack records no findings table.
    findings: Option<Vec<(String, i64)>>,
    /// Companion arrays: name, dtype and trailing shape, bytes; and families that do not line up.
    companions: Vec<(String, String, u64)>,
    companion_problems: Vec<String>,
    /// Staging or work folders interrupted runs left in the pack folder.
    leftovers: Vec<String>,
    workers: usize,
    elapsed: f64,
}

fn gather(dir: &Path, workers: usize, where_args: &WhereArgs) -> Result<Stats> {
    let started = Instant::now();
    let conn = pack_reader::open_metadata(dir)?;
    let shards = pack_reader::open_shards(dir, true)?;
    let all: Vec<usize> = (0..shards.len()).collect();
    pack_reader::verify_shards(dir, &conn, &shards, &all, workers)?;
    let scan = companions::scan(dir, &shards)?;
    let table = pack_reader::read_valuations(dir)?;
    let mut runs = metadata::read_runs(&conn)?;
    let details = metadata::read_run_details(&conn)?;
    let shuffled = metadata::session_value(&conn, "shuffled")?.as_deref() == Some("true");
    let findings = if metadata::has_table(&conn, "finding_counts")? {
        Some(metadata::read_finding_counts(&conn)?)
    } else {
        None
    };
    let only = match where_args.run_ids(&conn)? {
        None => None,
        Some(ids) => {
            if ids.is_empty() {
                bail!(
                    "{} selects no runs of {}",
                    where_args.describe().unwrap_or_default(),
                    dir.display()
                );
            }
            runs.retain(|r| ids.binary_search(&r.id).is_ok());
            let ids: Vec<u32> = runs.iter().map(|r| r.id as u32).collect();
            Some(RunSlots::new(&ids))
        }
    };
    let counts = count_rows(&shards, workers, only.as_ref())?;
    let types = type_rows(&counts, &table);
    let rows = if only.is_some() {
        counts.moves.iter().sum()
    } else {
        shards.iter().map(|s| s.header.rows).sum()
    };
    Ok(Stats {
        pack: dir.to_path_buf(),
        selection: where_args.sql.clone(),
        params: where_args.params.iter().map(|p| p.to_string()).collect(),
        runs: runs.len(),
        rows,
        rows_in_runs: runs.iter().map(|r| r.steps).sum(),
        shard_names: shards.iter().map(|s| s.name.clone()).collect(),
        shard_bytes: shards.iter().map(|s| s.file_len).sum(),
        metadata_bytes: std::fs::metadata(dir.join(metadata::FILE_NAME))?.len(),
        shuffled,
        steps: Spread::of(runs.iter().map(|r| r.steps).collect()),
        score: Spread::of(runs.iter().map(|r| r.max_score).collect()),
        score_bins: score_bins(&runs),
        tiles: tile_rows(&runs),
        depths: depth_rows(&runs, &details),
        evs: types
            .iter()
            .filter_map(|t| {
                let spread = counts.evs[t.id].as_ref()?.spread()?;
                Some((t.name.clone(), counts.evs[t.id].as_ref()?.n, spread))
            })
            .collect(),
        phases: phases(&counts, &types),
        types,
        moves: counts.moves,
        findings,
        companions: scan
            .families
            .iter()
            .map(|f| (f.name.clone(), f.describe(), f.bytes()))
            .collect(),
        companion_problems: scan.problems.into_iter().map(|(_, p)| p).collect(),
        leftovers: crate::pack_dir::leftovers(dir),
        workers,
        elapsed: started.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------------------------------------
// JSON

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

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn to_json(s: &Stats) -> Value {
    let mut score = spread_json(&s.score);
    if let Value::Object(m) = &mut score {
        let bins = s.score_bins.iter();
        let bins = bins.map(|b| json!({"from": b.from, "to": b.to, "runs": b.runs}));
        m.insert("histogram".into(), bins.collect::<Vec<_>>().into());
    }
    let runs = s.runs as u64;
    json!({
        "pack": s.pack.display().to_string(),
        "runs": s.runs,
        "rows": s.rows,
        "rows_in_runs": s.rows_in_runs,
        "shards": s.shard_names.len(),
        "bytes": s.shard_bytes,
        "metadata_bytes": s.metadata_bytes,
        "shuffled": s.shuffled,
        "steps_per_run": spread_json(&s.steps),
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
        "findings_scope": if s.selection.is_some() { "whole pack" } else { "pack" },
        "where": s.selection,
        "params": s.params,
        "depths": s.depths.iter().map(|d| json!({
            "depth": d.depth, "runs": d.runs, "rows": d.rows, "median_max_score": d.median_score,
            "max_score": d.max_score, "highest_tile": d.max_tile,
        })).collect::<Vec<_>>(),
        "ev_legal_moves": s.evs.iter().map(|(name, n, spread)| {
            let mut v = spread_json(&Some(*spread));
            if let Value::Object(m) = &mut v {
                m.insert("evs".into(), json!(n));
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
fn tile_value(rank: usize) -> Option<u64> {
    match rank {
        0 => Some(0),
        r if r < 64 => Some(1 << r),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Human output

/// A bar of `BAR_WIDTH` cells at most for `value / max`, with eighth-cell precision; a non-zero
/// value always shows at least a sliver.
fn bar(value: u64, max: u64) -> String {
    const PARTIAL: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    if max == 0 || value == 0 {
        return String::new();
    }
    let eighths = ((value as u128 * BAR_WIDTH as u128 * 8) / max as u128).max(1) as usize;
    let mut s = "█".repeat(eighths / 8);
    if !eighths.is_multiple_of(8) {
        s.push(PARTIAL[eighths % 8]);
    }
    s
}

/// `12345.0` → `12,345`; `224.5` → `224.5`.
fn number(v: f64) -> String {
    let sign = if v < 0.0 { "-" } else { "" };
    let a = v.abs();
    if a.fract() == 0.0 {
        format!("{sign}{}", thousands(a as u64))
    } else {
        let tenths = (a * 10.0).round() as u64;
        format!("{sign}{}.{}", thousands(tenths / 10), tenths % 10)
    }
}

/// Prints one line of a table without the trailing spaces an empty bar leaves.
fn line(text: String) {
    println!("{}", text.trim_end());
}

fn percent(part: u64, whole: u64) -> String {
    format!("{:.1}%", 100.0 * share(part, whole))
}

fn print_human(s: &Stats) {
    print_overview(s);
    print_per_run(s);
    print_score_bins(s);
    print_depths(s);
    print_tiles(s);
    print_types(s);
    print_phases(s);
    print_evs(s);
    print_moves(s);
    print_findings(s);
    let gbps = s.shard_bytes as f64 / 1e9 / s.elapsed.max(1e-9);
    println!(
        "\n{} rows read in {:.2} s ({gbps:.2} GB/s, {} worker{})",
        thousands(s.rows),
        s.elapsed,
        s.workers,
        if s.workers == 1 { "" } else { "s" }
    );
}

fn print_overview(s: &Stats) {
    let shards = match s.shard_names.as_slice() {
        [one] => format!("1 ({one})"),
        [first, .., last] => format!("{} ({first} … {last})", s.shard_names.len()),
        [] => "0".into(),
    };
    println!("pack      {}", s.pack.display());
    if let Some(expr) = &s.selection {
        println!("where     {expr} (the figures below describe only these runs and their rows)");
        if !s.params.is_empty() {
            println!("params    {}", s.params.join(", "));
        }
    }
    println!("runs      {}", thousands(s.runs as u64));
    println!(
        "rows      {}{}",
        thousands(s.rows),
        if s.shuffled { " (shuffled)" } else { "" }
    );
    println!("shards    {shards}");
    for (name, dtype, bytes) in &s.companions {
        println!(
            "companion {name}: {dtype}, {} bytes ({:.1} MB)",
            thousands(*bytes),
            *bytes as f64 / 1e6
        );
    }
    for problem in &s.companion_problems {
        println!("companion not lined up with the shards: {problem}");
    }
    for leftover in &s.leftovers {
        println!("leftover  {leftover}");
    }
    println!(
        "bytes     {} in shards ({:.1} MB), {} in metadata.db",
        thousands(s.shard_bytes),
        s.shard_bytes as f64 / 1e6,
        thousands(s.metadata_bytes)
    );
    if s.rows_in_runs != s.rows as i64 {
        println!(
            "note      runs.steps add up to {} but the shards hold {} rows: run `dataset-packer validate`",
            number(s.rows_in_runs as f64),
            thousands(s.rows)
        );
    }
}

fn print_per_run(s: &Stats) {
    println!("\nPer run (from runs)");
    let head: String = Spread::NAMES.iter().map(|n| format!("{n:>11}")).collect();
    println!("  {:<10}{head}", "");
    for (label, spread) in [("steps", &s.steps), ("max_score", &s.score)] {
        let cells: String = match spread {
            Some(sp) => sp
                .values()
                .iter()
                .map(|v| format!("{:>11}", number(*v)))
                .collect(),
            None => format!("{:>11}", "no runs"),
        };
        println!("  {label:<10}{cells}");
    }
}

fn print_depths(s: &Stats) {
    println!("\nRuns by depth (run_details.depth)");
    println!(
        "  {:>6}  {:>9}  {:>13}  {:>13}  {:>11}  {:>8}",
        "depth", "runs", "rows", "median score", "max score", "max tile"
    );
    for d in &s.depths {
        println!(
            "  {:>6}  {:>9}  {:>13}  {:>13}  {:>11}  {:>8}",
            d.depth.map_or("?".to_string(), |v| v.to_string()),
            thousands(d.runs),
            number(d.rows as f64),
            number(d.median_score),
            number(d.max_score as f64),
            d.max_tile
        );
    }
}

fn print_evs(s: &Stats) {
    println!("\nEVs of legal moves by valuation type (illegal moves' stored 0.0 left out)");
    let width = s
        .evs
        .iter()
        .map(|(n, _, _)| n.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let head: String = Spread::NAMES.iter().map(|n| format!("{n:>10}")).collect();
    println!("  {:<width$}  {:>9}{head}", "type", "EVs");
    for (name, n, spread) in &s.evs {
        let cells: String = spread
            .values()
            .iter()
            .map(|v| format!("{:>10}", format_ev(*v)))
            .collect();
        println!("  {name:<width$}  {:>9}{cells}", thousands(*n));
    }
}

/// An EV in a table cell: four significant digits (0 has none to show).
fn format_ev(v: f64) -> String {
    if v == 0.0 {
        "0".to_string()
    } else if (1e-3..1e6).contains(&v.abs()) {
        let digits = (3 - v.abs().max(1e-9).log10().floor() as i32).clamp(0, 6) as usize;
        format!("{v:.digits$}")
    } else {
        format!("{v:.3e}")
    }
}

fn print_score_bins(s: &Stats) {
    if s.score_bins.is_empty() {
        return;
    }
    println!("\nScore distribution (runs by max_score)");
    println!("  {:>11}   {:>11}  {:>7}", "from", "to", "runs");
    let max = s.score_bins.iter().map(|b| b.runs).max().unwrap_or(0);
    for b in &s.score_bins {
        line(format!(
            "  {:>11} – {:>11}  {:>7}  {}",
            thousands(b.from as u64),
            thousands(b.to as u64),
            thousands(b.runs),
            bar(b.runs, max)
        ));
    }
}

fn print_tiles(s: &Stats) {
    println!("\nHighest tile (runs that reached each tile: highest_tile ≥ tile)");
    println!(
        "  {:>6}  {:>8}  {:>6}  {:>8}",
        "tile", "reached", "%", "ended at"
    );
    let runs = s.runs as u64;
    for t in &s.tiles {
        line(format!(
            "  {:>6}  {:>8}  {:>6}  {:>8}  {}",
            t.tile,
            thousands(t.reached),
            percent(t.reached, runs),
            thousands(t.highest),
            bar(t.reached, runs)
        ));
    }
}

fn print_types(s: &Stats) {
    println!("\nValuation types (rows)");
    let width = s
        .types
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let max = s.types.iter().map(|t| t.rows).max().unwrap_or(0);
    println!("  {:<width$}  {:>13}  {:>6}", "type", "rows", "%");
    for t in &s.types {
        line(format!(
            "  {:<width$}  {:>13}  {:>6}  {}",
            t.name,
            thousands(t.rows),
            percent(t.rows, s.rows),
            bar(t.rows, max)
        ));
    }
}

/// The phase table: one line per max_rank, the share of each valuation type in its rows. The
/// types with most rows get a column each, the rest one "other" column.
fn print_phases(s: &Stats) {
    if s.phases.is_empty() {
        return;
    }
    let mut order: Vec<usize> = (0..s.types.len())
        .filter(|&i| s.types[i].rows > 0)
        .collect();
    order.sort_by_key(|&i| std::cmp::Reverse(s.types[i].rows));
    let (shown, rest) = order.split_at(order.len().min(PHASE_COLUMNS));
    let mut shown = shown.to_vec();
    shown.sort_unstable();
    let mut names: Vec<String> = shown.iter().map(|&i| s.types[i].name.clone()).collect();
    if !rest.is_empty() {
        names.push("other".into());
    }
    let widths: Vec<usize> = names.iter().map(|n| n.chars().count().max(6)).collect();
    println!("\nValuation types by phase of game (share of the rows at each max tile)");
    let head: String = names
        .iter()
        .zip(&widths)
        .map(|(n, w)| format!("  {n:>w$}"))
        .collect();
    println!("  {:>8}  {:>11}{head}", "max tile", "rows");
    for p in &s.phases {
        let mut cells: Vec<u64> = shown.iter().map(|&i| p.by_type[i]).collect();
        if !rest.is_empty() {
            cells.push(rest.iter().map(|&i| p.by_type[i]).sum());
        }
        let cells: String = cells
            .iter()
            .zip(&widths)
            .map(|(&n, w)| format!("  {:>w$}", percent(n, p.rows)))
            .collect();
        let tile = match tile_value(p.max_rank) {
            Some(0) => "empty".to_string(),
            Some(t) => t.to_string(),
            None => format!("2^{}", p.max_rank),
        };
        println!("  {tile:>8}  {:>11}{cells}", thousands(p.rows));
    }
}

fn print_moves(s: &Stats) {
    println!("\nMoves played (rows by move_dir)");
    let max = s.moves.iter().copied().max().unwrap_or(0);
    println!("  {:<7}  {:>13}  {:>6}", "move", "rows", "%");
    for (name, &n) in MOVE_NAMES.iter().chain(&["invalid"]).zip(&s.moves) {
        if *name == "invalid" && n == 0 {
            continue;
        }
        line(format!(
            "  {name:<7}  {:>13}  {:>6}  {}",
            thousands(n),
            percent(n, s.rows),
            bar(n, max)
        ));
    }
}

fn print_findings(s: &Stats) {
    println!(
        "\nFindings recorded at pack time (finding_counts){}",
        if s.selection.is_some() {
            ", for the whole pack"
        } else {
            ""
        }
    );
    match &s.findings {
        None => println!("  not recorded (the pack has no finding_counts table)"),
        Some(f) if f.iter().all(|(_, n)| *n == 0) => println!("  none"),
        Some(f) => {
            let width = f.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
            for (kind, n) in f {
                println!("  {kind:<width$}  {:>13}", number(*n as f64));
            }
        }
    }
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
