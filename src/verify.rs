//! What `validate` checks, as library functions: one per family of checks (shard files and
//! headers, `metadata.db`, the valuation table, checksums, companions, the per-row checks of
//! one streaming pass over every row, runs against the rows, the run index, fingerprints).
//! [`check`] runs them all in report order and returns a [`Report`]; the `validate` command
//! prints it, [`crate::Pack::verify`] turns a failed one into an error.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::error::{Result, fail};

use crate::findings;
use crate::format::board::{self, LineTables};
use crate::format::fingerprint::Fingerprint;
use crate::format::metadata::{self, RowLocation};
use crate::format::row::{ROW_BYTES, StepRow, padding_is_zero};
use crate::format::valuation::{self, ValuationTable};
use crate::ordered::ordered_try_map;
use crate::pack::checks::{Check, Tally, check_checksums, check_total_steps};
use crate::pack::families;
use crate::pack::fingerprints;
use crate::pack::open;
use crate::pack::shards::{self, Access, RunSlots, Shard};
use crate::pack::versions::{History, Version, VersionFile};
use crate::progress::{Bar, Observer};

/// Rows per memory-mapped chunk (6 MiB): small enough that resident memory stays bounded.
const CHUNK_ROWS: u64 = 128 * 1024;

impl crate::Pack {
    /// Checks everything `dataset-packer validate` checks, reading every byte (on all cores):
    /// an error lists the failed checks, each with an example naming the file (and row).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// pack.verify()?;
    /// # Ok(()) }
    /// ```
    pub fn verify(&self) -> Result<()> {
        let options = Options {
            deep: false,
            workers: crate::default_workers(),
            progress: Default::default(),
            legacy_ok: false,
            scan_rows: true,
        };
        let report = check(self.path(), &options)?;
        if !report.valid() {
            fail!(
                Corrupt,
                "{} is not valid:\n{}",
                self.path().display(),
                report.failures()
            );
        }
        Ok(())
    }
}

/// Per-row checks, in report order.
const ROW_CHECKS: [&str; 8] = [
    "run_id in runs",
    "valuation_type defined",
    "move_dir <= 3",
    "ev_legal <= 15",
    "padding bytes zero",
    "tile_65536_mask on nibble-15 cells only",
    "branch_evs finite",
    "deep: board_eval and ev_legal recomputed",
];
const FINDINGS: [&str; 3] = [
    "illegal_move_played",
    "ev_on_illegal_move",
    "max_rank_mismatch",
];

/// What one run looks like in the rows seen so far (mergeable in row order).
#[derive(Debug, Clone, Copy)]
struct RunAgg {
    count: u64,
    first_row: u64,
    first_step: u32,
    last_step: u32,
    /// step_index strictly increasing within the rows seen.
    increasing: bool,
    /// Number of separate stretches of rows.
    segments: u32,
    min_step: u32,
    max_step: u32,
    step_hash: u64,
}

fn mix(step: u32) -> u64 {
    let mut z = u64::from(step).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl RunAgg {
    fn start(step: u32, row: u64) -> RunAgg {
        RunAgg {
            count: 1,
            first_row: row,
            first_step: step,
            last_step: step,
            increasing: true,
            segments: 1,
            min_step: step,
            max_step: step,
            step_hash: mix(step),
        }
    }

    fn push(&mut self, step: u32) {
        self.count += 1;
        self.increasing &= step > self.last_step;
        self.last_step = step;
        self.min_step = self.min_step.min(step);
        self.max_step = self.max_step.max(step);
        self.step_hash = self.step_hash.wrapping_add(mix(step));
    }

    /// Appends `later` (rows after ours); `adjacent` when it continues our last stretch.
    fn merge(&mut self, later: &RunAgg, adjacent: bool) {
        self.count += later.count;
        self.increasing &= later.increasing && later.first_step > self.last_step;
        self.last_step = later.last_step;
        self.segments += later.segments - u32::from(adjacent);
        self.min_step = self.min_step.min(later.min_step);
        self.max_step = self.max_step.max(later.max_step);
        self.step_hash = self.step_hash.wrapping_add(later.step_hash);
    }

    /// For a shuffled pack: whether the steps are certainly distinct. True when they are
    /// exactly the contiguous range min..=max (count and hash sum both match); None when the
    /// range has gaps, so only an exact check can tell.
    fn distinct_steps(&self) -> Option<bool> {
        let span = u64::from(self.max_step - self.min_step) + 1;
        if self.count > span {
            return Some(false);
        }
        if self.count < span {
            return None;
        }
        let expected = (self.min_step..=self.max_step).fold(0u64, |h, s| h.wrapping_add(mix(s)));
        Some(expected == self.step_hash)
    }
}

/// What the row pass learned from one chunk.
struct ChunkScan {
    /// (run slot, aggregate) in order of appearance; consecutive rows of a run share an entry.
    segments: Vec<(u32, RunAgg)>,
    /// Used instead of segments in shuffled packs, where every row may start a new run.
    by_run: HashMap<u32, RunAgg>,
    rows: [Tally; 8],
    findings: [Tally; 3],
    crc: u32,
    bytes: usize,
}

/// Largest nibble of every 16-bit value: four lookups give a board's largest exponent.
fn max_nibble_table() -> Vec<u8> {
    (0..=u16::MAX)
        .map(|v| {
            [v >> 12, (v >> 8) & 0xf, (v >> 4) & 0xf, v & 0xf]
                .into_iter()
                .max()
                .unwrap() as u8
        })
        .collect()
}

/// Read-only facts the row pass needs.
struct Context<'a> {
    slot_of: &'a RunSlots,
    max_nibble: &'a [u8],
    names: usize,
    shuffled: bool,
    deep: bool,
    tables: &'a LineTables,
}

