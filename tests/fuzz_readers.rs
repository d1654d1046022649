//! Every reader of untrusted bytes never panics and never hangs, whatever it is given: `.npy`
//! headers, NumPy dtype literals, `valuation_types.json`, gzip streams, sidecars (random bytes
//! and damaged valid inputs, in process), and `metadata.db` (random cell values, dropped tables
//! and columns, random bytes written into the file) under every command that reads a pack,
//! run as the real binary with a time limit.
//!
//! `DATASET_PACKER_FUZZ_CASES=N` scales the number of cases (docs/testing.md).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use dataset_packer::format::dtype::{Dtype, parse_literal};
use dataset_packer::format::npy::{self, array_header, parse_array_header, parse_header};
use dataset_packer::format::valuation::ValuationTable;
use dataset_packer::raw::gzip::Gunzipper;
use dataset_packer::raw::sidecar::parse_sidecar;
use dataset_packer::rng::Xoshiro;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn cases(default: u32) -> u32 {
    std::env::var("DATASET_PACKER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `body` on a thread of its own and fails if it takes longer than `limit` (a hang).
fn within(limit: Duration, what: &str, body: impl FnOnce() + Send + 'static) {
    let (done, wait) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        body();
        let _ = done.send(());
    });
    match wait.recv_timeout(limit) {
        Ok(()) => worker.join().unwrap(),
        // The body panicked: join to report its message.
        Err(mpsc::RecvTimeoutError::Disconnected) => worker.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: no answer within {limit:?} (a hang)")
        }
    }
}

/// Runs a property over `strategy` with `n` cases (each case must not panic).
fn property<S>(
    what: &'static str,
    n: u32,
    strategy: S,
    check: impl Fn(S::Value) + Send + Sync + 'static,
) where
    S: Strategy + Send + 'static,
    S::Value: Send,
{
    within(Duration::from_secs(600), what, move || {
        let mut runner = TestRunner::new(Config {
            cases: n,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&strategy, |v| {
                check(v);
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    });
}

/// A valid input damaged: bytes flipped, inserted, removed, or the whole cut short.
fn damaged(valid: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(valid),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..4),
    )
        .prop_map(|(mut b, edits)| {
            for (at, byte, how) in edits {
                let i = at.index(b.len().max(1));
                match how {
                    0 if !b.is_empty() => b[i] ^= byte | 1,
                    1 => b.insert(i.min(b.len()), byte),
                    2 if !b.is_empty() => {
                        b.remove(i);
                    }
                    _ => b.truncate(i),
                }
            }
            b
        })
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..700)
}

#[test]
fn npy_headers_and_dtypes_never_panic() {
    let valid: Vec<Vec<u8>> = vec![
        npy::header(7),
        array_header("'<f4'", &[10, 64]),
        array_header("[('a', '<u2'), ('', '|V2'), ('b', '<i4', (2, 3))]", &[5]),
        array_header(
            "{'names': ['x'], 'formats': ['<f8'], 'offsets': [8], 'itemsize': 24}",
            &[3],
        ),
        array_header("'<U7'", &[2, 2]),
    ];
    let check = |b: Vec<u8>| {
        if let Ok(h) = parse_header(&b) {
            assert!(h.data_offset <= b.len());
        }
        if let Ok(h) = parse_array_header(&b) {
            assert!(h.data_offset <= b.len());
            let _ = h.row_bytes();
            let _ = h.dtype.size();
        }
    };
    property("npy headers (random bytes)", cases(512), bytes(), check);
    property("npy headers (damaged)", cases(512), damaged(valid), check);
    property("dtype literals", cases(512), ".{0,80}", |text: String| {
        if let Ok(l) = parse_literal(&text)
            && let Ok(d) = Dtype::from_descr(&l)
        {
            let _ = (d.size(), d.has_objects());
        }
    });
    // A shape whose product overflows is refused, not wrapped.
    let h = array_header("'<f8'", &[3, u64::MAX / 2, 16]);
    let parsed = parse_array_header(&h).unwrap();
    assert_eq!(parsed.row_bytes(), None);
    // So is a sub-array whose size overflows (or passes NumPy's item size limit).
    let nested =
        Dtype::from_descr(&parse_literal("[('a', '<f8', (4294967296, 4294967296, 16))]").unwrap());
    assert!(nested.is_err(), "{nested:?}");
}

