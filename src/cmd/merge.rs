//! `merge`: packs → one pack. The story: refuse unsafe requests up front, check every input
//! (structure and metadata; the full row pass for inputs without recorded checksums), unify
//! valuation names, stream every input's rows in chunks (one thread reads, verifies the recorded
//! checksums and rewrites run and valuation ids in place, converting legacy 46-byte rows; the
//! other writes), write metadata for the renumbered runs, publish atomically, and only then, if
//! asked and the published output re-validates, delete the inputs.

use std::path::{Path, PathBuf};
use std::time::Instant;

use std::sync::mpsc;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::json;

use crate::UsageError;
use crate::cmd::validate;
use crate::findings::{DUPLICATE_RUN, Duplicates, RowFindings, Tally, duplicate_detail};
use crate::format::fingerprint::Fingerprint;
use crate::format::metadata::{
    self, CompanionRecord, FindingRecord, MetadataWriter, PackFacts, RowLocation, RunDetails,
    RunRecord, RunRow,
};
use crate::format::row::{
    ROW_BYTES, StepRow, legacy_rows_to_aligned, recompute_ev_legal, remap_rows,
};
use crate::format::valuation::ValuationTable;
use crate::pack::families::{self, Family, Scan};
use crate::pack::files::is_pack_file;
use crate::pack::fingerprints;
use crate::pack::publish::{OutputDir, list_names, write_valuations};
use crate::pack::run_index::RunStarts;
use crate::pack::shard_writer::{FileLayout, ShardWriter};
use crate::pack::shards::{self, RunSlots, Shard};
use crate::progress::{self, count, thousands};

/// Rows copied per read (≈ 1 MiB: a chunk stays in cache from read to write).
const COPY_ROWS: usize = 21_845;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer merge packs/d6 packs/d7 --output packs/d6d7
  dataset-packer merge part-0 part-1 part-2 --output packs/all --shard-rows 10000000
  dataset-packer merge old new --output merged --overwrite --delete-inputs
  dataset-packer merge packs/a packs/b --output packs/ab --dedupe

The input packs are positional, like every command's; the older spellings --left A --right B
and --input A --input B … still work and mean the same.

Legacy 46-byte inputs (the reference packer's, 2048former) are upgraded: 48-byte rows, run
index, fingerprints, and ev_legal recomputed from the board (the rows it changes are counted).

Runs are renumbered in input order. A run with the same content (fingerprint) as an earlier
one is a duplicate: reported as a duplicate_run finding, or left out with --dedupe. Inputs must
be in run order: merge the unshuffled packs, then shuffle the result.

Companion arrays (NAME-NNNNN.npy aligned with the shards, e.g. embeddings) present in every
input with one dtype and shape are carried, their rows in the output's row order.
--delete-inputs deletes an input's companion files with its shards, once they are in the
verified output; it refuses an input holding a *.npy file it cannot account for.")]
pub struct MergeArgs {
    /// The input packs, in order (runs are renumbered in this order).
    #[arg(value_name = "PACK", conflicts_with_all = ["left", "inputs"])]
    pub packs: Vec<PathBuf>,
    /// First input pack, with --right (an alias: `merge A B` is the same).
    #[arg(
        long,
        value_name = "PACK",
        requires = "right",
        conflicts_with = "inputs"
    )]
    pub left: Option<PathBuf>,
    /// Second input pack, with --left (an alias: `merge A B` is the same).
    #[arg(long, value_name = "PACK", requires = "left")]
    pub right: Option<PathBuf>,
    /// An input pack, repeated for each (an alias: `merge A B C` is the same).
    #[arg(long = "input", value_name = "PACK")]
    pub inputs: Vec<PathBuf>,
    /// Folder to write the merged pack into.
    #[arg(long, value_name = "PACK_DIR")]
    pub output: PathBuf,
    /// Rows per output shard, e.g. 10M (k, M, G = 10^3, 10^6, 10^9) [default: the inputs'
    /// shard size when every input has shards (the largest if they differ), else one
    /// steps.npy].
    #[arg(long, value_name = "N", value_parser = crate::cli::parse_rows)]
    pub shard_rows: Option<u64>,
    /// Replace a pack already in the output folder.
    #[arg(long)]
    pub overwrite: bool,
    /// Delete the input packs' files once the output is published and re-validated.
    #[arg(long)]
    pub delete_inputs: bool,
    /// Leave out runs whose content equals an earlier run's (in output order), so overlapping
    /// packs merge into what a pack of their union would be; they are listed in skipped_runs.
    #[arg(long)]
    pub dedupe: bool,
    /// Leave the companion array family NAME out of the output (repeatable); without it a
    /// family missing from some input, or of another dtype or shape there, is an error.
    #[arg(long = "drop-companion", value_name = "NAME")]
    pub drop_companion: Vec<String>,
    /// Threads for validating inputs [default: all cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: Option<u64>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

