//! Merging packs into one: what `merge` does, as a library call. The story: refuse unsafe
//! requests up front, check every input (structure and metadata; the full row pass for inputs
//! without recorded checksums), unify valuation names, choose the companion families to carry,
//! assign output run ids (duplicates kept as findings or left out), stream every input's rows
//! in chunks (one thread reads, verifies the recorded checksums and rewrites run and valuation
//! ids in place, converting legacy 46-byte rows; the other writes), write metadata for the
//! renumbered runs, publish atomically, and only then, if asked and the published output
//! re-validates, delete the inputs.
//!
//! [`merge`] takes plain [`Options`] and returns a [`Summary`] for the caller to print.

mod checks;
mod copy;
mod plan;
mod record;
mod source;
mod stage;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::format::valuation::ValuationTable;
use crate::pack::StagedPack;
use crate::pack::files::is_pack_file;
use crate::verify;
use source::Source;

/// What to merge, and how.
pub(crate) struct Options {
    /// The input packs, in order (runs are renumbered in this order).
    pub inputs: Vec<PathBuf>,
    /// Folder to write the merged pack into.
    pub output: PathBuf,
    /// Rows per output shard; None: the inputs' shard size when every input has shards (the
    /// largest if they differ), else one steps.npy.
    pub shard_rows: Option<u64>,
    /// Replace a pack already in the output folder.
    pub overwrite: bool,
    /// Delete the input packs' files once the output is published and re-validated.
    pub delete_inputs: bool,
    /// Leave out runs whose content equals an earlier run's.
    pub dedupe: bool,
    /// Companion families left out of the output.
    pub drop_companions: Vec<String>,
    /// Threads for validating inputs.
    pub workers: usize,
    /// No progress bars.
    pub progress: crate::progress::Observer,
    /// The command line the session table records.
    pub command_line: String,
}

/// What a merge wrote.
pub(crate) struct Summary {
    pub inputs: Vec<InputSummary>,
    pub runs: u64,
    pub rows: u64,
    pub shards: usize,
    pub bytes: u64,
    /// Duplicate runs kept (reported as findings).
    pub duplicates: u64,
    /// Runs left out with dedupe: (source, reason).
    pub left_out: Vec<(String, String)>,
    /// Companion families carried: name and dtype.
    pub companions: Vec<(String, String)>,
    /// When an input was a legacy pack: rows whose `ev_legal` the upgrade changed.
    pub upgraded: Option<u64>,
    /// The inputs deleted (with delete_inputs), in input order.
    pub deleted: Vec<Deleted>,
}

/// One input's part of the output.
pub(crate) struct InputSummary {
    pub path: PathBuf,
    pub runs: usize,
    pub rows: u64,
    /// Output ids of its first and last run carried.
    pub ids: Option<(u32, u32)>,
    pub left_out: usize,
}

/// An input whose pack files were deleted.
pub(crate) struct Deleted {
    pub path: PathBuf,
    pub files: usize,
    pub bytes: u64,
}

/// Merges `options.inputs` into a new pack at `options.output`, published atomically.
pub(crate) fn merge(options: &Options) -> Result<Summary> {
    let started = Instant::now();
    checks::refuse_unsafe(&options.inputs, &options.output, options.delete_inputs)?;
    let verify_options = verify::Options {
        deep: false,
        workers: options.workers,
        progress: options.progress.clone(),
        legacy_ok: true,
        scan_rows: false,
    };
    let sources: Vec<Source> = options
        .inputs
        .iter()
        .map(|p| Source::open(p, &verify_options))
        .collect::<Result<_>>()?;
    let valuations = unify_valuations(&sources)?;
    let carried = checks::carried_companions(&sources, options)?;
    log::debug!("merge: inputs checked in {:?}", started.elapsed());

    let shard_rows = options.shard_rows.or_else(|| inputs_shard_rows(&sources));
    let mut staged = StagedPack::create(&options.output, options.overwrite, shard_rows)?;
    for s in &sources {
        let conn = s.conn.lock().unwrap_or_else(|e| e.into_inner());
        crate::pack::versions::record_source(staged.db(), &s.path, &conn, None)?;
    }
    let mut summary = stage::write_merged(&sources, &valuations, &carried, &mut staged, options)?;
    log::debug!("merge: staged in {:?}", started.elapsed());
    staged.publish(&valuations)?;
    log::debug!("merge: published in {:?}", started.elapsed());

    if options.delete_inputs {
        summary.deleted = delete_inputs(&sources, &carried, &options.output, &verify_options)?;
    }
    Ok(summary)
}

/// The output's shard size when none is given: the inputs' when every input has shards (the
/// largest, if they differ), so a merge of sharded packs stays sharded.
fn inputs_shard_rows(sources: &[Source]) -> Option<u64> {
    let sizes: Option<Vec<u64>> = sources
        .iter()
        .map(|s| {
            s.session
                .iter()
                .find(|(k, _)| k == "shard_rows")
                .and_then(|(_, v)| v.parse::<u64>().ok())
                .filter(|&n| n > 0)
        })
        .collect();
    let largest = sizes?.into_iter().max()?;
    log::info!("shards of {largest} rows, as the inputs' (--shard-rows sets another size)");
    Some(largest)
}

/// The output's valuation table: the standard names, then every input's names in input order
/// (each input lists its names in first-appearance order, so this is first appearance overall).
fn unify_valuations(sources: &[Source]) -> Result<ValuationTable> {
    let mut table = ValuationTable::new();
    for s in sources {
        for name in s.valuations.names() {
            table
                .intern(name)
                .with_context(|| format!("merging the valuation names of {}", s.path.display()))?;
        }
    }
    Ok(table)
}

/// Deletes the inputs' pack files, but only after the published output re-validates with its
/// checksums.
fn delete_inputs(
    sources: &[Source],
    carried: &[String],
    output: &Path,
    options: &verify::Options,
) -> Result<Vec<Deleted>> {
    let report = verify::check(
        output,
        &verify::Options {
            legacy_ok: false,
            scan_rows: true,
            ..options.clone()
        },
    )?;
    if !report.valid() || !report.has_checksums() {
        bail!(
            "the merged pack in {} did not re-validate; no input was deleted:\n{}",
            output.display(),
            report.failures()
        );
    }
    let mut deleted = Vec::new();
    for s in sources {
        let mut files = 0;
        let mut bytes = 0;
        let mut names: Vec<String> = std::fs::read_dir(&s.path)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| is_pack_file(n))
            .collect();
        // Its companion files went into the output with its rows (the output re-validated).
        for name in carried {
            let family = s.companions.family(name).expect("every input has it");
            names.extend(family.files.iter().map(|f| f.file_name.clone()));
        }
        names.sort();
        for name in names {
            let p = s.path.join(&name);
            bytes += std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            std::fs::remove_file(&p).with_context(|| format!("deleting {}", p.display()))?;
            files += 1;
        }
        let _ = std::fs::remove_dir(&s.path); // only if nothing else is left in it
        deleted.push(Deleted {
            path: s.path.clone(),
            files,
            bytes,
        });
    }
    Ok(deleted)
}
