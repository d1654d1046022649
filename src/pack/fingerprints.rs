//! The fingerprints of the runs already in a pack: taken from `run_details.fingerprint` when
//! the pack recorded them, computed from its rows otherwise (packs written before fingerprints
//! existed, by another tool, or in the legacy 46-byte layout). Shared by `merge`,
//! `pack --update`, `export --format pack` and `validate --deep`.

use std::collections::HashMap;
use std::ops::Range;

use crate::error::{Context, Result, fail};

use crate::format::fingerprint::{Fingerprint, RunFacts, RunHasher};
use crate::format::metadata::{RunDetails, RunRow};
use crate::format::row::{ROW_BYTES, offset};
use crate::format::valuation::ValuationTable;
use crate::ordered::ordered_try_map;
use crate::pack::shards::{self, Shard};

/// Rows read at a time while hashing a run.
const PIECE_ROWS: u64 = 65_536;

/// The fingerprint facts of a `runs` row.
pub fn facts(run: &RunRow) -> RunFacts {
    RunFacts {
        seed: run.seed,
        steps: run.steps.max(0) as u64,
        max_score: run.max_score,
        highest_tile: run.highest_tile,
    }
}

/// Every run's recorded fingerprint, in `runs` order, or None when any is missing or malformed.
pub fn recorded(runs: &[RunRow], details: &HashMap<i64, RunDetails>) -> Option<Vec<Fingerprint>> {
    runs.iter()
        .map(|r| details.get(&r.id).and_then(RunDetails::fingerprint))
        .collect()
}

/// The recorded fingerprints, or (when the pack has none or not all) fingerprints computed
/// from the rows. The flag says whether they were computed.
pub fn of_pack(
    dir: &std::path::Path,
    shards: &[Shard],
    runs: &[RunRow],
    details: &HashMap<i64, RunDetails>,
    valuations: &ValuationTable,
    workers: usize,
) -> Result<(Vec<Fingerprint>, bool)> {
    if let Some(found) = recorded(runs, details) {
        return Ok((found, false));
    }
    log::info!(
        "{}: computing the fingerprints of {} runs from their rows (not recorded)",
        dir.display(),
        runs.len()
    );
    let computed = compute(shards, runs, valuations, workers)
        .with_context(|| format!("computing the run fingerprints of {}", dir.display()))?;
    Ok((computed, true))
}

/// Computes every run's fingerprint from the rows of an unshuffled pack (runs contiguous, in
/// id order, `runs.steps` rows each), on `workers` threads.
pub fn compute(
    shards: &[Shard],
    runs: &[RunRow],
    valuations: &ValuationTable,
    workers: usize,
) -> Result<Vec<Fingerprint>> {
    let starts = shards::shard_starts(shards);
    let mut first_row = 0u64;
    let mut jobs = Vec::with_capacity(runs.len());
    for run in runs {
        let steps = run.steps.max(0) as u64;
        jobs.push((run, first_row..first_row + steps));
        first_row += steps;
    }
    if first_row != *starts.last().unwrap() {
        fail!(Corrupt, 
            "the runs table counts {first_row} rows but the shards hold {}",
            starts.last().unwrap()
        );
    }
    compute_ranges(shards, &jobs, valuations, workers)
}

/// Computes the fingerprints of the runs `jobs` from their global row ranges, on `workers`
/// threads, in the order given; checks on the way that every row belongs to its run. Rows of
/// legacy shards are hashed as the upgraded pack holds them (`ev_legal` from the board), so a
/// run has one fingerprint whichever packer wrote it.
pub fn compute_ranges(
    shards: &[Shard],
    jobs: &[(&RunRow, Range<u64>)],
    valuations: &ValuationTable,
    workers: usize,
) -> Result<Vec<Fingerprint>> {
    let starts = shards::shard_starts(shards);
    let mut out = Vec::with_capacity(jobs.len());
    ordered_try_map(
        jobs,
        workers,
        workers * 4,
        Vec::new,
        |pieces, (run, range)| {
            pieces.clear();
            shards::pieces_of(&starts, range.clone(), PIECE_ROWS, pieces);
            let mut hasher = RunHasher::new(facts(run), valuations.names());
            for p in pieces.iter() {
                let shard = &shards[p.shard];
                let (rows, _) = shard.read_upgraded(p.start, p.count)?;
                check_run_ids(&rows, run.id, shard, p.start)?;
                hasher
                    .update(&rows)
                    .with_context(|| format!("{} rows {}..", shard.name, p.start))?;
            }
            hasher.finish().with_context(|| format!("run {}", run.id))
        },
        |_, fingerprint| {
            out.push(fingerprint?);
            Ok(())
        },
    )?;
    Ok(out)
}

fn check_run_ids(rows: &[u8], run_id: i64, shard: &Shard, start: u64) -> Result<()> {
    for (i, row) in rows.chunks_exact(ROW_BYTES).enumerate() {
        let id = u32::from_le_bytes(row[offset::RUN_ID..offset::RUN_ID + 4].try_into().unwrap());
        if i64::from(id) != run_id {
            fail!(Corrupt, 
                "{} row {} belongs to run {id}, where the runs table places run {run_id} (the pack is not in run order)",
                shard.name,
                start + i as u64
            );
        }
    }
    Ok(())
}
