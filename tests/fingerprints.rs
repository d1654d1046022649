//! Run fingerprints and duplicate runs: the same game has the same fingerprint however it was
//! logged or packed, any change to a row changes it, and a game that enters a pack twice is
//! reported (or left out with --dedupe) by pack, merge and export.

mod common;

use std::path::Path;

use common::*;
use serde_json::{Map, Value};

const RUN: &str = "d7_10g_v1/depth07_worker01_seed1273930897_game000000";

/// `RUN` as another logger run would have written it: keys in another order, an extra field
/// on every row and in the sidecar, numbers spelled differently, the rows re-gzipped at
/// another level, and the sidecar gzipped.
fn relogged_copy(dir: &Path, base: &str) {
    let src = fixture(&format!("raw/{RUN}"));
    let rows: Vec<String> = read_gz(&src.with_extension("jsonl.gz"))
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let row: Map<String, Value> = serde_json::from_str(line).unwrap();
            // serde_json's Map sorts keys: the order differs from the logger's.
            let mut reordered = Map::new();
            for (k, v) in row.into_iter().rev() {
                reordered.insert(k, v);
            }
            reordered.insert("note".into(), Value::String("re-logged".into()));
            serde_json::to_string(&reordered).unwrap()
        })
        .collect();
    std::fs::create_dir_all(dir).unwrap();
    let base = dir.join(base);
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut enc, (rows.join("\r\n") + "\r\n").as_bytes()).unwrap();
    std::fs::write(base.with_extension("jsonl.gz"), enc.finish().unwrap()).unwrap();
    let mut sidecar: Map<String, Value> =
        serde_json::from_slice(&std::fs::read(src.with_extension("meta.json")).unwrap()).unwrap();
    sidecar.insert("host".into(), Value::String("elsewhere".into()));
    write_gz(
        &base.with_extension("meta.json.gz"),
        serde_json::to_string_pretty(&sidecar).unwrap().as_bytes(),
    );
}

/// `(source_path, fingerprint)` of every run, by run id.
fn fingerprints(pack: &Path) -> Vec<(String, String)> {
    db(pack)
        .prepare("SELECT source_path, fingerprint FROM run_details ORDER BY run_id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn fingerprint_list(pack: &Path) -> Vec<String> {
    fingerprints(pack).into_iter().map(|(_, f)| f).collect()
}

fn pack_json(input: &Path, output: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&pack(input, output, &args)).unwrap()
}

#[test]
fn a_relogged_copy_is_a_duplicate_and_dedupe_leaves_it_out() {
    let t = tempfile::tempdir().unwrap();
    let drop = t.path().join("drop");
    copy_tree(&fixture("raw"), &drop);
    relogged_copy(&drop.join("zz_copy"), "copied_game");

    let kept = t.path().join("kept");
    let summary = pack_json(&drop, &kept, &[]);
    assert_eq!(summary["runs"], 11);
    assert_eq!(summary["duplicate_runs"], 1);
    assert_eq!(summary["findings"]["duplicate_run"], 1);
    let fps = fingerprints(&kept);
    let original = fps
        .iter()
        .position(|(p, _)| p == &format!("{RUN}.meta.json"))
        .unwrap();
    assert_eq!(fps[10].0, "zz_copy/copied_game.meta.json.gz");
    assert_eq!(fps[10].1, fps[original].1, "same game, same fingerprint");
    assert_eq!(fps[10].1.len(), 32);
    let example = &summary["finding_examples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "duplicate_run")
        .unwrap()
        .clone();
    assert_eq!(example["run_id"], 10);
    assert_eq!(example["source_path"], "zz_copy/copied_game.meta.json.gz");
    let detail = example["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("run {original} ({RUN}.meta.json)")),
        "{detail}"
    );
    let (kind, count): (String, i64) = db(&kept)
        .query_row(
            "SELECT kind, count FROM finding_counts WHERE kind = 'duplicate_run'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((kind.as_str(), count), ("duplicate_run", 1));
    let text = pack(&drop, &t.path().join("kept2"), &[]);
    assert!(text.contains("duplicate_run: 1"), "{text}");
    run_ok(&["validate", s(&kept), "--deep"]);

    let deduped = t.path().join("deduped");
    let summary = pack_json(&drop, &deduped, &["--dedupe"]);
    assert_eq!(summary["runs"], 10);
    assert_eq!(summary["duplicate_runs"], 0);
    let skipped = summary["skipped_runs"].as_array().unwrap();
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0]["path"], "zz_copy/copied_game.meta.json.gz");
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("same content as run {original}")),
        "{summary}"
    );
    let reference = t.path().join("reference");
    pack(&fixture("raw"), &reference, &[]);
    assert_eq!(pack_bytes(&deduped), pack_bytes(&reference));
    assert_eq!(runs_table(&deduped), runs_table(&reference));
    let recorded: String = db(&deduped)
        .query_row("SELECT reason FROM skipped_runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(recorded, skipped[0]["reason"].as_str().unwrap());
    run_ok(&["validate", s(&deduped), "--deep"]);
}

