//! Publishing a finished local pack to object storage: every file but `metadata.db` first,
//! then `metadata.db`, the commit point (a reader that finds it finds every file it lists).
//! Nothing in the bucket is deleted or overwritten unless the caller says overwrite, and then
//! only the files of the pack that was there (those its `metadata.db` lists).

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use super::client::Store;
use super::location::Url;
use crate::error::{Context, Error, ErrorKind, Result, fail};
use crate::format::{metadata, valuation};
use crate::pack::files;

/// Reads the names of the files a pack's `metadata.db` (the local file given) lists, in
/// every version of it: the pack module's knowledge, passed in so that the store, which
/// knows objects and not packs, stays below it.
pub type ListedFiles = fn(&Path) -> Result<Vec<String>>;

/// What [`publish_dir`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishSummary {
    /// The files uploaded, `metadata.db` last.
    pub uploaded: Vec<String>,
    pub bytes: u64,
    /// The old pack's files that the new one does not have, deleted after the commit.
    pub deleted: Vec<String>,
    /// Entries of the local folder that are not files of a pack (left out).
    pub skipped: Vec<String>,
    /// Files of the new pack already at the URL with the same bytes (not uploaded again).
    pub unchanged: Vec<String>,
}

/// Uploads the finished pack in `local` to `url`: shards, companions and
/// `valuation_types.json` first, `metadata.db` last.
///
/// Where `url` already holds a pack (a `metadata.db`), this is refused unless `overwrite`;
/// with it, the old pack's files (as `listed_files` reads them from its `metadata.db`) are
/// replaced, and those the new pack does not have are deleted once the new `metadata.db` is
/// in place. Any other object under `url` with a name the new pack uses is refused even with
/// `overwrite`: it is not the old pack's to replace.
///
/// ```no_run
/// use dataset_packer::store::{publish_dir, Location, Store};
/// # fn listed(db: &std::path::Path) -> dataset_packer::Result<Vec<String>> { Ok(vec![]) }
///
/// let store = Store::from_env()?;
/// let url: Location = "s3://training/team/clean".parse()?;
/// let summary = publish_dir(&store, "packs/clean".as_ref(), url.url().unwrap(), false, listed)?;
/// println!("{} files, {} bytes", summary.uploaded.len(), summary.bytes);
/// # Ok::<(), dataset_packer::Error>(())
/// ```
pub fn publish_dir(
    store: &Store,
    local: &Path,
    url: &Url,
    overwrite: bool,
    listed_files: ListedFiles,
) -> Result<PublishSummary> {
    publish_dir_except(store, local, url, overwrite, listed_files, &[])
}

/// [`publish_dir`] over the pack at `url` (with `overwrite`), leaving out the files
/// `unchanged`: files of the old pack the caller knows hold the same bytes as the local ones
/// (an update of a downloaded pack, whose full shards stay as they were). Each must be a file
/// the old pack lists; `metadata.db` is always uploaded.
pub fn publish_dir_except(
    store: &Store,
    local: &Path,
    url: &Url,
    overwrite: bool,
    listed_files: ListedFiles,
    unchanged: &[String],
) -> Result<PublishSummary> {
    let (mut names, skipped) = local_pack_files(local)?;
    let existing: BTreeSet<String> = store.list(url)?.into_iter().map(|l| l.name).collect();
    let previous = if existing.contains(metadata::FILE_NAME) {
        if !overwrite {
            return Err(Error::new(
                ErrorKind::Refused,
                format!("{url} already holds a pack; replacing it deletes that pack's files"),
            )
            .with_option("overwrite"));
        }
        previous_pack_files(store, url, listed_files)?
    } else {
        BTreeSet::new()
    };
    let foreign: Vec<&String> = names
        .iter()
        .filter(|n| existing.contains(*n) && !previous.contains(*n))
        .collect();
    if !foreign.is_empty() {
        fail!(
            Refused,
            "{url} holds objects named like files of the new pack that no pack there lists \
             (left by an interrupted upload?): {}; remove them first",
            join(&foreign)
        );
    }
    // Only what the old pack there has as its own is left as it is.
    let unchanged: Vec<&String> = unchanged
        .iter()
        .filter(|n| {
            *n != metadata::FILE_NAME
                && previous.contains(*n)
                && existing.contains(*n)
                && names.contains(n)
        })
        .collect();
    // metadata.db last: the commit point.
    names.sort_by_key(|n| n == metadata::FILE_NAME);
    let mut summary = PublishSummary {
        skipped,
        unchanged: unchanged.iter().map(|n| n.to_string()).collect(),
        ..PublishSummary::default()
    };
    for name in names.iter().filter(|n| !unchanged.contains(n)) {
        let path = local.join(name);
        summary.bytes += store.put_file(&path, &url.join(name)?).with_context(|| {
            format!(
                "publishing to {url} stopped before the commit ({} is uploaded last): \
                     what {url} held is unchanged",
                metadata::FILE_NAME
            )
        })?;
        summary.uploaded.push(name.clone());
    }
    let new: BTreeSet<&String> = names.iter().collect();
    for name in previous.iter().filter(|n| !new.contains(n)) {
        if existing.contains(name) {
            store.delete(&url.join(name)?).with_context(|| {
                format!(
                    "the new pack is published at {url}, but deleting {name} of the pack it \
                     replaced failed (delete it by hand)"
                )
            })?;
            summary.deleted.push(name.clone());
        }
    }
    Ok(summary)
}

