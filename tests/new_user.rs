//! What a new user coming from 2048former hit (issue 33), each read from the real output: a
//! converted pack's missing depth is named, a skipped run shows in `stats` and `validate`,
//! `shuffle` calls an unreachable goal out of reach, `export` takes its format from the file
//! name, a missing middle shard is named, and `pack RAW PACK` gets the command that works.

mod common;
#[path = "common/reference.rs"]
mod reference;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// The fixture drop's d6 folder with one sidecar broken, packed with `--skip-invalid`:
/// (pack, the broken sidecar's path relative to the drop).
fn pack_with_a_skipped_run(t: &Path) -> (PathBuf, String) {
    let raw = t.join("raw");
    copy_tree(&fixture("raw/d6_10g_v1"), &raw);
    let sidecar = walk(&raw)
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(".meta.json"))
        .unwrap();
    std::fs::write(&sidecar, "{not json").unwrap();
    let p = t.join("pack");
    pack(&raw, &p, &["--skip-invalid"]);
    let name = sidecar
        .strip_prefix(&raw)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    (p, name)
}

#[test]
fn stats_and_validate_name_the_runs_skip_invalid_left_out() {
    let t = tempfile::tempdir().unwrap();
    let (p, name) = pack_with_a_skipped_run(t.path());
    let stats = run_ok(&["stats", s(&p)]);
    assert!(
        stats.contains(
            "Runs left out at pack time (--skip-invalid; metadata.db table skipped_runs): 1"
        ),
        "{stats}"
    );
    assert!(stats.contains(&format!("  {name}: ")), "{stats}");
    let validate = run_ok(&["validate", s(&p), "--quiet"]);
    assert!(validate.contains("skipped at pack time"), "{validate}");
    assert!(validate.contains(&format!("e.g. {name}: ")), "{validate}");
    assert!(validate.contains("VALID"), "a skipped run is not a failure");
    let doc: Value = serde_json::from_str(&run_ok(&["validate", s(&p), "--json"])).unwrap();
    assert_eq!(doc["skipped_runs"][0]["source_path"], name.as_str());
    // A pack without skipped runs says nothing of them.
    let clean = t.path().join("clean");
    pack(&fixture("raw/d6_10g_v1"), &clean, &[]);
    assert!(!run_ok(&["stats", s(&clean)]).contains("left out at pack time"));
    assert!(!run_ok(&["validate", s(&clean), "--quiet"]).contains("skipped at pack time"));
}

#[test]
fn a_converted_pack_says_it_records_no_depth() {
    let t = tempfile::tempdir().unwrap();
    let original = t.path().join("original");
    pack(&fixture("raw"), &original, &[]);
    let old = t.path().join("old");
    reference::make_reference_pack(&original, &old, None);
    let new = t.path().join("new");
    run_ok(&[
        "export",
        s(&old),
        "--format",
        "pack",
        "--output",
        s(&new),
        "--quiet",
    ]);

    let stats = run_ok(&["stats", s(&new)]);
    assert!(stats.contains("? = no depth recorded"), "{stats}");
    let out = run(&["stats", s(&new), "--where", "depth = 6"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("selects no runs") && err.contains("the pack records no depth"));
    assert!(err.contains("UPDATE run_details SET depth = 6"), "{err}");
    let out = run(&[
        "export",
        s(&new),
        "--output",
        s(&t.path().join("d6.parquet")),
        "--where",
        "depth = 6",
    ]);
    assert!(stderr(&out).contains("the pack records no depth"));
    // Any other empty selection is only empty.
    let out = run(&["stats", s(&new), "--where", "max_score < 0"]);
    assert!(!stderr(&out).contains("depth"), "{}", stderr(&out));
    // The way back the message gives: set it, and the selection finds the runs.
    rusqlite::Connection::open(new.join("metadata.db"))
        .unwrap()
        .execute("UPDATE run_details SET depth = 6", [])
        .unwrap();
    let d6: Value = serde_json::from_str(&run_ok(&[
        "stats",
        s(&new),
        "--where",
        "depth = 6",
        "--json",
    ]))
    .unwrap();
    assert_eq!(d6["runs"], 10);
    assert!(run_ok(&["validate", s(&new), "--quiet"]).contains("VALID"));
    // A pack that records depths but none of 9 says nothing of depth.
    let out = run(&["stats", s(&original), "--where", "depth = 9"]);
    assert!(!stderr(&out).contains("records no depth"));
}

#[test]
fn shuffle_calls_an_unreachable_goal_out_of_reach() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("p");
    pack(&fixture("raw"), &p, &[]);
    let longest = runs_table(&p).iter().map(|r| r.2).max().unwrap();
    let rows = read_rows(&p).len();
    let out = run_ok(&["shuffle", s(&p), "--output", s(&t.path().join("sh"))]);
    let share = format!("{:.3}%", 100.0 * longest as f64 / rows as f64);
    assert!(
        out.contains(&format!(
            "goal ≤ 2% is out of reach for this pack: its longest run alone is {share} of all rows"
        )),
        "{out}"
    );
    let doc: Value = serde_json::from_str(&run_ok(&[
        "shuffle",
        s(&p),
        "--output",
        s(&t.path().join("sh2")),
        "--json",
    ]))
    .unwrap();
    let got = doc["quality"]["largest_run_share"].as_f64().unwrap();
    assert!((got - longest as f64 / rows as f64).abs() < 1e-12);
}

#[test]
fn export_takes_its_format_from_the_file_name() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("p");
    pack(&fixture("raw"), &p, &[]);
    let parquet = t.path().join("x.parquet");
    run_ok(&["export", s(&p), "--output", s(&parquet), "--quiet"]);
    let bytes = std::fs::read(&parquet).unwrap();
    assert!(bytes.starts_with(b"PAR1") && bytes.ends_with(b"PAR1"));
    let jsonl = t.path().join("x.jsonl.gz");
    run_ok(&["export", s(&p), "--output", s(&jsonl), "--quiet"]);
    assert_eq!(read_gz(&jsonl).lines().count(), read_rows(&p).len());
    let plain = t.path().join("x.jsonl");
    run_ok(&["export", s(&p), "--output", s(&plain), "--quiet"]);
    assert!(std::fs::read_to_string(&plain).unwrap().starts_with('{'));
    let out = run(&["export", s(&p), "--output", s(&t.path().join("folder"))]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("give the format, jsonl, parquet or pack") && err.contains("(see --format)"),
        "{err}"
    );
    assert!(!t.path().join("folder").exists());
}

#[test]
fn a_missing_middle_shard_is_named() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("p");
    pack(&fixture("raw"), &p, &["--shard-rows", "500"]);
    std::fs::remove_file(p.join("steps-00002.npy")).unwrap();
    let out = run(&["validate", s(&p), "--quiet"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(text.contains("missing steps-00002.npy"), "{text}");
    let out = run(&["stats", s(&p)]);
    assert!(stderr(&out).contains("missing steps-00002.npy"));
}

#[test]
fn pack_with_plain_paths_gets_the_command_that_works() {
    let out = run(&["pack", "real", "packs/pos", "--workers", "2"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("unexpected argument 'real'"), "{err}");
    assert!(
        err.contains("dataset-packer pack --input real --output packs/pos --workers 2"),
        "{err}"
    );
    assert!(!Path::new("packs/pos").exists());
    // Another command's unknown argument gets no pack hint.
    let out = run(&["stats", "a", "b"]);
    assert!(!stderr(&out).contains("--input"));
}
