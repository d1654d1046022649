//! `--where` end to end through the real binary (`stats`, `export`): an expression cannot
//! smuggle in a second query, every selected id must be a run id of the pack, a query that
//! never ends or grows without end is stopped by `--sql-timeout` / `--sql-memory` with a
//! message, an expression may start with a comment, and `--param` names follow SQLite's rules
//! (issue 30, item 6). Each selection is checked against what rusqlite selects from the same
//! metadata.db, and each refusal leaves no output behind.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

fn fixture_pack(t: &Path) -> PathBuf {
    let out = t.join("p");
    pack(&fixture("raw"), &out, &[]);
    out
}

/// The run ids `sql` (a WHERE expression over runs ⋈ run_details) selects, by rusqlite.
fn where_ids(pack: &Path, sql: &str) -> Vec<u64> {
    db(pack)
        .prepare(&format!(
            "SELECT id FROM runs LEFT JOIN run_details ON run_id = id WHERE ({sql}) ORDER BY id"
        ))
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// `stats --json --where …`: the number of runs it describes.
fn stats_runs(pack: &Path, extra: &[&str]) -> u64 {
    let mut args = vec!["stats", s(pack), "--json"];
    args.extend_from_slice(extra);
    let v: Value = serde_json::from_str(&run_ok(&args)).unwrap();
    v["runs"].as_u64().unwrap()
}

/// The run ids a JSONL export holds (each row names its run when there are several).
fn exported_runs(file: &Path) -> Vec<u64> {
    let ids: std::collections::BTreeSet<u64> = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["run_id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    ids.into_iter().collect()
}

/// Runs the binary, asserting it fails with exit code 1; its stderr.
fn refused(args: &[&str]) -> String {
    let out = run(args);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
    stderr(&out)
}

#[test]
fn an_expression_cannot_smuggle_in_a_second_query() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path());
    for sql in [
        "0) UNION SELECT 1000000 WHERE (1",
        "0) UNION SELECT id FROM runs WHERE (1",
        "1) LIMIT 1 --",
        // SQLite reads `$a(')` and `$a(--)` as parameter names, so the ')' after them is real.
        "$a(')\n) UNION SELECT 7 WHERE (1 = '1'",
        "$a(--)\n) UNION SELECT 7 WHERE ((1",
    ] {
        let e = refused(&["stats", s(&pack), "--where", sql]);
        assert!(e.contains("parentheses must pair up"), "{sql}: {e}");
        let file = t.path().join("out.jsonl");
        let e = refused(&[
            "export",
            s(&pack),
            "--format",
            "jsonl",
            "--output",
            s(&file),
            "--where",
            sql,
        ]);
        assert!(e.contains("parentheses must pair up"), "{sql}: {e}");
        assert!(!file.exists(), "{sql}: a refused export wrote {file:?}");
    }
    // A full query that returns an id the pack does not have is refused, not trimmed.
    let e = refused(&[
        "stats",
        s(&pack),
        "--where",
        "SELECT id FROM runs UNION SELECT 1000000",
    ]);
    assert!(
        e.contains("1 value that is not a run id of the pack: 1000000"),
        "{e}"
    );
    // Parentheses inside strings and comments are not parentheses: this one is fine.
    let sql = "depth = 7 AND ')' <> '(' /* ) */";
    assert_eq!(
        stats_runs(&pack, &["--where", sql]),
        where_ids(&pack, "depth = 7").len() as u64
    );
}

const ENDLESS: &str =
    "SELECT x FROM (WITH RECURSIVE t(x) AS (SELECT 0 UNION ALL SELECT x FROM t) SELECT x FROM t)";
const GROWING: &str = "WITH RECURSIVE t(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM t) \
     SELECT length(group_concat(hex(randomblob(1000)))) % 1 FROM t";

#[test]
fn a_selection_that_never_ends_or_grows_without_end_is_stopped() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path());
    let e = refused(&[
        "stats",
        s(&pack),
        "--sql-timeout",
        "0.5",
        "--where",
        ENDLESS,
    ]);
    assert!(e.contains("stopped after 0.5 s, its time limit"), "{e}");
    assert!(e.contains("(see --sql-timeout)"), "{e}");
    let file = t.path().join("out.jsonl");
    let e = refused(&[
        "export",
        s(&pack),
        "--format",
        "jsonl",
        "--output",
        s(&file),
        "--sql-timeout",
        "0.5",
        "--where",
        &format!("id IN ({ENDLESS})"),
    ]);
    assert!(e.contains("its time limit"), "{e}");
    assert!(!file.exists());
    let e = refused(&[
        "stats",
        s(&pack),
        "--sql-memory",
        "32MiB",
        "--where",
        GROWING,
    ]);
    assert!(e.contains("more than 32.0 MiB of memory, its limit"), "{e}");
    assert!(e.contains("(see --sql-memory)"), "{e}");
    let out = run(&["stats", s(&pack), "--sql-timeout", "0", "--where", "1"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(stderr(&out).contains("not a number of seconds"));
}

#[test]
fn an_expression_may_start_with_a_comment() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path());
    let want = where_ids(&pack, "depth = 7");
    assert!(!want.is_empty());
    for sql in [
        "-- the deep ones\ndepth = 7",
        "/* the deep ones */ depth = 7",
    ] {
        assert_eq!(stats_runs(&pack, &["--where", sql]), want.len() as u64);
        let file = t.path().join("deep.jsonl");
        run_ok(&[
            "export",
            s(&pack),
            "--format",
            "jsonl",
            "--output",
            s(&file),
            "--overwrite",
            "--where",
            sql,
        ]);
        assert_eq!(exported_runs(&file), want, "{sql}");
    }
    let e = refused(&["stats", s(&pack), "--where", "-- nothing else"]);
    assert!(e.contains("the expression is empty"), "{e}");
}

#[test]
fn parameter_names_follow_sqlite() {
    let t = tempfile::tempdir().unwrap();
    let pack = fixture_pack(t.path());
    let want = where_ids(&pack, "max_score > 3000").len() as u64;
    assert!(want > 0);
    for (sql, param) in [
        ("max_score > :é", "é=3000"),
        ("max_score > $a::b", "a::b=3000"),
        ("max_score > $lim(hi)", "lim(hi)=3000"),
        ("max_score > :1", ":1=3000"),
        ("max_score > #m", "m=3000"),
        ("max_score > @m", "@m=3000"),
    ] {
        assert_eq!(
            stats_runs(&pack, &["--where", sql, "--param", param]),
            want,
            "{sql} {param}"
        );
    }
    let e = refused(&[
        "stats",
        s(&pack),
        "--where",
        "max_score > $a::b",
        "--param",
        "a=1",
    ]);
    assert!(e.contains("no parameter :a (it has $a::b)"), "{e}");
    let e = refused(&["stats", s(&pack), "--where", "max_score > :é"]);
    assert!(
        e.contains(":é has no value: give a value named é") && e.contains("(see --param)"),
        "{e}"
    );
}
