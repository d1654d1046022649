//! The object-store client: the Apache Arrow project's `object_store` crate behind a small
//! blocking facade (the library is synchronous), configured from the environment as the AWS
//! tools read it, with retries and errors that name the URL and say what went wrong: a wrong
//! credential, a missing bucket and a missing key each in their own words.

use std::collections::HashMap;
use std::fmt;
use std::io::{Read, Write};
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use object_store::path::Path as Key;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode,
    PutOptions, PutPayload, RetryConfig, WriteMultipart,
};

use super::location::{Scheme, Url};
use crate::error::{Context, Error, ErrorKind, Result, fail};

/// How the store talks to the server: the configuration variables (`AWS_*` and friends, as
/// the environment gives them by default), retries and time limits.
///
/// ```
/// use std::time::Duration;
/// use dataset_packer::store::StoreOptions;
///
/// let options = StoreOptions::from_vars([("AWS_REGION", "eu-west-1")])
///     .retries(3)
///     .backoff(Duration::from_millis(50), Duration::from_secs(1));
/// assert_eq!(options.max_retries, 3);
/// ```
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Configuration variables by their environment names (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, and the
    /// `GOOGLE_*` / `AZURE_*` ones of the other stores).
    pub vars: Vec<(String, String)>,
    /// Retries of a request that failed with a 5xx status, a dropped connection or a timeout.
    pub max_retries: usize,
    /// The first wait before a retry, doubled each time up to `max_backoff`.
    pub init_backoff: Duration,
    pub max_backoff: Duration,
    /// No retry starts after this long since the first try.
    pub retry_timeout: Duration,
    /// How long a request may wait for the server without receiving a byte (a stalled or
    /// silent server counts as failed, and is retried). A transfer that keeps moving is
    /// never cut, however long the file takes.
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
}

impl Default for StoreOptions {
    /// The process's environment, 10 retries from 100 ms backing off to 15 s, within 3 min.
    fn default() -> StoreOptions {
        StoreOptions::from_env()
    }
}

impl StoreOptions {
    /// The options with the configuration variables of this process's environment.
    pub fn from_env() -> StoreOptions {
        let prefixes = ["AWS_", "GOOGLE_", "AZURE_"];
        StoreOptions::from_vars(
            std::env::vars().filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p))),
        )
    }

    /// The options with the given configuration variables only (nothing read from the
    /// environment): for programs and tests that hold credentials of their own.
    pub fn from_vars<K: Into<String>, V: Into<String>>(
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> StoreOptions {
        StoreOptions {
            vars: vars
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            max_retries: 10,
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(15),
            retry_timeout: Duration::from_secs(180),
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// Sets how many times a failed request is retried.
    pub fn retries(mut self, max_retries: usize) -> StoreOptions {
        self.max_retries = max_retries;
        self
    }

    /// Sets the first and the longest wait between retries.
    pub fn backoff(mut self, init: Duration, max: Duration) -> StoreOptions {
        self.init_backoff = init;
        self.max_backoff = max;
        self
    }

    /// Sets how long a request may wait for the server without receiving a byte.
    pub fn request_timeout(mut self, timeout: Duration) -> StoreOptions {
        self.request_timeout = timeout;
        self
    }
}

/// What the store has moved since it was made: for summaries, benches and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Whole-object and range reads that returned data.
    pub downloads: u64,
    pub bytes_downloaded: u64,
    pub uploads: u64,
    pub bytes_uploaded: u64,
}

#[derive(Default)]
struct Counters {
    downloads: AtomicU64,
    bytes_downloaded: AtomicU64,
    uploads: AtomicU64,
    bytes_uploaded: AtomicU64,
}

/// An object listed under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The key below the listed prefix (`steps-00000.npy`).
    pub name: String,
    pub size: u64,
}

/// An object found by [`Store::list_all`]: its key below the listed prefix, size and age.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// The key below the listed prefix (`_objects/1764338400000-9f3c…/steps-00000.npy`).
    pub key: String,
    pub size: u64,
    /// When the store last wrote it.
    pub modified: std::time::SystemTime,
}

