//! A remote pack as a table of commits, driven through the binary against moto (and the
//! fault proxy in front of it): objects are written once and every commit names its files;
//! a reader keeps the version it opened; two writers from one version never lose work
//! silently (a deterministic race, held at the commit by the proxy); a writer killed at any
//! step leaves the previous version; `gc` deletes only what no kept commit names; a store
//! that ignores create-only writes is refused; `tag`, `attach` and `detach` commit on a URL;
//! a pack in the layout before commits still reads and converts on its first write; and the
//! node's cache checks what it hands out.
//!
//! Skipped, with the reason printed, only where the venv has no moto (outside CI).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::moto::{
    Moto, command_with, env_for, moto, options, publish_plain, run_with, run_with_ok,
};
use common::proxy::{Fault, Proxy};
use common::s;
use dataset_packer::store::{Location, Store, Url, commit_numbers, latest_commit, read_commit};

fn url(text: &str) -> Url {
    match Location::parse(text).unwrap() {
        Location::Remote(u) => u,
        other => panic!("{other:?}"),
    }
}

fn store(moto: &Moto) -> Store {
    Store::new(options(moto, moto.port)).unwrap()
}

/// Raw drops cut from fixtures/raw: `drops[i]` holds the runs `picks[i]` (indexes into the
/// fixture's ten runs), each in a folder of its own.
fn drops(dir: &Path, picks: &[&[usize]]) -> Vec<PathBuf> {
    let raw = common::fixture("raw");
    let mut all = Vec::new();
    for sub in ["d6_10g_v1", "d7_10g_v1"] {
        for base in common::run_bases(&raw.join(sub)) {
            all.push((raw.join(sub), base));
        }
    }
    picks
        .iter()
        .enumerate()
        .map(|(i, pick)| {
            let out = dir.join(format!("drop{i}"));
            for &p in *pick {
                let (from, base) = &all[p];
                common::copy_runs(from, std::slice::from_ref(base), &out);
            }
            out
        })
        .collect()
}

/// `pack --input drop --output out` (an update with `update`), with small shards so that an
/// update rewrites a tail shard.
fn pack_args<'a>(drop: &'a Path, out: &'a str, update: bool) -> Vec<&'a str> {
    let mut args = vec!["pack", "--input", s(drop), "--output", out, "--quiet"];
    args.extend(if update {
        vec!["--update"]
    } else {
        vec!["--shard-rows", "500"]
    });
    args
}

