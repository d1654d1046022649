//! Faults of object storage, proven against a real S3 server (moto on localhost) and an
//! HTTP-aware fault proxy in front of it: a download killed by SIGKILL mid-way (a real
//! process, the test binary run again), a server too slow to answer, 500 and 503 answers,
//! a connection cut mid-body, and publishes that fail mid-upload or are refused, which must
//! delete nothing and commit nothing. The server and the proxy are in tests/common (`moto`,
//! `proxy`).
//!
//! Skipped, with the reason printed, only where the venv has no moto; under CI a missing moto
//! fails instead, as in tests/object_store.rs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Read;
use std::os::unix::io::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use dataset_packer::ErrorKind;
use dataset_packer::store::{
    Cache, CommitOptions, GcOptions, Head, Location, Store, StoreOptions, Url, commit_numbers, gc,
    head, latest_commit, publish_commit,
};

use common::moto::{Moto, crc32c, moto, objects_under, publish_table};
use common::proxy::{Fault, Proxy, Seen, always, first};

/// Store options for the server (or the proxy) at `port` with the tester's key: fast
/// retries, so that the fault tests take milliseconds.
fn options(moto: &Moto, port: u16) -> StoreOptions {
    options_for(&moto.key, &moto.secret, port)
}

fn options_for(key: &str, secret: &str, port: u16) -> StoreOptions {
    common::moto::options_for(key, secret, port).request_timeout(Duration::from_secs(30))
}

fn url(text: &str) -> Url {
    match Location::parse(text).unwrap() {
        Location::Remote(u) => u,
        other => panic!("{other:?}"),
    }
}

/// The request path of `url`'s object as the S3 client sends it (path-style, as with an
/// endpoint URL).
fn request_path(url: &Url) -> String {
    format!("/{}/{}", url.bucket(), url.prefix())
}

/// `len` bytes of [`pattern`] `seed` put at `text` straight to the server (not through a
/// proxy): the object, its bytes and the path its requests ask for.
fn put_pattern(moto: &Moto, text: &str, len: usize, seed: u32) -> (Url, Vec<u8>, String) {
    let file = url(text);
    let data = pattern(len, seed);
    Store::new(options(moto, moto.port))
        .unwrap()
        .put(&file, data.clone())
        .unwrap();
    let path = request_path(&file);
    (file, data, path)
}

/// `len` bytes with no run of zeros, different for each `seed`: a reserved but unwritten
/// stretch of a `.part` (zeros) never looks like data.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8 + 1)
        .collect()
}

/// Runs `f` on a thread and waits for it; panics naming `what` if it has not finished
/// within `limit` (a guard against a hang, never a timing assertion: `limit` is generous).
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} did not finish (blocked?)"))
}

// ---------------------------------------------------------------------------------------
// kill -9 mid-download
// ---------------------------------------------------------------------------------------

/// How much of the file the proxy lets through before it stalls the download.
const STALL: u64 = 3 << 20;

