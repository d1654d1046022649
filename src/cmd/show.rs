//! `show`: one game, move by move. The story: look the run up in metadata.db (its `runs` and
//! `run_details` rows, and from `run_index` the shard and row where its rows start: an O(1)
//! seek, no scan); find the first row of the page (`--from`, by binary search on step_index
//! within the run); map only the rows of that page, following the run into the next shards when
//! it straddles a boundary; print the run's facts, then each step's board with real tile values,
//! the move played, the valuation type and the four EVs with illegal moves marked (or the same
//! as JSON), and how to see the next page.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::format::board::{self, MOVE_NAMES};
use crate::format::metadata::{self, RowLocation, RunLookup};
use crate::format::row::{ROW_BYTES, StepRow};
use crate::format::search::{self, FieldValue, SearchStats};
use crate::format::valuation::ValuationTable;
use crate::pack::families;
use crate::pack::run_index;
use crate::pack::shards::{self, Shard};
use crate::progress::thousands;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer show packs/d6 --run 3
  dataset-packer show packs/d6 --run 3 --from 200 --limit 50
  dataset-packer show packs/d6 --run 3 --limit 1000 --json > run3.json
  dataset-packer show packs/d6 --run 3 --last 5             # how the game ended

The pack must be unshuffled (show seeks through metadata.db's run_index).")]
pub struct ShowArgs {
    /// The pack folder.
    #[arg(value_name = "PACK_DIR")]
    pub pack: PathBuf,
    /// The run to show (runs.id).
    #[arg(long, value_name = "ID")]
    pub run: u64,
    /// Start at the first row whose step_index is at least STEP.
    #[arg(long, value_name = "STEP", default_value_t = 0)]
    pub from: u64,
    /// Steps to show.
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: u64,
    /// Show the last N steps of the run (the end of the game), without knowing its length.
    #[arg(long, value_name = "N", conflicts_with_all = ["from", "limit"],
          value_parser = clap::value_parser!(u64).range(1..))]
    pub last: Option<u64>,
    /// Print the run and its steps as one JSON document.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &ShowArgs) -> Result<()> {
    let conn = shards::open_metadata(&args.pack)?;
    let run = find_run(&conn, &args.pack, args.run)?;
    let shards = shards::open_shards(&args.pack, true)?;
    let names = shards::read_valuations(&args.pack)?;
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
    shards::verify_shards(&args.pack, &conn, &shards, &touched, 1)?;
    let (start, limit) = match args.last {
        Some(n) => (rows.len.saturating_sub(n), n),
        None => (rows.first_at_or_after(args.from)?, args.limit),
    };
    // One row past the page tells the step the next page starts at.
    let mut page = rows.read(start, limit + 1)?;
    let next = (page.len() as u64 > limit).then(|| page.pop().expect("a row past the page"));
    let search = match search_family(&args.pack, &shards)? {
        Some(family) => Some(rows.read_search(&family, start, page.len() as u64)?),
        None => None,
    };
    let last_step = match (page.is_empty(), rows.len) {
        (true, n) if n > 0 => Some(rows.read(n - 1, 1)?[0].step_index),
        _ => None,
    };
    let page = Page {
        run: &run,
        rows: &rows,
        start,
        steps: page,
        search,
        next_from: next.map(|r| r.step_index),
        last_step,
    };
    if args.json {
        println!("{}", page_json(&page, &names));
    } else {
        print_page(&page, &names, args);
    }
    Ok(())
}