#[test]
fn merge_dedupe_of_overlapping_packs_equals_a_pack_of_the_union() {
    let t = tempfile::tempdir().unwrap();
    // A: the findings drop. B: the same games again (another folder) and the d7 games.
    let union = t.path().join("union");
    copy_tree(&fixture("findings"), &union.join("a"));
    copy_tree(&fixture("findings"), &union.join("b/copy"));
    copy_tree(&fixture("raw/d7_10g_v1"), &union.join("b/d7"));
    let pack_a = t.path().join("pack_a");
    let pack_b = t.path().join("pack_b");
    pack(&union.join("a"), &pack_a, &["--shard-rows", "100"]);
    pack(&union.join("b"), &pack_b, &["--shard-rows", "100"]);
    let whole = t.path().join("whole");
    pack(&union, &whole, &["--shard-rows", "100", "--dedupe"]);

    let merged = t.path().join("merged");
    let summary: Value = serde_json::from_str(&run_ok(&[
        "merge",
        "--input",
        s(&pack_a),
        "--input",
        s(&pack_b),
        "--output",
        s(&merged),
        "--shard-rows",
        "100",
        "--dedupe",
        "--json",
        "--quiet",
    ]))
    .unwrap();
    let copies = runs_table(&pack_a).len();
    assert_eq!(summary["skipped_runs"].as_array().unwrap().len(), copies);
    assert_eq!(pack_bytes(&merged), pack_bytes(&whole));
    assert_eq!(runs_table(&merged), runs_table(&whole));
    assert_eq!(fingerprint_list(&merged), fingerprint_list(&whole));
    // The findings the copies carried are not counted twice.
    let counts = |p: &Path| -> Vec<(String, i64)> {
        db(p)
            .prepare("SELECT kind, count FROM finding_counts ORDER BY kind")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert!(
        counts(&whole)
            .iter()
            .any(|(k, _)| k == "illegal_move_played")
    );
    assert_eq!(counts(&merged), counts(&whole));
    run_ok(&["validate", s(&merged), "--deep"]);

    // Without --dedupe the copies are kept and reported, naming both packs' runs.
    let kept = t.path().join("kept");
    let summary: Value = serde_json::from_str(&run_ok(&[
        "merge",
        "--input",
        s(&pack_a),
        "--input",
        s(&pack_b),
        "--output",
        s(&kept),
        "--json",
        "--quiet",
    ]))
    .unwrap();
    assert_eq!(summary["duplicate_runs"], copies);
    let (source, detail): (String, String) = db(&kept)
        .query_row(
            "SELECT source_path, detail FROM findings WHERE kind = 'duplicate_run' ORDER BY run_id LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(source.contains("pack_b"), "{source}");
    assert!(
        detail.contains("same content as run 0") && detail.contains("pack_a"),
        "{detail}"
    );
    run_ok(&["validate", s(&kept), "--deep"]);
}

#[test]
fn the_fingerprint_survives_every_way_of_moving_a_run() {
    let t = tempfile::tempdir().unwrap();
    let whole = t.path().join("whole");
    pack(&fixture("raw"), &whole, &[]);
    let reference = fingerprint_list(&whole);

    // merge of two parts
    let d6 = t.path().join("d6");
    let d7 = t.path().join("d7");
    pack(&fixture("raw/d6_10g_v1"), &d6, &[]);
    pack(&fixture("raw/d7_10g_v1"), &d7, &[]);
    let merged = t.path().join("merged");
    run_ok(&[
        "merge",
        "--left",
        s(&d6),
        "--right",
        s(&d7),
        "--output",
        s(&merged),
        "--quiet",
    ]);
    assert_eq!(fingerprint_list(&merged), reference);

    // export --format pack, and of a subset
    let exported = t.path().join("exported");
    run_ok(&[
        "export",
        s(&whole),
        "--format",
        "pack",
        "--output",
        s(&exported),
        "--quiet",
    ]);
    assert_eq!(fingerprint_list(&exported), reference);
    let subset = t.path().join("subset");
    run_ok(&[
        "export",
        s(&whole),
        "--format",
        "pack",
        "--output",
        s(&subset),
        "--runs",
        "3,7-8",
        "--quiet",
    ]);
    assert_eq!(
        fingerprint_list(&subset),
        [
            reference[3].clone(),
            reference[7].clone(),
            reference[8].clone()
        ]
    );

    // export --format jsonl, then pack
    let raw_again = t.path().join("raw_again");
    run_ok(&[
        "export",
        s(&whole),
        "--format",
        "jsonl",
        "--output",
        s(&raw_again),
        "--quiet",
    ]);
    let repacked = t.path().join("repacked");
    pack(&raw_again, &repacked, &[]);
    assert_eq!(fingerprint_list(&repacked), reference);

    // pack --update
    let grown = t.path().join("grown");
    let drop = t.path().join("drop");
    copy_tree(&fixture("raw/d6_10g_v1"), &drop.join("d6_10g_v1"));
    pack(&drop, &grown, &[]);
    copy_tree(&fixture("raw/d7_10g_v1"), &drop.join("d7_10g_v1"));
    pack(&drop, &grown, &["--update"]);
    assert_eq!(fingerprint_list(&grown), reference);

    // shuffle keeps them
    let shuffled = t.path().join("shuffled");
    run_ok(&[
        "shuffle",
        "--input",
        s(&whole),
        "--output",
        s(&shuffled),
        "--quiet",
    ]);
    assert_eq!(fingerprint_list(&shuffled), reference);
}

#[test]
fn one_ulp_in_one_ev_changes_the_fingerprint_of_that_run_only() {
    let t = tempfile::tempdir().unwrap();
    let drop = t.path().join("drop");
    copy_tree(&fixture("raw"), &drop);
    let before = t.path().join("before");
    pack(&drop, &before, &[]);

    let rows_file = drop.join(format!("{RUN}.jsonl.gz"));
    let text = read_gz(&rows_file);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let (i, ev) = lines
        .iter()
        .enumerate()
        .find_map(|(i, l)| {
            let row: Value = serde_json::from_str(l).ok()?;
            let ev = row["branch_evs"]["left"].as_f64()?;
            (ev != 0.0).then_some((i, ev))
        })
        .unwrap();
    let next = f32::from_bits((ev as f32).to_bits() + 1);
    let mut row: Value = serde_json::from_str(&lines[i]).unwrap();
    row["branch_evs"]["left"] = Value::from(f64::from(next));
    lines[i] = row.to_string();
    write_gz(&rows_file, (lines.join("\n") + "\n").as_bytes());
    let after = t.path().join("after");
    pack(&drop, &after, &[]);

    let (a, b) = (fingerprints(&before), fingerprints(&after));
    let changed: Vec<&str> = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x.1 != y.1)
        .map(|(x, _)| x.0.as_str())
        .collect();
    assert_eq!(changed, [format!("{RUN}.meta.json").as_str()]);
}

#[test]
fn validate_checks_recorded_fingerprints() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("pack");
    pack(&fixture("raw"), &p, &[]);
    let conn = rusqlite::Connection::open(p.join("metadata.db")).unwrap();

    // Another well-formed fingerprint: only --deep, recomputing, sees it.
    conn.execute(
        "UPDATE run_details SET fingerprint = '0123456789abcdef0123456789abcdef' WHERE run_id = 4",
        [],
    )
    .unwrap();
    run_ok(&["validate", s(&p)]);
    let out = run(&["validate", s(&p), "--deep"]);
    assert_eq!(out.status.code(), Some(1));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("run fingerprints")
            && report.contains("run 4: fingerprint 0123456789abcdef"),
        "{report}"
    );

    // Malformed, or a duplicate the findings do not record: a failure without --deep.
    let good: String = conn
        .query_row(
            "SELECT fingerprint FROM run_details WHERE run_id = 3",
            [],
            |r| r.get(0),
        )
        .unwrap();
    conn.execute(
        "UPDATE run_details SET fingerprint = ?1 WHERE run_id = 4",
        [&good],
    )
    .unwrap();
    let out = run(&["validate", s(&p)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("finding_counts records 0 duplicate_run"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    conn.execute(
        "UPDATE run_details SET fingerprint = 'XYZ' WHERE run_id = 4",
        [],
    )
    .unwrap();
    let out = run(&["validate", s(&p), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "run fingerprints")
        .unwrap()
        .clone();
    assert!(
        check["examples"][0]
            .as_str()
            .unwrap()
            .contains("not 32 lowercase hex digits"),
        "{check}"
    );
}

#[test]
fn merge_refuses_a_shuffled_input() {
    let t = tempfile::tempdir().unwrap();
    let a = t.path().join("a");
    pack(&fixture("raw"), &a, &[]);
    let shuffled = t.path().join("shuffled");
    run_ok(&[
        "shuffle",
        "--input",
        s(&a),
        "--output",
        s(&shuffled),
        "--quiet",
    ]);
    let b = t.path().join("b");
    pack(&fixture("findings"), &b, &[]);
    let out = run(&[
        "merge",
        "--left",
        s(&b),
        "--right",
        s(&shuffled),
        "--output",
        s(&t.path().join("m")),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("is a shuffled pack") && err.contains("then shuffle the result"),
        "{err}"
    );
    assert!(!t.path().join("m").exists());
}