impl MergeArgs {
    fn input_list(&self) -> Result<Vec<PathBuf>> {
        let list: Vec<PathBuf> = match (&self.left, &self.right) {
            (Some(l), Some(r)) => vec![l.clone(), r.clone()],
            _ if !self.packs.is_empty() => self.packs.clone(),
            _ => self.inputs.clone(),
        };
        if list.is_empty() {
            return Err(UsageError(
                "name the input packs: `merge A B … --output M` (or --left A --right B, or --input A --input B …)".into(),
            )
            .into());
        }
        Ok(list)
    }
}

/// One input pack, validated and read.
struct Source {
    path: PathBuf,
    shards: Vec<Shard>,
    runs: Vec<RunRow>,
    details: std::collections::HashMap<i64, RunDetails>,
    valuations: ValuationTable,
    session: Vec<(String, String)>,
    /// Its metadata.db (in a Mutex only so the reading thread can share the Source).
    conn: std::sync::Mutex<rusqlite::Connection>,
    /// Each run's fingerprint, in `runs` order (recorded, or computed from the rows).
    fingerprints: Vec<Fingerprint>,
    /// Its companion arrays, and the checksums it recorded for them.
    companions: Scan,
    companion_records: Vec<CompanionRecord>,
    /// The shard checksums the input recorded, verified while copying.
    recorded: Option<Vec<metadata::ShardRecord>>,
}

impl Source {
    /// Validates an input before anything is written. An input that records shard checksums
    /// gets the structure and metadata checks here and its CRCs verified while it is copied
    /// (so it is read once); one without checksums (an older tool's) gets the full row pass.
    fn open(path: &Path, options: &validate::Options) -> Result<Source> {
        let db = metadata::open_read_only(&path.join(metadata::FILE_NAME)).ok();
        let shuffled = db
            .as_ref()
            .and_then(|c| metadata::session_value(c, "shuffled").ok());
        if shuffled.flatten().as_deref() == Some("true") {
            return Err(UsageError(format!(
                "input {} is a shuffled pack; merge combines packs in run order: merge the unshuffled packs first, then shuffle the result",
                path.display()
            ))
            .into());
        }
        let recorded = db.and_then(|c| metadata::read_shard_records(&c).ok().flatten());
        let options = validate::Options {
            scan_rows: recorded.is_none(),
            ..*options
        };
        let report = validate::check(path, &options)?;
        if !report.valid() {
            bail!(
                "input {} is not a valid pack; nothing was written:\n{}",
                path.display(),
                report.failures()
            );
        }
        let conn = metadata::open_read_only(&path.join(metadata::FILE_NAME))?;
        let session = metadata::read_session(&conn)?;
        let shards = shards::open_shards(path, true)?;
        let runs = metadata::read_runs(&conn)?;
        let details = metadata::read_run_details(&conn)?;
        let valuations = shards::read_valuations(path)?;
        let (fingerprints, _) =
            fingerprints::of_pack(path, &shards, &runs, &details, &valuations, options.workers)?;
        let companions = families::scan(path, &shards)?;
        let companion_records = metadata::read_companions(&conn)?;
        Ok(Source {
            path: path.to_path_buf(),
            shards,
            runs,
            details,
            valuations,
            session,
            conn: std::sync::Mutex::new(conn),
            fingerprints,
            companions,
            companion_records,
            recorded,
        })
    }

    fn rows(&self) -> u64 {
        self.shards.iter().map(|s| s.header.rows).sum()
    }

    /// How messages name one of its runs: the pack and the run's source file, or its id.
    fn describe_run(&self, slot: usize) -> String {
        let run = &self.runs[slot];
        match self
            .details
            .get(&run.id)
            .and_then(|d| d.source_path.as_deref())
        {
            Some(p) => format!("{} of {}", p, self.path.display()),
            None => format!("run {} of {}", run.id, self.path.display()),
        }
    }
}

pub fn run(args: &MergeArgs) -> Result<()> {
    let started = Instant::now();
    let inputs = args.input_list()?;
    refuse_unsafe(&inputs, &args.output, args.delete_inputs)?;
    let options = validate::Options {
        deep: false,
        workers: args
            .workers
            .map_or_else(crate::default_workers, |w| w as usize),
        quiet: args.quiet,
        legacy_ok: true,
        scan_rows: false,
    };
    let sources: Vec<Source> = inputs
        .iter()
        .map(|p| Source::open(p, &options))
        .collect::<Result<_>>()?;
    let valuations = unify_valuations(&sources)?;
    let carried = carried_companions(&sources, args)?;
    log::debug!("merge: inputs checked in {:?}", started.elapsed());

    let shard_rows = args.shard_rows.or_else(|| inputs_shard_rows(&sources));
    let out = OutputDir::open(&args.output, args.overwrite)?;
    let staging = out.begin_staging()?;
    let summary = write_merged(&sources, &valuations, &carried, shard_rows, &staging, args)?;
    log::debug!("merge: staged in {:?}", started.elapsed());
    out.publish()?;
    log::debug!("merge: published in {:?}", started.elapsed());

    let deleted = if args.delete_inputs {
        delete_inputs(&sources, &carried, &args.output, &options)?
    } else {
        Vec::new()
    };
    summary.print(args, &deleted, started.elapsed().as_secs_f64());
    Ok(())
}