/// The files commit `n` names, downloaded into `dir` under their pack names: the pack as
/// that commit left it.
fn download_commit(store: &Store, pack: &str, n: u64, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let pack = url(pack);
    for (name, file) in read_commit(store, &pack, n).unwrap().files {
        let bytes = store.get(&pack.join(&file.key).unwrap()).unwrap();
        assert_eq!(bytes.len() as u64, file.bytes, "{name}");
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

/// `stats --json` of a pack (at `version`), without the seconds it took.
fn stats(pack: &str, version: &str, env: &[(String, String)]) -> serde_json::Value {
    let text = run_with_ok(&["stats", pack, "--json", "--version", version], env);
    figures(serde_json::from_str(&text).unwrap())
}

/// What two packs with the same rows agree on in `stats --json` (not their identity, place
/// or timing).
fn figures(doc: serde_json::Value) -> serde_json::Value {
    let keep = [
        "runs",
        "rows",
        "shards",
        "version",
        "score",
        "moves",
        "highest_tile",
        "depths",
        "valuation_types",
        "companions",
        "steps_per_run",
    ];
    keep.iter()
        .map(|k| (k.to_string(), doc[*k].clone()))
        .collect()
}

/// The object keys under `pack`, relative to it.
fn keys(store: &Store, pack: &str) -> BTreeSet<String> {
    store
        .list_all(&url(pack))
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect()
}

#[test]
fn objects_are_written_once_and_every_commit_names_its_files() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let d = drops(t.path(), &[&[0, 1, 2], &[3, 4, 5]]);
    let proxy = Proxy::start(moto.port);
    let env = env_for(moto, proxy.port, &t.path().join("cache"));
    let remote = "s3://packs/table/once";
    let (local, store) = (t.path().join("local"), store(moto));

    run_with_ok(&pack_args(&d[0], remote, false), &env);
    common::pack(&d[0], &local, &["--shard-rows", "500"]);
    let first = t.path().join("first");
    download_commit(&store, remote, 1, &first);
    assert_eq!(common::pack_bytes(&first), common::pack_bytes(&local));

    let out = run_with_ok(
        &[&pack_args(&d[1], remote, true)[..], &["--json"]].concat(),
        &env,
    );
    let doc: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(doc["published"]["commit"], 2, "{doc}");
    run_with_ok(&pack_args(&d[1], s(&local), true), &[]);
    let second = t.path().join("second");
    download_commit(&store, remote, 2, &second);
    assert_eq!(common::pack_bytes(&second), common::pack_bytes(&local));

    // No key of the pack was written twice (a probe's second, refused, create aside), and
    // each commit's files are the objects it names.
    let puts: Vec<String> = proxy
        .seen()
        .into_iter()
        .filter(|s| s.method == "PUT" && !s.path.contains("/_probes/"))
        .map(|s| s.path)
        .collect();
    let distinct: BTreeSet<&String> = puts.iter().collect();
    assert_eq!(distinct.len(), puts.len(), "{puts:#?}");
    let (c1, c2) = (
        read_commit(&store, &url(remote), 1).unwrap(),
        read_commit(&store, &url(remote), 2).unwrap(),
    );
    assert_eq!((c1.parent, c2.parent), (None, Some(1)));
    let mut rewritten = 0;
    for (name, file) in &c2.files {
        assert!(file.key.starts_with("_objects/"), "{name}: {}", file.key);
        match c1.files.get(name) {
            Some(old) if old.crc32c == file.crc32c => assert_eq!(old.key, file.key, "{name}"),
            Some(old) => {
                // A tail shard the update rewrote: a new object, the old one still there.
                assert_ne!(old.key, file.key);
                assert!(file.key.contains(&c2.writer), "{name}");
                rewritten += 1;
            }
            None => assert!(file.key.contains(&c2.writer), "{name}"),
        }
    }
    assert!(
        rewritten >= 2,
        "metadata.db and a tail shard at least: {rewritten}"
    );
    let all = keys(&store, remote);
    for file in c1.files.values().chain(c2.files.values()) {
        assert!(all.contains(&file.key), "{}", file.key);
    }
    assert!(
        all.iter()
            .all(|k| k.starts_with("_objects/") || k.starts_with("_versions/")),
        "{all:#?}"
    );
}

/// Every row of `pack` as a line: run id, move and board, in run order.
fn row_lines(pack: &dataset_packer::Pack) -> Vec<String> {
    let mut lines = Vec::new();
    for run in pack.runs().unwrap() {
        let run = run.unwrap();
        for step in run.steps() {
            let (id, dir, exps) = (run.id(), step.move_dir(), step.exponents());
            lines.push(format!("{id} {dir} {exps:?}"));
        }
    }
    lines
}

/// [`a_reader_keeps_the_version_it_opened_across_three_updates`]'s child: opens the pack,
/// says so, waits for the go file, then reads every row and prints them (nothing when run on
/// its own).
#[test]
fn table_reader_process() {
    let (Ok(pack), Ok(go)) = (
        std::env::var("TABLE_READ_URL"),
        std::env::var("TABLE_READ_GO"),
    ) else {
        return;
    };
    let opened = dataset_packer::Pack::open(&pack).unwrap();
    println!("opened");
    while !Path::new(&go).exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("{}", row_lines(&opened).join("\n"));
}

#[test]
fn a_reader_keeps_the_version_it_opened_across_three_updates() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let d = drops(t.path(), &[&[0, 1], &[2, 3], &[4, 5], &[6, 7]]);
    let env = env_for(moto, moto.port, &t.path().join("cache"));
    let remote = "s3://packs/table/reader";
    let local = t.path().join("local");
    run_with_ok(&pack_args(&d[0], remote, false), &env);
    common::pack(&d[0], &local, &["--shard-rows", "500"]);

    let go = t.path().join("go");
    let mut reader = Command::new(std::env::current_exe().unwrap());
    reader
        .args([
            "table_reader_process",
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("TABLE_READ_URL", remote)
        .env("TABLE_READ_GO", &go)
        .stdout(Stdio::piped());
    for (k, v) in &env {
        reader.env(k, v);
    }
    let mut reader = reader.spawn().unwrap();
    let mut stdout = std::io::BufReader::new(reader.stdout.take().unwrap());
    let mut line = String::new();
    // libtest's "test … ... " comes first on the line the child's "opened" ends.
    while !line.trim_end().ends_with("opened") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() > 0);
    }
    let mut versions = vec![stats(s(&local), "latest", &[])];
    for drop in &d[1..] {
        run_with_ok(&pack_args(drop, remote, true), &env);
        run_with_ok(&pack_args(drop, s(&local), true), &[]);
        versions.push(stats(s(&local), "latest", &[]));
    }
    std::fs::write(&go, "").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(reader.wait().unwrap().success());
    let read: Vec<&str> = rest
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    let here = dataset_packer::Pack::open_version(&local, &dataset_packer::VersionSpec::Number(1))
        .unwrap();
    let want = row_lines(&here);
    assert_eq!(read.len(), want.len(), "the rows of version 1, all of them");
    assert_eq!(read, want);

    // Every version reads exactly, by stats and as a plain local pack.
    for (i, want) in versions.iter().enumerate() {
        let v = (i + 1).to_string();
        assert_eq!(
            &stats(remote, &v, &env),
            &stats(s(&local), &v, &[]),
            "version {v}"
        );
        let (a, b) = (
            t.path().join(format!("r{v}")),
            t.path().join(format!("l{v}")),
        );
        for (pack, out, env) in [(remote, &a, &env[..]), (s(&local), &b, &[][..])] {
            run_with_ok(
                &[
                    "export",
                    pack,
                    "--version",
                    &v,
                    "--format",
                    "pack",
                    "--output",
                    s(out),
                    "--quiet",
                ],
                env,
            );
        }
        assert_eq!(
            common::runs_table(&a),
            common::runs_table(&b),
            "version {v}"
        );
        assert_eq!(common::read_rows(&a), common::read_rows(&b), "version {v}");
        assert_eq!(&stats(s(&b), "latest", &[])["rows"], &want["rows"]);
    }
}

