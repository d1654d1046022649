//! The library's errors: one type, [`Error`], whose [`ErrorKind`] a program can match, whose
//! message names the file at fault (and the line, for raw input), and whose
//! [`source`](std::error::Error::source) chains the causes. Messages never name a command-line
//! flag: an error about an option says which option field through [`Error::option`], and the
//! command-line tool adds its flag name and picks the exit code from the kind.
//!
//! ```
//! use dataset_packer::{ErrorKind, Pack};
//!
//! let err = Pack::open("/no/such/pack").unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::NotAPack);
//! assert!(err.to_string().contains("/no/such/pack"));
//! ```

use std::error::Error as StdError;
use std::fmt;

/// What went wrong, for a program to act on ([`Error::kind`]).
///
/// ```
/// use dataset_packer::ErrorKind;
/// assert_eq!(ErrorKind::Corrupt.to_string(), "corrupt");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The path is not a pack (missing, or no `metadata.db` and shards).
    NotAPack,
    /// A pack's file contradicts the format or its own records; the error names the file.
    Corrupt,
    /// Well-formed, but something this version of the library does not read or write (a
    /// layout, a schema, a dtype).
    Unsupported,
    /// Bad input data other than a pack (raw logs, a companion array, a selection
    /// expression); the error names the file and, for text, the line.
    InvalidInput,
    /// Reading or writing the filesystem failed.
    Io,
    /// An option, or a combination of options and state, the library will not act on (the
    /// output exists, an input is also the output, a setting differs from the pack's).
    Refused,
    /// Stopped by a signal or a limit (Ctrl-C, a selection's time or memory limit).
    Interrupted,
    /// The pack kept changing while it was opened: another process published into it again
    /// and again. Nothing is wrong with it; opening it again later will do.
    Busy,
    /// Another writer committed a version of the pack first, and this change depends on the
    /// version it replaced: nothing of it was published. Run it again on the new version.
    Conflict,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::NotAPack => "not a pack",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::Io => "i/o",
            ErrorKind::Refused => "refused",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::Busy => "busy",
            ErrorKind::Conflict => "conflict",
        })
    }
}

/// The library's error: a kind, a message naming the file at fault, the option it concerns
/// (if any), and the cause it wraps (see [`std::error::Error::source`]).
///
/// ```
/// use dataset_packer::{Error, ErrorKind};
/// let err = Error::new(ErrorKind::Refused, "pack/ exists").with_option("overwrite");
/// assert_eq!((err.kind(), err.option()), (ErrorKind::Refused, Some("overwrite")));
/// assert_eq!(err.to_string(), "pack/ exists");
/// ```
pub struct Error {
    kind: ErrorKind,
    option: Option<&'static str>,
    inner: Box<Inner>,
}

