//! Taking data out of a pack: [`export`] writes the selected runs of a pack as JSONL (the raw
//! Macroxue format), Parquet (columnar, for DuckDB/Polars/pyarrow) or a new pack holding a
//! subset, as `dataset-packer export` does. The story: open the source pack, turn the run ids
//! and SQL of the [`ExportOptions`] into a run selection, refuse an output that would replace
//! the source, check the shards it reads, hand the selection to the format's writer (which
//! stages its output and publishes it atomically), and summarise.
//!
//! This module is also the shared reading side of the writers: [`SourcePack`] reads the rows
//! of the selected runs in bounded pieces (memory-mapped, legacy 46-byte shards converted) for
//! [`jsonl`], [`parquet`] and [`pack`]; [`select`] turns run ids and SQL into a
//! [`Selection`]; [`output`] makes file and folder outputs appear atomically.

pub mod companion_columns;
pub mod jsonl;
pub mod output;
pub mod pack;
pub mod parquet;
pub mod run_columns;
pub mod select;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use std::sync::{Mutex, MutexGuard};

use rusqlite::Connection;

use crate::error::{Context, Result, err, fail};

use crate::format::metadata::{self, RunDetails, RunRow};
use crate::format::row::{ROW_BYTES, offset};
use crate::format::valuation::ValuationTable;
use crate::pack::families::{self, Family, Scan};
use crate::pack::query::{Param, RunFilter, SqlLimits};
use crate::pack::remote_output::{self, Target, Uploaded};
use crate::pack::shards::{self, AlignedRows, RunSlots, Shard};
use crate::pack::versions::VersionSpec;
use crate::progress::Observer;

/// The format an export writes.
///
/// ```
/// use dataset_packer::ExportFormat;
/// assert_eq!(ExportFormat::from_output("runs.jsonl.gz".as_ref()), Some(ExportFormat::Jsonl));
/// assert_eq!(ExportFormat::from_output("a-folder".as_ref()), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExportFormat {
    /// The raw Macroxue row format: `PATH.jsonl` / `PATH.jsonl.gz` is one file, any other
    /// path a folder with `run-NNNNNNNNNN.meta.json` + `.jsonl.gz` per run (which `pack`
    /// reads back).
    Jsonl,
    /// Columnar, zstd: `PATH.parquet` is one file, any other path a folder of
    /// `part-NNNNN.parquet` files and `runs.parquet`.
    Parquet,
    /// A new pack (a folder) holding the selected runs, renumbered from 0.
    Pack,
}

impl ExportFormat {
    /// The format an output's name says: `.parquet`, `.jsonl` or `.jsonl.gz`; None for any
    /// other name (a folder, which needs the format given).
    pub fn from_output(output: &Path) -> Option<ExportFormat> {
        if parquet::is_single_file(output) {
            Some(ExportFormat::Parquet)
        } else if jsonl::single_file_kind(output).is_some() {
            Some(ExportFormat::Jsonl)
        } else {
            None
        }
    }
}

/// How [`export`] selects and writes; `ExportOptions::default()` does what `dataset-packer
/// export PACK --output PATH` does: every run of the latest version, the format from the
/// output's name, all cores, no overwriting, every companion family carried.
///
/// ```
/// use dataset_packer::{ExportFormat, ExportOptions, Param};
/// let options = ExportOptions::default()
///     .format(ExportFormat::Parquet)
///     .select_sql("SELECT id FROM runs WHERE max_score > ?")
///     .param(Param::parse("50000").unwrap())
///     .run_columns(true)
///     .workers(2);
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct ExportOptions {
    format: Option<ExportFormat>,
    version: VersionSpec,
    runs: Option<String>,
    sql: Option<String>,
    params: Vec<Param>,
    sql_limits: SqlLimits,
    shard_rows: Option<u64>,
    workers: usize,
    overwrite: bool,
    run_columns: bool,
    drop_companions: Vec<String>,
    command_line: String,
    progress: Observer,
}

impl Default for ExportOptions {
    fn default() -> ExportOptions {
        ExportOptions {
            format: None,
            version: VersionSpec::Latest,
            runs: None,
            sql: None,
            params: Vec::new(),
            sql_limits: SqlLimits::default(),
            shard_rows: None,
            workers: crate::default_workers(),
            overwrite: false,
            run_columns: false,
            drop_companions: Vec::new(),
            command_line: crate::pack::query::process_command_line(),
            progress: Observer::default(),
        }
    }
}