/// A process (this test binary run again as `fetch_process`) fetching `file` (`data` at
/// that URL) into the cache `cache_dir` through `proxy`, which stalls it after [`STALL`]
/// bytes; returned once its `.part` holds the file's first MiB, so mid-download, with the
/// path of that `.part`.
fn stalled_download(
    moto: &Moto,
    proxy: &Proxy,
    cache_dir: &Path,
    file: &str,
    data: &[u8],
) -> (Child, PathBuf) {
    proxy.set(always("GET", request_path(&url(file)), Fault::Stall(STALL)));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "fetch_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FAULTS_TEST_FETCH", "1")
        .env("FAULTS_TEST_PORT", proxy.port.to_string())
        .env("FAULTS_TEST_KEY", &moto.key)
        .env("FAULTS_TEST_SECRET", &moto.secret)
        .env("FAULTS_TEST_CACHE", cache_dir)
        .env("FAULTS_TEST_FILE", file)
        .env("FAULTS_TEST_LEN", data.len().to_string())
        .env("FAULTS_TEST_CRC", crc32c(data).to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let entries = cache_dir.join("entries");
    let head = &data[..1 << 20];
    // A failure guard only: the download reaches the stall in well under a second.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(part) = part_file(&entries)
            && starts_with(&part, head)
        {
            return (child, part);
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the fetching process ended ({status}) before it was killed");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "no .part with the file's first MiB in {}",
                entries.display()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One fetch of a file by a process the test kills (nothing when run on its own).
#[test]
fn fetch_process() {
    let Some(_) = std::env::var_os("FAULTS_TEST_FETCH") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap();
    let port = var("FAULTS_TEST_PORT").parse().unwrap();
    let options = options_for(&var("FAULTS_TEST_KEY"), &var("FAULTS_TEST_SECRET"), port);
    let store = Arc::new(Store::new(options).unwrap());
    let cache = Cache::open(var("FAULTS_TEST_CACHE"), 1 << 30, store).unwrap();
    let fetched = cache.fetch(
        &url(&var("FAULTS_TEST_FILE")),
        var("FAULTS_TEST_LEN").parse().unwrap(),
        var("FAULTS_TEST_CRC").parse().unwrap(),
    );
    // Reached only if the test did not kill this process.
    println!("fetched: {:?}", fetched.map(|e| e.path().to_path_buf()));
}

fn kill9(child: &mut Child) {
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
}

/// The one `.part` in the cache's `entries/`, if there is one.
fn part_file(entries: &Path) -> Option<PathBuf> {
    let mut parts: Vec<PathBuf> = std::fs::read_dir(entries)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "part"))
        .collect();
    assert!(parts.len() <= 1, "{parts:?}");
    parts.pop()
}

fn starts_with(path: &Path, head: &[u8]) -> bool {
    let mut got = vec![0u8; head.len()];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut got))
        .is_ok()
        && got == head
}

/// The entry name of a `.part` (`entries/NAME.part`): its entry and lock file paths.
fn entry_paths(part: &Path) -> (PathBuf, PathBuf) {
    let name = part.file_stem().unwrap().to_string_lossy().into_owned();
    let entries = part.parent().unwrap();
    (entries.join(&name), entries.join(format!("{name}.lock")))
}

/// Whether no process holds a lock on the file at `path` (tried without waiting).
fn lock_is_free(path: &Path) -> bool {
    let file = File::open(path).unwrap();
    // SAFETY: flock on a descriptor `file` owns; the lock goes when `file` is closed.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

fn entry_names(entries: &Path) -> Vec<String> {
    common::names(entries)
}

#[test]
fn a_download_killed_by_sigkill_leaves_nothing_trusted_and_no_lock() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(moto.port);
    let file = "s3://packs/killed/steps-00000.npy";
    let data = pattern(8 << 20, 1);
    let direct = Store::new(options(moto, moto.port)).unwrap();
    direct.put(&url(file), data.clone()).unwrap();
    let cache_dir = dir.path().join("cache");

    let (mut child, part) = stalled_download(moto, &proxy, &cache_dir, file, &data);
    let (entry, lock) = entry_paths(&part);
    // Mid-download: the .part has the file's full length reserved (a size check alone would
    // take it for the file), there is no entry, and the downloader holds the entry's lock.
    assert_eq!(std::fs::metadata(&part).unwrap().len(), data.len() as u64);
    assert!(!entry.exists());
    assert!(
        !lock_is_free(&lock),
        "the downloader holds the entry's lock"
    );
    assert_eq!(proxy.seen()[0].fault, Fault::Stall(STALL));

    kill9(&mut child);
    // What the dead process left: its .part and no entry; its lock died with it.
    assert!(part.exists());
    assert!(!entry.exists());
    assert!(lock_is_free(&lock), "flock goes with the process");
    assert!(
        std::fs::read(&part).unwrap() != data,
        "the .part is incomplete (reserved, partly written)"
    );

    // A new reader is not blocked, ignores the .part, downloads the whole file again and
    // checks it.
    let store = Arc::new(Store::new(options(moto, moto.port)).unwrap());
    let cache = Cache::open(&cache_dir, 1 << 30, store.clone()).unwrap();
    let (u, len, crc) = (url(file), data.len() as u64, crc32c(&data));
    let (path, bytes) = within(
        Duration::from_secs(120),
        "a fetch after the kill",
        move || {
            let entry = cache.fetch(&u, len, crc).unwrap();
            (
                entry.path().to_path_buf(),
                std::fs::read(entry.path()).unwrap(),
            )
        },
    );
    assert_eq!(path, entry);
    assert!(bytes == data, "the file, not the dead download's .part");
    let moved = store.transfers();
    assert_eq!(
        (moved.downloads, moved.bytes_downloaded),
        (1, len),
        "downloaded whole, once"
    );
    assert!(!part.exists());
    let name = entry.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(
        entry_names(entry.parent().unwrap()),
        [name.clone(), format!("{name}.lock")]
    );
}

