//! Run fingerprints: a 128-bit content hash of one run (XXH3-128) that is the same however the
//! game was logged or packed, so a pack can tell when a game enters it twice.
//!
//! What is hashed, in this order (the definition users read is in `docs/format.md`):
//! 1. the tag `dataset-packer run fingerprint v1\n`;
//! 2. the run's `runs` facts: `seed`, `steps`, `max_score`, `highest_tile`, each as 8 bytes
//!    little-endian (two's complement);
//! 3. every row of the run in row order, as its 48 packed bytes with `run_id` (bytes 0..4) set
//!    to zero and `valuation_type` (byte 23) replaced by the run's *canonical* valuation id:
//!    `search` 0, `tuple11` 1, `tuple10` 2, and every other name 3, 4, … in the order it first
//!    appears in the run's rows;
//! 4. those other names in canonical order, each as a 4-byte little-endian byte length and
//!    its UTF-8 bytes, then their count as 4 bytes little-endian.
//!
//! Nothing else counts: not the run id, not the pack's valuation ids, not file names, folders,
//! gzip layout, JSON spelling or key order, and not `run_details`.

use crate::error::{Result, fail};
use xxhash_rust::xxh3::Xxh3;

use crate::format::row::{ROW_BYTES, offset};
use crate::format::valuation::STANDARD_NAMES;

const TAG: &[u8] = b"dataset-packer run fingerprint v1\n";

/// Rows gathered before they are fed to the hash (the hash is fastest on large inputs).
const BUFFER_ROWS: usize = 1365;

/// A run's fingerprint; written as 32 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub u128);

impl Fingerprint {
    /// Parses the 32-hex-digit form written to `run_details.fingerprint`.
    pub fn from_hex(text: &str) -> Option<Fingerprint> {
        let well_formed = text.len() == 32
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        well_formed
            .then(|| u128::from_str_radix(text, 16).ok())
            .flatten()
            .map(Fingerprint)
    }

    /// The first 12 hex digits, for messages.
    pub fn short(&self) -> String {
        self.to_string()[..12].to_string()
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// The run facts that enter the fingerprint (the `runs` row without its id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunFacts {
    pub seed: i64,
    pub steps: u64,
    pub max_score: i64,
    pub highest_tile: i64,
}

/// Hashes one run's rows as they stream by, in row order, in pieces of any size.
pub struct RunHasher<'n> {
    hasher: Xxh3,
    /// The table the rows' `valuation_type` ids index (pack ids, or a parsed run's local ids).
    names: &'n [String],
    /// Row valuation id → canonical id, `None` until first seen.
    canonical: [Option<u8>; 256],
    /// Names after the standard three, in canonical order.
    extra: Vec<&'n str>,
    buffer: Vec<u8>,
    rows: u64,
    facts: RunFacts,
}

impl<'n> RunHasher<'n> {
    /// Starts a run whose rows carry valuation ids into `names`.
    pub fn new(facts: RunFacts, names: &'n [String]) -> RunHasher<'n> {
        let mut hasher = Xxh3::new();
        hasher.update(TAG);
        hasher.update(&facts.seed.to_le_bytes());
        hasher.update(&facts.steps.to_le_bytes());
        hasher.update(&facts.max_score.to_le_bytes());
        hasher.update(&facts.highest_tile.to_le_bytes());
        RunHasher {
            hasher,
            names,
            canonical: [None; 256],
            extra: Vec::new(),
            buffer: Vec::with_capacity(BUFFER_ROWS * ROW_BYTES),
            rows: 0,
            facts,
        }
    }

    /// Feeds the next rows of the run (48-byte rows, a whole number of them).
    pub fn update(&mut self, mut rows: &[u8]) -> Result<()> {
        debug_assert_eq!(rows.len() % ROW_BYTES, 0);
        let count = (rows.len() / ROW_BYTES) as u64;
        while !rows.is_empty() {
            // As many rows as the buffer has room for, copied at once, then the two fields
            // that do not count rewritten in place.
            let room = self.buffer.capacity() - self.buffer.len();
            let (block, rest) = rows.split_at(room.min(rows.len()));
            let at = self.buffer.len();
            self.buffer.extend_from_slice(block);
            for row in self.buffer[at..].chunks_exact_mut(ROW_BYTES) {
                row[offset::RUN_ID..offset::RUN_ID + 4].fill(0);
                let id = row[offset::VALUATION_TYPE];
                row[offset::VALUATION_TYPE] = match self.canonical[id as usize] {
                    Some(c) => c,
                    None => canonical_id(&mut self.canonical, &mut self.extra, self.names, id)?,
                };
            }
            if self.buffer.len() == self.buffer.capacity() {
                self.hasher.update(&self.buffer);
                self.buffer.clear();
            }
            rows = rest;
        }
        self.rows += count;
        Ok(())
    }

    /// The fingerprint; fails when the rows fed differ in number from the run's `steps`.
    pub fn finish(mut self) -> Result<Fingerprint> {
        if self.rows != self.facts.steps {
            fail!(Corrupt, 
                "the run has {} rows but runs.steps says {}",
                self.rows,
                self.facts.steps
            );
        }
        self.hasher.update(&self.buffer);
        for name in &self.extra {
            self.hasher.update(&(name.len() as u32).to_le_bytes());
            self.hasher.update(name.as_bytes());
        }
        self.hasher.update(&(self.extra.len() as u32).to_le_bytes());
        Ok(Fingerprint(self.hasher.digest128()))
    }
}

/// The canonical id of the row id `id`, the first time it is seen: standard names keep their
/// ids, other names are numbered in order of first appearance.
fn canonical_id<'n>(
    canonical: &mut [Option<u8>; 256],
    extra: &mut Vec<&'n str>,
    names: &'n [String],
    id: u8,
) -> Result<u8> {
    let Some(name) = names.get(id as usize) else {
        fail!(Corrupt, "valuation_type id {id} is not in the valuation table");
    };
    let c = match STANDARD_NAMES.iter().position(|s| s == name) {
        Some(standard) => standard as u8,
        None => {
            extra.push(name);
            (STANDARD_NAMES.len() + extra.len() - 1) as u8
        }
    };
    canonical[id as usize] = Some(c);
    Ok(c)
}

