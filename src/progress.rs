//! Progress bars that show only on a terminal: hidden when stderr is not a TTY or with --quiet.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A byte-driven bar (total = input bytes) whose message carries rows and rows/s.
pub fn bytes_bar(total_bytes: u64, quiet: bool, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total_bytes), draw_target(quiet));
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{what} [{{elapsed_precise}}] {{wide_bar}} {{bytes}}/{{total_bytes}} ({{bytes_per_sec}}, ETA {{eta}}) {{msg}}"
        ))
        .expect("valid template"),
    );
    bar
}

/// A row-driven bar (total = rows).
pub fn rows_bar(total_rows: u64, quiet: bool, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total_rows), draw_target(quiet));
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{what} [{{elapsed_precise}}] {{wide_bar}} {{human_pos}}/{{human_len}} rows ({{per_sec}}, ETA {{eta}}) {{msg}}"
        ))
        .expect("valid template"),
    );
    bar
}

fn draw_target(quiet: bool) -> ProgressDrawTarget {
    if quiet || !std::io::stderr().is_terminal() {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr_with_hz(4)
    }
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
