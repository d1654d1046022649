//! `export` end to end: JSONL folders pack back into byte-identical shards, single JSONL files
//! hold the same lines, Parquet reads back in pyarrow equal to the shards, `--where` selects
//! what NumPy + sqlite3 select, subset packs validate, and bad requests fail clearly without
//! leaving anything behind.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

fn export(pack: &Path, format: &str, output: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "export",
        s(pack),
        "--format",
        format,
        "--output",
        s(output),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    run_ok(&args)
}

fn export_err(pack: &Path, format: &str, output: &Path, extra: &[&str]) -> (i32, String) {
    let mut args = vec![
        "export",
        s(pack),
        "--format",
        format,
        "--output",
        s(output),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let out = run(&args);
    assert!(!out.status.success(), "export {extra:?} should fail");
    (out.status.code().unwrap(), stderr(&out))
}

fn fixture_pack(t: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let p = t.join(format!("pack-{name}"));
    pack(&fixture(name), &p, extra);
    p
}

fn table(pack: &Path, sql: &str) -> Vec<Vec<String>> {
    let conn = db(pack);
    let mut stmt = conn.prepare(sql).unwrap();
    let n = stmt.column_count();
    stmt.query_map([], |r| {
        (0..n)
            .map(|i| {
                let v: rusqlite::types::Value = r.get(i)?;
                Ok(format!("{v:?}"))
            })
            .collect()
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

fn gunzip(path: &Path) -> String {
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    text
}

/// `pack` of a JSONL folder export gives the source's shards byte for byte, the same runs
/// table and the same findings; checked on the quirky drop (sharded, 65536 tiles, four
/// valuation types) and on the findings drop (an illegal move played, an EV on an illegal
/// move, a step gap, an empty run).
#[test]
fn jsonl_folder_round_trips_byte_for_byte() {
    let t = tempfile::tempdir().unwrap();
    for (name, extra) in [("raw", &["--shard-rows", "300"][..]), ("findings", &[][..])] {
        let src = fixture_pack(t.path(), name, extra);
        let raw = t.path().join(format!("jsonl-{name}"));
        export(&src, "jsonl", &raw, &[]);
        let names = names(&raw);
        assert_eq!(names[0], "run-0000000000.jsonl.gz");
        assert_eq!(names[1], "run-0000000000.meta.json");
        let again = t.path().join(format!("again-{name}"));
        pack(&raw, &again, extra);
        assert_eq!(pack_bytes(&again), pack_bytes(&src), "{name}");
        assert_eq!(runs_table(&again), runs_table(&src));
        let details = "SELECT run_id, depth, game_index, num_moves, max_rank, sum_tile, seconds FROM run_details ORDER BY run_id";
        assert_eq!(table(&again, details), table(&src, details));
        // (The drop's orphan rows file is not a run, so it is not exported.)
        let counts =
            "SELECT kind, count FROM finding_counts WHERE kind != 'orphan_rows_file' ORDER BY kind";
        assert_eq!(table(&again, counts), table(&src, counts));
    }
}

/// The single-file forms hold the folder's rows files concatenated in run order, each line
/// starting with its run's id (several runs share the file); `null` stands for 0.0 on illegal
/// moves and keys come in the raw order.
#[test]
fn jsonl_single_files_hold_the_same_lines() {
    let t = tempfile::tempdir().unwrap();
    let src = fixture_pack(t.path(), "raw", &[]);
    let folder = t.path().join("folder");
    export(&src, "jsonl", &folder, &["--runs", "2-4,7"]);
    let per_run: Vec<(u32, String)> = names(&folder)
        .iter()
        .filter(|n| n.ends_with(".jsonl.gz"))
        .map(|n| {
            let id: u32 = n["run-".len()..n.len() - ".jsonl.gz".len()]
                .parse()
                .unwrap();
            (id, gunzip(&folder.join(n)))
        })
        .collect();
    let expected: String = per_run
        .iter()
        .flat_map(|(id, text)| {
            text.lines()
                .map(move |l| format!("{{\"run_id\":{id},{}\n", &l[1..]))
        })
        .collect();
    // One run alone: its lines exactly as the raw format has them.
    let one = t.path().join("run3.jsonl");
    export(&src, "jsonl", &one, &["--runs", "3"]);
    assert_eq!(
        std::fs::read_to_string(&one).unwrap(),
        per_run.iter().find(|(id, _)| *id == 3).unwrap().1
    );
    let gz = t.path().join("rows.jsonl.gz");
    export(&src, "jsonl", &gz, &["--runs", "2-4,7", "--workers", "2"]);
    assert_eq!(gunzip(&gz), expected);
    let plain = t.path().join("rows.jsonl");
    export(&src, "jsonl", &plain, &["--runs", "2-4,7"]);
    assert_eq!(std::fs::read_to_string(&plain).unwrap(), expected);

    // Keys in the raw order (checked on the text: serde_json would sort them), EVs keyed
    // up, left, right, down, and `null` for 0.0 on an illegal move.
    let line = per_run[0].1.lines().next().unwrap();
    let fields: Vec<&str> = line
        .split("\":")
        .map(|p| p.rsplit('"').next().unwrap())
        .collect();
    let keys = &fields[..fields.len() - 1];
    assert_eq!(
        keys,
        [
            "seed",
            "step_index",
            "max_rank",
            "move",
            "valuation_type",
            "board",
            "branch_evs",
            "up",
            "left",
            "right",
            "down"
        ],
        "{line}"
    );
    assert!(expected.contains(":null"));
    assert_eq!(
        serde_json::from_str::<Value>(line)
            .unwrap()
            .as_object()
            .unwrap()
            .len(),
        7
    );
    let rows = read_rows(&src);
    let selected = rows
        .iter()
        .filter(|r| [2, 3, 4, 7].contains(&u32::from_le_bytes(r[..4].try_into().unwrap())))
        .count();
    assert_eq!(expected.lines().count(), selected);
}

/// Parquet read back with pyarrow equals the shards, as one file and as a folder of parts.
#[test]
fn parquet_reads_back_equal_in_pyarrow() {
    let t = tempfile::tempdir().unwrap();
    let src = fixture_pack(t.path(), "raw", &["--shard-rows", "700"]);
    let file = t.path().join("all.parquet");
    let out = export(&src, "parquet", &file, &[]);
    assert!(out.contains("2,240 rows"), "{out}");
    let ok = python_ok("check_parquet.py", &[s(&file), s(&src)]);
    assert!(ok.starts_with("OK: 2240 rows"), "{ok}");

    let parts = t.path().join("parts");
    export(
        &src,
        "parquet",
        &parts,
        &["--shard-rows", "500", "--runs", "1,3-5,8"],
    );
    let files = names(&parts);
    assert!(
        files.len() > 1 && files[0] == "part-00000.parquet",
        "{files:?}"
    );
    let ok = python_ok(
        "check_parquet.py",
        &[s(&parts), s(&src), "--runs", "1,3,4,5,8"],
    );
    assert!(ok.starts_with("OK: "), "{ok}");

    let findings = fixture_pack(t.path(), "findings", &[]);
    let file = t.path().join("findings.parquet");
    export(&findings, "parquet", &file, &[]);
    python_ok("check_parquet.py", &[s(&file), s(&findings)]);
}

/// Run facts reach Parquet users who cannot read metadata.db: `--run-columns` puts each run's
/// `runs` and `run_details` values on its rows, and a folder export writes `runs.parquet`; both
/// equal what sqlite3 reads from metadata.db.
#[test]
fn parquet_run_columns_equal_metadata_db() {
    let t = tempfile::tempdir().unwrap();
    let src = fixture_pack(t.path(), "raw", &["--shard-rows", "700"]);

    let file = t.path().join("with.parquet");
    export(
        &src,
        "parquet",
        &file,
        &["--run-columns", "--runs", "0,2-6"],
    );
    let ok = python_ok(
        "check_run_columns.py",
        &[s(&file), s(&src), "--row-columns"],
    );
    assert!(ok.starts_with("OK: "), "{ok}");
    // The step columns are unchanged beside them.
    python_ok(
        "check_parquet.py",
        &[s(&file), s(&src), "--runs", "0,2,3,4,5,6"],
    );

    let parts = t.path().join("parts");
    export(
        &src,
        "parquet",
        &parts,
        &[
            "--run-columns",
            "--shard-rows",
            "500",
            "--where",
            "depth = 7",
        ],
    );
    assert!(
        names(&parts).contains(&"runs.parquet".to_string()),
        "{:?}",
        names(&parts)
    );
    let ok = python_ok(
        "check_run_columns.py",
        &[s(&parts), s(&src), "--row-columns"],
    );
    assert!(ok.contains("of 5 runs"), "{ok}");

    // The same with a query and a parameter: the run columns of exactly the runs it returns
    // (runs 3, 5 and 8: neither all nor none, and the first id not 0).
    let queried = t.path().join("queried");
    export(
        &src,
        "parquet",
        &queried,
        &[
            "--run-columns",
            "--where",
            "SELECT id FROM runs WHERE id IN (3, 5, 8) AND steps > ?",
            "--param",
            "0",
        ],
    );
    let ok = python_ok(
        "check_run_columns.py",
        &[s(&queried), s(&src), "--row-columns"],
    );
    assert!(ok.contains("of 3 runs"), "{ok}");
    python_ok(
        "check_parquet.py",
        &[s(&queried), s(&src), "--runs", "3,5,8"],
    );

    // Without --run-columns: rows as before, runs.parquet still beside the parts.
    let plain = t.path().join("plain");
    export(&src, "parquet", &plain, &["--shard-rows", "1000"]);
    let ok = python_ok("check_run_columns.py", &[s(&plain), s(&src)]);
    assert!(ok.contains("of 10 runs"), "{ok}");

    let (code, err) = export_err(&src, "jsonl", &t.path().join("x.jsonl"), &["--run-columns"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("run columns apply to the parquet format only")
            && err.contains("(see --run-columns)"),
        "{err}"
    );
}

/// The subset chosen by `--where` is what sqlite3 + NumPy select, row for row; ids are
/// renumbered from 0, the source ids kept in run_details, and the pack validates.
#[test]
fn where_selects_what_sqlite_and_numpy_select() {
    let t = tempfile::tempdir().unwrap();
    let src = fixture_pack(t.path(), "raw", &["--shard-rows", "333"]);
    for (k, expr) in [
        "max_score > 3000 AND depth = 7",
        "depth = 6 OR steps < 200",
        "seed % 2 = 0",
    ]
    .iter()
    .enumerate()
    {
        let oracle: Value =
            serde_json::from_str(&python_ok("select_where.py", &[s(&src), expr])).unwrap();
        let out = t.path().join(format!("where-{k}"));
        export(
            &src,
            "pack",
            &out,
            &["--where", expr, "--shard-rows", "100"],
        );
        assert_export_is(&out, &oracle, expr);
    }
}

/// A full query selects exactly the runs sqlite3 returns for it, whatever its first id (a
/// query read as a scalar subquery selected every run when its first id was not 0, and none
/// when it was), with `--param` values bound; the same on a shuffled pack, through the run_id
/// column; `stats --where` counts the same runs and rows.
#[test]
fn a_query_selects_exactly_what_sqlite3_returns() {
    let t = tempfile::tempdir().unwrap();
    let src = fixture_pack(t.path(), "raw", &["--shard-rows", "333"]);
    let shuffled = t.path().join("shuffled");
    run_ok(&[
        "shuffle",
        "--input",
        s(&src),
        "--output",
        s(&shuffled),
        "--seed",
        "3",
        "--quiet",
    ]);
    let all = runs_table(&src).len();
    // (SQL, --param values, JSON parameters for sqlite3, whether the first id returned is 0)
    let cases: [(&str, &[&str], &str, bool); 7] = [
        (
            "SELECT id FROM runs WHERE max_score > 4000",
            &[],
            "[]",
            true,
        ),
        (
            "SELECT id FROM runs WHERE max_score > 5000",
            &[],
            "[]",
            false,
        ),
        (
            "SELECT id FROM runs WHERE id > 0 AND max_score > 3000",
            &[],
            "[]",
            false,
        ),
        (
            "SELECT id FROM runs WHERE max_score BETWEEN ? AND ?",
            &["2500", "4200"],
            "[2500, 4200]",
            false,
        ),
        (
            "SELECT run_id FROM run_details WHERE depth = ? ORDER BY run_id DESC",
            &["6"],
            "[6]",
            true,
        ),
        (
            "WITH best AS (SELECT id, max_score FROM runs ORDER BY max_score DESC LIMIT 3) \
             SELECT id FROM best",
            &[],
            "[]",
            true,
        ),
        (
            "(SELECT id FROM runs WHERE max_score < :low)",
            &["low=2400"],
            "{\"low\": 2400}",
            false,
        ),
    ];
    for (k, (sql, params, json_params, first_is_zero)) in cases.iter().enumerate() {
        let oracle: Value = serde_json::from_str(&python_ok(
            "select_where.py",
            &[
                s(&src),
                sql.trim_matches(['(', ')']),
                "--query",
                "--params",
                json_params,
            ],
        ))
        .unwrap();
        let ids = oracle["run_ids"].as_array().unwrap();
        // The cases only test something when they select some runs but not all of them.
        assert!(!ids.is_empty() && ids.len() < all, "{sql}: {ids:?}");
        assert_eq!(ids[0] == 0, *first_is_zero, "{sql}: {ids:?}");
        let mut args = vec!["--where", *sql];
        for p in params.iter() {
            args.extend(["--param", p]);
        }
        for (name, pack) in [("plain", &src), ("shuffled", &shuffled)] {
            let out = t.path().join(format!("query-{k}-{name}"));
            let mut export_args = args.clone();
            export_args.extend(["--shard-rows", "100"]);
            export(pack, "pack", &out, &export_args);
            if name == "plain" {
                assert_export_is(&out, &oracle, sql);
            } else {
                // A shuffled source keeps its (shuffled) row order: the same runs and rows.
                let want: Vec<i64> = serde_json::from_value(oracle["run_ids"].clone()).unwrap();
                let got: Vec<i64> = table(
                    &out,
                    "SELECT source_run_id FROM run_details ORDER BY run_id",
                )
                .iter()
                .map(|r| {
                    r[0].trim_start_matches("Integer(")
                        .trim_end_matches(')')
                        .parse()
                        .unwrap()
                })
                .collect();
                assert_eq!(got, want, "{sql} on a shuffled pack");
                assert_eq!(
                    read_rows(&out).len() as u64,
                    oracle["rows"].as_u64().unwrap()
                );
            }
            let mut stats_args = vec!["stats", s(pack), "--json"];
            stats_args.extend(args.iter().copied());
            let stats: Value = serde_json::from_str(&run_ok(&stats_args)).unwrap();
            assert_eq!(
                stats["runs"].as_u64(),
                Some(ids.len() as u64),
                "{sql} {name}"
            );
            assert_eq!(stats["rows"], oracle["rows"], "{sql} {name}");
            assert_eq!(stats["where"].as_str(), Some(*sql));
        }
    }
}

/// Parameters must match the SQL exactly, a query must return run ids, and a statement that
/// is not a query is refused by name; nothing is written.
#[test]
fn queries_and_params_that_are_wrong_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let src = fixture_pack(t.path(), "raw", &[]);
    let out = t.path().join("out.parquet");
    let cases: [(&[&str], &str); 9] = [
        (
            &["--where", "SELECT id FROM runs WHERE max_score > ?"],
            "the SQL has 1 positional parameter (?) and 0 positional parameter values were given",
        ),
        (
            &["--where", "max_score > ?", "--param", "1", "--param", "2"],
            "2 positional parameter values were given",
        ),
        (
            &["--where", "max_score > :min", "--param", "max=3"],
            "the SQL has no parameter :max (it has :min)",
        ),
        (
            &["--where", "max_score > :min"],
            ":min has no value: give a value named min",
        ),
        (
            &["--where", "SELECT id, max_score FROM runs"],
            "the query returns 2 columns (id, max_score)",
        ),
        (
            &["--where", "SELECT max_score FROM runs"],
            "10 values that are not a run id of the pack: 2112, 2208",
        ),
        (
            &[
                "--where",
                "SELECT d.run_id FROM runs r LEFT JOIN run_details d ON d.run_id = r.id + 100",
            ],
            "row 1 of the query's result is NULL, not a run id",
        ),
        (&["--where", "DELETE FROM runs"], "is a DELETE statement"),
        (
            &["--where", "SELECT id FROM runs; DROP TABLE runs"],
            "only one statement is allowed",
        ),
    ];
    for (extra, want) in cases {
        let (code, err) = export_err(&src, "parquet", &out, extra);
        assert_eq!(code, 1, "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
        let mut stats = vec!["stats", s(&src)];
        stats.extend_from_slice(extra);
        let res = run(&stats);
        assert_eq!(res.status.code(), Some(1), "stats {extra:?}");
        assert!(
            stderr(&res).contains(want),
            "stats {extra:?}: {}",
            stderr(&res)
        );
    }
    // --param without --where is a usage error.
    let (code, err) = export_err(&src, "parquet", &out, &["--param", "3"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--where"), "{err}");
    assert!(!out.exists());
    assert_eq!(names(t.path()), ["pack-raw"]);
    assert_eq!(runs_table(&src).len(), 10, "the source pack is unchanged");
}

/// The exported pack `out` holds exactly the runs and rows `oracle` (select_where.py) picked:
/// ids renumbered from 0 with the source ids in run_details, rows equal, and it validates.
fn assert_export_is(out: &Path, oracle: &Value, what: &str) {
    let ids: Vec<i64> = table(out, "SELECT source_run_id FROM run_details ORDER BY run_id")
        .iter()
        .map(|r| {
            r[0].trim_start_matches("Integer(")
                .trim_end_matches(')')
                .parse()
                .unwrap()
        })
        .collect();
    let want: Vec<i64> = serde_json::from_value(oracle["run_ids"].clone()).unwrap();
    assert_eq!(ids, want, "{what}");
    let runs = runs_table(out);
    let steps: Vec<i64> = runs.iter().map(|r| r.2).collect();
    let want_steps: Vec<i64> = serde_json::from_value(oracle["rows_per_run"].clone()).unwrap();
    assert_eq!(steps, want_steps, "{what}");
    assert!(runs.iter().enumerate().all(|(i, r)| r.0 == i as i64));
    let rows = read_rows(out);
    assert_eq!(rows.len() as u64, oracle["rows"].as_u64().unwrap());
    let mut crc = flate2::Crc::new();
    for r in &rows {
        crc.update(&r[4..]);
    }
    assert_eq!(
        u64::from(crc.sum()),
        oracle["crc32"].as_u64().unwrap(),
        "{what}"
    );
    let report = run_ok(&["validate", s(out), "--deep"]);
    assert!(report.contains("VALID"), "{report}");
}

/// A subset pack: all pack rules (checksums, run index, validate), the source's valuation
/// table as is, run details keeping the source id and pack, findings of the kept runs only.
#[test]
fn pack_subset_keeps_the_pack_rules() {
    let t = tempfile::tempdir().unwrap();
    let src = fixture_pack(t.path(), "findings", &[]);
    let out = t.path().join("subset");
    export(
        &src,
        "pack",
        &out,
        &["--runs", "1,2,5", "--shard-rows", "10"],
    );
    let report = run_ok(&["validate", s(&out), "--deep"]);
    assert!(report.contains("VALID"), "{report}");
    assert_eq!(
        std::fs::read(out.join("valuation_types.json")).unwrap(),
        std::fs::read(src.join("valuation_types.json")).unwrap()
    );
    let details = table(
        &out,
        "SELECT run_id, source_run_id, source_pack, source_path FROM run_details ORDER BY run_id",
    );
    let source_ids: Vec<&str> = details.iter().map(|r| r[1].as_str()).collect();
    assert_eq!(source_ids, ["Integer(1)", "Integer(2)", "Integer(5)"]);
    let canonical = std::fs::canonicalize(&src).unwrap();
    assert!(
        details[0][2].contains(canonical.to_str().unwrap()),
        "{details:?}"
    );
    assert!(
        details[0][3].contains("f1_illegal_move_played"),
        "{details:?}"
    );
    let counts = table(&out, "SELECT kind, count FROM finding_counts ORDER BY kind");
    let kinds: Vec<String> = counts.iter().map(|r| r[0].clone()).collect();
    assert_eq!(
        kinds,
        [
            "Text(\"empty_run\")",
            "Text(\"ev_on_illegal_move\")",
            "Text(\"illegal_move_played\")"
        ]
    );
    let examples = table(&out, "SELECT kind, run_id FROM findings ORDER BY run_id");
    assert!(examples.iter().all(|r| r[1] != "Null"), "{examples:?}");
    // Rows are the source rows of runs 1, 2, 5 with ids 0, 1, 2.
    let mut expected = Vec::new();
    for r in read_rows(&src) {
        let id = u32::from_le_bytes(r[..4].try_into().unwrap());
        if let Some(new) = [1, 2, 5].iter().position(|&k| k == id) {
            let mut r = r;
            r[..4].copy_from_slice(&(new as u32).to_le_bytes());
            expected.push(r);
        }
    }
    assert_eq!(read_rows(&out), expected);
    let index = table(
        &out,
        "SELECT run_id, shard, row_offset, global_row FROM run_index",
    );
    assert_eq!(index.len(), 3);
}

#[test]
fn bad_selections_fail_clearly() {
    let t = tempfile::tempdir().unwrap();
    let src = fixture_pack(t.path(), "raw", &[]);
    let out = t.path().join("out.parquet");
    let (code, err) = export_err(&src, "parquet", &out, &["--where", "no_such_column > 1"]);
    assert_eq!(code, 1);
    assert!(err.contains("no column no_such_column"), "{err}");
    assert!(err.contains("max_score") && err.contains("depth"), "{err}");
    let (code, err) = export_err(&src, "parquet", &out, &["--where", "max_scor > 1"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no column max_scor; did you mean max_score?"),
        "{err}"
    );
    let (code, err) = export_err(&src, "parquet", &out, &["--where", "max_score >"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("the expression is incomplete: it ends after \"max_score >\""),
        "{err}"
    );
    let (code, err) = export_err(&src, "parquet", &out, &["--where", "depth = 7)"]);
    assert_eq!(code, 1);
    assert!(err.contains("the ')' at column 10 closes nothing"), "{err}");
    let (code, err) = export_err(
        &src,
        "parquet",
        &out,
        &["--where", "max_score > AND depth = 7"],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("syntax error at \"AND depth = \" (column 13)")
            && err.contains("\n  max_score > AND depth = 7\n              ^"),
        "{err}"
    );
    let (code, err) = export_err(&src, "parquet", &out, &["--runs", "3,42"]);
    assert_eq!(code, 1);
    assert!(err.contains("42") && err.contains("10 runs"), "{err}");
    let (code, err) = export_err(&src, "parquet", &out, &["--where", "max_score < 0"]);
    assert_eq!(code, 1);
    assert!(err.contains("selects no runs"), "{err}");
    let (code, _) = export_err(&src, "parquet", &out, &["--runs", "1-x"]);
    assert_eq!(code, 2);
    assert!(!out.exists());
    assert_eq!(names(t.path()), ["pack-raw"]);
    // --runs and --where intersect.
    let both = t.path().join("both.jsonl");
    export(
        &src,
        "jsonl",
        &both,
        &["--runs", "0-6", "--where", "depth = 7"],
    );
    let seeds: std::collections::BTreeSet<u64> = std::fs::read_to_string(&both)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seed"]
                .as_u64()
                .unwrap()
        })
        .collect();
    let want: std::collections::BTreeSet<u64> =
        runs_table(&src)[5..7].iter().map(|r| r.1 as u64).collect();
    assert_eq!(seeds, want);
}

/// Outputs are refused when they exist (unless --overwrite), would replace the source, or are
/// a folder of someone else's files; a failed export leaves nothing behind.
#[test]
fn outputs_are_atomic_and_guarded() {
    let t = tempfile::tempdir().unwrap();
    let src = fixture_pack(t.path(), "raw", &[]);
    let folder = t.path().join("raw-out");
    export(&src, "jsonl", &folder, &["--runs", "0"]);
    // An existing output is a state the library refuses to act on: exit code 2.
    let (code, err) = export_err(&src, "jsonl", &folder, &["--runs", "1"]);
    assert_eq!(code, 2);
    assert!(err.contains("(see --overwrite)"), "{err}");
    export(&src, "jsonl", &folder, &["--runs", "1", "--overwrite"]);
    assert_eq!(
        names(&folder),
        ["run-0000000001.jsonl.gz", "run-0000000001.meta.json"]
    );

    let mine = t.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "keep").unwrap();
    let (_, err) = export_err(&src, "parquet", &mine, &["--overwrite"]);
    assert!(err.contains("notes.txt"), "{err}");
    let (_, err) = export_err(&src, "pack", &src, &["--overwrite", "--runs", "0"]);
    assert!(err.contains("source pack"), "{err}");
    let (_, err) = export_err(&src, "jsonl", t.path(), &["--overwrite"]);
    assert!(err.contains("source pack"), "{err}");

    // A pack whose runs table disagrees with its shards: every format fails, nothing appears.
    let broken = t.path().join("broken");
    copy_tree(&src, &broken);
    rusqlite::Connection::open(broken.join("metadata.db"))
        .unwrap()
        .execute("UPDATE runs SET steps = steps - 1 WHERE id = 4", [])
        .unwrap();
    let before = names(t.path());
    for (format, name) in [
        ("jsonl", "b1"),
        ("jsonl", "b2.jsonl.gz"),
        ("parquet", "b3.parquet"),
        ("pack", "b4"),
    ] {
        let (code, err) = export_err(&broken, format, &t.path().join(name), &[]);
        assert_eq!(code, 1, "{format}");
        // Refused when the pack is opened, before a row is read.
        assert!(
            err.contains("is not a valid pack: Σ runs.steps = rows"),
            "{format}: {err}"
        );
    }
    assert_eq!(names(t.path()), before);

    // An export into a pack folder that dies midway leaves the old pack in place.
    let subset = t.path().join("subset");
    export(&src, "pack", &subset, &["--runs", "0"]);
    let old = pack_bytes(&subset);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
        .args([
            "export",
            s(&src),
            "--format",
            "pack",
            "--output",
            s(&subset),
            "--overwrite",
            "--quiet",
        ])
        .env("DATASET_PACKER_FAIL_AFTER_ROWS", "500")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(pack_bytes(&subset), old);
    run_ok(&["validate", s(&subset)]);
}

/// A pack with legacy packed 46-byte shards exports the same data as its spec-layout twin.
#[test]
fn legacy_shards_are_converted() {
    let t = tempfile::tempdir().unwrap();
    let src = fixture_pack(t.path(), "raw", &["--shard-rows", "1000"]);
    let legacy = t.path().join("legacy");
    copy_tree(&src, &legacy);
    make_legacy_pack(&legacy);
    let file = t.path().join("legacy.parquet");
    let out = run(&[
        "export",
        s(&legacy),
        "--format",
        "parquet",
        "--output",
        s(&file),
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("records no shard checksums"),
        "one warning line: {}",
        stderr(&out)
    );
    python_ok("check_parquet.py", &[s(&file), s(&src)]);
    let out = t.path().join("converted");
    export(&legacy, "pack", &out, &["--shard-rows", "1000"]);
    assert_eq!(read_rows(&out), read_rows(&src));
    run_ok(&["validate", s(&out)]);
}
