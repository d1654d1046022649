//! Reads every row of a pack through the public reader API and reports the rate: the
//! benchmark of issue 22's "reading every row through the API runs at ≥ 1 GB/s".
//!
//! ```text
//! cargo run --release --example read_bench -- PACK_DIR [PASSES] [THREADS]
//! ```
//!
//! Each pass decodes every field of every row with the `Step` accessors (`exponents` unpacks
//! the board, `branch_evs` the four floats, …) and folds them into a checksum, so nothing is
//! optimised away; with THREADS > 1 the rows are split into that many contiguous ranges
//! (`Pack::steps_in`). GB/s counts the shard bytes (48 per row) read per second; the first
//! pass also pays for page faults (and for disk reads when the pack is not in the page cache),
//! so the best and the first pass are both printed. The checksum depends on THREADS (ranges
//! are folded separately), not on the pass.

use std::time::Instant;

use anyhow::{Context, Result};
use dataset_packer::{Pack, Steps};

/// Folds every field of every row into one number.
fn fold(steps: Steps<'_>) -> u64 {
    let mut sum = 0u64;
    for s in steps {
        let board = s.exponents();
        let cells = u64::from_le_bytes(board[..8].try_into().unwrap())
            ^ u64::from_le_bytes(board[8..].try_into().unwrap()).rotate_left(7);
        let evs = s.branch_evs();
        let legal = s.legal();
        sum = sum
            .wrapping_mul(31)
            .wrapping_add(u64::from(s.run_id()))
            .wrapping_add(u64::from(s.step_index()) << 8)
            .wrapping_add(u64::from(s.seed()) << 16)
            .wrapping_add(u64::from(s.max_rank()) ^ u64::from(s.move_dir()) << 4)
            .wrapping_add(u64::from(s.valuation_type()) << 6)
            .wrapping_add(s.board_eval() as u64)
            .wrapping_add(cells)
            .wrapping_add(u64::from(
                evs[0].to_bits() ^ evs[1].to_bits() ^ evs[2].to_bits() ^ evs[3].to_bits(),
            ))
            .wrapping_add(u64::from(legal[0]) + 2 * u64::from(legal[3]));
    }
    sum
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        anyhow::bail!("usage: read_bench PACK_DIR [PASSES] [THREADS]");
    };
    let number = |i: usize, default: u64| -> Result<u64> {
        args.get(i).map_or(Ok(default), |a| {
            a.parse().with_context(|| format!("argument {a:?}"))
        })
    };
    let passes = number(1, 5)?.max(1);
    let threads = number(2, 1)?.max(1);
    let pack = Pack::open(dir)?;
    let bytes = pack.len() as f64 * 48.0;
    let mut rates = Vec::new();
    let mut checksum = 0;
    for pass in 0..passes {
        let started = Instant::now();
        checksum = if threads == 1 {
            fold(pack.steps())
        } else {
            let per = pack.len().div_ceil(threads);
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..threads)
                    .map(|t| {
                        let pack = &pack;
                        scope.spawn(move || fold(pack.steps_in(t * per..(t + 1) * per)))
                    })
                    .collect();
                handles
                    .into_iter()
                    .fold(0u64, |acc, h| acc ^ h.join().expect("a reader thread"))
            })
        };
        let secs = started.elapsed().as_secs_f64();
        rates.push(bytes / 1e9 / secs);
        println!(
            "pass {pass}: {} rows in {secs:.3} s, {:.2} GB/s, {:.1} M rows/s",
            pack.len(),
            bytes / 1e9 / secs,
            pack.len() as f64 / 1e6 / secs
        );
    }
    let best = rates.iter().copied().fold(0.0, f64::max);
    println!(
        "{dir}: {} rows ({:.1} MB), {threads} thread(s): first pass {:.2} GB/s, best {best:.2} GB/s (checksum {checksum:016x})",
        pack.len(),
        bytes / 1e6,
        rates[0]
    );
    Ok(())
}
