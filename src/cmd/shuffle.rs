//! `shuffle`: a pack → a pack whose rows are a uniformly random permutation, in bounded memory.
//! The story: validate the input, plan the buckets from the pack size and `--memory`, check the
//! disk space, phase 1 scatters every row to a bucket file chosen at random (counter-based, so
//! the choice depends only on the seed and the row), phase 2 loads one bucket at a time,
//! shuffles it in memory and appends it to the output shards, recording progress after each
//! bucket so `--resume` can continue; then metadata is carried over, the dispersion of runs in
//! the output is measured, and the pack is published. docs/shuffle.md says why this gives an
//! exactly uniform permutation.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::UsageError;
use crate::cmd::validate;
use crate::format::metadata::{self, MetadataWriter, PackFacts, RunRecord};
use crate::format::row::ROW_BYTES;
use crate::interrupt::{self, OnInterrupt};
use crate::pack::families::{self, Family};
use crate::pack::fingerprints;
use crate::pack::publish::{OutputDir, write_valuations};
use crate::pack::shard_writer::{ShardWriter, WriterState};
use crate::pack::shards::{self, RunSlots, Shard};
use crate::progress::{self, thousands};
use crate::rng::{Xoshiro, below_fast, splitmix_at};

/// Rows per read while scattering (≈ 4 MiB).
const READ_ROWS: usize = 87_381;
/// Largest bucket aimed for: small buckets shuffle inside the CPU caches.
const TARGET_BUCKET_BYTES: u64 = 4 << 20;
const MAX_BUCKETS: u64 = 100_000;
/// Rows per dispersion window.
const WINDOW: usize = 4096;
const PROGRESS_FILE: &str = "progress.json";
const WORK_DIR: &str = crate::pack::publish::SHUFFLE_WORK;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer shuffle packs/d6 --output packs/d6-shuffled --seed 7
  dataset-packer shuffle big --output big-shuffled --memory 4GiB --temp /scratch --shard-rows 10000000
  dataset-packer shuffle big --output big-shuffled --memory 4GiB --temp /scratch --resume

The pack is positional, like every command's; the older spelling --input PACK still works.")]
pub struct ShuffleArgs {
    /// The pack to shuffle.
    #[arg(
        value_name = "PACK",
        required_unless_present = "input_flag",
        conflicts_with = "input_flag"
    )]
    pub pack: Option<PathBuf>,
    /// The pack to shuffle (an alias: `shuffle PACK` is the same).
    #[arg(long = "input", id = "input_flag", value_name = "PACK")]
    pub input_flag: Option<PathBuf>,
    /// Folder for the shuffled pack.
    #[arg(long, value_name = "PACK_DIR")]
    pub output: PathBuf,
    /// Random seed: the same seed gives the same bytes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Rows per output shard, e.g. 1M (k, M, G = 10^3, 10^6, 10^9) [default: the input's].
    #[arg(long, value_name = "N", value_parser = crate::cli::parse_rows)]
    pub shard_rows: Option<u64>,
    /// Memory for one bucket and the write buffers (e.g. 512MiB, 4GiB).
    #[arg(long, default_value = "1GiB", value_parser = crate::cli::parse_size)]
    pub memory: u64,
    /// Folder for the bucket files (≈ the pack's size) [default: the output folder].
    #[arg(long, value_name = "DIR")]
    pub temp: Option<PathBuf>,
    /// Threads for validating the input [default: all cores]; the result never depends on it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: Option<u64>,
    /// Replace a pack already in the output folder.
    #[arg(long)]
    pub overwrite: bool,
    /// Continue an interrupted shuffle (same options) from its last completed bucket.
    #[arg(long)]
    pub resume: bool,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
    /// Print the summary and quality report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

impl ShuffleArgs {
    /// The pack to shuffle, however it was given.
    pub fn input(&self) -> &Path {
        self.pack
            .as_deref()
            .or(self.input_flag.as_deref())
            .expect("clap requires PACK or --input")
    }
}