impl ExportOptions {
    /// Write `format` (`--format`); by default the output's name says it
    /// ([`ExportFormat::from_output`]), and a name that does not is refused.
    pub fn format(mut self, format: ExportFormat) -> ExportOptions {
        self.format = Some(format);
        self
    }

    /// Read the pack as `version` of it was (`--version`); by default its latest.
    pub fn version(mut self, version: VersionSpec) -> ExportOptions {
        self.version = version;
        self
    }

    /// Export only the runs with these ids (`--runs`): a list with inclusive ranges,
    /// `0,5,9-12`. With [`select_sql`](Self::select_sql) too, a run must satisfy both.
    pub fn runs(mut self, ids: &str) -> ExportOptions {
        self.runs = Some(ids.to_string());
        self
    }

    /// Export only the runs `sql` selects (`--where`): a WHERE expression over the columns
    /// of `runs` and `run_details`, or a query that returns run ids (see [`crate::Pack::select`]).
    pub fn select_sql(mut self, sql: &str) -> ExportOptions {
        self.sql = Some(sql.to_string());
        self
    }

    /// A value for the next parameter of the SQL (`--param`, repeatable).
    pub fn param(mut self, param: Param) -> ExportOptions {
        self.params.push(param);
        self
    }

    /// The values of the SQL's parameters (`--param …`), replacing any given before.
    pub fn params(mut self, params: Vec<Param>) -> ExportOptions {
        self.params = params;
        self
    }

    /// How long and how much memory the SQL selection may take (`--sql-timeout`,
    /// `--sql-memory`).
    pub fn sql_limits(mut self, limits: SqlLimits) -> ExportOptions {
        self.sql_limits = limits;
        self
    }

    /// Rows per shard of an exported pack, or per part file of a Parquet folder
    /// (`--shard-rows`); by default an exported pack keeps its source's.
    pub fn shard_rows(mut self, rows: u64) -> ExportOptions {
        self.shard_rows = Some(rows);
        self
    }

    /// Threads (`--workers`); by default all cores.
    pub fn workers(mut self, workers: usize) -> ExportOptions {
        self.workers = workers.max(1);
        self
    }

    /// Replace an existing output (`--overwrite`): an export's own files only (for a pack,
    /// the companion families its metadata.db records); the old one stays until the new one
    /// is complete.
    pub fn overwrite(mut self, yes: bool) -> ExportOptions {
        self.overwrite = yes;
        self
    }

    /// Parquet: add the run's columns (`runs` and `run_details`) to every row
    /// (`--run-columns`).
    pub fn run_columns(mut self, yes: bool) -> ExportOptions {
        self.run_columns = yes;
        self
    }

    /// Leave the companion family `name` out (`--drop-companion`, repeatable).
    pub fn drop_companion(mut self, name: &str) -> ExportOptions {
        self.drop_companions.push(name.to_string());
        self
    }

    /// The command line an exported pack records as having made it; by default this
    /// process's arguments, quoted for a shell.
    pub fn command_line(mut self, command_line: String) -> ExportOptions {
        self.command_line = command_line;
        self
    }

    /// Where to report progress; by default nowhere.
    pub fn progress(mut self, progress: Observer) -> ExportOptions {
        self.progress = progress;
        self
    }

    /// The SQL selection, if any.
    fn filter(&self) -> Option<RunFilter> {
        self.sql.as_ref().map(|sql| RunFilter {
            sql: sql.clone(),
            params: self.params.clone(),
            limits: self.sql_limits,
        })
    }

    /// The format to write: the one given, or the one the output's name says.
    fn format_for(&self, output: &Path) -> Result<ExportFormat> {
        match self.format.or_else(|| ExportFormat::from_output(output)) {
            Some(format) => Ok(format),
            None => Err(err!(
                Refused,
                "the output {} does not say which format to write (a file named .parquet, \
                 .jsonl or .jsonl.gz does): give the format, jsonl, parquet or pack",
                output.display()
            )
            .with_option("format")),
        }
    }

