//! Where a command writes its pack: a local folder, or a URL in object storage. For a URL the
//! pack is built in a local staging folder exactly as it would be built in a local output (the
//! command's `--temp` folder when it has one, else `staging/` in the cache folder), then
//! published with [`store::publish_commit`] as the commit after the one the command started
//! from: new objects first, then the commit's record, created only if no other writer made
//! that commit meanwhile. A reader sees the old pack or the complete new one, never a mix, and
//! keeps reading the one it opened.
//!
//! [`Target`] is the one place that tells the two apart, so `pack`, `merge`, `shuffle` and
//! `export` only ask it for a folder to write into and publish through it. An existing pack at
//! the URL is refused before any work starts, unless overwriting was asked for; the staging
//! folder is removed afterwards, on failure and on Ctrl-C too.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Context, Error, ErrorKind, Result, fail};
use crate::format::metadata;
use crate::format::valuation;
use crate::interrupt::{self, OnInterrupt};
use crate::pack::remote;
use crate::pack::versions::History;
use crate::store::{self, Cache, Commit, FileRef, Head, Location, Store, Url};

/// What publishing a pack to object storage did: the summary a command prints.
///
/// ```
/// use dataset_packer::Uploaded;
///
/// let up = Uploaded {
///     url: "s3://packs/clean".into(),
///     commit: 3,
///     files: vec!["metadata.db".into(), "steps-00003.npy".into()],
///     bytes: 8192,
///     unchanged: vec!["steps-00000.npy".into()],
/// };
/// assert_eq!(
///     up.to_string(),
///     "s3://packs/clean (commit 3: 2 files, 8192 bytes uploaded, 1 unchanged)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Uploaded {
    /// Where the pack was published.
    pub url: String,
    /// The commit made; when nothing changed, the commit already there (0 for a pack in the
    /// layout before commits, left as it was).
    pub commit: u64,
    /// The files uploaded, in name order.
    pub files: Vec<String>,
    /// Bytes uploaded.
    pub bytes: u64,
    /// Files already there with the same bytes, not uploaded again (an update's full shards).
    pub unchanged: Vec<String>,
}

impl std::fmt::Display for Uploaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.files.len();
        write!(
            f,
            "{} (commit {}: {n} file{}, {} bytes uploaded",
            self.url,
            self.commit,
            if n == 1 { "" } else { "s" },
            self.bytes
        )?;
        if !self.unchanged.is_empty() {
            write!(f, ", {} unchanged", self.unchanged.len())?;
        }
        f.write_str(")")
    }
}

/// The output of a command that writes a pack: a local folder, or a local staging folder
/// published to a URL.
pub enum Target {
    /// A local folder, written in place (through [`crate::pack::publish::OutputDir`]).
    Local(PathBuf),
    /// A URL, staged locally first.
    Remote(Box<Remote>),
}

/// A pack on its way to object storage: its URL and the local staging folder it is built in
/// (removed when this is dropped).
pub struct Remote {
    url: Url,
    store: Arc<Store>,
    staging: PathBuf,
    /// The commit the command started from, which its own commit follows: the latest when it
    /// started, commit 0 for a pack in the layout before commits (its files under their own
    /// names), None for no pack.
    base: Option<Commit>,
    /// For an update: the `metadata.db` downloaded, to tell whether the update changed it.
    downloaded_db: Option<Vec<u8>>,
    _on_interrupt: interrupt::Registered,
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.staging);
    }
}

impl Target {
    /// The target for `output`: a local folder, or (for an `s3://`, `gs://` or `az://` URL)
    /// a staging folder under `temp` (else the cache folder's `staging/`). A pack already at
    /// the URL is refused unless `overwrite`, before anything is written; read-only URLs
    /// (`http(s)://`) and unknown schemes are refused.
    pub fn of(output: &Path, overwrite: bool, temp: Option<&Path>) -> Result<Target> {
        match output_url(output)? {
            None => Ok(Target::Local(local_path(output)?)),
            Some(url) => Ok(Target::Remote(Box::new(Remote::prepare(
                url, overwrite, temp,
            )?))),
        }
    }

    /// The target of an update of the pack at `output`. For a URL: the pack there is
    /// downloaded into the staging folder (its latest version's files through the cache,
    /// each checked against the size and CRC-32C its `metadata.db` records), for the update to
    /// extend as it extends a local pack; [`Target::publish`] then replaces the pack's own
    /// files (none other) and uploads nothing when the update changed nothing. Without a pack
    /// at the URL, the staging folder starts empty (an update of nothing is a new pack).
    pub fn for_update(output: &Path, temp: Option<&Path>) -> Result<Target> {
        let Some(url) = output_url(output)? else {
            return Ok(Target::Local(local_path(output)?));
        };
        let mut remote = Remote::prepare(url, true, temp)?;
        remote.download_pack()?;
        Ok(Target::Remote(Box::new(remote)))
    }

