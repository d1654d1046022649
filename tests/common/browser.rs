//! Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
//! commands go to the browser's fd 3, answers and events come back on its fd 4, each message
//! JSON ended by a NUL), so a test can open a page, read its DOM with JavaScript and press
//! keys, without a WebDriver or a websocket library.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Whether the browser tests can run here (they print why not and pass otherwise, as the
/// report's do; `.ci/run` installs Chromium where it can).
pub fn chromium_installed() -> bool {
    let here = Path::new(CHROMIUM).exists();
    if !here {
        println!("skipped: chromium not installed ({CHROMIUM}; apt-get install -y chromium)");
    }
    here
}

pub struct Browser {
    child: Child,
    to: std::io::PipeWriter,
    from: BufReader<std::io::PipeReader>,
    next_id: u64,
    session: Option<String>,
    /// Console errors and uncaught exceptions seen so far.
    pub errors: Vec<String>,
}

impl Browser {
    /// Starts headless Chromium with its profile in `profile` (killed after two minutes by
    /// coreutils' `timeout`, so a hung browser fails the test instead of holding the suite).
    pub fn start(profile: &Path) -> Browser {
        let (cmd_read, cmd_write) = std::io::pipe().unwrap();
        let (ev_read, ev_write) = std::io::pipe().unwrap();
        let (fd_in, fd_out) = (cmd_read.as_raw_fd(), ev_write.as_raw_fd());
        let mut command = Command::new("timeout");
        command
            .args(["120", CHROMIUM])
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-pipe",
                "--window-size=1200,900",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec. The pipes
        // are first copied above 9, since either may itself be fd 3 or 4.
        unsafe {
            command.pre_exec(move || {
                let high_in = libc::fcntl(fd_in, libc::F_DUPFD, 10);
                let high_out = libc::fcntl(fd_out, libc::F_DUPFD, 10);
                if high_in < 0
                    || high_out < 0
                    || libc::dup2(high_in, 3) < 0
                    || libc::dup2(high_out, 4) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("chromium starts");
        drop((cmd_read, ev_write));
        Browser {
            child,
            to: cmd_write,
            from: BufReader::new(ev_read),
            next_id: 0,
            session: None,
            errors: Vec::new(),
        }
    }

    /// Sends a command (to the page once one is open) and returns its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to
            .write_all(&bytes)
            .expect("the browser reads commands");
        loop {
            let mut buf = Vec::new();
            let n = self
                .from
                .read_until(0, &mut buf)
                .expect("the browser answers");
            assert!(
                n > 0,
                "the browser closed its pipe while {method} was pending"
            );
            buf.pop();
            let answer: Value = serde_json::from_slice(&buf).expect("a JSON message");
            self.note_errors(&answer);
            if answer["id"] == json!(id) {
                assert!(answer.get("error").is_none(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    fn note_errors(&mut self, event: &Value) {
        match event["method"].as_str() {
            Some("Runtime.exceptionThrown") => self
                .errors
                .push(event["params"]["exceptionDetails"].to_string()),
            Some("Runtime.consoleAPICalled") if event["params"]["type"] == "error" => {
                self.errors.push(event["params"]["args"].to_string())
            }
            _ => {}
        }
    }

    /// Opens `url` in a new tab and talks to it from now on.
    pub fn open(&mut self, url: &str) {
        self.session = None;
        let target = self.call("Target.createTarget", json!({"url": "about:blank"}));
        let attached = self.call(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        self.session = Some(attached["sessionId"].as_str().unwrap().to_string());
        self.call("Runtime.enable", json!({}));
        self.call("Page.enable", json!({}));
        self.call("Page.navigate", json!({"url": url}));
    }

    /// The value of a JavaScript expression in the page (awaited when it is a promise).
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{expression}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Waits (up to 20 s) until `expression` is truthy in the page, and returns its value.
    pub fn wait_for(&mut self, expression: &str) -> Value {
        let until = Instant::now() + Duration::from_secs(20);
        // Until the page has loaded, its document may not have what the expression reads.
        let guarded = format!(
            "(() => {{ try {{ return ({expression}); }} catch (e) {{ return null; }} }})()"
        );
        loop {
            let v = self.eval(&guarded);
            if !(v.is_null() || v == json!(false) || v == json!("") || v == json!(0)) {
                return v;
            }
            assert!(Instant::now() < until, "waited 20 s for {expression}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Presses and releases a key (`ArrowRight`, `End`…) as a user would.
    pub fn press(&mut self, key: &str, code: u32) {
        for kind in ["rawKeyDown", "keyUp"] {
            self.call(
                "Input.dispatchKeyEvent",
                json!({"type": kind, "key": key, "code": key, "windowsVirtualKeyCode": code}),
            );
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
