//! Writing packs to object storage, driven through the binary against a real S3-compatible
//! server on localhost (moto, and the fault proxy in front of it where a test needs one,
//! both from tests/common). Each of `pack`, `merge`, `shuffle` and `export --format pack`
//! publishes the same bytes it writes to a local folder, as one commit: its files under its
//! writer's `_objects/` folder, then the commit's record; an existing pack needs
//! `--overwrite`, which makes a new commit and deletes nothing; a failing upload leaves the
//! old commit the latest, no new record and no staging folder behind; what cannot go to a URL
//! is refused before anything is written.
//!
//! Skipped, with the reason printed, only where the venv has no moto (outside CI; in CI a
//! missing moto fails).

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::s;
use dataset_packer::store::{
    Commit, Location, Store, StoreOptions, Url, commit_numbers, latest_commit,
};

use common::moto::{
    Moto, crc32c, env_for, moto, objects_under, publish_plain, run_with, run_with_ok,
};
use common::proxy::{Fault, Proxy, every_matching};

/// The argument list as `&str`s.
fn argv(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn store(moto: &Moto) -> Store {
    Store::new(StoreOptions::from_vars([
        ("AWS_ACCESS_KEY_ID", moto.key.as_str()),
        ("AWS_SECRET_ACCESS_KEY", moto.secret.as_str()),
        ("AWS_REGION", "us-east-1"),
        (
            "AWS_ENDPOINT_URL",
            &format!("http://127.0.0.1:{}", moto.port),
        ),
        ("AWS_ALLOW_HTTP", "true"),
    ]))
    .unwrap()
}

fn url(text: &str) -> Url {
    match Location::parse(text).unwrap() {
        Location::Remote(u) => u,
        other => panic!("{other:?}"),
    }
}

/// The latest commit of the pack at `prefix`, which must have one.
fn latest(store: &Store, prefix: &str) -> Commit {
    latest_commit(store, &url(prefix))
        .unwrap()
        .unwrap_or_else(|| panic!("{prefix} has no commit"))
}

/// The files of the latest commit of the pack at `prefix`, downloaded into `dir` (created)
/// under their pack names, each checked against the size and CRC-32C its record gives;
/// their names, sorted.
fn download(store: &Store, prefix: &str, dir: &Path) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    let pack = url(prefix);
    let commit = latest(store, prefix);
    for (name, file) in &commit.files {
        let bytes = store.get(&pack.join(&file.key).unwrap()).unwrap();
        assert_eq!(
            (bytes.len() as u64, crc32c(&bytes)),
            (file.bytes, file.crc32c),
            "{prefix}/{}: not what commit {} records for {name}",
            file.key,
            commit.commit
        );
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    commit.files.keys().cloned().collect()
}

/// Every object under `prefix` (keys below it) with its bytes.
fn objects(store: &Store, prefix: &str) -> BTreeMap<String, Vec<u8>> {
    objects_under(store, &url(prefix))
}

/// The commit numbers recorded under `prefix`.
fn commits(store: &Store, prefix: &str) -> Vec<u64> {
    commit_numbers(store, &url(prefix)).unwrap()
}

/// The standard output of `show PACK --run 3 --json` for `pack` (a folder or, with `env`, a
/// URL): what a reader of the pack gets.
fn show(pack: &str, env: &[(String, String)]) -> String {
    run_with_ok(&["show", pack, "--run", "3", "--json"], env)
}

/// What a `metadata.db` holds, table by table, as text rows in rowid order, leaving out what
/// differs between two runs of one command: when (`created_utc`, an update's `utc`,
/// `*_time`, `elapsed`), the command line (which names the output), and the pack's random
/// identity (`pack_id`).
fn db_tables(pack: &Path) -> BTreeMap<String, Vec<Vec<String>>> {
    let db = common::db(pack);
    let tables: Vec<String> = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let volatile = |name: &str| {
        name == "pack_id"
            || name.contains("time")
            || name.contains("created")
            || name.contains("utc")
            || name.contains("command")
            || name.contains("elapsed")
    };
    let mut out = BTreeMap::new();
    for table in tables {
        let mut stmt = db.prepare(&format!("SELECT * FROM \"{table}\"")).unwrap();
        let columns: Vec<String> = stmt.column_names().iter().map(|c| c.to_string()).collect();
        let rows: Vec<Vec<String>> = stmt
            .query_map([], |r| {
                let mut row = Vec::new();
                for (i, c) in columns.iter().enumerate() {
                    let v: rusqlite::types::Value = r.get(i)?;
                    row.push(if volatile(c) {
                        "-".to_string()
                    } else {
                        format!("{c}={v:?}")
                    });
                }
                Ok(row)
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        // A key/value table (session): volatile keys' values left out the same way.
        let rows = rows
            .into_iter()
            .map(|row| {
                let key_is_volatile = row.first().is_some_and(|k| {
                    k.split_once("=Text(\"")
                        .and_then(|(_, k)| k.strip_suffix("\")"))
                        .is_some_and(volatile)
                });
                if key_is_volatile {
                    vec![row[0].clone(), "-".into()]
                } else if row[0].contains("Text(\"updates\")") {
                    // The updates' history: a JSON list whose entries say when and how.
                    let (_, text) = row[1].split_once("=Text(").unwrap();
                    let text: String =
                        serde_json::from_str(text.strip_suffix(')').unwrap()).unwrap();
                    let mut list: Vec<BTreeMap<String, serde_json::Value>> =
                        serde_json::from_str(&text).unwrap();
                    for entry in &mut list {
                        entry.retain(|k, _| !volatile(k));
                    }
                    vec![row[0].clone(), format!("{list:?}")]
                } else {
                    row
                }
            })
            .collect();
        out.insert(table, rows);
    }
    out
}

/// The downloaded pack is the local one: the same files, every data file byte for byte, and
/// metadata.db table by table.
fn assert_same_pack(local: &Path, downloaded: &Path) {
    assert_eq!(common::names(downloaded), common::names(local));
    for (name, bytes) in common::files(local, |n| n != "metadata.db") {
        assert!(
            std::fs::read(downloaded.join(&name)).unwrap() == bytes,
            "{name} differs"
        );
    }
    let (got, want) = (db_tables(downloaded), db_tables(local));
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (table, rows) in &want {
        assert_eq!(&got[table], rows, "table {table} of metadata.db differs");
    }
}

/// The staging folders left in the cache folder (none, once a command has finished).
fn staging_left(cache: &Path) -> Vec<String> {
    let staging = cache.join("staging");
    if staging.exists() {
        common::names(&staging)
    } else {
        Vec::new()
    }
}

/// Two local packs of fixtures/raw: its two halves (`--partition`), in 600-row shards.
fn halves(dir: &Path) -> (PathBuf, PathBuf) {
    let (a, b) = (dir.join("half-0"), dir.join("half-1"));
    let raw = common::fixture("raw");
    common::pack(&raw, &a, &["--shard-rows", "600", "--partition", "0/2"]);
    common::pack(&raw, &b, &["--shard-rows", "600", "--partition", "1/2"]);
    (a, b)
}

#[test]
fn pack_merge_shuffle_and_export_publish_what_they_write_locally() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let env = env_for(moto, moto.port, &cache);
    let store = store(moto);
    let raw = common::fixture("raw");
    let (a, b) = halves(t.path());

    // (name, the command's arguments up to its output, the arguments after it)
    let cases: Vec<(&str, Vec<&str>, Vec<&str>)> = vec![
        (
            "pack",
            vec!["pack", "--input", s(&raw), "--output"],
            vec!["--shard-rows", "600", "--search-stats", "--quiet", "--json"],
        ),
        (
            "merge",
            vec!["merge", s(&a), s(&b), "--output"],
            vec!["--quiet", "--json"],
        ),
        (
            "shuffle",
            vec!["shuffle", s(&a), "--output"],
            vec!["--seed", "7", "--shard-rows", "400", "--quiet", "--json"],
        ),
        (
            "export",
            vec!["export", s(&a), "--format", "pack", "--output"],
            vec!["--runs", "0,2-3", "--shard-rows", "300", "--quiet"],
        ),
    ];
    for (name, before, after) in cases {
        let local = t.path().join(format!("local-{name}"));
        let remote = format!("s3://packs/rw/{name}");
        let with = |output: &str| -> Vec<String> {
            let mut args: Vec<String> = before.iter().map(|a| a.to_string()).collect();
            args.push(output.to_string());
            args.extend(after.iter().map(|a| a.to_string()));
            args
        };
        run_with_ok(&argv(&with(s(&local))), &[]);
        let stdout = run_with_ok(&argv(&with(&remote)), &env);

        let got = t.path().join(format!("downloaded-{name}"));
        download(&store, &remote, &got);
        assert_same_pack(&local, &got);
        assert_eq!(staging_left(&cache), Vec::<String>::new(), "{name}");

        // One commit: its record, and every file of the pack once, under the folder of the
        // writer the record names; nothing else under the URL.
        let commit = latest(&store, &remote);
        assert_eq!((commit.commit, commit.parent), (1, None), "{name}");
        let mut keys: Vec<String> = commit
            .files
            .iter()
            .map(|(file, f)| {
                assert_eq!(
                    f.key,
                    format!("_objects/{}/{file}", commit.writer),
                    "{name}"
                );
                f.key.clone()
            })
            .collect();
        keys.push("_versions/18446744073709551614.json".into());
        keys.sort();
        let listed: Vec<String> = objects(&store, &remote).into_keys().collect();
        assert_eq!(listed, keys, "{name}");

        // The summary names the URL, the commit and what was uploaded: every file.
        let local_bytes: u64 = common::names(&local)
            .iter()
            .map(|n| std::fs::metadata(local.join(n)).unwrap().len())
            .sum();
        if name == "export" {
            let files = common::names(&local).len();
            assert!(
                stdout.contains(&format!(
                    "published to {remote} (commit 1: {files} files, {local_bytes} bytes uploaded)"
                )),
                "{stdout}"
            );
        } else {
            let doc: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
            let published = &doc["published"];
            assert_eq!(published["url"], remote.as_str(), "{name}");
            assert_eq!(published["commit"], 1, "{name}");
            assert_eq!(published["bytes"], local_bytes, "{name}");
            assert_eq!(published["unchanged"], serde_json::json!([]), "{name}");
            let files: Vec<String> = published["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap().to_string())
                .collect();
            assert_eq!(files, common::names(&local), "{name}: in name order");
        }
    }

    // What was published reads back as a pack: the text summary of `pack` names the URL, and
    // the companion family went with the shards.
    let pack_files = common::names(&t.path().join("downloaded-pack"));
    assert!(pack_files.contains(&"search-00003.npy".to_string()));
}

#[test]
fn an_existing_remote_pack_needs_overwrite_which_commits_a_new_version_and_deletes_nothing() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let env = env_for(moto, moto.port, &cache);
    let store = store(moto);
    let raw = common::fixture("raw");
    let remote = "s3://packs/rw/overwrite";
    let pack_to = |output: &str, extra: &[&str]| {
        let mut args = vec!["pack", "--input", s(&raw), "--output", output, "--quiet"];
        args.extend_from_slice(extra);
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>()
    };

    run_with_ok(&argv(&pack_to(remote, &["--shard-rows", "600"])), &env);
    let first = t.path().join("first");
    download(&store, remote, &first);
    let first_commit = latest(&store, remote);

    // Without --overwrite: refused, exit 2, before any work (no staging folder was made).
    let out = run_with(&argv(&pack_to(remote, &[])), &env);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(remote) && err.contains("--overwrite"), "{err}");
    assert_eq!(staging_left(&cache), Vec::<String>::new());
    let again = t.path().join("again");
    download(&store, remote, &again);
    assert_same_pack(&first, &again);
    assert_eq!(commits(&store, remote), [1]);
    store
        .put(&url(remote).join("NOTES.txt").unwrap(), b"ours".to_vec())
        .unwrap();
    let before = objects(&store, remote);

    // With it: a single-shard pack (2,240 rows in one) replaces the 4 shards of 600 as
    // commit 2. Nothing is deleted: commit 1's objects and the foreign object stay as they
    // were, and a reader gets the new pack.
    let stdout = run_with_ok(&argv(&pack_to(remote, &["--overwrite"])), &env);
    let local = t.path().join("local");
    common::pack(&raw, &local, &[]);
    let names = common::names(&local);
    let new_bytes: u64 = names
        .iter()
        .map(|n| std::fs::metadata(local.join(n)).unwrap().len())
        .sum();
    let commit = latest(&store, remote);
    assert_eq!((commit.commit, commit.parent), (2, Some(1)));
    // Files whose bytes commit 1 already holds are not uploaded again.
    let unchanged: Vec<&String> = names
        .iter()
        .filter(|n| {
            std::fs::read(local.join(n.as_str())).ok() == std::fs::read(first.join(n.as_str())).ok()
        })
        .collect();
    let unchanged_bytes: u64 = unchanged
        .iter()
        .map(|n| std::fs::metadata(local.join(n.as_str())).unwrap().len())
        .sum();
    let summary = if unchanged.is_empty() {
        format!(
            "published to {remote} (commit 2: {} files, {} bytes uploaded)",
            names.len(),
            new_bytes
        )
    } else {
        format!(
            "published to {remote} (commit 2: {} files, {} bytes uploaded, {} unchanged)",
            names.len() - unchanged.len(),
            new_bytes - unchanged_bytes,
            unchanged.len()
        )
    };
    assert!(stdout.contains(&summary), "{stdout}");
    assert!(!stdout.contains("deleted"), "{stdout}");
    for (name, file) in &commit.files {
        if unchanged.contains(&name) {
            assert_eq!(file.key, first_commit.files[name].key, "{name}");
        } else {
            assert_eq!(file.key, format!("_objects/{}/{name}", commit.writer));
        }
    }
    let after = objects(&store, remote);
    for (key, bytes) in &before {
        assert!(
            after.get(key) == Some(bytes),
            "{key} was deleted or changed"
        );
    }
    assert_eq!(after["NOTES.txt"], b"ours");
    let got = t.path().join("after");
    assert_eq!(download(&store, remote, &got), names);
    assert_same_pack(&local, &got);
    assert_eq!(
        show(remote, &env),
        show(s(&local), &[]).replace(s(&local), remote)
    );
    // Commit 1 is still whole: its record and every object it names, as they were.
    let old = t.path().join("old");
    std::fs::create_dir(&old).unwrap();
    for (name, file) in &first_commit.files {
        let bytes = &after[&file.key];
        std::fs::write(old.join(name), bytes).unwrap();
    }
    assert_same_pack(&first, &old);
    assert_eq!(staging_left(&cache), Vec::<String>::new());
}

/// The PUTs `proxy` has seen since its rule was last set: (request path, let through).
fn puts(proxy: &Proxy) -> Vec<(String, bool)> {
    proxy
        .seen()
        .into_iter()
        .filter(|s| s.method == "PUT")
        .map(|s| (s.path, s.fault == Fault::Pass))
        .collect()
}

/// Every upload of a pack file through `proxy` (a PUT under `_objects/`) meets `fault` from
/// now on; other requests pass (the check that the store honours create-only writes among
/// them, so that the publish gets as far as its files).
fn uploads_meet(proxy: &Proxy, fault: Fault) {
    proxy.set(every_matching(
        |method, path| method == "PUT" && path.contains("/_objects/"),
        fault,
    ));
}

/// Asserts that the only deletes through `proxy` are those of the probes the check that the
/// store honours create-only writes makes under `_probes/` (one each): a delete may be a
/// bulk request, which names its keys in its body, so they are counted.
fn assert_deleted_only_probes(proxy: &Proxy) {
    let seen = proxy.seen();
    let deletes: Vec<&str> = seen
        .iter()
        .filter(|s| s.method == "DELETE" || s.path.contains("?delete"))
        .map(|s| s.path.as_str())
        .collect();
    let probes: std::collections::BTreeSet<&str> = seen
        .iter()
        .filter(|s| s.method == "PUT" && s.path.contains("/_probes/"))
        .map(|s| s.path.as_str())
        .collect();
    assert_eq!(
        deletes.len(),
        probes.len(),
        "{deletes:?}, probes {probes:?}"
    );
    assert!(
        deletes
            .iter()
            .all(|d| d.contains("?delete") || d.contains("/_probes/")),
        "{deletes:?}"
    );
}

/// A pack of the raw fixture published to `remote` through a fault proxy, and a copy of it
/// as published (`before`): where the tests of a failing re-publish start.
struct Published {
    t: tempfile::TempDir,
    cache: PathBuf,
    store: Store,
    proxy: Proxy,
    env: Vec<(String, String)>,
    raw: PathBuf,
    remote: &'static str,
    before: PathBuf,
    /// Every object under `remote` after the first publish, with its bytes.
    objects: BTreeMap<String, Vec<u8>>,
}

impl Published {
    fn new(moto: &Moto, remote: &'static str) -> Published {
        let t = tempfile::tempdir().unwrap();
        let cache = t.path().join("cache");
        let store = store(moto);
        let proxy = Proxy::start(moto.port);
        let env = env_for(moto, proxy.port, &cache);
        let raw = common::fixture("raw");
        run_with_ok(
            &["pack", "--input", s(&raw), "--output", remote, "--quiet"],
            &env,
        );
        let before = t.path().join("before");
        download(&store, remote, &before);
        let objects = objects(&store, remote);
        Published {
            t,
            cache,
            store,
            proxy,
            env,
            raw,
            remote,
            before,
            objects,
        }
    }

    /// The pack at `remote` is still the one first published: commit 1 is the latest and
    /// only record, every object there before is there with the same bytes (nothing deleted
    /// or rewritten), a reader gets the first pack, and nothing is left staged.
    fn assert_kept(&self) {
        assert_eq!(staging_left(&self.cache), Vec::<String>::new());
        assert_eq!(commits(&self.store, self.remote), [1]);
        let now = objects(&self.store, self.remote);
        for (key, bytes) in &self.objects {
            assert!(now.get(key) == Some(bytes), "{key} was deleted or changed");
        }
        // Whatever else is there is an object of the failed publish, which no record names.
        for key in now.keys().filter(|k| !self.objects.contains_key(*k)) {
            assert!(key.starts_with("_objects/"), "{key}");
        }
        let after = self.t.path().join("after");
        download(&self.store, self.remote, &after);
        assert_same_pack(&self.before, &after);
        assert_eq!(
            std::fs::read(after.join("metadata.db")).unwrap(),
            std::fs::read(self.before.join("metadata.db")).unwrap()
        );
        assert_eq!(
            show(self.remote, &self.env),
            show(s(&self.before), &[]).replace(s(&self.before), self.remote)
        );
    }
}

#[test]
fn a_failing_upload_leaves_the_old_pack_and_nothing_staged() {
    let Some(moto) = moto() else { return };
    let p = Published::new(moto, "s3://packs/rw/faults");
    let (proxy, env, raw, remote) = (&p.proxy, &p.env, &p.raw, p.remote);
    // The server saw the commit's record last, after every file it names.
    let published = puts(proxy);
    let record = "/packs/rw/faults/_versions/18446744073709551614.json";
    assert_eq!(
        published.last().map(|p| p.0.as_str()),
        Some(record),
        "{published:?}"
    );
    let files: Vec<&str> = published
        .iter()
        .filter_map(|p| p.0.strip_prefix("/packs/rw/faults/_objects/"))
        .filter_map(|key| key.split_once('/').map(|(_, name)| name))
        .collect();
    assert_eq!(
        files,
        ["metadata.db", "steps.npy", "valuation_types.json"],
        "{published:?}"
    );

    uploads_meet(proxy, Fault::Status(503));
    let out = run_with(
        &[
            "pack",
            "--input",
            s(raw),
            "--output",
            remote,
            "--shard-rows",
            "600",
            "--overwrite",
            "--quiet",
        ],
        env,
    );
    let sent = puts(proxy);
    let refused: Vec<&str> = sent.iter().filter(|p| !p.1).map(|p| p.0.as_str()).collect();
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("publishing to {remote} stopped before the commit")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{remote}/_objects/"))
            && err.contains("/metadata.db: writing failed"),
        "{err}"
    );
    // The first file (in name order) was retried, and nothing after it was tried.
    assert!(
        refused.len() > 1 && refused.iter().all(|r| r.ends_with("/metadata.db")),
        "{sent:?}"
    );
    assert!(
        refused.iter().all(|r| *r == refused[0]),
        "one object, under one writer's folder: {sent:?}"
    );
    assert!(
        sent.iter().all(|p| !p.0.contains("/_versions/")),
        "no record was sent: {sent:?}"
    );
    assert_deleted_only_probes(proxy);
    // The old commit is the latest and reads as it did, nothing of it deleted, and nothing
    // is left in the staging folder.
    p.assert_kept();
}

