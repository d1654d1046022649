//! The command line's [`Progress`] observer. On a terminal: an indicatif bar on stderr. Off a
//! terminal (Slurm logs, CI, `nohup`): a plain line on stderr at a steady interval (rows,
//! MB/s, percent, ETA), every `DATASET_PACKER_PROGRESS_INTERVAL` seconds (default 10).
//! `--quiet`: no observer at all.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, WeakProgressBar};

use crate::progress::{Observer, Progress, Unit, thousands};

/// Bars on stderr, one per stage: what the commands give the library unless `--quiet`.
#[derive(Default)]
pub struct Bars {
    bar: Mutex<Option<ProgressBar>>,
}

impl Bars {
    /// The observer for a command: bars, or none with `quiet`.
    pub fn unless(quiet: bool) -> Observer {
        if quiet {
            Observer::default()
        } else {
            Observer::new(Bars::default())
        }
    }

    fn current(&self) -> Option<ProgressBar> {
        self.bar.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Progress for Bars {
    fn begin(&self, stage: &str, total: u64, unit: Unit) {
        let bar = match unit {
            Unit::Bytes => bytes_bar(total, stage),
            Unit::Rows => rows_bar(total, stage),
        };
        *self.bar.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar);
    }

    fn advance(&self, by: u64) {
        if let Some(bar) = self.current() {
            bar.inc(by);
        }
    }

    fn message(&self, text: &str) {
        if let Some(bar) = self.current() {
            bar.set_message(text.to_string());
        }
    }

    fn end(&self) {
        if let Some(bar) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).take() {
            bar.finish_and_clear();
        }
    }
}

/// A byte-driven bar (total = input bytes) whose message carries rows and rows/s.
fn bytes_bar(total_bytes: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total_bytes), draw_target());
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{what} [{{elapsed_precise}}] {{wide_bar}} {{bytes}}/{{total_bytes}} ({{bytes_per_sec}}, ETA {{eta}}) {{msg}}"
        ))
        .expect("valid template"),
    );
    plain_lines(&bar, what, Unit::Bytes);
    bar
}

/// A row-driven bar (total = rows).
fn rows_bar(total_rows: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total_rows), draw_target());
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{what} [{{elapsed_precise}}] {{wide_bar}} {{human_pos}}/{{human_len}} rows ({{per_sec}}, ETA {{eta}}) {{msg}}"
        ))
        .expect("valid template"),
    );
    plain_lines(&bar, what, Unit::Rows);
    bar
}

fn draw_target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr_with_hz(4)
    } else {
        ProgressDrawTarget::hidden()
    }
}

/// Seconds between plain progress lines when stderr is not a terminal.
const DEFAULT_INTERVAL_S: f64 = 10.0;
/// Bytes of a row, for the MB/s of row-driven progress.
const ROW_BYTES: f64 = 48.0;

/// Off a terminal and not quiet: a thread that prints a plain line about `bar` every interval
/// until the bar is finished or dropped.
fn plain_lines(bar: &ProgressBar, what: &str, unit: Unit) {
    if std::io::stderr().is_terminal() {
        return;
    }
    let interval = interval();
    let weak = bar.downgrade();
    let what = what.to_string();
    std::thread::spawn(move || ticker(weak, &what, unit, interval));
}

/// The interval between plain progress lines.
fn interval() -> Duration {
    let seconds = std::env::var("DATASET_PACKER_PROGRESS_INTERVAL")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(DEFAULT_INTERVAL_S);
    Duration::from_secs_f64(seconds)
}

fn ticker(weak: WeakProgressBar, what: &str, unit: Unit, interval: Duration) {
    let step = interval.min(Duration::from_millis(100));
    let mut waited = Duration::ZERO;
    loop {
        std::thread::sleep(step);
        waited += step;
        let Some(bar) = weak.upgrade() else { return };
        if bar.is_finished() {
            return;
        }
        if waited >= interval {
            waited = Duration::ZERO;
            eprintln!("{}", plain_line(&bar, what, unit));
        }
    }
}

/// `pack: 55.1 MB of 208.1 MB (26.5%), 45.2 MB/s, 1,234,567 rows, elapsed 1.2 s, ETA 3 s`.
fn plain_line(bar: &ProgressBar, what: &str, unit: Unit) -> String {
    let done = bar.position();
    let total = bar.length().unwrap_or(0);
    let elapsed = bar.elapsed().as_secs_f64().max(1e-9);
    let percent = if total == 0 {
        100.0
    } else {
        100.0 * done as f64 / total as f64
    };
    let eta = if done == 0 {
        "unknown".to_string()
    } else {
        duration(elapsed * (total.saturating_sub(done)) as f64 / done as f64)
    };
    let msg = bar.message();
    let extra = if msg.is_empty() {
        String::new()
    } else {
        format!(", {msg}")
    };
    match unit {
        Unit::Bytes => format!(
            "{what}: {:.1} MB of {:.1} MB ({percent:.1}%), {:.1} MB/s{extra}, elapsed {}, ETA {eta}",
            done as f64 / 1e6,
            total as f64 / 1e6,
            done as f64 / 1e6 / elapsed,
            duration(elapsed)
        ),
        Unit::Rows => format!(
            "{what}: {} of {} rows ({percent:.1}%), {} rows/s, {:.1} MB/s{extra}, elapsed {}, ETA {eta}",
            thousands(done),
            thousands(total),
            thousands((done as f64 / elapsed) as u64),
            done as f64 * ROW_BYTES / 1e6 / elapsed,
            duration(elapsed)
        ),
    }
}

/// `42 s`, `3 min 05 s`, `2 h 07 min`.
fn duration(seconds: f64) -> String {
    let s = seconds.round() as u64;
    match s {
        0..60 => format!("{seconds:.1} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s / 60 % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(3.24), "3.2 s");
        assert_eq!(duration(185.0), "3 min 05 s");
        assert_eq!(duration(7620.0), "2 h 07 min");
    }
}
