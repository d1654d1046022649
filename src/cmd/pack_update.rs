//! `pack --update`: add a drop's new runs to the pack already in the output folder, in time
//! proportional to what is new. The story: open the pack (refusing a shuffled one or another
//! layout), walk the drop and sort its runs by what the pack knows of them (packed from the
//! same path with the same file sizes: not read again; same path with other sizes: the source
//! changed, an error; otherwise new), parse the new ones (a run whose content the pack already
//! holds is skipped as "already packed"), and write them after the pack's rows: the last,
//! partial shard is rewritten as a staged copy, new shards follow, `metadata.db` is extended
//! from a staged copy, and the publish step keeps every other shard in place, untouched.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::cmd::pack::{self, PackArgs};
use crate::format::fingerprint::Fingerprint;
use crate::format::metadata::{self, MetadataWriter, RunDetails, RunRow, ShardRecord};
use crate::format::search;
use crate::format::valuation::ValuationTable;
use crate::pack::families;
use crate::pack::files;
use crate::pack::fingerprints;
use crate::pack::publish::OutputDir;
use crate::pack::shard_writer::{FileLayout, ShardWriter};
use crate::pack::shards::{self, Shard};
use crate::packer::create;
use crate::packer::{
    self, PackOptions, Packer, PackerStart, changed_sources, discover_runs, parse_and_write,
    rel_string,
};
use crate::progress::{count, thousands};
use crate::raw::discover::{Discovery, RunSource};
use crate::usage;

/// Rows copied per read when the last shard is rewritten (≈ 1 MiB).
const COPY_ROWS: u64 = 21_845;

pub fn run(args: &PackArgs) -> Result<()> {
    let started = Instant::now();
    let (out, has_pack) = OutputDir::open_for_update(&args.output)?;
    if !has_pack {
        log::info!(
            "{} holds no pack yet: --update packs the whole input",
            args.output.display()
        );
        let summary = create::pack_into(&args.job(), out)?;
        let elapsed = started.elapsed().as_secs_f64();
        pack::print_summary(&summary, args.json, &args.output, elapsed);
        return Ok(());
    }
    let existing = Existing::open(&args.output, args.shard_rows)?;
    check_search_family(&existing, args)?;
    let extended = args.search_stats.then_some(search::FAMILY);
    let dropped = companions_to_drop(&existing, &args.drop_companion, extended)?;
    let found = discover_runs(&args.input)?;
    let sorted = sort_runs(&existing, &found);
    if !sorted.changed.is_empty() && !args.skip_invalid {
        let reasons: Vec<&str> = sorted.changed.iter().map(|c| c.reason.as_str()).collect();
        return Err(changed_sources(&reasons));
    }
    let orphans_same = existing.orphans == orphan_paths(&found);
    let already_skipped = sorted
        .changed
        .iter()
        .all(|c| existing.skipped.get(&c.path) == Some(&c.reason));
    if sorted.new.is_empty() && orphans_same && already_skipped && dropped.is_empty() {
        let report = Report::nothing_new(&existing, &sorted);
        report.print(args, started.elapsed().as_secs_f64());
        return Ok(());
    }

    let staging = out.begin_staging()?;
    let mut report = extend(args, &existing, &found, &sorted, &dropped, &staging)?;
    if report.publish {
        let retired: Vec<String> = dropped
            .iter()
            .flat_map(|(_, files)| files.clone())
            .collect();
        out.publish_with(&report.kept_shards, &retired)?;
        report.removed_companions = dropped.into_iter().map(|(name, _)| name).collect();
    } else {
        drop(out); // removes the staging folder: the pack stays as it was
    }
    report.print(args, started.elapsed().as_secs_f64());
    Ok(())
}

/// The pack being extended, as read from its folder.
struct Existing {
    dir: PathBuf,
    shard_rows: Option<u64>,
    shards: Vec<Shard>,
    /// The `shards` table: rows and CRC-32C of each shard.
    records: Vec<ShardRecord>,
    runs: Vec<RunRow>,
    details: HashMap<i64, RunDetails>,
    valuations: ValuationTable,
    finding_counts: BTreeMap<String, u64>,
    skipped: HashMap<String, String>,
    orphans: Vec<String>,
    session: Vec<(String, String)>,
}

