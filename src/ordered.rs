//! A bounded, ordered parallel map: N worker threads process items, one consumer receives the
//! results strictly in item order, and workers never run more than `window` items ahead of the
//! consumer. That keeps memory bounded by the window (not the input) and output deterministic
//! whatever the thread count. [`ordered_try_commit`] is the same contract without the consumer
//! thread: the worker that completes the next item in order commits it.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::Scope;

/// Which items are claimed and which are done (consumed or committed), shared by the workers.
#[derive(Default)]
struct Claims {
    next_claim: usize,
    /// Items before it are done; a claim stays within `window` of it.
    next_done: usize,
    stop: bool,
    /// Workers waiting for room in the window.
    waiting: usize,
}

/// The next item for a worker, waiting on `room` while the window is full: `None` once every
/// item is claimed or the work has stopped. `claims` finds the [`Claims`] in the state `s`.
fn claim<'a, St>(
    mut s: MutexGuard<'a, St>,
    room: &Condvar,
    claims: impl Fn(&mut St) -> &mut Claims,
    items: usize,
    window: usize,
) -> Option<usize> {
    loop {
        let c = claims(&mut s);
        if c.stop || c.next_claim >= items {
            return None;
        }
        if c.next_claim < c.next_done + window {
            c.next_claim += 1;
            return Some(c.next_claim - 1);
        }
        c.waiting += 1;
        s = room.wait(s).unwrap_or_else(|e| e.into_inner());
        claims(&mut s).waiting -= 1;
    }
}

/// Starts worker `w` in `scope`, named so that `/proc`, `top -H` and the CPU probe tell the
/// workers apart.
fn spawn_worker<'scope>(
    scope: &'scope Scope<'scope, '_>,
    w: usize,
    work: impl FnOnce() + Send + 'scope,
) {
    std::thread::Builder::new()
        .name(format!("worker-{w}"))
        .spawn_scoped(scope, move || {
            work();
            crate::thread_cpu::thread_done();
        })
        .expect("spawning a worker thread");
}

/// What the workers of either map share: the claims, the results not yet taken in order, and
/// whether a panic stopped the work.
struct Work<R> {
    claims: Claims,
    ready: BTreeMap<usize, R>,
    panicked: bool,
}

impl<R> Work<R> {
    fn new() -> Work<R> {
        Work {
            claims: Claims::default(),
            ready: BTreeMap::new(),
            panicked: false,
        }
    }

    /// Keeps item `i`'s result; a panic in `map` instead stops the work (false).
    fn keep(&mut self, i: usize, mapped: std::thread::Result<R>) -> bool {
        match mapped {
            Ok(r) => {
                self.ready.insert(i, r);
                true
            }
            Err(_) => {
                self.stop_panicked();
                false
            }
        }
    }

    /// Stops the work after a panic, which the caller raises again once the workers are done.
    fn stop_panicked(&mut self) {
        self.panicked = true;
        self.claims.stop = true;
    }
}

/// Maps `items` on `workers` threads (each with its own state from `init`) and hands results
/// to `consume` in order. `consume` may stop early by returning `ControlFlow::Break`, which
/// is returned; workers then stop claiming new items.
pub fn ordered_map<T, S, R, B>(
    items: &[T],
    workers: usize,
    window: usize,
    init: impl Fn() -> S + Sync,
    map: impl Fn(&mut S, &T) -> R + Sync,
    mut consume: impl FnMut(usize, R) -> ControlFlow<B>,
) -> Option<B>
where
    T: Sync,
    R: Send,
{
    let workers = workers.max(1);
    let window = window.max(workers);
    let state = Mutex::new(Work::new());
    let changed = Condvar::new();
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());

    std::thread::scope(|scope| {
        for w in 0..workers.min(items.len()) {
            spawn_worker(scope, w, || {
                let mut local = init();
                while let Some(i) = claim(lock(), &changed, |s| &mut s.claims, items.len(), window)
                {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        map(&mut local, &items[i])
                    }));
                    lock().keep(i, r);
                    changed.notify_all();
                }
            });
        }

        // However the consumer ends (done, stopped early, or its `consume` panicking), the
        // workers stop: none is left waiting for a window that no longer moves.
        let _stop = StopOnDrop {
            state: &state,
            changed: &changed,
        };
        let mut outcome = None;
        for i in 0..items.len() {
            let r = {
                let mut s = lock();
                loop {
                    if let Some(r) = s.ready.remove(&i) {
                        s.claims.next_done = i + 1;
                        break r;
                    }
                    assert!(!s.panicked, "a worker thread panicked");
                    s = changed.wait(s).unwrap_or_else(|e| e.into_inner());
                }
            };
            changed.notify_all();
            if let ControlFlow::Break(b) = consume(i, r) {
                outcome = Some(b);
                break;
            }
        }
        outcome
    })
}

/// Stops the workers of an [`ordered_map`] when dropped.
struct StopOnDrop<'a, R> {
    state: &'a Mutex<Work<R>>,
    changed: &'a Condvar,
}

