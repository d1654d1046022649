//! dataset-packer: raw Macroxue 2048 self-play logs → training-ready NumPy shards + SQLite.
//!
//! # Reading a pack from Rust
//!
//! [`Pack`] is the public surface (stable; see [`pack`] for what it checks and what is
//! stable):
//!
//! ```
//! # fn main() -> dataset_packer::Result<()> {
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
//! # Doing what the command line does
//!
//! Every command is a library call here, with the same bytes out for the same settings (each
//! options type's `Default` is the command's defaults): [`pack_raw`] (`pack`, and `pack
//! --update` with [`RawPackOptions::update`]), [`merge`], [`shuffle`], [`export`], [`stats()`],
//! [`report`], [`attach`], [`detach`], [`Pack::verify`] (`validate`), [`History`] and [`tag`]
//! (`versions`, `tag`), [`Viewer`] (`view`). Errors are [`Error`]s whose [`ErrorKind`] a
//! program can match; progress goes to a [`progress::Progress`] observer given in the options
//! (none by default: the library draws and prints nothing).
//!
//! ```
//! # fn main() -> dataset_packer::Result<()> {
//! # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
//! # let out = dataset_packer::pack::doc_support::temp_dir();
//! use dataset_packer::{ErrorKind, ShuffleOptions, shuffle};
//!
//! let summary = shuffle(fixture.path(), &out, &ShuffleOptions::default().seed(7))?;
//! assert_eq!(summary.rows, 2240);
//! // The output exists now: a second shuffle into it is refused, and says which option.
//! let again = shuffle(fixture.path(), &out, &ShuffleOptions::default()).unwrap_err();
//! assert_eq!((again.kind(), again.option()), (ErrorKind::Refused, Some("overwrite")));
//! # std::fs::remove_dir_all(&out).ok();
//! # Ok(()) }
//! ```
//!
//! The [`cookbook`] has complete programs for common jobs.
//!
//! # What is public
//!
//! The names at the crate root are the stable surface: the reader ([`Pack`], [`Run`],
//! [`Step`], …), the writer ([`PackWriter`], …), the operations and their options and
//! summaries, [`Error`], [`ErrorKind`] and [`Result`], and the [`progress`] observer. `format`
//! is the pack contract (row layout, board codec, npy header, metadata.db, valuation table,
//! the `search` family's dtype), public so that its constants can be used, but not stable; so
//! is [`verify`]'s report. The rest of the crate (the shard reader, the writers' machinery, the
//! publish protocol) is private to it; `cli`, `cmd`, `interrupt`, `raw` and `rng` are public
//! only for the `dataset-packer` binary and the tool's own tests and benches, and hidden from
//! these docs.

pub(crate) mod attach;
#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod cmd;
pub mod cookbook;
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
pub mod stats;
pub mod store;
pub(crate) mod thread_cpu;
pub mod verify;
pub(crate) mod view;

pub use attach::{AttachOptions, AttachSummary, DetachSummary, attach, detach};
pub use error::{Error, ErrorKind, Result};
pub use merge::{DeletedInput, MergeOptions, MergeSummary, MergedInput, merge};
pub use pack::remote_output::Uploaded;
pub use pack::{
    Companion, CompanionValue, History, NewRun, NewStep, Pack, PackWriter, Param, Published, Run,
    Runs, SqlLimits, Step, Steps, Version, VersionSpec, WriterOptions, move_tag, tag, untag,
};
pub use packer::{RawPackOptions, RawPackSummary, pack_raw};
pub use shuffle::{
    Quality as ShuffleQuality, ShuffleNotice, ShuffleOptions, ShuffleSummary, shuffle,
};

pub use export::{ExportFormat, ExportOptions, ExportSummary, export};
pub use report::{ReportOptions, ReportSummary, report};
pub use stats::{Stats, StatsOptions, stats};
pub use view::{ViewOptions, Viewer};

/// Threads to use when the user does not say: all cores.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
