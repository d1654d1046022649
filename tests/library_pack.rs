//! The library does what the command does (issue 31): `dataset_packer::pack_raw` with default
//! options writes the same pack as `dataset-packer pack` (shards, companion files and
//! `valuation_types.json` byte for byte, `metadata.db` table for table, leaving out what
//! differs by design: the time and command line a pack records, and its `pack_id`); the same
//! for an update, and for `attach` and `detach` against their commands. And the errors are
//! ones a program can match: an existing pack without `overwrite` is `Refused` about the
//! option `overwrite`, a malformed raw line is `InvalidInput` naming the file and the line.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use dataset_packer::{AttachOptions, ErrorKind, Pack, RawPackOptions, attach, detach, pack_raw};

/// Tables of `metadata.db` that record when and how (not what) the pack was made.
const BY_DESIGN: [&str; 2] = ["session", "versions"];
/// Session facts that differ by design between two packs of the same input.
const VOLATILE_FACTS: [&str; 4] = ["created_utc", "command_line", "pack_id", "updates"];

/// Every table of `metadata.db` but [`BY_DESIGN`], each row as text, columns named `pack_id`
/// left out; then the session facts but [`VOLATILE_FACTS`].
fn tables(pack: &Path) -> Vec<(String, Vec<Vec<String>>)> {
    let conn = db(pack);
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut out = Vec::new();
    for name in names.iter().filter(|n| !BY_DESIGN.contains(&n.as_str())) {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM \"{name}\" ORDER BY rowid"))
            .unwrap();
        let keep: Vec<usize> = (0..stmt.column_count())
            .filter(|&i| stmt.column_name(i).unwrap() != "pack_id")
            .collect();
        let rows: Vec<Vec<String>> = stmt
            .query_map([], |r| {
                Ok(keep
                    .iter()
                    .map(|&i| format!("{:?}", r.get_ref(i).unwrap()))
                    .collect())
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        out.push((name.clone(), rows));
    }
    let facts: Vec<Vec<String>> = conn
        .prepare("SELECT meta_key, meta_value FROM session ORDER BY meta_key")
        .unwrap()
        .query_map([], |r| Ok(vec![r.get(0)?, r.get(1)?]))
        .unwrap()
        .map(Result::unwrap)
        .filter(|kv: &Vec<String>| !VOLATILE_FACTS.contains(&kv[0].as_str()))
        .collect();
    out.push(("session".into(), facts));
    out
}

/// The pack's arrays (shards, companion files) and valuation table, byte for byte.
fn arrays(pack: &Path) -> Files {
    files(pack, |n| n.ends_with(".npy") || n == "valuation_types.json")
}

/// Two packs are the same pack: the same arrays, byte for byte, and the same tables.
fn assert_same_pack(library: &Path, command: &Path) {
    let (a, b) = (arrays(library), arrays(command));
    assert_eq!(
        a.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        b.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        "the same files"
    );
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert!(
            x == y,
            "{name} differs between the library's pack and the command's"
        );
    }
    let (a, b) = (tables(library), tables(command));
    let runs = a
        .iter()
        .find(|(n, _)| n == "runs")
        .map(|(_, rows)| rows.len());
    assert_eq!(
        runs,
        Some(Pack::open(library).unwrap().num_runs()),
        "tables were read"
    );
    assert_eq!(
        a.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        b.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert_eq!(x, y, "table {name} of metadata.db");
    }
}

