//! The row parser against an independent reference of the spec's row rules, written here with
//! `serde_json` (keeping duplicate keys and each value's raw text): random rows (any key order,
//! whitespace, number spellings, escapes, extra fields, nulls) and mutations of them
//! (truncation, wrong types, out-of-range numbers, duplicate keys, bad UTF-8, flipped or
//! inserted bytes). Both the byte-exact fast path and the general scanner must accept exactly
//! the rows the reference accepts, with identical values (EVs bit for bit), and never panic.
//!
//! `DATASET_PACKER_FUZZ_CASES=N` runs N cases per property instead of the default (see
//! docs/testing.md); failures are kept in `tests/row_oracle.proptest-regressions`.

#[path = "common/logger.rs"]
mod logger;
use logger::SEARCH_KEYS;
use std::fmt;

use dataset_packer::raw::row::{
    RawRow, parse_row, parse_row_fast, parse_row_general, parse_row_vectorised,
};
use proptest::prelude::*;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

// ---------------------------------------------------------------------------------------------
// The reference

/// What a valid row holds, as the spec defines it.
#[derive(Debug, Clone, PartialEq)]
struct RefRow {
    seed: Option<u32>,
    step_index: Option<u32>,
    max_rank: Option<u8>,
    move_dir: u8,
    valuation_type: Option<String>,
    board: [u8; 16],
    /// The EVs' f32 bits, so -0.0 and 0.0 differ.
    evs: [u32; 4],
    /// The `search` object: `used`, the 13 counts in log order, the hit rate's f32 bits.
    search: (bool, [u64; 13], u32),
}

fn from_parser(r: &RawRow) -> RefRow {
    RefRow {
        seed: r.seed,
        step_index: r.step_index,
        max_rank: r.max_rank,
        move_dir: r.move_dir,
        valuation_type: r.valuation_type.as_ref().map(|v| v.to_string()),
        board: r.board,
        evs: r.branch_evs.map(f32::to_bits),
        search: (
            r.search.used,
            r.search.counts,
            r.search.cache_hit_rate.to_bits(),
        ),
    }
}

/// An object's members in order, duplicates kept, each value as its raw JSON text.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Members, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, Box<RawValue>>()? {
                    out.push((k, v));
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

const MOVES: [&str; 4] = ["up", "down", "left", "right"];
const KNOWN: [&str; 9] = [
    "search",
    "seed",
    "step_index",
    "max_rank",
    "move",
    "valuation_type",
    "valuation",
    "board",
    "branch_evs",
];

/// An integer field: `null` (absent) or a JSON integer (no sign, fraction or exponent) ≤ max.
fn int(raw: &str, max: u64) -> Result<Option<u64>, String> {
    if raw == "null" {
        return Ok(None);
    }
    let digits_only = !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit());
    if !digits_only {
        return Err(format!("not a non-negative integer: {raw}"));
    }
    match raw.parse::<u64>() {
        Ok(v) if v <= max => Ok(Some(v)),
        _ => Err(format!("out of range: {raw}")),
    }
}

/// A float field: `null` or a JSON number whose value is finite as a float32.
fn float(raw: &str) -> Result<Option<f32>, String> {
    if raw == "null" {
        return Ok(None);
    }
    if !raw.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        return Err(format!("not a number: {raw}"));
    }
    let v = raw.parse::<f64>().map_err(|e| e.to_string())? as f32;
    if v.is_finite() {
        Ok(Some(v))
    } else {
        Err(format!("not finite as f32: {raw}"))
    }
}

fn string(raw: &str) -> Result<Option<String>, String> {
    if raw == "null" {
        return Ok(None);
    }
    serde_json::from_str::<String>(raw)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// An unknown field's value, already known to be valid JSON grammar: its nesting depth (0 for
/// a scalar or an empty container at the top, else 1 + the deepest member), and an error if a
/// string in it does not decode (an unpaired surrogate). Read from the text, not through a
/// `serde_json::Value`, because an unknown field may hold any JSON number, also one beyond f64
/// (`-4.2e875`), which `Value` refuses but the spec ("unknown fields are ignored") does not.
fn unknown_value_depth(raw: &str) -> Result<usize, String> {
    // For each open container: the depth of its deepest member so far (None: no member yet).
    let mut open: Vec<Option<usize>> = Vec::new();
    let mut result = 0;
    let text = raw.as_bytes();
    let member = |open: &mut Vec<Option<usize>>, d: usize| {
        if let Some(top) = open.last_mut() {
            *top = Some(top.map_or(d, |m| m.max(d)));
        }
    };
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'[' | b'{' => open.push(None),
            b']' | b'}' => {
                let d = open.pop().flatten().map_or(0, |m| m + 1);
                member(&mut open, d);
                result = d;
            }
            b'"' => {
                member(&mut open, 0);
                let start = i;
                i += 1;
                while text[i] != b'"' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
                string(&raw[start..=i])?;
            }
            b' ' | b'\t' | b'\n' | b'\r' | b',' | b':' => {}
            _ => member(&mut open, 0),
        }
        i += 1;
    }
    Ok(result)
}

