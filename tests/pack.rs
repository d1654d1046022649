//! `pack` end to end: the real binary on fixture drops in temp dirs, output read back with the
//! independent Python oracle (NumPy + sqlite3), SQLite and byte comparisons.

mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

#[test]
fn fixture_drop_matches_the_python_oracle_single_shard() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("pack");
    pack(&fixture("raw"), &out, &[]);
    assert_eq!(
        names(&out),
        ["metadata.db", "steps.npy", "valuation_types.json"]
    );
    let ok = python_ok(
        "check_pack.py",
        &["--raw", s(&fixture("raw")), "--pack", s(&out)],
    );
    assert!(ok.contains("OK: 10 runs, 2240 rows, 1 shards"), "{ok}");
}

#[test]
fn fixture_drop_matches_the_python_oracle_sharded() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("pack");
    pack(&fixture("raw"), &out, &["--shard-rows", "333"]);
    let shards: Vec<_> = names(&out)
        .into_iter()
        .filter(|n| n.starts_with("steps-"))
        .collect();
    assert_eq!(shards.len(), 7); // ceil(2240 / 333)
    assert_eq!(shards[6], "steps-00006.npy");
    python_ok(
        "check_pack.py",
        &["--raw", s(&fixture("raw")), "--pack", s(&out)],
    );
    // Runs straddle shard boundaries and the run index points at each run's first row.
    python_ok("numpy_traps.py", &[s(&out)]);
}

#[test]
fn expected_facts_of_the_fixture_drop() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("pack");
    pack(&fixture("raw"), &out, &[]);
    let expected: Value =
        serde_json::from_slice(&std::fs::read(fixture("raw_expected.json")).unwrap()).unwrap();
    let vt: Value =
        serde_json::from_slice(&std::fs::read(out.join("valuation_types.json")).unwrap()).unwrap();
    assert_eq!(vt, expected["valuation_types"]);
    assert_eq!(
        vt,
        serde_json::json!(["search", "tuple11", "tuple10", "tuple12"])
    );
    let conn = db(&out);
    let steps: Vec<i64> = conn
        .prepare("SELECT steps FROM runs ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(steps.len(), 10);
    assert_eq!(steps.iter().sum::<i64>(), 2240);
}

/// The rows of every rows file under `dir` (blank lines left out), by file.
fn rows_of_drop(dir: &std::path::Path) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for p in walk(dir) {
        if p.to_str().unwrap().ends_with(".jsonl.gz") {
            let text = read_gz(&p);
            let rows = text.lines().map(str::trim_end).filter(|l| !l.is_empty());
            out.push((s(&p).to_string(), rows.map(String::from).collect()));
        }
    }
    out
}