/// Starts `args` through `proxy`, whose rule holds the commit's record, and waits until the
/// record's create reached the proxy.
fn start_held(args: &[&str], env: &[(String, String)], proxy: &Proxy) -> std::process::Child {
    proxy.hold();
    proxy.set(|m, p| {
        if m == "PUT" && p.contains("/_versions/") {
            Fault::Held
        } else {
            Fault::Pass
        }
    });
    let child = command_with(args, env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        proxy.wait_for(
            "PUT",
            |p| p.contains("/_versions/"),
            Duration::from_secs(60)
        ),
        "{args:?} never reached its commit"
    );
    child
}

#[test]
fn two_writers_from_one_version_never_lose_work_silently() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    // Drops 1 and 2 share a run: the second update must not add it twice.
    let d = drops(t.path(), &[&[0, 1], &[2, 3], &[3, 4], &[5]]);
    let proxy = Proxy::start(moto.port);
    let direct = env_for(moto, moto.port, &t.path().join("cache"));
    let held = env_for(moto, proxy.port, &t.path().join("cache"));
    let (store, remote) = (store(moto), "s3://packs/table/race");
    run_with_ok(&pack_args(&d[0], remote, false), &direct);

    // Two updates: A's commit waits at the proxy while B commits; A then finds commit 2,
    // builds again on top of it and commits 3, with every run once.
    let a = start_held(&pack_args(&d[1], remote, true), &held, &proxy);
    run_with_ok(&pack_args(&d[2], remote, true), &direct);
    proxy.release();
    let out = a.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(commit_numbers(&store, &url(remote)).unwrap(), [1, 2, 3]);
    let all = t.path().join("all");
    for drop in &d[..3] {
        common::copy_tree(drop, &all);
    }
    let local = t.path().join("local");
    common::pack(&all, &local, &[]);
    let doc = stats(remote, "latest", &direct);
    assert_eq!(
        doc["runs"],
        stats(s(&local), "latest", &[])["runs"],
        "{doc}"
    );
    assert_eq!(doc["rows"], stats(s(&local), "latest", &[])["rows"]);

    // A change that depends on the version it started from is refused instead: exit 2, the
    // commit it lost to named, nothing of it published.
    let zeros = t.path().join("zeros.npy");
    let rows = doc["rows"].as_u64().unwrap() as usize;
    let mut bytes = common::npy_header("'<f4'", rows);
    bytes.resize(bytes.len() + rows * 4, 0);
    std::fs::write(&zeros, bytes).unwrap();
    for (what, args) in [
        (
            "attach",
            vec!["attach", remote, "--name", "z", "--from", s(&zeros)],
        ),
        (
            "overwrite",
            vec![
                "pack",
                "--input",
                s(&d[3]),
                "--output",
                remote,
                "--overwrite",
                "--quiet",
            ],
        ),
        ("tag", vec!["tag", remote, "nightly"]),
    ] {
        let before = commit_numbers(&store, &url(remote)).unwrap();
        let a = start_held(&args, &held, &proxy);
        run_with_ok(&["tag", remote, &format!("b-{what}")], &direct);
        proxy.release();
        let out = a.wait_with_output().unwrap();
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        let lost_to = before.last().unwrap() + 1;
        assert!(
            err.contains(&format!("commit {lost_to} "))
                && err.contains("nothing of it was published"),
            "{what}: {err}"
        );
        let latest = latest_commit(&store, &url(remote)).unwrap().unwrap();
        assert_eq!(latest.commit, lost_to, "{what}: B's commit, none of A's");
        assert!(!latest.files.contains_key("z.npy"), "{what}");
        assert!(
            !run_with_ok(&["versions", remote], &direct).contains("nightly"),
            "{what}"
        );
    }
}

