//! Writes a synthetic pack of any size through the public writer, for benchmarks of commands
//! that read packs (`bench/view.py`): runs of `STEPS` steps each (±50%, drawn), boards that
//! grow like a game's, moves and EVs drawn, depth 6 or 7, valuation types mixed. Deterministic.
//!
//! ```text
//! cargo run --release --example synthetic_pack -- OUT_DIR ROWS STEPS [SHARD_ROWS]
//! ```

use anyhow::{Context, Result};
use dataset_packer::{NewRun, NewStep, PackWriter, WriterOptions};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out, rows, steps, rest @ ..] = args.as_slice() else {
        anyhow::bail!("usage: synthetic_pack OUT_DIR ROWS STEPS [SHARD_ROWS]");
    };
    let rows: u64 = rows.parse().context("ROWS")?;
    let mean: u64 = steps.parse().context("STEPS")?;
    let shard_rows: u64 = match rest.first() {
        Some(s) => s.parse().context("SHARD_ROWS")?,
        None => 1_000_000,
    };
    let options = WriterOptions::default().shard_rows(shard_rows);
    let mut writer = PackWriter::create_with(out, &options)?;
    let kinds = [
        writer.valuation_type("search")?,
        writer.valuation_type("tuple11")?,
        writer.valuation_type("tuple10")?,
    ];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut written, mut run) = (0u64, 0u64);
    let mut buf = Vec::new();
    while written < rows {
        let len = (mean / 2 + next() % (mean + 1)).min(rows - written).max(1);
        buf.clear();
        let mut top = 1u8;
        for k in 0..len {
            // The largest tile grows along the game, up to 65536.
            top = top.max(((k * 16 / mean.max(1)) as u8 + 1).min(16));
            let mut exponents = [0u8; 16];
            for (i, e) in exponents.iter_mut().enumerate() {
                let r = next();
                *e = if r % 3 == 0 {
                    0
                } else {
                    ((r >> 8) % u64::from(top)) as u8 + 1
                };
                if i == 0 {
                    *e = top;
                }
            }
            let evs: [f32; 4] = std::array::from_fn(|_| (next() % 2000) as f32 / 1000.0 - 1.0);
            buf.push(NewStep {
                step_index: k as u32,
                exponents,
                move_dir: (next() % 4) as u8,
                branch_evs: evs,
                valuation_type: kinds[(next() % 3) as usize],
            });
        }
        let facts = NewRun {
            seed: run as u32,
            max_score: (len * 16) as i64,
            highest_tile: 1i64 << top,
            depth: Some(6 + (run % 2) as i64),
            source: Some(format!("synthetic/run{run:08}.meta.json")),
        };
        writer.add_run(&facts, &buf)?;
        written += len;
        run += 1;
    }
    let published = writer.publish()?;
    println!(
        "{out}: {} rows in {} runs, {} shards",
        published.rows, published.runs, published.shards
    );
    Ok(())
}
