//! Packs for the documentation's examples to read: the repository's raw fixture drop
//! (`fixtures/raw`, 10 runs, 2,240 rows) packed through the library into a temporary folder
//! that is removed again when dropped. Not part of the public surface.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result};
use clap::Parser;

use crate::format::npy;

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

/// Parses `pack` arguments the way the binary does, so fields added to them later keep
/// their defaults here.
#[derive(Parser)]
struct PackCommand {
    #[command(flatten)]
    args: crate::cmd::pack::PackArgs,
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

/// `fixtures/raw` packed with `extra` arguments added to `pack --input … --output … --quiet`.
pub fn fixture_pack_with(extra: &[&str]) -> Result<FixturePack> {
    let out = FixturePack { dir: temp_dir() };
    let raw = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/raw");
    let mut argv: Vec<String> = ["pack", "--input"].map(String::from).to_vec();
    argv.push(raw.display().to_string());
    argv.push("--output".into());
    argv.push(out.dir.display().to_string());
    argv.push("--quiet".into());
    argv.extend(extra.iter().map(|s| s.to_string()));
    let command = PackCommand::try_parse_from(&argv).context("pack arguments")?;
    crate::cmd::pack::run(&command.args)?;
    Ok(out)
}

/// `fixtures/raw` packed into one `steps.npy`.
pub fn fixture_pack() -> Result<FixturePack> {
    fixture_pack_with(&[])
}

/// [`fixture_pack`] with a companion array `score.npy` of dtype `'<f4'`, one value per row:
/// the row's global index.
pub fn fixture_pack_with_companion() -> Result<FixturePack> {
    let pack = fixture_pack()?;
    let rows = crate::pack::shards::open_shards(pack.path(), false)?[0]
        .header
        .rows;
    let mut bytes = npy::array_header("'<f4'", &[rows]);
    for i in 0..rows {
        bytes.extend_from_slice(&(i as f32).to_le_bytes());
    }
    std::fs::write(pack.path().join("score.npy"), bytes)?;
    Ok(pack)
}
