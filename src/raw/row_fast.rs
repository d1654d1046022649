//! The fast path: the exact layout the Macroxue logger writes, matched byte for byte
//! (`{"seed":…,"step_index":…,"max_rank":…,"move":"…","valuation_type":"…","valuation":…,
//! "board":[…],"branch_evs":{"up":…,"left":…,"right":…,"down":…}}`, or the current logger's
//! with `,"search":{"used":…,…}` before the last brace). It gives up (None) on anything else,
//! including any value the general path would refuse, so the general path decides every error
//! and every unusual row.

use std::borrow::Cow;

use crate::format::search::{self, SearchStats};
use crate::raw::row_types::{POW10, RawRow, parse_f64};

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
            let mantissa = int_value * swar::POW10[frac_len] + swar::value_of_leading(f, frac_len);
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
            if self.b.get(self.i..end) == Some(name.as_bytes()) && self.b.get(end) == Some(&b'"') {
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

/// Where `max_move_depth`, the last field of the `search` object, is kept in the counts.
pub(crate) const MAX_MOVE_DEPTH: usize = match search::count_slot(search::FIELDS.len() - 1) {
    Some(c) => c,
    None => panic!("max_move_depth is a count"),
};

impl Cur<'_> {
    /// One counter of the `search` object: its key `key` (with the comma and quotes before
    /// it, a fixed size so the compare is a few word loads rather than a `memcmp` call) and its
    /// value, kept in `count` with `KEEP`.
    #[inline(always)]
    fn counter<const N: usize, const KEEP: bool>(
        &mut self,
        key: &[u8; N],
        count: &mut u64,
    ) -> Option<()> {
        self.lit(key)?;
        let value = self.opt_uint(u64::MAX)?;
        if KEEP {
            *count = value.unwrap_or(0);
        }
        Some(())
    }

    /// The row's end after the branch EVs' closing brace: `}` (the layout of the design
    /// notes), or the current logger's `,"search":{…}}` in its exact layout, every value
    /// checked as the general path checks it (any other spelling is left to the general
    /// path); the statistics it holds: `used`, and with `KEEP` the counts too (without, the
    /// numbers are checked but their values never computed: a row that is not kept costs
    /// less).
    #[inline(always)]
    fn row_end<const KEEP: bool>(&mut self) -> Option<SearchStats> {
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
        // The 12 counters before the hit rate, in log order (`search::FIELDS`).
        let c = &mut stats.counts;
        self.counter::<_, KEEP>(b",\"total_nodes\":", &mut c[0])?;
        self.counter::<_, KEEP>(b",\"move_nodes\":", &mut c[1])?;
        self.counter::<_, KEEP>(b",\"tile_nodes\":", &mut c[2])?;
        self.counter::<_, KEEP>(b",\"tile_branches\":", &mut c[3])?;
        self.counter::<_, KEEP>(b",\"eval_calls\":", &mut c[4])?;
        self.counter::<_, KEEP>(b",\"prune_score\":", &mut c[5])?;
        self.counter::<_, KEEP>(b",\"prune_depth\":", &mut c[6])?;
        self.counter::<_, KEEP>(b",\"prune_prob\":", &mut c[7])?;
        self.counter::<_, KEEP>(b",\"cache_lookups\":", &mut c[8])?;
        self.counter::<_, KEEP>(b",\"cache_hits\":", &mut c[9])?;
        self.counter::<_, KEEP>(b",\"cache_updates\":", &mut c[10])?;
        self.counter::<_, KEEP>(b",\"cache_collisions\":", &mut c[11])?;
        self.lit(b",\"cache_hit_rate\":")?;
        let rate = self.opt_float()?;
        self.lit(b",\"max_move_depth\":")?;
        let depth = self.opt_uint(u64::MAX)?;
        if KEEP {
            stats.cache_hit_rate = rate;
            stats.counts[MAX_MOVE_DEPTH] = depth.unwrap_or(0);
        }
        self.lit(b"}}")?;
        Some(stats)
    }
}

/// Where the row ends when what follows the branch EVs' closing brace at `i` is `}` or the
/// current logger's `search` object (see `Cur::row_end`), and the statistics; None
/// otherwise. The vector path hands the row's end over to this. `KEEP`: see `Cur::row_end`.
#[inline(always)]
pub fn row_end<const KEEP: bool>(text: &[u8], i: usize) -> Option<(usize, SearchStats)> {
    let mut c = Cur { b: text, i };
    let stats = c.row_end::<KEEP>()?;
    Some((c.i, stats))
}

pub fn parse(line: &[u8]) -> Option<RawRow<'_>> {
    parse_prefix::<true>(line)
        .filter(|&(_, end)| end == line.len())
        .map(|(row, _)| row)
}

/// The row at the start of `text` in the logger's layout, and where it ends (after its
/// closing braces); whatever follows is the caller's business.
#[inline]
pub fn parse_prefix<const KEEP: bool>(text: &[u8]) -> Option<(RawRow<'_>, usize)> {
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
    let search = c.row_end::<KEEP>()?;
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

/// Reading eight ASCII digits at a time from a little-endian u64 (the first byte in the low
/// bits): which leading bytes are digits, and what number they spell, in a few word operations.
pub(crate) mod swar {
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