/// The write requests (PUT, POST, DELETE) in the proxy's log.
fn writes(proxy: &Proxy) -> usize {
    proxy
        .seen()
        .iter()
        .filter(|s| matches!(s.method.as_str(), "PUT" | "POST" | "DELETE"))
        .count()
}

#[test]
fn a_writer_killed_at_any_step_leaves_the_previous_version() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let d = drops(t.path(), &[&[0, 1, 2], &[3, 4, 5, 6]]);
    let proxy = Proxy::start(moto.port);
    let direct = env_for(moto, moto.port, &t.path().join("cache"));
    let env = env_for(moto, proxy.port, &t.path().join("cache"));
    let (store, remote) = (store(moto), "s3://packs/table/kill");
    run_with_ok(&pack_args(&d[0], remote, false), &direct);
    let before = stats(remote, "latest", &direct);

    // The k-th write of the update hangs; the writer is killed there. Every k up to the
    // commit's own request.
    let mut k = 0;
    loop {
        let mut seen = 0;
        proxy.set(move |m, _| {
            if matches!(m, "PUT" | "POST" | "DELETE") {
                seen += 1;
                if seen == k + 1 {
                    return Fault::Hang;
                }
            }
            Fault::Pass
        });
        let mut child = command_with(&pack_args(&d[1], remote, true), &env)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(60);
        let finished = loop {
            if writes(&proxy) > k {
                break false;
            }
            if let Some(status) = child.try_wait().unwrap() {
                break status.success();
            }
            assert!(std::time::Instant::now() < until, "write {k} never came");
            std::thread::sleep(Duration::from_millis(5));
        };
        if finished {
            break;
        }
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        assert_eq!(
            commit_numbers(&store, &url(remote)).unwrap(),
            [1],
            "killed at write {k}"
        );
        assert_eq!(
            stats(remote, "latest", &direct),
            before,
            "killed at write {k}"
        );
        k += 1;
    }
    assert!(k >= 4, "probes, objects and the record: {k} writes");
    // The last try ran to its end: commit 2, and the pack is whole.
    assert_eq!(commit_numbers(&store, &url(remote)).unwrap(), [1, 2]);
    run_with_ok(&["validate", remote], &direct);
}

