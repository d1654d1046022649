//! Atomic outputs for exports that are not packs (packs use [`crate::pack::publish::OutputDir`]).
//!
//! A single file is written under a hidden temporary name in the same folder, fsynced and
//! renamed over the target. A folder is built in a hidden sibling staging folder (locked, so
//! two exports to the same place cannot interleave), fsynced, and swapped in with one
//! `renameat2(RENAME_EXCHANGE)`, so readers see either the old folder or the new one; on file
//! systems without it, the old folder is moved aside first. `--overwrite` only ever replaces a
//! folder that holds nothing but files an export writes.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use crate::error::{Context, Result, err, fail};

use crate::interrupt::{self, OnInterrupt};

/// A file being written under a temporary name next to its target.
pub struct StagedFile {
    tmp: PathBuf,
    target: PathBuf,
    published: bool,
    _on_interrupt: interrupt::Registered,
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if !self.published {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

impl StagedFile {
    /// Refuses an existing target unless `overwrite`, then creates the temporary file.
    pub fn create(target: &Path, overwrite: bool) -> Result<(StagedFile, File)> {
        crate::pack::files::refuse_url(target)?;
        if target.is_dir() {
            fail!(Refused, "{} is a folder; name a file", target.display());
        }
        if target.exists() && !overwrite {
            return Err(err!(
                Refused,
                "{} already exists; an export replaces it only when told to overwrite",
                target.display()
            )
            .with_option("overwrite"));
        }
        let parent = parent_of(target);
        fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
        // One temporary name per target, locked while written: a second export to the same
        // target is refused, and one left by a killed run is reused (so none accumulate).
        let tmp = parent.join(format!(".{}.dataset-packer-tmp", file_name(target)?));
        let file = File::options()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        if file.try_lock().is_err() {
            fail!(
                Refused,
                "another dataset-packer process is exporting to {}",
                target.display()
            );
        }
        file.set_len(0)
            .with_context(|| format!("creating {}", tmp.display()))?;
        let staged = StagedFile {
            _on_interrupt: interrupt::register(&tmp, OnInterrupt::Remove),
            tmp,
            target: target.to_path_buf(),
            published: false,
        };
        Ok((staged, file))
    }

    /// Syncs the finished file and renames it over the target.
    pub fn publish(mut self, file: File) -> Result<()> {
        file.sync_all()
            .with_context(|| format!("syncing {}", self.tmp.display()))?;
        drop(file);
        let publishing = interrupt::publishing();
        fs::rename(&self.tmp, &self.target)
            .with_context(|| format!("moving the export into {}", self.target.display()))?;
        self.published = true;
        interrupt::published();
        drop(publishing);
        sync_dir(&parent_of(&self.target))
    }
}

/// A folder being built in a locked sibling staging folder.
pub struct StagedDir {
    staging: PathBuf,
    target: PathBuf,
    _lock: File,
    published: bool,
    _on_interrupt: interrupt::Registered,
}

impl Drop for StagedDir {
    fn drop(&mut self) {
        if !self.published {
            let _ = fs::remove_dir_all(&self.staging);
        }
    }
}

impl StagedDir {
    /// Checks the target (absent, empty, or with `overwrite` a folder holding only files for
    /// which `owns` is true) and creates a fresh staging folder beside it.
    pub fn create(target: &Path, overwrite: bool, owns: fn(&str) -> bool) -> Result<StagedDir> {
        crate::pack::files::refuse_url(target)?;
        check_replaceable(target, overwrite, owns)?;
        let parent = parent_of(target);
        fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
        let staging = parent.join(format!(".{}.dataset-packer-staging", file_name(target)?));
        if staging.exists() {
            let old = File::open(&staging)?;
            if old.try_lock().is_err() {
                fail!(
                    Refused,
                    "another dataset-packer process is exporting to {}",
                    target.display()
                );
            }
            log::info!("removing stale staging folder {}", staging.display());
            fs::remove_dir_all(&staging)
                .with_context(|| format!("removing {}", staging.display()))?;
        }
        fs::create_dir(&staging).with_context(|| format!("creating {}", staging.display()))?;
        let lock = File::open(&staging)?;
        if lock.try_lock().is_err() {
            fail!(
                Refused,
                "another dataset-packer process is exporting to {}",
                target.display()
            );
        }
        Ok(StagedDir {
            _on_interrupt: interrupt::register(&staging, OnInterrupt::Remove),
            staging,
            target: target.to_path_buf(),
            _lock: lock,
            published: false,
        })
    }

    /// The staging folder to write into.
    pub fn path(&self) -> &Path {
        &self.staging
    }

    /// Swaps the finished folder (every file in it already synced) in for the target.
    pub fn publish(mut self) -> Result<()> {
        sync_dir(&self.staging)?;
        let publishing = interrupt::publishing();
        let parent = parent_of(&self.target);
        if !self.target.exists() {
            fs::rename(&self.staging, &self.target)
                .with_context(|| format!("moving the export into {}", self.target.display()))?;
        } else if exchange(&self.staging, &self.target)? {
            // The old folder is now at the staging path.
            fs::remove_dir_all(&self.staging)
                .with_context(|| format!("removing the old {}", self.target.display()))?;
        } else {
            let old = parent.join(format!(".{}.dataset-packer-old", file_name(&self.target)?));
            let _ = fs::remove_dir_all(&old);
            fs::rename(&self.target, &old)
                .with_context(|| format!("moving the old {} aside", self.target.display()))?;
            fs::rename(&self.staging, &self.target)
                .with_context(|| format!("moving the export into {}", self.target.display()))?;
            fs::remove_dir_all(&old).with_context(|| format!("removing {}", old.display()))?;
        }
        self.published = true;
        interrupt::published();
        drop(publishing);
        sync_dir(&parent)
    }
}

/// An existing target folder may be replaced only when empty, or with `overwrite` when every
/// file in it is one an export writes.
fn check_replaceable(target: &Path, overwrite: bool, owns: fn(&str) -> bool) -> Result<()> {
    if !target.exists() {
        return Ok(());
    }
    if !target.is_dir() {
        fail!(
            Refused,
            "{} exists and is not a folder; name a folder (or a file ending in .jsonl, .jsonl.gz or .parquet)",
            target.display()
        );
    }
    let mut names: Vec<String> = fs::read_dir(target)
        .with_context(|| format!("listing {}", target.display()))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()?;
    if names.is_empty() {
        return Ok(());
    }
    names.sort();
    let foreign: Vec<&String> = names.iter().filter(|n| !owns(n)).take(3).collect();
    if !foreign.is_empty() {
        fail!(
            Refused,
            "{} holds files an export does not write ({}{}); choose another output folder",
            target.display(),
            foreign
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if foreign.len() == 3 { ", …" } else { "" }
        );
    }
    if !overwrite {
        return Err(err!(
            Refused,
            "{} already holds an export; an export replaces it only when told to overwrite",
            target.display()
        )
        .with_option("overwrite"));
    }
    Ok(())
}

/// Atomically exchanges two paths; false when the file system cannot (then nothing happened).
fn exchange(a: &Path, b: &Path) -> Result<bool> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c_path = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| err!(Refused, "{} holds a NUL byte", p.display()))
    };
    let (ca, cb) = (c_path(a)?, c_path(b)?);
    // SAFETY: both are valid NUL-terminated paths; renameat2 does not keep the pointers.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) => Ok(false),
        _ => Err(err).with_context(|| format!("swapping {} into place", b.display())),
    }
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn file_name(path: &Path) -> Result<String> {
    Ok(path
        .file_name()
        .ok_or_else(|| err!(Refused, "{} has no file name", path.display()))?
        .to_string_lossy()
        .into_owned())
}

