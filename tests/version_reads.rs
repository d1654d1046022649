//! A version means that version, in every command: its valuation types, its families, its
//! runs, and the figures that are not kept per version left out rather than the latest's.

mod common;

use common::{copy_tree, fixture, run, run_ok, s, stderr};

#[test]
fn every_command_reads_an_earlier_version_as_it_was() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let (raw, pack) = (root.join("raw"), root.join("pack"));
    copy_tree(&fixture("raw/d6_10g_v1"), &raw);
    common::pack(&raw, &pack, &["--shard-rows", "500"]);
    let alone = root.join("d6-alone");
    common::pack(&raw, &alone, &["--shard-rows", "500"]);
    // Version 2 adds d7's runs, and with them the valuation type tuple12.
    copy_tree(&fixture("raw/d7_10g_v1"), &raw);
    common::pack(&raw, &pack, &["--update"]);
    common::attach_zeros(&pack, "emb", root); // version 3
    let p = s(&pack);
    run_ok(&["detach", p, "--name", "emb"]); // version 4

    let stats: serde_json::Value =
        serde_json::from_str(&run_ok(&["stats", p, "--version", "1", "--json"])).unwrap();
    let names: Vec<&str> = stats["valuation_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["search", "tuple11", "tuple10"], "{stats}");
    assert!(stats["search_rows_not_kept"].is_null(), "{stats}");
    let latest: serde_json::Value = serde_json::from_str(&run_ok(&["stats", p, "--json"])).unwrap();
    assert_eq!(latest["valuation_types"].as_array().unwrap().len(), 4);

    // The version's valuation_types.json, byte for byte as a pack of its runs has it.
    let old = root.join("v1");
    run_ok(&[
        "export",
        p,
        "--version",
        "1",
        "--format",
        "pack",
        "--output",
        s(&old),
        "--quiet",
    ]);
    assert_eq!(
        std::fs::read(old.join("valuation_types.json")).unwrap(),
        std::fs::read(alone.join("valuation_types.json")).unwrap()
    );

    // Version 3 had emb, which version 4 detached: refused, not dropped silently.
    let v3 = root.join("v3");
    let out = run(&[
        "export",
        p,
        "--version",
        "3",
        "--format",
        "pack",
        "--output",
        s(&v3),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("emb") && stderr(&out).contains("version 4 detached"),
        "{}",
        stderr(&out)
    );
    assert!(!v3.exists());
    run_ok(&[
        "export",
        p,
        "--version",
        "3",
        "--format",
        "pack",
        "--output",
        s(&v3),
        "--drop-companion",
        "emb",
        "--quiet",
    ]);

    // A run of a later version is named as missing from the version asked for.
    let out = run(&["show", p, "--version", "1", "--run", "7"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("not in version 1 of")
            && stderr(&out).contains("the latest version, 4, has 10"),
        "{}",
        stderr(&out)
    );
}