/// The run, checked to be showable: it exists and the pack has an index of where it starts.
fn find_run(conn: &rusqlite::Connection, dir: &Path, id: u64) -> Result<RunLookup> {
    if metadata::session_value(conn, "shuffled")?.as_deref() == Some("true") {
        bail!(
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
        let (count, min, max) = metadata::run_id_range(conn)?;
        let ids = match (min, max) {
            (Some(a), Some(b)) => format!("ids {a}–{b}"),
            _ => "no ids".into(),
        };
        bail!(
            "run {id} is not in {} (its runs table has {} runs, {ids})",
            dir.display(),
            thousands(count as u64)
        );
    };
    // A pack without the table (the reference packer's) has its index rebuilt by the caller.
    if run.first_row.is_none() && metadata::has_table(conn, "run_index")? {
        bail!(
            "show needs an unshuffled pack with a run index: {}/metadata.db has no run_index entry \
             for run {id}",
            dir.display()
        );
    }
    Ok(run)
}

// ---------------------------------------------------------------------------------------------
// Reading a run's rows

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
                bail!(
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
            bail!(
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

// ---------------------------------------------------------------------------------------------
// Output

/// One page of a run.
struct Page<'a> {
    run: &'a RunLookup,
    rows: &'a RunRows<'a>,
    /// Position in the run of the page's first row.
    start: u64,
    steps: Vec<StepRow>,
    /// The steps' search statistics, when the pack keeps them (`pack --search-stats`).
    search: Option<Vec<SearchStats>>,
    /// The step_index the next page starts at, if there are more rows.
    next_from: Option<u32>,
    /// The run's last step_index (None for a run without rows); read only for an empty page.
    last_step: Option<u32>,
}

/// The pack's `search` family when it holds the search statistics of `pack --search-stats`
/// (a family of that name from another tool is not shown).
fn search_family(dir: &Path, shards: &[Shard]) -> Result<Option<families::Family>> {
    let scan = families::scan(dir, shards)?;
    Ok(scan
        .family(search::FAMILY)
        .filter(|f| f.holds_search_stats())
        .cloned())
}

/// The 4×4 board as tile values (0 = empty), row-major.
fn tiles(r: &StepRow) -> [[u64; 4]; 4] {
    let cells = board::unpack(r.board, r.tile_65536_mask);
    std::array::from_fn(|y| {
        std::array::from_fn(|x| match cells[4 * y + x] {
            0 => 0,
            e => 1u64 << e,
        })
    })
}

fn legal(r: &StepRow, k: usize) -> bool {
    r.ev_legal & (1 << k) != 0
}

fn valuation_name(names: &ValuationTable, id: u8) -> String {
    names
        .name(id)
        .map_or_else(|| format!("#{id} (undefined)"), str::to_string)
}

fn move_name(dir: u8) -> String {
    MOVE_NAMES
        .get(dir as usize)
        .map_or_else(|| format!("#{dir} (invalid)"), |n| n.to_string())
}

fn page_json(p: &Page, names: &ValuationTable) -> Value {
    let r = &p.run.run;
    let d = p.run.details.clone().unwrap_or_default();
    let at = p.run.first_row.expect("checked");
    let steps: Vec<Value> = p
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut step = json!({
                "step_index": s.step_index,
                "board": tiles(s),
                "board_eval": s.board_eval,
                "max_rank": s.max_rank,
                "move": move_name(s.move_dir),
                "valuation_type": valuation_name(names, s.valuation_type),
                "branch_evs": MOVE_NAMES.iter().zip(s.branch_evs)
                    .map(|(m, ev)| (m.to_string(), f32_json(ev))).collect::<serde_json::Map<_, _>>(),
                "legal": MOVE_NAMES.iter().enumerate()
                    .map(|(k, m)| (m.to_string(), json!(legal(s, k)))).collect::<serde_json::Map<_, _>>(),
                "seed": s.seed,
            });
            if let Some(stats) = &p.search {
                step["search"] = search_json(&stats[i]);
            }
            step
        })
        .collect();
    json!({
        "run": {
            "id": r.id, "seed": r.seed, "steps": r.steps, "max_score": r.max_score,
            "highest_tile": r.highest_tile,
            "source_path": d.source_path, "rows_path": d.rows_path, "depth": d.depth,
            "game_index": d.game_index, "num_moves": d.num_moves, "max_rank": d.max_rank,
            "sum_tile": d.sum_tile, "seconds": d.seconds, "source_pack": d.source_pack,
            "source_run_id": d.source_run_id,
            "first_row": {
                "shard": at.shard,
                "file": p.rows.segments.first().map(|&(si, _, _)| p.rows.shards[si].name.clone()),
                "row_offset": at.row_offset, "global_row": at.global_row,
            },
        },
        "first_row_shown": p.start,
        "steps": steps,
        "next_from": p.next_from,
    })
}

