//! The `.npy` container: writes headers byte-identical to `np.save`, and reads them back the
//! one way every command (and, mirrored in Python, `Pack()`) reads them. A header is read as
//! `np.load` reads it (format 1.0 and 2.0 in Latin-1, 3.0 in UTF-8, up to NumPy's 10,000
//! characters, the dict as `ast.literal_eval` reads it), or refused with the key at fault:
//! where NumPy would read something else than the format allows (a key given twice, of which
//! NumPy takes the last; another key), and where this tool cannot be sure to read what NumPy
//! reads (see [`crate::format::dtype`]). A shard's header then names the spec layout, the
//! legacy packed layout, or another dtype, reported as such.

use std::fmt;

use super::dtype::{Dtype, Field, Literal, parse_header_dict, parse_literal};
use super::row::{LEGACY_ROW_BYTES, ROW_BYTES};

/// `dtype.descr` of the spec's aligned 48-byte row, exactly as NumPy prints it.
pub const STEP_ROW_DESCR: &str = "[('run_id', '<u4'), ('step_index', '<u4'), ('board', '<u8'), \
('board_eval', '<i4'), ('tile_65536_mask', '<u2'), ('move_dir', '|u1'), ('valuation_type', '|u1'), \
('ev_legal', '|u1'), ('max_rank', '|u1'), ('', '|V2'), ('seed', '<u4'), ('branch_evs', '<f4', (4,))]";

/// `dtype.descr` of the legacy packed 46-byte row (the same fields without the padding).
pub const LEGACY_ROW_DESCR: &str = "[('run_id', '<u4'), ('step_index', '<u4'), ('board', '<u8'), \
('board_eval', '<i4'), ('tile_65536_mask', '<u2'), ('move_dir', '|u1'), ('valuation_type', '|u1'), \
('ev_legal', '|u1'), ('max_rank', '|u1'), ('seed', '<u4'), ('branch_evs', '<f4', (4,))]";

const MAGIC: &[u8] = b"\x93NUMPY";
const ALIGN: usize = 64;
/// NumPy leaves room for a shape of this many digits so headers can be patched in place.
const GROWTH_AXIS_MAX_DIGITS: usize = 21;

/// Length of the header `np.save` writes for the row dtype, whatever the row count.
pub const HEADER_LEN: usize = 384;

/// The exact header `np.save` writes for a 1-d array of `rows` spec rows (format 1.0).
pub fn header(rows: u64) -> Vec<u8> {
    array_header(STEP_ROW_DESCR, &[rows])
}

/// The exact header `np.save` writes for an array of dtype `descr` (its `repr`, as found in
/// another `.npy` header) and `shape`, C order: the dict with sorted keys, room for a first
/// axis of up to 21 digits (so the header can be patched in place as rows are appended), and
/// padding to a multiple of 64 bytes; format 1.0 unless the header needs more than 65535 bytes.
pub fn array_header(descr: &str, shape: &[u64]) -> Vec<u8> {
    let shape_text = match shape {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut dict = format!("{{'descr': {descr}, 'fortran_order': False, 'shape': {shape_text}, }}");
    if let Some(first) = shape.first() {
        let digits = first.to_string().len();
        dict.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(digits)));
    }
    // As np.save chooses: Latin-1 (format 1.0, or 2.0 past 64 KiB) when every character of
    // the dict has one, UTF-8 (format 3.0) otherwise.
    let (text, latin1): (Vec<u8>, bool) = match dict.chars().map(latin1_byte).collect() {
        Some(bytes) => (bytes, true),
        None => (dict.into_bytes(), false),
    };
    let hlen = text.len() + 1;
    let pad_for = |len_bytes: usize| ALIGN - ((MAGIC.len() + 2 + len_bytes + hlen) % ALIGN);
    let (version, len_bytes) = if !latin1 {
        (3u8, 4usize)
    } else if hlen + pad_for(2) <= u16::MAX as usize {
        (1, 2)
    } else {
        (2, 4)
    };
    let padlen = pad_for(len_bytes);
    let total_len = hlen + padlen;
    let mut out = Vec::with_capacity(MAGIC.len() + 2 + len_bytes + total_len);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(total_len as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(total_len as u32).to_le_bytes());
    }
    out.extend_from_slice(&text);
    out.extend(std::iter::repeat_n(b' ', padlen));
    out.push(b'\n');
    out
}

