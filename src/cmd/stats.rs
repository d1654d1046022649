//! `stats`: what is in a pack, or in the runs an SQL expression picks, at a glance: the figures
//! [`crate::stats()`] returns, printed as aligned tables with small histograms, or as one JSON
//! document ([`Stats::to_json`]).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::cli::{VersionArg, WhereArgs};
use crate::format::board::MOVE_NAMES;
use crate::progress::thousands;
use crate::stats::{Spread, Stats, StatsOptions, share, tile_value};

/// Width of the histogram bars, in terminal cells.
const BAR_WIDTH: usize = 36;
/// Valuation types given their own column in the phase table; the rest are summed as "other".
const PHASE_COLUMNS: usize = 5;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer stats packs/d6
  dataset-packer stats packs/d6 --json | jq '.highest_tile'
  dataset-packer stats packs/d6 --workers 2
  dataset-packer stats s3://training/team/d6 --cache-limit 20GiB
  dataset-packer stats packs/d6 --where \"depth = 7 AND max_score > 600000\"

  dataset-packer stats packs/d6 --where \"SELECT id FROM runs WHERE max_score > ?\" --param 600000

--where takes the same SQL as export --where: an expression over the columns of runs and
run_details, or a query that returns run ids (with --param values for its parameters); the
figures then describe only those runs and their rows.")]
pub struct StatsArgs {
    /// The pack folder (or s3://, gs://, az://, https:// URL) to describe.
    #[arg(value_name = "PACK_DIR")]
    pub pack: PathBuf,
    #[command(flatten)]
    pub version: VersionArg,
    #[command(flatten)]
    pub where_args: WhereArgs,
    /// Print the figures as one JSON document.
    #[arg(long)]
    pub json: bool,
    /// Threads for the row pass [default: all cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: Option<u64>,
}

impl StatsArgs {
    /// The library's options for these arguments.
    pub fn options(&self) -> StatsOptions {
        let mut options = StatsOptions::default().version(self.version.version.clone());
        if let Some(filter) = self.where_args.filter() {
            options = options
                .select_sql(&filter.sql)
                .params(filter.params)
                .sql_limits(filter.limits);
        }
        if let Some(workers) = self.workers {
            options = options.workers(workers as usize);
        }
        options
    }
}

pub fn run(args: &StatsArgs) -> Result<()> {
    let stats = crate::stats(&args.pack, &args.options())?;
    if args.json {
        println!("{}", stats.to_json());
    } else {
        print_human(&stats);
    }
    Ok(())
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
    print_search(s);
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
    println!(
        "version   {}@{}{}",
        s.pack_id.as_deref().unwrap_or("unversioned"),
        s.version,
        if s.latest {
            " (latest)"
        } else {
            " (an earlier version)"
        }
    );
    for src in &s.sources {
        println!("made from {src} ({})", src.path);
    }
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
    if s.depths.iter().any(|d| d.depth.is_none()) {
        println!(
            "  ? = no depth recorded (run_details.depth is NULL): a pack converted from the \
             reference packer's has none; docs/migration.md (\"depth\") says how to set it"
        );
    }
}

/// Search effort per depth from the `search` family, or how many rows' statistics were not
/// kept; nothing when the pack has neither.
fn print_search(s: &Stats) {
    match (&s.search, s.search_rows_not_kept) {
        (Some(e), _) => {
            if e.of_search_stats {
                println!("\nSearch effort by depth (companion search: nodes searched per move)");
            } else {
                println!("\nSearch effort by depth (companion search: {})", e.dtype);
            }
            if let Some(problem) = &e.problem {
                println!("  {problem}");
                return;
            }
            println!(
                "  {:>6}  {:>13}  {:>13}  {:>13}  {:>13}",
                "depth", "searched rows", "median nodes", "mean nodes", "max nodes"
            );
            for d in &e.depths {
                println!(
                    "  {:>6}  {:>13}  {:>13}  {:>13}  {:>13}",
                    d.depth.map_or("?".to_string(), |v| v.to_string()),
                    thousands(d.rows),
                    d.median().map_or("-".to_string(), number),
                    if d.rows == 0 {
                        "-".to_string()
                    } else {
                        number(d.sum / d.rows as f64)
                    },
                    if d.rows == 0 {
                        "-".to_string()
                    } else {
                        number(d.max)
                    },
                );
            }
        }
        (None, Some(n)) if n > 0 => println!(
            "\nSearch statistics: not kept for {} rows (packed without --search-stats)",
            thousands(n)
        ),
        _ => {}
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
    print_skipped(s);
}

/// The runs `pack --skip-invalid` left out of the pack, which no other figure counts.
fn print_skipped(s: &Stats) {
    let Some(n) = s.skipped_runs.filter(|&n| n > 0) else {
        return;
    };
    println!(
        "\nRuns left out at pack time (--skip-invalid; metadata.db table skipped_runs): {}",
        thousands(n)
    );
    for (path, reason) in &s.skipped_examples {
        println!("  {path}: {reason}");
    }
    if n > s.skipped_examples.len() as u64 {
        println!("  … `dataset-packer validate` lists them, `stats --json` counts them");
    }
}