/// A blocking client for object stores: one per process is enough (it keeps one connection
/// pool per bucket). It owns a small tokio runtime; call it from ordinary threads, not from
/// inside an async runtime.
pub struct Store {
    runtime: tokio::runtime::Runtime,
    options: StoreOptions,
    clients: Mutex<HashMap<(Scheme, String), Arc<dyn ObjectStore>>>,
    counters: Counters,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

/// Files larger than this are uploaded in parts of this size (S3's smallest part is 5 MiB),
/// so a shard never has to fit in memory.
const PART_BYTES: usize = 16 << 20;

impl Store {
    /// A store configured from this process's environment.
    pub fn from_env() -> Result<Store> {
        Store::new(StoreOptions::from_env())
    }

    /// A store with `options`.
    pub fn new(options: StoreOptions) -> Result<Store> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("object-store")
            .enable_all()
            .build()
            .context("starting the object-store client's runtime")?;
        Ok(Store {
            runtime,
            options,
            clients: Mutex::new(HashMap::new()),
            counters: Counters::default(),
        })
    }

    /// What the store has downloaded and uploaded so far.
    pub fn transfers(&self) -> Transfers {
        let c = &self.counters;
        Transfers {
            downloads: c.downloads.load(Ordering::Relaxed),
            bytes_downloaded: c.bytes_downloaded.load(Ordering::Relaxed),
            uploads: c.uploads.load(Ordering::Relaxed),
            bytes_uploaded: c.bytes_uploaded.load(Ordering::Relaxed),
        }
    }

    /// The object's size, or None when there is no object at `url` (a missing bucket is an
    /// error).
    pub fn size(&self, url: &Url) -> Result<Option<u64>> {
        let (client, key) = self.client(url)?;
        match self.runtime.block_on(client.head(&key)) {
            Ok(meta) => Ok(Some(meta.size)),
            // A web server has no buckets (and cannot list).
            Err(object_store::Error::NotFound { .. }) if url.scheme().is_read_only() => Ok(None),
            Err(object_store::Error::NotFound { .. }) => {
                // HEAD answers a bare 404 for a missing bucket too: a listing tells them apart.
                self.list_raw(&client, url, None)
                    .map_err(|e| remote_error(url, "reading", e))?;
                Ok(None)
            }
            Err(e) => Err(remote_error(url, "reading", e)),
        }
    }