    /// Refuses options that make no sense together with `format` and `output`.
    fn check(&self, format: ExportFormat, output: &Path) -> Result<()> {
        if self.run_columns && format != ExportFormat::Parquet {
            return Err(
                err!(Refused, "run columns apply to the parquet format only")
                    .with_option("run_columns"),
            );
        }
        let folder_parquet = format == ExportFormat::Parquet && !parquet::is_single_file(output);
        if self.shard_rows.is_some() && format != ExportFormat::Pack && !folder_parquet {
            return Err(err!(
                Refused,
                "rows per shard apply to the pack format and to parquet into a folder"
            )
            .with_option("shard_rows"));
        }
        if format == ExportFormat::Pack && ExportFormat::from_output(output).is_some() {
            return Err(err!(
                Refused,
                "the pack format writes a folder; {} names a file",
                output.display()
            )
            .with_option("format"));
        }
        Ok(())
    }
}

/// What [`export`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExportSummary {
    /// The format written.
    pub format: ExportFormat,
    /// Runs exported.
    pub runs: usize,
    /// Rows exported.
    pub rows: u64,
    /// Files written: shard files for a pack, part or per-run files for a folder, else 1.
    pub files: usize,
    /// How the runs were chosen, as the command line gives it (`all runs`, `--runs 0-9`,
    /// `--where …`); what an exported pack records as its `selection`.
    pub selection: String,
    /// For a pack exported from one in the legacy 46-byte layout: the rows whose `ev_legal`
    /// recomputing it from the board changed.
    pub legacy_ev_legal_changed: Option<u64>,
    /// For a pack exported to object storage (`s3://…`): where it was published and what was
    /// uploaded.
    pub uploaded: Option<Uploaded>,
}

/// Exports the runs of the pack at `pack` that `options` select into `output`: a `.jsonl`,
/// `.jsonl.gz` or `.parquet` file, or a folder (JSONL per run, Parquet parts, or a new pack),
/// as `dataset-packer export` does; the output appears whole or not at all. A pack may also
/// go to a URL in object storage (`s3://bucket/prefix`): staged locally, then committed
/// there ([`ExportSummary::uploaded`]); JSONL and Parquet are written locally only. The shards read
/// are checked against their recorded checksums first.
///
/// Errors: `NotAPack` when `pack` is not one; `Refused` for an output that exists (without
/// [`ExportOptions::overwrite`]), that would replace the source, or options that do not fit
/// the format (with [`Error::option`](crate::Error::option) naming the option);
/// `InvalidInput` for a selection SQLite cannot run, run ids the pack does not have, or a
/// selection of no runs; `Corrupt` when the pack contradicts itself.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// # let pack = fixture.path();
/// # let out = dataset_packer::pack::doc_support::temp_dir();
/// use dataset_packer::{ExportFormat, ExportOptions, Pack, export};
///
/// let options = ExportOptions::default()
///     .format(ExportFormat::Pack)
///     .select_sql("max_score > 3000");
/// let summary = export(pack, &out, &options)?;
/// assert_eq!(Pack::open(&out)?.num_runs(), summary.runs);
///
/// let rows = export(pack, out.join("run7.jsonl"), &ExportOptions::default().runs("7"))?.rows;
/// assert_eq!(rows, Pack::open(pack)?.run(7)?.len() as u64);
/// # std::fs::remove_dir_all(&out)?;
/// # Ok(()) }
/// ```
pub fn export(
    pack: impl AsRef<Path>,
    output: impl AsRef<Path>,
    options: &ExportOptions,
) -> Result<ExportSummary> {
    let (pack, output) = (pack.as_ref(), output.as_ref());
    let format = options.format_for(output)?;
    options.check(format, output)?;
    let target = output_target(format, output, options.overwrite)?;
    target.refuse_input(pack)?;
    let output = target.dir();
    let runs = match &options.runs {
        Some(text) => Some(
            select::parse_run_list(text)
                .map_err(|e| err!(InvalidInput, "run ids {text:?}: {e}").with_option("runs"))?,
        ),
        None => None,
    };
    // A selection of a remote pack fetches only the blocks holding its rows.
    let selects = runs.is_some() || options.sql.is_some();
    let source = SourcePack::open(pack, &options.version, selects)?;
    let mut summary = source.name_errors(export_from(&source, runs, output, format, options))?;
    drop(source);
    summary.uploaded = target.publish()?;
    Ok(summary)
}

