//! The structural checks a pack must pass to be opened (its shards against their records,
//! its runs against its rows), and the [`Check`] they report in: the opener runs them on
//! every open, and `validate` (crate::verify) runs them among all the others.

use std::path::Path;

use crate::format::metadata;
use crate::pack::shards::Shard;

/// Examples kept per failed check or finding.
pub(crate) const EXAMPLES: usize = 5;

/// One check's outcome: failures counted, first examples kept.
#[derive(Debug, Clone)]
pub struct Check {
    /// What is checked, as the report names it.
    pub name: &'static str,
    /// False when the check could not run (its `note` says why).
    pub ran: bool,
    pub failures: u64,
    /// The first few failures, each naming the file (and row) at fault.
    pub examples: Vec<String>,
    pub note: Option<String>,
}

impl Check {
    pub(crate) fn new(name: &'static str) -> Check {
        Check {
            name,
            ran: true,
            failures: 0,
            examples: Vec::new(),
            note: None,
        }
    }

    pub(crate) fn skipped(name: &'static str, why: impl Into<String>) -> Check {
        Check {
            ran: false,
            note: Some(why.into()),
            ..Check::new(name)
        }
    }

    pub(crate) fn fail(&mut self, example: impl FnOnce() -> String) {
        self.failures += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(example());
        }
    }

    pub(crate) fn absorb(&mut self, other: &Tally) {
        self.failures += other.count;
        for e in &other.examples {
            if self.examples.len() < EXAMPLES {
                self.examples.push(e.clone());
            }
        }
    }
}

/// A count with its first examples (for per-row checks and findings, merged across chunks).
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub count: u64,
    pub examples: Vec<String>,
}

impl Tally {
    pub(crate) fn add(&mut self, example: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(example());
        }
    }

    pub(crate) fn merge(&mut self, other: Tally) {
        self.count += other.count;
        let room = EXAMPLES.saturating_sub(self.examples.len());
        self.examples.extend(other.examples.into_iter().take(room));
    }
}

/// Recorded shard facts against the files; the CRCs too when the data was read (`data_crcs`).
/// A recorded shard whose header was refused (so it is not among `shards`) is checked as a
/// file: its size, and its CRC when the data is read, so a damaged header is reported as the
/// damage it is.
pub(crate) fn check_checksums(
    dir: &Path,
    records: &[metadata::ShardRecord],
    shards: &[Shard],
    data_crcs: Option<&[(u32, usize)]>,
) -> Check {
    let mut c = Check::new("shard checksums");
    let refused: Vec<&metadata::ShardRecord> = records
        .iter()
        .filter(|r| {
            !shards.iter().any(|s| s.name == r.file_name) && dir.join(&r.file_name).is_file()
        })
        .collect();
    if records.len() != shards.len() + refused.len() {
        c.fail(|| {
            format!(
                "metadata.db records {} shards, the folder has {}",
                records.len(),
                shards.len() + refused.len()
            )
        });
    }
    for rec in &refused {
        check_refused_file(&mut c, dir, rec, data_crcs.is_some());
    }
    let usable = records
        .iter()
        .filter(|r| !refused.iter().any(|f| std::ptr::eq(*f, *r)));
    for (i, (rec, shard)) in usable.zip(shards).enumerate() {
        if rec.file_name != shard.name {
            c.fail(|| {
                format!(
                    "shard {} is recorded as {}, found {}",
                    rec.shard, rec.file_name, shard.name
                )
            });
            continue;
        }
        if rec.rows != shard.header.rows || rec.bytes != shard.file_len {
            c.fail(|| {
                format!(
                    "{}: recorded {} rows / {} bytes, found {} rows / {} bytes",
                    shard.name, rec.rows, rec.bytes, shard.header.rows, shard.file_len
                )
            });
            continue;
        }
        let Some(&(data_crc, data_len)) = data_crcs.and_then(|d| d.get(i)) else {
            continue;
        };
        let crc = match shard.file_crc(data_crc, data_len) {
            Ok(crc) => crc,
            Err(e) => {
                c.fail(|| format!("{}: {e}", shard.name));
                continue;
            }
        };
        if crc != rec.crc32c {
            c.fail(|| {
                format!(
                    "{}: crc32c recorded {:08x}, computed {crc:08x}",
                    shard.name, rec.crc32c
                )
            });
        }
    }
    c
}

/// A recorded shard file whose header is refused: its size and (when `read`) its CRC-32C
/// against the record.
fn check_refused_file(c: &mut Check, dir: &Path, rec: &metadata::ShardRecord, read: bool) {
    let path = dir.join(&rec.file_name);
    let len = std::fs::metadata(&path).map(|m| m.len());
    let crc = if read {
        crate::crc::file_crc(&path).map(Some)
    } else {
        Ok(None)
    };
    match (len, crc) {
        (Ok(len), Ok(crc)) if len != rec.bytes || crc.is_some_and(|crc| crc != rec.crc32c) => {
            c.fail(|| {
                format!(
                    "{}: does not match its record ({len} bytes{}; recorded {} bytes, crc32c {:08x})",
                    rec.file_name,
                    crc.map_or(String::new(), |crc| format!(", crc32c {crc:08x}")),
                    rec.bytes,
                    rec.crc32c
                )
            })
        }
        (Ok(_), Ok(_)) => {}
        (Err(e), _) => c.fail(|| format!("{}: {e}", rec.file_name)),
        (_, Err(e)) => c.fail(|| format!("{}: {e:#}", rec.file_name)),
    }
}

/// Σ runs.steps against the rows the shard headers promise (when the rows are not scanned).
pub(crate) fn check_total_steps(runs: &[(i64, i64)], total_rows: u64) -> Check {
    let mut c = Check::new("Σ runs.steps = rows");
    let sum: i64 = runs.iter().map(|(_, steps)| steps).sum();
    if sum as u64 != total_rows {
        c.fail(|| format!("Σ runs.steps is {sum}, the shards hold {total_rows} rows"));
    }
    c
}