/// What a shuffle is: the same plan (and input) is required to resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Plan {
    input: String,
    input_rows: u64,
    input_fingerprint: Vec<(String, u64, u32)>,
    seed: u64,
    buckets: u64,
    shard_rows: Option<u64>,
    /// The companion families carried (each bucket record holds a steps row and one row of
    /// each, in this order).
    #[serde(default)]
    companions: Vec<String>,
    /// --memory, which decides the buckets.
    #[serde(default)]
    memory: u64,
}

impl Plan {
    /// How an interrupted shuffle's plan differs from this one, in the user's terms.
    fn differences(&self, old: &Plan) -> Vec<String> {
        let mut out = Vec::new();
        if self.input != old.input {
            out.push(format!("--input was {}", old.input));
        } else if self.input_rows != old.input_rows
            || self.input_fingerprint != old.input_fingerprint
        {
            out.push("the input pack's files changed since".into());
        }
        if self.seed != old.seed {
            out.push(format!("--seed was {}", old.seed));
        }
        if self.memory != old.memory {
            out.push(format!("--memory was {}", mib(old.memory)));
        } else if self.buckets != old.buckets {
            out.push(format!("it used {} buckets", old.buckets));
        }
        if self.shard_rows != old.shard_rows {
            out.push(format!(
                "--shard-rows was {}",
                old.shard_rows
                    .map_or("none (one steps.npy)".into(), |n| n.to_string())
            ));
        }
        if self.companions != old.companions {
            out.push(format!(
                "its companion arrays were [{}]",
                old.companions.join(", ")
            ));
        }
        out
    }
}

/// Progress recorded in the work folder after each step.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Progress {
    plan: Plan,
    /// Rows and CRC-32C of each bucket file, once phase 1 is complete.
    bucket_rows: Option<Vec<u64>>,
    bucket_crcs: Vec<u32>,
    buckets_done: u64,
    writer: Option<WriterState>,
    /// The companion writers' states, in plan order.
    #[serde(default)]
    companion_writers: Vec<WriterState>,
}