/// The output's shard size when --shard-rows is not given: the inputs' when every input has
/// shards (the largest, if they differ), so a merge of sharded packs stays sharded.
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

/// The companion families the output carries: those every input has, alike, unless dropped.
/// A family that does not line up in an input is an error (unless dropped); with
/// --delete-inputs, so is an input holding `*.npy` files this tool cannot account for, or a
/// family dropped (its files would be orphaned).
fn carried_companions(sources: &[Source], args: &MergeArgs) -> Result<Vec<String>> {
    for src in sources {
        for (name, problem) in &src.companions.problems {
            if !args.drop_companion.contains(name) || args.delete_inputs {
                bail!(
                    "input {}: companion {name} does not line up with its shards: {problem}{}",
                    src.path.display(),
                    if args.delete_inputs {
                        String::new()
                    } else {
                        format!(" (pass --drop-companion {name} to leave it out)")
                    }
                );
            }
        }
        if args.delete_inputs {
            if !src.companions.unaccounted.is_empty() {
                return Err(UsageError(format!(
                    "--delete-inputs: input {} holds {}, which is neither a shard nor a companion array; move it away first (nothing was written)",
                    src.path.display(),
                    list_names(&src.companions.unaccounted)
                ))
                .into());
            }
            if let Some(f) = src
                .companions
                .families
                .iter()
                .find(|f| args.drop_companion.contains(&f.name))
            {
                return Err(UsageError(format!(
                    "--delete-inputs would orphan {}'s companion {} (--drop-companion leaves it out of the output); nothing was written",
                    src.path.display(),
                    f.name
                ))
                .into());
            }
        }
    }
    let scans: Vec<(&Path, &Scan)> = sources
        .iter()
        .map(|s| (s.path.as_path(), &s.companions))
        .collect();
    families::common_families(&scans, &args.drop_companion)
}

/// Duplicate inputs, an output that is an input, and (with --delete-inputs) an output inside or
/// around an input are refused before anything is read.
fn refuse_unsafe(inputs: &[PathBuf], output: &Path, delete: bool) -> Result<()> {
    let canon = |p: &Path| {
        shards::check_is_pack(p).with_context(|| format!("input {}", p.display()))?;
        std::fs::canonicalize(p).with_context(|| format!("input {}", p.display()))
    };
    let canon_inputs: Vec<PathBuf> = inputs.iter().map(|p| canon(p)).collect::<Result<_>>()?;
    for (i, a) in canon_inputs.iter().enumerate() {
        if canon_inputs[..i].contains(a) {
            return Err(UsageError(format!(
                "{} is given twice as an input",
                inputs[i].display()
            ))
            .into());
        }
    }
    // The output may not exist yet: resolve its nearest existing ancestor.
    let out = resolve_maybe_missing(output)?;
    for (given, input) in inputs.iter().zip(&canon_inputs) {
        if &out == input {
            return Err(
                UsageError(format!("the output {} is also an input", output.display())).into(),
            );
        }
        if delete && out.starts_with(input) {
            return Err(UsageError(format!(
                "--delete-inputs: the output {} is inside the input {}",
                output.display(),
                given.display()
            ))
            .into());
        }
        if delete && input.starts_with(&out) {
            return Err(UsageError(format!(
                "--delete-inputs: the output {} contains the input {}",
                output.display(),
                given.display()
            ))
            .into());
        }
    }
    Ok(())
}

fn resolve_maybe_missing(path: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    let mut existing = abs.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        rest.push(
            existing
                .file_name()
                .context("no existing ancestor")?
                .to_owned(),
        );
        existing = existing.parent().context("no existing ancestor")?;
    }
    let mut out = std::fs::canonicalize(existing)?;
    for part in rest.into_iter().rev() {
        out.push(part);
    }
    Ok(out)
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

/// Compares the CRC of a shard just copied with the one its pack recorded (when it did).
fn verify_checksum(src: &Source, index: usize, data_crc: u32) -> Result<()> {
    let Some(record) = src.recorded.as_ref().and_then(|r| r.get(index)) else {
        return Ok(());
    };
    let shard = &src.shards[index];
    let data_len = (shard.header.rows * shard.row_bytes() as u64) as usize;
    let crc = shard.file_crc(data_crc, data_len)?;
    if crc != record.crc32c {
        bail!(
            "input {}: {} does not match its recorded checksum (crc32c recorded {:08x}, computed {crc:08x}); nothing was written",
            src.path.display(),
            shard.name,
            record.crc32c
        );
    }
    Ok(())
}

