//! The exit-code rule, command by command (README, "Exit codes"): 2 for a malformed argument
//! or a request refused in this state, 1 for a well-formed name of something absent.

mod common;

use common::{fixture, run, s, stderr};

/// (the command's arguments before the pack, after it) for every command that reads a pack
/// as one of its versions.
fn readers(out: &str) -> Vec<(Vec<&str>, Vec<&str>)> {
    vec![
        (vec!["stats"], vec![]),
        (vec!["validate"], vec![]),
        (vec!["show"], vec!["--run", "0"]),
        (vec!["export"], vec!["--output", out, "--format", "jsonl"]),
        (vec!["report"], vec!["--output", out]),
    ]
}

fn code(args: &[&str]) -> (i32, String) {
    let out = run(args);
    (out.status.code().unwrap_or(-1), stderr(&out))
}

#[test]
fn every_command_exits_2_for_a_malformed_argument_and_1_for_something_absent() {
    let t = tempfile::tempdir().unwrap();
    let pack = t.path().join("pack");
    common::pack(&fixture("raw/d6_10g_v1"), &pack, &["--shard-rows", "500"]);
    let out = t.path().join("out");
    let out = s(&out);
    for (before, after) in readers(out) {
        let with = |extra: &[&'static str]| {
            let mut args = before.clone();
            args.push(s(&pack));
            args.extend(&after);
            args.extend(extra);
            args
        };
        for (extra, want) in [
            (&["--version", "0"][..], 2),
            (&["--version", "v 1"], 2),
            (&["--cache-limit", "10x"], 2),
            (&["--version", "99"], 1),
            (&["--version", "no-such-tag"], 1),
        ] {
            let args = with(extra);
            let (got, err) = code(&args);
            assert_eq!(got, want, "{args:?}: {err}");
        }
    }
    let p = s(&pack);
    for (args, want) in [
        (vec!["tag", p, "123"], 2),
        (vec!["tag", p, "bad name"], 2),
        (vec!["tag", p, "latest"], 2),
        (vec!["tag", p, "ok", "--version", "99"], 1),
        (vec!["tag", p, "--delete", "never-given"], 1),
        (vec!["show", p, "--run", "12345"], 1),
        (vec!["versions", p, "--cache-limit", "10x"], 2),
    ] {
        let (got, err) = code(&args);
        assert_eq!(got, want, "{args:?}: {err}");
    }
}

#[test]
fn a_tag_moves_only_when_asked() {
    let t = tempfile::tempdir().unwrap();
    let pack = t.path().join("pack");
    common::pack(&fixture("raw/d6_10g_v1"), &pack, &["--shard-rows", "500"]);
    common::pack(
        &fixture("raw/d7_10g_v1"),
        &pack,
        &["--update", "--shard-rows", "500"],
    );
    let p = s(&pack);
    common::run_ok(&["tag", p, "paper", "--version", "1"]);
    // Naming the same version again changes nothing.
    common::run_ok(&["tag", p, "paper", "--version", "1"]);
    let (got, err) = code(&["tag", p, "paper"]);
    assert_eq!(got, 2, "{err}");
    assert!(
        err.contains("on version 1") && err.contains("--move"),
        "{err}"
    );
    let versions = common::run_ok(&["versions", p, "--json"]);
    let json: serde_json::Value = serde_json::from_str(&versions).unwrap();
    let tags_of = |json: &serde_json::Value, v: u64| -> Vec<String> {
        json["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["version"] == v)
            .map(|x| serde_json::from_value(x["tags"].clone()).unwrap())
            .unwrap()
    };
    assert_eq!(tags_of(&json, 1), ["paper"]);
    common::run_ok(&["tag", p, "paper", "--move"]);
    let json: serde_json::Value =
        serde_json::from_str(&common::run_ok(&["versions", p, "--json"])).unwrap();
    assert_eq!(tags_of(&json, 2), ["paper"]);
    assert!(tags_of(&json, 1).is_empty());
}