impl Existing {
    /// Opens the pack in `dir`, refusing what `--update` cannot extend.
    fn open(dir: &Path, shard_rows_arg: Option<u64>) -> Result<Existing> {
        let conn = shards::open_metadata(dir)?;
        let session = metadata::read_session(&conn)?;
        let fact = |key: &str| {
            session
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        if fact("shuffled") == Some("true") {
            return Err(usage(format!(
                "{} is a shuffled pack: --update appends runs in run order, which would leave the new rows unshuffled; update the unshuffled pack it was made from, then shuffle it again",
                dir.display()
            )));
        }
        if let Some(p) = fact("partition") {
            return Err(usage(format!(
                "{} is partition {p} of a drop (pack --partition); update the pack merged from the partitions instead",
                dir.display()
            )));
        }
        let shard_rows = match fact("shard_rows") {
            Some("none") => None,
            Some(n) => Some(n.parse::<u64>().ok().filter(|&n| n > 0).with_context(|| {
                format!(
                    "{}: session shard_rows {n:?} is not a row count",
                    dir.display()
                )
            })?),
            None => bail!(
                "{}: its session does not record shard_rows, so the pack's layout is unknown; --update extends packs this tool wrote",
                dir.display()
            ),
        };
        if shard_rows_arg.is_some() && shard_rows_arg != shard_rows {
            return Err(usage(format!(
                "--shard-rows {} differs from the pack's layout ({}); an update keeps the pack's layout (leave --shard-rows out)",
                shard_rows_arg.unwrap_or(0),
                shard_rows.map_or("a single steps.npy".to_string(), |n| format!(
                    "shards of {n} rows"
                ))
            )));
        }
        let shards = shards::open_shards(dir, false)?;
        let records = metadata::read_shard_records(&conn)?.with_context(|| {
            format!(
                "{} records no shard checksums (a pack from another tool); --update extends packs this tool wrote",
                dir.display()
            )
        })?;
        check_layout(dir, &shards, &records, shard_rows)?;
        Ok(Existing {
            dir: dir.to_path_buf(),
            shard_rows,
            runs: metadata::read_runs(&conn)?,
            details: metadata::read_run_details(&conn)?,
            valuations: shards::read_valuations(dir)?,
            finding_counts: metadata::read_finding_counts(&conn)?
                .into_iter()
                .map(|(k, n)| (k, n.max(0) as u64))
                .collect(),
            skipped: metadata::read_skipped(&conn)?.into_iter().collect(),
            orphans: metadata::read_orphans(&conn)?,
            session,
            shards,
            records,
        })
    }

    /// A count the session records (0 when it records none: a pack from an older version).
    fn session_count(&self, key: &str) -> u64 {
        self.session
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0)
    }

    fn total_rows(&self) -> u64 {
        self.records.iter().map(|r| r.rows).sum()
    }

    /// The last shard when it has room for more rows (it is then rewritten), else None.
    fn partial_last(&self) -> Option<usize> {
        let last = self.records.len().checked_sub(1)?;
        match self.shard_rows {
            None => Some(last),
            Some(limit) => (self.records[last].rows < limit).then_some(last),
        }
    }
}

/// The pack and the update agree on the search statistics: a pack that keeps them (the
/// `search` family) is updated with --search-stats (or drops the family), and --search-stats
/// extends only a pack that has them (its existing rows would have none).
fn check_search_family(existing: &Existing, args: &PackArgs) -> Result<()> {
    let has = !files::family_files(&existing.dir, search::FAMILY)?.is_empty();
    let dropping = args.drop_companion.iter().any(|d| d == search::FAMILY);
    let dir = existing.dir.display();
    match (has, args.search_stats, dropping) {
        (_, true, true) => Err(usage(
            "--search-stats keeps the search statistics and --drop-companion search removes them: pass one of them".into(),
        )),
        (true, false, false) => Err(usage(format!(
            "{dir} keeps search statistics (companion family `search`, from pack --search-stats) and the new rows would have none; pass --search-stats to keep theirs too, or --drop-companion search to remove the family"
        ))),
        (false, true, _) => Err(usage(format!(
            "--search-stats: {dir} was packed without it, so its {} rows have no search statistics for the family to hold; pack the drop again with --search-stats into a new folder, or update without --search-stats",
            thousands(existing.total_rows())
        ))),
        _ => Ok(()),
    }
}

