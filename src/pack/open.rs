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
use crate::pack::families::{self, Scan};
use crate::pack::shards::{self, Shard, ShardListing};
use crate::pack::versions::{VersionSpec, View};

/// A pack's `metadata.db` and shards as one version of it was: what the commands that read a
/// pack (stats, show, export, validate) open.
pub(crate) struct Opened {
    /// Read-only, restricted to the version ([`View::restrict`]).
    pub conn: Connection,
    /// Cut to the version ([`View::cut`]).
    pub shards: Vec<Shard>,
    pub view: View,
    /// The shards as they are (the companion families line up with these).
    uncut: Vec<Shard>,
}

/// Opens the pack at `dir` as version `spec` of it (legacy 46-byte shards accepted when
/// `legacy_ok`); fails on structural problems, as [`shards::open_shards`] does.
pub(crate) fn open(dir: &Path, spec: &VersionSpec, legacy_ok: bool) -> Result<Opened> {
    let conn = shards::open_metadata(dir)?;
    let view = View::resolve(&conn, dir, spec)?;
    view.restrict(&conn)?;
    let uncut = shards::open_shards(dir, legacy_ok)?;
    let shards = view.cut(dir, uncut.clone())?;
    Ok(Opened {
        conn,
        shards,
        view,
        uncut,
    })
}

impl Opened {
    /// The companion families of the version: those of the pack as it is (see
    /// [`families::scan`]) that the version has, their files cut like the shards.
    pub fn families(&self, dir: &Path) -> Result<Scan> {
        let mut scan = families::scan(dir, &self.uncut)?;
        scan.families.retain(|f| self.view.has_family(&f.name));
        scan.problems.retain(|(name, _)| self.view.has_family(name));
        for family in &mut scan.families {
            family.files.truncate(self.shards.len());
            for (file, shard) in family.files.iter_mut().zip(&self.shards) {
                file.header.shape[0] = shard.header.rows;
            }
        }
        Ok(scan)
    }
}

/// The `metadata.db` of the pack at `dir` alone, read-only, when it opens (its shards not
/// looked at): for what an operation decides before it validates a pack (merge refuses a
/// shuffled input as such, and reads only the inputs without recorded checksums in full).
pub(crate) fn open_records(dir: &Path) -> Option<Connection> {
    shards::open_metadata(dir).ok()
}

/// The shards an operation has written into its staging folder (not yet published, no
/// `metadata.db` yet), opened to be read back: shuffle measures the dispersion of runs in
/// what it wrote before it records the figures in the new pack.
pub(crate) fn open_staged_shards(staging: &Path) -> Result<Vec<Shard>> {
    shards::open_shards(staging, false)
}

/// Fails, of kind `NotAPack` and saying what `dir` is instead, unless it is a pack folder (see
/// [`shards::check_is_pack`]): what an operation checks of each input before it reads it.
pub(crate) fn check_is_pack(dir: &Path) -> crate::Result<()> {
    shards::check_is_pack(dir)
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
