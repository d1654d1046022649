//! The pack an update extends, as read from its folder (through the pack's opener,
//! [`crate::pack::open::open`]), and the refusals of what an update cannot extend: a shuffled pack or a
//! partition, another layout (`shard_rows`, shards that do not match the `shards` table), the
//! `search` family without `search_stats` (or the other way round), companion families not
//! named by `drop_companion`. Each refusal names the option it is about.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::Job;
use crate::error::{Context, Error, ErrorKind, Result, fail};
use crate::format::metadata::{self, RunDetails, RunRow, ShardRecord};
use crate::format::search;
use crate::format::valuation::ValuationTable;
use crate::pack::files;
use crate::pack::open::Opened;
use crate::pack::shards::Shard;
use crate::pack::versions::VersionSpec;
use crate::progress::thousands;

/// A refusal about `option`.
fn refused(option: &'static str, message: String) -> Error {
    Error::new(ErrorKind::Refused, message).with_option(option)
}

/// The pack being extended, as read from its folder.
pub(super) struct Existing {
    pub(super) dir: PathBuf,
    /// The pack as its opener read it: `metadata.db` (read-only) and the shards.
    pub(super) opened: Opened,
    pub(super) shard_rows: Option<u64>,
    pub(super) shards: Vec<Shard>,
    /// The `shards` table: rows and CRC-32C of each shard.
    pub(super) records: Vec<ShardRecord>,
    pub(super) runs: Vec<RunRow>,
    pub(super) details: HashMap<i64, RunDetails>,
    pub(super) valuations: ValuationTable,
    pub(super) finding_counts: BTreeMap<String, u64>,
    pub(super) skipped: HashMap<String, String>,
    pub(super) orphans: Vec<String>,
    pub(super) session: Vec<(String, String)>,
}

impl Existing {
    /// Opens the pack in `dir`, refusing what an update cannot extend.
    pub(super) fn open(dir: &Path, shard_rows_arg: Option<u64>) -> Result<Existing> {
        let opened = crate::pack::open::open(dir, &VersionSpec::Latest, false)?;
        let conn = &opened.conn;
        let session = metadata::read_session(conn)?;
        let fact = |key: &str| {
            session
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        if fact("shuffled") == Some("true") {
            return Err(refused(
                "update",
                format!(
                    "{} is a shuffled pack: an update appends runs in run order, which would leave the new rows unshuffled; update the unshuffled pack it was made from, then shuffle it again",
                    dir.display()
                ),
            ));
        }
        if let Some(p) = fact("partition") {
            return Err(refused(
                "update",
                format!(
                    "{} is partition {p} of a drop; update the pack merged from the partitions instead",
                    dir.display()
                ),
            ));
        }
        let shard_rows = match fact("shard_rows") {
            Some("none") => None,
            Some(n) => Some(n.parse::<u64>().ok().filter(|&n| n > 0).with_context(|| {
                format!(
                    "{}: session shard_rows {n:?} is not a row count",
                    dir.display()
                )
            })?),
            None => fail!(
                Unsupported,
                "{}: its session does not record shard_rows, so the pack's layout is unknown; an update extends packs this tool wrote",
                dir.display()
            ),
        };
        if shard_rows_arg.is_some() && shard_rows_arg != shard_rows {
            return Err(refused(
                "shard_rows",
                format!(
                    "shards of {} rows differ from the layout of {} ({}); an update keeps the pack's layout (give no shard size)",
                    shard_rows_arg.unwrap_or(0),
                    dir.display(),
                    shard_rows.map_or("a single steps.npy".to_string(), |n| format!(
                        "shards of {n} rows"
                    ))
                ),
            ));
        }
        let shards = opened.shards.clone();
        let records = metadata::read_shard_records(conn)?.ok_or_else(|| {
            Error::new(ErrorKind::Unsupported, format!(
                "{} records no shard checksums (a pack from another tool); an update extends packs this tool wrote",
                dir.display()
            ))
        })?;
        check_layout(dir, &shards, &records, shard_rows)?;
        Ok(Existing {
            dir: dir.to_path_buf(),
            shard_rows,
            runs: metadata::read_runs(conn)?,
            details: metadata::read_run_details(conn)?,
            valuations: opened.valuations()?,
            finding_counts: metadata::read_finding_counts(conn)?
                .into_iter()
                .map(|(k, n)| (k, n.max(0) as u64))
                .collect(),
            skipped: metadata::read_skipped(conn)?.into_iter().collect(),
            orphans: metadata::read_orphans(conn)?,
            session,
            shards,
            records,
            opened,
        })
    }

    /// A count the session records (0 when it records none: a pack from an older version).
    pub(super) fn session_count(&self, key: &str) -> u64 {
        self.session
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0)
    }

