//! Opening a pack while another process publishes into it: a reader's open is a snapshot of
//! one version, as an SQLite read transaction is.
//!
//! Writers publish by rename only ([`crate::pack::publish`]): the old `metadata.db` is moved
//! out first, files are replaced by renaming new ones over them (never rewritten in place),
//! and the new `metadata.db` is moved in last. So the `metadata.db` at the path is a new file
//! (a new inode, and a new change time even when a failed publish moves the old one back)
//! whenever anything else in the folder may have changed. A reader that finds the same
//! `metadata.db` at the path before and after it opened every file it will read holds one
//! version, and keeps holding it: every later read goes through the files it opened then
//! (see [`crate::pack::shards::Shard`]), whatever is renamed over their names meanwhile.
//!
//! [`consistently`] runs an open that way: again when `metadata.db` changed under it, a
//! bounded number of times; while `metadata.db` is missing from a folder that a publish is
//! visibly under way in, it waits. Only what fails with `metadata.db` unchanged is reported.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Result, fail};
use crate::format::metadata;
use crate::pack::files::{COMPLETE, STAGING};

/// How long an open waits for a folder that keeps changing (or keeps showing a publish under
/// way) before it gives up: a publish swaps its files in milliseconds, so this is many of
/// them back to back.
const PATIENCE: Duration = Duration::from_secs(10);

/// What tells one `metadata.db` from the next at the same path: device, inode, size, and the
/// modification and change times (a rename sets the change time, so even the old file moved
/// back in by a failed publish reads as changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// The identity of the `metadata.db` at `dir`'s path now; None when there is none.
pub(crate) fn identity(dir: &Path) -> Option<Identity> {
    std::fs::metadata(dir.join(metadata::FILE_NAME))
        .ok()
        .map(|m| Identity::of(&m))
}

/// Whether `dir` shows a publish under way (or one killed part-way): no `metadata.db`, and a
/// complete staged pack (its manifest stays until the new `metadata.db` is in). A reader
/// waits for such a folder instead of calling it "not a pack".
pub(crate) fn publish_under_way(dir: &Path) -> bool {
    !dir.join(metadata::FILE_NAME).exists() && dir.join(STAGING).join(COMPLETE).is_file()
}

/// Runs `open` (which opens every file of the pack at `dir` it will ever read) so that what
/// it returns comes from one version: while `dir` shows a publish under way, it waits; when
/// `metadata.db` changed while `open` ran, it runs `open` again. Gives up, with an error of
/// kind `Busy`, after [`PATIENCE`]. An error `open` returns with `metadata.db` unchanged is
/// the pack's own, and returned as it is.
pub(crate) fn consistently<T>(dir: &Path, mut open: impl FnMut() -> Result<T>) -> Result<T> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    let mut tries = 0u32;
    loop {
        tries += 1;
        let before = identity(dir);
        let waited_enough = started.elapsed() >= PATIENCE;
        // A publish under way is waited out without trying; after PATIENCE, the open says
        // what the folder is.
        if before.is_some() || !publish_under_way(dir) || waited_enough {
            let opened = open();
            if identity(dir) == before {
                return opened;
            }
            if waited_enough {
                fail!(
                    Busy,
                    "{} kept changing while it was opened ({tries} tries in {:.1} s): another process publishes into it again and again; try again",
                    dir.display(),
                    started.elapsed().as_secs_f64()
                );
            }
            log::debug!(
                "{}: metadata.db changed while the pack was opened (a publish); opening again",
                dir.display()
            );
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Opens `path` for a snapshot to read later; raises the process's soft limit on open files
/// (to its hard limit) when it is reached, as a reader holds one file per shard and per
/// companion file, and a large pack has thousands.
pub(crate) fn hold(path: &Path) -> std::io::Result<File> {
    match File::open(path) {
        Err(e) if e.raw_os_error() == Some(libc::EMFILE) && raise_open_files_limit(u64::MAX) => {
            File::open(path)
        }
        other => other,
    }
}

/// Raises the process's soft limit on open files to at least `want`, as far as the hard
/// limit allows; whether it rose. Readers hold a file per shard and per companion file (and a
/// remote pack's view a lock per cache entry), and a large pack has thousands, more than the
/// usual soft limit of 1024.
pub(crate) fn raise_open_files_limit(want: u64) -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a struct this function owns.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0
            || limit.rlim_cur >= want
            || limit.rlim_cur >= limit.rlim_max
        {
            return false;
        }
        let soft = limit.rlim_cur;
        limit.rlim_cur = want.min(limit.rlim_max);
        let raised = libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0;
        if raised {
            log::debug!(
                "raised the limit on open files from {soft} to {}",
                limit.rlim_cur
            );
        }
        raised
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_changed_metadata_db_runs_the_open_again() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        fs::write(d.join("metadata.db"), "one").unwrap();
        let mut calls = 0;
        let got = consistently(d, || {
            calls += 1;
            if calls == 1 {
                // A publish while the first open runs: a new file renamed in.
                fs::write(d.join("new.db"), "two").unwrap();
                fs::rename(d.join("new.db"), d.join("metadata.db")).unwrap();
            }
            Ok(calls)
        })
        .unwrap();
        assert_eq!(got, 2);
    }

    #[test]
    fn the_same_file_moved_out_and_back_counts_as_changed() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        fs::write(d.join("metadata.db"), "one").unwrap();
        let before = identity(d).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        fs::rename(d.join("metadata.db"), d.join("aside")).unwrap();
        fs::rename(d.join("aside"), d.join("metadata.db")).unwrap();
        assert_ne!(identity(d), Some(before));
    }

    #[test]
    fn an_error_with_metadata_db_unchanged_is_returned_at_once() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("metadata.db"), "one").unwrap();
        let mut calls = 0;
        let e = consistently(t.path(), || -> Result<()> {
            calls += 1;
            fail!(Corrupt, "damaged")
        })
        .unwrap_err();
        assert_eq!((calls, e.to_string().as_str()), (1, "damaged"));
    }

    #[test]
    fn a_publish_under_way_is_waited_for() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().to_path_buf();
        fs::create_dir(d.join(STAGING)).unwrap();
        assert!(!publish_under_way(&d), "a pack still being written");
        fs::write(d.join(STAGING).join(COMPLETE), "metadata.db").unwrap();
        assert!(publish_under_way(&d));
        let writer = {
            let d = d.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                fs::write(d.join("metadata.db"), "db").unwrap();
            })
        };
        let seen = consistently(&d, || Ok(d.join("metadata.db").exists())).unwrap();
        writer.join().unwrap();
        assert!(seen);
    }
}
