//! The shuffled pack's metadata.db: the input's runs (with their fingerprints, computed here
//! for an input that records none), findings and session carried over, the output's shard and
//! companion records, and the shuffle's own facts (seed, buckets, source, quality).

use std::path::PathBuf;

use super::ShuffleOptions;
use super::buckets::Gathered;
use super::plan::Plan;
use super::quality::{Quality, WINDOW};
use crate::error::{Context, Result};
use crate::format::metadata::{self, MetadataWriter, PackFacts, RunRecord};
use crate::format::valuation::ValuationTable;
use crate::pack::StagedPack;
use crate::pack::families::Family;
use crate::pack::fingerprints;
use crate::pack::publish::OutputDir;
use crate::pack::shards::{self, Shard};

/// The shuffled pack staged for publishing: the writers gather filled, and a new
/// `metadata.db` (one an interrupted finish left in `staging` is removed first: it is rebuilt
/// from scratch).
pub(super) fn stage(
    out: OutputDir,
    staging: PathBuf,
    plan: &Plan,
    families: &[Family],
    gathered: Gathered,
) -> Result<StagedPack> {
    let db_path = staging.join(metadata::FILE_NAME);
    for leftover in ["", "-wal", "-shm"] {
        let path = PathBuf::from(format!("{}{leftover}", db_path.display()));
        if path.exists() {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    let db = MetadataWriter::create(&db_path)?;
    let mut staged = StagedPack::from_parts(out, staging, plan.shard_rows, gathered.steps, db);
    for (family, writer) in families.iter().zip(gathered.families) {
        staged.add_family_writer(family.layout(), writer);
    }
    Ok(staged)
}

/// Records the shuffled pack in its `metadata.db`: the input's runs (with fingerprints),
/// findings and session, the output's shards (`records`), the plan and the dispersion
/// measured. Returns, for a legacy input, the rows whose `ev_legal` the upgrade changed.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_metadata(
    db: &MetadataWriter,
    records: &[metadata::ShardRecord],
    input: &rusqlite::Connection,
    input_shards: &[Shard],
    valuations: &ValuationTable,
    options: &ShuffleOptions,
    plan: &Plan,
    quality: &Quality,
    rows: u64,
) -> Result<Option<u64>> {
    let runs = metadata::read_runs(input)?;
    let mut details = metadata::read_run_details(input)?;
    let input_shuffled = metadata::session_value(input, "shuffled")?.as_deref() == Some("true");
    if fingerprints::recorded(&runs, &details).is_none() && !input_shuffled {
        let computed = fingerprints::compute(input_shards, &runs, valuations, options.workers)?;
        for (run, fp) in runs.iter().zip(computed) {
            details.entry(run.id).or_default().fingerprint = Some(fp.to_string());
        }
    }
    for r in &runs {
        db.insert_run(&RunRecord {
            run_id: r.id as u32,
            seed: r.seed as u32,
            steps: r.steps as u64,
            max_score: r.max_score,
            highest_tile: r.highest_tile,
            details: details.get(&r.id).cloned().unwrap_or_default(),
            first_row: None,
        })?;
    }
    metadata::copy_findings(db, input, &|id| Some(id), &[])?;
    for shard in records {
        db.insert_shard(shard)?;
    }
    for (k, v) in metadata::read_session(input)? {
        db.set_session(&format!("input.{k}"), &v)?;
    }
    let max_share = quality
        .shard_max_run_share
        .iter()
        .copied()
        .fold(0.0, f64::max);
    db.set_pack_facts(&PackFacts {
        command_line: options.command_line.clone(),
        command: "shuffle",
        shard_rows: plan.shard_rows,
        total_rows: rows,
        total_runs: runs.len() as u64,
        shard_count: records.len(),
        shuffled: true,
    })?;
    let facts = [
        (
            "run_index",
            "not applicable: the pack is shuffled".to_string(),
        ),
        ("shuffle_seed", options.seed.to_string()),
        ("shuffle_buckets", plan.buckets.to_string()),
        ("source_pack", plan.input.clone()),
        ("quality_shard_max_run_share", format!("{max_share:.6}")),
        (
            "quality_shard_max_run_shares",
            serde_json::to_string(&quality.shard_max_run_share)?,
        ),
        ("quality_window_rows", WINDOW.to_string()),
        (
            "quality_window_mean_max_run_rows",
            format!("{:.3}", quality.window_mean_max_run_rows),
        ),
        (
            "quality_window_max_run_rows",
            quality.window_max_run_rows.to_string(),
        ),
    ];
    for (k, v) in facts {
        db.set_session(k, &v)?;
    }
    // The scatter wrote legacy rows upgraded; counted here, in one more pass over the input,
    // so an interrupted and resumed shuffle counts them too.
    let upgraded = if input_shards.iter().any(Shard::is_legacy) {
        let changed = shards::ev_legal_changes(input_shards)?;
        db.set_session(metadata::LEGACY_EV_LEGAL_CHANGED, &changed.to_string())?;
        Some(changed)
    } else {
        None
    };
    Ok(upgraded)
}
