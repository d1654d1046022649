//! Publishing a finished local pack to object storage as one commit of its table
//! ([`super::table`]): every file the base commit does not already hold with the same bytes is
//! uploaded under this writer's own keys, then the commit's record is created with a
//! create-only write, the commit point. Nothing is overwritten or deleted: objects no kept
//! commit names are `gc`'s to remove.

use std::fs;
use std::path::Path;

use super::client::Store;
use super::location::Url;
use super::table::{self, Commit, Committed, FileRef, WriterId};
use crate::error::{Context, Result, fail};
use crate::format::metadata;
use crate::pack::files;

/// What [`publish_commit`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishSummary {
    /// The commit made.
    pub commit: u64,
    /// The files uploaded, in name order.
    pub uploaded: Vec<String>,
    pub bytes: u64,
    /// Entries of the local folder that are not files of a pack (left out).
    pub skipped: Vec<String>,
    /// Files the base commit holds with the same bytes (named in the new record, not
    /// uploaded again).
    pub unchanged: Vec<String>,
}

/// How a publish commits.
#[derive(Debug, Clone, Default)]
pub struct CommitOptions {
    /// What makes the commit (`pack --update`), recorded for people reading the bucket.
    pub command: String,
    /// The pack's `pack_id`, as its `metadata.db` records it.
    pub pack_id: String,
    /// Skip the check that the store refuses a second create-only write: the caller's word
    /// that no other process writes this pack.
    pub single_writer: bool,
}

/// Publishes the finished pack in `local` to `url` as the commit after `base` (the commit the
/// caller read, None for a pack's first): files the base holds with the same size and
/// CRC-32C are named by their old keys, the others uploaded under new ones, then the record is
/// created. Another writer's commit of the same number makes this an
/// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) error, with nothing published.
///
/// ```no_run
/// use dataset_packer::store::{latest_commit, publish_commit, CommitOptions, Location, Store};
///
/// let store = Store::from_env()?;
/// let url: Location = "s3://training/team/clean".parse()?;
/// let url = url.url().unwrap();
/// let base = latest_commit(&store, url)?;
/// let summary = publish_commit(&store, "packs/clean".as_ref(), url, base.as_ref(), &CommitOptions::default())?;
/// println!("commit {}: {} files, {} bytes", summary.commit, summary.uploaded.len(), summary.bytes);
/// # Ok::<(), dataset_packer::Error>(())
/// ```
pub fn publish_commit(
    store: &Store,
    local: &Path,
    url: &Url,
    base: Option<&Commit>,
    options: &CommitOptions,
) -> Result<PublishSummary> {
    let (names, skipped) = local_pack_files(local)?;
    table::check_conditional_writes(store, url, options.single_writer)?;
    let writer = WriterId::new();
    let number = base.map_or(1, |b| b.commit + 1);
    let parent = base.map(|b| b.commit).filter(|&n| n > 0);
    let mut commit = Commit::new(
        number,
        parent,
        &options.pack_id,
        &writer.to_string(),
        &options.command,
    );
    let mut summary = PublishSummary {
        commit: number,
        skipped,
        ..PublishSummary::default()
    };
    for name in &names {
        let path = local.join(name);
        let bytes = fs::metadata(&path)
            .with_context(|| format!("reading {}", path.display()))?
            .len();
        let crc32c = crate::crc::file_crc(&path)?;
        let kept = base
            .and_then(|b| b.files.get(name))
            .filter(|f| f.bytes == bytes && f.crc32c == crc32c);
        let file = match kept {
            Some(f) => {
                summary.unchanged.push(name.clone());
                f.clone()
            }
            None => {
                let key = writer.object_key(name);
                summary.bytes += store.put_file(&path, &url.join(&key)?).with_context(|| {
                    format!(
                        "publishing to {url} stopped before the commit: what {url} held is \
                         unchanged"
                    )
                })?;
                summary.uploaded.push(name.clone());
                FileRef { key, bytes, crc32c }
            }
        };
        commit.files.insert(name.clone(), file);
    }
    match table::try_commit(store, url, &commit)? {
        Committed::Done => Ok(summary),
        Committed::Lost(winner) => Err(table::conflict(url, &winner)),
    }
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
