//! `validate` proves a pack's history, and readers never trust a history that contradicts
//! the files: each edit of `metadata.db` below is reported by `validate` (exit 1, the
//! versions check failing), and the edits that would make a reader hand out other rows than a
//! version had make `export --version` fail instead.

mod common;

use std::path::{Path, PathBuf};

use common::{copy_tree, fixture, run, run_ok, s, stderr};

/// A pack with four versions: d6's runs (1), two of d7's added (2), the other three (3), a
/// family attached (4) and detached (5).
fn history_pack(root: &Path) -> PathBuf {
    let d7 = fixture("raw/d7_10g_v1");
    let bases = common::run_bases(&d7);
    let raw = root.join("raw");
    copy_tree(&fixture("raw/d6_10g_v1"), &raw);
    let pack = root.join("pack");
    common::pack(&raw, &pack, &["--shard-rows", "500"]);
    for part in [&bases[..2], &bases[2..]] {
        common::copy_runs(&d7, part, &raw);
        common::pack(&raw, &pack, &["--update"]);
    }
    common::attach_zeros(&pack, "emb", root);
    run_ok(&["detach", s(&pack), "--name", "emb"]);
    pack
}

fn edited(root: &Path, pack: &Path, name: &str, sql: &str) -> PathBuf {
    let copy = root.join(name);
    copy_tree(pack, &copy);
    rusqlite::Connection::open(copy.join("metadata.db"))
        .unwrap()
        .execute_batch(sql)
        .unwrap();
    copy
}

#[test]
fn validate_reports_every_edit_of_the_history() {
    let t = tempfile::tempdir().unwrap();
    let pack = history_pack(t.path());
    let out = run(&["validate", s(&pack)]);
    assert!(out.status.success(), "{}", stderr(&out));
    for (name, sql, says) in [
        (
            "first",
            "DELETE FROM versions WHERE version = 1",
            "version 1 is missing",
        ),
        (
            "middle",
            "DELETE FROM versions WHERE version = 3",
            "version 3 is missing",
        ),
        (
            "runs",
            "UPDATE versions SET runs = 3 WHERE version = 1",
            "its runs (the 3 smallest ids)",
        ),
        (
            "crc",
            "UPDATE version_files SET crc32c = 'deadbeef' WHERE version = 1 AND file_name = 'steps-00000.npy'",
            "crc32c deadbeef",
        ),
        (
            "no-files",
            "DELETE FROM version_files WHERE version = 2",
            "version 2 lists no steps files",
        ),
        (
            "detached-family",
            "INSERT INTO version_files SELECT 5, family, shard, file_name, rows, bytes, crc32c
             FROM version_files WHERE version = 4 AND family = 'emb'",
            "emb-00000.npy is missing",
        ),
        (
            "tag",
            "INSERT INTO version_tags (name, version, created_utc) VALUES ('ghost', 9, '2026-01-01T00:00:00Z')",
            "ghost names version 9",
        ),
        (
            "time",
            "UPDATE versions SET created_utc = 'yesterday' WHERE version = 2",
            "\"yesterday\"",
        ),
        (
            "command",
            "UPDATE versions SET command = 'rm -rf' WHERE version = 2",
            "not a JSON list",
        ),
    ] {
        let copy = edited(t.path(), &pack, name, sql);
        let out = run(&["validate", s(&copy)]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{name}: validated\n{text}");
        assert!(
            text.contains(says),
            "{name}: the report does not say {says:?}:\n{text}"
        );
    }
}

#[test]
fn readers_refuse_a_version_the_history_misstates() {
    let t = tempfile::tempdir().unwrap();
    let pack = history_pack(t.path());
    for (name, sql, version) in [
        (
            "fewer-runs",
            "UPDATE versions SET runs = 6 WHERE version = 2",
            "2",
        ),
        (
            "latest-gone",
            "DELETE FROM versions WHERE version >= 3; DELETE FROM version_files WHERE version >= 3",
            "2",
        ),
    ] {
        let copy = edited(t.path(), &pack, name, sql);
        let out_file = t.path().join(format!("{name}.jsonl"));
        let out = run(&[
            "export",
            s(&copy),
            "--version",
            version,
            "--output",
            s(&out_file),
        ]);
        assert_eq!(out.status.code(), Some(1), "{name}: exported");
        // Either the version's record or its runs against the files: both name the check
        // that says more.
        assert!(
            stderr(&out).contains("metadata.db records")
                || stderr(&out).contains("is not a valid pack: Σ runs.steps = rows"),
            "{name}: {}",
            stderr(&out)
        );
        assert!(!out_file.exists(), "{name}: a half-written export was left");
        let out = run(&["stats", s(&copy), "--version", version]);
        assert_eq!(out.status.code(), Some(1), "{name}: stats read it");
    }
}
