//! `view` end to end: the real binary serves a real pack on a free port, and its answers are
//! checked against the pack itself (the shards read back, metadata.db queried with SQL here,
//! the trainer's annotation arrays made with NumPy): the runs table's pages, orders and
//! filters; a run's rows, boards and companions; the disagreements of an attached
//! 2048former annotation family; the refusals (other methods, path tricks, missing runs and
//! steps, SQL that is not one expression, a foreign Host); and, in headless Chromium, the page
//! itself: its 16 `data-exp` cells equal the row's board, and → and End move the step and the
//! address.

mod common;

use std::path::{Path, PathBuf};

use common::browser::{Browser, chromium_installed};
use common::viewer::{Server, enc};
use common::*;
use dataset_packer::format::board;
use serde_json::Value;

/// The fixture drop packed in shards of 300 rows, so runs straddle shard boundaries.
fn fixture_pack(t: &Path) -> PathBuf {
    let p = t.join("p");
    pack(&fixture("raw"), &p, &["--shard-rows", "300"]);
    p
}

/// (run_id, step_index, move_dir, valuation_type, exponents, global row) of every row.
fn rows_of(pack: &Path) -> Vec<(u32, u32, u8, u8, [u8; 16], usize)> {
    read_rows(pack)
        .iter()
        .enumerate()
        .map(|(g, r)| {
            let u32_at = |o: usize| u32::from_le_bytes(r[o..o + 4].try_into().unwrap());
            let cells = board::unpack(
                u64::from_le_bytes(r[8..16].try_into().unwrap()),
                u16::from_le_bytes([r[20], r[21]]),
            );
            (u32_at(0), u32_at(4), r[22], r[23], cells, g)
        })
        .collect()
}

fn ids(page: &Value) -> Vec<i64> {
    page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

fn sql_ids(pack: &Path, sql: &str) -> Vec<i64> {
    let conn = db(pack);
    let mut stmt = conn.prepare(sql).unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn the_runs_table_pages_orders_and_filters_as_sql_says() {
    let t = tempfile::tempdir().unwrap();
    let p = fixture_pack(t.path());
    let server = Server::start(&p, &[]);
    assert!(
        server.banner.contains("2,240 rows in 10 runs"),
        "{}",
        server.banner
    );

    let first = server.json("/api/runs");
    assert_eq!(first["total"], 10);
    assert_eq!(ids(&first), (0..10).collect::<Vec<_>>());

    // Orders and pages equal SQLite's own over metadata.db.
    let by_score = sql_ids(&p, "SELECT id FROM runs ORDER BY max_score DESC, id DESC");
    let page1 = server.json("/api/runs?order=-max_score&limit=4");
    let page2 = server.json("/api/runs?order=-max_score&limit=4&offset=4");
    let page3 = server.json("/api/runs?order=-max_score&limit=4&offset=8");
    let paged: Vec<i64> = [page1, page2, page3].iter().flat_map(ids).collect();
    assert_eq!(paged, by_score);
    let deep = sql_ids(
        &p,
        "SELECT runs.id FROM runs JOIN run_details ON run_id = id WHERE depth = 7 ORDER BY steps, id",
    );
    let page = server.json(&format!("/api/runs?where={}&order=steps", enc("depth = 7")));
    assert_eq!(
        (page["total"].as_u64(), ids(&page)),
        (Some(deep.len() as u64), deep)
    );
    // A query, and parameters, as --where and --param take them.
    let long = sql_ids(&p, "SELECT id FROM runs WHERE steps > 200 ORDER BY id DESC");
    let page = server.json(&format!(
        "/api/runs?where={}&param=200&order=-id",
        enc("SELECT id FROM runs WHERE steps > ?")
    ));
    assert_eq!(ids(&page), long);

    // Each run's valuation types are its rows' counts.
    let rows = rows_of(&p);
    let names: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(p.join("valuation_types.json")).unwrap())
            .unwrap();
    for run in first["runs"].as_array().unwrap() {
        let id = run["id"].as_u64().unwrap() as u32;
        let mut counts = std::collections::BTreeMap::<String, u64>::new();
        for r in rows.iter().filter(|r| r.0 == id) {
            *counts.entry(names[r.3 as usize].clone()).or_default() += 1;
        }
        assert_eq!(
            run["valuation_types"],
            serde_json::json!(counts),
            "run {id}"
        );
        let steps: i64 = db(&p)
            .query_row("SELECT steps FROM runs WHERE id = ?", [id], |r| r.get(0))
            .unwrap();
        assert_eq!(run["steps"], steps);
    }

    // Bounds and refusals of the table.
    let (status, v) = server.get("/api/runs?limit=501");
    assert_eq!(status, 400, "{v}");
    let (status, v) = server.get("/api/runs?order=nope");
    assert!(
        status == 400 && v["error"].as_str().unwrap().contains("max_score"),
        "{v}"
    );
    let (status, v) = server.get("/api/runs?wher=1");
    assert_eq!(status, 400, "{v}");
}

#[test]
fn a_filter_that_is_not_one_expression_is_refused_and_limits_hold() {
    let t = tempfile::tempdir().unwrap();
    let p = fixture_pack(t.path());
    let server = Server::start(&p, &["--sql-timeout", "0.5"]);
    for sql in [
        "1) OR (1",
        "0) UNION SELECT 99 WHERE (1",
        "1; DELETE FROM runs",
        "DELETE FROM runs",
        "depth = 7 -- )",
    ] {
        let (status, v) = server.get(&format!("/api/runs?where={}", enc(sql)));
        if sql == "depth = 7 -- )" {
            // A comment is a comment: this one is one expression.
            assert_eq!(status, 200, "{sql}: {v}");
            continue;
        }
        assert_eq!(status, 400, "{sql}: {v}");
        assert!(v["error"].as_str().unwrap().contains("selection"), "{v}");
    }
    let endless = "SELECT x FROM (WITH RECURSIVE t(x) AS (SELECT 0 UNION ALL SELECT x FROM t) SELECT x FROM t)";
    let (status, v) = server.get(&format!("/api/runs?where={}", enc(endless)));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("time limit"), "{v}");
    assert_eq!(
        db(&p)
            .query_row("SELECT count(*) FROM runs", [], |r| r.get::<_, i64>(0))
            .unwrap(),
        10
    );
}