    /// The whole object at `url`, in memory: for small files (`metadata.db`,
    /// `valuation_types.json`).
    pub fn get(&self, url: &Url) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.download_to(url, &mut out)?;
        Ok(out)
    }

    /// `len` bytes of the object at `url` from `start`: for small reads (a header, a page of
    /// rows). Fails if the object is shorter.
    pub fn get_range(&self, url: &Url, start: u64, len: u64) -> Result<Vec<u8>> {
        let (client, key) = self.client(url)?;
        let range: Range<u64> = start..start + len;
        let bytes = self
            .runtime
            .block_on(client.get_range(&key, range))
            .map_err(|e| remote_error(url, "reading", e))?;
        if bytes.len() as u64 != len {
            fail!(
                Corrupt,
                "{url}: asked for {len} bytes at {start}, got {}",
                bytes.len()
            );
        }
        self.count_download(len);
        Ok(bytes.to_vec())
    }

    /// Streams the object at `url` into `out`; returns its length.
    ///
    /// A download cut after the client's own retries gave up resumes where it stopped (those
    /// retries count from the download's start, so a long download cut late got none), as
    /// long as each try moves it on, at most `max_retries` times; the rest must come from the
    /// same object (its ETag), or the download fails.
    pub fn download_to(&self, url: &Url, out: &mut dyn Write) -> Result<u64> {
        let (client, key) = self.client(url)?;
        let written = self.runtime.block_on(async {
            let (mut written, mut etag, mut resumed) = (0u64, None, 0);
            loop {
                let options = GetOptions {
                    range: (written > 0).then_some(GetRange::Offset(written)),
                    if_match: etag.clone(),
                    ..GetOptions::default()
                };
                let result = client
                    .get_opts(&key, options)
                    .await
                    .map_err(|e| remote_error(url, "reading", e))?;
                if etag.is_none() {
                    etag = result.meta.e_tag.clone();
                }
                let start = written;
                let mut stream = result.into_stream();
                let cut = loop {
                    match stream.next().await {
                        None => break None,
                        Some(Ok(chunk)) => {
                            out.write_all(&chunk)?;
                            written += chunk.len() as u64;
                        }
                        Some(Err(e)) => break Some(e),
                    }
                };
                match cut {
                    None => return Ok::<u64, Error>(written),
                    Some(_)
                        if written > start
                            && etag.is_some()
                            && resumed < self.options.max_retries =>
                    {
                        resumed += 1;
                    }
                    Some(e) => return Err(remote_error(url, "reading", e)),
                }
            }
        })?;
        self.count_download(written);
        Ok(written)
    }

    /// Uploads the local file `path` to `url` (in parts when it is large). An object store
    /// makes the new object visible whole or not at all.
    pub fn put_file(&self, path: &Path, url: &Url) -> Result<u64> {
        self.check_writable(url)?;
        let (client, key) = self.client(url)?;
        let mut file =
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let len = file.metadata()?.len();
        let reading =
            |e: std::io::Error| Error::from(e).within(format!("reading {}", path.display()));
        self.runtime.block_on(async {
            if len <= PART_BYTES as u64 {
                let mut data = Vec::with_capacity(len as usize);
                file.read_to_end(&mut data).map_err(reading)?;
                client
                    .put(&key, PutPayload::from(data))
                    .await
                    .map_err(|e| remote_error(url, "writing", e))?;
                return Ok::<(), Error>(());
            }
            let upload = client
                .put_multipart(&key)
                .await
                .map_err(|e| remote_error(url, "writing", e))?;
            let mut parts = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
            let mut buf = vec![0u8; PART_BYTES];
            loop {
                let n = file.read(&mut buf).map_err(reading)?;
                if n == 0 {
                    break;
                }
                parts
                    .wait_for_capacity(2)
                    .await
                    .map_err(|e| remote_error(url, "writing", e))?;
                parts.write(&buf[..n]);
            }
            parts
                .finish()
                .await
                .map_err(|e| remote_error(url, "writing", e))?;
            Ok(())
        })?;
        self.counters.uploads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_uploaded
            .fetch_add(len, Ordering::Relaxed);
        Ok(len)
    }

    /// Uploads `data` to `url`.
    pub fn put(&self, url: &Url, data: Vec<u8>) -> Result<()> {
        self.check_writable(url)?;
        let (client, key) = self.client(url)?;
        let len = data.len() as u64;
        self.runtime
            .block_on(client.put(&key, PutPayload::from(data)))
            .map_err(|e| remote_error(url, "writing", e))?;
        self.counters.uploads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_uploaded
            .fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Creates the object at `url` with `data` only if there is none: a create-only write
    /// (`If-None-Match: *`), the one atomic step a commit needs. Whether it was created
    /// (false: an object was already there, and it is left as it was).
    pub fn create(&self, url: &Url, data: Vec<u8>) -> Result<bool> {
        self.check_writable(url)?;
        let (client, key) = self.client(url)?;
        let len = data.len() as u64;
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .runtime
            .block_on(client.put_opts(&key, PutPayload::from(data), options))
        {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => return Ok(false),
            Err(object_store::Error::NotImplemented { .. }) => fail!(
                Unsupported,
                "{url}: this store does not take create-only writes, which a commit needs"
            ),
            Err(e) => return Err(remote_error(url, "writing", e)),
        }
        self.counters.uploads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_uploaded
            .fetch_add(len, Ordering::Relaxed);
        Ok(true)
    }

    /// Every object under `url`'s prefix, at any depth (a listing, one request per 1,000
    /// objects), sorted by key.
    pub fn list_all(&self, url: &Url) -> Result<Vec<Object>> {
        self.list_up_to(url, usize::MAX)
    }

    /// The first `n` objects under `url`'s prefix in key order, at any depth: up to 1,000 in
    /// one request (the listing is not read further).
    pub fn list_first(&self, url: &Url, n: usize) -> Result<Vec<Object>> {
        self.list_up_to(url, n)
    }

    fn list_up_to(&self, url: &Url, most: usize) -> Result<Vec<Object>> {
        let (client, _) = self.client(url)?;
        let prefix = (!url.prefix().is_empty()).then(|| Key::from(url.prefix()));
        let depth = prefix.as_ref().map_or(0, |p| p.parts().count());
        let metas: Vec<object_store::ObjectMeta> = self
            .runtime
            .block_on(async {
                let mut listing = client.list(prefix.as_ref());
                let mut out = Vec::new();
                while out.len() < most
                    && let Some(meta) = listing.next().await
                {
                    out.push(meta?);
                }
                Ok::<_, object_store::Error>(out)
            })
            .map_err(|e| remote_error(url, "listing", e))?;
        let mut objects: Vec<Object> = metas
            .into_iter()
            .map(|meta| Object {
                key: meta
                    .location
                    .parts()
                    .skip(depth)
                    .map(|p| p.as_ref().to_string())
                    .collect::<Vec<_>>()
                    .join("/"),
                size: meta.size,
                modified: meta.last_modified.into(),
            })
            .collect();
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(objects)
    }

    /// Deletes the object at `url` (nothing there is not an error).
    pub fn delete(&self, url: &Url) -> Result<()> {
        self.check_writable(url)?;
        let (client, key) = self.client(url)?;
        match self.runtime.block_on(client.delete(&key)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(remote_error(url, "deleting", e)),
        }
    }

    /// The objects directly under `url` (as in a folder: not below a further `/`), sorted by
    /// name.
    pub fn list(&self, url: &Url) -> Result<Vec<Listed>> {
        let (client, _) = self.client(url)?;
        let mut listed = self
            .list_raw(&client, url, Some(()))
            .map_err(|e| remote_error(url, "listing", e))?;
        listed.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(listed)
    }

    /// A listing under `url`'s prefix: every object directly under it, or (without `all`)
    /// just a check that the bucket answers.
    fn list_raw(
        &self,
        client: &Arc<dyn ObjectStore>,
        url: &Url,
        all: Option<()>,
    ) -> std::result::Result<Vec<Listed>, object_store::Error> {
        let prefix = (!url.prefix().is_empty()).then(|| Key::from(url.prefix()));
        let result = self
            .runtime
            .block_on(client.list_with_delimiter(prefix.as_ref()))?;
        if all.is_none() {
            return Ok(Vec::new());
        }
        let depth = prefix.as_ref().map_or(0, |p| p.parts().count());
        Ok(result
            .objects
            .into_iter()
            .filter_map(|meta| {
                let name = meta.location.parts().nth(depth)?.as_ref().to_string();
                Some(Listed {
                    name,
                    size: meta.size,
                })
            })
            .collect())
    }

    fn count_download(&self, bytes: u64) {
        self.counters.downloads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_downloaded
            .fetch_add(bytes, Ordering::Relaxed);
    }

    fn check_writable(&self, url: &Url) -> Result<()> {
        if url.scheme().is_read_only() {
            fail!(
                Unsupported,
                "{url}: a web server is read-only; write packs to s3://, gs:// or az://"
            );
        }
        Ok(())
    }

    /// The client for `url`'s bucket (made on first use) and the object's key.
    fn client(&self, url: &Url) -> Result<(Arc<dyn ObjectStore>, Key)> {
        let id = (url.scheme(), url.bucket().to_string());
        let mut clients = self
            .clients
            .lock()
            .expect("no panics while holding the lock");
        let client = match clients.get(&id) {
            Some(c) => c.clone(),
            None => {
                let c = self.build(url)?;
                clients.insert(id, c.clone());
                c
            }
        };
        Ok((client, Key::from(url.prefix())))
    }

    fn build(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        let o = &self.options;
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: o.init_backoff,
                max_backoff: o.max_backoff,
                base: 2.0,
            },
            max_retries: o.max_retries,
            retry_timeout: o.retry_timeout,
        };
        // A limit on the wait for each read, not on the whole request: a total limit cuts
        // every download longer than it (a large shard on a slow link), and once the
        // resumed requests have used up the retries, the file cannot be fetched at all.
        let client_options = ClientOptions::new()
            .with_timeout_disabled()
            .with_read_timeout(o.request_timeout)
            .with_connect_timeout(o.connect_timeout);
        let config_error = |e: object_store::Error| {
            Error::wrap(ErrorKind::InvalidInput, e)
                .within(format!("{url}: the store's configuration"))
        };
        // The retry and client options first, then every variable the builder knows: a
        // variable (AWS_ALLOW_HTTP, a proxy) then sets its own part of them.
        macro_rules! configured {
            ($builder:expr) => {{
                let mut b = $builder
                    .with_retry(retry)
                    .with_client_options(client_options);
                for (key, value) in &o.vars {
                    if let Ok(k) = key.to_ascii_lowercase().parse() {
                        b = b.with_config(k, value);
                    }
                }
                b
            }};
        }
        let store: Arc<dyn ObjectStore> = match url.scheme() {
            Scheme::S3 => {
                refuse_no_credentials(url, &o.vars)?;
                refuse_plain_http(url, &o.vars)?;
                let b = configured!(object_store::aws::AmazonS3Builder::new());
                Arc::new(
                    b.with_bucket_name(url.bucket())
                        .build()
                        .map_err(config_error)?,
                )
            }
            Scheme::Gs => {
                let b = configured!(object_store::gcp::GoogleCloudStorageBuilder::new());
                Arc::new(
                    b.with_bucket_name(url.bucket())
                        .build()
                        .map_err(config_error)?,
                )
            }
            Scheme::Az => {
                let b = configured!(object_store::azure::MicrosoftAzureBuilder::new());
                Arc::new(
                    b.with_container_name(url.bucket())
                        .build()
                        .map_err(config_error)?,
                )
            }
            Scheme::Http | Scheme::Https => Arc::new(
                object_store::http::HttpBuilder::new()
                    .with_url(format!("{}://{}", url.scheme().as_str(), url.bucket()))
                    .with_retry(retry)
                    .with_client_options(client_options.with_allow_http(true))
                    .build()
                    .map_err(config_error)?,
            ),
        };
        Ok(store)
    }
}

