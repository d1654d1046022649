//! The plan of a shuffle: how many buckets the pack and the memory budget take, the seed,
//! the output's shard size, and an identity of the input, so that a resume continues only
//! the same shuffle; and the check that the bucket files and the output fit on disk.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ShuffleOptions;
use crate::error::{Context, Result, err, fail};
use crate::format::metadata;
use crate::format::row::ROW_BYTES;
use crate::pack::families::Family;
use crate::pack::shards::Shard;
use crate::progress::thousands;

/// Largest bucket aimed for: small buckets shuffle inside the CPU caches.
const TARGET_BUCKET_BYTES: u64 = 4 << 20;
const MAX_BUCKETS: u64 = 100_000;

/// What a shuffle is: the same plan (and input) is required to resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Plan {
    pub input: String,
    pub input_rows: u64,
    input_fingerprint: Vec<(String, u64, u32)>,
    pub seed: u64,
    pub buckets: u64,
    pub shard_rows: Option<u64>,
    /// The companion families carried (each bucket record holds a steps row and one row of
    /// each, in this order).
    #[serde(default)]
    companions: Vec<String>,
    /// The memory budget, which decides the buckets.
    #[serde(default)]
    pub memory: u64,
}

impl Plan {
    /// How an interrupted shuffle's plan differs from this one, by the options' names.
    pub(super) fn differences(&self, old: &Plan) -> Vec<String> {
        let mut out = Vec::new();
        if self.input != old.input {
            out.push(format!("input was {}", old.input));
        } else if self.input_rows != old.input_rows
            || self.input_fingerprint != old.input_fingerprint
        {
            out.push("the input pack's files changed since".into());
        }
        if self.seed != old.seed {
            out.push(format!("seed was {}", old.seed));
        }
        if self.memory != old.memory {
            out.push(format!("memory was {}", mib(old.memory)));
        } else if self.buckets != old.buckets {
            out.push(format!("it used {} buckets", old.buckets));
        }
        if self.shard_rows != old.shard_rows {
            out.push(format!(
                "shard_rows was {}",
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

/// The plan for shuffling the pack `input`, whose shards, companion families and metadata.db
/// are given.
pub(super) fn make_plan(
    input: &Path,
    options: &ShuffleOptions,
    shards: &[Shard],
    families: &[Family],
    conn: &rusqlite::Connection,
) -> Result<Plan> {
    let rows: u64 = shards.iter().map(|s| s.header.rows).sum();
    let bytes = rows * record_bytes(families) as u64;
    let buckets = bucket_count(options.memory, rows, bytes, !families.is_empty())?;
    let recorded = metadata::session_value(conn, "shard_rows")?.and_then(|v| v.parse().ok());
    Ok(Plan {
        input: std::fs::canonicalize(input)?.display().to_string(),
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
        seed: options.seed,
        buckets,
        shard_rows: options.shard_rows.or(recorded),
        companions: families.iter().map(|f| f.name.clone()).collect(),
        memory: options.memory,
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
pub(super) fn record_bytes(families: &[Family]) -> usize {
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
/// and no more than TARGET_BUCKET_BYTES so it shuffles in cache. Too little memory is refused
/// in rows and MiB, naming the smallest memory budget that works.
fn bucket_count(memory: u64, rows: u64, bytes: u64, with_companions: bool) -> Result<u64> {
    let per_bucket = (memory * 2 / 5)
        .min(TARGET_BUCKET_BYTES)
        .max(ROW_BYTES as u64);
    let buckets = bytes.div_ceil(per_bucket).max(1);
    if buckets > MAX_BUCKETS {
        // per_bucket = memory·2/5 must reach bytes / MAX_BUCKETS.
        let least = bytes.div_ceil(MAX_BUCKETS).div_ceil(2) * 5;
        return Err(err!(
            Refused,
            "a memory budget of {} is too little for {} rows ({} of rows{}): it would take {} buckets, and at most {} fit; the smallest memory budget that works is {}",
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
        )
        .with_option("memory"));
    }
    Ok(buckets)
}

/// Free bytes for this user on the filesystem of `path` (or of its folder, when `path` is
/// not there yet), and that filesystem's id.
fn free_bytes(path: &Path) -> Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = match path.parent() {
        Some(parent) if !path.exists() => parent,
        _ => path,
    };
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| err!(InvalidInput, "{}: a path with a NUL byte", path.display()))?;
    // SAFETY: statvfs fills the struct for a NUL-terminated path; the result is checked.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", path.display()));
    }
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    Ok((free.min(free_space_cap()), st.f_fsid as u64))
}

/// A test hook: with `DATASET_PACKER_FREE_BYTES=N` in the environment, no filesystem has more
/// than N bytes free, so tests can run the free-space refusal without filling a disk.
fn free_space_cap() -> u64 {
    std::env::var("DATASET_PACKER_FREE_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

/// Refuses to start when the bucket files and the output cannot both fit.
/// `scattered`: the bucket files are already written (a resume after phase 1).
pub(super) fn check_space(
    work: &Path,
    output: &Path,
    plan: &Plan,
    families: &[Family],
    scattered: bool,
) -> Result<()> {
    let pack_bytes = plan.input_rows * record_bytes(families) as u64;
    let temp_need = if scattered { 0 } else { pack_bytes };
    let out_need = pack_bytes;
    let (temp_free, temp_fs) = free_bytes(work)?;
    let (out_free, out_fs) = free_bytes(output)?;
    let mb = |b: u64| b as f64 / 1e6;
    if temp_fs == out_fs {
        if temp_need + out_need > temp_free {
            return Err(err!(
                Io,
                "shuffle needs {:.1} MB free in {} ({:.1} MB of bucket files + {:.1} MB for the output on the same filesystem); only {:.1} MB is free. Put the bucket files in a folder on another filesystem",
                mb(temp_need + out_need),
                output.display(),
                mb(temp_need),
                mb(out_need),
                mb(temp_free)
            )
            .with_option("temp"));
        }
    } else {
        if temp_need > temp_free {
            fail!(
                Io,
                "shuffle needs {:.1} MB of temporary space in {}; only {:.1} MB is free",
                mb(temp_need),
                work.display(),
                mb(temp_free)
            );
        }
        if out_need > out_free {
            fail!(
                Io,
                "the shuffled pack needs {:.1} MB in {}; only {:.1} MB is free",
                mb(out_need),
                output.display(),
                mb(out_free)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Too little memory is told in rows and MiB, with the smallest memory budget that works,
    /// and that amount does work.
    #[test]
    fn too_little_memory_names_rows_mib_and_the_smallest_that_works() {
        let rows = 4_012_461u64;
        let bytes = rows * ROW_BYTES as u64;
        let err = bucket_count(4 << 10, rows, bytes, false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "a memory budget of 4 KiB is too little for 4,012,461 rows (183.7 MiB of rows): it \
             would take 117,582 buckets, and at most 100,000 fit; the smallest memory budget \
             that works is 1 MiB"
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