/// [`export`] of the opened `source`.
fn export_from(
    source: &SourcePack,
    runs: Option<Vec<std::ops::RangeInclusive<u32>>>,
    output: &Path,
    format: ExportFormat,
    options: &ExportOptions,
) -> Result<ExportSummary> {
    let pack = source.dir.as_path();
    if format == ExportFormat::Jsonl && source.shuffled {
        let from = source.session_value("source_pack")?;
        fail!(
            Refused,
            "{} is shuffled: its runs' rows are scattered, not in step order, so they cannot be written as raw logs; export them from the unshuffled pack{}",
            pack.display(),
            from.map_or(String::new(), |p| format!(" it was made from ({p})"))
        );
    }
    let companions = source.carried_companions(&options.drop_companions)?;
    // The raw format has a place for the search statistics (each row's `search` object), and
    // for no other family.
    let search = companions.iter().copied().find(|f| f.holds_search_stats());
    let others: Vec<&str> = companions
        .iter()
        .filter(|f| search.is_none_or(|s| s.name != f.name))
        .map(|f| f.name.as_str())
        .collect();
    if format == ExportFormat::Jsonl && !others.is_empty() {
        return Err(err!(
            Refused,
            "{} has companion arrays ({}) and the JSONL format has no place for them; leave them out to export the rows without them",
            pack.display(),
            others.join(", ")
        )
        .with_option("drop_companion"));
    }
    let filter = options.filter();
    let selection = select::select(source, runs.as_deref(), filter.as_ref())?;
    let selection_text = select::describe(options.runs.as_deref(), filter.as_ref());
    select::require_some(source, &selection, &selection_text)?;
    if !source.located.is_remote() {
        refuse_replacing_source(pack, output)?;
    }
    let workers = options.workers;
    source.verify(&selection, &companions, workers)?;

    let mut legacy_ev_legal_changed = None;
    let (runs, rows, files) = match format {
        ExportFormat::Jsonl => {
            let write = if jsonl::single_file_kind(output).is_some() {
                jsonl::write_file
            } else {
                jsonl::write_dir
            };
            let w = write(
                source,
                &selection,
                search,
                output,
                options.overwrite,
                workers,
                &options.progress,
            )?;
            (w.runs, w.rows, w.files)
        }
        ExportFormat::Parquet => {
            let opts = parquet::ParquetOptions {
                overwrite: options.overwrite,
                progress: options.progress.clone(),
                workers,
                file_rows: options.shard_rows,
                companions: &companions,
                run_columns: options.run_columns,
            };
            let w = parquet::write(source, &selection, output, &opts)?;
            (w.runs, w.rows, w.files)
        }
        ExportFormat::Pack => {
            let opts = pack::PackOptions {
                shard_rows: options.shard_rows.or(source.shard_rows()),
                overwrite: options.overwrite,
                progress: options.progress.clone(),
                selection_text: &selection_text,
                command_line: &options.command_line,
                workers,
                companions: &companions,
            };
            let w = pack::write(source, &selection, output, &opts)?;
            legacy_ev_legal_changed = w.upgraded;
            (w.runs, w.rows, w.shards)
        }
    };
    Ok(ExportSummary {
        format,
        runs,
        rows,
        files,
        selection: selection_text,
        legacy_ev_legal_changed,
        // Set by `export` once the output is published.
        uploaded: None,
    })
}

/// Where the export goes: a pack may go to a URL in object storage (staged locally, then
/// published); JSONL and Parquet are written to local files and folders only.
fn output_target(format: ExportFormat, output: &Path, overwrite: bool) -> Result<Target> {
    if format != ExportFormat::Pack
        && let Some(url) = remote_output::output_url(output)?
    {
        return Err(err!(
            Refused,
            "{url}: only the pack format is published to object storage; write the {} \
             export to a local file or folder and upload that with your storage's tools",
            if format == ExportFormat::Jsonl {
                "JSONL"
            } else {
                "Parquet"
            }
        )
        .with_option("format"));
    }
    Target::of(output, overwrite, None)
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
        fail!(
            Refused,
            "the output {} {} the source pack {}; choose another output",
            output.display(),
            if src == out { "is" } else { "holds" },
            pack.display()
        );
    }
    Ok(())
}

