//! Cookbook: split a pack's rows between workers, as a training loader does.
//!
//! ```text
//! cargo run --release --example cookbook_worker_ranges -- PACK [WORKERS]
//! ```
//!
//! Worker `w` of `n` reads the contiguous rows `w * len / n .. (w + 1) * len / n` with
//! [`Pack::steps_in`]; together the workers read every row once. `Pack` is `Sync`, so the
//! threads share one open pack. Here each worker counts the moves in its range.

use dataset_packer::Pack;

fn main() -> dataset_packer::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let path = args
        .next()
        .expect("usage: cookbook_worker_ranges PACK [WORKERS]");
    let workers: u64 = args
        .next()
        .map_or(Some(4), |w| w.to_str().and_then(|w| w.parse().ok()))
        .expect("WORKERS is a number");
    let pack = Pack::open(&path)?;

    let len = pack.len();
    let counts: Vec<[u64; 4]> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let range = w * len / workers..(w + 1) * len / workers;
                let pack = &pack;
                scope.spawn(move || {
                    let mut moves = [0u64; 4];
                    for step in pack.steps_in(range) {
                        moves[usize::from(step.move_dir())] += 1;
                    }
                    moves
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    for (w, moves) in counts.iter().enumerate() {
        println!(
            "worker {w}: up {} down {} left {} right {}",
            moves[0], moves[1], moves[2], moves[3]
        );
    }
    let rows: u64 = counts.iter().flatten().sum();
    println!("rows: {rows} of {len}");
    Ok(())
}
