//! Data-quality findings as the pack records them (`finding_counts` + first `findings`
//! examples): the tally every writer keeps, the recount from packed rows that commands
//! carrying a subset of runs need (`export --format pack`, `merge --dedupe`), and duplicate
//! runs, which are always found anew over the runs of the pack being written.

use std::collections::{BTreeMap, HashMap};

use crate::format::fingerprint::Fingerprint;
use crate::format::metadata::FindingRecord;
use crate::format::row::StepRow;

/// Examples of each finding kind kept for the summary and metadata.db.
pub const EXAMPLES_KEPT: usize = 20;

/// A run whose content equals an earlier run's (same fingerprint).
pub const DUPLICATE_RUN: &str = "duplicate_run";

/// The kinds [`RowFindings`] counts from packed rows and `runs` facts.
pub const RECOUNTABLE: [&str; 5] = [
    "illegal_move_played",
    "ev_on_illegal_move",
    "step_index_gap",
    "num_moves_mismatch",
    "empty_run",
];

/// Counts and first examples of each finding kind.
#[derive(Debug, Default)]
pub struct Tally {
    pub counts: BTreeMap<String, u64>,
    /// The examples found by this command (a pack being extended keeps its own).
    pub examples: Vec<FindingRecord>,
}

impl Tally {
    /// Adds `n` findings of `kind`, keeping examples while fewer than [`EXAMPLES_KEPT`] exist.
    pub fn add(&mut self, kind: &str, n: u64, examples: impl IntoIterator<Item = FindingRecord>) {
        if n == 0 {
            return;
        }
        let count = self.counts.entry(kind.to_string()).or_default();
        let room = EXAMPLES_KEPT.saturating_sub(*count as usize);
        *count += n;
        self.examples.extend(examples.into_iter().take(room));
    }

    pub fn count(&self, kind: &str) -> u64 {
        self.counts.get(kind).copied().unwrap_or(0)
    }
}

/// Finds the runs whose fingerprint equals an earlier run's, in the order runs are offered.
#[derive(Default)]
pub struct Duplicates {
    /// Fingerprint → the first run with it: (run id, how to name it).
    first: HashMap<Fingerprint, (u32, String)>,
}

impl Duplicates {
    /// The first run seen with `fingerprint`, or None (and `run` becomes that first run).
    pub fn check(
        &mut self,
        fingerprint: Fingerprint,
        run: (u32, String),
    ) -> Option<&(u32, String)> {
        use std::collections::hash_map::Entry;
        match self.first.entry(fingerprint) {
            Entry::Occupied(e) => Some(e.into_mut()),
            Entry::Vacant(e) => {
                e.insert(run);
                None
            }
        }
    }

    /// The first run seen with `fingerprint`, without recording anything.
    pub fn get(&self, fingerprint: &Fingerprint) -> Option<&(u32, String)> {
        self.first.get(fingerprint)
    }

    /// Records `run` as the first with `fingerprint` unless one was recorded already.
    pub fn insert(&mut self, fingerprint: Fingerprint, run: (u32, String)) {
        self.first.entry(fingerprint).or_insert(run);
    }
}

/// Why a duplicate run was left out, or what its `duplicate_run` finding says.
pub fn duplicate_detail(kept: &(u32, String), fingerprint: &Fingerprint) -> String {
    format!(
        "same content as run {} ({}), fingerprint {}",
        kept.0,
        kept.1,
        fingerprint.short()
    )
}

/// Counts the findings `pack` counts from raw rows again, from packed rows and `runs` facts.
pub struct RowFindings {
    pub counts: BTreeMap<&'static str, u64>,
    /// Previous step_index per run slot (gaps are only counted in run order).
    prev_step: Vec<Option<u32>>,
    in_order: bool,
}

impl RowFindings {
    /// A counter for `runs` run slots; `in_order` when each run's rows come in step order.
    pub fn new(runs: usize, in_order: bool) -> RowFindings {
        RowFindings {
            counts: BTreeMap::new(),
            prev_step: vec![None; runs],
            in_order,
        }
    }

    /// Whether step gaps were counted (the rows came in run order).
    pub fn in_order(&self) -> bool {
        self.in_order
    }

    fn add(&mut self, kind: &'static str, n: u64) {
        if n > 0 {
            *self.counts.entry(kind).or_default() += n;
        }
    }

    /// One row of the run in slot `slot`.
    pub fn observe(&mut self, slot: u32, r: &StepRow) {
        let legal = r.ev_legal;
        self.add(
            "illegal_move_played",
            u64::from(r.move_dir < 4 && legal & (1 << r.move_dir) == 0),
        );
        let evs_on_illegal = (0..4)
            .filter(|&k| r.branch_evs[k] != 0.0 && legal & (1 << k) == 0)
            .count();
        self.add("ev_on_illegal_move", evs_on_illegal as u64);
        if self.in_order {
            let prev = self.prev_step[slot as usize].replace(r.step_index);
            let gap = prev.is_some_and(|p| u64::from(r.step_index) != u64::from(p) + 1);
            self.add("step_index_gap", u64::from(gap));
        }
    }

    /// The run-level findings of one run: its sidecar's `num_moves` and its row count.
    pub fn run_level(&mut self, num_moves: Option<i64>, steps: i64) {
        self.add(
            "num_moves_mismatch",
            u64::from(num_moves.is_some_and(|n| n != steps)),
        );
        self.add("empty_run", u64::from(steps == 0));
    }
}
