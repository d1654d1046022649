//! Whole-file gzip decompression: every member of a (possibly multi-member) `.gz` buffer,
//! decoded with libdeflate, the fastest sound decoder for whole buffers. Strict about what a
//! valid file is: an empty file, a bad CRC, a truncated member or bytes after the last member
//! are errors, with a message that says which.

use std::io::Read;

use libdeflate_sys as ffi;

/// What was wrong with a gzip file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GzipError(pub String);

impl std::fmt::Display for GzipError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A reusable libdeflate decompressor (one per worker thread).
pub struct Gunzipper {
    raw: *mut ffi::libdeflate_decompressor,
}

// SAFETY: a libdeflate decompressor holds no thread-affine state; it only must not be used
// from two threads at once, which `&mut self` on every use guarantees.
unsafe impl Send for Gunzipper {}

impl Default for Gunzipper {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Gunzipper {
    fn drop(&mut self) {
        // SAFETY: `raw` came from libdeflate_alloc_decompressor and is freed once.
        unsafe { ffi::libdeflate_free_decompressor(self.raw) }
    }
}

enum Member {
    Done { consumed: usize, produced: usize },
    NeedsSpace,
    Bad,
}

impl Gunzipper {
    pub fn new() -> Gunzipper {
        // SAFETY: plain allocation; a null return is checked.
        let raw = unsafe { ffi::libdeflate_alloc_decompressor() };
        assert!(
            !raw.is_null(),
            "libdeflate could not allocate a decompressor"
        );
        Gunzipper { raw }
    }

    fn member(&mut self, input: &[u8], out: &mut [std::mem::MaybeUninit<u8>]) -> Member {
        let mut consumed = 0usize;
        let mut produced = 0usize;
        // SAFETY: the pointers and lengths describe live buffers; libdeflate writes at most
        // `out.len()` bytes and reports how many it consumed and produced.
        let rc = unsafe {
            ffi::libdeflate_gzip_decompress_ex(
                self.raw,
                input.as_ptr().cast(),
                input.len(),
                out.as_mut_ptr().cast(),
                out.len(),
                &mut consumed,
                &mut produced,
            )
        };
        match rc {
            ffi::libdeflate_result_LIBDEFLATE_SUCCESS => Member::Done { consumed, produced },
            ffi::libdeflate_result_LIBDEFLATE_INSUFFICIENT_SPACE => Member::NeedsSpace,
            _ => Member::Bad,
        }
    }

    /// Decompresses every member of `data` into `out` (cleared first; its capacity is reused).
    pub fn decompress_all(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), GzipError> {
        out.clear();
        if data.is_empty() {
            return Err(GzipError("empty file (0 bytes), not a gzip stream".into()));
        }
        let mut pos = 0;
        while pos < data.len() {
            let rest = &data[pos..];
            if rest.len() < 2 || rest[..2] != GZIP_MAGIC {
                return Err(if pos == 0 {
                    GzipError("not a gzip file (bad magic bytes)".into())
                } else {
                    GzipError(format!(
                        "{} trailing bytes after the last gzip member (at byte {pos})",
                        rest.len()
                    ))
                });
            }
            // The trailer's ISIZE is exact for a single-member file; grow on demand otherwise.
            // A damaged trailer cannot make us reserve more than deflate can expand to
            // (1032:1 at most).
            let most = rest.len().saturating_mul(1032).saturating_add(4096);
            let mut want = if pos == 0 && data.len() >= 18 {
                u32::from_le_bytes(data[data.len() - 4..].try_into().unwrap()) as usize + 1
            } else {
                rest.len().saturating_mul(4)
            }
            .clamp(4096, most);
            loop {
                out.reserve(want);
                match self.member(rest, out.spare_capacity_mut()) {
                    Member::Done { consumed, produced } => {
                        // SAFETY: libdeflate initialised `produced` bytes of the spare capacity.
                        unsafe { out.set_len(out.len() + produced) };
                        pos += consumed;
                        break;
                    }
                    Member::NeedsSpace => want = out.capacity().max(want) * 2,
                    Member::Bad => return Err(describe_bad_member(rest, pos)),
                }
            }
        }
        Ok(())
    }
}

/// libdeflate only says "bad data"; decode the member again with flate2 to say what was wrong.
fn describe_bad_member(member: &[u8], pos: usize) -> GzipError {
    let mut decoder = flate2::read::GzDecoder::new(member);
    let mut sink = Vec::new();
    let what = match decoder.read_to_end(&mut sink) {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            "truncated gzip member (the file ends mid-stream)".to_string()
        }
        Err(e) if e.to_string().contains("checksum") => {
            "gzip CRC mismatch (the data is corrupt)".to_string()
        }
        Err(e) => format!("corrupt gzip data ({e})"),
        Ok(_) => "corrupt gzip data (CRC or length mismatch)".to_string(),
    };
    if pos == 0 {
        GzipError(what)
    } else {
        GzipError(format!("{what} in the member at byte {pos}"))
    }
}

/// Reads a whole file and decompresses it when its name ends in `.gz`.
pub fn read_maybe_gzipped(
    path: &std::path::Path,
    gz: &mut Gunzipper,
) -> Result<Vec<u8>, GzipError> {
    let bytes = std::fs::read(path).map_err(|e| GzipError(format!("cannot read: {e}")))?;
    if path.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::new();
        gz.decompress_all(&bytes, &mut out)?;
        Ok(out)
    } else {
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn reads_every_member() {
        let mut file = gzip(b"first\n");
        file.extend(gzip(&b"second line that is longer\n".repeat(1000)));
        let mut out = Vec::new();
        Gunzipper::new().decompress_all(&file, &mut out).unwrap();
        assert_eq!(out.len(), 6 + 27 * 1000);
        assert!(out.starts_with(b"first\nsecond"));
    }

    #[test]
    fn names_what_is_wrong() {
        let mut gz = Gunzipper::new();
        let mut out = Vec::new();
        let good = gzip(&b"hello world\n".repeat(100));
        let err = |d: &[u8], gz: &mut Gunzipper, out: &mut Vec<u8>| {
            gz.decompress_all(d, out).unwrap_err().0
        };

        assert!(err(b"", &mut gz, &mut out).contains("empty"));
        assert!(err(&good[..good.len() / 2], &mut gz, &mut out).contains("truncated"));
        let mut bad_crc = good.clone();
        let n = bad_crc.len();
        bad_crc[n - 8] ^= 0xff;
        assert!(err(&bad_crc, &mut gz, &mut out).contains("CRC"));
        let mut trailing = good.clone();
        trailing.extend_from_slice(b"garbage");
        assert!(err(&trailing, &mut gz, &mut out).contains("trailing"));
    }
}
