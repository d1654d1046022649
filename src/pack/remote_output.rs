//! Where a command writes its pack: a local folder, or a URL in object storage. For a URL the
//! pack is built in a local staging folder exactly as it would be built in a local output (the
//! command's `--temp` folder when it has one, else `staging/` in the cache folder), then
//! published with [`store::publish_dir`]: every shard and companion file first, `metadata.db`
//! last, the commit point. A reader sees the old pack or the complete new one, never a mix.
//!
//! [`Target`] is the one place that tells the two apart, so `pack`, `merge`, `shuffle` and
//! `export` only ask it for a folder to write into and publish through it. An existing pack at
//! the URL is refused before any work starts, unless overwriting was asked for; the staging
//! folder is removed afterwards, on failure and on Ctrl-C too.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Context, Error, ErrorKind, Result, fail};
use crate::format::metadata;
use crate::format::valuation;
use crate::interrupt::{self, OnInterrupt};
use crate::pack::versions::History;
use crate::store::{self, Cache, Location, Store, Url};

/// The prefix of the staging folders this module makes (`dataset-packer-publish-PID-N`).
const STAGING_PREFIX: &str = "dataset-packer-publish-";

/// What publishing a pack to object storage did: the summary a command prints.
///
/// ```
/// use dataset_packer::Uploaded;
///
/// let up = Uploaded {
///     url: "s3://packs/clean".into(),
///     files: vec!["steps-00003.npy".into(), "metadata.db".into()],
///     bytes: 8192,
///     deleted: vec![],
///     unchanged: vec!["steps-00000.npy".into()],
/// };
/// assert_eq!(up.to_string(), "s3://packs/clean (2 files, 8192 bytes uploaded, 1 unchanged)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Uploaded {
    /// Where the pack was published.
    pub url: String,
    /// The files uploaded, in upload order (`metadata.db`, the commit point, last).
    pub files: Vec<String>,
    /// Bytes uploaded.
    pub bytes: u64,
    /// Files of the pack that was replaced that the new one has not, deleted after the commit.
    pub deleted: Vec<String>,
    /// Files already there with the same bytes, not uploaded again (an update's full shards).
    pub unchanged: Vec<String>,
}

impl std::fmt::Display for Uploaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.files.len();
        write!(
            f,
            "{} ({n} file{}, {} bytes uploaded",
            self.url,
            if n == 1 { "" } else { "s" },
            self.bytes
        )?;
        if !self.unchanged.is_empty() {
            write!(f, ", {} unchanged", self.unchanged.len())?;
        }
        if !self.deleted.is_empty() {
            write!(f, ", {} old files deleted", self.deleted.len())?;
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
    Remote(Remote),
}

/// A pack on its way to object storage: its URL and the local staging folder it is built in
/// (removed when this is dropped).
pub struct Remote {
    url: Url,
    store: Arc<Store>,
    overwrite: bool,
    staging: PathBuf,
    /// For an update: the `metadata.db` downloaded, to tell whether the update changed it.
    downloaded_db: Option<Vec<u8>>,
    /// For an update: the files downloaded, with their size and CRC-32C.
    downloaded: Vec<(String, u64, u32)>,
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
            Some(url) => Ok(Target::Remote(Remote::prepare(url, overwrite, temp)?)),
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
        Ok(Target::Remote(remote))
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
    /// Checks the URL (writable, no pack there unless `overwrite`), then makes the staging
    /// folder.
    fn prepare(url: Url, overwrite: bool, temp: Option<&Path>) -> Result<Remote> {
        if url.scheme().is_read_only() {
            return Err(Error::new(
                ErrorKind::Refused,
                format!("{url}: a web server is read-only; publish packs to s3://, gs:// or az://"),
            )
            .with_option("output"));
        }
        let store = Arc::new(Store::from_env()?);
        if store.size(&url.join(metadata::FILE_NAME)?)?.is_some() {
            if !overwrite {
                return Err(Error::new(
                    ErrorKind::Refused,
                    format!(
                        "{url} already holds a pack (its {}); it is replaced only when \
                         overwriting is asked for",
                        metadata::FILE_NAME
                    ),
                )
                .with_option("overwrite"));
            }
            interrupt::replacing();
        }
        let base = match temp {
            Some(dir) => dir.to_path_buf(),
            None => store::cache_config()?.dir.join("staging"),
        };
        fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
        sweep_stale(&base);
        let staging = fresh_folder(&base)?;
        Ok(Remote {
            _on_interrupt: interrupt::register(&staging, OnInterrupt::Remove),
            url,
            store,
            overwrite,
            staging,
            downloaded_db: None,
            downloaded: Vec::new(),
        })
    }