/// Each fixture drop (the current logger's layout at depths 6–7 and at 2–3, the design notes'
/// layout) packs to its facts file's runs, rows and valuation types with no findings, and
/// agrees with the Python oracle row by row.
#[test]
fn every_fixture_drop_matches_its_facts_and_the_python_oracle() {
    let t = tempfile::tempdir().unwrap();
    for drop in ["raw", "raw_d23", "raw_design"] {
        let out = t.path().join(drop);
        let summary: Value =
            serde_json::from_str(&pack(&fixture(drop), &out, &["--json"])).unwrap();
        let facts = std::fs::read(fixture(&format!("{drop}_expected.json"))).unwrap();
        let expected: Value = serde_json::from_slice(&facts).unwrap();
        assert_eq!(summary["runs"], expected["runs"], "{drop}");
        assert_eq!(summary["rows"], expected["rows"], "{drop}");
        // A clean drop: the summary lists no finding kind, the facts count 0 of each.
        assert_eq!(summary["findings"], serde_json::json!({}), "{drop}");
        let none = expected["findings"].as_object().unwrap().values();
        assert!(none.into_iter().all(|n| n == 0), "{drop}");
        let vt: Value =
            serde_json::from_slice(&std::fs::read(out.join("valuation_types.json")).unwrap())
                .unwrap();
        assert_eq!(vt, expected["valuation_types"], "{drop}");
        let steps: Vec<i64> = runs_table(&out).iter().map(|r| r.2).collect();
        let want: Vec<i64> = expected["run_list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["rows"].as_i64().unwrap())
            .collect();
        assert_eq!(steps, want, "{drop}");
        let ok = python_ok(
            "check_pack.py",
            &["--raw", s(&fixture(drop)), "--pack", s(&out)],
        );
        assert!(
            ok.contains(&format!(
                "OK: {} runs, {} rows",
                want.len(),
                summary["rows"]
            )),
            "{ok}"
        );
    }
}

/// fixtures/raw and fixtures/raw_design hold the same games in the two layouts: the `search`
/// object and `null` instead of `0.0` on illegal tuple moves change nothing a pack stores, so
/// the shards are the same bytes. And the drops are what they say: every row of the current
/// layout ends with a `search` object, 480–560 bytes a row on average, none in the design one.
#[test]
fn both_layouts_of_the_same_games_pack_to_the_same_rows() {
    let t = tempfile::tempdir().unwrap();
    let (current, design) = (t.path().join("current"), t.path().join("design"));
    pack(&fixture("raw"), &current, &["--shard-rows", "1000"]);
    pack(&fixture("raw_design"), &design, &["--shard-rows", "1000"]);
    assert_eq!(pack_view(&current), pack_view(&design));
    for drop in ["raw", "raw_d23"] {
        let files = rows_of_drop(&fixture(drop));
        let rows: Vec<&String> = files.iter().flat_map(|(_, rows)| rows).collect();
        let bytes: usize = rows.iter().map(|r| r.len() + 1).sum();
        let mean = bytes as f64 / rows.len() as f64;
        assert!(
            (480.0..=560.0).contains(&mean),
            "{drop}: {mean} bytes a row"
        );
        for (file, rows) in &files {
            for (i, row) in rows.iter().enumerate() {
                let search = row.find(",\"search\":{\"used\":").map(|at| &row[at..]);
                let search = search.unwrap_or_else(|| panic!("{file} row {}: {row}", i + 1));
                let used = search.starts_with(",\"search\":{\"used\":true,");
                let tuple = row.contains("\"valuation_type\":\"tuple");
                assert_eq!(used, !tuple, "{file} row {}: {row}", i + 1);
                assert_eq!(
                    search.matches(":null").count(),
                    if used { 0 } else { 14 },
                    "{row}"
                );
            }
        }
    }
    for (file, rows) in rows_of_drop(&fixture("raw_design")) {
        assert!(rows.iter().all(|r| !r.contains("\"search\":")), "{file}");
    }
}

#[test]
fn deterministic_across_worker_counts() {
    let t = tempfile::tempdir().unwrap();
    let a = t.path().join("a");
    let b = t.path().join("b");
    pack(
        &fixture("raw"),
        &a,
        &["--workers", "1", "--shard-rows", "500"],
    );
    pack(
        &fixture("raw"),
        &b,
        &["--workers", "8", "--shard-rows", "500"],
    );
    let keep = |n: &str| n != "metadata.db";
    assert_eq!(files(&a, keep), files(&b, keep));
    assert_eq!(runs_table(&a), runs_table(&b));
}

#[test]
fn findings_are_reported_not_fatal() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("pack");
    let summary: Value =
        serde_json::from_str(&pack(&fixture("findings"), &out, &["--json"])).unwrap();
    let expected: Value =
        serde_json::from_slice(&std::fs::read(fixture("findings/expected.json")).unwrap()).unwrap();
    assert_eq!(summary["runs"], expected["runs"]);
    assert_eq!(summary["rows"], expected["rows"]);
    assert_eq!(summary["findings"], expected["counts"]);
    assert_eq!(summary["orphan_rows_files"], 1);
    let conn = db(&out);
    for (kind, count) in expected["counts"].as_object().unwrap() {
        let n: i64 = conn
            .query_row(
                "SELECT count FROM finding_counts WHERE kind = ?1",
                [kind],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, count.as_i64().unwrap(), "{kind}");
    }
    let (path, line): (String, i64) = conn
        .query_row(
            "SELECT source_path, line FROM findings WHERE kind = 'illegal_move_played'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (path.as_str(), line),
        ("f1_illegal_move_played.jsonl.gz", 7)
    );
    let orphan: String = conn
        .query_row("SELECT path FROM orphan_rows_files", [], |r| r.get(0))
        .unwrap();
    assert_eq!(orphan, "ORPHAN.jsonl.gz");
    python_ok(
        "check_pack.py",
        &["--raw", s(&fixture("findings")), "--pack", s(&out)],
    );
}

#[test]
fn human_summary_lists_findings_and_rate() {
    let t = tempfile::tempdir().unwrap();
    let text = pack(&fixture("findings"), &t.path().join("p"), &[]);
    assert!(
        text.contains("packed 6 runs, 66 rows into 1 shard"),
        "{text}"
    );
    assert!(text.contains("1 rows file without a sidecar"), "{text}");
    assert!(text.contains("step_index_gap: 1"), "{text}");
    assert!(text.contains("f1_illegal_move_played.jsonl.gz:7"), "{text}");
    assert!(text.contains("rows/s"), "{text}");
}

