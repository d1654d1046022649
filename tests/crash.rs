//! Never half-written: a pack killed (SIGKILL) at any moment leaves the previous complete pack
//! or no pack, never a mix a loader would read; the next run cleans up or finishes the swap.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// The pack files of a folder with their bytes (staging excluded).
fn pack_state(dir: &Path) -> Vec<(String, Vec<u8>)> {
    files(dir, |n| !n.starts_with('.'))
}

#[test]
fn killed_at_any_moment_leaves_the_old_pack_or_the_new_one() {
    let t = tempfile::tempdir().unwrap();
    // A drop big enough that packing takes a while: the fixture drop many times over.
    let big = t.path().join("big");
    for i in 0..120 {
        copy_tree(&fixture("raw"), &big.join(format!("copy{i:03}")));
    }
    let new_ref = t.path().join("new_ref");
    pack(&big, &new_ref, &["--shard-rows", "50000", "--workers", "1"]);
    let new_state = pack_state(&new_ref);

    let old = t.path().join("old");
    pack(&fixture("findings"), &old, &[]);
    let old_state = pack_state(&old);

    let mut outcomes = [0usize; 3];
    for (i, delay_ms) in [0u64, 2, 5, 10, 20, 40, 60, 90, 130, 180, 250, 400]
        .into_iter()
        .enumerate()
    {
        let out = t.path().join(format!("out{i}"));
        copy_tree(&old, &out);
        let mut child = Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
            .args([
                "pack",
                "--input",
                s(&big),
                "--output",
                s(&out),
                "--overwrite",
                "--quiet",
            ])
            .args(["--shard-rows", "50000", "--workers", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        child.wait().unwrap();

        let state = pack_state(&out);
        if state == old_state {
            outcomes[0] += 1;
        } else if is_new_pack(&out, &new_state) {
            outcomes[1] += 1;
        } else {
            let names: Vec<_> = state.iter().map(|(n, _)| n.as_str()).collect();
            assert!(
                !names.contains(&"metadata.db"),
                "delay {delay_ms} ms: a mix of packs: {names:?}"
            );
            outcomes[2] += 1;
        }
        // The next run recovers: finishes an interrupted publish or cleans stale staging.
        pack(&big, &out, &["--overwrite", "--shard-rows", "50000"]);
        assert!(is_new_pack(&out, &new_state));
        assert!(!out.join(".dataset-packer-staging").exists());
        run_ok(&["validate", s(&out)]);
    }
    eprintln!(
        "kills: {} left the old pack, {} the new one, {} no pack",
        outcomes[0], outcomes[1], outcomes[2]
    );
    assert!(
        outcomes[0] > 0,
        "some kills must land before the publish: {outcomes:?}"
    );
}

/// Whether `dir` holds exactly the reference pack: the same files, shards and
/// valuation_types.json byte for byte, and a metadata.db with the same row total (SQLite's page
/// layout is not byte-reproducible, so the database is compared by what loaders read).
fn is_new_pack(dir: &Path, reference: &[(String, Vec<u8>)]) -> bool {
    let state = pack_state(dir);
    let same_names = state
        .iter()
        .map(|(n, _)| n)
        .eq(reference.iter().map(|(n, _)| n));
    let same_bytes = state
        .iter()
        .zip(reference)
        .all(|((n, a), (_, b))| n == "metadata.db" || a == b);
    same_names && same_bytes && {
        let total: String = db(dir)
            .query_row(
                "SELECT meta_value FROM session WHERE meta_key = 'total_rows'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        total == (120 * 2240).to_string()
    }
}