#[test]
fn pack_raw_with_defaults_writes_what_pack_writes() {
    let t = tempfile::tempdir().unwrap();
    let (lib, cli) = (t.path().join("lib"), t.path().join("cli"));
    let summary = pack_raw(fixture("raw"), &lib, &RawPackOptions::default()).unwrap();
    pack(&fixture("raw"), &cli, &[]);
    assert_eq!((summary.runs(), summary.rows()), (10, 2240));
    assert!(!summary.extended());
    assert_eq!(names(&lib), names(&cli));
    assert!(names(&lib).contains(&"steps.npy".to_string()));
    assert_same_pack(&lib, &cli);
    assert_eq!(Pack::open(&lib).unwrap().len(), 2240);

    // Shards and the search family, from the builder's settings and the flags.
    let (lib, cli) = (t.path().join("lib500"), t.path().join("cli500"));
    let options = RawPackOptions::default()
        .shard_rows(500)
        .search_stats(true)
        .workers(2)
        .command_line("made by a program");
    let summary = pack_raw(fixture("raw"), &lib, &options).unwrap();
    pack(
        &fixture("raw"),
        &cli,
        &["--shard-rows", "500", "--search-stats", "--workers", "2"],
    );
    assert_eq!(summary.shards().len(), 5);
    assert!(names(&lib).contains(&"search-00004.npy".to_string()));
    assert_same_pack(&lib, &cli);
    assert_eq!(
        session_value(&lib, "command_line").as_deref(),
        Some("made by a program")
    );
}

/// `fixtures/raw` without its d7 folder, and the whole drop: a pack of the first to update
/// with the second.
fn drops(t: &Path) -> (PathBuf, PathBuf) {
    let part = t.join("part");
    copy_tree(&fixture("raw"), &part);
    std::fs::remove_dir_all(part.join("d7_10g_v1")).unwrap();
    (part, fixture("raw"))
}

#[test]
fn an_update_through_the_library_writes_what_pack_update_writes() {
    let t = tempfile::tempdir().unwrap();
    let (part, whole) = drops(t.path());
    let (lib, cli) = (t.path().join("lib"), t.path().join("cli"));
    let options = RawPackOptions::default().shard_rows(300);
    pack_raw(&part, &lib, &options).unwrap();
    pack(&part, &cli, &["--shard-rows", "300"]);
    assert_same_pack(&lib, &cli);

    let summary = pack_raw(&whole, &lib, &options.clone().update(true)).unwrap();
    pack(&whole, &cli, &["--update"]);
    assert!(summary.extended());
    assert_eq!(summary.runs(), 5);
    assert_eq!(summary.total(), (10, 2240));
    assert_same_pack(&lib, &cli);
    let pack = Pack::open(&lib).unwrap();
    assert_eq!((pack.num_runs(), pack.len()), (10, 2240));

    // Nothing new: nothing packed, nothing changed.
    let before = arrays(&lib);
    let again = pack_raw(&whole, &lib, &RawPackOptions::default().update(true)).unwrap();
    assert_eq!((again.runs(), again.total()), (0, (10, 2240)));
    assert_eq!(arrays(&lib), before);
}

