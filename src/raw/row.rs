//! One JSONL row → typed fields, with no per-row allocation.
//!
//! A strict, single-pass JSON scanner specialised to the row shape: known keys are parsed
//! straight into typed fields, unknown keys are skipped (but still checked to be valid JSON),
//! and anything unusual (escapes, odd spacing, any key order) takes the same general code path,
//! so there is one parser and no second opinion to keep in sync.

use std::borrow::Cow;

use crate::format::search::{self, SearchStats};

/// A row's fields as found in the JSON; `None` = absent or `null`.
#[derive(Debug, Clone, PartialEq)]
pub struct RawRow<'a> {
    pub seed: Option<u32>,
    pub step_index: Option<u32>,
    pub max_rank: Option<u8>,
    /// 0=up 1=down 2=left 3=right.
    pub move_dir: u8,
    pub valuation_type: Option<Cow<'a, str>>,
    pub board: [u8; 16],
    /// [up, down, left, right]; a null or missing EV is 0.0.
    pub branch_evs: [f32; 4],
    /// The current logger's `search` object; the default (not used, all 0) when it is
    /// `null` or absent.
    pub search: SearchStats,
}

/// Why a row is invalid (the caller adds file and line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError(pub String);

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

type Res<T> = Result<T, RowError>;

fn err<T>(msg: impl Into<String>) -> Res<T> {
    Err(RowError(msg.into()))
}

const MAX_DEPTH: u32 = 64;

// Bits of the keys seen so far, to refuse duplicates.
const K_SEED: u16 = 1;
const K_STEP: u16 = 2;
const K_RANK: u16 = 4;
const K_MOVE: u16 = 8;
const K_VTYPE: u16 = 16;
const K_BOARD: u16 = 32;
const K_EVS: u16 = 64;
const K_VALUATION: u16 = 128;
const K_SEARCH: u16 = 256;

/// A JSON number as scanned: its text and whether it has a fraction or exponent.
struct Number<'a> {
    text: &'a [u8],
    negative: bool,
    integer: bool,
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

/// Parses one non-blank line (without its line terminator) into a row.
pub fn parse_row(line: &[u8]) -> Res<RawRow<'_>> {
    if let Some(row) = fast::parse(line) {
        return Ok(row);
    }
    parse_row_general(line)
}

/// The byte-exact fast path alone: the row when it has the logger's exact layout, None when
/// the fast path gives up (then [`parse_row`] takes the general path). For tests that hold
/// the two paths to one reference.
pub fn parse_row_fast(line: &[u8]) -> Option<RawRow<'_>> {
    fast::parse(line)
}

/// What the row parser carries from one row of a file to the next: on x86-64, the vector
/// path's [`super::row_x86::Memo`]; nothing elsewhere. Start each file with a fresh one (a
/// stale one is only slower, never wrong).
#[derive(Clone, Copy, Default)]
pub struct RowMemo {
    #[cfg(target_arch = "x86_64")]
    vector: super::row_x86::Memo,
}

/// The fast path on a line still inside its file's text: the row and the bytes it takes with its
/// line terminator (`\n`, `\r\n`, or a final `\r` or nothing at the end of `text`), when the
/// line has the logger's exact layout; None otherwise (then split the line off and use
/// [`parse_row`]). Saves a separate search for the end of every line. Takes the vector path
/// (`row_x86`) where the CPU has it. `memo` carries what the previous row of the file left.
pub fn parse_row_in_place<'a>(text: &'a [u8], memo: &mut RowMemo) -> Option<(RawRow<'a>, usize)> {
    #[cfg(target_arch = "x86_64")]
    if super::row_x86::available() {
        // SAFETY: `available` checked the CPU features.
        return unsafe { parse_row_in_place_avx2(text, memo) };
    }
    // SAFETY: without the vector path there is nothing to promise.
    unsafe { parse_row_in_place_with::<false>(text, memo) }
}

/// [`parse_row_in_place_with`] with the vector path, compiled for its CPU features.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,popcnt")]
unsafe fn parse_row_in_place_avx2<'a>(
    text: &'a [u8],
    memo: &mut RowMemo,
) -> Option<(RawRow<'a>, usize)> {
    // SAFETY: the caller's promise.
    unsafe { parse_row_in_place_with::<true>(text, memo) }
}

/// [`parse_row_in_place`], with the vector path first when `VECTOR` (and the build is for
/// x86-64): where enough text remains, and unless it gives up. Inlined: with `VECTOR` the
/// caller must be compiled for the vector path's features (`#[target_feature(enable =
/// "avx2,bmi1,bmi2,popcnt")]`) for its instructions to be inlined.
///
/// # Safety
/// With `VECTOR`, `row_x86::available()` must have returned true.
#[inline(always)]
pub unsafe fn parse_row_in_place_with<'a, const VECTOR: bool>(
    text: &'a [u8],
    memo: &mut RowMemo,
) -> Option<(RawRow<'a>, usize)> {
    #[cfg(target_arch = "x86_64")]
    let vector = if VECTOR && text.len() >= super::row_x86::WINDOW {
        // SAFETY: the caller's promise.
        unsafe { super::row_x86::parse_prefix(text, &mut memo.vector) }
    } else {
        None
    };
    #[cfg(not(target_arch = "x86_64"))]
    let vector = {
        let _ = memo;
        None
    };
    let (row, end) = match vector {
        Some(found) => found,
        None => fast::parse_prefix(text)?,
    };
    with_terminator(text, row, end)
}

/// The row that ends at `end` with the bytes its line terminator adds, or None when something
/// else follows it on the line.
#[inline(always)]
fn with_terminator<'a>(text: &[u8], row: RawRow<'a>, end: usize) -> Option<(RawRow<'a>, usize)> {
    let used = match &text[end..] {
        [] => end,
        [b'\n', ..] | [b'\r'] => end + 1,
        [b'\r', b'\n', ..] => end + 2,
        _ => return None,
    };
    Some((row, used))
}

/// The vector fast path alone on `line` followed by `after` (repeated to fill the window it
/// reads): `None` when this CPU or build has no vector path, else what it gives for exactly
/// `line` (`Some(None)` when it gives up or the row does not end where `line` does). For the
/// tests that hold it to the same reference as the scalar paths.
pub fn parse_row_vectorised(line: &[u8], after: &[u8]) -> Option<Option<RawRow<'static>>> {
    #[cfg(target_arch = "x86_64")]
    {
        use super::row_x86::{WINDOW, available, parse_prefix};
        if !available() {
            return None;
        }
        let mut text = line.to_vec();
        while text.len() < line.len() + WINDOW {
            text.extend_from_slice(if after.is_empty() { b" " } else { after });
        }
        // SAFETY: `available` checked the CPU features.
        let found = unsafe { parse_prefix(&text, &mut Default::default()) }
            .filter(|&(_, end)| end == line.len());
        Some(found.map(|(row, _)| RawRow {
            valuation_type: row.valuation_type.map(|v| Cow::Owned(v.into_owned())),
            ..row
        }))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (line, after);
        None
    }
}