#[test]
fn a_dead_downloads_part_is_checked_never_trusted_and_evicted_by_the_limit_rules() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(moto.port);
    let direct = Arc::new(Store::new(options(moto, moto.port)).unwrap());
    let big = "s3://packs/dead/steps-00000.npy";
    let data = pattern(8 << 20, 2);
    direct.put(&url(big), data.clone()).unwrap();
    let small: Vec<(Url, Vec<u8>)> = [3, 4]
        .into_iter()
        .map(|seed| {
            let u = url(&format!("s3://packs/dead/small-{seed}.npy"));
            let bytes = pattern(1 << 20, seed);
            direct.put(&u, bytes.clone()).unwrap();
            (u, bytes)
        })
        .collect();
    let fetch = |cache: &Cache, (u, bytes): &(Url, Vec<u8>)| {
        cache.fetch(u, bytes.len() as u64, crc32c(bytes))
    };

    // A reader whose record says other bytes: that is another entry (the CRC is in its
    // name), so the dead .part is not taken for it; its own download is checked, refused as
    // Corrupt naming the URL, and nothing of it is kept.
    let cache_dir = dir.path().join("checked");
    let (mut child, part) = stalled_download(moto, &proxy, &cache_dir, big, &data);
    kill9(&mut child);
    let cache = Cache::open(&cache_dir, 1 << 30, direct.clone()).unwrap();
    let err = cache
        .fetch(&url(big), data.len() as u64, crc32c(&data) ^ 1)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err:?}");
    assert!(err.to_string().starts_with(big), "{err}");
    let entries = cache_dir.join("entries");
    assert_eq!(
        part_file(&entries),
        Some(part.clone()),
        "only the dead .part"
    );
    assert!(!entry_paths(&part).0.exists());
    assert_eq!(
        cache.size().unwrap(),
        data.len() as u64,
        "nothing but the dead .part"
    );

    // Eviction and a .part being downloaded: while its downloader lives, the .part counts
    // toward the limit and cannot be taken, so a fetch that needs its room is refused.
    let cache_dir = dir.path().join("evict");
    let (mut child, part) = stalled_download(moto, &proxy, &cache_dir, big, &data);
    let (_, part_lock) = entry_paths(&part);
    let big_len = data.len() as u64;
    let tight = Cache::open(&cache_dir, big_len + (1 << 19), direct.clone()).unwrap();
    assert_eq!(
        tight.size().unwrap(),
        big_len,
        "the .part is reserved at full length"
    );
    let err = fetch(&tight, &small[0]).unwrap_err();
    assert_eq!(
        (err.kind(), err.option()),
        (ErrorKind::Refused, Some("cache_limit")),
        "{err}"
    );
    assert!(part.exists(), "a live download is never evicted");

    kill9(&mut child);
    // Dead, it is an entry like any other: left alone while everything fits...
    let roomy = Cache::open(&cache_dir, big_len + (2 << 20), direct.clone()).unwrap();
    // The dead download is older than what is fetched next (by milliseconds; an hour here,
    // so that coarse file times cannot make them equal).
    File::options()
        .write(true)
        .open(&part_lock)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    let kept = fetch(&roomy, &small[0]).unwrap();
    assert!(part.exists(), "no eviction while the limit holds");
    drop(kept);
    // ...and, once room is needed, evicted first (least recently used), and no more than
    // needed: the small entry fetched after it stays.
    let limit = 2 * (1 << 20) + (1 << 19);
    let cache = Cache::open(&cache_dir, limit, direct.clone()).unwrap();
    let entry = fetch(&cache, &small[1]).unwrap();
    assert_eq!(std::fs::read(entry.path()).unwrap(), small[1].1);
    assert!(
        !part.exists() && !part_lock.exists(),
        "the dead .part is evicted"
    );
    assert!(cache.size().unwrap() <= limit);
    let before = direct.transfers().downloads;
    let again = fetch(&cache, &small[0]).unwrap();
    assert_eq!(std::fs::read(again.path()).unwrap(), small[0].1);
    assert_eq!(
        direct.transfers().downloads,
        before,
        "the newer entry was kept"
    );
}

