//! One run, parsed: sidecar + every row of its `.jsonl.gz` (or plain `.jsonl`), turned into
//! 48-byte pack rows with the derived columns (`board_eval`, `ev_legal`, packed board), plus what
//! the run revealed (data-quality findings, step-index gaps). Runs on a worker thread; knows
//! nothing of shards.

use std::path::{Path, PathBuf};

use crate::format::board::{self, LineTables, MOVE_NAMES};
use crate::format::row::{ROW_BYTES, StepRow};
use crate::format::search;
use crate::format::valuation::{MAX_NAMES, STANDARD_NAMES};
use crate::raw::discover::{RowsForm, RunSource};
use crate::raw::gzip::{Fit, Gunzipper, GzipStream, read_maybe_gzipped, trailer_size};
use crate::raw::row::{
    RawRow, RowMemo, parse_row_fast, parse_row_general, parse_row_in_place_with,
};
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
    /// The rows' search statistics, [`search::ROW_BYTES`] per row in the `search` family's
    /// dtype, when the parser keeps them ([`RunParser::keep_search_stats`]).
    pub search: Option<Vec<u8>>,
    /// Rows whose `search` object says `"used":true` (kept or not).
    pub searched_rows: u64,
}

impl ParsedRun {
    /// Whether the run uses names beyond the standard three (so ids need remapping).
    pub fn has_extra_valuations(&self) -> bool {
        self.valuation_names.len() > STANDARD_NAMES.len()
    }
}

/// Decompressed sizes up to this many bytes are decompressed whole with libdeflate (the fast
/// way) by any number of workers; larger files are streamed through a [`STREAM_CHUNK`] buffer,
/// so a worker never holds more than this much decompressed text. Real games are ≈7 MB of JSON
/// in the old layout: they fit.
pub const WHOLE_FILE_LIMIT: usize = 8 << 20;

/// The decompressed text all the workers together may hold whole: with few workers each may
/// take a share of it larger than [`WHOLE_FILE_LIMIT`] (up to [`WHOLE_FILE_MAX`]), so the
/// current logger's games of 20,000 rows (≈11 MB of JSON) are decompressed whole at 1 and 2
/// workers instead of streamed through zlib-rs, which costs ≈10% more CPU time. The memory
/// this adds is bounded by the budget, not by the worker count (at most 8 MiB more than
/// before, at 2 workers): from 3 workers on every worker has [`WHOLE_FILE_LIMIT`], as before.
pub const WHOLE_FILE_BUDGET: usize = 24 << 20;

/// The most decompressed text one worker holds whole, however few workers there are.
pub const WHOLE_FILE_MAX: usize = 12 << 20;

/// The decompressed bytes a streamed file is parsed in at a time (a longer line grows it).
pub const STREAM_CHUNK: usize = 1 << 20;

/// Rows reserved up front for a streamed run at most (the sidecar's `num_moves` otherwise);
/// more grow the buffer.
const STREAMED_ROWS_RESERVED: usize = 1 << 20;

/// The shortest valid row line (`{"move":"up","board":[0,…]}`) is longer than this, so a text
/// of N bytes holds fewer than N / this rows.
const MIN_ROW_BYTES: usize = 40;

