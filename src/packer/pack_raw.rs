//! Packing raw logs as a library call: [`pack_raw`] with its [`RawPackOptions`] (the settings
//! of `dataset-packer pack`, defaults included, so the library and the command write the same
//! bytes) and the [`RawPackSummary`] it returns. The options are checked here, before anything
//! is touched; the work is [`super::create`]'s (a new pack) or [`super::update`]'s (an update).

use std::collections::BTreeMap;
use std::path::Path;

use super::create::{self, Partition};
use super::update::{self, Report, Updated};
use super::{Job, PackOptions, Summary};
use crate::error::{Error, ErrorKind, Result};
use crate::format::metadata::ShardRecord;
use crate::pack::remote_output::{Target, Uploaded};
use crate::progress::Observer;

/// How [`pack_raw`] packs: the settings of `dataset-packer pack`. [`Default`] is the command's
/// defaults (one `steps.npy`, all cores, invalid runs stop the pack, duplicates kept and
/// reported, no search statistics, nothing replaced, no progress reported).
///
/// ```
/// use dataset_packer::RawPackOptions;
///
/// let options = RawPackOptions::default()
///     .shard_rows(1_000_000)
///     .workers(8)
///     .skip_invalid(true)
///     .dedupe(true);
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct RawPackOptions {
    shard_rows: Option<u64>,
    workers: usize,
    update: bool,
    overwrite: bool,
    dedupe: bool,
    drop_companions: Vec<String>,
    search_stats: bool,
    skip_invalid: bool,
    partition: Option<(u64, u64)>,
    progress: Observer,
    command_line: Option<String>,
}

impl Default for RawPackOptions {
    fn default() -> RawPackOptions {
        RawPackOptions {
            shard_rows: None,
            workers: crate::default_workers(),
            update: false,
            overwrite: false,
            dedupe: false,
            drop_companions: Vec::new(),
            search_stats: false,
            skip_invalid: false,
            partition: None,
            progress: Observer::default(),
            command_line: None,
        }
    }
}

impl RawPackOptions {
    /// Rows per shard (`steps-00000.npy`, …; at least 1); without it, one `steps.npy`. An
    /// update keeps the pack's layout: a different value is refused, none takes the pack's.
    pub fn shard_rows(mut self, rows: u64) -> RawPackOptions {
        self.shard_rows = Some(rows);
        self
    }

    /// Parser threads (1 to 1024; default: all cores). Peak memory ≈ 10 MiB + per worker a
    /// run's compressed size, + its decompressed size when at most 8 MiB, + 96 bytes per row.
    pub fn workers(mut self, workers: usize) -> RawPackOptions {
        self.workers = workers;
        self
    }

    /// Add the input's new runs to the pack already in the output folder (a plain pack when
    /// the folder holds none) instead of writing a new pack.
    pub fn update(mut self, yes: bool) -> RawPackOptions {
        self.update = yes;
        self
    }

    /// Replace a pack already in the output folder (with the companion families its
    /// `metadata.db` records); the old pack stays until the new one is complete. Not with
    /// an update.
    pub fn overwrite(mut self, yes: bool) -> RawPackOptions {
        self.overwrite = yes;
        self
    }

    /// Leave out runs whose content equals an earlier run's (listed as skipped) instead of
    /// packing them and reporting them as duplicates.
    pub fn dedupe(mut self, yes: bool) -> RawPackOptions {
        self.dedupe = yes;
        self
    }

    /// With an update: remove the pack's companion family `name` (its rows would not cover
    /// the new runs); call once per family. Without it, an update refuses a pack with
    /// companions.
    pub fn drop_companion(mut self, name: impl Into<String>) -> RawPackOptions {
        self.drop_companions.push(name.into());
        self
    }

    /// Keep each row's search statistics in the companion family `search`. An update needs it
    /// when the pack has that family and refuses it when the pack has not.
    pub fn search_stats(mut self, yes: bool) -> RawPackOptions {
        self.search_stats = yes;
        self
    }

    /// Leave invalid runs out (listed in the summary and `metadata.db`) instead of stopping.
    pub fn skip_invalid(mut self, yes: bool) -> RawPackOptions {
        self.skip_invalid = yes;
        self
    }

