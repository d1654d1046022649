//! The logger's row layout read with x86-64 vector instructions: `pack`'s hot loop.
//!
//! [`super::row_fast`] (the scalar fast path) reads a row token by token, and each token's length decides where
//! the next one starts; that chain of loads, digit tests and adds costs about 1,500 instructions
//! per row. Here a number is one 16-byte load: a compare gives the mask of its digit bytes, the
//! mask gives its length and the place of its `.`, and one shuffle plus three multiply-adds turn
//! up to 14 digits into an integer. The board is two 32-byte loads: masks give the shape (16
//! runs of one or two digits between commas) and every cell's value at once. Literal text is
//! compared in whole words, and every read comes from one fixed window, so nothing is
//! bounds-checked byte by byte.
//!
//! The row loop waits on a chain more than it runs out of instructions: each field's position
//! is the end of the one before it, and finding a number's end in place takes about 17
//! cycles. Two maps made at once, off that chain, shorten it. The current logger's `search`
//! object, 14 numbers in a fixed order, is read from a map of its digit runs (`RunMap`):
//! the next count's start is a few cycles after the one before it, and everything else about
//! a count is checked beside the chain (see `search_tail`). A float ends 7 bytes after its
//! dot (the logger prints `%.6f`), found the same way from a map of the row's dots
//! (`DotMap`, `float_at`).
//!
//! Contract: [`parse_prefix`] accepts exactly the rows `row_fast` accepts, with the same
//! values, or gives up (`None`) so the caller takes that path; it never accepts more.
//! `tests/row_oracle.rs` holds both to the same reference. It gives up on anything unusual: a
//! row longer than [`MAX_ROW`] bytes, fewer than [`WINDOW`] bytes left in the text, a number of
//! 15 or more digits, a valuation type other than the three the logger writes.
//!
//! Needs AVX2, BMI1 and BMI2 (x86-64-v3: Intel since Haswell, AMD since Excavator);
//! [`available`] checks once at run time.

use std::arch::x86_64::*;
use std::borrow::Cow;
use std::sync::OnceLock;

use super::row_types::{POW10, RawRow};
use crate::format::board;
use crate::format::search::SearchStats;

/// The longest row start this path reads, up to the branch EVs' closing brace; longer ones go to
/// `row_fast`. The current logger's `search` object after it is read here too, from a window
/// of its own of the same size (see `search_tail`); `row_fast::row_end` reads the longer ones.
pub const MAX_ROW: usize = 511;
/// Bytes that must remain in the text from the row's start: every read stays inside them
/// (a read at a position up to [`MAX_ROW`] looks at most 64 bytes ahead).
pub const WINDOW: usize = MAX_ROW + 1 + 64;

type Window = [u8; WINDOW];

/// Whether this CPU has what [`parse_prefix`] needs (checked once). Setting the environment
/// variable `DATASET_PACKER_SCALAR=1` turns the vector path off (to compare outputs, or to rule
/// it out when chasing a problem).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let off =
            std::env::var_os("DATASET_PACKER_SCALAR").is_some_and(|v| !v.is_empty() && v != "0");
        !off && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("bmi1")
            && is_x86_feature_detected!("bmi2")
            && is_x86_feature_detected!("popcnt")
    })
}

/// The start of the last row read, `{"seed":…,"step_index":`, and its seed. Every row of a
/// run starts with the same text, so one 32-byte compare replaces reading it again.
#[derive(Clone, Copy, Default)]
pub struct Memo {
    /// The row's first 32 bytes; the first `len` of them are the remembered text.
    head: [u8; 32],
    /// 0: nothing remembered.
    len: usize,
    seed: Option<u64>,
}

/// The row at the start of `text` in the logger's layout and where it ends (after its closing
/// braces), as `row_fast::parse_prefix` gives them; `None` when this path gives up. `memo`
/// carries the start of the previous row (any row, or a fresh [`Memo`]).
///
/// Inlined, so the caller must be compiled for the features (`#[target_feature(enable =
/// "avx2,bmi1,bmi2,popcnt")]`) for the vector instructions to be inlined too.
///
/// # Safety
/// [`available`] must have returned true.
#[inline(always)]
pub unsafe fn parse_prefix<'a, const KEEP: bool>(
    text: &'a [u8],
    memo: &mut Memo,
) -> Option<(RawRow<'a>, usize)> {
    let w: &Window = text.get(..WINDOW)?.try_into().ok()?;
    // SAFETY: the caller's target features.
    let dot_map = unsafe { DotMap::of(w) };
    let mut dots = dot_map.from(0);
    let (seed, mut i) = seed_and_step_key(w, memo)?;
    let step_index = opt_uint(w, &mut i, u64::from(u32::MAX))?;
    lit(w, &mut i, b",\"max_rank\":")?;
    let max_rank = opt_uint(w, &mut i, u64::from(u8::MAX))?;
    lit(w, &mut i, b",\"move\":\"")?;
    let move_dir = move_name(w, &mut i)?;
    lit(w, &mut i, b",\"valuation_type\":")?;
    let valuation_type = valuation_name(w, &mut i)?;
    lit(w, &mut i, b",\"valuation\":")?;
    float_at(w, &dot_map, &mut dots, &mut i)?;
    lit(w, &mut i, b",\"board\":[")?;
    let board = board(w, &mut i)?;
    lit(w, &mut i, b"],\"branch_evs\":{\"up\":")?;
    let up = float_at(w, &dot_map, &mut dots, &mut i)?;
    lit(w, &mut i, b",\"left\":")?;
    let left = float_at(w, &dot_map, &mut dots, &mut i)?;
    lit(w, &mut i, b",\"right\":")?;
    let right = float_at(w, &dot_map, &mut dots, &mut i)?;
    lit(w, &mut i, b",\"down\":")?;
    let down = float_at(w, &dot_map, &mut dots, &mut i)?;
    lit(w, &mut i, b"}")?;
    // Reads past MAX_ROW wrapped around the window (see `at`): such a row is not read here.
    if i > MAX_ROW {
        return None;
    }
    // The row's end: `}`, or the current logger's `search` object, read from a window of its
    // own (the scalar code takes what that gives up on).
    let (i, search) = if byte(w, i) == b'}' {
        (i + 1, SearchStats::default())
    } else {
        match unsafe { search_tail::<KEEP>(text, i) } {
            Some(end) => end,
            None => super::row_fast::row_end::<KEEP>(text, i)?,
        }
    };
    let row = RawRow {
        seed: seed.map(|v| v as u32),
        step_index: step_index.map(|v| v as u32),
        max_rank: max_rank.map(|v| v as u8),
        move_dir,
        valuation_type: valuation_type.map(Cow::Borrowed),
        board,
        branch_evs: [up, down, left, right],
        search,
    };
    Some((row, i))
}

