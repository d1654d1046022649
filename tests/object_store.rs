//! The object-store foundation against a real S3-compatible server on localhost: moto's
//! server, started once for this test binary from the test venv (IAM authentication on, so
//! that a wrong credential is refused as S3 refuses it), and the fault proxy of tests/common
//! in front of it. Publishing a pack made from fixtures/raw as a commit (and over it, as the
//! next), fetching its files through the cache, CRC refusal, one download per node, eviction
//! and pins, the three "not there / not allowed" messages, and retries.
//!
//! Skipped, with the reason printed, only where the venv has no moto (outside CI; in CI a
//! missing moto fails, as `.ci/run` installs it through tests/python/requirements.txt).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use dataset_packer::ErrorKind;
use dataset_packer::store::{
    Cache, CommitOptions, Head, Location, Store, Url, commit_numbers, head, latest_commit,
    publish_commit, read_commit, read_small_file,
};

use common::moto::{crc32c, moto, options, options_for, publish_table, shard_records};
use common::proxy::{Fault, Proxy, first_matching};

fn url(text: &str) -> Url {
    match Location::parse(text).unwrap() {
        Location::Remote(u) => u,
        other => panic!("{other:?}"),
    }
}

/// A pack of fixtures/raw in 4 shards (and so 4 shard files of a few tens of KiB).
fn fixture_pack(dir: &Path) -> PathBuf {
    let out = dir.join("pack");
    common::pack(&common::fixture("raw"), &out, &["--shard-rows", "150"]);
    out
}

/// The keys under `prefix` (relative to it), sorted.
fn keys(store: &Store, prefix: &Url) -> Vec<String> {
    store
        .list_all(prefix)
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect()
}

#[test]
fn a_published_pack_comes_back_byte_for_byte_through_the_cache() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let pack = fixture_pack(dir.path());
    let store = Arc::new(Store::new(options(moto, moto.port)).unwrap());
    let remote = url("s3://packs/roundtrip/clean");

    let summary = publish_table(&store, &pack, &remote).unwrap();
    let local: Vec<String> = common::names(&pack);
    assert_eq!(summary.commit, 1);
    assert_eq!(
        summary.uploaded, local,
        "every file of the pack, in name order"
    );
    assert!(summary.unchanged.is_empty() && summary.skipped.is_empty());
    let local_bytes: u64 = local
        .iter()
        .map(|n| std::fs::metadata(pack.join(n)).unwrap().len())
        .sum();
    assert_eq!(summary.bytes, local_bytes);

    // The record lists every file with its size and CRC-32C, each under the writer's folder;
    // nothing else is under the URL.
    let commit = latest_commit(&store, &remote).unwrap().unwrap();
    assert_eq!((commit.commit, commit.parent), (1, None));
    assert_eq!(commit.files.keys().cloned().collect::<Vec<_>>(), local);
    assert_eq!(
        Some(commit.pack_id.clone()),
        common::session_value(&pack, "pack_id")
    );
    let mut expected = vec!["_versions/18446744073709551614.json".to_string()];
    for (name, file) in &commit.files {
        let bytes = std::fs::read(pack.join(name)).unwrap();
        assert_eq!(file.key, format!("_objects/{}/{name}", commit.writer));
        assert_eq!(
            (file.bytes, file.crc32c),
            (bytes.len() as u64, crc32c(&bytes)),
            "{name}"
        );
        expected.push(file.key.clone());
    }
    expected.sort();
    assert_eq!(keys(&store, &remote), expected);
    assert_eq!(
        head(&store, &remote).unwrap(),
        Head::Commit(Box::new(commit.clone()))
    );

    let cache = Cache::open(dir.path().join("cache"), 1 << 30, store.clone()).unwrap();
    let records = shard_records(&pack);
    assert!(records.len() >= 3, "{records:?}");
    let object = |name: &str| commit.file_url(&remote, name).unwrap().unwrap();
    for (name, bytes, crc) in &records {
        assert_eq!(
            (commit.files[name].bytes, commit.files[name].crc32c),
            (*bytes, *crc)
        );
        let entry = cache.fetch(&object(name), *bytes, *crc).unwrap();
        assert!(entry.path().starts_with(dir.path().join("cache")));
        assert_eq!(
            std::fs::read(entry.path()).unwrap(),
            std::fs::read(pack.join(name)).unwrap()
        );
    }
    let db = read_small_file(&store, &remote, &commit, "metadata.db")
        .unwrap()
        .unwrap();
    assert_eq!(db, std::fs::read(pack.join("metadata.db")).unwrap());
    let (name, _, _) = &records[0];
    let range = cache.fetch_range(&object(name), 10, 100).unwrap();
    assert_eq!(range, std::fs::read(pack.join(name)).unwrap()[10..110]);

    // A second fetch is served by the cache: no download.
    let before = store.transfers().downloads;
    let (name, bytes, crc) = &records[1];
    cache.fetch(&object(name), *bytes, *crc).unwrap();
    assert_eq!(store.transfers().downloads, before);
}