/// An unknown member's value: any JSON, nested at most `depth` deep.
fn unknown(raw: &str, depth: usize) -> Result<(), String> {
    serde_json::from_str::<serde::de::IgnoredAny>(raw).map_err(|e| e.to_string())?;
    if unknown_value_depth(raw)? > depth {
        return Err("nested too deeply".into());
    }
    Ok(())
}

/// The current logger's `search` object (or `null`): `used` a boolean or null, the counts
/// integers up to 2^64 − 1 or null, `cache_hit_rate` a float or null, each at most once;
/// other members are ignored (one level deeper than a row's own unknown fields).
fn search(raw: &str) -> Result<(bool, [u64; 13], u32), String> {
    let mut out = (false, [0u64; 13], 0f32.to_bits());
    if raw == "null" {
        return Ok(out);
    }
    if !raw.starts_with('{') {
        return Err(format!("search is not an object: {raw}"));
    }
    let Members(members) = serde_json::from_str(raw).map_err(|e| e.to_string())?;
    let mut seen: Vec<&str> = Vec::new();
    for (key, value) in &members {
        let v = value.get();
        let known = key == "used" || SEARCH_KEYS.contains(&key.as_str());
        if known {
            if seen.contains(&key.as_str()) {
                return Err(format!("duplicate search.{key}"));
            }
            seen.push(key);
        }
        match SEARCH_KEYS.iter().position(|k| k == key) {
            _ if key == "used" => {
                out.0 = match v {
                    "true" => true,
                    "false" | "null" => false,
                    _ => return Err(format!("search.used is {v}")),
                }
            }
            Some(12) => out.2 = float(v)?.unwrap_or(0.0).to_bits(),
            Some(k) => out.1[if k < 12 { k } else { k - 1 }] = int(v, u64::MAX)?.unwrap_or(0),
            None => unknown(v, 63)?,
        }
    }
    Ok(out)
}

/// The spec's row rules, independently of the parser.
fn reference(line: &[u8]) -> Result<RefRow, String> {
    let Members(members) = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    let mut row = RefRow {
        seed: None,
        step_index: None,
        max_rank: None,
        move_dir: 0,
        valuation_type: None,
        board: [0; 16],
        evs: [0f32.to_bits(); 4],
        search: (false, [0; 13], 0f32.to_bits()),
    };
    let mut seen = Vec::new();
    for (key, value) in &members {
        let raw = value.get();
        if KNOWN.contains(&key.as_str()) {
            if seen.contains(key) {
                return Err(format!("duplicate {key}"));
            }
            seen.push(key.clone());
        }
        match key.as_str() {
            "seed" => row.seed = int(raw, u32::MAX as u64)?.map(|v| v as u32),
            "step_index" => row.step_index = int(raw, u32::MAX as u64)?.map(|v| v as u32),
            "max_rank" => row.max_rank = int(raw, 255)?.map(|v| v as u8),
            "move" => {
                let name = string(raw)?.ok_or("move is null")?;
                row.move_dir = MOVES
                    .iter()
                    .position(|m| *m == name)
                    .ok_or("unknown move")? as u8;
            }
            "valuation_type" => row.valuation_type = string(raw)?,
            "valuation" => {
                float(raw)?;
            }
            "board" => {
                let cells: Vec<Box<RawValue>> =
                    serde_json::from_str(raw).map_err(|e| e.to_string())?;
                if cells.len() != 16 {
                    return Err("board is not 16 cells".into());
                }
                for (i, c) in cells.iter().enumerate() {
                    row.board[i] = int(c.get(), 16)?.ok_or("null cell")? as u8;
                }
            }
            "branch_evs" => {
                if raw == "null" {
                    continue;
                }
                let Members(evs) = serde_json::from_str(raw).map_err(|e| e.to_string())?;
                let mut got = Vec::new();
                for (k, v) in evs {
                    let i = MOVES.iter().position(|m| *m == k).ok_or("unknown EV key")?;
                    if got.contains(&i) {
                        return Err("duplicate EV key".into());
                    }
                    got.push(i);
                    row.evs[i] = float(v.get())?.unwrap_or(0.0).to_bits();
                }
            }
            "search" => row.search = search(raw)?,
            _ => unknown(raw, 64)?,
        }
    }
    for required in ["move", "board"] {
        if !seen.iter().any(|k| k == required) {
            return Err(format!("missing {required}"));
        }
    }
    Ok(row)
}

