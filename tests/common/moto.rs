//! The S3-compatible server the object-storage tests run against: moto's server, started once
//! per test binary from the test venv (IAM authentication on, so that a wrong credential is
//! refused as S3 refuses it), with a user allowed everything and the bucket `packs`.
//!
//! Where the venv has no moto, [`moto`] prints why and returns None (the test returns
//! early); under `CI` it panics instead, so CI never skips.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use dataset_packer::store::StoreOptions;

pub struct Moto {
    pub port: u16,
    pub key: String,
    pub secret: String,
    // Holding its stdin open keeps the server up; the process ends when this binary does.
    _child: Mutex<Child>,
}

/// The shared moto server, or None (with the reason printed) where moto is not installed.
pub fn moto() -> Option<&'static Moto> {
    static MOTO_SERVER: OnceLock<Result<Moto, String>> = OnceLock::new();
    match MOTO_SERVER.get_or_init(start_moto) {
        Ok(m) => Some(m),
        Err(reason) if std::env::var_os("CI").is_some() => panic!("{reason}"),
        Err(reason) => {
            eprintln!("skipping: {reason}");
            None
        }
    }
}

fn start_moto() -> Result<Moto, String> {
    let python = super::repo().join("target/test-venv/bin/python");
    let has_moto = Command::new(&python)
        .args(["-c", "import moto.server, boto3"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_moto {
        return Err(format!(
            "no moto in {} (bash scripts/test.sh installs it from tests/python/requirements.txt)",
            python.display()
        ));
    }
    let port = free_port();
    // The one script both the Rust and the Python tests start the server with.
    let script = super::repo().join("tests/python/moto_server.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .arg(port.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting moto: {e}"))?;
    let mut line = String::new();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut stdout, &mut line).map_err(|e| e.to_string())?;
    let keys: serde_json::Value =
        serde_json::from_str(&line).map_err(|e| format!("moto did not start ({e}): {line:?}"))?;
    Ok(Moto {
        port,
        key: keys["key"].as_str().unwrap().to_string(),
        secret: keys["secret"].as_str().unwrap().to_string(),
        _child: Mutex::new(child),
    })
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Store options for the server at `port` with the tester's key: fast retries, so that the
/// fault tests take milliseconds.
pub fn options(moto: &Moto, port: u16) -> StoreOptions {
    options_for(&moto.key, &moto.secret, port)
}

pub fn options_for(key: &str, secret: &str, port: u16) -> StoreOptions {
    let endpoint = format!("http://127.0.0.1:{port}");
    StoreOptions::from_vars([
        ("AWS_ACCESS_KEY_ID", key),
        ("AWS_SECRET_ACCESS_KEY", secret),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
    ])
    .retries(4)
    .backoff(Duration::from_millis(10), Duration::from_millis(100))
    .request_timeout(Duration::from_secs(20))
}

impl Moto {
    /// The environment a child process (the binary) reads the store from: the tester's key,
    /// this server as the endpoint, plain http allowed.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", self.key.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.clone()),
            ("AWS_REGION", "us-east-1".into()),
            (
                "AWS_ENDPOINT_URL",
                format!("http://127.0.0.1:{}", self.port),
            ),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }
}

/// The environment the binary reads its credentials and endpoint from (the server at
/// `port`: moto itself or a proxy in front of it), and the cache folder it stages in.
pub fn env_for(moto: &Moto, port: u16, cache: &std::path::Path) -> Vec<(String, String)> {
    [
        ("AWS_ACCESS_KEY_ID", moto.key.clone()),
        ("AWS_SECRET_ACCESS_KEY", moto.secret.clone()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("DATASET_PACKER_CACHE", super::s(cache).into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The binary with `args`, in the environment `env` (on top of this process's, without
/// `RUST_LOG`).
pub fn command_with(args: &[&str], env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dataset-packer"));
    cmd.args(args).env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Runs the binary with `args` in the environment `env`.
pub fn run_with(args: &[&str], env: &[(String, String)]) -> std::process::Output {
    command_with(args, env).output().expect("the binary runs")
}

/// [`run_with`], which must succeed; its stdout.
pub fn run_with_ok(args: &[&str], env: &[(String, String)]) -> String {
    let out = run_with(args, env);
    assert!(
        out.status.success(),
        "dataset-packer {args:?} failed ({}):\n{}",
        out.status,
        super::stderr(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every object under `prefix`, at any depth (keys relative to it), with its bytes.
pub fn objects_under(
    store: &dataset_packer::store::Store,
    prefix: &dataset_packer::store::Url,
) -> std::collections::BTreeMap<String, Vec<u8>> {
    store
        .list_all(prefix)
        .unwrap()
        .into_iter()
        .map(|o| {
            let bytes = store.get(&prefix.join(&o.key).unwrap()).unwrap();
            (o.key, bytes)
        })
        .collect()
}

/// Publishes the local pack `local` to `url` as the commit after the latest one there (the
/// first commit where there is none), as every writing command does.
pub fn publish_table(
    store: &dataset_packer::store::Store,
    local: &std::path::Path,
    url: &dataset_packer::store::Url,
) -> dataset_packer::Result<dataset_packer::store::PublishSummary> {
    use dataset_packer::store::{CommitOptions, latest_commit, publish_commit};
    let base = latest_commit(store, url)?;
    // Read-only: closing a read-write connection would fold away a `-wal` file that a test
    // leaves to say the pack is still being written.
    let pack_id: String = rusqlite::Connection::open_with_flags(
        local.join("metadata.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .and_then(|conn| {
        conn.query_row(
            "SELECT meta_value FROM session WHERE meta_key = 'pack_id'",
            [],
            |r| r.get(0),
        )
    })
    .unwrap_or_default();
    let options = CommitOptions {
        command: "test".into(),
        pack_id,
        single_writer: false,
    };
    publish_commit(store, local, url, base.as_ref(), &options)
}

/// Publishes the local pack `local` to `url` as packs were published before commits: every
/// file under its own name, `metadata.db` last (a pack an older dataset-packer left in a
/// bucket).
pub fn publish_plain(
    store: &dataset_packer::store::Store,
    local: &std::path::Path,
    url: &dataset_packer::store::Url,
) {
    let mut names = super::names(local);
    names.sort_by_key(|n| n == "metadata.db");
    for name in names {
        store
            .put_file(&local.join(&name), &url.join(&name).unwrap())
            .unwrap();
    }
}

/// (file name, bytes, CRC-32C) of each shard, as the pack's metadata.db records them.
pub fn shard_records(pack: &std::path::Path) -> Vec<(String, u64, u32)> {
    let db = super::db(pack);
    let mut stmt = db
        .prepare("SELECT file_name, bytes, crc32c FROM shards ORDER BY shard")
        .unwrap();
    stmt.query_map([], |r| {
        let crc: String = r.get(2)?;
        Ok((
            r.get(0)?,
            r.get::<_, i64>(1)? as u64,
            u32::from_str_radix(&crc, 16).unwrap(),
        ))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// CRC-32C (Castagnoli), bit by bit: the object-store tests' own oracle for the checksums
/// the cache checks (never the crate's implementation, which is what they test).
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
