//! Run selection by SQL: the one place that turns a user's SQL text over `metadata.db` into run
//! ids (`export --where`, `stats --where`; the Python package's `Pack.select` follows the same
//! rules in `_select.py`).
//!
//! The text is one of two forms, told apart by its first word:
//! - a **WHERE expression** over the columns of `runs` left-joined with `run_details`
//!   (`depth = 7 AND max_score > 600000`), run as `SELECT runs.id FROM … WHERE (EXPR)`;
//! - a **query** (`SELECT id FROM runs WHERE …`, `WITH … SELECT …`, `VALUES …`) that returns
//!   run ids, run exactly as written, as sqlite3 would run it.
//!
//! A query wrapped in parentheses is still a query: as an expression it would be a scalar
//! subquery, true or false for every run alike depending on its first row, which is how a
//! trainer's `run_sql` once selected every run without a word. Anything else that is not an
//! expression (`DELETE …`, `PRAGMA …`) is refused by name.
//!
//! An expression stays one expression: its parentheses must pair up among themselves (read
//! as SQLite's tokenizer reads them), so it cannot close the `WHERE (` around it and go on
//! with `UNION SELECT …`. Whatever the text, every id a selection returns must be a run id of
//! the pack; NULL, text, reals and unknown ids are errors, not silently dropped rows.
//! Parameters (`?`, `?NNN`, `:name`, `@name`, `$name`, `#name`, names as SQLite reads them)
//! are bound from `--param` values and must match exactly: an unbound parameter would be NULL
//! and silently select nothing.
//!
//! A selection runs under [`SqlLimits`]: SQLite's progress handler stops it once it has run
//! longer than its time limit or SQLite has allocated more than its memory limit since it
//! began (`WITH RECURSIVE` makes endless and ever-growing queries easy to write by mistake),
//! and the error says which limit and how to raise it.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Result, err, fail};
use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{Connection, Statement};

use crate::format::metadata;

/// A value for an SQL parameter, from `--param` (or for [`crate::Pack::select_with`]).
///
/// ```
/// use dataset_packer::Param;
/// let p = Param::parse("depth=7").unwrap();
/// assert_eq!(p.name.as_deref(), Some("depth"));
/// assert_eq!(p.to_string(), "depth=7");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// `min` for `:min`, `@min`, `$min` or `#min` (the name as SQLite reads it, without its
    /// first character); None for a positional `?`.
    pub name: Option<String>,
    pub value: Value,
}

impl Param {
    /// Parses `--param` text: `NAME=VALUE` binds `:NAME` (also `@NAME`, `$NAME`, `#NAME`), a
    /// bare `VALUE` the next positional `?`. NAME is a parameter name as SQLite reads one
    /// (letters, digits, `_`, `$` and any non-ASCII character, `::` between parts, a `(…)`
    /// suffix), optionally with its `:`, `@`, `$` or `#` (needed when it starts with a digit,
    /// as `:1=5`). A value is an integer, a real, `NULL`, `'quoted text'` (always text), or else
    /// the text as written.
    ///
    /// ```
    /// use dataset_packer::Param;
    /// use rusqlite::types::Value;
    /// assert_eq!(Param::parse("50000").unwrap().value, Value::Integer(50000));
    /// let p = Param::parse("min=0.5").unwrap();
    /// assert_eq!((p.name.as_deref(), p.value), (Some("min"), Value::Real(0.5)));
    /// assert_eq!(Param::parse("'42'").unwrap().value, Value::Text("42".into()));
    /// assert_eq!(Param::parse("a::b=1").unwrap().name.as_deref(), Some("a::b"));
    /// ```
    pub fn parse(text: &str) -> Result<Param, String> {
        let (name, value) = match split_name(text) {
            Some((name, value)) => (Some(name.to_string()), value),
            None => (None, text),
        };
        Ok(Param {
            name,
            value: parse_value(value)?,
        })
    }
}

impl fmt::Display for Param {
    /// As it would be given on the command line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = &self.name {
            // A name starting with a digit needs its prefix to be read back as a name.
            let prefix = if name.starts_with(|c: char| c.is_ascii_digit()) {
                ":"
            } else {
                ""
            };
            write!(f, "{prefix}{name}=")?;
        }
        match &self.value {
            Value::Null => f.write_str("NULL"),
            Value::Integer(i) => write!(f, "{i}"),
            Value::Real(r) => write!(f, "{r:?}"),
            Value::Text(t) => write!(f, "'{}'", t.replace('\'', "''")),
            Value::Blob(_) => f.write_str("(blob)"),
        }
    }
}

/// `NAME=VALUE` split at the end of NAME, when the text starts with a parameter name as SQLite
/// reads one (with or without its prefix; without one, not starting with a digit).
fn split_name(text: &str) -> Option<(&str, &str)> {
    let (body, prefixed) = match text.strip_prefix([':', '@', '$', '#']) {
        Some(body) => (body, true),
        None => (text, false),
    };
    if !prefixed && body.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let (len, named) = variable_len(body.as_bytes());
    let value = body[len..].strip_prefix('=')?;
    named.then_some((&body[..len], value))
}

/// SQLite's identifier characters: ASCII letters and digits, `_`, `$`, and every byte of a
/// non-ASCII character.
fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// SQLite's whitespace (nothing beyond ASCII: a no-break space is an identifier character).
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0c' | b'\r')
}

/// The length of the name of a `:`/`@`/`$`/`#` parameter whose prefix came just before
/// `rest`, as SQLite's tokenizer measures it (identifier characters, `::` between parts, and
/// a `(…)` suffix up to `)` or whitespace), and whether it is a name at all (at least one
/// identifier character, a `(…)` suffix closed).
fn variable_len(rest: &[u8]) -> (usize, bool) {
    let (mut i, mut n) = (0, 0);
    while i < rest.len() {
        match rest[i] {
            b if is_id_byte(b) => {
                n += 1;
                i += 1;
            }
            b'(' if n > 0 => {
                i += 1;
                while i < rest.len() && !is_space(rest[i]) && rest[i] != b')' {
                    i += 1;
                }
                let closed = i < rest.len() && rest[i] == b')';
                return (i + usize::from(closed), closed);
            }
            b':' if rest.get(i + 1) == Some(&b':') => i += 2,
            _ => break,
        }
    }
    (i, n > 0)
}