fn board_max_rank(table: &[u8], board: u64, mask: u16) -> u8 {
    if mask != 0 {
        return 16;
    }
    let m = |k: u32| table[((board >> (16 * k)) & 0xffff) as usize];
    m(0).max(m(1)).max(m(2)).max(m(3))
}

fn scan_chunk(
    ctx: &Context,
    shard: &Shard,
    start: u64,
    count: u64,
    first_global: u64,
) -> Result<ChunkScan> {
    let rows = shard.read_aligned(start, count)?;
    let bytes: &[u8] = &rows;
    let mut out = ChunkScan {
        segments: Vec::new(),
        by_run: HashMap::new(),
        rows: Default::default(),
        findings: Default::default(),
        crc: crate::crc::crc32c(rows.raw()),
        bytes: rows.raw().len(),
    };
    let at = |i: usize, run: u32| format!("{} row {} (run {run})", shard.name, start + i as u64);
    let mut last_slot: Option<u32> = None;
    let mut last_lookup: Option<(u32, Option<u32>)> = None;
    for (i, raw) in bytes.chunks_exact(ROW_BYTES).enumerate() {
        let r = StepRow::from_bytes(raw);
        let global = first_global + i as u64;
        let slot = match last_lookup {
            Some((id, slot)) if id == r.run_id => slot,
            _ => {
                let slot = ctx.slot_of.get(r.run_id);
                last_lookup = Some((r.run_id, slot));
                slot
            }
        };
        match slot {
            None => out.rows[0]
                .add(|| format!("{}: run_id {} is not in runs", at(i, r.run_id), r.run_id)),
            Some(slot) => {
                if ctx.shuffled {
                    out.by_run
                        .entry(slot)
                        .and_modify(|a| a.push(r.step_index))
                        .or_insert_with(|| RunAgg::start(r.step_index, global));
                } else if last_slot == Some(slot) {
                    out.segments
                        .last_mut()
                        .expect("a segment is open")
                        .1
                        .push(r.step_index);
                } else {
                    out.segments
                        .push((slot, RunAgg::start(r.step_index, global)));
                    last_slot = Some(slot);
                }
            }
        }
        if r.valuation_type as usize >= ctx.names {
            out.rows[1].add(|| {
                format!(
                    "{}: valuation_type {} is not defined",
                    at(i, r.run_id),
                    r.valuation_type
                )
            });
        }
        if r.move_dir > 3 {
            out.rows[2].add(|| format!("{}: move_dir is {}", at(i, r.run_id), r.move_dir));
        }
        if r.ev_legal > 15 {
            out.rows[3].add(|| format!("{}: ev_legal is {}", at(i, r.run_id), r.ev_legal));
        }
        if !padding_is_zero(raw) {
            out.rows[4].add(|| {
                format!(
                    "{}: padding bytes are {:02x} {:02x}",
                    at(i, r.run_id),
                    raw[26],
                    raw[27]
                )
            });
        }
        let mask = r.tile_65536_mask;
        if mask != 0
            && (0..16).any(|c| mask & (1 << c) != 0 && (r.board >> (60 - 4 * c)) & 0xf != 15)
        {
            out.rows[5].add(|| {
                format!(
                    "{}: mask {mask:#06x} marks a cell whose nibble is not 15",
                    at(i, r.run_id)
                )
            });
        }
        if !r.branch_evs.iter().all(|e| e.is_finite()) {
            out.rows[6].add(|| format!("{}: branch_evs {:?}", at(i, r.run_id), r.branch_evs));
        }
        if r.move_dir <= 3 && r.ev_legal & (1 << r.move_dir) == 0 {
            out.findings[0].add(|| {
                format!(
                    "{}: played {} but ev_legal is {:04b}",
                    at(i, r.run_id),
                    board::MOVE_NAMES[r.move_dir as usize],
                    r.ev_legal
                )
            });
        }
        if (0..4).any(|k| r.branch_evs[k] != 0.0 && r.ev_legal & (1 << k) == 0) {
            out.findings[1].add(|| {
                format!(
                    "{}: EVs {:?} with ev_legal {:04b}",
                    at(i, r.run_id),
                    r.branch_evs,
                    r.ev_legal
                )
            });
        }
        let max_rank = board_max_rank(ctx.max_nibble, r.board, mask);
        if r.max_rank != max_rank {
            out.findings[2].add(|| {
                format!(
                    "{}: max_rank {} but the board's largest exponent is {max_rank}",
                    at(i, r.run_id),
                    r.max_rank
                )
            });
        }
        if ctx.deep {
            let cells = board::unpack(r.board, mask);
            let (eval, legal) = ctx.tables.eval_and_legal(&cells, r.board, mask);
            if eval != r.board_eval || legal != r.ev_legal {
                out.rows[7].add(|| {
                    format!(
                        "{}: stored board_eval {} ev_legal {:04b}, recomputed {eval} {legal:04b}",
                        at(i, r.run_id),
                        r.board_eval,
                        r.ev_legal
                    )
                });
            }
        }
    }
    Ok(out)
}

/// Everything the checks found.
#[derive(Debug)]
pub struct Report {
    pub pack: PathBuf,
    /// Every check, in report order.
    pub checks: Vec<Check>,
    /// What the source logs did (reported, not failures), by kind.
    pub findings: Vec<(&'static str, Tally)>,
    /// Runs `pack --skip-invalid` left out (source path, reason), as `skipped_runs` records
    /// them: reported, not failures.
    pub skipped_runs: Vec<(String, String)>,
    pub rows: u64,
    pub runs: usize,
    pub shards: usize,
    /// Bytes of the shard files.
    pub bytes: u64,
    pub deep: bool,
}

impl Report {
    pub fn valid(&self) -> bool {
        self.checks.iter().all(|c| c.failures == 0)
    }

