//! One run, parsed: sidecar + every row of its `.jsonl.gz`, turned into 48-byte pack rows with
//! the derived columns (`board_eval`, `ev_legal`, packed board), plus what the run revealed
//! (data-quality findings, step-index gaps). Runs on a worker thread; knows nothing of shards.

use std::path::{Path, PathBuf};

use crate::format::board::{self, LineTables, MOVE_NAMES};
use crate::format::row::{ROW_BYTES, StepRow};
use crate::format::valuation::{MAX_NAMES, STANDARD_NAMES};
use crate::raw::discover::RunSource;
use crate::raw::gzip::{Gunzipper, read_maybe_gzipped};
use crate::raw::row::parse_row;
use crate::raw::sidecar::{Sidecar, parse_sidecar};

/// Examples kept per finding kind and run.
pub const EXAMPLES_PER_KIND: usize = 5;

/// Why a run is invalid: the file, the line (for rows) and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunError {
    pub file: PathBuf,
    pub line: Option<u64>,
    pub message: String,
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// A row-level observation about the source data that is not an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FindingKind {
    IllegalMovePlayed,
    EvOnIllegalMove,
    StepIndexGap,
}

impl FindingKind {
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::IllegalMovePlayed => "illegal_move_played",
            FindingKind::EvOnIllegalMove => "ev_on_illegal_move",
            FindingKind::StepIndexGap => "step_index_gap",
        }
    }
}

/// One example of a finding, located by line and step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub kind: FindingKind,
    pub line: u64,
    pub step_index: u64,
    pub detail: String,
}

/// A run's findings: counts per kind and the first few examples of each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFindings {
    pub counts: [u64; 3],
    pub examples: Vec<Finding>,
}

impl RunFindings {
    fn add(
        &mut self,
        kind: FindingKind,
        line: u64,
        step_index: u64,
        detail: impl FnOnce() -> String,
    ) {
        let k = kind as usize;
        self.counts[k] += 1;
        if self.counts[k] <= EXAMPLES_PER_KIND as u64 {
            self.examples.push(Finding {
                kind,
                line,
                step_index,
                detail: detail(),
            });
        }
    }
}

/// A parsed run, ready for the ordered writer.
#[derive(Debug)]
pub struct ParsedRun {
    pub sidecar: Sidecar,
    /// `rows × 48` bytes. `run_id` is `stamped_run_id` (the writer corrects it if runs before
    /// this one were left out); `valuation_type` holds a run-local id: an index into
    /// `valuation_names`.
    pub rows: Vec<u8>,
    pub stamped_run_id: u32,
    pub row_count: u64,
    /// Run-local valuation names; the first three are always the standard ones.
    pub valuation_names: Vec<String>,
    /// Line where each name of `valuation_names` first appears (0 for the standard ones).
    pub valuation_first_lines: Vec<u64>,
    pub findings: RunFindings,
}

impl ParsedRun {
    /// Whether the run uses names beyond the standard three (so ids need remapping).
    pub fn has_extra_valuations(&self) -> bool {
        self.valuation_names.len() > STANDARD_NAMES.len()
    }
}

/// Per-worker reusable state: the decompressor and its output buffer.
pub struct RunParser<'t> {
    tables: &'t LineTables,
    gunzip: Gunzipper,
    text: Vec<u8>,
}

