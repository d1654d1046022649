//! The two passes over the rows. Phase 1 (scatter) sends every row, with its row of each
//! companion family, to a bucket file chosen at random by a counter-based hash of the seed and
//! the row, so the choice depends on nothing else; phase 2 (gather) loads one bucket at a time,
//! shuffles it in memory and appends it to the output shards, saving the progress after each
//! bucket so that a resume continues from there.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Context, Result, fail};

use super::plan::{Plan, record_bytes};
use super::resume::Progress;
use crate::format::row::ROW_BYTES;
use crate::pack::families::Family;
use crate::pack::shard_writer::ShardWriter;
use crate::pack::shards::Shard;
use crate::progress::{Bar, Observer};
use crate::rng::{Xoshiro, below_fast, splitmix_at};

/// Rows per read while scattering (≈ 4 MiB).
const READ_ROWS: usize = 87_381;

fn bucket_path(work: &Path, b: u64) -> PathBuf {
    work.join(format!("bucket-{b:05}.bin"))
}

/// One bucket file being filled: rows gather in a buffer, written out when it is full.
struct BucketFile {
    file: File,
    path: PathBuf,
    buf: Vec<u8>,
    rows: u64,
    crc: u32,
}

impl BucketFile {
    fn flush(&mut self) -> Result<()> {
        use std::io::Write;
        self.file
            .write_all(&self.buf)
            .with_context(|| format!("writing {}", self.path.display()))?;
        self.crc = crate::crc::append(self.crc, &self.buf);
        self.buf.clear();
        Ok(())
    }
}

/// Phase 1: every row goes to bucket `below(splitmix(seed, global row), buckets)`, appended in
/// row order, together with its row of each companion family. Returns the rows and the
/// CRC-32C of each bucket file.
pub(super) fn scatter(
    shards: &[Shard],
    families: &[Family],
    plan: &Plan,
    work: &Path,
    observer: &Observer,
) -> Result<(Vec<u64>, Vec<u32>)> {
    let k = plan.buckets as usize;
    let record = record_bytes(families);
    let buffer_bytes =
        ((plan.memory / 4 / k as u64) / record as u64).clamp(16, 8192) as usize * record;
    let mut buckets: Vec<BucketFile> = (0..plan.buckets)
        .map(|b| {
            let path = bucket_path(work, b);
            let file =
                File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            Ok(BucketFile {
                file,
                path,
                buf: Vec::with_capacity(buffer_bytes),
                rows: 0,
                crc: 0,
            })
        })
        .collect::<crate::Result<_>>()?;
    let key = splitmix_at(plan.seed, u64::MAX);
    let bar = Bar::rows(observer, "shuffle 1/2 scatter", plan.input_rows);
    let read_rows = (READ_ROWS * ROW_BYTES / record).max(1);
    let mut buf = vec![0u8; read_rows * ROW_BYTES];
    let mut companion_bufs: Vec<Vec<u8>> = vec![Vec::new(); families.len()];
    let mut global = 0u64;
    for (si, shard) in shards.iter().enumerate() {
        let file = shard.open()?;
        let companion_files = families
            .iter()
            .map(|f| f.open(si))
            .collect::<crate::Result<Vec<_>>>()?;
        let mut done = 0u64;
        while done < shard.header.rows {
            let n = (shard.header.rows - done).min(read_rows as u64) as usize;
            // A legacy shard's rows come out upgraded (48 bytes, ev_legal from the board).
            file.read_upgraded_into(done, n as u64, &mut buf)?;
            let chunk = &buf[..];
            for (cf, cbuf) in companion_files.iter().zip(&mut companion_bufs) {
                cf.read_rows(done, n as u64, cbuf)?;
            }
            for (i, row) in chunk.chunks_exact(ROW_BYTES).enumerate() {
                let bucket =
                    &mut buckets[below_fast(splitmix_at(key, global), plan.buckets) as usize];
                bucket.buf.extend_from_slice(row);
                for (f, cbuf) in families.iter().zip(&companion_bufs) {
                    bucket
                        .buf
                        .extend_from_slice(&cbuf[i * f.row_bytes..(i + 1) * f.row_bytes]);
                }
                bucket.rows += 1;
                if bucket.buf.len() >= buffer_bytes {
                    bucket.flush()?;
                }
                global += 1;
            }
            done += n as u64;
            bar.inc(n as u64);
        }
    }
    for bucket in &mut buckets {
        bucket.flush()?;
    }
    bar.finish_and_clear();
    Ok((
        buckets.iter().map(|b| b.rows).collect(),
        buckets.iter().map(|b| b.crc).collect(),
    ))
}