#[test]
fn publishing_over_a_pack_commits_after_its_latest_and_deletes_nothing() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let pack = fixture_pack(dir.path());
    let store = Store::new(options(moto, moto.port)).unwrap();
    let remote = url("s3://packs/overwrite/clean");
    publish_table(&store, &pack, &remote).unwrap();
    let first = read_commit(&store, &remote, 1).unwrap();
    // A file of someone else beside the pack.
    store
        .put(&remote.join("NOTES.txt").unwrap(), b"mine".to_vec())
        .unwrap();
    let before: BTreeMap<String, Vec<u8>> = keys(&store, &remote)
        .into_iter()
        .map(|k| {
            let bytes = store.get(&remote.join(&k).unwrap()).unwrap();
            (k, bytes)
        })
        .collect();

    // A writer that did not start from the latest commit (it saw no pack) loses to it: a
    // conflict naming commit 1, and no record of its own.
    let options = CommitOptions {
        command: "test".into(),
        pack_id: String::new(),
        single_writer: false,
    };
    let err = publish_commit(&store, &pack, &remote, None, &options).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(
        err.to_string().starts_with(
            "s3://packs/overwrite/clean changed while this command worked on it: commit 1"
        ),
        "{err}"
    );
    assert_eq!(commit_numbers(&store, &remote).unwrap(), [1]);
    assert_eq!(read_commit(&store, &remote, 1).unwrap(), first);

    // The new pack has one shard: commit 2 names it, and the old pack's objects, the notes
    // and commit 1's record all stay as they were.
    let small = dir.path().join("small");
    common::pack(&common::fixture("raw"), &small, &[]);
    let summary = publish_table(&store, &small, &remote).unwrap();
    assert_eq!(summary.commit, 2);
    let commit = latest_commit(&store, &remote).unwrap().unwrap();
    assert_eq!((commit.commit, commit.parent), (2, Some(1)));
    assert_eq!(
        commit.files.keys().cloned().collect::<Vec<_>>(),
        common::names(&small)
    );
    // What commit 1 holds with the same bytes is named by its key, not uploaded again.
    let same = |name: &str| {
        std::fs::read(pack.join(name)).ok() == Some(std::fs::read(small.join(name)).unwrap())
    };
    for (name, file) in &commit.files {
        if same(name) {
            assert_eq!(file.key, first.files[name].key, "{name}");
            assert!(summary.unchanged.contains(name), "{name}");
        } else {
            assert_eq!(file.key, format!("_objects/{}/{name}", commit.writer));
            assert!(summary.uploaded.contains(name), "{name}");
        }
        let bytes = store.get(&remote.join(&file.key).unwrap()).unwrap();
        assert!(bytes == std::fs::read(small.join(name)).unwrap(), "{name}");
    }
    assert_eq!(
        summary.uploaded.len() + summary.unchanged.len(),
        commit.files.len()
    );
    for (key, bytes) in &before {
        let now = store.get(&remote.join(key).unwrap()).unwrap();
        assert!(now == *bytes, "{key} changed");
    }
    assert_eq!(
        store.get(&remote.join("NOTES.txt").unwrap()).unwrap(),
        b"mine"
    );
    // Commit 1 still reads whole: every shard it names, checked against its record.
    let cache = Cache::open(dir.path().join("cache"), 1 << 30, Arc::new(store)).unwrap();
    for (name, bytes, crc) in shard_records(&pack) {
        let entry = cache
            .fetch(
                &first.file_url(&remote, &name).unwrap().unwrap(),
                bytes,
                crc,
            )
            .unwrap();
        assert!(std::fs::read(entry.path()).unwrap() == std::fs::read(pack.join(&name)).unwrap());
    }
    let store = cache.store();

    // An object named like a file of the new pack, at a prefix that holds no pack, is not
    // replaced: the pack's files go under its writer's folder.
    let fresh = url("s3://packs/overwrite/leftover");
    store
        .put(
            &fresh.join("steps.npy").unwrap(),
            b"half an upload".to_vec(),
        )
        .unwrap();
    assert_eq!(head(store, &fresh).unwrap(), Head::Empty);
    publish_table(store, &small, &fresh).unwrap();
    assert_eq!(
        store.get(&fresh.join("steps.npy").unwrap()).unwrap(),
        b"half an upload"
    );
    let commit = latest_commit(store, &fresh).unwrap().unwrap();
    assert_eq!(commit.commit, 1);
    let shard = store
        .get(&commit.file_url(&fresh, "steps.npy").unwrap().unwrap())
        .unwrap();
    assert!(shard == std::fs::read(small.join("steps.npy")).unwrap());
}