    /// Pack only the `index`-th of `count` contiguous, near-equal slices of the input's runs
    /// (`0 <= index < count`), to pack one drop on several machines and merge the parts in
    /// order. Not with an update.
    pub fn partition(mut self, index: u64, count: u64) -> RawPackOptions {
        self.partition = Some((index, count));
        self
    }

    /// Where progress goes (default: nowhere).
    pub fn progress(mut self, progress: Observer) -> RawPackOptions {
        self.progress = progress;
        self
    }

    /// The command line the pack records (its `session` and, for an update, its `updates`
    /// history). Default: this process's arguments, quoted for a POSIX shell where needed.
    pub fn command_line(mut self, line: impl Into<String>) -> RawPackOptions {
        self.command_line = Some(line.into());
        self
    }

    /// The job for `input` → `output`, or the refusal of settings that do not go together.
    fn job(&self, input: &Path, output: &Path) -> Result<Job> {
        let refuse = |option: &'static str, message: String| {
            Err(Error::new(ErrorKind::Refused, message).with_option(option))
        };
        if self.shard_rows == Some(0) {
            return refuse("shard_rows", "a shard holds at least 1 row".into());
        }
        if !(1..=1024).contains(&self.workers) {
            return refuse(
                "workers",
                format!("{} workers: between 1 and 1024 parse", self.workers),
            );
        }
        if self.update && self.overwrite {
            return refuse(
                "overwrite",
                "an update extends the pack in place; it cannot also replace it".into(),
            );
        }
        if self.update && self.partition.is_some() {
            return refuse(
                "partition",
                "an update adds the whole input's new runs; it does not take a partition".into(),
            );
        }
        if !self.update && !self.drop_companions.is_empty() {
            return refuse(
                "drop_companion",
                format!(
                    "dropping companion families ({}) is part of an update; a new pack has none",
                    self.drop_companions.join(", ")
                ),
            );
        }
        let partition = match self.partition {
            None => None,
            Some((index, count)) if index < count => Some(Partition { index, count }),
            Some((index, count)) => {
                return refuse(
                    "partition",
                    format!("partition {index}/{count}: need 0 <= index < count"),
                );
            }
        };
        Ok(Job {
            input: input.to_path_buf(),
            output: output.to_path_buf(),
            shard_rows: self.shard_rows,
            workers: self.workers,
            overwrite: self.overwrite,
            options: PackOptions {
                skip_invalid: self.skip_invalid,
                dedupe: self.dedupe,
            },
            search_stats: self.search_stats,
            partition,
            drop_companions: self.drop_companions.clone(),
            progress: self.progress.clone(),
            command_line: self
                .command_line
                .clone()
                .unwrap_or_else(crate::pack::query::process_command_line),
        })
    }
}

/// What [`pack_raw`] did: the runs and rows it packed, the shards it wrote, what it left out
/// and what it found; for an update that extended a pack, also what the pack already held.
#[derive(Debug)]
pub struct RawPackSummary {
    pub(crate) summary: Summary,
    /// `Some` when an update extended (or found complete) a pack already there.
    pub(crate) update: Option<Report>,
    /// `Some` when the output was a URL: what was uploaded there.
    pub(crate) uploaded: Option<Uploaded>,
}

impl RawPackSummary {
    /// Runs packed by this call.
    pub fn runs(&self) -> u32 {
        self.summary.runs
    }

    /// Rows packed by this call.
    pub fn rows(&self) -> u64 {
        self.summary.rows
    }

    /// The pack's runs and rows afterwards (for a new pack: [`runs`](Self::runs) and
    /// [`rows`](Self::rows)).
    pub fn total(&self) -> (u64, u64) {
        match &self.update {
            Some(r) => (r.total_runs, r.total_rows),
            None => (u64::from(self.summary.runs), self.summary.rows),
        }
    }

    /// Whether a pack already in the output folder was extended (an update), rather than a
    /// new one written.
    pub fn extended(&self) -> bool {
        self.update.is_some()
    }

    /// The shard files written (for an update: the rewritten last one and the new ones), with
    /// their rows, bytes and CRC-32C.
    pub fn shards(&self) -> &[ShardRecord] {
        &self.summary.shards
    }

    /// Runs left out (invalid, duplicates with dedupe, or changed since they were packed):
    /// (sidecar path relative to the input, reason).
    pub fn skipped(&self) -> &[(String, String)] {
        &self.summary.skipped
    }

