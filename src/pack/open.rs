//! The one door into a pack: every command and operation that reads a pack opens it here
//! (through [`crate::Pack`], or through [`open`]'s lower-level [`Opened`] when it copies rows
//! and tables wholesale), and nothing outside `pack` opens shard files, parses npy headers or
//! opens `metadata.db` for reading (`tests/architecture.rs` holds this). Every pack this tool
//! accepts opens here: current and legacy 46-byte shards, shuffled, without a run index, with
//! companion families, and as any of its versions. `validate`, the strictest reader, takes
//! the same files through the lenient functions at the end, which report problems instead of
//! failing on them.

use std::path::Path;

use rusqlite::Connection;

use crate::error::Result;
use crate::format::valuation::ValuationTable;
use crate::pack::shards::{self, ShardListing};

#[allow(unused_imports)] // the operations reach the opener here once issue 31 lands
pub(crate) use super::versions::{Opened, open};

/// The pack's `metadata.db`, read-only (not restricted to a version), with an error that says
/// what `dir` is when it is not a pack.
#[allow(dead_code)]
pub(crate) fn metadata(dir: &Path) -> Result<Connection> {
    shards::open_metadata(dir)
}

/// A `metadata.db` file opened read-only as it is, whatever the folder around it holds (for
/// `validate`, which reports a missing or broken database as a failed check).
pub(crate) fn metadata_file(path: &Path) -> Result<Connection> {
    crate::format::metadata::open_read_only(path)
}

/// The pack's shard files with their headers and every structural problem, not failing on
/// them (for `validate`).
pub(crate) fn listing(dir: &Path) -> Result<ShardListing> {
    shards::list_shards(dir)
}

/// The pack's `valuation_types.json`.
pub(crate) fn valuations(dir: &Path) -> Result<ValuationTable> {
    shards::read_valuations(dir)
}