/// The current logger's `search` object at `start` (just after the branch EVs' closing brace),
/// in exactly the layout `row_fast::row_end` reads, with the same values: where the row ends
/// and the statistics (`used`, and with `KEEP` the counts and the hit rate). `None` where it
/// gives up, and the caller takes the scalar path: fewer than [`WINDOW`] bytes left in the
/// text, an object longer than [`MAX_ROW`] bytes, a count of 15 digits or more, a `null`
/// where a search row has a number (or a number where a tuple row has `null`), anything else.
///
/// A search row's object is read from a window of its own at `start`, whose runs of digits
/// are mapped first, all at once ([`RunMap`]). The counts' starts come from the map, one
/// after the other ([`Runs::next`], a few cycles each); each count's length, checks and
/// value, and the key before it, are then read beside that chain, and checked to fit end to
/// end: the text between two counts must be exactly the key. Found in place, each count's
/// end took about twice as long, and the next count waited for it. (The loop waits on that
/// chain more than on the instructions: with `KEEP`, the conversions add no time.)
///
/// # Safety
/// As [`parse_prefix`].
#[inline(always)]
unsafe fn search_tail<const KEEP: bool>(text: &[u8], start: usize) -> Option<(usize, SearchStats)> {
    let w: &Window = text
        .get(start..start.checked_add(WINDOW)?)?
        .try_into()
        .ok()?;
    let mut i = 0;
    lit(w, &mut i, b",\"search\":{\"used\":")?;
    if at::<4>(w, i) != b"true" {
        // A tuple row: every statistic `null`, one fixed text.
        lit(w, &mut i, b"false")?;
        long_lit(w, &mut i, NULL_STATISTICS)?;
        return Some((start + i, SearchStats::default()));
    }
    i += 4;
    let mut stats = SearchStats {
        used: true,
        ..SearchStats::default()
    };
    // SAFETY: the caller's target features.
    let map = unsafe { RunMap::digits(w) };
    let mut runs = map.runs_from(i);
    // Where the next key must start: where the count before it ended.
    let mut end = i;
    macro_rules! count {
        ($key:literal, $count:expr) => {
            count_at::<_, KEEP>(w, &map, runs.next(), &mut end, $key, $count)?
        };
    }
    // The 12 counts before the hit rate, in log order (`search::FIELDS`).
    let c = &mut stats.counts;
    count!(b",\"total_nodes\":", &mut c[0]);
    count!(b",\"move_nodes\":", &mut c[1]);
    count!(b",\"tile_nodes\":", &mut c[2]);
    count!(b",\"tile_branches\":", &mut c[3]);
    count!(b",\"eval_calls\":", &mut c[4]);
    count!(b",\"prune_score\":", &mut c[5]);
    count!(b",\"prune_depth\":", &mut c[6]);
    count!(b",\"prune_prob\":", &mut c[7]);
    count!(b",\"cache_lookups\":", &mut c[8]);
    count!(b",\"cache_hits\":", &mut c[9]);
    count!(b",\"cache_updates\":", &mut c[10]);
    count!(b",\"cache_collisions\":", &mut c[11]);
    // The hit rate: two runs of digits with a `.` between them, as `opt_float` reads a
    // non-negative number with a fraction (the logger prints `%.6f`).
    let whole = runs.next();
    key_before(w, whole, end, b",\"cache_hit_rate\":")?;
    let whole_len = map.run_at(whole);
    let frac = runs.next();
    let frac_len = map.run_at(frac);
    let dot = whole + whole_len as usize;
    let bad_rate = byte(w, dot) != b'.'
        || frac != dot + 1
        || whole_len + frac_len > 14
        || (whole_len > 1 && byte(w, whole) == b'0');
    if bad_rate {
        return None;
    }
    end = frac + frac_len as usize;
    let mut depth = 0;
    count!(b",\"max_move_depth\":", &mut depth);
    let mut i = end;
    lit(w, &mut i, b"}}")?;
    // Reads past MAX_ROW wrapped around the window: such an object is not read here.
    if i > MAX_ROW {
        return None;
    }
    if KEEP {
        // SAFETY: the caller's target features.
        let mantissa = unsafe {
            let b = classify16(w, whole);
            digits_value(b.d, whole_len + frac_len + 1, frac_len)
        };
        stats.cache_hit_rate = (mantissa as i64 as f64 / POW10[frac_len as usize]) as f32;
        stats.counts[super::row_fast::MAX_MOVE_DEPTH] = depth;
    }
    Some((start + i, stats))
}

