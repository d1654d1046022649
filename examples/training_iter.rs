//! A small training-data iterator over a pack, through the public reader API: every epoch
//! visits every row once, in a new random order, in batches of model inputs (board exponents,
//! legal-move mask) and targets (the move played, the branch EVs).
//!
//! ```text
//! cargo run --release --example training_iter -- PACK_DIR [BATCH_SIZE] [EPOCHS] [SEED]
//! ```

use anyhow::{Context, Result};
use dataset_packer::Pack;

/// One batch, column by column (what a tensor library takes).
#[derive(Default)]
struct Batch {
    boards: Vec<[u8; 16]>,
    legal: Vec<[bool; 4]>,
    moves: Vec<u8>,
    evs: Vec<[f32; 4]>,
}

/// Batches of rows in a shuffled order: the order is a permutation of all row indices, so
/// every row is seen once per epoch, the last batch possibly short.
struct Batches<'a> {
    pack: &'a Pack,
    order: Vec<u64>,
    next: usize,
    batch_size: usize,
}

impl<'a> Batches<'a> {
    fn new(pack: &'a Pack, batch_size: usize, rng: &mut SplitMix) -> Batches<'a> {
        let mut order: Vec<u64> = (0..pack.len()).collect();
        // Fisher–Yates.
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        Batches {
            pack,
            order,
            next: 0,
            batch_size,
        }
    }
}

impl Iterator for Batches<'_> {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        let rows = self.order.get(self.next..)?;
        if rows.is_empty() {
            return None;
        }
        let rows = &rows[..rows.len().min(self.batch_size)];
        self.next += rows.len();
        let mut batch = Batch::default();
        for &row in rows {
            let step = match self.pack.row(row) {
                Ok(step) => step,
                Err(e) => return Some(Err(e.into())),
            };
            batch.boards.push(step.exponents());
            batch.legal.push(step.legal());
            batch.moves.push(step.move_dir());
            batch.evs.push(step.branch_evs());
        }
        Some(Ok(batch))
    }
}

/// splitmix64: enough randomness for a shuffle, and reproducible from a seed.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0), by Lemire's multiply-shift (bias below 2^-32 for any pack).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        anyhow::bail!("usage: training_iter PACK_DIR [BATCH_SIZE] [EPOCHS] [SEED]");
    };
    let number = |i: usize, default: u64| -> Result<u64> {
        args.get(i).map_or(Ok(default), |a| {
            a.parse().with_context(|| format!("argument {a:?}"))
        })
    };
    let batch_size = number(1, 256)?.max(1) as usize;
    let epochs = number(2, 1)?;
    let mut rng = SplitMix(number(3, 0)?);
    let pack = Pack::open(dir)?;
    println!(
        "{dir}: {} rows, {} runs, valuation types {:?}",
        pack.len(),
        pack.num_runs(),
        pack.valuation_names()
    );
    for epoch in 0..epochs {
        let started = std::time::Instant::now();
        let (mut batches, mut rows, mut legal_played) = (0u64, 0u64, 0u64);
        let mut move_counts = [0u64; 4];
        for batch in Batches::new(&pack, batch_size, &mut rng) {
            let batch = batch?;
            batches += 1;
            rows += batch.moves.len() as u64;
            for (&m, legal) in batch.moves.iter().zip(&batch.legal) {
                move_counts[m as usize] += 1;
                legal_played += u64::from(legal[m as usize]);
            }
            debug_assert_eq!(batch.boards.len(), batch.evs.len());
        }
        println!(
            "epoch {epoch}: {batches} batches, {rows} rows in {:.2} s; moves up/down/left/right {move_counts:?}; {legal_played} played moves legal",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
