//! gzip decompression of whole `.gz` files held in memory, two ways with one verdict:
//!
//! - [`Gunzipper`]: every member decoded at once into one buffer with libdeflate, the fastest
//!   sound decoder for whole buffers; [`Gunzipper::decompress_within`] gives up when the output
//!   would pass a size limit, so a worker never holds more than that;
//! - [`GzipStream`]: the same members decoded piece by piece (flate2, zlib-rs backend) into a
//!   caller's buffer, for files whose decompressed size is past that limit.
//!
//! Both are strict about what a valid file is: an empty file, a bad CRC, a truncated member or
//! bytes after the last member are errors, and both say which with the same message (their
//! diagnosis comes from the same decoder, see `describe_read_error`).

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

/// Whether [`Gunzipper::decompress_within`] could hold the whole output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Every member is decompressed into the buffer.
    Whole,
    /// The output is larger than the limit; the buffer holds an unspecified prefix of it.
    TooLarge,
}

/// The uncompressed size the gzip trailer states (ISIZE, the last 4 bytes, modulo 2^32): exact
/// for a single-member file, the last member's size otherwise. A hint, never trusted.
pub fn trailer_size(data: &[u8]) -> Option<u64> {
    (data.len() >= 18).then(|| {
        u64::from(u32::from_le_bytes(
            data[data.len() - 4..].try_into().unwrap(),
        ))
    })
}

/// The error for bytes at `pos` that do not start a gzip member.
fn not_a_member(data: &[u8], pos: usize) -> GzipError {
    if pos == 0 {
        GzipError("not a gzip file (bad magic bytes)".into())
    } else {
        GzipError(format!(
            "{} trailing bytes after the last gzip member (at byte {pos})",
            data.len() - pos
        ))
    }
}

fn starts_a_member(rest: &[u8]) -> bool {
    rest.len() >= 2 && rest[..2] == GZIP_MAGIC
}

fn empty_file() -> GzipError {
    GzipError("empty file (0 bytes), not a gzip stream".into())
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
        match self.decompress_within(data, out, usize::MAX)? {
            Fit::Whole => Ok(()),
            Fit::TooLarge => unreachable!("no output is larger than usize::MAX bytes"),
        }
    }

    /// Decompresses every member of `data` into `out` (cleared first; its capacity is reused)
    /// unless the output is more than `limit` bytes: then stops early with [`Fit::TooLarge`].
    /// Errors found before the limit is reached are reported as [`Self::decompress_all`] does.
    pub fn decompress_within(
        &mut self,
        data: &[u8],
        out: &mut Vec<u8>,
        limit: usize,
    ) -> Result<Fit, GzipError> {
        out.clear();
        if data.is_empty() {
            return Err(empty_file());
        }
        let mut pos = 0;
        while pos < data.len() {
            let rest = &data[pos..];
            if !starts_a_member(rest) {
                return Err(not_a_member(data, pos));
            }
            // The trailer's ISIZE is exact for a single-member file; grow on demand otherwise.
            // A damaged trailer cannot make us reserve more than deflate can expand to
            // (1032:1 at most).
            let most = rest.len().saturating_mul(1032).saturating_add(4096);
            let mut want = match trailer_size(data) {
                Some(size) if pos == 0 => size as usize + 1,
                _ => rest.len().saturating_mul(4),
            }
            .clamp(4096, most);
            loop {
                let room = limit - out.len();
                out.reserve(want.min(room));
                let spare = out.spare_capacity_mut();
                let offered = spare.len().min(room);
                match self.member(rest, &mut spare[..offered]) {
                    Member::Done { consumed, produced } => {
                        // SAFETY: libdeflate initialised `produced` bytes of the spare capacity.
                        unsafe { out.set_len(out.len() + produced) };
                        pos += consumed;
                        break;
                    }
                    Member::NeedsSpace if offered == room => return Ok(Fit::TooLarge),
                    Member::NeedsSpace => want = out.capacity().max(want) * 2,
                    Member::Bad => return Err(describe_bad_member(rest, pos)),
                }
            }
        }
        Ok(Fit::Whole)
    }
}

/// Streams the decompressed bytes of every member of an in-memory gzip file, a piece at a time,
/// with the verdicts and messages of [`Gunzipper::decompress_all`]: for a file too large to
/// hold decompressed. flate2 checks each member's CRC-32 and size as it ends.
pub struct GzipStream<'a> {
    data: &'a [u8],
    /// The member being read and the byte it starts at.
    member: Option<(usize, flate2::bufread::GzDecoder<&'a [u8]>)>,
    /// Where the next member starts, once the current one is done.
    next: usize,
}

