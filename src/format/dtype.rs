//! NumPy dtypes as `.npy` headers describe them (`dtype.descr`), and the Python literal syntax
//! headers are written in. The literal parser reads the subset of Python's literal syntax that
//! NumPy's writers use, with Python's meaning (`(500)` is the number 500, `(500,)` a tuple;
//! escapes as `repr` writes them), and refuses everything else rather than guess: a header this
//! tool reads is one `ast.literal_eval` reads the same way. The dtype reader accepts the list
//! form `np.save` writes (named fields, unnamed `|V` padding, sub-arrays) and the scalar type
//! strings of fixed size, each as NumPy reads it on this machine (`'=u4'` and `'u4'` are the
//! native byte order); field titles, dict-form descrs and types whose meaning depends on the
//! platform are refused. Only what copying rows and converting them to Parquet needs: byte
//! order, kind and size of scalars, sub-arrays, and structured fields with their offsets.

use std::fmt;

/// A value of the Python literal syntax `.npy` headers use.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Str(String),
    Int(i128),
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

impl From<DtypeError> for crate::Error {
    fn from(e: DtypeError) -> crate::Error {
        crate::Error::wrap(crate::ErrorKind::Corrupt, e)
    }
}

fn err(msg: impl Into<String>) -> DtypeError {
    DtypeError(msg.into())
}

/// Nesting deeper than this is refused (headers are short; this bounds the recursion).
const MAX_DEPTH: usize = 32;

/// Parses one Python literal (the whole text, surrounding whitespace allowed).
///
/// ```
/// use dataset_packer::format::dtype::{Literal, parse_literal};
/// assert_eq!(parse_literal("(500)").unwrap(), Literal::Int(500));
/// assert_eq!(parse_literal("(500,)").unwrap(), Literal::Tuple(vec![Literal::Int(500)]));
/// assert!(parse_literal("500L").is_err());
/// ```
pub fn parse_literal(text: &str) -> Result<Literal, DtypeError> {
    let mut p = Parser { s: text, at: 0 };
    let value = p.value(0)?;
    p.skip_ws();
    if p.at != p.s.len() {
        return Err(p.unexpected());
    }
    Ok(value)
}

/// One `key: value` of a header's dict, with the value's text as written.
#[derive(Debug, Clone, PartialEq)]
pub struct DictItem<'a> {
    pub key: Literal,
    pub value: Literal,
    pub text: &'a str,
}

/// Parses the text of a `.npy` header: one dict literal, as `ast.literal_eval` takes it (spaces
/// or tabs before it; after it spaces, tabs and form feeds, then at most one line end, which
/// is how every writer ends a header), its items in order, repeated keys kept.
///
/// ```
/// use dataset_packer::format::dtype::{Literal, parse_header_dict};
/// let items = parse_header_dict("{'shape': (3,), 'shape': (4,), }  \n").unwrap();
/// assert_eq!(items.len(), 2);
/// assert_eq!(items[1].text, "(4,)");
/// ```
pub fn parse_header_dict(text: &str) -> Result<Vec<DictItem<'_>>, DtypeError> {
    if text.contains('\0') {
        return Err(err(
            "it holds a NUL character, which Python refuses in a literal",
        ));
    }
    let mut p = Parser { s: text, at: 0 };
    while matches!(p.byte(), Some(b' ' | b'\t')) {
        p.at += 1;
    }
    if p.byte() != Some(b'{') {
        return Err(err(
            "it is not a dict literal starting the header (`{` after spaces at most)",
        ));
    }
    let items = p.dict_items(0)?;
    while matches!(p.byte(), Some(b' ' | b'\t' | b'\x0c')) {
        p.at += 1;
    }
    let rest = &text[p.at..];
    if !matches!(rest, "" | "\n" | "\r\n" | "\r") {
        return Err(err(format!(
            "unexpected text after the dict at character {}",
            text[..p.at].chars().count()
        )));
    }
    Ok(items)
}

