//! The link shaper in front of the S3 server: tests/python/shaper.py (the one the Python
//! tests and `bench/shaped_epoch.py` use), started from the test venv. A request reaches the
//! server `latency` after it is sent, and answers come back at most `per_connection` bytes
//! per second on each connection and `total` over all of them: a bucket far away, behind a
//! link narrower than the machine's.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

pub struct Shaper {
    pub port: u16,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// What the shaper saw: connections, HTTP requests, ranged requests, bytes to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub connections: u64,
    pub requests: u64,
    pub ranged: u64,
    pub bytes: u64,
}

impl Shaper {
    /// A shaper in front of the server at `upstream` (a port on localhost).
    pub fn start(upstream: u16, latency_s: f64, per_connection: f64, total: f64) -> Shaper {
        let python = super::repo().join("target/test-venv/bin/python");
        let script = super::repo().join("tests/python/shaper.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(upstream.to_string())
            .args(["--latency", &latency_s.to_string()])
            .args(["--per-connection", &per_connection.to_string()])
            .args(["--total", &total.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the shaper starts");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let port = line
            .strip_prefix("ready ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the shaper did not start: {line:?}"));
        Shaper {
            port,
            child,
            stdin,
            stdout,
        }
    }

    /// What it has seen so far.
    pub fn seen(&mut self) -> Seen {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(b"stats\n").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let n = |k: &str| v[k].as_u64().unwrap();
        Seen {
            connections: n("connections"),
            requests: n("requests"),
            ranged: n("ranged"),
            bytes: n("bytes"),
        }
    }
}

impl Drop for Shaper {
    fn drop(&mut self) {
        drop(self.stdin.take()); // it ends when its input closes
        let _ = self.child.wait();
    }
}
