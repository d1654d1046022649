//! The one door into a pack: every command and operation that reads a pack opens it here
//! (through [`crate::Pack`], or through [`open`]'s lower-level [`Opened`] when it copies rows
//! and tables wholesale), and nothing outside `pack` opens shard files, parses npy headers or
//! opens `metadata.db` for reading (`tests/architecture.rs` holds this). Every pack this tool
//! accepts opens here: current and legacy 46-byte shards, shuffled, without a run index, with
//! companion families, and as any of its versions. `validate`, the strictest reader, takes
//! the same files through the lenient functions at the end, which report problems instead of
//! failing on them.
//!
//! Where a pack is read from is decided here too, once ([`locate`]): a folder as it is, or a
//! URL (`s3://…`, `gs://…`, `az://…`, `http(s)://…`) as a local view of it whose files come
//! through the node's cache ([`crate::pack::remote`]). Everything below then reads the view's
//! folder unchanged, and [`Located::name_errors`] makes errors name the URL, never the view.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::Connection;

use crate::error::{Context, Error, Result};
use crate::format::valuation::ValuationTable;
use crate::pack::families::{self, Scan};
pub(crate) use crate::pack::remote::Wanted;
use crate::pack::remote::{self, RemoteView};
use crate::pack::shards::{self, Shard, ShardListing};
use crate::pack::snapshot;
use crate::pack::versions::{History, VersionSpec, View};
use crate::store::Location;

/// A pack as a user named it (a folder, or a URL), and the local folder its files are read
/// from: the folder itself, or the view of a remote pack (alive as long as any clone of this).
#[derive(Debug, Clone)]
pub(crate) struct Located {
    given: PathBuf,
    remote: Option<Arc<RemoteView>>,
}

impl Located {
    /// The folder to read the pack's files from.
    pub fn dir(&self) -> &Path {
        match &self.remote {
            Some(view) => view.dir(),
            None => &self.given,
        }
    }

    /// The pack as the user named it (for messages and reports): the folder, or the URL.
    pub fn given(&self) -> &Path {
        &self.given
    }

    /// Whether the pack is in object storage.
    pub fn is_remote(&self) -> bool {
        self.remote.is_some()
    }

    /// `text` naming the pack as the user named it (a remote pack's view folder replaced by
    /// its URL).
    pub fn name_text(&self, text: &str) -> String {
        match &self.remote {
            Some(view) => text.replace(&view.dir().display().to_string(), &view.url().to_string()),
            None => text.to_string(),
        }
    }

    /// `result`, its error (if any) naming the pack as the user named it: a remote pack's
    /// view folder, which means nothing to the user, is replaced by the pack's URL.
    pub fn name_errors<T>(&self, result: Result<T>) -> Result<T> {
        let Some(view) = &self.remote else {
            return result;
        };
        result.map_err(|e| {
            let folder = view.dir().display().to_string();
            let text = format!("{e:#}");
            if !text.contains(&folder) {
                return e;
            }
            let mut renamed = Error::new(e.kind(), text.replace(&folder, &view.url().to_string()));
            if let Some(option) = e.option() {
                renamed = renamed.with_option(option);
            }
            renamed
        })
    }
}

/// Where the pack `path` names is read from: a local folder as it is; for a URL, a local view
/// with every file of the pack's latest version fetched through the cache (refused when the
/// pack does not fit in the cache's limit). An unknown scheme (`ftp://…`) is an error, never
/// a folder.
pub(crate) fn locate(path: &Path) -> Result<Located> {
    locate_wanting(path, Wanted::All)
}

/// [`locate`], fetching of a remote pack only its records (`metadata.db` and
/// `valuation_types.json`): for what reads no rows (`versions`).
pub(crate) fn locate_records(path: &Path) -> Result<Located> {
    locate_wanting(path, Wanted::Records)
}

/// [`locate`], a remote pack's files made to fill block by block as they are read
/// ([`Wanted::Lazy`]): for readers of a few runs or rows (`show`, `export --runs`, the
/// library's [`crate::Pack`]), which then fetch only the blocks they read.
pub(crate) fn locate_lazy(path: &Path) -> Result<Located> {
    locate_wanting(path, Wanted::Lazy)
}