/// Per-input id maps: input valuation id → output id (None when identical).
fn valuation_map(from: &ValuationTable, to: &ValuationTable) -> Option<[u8; 256]> {
    let mut map = [0u8; 256];
    let mut identity = true;
    for (id, name) in from.names().iter().enumerate() {
        map[id] = to.id(name).expect("every name was unified");
        identity &= map[id] as usize == id;
    }
    (!identity).then_some(map)
}

struct Summary {
    inputs: Vec<InputSummary>,
    runs: u64,
    rows: u64,
    shards: usize,
    bytes: u64,
    /// Duplicate runs kept (reported as findings) and left out (--dedupe).
    duplicates: u64,
    left_out: Vec<(String, String)>,
    /// Companion families carried: name and dtype.
    companions: Vec<(String, String)>,
    /// When an input was a legacy pack: rows whose `ev_legal` the upgrade changed.
    upgraded: Option<u64>,
}

/// One input's part of the output.
struct InputSummary {
    path: PathBuf,
    runs: usize,
    rows: u64,
    /// Output ids of its first and last run carried.
    ids: Option<(u32, u32)>,
    left_out: usize,
}

/// What becomes of every input run: its output id (None: left out as a duplicate), decided
/// over all inputs in output order before anything is copied.
struct Assignment {
    /// Per input, per run slot.
    out_ids: Vec<Vec<Option<u32>>>,
    /// `duplicate_run` findings of the duplicates kept.
    duplicates: Tally,
    /// Runs left out with --dedupe: (source, reason).
    left_out: Vec<(String, String)>,
    runs: u64,
}

fn assign_runs(sources: &[Source], dedupe: bool) -> Result<Assignment> {
    let mut seen = Duplicates::default();
    let mut a = Assignment {
        out_ids: Vec::with_capacity(sources.len()),
        duplicates: Tally::default(),
        left_out: Vec::new(),
        runs: 0,
    };
    for src in sources {
        let mut ids = Vec::with_capacity(src.runs.len());
        for (slot, fp) in src.fingerprints.iter().enumerate() {
            let next = u32::try_from(a.runs).context("more than 2^32 runs")?;
            let name = src.describe_run(slot);
            let Some(kept) = seen.get(fp).cloned() else {
                seen.insert(*fp, (next, name));
                ids.push(Some(next));
                a.runs += 1;
                continue;
            };
            let detail = duplicate_detail(&kept, fp);
            if dedupe {
                a.left_out.push((name, format!("duplicate: {detail}")));
                ids.push(None);
                continue;
            }
            let example = FindingRecord {
                kind: DUPLICATE_RUN.into(),
                run_id: Some(next),
                source_path: name,
                line: None,
                step_index: None,
                detail,
            };
            a.duplicates.add(DUPLICATE_RUN, 1, [example]);
            ids.push(Some(next));
            a.runs += 1;
        }
        a.out_ids.push(ids);
    }
    Ok(a)
}

/// How one input's rows are rewritten: run ids to their output numbers (rows of runs left out
/// dropped), valuation ids re-coded; `identity` when nothing changes (usually the first input),
/// so its rows are written as read and the CRC computed to verify them is also the output's.
struct Plan<'a> {
    src: &'a Source,
    slots: RunSlots,
    /// Output id per run slot; None for a run left out.
    out_ids: &'a [Option<u32>],
    drops: bool,
    valuations: Option<[u8; 256]>,
    identity: bool,
    /// The input's companion families the output carries, in the output's order.
    families: Vec<&'a Family>,
}

impl<'a> Plan<'a> {
    fn new(
        src: &'a Source,
        out_ids: &'a [Option<u32>],
        valuations: &ValuationTable,
        carried: &[String],
    ) -> Plan<'a> {
        let old_ids: Vec<u32> = src.runs.iter().map(|r| r.id as u32).collect();
        let vmap = valuation_map(&src.valuations, valuations);
        let identity = vmap.is_none()
            && old_ids
                .iter()
                .zip(out_ids)
                .enumerate()
                .all(|(i, (&id, out))| id as usize == i && *out == Some(id));
        Plan {
            src,
            slots: RunSlots::new(&old_ids),
            out_ids,
            drops: out_ids.iter().any(Option::is_none),
            valuations: vmap,
            identity,
            families: carried
                .iter()
                .map(|name| src.companions.family(name).expect("every input has it"))
                .collect(),
        }
    }

    /// The output id of input run `old`: None when the input does not list it, Some(None)
    /// when it is left out.
    fn output_id(&self, old: u32) -> Option<Option<u32>> {
        self.slots.get(old).map(|slot| self.out_ids[slot as usize])
    }

    /// The output ids of the runs carried, in order.
    fn carried(&self) -> Vec<u32> {
        self.out_ids.iter().flatten().copied().collect()
    }

    fn run_count(&self) -> u32 {
        self.src.runs.len() as u32
    }
}

