//! `report`: one self-contained HTML page of charts describing one or more packs. The story:
//! gather each pack's figures with `stats::gather` (the numbers `stats --json`
//! prints), lay them out with `report::page`, and write the page atomically (a
//! temporary file renamed over the target). The packs are only read.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::cli::{VersionArg, WhereArgs};
use crate::export::output::StagedFile;
use crate::progress::thousands;
use crate::report::{PackFigures, page};
use crate::stats::{gather_with_steps, longest_run};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer report packs/d6 --output d6.html
  dataset-packer report packs/d6 packs/d7 --output d6-vs-d7.html
  dataset-packer report last-week/ this-week/ --output weeks.html --overwrite
  dataset-packer report packs/d6 --where \"max_score > 600000\" --output strong.html

The page holds inline SVG charts, each with the numbers behind it in a table (the numbers of
`stats --json`): run lengths, final scores per depth, highest tiles, the valuation type mix
along the game, moves, EVs per valuation type, board_eval along the game, search effort per
depth (from a `search` companion array), findings, duplicates and skipped runs, and how each
pack was made. Two or more packs are drawn on the same charts, told apart by a legend. The
page loads nothing from the network: open it from a file browser or a shared drive.")]
pub struct ReportArgs {
    /// The pack folders to describe (two or more are compared on the same charts).
    #[arg(value_name = "PACK_DIR", required = true)]
    pub packs: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(long, short, value_name = "FILE")]
    pub output: PathBuf,
    /// Replace FILE if it exists.
    #[arg(long)]
    pub overwrite: bool,
    #[command(flatten)]
    pub where_args: WhereArgs,
    /// The version of every pack to describe (see `versions`).
    #[command(flatten)]
    pub version: VersionArg,
    /// Threads for the row pass [default: all cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: Option<u64>,
    /// Print nothing on success.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn run(args: &ReportArgs) -> Result<()> {
    if args.packs.iter().any(|p| same_file(p, &args.output)) {
        bail!("--output {} is one of the packs", args.output.display());
    }
    let (staged, file) = StagedFile::create(&args.output, args.overwrite)?;
    let workers = args
        .workers
        .map_or_else(crate::default_workers, |w| w as usize);
    let names = legend_names(&args.packs);
    let filter = args.where_args.filter();
    // One step width for every pack, so that their by-step charts share buckets.
    let mut longest = 0;
    for dir in &args.packs {
        let steps = longest_run(dir, &args.version.version, filter.as_ref())
            .with_context(|| format!("reading {}", dir.display()))?;
        longest = longest.max(steps);
    }
    let mut packs = Vec::new();
    for (colour, (dir, name)) in args.packs.iter().zip(names).enumerate() {
        let stats = gather_with_steps(
            dir,
            &args.version.version,
            workers,
            filter.as_ref(),
            Some(longest),
        )
        .with_context(|| format!("reading {}", dir.display()))?;
        packs.push(PackFigures {
            name,
            colour,
            stats,
        });
    }
    let html = page(
        &packs,
        &crate::cli::command_line(),
        &crate::format::metadata::utc_now(),
    );
    let mut out = std::io::BufWriter::new(file);
    out.write_all(html.as_bytes())
        .with_context(|| format!("writing {}", args.output.display()))?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    staged.publish(file)?;
    if !args.quiet {
        let rows: u64 = packs.iter().map(|p| p.stats.rows).sum();
        println!(
            "wrote {} ({} pack{}, {} rows, {} bytes)",
            args.output.display(),
            packs.len(),
            if packs.len() == 1 { "" } else { "s" },
            thousands(rows),
            thousands(html.len() as u64)
        );
    }
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Each pack's name in legends: its folder name, or its path as given when two folders share
/// a name.
fn legend_names(packs: &[PathBuf]) -> Vec<String> {
    let short = |p: &PathBuf| {
        p.canonicalize()
            .ok()
            .and_then(|c| c.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| p.display().to_string())
    };
    let shorts: Vec<String> = packs.iter().map(short).collect();
    packs
        .iter()
        .zip(&shorts)
        .map(|(p, s)| {
            if shorts.iter().filter(|x| *x == s).count() > 1 {
                p.display().to_string()
            } else {
                s.clone()
            }
        })
        .collect()
}