#[test]
fn what_cannot_go_to_object_storage_is_refused_before_anything_is_written() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let env = env_for(moto, moto.port, &cache);
    let store = store(moto);
    let raw = common::fixture("raw");
    let (a, b) = halves(t.path());
    let prefix = "s3://packs/rw/refused";
    let cases: [(&[&str], &str); 5] = [
        (
            &["merge", s(&a), s(&b), "--output", prefix, "--delete-inputs"],
            "--delete-inputs",
        ),
        (
            &["shuffle", s(&a), "--output", prefix, "--resume"],
            "--resume",
        ),
        (
            &[
                "export",
                s(&a),
                "--output",
                "s3://packs/rw/refused/runs.jsonl.gz",
            ],
            "--format",
        ),
        (
            &["export", s(&a), "--format", "parquet", "--output", prefix],
            "--format",
        ),
        (
            &[
                "pack",
                "--input",
                s(&raw),
                "--output",
                "https://example.com/packs/d6",
            ],
            "read-only",
        ),
    ];
    for (args, says) in cases {
        let out = run_with(args, &env);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(err.contains("://"), "names the URL: {err}");
        assert!(store.list_all(&url(prefix)).unwrap().is_empty(), "{args:?}");
        assert_eq!(staging_left(&cache), Vec::<String>::new(), "{args:?}");
        assert!(!t.path().join("s3:").exists() && !Path::new("s3:").exists());
    }
    // An unknown scheme or a URL written wrong is an error, never a folder.
    for output in ["ftp://host/packs/d6", "s3:packs/d6"] {
        let out = run_with(
            &["pack", "--input", s(&raw), "--output", output, "--quiet"],
            &env,
        );
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{output}: {err}");
        assert!(err.contains(output), "{err}");
        assert!(!Path::new("ftp:").exists() && !Path::new("s3:packs").exists());
    }
    // The inputs merge refused to delete are all there.
    assert!(a.join("metadata.db").exists() && b.join("metadata.db").exists());
}

