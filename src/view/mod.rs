//! A local web viewer of a pack's runs (`dataset-packer view`): one self-contained page (a
//! runs table that sorts, filters with the SQL `--where` takes and pages on the server; a run
//! step by step, its board, move, branch EVs, search statistics, score, and every companion
//! family beside the teacher) over a JSON API that notebooks and scripts can use too.
//!
//! ```
//! # fn main() -> dataset_packer::Result<()> {
//! # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
//! use dataset_packer::{ViewOptions, Viewer};
//!
//! let viewer = Viewer::open(fixture.path(), &ViewOptions::default().port(0))?;
//! assert!(viewer.url().starts_with("http://127.0.0.1:"));
//! // viewer.serve()? would answer requests until the process is stopped.
//! # Ok(()) }
//! ```
//!
//! The pack is opened once, as one version, and read per request: the server loads nothing
//! at start, so it starts as fast for a billion rows as for a thousand, and its memory does not
//! grow with the pack.

mod data;
mod server;

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;

use crate::error::{Context, Result, err};
use crate::{Pack, SqlLimits, VersionSpec};

/// Where the viewer listens and what it reads; `Default` is what `dataset-packer view` does
/// without options.
///
/// ```
/// use dataset_packer::ViewOptions;
/// let o = ViewOptions::default().host("0.0.0.0").port(9000);
/// assert_eq!((o.host.as_str(), o.port), ("0.0.0.0", 9000));
/// assert_eq!(ViewOptions::default().port, 8048);
/// ```
#[derive(Debug, Clone)]
pub struct ViewOptions {
    /// Which version of the pack to show.
    pub version: VersionSpec,
    /// The address to listen on: 127.0.0.1 unless said otherwise, so only this machine sees
    /// the pack.
    pub host: String,
    /// The port; 0 picks a free one.
    pub port: u16,
    /// Limits on each filter's SQL (`--sql-timeout`, `--sql-memory`).
    pub limits: SqlLimits,
}

impl Default for ViewOptions {
    fn default() -> ViewOptions {
        ViewOptions {
            version: VersionSpec::Latest,
            host: "127.0.0.1".into(),
            port: 8048,
            limits: SqlLimits::default(),
        }
    }
}

impl ViewOptions {
    /// Shows version `spec` of the pack.
    ///
    /// ```
    /// use dataset_packer::{VersionSpec, ViewOptions};
    /// let o = ViewOptions::default().version(VersionSpec::Number(2));
    /// assert_eq!(o.version, VersionSpec::Number(2));
    /// ```
    pub fn version(mut self, spec: VersionSpec) -> ViewOptions {
        self.version = spec;
        self
    }

    /// Listens on `host` (a name or an address).
    ///
    /// ```
    /// assert_eq!(dataset_packer::ViewOptions::default().host("::1").host, "::1");
    /// ```
    pub fn host(mut self, host: impl Into<String>) -> ViewOptions {
        self.host = host.into();
        self
    }

    /// Listens on `port` (0: any free port).
    ///
    /// ```
    /// assert_eq!(dataset_packer::ViewOptions::default().port(0).port, 0);
    /// ```
    pub fn port(mut self, port: u16) -> ViewOptions {
        self.port = port;
        self
    }

    /// Bounds each filter's SQL.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dataset_packer::{SqlLimits, ViewOptions};
    /// let quick = SqlLimits { time: Duration::from_secs(5), ..SqlLimits::default() };
    /// assert_eq!(ViewOptions::default().limits(quick).limits.time.as_secs(), 5);
    /// ```
    pub fn limits(mut self, limits: SqlLimits) -> ViewOptions {
        self.limits = limits;
        self
    }
}

/// A viewer of one pack, its port bound: [`Viewer::serve`] answers requests.
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// let viewer = dataset_packer::Viewer::open(fixture.path(), &dataset_packer::ViewOptions::default().port(0))?;
/// assert!(viewer.describe().contains("2,240 rows in 10 runs"));
/// # Ok(()) }
/// ```
pub struct Viewer {
    source: Arc<data::Source>,
    listener: TcpListener,
    hosts: Vec<String>,
}

