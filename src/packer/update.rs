//! An update (`pack --update`): add a drop's new runs to the pack already in the output folder, in time
//! proportional to what is new. The story: open the pack (refusing what an update cannot
//! extend: see [`super::existing`]), walk the drop and sort its runs by what the pack knows of
//! them (packed from the same path with the same file sizes: not read again; same path with
//! other sizes: the source changed, an error; otherwise new), parse the new ones (a run whose
//! content the pack already holds is skipped as "already packed"), and write them after the
//! pack's rows: the last, partial shard is rewritten as a staged copy ([`super::carry`]), new
//! shards follow, `metadata.db` is extended from a staged copy, and the publish step keeps
//! every other shard in place, untouched. When the output holds no pack yet, the update is a
//! plain pack ([`super::create`]).

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use serde_json::json;

use super::carry::{copy_shard, search_writer};
use super::existing::{Existing, check_search_family, companions_to_drop};
use super::{
    Job, Packed, Packer, PackerStart, Ready, Summary, changed_sources, create, discover_runs,
    parse_and_write, rel_string,
};
use crate::error::{Context, Error, ErrorKind, Result};
use crate::format::fingerprint::Fingerprint;
use crate::format::metadata::{MetadataWriter, RunDetails, ShardRecord};
use crate::format::search;
use crate::pack::StagedPack;
use crate::pack::files;
use crate::pack::fingerprints;
use crate::pack::publish::OutputDir;
use crate::pack::shard_writer::{FileLayout, ShardWriter};
use crate::raw::discover::{Discovery, RunSource};

/// What an update did.
pub(crate) enum Updated {
    /// The output held no pack: the whole drop was packed, as a new pack is.
    Created(Summary),
    /// The pack was extended, or found to hold the drop already: the new runs, as a new pack
    /// reports them, and what the update adds to that.
    Extended(Summary, Report),
}

/// Adds the new runs of `job.input` to the pack in `job.output` (packs the whole input when
/// there is no pack yet), and publishes the result.
pub(crate) fn update(job: &Job) -> Result<Updated> {
    crate::thread_cpu::enabled(); // the probe's clock starts here
    let (out, has_pack) = OutputDir::open_for_update(&job.output)?;
    if !has_pack {
        log::info!(
            "{} holds no pack yet: the update packs the whole input",
            job.output.display()
        );
        return create::pack_into(job, out).map(Updated::Created);
    }
    let existing = Existing::open(&job.output, job.shard_rows)?;
    check_search_family(&existing, job)?;
    let extended = job.search_stats.then_some(search::FAMILY);
    let dropped = companions_to_drop(&existing, &job.drop_companions, extended)?;
    let found = discover_runs(&job.input, job.workers)?;
    let sorted = sort_runs(&existing, &found);
    if !sorted.changed.is_empty() && !job.options.skip_invalid {
        let reasons: Vec<&str> = sorted.changed.iter().map(|c| c.reason.as_str()).collect();
        return Err(changed_sources(&reasons));
    }
    let orphans_same = existing.orphans == orphan_paths(&found);
    let already_skipped = sorted
        .changed
        .iter()
        .all(|c| existing.skipped.get(&c.path) == Some(&c.reason));
    if sorted.new.is_empty() && orphans_same && already_skipped && dropped.is_empty() {
        let (summary, report) = Report::nothing_new(&existing, &sorted);
        return Ok(Updated::Extended(summary, report));
    }

    let (summary, mut report, ready) = extend(job, &existing, &found, &sorted, &dropped, out)?;
    // Without anything to publish, `ready` is None: the staging folder is gone with it and
    // the pack stays as it was.
    if let Some(ready) = ready {
        let retired: Vec<String> = dropped
            .iter()
            .flat_map(|(_, files)| files.clone())
            .collect();
        ready.publish_keeping(&report.kept_shards, &retired)?;
        report.removed_companions = dropped.into_iter().map(|(name, _)| name).collect();
    }
    crate::thread_cpu::write_report()?;
    Ok(Updated::Extended(summary, report))
}

/// A raw run packed before whose files changed since.
struct Changed {
    path: String,
    reason: String,
}

/// The drop's runs, by what the pack knows of them.
struct Sorted<'a> {
    /// To be parsed: the runs not in the pack by path, and the `reformed` ones.
    new: Vec<&'a RunSource>,
    /// In the pack by sidecar path and size, but with their rows file in the other form now
    /// (`BASE.jsonl` gzipped, or the other way): (sidecar path, run id). Parsed to check that
    /// the content is the packed run's.
    reformed: Vec<(String, i64)>,
    /// In the pack by path with the same file sizes.
    packed_by_path: usize,
    changed: Vec<Changed>,
}