/// The fingerprint of a run whose rows are all in one buffer.
pub fn of_rows(facts: RunFacts, rows: &[u8], names: &[String]) -> Result<Fingerprint> {
    let mut h = RunHasher::new(facts, names);
    h.update(rows)?;
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::row::StepRow;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn rows(specs: &[(u32, u8, f32)]) -> Vec<u8> {
        specs
            .iter()
            .enumerate()
            .flat_map(|(i, &(run_id, valuation_type, ev))| {
                StepRow {
                    run_id,
                    step_index: i as u32,
                    board: 0x1200_0000_0000_0000,
                    valuation_type,
                    ev_legal: 0b1111,
                    branch_evs: [ev, 0.0, 0.0, 0.0],
                    ..Default::default()
                }
                .to_bytes()
            })
            .collect()
    }

    const FACTS: RunFacts = RunFacts {
        seed: 7,
        steps: 3,
        max_score: 100,
        highest_tile: 8,
    };

    #[test]
    fn ignores_run_ids_valuation_ids_and_chunking() {
        let pack_a = names(&["search", "tuple11", "tuple10", "nn", "mcts"]);
        let pack_b = names(&["search", "tuple11", "tuple10", "mcts", "x", "nn"]);
        let a = rows(&[(0, 4, 1.0), (0, 3, 2.0), (0, 0, 3.0)]);
        let b = rows(&[(9, 3, 1.0), (9, 5, 2.0), (9, 0, 3.0)]);
        let fa = of_rows(FACTS, &a, &pack_a).unwrap();
        assert_eq!(fa, of_rows(FACTS, &b, &pack_b).unwrap());
        let mut h = RunHasher::new(FACTS, &pack_a);
        for row in a.chunks(ROW_BYTES) {
            h.update(row).unwrap();
        }
        assert_eq!(h.finish().unwrap(), fa);
        assert_eq!(Fingerprint::from_hex(&fa.to_string()), Some(fa));
        assert_eq!(fa.to_string().len(), 32);
    }

    #[test]
    fn any_change_changes_it() {
        let t = names(&["search", "tuple11", "tuple10", "nn"]);
        let base = rows(&[(0, 0, 1.0), (0, 3, 2.0), (0, 1, 3.0)]);
        let f = of_rows(FACTS, &base, &t).unwrap();
        let one_ulp = rows(&[
            (0, 0, 1.0),
            (0, 3, f32::from_bits(2.0f32.to_bits() + 1)),
            (0, 1, 3.0),
        ]);
        assert_ne!(f, of_rows(FACTS, &one_ulp, &t).unwrap());
        let other_name = names(&["search", "tuple11", "tuple10", "nn2"]);
        assert_ne!(f, of_rows(FACTS, &base, &other_name).unwrap());
        let other_facts = RunFacts { seed: 8, ..FACTS };
        assert_ne!(f, of_rows(other_facts, &base, &t).unwrap());
        for byte in 4..ROW_BYTES {
            if byte == offset::VALUATION_TYPE {
                continue;
            }
            let mut changed = base.clone();
            changed[ROW_BYTES + byte] ^= 1;
            assert_ne!(f, of_rows(FACTS, &changed, &t).unwrap(), "byte {byte}");
        }
    }

    #[test]
    fn empty_runs_differ_by_their_facts_and_row_counts_are_checked() {
        let t = names(&["search", "tuple11", "tuple10"]);
        let empty = RunFacts { steps: 0, ..FACTS };
        let f = of_rows(empty, &[], &t).unwrap();
        assert_ne!(f, of_rows(RunFacts { seed: 1, ..empty }, &[], &t).unwrap());
        assert!(of_rows(FACTS, &[], &t).is_err());
        assert!(of_rows(FACTS, &rows(&[(0, 9, 1.0); 3]), &t).is_err());
    }

    #[test]
    fn parses_only_its_own_form() {
        assert!(Fingerprint::from_hex("00").is_none());
        assert!(Fingerprint::from_hex(&"A".repeat(32)).is_none());
        assert!(Fingerprint::from_hex(&"+".repeat(32)).is_none());
        assert_eq!(
            Fingerprint::from_hex(&format!("{:032x}", 1)),
            Some(Fingerprint(1))
        );
    }
}
