//! Ctrl-C and SIGTERM: a writer never leaves half its work behind. `main` calls [`install`]
//! before any other thread exists; SIGINT and SIGTERM are then blocked in every thread and
//! received by one thread of its own, which waits for a publish in progress to finish, removes
//! the staging areas the writers registered (keeping what a resumable command can continue),
//! says what happened, and exits with 130.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What to do with a registered path on an interrupt.
#[derive(Debug, Clone)]
pub enum OnInterrupt {
    /// Remove it (a staging folder or temporary file).
    Remove,
    /// Remove it if it is an empty folder (an output folder this run created).
    RemoveIfEmpty,
    /// Keep it, and say this about it (work a later run can resume).
    Keep(String),
}

struct Entry {
    id: u64,
    path: PathBuf,
    what: OnInterrupt,
}

struct State {
    entries: Vec<Entry>,
    next_id: u64,
    publishing: u32,
}

static STATE: Mutex<State> = Mutex::new(State {
    entries: Vec::new(),
    next_id: 0,
    publishing: 0,
});
static PUBLISHED: AtomicBool = AtomicBool::new(false);
static PREVIOUS: AtomicBool = AtomicBool::new(false);

/// Blocks SIGINT and SIGTERM in this thread (and so in every thread started after) and handles
/// them on a thread of its own. Call first thing in `main`.
pub fn install() {
    // SAFETY: plain signal-mask calls on a zeroed set, before other threads exist.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    std::thread::spawn(move || {
        let mut signal = 0;
        // SAFETY: waits for one of the blocked signals of `set`.
        unsafe { libc::sigwait(&set, &mut signal) };
        handle();
    });
}

/// A registration; dropping it forgets the path (the command finished with it).
pub struct Registered(u64);

impl Drop for Registered {
    fn drop(&mut self) {
        let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
        s.entries.retain(|e| e.id != self.0);
    }
}

/// Registers a path to deal with if the process is interrupted before it is dropped.
pub fn register(path: &Path, what: OnInterrupt) -> Registered {
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let id = s.next_id;
    s.next_id += 1;
    s.entries.push(Entry {
        id,
        path: path.to_path_buf(),
        what,
    });
    Registered(id)
}

/// Marks a publish in progress: an interrupt waits until it is dropped, so a pack is never
/// left half swapped by Ctrl-C.
pub struct Publishing(());

impl Drop for Publishing {
    fn drop(&mut self) {
        let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
        s.publishing -= 1;
    }
}

pub fn publishing() -> Publishing {
    STATE.lock().unwrap_or_else(|e| e.into_inner()).publishing += 1;
    Publishing(())
}

/// Notes that the output already holds a pack this run would replace (an interrupt says it is
/// intact).
pub fn replacing() {
    PREVIOUS.store(true, Ordering::SeqCst);
}

/// Notes that this run published its output (an interrupt after that says so).
pub fn published() {
    PUBLISHED.store(true, Ordering::SeqCst);
}

/// Notes that what this run published so far went to a local staging folder, not to its
/// output (a pack on its way to object storage): an interrupt before [`published`] says the
/// output was not published.
pub fn not_published() {
    PUBLISHED.store(false, Ordering::SeqCst);
}

/// Removes a staging folder (or file) that the command's other threads may still be writing
/// into: a file they create while `remove_dir_all` empties the folder makes its last step fail
/// ("directory not empty"), so it is tried again, briefly, until the folder is gone.
fn remove_racing_writers(path: &Path) -> bool {
    for _ in 0..200 {
        if std::fs::remove_dir_all(path).is_ok() || std::fs::remove_file(path).is_ok() {
            return true;
        }
        if std::fs::symlink_metadata(path).is_err() {
            return false; // gone, or never made
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

fn handle() {
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    while s.publishing > 0 {
        drop(s);
        std::thread::sleep(Duration::from_millis(5));
        s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    }
    let mut kept = Vec::new();
    let mut removed = false;
    for e in s.entries.iter().rev() {
        match &e.what {
            OnInterrupt::Remove => removed |= remove_racing_writers(&e.path),
            OnInterrupt::RemoveIfEmpty => {
                let _ = std::fs::remove_dir(&e.path);
            }
            OnInterrupt::Keep(note) => kept.push(format!("{} ({note})", e.path.display())),
        }
    }
    if PUBLISHED.load(Ordering::SeqCst) {
        eprintln!("interrupted after the output was published; it is complete");
    } else if PREVIOUS.load(Ordering::SeqCst) {
        eprintln!("interrupted: nothing was published; the previous pack is intact");
    } else if removed || !kept.is_empty() {
        eprintln!("interrupted: nothing was published");
    } else {
        eprintln!("interrupted: nothing was written");
    }
    for k in kept {
        eprintln!("  kept {k}");
    }
    std::process::exit(130);
}
