//! dataset-packer: raw Macroxue 2048 self-play logs → training-ready NumPy shards + SQLite.
//!
//! # Reading a pack from Rust
//!
//! [`Pack`] is the public surface (stable; see [`pack`] for what it checks and what is
//! stable):
//!
//! ```
//! # fn main() -> anyhow::Result<()> {
//! # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
//! # let path = fixture.path();
//! use dataset_packer::Pack;
//!
//! let pack = Pack::open(path)?;
//! let run = pack.run(7)?;
//! for step in run.steps() {
//!     println!("step {}: move {} on {:?}", step.step_index(), step.move_dir(), step.exponents());
//! }
//! # Ok(()) }
//! ```
//!
//! # The tool's machinery
//!
//! `format` is the pack contract (row layout, board codec, npy header, metadata.db, valuation
//! table); `raw` is the input side (discovery, gzip, row and sidecar parsing); `pack` is the
//! reader library and `validate`'s checks; `cmd` holds one module per subcommand; the rest is
//! machinery shared between commands. These modules are public for the tool's own tests and
//! are not a stable interface.

pub mod cli;
pub mod cmd;
pub mod companions;
pub mod crc;
pub mod export;
pub mod findings;
pub mod fingerprints;
pub mod format;
pub mod interrupt;
pub mod ordered;
pub mod pack;
pub mod pack_dir;
pub mod pack_files;
pub mod pack_reader;
pub mod pack_stats;
pub(crate) mod packer;
pub mod progress;
pub mod raw;
pub mod report;
pub mod rng;
pub mod run_index;
pub mod run_query;
pub mod shard_writer;

pub use pack::{Companion, CompanionValue, Pack, Param, Run, Runs, Step, Steps};

/// Threads to use when the user does not say: all cores.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// An error in how the tool was called (exit code 2), as opposed to bad data (exit code 1).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A [`UsageError`] as an `anyhow::Error` (exit code 2).
pub(crate) fn usage(message: String) -> anyhow::Error {
    UsageError(message).into()
}
