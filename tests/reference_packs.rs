//! Packs written by the reference packer (2048former's `crates/dataset-packer`): npyz-written
//! 46-byte rows, a `metadata.db` with only `runs` and an empty `session`, and
//! `valuation_types.json` as name → id (see `common/reference.rs`). Every command reads them
//! as legacy packs; `export --format pack`, `merge` and `shuffle` write full packs from them,
//! `ev_legal` recomputed from the board, and say how many rows that changed.

mod common;
#[path = "common/reference.rs"]
mod reference;

use std::path::{Path, PathBuf};

use common::*;
use reference::*;
use serde_json::Value;

/// A pack of this tool from the fixture drop (shards of 1000 rows), the same pack in the
/// reference packer's layout, and how many of its rows the reference marks differently.
fn packs(t: &Path, shard_rows: Option<usize>) -> (PathBuf, PathBuf, u64) {
    let original = t.join("original");
    pack(&fixture("raw"), &original, &["--shard-rows", "1000"]);
    let reference = t.join("reference");
    let changed = make_reference_pack(&original, &reference, shard_rows);
    (original, reference, changed)
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&run_ok(args)).expect("one JSON document")
}

fn table(pack: &Path, sql: &str) -> Vec<(i64, String)> {
    db(pack)
        .prepare(sql)
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn run_index(pack: &Path) -> Vec<(i64, String)> {
    table(
        pack,
        "SELECT run_id, shard || ':' || row_offset || ':' || global_row FROM run_index ORDER BY run_id",
    )
}

fn fingerprints(pack: &Path) -> Vec<(i64, String)> {
    table(
        pack,
        "SELECT run_id, fingerprint FROM run_details ORDER BY run_id",
    )
}

#[test]
fn the_test_pack_is_spelled_as_npyz_spells_it() {
    let t = tempfile::tempdir().unwrap();
    let (_, reference, changed) = packs(t.path(), Some(1000));
    let shard = std::fs::read(reference.join("steps-00000.npy")).unwrap();
    let header = String::from_utf8_lossy(&shard[..384]).into_owned();
    assert!(header.contains("('move_dir', '<u1')"), "{header}");
    assert!(header.contains("(4,)), ]"), "a trailing comma: {header}");
    assert_eq!((shard.len() - 384) % 46, 0);
    assert!(changed > 0, "the fixture has tuple rows with illegal moves");
    let tables = table(
        &reference,
        "SELECT COUNT(*), group_concat(name) FROM sqlite_master WHERE type = 'table'",
    );
    assert_eq!(tables, [(2, "runs,session".to_string())]);
}

#[test]
fn validate_reads_it_as_a_legacy_pack() {
    let t = tempfile::tempdir().unwrap();
    let (_, reference, _) = packs(t.path(), Some(1000));
    let out = run(&["validate", s(&reference), "--json", "--quiet"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = report.to_string();
    assert!(!text.contains("is not the pack row dtype"), "{text}");
    assert!(text.contains("legacy packed 46-byte shard"), "{text}");
    assert!(text.contains("--format pack"), "{text}");
    for check in report["checks"].as_array().unwrap() {
        if check["name"] != "shard files and headers" {
            assert_eq!(check["failures"], 0, "{check}");
        }
    }
    assert_eq!(report["rows"], read_rows(&t.path().join("original")).len());
}

#[test]
fn stats_show_and_exports_read_it_as_stored() {
    let t = tempfile::tempdir().unwrap();
    let (original, reference, _) = packs(t.path(), Some(1000));
    let before = files(&reference, |_| true);

    let (a, b) = (
        json(&["stats", s(&original), "--json"]),
        json(&["stats", s(&reference), "--json"]),
    );
    for k in ["rows", "runs", "valuation_types", "phases"] {
        assert_eq!(a[k], b[k], "{k}");
    }

    // The run index is rebuilt from the runs table and the rows (runs of ~200 rows in shards
    // of 1000: some start mid-shard, some cross into the next shard).
    for run_id in ["0", "3", "5", "9"] {
        let args = ["show", "--json", "--run", run_id, "--limit", "2000"];
        let (mut a, mut b) = (
            json(&[&args[..1], &[s(&original)], &args[1..]].concat()),
            json(&[&args[..1], &[s(&reference)], &args[1..]].concat()),
        );
        assert_eq!(a["run"]["first_row"], b["run"]["first_row"], "run {run_id}");
        // Tuple rows differ in what the reference marked legal; everything else is the same.
        for steps in [&mut a["steps"], &mut b["steps"]] {
            for step in steps.as_array_mut().unwrap() {
                step.as_object_mut().unwrap().remove("legal");
            }
        }
        assert_eq!(a["steps"], b["steps"], "run {run_id}");
    }

    let jsonl = t.path().join("runs.jsonl.gz");
    run_ok(&[
        "export",
        s(&reference),
        "--format",
        "jsonl",
        "--output",
        s(&jsonl),
        "--quiet",
    ]);
    assert_eq!(read_gz(&jsonl).lines().count(), read_rows(&original).len());
    let parquet = t.path().join("rows.parquet");
    run_ok(&[
        "export",
        s(&reference),
        "--format",
        "parquet",
        "--output",
        s(&parquet),
        "--quiet",
    ]);

    // Reading left the pack as it was (its WAL-mode metadata.db included).
    let after = files(&reference, |_| true);
    let names = |f: &Files| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&after), names(&before));
    for ((name, a), (_, b)) in after.iter().zip(&before) {
        assert!(a == b, "{name} changed");
    }
}

#[test]
fn export_as_a_pack_upgrades_it() {
    let t = tempfile::tempdir().unwrap();
    let (original, reference, changed) = packs(t.path(), Some(1000));
    let upgraded = t.path().join("upgraded");
    let out = run_ok(&[
        "export",
        s(&reference),
        "--format",
        "pack",
        "--output",
        s(&upgraded),
        "--shard-rows",
        "1000",
        "--quiet",
    ]);
    assert!(
        out.contains(&format!(
            "recomputing ev_legal from the board changed {} rows",
            thousands(changed)
        )),
        "{out}"
    );
    // 48-byte rows with ev_legal as the format defines it: the shards of this tool's pack.
    assert_eq!(pack_bytes(&upgraded), pack_bytes(&original));
    assert_eq!(runs_table(&upgraded), runs_table(&original));
    assert_eq!(run_index(&upgraded), run_index(&original));
    assert_eq!(fingerprints(&upgraded), fingerprints(&original));
    assert_eq!(
        session_value(&upgraded, "legacy_ev_legal_changed"),
        Some(changed.to_string())
    );
    run_ok(&["validate", s(&upgraded), "--deep", "--quiet"]);

    // A subset: only the selected runs' rows are counted.
    let subset = t.path().join("subset");
    run_ok(&[
        "export",
        s(&reference),
        "--format",
        "pack",
        "--output",
        s(&subset),
        "--runs",
        "0-4",
        "--quiet",
    ]);
    let subset_rows = read_rows(&subset);
    let original_rows = read_rows(&original);
    assert_eq!(subset_rows[..], original_rows[..subset_rows.len()]);
    let want = changed_in(&original, &original_rows[..subset_rows.len()]);
    assert_eq!(
        session_value(&subset, "legacy_ev_legal_changed"),
        Some(want.to_string())
    );
    run_ok(&["validate", s(&subset), "--quiet"]);
}

/// How many of `rows` (of `pack`) the reference layout marks differently: tuple rows with an
/// illegal move.
fn changed_in(pack: &Path, rows: &[[u8; 48]]) -> u64 {
    let names: Vec<String> =
        serde_json::from_slice(&std::fs::read(pack.join("valuation_types.json")).unwrap()).unwrap();
    rows.iter()
        .filter(|r| names[r[23] as usize].starts_with("tuple") && r[24] != 0b1111)
        .count() as u64
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn merge_upgrades_it() {
    let t = tempfile::tempdir().unwrap();
    let (original, reference, changed) = packs(t.path(), None);
    let merged = t.path().join("merged");
    let summary = json(&[
        "merge",
        "--quiet",
        "--json",
        "--input",
        s(&reference),
        "--input",
        s(&original),
        "--output",
        s(&merged),
        "--shard-rows",
        "700",
    ]);
    assert_eq!(summary["legacy_ev_legal_changed"], changed);
    // The same as merging this tool's pack with itself: the rows upgraded, and every run of
    // the second input found to duplicate one of the first (same fingerprints).
    let twice = t.path().join("twice");
    let other = t.path().join("copy");
    copy_tree(&original, &other);
    let plain = json(&[
        "merge",
        "--quiet",
        "--json",
        "--input",
        s(&original),
        "--input",
        s(&other),
        "--output",
        s(&twice),
        "--shard-rows",
        "700",
    ]);
    assert_eq!(plain["legacy_ev_legal_changed"], Value::Null);
    assert_eq!(summary["duplicate_runs"], plain["duplicate_runs"]);
    assert_eq!(pack_bytes(&merged), pack_bytes(&twice));
    assert_eq!(run_index(&merged), run_index(&twice));
    run_ok(&["validate", s(&merged), "--quiet"]);
}

#[test]
fn shuffle_reads_it() {
    let t = tempfile::tempdir().unwrap();
    let (original, reference, changed) = packs(t.path(), Some(1000));
    let shuffled = t.path().join("shuffled");
    let summary = json(&[
        "shuffle",
        "--input",
        s(&reference),
        "--output",
        s(&shuffled),
        "--seed",
        "7",
        "--quiet",
        "--json",
    ]);
    assert_eq!(summary["legacy_ev_legal_changed"], changed);
    assert_eq!(
        session_value(&shuffled, "legacy_ev_legal_changed"),
        Some(changed.to_string())
    );
    run_ok(&["validate", s(&shuffled), "--quiet"]);
    let mut got = read_rows(&shuffled);
    let mut want = read_rows(&original);
    assert_ne!(got, want, "shuffled");
    got.sort();
    want.sort();
    assert_eq!(got, want, "the same rows, upgraded");
}

#[test]
fn show_refuses_a_pack_whose_rows_are_not_where_the_runs_table_says() {
    let t = tempfile::tempdir().unwrap();
    let (_, reference, _) = packs(t.path(), Some(1000));
    let conn = rusqlite::Connection::open(reference.join("metadata.db")).unwrap();
    conn.execute_batch("UPDATE runs SET steps = steps + 1 WHERE id = 2; UPDATE runs SET steps = steps - 1 WHERE id = 3;")
        .unwrap();
    drop(conn);
    let out = run(&["show", s(&reference), "--run", "3"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("not where the runs table places run 3"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_library_opens_it_and_reads_the_rows_a_full_pack_holds() {
    let t = tempfile::tempdir().unwrap();
    let (original, reference, changed) = packs(t.path(), Some(1000));
    assert!(changed > 0, "the reference marks some rows differently");
    let legacy = dataset_packer::Pack::open(&reference).unwrap();
    let full = dataset_packer::Pack::open(&original).unwrap();
    assert_eq!(
        (legacy.len(), legacy.num_runs()),
        (full.len(), full.num_runs())
    );
    // Every row as the upgraded pack holds it: ev_legal recomputed from the board.
    let a: Vec<[u8; 48]> = legacy.steps().map(|s| *s.as_bytes()).collect();
    let b: Vec<[u8; 48]> = full.steps().map(|s| *s.as_bytes()).collect();
    assert!(a == b, "the legacy pack's rows differ from the full pack's");
    let run = legacy.run(7).unwrap();
    assert!(run.steps().all(|s| s.run_id() == 7));
    assert_eq!(run.len(), full.run(7).unwrap().len());
}