#[derive(Debug, thiserror::Error)]
enum Inner {
    /// The library's own message, with the error that caused it.
    #[error("{message}")]
    Message {
        message: String,
        #[source]
        source: Option<Box<dyn StdError + Send + Sync + 'static>>,
    },
    /// Another library's error as it is: its message and its causes.
    #[error(transparent)]
    Foreign(Box<dyn StdError + Send + Sync + 'static>),
}

/// `std::result::Result` with the library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` with `message`.
    ///
    /// ```
    /// use dataset_packer::{Error, ErrorKind};
    /// assert_eq!(Error::new(ErrorKind::Io, "disk full").kind(), ErrorKind::Io);
    /// ```
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            option: None,
            inner: Box::new(Inner::Message {
                message: message.into(),
                source: None,
            }),
        }
    }

    /// Another error wrapped as one of `kind`: its message and causes are kept as they are.
    ///
    /// ```
    /// use dataset_packer::{Error, ErrorKind};
    /// let io = std::io::Error::other("gone");
    /// assert_eq!(Error::wrap(ErrorKind::Io, io).to_string(), "gone");
    /// ```
    pub fn wrap(kind: ErrorKind, error: impl StdError + Send + Sync + 'static) -> Error {
        Error {
            kind,
            option: None,
            inner: Box::new(Inner::Foreign(Box::new(error))),
        }
    }

    /// What went wrong.
    ///
    /// ```
    /// use dataset_packer::{Error, ErrorKind};
    /// assert_eq!(Error::new(ErrorKind::Corrupt, "x").kind(), ErrorKind::Corrupt);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The option the error is about, by its field name in the options type (`overwrite`,
    /// `shard_rows`), if it is about one: what a front end names in its own terms.
    ///
    /// ```
    /// use dataset_packer::{Error, ErrorKind};
    /// assert_eq!(Error::new(ErrorKind::Io, "x").option(), None);
    /// ```
    pub fn option(&self) -> Option<&'static str> {
        self.option
    }

    /// The same error, saying which option it is about.
    ///
    /// ```
    /// use dataset_packer::{Error, ErrorKind};
    /// let e = Error::new(ErrorKind::Refused, "x").with_option("seed");
    /// assert_eq!(e.option(), Some("seed"));
    /// ```
    pub fn with_option(mut self, option: &'static str) -> Error {
        self.option = Some(option);
        self
    }

    /// This error as the cause of a new message of the same kind (what
    /// [`Context::context`] does).
    pub(crate) fn within(self, message: String) -> Error {
        Error {
            kind: self.kind,
            option: self.option,
            inner: Box::new(Inner::Message {
                message,
                source: Some(Box::new(self)),
            }),
        }
    }

    /// The kind of the I/O error at the root of this one, if it is one.
    pub(crate) fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match &*self.inner {
            Inner::Foreign(e) => e.downcast_ref::<std::io::Error>().map(|io| io.kind()),
            Inner::Message {
                source: Some(s), ..
            } => match s.downcast_ref::<Error>() {
                Some(e) => e.io_kind(),
                None => s.downcast_ref::<std::io::Error>().map(|io| io.kind()),
            },
            Inner::Message { source: None, .. } => None,
        }
    }

    /// The same error, as another kind.
    pub(crate) fn with_kind(mut self, kind: ErrorKind) -> Error {
        self.kind = kind;
        self
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // What `fn main() -> Result<…>` prints: the message and its causes, as a user reads them.
        write!(f, "{self:#} ({})", self.kind)
    }
}