impl Progress {
    /// Replaces progress.json atomically. Not fsynced (nor are the files it describes): after a
    /// machine crash a resume verifies bucket files and output by their recorded CRCs.
    fn save(&self, work: &Path) -> Result<()> {
        let tmp = work.join("progress.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)?;
        std::fs::rename(&tmp, work.join(PROGRESS_FILE))?;
        Ok(())
    }

    fn load(work: &Path) -> Option<Progress> {
        serde_json::from_slice(&std::fs::read(work.join(PROGRESS_FILE)).ok()?).ok()
    }
}

/// How evenly runs are spread over the output (the seed note's goal: no shard with more than
/// 2% of its rows from one run).
#[derive(Debug, Clone, Default, Serialize)]
struct Quality {
    /// Per output shard: the largest share of its rows that comes from a single run.
    shard_max_run_share: Vec<f64>,
    /// Over windows of 4096 consecutive rows: mean and max of the largest count from one run.
    window_mean_max_run_rows: f64,
    window_max_run_rows: u64,
    windows: u64,
}

pub fn run(args: &ShuffleArgs) -> Result<()> {
    let started = Instant::now();
    if let Some(temp) = &args.temp
        && !temp.is_dir()
    {
        return Err(UsageError(format!(
            "--temp {}: {}; give an existing folder for the bucket files",
            temp.display(),
            if temp.exists() {
                "not a folder"
            } else {
                "no such folder"
            }
        ))
        .into());
    }
    let options = validate::Options {
        deep: false,
        workers: args
            .workers
            .map_or_else(crate::default_workers, |w| w as usize),
        quiet: args.quiet,
        legacy_ok: true,
        scan_rows: true,
    };
    shards::check_is_pack(args.input())?;
    let report = validate::check(args.input(), &options)?;
    if !report.valid() {
        bail!(
            "input {} is not a valid pack; nothing was written:\n{}",
            args.input().display(),
            report.failures()
        );
    }
    let shards = shards::open_shards(args.input(), true)?;
    let families = families::scan(args.input(), &shards)?.families;
    let input_conn = metadata::open_read_only(&args.input().join(metadata::FILE_NAME))?;
    let plan = make_plan(args, &shards, &families, &input_conn)?;

    let mut out = OutputDir::open_with(&args.output, args.overwrite, args.resume)?;
    out.keep_staging_on_failure();
    let work = args
        .temp
        .clone()
        .unwrap_or_else(|| args.output.clone())
        .join(WORK_DIR);
    let mut progress = start_or_resume(&work, &plan, args.resume)?;
    let _resumable = interrupt::register(
        &work,
        OnInterrupt::Keep(
            "the shuffle's bucket files: `shuffle --resume` with the same options continues, a shuffle without --resume removes them".into(),
        ),
    );
    check_space(&work, out.path(), &plan, &families, &progress)?;

    if progress.buckets_done > 0 && !out.has_staging() {
        // The interrupted run was killed after its publish began: opening the output finished
        // that publish, which took the staged shards this progress continues, and the buckets
        // gathered into them are gone. Start over; the same plan publishes the same bytes.
        log::warn!(
            "--resume: the interrupted shuffle's output was already being published; shuffling again from the start"
        );
        progress.bucket_rows = None;
        progress.save(&work)?;
    }
    if progress.bucket_rows.is_none() {
        let (rows, crcs) = scatter(&shards, &families, &plan, &work, args)?;
        progress.bucket_rows = Some(rows);
        progress.bucket_crcs = crcs;
        progress.buckets_done = 0;
        progress.writer = None;
        progress.companion_writers.clear();
        progress.save(&work)?;
    }
    let staging = if progress.buckets_done > 0 {
        out.resume_staging()?
    } else {
        out.begin_staging()?
    };
    let rows = gather(&plan, &families, &mut progress, &work, &staging, args)?;
    let quality = measure_dispersion(&staging, &input_conn)?;
    let upgraded = write_metadata(&staging, &input_conn, &shards, args, &plan, &quality, rows)?;
    write_valuations(&staging, &shards::read_valuations(args.input())?)?;
    out.publish()?;
    std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    print_summary(
        args,
        &plan,
        &quality,
        rows,
        upgraded,
        started.elapsed().as_secs_f64(),
    );
    Ok(())
}

fn make_plan(
    args: &ShuffleArgs,
    shards: &[Shard],
    families: &[Family],
    conn: &rusqlite::Connection,
) -> Result<Plan> {
    let rows: u64 = shards.iter().map(|s| s.header.rows).sum();
    let bytes = rows * record_bytes(families) as u64;
    let buckets = bucket_count(args.memory, rows, bytes, !families.is_empty())?;
    let recorded = metadata::session_value(conn, "shard_rows")?.and_then(|v| v.parse().ok());
    Ok(Plan {
        input: std::fs::canonicalize(args.input())?.display().to_string(),
        input_rows: rows,
        input_fingerprint: shards
            .iter()
            .map(|s| (s.name.clone(), s.path.clone()))
            .chain(families.iter().flat_map(|f| {
                f.files
                    .iter()
                    .map(|c| (c.file_name.clone(), c.path.clone()))
            }))
            .map(|(name, path)| {
                let (len, crc) = identity(&path);
                (name, len, crc)
            })
            .collect(),
        seed: args.seed,
        buckets,
        shard_rows: args.shard_rows.or(recorded),
        companions: families.iter().map(|f| f.name.clone()).collect(),
        memory: args.memory,
    })
}

/// `67108864` → `64 MiB`, `1536000` → `1.5 MiB`, `4096` → `4 KiB`.
fn mib(bytes: u64) -> String {
    if bytes < 1 << 20 {
        return format!("{} KiB", bytes.div_ceil(1 << 10));
    }
    let m = bytes as f64 / (1 << 20) as f64;
    if m.fract() == 0.0 {
        format!("{m:.0} MiB")
    } else {
        format!("{m:.1} MiB")
    }
}

/// Bytes of one bucket record: a steps row and a row of each companion family.
fn record_bytes(families: &[Family]) -> usize {
    ROW_BYTES + families.iter().map(|f| f.row_bytes).sum::<usize>()
}

/// A cheap identity of an input file for resume checks: its size and the CRC of its last 4 KiB.
fn identity(path: &Path) -> (u64, u32) {
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    let tail = len.saturating_sub(4096);
    let mut buf = vec![0u8; (len - tail) as usize];
    let ok = File::open(path)
        .and_then(|f| f.read_exact_at(&mut buf, tail))
        .is_ok();
    (len, if ok { crate::crc::crc32c(&buf) } else { 0 })
}

/// How many buckets the shuffle of `rows` rows (`bytes` of rows and companion rows) takes with
/// `memory`: a bucket gets at most ~40% of it (room for variation in bucket sizes and buffers),
/// and no more than TARGET_BUCKET_BYTES so it shuffles in cache. Too little memory is a usage
/// error in rows and MiB that names the smallest --memory that works.
fn bucket_count(memory: u64, rows: u64, bytes: u64, with_companions: bool) -> Result<u64> {
    let per_bucket = (memory * 2 / 5)
        .min(TARGET_BUCKET_BYTES)
        .max(ROW_BYTES as u64);
    let buckets = bytes.div_ceil(per_bucket).max(1);
    if buckets > MAX_BUCKETS {
        // per_bucket = memory·2/5 must reach bytes / MAX_BUCKETS.
        let least = bytes.div_ceil(MAX_BUCKETS).div_ceil(2) * 5;
        return Err(UsageError(format!(
            "--memory {} is too little for {} rows ({} of rows{}): it would take {} buckets, and at most {} fit; the smallest --memory that works is {}",
            mib(memory),
            thousands(rows),
            mib(bytes),
            if with_companions {
                " and companion rows"
            } else {
                ""
            },
            thousands(buckets),
            thousands(MAX_BUCKETS),
            mib(least.next_multiple_of(1 << 20))
        ))
        .into());
    }
    Ok(buckets)
}

fn start_or_resume(work: &Path, plan: &Plan, resume: bool) -> Result<Progress> {
    let interrupted = Progress::load(work);
    if resume {
        match interrupted {
            Some(p) if p.plan == *plan => {
                log::info!(
                    "resuming: {} of {} buckets done",
                    p.buckets_done,
                    plan.buckets
                );
                return Ok(p);
            }
            Some(p) => {
                let mut why = plan.differences(&p.plan);
                if why.is_empty() {
                    why.push("its plan differs".into());
                }
                return Err(UsageError(format!(
                    "--resume: the interrupted shuffle in {} was run with other options: {}; give the same options to continue it, or run without --resume to start over",
                    work.display(),
                    why.join("; ")
                ))
                .into());
            }
            None => log::warn!(
                "--resume: no interrupted shuffle in {}; starting from the beginning",
                work.display()
            ),
        }
    } else if let Some(p) = interrupted {
        eprintln!(
            "found an interrupted shuffle in {} ({} of {} buckets done); starting over (`--resume` with the same options would continue it)",
            work.display(),
            p.buckets_done,
            p.plan.buckets
        );
    }
    if work.exists() {
        std::fs::remove_dir_all(work)
            .with_context(|| format!("removing old work folder {}", work.display()))?;
    }
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let p = Progress {
        plan: plan.clone(),
        bucket_rows: None,
        bucket_crcs: Vec::new(),
        buckets_done: 0,
        writer: None,
        companion_writers: Vec::new(),
    };
    p.save(work)?;
    Ok(p)
}

fn free_bytes(path: &Path) -> Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: statvfs fills the struct for a NUL-terminated path; the result is checked.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", path.display()));
    }
    Ok((st.f_bavail as u64 * st.f_frsize as u64, st.f_fsid as u64))
}