/// The property every row must have.
fn agree(line: &[u8]) -> Result<(), TestCaseError> {
    let want = reference(line);
    let general = parse_row_general(line).map(|r| from_parser(&r));
    let full = parse_row(line).map(|r| from_parser(&r));
    let shown = String::from_utf8_lossy(line);
    match (&want, &general) {
        (Ok(w), Ok(g)) => prop_assert_eq!(w, g, "values differ: {}", shown),
        (Err(_), Err(_)) => {}
        (Ok(_), Err(e)) => prop_assert!(false, "parser refuses a valid row ({}): {}", e, shown),
        (Err(e), Ok(_)) => prop_assert!(false, "parser accepts an invalid row ({}): {}", e, shown),
    }
    prop_assert_eq!(
        full.as_ref().ok(),
        general.as_ref().ok(),
        "parse_row and the general path differ: {}",
        shown
    );
    let fast = parse_row_fast(line).map(|r| from_parser(&r));
    if let Some(fast) = &fast {
        prop_assert_eq!(
            Some(fast),
            want.as_ref().ok(),
            "the fast path takes a row the reference does not read that way: {}",
            shown
        );
    }
    // The vector path (where this CPU has it) reads past the row's end: whatever follows must
    // not change what it reads, and it may only take rows the scalar fast path takes, alike.
    for after in AFTER_ROW {
        if let Some(Some(vector)) = parse_row_vectorised(line, after) {
            prop_assert_eq!(
                Some(from_parser(&vector)),
                fast.clone(),
                "the vector path reads a row (followed by {:?}) unlike the scalar fast path: {}",
                String::from_utf8_lossy(after),
                shown
            );
        }
    }
    Ok(())
}

/// What follows a row in the vector path's checks: a next row, digits and number bytes that
/// would lengthen a number if read as part of it, nothing.
const AFTER_ROW: [&[u8]; 4] = [b"\n{\"seed\":1,", b"0123456789", b"-.9e+E]}", b""];

/// Whether the vector path, where this CPU has it, gives up on `line` (None: no vector path).
fn vector_gives_up(line: &[u8]) -> Option<bool> {
    AFTER_ROW
        .iter()
        .map(|after| parse_row_vectorised(line, after).map(|r| r.is_none()))
        .reduce(|a, b| a.zip(b).map(|(a, b)| a || b))
        .flatten()
}

// ---------------------------------------------------------------------------------------------
// Generators

fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("DATASET_PACKER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases: n,
        ..ProptestConfig::default()
    }
}

/// JSON whitespace, usually none.
fn ws() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => Just(String::new()),
        1 => Just(" ".to_string()),
        1 => "[ \t\r]{1,3}",
    ]
}

/// A JSON string literal for `text`, with some characters written as \u escapes.
fn quoted(text: String) -> impl Strategy<Value = String> {
    let n = text.chars().count();
    proptest::collection::vec(any::<bool>(), n).prop_map(move |escape| {
        let mut out = String::from("\"");
        for (c, e) in text.chars().zip(escape) {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\t' => out.push_str("\\t"),
                c if e && (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    })
}

/// An integer spelled as JSON.
fn int_text(max: u64) -> impl Strategy<Value = String> {
    prop_oneof![
        (0..=max.min(20)).prop_map(|v| v.to_string()),
        (0..=max).prop_map(|v| v.to_string()),
    ]
}

/// A float32 value spelled in one of the ways JSON writers spell numbers.
fn float_text() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        (-20_000i32..20_000).prop_map(|v| f64::from(v) / 1000.0),
        any::<f32>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(f64::from),
        Just(0.0),
        Just(-0.0),
        (0u32..8).prop_map(f64::from),
    ];
    (value, 0u8..6).prop_map(|(v, style)| match style {
        0 => format!("{v:.6}"),
        1 => format!("{v}"),
        2 => format!("{v:e}"),
        3 => format!("{v:E}"),
        4 => format!("{:.3}", v),
        _ => format!("{}", v as f32),
    })
}

