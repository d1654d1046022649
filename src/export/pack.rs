//! `export --format pack`: a new pack holding only the selected runs, renumbered 0, 1, … in
//! source order, written with the pack machinery (staged [`OutputDir`], checksummed
//! [`ShardWriter`], [`MetadataWriter`], [`RunStarts`] for the run index) so every pack rule
//! holds and `validate` passes. The valuation table is copied as is (ids stay valid); run
//! details keep the source's id and path in `source_run_id` / `source_pack`.
//!
//! Findings: the examples of the selected runs are carried over (renumbered) and the counts are
//! recomputed for the subset, from the rows (`illegal_move_played`, `ev_on_illegal_move`,
//! `step_index_gap`) and from the runs (`num_moves_mismatch`, `empty_run`), the way `pack`
//! counts them. Duplicate runs are found anew among the selected runs, by their fingerprints
//! (carried from the source, or computed from its rows when it recorded none). Orphan rows
//! files and skipped runs describe the source drop, not the subset, and are not carried.

use std::collections::BTreeMap;
use std::path::Path;

use super::{RowCounts, Selection, SourcePack, tally};
use crate::error::{Result, err};
use crate::findings::{
    DUPLICATE_RUN, Duplicates, RECOUNTABLE, RowFindings, Tally, duplicate_detail,
};
use crate::format::fingerprint::Fingerprint;
use crate::format::metadata::{self, FindingRecord, MetadataWriter, PackFacts, RunRecord};
use crate::format::row::{ROW_BYTES, StepRow, offset};
use crate::pack::StagedPack;
use crate::pack::families::{self, Family};
use crate::pack::fingerprints;
use crate::pack::run_index::RunStarts;
use crate::progress::{Bar, Observer};

/// What the exported pack holds.
pub struct Written {
    pub runs: usize,
    pub rows: u64,
    pub shards: usize,
    /// For a source in the legacy 46-byte layout: rows whose `ev_legal` was recomputed to
    /// another value.
    pub upgraded: Option<u64>,
    /// How many valuation names the written rows need: one more than the highest id a row
    /// has.
    valuation_ids: usize,
}

/// Options of a pack export.
pub struct PackOptions<'a> {
    pub shard_rows: Option<u64>,
    pub overwrite: bool,
    pub progress: Observer,
    /// How the runs were chosen, recorded in `session`.
    pub selection_text: &'a str,
    /// The command line the new pack records as made it.
    pub command_line: &'a str,
    /// Threads for computing fingerprints a source did not record.
    pub workers: usize,
    /// The source's companion families to carry.
    pub companions: &'a [&'a Family],
}

pub fn write(
    source: &SourcePack,
    selection: &Selection,
    target: &Path,
    opts: &PackOptions,
) -> Result<Written> {
    let mut staged = StagedPack::create(target, opts.overwrite, opts.shard_rows)?;
    let (pack_id, version) = &source.identity;
    staged.db().record_source(
        pack_id.as_deref(),
        *version,
        &source.dir.display().to_string(),
    )?;
    let written = build(source, selection, &mut staged, opts)?;
    // An earlier version's table: the names its rows use (a prefix of the table now), not
    // those later versions appended.
    let valuations = if source.latest {
        source.valuations.clone()
    } else {
        source.valuations.prefix(written.valuation_ids)
    };
    staged.publish(&valuations)?;
    Ok(written)
}