    pub(super) fn total_rows(&self) -> u64 {
        self.records.iter().map(|r| r.rows).sum()
    }

    /// The last shard when it has room for more rows (it is then rewritten), else None.
    pub(super) fn partial_last(&self) -> Option<usize> {
        let last = self.records.len().checked_sub(1)?;
        match self.shard_rows {
            None => Some(last),
            Some(limit) => (self.records[last].rows < limit).then_some(last),
        }
    }
}

/// The pack and the update agree on the search statistics: a pack that keeps them (the
/// `search` family) is updated keeping them (or drops the family), and keeping them extends
/// only a pack that has them (its existing rows would have none).
pub(super) fn check_search_family(existing: &Existing, job: &Job) -> Result<()> {
    let has = !files::family_files(&existing.dir, search::FAMILY)?.is_empty();
    let dropping = job.drop_companions.iter().any(|d| d == search::FAMILY);
    let dir = existing.dir.display();
    match (has, job.search_stats, dropping) {
        (_, true, true) => Err(refused(
            "search_stats",
            "keeping the search statistics and dropping the companion family search contradict each other: ask for one of them".into(),
        )),
        (true, false, false) => Err(refused("search_stats", format!(
            "{dir} keeps search statistics (companion family `search`) and the new rows would have none; keep theirs too, or drop the companion family search"
        ))),
        (false, true, _) => Err(refused("search_stats", format!(
            "{dir} was packed without search statistics, so its {} rows have none for the family to hold; pack the drop again keeping them into a new folder, or update without them",
            thousands(existing.total_rows())
        ))),
        _ => Ok(()),
    }
}

/// The pack's companion families (name, files) that the update removes: every family must be
/// named to be dropped (the new rows would have no companion rows), and only those;
/// `extended` is the family the update writes rows of (`search` when it keeps them).
pub(super) fn companions_to_drop(
    existing: &Existing,
    drop: &[String],
    extended: Option<&str>,
) -> Result<Vec<(String, Vec<String>)>> {
    let mut families: Vec<(String, Vec<String>)> = Vec::new();
    for file in files::companion_files(&existing.dir)? {
        let (name, _) = files::parse_file_name(&file).expect("a companion file name");
        if Some(name) == extended {
            continue;
        }
        match families.iter_mut().find(|(n, _)| n == name) {
            Some((_, files)) => files.push(file),
            None => families.push((name.to_string(), vec![file])),
        }
    }
    let kept: Vec<&str> = families
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !drop.iter().any(|d| d == n))
        .collect();
    if !kept.is_empty() {
        return Err(refused(
            "drop_companion",
            format!(
                "{} has companion arrays ({}) aligned with its rows, and the new rows would have none; drop {} with this update (attach {} again afterwards)",
                existing.dir.display(),
                kept.join(", "),
                if kept.len() == 1 { "it" } else { "them" },
                if kept.len() == 1 { "it" } else { "them" },
            ),
        ));
    }
    // A name with no files is fine: a job run again after the family was removed.
    Ok(families)
}

/// Whether the files on disk (name, rows), in order, are exactly the ones `records` lists.
pub(super) fn as_recorded<'a>(
    on_disk: impl ExactSizeIterator<Item = (&'a str, u64)>,
    records: &[ShardRecord],
) -> bool {
    on_disk.len() == records.len()
        && on_disk
            .zip(records)
            .all(|((name, rows), r)| name == r.file_name && rows == r.rows)
}

/// The shards on disk must be the ones the `shards` table records, all full but the last.
fn check_layout(
    dir: &Path,
    shards: &[Shard],
    records: &[ShardRecord],
    shard_rows: Option<u64>,
) -> Result<()> {
    let listed = shards.iter().map(|s| (s.name.as_str(), s.header.rows));
    if !as_recorded(listed, records) {
        fail!(
            Corrupt,
            "{}: the shard files do not match the shards table of metadata.db; run `dataset-packer validate {}`",
            dir.display(),
            dir.display()
        );
    }
    if let Some(limit) = shard_rows
        && let Some(short) = records[..records.len() - 1]
            .iter()
            .find(|r| r.rows != limit)
    {
        fail!(
            Unsupported,
            "{}: {} holds {} rows, but every shard before the last should hold {limit} (shard_rows); an update cannot extend this layout",
            dir.display(),
            short.file_name,
            short.rows
        );
    }
    Ok(())
}