/// An array of one `<u4` per row: the row's index times 3.
fn array(path: &Path, rows: u64) -> PathBuf {
    let mut bytes = npy_header("'<u4'", rows as usize);
    for i in 0..rows {
        bytes.extend_from_slice(&(i as u32 * 3).to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
    path.to_path_buf()
}

#[test]
fn attach_and_detach_through_the_library_do_what_the_commands_do() {
    let t = tempfile::tempdir().unwrap();
    let (lib, cli) = (t.path().join("lib"), t.path().join("cli"));
    for p in [&lib, &cli] {
        pack(&fixture("raw"), p, &["--shard-rows", "1000"]);
    }
    let whole = array(&t.path().join("whole.npy"), 2240);

    let added = attach(
        &lib,
        "tag3",
        std::slice::from_ref(&whole),
        &AttachOptions::default(),
    )
    .unwrap();
    run_ok(&[
        "attach",
        s(&cli),
        "--name",
        "tag3",
        "--from",
        s(&whole),
        "--quiet",
    ]);
    assert_eq!((added.descr(), added.rows()), ("'<u4'", 2240));
    assert_eq!(
        added
            .files()
            .iter()
            .map(|f| f.file_name.as_str())
            .collect::<Vec<_>>(),
        ["tag3-00000.npy", "tag3-00001.npy", "tag3-00002.npy"]
    );
    assert_same_pack(&lib, &cli);
    let pack = Pack::open(&lib).unwrap();
    let value = pack.companion("tag3").unwrap();
    assert_eq!(value.len(), 2240);

    // Twice is refused, as a state the library will not act on; the pack is as it was.
    let before = arrays(&lib);
    let err = attach(
        &lib,
        "tag3",
        std::slice::from_ref(&whole),
        &AttachOptions::default(),
    )
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Refused, "{err}");
    assert!(
        err.to_string().contains("already has a companion tag3"),
        "{err}"
    );
    let err = attach(&lib, "Bad", &[whole], &AttachOptions::default()).unwrap_err();
    assert_eq!(
        (err.kind(), err.option()),
        (ErrorKind::Refused, Some("name"))
    );
    assert_eq!(arrays(&lib), before);
    // An array that does not line up is bad input, named.
    let short = array(&t.path().join("short.npy"), 5);
    let err = attach(&lib, "short", &[short], &AttachOptions::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("short.npy: 5 rows"), "{err}");

    let removed = detach(&lib, "tag3").unwrap();
    run_ok(&["detach", s(&cli), "--name", "tag3"]);
    assert_eq!(removed.files().len(), 3);
    assert!(removed.bytes() > 2240 * 4);
    assert_same_pack(&lib, &cli);
    assert!(Pack::open(&lib).unwrap().companion_names().is_empty());
    let err = detach(&lib, "tag3").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
}

#[test]
fn refusals_and_bad_input_are_kinds_a_program_can_match() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("pack");
    pack_raw(fixture("raw"), &out, &RawPackOptions::default()).unwrap();
    let before = files(&out, |_| true);

    // An existing pack without overwrite: refused, about the option `overwrite`, in words
    // that name no command-line flag.
    let err = pack_raw(fixture("raw"), &out, &RawPackOptions::default()).unwrap_err();
    assert_eq!(
        (err.kind(), err.option()),
        (ErrorKind::Refused, Some("overwrite"))
    );
    assert!(err.to_string().contains(s(&out)), "{err}");
    assert!(!err.to_string().contains("--"), "{err}");
    assert_eq!(files(&out, |_| true), before);
    // The command says which flag: exit code 2, and the flag named after the message.
    let res = run(&["pack", "--input", s(&fixture("raw")), "--output", s(&out)]);
    assert_eq!(res.status.code(), Some(2));
    assert!(
        stderr(&res).contains("(see --overwrite)"),
        "{}",
        stderr(&res)
    );
    // Settings that contradict each other are refused before anything is touched.
    let both = RawPackOptions::default().update(true).overwrite(true);
    let err = pack_raw(fixture("raw"), &out, &both).unwrap_err();
    assert_eq!(
        (err.kind(), err.option()),
        (ErrorKind::Refused, Some("overwrite"))
    );
    let err = pack_raw(
        fixture("raw"),
        &out,
        &RawPackOptions::default().update(true).shard_rows(7),
    )
    .unwrap_err();
    assert_eq!(
        (err.kind(), err.option()),
        (ErrorKind::Refused, Some("shard_rows"))
    );
    assert_eq!(files(&out, |_| true), before);

    // A malformed raw line: invalid input naming the file and the line; nothing written.
    let bad = t.path().join("bad");
    let err = pack_raw(
        fixture("invalid/json_malformed"),
        &bad,
        &RawPackOptions::default(),
    )
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(err.option(), Some("skip_invalid"));
    assert!(err.to_string().contains("b_bad.jsonl.gz:3:"), "{err}");
    assert!(!err.to_string().contains("--"), "{err}");
    assert!(!bad.exists() || names(&bad).is_empty(), "{:?}", names(&bad));
    // Skipped instead, when asked.
    let summary = pack_raw(
        fixture("invalid/json_malformed"),
        &bad,
        &RawPackOptions::default().skip_invalid(true),
    )
    .unwrap();
    assert_eq!(summary.runs(), 1);
    assert_eq!(summary.skipped().len(), 1);
    assert!(
        summary.skipped()[0].1.contains(":3:"),
        "{:?}",
        summary.skipped()
    );
}
