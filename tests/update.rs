//! `pack --update`: a pack grows by what is new in its drop. Checked byte for byte against
//! `merge` of the parts, for idempotence, moved and changed sources, refusals, and kill -9.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;

/// A drop holding copies of fixture folders: `(folder in the drop, fixture folder)`.
fn drop_of(root: &Path, parts: &[(&str, &str)]) -> PathBuf {
    for (name, fixture_dir) in parts {
        copy_tree(&fixture(fixture_dir), &root.join(name));
    }
    root.to_path_buf()
}

/// A run with a valuation name no fixture has ("mcts" on every third row), in `dir`.
fn run_with_new_valuation(dir: &Path) {
    let src = fixture("raw/d7_10g_v1/depth07_worker00_seed1273930896_game000000");
    let rows = read_gz(&src.with_extension("jsonl.gz"));
    let changed: Vec<String> = rows
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i % 3 == 1 {
                l.replace(
                    "\"valuation_type\":\"search\"",
                    "\"valuation_type\":\"mcts\"",
                )
            } else {
                l.to_string()
            }
        })
        .collect();
    assert!(changed.iter().any(|l| l.contains("mcts")));
    std::fs::create_dir_all(dir).unwrap();
    let base = dir.join("new_valuation_game");
    write_gz(
        &base.with_extension("jsonl.gz"),
        (changed.join("\n") + "\n").as_bytes(),
    );
    std::fs::copy(
        src.with_extension("meta.json"),
        base.with_extension("meta.json"),
    )
    .unwrap();
}

/// A copy of the fixture drop whose games are new: every sidecar's seed moved by `shift`
/// (the seed is part of a run's content, so the copies are not duplicates).
fn distinct_copy(to: &Path, shift: u64) {
    copy_tree(&fixture("raw"), to);
    for dir in std::fs::read_dir(to).unwrap() {
        for file in std::fs::read_dir(dir.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            let name = path.to_string_lossy().into_owned();
            let gz = name.ends_with(".meta.json.gz");
            if !gz && !name.ends_with(".meta.json") {
                continue;
            }
            let text = if gz {
                read_gz(&path)
            } else {
                std::fs::read_to_string(&path).unwrap()
            };
            let mut sidecar: Value = serde_json::from_str(&text).unwrap();
            sidecar["seed"] = (sidecar["seed"].as_u64().unwrap() + shift).into();
            let text = sidecar.to_string();
            if gz {
                write_gz(&path, text.as_bytes());
            } else {
                std::fs::write(&path, text).unwrap();
            }
        }
    }
}

