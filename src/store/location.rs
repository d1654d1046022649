//! Where a pack is read or written, as a user gives it: a local folder, or an object-store
//! URL (`s3://bucket/prefix`, `gs://…`, `az://…`, or `http(s)://…` to read). Anything that
//! looks like a URL but names a scheme this tool does not know is an error, never a local
//! folder named `ftp:` (the mistake that made `--output s3://…` write a folder `s3:`).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result, fail};

/// A place a pack is read from or written to.
///
/// ```
/// use dataset_packer::store::{Location, Scheme};
///
/// let remote: Location = "s3://training/team/clean".parse()?;
/// let url = remote.url().unwrap();
/// assert_eq!((url.scheme(), url.bucket(), url.prefix()), (Scheme::S3, "training", "team/clean"));
/// assert!("packs/clean".parse::<Location>()?.is_local());
/// assert!("ftp://host/pack".parse::<Location>().is_err());
/// # Ok::<(), dataset_packer::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A folder on a local (or shared) filesystem.
    Local(PathBuf),
    /// An object-store URL.
    Remote(Url),
}

/// The object stores a [`Url`] can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    /// `s3://bucket/prefix`: Amazon S3 or an S3-compatible server (MinIO, Ceph, …).
    S3,
    /// `gs://bucket/prefix`: Google Cloud Storage.
    Gs,
    /// `az://container/prefix`: Azure Blob Storage.
    Az,
    /// `http://host/path`: a plain web server, read-only.
    Http,
    /// `https://host/path`: a web server, read-only.
    Https,
}

impl Scheme {
    /// The scheme as written before `://`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::S3 => "s3",
            Scheme::Gs => "gs",
            Scheme::Az => "az",
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    fn parse(name: &str) -> Option<Scheme> {
        Some(match name.to_ascii_lowercase().as_str() {
            "s3" | "s3a" => Scheme::S3,
            "gs" | "gcs" => Scheme::Gs,
            "az" | "azure" => Scheme::Az,
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => return None,
        })
    }

    /// Whether the tool can only read there (a web server takes no uploads).
    pub fn is_read_only(self) -> bool {
        matches!(self, Scheme::Http | Scheme::Https)
    }
}

/// An object-store URL: the store, its bucket (for http(s), the host and port) and a key
/// prefix (no leading or trailing `/`, maybe empty).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Url {
    scheme: Scheme,
    bucket: String,
    prefix: String,
}

impl Url {
    /// Which store.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The bucket (S3, GCS), container (Azure) or `host[:port]` (http).
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix inside the bucket, without a leading or trailing `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The URL of `name` under this one: `s3://b/p` + `steps-00000.npy`.
    ///
    /// ```
    /// # use dataset_packer::store::Location;
    /// let pack: Location = "s3://b/team/clean/".parse()?;
    /// let shard = pack.url().unwrap().join("steps-00000.npy")?;
    /// assert_eq!(shard.to_string(), "s3://b/team/clean/steps-00000.npy");
    /// # Ok::<(), dataset_packer::Error>(())
    /// ```
    pub fn join(&self, name: &str) -> Result<Url> {
        let mut prefix = self.prefix.clone();
        for segment in name.split('/') {
            check_segment(segment, &format!("{self}/{name}"))?;
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(segment);
        }
        Ok(Url {
            prefix,
            ..self.clone()
        })
    }

    /// The last segment of the key (the file name), empty for a bucket's root.
    pub fn file_name(&self) -> &str {
        self.prefix.rsplit('/').next().unwrap_or("")
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme.as_str(), self.bucket)?;
        if !self.prefix.is_empty() {
            write!(f, "/{}", self.prefix)?;
        }
        Ok(())
    }
}

impl Location {
    /// Whether this is a local folder.
    pub fn is_local(&self) -> bool {
        matches!(self, Location::Local(_))
    }

    /// The URL, for a remote location.
    pub fn url(&self) -> Option<&Url> {
        match self {
            Location::Remote(url) => Some(url),
            Location::Local(_) => None,
        }
    }

