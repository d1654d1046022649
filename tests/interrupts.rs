//! Every writer survives being stopped at any moment: kill -9 leaves the previous output
//! byte-identical or the new one complete (never something a loader would pick up half
//! written) and the next run succeeds; Ctrl-C or SIGTERM removes the staging, says so and exits
//! 130. Also the smaller truths of issue 11: leftovers are named, `--temp` must exist, a
//! shuffled pack's runs are not exported as raw logs.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Visible files of a folder (or the file itself), byte for byte; hidden staging left out.
fn state(path: &Path) -> Vec<(String, Vec<u8>)> {
    if path.is_file() {
        return vec![(String::new(), std::fs::read(path).unwrap())];
    }
    if !path.exists() {
        return Vec::new();
    }
    files(path, |n| !n.starts_with('.'))
}

/// A drop big enough for writers to take a while: the fixture drop 60 times over.
fn big_pack(t: &Path, name: &str, shard_rows: &str) -> PathBuf {
    let drop = t.join("drop");
    if !drop.exists() {
        for i in 0..60 {
            copy_tree(&fixture("raw"), &drop.join(format!("c{i:02}")));
        }
    }
    let p = t.join(name);
    pack(&drop, &p, &["--shard-rows", shard_rows]);
    p
}

fn spawn(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// How long `args` takes undisturbed (it must succeed).
fn timed(args: &[&str]) -> u64 {
    let start = Instant::now();
    run_ok(args);
    start.elapsed().as_millis() as u64
}

/// Kills `args` (SIGKILL) at moments spread over `took` ms and a little past it; before each
/// run `reset()` restores the starting state, after each kill `judge()` checks what is there
/// and says whether it is the old state (true) or the new one (false), then `rerun` must
/// succeed and give `finished()`.
fn kill_at_moments(
    took: u64,
    args: &[&str],
    reset: &dyn Fn(),
    judge: &dyn Fn(u64) -> bool,
    rerun: &[&str],
    finished: &dyn Fn(),
) {
    let mut old = 0;
    for k in 0..10u64 {
        reset();
        let delay = k * took / 7;
        let mut child = spawn(args);
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        child.wait().unwrap();
        old += usize::from(judge(delay));
        run_ok(rerun);
        finished();
    }
    assert!(old > 0, "{args:?}: some kills must land before the publish");
}

#[test]
fn merge_killed_at_any_moment() {
    let t = tempfile::tempdir().unwrap();
    let a = big_pack(t.path(), "a", "20000");
    let b = t.path().join("b");
    pack(&fixture("findings"), &b, &[]);
    let out = t.path().join("out");
    let reference = t.path().join("reference");
    let took = timed(&[
        "merge",
        "--input",
        s(&a),
        "--input",
        s(&b),
        "--output",
        s(&reference),
        "--quiet",
    ]);
    let want = pack_view(&reference);
    let old_pack = t.path().join("old");
    pack(&fixture("raw"), &old_pack, &[]);
    let old = state(&old_pack);

    // Into a folder holding an older pack, with --overwrite.
    kill_at_moments(
        took,
        &[
            "merge",
            "--input",
            s(&a),
            "--input",
            s(&b),
            "--output",
            s(&out),
            "--overwrite",
            "--quiet",
        ],
        &|| {
            let _ = std::fs::remove_dir_all(&out);
            copy_tree(&old_pack, &out);
        },
        &|delay| {
            let now = state(&out);
            if now == old {
                return true;
            }
            if out.join("metadata.db").exists() {
                assert_eq!(pack_view(&out), want, "delay {delay}: a mix of packs");
            }
            false
        },
        &[
            "merge",
            "--input",
            s(&a),
            "--input",
            s(&b),
            "--output",
            s(&out),
            "--overwrite",
            "--quiet",
        ],
        &|| {
            assert_eq!(pack_view(&out), want);
            assert!(!out.join(".dataset-packer-staging").exists());
        },
    );

    // Into a new folder.
    kill_at_moments(
        took,
        &[
            "merge",
            "--input",
            s(&a),
            "--input",
            s(&b),
            "--output",
            s(&out),
            "--quiet",
        ],
        &|| {
            let _ = std::fs::remove_dir_all(&out);
        },
        &|delay| {
            if !out.join("metadata.db").exists() {
                let loadable: Vec<String> = state(&out).into_iter().map(|(n, _)| n).collect();
                assert!(
                    loadable.iter().all(|n| !n.starts_with("steps"))
                        || !out.join("metadata.db").exists(),
                    "delay {delay}: {loadable:?}"
                );
                return true;
            }
            assert_eq!(pack_view(&out), want, "delay {delay}");
            false
        },
        &[
            "merge",
            "--input",
            s(&a),
            "--input",
            s(&b),
            "--output",
            s(&out),
            "--overwrite",
            "--quiet",
        ],
        &|| assert_eq!(pack_view(&out), want),
    );
    run_ok(&["validate", s(&out)]);
}

#[test]
fn merge_delete_inputs_killed_keeps_the_inputs_until_the_output_is_verified() {
    let t = tempfile::tempdir().unwrap();
    let a0 = big_pack(t.path(), "a0", "20000");
    let b0 = t.path().join("b0");
    pack(&fixture("findings"), &b0, &[]);
    let (a_state, b_state) = (state(&a0), state(&b0));
    let (a, b, out) = (t.path().join("a"), t.path().join("b"), t.path().join("out"));
    let reference = t.path().join("reference");
    let took = timed(&[
        "merge",
        "--input",
        s(&a0),
        "--input",
        s(&b0),
        "--output",
        s(&reference),
        "--quiet",
    ]);
    let want = pack_view(&reference);
    let reset = || {
        for (p, from) in [(&a, &a0), (&b, &b0)] {
            let _ = std::fs::remove_dir_all(p);
            copy_tree(from, p);
        }
        let _ = std::fs::remove_dir_all(&out);
    };
    let mut deleted_any = false;
    for k in 0..10u64 {
        reset();
        let delay = k * took / 6;
        let mut child = spawn(&[
            "merge",
            "--input",
            s(&a),
            "--input",
            s(&b),
            "--output",
            s(&out),
            "--delete-inputs",
            "--quiet",
        ]);
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        child.wait().unwrap();
        let intact = state(&a) == a_state && state(&b) == b_state;
        if !intact {
            // An input was touched only after the output was published and re-validated.
            deleted_any = true;
            assert_eq!(
                pack_view(&out),
                want,
                "delay {delay}: inputs deleted before the output was complete"
            );
            run_ok(&["validate", s(&out)]);
        }
    }
    eprintln!("deleting inputs observed: {deleted_any}");
    reset();
    run_ok(&[
        "merge",
        "--input",
        s(&a),
        "--input",
        s(&b),
        "--output",
        s(&out),
        "--delete-inputs",
        "--quiet",
    ]);
    assert!(!a.exists() && !b.exists());
    assert_eq!(pack_view(&out), want);
}

#[test]
fn shuffle_killed_at_any_moment() {
    let t = tempfile::tempdir().unwrap();
    let p = big_pack(t.path(), "p", "20000");
    let out = t.path().join("out");
    let reference = t.path().join("reference");
    let args = |o: &Path| {
        vec![
            "shuffle".to_string(),
            "--input".into(),
            s(&p).into(),
            "--output".into(),
            s(o).into(),
            "--seed".into(),
            "5".into(),
            "--memory".into(),
            "256KiB".into(),
            "--quiet".into(),
        ]
    };
    let a: Vec<String> = args(&reference);
    let took = timed(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let want = pack_view(&reference);
    let old_pack = t.path().join("old");
    pack(&fixture("findings"), &old_pack, &[]);
    let old = state(&old_pack);
    let mut run_args = args(&out);
    run_args.push("--overwrite".into());
    let run_args: Vec<&str> = run_args.iter().map(String::as_str).collect();

    // Without --resume: the old pack intact, or the new one complete.
    kill_at_moments(
        took,
        &run_args,
        &|| {
            let _ = std::fs::remove_dir_all(&out);
            copy_tree(&old_pack, &out);
        },
        &|delay| {
            if state(&out) == old {
                return true;
            }
            if out.join("metadata.db").exists() {
                assert_eq!(pack_view(&out), want, "delay {delay}");
            }
            false
        },
        &run_args,
        &|| assert_eq!(pack_view(&out), want),
    );

    // With --resume: killed again and again, then finished: the same bytes.
    let _ = std::fs::remove_dir_all(&out);
    let mut resume_args = run_args.clone();
    resume_args.push("--resume");
    for k in 1..6u64 {
        let mut child = spawn(&resume_args);
        std::thread::sleep(Duration::from_millis(k * took / 8));
        let _ = child.kill();
        child.wait().unwrap();
    }
    run_ok(&resume_args);
    assert_eq!(
        pack_view(&out),
        want,
        "a resumed shuffle gives the same bytes"
    );
    run_ok(&["validate", s(&out)]);
}

#[test]
fn export_killed_at_any_moment() {
    let t = tempfile::tempdir().unwrap();
    let p = big_pack(t.path(), "p", "20000");
    for (format, name) in [
        ("parquet", "rows.parquet"),
        ("parquet", "parts"),
        ("pack", "subset"),
        ("jsonl", "rows.jsonl.gz"),
    ] {
        let out = t.path().join(name);
        let reference = t.path().join(format!("ref-{name}"));
        let extra: &[&str] = if format == "parquet" && name == "parts" {
            &["--shard-rows", "50000"]
        } else {
            &[]
        };
        let mut ref_args = vec![
            "export",
            s(&p),
            "--format",
            format,
            "--output",
            s(&reference),
            "--quiet",
        ];
        ref_args.extend_from_slice(extra);
        let took = timed(&ref_args);
        let want = state(&reference);
        // An older export of the same kind to replace.
        let mut old_args = vec![
            "export",
            s(&p),
            "--format",
            format,
            "--output",
            s(&out),
            "--runs",
            "0-2",
            "--quiet",
        ];
        old_args.extend_from_slice(extra);
        run_ok(&old_args);
        let old = state(&out);
        let old_copy = t.path().join(format!("old-{name}"));
        if out.is_dir() {
            copy_tree(&out, &old_copy);
        } else {
            std::fs::copy(&out, &old_copy).unwrap();
        }
        let mut args = vec![
            "export",
            s(&p),
            "--format",
            format,
            "--output",
            s(&out),
            "--overwrite",
            "--quiet",
        ];
        args.extend_from_slice(extra);
        let comparable = |st: Vec<(String, Vec<u8>)>| -> Vec<(String, Vec<u8>)> {
            // A pack's metadata.db is not byte-reproducible: compare the rest.
            st.into_iter().filter(|(n, _)| n != "metadata.db").collect()
        };
        kill_at_moments(
            took,
            &args,
            &|| {
                if out.is_dir() {
                    std::fs::remove_dir_all(&out).unwrap();
                    copy_tree(&old_copy, &out);
                } else {
                    std::fs::copy(&old_copy, &out).unwrap();
                }
            },
            &|delay| {
                let now = comparable(state(&out));
                if now == comparable(old.clone()) {
                    return true;
                }
                if format == "pack" && !out.join("metadata.db").exists() {
                    // Killed inside the publish, after the old metadata.db went and before the
                    // new one came: no pack a loader accepts, and the rerun rolls it forward
                    // (as a merge killed there, above).
                    return false;
                }
                assert_eq!(
                    now,
                    comparable(want.clone()),
                    "{name}, delay {delay}: a half-written export"
                );
                false
            },
            &args,
            &|| assert_eq!(comparable(state(&out)), comparable(want.clone()), "{name}"),
        );
        let strays: Vec<String> = names(t.path())
            .into_iter()
            .filter(|n| n.contains("dataset-packer"))
            .collect();
        assert!(strays.is_empty(), "{name}: left {strays:?}");
    }
}

#[test]
fn ctrl_c_and_sigterm_remove_the_staging_and_exit_130() {
    let t = tempfile::tempdir().unwrap();
    let p = big_pack(t.path(), "p", "20000");
    let drop = t.path().join("drop");
    let old_pack = t.path().join("old");
    pack(&fixture("findings"), &old_pack, &[]);
    let old = state(&old_pack);
    let out = t.path().join("out");
    let took = timed(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&t.path().join("timing")),
        "--quiet",
    ]);
    let mut interrupted = 0;
    for signal in [libc::SIGINT, libc::SIGTERM] {
        for (what, args) in [
            (
                "pack",
                vec![
                    "pack",
                    "--input",
                    s(&drop),
                    "--output",
                    s(&out),
                    "--overwrite",
                    "--quiet",
                ],
            ),
            (
                "merge",
                vec![
                    "merge",
                    "--input",
                    s(&p),
                    "--input",
                    s(&old_pack),
                    "--output",
                    s(&out),
                    "--overwrite",
                    "--quiet",
                ],
            ),
        ] {
            for delay in [1, took / 4, took / 2] {
                let _ = std::fs::remove_dir_all(&out);
                copy_tree(&old_pack, &out);
                let child = spawn(&args);
                std::thread::sleep(Duration::from_millis(delay));
                // SAFETY: sends a signal to our own child process.
                unsafe { libc::kill(child.id() as i32, signal) };
                let output = child.wait_with_output().unwrap();
                if output.status.success() {
                    continue; // it finished first: nothing to check
                }
                if output.status.code().is_none() {
                    // Signalled before main() installed the handler: nothing was written yet.
                    assert_eq!(state(&out), old, "{what}");
                    continue;
                }
                assert_eq!(output.status.code(), Some(130), "{what}");
                let err = String::from_utf8_lossy(&output.stderr);
                assert!(
                    !out.join(".dataset-packer-staging").exists(),
                    "{what}: staging left behind"
                );
                if err.contains("interrupted after the output was published; it is complete") {
                    run_ok(&["validate", s(&out)]);
                    continue;
                }
                assert!(
                    err.contains("interrupted: nothing was published; the previous pack is intact")
                        || err.contains("interrupted: nothing was written"),
                    "{what}: {err}"
                );
                assert_eq!(state(&out), old, "{what}");
                interrupted += 1;
            }
        }
    }
    assert!(interrupted > 0, "some signals must land before a publish");
    // Into a new folder: nothing at all is left.
    let fresh = t.path().join("fresh");
    let child = spawn(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&fresh),
        "--quiet",
    ]);
    std::thread::sleep(Duration::from_millis((took / 3).max(5)));
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    if !output.status.success() {
        assert!(!fresh.exists(), "the folder this run created is gone");
    }
}