/// Variables that give S3 credentials, or say none are needed (a public bucket), or name
/// where to get them (a web identity, a container's or an instance's endpoint).
const S3_CREDENTIAL_VARS: [&str; 6] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SKIP_SIGNATURE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_METADATA_ENDPOINT",
];

/// Fails at once when nothing gives S3 credentials: the client would otherwise ask the
/// cloud instance-metadata address, which off a cloud machine answers nothing until it times
/// out, and a user would see a hang instead of what to set.
fn refuse_no_credentials(url: &Url, vars: &[(String, String)]) -> Result<()> {
    let given = |name: &str| {
        vars.iter()
            .any(|(k, v)| k.eq_ignore_ascii_case(name) && !v.trim().is_empty())
    };
    if S3_CREDENTIAL_VARS.iter().any(|name| given(name)) {
        return Ok(());
    }
    fail!(
        Refused,
        "{url}: no credentials for S3: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
         AWS_REGION, and AWS_ENDPOINT_URL for a server other than AWS), or \
         AWS_SKIP_SIGNATURE=true for a public bucket, or AWS_METADATA_ENDPOINT to take them \
         from the cloud instance"
    )
}

/// Fails at once for an S3 endpoint given as plain `http://` without `AWS_ALLOW_HTTP=true`:
/// the client refuses every request to it, and says only "URL scheme is not allowed".
fn refuse_plain_http(url: &Url, vars: &[(String, String)]) -> Result<()> {
    let var = |name: &str| {
        vars.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    let Some(endpoint) = ["AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
        .iter()
        .find_map(|name| var(name).filter(|v| !v.is_empty()))
    else {
        return Ok(());
    };
    let allowed = var("AWS_ALLOW_HTTP").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if endpoint.to_ascii_lowercase().starts_with("http://") && !allowed {
        fail!(
            Refused,
            "{url}: the endpoint {endpoint} is plain http://, which is used only with \
             AWS_ALLOW_HTTP=true set (for a server on a trusted network, such as a local test \
             server); set it, or give an https:// endpoint"
        );
    }
    Ok(())
}

/// The HTTP status a failed request's text reports (`… status 404 Not Found …`), if any.
fn http_status(detail: &str) -> Option<u16> {
    detail.match_indices("status").find_map(|(at, _)| {
        let rest = detail[at + "status".len()..].trim_start_matches([' ', ':']);
        let rest = rest
            .strip_prefix("code")
            .unwrap_or(rest)
            .trim_start_matches([' ', ':']);
        let code = rest.get(..3)?;
        let after = rest[3..].chars().next();
        (code.bytes().all(|b| b.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit()))
            .then(|| code.parse().ok())
            .flatten()
    })
}

/// The error for a failed request on `url`, in words a user can act on. `doing` is
/// `reading`, `writing`, `listing` or `deleting`.
fn remote_error(url: &Url, doing: &str, e: object_store::Error) -> Error {
    use object_store::Error as E;
    let detail = chain_text(&e);
    // Listings and some requests come back as generic errors: the server's error code in
    // the text is what tells the cases apart.
    let has = |codes: &[&str]| codes.iter().any(|code| detail.contains(code));
    let credentials = [
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
    ];
    let (kind, message) = if has(&["NoSuchBucket"]) {
        (
            ErrorKind::NotAPack,
            format!("{url}: the bucket {:?} does not exist", url.bucket()),
        )
    } else if has(&credentials) {
        (
            ErrorKind::Io,
            format!(
                "{url}: the server does not accept these credentials (check \
                 AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
            ),
        )
    } else if matches!(e, E::NotFound { .. }) || has(&["NoSuchKey"]) {
        (ErrorKind::NotAPack, format!("{url} does not exist"))
    } else if matches!(e, E::PermissionDenied { .. } | E::Unauthenticated { .. })
        || has(&["AccessDenied"])
    {
        (
            ErrorKind::Io,
            format!("{url}: access denied {doing} it (the credentials are not allowed to)"),
        )
    } else if detail.contains("after") && detail.contains("retries") {
        return Error::wrap(ErrorKind::Io, e)
            .within(format!("{url}: {doing} failed, retries exhausted"));
    } else {
        return Error::wrap(ErrorKind::Io, e).within(format!("{url}: {doing} failed"));
    };
    // A case recognised is said in full above: the server's own answer (an XML document)
    // would only repeat it. Its status stays, for whoever reads the server's logs.
    match http_status(&detail) {
        Some(status) => Error::new(kind, format!("{message} (HTTP {status})")),
        None => Error::new(kind, message),
    }
}

/// An error and its causes as one line, to look for the server's error code in.
fn chain_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_is_read_from_the_request_error() {
        assert_eq!(
            http_status("Client error with status 404 Not Found: <?xml …"),
            Some(404)
        );
        assert_eq!(http_status("status: 503 Service Unavailable"), Some(503));
        assert_eq!(
            http_status("Server returned non-2xx status code: 404 Not Found: <?xml"),
            Some(404)
        );
        assert_eq!(http_status("error sending request"), None);
        assert_eq!(http_status("status 40401"), None);
    }

    #[test]
    fn a_plain_http_endpoint_needs_aws_allow_http() {
        let Ok(crate::store::Location::Remote(url)) =
            crate::store::Location::parse("s3://bucket/pack")
        else {
            panic!("an s3 URL");
        };
        let vars = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let e = refuse_plain_http(
            &url,
            &vars(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")]),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Refused);
        assert!(e.to_string().contains("AWS_ALLOW_HTTP=true"), "{e}");
        for ok in [
            vars(&[
                ("AWS_ENDPOINT_URL", "http://h:9000"),
                ("AWS_ALLOW_HTTP", "true"),
            ]),
            vars(&[("AWS_ENDPOINT_URL", "https://h")]),
            vars(&[]),
        ] {
            refuse_plain_http(&url, &ok).unwrap();
        }
    }
}