fn latin1_byte(c: char) -> Option<u8> {
    u8::try_from(u32::from(c)).ok()
}

/// The header of any `.npy` array (a companion array next to a pack).
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayHeader {
    /// The dtype's `descr` text as the file has it (written back unchanged).
    pub descr: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub fortran_order: bool,
    /// Offset of the first data byte.
    pub data_offset: usize,
}

impl ArrayHeader {
    /// The first axis: the array's rows.
    pub fn rows(&self) -> u64 {
        self.shape.first().copied().unwrap_or(0)
    }

    /// The shape after the first axis.
    pub fn trailing(&self) -> &[u64] {
        self.shape.get(1..).unwrap_or(&[])
    }

    /// Bytes per row (per index of the first axis), None when that overflows.
    pub fn row_bytes(&self) -> Option<u64> {
        self.trailing()
            .iter()
            .try_fold(self.dtype.size() as u64, |acc, &n| acc.checked_mul(n))
    }
}

/// The most characters of header text `np.load` reads (`max_header_size`: more is refused
/// unless the file is trusted with `allow_pickle=True`), so the most this tool reads.
pub const MAX_HEADER_CHARS: usize = 10_000;

/// The three keys of a header, no more: NumPy refuses any other.
const KEYS: [&str; 3] = ["descr", "fortran_order", "shape"];

/// How many bytes the header of the `.npy` file starting with `prefix` (its first 12 bytes,
/// or all of a shorter file) takes, so its data starts there; refuses a file that is not
/// `.npy`, a format version NumPy does not read, and a length over NumPy's limit, before
/// anything of that size is read.
///
/// ```
/// use dataset_packer::format::npy::{header, header_size};
/// assert_eq!(header_size(&header(5)[..12]).unwrap(), 384);
/// ```
pub fn header_size(prefix: &[u8]) -> Result<usize, HeaderError> {
    let (start, len, latin1) = prelude(prefix)?;
    let most = if latin1 {
        MAX_HEADER_CHARS
    } else {
        4 * MAX_HEADER_CHARS
    };
    if len > most {
        return Err(too_long(len, "bytes"));
    }
    Ok(start + len)
}

/// Where the header text starts, its length in bytes, and whether it is Latin-1 (or UTF-8).
fn prelude(bytes: &[u8]) -> Result<(usize, usize, bool), HeaderError> {
    if bytes.len() < 8 || &bytes[..6] != MAGIC {
        return Err(bad(
            if bytes.len() < 8 && MAGIC.starts_with(&bytes[..bytes.len().min(6)]) {
                "truncated: too short for a .npy file".to_string()
            } else {
                "not a .npy file (no \\x93NUMPY magic)".to_string()
            },
        ));
    }
    let (start, latin1) = match (bytes[6], bytes[7]) {
        (1, 0) => (10, true),
        (2, 0) => (12, true),
        (3, 0) => (12, false),
        (major, minor) => {
            return Err(bad(format!(
                "format version {major}.{minor}: NumPy reads versions 1.0, 2.0 and 3.0 only"
            )));
        }
    };
    let Some(len_bytes) = bytes.get(8..start) else {
        return Err(bad("truncated: the file ends inside the header length"));
    };
    let len = len_bytes
        .iter()
        .rev()
        .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
    Ok((start, len, latin1))
}

fn too_long(len: usize, unit: &str) -> HeaderError {
    bad(format!(
        "the header is {len} {unit} long, over NumPy's limit of {MAX_HEADER_CHARS} characters (np.load refuses it)"
    ))
}