fn parse_value(text: &str) -> Result<Value, String> {
    if let Some(inner) = text.strip_prefix('\'') {
        let inner = inner
            .strip_suffix('\'')
            .ok_or_else(|| format!("{text:?}: a quoted text value must end with '"))?;
        return Ok(Value::Text(inner.replace("''", "'")));
    }
    if text.eq_ignore_ascii_case("null") {
        return Ok(Value::Null);
    }
    if let Ok(i) = text.parse::<i64>() {
        return Ok(Value::Integer(i));
    }
    match text.parse::<f64>() {
        Ok(r) if r.is_finite() && text.contains(|c: char| c.is_ascii_digit()) => Ok(Value::Real(r)),
        _ => Ok(Value::Text(text.to_string())),
    }
}

/// What the user's SQL text is.
#[derive(Debug, PartialEq, Eq)]
enum Form<'a> {
    /// A condition on one run, spliced into `WHERE (…)`.
    Expression,
    /// A query returning run ids; the text to prepare (without the parentheses around it).
    Query(&'a str),
}

/// Statements that are not queries: named when refused.
const NOT_QUERIES: &[&str] = &[
    "ALTER",
    "ANALYZE",
    "ATTACH",
    "BEGIN",
    "COMMIT",
    "CREATE",
    "DELETE",
    "DETACH",
    "DROP",
    "END",
    "EXPLAIN",
    "INSERT",
    "PRAGMA",
    "REINDEX",
    "RELEASE",
    "REPLACE",
    "ROLLBACK",
    "SAVEPOINT",
    "UPDATE",
    "UPSERT",
    "VACUUM",
];

fn form(sql: &str) -> Result<Form<'_>> {
    let mut inner = sql;
    while let Some(group) = whole_group(inner) {
        inner = group;
    }
    let word = first_word(inner).to_ascii_uppercase();
    match word.as_str() {
        "SELECT" | "WITH" | "VALUES" => Ok(Form::Query(inner)),
        w if NOT_QUERIES.contains(&w) && first_word(sql).eq_ignore_ascii_case(w) => fail!(
            InvalidInput,
            "{sql:?} is {} {w} statement; runs are selected by a WHERE expression (e.g. \"depth = 7\") or by a SELECT/WITH query that returns run ids, nothing else",
            if w.starts_with(['A', 'E', 'I', 'U']) {
                "an"
            } else {
                "a"
            }
        ),
        _ => Ok(Form::Expression),
    }
}

/// Splits SQL text into its tokens as SQLite's tokenizer does, as far as it matters here: each
/// token's first character with its byte offset, skipping whitespace and comments. A string,
/// quoted identifier, word (keyword, name or number) or parameter (`:name`, `$a(…)`, `?7`) is
/// one token, so parentheses inside them do not count as parentheses.
fn significant(sql: &str) -> Vec<(usize, char)> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let at = i;
        match b[i] {
            c if is_space(c) => i += 1,
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p + 1);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = sql[i + 2..].find("*/").map_or(b.len(), |p| i + 2 + p + 2);
            }
            q @ (b'\'' | b'"' | b'`' | b'[') => {
                let close = if q == b'[' { b']' } else { q };
                // A doubled quote inside is an escaped quote: leaving and re-entering the
                // quoted span at once gives the same result.
                i = b[i + 1..]
                    .iter()
                    .position(|&c| c == close)
                    .map_or(b.len(), |p| i + 1 + p + 1);
                out.push((at, q as char));
            }
            b':' | b'@' | b'$' | b'#' => {
                i += 1 + variable_len(&b[i + 1..]).0;
                out.push((at, b[at] as char));
            }
            b'?' => {
                i += 1 + b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
                out.push((at, '?'));
            }
            c if is_id_byte(c) => {
                i += b[i..].iter().take_while(|&&c| is_id_byte(c)).count();
                out.push((at, sql[at..].chars().next().unwrap_or('?')));
            }
            _ => {
                let c = sql[at..].chars().next().unwrap_or('?');
                i += c.len_utf8();
                out.push((at, c));
            }
        }
    }
    out
}

/// An expression's text must stay inside the `WHERE (…)` it is put in: no NUL (SQLite would
/// stop reading there), something besides comments, and parentheses that pair up among
/// themselves, so it cannot close the WHERE clause and go on (`0) UNION SELECT 99 WHERE (1`).
fn check_enclosed(sql: &str) -> Result<(), String> {
    if let Some(at) = sql.find('\0') {
        return Err(format!(
            "the text holds a NUL character (at byte {at}), where SQLite would stop reading"
        ));
    }
    if significant(sql).is_empty() {
        return Err("the expression is empty (only whitespace or comments)".into());
    }
    unbalanced(sql).map_or(Ok(()), Err)
}

/// Parentheses that do not pair up in `sql` (read as SQLite reads it: not those inside
/// strings, quoted names, comments or parameter names), said with a caret under the first.
fn unbalanced(sql: &str) -> Option<String> {
    let mut open = Vec::new();
    for (at, c) in significant(sql) {
        match c {
            '(' => open.push(at),
            ')' if open.pop().is_none() => return Some(caret(sql, at, "closes nothing")),
            _ => {}
        }
    }
    open.first().map(|&at| caret(sql, at, "is never closed"))
}

/// "the ')' at column N closes nothing", with the text and a caret under the parenthesis.
fn caret(sql: &str, at: usize, what: &str) -> String {
    let column = sql[..at].chars().count();
    let c = sql[at..].chars().next().unwrap_or(' ');
    let line_start = sql[..at].rfind('\n').map_or(0, |p| p + 1);
    let line_end = sql[at..].find('\n').map_or(sql.len(), |p| at + p);
    format!(
        "the '{c}' at column {} {what}; parentheses must pair up within the text\n  {}\n  {}^",
        column + 1,
        &sql[line_start..line_end],
        " ".repeat(sql[line_start..at].chars().count())
    )
}

/// The text inside the parentheses when the whole of `sql` is one parenthesised group.
fn whole_group(sql: &str) -> Option<&str> {
    let tokens = significant(sql);
    let (&(open, first), &(close, last)) = (tokens.first()?, tokens.last()?);
    if first != '(' || last != ')' || tokens.len() < 2 {
        return None;
    }
    let mut depth = 0usize;
    for (i, &(_, c)) in tokens.iter().enumerate() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 && i != tokens.len() - 1 {
                    return None;
                }
            }
            _ => {}
        }
    }
    (depth == 0).then(|| &sql[open + 1..close])
}