/// An error's message and its causes' joined by ": ", leaving out a cause whose text is
/// already there: errors that put their source's text into their own message (the object
/// store's and its HTTP client's do) would otherwise print it again at every level.
pub(crate) fn join_chain(texts: impl IntoIterator<Item = String>) -> String {
    let mut out = String::new();
    for text in texts {
        if out.is_empty() {
            out = text;
        } else if !(text.len() >= 12 && out.contains(&text)) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

impl fmt::Display for Error {
    /// The message; with `{:#}`, the message and each of its causes after a colon (as
    /// anyhow prints a chain): `reading steps.npy: bad .npy header: key 'shape' is given twice`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !f.alternate() {
            return write!(f, "{}", self.inner);
        }
        let mut texts = vec![self.inner.to_string()];
        let mut cause = self.source();
        while let Some(c) = cause {
            texts.push(c.to_string());
            cause = c.source();
        }
        f.write_str(&join_chain(texts))
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner.source()
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        let kind = match e.kind() {
            std::io::ErrorKind::Interrupted => ErrorKind::Interrupted,
            _ => ErrorKind::Io,
        };
        Error::wrap(kind, e)
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Error {
        let kind = match &e {
            rusqlite::Error::SqliteFailure(f, _) => match f.code {
                rusqlite::ErrorCode::OperationInterrupted => ErrorKind::Interrupted,
                rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase => {
                    ErrorKind::Corrupt
                }
                rusqlite::ErrorCode::CannotOpen
                | rusqlite::ErrorCode::DiskFull
                | rusqlite::ErrorCode::SystemIoFailure
                | rusqlite::ErrorCode::ReadOnly
                | rusqlite::ErrorCode::PermissionDenied => ErrorKind::Io,
                _ => ErrorKind::Corrupt,
            },
            _ => ErrorKind::Corrupt,
        };
        Error::wrap(kind, e)
    }
}

impl From<std::num::ParseIntError> for Error {
    fn from(e: std::num::ParseIntError) -> Error {
        Error::wrap(ErrorKind::InvalidInput, e)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Error {
        let kind = if e.is_io() {
            ErrorKind::Io
        } else {
            ErrorKind::InvalidInput
        };
        Error::wrap(kind, e)
    }
}

/// `.context(…)` and `.with_context(|| …)` on results and options, as `anyhow` spells them:
/// the error becomes the cause of a message that says what was being done (an `Option`'s
/// `None` becomes an error of kind `Corrupt`, the kind a missing record in a pack is).
pub(crate) trait Context<T> {
    fn context(self, message: impl fmt::Display) -> Result<T>;
    fn with_context<M: fmt::Display>(self, message: impl FnOnce() -> M) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, message: impl fmt::Display) -> Result<T> {
        self.map_err(|e| e.into().within(message.to_string()))
    }

    fn with_context<M: fmt::Display>(self, message: impl FnOnce() -> M) -> Result<T> {
        self.map_err(|e| e.into().within(message().to_string()))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, message: impl fmt::Display) -> Result<T> {
        self.ok_or_else(|| Error::new(ErrorKind::Corrupt, message.to_string()))
    }

    fn with_context<M: fmt::Display>(self, message: impl FnOnce() -> M) -> Result<T> {
        self.ok_or_else(|| Error::new(ErrorKind::Corrupt, message().to_string()))
    }
}

/// Returns early with an error of a kind: `fail!(Corrupt, "{} is short", path.display())`.
macro_rules! fail {
    ($kind:ident, $($arg:tt)+) => {
        return Err($crate::error::Error::new($crate::error::ErrorKind::$kind, format!($($arg)+)))
    };
}
pub(crate) use fail;

/// Returns early with an error of a kind unless `cond` holds:
/// `ensure!(n < max, InvalidInput, "{n} is too many")`.
macro_rules! ensure {
    ($cond:expr, $kind:ident, $($arg:tt)+) => {
        if !$cond {
            $crate::error::fail!($kind, $($arg)+);
        }
    };
}
pub(crate) use ensure;

/// An error of a kind, as a value: `err!(Refused, "{} exists", dir.display())`.
macro_rules! err {
    ($kind:ident, $($arg:tt)+) => {
        $crate::error::Error::new($crate::error::ErrorKind::$kind, format!($($arg)+))
    };
}
pub(crate) use err;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_in_the_message_is_not_printed_again() {
        let texts = |v: &[&str]| v.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        assert_eq!(
            join_chain(texts(&[
                "s3://b/p/metadata.db: reading failed",
                "Error performing GET http://h/p - error sending request",
                "error sending request",
                "tcp connect error: Connection refused",
            ])),
            "s3://b/p/metadata.db: reading failed: Error performing GET http://h/p - error \
             sending request: tcp connect error: Connection refused"
        );
        // Short causes are kept, even when their words appear earlier.
        assert_eq!(
            join_chain(texts(&["steps.npy: bad header", "bad"])),
            "steps.npy: bad header: bad"
        );
    }

    #[test]
    fn causes_chain_as_anyhow_printed_them() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e: Result<()> = Err(io).context("opening a/b.npy");
        let e = e.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io);
        assert_eq!(e.to_string(), "opening a/b.npy");
        assert_eq!(
            format!("{:#}", anyhow::Error::from(e)),
            "opening a/b.npy: no such file"
        );
    }

    #[test]
    fn context_keeps_the_kind_and_the_option() {
        let e: Result<()> = Err(err!(Refused, "x exists").with_option("overwrite"));
        let e = e.context("writing x").unwrap_err();
        assert_eq!(
            (e.kind(), e.option()),
            (ErrorKind::Refused, Some("overwrite"))
        );
    }
}
