//! A pack is read while it is written: one writer changes a pack folder again and again
//! (`pack --update`, `pack --overwrite`, `attach`, `detach`, `merge --output`,
//! `shuffle --output`) while readers open it in loops (`stats`, `validate`, `show`, `export`,
//! Python's `Pack()` reading every row, and the library's `Pack::open`). Every read must
//! either succeed and equal what the same reader gives on one of the versions the writer
//! made (each reader is also run on every version between two writes, when nothing else
//! runs, to know those), or it is a defect: a crash, an error, or a mix of two versions.
//!
//! It runs for `DATASET_PACKER_STRESS_SECONDS` (20 by default; thousands of reads take a few
//! minutes). `DATASET_PACKER_STRESS_BIN` runs another binary as the writer and the command
//! readers, and `DATASET_PACKER_STRESS_PYTHONPATH` puts another copy of the Python package
//! first on the Python reader's path: to count the failures of an older build.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{copy_tree, fixture, python, repo, s};

fn binary() -> PathBuf {
    std::env::var_os("DATASET_PACKER_STRESS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_dataset-packer")))
}

fn seconds() -> u64 {
    std::env::var("DATASET_PACKER_STRESS_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

/// `dataset-packer ARGS…`: (exit status as text, stdout, stderr).
fn command(args: &[&str]) -> (String, Vec<u8>, String) {
    let out = Command::new(binary())
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs");
    let status = match (
        out.status.code(),
        std::os::unix::process::ExitStatusExt::signal(&out.status),
    ) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => "no status".into(),
    };
    (
        status,
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A failed command as a reader outcome: its status and message (a deterministic refusal on
/// a version is part of that version's outcomes; a crash or a damage report is not).
fn failed(status: &str, stderr: &str) -> String {
    format!("{status}: {}", stderr.trim())
}

/// The readers, each a function of the pack's folder (and a scratch folder) to its outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Reader {
    Stats,
    Validate,
    Show,
    Export,
    Library,
}

const COMMAND_READERS: [Reader; 5] = [
    Reader::Stats,
    Reader::Validate,
    Reader::Show,
    Reader::Export,
    Reader::Library,
];

impl Reader {
    fn read(self, pack: &Path, scratch: &Path) -> String {
        match self {
            Reader::Stats => {
                let (status, out, err) = command(&["stats", s(pack), "--json"]);
                if status != "exit 0" {
                    return failed(&status, &err);
                }
                let mut json: serde_json::Value = serde_json::from_slice(&out).unwrap();
                for timing in ["elapsed_s", "phases", "workers", "leftovers"] {
                    json.as_object_mut().unwrap().remove(timing);
                }
                json.to_string()
            }
            Reader::Validate => {
                let (status, out, err) = command(&["validate", s(pack)]);
                if status != "exit 0" {
                    return failed(&status, &err);
                }
                String::from_utf8(out)
                    .unwrap()
                    .lines()
                    .filter(|l| !l.contains("leftovers of interrupted runs"))
                    .map(|l| l.split(" checked in ").next().unwrap())
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            Reader::Show => {
                let (status, out, err) = command(&["show", s(pack), "--run", "1", "--limit", "40"]);
                if status != "exit 0" {
                    return failed(&status, &err);
                }
                String::from_utf8(out).unwrap()
            }
            Reader::Export => {
                let file = scratch.join("export.jsonl");
                let _ = std::fs::remove_file(&file);
                let (status, _, err) =
                    command(&["export", s(pack), "--output", s(&file), "--quiet"]);
                if status != "exit 0" {
                    return failed(&status, &err);
                }
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::fs::read(&file).unwrap().hash(&mut h);
                format!("{:016x}", h.finish())
            }
            Reader::Library => library_read(pack).unwrap_or_else(|e| format!("error: {e:#}")),
        }
    }
}

/// `Pack::open`, every row and every companion row, hashed.
fn library_read(pack: &Path) -> dataset_packer::Result<String> {
    let pack = dataset_packer::Pack::open(pack)?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for step in pack.steps() {
        step.as_bytes().hash(&mut h);
    }
    let names: Vec<String> = pack
        .companion_names()
        .iter()
        .map(|n| n.to_string())
        .collect();
    for name in &names {
        let companion = pack.companion(name)?;
        for row in 0..pack.len() {
            companion.row(row)?.hash(&mut h);
        }
    }
    Ok(format!(
        "{:?} v{} rows={} runs={} companions={} hash={:016x}",
        pack.pack_id(),
        pack.version(),
        pack.len(),
        pack.num_runs(),
        names.join(","),
        h.finish()
    ))
}

/// The Python reader: `read_every_row.py PACK [SECONDS]`.
fn python_reader(pack: &Path, seconds: Option<f64>) -> Command {
    let mut cmd = Command::new(python());
    cmd.arg(repo().join("tests/python/read_every_row.py"))
        .arg(pack);
    if let Some(seconds) = seconds {
        cmd.arg(format!("{seconds}"));
    }
    if let Some(path) = std::env::var_os("DATASET_PACKER_STRESS_PYTHONPATH") {
        cmd.env("PYTHONPATH", path);
    }
    cmd
}

fn python_read_once(pack: &Path) -> String {
    let out = python_reader(pack, None).output().expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The writer's operations, in the order it cycles through them (each leaves the pack in a
/// state the next one accepts).
#[derive(Clone, Copy, Debug)]
enum Op {
    Overwrite,
    Update,
    Attach,
    Detach,
    Merge,
    Shuffle,
}

const CYCLE: [Op; 10] = [
    Op::Overwrite,
    Op::Update,
    Op::Attach,
    Op::Detach,
    Op::Update,
    Op::Merge,
    Op::Attach,
    Op::Detach,
    Op::Shuffle,
    Op::Overwrite,
];

struct Writer {
    root: PathBuf,
    pack: PathBuf,
    /// Every run of the fixture drops: (folder, base name).
    runs: Vec<(PathBuf, String)>,
    /// How many of them the growing drop holds.
    grown: usize,
    cycle: usize,
}

impl Writer {
    fn new(root: &Path) -> Writer {
        let mut runs = Vec::new();
        for drop in ["raw/d6_10g_v1", "raw/d7_10g_v1"] {
            let dir = fixture(drop);
            runs.extend(
                common::run_bases(&dir)
                    .into_iter()
                    .map(|b| (dir.clone(), b)),
            );
        }
        for (name, drop) in [("q6", "raw/d6_10g_v1"), ("q7", "raw/d7_10g_v1")] {
            let (status, _, err) = command(&[
                "pack",
                "--input",
                s(&fixture(drop)),
                "--output",
                s(&root.join(name)),
                "--shard-rows",
                "400",
                "--quiet",
            ]);
            assert_eq!(status, "exit 0", "{err}");
        }
        Writer {
            root: root.to_path_buf(),
            pack: root.join("pack"),
            runs,
            grown: 0,
            cycle: 0,
        }
    }

    fn drop_dir(&self) -> PathBuf {
        self.root.join("grow")
    }

    /// Makes the growing drop hold the first `n` runs.
    fn grow_to(&mut self, n: usize) {
        let drop = self.drop_dir();
        if n < self.grown || self.grown == 0 {
            let _ = std::fs::remove_dir_all(&drop);
            std::fs::create_dir_all(&drop).unwrap();
            self.grown = 0;
        }
        for (dir, base) in &self.runs[self.grown..n] {
            common::copy_runs(dir, std::slice::from_ref(base), &drop);
        }
        self.grown = n;
    }

    /// The next operation, run to completion; it must succeed.
    fn step(&mut self) -> Op {
        let op = CYCLE[self.cycle % CYCLE.len()];
        self.cycle += 1;
        let pack = s(&self.pack).to_string();
        let args: Vec<String> = match op {
            Op::Overwrite => {
                self.grow_to(2);
                let drop = s(&self.drop_dir()).to_string();
                [
                    "pack",
                    "--input",
                    &drop,
                    "--output",
                    &pack,
                    "--overwrite",
                    "--shard-rows",
                    "300",
                    "--quiet",
                ]
                .map(String::from)
                .to_vec()
            }
            Op::Update => {
                self.grow_to((self.grown + 2).min(self.runs.len()));
                let drop = s(&self.drop_dir()).to_string();
                [
                    "pack", "--input", &drop, "--output", &pack, "--update", "--quiet",
                ]
                .map(String::from)
                .to_vec()
            }
            Op::Attach => {
                let rows = dataset_packer::Pack::open(&self.pack).unwrap().len() as usize;
                let array = self.root.join("emb.npy");
                let mut bytes = common::npy_header("'<f4'", rows);
                for i in 0..rows {
                    bytes.extend_from_slice(&(i as f32 * 0.5 + self.cycle as f32).to_le_bytes());
                }
                std::fs::write(&array, bytes).unwrap();
                let array = s(&array).to_string();
                [
                    "attach", &pack, "--name", "emb", "--from", &array, "--quiet",
                ]
                .map(String::from)
                .to_vec()
            }
            Op::Detach => ["detach", &pack, "--name", "emb"]
                .map(String::from)
                .to_vec(),
            Op::Merge => {
                let (a, b) = (self.root.join("q6"), self.root.join("q7"));
                [
                    "merge",
                    s(&a),
                    s(&b),
                    "--output",
                    &pack,
                    "--overwrite",
                    "--quiet",
                ]
                .map(String::from)
                .to_vec()
            }
            Op::Shuffle => {
                let seed = self.cycle.to_string();
                let input = s(&self.root.join("q6")).to_string();
                [
                    "shuffle",
                    &input,
                    "--output",
                    &pack,
                    "--overwrite",
                    "--seed",
                    &seed,
                    "--quiet",
                ]
                .map(String::from)
                .to_vec()
            }
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (status, _, err) = command(&args);
        assert_eq!(status, "exit 0", "the writer's {op:?} failed: {err}");
        op
    }
}

/// What each reader gives on each version the writer made.
type Outcomes = Arc<Mutex<HashMap<String, HashSet<String>>>>;

fn record_versions(outcomes: &Outcomes, pack: &Path, scratch: &Path) {
    let mut found: Vec<(String, String)> = COMMAND_READERS
        .iter()
        .map(|r| (format!("{r:?}"), r.read(pack, scratch)))
        .collect();
    found.push(("Python".into(), python_read_once(pack)));
    let mut outcomes = outcomes.lock().unwrap();
    for (kind, outcome) in found {
        outcomes.entry(kind).or_default().insert(outcome);
    }
}

#[test]
fn readers_see_one_whole_version_while_the_pack_is_written() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let mut writer = Writer::new(root);
    writer.step(); // the first pack
    let outcomes: Outcomes = Arc::default();
    let scratch = root.join("scratch-writer");
    std::fs::create_dir_all(&scratch).unwrap();
    record_versions(&outcomes, &writer.pack, &scratch);

    let seconds = seconds();
    let stop = Arc::new(AtomicBool::new(false));
    let reads: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let pack = writer.pack.clone();
    let mut threads = Vec::new();
    for reader in COMMAND_READERS {
        let (stop, reads, pack) = (stop.clone(), reads.clone(), pack.clone());
        let scratch = root.join(format!("scratch-{reader:?}"));
        std::fs::create_dir_all(&scratch).unwrap();
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let outcome = reader.read(&pack, &scratch);
                reads.lock().unwrap().push((format!("{reader:?}"), outcome));
            }
        }));
    }
    let mut python = python_reader(&pack, Some(seconds as f64))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python runs");
    let python_out = python.stdout.take().unwrap();
    let python_reads = {
        let reads = reads.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(python_out).lines() {
                reads.lock().unwrap().push(("Python".into(), line.unwrap()));
            }
        })
    };

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let writes = AtomicUsize::new(0);
    let mut ops: BTreeMap<String, usize> = BTreeMap::new();
    while Instant::now() < deadline {
        let op = writer.step();
        *ops.entry(format!("{op:?}")).or_default() += 1;
        writes.fetch_add(1, Ordering::Relaxed);
        record_versions(&outcomes, &writer.pack, &scratch);
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(python.wait().unwrap().success());
    python_reads.join().unwrap();

    let outcomes = outcomes.lock().unwrap();
    let reads = reads.lock().unwrap();
    let mut table: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut defects = Vec::new();
    for (kind, outcome) in reads.iter() {
        let entry = table.entry(kind).or_default();
        entry.0 += 1;
        if !outcomes.get(kind).is_some_and(|o| o.contains(outcome)) {
            entry.1 += 1;
            if defects.len() < 20 {
                defects.push(format!("{kind}: {}", &outcome[..outcome.len().min(600)]));
            }
        }
    }
    eprintln!(
        "{} writes ({ops:?}), versions seen by the readers' references: {}",
        writes.load(Ordering::Relaxed),
        outcomes.get("Python").map_or(0, HashSet::len)
    );
    for (kind, (n, bad)) in &table {
        eprintln!("{kind:>9}: {n:>6} reads, {bad} not one whole version");
    }
    for reader in ["Stats", "Validate", "Show", "Export", "Library", "Python"] {
        assert!(
            table.get(reader).is_some_and(|(n, _)| *n > 0),
            "the {reader} reader never finished a read"
        );
    }
    assert!(
        defects.is_empty(),
        "reads that match no version the writer made:\n{}",
        defects.join("\n")
    );
}

