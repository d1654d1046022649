//! What a new user meets after packing, checked on real output: every writer records when, by
//! which version and by which command line it wrote the pack (`session`); `merge` and `export
//! --format pack` keep the inputs' shard size, and `--shard-rows` takes 1k/1M units; counts
//! read "1 shard", "1 run"; an export into a folder says so; `--skip-invalid` names each
//! skipped run once.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use serde_json::Value;

fn session(pack: &Path) -> BTreeMap<String, String> {
    let conn = db(pack);
    let mut stmt = conn.prepare("SELECT * FROM session").unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// `YYYY-MM-DDTHH:MM:SSZ`, within a day of the machine's clock.
fn assert_recent_utc(text: &str) {
    let b = text.as_bytes();
    assert!(
        b.len() == 20 && b[4] == b'-' && b[7] == b'-' && b[10] == b'T' && b[19] == b'Z',
        "{text}"
    );
    let year: i64 = text[..4].parse().unwrap();
    let now_year = 1970
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            / 31_556_952;
    assert!((year - now_year).abs() <= 1, "{text}");
}

fn assert_provenance(pack: &Path, command: &str, args_seen: &[&str]) {
    let sess = session(pack);
    assert_eq!(sess["command"], command, "{sess:?}");
    assert_eq!(
        sess["tool"],
        format!("dataset-packer {}", env!("CARGO_PKG_VERSION"))
    );
    assert_recent_utc(&sess["created_utc"]);
    let line = &sess["command_line"];
    assert!(
        line.contains(&format!("dataset-packer {command}")),
        "{line}"
    );
    for a in args_seen {
        assert!(line.contains(a), "{a} missing from {line}");
    }
}

#[test]
fn every_writer_records_when_which_version_and_command_line() {
    let t = tempfile::tempdir().unwrap();
    let a = t.path().join("a");
    pack(&fixture("raw/d6_10g_v1"), &a, &["--shard-rows", "1k"]);
    assert_provenance(&a, "pack", &["--shard-rows 1k", s(&a)]);

    let b = t.path().join("b");
    pack(&fixture("raw/d7_10g_v1"), &b, &["--shard-rows", "1k"]);
    let m = t.path().join("m");
    run_ok(&[
        "merge",
        "--input",
        s(&a),
        "--input",
        s(&b),
        "--output",
        s(&m),
        "--quiet",
    ]);
    assert_provenance(&m, "merge", &["--input", s(&m)]);

    let sh = t.path().join("sh");
    run_ok(&[
        "shuffle",
        "--input",
        s(&m),
        "--output",
        s(&sh),
        "--seed",
        "3",
        "--quiet",
    ]);
    assert_provenance(&sh, "shuffle", &["--seed 3"]);

    let e = t.path().join("e");
    run_ok(&[
        "export",
        s(&m),
        "--format",
        "pack",
        "--output",
        s(&e),
        "--runs",
        "1-3",
        "--quiet",
    ]);
    assert_provenance(&e, "export", &["--runs 1-3"]);

    // An update keeps the pack's own provenance and appends to its history.
    let drop = t.path().join("drop");
    copy_tree(&fixture("raw/d6_10g_v1"), &drop.join("d6"));
    let u = t.path().join("u");
    pack(&drop, &u, &["--shard-rows", "1k"]);
    copy_tree(&fixture("raw/d7_10g_v1"), &drop.join("d7"));
    run_ok(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&u),
        "--update",
        "--quiet",
    ]);
    let history: Value = serde_json::from_str(&session(&u)["updates"]).unwrap();
    let last = history.as_array().unwrap().last().unwrap();
    assert_recent_utc(last["utc"].as_str().unwrap());
    assert_eq!(
        last["tool"],
        format!("dataset-packer {}", env!("CARGO_PKG_VERSION"))
    );
    assert!(
        last["command_line"].as_str().unwrap().contains("--update"),
        "{last}"
    );
    assert_eq!(last["runs_added"], 5);
}