impl Viewer {
    /// Opens version `options.version` of the pack at `pack` (a folder or a URL) and binds
    /// `options.host:options.port`. A port in use is [`crate::ErrorKind::Refused`], naming
    /// it.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// use dataset_packer::{ErrorKind, ViewOptions, Viewer};
    /// let first = Viewer::open(fixture.path(), &ViewOptions::default().port(0))?;
    /// let port = first.address().port();
    /// let second = Viewer::open(fixture.path(), &ViewOptions::default().port(port));
    /// assert_eq!(second.err().map(|e| e.kind()), Some(ErrorKind::Refused));
    /// # Ok(()) }
    /// ```
    pub fn open(pack: impl AsRef<Path>, options: &ViewOptions) -> Result<Viewer> {
        let pack = Pack::open_version(pack, &options.version)?;
        let source = data::Source::new(pack, options.limits)?;
        let address = format!("{}:{}", bracketed(&options.host), options.port);
        let listener = TcpListener::bind(&address).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => err!(
                Refused,
                "{address} is in use (another `dataset-packer view`?): give another port with --port, or --port 0 for any free one"
            )
            .with_option("port"),
            _ => err!(Io, "cannot listen on {address}: {e}").with_option("host"),
        })?;
        Ok(Viewer {
            source: Arc::new(source),
            hosts: allowed_hosts(&options.host),
            listener,
        })
    }

    /// The address the viewer listens on (with the port chosen, for port 0).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let v = dataset_packer::Viewer::open(fixture.path(), &dataset_packer::ViewOptions::default().port(0))?;
    /// assert!(v.address().ip().is_loopback() && v.address().port() > 0);
    /// # Ok(()) }
    /// ```
    pub fn address(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The page's address, `http://127.0.0.1:8048/`.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let v = dataset_packer::Viewer::open(fixture.path(), &dataset_packer::ViewOptions::default().port(0))?;
    /// assert_eq!(v.url(), format!("http://{}/", v.address()));
    /// # Ok(()) }
    /// ```
    pub fn url(&self) -> String {
        format!("http://{}/", self.address())
    }

    /// The pack shown, in words: its path, version, rows, runs and companion families.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let v = dataset_packer::Viewer::open(fixture.path(), &dataset_packer::ViewOptions::default().port(0))?;
    /// assert!(v.describe().contains("version 1"));
    /// # Ok(()) }
    /// ```
    pub fn describe(&self) -> String {
        self.source.describe()
    }

    /// Answers requests until the process is stopped (Ctrl-C); returns only on an error of the
    /// listening socket.
    ///
    /// ```no_run
    /// # fn main() -> dataset_packer::Result<()> {
    /// use dataset_packer::{ViewOptions, Viewer};
    /// let viewer = Viewer::open("packs/d6", &ViewOptions::default())?;
    /// println!("{}", viewer.url());
    /// viewer.serve()?;
    /// # Ok(()) }
    /// ```
    pub fn serve(self) -> Result<()> {
        let router = server::router(self.source, self.hosts);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_io()
            .build()
            .context("starting the viewer's threads")?;
        runtime.block_on(async move {
            self.listener.set_nonblocking(true).context("listening")?;
            let listener = tokio::net::TcpListener::from_std(self.listener).context("listening")?;
            axum::serve(listener, router)
                .await
                .context("serving the viewer")
        })
    }
}

/// `::1` → `[::1]`, as an address with a port needs.
fn bracketed(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// The names a request's `Host` may carry: this machine's loopback names and the host the
/// server was told; none (anything goes) when it listens on every address.
fn allowed_hosts(host: &str) -> Vec<String> {
    if matches!(host, "0.0.0.0" | "::" | "[::]") {
        return Vec::new();
    }
    let mut hosts: Vec<String> = ["127.0.0.1", "localhost", "[::1]"]
        .into_iter()
        .map(str::to_string)
        .collect();
    let own = bracketed(host);
    if !hosts.contains(&own) {
        hosts.push(own);
    }
    hosts
}