/// Any JSON value, for fields the row does not know.
fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        float_text(),
        "[a-z\u{e9}\u{1F600} ]{0,6}".prop_flat_map(quoted),
    ];
    leaf.prop_recursive(4, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| format!("[{}]", v.join(","))),
            proptest::collection::vec(("[a-z]{1,4}", inner), 0..4).prop_map(|v| {
                let members: Vec<String> =
                    v.into_iter().map(|(k, x)| format!("\"{k}\":{x}")).collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

/// A valid value for a known field.
fn valid_value(key: &'static str) -> BoxedStrategy<String> {
    match key {
        "seed" | "step_index" => prop_oneof![
            9 => int_text(u32::MAX as u64),
            1 => Just("null".to_string()),
        ]
        .boxed(),
        "max_rank" => prop_oneof![9 => int_text(255), 1 => Just("null".to_string())].boxed(),
        "move" => prop::sample::select(&MOVES[..])
            .prop_flat_map(|m| quoted(m.to_string()))
            .boxed(),
        "valuation_type" => prop_oneof![
            8 => prop::sample::select(vec!["search", "tuple11", "tuple10", "mcts", "nn\u{e9}", "a\"b"])
                .prop_flat_map(|v| quoted(v.to_string())),
            1 => Just("null".to_string()),
        ]
        .boxed(),
        "valuation" => prop_oneof![9 => float_text(), 1 => Just("null".to_string())].boxed(),
        "board" => (proptest::collection::vec(0u8..=16, 16), ws())
            .prop_map(|(cells, w)| {
                let cells: Vec<String> = cells.iter().map(u8::to_string).collect();
                format!("[{}]", cells.join(&format!(",{w}")))
            })
            .boxed(),
        _ => {
            let ev = prop_oneof![8 => float_text(), 2 => Just("null".to_string())];
            (
                proptest::sample::subsequence(MOVES.to_vec(), 0..=4).prop_shuffle(),
                proptest::collection::vec(ev, 4),
                0u8..10,
            )
                .prop_map(|(keys, values, null)| {
                    if null == 0 {
                        return "null".to_string();
                    }
                    let members: Vec<String> = keys
                        .iter()
                        .zip(values)
                        .map(|(m, v)| format!("\"{m}\":{v}"))
                        .collect();
                    format!("{{{}}}", members.join(","))
                })
                .boxed()
        }
    }
}

/// A value for a known field that is wrong: another type, out of range, malformed.
fn wrong_value(key: &'static str) -> BoxedStrategy<String> {
    let any_wrong = prop::sample::select(vec![
        "true", "\"5\"", "[]", "{}", "5.5", "-1", "-0", "1e2", "NaN", "1e39", "null",
    ])
    .prop_map(str::to_string);
    let specific: BoxedStrategy<String> = match key {
        "seed" | "step_index" => Just("4294967296".to_string()).boxed(),
        "max_rank" => Just("256".to_string()).boxed(),
        "move" => prop::sample::select(vec!["\"Up\"", "\"north\"", "\"\""])
            .prop_map(str::to_string)
            .boxed(),
        "board" => (proptest::collection::vec(0u8..=17, 14..=17), any::<bool>())
            .prop_map(|(cells, big)| {
                let mut cells: Vec<String> = cells.iter().map(u8::to_string).collect();
                if big && !cells.is_empty() {
                    cells[0] = "17".into();
                }
                format!("[{}]", cells.join(","))
            })
            .boxed(),
        "branch_evs" => prop::sample::select(vec![
            "{\"up\":1,\"up\":2}",
            "{\"north\":1}",
            "{\"up\":1e39}",
            "{\"up\":\"1\"}",
            "[1,2,3,4]",
        ])
        .prop_map(str::to_string)
        .boxed(),
        _ => any_wrong.clone().boxed(),
    };
    prop_oneof![any_wrong, specific].boxed()
}

/// A row: each known field usually present (sometimes with an escaped key), extra fields, any
/// order, whitespace anywhere between tokens. With `noisy`, fields are also missing, doubled
/// or given wrong values now and then; without, the row is valid.
fn row(noisy: bool) -> impl Strategy<Value = String> {
    let fields: Vec<BoxedStrategy<Vec<(String, String)>>> = KNOWN
        .iter()
        .map(|&k| {
            let key = prop_oneof![
                9 => Just(format!("\"{k}\"")),
                1 => quoted(k.to_string()),
            ];
            let required = k == "move" || k == "board";
            let one = (key.clone(), valid_value(k)).prop_map(|kv| vec![kv]);
            if !noisy {
                return if required {
                    one.boxed()
                } else {
                    prop_oneof![3 => one, 1 => Just(vec![])].boxed()
                };
            }
            prop_oneof![
                20 => one,
                1 => Just(vec![]),
                1 => (key.clone(), wrong_value(k)).prop_map(|kv| vec![kv]),
                1 => ((key.clone(), valid_value(k)), (key, valid_value(k))).prop_map(|(a, b)| vec![a, b]),
            ]
            .boxed()
        })
        .collect();
    let extra = proptest::collection::vec(
        ("[a-z_]{1,8}".prop_map(|k| format!("\"{k}\"")), json_value()),
        0..3,
    );
    (fields, extra)
        .prop_flat_map(|(fields, extra)| {
            let mut all: Vec<(String, String)> = fields.into_iter().flatten().collect();
            all.extend(extra);
            let n = all.len();
            (
                Just(all).prop_shuffle(),
                proptest::collection::vec(ws(), 4 * n + 2),
            )
        })
        .prop_map(|(all, gaps)| {
            let mut g = gaps.into_iter();
            let mut out = g.next().unwrap_or_default();
            out.push('{');
            for (i, (key, value)) in all.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&g.next().unwrap_or_default());
                out.push_str(key);
                out.push_str(&g.next().unwrap_or_default());
                out.push(':');
                out.push_str(&g.next().unwrap_or_default());
                out.push_str(value);
                out.push_str(&g.next().unwrap_or_default());
            }
            out.push('}');
            out.push_str(&g.next().unwrap_or_default());
            out
        })
}

