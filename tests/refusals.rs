//! A command refused before it starts leaves nothing behind (issue 30, item 7): each writing
//! command (pack, merge, shuffle, export, attach) is run into each of its refusals, and the
//! output folder afterwards is exactly as before: a new folder is not created, an existing
//! one holds the same entries with the same bytes (hidden work folders included).

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// Every entry below a folder (a subfolder's name ends in '/') with a file's bytes.
type Entries = Vec<(String, Option<Vec<u8>>)>;

/// Every entry below `dir` (folders too, hidden ones included) with a file's bytes; None
/// when `dir` does not exist.
fn snapshot(dir: &Path) -> Option<Entries> {
    fn visit(root: &Path, dir: &Path, out: &mut Entries) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                out.push((format!("{rel}/"), None));
                visit(root, &p, out);
            } else {
                out.push((rel, Some(std::fs::read(&p).unwrap())));
            }
        }
    }
    dir.exists().then(|| {
        let mut out = Vec::new();
        visit(dir, dir, &mut out);
        out
    })
}

fn entry_names(snap: &Option<Entries>) -> Vec<&str> {
    snap.iter().flatten().map(|(n, _)| n.as_str()).collect()
}

/// Runs `args` (with `env`), asserting it is refused (exit 1 or 2) with `message` in its
/// error, and that `watched` are each exactly as before.
fn refused_leaving(args: &[&str], env: &[(&str, Option<&str>)], message: &str, watched: &[&Path]) {
    let before: Vec<_> = watched.iter().map(|d| snapshot(d)).collect();
    let out = run_env(args, env);
    let err = stderr(&out);
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "{args:?} was not refused: {err}"
    );
    assert!(err.contains(message), "{args:?}: {err}");
    for (dir, before) in watched.iter().zip(before) {
        let after = snapshot(dir);
        assert_eq!(
            entry_names(&after),
            entry_names(&before),
            "{args:?} left {} changed",
            dir.display()
        );
        assert!(
            after == before,
            "{args:?} changed bytes in {}",
            dir.display()
        );
    }
}

/// A small valid pack with the search family.
fn source(t: &Path) -> PathBuf {
    let p = t.join("src");
    pack(
        &fixture("raw"),
        &p,
        &["--search-stats", "--shard-rows", "500"],
    );
    p
}

#[test]
fn a_shuffle_refused_before_it_starts_leaves_nothing() {
    let t = tempfile::tempdir().unwrap();
    let src = source(t.path());
    let no_space = [("DATASET_PACKER_FREE_BYTES", Some("1000"))];
    let out = t.path().join("new");
    refused_leaving(
        &["shuffle", s(&src), "--output", s(&out), "--quiet"],
        &no_space,
        "only 0.0 MB is free",
        &[&out, &src],
    );
    assert!(!out.exists());
    let temp = t.path().join("scratch");
    std::fs::create_dir(&temp).unwrap();
    refused_leaving(
        &[
            "shuffle",
            s(&src),
            "--output",
            s(&out),
            "--temp",
            s(&temp),
            "--quiet",
        ],
        &no_space,
        "only 0.0 MB is free",
        &[&out, &temp],
    );

    // An interrupted shuffle's work stays as it was through every refusal: with --resume
    // and other options, and without --resume for want of space (it used to be discarded
    // first).
    let res = run_env(
        &["shuffle", s(&src), "--output", s(&out), "--quiet"],
        &[("DATASET_PACKER_FAIL_AFTER_ROWS", Some("1000"))],
    );
    assert_eq!(res.status.code(), Some(1), "{}", stderr(&res));
    assert!(out.join(".dataset-packer-shuffle/progress.json").exists());
    refused_leaving(
        &[
            "shuffle",
            s(&src),
            "--output",
            s(&out),
            "--resume",
            "--seed",
            "9",
            "--quiet",
        ],
        &[],
        "was run with other options",
        &[&out],
    );
    refused_leaving(
        &["shuffle", s(&src), "--output", s(&out), "--quiet"],
        &no_space,
        "only 0.0 MB is free",
        &[&out],
    );
    refused_leaving(
        &[
            "shuffle",
            s(&src),
            "--output",
            s(&out),
            "--resume",
            "--quiet",
        ],
        &no_space,
        "only 0.0 MB is free",
        &[&out],
    );
    // And it still resumes.
    run_ok(&[
        "shuffle",
        s(&src),
        "--output",
        s(&out),
        "--resume",
        "--quiet",
    ]);
    run_ok(&["validate", s(&out)]);
}