fn sort_runs<'a>(existing: &Existing, found: &'a Discovery) -> Sorted<'a> {
    let mut by_path: HashMap<&str, (i64, &RunDetails)> = HashMap::new();
    for (id, d) in &existing.details {
        if let Some(p) = &d.source_path {
            by_path.insert(p.as_str(), (*id, d));
        }
    }
    let mut sorted = Sorted {
        new: Vec::new(),
        reformed: Vec::new(),
        packed_by_path: 0,
        changed: Vec::new(),
    };
    for src in &found.runs {
        let path = rel_string(&src.rel_sidecar);
        let Some((id, d)) = by_path.get(path.as_str()) else {
            sorted.new.push(src);
            continue;
        };
        let now = (src.sidecar_bytes as i64, src.rows_bytes as i64);
        let sidecar_same = d.sidecar_bytes.is_none_or(|s| s == now.0);
        let rows_path = rel_string(&src.rel_rows);
        if sidecar_same
            && d.rows_path
                .as_deref()
                .is_some_and(|p| other_form(p, &rows_path))
        {
            sorted.reformed.push((path, *id));
            sorted.new.push(src);
            continue;
        }
        match (d.sidecar_bytes, d.rows_bytes) {
            (Some(s), Some(r)) if (s, r) != now => sorted.changed.push(Changed {
                reason: format!(
                    "{path}: changed since it was packed as run {id} (sidecar {s} → {} bytes, rows file {r} → {} bytes)",
                    now.0, now.1
                ),
                path,
            }),
            // Sizes match, or the run was packed before sizes were recorded: packed by path.
            _ => sorted.packed_by_path += 1,
        }
    }
    sorted
}

/// Whether two rows paths are one file's two forms, `BASE.jsonl` and `BASE.jsonl.gz`.
fn other_form(a: &str, b: &str) -> bool {
    let gzipped = |plain: &str, gz: &str| gz.strip_suffix(".gz") == Some(plain);
    gzipped(a, b) || gzipped(b, a)
}

fn orphan_paths(found: &Discovery) -> Vec<String> {
    found.orphans.iter().map(|p| rel_string(p)).collect()
}

/// Writes the extended pack into a staging folder of `out`, and returns it ready to publish;
/// when nothing new was packed and the metadata would not change, there is nothing to publish.
fn extend(
    job: &Job,
    existing: &Existing,
    found: &Discovery,
    sorted: &Sorted,
    dropped: &[(String, Vec<String>)],
    out: OutputDir,
) -> Result<(Summary, Report, Option<Ready>)> {
    let started = Instant::now();
    let (fingerprints, computed) = fingerprints::of_pack(
        &existing.dir,
        &existing.shards,
        &existing.runs,
        &existing.details,
        &existing.valuations,
        job.workers,
    )?;
    let staging = out.begin_staging()?;
    let db = stage_metadata(existing, &staging, dropped, &fingerprints, computed)?;
    let rewritten = existing.partial_last();
    let kept: Vec<ShardRecord> =
        existing.records[..rewritten.unwrap_or(existing.records.len())].to_vec();
    let mut shards = ShardWriter::after(&staging, existing.shard_rows, kept.clone());
    if let Some(last) = rewritten {
        copy_shard(&existing.shards[last], &existing.records[last], &mut shards)?;
    }
    let search = match job.search_stats {
        true => Some(search_writer(existing, &staging, kept.len(), rewritten)?),
        false => None,
    };
    let mut staged = StagedPack::from_parts(out, staging, existing.shard_rows, shards, db);
    let search = search.map(|writer| staged.add_family_writer(FileLayout::search(), writer));
    let in_pack = in_pack(existing, &fingerprints);
    let recheck = recheck(existing, &fingerprints, sorted)?;
    let mut packer = Packer::new(
        PackerStart {
            staged,
            search,
            next_run_id: u32::try_from(existing.runs.len())
                .map_err(|_| Error::new(ErrorKind::Unsupported, "more than 2^32 runs"))?,
            valuations: existing.valuations.clone(),
            in_pack,
            recheck,
            finding_counts: existing.finding_counts.clone(),
        },
        job.options,
    );
    for c in &sorted.changed {
        packer.skip(c.path.clone(), c.reason.clone())?;
    }
    parse_and_write(
        &sorted.new,
        &mut packer,
        job.workers,
        &job.progress,
        started,
    )?;
    let packed = packer.finish(&found.orphans)?;
    let nothing_new = packed.next_run_id == packed.first_run_id;
    let skips_known = packed
        .skipped
        .iter()
        .all(|(p, r)| existing.skipped.get(p) == Some(r));
    let unchanged = skips_known
        && !computed
        && packed.reformed.is_empty()
        && existing.orphans == orphan_paths(found);
    if nothing_new && unchanged && dropped.is_empty() {
        let (summary, report) = Report::nothing_new(existing, sorted);
        let report = Report {
            already_packed: packed.already_packed,
            ..report
        };
        return Ok((summary, report, None));
    }

    record_session(job, existing, found, &packed, rewritten.is_some())?;
    let total_runs = u64::from(packed.next_run_id);
    let total_rows = packed.total_rows;
    let already_packed = packed.already_packed.clone();
    let reformed = packed.reformed.clone();
    let new_shards: Vec<ShardRecord> = packed.shards[kept.len()..].to_vec();
    let (summary, ready) = packed.commit(sorted.new.iter().map(|r| r.rows_bytes).sum());
    let mut kept_shards: Vec<String> = kept.iter().map(|r| r.file_name.clone()).collect();
    if nothing_new {
        keep_originals(ready.staging(), &new_shards, &mut kept_shards)?;
    }
    let report = Report {
        removed_companions: Vec::new(),
        kept_shards,
        rewritten: if nothing_new {
            Vec::new()
        } else {
            rewritten
                .map(|i| existing.records[i].file_name.clone())
                .into_iter()
                .collect()
        },
        added: new_shards
            .iter()
            .skip(usize::from(rewritten.is_some()))
            .filter(|_| !nothing_new)
            .map(|s| s.file_name.clone())
            .collect(),
        packed_by_path: sorted.packed_by_path,
        already_packed,
        reformed,
        total_runs,
        total_rows,
    };
    Ok((summary, report, Some(ready)))
}