// ---------------------------------------------------------------------------------------
// Slow, failing and cut answers
// ---------------------------------------------------------------------------------------

#[test]
fn a_server_too_slow_to_answer_is_retried_then_named_by_url() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(moto.port);
    let (file, data, path) = put_pattern(moto, "s3://packs/slow/steps-00000.npy", 100_000, 5);
    let slow = |retries| {
        let options = options(moto, proxy.port)
            .retries(retries)
            .request_timeout(Duration::from_secs(1));
        Arc::new(Store::new(options).unwrap())
    };
    let (len, crc) = (data.len() as u64, crc32c(&data));

    // Twice too slow, then answering: the fetch gets the file.
    proxy.set(first(2, "GET", path.clone(), Fault::Hang));
    let cache = Cache::open(dir.path().join("a"), 1 << 20, slow(4)).unwrap();
    let entry = cache.fetch(&file, len, crc).unwrap();
    assert_eq!(std::fs::read(entry.path()).unwrap(), data);
    let tries: Vec<Fault> = proxy
        .seen_at("GET", &path)
        .iter()
        .map(|s| s.fault)
        .collect();
    assert_eq!(tries[..2], [Fault::Hang, Fault::Hang], "{tries:?}");
    assert_eq!(tries.last(), Some(&Fault::Pass));

    // Always too slow: the first try and 2 retries, each given up after the request
    // timeout, then an error naming the URL; nothing in the cache.
    proxy.set(always("GET", path.clone(), Fault::Hang));
    let cache = Cache::open(dir.path().join("b"), 1 << 20, slow(2)).unwrap();
    let err = cache.fetch(&file, len, crc).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert_eq!(
        err.to_string(),
        "s3://packs/slow/steps-00000.npy: reading failed, retries exhausted"
    );
    let cause = format!("{err:?}").to_ascii_lowercase();
    assert!(
        cause.contains("timed out") || cause.contains("timeout"),
        "{cause}"
    );
    assert_eq!(proxy.seen_at("GET", &path).len(), 3);
    assert_eq!(cache.size().unwrap(), 0);
    assert!(part_file(&dir.path().join("b/entries")).is_none());
}

#[test]
fn a_slow_download_that_keeps_moving_is_not_cut_by_the_request_timeout() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(moto.port);
    let (file, data, path) = put_pattern(moto, "s3://packs/trickle/steps-00000.npy", 1 << 20, 8);
    // 32 pieces 100 ms apart: the whole body takes over 3 s, more than the 2 s a request
    // may wait for the server, but bytes keep coming far within it.
    proxy.set(always(
        "GET",
        path.clone(),
        Fault::Trickle(32 << 10, Duration::from_millis(100)),
    ));
    let options = options(moto, proxy.port)
        .retries(1)
        .request_timeout(Duration::from_secs(2));
    let store = Arc::new(Store::new(options).unwrap());
    let cache = Cache::open(dir.path().join("cache"), 16 << 20, store.clone()).unwrap();
    let entry = cache
        .fetch(&file, data.len() as u64, crc32c(&data))
        .unwrap();
    assert!(std::fs::read(entry.path()).unwrap() == data);
    assert_eq!(
        proxy.seen_at("GET", &path).len(),
        1,
        "one request, never cut"
    );
}