/// A row exactly as the Macroxue logger writes it (the fast path's layout).
fn logger_row() -> impl Strategy<Value = String> {
    (
        any::<u32>(),
        0u32..100_000,
        0u8..=16,
        prop::sample::select(&MOVES[..]),
        prop::sample::select(vec!["search", "tuple11", "tuple10", "mcts"]),
        -100.0f64..100.0,
        proptest::collection::vec(0u8..=16, 16),
        proptest::collection::vec(prop_oneof![Just(None), (-50.0f64..50.0).prop_map(Some)], 4),
        search_object(),
    )
        .prop_map(|(seed, step, rank, mv, vt, val, board, evs, search)| {
            let ev = |e: &Option<f64>| e.map_or("null".to_string(), |v| format!("{v:.6}"));
            let cells: Vec<String> = board.iter().map(u8::to_string).collect();
            format!(
                "{{\"seed\":{seed},\"step_index\":{step},\"max_rank\":{rank},\"move\":\"{mv}\",\"valuation_type\":\"{vt}\",\"valuation\":{val:.6},\"board\":[{}],\"branch_evs\":{{\"up\":{},\"left\":{},\"right\":{},\"down\":{}}}{search}}}",
                cells.join(","),
                ev(&evs[0]),
                ev(&evs[2]),
                ev(&evs[3]),
                ev(&evs[1])
            )
        })
}

/// What follows the branch EVs in a row: nothing (the layout of the design notes), or the
/// current logger's `,"search":{…}` with the statistics of a search (counters that grow with
/// depth, up to depth-7 sizes and beyond u32) or of a tuple row (`used` false, all null).
fn search_object() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just(String::new()),
        1 => Just({
            let members: Vec<String> = SEARCH_KEYS.iter().map(|k| format!("\"{k}\":null")).collect();
            format!(",\"search\":{{\"used\":false,{}}}", members.join(","))
        }),
        3 => (proptest::collection::vec(prop_oneof![0u64..1000, 0u64..10_000_000_000], 13), 0.0f64..100.0)
            .prop_map(|(counts, rate)| {
                let mut values: Vec<String> = counts.iter().map(u64::to_string).collect();
                values.insert(12, format!("{rate:.6}"));
                search_text(true, values)
            }),
    ]
}

