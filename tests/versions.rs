//! Versions (issue 29): every command that writes a pack records a version in its
//! metadata.db; an earlier version reads exactly as the pack was then (rows byte for byte,
//! runs, companion families), by number or tag, in every reading command and in the library;
//! validate checks the history.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use dataset_packer::{Pack, VersionSpec};
use serde_json::Value;

/// `pack` of the fixture folder d6 alone, then `pack --update` with d7 added: versions 1 and 2
/// of one pack (in shards of 500 rows, with the search family, so the update rewrites the last
/// shard of version 1). Also returns a pack of d6 alone to compare version 1 with.
fn grown(t: &Path) -> (PathBuf, PathBuf) {
    let drop = t.join("drop");
    copy_tree(&fixture("raw/d6_10g_v1"), &drop.join("d6_10g_v1"));
    let first = t.join("first");
    let opts = ["--shard-rows", "500", "--search-stats"];
    pack(&drop, &first, &opts);
    let p = t.join("p");
    pack(&drop, &p, &opts);
    copy_tree(&fixture("raw/d7_10g_v1"), &drop.join("d7_10g_v1"));
    run_ok(&[
        "pack",
        "--update",
        "--input",
        s(&drop),
        "--output",
        s(&p),
        "--quiet",
        "--shard-rows",
        "500",
        "--search-stats",
    ]);
    (p, first)
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&run_ok(args)).unwrap()
}

fn writable(pack: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(pack.join("metadata.db")).unwrap()
}

