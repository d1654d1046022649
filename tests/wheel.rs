//! Installing with pip, as a Python user would: `pip install .` from the repository root (a
//! maturin wheel) gives both `import dataset_packer` and a working `dataset-packer` command in
//! a fresh venv, `pip install ./python` the Python package alone, and neither leaves a file in
//! the checkout. pip fetches the build backends (maturin, flit_core) and NumPy from PyPI, as
//! the root and python/ pyproject.toml files ask; cargo builds into this suite's own target
//! folder, so the wheel's binary reuses what the suite compiled.
//!
//! That build also re-links `target/release/dataset-packer` (with the features of a plain
//! `cargo build`, not those `cargo test` unifies with the dev-dependencies), so the tests here
//! take turns ([`INSTALLS`]) and compare against a copy of the suite's binary made first.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use common::*;

/// Prints what the package sees: the module file, the command it finds, its version, and the
/// pack's rows and runs.
const PROBE: &str = "import json, sys
import dataset_packer as dp
pack = dp.Pack(sys.argv[1])
print(json.dumps({'file': dp.__file__, 'exe': dp.executable(), 'version': dp.__version__,
                  'rows': len(pack), 'runs': pack.num_runs}))";

/// Held while a test installs or runs the suite's binary, which a wheel build replaces.
static INSTALLS: Mutex<()> = Mutex::new(());

fn take_turn() -> MutexGuard<'static, ()> {
    INSTALLS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The binary cargo built for this suite.
fn cargo_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dataset-packer"))
}

/// The target folder the suite builds into (`…/target/release/dataset-packer` → `…/target`),
/// handed to maturin so that it finds the compiled crates there.
fn target_dir() -> PathBuf {
    cargo_bin().ancestors().nth(2).unwrap().to_path_buf()
}

/// Every file of the checkout but the target folder and `.git`, with its size and mtime: a
/// build that writes, rewrites or removes anything there changes this.
fn checkout_state() -> BTreeMap<PathBuf, (u64, SystemTime)> {
    fn walk(dir: &Path, skip: &[PathBuf], out: &mut BTreeMap<PathBuf, (u64, SystemTime)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            if skip.contains(&path) {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                walk(&path, skip, out);
            } else {
                let rel = path.strip_prefix(repo()).unwrap().to_path_buf();
                out.insert(rel, (meta.len(), meta.modified().unwrap()));
            }
        }
    }
    let skip = [repo().join("target"), repo().join(".git"), target_dir()];
    let mut out = BTreeMap::new();
    walk(&repo(), &skip, &mut out);
    out
}

/// Asserts that the checkout holds exactly the files it held `before`, unchanged.
fn assert_checkout_unchanged(before: &BTreeMap<PathBuf, (u64, SystemTime)>, what: &str) {
    let after = checkout_state();
    let changed: Vec<_> = before
        .keys()
        .chain(after.keys())
        .filter(|p| before.get(*p) != after.get(*p))
        .collect();
    assert!(
        changed.is_empty(),
        "{what} left files in the checkout (added, changed or removed): {changed:?}"
    );
}