fn invalid_cases() -> Vec<(String, Value)> {
    let cases: Value =
        serde_json::from_slice(&std::fs::read(fixture("invalid/cases.json")).unwrap()).unwrap();
    cases
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[test]
fn every_invalid_input_stops_the_pack_with_file_line_and_reason() {
    let t = tempfile::tempdir().unwrap();
    for (case, c) in invalid_cases() {
        let out = t.path().join(&case);
        let res = run(&[
            "pack",
            "--input",
            s(&fixture(&format!("invalid/{case}"))),
            "--output",
            s(&out),
        ]);
        let err = stderr(&res);
        assert_eq!(res.status.code(), Some(1), "{case}: {err}");
        assert!(
            err.to_lowercase().contains(c["keyword"].as_str().unwrap()),
            "{case}: {err}"
        );
        if let Some(file) = c["file"].as_str() {
            assert!(
                err.contains(&format!("{case}/{file}")),
                "{case} names the file: {err}"
            );
        }
        if let Some(line) = c["line"].as_u64() {
            assert!(
                err.contains(&format!(":{line}: ")),
                "{case} names line {line}: {err}"
            );
        }
        assert!(!out.exists(), "{case}: nothing may be left behind");
    }
}

#[test]
fn skip_invalid_packs_the_rest_and_records_what_it_left_out() {
    let t = tempfile::tempdir().unwrap();
    for (case, _) in invalid_cases() {
        if case == "no_runs" {
            continue;
        }
        let input = fixture(&format!("invalid/{case}"));
        let out = t.path().join(&case);
        let summary: Value =
            serde_json::from_str(&pack(&input, &out, &["--skip-invalid", "--json"])).unwrap();
        assert_eq!(summary["runs"], 1, "{case}");
        let skipped = summary["skipped_runs"].as_array().unwrap();
        assert_eq!(skipped.len(), 1, "{case}");
        assert!(
            skipped[0]["path"].as_str().unwrap().starts_with("b_bad"),
            "{case}"
        );
        let (path, reason): (String, String) = db(&out)
            .query_row("SELECT source_path, reason FROM skipped_runs", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert!(path.starts_with("b_bad"), "{case}");
        assert_eq!(reason, skipped[0]["reason"].as_str().unwrap());
        let rows: i64 = db(&out)
            .query_row("SELECT steps FROM runs WHERE id = 0", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 4, "{case}: the good run is packed whole");
    }
    // One full oracle check of a skipped-run pack.
    let out = t.path().join("json_malformed");
    python_ok(
        "check_pack.py",
        &[
            "--raw",
            s(&fixture("invalid/json_malformed")),
            "--pack",
            s(&out),
            "--skip-invalid-expected",
            "1",
        ],
    );
}

#[test]
fn the_reported_invalid_run_is_the_lowest_run_id_whatever_the_workers() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("raw");
    copy_tree(&fixture("raw"), &input);
    // Break two runs: run 3 (d6 worker03) and run 8 (d7 worker03).
    for dir in ["d6_10g_v1", "d7_10g_v1"] {
        for e in std::fs::read_dir(input.join(dir)).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            if name.contains("worker03") && name.ends_with(".jsonl.gz") {
                std::fs::write(&p, b"not gzip").unwrap();
            }
        }
    }
    for workers in ["1", "2", "8"] {
        let res = run(&[
            "pack",
            "--input",
            s(&input),
            "--output",
            s(&t.path().join("o")),
            "--workers",
            workers,
        ]);
        let err = stderr(&res);
        assert_eq!(res.status.code(), Some(1));
        assert!(
            err.contains("d6_10g_v1/depth06_worker03"),
            "workers={workers}: {err}"
        );
    }
}

#[test]
fn an_existing_pack_needs_overwrite_and_survives_a_failed_replacement() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("pack");
    pack(&fixture("findings"), &out, &[]);
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let before = files(&out, |_| true);

    // Refused (exit 2), the flag named.
    let res = run(&["pack", "--input", s(&fixture("raw")), "--output", s(&out)]);
    assert_eq!(res.status.code(), Some(2));
    assert!(
        stderr(&res).contains("(see --overwrite)"),
        "{}",
        stderr(&res)
    );
    assert_eq!(files(&out, |_| true), before);

    // A failing replacement leaves the old pack exactly as it was.
    let res = run(&[
        "pack",
        "--input",
        s(&fixture("invalid/json_malformed")),
        "--output",
        s(&out),
        "--overwrite",
    ]);
    assert_eq!(res.status.code(), Some(1));
    assert_eq!(files(&out, |_| true), before);

    // A successful one replaces only the pack's files.
    pack(
        &fixture("raw"),
        &out,
        &["--overwrite", "--shard-rows", "1000"],
    );
    assert_eq!(
        names(&out),
        [
            "metadata.db",
            "notes.txt",
            "steps-00000.npy",
            "steps-00001.npy",
            "steps-00002.npy",
            "valuation_types.json"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(out.join("notes.txt")).unwrap(),
        "mine"
    );
    python_ok(
        "check_pack.py",
        &["--raw", s(&fixture("raw")), "--pack", s(&out)],
    );

    // Going back to a single steps.npy removes the old shards.
    pack(&fixture("raw"), &out, &["--overwrite"]);
    assert_eq!(
        names(&out),
        [
            "metadata.db",
            "notes.txt",
            "steps.npy",
            "valuation_types.json"
        ]
    );
}

#[test]
fn stray_shard_lookalikes_and_stale_staging() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("pack");
    std::fs::create_dir_all(out.join(".dataset-packer-staging")).unwrap();
    std::fs::write(
        out.join(".dataset-packer-staging/steps.npy"),
        "half-written",
    )
    .unwrap();
    std::fs::write(out.join("steps-old.npy"), "someone's file").unwrap();
    let res = run(&[
        "pack",
        "--input",
        s(&fixture("raw")),
        "--output",
        s(&out),
        "--overwrite",
    ]);
    assert_eq!(res.status.code(), Some(2), "a refusal is a usage error");
    assert!(stderr(&res).contains("steps-old.npy"), "{}", stderr(&res));
    assert_eq!(
        std::fs::read_to_string(out.join("steps-old.npy")).unwrap(),
        "someone's file"
    );
    std::fs::remove_file(out.join("steps-old.npy")).unwrap();
    pack(&fixture("raw"), &out, &[]);
    assert_eq!(
        names(&out),
        ["metadata.db", "steps.npy", "valuation_types.json"]
    );
}