/// The general path: any key order, spacing, escapes and unknown fields; exact error messages.
pub fn parse_row_general(line: &[u8]) -> Res<RawRow<'_>> {
    let mut s = Scanner { b: line, i: 0 };
    let row = s.row()?;
    s.ws();
    if s.i != s.b.len() {
        return err(format!(
            "malformed JSON: unexpected characters after the object at column {}",
            s.i + 1
        ));
    }
    Ok(row)
}

impl<'a> Scanner<'a> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(c) = self.peek() {
            if c == b' ' || c == b'\t' || c == b'\r' || c == b'\n' {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    fn syntax<T>(&self, expected: &str) -> Res<T> {
        match self.peek() {
            None => err(format!(
                "malformed JSON: line ends where {expected} was expected"
            )),
            Some(c) => err(format!(
                "malformed JSON: expected {expected} at column {}, found {:?}",
                self.i + 1,
                char::from(c)
            )),
        }
    }

    #[inline]
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8, what: &str) -> Res<()> {
        self.ws();
        if self.eat(c) {
            Ok(())
        } else {
            self.syntax(what)
        }
    }

    fn row(&mut self) -> Res<RawRow<'a>> {
        self.expect(b'{', "'{'")?;
        let mut row = RawRow {
            seed: None,
            step_index: None,
            max_rank: None,
            move_dir: 0,
            valuation_type: None,
            board: [0; 16],
            branch_evs: [0.0; 4],
            search: SearchStats::default(),
        };
        let mut seen = 0u16;
        self.ws();
        if !self.eat(b'}') {
            loop {
                self.ws();
                if self.peek() != Some(b'"') {
                    return self.syntax("a field name");
                }
                let key = self.string()?;
                self.expect(b':', "':'")?;
                self.ws();
                let bit = match key.as_ref() {
                    "board" => {
                        self.board(&mut row.board)?;
                        K_BOARD
                    }
                    "move" => {
                        row.move_dir = self.move_name()?;
                        K_MOVE
                    }
                    "branch_evs" => {
                        self.branch_evs(&mut row.branch_evs)?;
                        K_EVS
                    }
                    "seed" => {
                        row.seed = self.opt_uint("seed", u32::MAX as u64)?.map(|v| v as u32);
                        K_SEED
                    }
                    "step_index" => {
                        row.step_index = self
                            .opt_uint("step_index", u32::MAX as u64)?
                            .map(|v| v as u32);
                        K_STEP
                    }
                    "max_rank" => {
                        row.max_rank = self.opt_uint("max_rank", u8::MAX as u64)?.map(|v| v as u8);
                        K_RANK
                    }
                    "valuation_type" => {
                        row.valuation_type = self.opt_string("valuation_type")?;
                        K_VTYPE
                    }
                    "valuation" => {
                        self.opt_float("valuation")?;
                        K_VALUATION
                    }
                    "search" => {
                        row.search = self.search_stats()?;
                        K_SEARCH
                    }
                    _ => {
                        self.skip_value(0)?;
                        0
                    }
                };
                if seen & bit != 0 {
                    return err(format!("duplicate field \"{key}\""));
                }
                seen |= bit;
                self.ws();
                if self.eat(b',') {
                    continue;
                }
                if self.eat(b'}') {
                    break;
                }
                return self.syntax("',' or '}'");
            }
        }
        if seen & K_MOVE == 0 {
            return err("missing field \"move\"");
        }
        if seen & K_BOARD == 0 {
            return err("missing field \"board\"");
        }
        Ok(row)
    }

    /// A string after its opening quote has been seen (not consumed).
    fn string(&mut self) -> Res<Cow<'a, str>> {
        self.i += 1;
        let start = self.i;
        let mut ascii = true;
        loop {
            match self.peek() {
                None => return err("malformed JSON: unterminated string"),
                Some(b'"') => break,
                Some(b'\\') => return self.escaped_string(start),
                Some(c) if c < 0x20 => {
                    return err("malformed JSON: control character inside a string");
                }
                Some(c) => {
                    ascii &= c < 0x80;
                    self.i += 1;
                }
            }
        }
        let raw = &self.b[start..self.i];
        self.i += 1;
        if ascii {
            // SAFETY: every byte was checked to be ASCII.
            Ok(Cow::Borrowed(unsafe { std::str::from_utf8_unchecked(raw) }))
        } else {
            std::str::from_utf8(raw)
                .map(Cow::Borrowed)
                .map_err(|_| RowError("malformed JSON: invalid UTF-8 inside a string".into()))
        }
    }

    /// The slow path of [`Self::string`]: decode escapes into an owned string.
    fn escaped_string(&mut self, start: usize) -> Res<Cow<'a, str>> {
        let mut out: Vec<u8> = self.b[start..self.i].to_vec();
        loop {
            match self.peek() {
                None => return err("malformed JSON: unterminated string"),
                Some(b'"') => {
                    self.i += 1;
                    break;
                }
                Some(b'\\') => {
                    self.i += 1;
                    let c = self
                        .peek()
                        .ok_or_else(|| RowError("malformed JSON: unterminated string".into()))?;
                    self.i += 1;
                    match c {
                        b'"' => out.push(b'"'),
                        b'\\' => out.push(b'\\'),
                        b'/' => out.push(b'/'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let ch = self.unicode_escape()?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return err("malformed JSON: bad escape in a string"),
                    }
                }
                Some(c) if c < 0x20 => {
                    return err("malformed JSON: control character inside a string");
                }
                Some(c) => {
                    out.push(c);
                    self.i += 1;
                }
            }
        }
        String::from_utf8(out)
            .map(Cow::Owned)
            .map_err(|_| RowError("malformed JSON: invalid UTF-8 inside a string".into()))
    }

    fn hex4(&mut self) -> Res<u32> {
        let digits = self
            .b
            .get(self.i..self.i + 4)
            .filter(|d| d.iter().all(u8::is_ascii_hexdigit))
            .ok_or_else(|| RowError("malformed JSON: bad \\u escape".into()))?;
        let text = std::str::from_utf8(digits)
            .map_err(|_| RowError("malformed JSON: bad \\u escape".into()))?;
        let v = u32::from_str_radix(text, 16)
            .map_err(|_| RowError("malformed JSON: bad \\u escape".into()))?;
        self.i += 4;
        Ok(v)
    }

    fn unicode_escape(&mut self) -> Res<char> {
        let hi = self.hex4()?;
        let code = if (0xd800..0xdc00).contains(&hi) {
            if !(self.eat(b'\\') && self.eat(b'u')) {
                return err("malformed JSON: unpaired surrogate in a \\u escape");
            }
            let lo = self.hex4()?;
            if !(0xdc00..0xe000).contains(&lo) {
                return err("malformed JSON: unpaired surrogate in a \\u escape");
            }
            0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
        } else {
            hi
        };
        char::from_u32(code)
            .ok_or_else(|| RowError("malformed JSON: unpaired surrogate in a \\u escape".into()))
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            true
        } else {
            false
        }
    }

    /// Scans a JSON number (strict grammar) starting at the current byte.
    fn number(&mut self) -> Res<Number<'a>> {
        let start = self.i;
        let negative = self.eat(b'-');
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while matches!(self.peek(), Some(b'0'..=b'9')) {
                    self.i += 1;
                }
            }
            _ => return self.syntax("a digit"),
        }
        let mut integer = true;
        if self.eat(b'.') {
            integer = false;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return self.syntax("a digit after '.'");
            }
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.i += 1;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            integer = false;
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return self.syntax("a digit in the exponent");
            }
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.i += 1;
            }
        }
        Ok(Number {
            text: &self.b[start..self.i],
            negative,
            integer,
        })
    }

    /// Describes the value at the cursor for a type error ("a string", "true", …).
    fn describe_value(&self) -> &'static str {
        match self.peek() {
            Some(b'"') => "a string",
            Some(b'{') => "an object",
            Some(b'[') => "an array",
            Some(b't') => "true",
            Some(b'f') => "false",
            Some(b'n') => "null",
            _ => "something else",
        }
    }

    /// A non-negative integer no larger than `max`, in a field named `field`.
    fn uint(&mut self, field: &str, max: u64) -> Res<u64> {
        if !matches!(self.peek(), Some(b'-' | b'0'..=b'9')) {
            if matches!(self.peek(), Some(b'"' | b'{' | b'[' | b't' | b'f' | b'n')) {
                return err(format!(
                    "field \"{field}\" must be an integer, found {}",
                    self.describe_value()
                ));
            }
            return self.syntax("a number");
        }
        let n = self.number()?;
        let text = std::str::from_utf8(n.text).unwrap_or("?");
        if !n.integer {
            return err(format!(
                "field \"{field}\" must be an integer, found {text}"
            ));
        }
        if n.negative {
            return err(format!(
                "field \"{field}\" must not be negative, found {text}"
            ));
        }
        let mut v: u64 = 0;
        for &d in n.text {
            v = match v
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(d - b'0')))
            {
                Some(v) => v,
                None => {
                    return err(format!(
                        "field \"{field}\" is out of range: {text} (at most {max})"
                    ));
                }
            };
        }
        if v > max {
            return err(format!(
                "field \"{field}\" is out of range: {text} (at most {max})"
            ));
        }
        Ok(v)
    }

    fn opt_uint(&mut self, field: &str, max: u64) -> Res<Option<u64>> {
        if self.literal(b"null") {
            Ok(None)
        } else {
            self.uint(field, max).map(Some)
        }
    }

    fn opt_string(&mut self, field: &str) -> Res<Option<Cow<'a, str>>> {
        match self.peek() {
            Some(b'"') => self.string().map(Some),
            Some(b'n') if self.literal(b"null") => Ok(None),
            _ => err(format!(
                "field \"{field}\" must be a string, found {}",
                self.describe_value()
            )),
        }
    }

    /// A float or null in a field; NaN/Infinity literals are recognised to be refused clearly.
    fn opt_float(&mut self, field: &str) -> Res<Option<f32>> {
        for word in ["NaN", "Infinity", "-Infinity"] {
            if self.literal(word.as_bytes()) {
                return err(format!("{field} is not finite ({word})"));
            }
        }
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => {
                let n = self.number()?;
                let v = parse_f64(n.text);
                let f = v as f32;
                if !f.is_finite() {
                    let text = std::str::from_utf8(n.text).unwrap_or("?");
                    return err(format!("{field} is not finite as a float32 ({text})"));
                }
                Ok(Some(f))
            }
            Some(b'n') if self.literal(b"null") => Ok(None),
            _ => err(format!(
                "{field} must be a number or null, found {}",
                self.describe_value()
            )),
        }
    }

    /// The `search` object: `null`, or an object whose known members are typed (`used` a
    /// boolean, the counts non-negative integers that fit 64 bits, `cache_hit_rate` a number;
    /// each may be `null`) and whose other members are skipped like unknown row fields.
    fn search_stats(&mut self) -> Res<SearchStats> {
        let mut stats = SearchStats::default();
        if self.literal(b"null") {
            return Ok(stats);
        }
        if !self.eat(b'{') {
            return err(format!(
                "field \"search\" must be an object or null, found {}",
                self.describe_value()
            ));
        }
        let mut seen = 0u16;
        self.ws();
        if self.eat(b'}') {
            return Ok(stats);
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return self.syntax("a field name");
            }
            let key = self.string()?;
            self.expect(b':', "':'")?;
            self.ws();
            let field = search::FIELDS.iter().position(|f| *f == key);
            let bit = match (key.as_ref(), field) {
                ("used", _) => {
                    stats.used = self.opt_bool("search.used")?.unwrap_or(false);
                    1 << 15
                }
                (_, Some(search::HIT_RATE)) => {
                    stats.cache_hit_rate = self.opt_float("search.cache_hit_rate")?.unwrap_or(0.0);
                    1 << search::HIT_RATE
                }
                (name, Some(k)) => {
                    let count = if k < search::HIT_RATE { k } else { k - 1 };
                    stats.counts[count] = self
                        .opt_uint(&format!("search.{name}"), u64::MAX)?
                        .unwrap_or(0);
                    1 << k
                }
                _ => {
                    self.skip_value(1)?;
                    0
                }
            };
            if seen & bit != 0 {
                return err(format!("duplicate field \"search.{key}\""));
            }
            seen |= bit;
            self.ws();
            if self.eat(b',') {
                continue;
            }
            if self.eat(b'}') {
                return Ok(stats);
            }
            return self.syntax("',' or '}'");
        }
    }

    fn opt_bool(&mut self, field: &str) -> Res<Option<bool>> {
        if self.literal(b"true") {
            Ok(Some(true))
        } else if self.literal(b"false") {
            Ok(Some(false))
        } else if self.literal(b"null") {
            Ok(None)
        } else {
            err(format!(
                "field \"{field}\" must be true, false or null, found {}",
                self.describe_value()
            ))
        }
    }

    fn board(&mut self, board: &mut [u8; 16]) -> Res<()> {
        if !self.eat(b'[') {
            return err(format!(
                "field \"board\" must be an array of 16 integers, found {}",
                self.describe_value()
            ));
        }
        let mut n = 0usize;
        self.ws();
        if !self.eat(b']') {
            loop {
                self.ws();
                // Fast path: one or two plain digits followed by ',' or ']'.
                let v = match (self.peek(), self.b.get(self.i + 1).copied()) {
                    (Some(d @ b'0'..=b'9'), Some(b',' | b']')) => {
                        self.i += 1;
                        u64::from(d - b'0')
                    }
                    _ => self.board_cell_slow(n)?,
                };
                if n >= 16 {
                    return err("board has more than 16 cells");
                }
                if v > 16 {
                    let shown = if v == u64::MAX {
                        "above 99".to_string()
                    } else {
                        v.to_string()
                    };
                    return err(format!(
                        "board cell {n} is exponent {shown}; the largest storable tile is 65536 (exponent 16)"
                    ));
                }
                board[n] = v as u8;
                n += 1;
                self.ws();
                if self.eat(b',') {
                    continue;
                }
                if self.eat(b']') {
                    break;
                }
                return self.syntax("',' or ']' in board");
            }
        }
        if n != 16 {
            return err(format!("board has {n} cells, expected 16"));
        }
        Ok(())
    }

    fn board_cell_slow(&mut self, cell: usize) -> Res<u64> {
        if matches!(self.peek(), Some(b'-')) {
            let n = self.number()?;
            let text = std::str::from_utf8(n.text).unwrap_or("?");
            return err(format!(
                "board cell {cell} is {text}; exponents are integers 0..=16"
            ));
        }
        self.uint(&format!("board cell {cell}"), u64::MAX)
    }

    fn move_name(&mut self) -> Res<u8> {
        if self.peek() != Some(b'"') {
            return err(format!(
                "field \"move\" must be a string, found {}",
                self.describe_value()
            ));
        }
        let name = self.string()?;
        match name.as_ref() {
            "up" => Ok(0),
            "down" => Ok(1),
            "left" => Ok(2),
            "right" => Ok(3),
            other => err(format!(
                "unknown move {other:?} (expected up, down, left or right)"
            )),
        }
    }

    fn branch_evs(&mut self, evs: &mut [f32; 4]) -> Res<()> {
        if self.literal(b"null") {
            return Ok(());
        }
        if !self.eat(b'{') {
            return err(format!(
                "field \"branch_evs\" must be an object, found {}",
                self.describe_value()
            ));
        }
        let mut seen = 0u8;
        self.ws();
        if self.eat(b'}') {
            return Ok(());
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return self.syntax("a move name in branch_evs");
            }
            let key = self.string()?;
            let k = match key.as_ref() {
                "up" => 0,
                "down" => 1,
                "left" => 2,
                "right" => 3,
                other => return err(format!("branch_evs has an unknown move {other:?}")),
            };
            if seen & (1 << k) != 0 {
                return err(format!("branch_evs has \"{key}\" twice"));
            }
            seen |= 1 << k;
            self.expect(b':', "':'")?;
            self.ws();
            let label = [
                "branch_evs.up",
                "branch_evs.down",
                "branch_evs.left",
                "branch_evs.right",
            ][k];
            evs[k] = self.opt_float(label)?.unwrap_or(0.0);
            self.ws();
            if self.eat(b',') {
                continue;
            }
            if self.eat(b'}') {
                return Ok(());
            }
            return self.syntax("',' or '}' in branch_evs");
        }
    }

    /// Skips any JSON value, checking its syntax.
    fn skip_value(&mut self, depth: u32) -> Res<()> {
        if depth > MAX_DEPTH {
            return err("malformed JSON: nested too deeply");
        }
        self.ws();
        match self.peek() {
            Some(b'"') => self.string().map(drop),
            Some(b'-' | b'0'..=b'9') => self.number().map(drop),
            Some(b't') if self.literal(b"true") => Ok(()),
            Some(b'f') if self.literal(b"false") => Ok(()),
            Some(b'n') if self.literal(b"null") => Ok(()),
            Some(b'[') => {
                self.i += 1;
                self.ws();
                if self.eat(b']') {
                    return Ok(());
                }
                loop {
                    self.skip_value(depth + 1)?;
                    self.ws();
                    if self.eat(b',') {
                        continue;
                    }
                    if self.eat(b']') {
                        return Ok(());
                    }
                    return self.syntax("',' or ']'");
                }
            }
            Some(b'{') => {
                self.i += 1;
                self.ws();
                if self.eat(b'}') {
                    return Ok(());
                }
                loop {
                    self.ws();
                    if self.peek() != Some(b'"') {
                        return self.syntax("a field name");
                    }
                    self.string()?;
                    self.expect(b':', "':'")?;
                    self.skip_value(depth + 1)?;
                    self.ws();
                    if self.eat(b',') {
                        continue;
                    }
                    if self.eat(b'}') {
                        return Ok(());
                    }
                    return self.syntax("',' or '}'");
                }
            }
            _ => self.syntax("a value"),
        }
    }
}