#[test]
fn a_crc_mismatch_is_refused_and_leaves_nothing_in_the_cache() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::new(options(moto, moto.port)).unwrap());
    let file = url("s3://packs/crc/steps.npy");
    let data = vec![7u8; 5000];
    store.put(&file, data.clone()).unwrap();
    let cache = Cache::open(dir.path().join("cache"), 1 << 20, store.clone()).unwrap();
    let good = crc32c(&data);

    let err = cache.fetch(&file, 5000, good ^ 1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err:?}");
    assert!(
        err.to_string().contains("s3://packs/crc/steps.npy"),
        "{err}"
    );
    assert_eq!(cache.size().unwrap(), 0);
    let err = cache.fetch(&file, 4999, good).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "a wrong length too: {err}");
    assert_eq!(cache.size().unwrap(), 0);
    // A download left half-done (a process killed mid-way) is not taken for the file.
    let entries = dir.path().join("cache/entries");
    let entry = cache.fetch(&file, 5000, good).unwrap();
    let name = entry
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    drop(entry);
    std::fs::remove_file(entries.join(&name)).unwrap();
    std::fs::write(entries.join(format!("{name}.part")), &data[..100]).unwrap();
    let before = store.transfers().downloads;
    let entry = cache.fetch(&file, 5000, good).unwrap();
    assert_eq!(std::fs::read(entry.path()).unwrap(), data);
    assert_eq!(store.transfers().downloads, before + 1, "downloaded again");
    assert!(!entries.join(format!("{name}.part")).exists());
}

#[test]
fn processes_sharing_a_cache_download_each_file_once() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let crc = crc32c(&data);
    let setup = Store::new(options(moto, moto.port)).unwrap();
    let file = url("s3://packs/shared/steps-00000.npy");
    setup.put(&file, data.clone()).unwrap();

    // Four "ranks": each its own store (connection pool, counter) and cache handle on one
    // folder, as separate processes would have.
    let ranks = 4;
    let barrier = Arc::new(Barrier::new(ranks));
    let handles: Vec<_> = (0..ranks)
        .map(|_| {
            let (barrier, file, data) = (barrier.clone(), file.clone(), data.clone());
            let cache_dir = dir.path().join("cache");
            let options = options(moto, moto.port);
            std::thread::spawn(move || {
                let store = Arc::new(Store::new(options).unwrap());
                let cache = Cache::open(cache_dir, 64 << 20, store.clone()).unwrap();
                barrier.wait();
                let entry = cache.fetch(&file, data.len() as u64, crc).unwrap();
                assert_eq!(std::fs::read(entry.path()).unwrap(), data);
                store.transfers().downloads
            })
        })
        .collect();
    let downloads: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(downloads, 1, "one download for the node");
}

/// Ranks as separate processes: this test binary run again as `rank_process`, each with its
/// own store and cache handle on one folder, started together through a file they wait for.
#[test]
fn separate_processes_download_a_shared_file_once() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..2_000_000u32).map(|i| (i * 13 % 253) as u8).collect();
    let file = "s3://packs/processes/steps-00000.npy";
    Store::new(options(moto, moto.port))
        .unwrap()
        .put(&url(file), data.clone())
        .unwrap();
    let go = dir.path().join("go");
    let ranks: Vec<_> = (0..3)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "rank_process", "--nocapture", "--test-threads=1"])
                .env("STORE_TEST_RANK", "1")
                .env("STORE_TEST_PORT", moto.port.to_string())
                .env("STORE_TEST_KEY", &moto.key)
                .env("STORE_TEST_SECRET", &moto.secret)
                .env("STORE_TEST_CACHE", dir.path().join("cache"))
                .env("STORE_TEST_GO", &go)
                .env("STORE_TEST_FILE", file)
                .env("STORE_TEST_LEN", data.len().to_string())
                .env("STORE_TEST_CRC", crc32c(&data).to_string())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::fs::write(&go, b"").unwrap();
    let mut downloads = 0;
    for rank in ranks {
        let out = rank.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        let n = text
            .lines()
            .find_map(|l| l.strip_prefix("downloads="))
            .unwrap_or_else(|| panic!("a rank said nothing: {text}"));
        downloads += n.trim().parse::<u64>().unwrap();
    }
    assert_eq!(downloads, 1, "one download for the node");
}