#[test]
fn a_runs_steps_are_its_rows_and_missing_runs_and_steps_are_404() {
    let t = tempfile::tempdir().unwrap();
    let p = fixture_pack(t.path());
    let server = Server::start(&p, &[]);
    let rows = rows_of(&p);
    for id in [0u32, 3, 9] {
        let mine: Vec<_> = rows.iter().filter(|r| r.0 == id).collect();
        let mut got = Vec::new();
        let mut from = Some(0u64);
        while let Some(f) = from {
            let page = server.json(&format!("/api/runs/{id}?from={f}&limit=70"));
            got.extend(page["steps"].as_array().unwrap().clone());
            from = page["next_from"].as_u64();
        }
        assert_eq!(got.len(), mine.len(), "run {id}");
        for (s, r) in got.iter().zip(&mine) {
            assert_eq!(s["step_index"], r.1);
            assert_eq!(s["move"], ["up", "down", "left", "right"][r.2 as usize]);
            assert_eq!(s["exponents"], serde_json::json!(r.4));
            assert_eq!(s["row"], r.5);
        }
        let timeline = server.json(&format!("/api/runs/{id}/timeline"));
        let steps: Vec<u32> = mine.iter().map(|r| r.1).collect();
        assert_eq!(timeline["step_index"], serde_json::json!(steps));
        let score: Vec<u64> = serde_json::from_value(timeline["score"].clone()).unwrap();
        assert!(score[0] == 0 && score.windows(2).all(|w| w[0] <= w[1]));
    }
    let (status, v) = server.get("/api/runs/99");
    assert_eq!(status, 404);
    assert!(
        v["error"].as_str().unwrap().contains("run 99 is not in"),
        "{v}"
    );
    let (status, v) = server.get("/api/runs/3?from=100000");
    assert!(
        status == 404 && v["error"].as_str().unwrap().contains("no step"),
        "{v}"
    );
    let (status, _, page) = server.request("GET", "/run/3?step=100000", None);
    assert!(status == 404 && page.contains("<html"), "{status}");
    let (status, _, _) = server.request("GET", "/run/99", None);
    assert_eq!(status, 404);
    let (status, _, _) = server.request("GET", "/run/3?step=5", None);
    assert_eq!(status, 200);
    let (status, v) = server.get("/api/runs/3?limit=5001");
    assert_eq!(status, 400, "{v}");
}

