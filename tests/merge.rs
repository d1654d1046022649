//! `merge` and `pack --partition` end to end: rows, ids and metadata add up exactly; partitions
//! merge into the single pack byte for byte; legacy and odd inputs are converted; deleting
//! inputs is only ever done when it is safe.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

fn pack_d6_d7(t: &Path) -> (PathBuf, PathBuf) {
    let a = t.join("d6");
    let b = t.join("d7");
    pack(&fixture("raw/d6_10g_v1"), &a, &["--shard-rows", "400"]);
    pack(&fixture("raw/d7_10g_v1"), &b, &[]);
    (a, b)
}

fn merge(args: &[&str]) -> Value {
    let mut all = vec!["merge", "--quiet", "--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&run_ok(&all)).unwrap()
}

#[test]
fn merge_is_a_then_b_with_b_shifted() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = pack_d6_d7(t.path());
    let out = t.path().join("ab");
    let summary = merge(&[
        "--left",
        s(&a),
        "--right",
        s(&b),
        "--output",
        s(&out),
        "--shard-rows",
        "500",
    ]);
    let (ra, rb, rab) = (read_rows(&a), read_rows(&b), read_rows(&out));
    let a_runs = runs_table(&a).len() as u32;
    assert_eq!(a_runs, 5);
    let mut expected = ra.clone();
    for row in &rb {
        let mut row = *row;
        let id = u32::from_le_bytes(row[..4].try_into().unwrap()) + a_runs;
        row[..4].copy_from_slice(&id.to_le_bytes());
        expected.push(row);
    }
    // B introduces tuple12 (id 3 in B) and A does not use it: ids line up, so rows are B's + offset.
    assert_eq!(rab, expected);
    assert_eq!(summary["rows"], (ra.len() + rb.len()) as u64);
    assert_eq!(summary["runs"], 10);
    let runs = runs_table(&out);
    let (runs_a, runs_b) = (runs_table(&a), runs_table(&b));
    assert_eq!(runs.len(), runs_a.len() + runs_b.len());
    for (i, r) in runs.iter().enumerate() {
        let src = if i < 5 { runs_a[i] } else { runs_b[i - 5] };
        assert_eq!((r.1, r.2, r.3, r.4), (src.1, src.2, src.3, src.4));
        assert_eq!(r.0, i as i64);
    }
    let (pack_of_7, id_in_7): (String, i64) = db(&out)
        .query_row(
            "SELECT source_pack, source_run_id FROM run_details WHERE run_id = 7",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(pack_of_7.ends_with("/d7"), "{pack_of_7}");
    assert_eq!(id_in_7, 2);
    let report = run_ok(&["validate", s(&out), "--deep"]);
    assert!(
        report.contains("VALID: 2,240 rows, 10 runs, 5 shards"),
        "{report}"
    );
}

#[test]
fn partitions_merge_into_the_single_pack_byte_for_byte() {
    let t = tempfile::tempdir().unwrap();
    let single = t.path().join("single");
    pack(&fixture("raw"), &single, &["--shard-rows", "333"]);
    let mut inputs = Vec::new();
    for i in 0..4 {
        let part = t.path().join(format!("part{i}"));
        let summary: Value = serde_json::from_str(&pack(
            &fixture("raw"),
            &part,
            &["--partition", &format!("{i}/4"), "--json"],
        ))
        .unwrap();
        assert!(summary["runs"].as_u64().unwrap() >= 2);
        let session: String = db(&part)
            .query_row(
                "SELECT meta_value FROM session WHERE meta_key = 'full_run_count'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(session, "10");
        inputs.push(part);
    }
    let merged = t.path().join("merged");
    let mut args = vec!["--output", s(&merged), "--shard-rows", "333"];
    for p in &inputs {
        args.extend_from_slice(&["--input", s(p)]);
    }
    merge(&args);
    assert_eq!(pack_bytes(&merged), pack_bytes(&single));
    assert_eq!(runs_table(&merged), runs_table(&single));
    python_ok(
        "check_pack.py",
        &["--raw", s(&fixture("raw")), "--pack", s(&merged)],
    );
}

#[test]
fn more_partitions_than_runs_still_merge_exactly() {
    let t = tempfile::tempdir().unwrap();
    let single = t.path().join("single");
    pack(&fixture("findings"), &single, &[]);
    let mut args = vec!["merge".to_string(), "--quiet".into()];
    for i in 0..9 {
        let part = t.path().join(format!("p{i}"));
        pack(
            &fixture("findings"),
            &part,
            &["--partition", &format!("{i}/9")],
        );
        args.extend(["--input".to_string(), s(&part).to_string()]);
    }
    let merged = t.path().join("merged");
    args.extend(["--output".to_string(), s(&merged).to_string()]);
    run_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(pack_bytes(&merged), pack_bytes(&single));
    assert_eq!(runs_table(&merged), runs_table(&single));
    // Orphans are reported by partition 0 only, so the merged count is the drop's.
    let orphans: i64 = db(&merged)
        .query_row(
            "SELECT count FROM finding_counts WHERE kind = 'orphan_rows_file'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 1);
}

/// Rewrites a pack into the layout an older tool wrote: packed 46-byte shards, no checksums,
/// valuation_types.json as name → id.
fn make_legacy(pack: &Path, valuation_json: &str) {
    for name in names(pack).into_iter().filter(|n| n.starts_with("steps")) {
        make_legacy_shard(&pack.join(name));
    }
    rusqlite::Connection::open(pack.join("metadata.db"))
        .unwrap()
        .execute_batch("DROP TABLE shards; DROP TABLE run_index; DROP TABLE run_details;")
        .unwrap();
    std::fs::write(pack.join("valuation_types.json"), valuation_json).unwrap();
}

#[test]
fn legacy_packed_input_merges_right() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = pack_d6_d7(t.path());
    make_legacy(&a, r#"{"search": 0, "tuple11": 1, "tuple10": 2}"#);
    assert_eq!(
        run(&["validate", s(&a)]).status.code(),
        Some(1),
        "validate flags legacy shards"
    );
    let out = t.path().join("ab");
    merge(&[
        "--left",
        s(&a),
        "--right",
        s(&b),
        "--output",
        s(&out),
        "--shard-rows",
        "333",
    ]);
    let single = t.path().join("single");
    pack(&fixture("raw"), &single, &["--shard-rows", "333"]);
    assert_eq!(pack_bytes(&out), pack_bytes(&single));
    run_ok(&["validate", s(&out)]);
}

#[test]
fn valuation_ids_are_unified_by_name() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = pack_d6_d7(t.path());
    // B as an older tool might have written it: name → id JSON with its own ids and an extra
    // name; its rows re-coded to match, and no checksums (that tool recorded none).
    // B's ids were search 0, tuple11 1, tuple10 2, tuple12 3; now they are:
    let recode = [1u8, 3, 0, 2];
    let json = r#"{"tuple10": 0, "search": 1, "tuple12": 2, "tuple11": 3, "unused": 4}"#;
    for name in names(&b).into_iter().filter(|n| n.starts_with("steps")) {
        let path = b.join(name);
        let mut bytes = std::fs::read(&path).unwrap();
        for row in bytes[384..].chunks_exact_mut(48) {
            row[23] = recode[row[23] as usize];
        }
        std::fs::write(&path, bytes).unwrap();
    }
    std::fs::write(b.join("valuation_types.json"), json).unwrap();
    rusqlite::Connection::open(b.join("metadata.db"))
        .unwrap()
        .execute_batch("DROP TABLE shards")
        .unwrap();
    run_ok(&["validate", s(&b)]);

    let out = t.path().join("ab");
    merge(&[
        "--left",
        s(&a),
        "--right",
        s(&b),
        "--output",
        s(&out),
        "--shard-rows",
        "333",
    ]);
    let names: Value =
        serde_json::from_slice(&std::fs::read(out.join("valuation_types.json")).unwrap()).unwrap();
    assert_eq!(
        names,
        serde_json::json!(["search", "tuple11", "tuple10", "tuple12", "unused"])
    );
    // Rows are re-coded to the output ids: the shards equal a single pack of the whole drop.
    let single = t.path().join("single");
    pack(&fixture("raw"), &single, &["--shard-rows", "333"]);
    let shards = |p: &Path| files(p, |n| n.starts_with("steps"));
    assert_eq!(shards(&out), shards(&single));
}

#[test]
fn delete_inputs_refuses_every_unsafe_case() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = pack_d6_d7(t.path());
    let before = (files(&a, |_| true), files(&b, |_| true));
    // Each with the flag the refusal is about, where there is one.
    let cases: Vec<(Vec<String>, &str, &str)> = vec![
        (
            vec![
                "--left".into(),
                s(&a).into(),
                "--right".into(),
                s(&b).into(),
                "--output".into(),
                s(&a).into(),
            ],
            "also an input",
            "--output",
        ),
        (
            vec![
                "--left".into(),
                s(&a).into(),
                "--right".into(),
                s(&b).into(),
                "--output".into(),
                format!("{}/sub", s(&a)),
            ],
            "inside the input",
            "--delete-inputs",
        ),
        (
            vec![
                "--left".into(),
                s(&a).into(),
                "--right".into(),
                s(&b).into(),
                "--output".into(),
                s(t.path()).into(),
            ],
            "contains the input",
            "--delete-inputs",
        ),
        (
            vec![
                "--left".into(),
                s(&a).into(),
                "--right".into(),
                format!("{}/../d6", s(&a)),
                "--output".into(),
                s(&t.path().join("o")).into(),
            ],
            "given twice",
            "",
        ),
    ];
    for (args, why, flag) in cases {
        let mut all = vec!["merge", "--delete-inputs"];
        all.extend(args.iter().map(String::as_str));
        let res = run(&all);
        assert_eq!(res.status.code(), Some(2), "{why}: {}", stderr(&res));
        assert!(stderr(&res).contains(why), "{why}: {}", stderr(&res));
        assert_eq!(
            stderr(&res).contains(&format!("(see {flag})")),
            !flag.is_empty(),
            "{why}: {}",
            stderr(&res)
        );
    }
    assert_eq!((files(&a, |_| true), files(&b, |_| true)), before);
    assert!(!t.path().join("o").exists());
}

#[test]
fn a_merge_failing_midway_deletes_nothing_and_keeps_the_previous_output() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = pack_d6_d7(t.path());
    let out = t.path().join("out");
    pack(&fixture("findings"), &out, &[]);
    let before = (
        files(&a, |_| true),
        files(&b, |_| true),
        files(&out, |_| true),
    );
    let res = std::process::Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
        .args([
            "merge",
            "--left",
            s(&a),
            "--right",
            s(&b),
            "--output",
            s(&out),
            "--overwrite",
            "--delete-inputs",
        ])
        .env("DATASET_PACKER_FAIL_AFTER_ROWS", "1500")
        .output()
        .unwrap();
    assert_eq!(res.status.code(), Some(1));
    assert!(
        stderr(&res).contains("injected failure"),
        "{}",
        stderr(&res)
    );
    assert_eq!(
        (
            files(&a, |_| true),
            files(&b, |_| true),
            files(&out, |_| true)
        ),
        before
    );

    // A corrupt shard in the second input is only discovered late, while it is copied (after
    // the whole first input): the merge stops the same way, deleting and publishing nothing.
    let shard = b.join("steps.npy");
    let mut bytes = std::fs::read(&shard).unwrap();
    let last_row = bytes.len() - 48;
    bytes[last_row + 9] ^= 1;
    std::fs::write(&shard, &bytes).unwrap();
    let res = run(&[
        "merge",
        "--left",
        s(&a),
        "--right",
        s(&b),
        "--output",
        s(&out),
        "--overwrite",
        "--delete-inputs",
    ]);
    assert_eq!(res.status.code(), Some(1));
    let err = stderr(&res);
    assert!(
        err.contains("steps.npy does not match its recorded checksum"),
        "{err}"
    );
    assert_eq!(files(&out, |_| true), before.2);
    assert_eq!(files(&a, |_| true), before.0);
    assert!(b.join("metadata.db").exists());
    assert!(!out.join(".dataset-packer-staging").exists());
}

