//! Shared helpers for the integration tests: run the real binary, find the NumPy venv,
//! read packs back.
#![allow(dead_code)]

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
    Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs")
}

/// Runs the binary and asserts success, returning stdout.
pub fn run_ok(args: &[&str]) -> String {
    let out = run(args);
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

/// Packs `input` into `output` with extra args, asserting success.
pub fn pack(input: &Path, output: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "pack",
        "--input",
        s(input),
        "--output",
        s(output),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    run_ok(&args)
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

/// Writes a gzip file with the given content.
pub fn write_gz(path: &Path, content: &[u8]) {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(content).unwrap();
    std::fs::write(path, e.finish().unwrap()).unwrap();
}
