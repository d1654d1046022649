//! Cookbook: pack a drop of raw self-play logs, with progress.
//!
//! ```text
//! cargo run --release --example cookbook_pack_drop -- [RAW_DIR] [OUT_DIR]
//! ```
//!
//! Packs `RAW_DIR` (default: the repository's fixture drop, `fixtures/raw`) into `OUT_DIR`
//! (default: a folder under the system's temporary directory, replaced if there), keeping each
//! row's search statistics, on two threads. The library prints nothing: progress goes to an
//! observer, here one that logs each stage to stderr. What `dataset-packer pack --input RAW_DIR
//! --output OUT_DIR --search-stats --workers 2` does, with the same bytes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use dataset_packer::progress::{Observer, Progress, Unit};
use dataset_packer::{Pack, RawPackOptions, pack_raw};

/// Logs each stage and its total to stderr when it ends.
#[derive(Default)]
struct StageLog {
    done: AtomicU64,
}

impl Progress for StageLog {
    fn begin(&self, stage: &str, total: u64, unit: Unit) {
        self.done.store(0, Ordering::Relaxed);
        eprintln!(
            "{stage}: {total} {}",
            if unit == Unit::Rows { "rows" } else { "bytes" }
        );
    }
    fn advance(&self, by: u64) {
        self.done.fetch_add(by, Ordering::Relaxed);
    }
    fn end(&self) {
        eprintln!("  done: {}", self.done.load(Ordering::Relaxed));
    }
}

fn main() -> dataset_packer::Result<()> {
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let raw = args
        .next()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/raw"));
    let out = args
        .next()
        .unwrap_or_else(|| std::env::temp_dir().join("cookbook-pack-drop"));

    let options = RawPackOptions::default()
        .workers(2)
        .search_stats(true)
        .overwrite(out.join("metadata.db").exists())
        .progress(Observer::new(StageLog::default()));
    pack_raw(&raw, &out, &options)?;

    let pack = Pack::open(&out)?;
    println!(
        "packed {} runs, {} rows into {}",
        pack.num_runs(),
        pack.len(),
        out.display()
    );
    println!("companions: {}", pack.companion_names().join(", "));
    Ok(())
}