/// Output rows of the steps (48-byte) and of each carried companion family, with CRC-32Cs.
#[derive(Default)]
struct Chunk {
    rows: Vec<u8>,
    crc: u32,
    companions: Vec<(Vec<u8>, u32)>,
}

/// What the reading thread hands the writing thread, in output order.
enum Piece {
    Rows(Chunk),
    /// Every row of input `index` has been handed over; `starts` saw them go by, `dropped`
    /// counted the findings of the rows left out.
    InputDone {
        index: usize,
        starts: RunStarts,
        dropped: RowFindings,
    },
}

/// Chunks in flight between the threads (each ≈ 1 MiB).
const PIECES_IN_FLIGHT: usize = 3;

/// Copies every input into the staging folder and writes the metadata. Two threads share the
/// work: one reads the inputs a chunk at a time (checksumming them against the recorded CRCs,
/// rewriting ids, checksumming what comes out), the other writes; rows stay in input order.
fn write_merged(
    sources: &[Source],
    valuations: &ValuationTable,
    carried: &[String],
    shard_rows: Option<u64>,
    staging: &Path,
    args: &MergeArgs,
) -> Result<Summary> {
    let copy_started = Instant::now();
    let assignment = assign_runs(sources, args.dedupe)?;
    let total_rows: u64 = sources.iter().map(Source::rows).sum();
    let mut writer = ShardWriter::new(staging, shard_rows);
    writer.expect_rows(total_rows);
    let layouts: Vec<FileLayout> = carried
        .iter()
        .map(|name| {
            sources[0]
                .companions
                .family(name)
                .expect("carried")
                .layout()
        })
        .collect();
    let mut companion_writers: Vec<ShardWriter> = layouts
        .iter()
        .map(|layout| {
            let mut w = ShardWriter::with_layout(staging, shard_rows, layout.clone());
            w.expect_rows(total_rows);
            w
        })
        .collect();
    let db = MetadataWriter::create(&staging.join(metadata::FILE_NAME))?;
    let plans: Vec<Plan> = sources
        .iter()
        .zip(&assignment.out_ids)
        .map(|(src, ids)| Plan::new(src, ids, valuations, carried))
        .collect();

    let (pieces_tx, pieces) = mpsc::sync_channel(PIECES_IN_FLIGHT);
    let (spare_tx, spare) = mpsc::channel();
    let ev_legal_changed = std::thread::scope(|scope| {
        let plans = &plans;
        let reader = scope.spawn(move || read_inputs(plans, pieces_tx, &spare));
        let mut writers = Writers {
            steps: &mut writer,
            companions: &mut companion_writers,
        };
        let written = write_pieces(pieces, spare_tx, plans, &mut writers, &db, args.quiet);
        let read = reader.join().expect("the reading thread does not panic");
        // A reading error explains a writing one (the writer stops when the reader does).
        let changed = read?;
        written.map(|()| changed)
    })?;
    let legacy = sources
        .iter()
        .any(|s| s.shards.iter().any(Shard::is_legacy));

    let rows_written = writer.total_rows();
    let shards = writer.finish()?;
    for (layout, w) in layouts.iter().zip(companion_writers) {
        for record in families::records(layout, &w.finish()?) {
            db.insert_companion(&record)?;
        }
    }
    log::debug!(
        "merge: rows copied and synced in {:?}",
        copy_started.elapsed()
    );
    for shard in &shards {
        db.insert_shard(shard)?;
    }
    for (kind, n) in &assignment.duplicates.counts {
        db.add_finding_count(kind, *n as i64)?;
    }
    for example in &assignment.duplicates.examples {
        db.insert_finding(example)?;
    }
    for (source, reason) in &assignment.left_out {
        db.insert_skipped(source, reason)?;
    }
    db.drop_empty_finding_counts()?;
    if legacy {
        db.set_session(
            metadata::LEGACY_EV_LEGAL_CHANGED,
            &ev_legal_changed.to_string(),
        )?;
    }
    write_session(
        &db,
        sources,
        shard_rows,
        rows_written,
        assignment.runs,
        shards.len(),
    )?;
    db.finish()?;
    write_valuations(staging, valuations)?;
    Ok(Summary {
        inputs: sources
            .iter()
            .zip(&assignment.out_ids)
            .map(|(s, ids)| {
                let carried = || ids.iter().flatten().copied();
                InputSummary {
                    path: s.path.clone(),
                    runs: s.runs.len(),
                    rows: s.rows(),
                    ids: carried().min().zip(carried().max()),
                    left_out: ids.iter().filter(|id| id.is_none()).count(),
                }
            })
            .collect(),
        runs: assignment.runs,
        rows: rows_written,
        shards: shards.len(),
        bytes: shards.iter().map(|s| s.bytes).sum(),
        duplicates: assignment.duplicates.count(DUPLICATE_RUN),
        upgraded: legacy.then_some(ev_legal_changed),
        left_out: assignment.left_out,
        companions: layouts
            .iter()
            .map(|l| (l.prefix.clone(), families::describe(&l.descr, &l.trailing)))
            .collect(),
    })
}