#[test]
fn valuation_tables_never_panic() {
    let valid: Vec<Vec<u8>> = vec![
        br#"["search", "tuple11", "tuple10", "nn"]"#.to_vec(),
        br#"{"0": "search", "1": "tuple11", "2": "tuple10"}"#.to_vec(),
        br#"{"search": 0, "tuple11": 1, "tuple10": 2, "x": 3}"#.to_vec(),
    ];
    let check = |b: Vec<u8>| {
        if let Ok(text) = String::from_utf8(b)
            && let Ok(t) = ValuationTable::from_json(&text)
        {
            assert!(t.len() <= 256);
            let mut names = t.names().to_vec();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), t.len(), "names are unique");
        }
    };
    property("valuation_types.json (random)", cases(512), bytes(), check);
    property(
        "valuation_types.json (damaged)",
        cases(512),
        damaged(valid),
        check,
    );
    let big: Vec<String> = (0..300).map(|i| format!("n{i}")).collect();
    assert!(ValuationTable::from_json(&serde_json::to_string(&big).unwrap()).is_err());
}

fn gzip(data: &[u8], level: u32) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn gzip_streams_never_panic() {
    let text = b"{\"move\":\"up\"}\n".repeat(300);
    let mut two = gzip(&text, 6);
    two.extend(gzip(b"second member\n", 1));
    let valid = vec![gzip(&text, 6), gzip(&text, 9), two, gzip(b"", 6)];
    let check = |b: Vec<u8>| {
        let mut out = Vec::new();
        let started = Instant::now();
        let _ = Gunzipper::new().decompress_all(&b, &mut out);
        assert!(
            out.len() <= b.len() * 1032 + 4096,
            "more out than deflate allows"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    };
    property("gzip (random)", cases(512), bytes(), check);
    property("gzip (damaged)", cases(1024), damaged(valid), check);
    // A trailer that claims 4 GiB does not make the reader reserve 4 GiB.
    let mut lying = gzip(b"tiny", 6);
    let n = lying.len();
    lying[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut out = Vec::new();
    assert!(Gunzipper::new().decompress_all(&lying, &mut out).is_err());
    assert!(
        out.capacity() < 1 << 20,
        "reserved {} bytes",
        out.capacity()
    );
}

#[test]
fn sidecars_never_panic() {
    let valid: Vec<Vec<u8>> = vec![
        br#"{"seed":272350805,"depth":6,"game_index":0,"steps_file":"x.jsonl.gz","num_moves":27885,"score":795564,"max_tile":32768,"max_rank":15,"sum_tile":61434,"seconds":50.247026}"#.to_vec(),
        br#"{"seed":1,"num_moves":0,"score":0,"max_tile":0}"#.to_vec(),
    ];
    let check = |b: Vec<u8>| {
        let _ = parse_sidecar(&b);
    };
    property("sidecars (random)", cases(512), bytes(), check);
    property("sidecars (damaged)", cases(1024), damaged(valid), check);
}

// ---------------------------------------------------------------------------------------------
// metadata.db, through the real binary

/// One way of damaging a copy of a pack's metadata.db, chosen by `rng`; says what it did.
fn damage_db(db_path: &Path, rng: &mut Xoshiro) -> String {
    let tables = rusqlite::Connection::open(db_path)
        .ok()
        .and_then(|c| table_names(&c));
    let how = rng.below(4);
    match tables {
        Some(tables) if how < 3 && !tables.is_empty() => {
            let conn = rusqlite::Connection::open(db_path).unwrap();
            let table = &tables[rng.below(tables.len() as u64) as usize];
            if how == 2 {
                let _ = conn.execute_batch(&format!("DROP TABLE \"{table}\""));
                return format!("dropped {table}");
            }
            let columns = metadata_columns(&conn, table);
            if columns.is_empty() {
                return "nothing".into();
            }
            let column = &columns[rng.below(columns.len() as u64) as usize];
            let values = [
                "NULL",
                "-1",
                "9223372036854775807",
                "-9223372036854775808",
                "4294967296",
                "1.5e300",
                "'x'",
                "''",
                "'0123456789abcdef0123456789abcdef'",
                "X'DEADBEEF'",
                "'steps-00000.npy'",
                "'../../etc/passwd'",
            ];
            let value = values[rng.below(values.len() as u64) as usize];
            let sql = format!(
                "UPDATE \"{table}\" SET \"{column}\" = {value} WHERE rowid IN (SELECT rowid FROM \"{table}\" ORDER BY random() LIMIT {})",
                1 + rng.below(3)
            );
            let _ = conn.execute_batch(&sql);
            format!("{table}.{column} = {value}")
        }
        _ => {
            let mut b = std::fs::read(db_path).unwrap();
            let at = rng.below(b.len() as u64) as usize;
            let n = 1 + rng.below(64) as usize;
            for i in at..(at + n).min(b.len()) {
                b[i] = rng.next_u64() as u8;
            }
            std::fs::write(db_path, b).unwrap();
            format!("{n} random bytes at {at}")
        }
    }
}

fn table_names(conn: &rusqlite::Connection) -> Option<Vec<String>> {
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .ok()?;
    let names = stmt.query_map([], |r| r.get(0)).ok()?;
    names.collect::<Result<Vec<String>, _>>().ok()
}

fn metadata_columns(conn: &rusqlite::Connection, table: &str) -> Vec<String> {
    let Ok(mut stmt) = conn.prepare(&format!("PRAGMA table_info(\"{table}\")")) else {
        return Vec::new();
    };
    stmt.query_map([], |r| r.get(1))
        .map(|rows| rows.filter_map(Result::ok).collect())
        .unwrap_or_default()
}

/// Runs the binary with a time limit; fails on a panic, a signal or a hang.
fn run_bounded(args: &[&str], what: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            assert!(
                matches!(status.code(), Some(0..=2)),
                "{what}: {args:?} ended with {status}:\n{err}"
            );
            assert!(
                !err.contains("panicked"),
                "{what}: {args:?} panicked:\n{err}"
            );
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn damaged_metadata_never_panics_any_command() {
    let t = tempfile::tempdir().unwrap();
    let good = t.path().join("good");
    pack(&fixture("findings"), &good, &["--shard-rows", "300"]);
    let other = t.path().join("other");
    pack(&fixture("raw/d6_10g_v1"), &other, &[]);
    // Seeds that found bugs, kept: 0xdc62 (runs.highest_tile = i64::MAX made stats loop
    // doubling a tile past i64 until memory ran out).
    let found = [0xdc62u64];
    let n = u64::from(cases(12));
    let seeds = found.into_iter().chain((0..n).map(|c| 0xdb00 + c));
    for (case, seed) in seeds.enumerate() {
        let mut rng = Xoshiro::new(seed);
        let p = t.path().join(format!("case{case}"));
        copy_tree(&good, &p);
        let mut damage = Vec::new();
        for _ in 0..1 + rng.below(3) {
            damage.push(damage_db(&p.join("metadata.db"), &mut rng));
        }
        let what = format!("seed {seed:#x} ({})", damage.join("; "));
        let out = t.path().join(format!("out{case}"));
        let o = |name: &str| out.join(name).to_string_lossy().into_owned();
        std::fs::create_dir_all(&out).unwrap();
        let pack_s = s(&p);
        let commands: Vec<Vec<String>> = vec![
            vec!["validate".into(), pack_s.into()],
            vec![
                "validate".into(),
                pack_s.into(),
                "--deep".into(),
                "--json".into(),
            ],
            vec!["stats".into(), pack_s.into(), "--json".into()],
            vec![
                "report".into(),
                pack_s.into(),
                s(&other).into(),
                "--output".into(),
                o("r.html"),
                "--quiet".into(),
            ],
            vec!["show".into(), pack_s.into(), "--run".into(), "2".into()],
            vec![
                "export".into(),
                pack_s.into(),
                "--format".into(),
                "parquet".into(),
                "--output".into(),
                o("x.parquet"),
            ],
            vec![
                "export".into(),
                pack_s.into(),
                "--format".into(),
                "pack".into(),
                "--output".into(),
                o("sub"),
                "--where".into(),
                "depth >= 0".into(),
            ],
            vec![
                "export".into(),
                pack_s.into(),
                "--format".into(),
                "jsonl".into(),
                "--output".into(),
                o("raw"),
            ],
            vec![
                "merge".into(),
                "--input".into(),
                s(&other).into(),
                "--input".into(),
                pack_s.into(),
                "--output".into(),
                o("merged"),
            ],
            vec![
                "shuffle".into(),
                "--input".into(),
                pack_s.into(),
                "--output".into(),
                o("sh"),
                "--quiet".into(),
            ],
            vec![
                "pack".into(),
                "--input".into(),
                s(&fixture("raw")).into(),
                "--output".into(),
                pack_s.into(),
                "--update".into(),
                "--quiet".into(),
            ],
        ];
        for args in &commands {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_bounded(&args, &what);
        }
    }
}
