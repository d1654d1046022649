//! Shuffling a pack: a pack → a pack whose rows are a uniformly random permutation, in bounded
//! memory. The story: validate the input, plan the buckets from the pack size and the memory
//! budget, check the disk space, phase 1 scatters every row to a bucket file chosen at random
//! (counter-based, so the choice depends only on the seed and the row), phase 2 loads one
//! bucket at a time, shuffles it in memory and appends it to the output shards, recording
//! progress after each bucket so a resume can continue; then metadata is carried over, the
//! dispersion of runs in the output is measured, and the pack is published. docs/shuffle.md
//! says why this gives an exactly uniform permutation. `dataset-packer shuffle` is the command.

mod buckets;
mod finish;
mod plan;
mod quality;
mod resume;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use quality::{Quality, WINDOW};

use crate::error::{Context, Result, err, fail};
use crate::format::valuation::ValuationTable;
use crate::interrupt::{self, OnInterrupt};
use crate::pack::families::Family;
use crate::pack::publish::{OutputDir, SHUFFLE_WORK};
use crate::pack::remote_output::{Target, Uploaded};
use crate::pack::shards::Shard;
use crate::pack::versions::{self, VersionSpec};
use crate::progress::Observer;
use crate::verify;
use resume::Progress;

/// How to shuffle: [`shuffle`]'s options. `ShuffleOptions::default()` is what
/// `dataset-packer shuffle` does without flags, so the library and the command write the same
/// bytes.
///
/// ```
/// use dataset_packer::ShuffleOptions;
///
/// let options = ShuffleOptions::default().seed(7).memory(64 << 20).workers(2);
/// assert_eq!((options.seed, options.memory, options.workers), (7, 64 << 20, 2));
/// assert_eq!(ShuffleOptions::default().memory, 1 << 30);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ShuffleOptions {
    /// The same seed gives the same bytes. Default: 0.
    pub seed: u64,
    /// Rows per output shard; `None` (the default): the input's recorded `shard_rows`, if any.
    pub shard_rows: Option<u64>,
    /// Bytes of memory for one bucket and the write buffers: decides the number of buckets.
    /// Default: 1 GiB.
    pub memory: u64,
    /// The folder for the bucket files (about the pack's size); it must exist. `None` (the
    /// default): the output folder. For an output in object storage, the pack is also staged
    /// here before it is uploaded (`None`: in the cache folder's `staging/`).
    pub temp: Option<PathBuf>,
    /// Threads for validating the input and fingerprinting it; the result never depends on
    /// it. Default: all cores.
    pub workers: usize,
    /// Replace a pack already in the output folder. Default: no (an existing pack is refused).
    pub overwrite: bool,
    /// Continue an interrupted shuffle with the same options from its last completed bucket.
    /// Default: no (an interrupted shuffle's work is removed and the shuffle starts over).
    pub resume: bool,
    /// Where progress is reported. Default: nowhere.
    pub progress: Observer,
    /// The command line the output's `session` and `versions` tables record. Default: this
    /// process's arguments, quoted for a POSIX shell.
    pub command_line: String,
    /// Who hears the [`ShuffleNotice`]s. Default: no one.
    notices: Notices,
}

impl Default for ShuffleOptions {
    fn default() -> ShuffleOptions {
        ShuffleOptions {
            seed: 0,
            shard_rows: None,
            memory: 1 << 30,
            temp: None,
            workers: crate::default_workers(),
            overwrite: false,
            resume: false,
            progress: Observer::default(),
            command_line: crate::pack::query::process_command_line(),
            notices: Notices::default(),
        }
    }
}

impl ShuffleOptions {
    /// The seed: the same seed gives the same bytes.
    pub fn seed(mut self, seed: u64) -> ShuffleOptions {
        self.seed = seed;
        self
    }

    /// Rows per output shard.
    pub fn shard_rows(mut self, rows: u64) -> ShuffleOptions {
        self.shard_rows = Some(rows);
        self
    }

    /// Bytes of memory for one bucket and the write buffers.
    pub fn memory(mut self, bytes: u64) -> ShuffleOptions {
        self.memory = bytes;
        self
    }

    /// The folder for the bucket files (it must exist).
    pub fn temp(mut self, dir: impl Into<PathBuf>) -> ShuffleOptions {
        self.temp = Some(dir.into());
        self
    }

    /// Threads for validating and fingerprinting the input (at least 1).
    pub fn workers(mut self, workers: usize) -> ShuffleOptions {
        self.workers = workers.max(1);
        self
    }

    /// Whether to replace a pack already in the output folder.
    pub fn overwrite(mut self, yes: bool) -> ShuffleOptions {
        self.overwrite = yes;
        self
    }