fn update(input: &Path, pack: &Path, extra: &[&str]) -> Value {
    let mut args = vec![
        "pack",
        "--input",
        s(input),
        "--output",
        s(pack),
        "--update",
        "--json",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    serde_json::from_str(&run_ok(&args)).unwrap()
}

/// Every file of a pack folder, byte for byte (a hidden staging folder aside).
fn all_bytes(pack: &Path) -> Vec<(String, Vec<u8>)> {
    files(pack, |n| !n.starts_with('.'))
}

fn fingerprints_by_path(pack: &Path) -> Vec<(String, String)> {
    db(pack)
        .prepare("SELECT source_path, fingerprint FROM run_details ORDER BY source_path")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn update_equals_merge_of_the_parts_whichever_way_the_new_folder_sorts() {
    for (b_name, shard_rows) in [
        ("zz_new", Some("300")),
        ("aa_new", Some("300")),
        ("zz_new", None),
    ] {
        let t = tempfile::tempdir().unwrap();
        let shard_args: Vec<&str> = shard_rows.map_or(vec![], |n| vec!["--shard-rows", n]);
        // A: the d6 fixture folder. B: d7 plus a run with a new valuation name.
        let a = drop_of(&t.path().join("a"), &[("m_d6", "raw/d6_10g_v1")]);
        let b = drop_of(&t.path().join("b"), &[(b_name, "raw/d7_10g_v1")]);
        run_with_new_valuation(&b.join(b_name));
        let pack_a = t.path().join("pack_a");
        let pack_b = t.path().join("pack_b");
        pack(&a, &pack_a, &shard_args);
        pack(&b, &pack_b, &shard_args);
        let merged = t.path().join("merged");
        let mut merge_args = vec![
            "merge",
            "--input",
            s(&pack_a),
            "--input",
            s(&pack_b),
            "--output",
            s(&merged),
            "--quiet",
        ];
        merge_args.extend_from_slice(&shard_args);
        run_ok(&merge_args);

        // The drop grows by B's folder; the pack of A is updated in place.
        let grown = t.path().join("pack");
        copy_tree(&pack_a, &grown);
        let drop = t.path().join("drop");
        copy_tree(&a, &drop);
        copy_tree(&b, &drop);
        let summary = update(&drop, &grown, &[]);
        assert_eq!(summary["new_runs"], 6, "{summary}");
        assert_eq!(summary["already_packed_by_path"], 5, "{summary}");
        assert_eq!(
            pack_view(&grown),
            pack_view(&merged),
            "{b_name} {shard_rows:?}"
        );
        let names: Value =
            serde_json::from_slice(&std::fs::read(grown.join("valuation_types.json")).unwrap())
                .unwrap();
        assert_eq!(names[names.as_array().unwrap().len() - 1], "mcts");
        run_ok(&["validate", s(&grown), "--deep"]);
        // The fingerprints are those of a pack of the whole drop, run by run.
        let whole = t.path().join("whole");
        pack(&drop, &whole, &shard_args);
        assert_eq!(fingerprints_by_path(&grown), fingerprints_by_path(&whole));
        let history: Value = serde_json::from_str(
            &db(&grown)
                .query_row(
                    "SELECT meta_value FROM session WHERE meta_key = 'updates'",
                    [],
                    |r| r.get::<_, String>(0),
                )
                .unwrap(),
        )
        .unwrap();
        assert_eq!(history[0]["runs_added"], 6);
        assert_eq!(history[0]["first_run_id"], 5);
    }
}

#[test]
fn kept_shards_are_not_rewritten_and_a_full_last_shard_is_kept_too() {
    let t = tempfile::tempdir().unwrap();
    let drop = drop_of(t.path(), &[("a", "raw/d6_10g_v1")]);
    let grown = t.path().join("pack");
    // d6 holds 1,220 rows: shards of 244 rows fill exactly 5 shards.
    pack(&drop, &grown, &["--shard-rows", "244"]);
    let before = pack_bytes(&grown);
    let inode = |name: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(grown.join(name)).unwrap().ino()
    };
    let inodes: Vec<u64> = before.iter().map(|(n, _)| inode(n)).collect();
    copy_tree(&fixture("raw/d7_10g_v1"), &drop.join("b"));
    let summary = update(&drop, &grown, &[]);
    assert_eq!(summary["shards_rewritten"], serde_json::json!([]));
    assert_eq!(
        summary["shards_added"].as_array().unwrap().len(),
        5,
        "{summary}"
    );
    for ((name, bytes), ino) in before.iter().zip(inodes) {
        if name.starts_with("steps") {
            assert_eq!(&std::fs::read(grown.join(name)).unwrap(), bytes, "{name}");
            assert_eq!(inode(name), ino, "{name} was replaced");
        }
    }
    run_ok(&["validate", s(&grown), "--deep"]);
}

#[test]
fn a_second_update_changes_nothing_and_a_moved_folder_is_known_by_content() {
    let t = tempfile::tempdir().unwrap();
    let drop = drop_of(
        &t.path().join("drop"),
        &[("a", "raw/d6_10g_v1"), ("b", "raw/d7_10g_v1")],
    );
    let grown = t.path().join("pack");
    pack(&drop, &grown, &["--shard-rows", "300"]);
    let first = all_bytes(&grown);

    let summary = update(&drop, &grown, &[]);
    assert_eq!(summary["new_runs"], 0);
    assert_eq!(summary["already_packed_by_path"], 10);
    assert_eq!(all_bytes(&grown), first, "nothing new: no file changes");

    std::fs::rename(drop.join("b"), drop.join("b_moved")).unwrap();
    let summary = update(&drop, &grown, &[]);
    assert_eq!(summary["new_runs"], 0, "{summary}");
    assert_eq!(summary["already_packed_by_path"], 5);
    assert_eq!(
        summary["already_packed_by_content"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    assert_eq!(all_bytes(&grown), first, "a moved folder adds nothing");
    let text = run_ok(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&grown),
        "--update",
        "--quiet",
    ]);
    assert!(
        text.contains("0 new runs") && text.contains("5 by content"),
        "{text}"
    );
}

#[test]
fn a_changed_source_is_an_error_and_changes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let drop = drop_of(t.path(), &[("a", "raw/d6_10g_v1")]);
    let grown = t.path().join("pack");
    pack(&drop, &grown, &["--shard-rows", "300"]);
    let before = all_bytes(&grown);
    // The rows file of a packed run loses its last line; a new folder arrives too.
    let rows = drop.join("a/depth06_worker02_seed0272350807_game000000.jsonl.gz");
    let text = read_gz(&rows);
    let shorter: Vec<&str> = text.lines().collect();
    write_gz(
        &rows,
        (shorter[..shorter.len() - 1].join("\n") + "\n").as_bytes(),
    );
    copy_tree(&fixture("raw/d7_10g_v1"), &drop.join("b"));

    let out = run(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&grown),
        "--update",
        "--quiet",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("a/depth06_worker02_seed0272350807_game000000.meta.json")
            && err.contains("changed since it was packed as run 2")
            && err.contains("nothing was written"),
        "{err}"
    );
    assert_eq!(all_bytes(&grown), before);

    // With --skip-invalid the change is recorded and the new runs are packed.
    let summary = update(&drop, &grown, &["--skip-invalid"]);
    assert_eq!(summary["new_runs"], 5);
    let skipped = summary["skipped_runs"].as_array().unwrap();
    assert_eq!(skipped.len(), 1);
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap()
            .contains("changed since it was packed"),
        "{summary}"
    );
    let (path, reason): (String, String) = db(&grown)
        .query_row("SELECT source_path, reason FROM skipped_runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert!(path.ends_with("worker02_seed0272350807_game000000.meta.json"));
    assert!(reason.contains("rows file"), "{reason}");
    run_ok(&["validate", s(&grown)]);
    // And the next update, with the same change still there, changes nothing.
    let after = all_bytes(&grown);
    update(&drop, &grown, &["--skip-invalid"]);
    assert_eq!(all_bytes(&grown), after);
}