#[test]
fn delete_inputs_after_a_verified_merge() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = pack_d6_d7(t.path());
    std::fs::write(b.join("notes.txt"), "keep me").unwrap();
    let out = t.path().join("out");
    let text = run_ok(&[
        "merge",
        "--left",
        s(&a),
        "--right",
        s(&b),
        "--output",
        s(&out),
        "--delete-inputs",
    ]);
    assert!(text.contains(&format!("deleted {}", s(&a))), "{text}");
    assert!(!a.exists(), "an input left empty is removed");
    assert_eq!(
        names(&b),
        ["notes.txt"],
        "only the pack's files are deleted"
    );
    run_ok(&["validate", s(&out)]);
}

#[test]
fn usage_errors() {
    assert_eq!(run(&["merge", "--output", "x"]).status.code(), Some(2));
    assert_eq!(
        run(&["merge", "--left", "a", "--output", "x"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        run(&[
            "pack",
            "--input",
            "a",
            "--output",
            "b",
            "--partition",
            "4/4"
        ])
        .status
        .code(),
        Some(2)
    );
    assert_eq!(
        run(&["pack", "--input", "a", "--output", "b", "--partition", "x"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn packs_are_positional_and_the_old_flags_are_aliases() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = pack_d6_d7(t.path());
    let c = t.path().join("all");
    pack(&fixture("raw"), &c, &[]);
    let out = |name: &str| t.path().join(name);
    // Three inputs: positional, and repeated --input.
    let positional = merge(&[s(&a), s(&b), s(&c), "--output", s(&out("p3"))]);
    let flagged = merge(&[
        "--input",
        s(&a),
        "--input",
        s(&b),
        "--input",
        s(&c),
        "--output",
        s(&out("f3")),
    ]);
    assert_eq!(positional["rows"], 2 * 2240);
    assert_eq!(positional["runs"], flagged["runs"]);
    assert_eq!(pack_bytes(&out("p3")), pack_bytes(&out("f3")));
    assert_eq!(runs_table(&out("p3")), runs_table(&out("f3")));
    // Two inputs: positional, and --left/--right; the order is the order given.
    merge(&[s(&b), s(&a), "--output", s(&out("p2"))]);
    merge(&["--left", s(&b), "--right", s(&a), "--output", s(&out("f2"))]);
    assert_eq!(pack_bytes(&out("p2")), pack_bytes(&out("f2")));
    assert_eq!(read_rows(&out("p2"))[0], {
        // B's first row, run 0 of the output.
        read_rows(&b)[0]
    });
    // Both spellings at once is a usage error, not a guess at the order.
    for args in [
        vec!["merge", s(&a), "--input", s(&b), "--output", "x"],
        vec![
            "merge",
            s(&a),
            "--left",
            s(&a),
            "--right",
            s(&b),
            "--output",
            "x",
        ],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
    let o = run(&["merge", "--output", s(&out("none"))]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("merge A B … --output M"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn help_shows_the_positional_form() {
    let help = run_ok(&["merge", "--help"]);
    assert!(help.contains("[PACK]..."), "{help}");
    assert!(
        help.contains("dataset-packer merge packs/d6 packs/d7 --output packs/d6d7"),
        "{help}"
    );
    assert!(help.contains("--left A --right B"), "{help}");
}