/// The staged copy of the pack's metadata.db, without the families the update drops, and with
/// the fingerprints of its runs when they were `computed` now (a pack from an older version).
fn stage_metadata(
    existing: &Existing,
    staging: &Path,
    dropped: &[(String, Vec<String>)],
    fingerprints: &[Fingerprint],
    computed: bool,
) -> Result<MetadataWriter> {
    let db = MetadataWriter::extend_copy(&existing.dir, staging, "update")?;
    for (name, _) in dropped {
        db.delete_companion(name)?;
    }
    if computed {
        for (run, fp) in existing.runs.iter().zip(fingerprints) {
            db.set_fingerprint(run.id, fp)?;
        }
    }
    Ok(db)
}

/// The packed runs by fingerprint, for a new run with content already packed to name its run.
fn in_pack(existing: &Existing, fingerprints: &[Fingerprint]) -> HashMap<Fingerprint, u32> {
    existing
        .runs
        .iter()
        .zip(fingerprints)
        .map(|(r, fp)| (*fp, r.id as u32))
        .rev() // the lowest id wins for duplicates already in the pack
        .collect()
}

/// The id and fingerprint of each `reformed` run (by sidecar path), which its new rows file's
/// content must match.
fn recheck(
    existing: &Existing,
    fingerprints: &[Fingerprint],
    sorted: &Sorted,
) -> Result<HashMap<String, (u32, Fingerprint)>> {
    let by_id: HashMap<i64, Fingerprint> = existing
        .runs
        .iter()
        .zip(fingerprints)
        .map(|(r, fp)| (r.id, *fp))
        .collect();
    let mut recheck = HashMap::new();
    for (path, id) in &sorted.reformed {
        let fingerprint = by_id.get(id).with_context(|| {
            format!(
                "{}: run_details names run {id}, which the runs table does not hold; run `dataset-packer validate`",
                existing.dir.display()
            )
        })?;
        let id = u32::try_from(*id).map_err(|_| {
            Error::new(
                ErrorKind::Corrupt,
                format!("{}: run id {id} is out of range", existing.dir.display()),
            )
        })?;
        recheck.insert(path.clone(), (id, *fingerprint));
    }
    Ok(recheck)
}

/// The session facts of the extended pack, its `updates` history included.
fn record_session(
    job: &Job,
    existing: &Existing,
    found: &Discovery,
    packed: &Packed,
    rewrote_last: bool,
) -> Result<()> {
    let history = update_history(existing, job, packed, rewrote_last)?;
    let facts = [
        ("total_rows", packed.total_rows.to_string()),
        ("total_runs", u64::from(packed.next_run_id).to_string()),
        ("shard_count", packed.shards.len().to_string()),
        ("skipped_runs", packed.db().count_skipped()?.to_string()),
        ("orphan_rows_files", found.orphans.len().to_string()),
        (
            search::ROWS_NOT_KEPT,
            (existing.session_count(search::ROWS_NOT_KEPT) + packed.search_rows_not_kept)
                .to_string(),
        ),
        ("updates", history),
    ];
    for (k, v) in &facts {
        packed.db().set_session(k, v)?;
    }
    Ok(())
}