/// The output's writers after phase 2: every row written, the files not yet closed.
pub(super) struct Gathered {
    pub rows: u64,
    pub steps: ShardWriter,
    /// One per companion family, in the input's order.
    pub families: Vec<ShardWriter>,
}

/// Phase 2: buckets in order, each shuffled in memory and appended to the output (the steps
/// rows, and each companion row with its steps row); progress is saved after every bucket.
pub(super) fn gather(
    plan: &Plan,
    families: &[Family],
    progress: &mut Progress,
    work: &Path,
    staging: &Path,
    observer: &Observer,
) -> Result<Gathered> {
    let bucket_rows = progress.bucket_rows.clone().expect("phase 1 is done");
    let resuming = progress.buckets_done > 0;
    let mut writer = match &progress.writer {
        Some(state) if resuming => ShardWriter::resume(staging, plan.shard_rows, state)?,
        _ => ShardWriter::new(staging, plan.shard_rows),
    };
    writer.expect_rows(plan.input_rows);
    let mut companion_writers = families
        .iter()
        .enumerate()
        .map(|(k, f)| {
            let mut w = match progress.companion_writers.get(k) {
                Some(state) if resuming => {
                    ShardWriter::resume_with_layout(staging, plan.shard_rows, f.layout(), state)?
                }
                _ => ShardWriter::with_layout(staging, plan.shard_rows, f.layout()),
            };
            w.expect_rows(plan.input_rows);
            Ok(w)
        })
        .collect::<Result<Vec<_>>>()?;
    let record = record_bytes(families);
    let bar = Bar::rows(observer, "shuffle 2/2 buckets", plan.input_rows);
    bar.inc(bucket_rows[..progress.buckets_done as usize].iter().sum());
    let mut buf: Vec<u8> = Vec::new();
    let mut order: Vec<u32> = Vec::new();
    let mut out: Vec<u8> = Vec::new();
    for b in progress.buckets_done..plan.buckets {
        let n = bucket_rows[b as usize] as usize;
        buf.clear();
        buf.resize(n * record, 0);
        let path = bucket_path(work, b);
        File::open(&path)
            .and_then(|f| f.read_exact_at(&mut buf, 0))
            .with_context(|| format!("reading {}", path.display()))?;
        if crate::crc::crc32c(&buf) != progress.bucket_crcs[b as usize] {
            fail!(
                Corrupt,
                "{} is damaged (CRC mismatch; was the machine restarted?); run again without resuming",
                path.display()
            );
        }
        let mut rng = Xoshiro::new(splitmix_at(plan.seed, b));
        if families.is_empty() {
            let (rows, rest) = buf.as_chunks_mut::<ROW_BYTES>();
            debug_assert!(rest.is_empty());
            rng.shuffle(rows);
            writer.write_rows(&buf)?;
        } else {
            // The same swaps on the record numbers give the same permutation of the rows.
            order.clear();
            order.extend(0..n as u32);
            rng.shuffle(&mut order);
            let mut at = 0;
            for (k, size) in std::iter::once(ROW_BYTES)
                .chain(families.iter().map(|f| f.row_bytes))
                .enumerate()
            {
                out.clear();
                for &i in &order {
                    let start = i as usize * record + at;
                    out.extend_from_slice(&buf[start..start + size]);
                }
                match k {
                    0 => writer.write_rows(&out)?,
                    _ => companion_writers[k - 1].write_rows(&out)?,
                }
                at += size;
            }
        }
        progress.buckets_done = b + 1;
        progress.writer = Some(writer.snapshot()?);
        progress.companion_writers = companion_writers
            .iter_mut()
            .map(ShardWriter::snapshot)
            .collect::<crate::Result<_>>()?;
        progress.save(work)?;
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    Ok(Gathered {
        rows: writer.total_rows(),
        steps: writer,
        families: companion_writers,
    })
}
