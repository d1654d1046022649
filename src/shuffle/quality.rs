//! How evenly a shuffle spread the runs over its output, measured by reading the output back:
//! recorded in the shuffled pack's session table and printed by `shuffle`.

use std::path::Path;

use crate::error::Result;
use serde::Serialize;

use crate::format::metadata;
use crate::format::row::ROW_BYTES;
use crate::pack::shards::{self, Access, RunSlots};

/// Rows per dispersion window.
pub const WINDOW: usize = 4096;
/// The goal for [`Quality::shard_max_run_share`]: no shard with more than 2% of its rows from
/// one run.
pub const SHARD_SHARE_GOAL: f64 = 0.02;

/// How evenly runs are spread over a shuffle's output (the seed note's goal: no shard with
/// more than 2% of its rows from one run), as [`ShuffleSummary`](crate::ShuffleSummary)
/// reports it.
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct Quality {
    /// Per output shard: the largest share of its rows that comes from a single run.
    pub shard_max_run_share: Vec<f64>,
    /// Over windows of 4096 consecutive rows: the mean of the largest count of rows from one
    /// run.
    pub window_mean_max_run_rows: f64,
    /// Over the same windows: the largest count of rows from one run.
    pub window_max_run_rows: u64,
    /// Whole windows measured.
    pub windows: u64,
    /// The longest run's share of all rows: a uniform shuffle puts about this share of every
    /// shard's rows there, so above the goal's 2% the goal is out of reach for the pack.
    pub largest_run_share: f64,
}

impl Quality {
    /// How the largest shard share compares with the goal (2%), in words: met, out of reach
    /// for this pack (one run alone is more than the goal's share of all rows), or missed.
    ///
    /// ```
    /// assert_eq!(dataset_packer::ShuffleQuality::default().verdict(), "goal ≤ 2%: met");
    /// ```
    pub fn verdict(&self) -> String {
        let max_share = self.shard_max_run_share.iter().copied().fold(0.0, f64::max);
        let goal = SHARD_SHARE_GOAL * 100.0;
        if max_share <= SHARD_SHARE_GOAL {
            format!("goal ≤ {goal}%: met")
        } else if self.largest_run_share > SHARD_SHARE_GOAL {
            format!(
                "goal ≤ {goal}% is out of reach for this pack: its longest run alone is {:.3}% \
                 of all rows, and a uniform shuffle gives every shard about that share of it",
                self.largest_run_share * 100.0
            )
        } else {
            format!("goal ≤ {goal}%: missed; shards of more rows spread runs thinner")
        }
    }
}

/// Measures how runs are spread over the output shards, reading them back once.
pub(super) fn measure_dispersion(staging: &Path, input: &rusqlite::Connection) -> Result<Quality> {
    let runs = metadata::read_runs(input)?;
    let ids: Vec<u32> = runs.iter().map(|r| r.id as u32).collect();
    let total: i64 = runs.iter().map(|r| r.steps.max(0)).sum();
    let longest = runs.iter().map(|r| r.steps.max(0)).max().unwrap_or(0);
    let slots = RunSlots::new(&ids);
    let mut shard_counts = vec![0u32; ids.len()];
    let mut window_counts = vec![0u32; ids.len()];
    let mut touched: Vec<u32> = Vec::new();
    let mut q = Quality {
        largest_run_share: if total == 0 {
            0.0
        } else {
            longest as f64 / total as f64
        },
        ..Quality::default()
    };
    let mut window_sum = 0u64;
    let (mut window_fill, mut window_max) = (0usize, 0u32);
    for shard in crate::pack::open::open_staged_shards(staging)? {
        let mut shard_max = 0u32;
        shard_counts.iter_mut().for_each(|c| *c = 0);
        for (start, count) in shards::chunks(std::slice::from_ref(&shard), 1 << 17)
            .into_iter()
            .map(|(_, s, n)| (s, n))
        {
            let map = shard.map_rows(start, count, Access::Sequential)?;
            for row in map.chunks_exact(ROW_BYTES) {
                let slot = slots
                    .get(u32::from_le_bytes(row[..4].try_into().unwrap()))
                    .unwrap_or(0) as usize;
                shard_counts[slot] += 1;
                shard_max = shard_max.max(shard_counts[slot]);
                if window_counts[slot] == 0 {
                    touched.push(slot as u32);
                }
                window_counts[slot] += 1;
                window_max = window_max.max(window_counts[slot]);
                window_fill += 1;
                if window_fill == WINDOW {
                    window_sum += u64::from(window_max);
                    q.window_max_run_rows = q.window_max_run_rows.max(u64::from(window_max));
                    q.windows += 1;
                    for s in touched.drain(..) {
                        window_counts[s as usize] = 0;
                    }
                    window_fill = 0;
                    window_max = 0;
                }
            }
        }
        let share = if shard.header.rows == 0 {
            0.0
        } else {
            f64::from(shard_max) / shard.header.rows as f64
        };
        q.shard_max_run_share.push(share);
    }
    if window_fill > 0 {
        window_sum += u64::from(window_max);
        q.window_max_run_rows = q.window_max_run_rows.max(u64::from(window_max));
        q.windows += 1;
    }
    q.window_mean_max_run_rows = if q.windows == 0 {
        0.0
    } else {
        window_sum as f64 / q.windows as f64
    };
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quality(shard: f64, run: f64) -> Quality {
        Quality {
            shard_max_run_share: vec![0.001, shard],
            largest_run_share: run,
            ..Quality::default()
        }
    }

    #[test]
    fn a_goal_one_run_exceeds_is_out_of_reach_not_missed() {
        assert_eq!(quality(0.015, 0.01).verdict(), "goal ≤ 2%: met");
        assert!(
            quality(0.068, 0.067).verdict().contains(
                "out of reach for this pack: its longest run alone is 6.700% of all rows"
            )
        );
        assert!(
            quality(0.03, 0.01)
                .verdict()
                .starts_with("goal ≤ 2%: missed")
        );
    }
}
