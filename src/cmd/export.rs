//! `export`: pack → JSONL, Parquet or a smaller pack. Parses the command line into
//! [`ExportOptions`], calls [`crate::export`], and prints its summary.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use clap::{Args, ValueEnum};

use crate::cli::WhereArgs;
use crate::export::{ExportFormat, ExportOptions, select};
use crate::progress::{count, thousands};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The raw Macroxue row format: PATH.jsonl / PATH.jsonl.gz is one file, any other PATH a
    /// folder with run-NNNNNNNNNN.meta.json + .jsonl.gz per run (`pack` reads it back).
    Jsonl,
    /// Columnar, zstd: PATH.parquet is one file, any other PATH a folder of part-NNNNN.parquet.
    Parquet,
    /// A new pack holding the selected runs, renumbered from 0.
    Pack,
}

impl From<Format> for ExportFormat {
    fn from(f: Format) -> ExportFormat {
        match f {
            Format::Jsonl => ExportFormat::Jsonl,
            Format::Parquet => ExportFormat::Parquet,
            Format::Pack => ExportFormat::Pack,
        }
    }
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer export packs/d6 --output d6.parquet            # --format from the name
  dataset-packer export packs/d6 --format parquet --output d6-parts/ --shard-rows 5000000
  dataset-packer export packs/d6 --format parquet --output d6.parquet --run-columns   # + depth, max_score, … per row
  dataset-packer export packs/d6 --format jsonl --output run42.jsonl --runs 42
  dataset-packer export packs/d6 --format jsonl --output raw-again/          # re-packable
  dataset-packer export packs/d6 --format pack --output packs/d6-best --where \"max_score > 600000 AND depth = 7\"
  dataset-packer export packs/d6 --format pack --output packs/val --runs 0-99,500 --shard-rows 1000000
  dataset-packer export old-2048former-pack --format pack --output packs/full --shard-rows 1M   # legacy → full pack
  dataset-packer export packs/d6 --format pack --output s3://training/team/d6-val --runs 0-99   # to object storage
  dataset-packer export packs/d6 --format pack --output packs/train \\
      --where \"SELECT id FROM runs WHERE max_score BETWEEN ? AND ?\" --param 50000 --param 500000

--where is either an SQL expression over the columns of `runs` (id, seed, steps, max_score,
highest_tile) and `run_details` (depth, game_index, num_moves, max_rank, sum_tile, seconds,
source_path, …), or a query that returns run ids (SELECT id FROM runs WHERE …, WITH …), run
exactly as sqlite3 runs it; a query must return one column of run ids, or it is refused.
--param binds its parameters (`?` in order, `:name` by name); every parameter needs exactly
one value. With --runs too, a run must satisfy both.")]
pub struct ExportArgs {
    /// The pack to read.
    #[arg(value_name = "PACK")]
    pub pack: PathBuf,
    #[command(flatten)]
    pub version: crate::cli::VersionArg,
    /// Where to write (a file or a folder, see --format). --format pack may also write to a
    /// URL in object storage (s3://bucket/prefix, gs://, az://): built in the cache folder's
    /// staging/, then published there as a commit.
    #[arg(long, value_name = "PATH")]
    pub output: PathBuf,
    /// Output format [default: from the output's name: .parquet, .jsonl or .jsonl.gz; a
    /// folder needs it].
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Run ids to export: a list with inclusive ranges, e.g. 0,5,9-12.
    #[arg(long, value_name = "IDS", value_parser = parse_runs)]
    pub runs: Option<String>,
    #[command(flatten)]
    pub where_args: WhereArgs,
    /// Rows per shard (--format pack) or per part file (--format parquet into a folder), e.g.
    /// 1M (k, M, G = 10^3, 10^6, 10^9) [default for --format pack: the source pack's].
    #[arg(long, value_name = "N", value_parser = crate::cli::parse_rows)]
    pub shard_rows: Option<u64>,
    /// Threads [default: all cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: Option<u64>,
    /// Replace an existing output (an export's own files only, for a pack the companion
    /// families its metadata.db records; the old one stays until the new one is complete).
    #[arg(long)]
    pub overwrite: bool,
    /// --format parquet: add the run's columns (`runs` and `run_details`: depth, max_score,
    /// highest_tile, …) to every row, for engines that cannot read metadata.db. (A folder
    /// export also writes runs.parquet, one row per run, either way.)
    #[arg(long)]
    pub run_columns: bool,
    /// Leave the companion array family NAME out (repeatable). --format pack carries
    /// companions and --format parquet makes them columns; JSONL has no place for them.
    #[arg(long = "drop-companion", value_name = "NAME")]
    pub drop_companion: Vec<String>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// `--runs` as given, checked to be a list of ids and ranges.
fn parse_runs(text: &str) -> Result<String, String> {
    select::parse_run_list(text)?;
    Ok(text.to_string())
}

impl ExportArgs {
    /// The library's options for these arguments.
    pub fn options(&self) -> ExportOptions {
        let mut options = ExportOptions::default()
            .version(self.version.version.clone())
            .overwrite(self.overwrite)
            .run_columns(self.run_columns)
            .progress(crate::cmd::progress::Bars::unless(self.quiet));
        if let Some(format) = self.format {
            options = options.format(format.into());
        }
        if let Some(runs) = &self.runs {
            options = options.runs(runs);
        }
        if let Some(filter) = self.where_args.filter() {
            options = options
                .select_sql(&filter.sql)
                .params(filter.params)
                .sql_limits(filter.limits);
        }
        if let Some(rows) = self.shard_rows {
            options = options.shard_rows(rows);
        }
        if let Some(workers) = self.workers {
            options = options.workers(workers as usize);
        }
        for name in &self.drop_companion {
            options = options.drop_companion(name);
        }
        options
    }
}

pub fn run(args: &ExportArgs) -> Result<()> {
    let started = Instant::now();
    let summary = crate::export(&args.pack, &args.output, &args.options())?;
    let what = match summary.format {
        ExportFormat::Pack => format!(
            "a pack (a folder) of {}",
            count(summary.files as u64, "shard", "shards")
        ),
        _ => files(summary.files, &args.output),
    };
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "exported {}, {} ({}) from {} into {what} at {} in {elapsed:.2} s ({} rows/s)",
        count(summary.runs as u64, "run", "runs"),
        count(summary.rows, "row", "rows"),
        summary.selection,
        args.pack.display(),
        args.output.display(),
        thousands((summary.rows as f64 / elapsed.max(1e-9)) as u64)
    );
    if let Some(up) = &summary.uploaded {
        println!("  published to {up}");
    }
    if let Some(n) = summary.legacy_ev_legal_changed {
        println!(
            "  upgraded from the legacy 46-byte layout: recomputing ev_legal from the board changed {}",
            count(n, "row", "rows")
        );
    }
    Ok(())
}

/// `1 file`, or `a folder of 12 files` when the export wrote a folder.
fn files(n: usize, output: &Path) -> String {
    let listed = count(n as u64, "file", "files");
    if output.is_dir() {
        format!("a folder of {listed}")
    } else {
        listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_export_outputs() {
        let format = |p: &str| ExportFormat::from_output(Path::new(p));
        assert_eq!(format("a/b.parquet"), Some(ExportFormat::Parquet));
        assert_eq!(format("x.jsonl.gz"), Some(ExportFormat::Jsonl));
        assert_eq!(format("x.jsonl"), Some(ExportFormat::Jsonl));
        assert_eq!(format("a/b"), None);
    }
}
