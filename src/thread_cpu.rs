//! Where a command's CPU time goes, thread by thread, for the pack scaling bench
//! (bench/scaling.py). Off unless `DATASET_PACKER_THREAD_CPU=FILE` is set; then the threads
//! that matter record their own CPU time as they end ([`thread_done`]), pieces of work are
//! timed on whichever thread does them ([`Span`]: a span's total is summed over threads),
//! and [`write_report`] writes it all, with the process's total and whatever other threads are
//! still alive (from `/proc/self/task`), as one JSON object to FILE. Threads record themselves because the parser threads have ended,
//! and left `/proc/self/task`, before the command can look.
//!
//! CPU time is `CLOCK_THREAD_CPUTIME_ID` (nanoseconds, user + system), which other jobs on the
//! machine barely change: a thread's share of the total is a property of the program.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::error::err;

/// The environment variable naming the report file.
pub const ENV: &str = "DATASET_PACKER_THREAD_CPU";

struct Probe {
    file: String,
    started: Instant,
    /// CPU seconds by thread (or span) name, summed over threads of the same name.
    seconds: Mutex<BTreeMap<String, f64>>,
    /// How many threads (or spans) each name covers.
    counts: Mutex<BTreeMap<String, u64>>,
}

fn probe() -> Option<&'static Probe> {
    static PROBE: OnceLock<Option<Probe>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let file = std::env::var(ENV).ok().filter(|f| !f.is_empty())?;
            Some(Probe {
                file,
                started: Instant::now(),
                seconds: Mutex::new(BTreeMap::new()),
                counts: Mutex::new(BTreeMap::new()),
            })
        })
        .as_ref()
}

/// Whether the probe is on (the environment variable is set).
pub fn enabled() -> bool {
    probe().is_some()
}

/// CPU seconds of a clock (`CLOCK_THREAD_CPUTIME_ID` or `CLOCK_PROCESS_CPUTIME_ID`).
fn clock_seconds(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a timespec to fill.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn add(probe: &Probe, name: &str, seconds: f64) {
    *probe
        .seconds
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(name.to_string())
        .or_default() += seconds;
    *probe
        .counts
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(name.to_string())
        .or_default() += 1;
}

/// Records the calling thread's CPU time under its name (call as the thread ends).
pub fn thread_done() {
    if let Some(probe) = probe() {
        let name = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        add(
            probe,
            &format!("thread {name}"),
            clock_seconds(libc::CLOCK_THREAD_CPUTIME_ID),
        );
    }
}

/// A piece of one thread's work, timed in that thread's CPU time and recorded under `name`
/// when dropped (nothing when the probe is off).
pub struct Span {
    name: &'static str,
    from: Option<f64>,
}

impl Span {
    pub fn start(name: &'static str) -> Span {
        let from = enabled().then(|| clock_seconds(libc::CLOCK_THREAD_CPUTIME_ID));
        Span { name, from }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if let (Some(probe), Some(from)) = (probe(), self.from) {
            let now = clock_seconds(libc::CLOCK_THREAD_CPUTIME_ID);
            add(probe, &format!("span {}", self.name), now - from);
        }
    }
}

/// The live threads other than the caller, from `/proc/self/task/*/stat` (name, CPU seconds
/// in clock ticks).
fn other_live_threads() -> Vec<(String, f64)> {
    let me = std::process::id(); // the main thread's id is the process's
    // SAFETY: no arguments.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for entry in dir.flatten() {
        if entry.file_name().to_str() == Some(&me.to_string()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "tid (comm) state ppid …": utime and stime are fields 14 and 15.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_string();
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        out.push((name, (ticks(11) + ticks(12)) / tick));
    }
    out
}

/// Writes the report (call on the main thread, at the end of the command): every recorded
/// thread and span, the main thread, the live threads, the process's total and the wall time.
pub fn write_report() -> crate::Result<()> {
    let Some(probe) = probe() else {
        return Ok(());
    };
    add(
        probe,
        "thread main",
        clock_seconds(libc::CLOCK_THREAD_CPUTIME_ID),
    );
    for (name, seconds) in other_live_threads() {
        add(probe, &format!("live {name}"), seconds);
    }
    let seconds = probe.seconds.lock().unwrap_or_else(|e| e.into_inner());
    let counts = probe.counts.lock().unwrap_or_else(|e| e.into_inner());
    let report = serde_json::json!({
        "wall_s": probe.started.elapsed().as_secs_f64(),
        "process_cpu_s": clock_seconds(libc::CLOCK_PROCESS_CPUTIME_ID),
        "cpu_s": *seconds,
        "count": *counts,
    });
    std::fs::write(&probe.file, format!("{report}\n"))
        .map_err(|e| err!(Io, "writing {}: {e}", probe.file))
}
