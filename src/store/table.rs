//! A pack in object storage as a table of commits: the layout of its objects and the commit
//! protocol, as Delta Lake and Lance keep theirs.
//!
//! Under the pack's URL `P`:
//! - `P/_objects/<writer>/<file name>`: the pack's files, each written once under a folder no
//!   other write uses ([`WriterId`]);
//! - `P/_versions/{2^64-1-N:020}.json`: commit N's [`Commit`] record, naming the key, size
//!   and CRC-32C of every file of the pack at that commit. Later commits have smaller names,
//!   so a listing, which comes in name order, starts with the latest. Creating it with a create-only write
//!   ([`Store::create`]) is the commit point, so of two writers that start from commit N only
//!   one makes N+1; the other learns it lost ([`try_commit`]).
//! - `P/_probes/<writer>`: the objects [`check_conditional_writes`] makes and removes.
//!
//! A reader takes the record with the highest number ([`latest_commit`]: the first page of a
//! listing of `_versions/`, then one GET, however many commits there are) and reads the objects it names, which no later commit ever
//! changes. A pack published before this layout (files under their own names, no record) has
//! no commit: the pack module reads it as it is, and its first write commits record 1.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::client::Store;
use super::location::Url;
use crate::error::{Context, Error, ErrorKind, Result, fail};

/// The folder of the commit records below a pack's URL.
pub const VERSIONS: &str = "_versions";
/// The folder of the data objects below a pack's URL.
pub const OBJECTS: &str = "_objects";
/// The folder of the conditional-write probes below a pack's URL.
pub const PROBES: &str = "_probes";

/// What a record's `format` field says.
const FORMAT: &str = "dataset-packer commit";
/// The record layout this library writes and reads.
const FORMAT_VERSION: u32 = 1;

/// One file of a pack at a commit: where its bytes are, and what they must be.
///
/// ```
/// use dataset_packer::store::FileRef;
/// let f = FileRef { key: "_objects/1-ab/steps-00000.npy".into(), bytes: 48128, crc32c: 7 };
/// assert!(f.key.ends_with("steps-00000.npy"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// The object's key below the pack's URL.
    pub key: String,
    pub bytes: u64,
    pub crc32c: u32,
}

/// A commit record: the pack's whole file list at commit `commit`.
///
/// ```
/// use dataset_packer::store::{Commit, FileRef};
/// let c = Commit::new(2, Some(1), "pack-1", "1764338400000-00ff", "pack --update");
/// assert_eq!(c.record_key(), "_versions/18446744073709551613.json"); // 2^64 - 1 - 2
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    pub format: String,
    pub format_version: u32,
    /// Its number: 1 for the first commit, one more than its parent's after.
    pub commit: u64,
    /// The commit it was made from (None for commit 1).
    pub parent: Option<u64>,
    /// The pack's `pack_id`, as its `metadata.db` records it.
    pub pack_id: String,
    /// The writer that made it ([`WriterId`]).
    pub writer: String,
    /// What made it (`pack --update`, `attach`, …), for people reading the bucket.
    pub command: String,
    /// Every file of the pack by its name in a local folder.
    pub files: BTreeMap<String, FileRef>,
}

impl Commit {
    /// A record with no files yet.
    pub fn new(
        commit: u64,
        parent: Option<u64>,
        pack_id: &str,
        writer: &str,
        command: &str,
    ) -> Commit {
        Commit {
            format: FORMAT.into(),
            format_version: FORMAT_VERSION,
            commit,
            parent,
            pack_id: pack_id.into(),
            writer: writer.into(),
            command: command.into(),
            files: BTreeMap::new(),
        }
    }

    /// The key of its record below the pack's URL.
    pub fn record_key(&self) -> String {
        record_key(self.commit)
    }

    /// The URL of the object that holds the file `name`, if the commit has that file.
    pub fn file_url(&self, pack: &Url, name: &str) -> Result<Option<Url>> {
        self.files.get(name).map(|f| pack.join(&f.key)).transpose()
    }