/// A new venv in `dir`; returns its Python.
fn new_venv(dir: &Path) -> PathBuf {
    let out = Command::new(python())
        .args(["-m", "venv"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "venv: {}", stderr(&out));
    dir.join("bin/python")
}

/// `pip install SOURCE` into the venv of `py`, from a folder outside the checkout (so that
/// nothing can land in it by accident of the working directory); asserts success.
fn pip_install(py: &Path, source: &Path, cwd: &Path) {
    let started = Instant::now();
    let out = Command::new(py)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .arg(source)
        .current_dir(cwd)
        .env("CARGO_TARGET_DIR", target_dir())
        .env_remove("DATASET_PACKER_BIN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pip install {} failed:\n{}\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    eprintln!(
        "pip install {} took {:.1} s",
        source.display(),
        started.elapsed().as_secs_f64()
    );
}

/// Runs [`PROBE`] with the venv Python in `cwd`, with `PATH` set to `path` and
/// `$DATASET_PACKER_BIN` set or removed.
fn probe(py: &Path, cwd: &Path, pack: &Path, path: &Path, bin: Option<&Path>) -> Output {
    let mut cmd = Command::new(py);
    cmd.args(["-c", PROBE])
        .arg(pack)
        .current_dir(cwd)
        .env("PATH", path)
        .env_remove("PYTHONPATH");
    match bin {
        Some(bin) => cmd.env("DATASET_PACKER_BIN", bin),
        None => cmd.env_remove("DATASET_PACKER_BIN"),
    };
    cmd.output().unwrap()
}

/// The JSON [`PROBE`] printed, after asserting it succeeded.
fn probed(out: Output) -> serde_json::Value {
    assert!(out.status.success(), "probe failed: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A folder holding one executable `dataset-packer` (a link to `to`), to put on `PATH`.
fn folder_with_command(dir: &Path, to: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::os::unix::fs::symlink(to, dir.join("dataset-packer")).unwrap();
    dir.to_path_buf()
}

/// `--version` of a binary, e.g. "dataset-packer 0.1.0".
fn version(bin: &Path) -> String {
    let out = Command::new(bin).arg("--version").output().unwrap();
    assert!(
        out.status.success(),
        "{} --version: {}",
        bin.display(),
        stderr(&out)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The section names of a 64-bit little-endian ELF file.
fn elf_sections(elf: &[u8]) -> Vec<String> {
    assert_eq!(
        &elf[..6],
        b"\x7fELF\x02\x01",
        "a 64-bit little-endian ELF file"
    );
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap()) as usize;
    let (table, entry, count, names) = (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| table + i * entry;
    let strings = u64_at(header(names) + 0x18);
    (0..count)
        .map(|i| {
            let at = strings
                + u32::from_le_bytes(elf[header(i)..header(i) + 4].try_into().unwrap()) as usize;
            let end = elf[at..].iter().position(|&b| b == 0).unwrap();
            String::from_utf8_lossy(&elf[at..at + end]).into_owned()
        })
        .collect()
}

#[test]
fn pip_install_of_the_root_gives_the_package_and_the_command() {
    let _turn = take_turn();
    let tmp = tempfile::tempdir().unwrap();
    let reference_bin = tmp.path().join("reference-bin");
    std::fs::copy(cargo_bin(), &reference_bin).unwrap();
    let before = checkout_state();
    let py = new_venv(&tmp.path().join("venv"));
    pip_install(&py, &repo(), tmp.path());
    assert_checkout_unchanged(&before, "pip install .");

    // The command is in the venv's bin/, runs, and is the suite's binary in behaviour.
    let installed = tmp.path().join("venv/bin/dataset-packer");
    assert!(
        installed.is_file(),
        "pip install . put no {}",
        installed.display()
    );
    let cli_version = version(&installed);
    assert_eq!(cli_version, version(&reference_bin));
    // Shipped stripped (maturin's `strip`): no line tables, a fifth of the size.
    let sections = elf_sections(&std::fs::read(&installed).unwrap());
    assert!(
        !sections
            .iter()
            .any(|s| [".debug_line", ".debug_info", ".symtab"].contains(&s.as_str())),
        "the installed command keeps line tables or symbols: {sections:?}"
    );
    let (mine, reference) = (tmp.path().join("mine"), tmp.path().join("reference"));
    for (bin, out) in [(&installed, &mine), (&reference_bin, &reference)] {
        let packed = Command::new(bin)
            .args(["pack", "--quiet", "--input"])
            .arg(fixture("raw"))
            .arg("--output")
            .arg(out)
            .output()
            .unwrap();
        assert!(
            packed.status.success(),
            "{} pack: {}",
            bin.display(),
            stderr(&packed)
        );
    }
    assert_eq!(pack_bytes(&mine), pack_bytes(&reference));
    assert!(!read_rows(&mine).is_empty());
    let validated = Command::new(&installed)
        .arg("validate")
        .arg(&mine)
        .output()
        .unwrap();
    assert!(
        validated.status.success(),
        "validate: {}",
        stderr(&validated)
    );

    // The package is the venv's (not the checkout's python/), has the command's version, reads
    // the pack, and finds the command installed with it before another one on PATH.
    let decoy = folder_with_command(&tmp.path().join("decoy"), &reference_bin);
    let seen = probed(probe(&py, tmp.path(), &mine, &decoy, None));
    let file = PathBuf::from(seen["file"].as_str().unwrap());
    assert!(
        file.starts_with(tmp.path().join("venv")),
        "imported {file:?}"
    );
    assert_eq!(seen["exe"].as_str().unwrap(), installed.to_str().unwrap());
    assert_eq!(
        format!("dataset-packer {}", seen["version"].as_str().unwrap()),
        cli_version
    );
    assert_eq!(seen["rows"], read_rows(&mine).len());
    assert_eq!(seen["runs"], runs_table(&mine).len());

    // $DATASET_PACKER_BIN comes first; a wrong one is an error that names it.
    let seen = probed(probe(&py, tmp.path(), &mine, &decoy, Some(&reference_bin)));
    assert_eq!(
        seen["exe"].as_str().unwrap(),
        reference_bin.to_str().unwrap()
    );
    let missing = tmp.path().join("no-such-binary");
    let out = probe(&py, tmp.path(), &mine, &decoy, Some(&missing));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("ExecutableNotFoundError")
            && err.contains("$DATASET_PACKER_BIN")
            && err.contains(missing.to_str().unwrap()),
        "{err}"
    );
}

#[test]
fn pip_install_of_python_gives_the_package_alone() {
    let _turn = take_turn();
    let tmp = tempfile::tempdir().unwrap();
    let before = checkout_state();
    let py = new_venv(&tmp.path().join("venv"));
    pip_install(&py, &repo().join("python"), tmp.path());
    assert_checkout_unchanged(&before, "pip install ./python");
    assert!(!tmp.path().join("venv/bin/dataset-packer").exists());

    let pack = tmp.path().join("pack");
    common::pack(&fixture("raw"), &pack, &[]);
    // No command of its own: the one on PATH, else an error that says how to get one.
    let on_path = folder_with_command(&tmp.path().join("on-path"), &cargo_bin());
    let seen = probed(probe(&py, tmp.path(), &pack, &on_path, None));
    assert_eq!(
        seen["exe"].as_str().unwrap(),
        on_path.join("dataset-packer").to_str().unwrap()
    );
    assert_eq!(seen["rows"], read_rows(&pack).len());
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = probe(&py, tmp.path(), &pack, &empty, None);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("ExecutableNotFoundError: no dataset-packer command")
            && err.contains("pip install .")
            && err.contains("cargo install --path ."),
        "{err}"
    );
}