/// What follows `"used":false` in a tuple row's `search` object.
const NULL_STATISTICS: &[u8] = b",\"total_nodes\":null,\"move_nodes\":null,\"tile_nodes\":null,\
\"tile_branches\":null,\"eval_calls\":null,\"prune_score\":null,\"prune_depth\":null,\
\"prune_prob\":null,\"cache_lookups\":null,\"cache_hits\":null,\"cache_updates\":null,\
\"cache_collisions\":null,\"cache_hit_rate\":null,\"max_move_depth\":null}}";

/// Consumes a literal of 32 bytes to [`MAX_ROW`], 32 bytes at a time: the last 32 overlap
/// the ones before when its length is not a multiple of 32, so every compare is whole.
#[inline(always)]
fn long_lit(w: &Window, i: &mut usize, l: &[u8]) -> Option<()> {
    let n = l.len();
    if !(32..=MAX_ROW).contains(&n) {
        return None;
    }
    let mut k = 0;
    while k + 32 < n {
        lit::<32>(w, &mut (*i + k), l[k..k + 32].try_into().unwrap())?;
        k += 32;
    }
    lit::<32>(w, &mut (*i + n - 32), l[n - 32..].try_into().unwrap())?;
    *i += n;
    (*i <= MAX_ROW).then_some(())
}

/// Where the runs of digits start and stop in a window's first 512 bytes, found at once
/// (sixteen 32-byte compares, none waiting on another).
struct RunMap {
    /// Bytes that are not digits, a bit a byte, then a word of ones: 8 bytes can be read from
    /// any bit's byte.
    stops: [u8; 72],
    /// The first digit of each run, a bit a byte; after the window, ones.
    starts: [u64; 16],
}

impl RunMap {
    /// # Safety
    /// The caller is compiled for AVX2.
    #[inline(always)]
    unsafe fn digits(w: &Window) -> Self {
        let mut stops = [0xffu8; 72];
        let mut starts = [u64::MAX; 16];
        let mut before = 0u64;
        for k in 0..8 {
            // SAFETY: the caller's target features.
            let (low, high) = unsafe { (digit_mask32(w, 64 * k), digit_mask32(w, 64 * k + 32)) };
            let digits = u64::from(low) | u64::from(high) << 32;
            stops[8 * k..8 * k + 8].copy_from_slice(&(!digits).to_le_bytes());
            starts[k] = digits & !(digits << 1 | before >> 63);
            before = digits;
        }
        RunMap { stops, starts }
    }

    /// How many digits start at `i` (wrapping at 512 like [`at`]); exact up to 57.
    #[inline(always)]
    fn run_at(&self, i: usize) -> u32 {
        let j = i & MAX_ROW;
        let word = u64::from_le_bytes(self.stops[j >> 3..(j >> 3) + 8].try_into().unwrap());
        (word >> (j & 7)).trailing_zeros()
    }

    /// The starts of the runs at `from` and after, in order.
    #[inline(always)]
    fn runs_from(&self, from: usize) -> Runs<'_> {
        runs_from(&self.starts, from)
    }
}

/// The set bits of `starts` at `from` and after, in order (bits past the classified bytes
/// are all set, so there is always a next one).
#[inline(always)]
fn runs_from(starts: &[u64; 16], from: usize) -> Runs<'_> {
    let mut word = (from >> 6) & 7;
    let mut bits = starts[word] & (u64::MAX << (from & 63));
    while bits == 0 {
        word += 1;
        bits = starts[word];
    }
    Runs { starts, word, bits }
}

/// The digits among the 32 bytes at `at` (inside the window), a bit a byte.
///
/// # Safety
/// The caller is compiled for AVX2.
#[inline(always)]
unsafe fn digit_mask32(w: &Window, at: usize) -> u32 {
    let bytes: &[u8; 32] = w[at..at + 32].try_into().unwrap();
    // SAFETY: a 32-byte load from the array; AVX2 is the caller's target feature.
    unsafe {
        let v = _mm256_loadu_si256(bytes.as_ptr().cast());
        let t = _mm256_sub_epi8(v, _mm256_set1_epi8(b'0' as i8));
        let is_digit = _mm256_cmpeq_epi8(_mm256_min_epu8(t, _mm256_set1_epi8(9)), t);
        _mm256_movemask_epi8(is_digit) as u32
    }
}

/// The bytes equal to `byte` among the 32 bytes at `at` (inside the window), a bit a byte.
///
/// # Safety
/// The caller is compiled for AVX2.
#[inline(always)]
unsafe fn byte_mask32(w: &Window, at: usize, byte: u8) -> u32 {
    let bytes: &[u8; 32] = w[at..at + 32].try_into().unwrap();
    // SAFETY: a 32-byte load from the array; AVX2 is the caller's target feature.
    unsafe {
        let v = _mm256_loadu_si256(bytes.as_ptr().cast());
        _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(byte as i8))) as u32
    }
}

/// The starts of runs of digits, in order (see [`RunMap::runs_from`]). Finding the next one
/// takes a few cycles that wait on nothing but the one before: a count of trailing zeros, the
/// lowest bit cleared, and when the word is used up the next one, loaded before it is needed.
struct Runs<'a> {
    starts: &'a [u64; 16],
    word: usize,
    bits: u64,
}

impl Runs<'_> {
    /// The next run's start: past the window when there is none (the caller's checks then
    /// fail).
    #[inline(always)]
    fn next(&mut self) -> usize {
        let at = self.word * 64 + self.bits.trailing_zeros() as usize;
        let rest = self.bits & self.bits.wrapping_sub(1);
        let after = self.starts[(self.word + 1) & 15];
        let used_up = rest == 0;
        self.word = (self.word + usize::from(used_up)) & 15;
        self.bits = if used_up { after } else { rest };
        at
    }
}