    /// The key of the object that holds the file `name`, which the pack's `metadata.db`
    /// records as `bytes` bytes with CRC-32C `crc32c`: the record and the pack must agree.
    ///
    /// ```
    /// use dataset_packer::store::{Commit, FileRef, Location};
    /// let pack = Location::parse("s3://b/p")?.url().unwrap().clone();
    /// let mut c = Commit::new(1, None, "id", "w", "pack");
    /// c.files.insert("steps.npy".into(), FileRef { key: "_objects/w/steps.npy".into(), bytes: 9, crc32c: 3 });
    /// assert_eq!(c.key_of(&pack, "steps.npy", 9, 3)?, "_objects/w/steps.npy");
    /// assert!(c.key_of(&pack, "steps.npy", 9, 4).is_err());
    /// # Ok::<(), dataset_packer::Error>(())
    /// ```
    pub fn key_of(&self, pack: &Url, name: &str, bytes: u64, crc32c: u32) -> Result<String> {
        match self.files.get(name) {
            Some(f) if f.bytes == bytes && f.crc32c == crc32c => Ok(f.key.clone()),
            Some(f) => fail!(
                Corrupt,
                "{pack}: commit {} records {name} as {} bytes with CRC-32C {:08x}, its \
                 metadata.db as {bytes} bytes with {crc32c:08x}",
                self.commit,
                f.bytes,
                f.crc32c
            ),
            None => fail!(
                Corrupt,
                "{pack}: commit {} does not list {name}, which its metadata.db lists",
                self.commit
            ),
        }
    }
}

/// The key of commit `n`'s record: `2^64 - 1 - n` in 20 digits, so that the latest commit's
/// name comes first in a listing (as Lance names its manifests).
fn record_key(n: u64) -> String {
    format!("{VERSIONS}/{:020}.json", u64::MAX - n)
}

/// A name no other writer uses: `{milliseconds since 1970, 13 digits}-{16 random hex
/// digits}`; the folder of a writer's objects, so that no key is ever written twice.
///
/// ```
/// use dataset_packer::store::WriterId;
/// let (a, b) = (WriterId::new(), WriterId::new());
/// assert_ne!(a, b);
/// assert_eq!(a.object_key("metadata.db"), format!("_objects/{a}/metadata.db"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterId(String);

impl WriterId {
    /// A new writer id.
    pub fn new() -> WriterId {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        WriterId(format!("{ms:013}-{:016x}", random_u64()))
    }

    /// The key below the pack's URL of this writer's object for the file `name`.
    pub fn object_key(&self, name: &str) -> String {
        format!("{OBJECTS}/{}/{name}", self.0)
    }
}

impl Default for WriterId {
    fn default() -> WriterId {
        WriterId::new()
    }
}

impl std::fmt::Display for WriterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// 64 bits from the kernel's random source (mixed with the time and process id where it
/// cannot be read: uniqueness, not secrecy, is what counts).
fn random_u64() -> u64 {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok()
    {
        return u64::from_le_bytes(bytes);
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    xxhash_rust::xxh3::xxh3_64(
        &[
            nanos.to_le_bytes(),
            u64::from(std::process::id()).to_le_bytes(),
        ]
        .concat(),
    )
}

/// The numbers of the commits recorded under `pack`, in order (one listing of `_versions/`,
/// 1,000 records a request: for every commit, as `gc` needs; [`latest_commit`] reads one
/// page). Other names there are ignored.
pub fn commit_numbers(store: &Store, pack: &Url) -> Result<Vec<u64>> {
    let mut numbers: Vec<u64> = store
        .list(&pack.join(VERSIONS)?)?
        .into_iter()
        .filter_map(|l| parse_record_name(&l.name))
        .collect();
    numbers.sort_unstable();
    Ok(numbers)
}

/// The commit number in a record's file name (`18446744073709551613.json` for commit 2).
pub(crate) fn parse_record_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".json")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let inverted: u64 = digits.parse().ok()?;
    Some(u64::MAX - inverted).filter(|&n| n > 0)
}

/// The latest commit of the pack at `pack`, or None when it has none (no pack, or one in the
/// layout before commits). A web server (`http(s)://`) cannot list, so there the records are
/// probed instead: about 2·log2(N) requests for N commits.
pub fn latest_commit(store: &Store, pack: &Url) -> Result<Option<Commit>> {
    let latest = if pack.scheme().is_read_only() {
        latest_by_probing(store, pack)?
    } else {
        latest_by_listing(store, pack)?
    };
    latest.map(|n| read_commit(store, pack, n)).transpose()
}