#[test]
fn gc_deletes_only_what_no_kept_commit_names() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let d = drops(t.path(), &[&[0, 1], &[2, 3], &[4, 5]]);
    let env = env_for(moto, moto.port, &t.path().join("cache"));
    let (store, remote) = (store(moto), "s3://packs/table/gc");
    run_with_ok(&pack_args(&d[0], remote, false), &env);
    run_with_ok(&pack_args(&d[1], remote, true), &env);
    run_with_ok(&pack_args(&d[2], remote, true), &env);
    run_with_ok(&["tag", remote, "paper"], &env);
    // Beside the pack: someone's notes, and the objects of a writer that died uncommitted.
    let pack = url(remote);
    store
        .put(&pack.join("NOTES.txt").unwrap(), b"mine".to_vec())
        .unwrap();
    let orphan = "_objects/1000000000000-00000000deadbeef/steps-00009.npy";
    store
        .put(&pack.join(orphan).unwrap(), vec![0; 100])
        .unwrap();
    let versions: Vec<serde_json::Value> = (1..=3)
        .map(|v| stats(remote, &v.to_string(), &env))
        .collect();
    let all = keys(&store, remote);

    // Within the window (7 days by default) nothing goes; a dry run deletes nothing.
    run_with_ok(&["gc", remote], &env);
    let dry = run_with_ok(
        &[
            "gc",
            remote,
            "--keep-versions",
            "2",
            "--older-than",
            "0s",
            "--dry-run",
            "--json",
        ],
        &env,
    );
    assert_eq!(keys(&store, remote), all);
    let dry: serde_json::Value = serde_json::from_str(&dry).unwrap();

    let done = run_with_ok(
        &[
            "gc",
            remote,
            "--keep-versions",
            "2",
            "--older-than",
            "0s",
            "--json",
        ],
        &env,
    );
    let done: serde_json::Value = serde_json::from_str(&done).unwrap();
    assert_eq!(done["deleted"], dry["deleted"]);
    assert_eq!(done["kept_commits"], serde_json::json!([3, 4]));
    assert_eq!(done["dropped_commits"], serde_json::json!([1, 2]));
    let left = keys(&store, remote);
    for n in [3, 4] {
        for file in read_commit(&store, &pack, n).unwrap().files.values() {
            assert!(left.contains(&file.key), "commit {n} names {}", file.key);
        }
    }
    assert!(
        !left.contains(orphan) && left.contains("NOTES.txt"),
        "{left:#?}"
    );
    assert!(left.len() < all.len());
    let deleted: BTreeSet<String> = all.difference(&left).cloned().collect();
    let listed: BTreeSet<String> = done["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    assert_eq!(deleted, listed);
    for (i, want) in versions.iter().enumerate() {
        assert_eq!(
            &stats(remote, &(i + 1).to_string(), &env),
            want,
            "version {}",
            i + 1
        );
    }
    run_with_ok(&["validate", remote], &env);

    let out = run_with(&["gc", s(t.path())], &env);
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
}

#[test]
fn a_store_that_ignores_create_only_writes_is_refused_unless_single_writer() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let d = drops(t.path(), &[&[0, 1]]);
    let proxy = Proxy::start(moto.port);
    proxy.set(|m, _| {
        if m == "PUT" {
            Fault::Unconditional
        } else {
            Fault::Pass
        }
    });
    let env = env_for(moto, proxy.port, &t.path().join("cache"));
    let (store, remote) = (store(moto), "s3://packs/table/lax");

    let out = run_with(&pack_args(&d[0], remote, false), &env);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("accepted a second create-only write") && err.contains("--single-writer"),
        "{err}"
    );
    assert!(commit_numbers(&store, &url(remote)).unwrap().is_empty());

    run_with_ok(
        &[&["--single-writer"], &pack_args(&d[0], remote, false)[..]].concat(),
        &env,
    );
    assert_eq!(commit_numbers(&store, &url(remote)).unwrap(), [1]);
}

