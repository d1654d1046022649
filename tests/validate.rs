//! `validate` end to end: a valid pack passes; each way a pack goes wrong in practice is caught
//! with the right check, a concrete example and exit 1.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// A fresh sharded pack of the fixture drop (2240 rows in 5 shards of 500).
fn fresh_pack(t: &Path, name: &str) -> PathBuf {
    let out = t.join(name);
    pack(&fixture("raw"), &out, &["--shard-rows", "500"]);
    out
}

/// Runs validate --json; returns (exit code, report).
fn validate(pack: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["validate", s(pack), "--json"];
    args.extend_from_slice(extra);
    let out = run(&args);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        )
    });
    (out.status.code().unwrap(), report)
}

/// Asserts the pack is invalid, the named check failed, and an example contains `needle`.
fn assert_caught(pack: &Path, check: &str, needle: &str) {
    let (code, report) = validate(pack, &["--deep"]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["valid"], false);
    let c = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == check);
    let c = c.unwrap_or_else(|| panic!("no check {check:?} in {report:#}"));
    assert_eq!(c["status"], "failed", "{check}: {report:#}");
    assert!(
        c["examples"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap().contains(needle)),
        "{check}: no example with {needle:?}: {c:#}"
    );
}

fn patch(path: &Path, offset: u64, bytes: &[u8]) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
}

/// Byte offset of row `row`, column byte `col` in a shard of this tool.
fn at(row: u64, col: u64) -> u64 {
    384 + row * 48 + col
}

fn sql(pack: &Path, statement: &str) {
    rusqlite::Connection::open(pack.join("metadata.db"))
        .unwrap()
        .execute_batch(statement)
        .unwrap();
}

#[test]
fn a_valid_pack_passes_human_and_json() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    let (code, report) = validate(&p, &["--deep"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["valid"], true);
    assert_eq!(report["rows"], 2240);
    assert_eq!(report["runs"], 10);
    assert_eq!(report["shards"], 5);
    assert!(
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"] == "ok"),
        "{report:#}"
    );
    let text = run_ok(&["validate", s(&p)]);
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("VALID: 2,240 rows, 10 runs, 5 shards"),
        "{text}"
    );
}

#[test]
fn findings_are_reported_but_the_pack_is_valid() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("f");
    pack(&fixture("findings"), &p, &[]);
    let (code, report) = validate(&p, &[]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["findings"]["illegal_move_played"]["count"], 1);
    assert_eq!(report["findings"]["ev_on_illegal_move"]["count"], 1);
    let text = run_ok(&["validate", s(&p)]);
    assert!(text.contains("illegal_move_played: 1"), "{text}");
}

#[test]
fn flipped_byte_in_a_row() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    let shard = p.join("steps-00001.npy");
    let mut b = std::fs::read(&shard).unwrap();
    b[at(7, 9) as usize] ^= 0x10; // a board nibble: only the checksum (and deep) can tell
    std::fs::write(&shard, b).unwrap();
    assert_caught(&p, "shard checksums", "steps-00001.npy: crc32c recorded");
    assert_caught(
        &p,
        "deep: board_eval and ev_legal recomputed",
        "steps-00001.npy row 7",
    );
}

#[test]
fn truncated_shard() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(p.join("steps-00002.npy"))
        .unwrap();
    f.set_len(384 + 100 * 48 + 17).unwrap();
    assert_caught(
        &p,
        "shard files and headers",
        "steps-00002.npy: file is 5201 bytes, the header promises 24384",
    );
}

#[test]
fn deleted_middle_shard() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    std::fs::remove_file(p.join("steps-00002.npy")).unwrap();
    assert_caught(&p, "shard files and headers", "not contiguous");
    assert_caught(&p, "rows per run = runs.steps", "rows found");
}

#[test]
fn extra_stray_shards() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    std::fs::copy(p.join("steps-00000.npy"), p.join("steps-00005.npy")).unwrap();
    assert_caught(&p, "shard checksums", "records 5 shards, the folder has 6");
    let q = fresh_pack(t.path(), "q");
    std::fs::copy(q.join("steps-00000.npy"), q.join("steps-00000 (copy).npy")).unwrap();
    assert_caught(
        &q,
        "shard files and headers",
        "stray file steps-00000 (copy).npy",
    );
}