/// The highest commit number with a record: the first record name of the first page of a
/// listing of `_versions/` (one request), or, when that page holds other names only, of
/// the whole listing.
fn latest_by_listing(store: &Store, pack: &Url) -> Result<Option<u64>> {
    let versions = pack.join(VERSIONS)?;
    let first = store.list_first(&versions, PAGE)?;
    let found = first.iter().find_map(|o| parse_record_name(&o.key));
    if found.is_some() || first.len() < PAGE {
        return Ok(found);
    }
    Ok(commit_numbers(store, pack)?.last().copied())
}

/// The objects an S3 listing returns a request.
const PAGE: usize = 1000;

/// The highest commit number with a record, found by asking for records 1, 2, 4, … until one
/// is missing, then halving the gap (commits are numbered without gaps from 1; `gc` removes
/// the oldest records only, so the probes start at the first record there is).
fn latest_by_probing(store: &Store, pack: &Url) -> Result<Option<u64>> {
    let exists =
        |n: u64| -> Result<bool> { Ok(store.size(&pack.join(&record_key(n))?)?.is_some()) };
    if !exists(1)? {
        return Ok(None);
    }
    let mut low = 1;
    while exists(low * 2)? {
        low *= 2;
    }
    let mut high = low * 2; // missing
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if exists(mid)? {
            low = mid;
        } else {
            high = mid;
        }
    }
    Ok(Some(low))
}

/// Commit `n`'s record.
pub fn read_commit(store: &Store, pack: &Url, n: u64) -> Result<Commit> {
    let url = pack.join(&record_key(n))?;
    let bytes = store.get(&url)?;
    let commit: Commit = serde_json::from_slice(&bytes).map_err(|e| {
        Error::wrap(ErrorKind::Corrupt, e).within(format!("{url}: not a commit record"))
    })?;
    if commit.format != FORMAT || commit.commit != n {
        fail!(
            Corrupt,
            "{url}: not the record of commit {n} (format {:?}, commit {})",
            commit.format,
            commit.commit
        );
    }
    if commit.format_version != FORMAT_VERSION {
        fail!(
            Unsupported,
            "{url}: a commit record of layout {}, which this version of dataset-packer does \
             not read (it reads layout {FORMAT_VERSION}); upgrade dataset-packer",
            commit.format_version
        );
    }
    Ok(commit)
}

/// What is at a pack's URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// No pack: no commit record and no `metadata.db`.
    Empty,
    /// A pack published before commits: `metadata.db` and its files under their own names.
    Plain,
    /// A pack with commits: the latest.
    Commit(Box<Commit>),
}

/// What is at `pack`: its latest commit, a pack in the layout before commits, or nothing.
pub fn head(store: &Store, pack: &Url) -> Result<Head> {
    if let Some(commit) = latest_commit(store, pack)? {
        return Ok(Head::Commit(Box::new(commit)));
    }
    Ok(
        match store.size(&pack.join(crate::format::metadata::FILE_NAME)?)? {
            Some(_) => Head::Plain,
            None => Head::Empty,
        },
    )
}

/// The whole file `name` of `commit` (a small one: `metadata.db`, `valuation_types.json`),
/// checked against the size and CRC-32C the record gives; None when the commit has no such
/// file.
pub fn read_small_file(
    store: &Store,
    pack: &Url,
    commit: &Commit,
    name: &str,
) -> Result<Option<Vec<u8>>> {
    let Some(file) = commit.files.get(name) else {
        return Ok(None);
    };
    let url = pack.join(&file.key)?;
    let bytes = store.get(&url)?;
    let crc = crate::crc::crc32c(&bytes);
    if bytes.len() as u64 != file.bytes || crc != file.crc32c {
        fail!(
            Corrupt,
            "{url}: downloaded {} bytes with CRC-32C {crc:08x}, but commit {} of {pack} records \
             {} bytes with {:08x}",
            bytes.len(),
            commit.commit,
            file.bytes,
            file.crc32c
        );
    }
    Ok(Some(bytes))
}