#[test]
fn refusals_and_a_missing_pack() {
    let t = tempfile::tempdir().unwrap();
    let drop = drop_of(t.path(), &[("a", "raw/d6_10g_v1")]);
    // No pack yet: --update is a plain pack.
    let grown = t.path().join("pack");
    let summary: Value = serde_json::from_str(&run_ok(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&grown),
        "--update",
        "--shard-rows",
        "300",
        "--json",
        "--quiet",
    ]))
    .unwrap();
    assert_eq!(summary["runs"], 5);
    let reference = t.path().join("reference");
    pack(&drop, &reference, &["--shard-rows", "300"]);
    assert_eq!(pack_view(&grown), pack_view(&reference));

    // Another --shard-rows is a usage error.
    let out = run(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&grown),
        "--update",
        "--shard-rows",
        "500",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("shards of 300 rows"),
        "{}",
        stderr(&out)
    );

    // A shuffled pack is refused, saying why.
    let shuffled = t.path().join("shuffled");
    run_ok(&[
        "shuffle",
        "--input",
        s(&grown),
        "--output",
        s(&shuffled),
        "--quiet",
    ]);
    let before = all_bytes(&shuffled);
    let out = run(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&shuffled),
        "--update",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("shuffled pack"), "{}", stderr(&out));
    assert_eq!(all_bytes(&shuffled), before);

    // --update and --overwrite together make no sense.
    let out = run(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&grown),
        "--update",
        "--overwrite",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn an_older_pack_without_fingerprints_gets_them() {
    let t = tempfile::tempdir().unwrap();
    let drop = drop_of(t.path(), &[("a", "raw/d6_10g_v1")]);
    let grown = t.path().join("pack");
    pack(&drop, &grown, &[]);
    let reference = fingerprints_by_path(&grown);
    // As an older version wrote it: no fingerprints, no file sizes.
    {
        let conn = rusqlite::Connection::open(grown.join("metadata.db")).unwrap();
        conn.execute_batch(
            "UPDATE run_details SET fingerprint = NULL, sidecar_bytes = NULL, rows_bytes = NULL",
        )
        .unwrap();
    }
    let out = run(&["validate", s(&grown)]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no fingerprints recorded"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    copy_tree(&fixture("raw/d7_10g_v1"), &drop.join("b"));
    let summary = update(&drop, &grown, &[]);
    assert_eq!(summary["new_runs"], 5);
    assert_eq!(summary["already_packed_by_path"], 5);
    let after = fingerprints_by_path(&grown);
    assert_eq!(after[..5], reference[..]);
    run_ok(&["validate", s(&grown), "--deep"]);
}

#[test]
fn duplicates_among_new_runs_and_runs_already_packed() {
    let t = tempfile::tempdir().unwrap();
    let drop = drop_of(t.path(), &[("a", "raw/d6_10g_v1")]);
    let grown = t.path().join("pack");
    pack(&drop, &grown, &["--shard-rows", "300"]);
    // New: d7 twice (b and c), and a copy of d6 (already packed by content).
    copy_tree(&fixture("raw/d7_10g_v1"), &drop.join("b"));
    copy_tree(&fixture("raw/d7_10g_v1"), &drop.join("c"));
    copy_tree(&fixture("raw/d6_10g_v1"), &drop.join("d"));
    let kept = t.path().join("kept");
    copy_tree(&grown, &kept);

    let summary = update(&drop, &kept, &[]);
    assert_eq!(summary["new_runs"], 10, "{summary}");
    assert_eq!(summary["duplicate_runs"], 5);
    assert_eq!(
        summary["already_packed_by_content"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    let dups: i64 = db(&kept)
        .query_row(
            "SELECT count FROM finding_counts WHERE kind = 'duplicate_run'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(dups, 5);
    run_ok(&["validate", s(&kept), "--deep"]);

    let summary = update(&drop, &grown, &["--dedupe"]);
    assert_eq!(summary["new_runs"], 5, "{summary}");
    let skipped = summary["skipped_runs"].as_array().unwrap();
    assert_eq!(skipped.len(), 5);
    assert!(skipped.iter().all(|s| {
        s["path"].as_str().unwrap().starts_with("c/")
            && s["reason"]
                .as_str()
                .unwrap()
                .contains("same content as run")
    }));
    run_ok(&["validate", s(&grown), "--deep"]);
    // Once deduplicated, the next update changes nothing.
    let before = all_bytes(&grown);
    update(&drop, &grown, &["--dedupe"]);
    assert_eq!(all_bytes(&grown), before);
}

#[test]
fn orphans_are_kept_current() {
    let t = tempfile::tempdir().unwrap();
    let drop = drop_of(t.path(), &[("a", "raw/d6_10g_v1")]);
    // A game still running: its rows file without a sidecar.
    let running = drop.join("a/depth06_worker00_seed0272350805_game000000");
    let sidecar = running.with_extension("meta.json");
    let elsewhere = tempfile::tempdir().unwrap();
    let held = elsewhere.path().join("held.meta.json");
    std::fs::rename(&sidecar, &held).unwrap();
    let grown = elsewhere.path().join("pack");
    pack(&drop, &grown, &["--shard-rows", "300"]);
    let orphans = |p: &Path| -> i64 {
        db(p)
            .query_row("SELECT COUNT(*) FROM orphan_rows_files", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(orphans(&grown), 1);
    // The game ends: its sidecar appears, and it is packed as a new run.
    std::fs::rename(&held, &sidecar).unwrap();
    let summary = update(&drop, &grown, &[]);
    assert_eq!(summary["new_runs"], 1);
    assert_eq!(summary["orphan_rows_files"], 0);
    assert_eq!(orphans(&grown), 0);
    run_ok(&["validate", s(&grown)]);
}

#[test]
fn killed_at_any_moment_leaves_the_old_pack_or_the_new_one() {
    let t = tempfile::tempdir().unwrap();
    let drop = t.path().join("drop");
    for i in 0..40 {
        distinct_copy(&drop.join(format!("old{i:03}")), i);
    }
    let old = t.path().join("old");
    pack(&drop, &old, &["--shard-rows", "50000"]);
    let old_state = all_bytes(&old);
    for i in 0..80 {
        distinct_copy(&drop.join(format!("new{i:03}")), 1000 + i);
    }
    let new_ref = t.path().join("new_ref");
    copy_tree(&old, &new_ref);
    let timer = std::time::Instant::now();
    update(&drop, &new_ref, &["--workers", "1"]);
    let took = timer.elapsed().as_millis() as u64;
    let new_contract = pack_view(&new_ref);
    assert_eq!(runs_table(&new_ref).len(), 1200);

    // Kills spread over the whole run (it takes `took` ms undisturbed), and past its end.
    let mut outcomes = [0usize; 3];
    for (i, delay_ms) in (0..12u64).map(|k| k * took / 9).enumerate() {
        let out = t.path().join(format!("out{i}"));
        copy_tree(&old, &out);
        let mut child = Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
            .args(["pack", "--input", s(&drop), "--output", s(&out)])
            .args(["--update", "--quiet", "--workers", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        child.wait().unwrap();

        if all_bytes(&out) == old_state {
            outcomes[0] += 1;
        } else if out.join("metadata.db").exists() {
            assert_eq!(pack_view(&out), new_contract, "delay {delay_ms} ms: a mix");
            outcomes[1] += 1;
        } else {
            outcomes[2] += 1; // mid-publish: no metadata.db, so no pack a loader would take
        }
        // The next run recovers and ends with the updated pack.
        update(&drop, &out, &[]);
        assert_eq!(pack_view(&out), new_contract);
        assert!(!out.join(".dataset-packer-staging").exists());
        run_ok(&["validate", s(&out)]);
    }
    eprintln!(
        "kills: {} left the old pack, {} the new one, {} no pack",
        outcomes[0], outcomes[1], outcomes[2]
    );
    assert!(outcomes[0] > 0, "some kills must land before the publish");
}

/// Gzips a plain rows file in place (`BASE.jsonl` → `BASE.jsonl.gz`, as `gzip FILE` does).
fn gzip_in_place(plain: &Path) -> PathBuf {
    let gz = PathBuf::from(format!("{}.gz", plain.display()));
    write_gz(&gz, &std::fs::read(plain).unwrap());
    std::fs::remove_file(plain).unwrap();
    gz
}

/// The rows file recorded for each run: (source_path, rows_path, rows_bytes, fingerprint).
fn rows_records(pack: &Path) -> Vec<(String, String, i64, String)> {
    db(pack)
        .prepare("SELECT source_path, rows_path, rows_bytes, fingerprint FROM run_details ORDER BY run_id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_packed_run_whose_rows_were_gzipped_since_is_the_same_run() {
    let t = tempfile::tempdir().unwrap();
    let drop = drop_of(
        &t.path().join("drop"),
        &[("a", "raw/d6_10g_v1"), ("b", "raw/d7_10g_v1")],
    );
    let plain = unzip_rows(&drop, &|_| true);
    assert_eq!(plain.len(), 10);
    let grown = t.path().join("pack");
    pack(&drop, &grown, &["--shard-rows", "300"]);
    let shards_before = pack_bytes(&grown);
    let runs_before = runs_table(&grown);
    let records_before = rows_records(&grown);

    // Three runs' rows are gzipped after packing.
    let gzipped: Vec<PathBuf> = [0, 4, 7]
        .iter()
        .map(|&i| gzip_in_place(&plain[i]))
        .collect();
    let summary = update(&drop, &grown, &[]);
    assert_eq!(summary["new_runs"], 0, "{summary}");
    assert_eq!(summary["new_rows"], 0);
    assert_eq!(summary["already_packed_by_path"], 7);
    assert_eq!(summary["already_packed_by_content"], serde_json::json!([]));
    let reformed = summary["rows_file_changed_form"].as_array().unwrap();
    assert_eq!(reformed.len(), 3, "{summary}");
    assert_eq!(pack_bytes(&grown), shards_before, "no shard changes");
    assert_eq!(runs_table(&grown), runs_before);
    // The pack now records the gzipped files; nothing else of run_details changed.
    let records = rows_records(&grown);
    for (i, (before, now)) in records_before.iter().zip(&records).enumerate() {
        let gz = gzipped
            .iter()
            .find(|g| g.ends_with(format!("{}.gz", before.1)));
        match gz {
            Some(gz) => {
                assert_eq!(now.1, format!("{}.gz", before.1), "run {i}");
                assert_eq!(now.2, std::fs::metadata(gz).unwrap().len() as i64);
                assert_eq!((&now.0, &now.3), (&before.0, &before.3), "run {i}");
            }
            None => assert_eq!(now, before, "run {i}"),
        }
    }
    run_ok(&["validate", s(&grown), "--deep"]);

    // The next update knows them by path and sizes: nothing is read, nothing changes.
    let all = all_bytes(&grown);
    let summary = update(&drop, &grown, &[]);
    assert_eq!(summary["already_packed_by_path"], 10, "{summary}");
    assert_eq!(summary["rows_file_changed_form"], serde_json::json!([]));
    assert_eq!(all_bytes(&grown), all);

    // Unzipped again, alongside a genuinely new run: only the new run is added.
    let back = gzipped[1].with_extension("");
    std::fs::write(&back, read_gz(&gzipped[1])).unwrap();
    std::fs::remove_file(&gzipped[1]).unwrap();
    run_with_new_valuation(&drop.join("c"));
    let text = run_ok(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&grown),
        "--update",
        "--quiet",
    ]);
    assert!(
        text.contains("1 new run,")
            && text.contains("rows file gzipped or unzipped since packing, same content: 1 run"),
        "{text}"
    );
    let rows = read_rows(&grown);
    let old_rows: usize = runs_before.iter().map(|r| r.2 as usize).sum();
    assert_eq!(runs_table(&grown)[..10], runs_before[..]);
    assert_eq!(runs_table(&grown).len(), 11);
    let mut before_rows = Vec::new();
    for (_, bytes) in shards_before.iter().filter(|(n, _)| n.starts_with("steps")) {
        for row in bytes[384..].chunks_exact(48) {
            before_rows.push(<[u8; 48]>::try_from(row).unwrap());
        }
    }
    assert_eq!(before_rows.len(), old_rows);
    assert_eq!(rows[..old_rows], before_rows[..], "packed rows unchanged");
    assert!(
        rows[old_rows..]
            .iter()
            .all(|r| r[..4] == 10u32.to_le_bytes())
    );
    let recorded = &rows_records(&grown)[..10];
    assert!(
        recorded.iter().any(|r| back.ends_with(&r.1)),
        "{recorded:?}"
    );
    run_ok(&["validate", s(&grown), "--deep"]);
}

#[test]
fn a_rows_file_gzipped_with_other_content_is_a_changed_run() {
    let t = tempfile::tempdir().unwrap();
    let drop = drop_of(t.path(), &[("a", "raw/d6_10g_v1")]);
    unzip_rows(&drop, &|_| true);
    let grown = t.path().join("pack");
    pack(&drop, &grown, &["--shard-rows", "300"]);
    let before = all_bytes(&grown);
    // Run 2's rows lose their last line on the way to gzip.
    let plain = drop.join("a/depth06_worker02_seed0272350807_game000000.jsonl");
    let text = std::fs::read_to_string(&plain).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    std::fs::remove_file(&plain).unwrap();
    write_gz(
        &plain.with_extension("jsonl.gz"),
        (lines[..lines.len() - 1].join("\n") + "\n").as_bytes(),
    );
    let out = run(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&grown),
        "--update",
        "--quiet",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("a/depth06_worker02_seed0272350807_game000000.meta.json: changed since it was packed as run 2 (its rows file is now a/depth06_worker02_seed0272350807_game000000.jsonl.gz and its content differs)")
            && err.contains("nothing was written"),
        "{err}"
    );
    assert_eq!(all_bytes(&grown), before);

    // With --skip-invalid it is recorded as skipped, never packed a second time.
    let summary = update(&drop, &grown, &["--skip-invalid"]);
    assert_eq!(summary["new_runs"], 0, "{summary}");
    assert_eq!(summary["skipped_runs"].as_array().unwrap().len(), 1);
    assert_eq!(pack_bytes(&grown), pack_bytes_of(&before));
    let after = all_bytes(&grown);
    update(&drop, &grown, &["--skip-invalid"]);
    assert_eq!(
        all_bytes(&grown),
        after,
        "the same change again changes nothing"
    );
}

/// [`pack_bytes`] of a pack captured with [`all_bytes`].
fn pack_bytes_of(all: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    all.iter()
        .filter(|(n, _)| n.starts_with("steps") || n == "valuation_types.json")
        .cloned()
        .collect()
}
