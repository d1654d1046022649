//! Companion arrays (row-aligned `NAME-NNNNN.npy` next to the shards): every command that
//! moves or reorders rows moves their companion rows the same way, nothing orphans them, and
//! every way a family can fail to line up is named. Each companion here holds, per row, the
//! identity of its steps row (seed, step_index, board), checked with NumPy after each command.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

fn make(pack: &Path, name: &str, kind: &str) {
    python_ok("companion_tool.py", &["make", s(pack), name, kind]);
}

fn check(pack: &Path, name: &str, kind: &str) {
    let out = python_ok("companion_tool.py", &["check", s(pack), name, kind]);
    assert!(out.starts_with("OK"), "{out}");
}

fn companion_files(pack: &Path, name: &str) -> Vec<String> {
    names(pack)
        .into_iter()
        .filter(|n| n.starts_with(&format!("{name}-")) || *n == format!("{name}.npy"))
        .collect()
}

fn fail(args: &[&str]) -> (i32, String) {
    let out = run(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    let mut text = stderr(&out);
    text.push_str(&String::from_utf8_lossy(&out.stdout));
    (out.status.code().unwrap_or(-1), text)
}

/// A pack of the fixture drop (or one of its folders) in shards of `shard_rows`.
fn packed(t: &Path, name: &str, fixture_dir: &str, shard_rows: &str) -> std::path::PathBuf {
    let p = t.join(name);
    pack(&fixture(fixture_dir), &p, &["--shard-rows", shard_rows]);
    p
}

#[test]
fn attach_detach_validate_and_stats() {
    let t = tempfile::tempdir().unwrap();
    let p = packed(t.path(), "p", "raw", "300");
    // One array for the whole pack, split at the shard boundaries.
    let whole = t.path().join("whole.npy");
    python_ok(
        "companion_tool.py",
        &["make", s(&p), "ids", "ids", "--whole", s(&whole)],
    );
    let summary: Value = serde_json::from_str(&run_ok(&[
        "attach",
        s(&p),
        "--name",
        "ids",
        "--from",
        s(&whole),
        "--json",
        "--quiet",
    ]))
    .unwrap();
    assert_eq!(summary["rows"], 2240);
    assert_eq!(summary["files"].as_array().unwrap().len(), 8);
    check(&p, "ids", "ids");
    let recorded: Vec<(String, i64, String)> = db(&p)
        .prepare("SELECT file_name, rows, crc32c FROM companions WHERE name = 'ids' ORDER BY shard")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(recorded.len(), 8);
    assert_eq!(
        recorded[7],
        ("ids-00007.npy".into(), 140, recorded[7].2.clone())
    );
    let report = run_ok(&["validate", s(&p)]);
    assert!(
        report.contains(
            "companion arrays: ids [('seed', '<u4'), ('step_index', '<u4'), ('board', '<u8')]"
        ),
        "{report}"
    );
    let stats: Value = serde_json::from_str(&run_ok(&["stats", s(&p), "--json"])).unwrap();
    assert_eq!(stats["companions"][0]["name"], "ids");
    let on_disk: u64 = companion_files(&p, "ids")
        .iter()
        .map(|f| std::fs::metadata(p.join(f)).unwrap().len())
        .sum();
    assert_eq!(stats["companions"][0]["bytes"], on_disk);
    assert!(run_ok(&["stats", s(&p)]).contains("companion ids: [('seed'"));

    // One array per shard, from another folder.
    let parts = t.path().join("parts");
    copy_tree(&p, &parts);
    python_ok("companion_tool.py", &["make", s(&parts), "emb", "emb"]);
    let from: Vec<String> = companion_files(&parts, "emb")
        .into_iter()
        .map(|n| s(&parts.join(n)).to_string())
        .collect();
    let mut args = vec!["attach", s(&p), "--name", "emb", "--quiet", "--from"];
    args.extend(from.iter().map(String::as_str));
    run_ok(&args);
    check(&p, "emb", "emb");
    for f in companion_files(&p, "emb") {
        assert_eq!(
            std::fs::read(p.join(&f)).unwrap(),
            std::fs::read(parts.join(&f)).unwrap(),
            "{f}: np.save's bytes exactly"
        );
    }

    // Refusals, each naming what is wrong.
    // A family the pack has is a state attach refuses to act on (exit 2).
    let (code, text) = fail(&["attach", s(&p), "--name", "ids", "--from", s(&whole)]);
    assert!(
        code == 2 && text.contains("already has a companion ids"),
        "{text}"
    );
    let (code, text) = fail(&["attach", s(&p), "--name", "Bad", "--from", s(&whole)]);
    assert!(code == 2 && text.contains("[a-z][a-z0-9_]*"), "{text}");
    let (_, text) = fail(&[
        "attach",
        s(&p),
        "--name",
        "two",
        "--from",
        &from[0],
        &from[1],
    ]);
    assert!(
        text.contains("2 arrays of 600 rows in all, but the pack has 2240 rows"),
        "{text}"
    );
    let (_, text) = fail(&["attach", s(&p), "--name", "one", "--from", &from[1]]);
    assert!(text.contains("300 rows, but the pack has 2240"), "{text}");
    let mut swapped = from.clone();
    swapped.swap(6, 7);
    let mut args = vec!["attach", s(&p), "--name", "sw", "--from"];
    args.extend(swapped.iter().map(String::as_str));
    let (_, text) = fail(&args);
    assert!(
        text.contains(
            "emb-00007.npy: 140 rows, but steps-00006.npy (the shard it pairs with) has 300"
        ),
        "{text}"
    );

    let out = run_ok(&["detach", s(&p), "--name", "emb"]);
    assert!(out.contains("detached emb"), "{out}");
    assert!(companion_files(&p, "emb").is_empty());
    let left: i64 = db(&p)
        .query_row(
            "SELECT COUNT(*) FROM companions WHERE name = 'emb'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0);
    check(&p, "ids", "ids");
    run_ok(&["validate", s(&p)]);
    let (_, text) = fail(&["detach", s(&p), "--name", "emb"]);
    assert!(text.contains("has no companion emb"), "{text}");
}

#[test]
fn every_misalignment_is_named() {
    let t = tempfile::tempdir().unwrap();
    let base = packed(t.path(), "base", "raw", "500");
    make(&base, "emb", "emb");
    run_ok(&["validate", s(&base)]);
    let cases: Vec<(&str, &str, &str)> = vec![
        // (case, python code run with the pack folder as argv[1], expected message)
        (
            "missing",
            "import os,sys; os.remove(sys.argv[1] + '/emb-00002.npy')",
            "emb: steps-00002.npy has no emb-00002.npy",
        ),
        (
            "extra",
            "import numpy as np,sys; np.save(sys.argv[1] + '/emb-00005.npy', np.zeros((3, 8), np.float32))",
            "emb: emb-00005.npy has no shard to pair with",
        ),
        (
            "rows",
            "import numpy as np,sys; np.save(sys.argv[1] + '/emb-00001.npy', np.zeros((499, 8), np.float32))",
            "emb-00001.npy: 499 rows, but steps-00001.npy has 500",
        ),
        (
            "dtype",
            "import numpy as np,sys; np.save(sys.argv[1] + '/emb-00003.npy', np.zeros((500, 8), np.float64))",
            "emb-00003.npy: dtype '<f8' (8,), but emb-00000.npy has '<f4' (8,)",
        ),
        (
            "single_name",
            "import numpy as np,sys; np.save(sys.argv[1] + '/labels.npy', np.zeros(2240, np.int8))",
            "labels.npy: named for a pack of one steps.npy",
        ),
        (
            "fortran",
            "import numpy as np,sys; np.save(sys.argv[1] + '/emb-00004.npy', np.asfortranarray(np.zeros((240, 8), np.float32)))",
            "emb-00004.npy: Fortran-ordered",
        ),
        (
            "objects",
            "import numpy as np,sys; np.save(sys.argv[1] + '/emb-00000.npy', np.array([None] * 500, object), allow_pickle=True)",
            "emb-00000.npy: holds Python objects",
        ),
        (
            "truncated",
            "import sys; p = sys.argv[1] + '/emb-00002.npy'; b = open(p, 'rb').read(); open(p, 'wb').write(b[:-7])",
            "emb-00002.npy: 16121 bytes, but its header promises 16128",
        ),
    ];
    for (case, code, expected) in cases {
        let p = t.path().join(case);
        copy_tree(&base, &p);
        python_code(code, &[s(&p)]);
        let out = run(&["validate", s(&p)]);
        assert_eq!(out.status.code(), Some(1), "{case}");
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(report.contains(expected), "{case}: {report}");
        let stats = run_ok(&["stats", s(&p)]);
        assert!(stats.contains("companion not lined up"), "{case}: {stats}");
    }

    // A recorded checksum that no longer matches.
    let p = t.path().join("crc");
    copy_tree(&base, &p);
    for f in companion_files(&p, "emb") {
        std::fs::remove_file(p.join(f)).unwrap();
    }
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
    bytes[1000] ^= 0x10;
    std::fs::write(&f, bytes).unwrap();
    let out = run(&["validate", s(&p)]);
    assert_eq!(out.status.code(), Some(1));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("emb-00001.npy: 16128 bytes, crc32c")
            && report.contains("metadata.db records"),
        "{report}"
    );
}

#[test]
fn merge_carries_companions_in_output_order() {
    let t = tempfile::tempdir().unwrap();
    let a = packed(t.path(), "a", "raw/d6_10g_v1", "300");
    let b = packed(t.path(), "b", "raw", "450");
    for p in [&a, &b] {
        make(p, "ids", "ids");
        make(p, "emb", "emb");
    }
    // b holds d6 again: --dedupe drops those runs, and their companion rows with them.
    let m = t.path().join("m");
    let summary: Value = serde_json::from_str(&run_ok(&[
        "merge",
        "--input",
        s(&a),
        "--input",
        s(&b),
        "--output",
        s(&m),
        "--shard-rows",
        "700",
        "--dedupe",
        "--json",
        "--quiet",
    ]))
    .unwrap();
    assert_eq!(summary["runs"], 10);
    assert_eq!(summary["companions"].as_array().unwrap().len(), 2);
    check(&m, "ids", "ids");
    check(&m, "emb", "emb");
    assert_eq!(companion_files(&m, "ids").len(), 4);
    let report = run_ok(&["validate", s(&m), "--deep"]);
    assert!(
        report.contains("companion arrays: emb '<f4' (8,); ids"),
        "{report}"
    );

    // A family missing from an input, or of another kind, is named; --drop-companion leaves it.
    let c = packed(t.path(), "c", "raw/d7_10g_v1", "300");
    make(&c, "ids", "ids");
    let (_, text) = fail(&[
        "merge",
        "--input",
        s(&a),
        "--input",
        s(&c),
        "--output",
        s(&t.path().join("x")),
    ]);
    assert!(
        text.contains("companion emb is in")
            && text.contains("drop companion emb")
            && text.contains("--drop-companion"),
        "{text}"
    );
    let x = t.path().join("x");
    run_ok(&[
        "merge",
        "--input",
        s(&a),
        "--input",
        s(&c),
        "--output",
        s(&x),
        "--drop-companion",
        "emb",
        "--quiet",
    ]);
    assert!(companion_files(&x, "emb").is_empty());
    check(&x, "ids", "ids");
    make(&c, "emb", "ids"); // "emb" of the ids dtype in c
    let (_, text) = fail(&[
        "merge",
        "--input",
        s(&a),
        "--input",
        s(&c),
        "--output",
        s(&t.path().join("y")),
    ]);
    assert!(text.contains("companion emb is '<f4' (8,) in"), "{text}");
}

#[test]
fn delete_inputs_takes_companions_along_and_refuses_what_it_cannot_account_for() {
    let t = tempfile::tempdir().unwrap();
    let a = packed(t.path(), "a", "raw/d6_10g_v1", "300");
    let b = packed(t.path(), "b", "raw/d7_10g_v1", "300");
    make(&a, "ids", "ids");
    make(&b, "ids", "ids");
    let out = t.path().join("m");

    // A file that is neither a shard nor a companion: refused, nothing touched.
    std::fs::write(b.join("Notes.npy"), b"x").unwrap();
    let before = files(&b, |_| true);
    let (code, text) = fail(&[
        "merge",
        "--input",
        s(&a),
        "--input",
        s(&b),
        "--output",
        s(&out),
        "--delete-inputs",
    ]);
    assert!(code == 2 && text.contains("Notes.npy"), "{text}");
    assert_eq!(files(&b, |_| true), before);
    assert!(!out.exists());
    std::fs::remove_file(b.join("Notes.npy")).unwrap();

    // Dropping a family would orphan its files: refused.
    let (code, text) = fail(&[
        "merge",
        "--input",
        s(&a),
        "--input",
        s(&b),
        "--output",
        s(&out),
        "--delete-inputs",
        "--drop-companion",
        "ids",
    ]);
    assert!(code == 2 && text.contains("would orphan"), "{text}");

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
    assert!(
        !a.exists() && !b.exists(),
        "inputs with their companions are gone"
    );
    check(&out, "ids", "ids");
}

#[test]
fn shuffle_moves_companion_rows_with_their_rows() {
    let t = tempfile::tempdir().unwrap();
    let p = packed(t.path(), "p", "raw", "500");
    make(&p, "ids", "ids");
    make(&p, "emb", "emb");
    let shuffled = t.path().join("shuffled");
    run_ok(&[
        "shuffle",
        "--input",
        s(&p),
        "--output",
        s(&shuffled),
        "--seed",
        "3",
        "--memory",
        "16KiB",
        "--quiet",
    ]);
    check(&shuffled, "ids", "ids");
    check(&shuffled, "emb", "emb");
    let mut before: Vec<[u8; 48]> = read_rows(&p);
    let mut after: Vec<[u8; 48]> = read_rows(&shuffled);
    assert_ne!(before, after);
    before.sort();
    after.sort();
    assert_eq!(
        before, after,
        "the steps rows are a permutation of the input's"
    );
    run_ok(&["validate", s(&shuffled)]);

    // Interrupted, then resumed: the same bytes.
    let resumed = t.path().join("resumed");
    let out = Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
        .args([
            "shuffle",
            "--input",
            s(&p),
            "--output",
            s(&resumed),
            "--seed",
            "3",
            "--memory",
            "16KiB",
            "--quiet",
        ])
        .env("DATASET_PACKER_FAIL_AFTER_ROWS", "1000")
        .output()
        .unwrap();
    assert!(!out.status.success());
    run_ok(&[
        "shuffle",
        "--input",
        s(&p),
        "--output",
        s(&resumed),
        "--seed",
        "3",
        "--memory",
        "16KiB",
        "--quiet",
        "--resume",
    ]);
    assert!(
        files(&resumed, |n| n.ends_with(".npy")) == files(&shuffled, |n| n.ends_with(".npy")),
        "a resumed shuffle gives the same bytes"
    );
}

#[test]
fn export_carries_companions_or_makes_them_columns() {
    let t = tempfile::tempdir().unwrap();
    let p = packed(t.path(), "p", "raw", "300");
    make(&p, "ids", "ids");
    make(&p, "emb", "emb");
    let sub = t.path().join("sub");
    run_ok(&[
        "export",
        s(&p),
        "--format",
        "pack",
        "--output",
        s(&sub),
        "--runs",
        "2,5-7",
        "--shard-rows",
        "200",
        "--quiet",
    ]);
    check(&sub, "ids", "ids");
    check(&sub, "emb", "emb");
    run_ok(&["validate", s(&sub)]);

    let parquet = t.path().join("rows.parquet");
    run_ok(&[
        "export",
        s(&p),
        "--format",
        "parquet",
        "--output",
        s(&parquet),
        "--runs",
        "1-3",
        "--quiet",
    ]);
    let out = python_code(
        "import sys, numpy as np, pyarrow.parquet as pq
t = pq.read_table(sys.argv[1])
assert str(t.schema.field('emb').type) == 'fixed_size_list<item: float not null>[8]', t.schema
assert str(t.schema.field('ids').type) == 'struct<seed: uint32 not null, step_index: uint32 not null, board: uint64 not null>', t.schema
ids = t.column('ids').to_pylist()
assert [r['step_index'] for r in ids] == t.column('step_index').to_pylist()
assert [r['seed'] for r in ids] == t.column('seed').to_pylist()
emb = np.array(t.column('emb').to_pylist(), np.float32)
assert (emb[:, 1] == np.array(t.column('step_index').to_pylist(), np.float32)).all()
print(t.num_rows)",
        &[s(&parquet)],
    );
    let rows: u64 = out.trim().parse().unwrap();
    assert!(rows > 0);

    let (code, text) = fail(&[
        "export",
        s(&p),
        "--format",
        "jsonl",
        "--output",
        s(&t.path().join("x.jsonl")),
    ]);
    assert!(
        code == 2 && text.contains("(emb, ids)") && text.contains("(see --drop-companion)"),
        "{text}"
    );
    run_ok(&[
        "export",
        s(&p),
        "--format",
        "jsonl",
        "--output",
        s(&t.path().join("x.jsonl")),
        "--drop-companion",
        "emb",
        "--drop-companion",
        "ids",
        "--quiet",
    ]);
}

#[test]
fn update_and_overwrite_never_orphan_companions() {
    let t = tempfile::tempdir().unwrap();
    let drop = t.path().join("drop");
    copy_tree(&fixture("raw/d6_10g_v1"), &drop.join("d6"));
    let p = t.path().join("p");
    pack(&drop, &p, &["--shard-rows", "300"]);
    make(&p, "ids", "ids");
    copy_tree(&fixture("raw/d7_10g_v1"), &drop.join("d7"));
    let before = files(&p, |_| true);

    let (code, text) = fail(&["pack", "--input", s(&drop), "--output", s(&p), "--update"]);
    assert!(
        code == 2
            && text.contains("companion arrays (ids)")
            && text.contains("(see --drop-companion)"),
        "{text}"
    );
    assert_eq!(files(&p, |_| true), before);
    let (code, text) = fail(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&p),
        "--overwrite",
    ]);
    assert!(
        code == 2 && text.contains("ids-00000.npy") && text.contains("orphan"),
        "{text}"
    );
    assert_eq!(files(&p, |_| true), before);

    let summary: Value = serde_json::from_str(&run_ok(&[
        "pack",
        "--input",
        s(&drop),
        "--output",
        s(&p),
        "--update",
        "--drop-companion",
        "ids",
        "--json",
        "--quiet",
    ]))
    .unwrap();
    assert_eq!(summary["new_runs"], 5);
    assert_eq!(summary["companions_removed"], serde_json::json!(["ids"]));
    assert!(companion_files(&p, "ids").is_empty());
    run_ok(&["validate", s(&p)]);
}

