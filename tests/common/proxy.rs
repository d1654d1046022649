//! An HTTP fault proxy in front of the S3 server of the object-storage tests: it decides,
//! request by request, what goes wrong (an error status, a dropped or cut connection, an
//! answer that never comes or trickles in) and logs every request with what it did.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the proxy does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forwarded, and the answer passed back whole.
    Pass,
    /// Answered with this status, without asking the server.
    Status(u16),
    /// Closed after its head is read, without an answer.
    Drop,
    /// Never answered: the proxy waits until the client gives up and closes.
    Hang,
    /// Forwarded; the answer's head and half its body passed back, then the connection closed.
    Cut,
    /// Forwarded; the answer's head and the first n bytes of its body passed back, then
    /// nothing more until the client goes away.
    Stall(u64),
    /// Forwarded; the answer's body passed back `n` bytes at a time, `gap` apart: a slow
    /// link that keeps moving.
    Trickle(usize, Duration),
    /// As `Trickle`, but the connection closed after half the body.
    TrickleCut(usize, Duration),
    /// Held until [`Proxy::release`], then forwarded: a request that reaches the server
    /// after whatever the test does meanwhile.
    Held,
    /// Forwarded, and a refusal of its precondition (412) answered as a success: a store
    /// that ignores conditional writes (without writing, which a test of the check needs not).
    Unconditional,
}

/// A request the proxy saw, and what it did with it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub fault: Fault,
}

pub type Rule = Box<dyn FnMut(&str, &str) -> Fault + Send>;

/// An HTTP proxy in front of moto that decides, request by request (`rule(method, path)`),
/// what goes wrong. Every request gets its own connection (the proxy says `Connection:
/// close` both ways), so each one, retries included, meets the rule.
pub struct Proxy {
    pub port: u16,
    rule: Arc<Mutex<Rule>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    gate: Arc<(Mutex<bool>, std::sync::Condvar)>,
}

impl Proxy {
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let rule: Arc<Mutex<Rule>> = Arc::new(Mutex::new(Box::new(|_: &str, _: &str| Fault::Pass)));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let (r, s, g) = (rule.clone(), seen.clone(), gate.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (r, s, g) = (r.clone(), s.clone(), g.clone());
                std::thread::spawn(move || serve(conn, upstream, &r, &s, &g));
            }
        });
        Proxy {
            port,
            rule,
            seen,
            gate,
        }
    }

    /// Holds [`Fault::Held`] requests again until the next [`Proxy::release`].
    pub fn hold(&self) {
        *self.gate.0.lock().unwrap() = false;
    }

    /// Lets every [`Fault::Held`] request through, now and until [`Proxy::hold`].
    pub fn release(&self) {
        let (open, wake) = &*self.gate;
        *open.lock().unwrap() = true;
        wake.notify_all();
    }

    /// Waits (up to `limit`) until the proxy has seen a request `method` whose path
    /// `matches`; whether it did.
    pub fn wait_for(&self, method: &str, matches: impl Fn(&str) -> bool, limit: Duration) -> bool {
        let until = std::time::Instant::now() + limit;
        while std::time::Instant::now() < until {
            if self
                .seen()
                .iter()
                .any(|s| s.method == method && matches(&s.path))
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// From now on `rule` decides each request's fault; the log starts afresh.
    pub fn set(&self, rule: impl FnMut(&str, &str) -> Fault + Send + 'static) {
        *self.rule.lock().unwrap() = Box::new(rule);
        self.seen.lock().unwrap().clear();
    }

    /// The requests seen since the last [`Proxy::set`].
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests seen for `path`, with their faults.
    pub fn seen_at(&self, method: &str, path: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == method && s.path == path)
            .collect()
    }
}

/// `fault` for the first `n` requests that `matches(method, path)`, then passing everything.
pub fn first_matching(
    n: usize,
    matches: impl Fn(&str, &str) -> bool + Send,
    fault: Fault,
) -> impl FnMut(&str, &str) -> Fault + Send {
    let mut left = n;
    move |m, p| {
        if left > 0 && matches(m, p) {
            left -= 1;
            fault
        } else {
            Fault::Pass
        }
    }
}

/// `fault` for every request that `matches(method, path)`.
pub fn every_matching(
    matches: impl Fn(&str, &str) -> bool + Send,
    fault: Fault,
) -> impl FnMut(&str, &str) -> Fault + Send {
    move |m, p| if matches(m, p) { fault } else { Fault::Pass }
}

/// `fault` for the first `n` requests `method path`, then passing everything.
pub fn first(
    n: usize,
    method: &'static str,
    path: String,
    fault: Fault,
) -> impl FnMut(&str, &str) -> Fault + Send {
    first_matching(n, move |m, p| m == method && p == path, fault)
}

/// `fault` for every request `method path`.
pub fn always(
    method: &'static str,
    path: String,
    fault: Fault,
) -> impl FnMut(&str, &str) -> Fault + Send {
    every_matching(move |m, p| m == method && p == path, fault)
}

