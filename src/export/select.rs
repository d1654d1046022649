//! Run selection for `export`: `--runs 0,5,9-12` (ids and inclusive ranges) and `--where EXPR`
//! (an SQL expression over `runs` left-joined with `run_details`), intersected when both are
//! given; neither selects every run.

use std::ops::RangeInclusive;

use anyhow::{Result, bail};
use rusqlite::Connection;

use super::{Selection, SourcePack};
use crate::format::metadata::{self, RunRow};

/// Parses `0,5,9-12` into the inclusive id ranges it names.
pub fn parse_run_list(text: &str) -> Result<Vec<RangeInclusive<u32>>, String> {
    let number = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| format!("{s:?} is not a run id (a number 0..=4294967295)"))
    };
    let mut ranges = Vec::new();
    for part in text.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(format!("empty item in {text:?}"));
        }
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(part)?, number(part)?),
        };
        if a > b {
            return Err(format!("range {part} runs backwards"));
        }
        ranges.push(a..=b);
    }
    Ok(ranges)
}

/// The selection given by `--runs` and `--where` (both optional).
pub fn select(
    source: &SourcePack,
    runs: Option<&[RangeInclusive<u32>]>,
    where_sql: Option<&str>,
) -> Result<Selection> {
    let mut keep: Vec<bool> = vec![true; source.runs.len()];
    if let Some(ranges) = runs {
        keep = vec![false; source.runs.len()];
        let mut unknown = Vec::new();
        for r in ranges {
            let slots = slots_in(&source.runs, r);
            keep[slots.clone()].fill(true);
            missing_ids(
                &source.runs,
                r,
                slots,
                10 - unknown.len().min(10),
                &mut unknown,
            );
        }
        if !unknown.is_empty() {
            unknown.sort_unstable();
            unknown.dedup();
            let list: Vec<String> = unknown.iter().take(10).map(u32::to_string).collect();
            bail!(
                "--runs names run ids the pack does not have: {}{} (it has {} runs{})",
                list.join(", "),
                if unknown.len() >= 10 { ", …" } else { "" },
                source.runs.len(),
                id_span(source)
            );
        }
    }
    if let Some(expr) = where_sql {
        let matched = where_ids(&source.db()?, expr)?;
        for (slot, run) in source.runs.iter().enumerate() {
            keep[slot] &= matched.binary_search(&run.id).is_ok();
        }
    }
    let slots: Vec<usize> = (0..keep.len()).filter(|&s| keep[s]).collect();
    Ok(Selection::new(source, slots))
}

/// The slots of the runs (sorted by id) whose ids fall in `r`.
fn slots_in(runs: &[RunRow], r: &RangeInclusive<u32>) -> std::ops::Range<usize> {
    let lo = runs.partition_point(|run| run.id < i64::from(*r.start()));
    let hi = runs.partition_point(|run| run.id <= i64::from(*r.end()));
    lo..hi
}

/// Adds up to `limit` ids of `r` that no run of `slots` has (walks both in order, so the
/// cost is bounded by the pack's runs, not by the size of the range).
fn missing_ids(
    runs: &[RunRow],
    r: &RangeInclusive<u32>,
    slots: std::ops::Range<usize>,
    limit: usize,
    out: &mut Vec<u32>,
) {
    let mut present = runs[slots]
        .iter()
        .map(|run| u64::from(run.id as u32))
        .peekable();
    let end = out.len() + limit;
    let mut id = u64::from(*r.start());
    // Each step either passes a run of the pack or records a missing id.
    while id <= u64::from(*r.end()) && out.len() < end {
        if present.next_if_eq(&id).is_none() {
            out.push(id as u32);
        }
        id += 1;
    }
}

fn id_span(source: &SourcePack) -> String {
    match (source.runs.first(), source.runs.last()) {
        (Some(a), Some(b)) => format!(", ids {}..={}", a.id, b.id),
        _ => String::new(),
    }
}

/// The run ids (ascending) for which `expr` holds. The expression sees the columns of `runs`
/// and, when the pack has it, `run_details` (no column name is in both).
pub fn where_ids(conn: &Connection, expr: &str) -> Result<Vec<i64>> {
    let details = metadata::has_table(conn, "run_details")?;
    let from = if details {
        "runs LEFT JOIN run_details ON run_details.run_id = runs.id"
    } else {
        "runs"
    };
    // The expression on lines of its own, so a trailing `-- comment` cannot swallow the rest.
    let prefix = format!("SELECT runs.id FROM {from} WHERE (\n");
    let sql = format!("{prefix}{expr}\n) ORDER BY runs.id");
    let explain = |e: rusqlite::Error| {
        let columns = columns(conn, details).unwrap_or_default();
        anyhow::anyhow!("{}", explain_where_error(expr, prefix.len(), &e, &columns))
    };
    let mut stmt = conn.prepare(&sql).map_err(explain)?;
    let ids = stmt
        .query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<i64>>>())
        .map_err(explain)?;
    Ok(ids)
}