/// The fast path: the exact layout the Macroxue logger writes, matched byte for byte
/// (`{"seed":…,"step_index":…,"max_rank":…,"move":"…","valuation_type":"…","valuation":…,
/// "board":[…],"branch_evs":{"up":…,"left":…,"right":…,"down":…}}`, or the current logger's
/// with `,"search":{"used":…,…}` before the last brace). It gives up (None) on anything else,
/// including any value the general path would refuse, so the general path decides every error
/// and every unusual row.
pub(super) mod fast {
    use super::{POW10, RawRow, SearchStats, parse_f64, search, swar};
    use std::borrow::Cow;

    struct Cur<'a> {
        b: &'a [u8],
        i: usize,
    }

    impl<'a> Cur<'a> {
        /// Consumes the literal `l` (a fixed size, so the compare is a few word loads).
        #[inline(always)]
        fn lit<const N: usize>(&mut self, l: &[u8; N]) -> Option<()> {
            let here: &[u8; N] = self.b.get(self.i..self.i + N)?.try_into().ok()?;
            if here == l {
                self.i += N;
                Some(())
            } else {
                None
            }
        }

        #[inline(always)]
        fn peek(&self) -> Option<u8> {
            self.b.get(self.i).copied()
        }

        #[inline(always)]
        fn is_null(&mut self) -> bool {
            self.lit(b"null").is_some()
        }

        /// A run of ASCII digits: its value (modulo 2^64; exact up to 19 digits) and length.
        /// Reads 8 bytes at a time while 8 remain (see [`swar`]).
        #[inline(always)]
        fn digits(&mut self) -> (u64, usize) {
            let mut value: u64 = 0;
            let mut len = 0;
            while let Some(word) = swar::load(self.b, self.i) {
                let n = swar::leading_digits(word);
                if n > 0 {
                    value = value
                        .wrapping_mul(swar::POW10[n])
                        .wrapping_add(swar::value_of_leading(word, n));
                }
                self.i += n;
                len += n;
                if n < 8 {
                    return (value, len);
                }
            }
            while let Some(d @ b'0'..=b'9') = self.peek() {
                value = value.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
                self.i += 1;
                len += 1;
            }
            (value, len)
        }

        /// Plain decimal digits (no sign, no leading zero unless alone), at most `max`.
        #[inline(always)]
        fn uint(&mut self, max: u64) -> Option<u64> {
            let start = self.i;
            let (v, len) = self.digits();
            // More than 19 digits would not fit u64: no field allows that many.
            if len == 0 || len > 19 || (len > 1 && self.b[start] == b'0') || v > max {
                return None;
            }
            Some(v)
        }

        #[inline(always)]
        fn opt_uint(&mut self, max: u64) -> Option<Option<u64>> {
            // The usual case with one 8-byte load: `null`, or fewer than 8 digits (the same
            // checks as `uint`, whose digit scan would stop after this same load). Otherwise
            // (fewer than 8 bytes left, or 8 digits or more) the general code below, from the
            // same position.
            if let Some(w) = swar::load(self.b, self.i) {
                if w as u32 == u32::from_le_bytes(*b"null") {
                    self.i += 4;
                    return Some(None);
                }
                let n = swar::leading_digits(w);
                if n < 8 {
                    if n == 0 || (n > 1 && w as u8 == b'0') {
                        return None;
                    }
                    let v = swar::value_of_leading(w, n);
                    if v > max {
                        return None;
                    }
                    self.i += n;
                    return Some(Some(v));
                }
            }
            if self.is_null() {
                Some(None)
            } else {
                self.uint(max).map(Some)
            }
        }

        /// A JSON number in the plain `-?digits(.digits)?` form, as a finite f32. The mantissa
        /// is accumulated during the scan; with at most 15 digits it is exact, and one division
        /// by an exact power of ten gives the correctly rounded f64 (as `parse_f64` would).
        #[inline(always)]
        fn float(&mut self) -> Option<f32> {
            self.float_short().unwrap_or_else(|| self.float_long())
        }

        /// [`Self::float_long`] for the usual case, without loops: integer and fraction part
        /// each shorter than 8 digits and each read with one 8-byte load. `Some(result)` is
        /// exactly what `float_long` would return (same checks, same arithmetic: at most
        /// 7 + 7 digits, so always its single-division branch); `None` = not this case (a part
        /// of 8 or more digits, or fewer than 8 bytes left to load), nothing consumed, use
        /// `float_long`.
        #[inline(always)]
        fn float_short(&mut self) -> Option<Option<f32>> {
            let negative = self.peek() == Some(b'-');
            let int_start = self.i + usize::from(negative);
            let w = swar::load(self.b, int_start)?;
            let int_len = swar::leading_digits(w);
            if int_len == 8 {
                return None;
            }
            if int_len == 0 || (int_len > 1 && w & 0xff == u64::from(b'0')) {
                return Some(None);
            }
            let int_value = swar::value_of_leading(w, int_len);
            let after_int = (w >> (8 * int_len)) as u8;
            let (mantissa, frac_len, end) = if after_int == b'.' {
                let frac_start = int_start + int_len + 1;
                let f = swar::load(self.b, frac_start)?;
                let frac_len = swar::leading_digits(f);
                if frac_len == 8 {
                    return None;
                }
                if frac_len == 0 {
                    return Some(None);
                }
                if matches!((f >> (8 * frac_len)) as u8, b'e' | b'E') {
                    return Some(None);
                }
                let mantissa =
                    int_value * swar::POW10[frac_len] + swar::value_of_leading(f, frac_len);
                (mantissa, frac_len, frac_start + frac_len)
            } else {
                if matches!(after_int, b'e' | b'E') {
                    return Some(None);
                }
                (int_value, 0, int_start + int_len)
            };
            self.i = end;
            // Below 10^14, so the signed conversion is the same exact value (one instruction
            // instead of the unsigned sequence), and the f32 is finite (below 10^7).
            let x = mantissa as i64 as f64 / POW10[frac_len];
            let v = (if negative { -x } else { x }) as f32;
            Some(Some(v))
        }

        /// A JSON number in the plain `-?digits(.digits)?` form, any length.
        #[inline(always)]
        fn float_long(&mut self) -> Option<f32> {
            let start = self.i;
            let negative = self.peek() == Some(b'-');
            if negative {
                self.i += 1;
            }
            let int_start = self.i;
            let (int_value, int_len) = self.digits();
            if int_len == 0 || (int_len > 1 && self.b[int_start] == b'0') {
                return None;
            }
            let mut mantissa = int_value;
            let mut frac_len = 0;
            if self.peek() == Some(b'.') {
                self.i += 1;
                let (frac_value, len) = self.digits();
                if len == 0 {
                    return None;
                }
                frac_len = len;
                // Wraps past 19 digits, but is only used with at most 15.
                mantissa = mantissa
                    .wrapping_mul(swar::POW10[len.min(19)])
                    .wrapping_add(frac_value);
            }
            if matches!(self.peek(), Some(b'e' | b'E')) {
                return None;
            }
            let v = if int_len + frac_len <= 15 {
                let x = mantissa as f64 / POW10[frac_len];
                if negative { -x } else { x }
            } else {
                parse_f64(&self.b[start..self.i])
            };
            let v = v as f32;
            v.is_finite().then_some(v)
        }

        #[inline(always)]
        fn opt_float(&mut self) -> Option<f32> {
            if self.is_null() {
                Some(0.0)
            } else {
                self.float()
            }
        }

        /// A string without escapes or control characters, borrowed.
        #[inline(always)]
        fn plain_string(&mut self) -> Option<&'a str> {
            let start = self.i;
            let len = memchr::memchr(b'"', &self.b[start..])?;
            let raw = &self.b[start..start + len];
            if raw
                .iter()
                .any(|&c| c == b'\\' || !(0x20..0x80).contains(&c))
            {
                return None;
            }
            self.i += len + 1;
            // SAFETY: every byte was checked to be printable ASCII.
            Some(unsafe { std::str::from_utf8_unchecked(raw) })
        }

        /// The valuation type's name after its opening quote: the three the logger writes are
        /// recognised whole, anything else goes through [`Self::plain_string`].
        #[inline(always)]
        fn valuation_name(&mut self) -> Option<&'a str> {
            for name in ["search", "tuple11", "tuple10"] {
                let end = self.i + name.len();
                if self.b.get(self.i..end) == Some(name.as_bytes())
                    && self.b.get(end) == Some(&b'"')
                {
                    self.i = end + 1;
                    return Some(name);
                }
            }
            self.plain_string()
        }

        /// The board's 16 cells, each `d` or `dd` (no leading zero, at most 16), separated by
        /// commas, up to (not including) the closing bracket; the same acceptance as reading
        /// cell by cell (a digit, a second digit unless the first is `0`, then a `,`).
        ///
        /// All reads come from one 64-byte window, so the cells need no bounds checks: a row in
        /// the logger's layout always has more than 64 bytes from its first cell on (the
        /// shortest board, 31 bytes, is followed by at least 52 more: `],"branch_evs":{"up":`,
        /// four values of at least one byte, their three keys and `}}`), so when fewer remain
        /// the cell-by-cell scan would give up too. Cell k starts at most at byte 3k, and the
        /// last read is at most byte 3 * 15 + 1 = 46, so the `& 63` masks never change an index.
        #[inline(always)]
        fn board(&mut self) -> Option<[u8; 16]> {
            let w: &[u8; 64] = self
                .b
                .get(self.i..self.i.checked_add(64)?)?
                .try_into()
                .ok()?;
            let mut board = [0u8; 16];
            let mut p = 0usize;
            for (k, cell) in board.iter_mut().enumerate() {
                let d0 = w[p & 63].wrapping_sub(b'0');
                let d1 = w[(p + 1) & 63].wrapping_sub(b'0');
                if d0 > 9 {
                    return None;
                }
                if d1 <= 9 {
                    // Two digits: a leading zero or a value above 16 is refused (cell by cell,
                    // `0` would be read alone and the next digit would fail the comma check).
                    let v = d0 * 10 + d1;
                    if d0 == 0 || v > 16 {
                        return None;
                    }
                    *cell = v;
                    p += 2;
                } else {
                    *cell = d0;
                    p += 1;
                }
                if k < 15 {
                    if w[p & 63] != b',' {
                        return None;
                    }
                    p += 1;
                }
            }
            self.i += p;
            Some(board)
        }
    }

    /// The current logger's `search` members after `{"used":true|false`, each with the comma
    /// and quotes before it: 13 counters, then the hit rate, then the last counter.
    const SEARCH_COUNTERS: [&[u8]; 12] = [
        b",\"total_nodes\":",
        b",\"move_nodes\":",
        b",\"tile_nodes\":",
        b",\"tile_branches\":",
        b",\"eval_calls\":",
        b",\"prune_score\":",
        b",\"prune_depth\":",
        b",\"prune_prob\":",
        b",\"cache_lookups\":",
        b",\"cache_hits\":",
        b",\"cache_updates\":",
        b",\"cache_collisions\":",
    ];

    impl Cur<'_> {
        /// Consumes the literal `l`, of any length.
        #[inline(always)]
        fn lit_slice(&mut self, l: &[u8]) -> Option<()> {
            if self.b.get(self.i..self.i.checked_add(l.len())?)? == l {
                self.i += l.len();
                Some(())
            } else {
                None
            }
        }

        /// The row's end after the branch EVs' closing brace: `}` (the layout of the design
        /// notes), or the current logger's `,"search":{…}}` in its exact layout, every value
        /// checked as the general path checks it (any other spelling is left to the general
        /// path); the statistics it holds.
        #[inline(always)]
        fn row_end(&mut self) -> Option<SearchStats> {
            let mut stats = SearchStats::default();
            if self.lit(b"}").is_some() {
                return Some(stats);
            }
            self.lit(b",\"search\":{\"used\":")?;
            if self.lit(b"true").is_some() {
                stats.used = true;
            } else {
                self.lit(b"false")?;
            }
            for (key, count) in SEARCH_COUNTERS.iter().zip(&mut stats.counts) {
                self.lit_slice(key)?;
                *count = self.opt_uint(u64::MAX)?.unwrap_or(0);
            }
            self.lit(b",\"cache_hit_rate\":")?;
            stats.cache_hit_rate = self.opt_float()?;
            self.lit(b",\"max_move_depth\":")?;
            stats.counts[search::HIT_RATE] = self.opt_uint(u64::MAX)?.unwrap_or(0);
            self.lit(b"}}")?;
            Some(stats)
        }
    }

    /// Where the row ends when what follows the branch EVs' closing brace at `i` is `}` or the
    /// current logger's `search` object (see [`Cur::row_end`]), and the statistics; None
    /// otherwise. The vector path hands the row's end over to this.
    #[inline(always)]
    pub fn row_end(text: &[u8], i: usize) -> Option<(usize, SearchStats)> {
        let mut c = Cur { b: text, i };
        let stats = c.row_end()?;
        Some((c.i, stats))
    }

    pub fn parse(line: &[u8]) -> Option<RawRow<'_>> {
        parse_prefix(line)
            .filter(|&(_, end)| end == line.len())
            .map(|(row, _)| row)
    }

    /// The row at the start of `text` in the logger's layout, and where it ends (after its
    /// closing braces); whatever follows is the caller's business.
    #[inline]
    pub fn parse_prefix(text: &[u8]) -> Option<(RawRow<'_>, usize)> {
        let mut c = Cur { b: text, i: 0 };
        c.lit(b"{\"seed\":")?;
        let seed = c.opt_uint(u64::from(u32::MAX))?;
        c.lit(b",\"step_index\":")?;
        let step_index = c.opt_uint(u64::from(u32::MAX))?;
        c.lit(b",\"max_rank\":")?;
        let max_rank = c.opt_uint(u64::from(u8::MAX))?;
        c.lit(b",\"move\":\"")?;
        let move_dir = match c.peek()? {
            b'u' => c.lit(b"up\"").map(|_| 0),
            b'd' => c.lit(b"down\"").map(|_| 1),
            b'l' => c.lit(b"left\"").map(|_| 2),
            b'r' => c.lit(b"right\"").map(|_| 3),
            _ => None,
        }?;
        c.lit(b",\"valuation_type\":")?;
        let valuation_type = if c.is_null() {
            None
        } else {
            c.lit(b"\"")?;
            Some(Cow::Borrowed(c.valuation_name()?))
        };
        c.lit(b",\"valuation\":")?;
        c.opt_float()?;
        c.lit(b",\"board\":[")?;
        let board = c.board()?;
        c.lit(b"],\"branch_evs\":{\"up\":")?;
        let up = c.opt_float()?;
        c.lit(b",\"left\":")?;
        let left = c.opt_float()?;
        c.lit(b",\"right\":")?;
        let right = c.opt_float()?;
        c.lit(b",\"down\":")?;
        let down = c.opt_float()?;
        c.lit(b"}")?;
        let search = c.row_end()?;
        let row = RawRow {
            seed: seed.map(|v| v as u32),
            step_index: step_index.map(|v| v as u32),
            max_rank: max_rank.map(|v| v as u8),
            move_dir,
            valuation_type,
            board,
            branch_evs: [up, down, left, right],
            search,
        };
        Some((row, c.i))
    }
}

