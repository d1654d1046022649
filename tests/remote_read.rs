//! Reading packs in object storage: a pack of fixtures/raw published to a real S3-compatible
//! server (moto, tests/common/moto.rs), then read by the binary by its URL. Every reading
//! command prints what it prints for the same pack on disk (the path replaced by the URL);
//! the cache is reused, bounded, and keeps nothing corrupt; commands that change a pack in
//! place (attach, detach, tag) commit a new version of it; a pack an older tool left in a
//! bucket (its files under their own names, no commit record) reads as before; no
//! credentials fail at once.
//!
//! Skipped, with the reason printed, only where the venv has no moto (never under CI).

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use dataset_packer::store::{Commit, Location, Store, Url, commit_numbers, latest_commit};

use common::moto::{Moto, moto, options, publish_plain, publish_table};
use common::shaper::Shaper;
use common::viewer::Server;
use common::{fixture, s};

/// A local pack and the same pack published at `url`, with a cache folder for the binary.
struct Published {
    moto: &'static Moto,
    t: tempfile::TempDir,
    local: PathBuf,
    url: String,
}

impl Published {
    /// Packs `raw` (4 shards with `--shard-rows 150` for fixtures/raw) and publishes it at
    /// `s3://packs/<name>` as its first commit.
    fn new(moto: &'static Moto, name: &str) -> Published {
        Published::with(moto, name, Layout::Table)
    }

    /// The same pack, published at `s3://packs/<name>` in `layout`.
    fn with(moto: &'static Moto, name: &str, layout: Layout) -> Published {
        Published::packed(moto, name, layout, &["--shard-rows", "150"], &[])
    }

    /// The pack in `shard_rows`-row shards, its metadata.db recording 4 KiB blocks (so that
    /// the fixture's small shards have many), published at `s3://packs/<name>` as a commit.
    fn with_small_blocks(moto: &'static Moto, name: &str, shard_rows: &str) -> Published {
        Published::packed(
            moto,
            name,
            Layout::Table,
            &["--shard-rows", shard_rows],
            &[("DATASET_PACKER_BLOCK_BYTES", Some("4096"))],
        )
    }

    /// A pack of `raw` packed with `extra` options and environment `env`, published at
    /// `s3://packs/<name>` in `layout`.
    fn packed(
        moto: &'static Moto,
        name: &str,
        layout: Layout,
        extra: &[&str],
        env: &[(&str, Option<&str>)],
    ) -> Published {
        let t = tempfile::tempdir().unwrap();
        let local = t.path().join("local").join(name);
        let out = common::pack_env(&fixture("raw"), &local, extra, env);
        assert!(out.status.success(), "{}", common::stderr(&out));
        let remote = format!("s3://packs/{name}");
        match layout {
            Layout::Table => publish(moto, &local, &remote),
            Layout::Plain => publish_plain(&store(moto), &local, &url(&remote)),
        }
        Published {
            moto,
            t,
            local,
            url: remote,
        }
    }

    fn cache(&self) -> PathBuf {
        self.t.path().join("cache")
    }

