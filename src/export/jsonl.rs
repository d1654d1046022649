//! `export --format jsonl`: rows back in the raw Macroxue row format, so `pack` of the export
//! gives the same shards byte for byte.
//!
//! One row per line, keys in the order `seed`, `step_index`, `max_rank`, `move`,
//! `valuation_type`, `board`, `branch_evs` (up, left, right, down, as the raw logs order them).
//! An EV of exactly +0.0 on an illegal move is written as `null` (what search rows log); every
//! other EV is written in the shortest decimal that parses back to the same f32. Output is one
//! `.jsonl` / `.jsonl.gz` file (the gzip file made of one member per piece, compressed in
//! parallel), or a folder with `run-NNNNNNNNNN.meta.json` + `.jsonl.gz` per run.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use flate2::Compression;
use flate2::write::GzEncoder;

use super::output::{StagedDir, StagedFile};
use super::{Piece, RowCounts, Selection, SourcePack, tally};
use crate::error::{Context, Result, fail};
use crate::format::board::{self, MOVE_NAMES};
use crate::format::metadata::{RunDetails, RunRow};
use crate::format::row::StepRow;
use crate::format::search::{self, FieldValue, SearchStats};
use crate::format::valuation::ValuationTable;
use crate::ordered::ordered_try_map;
use crate::pack::families::Family;
use crate::progress::{Bar, Observer};

/// gzip level of exported files: level 1 compresses about 3× faster than zlib's default 6
/// for files about 1.6× larger (measured on the 4M-row bench corpus).
const GZIP_LEVEL: u32 = 1;

/// What a JSONL export wrote.
pub struct Written {
    pub runs: usize,
    pub rows: u64,
    pub files: usize,
}

/// Whether an output path names a single JSONL file (gzip when `.gz`).
pub fn single_file_kind(path: &Path) -> Option<bool> {
    let name = path.file_name()?.to_str()?;
    if name.ends_with(".jsonl.gz") {
        Some(true)
    } else if name.ends_with(".jsonl") {
        Some(false)
    } else {
        None
    }
}

/// Base name of a run's files: zero-padded to 10 digits so names sort in run-id order.
pub fn run_base(run_id: i64) -> String {
    format!("run-{run_id:010}")
}

/// The files a folder export writes (and so may replace with --overwrite).
pub fn owns(name: &str) -> bool {
    let base = name
        .strip_suffix(".meta.json")
        .or_else(|| name.strip_suffix(".jsonl.gz"));
    base.and_then(|b| b.strip_prefix("run-"))
        .is_some_and(|d| d.len() == 10 && d.bytes().all(|c| c.is_ascii_digit()))
}

/// Formats pack rows as raw JSON lines.
pub struct RowFormatter {
    /// Each valuation id's name as a JSON string literal (quotes and escapes included).
    names: Vec<String>,
    /// Start each row with its `run_id` (a single file holding several runs).
    run_ids: bool,
    /// The pack's `search` family (`pack --search-stats`): each row ends with its `search`
    /// object, as the current logger writes it.
    search: Option<Family>,
}

impl RowFormatter {
    pub fn new(valuations: &ValuationTable) -> RowFormatter {
        let names = valuations
            .names()
            .iter()
            .map(|n| serde_json::to_string(n).expect("strings serialise"))
            .collect();
        RowFormatter {
            names,
            run_ids: false,
            search: None,
        }
    }

    /// Ends each row with its statistics from the `search` family (None: no `search` object).
    pub fn with_search(mut self, family: Option<&Family>) -> RowFormatter {
        self.search = family.cloned();
        self
    }

    /// Writes each row's pack `run_id` first (the raw format has none).
    pub fn with_run_ids(mut self, on: bool) -> RowFormatter {
        self.run_ids = on;
        self
    }