struct Parser<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Parser<'a> {
    fn byte(&self) -> Option<u8> {
        self.s.as_bytes().get(self.at).copied()
    }

    /// Python's whitespace between the tokens of a bracketed literal.
    fn skip_ws(&mut self) {
        while matches!(self.byte(), Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.byte()
    }

    fn unexpected(&self) -> DtypeError {
        let near: String = self.s[self.at..].chars().take(12).collect();
        err(format!(
            "unexpected {near:?} at character {}",
            self.s[..self.at].chars().count()
        ))
    }

    fn value(&mut self, depth: usize) -> Result<Literal, DtypeError> {
        if depth > MAX_DEPTH {
            return Err(err("nested too deeply"));
        }
        match self.peek() {
            Some(b'\'' | b'"') => self.string(),
            Some(b'(') => self.parenthesized(depth),
            Some(b'[') => {
                self.at += 1;
                Ok(Literal::List(self.items(b']', depth)?.0))
            }
            Some(b'{') => Ok(Literal::Dict(
                self.dict_items(depth)?
                    .into_iter()
                    .map(|i| (i.key, i.value))
                    .collect(),
            )),
            Some(b'-' | b'0'..=b'9') => self.int(),
            Some(c) if c.is_ascii_alphabetic() => self.word(),
            Some(_) => Err(self.unexpected()),
            None => Err(err("unexpected end")),
        }
    }

    /// A string in single or double quotes, without prefixes, with the escapes Python's
    /// `repr` writes (`\\ \' \" \n \r \t \xHH \uHHHH \UHHHHHHHH`); a line end inside one is
    /// a syntax error in Python, and other escapes are refused.
    fn string(&mut self) -> Result<Literal, DtypeError> {
        let quote = self.s.as_bytes()[self.at] as char;
        self.at += 1;
        let mut out = String::new();
        let mut chars = self.s[self.at..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                c if c == quote => {
                    self.at += i + 1;
                    return Ok(Literal::Str(out));
                }
                '\n' | '\r' => return Err(err("a line end inside a string")),
                c if c < ' ' && c != '\t' => {
                    return Err(err(format!("control character {c:?} inside a string")));
                }
                '\\' => {
                    let escaped = match chars.next().map(|(_, e)| e) {
                        Some('\\') => '\\',
                        Some('\'') => '\'',
                        Some('"') => '"',
                        Some('n') => '\n',
                        Some('r') => '\r',
                        Some('t') => '\t',
                        Some(e @ ('x' | 'u' | 'U')) => {
                            let digits = match e {
                                'x' => 2,
                                'u' => 4,
                                _ => 8,
                            };
                            let hex: String = (0..digits)
                                .filter_map(|_| chars.next().map(|(_, h)| h))
                                .collect();
                            u32::from_str_radix(&hex, 16)
                                .ok()
                                .filter(|_| hex.len() == digits && hex.is_ascii())
                                .and_then(char::from_u32)
                                .ok_or_else(|| err(format!("bad escape \\{e}{hex}")))?
                        }
                        other => {
                            return Err(err(format!(
                                "escape \\{} in a string (only the escapes repr writes are read)",
                                other.map_or(String::new(), String::from)
                            )));
                        }
                    };
                    out.push(escaped);
                }
                c => out.push(c),
            }
        }
        Err(err("unterminated string"))
    }

    /// A decimal integer as Python writes one: `0` (or `00`…), or digits not starting with
    /// 0, optionally negative; no suffix (`500L` is Python 2), no `_`, no other base.
    fn int(&mut self) -> Result<Literal, DtypeError> {
        let start = self.at;
        if self.byte() == Some(b'-') {
            self.at += 1;
        }
        let digits_at = self.at;
        while self.byte().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
        let digits = &self.s[digits_at..self.at];
        let text = &self.s[start..self.at];
        if digits.is_empty()
            || (digits.len() > 1 && digits.starts_with('0') && digits.bytes().any(|d| d != b'0'))
            || self
                .byte()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
        {
            let near: String = self.s[start..].chars().take(12).collect();
            return Err(err(format!("{near:?} is not a decimal integer")));
        }
        text.parse()
            .map(Literal::Int)
            .map_err(|_| err(format!("integer {text} is too large")))
    }

    fn word(&mut self) -> Result<Literal, DtypeError> {
        let start = self.at;
        while self
            .byte()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
        {
            self.at += 1;
        }
        match &self.s[start..self.at] {
            "True" => Ok(Literal::Bool(true)),
            "False" => Ok(Literal::Bool(false)),
            "None" => Ok(Literal::None),
            word => Err(err(format!("{word:?} is not a literal"))),
        }
    }

    /// `()` and `(x,)`, `(x, y)`… are tuples; `(x)` is x, as in Python.
    fn parenthesized(&mut self, depth: usize) -> Result<Literal, DtypeError> {
        self.at += 1;
        let (mut items, comma) = self.items(b')', depth)?;
        if items.len() == 1 && !comma {
            return Ok(items.pop().expect("one item"));
        }
        Ok(Literal::Tuple(items))
    }

    /// Comma-separated values up to `close`, a trailing comma allowed; also whether a comma
    /// was seen.
    fn items(&mut self, close: u8, depth: usize) -> Result<(Vec<Literal>, bool), DtypeError> {
        let mut items = Vec::new();
        let mut comma = false;
        loop {
            if self.peek() == Some(close) {
                self.at += 1;
                return Ok((items, comma));
            }
            items.push(self.value(depth + 1)?);
            match self.peek() {
                Some(b',') => {
                    comma = true;
                    self.at += 1;
                }
                Some(c) if c == close => {}
                _ => return Err(self.unexpected()),
            }
        }
    }

    fn dict_items(&mut self, depth: usize) -> Result<Vec<DictItem<'a>>, DtypeError> {
        self.at += 1;
        let mut items = Vec::new();
        loop {
            if self.peek() == Some(b'}') {
                self.at += 1;
                return Ok(items);
            }
            let key = self.value(depth + 1)?;
            if self.peek() != Some(b':') {
                return Err(self.unexpected());
            }
            self.at += 1;
            self.skip_ws();
            let from = self.at;
            let value = self.value(depth + 1)?;
            let text = &self.s[from..self.at];
            items.push(DictItem { key, value, text });
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {}
                _ => return Err(self.unexpected()),
            }
        }
    }
}