    /// Downloads the pack at the URL, if there is one, into the (empty) staging folder.
    fn download_pack(&mut self) -> Result<()> {
        let db_url = self.url.join(metadata::FILE_NAME)?;
        if self.store.size(&db_url)?.is_none() {
            return Ok(());
        }
        let db = self.staging.join(metadata::FILE_NAME);
        let bytes = self.store.get(&db_url)?;
        fs::write(&db, &bytes).with_context(|| format!("writing {}", db.display()))?;
        self.downloaded_db = Some(bytes);
        let valuations = self.staging.join(valuation::FILE_NAME);
        let mut out = fs::File::create(&valuations)
            .with_context(|| format!("creating {}", valuations.display()))?;
        self.store
            .download_to(&self.url.join(valuation::FILE_NAME)?, &mut out)?;
        let files = {
            let conn = metadata::open_read_only(&db)?;
            History::read(&conn)
                .with_context(|| format!("reading the history of {db_url}"))?
                .latest()
                .files
                .clone()
        };
        let config = store::cache_config()?;
        let cache = Cache::open(&config.dir, config.limit, self.store.clone())?;
        for file in files {
            let crc = u32::from_str_radix(&file.crc32c, 16).map_err(|_| {
                Error::new(
                    ErrorKind::Corrupt,
                    format!(
                        "{db_url}: {} has the CRC-32C {:?}, not 8 hex digits",
                        file.file_name, file.crc32c
                    ),
                )
            })?;
            let entry = cache.fetch(&self.url.join(&file.file_name)?, file.bytes, crc)?;
            let to = self.staging.join(&file.file_name);
            fs::copy(entry.path(), &to).with_context(|| {
                format!("copying {} to {}", entry.path().display(), to.display())
            })?;
            self.downloaded.push((file.file_name, file.bytes, crc));
        }
        Ok(())
    }

    fn publish(self) -> Result<Uploaded> {
        // The command published its pack into the staging folder; the output is the URL, and
        // nothing is published there until metadata.db is uploaded.
        interrupt::not_published();
        let db = self.staging.join(metadata::FILE_NAME);
        if let Some(downloaded) = &self.downloaded_db
            && fs::read(&db).with_context(|| format!("reading {}", db.display()))? == *downloaded
        {
            // An update that found nothing new: the pack there is already this one.
            return Ok(Uploaded {
                url: self.url.to_string(),
                files: Vec::new(),
                bytes: 0,
                deleted: Vec::new(),
                unchanged: self.downloaded.iter().map(|f| f.0.clone()).collect(),
            });
        }
        let unchanged = self.unchanged_files()?;
        let summary = store::publish_dir_except(
            &self.store,
            &self.staging,
            &self.url,
            self.overwrite,
            listed_files,
            &unchanged,
        )?;
        interrupt::published();
        Ok(Uploaded {
            url: self.url.to_string(),
            files: summary.uploaded,
            bytes: summary.bytes,
            deleted: summary.deleted,
            unchanged: summary.unchanged,
        })
    }

    /// The downloaded files the new pack records with the same size and CRC-32C (an update
    /// leaves its full shards as they were): no need to upload them again.
    fn unchanged_files(&self) -> Result<Vec<String>> {
        if self.downloaded.is_empty() {
            return Ok(Vec::new());
        }
        let conn = metadata::open_read_only(&self.staging.join(metadata::FILE_NAME))?;
        let now = History::read(&conn)?.latest().files.clone();
        Ok(self
            .downloaded
            .iter()
            .filter(|(name, bytes, crc)| {
                now.iter().any(|f| {
                    f.file_name == *name
                        && f.bytes == *bytes
                        && u32::from_str_radix(&f.crc32c, 16) == Ok(*crc)
                }) && fs::metadata(self.staging.join(name)).is_ok_and(|m| m.len() == *bytes)
            })
            .map(|(name, _, _)| name.clone())
            .collect())
    }
}

/// Every file the pack whose `metadata.db` is `db` lists, in any of its versions: the files
/// an overwrite of it may replace or delete.
fn listed_files(db: &Path) -> Result<Vec<String>> {
    let conn = metadata::open_read_only(db)?;
    let history = History::read(&conn)?;
    let mut names: Vec<String> = history
        .versions
        .iter()
        .flat_map(|v| v.files.iter().map(|f| f.file_name.clone()))
        .chain(
            metadata::read_companions(&conn)?
                .into_iter()
                .map(|c| c.file_name),
        )
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// A new, empty folder `dataset-packer-publish-PID-N` in `base`.
fn fresh_folder(base: &Path) -> Result<PathBuf> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    for _ in 0..1000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = base.join(format!("{STAGING_PREFIX}{}-{n}", std::process::id()));
        match fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::from(e).within(format!("creating {}", path.display()))),
        }
    }
    fail!(Io, "could not make a staging folder in {}", base.display())
}

/// Removes the staging folders in `base` of processes that are gone (killed before they could
/// clean up). Only folders named as this module names them are touched.
fn sweep_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = staging_pid(&name) else {
            continue;
        };
        if pid != std::process::id() && !process_alive(pid) {
            log::info!("removing the staging folder of a gone process: {name}");
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// The process id in a staging folder's name `dataset-packer-publish-PID-N`.
fn staging_pid(name: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix(STAGING_PREFIX)?.split_once('-')?;
    n.parse::<u32>().ok()?;
    pid.parse().ok()
}

fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
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

    #[test]
    fn stale_staging_folders_of_gone_processes_are_swept_and_nothing_else() {
        let t = tempfile::tempdir().unwrap();
        // pid_max is at most 2^22: this pid cannot be running.
        let gone = t.path().join(format!("{STAGING_PREFIX}4194305-0"));
        let mine = t
            .path()
            .join(format!("{STAGING_PREFIX}{}-0", std::process::id()));
        let other = t.path().join("dataset-packer-publish-notes");
        for dir in [&gone, &mine, &other] {
            fs::create_dir(dir).unwrap();
        }
        sweep_stale(t.path());
        assert!(!gone.exists() && mine.exists() && other.exists());
        assert_eq!(staging_pid("dataset-packer-publish-12-3"), Some(12));
        assert_eq!(staging_pid("dataset-packer-publish-12"), None);
    }
}