/// The first keyword-like word of `sql`, after whitespace and comments.
fn first_word(sql: &str) -> &str {
    let Some(&(start, _)) = significant(sql).first() else {
        return "";
    };
    let rest = &sql[start..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// How long a selection may run and how much memory SQLite may take for it, beyond what it
/// held when the selection began (`--sql-timeout`, `--sql-memory`). The defaults are generous
/// for any real selection and stop a runaway `WITH RECURSIVE` within minutes.
///
/// ```
/// use std::time::Duration;
/// use dataset_packer::SqlLimits;
/// let quick = SqlLimits { time: Duration::from_secs(2), ..SqlLimits::default() };
/// assert_eq!(quick.memory, SqlLimits::default().memory);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlLimits {
    pub time: Duration,
    /// Bytes.
    pub memory: u64,
}

impl Default for SqlLimits {
    fn default() -> SqlLimits {
        SqlLimits {
            time: Duration::from_secs(300),
            memory: 1 << 30,
        }
    }
}

/// The run ids (ascending, each once) that `sql` selects, with `params` bound, within
/// `limits`. `option` names where the text came from (`selection`, `select`), for messages.
pub fn run_ids(
    conn: &Connection,
    sql: &str,
    params: &[Param],
    option: &str,
    limits: &SqlLimits,
) -> Result<Vec<i64>> {
    let details = metadata::has_table(conn, "run_details")?;
    let explain = |noun: &'static str, prefix_len: usize| {
        move |e: rusqlite::Error| {
            let columns = columns(conn, details).unwrap_or_default();
            err!(
                InvalidInput,
                "{}",
                explain_error(option, sql, noun, prefix_len, &e, &columns)
            )
        }
    };
    let refuse = |why: String| err!(InvalidInput, "{option} {sql:?}: {why}");
    let (mut stmt, noun, prefix_len) =
        match form(sql).map_err(|e| err!(InvalidInput, "{option} {e}"))? {
            Form::Expression => {
                check_enclosed(sql).map_err(refuse)?;
                let from = if details {
                    "runs LEFT JOIN run_details ON run_details.run_id = runs.id"
                } else {
                    "runs"
                };
                // The expression on lines of its own, so a trailing `-- comment` cannot swallow
                // the rest.
                let prefix = format!("SELECT runs.id FROM {from} WHERE (\n");
                let text = format!("{prefix}{sql}\n) ORDER BY runs.id");
                let stmt = conn
                    .prepare(&text)
                    .map_err(explain("expression", prefix.len()))?;
                (stmt, "expression", prefix.len())
            }
            Form::Query(query) => {
                let offset = query.as_ptr() as usize - sql.as_ptr() as usize;
                let stmt = conn.prepare(query).map_err(|e| {
                    // Offsets SQLite gives are in `query`; the user sees `sql`.
                    explain("query", 0)(shift_offset(e, offset))
                })?;
                check_query_shape(&stmt).map_err(refuse)?;
                (stmt, "query", 0)
            }
        };
    bind(&mut stmt, params).map_err(|why| refuse(why).with_option("params"))?;
    let known = metadata::read_run_ids(conn)?;
    let watchdog = Watchdog::start(conn, limits);
    let read = read_ids(&mut stmt, &known, noun);
    match (watchdog.finish(), read) {
        (Some(limit), Err(_)) => {
            Err(
                err!(Interrupted, "{option} {sql:?}: {}", limit.describe(limits))
                    .with_option(limit.option()),
            )
        }
        (_, Err(e)) => Err(explain(noun, prefix_len)(e)),
        (_, Ok(read)) => read.map_err(refuse),
    }
}

/// VM instructions between two checks of the limits: frequent enough to stop within a
/// millisecond, rare enough to cost nothing measurable.
const CHECK_EVERY_OPS: i32 = 1000;

/// Which limit stopped a selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    Time,
    Memory,
}

impl Limit {
    fn describe(self, limits: &SqlLimits) -> String {
        match self {
            Limit::Time => format!(
                "stopped after {} s, its time limit (a WITH RECURSIVE query that never ends?); give it longer with a larger time limit (SqlLimits::time)",
                limits.time.as_secs_f64(),
            ),
            Limit::Memory => format!(
                "stopped: it needed more than {:.1} MiB of memory, its limit (a WITH RECURSIVE query that grows without end?); give it more with a larger memory limit (SqlLimits::memory)",
                limits.memory as f64 / (1u64 << 20) as f64,
            ),
        }
    }

    /// The option a front end sets the limit with.
    fn option(self) -> &'static str {
        match self {
            Limit::Time => "sql_timeout",
            Limit::Memory => "sql_memory",
        }
    }

    fn from_code(code: u8) -> Option<Limit> {
        match code {
            1 => Some(Limit::Time),
            2 => Some(Limit::Memory),
            _ => None,
        }
    }
}

/// SQLite's heap in use, process-wide.
fn sqlite_memory_used() -> u64 {
    // SAFETY: reads SQLite's allocation counter; takes no arguments and has no preconditions.
    let used = unsafe { rusqlite::ffi::sqlite3_memory_used() };
    u64::try_from(used).unwrap_or(0)
}

/// SQLite's progress handler on `conn` while a selection runs: it interrupts the statement
/// once a limit is passed and remembers which. Removed when dropped.
struct Watchdog<'c> {
    conn: &'c Connection,
    stopped: Arc<AtomicU8>,
}

impl<'c> Watchdog<'c> {
    fn start(conn: &'c Connection, limits: &SqlLimits) -> Watchdog<'c> {
        let stopped = Arc::new(AtomicU8::new(0));
        let flag = Arc::clone(&stopped);
        let deadline = Instant::now().checked_add(limits.time);
        let baseline = sqlite_memory_used();
        let memory = limits.memory;
        conn.progress_handler(
            CHECK_EVERY_OPS,
            Some(move || {
                let code = if deadline.is_some_and(|d| Instant::now() >= d) {
                    1
                } else if sqlite_memory_used().saturating_sub(baseline) > memory {
                    2
                } else {
                    return false;
                };
                flag.store(code, Ordering::Relaxed);
                true
            }),
        );
        Watchdog { conn, stopped }
    }

    /// Removes the handler; the limit that stopped the statement, if one did.
    fn finish(self) -> Option<Limit> {
        Limit::from_code(self.stopped.load(Ordering::Relaxed))
    }
}

impl Drop for Watchdog<'_> {
    fn drop(&mut self) {
        self.conn.progress_handler(0, None::<fn() -> bool>);
    }
}

