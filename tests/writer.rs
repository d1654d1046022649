//! The public writer (`dataset_packer::PackWriter`) against the binary: a pack rebuilt through
//! it from another pack's steps has the same step bytes and run fingerprints as the one
//! `pack` wrote, passes `validate --deep`, merges with it as duplicates, and splits into
//! shards the way `--shard-rows` does; bad steps and occupied targets are refused with
//! nothing written.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use dataset_packer::{NewRun, NewStep, Pack, PackWriter, WriterOptions};

/// The `runs` facts of every run (seed, max_score, highest_tile, depth), in id order.
fn run_facts(pack: &Path) -> Vec<(u32, i64, i64, Option<i64>)> {
    let conn = db(pack);
    let mut stmt = conn
        .prepare(
            "SELECT seed, max_score, highest_tile, depth FROM runs \
             LEFT JOIN run_details ON run_details.run_id = runs.id ORDER BY id",
        )
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Every run of `source` written again through `PackWriter` into `target`.
fn rewrite(source: &Path, target: &Path, options: &WriterOptions) -> dataset_packer::Published {
    let pack = Pack::open(source).unwrap();
    let mut writer = PackWriter::create_with(target, options).unwrap();
    for name in pack.valuation_names() {
        writer.valuation_type(name).unwrap();
    }
    for (run, (seed, max_score, highest_tile, depth)) in pack.runs().unwrap().zip(run_facts(source))
    {
        let run = run.unwrap();
        let steps: Vec<NewStep> = run
            .steps()
            .map(|s| NewStep {
                step_index: s.step_index(),
                exponents: s.exponents(),
                move_dir: s.move_dir(),
                branch_evs: s.branch_evs(),
                valuation_type: s.valuation_type(),
            })
            .collect();
        let new = NewRun {
            seed,
            max_score,
            highest_tile,
            depth,
            source: Some(format!("run {} of the fixture", run.id())),
        };
        assert_eq!(writer.add_run(&new, &steps).unwrap(), run.id());
    }
    writer.publish().unwrap()
}

fn fingerprints(pack: &Path) -> Vec<String> {
    let conn = db(pack);
    let mut stmt = conn
        .prepare("SELECT fingerprint FROM run_details ORDER BY run_id")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn packed_fixture(dir: &Path, extra: &[&str]) -> PathBuf {
    let out = dir.join("packed");
    pack(&fixture("raw"), &out, extra);
    out
}

#[test]
fn a_rewritten_pack_has_the_same_steps_and_fingerprints_and_validates() {
    let dir = tempfile::tempdir().unwrap();
    let source = packed_fixture(dir.path(), &[]);
    let target = dir.path().join("rewritten");
    let published = rewrite(&source, &target, &WriterOptions::default());

    let original = Pack::open(&source).unwrap();
    assert_eq!(published.rows, original.len());
    assert_eq!(published.runs as usize, original.num_runs());
    assert_eq!(published.shards, 1);
    assert_eq!(
        std::fs::read(target.join("steps.npy")).unwrap(),
        std::fs::read(source.join("steps.npy")).unwrap(),
        "the steps written through PackWriter differ from pack's"
    );
    assert_eq!(
        std::fs::read(target.join("valuation_types.json")).unwrap(),
        std::fs::read(source.join("valuation_types.json")).unwrap()
    );
    assert_eq!(fingerprints(&target), fingerprints(&source));
    assert_eq!(runs_table(&target), runs_table(&source));
    run_ok(&["validate", "--deep", s(&target)]);
    // The findings pack counts from the rows are counted the same way.
    let counts = |p: &Path| -> Vec<(String, i64)> {
        let conn = db(p);
        let mut stmt = conn
            .prepare(
                "SELECT kind, count FROM finding_counts WHERE kind IN \
                 ('illegal_move_played', 'ev_on_illegal_move', 'step_index_gap', 'empty_run') \
                 ORDER BY kind",
            )
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(counts(&target), counts(&source));

    // Same content: merge --dedupe keeps one copy of every run.
    let merged = dir.path().join("merged");
    run_ok(&[
        "merge",
        s(&source),
        s(&target),
        "--output",
        s(&merged),
        "--dedupe",
    ]);
    assert_eq!(Pack::open(&merged).unwrap().num_runs(), original.num_runs());
}

#[test]
fn shard_rows_split_the_steps_like_pack_does() {
    let dir = tempfile::tempdir().unwrap();
    let source = packed_fixture(dir.path(), &["--shard-rows", "500"]);
    let target = dir.path().join("rewritten");
    let published = rewrite(&source, &target, &WriterOptions::default().shard_rows(500));
    let steps = |p: &Path| files(p, |n| n.starts_with("steps-"));
    assert_eq!(published.shards, steps(&source).len());
    assert_eq!(steps(&target), steps(&source));
    run_ok(&["validate", "--deep", s(&target)]);
    // The run index finds every run at its place in the shards.
    let rewritten = Pack::open(&target).unwrap();
    for run in Pack::open(&source).unwrap().runs().unwrap() {
        let run = run.unwrap();
        let again = rewritten.run(run.id()).unwrap();
        assert_eq!(again.first_row(), run.first_row());
        assert_eq!(again.len(), run.len());
    }
}

#[test]
fn bad_steps_and_occupied_targets_are_refused_and_nothing_is_published() {
    let dir = tempfile::tempdir().unwrap();
    let step = NewStep {
        step_index: 3,
        exponents: [0; 16],
        move_dir: 0,
        branch_evs: [0.0; 4],
        valuation_type: 0,
    };
    let target = dir.path().join("new");
    let mut writer = PackWriter::create(&target).unwrap();
    let cases: [(NewStep, &str); 5] = [
        (
            NewStep {
                move_dir: 4,
                ..step
            },
            "move_dir 4",
        ),
        (
            NewStep {
                valuation_type: 9,
                ..step
            },
            "valuation_type 9",
        ),
        (
            NewStep {
                branch_evs: [f32::NAN, 0.0, 0.0, 0.0],
                ..step
            },
            "finite",
        ),
        (
            NewStep {
                exponents: [18; 16],
                ..step
            },
            "exponent 18",
        ),
        (
            NewStep {
                step_index: 3,
                ..step
            },
            "increase",
        ),
    ];
    for (bad, says) in cases {
        let steps = if says == "increase" {
            vec![step, bad]
        } else {
            vec![bad]
        };
        let err = writer.add_run(&NewRun::default(), &steps).unwrap_err();
        assert!(
            err.to_string().contains(says),
            "{err:#} should say {says:?}"
        );
    }
    // A refused run takes no id and writes no row.
    assert_eq!(writer.add_run(&NewRun::default(), &[step]).unwrap(), 0);
    drop(writer);
    assert!(
        !target.join("metadata.db").exists(),
        "a writer dropped before publish left a pack"
    );

    // An existing pack is replaced only when asked; other tools' files stay.
    let existing = packed_fixture(dir.path(), &[]);
    std::fs::write(existing.join("notes.txt"), "mine").unwrap();
    let before = pack_bytes(&existing);
    let err = PackWriter::create(&existing)
        .err()
        .expect("an existing pack is refused without overwrite");
    assert!(
        format!("{err:#}").contains("already holds a pack"),
        "{err:#}"
    );
    assert_eq!(pack_bytes(&existing), before);
    let writer =
        PackWriter::create_with(&existing, &WriterOptions::default().overwrite(true)).unwrap();
    let published = writer.publish().unwrap();
    assert_eq!((published.runs, published.rows), (0, 0));
    assert_eq!(Pack::open(&existing).unwrap().num_runs(), 0);
    assert_eq!(std::fs::read(existing.join("notes.txt")).unwrap(), b"mine");

    // A steps file this tool did not write is never taken over.
    let stray = dir.path().join("stray");
    std::fs::create_dir(&stray).unwrap();
    std::fs::write(stray.join("steps_old.npy"), "not ours").unwrap();
    let err = PackWriter::create_with(&stray, &WriterOptions::default().overwrite(true))
        .err()
        .expect("a stray steps file is refused");
    assert!(format!("{err:#}").contains("steps_old.npy"), "{err:#}");
    assert_eq!(names(&stray), ["steps_old.npy"]);
}