/// Source rows read per piece (≈ 3 MiB of 48-byte rows): the unit of parallel work.
pub const PIECE_ROWS: u64 = 65_536;

/// An opened source pack.
pub struct SourcePack {
    /// The pack as the user named it (a folder, or a URL): for messages and records.
    pub dir: PathBuf,
    /// Where its files are read from (for a remote pack, its view in the cache, kept alive).
    located: crate::pack::open::Located,
    pub shards: Vec<Shard>,
    /// Global row of each shard's first row, then the total row count.
    shard_starts: Vec<u64>,
    /// The `runs` table, by id.
    pub runs: Vec<RunRow>,
    pub details: HashMap<i64, RunDetails>,
    pub valuations: ValuationTable,
    /// Global row where each run's rows start in an unshuffled pack (prefix sums of
    /// `runs.steps`), then the end.
    run_first_row: Vec<u64>,
    /// Rows are not grouped by run (a shuffled pack): runs cannot be read as row ranges.
    pub shuffled: bool,
    /// Its companion arrays.
    pub companions: Scan,
    /// Its `pack_id` (None: made before versions) and the version read.
    pub identity: (Option<String>, u32),
    /// Whether the version read is the pack's latest.
    pub latest: bool,
    /// Its `metadata.db` as the version read sees it (locked: the worker threads that read
    /// the pack share the source, and a connection serves one thread at a time).
    conn: Mutex<Connection>,
}

impl SourcePack {
    /// Opens a pack for reading (spec or legacy packed shards); fails on structural problems.
    /// A remote pack is read lazily (block by block, [`crate::pack::open::locate_lazy`]) when
    /// `selective`: a few runs of it.
    pub fn open(pack: &Path, version: &VersionSpec, selective: bool) -> Result<SourcePack> {
        let located = if selective {
            crate::pack::open::locate_lazy(pack)?
        } else {
            crate::pack::open::locate(pack)?
        };
        located.name_errors(SourcePack::open_located(located.clone(), version))
    }

    fn open_located(
        located: crate::pack::open::Located,
        version: &VersionSpec,
    ) -> Result<SourcePack> {
        let dir = located.dir();
        let opened = crate::pack::open::open(dir, version, true)?;
        let companions = opened.families();
        let valuations = opened.valuations()?;
        let crate::pack::open::Opened {
            conn, shards, view, ..
        } = opened;
        let shard_starts = shards::shard_starts(&shards);
        let runs = metadata::read_runs(&conn)?;
        if let Some(bad) = runs.iter().find(|r| u32::try_from(r.id).is_err()) {
            fail!(
                Corrupt,
                "{}: runs.id {} is not a valid run id",
                dir.display(),
                bad.id
            );
        }
        let mut run_first_row = vec![0u64];
        for r in &runs {
            run_first_row.push(run_first_row.last().unwrap() + r.steps.max(0) as u64);
        }
        Ok(SourcePack {
            dir: located.given().to_path_buf(),
            shard_starts,
            run_first_row,
            details: metadata::read_run_details(&conn)?,
            valuations,
            shuffled: metadata::session_value(&conn, "shuffled")?.as_deref() == Some("true"),
            companions,
            identity: (view.history.pack_id.clone(), view.version().version),
            latest: view.is_latest(),
            shards,
            runs,
            conn: Mutex::new(conn),
            located,
        })
    }

    /// `result`, its error naming the pack as the user did (not a remote pack's view).
    pub fn name_errors<T>(&self, result: Result<T>) -> Result<T> {
        self.located.name_errors(result)
    }