#[test]
fn header_of_another_dtype() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    let mut npy = npy_header("'<f8'", 2);
    npy.extend_from_slice(&[0u8; 16]);
    std::fs::write(p.join("steps-00004.npy"), npy).unwrap();
    assert_caught(
        &p,
        "shard files and headers",
        "steps-00004.npy: dtype '<f8' is not the pack row dtype",
    );
}

#[test]
fn legacy_packed_shard() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    make_legacy_shard(&p.join("steps-00004.npy"));
    assert_caught(
        &p,
        "shard files and headers",
        "steps-00004.npy is a legacy packed 46-byte shard",
    );
    let (_, report) = validate(&p, &[]);
    assert!(
        report
            .to_string()
            .contains("--format pack --output NEW_PACK` (or `merge`) converts it"),
        "{report:#}"
    );
}

#[test]
fn runs_steps_off_by_one() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    sql(&p, "UPDATE runs SET steps = steps + 1 WHERE id = 4");
    assert_caught(&p, "rows per run = runs.steps", "run 4: runs.steps is");
}

#[test]
fn run_missing_from_runs() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    sql(&p, "DELETE FROM runs WHERE id = 3");
    assert_caught(&p, "run_id in runs", "run_id 3 is not in runs");
}

#[test]
fn undefined_valuation_id() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    patch(&p.join("steps-00003.npy"), at(11, 23), &[200]);
    assert_caught(&p, "valuation_type defined", "steps-00003.npy row 11 (run");
}

#[test]
fn valuation_types_json_missing() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    std::fs::remove_file(p.join("valuation_types.json")).unwrap();
    assert_caught(&p, "valuation_types.json", "valuation_types.json");
}

#[test]
fn metadata_db_of_another_pack() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    let other = t.path().join("other");
    pack(&fixture("findings"), &other, &["--shard-rows", "500"]);
    std::fs::copy(other.join("metadata.db"), p.join("metadata.db")).unwrap();
    assert_caught(&p, "shard checksums", "records 1 shards, the folder has 5");
    assert_caught(&p, "rows per run = runs.steps", "the shards hold 2240 rows");
}

#[test]
fn non_zero_padding() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    patch(&p.join("steps-00000.npy"), at(3, 27), &[0xab]);
    assert_caught(
        &p,
        "padding bytes zero",
        "steps-00000.npy row 3 (run 0): padding bytes are 00 ab",
    );
}

#[test]
fn nan_ev() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    patch(
        &p.join("steps-00000.npy"),
        at(5, 36),
        &f32::NAN.to_le_bytes(),
    );
    assert_caught(&p, "branch_evs finite", "steps-00000.npy row 5 (run 0)");
}

#[test]
fn other_row_corruptions() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    patch(&p.join("steps-00000.npy"), at(1, 22), &[4]);
    patch(&p.join("steps-00000.npy"), at(2, 24), &[16]);
    patch(&p.join("steps-00000.npy"), at(3, 20), &[1, 0]); // mask on cell 0, whose nibble is not 15
    patch(&p.join("steps-00000.npy"), at(4, 4), &[99, 0, 0, 0]); // step_index out of order
    assert_caught(&p, "move_dir <= 3", "row 1 (run 0): move_dir is 4");
    assert_caught(&p, "ev_legal <= 15", "row 2 (run 0): ev_legal is 16");
    assert_caught(
        &p,
        "tile_65536_mask on nibble-15 cells only",
        "row 3 (run 0)",
    );
    assert_caught(
        &p,
        "run rows contiguous, step_index increasing",
        "run 0: step_index is not strictly increasing",
    );
}

#[test]
fn run_index_pointing_elsewhere() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    sql(
        &p,
        "UPDATE run_index SET row_offset = row_offset + 1, global_row = global_row + 1 WHERE run_id = 2",
    );
    assert_caught(
        &p,
        "run index points at each run's first row",
        "run 2: run_index says global row",
    );
}

#[test]
fn a_pack_from_another_tool_without_checksums_is_checked_for_the_rest() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh_pack(t.path(), "p");
    sql(&p, "DROP TABLE shards; DROP TABLE run_index;");
    let (code, report) = validate(&p, &[]);
    assert_eq!(code, 0, "{report:#}");
    let c = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "shard checksums")
        .unwrap();
    assert_eq!(c["status"], "skipped");
    assert!(
        c["note"]
            .as_str()
            .unwrap()
            .contains("no checksums recorded")
    );
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(run(&["validate"]).status.code(), Some(2));
    assert_eq!(
        run(&["validate", "x", "--workers", "0"]).status.code(),
        Some(2)
    );
}