impl<R> Drop for StopOnDrop<'_, R> {
    fn drop(&mut self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.claims.stop = true;
        s.ready.clear();
        drop(s);
        self.changed.notify_all();
    }
}

/// What the workers of an [`ordered_try_commit`] share.
struct Commits<R> {
    /// `claims.next_done` is the next item to commit.
    work: Work<R>,
    /// A worker is committing (so the others leave their results in `work.ready`).
    committing: bool,
    error: Option<crate::Error>,
}

/// [`ordered_try_map`] without a consumer thread: `map`s each item on one of `workers` threads,
/// and `commit`s the results in item order, each on whichever worker completes the next item
/// in order (holding the commit, the others go on mapping; none waits for a hand-over).
/// Workers never run more than `window` items ahead of the commits. Stops at `commit`'s first
/// error and returns it; a panic in `map` or `commit` is raised again here once the workers
/// have stopped.
///
/// With a consumer thread, every item costs a wake-up of that thread and a switch to it (in a
/// VM, tens of microseconds of its CPU time, the largest part of `pack`'s serial work on short
/// runs); here the commits run back to back on a thread that is already running.
pub fn ordered_try_commit<T, S, R>(
    items: &[T],
    workers: usize,
    window: usize,
    init: impl Fn() -> S + Sync,
    map: impl Fn(&mut S, &T) -> R + Sync,
    commit: impl FnMut(usize, R) -> crate::Result<()> + Send,
) -> crate::Result<()>
where
    T: Sync,
    R: Send,
{
    let workers = workers.max(1);
    let window = window.max(workers);
    let state = Mutex::new(Commits {
        work: Work::new(),
        committing: false,
        error: None,
    });
    let room = Condvar::new();
    let commit = Mutex::new(commit);
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
    std::thread::scope(|scope| {
        for w in 0..workers.min(items.len()) {
            spawn_worker(scope, w, || {
                let mut local = init();
                while let Some(i) =
                    claim(lock(), &room, |s| &mut s.work.claims, items.len(), window)
                {
                    let mapped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        map(&mut local, &items[i])
                    }));
                    let mut s = lock();
                    if !s.work.keep(i, mapped) {
                        drop(s);
                        room.notify_all();
                        return;
                    }
                    if s.committing {
                        continue;
                    }
                    // Commit what is ready in order, this item's and any the others left.
                    s.committing = true;
                    loop {
                        let next = s.work.claims.next_done;
                        let r = if s.work.claims.stop {
                            None
                        } else {
                            s.work.ready.remove(&next)
                        };
                        let Some(r) = r else {
                            break;
                        };
                        drop(s);
                        let outcome =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                (commit.lock().unwrap_or_else(|e| e.into_inner()))(next, r)
                            }));
                        s = lock();
                        s.work.claims.next_done = next + 1;
                        match outcome {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => {
                                s.error = Some(e);
                                s.work.claims.stop = true;
                            }
                            Err(_) => s.work.stop_panicked(),
                        }
                        // One more item may be claimed (or, stopped, every worker leaves). A
                        // wake-up is a system call: made only when a worker waits.
                        if s.work.claims.waiting > 0 {
                            room.notify_all();
                        }
                    }
                    s.committing = false;
                }
            });
        }
    });
    let s = state.into_inner().unwrap_or_else(|e| e.into_inner());
    assert!(!s.work.panicked, "a worker thread panicked");
    match s.error {
        Some(e) => Err(e),
        None => {
            debug_assert_eq!(s.work.claims.next_done, items.len(), "every item committed");
            Ok(())
        }
    }
}