/// Checks that `key` lies just before the number at `start` and just after the number
/// before it, which ended at `end`: the text between two numbers is exactly the key.
#[inline(always)]
fn key_before<const N: usize>(w: &Window, start: usize, end: usize, key: &[u8; N]) -> Option<()> {
    if start.wrapping_sub(N) != end {
        return None;
    }
    lit(w, &mut { end }, key)
}

/// One count of the `search` object, whose digits start at `start` (from [`Runs`]): the key
/// before it, and its value (plain digits, no leading zero, at most 14), kept in `count` with
/// `KEEP`. `end` is where the count before it ended, and becomes where this one ends.
#[inline(always)]
fn count_at<const N: usize, const KEEP: bool>(
    w: &Window,
    map: &RunMap,
    start: usize,
    end: &mut usize,
    key: &[u8; N],
    count: &mut u64,
) -> Option<()> {
    key_before(w, start, *end, key)?;
    let len = map.run_at(start);
    if len > 14 || (len > 1 && byte(w, start) == b'0') {
        return None;
    }
    if KEEP {
        // SAFETY: the caller's target features (this module is only entered through
        // `parse_prefix`).
        *count = unsafe { uint_value(w, start, len) };
    }
    *end = start + len as usize;
    Some(())
}

/// The integer spelled by the `len` digits at `i` (1..=14 of them, checked by the caller).
#[inline(always)]
unsafe fn uint_value(w: &Window, i: usize, len: u32) -> u64 {
    // SAFETY: `at` keeps the 16 bytes inside the window; the caller's target features.
    unsafe {
        let v = _mm_loadu_si128(at::<16>(w, i).as_ptr().cast());
        let d = _mm_sub_epi8(v, _mm_set1_epi8(b'0' as i8));
        digits_value(d, len + 1, 0)
    }
}

/// `{"seed":…,"step_index":` at the row's start: its seed and length. Taken from `memo` when
/// the row starts with the same bytes as the row it remembers (the parse of those bytes can
/// only give the same); read, and remembered when it fits 32 bytes, otherwise.
#[inline(always)]
fn seed_and_step_key(w: &Window, memo: &mut Memo) -> Option<(Option<u64>, usize)> {
    // SAFETY: 32-byte loads from the window and the memo; AVX2 is the caller's target feature.
    let (head, same) = unsafe {
        let head = _mm256_loadu_si256(w.as_ptr().cast());
        let before = _mm256_loadu_si256(memo.head.as_ptr().cast());
        (
            head,
            _mm256_movemask_epi8(_mm256_cmpeq_epi8(head, before)) as u32,
        )
    };
    let want = (u64::from(u32::MAX) >> (32 - memo.len)) as u32;
    if memo.len != 0 && same & want == want {
        return Some((memo.seed, memo.len));
    }
    let mut i = 0;
    lit(w, &mut i, b"{\"seed\":")?;
    let seed = opt_uint(w, &mut i, u64::from(u32::MAX))?;
    lit(w, &mut i, b",\"step_index\":")?;
    if i <= 32 {
        // SAFETY: a 32-byte store into the memo.
        unsafe { _mm256_storeu_si256(memo.head.as_mut_ptr().cast(), head) };
        memo.len = i;
        memo.seed = seed;
    }
    Some((seed, i))
}

/// The `N` bytes at `i`. The index wraps at 512, so the compiler sees every read inside the
/// window; a row whose reads would wrap is longer than [`MAX_ROW`] and refused at the end.
#[inline(always)]
fn at<const N: usize>(w: &Window, i: usize) -> &[u8; N] {
    let j = i & MAX_ROW;
    w[j..j + N].try_into().unwrap()
}

#[inline(always)]
fn byte(w: &Window, i: usize) -> u8 {
    w[i & MAX_ROW]
}

#[inline(always)]
fn word(w: &Window, i: usize) -> u64 {
    u64::from_le_bytes(*at::<8>(w, i))
}

/// Consumes the literal `l` (at most 32 bytes): one load, one compare with the literal padded
/// to the register's width, and a test of the mask's low `N` bits.
#[inline(always)]
fn lit<const N: usize>(w: &Window, i: &mut usize, l: &[u8; N]) -> Option<()> {
    const { assert!(N <= 32) };
    let mut padded = [0u8; 32];
    padded[..N].copy_from_slice(l);
    let equal = if N <= 8 {
        let want = u64::from_le_bytes(padded[..8].try_into().unwrap());
        (word(w, *i) ^ want) << (64 - 8 * N) == 0
    } else if N <= 16 {
        // SAFETY: `at` keeps the 16 bytes inside the window; SSE2 is part of x86-64.
        let same = unsafe {
            let v = _mm_loadu_si128(at::<16>(w, *i).as_ptr().cast());
            let p = _mm_loadu_si128(padded.as_ptr().cast());
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, p)) as u32
        };
        let want = (1u32 << N) - 1;
        same & want == want
    } else {
        // SAFETY: `at` keeps the 32 bytes inside the window; AVX2 is the caller's target
        // feature (this module is only entered through `parse_prefix`).
        let same = unsafe {
            let v = _mm256_loadu_si256(at::<32>(w, *i).as_ptr().cast());
            let p = _mm256_loadu_si256(padded.as_ptr().cast());
            _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, p)) as u32
        };
        let want = (u64::from(u32::MAX) >> (32 - N)) as u32;
        same & want == want
    };
    if equal {
        *i += N;
        Some(())
    } else {
        None
    }
}

