//! A pack in object storage, read as a local one: the latest commit's record read
//! ([`store::head`]), its `metadata.db` and `valuation_types.json` downloaded (checked against
//! the record) into a private view folder inside the cache folder (`<cache>/views/<pid>-<n>/`),
//! and each file the latest version lists fetched through the node's shared [`Cache`] (checked
//! against its recorded size and CRC-32C) and linked into the view under its pack name. The
//! local opener then opens the view unchanged, any version of it included (an earlier version
//! is a prefix of the latest one's files). The objects a commit names never change, so the
//! view is the pack as that commit left it, whatever is committed meanwhile. A pack in the
//! layout before commits (its files under their own names) is read the same way, by name.
//!
//! The view pins its cache entries while it lives, so that no process evicts a file a reader
//! has mapped, and removes itself when dropped; views left by a process that died are swept
//! by the next one. Eviction only ever touches the cache's `entries/`, never a view.

use std::fs;
use std::io::ErrorKind as IoKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::error::{Context, Error, ErrorKind, Result, fail};
use crate::format::blocks::{self, FileBlocks};
use crate::format::{metadata, valuation};
use crate::pack::lazy::{self, LazyFile};
use crate::pack::versions::{VersionFile, VersionSpec, View};
use crate::store::{self, Cache, Commit, Entry, Head, Store, Url, cache_config};

/// A remote pack's local view: a folder holding its `metadata.db`, `valuation_types.json` and
/// links to its files in the cache, which stay pinned until the view is dropped.
#[derive(Debug)]
pub(crate) struct RemoteView {
    url: Url,
    dir: PathBuf,
    /// Pinned entries: while they live, no process evicts the files the view links to.
    _entries: Vec<Entry>,
    /// Files filled as they are read (found by readers through [`lazy::for_path`]).
    _lazy: Vec<Arc<LazyFile>>,
    /// The view's `.lock`, held shared while it lives: what tells a sweep (this crate's or
    /// the Python package's, in any container sharing the cache) that it is in use.
    _lock: fs::File,
}