    /// Whether to continue an interrupted shuffle (with the same options).
    pub fn resume(mut self, yes: bool) -> ShuffleOptions {
        self.resume = yes;
        self
    }

    /// Reports progress to `observer`.
    pub fn progress(mut self, observer: Observer) -> ShuffleOptions {
        self.progress = observer;
        self
    }

    /// The command line the output records.
    pub fn command_line(mut self, line: impl Into<String>) -> ShuffleOptions {
        self.command_line = line.into();
        self
    }

    /// Calls `hear` with each [`ShuffleNotice`], when it happens (before the work it
    /// announces).
    pub fn on_notice(
        mut self,
        hear: impl Fn(&ShuffleNotice) + Send + Sync + 'static,
    ) -> ShuffleOptions {
        self.notices = Notices(Some(Arc::new(hear)));
        self
    }
}

/// What hears a notice.
type Hear = dyn Fn(&ShuffleNotice) + Send + Sync;

/// Who hears a shuffle's notices.
#[derive(Clone, Default)]
struct Notices(Option<Arc<Hear>>);

impl Notices {
    fn tell(&self, notice: ShuffleNotice) {
        if let Some(hear) = &self.0 {
            hear(&notice);
        }
    }
}

impl std::fmt::Debug for Notices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Notices(..)"
        } else {
            "Notices(none)"
        })
    }
}

/// What a shuffle tells its caller while it works ([`ShuffleOptions::on_notice`]), for the
/// caller to pass on to its user.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShuffleNotice {
    /// Without [`ShuffleOptions::resume`], the interrupted shuffle found in the work folder
    /// `work` is removed and the shuffle starts over.
    StartingOver {
        /// The interrupted shuffle's work folder.
        work: PathBuf,
        /// Buckets it had gathered.
        buckets_done: u64,
        /// Buckets it had.
        buckets: u64,
    },
}

/// What a finished shuffle did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ShuffleSummary {
    /// Rows written (the input's rows).
    pub rows: u64,
    /// Buckets the rows went through (decided by the rows and [`ShuffleOptions::memory`]).
    pub buckets: u64,
    /// How evenly the runs are spread over the output.
    pub quality: Quality,
    /// For a legacy input: the rows whose `ev_legal` the upgrade changed.
    pub legacy_ev_legal_changed: Option<u64>,
    /// For an output in object storage (`s3://…`): where it was published and what was
    /// uploaded.
    pub uploaded: Option<Uploaded>,
}

/// The input pack, validated and open.
struct Input {
    shards: Vec<Shard>,
    families: Vec<Family>,
    conn: rusqlite::Connection,
    /// `valuation_types.json` as it was opened with the rest.
    valuations: ValuationTable,
}