/// The 16 bytes at some position, classified for reading a number there.
struct Bytes16 {
    /// The bytes less `'0'`, with bytes that are not digits zeroed.
    d: __m128i,
    /// Masks, bit k for byte k: the digits, the `.`s, the `-`s, the `0`s.
    digits: u32,
    dots: u32,
    minus: u32,
    zeros: u32,
}

/// The 16 bytes at `i`, classified.
#[inline(always)]
unsafe fn classify16(w: &Window, i: usize) -> Bytes16 {
    // SAFETY: `at` keeps the 16 bytes inside the window; SSE2 is part of x86-64.
    unsafe {
        let v = _mm_loadu_si128(at::<16>(w, i).as_ptr().cast());
        let t = _mm_sub_epi8(v, _mm_set1_epi8(b'0' as i8));
        // As unsigned bytes, t <= 9 exactly for the digits.
        let is_digit = _mm_cmpeq_epi8(_mm_min_epu8(t, _mm_set1_epi8(9)), t);
        let mask_of = |c: u8| _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(c as i8))) as u32;
        Bytes16 {
            d: _mm_and_si128(t, is_digit),
            digits: _mm_movemask_epi8(is_digit) as u32,
            dots: mask_of(b'.'),
            minus: mask_of(b'-'),
            zeros: mask_of(b'0'),
        }
    }
}

/// The integer spelled by the digit bytes of `d` (each 0..=9, other bytes 0) that end at byte
/// `end` (exclusive), where the last `frac_len` of them follow a byte to skip (the `.`: when
/// there is none, `frac_len` is 0 and `end` is one past the last digit plus one). At most 14
/// digits, `end` at most 16. One shuffle (its control from [`GATHER_DIGITS`]) moves the digits
/// to the top of the register without the dot, zeros above them (bytes before the number are
/// zero or skipped); three multiply-adds then make two 8-digit halves.
#[inline(always)]
unsafe fn digits_value(d: __m128i, end: u32, frac_len: u32) -> u64 {
    let control = &GATHER_DIGITS[(end as usize & 31) * 16 + (frac_len as usize & 15)];
    // SAFETY: a 16-byte load from the table; SSSE3/SSE4.1 are implied by AVX2 (the caller's
    // target features).
    unsafe {
        let d = _mm_shuffle_epi8(d, _mm_loadu_si128(control.as_ptr().cast()));
        let pairs = _mm_maddubs_epi16(d, _mm_set1_epi16(0x010a));
        let quads = _mm_madd_epi16(pairs, _mm_set1_epi32(0x0001_0064));
        let quads = _mm_packus_epi32(quads, quads);
        let eights = _mm_madd_epi16(quads, _mm_set1_epi32(0x0001_2710));
        let both = _mm_cvtsi128_si64(eights) as u64;
        (both & 0xffff_ffff) * 100_000_000 + (both >> 32)
    }
}

/// Shuffle controls for [`digits_value`], at `end * 16 + frac_len` (`end` 0..=16 and beyond,
/// up to 31, are all there so the index needs no bounds check): output byte k takes input byte
/// k - 16 + end, and bytes before the fraction one more to the left (skipping the dot);
/// negative indexes make zeros.
static GATHER_DIGITS: [[i8; 16]; 32 * 16] = gather_digits();

const fn gather_digits() -> [[i8; 16]; 32 * 16] {
    let mut table = [[-1i8; 16]; 32 * 16];
    let mut end = 0;
    while end <= 16 {
        let mut frac_len = 0;
        while frac_len < 16 {
            let mut k = 0;
            while k < 16 {
                let before_frac = (k < 16 - frac_len) as i32;
                let index = k as i32 + end as i32 - 16 - before_frac;
                table[end * 16 + frac_len][k] = if index < 0 { -1 } else { index as i8 };
                k += 1;
            }
            frac_len += 1;
        }
        end += 1;
    }
    table
}

/// Plain decimal digits (no sign, no leading zero unless alone), at most `max`, or `null`.
#[inline(always)]
fn opt_uint(w: &Window, i: &mut usize, max: u64) -> Option<Option<u64>> {
    if at::<4>(w, *i) == b"null" {
        *i += 4;
        return Some(None);
    }
    // SAFETY: the caller's target features (this module is only entered through
    // `parse_prefix`).
    let b = unsafe { classify16(w, *i) };
    let len = (!b.digits).trailing_zeros();
    if len == 0 || len > 14 || (len > 1 && b.zeros & 1 != 0) {
        return None;
    }
    let v = unsafe { digits_value(b.d, len + 1, 0) };
    if v > max {
        return None;
    }
    *i += len as usize;
    Some(Some(v))
}

/// A JSON number in the plain `-?digits(.digits)?` form, as a finite f32, or `null` as 0.0.
/// With at most 14 digits the mantissa is exact, and one division by an exact power of ten
/// gives the correctly rounded f64, as `row_fast` computes it.
///
/// The shape (a `-` only first, at most one `.` with a digit on each side, no leading zero)
/// is checked on the masks without branches: which numbers are negative or whole is data, and
/// branches on data are mispredicted. (`null` keeps its branch: choosing it without one cost
/// more than the branch.)
#[inline(always)]
fn opt_float(w: &Window, i: &mut usize) -> Option<f32> {
    if at::<4>(w, *i) == b"null" {
        *i += 4;
        return Some(0.0);
    }
    // SAFETY: as in `opt_uint`.
    let b = unsafe { classify16(w, *i) };
    let end = (!(b.digits | b.dots | b.minus)).trailing_zeros(); // 16 or more: may go on
    let x = float_value(&b, end)?;
    *i += end as usize;
    Some(x)
}

