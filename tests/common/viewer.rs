//! A `dataset-packer view` process for tests, and a minimal HTTP/1.1 client to ask it
//! (one request per connection, as `Connection: close` allows).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// A `dataset-packer view` process on a free port, stopped when dropped.
pub struct Server {
    child: Child,
    /// `127.0.0.1:PORT`
    pub address: String,
    /// What it printed first ("serving …").
    pub banner: String,
}

impl Server {
    pub fn start(pack: &Path, extra: &[&str]) -> Server {
        Server::start_env(pack, extra, &[])
    }

    /// [`Server::start`] with environment variables set (credentials, the cache).
    pub fn start_env(pack: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dataset-packer"))
            .envs(env.iter().copied())
            .arg("view")
            .arg(pack)
            .args(["--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let banner = lines.next().unwrap().unwrap();
        let open = lines.next().unwrap().unwrap();
        let address = open
            .split("http://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .unwrap_or_else(|| panic!("no address in {open:?}"))
            .to_string();
        Server {
            child,
            address,
            banner,
        }
    }

    /// One request: status, headers (lower-case names) and body.
    pub fn request(&self, method: &str, target: &str, host: Option<&str>) -> (u16, String, String) {
        let mut stream = TcpStream::connect(&self.address).unwrap();
        let host = host.unwrap_or(&self.address);
        write!(
            stream,
            "{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        )
        .unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).unwrap();
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head.to_ascii_lowercase(), body.to_string())
    }

    pub fn get(&self, target: &str) -> (u16, Value) {
        let (status, head, body) = self.request("GET", target, None);
        let body = if head.contains("transfer-encoding: chunked") {
            dechunk(&body)
        } else {
            body
        };
        let value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("GET {target}: {e}: {body:.300}"));
        (status, value)
    }

    pub fn json(&self, target: &str) -> Value {
        let (status, v) = self.get(target);
        assert_eq!(status, 200, "GET {target}: {v}");
        v
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
    out
}

/// `a b` → `a%20b`, enough for the SQL in these tests.
pub fn enc(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