/// Parses the header of any `.npy` file from its first bytes (at least the whole header:
/// [`header_size`] says how many).
///
/// ```
/// use dataset_packer::format::npy::{array_header, parse_array_header};
/// let h = parse_array_header(&array_header("[('ж', '<f4')]", &[3])).unwrap();
/// assert_eq!((h.shape, h.descr.as_str()), (vec![3], "[('ж', '<f4')]"));
/// ```
pub fn parse_array_header(bytes: &[u8]) -> Result<ArrayHeader, HeaderError> {
    let (text, data_offset) = header_text(bytes)?;
    let text = text.as_str();
    let items =
        parse_header_dict(text).map_err(|e| bad(format!("the header is not a dict: {e}")))?;
    let mut found: [Option<(&Literal, &str)>; 3] = [None; 3];
    for item in &items {
        let slot = match &item.key {
            Literal::Str(k) => KEYS.iter().position(|want| want == k),
            _ => None,
        };
        let Some(slot) = slot else {
            return Err(bad(format!(
                "key {} is not one of 'descr', 'fortran_order' and 'shape' (NumPy refuses a header with any other key)",
                item.key
            )));
        };
        if let Some((_, first)) = found[slot] {
            return Err(bad(format!(
                "key '{}' is given twice, as {} and as {}: NumPy reads the last, a reader of the first would read the other",
                KEYS[slot],
                first.trim(),
                item.text.trim()
            )));
        }
        found[slot] = Some((&item.value, item.text));
    }
    let [descr, fortran_order, shape] = found;
    let missing = |key: &str| bad(format!("no key '{key}'"));
    let (descr, descr_text) = descr.ok_or_else(|| missing("descr"))?;
    let dtype = match descr {
        Literal::Tuple(_) => Err(super::dtype::DtypeError(format!(
            "{descr} is a sub-array type, which np.save never writes (it writes the array's full shape)"
        ))),
        _ => Dtype::from_descr(descr),
    }
    .map_err(|e| bad(format!("'descr': {e}")))?;
    let fortran_order = match fortran_order.ok_or_else(|| missing("fortran_order"))? {
        (Literal::Bool(b), _) => *b,
        (other, _) => {
            return Err(bad(format!(
                "'fortran_order': {other} is not True or False"
            )));
        }
    };
    let (shape_value, _) = shape.ok_or_else(|| missing("shape"))?;
    let shape = shape_value.as_shape().ok_or_else(|| {
        bad(format!(
            "'shape': {shape_value} is not a tuple of lengths such as (500,) (NumPy reads a shape only as a tuple of integers)"
        ))
    })?;
    Ok(ArrayHeader {
        descr: descr_text.trim().to_string(),
        dtype,
        shape,
        fortran_order,
        data_offset,
    })
}

/// The header's text, decoded as its format version says, and the offset of the first data
/// byte.
fn header_text(bytes: &[u8]) -> Result<(String, usize), HeaderError> {
    let (start, len, latin1) = prelude(bytes)?;
    let end = header_size(bytes)?;
    let Some(raw) = bytes.get(start..end) else {
        return Err(bad(format!(
            "truncated: the header says it is {len} bytes, the file ends after {}",
            bytes.len() - start
        )));
    };
    let text: String = if latin1 {
        raw.iter().map(|&b| char::from(b)).collect()
    } else {
        String::from_utf8(raw.to_vec())
            .map_err(|_| bad("the header is not UTF-8, which format 3.0 requires"))?
    };
    let chars = text.chars().count();
    if chars > MAX_HEADER_CHARS {
        return Err(too_long(chars, "characters"));
    }
    Ok((text, end))
}

/// What a shard's header says its rows are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowLayout {
    /// The spec's aligned 48-byte dtype.
    Aligned,
    /// The legacy packed 46-byte dtype an older tool wrote.
    LegacyPacked,
    /// Any other dtype; the text is its descr as found.
    Other(String),
}