/// The reading side: every input's rows in order (and its companion rows), as output rows with
/// their CRCs, and where each run starts. Stops early (with Ok) when the writing side has gone.
/// Returns how many rows of legacy inputs had their `ev_legal` changed by the upgrade.
fn read_inputs(
    plans: &[Plan],
    pieces: mpsc::SyncSender<Piece>,
    spare: &mpsc::Receiver<Chunk>,
) -> Result<u64> {
    let mut global_row = 0u64;
    let mut ev_legal_changed = 0u64;
    let mut keep = Vec::new();
    for (index, plan) in plans.iter().enumerate() {
        let src = plan.src;
        let mut starts = RunStarts::new(plan.carried());
        let mut dropped = RowFindings::new(src.runs.len(), true);
        for (si, shard) in src.shards.iter().enumerate() {
            let file = shard.open()?;
            let companion_files = plan
                .families
                .iter()
                .map(|f| f.open(si))
                .collect::<Result<Vec<_>>>()?;
            let mut data_crc = 0u32;
            let mut companion_crcs = vec![0u32; companion_files.len()];
            let mut done = 0u64;
            while done < shard.header.rows {
                let n_rows = (shard.header.rows - done).min(COPY_ROWS as u64);
                let next = done + n_rows;
                if next < shard.header.rows {
                    file.prefetch(next, (shard.header.rows - next).min(COPY_ROWS as u64));
                }
                let mut chunk = spare.try_recv().unwrap_or_default();
                file.read_raw_into(done, n_rows, &mut chunk.rows)?;
                let input_crc = crate::crc::crc32c(&chunk.rows);
                data_crc = crate::crc::combine(data_crc, input_crc, chunk.rows.len());
                chunk.crc = rewrite(
                    plan,
                    shard,
                    &mut chunk.rows,
                    input_crc,
                    &mut dropped,
                    &mut keep,
                    &mut ev_legal_changed,
                )?;
                chunk
                    .companions
                    .resize_with(companion_files.len(), Default::default);
                for (k, cf) in companion_files.iter().enumerate() {
                    let (buf, crc) = &mut chunk.companions[k];
                    cf.read_rows(done, n_rows, buf)?;
                    *crc = crate::crc::crc32c(buf);
                    companion_crcs[k] = crate::crc::combine(companion_crcs[k], *crc, buf.len());
                    if plan.drops {
                        families::keep_rows(buf, plan.families[k].row_bytes, &keep);
                        *crc = crate::crc::crc32c(buf);
                    }
                }
                starts.observe(&chunk.rows, global_row);
                global_row += (chunk.rows.len() / ROW_BYTES) as u64;
                if pieces.send(Piece::Rows(chunk)).is_err() {
                    return Ok(ev_legal_changed);
                }
                done = next;
            }
            verify_checksum(src, si, data_crc)?;
            for (cf, crc) in companion_files.iter().zip(companion_crcs) {
                verify_companion(src, cf, crc)?;
            }
        }
        let done = Piece::InputDone {
            index,
            starts,
            dropped,
        };
        if pieces.send(done).is_err() {
            return Ok(ev_legal_changed);
        }
    }
    Ok(ev_legal_changed)
}

/// Compares a companion file just read with the CRC its pack recorded (when it did).
fn verify_companion(src: &Source, cf: &families::OpenCompanion, data_crc: u32) -> Result<()> {
    let Some(record) = src
        .companion_records
        .iter()
        .find(|r| r.file_name == cf.file.file_name)
    else {
        return Ok(());
    };
    let crc = cf.file_crc(data_crc)?;
    if crc != record.crc32c {
        bail!(
            "input {}: {} does not match its recorded checksum (crc32c recorded {:08x}, computed {crc:08x}); nothing was written",
            src.path.display(),
            cf.file.file_name,
            record.crc32c
        );
    }
    Ok(())
}

/// Turns one chunk of an input (as read from its file, with its CRC) into output rows in
/// place, and returns their CRC: legacy rows converted (their `ev_legal` recomputed from the
/// board, the rows it changes counted in `ev_legal_changed`), run and valuation ids rewritten and
/// rows of runs left out dropped (their findings counted in `dropped`, and `keep` saying which
/// rows stayed), unless the plan changes nothing (then the CRC is the input's).
fn rewrite(
    plan: &Plan,
    shard: &Shard,
    rows: &mut Vec<u8>,
    input_crc: u32,
    dropped: &mut RowFindings,
    keep: &mut Vec<bool>,
    ev_legal_changed: &mut u64,
) -> Result<u32> {
    let legacy = shard.is_legacy();
    if legacy {
        *rows = legacy_rows_to_aligned(rows);
        *ev_legal_changed += recompute_ev_legal(rows);
    }
    let mut unknown = None;
    if plan.identity {
        unknown = run_ids(rows).find(|&id| id >= plan.run_count());
    } else if plan.drops {
        unknown = drop_left_out(plan, rows, dropped, keep);
    } else {
        remap_rows(
            rows,
            |old| match plan.output_id(old) {
                Some(Some(new)) => new,
                _ => *unknown.get_or_insert(old),
            },
            plan.valuations.as_ref(),
        );
    }
    if let Some(id) = unknown {
        bail!(
            "input {}: {} holds rows of run {id}, which its runs table lacks; nothing was written",
            plan.src.path.display(),
            shard.name
        );
    }
    Ok(if plan.identity && !legacy {
        input_crc
    } else {
        crate::crc::crc32c(rows)
    })
}

