//! Packs for the documentation's examples to read: the repository's raw fixture drop
//! (`fixtures/raw`, 10 runs, 2,240 rows) packed through the library ([`crate::pack_raw`])
//! into a temporary folder that is removed again when dropped. Not part of the public surface.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::Result;
use crate::format::npy;
use crate::{RawPackOptions, pack_raw};

/// A pack in a temporary folder, removed on drop.
pub struct FixturePack {
    dir: PathBuf,
}

impl FixturePack {
    /// The pack folder.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl AsRef<Path> for FixturePack {
    fn as_ref(&self) -> &Path {
        &self.dir
    }
}

impl Drop for FixturePack {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh temporary folder name (several examples run at once in one process).
pub fn temp_dir() -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "dataset-packer-doc-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The repository's raw fixture drop, `fixtures/raw`.
pub fn fixture_raw() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/raw")
}

/// `fixtures/raw` packed with `options` (as `pack_raw` takes them).
pub fn fixture_pack_with(options: &RawPackOptions) -> Result<FixturePack> {
    let out = FixturePack { dir: temp_dir() };
    pack_raw(fixture_raw(), &out.dir, options)?;
    Ok(out)
}

/// `fixtures/raw` packed into one `steps.npy`.
pub fn fixture_pack() -> Result<FixturePack> {
    fixture_pack_with(&RawPackOptions::default())
}

/// [`fixture_pack`] with a companion array `score.npy` of dtype `'<f4'`, one value per row:
/// the row's global index.
pub fn fixture_pack_with_companion() -> Result<FixturePack> {
    let pack = fixture_pack()?;
    let rows = crate::Pack::open(pack.path())?.len();
    let mut bytes = npy::array_header("'<f4'", &[rows]);
    for i in 0..rows {
        bytes.extend_from_slice(&(i as f32).to_le_bytes());
    }
    std::fs::write(pack.path().join("score.npy"), bytes)?;
    Ok(pack)
}
