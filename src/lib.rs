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
//! # What is public
//!
//! The names at the crate root ([`Pack`], [`Run`], [`Step`], …) are the stable surface.
//! `format` is the pack contract (row layout, board codec, npy header, metadata.db, valuation
//! table, the `search` family's dtype), public so that its constants can be used, but not
//! stable. The rest of the crate (the writers, the publish protocol, the shard reader the
//! commands share) is private to it; `cli`, `cmd`, `interrupt`, `raw` and `rng` are public
//! only for the `dataset-packer` binary and the tool's own tests and benches, and hidden from
//! these docs.

pub(crate) mod attach;
#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod cmd;
pub(crate) mod crc;
pub mod error;
pub(crate) mod export;
pub(crate) mod findings;
pub mod format;
#[doc(hidden)]
pub mod interrupt;
pub(crate) mod merge;
pub(crate) mod ordered;
pub mod pack;
pub(crate) mod packer;
pub mod progress;
#[doc(hidden)]
pub mod raw;
pub(crate) mod report;
#[doc(hidden)]
pub mod rng;
pub(crate) mod show;
pub(crate) mod shuffle;
pub(crate) mod stats;
pub mod store;
pub(crate) mod thread_cpu;
pub mod verify;

pub use error::{Error, ErrorKind, Result};
pub use pack::{
    Companion, CompanionValue, History, NewRun, NewStep, Pack, PackWriter, Param, Published, Run,
    Runs, SqlLimits, Step, Steps, Version, VersionSpec, WriterOptions, tag, untag,
};

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