/// Refuses to start when the bucket files and the output cannot both fit.
fn check_space(
    work: &Path,
    output: &Path,
    plan: &Plan,
    families: &[Family],
    progress: &Progress,
) -> Result<()> {
    let pack_bytes = plan.input_rows * record_bytes(families) as u64;
    let temp_need = if progress.bucket_rows.is_some() {
        0
    } else {
        pack_bytes
    };
    let out_need = pack_bytes;
    let (temp_free, temp_fs) = free_bytes(work)?;
    let (out_free, out_fs) = free_bytes(output)?;
    let mb = |b: u64| b as f64 / 1e6;
    if temp_fs == out_fs {
        if temp_need + out_need > temp_free {
            bail!(
                "shuffle needs {:.1} MB free in {} ({:.1} MB of bucket files + {:.1} MB for the output on the same filesystem); only {:.1} MB is free. Put the buckets elsewhere with --temp DIR",
                mb(temp_need + out_need),
                output.display(),
                mb(temp_need),
                mb(out_need),
                mb(temp_free)
            );
        }
    } else {
        if temp_need > temp_free {
            bail!(
                "shuffle needs {:.1} MB of temporary space in {}; only {:.1} MB is free",
                mb(temp_need),
                work.display(),
                mb(temp_free)
            );
        }
        if out_need > out_free {
            bail!(
                "the shuffled pack needs {:.1} MB in {}; only {:.1} MB is free",
                mb(out_need),
                output.display(),
                mb(out_free)
            );
        }
    }
    Ok(())
}

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
fn scatter(
    shards: &[Shard],
    families: &[Family],
    plan: &Plan,
    work: &Path,
    args: &ShuffleArgs,
) -> Result<(Vec<u64>, Vec<u32>)> {
    let k = plan.buckets as usize;
    let record = record_bytes(families);
    let buffer_bytes =
        ((args.memory / 4 / k as u64) / record as u64).clamp(16, 8192) as usize * record;
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
        .collect::<Result<_>>()?;
    let key = splitmix_at(plan.seed, u64::MAX);
    let bar = progress::rows_bar(plan.input_rows, args.quiet, "shuffle 1/2 scatter");
    let read_rows = (READ_ROWS * ROW_BYTES / record).max(1);
    let mut buf = vec![0u8; read_rows * ROW_BYTES];
    let mut companion_bufs: Vec<Vec<u8>> = vec![Vec::new(); families.len()];
    let mut global = 0u64;
    for (si, shard) in shards.iter().enumerate() {
        let file = shard.open()?;
        let companion_files = families
            .iter()
            .map(|f| f.open(si))
            .collect::<Result<Vec<_>>>()?;
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

/// Phase 2: buckets in order, each shuffled in memory and appended to the output (the steps
/// rows, and each companion row with its steps row); progress is saved after every bucket.
/// Returns the rows written.
fn gather(
    plan: &Plan,
    families: &[Family],
    progress: &mut Progress,
    work: &Path,
    staging: &Path,
    args: &ShuffleArgs,
) -> Result<u64> {
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
    let bar = progress::rows_bar(plan.input_rows, args.quiet, "shuffle 2/2 buckets");
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
            bail!(
                "{} is damaged (CRC mismatch; was the machine restarted?); run again without --resume",
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
            .collect::<Result<_>>()?;
        progress.save(work)?;
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    let rows = writer.total_rows();
    let records = writer.finish()?;
    std::fs::write(staging.join(".shards.json"), serde_json::to_vec(&records)?)?;
    let mut companion_records = Vec::new();
    for (f, w) in families.iter().zip(companion_writers) {
        companion_records.extend(families::records(&f.layout(), &w.finish()?));
    }
    std::fs::write(
        staging.join(".companions.json"),
        serde_json::to_vec(&companion_records)?,
    )?;
    Ok(rows)
}

/// Measures how runs are spread over the output shards, reading them back once.
fn measure_dispersion(staging: &Path, input: &rusqlite::Connection) -> Result<Quality> {
    let ids: Vec<u32> = metadata::read_runs(input)?
        .iter()
        .map(|r| r.id as u32)
        .collect();
    let slots = RunSlots::new(&ids);
    let mut shard_counts = vec![0u32; ids.len()];
    let mut window_counts = vec![0u32; ids.len()];
    let mut touched: Vec<u32> = Vec::new();
    let mut q = Quality::default();
    let mut window_sum = 0u64;
    let (mut window_fill, mut window_max) = (0usize, 0u32);
    for shard in shards::open_shards(staging, false)? {
        let mut shard_max = 0u32;
        shard_counts.iter_mut().for_each(|c| *c = 0);
        for (start, count) in shards::chunks(std::slice::from_ref(&shard), 1 << 17)
            .into_iter()
            .map(|(_, s, n)| (s, n))
        {
            let map = shard.map_rows(start, count)?;
            for row in map.chunks_exact(ROW_BYTES) {
                let slot = slots
                    .get(u32::from_le_bytes(row[..4].try_into().unwrap()))
                    .unwrap_or(0) as usize;
                shard_counts[slot] += 1;
                shard_max = shard_max.max(shard_counts[slot]);
                if window_counts[slot] == 0 {
                    touched.push(slot as u32);
                }
                window_counts[slot] += 1;
                window_max = window_max.max(window_counts[slot]);
                window_fill += 1;
                if window_fill == WINDOW {
                    window_sum += u64::from(window_max);
                    q.window_max_run_rows = q.window_max_run_rows.max(u64::from(window_max));
                    q.windows += 1;
                    for s in touched.drain(..) {
                        window_counts[s as usize] = 0;
                    }
                    window_fill = 0;
                    window_max = 0;
                }
            }
        }
        let share = if shard.header.rows == 0 {
            0.0
        } else {
            f64::from(shard_max) / shard.header.rows as f64
        };
        q.shard_max_run_share.push(share);
    }
    if window_fill > 0 {
        window_sum += u64::from(window_max);
        q.window_max_run_rows = q.window_max_run_rows.max(u64::from(window_max));
        q.windows += 1;
    }
    q.window_mean_max_run_rows = if q.windows == 0 {
        0.0
    } else {
        window_sum as f64 / q.windows as f64
    };
    Ok(q)
}

fn write_metadata(
    staging: &Path,
    input: &rusqlite::Connection,
    input_shards: &[Shard],
    args: &ShuffleArgs,
    plan: &Plan,
    quality: &Quality,
    rows: u64,
) -> Result<Option<u64>> {
    let records: Vec<metadata::ShardRecord> =
        serde_json::from_slice(&std::fs::read(staging.join(".shards.json"))?)?;
    std::fs::remove_file(staging.join(".shards.json"))?;
    let companion_records: Vec<metadata::CompanionRecord> =
        serde_json::from_slice(&std::fs::read(staging.join(".companions.json"))?)?;
    std::fs::remove_file(staging.join(".companions.json"))?;
    let db_path = staging.join(metadata::FILE_NAME);
    if db_path.exists() {
        std::fs::remove_file(&db_path)?; // left by an interrupted finish; rebuilt from scratch
    }
    let db = MetadataWriter::create(&db_path)?;
    let runs = metadata::read_runs(input)?;
    let mut details = metadata::read_run_details(input)?;
    let input_shuffled = metadata::session_value(input, "shuffled")?.as_deref() == Some("true");
    if fingerprints::recorded(&runs, &details).is_none() && !input_shuffled {
        let valuations = shards::read_valuations(args.input())?;
        let workers = args
            .workers
            .map_or_else(crate::default_workers, |w| w as usize);
        let computed = fingerprints::compute(input_shards, &runs, &valuations, workers)?;
        for (run, fp) in runs.iter().zip(computed) {
            details.entry(run.id).or_default().fingerprint = Some(fp.to_string());
        }
    }
    for r in &runs {
        db.insert_run(&RunRecord {
            run_id: r.id as u32,
            seed: r.seed as u32,
            steps: r.steps as u64,
            max_score: r.max_score,
            highest_tile: r.highest_tile,
            details: details.get(&r.id).cloned().unwrap_or_default(),
            first_row: None,
        })?;
    }
    metadata::copy_findings(&db, input, &|id| Some(id), &[])?;
    for shard in &records {
        db.insert_shard(shard)?;
    }
    for record in &companion_records {
        db.insert_companion(record)?;
    }
    for (k, v) in metadata::read_session(input)? {
        db.set_session(&format!("input.{k}"), &v)?;
    }
    let max_share = quality
        .shard_max_run_share
        .iter()
        .copied()
        .fold(0.0, f64::max);
    db.set_pack_facts(&PackFacts {
        command_line: crate::cli::command_line(),
        command: "shuffle",
        shard_rows: plan.shard_rows,
        total_rows: rows,
        total_runs: runs.len() as u64,
        shard_count: records.len(),
        shuffled: true,
    })?;
    let facts = [
        (
            "run_index",
            "not applicable: the pack is shuffled".to_string(),
        ),
        ("shuffle_seed", args.seed.to_string()),
        ("shuffle_buckets", plan.buckets.to_string()),
        ("source_pack", plan.input.clone()),
        ("quality_shard_max_run_share", format!("{max_share:.6}")),
        (
            "quality_shard_max_run_shares",
            serde_json::to_string(&quality.shard_max_run_share)?,
        ),
        ("quality_window_rows", WINDOW.to_string()),
        (
            "quality_window_mean_max_run_rows",
            format!("{:.3}", quality.window_mean_max_run_rows),
        ),
        (
            "quality_window_max_run_rows",
            quality.window_max_run_rows.to_string(),
        ),
    ];
    for (k, v) in facts {
        db.set_session(k, &v)?;
    }
    // The scatter wrote legacy rows upgraded; counted here, in one more pass over the input,
    // so an interrupted and resumed shuffle counts them too.
    let upgraded = if input_shards.iter().any(Shard::is_legacy) {
        let changed = shards::ev_legal_changes(input_shards)?;
        db.set_session(metadata::LEGACY_EV_LEGAL_CHANGED, &changed.to_string())?;
        Some(changed)
    } else {
        None
    };
    db.finish()?;
    Ok(upgraded)
}

/// `upgraded`: for a legacy input, the rows whose `ev_legal` the upgrade changed.
fn print_summary(
    args: &ShuffleArgs,
    plan: &Plan,
    q: &Quality,
    rows: u64,
    upgraded: Option<u64>,
    elapsed: f64,
) {
    let max_share = q.shard_max_run_share.iter().copied().fold(0.0, f64::max);
    let mbps = rows as f64 * ROW_BYTES as f64 / 1e6 / elapsed.max(1e-9);
    if args.json {
        println!(
            "{}",
            json!({
                "output": args.output.display().to_string(),
                "rows": rows,
                "seed": args.seed,
                "buckets": plan.buckets,
                "quality": q,
                "legacy_ev_legal_changed": upgraded,
                "elapsed_s": elapsed,
                "mb_per_s": mbps,
            })
        );
        return;
    }
    println!(
        "shuffled {} rows into {} ({} shard{}, seed {}, {} buckets)",
        thousands(rows),
        args.output.display(),
        q.shard_max_run_share.len(),
        if q.shard_max_run_share.len() == 1 {
            ""
        } else {
            "s"
        },
        args.seed,
        plan.buckets
    );
    println!(
        "  largest share of one run in a shard: {:.3}% (goal ≤ 2%)",
        max_share * 100.0
    );
    println!(
        "  rows from one run per {WINDOW}-row window: mean of the max {:.2}, max {} ({} windows)",
        q.window_mean_max_run_rows, q.window_max_run_rows, q.windows
    );
    if let Some(n) = upgraded {
        println!(
            "  legacy 46-byte input rows upgraded: recomputing ev_legal from the board changed {}",
            progress::count(n, "row", "rows")
        );
    }
    println!("  elapsed {elapsed:.2} s, {mbps:.0} MB/s");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Too little --memory is told in rows and MiB, with the smallest --memory that works, and
    /// that amount does work.
    #[test]
    fn too_little_memory_names_rows_mib_and_the_smallest_that_works() {
        let rows = 4_012_461u64;
        let bytes = rows * ROW_BYTES as u64;
        let err = bucket_count(4 << 10, rows, bytes, false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "--memory 4 KiB is too little for 4,012,461 rows (183.7 MiB of rows): it would take \
             117,582 buckets, and at most 100,000 fit; the smallest --memory that works is 1 MiB"
        );
        assert!(bucket_count(1 << 20, rows, bytes, false).is_ok());

        // A billion rows with 256-byte companion rows.
        let rows = 1_000_000_000u64;
        let bytes = rows * (ROW_BYTES as u64 + 256);
        let err = bucket_count(4 << 20, rows, bytes, true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("1,000,000,000 rows"), "{err}");
        assert!(err.contains("of rows and companion rows"), "{err}");
        let least = err.rsplit("works is ").next().unwrap();
        let least: u64 = least.strip_suffix(" MiB").unwrap().parse().unwrap();
        assert!(
            bucket_count(least << 20, rows, bytes, true).is_ok(),
            "{err}"
        );
        assert!(
            bucket_count((least - 1) << 20, rows, bytes, true).is_err(),
            "{err}"
        );
    }
}