/// What [`try_commit`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// The record is created: the commit is the pack's latest.
    Done,
    /// Another writer made a commit of this number first (its record is given).
    Lost(Box<Commit>),
}

/// Creates `commit`'s record with a create-only write: the commit point. Every object it
/// names must be uploaded already. A record of that number made by another writer means this
/// one lost; one made by this writer (a retried request whose first try landed) is its own.
pub fn try_commit(store: &Store, pack: &Url, commit: &Commit) -> Result<Committed> {
    let url = pack.join(&commit.record_key())?;
    let text = serde_json::to_vec_pretty(commit).expect("a record serializes");
    if store.create(&url, text)? {
        return Ok(Committed::Done);
    }
    let there = read_commit(store, pack, commit.commit)?;
    if there.writer == commit.writer {
        Ok(Committed::Done)
    } else {
        Ok(Committed::Lost(Box::new(there)))
    }
}

/// The error for a writer whose commit `lost` to another's.
pub fn conflict(pack: &Url, lost: &Commit) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!(
            "{pack} changed while this command worked on it: commit {} ({}, by writer {}) was \
             made from the same version first, and this change depends on what that one \
             replaced; nothing of it was published. Run the command again on the new version",
            lost.commit, lost.command, lost.writer
        ),
    )
}

/// Checks, once per bucket in this process, that the store refuses a second create-only write
/// of one key (some S3-compatible stores ignore the condition silently, and then two writers
/// can both commit the same number). Refused (`Refused`, option `single_writer`) where it
/// does not, unless `single_writer`: the caller's word that no other writer uses the pack.
pub fn check_conditional_writes(store: &Store, pack: &Url, single_writer: bool) -> Result<()> {
    static CHECKED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let bucket = format!("{}://{}", pack.scheme().as_str(), pack.bucket());
    if single_writer
        || CHECKED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&bucket)
    {
        return Ok(());
    }
    let probe = pack.join(&format!("{PROBES}/{}", WriterId::new()))?;
    let first = store
        .create(&probe, b"first".to_vec())
        .context("checking that the store honours create-only writes")?;
    let second = store.create(&probe, b"second".to_vec());
    let _ = store.delete(&probe);
    let second = second.context("checking that the store honours create-only writes")?;
    if !first || second {
        return Err(Error::new(
            ErrorKind::Refused,
            format!(
                "{bucket}: this store accepted a second create-only write of one object \
                 ({probe}), so two writers could both commit a version and one's work would \
                 be lost without an error. Use a store that honours If-None-Match, or, where \
                 no other process ever writes this pack, say that it is the single writer"
            ),
        )
        .with_option("single_writer"));
    }
    CHECKED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(bucket);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_names_are_twenty_digits_and_nothing_else() {
        assert_eq!(parse_record_name("18446744073709551608.json"), Some(7));
        assert_eq!(record_key(7), "_versions/18446744073709551608.json");
        assert!(
            record_key(8) < record_key(7),
            "the later commit lists first"
        );
        for other in [
            "7.json",
            "1844674407370955160x.json",
            "18446744073709551608.tmp",
            "18446744073709551615.json",
            "",
        ] {
            assert_eq!(parse_record_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_record_round_trips_through_json() {
        let mut c = Commit::new(3, Some(2), "p", &WriterId::new().to_string(), "attach");
        c.files.insert(
            "metadata.db".into(),
            FileRef {
                key: "_objects/x/metadata.db".into(),
                bytes: 4096,
                crc32c: u32::MAX,
            },
        );
        let text = serde_json::to_string(&c).unwrap();
        assert!(text.contains("\"crc32c\":4294967295"), "{text}");
        assert_eq!(serde_json::from_str::<Commit>(&text).unwrap(), c);
    }

    #[test]
    fn writer_ids_sort_by_time_and_differ() {
        let a = WriterId::new().to_string();
        let (ms, random) = a.split_once('-').unwrap();
        assert_eq!((ms.len(), random.len()), (13, 16));
        assert_ne!(a, WriterId::new().to_string());
    }
}