/// A run selection as the user wrote it: `--where SQL` and its `--param` values. What the
/// library's readers (`stats::gather`) take, so they need nothing of the command line.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub sql: String,
    pub params: Vec<Param>,
    pub limits: SqlLimits,
}

impl RunFilter {
    /// The run ids the filter selects (ascending); errors call it the selection, and say
    /// which option (`selection`, `params`, `sql_timeout`, `sql_memory`) they are about.
    pub fn run_ids(&self, conn: &Connection) -> Result<Vec<i64>> {
        run_ids(conn, &self.sql, &self.params, "selection", &self.limits).map_err(|e| {
            match e.option() {
                Some(_) => e,
                None => e.with_option("selection"),
            }
        })
    }

    /// `--where SQL --param …` as given, for summaries and a pack's `session`.
    pub fn describe(&self) -> String {
        let mut out = format!("--where {}", self.sql);
        for p in &self.params {
            out.push_str(&format!(" --param {}", shell_quote(&p.to_string())));
        }
        out
    }
}

/// The order of a page of runs: a column of `runs` or `run_details`, named as `metadata.db`
/// names it, ascending or descending (`-max_score`); ties go by run id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOrder {
    pub column: String,
    pub descending: bool,
}

impl Default for RunOrder {
    fn default() -> RunOrder {
        RunOrder {
            column: "id".into(),
            descending: false,
        }
    }
}

impl RunOrder {
    /// `max_score` (ascending) or `-max_score` (descending). The name is only checked against
    /// the pack's columns when the page is read.
    pub fn parse(text: &str) -> Result<RunOrder, String> {
        let (column, descending) = match text.strip_prefix('-') {
            Some(rest) => (rest, true),
            None => (text, false),
        };
        if column.is_empty() {
            return Err(format!(
                "{text:?} names no column: give one such as max_score, or -max_score for descending"
            ));
        }
        Ok(RunOrder {
            column: column.to_string(),
            descending,
        })
    }