#[test]
fn only_get_and_head_are_answered_and_no_request_names_a_file() {
    let t = tempfile::tempdir().unwrap();
    let p = fixture_pack(t.path());
    let server = Server::start(&p, &[]);
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        for target in ["/", "/api/runs", "/api/runs/3", "/nowhere"] {
            let (status, head, _) = server.request(method, target, None);
            assert_eq!(status, 405, "{method} {target}");
            assert!(head.contains("allow: get, head"), "{head}");
        }
    }
    let (status, head, body) = server.request("HEAD", "/api/runs", None);
    assert!(status == 200 && head.contains("application/json") && body.is_empty());

    let shard = std::fs::read(p.join("steps-00000.npy")).unwrap();
    for target in [
        "/steps-00000.npy",
        "/metadata.db",
        "/../metadata.db",
        "/run/../metadata.db",
        "/api/runs/..%2Fmetadata.db",
        "/api/runs/3%2F..%2F..%2Fmetadata.db",
        "/run/3%00",
        "/api/runs/-1",
        "/api/runs/3/../../../etc/passwd",
        &format!("/api/runs/{}", "9".repeat(40)),
    ] {
        let (status, _, body) = server.request("GET", target, None);
        assert_eq!(status, 404, "{target}: {body}");
        assert!(
            !body.contains("SQLite format")
                && !body.as_bytes().windows(6).any(|w| w == &shard[..6])
        );
    }
    let (status, _, body) = server.request("GET", "/api/pack", Some("attacker.example:80"));
    assert_eq!(status, 403, "{body}");
    let (status, _, _) = server.request("GET", "/api/pack", Some("localhost"));
    assert_eq!(status, 200);
}

#[test]
fn the_trainers_annotations_are_shown_beside_the_teacher_with_their_disagreements() {
    let t = tempfile::tempdir().unwrap();
    let p = fixture_pack(t.path());
    let made = t.path().join("annotations");
    std::fs::create_dir(&made).unwrap();
    python_code(TRAINER_ANNOTATIONS, &[s(&p), s(&made), "keep"]);
    let mut annotations: Vec<String> = names(&made)
        .into_iter()
        .filter(|n| n.starts_with("annotations-0"))
        .map(|n| s(&made.join(n)).to_string())
        .collect();
    annotations.sort();
    let mut args = vec!["attach", s(&p), "--name", "annotation", "--quiet", "--from"];
    args.extend(annotations.iter().map(String::as_str));
    run_ok(&args);
    let mut student: Vec<String> = names(&made)
        .into_iter()
        .filter(|n| n.starts_with("annotations-student-"))
        .map(|n| s(&made.join(n)).to_string())
        .collect();
    student.sort();
    let mut args = vec!["attach", s(&p), "--name", "student", "--quiet", "--from"];
    args.extend(student.iter().map(String::as_str));
    run_ok(&args);

    let server = Server::start(&p, &[]);
    let pack = server.json("/api/pack");
    let families = pack["companions"].as_array().unwrap();
    let annotation = families.iter().find(|f| f["name"] == "annotation").unwrap();
    assert_eq!(annotation["move_field"], "argmax_head");
    let student_family = families.iter().find(|f| f["name"] == "student").unwrap();
    assert!(student_family["move_field"].is_null());

    // The disagreements are the steps where argmax_head (read back with NumPy) is not the
    // move played.
    let expected = python_code(
        r#"
import sys, glob, json, numpy as np
pack = sys.argv[1]
rows = np.concatenate([np.load(f) for f in sorted(glob.glob(pack + "/steps-*.npy"))])
ann = np.concatenate([np.load(f) for f in sorted(glob.glob(pack + "/annotation-*.npy"))])
out = {}
for run in np.unique(rows["run_id"]):
    m = (rows["run_id"] == run) & (ann["argmax_head"] != rows["move_dir"])
    out[int(run)] = [int(s) for s in rows["step_index"][m]]
print(json.dumps(out))
"#,
        &[s(&p)],
    );
    let expected: std::collections::BTreeMap<String, Vec<u32>> =
        serde_json::from_str(expected.trim()).unwrap();
    let table = server.json("/api/runs");
    for (run, steps) in &expected {
        assert!(!steps.is_empty());
        let listed = server.json(&format!("/api/runs/{run}/disagreements"));
        let got: Vec<u64> = listed["families"]["annotation"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["step_index"].as_u64().unwrap())
            .collect();
        let want: Vec<u64> = steps.iter().map(|&s| u64::from(s)).collect();
        assert_eq!(got, want, "run {run}");
        let timeline = server.json(&format!("/api/runs/{run}/timeline"));
        assert_eq!(
            timeline["disagreements"]["annotation"],
            serde_json::json!(steps)
        );
        let line = table["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"].as_u64() == run.parse().ok())
            .unwrap();
        assert_eq!(line["disagreements"]["annotation"], steps.len());
    }

    // A step's companions: every field of the annotation row, the student's vector
    // summarised, and the family's move beside the teacher's.
    let page = server.json("/api/runs/3?from=5&limit=2");
    let rows = rows_of(&p);
    for step in page["steps"].as_array().unwrap() {
        let g = step["row"].as_u64().unwrap() as usize;
        let a = &step["companions"]["annotation"];
        assert_eq!(a["values"]["run_id"], 3);
        assert_eq!(a["values"]["step_index"], step["step_index"]);
        let p1: Vec<f64> = (0..4).map(|k| (g * 4 + k) as f64).collect();
        assert_eq!(a["values"]["policy_p1"], serde_json::json!(p1));
        let odd = step["step_index"].as_u64().unwrap() % 2 == 1;
        assert_eq!(a["differs"], odd);
        let teacher = rows[g].2;
        let model = (teacher + u8::from(odd)) % 4;
        assert_eq!(a["move"], ["up", "down", "left", "right"][model as usize]);
        let st = &step["companions"]["student"];
        assert_eq!(st["values"]["shape"], serde_json::json!([4, 3]));
        assert_eq!(st["values"]["min"], (g * 12) as f64);
        assert!(st["move"].is_null());
    }

    // The version before the annotations were attached has no companions.
    let before = Server::start(&p, &["--version", "1"]);
    let v1 = before.json("/api/pack");
    assert_eq!(v1["companions"], serde_json::json!([]));
    assert_eq!(v1["version"], 1);
}

