//! `report`: one self-contained HTML page of charts describing one or more packs. Parses the
//! command line into [`ReportOptions`], calls [`crate::report()`], and prints its summary.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::cli::{VersionArg, WhereArgs};
use crate::progress::thousands;
use crate::report::ReportOptions;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer report packs/d6 --output d6.html
  dataset-packer report packs/d6 packs/d7 --output d6-vs-d7.html
  dataset-packer report last-week/ this-week/ --output weeks.html --overwrite
  dataset-packer report s3://training/team/d6 packs/d7 --output d6-vs-d7.html
  dataset-packer report packs/d6 --where \"max_score > 600000\" --output strong.html

The page holds inline SVG charts, each with the numbers behind it in a table (the numbers of
`stats --json`): run lengths, final scores per depth, highest tiles, the valuation type mix
along the game, moves, EVs per valuation type, board_eval along the game, search effort per
depth (from a `search` companion array), findings, duplicates and skipped runs, and how each
pack was made. Two or more packs are drawn on the same charts, told apart by a legend. The
page loads nothing from the network: open it from a file browser or a shared drive.")]
pub struct ReportArgs {
    /// The pack folders or URLs to describe (two or more are compared on the same charts).
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

impl ReportArgs {
    /// The library's options for these arguments.
    pub fn options(&self) -> ReportOptions {
        let mut options = ReportOptions::default()
            .version(self.version.version.clone())
            .overwrite(self.overwrite);
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

pub fn run(args: &ReportArgs) -> Result<()> {
    let summary = crate::report(&args.packs, &args.output, &args.options())?;
    if !args.quiet {
        println!(
            "wrote {} ({} pack{}, {} rows, {} bytes)",
            args.output.display(),
            summary.packs,
            if summary.packs == 1 { "" } else { "s" },
            thousands(summary.rows),
            thousands(summary.bytes)
        );
    }
    Ok(())
}