impl fmt::Display for Literal {
    /// The literal as Python would write it (for messages).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seq = |f: &mut fmt::Formatter<'_>, items: &[Literal]| -> fmt::Result {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{item}")?;
            }
            Ok(())
        };
        match self {
            Literal::Str(s) if s.contains('\'') && !s.contains('"') => write!(f, "\"{s}\""),
            Literal::Str(s) => write!(f, "'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
            Literal::Int(n) => write!(f, "{n}"),
            Literal::Bool(true) => f.write_str("True"),
            Literal::Bool(false) => f.write_str("False"),
            Literal::None => f.write_str("None"),
            Literal::Tuple(items) => {
                f.write_str("(")?;
                seq(f, items)?;
                f.write_str(if items.len() == 1 { ",)" } else { ")" })
            }
            Literal::List(items) => {
                f.write_str("[")?;
                seq(f, items)?;
                f.write_str("]")
            }
            Literal::Dict(items) => {
                f.write_str("{")?;
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

impl Literal {
    /// The value under string key `key` of a dict (the last, as Python reads a repeated key).
    pub fn get(&self, key: &str) -> Option<&Literal> {
        match self {
            Literal::Dict(items) => items
                .iter()
                .rev()
                .find(|(k, _)| matches!(k, Literal::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// A shape: a tuple of non-negative integers (what NumPy writes; it reads a shape only
    /// as a tuple).
    pub fn as_shape(&self) -> Option<Vec<u64>> {
        match self {
            Literal::Tuple(items) => items
                .iter()
                .map(|i| match i {
                    Literal::Int(n) => u64::try_from(*n).ok(),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    }
}

/// A NumPy dtype, as far as this tool needs to know it.
#[derive(Debug, Clone, PartialEq)]
pub enum Dtype {
    /// A scalar: byte order (`<` or `>`, `|` where there is none: one-byte types, `V`, `S`),
    /// kind (`f`, `i`, `u`, `b`, `V`, `S`, `U`, `c`, `m`, `M`, `O`) and size in bytes.
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

/// One field of a structured dtype. An unnamed field (`''`, always a `|V` type) is padding.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub dtype: Dtype,
    pub offset: usize,
}

impl Dtype {
    /// Bytes per item (checked when the dtype is read: it fits in a `usize`).
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

    /// Reads a dtype from the literal of a header's `descr`, as NumPy's `descr_to_dtype` does,
    /// refusing what this tool does not read the same way (see the module doc).
    ///
    /// ```
    /// use dataset_packer::format::dtype::{Dtype, parse_literal};
    /// let d = Dtype::from_descr(&parse_literal("[('a', '<u2'), ('', '|V2'), ('b', 'u4')]").unwrap()).unwrap();
    /// assert_eq!(d.size(), 8);
    /// assert!(Dtype::from_descr(&parse_literal("[(('t', 'a'), '<u2')]").unwrap()).is_err());
    /// ```
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
                let mut fields: Vec<Field> = Vec::with_capacity(items.len());
                let mut offset = 0usize;
                for item in items {
                    let field = list_field(item, offset, depth)?;
                    if !field.name.is_empty() && fields.iter().any(|f| f.name == field.name) {
                        return Err(err(format!(
                            "field {:?} is named twice (NumPy refuses the dtype)",
                            field.name
                        )));
                    }
                    offset = offset
                        .checked_add(field.dtype.size())
                        .filter(|&o| o <= MAX_ITEM_BYTES)
                        .ok_or_else(|| err("the dtype is too large"))?;
                    fields.push(field);
                }
                Ok(Dtype::Struct {
                    fields,
                    size: offset,
                })
            }
            Literal::Dict(_) => Err(err(format!(
                "{descr} is a dict-form descr, which NumPy's np.load refuses (np.save writes a list of fields)"
            ))),
            // A sub-array as a field's type: `('<f4', (4,))`.
            Literal::Tuple(parts) if parts.len() == 2 => {
                let inner = Dtype::from_descr_at(&parts[0], depth + 1)?;
                sub_array(inner, &parts[1], &descr.to_string())
            }
            other => Err(err(format!("{other} is not a dtype"))),
        }
    }
}

/// Items larger than this are refused (NumPy's own limit is the C `int` range).
const MAX_ITEM_BYTES: usize = i32::MAX as usize;

/// `inner` repeated over `shape` (a non-empty tuple of sizes), the size checked.
fn sub_array(inner: Dtype, shape: &Literal, what: &str) -> Result<Dtype, DtypeError> {
    let dims = shape.as_shape().filter(|d| !d.is_empty()).ok_or_else(|| {
        err(format!(
            "{what}: shape {shape} is not a tuple of sizes such as (4,)"
        ))
    })?;
    dims.iter()
        .try_fold(inner.size(), |acc, &n| {
            usize::try_from(n).ok().and_then(|n| acc.checked_mul(n))
        })
        .filter(|&s| s <= MAX_ITEM_BYTES)
        .ok_or_else(|| err(format!("{what} is too large")))?;
    Ok(Dtype::Array(Box::new(inner), dims))
}

/// The byte order NumPy gives `=`, `|` or no mark on a multi-byte number: this machine's.
const NATIVE: char = if cfg!(target_endian = "little") {
    '<'
} else {
    '>'
};

/// `'<f4'`, `'|u1'`, `'|V2'`, `'<U10'`, `'|S5'`, `'<M8[ns]'`, …: a byte order mark, a kind
/// and a size NumPy reads the same on every platform.
fn scalar(text: &str) -> Result<Dtype, DtypeError> {
    let bad = |why: &str| err(format!("type {text:?} {why}"));
    let (mark, rest) = match text.as_bytes().first() {
        Some(c @ (b'<' | b'>' | b'|' | b'=')) => (Some(*c as char), &text[1..]),
        _ => (None, text),
    };
    let mut chars = rest.chars();
    let kind = chars.next().ok_or_else(|| bad("is empty"))?;
    let tail = chars.as_str();
    let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
    let unit = &tail[digits.len()..];
    const UNITS: [&str; 14] = [
        "[Y]", "[M]", "[W]", "[D]", "[h]", "[m]", "[s]", "[ms]", "[us]", "[ns]", "[ps]", "[fs]",
        "[as]", "",
    ];
    if !(unit.is_empty() || (matches!(kind, 'm' | 'M') && UNITS.contains(&unit))) {
        return Err(bad("is not one this tool reads"));
    }
    let n: usize = match (kind, digits.as_str()) {
        ('O', "") => 8, // a pointer
        _ if digits.starts_with('0') => return Err(bad("has no size")),
        _ => digits.parse().map_err(|_| bad("has no size"))?,
    };
    let fits = match kind {
        'b' => n == 1,
        'i' | 'u' => matches!(n, 1 | 2 | 4 | 8),
        'f' => matches!(n, 2 | 4 | 8),
        'c' => matches!(n, 8 | 16),
        'm' | 'M' | 'O' => n == 8,
        'V' | 'S' | 'U' => n <= MAX_ITEM_BYTES / 4,
        _ => return Err(bad("is not one this tool reads")),
    };
    if !fits {
        return Err(bad(
            "has a size NumPy does not read the same on every machine",
        ));
    }
    let size = if kind == 'U' { n * 4 } else { n };
    let order = match mark {
        _ if size == 1 || matches!(kind, 'V' | 'S') => '|',
        Some('<') => '<',
        Some('>') => '>',
        _ => NATIVE,
    };
    Ok(Dtype::Scalar { order, kind, size })
}

/// One `(name, type)` or `(name, type, shape)` entry of a list-form descr (a tuple, or a
/// list as NumPy also reads it). A field without a name is padding, which NumPy drops: only a
/// plain `|V` type reads that way, so any other unnamed field is refused.
fn list_field(item: &Literal, offset: usize, depth: usize) -> Result<Field, DtypeError> {
    let (Literal::Tuple(parts) | Literal::List(parts)) = item else {
        return Err(err(format!("field {item} is not a (name, type) tuple")));
    };
    if !matches!(parts.len(), 2 | 3) {
        return Err(err(format!(
            "field {item} is not a (name, type) or (name, type, shape) tuple"
        )));
    }
    let name = match &parts[0] {
        Literal::Str(s) => s.clone(),
        Literal::Tuple(_) => {
            return Err(err(format!(
                "field {item} has a title, which this tool does not read"
            )));
        }
        other => return Err(err(format!("field name {other} is not a string"))),
    };
    let mut dtype = Dtype::from_descr_at(&parts[1], depth + 1)?;
    if let Some(shape) = parts.get(2) {
        dtype = sub_array(dtype, shape, &format!("field {name:?}"))?;
    }
    if name.is_empty() && !matches!(dtype, Dtype::Scalar { kind: 'V', .. }) {
        return Err(err(format!(
            "field {item} has no name and is not '|V' padding (NumPy would keep it as a field named '')"
        )));
    }
    Ok(Field {
        name,
        dtype,
        offset,
    })
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
            "{'names': ['x'], 'formats': ['<f8'], 'offsets': [8], 'itemsize': 24}",
            "[(('title', 'x'), '<f8')]",
            "[('', '<u2')]",
            "[('x', '<u4'), ('x', '<u4')]",
            "'<f16'",
            "'<u3'",
            "'u04'",
            "[('x', '<f4', 4)]",
            "[('x', '<f4', ())]",
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

    #[test]
    fn reads_literals_as_python_does() {
        assert_eq!(parse_literal("(3)").unwrap(), Literal::Int(3));
        assert_eq!(parse_literal("((3,))").unwrap().as_shape(), Some(vec![3]));
        assert_eq!(parse_literal("()").unwrap(), Literal::Tuple(vec![]));
        assert_eq!(parse_literal("[3]").unwrap().as_shape(), None);
        assert_eq!(parse_literal("00").unwrap(), Literal::Int(0));
        assert_eq!(
            parse_literal(r"'r\x75n\u00e9\'\\'").unwrap(),
            Literal::Str("runé'\\".into())
        );
        for bad in [
            "3L", "03", "0x3", "3_0", "3.0", "'a\nb'", "'\\q'", "(,)", "'a' 'b'", "b'a'",
        ] {
            assert!(parse_literal(bad).is_err(), "{bad:?}");
        }
        // Native byte order for '=' and no mark; none for one-byte types.
        assert_eq!(dtype("'=u4'"), dtype("'<u4'"));
        assert_eq!(dtype("'u4'"), dtype("'<u4'"));
        assert_eq!(dtype("'>u1'"), dtype("'|u1'"));
        assert_ne!(dtype("'>u4'"), dtype("'<u4'"));
    }

    #[test]
    fn header_dicts_keep_repeated_keys_and_their_text() {
        let items = parse_header_dict("{'shape': (500,), 'shape': (250 ,) }   \n").unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!((items[0].text, items[1].text), ("(500,)", "(250 ,)"));
        for bad in ["\n{}", " {} x", "{}\n\n", "[]", "{'a': 1}\0"] {
            assert!(parse_header_dict(bad).is_err(), "{bad:?}");
        }
    }
}
