//! Merging packs into one: what `merge` does, as a library call. The story: refuse unsafe
//! requests up front, check every input (structure and metadata; the full row pass for inputs
//! without recorded checksums), unify valuation names, choose the companion families to carry,
//! assign output run ids (duplicates kept as findings or left out), stream every input's rows
//! in chunks (one thread reads, verifies the recorded checksums and rewrites run and valuation
//! ids in place, converting legacy 46-byte rows; the other writes), write metadata for the
//! renumbered runs, publish atomically, and only then, if asked and the published output
//! re-validates, delete the inputs.
//!
//! [`merge`] takes the inputs, the output and [`MergeOptions`], and returns a
//! [`MergeSummary`] for the caller to print.

mod checks;
mod copy;
mod plan;
mod record;
mod source;
mod stage;

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{Context, Result, err};
use crate::format::valuation::ValuationTable;
use crate::pack::StagedPack;
use crate::pack::files::is_pack_file;
use crate::pack::remote_output::{Target, Uploaded};
use crate::progress::Observer;
use crate::verify;
use source::Source;

/// How to merge: [`merge`]'s options. `MergeOptions::default()` is what `dataset-packer merge`
/// does without flags, so the library and the command write the same bytes.
///
/// ```
/// use dataset_packer::MergeOptions;
///
/// let options = MergeOptions::default().shard_rows(1_000_000).dedupe(true).workers(2);
/// assert_eq!(options.shard_rows, Some(1_000_000));
/// assert!(options.dedupe && !options.overwrite && !options.delete_inputs);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MergeOptions {
    /// Rows per output shard; `None` (the default): the inputs' shard size when every input
    /// has shards (the largest if they differ), else one `steps.npy`.
    pub shard_rows: Option<u64>,
    /// Replace a pack already in the output folder, with the companion families its
    /// `metadata.db` records; the old one stays until the new one is complete. Default: no
    /// (an existing pack is refused).
    pub overwrite: bool,
    /// Delete the input packs' files once the output is published and re-validated. Default:
    /// no.
    pub delete_inputs: bool,
    /// Leave out runs whose content equals an earlier run's (in output order). Default: no
    /// (they are kept and reported as `duplicate_run` findings).
    pub dedupe: bool,
    /// Companion families left out of the output. Default: none (a family missing from some
    /// input, or of another dtype or shape there, is an error).
    pub drop_companion: Vec<String>,
    /// Threads for validating the inputs. Default: all cores.
    pub workers: usize,
    /// Where progress is reported. Default: nowhere.
    pub progress: Observer,
    /// The command line the output's `session` and `versions` tables record. Default: this
    /// process's arguments, quoted for a POSIX shell.
    pub command_line: String,
}

impl Default for MergeOptions {
    fn default() -> MergeOptions {
        MergeOptions {
            shard_rows: None,
            overwrite: false,
            delete_inputs: false,
            dedupe: false,
            drop_companion: Vec::new(),
            workers: crate::default_workers(),
            progress: Observer::default(),
            command_line: crate::pack::query::process_command_line(),
        }
    }
}

impl MergeOptions {
    /// Rows per output shard.
    pub fn shard_rows(mut self, rows: u64) -> MergeOptions {
        self.shard_rows = Some(rows);
        self
    }

    /// Whether to replace a pack already in the output folder.
    pub fn overwrite(mut self, yes: bool) -> MergeOptions {
        self.overwrite = yes;
        self
    }

    /// Whether to delete the inputs' files once the output is published and re-validated.
    pub fn delete_inputs(mut self, yes: bool) -> MergeOptions {
        self.delete_inputs = yes;
        self
    }

    /// Whether to leave out runs whose content equals an earlier run's.
    pub fn dedupe(mut self, yes: bool) -> MergeOptions {
        self.dedupe = yes;
        self
    }

    /// Leaves the companion family `name` out of the output (call once per family).
    pub fn drop_companion(mut self, name: impl Into<String>) -> MergeOptions {
        self.drop_companion.push(name.into());
        self
    }

    /// Threads for validating the inputs (at least 1).
    pub fn workers(mut self, workers: usize) -> MergeOptions {
        self.workers = workers.max(1);
        self
    }

    /// Reports progress to `observer`.
    pub fn progress(mut self, observer: Observer) -> MergeOptions {
        self.progress = observer;
        self
    }

    /// The command line the output records.
    pub fn command_line(mut self, line: impl Into<String>) -> MergeOptions {
        self.command_line = line.into();
        self
    }
}

/// What a merge wrote.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MergeSummary {
    /// Each input's part of the output, in input order.
    pub inputs: Vec<MergedInput>,
    /// Runs in the output.
    pub runs: u64,
    /// Rows in the output.
    pub rows: u64,
    /// Shard files written.
    pub shards: usize,
    /// Bytes of shard files written.
    pub bytes: u64,
    /// Duplicate runs kept (reported as `duplicate_run` findings).
    pub duplicates: u64,
    /// Runs left out with [`MergeOptions::dedupe`]: (source, reason).
    pub left_out: Vec<(String, String)>,
    /// Companion families carried: name and dtype.
    pub companions: Vec<(String, String)>,
    /// When an input was a legacy pack: rows whose `ev_legal` the upgrade changed.
    pub upgraded: Option<u64>,
    /// The inputs deleted (with [`MergeOptions::delete_inputs`]), in input order.
    pub deleted: Vec<DeletedInput>,
    /// For an output in object storage (`s3://…`): where it was published and what was
    /// uploaded.
    pub uploaded: Option<Uploaded>,
}