    /// Appends one row as a JSON line (with its `\n`), with its `search` object when given.
    pub fn write_row(
        &self,
        out: &mut Vec<u8>,
        r: &StepRow,
        search: Option<&SearchStats>,
    ) -> Result<()> {
        let name = self.names.get(r.valuation_type as usize).with_context(|| {
            format!(
                "valuation_type id {} is not in valuation_types.json",
                r.valuation_type
            )
        })?;
        let mv = MOVE_NAMES
            .get(r.move_dir as usize)
            .with_context(|| format!("move_dir {} is not a move", r.move_dir))?;
        let cells = board::unpack(r.board, r.tile_65536_mask);
        if self.run_ids {
            write!(out, "{{\"run_id\":{},", r.run_id)?;
        } else {
            out.push(b'{');
        }
        write!(
            out,
            "\"seed\":{},\"step_index\":{},\"max_rank\":{},\"move\":\"{mv}\",\"valuation_type\":{name},\"board\":[",
            r.seed, r.step_index, r.max_rank
        )?;
        for (i, c) in cells.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write!(out, "{c}")?;
        }
        out.extend_from_slice(b"],\"branch_evs\":{");
        // The raw logs order the keys up, left, right, down; the row stores up, down, left, right.
        for (i, (key, k)) in [("up", 0), ("left", 2), ("right", 3), ("down", 1)]
            .into_iter()
            .enumerate()
        {
            if i > 0 {
                out.push(b',');
            }
            write!(out, "\"{key}\":")?;
            write_ev(out, r.branch_evs[k], r.ev_legal & (1 << k) != 0)?;
        }
        out.push(b'}');
        if let Some(stats) = search {
            write_search(out, stats)?;
        }
        out.extend_from_slice(b"}\n");
        Ok(())
    }
}

/// `,"search":{…}` as the current logger writes it: `used`, then the 14 fields in log order;
/// all `null` on a row whose search was not used and counted nothing (how the logger writes
/// tuple rows), the numbers otherwise. The hit rate is the shortest decimal of its f32.
fn write_search(out: &mut Vec<u8>, s: &SearchStats) -> Result<()> {
    let nulls = !s.used && *s == SearchStats::default();
    write!(out, ",\"search\":{{\"used\":{}", s.used)?;
    for (name, value) in s.fields() {
        write!(out, ",\"{name}\":")?;
        match value {
            _ if nulls => out.extend_from_slice(b"null"),
            FieldValue::Count(c) => write!(out, "{c}")?,
            FieldValue::Rate(r) if !r.is_finite() => {
                fail!(Corrupt, "cache_hit_rate {r} is not finite")
            }
            FieldValue::Rate(r) => write!(out, "{r}")?,
        }
    }
    out.push(b'}');
    Ok(())
}

/// One EV: `null` for +0.0 on an illegal move, else the shortest round-trip decimal.
fn write_ev(out: &mut Vec<u8>, ev: f32, legal: bool) -> Result<()> {
    if !legal && ev.to_bits() == 0 {
        out.extend_from_slice(b"null");
    } else if ev.is_finite() {
        // `{}` of an f32 is the shortest decimal that reads back as the same f32, never in
        // exponent form (plain digits are what the packer's fast parser takes).
        write!(out, "{ev}")?;
    } else {
        fail!(Corrupt, "branch EV {ev} is not finite");
    }
    Ok(())
}