fn locate_wanting(path: &Path, wanted: Wanted) -> Result<Located> {
    let (given, remote) = match path.to_str().map(Location::parse) {
        Some(Ok(Location::Remote(url))) => (
            path.to_path_buf(),
            Some(Arc::new(remote::open_view(&url, wanted)?)),
        ),
        // `file:///abs/path` is the folder it names.
        Some(Ok(Location::Local(folder))) => (folder, None),
        Some(Err(e)) => return Err(e),
        None => (path.to_path_buf(), None),
    };
    Ok(Located { given, remote })
}

// Here rather than beside the rest of `History`: reading a pack's history starts at the
// door, which decides where the pack is read from (a remote pack's records alone).
impl History {
    /// The history of the pack in folder `dir` (or at a URL), from its `metadata.db` alone
    /// (no shard is opened or fetched): what `dataset-packer versions` lists.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let history = dataset_packer::History::of_pack(fixture.path())?;
    /// assert_eq!(history.latest().version, 1);
    /// # Ok(()) }
    /// ```
    pub fn of_pack(dir: impl AsRef<Path>) -> Result<History> {
        // A remote pack's records alone: no shard is fetched.
        let pack = locate_records(dir.as_ref())?;
        pack.name_errors(shards::open_metadata(pack.dir()).and_then(|conn| History::read(&conn)))
    }
}

/// [`locate`], but a remote pack larger than the cache's limit read block by block, to be
/// streamed through ([`Wanted::Streamed`]): for readers of every row (`stats`, `validate`,
/// `report`).
pub(crate) fn locate_streamed(path: &Path) -> Result<Located> {
    locate_wanting(path, Wanted::Streamed)
}

/// Runs `read` on the pack `path` names, located with a remote pack's files `wanted` (the
/// files whole, block by block, or block by block when larger than the cache: [`Wanted`]), its
/// errors naming the pack as the user did.
pub(crate) fn with_located<T>(
    path: &Path,
    wanted: Wanted,
    read: impl FnOnce(&Located) -> Result<T>,
) -> Result<T> {
    let located = locate_wanting(path, wanted)?;
    located.name_errors(read(&located))
}

/// A pack's `metadata.db` and files as one version of it was, all opened together as one
/// snapshot ([`crate::pack::snapshot`]): what the commands that read a pack (stats, show,
/// export, validate) open. Whatever is published into the folder afterwards, these are the
/// files read.
pub(crate) struct Opened {
    /// Read-only, restricted to the version ([`View::restrict`]).
    pub conn: Connection,
    /// Cut to the version ([`View::cut`]).
    pub shards: Vec<Shard>,
    pub view: View,
    /// The size of `metadata.db`.
    pub metadata_bytes: u64,
    /// The companion families of the version (see [`Opened::families`]).
    families: Scan,
    /// `valuation_types.json` as it was read with the rest.
    valuations: std::io::Result<String>,
    dir: PathBuf,
}

/// Opens the pack at `dir` as version `spec` of it (legacy 46-byte shards accepted when
/// `legacy_ok`), every file of it at once from one version, even while another process
/// publishes into the folder; fails on structural problems, as [`shards::open_shards`] does.
pub(crate) fn open(dir: &Path, spec: &VersionSpec, legacy_ok: bool) -> Result<Opened> {
    snapshot::consistently(dir, || open_once(dir, spec, legacy_ok))
}

/// [`open`] without the snapshot's retries: for an opener that wraps more in one snapshot.
pub(crate) fn open_once(dir: &Path, spec: &VersionSpec, legacy_ok: bool) -> Result<Opened> {
    let conn = shards::open_metadata(dir)?;
    let db = dir.join(crate::format::metadata::FILE_NAME);
    let metadata_bytes = std::fs::metadata(&db)
        .with_context(|| format!("reading {}", db.display()))?
        .len();
    let view = View::resolve(&conn, dir, spec)?;
    view.restrict(&conn)?;
    let uncut = shards::open_shards(dir, legacy_ok)?;
    let shards = view.cut(dir, uncut.clone())?;
    check_version_totals(dir, &conn, &view, &shards)?;
    let families = version_families(families::scan(dir, &uncut)?, &view, &shards);
    let valuations = std::fs::read_to_string(dir.join(crate::format::valuation::FILE_NAME));
    Ok(Opened {
        conn,
        shards,
        view,
        metadata_bytes,
        families,
        valuations,
        dir: dir.to_path_buf(),
    })
}