#[test]
fn tag_attach_and_detach_commit_on_a_url_as_on_a_folder() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let d = drops(t.path(), &[&[0, 1, 2]]);
    let env = env_for(moto, moto.port, &t.path().join("cache"));
    let (store, remote) = (store(moto), "s3://packs/table/change");
    let local = t.path().join("local");
    run_with_ok(&pack_args(&d[0], remote, false), &env);
    common::pack(&d[0], &local, &["--shard-rows", "500"]);
    let pack_id = latest_commit(&store, &url(remote))
        .unwrap()
        .unwrap()
        .pack_id;

    let rows = dataset_packer::Pack::open(&local).unwrap().len() as usize;
    let zeros = t.path().join("zeros.npy");
    let mut bytes = common::npy_header("'<f4'", rows);
    bytes.resize(bytes.len() + rows * 4, 0);
    std::fs::write(&zeros, bytes).unwrap();
    for pack in [remote, s(&local)] {
        run_with_ok(&["tag", pack, "paper"], &env);
        run_with_ok(
            &[
                "attach",
                pack,
                "--name",
                "zero",
                "--from",
                s(&zeros),
                "--quiet",
            ],
            &env,
        );
        run_with_ok(
            &[
                "attach",
                pack,
                "--name",
                "gone",
                "--from",
                s(&zeros),
                "--quiet",
            ],
            &env,
        );
        run_with_ok(&["detach", pack, "--name", "gone"], &env);
    }
    assert_eq!(
        commit_numbers(&store, &url(remote)).unwrap(),
        [1, 2, 3, 4, 5]
    );
    let latest = latest_commit(&store, &url(remote)).unwrap().unwrap();
    assert_eq!(latest.pack_id, pack_id, "the same pack, with its history");
    let got = t.path().join("got");
    download_commit(&store, remote, 5, &got);
    assert_eq!(
        common::session_value(&got, "pack_id"),
        common::session_value(&local, "pack_id").map(|_| pack_id.clone())
    );
    let strip = |v: serde_json::Value| {
        let mut v = v;
        for version in v["versions"].as_array_mut().unwrap() {
            let map = version.as_object_mut().unwrap();
            for key in ["created_utc", "command", "utc", "elapsed"] {
                map.remove(key);
            }
        }
        v.as_object_mut().unwrap().remove("pack_id");
        v
    };
    let versions = |pack: &str| -> serde_json::Value {
        serde_json::from_str(&run_with_ok(&["versions", pack, "--json"], &env)).unwrap()
    };
    assert_eq!(strip(versions(remote)), strip(versions(s(&local))));
    assert_eq!(stats(remote, "paper", &env), stats(s(&local), "paper", &[]));
    let family = |dir: &Path, name: &str| -> Vec<(String, Vec<u8>)> {
        common::files(dir, |n| {
            n.starts_with(&format!("{name}-")) || n == format!("{name}.npy")
        })
    };
    assert!(!family(&local, "zero").is_empty());
    assert_eq!(family(&got, "zero"), family(&local, "zero"));
    assert!(family(&got, "gone").is_empty());
}