impl RowLayout {
    pub fn row_bytes(&self) -> Option<usize> {
        match self {
            RowLayout::Aligned => Some(ROW_BYTES),
            RowLayout::LegacyPacked => Some(LEGACY_ROW_BYTES),
            RowLayout::Other(_) => None,
        }
    }
}

/// A parsed `.npy` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub layout: RowLayout,
    pub rows: u64,
    /// Offset of the first data byte.
    pub data_offset: usize,
}

/// Why a header could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderError(pub String);

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HeaderError {}

impl From<HeaderError> for crate::Error {
    fn from(e: HeaderError) -> crate::Error {
        crate::Error::wrap(crate::ErrorKind::Corrupt, e)
    }
}

fn bad(msg: impl Into<String>) -> HeaderError {
    HeaderError(msg.into())
}

/// Parses a shard's `.npy` header from the first bytes of its file (at least the whole
/// header), by meaning as NumPy reads it: the dict in any key order and spacing, with or
/// without trailing commas, and the dtype compared field by field (see `classify`), so the
/// spelling of another writer (npyz writes `'<u1'` where `np.save` writes `'|u1'`) is no
/// obstacle.
pub fn parse_header(bytes: &[u8]) -> Result<Header, HeaderError> {
    let array = parse_array_header(bytes)?;
    if array.fortran_order {
        return Err(bad("'fortran_order': True, but a shard is in C order"));
    }
    let [rows] = array.shape[..] else {
        return Err(bad(format!(
            "'shape': {:?} is not 1-dimensional (a shard is one row per step)",
            array.shape
        )));
    };
    Ok(Header {
        layout: classify(&array.dtype, &array.descr),
        rows,
        data_offset: array.data_offset,
    })
}

/// Which row layout a dtype is: the same named fields at the same offsets with the same kind
/// and size (padding fields ignored, item size compared), whatever byte-order mark a 1-byte
/// type carries; multi-byte fields must be little-endian.
fn classify(dtype: &Dtype, descr: &str) -> RowLayout {
    use std::sync::OnceLock;
    static ALIGNED: OnceLock<Dtype> = OnceLock::new();
    static LEGACY: OnceLock<Dtype> = OnceLock::new();
    let parsed = |descr: &str| {
        Dtype::from_descr(&parse_literal(descr).expect("a valid literal")).expect("a valid dtype")
    };
    if same_row_fields(dtype, ALIGNED.get_or_init(|| parsed(STEP_ROW_DESCR))) {
        RowLayout::Aligned
    } else if same_row_fields(dtype, LEGACY.get_or_init(|| parsed(LEGACY_ROW_DESCR))) {
        RowLayout::LegacyPacked
    } else {
        RowLayout::Other(descr.trim().to_string())
    }
}

fn same_row_fields(got: &Dtype, want: &Dtype) -> bool {
    let (
        Dtype::Struct {
            fields: got_fields,
            size: got_size,
        },
        Dtype::Struct {
            fields: want_fields,
            size: want_size,
        },
    ) = (got, want)
    else {
        return false;
    };
    let named = |fields: &[Field]| {
        fields
            .iter()
            .filter(|f| !f.name.is_empty())
            .map(|f| (f.name.clone(), f.offset, f.dtype.clone()))
            .collect::<Vec<_>>()
    };
    let (g, w) = (named(got_fields), named(want_fields));
    got_size == want_size
        && g.len() == w.len()
        && g.iter()
            .zip(&w)
            .all(|(a, b)| a.0 == b.0 && a.1 == b.1 && same_type(&a.2, &b.2))
}