/// Writes the subset pack into `staged`.
fn build(
    source: &SourcePack,
    selection: &Selection,
    staged: &mut StagedPack,
    opts: &PackOptions,
) -> Result<Written> {
    let fingerprints = selected_fingerprints(source, selection, opts.workers)?;
    let mut starts = RunStarts::new((0..selection.len() as u32).collect());
    let mut counts = RowCounts::new(selection);
    let mut findings = RowFindings::new(selection.len(), !source.shuffled);
    let plan = source.plan(selection);
    let total_rows = plan.iter().map(|p| p.count).sum();
    for family in opts.companions {
        staged.add_family(family.layout());
    }
    staged.expect_rows(total_rows);
    let bar = Bar::rows(&opts.progress, "export", total_rows);
    let mut rows = Vec::with_capacity(super::PIECE_ROWS as usize * ROW_BYTES);
    let mut keep = Vec::new();
    let mut companion_rows = Vec::new();
    let mut ev_legal_changed = 0u64;
    let mut valuation_ids = 0usize;
    for piece in &plan {
        let (src, changed) = source.shards[piece.shard].read_upgraded(piece.start, piece.count)?;
        rows.clear();
        keep.clear();
        let mut piece_tally = Vec::new();
        for row in src.chunks_exact(ROW_BYTES) {
            let id = u32::from_le_bytes(row[..4].try_into().unwrap());
            let Some(pos) = selection.position(id)? else {
                keep.push(false);
                continue;
            };
            keep.push(true);
            tally(&mut piece_tally, pos);
            findings.observe(pos, &StepRow::from_bytes(row));
            valuation_ids = valuation_ids.max(usize::from(row[offset::VALUATION_TYPE]) + 1);
            let at = rows.len();
            rows.extend_from_slice(row);
            rows[at..at + 4].copy_from_slice(&pos.to_le_bytes());
        }
        if changed > 0 {
            // Only rows of selected runs count.
            let before = source.read(piece)?;
            ev_legal_changed += before
                .chunks_exact(ROW_BYTES)
                .zip(&keep)
                .filter(|&(_, &kept)| kept)
                .zip(rows.chunks_exact(ROW_BYTES))
                .filter(|((a, _), b)| a[offset::EV_LEGAL] != b[offset::EV_LEGAL])
                .count() as u64;
        }
        counts.add(&piece_tally);
        let parts = staged.parts();
        if !source.shuffled {
            starts.observe(&rows, parts.steps.total_rows());
        }
        parts.steps.write_rows(&rows)?;
        for (family, w) in opts.companions.iter().zip(parts.families) {
            family
                .open(piece.shard)?
                .read_rows(piece.start, piece.count, &mut companion_rows)?;
            families::keep_rows(&mut companion_rows, family.row_bytes, &keep);
            w.write_rows(&companion_rows)?;
        }
        bar.inc(piece.count);
    }
    bar.finish_and_clear();
    counts.verify(source, selection)?;
    let locations = (!source.shuffled).then(|| starts.finish(staged.steps()));
    let rows_written = staged.steps().total_rows();
    let shards = staged.finish_files()?;
    let db = staged.db();
    let source_pack = source.canonical_path();
    let mut duplicates = Duplicates::default();
    let mut duplicate_findings = Tally::default();
    for (pos, &slot) in selection.slots.iter().enumerate() {
        let run = &source.runs[slot];
        let mut details = source.details.get(&run.id).cloned().unwrap_or_default();
        details.source_pack = Some(source_pack.clone());
        details.source_run_id = Some(run.id);
        details.fingerprint = fingerprints[pos].map(|f| f.to_string());
        findings.run_level(details.num_moves, run.steps);
        if let Some(fp) = fingerprints[pos] {
            let name = details
                .source_path
                .clone()
                .unwrap_or_else(|| format!("run {} of {source_pack}", run.id));
            if let Some(kept) = duplicates.check(fp, (pos as u32, name.clone())) {
                let example = FindingRecord {
                    kind: DUPLICATE_RUN.into(),
                    run_id: Some(pos as u32),
                    source_path: name,
                    line: None,
                    step_index: None,
                    detail: duplicate_detail(kept, &fp),
                };
                duplicate_findings.add(DUPLICATE_RUN, 1, [example]);
            }
        }
        db.insert_run(&RunRecord {
            run_id: pos as u32,
            seed: u32::try_from(run.seed).map_err(|_| {
                err!(
                    Corrupt,
                    "{}: run {} has seed {}, which is not a u32 (run `dataset-packer validate`)",
                    source.dir.display(),
                    run.id,
                    run.seed
                )
            })?,
            steps: run.steps as u64,
            max_score: run.max_score,
            highest_tile: run.highest_tile,
            details,
            first_row: locations.as_ref().map(|l| l[pos]),
        })?;
    }
    for shard in &shards {
        db.insert_shard(shard)?;
    }
    write_findings(findings, duplicate_findings, db, source, selection)?;
    db.set_pack_facts(&PackFacts {
        command_line: opts.command_line.to_string(),
        command: "export",
        shard_rows: opts.shard_rows,
        total_rows: rows_written,
        total_runs: selection.len() as u64,
        shard_count: shards.len(),
        shuffled: source.shuffled,
    })?;
    let facts = [
        ("source_pack", source_pack),
        ("selection", opts.selection_text.to_string()),
        ("skipped_runs", "0".to_string()),
        ("orphan_rows_files", "0".to_string()),
    ];
    for (k, v) in facts {
        db.set_session(k, &v)?;
    }
    if source.legacy() {
        db.set_session(
            metadata::LEGACY_EV_LEGAL_CHANGED,
            &ev_legal_changed.to_string(),
        )?;
    }
    if let Some(root) = metadata::session_value(&source.db(), "source_root")? {
        db.set_session("source_root", &root)?;
    }
    Ok(Written {
        runs: selection.len(),
        rows: rows_written,
        shards: shards.len(),
        upgraded: source.legacy().then_some(ev_legal_changed),
        valuation_ids,
    })
}

