//! Building the `run_index` table of a pack written from rows that already carry their output
//! run ids (merge, export): [`RunStarts`] watches the rows stream into a [`ShardWriter`] and
//! records where each run's first row landed.

use crate::format::metadata::RowLocation;
use crate::format::row::ROW_BYTES;
use crate::shard_writer::ShardWriter;

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