    /// The companion families an export carries: every one that lines up, except `dropped`;
    /// one that does not line up is an error naming it, unless dropped.
    pub fn carried_companions(&self, dropped: &[String]) -> Result<Vec<&Family>> {
        for (name, detached) in &self.companions.gone {
            if !dropped.contains(name) {
                return Err(crate::error::err!(
                    InvalidInput,
                    "{}: the version read has the companion {name}, which version {detached} detached: its rows of that version are gone (leave it out to export the version without it)",
                    self.dir.display()
                )
                .with_option("drop_companion"));
            }
        }
        for (name, problem) in &self.companions.problems {
            if !dropped.contains(name) {
                return Err(crate::error::err!(
                    Corrupt,
                    "{}: companion {name} does not line up with the shards: {problem} (leave it out to export without it)",
                    self.dir.display()
                )
                .with_option("drop_companion"));
            }
        }
        Ok(self
            .companions
            .families
            .iter()
            .filter(|f| !dropped.contains(&f.name))
            .collect())
    }

    /// Checks every shard the export of `selection` reads (whole, against the CRC-32C the pack
    /// records), and the files of the companion families it carries: a damaged pack never
    /// leaves the tool as a clean-looking export.
    pub fn verify(
        &self,
        selection: &Selection,
        families: &[&Family],
        workers: usize,
    ) -> Result<()> {
        let mut touched: Vec<usize> = self.plan(selection).iter().map(|p| p.shard).collect();
        touched.dedup();
        let conn = self.db();
        shards::verify_shards(self.located.dir(), &conn, &self.shards, &touched, workers)?;
        let recorded = metadata::read_companions(&conn)?;
        for family in families {
            families::verify_family(self.located.dir(), family, &recorded, &touched, workers)?;
        }
        Ok(())
    }

    /// The pack's shard size (`session.shard_rows`), None for a single `steps.npy`.
    pub fn shard_rows(&self) -> Option<u64> {
        self.session_value("shard_rows")
            .ok()
            .flatten()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
    }

    /// Whether any shard is in the legacy packed 46-byte layout (a pack of the reference
    /// packer, or of an older version of this tool).
    pub fn legacy(&self) -> bool {
        self.shards.iter().any(Shard::is_legacy)
    }

    /// A `session` value of the pack.
    pub fn session_value(&self, key: &str) -> Result<Option<String>> {
        metadata::session_value(&self.db(), key)
    }

    /// The pack's `metadata.db`, read-only, as the version read sees it.
    pub fn db(&self) -> MutexGuard<'_, Connection> {
        // A panic while it was held leaves nothing half-done in a read-only connection.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn total_rows(&self) -> u64 {
        *self.shard_starts.last().unwrap()
    }

    /// The pack's path as recorded in the metadata of what is exported from it.
    pub fn canonical_path(&self) -> String {
        if self.located.is_remote() {
            return self.dir.display().to_string();
        }
        std::fs::canonicalize(&self.dir)
            .unwrap_or_else(|_| self.dir.clone())
            .display()
            .to_string()
    }

    /// The source rows to read for `selection`, as pieces of at most [`PIECE_ROWS`] rows. In an
    /// unshuffled pack runs are contiguous and in id order, so only the selected runs' rows are
    /// read (located from the `runs.steps` counts); a shuffled pack is scanned whole.
    pub fn plan(&self, selection: &Selection) -> Vec<Piece> {
        if self.shuffled {
            return self.pieces_of(std::iter::once(0..self.total_rows()));
        }
        let mut ranges: Vec<std::ops::Range<u64>> = Vec::new();
        for &slot in &selection.slots {
            let r = self.run_range(slot);
            match ranges.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                _ if r.is_empty() => {}
                _ => ranges.push(r),
            }
        }
        self.pieces_of(ranges)
    }

    /// The pieces holding one run's rows (unshuffled packs only).
    pub fn run_pieces(&self, slot: usize) -> Vec<Piece> {
        debug_assert!(!self.shuffled);
        self.pieces_of(std::iter::once(self.run_range(slot)))
    }

    /// Global rows of the run at `slot` in an unshuffled pack, as `runs.steps` places them.
    pub fn run_range(&self, slot: usize) -> std::ops::Range<u64> {
        self.run_first_row[slot]..self.run_first_row[slot + 1]
    }

    /// Splits global row ranges at shard boundaries and into pieces of at most PIECE_ROWS.
    fn pieces_of(&self, ranges: impl IntoIterator<Item = std::ops::Range<u64>>) -> Vec<Piece> {
        let mut out = Vec::new();
        for r in ranges {
            shards::pieces_of(&self.shard_starts, r, PIECE_ROWS, &mut out);
        }
        out
    }

    /// The rows of one piece in the 48-byte layout.
    pub fn read(&self, piece: &Piece) -> Result<AlignedRows> {
        self.shards[piece.shard].read_aligned(piece.start, piece.count)
    }

    /// Where a piece is, for error messages.
    pub fn describe(&self, piece: &Piece, row_in_piece: usize) -> String {
        format!(
            "{} row {}",
            self.shards[piece.shard].name,
            piece.start + row_in_piece as u64
        )
    }
}

