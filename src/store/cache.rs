//! A bounded local cache of whole remote files, shared by every process on a node.
//!
//! Layout: `<dir>/CACHEDIR.TAG` and `<dir>/entries/`, where each cached file is `NAME` (its
//! bytes, CRC-checked), with `NAME.lock` beside it and `NAME.part` while it downloads. `NAME`
//! is `<hash of the URL>-<CRC-32C>-<size>-<file name>`, so a file replaced under the same URL
//! is a different entry.
//!
//! Why it can be trusted and shared:
//! - A download goes to `NAME.part`, is checked against the expected size and CRC-32C, and
//!   only then renamed to `NAME`: a process killed mid-download leaves a `.part`, which no
//!   reader takes for data (the next downloader overwrites it, eviction removes it).
//! - Each time a process pins an entry, its bytes are checked against the CRC-32C in its
//!   name: a damaged entry (a flipped byte on the node's disk) is removed, with a warning that
//!   names the cache file, and fetched again.
//! - `NAME.lock` carries `flock` locks: exclusive while downloading or evicting, shared while
//!   an [`Entry`] is alive. Processes that want the same file wait (for the shared lock) for
//!   the one downloading it, so a node downloads each file once. The exclusive lock is only
//!   ever tried, never waited for, so no two processes can wait for each other's entries;
//!   eviction skips an entry it cannot lock, so it never removes a file in use.
//! - `entries/`, or any file in it, may be deleted under running processes: a fetch makes the
//!   folder again and downloads what is missing.
//! - `<dir>/.evict.lock` serializes making room: the downloader reserves its file's size (the
//!   `.part` is created at full length) before the next process counts the total.
//! - Eviction removes the least recently used entries (their lock file's modification time,
//!   stamped on each fetch) and only names it made, inside `entries/`.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::client::Store;
use super::location::Url;
use crate::error::{Context, Error, ErrorKind, Result, fail};

/// The cache folder's tag (the Cache Directory Tagging Specification): backup tools skip it.
const TAG: &str = "CACHEDIR.TAG";
const TAG_TEXT: &str = "Signature: 8a477f597d28d172789f06886806bc55\n\
# This folder is a cache made by dataset-packer: its entries/ can be deleted at any time.\n";

/// A bounded cache folder for files fetched from object storage.
///
/// ```no_run
/// use std::sync::Arc;
/// use dataset_packer::store::{Cache, Location, Store};
///
/// let store = Arc::new(Store::from_env()?);
/// let cache = Cache::open(Cache::default_dir()?, 50 << 30, store)?;
/// let url = "s3://training/clean/steps-00000.npy".parse::<Location>()?;
/// let entry = cache.fetch(url.url().unwrap(), 48_128, 0x1234_5678)?;
/// let bytes = std::fs::read(entry.path())?; // pinned while `entry` lives
/// # Ok::<(), dataset_packer::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
    entries: PathBuf,
    limit: u64,
    store: Arc<Store>,
}

/// A cached file in use: while it lives, no process evicts it. Its file is complete and
/// matched the expected size and CRC-32C when it was downloaded.
#[derive(Debug)]
pub struct Entry {
    path: PathBuf,
    // Holds the shared lock that pins the entry; closing it releases the lock.
    _lock: File,
}

