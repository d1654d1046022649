//! Progress on long work, as the library reports it: an operation tells a [`Progress`]
//! observer (given in its options) when a stage starts, how far it got and when it ends; it
//! draws and prints nothing itself. The command-line tool's bars are one observer. Also the
//! number formatting the library's messages share.

use std::sync::Arc;

/// What a stage counts.
///
/// ```
/// use dataset_packer::progress::Unit;
/// assert_ne!(Unit::Rows, Unit::Bytes);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Input bytes (packing raw logs: the compressed bytes read).
    Bytes,
    /// Rows (steps) read or written.
    Rows,
}

/// An observer of a long operation's progress. Stages run one after another (`begin`,
/// any number of `advance` and `message` calls, `end`); `advance` may be called from several
/// threads at once.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use dataset_packer::progress::{Progress, Unit};
///
/// #[derive(Default)]
/// struct Count(AtomicU64);
/// impl Progress for Count {
///     fn begin(&self, _stage: &str, _total: u64, _unit: Unit) {}
///     fn advance(&self, by: u64) {
///         self.0.fetch_add(by, Ordering::Relaxed);
///     }
/// }
/// let count = Count::default();
/// count.advance(5);
/// assert_eq!(count.0.load(Ordering::Relaxed), 5);
/// ```
pub trait Progress: Send + Sync {
    /// A stage starts: its name (`pack`, `shuffle 1/2 scatter`), and its total in `unit`.
    fn begin(&self, stage: &str, total: u64, unit: Unit);
    /// `by` more units of the current stage are done.
    fn advance(&self, by: u64);
    /// A note about the current stage (rows so far, the run being read).
    fn message(&self, _text: &str) {}
    /// The current stage is over (finished, or abandoned on an error).
    fn end(&self) {}
}

/// Where an operation reports its progress: an observer, or none (the default: silent).
///
/// ```
/// use dataset_packer::progress::{Observer, Progress, Unit};
/// struct Log;
/// impl Progress for Log {
///     fn begin(&self, stage: &str, total: u64, _unit: Unit) {
///         eprintln!("{stage}: {total}");
///     }
///     fn advance(&self, _by: u64) {}
/// }
/// let quiet = Observer::default();
/// let logged = Observer::new(Log);
/// assert!(quiet.is_none() && !logged.is_none());
/// ```
#[derive(Clone, Default)]
pub struct Observer(Option<Arc<dyn Progress>>);

impl Observer {
    /// Reports to `progress`.
    pub fn new(progress: impl Progress + 'static) -> Observer {
        Observer(Some(Arc::new(progress)))
    }

    /// Whether nothing observes.
    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Observer(..)"
        } else {
            "Observer(none)"
        })
    }
}

/// An operation's handle on its observer for one stage: what the library's code advances. A
/// stage with no observer costs a branch. Ends the stage when the last clone is dropped.
#[derive(Clone, Default)]
pub(crate) struct Bar(Option<Arc<Stage>>);

struct Stage(Arc<dyn Progress>);

impl Drop for Stage {
    fn drop(&mut self) {
        self.0.end();
    }
}

impl Bar {
    /// Starts stage `stage` of `total` `unit`s on `observer` (nothing when there is none).
    pub(crate) fn start(observer: &Observer, stage: &str, total: u64, unit: Unit) -> Bar {
        Bar(observer.0.as_ref().map(|o| {
            o.begin(stage, total, unit);
            Arc::new(Stage(o.clone()))
        }))
    }

    /// A row-counting stage.
    pub(crate) fn rows(observer: &Observer, stage: &str, total: u64) -> Bar {
        Bar::start(observer, stage, total, Unit::Rows)
    }

    pub(crate) fn inc(&self, by: u64) {
        if let Some(s) = &self.0 {
            s.0.advance(by);
        }
    }

    /// Whether anything observes this stage (so a caller can skip making a message nobody
    /// sees).
    pub(crate) fn is_observed(&self) -> bool {
        self.0.is_some()
    }

    pub(crate) fn set_message(&self, text: impl AsRef<str>) {
        if let Some(s) = &self.0 {
            s.0.message(text.as_ref());
        }
    }

    /// Ends the stage now (clones still held end nothing more).
    pub(crate) fn finish_and_clear(self) {
        drop(self);
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

/// `1 shard`, `3 shards`: a count with its noun, singular or plural.
pub fn count(n: u64, singular: &str, plural: &str) -> String {
    format!(
        "{} {}",
        thousands(n),
        if n == 1 { singular } else { plural }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_well() {
        assert_eq!(count(1, "shard", "shards"), "1 shard");
        assert_eq!(count(1200, "run", "runs"), "1,200 runs");
    }
}