/// The sidecar of a run, rebuilt from `runs` and `run_details` (keys in the raw order).
pub fn sidecar_json(run: &RunRow, details: Option<&RunDetails>) -> String {
    let d = details.cloned().unwrap_or_default();
    let mut fields: Vec<(&str, String)> = vec![("seed", run.seed.to_string())];
    let mut opt = |key, v: Option<String>| {
        if let Some(v) = v {
            fields.push((key, v));
        }
    };
    opt("depth", d.depth.map(|v| v.to_string()));
    opt("game_index", d.game_index.map(|v| v.to_string()));
    let num_moves = d.num_moves.unwrap_or(run.steps);
    fields.push(("num_moves", num_moves.to_string()));
    fields.push(("score", run.max_score.to_string()));
    fields.push(("max_tile", run.highest_tile.to_string()));
    let mut opt = |key, v: Option<String>| {
        if let Some(v) = v {
            fields.push((key, v));
        }
    };
    opt("max_rank", d.max_rank.map(|v| v.to_string()));
    opt("sum_tile", d.sum_tile.map(|v| v.to_string()));
    opt(
        "seconds",
        d.seconds
            .filter(|s| s.is_finite())
            .map(|s| serde_json::to_string(&s).expect("finite")),
    );
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    format!("{{{}}}\n", body.join(","))
}

/// A piece's JSON text (or gzip member) and its run-length tally of rows per position.
type Formatted = (Vec<u8>, Vec<(u32, u64)>);

/// Formats the selected rows of a piece; returns the text and a tally of rows per position.
/// With `only`, every row must belong to that output position (a per-run read).
fn format_piece(
    source: &SourcePack,
    selection: &Selection,
    fmt: &RowFormatter,
    piece: &Piece,
    only: Option<u32>,
) -> Result<Formatted> {
    let rows = source.read(piece)?;
    let mut stats = Vec::new();
    if let Some(family) = &fmt.search {
        family
            .open(piece.shard)?
            .read_rows(piece.start, piece.count, &mut stats)?;
    }
    let mut text = Vec::with_capacity(rows.len() * 5);
    let mut counts = Vec::new();
    let mut i = 0usize;
    selection
        .for_each_row_at(&rows, |at, pos, bytes| {
            i += 1;
            if only.is_some_and(|want| want != pos) {
                fail!(
                    Corrupt,
                    "{}: a row of another run where runs.steps places run {} (the pack is inconsistent; run `dataset-packer validate`)",
                    source.describe(piece, i - 1),
                    source.runs[selection.slots[only.unwrap() as usize]].id
                );
            }
            tally(&mut counts, pos);
            let search = fmt.search.as_ref().map(|_| {
                SearchStats::from_bytes(&stats[at * search::ROW_BYTES..][..search::ROW_BYTES])
            });
            fmt.write_row(&mut text, &StepRow::from_bytes(bytes), search.as_ref())
                .with_context(|| source.describe(piece, at))
        })
        .with_context(|| format!("exporting {}", source.dir.display()))?;
    Ok((text, counts))
}

fn gzip(text: &[u8]) -> Result<Vec<u8>> {
    let mut gz = GzEncoder::new(
        Vec::with_capacity(text.len() / 4),
        Compression::new(GZIP_LEVEL),
    );
    gz.write_all(text)?;
    Ok(gz.finish()?)
}

/// Writes every selected row into one `.jsonl` or `.jsonl.gz` file.
pub fn write_file(
    source: &SourcePack,
    selection: &Selection,
    search: Option<&Family>,
    target: &Path,
    overwrite: bool,
    workers: usize,
    observer: &Observer,
) -> Result<Written> {
    let gz = single_file_kind(target) == Some(true);
    let (staged, file) = StagedFile::create(target, overwrite)?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    // Several runs in one file: each row says which run it belongs to.
    let fmt = RowFormatter::new(&source.valuations)
        .with_run_ids(selection.len() > 1)
        .with_search(search);
    let plan = source.plan(selection);
    let mut counts = RowCounts::new(selection);
    let bar = Bar::rows(observer, "export", plan.iter().map(|p| p.count).sum());
    let outcome = ordered_try_map(
        &plan,
        workers,
        workers * 2,
        || (),
        |_, piece| {
            let (text, tally) = format_piece(source, selection, &fmt, piece, None)?;
            Ok((if gz { gzip(&text)? } else { text }, tally))
        },
        |i, done: Result<Formatted>| {
            let (bytes, tally) = done?;
            counts.add(&tally);
            out.write_all(&bytes)
                .with_context(|| format!("writing {}", target.display()))?;
            bar.inc(plan[i].count);
            Ok(())
        },
    );
    bar.finish_and_clear();
    outcome?;
    counts.verify(source, selection)?;
    if gz && counts.total() == 0 {
        out.write_all(&gzip(b"")?)?; // a valid (empty) gzip file, never a 0-byte one
    }
    let file = out.into_inner().map_err(|e| e.into_error())?;
    staged.publish(file)?;
    Ok(Written {
        runs: selection.len(),
        rows: counts.total(),
        files: 1,
    })
}