/// The `end` bytes that `b` classifies as [`opt_float`] reads them, where `end` is the first
/// byte that is not a digit, `-` or `.` (the caller's promise); `None` when they are not a
/// number of that form.
#[inline(always)]
fn float_value(b: &Bytes16, end: u32) -> Option<f32> {
    let span = (1u32 << (end & 15)) - 1;
    let first = b.minus & 1; // the sign
    // Bytes of the number that are not digits, but for the sign: a single `.` or nothing.
    let marks = !b.digits & span & !first;
    let dot = marks.trailing_zeros(); // 32 when there is none
    let misplaced = (marks & !b.dots) // a `-` after the first byte
        | (marks & marks.wrapping_sub(1)) // two `.`
        | ((marks >> 1 | marks << 1 | marks & 1) & !b.digits) // a `.` without digits both sides
        | (b.zeros & (b.digits >> 1) & (first + 1)); // a leading zero
    let well_formed = end < 16 && misplaced == 0 && b.digits & span != 0;
    if !well_formed {
        return None;
    }
    let (frac_len, value_end) = if marks != 0 {
        (end.wrapping_sub(dot + 1) & 15, end)
    } else {
        (0, end + 1)
    };
    // SAFETY: the caller's target features (this module is only entered through
    // `parse_prefix`).
    let mantissa = unsafe { digits_value(b.d, value_end, frac_len) };
    // Below 10^15, so the signed conversion is the same exact value, and the f32 is finite.
    // The sign is set on the f64 (exactly -x, -0.0 for "-0" as well).
    let x = mantissa as i64 as f64 / POW10[frac_len as usize];
    let x = f64::from_bits(x.to_bits() | u64::from(first) << 63) as f32;
    Some(x)
}

/// A float of the row's start at `i` ([`opt_float`]'s reading of it), or `null` as 0.0. The
/// logger prints its floats `%.6f`, so such a float ends 7 bytes after its `.`, and the `.` is
/// the next one in the row (`dots`): the position after it, which the rest of the row waits
/// on, is then a few cycles after the `.` before, not a classification of the float's bytes
/// (about 17 cycles). The float is read and checked beside that chain; one of another form, or
/// with the dots out of step, is read in place, and the dots taken up again after it.
#[inline(always)]
fn float_at<'m>(w: &Window, map: &'m DotMap, dots: &mut Runs<'m>, i: &mut usize) -> Option<f32> {
    if at::<4>(w, *i) == b"null" {
        *i += 4;
        return Some(0.0);
    }
    let end = dots.next().wrapping_sub(*i).wrapping_add(7) as u32;
    if end < 16 {
        // SAFETY: the caller's target features (this module is only entered through
        // `parse_prefix`).
        let b = unsafe { classify16(w, *i) };
        // `end` must be where opt_float's number ends: the first byte that is not a digit,
        // `-` or `.`.
        let ends = (b.digits | b.dots | b.minus) & ((2u32 << end) - 1) == (1u32 << end) - 1;
        if ends && let Some(x) = float_value(&b, end) {
            *i += end as usize;
            return Some(x);
        }
    }
    let x = opt_float(w, i)?;
    *dots = map.from(*i);
    Some(x)
}

/// The `.`s among a row's first [`DOT_BYTES`], found at once (ten 32-byte compares that wait
/// on nothing), for [`float_at`]: the same map of starts as [`RunMap`]'s, a dot each.
struct DotMap {
    starts: [u64; 16],
}

/// How many bytes of a row's start [`DotMap`] classifies: past them, every position is a
/// "dot", so a float there is out of step with them and read in place.
const DOT_BYTES: usize = 320;

impl DotMap {
    /// # Safety
    /// The caller is compiled for AVX2.
    #[inline(always)]
    unsafe fn of(w: &Window) -> Self {
        let mut starts = [u64::MAX; 16];
        for (k, word) in starts.iter_mut().take(DOT_BYTES / 64).enumerate() {
            // SAFETY: the caller's target features.
            let (low, high) = unsafe {
                (
                    byte_mask32(w, 64 * k, b'.'),
                    byte_mask32(w, 64 * k + 32, b'.'),
                )
            };
            *word = u64::from(low) | u64::from(high) << 32;
        }
        DotMap { starts }
    }

    /// The dots at `from` and after, in order.
    #[inline(always)]
    fn from(&self, from: usize) -> Runs<'_> {
        runs_from(&self.starts, from)
    }
}

/// `up"`, `down"`, `left"` or `right"`: 0=up 1=down 2=left 3=right. The first letter's low
/// four bits pick the candidate in [`MOVE_WORDS`] and one masked compare confirms it: no
/// branch on which move was played (that is data).
#[inline(always)]
fn move_name(w: &Window, i: &mut usize) -> Option<u8> {
    let x = word(w, *i);
    let name = &MOVE_WORDS[(x & 15) as usize];
    if x & name.mask != name.text {
        return None;
    }
    *i += name.len;
    Some(name.dir)
}

/// A move's name with its closing quote, as little-endian word and mask.
struct MoveWord {
    text: u64,
    mask: u64,
    len: usize,
    dir: u8,
}

/// [`board::MOVE_NAMES`] indexed by their first letter's low four bits (`u` 5, `d` 4, `l` 12,
/// `r` 2); the other entries match nothing (their `text` has bits outside their empty `mask`).
static MOVE_WORDS: [MoveWord; 16] = {
    const NONE: MoveWord = MoveWord {
        text: 1,
        mask: 0,
        len: 0,
        dir: 0,
    };
    let mut table = [NONE; 16];
    let mut dir = 0;
    while dir < board::MOVE_NAMES.len() {
        let name = board::MOVE_NAMES[dir].as_bytes();
        let mut text = (b'"' as u64) << (8 * name.len());
        let mut k = 0;
        while k < name.len() {
            text |= (name[k] as u64) << (8 * k);
            k += 1;
        }
        let len = name.len() + 1;
        let slot = (name[0] & 15) as usize;
        assert!(
            table[slot].len == 0,
            "two moves share a first letter's low nibble"
        );
        table[slot] = MoveWord {
            text,
            mask: u64::MAX >> (64 - 8 * len),
            len,
            dir: dir as u8,
        };
        dir += 1;
    }
    table
};

