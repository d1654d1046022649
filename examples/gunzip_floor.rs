//! The "decompression floor" for the `pack` benchmark.
//!
//! ```text
//! cargo run --release --example gunzip_floor -- DIR [--threads 2] [--engine zlib-rs|libdeflate]
//! ```
//!
//! Finds every `*.jsonl.gz` under DIR (recursively, following symlinks, without looping), then
//! with exactly N threads pulling files from a shared index, decompresses each file and counts
//! newline bytes. No JSON parsing, no output: `pack` cannot read its input faster than this, so
//! `pack rows/s ÷ floor rows/s` says how much of the ceiling `pack` reaches. Two engines, two
//! floors (`bench/run.sh` reports both):
//!
//! - `zlib-rs` (default): stream-decompresses with flate2's `MultiGzDecoder` (zlib-rs backend,
//!   every gzip member) through a 256 KiB buffer;
//! - `libdeflate`: reads the whole file, decompresses it member by member with libdeflate into
//!   one buffer sized from the gzip trailer's ISIZE (CRC-32 and ISIZE checked by libdeflate),
//!   then counts newlines. The faster of the two, and the floor of issue 15.
//!
//! Prints one JSON line:
//! `{"files":..,"rows":..,"compressed_bytes":..,"seconds":..,"rows_per_s":..,"compressed_mb_per_s":..,
//!   "decompressed_bytes":..,"decompressed_mb_per_s":..,"threads":..,"engine":..,"walk_seconds":..}`
//! (MB = 10^6 bytes; `seconds` covers decompression only, `walk_seconds` the directory walk.)

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use flate2::read::MultiGzDecoder;

const BUF: usize = 256 * 1024;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn walk(dir: &Path, seen: &mut HashSet<PathBuf>, out: &mut Vec<(PathBuf, u64)>) -> Result<()> {
    // Canonical directories already visited: symlinked folders are followed once, loops are cut.
    let canonical = fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !seen.insert(canonical) {
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    entries.sort();
    for path in entries {
        // `metadata` follows symlinks; a dangling link is skipped.
        let Ok(meta) = fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            walk(&path, seen, out)?;
        } else if meta.is_file()
            && path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".jsonl.gz"))
        {
            out.push((path, meta.len()));
        }
    }
    Ok(())
}

/// Newline bytes in `buf`; counted per chunk into a narrow accumulator so it vectorises.
fn count_newlines(buf: &[u8]) -> u64 {
    let mut total = 0u64;
    for chunk in buf.chunks(255 * 64) {
        let mut lanes = [0u8; 64];
        let mut blocks = chunk.chunks_exact(64);
        for block in &mut blocks {
            for (lane, &b) in lanes.iter_mut().zip(block) {
                *lane += (b == b'\n') as u8;
            }
        }
        total += lanes.iter().map(|&n| n as u64).sum::<u64>();
        total += blocks.remainder().iter().filter(|&&b| b == b'\n').count() as u64;
    }
    total
}

struct FileCount {
    rows: u64,
    decompressed: u64,
}

fn gunzip_count(path: &Path, out: &mut [u8]) -> Result<FileCount> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // `read::MultiGzDecoder` reads the file through its own 32 KiB buffer; a 256 KiB input
    // buffer (`bufread::MultiGzDecoder` over `BufReader::with_capacity`) measured the same.
    let mut dec = MultiGzDecoder::new(file);
    let mut rows = 0;
    let mut decompressed = 0;
    loop {
        let n = match dec.read(out) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("{}: {e}", path.display()).into()),
        };
        rows += count_newlines(&out[..n]);
        decompressed += n as u64;
    }
    Ok(FileCount { rows, decompressed })
}

/// The libdeflate floor (`--engine libdeflate`): the whole file in memory, decompressed member
/// by member with libdeflate into one growing buffer.
struct Libdeflate(*mut libdeflate_sys::libdeflate_decompressor);

impl Libdeflate {
    fn new() -> Libdeflate {
        // SAFETY: plain allocation; checked for null below.
        let d = unsafe { libdeflate_sys::libdeflate_alloc_decompressor() };
        assert!(!d.is_null(), "libdeflate_alloc_decompressor failed");
        Libdeflate(d)
    }

