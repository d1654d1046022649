//! The merged pack in its [`StagedPack`]: the steps and each carried companion family, the
//! copy, then the metadata around what was written.

use std::time::Instant;

use crate::error::Result;

use super::copy::{Writers, copy_rows};
use super::plan::{Plan, assign_runs};
use super::record::{record_assignment, write_session};
use super::source::Source;
use super::{MergeOptions, MergeSummary, MergedInput};
use crate::findings::DUPLICATE_RUN;
use crate::format::metadata;
use crate::format::valuation::ValuationTable;
use crate::pack::StagedPack;
use crate::pack::families;
use crate::pack::shard_writer::FileLayout;
use crate::pack::shards::Shard;

/// Copies every input into the staging folder and writes the metadata; rows stay in input
/// order.
pub(super) fn write_merged(
    sources: &[Source],
    valuations: &ValuationTable,
    carried: &[String],
    staged: &mut StagedPack,
    options: &MergeOptions,
) -> Result<MergeSummary> {
    let copy_started = Instant::now();
    let assignment = assign_runs(sources, options.dedupe)?;
    let total_rows: u64 = sources.iter().map(Source::rows).sum();
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
    for layout in &layouts {
        staged.add_family(layout.clone());
    }
    staged.expect_rows(total_rows);
    let plans: Vec<Plan> = sources
        .iter()
        .zip(&assignment.out_ids)
        .map(|(src, ids)| Plan::new(src, ids, valuations, carried))
        .collect();
    let parts = staged.parts();
    let mut writers = Writers {
        steps: parts.steps,
        companions: parts.families,
    };
    let ev_legal_changed = copy_rows(&plans, &mut writers, parts.db, &options.progress)?;
    let legacy = sources
        .iter()
        .any(|s| s.shards.iter().any(Shard::is_legacy));

    let rows_written = staged.steps().total_rows();
    let shards = staged.finish_files()?;
    let db = staged.db();
    log::debug!(
        "merge: rows copied and synced in {:?}",
        copy_started.elapsed()
    );
    for shard in &shards {
        db.insert_shard(shard)?;
    }
    record_assignment(db, &assignment)?;
    db.drop_empty_finding_counts()?;
    if legacy {
        db.set_session(
            metadata::LEGACY_EV_LEGAL_CHANGED,
            &ev_legal_changed.to_string(),
        )?;
    }
    write_session(
        db,
        sources,
        &options.command_line,
        staged.shard_rows(),
        rows_written,
        assignment.runs,
        shards.len(),
    )?;
    Ok(MergeSummary {
        inputs: sources
            .iter()
            .zip(&assignment.out_ids)
            .map(|(s, ids)| {
                let carried = || ids.iter().flatten().copied();
                MergedInput {
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
        deleted: Vec::new(),
        uploaded: None,
    })
}
