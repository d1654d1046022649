//! The `report` page: [`report`] writes the figures of [`crate::stats()`] for one or more packs
//! as one self-contained HTML file, as `dataset-packer report` does. Each figure is a section with a title, an inline SVG chart with
//! labelled axes (packs overlaid, told apart by colour and a legend) and, in a `<details>`, the
//! numbers behind it as a table: the same numbers `stats --json` prints, written so that they
//! parse back to the same values. Nothing on the page loads anything from anywhere.

pub mod chart;

use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use crate::error::{Context, Result, fail};
use crate::export::output::StagedFile;
use crate::format::board::MOVE_NAMES;
use crate::pack::versions::VersionSpec;
use crate::progress::thousands;
use crate::stats::{LANDMARK_TILES, Stats, StatsOptions};
use crate::{Param, SqlLimits};
use chart::{Axes, Series, escape};

/// What [`report`] describes and how; `ReportOptions::default()` does what `dataset-packer
/// report PACK… --output FILE` does: every run of each pack's latest version, all cores, an
/// existing file refused.
///
/// ```
/// use dataset_packer::ReportOptions;
/// let options = ReportOptions::default().select_sql("max_score > 600000").overwrite(true);
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct ReportOptions {
    stats: StatsOptions,
    overwrite: bool,
    command_line: String,
}

impl Default for ReportOptions {
    fn default() -> ReportOptions {
        ReportOptions {
            stats: StatsOptions::default(),
            overwrite: false,
            command_line: crate::pack::query::process_command_line(),
        }
    }
}

impl ReportOptions {
    /// Describe every pack as `version` of it was (`--version`); by default their latest.
    pub fn version(mut self, version: VersionSpec) -> ReportOptions {
        self.stats = self.stats.version(version);
        self
    }

    /// Describe only the runs `sql` selects in each pack (`--where`, see
    /// [`StatsOptions::select_sql`]).
    pub fn select_sql(mut self, sql: &str) -> ReportOptions {
        self.stats = self.stats.select_sql(sql);
        self
    }

    /// A value for the next parameter of the SQL (`--param`, repeatable).
    pub fn param(mut self, param: Param) -> ReportOptions {
        self.stats = self.stats.param(param);
        self
    }

    /// The values of the SQL's parameters (`--param …`), replacing any given before.
    pub fn params(mut self, params: Vec<Param>) -> ReportOptions {
        self.stats = self.stats.params(params);
        self
    }

    /// How long and how much memory the SQL selection may take (`--sql-timeout`,
    /// `--sql-memory`).
    pub fn sql_limits(mut self, limits: SqlLimits) -> ReportOptions {
        self.stats = self.stats.sql_limits(limits);
        self
    }

    /// Threads for the row pass (`--workers`); by default all cores.
    pub fn workers(mut self, workers: usize) -> ReportOptions {
        self.stats = self.stats.workers(workers);
        self
    }

    /// Replace the output file if it exists (`--overwrite`).
    pub fn overwrite(mut self, yes: bool) -> ReportOptions {
        self.overwrite = yes;
        self
    }

    /// The command line the page says made it; by default this process's arguments, quoted
    /// for a shell.
    pub fn command_line(mut self, command_line: String) -> ReportOptions {
        self.command_line = command_line;
        self
    }
}

/// What [`report`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReportSummary {
    /// Packs described.
    pub packs: usize,
    /// Rows described, over all the packs.
    pub rows: u64,
    /// Bytes of the page.
    pub bytes: u64,
}