/// An update of a remote pack, in the layout before commits (a pack an older tool left there:
/// `publish_plain`) or with commits (`pack` to the URL).
#[test]
fn an_update_of_a_remote_pack_publishes_what_a_local_update_writes_with_its_history() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let env = env_for(moto, moto.port, &cache);
    let store = store(moto);
    let raw = common::fixture("raw");
    // The first drop: the depth-6 half of fixtures/raw; the second: all of it.
    let first = t.path().join("raw-first");
    common::copy_tree(&raw.join("d6_10g_v1"), &first.join("d6_10g_v1"));
    let pack = |input: &Path, output: &str, update: bool| {
        let mut args = vec!["pack", "--input", s(input), "--output", output, "--quiet"];
        args.extend(if update {
            ["--update", "--json"]
        } else {
            ["--shard-rows", "600"]
        });
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>()
    };
    for plain in [false, true] {
        let remote = if plain {
            "s3://packs/rw/update-plain"
        } else {
            "s3://packs/rw/update"
        };
        let local = t.path().join(format!("local-{plain}"));
        run_with_ok(&argv(&pack(&first, s(&local), false)), &[]);
        if plain {
            publish_plain(&store, &local, &url(remote));
        } else {
            run_with_ok(&argv(&pack(&first, remote, false)), &env);
        }
        let base = latest_commit(&store, &url(remote)).unwrap();
        assert_eq!(base.is_none(), plain);
        let old_objects = objects(&store, remote);
        let version_1 = t.path().join(format!("version-1-{plain}"));
        common::copy_tree(&local, &version_1);
        run_with_ok(&argv(&pack(&raw, s(&local), true)), &[]);
        let stdout = run_with_ok(&argv(&pack(&raw, remote, true)), &env);

        let doc: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(
            (doc["new_runs"].as_u64(), doc["total_runs"].as_u64()),
            (Some(5), Some(10))
        );
        // The full shards of the first version are there already: only the rewritten last
        // shard, the new one and the small files that changed go up (in name order), and
        // the new commit names the objects the full shards already are.
        let names = common::names(&local);
        let (kept, sent): (Vec<String>, Vec<String>) = names.iter().cloned().partition(|n| {
            std::fs::read(version_1.join(n)).ok() == Some(std::fs::read(local.join(n)).unwrap())
        });
        assert!(sent.contains(&"metadata.db".to_string()), "{sent:?}");
        for shard in ["steps-00002.npy", "steps-00003.npy"] {
            assert!(sent.contains(&shard.to_string()), "{sent:?}");
        }
        for shard in ["steps-00000.npy", "steps-00001.npy"] {
            assert!(kept.contains(&shard.to_string()), "{kept:?}");
        }
        let published = &doc["published"];
        assert_eq!(published["url"], remote);
        assert_eq!(published["commit"], if plain { 1 } else { 2 });
        assert_eq!(
            published["files"],
            serde_json::json!(sent),
            "plain: {plain}"
        );
        assert_eq!(
            published["unchanged"],
            serde_json::json!(kept),
            "plain: {plain}"
        );
        let commit = latest(&store, remote);
        assert_eq!(commit.commit, if plain { 1 } else { 2 });
        assert_eq!(commit.parent, if plain { None } else { Some(1) });
        for name in &kept {
            // A pack in the old layout keeps its objects under their own names.
            let was = match &base {
                Some(base) => base.files[name].key.clone(),
                None => name.clone(),
            };
            assert_eq!(commit.files[name].key, was, "{name}");
        }
        for name in &sent {
            assert_eq!(
                commit.files[name].key,
                format!("_objects/{}/{name}", commit.writer)
            );
        }
        // Nothing of the first version was deleted or rewritten.
        let now = objects(&store, remote);
        for (key, bytes) in &old_objects {
            assert!(now.get(key) == Some(bytes), "{key} was deleted or changed");
        }
        let got = t.path().join(format!("got-{plain}"));
        download(&store, remote, &got);
        assert_same_pack(&local, &got);
        let versions: i64 = common::db(&got)
            .query_row("SELECT COUNT(*) FROM versions", [], |r| r.get(0))
            .unwrap();
        assert_eq!(versions, 2, "the first version is still there");
        assert_eq!(
            show(remote, &env),
            show(s(&local), &[]).replace(s(&local), remote)
        );
        assert_eq!(staging_left(&cache), Vec::<String>::new());

        // Nothing new: nothing is uploaded, no commit is made, and the pack there is
        // unchanged.
        let before = objects(&store, remote);
        let stdout = run_with_ok(
            &[
                "pack",
                "--input",
                s(&raw),
                "--output",
                remote,
                "--update",
                "--quiet",
            ],
            &env,
        );
        assert!(
            stdout.contains(&format!("nothing new to publish: {remote} is unchanged")),
            "{stdout}"
        );
        assert!(objects(&store, remote) == before);
        let again = t.path().join(format!("again-{plain}"));
        download(&store, remote, &again);
        assert_eq!(
            std::fs::read(again.join("metadata.db")).unwrap(),
            std::fs::read(got.join("metadata.db")).unwrap()
        );
    }
}

#[test]
fn ctrl_c_during_the_upload_leaves_the_old_pack_and_nothing_staged() {
    let Some(moto) = moto() else { return };
    let p = Published::new(moto, "s3://packs/rw/interrupted");
    let (proxy, env, raw, remote, cache) = (&p.proxy, &p.env, &p.raw, p.remote, &p.cache);

    // The uploads hang; Ctrl-C once the first one is under way.
    uploads_meet(proxy, Fault::Hang);
    let mut child = Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
        .args(["pack", "--input", s(raw), "--output", remote])
        .args(["--shard-rows", "600", "--overwrite", "--quiet"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !puts(proxy).iter().any(|p| p.0.contains("/_objects/")) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no upload started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !staging_left(cache).is_empty(),
        "the pack is staged while it uploads"
    );
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("nothing was published; the previous pack is intact"),
        "{err}"
    );
    p.assert_kept();
    let sent: Vec<String> = puts(proxy).into_iter().map(|p| p.0).collect();
    assert!(
        sent.iter().all(|p| !p.contains("/_versions/")),
        "the interrupted publish never sent its record: {sent:?}"
    );
    assert_deleted_only_probes(proxy);
}