#[test]
fn a_reader_waits_for_a_publish_under_way_instead_of_calling_the_folder_raw_logs() {
    let t = tempfile::tempdir().unwrap();
    let pack = t.path().join("pack");
    copy_tree(&fixture("raw/d6_10g_v1"), &t.path().join("raw"));
    common::pack(&t.path().join("raw"), &pack, &["--shard-rows", "500"]);
    // The moment inside a publish when the old metadata.db is out and the new one not yet
    // in: a complete staged pack waits in the staging folder.
    let staging = pack.join(".dataset-packer-staging");
    std::fs::create_dir_all(staging.join(".old")).unwrap();
    std::fs::rename(pack.join("metadata.db"), staging.join(".old/metadata.db")).unwrap();
    std::fs::copy(
        staging.join(".old/metadata.db"),
        staging.join("metadata.db"),
    )
    .unwrap();
    std::fs::write(staging.join(".complete"), "metadata.db\n").unwrap();
    let publisher = {
        let (staging, pack) = (staging.clone(), pack.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(700));
            std::fs::rename(staging.join("metadata.db"), pack.join("metadata.db")).unwrap();
            std::fs::remove_dir_all(&staging).unwrap();
        })
    };
    let started = Instant::now();
    let (status, out, err) = command(&["stats", s(&pack), "--json"]);
    publisher.join().unwrap();
    assert_eq!(status, "exit 0", "{err}");
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "it did not wait"
    );
    let json: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(json["rows"], 1220);
}