#[test]
fn usage_errors_exit_2() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("p");
    let res = run(&[
        "pack",
        "--input",
        s(&fixture("raw")),
        "--output",
        s(&out),
        "--shard-rows",
        "0",
    ]);
    assert_eq!(res.status.code(), Some(2));
    assert!(!out.exists());
    let res = run(&["pack", "--input", s(&fixture("raw"))]);
    assert_eq!(res.status.code(), Some(2));
    let res = run(&[
        "pack",
        "--input",
        s(&t.path().join("missing")),
        "--output",
        s(&out),
    ]);
    assert_eq!(res.status.code(), Some(1));
    assert!(stderr(&res).contains("missing"), "{}", stderr(&res));
}

#[test]
fn help_shows_examples() {
    let help = run_ok(&["pack", "--help"]);
    assert!(
        help.contains("Examples:") && help.contains("--shard-rows"),
        "{help}"
    );
}

#[test]
fn quiet_off_a_terminal_and_logging_on_request() {
    let t = tempfile::tempdir().unwrap();
    let res = run(&[
        "pack",
        "--input",
        s(&fixture("raw")),
        "--output",
        s(&t.path().join("a")),
    ]);
    assert!(res.status.success());
    assert_eq!(
        stderr(&res),
        "",
        "no progress bar when stderr is not a terminal"
    );
    let res = Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
        .args([
            "pack",
            "--input",
            s(&fixture("raw")),
            "--output",
            s(&t.path().join("b")),
        ])
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    assert!(stderr(&res).contains("10 runs"), "{}", stderr(&res));
}

#[test]
fn symlinked_inputs_are_followed_in_logical_path_order_without_looping() {
    let t = tempfile::tempdir().unwrap();
    let real = t.path().join("real");
    copy_tree(&fixture("raw"), &real);
    let input = t.path().join("input");
    std::fs::create_dir_all(input.join("b_files")).unwrap();
    // a folder link, a link loop, and links to single files.
    std::os::unix::fs::symlink(real.join("d7_10g_v1"), input.join("a_d7")).unwrap();
    std::os::unix::fs::symlink(&input, input.join("a_d7_loop")).unwrap();
    for e in std::fs::read_dir(real.join("d6_10g_v1")).unwrap() {
        let p = e.unwrap().path();
        std::os::unix::fs::symlink(&p, input.join("b_files").join(p.file_name().unwrap())).unwrap();
    }
    let out = t.path().join("pack");
    let summary: Value = serde_json::from_str(&pack(&input, &out, &["--json"])).unwrap();
    assert_eq!(summary["runs"], 10);
    let first: String = db(&out)
        .query_row(
            "SELECT source_path FROM run_details WHERE run_id = 0",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(first.starts_with("a_d7/"), "{first}");
    python_ok("check_pack.py", &["--raw", s(&input), "--pack", s(&out)]);
}

#[test]
fn a_pack_of_empty_runs_has_one_empty_shard() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("raw");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(
        input.join("g.meta.json"),
        r#"{"seed":1,"num_moves":0,"score":0,"max_tile":0}"#,
    )
    .unwrap();
    write_gz(&input.join("g.jsonl.gz"), b"");
    let out = t.path().join("pack");
    pack(&input, &out, &["--shard-rows", "10"]);
    assert_eq!(
        names(&out),
        ["metadata.db", "steps-00000.npy", "valuation_types.json"]
    );
    python_ok("check_pack.py", &["--raw", s(&input), "--pack", s(&out)]);
}

/// Runs `pack` with the whole-file decompression limit set to `limit` bytes (`None`: the
/// default): 0 streams every rows file, a small limit makes the whole-file attempt give up.
fn pack_with_limit(
    input: &std::path::Path,
    output: &std::path::Path,
    limit: Option<usize>,
) -> std::process::Output {
    let limit = limit.map(|l| l.to_string());
    pack_env(
        input,
        output,
        &["--workers", "2"],
        &[("DATASET_PACKER_WHOLE_FILE_LIMIT", limit.as_deref())],
    )
}

