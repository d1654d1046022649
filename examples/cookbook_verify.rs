//! Cookbook: verify packs in CI, with an exit code a pipeline can act on.
//!
//! ```text
//! cargo run --release --example cookbook_verify -- PACK...
//! ```
//!
//! Each pack is opened and every byte checked (checksums, rows, runs, companions: what
//! `dataset-packer validate` checks). The exit code says what the worst problem was: 0 all
//! valid, 1 a pack is damaged or not a pack, 2 a pack could not be read (I/O, permissions),
//! 3 anything else.

use std::path::Path;
use std::process::ExitCode;

use dataset_packer::{ErrorKind, Pack};

/// Opens the pack and checks every byte of it; its rows when valid.
fn check(path: &Path) -> dataset_packer::Result<u64> {
    let pack = Pack::open(path)?;
    pack.verify()?;
    Ok(pack.len())
}

fn main() -> ExitCode {
    let mut worst = 0;
    for path in std::env::args_os().skip(1) {
        let path = Path::new(&path);
        let code = match check(path) {
            Ok(rows) => {
                println!("ok: {}: {rows} rows", path.display());
                0
            }
            Err(e) => {
                println!("{}: {e}", e.kind());
                match e.kind() {
                    ErrorKind::NotAPack | ErrorKind::Corrupt | ErrorKind::Unsupported => 1,
                    ErrorKind::Io => 2,
                    _ => 3,
                }
            }
        };
        worst = worst.max(code);
    }
    ExitCode::from(worst)
}