    /// The ORDER BY clause: the column found among the pack's own (so no text of the
    /// request reaches the SQL), quoted, then the run id.
    fn clause(&self, columns: &[(&'static str, String)]) -> Result<String> {
        let column = if self.column == "run_id" {
            "id"
        } else {
            self.column.as_str()
        };
        let Some((table, name)) = columns.iter().find(|(_, c)| c == column) else {
            let names: Vec<&str> = columns.iter().map(|(_, c)| c.as_str()).collect();
            fail!(
                InvalidInput,
                "runs cannot be ordered by {:?}: it is not a column of runs or run_details (they are: {})",
                self.column,
                names.join(", ")
            );
        };
        let dir = if self.descending { "DESC" } else { "ASC" };
        // NULLs (a column an older pack leaves empty) last in either direction.
        Ok(format!(
            "\"{table}\".\"{name}\" IS NULL, \"{table}\".\"{name}\" {dir}, runs.id {dir}"
        ))
    }
}

/// One page of runs: how many the selection holds, and the ids of the page, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunsPage {
    pub total: u64,
    pub ids: Vec<i64>,
}

/// The runs `filter` selects (every run without one), ordered by `order`, `offset` of them
/// skipped and at most `limit` kept. The selection is read with every rule and limit of
/// [`RunFilter::run_ids`]; the page is then cut by SQLite, so the cost of a page of an
/// unfiltered pack does not grow with its runs beyond SQLite's own sort.
pub fn runs_page(
    conn: &Connection,
    filter: Option<&RunFilter>,
    order: &RunOrder,
    offset: u64,
    limit: u64,
) -> Result<RunsPage> {
    let details = metadata::has_table(conn, "run_details")?;
    let from = if details {
        "runs LEFT JOIN run_details ON run_details.run_id = runs.id"
    } else {
        "runs"
    };
    let order_by = order.clause(&columns(conn, details)?)?;
    let tail = format!("ORDER BY {order_by} LIMIT {limit} OFFSET {offset}");
    let Some(filter) = filter else {
        let total: i64 = conn.query_row("SELECT count(*) FROM runs", [], |r| r.get(0))?;
        let mut stmt = conn.prepare(&format!("SELECT runs.id FROM {from} {tail}"))?;
        let ids = stmt
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<i64>>>()?;
        return Ok(RunsPage {
            total: total as u64,
            ids,
        });
    };
    // Every check, every limit, and the ids themselves (a query's must all be run ids).
    let selected = filter.run_ids(conn)?;
    let total = selected.len() as u64;
    if order.column == "id" || order.column == "run_id" {
        let mut ids = selected;
        if order.descending {
            ids.reverse();
        }
        let ids = ids
            .into_iter()
            .skip(offset.try_into().unwrap_or(usize::MAX))
            .take(limit.try_into().unwrap_or(usize::MAX))
            .collect();
        return Ok(RunsPage { total, ids });
    }
    // Known good now; ordered by SQLite under the same limits, the text framed as before.
    let text = match form(&filter.sql)? {
        Form::Expression => format!(
            "SELECT runs.id FROM {from} WHERE (\n{}\n) {tail}",
            filter.sql
        ),
        Form::Query(query) => {
            format!("SELECT runs.id FROM {from} WHERE runs.id IN (\n{query}\n) {tail}")
        }
    };
    let mut stmt = conn.prepare(&text)?;
    bind(&mut stmt, &filter.params).map_err(|why| err!(InvalidInput, "selection: {why}"))?;
    let watchdog = Watchdog::start(conn, &filter.limits);
    let mut ids = Vec::new();
    let read = (|| -> rusqlite::Result<()> {
        let mut rows = stmt.raw_query();
        while let Some(row) = rows.next()? {
            ids.push(row.get(0)?);
        }
        Ok(())
    })();
    match (watchdog.finish(), read) {
        (Some(limit), Err(_)) => Err(err!(
            Interrupted,
            "selection {:?}: {}",
            filter.sql,
            limit.describe(&filter.limits)
        )
        .with_option(limit.option())),
        (_, Err(e)) => Err(e.into()),
        (_, Ok(())) => Ok(RunsPage { total, ids }),
    }
}

/// One argument quoted for a POSIX shell where it needs it, so that a recorded `--param` (or
/// a recorded command line) can be pasted back.
pub fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// The command line this process was started with, each argument quoted for a POSIX shell
/// where it needs it ([`shell_quote`]), so it can be pasted back: what a pack records when
/// the caller does not say.
pub fn process_command_line() -> String {
    std::env::args_os()
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shift_offset(e: rusqlite::Error, by: usize) -> rusqlite::Error {
    match e {
        rusqlite::Error::SqlInputError {
            error,
            msg,
            sql,
            offset,
        } if offset >= 0 => rusqlite::Error::SqlInputError {
            error,
            msg,
            sql,
            offset: offset + by as i32,
        },
        e => e,
    }
}

/// A query that selects runs reads (never writes) and returns exactly one column.
fn check_query_shape(stmt: &Statement) -> Result<(), String> {
    if !stmt.readonly() {
        return Err(
            "this statement would change metadata.db; runs are selected by a query that only reads"
                .into(),
        );
    }
    match stmt.column_count() {
        1 => Ok(()),
        n => Err(format!(
            "the query returns {n} columns ({}); it must return one, the run ids, e.g. SELECT id FROM runs WHERE …",
            stmt.column_names().join(", ")
        )),
    }
}

/// Binds `params` to the statement's parameters: positional values to `?`/`?NNN` in order,
/// named values by name. Every parameter gets exactly one value and every value is used.
fn bind(stmt: &mut Statement, params: &[Param]) -> Result<(), String> {
    let mut positional = Vec::new();
    let mut named = Vec::new();
    for index in 1..=stmt.parameter_count() {
        match stmt.parameter_name(index) {
            Some(name) if !name.starts_with('?') => named.push((index, name.to_string())),
            _ => positional.push(index),
        }
    }
    let values: Vec<&Param> = params.iter().filter(|p| p.name.is_none()).collect();
    if values.len() != positional.len() {
        return Err(format!(
            "the SQL has {} positional parameter{} (?) and {} positional parameter value{} {} given; give one value per ?, in order",
            positional.len(),
            plural(positional.len()),
            values.len(),
            plural(values.len()),
            if values.len() == 1 { "was" } else { "were" }
        ));
    }
    for (&index, param) in positional.iter().zip(&values) {
        bind_one(stmt, index, &param.value)?;
    }
    for param in params.iter().filter(|p| p.name.is_some()) {
        let key = param.name.as_deref().unwrap_or_default();
        if !named.iter().any(|(_, n)| &n[1..] == key) {
            let have: Vec<&str> = named.iter().map(|(_, n)| n.as_str()).collect();
            return Err(format!(
                "parameter {param}: the SQL has no parameter :{key} ({})",
                if have.is_empty() {
                    "it has no named parameters".to_string()
                } else {
                    format!("it has {}", have.join(", "))
                }
            ));
        }
    }
    for (index, name) in &named {
        let key = &name[1..];
        let mut given = params.iter().filter(|p| p.name.as_deref() == Some(key));
        match (given.next(), given.next()) {
            (Some(param), None) => bind_one(stmt, *index, &param.value)?,
            (None, _) => return Err(format!("{name} has no value: give a value named {key}")),
            (Some(_), Some(_)) => return Err(format!("parameter {key}=… is given twice")),
        }
    }
    Ok(())
}

fn bind_one(stmt: &mut Statement, index: usize, value: &Value) -> Result<(), String> {
    stmt.raw_bind_parameter(index, ToSqlOutput::Borrowed(ValueRef::from(value)))
        .map_err(|e| e.to_string())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Distinct unknown ids a selection may return before reading stops (each is kept for the
/// message, so a query returning endless unknown ids cannot grow memory without bound).
const UNKNOWN_KEPT: usize = 1000;

/// The run ids a statement returns, ascending and each once: SQLite's errors as the outer
/// `Err`; a value that is not a run id of the pack (`known`, ascending) as the inner one,
/// with the reason. Memory stays bounded by the pack's runs, however many rows come.
fn read_ids(
    stmt: &mut Statement,
    known: &[i64],
    noun: &str,
) -> rusqlite::Result<Result<Vec<i64>, String>> {
    let mut chosen = vec![false; known.len()];
    let mut unknown = BTreeSet::new();
    let mut rows = stmt.raw_query();
    let mut row_number = 0u64;
    while let Some(row) = rows.next()? {
        row_number += 1;
        match row.get_ref(0)? {
            ValueRef::Integer(id) => match known.binary_search(&id) {
                Ok(slot) => chosen[slot] = true,
                Err(_) => {
                    unknown.insert(id);
                    if unknown.len() > UNKNOWN_KEPT {
                        break;
                    }
                }
            },
            other => {
                return Ok(Err(format!(
                    "row {row_number} of the {noun}'s result is {}, not a run id; the {noun} must return the run ids (an integer column such as runs.id)",
                    describe_value(other)
                )));
            }
        }
    }
    if !unknown.is_empty() {
        return Ok(Err(unknown_ids(&unknown, known, noun)));
    }
    Ok(Ok(known
        .iter()
        .zip(chosen)
        .filter_map(|(&id, c)| c.then_some(id))
        .collect()))
}

fn describe_value(v: ValueRef) -> String {
    match v {
        ValueRef::Null => "NULL".into(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(r) => format!("{r} (a real)"),
        ValueRef::Text(t) => format!("{:?} (text)", String::from_utf8_lossy(t)),
        ValueRef::Blob(b) => format!("a blob of {} bytes", b.len()),
    }
}

/// The message for ids a selection returned that are not run ids of the pack.
fn unknown_ids(unknown: &BTreeSet<i64>, known: &[i64], noun: &str) -> String {
    let span = match (known.first(), known.last()) {
        (Some(a), Some(b)) => format!("ids {a}..={b}"),
        _ => "no runs".into(),
    };
    let count = if unknown.len() > UNKNOWN_KEPT {
        format!("more than {UNKNOWN_KEPT} values")
    } else {
        format!("{} value{}", unknown.len(), plural(unknown.len()))
    };
    let shown: Vec<String> = unknown.iter().take(5).map(i64::to_string).collect();
    format!(
        "the {noun} returns {count} that {} not a run id of the pack: {}{} (the pack has {} runs, {span}); it must return run ids, such as runs.id",
        if unknown.len() == 1 { "is" } else { "are" },
        shown.join(", "),
        if unknown.len() > 5 { ", …" } else { "" },
        known.len()
    )
}

/// Says what is wrong with the user's SQL in terms of their own text: where a syntax error is
/// (a caret under it, or "incomplete" when SQLite only noticed past its end), and for an
/// unknown column the nearest known one.
fn explain_error(
    option: &str,
    sql: &str,
    noun: &str,
    prefix_len: usize,
    e: &rusqlite::Error,
    columns: &[(&str, String)],
) -> String {
    let message = sqlite_message(e);
    let mut out = format!("{option} {sql:?}: ");
    let offset = match e {
        rusqlite::Error::SqlInputError { offset, .. } if *offset >= 0 => Some(*offset as usize),
        _ => None,
    };
    let names: Vec<String> = columns.iter().map(|(_, c)| c.clone()).collect();
    if let Some(name) = message.strip_prefix("no such column: ") {
        out.push_str(&format!("no column {name}"));
        match columns.iter().find(|(_, c)| c.eq_ignore_ascii_case(name)) {
            // A query that reads only `runs` and names a column of `run_details`.
            Some((table, _)) => out.push_str(&format!(
                " in the tables the {noun} reads: {name} is a column of {table}, which it must name (e.g. FROM runs JOIN run_details ON run_details.run_id = runs.id)"
            )),
            None => {
                if let Some(near) = nearest(name, &names) {
                    out.push_str(&format!("; did you mean {near}?"));
                }
            }
        }
    } else if let Some(problem) = unbalanced(sql) {
        out.push_str(&problem);
    } else if message.contains("syntax error") || message.contains("incomplete input") {
        match offset.map(|o| o.checked_sub(prefix_len)) {
            Some(Some(at)) if at < sql.len() => {
                let near: String = sql[at..].chars().take(12).collect();
                out.push_str(&format!(
                    "syntax error at {near:?} (column {})\n  {sql}\n  {}^",
                    at + 1,
                    " ".repeat(sql[..at].chars().count())
                ));
            }
            _ => out.push_str(&format!(
                "the {noun} is incomplete: it ends after {:?}",
                sql.trim_end()
            )),
        }
    } else {
        out.push_str(&message);
    }
    out.push_str(&format!(
        "\n(runs can be selected by a WHERE expression over these columns, or by a SELECT query over runs, run_details and the other tables that returns run ids: {})",
        names.join(", ")
    ));
    out
}

/// The known column nearest to `name` by edit distance, when it is near enough to be a typo.
fn nearest<'a>(name: &str, columns: &'a [String]) -> Option<&'a str> {
    let name = name.to_ascii_lowercase();
    columns
        .iter()
        .map(|c| (edit_distance(&name, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= (c.len() / 3).max(1) && *d < name.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.as_str())
}

/// Levenshtein distance (insertions, deletions and substitutions cost 1).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// SQLite's own words for an error (rusqlite wraps them in several shapes).
fn sqlite_message(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(_, Some(msg)) => msg.clone(),
        // (rusqlite's `bundled` feature, which this crate uses, brings this variant.)
        rusqlite::Error::SqlInputError { msg, .. } => msg.clone(),
        rusqlite::Error::MultipleStatement => {
            "only one statement is allowed (found a second one after ';')".into()
        }
        other => other.to_string(),
    }
}

/// The columns of `runs` and `run_details` (table, name), for hints.
fn columns(conn: &Connection, details: bool) -> Result<Vec<(&'static str, String)>> {
    let mut out: Vec<(&str, String)> = metadata::column_names(conn, "runs")?
        .into_iter()
        .map(|c| ("runs", c))
        .collect();
    if details {
        out.extend(
            metadata::column_names(conn, "run_details")?
                .into_iter()
                .filter(|c| c != "run_id")
                .map(|c| ("run_details", c)),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_pages_are_ordered_by_a_known_column_only() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, seed INT, steps INT, max_score INT, highest_tile INT);
             INSERT INTO runs VALUES (0, 7, 10, 500, 64), (1, 8, 20, 900, 128), (2, 9, 30, 100, 16);",
        )
        .unwrap();
        let order = RunOrder::parse("-max_score").unwrap();
        let page = runs_page(&conn, None, &order, 0, 2).unwrap();
        assert_eq!(
            page,
            RunsPage {
                total: 3,
                ids: vec![1, 0]
            }
        );
        let filter = RunFilter {
            sql: "steps >= ?".into(),
            params: vec![Param::parse("20").unwrap()],
            limits: SqlLimits::default(),
        };
        let page = runs_page(
            &conn,
            Some(&filter),
            &RunOrder::parse("max_score").unwrap(),
            1,
            5,
        );
        assert_eq!(
            page.unwrap(),
            RunsPage {
                total: 2,
                ids: vec![1]
            }
        );
        let by_id = runs_page(&conn, Some(&filter), &RunOrder::parse("-id").unwrap(), 0, 5);
        assert_eq!(by_id.unwrap().ids, [2, 1]);
        for bad in ["seed; DROP TABLE runs", "nope", "max_score DESC"] {
            let e = runs_page(&conn, None, &RunOrder::parse(bad).unwrap(), 0, 5).unwrap_err();
            assert!(e.to_string().contains("not a column"), "{e}");
        }
        assert!(RunOrder::parse("-").is_err());
        let not_one = RunFilter {
            sql: "1) OR (1".into(),
            ..filter
        };
        assert!(runs_page(&conn, Some(&not_one), &order, 0, 5).is_err());
    }

    #[test]
    fn run_ids_reads_expressions_and_queries() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, seed INT, steps INT, max_score INT, highest_tile INT);
             INSERT INTO runs VALUES (0, 7, 10, 500, 64), (1, 8, 20, 900, 128), (2, 9, 30, 100, 16);",
        ).unwrap();
        assert_eq!(
            run_ids(
                &conn,
                "max_score > 400",
                &[],
                "--where",
                &SqlLimits::default()
            )
            .unwrap(),
            [0, 1]
        );
        let over = [Param::parse("400").unwrap()];
        assert_eq!(
            run_ids(
                &conn,
                "SELECT id FROM runs WHERE max_score > ?",
                &over,
                "--where",
                &SqlLimits::default()
            )
            .unwrap(),
            [0, 1]
        );
        assert!(
            run_ids(
                &conn,
                "SELECT id, seed FROM runs",
                &[],
                "--where",
                &SqlLimits::default()
            )
            .is_err()
        );
    }

