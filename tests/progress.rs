//! Progress where there is no terminal (Slurm logs, CI, `nohup`): with stderr not a terminal, a
//! plain progress line appears at the interval `DATASET_PACKER_PROGRESS_INTERVAL` sets, with
//! the amount done, the percentage, the rate and an ETA; `--quiet` prints none.

mod common;

use std::process::Command;

use common::*;

/// A drop big enough to take more than a few progress intervals of 1 ms.
fn big_drop(t: &std::path::Path) -> std::path::PathBuf {
    let big = t.join("big");
    for i in 0..40 {
        copy_tree(&fixture("raw"), &big.join(format!("c{i:02}")));
    }
    big
}

fn pack_stderr(input: &std::path::Path, output: &std::path::Path, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
        .args(["pack", "--input", s(input), "--output", s(output)])
        .args(extra)
        .env("DATASET_PACKER_PROGRESS_INTERVAL", "0.001")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stderr(&out)
}

#[test]
fn plain_progress_lines_off_a_terminal() {
    let t = tempfile::tempdir().unwrap();
    let big = big_drop(t.path());
    let err = pack_stderr(&big, &t.path().join("p"), &[]);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("pack: ")).collect();
    assert!(!lines.is_empty(), "no progress line in:\n{err}");
    for line in &lines {
        // pack: 0.4 MB of 1.2 MB (33.1%), 12.0 MB/s, 30,000 rows, elapsed 0.0 s, ETA 0.1 s
        assert!(line.contains(" MB of "), "{line}");
        assert!(line.contains("%), "), "{line}");
        assert!(line.contains(" MB/s"), "{line}");
        assert!(line.contains("ETA "), "{line}");
        assert!(
            !line.contains('\r') && !line.contains('\x1b'),
            "no bar codes: {line:?}"
        );
    }
    let percent: Vec<f64> = lines
        .iter()
        .map(|l| {
            let open = l.find('(').unwrap();
            l[open + 1..l.find("%)").unwrap()].parse().unwrap()
        })
        .collect();
    assert!(percent.windows(2).all(|w| w[0] <= w[1]), "{percent:?}");
    assert!(
        percent.iter().all(|p| (0.0..=100.0).contains(p)),
        "{percent:?}"
    );

    let quiet = pack_stderr(&big, &t.path().join("q"), &["--quiet"]);
    assert!(
        !quiet.contains("pack: "),
        "--quiet prints no progress:\n{quiet}"
    );
}
