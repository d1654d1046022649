//! Removing what no kept commit of a remote pack names: the objects of commits dropped by
//! `keep_versions`, of writers that died before their commit, of condition probes. Nothing
//! younger than the age window is ever deleted, because a writer may still be uploading it or
//! a reader may have just opened the commit that names it; and only the table's own folders
//! (`_versions/`, `_objects/`, `_probes/`) are touched, never a key beside them.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use super::client::{Object, Store};
use super::location::Url;
use super::table::{self, OBJECTS, PROBES, VERSIONS};
use crate::error::{Result, fail};

/// What [`gc`] keeps and how.
///
/// ```
/// use std::time::Duration;
/// use dataset_packer::store::GcOptions;
/// let o = GcOptions::default().keep_versions(3).dry_run(true);
/// assert_eq!(o.older_than, Duration::from_secs(7 * 86_400));
/// ```
#[derive(Debug, Clone)]
pub struct GcOptions {
    /// Keep only the latest this many commits (and every commit younger than the window);
    /// None keeps every commit.
    pub keep_versions: Option<u64>,
    /// The age window: nothing written more recently than this is deleted.
    pub older_than: Duration,
    /// Say what would be deleted, delete nothing.
    pub dry_run: bool,
}

impl Default for GcOptions {
    /// Every commit kept, a window of 7 days.
    fn default() -> GcOptions {
        GcOptions {
            keep_versions: None,
            older_than: Duration::from_secs(7 * 86_400),
            dry_run: false,
        }
    }
}

impl GcOptions {
    /// The same, keeping the latest `n` commits.
    pub fn keep_versions(mut self, n: u64) -> GcOptions {
        self.keep_versions = Some(n);
        self
    }

    /// The same with the age window `window`.
    pub fn older_than(mut self, window: Duration) -> GcOptions {
        self.older_than = window;
        self
    }

    /// The same, deleting nothing.
    pub fn dry_run(mut self, yes: bool) -> GcOptions {
        self.dry_run = yes;
        self
    }
}

/// What [`gc`] did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcSummary {
    /// The commits kept.
    pub kept_commits: Vec<u64>,
    /// The commits whose records were deleted.
    pub dropped_commits: Vec<u64>,
    /// The keys deleted below the pack's URL, records first.
    pub deleted: Vec<String>,
    pub deleted_bytes: u64,
    /// Objects no kept commit names that were left because they are younger than the window.
    pub young: Vec<String>,
    pub dry_run: bool,
}

/// Deletes the objects of the pack at `url` that no kept commit names and that are older
/// than the window: first the records of the dropped commits, then the objects. Refused for a
/// pack without commits (nothing of it is the table's).
///
/// ```no_run
/// use dataset_packer::store::{gc, GcOptions, Location, Store};
/// let store = Store::from_env()?;
/// let url: Location = "s3://training/team/d6".parse()?;
/// let done = gc(&store, url.url().unwrap(), &GcOptions::default().keep_versions(10))?;
/// println!("{} objects, {} bytes deleted", done.deleted.len(), done.deleted_bytes);
/// # Ok::<(), dataset_packer::Error>(())
/// ```
pub fn gc(store: &Store, url: &Url, options: &GcOptions) -> Result<GcSummary> {
    let objects = store.list_all(url)?;
    let now = SystemTime::now();
    let young = |o: &Object| {
        now.duration_since(o.modified)
            .map_or(true, |age| age < options.older_than)
    };
    let mut commits: Vec<(u64, &Object)> = objects
        .iter()
        .filter_map(|o| Some((record_number(&o.key)?, o)))
        .collect();
    commits.sort_by_key(|(n, _)| *n);
    let Some(&(latest, _)) = commits.last() else {
        fail!(
            Refused,
            "{url} has no commits (no records in {url}/{VERSIONS}): it is not a pack in the \
             table layout, so nothing there is gc's to delete"
        );
    };
    let (kept, dropped): (Vec<_>, Vec<_>) = commits.into_iter().partition(|(n, o)| {
        *n == latest || young(o) || options.keep_versions.is_none_or(|k| latest - *n < k.max(1))
    });
    let mut named = BTreeSet::new();
    for &(n, _) in &kept {
        for file in table::read_commit(store, url, n)?.files.into_values() {
            named.insert(file.key);
        }
    }
    let mut summary = GcSummary {
        kept_commits: kept.iter().map(|(n, _)| *n).collect(),
        dropped_commits: dropped.iter().map(|(n, _)| *n).collect(),
        dry_run: options.dry_run,
        ..GcSummary::default()
    };
    // The records of the dropped commits first: no reader finds one whose objects are gone.
    let mut doomed: Vec<&Object> = dropped.iter().map(|(_, record)| *record).collect();
    for object in &objects {
        let ours = [OBJECTS, PROBES]
            .iter()
            .any(|dir| object.key.starts_with(&format!("{dir}/")));
        if !ours || named.contains(&object.key) {
            continue;
        }
        if young(object) {
            summary.young.push(object.key.clone());
        } else {
            doomed.push(object);
        }
    }
    for object in doomed {
        if !options.dry_run {
            store.delete(&url.join(&object.key)?)?;
        }
        summary.deleted.push(object.key.clone());
        summary.deleted_bytes += object.size;
    }
    Ok(summary)
}

/// The commit number of a record's key (`_versions/18446744073709551613.json` for commit 2).
fn record_number(key: &str) -> Option<u64> {
    let name = key.strip_prefix(VERSIONS)?.strip_prefix('/')?;
    table::parse_record_name(name)
}

/// `7d`, `12h`, `30m`, `45s`, `0s` → a duration (a number and a unit: d, h, m or s).
///
/// ```
/// use std::time::Duration;
/// use dataset_packer::store::parse_age;
/// assert_eq!(parse_age("7d")?, Duration::from_secs(7 * 86_400));
/// assert_eq!(parse_age("90m")?, Duration::from_secs(5_400));
/// assert!(parse_age("soon").is_err());
/// # Ok::<(), dataset_packer::Error>(())
/// ```
pub fn parse_age(text: &str) -> Result<Duration> {
    let t = text.trim();
    let unit = match t.chars().last() {
        Some('d') => 86_400,
        Some('h') => 3_600,
        Some('m') => 60,
        Some('s') => 1,
        _ => fail!(
            InvalidInput,
            "{text:?} is not an age like 7d, 12h, 30m or 45s"
        ),
    };
    match t[..t.len() - 1].parse::<u64>() {
        Ok(n) => Ok(Duration::from_secs(n.saturating_mul(unit))),
        Err(_) => fail!(
            InvalidInput,
            "{text:?} is not an age like 7d, 12h, 30m or 45s"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_records_have_record_numbers() {
        assert_eq!(
            record_number("_versions/18446744073709551603.json"),
            Some(12)
        );
        assert_eq!(record_number("_objects/18446744073709551603.json"), None);
        assert_eq!(record_number("_versions/x.json"), None);
    }

    #[test]
    fn ages() {
        assert_eq!(parse_age("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_age("2h").unwrap(), Duration::from_secs(7200));
        for bad in ["", "d", "7", "7w", "-1d", "1.5d"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
    }
}