/// Reading eight ASCII digits at a time from a little-endian u64 (the first byte in the low
/// bits): which leading bytes are digits, and what number they spell, in a few word operations.
mod swar {
    /// 10^n as integers, n = 0..=19.
    pub const POW10: [u64; 20] = {
        let mut p = [1u64; 20];
        let mut n = 1;
        while n < 20 {
            p[n] = p[n - 1] * 10;
            n += 1;
        }
        p
    };

    /// The 8 bytes at `i`, when 8 remain.
    #[inline(always)]
    pub fn load(b: &[u8], i: usize) -> Option<u64> {
        let bytes: [u8; 8] = b.get(i..i.checked_add(8)?)?.try_into().ok()?;
        Some(u64::from_le_bytes(bytes))
    }

    /// How many bytes at the start of `word` are ASCII digits (0..=8).
    #[inline(always)]
    pub fn leading_digits(word: u64) -> usize {
        // A digit byte XOR '0' is 0..=9: high nibble clear, and adding 6 to the low nibble
        // does not reach 0x10 (never carries into the next byte: 0x0f + 6 < 0x100).
        let x = word ^ 0x3030_3030_3030_3030;
        let high = x & 0xf0f0_f0f0_f0f0_f0f0;
        let above_nine =
            ((x & 0x0f0f_0f0f_0f0f_0f0f) + 0x0606_0606_0606_0606) & 0x1010_1010_1010_1010;
        ((high | above_nine).trailing_zeros() / 8) as usize
    }

