//! Cookbook: merge two packs into one, then shuffle it for training.
//!
//! ```text
//! cargo run --release --example cookbook_merge_shuffle -- [WORK_DIR]
//! ```
//!
//! Packs the fixture drop's two folders (depth 6 and depth 7 games) separately, as two
//! machines would, merges them (runs renumbered in input order), and writes a shuffled copy
//! with a fixed seed: the same seed gives the same bytes. Everything goes under `WORK_DIR`
//! (default: a folder under the system's temporary directory, emptied first).

use std::path::PathBuf;

use dataset_packer::{
    MergeOptions, Pack, RawPackOptions, ShuffleOptions, merge, pack_raw, shuffle,
};

fn main() -> dataset_packer::Result<()> {
    let work = std::env::args_os().nth(1).map_or_else(
        || std::env::temp_dir().join("cookbook-merge-shuffle"),
        PathBuf::from,
    );
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    let raw = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/raw");

    let mut parts = Vec::new();
    for folder in ["d6_10g_v1", "d7_10g_v1"] {
        let part = work.join(folder);
        pack_raw(raw.join(folder), &part, &RawPackOptions::default())?;
        parts.push(part);
    }

    let merged = work.join("merged");
    merge(&parts, &merged, &MergeOptions::default())?;
    let shuffled = work.join("shuffled");
    shuffle(&merged, &shuffled, &ShuffleOptions::default().seed(2048))?;

    for path in [&parts[0], &parts[1], &merged, &shuffled] {
        let pack = Pack::open(path)?;
        println!(
            "{}: {} runs, {} rows{}",
            path.file_name().unwrap().to_string_lossy(),
            pack.num_runs(),
            pack.len(),
            if pack.is_shuffled() { ", shuffled" } else { "" }
        );
    }
    Ok(())
}