/// The whole-file limit of each of `workers` workers: its share of [`WHOLE_FILE_BUDGET`],
/// between [`WHOLE_FILE_LIMIT`] and [`WHOLE_FILE_MAX`]; or `DATASET_PACKER_WHOLE_FILE_LIMIT`
/// (bytes) when set, whatever the worker count, so tests and benchmarks can force either path.
///
/// ```
/// use dataset_packer::raw::run::{whole_file_limit, WHOLE_FILE_LIMIT, WHOLE_FILE_MAX};
/// # if std::env::var_os("DATASET_PACKER_WHOLE_FILE_LIMIT").is_none() {
/// assert_eq!(whole_file_limit(2), WHOLE_FILE_MAX);
/// assert_eq!(whole_file_limit(16), WHOLE_FILE_LIMIT);
/// # }
/// ```
pub fn whole_file_limit(workers: usize) -> usize {
    static FORCED: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let forced = *FORCED.get_or_init(|| {
        std::env::var("DATASET_PACKER_WHOLE_FILE_LIMIT")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    forced.unwrap_or_else(|| {
        (WHOLE_FILE_BUDGET / workers.max(1)).clamp(WHOLE_FILE_LIMIT, WHOLE_FILE_MAX)
    })
}

/// Per-worker reusable state: the decompressor and its buffers (their capacity is kept from run
/// to run: at most the compressed file, the whole-file limit of text or a stream chunk).
pub struct RunParser<'t> {
    tables: &'t LineTables,
    gunzip: Gunzipper,
    compressed: Vec<u8>,
    text: Vec<u8>,
    keep_search: bool,
    /// Decompressed sizes up to this are decompressed whole ([`whole_file_limit`]).
    whole_file_limit: usize,
}

impl<'t> RunParser<'t> {
    pub fn new(tables: &'t LineTables) -> RunParser<'t> {
        RunParser {
            tables,
            gunzip: Gunzipper::new(),
            compressed: Vec::new(),
            text: Vec::new(),
            keep_search: false,
            whole_file_limit: whole_file_limit(1),
        }
    }

    /// Sets the whole-file limit for a parser that is one of `workers` parsing at once
    /// ([`whole_file_limit`]; a new parser assumes it is alone).
    pub fn workers(mut self, workers: usize) -> Self {
        self.whole_file_limit = whole_file_limit(workers);
        self
    }

    /// Keeps each row's search statistics in [`ParsedRun::search`] (off by default).
    pub fn keep_search_stats(mut self, keep: bool) -> Self {
        self.keep_search = keep;
        self
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
        let outcome = match src.rows_form {
            RowsForm::Gzip => {
                read_into(&src.rows, &mut self.compressed)
                    .map_err(|e| file_error(&src.rows, format!("cannot read: {e}")))?;
                let outcome = self.rows_of_gzip(sidecar, run_id);
                if self.compressed.capacity() > 2 * self.whole_file_limit {
                    self.compressed = Vec::new(); // an unusually large file: do not keep its buffer
                }
                outcome
            }
            RowsForm::Plain => self.rows_of_plain(&src.rows, sidecar, run_id),
        };
        outcome.map_err(|e| match e {
            FileError::File(message) => file_error(&src.rows, message),
            FileError::Row(line, message) => RunError {
                file: src.rows.clone(),
                line: Some(line),
                message,
            },
        })
    }

    /// The rows of the compressed file in `self.compressed`: decompressed whole when it fits
    /// the limit, streamed otherwise.
    fn rows_of_gzip(&mut self, sidecar: Sidecar, run_id: u32) -> Result<ParsedRun, FileError> {
        let limit = self.whole_file_limit;
        let data = &self.compressed;
        let small = data.len() <= limit && trailer_size(data).is_none_or(|n| n as usize <= limit);
        if small {
            match self.gunzip.decompress_within(data, &mut self.text, limit) {
                Err(e) => return Err(FileError::File(e.0)),
                Ok(Fit::Whole) => {
                    log::debug!(
                        "run {run_id}: {} bytes of text decompressed whole (limit {limit})",
                        self.text.len()
                    );
                    let rows_bound = self.text.len() / MIN_ROW_BYTES + 1;
                    let mut rows =
                        RowBuilder::new(sidecar, run_id, self.tables, rows_bound, self.keep_search);
                    rows.feed(&self.text, true).map_err(FileError::row)?;
                    return Ok(rows.finish());
                }
                Ok(Fit::TooLarge) => {}
            }
        }
        log::debug!("run {run_id}: streamed (more than {limit} bytes of text)");
        let rows = RowBuilder::new(
            sidecar,
            run_id,
            self.tables,
            STREAMED_ROWS_RESERVED,
            self.keep_search,
        );
        let mut stream = GzipStream::new(data).map_err(|e| FileError::File(e.0))?;
        // A gzip error anywhere in the file wins over a bad line before it.
        let fill = |buf: &mut [u8]| stream.read(buf).map_err(|e| FileError::File(e.0));
        stream_rows(fill, true, &mut self.text, limit, rows)
    }

    /// The rows of a plain rows file, streamed through the buffer a long gzip file streams
    /// through, whatever its size: nothing to inflate, so reading it whole would only add a
    /// pass over memory (measured slower: the text leaves the cache before it is parsed).
    fn rows_of_plain(
        &mut self,
        path: &Path,
        sidecar: Sidecar,
        run_id: u32,
    ) -> Result<ParsedRun, FileError> {
        let cannot_read = |e: std::io::Error| FileError::File(format!("cannot read: {e}"));
        let mut file = std::fs::File::open(path).map_err(cannot_read)?;
        let size = file.metadata().map_err(cannot_read)?.len();
        let rows_bound = usize::try_from(size / MIN_ROW_BYTES as u64 + 1).unwrap_or(usize::MAX);
        let rows = RowBuilder::new(sidecar, run_id, self.tables, rows_bound, self.keep_search);
        let mut first = true;
        let fill = |buf: &mut [u8]| {
            let n = read_retrying(&mut file, buf).map_err(cannot_read)?;
            if std::mem::take(&mut first) {
                gzip_named_plain(&buf[..n])?;
            }
            Ok(n)
        };
        stream_rows(fill, false, &mut self.text, self.whole_file_limit, rows)
    }
}

/// A plain rows file that holds gzip data (a `.gz` name lost in a copy) is refused as such
/// rather than as a bad first line.
fn gzip_named_plain(start: &[u8]) -> Result<(), FileError> {
    if start.starts_with(&[0x1f, 0x8b]) {
        return Err(FileError::File(
            "holds gzip data (it starts with the gzip magic bytes 1F 8B) but its name ends in .jsonl; name it .jsonl.gz".into(),
        ));
    }
    Ok(())
}

/// `read` that retries when interrupted by a signal.
fn read_retrying(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    loop {
        match file.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// Why a rows file is invalid: the file as a whole (its gzip, or reading it), or a line of its
/// text (1-based).
enum FileError {
    File(String),
    Row(u64, String),
}

impl FileError {
    fn row((line, message): (u64, String)) -> FileError {
        FileError::Row(line, message)
    }
}

/// Reads a whole file into `buf` (cleared first; its capacity is reused).
fn read_into(path: &Path, buf: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::Read;
    buf.clear();
    let mut file = std::fs::File::open(path)?;
    let size = file.metadata().map(|m| m.len() as usize).unwrap_or(0);
    buf.reserve(size.saturating_add(1));
    file.read_to_end(buf)?;
    Ok(())
}

/// Fills `buf` piece by piece with `fill` (which says how many bytes it put at the start of the
/// slice it is given, 0 at the end) and feeds whole lines to `rows`. With `check_to_end`, the
/// verdict is the whole-file path's: an error of `fill` anywhere in the file wins over a bad
/// line before it (after a bad line, the rest is still read, only to check it). `buf` keeps at
/// most `keep` bytes of capacity afterwards (the parser's whole-file limit).
fn stream_rows(
    mut fill: impl FnMut(&mut [u8]) -> Result<usize, FileError>,
    check_to_end: bool,
    buf: &mut Vec<u8>,
    keep: usize,
    mut rows: RowBuilder,
) -> Result<ParsedRun, FileError> {
    buf.clear();
    buf.resize(STREAM_CHUNK, 0);
    let mut held = 0; // bytes at the start of `buf` that are not parsed yet (a partial line)
    let mut bad_line = None;
    loop {
        if held == buf.len() {
            buf.resize(buf.len() * 2, 0); // a line longer than the buffer
        }
        let n = fill(&mut buf[held..])?;
        if bad_line.is_some() {
            if n == 0 || !check_to_end {
                break;
            }
            continue;
        }
        if n == 0 {
            bad_line = rows.feed(&buf[..held], true).err();
            break;
        }
        let filled = held + n;
        let Some(last_newline) = memchr::memrchr(b'\n', &buf[held..filled]) else {
            held = filled;
            continue;
        };
        let complete = held + last_newline + 1;
        bad_line = rows.feed(&buf[..complete], false).err();
        buf.copy_within(complete..filled, 0);
        held = filled - complete;
    }
    buf.truncate(STREAM_CHUNK);
    buf.shrink_to(STREAM_CHUNK.max(keep));
    match bad_line {
        Some(e) => Err(FileError::row(e)),
        None => Ok(rows.finish()),
    }
}

/// Turns the decompressed JSONL of one run, fed in pieces of whole lines, into pack rows.
struct RowBuilder<'t> {
    run: ParsedRun,
    tables: &'t LineTables,
    /// Lines seen so far (blank ones included).
    line_no: u64,
    prev_step: Option<u64>,
    memo: RowMemo,
    /// Rows the fast paths left to the general parser (logged at debug level: a layout the
    /// fast paths miss shows up here, not as an error).
    general_rows: u64,
}

impl<'t> RowBuilder<'t> {
    /// A run with room for the sidecar's `num_moves` rows, but never more than `rows_bound`.
    fn new(
        sidecar: Sidecar,
        run_id: u32,
        tables: &'t LineTables,
        rows_bound: usize,
        keep_search: bool,
    ) -> Self {
        let expected = usize::try_from(sidecar.num_moves)
            .unwrap_or(0)
            .min(rows_bound);
        RowBuilder {
            run: ParsedRun {
                rows: Vec::with_capacity(expected * ROW_BYTES),
                stamped_run_id: run_id,
                row_count: 0,
                valuation_names: STANDARD_NAMES.iter().map(|s| s.to_string()).collect(),
                valuation_first_lines: vec![0; STANDARD_NAMES.len()],
                findings: RunFindings::default(),
                search: keep_search.then(|| Vec::with_capacity(expected * search::ROW_BYTES)),
                searched_rows: 0,
                sidecar,
            },
            tables,
            line_no: 0,
            prev_step: None,
            general_rows: 0,
            memo: RowMemo::default(),
        }
    }

    fn finish(self) -> ParsedRun {
        log::debug!(
            "run {}: {} rows, {} by the fast paths, {} by the general parser",
            self.run.stamped_run_id,
            self.run.row_count,
            self.run.row_count.saturating_sub(self.general_rows),
            self.general_rows
        );
        self.run
    }

    /// Parses the lines of `text`: whole lines ending in '\n', except that the last piece of a
    /// file (`last`) may end without one. The first piece starts the file.
    fn feed(&mut self, text: &[u8], last: bool) -> Result<(), (u64, String)> {
        debug_assert!(last || text.ends_with(b"\n") || text.is_empty());
        if self.line_no == 0
            && let Some(problem) = crate::raw::bom_problem(text)
        {
            return Err((1, problem));
        }
        let keep = self.run.search.is_some();
        #[cfg(target_arch = "x86_64")]
        if crate::raw::row_x86::available() {
            // SAFETY: `available` checked the CPU features.
            return unsafe {
                match keep {
                    true => self.feed_lines_x86::<true>(text),
                    false => self.feed_lines_x86::<false>(text),
                }
            };
        }
        match keep {
            true => self.feed_lines::<false, true>(text),
            false => self.feed_lines::<false, false>(text),
        }
    }

    /// [`Self::feed_lines`] compiled for the vector row path, which it inlines.
    ///
    /// # Safety
    /// `row_x86::available()` must have returned true.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi1,bmi2,popcnt")]
    unsafe fn feed_lines_x86<const KEEP: bool>(
        &mut self,
        text: &[u8],
    ) -> Result<(), (u64, String)> {
        self.feed_lines::<true, KEEP>(text)
    }

    /// The line loop of [`Self::feed`]; `VECTOR`: try the vector row path first (only from
    /// [`Self::feed_lines_x86`]); `KEEP`: the run keeps its rows' search statistics (without,
    /// the fast paths only read `used`).
    #[inline(always)]
    fn feed_lines<const VECTOR: bool, const KEEP: bool>(
        &mut self,
        text: &[u8],
    ) -> Result<(), (u64, String)> {
        let mut pos = 0;
        while pos < text.len() {
            self.line_no += 1;
            let rest = &text[pos..];
            // The logger's exact layout, parsed in place: no separate search for the line end.
            // SAFETY: VECTOR is only set by `feed_lines_x86`, whose caller checked.
            if let Some((raw, used)) =
                unsafe { parse_row_in_place_with::<VECTOR, KEEP>(rest, &mut self.memo) }
            {
                self.push::<VECTOR>(raw)?;
                pos += used;
                continue;
            }
            let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
            pos += end + 1;
            let line = &rest[..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            let raw = match parse_row_fast(line) {
                Some(raw) => raw,
                None => {
                    self.general_rows += 1;
                    parse_row_general(line).map_err(|e| (self.line_no, e.0))?
                }
            };
            self.push::<VECTOR>(raw)?;
        }
        Ok(())
    }

    /// Adds one parsed row (the current line) to the run.
    #[inline(always)]
    fn push<const VECTOR: bool>(&mut self, raw: RawRow) -> Result<(), (u64, String)> {
        let line_no = self.line_no;
        let run = &mut self.run;
        let step = match raw.step_index {
            Some(s) => u64::from(s),
            None => self.prev_step.map_or(0, |p| p + 1),
        };
        if step > u64::from(u32::MAX) {
            return Err((
                line_no,
                format!("derived step_index {step} does not fit u32"),
            ));
        }
        if let Some(p) = self.prev_step
            && step != p + 1
        {
            run.findings
                .add(FindingKind::StepIndexGap, line_no, step, || {
                    format!("step_index {step} follows {p}")
                });
        }
        self.prev_step = Some(step);

        let valuation_type = match raw.valuation_type.as_deref() {
            None | Some("search") => 0,
            Some("tuple11") => 1,
            Some("tuple10") => 2,
            Some(name) => local_valuation_id(run, name, line_no)?,
        };

        #[cfg(target_arch = "x86_64")]
        let (packed, mask) = if VECTOR {
            // SAFETY: VECTOR is only set under `feed_lines_x86`, whose caller checked.
            unsafe { crate::raw::row_x86::pack_board(&raw.board) }
        } else {
            board::pack(&raw.board)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let (packed, mask) = board::pack(&raw.board);
        let (board_eval, ev_legal) = self.tables.eval_and_legal(&raw.board, packed, mask);
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
        let evs = raw.branch_evs;
        if nonzero_evs(&evs) & !ev_legal != 0 {
            evs_on_illegal_moves(&mut run.findings, line_no, step, evs, ev_legal);
        }
        let row = StepRow {
            run_id: run.stamped_run_id,
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
        run.searched_rows += u64::from(raw.search.used);
        if let Some(kept) = &mut run.search {
            kept.extend_from_slice(&raw.search.to_bytes());
        }
        Ok(())
    }
}

/// Bit k set when EV k is not 0.0 (one vector compare on x86-64).
#[inline(always)]
fn nonzero_evs(evs: &[f32; 4]) -> u8 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: a 16-byte load from the array; SSE is part of x86-64. `cmpneq` is true for
        // NaN, as `!=` is.
        unsafe {
            let evs = _mm_loadu_ps(evs.as_ptr());
            _mm_movemask_ps(_mm_cmpneq_ps(evs, _mm_setzero_ps())) as u8
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    (0..4).fold(0, |bits, k| bits | u8::from(evs[k] != 0.0) << k)
}

/// Notes each nonzero EV of a move that is illegal on the row's board.
#[cold]
fn evs_on_illegal_moves(
    findings: &mut RunFindings,
    line_no: u64,
    step: u64,
    evs: [f32; 4],
    ev_legal: u8,
) {
    for (k, ev) in evs.iter().enumerate() {
        if *ev != 0.0 && ev_legal & (1 << k) == 0 {
            findings.add(FindingKind::EvOnIllegalMove, line_no, step, || {
                format!(
                    "EV {ev} on {}, which is illegal on this board",
                    MOVE_NAMES[k]
                )
            });
        }
    }
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
