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
//! A query must return one column of integers that are run ids of the pack; NULL, text, reals
//! and unknown ids are errors, not silently dropped rows. Parameters (`?`, `?NNN`, `:name`,
//! `@name`, `$name`) are bound from `--param` values and must match exactly: an unbound
//! parameter would be NULL and silently select nothing.

use std::fmt;

use anyhow::{Result, anyhow, bail};
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
    /// `min` for `:min`, `@min` or `$min`; None for a positional `?`.
    pub name: Option<String>,
    pub value: Value,
}

impl Param {
    /// Parses `--param` text: `NAME=VALUE` binds `:NAME` (also `@NAME`, `$NAME`), a bare
    /// `VALUE` the next positional `?`. A value is an integer, a real, `NULL`, `'quoted text'`
    /// (always text), or else the text as written.
    ///
    /// ```
    /// use dataset_packer::Param;
    /// use rusqlite::types::Value;
    /// assert_eq!(Param::parse("50000").unwrap().value, Value::Integer(50000));
    /// let p = Param::parse("min=0.5").unwrap();
    /// assert_eq!((p.name.as_deref(), p.value), (Some("min"), Value::Real(0.5)));
    /// assert_eq!(Param::parse("'42'").unwrap().value, Value::Text("42".into()));
    /// ```
    pub fn parse(text: &str) -> Result<Param, String> {
        let (name, value) = match text.split_once('=') {
            Some((name, value)) if is_identifier(name) => (Some(name.to_string()), value),
            _ => (None, text),
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
            write!(f, "{name}=")?;
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

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
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
        w if NOT_QUERIES.contains(&w) && first_word(sql).eq_ignore_ascii_case(w) => bail!(
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

/// Splits SQL text into the pieces that matter here: each significant character with its byte
/// offset, skipping whitespace, comments, and the insides of strings and quoted identifiers
/// (a quoted span is reported once, as its opening character).
fn significant(sql: &str) -> Vec<(usize, char)> {
    let mut out = Vec::new();
    let mut chars = sql.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '-' if chars.peek().map(|p| p.1) == Some('-') => {
                for (_, c) in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek().map(|p| p.1) == Some('*') => {
                chars.next();
                let mut star = false;
                for (_, c) in chars.by_ref() {
                    if star && c == '/' {
                        break;
                    }
                    star = c == '*';
                }
            }
            '\'' | '"' | '`' | '[' => {
                let close = if c == '[' { ']' } else { c };
                out.push((at, c));
                // A doubled quote inside is an escaped quote: leaving and re-entering the
                // quoted span at once gives the same result.
                for (_, c) in chars.by_ref() {
                    if c == close {
                        break;
                    }
                }
            }
            c => out.push((at, c)),
        }
    }
    out
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

/// The run ids (ascending, each once) that `sql` selects, with `params` bound. `option` names
/// where the text came from (`--where`), for messages.
pub fn run_ids(conn: &Connection, sql: &str, params: &[Param], option: &str) -> Result<Vec<i64>> {
    let details = metadata::has_table(conn, "run_details")?;
    let explain = |noun: &'static str, prefix_len: usize| {
        move |e: rusqlite::Error| {
            let columns = columns(conn, details).unwrap_or_default();
            anyhow!(
                "{}",
                explain_error(option, sql, noun, prefix_len, &e, &columns)
            )
        }
    };
    let refuse = |why: String| anyhow!("{option} {sql:?}: {why}");
    match form(sql).map_err(|e| anyhow!("{option} {e}"))? {
        Form::Expression => {
            let from = if details {
                "runs LEFT JOIN run_details ON run_details.run_id = runs.id"
            } else {
                "runs"
            };
            // The expression on lines of its own, so a trailing `-- comment` cannot swallow
            // the rest.
            let prefix = format!("SELECT runs.id FROM {from} WHERE (\n");
            let text = format!("{prefix}{sql}\n) ORDER BY runs.id");
            let mut stmt = conn
                .prepare(&text)
                .map_err(explain("expression", prefix.len()))?;
            bind(&mut stmt, params).map_err(refuse)?;
            collect_ids(&mut stmt).map_err(explain("expression", prefix.len()))
        }
        Form::Query(query) => {
            let offset = query.as_ptr() as usize - sql.as_ptr() as usize;
            let mut stmt = conn.prepare(query).map_err(|e| {
                // Offsets SQLite gives are in `query`; the user sees `sql`.
                explain("query", 0)(shift_offset(e, offset))
            })?;
            check_query_shape(&stmt).map_err(refuse)?;
            bind(&mut stmt, params).map_err(refuse)?;
            let mut ids = query_ids(&mut stmt)
                .map_err(explain("query", 0))?
                .map_err(refuse)?;
            ids.sort_unstable();
            ids.dedup();
            check_known(conn, &ids).map_err(refuse)?;
            Ok(ids)
        }
    }
}

/// A run selection as the user wrote it: `--where SQL` and its `--param` values. What the
/// library's readers (`stats::gather`) take, so they need nothing of the command line.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub sql: String,
    pub params: Vec<Param>,
}

impl RunFilter {
    /// The run ids the filter selects (ascending); errors name `--where`.
    pub fn run_ids(&self, conn: &Connection) -> Result<Vec<i64>> {
        run_ids(conn, &self.sql, &self.params, "--where")
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
            "the SQL has {} positional parameter{} (?) and {} positional --param value{} {} given; give one --param VALUE per ?, in order",
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
                "--param {param}: the SQL has no parameter :{key} ({})",
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
            (None, _) => return Err(format!("{name} has no value: give --param {key}=VALUE")),
            (Some(_), Some(_)) => return Err(format!("--param {key}=… is given twice")),
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

/// The ids a WHERE-expression statement returns (always integers from `runs.id`).
fn collect_ids(stmt: &mut Statement) -> rusqlite::Result<Vec<i64>> {
    let mut rows = stmt.raw_query();
    let mut ids = Vec::new();
    while let Some(row) = rows.next()? {
        ids.push(row.get(0)?);
    }
    Ok(ids)
}

/// The values a query returns, each checked to be an integer: SQLite's errors as the outer
/// `Err`, a value that is not a run id as the inner one, with the reason.
fn query_ids(stmt: &mut Statement) -> rusqlite::Result<Result<Vec<i64>, String>> {
    let mut rows = stmt.raw_query();
    let mut ids = Vec::new();
    while let Some(row) = rows.next()? {
        match row.get_ref(0)? {
            ValueRef::Integer(id) => ids.push(id),
            other => {
                return Ok(Err(format!(
                    "row {} of the query's result is {}, not a run id; the query must return the run ids (an integer column such as runs.id)",
                    ids.len() + 1,
                    describe_value(other)
                )));
            }
        }
    }
    Ok(Ok(ids))
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

/// Every id a query returned is a run of the pack.
fn check_known(conn: &Connection, ids: &[i64]) -> Result<(), String> {
    let known = metadata::read_run_ids(conn).map_err(|e| e.to_string())?;
    let unknown: Vec<String> = ids
        .iter()
        .filter(|id| known.binary_search(id).is_err())
        .map(i64::to_string)
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let span = match (known.first(), known.last()) {
        (Some(a), Some(b)) => format!("ids {a}..={b}"),
        _ => "no runs".into(),
    };
    Err(format!(
        "the query returns {} value{} that {} not a run id of the pack: {}{} (the pack has {} runs, {span}); the query must return run ids, such as runs.id",
        unknown.len(),
        plural(unknown.len()),
        if unknown.len() == 1 { "is" } else { "are" },
        unknown
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
        if unknown.len() > 5 { ", …" } else { "" },
        known.len()
    ))
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

/// Parentheses that do not pair up in `sql` (outside quoted strings and identifiers).
fn unbalanced(sql: &str) -> Option<String> {
    let mut open: Vec<usize> = Vec::new();
    let mut quote: Option<char> = None;
    for (col, c) in sql.chars().enumerate() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"' | '`') => quote = Some(c),
            (None, '(') => open.push(col),
            (None, ')') if open.pop().is_none() => {
                return Some(format!(
                    "the ')' at column {} closes nothing\n  {sql}\n  {}^",
                    col + 1,
                    " ".repeat(col)
                ));
            }
            _ => {}
        }
    }
    open.first().map(|&col| {
        format!(
            "the '(' at column {} is never closed\n  {sql}\n  {}^",
            col + 1,
            " ".repeat(col)
        )
    })
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
    fn run_ids_reads_expressions_and_queries() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, seed INT, steps INT, max_score INT, highest_tile INT);
             INSERT INTO runs VALUES (0, 7, 10, 500, 64), (1, 8, 20, 900, 128), (2, 9, 30, 100, 16);",
        ).unwrap();
        assert_eq!(
            run_ids(&conn, "max_score > 400", &[], "--where").unwrap(),
            [0, 1]
        );
        let over = [Param::parse("400").unwrap()];
        assert_eq!(
            run_ids(
                &conn,
                "SELECT id FROM runs WHERE max_score > ?",
                &over,
                "--where"
            )
            .unwrap(),
            [0, 1]
        );
        assert!(run_ids(&conn, "SELECT id, seed FROM runs", &[], "--where").is_err());
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
        run_ids(&conn(), sql, &params, "--where")
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
        assert!(e.contains("2 positional --param values were given"), "{e}");
        let e = err("max_score > :min", &[]);
        assert!(
            e.contains(":min has no value: give --param min=VALUE"),
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