/// `attach` writes headers NumPy reads back as they were: a field name outside Latin-1 (`ж`)
/// in a format 3.0 (UTF-8) header, a Latin-1 name (`é`) in a 1.0 header as np.save writes
/// it, and a header past 4,096 bytes; `np.load`, `Pack.companion` and `validate` agree on
/// them. A header over NumPy's 10,000-character limit is refused, naming it.
#[test]
fn attach_keeps_non_ascii_field_names_and_long_headers() {
    let t = tempfile::tempdir().unwrap();
    let p = packed(t.path(), "p", "raw/d6_10g_v1", "400");
    let code = r#"
import sys, numpy as np, dataset_packer
pack, out = sys.argv[1], sys.argv[2]
n = len(dataset_packer.Pack(pack))
kinds = {
    "utf": np.dtype([("ж", "<f4"), ("x", "<u2")]),
    "lat": np.dtype([("é", "<i4")]),
    "wide": np.dtype([(f"a_rather_long_field_name_{i:03d}", "<u1") for i in range(130)]),
    "huge": np.dtype([(f"a_rather_long_field_name_{i:03d}", "<u1") for i in range(300)]),
}
for name, dt in kinds.items():
    a = np.zeros(n, dt)
    for f in dt.names:
        a[f] = np.arange(n) % 100
    np.save(f"{out}/{name}.npy", a)
    with open(f"{out}/{name}.npy", "rb") as f:
        print(name, np.lib.format.read_magic(f))
"#;
    let versions = python_code(code, &[s(&p), s(t.path())]);
    assert!(versions.contains("utf (3, 0)"), "{versions}");
    assert!(versions.contains("lat (1, 0)"), "{versions}");
    for name in ["utf", "lat", "wide"] {
        let from = t.path().join(format!("{name}.npy"));
        run_ok(&["attach", s(&p), "--name", name, "--from", s(&from)]);
    }
    let (_, refused) = fail(&[
        "attach",
        s(&p),
        "--name",
        "huge",
        "--from",
        s(&t.path().join("huge.npy")),
    ]);
    assert!(
        refused.contains("huge.npy") && refused.contains("NumPy's limit of 10000 characters"),
        "{refused}"
    );
    let check = r#"
import glob, sys, numpy as np, dataset_packer
pack, src = sys.argv[1], sys.argv[2]
p = dataset_packer.Pack(pack)
for name in ["utf", "lat", "wide"]:
    whole = np.load(f"{src}/{name}.npy")
    files = sorted(glob.glob(f"{pack}/{name}-*.npy"))
    parts = []
    for path in files:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
        a = np.load(path, mmap_mode="r")
        assert a.dtype == whole.dtype and a.dtype.names == whole.dtype.names, (path, a.dtype)
        parts.append(np.asarray(a))
    assert (np.concatenate(parts) == whole).all(), name
    c = p.companion(name)
    assert c.dtype.names == whole.dtype.names, (name, c.dtype)
    assert (c.rows(slice(None)) == whole).all(), name
    print(name, len(files), version, len(open(files[0], "rb").read(65536).split(b"\n")[0]))
"#;
    let report = python_code(check, &[s(&p), s(t.path())]);
    assert!(report.contains("utf 4 (3, 0)"), "{report}");
    assert!(report.contains("lat 4 (1, 0)"), "{report}");
    let wide_header: usize = report
        .lines()
        .find(|l| l.starts_with("wide"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(wide_header > 4096, "{report}");
    let out = run_ok(&["validate", s(&p)]);
    assert!(out.contains("VALID"), "{out}");
    let stats = run_ok(&["stats", s(&p)]);
    assert!(stats.contains("utf") && stats.contains("lat"), "{stats}");
}

/// The companion files (of any family) in `dir`, sorted.
fn all_companions(dir: &Path) -> Vec<String> {
    names(dir)
        .into_iter()
        .filter(|n| n.ends_with(".npy") && !n.starts_with("steps"))
        .collect()
}

/// What metadata.db records of its companions: (name, file_name), by name and shard.
fn recorded(pack: &Path) -> Vec<(String, String)> {
    db(pack)
        .prepare("SELECT name, file_name FROM companions ORDER BY name, shard")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// `--overwrite` replaces a pack together with the families its metadata.db records (the
/// `search` family, an attached one): `pack --search-stats`, `shuffle` and `export --format
/// pack` re-run over their own output succeed, and leave exactly the new pack's families
/// (recorded, checked by validate); a file of a family the pack does not record stays
/// protected, the refusal names it and nothing changes (issue 30, item 5).
#[test]
fn overwrite_replaces_the_packs_own_families_and_no_other() {
    let t = tempfile::tempdir().unwrap();
    let raw = fixture("raw");
    let p = t.path().join("p");
    let pack_into = |extra: &[&str]| {
        let mut args = vec!["pack", "--input", s(&raw), "--output", s(&p), "--quiet"];
        args.extend_from_slice(extra);
        run_ok(&args);
    };
    pack_into(&["--search-stats", "--shard-rows", "300"]);
    let whole = t.path().join("whole.npy");
    python_ok(
        "companion_tool.py",
        &["make", s(&p), "ids", "ids", "--whole", s(&whole)],
    );
    run_ok(&[
        "attach",
        s(&p),
        "--name",
        "ids",
        "--from",
        s(&whole),
        "--quiet",
    ]);
    assert_eq!(all_companions(&p).len(), 16);

    // Re-run with other shards: the search family is rewritten, the attached one goes with
    // the old pack (its rows were the old pack's).
    pack_into(&["--search-stats", "--shard-rows", "500", "--overwrite"]);
    let want: Vec<String> = (0..5).map(|i| format!("search-{i:05}.npy")).collect();
    assert_eq!(all_companions(&p), want);
    assert_eq!(
        recorded(&p),
        want.iter()
            .map(|f| ("search".to_string(), f.clone()))
            .collect::<Vec<_>>()
    );
    run_ok(&["validate", s(&p), "--deep"]);
    // Without --search-stats the family is gone with the old pack.
    pack_into(&["--overwrite"]);
    assert!(all_companions(&p).is_empty(), "{:?}", names(&p));
    assert!(recorded(&p).is_empty());
    pack_into(&["--search-stats", "--overwrite"]);
    assert_eq!(all_companions(&p), ["search.npy"]);
    run_ok(&["validate", s(&p)]);

    // shuffle and export --format pack over their own output, twice each.
    let shuffled = t.path().join("shuffled");
    let exported = t.path().join("exported");
    for seed in ["1", "2"] {
        run_ok(&[
            "shuffle",
            s(&p),
            "--output",
            s(&shuffled),
            "--seed",
            seed,
            "--shard-rows",
            "1000",
            "--overwrite",
            "--quiet",
        ]);
        assert_eq!(
            all_companions(&shuffled),
            ["search-00000.npy", "search-00001.npy", "search-00002.npy"]
        );
        run_ok(&["validate", s(&shuffled)]);
    }
    for (sql, files) in [("1", 5), ("depth = 7", 3)] {
        run_ok(&[
            "export",
            s(&p),
            "--format",
            "pack",
            "--output",
            s(&exported),
            "--shard-rows",
            "500",
            "--where",
            sql,
            "--overwrite",
            "--quiet",
        ]);
        let want: Vec<String> = (0..files).map(|i| format!("search-{i:05}.npy")).collect();
        assert_eq!(all_companions(&exported), want, "--where {sql}");
        run_ok(&["validate", s(&exported)]);
    }

    // A companion file the pack does not record is another tool's: refused, named, kept.
    std::fs::copy(p.join("search.npy"), p.join("search-00009.npy")).unwrap();
    std::fs::copy(p.join("search.npy"), p.join("theirs.npy")).unwrap();
    let before = files(&p, |_| true);
    let (code, text) = fail(&[
        "pack",
        "--input",
        s(&raw),
        "--output",
        s(&p),
        "--search-stats",
        "--overwrite",
    ]);
    assert!(
        code == 2
            && text.contains("search-00009.npy, theirs.npy")
            && text.contains("does not record")
            && !text.contains("search.npy,"),
        "{text}"
    );
    assert_eq!(files(&p, |_| true), before);
    // Without --overwrite the message lists the pack's own family with its files (a refusal:
    // exit 2, the flag named).
    std::fs::remove_file(p.join("search-00009.npy")).unwrap();
    std::fs::remove_file(p.join("theirs.npy")).unwrap();
    let (code, text) = fail(&["pack", "--input", s(&raw), "--output", s(&p)]);
    assert!(
        code == 2
            && text.contains("already holds a pack")
            && text.contains("search.npy")
            && text.contains("(see --overwrite)"),
        "{text}"
    );
}

/// Whether two sets of npy files (glob patterns) hold the same array, concatenated.
const CONCATENATED: &str = r#"
import sys, glob, numpy as np
def whole(pattern):
    return np.concatenate([np.load(f) for f in sorted(glob.glob(pattern))])
mine, theirs = whole(sys.argv[1]), whole(sys.argv[2])
assert mine.dtype == theirs.dtype and mine.shape == theirs.shape, (mine.dtype, theirs.dtype)
assert mine.tobytes() == theirs.tobytes()
print(len(mine))
"#;

#[test]
fn the_trainers_annotations_attach_as_they_are_cut_at_the_shard_boundaries() {
    let t = tempfile::tempdir().unwrap();
    let p = packed(t.path(), "p", "raw", "300");
    let (good, bad) = (t.path().join("good"), t.path().join("bad"));
    for (dir, how) in [(&good, "keep"), (&bad, "swap")] {
        std::fs::create_dir(dir).unwrap();
        python_code(TRAINER_ANNOTATIONS, &[s(&p), s(dir), how]);
    }
    let files = |dir: &Path, prefix: &str| -> Vec<String> {
        let mut f: Vec<String> = names(dir)
            .into_iter()
            .filter(|n| n.starts_with(prefix) && n.as_bytes()[prefix.len()].is_ascii_digit())
            .map(|n| s(&dir.join(n)).to_string())
            .collect();
        f.sort();
        f
    };

    // Rows that say which run and step they are: each is checked against the pack's row.
    let swapped = files(&bad, "annotations-");
    let mut args = vec!["attach", s(&p), "--name", "annotation", "--quiet", "--from"];
    args.extend(swapped.iter().map(String::as_str));
    let (code, text) = fail(&args);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("annotations-00001.npy row 17: run_id")
            && text.contains("but the pack's row 1017 (steps-00003.npy row 117) is run")
            && text.contains("nothing was attached"),
        "{text}"
    );
    assert!(companion_files(&p, "annotation").is_empty());

    let rows = files(&good, "annotations-");
    assert_eq!(rows.len(), 3, "three files of 1,000, 1,000 and 240 rows");
    let mut args = vec![
        "attach",
        s(&p),
        "--name",
        "annotation",
        "--quiet",
        "--json",
        "--from",
    ];
    args.extend(rows.iter().map(String::as_str));
    let summary: Value = serde_json::from_str(&run_ok(&args)).unwrap();
    assert_eq!(summary["rows"], 2240);
    assert_eq!(companion_files(&p, "annotation").len(), 8, "one per shard");
    let pattern = |dir: &Path, prefix: &str| format!("{}/{prefix}-[0-9]*.npy", s(dir));
    let n = python_code(
        CONCATENATED,
        &[&pattern(&p, "annotation"), &pattern(&good, "annotations")],
    );
    assert_eq!(n.trim(), "2240");

    // The student arrays carry no keys: their rows must add up, and are cut the same way.
    let student = files(&good, "annotations-student-");
    let mut args = vec!["attach", s(&p), "--name", "student", "--quiet", "--from"];
    args.extend(student.iter().map(String::as_str));
    run_ok(&args);
    let n = python_code(
        CONCATENATED,
        &[
            &pattern(&p, "student"),
            &pattern(&good, "annotations-student"),
        ],
    );
    assert_eq!(n.trim(), "2240");
    let pack = dataset_packer::Pack::open(&p).unwrap();
    let annotation = pack.companion("annotation").unwrap();
    for i in [0u64, 299, 300, 1017, 2239] {
        let row = pack.row(i).unwrap();
        assert_eq!(
            annotation.field_values::<u32>(i, "run_id").unwrap(),
            [row.run_id()]
        );
        assert_eq!(
            annotation.field_values::<u32>(i, "step_index").unwrap(),
            [row.step_index()]
        );
    }
    assert_eq!(pack.companion("student").unwrap().shape(), [4, 3]);
    let report = run_ok(&["validate", s(&p)]);
    assert!(report.contains("companion arrays: annotation"), "{report}");

    // Too few rows in all is refused, naming the counts.
    let (_, text) = fail(&["attach", s(&p), "--name", "short", "--from", &rows[0]]);
    assert!(text.contains("1000 rows, but the pack has 2240"), "{text}");
}