/// `null`, or one of the names the logger writes in quotes; another name is left to
/// `row_fast`.
#[inline(always)]
fn valuation_name(w: &Window, i: &mut usize) -> Option<Option<&'static str>> {
    let x = word(w, *i);
    if x == u64::from_le_bytes(*b"\"search\"") {
        *i += 8;
        return Some(Some("search"));
    }
    if x & 0xffff_ffff == u64::from_le_bytes(*b"null\0\0\0\0") {
        *i += 4;
        return Some(None);
    }
    if x == u64::from_le_bytes(*b"\"tuple11") && byte(w, *i + 8) == b'"' {
        *i += 9;
        return Some(Some("tuple11"));
    }
    if x == u64::from_le_bytes(*b"\"tuple10") && byte(w, *i + 8) == b'"' {
        *i += 9;
        return Some(Some("tuple10"));
    }
    None
}

/// The board's 16 cells, each `d` or `dd` (no leading zero, at most 16), separated by commas,
/// up to the first byte that is neither digit nor comma (the caller's `]`).
///
/// Two 32-byte loads classify 64 bytes: digits, commas, and for every byte the value of a cell
/// starting there (its digit, or 10 + the next digit when the next byte is a digit too: a
/// two-digit cell must be `10`..`16`). The shape is checked on the masks: 15 commas, the
/// first and last byte digits, no two commas together, no three digits together; then the 16
/// values are picked at the run starts. The board is at most 47 bytes, so 64 hold it and the
/// byte after it.
#[inline(always)]
fn board(w: &Window, i: &mut usize) -> Option<[u8; 16]> {
    let mut values = [0u8; 64];
    // SAFETY: `at` keeps the 65 bytes read inside the window; AVX2 is the caller's target
    // feature; the stores are into `values`.
    let (digits, commas, bad) = unsafe {
        let bytes: &[u8; 65] = at::<65>(w, *i);
        let mut digits = 0u64;
        let mut commas = 0u64;
        let mut bad = 0u64;
        for half in 0..2 {
            let v = _mm256_loadu_si256(bytes.as_ptr().add(32 * half).cast());
            let next = _mm256_loadu_si256(bytes.as_ptr().add(32 * half + 1).cast());
            let nine = _mm256_set1_epi8(9);
            let t = _mm256_sub_epi8(v, _mm256_set1_epi8(b'0' as i8));
            let u = _mm256_sub_epi8(next, _mm256_set1_epi8(b'0' as i8));
            let is_digit = _mm256_cmpeq_epi8(_mm256_min_epu8(t, nine), t);
            let next_digit = _mm256_cmpeq_epi8(_mm256_min_epu8(u, nine), u);
            let is_comma = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b',' as i8));
            // Two digits: the first must be 1 and the second at most 6.
            let first_one = _mm256_cmpeq_epi8(t, _mm256_set1_epi8(1));
            let second_ok = _mm256_cmpeq_epi8(_mm256_min_epu8(u, _mm256_set1_epi8(6)), u);
            let two_ok = _mm256_and_si256(first_one, second_ok);
            let two_bad = _mm256_andnot_si256(two_ok, next_digit);
            let value = _mm256_blendv_epi8(t, _mm256_add_epi8(u, _mm256_set1_epi8(10)), next_digit);
            _mm256_storeu_si256(values.as_mut_ptr().add(32 * half).cast(), value);
            let shift = 32 * half as u32;
            digits |= u64::from(_mm256_movemask_epi8(is_digit) as u32) << shift;
            commas |= u64::from(_mm256_movemask_epi8(is_comma) as u32) << shift;
            bad |= u64::from(_mm256_movemask_epi8(two_bad) as u32) << shift;
        }
        (digits, commas, bad)
    };
    let other = !(digits | commas);
    let len = other.trailing_zeros(); // 64 when none: refused below (no last digit)
    let region = (1u64 << (len & 63)) - 1;
    let d = digits & region;
    let c = commas & region;
    let starts = d & !(d << 1);
    let shape_ok = len < 64
        && c.count_ones() == 15
        && d & 1 == 1
        && (d >> (len.max(1) - 1)) & 1 == 1
        && c & (c >> 1) == 0
        && d & (d >> 1) & (d >> 2) == 0
        && bad & starts == 0;
    if !shape_ok {
        return None;
    }
    *i += len as usize;
    Some(cells_at(&values, starts))
}

/// The bytes of `values` where `starts` has a bit, in order: 16 of them, within the first 48
/// bytes (the board's shape checks promise both). Each 8 bytes are compressed with one shuffle
/// whose control [`COMPRESS8`] gives for their 8 bits of `starts`, and stored after the ones
/// before.
#[inline(always)]
fn cells_at(values: &[u8; 64], starts: u64) -> [u8; 16] {
    // `at` stays at most 16 (16 bits in all); the mask only spares the bounds checks.
    let mut cells = [0u8; 40];
    let mut at = 0;
    for group in 0..6 {
        let bits = (starts >> (8 * group)) as u8;
        let control = &COMPRESS8[bits as usize];
        let bytes: &[u8; 8] = values[8 * group..8 * group + 8].try_into().unwrap();
        let out: &mut [u8; 8] = (&mut cells[at..at + 8]).try_into().unwrap();
        // SAFETY: 8-byte loads and a store within the arrays; SSSE3 is implied by AVX2 (the
        // caller's target feature).
        unsafe {
            let picked = _mm_shuffle_epi8(
                _mm_loadl_epi64(bytes.as_ptr().cast()),
                _mm_loadl_epi64(control.as_ptr().cast()),
            );
            _mm_storel_epi64(out.as_mut_ptr().cast(), picked);
        }
        at = (at + bits.count_ones() as usize) & 31;
    }
    cells[..16].try_into().unwrap()
}