/// Rows of each shard of a pack, in order.
fn shard_rows(pack: &Path) -> Vec<u64> {
    let mut shards: Vec<String> = names(pack)
        .into_iter()
        .filter(|n| n.starts_with("steps"))
        .collect();
    shards.sort();
    shards
        .iter()
        .map(|n| (std::fs::metadata(pack.join(n)).unwrap().len() - 384) / 48)
        .collect()
}

#[test]
fn merge_and_export_keep_the_inputs_shard_size() {
    let t = tempfile::tempdir().unwrap();
    let a = t.path().join("a");
    let b = t.path().join("b");
    pack(&fixture("raw/d6_10g_v1"), &a, &["--shard-rows", "0.5k"]);
    pack(&fixture("raw/d7_10g_v1"), &b, &["--shard-rows", "500"]);
    assert_eq!(session(&a)["shard_rows"], "500");

    let m = t.path().join("m");
    run_ok(&[
        "merge",
        "--input",
        s(&a),
        "--input",
        s(&b),
        "--output",
        s(&m),
        "--quiet",
    ]);
    assert_eq!(session(&m)["shard_rows"], "500");
    assert_eq!(shard_rows(&m), vec![500, 500, 500, 500, 240]);

    let e = t.path().join("e");
    run_ok(&[
        "export",
        s(&m),
        "--format",
        "pack",
        "--output",
        s(&e),
        "--quiet",
    ]);
    assert_eq!(shard_rows(&e), vec![500, 500, 500, 500, 240]);

    // Units on --shard-rows; a bad one is a usage error naming the value.
    let big = t.path().join("big");
    run_ok(&[
        "merge",
        "--input",
        s(&a),
        "--input",
        s(&b),
        "--output",
        s(&big),
        "--shard-rows",
        "1M",
        "--quiet",
    ]);
    assert_eq!(session(&big)["shard_rows"], "1000000");
    assert_eq!(shard_rows(&big), vec![2240]);
    let res = run(&[
        "merge",
        "--input",
        s(&a),
        "--input",
        s(&b),
        "--output",
        s(&t.path().join("x")),
        "--shard-rows",
        "1Q",
    ]);
    assert_eq!(res.status.code(), Some(2));
    assert!(stderr(&res).contains("1Q"), "{}", stderr(&res));
}

#[test]
fn counts_read_as_english_and_a_folder_export_says_folder() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("p");
    let out = pack(&fixture("raw"), &p, &[]);
    assert!(
        out.contains("packed 10 runs, 2,240 rows into 1 shard in"),
        "{out}"
    );
    let out = run_ok(&[
        "export",
        s(&p),
        "--format",
        "jsonl",
        "--output",
        s(&t.path().join("one")),
        "--runs",
        "4",
    ]);
    assert!(out.contains("exported 1 run, "), "{out}");
    assert!(out.contains("into a folder of 2 files"), "{out}");
    let out = run_ok(&[
        "export",
        s(&p),
        "--format",
        "parquet",
        "--output",
        s(&t.path().join("r.parquet")),
        "--runs",
        "4",
    ]);
    assert!(out.contains("into 1 file at"), "{out}");
}

#[test]
fn skip_invalid_names_each_skipped_run_once() {
    let t = tempfile::tempdir().unwrap();
    let drop = t.path().join("drop");
    copy_tree(&fixture("raw/d6_10g_v1"), &drop.join("d6"));
    copy_tree(&fixture("invalid/board_cell_17"), &drop.join("bad"));
    let out = run(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&t.path().join("p")),
        "--skip-invalid",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(all.matches("b_bad.meta.json").count(), 1, "{all}");
    assert!(
        all.contains("skipped: 1 run (invalid or duplicate)"),
        "{all}"
    );
    assert!(all.contains("board cell 5 is exponent 17"), "{all}");
}