    /// Runs the binary with the server's credentials and this test's cache folder.
    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, &[])
    }

    fn run_with(&self, args: &[&str], extra: &[(&str, &str)]) -> Output {
        let env = self.moto.env();
        let cache = self.cache();
        let mut vars: Vec<(&str, Option<&str>)> =
            env.iter().map(|(k, v)| (*k, Some(v.as_str()))).collect();
        vars.push(("DATASET_PACKER_CACHE", Some(s(&cache))));
        vars.push(("DATASET_PACKER_CACHE_LIMIT", None));
        vars.extend(extra.iter().map(|(k, v)| (*k, Some(*v))));
        common::run_env(args, &vars)
    }

    fn run_ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            common::stderr(&out)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The same command on the local pack and on the URL (`PACK` in `args` stands for the
    /// pack): their standard outputs, the local path in the first replaced by the URL.
    fn both(&self, args: &[&str]) -> (String, String) {
        let with = |pack: &str| -> Vec<String> {
            args.iter()
                .map(|a| a.replace("PACK", pack))
                .collect::<Vec<_>>()
        };
        let local_args = with(s(&self.local));
        let remote_args = with(&self.url);
        let local = common::run_ok(&local_args.iter().map(String::as_str).collect::<Vec<_>>());
        let remote = self.run_ok(&remote_args.iter().map(String::as_str).collect::<Vec<_>>());
        (local.replace(s(&self.local), &self.url), remote)
    }

    /// The cache's entry files (data, not locks), by name, with their modification times.
    fn entries(&self) -> Vec<(String, std::time::SystemTime)> {
        let dir = self.cache().join("entries");
        let mut found: Vec<(String, std::time::SystemTime)> = std::fs::read_dir(&dir)
            .map(|it| {
                it.map(|e| e.unwrap())
                    .filter(|e| !e.file_name().to_string_lossy().ends_with(".lock"))
                    .map(|e| {
                        (
                            e.file_name().to_string_lossy().into_owned(),
                            e.metadata().unwrap().modified().unwrap(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        found
    }
}

/// How a test's pack is stored in the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// A table of commits: `_objects/<writer>/…` and `_versions/…` records.
    Table,
    /// As an older tool left it: every file under its own name, no record.
    Plain,
}

fn url(text: &str) -> Url {
    match Location::parse(text).unwrap() {
        Location::Remote(u) => u,
        other => panic!("{other:?}"),
    }
}

fn store(moto: &Moto) -> Store {
    Store::new(options(moto, moto.port)).unwrap()
}

/// Publishes `local` at `to` as the commit after the latest there.
fn publish(moto: &Moto, local: &Path, to: &str) {
    publish_table(&store(moto), local, &url(to)).unwrap();
}

/// The latest commit of the pack at `pack`, which must have one.
fn latest(moto: &Moto, pack: &str) -> Commit {
    latest_commit(&store(moto), &url(pack))
        .unwrap()
        .unwrap_or_else(|| panic!("{pack} has no commit"))
}

/// Every object under `pack` (keys below it) with its bytes.
fn objects(moto: &Moto, pack: &str) -> std::collections::BTreeMap<String, Vec<u8>> {
    common::moto::objects_under(&store(moto), &url(pack))
}

/// A human report without its timing (the only part that differs run to run): validate's
/// "checked in", stats' "read in".
fn untimed(text: &str) -> String {
    text.lines()
        .map(|l| l.split(" checked in ").next().unwrap())
        .map(|l| l.split(" read in ").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A JSON document without the fields that measure time.
fn untimed_json(text: &str) -> serde_json::Value {
    let mut doc: serde_json::Value = serde_json::from_str(text).unwrap();
    if let Some(map) = doc.as_object_mut() {
        map.remove("elapsed_s");
        map.remove("seconds");
    }
    doc
}

#[test]
fn every_reading_command_prints_what_it_prints_for_the_local_pack() {
    let Some(moto) = moto() else { return };
    let p = Published::new(moto, "same/clean");

    let (local, remote) = p.both(&["validate", "PACK", "--quiet"]);
    assert!(remote.contains("VALID"), "{remote}");
    assert!(
        remote.starts_with(&format!("validate {}", p.url)),
        "{remote}"
    );
    assert_eq!(untimed(&local), untimed(&remote));
    let (local, remote) = p.both(&["validate", "PACK", "--quiet", "--json"]);
    assert_eq!(untimed_json(&local), untimed_json(&remote));

    let (local, remote) = p.both(&["stats", "PACK", "--json"]);
    assert_eq!(untimed_json(&local), untimed_json(&remote));
    assert_eq!(untimed_json(&remote)["pack"], p.url.as_str());
    let (local, remote) = p.both(&["stats", "PACK", "--where", "max_score > 3000"]);
    assert_eq!(untimed(&local), untimed(&remote));

    for args in [
        &["show", "PACK", "--run", "3"][..],
        &["show", "PACK", "--run", "7", "--last", "4", "--json"],
    ] {
        let (local, remote) = p.both(args);
        assert!(!remote.is_empty(), "{args:?}");
        assert_eq!(local, remote, "{args:?}");
    }
    // The history records the command that made the pack, with the local path it named; the
    // text starts with the pack as given, the JSON does not name it.
    let versions = |pack: &str| p.run_ok(&["versions", pack]).replacen(pack, "PACK", 1);
    assert_eq!(versions(s(&p.local)), versions(&p.url));
    let json = |pack: &str| p.run_ok(&["versions", pack, "--json"]);
    assert_eq!(json(s(&p.local)), json(&p.url));

    // Exports of the remote pack are the local pack's exports: JSONL byte for byte, Parquet
    // the same table (its metadata names the source: the folder, or the URL).
    let out = p.t.path().join("out");
    let exported = |name: &str, format: &str| {
        let (a, b) = (
            out.join(format!("local-{name}")),
            out.join(format!("remote-{name}")),
        );
        common::run_ok(&["export", s(&p.local), "--format", format, "--output", s(&a)]);
        p.run_ok(&["export", &p.url, "--format", format, "--output", s(&b)]);
        (a, b)
    };
    let (a, b) = exported("rows.jsonl.gz", "jsonl");
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    let (a, b) = exported("rows.parquet", "parquet");
    let script = "import sys, pyarrow.parquet as pq\n\
                  a, b = pq.read_table(sys.argv[1]), pq.read_table(sys.argv[2])\n\
                  assert a.num_rows > 0 and a.equals(b), 'tables differ'\n\
                  print(pq.ParquetFile(sys.argv[2]).metadata.metadata[b'dataset_packer.source_pack'].decode())";
    let checked = std::process::Command::new(common::python())
        .args(["-c", script, s(&a), s(&b)])
        .output()
        .unwrap();
    assert!(checked.status.success(), "{}", common::stderr(&checked));
    assert_eq!(String::from_utf8(checked.stdout).unwrap().trim(), p.url);
    let (a, b) = (out.join("local-pack"), out.join("remote-pack"));
    common::run_ok(&[
        "export",
        s(&p.local),
        "--format",
        "pack",
        "--output",
        s(&a),
        "--runs",
        "2-6",
    ]);
    p.run_ok(&[
        "export",
        &p.url,
        "--format",
        "pack",
        "--output",
        s(&b),
        "--runs",
        "2-6",
    ]);
    assert_eq!(common::read_rows(&a), common::read_rows(&b));
    assert_eq!(common::runs_table(&a), common::runs_table(&b));
    let shards = |p: &Path| common::files(p, |n| n.ends_with(".npy"));
    assert_eq!(shards(&a), shards(&b));
    // The export records where it came from: the URL, not a folder of the cache.
    let source: String = common::db(&b)
        .query_row("SELECT path FROM version_sources", [], |r| r.get(0))
        .unwrap();
    assert_eq!(source, p.url);

    // A report of the remote pack is the local pack's page (but for when it was made).
    let (a, b) = (out.join("local.html"), out.join("remote.html"));
    common::run_ok(&["report", s(&p.local), "--output", s(&a)]);
    p.run_ok(&["report", &p.url, "--output", s(&b)]);
    let page = |path: &Path| {
        let text = std::fs::read_to_string(path)
            .unwrap()
            .replace(s(&p.local), "PACK")
            .replace(&p.url, "PACK");
        text.lines()
            .filter(|l| !l.contains("UTC") && !l.contains("dataset-packer report"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let (a, b) = (page(&a), page(&b));
    for (x, y) in a.lines().zip(b.lines()) {
        assert_eq!(x, y);
    }
    assert_eq!(a.lines().count(), b.lines().count());
}

#[test]
fn a_remote_pack_merges_as_its_local_copy_does() {
    let Some(moto) = moto() else { return };
    let p = Published::new(moto, "merge/clean");
    let other = p.t.path().join("other");
    common::pack(&fixture("raw_d23"), &other, &[]);
    let (a, b) = (
        p.t.path().join("merged-local"),
        p.t.path().join("merged-remote"),
    );
    common::run_ok(&["merge", s(&p.local), s(&other), "--output", s(&a)]);
    p.run_ok(&["merge", &p.url, s(&other), "--output", s(&b)]);
    assert_eq!(common::read_rows(&a), common::read_rows(&b));
    assert_eq!(common::runs_table(&a), common::runs_table(&b));
    let sources: Vec<String> = {
        let db = common::db(&b);
        let mut stmt = db
            .prepare("SELECT path FROM version_sources ORDER BY rowid")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(sources[0], p.url, "{sources:?}");

    // Deleting a remote input is never done: every object of the pack is still there, as
    // it was, and its latest commit is still its first.
    let before = objects(moto, &p.url);
    let out = p.run(&[
        "merge",
        &p.url,
        s(&other),
        "--output",
        s(&p.t.path().join("m3")),
        "--delete-inputs",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    assert!(common::stderr(&out).contains(&p.url));
    assert!(
        objects(moto, &p.url) == before,
        "the remote input was touched"
    );
    assert_eq!(latest(moto, &p.url).commit, 1);
}

#[test]
fn an_earlier_version_of_a_remote_pack_reads_as_it_does_locally() {
    let Some(moto) = moto() else { return };
    let t = tempfile::tempdir().unwrap();
    let local = t.path().join("versions");
    common::pack(&fixture("raw"), &local, &["--shard-rows", "150"]);
    // Version 2: a companion family attached (one float32 per row).
    let rows: usize = common::read_rows(&local).len();
    let scores = t.path().join("score.npy");
    let mut bytes = common::npy_header("'<f4'", rows);
    bytes.extend((0..rows).flat_map(|i| (i as f32 * 0.5).to_le_bytes()));
    std::fs::write(&scores, bytes).unwrap();
    common::run_ok(&["attach", s(&local), "--name", "score", "--from", s(&scores)]);
    publish(moto, &local, "s3://packs/versions/two");
    let p = Published {
        moto,
        t,
        local,
        url: "s3://packs/versions/two".into(),
    };
    let versions = |pack: &str| p.run_ok(&["versions", pack]).replacen(pack, "PACK", 1);
    let remote = versions(&p.url);
    assert_eq!(versions(s(&p.local)), remote);
    assert!(remote.contains("attach"), "{remote}");
    for args in [
        &["stats", "PACK", "--version", "1", "--json"][..],
        &["stats", "PACK", "--json"],
    ] {
        let (local, remote) = p.both(args);
        assert_eq!(untimed_json(&local), untimed_json(&remote), "{args:?}");
    }
    let (local, remote) = p.both(&["show", "PACK", "--version", "1", "--run", "2", "--json"]);
    assert_eq!(local, remote);
    let (local, remote) = p.both(&["validate", "PACK", "--quiet", "--version", "1"]);
    assert_eq!(untimed(&local), untimed(&remote));
}

#[test]
fn a_second_read_takes_every_shard_from_the_cache() {
    let Some(moto) = moto() else { return };
    let p = Published::new(moto, "cache/reuse");
    p.run_ok(&["stats", &p.url]);
    let first = p.entries();
    let shards = common::names(&p.local)
        .into_iter()
        .filter(|n| n.ends_with(".npy"))
        .count();
    assert_eq!(first.len(), shards, "{first:?}");
    let out = p.run_with(
        &["stats", &p.url],
        &[("RUST_LOG", "dataset_packer::pack::remote=debug")],
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    let log = common::stderr(&out);
    // The commit's record, metadata.db and valuation_types.json are read fresh; no shard is
    // downloaded again.
    assert!(
        log.contains(&format!("{}: {shards} files", p.url)) && log.contains("downloaded 3 files"),
        "{log}"
    );
    assert_eq!(p.entries(), first, "the entries were not rewritten");
    // The view folders are gone with the processes that made them.
    let views = std::fs::read_dir(p.cache().join("views")).unwrap().count();
    assert_eq!(views, 0);
}

/// Views left behind are swept by the next read: one whose `.lock` no process holds, and
/// one without a `.lock` whose process is gone; a view whose `.lock` is held stays, whatever
/// its process id says (another container's process, sharing the cache, has ids this one
/// cannot see).
#[test]
fn the_next_read_sweeps_views_no_process_holds() {
    let Some(moto) = moto() else { return };
    let p = Published::new(moto, "cache/sweep");
    let views = p.cache().join("views");
    std::fs::create_dir_all(&views).unwrap();
    // No process has id 4194304 + 1 (past pid_max): "gone" by its id.
    let dead = 4_194_305u32;
    let (held, loose, plain) = (
        views.join(format!("{dead}-0")),
        views.join(format!("{dead}-1")),
        views.join(format!("{dead}-2")),
    );
    for dir in [&held, &loose, &plain] {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("metadata.db"), b"left behind").unwrap();
    }
    let lock = std::fs::File::create(held.join(".lock")).unwrap();
    lock.lock_shared().unwrap();
    std::fs::File::create(loose.join(".lock")).unwrap();
    p.run_ok(&["stats", &p.url]);
    assert!(held.exists(), "a view in use was removed");
    assert!(!loose.exists() && !plain.exists(), "stale views were kept");
    drop(lock);
    p.run_ok(&["stats", &p.url]);
    assert!(!held.exists(), "a view no longer in use was kept");
    assert_eq!(std::fs::read_dir(&views).unwrap().count(), 0);
}

/// A pack whose metadata.db records block checksums is read by the blocks a command needs:
/// `show --run N` and `export --runs N` fetch the blocks holding the run's rows, each a
/// cache entry of its own, no whole shard, and print and write what they do for the local
/// pack.
#[test]
fn show_and_export_of_one_run_fetch_only_its_blocks() {
    let Some(moto) = moto() else { return };
    // 4 KiB blocks: the fixture's 2,000-row shard (96 KB) has 24, past the header read at
    // open too.
    let p = Published::with_small_blocks(moto, "blocks/run", "2000");
    // Run 6: 230 rows from row 1,400 of shard 0, in blocks past the header read at open.
    let db = rusqlite::Connection::open(p.local.join("metadata.db")).unwrap();
    let (shard, offset, steps): (u32, u64, u64) = db
        .query_row(
            "SELECT shard, row_offset, steps FROM run_index JOIN runs ON id = run_id
             WHERE run_id = 6",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let name = format!("steps-{shard:05}.npy");
    let file_len = std::fs::metadata(p.local.join(&name)).unwrap().len();
    let data_offset = file_len - 2000 * 48;
    assert_eq!((shard, offset), (0, 1400));
    let (start, end) = (
        data_offset + offset * 48,
        data_offset + (offset + steps) * 48,
    );
    let wanted: Vec<u64> = (start / 4096..end.div_ceil(4096))
        .map(|b| b * 4096)
        .collect();

    let (local, remote) = p.both(&["show", "PACK", "--run", "6", "--json"]);
    assert_eq!(local, remote);
    let fetched =
        |p: &Published| -> Vec<String> { p.entries().into_iter().map(|(n, _)| n).collect() };
    let expected: Vec<String> = wanted.iter().map(|b| format!("{name}_{b}")).collect();
    let mut got: Vec<String> = fetched(&p)
        .iter()
        .map(|n| n.splitn(4, '-').nth(3).unwrap().to_string())
        .collect();
    got.sort();
    let mut sorted = expected.clone();
    sorted.sort();
    // `show` reads the steps it prints (the run's first ones): some of its blocks, no other.
    assert!(
        !got.is_empty() && got.iter().all(|n| sorted.contains(n)),
        "the cache holds some of the run's blocks and nothing else: {got:?} of {sorted:?}"
    );

    // Exported from the URL, the run is the local export's, byte for byte: every block of the
    // run is in the cache now, and nothing else.
    let out = p.t.path().join("out");
    let local_out = out.join("local.jsonl");
    let remote_out = out.join("remote.jsonl");
    common::run_ok(&[
        "export",
        s(&p.local),
        "--runs",
        "6",
        "--output",
        s(&local_out),
    ]);
    p.run_ok(&["export", &p.url, "--runs", "6", "--output", s(&remote_out)]);
    assert_eq!(
        std::fs::read(&local_out).unwrap(),
        std::fs::read(&remote_out).unwrap()
    );
    let mut again: Vec<String> = fetched(&p)
        .iter()
        .map(|n| n.splitn(4, '-').nth(3).unwrap().to_string())
        .collect();
    again.sort();
    assert_eq!(again, sorted);

    // Files the cache holds whole (`stats` fetched every one) are read from there: showing
    // another run fetches no block.
    p.run_ok(&["stats", &p.url]);
    let before = p.entries().len();
    let (local, remote) = p.both(&["show", "PACK", "--run", "0", "--json"]);
    assert_eq!(local, remote);
    assert_eq!(p.entries().len(), before, "{:?}", p.entries());
}

#[test]
fn through_a_slow_far_link_show_and_streamed_stats_print_what_they_print_locally() {
    let Some(moto) = moto() else { return };
    let p = Published::with_small_blocks(moto, "blocks/far", "150");
    // 25 ms before each request reaches the server; 2 MB/s per connection, 4 MB/s in all.
    let mut link = Shaper::start(moto.port, 0.025, 2e6, 4e6);
    let cache = p.t.path().join("far-cache");
    let mut env = common::moto::env_for(moto, link.port, &cache);
    env.push(("DATASET_PACKER_CACHE_LIMIT".into(), "32KiB".into()));
    let local_of = |args: &[&str]| {
        let args: Vec<String> = args
            .iter()
            .map(|a| a.replace("PACK", s(&p.local)))
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::run_ok(&args).replace(s(&p.local), &p.url)
    };
    let remote_of = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| a.replace("PACK", &p.url)).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::moto::run_with_ok(&args, &env)
    };
    let show = ["show", "PACK", "--run", "6", "--json"];
    assert_eq!(local_of(&show), remote_of(&show));
    let shown = link.seen();
    assert!(shown.ranged > 0, "{shown:?}");
    // Streamed through a cache of 32 KiB: every block comes through the link by a ranged
    // request of its own.
    let stats = ["stats", "PACK"];
    assert_eq!(untimed(&local_of(&stats)), untimed(&remote_of(&stats)));
    let streamed = link.seen();
    let blocks: u64 = common::names(&p.local)
        .iter()
        .filter(|n| n.starts_with("steps-"))
        .map(|n| {
            std::fs::metadata(p.local.join(n))
                .unwrap()
                .len()
                .div_ceil(4096)
        })
        .sum();
    assert!(
        streamed.ranged - shown.ranged >= blocks,
        "{blocks} blocks: {streamed:?}"
    );
}

#[test]
fn a_companion_whose_header_is_longer_than_the_first_read_streams_through_validate() {
    let Some(moto) = moto() else { return };
    // A pack of 4 KiB blocks with a companion of 400 one-byte fields: its npy header (about
    // 8 KB) is longer than the 4 KiB read first at open, so a second read fetches the rest.
    let t = tempfile::tempdir().unwrap();
    let local = t.path().join("wide");
    let out = common::pack_env(
        &fixture("raw"),
        &local,
        &["--shard-rows", "1000"],
        &[("DATASET_PACKER_BLOCK_BYTES", Some("4096"))],
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    let made = common::python_code(
        "import numpy as np, sys, pathlib\n\
         dt = np.dtype([(f'f{i:03d}', 'u1') for i in range(400)])\n\
         out = []\n\
         for shard in sorted(pathlib.Path(sys.argv[1]).glob('steps-*.npy')):\n\
         \x20   rows = np.load(shard)\n\
         \x20   a = np.zeros(len(rows), dtype=dt)\n\
         \x20   for i in range(400): a[f'f{i:03d}'] = (rows['step_index'] + i) % 251\n\
         \x20   path = pathlib.Path(sys.argv[2]) / ('wide-' + shard.name[6:])\n\
         \x20   np.save(path, a)\n\
         \x20   out.append(str(path))\n\
         print(len(open(out[0], 'rb').read(16 << 10).split(b'}')[0]))\n\
         print('\\n'.join(out))",
        &[s(&local), s(t.path())],
    );
    let mut lines = made.lines();
    let header: usize = lines.next().unwrap().parse().unwrap();
    assert!(header > 4096, "a header of {header} bytes");
    let files: Vec<&str> = lines.collect();
    let mut args = vec!["attach", s(&local), "--name", "wide", "--quiet", "--from"];
    args.extend(files.iter().copied());
    let out = common::run_env(&args, &[("DATASET_PACKER_BLOCK_BYTES", Some("4096"))]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let remote = "s3://packs/blocks/wide";
    publish(moto, &local, remote);
    let cache = t.path().join("cache");
    let mut env = common::moto::env_for(moto, moto.port, &cache);
    env.push(("DATASET_PACKER_CACHE_LIMIT".into(), "32KiB".into()));
    let validate = |pack: &str, env: &[(String, String)]| {
        untimed(&common::moto::run_with_ok(
            &["validate", pack, "--deep"],
            env,
        ))
    };
    assert_eq!(
        validate(s(&local), &[]).replace(s(&local), remote),
        validate(remote, &env)
    );
}

#[test]
fn a_pack_without_block_checksums_larger_than_the_cache_limit_is_refused_before_any_download() {
    let Some(moto) = moto() else { return };
    // As an older tool left it: no block checksums, so its files are only read whole.
    let t = tempfile::tempdir().unwrap();
    let local = t.path().join("local");
    common::pack(&fixture("raw"), &local, &["--shard-rows", "150"]);
    rusqlite::Connection::open(local.join("metadata.db"))
        .unwrap()
        .execute("DROP TABLE file_blocks", [])
        .unwrap();
    let url = "s3://packs/cache/limit".to_string();
    publish(moto, &local, &url);
    let p = Published {
        moto,
        t,
        local,
        url,
    };
    let out = p.run(&["--cache-limit", "64KiB", "stats", &p.url]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&p.url) && err.contains("65536 bytes") && err.contains("--cache-limit"),
        "{err}"
    );
    assert!(p.entries().is_empty(), "{:?}", p.entries());
}

/// `stats` and `validate` of a pack (with block checksums) larger than the cache's limit
/// stream through it: each shard's blocks fetched as the pass reaches it and given back once
/// past it, the cache kept within its limit; they print what they print for the local pack.
#[test]
fn stats_and_validate_stream_through_a_pack_larger_than_the_cache() {
    let Some(moto) = moto() else { return };
    let p = Published::with_small_blocks(moto, "cache/stream", "150");
    let pack_bytes: u64 = common::names(&p.local)
        .iter()
        .filter(|n| n.ends_with(".npy"))
        .map(|n| std::fs::metadata(p.local.join(n)).unwrap().len())
        .sum();
    let limit = 32 * 1024;
    assert!(pack_bytes > 3 * limit, "{pack_bytes}");
    for args in [
        &["--cache-limit", "32KiB", "stats", "PACK"][..],
        &["--cache-limit", "32KiB", "stats", "PACK", "--json"],
        &["--cache-limit", "32KiB", "validate", "PACK", "--deep"],
    ] {
        let (local, remote) = p.both(args);
        if args.contains(&"--json") {
            assert_eq!(untimed_json(&local), untimed_json(&remote), "{args:?}");
        } else {
            assert_eq!(untimed(&local), untimed(&remote), "{args:?}");
        }
        let held: u64 = p
            .entries()
            .iter()
            .map(|(n, _)| {
                std::fs::metadata(p.cache().join("entries").join(n))
                    .unwrap()
                    .len()
            })
            .sum();
        assert!(held <= limit, "{args:?}: the cache holds {held} bytes");
    }
    // A report of it too: the same page as of the local pack (the pack named by its URL).
    let out = p.t.path().join("reports");
    let (local_page, remote_page) = (out.join("local.html"), out.join("remote.html"));
    std::fs::create_dir_all(&out).unwrap();
    common::run_ok(&["report", s(&p.local), "--output", s(&local_page)]);
    p.run_ok(&[
        "--cache-limit",
        "32KiB",
        "report",
        &p.url,
        "--output",
        s(&remote_page),
    ]);
    let figures = |page: &Path| -> Vec<String> {
        // The page's figures: its numbers with a thousands separator (rows, runs, bytes).
        let text = std::fs::read_to_string(page).unwrap();
        let mut found: Vec<String> = text
            .split(|c: char| !(c.is_ascii_digit() || c == ','))
            .filter(|w| w.len() > 4 && w.contains(',') && !w.starts_with(','))
            .map(str::to_string)
            .collect();
        found.sort();
        found
    };
    let local_figures = figures(&local_page);
    assert!(
        local_figures.contains(&"2,240".to_string()),
        "{local_figures:?}"
    );
    assert_eq!(local_figures, figures(&remote_page));
    let views = std::fs::read_dir(p.cache().join("views")).unwrap().count();
    assert_eq!(views, 0);
}

/// The object that holds the pack file `name` of the pack at `pack` in `layout`: the key its
/// latest commit names, or for a pack without commits its own name.
fn object_of(moto: &Moto, pack: &str, layout: Layout, name: &str) -> String {
    match layout {
        Layout::Table => format!("{pack}/{}", latest(moto, pack).files[name].key),
        Layout::Plain => format!("{pack}/{name}"),
    }
}

#[test]
fn a_corrupted_remote_shard_is_named_by_url_and_left_out_of_the_cache() {
    let Some(moto) = moto() else { return };
    for layout in [Layout::Table, Layout::Plain] {
        let p = Published::with(moto, &format!("corrupt/{layout:?}"), layout);
        // The object the pack reads steps-00001.npy from, spoiled in the bucket (same size).
        let shard = object_of(moto, &p.url, layout, "steps-00001.npy");
        if layout == Layout::Table {
            assert!(shard.contains("/_objects/"), "{shard}");
        }
        let size = std::fs::metadata(p.local.join("steps-00001.npy"))
            .unwrap()
            .len();
        store(moto)
            .put(&url(&shard), vec![0x5a; size as usize])
            .unwrap();
        for args in [
            &["validate", &p.url, "--quiet"][..],
            &["stats", &p.url],
            &["show", &p.url, "--run", "3"],
        ] {
            let out = p.run(args);
            let err = common::stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{layout:?} {args:?}: {err}");
            assert!(err.contains(&shard), "{layout:?} {args:?}: {err}");
            assert!(
                !err.contains("views"),
                "{layout:?} {args:?} names the view: {err}"
            );
        }
        let kept: Vec<String> = p.entries().into_iter().map(|(n, _)| n).collect();
        assert!(
            kept.iter().all(|n| !n.contains("steps-00001")),
            "{layout:?}: {kept:?}"
        );
        // The failed reads' view folders went with them.
        let views = std::fs::read_dir(p.cache().join("views")).unwrap().count();
        assert_eq!(views, 0, "{layout:?}");

        // A file the pack lists that the bucket lacks: a damaged pack, named.
        let good = std::fs::read(p.local.join("steps-00001.npy")).unwrap();
        store(moto).put(&url(&shard), good).unwrap();
        let gone = object_of(moto, &p.url, layout, "steps-00002.npy");
        store(moto).delete(&url(&gone)).unwrap();
        // (A cache that holds it from the reads above would serve it: a fresh one.)
        let fresh = p.t.path().join("fresh-cache");
        let out = p.run_with(&["stats", &p.url], &[("DATASET_PACKER_CACHE", s(&fresh))]);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{layout:?}: {err}");
        assert!(
            err.contains(&format!(
                "{} lists steps-00002.npy but the store has no such object",
                p.url
            )),
            "{layout:?}: {err}"
        );
        // Put back, the pack reads again: the shard the reads refused was not cached.
        let bytes = std::fs::read(p.local.join("steps-00002.npy")).unwrap();
        store(moto).put(&url(&gone), bytes).unwrap();
        let (local, remote) = p.both(&["show", "PACK", "--run", "3", "--json"]);
        assert_eq!(local, remote, "{layout:?}");
    }
}

/// A pack an older dataset-packer left in a bucket (every file under its own name, no commit
/// record) reads as its local copy does, every version of it.
#[test]
fn a_pack_in_the_layout_before_commits_reads_as_before() {
    let Some(moto) = moto() else { return };
    let p = Published::with(moto, "plain/clean", Layout::Plain);
    assert!(
        commit_numbers(&store(moto), &url(&p.url))
            .unwrap()
            .is_empty()
    );
    let (local, remote) = p.both(&["validate", "PACK", "--quiet", "--json"]);
    assert_eq!(untimed_json(&local), untimed_json(&remote));
    let (local, remote) = p.both(&["stats", "PACK", "--json"]);
    assert_eq!(untimed_json(&local), untimed_json(&remote));
    let (local, remote) = p.both(&["show", "PACK", "--run", "7", "--last", "4", "--json"]);
    assert!(!remote.is_empty());
    assert_eq!(local, remote);
    let versions = |pack: &str| p.run_ok(&["versions", pack]).replacen(pack, "PACK", 1);
    assert_eq!(versions(s(&p.local)), versions(&p.url));
    // Reading writes nothing: still no record, the objects as they were.
    assert_eq!(
        objects(moto, &p.url).into_keys().collect::<Vec<_>>(),
        common::names(&p.local)
    );
}

/// `attach`, `detach` and `tag` on a URL change a local copy of its latest commit and
/// publish it as the next commit, as they change a local pack in place: each leaves the pack
/// what the same command leaves of the local copy, and every earlier commit's objects where
/// they were. A change that fails commits nothing.
#[test]
fn commands_that_change_a_pack_in_place_commit_a_new_version_of_a_url() {
    let Some(moto) = moto() else { return };
    let p = Published::new(moto, "changes/pack");
    let rows = common::read_rows(&p.local).len();
    let scores = p.t.path().join("score.npy");
    let mut bytes = common::npy_header("'<f4'", rows);
    bytes.extend((0..rows).flat_map(|i| (i as f32 * 0.25).to_le_bytes()));
    std::fs::write(&scores, bytes).unwrap();
    let wrong = p.t.path().join("wrong.npy");
    std::fs::write(&wrong, common::npy_header("'<f4'", 0)).unwrap();
    let first = objects(moto, &p.url);

    // Refused changes: nothing committed, nothing written.
    for args in [
        &["attach", "PACK", "--name", "score", "--from", s(&wrong)][..],
        &["detach", "PACK", "--name", "score"],
        &["tag", "PACK", "v1", "--delete"],
    ] {
        let with = |pack: &str| {
            args.iter()
                .map(|a| a.replace("PACK", pack))
                .collect::<Vec<_>>()
        };
        let (local_args, remote_args) = (with(s(&p.local)), with(&p.url));
        let local = common::run(&local_args.iter().map(String::as_str).collect::<Vec<_>>());
        let remote = p.run(&remote_args.iter().map(String::as_str).collect::<Vec<_>>());
        let err = common::stderr(&remote);
        assert!(!remote.status.success(), "{args:?}: {err}");
        assert_eq!(remote.status.code(), local.status.code(), "{args:?}: {err}");
        assert!(
            objects(moto, &p.url) == first,
            "{args:?} wrote to the bucket"
        );
    }

    // Each change, on the local pack and on the URL: the same history and the same rows.
    let changes: [&[&str]; 3] = [
        &["attach", "PACK", "--name", "score", "--from", s(&scores)],
        &["tag", "PACK", "scored"],
        &["detach", "PACK", "--name", "score"],
    ];
    let mut histories = Vec::new();
    for (i, args) in changes.iter().enumerate() {
        p.both(args);
        let commit = latest(moto, &p.url);
        assert_eq!(
            (commit.commit, commit.parent),
            (i as u64 + 2, Some(i as u64 + 1)),
            "{args:?}"
        );
        // The history, but for when each version was made and the pack each command named.
        let versions = |pack: &str| {
            let text = p.run_ok(&["versions", pack, "--json"]);
            text.replace(s(&p.local), "PACK")
                .replace(&p.url, "PACK")
                .lines()
                .filter(|l| !l.contains("created_utc"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let (local, remote) = (versions(s(&p.local)), versions(&p.url));
        assert_eq!(local, remote, "{args:?}");
        assert!(
            !histories.contains(&remote),
            "{args:?} changed nothing: {remote}"
        );
        histories.push(remote);
        let (local, remote) = p.both(&["stats", "PACK", "--json"]);
        assert_eq!(untimed_json(&local), untimed_json(&remote), "{args:?}");
    }
    let (local, remote) = p.both(&[
        "show",
        "PACK",
        "--version",
        "scored",
        "--run",
        "2",
        "--json",
    ]);
    assert_eq!(local, remote);
    // Nothing of the first commit was deleted or rewritten.
    let now = objects(moto, &p.url);
    for (key, bytes) in &first {
        assert!(now.get(key) == Some(bytes), "{key} changed");
    }
    assert_eq!(
        commit_numbers(&store(moto), &url(&p.url)).unwrap(),
        [1, 2, 3, 4]
    );
}

#[test]
fn a_url_that_is_not_a_pack_says_so() {
    let Some(moto) = moto() else { return };
    let p = Published::new(moto, "present/pack");
    let out = p.run(&["stats", "s3://packs/absent/pack"]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("s3://packs/absent/pack is not a pack"),
        "{err}"
    );
}

/// No credentials at all: a clear error at once (not a wait on the cloud's metadata
/// address); an unknown scheme is an error, never a folder.
#[test]
fn no_credentials_and_unknown_schemes_fail_at_once() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let mut env: Vec<(&str, Option<&str>)> = [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SKIP_SIGNATURE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_METADATA_ENDPOINT",
    ]
    .iter()
    .map(|k| (*k, None))
    .collect();
    env.push(("DATASET_PACKER_CACHE", Some(s(&cache))));
    let out = common::run_env(&["stats", "s3://packs/team/clean"], &env);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("s3://packs/team/clean") && err.contains("AWS_ACCESS_KEY_ID"),
        "{err}"
    );
    for args in [
        &["stats", "ftp://host/pack"][..],
        &["validate", "ftp://host/pack"],
        &["versions", "ftp://host/pack"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
            .args(args)
            .current_dir(t.path())
            .output()
            .unwrap();
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("unknown URL scheme \"ftp\""),
            "{args:?}: {err}"
        );
        assert!(!t.path().join("ftp:").exists());
    }
}

/// The library reads a URL as it reads a folder: `Pack::open` and `Pack::open_version` of the
/// remote pack give the local pack's rows, runs and steps. Run in a child process (this test
/// binary again, as `library_reader_process`), whose environment holds the credentials.
#[test]
fn the_library_opens_a_url_as_it_opens_a_folder() {
    let Some(moto) = moto() else { return };
    let p = Published::new(moto, "library/clean");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "library_reader_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(moto.env())
        .env("DATASET_PACKER_CACHE", p.cache())
        .env("REMOTE_READ_URL", &p.url)
        .env("REMOTE_READ_LOCAL", &p.local)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", common::stderr(&out));
    assert!(
        text.contains("library reader: 10 runs, 2240 rows"),
        "{text}"
    );
}

/// [`the_library_opens_a_url_as_it_opens_a_folder`]'s child (nothing when run on its own).
#[test]
fn library_reader_process() {
    let (Ok(url), Ok(local)) = (
        std::env::var("REMOTE_READ_URL"),
        std::env::var("REMOTE_READ_LOCAL"),
    ) else {
        return;
    };
    use dataset_packer::{ErrorKind, Pack, VersionSpec};
    type Rows = Vec<(u32, Vec<(u32, u8, [u8; 16], [f32; 4])>)>;
    let steps = |pack: &Pack| -> Rows {
        pack.runs()
            .unwrap()
            .map(|run| {
                let run = run.unwrap();
                let rows = run
                    .steps()
                    .map(|s| (s.step_index(), s.move_dir(), s.exponents(), s.branch_evs()))
                    .collect();
                (run.id(), rows)
            })
            .collect()
    };
    let remote = Pack::open(&url).unwrap();
    let here = Pack::open(&local).unwrap();
    assert_eq!(remote.path(), Path::new(&url));
    assert_eq!(steps(&remote), steps(&here));
    let first = Pack::open_version(&url, &VersionSpec::Number(1)).unwrap();
    assert_eq!(first.len(), here.len());
    remote.verify().unwrap();
    let missing = format!("{url}-absent");
    let err = Pack::open(&missing).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotAPack);
    assert!(err.to_string().contains(&missing), "{err}");
    println!(
        "library reader: {} runs, {} rows",
        remote.num_runs(),
        remote.len()
    );
}

/// A server that cannot be reached: after the retries, one line that names the URL and says
/// why, each cause once (the object store's errors repeat their sources' text at every
/// level, which the message leaves out).
#[test]
fn an_unreachable_server_is_named_with_each_cause_once() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let closed = format!("http://127.0.0.1:{}", common::moto::free_port());
    let env: Vec<(&str, Option<&str>)> = vec![
        ("AWS_ACCESS_KEY_ID", Some("key")),
        ("AWS_SECRET_ACCESS_KEY", Some("secret")),
        ("AWS_REGION", Some("us-east-1")),
        ("AWS_ENDPOINT_URL", Some(&closed)),
        ("AWS_ALLOW_HTTP", Some("true")),
        ("DATASET_PACKER_CACHE", Some(s(&cache))),
    ];
    let out = common::run_env(&["stats", "s3://packs/team/clean"], &env);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // The first request a reader makes: the listing of the pack's commit records.
    assert!(
        err.starts_with("error: s3://packs/team/clean/_versions: listing failed"),
        "{err}"
    );
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    assert!(err.matches("error sending request").count() <= 1, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn the_viewer_serves_a_remote_pack_as_it_serves_its_local_copy() {
    let Some(moto) = moto() else { return };
    let p = Published::new(moto, "viewed");
    let env = moto.env();
    let cache = p.cache();
    let mut vars: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    vars.push(("DATASET_PACKER_CACHE", s(&cache)));
    let remote = Server::start_env(Path::new(&p.url), &[], &vars);
    let local = Server::start(&p.local, &[]);
    assert!(remote.banner.contains(&p.url), "{}", remote.banner);
    for target in [
        "/api/runs?order=-max_score&limit=4",
        "/api/runs/3?from=20&limit=30",
        "/api/runs/7/timeline",
    ] {
        assert_eq!(remote.json(target), local.json(target), "{target}");
    }
    let (mine, theirs) = (remote.json("/api/pack"), local.json("/api/pack"));
    assert_eq!(mine["path"], p.url.as_str());
    assert_eq!(
        (&mine["rows"], &mine["runs"]),
        (&theirs["rows"], &theirs["runs"])
    );
}