#[test]
fn pack_merge_and_export_refused_before_they_start_leave_nothing() {
    let t = tempfile::tempdir().unwrap();
    let src = source(t.path());
    let new = t.path().join("new");
    let empty = t.path().join("empty");
    std::fs::create_dir(&empty).unwrap();

    // pack: no runs; an invalid run; another tool's companion file beside an old pack.
    refused_leaving(
        &["pack", "--input", s(&empty), "--output", s(&new)],
        &[],
        "no runs in",
        &[&new],
    );
    refused_leaving(
        &[
            "pack",
            "--input",
            s(&fixture("invalid")),
            "--output",
            s(&new),
            "--quiet",
        ],
        &[],
        "nothing was written",
        &[&new],
    );
    let old = t.path().join("old");
    pack(&fixture("raw"), &old, &[]);
    std::fs::write(old.join("theirs.npy"), b"not ours").unwrap();
    refused_leaving(
        &[
            "pack",
            "--input",
            s(&fixture("raw")),
            "--output",
            s(&old),
            "--overwrite",
        ],
        &[],
        "theirs.npy",
        &[&old],
    );
    refused_leaving(
        &["pack", "--input", s(&fixture("raw")), "--output", s(&src)],
        &[],
        "(see --overwrite)",
        &[&src],
    );

    // merge: a missing input; an input twice; an existing pack without --overwrite.
    let missing = t.path().join("missing");
    refused_leaving(
        &["merge", s(&src), s(&missing), "--output", s(&new)],
        &[],
        "does not exist",
        &[&new],
    );
    refused_leaving(
        &["merge", s(&src), s(&src), "--output", s(&new)],
        &[],
        "given twice",
        &[&new],
    );
    std::fs::remove_file(old.join("theirs.npy")).unwrap();
    let other = t.path().join("other");
    pack(&fixture("raw"), &other, &[]);
    refused_leaving(
        &["merge", s(&src), s(&old), "--output", s(&new)],
        &[],
        "drop companion search",
        &[&new],
    );
    refused_leaving(
        &[
            "merge",
            s(&src),
            s(&old),
            "--drop-companion",
            "search",
            "--output",
            s(&other),
        ],
        &[],
        "(see --overwrite)",
        &[&other],
    );

    // export: a selection of nothing, bad SQL, an endless selection, to each format.
    for (format, output) in [
        ("pack", new.clone()),
        ("parquet", new.clone()),
        ("jsonl", new.join("x.jsonl")),
    ] {
        for (sql, message) in [
            ("depth = 99", "selects no runs"),
            ("nope = 1", "no column nope"),
            ("0) UNION SELECT 5 WHERE (1", "parentheses must pair up"),
        ] {
            refused_leaving(
                &[
                    "export",
                    s(&src),
                    "--format",
                    format,
                    "--output",
                    s(&output),
                    "--where",
                    sql,
                    "--quiet",
                ],
                &[],
                message,
                &[&new],
            );
        }
    }
    refused_leaving(
        &[
            "export",
            s(&src),
            "--format",
            "pack",
            "--output",
            s(&old),
            "--quiet",
        ],
        &[],
        "(see --overwrite)",
        &[&old],
    );
    assert!(!new.exists());
}

#[test]
fn an_attach_refused_before_it_starts_leaves_the_pack_as_it_was() {
    let t = tempfile::tempdir().unwrap();
    let src = source(t.path());
    // 5 rows for a pack of 2,240.
    let short = t.path().join("short.npy");
    let mut bytes = npy_header("<u4", 5);
    bytes.extend_from_slice(&[0u8; 20]);
    std::fs::write(&short, bytes).unwrap();
    refused_leaving(
        &[
            "attach",
            s(&src),
            "--name",
            "emb",
            "--from",
            s(&short),
            "--quiet",
        ],
        &[],
        "short.npy",
        &[&src],
    );
    refused_leaving(
        &[
            "attach",
            s(&src),
            "--name",
            "Bad-Name",
            "--from",
            s(&short),
            "--quiet",
        ],
        &[],
        "Bad-Name",
        &[&src],
    );
    refused_leaving(
        &[
            "attach",
            s(&src),
            "--name",
            "search",
            "--from",
            s(&short),
            "--quiet",
        ],
        &[],
        "search",
        &[&src],
    );
}

/// Where a command takes a local folder only (a shuffle's input), a URL is refused naming
/// it, and no folder named `s3:` appears in the working directory; an unknown scheme is an
/// error wherever a pack goes. (Reading URLs: tests/remote_read.rs; writing them:
/// tests/remote_write.rs.)
#[test]
fn urls_are_refused_never_taken_for_folders() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    pack(&fixture("raw"), &src, &[]);
    let out = t.path().join("out");
    let cases: [(&[&str], &str); 3] = [
        (
            &["shuffle", "s3://b/pack", "--output", s(&out)],
            "takes a local folder",
        ),
        (&["stats", "ftp://host/pack"], "unknown URL scheme"),
        (
            &["merge", s(&src), "--output", "ftp://host/merged"],
            "unknown URL scheme",
        ),
    ];
    for (args, says) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
            .args(args)
            .current_dir(t.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("://") && err.contains(says), "{args:?}: {err}");
        for scheme in ["s3:", "ftp:"] {
            assert!(
                !t.path().join(scheme).exists(),
                "{args:?} made a folder {scheme}"
            );
        }
    }
}