/// A number slot of a row in the logger's layout: a value as the logger spells it, or text the
/// vector path must refuse or leave to the scalar path exactly as that path decides (leading
/// zeros, lone signs and dots, exponents, numbers of up to 20 digits, nulls).
fn logger_number() -> impl Strategy<Value = String> {
    prop_oneof![
        24 => (-2_000_000.0f64..2_000_000.0).prop_map(|v| format!("{v:.6}")),
        1 => (0u8..20, 0u8..12, any::<bool>(), any::<u64>()).prop_map(|(int, frac, neg, bits)| {
            let digits: String = format!("{bits:020}{bits:020}");
            let mut t = String::new();
            if neg {
                t.push('-');
            }
            t.push_str(&digits[..usize::from(int)]);
            if frac > 0 {
                t.push('.');
                t.push_str(&digits[20..20 + usize::from(frac)]);
            }
            t
        }),
        1 => prop::sample::select(vec![
            "null", "nul", "0", "-0", "00", "01", "-01.5", "1.", ".5", "-", "--1", "1-2", "1.2.3",
            "1e5", "1.5e3", "1.5E-3", "-0.000000", "0.0000001", "99999999999999", "9999999.9999999",
            "123456789012345", "12345678901234.5", "1234567.12345678", "+1", "1 ", " 1", "4294967295",
            "4294967296", "255", "256",
        ])
        .prop_map(String::from),
    ]
}

/// An integer slot (seed, step_index, max_rank): mostly one the logger could write.
fn logger_uint(max: u64) -> impl Strategy<Value = String> {
    prop_oneof![
        12 => (0..=max).prop_map(|v| v.to_string()),
        1 => logger_number(),
    ]
}

/// A board cell: 0..=16 as the logger writes it, or a spelling the board check must refuse.
fn logger_cell() -> impl Strategy<Value = String> {
    prop_oneof![
        60 => (0u8..=16).prop_map(|v| v.to_string()),
        1 => prop::sample::select(vec![
            "17", "19", "20", "99", "00", "01", "06", "100", "116", "", "-1", "1.0", " 1", "a", ",",
            "null",
        ])
        .prop_map(String::from),
    ]
}

/// A row in the logger's layout whose every number and cell may be spelled oddly.
fn logger_row_odd_numbers() -> impl Strategy<Value = String> {
    (
        (logger_uint(u64::from(u32::MAX)), logger_uint(100_000), logger_uint(20)),
        proptest::collection::vec(logger_number(), 5),
        prop::sample::select(&MOVES[..]),
        prop::sample::select(vec!["\"search\"", "\"tuple11\"", "\"tuple10\"", "null", "\"tuple1\"", "\"searc\""]),
        proptest::collection::vec(logger_cell(), 16),
        odd_search_object(),
    )
        .prop_map(|((seed, step, rank), n, mv, vt, cells, search)| {
            format!(
                "{{\"seed\":{},\"step_index\":{},\"max_rank\":{},\"move\":\"{mv}\",\"valuation_type\":{vt},\"valuation\":{},\"board\":[{}],\"branch_evs\":{{\"up\":{},\"left\":{},\"right\":{},\"down\":{}}}{search}}}",
                seed, step, rank, n[0], cells.join(","), n[1], n[2], n[3], n[4]
            )
        })
}

/// What follows the branch EVs, with every statistic of the `search` object possibly spelled
/// oddly: `null` in a search row, numbers in a tuple row, leading zeros, 15 digits and more,
/// signs, exponents, a hit rate without a fraction.
fn odd_search_object() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => search_object(),
        2 => (
            any::<bool>(),
            proptest::collection::vec(logger_uint(u64::MAX), 13),
            logger_number(),
        )
            .prop_map(|(used, mut values, rate)| {
                values.insert(12, rate);
                search_text(used, values)
            }),
    ]
}

/// `,"search":{…}` with `used` and the 14 statistics' texts in log order.
fn search_text(used: bool, values: Vec<String>) -> String {
    let members: Vec<String> = SEARCH_KEYS
        .iter()
        .zip(values)
        .map(|(k, v)| format!("\"{k}\":{v}"))
        .collect();
    format!(",\"search\":{{\"used\":{used},{}}}", members.join(","))
}