impl<'a> GzipStream<'a> {
    pub fn new(data: &'a [u8]) -> Result<GzipStream<'a>, GzipError> {
        if data.is_empty() {
            return Err(empty_file());
        }
        Ok(GzipStream {
            data,
            member: None,
            next: 0,
        })
    }

    /// Fills the start of `buf` (not empty) with the next decompressed bytes and says how many;
    /// 0 once the last member is done.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, GzipError> {
        debug_assert!(!buf.is_empty());
        loop {
            let Some((start, decoder)) = &mut self.member else {
                let rest = &self.data[self.next..];
                if rest.is_empty() {
                    return Ok(0);
                }
                if !starts_a_member(rest) {
                    return Err(not_a_member(self.data, self.next));
                }
                self.member = Some((self.next, flate2::bufread::GzDecoder::new(rest)));
                continue;
            };
            match decoder.read(buf) {
                Ok(0) => {
                    let (_, decoder) = self.member.take().expect("a member is open");
                    self.next = self.data.len() - decoder.into_inner().len();
                }
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(at_member(describe_read_error(&e), *start)),
            }
        }
    }
}

/// libdeflate only says "bad data"; decode the member again with flate2 to say what was wrong.
fn describe_bad_member(member: &[u8], pos: usize) -> GzipError {
    let mut decoder = flate2::read::GzDecoder::new(member);
    let mut sink = Vec::new();
    let what = match decoder.read_to_end(&mut sink) {
        Err(e) => describe_read_error(&e),
        Ok(_) => "corrupt gzip data (CRC or length mismatch)".to_string(),
    };
    at_member(what, pos)
}

/// What flate2's gzip decoder's error means, in the user's terms.
fn describe_read_error(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        "truncated gzip member (the file ends mid-stream)".to_string()
    } else if e.to_string().contains("checksum") {
        "gzip CRC mismatch (the data is corrupt)".to_string()
    } else {
        format!("corrupt gzip data ({e})")
    }
}

/// Names the member at `pos` unless it is the first.
fn at_member(what: String, pos: usize) -> GzipError {
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

    /// Everything a [`GzipStream`] yields, read through a small buffer.
    fn streamed(data: &[u8]) -> Result<Vec<u8>, String> {
        let mut stream = GzipStream::new(data).map_err(|e| e.0)?;
        let mut out = Vec::new();
        let mut buf = [0u8; 1000];
        loop {
            match stream.read(&mut buf).map_err(|e| e.0)? {
                0 => return Ok(out),
                n => out.extend_from_slice(&buf[..n]),
            }
        }
    }

    fn whole(data: &[u8]) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        Gunzipper::new()
            .decompress_all(data, &mut out)
            .map(|()| out)
            .map_err(|e| e.0)
    }

    #[test]
    fn streaming_and_whole_file_agree_on_good_and_bad_files() {
        let big = b"a line of a run that is long enough to need several reads\n".repeat(500);
        let one = gzip(&big);
        let mut two = gzip(b"first member\n");
        two.extend(gzip(&big));
        two.extend(gzip(b"")); // an empty member counts too
        let mut bad_crc = one.clone();
        let n = bad_crc.len();
        bad_crc[n - 8] ^= 0xff;
        let mut second_bad = gzip(b"ok\n");
        second_bad.extend(&bad_crc);
        let mut trailing = one.clone();
        trailing.extend_from_slice(b"garbage");
        let mut second_truncated = gzip(b"ok\n");
        second_truncated.extend(&one[..one.len() - 5]);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("one member", one.clone()),
            ("three members", two),
            ("empty", Vec::new()),
            ("not gzip", b"{\"seed\":1}\n".to_vec()),
            ("one byte", vec![0x1f]),
            ("truncated", one[..one.len() / 2].to_vec()),
            ("trailer cut", one[..one.len() - 3].to_vec()),
            ("bad crc", bad_crc),
            ("bad crc in the second member", second_bad),
            ("truncated second member", second_truncated),
            ("trailing garbage", trailing),
        ];
        for (what, data) in cases {
            let (w, s) = (whole(&data), streamed(&data));
            assert_eq!(w, s, "{what}");
            if what.contains("second member") {
                assert!(w.unwrap_err().contains("in the member at byte"), "{what}");
            }
        }
        assert_eq!(streamed(&one).unwrap(), big);
    }

    #[test]
    fn decompress_within_stops_at_the_limit_and_keeps_errors() {
        let text = b"0123456789\n".repeat(1000); // 11 000 bytes
        let mut gz = Gunzipper::new();
        let mut out = Vec::new();
        let file = gzip(&text);
        assert_eq!(
            gz.decompress_within(&file, &mut out, 11_000),
            Ok(Fit::Whole)
        );
        assert_eq!(out, text);
        assert_eq!(
            gz.decompress_within(&file, &mut out, 10_999),
            Ok(Fit::TooLarge)
        );
        // Members that fit one by one but not together.
        let mut members = gzip(&text[..6000]);
        members.extend(gzip(&text[6000..]));
        assert_eq!(
            gz.decompress_within(&members, &mut out, 8000),
            Ok(Fit::TooLarge)
        );
        assert_eq!(
            gz.decompress_within(&members, &mut out, 11_000),
            Ok(Fit::Whole)
        );
        assert_eq!(out, text);
        let err = gz
            .decompress_within(&file[..100], &mut out, 11_000)
            .unwrap_err();
        assert!(
            err.0.contains("truncated") || err.0.contains("corrupt"),
            "{err}"
        );
        assert_eq!(trailer_size(&file), Some(11_000));
        assert_eq!(trailer_size(b"short"), None);
    }
}