fn serve(
    mut client: TcpStream,
    upstream: u16,
    rule: &Mutex<Rule>,
    seen: &Mutex<Vec<Seen>>,
    gate: &(Mutex<bool>, std::sync::Condvar),
) {
    let Some((head, early)) = read_head(&mut client) else {
        return;
    };
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut words = text.lines().next().unwrap_or_default().split(' ');
    let method = words.next().unwrap_or_default().to_string();
    let path = words.next().unwrap_or_default().to_string();
    let fault = (rule.lock().unwrap())(&method, &path);
    seen.lock().unwrap().push(Seen {
        method,
        path,
        range: header(&text, "range"),
        fault,
    });
    let body_left = header(&text, "content-length")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        .saturating_sub(early.len() as u64);
    let chunked = header(&text, "transfer-encoding").is_some_and(|v| v.contains("chunked"));
    match fault {
        Fault::Status(code) => {
            // Read the body first: answering over an unread upload would reset the
            // connection and lose the answer.
            let _ = copy_at_most(&mut client, &mut std::io::sink(), body_left);
            let _ = write!(
                client,
                "HTTP/1.1 {code} Injected Fault\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = client.shutdown(Shutdown::Write);
        }
        Fault::Hang => wait_closed(&mut client),
        Fault::Drop => {
            let _ = client.shutdown(Shutdown::Both);
        }
        Fault::Held => {
            let (open, wake) = gate;
            let mut released = open.lock().unwrap();
            while !*released {
                released = wake.wait(released).unwrap();
            }
            drop(released);
            let _ = forward(client, upstream, &head, &early, body_left, chunked, fault);
        }
        Fault::Pass
        | Fault::Unconditional
        | Fault::Cut
        | Fault::Stall(_)
        | Fault::Trickle(..)
        | Fault::TrickleCut(..) => {
            let _ = forward(client, upstream, &head, &early, body_left, chunked, fault);
        }
    }
}

/// Sends the request upstream and passes back the answer, all of it or as `fault` says.
fn forward(
    mut client: TcpStream,
    upstream: u16,
    head: &[u8],
    early: &[u8],
    body_left: u64,
    chunked: bool,
    fault: Fault,
) -> std::io::Result<()> {
    let mut up = TcpStream::connect(("127.0.0.1", upstream))?;
    up.write_all(&closing(head))?;
    up.write_all(early)?;
    if chunked {
        let (mut from, mut to) = (client.try_clone()?, up.try_clone()?);
        std::thread::spawn(move || std::io::copy(&mut from, &mut to));
    } else {
        copy_at_most(&mut client, &mut up, body_left)?;
    }
    let Some((answer, early_body)) = read_head(&mut up) else {
        return Ok(());
    };
    if fault == Fault::Unconditional && answer.starts_with(b"HTTP/1.1 412") {
        client.write_all(
            b"HTTP/1.1 200 OK\r\nETag: \"accepted\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )?;
        return client.shutdown(Shutdown::Both);
    }
    let length = header(&String::from_utf8_lossy(&answer), "content-length")
        .and_then(|v| v.parse::<u64>().ok());
    client.write_all(&closing(&answer))?;
    if let Fault::Trickle(n, gap) | Fault::TrickleCut(n, gap) = fault {
        let mut body = early_body;
        up.read_to_end(&mut body)?;
        if let Fault::TrickleCut(..) = fault {
            body.truncate(body.len() / 2);
        }
        for piece in body.chunks(n) {
            std::thread::sleep(gap);
            client.write_all(piece)?;
        }
        return client.shutdown(Shutdown::Both);
    }
    let pass = match fault {
        Fault::Cut => length.map_or(1000, |l| l / 2),
        Fault::Stall(n) => n,
        _ => u64::MAX,
    };
    let first = early_body.len().min(pass as usize);
    client.write_all(&early_body[..first])?;
    copy_at_most(&mut up, &mut client, pass - first as u64)?;
    if let Fault::Stall(_) = fault {
        wait_closed(&mut client);
    }
    client.shutdown(Shutdown::Both)
}

/// An HTTP head (request or answer) up to its blank line, and the bytes read after it.
fn read_head(conn: &mut TcpStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = data.split_off(end + 4);
            return Some((data, rest));
        }
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    }
}

/// `head` with `Connection: close` in place of any connection header.
fn closing(head: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut out = String::new();
    for line in text.split("\r\n").filter(|l| !l.is_empty()) {
        let name = line
            .split(':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        if name != "connection" && name != "keep-alive" {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    out.into_bytes()
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then(|| value.trim().to_string())
    })
}

/// Copies up to `n` bytes (fewer if `from` ends first).
fn copy_at_most(from: &mut TcpStream, to: &mut dyn Write, mut n: u64) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 << 10];
    while n > 0 {
        let want = buf.len().min(n.min(usize::MAX as u64) as usize);
        let got = from.read(&mut buf[..want])?;
        if got == 0 {
            break;
        }
        to.write_all(&buf[..got])?;
        n -= got as u64;
    }
    Ok(())
}

/// Waits until the other end closes the connection (or dies).
fn wait_closed(conn: &mut TcpStream) {
    let mut buf = [0u8; 8192];
    while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
}