/// The pack's companion families (name, files) that the update removes: every family must be
/// named by --drop-companion (the new rows would have no companion rows), and only those;
/// `extended` is the family the update writes rows of (`search` with --search-stats).
fn companions_to_drop(
    existing: &Existing,
    drop: &[String],
    extended: Option<&str>,
) -> Result<Vec<(String, Vec<String>)>> {
    let mut families: Vec<(String, Vec<String>)> = Vec::new();
    for file in files::companion_files(&existing.dir)? {
        let (name, _) = files::parse_file_name(&file).expect("a companion file name");
        if Some(name) == extended {
            continue;
        }
        match families.iter_mut().find(|(n, _)| n == name) {
            Some((_, files)) => files.push(file),
            None => families.push((name.to_string(), vec![file])),
        }
    }
    let kept: Vec<&str> = families
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !drop.iter().any(|d| d == n))
        .collect();
    if !kept.is_empty() {
        return Err(usage(format!(
            "{} has companion arrays ({}) aligned with its rows, and the new rows would have none; pass {} to remove them with this update (attach them again afterwards)",
            existing.dir.display(),
            kept.join(", "),
            kept.iter()
                .map(|n| format!("--drop-companion {n}"))
                .collect::<Vec<_>>()
                .join(" ")
        )));
    }
    // A name with no files is fine: a job run again after the family was removed.
    Ok(families)
}

/// Whether the files on disk (name, rows), in order, are exactly the ones `records` lists.
fn as_recorded<'a>(
    on_disk: impl ExactSizeIterator<Item = (&'a str, u64)>,
    records: &[ShardRecord],
) -> bool {
    on_disk.len() == records.len()
        && on_disk
            .zip(records)
            .all(|((name, rows), r)| name == r.file_name && rows == r.rows)
}