pub use shards::Piece;

/// The runs an export takes, in source id order; each gets an output position 0, 1, ….
pub struct Selection {
    /// Slots (indices into `SourcePack::runs`) of the selected runs, ascending.
    pub slots: Vec<usize>,
    /// Source run id → slot, over every run of the pack.
    slot_of: RunSlots,
    /// Slot → output position, or u32::MAX when not selected.
    position: Vec<u32>,
}

impl Selection {
    /// Selects the runs at `slots` (ascending) of `source`.
    pub fn new(source: &SourcePack, slots: Vec<usize>) -> Selection {
        let ids: Vec<u32> = source.runs.iter().map(|r| r.id as u32).collect();
        let mut position = vec![u32::MAX; ids.len()];
        for (pos, &slot) in slots.iter().enumerate() {
            position[slot] = pos as u32;
        }
        Selection {
            slots,
            slot_of: RunSlots::new(&ids),
            position,
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The output position of source run `run_id`: None when the run is not selected, an
    /// error when the pack has no such run.
    #[inline]
    pub fn position(&self, run_id: u32) -> Result<Option<u32>> {
        let slot = self
            .slot_of
            .get(run_id)
            .with_context(|| format!("a row belongs to run {run_id}, which is not in the runs table (the pack is inconsistent; run `dataset-packer validate`)"))?;
        let pos = self.position[slot as usize];
        Ok((pos != u32::MAX).then_some(pos))
    }

    /// Calls `f(index, position, row)` for every row of `rows` whose run is selected: the row's
    /// index in `rows` (to find its companion rows) and its run's position in the selection.
    pub fn for_each_row_at(
        &self,
        rows: &[u8],
        mut f: impl FnMut(usize, u32, &[u8]) -> Result<()>,
    ) -> Result<()> {
        for (at, row) in rows.chunks_exact(ROW_BYTES).enumerate() {
            let id =
                u32::from_le_bytes(row[offset::RUN_ID..offset::RUN_ID + 4].try_into().unwrap());
            if let Some(pos) = self.position(id)? {
                f(at, pos, row)?;
            }
        }
        Ok(())
    }
}

/// Rows met per output position, checked against `runs.steps` at the end: a pack whose
/// shards disagree with its runs table is reported rather than exported short.
pub struct RowCounts(Vec<u64>);

impl RowCounts {
    pub fn new(selection: &Selection) -> RowCounts {
        RowCounts(vec![0; selection.len()])
    }

    /// Adds a piece's run-length tally of (position, rows).
    pub fn add(&mut self, tally: &[(u32, u64)]) {
        for &(pos, n) in tally {
            self.0[pos as usize] += n;
        }
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    pub fn of(&self, pos: u32) -> u64 {
        self.0[pos as usize]
    }

    /// Fails when a run's row count differs from its `runs.steps`.
    pub fn verify(&self, source: &SourcePack, selection: &Selection) -> Result<()> {
        for (pos, &slot) in selection.slots.iter().enumerate() {
            let run = &source.runs[slot];
            if self.0[pos] != run.steps.max(0) as u64 {
                fail!(
                    Corrupt,
                    "{}: run {} has {} rows in the shards but runs.steps says {} (the pack is inconsistent; run `dataset-packer validate`)",
                    source.dir.display(),
                    run.id,
                    self.0[pos],
                    run.steps
                );
            }
        }
        Ok(())
    }
}

/// Counts one more row of output position `pos` in a run-length tally.
#[inline]
pub fn tally(runs: &mut Vec<(u32, u64)>, pos: u32) {
    match runs.last_mut() {
        Some((p, n)) if *p == pos => *n += 1,
        _ => runs.push((pos, 1)),
    }
}