#[test]
fn a_pack_in_the_old_layout_reads_and_its_first_write_converts_it() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let d = drops(t.path(), &[&[0, 1, 2], &[3, 4]]);
    let env = env_for(moto, moto.port, &t.path().join("cache"));
    let (store, remote) = (store(moto), "s3://packs/table/plain");
    let local = t.path().join("local");
    common::pack(&d[0], &local, &["--shard-rows", "500"]);
    publish_plain(&store, &local, &url(remote));
    let old: BTreeMap<String, Vec<u8>> = common::pack_bytes(&local).into_iter().collect();
    assert_eq!(
        stats(remote, "latest", &env),
        stats(s(&local), "latest", &[])
    );

    run_with_ok(&pack_args(&d[1], remote, true), &env);
    run_with_ok(&pack_args(&d[1], s(&local), true), &[]);
    let c1 = read_commit(&store, &url(remote), 1).unwrap();
    assert_eq!(c1.parent, None);
    // The old objects are kept, never written again; those unchanged are named as they are.
    for (name, bytes) in &old {
        assert_eq!(
            &store.get(&url(remote).join(name).unwrap()).unwrap(),
            bytes,
            "{name}"
        );
    }
    assert!(
        c1.files.values().any(|f| !f.key.starts_with("_objects/")),
        "{c1:?}"
    );
    assert_eq!(
        stats(remote, "latest", &env),
        stats(s(&local), "latest", &[])
    );
    assert_eq!(stats(remote, "1", &env), stats(s(&local), "1", &[]));
    let got = t.path().join("got");
    download_commit(&store, remote, 1, &got);
    assert_eq!(common::read_rows(&got), common::read_rows(&local));
}