/// Keeps the rows of carried runs (renumbered, valuation ids re-coded) and drops the others,
/// counting their findings and noting in `keep` which rows stayed; returns a run id the input
/// does not list, if a row has one.
fn drop_left_out(
    plan: &Plan,
    rows: &mut Vec<u8>,
    dropped: &mut RowFindings,
    keep: &mut Vec<bool>,
) -> Option<u32> {
    keep.clear();
    let mut kept = 0;
    for i in 0..rows.len() / ROW_BYTES {
        let at = i * ROW_BYTES;
        let old = u32::from_le_bytes(rows[at..at + 4].try_into().unwrap());
        let Some(slot) = plan.slots.get(old) else {
            return Some(old);
        };
        match plan.out_ids[slot as usize] {
            None => {
                dropped.observe(slot, &StepRow::from_bytes(&rows[at..at + ROW_BYTES]));
                keep.push(false);
            }
            Some(new) => {
                rows.copy_within(at..at + ROW_BYTES, kept);
                let row = &mut rows[kept..kept + ROW_BYTES];
                remap_rows(row, |_| new, plan.valuations.as_ref());
                kept += ROW_BYTES;
                keep.push(true);
            }
        }
    }
    rows.truncate(kept);
    None
}

/// The run ids of 48-byte rows.
fn run_ids(rows: &[u8]) -> impl Iterator<Item = u32> + '_ {
    rows.chunks_exact(ROW_BYTES)
        .map(|r| u32::from_le_bytes(r[..4].try_into().unwrap()))
}

/// Where the writing side puts rows: the steps and each carried companion family.
struct Writers<'a> {
    steps: &'a mut ShardWriter,
    companions: &'a mut [ShardWriter],
}

