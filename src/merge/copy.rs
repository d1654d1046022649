//! The copy: every input's rows (and its carried companions' rows) into the staging folder in
//! output order. Two threads share the work: one reads the inputs a chunk at a time
//! (checksumming them against the recorded CRCs, rewriting ids, checksumming what comes out),
//! the other writes the shards and, as each input ends, its runs into the metadata.

use std::sync::mpsc;

use crate::error::{Result, fail};

use super::plan::Plan;
use super::record::record_runs;
use crate::findings::RowFindings;
use crate::format::metadata::MetadataWriter;
use crate::format::row::{
    ROW_BYTES, StepRow, legacy_rows_to_aligned, recompute_ev_legal, remap_rows,
};
use crate::pack::families;
use crate::pack::run_index::RunStarts;
use crate::pack::shard_writer::ShardWriter;
use crate::pack::shards::Shard;
use crate::progress::{Bar, Observer};

/// Rows copied per read (≈ 1 MiB: a chunk stays in cache from read to write).
const COPY_ROWS: usize = 21_845;

/// Chunks in flight between the threads (each ≈ 1 MiB).
const PIECES_IN_FLIGHT: usize = 3;

/// Output rows of the steps (48-byte) and of each carried companion family, with CRC-32Cs.
#[derive(Default)]
struct Chunk {
    rows: Vec<u8>,
    crc: u32,
    companions: Vec<(Vec<u8>, u32)>,
}

/// What the reading thread hands the writing thread, in output order.
enum Piece {
    Rows(Chunk),
    /// Every row of input `index` has been handed over; `starts` saw them go by, `dropped`
    /// counted the findings of the rows left out.
    InputDone {
        index: usize,
        starts: RunStarts,
        dropped: RowFindings,
    },
}

/// Where the writing side puts rows: the steps and each carried companion family.
pub(super) struct Writers<'a> {
    pub(super) steps: &'a mut ShardWriter,
    pub(super) companions: Vec<&'a mut ShardWriter>,
}

/// Copies every input's rows through `writers`, recording each input's runs and findings in
/// `db`. Returns how many rows of legacy inputs had their `ev_legal` changed by the upgrade.
pub(super) fn copy_rows(
    plans: &[Plan],
    writers: &mut Writers,
    db: &MetadataWriter,
    observer: &Observer,
) -> Result<u64> {
    let (pieces_tx, pieces) = mpsc::sync_channel(PIECES_IN_FLIGHT);
    let (spare_tx, spare) = mpsc::channel();
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || read_inputs(plans, pieces_tx, &spare));
        let written = write_pieces(pieces, spare_tx, plans, writers, db, observer);
        let read = reader.join().expect("the reading thread does not panic");
        // A reading error explains a writing one (the writer stops when the reader does).
        let changed = read?;
        written.map(|()| changed)
    })
}

/// The reading side: every input's rows in order (and its companion rows), as output rows with
/// their CRCs, and where each run starts. Stops early (with Ok) when the writing side has gone.
/// Returns how many rows of legacy inputs had their `ev_legal` changed by the upgrade.
fn read_inputs(
    plans: &[Plan],
    pieces: mpsc::SyncSender<Piece>,
    spare: &mpsc::Receiver<Chunk>,
) -> Result<u64> {
    let mut global_row = 0u64;
    let mut ev_legal_changed = 0u64;
    let mut keep = Vec::new();
    for (index, plan) in plans.iter().enumerate() {
        let src = plan.src;
        let mut starts = RunStarts::new(plan.carried());
        let mut dropped = RowFindings::new(src.runs.len(), true);
        for (si, shard) in src.shards.iter().enumerate() {
            let file = shard.open()?;
            let companion_files = plan
                .families
                .iter()
                .map(|f| f.open(si))
                .collect::<crate::Result<Vec<_>>>()?;
            let mut data_crc = 0u32;
            let mut companion_crcs = vec![0u32; companion_files.len()];
            let mut done = 0u64;
            while done < shard.header.rows {
                let n_rows = (shard.header.rows - done).min(COPY_ROWS as u64);
                let next = done + n_rows;
                if next < shard.header.rows {
                    file.prefetch(next, (shard.header.rows - next).min(COPY_ROWS as u64));
                }
                let mut chunk = spare.try_recv().unwrap_or_default();
                file.read_raw_into(done, n_rows, &mut chunk.rows)?;
                let input_crc = crate::crc::crc32c(&chunk.rows);
                data_crc = crate::crc::combine(data_crc, input_crc, chunk.rows.len());
                chunk.crc = rewrite(
                    plan,
                    shard,
                    &mut chunk.rows,
                    input_crc,
                    &mut dropped,
                    &mut keep,
                    &mut ev_legal_changed,
                )?;
                chunk
                    .companions
                    .resize_with(companion_files.len(), Default::default);
                for (k, cf) in companion_files.iter().enumerate() {
                    let (buf, crc) = &mut chunk.companions[k];
                    cf.read_rows(done, n_rows, buf)?;
                    *crc = crate::crc::crc32c(buf);
                    companion_crcs[k] = crate::crc::combine(companion_crcs[k], *crc, buf.len());
                    if plan.drops {
                        families::keep_rows(buf, plan.families[k].row_bytes, &keep);
                        *crc = crate::crc::crc32c(buf);
                    }
                }
                starts.observe(&chunk.rows, global_row);
                global_row += (chunk.rows.len() / ROW_BYTES) as u64;
                if pieces.send(Piece::Rows(chunk)).is_err() {
                    return Ok(ev_legal_changed);
                }
                done = next;
            }
            src.verify_checksum(si, data_crc)?;
            for (cf, crc) in companion_files.iter().zip(companion_crcs) {
                src.verify_companion(cf, crc)?;
            }
        }
        let done = Piece::InputDone {
            index,
            starts,
            dropped,
        };
        if pieces.send(done).is_err() {
            return Ok(ev_legal_changed);
        }
    }
    Ok(ev_legal_changed)
}

