//! What the two row parsers share, so that neither imports the other: the row as parsed
//! ([`RawRow`]), why a row is invalid ([`RowError`]), and the conversion of a JSON number's
//! text to the nearest f64. The general scanner and the scalar fast path are in
//! [`super::row`] and [`super::row_fast`], the vector path in `super::row_x86`.

use std::borrow::Cow;

use crate::format::search::SearchStats;

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

/// 10^n as f64, exact for every n here (shared with the vector path, `row_x86`).
pub(crate) const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Parses a JSON number (already checked against the grammar) to the nearest f64.
/// Exact fast path (Clinger): at most 15 significant digits and |exponent| ≤ 22, where one
/// IEEE multiplication or division is correctly rounded; everything else goes to the standard
/// library's correct parser.
pub(crate) fn parse_f64(text: &[u8]) -> f64 {
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
