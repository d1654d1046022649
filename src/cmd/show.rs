//! `show`: one game, move by move. The story: read one page of the run (`show`
//! seeks to it through the run index and maps only its rows); print the run's facts, then each
//! step's board with real tile values, the move played, the valuation type and the four EVs
//! with illegal moves marked (or the same as JSON), and how to see the next page.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use serde_json::{Value, json};

use crate::format::board::MOVE_NAMES;
use crate::format::row::StepRow;
use crate::format::search::SearchStats;
use crate::format::valuation::ValuationTable;
use crate::pack::versions::VersionSpec;
use crate::progress::thousands;
use crate::show::{self, Page, Window, legal, move_name, tiles, valuation_name};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer show packs/d6 --run 3
  dataset-packer show packs/d6 --run 3 --from 200 --limit 50
  dataset-packer show packs/d6 --run 3 --limit 1000 --json > run3.json
  dataset-packer show packs/d6 --run 3 --last 5             # how the game ended
  dataset-packer show s3://training/team/d6 --run 3

The pack must be unshuffled (show seeks through metadata.db's run_index).")]
pub struct ShowArgs {
    /// The pack folder (or s3://, gs://, az://, https:// URL).
    #[arg(value_name = "PACK_DIR")]
    pub pack: PathBuf,
    #[command(flatten)]
    pub version: crate::cli::VersionArg,
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
    let window = match args.last {
        Some(n) => Window::Last(n),
        None => Window::Step {
            step: args.from,
            limit: args.limit,
        },
    };
    let page = show::read(&args.pack, &args.version.version, args.run, window)?;
    if args.json {
        println!("{}", page_json(&page));
    } else {
        print_page(&page, args);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Output

fn page_json(p: &Page) -> Value {
    let r = &p.run.run;
    let d = p.run.details.clone().unwrap_or_default();
    let at = p.run.first_row.expect("checked");
    let steps: Vec<Value> = p
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| show::step_json(s, &p.names, p.search.as_ref().map(|v| &v[i])))
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
                "file": p.first_file,
                "row_offset": at.row_offset, "global_row": at.global_row,
            },
        },
        "first_row_shown": p.start,
        "steps": steps,
        "next_from": p.next_from,
    })
}

fn print_page(p: &Page, args: &ShowArgs) {
    print_facts(p);
    for (i, s) in p.steps.iter().enumerate() {
        println!();
        print_step(s, &p.names, p.search.as_ref().map(|v| &v[i]));
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
    println!("  {:<10} {}", "rows at", p.rows_at);
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
            // The next page of the same version: an earlier one is named, the latest is not.
            let version = match &args.version.version {
                VersionSpec::Latest => String::new(),
                spec => format!(" --version {spec}"),
            };
            println!(
                "  dataset-packer show {}{version} --run {} --from {next} --limit {}",
                args.pack.display(),
                r.id,
                args.limit
            );
        }
    }
}