    /// The number spelled by the first `n` (1..=8) bytes of `word`, all digits.
    #[inline(always)]
    pub fn value_of_leading(word: u64, n: usize) -> u64 {
        debug_assert!((1..=8).contains(&n));
        // Move the n digits to the top bytes; the zero bytes below act as leading zeros.
        let d = (word & 0x0f0f_0f0f_0f0f_0f0f) << (8 * (8 - n));
        // Pairs, then quads, then all eight: each step combines neighbours as hi * 10^k + lo.
        let d = (d.wrapping_mul(10 * 256 + 1) >> 8) & 0x00ff_00ff_00ff_00ff;
        let d = (d.wrapping_mul(100 * 65536 + 1) >> 16) & 0x0000_ffff_0000_ffff;
        d.wrapping_mul(10000 * (1 << 32) + 1) >> 32
    }
}

/// 10^n as f64, exact for every n here (shared with the vector path, `row_x86`).
pub(super) const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Parses a JSON number (already checked against the grammar) to the nearest f64.
/// Exact fast path (Clinger): at most 15 significant digits and |exponent| ≤ 22, where one
/// IEEE multiplication or division is correctly rounded; everything else goes to the standard
/// library's correct parser.
fn parse_f64(text: &[u8]) -> f64 {
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        _ => (false, text),
    };
    let mut mantissa: u64 = 0;
    let mut n_digits = 0u32;
    let mut exp10: i32 = 0;
    let mut i = 0;
    while i < digits.len() && digits[i].is_ascii_digit() {
        mantissa = mantissa
            .wrapping_mul(10)
            .wrapping_add(u64::from(digits[i] - b'0'));
        n_digits += u32::from(mantissa != 0);
        i += 1;
    }
    if i < digits.len() && digits[i] == b'.' {
        i += 1;
        while i < digits.len() && digits[i].is_ascii_digit() {
            mantissa = mantissa
                .wrapping_mul(10)
                .wrapping_add(u64::from(digits[i] - b'0'));
            n_digits += u32::from(mantissa != 0);
            exp10 -= 1;
            i += 1;
        }
    }
    if i == digits.len() && n_digits <= 15 && (-22..=22).contains(&exp10) {
        let m = mantissa as f64;
        let v = if exp10 < 0 {
            m / POW10[(-exp10) as usize]
        } else {
            m * POW10[exp10 as usize]
        };
        return if negative { -v } else { v };
    }
    // SAFETY: the scanner only hands over bytes matching the JSON number grammar (ASCII).
    let s = unsafe { std::str::from_utf8_unchecked(text) };
    s.parse::<f64>().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANONICAL: &str = r#"{"seed":272350805,"step_index":50,"max_rank":6,"move":"right","valuation_type":"search","valuation":2.536000,"board":[6,5,3,1,2,2,1,0,1,1,0,0,0,0,0,0],"branch_evs":{"up":null,"left":2.511000,"right":2.536000,"down":-5.262000}}"#;

    #[test]
    fn parses_the_canonical_row() {
        let r = parse_row(CANONICAL.as_bytes()).unwrap();
        assert_eq!(r.seed, Some(272350805));
        assert_eq!(r.step_index, Some(50));
        assert_eq!(r.max_rank, Some(6));
        assert_eq!(r.move_dir, 3);
        assert_eq!(r.valuation_type.as_deref(), Some("search"));
        assert_eq!(r.board, [6, 5, 3, 1, 2, 2, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(r.branch_evs, [0.0, -5.262, 2.511, 2.536]);
    }

    #[test]
    fn agrees_with_serde_json_on_values() {
        let v: serde_json::Value = serde_json::from_str(CANONICAL).unwrap();
        let r = parse_row(CANONICAL.as_bytes()).unwrap();
        assert_eq!(
            r.branch_evs[1],
            v["branch_evs"]["down"].as_f64().unwrap() as f32
        );
    }

    #[test]
    fn fast_path_takes_the_canonical_row_and_agrees_with_the_general_path() {
        let fast = fast::parse(CANONICAL.as_bytes()).expect("canonical layout takes the fast path");
        assert_eq!(fast, parse_row_general(CANONICAL.as_bytes()).unwrap());
        let with_nulls = CANONICAL
            .replace("\"seed\":272350805", "\"seed\":null")
            .replace("\"search\"", "null");
        let fast = fast::parse(with_nulls.as_bytes()).expect("nulls stay on the fast path");
        assert_eq!(fast, parse_row_general(with_nulls.as_bytes()).unwrap());
        // Anything the general path would refuse or treat differently leaves the fast path.
        for odd in [
            CANONICAL.replace("272350805", "4294967296"),
            CANONICAL.replace("[6,5,", "[17,5,"),
            CANONICAL.replace("[6,5,", "[06,5,"),
            CANONICAL.replace("2.511000", "1e39"),
            CANONICAL.replace("2.511000", "NaN"),
            CANONICAL.replace("\"right\",", "\"rig\\u0068t\","),
            CANONICAL.replace("}}", "},\"x\":1}"),
            format!("{CANONICAL} "),
        ] {
            assert!(fast::parse(odd.as_bytes()).is_none(), "{odd}");
        }
    }

    #[test]
    fn fast_path_floats_equal_the_general_parser() {
        let mut rng = crate::rng::Xoshiro::new(0x2545_f491_4f6c_dd1d);
        let mut next = || rng.next_u64();
        for _ in 0..20_000 {
            let r = next();
            let int = r % [1, 10, 1000, 100_000, 100_000_000][(r >> 40) as usize % 5];
            let decimals = (r >> 50) as usize % 9;
            let frac = next() % 10u64.pow(decimals as u32);
            let sign = if r >> 63 == 1 { "-" } else { "" };
            let ev = if decimals == 0 {
                format!("{sign}{int}")
            } else {
                format!("{sign}{int}.{frac:0decimals$}")
            };
            let row = CANONICAL.replace("2.511000", &ev);
            let fast = fast::parse(row.as_bytes()).expect("plain numbers take the fast path");
            let general = parse_row_general(row.as_bytes()).unwrap();
            assert_eq!(
                fast.branch_evs[2].to_bits(),
                general.branch_evs[2].to_bits(),
                "{ev}"
            );
        }
    }

    #[test]
    fn swar_digits_agree_with_byte_by_byte() {
        let naive = |w: &[u8; 8]| {
            let n = w.iter().take_while(|b| b.is_ascii_digit()).count();
            let v = w[..n]
                .iter()
                .fold(0u64, |v, &d| v * 10 + u64::from(d - b'0'));
            (n, v)
        };
        let check = |w: [u8; 8]| {
            let word = u64::from_le_bytes(w);
            let (n, v) = naive(&w);
            assert_eq!(swar::leading_digits(word), n, "{w:?}");
            if n > 0 {
                assert_eq!(swar::value_of_leading(word, n), v, "{w:?}");
            }
        };
        // Every byte value in every position, among digits.
        for pos in 0..8 {
            for b in 0..=255u8 {
                let mut w = *b"98765432";
                w[pos] = b;
                check(w);
            }
        }
        let mut rng = crate::rng::Xoshiro::new(0x005e_ed0f_d161_7500);
        for _ in 0..100_000 {
            let r = rng.next_u64();
            let mut w = [0u8; 8];
            for (i, b) in w.iter_mut().enumerate() {
                let pick = (r >> (8 * i)) as u8;
                *b = if pick < 200 { b'0' + pick % 10 } else { pick };
            }
            check(w);
        }
        assert_eq!(swar::POW10[19], 10_000_000_000_000_000_000);
    }

    #[test]
    fn float_fast_path_is_exact() {
        for s in [
            "0.1",
            "2.536000",
            "-5.262000",
            "123456.789012",
            "0.000001",
            "1e5",
            "1.5E-3",
            "0",
            "-0.0",
            "3.4028234663852886e38",
            "9007199254740993",
            "0.30000000000000004",
            "1234567890123456789.5",
        ] {
            assert_eq!(
                parse_f64(s.as_bytes()).to_bits(),
                s.parse::<f64>().unwrap().to_bits(),
                "{s}"
            );
        }
    }

    #[test]
    fn accepts_quirks() {
        let row = r#" { "board" : [0,0,0,0, 0,0,0,0, 0,0,0,0, 0,0,0,16], "extra": {"a": [1, "x\"y", {"b": null}]},
            "move":"\u0075p", "valuation_type": null, "seed": null, "branch_evs": {"up": 1e-3} }"#;
        let r = parse_row(row.as_bytes()).unwrap();
        assert_eq!(r.board[15], 16);
        assert_eq!(r.move_dir, 0);
        assert_eq!(r.valuation_type, None);
        assert_eq!(r.seed, None);
        assert_eq!(r.branch_evs[0], 0.001);
    }

    fn error_of(row: &str) -> String {
        parse_row(row.as_bytes()).unwrap_err().0
    }

    #[test]
    fn refuses_bad_rows_with_a_reason() {
        let b = r#""board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]"#;
        assert!(error_of(&format!(r#"{{{b}}}"#)).contains("missing field \"move\""));
        assert!(error_of(r#"{"move":"up"}"#).contains("missing field \"board\""));
        assert!(error_of(&format!(r#"{{{b},"move":"upward"}}"#)).contains("unknown move"));
        assert!(
            error_of(r#"{"move":"up","board":[0,0,0,0,0,17,0,0,0,0,0,0,0,0,0,0]}"#)
                .contains("cell 5")
        );
        assert!(
            error_of(r#"{"move":"up","board":[0,-1,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}"#)
                .contains("cell 1")
        );
        assert!(
            error_of(r#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}"#)
                .contains("15 cells")
        );
        assert!(error_of(&format!(r#"{{{b},"move":"up","seed":4294967296}}"#)).contains("seed"));
        assert!(
            error_of(&format!(r#"{{{b},"move":"up","step_index":"5"}}"#)).contains("step_index")
        );
        assert!(
            error_of(&format!(r#"{{{b},"move":"up","step_index":5.5}}"#)).contains("step_index")
        );
        assert!(error_of(&format!(r#"{{{b},"move":"up","max_rank":true}}"#)).contains("max_rank"));
        assert!(
            error_of(&format!(r#"{{{b},"move":"up","branch_evs":{{"up":NaN}}}}"#))
                .contains("finite")
        );
        assert!(
            error_of(&format!(
                r#"{{{b},"move":"up","branch_evs":{{"down":-Infinity}}}}"#
            ))
            .contains("finite")
        );
        assert!(
            error_of(&format!(
                r#"{{{b},"move":"up","branch_evs":{{"left":1e39}}}}"#
            ))
            .contains("finite")
        );
        assert!(error_of(&format!(r#"{{{b},"move":"up"}} x"#)).contains("after the object"));
        assert!(error_of(&format!(r#"{{{b},"move":"up","move":"down"}}"#)).contains("duplicate"));
        assert!(error_of(r#"{"move":"up","#).contains("malformed JSON"));
        assert!(error_of(&format!(r#"{{{b},"move":"up","x":01}}"#)).contains("malformed JSON"));
    }
}