/// Says what is wrong with a `--where` expression in terms of the user's own text: where a
/// syntax error is (a caret under it, or "incomplete" when SQLite only noticed past its end),
/// and for an unknown column the nearest known one.
fn explain_where_error(
    expr: &str,
    prefix_len: usize,
    e: &rusqlite::Error,
    columns: &[String],
) -> String {
    let message = sqlite_message(e);
    let mut out = format!("--where {expr:?}: ");
    let offset = match e {
        rusqlite::Error::SqlInputError { offset, .. } if *offset >= 0 => Some(*offset as usize),
        _ => None,
    };
    if let Some(name) = message.strip_prefix("no such column: ") {
        out.push_str(&format!("no column {name}"));
        if let Some(near) = nearest(name, columns) {
            out.push_str(&format!("; did you mean {near}?"));
        }
    } else if let Some(problem) = unbalanced(expr) {
        out.push_str(&problem);
    } else if message.contains("syntax error") || message.contains("incomplete input") {
        match offset.map(|o| o.checked_sub(prefix_len)) {
            Some(Some(at)) if at < expr.len() => {
                let near: String = expr[at..].chars().take(12).collect();
                out.push_str(&format!(
                    "syntax error at {near:?} (column {})\n  {expr}\n  {}^",
                    at + 1,
                    " ".repeat(expr[..at].chars().count())
                ));
            }
            _ => out.push_str(&format!(
                "the expression is incomplete: it ends after {:?}",
                expr.trim_end()
            )),
        }
    } else {
        out.push_str(&message);
    }
    out.push_str(&format!(
        "\n(the expression can use these columns: {})",
        columns.join(", ")
    ));
    out
}

/// Parentheses that do not pair up in `expr` (outside quoted strings and identifiers).
fn unbalanced(expr: &str) -> Option<String> {
    let mut open: Vec<usize> = Vec::new();
    let mut quote: Option<char> = None;
    for (col, c) in expr.chars().enumerate() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"' | '`') => quote = Some(c),
            (None, '(') => open.push(col),
            (None, ')') if open.pop().is_none() => {
                return Some(format!(
                    "the ')' at column {} closes nothing\n  {expr}\n  {}^",
                    col + 1,
                    " ".repeat(col)
                ));
            }
            _ => {}
        }
    }
    open.first().map(|&col| {
        format!(
            "the '(' at column {} is never closed\n  {expr}\n  {}^",
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
        rusqlite::Error::MultipleStatement => "only one expression is allowed (found ';')".into(),
        other => other.to_string(),
    }
}

/// The column names a `--where` expression can use.
fn columns(conn: &Connection, details: bool) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for table in ["runs", "run_details"] {
        if table == "run_details" && !details {
            continue;
        }
        let mut stmt = conn.prepare(&format!("PRAGMA table_info({table})"))?;
        let names = stmt
            .query_map([], |r| r.get::<_, String>(1))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        out.extend(names);
    }
    Ok(out)
}

/// `runs` and `--where` that select nothing are an error: an empty export is almost surely a
/// mistake in the expression.
pub fn require_some(selection: &Selection, what: &str) -> Result<()> {
    if selection.is_empty() {
        bail!("{what} selects no runs; nothing was written");
    }
    Ok(())
}

/// Describes a selection for the summary and for `session` of an exported pack.
pub fn describe(runs: Option<&str>, where_sql: Option<&str>) -> String {
    match (runs, where_sql) {
        (None, None) => "all runs".to_string(),
        (Some(r), None) => format!("--runs {r}"),
        (None, Some(w)) => format!("--where {w}"),
        (Some(r), Some(w)) => format!("--runs {r} --where {w}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_ranges() {
        let ids = parse_run_list("0,5, 9-12").unwrap();
        assert_eq!(ids, [0..=0, 5..=5, 9..=12]);
        assert_eq!(parse_run_list("0-4294967295").unwrap(), [0..=u32::MAX]);
        assert!(parse_run_list("3-1").is_err());
        assert!(parse_run_list("1,,2").is_err());
        assert!(parse_run_list("x").is_err());
        assert!(parse_run_list("-1").is_err());
    }

    #[test]
    fn finds_unknown_ids_without_walking_huge_ranges() {
        let runs: Vec<RunRow> = [0, 1, 2, 5]
            .map(|id| RunRow {
                id,
                seed: 0,
                steps: 0,
                max_score: 0,
                highest_tile: 0,
            })
            .to_vec();
        let missing = |r: RangeInclusive<u32>| {
            let mut out = Vec::new();
            missing_ids(&runs, &r, slots_in(&runs, &r), 10, &mut out);
            out
        };
        assert_eq!(slots_in(&runs, &(1..=4)), 1..3);
        assert_eq!(missing(0..=2), [] as [u32; 0]);
        assert_eq!(missing(1..=6), [3, 4, 6]);
        assert_eq!(missing(4..=u32::MAX).len(), 10);
        assert_eq!(missing(4..=u32::MAX)[..3], [4, 6, 7]);
    }

    #[test]
    fn where_errors_name_the_problem() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, seed BIGINT NOT NULL, steps INT NOT NULL,
                                max_score INT NOT NULL, highest_tile INT NOT NULL);
             CREATE TABLE run_details (run_id INTEGER PRIMARY KEY, depth INT);
             INSERT INTO runs VALUES (0, 1, 10, 500, 64), (1, 2, 20, 900, 128);
             INSERT INTO run_details VALUES (0, 6), (1, 7);",
        )
        .unwrap();
        assert_eq!(where_ids(&conn, "max_score > 600").unwrap(), [1]);
        assert_eq!(where_ids(&conn, "depth = 6").unwrap(), [0]);
        let e = where_ids(&conn, "nope > 1").unwrap_err().to_string();
        assert!(e.contains("no column nope"), "{e}");
        assert!(e.contains("max_score"), "{e}");
        let e = where_ids(&conn, "max_scor > 1").unwrap_err().to_string();
        assert!(e.contains("did you mean max_score?"), "{e}");
        let e = where_ids(&conn, "max_score >").unwrap_err().to_string();
        assert!(
            e.contains("incomplete: it ends after \"max_score >\""),
            "{e}"
        );
        let e = where_ids(&conn, "max_score > AND depth = 6")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("syntax error at \"AND depth = \" (column 13)"),
            "{e}"
        );
        let e = where_ids(&conn, "depth = 6)").unwrap_err().to_string();
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