    /// The failed checks with their first example, one per line (for other commands' errors).
    pub fn failures(&self) -> String {
        self.checks
            .iter()
            .filter(|c| c.failures > 0)
            .map(|c| {
                format!(
                    "{}: {}",
                    c.name,
                    c.examples.first().map_or("", String::as_str)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Whether the shard checksums were recorded (and so were checked).
    pub fn has_checksums(&self) -> bool {
        self.checks
            .iter()
            .any(|c| c.name == "shard checksums" && c.ran)
    }
}

/// How to check a pack.
#[derive(Debug, Clone)]
pub struct Options {
    pub deep: bool,
    pub workers: usize,
    pub progress: Observer,
    /// Accept legacy packed 46-byte shards (merge reads them) instead of failing them.
    pub legacy_ok: bool,
    /// Stream every row (checksums, per-row and per-run checks). Without it only the structure
    /// and metadata are checked: for a caller that reads every row itself and verifies the
    /// recorded checksums as it goes (merge), so the pack is not read twice.
    pub scan_rows: bool,
}

/// Runs every check on the pack at `pack` (a folder, or a URL: its files are fetched into the
/// cache first, checked against their recorded CRC-32C), family by family, in report order.
pub fn check(pack: &Path, options: &Options) -> Result<Report> {
    open::with_located(pack, open::Wanted::Streamed, |pack| {
        check_located(pack, options)
    })
}

/// [`check`] of a pack already located; the report names it as the user did.
pub(crate) fn check_located(pack: &open::Located, options: &Options) -> Result<Report> {
    let mut report = check_dir(pack.dir(), options)?;
    report.pack = pack.given().to_path_buf();
    for c in &mut report.checks {
        for text in c.examples.iter_mut().chain(c.note.as_mut()) {
            *text = pack.name_text(text);
        }
    }
    Ok(report)
}

fn check_dir(dir: &Path, options: &Options) -> Result<Report> {
    let Options {
        deep,
        workers,
        ref progress,
        legacy_ok,
        scan_rows,
    } = *options;
    // Every file this reads, opened at once from one version of the pack, even while
    // another process publishes into the folder.
    let Found {
        files,
        shards,
        db_check,
        conn,
        vt_check,
        valuations,
        scan,
    } = open::snapshot(dir, || find(dir, legacy_ok))?;
    let names = valuations
        .as_ref()
        .map_or(valuation::MAX_NAMES, |t| t.len());
    let mut checks = vec![files, db_check, vt_check];

    // What metadata.db says.
    let runs = match &conn {
        Some(c) => metadata::read_run_steps(c)?,
        None => Vec::new(),
    };
    let shuffled = match &conn {
        Some(c) => metadata::session_value(c, "shuffled")?.as_deref() == Some("true"),
        None => false,
    };
    let skipped_runs = match &conn {
        Some(c) => metadata::read_skipped(c)?,
        None => Vec::new(),
    };
    let (bad_ids, ids) = check_run_ids(&runs);
    if bad_ids.failures > 0 {
        checks.push(bad_ids);
    }
    let slot_of = RunSlots::new(&ids);
    let shard_first_global = shards::shard_starts(&shards);
    let total_rows = *shard_first_global
        .last()
        .expect("a start per shard and the end");
    let total_bytes: u64 = shards.iter().map(|s| s.file_len).sum();

    let max_nibble = max_nibble_table();
    let tables = LineTables::new();
    let ctx = Context {
        slot_of: &slot_of,
        max_nibble: &max_nibble,
        names,
        shuffled,
        deep,
        tables: &tables,
    };
    let pass = scan_rows_once(
        &ctx,
        &shards,
        &shard_first_global,
        runs.len(),
        scan_rows,
        workers,
        progress,
    )?;

    checks.push(check_shard_checksums(
        dir,
        conn.as_ref(),
        &shards,
        scan_rows.then_some(&pass.data_crcs[..]),
    )?);
    checks.push(check_companions(&scan, conn.as_ref(), scan_rows)?);
    checks.push(check_history(conn.as_ref(), &shards)?);
    checks.push(check_block_records(conn.as_ref())?);
    checks.push(check_leftovers(dir));
    if !scan_rows {
        if conn.is_some() {
            checks.push(check_total_steps(&runs, total_rows));
        }
        return Ok(Report {
            pack: dir.to_path_buf(),
            checks,
            findings: Vec::new(),
            skipped_runs,
            rows: total_rows,
            runs: runs.len(),
            shards: shards.len(),
            bytes: total_bytes,
            deep,
        });
    }

    checks.extend(row_checks(&pass.row_tallies, deep, conn.is_some()));

    // Runs as metadata.db describes them vs the rows found.
    if let Some(conn) = &conn {
        checks.push(check_run_steps(&runs, &pass.aggs, total_rows));
        checks.push(check_step_order(
            &runs, &pass.aggs, shuffled, &shards, &slot_of,
        )?);
        checks.push(match metadata::read_run_index(conn)? {
            _ if shuffled => Check::skipped("run index", "not applicable: the pack is shuffled"),
            None => Check::skipped("run index", "no run index recorded"),
            Some(index) => {
                check_run_index(&index, &runs, &pass.aggs, &shard_first_global, total_rows)
            }
        });
        // Recomputing reads every run where the runs table places it: only on a sound pack.
        let sound = checks.iter().all(|c| c.failures == 0);
        let recompute = valuations
            .as_ref()
            .filter(|_| deep && !shuffled && sound)
            .map(|table| (&shards[..], table, workers));
        checks.push(check_fingerprints(conn, recompute, shuffled)?);
    }

    Ok(Report {
        pack: dir.to_path_buf(),
        checks,
        findings: FINDINGS.iter().copied().zip(pass.finding_tallies).collect(),
        skipped_runs,
        rows: total_rows,
        runs: runs.len(),
        shards: shards.len(),
        bytes: total_bytes,
        deep,
    })
}

/// What the history's own records must be, whatever the files hold: versions numbered 1, 2,
/// … without a gap, each listing its steps files, made at times that read as UTC and never go
/// back, by a command recorded as a list of words; each version's runs (the smallest ids)
/// holding its rows; and every tag naming a version the pack has.
fn check_history_records(
    conn: &rusqlite::Connection,
    history: &History,
    c: &mut Check,
) -> Result<()> {
    let mut raw =
        conn.prepare("SELECT version, created_utc, command FROM versions ORDER BY version")?;
    let raw: Vec<(i64, String, String)> = raw
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut last_time: Option<&str> = None;
    for (i, (version, created, command)) in raw.iter().enumerate() {
        if *version != i as i64 + 1 {
            c.fail(|| {
                format!(
                    "versions are not numbered 1, 2, … without a gap: version {} is missing (the next recorded is {version})",
                    i + 1
                )
            });
            break;
        }
        if !is_utc_time(created) {
            c.fail(|| format!("version {version}: created_utc {created:?} is not a UTC time like 2026-11-28T10:58:11Z"));
        } else if last_time.is_some_and(|t| created.as_str() < t) {
            c.fail(|| {
                format!(
                    "version {version} was made at {created}, before version {}",
                    version - 1
                )
            });
        }
        last_time = Some(created);
        if serde_json::from_str::<Vec<String>>(command).is_err() {
            c.fail(|| {
                format!(
                    "version {version}: its command {:?} is not a JSON list of strings",
                    command.chars().take(60).collect::<String>()
                )
            });
        }
    }
    for v in &history.versions {
        if !v.files.iter().any(|f| f.family == metadata::STEPS_FAMILY) {
            c.fail(|| format!("version {} lists no steps files", v.version));
        }
    }
    // In id order, so a version's runs are a prefix.
    let runs = metadata::read_run_steps(conn)?;
    for v in &history.versions {
        let held: i64 = runs.iter().take(v.runs as usize).map(|(_, s)| *s).sum();
        if v.runs as usize > runs.len() || held as u64 != v.rows {
            c.fail(|| {
                format!(
                    "version {} records {} runs and {} rows, but its runs (the {} smallest ids) hold {held} rows",
                    v.version, v.runs, v.rows, v.runs
                )
            });
        }
    }
    let mut tags = conn.prepare("SELECT name, version FROM version_tags ORDER BY name")?;
    let tags: Vec<(String, i64)> = tags
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (name, version) in tags {
        if !history
            .versions
            .iter()
            .any(|v| i64::from(v.version) == version)
        {
            c.fail(|| {
                format!("the tag {name} names version {version}, which the pack does not have")
            });
        }
    }
    Ok(())
}

/// `YYYY-MM-DDTHH:MM:SSZ`, as the history records times.
fn is_utc_time(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| b[range].iter().all(u8::is_ascii_digit);
    b.len() == 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'Z'
}

/// The files of the pack as [`check_dir`] found them, each with its check.
struct Found {
    files: Check,
    shards: Vec<Shard>,
    db_check: Check,
    conn: Option<rusqlite::Connection>,
    vt_check: Check,
    valuations: Option<ValuationTable>,
    scan: families::Scan,
}

/// Opens (and checks) every file of the pack in `dir` that validating it reads.
fn find(dir: &Path, legacy_ok: bool) -> Result<Found> {
    let (files, shards) = check_shard_files(dir, legacy_ok)?;
    let (db_check, conn) = check_metadata_db(dir);
    let (vt_check, valuations) = check_valuation_table(dir);
    let scan = families::scan(dir, &shards)?;
    Ok(Found {
        files,
        shards,
        db_check,
        conn,
        vt_check,
        valuations,
        scan,
    })
}

/// The history of versions: each version's files are in the folder and hold at least its
/// rows, its steps files add up to its rows, rows and runs only grow, and the latest version is
/// exactly what the folder and the `shards` and `companions` tables hold.
pub fn check_history(conn: Option<&rusqlite::Connection>, shards: &[Shard]) -> Result<Check> {
    const NAME: &str = "versions";
    let Some(conn) = conn else {
        return Ok(Check::skipped(NAME, "no metadata.db"));
    };
    let history = History::read(conn)?;
    if !history.recorded {
        return Ok(Check::skipped(
            NAME,
            "made before versions: read as version 1 of itself",
        ));
    }
    let mut c = Check::new(NAME);
    let families = metadata::read_companions(conn)?;
    let file_rows = |name: &str| -> Option<u64> {
        if let Some(s) = shards.iter().find(|s| s.name == name) {
            return Some(s.header.rows);
        }
        families
            .iter()
            .find(|f| f.file_name == name)
            .map(|f| f.rows)
    };
    check_history_records(conn, &history, &mut c)?;
    let mut before: Option<&Version> = None;
    for v in &history.versions {
        let steps: u64 = v
            .files
            .iter()
            .filter(|f| f.family == metadata::STEPS_FAMILY)
            .map(|f| f.rows)
            .sum();
        if steps != v.rows && v.files.iter().any(|f| f.family == metadata::STEPS_FAMILY) {
            c.fail(|| {
                format!(
                    "version {}: its shards hold {steps} rows, it records {}",
                    v.version, v.rows
                )
            });
        }
        if let Some(b) = before
            && (v.rows < b.rows || v.runs < b.runs)
        {
            c.fail(|| {
                format!(
                    "version {} has {} rows and {} runs, fewer than version {} ({} rows, {} runs)",
                    v.version, v.rows, v.runs, b.version, b.rows, b.runs
                )
            });
        }
        // A family removed later is gone with its files; every other file must still be there.
        let kept = |f: &VersionFile| {
            f.family == metadata::STEPS_FAMILY || history.removed_in(v.version, &f.family).is_none()
        };
        for f in v.files.iter().filter(|f| kept(f)) {
            match file_rows(&f.file_name) {
                None => c.fail(|| format!("version {}: {} is missing", v.version, f.file_name)),
                Some(rows) if rows < f.rows => c.fail(|| {
                    format!(
                        "version {}: {} has {rows} rows, the version has {} of them",
                        v.version, f.file_name, f.rows
                    )
                }),
                Some(_) => {}
            }
        }
        before = Some(v);
    }
    let latest = history.latest();
    let runs: i64 = conn.query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))?;
    let rows: u64 = shards.iter().map(|s| s.header.rows).sum();
    if latest.rows != rows || latest.runs != runs as u64 {
        c.fail(|| {
            format!(
                "the latest version ({}) records {} rows and {} runs, the pack has {rows} rows and {runs} runs",
                latest.version, latest.rows, latest.runs
            )
        });
    }
    // A pack that records no shards (its checksums dropped, as another tool's) is compared
    // on its families only: its shards were compared on rows above.
    let recorded = metadata::read_shard_records(conn)?;
    let steps_recorded = recorded.is_some();
    let now: Vec<(String, u64, u64, String)> = recorded
        .unwrap_or_default()
        .iter()
        .map(|r| {
            (
                r.file_name.clone(),
                r.rows,
                r.bytes,
                format!("{:08x}", r.crc32c),
            )
        })
        .chain(families.iter().map(|r| {
            (
                r.file_name.clone(),
                r.rows,
                r.bytes,
                format!("{:08x}", r.crc32c),
            )
        }))
        .collect();
    let then: Vec<(String, u64, u64, String)> = latest
        .files
        .iter()
        .filter(|f| steps_recorded || f.family != metadata::STEPS_FAMILY)
        .map(|f| (f.file_name.clone(), f.rows, f.bytes, f.crc32c.clone()))
        .collect();
    // A file a version shares whole with the pack now (same rows) is the same bytes.
    for v in &history.versions {
        for f in &v.files {
            let shared = now
                .iter()
                .find(|(name, rows, ..)| *name == f.file_name && *rows == f.rows);
            if let Some((_, _, bytes, crc)) = shared
                && (f.bytes != *bytes || f.crc32c != *crc)
            {
                c.fail(|| {
                    format!(
                        "version {}: {} is recorded with {} bytes, crc32c {}, but the same {} rows are {bytes} bytes, crc32c {crc}",
                        v.version, f.file_name, f.bytes, f.crc32c, f.rows
                    )
                });
            }
        }
    }
    if sorted(now) != sorted(then) {
        c.fail(|| {
            format!(
                "the latest version ({}) lists other files than metadata.db's shards and companions tables: the pack was changed without recording a version",
                latest.version
            )
        });
    }
    Ok(c)
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// Shard files and headers: names, contiguity, readable headers of the pack dtype, sizes the
/// headers promise; legacy packed shards fail unless `legacy_ok`. Returns the usable shards.
pub fn check_shard_files(dir: &Path, legacy_ok: bool) -> Result<(Check, Vec<Shard>)> {
    let listing = open::listing(dir)?;
    let mut files = Check::new("shard files and headers");
    for p in &listing.problems {
        files.fail(|| p.clone());
    }
    // Legacy shards are read like the others (their rows checked), but are not loader-ready.
    if !legacy_ok {
        for name in &listing.legacy {
            files.fail(|| {
                format!(
                    "{name} is a legacy packed 46-byte shard (no padding); {}",
                    shards::upgrade_hint(dir)
                )
            });
        }
    }
    Ok((files, listing.shards))
}

/// `metadata.db` exists, opens read-only and has the schema; the connection when it is usable.
pub fn check_metadata_db(dir: &Path) -> (Check, Option<rusqlite::Connection>) {
    let db_path = dir.join(metadata::FILE_NAME);
    let mut db_check = Check::new("metadata.db schema");
    let conn = if db_path.exists() {
        match open::metadata_file(&db_path) {
            Ok(c) => match metadata::schema_problems(&c) {
                Ok(problems) if problems.is_empty() => Some(c),
                Ok(problems) => {
                    for p in problems {
                        db_check.fail(|| p);
                    }
                    None
                }
                Err(e) => {
                    db_check.fail(|| format!("metadata.db cannot be read: {e:#}"));
                    None
                }
            },
            Err(e) => {
                db_check.fail(|| format!("{e:#}"));
                None
            }
        }
    } else {
        db_check.fail(|| "metadata.db is missing".into());
        None
    };
    (db_check, conn)
}

/// `valuation_types.json` reads; the table when it does.
pub fn check_valuation_table(dir: &Path) -> (Check, Option<ValuationTable>) {
    let mut vt_check = Check::new("valuation_types.json");
    let table = match open::valuations(dir) {
        Ok(t) => Some(t),
        Err(e) => {
            vt_check.fail(|| format!("{e:#}"));
            None
        }
    };
    (vt_check, table)
}

/// Every `runs.id` fits the rows' u32 `run_id`; the ids as rows carry them (u32::MAX for one
/// that does not fit).
fn check_run_ids(runs: &[(i64, i64)]) -> (Check, Vec<u32>) {
    let mut bad_ids = Check::new("runs ids fit u32");
    let ids: Vec<u32> = runs
        .iter()
        .map(|(id, _)| {
            u32::try_from(*id).unwrap_or_else(|_| {
                bad_ids.fail(|| format!("runs.id {id} cannot be a run_id"));
                u32::MAX
            })
        })
        .collect();
    (bad_ids, ids)
}

/// What the one pass over every row found, merged in row order.
struct RowPass {
    aggs: Vec<Option<RunAgg>>,
    row_tallies: [Tally; 8],
    finding_tallies: [Tally; 3],
    /// (CRC-32C, bytes) of each shard's data section.
    data_crcs: Vec<(u32, usize)>,
}

/// Streams every row once (memory-mapped chunks, in parallel on `workers` threads, merged in
/// order) for the per-row checks, the per-run aggregates and the data checksums; reads
/// nothing unless `scan_rows`.
fn scan_rows_once(
    ctx: &Context,
    shards: &[Shard],
    shard_first_global: &[u64],
    runs: usize,
    scan_rows: bool,
    workers: usize,
    observer: &Observer,
) -> Result<RowPass> {
    let chunk_list = shards::chunks(shards, CHUNK_ROWS);
    let total_rows = *shard_first_global
        .last()
        .expect("a start per shard and the end");
    let mut pass = RowPass {
        aggs: vec![None; runs],
        row_tallies: Default::default(),
        finding_tallies: Default::default(),
        data_crcs: vec![(0, 0); shards.len()],
    };
    let mut last_slot: Option<u32> = None;
    let bar = Bar::rows(observer, "validate", total_rows);
    // A remote pack streamed block by block keeps only the shards being read.
    let mut behind = shards::release_behind(shards);
    let scanned = if scan_rows { &chunk_list[..] } else { &[] };
    let outcome = ordered_try_map(
        scanned,
        workers,
        workers * 2,
        || (),
        |_, &(si, start, count)| {
            scan_chunk(
                ctx,
                &shards[si],
                start,
                count,
                shard_first_global[si] + start,
            )
        },
        |i, scan| {
            let scan = scan?;
            let (si, _, count) = chunk_list[i];
            behind.reached(si);
            let (crc, len) = pass.data_crcs[si];
            pass.data_crcs[si] = (
                crate::crc::combine(crc, scan.crc, scan.bytes),
                len + scan.bytes,
            );
            for (slot, agg) in &scan.segments {
                let adjacent = last_slot == Some(*slot);
                match &mut pass.aggs[*slot as usize] {
                    Some(a) => a.merge(agg, adjacent),
                    none => *none = Some(*agg),
                }
                last_slot = Some(*slot);
            }
            for (slot, agg) in &scan.by_run {
                match &mut pass.aggs[*slot as usize] {
                    Some(a) => {
                        a.merge(agg, false);
                        a.first_row = a.first_row.min(agg.first_row);
                    }
                    none => *none = Some(*agg),
                }
            }
            for (t, s) in pass.row_tallies.iter_mut().zip(scan.rows) {
                t.merge(s);
            }
            for (t, s) in pass.finding_tallies.iter_mut().zip(scan.findings) {
                t.merge(s);
            }
            bar.inc(count);
            Ok(())
        },
    );
    bar.finish_and_clear();
    outcome?;
    Ok(pass)
}

/// The recorded shard facts against the files (see [`check_checksums`]), skipped when
/// `metadata.db` is unusable or records none.
fn check_shard_checksums(
    dir: &Path,
    conn: Option<&rusqlite::Connection>,
    shards: &[Shard],
    data_crcs: Option<&[(u32, usize)]>,
) -> Result<Check> {
    Ok(match conn {
        None => Check::skipped("shard checksums", "metadata.db is unusable"),
        Some(c) => match metadata::read_shard_records(c)? {
            None => Check::skipped(
                "shard checksums",
                "no checksums recorded (a pack from another tool)",
            ),
            Some(records) => check_checksums(dir, &records, shards, data_crcs),
        },
    })
}

/// What interrupted runs left in the folder. Not a fault of the pack (loaders ignore hidden
/// folders): said, not failed.
/// The block checksums `metadata.db` records for the files its versions list: well formed,
/// and combining into each file's recorded CRC-32C (which the file checks compare with the
/// bytes), so that a remote reader checking a range against them checks it against the file.
fn check_block_records(conn: Option<&rusqlite::Connection>) -> Result<Check> {
    const NAME: &str = "block checksums";
    let Some(conn) = conn else {
        return Ok(Check::skipped(NAME, "metadata.db is unusable"));
    };
    if !metadata::has_table(conn, crate::format::blocks::TABLE)?
        || !metadata::has_table(conn, "version_files")?
    {
        return Ok(Check::skipped(
            NAME,
            "none recorded (an older tool's pack: remote readers fetch its files whole)",
        ));
    }
    let mut check = Check::new(NAME);
    let mut rows = conn.prepare(
        "SELECT DISTINCT v.file_name, v.bytes, v.crc32c, b.block_bytes, b.block_crc32c
         FROM version_files v JOIN file_blocks b
              ON b.file_name = v.file_name AND b.crc32c = v.crc32c
         ORDER BY v.file_name",
    )?;
    let mut rows = rows.query([])?;
    let (mut files, mut without) = (0u64, 0u64);
    while let Some(r) = rows.next()? {
        let (name, bytes, crc): (String, u64, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
        files += 1;
        match crate::format::blocks::FileBlocks::from_record(
            &name,
            bytes,
            r.get(3)?,
            &r.get::<_, Vec<u8>>(4)?,
        ) {
            Err(e) => check.fail(|| e.to_string()),
            Ok(blocks) if !blocks.combine_into(&crc) => check.fail(|| {
                format!(
                    "{name}: its {} block CRCs combine into {:08x}, not the file's {crc}",
                    blocks.count(),
                    blocks.whole_crc()
                )
            }),
            Ok(_) => {}
        }
    }
    without += conn.query_row(
        "SELECT COUNT(*) FROM (SELECT DISTINCT file_name, crc32c FROM version_files v
         WHERE NOT EXISTS (SELECT 1 FROM file_blocks b
                           WHERE b.file_name = v.file_name AND b.crc32c = v.crc32c))",
        [],
        |r| r.get::<_, i64>(0),
    )? as u64;
    check.note = Some(if without == 0 {
        format!("{files} files")
    } else {
        format!("{files} files; {without} without (made by an older tool: fetched whole)")
    });
    Ok(check)
}

fn check_leftovers(dir: &Path) -> Check {
    let mut leftovers = Check::new("leftovers of interrupted runs");
    let found = crate::pack::publish::leftovers(dir);
    leftovers.note = Some(if found.is_empty() {
        "none".into()
    } else {
        found.join("; ")
    });
    leftovers
}

/// The per-row checks from the row pass's tallies, in report order (the deep one only with
/// `deep`; run_id skipped when `metadata.db` is unusable).
fn row_checks(tallies: &[Tally; 8], deep: bool, have_db: bool) -> Vec<Check> {
    let mut out = Vec::new();
    for (k, name) in ROW_CHECKS.iter().enumerate() {
        if k == 7 && !deep {
            continue;
        }
        let mut c = Check::new(name);
        if k == 0 && !have_db {
            c = Check::skipped(name, "metadata.db is unusable");
        }
        c.absorb(&tallies[k]);
        out.push(c);
    }
    out
}

/// Companion arrays line up with the shards (names, row counts, one dtype per family), and
/// (with `verify`, when `metadata.db` records them) match their recorded sizes and CRC-32C.
fn check_companions(
    scan: &families::Scan,
    conn: Option<&rusqlite::Connection>,
    verify: bool,
) -> Result<Check> {
    let mut check = Check::new("companion arrays");
    for (_, p) in &scan.problems {
        check.fail(|| format!("does not line up with the shards: {p}"));
    }
    let recorded = match conn {
        Some(c) => metadata::read_companions(c)?,
        None => Vec::new(),
    };
    let mut names: Vec<&str> = recorded.iter().map(|r| r.name.as_str()).collect();
    names.dedup();
    for name in names {
        let records: Vec<_> = recorded.iter().filter(|r| r.name == name).collect();
        let Some(family) = scan.family(name) else {
            if !scan.problems.iter().any(|(n, _)| n == name) {
                check.fail(|| {
                    format!("metadata.db records companion {name}, but its files are missing")
                });
            }
            continue;
        };
        if records.len() != family.files.len() {
            check.fail(|| {
                format!(
                    "{name}: metadata.db records {} files, the folder holds {}",
                    records.len(),
                    family.files.len()
                )
            });
            continue;
        }
        for (r, f) in records.iter().zip(&family.files) {
            if r.file_name != f.file_name || r.descr != family.descr {
                check.fail(|| {
                    format!(
                        "{}: metadata.db records {} of {}",
                        f.file_name, r.file_name, r.descr
                    )
                });
                continue;
            }
            if !verify {
                continue;
            }
            if let Some(lazy) = crate::pack::lazy::for_path(&f.path) {
                // A remote file read block by block: each block checked against its CRC,
                // which combine into the file's (checked when the pack was opened).
                if let Err(e) = lazy.check_every_block() {
                    check.fail(|| format!("{}: {e}", f.file_name));
                }
                continue;
            }
            let crc = crate::crc::open_file_crc(&f.file, &f.path)?;
            let len = f.file.metadata()?.len();
            if crc != r.crc32c || len != r.bytes {
                check.fail(|| {
                    format!(
                        "{}: {len} bytes, crc32c {crc:08x}; metadata.db records {} bytes, crc32c {:08x}",
                        f.file_name, r.bytes, r.crc32c
                    )
                });
            }
        }
    }
    if check.failures == 0 {
        check.note = Some(if scan.families.is_empty() {
            "none".to_string()
        } else {
            scan.families
                .iter()
                .map(|f| {
                    let recorded = recorded.iter().any(|r| r.name == f.name);
                    format!(
                        "{} {}{}",
                        f.name,
                        f.describe(),
                        if recorded {
                            ""
                        } else {
                            " (no checksums recorded)"
                        }
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        });
    }
    Ok(check)
}

/// Every run has a well-formed fingerprint, the recorded `duplicate_run` count matches the
/// runs that share an earlier run's fingerprint, and (with `recompute`: `--deep` on a pack in
/// run order) each fingerprint equals the one computed from the run's rows.
fn check_fingerprints(
    conn: &rusqlite::Connection,
    recompute: Option<(&[Shard], &ValuationTable, usize)>,
    shuffled: bool,
) -> Result<Check> {
    const NAME: &str = "run fingerprints";
    let runs = metadata::read_runs(conn)?;
    let details = metadata::read_run_details(conn)?;
    if !details.values().any(|d| d.fingerprint.is_some()) && !runs.is_empty() {
        return Ok(Check::skipped(
            NAME,
            "no fingerprints recorded (a pack from before fingerprints, or from another tool); merge, export --format pack or pack --update computes them",
        ));
    }
    let mut check = Check::new(NAME);
    let mut seen = std::collections::HashSet::new();
    let mut duplicates = 0u64;
    for run in &runs {
        match details.get(&run.id).and_then(|d| d.fingerprint.as_deref()) {
            None => check.fail(|| format!("run {}: no fingerprint recorded", run.id)),
            Some(text) => match Fingerprint::from_hex(text) {
                None => check.fail(|| {
                    format!(
                        "run {}: fingerprint {text:?} is not 32 lowercase hex digits",
                        run.id
                    )
                }),
                Some(fp) => duplicates += u64::from(!seen.insert(fp)),
            },
        }
    }
    let recorded: i64 = metadata::read_finding_counts(conn)?
        .into_iter()
        .find(|(k, _)| k == findings::DUPLICATE_RUN)
        .map_or(0, |(_, n)| n);
    if recorded != duplicates as i64 {
        check.fail(|| {
            format!(
                "{duplicates} runs have the fingerprint of an earlier run, but finding_counts records {recorded} {}",
                findings::DUPLICATE_RUN
            )
        });
    }
    match recompute {
        _ if check.failures > 0 => {}
        None if shuffled => {
            check.note =
                Some("not recomputed: the rows of a shuffled pack are not in run order".into())
        }
        None => check.note = Some("well formed; --deep also recomputes them from the rows".into()),
        Some((shards, valuations, workers)) => {
            let computed = match fingerprints::compute(shards, &runs, valuations, workers) {
                Ok(c) => c,
                Err(e) => {
                    check.fail(|| format!("cannot recompute: {e:#}"));
                    return Ok(check);
                }
            };
            for (run, fp) in runs.iter().zip(&computed) {
                let stored = details.get(&run.id).and_then(|d| d.fingerprint());
                if stored != Some(*fp) {
                    check.fail(|| {
                        format!(
                            "run {}: fingerprint {} recorded, {fp} computed from its rows",
                            run.id,
                            stored.map_or("none".into(), |f| f.to_string())
                        )
                    });
                }
            }
        }
    }
    Ok(check)
}

fn check_run_steps(runs: &[(i64, i64)], aggs: &[Option<RunAgg>], total_rows: u64) -> Check {
    let mut c = Check::new("rows per run = runs.steps");
    let sum: i64 = runs.iter().map(|(_, steps)| steps).sum();
    if sum as u64 != total_rows {
        c.fail(|| format!("Σ runs.steps is {sum}, the shards hold {total_rows} rows"));
    }
    for ((id, steps), agg) in runs.iter().zip(aggs) {
        let found = agg.map_or(0, |a| a.count);
        if found as i64 != *steps {
            c.fail(|| format!("run {id}: runs.steps is {steps}, rows found {found}"));
        }
    }
    c
}

fn check_step_order(
    runs: &[(i64, i64)],
    aggs: &[Option<RunAgg>],
    shuffled: bool,
    shards: &[Shard],
    slot_of: &RunSlots,
) -> Result<Check> {
    if !shuffled {
        let mut c = Check::new("run rows contiguous, step_index increasing");
        for ((id, _), agg) in runs.iter().zip(aggs) {
            let Some(a) = agg else { continue };
            if a.segments > 1 {
                c.fail(|| {
                    format!(
                        "run {id}: its rows are split into {} separate stretches",
                        a.segments
                    )
                });
            } else if !a.increasing {
                c.fail(|| format!("run {id}: step_index is not strictly increasing"));
            }
        }
        return Ok(c);
    }
    let mut c = Check::new("(run_id, step_index) unique");
    let mut unsure: Vec<u32> = Vec::new();
    for (slot, ((id, _), agg)) in runs.iter().zip(aggs).enumerate() {
        let Some(a) = agg else { continue };
        match a.distinct_steps() {
            Some(true) => {}
            Some(false) => c.fail(|| format!("run {id}: a step_index appears more than once")),
            None => unsure.push(slot as u32),
        }
    }
    if !unsure.is_empty() {
        for id in exact_duplicates(&unsure, shards, slot_of)? {
            c.fail(|| format!("run {id}: a step_index appears more than once"));
        }
    }
    Ok(c)
}

/// The exact check for the few runs whose steps have gaps: collect their step indices (only
/// theirs) and look for repeats. Returns the ids of runs with a repeat.
fn exact_duplicates(slots: &[u32], shards: &[Shard], slot_of: &RunSlots) -> Result<Vec<u32>> {
    let mut steps: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (si, start, count) in shards::chunks(shards, CHUNK_ROWS) {
        let map = shards[si].map_rows(start, count, Access::Sequential)?;
        for raw in map.chunks_exact(shards[si].row_bytes()) {
            let r = StepRow::from_bytes(raw);
            if slot_of.contains_slot(r.run_id, slots) {
                steps.entry(r.run_id).or_default().push(r.step_index);
            }
        }
    }
    let mut out = Vec::new();
    for (id, mut v) in steps {
        v.sort_unstable();
        if v.windows(2).any(|w| w[0] == w[1]) {
            out.push(id);
        }
    }
    Ok(out)
}

fn check_run_index(
    index: &[(i64, RowLocation)],
    runs: &[(i64, i64)],
    aggs: &[Option<RunAgg>],
    shard_first_global: &[u64],
    total_rows: u64,
) -> Check {
    let mut c = Check::new("run index points at each run's first row");
    let by_id: HashMap<i64, &RowLocation> = index.iter().map(|(id, loc)| (*id, loc)).collect();
    for ((id, _), agg) in runs.iter().zip(aggs) {
        let Some(loc) = by_id.get(id) else {
            c.fail(|| format!("run {id} has no run_index entry"));
            continue;
        };
        let via_shard = shard_first_global
            .get(loc.shard as usize)
            .map(|first| first + loc.row_offset);
        if via_shard != Some(loc.global_row) {
            c.fail(|| {
                format!(
                    "run {id}: shard {} row {} is not global row {}",
                    loc.shard, loc.row_offset, loc.global_row
                )
            });
            continue;
        }
        match agg {
            Some(a) if a.first_row != loc.global_row => c.fail(|| {
                format!(
                    "run {id}: run_index says global row {}, its first row is {}",
                    loc.global_row, a.first_row
                )
            }),
            None if loc.global_row > total_rows => c.fail(|| {
                format!(
                    "run {id}: run_index global row {} is past the end",
                    loc.global_row
                )
            }),
            _ => {}
        }
    }
    if index.len() != runs.len() {
        c.fail(|| {
            format!(
                "run_index has {} entries for {} runs",
                index.len(),
                runs.len()
            )
        });
    }
    c
}
