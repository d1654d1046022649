//! The merged pack in the staging folder: shard writers for the steps and each carried
//! companion family, the copy, then the metadata and valuation table around what was written.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;

use super::copy::{Writers, copy_rows};
use super::plan::{Plan, assign_runs};
use super::record::{record_assignment, write_session};
use super::source::Source;
use super::{InputSummary, Options, Summary};
use crate::findings::DUPLICATE_RUN;
use crate::format::metadata::{self, MetadataWriter};
use crate::format::valuation::ValuationTable;
use crate::pack::families;
use crate::pack::publish::write_valuations;
use crate::pack::shard_writer::{FileLayout, ShardWriter};
use crate::pack::shards::Shard;

/// Copies every input into the staging folder and writes the metadata; rows stay in input
/// order.
pub(super) fn write_merged(
    sources: &[Source],
    valuations: &ValuationTable,
    carried: &[String],
    shard_rows: Option<u64>,
    staging: &Path,
    options: &Options,
) -> Result<Summary> {
    let copy_started = Instant::now();
    let assignment = assign_runs(sources, options.dedupe)?;
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
    let mut writers = Writers {
        steps: &mut writer,
        companions: &mut companion_writers,
    };
    let ev_legal_changed = copy_rows(&plans, &mut writers, &db, options.quiet)?;
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
    record_assignment(&db, &assignment)?;
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
        &options.command_line,
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
        deleted: Vec::new(),
    })
}