/// Writes one self-contained HTML page of charts describing `packs` to `output` (atomically:
/// a temporary file renamed over it), as `dataset-packer report` does. Two or more packs are
/// drawn on the same charts, their by-step charts in shared buckets. The packs are only read.
///
/// Errors: `NotAPack` when one is not a pack; `Refused` when `output` exists (without
/// [`ReportOptions::overwrite`]) or is one of the packs; `InvalidInput` for a selection
/// SQLite cannot run or one of no runs.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// # let pack = fixture.path().to_path_buf();
/// # let dir = dataset_packer::pack::doc_support::temp_dir();
/// use dataset_packer::{ReportOptions, report};
///
/// let page = dir.join("report.html");
/// let summary = report(&[pack], &page, &ReportOptions::default())?;
/// assert_eq!((summary.packs, summary.rows), (1, 2240));
/// assert!(std::fs::read_to_string(&page)?.starts_with("<!DOCTYPE html>"));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
pub fn report(
    packs: &[PathBuf],
    output: impl AsRef<Path>,
    options: &ReportOptions,
) -> Result<ReportSummary> {
    let output = output.as_ref();
    if packs.iter().any(|p| same_file(p, output)) {
        return Err(crate::error::err!(
            Refused,
            "the output {} is one of the packs",
            output.display()
        )
        .with_option("output"));
    }
    if packs.is_empty() {
        fail!(Refused, "a report needs at least one pack");
    }
    let (staged, file) = StagedFile::create(output, options.overwrite)?;
    let names = legend_names(packs);
    // Each pack located once (a remote one fetched into the cache once, kept while read; one
    // larger than the cache streamed through block by block).
    let located = packs
        .iter()
        .map(|dir| {
            crate::pack::open::locate_streamed(dir)
                .with_context(|| format!("reading {}", dir.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    // One step width for every pack, so that their by-step charts share buckets.
    let mut longest = 0;
    for pack in &located {
        let steps = pack
            .name_errors(crate::stats::longest_run(pack, &options.stats))
            .with_context(|| format!("reading {}", pack.given().display()))?;
        longest = longest.max(steps);
    }
    let mut figures = Vec::new();
    for (colour, (pack, name)) in located.iter().zip(names).enumerate() {
        let stats = pack
            .name_errors(crate::stats::gather(pack, &options.stats, Some(longest)))
            .with_context(|| format!("reading {}", pack.given().display()))?;
        figures.push(PackFigures {
            name,
            colour,
            stats,
        });
    }
    let html = page(
        &figures,
        &options.command_line,
        &crate::format::metadata::utc_now(),
    );
    let mut out = std::io::BufWriter::new(file);
    std::io::Write::write_all(&mut out, html.as_bytes())
        .with_context(|| format!("writing {}", output.display()))?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    staged.publish(file)?;
    Ok(ReportSummary {
        packs: figures.len(),
        rows: figures.iter().map(|p| p.stats.rows).sum(),
        bytes: html.len() as u64,
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The last segment of a pack's URL (`s3://b/team/clean` → `clean`), as a folder's name.
fn remote_name(p: &Path) -> Option<String> {
    match crate::store::Location::parse(p.to_str()?).ok()? {
        crate::store::Location::Remote(url) if !url.file_name().is_empty() => {
            Some(url.file_name().to_string())
        }
        _ => None,
    }
}

/// Each pack's name in legends: its folder name, or its path as given when two folders share
/// a name.
fn legend_names(packs: &[PathBuf]) -> Vec<String> {
    let short = |p: &PathBuf| {
        p.canonicalize()
            .ok()
            .and_then(|c| c.file_name().map(|n| n.to_string_lossy().into_owned()))
            .or_else(|| remote_name(p))
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

/// One pack on the page: its name in legends and tables, its colour in every chart (an index
/// into [`chart::PALETTE`]), and its figures.
pub struct PackFigures {
    pub name: String,
    pub colour: usize,
    pub stats: Stats,
}

/// A table cell: the value as written (numbers exactly as they parse back).
enum Cell {
    Text(String),
    Int(i128),
    Real(f64),
}

impl From<&str> for Cell {
    fn from(v: &str) -> Cell {
        Cell::Text(v.to_string())
    }
}
impl From<String> for Cell {
    fn from(v: String) -> Cell {
        Cell::Text(v)
    }
}
impl From<u64> for Cell {
    fn from(v: u64) -> Cell {
        Cell::Int(v.into())
    }
}
impl From<i64> for Cell {
    fn from(v: i64) -> Cell {
        Cell::Int(v.into())
    }
}
impl From<f64> for Cell {
    fn from(v: f64) -> Cell {
        Cell::Real(v)
    }
}
impl<T: Into<Cell>> From<Option<T>> for Cell {
    fn from(v: Option<T>) -> Cell {
        v.map_or(Cell::Text(String::new()), Into::into)
    }
}

/// The numbers behind a figure.
struct Table {
    id: &'static str,
    head: Vec<&'static str>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    fn new(id: &'static str, head: &[&'static str]) -> Table {
        Table {
            id,
            head: head.to_vec(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }

    fn html(&self) -> String {
        let mut out = format!(r#"<table data-figure="{}"><thead><tr>"#, self.id);
        for h in &self.head {
            let _ = write!(out, "<th>{}</th>", escape(h));
        }
        out.push_str("</tr></thead><tbody>");
        for row in &self.rows {
            out.push_str("<tr>");
            for cell in row {
                match cell {
                    Cell::Text(t) => {
                        let _ = write!(out, "<td>{}</td>", escape(t));
                    }
                    Cell::Int(v) => {
                        let _ = write!(out, r#"<td class="n">{v}</td>"#);
                    }
                    Cell::Real(v) => {
                        let _ = write!(out, r#"<td class="n">{v}</td>"#);
                    }
                }
            }
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table>");
        out
    }
}

/// One figure of the page: title, what to read in it, its charts (or a sentence saying why
/// there is none) and its numbers.
struct Figure {
    id: &'static str,
    title: String,
    note: String,
    charts: Vec<String>,
    tables: Vec<Table>,
}

impl Figure {
    fn html(&self) -> String {
        let mut out = format!(
            r#"<section class="figure" id="{}"><h2>{}</h2>"#,
            self.id,
            escape(&self.title)
        );
        if !self.note.is_empty() {
            let _ = write!(out, r#"<p class="note">{}</p>"#, note_html(&self.note));
        }
        for c in &self.charts {
            out.push_str(c);
        }
        // A figure without a chart is its table: show it.
        out.push_str(if self.charts.is_empty() {
            "<details open><summary>The numbers</summary>"
        } else {
            "<details><summary>The numbers</summary>"
        });
        for t in &self.tables {
            out.push_str(&t.html());
        }
        out.push_str("</details></section>\n");
        out
    }
}

/// A figure's note as HTML: escaped, with each `code` span (between backticks, as the notes
/// are written) set as `<code>`.
fn note_html(note: &str) -> String {
    let mut out = String::new();
    for (i, part) in note.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", escape(part));
        } else {
            out.push_str(&escape(part));
        }
    }
    out
}

const STYLE: &str = "
body { font-family: system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif;
       margin: 2em auto; max-width: 1000px; color: #222; background: #fff; padding: 0 1em; }
h1 { font-size: 1.6em; } h3 { font-size: 1em; margin: 1em 0 0.2em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
.note { color: #555; font-size: 0.9em; }
svg.chart { display: block; max-width: 100%; height: auto; }
svg .axis { stroke: #333; stroke-width: 1; } svg .grid { stroke: #e5e5e5; stroke-width: 1; }
svg .tick { stroke: #333; } svg text { font-size: 12px; fill: #333; }
svg .axis-label { font-size: 13px; font-weight: 600; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ddd; padding: 2px 8px; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
summary { cursor: pointer; color: #0072B2; }
dl.packs dt { font-weight: 600; } dl.packs dd { margin: 0 0 0.6em 1.5em; }
pre { white-space: pre-wrap; word-break: break-all; background: #f6f6f6; padding: 0.4em; }
";

/// The page for `packs`; `command` is the report's own command line, `utc` when it ran.
pub fn page(packs: &[PackFigures], command: &str, utc: &str) -> String {
    let names: Vec<&str> = packs.iter().map(|p| p.name.as_str()).collect();
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>dataset-packer report: {}</title><style>{STYLE}</style></head><body>\n",
        escape(&names.join(", "))
    );
    let _ = writeln!(
        out,
        "<h1>dataset-packer report: {}</h1><p class=\"note\">Made {} by <code>{}</code>. \
         Every count on this page is exact: every row of every pack was read. The EV histograms \
         place each value by a bucket of its top 16 bits, so their bin edges are good to 1% of \
         the value; their totals are exact.</p>",
        escape(&names.join(" vs ")),
        escape(utc),
        escape(command)
    );
    out.push_str(&overview(packs));
    let figures = [
        run_lengths(packs),
        scores_by_depth(packs),
        highest_tiles(packs),
        valuation_mix(packs),
        moves(packs),
        ev_distributions(packs),
        board_eval(packs),
        search_effort(packs),
        findings(packs),
        provenance(packs),
    ];
    for f in &figures {
        out.push_str(&f.html());
    }
    out.push_str("</body></html>\n");
    out
}

fn overview(packs: &[PackFigures]) -> String {
    let mut out = String::from("<dl class=\"packs\">");
    for p in packs {
        let s = &p.stats;
        let _ = write!(
            out,
            "<dt>{}</dt><dd><code>{}</code>: {} runs, {} rows{}, {} shard{}",
            escape(&p.name),
            escape(&s.pack.display().to_string()),
            thousands(s.runs as u64),
            thousands(s.rows),
            if s.shuffled { " (shuffled)" } else { "" },
            s.shard_names.len(),
            if s.shard_names.len() == 1 { "" } else { "s" }
        );
        if let Some(sql) = &s.selection {
            let _ = write!(
                out,
                "; only the runs of <code>--where {}</code>{}",
                escape(sql),
                if s.params.is_empty() {
                    String::new()
                } else {
                    format!(" with parameters {}", escape(&s.params.join(", ")))
                }
            );
        }
        out.push_str("</dd>");
    }
    out.push_str("</dl>\n");
    out
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

fn run_lengths(packs: &[PackFigures]) -> Figure {
    let mut table = Table::new("run-length", &["pack", "from", "to", "runs"]);
    let mut series = Vec::new();
    for p in packs {
        let runs = p.stats.runs as u64;
        let mut points = Vec::new();
        for b in &p.stats.length_bins {
            table.row(vec![
                p.name.clone().into(),
                b.from.into(),
                b.to.into(),
                b.runs.into(),
            ]);
            points.push(((b.from + b.to) as f64 / 2.0, percent(b.runs, runs)));
        }
        series.push(Series {
            name: p.name.clone(),
            colour: p.colour,
            values: points,
        });
    }
    Figure {
        id: "run-length",
        title: "Run length".into(),
        note: "Runs by their number of steps (runs.steps), in equal-width bins; each point is the \
               middle of its bin."
            .into(),
        charts: vec![chart::lines(
            "Run length",
            &Axes {
                x: "run length (steps)",
                y: "share of the pack's runs (%)",
            },
            &series,
        )],
        tables: vec![table],
    }
}

fn depth_name(depth: Option<i64>) -> String {
    depth.map_or("depth not recorded".into(), |d| format!("depth {d}"))
}

fn scores_by_depth(packs: &[PackFigures]) -> Figure {
    let mut table = Table::new("score-by-depth", &["pack", "depth", "from", "to", "runs"]);
    let bins: BTreeSet<(i64, i64)> = packs
        .iter()
        .flat_map(|p| p.stats.depths.iter())
        .flat_map(|d| d.score_bins.iter().map(|b| (b.from, b.to)))
        .collect();
    let bins: Vec<(i64, i64)> = bins.into_iter().collect();
    let mut series = Vec::new();
    for p in packs {
        for d in &p.stats.depths {
            let mut values = vec![0.0; bins.len()];
            for b in &d.score_bins {
                table.row(vec![
                    p.name.clone().into(),
                    d.depth.into(),
                    b.from.into(),
                    b.to.into(),
                    b.runs.into(),
                ]);
                let at = bins.binary_search(&(b.from, b.to)).expect("listed");
                values[at] = percent(b.runs, d.runs);
            }
            series.push(Series {
                name: format!("{}, {}", p.name, depth_name(d.depth)),
                colour: series.len(),
                values,
            });
        }
    }
    let categories: Vec<String> = bins
        .iter()
        .map(|&(from, to)| {
            format!(
                "{}–{}",
                chart::tick_label(from as f64),
                chart::tick_label(to as f64 + 1.0)
            )
        })
        .collect();
    Figure {
        id: "score-by-depth",
        title: "Final score by search depth".into(),
        note: "Runs by final score (runs.max_score) in power-of-two bins, for each depth \
               (run_details.depth) of each pack, as a share of that depth's runs."
            .into(),
        charts: vec![chart::bars(
            "Final score by search depth",
            &Axes {
                x: "final score (points, power-of-two bins)",
                y: "share of the depth's runs (%)",
            },
            &categories,
            &series,
        )],
        tables: vec![table],
    }
}

fn highest_tiles(packs: &[PackFigures]) -> Figure {
    let mut table = Table::new("highest-tile", &["pack", "tile", "reached", "highest"]);
    let mut tiles = BTreeSet::new();
    for p in packs {
        for t in &p.stats.tiles {
            table.row(vec![
                p.name.clone().into(),
                t.tile.into(),
                t.reached.into(),
                t.highest.into(),
            ]);
            if t.tile >= LANDMARK_TILES.0 {
                tiles.insert(t.tile);
            }
        }
    }
    let tiles: Vec<i64> = tiles.into_iter().collect();
    let series = packs
        .iter()
        .map(|p| Series {
            name: p.name.clone(),
            colour: p.colour,
            values: tiles
                .iter()
                .map(|tile| {
                    let reached = p.stats.tiles.iter().find(|t| t.tile == *tile);
                    percent(reached.map_or(0, |t| t.reached), p.stats.runs as u64)
                })
                .collect(),
        })
        .collect::<Vec<_>>();
    Figure {
        id: "highest-tile",
        title: "Highest tile reached".into(),
        note: "The share of runs whose highest tile (runs.highest_tile) is at least each tile; \
               the table also counts the runs that ended with it as their highest."
            .into(),
        charts: vec![chart::bars(
            "Highest tile reached",
            &Axes {
                x: "tile",
                y: "runs that reached it (%)",
            },
            &tiles.iter().map(i64::to_string).collect::<Vec<_>>(),
            &series,
        )],
        tables: vec![table],
    }
}

fn valuation_mix(packs: &[PackFigures]) -> Figure {
    let mut table = Table::new("valuation-mix", &["pack", "from", "to", "type", "rows"]);
    let mut charts = Vec::new();
    // One colour per type name on every pack's chart.
    let mut type_colours: Vec<String> = Vec::new();
    for t in packs.iter().flat_map(|p| &p.stats.types) {
        if t.rows > 0 && !type_colours.contains(&t.name) {
            type_colours.push(t.name.clone());
        }
    }
    // The same buckets on every pack's chart (the packs were gathered with one step width): the
    // longest list of them, a shorter pack's missing buckets left empty.
    let categories: Vec<String> = packs
        .iter()
        .map(|p| &p.stats.step_buckets)
        .max_by_key(|b| b.len())
        .map(|b| b.iter().map(step_label).collect())
        .unwrap_or_default();
    for p in packs {
        let s = &p.stats;
        let used: Vec<usize> = (0..s.types.len())
            .filter(|&i| s.types[i].rows > 0)
            .collect();
        for b in &s.step_buckets {
            for &i in &used {
                if b.by_type[i] > 0 {
                    table.row(vec![
                        p.name.clone().into(),
                        b.from.into(),
                        b.to.into(),
                        s.types[i].name.clone().into(),
                        b.by_type[i].into(),
                    ]);
                }
            }
        }
        let parts: Vec<Series<f64>> = used
            .iter()
            .map(|&i| Series {
                name: s.types[i].name.clone(),
                colour: type_colours
                    .iter()
                    .position(|n| *n == s.types[i].name)
                    .expect("listed"),
                values: s
                    .step_buckets
                    .iter()
                    .map(|b| percent(b.by_type[i], b.rows) / 100.0)
                    .collect(),
            })
            .collect();
        let title = format!("Valuation type mix along the game: {}", p.name);
        charts.push(captioned(
            &title,
            chart::stacked(
                &title,
                &Axes {
                    x: "step of the game (step_index bucket)",
                    y: "share of the bucket's rows (%)",
                },
                &categories,
                &parts,
            ),
        ));
    }
    Figure {
        id: "valuation-mix",
        title: "Valuation type mix along the game".into(),
        note: "For each bucket of steps (step_index), the share of rows of each valuation type; \
               one chart per pack, all with the same buckets. The last bucket also holds every \
               later step."
            .into(),
        charts,
        tables: vec![table],
    }
}

/// A chart with its title above it, for figures with one chart per pack or per type.
fn captioned(title: &str, svg: String) -> String {
    format!("<h3>{}</h3>{svg}", escape(title))
}

fn step_label(b: &crate::stats::StepBucket) -> String {
    match b.to {
        Some(to) => format!("{}–{}", b.from, to),
        None => format!("{}+", b.from),
    }
}

fn moves(packs: &[PackFigures]) -> Figure {
    let mut table = Table::new("moves", &["pack", "move", "rows"]);
    let names: Vec<&str> = MOVE_NAMES.iter().copied().chain(["invalid"]).collect();
    let show_invalid = packs.iter().any(|p| p.stats.moves[4] > 0);
    let shown = if show_invalid { 5 } else { 4 };
    let mut series = Vec::new();
    for p in packs {
        for (name, n) in names.iter().zip(p.stats.moves) {
            table.row(vec![p.name.clone().into(), (*name).into(), n.into()]);
        }
        series.push(Series {
            name: p.name.clone(),
            colour: p.colour,
            values: p.stats.moves[..shown]
                .iter()
                .map(|&n| percent(n, p.stats.rows))
                .collect(),
        });
    }
    Figure {
        id: "moves",
        title: "Moves played".into(),
        note: "Rows by the move played (move_dir), as a share of the pack's rows.".into(),
        charts: vec![chart::bars(
            "Moves played",
            &Axes {
                x: "move",
                y: "share of rows (%)",
            },
            &names[..shown]
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>(),
            &series,
        )],
        tables: vec![table],
    }
}

fn ev_distributions(packs: &[PackFigures]) -> Figure {
    let mut spread = Table::new(
        "ev-spread",
        &[
            "pack", "type", "evs", "min", "p25", "median", "mean", "p75", "max",
        ],
    );
    let mut bins = Table::new("ev-histogram", &["pack", "type", "from", "to", "evs"]);
    let mut types: Vec<String> = Vec::new();
    for p in packs {
        for ((name, n, sp), hist) in p.stats.evs.iter().zip(&p.stats.ev_bins) {
            if !types.contains(name) {
                types.push(name.clone());
            }
            let mut row: Vec<Cell> = vec![p.name.clone().into(), name.clone().into(), (*n).into()];
            row.extend(sp.values().iter().map(|&v| Cell::from(v)));
            spread.row(row);
            for b in hist {
                bins.row(vec![
                    p.name.clone().into(),
                    name.clone().into(),
                    b.from.into(),
                    b.to.into(),
                    b.evs.into(),
                ]);
            }
        }
    }
    let charts = types
        .iter()
        .map(|ty| {
            let series: Vec<Series<(f64, f64)>> = packs
                .iter()
                .filter_map(|p| {
                    let at = p.stats.evs.iter().position(|(n, _, _)| n == ty)?;
                    let total = p.stats.evs[at].1;
                    let values = p.stats.ev_bins[at]
                        .iter()
                        .map(|b| ((b.from + b.to) / 2.0, percent(b.evs, total)))
                        .collect();
                    Some(Series {
                        name: p.name.clone(),
                        colour: p.colour,
                        values,
                    })
                })
                .collect();
            let title = format!("EVs of legal moves: {ty}");
            captioned(
                &title,
                chart::lines(
                    &title,
                    &Axes {
                        x: &format!("EV of a legal move ({ty} valuation)"),
                        y: "share of the type's EVs (%)",
                    },
                    &series,
                ),
            )
        })
        .collect();
    Figure {
        id: "ev-distribution",
        title: "EV distribution per valuation type (legal moves only)".into(),
        note: "The EVs of the legal moves of each row (ev_legal), one chart per valuation type; \
               illegal moves' stored 0.0 is left out. Quartiles and histogram bin edges are \
               good to 1% of their value; counts, min, mean and max are exact."
            .into(),
        charts,
        tables: vec![spread, bins],
    }
}

fn board_eval(packs: &[PackFigures]) -> Figure {
    let mut table = Table::new(
        "board-eval",
        &["pack", "from", "to", "rows", "min", "mean", "max"],
    );
    let mut series = Vec::new();
    for p in packs {
        let mut points = Vec::new();
        for b in &p.stats.step_buckets {
            let (min, mean, max) = match b.board_eval {
                Some((min, mean, max)) => (Some(min), Some(mean), Some(max)),
                None => (None, None, None),
            };
            table.row(vec![
                p.name.clone().into(),
                b.from.into(),
                b.to.into(),
                b.rows.into(),
                min.into(),
                mean.into(),
                max.into(),
            ]);
            if let (Some(mean), Some(to)) = (mean, b.to) {
                points.push(((b.from + to) as f64 / 2.0, mean));
            } else if let Some(mean) = mean {
                points.push((b.from as f64, mean));
            }
        }
        series.push(Series {
            name: p.name.clone(),
            colour: p.colour,
            values: points,
        });
    }
    Figure {
        id: "board-eval",
        title: "board_eval along the game".into(),
        note: "The mean board_eval (the Macroxue line heuristic) of the rows of each step bucket; \
               the table has min and max too. The last bucket also holds every later step."
            .into(),
        charts: vec![chart::lines(
            "board_eval along the game",
            &Axes {
                x: "step of the game (step_index)",
                y: "mean board_eval (heuristic points)",
            },
            &series,
        )],
        tables: vec![table],
    }
}

fn search_effort(packs: &[PackFigures]) -> Figure {
    let mut table = Table::new(
        "search-effort",
        &["pack", "depth", "rows", "sum", "mean", "median", "max"],
    );
    let mut notes = Vec::new();
    let mut depths = BTreeSet::new();
    for p in packs {
        match &p.stats.search {
            None => notes.push(format!("{}: no search statistics in this pack.", p.name)),
            Some(e) => {
                if let Some(problem) = &e.problem {
                    notes.push(format!("{}: {problem}.", p.name));
                }
                for d in &e.depths {
                    depths.insert(d.depth);
                    table.row(vec![
                        p.name.clone().into(),
                        d.depth.into(),
                        d.rows.into(),
                        d.sum.into(),
                        (d.sum / d.rows.max(1) as f64).into(),
                        d.median().into(),
                        d.max.into(),
                    ]);
                }
            }
        }
    }
    let depths: Vec<Option<i64>> = depths.into_iter().collect();
    let series: Vec<Series<f64>> = packs
        .iter()
        .filter_map(|p| {
            let e = p.stats.search.as_ref().filter(|e| e.problem.is_none())?;
            let values = depths
                .iter()
                .map(|d| {
                    e.depths
                        .iter()
                        .find(|x| x.depth == *d)
                        .map_or(0.0, |x| x.median().unwrap_or(x.sum / x.rows.max(1) as f64))
                })
                .collect();
            Some(Series {
                name: p.name.clone(),
                colour: p.colour,
                values,
            })
        })
        .collect();
    let charts = if series.is_empty() {
        Vec::new()
    } else {
        vec![chart::bars(
            "Search effort per depth",
            &Axes {
                x: "search depth (run_details.depth)",
                y: "nodes searched per move",
            },
            &depths.iter().map(|d| depth_name(*d)).collect::<Vec<_>>(),
            &series,
        )]
    };
    let mut note = String::from(
        "Search effort for each depth: from the search statistics of `pack --search-stats`, \
         the median nodes searched per move (`total_nodes` of the rows whose search was used); \
         from a `search` companion of one number per row written by another tool, its mean.",
    );
    for n in notes {
        note.push(' ');
        note.push_str(&n);
    }
    Figure {
        id: "search-effort",
        title: "Search effort per depth".into(),
        note,
        charts,
        tables: vec![table],
    }
}

fn findings(packs: &[PackFigures]) -> Figure {
    let mut table = Table::new("findings", &["pack", "kind", "count"]);
    let mut kinds: Vec<String> = vec![crate::findings::DUPLICATE_RUN.into(), "skipped_runs".into()];
    let counts: Vec<Vec<(String, i64)>> = packs
        .iter()
        .map(|p| {
            let mut c: Vec<(String, i64)> = p.stats.findings.clone().unwrap_or_default();
            if !c.iter().any(|(k, _)| k == crate::findings::DUPLICATE_RUN) {
                c.push((crate::findings::DUPLICATE_RUN.into(), 0));
            }
            c.push((
                "skipped_runs".into(),
                p.stats.skipped_runs.unwrap_or(0) as i64,
            ));
            c
        })
        .collect();
    for c in &counts {
        for (k, _) in c {
            if !kinds.contains(k) {
                kinds.push(k.clone());
            }
        }
    }
    let mut series = Vec::new();
    for (p, c) in packs.iter().zip(&counts) {
        for (k, n) in c {
            table.row(vec![p.name.clone().into(), k.clone().into(), (*n).into()]);
        }
        series.push(Series {
            name: p.name.clone(),
            colour: p.colour,
            values: kinds
                .iter()
                .map(|k| {
                    c.iter()
                        .find(|(x, _)| x == k)
                        .map_or(0.0, |(_, n)| *n as f64)
                })
                .collect(),
        });
    }
    let unrecorded: Vec<&str> = packs
        .iter()
        .filter(|p| p.stats.findings.is_none())
        .map(|p| p.name.as_str())
        .collect();
    let mut note = String::from(
        "Data-quality findings recorded at pack time (finding_counts, for the whole pack even \
         under --where), duplicate runs (duplicate_run findings) and runs left out as invalid \
         input (skipped_runs).",
    );
    if !unrecorded.is_empty() {
        let _ = write!(
            note,
            " No finding_counts table in: {}.",
            unrecorded.join(", ")
        );
    }
    // Nothing to draw: say so, instead of an empty chart.
    let nothing = counts.iter().flatten().all(|(_, n)| *n == 0);
    let charts = if nothing {
        let _ = write!(
            note,
            " Nothing to show: {} no findings, no duplicate runs and no skipped runs.",
            if packs.len() == 1 {
                "the pack has"
            } else {
                "the packs have"
            }
        );
        Vec::new()
    } else {
        vec![chart::count_bars(
            "Findings, duplicates and skipped runs",
            &Axes {
                x: "kind",
                y: "count",
            },
            &kinds,
            &series,
        )]
    };
    Figure {
        id: "findings",
        title: "Findings, duplicates and skipped runs".into(),
        note,
        charts,
        tables: vec![table],
    }
}

fn provenance(packs: &[PackFigures]) -> Figure {
    let mut session = Table::new("session", &["pack", "key", "value"]);
    let mut commands = Table::new("commands", &["pack", "when", "command line"]);
    for p in packs {
        let value = |key: &str| {
            p.stats
                .session
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        for (k, v) in &p.stats.session {
            session.row(vec![
                p.name.clone().into(),
                k.clone().into(),
                v.clone().into(),
            ]);
        }
        if let Some(line) = value("command_line") {
            commands.row(vec![
                p.name.clone().into(),
                value("created_utc").into(),
                line.into(),
            ]);
        }
        let updates: Vec<serde_json::Value> = value("updates")
            .and_then(|u| serde_json::from_str(&u).ok())
            .unwrap_or_default();
        for u in updates {
            let text = |k: &str| u.get(k).and_then(|v| v.as_str()).map(str::to_string);
            let line = text("command_line").unwrap_or_else(|| u.to_string());
            commands.row(vec![p.name.clone().into(), text("utc").into(), line.into()]);
        }
    }
    Figure {
        id: "provenance",
        title: "Provenance".into(),
        note: "How each pack was made: its session facts (metadata.db), and the command lines \
               that made and updated it."
            .into(),
        charts: Vec::new(),
        tables: vec![commands, session],
    }
}
