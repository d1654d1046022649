//! Row-parser microbenchmark: how long the fast path takes per row, without decompression,
//! threads or output.
//!
//! ```text
//! cargo run --release --example parse_rows -- FILE.jsonl.gz [--repeat 20]
//! ```
//!
//! Decompresses FILE once, then parses every line `--repeat` times with
//! `parse_row_in_place` (the path `pack` takes for the logger's layout) and prints ns per row
//! and MB/s of JSON. A line the fast path does not take counts as a failure and is reported.

use std::time::Instant;

use dataset_packer::raw::gzip::Gunzipper;
use dataset_packer::raw::row::{RowMemo, parse_row_in_place};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: parse_rows FILE.jsonl.gz [--repeat N]");
    let repeat: usize = match (args.next().as_deref(), args.next()) {
        (Some("--repeat"), Some(n)) => n.parse().expect("--repeat takes a number"),
        _ => 20,
    };
    let compressed = std::fs::read(&path).expect("readable file");
    let mut text = Vec::new();
    Gunzipper::new()
        .decompress_all(&compressed, &mut text)
        .expect("valid gzip");
    let mut rows = 0u64;
    let mut checksum = 0u64; // keeps the parse from being optimised away
    let start = Instant::now();
    for _ in 0..repeat {
        let mut pos = 0;
        let mut memo = RowMemo::default();
        while pos < text.len() {
            let Some((row, used)) = parse_row_in_place(&text[pos..], &mut memo) else {
                eprintln!("the fast path gave up at byte {pos}");
                std::process::exit(1);
            };
            checksum = checksum
                .wrapping_add(u64::from(row.branch_evs[0].to_bits()) ^ u64::from(row.board[3]));
            rows += 1;
            pos += used;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{rows} rows in {seconds:.3} s: {:.1} ns/row, {:.0} MB/s of JSON (checksum {checksum:x})",
        seconds * 1e9 / rows as f64,
        (text.len() * repeat) as f64 / 1e6 / seconds
    );
}