/// One rank of [`separate_processes_download_a_shared_file_once`] (nothing when run on its
/// own): fetches the file, checks it, and prints how many downloads it made.
#[test]
fn rank_process() {
    let Some(_) = std::env::var_os("STORE_TEST_RANK") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap();
    let port = var("STORE_TEST_PORT").parse().unwrap();
    let options = options_for(&var("STORE_TEST_KEY"), &var("STORE_TEST_SECRET"), port);
    let store = Arc::new(Store::new(options).unwrap());
    let cache = Cache::open(var("STORE_TEST_CACHE"), 64 << 20, store.clone()).unwrap();
    while !Path::new(&var("STORE_TEST_GO")).exists() {
        std::thread::sleep(Duration::from_millis(2));
    }
    let len: u64 = var("STORE_TEST_LEN").parse().unwrap();
    let entry = cache
        .fetch(
            &url(&var("STORE_TEST_FILE")),
            len,
            var("STORE_TEST_CRC").parse().unwrap(),
        )
        .unwrap();
    assert_eq!(std::fs::metadata(entry.path()).unwrap().len(), len);
    println!("\ndownloads={}", store.transfers().downloads);
}

#[test]
fn eviction_keeps_the_limit_and_never_removes_a_pinned_entry() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::new(options(moto, moto.port)).unwrap());
    let files: BTreeMap<&str, Vec<u8>> = ["a", "b", "c", "d"]
        .iter()
        .enumerate()
        .map(|(i, n)| (*n, vec![i as u8 + 1; 40_000]))
        .collect();
    for (name, data) in &files {
        store
            .put(&url(&format!("s3://packs/evict/{name}.npy")), data.clone())
            .unwrap();
    }
    // Room for two files, not three. Another file in the folder is never touched.
    let cache_dir = dir.path().join("cache");
    std::fs::create_dir_all(cache_dir.join("entries")).unwrap();
    std::fs::write(cache_dir.join("entries/keep-me.npy"), vec![0u8; 100_000]).unwrap();
    let cache = Cache::open(&cache_dir, 100_000, store.clone()).unwrap();
    let fetch = |name: &str| {
        let data = &files[name];
        cache.fetch(
            &url(&format!("s3://packs/evict/{name}.npy")),
            data.len() as u64,
            crc32c(data),
        )
    };
    let a = fetch("a").unwrap(); // pinned throughout
    drop(fetch("b").unwrap());
    std::thread::sleep(Duration::from_millis(20)); // b is used before c
    drop(fetch("c").unwrap()); // evicts b (a is pinned)
    assert!(a.path().exists());
    assert!(cache.size().unwrap() <= 100_000);
    let d = fetch("d").unwrap(); // evicts c, the only entry not in use
    assert!(a.path().exists() && d.path().exists());
    assert_eq!(std::fs::read(a.path()).unwrap(), files["a"]);
    assert!(cache.size().unwrap() <= 100_000);
    // Both entries pinned: no room, and nothing in use is removed to make it.
    let err = fetch("b").unwrap_err();
    assert_eq!(
        (err.kind(), err.option()),
        (ErrorKind::Refused, Some("cache_limit")),
        "{err}"
    );
    assert!(a.path().exists() && d.path().exists());
    assert!(cache.size().unwrap() <= 100_000);
    drop(a);
    assert_eq!(
        std::fs::read(fetch("b").unwrap().path()).unwrap(),
        files["b"]
    );
    assert!(cache_dir.join("entries/keep-me.npy").exists());
    // A file larger than the whole limit is refused up front.
    let big = vec![1u8; 200_000];
    store
        .put(&url("s3://packs/evict/big.npy"), big.clone())
        .unwrap();
    let err = cache
        .fetch(&url("s3://packs/evict/big.npy"), 200_000, crc32c(&big))
        .unwrap_err();
    assert!(
        err.to_string().contains("larger than the cache's limit"),
        "{err}"
    );
}

