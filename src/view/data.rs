//! What the viewer shows, as the JSON its API answers: the pack's facts, a page of runs (the
//! `--where` SQL and an order, cut by SQLite through `pack::query`), a window of one run's
//! steps with the score so far and every companion family's row, the run's timeline, and the
//! steps where a companion family's move differs from the teacher's. Everything is read per
//! request from the one open [`Pack`]: nothing is loaded at start, so the server's memory does
//! not grow with the pack.

use serde_json::{Map, Value, json};

use crate::error::{Error, ErrorKind, Result};
use crate::findings::RowFindings;
use crate::format::board;
use crate::format::dtype::{Dtype, parse_literal};
use crate::format::metadata::{self, RunLookup};
use crate::format::row::StepRow;
use crate::format::search::{self, SearchStats};
use crate::format::valuation::ValuationTable;
use crate::pack::query::{self, RunFilter, RunOrder};
use crate::show::{f32_json, move_name, step_json, valuation_name};
use crate::{CompanionValue, Pack, Param, SqlLimits};

/// Most runs one page of the runs table holds.
pub const MAX_RUNS_PAGE: u64 = 500;
/// Most steps one request for a run's rows gets.
pub const MAX_STEPS_PAGE: u64 = 5_000;
/// Vectors longer than this are summarised (shape, min, max, mean) instead of listed.
const LISTED_VALUES: usize = 8;

/// Why a request gets no answer: the HTTP status and what to tell the user.
#[derive(Debug)]
pub struct Problem {
    pub status: u16,
    pub message: String,
}