/// A step's search statistics under their log names (`null` counts when not used, as logged).
fn search_json(s: &SearchStats) -> Value {
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
/// would widen it to f64 first and print `-13502.326171875` for `-13502.326`).
fn f32_json(v: f32) -> Value {
    format!("{v}")
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

fn print_page(p: &Page, names: &ValuationTable, args: &ShowArgs) {
    print_facts(p);
    for (i, s) in p.steps.iter().enumerate() {
        println!();
        print_step(s, names, p.search.as_ref().map(|v| &v[i]));
    }
    println!();
    print_footer(p, args);
}

fn print_facts(p: &Page) {
    let r = &p.run.run;
    println!("run {}", r.id);
    println!(
        "  seed {}  steps {}  max_score {}  highest tile {}",
        r.seed,
        thousands(r.steps as u64),
        thousands(r.max_score as u64),
        r.highest_tile
    );
    if let Some(d) = &p.run.details {
        let mut facts = Vec::new();
        let mut fact = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                facts.push(format!("{k} {v}"));
            }
        };
        fact("depth", d.depth.map(|v| v.to_string()));
        fact("game", d.game_index.map(|v| v.to_string()));
        fact("num_moves", d.num_moves.map(|v| thousands(v as u64)));
        fact("max_rank", d.max_rank.map(|v| v.to_string()));
        fact("sum_tile", d.sum_tile.map(|v| thousands(v as u64)));
        fact("seconds", d.seconds.map(|v| format!("{v:.1}")));
        if !facts.is_empty() {
            println!("  {}", facts.join("  "));
        }
        for (k, v) in [("source", &d.source_path), ("rows file", &d.rows_path)] {
            if let Some(v) = v {
                println!("  {k:<10} {v}");
            }
        }
        if let Some(pack) = &d.source_pack {
            let id = d
                .source_run_id
                .map_or(String::new(), |i| format!(" run {i}"));
            println!("  {:<10} {pack}{id}", "from pack");
        }
    }
    println!("  {:<10} {}", "rows at", p.rows.describe_start());
}

/// A step: a title line, then the board's four rows with one move's EV beside each.
///
/// ```text
/// step 12   played left   tuple11   board_eval 4,328,406
///   65536  2048  1024   512       up       0.0421
///       .     .     4     2       down     illegal
///       .     .     .     .     > left     0.9512
///       .     .     .     .       right    0.1873
/// ```
fn print_step(s: &StepRow, names: &ValuationTable, search: Option<&SearchStats>) {
    let nodes = match search {
        None => String::new(),
        Some(st) if st.used => format!("   nodes {}", thousands(st.total_nodes())),
        Some(_) => "   nodes -".into(),
    };
    println!(
        "step {}   played {}   {}   board_eval {}{nodes}",
        s.step_index,
        move_name(s.move_dir),
        valuation_name(names, s.valuation_type),
        signed(s.board_eval)
    );
    for (k, row) in tiles(s).iter().enumerate() {
        let cells: String = row.iter().map(|&t| format!("{:>6}", tile(t))).collect();
        let marker = if usize::from(s.move_dir) == k {
            ">"
        } else {
            " "
        };
        println!(
            "{cells}     {marker} {:<6} {}",
            MOVE_NAMES[k],
            ev_text(s, k)
        );
    }
}

fn tile(t: u64) -> String {
    if t == 0 { ".".into() } else { t.to_string() }
}

fn signed(v: i32) -> String {
    let sign = if v < 0 { "-" } else { "" };
    format!("{sign}{}", thousands(v.unsigned_abs().into()))
}

/// The EV of move k as logged (shortest f32 form), or `illegal`; an illegal move that still
/// carries a non-zero EV shows both (a data-quality finding).
fn ev_text(s: &StepRow, k: usize) -> String {
    let ev = s.branch_evs[k];
    match (legal(s, k), ev == 0.0) {
        (true, _) => format!("{ev:>12}"),
        (false, true) => format!("{:>12}", "illegal"),
        (false, false) => format!("{ev:>12}  (illegal)"),
    }
}

fn print_footer(p: &Page, args: &ShowArgs) {
    let r = &p.run.run;
    let (Some(first), Some(last)) = (p.steps.first(), p.steps.last()) else {
        match p.last_step {
            None => println!("run {} has no rows", r.id),
            Some(last) => println!(
                "no step of run {} has step_index ≥ {} (its last step is {last})",
                r.id, args.from
            ),
        }
        return;
    };
    let shown = format!(
        "steps {}–{} shown (rows {}–{} of {})",
        first.step_index,
        last.step_index,
        thousands(p.start + 1),
        thousands(p.start + p.steps.len() as u64),
        thousands(r.steps as u64)
    );
    match p.next_from {
        None => println!("{shown}; end of run {}", r.id),
        Some(next) => {
            println!("{shown}; next page:");
            println!(
                "  dataset-packer show {} --run {} --from {next} --limit {}",
                args.pack.display(),
                r.id,
                args.limit
            );
        }
    }
}
