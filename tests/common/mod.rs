//! Shared helpers for the integration tests: run the real binary, find the NumPy venv,
//! read packs back.
#![allow(dead_code)]

pub mod browser;
pub mod logger;
pub mod moto;
pub mod proxy;
pub mod shaper;
pub mod viewer;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(rel: &str) -> PathBuf {
    repo().join("fixtures").join(rel)
}

/// Runs `dataset-packer ARGS…` and returns its output.
pub fn run(args: &[&str]) -> Output {
    run_env(args, &[])
}

/// [`run`] with environment variables set (`Some`) or removed (`None`).
pub fn run_env(args: &[&str], env: &[(&str, Option<&str>)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dataset-packer"));
    cmd.args(args).env_remove("RUST_LOG");
    for (name, value) in env {
        match value {
            Some(value) => cmd.env(name, value),
            None => cmd.env_remove(name),
        };
    }
    cmd.output().expect("the binary runs")
}

/// Runs the binary and asserts success, returning stdout.
pub fn run_ok(args: &[&str]) -> String {
    succeeded(args, run(args))
}

/// The stdout of a run of `dataset-packer ARGS…` that must have succeeded.
fn succeeded(args: &[&str], out: Output) -> String {
    assert!(
        out.status.success(),
        "dataset-packer {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The Python with NumPy that the interop tests use (created by scripts/test.sh).
pub fn python() -> PathBuf {
    let p = std::env::var_os("DATASET_PACKER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/test-venv/bin/python"));
    assert!(
        p.exists(),
        "no Python venv with NumPy at {}: run `bash scripts/test.sh`, which creates it",
        p.display()
    );
    p
}

/// Runs a Python script from tests/python with the venv Python; asserts success, returns stdout.
pub fn python_ok(script: &str, args: &[&str]) -> String {
    let out = Command::new(python())
        .arg(repo().join("tests/python").join(script))
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{script} {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs Python code (`python -c CODE ARGS…`) with the venv Python; asserts success, returns
/// stdout.
pub fn python_code(code: &str, args: &[&str]) -> String {
    let out = Command::new(python())
        .arg("-c")
        .arg(code)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Packs `input` into `output` with extra args, asserting success.
pub fn pack(input: &Path, output: &Path, extra: &[&str]) -> String {
    let args = pack_args(input, output, extra);
    succeeded(&args, run(&args))
}

/// `pack --input INPUT --output OUTPUT --quiet EXTRA…` with environment variables set (`Some`)
/// or removed (`None`), whatever its outcome.
pub fn pack_env(
    input: &Path,
    output: &Path,
    extra: &[&str],
    env: &[(&str, Option<&str>)],
) -> Output {
    run_env(&pack_args(input, output, extra), env)
}

fn pack_args<'a>(input: &'a Path, output: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "pack",
        "--input",
        s(input),
        "--output",
        s(output),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    args
}

/// Sorted names of the files in a folder.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Every file of a folder with its bytes, for byte-for-byte comparisons.
pub fn files(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<(String, Vec<u8>)> {
    names(dir)
        .into_iter()
        .filter(|n| keep(n))
        .map(|n| {
            let b = std::fs::read(dir.join(&n)).unwrap();
            (n, b)
        })
        .collect()
}

pub fn db(pack: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(
        pack.join("metadata.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap()
}

/// Copies a folder tree (files only, no symlinks needed).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// The base names of the runs in the raw drop `drop` (`BASE.jsonl.gz`), sorted.
pub fn run_bases(drop: &Path) -> Vec<String> {
    let mut bases: Vec<String> = std::fs::read_dir(drop)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|n| n.strip_suffix(".jsonl.gz").map(str::to_string))
        .collect();
    bases.sort();
    bases
}

/// Copies the files of the runs `bases` (sidecar and rows) from the drop `from` into `to`.
pub fn copy_runs(from: &Path, bases: &[String], to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if bases.iter().any(|b| name.starts_with(&format!("{b}."))) {
            std::fs::copy(from.join(&name), to.join(&name)).unwrap();
        }
    }
}

/// Attaches to `pack` a family `name` of one `<f4` zero per row, from a file written in
/// `scratch`; returns the pack's rows.
pub fn attach_zeros(pack: &Path, name: &str, scratch: &Path) -> usize {
    let rows = dataset_packer::Pack::open(pack).unwrap().len() as usize;
    let array = scratch.join(format!("{name}.npy"));
    let mut bytes = npy_header("'<f4'", rows);
    bytes.resize(bytes.len() + rows * 4, 0);
    std::fs::write(&array, bytes).unwrap();
    run_ok(&[
        "attach",
        s(pack),
        "--name",
        name,
        "--from",
        s(&array),
        "--quiet",
    ]);
    rows
}

/// Writes a gzip file with the given content.
pub fn write_gz(path: &Path, content: &[u8]) {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(content).unwrap();
    std::fs::write(path, e.finish().unwrap()).unwrap();
}

/// Every row of a pack (spec layout), shards concatenated in order, as 48-byte arrays.
pub fn read_rows(pack: &Path) -> Vec<[u8; 48]> {
    let mut shards: Vec<String> = names(pack)
        .into_iter()
        .filter(|n| n.starts_with("steps"))
        .collect();
    shards.sort();
    let mut rows = Vec::new();
    for name in shards {
        let bytes = std::fs::read(pack.join(name)).unwrap();
        for row in bytes[384..].chunks_exact(48) {
            rows.push(row.try_into().unwrap());
        }
    }
    rows
}

/// The `runs` table as tuples, by id.
pub fn runs_table(pack: &Path) -> Vec<(i64, i64, i64, i64, i64)> {
    db(pack)
        .prepare("SELECT id, seed, steps, max_score, highest_tile FROM runs ORDER BY id")
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Shards and valuation_types.json of a pack, byte for byte.
pub fn pack_bytes(pack: &Path) -> Vec<(String, Vec<u8>)> {
    files(pack, |n| {
        n.starts_with("steps") || n == "valuation_types.json"
    })
}

/// An .npy header (format 1.0, padded to 64 bytes) for a 1-d array with this descr.
pub fn npy_header(descr: &str, rows: usize) -> Vec<u8> {
    npy_header_shape(descr, &format!("({rows},)"))
}

/// [`npy_header`] with any shape text (`"(10, 2)"`, or a malformed one on purpose).
pub fn npy_header_shape(descr: &str, shape: &str) -> Vec<u8> {
    let mut dict = format!("{{'descr': {descr}, 'fortran_order': False, 'shape': {shape}, }}");
    while !(10 + dict.len() + 1).is_multiple_of(64) {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

/// Rewrites every shard of a pack of this tool into the legacy packed 46-byte layout, and drops
/// the `shards` table: the older tool that wrote such packs recorded no checksums.
pub fn make_legacy_pack(pack: &Path) {
    for name in names(pack).iter().filter(|n| n.starts_with("steps")) {
        make_legacy_shard(&pack.join(name));
    }
    rusqlite::Connection::open(pack.join("metadata.db"))
        .unwrap()
        .execute_batch("DROP TABLE shards")
        .unwrap();
}

/// Rewrites a shard of this tool into the legacy packed 46-byte layout an older tool wrote.
pub fn make_legacy_shard(path: &Path) {
    let b = std::fs::read(path).unwrap();
    let rows = (b.len() - 384) / 48;
    let descr = "[('run_id', '<u4'), ('step_index', '<u4'), ('board', '<u8'), ('board_eval', '<i4'), \
        ('tile_65536_mask', '<u2'), ('move_dir', '|u1'), ('valuation_type', '|u1'), ('ev_legal', '|u1'), \
        ('max_rank', '|u1'), ('seed', '<u4'), ('branch_evs', '<f4', (4,))]";
    let mut out = npy_header(descr, rows);
    for row in b[384..].chunks_exact(48) {
        out.extend_from_slice(&row[..26]);
        out.extend_from_slice(&row[28..]);
    }
    std::fs::write(path, out).unwrap();
}

/// The text of a gzip file (every member).
pub fn read_gz(path: &Path) -> String {
    use std::io::Read;
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    text
}

/// Files of a folder with their bytes.
pub type Files = Vec<(String, Vec<u8>)>;
/// The `runs` table as tuples.
pub type RunsTable = Vec<(i64, i64, i64, i64, i64)>;

/// What a pack is to a loader: its arrays (shards and companions) and valuation table byte for
/// byte, and its runs table (SQLite's pages are not byte-reproducible).
pub fn pack_view(pack: &Path) -> (Files, RunsTable) {
    let files = files(pack, |n| n.ends_with(".npy") || n == "valuation_types.json");
    (files, runs_table(pack))
}

/// Every file below `dir`, each folder's entries in name order, a subfolder's files where
/// the subfolder sorts.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    entries
        .into_iter()
        .flat_map(|p| if p.is_dir() { walk(&p) } else { vec![p] })
        .collect()
}

/// The `session` value of `key` in the pack's metadata.db, if it records one.
pub fn session_value(pack: &Path, key: &str) -> Option<String> {
    use rusqlite::OptionalExtension;
    db(pack)
        .query_row(
            "SELECT meta_value FROM session WHERE meta_key = ?1",
            [key],
            |r| r.get(0),
        )
        .optional()
        .unwrap()
}

/// Replaces every `BASE.jsonl.gz` under `dir` whose path `pick` accepts with the plain
/// `BASE.jsonl` holding its text (every member), as the logger writes without `-Z`; returns
/// the plain files made, in walk order.
pub fn unzip_rows(dir: &Path, pick: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut made = Vec::new();
    for p in walk(dir) {
        if let Some(plain) = p.to_str().unwrap().strip_suffix(".gz")
            && plain.ends_with(".jsonl")
            && pick(&p)
        {
            std::fs::write(plain, read_gz(&p)).unwrap();
            std::fs::remove_file(&p).unwrap();
            made.push(PathBuf::from(plain));
        }
    }
    made
}

/// A Python program that writes 2048former's annotation-engine output for a pack (argv: the
/// pack, an output folder, `keep` or `swap`): `annotations-0000k.npy` of its `AnnotationRow`
/// dtype in files of 1,000 rows (rows 1017 and 1018 swapped with `swap`), each row's run_id and
/// step_index the pack's, teacher_move the move played, `argmax_head` that move where
/// step_index is even and the next move where it is odd, `policy_p1` counting up; and
/// `annotations-student-0000k.npy` (float32, rows × 4 × 3) cut at 700 rows.
pub const TRAINER_ANNOTATIONS: &str = r#"
import sys, glob, numpy as np
pack, out, swap = sys.argv[1], sys.argv[2], sys.argv[3] == "swap"
rows = np.concatenate([np.load(f, mmap_mode="r") for f in sorted(glob.glob(pack + "/steps-*.npy"))])
row = np.dtype([("run_id", "<u4"), ("step_index", "<u4"), ("teacher_move", "u1"),
                ("legal_mask", "u1"), ("policy_kind_mask", "u1"), ("argmax_head", "u1"),
                ("argmax_prob", "<f4"), ("policy_p1", "<f4", (4,)),
                ("policy_logp", "<f4", (4,)), ("policy_hard", "<f4", (4,))])
a = np.zeros(len(rows), row)
a["run_id"], a["step_index"] = rows["run_id"], rows["step_index"]
a["teacher_move"] = rows["move_dir"]
a["argmax_head"] = (rows["move_dir"] + rows["step_index"] % 2) % 4
a["policy_p1"] = np.arange(len(rows) * 4, dtype="<f4").reshape(-1, 4)
if swap:
    a[[1017, 1018]] = a[[1018, 1017]]
cuts = [0, 1000, 2000, len(rows)]
for k in range(3):
    np.save(f"{out}/annotations-{k:05d}.npy", a[cuts[k]:cuts[k + 1]])
student = np.arange(len(rows) * 4 * 3, dtype="<f4").reshape(-1, 4, 3)
np.save(f"{out}/annotations-student-00000.npy", student[:700])
np.save(f"{out}/annotations-student-00001.npy", student[700:])
"#;