#[test]
fn the_page_shows_the_rows_board_and_the_arrow_keys_step() {
    if !chromium_installed() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let p = fixture_pack(t.path());
    let server = Server::start(&p, &[]);
    let rows = rows_of(&p);
    let run: Vec<_> = rows.iter().filter(|r| r.0 == 3).collect();
    // A step in the middle, in the second chunk the page fetches and past a shard boundary.
    let k = 230usize.min(run.len() - 3);
    let (step, next) = (run[k].1, run[k + 1].1);

    let mut browser = Browser::start(&t.path().join("profile"));
    browser.open(&format!("http://{}/run/3?step={step}", server.address));
    assert_eq!(browser.wait_for("document.body.dataset.ready"), "run");
    let board = || "JSON.stringify([...document.querySelectorAll('#board .cell')].map(c => Number(c.dataset.exp)))";
    let cells: Vec<u8> = serde_json::from_str(browser.eval(board()).as_str().unwrap()).unwrap();
    assert_eq!(cells, run[k].4, "the board of run 3 step {step}");
    assert_eq!(browser.eval("document.body.dataset.step"), step.to_string());

    browser.press("ArrowRight", 39);
    browser.wait_for(&format!("document.body.dataset.step === '{next}'"));
    let cells: Vec<u8> = serde_json::from_str(browser.eval(board()).as_str().unwrap()).unwrap();
    assert_eq!(cells, run[k + 1].4);
    assert_eq!(browser.eval("location.search"), format!("?step={next}"));

    let last = run.last().unwrap();
    browser.press("End", 35);
    browser.wait_for(&format!("document.body.dataset.step === '{}'", last.1));
    let cells: Vec<u8> = serde_json::from_str(browser.eval(board()).as_str().unwrap()).unwrap();
    assert_eq!(cells, last.4);
    browser.press("Home", 36);
    browser.wait_for(&format!("document.body.dataset.step === '{}'", run[0].1));
    assert_eq!(
        browser.eval("document.querySelector('#played').textContent"),
        ["up", "down", "left", "right"][run[0].2 as usize]
    );

    // The runs table: one line per run, and a filter typed in the page.
    browser.open(&format!("http://{}/", server.address));
    assert_eq!(browser.wait_for("document.body.dataset.ready"), "runs");
    assert_eq!(
        browser.eval("document.querySelectorAll('#runs-table tbody tr').length"),
        10
    );
    browser.eval(
        "document.body.dataset.ready = ''; document.querySelector('#where').value = 'depth = 7'; \
         document.querySelector('#apply').click()",
    );
    browser.wait_for("document.body.dataset.ready");
    let shown = browser.eval(
        "[...document.querySelectorAll('#runs-table tbody tr')].map(r => Number(r.dataset.run))",
    );
    let deep = sql_ids(
        &p,
        "SELECT run_id FROM run_details WHERE depth = 7 ORDER BY run_id",
    );
    assert_eq!(shown, serde_json::json!(deep));
    assert!(
        browser.errors.is_empty(),
        "console errors: {:?}",
        browser.errors
    );
}

#[test]
fn a_shuffled_pack_lists_its_runs_and_says_why_a_run_cannot_be_shown() {
    let t = tempfile::tempdir().unwrap();
    let p = fixture_pack(t.path());
    let shuffled = t.path().join("shuffled");
    run_ok(&["shuffle", s(&p), "--output", s(&shuffled), "--quiet"]);
    let server = Server::start(&shuffled, &[]);
    let table = server.json("/api/runs?order=-steps&limit=3");
    let longest = sql_ids(
        &p,
        "SELECT id FROM runs ORDER BY steps DESC, id DESC LIMIT 3",
    );
    assert_eq!(ids(&table), longest);
    assert!(table["runs"][0].get("valuation_types").is_none(), "{table}");
    let (status, v) = server.get("/api/runs/3/timeline");
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("shuffled"), "{v}");
}