/// [`ordered_map`] for a fallible consumer: stops at the first error and returns it.
pub fn ordered_try_map<T, S, R>(
    items: &[T],
    workers: usize,
    window: usize,
    init: impl Fn() -> S + Sync,
    map: impl Fn(&mut S, &T) -> R + Sync,
    mut consume: impl FnMut(usize, R) -> crate::Result<()>,
) -> crate::Result<()>
where
    T: Sync,
    R: Send,
{
    let stopped = ordered_map(items, workers, window, init, map, |i, r| {
        match consume(i, r) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    });
    stopped.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn results_arrive_in_order_for_any_thread_count() {
        let items: Vec<u64> = (0..500).collect();
        for workers in [1, 2, 7] {
            let mut seen = Vec::new();
            let out: Option<()> = ordered_map(
                &items,
                workers,
                4,
                || (),
                |_, x| {
                    std::thread::sleep(std::time::Duration::from_micros(x % 7 * 50));
                    x * 2
                },
                |i, r| {
                    seen.push((i, r));
                    ControlFlow::Continue(())
                },
            );
            assert!(out.is_none());
            assert_eq!(
                seen,
                items
                    .iter()
                    .map(|&x| (x as usize, x * 2))
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn never_runs_further_ahead_than_the_window() {
        let items: Vec<usize> = (0..200).collect();
        let consumed = AtomicUsize::new(0);
        let max_ahead = AtomicUsize::new(0);
        ordered_map(
            &items,
            4,
            6,
            || (),
            |_, &i| {
                let ahead = i - consumed.load(Ordering::SeqCst);
                max_ahead.fetch_max(ahead, Ordering::SeqCst);
            },
            |i, _| {
                consumed.store(i + 1, Ordering::SeqCst);
                ControlFlow::<()>::Continue(())
            },
        );
        assert!(max_ahead.load(Ordering::SeqCst) <= 6);
    }

    #[test]
    fn a_panicking_consumer_leaves_no_worker_waiting() {
        let items: Vec<usize> = (0..1000).collect();
        let outcome = std::panic::catch_unwind(|| {
            ordered_map(
                &items,
                3,
                3,
                || (),
                |_, &i| i,
                |i, _| {
                    assert!(i != 20, "the consumer fails");
                    ControlFlow::<()>::Continue(())
                },
            )
        });
        assert!(outcome.is_err());
    }

    #[test]
    fn a_panicking_worker_is_reported_and_nothing_hangs() {
        let items: Vec<usize> = (0..1000).collect();
        let outcome = std::panic::catch_unwind(|| {
            ordered_map(
                &items,
                3,
                3,
                || (),
                |_, &i| assert!(i != 30, "a worker fails"),
                |_, _| ControlFlow::<()>::Continue(()),
            )
        });
        assert!(outcome.is_err());
    }

    /// `ordered_try_commit` of `items` (x → x * 2, after a sleep that varies) on `workers`
    /// threads with `window`: what was committed, in order, and the largest lead of a claim
    /// over the commits.
    fn committed(items: &[u64], workers: usize, window: usize) -> (Vec<(usize, u64)>, usize) {
        let done = AtomicUsize::new(0);
        let lead = AtomicUsize::new(0);
        let mut seen = Vec::new();
        ordered_try_commit(
            items,
            workers,
            window,
            || (),
            |_, &x| {
                lead.fetch_max(
                    x as usize + 1 - done.load(Ordering::SeqCst),
                    Ordering::SeqCst,
                );
                std::thread::sleep(std::time::Duration::from_micros(x % 7 * 40));
                x * 2
            },
            |i, r| {
                seen.push((i, r));
                done.store(i + 1, Ordering::SeqCst);
                Ok(())
            },
        )
        .unwrap();
        (seen, lead.into_inner())
    }

    #[test]
    fn commits_arrive_in_order_within_the_window_for_any_thread_count() {
        let items: Vec<u64> = (0..400).collect();
        for workers in [1, 2, 3, 7] {
            let (seen, lead) = committed(&items, workers, 2 * workers);
            assert_eq!(
                seen,
                items
                    .iter()
                    .map(|&x| (x as usize, x * 2))
                    .collect::<Vec<_>>(),
                "{workers} workers"
            );
            assert!(lead <= 2 * workers, "{workers} workers ran {lead} ahead");
        }
        assert!(committed(&[], 3, 6).0.is_empty());
    }

    #[test]
    fn a_commit_error_stops_the_workers_and_is_returned() {
        let items: Vec<usize> = (0..10_000).collect();
        let mapped = AtomicUsize::new(0);
        let mut last = 0;
        let err = ordered_try_commit(
            &items,
            3,
            6,
            || (),
            |_, &i| {
                mapped.fetch_add(1, Ordering::SeqCst);
                i
            },
            |i, _| {
                last = i;
                if i == 50 {
                    return Err(crate::error::Error::new(
                        crate::error::ErrorKind::InvalidInput,
                        "item 50",
                    ));
                }
                Ok(())
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("item 50"), "{err}");
        assert_eq!(last, 50, "nothing is committed after the error");
        assert!(
            mapped.into_inner() <= 50 + 1 + 6,
            "workers stop within the window"
        );
    }

    #[test]
    fn a_panic_in_map_or_commit_is_raised_and_nothing_hangs() {
        let items: Vec<usize> = (0..1000).collect();
        let in_map = std::panic::catch_unwind(|| {
            ordered_try_commit(
                &items,
                3,
                3,
                || (),
                |_, &i| assert!(i != 30, "a worker fails"),
                |_, _| Ok(()),
            )
        });
        assert!(in_map.is_err());
        let in_commit = std::panic::catch_unwind(|| {
            ordered_try_commit(
                &items,
                3,
                3,
                || (),
                |_, &i| i,
                |i, _| {
                    assert!(i != 20, "a commit fails");
                    Ok(())
                },
            )
        });
        assert!(in_commit.is_err());
    }

    #[test]
    fn stops_early() {
        let items: Vec<usize> = (0..10_000).collect();
        let out = ordered_map(
            &items,
            2,
            4,
            || (),
            |_, &i| i,
            |i, _| {
                if i == 10 {
                    ControlFlow::Break(i)
                } else {
                    ControlFlow::Continue(())
                }
            },
        );
        assert_eq!(out, Some(10));
    }
}
