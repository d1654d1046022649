//! One JSONL row → typed fields, with no per-row allocation.
//!
//! A strict, single-pass JSON scanner specialised to the row shape: known keys are parsed
//! straight into typed fields, unknown keys are skipped (but still checked to be valid JSON),
//! and anything unusual (escapes, odd spacing, any key order) takes the same general code path,
//! so there is one parser and no second opinion to keep in sync. This module is also the entry
//! point: it tries the fast paths first (the vector one in `row_x86` where the CPU has it,
//! the scalar one in [`super::row_fast`]), which share their types through
//! [`super::row_types`] rather than through each other.

use std::borrow::Cow;

use crate::format::search::{self, SearchStats};
use crate::raw::row_fast as fast;
use crate::raw::row_types::parse_f64;
pub use crate::raw::row_types::{RawRow, RowError};

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
    unsafe { parse_row_in_place_with::<false, true>(text, memo) }
}

/// [`parse_row_in_place_with`] with the vector path, compiled for its CPU features.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,popcnt")]
unsafe fn parse_row_in_place_avx2<'a>(
    text: &'a [u8],
    memo: &mut RowMemo,
) -> Option<(RawRow<'a>, usize)> {
    // SAFETY: the caller's promise.
    unsafe { parse_row_in_place_with::<true, true>(text, memo) }
}

/// [`parse_row_in_place`], with the vector path first when `VECTOR` (and the build is for
/// x86-64): where enough text remains, and unless it gives up. Inlined: with `VECTOR` the
/// caller must be compiled for the vector path's features (`#[target_feature(enable =
/// "avx2,bmi1,bmi2,popcnt")]`) for its instructions to be inlined. Without `KEEP`, the row's
/// search statistics are checked but only `used` is read (the counts stay 0).
///
/// # Safety
/// With `VECTOR`, `row_x86::available()` must have returned true.
#[inline(always)]
pub unsafe fn parse_row_in_place_with<'a, const VECTOR: bool, const KEEP: bool>(
    text: &'a [u8],
    memo: &mut RowMemo,
) -> Option<(RawRow<'a>, usize)> {
    #[cfg(target_arch = "x86_64")]
    let vector = if VECTOR && text.len() >= super::row_x86::WINDOW {
        // SAFETY: the caller's promise.
        unsafe { super::row_x86::parse_prefix::<KEEP>(text, &mut memo.vector) }
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
        None => fast::parse_prefix::<KEEP>(text)?,
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
        let found = unsafe { parse_prefix::<true>(&text, &mut Default::default()) }
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
        let seen = self.members("", |s, key| {
            Ok(match key {
                "board" => {
                    s.board(&mut row.board)?;
                    K_BOARD
                }
                "move" => {
                    row.move_dir = s.move_name()?;
                    K_MOVE
                }
                "branch_evs" => {
                    s.branch_evs(&mut row.branch_evs)?;
                    K_EVS
                }
                "seed" => {
                    row.seed = s.opt_uint("seed", u32::MAX as u64)?.map(|v| v as u32);
                    K_SEED
                }
                "step_index" => {
                    row.step_index = s.opt_uint("step_index", u32::MAX as u64)?.map(|v| v as u32);
                    K_STEP
                }
                "max_rank" => {
                    row.max_rank = s.opt_uint("max_rank", u8::MAX as u64)?.map(|v| v as u8);
                    K_RANK
                }
                "valuation_type" => {
                    row.valuation_type = s.opt_string("valuation_type")?;
                    K_VTYPE
                }
                "valuation" => {
                    s.opt_float("valuation")?;
                    K_VALUATION
                }
                "search" => {
                    row.search = s.search_stats()?;
                    K_SEARCH
                }
                _ => {
                    s.skip_value(0)?;
                    0
                }
            })
        })?;
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

    /// The members of an object whose `{` was just consumed, up to its `}`: `member` reads
    /// each one's value (after the key and colon) and returns its bit in the bits returned
    /// (0 for a member that may repeat); a bit seen twice is a duplicate, named with `prefix`.
    fn members(
        &mut self,
        prefix: &str,
        mut member: impl FnMut(&mut Self, &str) -> Res<u16>,
    ) -> Res<u16> {
        let mut seen = 0u16;
        self.ws();
        if self.eat(b'}') {
            return Ok(seen);
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return self.syntax("a field name");
            }
            let key = self.string()?;
            self.expect(b':', "':'")?;
            self.ws();
            let bit = member(self, &key)?;
            if seen & bit != 0 {
                return err(format!("duplicate field \"{prefix}{key}\""));
            }
            seen |= bit;
            self.ws();
            if self.eat(b',') {
                continue;
            }
            if self.eat(b'}') {
                return Ok(seen);
            }
            return self.syntax("',' or '}'");
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
        self.members("search.", |s, key| {
            let field = search::FIELDS.iter().position(|f| *f == key);
            Ok(match (key, field) {
                ("used", _) => {
                    stats.used = s.opt_bool("search.used")?.unwrap_or(false);
                    1 << 15
                }
                (name, Some(k)) => {
                    match search::count_slot(k) {
                        Some(c) => {
                            stats.counts[c] = s
                                .opt_uint(&format!("search.{name}"), u64::MAX)?
                                .unwrap_or(0)
                        }
                        None => {
                            stats.cache_hit_rate =
                                s.opt_float("search.cache_hit_rate")?.unwrap_or(0.0)
                        }
                    }
                    1 << k
                }
                _ => {
                    s.skip_value(1)?;
                    0
                }
            })
        })?;
        Ok(stats)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::row_fast::swar;

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