/// What a pack command left: exit code, stderr, the pack's bytes and its runs with fingerprints.
fn outcome(
    out: &std::process::Output,
    pack: &std::path::Path,
) -> (Option<i32>, String, Files, Vec<String>) {
    let err = stderr(out).replace(s(pack), "PACK");
    if !pack.join("metadata.db").exists() {
        return (out.status.code(), err, Vec::new(), Vec::new());
    }
    let details: Vec<String> = db(pack)
        .prepare("SELECT r.id, r.seed, r.steps, d.fingerprint, d.rows_bytes FROM runs r JOIN run_details d ON d.run_id = r.id ORDER BY r.id")
        .unwrap()
        .query_map([], |r| {
            Ok(format!(
                "{} {} {} {} {}",
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, i64>(4)?
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    (out.status.code(), err, pack_bytes(pack), details)
}

/// Packs `input` whole-file (default), streamed, and with a whole-file attempt that gives up
/// midway; all three must agree byte for byte, error messages included.
fn assert_decompression_paths_agree(input: &std::path::Path, what: &str) {
    let t = tempfile::tempdir().unwrap();
    let results: Vec<_> = [None, Some(0), Some(300)]
        .into_iter()
        .map(|limit| {
            let out = t.path().join(format!("{limit:?}"));
            outcome(&pack_with_limit(input, &out, limit), &out)
        })
        .collect();
    assert_eq!(results[0], results[1], "{what}: streamed differs");
    assert_eq!(results[0], results[2], "{what}: fallback differs");
}

#[test]
fn streamed_rows_files_pack_and_fail_exactly_like_whole_ones() {
    assert_decompression_paths_agree(&fixture("raw"), "raw");
    assert_decompression_paths_agree(&fixture("findings"), "findings");
    for (case, _) in invalid_cases() {
        assert_decompression_paths_agree(&fixture(&format!("invalid/{case}")), &case);
    }
}

#[test]
fn a_long_run_streams_in_pieces_with_lines_split_anywhere() {
    let t = tempfile::tempdir().unwrap();
    // 12 000 rows (≈6.5 MB of text, several stream buffers), in three gzip members that
    // each end mid-line, and with CRLF line ends in the middle third.
    let sidecar = std::fs::read(fixture(
        "raw/d6_10g_v1/depth06_worker00_seed0272350805_game000000.meta.json",
    ))
    .unwrap();
    let first = read_gz(&fixture(
        "raw/d6_10g_v1/depth06_worker00_seed0272350805_game000000.jsonl.gz",
    ));
    let rows: Vec<&str> = first.lines().filter(|l| !l.trim().is_empty()).collect();
    let lines: Vec<String> = (0..12_000)
        .map(|i| {
            let end = if (4000..8000).contains(&i) {
                "\r\n"
            } else {
                "\n"
            };
            format!("{}{end}", rows[i % rows.len()])
        })
        .collect();
    let write_drop = |name: &str, text: &[u8], damage: fn(&mut Vec<u8>)| {
        let dir = t.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("run.meta.json"), &sidecar).unwrap();
        let mut gz = Vec::new();
        for part in [
            &text[..1_000_003],
            &text[1_000_003..2_345_679],
            &text[2_345_679..],
        ] {
            use std::io::Write;
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(part).unwrap();
            gz.extend(e.finish().unwrap());
        }
        damage(&mut gz);
        std::fs::write(dir.join("run.jsonl.gz"), gz).unwrap();
        dir
    };
    let good = lines.concat();
    let mut bad = lines.clone();
    bad[8999] = bad[8999].replace("\"board\":[", "\"board\":[17,");
    let bad = bad.concat();

    assert_decompression_paths_agree(&write_drop("good", good.as_bytes(), |_| {}), "good");
    let bad_line = write_drop("bad_line", bad.as_bytes(), |_| {});
    assert_decompression_paths_agree(&bad_line, "bad line");
    let out = pack_with_limit(&bad_line, &t.path().join("p"), Some(0));
    assert!(
        stderr(&out).contains("run.jsonl.gz:9000: "),
        "{}",
        stderr(&out)
    );
    // A bad line and a damaged gzip after it: the gzip error is reported, as when the whole
    // file is decompressed first.
    let both = write_drop("bad_line_and_crc", bad.as_bytes(), |gz| {
        let n = gz.len();
        gz[n - 6] ^= 1;
    });
    assert_decompression_paths_agree(&both, "bad line and CRC");
    let out = pack_with_limit(&both, &t.path().join("q"), Some(0));
    assert!(stderr(&out).contains("CRC mismatch"), "{}", stderr(&out));
    let truncated = write_drop("truncated", good.as_bytes(), |gz| {
        gz.truncate(gz.len() - 100)
    });
    assert_decompression_paths_agree(&truncated, "truncated");
}

#[test]
fn a_run_above_the_shared_limit_is_read_whole_by_few_workers_and_streamed_by_many() {
    // ≈9 MiB of text: above the 8 MiB every worker may hold, within a share of the budget
    // that one or two workers hold (`raw::run::whole_file_limit`).
    let t = tempfile::tempdir().unwrap();
    let src = "raw/d6_10g_v1/depth06_worker00_seed0272350805_game000000";
    let first = read_gz(&fixture(&format!("{src}.jsonl.gz")));
    let rows: Vec<&str> = first.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 9 << 20 {
        text.push_str(rows[i % rows.len()]);
        text.push('\n');
        i += 1;
    }
    let input = t.path().join("raw");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::copy(
        fixture(&format!("{src}.meta.json")),
        input.join("run.meta.json"),
    )
    .unwrap();
    write_gz(&input.join("run.jsonl.gz"), text.as_bytes());
    let mut packs = Vec::new();
    for (workers, how) in [
        ("1", "bytes of text decompressed whole"),
        ("2", "bytes of text decompressed whole"),
        ("4", "run 0: streamed"),
    ] {
        let out = t.path().join(format!("w{workers}"));
        let res = pack_env(
            &input,
            &out,
            &["--workers", workers],
            &[("RUST_LOG", Some("dataset_packer=debug"))],
        );
        assert!(res.status.success(), "{}", stderr(&res));
        assert!(stderr(&res).contains(how), "{workers}: {}", stderr(&res));
        packs.push(outcome(&res, &out).2);
    }
    assert_eq!(packs[0], packs[2], "whole and streamed give the same pack");
    assert_eq!(packs[0], packs[1]);
    let steps: i64 = db(&t.path().join("w1"))
        .query_row("SELECT steps FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(steps, i as i64);
    python_ok(
        "check_pack.py",
        &["--raw", s(&input), "--pack", s(&t.path().join("w1"))],
    );
}

// ---------------------------------------------------------------------------------------------
// Plain `.jsonl` rows files (the logger without -Z)

/// A copy of a fixture drop with the rows files `pick` accepts unzipped to plain `.jsonl`.
fn plain_copy(
    from: &std::path::Path,
    to: &std::path::Path,
    pick: &dyn Fn(&std::path::Path) -> bool,
) -> Vec<std::path::PathBuf> {
    copy_tree(from, to);
    let made = unzip_rows(to, pick);
    assert!(!made.is_empty());
    made
}

/// `run_details` paths and sizes of the rows files, by run id.
fn rows_files(pack: &std::path::Path) -> Vec<(String, i64)> {
    db(pack)
        .prepare("SELECT rows_path, rows_bytes FROM run_details ORDER BY run_id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn plain_rows_files_pack_exactly_like_gzipped_ones_alone_or_mixed() {
    let t = tempfile::tempdir().unwrap();
    let gz = t.path().join("gz");
    pack(&fixture("raw"), &gz, &["--shard-rows", "500"]);
    let all_plain = t.path().join("plain");
    plain_copy(&fixture("raw"), &all_plain, &|_| true);
    let mixed = t.path().join("mixed");
    let unzipped = plain_copy(&fixture("raw"), &mixed, &|p| {
        let n = p.to_str().unwrap();
        n.contains("worker01") || n.contains("worker03") || n.contains("d7_")
    });
    assert_eq!(unzipped.len(), 7, "a drop of both forms");
    for (input, what) in [(&all_plain, "plain"), (&mixed, "mixed")] {
        // The gzipped runs of the mixed drop read whole, streamed, and streamed in pieces.
        for limit in [None, Some(0), Some(300)] {
            let out = t.path().join(format!("{what}-{limit:?}"));
            let limit_text = limit.map(|l: usize| l.to_string());
            let res = pack_env(
                input,
                &out,
                &["--shard-rows", "500", "--workers", "2"],
                &[("DATASET_PACKER_WHOLE_FILE_LIMIT", limit_text.as_deref())],
            );
            assert!(res.status.success(), "{what} {limit:?}: {}", stderr(&res));
            assert_eq!(pack_view(&out), pack_view(&gz), "{what} {limit:?}");
            let fingerprints = |p: &std::path::Path| -> Vec<String> {
                db(p)
                    .prepare("SELECT fingerprint FROM run_details ORDER BY run_id")
                    .unwrap()
                    .query_map([], |r| r.get(0))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
            };
            assert_eq!(fingerprints(&out), fingerprints(&gz), "{what} {limit:?}");
            // The pack records the file each run was read from, and its size.
            for (rows_path, bytes) in rows_files(&out) {
                let file = input.join(&rows_path);
                assert_eq!(std::fs::metadata(&file).unwrap().len() as i64, bytes);
                let plain = unzipped.iter().any(|u| u.ends_with(&rows_path));
                assert!(what == "plain" || plain == rows_path.ends_with(".jsonl"));
            }
        }
        let out = t.path().join(format!("{what}-None"));
        python_ok("check_pack.py", &["--raw", s(input), "--pack", s(&out)]);
        run_ok(&["validate", s(&out), "--deep"]);
    }
}

#[test]
fn plain_rows_files_report_the_same_findings_and_orphans() {
    let t = tempfile::tempdir().unwrap();
    let gz = t.path().join("gz");
    pack(&fixture("findings"), &gz, &[]);
    let plain = t.path().join("plain");
    plain_copy(&fixture("findings"), &plain, &|_| true);
    let out = t.path().join("out");
    let summary: Value = serde_json::from_str(&pack(&plain, &out, &["--json"])).unwrap();
    let expected: Value =
        serde_json::from_slice(&std::fs::read(fixture("findings/expected.json")).unwrap()).unwrap();
    assert_eq!(summary["findings"], expected["counts"]);
    assert_eq!(pack_view(&out), pack_view(&gz));
    let findings = |p: &std::path::Path| -> Vec<String> {
        db(p)
            .prepare("SELECT kind, run_id, source_path, line, step_index, detail FROM findings ORDER BY kind, run_id, line")
            .unwrap()
            .query_map([], |r| {
                Ok(format!(
                    "{} {:?} {} {:?} {:?} {}",
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, String>(5)?
                ))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let gz_findings: Vec<String> = findings(&gz)
        .iter()
        .map(|f| f.replace(".jsonl.gz", ".jsonl"))
        .collect();
    assert_eq!(findings(&out), gz_findings);
    let orphan: (String, String) = db(&out)
        .query_row(
            "SELECT o.path, f.detail FROM orphan_rows_files o JOIN findings f ON f.source_path = o.path",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(orphan.0, "ORPHAN.jsonl");
    assert!(
        orphan
            .1
            .contains("without a sidecar (ORPHAN.meta.json or ORPHAN.meta.json.gz)"),
        "{orphan:?}"
    );
    python_ok("check_pack.py", &["--raw", s(&plain), "--pack", s(&out)]);
}

#[test]
fn a_run_with_both_rows_files_is_refused_naming_both() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("raw");
    copy_tree(&fixture("raw"), &input);
    let base = input.join("d7_10g_v1/depth07_worker02_seed1273930898_game000000");
    let gz = base.with_extension("jsonl.gz");
    let plain = base.with_extension("jsonl");
    std::fs::write(&plain, read_gz(&gz)).unwrap();
    let out = t.path().join("p");
    let res = pack_env(&input, &out, &[], &[]);
    let err = stderr(&res);
    assert_eq!(res.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{}: two rows files for one run",
            base.with_extension("meta.json").display()
        )) && err.contains(s(&gz))
            && err.contains(s(&plain))
            && err.contains("nothing was written"),
        "{err}"
    );
    assert!(!out.exists(), "nothing published");
    // With --skip-invalid the other nine runs are packed and the run is listed as skipped.
    let summary: Value =
        serde_json::from_str(&pack(&input, &out, &["--skip-invalid", "--json"])).unwrap();
    assert_eq!(summary["runs"], 9);
    let reason = summary["skipped_runs"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains(s(&gz)) && reason.contains(s(&plain)),
        "{reason}"
    );
}

/// Every bad line of the invalid fixtures, in a plain file: the same exit code and message
/// (file and line) as the gzipped file gives, read whole or streamed.
#[test]
fn bad_lines_in_plain_files_are_reported_like_gzipped_ones() {
    let t = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (case, c) in invalid_cases() {
        if c["line"].is_null() || c["file"].as_str() != Some("b_bad.jsonl.gz") {
            continue;
        }
        let gz_in = fixture(&format!("invalid/{case}"));
        let plain_in = t.path().join(format!("in-{case}"));
        plain_copy(&gz_in, &plain_in, &|p| p.ends_with("b_bad.jsonl.gz"));
        for limit in [None, Some(0)] {
            let gz_out = t.path().join(format!("gz-{case}-{limit:?}"));
            let plain_out = t.path().join(format!("plain-{case}-{limit:?}"));
            let gz_res = pack_with_limit(&gz_in, &gz_out, limit);
            let plain_res = pack_with_limit(&plain_in, &plain_out, limit);
            let gz_err = stderr(&gz_res)
                .replace(s(&gz_in), "IN")
                .replace(".jsonl.gz", ".jsonl");
            let plain_err = stderr(&plain_res).replace(s(&plain_in), "IN");
            assert_eq!(plain_res.status.code(), Some(1), "{case}: {plain_err}");
            assert_eq!(plain_err, gz_err, "{case} {limit:?}");
            let line = c["line"].as_u64().unwrap();
            assert!(
                plain_err.contains(&format!("IN/b_bad.jsonl:{line}: ")),
                "{plain_err}"
            );
            assert!(!plain_out.exists(), "{case}: nothing published");
        }
        checked += 1;
    }
    assert!(checked >= 15, "{checked} cases");
}

#[test]
fn gzip_data_in_a_plain_file_is_named_as_such() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("raw");
    copy_tree(&fixture("invalid/json_malformed"), &input);
    std::fs::rename(input.join("b_bad.jsonl.gz"), input.join("b_bad.jsonl")).unwrap();
    let out = t.path().join("p");
    let res = pack_env(&input, &out, &[], &[]);
    let err = stderr(&res);
    assert_eq!(res.status.code(), Some(1), "{err}");
    assert!(
        err.contains("b_bad.jsonl: holds gzip data") && err.contains("name it .jsonl.gz"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn missing_and_orphan_rows_file_messages_name_both_forms() {
    let t = tempfile::tempdir().unwrap();
    let err = stderr(&run(&[
        "pack",
        "--input",
        s(&fixture("invalid/sidecar_without_rows")),
        "--output",
        s(&t.path().join("p")),
    ]));
    assert!(
        err.contains("b_bad.meta.json: the rows file is missing next to the sidecar: neither b_bad.jsonl.gz nor b_bad.jsonl exists"),
        "{err}"
    );
    // A drop of plain rows files without sidecars: no runs, and the message says what it saw.
    let input = t.path().join("no_runs");
    plain_copy(&fixture("invalid/no_runs"), &input, &|_| true);
    let err = stderr(&run(&[
        "pack",
        "--input",
        s(&input),
        "--output",
        s(&t.path().join("q")),
    ]));
    assert!(
        err.contains("no *.meta.json or *.meta.json.gz sidecars found (1 rows files, .jsonl.gz or .jsonl, without a sidecar)"),
        "{err}"
    );
}

/// A plain rows file longer than the stream buffer, with CRLF lines, lines split anywhere by
/// the buffer, one line longer than the buffer and no final newline, packs like its gzip; a bad
/// line deep in it is named alike.
#[test]
fn a_long_plain_rows_file_streams_like_its_gzip() {
    let t = tempfile::tempdir().unwrap();
    let base = "raw/d6_10g_v1/depth06_worker00_seed0272350805_game000000";
    let sidecar = std::fs::read(fixture(&format!("{base}.meta.json"))).unwrap();
    let text = read_gz(&fixture(&format!("{base}.jsonl.gz")));
    let rows: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut lines: Vec<String> = (0..12_000)
        .map(|i| {
            let end = if (4000..8000).contains(&i) {
                "\r\n"
            } else {
                "\n"
            };
            format!("{}{end}", rows[i % rows.len()])
        })
        .collect();
    // An unknown field of 1.5 MiB: the line outgrows the 1 MiB buffer.
    lines[6000] = lines[6000].replacen('{', &format!("{{\"pad\":\"{}\",", "x".repeat(3 << 19)), 1);
    let last = lines.len() - 1;
    lines[last] = lines[last].trim_end().to_string();
    let write_drop = |name: &str, text: &str| {
        let gz = t.path().join(format!("{name}-gz"));
        let plain = t.path().join(format!("{name}-plain"));
        for dir in [&gz, &plain] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("run.meta.json"), &sidecar).unwrap();
        }
        write_gz(&gz.join("run.jsonl.gz"), text.as_bytes());
        std::fs::write(plain.join("run.jsonl"), text).unwrap();
        (gz, plain)
    };
    let (gz, plain) = write_drop("good", &lines.concat());
    let (gz_pack, plain_pack) = (t.path().join("gz-pack"), t.path().join("plain-pack"));
    pack(&gz, &gz_pack, &["--workers", "2"]);
    pack(&plain, &plain_pack, &["--workers", "2"]);
    assert_eq!(pack_view(&plain_pack), pack_view(&gz_pack));
    assert_eq!(read_rows(&plain_pack).len(), 12_000);

    lines[8999] = lines[8999].replace("\"board\":[", "\"board\":[17,");
    let (gz, plain) = write_drop("bad", &lines.concat());
    let gz_err = stderr(&pack_with_limit(&gz, &t.path().join("p1"), Some(0)));
    let plain_err = stderr(&pack_with_limit(&plain, &t.path().join("p2"), None));
    assert!(plain_err.contains("run.jsonl:9000: "), "{plain_err}");
    assert_eq!(
        plain_err.replace(s(&plain), "IN"),
        gz_err.replace(s(&gz), "IN").replace(".jsonl.gz", ".jsonl")
    );
}

/// DATASET_PACKER_THREAD_CPU=FILE (the scaling bench's probe): the report names the parser
/// threads, the main thread and the pieces of work (the writer's commits, one per run, made on
/// the workers; the writes into each file, which the kernel makes one at a time), and the
/// threads' CPU times fit in the process's; the pack is the same as without it.
#[test]
fn the_thread_cpu_probe_reports_every_pack_thread() {
    let t = tempfile::tempdir().unwrap();
    let input = fixture("raw");
    let report = t.path().join("threads.json");
    let probed = t.path().join("probed");
    let out = pack_env(
        &input,
        &probed,
        &["--workers", "2", "--search-stats", "--shard-rows", "300"],
        &[("DATASET_PACKER_THREAD_CPU", Some(s(&report)))],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let plain = t.path().join("plain");
    pack(
        &input,
        &plain,
        &["--workers", "2", "--search-stats", "--shard-rows", "300"],
    );
    let bytes = |p: &std::path::Path| files(p, |name| name != "metadata.db");
    assert_eq!(bytes(&probed), bytes(&plain));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let cpu = r["cpu_s"].as_object().unwrap();
    for name in [
        "thread worker-0",
        "thread worker-1",
        "thread main",
        "span parse",
        "span copy: prefault",
        "span write into one file: steps",
        "span write into one file: search",
        "span commit",
    ] {
        assert!(cpu.contains_key(name), "no {name:?} in {r}");
    }
    let total = r["process_cpu_s"].as_f64().unwrap();
    let threads: f64 = cpu
        .iter()
        .filter(|(k, _)| k.starts_with("thread "))
        .map(|(_, v)| v.as_f64().unwrap())
        .sum();
    assert!(
        threads > 0.0 && threads <= total * 1.001 + 1e-3,
        "threads {threads} s of {total} s"
    );
    assert_eq!(r["count"]["span commit"], 10, "one commit per run: {r}");
}