/// Writes one `BASE.meta.json` + `BASE.jsonl.gz` per selected run into a folder.
pub fn write_dir(
    source: &SourcePack,
    selection: &Selection,
    search: Option<&Family>,
    target: &Path,
    overwrite: bool,
    workers: usize,
    observer: &Observer,
) -> Result<Written> {
    if source.shuffled {
        fail!(
            Refused,
            "{} is shuffled: its rows are not grouped by run, so they cannot be written as one file per run; export to a single .jsonl.gz file or to parquet instead",
            source.dir.display()
        );
    }
    let staged = StagedDir::create(target, overwrite, owns)?;
    let fmt = RowFormatter::new(&source.valuations).with_search(search);
    let positions: Vec<u32> = (0..selection.len() as u32).collect();
    let total: u64 = selection
        .slots
        .iter()
        .map(|&s| source.runs[s].steps.max(0) as u64)
        .sum();
    let bar = Bar::rows(observer, "export", total);
    let mut rows = 0u64;
    let outcome = ordered_try_map(
        &positions,
        workers,
        workers * 2,
        || (),
        |_, &pos| export_run(source, selection, &fmt, pos),
        |i, done: Result<(Vec<u8>, u64)>| {
            let slot = selection.slots[i];
            let run = &source.runs[slot];
            let (gz, n) = done?;
            rows += n;
            bar.inc(n);
            let base = staged.path().join(run_base(run.id));
            let meta = sidecar_json(run, source.details.get(&run.id));
            write_new(&base.with_extension("meta.json"), meta.as_bytes())?;
            write_new(&base.with_extension("jsonl.gz"), &gz)
        },
    );
    bar.finish_and_clear();
    outcome?;
    staged.publish()?;
    Ok(Written {
        runs: selection.len(),
        rows,
        files: 2 * selection.len(),
    })
}

/// One run's rows as a gzip file, checked against `runs.steps`.
fn export_run(
    source: &SourcePack,
    selection: &Selection,
    fmt: &RowFormatter,
    pos: u32,
) -> Result<(Vec<u8>, u64)> {
    let slot = selection.slots[pos as usize];
    let mut text = Vec::new();
    let mut counts = RowCounts::new(selection);
    for piece in source.run_pieces(slot) {
        let (part, tally) = format_piece(source, selection, fmt, &piece, Some(pos))?;
        text.extend_from_slice(&part);
        counts.add(&tally);
    }
    let run = &source.runs[slot];
    if counts.of(pos) != run.steps.max(0) as u64 {
        fail!(
            Corrupt,
            "{}: run {} has {} rows where runs.steps says {} (the pack is inconsistent; run `dataset-packer validate`)",
            source.dir.display(),
            run.id,
            counts.of(pos),
            run.steps
        );
    }
    Ok((gzip(&text)?, counts.of(pos)))
}

fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::row::parse_row;

    fn row_with_evs(evs: [f32; 4], legal: u8) -> StepRow {
        let mut cells = [0u8; 16];
        cells[0] = 3;
        cells[5] = 16;
        let (b, mask) = board::pack(&cells);
        StepRow {
            run_id: 0,
            step_index: 7,
            board: b,
            board_eval: 0,
            tile_65536_mask: mask,
            move_dir: 2,
            valuation_type: 1,
            ev_legal: legal,
            max_rank: 16,
            seed: 4_000_000_000,
            branch_evs: evs,
        }
    }

    fn line(r: &StepRow) -> String {
        let mut out = Vec::new();
        RowFormatter::new(&ValuationTable::new())
            .write_row(&mut out, r, None)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn writes_the_raw_row_format() {
        let r = row_with_evs([0.0, -5.262, 2.511, 0.0], 0b0110);
        assert_eq!(
            line(&r),
            "{\"seed\":4000000000,\"step_index\":7,\"max_rank\":16,\"move\":\"left\",\"valuation_type\":\"tuple11\",\
             \"board\":[3,0,0,0,0,16,0,0,0,0,0,0,0,0,0,0],\"branch_evs\":{\"up\":null,\"left\":2.511,\"right\":null,\"down\":-5.262}}\n"
        );
        // A legal 0.0 stays a number, and so does -0.0 on an illegal move (null reads as +0.0).
        let r = row_with_evs([0.0, 0.0, -0.0, 0.0], 0b0001);
        assert!(line(&r).contains("{\"up\":0,\"left\":-0,\"right\":null,\"down\":null}"));
    }

    /// Every EV written must parse back, through the packer's own row parser, to the same
    /// f32 bits; random bit patterns cover every exponent (subnormals, huge values).
    #[test]
    fn evs_round_trip_through_the_packer_parser() {
        let mut rng = crate::rng::Xoshiro::new(0x2545_f491_4f6c_dd1d);
        let mut next = || rng.next_u64();
        let mut checked = 0;
        while checked < 1_000_000 {
            let bits = next();
            let evs =
                [0, 1, 2, 3].map(|k| f32::from_bits((bits >> (16 * k)) as u32 ^ (next() as u32)));
            if !evs.iter().all(|e| e.is_finite()) {
                continue;
            }
            let text = line(&row_with_evs(evs, 0b1111));
            let parsed = parse_row(text.trim_end().as_bytes()).unwrap();
            for (got, want) in parsed.branch_evs.iter().zip(evs) {
                assert_eq!(got.to_bits(), want.to_bits(), "{want} in {text}");
            }
            checked += 4;
        }
        // Every exponent and sign, with the mantissas at and next to its edges.
        for sign in [0u32, 1 << 31] {
            for exp in 0..=254u32 {
                let mantissas = [0, 1, 2, 0x40_0000, 0x3f_ffff, 0x7f_fffe, 0x7f_ffff];
                let evs = mantissas.map(|m| f32::from_bits(sign | exp << 23 | m));
                for ev in evs {
                    let text = line(&row_with_evs([ev; 4], 0b1111));
                    let parsed = parse_row(text.trim_end().as_bytes()).unwrap();
                    assert_eq!(parsed.branch_evs[0].to_bits(), ev.to_bits(), "{text}");
                }
            }
        }
    }

    #[test]
    fn rebuilds_the_sidecar() {
        let run = RunRow {
            id: 3,
            seed: 9,
            steps: 10,
            max_score: 1234,
            highest_tile: 512,
        };
        assert_eq!(
            sidecar_json(&run, None),
            "{\"seed\":9,\"num_moves\":10,\"score\":1234,\"max_tile\":512}\n"
        );
        let d = RunDetails {
            depth: Some(6),
            num_moves: Some(12),
            seconds: Some(1.5),
            ..Default::default()
        };
        assert_eq!(
            sidecar_json(&run, Some(&d)),
            "{\"seed\":9,\"depth\":6,\"num_moves\":12,\"score\":1234,\"max_tile\":512,\"seconds\":1.5}\n"
        );
        assert_eq!(run_base(42), "run-0000000042");
        assert!(owns("run-0000000042.meta.json") && owns("run-0000000042.jsonl.gz"));
        assert!(!owns("run-42.meta.json") && !owns("notes.txt"));
    }
}
