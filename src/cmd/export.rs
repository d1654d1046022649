//! `export`: pack → JSONL, Parquet or a smaller pack. The story: open the source pack, turn
//! `--runs`/`--where` into a run selection, refuse an output that would replace the source,
//! hand the selection to the format's writer (which stages its output and publishes it
//! atomically), summarise.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use clap::{Args, ValueEnum};

use crate::UsageError;
use crate::cli::WhereArgs;
use crate::export::{SourcePack, jsonl, pack, parquet, select};
use crate::pack::families::Family;
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
    /// Where to write (a file or a folder, see --format).
    #[arg(long, value_name = "PATH")]
    pub output: PathBuf,
    /// Output format [default: from the output's name: .parquet, .jsonl or .jsonl.gz; a
    /// folder needs it].
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Run ids to export: a list with inclusive ranges, e.g. 0,5,9-12.
    #[arg(long, value_name = "IDS", value_parser = parse_runs)]
    pub runs: Option<RunList>,
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

/// `--runs` as given and as parsed.
#[derive(Debug, Clone)]
pub struct RunList {
    text: String,
    ranges: Vec<RangeInclusive<u32>>,
}

fn parse_runs(text: &str) -> Result<RunList, String> {
    Ok(RunList {
        text: text.to_string(),
        ranges: select::parse_run_list(text)?,
    })
}

impl ExportArgs {
    /// `--format`, or the format the output's name says (`x.parquet`, `x.jsonl[.gz]`).
    pub fn format(&self) -> Result<Format, UsageError> {
        if let Some(format) = self.format {
            return Ok(format);
        }
        if parquet::is_single_file(&self.output) {
            Ok(Format::Parquet)
        } else if jsonl::single_file_kind(&self.output).is_some() {
            Ok(Format::Jsonl)
        } else {
            Err(UsageError(format!(
                "give --format jsonl, parquet or pack: the output {} does not say it (a file \
                 named .parquet, .jsonl or .jsonl.gz does)",
                self.output.display()
            )))
        }
    }
}

