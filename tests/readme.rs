//! The README's promises, checked: it starts with exactly the two set-up commands, the pack
//! command works as written, and its Python snippets run against a real pack.

mod common;

use std::process::Command;

use common::*;

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).unwrap()
}

/// The fenced code blocks of a language, in order.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line.trim() == format!("```{lang}") => current = Some(String::new()),
            Some(b) if line.trim() == "```" => {
                out.push(std::mem::take(b));
                current = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {}
        }
    }
    out
}

/// Runs the README's Python snippets, joined, in `dir`: the script and what it did.
fn run_python_snippets(dir: &std::path::Path) -> (String, std::process::Output) {
    let script = blocks(&readme(), "python").join("\n");
    let out = Command::new(python())
        .arg("-c")
        .arg(&script)
        .current_dir(dir)
        .output()
        .unwrap();
    (script, out)
}

fn setup_commands() -> Vec<String> {
    let first = blocks(&readme(), "sh")
        .into_iter()
        .next()
        .expect("a first sh block");
    first
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split('#').next().unwrap().trim().to_string())
        .collect()
}

#[test]
fn readme_starts_with_exactly_two_setup_commands() {
    let text = readme();
    let first_block = text.find("```").unwrap();
    assert!(
        text[..first_block]
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count()
            <= 1,
        "only the title before"
    );
    let cmds = setup_commands();
    assert_eq!(cmds.len(), 2, "{cmds:?}");
    assert_eq!(
        cmds[0],
        "cargo run --release -- pack --input fixtures/raw --output packs/fixtures"
    );
    assert_eq!(cmds[1], "bash scripts/test.sh");
    let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
    assert!(
        ci.contains("bash scripts/test.sh"),
        ".ci/run runs the same test command"
    );
}

#[test]
fn readme_pack_command_and_python_snippets_work() {
    let t = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo().join("fixtures"), t.path().join("fixtures")).unwrap();
    // The first set-up command, with the built binary standing in for `cargo run --release --`.
    let cmd = &setup_commands()[0];
    let args: Vec<&str> = cmd
        .strip_prefix("cargo run --release -- ")
        .unwrap()
        .split_whitespace()
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
        .args(&args)
        .current_dir(t.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(t.path().join("packs/fixtures/steps.npy").exists());
    // Re-pack sharded so the concatenation snippet has several shards to join.
    pack(
        &fixture("raw"),
        &t.path().join("packs/fixtures"),
        &["--overwrite", "--shard-rows", "700"],
    );

    let (script, out) = run_python_snippets(t.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("2240 rows,"), "{stdout}");
    // The snippet masks EVs with ev_legal before its argmax, and the README says why.
    assert!(script.contains("np.where(legal, batch[\"branch_evs\"], -np.inf)"));
    assert!(readme().contains("**The EV trap.**"));
    assert!(stdout.contains("run 0 step 0 search"), "{stdout}");
    // Run 0's first board from the raw log, as tile values, appears in the printed grid.
    use std::io::Read;
    let raw = std::fs::read(fixture(
        "raw/d6_10g_v1/depth06_worker00_seed0272350805_game000000.jsonl.gz",
    ))
    .unwrap();
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(&raw[..])
        .read_to_string(&mut text)
        .unwrap();
    let first: serde_json::Value =
        serde_json::from_str(text.lines().find(|l| !l.trim().is_empty()).unwrap()).unwrap();
    let tiles: Vec<u64> = first["board"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(tiles.iter().any(|&e| e > 0));
    for e in tiles.into_iter().filter(|&e| e > 0) {
        assert!(
            stdout.contains(&(1u64 << e).to_string()),
            "tile {} missing from {stdout}",
            1u64 << e
        );
    }
}

/// Without a pack where the snippet looks, it says so, naming the pack and how to make one.
#[test]
fn readme_snippet_names_a_missing_pack() {
    let t = tempfile::tempdir().unwrap();
    let (_, out) = run_python_snippets(t.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(
            "packs/fixtures: not a pack (no metadata.db); to pack raw logs: dataset-packer pack"
        ),
        "{err}"
    );
}

/// The README and docs/ stand on their own: every relative link names a file of the
/// repository (none reaches out of it, as `../shared/spec/…` did), and the raw input is
/// described in docs/ itself.
#[test]
fn docs_links_resolve_inside_the_repository() {
    let root = repo();
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        assert!(
            !text.contains("shared/spec"),
            "{} points into shared/",
            page.display()
        );
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let target = &rest[..rest.find(')').unwrap()];
            if target.starts_with("http") || target.starts_with('#') || target.contains(' ') {
                continue;
            }
            let file = target.split('#').next().unwrap();
            let path = page.parent().unwrap().join(file);
            let resolved = path
                .canonicalize()
                .unwrap_or_else(|_| panic!("{}: broken link {target}", page.display()));
            assert!(
                resolved.starts_with(root.canonicalize().unwrap()),
                "{}: {target} leaves the repository",
                page.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "{checked} links");
    let format = std::fs::read_to_string(root.join("docs/format.md")).unwrap();
    assert!(format.contains("](raw-format.md"));
    let raw = std::fs::read_to_string(root.join("docs/raw-format.md")).unwrap();
    for fact in [
        "`null` marks an illegal move",
        "`depth`",
        "`steps_file`",
        "tuple11",
    ] {
        assert!(raw.contains(fact), "docs/raw-format.md lacks {fact}");
    }
}