    /// Data-quality findings by kind (`duplicate_run`, `orphan_rows_file`, …) and count; for
    /// an update, the pack's counts afterwards.
    pub fn findings(&self) -> &BTreeMap<String, u64> {
        &self.summary.findings.counts
    }

    /// For an output in object storage (`s3://…`): where the pack was published and what
    /// was uploaded; None for a local folder.
    pub fn uploaded(&self) -> Option<&Uploaded> {
        self.uploaded.as_ref()
    }

    /// Compressed input bytes read.
    pub fn compressed_bytes(&self) -> u64 {
        self.summary.compressed_bytes
    }
}

/// Packs the raw self-play logs of the folder `input` (walked recursively: `BASE.meta.json[.gz]`
/// sidecars with `BASE.jsonl.gz` or plain `BASE.jsonl` rows) into a pack in the folder `output`,
/// or, with [`RawPackOptions::update`], adds their new runs to the pack there. What
/// `dataset-packer pack` does, with the same bytes for the same settings.
///
/// `output` may be a URL in object storage (`s3://bucket/prefix`, `gs://…`, `az://…`; the
/// credentials from the environment, as the AWS tools read them): the pack is built in a
/// staging folder under the cache folder ([`store::cache_config`](crate::store::cache_config))
/// and published there as the pack's next commit, and [`RawPackSummary::uploaded`] says what
/// was uploaded. An update downloads the latest commit first and commits the updated pack
/// after it (built again on top of another writer's commit that came first).
///
/// Errors: [`ErrorKind::Refused`] for settings that do not go together or a state the options
/// do not allow (an existing pack without [`overwrite`](RawPackOptions::overwrite): the error's
/// [`option`](Error::option) says which), [`ErrorKind::InvalidInput`] for an invalid run
/// (naming the file and line) unless [`skip_invalid`](RawPackOptions::skip_invalid). Nothing is
/// published on an error.
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let out = dataset_packer::pack::doc_support::temp_dir();
/// # let raw = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/raw");
/// use dataset_packer::{ErrorKind, Pack, RawPackOptions, pack_raw};
///
/// let summary = pack_raw(&raw, &out, &RawPackOptions::default().shard_rows(1000))?;
/// assert_eq!((summary.runs(), summary.rows()), (10, 2240));
/// assert_eq!(Pack::open(&out)?.len(), 2240);
///
/// // Packing again into the same folder needs `overwrite`; adding new runs needs `update`.
/// let err = pack_raw(&raw, &out, &RawPackOptions::default()).unwrap_err();
/// assert_eq!((err.kind(), err.option()), (ErrorKind::Refused, Some("overwrite")));
/// let again = pack_raw(&raw, &out, &RawPackOptions::default().update(true))?;
/// assert_eq!((again.runs(), again.total()), (0, (10, 2240)));
/// # std::fs::remove_dir_all(&out)?;
/// # Ok(()) }
/// ```
pub fn pack_raw(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
    options: &RawPackOptions,
) -> Result<RawPackSummary> {
    let mut job = options.job(input.as_ref(), output.as_ref())?;
    if !options.update {
        let target = Target::of(&job.output, job.overwrite, None)?;
        job.output = target.dir().to_path_buf();
        let summary = create::pack(&job)?;
        return Ok(RawPackSummary {
            summary,
            update: None,
            uploaded: target.publish()?,
        });
    }
    let output = job.output.clone();
    // Another writer's commit between this one's download and its commit: build again on top
    // of it (the runs it added are then already in the pack), a bounded number of times.
    let mut tries = 0;
    loop {
        let target = Target::for_update(&output, None)?;
        job.output = target.dir().to_path_buf();
        let (summary, update) = match update::update(&job)? {
            Updated::Created(summary) => (summary, None),
            Updated::Extended(summary, report) => (summary, Some(report)),
        };
        match target.publish() {
            Err(e) if e.kind() == ErrorKind::Conflict && tries < UPDATE_TRIES => {
                tries += 1;
                log::warn!("{e}; updating again on top of it (try {})", tries + 1);
            }
            uploaded => {
                return Ok(RawPackSummary {
                    summary,
                    update,
                    uploaded: uploaded?,
                });
            }
        }
    }
}

/// How many times an update of a remote pack is built again on top of another writer's
/// commit before it gives up with the conflict.
const UPDATE_TRIES: u32 = 5;