pub fn run(args: &ExportArgs) -> Result<()> {
    let started = Instant::now();
    let format = args.format()?;
    check_usage(args, format)?;
    let source = SourcePack::open(&args.pack, &args.version.version)?;
    if format == Format::Jsonl && source.shuffled {
        let from = source.session_value("source_pack")?;
        return Err(UsageError(format!(
            "{} is shuffled: its runs' rows are scattered, not in step order, so they cannot be written as raw logs; export them from the unshuffled pack{}",
            args.pack.display(),
            from.map_or(String::new(), |p| format!(" it was made from ({p})"))
        ))
        .into());
    }
    let companions = source.carried_companions(&args.drop_companion)?;
    // The raw format has a place for the search statistics (each row's `search` object), and
    // for no other family.
    let search = companions.iter().copied().find(|f| f.holds_search_stats());
    let others: Vec<&&Family> = companions
        .iter()
        .filter(|f| search.is_none_or(|s| s.name != f.name))
        .collect();
    if format == Format::Jsonl && !others.is_empty() {
        let names: Vec<&str> = others.iter().map(|f| f.name.as_str()).collect();
        return Err(UsageError(format!(
            "{} has companion arrays ({}) and the JSONL format has no place for them; pass {} to export the rows without them",
            args.pack.display(),
            names.join(", "),
            names
                .iter()
                .map(|n| format!("--drop-companion {n}"))
                .collect::<Vec<_>>()
                .join(" ")
        ))
        .into());
    }
    let selection = select::select(
        &source,
        args.runs.as_ref().map(|r| r.ranges.as_slice()),
        &args.where_args,
    )?;
    let selection_text = select::describe(
        args.runs.as_ref().map(|r| r.text.as_str()),
        &args.where_args,
    );
    select::require_some(&source, &selection, &selection_text)?;
    refuse_replacing_source(&args.pack, &args.output)?;
    let workers = args
        .workers
        .map_or_else(crate::default_workers, |w| w as usize);
    source.verify(&selection, &companions, workers)?;

    // A line after the summary (the upgrade of a legacy source).
    let mut note = String::new();
    let (runs, rows, what) = match format {
        Format::Jsonl => {
            let w = if jsonl::single_file_kind(&args.output).is_some() {
                jsonl::write_file(
                    &source,
                    &selection,
                    search,
                    &args.output,
                    args.overwrite,
                    workers,
                    &crate::cmd::progress::Bars::unless(args.quiet),
                )?
            } else {
                jsonl::write_dir(
                    &source,
                    &selection,
                    search,
                    &args.output,
                    args.overwrite,
                    workers,
                    &crate::cmd::progress::Bars::unless(args.quiet),
                )?
            };
            (w.runs, w.rows, files(w.files, &args.output))
        }
        Format::Parquet => {
            let opts = parquet::ParquetOptions {
                overwrite: args.overwrite,
                progress: crate::cmd::progress::Bars::unless(args.quiet),
                workers,
                file_rows: args.shard_rows,
                companions: &companions,
                run_columns: args.run_columns,
            };
            let w = parquet::write(&source, &selection, &args.output, &opts)?;
            (w.runs, w.rows, files(w.files, &args.output))
        }
        Format::Pack => {
            let opts = pack::PackOptions {
                shard_rows: args.shard_rows.or(source.shard_rows()),
                overwrite: args.overwrite,
                progress: crate::cmd::progress::Bars::unless(args.quiet),
                selection_text: &selection_text,
                workers,
                companions: &companions,
            };
            let w = pack::write(&source, &selection, &args.output, &opts)?;
            note = w.upgrade_note();
            (
                w.runs,
                w.rows,
                format!(
                    "a pack (a folder) of {}",
                    count(w.shards as u64, "shard", "shards")
                ),
            )
        }
    };
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "exported {}, {} ({selection_text}) from {} into {what} at {} in {elapsed:.2} s ({} rows/s)",
        count(runs as u64, "run", "runs"),
        count(rows, "row", "rows"),
        args.pack.display(),
        args.output.display(),
        thousands((rows as f64 / elapsed.max(1e-9)) as u64)
    );
    if !note.is_empty() {
        println!("  {note}");
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

/// Option combinations that make no sense (exit 2).
fn check_usage(args: &ExportArgs, format: Format) -> Result<()> {
    if args.run_columns && format != Format::Parquet {
        return Err(UsageError("--run-columns applies to --format parquet".into()).into());
    }
    let folder_parquet = format == Format::Parquet && !parquet::is_single_file(&args.output);
    if args.shard_rows.is_some() && format != Format::Pack && !folder_parquet {
        return Err(UsageError(
            "--shard-rows applies to --format pack and to --format parquet into a folder".into(),
        )
        .into());
    }
    if format == Format::Pack
        && (parquet::is_single_file(&args.output)
            || jsonl::single_file_kind(&args.output).is_some())
    {
        return Err(UsageError(format!(
            "--format pack writes a folder; {} names a file",
            args.output.display()
        ))
        .into());
    }
    Ok(())
}

/// An output that is the source pack, or a folder holding it, would replace or delete it.
fn refuse_replacing_source(pack: &Path, output: &Path) -> Result<()> {
    let src = std::fs::canonicalize(pack)?;
    let out = std::path::absolute(output)?;
    let out = match (out.parent(), out.file_name()) {
        (Some(parent), Some(name)) if parent.exists() => std::fs::canonicalize(parent)?.join(name),
        _ => out,
    };
    if src == out || src.starts_with(&out) {
        anyhow::bail!(
            "the output {} {} the source pack {}; choose another output",
            output.display(),
            if src == out { "is" } else { "holds" },
            pack.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_export_outputs() {
        assert!(parquet::is_single_file(Path::new("a/b.parquet")));
        assert!(!parquet::is_single_file(Path::new("a/b")));
        assert_eq!(jsonl::single_file_kind(Path::new("x.jsonl.gz")), Some(true));
        assert_eq!(jsonl::single_file_kind(Path::new("x.jsonl")), Some(false));
        assert_eq!(jsonl::single_file_kind(Path::new("x")), None);
    }
}