/// fsyncs a folder (so renames into it are durable).
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owns(name: &str) -> bool {
        name.ends_with(".out")
    }

    #[test]
    fn a_folder_is_swapped_in_whole() {
        let t = tempfile::tempdir().unwrap();
        let target = t.path().join("exp");
        let d = StagedDir::create(&target, false, owns).unwrap();
        fs::write(d.path().join("a.out"), "1").unwrap();
        d.publish().unwrap();
        assert_eq!(fs::read_to_string(target.join("a.out")).unwrap(), "1");
        assert!(StagedDir::create(&target, false, owns).is_err());
        let d = StagedDir::create(&target, true, owns).unwrap();
        fs::write(d.path().join("b.out"), "2").unwrap();
        d.publish().unwrap();
        assert!(!target.join("a.out").exists());
        assert_eq!(fs::read_to_string(target.join("b.out")).unwrap(), "2");
        let mut left: Vec<_> = fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["exp"]);
    }

    #[test]
    fn refuses_foreign_folders_and_cleans_up_on_failure() {
        let t = tempfile::tempdir().unwrap();
        let target = t.path().join("exp");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("notes.txt"), "mine").unwrap();
        let e = StagedDir::create(&target, true, owns)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("notes.txt"), "{e}");
        let other = t.path().join("other");
        let d = StagedDir::create(&other, false, owns).unwrap();
        drop(d);
        assert!(!other.exists());
        assert_eq!(fs::read_dir(t.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_file_appears_only_when_published() {
        let t = tempfile::tempdir().unwrap();
        let target = t.path().join("x.jsonl");
        let (f, file) = StagedFile::create(&target, false).unwrap();
        assert!(!target.exists());
        f.publish(file).unwrap();
        assert!(target.exists());
        assert!(StagedFile::create(&target, false).is_err());
        let (f, _file) = StagedFile::create(&target, true).unwrap();
        drop(f);
        assert_eq!(fs::read_dir(t.path()).unwrap().count(), 1);
    }
}