/// Turns one chunk of an input (as read from its file, with its CRC) into output rows in
/// place, and returns their CRC: legacy rows converted (their `ev_legal` recomputed from the
/// board, the rows it changes counted in `ev_legal_changed`), run and valuation ids rewritten and
/// rows of runs left out dropped (their findings counted in `dropped`, and `keep` saying which
/// rows stayed), unless the plan changes nothing (then the CRC is the input's).
fn rewrite(
    plan: &Plan,
    shard: &Shard,
    rows: &mut Vec<u8>,
    input_crc: u32,
    dropped: &mut RowFindings,
    keep: &mut Vec<bool>,
    ev_legal_changed: &mut u64,
) -> Result<u32> {
    let legacy = shard.is_legacy();
    if legacy {
        *rows = legacy_rows_to_aligned(rows);
        *ev_legal_changed += recompute_ev_legal(rows);
    }
    let mut unknown = None;
    if plan.identity {
        unknown = run_ids(rows).find(|&id| id >= plan.run_count());
    } else if plan.drops {
        unknown = drop_left_out(plan, rows, dropped, keep);
    } else {
        remap_rows(
            rows,
            |old| match plan.output_id(old) {
                Some(Some(new)) => new,
                _ => *unknown.get_or_insert(old),
            },
            plan.valuations.as_ref(),
        );
    }
    if let Some(id) = unknown {
        fail!(
            Corrupt,
            "input {}: {} holds rows of run {id}, which its runs table lacks; nothing was written",
            plan.src.path.display(),
            shard.name
        );
    }
    Ok(if plan.identity && !legacy {
        input_crc
    } else {
        crate::crc::crc32c(rows)
    })
}

/// Keeps the rows of carried runs (renumbered, valuation ids re-coded) and drops the others,
/// counting their findings and noting in `keep` which rows stayed; returns a run id the input
/// does not list, if a row has one.
fn drop_left_out(
    plan: &Plan,
    rows: &mut Vec<u8>,
    dropped: &mut RowFindings,
    keep: &mut Vec<bool>,
) -> Option<u32> {
    keep.clear();
    let mut kept = 0;
    for i in 0..rows.len() / ROW_BYTES {
        let at = i * ROW_BYTES;
        let old = u32::from_le_bytes(rows[at..at + 4].try_into().unwrap());
        let Some(slot) = plan.slots.get(old) else {
            return Some(old);
        };
        match plan.out_ids[slot as usize] {
            None => {
                dropped.observe(slot, &StepRow::from_bytes(&rows[at..at + ROW_BYTES]));
                keep.push(false);
            }
            Some(new) => {
                rows.copy_within(at..at + ROW_BYTES, kept);
                let row = &mut rows[kept..kept + ROW_BYTES];
                remap_rows(row, |_| new, plan.valuations.as_ref());
                kept += ROW_BYTES;
                keep.push(true);
            }
        }
    }
    rows.truncate(kept);
    None
}

/// The run ids of 48-byte rows.
fn run_ids(rows: &[u8]) -> impl Iterator<Item = u32> + '_ {
    rows.chunks_exact(ROW_BYTES)
        .map(|r| u32::from_le_bytes(r[..4].try_into().unwrap()))
}

/// The writing side: rows into the shard writers, and each input's runs and findings into the
/// metadata once all its rows are written (their run-index positions are known then).
fn write_pieces(
    pieces: mpsc::Receiver<Piece>,
    spare: mpsc::Sender<Chunk>,
    plans: &[Plan],
    writers: &mut Writers,
    db: &MetadataWriter,
    observer: &Observer,
) -> Result<()> {
    let total_rows: u64 = plans.iter().map(|p| p.src.rows()).sum();
    let bar = Bar::rows(observer, "merge", total_rows);
    for piece in pieces {
        match piece {
            Piece::Rows(chunk) => {
                writers.steps.write_rows_with_crc(&chunk.rows, chunk.crc)?;
                for (w, (rows, crc)) in writers.companions.iter_mut().zip(&chunk.companions) {
                    w.write_rows_with_crc(rows, *crc)?;
                }
                bar.inc((chunk.rows.len() / ROW_BYTES) as u64);
                let _ = spare.send(chunk);
            }
            Piece::InputDone {
                index,
                starts,
                dropped,
            } => record_runs(db, &plans[index], &starts.finish(writers.steps), dropped)?,
        }
    }
    bar.finish_and_clear();
    Ok(())
}