    /// The folder to write the pack into.
    pub fn dir(&self) -> &Path {
        match self {
            Target::Local(dir) => dir,
            Target::Remote(remote) => &remote.staging,
        }
    }

    /// The URL, for a remote target.
    pub fn url(&self) -> Option<&Url> {
        match self {
            Target::Local(_) => None,
            Target::Remote(remote) => Some(&remote.url),
        }
    }

    /// Refuses an input of the command that is the output URL itself (the local case is the
    /// command's own check, on folders).
    pub fn refuse_input(&self, input: &Path) -> Result<()> {
        if let (Some(url), Ok(Some(input_url))) = (self.url(), output_url(input))
            && *url == input_url
        {
            return Err(Error::new(
                ErrorKind::Refused,
                format!("{url} is both an input and the output; write the output elsewhere"),
            )
            .with_option("output"));
        }
        Ok(())
    }

    /// Publishes the finished pack in [`Target::dir`] to the URL (nothing to do for a local
    /// target: the command published it in place) and removes the staging folder.
    pub fn publish(self) -> Result<Option<Uploaded>> {
        match self {
            Target::Local(_) => Ok(None),
            Target::Remote(remote) => remote.publish().map(Some),
        }
    }
}

/// Runs `change` on the pack at `pack`: on the folder itself, or, for a URL, on a local copy
/// of its latest commit that is then published as the next commit (what `attach`, `detach`
/// and `tag` do on a URL). Another writer's commit meanwhile makes it an
/// [`ErrorKind::Conflict`] error, with nothing of it published: the change was made to a
/// version that is no longer the latest.
pub(crate) fn change_at<T>(pack: &Path, change: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let Some(url) = output_url(pack)? else {
        return change(pack);
    };
    let mut remote = Remote::prepare(url, true, None)?;
    if remote.base.is_none() {
        fail!(
            NotAPack,
            "{} is not a pack (no commit record in {}/{} and no {} there)",
            remote.url,
            remote.url,
            store::VERSIONS,
            metadata::FILE_NAME
        );
    }
    remote.download_pack()?;
    let value = change(&remote.staging)?;
    remote.publish()?;
    Ok(value)
}

/// The URL `output` names, or None for a local path. An unknown scheme (`ftp://…`) or a
/// known one written wrong (`s3:bucket`) is an error, never a folder.
pub fn output_url(output: &Path) -> Result<Option<Url>> {
    let Some(text) = output.to_str() else {
        return Ok(None); // not UTF-8: a local path (URLs are text)
    };
    Ok(Location::parse(text)?.url().cloned())
}

/// The local folder `output` names (`file:///abs` is `/abs`).
fn local_path(output: &Path) -> Result<PathBuf> {
    match output.to_str() {
        Some(text) => Ok(Location::parse(text)?
            .path()
            .map_or_else(|| output.to_path_buf(), Path::to_path_buf)),
        None => Ok(output.to_path_buf()),
    }
}

impl Remote {
    /// Checks the URL (writable, no pack there unless `overwrite`), reads the commit there,
    /// then makes the staging folder.
    fn prepare(url: Url, overwrite: bool, temp: Option<&Path>) -> Result<Remote> {
        if url.scheme().is_read_only() {
            return Err(Error::new(
                ErrorKind::Refused,
                format!("{url}: a web server is read-only; publish packs to s3://, gs:// or az://"),
            )
            .with_option("output"));
        }
        let store = Arc::new(Store::from_env()?);
        let base = match store::head(&store, &url)? {
            Head::Empty => None,
            Head::Plain => Some(Commit::new(0, None, "", "", "")),
            Head::Commit(commit) => Some(*commit),
        };
        if base.is_some() {
            if !overwrite {
                return Err(Error::new(
                    ErrorKind::Refused,
                    format!(
                        "{url} already holds a pack; it is replaced only when overwriting is \
                         asked for"
                    ),
                )
                .with_option("overwrite"));
            }
            interrupt::replacing();
        }
        let staging_base = match temp {
            Some(dir) => dir.to_path_buf(),
            None => store::cache_config()?.dir.join("staging"),
        };
        fs::create_dir_all(&staging_base)
            .with_context(|| format!("creating {}", staging_base.display()))?;
        store::sweep_stale_staging(&staging_base);
        let staging = store::fresh_staging(&staging_base)?;
        Ok(Remote {
            _on_interrupt: interrupt::register(&staging, OnInterrupt::Remove),
            url,
            store,
            staging,
            base,
            downloaded_db: None,
        })
    }

