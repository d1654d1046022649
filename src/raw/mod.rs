//! The input side: raw Macroxue drops (sidecars + JSONL rows, gzipped or plain). Knows JSON
//! and gzip, nothing about shards.

pub mod discover;
pub mod gzip;
pub mod row;
pub mod row_fast;
pub mod row_types;
#[cfg(target_arch = "x86_64")]
pub mod row_x86;
pub mod run;
pub mod sidecar;

/// The UTF-8 byte-order mark some editors put at the start of a text file.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Says so when a file's text starts with a UTF-8 byte-order mark (the logger never writes
/// one, and a JSON line or object must start with '{').
pub fn bom_problem(text: &[u8]) -> Option<String> {
    text.starts_with(BOM).then(|| {
        "starts with a UTF-8 byte-order mark (bytes EF BB BF), which the logger never writes; save the file without it".to_string()
    })
}
