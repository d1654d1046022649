//! What a merge writes into the output's metadata.db besides the shard records: each input's
//! runs renumbered (with their source and fingerprint), its findings carried, the duplicates
//! and runs left out, and the session (the pack's facts and every input's session).

use crate::error::Result;

use super::plan::{Assignment, Plan};
use super::source::Source;
use crate::findings::{DUPLICATE_RUN, RowFindings};
use crate::format::metadata::{self, MetadataWriter, PackFacts, RowLocation, RunRecord};

/// An input's carried runs (renumbered, with their source and fingerprint recorded) and
/// findings into the metadata; the findings of runs left out are taken off the counts.
pub(super) fn record_runs(
    db: &MetadataWriter,
    plan: &Plan,
    locations: &[RowLocation],
    mut dropped: RowFindings,
) -> Result<()> {
    let src = plan.src;
    let source_pack = src.canonical_path();
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

/// The findings of the merge itself: duplicate runs kept, and the runs left out.
pub(super) fn record_assignment(db: &MetadataWriter, assignment: &Assignment) -> Result<()> {
    for (kind, n) in &assignment.duplicates.counts {
        db.add_finding_count(kind, *n as i64)?;
    }
    for example in &assignment.duplicates.examples {
        db.insert_finding(example)?;
    }
    for (source, reason) in &assignment.left_out {
        db.insert_skipped(source, reason)?;
    }
    Ok(())
}

pub(super) fn write_session(
    db: &MetadataWriter,
    sources: &[Source],
    command_line: &str,
    shard_rows: Option<u64>,
    rows: u64,
    runs: u64,
    shards: usize,
) -> Result<()> {
    let paths: Vec<String> = sources.iter().map(Source::canonical_path).collect();
    db.set_pack_facts(&PackFacts {
        command_line: command_line.to_string(),
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