    fn gunzip_count(&self, path: &Path, out: &mut Vec<u8>) -> Result<FileCount> {
        use libdeflate_sys::{
            libdeflate_result_LIBDEFLATE_INSUFFICIENT_SPACE as INSUFFICIENT,
            libdeflate_result_LIBDEFLATE_SUCCESS as SUCCESS,
        };
        let input = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if input.is_empty() {
            return Err(format!("{}: empty file", path.display()).into());
        }
        // The last member's ISIZE is a good first guess of the output size.
        let guess = input.len().checked_sub(4).map_or(0, |at| {
            u32::from_le_bytes(input[at..].try_into().unwrap()) as usize
        });
        if out.len() < guess + 1 {
            out.resize(guess + 1, 0);
        }
        let (mut consumed, mut produced) = (0usize, 0usize);
        while consumed < input.len() {
            let (mut used_in, mut used_out) = (0usize, 0usize);
            // SAFETY: the pointers and lengths describe live, non-overlapping buffers.
            let rc = unsafe {
                libdeflate_sys::libdeflate_gzip_decompress_ex(
                    self.0,
                    input[consumed..].as_ptr().cast(),
                    input.len() - consumed,
                    out[produced..].as_mut_ptr().cast(),
                    out.len() - produced,
                    &mut used_in,
                    &mut used_out,
                )
            };
            match rc {
                SUCCESS => {
                    consumed += used_in;
                    produced += used_out;
                }
                INSUFFICIENT => out.resize(out.len() * 2, 0),
                _ => return Err(format!("{}: libdeflate error {rc}", path.display()).into()),
            }
        }
        Ok(FileCount {
            rows: count_newlines(&out[..produced]),
            decompressed: produced as u64,
        })
    }
}

impl Drop for Libdeflate {
    fn drop(&mut self) {
        // SAFETY: allocated by libdeflate_alloc_decompressor, freed once.
        unsafe { libdeflate_sys::libdeflate_free_decompressor(self.0) }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Engine {
    ZlibRs,
    Libdeflate,
}

fn usage() -> ! {
    eprintln!(
        "usage: gunzip_floor DIR [--threads N] [--engine zlib-rs|libdeflate]\n\
         N defaults to 2; zlib-rs (flate2 MultiGzDecoder, streaming) is the default engine,\n\
         libdeflate (whole file, member by member) the faster floor"
    );
    std::process::exit(2);
}

fn main() -> Result<()> {
    let mut dir = None;
    let mut threads = 2usize;
    let mut engine = Engine::ZlibRs;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--threads" => {
                threads = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n: &usize| n > 0)
                    .unwrap_or_else(|| usage())
            }
            "--engine" => {
                engine = match args.next().as_deref() {
                    Some("zlib-rs") => Engine::ZlibRs,
                    Some("libdeflate") => Engine::Libdeflate,
                    _ => usage(),
                }
            }
            "-h" | "--help" => usage(),
            _ if dir.is_none() && !a.starts_with("--") => dir = Some(PathBuf::from(a)),
            _ => usage(),
        }
    }
    let dir = dir.unwrap_or_else(|| usage());

    let walk_start = Instant::now();
    let mut files = Vec::new();
    walk(&dir, &mut HashSet::new(), &mut files)?;
    // Largest first, so the last files to finish are small ones (better balance across threads).
    files.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let walk_seconds = walk_start.elapsed().as_secs_f64();
    if files.is_empty() {
        return Err(format!("no *.jsonl.gz under {}", dir.display()).into());
    }

    let next = AtomicUsize::new(0);
    let rows = AtomicUsize::new(0);
    let decompressed = AtomicUsize::new(0);
    let error: Mutex<Option<String>> = Mutex::new(None);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut out = vec![0u8; BUF];
                let libdeflate = (engine == Engine::Libdeflate).then(Libdeflate::new);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= files.len() {
                        break;
                    }
                    let counted = match &libdeflate {
                        None => gunzip_count(&files[i].0, &mut out),
                        Some(d) => d.gunzip_count(&files[i].0, &mut out),
                    };
                    match counted {
                        Ok(c) => {
                            rows.fetch_add(c.rows as usize, Ordering::Relaxed);
                            decompressed.fetch_add(c.decompressed as usize, Ordering::Relaxed);
                        }
                        Err(e) => {
                            error.lock().unwrap().get_or_insert(e.to_string());
                            // Drain the index so the other threads stop too.
                            next.store(files.len(), Ordering::Relaxed);
                            break;
                        }
                    }
                }
            });
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    if let Some(e) = error.into_inner().unwrap() {
        return Err(e.into());
    }

    let rows = rows.into_inner() as u64;
    let decompressed = decompressed.into_inner() as u64;
    let compressed: u64 = files.iter().map(|f| f.1).sum();
    println!(
        "{{\"files\":{},\"rows\":{rows},\"compressed_bytes\":{compressed},\"seconds\":{seconds:.3},\"rows_per_s\":{:.0},\"compressed_mb_per_s\":{:.2},\"decompressed_bytes\":{decompressed},\"decompressed_mb_per_s\":{:.2},\"threads\":{threads},\"engine\":\"{}\",\"walk_seconds\":{walk_seconds:.3}}}",
        files.len(),
        rows as f64 / seconds,
        compressed as f64 / 1e6 / seconds,
        decompressed as f64 / 1e6 / seconds,
        match engine {
            Engine::ZlibRs => "zlib-rs",
            Engine::Libdeflate => "libdeflate",
        },
    );
    Ok(())
}