#[test]
fn leftovers_are_named_and_other_truths() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("p");
    pack(&fixture("raw"), &p, &[]);
    std::fs::create_dir(p.join(".dataset-packer-staging")).unwrap();
    std::fs::write(p.join(".dataset-packer-staging/steps.npy"), vec![0u8; 1000]).unwrap();
    let report = run_ok(&["validate", s(&p)]);
    assert!(
        report.contains(".dataset-packer-staging")
            && report
                .contains("the next pack, merge, shuffle or export into this folder removes it"),
        "{report}"
    );
    let stats = run_ok(&["stats", s(&p)]);
    assert!(
        stats.contains("leftover") && stats.contains(".dataset-packer-staging"),
        "{stats}"
    );
    // The next write cleans it.
    pack(&fixture("raw"), &p, &["--overwrite"]);
    assert!(!p.join(".dataset-packer-staging").exists());

    // --temp must exist: it is not created.
    let missing = t.path().join("nonexistent/tmp");
    let out = run(&[
        "shuffle",
        "--input",
        s(&p),
        "--output",
        s(&t.path().join("sh")),
        "--temp",
        s(&missing),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no such folder"), "{}", stderr(&out));
    assert!(!t.path().join("nonexistent").exists());

    // A shuffled pack's runs are not written as raw logs in scattered order.
    let sh = t.path().join("sh");
    run_ok(&["shuffle", "--input", s(&p), "--output", s(&sh), "--quiet"]);
    let out = run(&[
        "export",
        s(&sh),
        "--format",
        "jsonl",
        "--runs",
        "3",
        "--output",
        s(&t.path().join("r3.jsonl")),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is shuffled") && stderr(&out).contains(s(&p)),
        "{}",
        stderr(&out)
    );
}