/// Refuses a version whose recorded rows and runs are not what the pack holds of it (the
/// files cut to it, its runs in `conn`, restricted to it): a pack changed by a tool that
/// records no versions, or whose history was edited. Read as recorded, it would hand out
/// other rows than the version had.
fn check_version_totals(
    dir: &Path,
    conn: &Connection,
    view: &View,
    shards: &[Shard],
) -> Result<()> {
    if !view.history.recorded {
        return Ok(());
    }
    let v = view.version();
    let (runs, steps): (i64, Option<i64>) = conn
        .query_row("SELECT COUNT(*), SUM(steps) FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .with_context(|| {
            format!(
                "reading {}",
                dir.join(crate::format::metadata::FILE_NAME).display()
            )
        })?;
    let rows: u64 = shards.iter().map(|s| s.header.rows).sum();
    let steps = steps.unwrap_or(0);
    if steps as u64 != rows {
        // The runs table against the files, as every open of the latest version checks.
        let check = crate::pack::checks::check_total_steps(&[(0, steps)], rows);
        crate::error::fail!(
            Corrupt,
            "{} is not a valid pack: {}: {}; `dataset-packer validate {}` says more",
            dir.display(),
            check.name,
            check.examples.first().map_or("", String::as_str),
            dir.display()
        );
    }
    if runs as u64 != v.runs || rows != v.rows {
        crate::error::fail!(
            Corrupt,
            "{}: metadata.db records {} rows and {} runs for version {}, but the pack holds {rows} rows and {runs} runs for it: it was changed without recording a version, or its history was edited; run `dataset-packer validate {}`",
            dir.display(),
            v.rows,
            v.runs,
            v.version,
            dir.display()
        );
    }
    Ok(())
}

/// The families of `scan` (the pack's as it is) that the version has, their files cut like
/// the version's `shards`.
fn version_families(mut scan: Scan, view: &View, shards: &[Shard]) -> Scan {
    let v = view.version();
    scan.gone = v
        .families
        .iter()
        .filter_map(|f| Some((f.clone(), view.history.removed_in(v.version, f)?)))
        .collect();
    let gone = |name: &str| scan.gone.iter().any(|(g, _)| g == name);
    scan.families
        .retain(|f| view.has_family(&f.name) && !gone(&f.name));
    scan.problems
        .retain(|(name, _)| view.has_family(name) && !gone(name));
    for family in &mut scan.families {
        family.files.truncate(shards.len());
        for (file, shard) in family.files.iter_mut().zip(shards) {
            file.header.shape[0] = shard.header.rows;
        }
    }
    scan
}

impl Opened {
    /// The companion families of the version: those of the pack as it was opened (see
    /// [`families::scan`]) that the version has, their files cut like the shards.
    pub fn families(&self) -> Scan {
        self.families.clone()
    }

    /// The pack's `valuation_types.json`, as it was when the pack was opened.
    pub fn valuations(&self) -> Result<ValuationTable> {
        let path = self.dir.join(crate::format::valuation::FILE_NAME);
        let text = self
            .valuations
            .as_ref()
            .map_err(|e| std::io::Error::new(e.kind(), e.to_string()))
            .with_context(|| format!("reading {}", path.display()))?;
        ValuationTable::from_json(text).with_context(|| format!("{}", path.display()))
    }
}

/// Runs `open`, which opens files of the pack at `dir` through the lenient functions below,
/// as one snapshot of one version (see [`snapshot::consistently`]): for `validate`.
pub(crate) fn snapshot<T>(dir: &Path, open: impl FnMut() -> Result<T>) -> Result<T> {
    snapshot::consistently(dir, open)
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
