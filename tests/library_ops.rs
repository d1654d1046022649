//! `dataset_packer::merge` and `dataset_packer::shuffle` called from Rust write what
//! `dataset-packer merge` and `dataset-packer shuffle` write for the same inputs (their
//! options' defaults are the commands' defaults), and their errors carry the kind and the
//! option a program matches on.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::*;
use dataset_packer::{ErrorKind, MergeOptions, ShuffleNotice, ShuffleOptions, merge, shuffle};
use serde_json::Value;

/// Two small packs with the `search` companion family, one of them in shards of 400 rows.
fn two_packs(t: &Path) -> (PathBuf, PathBuf) {
    let (a, b) = (t.join("d6"), t.join("d7"));
    pack(
        &fixture("raw/d6_10g_v1"),
        &a,
        &["--shard-rows", "400", "--search-stats"],
    );
    pack(&fixture("raw/d7_10g_v1"), &b, &["--search-stats"]);
    (a, b)
}

/// The session keys that differ between two runs of the same operation by design: the
/// command line, the time, and the pack's identity (the inputs' own, `input.*`, are alike).
fn differs_by_design(key: &str) -> bool {
    matches!(key, "command_line" | "created_utc" | "pack_id")
}

/// A value of a row as text.
fn text(v: rusqlite::types::ValueRef<'_>) -> String {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => "NULL".into(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
        ValueRef::Blob(b) => format!("{b:?}"),
    }
}

/// Every table of the pack's metadata.db, each row as text (sorted), except `versions` (the
/// command line and the time of each publish) and the `session` values that differ by design.
fn db_tables(pack: &Path) -> Vec<(String, Vec<String>)> {
    let db = db(pack);
    let tables: Vec<String> = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name <> 'versions' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(tables.iter().any(|t| t == "runs"), "{tables:?}");
    tables
        .into_iter()
        .map(|t| {
            let mut stmt = db.prepare(&format!("SELECT * FROM {t}")).unwrap();
            let n = stmt.column_count();
            let mut rows: Vec<String> = stmt
                .query_map([], |r| {
                    Ok((0..n)
                        .map(|i| text(r.get_ref(i).unwrap()))
                        .collect::<Vec<_>>()
                        .join("|"))
                })
                .unwrap()
                .map(Result::unwrap)
                .filter(|row| t != "session" || !differs_by_design(row.split('|').next().unwrap()))
                .collect();
            rows.sort();
            (t, rows)
        })
        .collect()
}

/// The two packs are the same: every file but metadata.db byte for byte (shards, companions,
/// valuation_types.json), and metadata.db table by table.
fn assert_same_pack(library: &Path, cli: &Path) {
    let arrays = |p: &Path| files(p, |n| n != "metadata.db" && !n.starts_with('.'));
    let (ours, theirs) = (arrays(library), arrays(cli));
    assert_eq!(
        ours.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        theirs.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
    assert!(ours.iter().any(|(n, _)| n.starts_with("steps")), "no shard");
    assert!(
        ours.iter().any(|(n, _)| n.starts_with("search")),
        "no companion"
    );
    for ((name, a), (_, b)) in ours.iter().zip(&theirs) {
        assert!(a == b, "{name} differs");
    }
    let (ours, theirs) = (db_tables(library), db_tables(cli));
    assert_eq!(
        ours.iter().map(|(t, _)| t).collect::<Vec<_>>(),
        theirs.iter().map(|(t, _)| t).collect::<Vec<_>>()
    );
    for ((table, a), (_, b)) in ours.iter().zip(&theirs) {
        let only = |x: &[String], y: &[String]| -> Vec<String> {
            x.iter().filter(|r| !y.contains(r)).cloned().collect()
        };
        assert!(
            a == b,
            "metadata.db table {table} differs: only the library's: {:?}; only the command's: {:?}",
            only(a, b),
            only(b, a)
        );
    }
}

#[test]
fn merge_with_default_options_writes_what_the_command_writes() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = two_packs(t.path());
    let (lib_out, cli_out) = (t.path().join("lib"), t.path().join("cli"));

    let summary = merge(&[a.clone(), b.clone()], &lib_out, &MergeOptions::default()).unwrap();
    let json: Value = serde_json::from_str(&run_ok(&[
        "merge",
        s(&a),
        s(&b),
        "--output",
        s(&cli_out),
        "--quiet",
        "--json",
    ]))
    .unwrap();

    assert_same_pack(&lib_out, &cli_out);
    assert_eq!(summary.rows, json["rows"].as_u64().unwrap());
    assert_eq!(summary.runs, json["runs"].as_u64().unwrap());
    assert_eq!(summary.shards as u64, json["shards"].as_u64().unwrap());
    assert_eq!(summary.inputs.len(), 2);
    assert_eq!(summary.inputs[0].path, a);
    assert_eq!(summary.companions[0].0, "search");
    // The library records the command line it is given.
    let lib_again = t.path().join("lib-again");
    merge(
        &[a, b],
        &lib_again,
        &MergeOptions::default().command_line("my-pipeline step 3"),
    )
    .unwrap();
    assert_eq!(
        session_value(&lib_again, "command_line").as_deref(),
        Some("my-pipeline step 3")
    );
}