impl<'t> RunParser<'t> {
    pub fn new(tables: &'t LineTables) -> RunParser<'t> {
        RunParser {
            tables,
            gunzip: Gunzipper::new(),
            text: Vec::new(),
        }
    }

    /// Parses a whole run, or says why it is invalid. Rows get `run_id` (the id the run will
    /// have unless an earlier run is left out).
    pub fn parse(&mut self, src: &RunSource, run_id: u32) -> Result<ParsedRun, RunError> {
        let file_error = |file: &Path, message: String| RunError {
            file: file.to_path_buf(),
            line: None,
            message,
        };
        if let Some(problem) = &src.problem {
            return Err(file_error(&src.sidecar, problem.clone()));
        }
        let sidecar_bytes = read_maybe_gzipped(&src.sidecar, &mut self.gunzip)
            .map_err(|e| file_error(&src.sidecar, e.0))?;
        if let Some(problem) = crate::raw::bom_problem(&sidecar_bytes) {
            return Err(file_error(&src.sidecar, problem));
        }
        let sidecar = parse_sidecar(&sidecar_bytes).map_err(|e| file_error(&src.sidecar, e))?;
        let compressed = std::fs::read(&src.rows)
            .map_err(|e| file_error(&src.rows, format!("cannot read: {e}")))?;
        self.gunzip
            .decompress_all(&compressed, &mut self.text)
            .map_err(|e| file_error(&src.rows, e.0))?;
        drop(compressed);
        if let Some(problem) = crate::raw::bom_problem(&self.text) {
            return Err(RunError {
                file: src.rows.clone(),
                line: Some(1),
                message: problem,
            });
        }
        rows_of(&self.text, sidecar, run_id, self.tables).map_err(|(line, message)| RunError {
            file: src.rows.clone(),
            line: Some(line),
            message,
        })
    }
}

/// Converts the decompressed JSONL of one run into pack rows.
fn rows_of(
    text: &[u8],
    sidecar: Sidecar,
    run_id: u32,
    tables: &LineTables,
) -> Result<ParsedRun, (u64, String)> {
    let mut run = ParsedRun {
        rows: Vec::with_capacity(text.len() / 240 * ROW_BYTES + ROW_BYTES),
        stamped_run_id: run_id,
        row_count: 0,
        valuation_names: STANDARD_NAMES.iter().map(|s| s.to_string()).collect(),
        valuation_first_lines: vec![0; STANDARD_NAMES.len()],
        findings: RunFindings::default(),
        sidecar,
    };
    let mut prev_step: Option<u64> = None;
    for (line_no, line) in (1u64..).zip(lines(text)) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let raw = parse_row(line).map_err(|e| (line_no, e.0))?;

        let step = match raw.step_index {
            Some(s) => u64::from(s),
            None => prev_step.map_or(0, |p| p + 1),
        };
        if step > u64::from(u32::MAX) {
            return Err((
                line_no,
                format!("derived step_index {step} does not fit u32"),
            ));
        }
        if let Some(p) = prev_step
            && step != p + 1
        {
            run.findings
                .add(FindingKind::StepIndexGap, line_no, step, || {
                    format!("step_index {step} follows {p}")
                });
        }
        prev_step = Some(step);

        let valuation_type = match raw.valuation_type.as_deref() {
            None | Some("search") => 0,
            Some("tuple11") => 1,
            Some("tuple10") => 2,
            Some(name) => local_valuation_id(&mut run, name, line_no)?,
        };

        let (packed, mask) = board::pack(&raw.board);
        let (board_eval, ev_legal) = tables.eval_and_legal(&raw.board, packed, mask);
        let move_dir = raw.move_dir;
        if ev_legal & (1 << move_dir) == 0 {
            run.findings
                .add(FindingKind::IllegalMovePlayed, line_no, step, || {
                    format!(
                        "played {} on a board where it is illegal",
                        MOVE_NAMES[move_dir as usize]
                    )
                });
        }
        for (k, ev) in raw.branch_evs.iter().enumerate() {
            if *ev != 0.0 && ev_legal & (1 << k) == 0 {
                run.findings
                    .add(FindingKind::EvOnIllegalMove, line_no, step, || {
                        format!(
                            "EV {ev} on {}, which is illegal on this board",
                            MOVE_NAMES[k]
                        )
                    });
            }
        }
        let row = StepRow {
            run_id,
            step_index: step as u32,
            board: packed,
            board_eval,
            tile_65536_mask: mask,
            move_dir,
            valuation_type,
            ev_legal,
            max_rank: raw.max_rank.unwrap_or_else(|| board::max_rank(&raw.board)),
            seed: raw.seed.unwrap_or(run.sidecar.seed),
            branch_evs: raw.branch_evs,
        };
        run.rows.extend_from_slice(&row.to_bytes());
        run.row_count += 1;
    }
    Ok(run)
}

/// The lines of a buffer split on '\n' (a final line without '\n' included, like `split`).
fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        match memchr::memchr(b'\n', &text[start..]) {
            Some(n) => {
                let line = &text[start..start + n];
                start += n + 1;
                Some(line)
            }
            None => {
                done = true;
                Some(&text[start..])
            }
        }
    })
}

fn local_valuation_id(run: &mut ParsedRun, name: &str, line: u64) -> Result<u8, (u64, String)> {
    if let Some(i) = run.valuation_names.iter().position(|n| n == name) {
        return Ok(i as u8);
    }
    if run.valuation_names.len() >= MAX_NAMES {
        return Err((
            line,
            format!("valuation_type {name:?} is a 257th distinct name; at most {MAX_NAMES} fit"),
        ));
    }
    run.valuation_names.push(name.to_string());
    run.valuation_first_lines.push(line);
    Ok((run.valuation_names.len() - 1) as u8)
}