#[test]
fn a_long_download_cut_late_is_resumed_after_the_retry_timeout() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(moto.port);
    let (file, data, path) = put_pattern(moto, "s3://packs/late-cut/steps-00000.npy", 1 << 20, 9);
    // Half the body over 1.6 s, then the connection drops: later than the retry timeout
    // (1 s here, 3 minutes by default) counted from the download's start. The download has
    // been moving all along, so it is resumed, not given up.
    proxy.set(first(
        1,
        "GET",
        path.clone(),
        Fault::TrickleCut(32 << 10, Duration::from_millis(100)),
    ));
    let mut options = options(moto, proxy.port);
    options.retry_timeout = Duration::from_secs(1);
    let store = Arc::new(Store::new(options).unwrap());
    let cache = Cache::open(dir.path().join("cache"), 16 << 20, store).unwrap();
    let entry = cache
        .fetch(&file, data.len() as u64, crc32c(&data))
        .unwrap();
    assert!(std::fs::read(entry.path()).unwrap() == data);
    let tries = proxy.seen_at("GET", &path);
    assert_eq!(tries.len(), 2, "{tries:?}");
    let resumed = tries[1].range.as_deref().unwrap_or_default();
    assert!(
        resumed.starts_with(&format!("bytes={}-", data.len() / 2)),
        "{tries:?}"
    );
}

#[test]
fn answers_500_and_503_are_retried_for_reads_and_writes() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(moto.port);
    let direct = Store::new(options(moto, moto.port)).unwrap();
    let file = url("s3://packs/status/steps-00000.npy");
    let data = pattern(300_000, 6);
    direct.put(&file, data.clone()).unwrap();
    let path = request_path(&file);

    for code in [500, 503] {
        // A fresh store each time: its own connections and transfer counts.
        let store = Arc::new(Store::new(options(moto, proxy.port)).unwrap());
        proxy.set(first(3, "GET", path.clone(), Fault::Status(code)));
        let cache = Cache::open(dir.path().join(code.to_string()), 1 << 20, store.clone()).unwrap();
        let entry = cache
            .fetch(&file, data.len() as u64, crc32c(&data))
            .unwrap();
        assert_eq!(std::fs::read(entry.path()).unwrap(), data, "{code}");
        let tries: Vec<Fault> = proxy
            .seen_at("GET", &path)
            .iter()
            .map(|s| s.fault)
            .collect();
        assert_eq!(
            tries,
            [
                Fault::Status(code),
                Fault::Status(code),
                Fault::Status(code),
                Fault::Pass
            ]
        );
        assert_eq!(store.transfers().downloads, 1);

        let upload = url(&format!("s3://packs/status/up-{code}.npy"));
        proxy.set(first(2, "PUT", request_path(&upload), Fault::Status(code)));
        store.put(&upload, data.clone()).unwrap();
        assert_eq!(
            proxy.seen_at("PUT", &request_path(&upload)).len(),
            3,
            "{code}"
        );
        assert!(
            direct.get(&upload).unwrap() == data,
            "{code}: uploaded whole"
        );
    }

    // A server that keeps answering 500: the retries run out, the error names the URL and
    // keeps the server's answer as its cause.
    let store = Store::new(options(moto, proxy.port).retries(2)).unwrap();
    proxy.set(always("GET", path.clone(), Fault::Status(500)));
    let err = store.get(&file).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert_eq!(
        err.to_string(),
        "s3://packs/status/steps-00000.npy: reading failed, retries exhausted"
    );
    assert!(format!("{err:?}").contains("500"), "{err:?}");
    assert_eq!(proxy.seen_at("GET", &path).len(), 3);
}

