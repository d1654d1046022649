//! NumPy dtypes as `.npy` headers describe them (`dtype.descr`), for arrays this tool does not
//! define itself (companion arrays next to a pack): parsing the Python literal of a header,
//! the dtype's item size, and its fields. Only what copying rows and converting them to
//! Parquet needs: byte order, kind and size of scalars, sub-arrays, and structured fields with
//! their offsets.

use std::fmt;

/// A value of the Python literal syntax `.npy` headers use.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Str(String),
    Int(i64),
    Bool(bool),
    None,
    Tuple(Vec<Literal>),
    List(Vec<Literal>),
    Dict(Vec<(Literal, Literal)>),
}

/// Why a literal or a dtype could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DtypeError(pub String);

impl fmt::Display for DtypeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DtypeError {}

fn err(msg: impl Into<String>) -> DtypeError {
    DtypeError(msg.into())
}

/// Nesting deeper than this is refused (headers are short; this bounds the recursion).
const MAX_DEPTH: usize = 32;

/// Parses one Python literal (the whole text, surrounding whitespace allowed).
pub fn parse_literal(text: &str) -> Result<Literal, DtypeError> {
    let mut p = Parser {
        s: text.as_bytes(),
        at: 0,
    };
    let value = p.value(0)?;
    p.skip_ws();
    if p.at != p.s.len() {
        return Err(err(format!("unexpected text at byte {}", p.at)));
    }
    Ok(value)
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.at).copied()
    }

    fn value(&mut self, depth: usize) -> Result<Literal, DtypeError> {
        if depth > MAX_DEPTH {
            return Err(err("nested too deeply"));
        }
        match self.peek() {
            Some(b'\'' | b'"') => self.string(),
            Some(b'(') => self.sequence(b')', depth).map(Literal::Tuple),
            Some(b'[') => self.sequence(b']', depth).map(Literal::List),
            Some(b'{') => self.dict(depth),
            Some(b'-' | b'0'..=b'9') => self.int(),
            Some(_) => self.word(),
            None => Err(err("unexpected end")),
        }
    }

    fn string(&mut self) -> Result<Literal, DtypeError> {
        let quote = self.s[self.at];
        self.at += 1;
        let start = self.at;
        while let Some(&c) = self.s.get(self.at) {
            if c == b'\\' {
                return Err(err("escapes in strings are not supported"));
            }
            if c == quote {
                let text = std::str::from_utf8(&self.s[start..self.at])
                    .map_err(|_| err("a string is not UTF-8"))?;
                self.at += 1;
                return Ok(Literal::Str(text.to_string()));
            }
            self.at += 1;
        }
        Err(err("unterminated string"))
    }

    fn int(&mut self) -> Result<Literal, DtypeError> {
        let start = self.at;
        if self.s[self.at] == b'-' {
            self.at += 1;
        }
        while self.s.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        // Python 2 longs ("10L") appear in headers written by old NumPy versions.
        let digits = std::str::from_utf8(&self.s[start..self.at]).expect("ASCII");
        if self.s.get(self.at) == Some(&b'L') {
            self.at += 1;
        }
        digits
            .parse()
            .map(Literal::Int)
            .map_err(|_| err(format!("bad integer {digits:?}")))
    }

    fn word(&mut self) -> Result<Literal, DtypeError> {
        let start = self.at;
        while self.s.get(self.at).is_some_and(u8::is_ascii_alphabetic) {
            self.at += 1;
        }
        match &self.s[start..self.at] {
            b"True" => Ok(Literal::Bool(true)),
            b"False" => Ok(Literal::Bool(false)),
            b"None" => Ok(Literal::None),
            _ => Err(err(format!("unexpected text at byte {start}"))),
        }
    }

    fn sequence(&mut self, close: u8, depth: usize) -> Result<Vec<Literal>, DtypeError> {
        self.at += 1;
        let mut items = Vec::new();
        loop {
            if self.peek() == Some(close) {
                self.at += 1;
                return Ok(items);
            }
            items.push(self.value(depth + 1)?);
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(c) if c == close => {}
                _ => return Err(err(format!("expected ',' at byte {}", self.at))),
            }
        }
    }

    fn dict(&mut self, depth: usize) -> Result<Literal, DtypeError> {
        self.at += 1;
        let mut items = Vec::new();
        loop {
            if self.peek() == Some(b'}') {
                self.at += 1;
                return Ok(Literal::Dict(items));
            }
            let key = self.value(depth + 1)?;
            if self.peek() != Some(b':') {
                return Err(err(format!("expected ':' at byte {}", self.at)));
            }
            self.at += 1;
            let value = self.value(depth + 1)?;
            items.push((key, value));
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {}
                _ => return Err(err(format!("expected ',' at byte {}", self.at))),
            }
        }
    }
}