fn fails(args: &[&str]) -> String {
    let out = run(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    stderr(&out)
}

/// A one-column f4 array with a row per row of the pack (row i holds i), to attach.
fn column(path: &Path, rows: usize) {
    let mut bytes = npy_header("'<f4'", rows);
    for i in 0..rows {
        bytes.extend_from_slice(&(i as f32).to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn every_change_records_a_version_and_keeps_the_identity() {
    let t = tempfile::tempdir().unwrap();
    let (p, _) = grown(t.path());
    column(&t.path().join("emb.npy"), 2240);
    run_ok(&[
        "attach",
        s(&p),
        "--name",
        "emb",
        "--from",
        s(&t.path().join("emb.npy")),
    ]);
    run_ok(&["detach", s(&p), "--name", "emb"]);

    let h = json(&["versions", s(&p), "--json"]);
    let id = h["pack_id"].as_str().unwrap();
    assert_eq!(id.len(), 32);
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(session_value(&p, "pack_id").as_deref(), Some(id));
    let vs = h["versions"].as_array().unwrap();
    let got: Vec<(u64, &str, u64, u64, Vec<&str>)> = vs
        .iter()
        .map(|v| {
            (
                v["version"].as_u64().unwrap(),
                v["operation"].as_str().unwrap(),
                v["rows"].as_u64().unwrap(),
                v["runs"].as_u64().unwrap(),
                v["families"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| f.as_str().unwrap())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (1, "pack", 1220, 5, vec!["search"]),
            (2, "update", 2240, 10, vec!["search"]),
            (3, "attach", 2240, 10, vec!["emb", "search"]),
            (4, "detach", 2240, 10, vec!["search"]),
        ]
    );
    // Each version lists its files with their rows then; the update rewrote steps-00002.npy.
    let files = |v: usize| -> Vec<(String, u64)> {
        vs[v]["files"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["family"] == "steps")
            .map(|f| {
                (
                    f["file_name"].as_str().unwrap().to_string(),
                    f["rows"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        files(0),
        [
            ("steps-00000.npy".into(), 500),
            ("steps-00001.npy".into(), 500),
            ("steps-00002.npy".into(), 220)
        ]
    );
    assert_eq!(files(1).len(), 5);
    assert_eq!(files(1)[2], ("steps-00002.npy".into(), 500));
    assert!(
        vs[1]["command"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--update")
    );
    let text = run_ok(&["versions", s(&p)]);
    assert!(text.contains(id) && text.contains("detach"), "{text}");
    run_ok(&["validate", s(&p), "--quiet"]);

    // A new pack from it gets a new identity and names where it came from.
    let m = t.path().join("m");
    run_ok(&["shuffle", s(&p), "--output", s(&m), "--quiet"]);
    let h = json(&["versions", s(&m), "--json"]);
    assert_ne!(h["pack_id"].as_str().unwrap(), id);
    let from = &h["versions"][0]["sources"][0];
    assert_eq!(
        (from["pack_id"].as_str(), from["version"].as_u64()),
        (Some(id), Some(4))
    );
    let stats = json(&["stats", s(&m), "--json"]);
    assert_eq!(stats["made_from"][0]["pack_id"].as_str(), Some(id));
}

#[test]
fn an_earlier_version_reads_as_the_pack_was() {
    let t = tempfile::tempdir().unwrap();
    let (p, first) = grown(t.path());

    // export --version 1 reproduces the rows (and search statistics) of the pack then.
    let e = t.path().join("e");
    run_ok(&[
        "export",
        s(&p),
        "--version",
        "1",
        "--format",
        "pack",
        "--output",
        s(&e),
        "--quiet",
    ]);
    let shards = |d: &Path| files(d, |n| n.ends_with(".npy"));
    assert_eq!(shards(&e), shards(&first));
    assert_eq!(runs_table(&e), runs_table(&first));
    let from = &json(&["versions", s(&e), "--json"])["versions"][0]["sources"][0];
    assert_eq!(from["version"].as_u64(), Some(1));

    // stats, show and selections see only its runs.
    let st = json(&["stats", s(&p), "--version", "1", "--json"]);
    assert_eq!(
        (st["runs"].as_u64(), st["rows"].as_u64()),
        (Some(5), Some(1220))
    );
    assert_eq!(
        (st["version"].as_u64(), st["latest_version"].as_bool()),
        (Some(1), Some(false))
    );
    assert_eq!(
        json(&["stats", s(&first), "--json"])["score"],
        st["score"],
        "the figures of version 1 are those of the pack then"
    );
    let err = fails(&["stats", s(&p), "--version", "1", "--where", "id >= 5"]);
    assert!(err.contains("selects no runs"), "{err}");
    let err = fails(&["show", s(&p), "--version", "1", "--run", "7"]);
    assert!(err.contains("run 7 is not in"), "{err}");
    let one = run_ok(&["show", s(&p), "--version", "1", "--run", "4"]);
    let now = run_ok(&["show", s(&p), "--run", "4"]);
    assert!(
        one.contains(&format!("show {} --version 1 --run 4 --from", s(&p))),
        "{one}"
    );
    assert_eq!(one.replace(" --version 1", ""), now);

    // The library reads it the same way, at the cost of an open.
    let v1 = Pack::open_version(&p, &VersionSpec::Number(1)).unwrap();
    let now = Pack::open(&p).unwrap();
    assert_eq!((v1.version(), now.version()), (1, 2));
    assert_eq!(v1.pack_id(), now.pack_id());
    assert_eq!((v1.len(), v1.num_runs()), (1220, 5));
    assert_eq!(v1.select("1").unwrap(), [0, 1, 2, 3, 4]);
    let key = |s: dataset_packer::Step| (s.run_id(), s.step_index(), s.exponents(), s.move_dir());
    let old: Vec<_> = v1.steps().map(key).collect();
    let later: Vec<_> = now.steps_in(0..1220).map(key).collect();
    assert_eq!(old.len(), 1220);
    assert_eq!(old, later);
    assert_eq!(v1.companion("search").unwrap().len(), 1220);
    let err = Pack::open_version(&p, &VersionSpec::Number(3)).unwrap_err();
    assert!(
        err.to_string()
            .contains("has no version 3: it has versions 1 to 2"),
        "{err}"
    );
}

#[test]
fn tags_name_versions_and_a_detached_family_names_its_removal() {
    let t = tempfile::tempdir().unwrap();
    let (p, _) = grown(t.path());
    let out = run_ok(&["tag", s(&p), "paper", "--version", "1"]);
    assert!(out.contains("tagged version 1"), "{out}");
    let before = json(&["versions", s(&p), "--json"])["versions"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, 2, "a tag makes no version");
    let st = json(&["stats", s(&p), "--version", "paper", "--json"]);
    assert_eq!(st["rows"].as_u64(), Some(1220));
    run_ok(&["tag", s(&p), "paper", "--move"]);
    assert_eq!(
        json(&["stats", s(&p), "--version", "paper", "--json"])["rows"].as_u64(),
        Some(2240)
    );
    let err = fails(&["stats", s(&p), "--version", "nope"]);
    assert!(
        err.contains("no tag \"nope\"") && err.contains("paper"),
        "{err}"
    );
    for bad in ["12", "latest", "a b", ""] {
        let err = fails(&["tag", s(&p), bad]);
        assert!(err.contains("tag"), "{bad}: {err}");
    }
    run_ok(&["tag", s(&p), "--delete", "paper"]);
    let err = fails(&["tag", s(&p), "--delete", "paper"]);
    assert!(err.contains("has no tag"), "{err}");

    column(&t.path().join("emb.npy"), 2240);
    run_ok(&[
        "attach",
        s(&p),
        "--name",
        "emb",
        "--from",
        s(&t.path().join("emb.npy")),
    ]);
    run_ok(&["detach", s(&p), "--name", "emb"]);
    let v3 = Pack::open_version(&p, &VersionSpec::Number(3)).unwrap();
    assert_eq!(v3.len(), 2240, "its rows still read");
    let err = v3.companion("emb").unwrap_err().to_string();
    assert!(err.contains("removed by version 4 (detach)"), "{err}");
    let v2 = Pack::open_version(&p, &VersionSpec::Number(2)).unwrap();
    let err = v2.companion("emb").unwrap_err().to_string();
    assert!(err.contains("version 3 added it"), "{err}");
}

#[test]
fn validate_checks_the_history_and_old_packs_read_as_version_one() {
    let t = tempfile::tempdir().unwrap();
    let (p, _) = grown(t.path());
    let report = json(&["validate", s(&p), "--json", "--quiet"]);
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "versions")
        .unwrap()
        .clone();
    assert_eq!(check["failures"].as_u64(), Some(0), "{check}");
    let named = json(&["validate", s(&p), "--version", "1", "--json", "--quiet"]);
    assert_eq!(named["version"]["rows"].as_u64(), Some(1220));
    let err = fails(&["validate", s(&p), "--version", "5"]);
    assert!(err.contains("has no version 5"), "{err}");

    // A version whose rows do not add up, or a latest version that is not the folder, fails.
    let bad = t.path().join("bad");
    copy_tree(&p, &bad);
    writable(&bad)
        .execute("UPDATE version_files SET rows = rows + 1 WHERE version = 1 AND shard = 0 AND family = 'steps'", [])
        .unwrap();
    let out = run(&["validate", s(&bad), "--quiet"]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("version 1: its shards hold 1221 rows, it records 1220"),
        "{text}"
    );
    let bad2 = t.path().join("bad2");
    copy_tree(&p, &bad2);
    writable(&bad2)
        .execute("DELETE FROM versions WHERE version = 2", [])
        .unwrap();
    let text = String::from_utf8_lossy(&run(&["validate", s(&bad2), "--quiet"]).stdout).to_string();
    assert!(
        text.contains("the latest version (1) records 1220 rows"),
        "{text}"
    );

    // A pack made before versions: version 1 of itself, no pack_id; its first change in place
    // records that state as version 1, then the change, under a new pack_id.
    let old = t.path().join("old");
    copy_tree(&p, &old);
    let c = writable(&old);
    c.execute_batch(
        "DROP TABLE versions; DROP TABLE version_files; DROP TABLE version_sources;
         DROP TABLE version_tags; DELETE FROM session WHERE meta_key = 'pack_id';",
    )
    .unwrap();
    drop(c);
    let h = json(&["versions", s(&old), "--json"]);
    assert_eq!(
        (h["pack_id"].is_null(), h["recorded"].as_bool()),
        (true, Some(false))
    );
    assert_eq!(h["versions"][0]["rows"].as_u64(), Some(2240));
    assert_eq!(Pack::open(&old).unwrap().pack_id(), None);
    let text = run_ok(&["validate", s(&old), "--quiet"]);
    assert!(text.contains("made before versions"), "{text}");
    column(&t.path().join("emb.npy"), 2240);
    run_ok(&[
        "attach",
        s(&old),
        "--name",
        "emb",
        "--from",
        s(&t.path().join("emb.npy")),
    ]);
    let h = json(&["versions", s(&old), "--json"]);
    let ops: Vec<&str> = h["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["operation"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["pack", "attach"]);
    assert_eq!(h["pack_id"].as_str().map(str::len), Some(32));
    run_ok(&["validate", s(&old), "--quiet"]);
}
