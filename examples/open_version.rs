//! Times `Pack::open_version` (issue 29: opening a version costs no more than opening the pack):
//! the median of 7 opens of each version given, e.g. on the 40M-row pack of 365 versions that
//! `bench/python_open_version.py --keep DIR` fabricates.
//!
//! ```sh
//! cargo run --release --example open_version -- PACK latest 180 1
//! ```

use std::time::Instant;

use dataset_packer::{Pack, VersionSpec};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (pack, specs) = args
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("usage: open_version PACK [VERSION…]"))?;
    let specs = if specs.is_empty() {
        vec!["latest".to_string()]
    } else {
        specs.to_vec()
    };
    for spec in &specs {
        let spec: VersionSpec = spec.parse()?;
        let mut times = Vec::new();
        let mut rows = 0;
        for _ in 0..7 {
            let started = Instant::now();
            let opened = Pack::open_version(pack, &spec)?;
            times.push(started.elapsed().as_secs_f64());
            rows = opened.len();
        }
        times.sort_by(f64::total_cmp);
        println!(
            "  Pack::open_version({spec:<6})  {:7.1} ms   ({rows} rows)",
            times[3] * 1000.0
        );
    }
    Ok(())
}