    /// Downloads the pack at the URL, if there is one, into the (empty) staging folder: the
    /// files of the commit read in [`Remote::prepare`] (or of a pack in the layout before
    /// commits), each checked against its recorded size and CRC-32C. For a pack in the old
    /// layout the base commit (0) then names its files by their own keys, so the first commit
    /// keeps them.
    fn download_pack(&mut self) -> Result<()> {
        let Some(base) = &self.base else {
            return Ok(());
        };
        let plain = base.commit == 0;
        let db = self.staging.join(metadata::FILE_NAME);
        let (db_bytes, valuations) = if plain {
            let db_url = self.url.join(metadata::FILE_NAME)?;
            let valuations_url = self.url.join(valuation::FILE_NAME)?;
            (self.store.get(&db_url)?, self.store.get(&valuations_url)?)
        } else {
            let read = |name: &str| -> Result<Vec<u8>> {
                store::read_small_file(&self.store, &self.url, base, name)?.ok_or_else(|| {
                    Error::new(
                        ErrorKind::Corrupt,
                        format!("commit {} of {} has no {name}", base.commit, self.url),
                    )
                })
            };
            (read(metadata::FILE_NAME)?, read(valuation::FILE_NAME)?)
        };
        fs::write(&db, &db_bytes).with_context(|| format!("writing {}", db.display()))?;
        let valuations_path = self.staging.join(valuation::FILE_NAME);
        fs::write(&valuations_path, &valuations)
            .with_context(|| format!("writing {}", valuations_path.display()))?;
        let files = {
            let conn = metadata::open_read_only(&db)?;
            History::read(&conn)
                .with_context(|| format!("reading the history of {}", self.url))?
                .latest()
                .files
                .clone()
        };
        let config = store::cache_config()?;
        let cache = Cache::open(&config.dir, config.limit, self.store.clone())?;
        let mut plain_files = Vec::new();
        for file in &files {
            let (key, crc) = remote::object_key(&self.url, (!plain).then_some(base), file)?;
            let entry = cache.fetch(&self.url.join(&key)?, file.bytes, crc)?;
            let to = self.staging.join(&file.file_name);
            fs::copy(entry.path(), &to).with_context(|| {
                format!("copying {} to {}", entry.path().display(), to.display())
            })?;
            plain_files.push((file.file_name.clone(), key, file.bytes, crc));
        }
        if plain {
            let base = self.base.as_mut().expect("checked above");
            for (name, key, bytes, crc32c) in plain_files {
                base.files.insert(name, FileRef { key, bytes, crc32c });
            }
            for (name, bytes) in [
                (metadata::FILE_NAME, &db_bytes),
                (valuation::FILE_NAME, &valuations),
            ] {
                let file = FileRef {
                    key: name.to_string(),
                    bytes: bytes.len() as u64,
                    crc32c: crate::crc::crc32c(bytes),
                };
                base.files.insert(name.to_string(), file);
            }
        }
        self.downloaded_db = Some(db_bytes);
        Ok(())
    }

    fn publish(self) -> Result<Uploaded> {
        // The command published its pack into the staging folder; the output is the URL, and
        // nothing is published there until the commit's record is created.
        interrupt::not_published();
        let db = self.staging.join(metadata::FILE_NAME);
        if let (Some(downloaded), Some(base)) = (&self.downloaded_db, &self.base)
            && fs::read(&db).with_context(|| format!("reading {}", db.display()))? == *downloaded
        {
            // An update that found nothing new: the pack there is already this one.
            return Ok(Uploaded {
                url: self.url.to_string(),
                commit: base.commit,
                files: Vec::new(),
                bytes: 0,
                unchanged: base.files.keys().cloned().collect(),
            });
        }
        let options = store::CommitOptions {
            command: commit_command(),
            pack_id: pack_id(&db)?,
            single_writer: store::single_writer(),
        };
        let summary = store::publish_commit(
            &self.store,
            &self.staging,
            &self.url,
            self.base.as_ref(),
            &options,
        )?;
        interrupt::published();
        Ok(Uploaded {
            url: self.url.to_string(),
            commit: summary.commit,
            files: summary.uploaded,
            bytes: summary.bytes,
            unchanged: summary.unchanged,
        })
    }
}

/// The `pack_id` the pack's `metadata.db` at `db` records (empty for a pack made before pack
/// ids), for its commit record.
fn pack_id(db: &Path) -> Result<String> {
    let conn = metadata::open_read_only(db)?;
    Ok(metadata::session_value(&conn, metadata::PACK_ID)?.unwrap_or_default())
}

/// What a commit record says made it: the command line, cut to 200 characters.
fn commit_command() -> String {
    crate::pack::query::process_command_line()
        .chars()
        .take(200)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_paths_and_urls_are_told_apart() {
        assert_eq!(output_url(Path::new("packs/d6")).unwrap(), None);
        assert_eq!(
            output_url(Path::new("s3://packs/team/clean"))
                .unwrap()
                .unwrap()
                .to_string(),
            "s3://packs/team/clean"
        );
        assert!(output_url(Path::new("ftp://host/p")).is_err());
        assert_eq!(
            local_path(Path::new("file:///data/p")).unwrap(),
            Path::new("/data/p")
        );
    }

    #[test]
    fn read_only_urls_are_refused_before_any_request() {
        let e = Target::of(Path::new("https://host/pack"), false, None)
            .err()
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::Refused);
        assert!(e.to_string().starts_with("https://host/pack"), "{e}");
    }
}