/// One input's part of a merge's output.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MergedInput {
    /// The input pack, as given.
    pub path: PathBuf,
    /// Its runs.
    pub runs: usize,
    /// Its rows.
    pub rows: u64,
    /// Output ids of its first and last run carried (`None`: none carried).
    pub ids: Option<(u32, u32)>,
    /// Its runs left out as duplicates.
    pub left_out: usize,
}

/// An input whose pack files a merge deleted.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DeletedInput {
    /// The input pack, as given.
    pub path: PathBuf,
    /// Files deleted.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// Merges the packs `inputs` (in order: runs are renumbered in this order) into a new pack at
/// `output` (a folder, or a URL in object storage: `s3://bucket/prefix`), published
/// atomically: nothing is written when an input is refused.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// # let (a, dir) = (fixture.path().to_path_buf(), dataset_packer::pack::doc_support::temp_dir());
/// use dataset_packer::{ErrorKind, MergeOptions, Pack, merge};
///
/// let merged = dir.join("merged");
/// let summary = merge(&[a.clone(), a.clone()], &merged, &MergeOptions::default());
/// // The same pack twice is refused before anything is written.
/// assert_eq!(summary.unwrap_err().kind(), ErrorKind::Refused);
///
/// // Any list of paths will do: `&[&str]`, `Vec<String>`, `&[PathBuf]`.
/// let names: Vec<String> = vec![a.display().to_string()];
/// assert_eq!(merge(&names, dir.join("one"), &MergeOptions::default())?.rows, Pack::open(&a)?.len());
/// # let b = dir.join("copy");
/// # std::fs::create_dir_all(&b)?;
/// # for e in std::fs::read_dir(&a)? { let e = e?; std::fs::copy(e.path(), b.join(e.file_name()))?; }
/// let summary = merge(&[a, b], &merged, &MergeOptions::default().dedupe(true))?;
/// // The copy's runs are duplicates of the first input's, and left out.
/// assert_eq!(summary.inputs[1].left_out, summary.inputs[1].runs);
/// assert_eq!(Pack::open(&merged)?.len(), summary.rows);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
pub fn merge(
    inputs: &[impl AsRef<Path>],
    output: impl AsRef<Path>,
    options: &MergeOptions,
) -> Result<MergeSummary> {
    let inputs: Vec<PathBuf> = inputs.iter().map(|p| p.as_ref().to_path_buf()).collect();
    let inputs = &inputs[..];
    let output = output.as_ref();
    let started = Instant::now();
    if inputs.is_empty() {
        return Err(err!(
            Refused,
            "no input packs to merge into {}",
            output.display()
        ));
    }
    let target = Target::of(output, options.overwrite, None)?;
    for input in inputs {
        target.refuse_input(input)?;
    }
    if let Some(url) = target.url()
        && options.delete_inputs
    {
        return Err(err!(
            Refused,
            "the inputs are deleted only once the output re-validates in place, and {url} is \
             in object storage; validate it there, then delete the inputs yourself"
        )
        .with_option("delete_inputs"));
    }
    let output = &target.dir().to_path_buf();
    checks::refuse_unsafe(inputs, output, options.delete_inputs)?;
    let verify_options = verify::Options {
        deep: false,
        workers: options.workers,
        progress: options.progress.clone(),
        legacy_ok: true,
        scan_rows: false,
    };
    let sources: Vec<Source> = inputs
        .iter()
        .map(|p| Source::open(p, &verify_options))
        .collect::<Result<_>>()?;
    let valuations = unify_valuations(&sources)?;
    let carried = checks::carried_companions(&sources, options)?;
    log::debug!("merge: inputs checked in {:?}", started.elapsed());

    let shard_rows = options.shard_rows.or_else(|| inputs_shard_rows(&sources));
    let mut staged = StagedPack::create(output, options.overwrite, shard_rows)?;
    for s in &sources {
        let conn = s.conn.lock().unwrap_or_else(|e| e.into_inner());
        crate::pack::versions::record_source(staged.db(), &s.path, &conn, None)?;
    }
    let mut summary = stage::write_merged(&sources, &valuations, &carried, &mut staged, options)?;
    log::debug!("merge: staged in {:?}", started.elapsed());
    staged.publish(&valuations)?;
    summary.uploaded = target.publish()?;
    log::debug!("merge: published in {:?}", started.elapsed());

    if options.delete_inputs {
        summary.deleted = delete_inputs(&sources, &carried, output, &verify_options)?;
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
    log::info!(
        "shards of {largest} rows, as the inputs' (the shard_rows option sets another size)"
    );
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
) -> Result<Vec<DeletedInput>> {
    let report = verify::check(
        output,
        &verify::Options {
            legacy_ok: false,
            scan_rows: true,
            ..options.clone()
        },
    )?;
    if !report.valid() || !report.has_checksums() {
        return Err(err!(
            Corrupt,
            "the merged pack in {} did not re-validate; no input was deleted:\n{}",
            output.display(),
            report.failures()
        ));
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
        deleted.push(DeletedInput {
            path: s.path.clone(),
            files,
            bytes,
        });
    }
    Ok(deleted)
}
