//! Every command that reads rows checks the CRC-32C the pack recorded for the shards it reads:
//! a flipped byte in a shard makes export (every format), stats and show of an affected run
//! fail with exit 1, naming the shard and `validate`, and nothing is published.

mod common;

use std::path::Path;

use common::*;

/// A pack of the fixture drop in shards of 500 rows, with one byte of a row of shard 2 flipped.
fn damaged(t: &Path) -> std::path::PathBuf {
    let p = t.join("damaged");
    pack(&fixture("raw"), &p, &["--shard-rows", "500"]);
    let shard = p.join("steps-00002.npy");
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes[384 + 48 * 17 + 33] ^= 0x04; // an EV byte of row 17: still a finite float
    std::fs::write(&shard, bytes).unwrap();
    p
}

fn assert_refused(args: &[&str], output: Option<&Path>) {
    let out = run(args);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("steps-00002.npy does not match its recorded checksum")
            && err.contains("dataset-packer validate"),
        "{args:?}: {err}"
    );
    if let Some(o) = output {
        assert!(!o.exists(), "{args:?}: {} was published", o.display());
        let parent = o.parent().unwrap();
        let leftovers: Vec<String> = names(parent)
            .into_iter()
            .filter(|n| n.contains("dataset-packer"))
            .collect();
        assert!(leftovers.is_empty(), "{args:?}: left {leftovers:?}");
    }
}

#[test]
fn a_flipped_row_byte_stops_every_reader() {
    let t = tempfile::tempdir().unwrap();
    let p = damaged(t.path());
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    for (format, name) in [
        ("jsonl", "rows.jsonl"),
        ("jsonl", "rows.jsonl.gz"),
        ("jsonl", "raw-folder"),
        ("parquet", "rows.parquet"),
        ("parquet", "parquet-folder"),
        ("pack", "subset"),
    ] {
        let target = out.join(name);
        assert_refused(
            &[
                "export",
                s(&p),
                "--format",
                format,
                "--output",
                s(&target),
                "--quiet",
            ],
            Some(&target),
        );
    }
    // Only the runs in the damaged shard: still refused.
    let target = out.join("run4.parquet");
    assert_refused(
        &[
            "export",
            s(&p),
            "--format",
            "parquet",
            "--output",
            s(&target),
            "--runs",
            "4",
        ],
        Some(&target),
    );
    assert_refused(&["stats", s(&p)], None);
    assert_refused(&["stats", s(&p), "--json"], None);
    // Run 4 lies in shard 2 (rows 1000..1500 hold runs 3 and 4).
    let located: i64 = db(&p)
        .query_row("SELECT shard FROM run_index WHERE run_id = 4", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(located, 2);
    assert_refused(&["show", s(&p), "--run", "4"], None);
    // A run whose shards are sound is shown.
    run_ok(&["show", s(&p), "--run", "0"]);
    // And validate names it too.
    let out = run(&["validate", s(&p)]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_damaged_companion_stops_the_exports_that_carry_it() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("p");
    pack(&fixture("raw"), &p, &["--shard-rows", "500"]);
    let whole = t.path().join("whole.npy");
    python_ok(
        "companion_tool.py",
        &["make", s(&p), "emb", "emb", "--whole", s(&whole)],
    );
    run_ok(&[
        "attach",
        s(&p),
        "--name",
        "emb",
        "--from",
        s(&whole),
        "--quiet",
    ]);
    let f = p.join("emb-00001.npy");
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[500] ^= 1;
    std::fs::write(&f, bytes).unwrap();
    for (format, name) in [("pack", "subset"), ("parquet", "rows.parquet")] {
        let target = t.path().join(name);
        let out = run(&[
            "export",
            s(&p),
            "--format",
            format,
            "--output",
            s(&target),
            "--quiet",
        ]);
        assert_eq!(out.status.code(), Some(1), "{format}");
        assert!(
            stderr(&out).contains("emb-00001.npy does not match its recorded checksum"),
            "{}",
            stderr(&out)
        );
        assert!(!target.exists());
    }
    // Without the companion, the rows (which are sound) export.
    run_ok(&[
        "export",
        s(&p),
        "--format",
        "parquet",
        "--output",
        s(&t.path().join("rows.parquet")),
        "--drop-companion",
        "emb",
        "--quiet",
    ]);
}