#[test]
fn a_connection_cut_mid_body_is_resumed_and_the_bytes_checked() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(moto.port);
    let (file, data, path) = put_pattern(moto, "s3://packs/cut/steps-00000.npy", 2 << 20, 7);
    let (len, crc) = (data.len() as u64, crc32c(&data));

    // Cut once at half the body: the client asks for the rest, and the cache checks the
    // whole file's length and CRC-32C over both answers.
    proxy.set(first(1, "GET", path.clone(), Fault::Cut));
    let store = Arc::new(Store::new(options(moto, proxy.port)).unwrap());
    let cache = Cache::open(dir.path().join("a"), 16 << 20, store.clone()).unwrap();
    let entry = cache.fetch(&file, len, crc).unwrap();
    assert!(
        std::fs::read(entry.path()).unwrap() == data,
        "the bytes, in order"
    );
    let tries = proxy.seen_at("GET", &path);
    assert_eq!(tries.len(), 2, "{tries:?}");
    assert_eq!((tries[0].fault, &tries[0].range), (Fault::Cut, &None));
    let resumed = tries[1].range.as_deref().unwrap_or_default();
    assert!(
        resumed.starts_with(&format!("bytes={}-", len / 2)),
        "{tries:?}"
    );

    // The same cut, and a record that does not match the bytes: Corrupt, nothing kept.
    proxy.set(first(1, "GET", path.clone(), Fault::Cut));
    let cache = Cache::open(dir.path().join("b"), 16 << 20, store.clone()).unwrap();
    let err = cache.fetch(&file, len, crc ^ 0x100).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err:?}");
    assert!(
        err.to_string()
            .starts_with("s3://packs/cut/steps-00000.npy"),
        "{err}"
    );
    assert_eq!(cache.size().unwrap(), 0);

    // Cut every time: each try brings half of what is left, until the retries (the client's,
    // then the store's resumptions) run out; the error names the URL, nothing is kept.
    proxy.set(always("GET", path.clone(), Fault::Cut));
    let store = Arc::new(Store::new(options(moto, proxy.port).retries(2)).unwrap());
    let cache = Cache::open(dir.path().join("c"), 16 << 20, store).unwrap();
    let err = cache.fetch(&file, len, crc).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err:?}");
    assert!(
        err.to_string()
            .starts_with("s3://packs/cut/steps-00000.npy: reading failed"),
        "{err}"
    );
    let tries = proxy.seen_at("GET", &path);
    assert!(tries.len() >= 3, "{tries:?}");
    assert!(tries.iter().all(|t| t.fault == Fault::Cut), "{tries:?}");
    assert_eq!(cache.size().unwrap(), 0);
    assert!(part_file(&dir.path().join("c/entries")).is_none());
}

// ---------------------------------------------------------------------------------------
// Publishing: nothing deleted, nothing committed unless the whole commit is there
// ---------------------------------------------------------------------------------------

/// The keys below `prefix` the proxy let a PUT through for.
fn uploaded(proxy: &Proxy, prefix: &Url) -> BTreeSet<String> {
    let under = format!("{}/", request_path(prefix));
    proxy
        .seen()
        .into_iter()
        .filter(|s| s.method == "PUT" && s.fault == Fault::Pass)
        .filter_map(|s| s.path.strip_prefix(&under).map(str::to_string))
        .collect()
}

fn deletes(proxy: &Proxy) -> Vec<Seen> {
    proxy
        .seen()
        .into_iter()
        .filter(|s| s.method == "DELETE" || s.path.contains("?delete"))
        .collect()
}

/// Every PUT after the first `ok` is answered 503.
fn puts_fail_after(ok: usize) -> impl FnMut(&str, &str) -> Fault + Send {
    let mut puts = 0;
    move |method, _| {
        if method != "PUT" {
            return Fault::Pass;
        }
        puts += 1;
        if puts > ok {
            Fault::Status(503)
        } else {
            Fault::Pass
        }
    }
}

