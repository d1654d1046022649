//! Prints one run of a pack move by move, through the public reader API.
//!
//! ```text
//! cargo run --release --example read_run -- PACK_DIR RUN_ID
//! ```

use std::io::Write;

use anyhow::{Context, Result};
use dataset_packer::Pack;

const MOVES: [&str; 4] = ["up", "down", "left", "right"];

fn main() -> Result<()> {
    match print_run() {
        // `read_run … | head` closes the pipe: not an error.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        other => other,
    }
}

fn print_run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(id)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: read_run PACK_DIR RUN_ID");
    };
    let id: u32 = id.parse().with_context(|| format!("run id {id:?}"))?;
    let pack = Pack::open(&dir)?;
    let run = pack.run(id)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    writeln!(out, "run {} of {dir}: {} steps", run.id(), run.len())?;
    for step in run.steps() {
        let tiles: Vec<String> = step
            .exponents()
            .iter()
            .map(|&e| {
                if e == 0 {
                    ".".into()
                } else {
                    (1u32 << e).to_string()
                }
            })
            .collect();
        let legal: String = step
            .legal()
            .iter()
            .zip(MOVES)
            .map(|(&ok, m)| if ok { &m[..1] } else { "-" })
            .collect();
        writeln!(
            out,
            "{:>6}  {:<5} legal {legal}  {} ev {:?}  board {}",
            step.step_index(),
            MOVES[step.move_dir() as usize],
            pack.valuation_names()[step.valuation_type() as usize],
            step.branch_evs(),
            tiles.join(" ")
        )?;
    }
    out.flush()?;
    Ok(())
}
