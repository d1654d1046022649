//! The cookbook's programs (`examples/cookbook_*.rs`, shown on the rustdoc page
//! `dataset_packer::cookbook`): each is built as the example binary a user would run, run on
//! the fixture drop in a temporary folder, and its output checked against what the library
//! reads back from the pack it used or made. The page must show each program as its file
//! has it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

use common::{fixture, repo, run_ok, s};
use dataset_packer::{Pack, VersionSpec};

/// Every cookbook program and the test that checks its output: a new program needs a check.
const CHECKED: &[&str] = &[
    "cookbook_attach",
    "cookbook_merge_shuffle",
    "cookbook_old_version",
    "cookbook_pack_drop",
    "cookbook_select_runs",
    "cookbook_verify",
    "cookbook_worker_ranges",
];

/// The cookbook programs in `dir` (file stems, sorted).
fn programs_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "rs"))
                .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
                .filter(|n| n.starts_with("cookbook_"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The example binary `name`, built (once per test process, all programs at once) as
/// `cargo build --example` builds it, in the target folder and profile of this test.
fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    let dir = BUILT.get_or_init(|| {
        let _guard = LOCK.lock().unwrap();
        // target/<profile>/deps/examples-HASH
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap();
        let target_dir = profile_dir.parent().unwrap();
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(repo())
            .args(["build", "--quiet", "--target-dir"])
            .arg(target_dir);
        if profile_dir.file_name().unwrap() == "release" {
            cmd.arg("--release");
        }
        for program in programs_in(&repo().join("examples")) {
            cmd.args(["--example", &program]);
        }
        let out = cmd.output().expect("cargo runs");
        assert!(
            out.status.success(),
            "building the cookbook examples failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        profile_dir.join("examples")
    });
    dir.join(name)
}

/// Runs the example `name` with `args`.
fn run_example(name: &str, args: &[&Path]) -> Output {
    Command::new(example(name))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("the example runs")
}

/// The stdout of a run that must have succeeded.
fn stdout_ok(name: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{name} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The fixture drop packed by the binary (as a user would) into `dir/pack`.
fn fixture_pack(dir: &Path) -> PathBuf {
    let pack = dir.join("pack");
    run_ok(&[
        "pack",
        "--input",
        s(&fixture("raw")),
        "--output",
        s(&pack),
        "--quiet",
    ]);
    pack
}

/// The numbers in `line`, in order.
fn numbers(line: &str) -> Vec<u64> {
    line.split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect()
}

#[test]
fn every_cookbook_program_is_checked() {
    let all = programs_in(&repo().join("examples"));
    assert_eq!(all, CHECKED, "examples/cookbook_*.rs and the checks here");
}

/// The code blocks of src/cookbook.rs, each after its `(`examples/NAME.rs`)` line: what a
/// reader sees (hidden `# ` lines left out) must be the program's file below its `//!` header.
#[test]
fn cookbook_page_shows_each_program_as_its_file_has_it() {
    let page = std::fs::read_to_string(repo().join("src/cookbook.rs")).unwrap();
    let lines: Vec<&str> = page
        .lines()
        .map(|l| l.strip_prefix("//!").unwrap_or(l))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let mut shown = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = lines[i]
            .strip_prefix("(`examples/")
            .and_then(|l| l.strip_suffix(".rs`)"))
        else {
            i += 1;
            continue;
        };
        let start = i
            + lines[i..]
                .iter()
                .position(|l| l.starts_with("```"))
                .unwrap()
            + 1;
        let end = start + lines[start..].iter().position(|l| *l == "```").unwrap();
        let visible: Vec<&str> = lines[start..end]
            .iter()
            .filter(|l| !(l.trim_start().starts_with("# ") || l.trim() == "#"))
            .copied()
            .collect();
        let file = repo().join("examples").join(format!("{name}.rs"));
        assert!(
            file.is_file(),
            "the cookbook shows {name}.rs, which does not exist"
        );
        let text = std::fs::read_to_string(&file).unwrap();
        let code: Vec<&str> = text
            .lines()
            .skip_while(|l| l.starts_with("//!"))
            .skip_while(|l| l.is_empty())
            .collect();
        assert_eq!(visible, code, "src/cookbook.rs shows {name}.rs differently");
        // Every program is compiled and run as a doc test too.
        let fence = lines[start - 1];
        assert_eq!(fence, "```", "{name}: the page's code block is `{fence}`");
        shown.push(name.to_string());
        i = end;
    }
    shown.sort();
    assert_eq!(shown, CHECKED, "the programs the cookbook page shows");
}

#[test]
fn select_runs_prints_the_runs_the_sql_selects() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = fixture_pack(tmp.path());
    let out = stdout_ok(
        "cookbook_select_runs",
        run_example("cookbook_select_runs", &[&pack]),
    );
    // The same selection, asked of metadata.db directly.
    let db = rusqlite::Connection::open(pack.join("metadata.db")).unwrap();
    let (runs, rows): (u64, u64) = db
        .query_row(
            "SELECT COUNT(*), SUM(steps) FROM runs JOIN run_details ON run_id = id \
             WHERE depth = 7 AND max_score > 2500",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(runs > 0, "the fixture has runs the program selects");
    let last = out.lines().last().unwrap();
    assert_eq!(
        last,
        format!("selected {runs} runs, {rows} rows"),
        "output:\n{out}"
    );
    let per_run: Vec<Vec<u64>> = out
        .lines()
        .filter(|l| l.starts_with("run "))
        .map(numbers)
        .collect();
    assert_eq!(per_run.len() as u64, runs);
    let opened = Pack::open(&pack).unwrap();
    for n in &per_run {
        let (id, steps, agreed) = (n[0] as u32, n[1], n[2]);
        assert_eq!(steps, opened.run(id).unwrap().len(), "run {id}");
        assert!(agreed <= steps, "run {id}");
    }
}

#[test]
fn worker_ranges_read_every_row_once() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = fixture_pack(tmp.path());
    let out = stdout_ok(
        "cookbook_worker_ranges",
        run_example("cookbook_worker_ranges", &[&pack, Path::new("3")]),
    );
    let opened = Pack::open(&pack).unwrap();
    let len = opened.len();
    assert_eq!(out.lines().last().unwrap(), format!("rows: {len} of {len}"));
    let mut moves = [0u64; 4];
    for step in opened.steps() {
        moves[usize::from(step.move_dir())] += 1;
    }
    let workers: Vec<Vec<u64>> = out
        .lines()
        .filter(|l| l.starts_with("worker "))
        .map(numbers)
        .collect();
    assert_eq!(workers.len(), 3, "output:\n{out}");
    for (m, total) in moves.iter().enumerate() {
        assert_eq!(workers.iter().map(|w| w[1 + m]).sum::<u64>(), *total);
    }
}

#[test]
fn verify_exits_1_on_a_damaged_pack_and_0_on_a_good_one() {
    let tmp = tempfile::tempdir().unwrap();
    let good = fixture_pack(tmp.path());
    let out = stdout_ok("cookbook_verify", run_example("cookbook_verify", &[&good]));
    assert_eq!(out.trim(), format!("ok: {}: 2240 rows", good.display()));

    // A byte of the last row's padding flipped: the shard's checksum no longer matches.
    let damaged = tmp.path().join("damaged");
    std::fs::create_dir(&damaged).unwrap();
    for f in std::fs::read_dir(&good).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, damaged.join(f.file_name().unwrap())).unwrap();
    }
    let shard = damaged.join("steps.npy");
    let mut bytes = std::fs::read(&shard).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&shard, bytes).unwrap();
    let not_a_pack = tmp.path().join("empty");
    std::fs::create_dir(&not_a_pack).unwrap();

    let out = run_example("cookbook_verify", &[&good, &damaged, &not_a_pack]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    // One report a pack (an error's message may take more lines), in argument order.
    let reports: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with(' ') && l.contains(tmp.path().to_str().unwrap()))
        .collect();
    assert_eq!(reports.len(), 3, "{text}");
    assert_eq!(reports[0], format!("ok: {}: 2240 rows", good.display()));
    assert!(
        reports[1].starts_with("corrupt: ") && reports[1].contains(s(&damaged)),
        "{text}"
    );
    assert!(reports[2].contains(s(&not_a_pack)), "{text}");
}