/// Each file the latest commit of the pack at `remote` names, fetched through a fresh cache
/// in `dir` (checked against the record) and compared with the same file of the local pack
/// `local`: a reader of the pack gets exactly it.
fn assert_reads_as(store: &Arc<Store>, remote: &Url, local: &Path, dir: &Path) {
    let commit = latest_commit(store, remote).unwrap().unwrap();
    assert_eq!(
        commit.files.keys().cloned().collect::<Vec<_>>(),
        common::names(local)
    );
    let cache = Cache::open(dir, 1 << 30, store.clone()).unwrap();
    for (name, file) in &commit.files {
        let entry = cache
            .fetch(&remote.join(&file.key).unwrap(), file.bytes, file.crc32c)
            .unwrap();
        assert!(
            std::fs::read(entry.path()).unwrap() == std::fs::read(local.join(name)).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn a_publish_failing_mid_upload_deletes_nothing_and_commits_nothing() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(moto.port);
    let direct = Arc::new(Store::new(options(moto, moto.port)).unwrap());
    let old = dir.path().join("old");
    common::pack(&common::fixture("raw"), &old, &["--shard-rows", "150"]);
    let new = dir.path().join("new");
    common::pack(&common::fixture("raw"), &new, &["--shard-rows", "100"]);
    let failing = || Store::new(options(moto, proxy.port).retries(1)).unwrap();

    // Over an old pack: the upload fails at its third file. (The bucket's create-only check
    // was made by the first publish: this process makes it once.)
    let remote = url("s3://packs/midway/clean");
    publish_table(&direct, &old, &remote).unwrap();
    direct
        .put(&remote.join("NOTES.txt").unwrap(), b"mine".to_vec())
        .unwrap();
    let before = objects_under(&direct, &remote);
    proxy.set(puts_fail_after(2));
    let err = publish_table(&failing(), &new, &remote).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err:?}");
    let text = format!("{err:#}");
    assert!(text.contains("writing failed, retries exhausted"), "{text}");
    assert!(
        text.contains("publishing to s3://packs/midway/clean stopped before the commit"),
        "{text}"
    );
    assert!(text.contains("s3://packs/midway/clean/_objects/"), "{text}");
    let sent = uploaded(&proxy, &remote);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(
        sent.iter().all(|k| k.starts_with("_objects/")),
        "the commit point is never reached: {sent:?}"
    );
    assert!(deletes(&proxy).is_empty(), "{:?}", deletes(&proxy));
    // Nothing deleted or rewritten: every object there before is there with its bytes, the
    // only new ones are the two files the failed publish uploaded (under its own writer's
    // folder), and commit 1 is still the latest and only commit.
    let after = objects_under(&direct, &remote);
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<BTreeSet<_>>();
    assert_eq!(names(&after), &names(&before) | &sent);
    for (key, bytes) in &before {
        assert!(after[key] == *bytes, "{key} changed");
    }
    assert_eq!(after["NOTES.txt"], b"mine");
    for key in &sent {
        let name = key.rsplit('/').next().unwrap();
        assert!(
            after[key] == std::fs::read(new.join(name)).unwrap(),
            "{key}"
        );
    }
    assert_eq!(commit_numbers(&direct, &remote).unwrap(), [1]);
    // A reader gets the old pack whole: every file commit 1 names, as it was.
    assert_reads_as(&direct, &remote, &old, &dir.path().join("cache-old"));

    // To a fresh prefix: the failed publish leaves its first files and no record, so no
    // pack; publishing again makes commit 1 beside them, which neither names nor replaces
    // them, and gc then removes them and nothing else.
    let fresh = url("s3://packs/midway/fresh");
    proxy.set(puts_fail_after(2));
    publish_table(&failing(), &new, &fresh).unwrap_err();
    let left = uploaded(&proxy, &fresh);
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().all(|k| k.starts_with("_objects/")), "{left:?}");
    assert_eq!(head(&direct, &fresh).unwrap(), Head::Empty);
    let orphans = objects_under(&direct, &fresh);
    assert_eq!(orphans.keys().cloned().collect::<BTreeSet<_>>(), left);
    proxy.set(|_: &str, _: &str| Fault::Pass);
    let passing = Store::new(options(moto, proxy.port)).unwrap();
    let summary = publish_table(&passing, &new, &fresh).unwrap();
    assert_eq!(summary.commit, 1);
    assert_eq!(summary.uploaded, common::names(&new));
    assert!(deletes(&proxy).is_empty(), "{:?}", deletes(&proxy));
    let now = objects_under(&direct, &fresh);
    for (key, bytes) in &orphans {
        assert!(now.get(key) == Some(bytes), "{key} changed");
    }
    let commit = latest_commit(&direct, &fresh).unwrap().unwrap();
    assert!(commit.files.values().all(|f| !left.contains(&f.key)));
    assert_reads_as(&direct, &fresh, &new, &dir.path().join("cache-fresh"));
    let done = gc(
        &direct,
        &fresh,
        &GcOptions::default().older_than(Duration::ZERO),
    )
    .unwrap();
    assert_eq!(done.deleted.iter().cloned().collect::<BTreeSet<_>>(), left);
    assert_eq!(done.kept_commits, [1]);
    let rest = objects_under(&direct, &fresh);
    assert!(left.iter().all(|k| !rest.contains_key(k)));
    assert_eq!(
        rest.len(),
        commit.files.len() + 1,
        "the files and the record"
    );
    assert_reads_as(&direct, &fresh, &new, &dir.path().join("cache-gc"));
}

