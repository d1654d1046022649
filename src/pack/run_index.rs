//! Where each run's rows start. Building the `run_index` table of a pack written from rows
//! that already carry their output run ids (merge, export): [`RunStarts`] watches the rows
//! stream into a [`ShardWriter`] and records where each run's first row landed. Rebuilding it
//! for a pack that records none (the reference packer's): [`locate_unindexed`].

use crate::error::{Result, fail};

use crate::format::metadata::RowLocation;
use crate::format::row::{ROW_BYTES, offset};
use crate::pack::shard_writer::ShardWriter;
use crate::pack::shards::{self, Shard};

/// Tracks where each output run starts while rows stream by (runs are contiguous and in id
/// order in unshuffled packs), giving runs without rows the position where they would have
/// started.
pub struct RunStarts {
    /// Output ids in order, and the global row found for each.
    ids: Vec<u32>,
    starts: Vec<Option<u64>>,
    next: usize,
}

impl RunStarts {
    /// A tracker for the output runs `ids`, in ascending order.
    pub fn new(ids: Vec<u32>) -> RunStarts {
        RunStarts {
            starts: vec![None; ids.len()],
            ids,
            next: 0,
        }
    }

    /// Looks at `rows` (48-byte rows, already carrying output ids) that become global rows
    /// `first_global..` of the output, in the order they are written.
    pub fn observe(&mut self, rows: &[u8], first_global: u64) {
        let mut last = None;
        for (i, row) in rows.chunks_exact(ROW_BYTES).enumerate() {
            let id = u32::from_le_bytes(row[..4].try_into().unwrap());
            if last == Some(id) {
                continue;
            }
            last = Some(id);
            // Runs before this one that have not been seen had no rows.
            while self.next < self.ids.len() && self.ids[self.next] <= id {
                self.starts[self.next].get_or_insert(first_global + i as u64);
                self.next += 1;
            }
        }
    }

    /// Every run's first-row location in `writer`'s shards (which hold every row observed),
    /// in id order; runs never seen start at the end.
    pub fn finish(self, writer: &ShardWriter) -> Vec<RowLocation> {
        let end = writer.total_rows();
        self.starts
            .into_iter()
            .map(|start| writer.location_of(start.unwrap_or(end)))
            .collect()
    }
}

/// Where run `id` (of `steps` rows) starts in an unshuffled pack without a `run_index` table,
/// rebuilt from the `runs` table and the rows: runs lie in id order, each `runs.steps` rows
/// long, and the rows say so (the counts add up to the shards' rows, the run's first and last
/// rows carry its id and the rows either side of them do not). A pack that breaks this is
/// reported, not read at the wrong place.
pub fn locate_unindexed(
    conn: &rusqlite::Connection,
    shards: &[Shard],
    id: i64,
    steps: u64,
) -> Result<RowLocation> {
    let (before, total): (i64, i64) = conn.query_row(
        "SELECT COALESCE(SUM(CASE WHEN id < ?1 THEN steps END), 0), COALESCE(SUM(steps), 0) FROM runs",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let starts = shards::shard_starts(shards);
    let rows = *starts.last().expect("a start per shard and the end");
    if total != rows as i64 || before < 0 {
        fail!(Corrupt, 
            "the pack records no run index, and its runs table counts {total} rows where the shards hold {rows}: the run's place cannot be rebuilt (run `dataset-packer validate`)"
        );
    }
    let first = before as u64;
    let run_id_at = |global: u64| -> Result<Option<u32>> {
        if global >= rows {
            return Ok(None);
        }
        let si = starts.partition_point(|&s| s <= global) - 1;
        let row = shards[si].read_aligned(global - starts[si], 1)?;
        Ok(Some(u32::from_le_bytes(
            row[offset::RUN_ID..offset::RUN_ID + 4].try_into().unwrap(),
        )))
    };
    let this = u32::try_from(id).ok();
    let mut wrong = Vec::new();
    if steps > 0 {
        for at in [first, first + steps - 1] {
            if run_id_at(at)? != this {
                wrong.push(at);
            }
        }
    }
    for at in [first.checked_sub(1), Some(first + steps)]
        .into_iter()
        .flatten()
    {
        if this.is_some() && run_id_at(at)? == this {
            wrong.push(at);
        }
    }
    if let Some(at) = wrong.first() {
        fail!(Corrupt, 
            "the pack records no run index, and its rows are not where the runs table places run {id} (global rows {first}..{}; row {at} disagrees): the pack is not in run order (run `dataset-packer validate`)",
            first + steps
        );
    }
    let si = starts[..shards.len()]
        .partition_point(|&s| s <= first)
        .max(1)
        - 1;
    Ok(RowLocation {
        shard: si as u32,
        row_offset: first - starts[si],
        global_row: first,
    })
}