/// A line with bytes damaged: truncated, a byte flipped, inserted or removed, invalid UTF-8.
fn mutated(line: impl Strategy<Value = String>) -> impl Strategy<Value = Vec<u8>> {
    (line, 0u8..6, any::<prop::sample::Index>(), any::<u8>()).prop_map(|(line, how, at, byte)| {
        let mut b = line.into_bytes();
        let i = at.index(b.len().max(1));
        match how {
            0 => b.truncate(i),
            1 if !b.is_empty() => b[i] ^= 1 << (byte % 8),
            2 => b.insert(i.min(b.len()), byte),
            3 if !b.is_empty() => {
                b.remove(i);
            }
            4 => b
                .splice(i.min(b.len())..i.min(b.len()), [0xC3, 0x28])
                .for_each(drop),
            _ => b.insert(
                i.min(b.len()),
                b"\",{}[]:0-e."
                    .get(byte as usize % 11)
                    .copied()
                    .unwrap_or(b'x'),
            ),
        }
        b
    })
}

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn valid_rows_are_read_as_the_reference_reads_them(line in row(false)) {
        prop_assert!(reference(line.as_bytes()).is_ok(), "the generator made an invalid row: {}", line);
        agree(line.as_bytes())?;
    }

    #[test]
    fn noisy_rows_agree_with_the_reference(line in row(true)) {
        agree(line.as_bytes())?;
    }

    #[test]
    fn logger_rows_take_the_fast_path_and_agree(line in logger_row()) {
        prop_assert!(parse_row_fast(line.as_bytes()).is_some(), "fast path gave up on {}", line);
        // The vector path reads every row the logger writes with its three valuation types.
        if !line.contains("\"mcts\"") {
            prop_assert_ne!(vector_gives_up(line.as_bytes()), Some(true), "vector path gave up on {}", line);
        }
        agree(line.as_bytes())?;
    }

    #[test]
    fn logger_rows_with_odd_numbers_agree(line in logger_row_odd_numbers()) {
        agree(line.as_bytes())?;
    }

    #[test]
    fn damaged_rows_agree_with_the_reference(
        line in mutated(prop_oneof![row(false), logger_row(), logger_row_odd_numbers()])
    ) {
        agree(&line)?;
    }
}

/// Cases found by the properties above, kept as named regressions.
#[test]
fn known_edge_cases_agree() {
    let lines: &[&[u8]] = &[
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}"#,
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,-0]}"#,
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,16.0]}"#,
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"x":1,"x":2}"#,
        br#"{"move":"up","move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}"#,
        br#"{"\u006dove":"\u0075p","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}"#,
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"branch_evs":{"up":-0.0}}"#,
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"branch_evs":{"up":3.4028235e38}}"#,
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"branch_evs":{"up":3.4028236e38}}"#,
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"valuation":1e-50}"#,
        b"\xEF\xBB\xBF{\"move\":\"up\",\"board\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}",
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"s":"\ud800"}"#,
        // Found by the properties: from_str_radix took the '+' of "\u+061" as a sign.
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"valuation_type":"se\u+061rch"}"#,
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"x":"\u-001"}"#,
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"seed":4294967295}"#,
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"seed":4294967296}"#,
        // Found by the properties at 20,000 cases: a number beyond f64 in an unknown field is
        // still JSON, and unknown fields are ignored (the reference used to refuse it).
        br#"{"branch_evs":null,"step_index":0,"board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"valuation_type":"search","max_rank":0, "valuation":0.000000,"move":"up","_":[-0.000000000000000000000000000000041999e908],"seed":0}"#,
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"x":[[],{"a":[{}]},"]]",1e999]}"#,
        br#"{"move":"up","board":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"x":[1e999,"\"\ud800"]}"#,
    ];
    for line in lines {
        agree(line).unwrap_or_else(|e| panic!("{e}"));
    }
    let deep = format!(
        "{{\"move\":\"up\",\"board\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],\"x\":{}1{}}}",
        "[".repeat(64),
        "]".repeat(64)
    );
    agree(deep.as_bytes()).unwrap();
    let deeper = format!(
        "{{\"move\":\"up\",\"board\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],\"x\":{}1{}}}",
        "[".repeat(65),
        "]".repeat(65)
    );
    agree(deeper.as_bytes()).unwrap();
}
