//! The `search` companion family: the expectimax statistics the current logger writes at the
//! end of every row (`"search":{"used":…,"total_nodes":…,…}`), kept by `pack --search-stats`
//! as one structured `.npy` row per step row. This module owns that dtype: its fields in log
//! order, their widths, and the bytes of one row.

/// The family's name: files `search-NNNNN.npy` (or `search.npy`) beside the shards.
pub const FAMILY: &str = "search";

/// The 14 statistics after `used`, under their log names and in log order. All but
/// `cache_hit_rate` (a percentage) are non-negative integer counts.
pub const FIELDS: [&str; 14] = [
    "total_nodes",
    "move_nodes",
    "tile_nodes",
    "tile_branches",
    "eval_calls",
    "prune_score",
    "prune_depth",
    "prune_prob",
    "cache_lookups",
    "cache_hits",
    "cache_updates",
    "cache_collisions",
    "cache_hit_rate",
    "max_move_depth",
];

/// Index of `cache_hit_rate` in [`FIELDS`]; every other field is a count.
pub const HIT_RATE: usize = 12;

/// `dtype.descr` of a row: `used` as a NumPy bool, every count as `<u8` (the logger prints them
/// as 64-bit integers and a depth-7 search counts far beyond 2^16; the parser refuses a count
/// above 2^64 − 1 rather than wrap), `cache_hit_rate` as `<f4`. Packed, no padding: 109 bytes.
pub const DESCR: &str = "[('used', '|b1'), ('total_nodes', '<u8'), ('move_nodes', '<u8'), \
('tile_nodes', '<u8'), ('tile_branches', '<u8'), ('eval_calls', '<u8'), ('prune_score', '<u8'), \
('prune_depth', '<u8'), ('prune_prob', '<u8'), ('cache_lookups', '<u8'), ('cache_hits', '<u8'), \
('cache_updates', '<u8'), ('cache_collisions', '<u8'), ('cache_hit_rate', '<f4'), \
('max_move_depth', '<u8')]";

/// Bytes of one row: `used`, 13 counts of 8 bytes, the hit rate's 4.
pub const ROW_BYTES: usize = 1 + 13 * 8 + 4;

/// One row's statistics. A row without them (`used` false with `null` counters, `"search":
/// null`, or no `search` object at all) is the default: `used` false, every field 0.
///
/// ```
/// use dataset_packer::format::search::{SearchStats, ROW_BYTES};
/// let mut s = SearchStats::default();
/// s.used = true;
/// s.counts[0] = 396; // total_nodes
/// s.cache_hit_rate = 24.0;
/// let bytes = s.to_bytes();
/// assert_eq!(bytes.len(), ROW_BYTES);
/// assert_eq!(SearchStats::from_bytes(&bytes), s);
/// assert_eq!(s.total_nodes(), 396);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SearchStats {
    pub used: bool,
    /// The 13 counts of [`FIELDS`] in log order, `cache_hit_rate` left out (so
    /// `max_move_depth` is last); a `null` count is 0.
    pub counts: [u64; 13],
    /// `null` is 0.
    pub cache_hit_rate: f32,
}

/// One field's value: a count, or the hit rate (a percentage).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldValue {
    Count(u64),
    Rate(f32),
}

/// Where field `k` of [`FIELDS`] is kept in [`SearchStats::counts`]; None for
/// `cache_hit_rate`, the one field that is not a count.
///
/// ```
/// use dataset_packer::format::search::count_slot;
/// assert_eq!(count_slot(0), Some(0)); // total_nodes
/// assert_eq!(count_slot(12), None); // cache_hit_rate
/// assert_eq!(count_slot(13), Some(12)); // max_move_depth
/// ```
pub const fn count_slot(k: usize) -> Option<usize> {
    if k < HIT_RATE {
        Some(k)
    } else if k == HIT_RATE {
        None
    } else {
        Some(k - 1)
    }
}

impl SearchStats {
    /// The nodes the search visited for this move (`total_nodes`).
    pub fn total_nodes(&self) -> u64 {
        self.counts[0]
    }

    /// The 14 fields with their values, in log order ([`FIELDS`]).
    ///
    /// ```
    /// use dataset_packer::format::search::{FieldValue, SearchStats};
    /// let s = SearchStats { cache_hit_rate: 24.5, ..Default::default() };
    /// let (name, value) = s.fields().nth(12).unwrap();
    /// assert_eq!((name, value), ("cache_hit_rate", FieldValue::Rate(24.5)));
    /// ```
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, FieldValue)> + '_ {
        FIELDS.iter().enumerate().map(|(k, name)| {
            let value = match count_slot(k) {
                Some(c) => FieldValue::Count(self.counts[c]),
                None => FieldValue::Rate(self.cache_hit_rate),
            };
            (*name, value)
        })
    }

    /// The row's bytes in the family's dtype ([`DESCR`]).
    pub fn to_bytes(&self) -> [u8; ROW_BYTES] {
        let mut out = [0u8; ROW_BYTES];
        out[0] = u8::from(self.used);
        let mut at = 1;
        for (_, value) in self.fields() {
            match value {
                FieldValue::Count(c) => {
                    out[at..at + 8].copy_from_slice(&c.to_le_bytes());
                    at += 8;
                }
                FieldValue::Rate(r) => {
                    out[at..at + 4].copy_from_slice(&r.to_le_bytes());
                    at += 4;
                }
            }
        }
        out
    }

    /// A row read back from the family's bytes (the first [`ROW_BYTES`] of `b`).
    pub fn from_bytes(b: &[u8]) -> SearchStats {
        let mut stats = SearchStats {
            used: b[0] != 0,
            ..SearchStats::default()
        };
        let mut at = 1;
        for k in 0..FIELDS.len() {
            match count_slot(k) {
                Some(c) => {
                    stats.counts[c] = u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
                    at += 8;
                }
                None => {
                    stats.cache_hit_rate = f32::from_le_bytes(b[at..at + 4].try_into().expect("4"));
                    at += 4;
                }
            }
        }
        stats
    }
}

/// The session fact counting the rows whose statistics were read but not kept (packed without
/// `--search-stats`): rows whose `search` object says `"used":true`.
pub const ROWS_NOT_KEPT: &str = "search_rows_not_kept";