#[test]
fn the_cache_checks_each_entry_it_hands_out_and_survives_its_deletion() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let d = drops(t.path(), &[&[0, 1, 2, 3]]);
    let cache = t.path().join("cache");
    let env = env_for(moto, moto.port, &cache);
    let remote = "s3://packs/table/cache";
    let local = t.path().join("local");
    run_with_ok(&pack_args(&d[0], remote, false), &env);
    common::pack(&d[0], &local, &["--shard-rows", "500"]);
    let want = stats(s(&local), "latest", &[]);
    assert_eq!(stats(remote, "latest", &env), want);

    // A byte flipped in a cached shard: found, named, fetched again.
    let entries = cache.join("entries");
    let shard = std::fs::read_dir(&entries)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("steps-00000.npy"))
        .unwrap();
    let mut bytes = std::fs::read(&shard).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0x40;
    std::fs::write(&shard, &bytes).unwrap();
    let out = run_with(&["stats", remote, "--json"], &env);
    let err = common::stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("the cache file {} is damaged", shard.display())),
        "{err}"
    );
    assert_eq!(figures(serde_json::from_slice(&out.stdout).unwrap()), want);
    assert_ne!(
        std::fs::read(&shard).unwrap(),
        bytes,
        "the entry was replaced"
    );

    // entries/ deleted again and again while commands read: each fetches again.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let deleter = {
        let (stop, entries) = (stop.clone(), entries.clone());
        std::thread::spawn(move || {
            // Often, but not so often that a download on a loaded machine (two cores, the
            // suite's other tests, moto answering) can never finish between two deletions:
            // then no fetch could succeed, by construction.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::remove_dir_all(&entries);
                std::thread::sleep(Duration::from_millis(60));
            }
        })
    };
    for _ in 0..8 {
        assert_eq!(stats(remote, "latest", &env), want);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    deleter.join().unwrap();

    // Many processes on an empty cache, again and again: none waits forever.
    for round in 0..6 {
        let fresh = t.path().join(format!("empty{round}"));
        let env = env_for(moto, moto.port, &fresh);
        let children: Vec<_> = (0..6)
            .map(|i| {
                let out = t.path().join(format!("out-{round}-{i}.jsonl"));
                command_with(
                    &["export", remote, "--format", "jsonl", "--output", s(&out)],
                    &env,
                )
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
            })
            .collect();
        let until = std::time::Instant::now() + Duration::from_secs(120);
        for mut child in children {
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    assert!(status.success(), "round {round}");
                    break;
                }
                if std::time::Instant::now() > until {
                    let _ = child.kill();
                    panic!("round {round}: a reader waited for more than 120 s (deadlock)");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn a_pack_on_a_web_server_finds_its_latest_commit_without_listing() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let d = drops(t.path(), &[&[0, 1], &[2, 3]]);
    let env = env_for(moto, moto.port, &t.path().join("cache"));
    let (store, remote) = (store(moto), "s3://packs/table/web");
    run_with_ok(&pack_args(&d[0], remote, false), &env);
    run_with_ok(&pack_args(&d[1], remote, true), &env);
    for name in ["a", "b", "c", "d"] {
        run_with_ok(&["tag", remote, name], &env);
    }
    // The bucket's objects, served by a plain web server (which cannot list).
    let site = t.path().join("site");
    for key in keys(&store, remote) {
        let path = site.join("pack").join(&key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, store.get(&url(remote).join(&key).unwrap()).unwrap()).unwrap();
    }
    let port = common::moto::free_port();
    let mut server = Command::new(common::python())
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .current_dir(&site)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let web = format!("http://127.0.0.1:{port}/pack");
    let web_env = [(
        "DATASET_PACKER_CACHE".to_string(),
        s(&t.path().join("web-cache")).to_string(),
    )];
    let mut tries = 0;
    let out = loop {
        let out = run_with(&["versions", &web, "--json"], &web_env);
        if out.status.success() || tries > 50 {
            break out;
        }
        tries += 1;
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(out.status.success(), "{}", common::stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tags: Vec<String> = doc["versions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| {
            v["tags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(
        tags,
        ["a", "b", "c", "d"],
        "commit 6, the latest, was found"
    );
    assert_eq!(
        stats(&web, "latest", &web_env),
        stats(remote, "latest", &env)
    );
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn opening_reads_one_page_of_records_however_many_commits_there_are() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let d = drops(t.path(), &[&[0]]);
    let proxy = Proxy::start(moto.port);
    let env = env_for(moto, proxy.port, &t.path().join("cache"));
    let (store, remote) = (store(moto), "s3://packs/table/many");
    run_with_ok(&pack_args(&d[0], remote, false), &env);
    // Commits 2..=1200 (more than a page of 1,000 records), fabricated from commit 1.
    let first = read_commit(&store, &url(remote), 1).unwrap();
    for n in 2..=1200u64 {
        let mut c = first.clone();
        (c.commit, c.parent) = (n, Some(n - 1));
        let text = serde_json::to_vec(&c).unwrap();
        store
            .put(&url(remote).join(&c.record_key()).unwrap(), text)
            .unwrap();
    }
    proxy.set(|_, _| Fault::Pass);
    run_with_ok(&["versions", remote], &env);
    let seen = proxy.seen();
    let lists = seen
        .iter()
        .filter(|s| s.path.contains("list-type=2"))
        .count();
    let latest = latest_commit(&store, &url(remote)).unwrap().unwrap();
    assert_eq!(latest.commit, 1200);
    let record_gets: Vec<&String> = seen
        .iter()
        .filter(|s| {
            s.method == "GET" && s.path.contains("/_versions/") && s.path.ends_with(".json")
        })
        .map(|s| &s.path)
        .collect();
    assert_eq!(lists, 1, "{seen:#?}");
    assert_eq!(record_gets.len(), 1);
    assert!(
        record_gets[0].ends_with(&latest.record_key()),
        "{record_gets:?}"
    );
}

#[test]
fn updates_racing_each_other_all_land() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let d = drops(t.path(), &[&[0], &[1, 2], &[3, 4], &[5, 6], &[7, 8, 9]]);
    let env = env_for(moto, moto.port, &t.path().join("cache"));
    let (store, remote) = (store(moto), "s3://packs/table/racing");
    run_with_ok(&pack_args(&d[0], remote, false), &env);
    // Four updaters at once, each with runs of its own: every one exits 0 with its runs in.
    let children: Vec<_> = d[1..]
        .iter()
        .map(|drop| {
            command_with(&pack_args(drop, remote, true), &env)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", common::stderr(&out));
    }
    assert_eq!(
        commit_numbers(&store, &url(remote)).unwrap(),
        [1, 2, 3, 4, 5]
    );
    let all = t.path().join("all");
    for drop in &d {
        common::copy_tree(drop, &all);
    }
    let local = t.path().join("local");
    common::pack(&all, &local, &[]);
    let (got, want) = (
        stats(remote, "latest", &env),
        stats(s(&local), "latest", &[]),
    );
    assert_eq!((&got["runs"], &got["rows"]), (&want["runs"], &want["rows"]));
    assert_eq!(got["score"], want["score"]);
    run_with_ok(&["validate", remote], &env);
}