impl RemoteView {
    /// The pack's URL.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The view folder, which the local opener reads.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for RemoteView {
    fn drop(&mut self) {
        // Only links and the two small files: the cached data stays in the cache.
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Which of a remote pack's files a view fetches.
pub(crate) enum Wanted {
    /// Every file of the latest version (what reading rows of any version may touch).
    All,
    /// Only the records: `metadata.db` and `valuation_types.json` (for `versions`).
    Records,
    /// The records, and the latest version's files as [`LazyFile`]s, filled block by block as
    /// they are read (for readers of a few runs or rows); a file with no block checksums
    /// recorded (an older tool's) is fetched whole.
    Lazy,
    /// [`Wanted::All`] when the files fit in the cache's limit, else [`Wanted::Lazy`]: for
    /// readers of every row (`stats`, `validate`), which then stream through the pack, giving
    /// back each shard's blocks once past it ([`crate::pack::shards::ReleaseBehind`]).
    Streamed,
}

/// Makes the local view of the pack at `url` with the files `wanted`, through the process's
/// cache ([`cache_config`]). Refused, naming the URL, the pack's size and the limit, before
/// anything is downloaded when the files do not fit in the cache's limit.
pub(crate) fn open_view(url: &Url, wanted: Wanted) -> Result<RemoteView> {
    let config = cache_config()?;
    let cache = Cache::open(&config.dir, config.limit, shared_store()?)?;
    let views = config.dir.join("views");
    fs::create_dir_all(&views).with_context(|| format!("creating {}", views.display()))?;
    store::sweep_stale_views(&views);
    let (dir, lock) = store::new_view_dir(&views)?;
    let mut view = RemoteView {
        url: url.clone(),
        dir,
        _entries: Vec::new(),
        _lazy: Vec::new(),
        _lock: lock,
    };
    let before = cache.store().transfers();
    let commit = match store::head(cache.store(), url)? {
        Head::Empty => fail!(
            NotAPack,
            "{url} is not a pack (no commit record in {url}/{} and no {} there)",
            store::VERSIONS,
            metadata::FILE_NAME
        ),
        Head::Plain => None,
        Head::Commit(commit) => Some(*commit),
    };
    download_records(&cache, url, commit.as_ref(), &view.dir)?;
    let mut files = match wanted {
        Wanted::Records => Vec::new(),
        _ => latest_files(url, &view.dir)?,
    };
    let bytes: u64 = files.iter().map(|f| f.bytes).sum();
    let lazy = match wanted {
        Wanted::Lazy => true,
        Wanted::Streamed => bytes > cache.limit(),
        Wanted::All | Wanted::Records => false,
    };
    if lazy {
        let (lazy, whole) = make_lazy(&cache, url, commit.as_ref(), files, &view.dir)?;
        view._lazy = lazy;
        files = whole;
    }
    let total: u64 = files.iter().map(|f| f.bytes).sum();
    if total > cache.limit() {
        return Err(Error::new(
            ErrorKind::Refused,
            format!(
                "{url} ({} files, {total} bytes) does not fit in the cache's limit of {} bytes \
                 (the cache {}); nothing was downloaded",
                files.len(),
                cache.limit(),
                cache.dir().display()
            ),
        )
        .with_option("cache_limit"));
    }
    // Each pinned entry holds a lock file open.
    crate::pack::snapshot::raise_open_files_limit(files.len() as u64 + 256);
    view._entries = fetch_all(&cache, url, commit.as_ref(), &files, &view.dir)?;
    let after = cache.store().transfers();
    log::debug!(
        "{url}: {} files ({total} bytes) in the view {}; downloaded {} files ({} bytes), \
         metadata.db and valuation_types.json included",
        files.len(),
        view.dir.display(),
        after.downloads - before.downloads,
        after.bytes_downloaded - before.bytes_downloaded
    );
    Ok(view)
}

/// Of `files`, those with block checksums recorded made [`LazyFile`]s in the view `dir` (their
/// heads fetched, several at once), and the rest, to fetch whole: those without, and those
/// the cache holds whole already.
fn make_lazy(
    cache: &Cache,
    url: &Url,
    commit: Option<&Commit>,
    files: Vec<VersionFile>,
    dir: &Path,
) -> Result<(Vec<Arc<LazyFile>>, Vec<VersionFile>)> {
    let conn = records_connection(dir)?;
    let mut blocked = Vec::new();
    let mut whole = Vec::new();
    for file in files {
        let (key, crc) = object_key(url, commit, &file)?;
        let object = url.join(&key)?;
        match recorded_blocks(&conn, &file)? {
            // Pinned (and checked) with the other whole files.
            Some(_) if cache.holds(&object, file.bytes, crc) => whole.push(file),
            Some(blocks) => blocked.push((file, object, blocks)),
            None => whole.push(file),
        }
    }
    let mut made = Vec::with_capacity(blocked.len());
    crate::ordered::ordered_try_map(
        &blocked,
        lazy::PARALLEL_HEADERS,
        lazy::PARALLEL_HEADERS,
        || (),
        |_, (file, object, blocks)| {
            let path = dir.join(&file.file_name);
            LazyFile::create(&path, object.clone(), blocks.clone(), cache.clone())
        },
        |_, created| {
            made.push(Arc::new(created?));
            Ok(())
        },
    )?;
    made.iter().for_each(lazy::register);
    Ok((made, whole))
}

/// The block checksums `metadata.db` (`conn`) records for `file`, when it records them.
fn recorded_blocks(conn: &rusqlite::Connection, file: &VersionFile) -> Result<Option<FileBlocks>> {
    use rusqlite::OptionalExtension;
    if !metadata::has_table(conn, blocks::TABLE)? {
        return Ok(None);
    }
    let row: Option<(i64, Vec<u8>)> = conn
        .query_row(
            "SELECT block_bytes, block_crc32c FROM file_blocks
             WHERE file_name = ?1 AND crc32c = ?2",
            [&file.file_name, &file.crc32c],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((block_bytes, blob)) = row else {
        return Ok(None);
    };
    let blocks = FileBlocks::from_record(&file.file_name, file.bytes, block_bytes, &blob)?;
    if !blocks.combine_into(&file.crc32c) {
        fail!(
            Corrupt,
            "{}: the block checksums of {} do not combine into its CRC-32C {}",
            metadata::FILE_NAME,
            file.file_name,
            file.crc32c
        );
    }
    Ok(Some(blocks))
}

/// The one store of the process (its connection pools are shared by every remote pack).
fn shared_store() -> Result<Arc<Store>> {
    static STORE: OnceLock<Arc<Store>> = OnceLock::new();
    if let Some(store) = STORE.get() {
        return Ok(store.clone());
    }
    let store = Arc::new(Store::from_env()?);
    Ok(STORE.get_or_init(|| store).clone())
}

/// Downloads `metadata.db` and `valuation_types.json` into the view: those `commit` names,
/// checked against it, or for a pack in the layout before commits those under their own names
/// (no checksum is recorded for them there: fresh on every open, never from the cache).
fn download_records(cache: &Cache, url: &Url, commit: Option<&Commit>, dir: &Path) -> Result<()> {
    let store = cache.store();
    for name in [metadata::FILE_NAME, valuation::FILE_NAME] {
        let bytes = match commit {
            Some(commit) => store::read_small_file(store, url, commit, name)?,
            // A pack without one is reported by the local opener, as for a local pack.
            None => match store.get(&url.join(name)?) {
                Ok(bytes) => Some(bytes),
                Err(e) if e.kind() == ErrorKind::NotAPack && name == valuation::FILE_NAME => None,
                Err(e) => return Err(e),
            },
        };
        if let Some(bytes) = bytes {
            write_file(&dir.join(name), &bytes)?;
        }
    }
    Ok(())
}

/// Puts the cached file `entry` into the view as `link`: a hard link where the filesystem
/// allows one, so that the view keeps the bytes even if the cache's `entries/` is deleted
/// before the pack is opened, else a symbolic link. False when the entry's file is gone
/// (deleted since it was fetched): fetch it again.
fn link_into_view(entry: &Path, link: &Path) -> Result<bool> {
    match fs::hard_link(entry, link) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == IoKind::NotFound => Ok(false),
        Err(_) => std::os::unix::fs::symlink(entry, link)
            .map(|()| true)
            .with_context(|| format!("linking {} as {}", entry.display(), link.display())),
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

fn records_connection(dir: &Path) -> Result<rusqlite::Connection> {
    metadata::open_read_only(&dir.join(metadata::FILE_NAME))
}

/// The files the latest version lists, with their sizes and CRCs (from `version_files`, or
/// for a pack made before versions from its `shards` and `companions` tables).
fn latest_files(url: &Url, dir: &Path) -> Result<Vec<VersionFile>> {
    let conn = records_connection(dir)?;
    let view = View::resolve(&conn, dir, &VersionSpec::Latest)?;
    let files = view.version().files.clone();
    if !files.iter().any(|f| f.family == metadata::STEPS_FAMILY) {
        fail!(
            Unsupported,
            "{url}: its {} records no shard checksums (an older tool's pack), and a remote \
             pack's files are only read checked against them; copy it to a local folder, or \
             republish it after `dataset-packer export --format pack`",
            metadata::FILE_NAME
        );
    }
    Ok(files)
}

/// Downloads at once: enough streams to fill a link to a store, few enough for a small node.
const PARALLEL_FETCHES: usize = 8;

/// Every file of `files`, in order, from the cache (downloaded by up to
/// [`PARALLEL_FETCHES`] threads); the first error (in file order) if any fails.
fn fetch_all(
    cache: &Cache,
    url: &Url,
    commit: Option<&Commit>,
    files: &[VersionFile],
    dir: &Path,
) -> Result<Vec<Entry>> {
    // Any number of results may wait for an earlier, larger file: they are pins, not bytes.
    let mut entries = Vec::with_capacity(files.len());
    crate::ordered::ordered_try_map(
        files,
        PARALLEL_FETCHES,
        files.len().max(1),
        || (),
        |_, file| fetch_into_view(cache, url, commit, file, dir),
        |_, fetched| {
            entries.push(fetched?);
            Ok(())
        },
    )?;
    Ok(entries)
}

/// [`fetch`], linked into the view under its pack name.
fn fetch_into_view(
    cache: &Cache,
    url: &Url,
    commit: Option<&Commit>,
    file: &VersionFile,
    view: &Path,
) -> Result<Entry> {
    let link = view.join(&file.file_name);
    loop {
        let entry = fetch(cache, url, commit, file, view)?;
        if link_into_view(entry.path(), &link)? {
            return Ok(entry);
        }
    }
}

/// The file `file` of the pack at `url` (at `commit`, else in the layout before commits),
/// from the cache (downloaded and checked if needed).
fn fetch(
    cache: &Cache,
    url: &Url,
    commit: Option<&Commit>,
    file: &VersionFile,
    view: &Path,
) -> Result<Entry> {
    let (key, crc) = object_key(url, commit, file)?;
    let file_url = url.join(&key)?;
    cache.fetch(&file_url, file.bytes, crc).map_err(|e| {
        if e.kind() == ErrorKind::NotAPack {
            // The pack lists it, the bucket lacks it: a damaged pack, not a missing one.
            let message = format!(
                "{url} lists {} but the store has no such object",
                file.file_name
            );
            e.within(message).with_kind(ErrorKind::Corrupt)
        } else if commit.is_none()
            && e.kind() == ErrorKind::Corrupt
            && changed_since_opened(cache, url, view)
        {
            Error::new(
                ErrorKind::Busy,
                format!(
                    "{url} changed while this command read it: a new version was published \
                     since its metadata.db was downloaded, and {} now holds other bytes than \
                     the version read records (packs in object storage are rewritten in \
                     place); run the command again",
                    file.file_name
                ),
            )
        } else {
            e
        }
    })
}

/// The key below the pack's URL of the object holding `file` (at `commit`, whose record must
/// agree with the pack's `metadata.db` on its size and CRC-32C; its own name in the layout
/// before commits), and its CRC-32C.
pub(crate) fn object_key(
    url: &Url,
    commit: Option<&Commit>,
    file: &VersionFile,
) -> Result<(String, u32)> {
    let crc = u32::from_str_radix(&file.crc32c, 16).map_err(|_| {
        Error::new(
            ErrorKind::Corrupt,
            format!(
                "{url}/{}: its {} records the CRC-32C {:?}, not 8 hex digits",
                metadata::FILE_NAME,
                file.file_name,
                file.crc32c
            ),
        )
    })?;
    let key = match commit {
        None => file.file_name.clone(),
        Some(commit) => commit.key_of(url, &file.file_name, file.bytes, crc)?,
    };
    Ok((key, crc))
}

/// Whether the pack's `metadata.db` in the store is no longer the one downloaded into the
/// view folder `view` (a writer published since).
fn changed_since_opened(cache: &Cache, url: &Url, view: &Path) -> bool {
    let Ok(now) = url
        .join(metadata::FILE_NAME)
        .and_then(|db| cache.store().get(&db))
    else {
        return false;
    };
    fs::read(view.join(metadata::FILE_NAME)).is_ok_and(|opened| opened != now)
}