impl Literal {
    /// The value under string key `key` of a dict.
    pub fn get(&self, key: &str) -> Option<&Literal> {
        match self {
            Literal::Dict(items) => items
                .iter()
                .find(|(k, _)| matches!(k, Literal::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// A shape: a tuple (or list) of non-negative integers.
    pub fn as_shape(&self) -> Option<Vec<u64>> {
        match self {
            Literal::Tuple(items) | Literal::List(items) => items
                .iter()
                .map(|i| match i {
                    Literal::Int(n) => u64::try_from(*n).ok(),
                    _ => None,
                })
                .collect(),
            Literal::Int(n) => u64::try_from(*n).ok().map(|n| vec![n]),
            _ => None,
        }
    }
}

/// A NumPy dtype, as far as this tool needs to know it.
#[derive(Debug, Clone, PartialEq)]
pub enum Dtype {
    /// A scalar: byte order (`<`, `>`, `|` or `=`), kind (`f`, `i`, `u`, `b`, `V`, `S`, `U`,
    /// `c`, `m`, `M`, `O`, …) and size in bytes.
    Scalar {
        order: char,
        kind: char,
        size: usize,
    },
    /// A fixed-shape sub-array of another dtype.
    Array(Box<Dtype>, Vec<u64>),
    /// Named fields at byte offsets, in an item of `size` bytes.
    Struct { fields: Vec<Field>, size: usize },
}

/// One field of a structured dtype. An unnamed field (`''`) is padding.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub dtype: Dtype,
    pub offset: usize,
}

impl Dtype {
    /// Bytes per item (`usize::MAX` for a dtype too large to exist, which callers refuse).
    pub fn size(&self) -> usize {
        match self {
            Dtype::Scalar { size, .. } => *size,
            Dtype::Array(inner, shape) => shape
                .iter()
                .fold(inner.size(), |acc, &n| acc.saturating_mul(n as usize)),
            Dtype::Struct { size, .. } => *size,
        }
    }

    /// Whether the dtype holds Python objects (pointers: its bytes mean nothing in a file).
    pub fn has_objects(&self) -> bool {
        match self {
            Dtype::Scalar { kind, .. } => *kind == 'O',
            Dtype::Array(inner, _) => inner.has_objects(),
            Dtype::Struct { fields, .. } => fields.iter().any(|f| f.dtype.has_objects()),
        }
    }

    /// Reads a dtype from the literal of a header's `descr`.
    pub fn from_descr(descr: &Literal) -> Result<Dtype, DtypeError> {
        Dtype::from_descr_at(descr, 0)
    }

    fn from_descr_at(descr: &Literal, depth: usize) -> Result<Dtype, DtypeError> {
        if depth > MAX_DEPTH {
            return Err(err("dtype nested too deeply"));
        }
        match descr {
            Literal::Str(s) => scalar(s),
            Literal::List(items) => {
                let mut fields = Vec::with_capacity(items.len());
                let mut offset = 0usize;
                for item in items {
                    let field = list_field(item, offset, depth)?;
                    offset = offset
                        .checked_add(field.dtype.size())
                        .ok_or_else(|| err("dtype too large"))?;
                    fields.push(field);
                }
                Ok(Dtype::Struct {
                    fields,
                    size: offset,
                })
            }
            Literal::Dict(_) => dict_struct(descr, depth),
            // A sub-array, as the `formats` of a dict-form descr write one: `('<f4', (4,))`.
            Literal::Tuple(parts) if parts.len() == 2 => {
                let shape = parts[1]
                    .as_shape()
                    .ok_or_else(|| err(format!("sub-array {descr:?} has a bad shape")))?;
                Ok(Dtype::Array(
                    Box::new(Dtype::from_descr_at(&parts[0], depth + 1)?),
                    shape,
                ))
            }
            other => Err(err(format!("descr {other:?} is not a dtype"))),
        }
    }
}

/// `'<f4'`, `'|u1'`, `'|V2'`, `'<U10'`, `'|S5'`, `'<M8[ns]'`, …
fn scalar(text: &str) -> Result<Dtype, DtypeError> {
    let bytes = text.as_bytes();
    let (order, rest) = match bytes.first() {
        Some(c @ (b'<' | b'>' | b'|' | b'=')) => (*c as char, &text[1..]),
        _ => ('|', text),
    };
    let mut chars = rest.chars();
    let kind = chars
        .next()
        .ok_or_else(|| err(format!("empty type {text:?}")))?;
    let tail = chars.as_str();
    let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
    let unit = &tail[digits.len()..];
    let datetime_unit = matches!(kind, 'm' | 'M') && unit.starts_with('[');
    if !unit.is_empty() && !datetime_unit {
        return Err(err(format!("unknown type {text:?}")));
    }
    let n: usize = match (kind, digits.as_str()) {
        ('O', "") => 8, // a pointer
        _ => digits
            .parse()
            .map_err(|_| err(format!("type {text:?} has no size")))?,
    };
    let size = match kind {
        'U' => n.checked_mul(4).ok_or_else(|| err("type too large"))?,
        'b' | 'i' | 'u' | 'f' | 'c' | 'V' | 'S' | 'a' | 'm' | 'M' | 'O' => n,
        _ => return Err(err(format!("unknown type kind {kind:?} in {text:?}"))),
    };
    Ok(Dtype::Scalar { order, kind, size })
}

/// One `(name, descr)` or `(name, descr, shape)` entry of a list-form descr.
fn list_field(item: &Literal, offset: usize, depth: usize) -> Result<Field, DtypeError> {
    let Literal::Tuple(parts) = item else {
        return Err(err(format!("field {item:?} is not a tuple")));
    };
    let name = match parts.first() {
        Some(Literal::Str(s)) => s.clone(),
        // (title, name)
        Some(Literal::Tuple(t)) if t.len() == 2 => match &t[1] {
            Literal::Str(s) => s.clone(),
            _ => return Err(err("a field name is not a string")),
        },
        _ => return Err(err("a field has no name")),
    };
    let inner = parts
        .get(1)
        .ok_or_else(|| err(format!("field {name:?} has no type")))?;
    let mut dtype = Dtype::from_descr_at(inner, depth + 1)?;
    match parts.get(2) {
        None => {}
        Some(shape) => {
            let shape = shape
                .as_shape()
                .ok_or_else(|| err(format!("field {name:?} has a bad shape")))?;
            dtype = Dtype::Array(Box::new(dtype), shape);
        }
    }
    if parts.len() > 3 {
        return Err(err(format!("field {name:?} has too many parts")));
    }
    Ok(Field {
        name,
        dtype,
        offset,
    })
}

/// `{'names': [...], 'formats': [...], 'offsets': [...], 'itemsize': N}`.
fn dict_struct(descr: &Literal, depth: usize) -> Result<Dtype, DtypeError> {
    let list = |key: &str| match descr.get(key) {
        Some(Literal::List(items)) => Ok(items.clone()),
        _ => Err(err(format!("dict dtype has no {key:?} list"))),
    };
    let names = list("names")?;
    let formats = list("formats")?;
    let offsets = list("offsets")?;
    if names.len() != formats.len() || names.len() != offsets.len() {
        return Err(err("dict dtype lists differ in length"));
    }
    let mut fields = Vec::new();
    let mut end = 0usize;
    for ((name, format), offset) in names.iter().zip(&formats).zip(&offsets) {
        let (Literal::Str(name), Literal::Int(offset)) = (name, offset) else {
            return Err(err("dict dtype has a bad name or offset"));
        };
        let offset = usize::try_from(*offset).map_err(|_| err("negative offset"))?;
        let dtype = Dtype::from_descr_at(format, depth + 1)?;
        end = end.max(
            offset
                .checked_add(dtype.size())
                .ok_or_else(|| err("dtype too large"))?,
        );
        fields.push(Field {
            name: name.clone(),
            dtype,
            offset,
        });
    }
    let size = match descr.get("itemsize") {
        Some(Literal::Int(n)) => usize::try_from(*n).map_err(|_| err("negative itemsize"))?,
        _ => end,
    };
    if size < end {
        return Err(err("dict dtype's itemsize is smaller than its fields"));
    }
    Ok(Dtype::Struct { fields, size })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dtype(descr: &str) -> Dtype {
        Dtype::from_descr(&parse_literal(descr).unwrap()).unwrap()
    }

    #[test]
    fn sizes_of_numpy_descrs() {
        assert_eq!(dtype("'<f4'").size(), 4);
        assert_eq!(dtype("'|b1'").size(), 1);
        assert_eq!(dtype("'<U3'").size(), 12);
        assert_eq!(dtype("'<M8[ns]'").size(), 8);
        let steps = dtype(crate::format::npy::STEP_ROW_DESCR);
        assert_eq!(steps.size(), 48);
        let Dtype::Struct { fields, .. } = &steps else {
            panic!()
        };
        assert_eq!(fields[10].name, "seed");
        assert_eq!(fields[10].offset, 28);
        assert_eq!(
            dtype("[('a', '<u2', (2, 3)), ('b', [('c', '|u1')])]").size(),
            13
        );
        assert_eq!(
            dtype("{'names': ['x'], 'formats': ['<f8'], 'offsets': [8], 'itemsize': 24}").size(),
            24
        );
        assert!(dtype("'|O'").has_objects());
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        for bad in [
            "'<q9'",
            "[('a',)]",
            "'<f4",
            "{'names': ['x']}",
            "[[[[[[",
            "'\\x'",
            "7",
        ] {
            let parsed = parse_literal(bad).and_then(|l| Dtype::from_descr(&l));
            assert!(parsed.is_err(), "{bad}");
        }
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert!(parse_literal(&deep).is_err());
    }

    #[test]
    fn reads_header_dicts() {
        let l =
            parse_literal("{'descr': '<f4', 'fortran_order': False, 'shape': (10, 64), }").unwrap();
        assert_eq!(l.get("shape").unwrap().as_shape(), Some(vec![10, 64]));
        assert_eq!(l.get("fortran_order"), Some(&Literal::Bool(false)));
        assert_eq!(parse_literal("(3,)").unwrap().as_shape(), Some(vec![3]));
    }
}