#[test]
fn a_missing_key_a_missing_bucket_and_a_wrong_credential_each_say_so() {
    let Some(moto) = moto() else { return };
    let store = Store::new(options(moto, moto.port)).unwrap();
    let key = url("s3://packs/nothing/here/metadata.db");
    let err = store.get(&key).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotAPack);
    // The sentence and the status, never the server's XML after them.
    assert_eq!(
        format!("{err:#}"),
        "s3://packs/nothing/here/metadata.db does not exist (HTTP 404)"
    );
    assert_eq!(store.size(&key).unwrap(), None);

    let bucket = url("s3://no-such-bucket/p/metadata.db");
    let err = store.get(&bucket).unwrap_err();
    assert_eq!(
        format!("{err:#}"),
        "s3://no-such-bucket/p/metadata.db: the bucket \"no-such-bucket\" does not exist (HTTP 404)"
    );
    let err = store.size(&bucket).unwrap_err();
    assert!(
        err.to_string()
            .contains("bucket \"no-such-bucket\" does not exist"),
        "{err}"
    );

    let mut wrong = options(moto, moto.port);
    wrong
        .vars
        .push(("AWS_SECRET_ACCESS_KEY".into(), "not-the-secret".into()));
    let err = Store::new(wrong).unwrap().get(&key).unwrap_err();
    assert!(
        err.to_string()
            .contains("does not accept these credentials"),
        "{err}"
    );
    let mut unknown = options(moto, moto.port);
    unknown
        .vars
        .push(("AWS_ACCESS_KEY_ID".into(), "AKIANOBODY".into()));
    let err = Store::new(unknown).unwrap().get(&key).unwrap_err();
    assert!(
        err.to_string()
            .contains("does not accept these credentials"),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("s3://packs/nothing/here/metadata.db"),
        "{err}"
    );
}

/// Spoils the next `n` requests through `proxy`, whatever they ask: each answered 503, or its
/// connection dropped after the request's head is read.
fn spoil(proxy: &Proxy, n: usize, drop_connection: bool) {
    let fault = if drop_connection {
        Fault::Drop
    } else {
        Fault::Status(503)
    };
    proxy.set(first_matching(n, |_, _| true, fault));
}

/// The requests spoiled since the last [`spoil`].
fn spoiled(proxy: &Proxy) -> usize {
    proxy
        .seen()
        .iter()
        .filter(|s| s.fault != Fault::Pass)
        .count()
}

#[test]
fn failures_are_retried_with_backoff_then_named_by_url() {
    let Some(moto) = moto() else { return };
    let proxy = Proxy::start(moto.port);
    let direct = Store::new(options(moto, moto.port)).unwrap();
    let file = url("s3://packs/faults/steps.npy");
    let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    direct.put(&file, data.clone()).unwrap();

    for drop_connection in [false, true] {
        // A fresh store per case: a new connection pool, so each request meets the proxy.
        let store = Store::new(options(moto, proxy.port)).unwrap();
        spoil(&proxy, 3, drop_connection);
        assert_eq!(store.get(&file).unwrap(), data, "drop: {drop_connection}");
        assert_eq!(spoiled(&proxy), 3, "three failures, then success");
        // Writes are retried too.
        let store = Store::new(options(moto, proxy.port)).unwrap();
        spoil(&proxy, 2, drop_connection);
        store
            .put(&url("s3://packs/faults/up.npy"), data.clone())
            .unwrap();
        assert_eq!(spoiled(&proxy), 2);
        assert_eq!(direct.get(&url("s3://packs/faults/up.npy")).unwrap(), data);
    }

    // A server that keeps failing: the retries run out, and the error names the URL.
    let store = Store::new(options(moto, proxy.port).retries(2)).unwrap();
    spoil(&proxy, 1000, false);
    let err = store.get(&file).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert_eq!(
        err.to_string(),
        "s3://packs/faults/steps.npy: reading failed, retries exhausted"
    );
    assert_eq!(spoiled(&proxy), 3, "the first try and 2 retries");
    assert!(
        format!("{err:?}").contains("503"),
        "the cause is kept: {err:?}"
    );
}