/// Shuffles the pack `input` into a new pack at `output` (a folder, or a URL in object storage:
/// staged in [`ShuffleOptions::temp`] or the cache folder, then committed there;
/// not resumable) whose rows are a uniformly random permutation of its rows (in bounded
/// memory, resumable), and publishes it. Everything it
/// refuses, it refuses before the first write.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// # let (input, dir) = (fixture.path(), dataset_packer::pack::doc_support::temp_dir());
/// use dataset_packer::{ErrorKind, Pack, ShuffleOptions, shuffle};
///
/// let output = dir.join("shuffled");
/// let summary = shuffle(input, &output, &ShuffleOptions::default().seed(7))?;
/// let (before, after) = (Pack::open(input)?, Pack::open(&output)?);
/// assert_eq!((summary.rows, after.len()), (before.len(), before.len()));
///
/// // The bucket files' folder must exist: refused, before anything is written.
/// let options = ShuffleOptions::default().temp(dir.join("no-such-folder")).overwrite(true);
/// let refused = shuffle(input, &output, &options).unwrap_err();
/// assert_eq!((refused.kind(), refused.option()), (ErrorKind::Refused, Some("temp")));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
pub fn shuffle(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
    options: &ShuffleOptions,
) -> Result<ShuffleSummary> {
    let input_dir = input.as_ref();
    check_temp(options)?;
    let target = Target::of(output.as_ref(), options.overwrite, options.temp.as_deref())?;
    target.refuse_input(input_dir)?;
    if let Some(url) = target.url()
        && options.resume
    {
        return Err(err!(
            Refused,
            "{url}: a shuffle into object storage is staged in a folder of its own each time, \
             so there is no interrupted shuffle of it to continue; shuffle again without \
             resuming (or into a local folder, which can be resumed)"
        )
        .with_option("resume"));
    }
    let output = target.dir();
    let input = open_input(input_dir, options)?;
    let plan = plan::make_plan(
        input_dir,
        options,
        &input.shards,
        &input.families,
        &input.conn,
    )?;

    // An interrupted shuffle's staged output is kept at first even without resume: a fresh
    // start replaces it (begin_staging), a refusal must leave it.
    let mut out = OutputDir::open_with(output, options.overwrite, true)?;
    if out.has_staging() {
        // An interrupted shuffle's output, kept for resuming: a refusal keeps it too.
        out.keep_staging_on_failure();
    }
    let work = options
        .temp
        .clone()
        .unwrap_or_else(|| output.to_path_buf())
        .join(SHUFFLE_WORK);
    // Every refusal comes before the first write: a shuffle refused before it starts leaves
    // nothing behind (and discards no interrupted shuffle).
    let start = resume::decide(&work, &plan, options.resume)?;
    plan::check_space(&work, out.path(), &plan, &input.families, start.scattered())?;
    out.keep_staging_on_failure();
    let mut progress = resume::begin(&work, &plan, start, &options.notices)?;
    let _resumable = interrupt::register(
        &work,
        OnInterrupt::Keep(
            "the shuffle's bucket files: `shuffle --resume` with the same options continues, a shuffle without --resume removes them".into(),
        ),
    );

    if progress.buckets_done > 0 && !out.has_staging() {
        // The interrupted run was killed after its publish began: opening the output finished
        // that publish, which took the staged shards this progress continues, and the buckets
        // gathered into them are gone. Start over; the same plan publishes the same bytes.
        log::warn!(
            "resuming: the interrupted shuffle's output was already being published; shuffling again from the start"
        );
        progress.bucket_rows = None;
        progress.save(&work)?;
    }
    if progress.bucket_rows.is_none() {
        scatter(&input, &plan, &mut progress, &work, &options.progress)?;
    }
    let staging = if progress.buckets_done > 0 {
        out.resume_staging()?
    } else {
        out.begin_staging()?
    };
    let families = &input.families;
    let gathered = buckets::gather(
        &plan,
        families,
        &mut progress,
        &work,
        &staging,
        &options.progress,
    )?;
    let rows = gathered.rows;
    let mut staged = finish::stage(out, staging, &plan, families, gathered)?;
    let records = staged.finish_files()?;
    let quality = quality::measure_dispersion(staged.staging(), &input.conn)?;
    versions::record_source(staged.db(), input_dir, &input.conn, None)?;
    let upgraded = finish::write_metadata(
        staged.db(),
        &records,
        &input.conn,
        &input.shards,
        &input.valuations,
        options,
        &plan,
        &quality,
        rows,
    )?;
    staged.publish(&input.valuations)?;
    std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    Ok(ShuffleSummary {
        rows,
        buckets: plan.buckets,
        quality,
        legacy_ev_legal_changed: upgraded,
        uploaded: target.publish()?,
    })
}

/// The bucket files' folder must exist: the shuffle does not guess where a scratch disk is.
fn check_temp(options: &ShuffleOptions) -> Result<()> {
    if let Some(temp) = &options.temp
        && !temp.is_dir()
    {
        return Err(err!(
            Refused,
            "the folder for the bucket files, {}: {}; give an existing folder",
            temp.display(),
            if temp.exists() {
                "not a folder"
            } else {
                "no such folder"
            }
        )
        .with_option("temp"));
    }
    Ok(())
}

/// Validates the input as `validate` does (legacy packs accepted), then opens its shards,
/// companion families and metadata.db.
fn open_input(dir: &Path, options: &ShuffleOptions) -> Result<Input> {
    let checks = verify::Options {
        deep: false,
        workers: options.workers,
        progress: options.progress.clone(),
        legacy_ok: true,
        scan_rows: true,
    };
    crate::pack::open::check_is_pack(dir)?;
    let report = verify::check(dir, &checks)?;
    if !report.valid() {
        fail!(
            Corrupt,
            "input {} is not a valid pack; nothing was written:\n{}",
            dir.display(),
            report.failures()
        );
    }
    let opened = crate::pack::open::open(dir, &VersionSpec::Latest, true)?;
    let families = opened.families().families;
    let valuations = opened.valuations()?;
    let crate::pack::open::Opened { conn, shards, .. } = opened;
    Ok(Input {
        shards,
        families,
        conn,
        valuations,
    })
}

/// Phase 1 from the start: the bucket files written, their rows and CRCs recorded, and phase
/// 2's progress reset.
fn scatter(
    input: &Input,
    plan: &plan::Plan,
    progress: &mut Progress,
    work: &Path,
    observer: &Observer,
) -> Result<()> {
    let (rows, crcs) = buckets::scatter(&input.shards, &input.families, plan, work, observer)?;
    progress.bucket_rows = Some(rows);
    progress.bucket_crcs = crcs;
    progress.buckets_done = 0;
    progress.writer = None;
    progress.companion_writers.clear();
    progress.save(work)
}
