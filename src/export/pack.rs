//! `export --format pack`: a new pack holding only the selected runs, renumbered 0, 1, … in
//! source order, written with the pack machinery (staged [`OutputDir`], checksummed
//! [`ShardWriter`], [`MetadataWriter`], [`RunStarts`] for the run index) so every pack rule
//! holds and `validate` passes. The valuation table is copied as is (ids stay valid); run
//! details keep the source's id and path in `source_run_id` / `source_pack`.
//!
//! Findings: the examples of the selected runs are carried over (renumbered) and the counts are
//! recomputed for the subset, from the rows (`illegal_move_played`, `ev_on_illegal_move`,
//! `step_index_gap`) and from the runs (`num_moves_mismatch`, `empty_run`), the way `pack`
//! counts them. Orphan rows files and skipped runs describe the source drop, not the subset,
//! and are not carried.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use super::{RowCounts, Selection, SourcePack, tally};
use crate::format::metadata::{self, FindingRecord, MetadataWriter, PackFacts, RunRecord};
use crate::format::row::{ROW_BYTES, StepRow, remap_rows};
use crate::pack_dir::{OutputDir, write_valuations};
use crate::progress;
use crate::run_index::RunStarts;
use crate::shard_writer::ShardWriter;

/// What the exported pack holds.
pub struct Written {
    pub runs: usize,
    pub rows: u64,
    pub shards: usize,
}

/// Options of a pack export.
pub struct PackOptions<'a> {
    pub shard_rows: Option<u64>,
    pub overwrite: bool,
    pub quiet: bool,
    /// How the runs were chosen, recorded in `session`.
    pub selection_text: &'a str,
}

pub fn write(
    source: &SourcePack,
    selection: &Selection,
    target: &Path,
    opts: &PackOptions,
) -> Result<Written> {
    let out = OutputDir::open(target, opts.overwrite)?;
    let staging = out.begin_staging()?;
    let written = build(source, selection, &staging, opts)?;
    out.publish()?;
    Ok(written)
}

/// Writes the subset pack into `staging`.
fn build(
    source: &SourcePack,
    selection: &Selection,
    staging: &Path,
    opts: &PackOptions,
) -> Result<Written> {
    let mut writer = ShardWriter::new(staging, opts.shard_rows);
    let db = MetadataWriter::create(&staging.join(metadata::FILE_NAME))?;
    let mut starts = RunStarts::new((0..selection.len() as u32).collect());
    let mut counts = RowCounts::new(selection);
    let mut findings = RowFindings::new(selection.len(), !source.shuffled);
    let plan = source.plan(selection);
    let total_rows = plan.iter().map(|p| p.count).sum();
    writer.expect_rows(total_rows);
    let bar = progress::rows_bar(total_rows, opts.quiet, "export");
    let mut rows = Vec::with_capacity(super::PIECE_ROWS as usize * ROW_BYTES);
    for piece in &plan {
        let src = source.read(piece)?;
        rows.clear();
        let mut piece_tally = Vec::new();
        selection.for_each_row(&src, |pos, row| {
            tally(&mut piece_tally, pos);
            findings.observe(pos, &StepRow::from_bytes(row));
            rows.extend_from_slice(row);
            Ok(())
        })?;
        counts.add(&piece_tally);
        remap_rows(
            &mut rows,
            |old| selection.position(old).ok().flatten().expect("selected"),
            None,
        );
        if !source.shuffled {
            starts.observe(&rows, writer.total_rows());
        }
        writer.write_rows(&rows)?;
        bar.inc(piece.count);
    }
    bar.finish_and_clear();
    counts.verify(source, selection)?;

    let locations = (!source.shuffled).then(|| starts.finish(&writer));
    let rows_written = writer.total_rows();
    let shards = writer.finish()?;
    let source_pack = source.canonical_path();
    for (pos, &slot) in selection.slots.iter().enumerate() {
        let run = &source.runs[slot];
        let mut details = source.details.get(&run.id).cloned().unwrap_or_default();
        details.source_pack = Some(source_pack.clone());
        details.source_run_id = Some(run.id);
        findings.run_level(details.num_moves, run.steps);
        db.insert_run(&RunRecord {
            run_id: pos as u32,
            seed: u32::try_from(run.seed)
                .map_err(|_| anyhow::anyhow!("run {}: seed {} is not a u32", run.id, run.seed))?,
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
    findings.write(&db, source, selection)?;
    db.set_pack_facts(&PackFacts {
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
    if let Some(root) = metadata::session_value(&source.db()?, "source_root")? {
        db.set_session("source_root", &root)?;
    }
    db.finish()?;
    write_valuations(staging, &source.valuations)?;
    Ok(Written {
        runs: selection.len(),
        rows: rows_written,
        shards: shards.len(),
    })
}

/// Finding counts of the subset, recomputed as `pack` counts them.
struct RowFindings {
    counts: BTreeMap<&'static str, u64>,
    /// Previous step_index per output position (gaps are only counted in run order).
    prev_step: Vec<Option<u32>>,
    in_order: bool,
}

impl RowFindings {
    fn new(runs: usize, in_order: bool) -> RowFindings {
        RowFindings {
            counts: BTreeMap::new(),
            prev_step: vec![None; runs],
            in_order,
        }
    }

    fn add(&mut self, kind: &'static str, n: u64) {
        if n > 0 {
            *self.counts.entry(kind).or_default() += n;
        }
    }

    fn observe(&mut self, pos: u32, r: &StepRow) {
        let legal = r.ev_legal;
        self.add(
            "illegal_move_played",
            u64::from(r.move_dir < 4 && legal & (1 << r.move_dir) == 0),
        );
        let evs_on_illegal = (0..4)
            .filter(|&k| r.branch_evs[k] != 0.0 && legal & (1 << k) == 0)
            .count();
        self.add("ev_on_illegal_move", evs_on_illegal as u64);
        if self.in_order {
            let prev = self.prev_step[pos as usize].replace(r.step_index);
            let gap = prev.is_some_and(|p| u64::from(r.step_index) != u64::from(p) + 1);
            self.add("step_index_gap", u64::from(gap));
        }
    }

    fn run_level(&mut self, num_moves: Option<i64>, steps: i64) {
        self.add(
            "num_moves_mismatch",
            u64::from(num_moves.is_some_and(|n| n != steps)),
        );
        self.add("empty_run", u64::from(steps == 0));
    }

    /// Writes the counts and the source's examples for the selected runs, renumbered. Kinds
    /// not recounted here (step gaps in a shuffled source, kinds of other tools) are counted
    /// by their carried examples.
    fn write(self, db: &MetadataWriter, source: &SourcePack, sel: &Selection) -> Result<()> {
        let mut recounted: Vec<&str> = vec![
            "illegal_move_played",
            "ev_on_illegal_move",
            "num_moves_mismatch",
            "empty_run",
        ];
        if self.in_order {
            recounted.push("step_index_gap");
        }
        let mut extra: BTreeMap<String, u64> = BTreeMap::new();
        for f in metadata::read_findings(&source.db()?)? {
            let Some(pos) = f.run_id.and_then(|id| sel.position(id).ok().flatten()) else {
                continue;
            };
            if !recounted.contains(&f.kind.as_str()) {
                *extra.entry(f.kind.clone()).or_default() += 1;
            }
            db.insert_finding(&FindingRecord {
                run_id: Some(pos),
                ..f
            })?;
        }
        for (kind, n) in &self.counts {
            db.set_finding_count(kind, *n)?;
        }
        for (kind, n) in &extra {
            db.set_finding_count(kind, *n)?;
        }
        Ok(())
    }
}