#[test]
fn every_refused_publish_leaves_the_bucket_as_it_was() {
    let Some(moto) = moto() else { return };
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(moto.port);
    let direct = Store::new(options(moto, moto.port)).unwrap();
    let store = Store::new(options(moto, proxy.port)).unwrap();
    let pack = dir.path().join("pack");
    common::pack(&common::fixture("raw"), &pack, &[]);
    let remote = url("s3://packs/refused/clean");
    publish_table(&direct, &pack, &remote).unwrap();
    direct
        .put(&remote.join("NOTES.txt").unwrap(), b"mine".to_vec())
        .unwrap();
    // A record that is not one, and someone's object beside it.
    let broken = url("s3://packs/refused/broken");
    direct
        .put(
            &broken.join("_versions/18446744073709551614.json").unwrap(),
            b"not a record".to_vec(),
        )
        .unwrap();
    direct
        .put(&broken.join("steps.npy").unwrap(), b"someone's".to_vec())
        .unwrap();
    let unfinished = dir.path().join("unfinished");
    common::copy_tree(&pack, &unfinished);
    std::fs::write(unfinished.join("metadata.db-wal"), b"").unwrap();
    let not_a_pack = dir.path().join("not-a-pack");
    std::fs::create_dir(&not_a_pack).unwrap();
    std::fs::write(not_a_pack.join("steps.npy"), b"x").unwrap();
    let before = (
        objects_under(&direct, &remote),
        objects_under(&direct, &broken),
    );

    type Case<'a> = (&'a str, &'a Path, &'a Url, ErrorKind);
    let cases: [Case; 3] = [
        (
            "the latest record cannot be read",
            &pack,
            &broken,
            ErrorKind::Corrupt,
        ),
        (
            "a local pack still being written",
            &unfinished,
            &remote,
            ErrorKind::Refused,
        ),
        (
            "a local folder that is not a pack",
            &not_a_pack,
            &remote,
            ErrorKind::NotAPack,
        ),
    ];
    for (what, local, to, kind) in cases {
        proxy.set(|_: &str, _: &str| Fault::Pass);
        let err = publish_table(&store, local, to).unwrap_err();
        assert_eq!(err.kind(), kind, "{what}: {err:?}");
        let writes: Vec<Seen> = proxy
            .seen()
            .into_iter()
            .filter(|s| s.method != "GET" && s.method != "HEAD")
            .collect();
        assert!(writes.is_empty(), "{what}: {writes:?}");
    }
    assert!(
        (
            objects_under(&direct, &remote),
            objects_under(&direct, &broken)
        ) == before
    );

    // A writer that did not start from the latest commit (it saw no pack there): its files
    // go up under its own folder, its record is refused by the store, and the pack is
    // commit 1 as it was, nothing of it deleted or rewritten.
    proxy.set(|_: &str, _: &str| Fault::Pass);
    let options = CommitOptions {
        command: "test".into(),
        pack_id: String::new(),
        single_writer: false,
    };
    let err = publish_commit(&store, &pack, &remote, None, &options).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err:?}");
    assert!(err.to_string().contains("commit 1"), "{err}");
    assert!(deletes(&proxy).is_empty(), "{:?}", deletes(&proxy));
    let records: Vec<Seen> = proxy
        .seen()
        .into_iter()
        .filter(|s| s.method == "PUT" && s.path.contains("/_versions/"))
        .collect();
    assert_eq!(records.len(), 1, "one create-only try: {records:?}");
    assert!(
        records[0]
            .path
            .ends_with("/_versions/18446744073709551614.json")
    );
    let now = objects_under(&direct, &remote);
    for (key, bytes) in &before.0 {
        assert!(now.get(key) == Some(bytes), "{key} changed");
    }
    for key in now.keys().filter(|k| !before.0.contains_key(*k)) {
        assert!(key.starts_with("_objects/"), "{key}");
    }
    assert_eq!(commit_numbers(&direct, &remote).unwrap(), [1]);
    let direct = Arc::new(direct);
    assert_reads_as(&direct, &remote, &pack, &dir.path().join("cache"));
}