/// Two field types are the same data: the same kind and size, the same sub-array shape, and
/// the same byte order where there is one (a 1-byte type has none: `<u1`, `|u1` and `u1` are
/// one type, as NumPy says).
fn same_type(a: &Dtype, b: &Dtype) -> bool {
    match (a, b) {
        (
            Dtype::Scalar {
                order: oa,
                kind: ka,
                size: sa,
            },
            Dtype::Scalar {
                order: ob,
                kind: kb,
                size: sb,
            },
        ) => ka == kb && sa == sb && (*sa == 1 || oa == ob),
        (Dtype::Array(ia, sa), Dtype::Array(ib, sb)) => sa == sb && same_type(ia, ib),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_the_spec_example() {
        let h = header(3);
        assert_eq!(h.len(), HEADER_LEN);
        assert_eq!(&h[..10], b"\x93NUMPY\x01\x00v\x01");
        let text = std::str::from_utf8(&h[10..]).unwrap();
        let expected_start =
            format!("{{'descr': {STEP_ROW_DESCR}, 'fortran_order': False, 'shape': (3,), }}");
        assert!(text.starts_with(&expected_start));
        assert!(
            text[expected_start.len()..]
                .trim_end_matches('\n')
                .chars()
                .all(|c| c == ' ')
        );
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn array_headers_match_np_save() {
        // np.save(f, np.zeros((3, 64), np.float32)) and np.zeros(5, [('a', '<i2'), ('b', '<f8')]).
        let h = array_header("'<f4'", &[3, 64]);
        assert_eq!(h.len(), 128);
        let text = std::str::from_utf8(&h[10..]).unwrap();
        assert!(text.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 64), }"));
        assert!(text.ends_with(" \n"));
        let parsed = parse_array_header(&h).unwrap();
        assert_eq!(parsed.shape, [3, 64]);
        assert_eq!(parsed.row_bytes(), Some(256));
        assert_eq!(parsed.data_offset, 128);
        let s = array_header("[('a', '<i2'), ('b', '<f8')]", &[5]);
        let parsed = parse_array_header(&s).unwrap();
        assert_eq!(parsed.descr, "[('a', '<i2'), ('b', '<f8')]");
        assert_eq!(parsed.row_bytes(), Some(10));
        for rows in [0u64, 7, 1 << 50] {
            assert_eq!(array_header("'<f4'", &[rows, 64]).len(), 128);
        }
    }

    #[test]
    fn header_length_is_constant() {
        for rows in [0u64, 1, 999, 1 << 40, u64::MAX] {
            assert_eq!(header(rows).len(), HEADER_LEN, "rows={rows}");
        }
    }

    #[test]
    fn parses_what_it_writes() {
        let h = parse_header(&header(12345)).unwrap();
        assert_eq!(
            h,
            Header {
                layout: RowLayout::Aligned,
                rows: 12345,
                data_offset: HEADER_LEN
            }
        );
    }

    /// A format 1.0 header around the dict text `dict`.
    fn with_dict(dict: &str) -> Vec<u8> {
        let text = format!("{dict}\n");
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(text.len() as u16).to_le_bytes());
        bytes.extend_from_slice(text.as_bytes());
        bytes
    }

    #[test]
    fn reads_headers_by_meaning() {
        // As npyz 0.8 writes the reference packer's rows: '<u1' and a trailing comma in the list.
        let npyz = "{'descr': [('run_id', '<u4'), ('step_index', '<u4'), ('board', '<u8'), \
            ('board_eval', '<i4'), ('tile_65536_mask', '<u2'), ('move_dir', '<u1'), \
            ('valuation_type', '<u1'), ('ev_legal', '<u1'), ('max_rank', '<u1'), ('seed', '<u4'), \
            ('branch_evs', '<f4', (4,)), ], 'fortran_order': False, 'shape': (7,), }";
        let h = parse_header(&with_dict(npyz)).unwrap();
        assert_eq!((h.layout, h.rows), (RowLayout::LegacyPacked, 7));
        // Key order, spacing, quotes and the byte-order mark of one-byte types do not matter.
        let aligned = STEP_ROW_DESCR
            .replace("'|u1'", "'u1'")
            .replace(", ", " ,  ");
        let shuffled =
            format!("{{ \"shape\" : ( 9 , ) , \"fortran_order\": False,\"descr\":{aligned} }}");
        let h = parse_header(&with_dict(&shuffled)).unwrap();
        assert_eq!((h.layout, h.rows), (RowLayout::Aligned, 9));
        // The dict form, which np.load refuses.
        let dict_form = "{'descr': {'names': ['run_id', 'step_index', 'board', 'board_eval', \
            'tile_65536_mask', 'move_dir', 'valuation_type', 'ev_legal', 'max_rank', 'seed', \
            'branch_evs'], 'formats': ['<u4', '<u4', '<u8', '<i4', '<u2', '|u1', '|u1', '|u1', \
            '|u1', '<u4', ('<f4', (4,))], 'offsets': [0, 4, 8, 16, 20, 22, 23, 24, 25, 28, 32], \
            'itemsize': 48}, 'fortran_order': False, 'shape': (2,)}";
        let refused = parse_header(&with_dict(dict_form)).unwrap_err().to_string();
        assert!(refused.contains("dict-form descr"), "{refused}");
        // What changes the data does: byte order of wider types, a field's type, name or
        // offset, the item size, the order of the array, its rank.
        for (from, to) in [
            ("('seed', '<u4')", "('seed', '>u4')"),
            ("('seed', '<u4')", "('seed', '<i4')"),
            ("('max_rank', '|u1')", "('max_rnk', '|u1')"),
            ("('', '|V2')", "('', '|V1')"),
            ("('', '|V2')", "('', '|V6')"),
            ("(4,))]", "(3,))]"),
        ] {
            let descr = STEP_ROW_DESCR.replace(from, to);
            assert_ne!(descr, STEP_ROW_DESCR);
            let text = format!("{{'descr': {descr}, 'fortran_order': False, 'shape': (2,), }}");
            let layout = parse_header(&with_dict(&text)).unwrap().layout;
            assert!(matches!(layout, RowLayout::Other(_)), "{to}: {layout:?}");
        }
        let fortran =
            format!("{{'descr': {STEP_ROW_DESCR}, 'fortran_order': True, 'shape': (2,)}}");
        assert!(parse_header(&with_dict(&fortran)).is_err());
        let two_d =
            format!("{{'descr': {STEP_ROW_DESCR}, 'fortran_order': False, 'shape': (2, 1)}}");
        assert!(parse_header(&with_dict(&two_d)).is_err());
    }

    #[test]
    fn recognises_legacy_and_other_layouts() {
        let legacy =
            format!("{{'descr': {LEGACY_ROW_DESCR}, 'fortran_order': False, 'shape': (2,), }}\n");
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(legacy.len() as u16).to_le_bytes());
        bytes.extend_from_slice(legacy.as_bytes());
        assert_eq!(
            parse_header(&bytes).unwrap().layout,
            RowLayout::LegacyPacked
        );

        let other = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n";
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(other.len() as u16).to_le_bytes());
        bytes.extend_from_slice(other.as_bytes());
        assert_eq!(
            parse_header(&bytes).unwrap().layout,
            RowLayout::Other("'<f8'".into())
        );
    }

    /// `with_dict` in another format version (1.0 Latin-1, 2.0 Latin-1, 3.0 UTF-8).
    fn versioned(dict: &str, version: u8) -> Vec<u8> {
        let text: Vec<u8> = if version == 3 {
            format!("{dict}\n").into_bytes()
        } else {
            format!("{dict}\n").chars().map(|c| c as u8).collect()
        };
        let mut bytes = vec![0x93, b'N', b'U', b'M', b'P', b'Y', version, 0];
        if version == 1 {
            bytes.extend_from_slice(&(text.len() as u16).to_le_bytes());
        } else {
            bytes.extend_from_slice(&(text.len() as u32).to_le_bytes());
        }
        bytes.extend_from_slice(&text);
        bytes
    }

    #[test]
    fn reads_versions_and_encodings_as_numpy_does() {
        let plain = format!("{{'descr': {STEP_ROW_DESCR}, 'fortran_order': False, 'shape': (5,)}}");
        for version in [1, 2, 3] {
            assert_eq!(parse_header(&versioned(&plain, version)).unwrap().rows, 5);
        }
        let refused = parse_header(&[&b"\x93NUMPY\x01\x01"[..], &[0; 60]].concat());
        assert!(refused.unwrap_err().0.contains("format version 1.1"));
        // np.save writes a Latin-1 name in 1.0 and a name outside Latin-1 in 3.0, as here.
        for (name, version) in [("é", 1), ("ж", 3)] {
            let descr = format!("[('{name}', '<f4')]");
            let bytes = array_header(&descr, &[2]);
            assert_eq!(bytes[6], version, "{name}");
            let h = parse_array_header(&bytes).unwrap();
            assert_eq!(h.descr, descr);
            let Dtype::Struct { fields, .. } = h.dtype else {
                panic!()
            };
            assert_eq!(fields[0].name, name);
        }
        // UTF-8 bytes in a 1.0 header are Latin-1 characters, as NumPy reads them.
        let raw = with_dict("{'descr': [('ж', '<f4')], 'fortran_order': False, 'shape': (2,)}");
        assert_eq!(parse_array_header(&raw).unwrap().descr, "[('Ð¶', '<f4')]");
        // Any length up to NumPy's 10,000 characters; past it refused before it is read.
        let long = format!("{plain}{}", " ".repeat(5000));
        assert_eq!(
            parse_header(&versioned(&long, 1)).unwrap().data_offset,
            10 + long.len() + 1
        );
        let too_long = format!("{plain}{}", " ".repeat(MAX_HEADER_CHARS));
        let e = parse_header(&versioned(&too_long, 2)).unwrap_err().0;
        assert!(e.contains("limit of 10000 characters"), "{e}");
        let e = header_size(&versioned(&too_long, 2)[..12]).unwrap_err().0;
        assert!(e.contains("limit of 10000 characters"), "{e}");
    }

    #[test]
    fn refuses_keys_numpy_reads_otherwise_naming_them() {
        let key = |extra: &str| {
            let dict = format!(
                "{{'descr': {STEP_ROW_DESCR}, 'fortran_order': False, 'shape': (500,), {extra}}}"
            );
            parse_header(&with_dict(&dict)).unwrap_err().0
        };
        let e = key("'shape': (250,)");
        assert!(
            e.contains("key 'shape' is given twice, as (500,) and as (250,)"),
            "{e}"
        );
        assert!(key("'descr': '<f8'").contains("key 'descr' is given twice"));
        assert!(key("'shape': (500,)").contains("key 'shape' is given twice"));
        assert!(key("'extra': 1").contains("key 'extra' is not one of"));
        for (shape, why) in [
            ("500", "'shape': 500 is not a tuple"),
            ("[500]", "'shape': [500] is not"),
            ("(500)", "'shape': 500 is not"),
        ] {
            let dict =
                format!("{{'descr': {STEP_ROW_DESCR}, 'fortran_order': False, 'shape': {shape}}}");
            let e = parse_header(&with_dict(&dict)).unwrap_err().0;
            assert!(e.contains(why), "{shape}: {e}");
        }
        let dict = format!("{{'descr': {STEP_ROW_DESCR}, 'fortran_order': False}}");
        assert!(
            parse_header(&with_dict(&dict))
                .unwrap_err()
                .0
                .contains("no key 'shape'")
        );
        let unnamed = STEP_ROW_DESCR.replace("('', '|V2')", "('', '<u2')");
        let dict = format!("{{'descr': {unnamed}, 'fortran_order': False, 'shape': (5,)}}");
        let e = parse_header(&with_dict(&dict)).unwrap_err().0;
        assert!(
            e.starts_with("'descr': field ('', '<u2') has no name"),
            "{e}"
        );
    }
}