#[test]
fn shuffle_with_default_options_writes_what_the_command_writes() {
    let t = tempfile::tempdir().unwrap();
    let (a, _) = two_packs(t.path());
    let (lib_out, cli_out) = (t.path().join("lib"), t.path().join("cli"));

    let summary = shuffle(&a, &lib_out, &ShuffleOptions::default()).unwrap();
    let json: Value = serde_json::from_str(&run_ok(&[
        "shuffle",
        s(&a),
        "--output",
        s(&cli_out),
        "--quiet",
        "--json",
    ]))
    .unwrap();
    assert_same_pack(&lib_out, &cli_out);
    assert_eq!(summary.rows, json["rows"].as_u64().unwrap());
    assert_eq!(summary.buckets, json["buckets"].as_u64().unwrap());

    // And with options set through the builders, as the flags set them.
    let (lib_out, cli_out) = (t.path().join("lib7"), t.path().join("cli7"));
    let options = ShuffleOptions::default()
        .seed(7)
        .memory(16 << 10)
        .shard_rows(300)
        .workers(1);
    let summary = shuffle(&a, &lib_out, &options).unwrap();
    run_ok(&[
        "shuffle",
        s(&a),
        "--output",
        s(&cli_out),
        "--seed",
        "7",
        "--memory",
        "16KiB",
        "--shard-rows",
        "300",
        "--quiet",
    ]);
    assert!(summary.buckets > 10, "{summary:?}");
    assert_same_pack(&lib_out, &cli_out);
}

#[test]
fn errors_have_the_kind_and_option_a_program_matches() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = two_packs(t.path());
    let inputs = [a.clone(), b.clone()];
    let defaults = MergeOptions::default();

    // merge: the output is an input; an input twice; an input that is not a pack.
    let e = merge(&inputs, &a, &defaults).unwrap_err();
    assert_eq!((e.kind(), e.option()), (ErrorKind::Refused, Some("output")));
    assert!(e.to_string().contains("is also an input"), "{e}");
    assert!(!e.to_string().contains("--"), "a flag in {e}");
    let e = merge(&[a.clone(), a.clone()], t.path().join("o"), &defaults).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Refused);
    let missing = t.path().join("missing");
    let e = merge(&[a.clone(), missing], t.path().join("o"), &defaults).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotAPack);
    assert!(e.to_string().contains("missing"), "{e}");
    // Deleting the inputs into a folder inside one of them.
    let e = merge(
        &inputs,
        a.join("sub"),
        &defaults.clone().delete_inputs(true),
    )
    .unwrap_err();
    assert_eq!(
        (e.kind(), e.option()),
        (ErrorKind::Refused, Some("delete_inputs"))
    );
    assert!(!t.path().join("o").exists() && !a.join("sub").exists());

    // shuffle: no folder for the bucket files; a folder that is not a pack.
    let out = t.path().join("sh");
    let e = shuffle(
        &a,
        &out,
        &ShuffleOptions::default().temp(t.path().join("nope")),
    )
    .unwrap_err();
    assert_eq!((e.kind(), e.option()), (ErrorKind::Refused, Some("temp")));
    assert!(e.to_string().contains("no such folder"), "{e}");
    let e = shuffle(t.path(), &out, &ShuffleOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotAPack);
    assert!(!out.exists());

    // merge refuses a shuffled input, naming it.
    shuffle(&b, &out, &ShuffleOptions::default()).unwrap();
    let e = merge(&[a, out.clone()], t.path().join("o"), &defaults).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Refused);
    assert!(e.to_string().contains(s(&out)), "{e}");
}

#[test]
fn an_interrupted_shuffle_is_resumed_or_started_over_with_a_notice() {
    let t = tempfile::tempdir().unwrap();
    let (a, _) = two_packs(t.path());
    let out = t.path().join("sh");
    let killed = run_env(
        &[
            "shuffle",
            s(&a),
            "--output",
            s(&out),
            "--seed",
            "5",
            "--memory",
            "16KiB",
            "--quiet",
        ],
        &[("DATASET_PACKER_FAIL_AFTER_ROWS", Some("1000"))],
    );
    assert_eq!(killed.status.code(), Some(1), "{}", stderr(&killed));
    let options = ShuffleOptions::default().seed(5).memory(16 << 10);

    // Resuming with other options is refused, saying which differ.
    let e = shuffle(&a, &out, &options.clone().seed(6).resume(true)).unwrap_err();
    assert_eq!((e.kind(), e.option()), (ErrorKind::Refused, Some("resume")));
    assert!(e.to_string().contains("seed was 5"), "{e}");

    // Starting over is told before the work starts.
    let heard = Arc::new(Mutex::new(Vec::new()));
    let ear = heard.clone();
    let options = options.on_notice(move |n| ear.lock().unwrap().push(n.clone()));
    let summary = shuffle(&a, &out, &options).unwrap();
    let heard = heard.lock().unwrap();
    assert!(
        matches!(
            heard.as_slice(),
            [ShuffleNotice::StartingOver { buckets, .. }] if *buckets == summary.buckets
        ),
        "{heard:?}"
    );
    let reference = t.path().join("reference");
    run_ok(&[
        "shuffle",
        s(&a),
        "--output",
        s(&reference),
        "--seed",
        "5",
        "--memory",
        "16KiB",
        "--quiet",
    ]);
    assert_eq!(pack_bytes(&out), pack_bytes(&reference));
}