impl Entry {
    /// The local file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Cache {
    /// The default cache folder: `$XDG_CACHE_HOME/dataset-packer`, else
    /// `~/.cache/dataset-packer`.
    pub fn default_dir() -> Result<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Refused,
                    "no cache folder: neither XDG_CACHE_HOME nor HOME is set; give one",
                )
                .with_option("cache")
            })?;
        Ok(base.join("dataset-packer"))
    }

    /// Opens (creating it if needed) the cache in `dir`, keeping it within `limit` bytes.
    /// Files of `dir` that are not the cache's own are never touched.
    pub fn open(dir: impl Into<PathBuf>, limit: u64, store: Arc<Store>) -> Result<Cache> {
        let dir = dir.into();
        let entries = dir.join("entries");
        fs::create_dir_all(&entries)
            .with_context(|| format!("creating the cache folder {}", entries.display()))?;
        let tag = dir.join(TAG);
        if !tag.exists() {
            fs::write(&tag, TAG_TEXT).with_context(|| format!("writing {}", tag.display()))?;
        }
        Ok(Cache {
            dir,
            entries,
            limit,
            store,
        })
    }

    /// The cache folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The size limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The store the cache downloads through.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The bytes the cache holds now (entries and downloads under way).
    pub fn size(&self) -> Result<u64> {
        Ok(self.scan()?.iter().map(|f| f.bytes).sum())
    }

    /// The file at `url`, `len` bytes long with CRC-32C `crc32c`, as a local file pinned in
    /// the cache: from the cache when it is there, else downloaded once for the whole node
    /// (a process that wants it while another downloads it waits), checked, and kept.
    /// Errors: the download's (naming the URL), [`ErrorKind::Corrupt`] when the bytes do not
    /// match, [`ErrorKind::Refused`] when the file cannot fit in the limit.
    pub fn fetch(&self, url: &Url, len: u64, crc32c: u32) -> Result<Entry> {
        self.fetch_entry(url, None, len, crc32c)
    }

    /// Bytes `start..start + len` of the file at `url` (one block of it, whose CRC-32C is
    /// `crc32c`), as a local file pinned in the cache: an entry of its own, fetched by one
    /// ranged request, under the same limit, locks, checks and eviction as whole files.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use dataset_packer::store::{Cache, Location, Store};
    /// # let cache = Cache::open("/tmp/cache", 1 << 30, Arc::new(Store::from_env()?))?;
    /// let url = "s3://training/clean/steps-00000.npy".parse::<Location>()?;
    /// let block = cache.fetch_block(url.url().unwrap(), 1 << 20, 1 << 20, 0x89ab_cdef)?;
    /// assert_eq!(std::fs::metadata(block.path())?.len(), 1 << 20);
    /// # Ok::<(), dataset_packer::Error>(())
    /// ```
    pub fn fetch_block(&self, url: &Url, start: u64, len: u64, crc32c: u32) -> Result<Entry> {
        self.fetch_entry(url, Some(start), len, crc32c)
    }

    /// Whether the cache holds the file at `url` (`len` bytes, CRC-32C `crc32c`) whole now:
    /// looked at, not pinned or checked (what decides how a file is read; reading it goes
    /// through [`Cache::fetch`], which pins and checks it).
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use dataset_packer::store::{Cache, Location, Store};
    /// # let cache = Cache::open("/tmp/cache", 1 << 30, Arc::new(Store::from_env()?))?;
    /// let url = "s3://training/clean/steps-00000.npy".parse::<Location>()?;
    /// if cache.holds(url.url().unwrap(), 48_128, 0x1234_5678) {
    ///     let entry = cache.fetch(url.url().unwrap(), 48_128, 0x1234_5678)?;
    ///     println!("from the cache: {}", entry.path().display());
    /// }
    /// # Ok::<(), dataset_packer::Error>(())
    /// ```
    pub fn holds(&self, url: &Url, len: u64, crc32c: u32) -> bool {
        is_complete(&self.entries.join(entry_name(url, None, len, crc32c)), len)
    }

    fn fetch_entry(&self, url: &Url, start: Option<u64>, len: u64, crc32c: u32) -> Result<Entry> {
        let name = entry_name(url, start, len, crc32c);
        let wanted = Wanted {
            url,
            start,
            len,
            crc32c,
            path: self.entries.join(&name),
            lock_path: self.entries.join(format!("{name}.lock")),
        };
        let (mut stale, mut restarts) = (0, 0);
        loop {
            match self.try_fetch(&wanted, &mut stale) {
                Ok(Some(entry)) => return Ok(entry),
                Ok(None) => {}
                // `entries/` deleted under this fetch (the tag says it may be at any time):
                // start over in a new one.
                Err(e)
                    if e.io_kind() == Some(std::io::ErrorKind::NotFound)
                        && restarts < STALE_TRIES =>
                {
                    restarts += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One round of [`Cache::fetch`]: the pinned entry, or None to go round again.
    fn try_fetch(&self, w: &Wanted, stale: &mut u32) -> Result<Option<Entry>> {
        fs::create_dir_all(&self.entries)
            .with_context(|| format!("creating {}", self.entries.display()))?;
        // Blocking for a shared lock waits only for a downloader or an evictor, neither of
        // which ever waits for an entry's lock: no process waits in a cycle.
        let lock = lock_entry(&w.lock_path, libc::LOCK_SH)?;
        if same_file(&lock, &w.lock_path) && is_complete(&w.path, w.len) {
            match entry_crc(&w.path)? {
                Some(crc) if crc == w.crc32c => {
                    stamp(&lock);
                    return Ok(Some(Entry {
                        path: w.path.clone(),
                        _lock: lock,
                    }));
                }
                Some(_) => {
                    log::warn!(
                        "the cache file {} is damaged (its bytes do not have the CRC-32C \
                         {:08x} of {}); fetching it again",
                        w.path.display(),
                        w.crc32c,
                        w.url
                    );
                    let _ = fs::remove_file(&w.path);
                }
                None => {} // removed meanwhile
            }
            return Ok(None);
        }
        drop(lock);
        let Some(lock) = try_lock_entry(&w.lock_path)? else {
            *stale += 1;
            if *stale > STALE_TRIES {
                // A process holds the entry pinned while its file is gone (deleted under it),
                // so the exclusive lock never comes: a new lock file starts over.
                let _ = fs::remove_file(&w.lock_path);
                *stale = 0;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            return Ok(None);
        };
        // Another process downloaded it between the two looks: it is pinned the checked way,
        // under the shared lock, next round.
        if !same_file(&lock, &w.lock_path) || is_complete(&w.path, w.len) {
            return Ok(None);
        }
        self.download(w, &w.path)?;
        stamp(&lock);
        // Downgrading is not atomic: an evictor may take the entry in between, so the entry
        // is looked at again under the shared lock.
        flock(&lock, libc::LOCK_SH)
            .with_context(|| format!("locking {}", w.lock_path.display()))?;
        if is_complete(&w.path, w.len) && same_file(&lock, &w.lock_path) {
            return Ok(Some(Entry {
                path: w.path.clone(),
                _lock: lock,
            }));
        }
        Ok(None)
    }

    /// `len` bytes of the file at `url` from `start`, read from the server (a page of rows,
    /// a header): small reads do not go through the cache.
    pub fn fetch_range(&self, url: &Url, start: u64, len: u64) -> Result<Vec<u8>> {
        self.store.get_range(url, start, len)
    }

    /// Downloads what `w` asks for into the entry `path` (its lock held exclusively): to
    /// `path.part`, reserved at full size under the eviction lock, checked, then renamed into
    /// place.
    fn download(&self, w: &Wanted, path: &Path) -> Result<()> {
        let (url, len, crc32c) = (w.url, w.len, w.crc32c);
        let part = path.with_file_name(format!(
            "{}.part",
            path.file_name()
                .expect("an entry has a name")
                .to_string_lossy()
        ));
        let file = {
            let _evicting = self.evict_lock()?;
            let _ = fs::remove_file(&part);
            self.make_room(len, url)?;
            let file =
                File::create(&part).with_context(|| format!("creating {}", part.display()))?;
            file.set_len(len)
                .with_context(|| format!("reserving {len} bytes for {}", part.display()))?;
            file
        };
        let mut out = Checked {
            file: std::io::BufWriter::with_capacity(1 << 20, file),
            crc: 0,
            written: 0,
        };
        let fetched = match w.start {
            None => self.store.download_to(url, &mut out),
            Some(start) => self
                .store
                .get_range(url, start, len)
                .and_then(|bytes| Ok(out.write_all(&bytes).map(|()| len)?)),
        };
        let what = match w.start {
            None => String::new(),
            Some(start) => format!(" (bytes {start}..{})", start + len),
        };
        let result = fetched.and_then(|_| {
            out.file.flush()?;
            if out.written != len || out.crc != crc32c {
                fail!(
                    Corrupt,
                    "{url}{what}: downloaded {} bytes with CRC-32C {:08x}, expected {len} bytes \
                     with {crc32c:08x}; the cache keeps nothing of it",
                    out.written,
                    out.crc
                );
            }
            fs::rename(&part, path).with_context(|| format!("moving {} into place", part.display()))
        });
        if result.is_err() {
            let _ = fs::remove_file(&part);
        }
        result
    }

    /// Evicts least recently used entries not in use until `incoming` more bytes fit in the
    /// limit. Call with the eviction lock held.
    fn make_room(&self, incoming: u64, url: &Url) -> Result<()> {
        if incoming > self.limit {
            return Err(Error::new(
                ErrorKind::Refused,
                format!(
                    "{url} ({incoming} bytes) is larger than the cache's limit ({} bytes)",
                    self.limit
                ),
            )
            .with_option("cache_limit"));
        }
        let mut files = self.scan()?;
        let mut total: u64 = files.iter().map(|f| f.bytes).sum();
        if total + incoming <= self.limit {
            return Ok(());
        }
        files.sort_by_key(|f| f.last_used);
        for file in &files {
            if total + incoming <= self.limit {
                break;
            }
            if self.evict(&file.name)? {
                total -= file.bytes;
            }
        }
        if total + incoming > self.limit {
            return Err(Error::new(
                ErrorKind::Refused,
                format!(
                    "the cache {} cannot take {url} ({incoming} bytes): {total} of its {} \
                     bytes are files in use",
                    self.dir.display(),
                    self.limit
                ),
            )
            .with_option("cache_limit"));
        }
        Ok(())
    }

    /// Removes the entry `name` unless a process uses or downloads it; whether it did.
    fn evict(&self, name: &str) -> Result<bool> {
        let lock_path = self.entries.join(format!("{name}.lock"));
        let Some(lock) = try_lock_entry(&lock_path)? else {
            return Ok(false);
        };
        for file in [name.to_string(), format!("{name}.part")] {
            match fs::remove_file(self.entries.join(&file)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(Error::from(e).within(format!("evicting {file} from the cache")));
                }
            }
        }
        // Removed while locked: a process that opened the old lock file sees it is gone
        // (`same_file`) and starts over.
        let _ = fs::remove_file(&lock_path);
        drop(lock);
        Ok(true)
    }

    /// The cache's entries, each with its bytes (data and any download under way, finished
    /// or left by a killed process). Only the cache's own names: anything else in the folder
    /// is left alone.
    fn scan(&self) -> Result<Vec<Cached>> {
        let mut found: std::collections::BTreeMap<String, u64> = Default::default();
        let listing = fs::read_dir(&self.entries)
            .with_context(|| format!("listing {}", self.entries.display()))?;
        for item in listing {
            let item = item?;
            let file_name = item.file_name().to_string_lossy().into_owned();
            let name = file_name.strip_suffix(".part").unwrap_or(&file_name);
            if !is_entry_name(name) {
                continue;
            }
            // Gone meanwhile (evicted), or not a regular file: not the cache's.
            if let Ok(meta) = item.path().symlink_metadata()
                && meta.is_file()
            {
                *found.entry(name.to_string()).or_default() += meta.len();
            }
        }
        Ok(found
            .into_iter()
            .map(|(name, bytes)| {
                let last_used = fs::metadata(self.entries.join(format!("{name}.lock")))
                    .and_then(|m| m.modified())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                Cached {
                    name,
                    bytes,
                    last_used,
                }
            })
            .collect())
    }

    fn evict_lock(&self) -> Result<File> {
        let path = self.dir.join(".evict.lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        flock(&file, libc::LOCK_EX).with_context(|| format!("locking {}", path.display()))?;
        Ok(file)
    }
}

/// A file [`Cache::fetch`] is asked for, and where its entry is.
struct Wanted<'a> {
    url: &'a Url,
    /// Where the bytes start in the file, for a block; None for the whole file.
    start: Option<u64>,
    len: u64,
    crc32c: u32,
    path: PathBuf,
    lock_path: PathBuf,
}

/// Tries (20 ms apart) at the exclusive lock of an entry whose file is missing before its
/// lock file is replaced: about 2 s.
const STALE_TRIES: u32 = 100;

/// The CRC-32C of a cached file, or None when it is gone meanwhile.
fn entry_crc(path: &Path) -> Result<Option<u32>> {
    match File::open(path) {
        Ok(file) => crate::crc::open_file_crc(&file, path).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::from(e).within(format!("opening {}", path.display()))),
    }
}

/// A file of the cache as a scan finds it.
struct Cached {
    name: String,
    bytes: u64,
    last_used: SystemTime,
}

/// The entry name of a file: `<xxh3 of the URL>-<crc>-<len>-<file name>`; of a block starting
/// at byte `start` of it, the same of `<URL>@<start>` and `<file name>@<start>` (the `@`
/// written `_`, as every character a file name should not hold).
fn entry_name(url: &Url, start: Option<u64>, len: u64, crc32c: u32) -> String {
    let (mut key, mut file) = (url.to_string(), url.file_name().to_string());
    if let Some(start) = start {
        key = format!("{key}@{start}");
        file = format!("{file}@{start}");
    }
    let hash = xxhash_rust::xxh3::xxh3_64(key.as_bytes());
    let file: String = file
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    format!("{hash:016x}-{crc32c:08x}-{len}-{file}")
}

/// Whether `name` is an entry name the cache makes (and so a file it may remove).
fn is_entry_name(name: &str) -> bool {
    let mut parts = name.splitn(4, '-');
    let hex = |s: Option<&str>, n: usize| {
        s.is_some_and(|s| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    hex(parts.next(), 16)
        && hex(parts.next(), 8)
        && parts
            .next()
            .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        && parts
            .next()
            .is_some_and(|s| !s.ends_with(".lock") && !s.ends_with(".part"))
}

fn is_complete(path: &Path, len: u64) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.len() == len)
}

/// Marks an entry used now (eviction goes by this time).
fn stamp(lock: &File) {
    let _ = lock.set_modified(SystemTime::now());
}

/// Opens the lock file at `path` and takes `op` (shared or exclusive) on it, waiting; starts
/// over if the file was removed (evicted) while waiting.
fn lock_entry(path: &Path, op: libc::c_int) -> Result<File> {
    loop {
        let file = open_lock(path)?;
        flock(&file, op).with_context(|| format!("locking {}", path.display()))?;
        if same_file(&file, path) {
            return Ok(file);
        }
    }
}

/// The exclusive lock on `path` if no process holds any lock on it; None if one does (or the
/// file is gone).
fn try_lock_entry(path: &Path) -> Result<Option<File>> {
    let file = open_lock(path)?;
    match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(()) if same_file(&file, path) => Ok(Some(file)),
        Ok(()) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(Error::from(e).within(format!("locking {}", path.display()))),
    }
}

fn open_lock(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

/// Whether the open `file` is still the one at `path` (not removed or replaced).
fn same_file(file: &File, path: &Path) -> bool {
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

/// `flock(2)`, retried when a signal interrupts it.
fn flock(file: &File, op: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: flock on a file descriptor this `File` owns and keeps open.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// A writer that counts and checksums what passes through it.
struct Checked<W: Write> {
    file: W,
    crc: u32,
    written: u64,
}

impl<W: Write> Write for Checked<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.crc = crate::crc::append(self.crc, &buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_are_recognised_and_nothing_else() {
        let url = match "s3://b/p/steps-00000.npy".parse().unwrap() {
            super::super::Location::Remote(u) => u,
            _ => unreachable!(),
        };
        let name = entry_name(&url, None, 4096, 0xdead_beef);
        assert!(name.ends_with("-deadbeef-4096-steps-00000.npy"), "{name}");
        assert!(is_entry_name(&name));
        assert!(!is_entry_name(&format!("{name}.lock")));
        for other in [
            "notes.txt",
            "CACHEDIR.TAG",
            "0123-deadbeef-1-x",
            "steps-00000.npy",
        ] {
            assert!(!is_entry_name(other), "{other}");
        }
        // Another CRC or length is another entry.
        assert_ne!(name, entry_name(&url, None, 4096, 1));
        assert_ne!(name, entry_name(&url, None, 4097, 0xdead_beef));
        // A block is an entry of its own, named for where it starts.
        let block = entry_name(&url, Some(1 << 20), 4096, 0xdead_beef);
        assert!(
            block.ends_with("-deadbeef-4096-steps-00000.npy_1048576"),
            "{block}"
        );
        assert!(is_entry_name(&block));
        assert_ne!(block, name);
        assert_ne!(block, entry_name(&url, Some(2 << 20), 4096, 0xdead_beef));
    }

    /// Entry names are a protocol shared with the Python package (its cache reads and
    /// writes the same folder): python/tests/test_remote.py asserts these same names.
    #[test]
    fn entry_names_are_the_ones_python_computes() {
        let name = |text: &str, len, crc| match text.parse().unwrap() {
            super::super::Location::Remote(url) => entry_name(&url, None, len, crc),
            _ => unreachable!(),
        };
        assert_eq!(
            name("s3://packs/team/clean/steps-00003.npy", 48_128, 0x1234_abcd),
            "c5b5a1d288c357c6-1234abcd-48128-steps-00003.npy"
        );
        // s3a:// and a trailing `/` name the same URL; non-ASCII and spaces are `_`, one per
        // character (not per byte).
        assert_eq!(
            name("S3A://Bucket/p/émb dé-00000.npy/", 7, 0),
            "c852b7674cf794f8-00000000-7-_mb_d_-00000.npy"
        );
    }

    #[test]
    fn a_lock_file_removed_while_waiting_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = lock_entry(&path, libc::LOCK_EX).unwrap();
        assert!(try_lock_entry(&path).unwrap().is_none(), "held elsewhere");
        fs::remove_file(&path).unwrap();
        assert!(!same_file(&held, &path));
        drop(held);
        let again = lock_entry(&path, libc::LOCK_SH).unwrap();
        assert!(same_file(&again, &path));
        assert!(
            try_lock_entry(&path).unwrap().is_none(),
            "a shared lock pins it"
        );
    }
}