/// The shards on disk must be the ones the `shards` table records, all full but the last.
fn check_layout(
    dir: &Path,
    shards: &[Shard],
    records: &[ShardRecord],
    shard_rows: Option<u64>,
) -> Result<()> {
    let listed = shards.iter().map(|s| (s.name.as_str(), s.header.rows));
    if !as_recorded(listed, records) {
        bail!(
            "{}: the shard files do not match the shards table of metadata.db; run `dataset-packer validate {}`",
            dir.display(),
            dir.display()
        );
    }
    if let Some(limit) = shard_rows
        && let Some(short) = records[..records.len() - 1]
            .iter()
            .find(|r| r.rows != limit)
    {
        bail!(
            "{}: {} holds {} rows, but every shard before the last should hold {limit} (shard_rows); --update cannot extend this layout",
            dir.display(),
            short.file_name,
            short.rows
        );
    }
    Ok(())
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

/// Writes the extended pack into `staging`. When nothing new was packed and the metadata would
/// not change, the report says not to publish it.
fn extend(
    args: &PackArgs,
    existing: &Existing,
    found: &Discovery,
    sorted: &Sorted,
    dropped: &[(String, Vec<String>)],
    staging: &Path,
) -> Result<Report> {
    let workers = args.workers();
    let started = Instant::now();
    let (fingerprints, computed) = fingerprints::of_pack(
        &existing.dir,
        &existing.shards,
        &existing.runs,
        &existing.details,
        &existing.valuations,
        workers,
    )?;
    let db = MetadataWriter::extend_copy(&existing.dir, staging)?;
    for (name, _) in dropped {
        db.delete_companion(name)?;
    }
    if computed {
        for (run, fp) in existing.runs.iter().zip(&fingerprints) {
            db.set_fingerprint(run.id, fp)?;
        }
    }
    let rewritten = existing.partial_last();
    let kept: Vec<ShardRecord> =
        existing.records[..rewritten.unwrap_or(existing.records.len())].to_vec();
    let mut shards = ShardWriter::after(staging, existing.shard_rows, kept.clone());
    if let Some(last) = rewritten {
        copy_shard(&existing.shards[last], &existing.records[last], &mut shards)?;
    }
    let search = match args.search_stats {
        true => Some(search_writer(existing, staging, kept.len(), rewritten)?),
        false => None,
    };
    let in_pack: HashMap<Fingerprint, u32> = existing
        .runs
        .iter()
        .zip(&fingerprints)
        .map(|(r, fp)| (*fp, r.id as u32))
        .rev() // the lowest id wins for duplicates already in the pack
        .collect();
    let by_id: HashMap<i64, Fingerprint> = existing
        .runs
        .iter()
        .zip(&fingerprints)
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
        recheck.insert(path.clone(), (u32::try_from(*id)?, *fingerprint));
    }
    let mut packer = Packer::new(
        PackerStart {
            shards,
            search,
            db,
            next_run_id: u32::try_from(existing.runs.len()).context("more than 2^32 runs")?,
            valuations: existing.valuations.clone(),
            in_pack,
            recheck,
            finding_counts: existing.finding_counts.clone(),
        },
        PackOptions {
            skip_invalid: args.skip_invalid,
            dedupe: args.dedupe,
        },
    );
    for c in &sorted.changed {
        packer.skip(c.path.clone(), c.reason.clone())?;
    }
    parse_and_write(&sorted.new, &mut packer, workers, args.quiet, started)?;
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
        return Ok(Report {
            already_packed: packed.already_packed,
            ..Report::nothing_new(existing, sorted)
        });
    }

    let total_runs = u64::from(packed.next_run_id);
    let total_rows = packed.total_rows;
    let history = update_history(existing, args, &packed, rewritten.is_some())?;
    let facts = [
        ("total_rows", total_rows.to_string()),
        ("total_runs", total_runs.to_string()),
        ("shard_count", packed.shards.len().to_string()),
        ("skipped_runs", packed.db.count_skipped()?.to_string()),
        ("orphan_rows_files", found.orphans.len().to_string()),
        (
            search::ROWS_NOT_KEPT,
            (existing.session_count(search::ROWS_NOT_KEPT) + packed.search_rows_not_kept)
                .to_string(),
        ),
        ("updates", history),
    ];
    for (k, v) in &facts {
        packed.db.set_session(k, v)?;
    }
    let already_packed = packed.already_packed.clone();
    let reformed = packed.reformed.clone();
    let new_shards: Vec<ShardRecord> = packed.shards[kept.len()..].to_vec();
    let summary = packed.commit(sorted.new.iter().map(|r| r.rows_bytes).sum())?;
    let mut kept_shards: Vec<String> = kept.iter().map(|r| r.file_name.clone()).collect();
    if nothing_new {
        // Only the metadata changed: the staged copy of the last shard is the same bytes;
        // keep the original in place rather than replacing it.
        for s in &new_shards {
            std::fs::remove_file(staging.join(&s.file_name))
                .with_context(|| format!("removing the staged copy of {}", s.file_name))?;
            kept_shards.push(s.file_name.clone());
        }
        for name in files::companion_files(staging)? {
            std::fs::remove_file(staging.join(&name))
                .with_context(|| format!("removing the staged copy of {name}"))?;
        }
    }
    Ok(Report {
        publish: true,
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
        summary,
    })
}

/// Copies the rows of the shard being rewritten into the writer, checking them against the
/// checksum the pack recorded (a damaged shard is never extended).
fn copy_shard(shard: &Shard, record: &ShardRecord, writer: &mut ShardWriter) -> Result<()> {
    let file = shard.open()?;
    let data_len = (shard.header.rows as usize) * shard.row_bytes();
    copy_checked(
        shard.header.rows,
        &shard.path,
        record,
        writer,
        |start, n, buf| file.read_raw_into(start, n, buf),
        |data_crc| Ok(shard.file_crc(data_crc, data_len)?),
    )
}