/// For each 8-bit mask, the positions of its set bits in order, then -1s (zero bytes).
static COMPRESS8: [[i8; 8]; 256] = {
    let mut table = [[-1i8; 8]; 256];
    let mut mask = 0;
    while mask < 256 {
        let mut n = 0;
        let mut bit = 0;
        while bit < 8 {
            if mask >> bit & 1 == 1 {
                table[mask][n] = bit as i8;
                n += 1;
            }
            bit += 1;
        }
        mask += 1;
    }
    table
};

/// `board::pack` with vector instructions: the 16 cells as nibbles, cell 0 in the most
/// significant one, a 16 (the 65536 tile) written as 15 with its bit set in the mask. Cells must
/// be at most 16.
///
/// # Safety
/// As [`parse_prefix`]: [`available`] returned true, and the caller is compiled for the
/// features to have the instructions inlined.
#[inline(always)]
pub unsafe fn pack_board(cells: &[u8; 16]) -> (u64, u16) {
    // SAFETY: a 16-byte load from the array; SSSE3 is implied by AVX2.
    unsafe {
        let c = _mm_loadu_si128(cells.as_ptr().cast());
        let sixteens = _mm_cmpeq_epi8(c, _mm_set1_epi8(16));
        // 16 - 1 = 15; the compare is -1 where the cell is 16.
        let c = _mm_add_epi8(c, sixteens);
        // Pairs (2j, 2j+1) -> 16 * cell 2j + cell 2j+1 in one byte, then the 8 bytes together.
        let pairs = _mm_maddubs_epi16(c, _mm_set1_epi16(0x0110));
        let bytes = _mm_packus_epi16(pairs, pairs);
        let board = (_mm_cvtsi128_si64(bytes) as u64).swap_bytes();
        (board, _mm_movemask_epi8(sixteens) as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `search` object as the current logger writes it, with counts of 1 to 14 digits (and
    /// sometimes a spelling the vector path must leave to the scalar one), from `x`.
    fn search_object(x: &mut u64) -> String {
        let mut next = || {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            *x
        };
        if next() % 4 == 0 {
            let nulls: Vec<String> = crate::format::search::FIELDS
                .iter()
                .map(|k| format!("\"{k}\":null"))
                .collect();
            return format!(",\"search\":{{\"used\":false,{}}}}}", nulls.join(","));
        }
        let mut values: Vec<String> = (0..13)
            .map(|_| {
                let digits = 1 + next() % 14;
                (next() % 10u64.pow(digits as u32)).to_string()
            })
            .collect();
        values.insert(12, format!("{}.{:06}", next() % 101, next() % 1_000_000));
        let odd = [
            "01",
            "-1",
            "null",
            "1.5",
            "123456789012345",
            "",
            "1e3",
            "007",
        ];
        if next() % 5 == 0 {
            let slot = (next() % 14) as usize;
            values[slot] = odd[(next() % odd.len() as u64) as usize].to_string();
        }
        let members: Vec<String> = crate::format::search::FIELDS
            .iter()
            .zip(values)
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        format!(",\"search\":{{\"used\":true,{}}}}}", members.join(","))
    }

    #[test]
    fn search_tail_reads_what_row_end_reads() {
        if !available() {
            eprintln!("no AVX2 on this CPU: the vector path is not used here");
            return;
        }
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let (mut taken, mut left) = (0, 0);
        for _ in 0..20_000 {
            let object = search_object(&mut x);
            // What follows the row: the next row, padded to a window.
            let mut text = format!("{object}\n{{\"seed\":1,").into_bytes();
            text.resize(object.len() + WINDOW, b'7');
            let scalar = super::super::row_fast::row_end::<true>(&text, 0);
            // SAFETY: `available` checked; not inlined into a feature-compiled caller here,
            // which is slower but the same instructions.
            let (kept, checked) = unsafe {
                (
                    search_tail::<true>(&text, 0),
                    search_tail::<false>(&text, 0),
                )
            };
            match kept {
                Some(found) => {
                    taken += 1;
                    assert_eq!(Some(found), scalar, "{object}");
                    let only_used = SearchStats {
                        used: found.1.used,
                        ..SearchStats::default()
                    };
                    assert_eq!(checked, Some((found.0, only_used)), "{object}");
                }
                None => {
                    left += 1;
                    assert_eq!(checked, None, "{object}");
                }
            }
        }
        // Every object in the logger's spelling is taken; the odd ones are left.
        assert!(taken > 15_000 && left > 1_000, "taken {taken}, left {left}");
    }

    #[test]
    fn pack_board_is_board_pack() {
        if !available() {
            eprintln!("no AVX2 on this CPU: the vector board packing is not used here");
            return;
        }
        let mut boards = vec![[0u8; 16], [16u8; 16], [15u8; 16]];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..100_000 {
            let mut b = [0u8; 16];
            for cell in &mut b {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *cell = (x % 17) as u8;
            }
            boards.push(b);
        }
        for b in boards {
            // SAFETY: `available` checked; not inlined into a feature-compiled caller here,
            // which is slower but the same instructions.
            assert_eq!(unsafe { pack_board(&b) }, board::pack(&b), "{b:?}");
        }
    }
}