/// The files of the finished pack in `local` (shards, companions, `valuation_types.json`,
/// `metadata.db`), and the entries that are not (sorted).
fn local_pack_files(local: &Path) -> Result<(Vec<String>, Vec<String>)> {
    if !local.join(metadata::FILE_NAME).is_file() {
        fail!(
            NotAPack,
            "{} is not a pack: it has no {}",
            local.display(),
            metadata::FILE_NAME
        );
    }
    let (mut names, mut skipped) = (Vec::new(), Vec::new());
    for entry in fs::read_dir(local).with_context(|| format!("listing {}", local.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_file = entry.file_type()?.is_file();
        if is_file
            && files::is_pack_file(&name)
            && name.starts_with(metadata::FILE_NAME)
            && name != metadata::FILE_NAME
        {
            fail!(
                Refused,
                "{} is not a finished pack: {name} says a writer still has its metadata.db open",
                local.display()
            );
        }
        let ours = files::is_pack_file(&name) || files::parse_file_name(&name).is_some();
        if is_file && ours {
            names.push(name);
        } else {
            skipped.push(name);
        }
    }
    names.sort();
    skipped.sort();
    Ok((names, skipped))
}

/// The files of the pack now at `url`, as its `metadata.db` lists them (plus that file and
/// `valuation_types.json`, which every pack has).
fn previous_pack_files(store: &Store, url: &Url, listed: ListedFiles) -> Result<BTreeSet<String>> {
    let temp = tempfile_dir()?;
    let db = temp.path().join(metadata::FILE_NAME);
    let mut out = fs::File::create(&db).with_context(|| format!("creating {}", db.display()))?;
    store.download_to(&url.join(metadata::FILE_NAME)?, &mut out)?;
    drop(out);
    let mut names: BTreeSet<String> = listed(&db)
        .with_context(|| format!("reading the files {url}/{} lists", metadata::FILE_NAME))?
        .into_iter()
        .collect();
    names.insert(metadata::FILE_NAME.to_string());
    names.insert(valuation::FILE_NAME.to_string());
    Ok(names)
}

/// A private temporary folder, removed on drop.
fn tempfile_dir() -> Result<TempDir> {
    let base = std::env::temp_dir();
    for attempt in 0..100u32 {
        let path = base.join(format!(
            "dataset-packer-publish-{}-{attempt}",
            std::process::id()
        ));
        match fs::create_dir(&path) {
            Ok(()) => return Ok(TempDir(path)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::from(e).within(format!("creating {}", path.display()))),
        }
    }
    fail!(
        Io,
        "could not make a temporary folder in {}",
        base.display()
    )
}

struct TempDir(std::path::PathBuf);

impl TempDir {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn join(names: &[&String]) -> String {
    names
        .iter()
        .map(|n| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