/// The fingerprint of each selected run (by output position): recorded by the source, or
/// computed from its rows when it recorded none; None only for a shuffled source that
/// recorded none (its runs cannot be read in step order).
fn selected_fingerprints(
    source: &SourcePack,
    selection: &Selection,
    workers: usize,
) -> Result<Vec<Option<Fingerprint>>> {
    let recorded: Vec<Option<Fingerprint>> = selection
        .slots
        .iter()
        .map(|&slot| {
            let id = source.runs[slot].id;
            source.details.get(&id).and_then(|d| d.fingerprint())
        })
        .collect();
    if recorded.iter().all(Option::is_some) {
        return Ok(recorded);
    }
    if source.shuffled {
        log::warn!(
            "{} records no run fingerprints and is shuffled: the exported runs get none",
            source.dir.display()
        );
        return Ok(recorded);
    }
    let jobs: Vec<_> = selection
        .slots
        .iter()
        .map(|&slot| (&source.runs[slot], source.run_range(slot)))
        .collect();
    let computed =
        fingerprints::compute_ranges(&source.shards, &jobs, &source.valuations, workers)?;
    Ok(computed.into_iter().map(Some).collect())
}

/// Writes the recounted findings of the subset, its duplicate runs, and the source's examples
/// for the selected runs, renumbered. Kinds not recounted (step gaps in a shuffled source,
/// kinds of other tools) are counted by their carried examples.
fn write_findings(
    findings: RowFindings,
    duplicates: Tally,
    db: &MetadataWriter,
    source: &SourcePack,
    sel: &Selection,
) -> Result<()> {
    let mut recounted: Vec<&str> = RECOUNTABLE
        .iter()
        .copied()
        .filter(|k| *k != "step_index_gap" || findings.in_order())
        .collect();
    recounted.push(DUPLICATE_RUN);
    let mut extra: BTreeMap<String, u64> = BTreeMap::new();
    for f in metadata::read_findings(&source.db())? {
        let Some(pos) = f.run_id.and_then(|id| sel.position(id).ok().flatten()) else {
            continue;
        };
        if f.kind == DUPLICATE_RUN {
            continue;
        }
        if !recounted.contains(&f.kind.as_str()) {
            *extra.entry(f.kind.clone()).or_default() += 1;
        }
        db.insert_finding(&FindingRecord {
            run_id: Some(pos),
            ..f
        })?;
    }
    for (kind, n) in &findings.counts {
        db.set_finding_count(kind, *n)?;
    }
    for (kind, n) in &extra {
        db.set_finding_count(kind, *n)?;
    }
    for (kind, n) in &duplicates.counts {
        db.set_finding_count(kind, *n)?;
    }
    for example in &duplicates.examples {
        db.insert_finding(example)?;
    }
    Ok(())
}
