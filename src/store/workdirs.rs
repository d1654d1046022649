//! The private working folders a node's processes keep in the cache folder, and the sweeping
//! of those whose process is gone: a reader's *view* of a remote pack (`views/<pid>-<n>/`,
//! held by a `.lock` while it lives) and a writer's *staging* folder
//! (`dataset-packer-publish-<pid>-<n>`, where a pack is built before it is published).
//! Only folders named as this module names them are ever removed.

use std::fs;
use std::io::ErrorKind as IoKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::error::{Context, Error, Result, fail};

/// The prefix of the staging folders (`dataset-packer-publish-PID-N`).
const STAGING_PREFIX: &str = "dataset-packer-publish-";

/// A new view folder `<pid>-<n>` and its `.lock`, held shared while the view lives. It is
/// made under a name no sweep looks at (`.<pid>-<n>.new`) and renamed once locked, so no
/// sweep ever finds it unlocked; the Python package makes its views the same way.
pub(crate) fn new_view_dir(views: &Path) -> Result<(PathBuf, fs::File)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let name = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let staging = views.join(format!(".{name}.new"));
        match fs::create_dir(&staging) {
            Ok(()) => {}
            Err(e) if e.kind() == IoKind::AlreadyExists => continue,
            Err(e) => {
                return Err(Error::from(e).within(format!("creating {}", staging.display())));
            }
        }
        let lock_path = staging.join(".lock");
        let lock = fs::File::create(&lock_path)
            .and_then(|lock| lock.lock_shared().map(|()| lock))
            .with_context(|| format!("locking {}", lock_path.display()))?;
        let dir = views.join(&name);
        // A folder of that name was left by an earlier process with this pid: not ours.
        if dir.exists() || fs::rename(&staging, &dir).is_err() {
            let _ = fs::remove_dir_all(&staging);
            continue;
        }
        return Ok((dir, lock));
    }
}

/// Removes the views of processes that are gone (killed before they could clean up): a view
/// whose `.lock` no process holds (this works across containers sharing the cache, where
/// process ids mean nothing), or one without a `.lock` whose process does not run.
pub(crate) fn sweep_stale_views(views: &Path) {
    let Ok(listing) = fs::read_dir(views) else {
        return;
    };
    let me = std::process::id();
    for item in listing.flatten() {
        let name = item.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .split_once('-')
            .and_then(|(pid, n)| n.parse::<u64>().ok().and(pid.parse::<u32>().ok()))
        else {
            continue;
        };
        match fs::File::open(item.path().join(".lock")) {
            Ok(lock) => {
                if lock.try_lock().is_ok() {
                    let _ = fs::remove_dir_all(item.path());
                }
            }
            Err(_) if pid != me && !process_runs(pid) => {
                let _ = fs::remove_dir_all(item.path());
            }
            Err(_) => {}
        }
    }
}

/// Whether a process `pid` exists (signal 0 checks without sending anything).
fn process_runs(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 sends nothing; it only reports whether the process exists.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A new, empty folder `dataset-packer-publish-PID-N` in `base`.
pub(crate) fn fresh_staging(base: &Path) -> Result<PathBuf> {
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
pub(crate) fn sweep_stale_staging(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = staging_pid(&name) else {
            continue;
        };
        if pid != std::process::id() && !process_runs(pid) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        sweep_stale_staging(t.path());
        assert!(!gone.exists() && mine.exists() && other.exists());
        assert_eq!(staging_pid("dataset-packer-publish-12-3"), Some(12));
        assert_eq!(staging_pid("dataset-packer-publish-12"), None);
    }
}
