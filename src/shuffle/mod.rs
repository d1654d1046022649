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

use anyhow::{Context, Result, bail};

pub use quality::{Quality, WINDOW};

use crate::UsageError;
use crate::format::metadata;
use crate::interrupt::{self, OnInterrupt};
use crate::pack::families::{self, Family};
use crate::pack::publish::{OutputDir, SHUFFLE_WORK};
use crate::pack::shards::{self, Shard};
use crate::verify;
use resume::Progress;

/// What to shuffle, where, and how: `shuffle`'s options as plain values.
#[derive(Debug, Clone)]
pub struct Options {
    /// The pack to shuffle.
    pub input: PathBuf,
    /// The folder of the shuffled pack.
    pub output: PathBuf,
    /// The same seed gives the same bytes.
    pub seed: u64,
    /// Rows per output shard; `None`: the input's recorded `shard_rows`, if any.
    pub shard_rows: Option<u64>,
    /// Bytes of memory for one bucket and the write buffers: decides the number of buckets.
    pub memory: u64,
    /// The folder for the bucket files; `None`: the output folder.
    pub temp: Option<PathBuf>,
    /// Threads for validating the input and fingerprinting it; the result never depends on it.
    pub workers: usize,
    /// Replace a pack already in the output folder.
    pub overwrite: bool,
    /// Continue an interrupted shuffle with the same plan from its last completed bucket.
    pub resume: bool,
    /// No progress bars.
    pub progress: crate::progress::Observer,
    /// The command line recorded in the output's session table.
    pub command_line: String,
}

/// What the shuffle tells its caller while it works, for the caller to print.
#[derive(Debug)]
pub enum Notice<'a> {
    /// Without `resume`, the interrupted shuffle found in `work` is removed and the shuffle
    /// starts over.
    StartingOver {
        work: &'a Path,
        buckets_done: u64,
        buckets: u64,
    },
}

/// What a finished shuffle did.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Rows written (the input's rows).
    pub rows: u64,
    pub buckets: u64,
    pub quality: Quality,
    /// For a legacy input: the rows whose `ev_legal` the upgrade changed.
    pub legacy_ev_legal_changed: Option<u64>,
}

/// The input pack, validated and open.
struct Input {
    shards: Vec<Shard>,
    families: Vec<Family>,
    conn: rusqlite::Connection,
}

/// Shuffles `options.input` into `options.output` and publishes it; `notice` hears what the
/// caller should tell the user on the way.
pub fn shuffle(options: &Options, notice: &mut dyn FnMut(Notice<'_>)) -> Result<Summary> {
    check_temp(options)?;
    let input = open_input(options)?;
    let plan = plan::make_plan(options, &input.shards, &input.families, &input.conn)?;

    // An interrupted shuffle's staged output is kept at first even without --resume: a fresh
    // start replaces it (begin_staging), a refusal must leave it.
    let mut out = OutputDir::open_with(&options.output, options.overwrite, true)?;
    if out.has_staging() {
        // An interrupted shuffle's output, kept for --resume: a refusal keeps it too.
        out.keep_staging_on_failure();
    }
    let work = options
        .temp
        .clone()
        .unwrap_or_else(|| options.output.clone())
        .join(SHUFFLE_WORK);
    // Every refusal comes before the first write: a shuffle refused before it starts leaves
    // nothing behind (and discards no interrupted shuffle).
    let start = resume::decide(&work, &plan, options.resume)?;
    plan::check_space(&work, out.path(), &plan, &input.families, start.scattered())?;
    out.keep_staging_on_failure();
    let mut progress = resume::begin(&work, &plan, start, notice)?;
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
            "--resume: the interrupted shuffle's output was already being published; shuffling again from the start"
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
    crate::pack::versions::record_source(staged.db(), &options.input, &input.conn, None)?;
    let upgraded = finish::write_metadata(
        staged.db(),
        &records,
        &input.conn,
        &input.shards,
        options,
        &plan,
        &quality,
        rows,
    )?;
    staged.publish(&shards::read_valuations(&options.input)?)?;
    std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    Ok(Summary {
        rows,
        buckets: plan.buckets,
        quality,
        legacy_ev_legal_changed: upgraded,
    })
}

/// The bucket files' folder must exist: the shuffle does not guess where a scratch disk is.
fn check_temp(options: &Options) -> Result<()> {
    if let Some(temp) = &options.temp
        && !temp.is_dir()
    {
        return Err(UsageError(format!(
            "--temp {}: {}; give an existing folder for the bucket files",
            temp.display(),
            if temp.exists() {
                "not a folder"
            } else {
                "no such folder"
            }
        ))
        .into());
    }
    Ok(())
}

/// Validates the input as `validate` does (legacy packs accepted), then opens its shards,
/// companion families and metadata.db.
fn open_input(options: &Options) -> Result<Input> {
    let checks = verify::Options {
        deep: false,
        workers: options.workers,
        progress: options.progress.clone(),
        legacy_ok: true,
        scan_rows: true,
    };
    shards::check_is_pack(&options.input)?;
    let report = verify::check(&options.input, &checks)?;
    if !report.valid() {
        bail!(
            "input {} is not a valid pack; nothing was written:\n{}",
            options.input.display(),
            report.failures()
        );
    }
    let shards = shards::open_shards(&options.input, true)?;
    let families = families::scan(&options.input, &shards)?.families;
    let conn = metadata::open_read_only(&options.input.join(metadata::FILE_NAME))?;
    Ok(Input {
        shards,
        families,
        conn,
    })
}

/// Phase 1 from the start: the bucket files written, their rows and CRCs recorded, and phase
/// 2's progress reset.
fn scatter(
    input: &Input,
    plan: &plan::Plan,
    progress: &mut Progress,
    work: &Path,
    observer: &crate::progress::Observer,
) -> Result<()> {
    let (rows, crcs) = buckets::scatter(&input.shards, &input.families, plan, work, observer)?;
    progress.bucket_rows = Some(rows);
    progress.bucket_crcs = crcs;
    progress.buckets_done = 0;
    progress.writer = None;
    progress.companion_writers.clear();
    progress.save(work)
}