/// The writing side: rows into the shard writers, and each input's runs and findings into the
/// metadata once all its rows are written (their run-index positions are known then).
fn write_pieces(
    pieces: mpsc::Receiver<Piece>,
    spare: mpsc::Sender<Chunk>,
    plans: &[Plan],
    writers: &mut Writers,
    db: &MetadataWriter,
    quiet: bool,
) -> Result<()> {
    let total_rows: u64 = plans.iter().map(|p| p.src.rows()).sum();
    let bar = progress::rows_bar(total_rows, quiet, "merge");
    for piece in pieces {
        match piece {
            Piece::Rows(chunk) => {
                writers.steps.write_rows_with_crc(&chunk.rows, chunk.crc)?;
                for (w, (rows, crc)) in writers.companions.iter_mut().zip(&chunk.companions) {
                    w.write_rows_with_crc(rows, *crc)?;
                }
                bar.inc((chunk.rows.len() / ROW_BYTES) as u64);
                let _ = spare.send(chunk);
            }
            Piece::InputDone {
                index,
                starts,
                dropped,
            } => record_runs(db, &plans[index], &starts.finish(writers.steps), dropped)?,
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// An input's carried runs (renumbered, with their source and fingerprint recorded) and
/// findings into the metadata; the findings of runs left out are taken off the counts.
fn record_runs(
    db: &MetadataWriter,
    plan: &Plan,
    locations: &[RowLocation],
    mut dropped: RowFindings,
) -> Result<()> {
    let src = plan.src;
    let source_pack = std::fs::canonicalize(&src.path)
        .unwrap_or_else(|_| src.path.clone())
        .display()
        .to_string();
    let mut carried = 0;
    for (slot, run) in src.runs.iter().enumerate() {
        let mut details = src.details.get(&run.id).cloned().unwrap_or_default();
        let Some(run_id) = plan.out_ids[slot] else {
            dropped.run_level(details.num_moves, run.steps);
            continue;
        };
        details.source_pack = Some(source_pack.clone());
        details.source_run_id = Some(run.id);
        details.fingerprint = Some(src.fingerprints[slot].to_string());
        db.insert_run(&RunRecord {
            run_id,
            seed: run.seed as u32,
            steps: run.steps as u64,
            max_score: run.max_score,
            highest_tile: run.highest_tile,
            details,
            first_row: locations.get(carried).copied(),
        })?;
        carried += 1;
    }
    // Findings of runs the input does not list keep their old id (they cannot be renumbered);
    // duplicates are found anew over the output.
    let conn = src.conn.lock().expect("not poisoned");
    metadata::copy_findings(
        db,
        &conn,
        &|old| plan.output_id(old).unwrap_or(Some(old)),
        &[DUPLICATE_RUN],
    )?;
    for (kind, n) in &dropped.counts {
        db.add_finding_count(kind, -(*n as i64))?;
    }
    Ok(())
}

fn write_session(
    db: &MetadataWriter,
    sources: &[Source],
    shard_rows: Option<u64>,
    rows: u64,
    runs: u64,
    shards: usize,
) -> Result<()> {
    let paths: Vec<String> = sources
        .iter()
        .map(|s| {
            std::fs::canonicalize(&s.path)
                .unwrap_or_else(|_| s.path.clone())
                .display()
                .to_string()
        })
        .collect();
    db.set_pack_facts(&PackFacts {
        command_line: crate::cli::command_line(),
        command: "merge",
        shard_rows,
        total_rows: rows,
        total_runs: runs,
        shard_count: shards,
        shuffled: false,
    })?;
    let facts = [("inputs", serde_json::to_string(&paths)?)];
    for (k, v) in facts {
        db.set_session(k, &v)?;
    }
    for (i, s) in sources.iter().enumerate() {
        for (k, v) in &s.session {
            db.set_session(&format!("input.{i}.{k}"), v)?;
        }
    }
    Ok(())
}

/// Deletes the inputs' pack files, but only after the published output re-validates with its
/// checksums. Returns (input, files deleted, bytes freed).
fn delete_inputs(
    sources: &[Source],
    carried: &[String],
    output: &Path,
    options: &validate::Options,
) -> Result<Vec<(PathBuf, usize, u64)>> {
    let report = validate::check(
        output,
        &validate::Options {
            legacy_ok: false,
            scan_rows: true,
            ..*options
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
        deleted.push((s.path.clone(), files, bytes));
    }
    Ok(deleted)
}

impl Summary {
    fn print(&self, args: &MergeArgs, deleted: &[(PathBuf, usize, u64)], elapsed: f64) {
        let mbps = self.bytes as f64 / 1e6 / elapsed.max(1e-9);
        if args.json {
            let doc = json!({
                "output": args.output.display().to_string(),
                "runs": self.runs,
                "rows": self.rows,
                "shards": self.shards,
                "bytes": self.bytes,
                "inputs": self.inputs.iter().map(|i| json!({"path": i.path.display().to_string(), "runs": i.runs, "rows": i.rows, "left_out": i.left_out})).collect::<Vec<_>>(),
                "duplicate_runs": self.duplicates,
                "legacy_ev_legal_changed": self.upgraded,
                "companions": self.companions.iter().map(|(n, d)| json!({"name": n, "dtype": d})).collect::<Vec<_>>(),
                "skipped_runs": self.left_out.iter().map(|(p, r)| json!({"path": p, "reason": r})).collect::<Vec<_>>(),
                "deleted": deleted.iter().map(|(p, files, bytes)| json!({"path": p.display().to_string(), "files": files, "bytes": bytes})).collect::<Vec<_>>(),
                "elapsed_s": elapsed,
                "mb_per_s": mbps,
            });
            println!("{doc}");
            return;
        }
        println!(
            "merged {}: {}, {} into {} in {}",
            count(self.inputs.len() as u64, "input", "inputs"),
            count(self.runs, "run", "runs"),
            count(self.rows, "row", "rows"),
            count(self.shards as u64, "shard", "shards"),
            args.output.display()
        );
        for i in &self.inputs {
            let now = match i.ids {
                Some((first, last)) => format!("now {first}..={last}"),
                None => "none carried".to_string(),
            };
            let left = if i.left_out > 0 {
                format!(", {} left out as duplicates", thousands(i.left_out as u64))
            } else {
                String::new()
            };
            println!(
                "  {}: {} ({now}{left}), {}",
                i.path.display(),
                count(i.runs as u64, "run", "runs"),
                count(i.rows, "row", "rows")
            );
        }
        for (name, dtype) in &self.companions {
            println!("  companion {name} ({dtype}) carried with its rows");
        }
        if let Some(n) = self.upgraded {
            println!(
                "  legacy 46-byte input rows upgraded: recomputing ev_legal from the board changed {}",
                count(n, "row", "rows")
            );
        }
        if self.duplicates > 0 {
            println!(
                "  duplicate runs: {} (same content as an earlier run; kept and listed as duplicate_run findings; --dedupe leaves them out)",
                thousands(self.duplicates)
            );
        }
        for (source, reason) in self.left_out.iter().take(10) {
            println!("  left out {source}: {reason}");
        }
        for (p, files, bytes) in deleted {
            println!(
                "  deleted {}: {}, {:.1} MB",
                p.display(),
                count(*files as u64, "file", "files"),
                *bytes as f64 / 1e6
            );
        }
        println!("  elapsed {elapsed:.2} s, {mbps:.0} MB/s written");
    }
}