    fn conn() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, seed BIGINT NOT NULL, steps INT NOT NULL,
                                max_score INT NOT NULL, highest_tile INT NOT NULL);
             CREATE TABLE run_details (run_id INTEGER PRIMARY KEY, depth INT);
             INSERT INTO runs VALUES (0, 1, 10, 500, 64), (1, 2, 20, 900, 128), (2, 3, 5, 50, 8);
             INSERT INTO run_details VALUES (0, 6), (1, 7), (2, 6);",
        )
        .unwrap();
        conn
    }

    fn ids(sql: &str, params: &[&str]) -> Result<Vec<i64>> {
        let params: Vec<Param> = params.iter().map(|p| Param::parse(p).unwrap()).collect();
        run_ids(&conn(), sql, &params, "--where", &SqlLimits::default())
    }

    fn err(sql: &str, params: &[&str]) -> String {
        ids(sql, params).unwrap_err().to_string()
    }

    #[test]
    fn tells_queries_from_expressions() {
        assert_eq!(form("depth = 7").unwrap(), Form::Expression);
        assert_eq!(form("(depth = 7)").unwrap(), Form::Expression);
        assert_eq!(
            form("(SELECT COUNT(*) FROM runs) > 1").unwrap(),
            Form::Expression
        );
        assert_eq!(
            form("select id from runs").unwrap(),
            Form::Query("select id from runs")
        );
        assert_eq!(
            form(" ((SELECT id FROM runs)) ").unwrap(),
            Form::Query("SELECT id FROM runs")
        );
        assert_eq!(
            form("-- best\n/* runs */ WITH t AS (SELECT 1) SELECT * FROM t").unwrap(),
            Form::Query("-- best\n/* runs */ WITH t AS (SELECT 1) SELECT * FROM t")
        );
        assert_eq!(form("VALUES (1)").unwrap(), Form::Query("VALUES (1)"));
        // Words inside strings and quoted names do not count.
        assert_eq!(form("'SELECT' = source_path").unwrap(), Form::Expression);
        assert_eq!(form("(a) = (')')").unwrap(), Form::Expression);
        let e = form("DELETE FROM runs").unwrap_err().to_string();
        assert!(e.contains("is a DELETE statement"), "{e}");
        let e = form("  insert into runs values (1)")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is an INSERT statement"), "{e}");
    }

    #[test]
    fn a_query_returns_exactly_its_runs_whatever_its_first_id() {
        // The first id 0 (false as a scalar) and 1 (true): both exact.
        assert_eq!(
            ids("SELECT id FROM runs WHERE max_score > 400", &[]).unwrap(),
            [0, 1]
        );
        assert_eq!(
            ids("SELECT id FROM runs WHERE max_score > 600", &[]).unwrap(),
            [1]
        );
        assert_eq!(
            ids("(SELECT id FROM runs WHERE max_score > 600)", &[]).unwrap(),
            [1]
        );
        assert_eq!(
            ids(
                "SELECT run_id FROM run_details WHERE depth = 6 ORDER BY run_id DESC",
                &[]
            )
            .unwrap(),
            [0, 2]
        );
        assert_eq!(
            ids(
                "WITH best AS (SELECT id FROM runs ORDER BY max_score DESC LIMIT 2) SELECT id FROM best",
                &[]
            )
            .unwrap(),
            [0, 1]
        );
        assert_eq!(ids("VALUES (2), (0), (2)", &[]).unwrap(), [0, 2]);
        assert_eq!(
            ids("SELECT id FROM runs WHERE max_score > 10000", &[]).unwrap(),
            [] as [i64; 0]
        );
    }

    #[test]
    fn a_query_that_is_not_run_ids_is_refused() {
        let e = err("SELECT id, seed FROM runs", &[]);
        assert!(e.contains("returns 2 columns (id, seed)"), "{e}");
        let e = err("SELECT max_score FROM runs", &[]);
        assert!(
            e.contains("3 values that are not a run id of the pack: 50, 500, 900"),
            "{e}"
        );
        let e = err("SELECT NULL", &[]);
        assert!(e.contains("row 1 of the query's result is NULL"), "{e}");
        let e = err("SELECT 'x' FROM runs", &[]);
        assert!(e.contains("\"x\" (text)"), "{e}");
        let e = err("SELECT id * 1.5 FROM runs WHERE id = 1", &[]);
        assert!(e.contains("1.5 (a real)"), "{e}");
        let e = err("SELECT id FROM runs; DELETE FROM runs", &[]);
        assert!(e.contains("only one statement"), "{e}");
        let e = err("WITH t AS (SELECT 1) DELETE FROM runs", &[]);
        assert!(e.contains("would change metadata.db"), "{e}");
        let e = err("SELECT id FROM runs WHERE depth = 7", &[]);
        assert!(
            e.contains(
                "no column depth in the tables the query reads: depth is a column of run_details"
            ),
            "{e}"
        );
        let e = err("SELECT id FROM runz", &[]);
        assert!(e.contains("no such table: runz"), "{e}");
        let e = err("SELECT id FROM runs WHERE max_scor > 1", &[]);
        assert!(e.contains("did you mean max_score?"), "{e}");
        let e = err("(SELECT id FROM runs WHERE > 1)", &[]);
        assert!(e.contains("syntax error at \"> 1)\" (column 28)"), "{e}");
    }

    #[test]
    fn parameters_bind_exactly() {
        assert_eq!(
            ids(
                "SELECT id FROM runs WHERE max_score BETWEEN ? AND ?",
                &["100", "600"]
            )
            .unwrap(),
            [0]
        );
        assert_eq!(ids("max_score > ?", &["400"]).unwrap(), [0, 1]);
        assert_eq!(
            ids("max_score > :min AND depth = @d", &["d=7", "min=400"]).unwrap(),
            [1]
        );
        assert_eq!(
            ids("depth = ?2 AND steps > ?1", &["4", "6"]).unwrap(),
            [0, 2]
        );
        assert_eq!(ids("max_score > $m", &["m=400.5"]).unwrap(), [0, 1]);
        let e = err("max_score > ?", &[]);
        assert!(e.contains("1 positional parameter (?) and 0"), "{e}");
        let e = err("max_score > ?", &["1", "2"]);
        assert!(
            e.contains("2 positional parameter values were given"),
            "{e}"
        );
        let e = err("max_score > :min", &[]);
        assert!(
            e.contains(":min has no value: give a value named min"),
            "{e}"
        );
        let e = err("max_score > :min", &["max=3"]);
        assert!(e.contains("no parameter :max (it has :min)"), "{e}");
        let e = err("max_score > :min", &["min=3", "min=4"]);
        assert!(e.contains("given twice"), "{e}");
        let e = err("max_score > 1", &["min=3"]);
        assert!(e.contains("it has no named parameters"), "{e}");
    }

    #[test]
    fn params_parse_as_typed_values() {
        let p = |t: &str| Param::parse(t).unwrap();
        assert_eq!(p("-3").value, Value::Integer(-3));
        assert_eq!(p("1e3").value, Value::Real(1000.0));
        assert_eq!(p("null").value, Value::Null);
        assert_eq!(p("abc").value, Value::Text("abc".into()));
        assert_eq!(p("inf").value, Value::Text("inf".into()));
        assert_eq!(p("'it''s'").value, Value::Text("it's".into()));
        assert_eq!(p("a=b=c").name.as_deref(), Some("a"));
        assert_eq!(p("a=b=c").value, Value::Text("b=c".into()));
        assert_eq!(p("1=1").name, None);
        assert!(Param::parse("'open").is_err());
        assert_eq!(p("min='x y'").to_string(), "min='x y'");
        assert_eq!(p("2.5").to_string(), "2.5");
    }

    #[test]
    fn expression_errors_name_the_problem() {
        assert_eq!(ids("max_score > 600", &[]).unwrap(), [1]);
        assert_eq!(ids("depth = 6", &[]).unwrap(), [0, 2]);
        let e = err("nope > 1", &[]);
        assert!(e.contains("no column nope"), "{e}");
        assert!(e.contains("max_score"), "{e}");
        let e = err("max_score >", &[]);
        assert!(
            e.contains("the expression is incomplete: it ends after \"max_score >\""),
            "{e}"
        );
        let e = err("max_score > AND depth = 6", &[]);
        assert!(
            e.contains("syntax error at \"AND depth = \" (column 13)"),
            "{e}"
        );
        let e = err("depth = 6)", &[]);
        assert!(e.contains("the ')' at column 10 closes nothing"), "{e}");
    }

    #[test]
    fn an_expression_cannot_become_a_compound_query() {
        for sql in [
            "0) UNION SELECT 1000000 WHERE (1",
            "0) UNION SELECT id FROM runs WHERE (1",
            "1) LIMIT 1 --",
            // Inside a `$name(…)` parameter, SQLite's tokenizer takes the quote and the
            // comment as part of the name: the ')' after them is real.
            "$a(')\n) UNION SELECT 7 WHERE (1 = '1'",
            "$a(--)\n) UNION SELECT 7 WHERE ((1",
        ] {
            let e = err(sql, &[]);
            assert!(e.contains("parentheses must pair up"), "{sql}: {e}");
        }
        let e = err("1\0) UNION SELECT 9 --", &[]);
        assert!(e.contains("NUL character"), "{e}");
        let e = err("-- nothing but a comment", &[]);
        assert!(e.contains("the expression is empty"), "{e}");
        // Parentheses in strings, names and comments do not count.
        let e = err("depth = 6 AND ')' <> [(] -- )", &[]);
        assert!(e.contains("no column ("), "{e}");
        assert_eq!(
            ids("depth = 6 AND ')' <> '(' /* ) */", &[]).unwrap(),
            [0, 2]
        );
    }

    #[test]
    fn every_id_a_query_returns_is_a_run_id() {
        let e = err("SELECT id FROM runs UNION SELECT 1000000", &[]);
        assert!(
            e.contains("1 value that is not a run id of the pack: 1000000"),
            "{e}"
        );
        // An endless stream of unknown ids stops once enough are kept for the message.
        let e = err(
            "WITH RECURSIVE t(x) AS (SELECT 10 UNION ALL SELECT x + 1 FROM t) SELECT x FROM t",
            &[],
        );
        assert!(
            e.contains("more than 1000 values that are not a run id"),
            "{e}"
        );
        // The same id endlessly is one id, and the time limit ends it.
        let quick = SqlLimits {
            time: Duration::from_millis(100),
            ..SqlLimits::default()
        };
        let e = run_ids(
            &conn(),
            "WITH RECURSIVE t(x) AS (SELECT 1 UNION ALL SELECT x FROM t) SELECT x FROM t",
            &[],
            "--where",
            &quick,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("stopped after 0.1 s, its time limit"), "{e}");
        assert!(e.contains("SqlLimits::time"), "{e}");
    }

    #[test]
    fn comments_may_start_the_text() {
        assert_eq!(ids("-- deep ones\ndepth = 7", &[]).unwrap(), [1]);
        assert_eq!(ids("/* deep */ depth = 7", &[]).unwrap(), [1]);
        assert_eq!(
            ids("-- best\nSELECT id FROM runs WHERE max_score > 600", &[]).unwrap(),
            [1]
        );
    }

    #[test]
    fn parameter_names_are_read_as_sqlite_reads_them() {
        assert_eq!(ids("max_score > :é", &["é=400"]).unwrap(), [0, 1]);
        assert_eq!(ids("max_score > $a::b", &["a::b=400"]).unwrap(), [0, 1]);
        assert_eq!(ids("max_score > $lim(hi)", &["lim(hi)=600"]).unwrap(), [1]);
        assert_eq!(ids("max_score > :1", &[":1=600"]).unwrap(), [1]);
        assert_eq!(ids("max_score > #m", &["m=600"]).unwrap(), [1]);
        let e = err("max_score > $a::b", &["a=1"]);
        assert!(e.contains("no parameter :a (it has $a::b)"), "{e}");
        let e = err("max_score > $a::b", &[]);
        assert!(
            e.contains("$a::b has no value: give a value named a::b"),
            "{e}"
        );
        let p = |t: &str| Param::parse(t).unwrap();
        assert_eq!(p("a::b=1").name.as_deref(), Some("a::b"));
        assert_eq!(p("$a(x=1)=2").name.as_deref(), Some("a(x=1)"));
        assert_eq!(p("$a(x=1)=2").value, Value::Integer(2));
        assert_eq!(p("é=3").name.as_deref(), Some("é"));
        assert_eq!(p(":1=5").to_string(), ":1=5");
        assert_eq!(p("1=5").name, None);
        assert_eq!(p("a:b=1").name, None);
    }

    #[test]
    fn near_misses() {
        let cols: Vec<String> = ["id", "max_score", "depth", "highest_tile"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(nearest("max_scor", &cols), Some("max_score"));
        assert_eq!(nearest("maxscore", &cols), Some("max_score"));
        assert_eq!(nearest("dept", &cols), Some("depth"));
        assert_eq!(nearest("banana", &cols), None);
        assert_eq!(nearest("x", &cols), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