/// Copies `rows` rows of the file at `path` into `writer` (`read` gives rows `start..start+n`),
/// and checks the file's checksum (`file_crc` of the data's) against its record.
fn copy_checked(
    rows: u64,
    path: &Path,
    record: &ShardRecord,
    writer: &mut ShardWriter,
    read: impl Fn(u64, u64, &mut Vec<u8>) -> Result<()>,
    file_crc: impl Fn(u32) -> Result<u32>,
) -> Result<()> {
    let mut buf = Vec::new();
    let mut data_crc = 0u32;
    let mut done = 0u64;
    while done < rows {
        let n = (rows - done).min(COPY_ROWS);
        read(done, n, &mut buf)?;
        let crc = crate::crc::crc32c(&buf);
        data_crc = crate::crc::combine(data_crc, crc, buf.len());
        writer.write_rows_with_crc(&buf, crc)?;
        done += n;
    }
    let crc = file_crc(data_crc)?;
    if crc != record.crc32c {
        bail!(
            "{} does not match its recorded checksum (crc32c recorded {:08x}, computed {crc:08x}); nothing was written; run `dataset-packer validate`",
            path.display(),
            record.crc32c
        );
    }
    Ok(())
}

/// The writer of the `search` family, continuing the pack's: its files before shard `kept` stay
/// in place (their records carry over), and the file of the rewritten last shard is copied
/// into staging first, checked against its recorded checksum.
fn search_writer(
    existing: &Existing,
    staging: &Path,
    kept: usize,
    rewritten: Option<usize>,
) -> Result<ShardWriter> {
    let dir = existing.dir.display();
    let scan = families::scan(&existing.dir, &existing.shards)?;
    if let Some((_, problem)) = scan.problems.iter().find(|(n, _)| n == search::FAMILY) {
        bail!(
            "{dir}: the search family does not line up with the shards: {problem}; run `dataset-packer validate {dir}`"
        );
    }
    let family = scan
        .family(search::FAMILY)
        .expect("checked: the pack has the family");
    if !family.holds_search_stats() {
        bail!(
            "{dir}: its search family holds {}, not the search statistics this version writes ({}); --search-stats cannot extend it",
            family.describe(),
            search::DESCR
        );
    }
    let conn = shards::open_metadata(&existing.dir)?;
    let mut records: Vec<ShardRecord> = metadata::read_companions(&conn)?
        .into_iter()
        .filter(|r| r.name == search::FAMILY)
        .map(|r| ShardRecord {
            shard: r.shard,
            file_name: r.file_name,
            rows: r.rows,
            bytes: r.bytes,
            crc32c: r.crc32c,
        })
        .collect();
    records.sort_by_key(|r| r.shard);
    let on_disk = family
        .files
        .iter()
        .map(|f| (f.file_name.as_str(), f.header.rows()));
    if !as_recorded(on_disk, &records) {
        bail!(
            "{dir}: the search files do not match the companions table of metadata.db; run `dataset-packer validate {dir}`"
        );
    }
    let mut writer = ShardWriter::after_with_layout(
        staging,
        existing.shard_rows,
        FileLayout::search(),
        records[..kept].to_vec(),
    );
    if let Some(last) = rewritten {
        copy_companion_file(family, last, &records[last], &mut writer)?;
    }
    Ok(writer)
}

/// Copies file `shard` of a companion family into `writer`, checked against its record.
fn copy_companion_file(
    family: &families::Family,
    shard: usize,
    record: &ShardRecord,
    writer: &mut ShardWriter,
) -> Result<()> {
    let file = family.open(shard)?;
    let f = &family.files[shard];
    copy_checked(
        f.header.rows(),
        &f.path,
        record,
        writer,
        |start, n, buf| file.read_rows(start, n, buf),
        |data_crc| file.file_crc(data_crc),
    )
}

/// The session's `updates` history with this update appended (a JSON array).
fn update_history(
    existing: &Existing,
    args: &PackArgs,
    packed: &packer::Packed,
    rewrote_last: bool,
) -> Result<String> {
    let mut history: Vec<serde_json::Value> = existing
        .session
        .iter()
        .find(|(k, _)| k == "updates")
        .and_then(|(_, v)| serde_json::from_str(v).ok())
        .unwrap_or_default();
    let input = std::fs::canonicalize(&args.input).unwrap_or_else(|_| args.input.clone());
    let kept = existing.records.len() - usize::from(rewrote_last);
    history.push(json!({
        "utc": crate::format::metadata::utc_now(),
        "tool": format!("dataset-packer {}", env!("CARGO_PKG_VERSION")),
        "command_line": crate::cli::command_line(),
        "input": input.display().to_string(),
        "runs_added": packed.next_run_id - packed.first_run_id,
        "rows_added": packed.rows_added,
        "first_run_id": packed.first_run_id,
        "shards_rewritten": usize::from(rewrote_last),
        "shards_added": packed.shards.len() - kept - usize::from(rewrote_last),
    }));
    Ok(serde_json::to_string(&history)?)
}