/// When only the metadata changed, the staged copies of the last shard (and of its companion
/// files) are the same bytes as the originals: they are removed, and the originals kept in
/// place rather than replaced.
fn keep_originals(
    staging: &Path,
    new_shards: &[ShardRecord],
    kept_shards: &mut Vec<String>,
) -> Result<()> {
    for s in new_shards {
        std::fs::remove_file(staging.join(&s.file_name))
            .with_context(|| format!("removing the staged copy of {}", s.file_name))?;
        kept_shards.push(s.file_name.clone());
    }
    for name in files::companion_files(staging)? {
        std::fs::remove_file(staging.join(&name))
            .with_context(|| format!("removing the staged copy of {name}"))?;
    }
    Ok(())
}

/// The session's `updates` history with this update appended (a JSON array).
fn update_history(
    existing: &Existing,
    job: &Job,
    packed: &Packed,
    rewrote_last: bool,
) -> Result<String> {
    let mut history: Vec<serde_json::Value> = existing
        .session
        .iter()
        .find(|(k, _)| k == "updates")
        .and_then(|(_, v)| serde_json::from_str(v).ok())
        .unwrap_or_default();
    let input = std::fs::canonicalize(&job.input).unwrap_or_else(|_| job.input.clone());
    let kept = existing.records.len() - usize::from(rewrote_last);
    history.push(json!({
        "utc": crate::format::metadata::utc_now(),
        "tool": format!("dataset-packer {}", env!("CARGO_PKG_VERSION")),
        "command_line": job.command_line,
        "input": input.display().to_string(),
        "runs_added": packed.next_run_id - packed.first_run_id,
        "rows_added": packed.rows_added,
        "first_run_id": packed.first_run_id,
        "shards_rewritten": usize::from(rewrote_last),
        "shards_added": packed.shards.len() - kept - usize::from(rewrote_last),
    }));
    Ok(serde_json::to_string(&history)?)
}

/// What an update did besides packing new runs, for the user.
#[derive(Debug)]
pub(crate) struct Report {
    /// Companion families removed.
    pub(crate) removed_companions: Vec<String>,
    /// Shards of the old pack that stay in place.
    kept_shards: Vec<String>,
    /// The old pack's last shard, when rewritten with new rows after its own.
    pub(crate) rewritten: Vec<String>,
    /// Shards after the old pack's.
    pub(crate) added: Vec<String>,
    /// Runs of the drop the pack holds from the same path with the same file sizes.
    pub(crate) packed_by_path: usize,
    /// Runs whose content the pack holds (moved or copied): (sidecar path, run id).
    pub(crate) already_packed: Vec<(String, u32)>,
    /// Packed runs whose rows file was gzipped or unzipped since, same content: (path, id).
    pub(crate) reformed: Vec<(String, u32)>,
    /// The pack's runs and rows after the update.
    pub(crate) total_runs: u64,
    pub(crate) total_rows: u64,
}

impl Report {
    /// An update that found nothing new: no runs packed, and the pack as it was.
    fn nothing_new(existing: &Existing, sorted: &Sorted) -> (Summary, Report) {
        let summary = Summary {
            runs: 0,
            rows: 0,
            shards: Vec::new(),
            skipped: Vec::new(),
            findings: Default::default(),
            compressed_bytes: 0,
        };
        let report = Report {
            removed_companions: Vec::new(),
            kept_shards: Vec::new(),
            rewritten: Vec::new(),
            added: Vec::new(),
            packed_by_path: sorted.packed_by_path,
            already_packed: Vec::new(),
            reformed: Vec::new(),
            total_runs: existing.runs.len() as u64,
            total_rows: existing.total_rows(),
        };
        (summary, report)
    }
}

#[cfg(test)]
mod tests {
    use super::other_form;

    #[test]
    fn other_form_is_the_same_base_gzipped_or_not() {
        assert!(other_form("a/x.jsonl", "a/x.jsonl.gz"));
        assert!(other_form("a/x.jsonl.gz", "a/x.jsonl"));
        assert!(!other_form("a/x.jsonl.gz", "a/x.jsonl.gz"));
        assert!(!other_form("/abs/a/x.jsonl", "a/x.jsonl.gz"));
        assert!(!other_form("a/x.jsonl", "b/x.jsonl.gz"));
    }
}
