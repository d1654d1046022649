//! Cookbook: read a pack as an earlier version of it was.
//!
//! ```text
//! cargo run --release --example cookbook_old_version -- [WORK_DIR]
//! ```
//!
//! A drop grows: the depth 6 games are packed first, the depth 7 games arrive later and an
//! update adds them (version 2). Tagging version 1 gives a name to what an experiment trained
//! on; opening the pack at that tag reads exactly its rows and runs, nothing added since.
//! Everything goes under `WORK_DIR` (default: a folder under the system's temporary
//! directory, emptied first).

use std::path::{Path, PathBuf};

use dataset_packer::{Pack, RawPackOptions, VersionSpec, pack_raw, tag};

/// Copies the files of folder `from` into folder `to` (made if missing).
fn copy_folder(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        std::fs::copy(entry.path(), to.join(entry.file_name()))?;
    }
    Ok(())
}

fn main() -> dataset_packer::Result<()> {
    let work = std::env::args_os().nth(1).map_or_else(
        || std::env::temp_dir().join("cookbook-old-version"),
        PathBuf::from,
    );
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/raw");
    let (drop, path) = (work.join("drop"), work.join("pack"));

    copy_folder(&fixture.join("d6_10g_v1"), &drop.join("d6_10g_v1"))?;
    pack_raw(&drop, &path, &RawPackOptions::default())?;
    tag(&path, "first-drop", &VersionSpec::Latest)?;

    copy_folder(&fixture.join("d7_10g_v1"), &drop.join("d7_10g_v1"))?;
    pack_raw(&drop, &path, &RawPackOptions::default().update(true))?;

    let now = Pack::open(&path)?;
    let then = Pack::open_version(&path, &"first-drop".parse()?)?;
    for (name, pack) in [("latest", &now), ("first-drop", &then)] {
        println!(
            "{name}: version {}, {} runs, {} rows",
            pack.version(),
            pack.num_runs(),
            pack.len()
        );
    }
    for v in now.versions()? {
        println!("version {}: {} ({} rows)", v.version, v.operation, v.rows);
    }
    Ok(())
}