    /// The folder, for a local location.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Location::Local(path) => Some(path),
            Location::Remote(_) => None,
        }
    }

    /// Parses what a user gave as a pack's place: a path, or a URL. `file:///abs/path` is a
    /// local path. Errors ([`ErrorKind::InvalidInput`]): an unknown scheme (`ftp://`), a known
    /// one without `//` (`s3:bucket`), a URL without a bucket, and `.`/`..`/empty segments in
    /// a key (object stores have no folders to resolve them against).
    pub fn parse(text: &str) -> Result<Location> {
        let Some((scheme, rest)) = split_scheme(text) else {
            return Ok(Location::Local(PathBuf::from(text)));
        };
        let Some(rest) = rest.strip_prefix("//") else {
            // `s3:bucket/x`: a known scheme without `//` is a typo, not a folder `s3:`.
            if Scheme::parse(scheme).is_some() || scheme.eq_ignore_ascii_case("file") {
                fail!(InvalidInput, "{text:?}: a URL is written {scheme}://…");
            }
            return Ok(Location::Local(PathBuf::from(text)));
        };
        if scheme.eq_ignore_ascii_case("file") {
            if !rest.starts_with('/') {
                fail!(
                    InvalidInput,
                    "{text:?}: a file URL is written file:///absolute/path"
                );
            }
            return Ok(Location::Local(PathBuf::from(rest)));
        }
        let Some(kind) = Scheme::parse(scheme) else {
            fail!(
                InvalidInput,
                "{text:?}: unknown URL scheme {scheme:?} (a pack is a local folder or an \
                 s3://, gs://, az://, http:// or https:// URL)"
            );
        };
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            fail!(
                InvalidInput,
                "{text:?}: the URL names no bucket ({scheme}://BUCKET/prefix)"
            );
        }
        let key = key.trim_end_matches('/');
        for segment in key.split('/').filter(|_| !key.is_empty()) {
            check_segment(segment, text)?;
        }
        Ok(Location::Remote(Url {
            scheme: kind,
            bucket: bucket.to_string(),
            prefix: key.to_string(),
        }))
    }
}

impl std::str::FromStr for Location {
    type Err = Error;

    fn from_str(text: &str) -> Result<Location> {
        Location::parse(text)
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Local(path) => write!(f, "{}", path.display()),
            Location::Remote(url) => url.fmt(f),
        }
    }
}

/// `scheme` and the rest of `scheme:rest`, when the text starts with something shaped like a
/// URL scheme (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`), at least two
/// characters long so that a Windows drive letter (`C:`) stays a path.
fn split_scheme(text: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = text.split_once(':')?;
    let mut chars = scheme.chars();
    let shaped = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && scheme.len() >= 2;
    shaped.then_some((scheme, rest))
}

/// Refuses a key segment an object store would not resolve as a path would: empty (`a//b`),
/// `.` or `..`.
fn check_segment(segment: &str, whole: &str) -> Result<()> {
    if segment.is_empty() || segment == "." || segment == ".." {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("{whole:?}: empty, `.` and `..` parts have no meaning in an object key"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(text: &str) -> Url {
        match Location::parse(text).unwrap() {
            Location::Remote(url) => url,
            other => panic!("{text} parsed as {other:?}"),
        }
    }

    fn invalid(text: &str) -> String {
        let err = Location::parse(text).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{text}: {err}");
        err.to_string()
    }

    #[test]
    fn local_paths_stay_paths() {
        for text in [
            "pack",
            "./pack",
            "/abs/pack",
            "a:b",
            "C:\\packs",
            "x",
            "",
            "dir/s3",
        ] {
            assert_eq!(
                Location::parse(text).unwrap(),
                Location::Local(PathBuf::from(text)),
                "{text}"
            );
        }
        assert_eq!(
            Location::parse("file:///data/pack").unwrap(),
            Location::Local(PathBuf::from("/data/pack"))
        );
    }

    #[test]
    fn urls_of_each_store() {
        let url = remote("s3://bucket/team/clean/");
        assert_eq!(
            (url.scheme(), url.bucket(), url.prefix()),
            (Scheme::S3, "bucket", "team/clean")
        );
        assert_eq!(url.to_string(), "s3://bucket/team/clean");
        assert_eq!(remote("s3://bucket").prefix(), "");
        assert_eq!(remote("s3://bucket/").to_string(), "s3://bucket");
        assert_eq!(remote("S3A://b/p").scheme(), Scheme::S3);
        assert_eq!(remote("gs://b/p").scheme(), Scheme::Gs);
        assert_eq!(remote("az://container/p").scheme(), Scheme::Az);
        let http = remote("http://127.0.0.1:9000/packs/x");
        assert_eq!(
            (http.bucket(), http.prefix()),
            ("127.0.0.1:9000", "packs/x")
        );
        assert!(http.scheme().is_read_only() && !Scheme::S3.is_read_only());
    }

    #[test]
    fn unknown_schemes_and_typos_are_errors_not_folders() {
        assert!(invalid("ftp://host/pack").contains("unknown URL scheme \"ftp\""));
        assert!(invalid("hdfs://nn/pack").contains("unknown URL scheme"));
        assert!(invalid("s3:bucket/pack").contains("s3://"));
        assert!(invalid("s3:/bucket/pack").contains("s3://"));
        assert!(invalid("s3://").contains("no bucket"));
        assert!(invalid("s3:///pack").contains("no bucket"));
        assert!(invalid("s3://b/a//c").contains("object key"));
        assert!(invalid("s3://b/a/../c").contains("object key"));
        assert!(invalid("file://relative").contains("file:///"));
    }

    #[test]
    fn join_names_a_file_under_the_prefix() {
        let url = remote("s3://b/p");
        assert_eq!(
            url.join("metadata.db").unwrap().to_string(),
            "s3://b/p/metadata.db"
        );
        assert_eq!(url.join("metadata.db").unwrap().file_name(), "metadata.db");
        assert_eq!(remote("s3://b").join("x.npy").unwrap().prefix(), "x.npy");
        assert!(url.join("../x").is_err());
    }
}