/// What an update did, for the user.
struct Report {
    /// Whether there is anything to publish.
    publish: bool,
    /// Companion families removed (--drop-companion).
    removed_companions: Vec<String>,
    /// Shards of the old pack that stay in place.
    kept_shards: Vec<String>,
    rewritten: Vec<String>,
    added: Vec<String>,
    packed_by_path: usize,
    already_packed: Vec<(String, u32)>,
    /// Packed runs whose rows file was gzipped or unzipped since, same content: (path, id).
    reformed: Vec<(String, u32)>,
    total_runs: u64,
    total_rows: u64,
    summary: packer::Summary,
}

impl Report {
    fn nothing_new(existing: &Existing, sorted: &Sorted) -> Report {
        Report {
            publish: false,
            removed_companions: Vec::new(),
            kept_shards: Vec::new(),
            rewritten: Vec::new(),
            added: Vec::new(),
            packed_by_path: sorted.packed_by_path,
            already_packed: Vec::new(),
            reformed: Vec::new(),
            total_runs: existing.runs.len() as u64,
            total_rows: existing.total_rows(),
            summary: packer::Summary {
                runs: 0,
                rows: 0,
                shards: Vec::new(),
                skipped: Vec::new(),
                findings: Default::default(),
                compressed_bytes: 0,
            },
        }
    }

    fn print(&self, args: &PackArgs, elapsed: f64) {
        let s = &self.summary;
        if args.json {
            let mut doc = s.to_json(&args.output, elapsed);
            let extra = json!({
                "update": true,
                "new_runs": s.runs,
                "new_rows": s.rows,
                "total_runs": self.total_runs,
                "total_rows": self.total_rows,
                "already_packed_by_path": self.packed_by_path,
                "already_packed_by_content": self.already_packed.iter().map(|(p, id)| json!({"path": p, "run_id": id})).collect::<Vec<_>>(),
                "rows_file_changed_form": self.reformed.iter().map(|(p, id)| json!({"path": p, "run_id": id})).collect::<Vec<_>>(),
                "shards_rewritten": self.rewritten,
                "shards_added": self.added,
                "companions_removed": self.removed_companions,
            });
            if let (Some(doc), Some(extra)) = (doc.as_object_mut(), extra.as_object()) {
                doc.remove("shards");
                doc.extend(extra.clone());
            }
            println!("{doc}");
            return;
        }
        println!(
            "updated {}: {}, {} (now {}, {})",
            args.output.display(),
            count(u64::from(s.runs), "new run", "new runs"),
            count(s.rows, "new row", "new rows"),
            count(self.total_runs, "run", "runs"),
            count(self.total_rows, "row", "rows")
        );
        println!(
            "  already packed: {} by path, {} by content (moved or copied)",
            count(self.packed_by_path as u64, "run", "runs"),
            thousands(self.already_packed.len() as u64)
        );
        for (path, id) in self.already_packed.iter().take(10) {
            println!("    {path}: same content as run {id}");
        }
        if !self.reformed.is_empty() {
            println!(
                "  rows file gzipped or unzipped since packing, same content: {} (the pack records the new file)",
                count(self.reformed.len() as u64, "run", "runs")
            );
            for (path, id) in self.reformed.iter().take(10) {
                println!("    {path}: run {id}");
            }
        }
        println!(
            "  shards: {} rewritten{}, {} added{}",
            self.rewritten.len(),
            list(&self.rewritten),
            self.added.len(),
            list(&self.added)
        );
        if !self.removed_companions.is_empty() {
            println!(
                "  companions removed (--drop-companion): {}",
                self.removed_companions.join(", ")
            );
        }
        pack::print_details(s, elapsed);
    }
}

fn list(names: &[String]) -> String {
    match names {
        [] => String::new(),
        [one] => format!(" ({one})"),
        [first, .., last] => format!(" ({first} … {last})"),
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