impl Problem {
    pub fn not_found(message: impl Into<String>) -> Problem {
        Problem {
            status: 404,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Problem {
        Problem {
            status: 400,
            message: message.into(),
        }
    }
}

impl From<Error> for Problem {
    fn from(e: Error) -> Problem {
        let status = match e.kind() {
            ErrorKind::InvalidInput
            | ErrorKind::Interrupted
            | ErrorKind::Unsupported
            | ErrorKind::Refused => 400,
            _ => 500,
        };
        Problem {
            status,
            message: e.to_string(),
        }
    }
}

/// What `GET /api/runs` asks for.
#[derive(Debug, Clone, Default)]
pub struct RunsQuery {
    pub sql: Option<String>,
    pub params: Vec<Param>,
    pub order: RunOrder,
    pub offset: u64,
    pub limit: u64,
}

/// How a companion family names a move (0 up … 3 right), if it does: a move field such as
/// the trainer's `argmax_head`, or the largest of four per-move values (`policy_p1`).
#[derive(Debug, Clone)]
enum Mover {
    /// An integer field holding the move; anything but 0–3 is no move.
    Field {
        name: String,
        offset: usize,
        size: usize,
    },
    /// Four numbers, one per move: the move is the largest (NaN is none).
    Argmax {
        name: String,
        offset: usize,
        kind: char,
        size: usize,
    },
}

/// A companion family as the viewer reads it.
#[derive(Debug, Clone)]
struct FamilyView {
    name: String,
    descr: String,
    shape: Vec<u64>,
    /// The item dtype, and the row as one value (items over `shape`).
    row_dtype: Dtype,
    mover: Option<Mover>,
    /// The pack's `search` statistics (`pack --search-stats`), shown under their log names.
    search_stats: bool,
}

/// The open pack, and what the viewer knows of its families.
pub struct Source {
    pack: Pack,
    names: ValuationTable,
    families: Vec<FamilyView>,
    limits: SqlLimits,
}

/// One run's rows, read whole from the pack, with where it starts.
struct RunRows {
    lookup: RunLookup,
    first_row: u64,
    rows: Vec<StepRow>,
}

impl Source {
    /// The viewer's reader of `pack`; `limits` bound every `where` filter.
    pub fn new(pack: Pack, limits: SqlLimits) -> Result<Source> {
        let mut names = ValuationTable::new();
        for name in pack.valuation_names() {
            names.intern(name)?;
        }
        let families = pack
            .companion_names()
            .iter()
            .map(|name| family_view(&pack, name))
            .collect::<Result<Vec<_>>>()?;
        Ok(Source {
            pack,
            names,
            families,
            limits,
        })
    }

    /// The pack as a sentence, for the line `view` prints.
    pub fn describe(&self) -> String {
        format!(
            "{} (version {}, {} rows in {} runs{})",
            self.pack.path().display(),
            self.pack.version(),
            crate::progress::thousands(self.pack.len()),
            crate::progress::thousands(self.pack.num_runs() as u64),
            match self.families.len() {
                0 => String::new(),
                n => format!(", {n} companion famil{}", if n == 1 { "y" } else { "ies" }),
            }
        )
    }

    /// `GET /api/pack`: what the page needs to know before it asks for runs.
    pub fn pack_json(&self) -> Result<Value, Problem> {
        let conn = self.pack.conn();
        let details = metadata::has_table(&conn, "run_details")?;
        let mut columns = metadata::column_names(&conn, "runs")?;
        if details {
            columns.extend(
                metadata::column_names(&conn, "run_details")?
                    .into_iter()
                    .filter(|c| c != "run_id"),
            );
        }
        drop(conn);
        let families: Vec<Value> = self
            .families
            .iter()
            .map(|f| {
                json!({
                    "name": f.name, "descr": f.descr, "shape": f.shape,
                    "move_field": f.mover.as_ref().map(Mover::field),
                    "search_stats": f.search_stats,
                })
            })
            .collect();
        Ok(json!({
            "path": self.pack.path().display().to_string(),
            "version": self.pack.version(),
            "rows": self.pack.len(),
            "runs": self.pack.num_runs(),
            "shuffled": self.pack.is_shuffled(),
            "valuation_types": self.names.names(),
            "companions": families,
            "columns": columns,
            "limits": {"runs": MAX_RUNS_PAGE, "steps": MAX_STEPS_PAGE},
        }))
    }

    /// `GET /api/runs`: one page of the runs a filter selects, in an order, each with what
    /// the table shows (its rows read for valuation types, findings and disagreements).
    pub fn runs_json(&self, q: &RunsQuery) -> Result<Value, Problem> {
        if q.limit == 0 || q.limit > MAX_RUNS_PAGE {
            return Err(Problem::bad_request(format!(
                "limit={} is out of range: a page holds 1 to {MAX_RUNS_PAGE} runs",
                q.limit
            )));
        }
        let filter = q.sql.as_ref().map(|sql| RunFilter {
            sql: sql.clone(),
            params: q.params.clone(),
            limits: self.limits,
        });
        let page = {
            let conn = self.pack.conn();
            query::runs_page(&conn, filter.as_ref(), &q.order, q.offset, q.limit)?
        };
        // Mapped once for the page, not once for each of its runs.
        let families = self.open_families()?;
        let runs = page
            .ids
            .iter()
            .map(|&id| self.run_summary(id, &families))
            .collect::<Result<Vec<_>, Problem>>()?;
        Ok(json!({
            "total": page.total,
            "offset": q.offset,
            "limit": q.limit,
            "order": format!("{}{}", if q.order.descending { "-" } else { "" }, q.order.column),
            "where": q.sql,
            "runs": runs,
        }))
    }

    /// One line of the runs table.
    fn run_summary(&self, id: i64, families: &[Opened<'_>]) -> Result<Value, Problem> {
        // A shuffled pack's rows of a run are scattered: only metadata.db's facts.
        let run = match self.pack.is_shuffled() {
            true => None,
            false => Some(self.read_run(id as u64)?),
        };
        let lookup = match &run {
            Some(run) => run.lookup.clone(),
            None => self.lookup(id as u64)?,
        };
        let d = lookup.details.clone().unwrap_or_default();
        let mut out = json!({
            "id": id, "depth": d.depth, "steps": lookup.run.steps,
            "score": lookup.run.max_score, "max_tile": lookup.run.highest_tile,
            "seconds": d.seconds, "game_index": d.game_index, "seed": lookup.run.seed,
        });
        let Some(run) = run else {
            return Ok(out);
        };
        let mut kinds = std::collections::BTreeMap::<String, u64>::new();
        let mut findings = RowFindings::new(1, true);
        for r in &run.rows {
            *kinds
                .entry(valuation_name(&self.names, r.valuation_type))
                .or_default() += 1;
            findings.observe(0, r);
        }
        findings.run_level(d.num_moves, lookup.run.steps);
        out["valuation_types"] = json!(kinds);
        out["findings"] = json!(findings.counts);
        out["disagreements"] = disagreement_counts(&run, families)?;
        Ok(out)
    }

    /// `GET /api/runs/<id>?from=&limit=`: the run's facts and `limit` of its steps from the
    /// first whose step_index is at least `from`, decoded, each with the score before its
    /// move, its search statistics and every companion family's row.
    pub fn run_json(&self, id: u64, from: Option<u64>, limit: u64) -> Result<Value, Problem> {
        if limit == 0 || limit > MAX_STEPS_PAGE {
            return Err(Problem::bad_request(format!(
                "limit={limit} is out of range: a request gets 1 to {MAX_STEPS_PAGE} steps"
            )));
        }
        let run = self.read_run(id)?;
        let start = match from {
            None => 0,
            Some(step) => run.position_at_or_after(step).ok_or_else(|| {
                Problem::not_found(format!(
                    "run {id} has no step ≥ {step} ({})",
                    run.step_range()
                ))
            })?,
        };
        let end = (start + limit as usize).min(run.rows.len());
        let scores = run.scores();
        let families = self.open_families()?;
        let mut steps = Vec::with_capacity(end - start);
        for (p, (r, score)) in run.rows[start..end]
            .iter()
            .zip(&scores[start..end])
            .enumerate()
        {
            let global = run.first_row + (start + p) as u64;
            let search = self.search_row(&families, global)?;
            let mut step = step_json(r, &self.names, search.as_ref());
            step["exponents"] = json!(board::unpack(r.board, r.tile_65536_mask));
            step["score"] = json!(score);
            step["row"] = json!(global);
            let mut companions = Map::new();
            for (f, c) in &families {
                if f.search_stats {
                    continue;
                }
                let bytes = c.row(global)?;
                let model = f.mover.as_ref().and_then(|m| m.read(bytes));
                companions.insert(
                    f.name.clone(),
                    json!({
                        "values": value_json(&f.row_dtype, bytes),
                        "move": model.map(move_name),
                        "differs": model.is_some_and(|m| r.move_dir < 4 && m != r.move_dir),
                    }),
                );
            }
            step["companions"] = Value::Object(companions);
            steps.push(step);
        }
        Ok(json!({
            "run": run_facts(&run.lookup, run.first_row),
            "from": run.rows.get(start).map(|r| r.step_index),
            "limit": limit,
            "next_from": run.rows.get(end).map(|r| r.step_index),
            "steps": steps,
        }))
    }

    /// `GET /api/runs/<id>/timeline`: one entry per step, for the scrubber, the score chart
    /// and the disagreement marks: step_index, move, score before it, valuation type id, and
    /// each mover family's move (null where it names none).
    pub fn timeline_json(&self, id: u64) -> Result<Value, Problem> {
        let run = self.read_run(id)?;
        let moves = family_moves(&run, &self.open_families()?)?;
        let families: Map<String, Value> = moves
            .iter()
            .map(|(name, m)| (name.clone(), json!(m)))
            .collect();
        Ok(json!({
            "run": run_facts(&run.lookup, run.first_row),
            "step_index": run.rows.iter().map(|r| r.step_index).collect::<Vec<_>>(),
            "move": run.rows.iter().map(|r| r.move_dir).collect::<Vec<_>>(),
            "valuation_type": run.rows.iter().map(|r| r.valuation_type).collect::<Vec<_>>(),
            "score": run.scores(),
            "families": families,
            "disagreements": disagreements(&run, &moves),
        }))
    }

    /// `GET /api/runs/<id>/disagreements`: for each family that names a move, the steps
    /// where it is not the teacher's (the move played), with both moves.
    pub fn disagreements_json(&self, id: u64) -> Result<Value, Problem> {
        let run = self.read_run(id)?;
        let moves = family_moves(&run, &self.open_families()?)?;
        let mut out = Map::new();
        for (name, m) in &moves {
            let list: Vec<Value> = run
                .rows
                .iter()
                .zip(m)
                .filter_map(|(r, &model)| {
                    let model = model?;
                    (r.move_dir < 4 && model != r.move_dir).then(|| {
                        json!({"step_index": r.step_index, "teacher": move_name(r.move_dir),
                               "model": move_name(model)})
                    })
                })
                .collect();
            let named = m.iter().filter(|x| x.is_some()).count();
            out.insert(
                name.clone(),
                json!({
                    "count": list.len(),
                    "steps_with_a_move": named,
                    "share": if named == 0 { 0.0 } else { list.len() as f64 / named as f64 },
                    "steps": list,
                }),
            );
        }
        Ok(json!({"run": id, "steps": run.rows.len(), "families": out}))
    }

    /// Whether run `id` exists and, when asked, has step `step` exactly (the page's 404).
    pub fn check_step(&self, id: u64, step: Option<u64>) -> Result<(), Problem> {
        let run = self.read_run(id)?;
        match step {
            Some(k) if !run.rows.iter().any(|r| u64::from(r.step_index) == k) => Err(
                Problem::not_found(format!("run {id} has no step {k} ({})", run.step_range())),
            ),
            _ => Ok(()),
        }
    }

    /// Run `id`'s rows, or 404 when the pack has no such run.
    fn read_run(&self, id: u64) -> Result<RunRows, Problem> {
        let lookup = self.lookup(id)?;
        let run = self.pack.run(lookup.run.id as u32)?;
        let rows = run
            .steps()
            .map(|s| StepRow::from_bytes(s.as_bytes()))
            .collect();
        Ok(RunRows {
            lookup,
            first_row: run.first_row(),
            rows,
        })
    }

    /// Run `id`'s `runs`, `run_details` and `run_index` rows, or 404 when the pack has no such
    /// run.
    fn lookup(&self, id: u64) -> Result<RunLookup, Problem> {
        let missing = || Problem::not_found(format!("run {id} is not in {}", self.describe()));
        let id32 = u32::try_from(id).map_err(|_| missing())?;
        let conn = self.pack.conn();
        metadata::read_run(&conn, i64::from(id32))?.ok_or_else(missing)
    }

    /// The pack's companion families, each opened (mapped) for this request.
    fn open_families(&self) -> Result<Vec<Opened<'_>>> {
        self.families
            .iter()
            .map(|f| Ok((f, self.pack.companion(&f.name)?)))
            .collect()
    }

    /// The step's search statistics, when the pack keeps them.
    fn search_row(&self, families: &[Opened<'_>], global: u64) -> Result<Option<SearchStats>> {
        match families.iter().find(|(f, _)| f.search_stats) {
            Some((_, c)) => Ok(Some(SearchStats::from_bytes(c.row(global)?))),
            None => Ok(None),
        }
    }
}

impl RunRows {
    /// Position of the first row whose step_index is at least `step`.
    fn position_at_or_after(&self, step: u64) -> Option<usize> {
        let p = self
            .rows
            .partition_point(|r| u64::from(r.step_index) < step);
        (p < self.rows.len()).then_some(p)
    }

    /// "steps 0–999", or "it has no rows".
    fn step_range(&self) -> String {
        match (self.rows.first(), self.rows.last()) {
            (Some(a), Some(b)) => format!("its steps are {}–{}", a.step_index, b.step_index),
            _ => "it has no rows".into(),
        }
    }

    /// The game's score before each step's move: the sum of what every earlier move scored
    /// on its board (the score only grows, so the last move's board plus its points is the
    /// final score).
    fn scores(&self) -> Vec<u64> {
        let mut total = 0u64;
        self.rows
            .iter()
            .map(|r| {
                let before = total;
                let cells = board::unpack(r.board, r.tile_65536_mask);
                total += board::move_score(&cells, r.move_dir);
                before
            })
            .collect()
    }
}

/// A companion family and its files, mapped for one request.
type Opened<'a> = (&'a FamilyView, crate::Companion<'a>);

/// Each mover family's move at every step of the run.
fn family_moves(run: &RunRows, families: &[Opened<'_>]) -> Result<Vec<(String, Vec<Option<u8>>)>> {
    let mut out = Vec::new();
    for (f, c) in families {
        let Some(mover) = &f.mover else { continue };
        let moves = (0..run.rows.len() as u64)
            .map(|p| Ok(mover.read(c.row(run.first_row + p)?)))
            .collect::<Result<Vec<_>>>()?;
        out.push((f.name.clone(), moves));
    }
    Ok(out)
}

/// For the runs table: each mover family's disagreements with the teacher in the run.
fn disagreement_counts(run: &RunRows, families: &[Opened<'_>]) -> Result<Value> {
    let moves = family_moves(run, families)?;
    let counts: Map<String, Value> = disagreements(run, &moves)
        .into_iter()
        .map(|(name, steps)| (name, json!(steps.as_array().map_or(0, Vec::len))))
        .collect();
    Ok(Value::Object(counts))
}

/// For each mover family, the step_index of every step where its move is not the teacher's.
fn disagreements(run: &RunRows, moves: &[(String, Vec<Option<u8>>)]) -> Map<String, Value> {
    moves
        .iter()
        .map(|(name, m)| {
            let steps: Vec<u32> = run
                .rows
                .iter()
                .zip(m)
                .filter(|(r, model)| model.is_some_and(|x| r.move_dir < 4 && x != r.move_dir))
                .map(|(r, _)| r.step_index)
                .collect();
            (name.clone(), json!(steps))
        })
        .collect()
}

/// The run's `runs` and `run_details` facts.
fn run_facts(l: &RunLookup, first_row: u64) -> Value {
    let d = l.details.clone().unwrap_or_default();
    json!({
        "id": l.run.id, "seed": l.run.seed, "steps": l.run.steps, "score": l.run.max_score,
        "max_tile": l.run.highest_tile, "depth": d.depth, "game_index": d.game_index,
        "num_moves": d.num_moves, "max_rank": d.max_rank, "sum_tile": d.sum_tile,
        "seconds": d.seconds, "source_path": d.source_path, "source_pack": d.source_pack,
        "source_run_id": d.source_run_id, "first_row": first_row,
    })
}

fn family_view(pack: &Pack, name: &str) -> Result<FamilyView> {
    let c = pack.companion(name)?;
    let item = parse_literal(c.descr())
        .ok()
        .and_then(|l| Dtype::from_descr(&l).ok())
        .ok_or_else(|| {
            crate::error::err!(
                Corrupt,
                "companion {name}: its dtype {} cannot be read",
                c.descr()
            )
        })?;
    let row_dtype = match c.shape() {
        [] => item.clone(),
        shape => Dtype::Array(Box::new(item.clone()), shape.to_vec()),
    };
    Ok(FamilyView {
        name: name.to_string(),
        descr: c.descr().to_string(),
        shape: c.shape().to_vec(),
        mover: Mover::find(&row_dtype),
        search_stats: name == search::FAMILY && c.descr() == search::DESCR && c.shape().is_empty(),
        row_dtype,
    })
}

impl Mover {
    /// The family's move, if its row has one: an integer field named `argmax_head` or
    /// `move`, else the first field of four numbers (or a row of four numbers).
    fn find(row: &Dtype) -> Option<Mover> {
        let four = |d: &Dtype| match d {
            Dtype::Array(inner, shape) if shape == &[4] => match inner.as_ref() {
                Dtype::Scalar { order, kind, size }
                    if matches!(kind, 'f' | 'i' | 'u') && little(*order, *size) =>
                {
                    Some((*kind, *size))
                }
                _ => None,
            },
            _ => None,
        };
        match row {
            Dtype::Struct { fields, .. } => {
                let named = fields.iter().find(|f| {
                    matches!(f.name.as_str(), "argmax_head" | "move")
                        && matches!(f.dtype, Dtype::Scalar { kind: 'u' | 'i', size, order }
                                    if little(order, size))
                });
                if let Some(f) = named {
                    return Some(Mover::Field {
                        name: f.name.clone(),
                        offset: f.offset,
                        size: f.dtype.size(),
                    });
                }
                fields
                    .iter()
                    .filter(|f| f.name != "policy_hard" && f.name != "legal_mask")
                    .find_map(|f| {
                        four(&f.dtype).map(|(kind, size)| Mover::Argmax {
                            name: f.name.clone(),
                            offset: f.offset,
                            kind,
                            size,
                        })
                    })
            }
            other => four(other).map(|(kind, size)| Mover::Argmax {
                name: String::new(),
                offset: 0,
                kind,
                size,
            }),
        }
    }

    /// The field the move comes from ("" for a row of four numbers).
    fn field(&self) -> &str {
        match self {
            Mover::Field { name, .. } | Mover::Argmax { name, .. } => name,
        }
    }

    /// The move a row names, if any.
    fn read(&self, row: &[u8]) -> Option<u8> {
        match *self {
            Mover::Field { offset, size, .. } => {
                let v = read_number(&row[offset..offset + size], 'u', size)?;
                (0.0..4.0).contains(&v).then_some(v as u8)
            }
            Mover::Argmax {
                offset, kind, size, ..
            } => {
                let mut best: Option<(u8, f64)> = None;
                for k in 0..4 {
                    let v =
                        read_number(&row[offset + k * size..offset + (k + 1) * size], kind, size)?;
                    if v.is_nan() {
                        continue;
                    }
                    if best.is_none_or(|(_, b)| v > b) {
                        best = Some((k as u8, v));
                    }
                }
                best.map(|(k, _)| k)
            }
        }
    }
}

/// Whether a number of this byte order and size reads as little-endian here.
fn little(order: char, size: usize) -> bool {
    order == '<' || order == '|' || size == 1 || (order == '=' && cfg!(target_endian = "little"))
}

/// A little-endian number of NumPy kind `kind` (f, i, u) and `size` bytes, as f64 (for
/// comparing: which of four is largest, whether a move index is 0–3).
fn read_number(b: &[u8], kind: char, size: usize) -> Option<f64> {
    Some(match (kind, size) {
        ('f', 4) => f64::from(<f32 as CompanionValue>::from_le(&b[..4])),
        ('f', 8) => <f64 as CompanionValue>::from_le(&b[..8]),
        _ => match int_json(b, kind, size)? {
            Value::Number(n) => n.as_f64()?,
            _ => return None,
        },
    })
}

/// A little-endian integer of NumPy kind `i` or `u` and `size` bytes (1, 2, 4 or 8), exactly:
/// through f64, a u8 or i8 count above 2^53 would be shown rounded.
fn int_json(b: &[u8], kind: char, size: usize) -> Option<Value> {
    Some(match (kind, size) {
        ('u', 1) => json!(<u8 as CompanionValue>::from_le(&b[..1])),
        ('u', 2) => json!(<u16 as CompanionValue>::from_le(&b[..2])),
        ('u', 4) => json!(<u32 as CompanionValue>::from_le(&b[..4])),
        ('u', 8) => json!(<u64 as CompanionValue>::from_le(&b[..8])),
        ('i', 1) => json!(<i8 as CompanionValue>::from_le(&b[..1])),
        ('i', 2) => json!(<i16 as CompanionValue>::from_le(&b[..2])),
        ('i', 4) => json!(<i32 as CompanionValue>::from_le(&b[..4])),
        ('i', 8) => json!(<i64 as CompanionValue>::from_le(&b[..8])),
        _ => return None,
    })
}

/// A row's value as JSON: numbers and booleans as such, named fields as an object, vectors
/// of up to [`LISTED_VALUES`] numbers as lists and longer ones summarised (`shape`, `min`,
/// `max`, `mean`), bytes of other kinds (text, void, dates) as a note of their type.
fn value_json(dtype: &Dtype, bytes: &[u8]) -> Value {
    match dtype {
        Dtype::Scalar { order, kind, size } => scalar_json(*order, *kind, *size, bytes),
        Dtype::Struct { fields, .. } => fields
            .iter()
            .filter(|f| !f.name.is_empty())
            .map(|f| {
                let b = &bytes[f.offset..f.offset + f.dtype.size()];
                (f.name.clone(), value_json(&f.dtype, b))
            })
            .collect::<Map<_, _>>()
            .into(),
        Dtype::Array(inner, shape) => {
            let n: usize = shape.iter().map(|&d| d as usize).product();
            let step = inner.size();
            let items: Vec<Value> = (0..n)
                .map(|i| value_json(inner, &bytes[i * step..(i + 1) * step]))
                .collect();
            if n <= LISTED_VALUES && shape.len() == 1 {
                return Value::Array(items);
            }
            summary(shape, &items)
        }
    }
}

/// A long vector in a few numbers.
fn summary(shape: &[u64], items: &[Value]) -> Value {
    let nums: Vec<f64> = items.iter().filter_map(Value::as_f64).collect();
    if nums.is_empty() {
        return json!({"shape": shape, "items": items.len()});
    }
    let (min, max) = nums
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let mean = nums.iter().sum::<f64>() / nums.len() as f64;
    json!({"shape": shape, "min": min, "max": max, "mean": mean})
}

fn scalar_json(order: char, kind: char, size: usize, b: &[u8]) -> Value {
    if !little(order, size) {
        return json!(format!("({order}{kind}{size}: big-endian, not shown)"));
    }
    match kind {
        'b' => json!(b[0] != 0),
        'f' if size == 4 => f32_json(f32::from_le_bytes(b.try_into().expect("4 bytes"))),
        'f' if size == 8 => {
            serde_json::Number::from_f64(f64::from_le_bytes(b.try_into().expect("8 bytes")))
                .map_or(Value::Null, Value::Number)
        }
        'u' | 'i' => {
            int_json(b, kind, size).unwrap_or_else(|| json!(format!("({kind}{size} bytes)")))
        }
        _ => json!(format!("({kind}{size} bytes)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dtype(descr: &str) -> Dtype {
        Dtype::from_descr(&parse_literal(descr).unwrap()).unwrap()
    }

    #[test]
    fn the_trainers_annotation_row_names_its_argmax_head() {
        let row = dtype(
            "[('run_id', '<u4'), ('step_index', '<u4'), ('teacher_move', '|u1'), \
             ('legal_mask', '|u1'), ('policy_kind_mask', '|u1'), ('argmax_head', '|u1'), \
             ('argmax_prob', '<f4'), ('policy_p1', '<f4', (4,)), ('policy_logp', '<f4', (4,)), \
             ('policy_hard', '<f4', (4,))]",
        );
        let mover = Mover::find(&row).unwrap();
        assert_eq!(mover.field(), "argmax_head");
        let mut bytes = vec![0u8; row.size()];
        bytes[11] = 2;
        assert_eq!(mover.read(&bytes), Some(2));
        bytes[11] = 255;
        assert_eq!(mover.read(&bytes), None);
        let v = value_json(&row, &bytes);
        assert_eq!(v["argmax_head"], 255);
        assert_eq!(v["policy_p1"], json!([0.0, 0.0, 0.0, 0.0]));
    }

    #[test]
    fn integers_are_shown_exactly() {
        let big = (1u64 << 53) + 1;
        assert_eq!(value_json(&dtype("'<u8'"), &big.to_le_bytes()), json!(big));
        assert_eq!(
            value_json(&dtype("'<i8'"), &(-(big as i64)).to_le_bytes()),
            json!(-(big as i64))
        );
        assert_eq!(value_json(&dtype("'|i1'"), &[0xff]), json!(-1));
        assert_eq!(value_json(&dtype("'<u2'"), &[1, 1]), json!(257));
    }

    #[test]
    fn four_numbers_name_the_largest_and_long_vectors_are_summarised() {
        let row = dtype("[('policy_p1', '<f4', (4,))]");
        let mover = Mover::find(&row).unwrap();
        let bytes: Vec<u8> = [0.1f32, f32::NAN, 0.7, 0.2]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(mover.read(&bytes), Some(2));
        let student = Dtype::Array(Box::new(dtype("'<f4'")), vec![4, 3]);
        assert!(Mover::find(&student).is_none());
        let bytes: Vec<u8> = (0..12).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let v = value_json(&student, &bytes);
        assert_eq!(
            v,
            json!({"shape": [4, 3], "min": 0.0, "max": 11.0, "mean": 5.5})
        );
        assert!(Mover::find(&dtype("'<f4'")).is_none());
    }
}
