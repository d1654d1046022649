//! What becomes of every input run and row, decided before anything is copied: run ids in
//! output order (duplicates kept as findings or left out with dedupe), and per input how its
//! rows are rewritten.

use crate::error::{Result, err};

use super::source::Source;
use crate::findings::{DUPLICATE_RUN, Duplicates, Tally, duplicate_detail};
use crate::format::metadata::FindingRecord;
use crate::format::valuation::ValuationTable;
use crate::pack::families::Family;
use crate::pack::shards::RunSlots;

/// What becomes of every input run: its output id (None: left out as a duplicate), decided
/// over all inputs in output order before anything is copied.
pub(super) struct Assignment {
    /// Per input, per run slot.
    pub(super) out_ids: Vec<Vec<Option<u32>>>,
    /// `duplicate_run` findings of the duplicates kept.
    pub(super) duplicates: Tally,
    /// Runs left out with dedupe: (source, reason).
    pub(super) left_out: Vec<(String, String)>,
    pub(super) runs: u64,
}

pub(super) fn assign_runs(sources: &[Source], dedupe: bool) -> Result<Assignment> {
    let mut seen = Duplicates::default();
    let mut a = Assignment {
        out_ids: Vec::with_capacity(sources.len()),
        duplicates: Tally::default(),
        left_out: Vec::new(),
        runs: 0,
    };
    for src in sources {
        let mut ids = Vec::with_capacity(src.runs.len());
        for (slot, fp) in src.fingerprints.iter().enumerate() {
            let next =
                u32::try_from(a.runs).map_err(|_| err!(Unsupported, "more than 2^32 runs"))?;
            let name = src.describe_run(slot);
            let Some(kept) = seen.get(fp).cloned() else {
                seen.insert(*fp, (next, name));
                ids.push(Some(next));
                a.runs += 1;
                continue;
            };
            let detail = duplicate_detail(&kept, fp);
            if dedupe {
                a.left_out.push((name, format!("duplicate: {detail}")));
                ids.push(None);
                continue;
            }
            let example = FindingRecord {
                kind: DUPLICATE_RUN.into(),
                run_id: Some(next),
                source_path: name,
                line: None,
                step_index: None,
                detail,
            };
            a.duplicates.add(DUPLICATE_RUN, 1, [example]);
            ids.push(Some(next));
            a.runs += 1;
        }
        a.out_ids.push(ids);
    }
    Ok(a)
}

/// How one input's rows are rewritten: run ids to their output numbers (rows of runs left out
/// dropped), valuation ids re-coded; `identity` when nothing changes (usually the first input),
/// so its rows are written as read and the CRC computed to verify them is also the output's.
pub(super) struct Plan<'a> {
    pub(super) src: &'a Source,
    pub(super) slots: RunSlots,
    /// Output id per run slot; None for a run left out.
    pub(super) out_ids: &'a [Option<u32>],
    pub(super) drops: bool,
    pub(super) valuations: Option<[u8; 256]>,
    pub(super) identity: bool,
    /// The input's companion families the output carries, in the output's order.
    pub(super) families: Vec<&'a Family>,
}

impl<'a> Plan<'a> {
    pub(super) fn new(
        src: &'a Source,
        out_ids: &'a [Option<u32>],
        valuations: &ValuationTable,
        carried: &[String],
    ) -> Plan<'a> {
        let old_ids: Vec<u32> = src.runs.iter().map(|r| r.id as u32).collect();
        let vmap = valuation_map(&src.valuations, valuations);
        let identity = vmap.is_none()
            && old_ids
                .iter()
                .zip(out_ids)
                .enumerate()
                .all(|(i, (&id, out))| id as usize == i && *out == Some(id));
        Plan {
            src,
            slots: RunSlots::new(&old_ids),
            out_ids,
            drops: out_ids.iter().any(Option::is_none),
            valuations: vmap,
            identity,
            families: carried
                .iter()
                .map(|name| src.companions.family(name).expect("every input has it"))
                .collect(),
        }
    }

    /// The output id of input run `old`: None when the input does not list it, Some(None)
    /// when it is left out.
    pub(super) fn output_id(&self, old: u32) -> Option<Option<u32>> {
        self.slots.get(old).map(|slot| self.out_ids[slot as usize])
    }

    /// The output ids of the runs carried, in order.
    pub(super) fn carried(&self) -> Vec<u32> {
        self.out_ids.iter().flatten().copied().collect()
    }

    pub(super) fn run_count(&self) -> u32 {
        self.src.runs.len() as u32
    }
}

/// Per-input id maps: input valuation id → output id (None when identical).
fn valuation_map(from: &ValuationTable, to: &ValuationTable) -> Option<[u8; 256]> {
    let mut map = [0u8; 256];
    let mut identity = true;
    for (id, name) in from.names().iter().enumerate() {
        map[id] = to.id(name).expect("every name was unified");
        identity &= map[id] as usize == id;
    }
    (!identity).then_some(map)
}
