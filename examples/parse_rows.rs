//! Row-parser microbenchmark: how long the fast path takes per row, without decompression,
//! threads or output.
//!
//! ```text
//! cargo run --release --example parse_rows -- FILE.jsonl.gz... [--repeat 30] [--rounds 7]
//! ```
//!
//! Decompresses the files once into one text, then parses every line `--repeat` times with
//! the path `pack` takes for the logger's layout, `--rounds` times, and prints the best round's
//! ns per row and MB/s of JSON: once as `pack` reads rows whose search statistics it does not
//! keep (`checked`: the counts are checked, not converted), once as with `--search-stats`
//! (`kept`). A line the fast path does not take counts as a failure and is reported.

use std::time::Instant;

use dataset_packer::raw::gzip::Gunzipper;
use dataset_packer::raw::row::{RowMemo, parse_row_in_place_with};

fn main() {
    let mut files = Vec::new();
    let (mut repeat, mut rounds) = (30usize, 7usize);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = || -> usize {
            let value = args.next().unwrap_or_default();
            value
                .parse()
                .unwrap_or_else(|_| panic!("{arg} takes a number"))
        };
        match arg.as_str() {
            "--repeat" => repeat = number(),
            "--rounds" => rounds = number(),
            _ => files.push(arg),
        }
    }
    assert!(
        !files.is_empty(),
        "usage: parse_rows FILE.jsonl.gz... [--repeat N] [--rounds N]"
    );
    let mut text = Vec::new();
    let mut one = Vec::new();
    for path in &files {
        let compressed = std::fs::read(path).expect("readable file");
        Gunzipper::new()
            .decompress_all(&compressed, &mut one)
            .expect("valid gzip");
        text.extend_from_slice(&one);
    }
    for kept in [false, true] {
        let mut best = f64::MAX;
        let mut rows = 0;
        let mut checksum = 0;
        for _ in 0..rounds {
            let start = Instant::now();
            for _ in 0..repeat {
                (rows, checksum) = if kept {
                    parse_all::<true>(&text)
                } else {
                    parse_all::<false>(&text)
                };
            }
            best = best.min(start.elapsed().as_secs_f64() / repeat as f64);
        }
        println!(
            "{}: {rows} rows, {:.1} ns/row, {:.0} MB/s of JSON (best of {rounds} rounds of \
             {repeat}; checksum {checksum:x})",
            if kept { "kept   " } else { "checked" },
            best * 1e9 / rows as f64,
            text.len() as f64 / 1e6 / best
        );
    }
}

/// Parses every line of `text`: (rows, a checksum that keeps the parse from being optimised
/// away).
fn parse_all<const KEEP: bool>(text: &[u8]) -> (u64, u64) {
    #[cfg(target_arch = "x86_64")]
    if dataset_packer::raw::row_x86::available() {
        // SAFETY: `available` checked the CPU features.
        return unsafe { parse_all_avx2::<KEEP>(text) };
    }
    // SAFETY: without the vector path there is nothing to promise.
    unsafe { parse_all_with::<false, KEEP>(text) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,popcnt")]
unsafe fn parse_all_avx2<const KEEP: bool>(text: &[u8]) -> (u64, u64) {
    // SAFETY: the caller's promise.
    unsafe { parse_all_with::<true, KEEP>(text) }
}

/// The loop `pack` runs over a rows file's text, without the rest of the row's handling.
#[inline(always)]
unsafe fn parse_all_with<const VECTOR: bool, const KEEP: bool>(text: &[u8]) -> (u64, u64) {
    let mut memo = RowMemo::default();
    let (mut rows, mut checksum, mut pos) = (0u64, 0u64, 0usize);
    while pos < text.len() {
        // SAFETY: the caller's promise (VECTOR only where `available` checked).
        let parsed = unsafe { parse_row_in_place_with::<VECTOR, KEEP>(&text[pos..], &mut memo) };
        let Some((row, used)) = parsed else {
            eprintln!("the fast path gave up at byte {pos}");
            std::process::exit(1);
        };
        checksum = checksum.wrapping_add(
            u64::from(row.branch_evs[0].to_bits())
                ^ u64::from(row.board[3])
                ^ row.search.counts[3]
                ^ u64::from(row.search.used),
        );
        rows += 1;
        pos += used;
    }
    (rows, checksum)
}