#[test]
fn pack_drop_packs_the_fixture_with_search_stats() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("pack");
    let out = stdout_ok(
        "cookbook_pack_drop",
        run_example("cookbook_pack_drop", &[&fixture("raw"), &out_dir]),
    );
    let pack = Pack::open(&out_dir).unwrap();
    assert_eq!((pack.num_runs(), pack.len()), (10, 2240));
    assert_eq!(pack.companion_names(), ["search"]);
    assert_eq!(
        out.lines().next().unwrap(),
        format!("packed 10 runs, 2240 rows into {}", out_dir.display())
    );
}

#[test]
fn merge_shuffle_prints_what_each_pack_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    let out = stdout_ok(
        "cookbook_merge_shuffle",
        run_example("cookbook_merge_shuffle", &[&work]),
    );
    let mut expected = String::new();
    for name in ["d6_10g_v1", "d7_10g_v1", "merged", "shuffled"] {
        let pack = Pack::open(work.join(name)).unwrap();
        let shuffled = if pack.is_shuffled() { ", shuffled" } else { "" };
        expected += &format!(
            "{name}: {} runs, {} rows{shuffled}\n",
            pack.num_runs(),
            pack.len()
        );
    }
    assert_eq!(out, expected);
    assert!(
        out.ends_with("shuffled: 10 runs, 2240 rows, shuffled\n"),
        "{out}"
    );
}

#[test]
fn attach_adds_one_vector_per_row() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    let out = stdout_ok("cookbook_attach", run_example("cookbook_attach", &[&work]));
    let pack = Pack::open(work.join("pack")).unwrap();
    let embeddings = pack.companion("embeddings").unwrap();
    assert_eq!(embeddings.len(), pack.len());
    // The program's vector: the share of the board's cells holding each exponent.
    let row = pack.len() / 2;
    let v: Vec<f32> = embeddings.values(row).unwrap();
    let mut expected = [0f32; 16];
    for e in pack.row(row).unwrap().exponents() {
        expected[usize::from(e).min(15)] += 1.0 / 16.0;
    }
    assert_eq!(v, expected);
    assert!(
        out.starts_with(&format!("attached embeddings: {} rows", pack.len())),
        "{out}"
    );
}

#[test]
fn old_version_reads_the_tagged_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    let out = stdout_ok(
        "cookbook_old_version",
        run_example("cookbook_old_version", &[&work]),
    );
    let path = work.join("pack");
    let now = Pack::open(&path).unwrap();
    let then = Pack::open_version(&path, &VersionSpec::Tag("first-drop".into())).unwrap();
    assert_eq!((now.version(), now.len()), (2, 2240));
    // The first drop: the fixture's depth 6 games only.
    assert_eq!((then.version(), then.num_runs(), then.len()), (1, 5, 1220));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "latest: version 2, 10 runs, 2240 rows");
    assert_eq!(lines[1], "first-drop: version 1, 5 runs, 1220 rows");
}
