//! `metadata.db`: the SQLite run index. Owns the schema (the loader's `runs` and `session`
//! tables, kept exactly as the spec says, plus this tool's extra tables keyed by run id), the
//! staged writer, and read helpers for the commands that open an existing pack.

use std::path::Path;

use crate::error::{Context, Result};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::format::blocks;
use crate::format::fingerprint::Fingerprint;

pub const FILE_NAME: &str = "metadata.db";
/// Version of the pack layout this tool writes, recorded in `session`.
pub const FORMAT_VERSION: &str = "1";
/// The `session` key of a pack written from a legacy 46-byte one (`export --format pack`,
/// `merge`): how many rows' `ev_legal` recomputing it from the board changed.
pub const LEGACY_EV_LEGAL_CHANGED: &str = "legacy_ev_legal_changed";

const SCHEMA: &str = "
CREATE TABLE runs (id INTEGER PRIMARY KEY, seed BIGINT NOT NULL, steps INT NOT NULL,
                   max_score INT NOT NULL, highest_tile INT NOT NULL);
CREATE TABLE session (meta_key TEXT PRIMARY KEY, meta_value TEXT NOT NULL);
CREATE TABLE run_details (run_id INTEGER PRIMARY KEY, source_path TEXT, rows_path TEXT,
                          depth INT, game_index INT, num_moves INT, max_rank INT, sum_tile INT,
                          seconds REAL, source_pack TEXT, source_run_id INT, fingerprint TEXT,
                          sidecar_bytes INT, rows_bytes INT);
CREATE TABLE run_index (run_id INTEGER PRIMARY KEY, shard INT NOT NULL, row_offset INT NOT NULL,
                        global_row INT NOT NULL);
CREATE TABLE shards (shard INTEGER PRIMARY KEY, file_name TEXT NOT NULL, rows INT NOT NULL,
                     bytes INT NOT NULL, crc32c TEXT NOT NULL);
CREATE TABLE skipped_runs (source_path TEXT PRIMARY KEY, reason TEXT NOT NULL);
CREATE TABLE orphan_rows_files (path TEXT PRIMARY KEY);
CREATE TABLE finding_counts (kind TEXT PRIMARY KEY, count INT NOT NULL);
CREATE TABLE findings (kind TEXT NOT NULL, run_id INT, source_path TEXT NOT NULL, line INT,
                       step_index INT, detail TEXT NOT NULL);
CREATE TABLE companions (name TEXT NOT NULL, shard INT NOT NULL, file_name TEXT NOT NULL,
                         descr TEXT NOT NULL, shape TEXT NOT NULL, rows INT NOT NULL,
                         bytes INT NOT NULL, crc32c TEXT NOT NULL, PRIMARY KEY (name, shard));
CREATE TABLE versions (version INTEGER PRIMARY KEY, created_utc TEXT NOT NULL,
                       operation TEXT NOT NULL, rows INT NOT NULL, runs INT NOT NULL,
                       command TEXT NOT NULL);
CREATE TABLE version_files (version INT NOT NULL, family TEXT NOT NULL, shard INT NOT NULL,
                            file_name TEXT NOT NULL, rows INT NOT NULL, bytes INT NOT NULL,
                            crc32c TEXT NOT NULL, PRIMARY KEY (version, family, shard));
CREATE TABLE version_sources (version INT NOT NULL, pack_id TEXT, source_version INT NOT NULL,
                              path TEXT NOT NULL);
CREATE TABLE version_tags (name TEXT PRIMARY KEY, version INT NOT NULL,
                           created_utc TEXT NOT NULL);
CREATE TABLE file_blocks (file_name TEXT NOT NULL, crc32c TEXT NOT NULL,
                          block_bytes INT NOT NULL, block_crc32c BLOB NOT NULL,
                          PRIMARY KEY (file_name, crc32c));
";

/// The `session` key of the pack's identity: 32 hex digits drawn when the pack is made, kept by
/// every change in place.
pub const PACK_ID: &str = "pack_id";
/// The `version_files.family` of the steps' shards (a companion family's is its name).
pub const STEPS_FAMILY: &str = "steps";

/// The block checksums of the file at `path`, checked against `crc` (its recorded CRC-32C,
/// 8 hex digits).
fn file_blocks(file: &std::fs::File, path: &Path, crc: &str) -> Result<blocks::FileBlocks> {
    let made = blocks::FileBlocks::of_file(file, path, blocks::block_bytes())?;
    if !made.combine_into(crc) {
        return Err(crate::error::Error::new(
            crate::error::ErrorKind::Corrupt,
            format!(
                "{} changed after it was written: its CRC-32C is now {:08x}, not the {crc} \
                 recorded while writing it; nothing was published",
                path.display(),
                made.whole_crc()
            ),
        ));
    }
    Ok(made)
}

/// One row of `runs` plus its `run_details` and `run_index` rows.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub run_id: u32,
    pub seed: u32,
    pub steps: u64,
    pub max_score: i64,
    pub highest_tile: i64,
    pub details: RunDetails,
    /// Where the run's rows start; None in a shuffled pack (no run index).
    pub first_row: Option<RowLocation>,
}

/// Sidecar facts the loader does not need, kept per run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunDetails {
    /// Sidecar path relative to the input root, '/'-separated.
    pub source_path: Option<String>,
    pub rows_path: Option<String>,
    pub depth: Option<i64>,
    pub game_index: Option<i64>,
    pub num_moves: Option<i64>,
    pub max_rank: Option<i64>,
    pub sum_tile: Option<i64>,
    pub seconds: Option<f64>,
    /// For merged packs: the input pack the run came from, and its id there.
    pub source_pack: Option<String>,
    pub source_run_id: Option<i64>,
    /// The run's content fingerprint, 32 lowercase hex digits (see `format::fingerprint`).
    pub fingerprint: Option<String>,
    /// Sizes of the sidecar and rows files when the run was packed (how `pack --update` knows
    /// a raw run is already in the pack without reading it).
    pub sidecar_bytes: Option<i64>,
    pub rows_bytes: Option<i64>,
}

impl RunDetails {
    /// The recorded fingerprint, when there is one and it is well formed.
    pub fn fingerprint(&self) -> Option<Fingerprint> {
        self.fingerprint.as_deref().and_then(Fingerprint::from_hex)
    }
}

/// Where a run's first row lives (for a run of 0 rows: where it would have started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RowLocation {
    pub shard: u32,
    pub row_offset: u64,
    pub global_row: u64,
}

/// One shard's integrity facts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardRecord {
    pub shard: u32,
    pub file_name: String,
    pub rows: u64,
    pub bytes: u64,
    pub crc32c: u32,
}

/// A family as `metadata.db` records it: one row per file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CompanionRecord {
    pub name: String,
    pub shard: u32,
    pub file_name: String,
    pub descr: String,
    /// The trailing shape as JSON, e.g. `[64]`.
    pub shape: String,
    pub rows: u64,
    pub bytes: u64,
    pub crc32c: u32,
}

/// One data-quality finding worth showing as an example.
#[derive(Debug, Clone, PartialEq)]
pub struct FindingRecord {
    pub kind: String,
    pub run_id: Option<u32>,
    pub source_path: String,
    pub line: Option<u64>,
    pub step_index: Option<u64>,
    pub detail: String,
}

/// What every pack's `session` says about it (see [`MetadataWriter::set_pack_facts`]).
pub struct PackFacts<'a> {
    pub command: &'a str,
    /// The full command line that wrote the pack, as a shell would take it back.
    pub command_line: String,
    pub shard_rows: Option<u64>,
    pub total_rows: u64,
    pub total_runs: u64,
    pub shard_count: usize,
    pub shuffled: bool,
}

/// Writes a new `metadata.db` inside one transaction; [`MetadataWriter::finish`] commits and
/// leaves a single self-contained file (journal_mode=DELETE).
pub struct MetadataWriter {
    conn: Connection,
    path: std::path::PathBuf,
    /// What [`MetadataWriter::finish`] records in the history.
    change: Change,
}

/// What a [`MetadataWriter`] does to the pack, and so what its commit records.
#[derive(Clone, Copy)]
enum Change {
    /// A new pack: version 1, its operation the `session.command`.
    New,
    /// A change in place that makes a version (`update`, `attach`, `detach`).
    InPlace(&'static str),
    /// A change of the history's own records (tags): no version.
    Annotation,
}

impl MetadataWriter {
    pub fn create(path: &Path) -> Result<MetadataWriter> {
        let conn =
            Connection::open(path).with_context(|| format!("creating {}", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(SCHEMA)?;
        conn.execute_batch("BEGIN")?;
        Ok(MetadataWriter {
            conn,
            path: path.to_path_buf(),
            change: Change::New,
        })
    }

    /// Copies the `metadata.db` of the pack in `pack_dir` into `staging` and opens the copy
    /// to change the pack in place by `operation` (see [`MetadataWriter::extend`]).
    pub fn extend_copy(
        pack_dir: &Path,
        staging: &Path,
        operation: &'static str,
    ) -> Result<MetadataWriter> {
        let copy = staging.join(FILE_NAME);
        std::fs::copy(pack_dir.join(FILE_NAME), &copy)
            .with_context(|| format!("copying {} to {}", FILE_NAME, staging.display()))?;
        MetadataWriter::extend(&copy, operation)
    }

    /// Copies the `metadata.db` of the pack in `pack_dir` into `staging` to change its
    /// history's records (tags) only: the commit makes no version.
    pub fn annotate_copy(pack_dir: &Path, staging: &Path) -> Result<MetadataWriter> {
        let mut writer = MetadataWriter::extend_copy(pack_dir, staging, "annotate")?;
        writer.change = Change::Annotation;
        Ok(writer)
    }

    /// Names `version` `name` (moving the name if another version had it).
    pub fn set_tag(&self, name: &str, version: u32) -> Result<()> {
        self.conn.execute(
            "INSERT INTO version_tags (name, version, created_utc) VALUES (?1, ?2, ?3)
             ON CONFLICT(name) DO UPDATE SET version = excluded.version,
             created_utc = excluded.created_utc",
            params![name, version, utc_now()],
        )?;
        Ok(())
    }

    /// Removes the tag `name`; returns the version it named, None when there is no such tag.
    pub fn delete_tag(&self, name: &str) -> Result<Option<u32>> {
        Ok(self
            .conn
            .query_row(
                "DELETE FROM version_tags WHERE name = ?1 RETURNING version",
                [name],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Opens a copy of an existing pack's `metadata.db` (made by the caller in a staging
    /// folder) to change the pack in place by `operation` (`update`, `attach`, `detach`):
    /// tables and columns this version writes are added when missing, and a pack made before
    /// versions gets its history begun with the state it is in (version 1), so that
    /// [`MetadataWriter::finish`] records the change as version 2.
    pub fn extend(path: &Path, operation: &'static str) -> Result<MetadataWriter> {
        let conn = Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch("BEGIN")?;
        let writer = MetadataWriter {
            conn,
            path: path.to_path_buf(),
            change: Change::InPlace(operation),
        };
        writer.add_missing_schema()?;
        if latest_version(&writer.conn)?.is_none() {
            let made_by = session_value(&writer.conn, "command")?;
            let made = session_value(&writer.conn, "created_utc")?;
            writer.record_version(
                made_by.as_deref().unwrap_or("unknown"),
                made.as_deref().unwrap_or(""),
                "[]",
            )?;
        }
        Ok(writer)
    }

    /// Appends a version to the history: the pack as these tables now describe it (its rows,
    /// runs, the steps' shards and every recorded companion family's files), made by
    /// `operation` at `created_utc` with `command` (a JSON array of the arguments). The pack
    /// gets its `pack_id` with its first version.
    fn record_version(&self, operation: &str, created_utc: &str, command: &str) -> Result<()> {
        if session_value(&self.conn, PACK_ID)?.is_none() {
            self.set_session(PACK_ID, &new_pack_id())?;
        }
        let version = latest_version(&self.conn)?.unwrap_or(0) + 1;
        // A pack from another tool may record no shards: its rows are its runs' steps.
        self.conn.execute(
            "INSERT INTO versions (version, created_utc, operation, rows, runs, command)
             VALUES (?1, ?2, ?3,
                     COALESCE((SELECT SUM(rows) FROM shards),
                              (SELECT SUM(steps) FROM runs), 0),
                     (SELECT COUNT(*) FROM runs), ?4)",
            params![version, created_utc, operation, command],
        )?;
        self.conn.execute(
            "INSERT INTO version_files (version, family, shard, file_name, rows, bytes, crc32c)
             SELECT ?1, ?2, shard, file_name, rows, bytes, crc32c FROM shards",
            params![version, STEPS_FAMILY],
        )?;
        self.conn.execute(
            "INSERT INTO version_files (version, family, shard, file_name, rows, bytes, crc32c)
             SELECT ?1, name, shard, file_name, rows, bytes, crc32c FROM companions",
            params![version],
        )?;
        Ok(())
    }

    /// Records the block checksums ([`blocks`]) of every file the pack lists that has none
    /// yet and lies beside this `metadata.db` (what this writer made: files kept from
    /// before are not there, and keep the blocks recorded when they were made, or none for a
    /// file of an older tool, which readers then fetch whole). Each file's blocks are checked
    /// against the CRC-32C recorded while it was written, so a file changed since is refused.
    fn record_blocks(&self) -> Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let mut listed = self.conn.prepare(
            "SELECT file_name, bytes, crc32c FROM (
                 SELECT file_name, bytes, crc32c FROM shards
                 UNION SELECT file_name, bytes, crc32c FROM companions) f
             WHERE NOT EXISTS (SELECT 1 FROM file_blocks b
                               WHERE b.file_name = f.file_name AND b.crc32c = f.crc32c)",
        )?;
        let files: Vec<(String, u64, String)> = listed
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let made: Vec<(String, String, blocks::FileBlocks)> = {
            use rayon::prelude::*;
            files
                .into_par_iter()
                .filter_map(|(name, bytes, crc)| {
                    let path = dir.join(&name);
                    let file = std::fs::File::open(&path).ok()?;
                    match file.metadata() {
                        Ok(m) if m.len() == bytes => {}
                        _ => return None,
                    }
                    Some(file_blocks(&file, &path, &crc).map(|b| (name, crc, b)))
                })
                .collect::<Result<_>>()?
        };
        let mut insert = self.conn.prepare_cached(
            "INSERT INTO file_blocks (file_name, crc32c, block_bytes, block_crc32c)
             VALUES (?1, ?2, ?3, ?4)",
        )?;
        for (name, crc, b) in made {
            insert.execute(params![name, crc, b.block_bytes as i64, b.to_blob()])?;
        }
        Ok(())
    }

    /// Records that the new pack was made from version `version` of the pack at `path` (whose
    /// `pack_id` is None when it had no history): its lineage.
    pub fn record_source(&self, pack_id: Option<&str>, version: u32, path: &str) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO version_sources (version, pack_id, source_version, path)
                 VALUES (1, ?1, ?2, ?3)",
            )?
            .execute(params![pack_id, version, path])?;
        Ok(())
    }

    /// Creates the tables and `run_details` columns of [`SCHEMA`] an older pack lacks.
    fn add_missing_schema(&self) -> Result<()> {
        let fresh = Connection::open_in_memory()?;
        fresh.execute_batch(SCHEMA)?;
        let mut tables =
            fresh.prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table'")?;
        let tables: Vec<(String, String)> = tables
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (table, sql) in tables {
            if !has_table(&self.conn, &table)? {
                self.conn.execute_batch(&sql)?;
                continue;
            }
            let have = column_names(&self.conn, &table)?;
            let mut info = fresh.prepare(&format!("PRAGMA table_info({table})"))?;
            let columns: Vec<(String, String)> = info
                .query_map([], |r| Ok((r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<_>>()?;
            for (column, declared) in columns {
                if !have.contains(&column) {
                    self.conn.execute_batch(&format!(
                        "ALTER TABLE {table} ADD COLUMN {column} {declared}"
                    ))?;
                }
            }
        }
        Ok(())
    }

    /// The folder the database is written in.
    pub fn dir(&self) -> std::path::PathBuf {
        self.path
            .parent()
            .map_or_else(|| ".".into(), Path::to_path_buf)
    }

    /// Sets a run's fingerprint (packs extended by `pack --update` that did not record them).
    pub fn set_fingerprint(&self, run_id: i64, fingerprint: &Fingerprint) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO run_details (run_id, fingerprint) VALUES (?1, ?2)
                 ON CONFLICT(run_id) DO UPDATE SET fingerprint = excluded.fingerprint",
            )?
            .execute(params![run_id, fingerprint.to_string()])?;
        Ok(())
    }

    /// Records where a packed run's rows file is now and its size (`pack --update` after the
    /// file was gzipped or unzipped, its content unchanged).
    pub fn set_rows_file(&self, run_id: i64, rows_path: &str, rows_bytes: i64) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE run_details SET rows_path = ?2, rows_bytes = ?3 WHERE run_id = ?1",
            )?
            .execute(params![run_id, rows_path, rows_bytes])?;
        Ok(())
    }

    pub fn insert_run(&self, r: &RunRecord) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO runs (id, seed, steps, max_score, highest_tile) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(id) DO UPDATE SET seed = excluded.seed, steps = excluded.steps,
                 max_score = excluded.max_score, highest_tile = excluded.highest_tile",
            )?
            .execute(params![r.run_id, r.seed, r.steps as i64, r.max_score, r.highest_tile])?;
        let d = &r.details;
        self.conn
            .prepare_cached(
                "INSERT INTO run_details (run_id, source_path, rows_path, depth, game_index, num_moves,
                 max_rank, sum_tile, seconds, source_pack, source_run_id, fingerprint,
                 sidecar_bytes, rows_bytes)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
                 ON CONFLICT(run_id) DO UPDATE SET source_path = excluded.source_path,
                 rows_path = excluded.rows_path, depth = excluded.depth, game_index = excluded.game_index,
                 num_moves = excluded.num_moves, max_rank = excluded.max_rank,
                 sum_tile = excluded.sum_tile, seconds = excluded.seconds,
                 source_pack = excluded.source_pack, source_run_id = excluded.source_run_id,
                 fingerprint = excluded.fingerprint, sidecar_bytes = excluded.sidecar_bytes,
                 rows_bytes = excluded.rows_bytes",
            )?
            .execute(params![
                r.run_id,
                d.source_path,
                d.rows_path,
                d.depth,
                d.game_index,
                d.num_moves,
                d.max_rank,
                d.sum_tile,
                d.seconds,
                d.source_pack,
                d.source_run_id,
                d.fingerprint,
                d.sidecar_bytes,
                d.rows_bytes
            ])?;
        let Some(f) = &r.first_row else { return Ok(()) };
        self.conn
            .prepare_cached(
                "INSERT INTO run_index (run_id, shard, row_offset, global_row) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(run_id) DO UPDATE SET shard = excluded.shard,
                 row_offset = excluded.row_offset, global_row = excluded.global_row",
            )?
            .execute(params![r.run_id, f.shard, f.row_offset as i64, f.global_row as i64])?;
        Ok(())
    }

    pub fn insert_shard(&self, s: &ShardRecord) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO shards (shard, file_name, rows, bytes, crc32c) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(shard) DO UPDATE SET file_name = excluded.file_name, rows = excluded.rows,
                 bytes = excluded.bytes, crc32c = excluded.crc32c",
            )?
            .execute(params![s.shard, s.file_name, s.rows as i64, s.bytes as i64, format!("{:08x}", s.crc32c)])?;
        Ok(())
    }

    pub fn insert_skipped(&self, source_path: &str, reason: &str) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO skipped_runs (source_path, reason) VALUES (?1, ?2)
                 ON CONFLICT(source_path) DO UPDATE SET reason = excluded.reason",
            )?
            .execute(params![source_path, reason])?;
        Ok(())
    }

    /// Rows of `skipped_runs`.
    pub fn count_skipped(&self) -> Result<u64> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM skipped_runs", [], |r| r.get(0))?;
        Ok(n as u64)
    }

    /// Records one file of a companion family.
    pub fn insert_companion(&self, c: &CompanionRecord) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO companions (name, shard, file_name, descr, shape, rows, bytes, crc32c)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT(name, shard) DO UPDATE SET file_name = excluded.file_name,
                 descr = excluded.descr, shape = excluded.shape, rows = excluded.rows,
                 bytes = excluded.bytes, crc32c = excluded.crc32c",
            )?
            .execute(params![
                c.name,
                c.shard,
                c.file_name,
                c.descr,
                c.shape,
                c.rows as i64,
                c.bytes as i64,
                format!("{:08x}", c.crc32c)
            ])?;
        Ok(())
    }

    /// Forgets a companion family.
    pub fn delete_companion(&self, name: &str) -> Result<()> {
        self.conn
            .prepare_cached("DELETE FROM companions WHERE name = ?1")?
            .execute(params![name])?;
        Ok(())
    }

    /// Removes a run from `skipped_runs` (it was packed after all, e.g. by `pack --update`).
    pub fn forget_skipped(&self, source_path: &str) -> Result<()> {
        self.conn
            .prepare_cached("DELETE FROM skipped_runs WHERE source_path = ?1")?
            .execute(params![source_path])?;
        Ok(())
    }

    /// Replaces the recorded orphan rows files (and their finding examples) with `paths`.
    pub fn replace_orphans(&self, paths: &[String]) -> Result<()> {
        self.conn.execute("DELETE FROM orphan_rows_files", [])?;
        self.conn
            .execute("DELETE FROM findings WHERE kind = 'orphan_rows_file'", [])?;
        self.conn.execute(
            "DELETE FROM finding_counts WHERE kind = 'orphan_rows_file'",
            [],
        )?;
        for p in paths {
            self.insert_orphan(p)?;
        }
        Ok(())
    }

    pub fn insert_orphan(&self, path: &str) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO orphan_rows_files (path) VALUES (?1) ON CONFLICT(path) DO NOTHING",
            )?
            .execute(params![path])?;
        Ok(())
    }

    pub fn set_finding_count(&self, kind: &str, count: u64) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO finding_counts (kind, count) VALUES (?1, ?2)
                 ON CONFLICT(kind) DO UPDATE SET count = excluded.count",
            )?
            .execute(params![kind, count as i64])?;
        Ok(())
    }

    pub fn insert_finding(&self, f: &FindingRecord) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO findings (kind, run_id, source_path, line, step_index, detail)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                f.kind,
                f.run_id,
                f.source_path,
                f.line.map(|l| l as i64),
                f.step_index.map(|s| s as i64),
                f.detail
            ])?;
        Ok(())
    }

    pub fn set_session(&self, key: &str, value: &str) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO session (meta_key, meta_value) VALUES (?1, ?2)
                 ON CONFLICT(meta_key) DO UPDATE SET meta_value = excluded.meta_value",
            )?
            .execute(params![key, value])?;
        Ok(())
    }

    /// Commits, switches back to a rollback journal and closes, leaving one self-contained file.
    /// Records the version this writer made (see [`MetadataWriter::extend`]; a new pack's is
    /// version 1, its operation the `session.command`), then commits.
    pub fn finish(self) -> Result<()> {
        let operation = match self.change {
            Change::InPlace(op) => Some(op.to_string()),
            Change::New => {
                Some(session_value(&self.conn, "command")?.unwrap_or_else(|| "unknown".into()))
            }
            Change::Annotation => None,
        };
        if let Some(operation) = operation {
            self.record_blocks()?;
            let command = serde_json::to_string(
                &std::env::args_os()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect::<Vec<_>>(),
            )?;
            self.record_version(&operation, &utc_now(), &command)?;
        }
        self.conn.execute_batch("COMMIT")?;
        self.conn.pragma_update(None, "journal_mode", "DELETE")?;
        self.conn
            .close()
            .map_err(|(_, e)| e)
            .context("closing metadata.db")?;
        std::fs::File::open(&self.path)
            .and_then(|f| f.sync_all())
            .with_context(|| format!("syncing {}", self.path.display()))
    }

    /// The session facts every pack has, whatever command wrote it.
    pub fn set_pack_facts(&self, f: &PackFacts) -> Result<()> {
        let facts = [
            ("format_version", FORMAT_VERSION.to_string()),
            (
                "tool",
                format!("dataset-packer {}", env!("CARGO_PKG_VERSION")),
            ),
            ("command", f.command.to_string()),
            (
                "shard_rows",
                f.shard_rows.map_or("none".into(), |n| n.to_string()),
            ),
            ("total_rows", f.total_rows.to_string()),
            ("total_runs", f.total_runs.to_string()),
            ("shard_count", f.shard_count.to_string()),
            ("checksum", "crc32c".to_string()),
            ("shuffled", f.shuffled.to_string()),
            ("created_utc", utc_now()),
            ("command_line", f.command_line.clone()),
        ];
        for (k, v) in facts {
            self.set_session(k, &v)?;
        }
        Ok(())
    }

    /// Adds to a finding count (merges sum the counts of their inputs, and take off those of
    /// runs they leave out).
    pub fn add_finding_count(&self, kind: &str, count: i64) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO finding_counts (kind, count) VALUES (?1, ?2)
                 ON CONFLICT(kind) DO UPDATE SET count = count + excluded.count",
            )?
            .execute(params![kind, count])?;
        Ok(())
    }

    /// Removes finding counts that came to zero.
    pub fn drop_empty_finding_counts(&self) -> Result<()> {
        self.conn
            .execute("DELETE FROM finding_counts WHERE count <= 0", [])?;
        Ok(())
    }
}

/// The highest version of the pack's history; None for a pack made before versions (no
/// `versions` table, or an empty one).
pub fn latest_version(conn: &Connection) -> Result<Option<u32>> {
    if !has_table(conn, "versions")? {
        return Ok(None);
    }
    Ok(conn.query_row("SELECT MAX(version) FROM versions", [], |r| r.get(0))?)
}

/// 32 hex digits from the operating system's random source (the clock and the process id
/// where it cannot be read).
fn new_pack_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = (nanos ^ (u128::from(std::process::id()) << 96)).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The current UTC time as ISO 8601 (`2026-11-23T14:05:09Z`), as `session` records times.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_iso8601(secs)
}

/// Seconds since the Unix epoch as an ISO 8601 UTC time (days to a civil date by Howard
/// Hinnant's algorithm).
pub fn utc_iso8601(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Opens an existing `metadata.db` read-only. A database left in WAL mode (the reference
/// packer's) is opened as immutable when it has no `-wal` file: otherwise SQLite would create
/// `-shm` and `-wal` files next to it, in a pack this command only reads (and could not open
/// it at all on a read-only mount).
pub fn open_read_only(path: &Path) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let context = || format!("opening {} read-only", path.display());
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if is_wal_mode(path) && !Path::new(&wal).exists() {
        let uri = format!("file:{}?immutable=1", uri_path(path));
        return Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
            .with_context(context);
    }
    Connection::open_with_flags(path, flags).with_context(context)
}

/// Whether the database file's header says WAL mode (file format versions 2 at bytes 18, 19).
fn is_wal_mode(path: &Path) -> bool {
    use std::io::Read;
    let mut header = [0u8; 20];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .is_ok_and(|()| header[18] == 2 && header[19] == 2)
}

/// A path as the path part of an SQLite `file:` URI: absolute, every byte but letters, digits
/// and `/-_.~` `%`-escaped (SQLite decodes them back to the path's bytes).
fn uri_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = String::new();
    for &b in abs.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A `session` value, if the table and key exist.
pub fn session_value(conn: &Connection, key: &str) -> Result<Option<String>> {
    Ok(conn
        .query_row(
            "SELECT meta_value FROM session WHERE meta_key = ?1",
            [key],
            |r| r.get(0),
        )
        .optional()?)
}

/// Whether a table exists.
pub fn has_table(conn: &Connection, table: &str) -> Result<bool> {
    Ok(conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}

/// The column names of a table (empty when it does not exist).
pub fn column_names(conn: &Connection, table: &str) -> Result<Vec<String>> {
    let mut stmt = conn.prepare(&format!("PRAGMA table_info({table})"))?;
    let names = stmt
        .query_map([], |r| r.get(1))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(names)
}

/// Differences between the `runs`/`session` tables and the schema loaders rely on.
pub fn schema_problems(conn: &Connection) -> Result<Vec<String>> {
    // (column, declared type, NOT NULL, primary key) as PRAGMA table_info reports them.
    type Column<'a> = (&'a str, &'a str, bool, bool);
    let want: [(&str, &[Column]); 2] = [
        (
            "runs",
            &[
                ("id", "INTEGER", false, true),
                ("seed", "BIGINT", true, false),
                ("steps", "INT", true, false),
                ("max_score", "INT", true, false),
                ("highest_tile", "INT", true, false),
            ],
        ),
        (
            "session",
            &[
                ("meta_key", "TEXT", false, true),
                ("meta_value", "TEXT", true, false),
            ],
        ),
    ];
    let mut problems = Vec::new();
    for (table, columns) in want {
        let mut stmt = conn.prepare(&format!("PRAGMA table_info({table})"))?;
        let found: Vec<(String, String, bool, bool)> = stmt
            .query_map([], |r| {
                Ok((
                    r.get(1)?,
                    r.get(2)?,
                    r.get::<_, i64>(3)? != 0,
                    r.get::<_, i64>(5)? != 0,
                ))
            })?
            .collect::<rusqlite::Result<_>>()?;
        if found.is_empty() {
            problems.push(format!("table {table} is missing"));
            continue;
        }
        let found_view: Vec<Column> = found
            .iter()
            .map(|(n, t, nn, pk)| (n.as_str(), t.as_str(), *nn, *pk))
            .collect();
        if found_view != columns {
            let show = |cols: &[Column]| {
                // NOT NULL and the key too: they may be all that differs.
                cols.iter()
                    .map(|(n, t, not_null, key)| {
                        let not_null = if *not_null { " NOT NULL" } else { "" };
                        let key = if *key { " PRIMARY KEY" } else { "" };
                        format!("{n} {t}{not_null}{key}")
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            problems.push(format!(
                "table {table} has columns ({}), expected ({})",
                show(&found_view),
                show(columns)
            ));
        }
    }
    Ok(problems)
}

/// `(id, steps)` of every run, by id.
pub fn read_run_steps(conn: &Connection) -> Result<Vec<(i64, i64)>> {
    let mut stmt = conn.prepare("SELECT id, steps FROM runs ORDER BY id")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// The `shards` table, or None when the pack records no checksums.
pub fn read_shard_records(conn: &Connection) -> Result<Option<Vec<ShardRecord>>> {
    if !has_table(conn, "shards")? {
        return Ok(None);
    }
    let mut stmt =
        conn.prepare("SELECT shard, file_name, rows, bytes, crc32c FROM shards ORDER BY shard")?;
    let rows = stmt
        .query_map([], |r| {
            let crc: String = r.get(4)?;
            Ok(ShardRecord {
                shard: r.get(0)?,
                file_name: r.get(1)?,
                rows: r.get::<_, i64>(2)? as u64,
                bytes: r.get::<_, i64>(3)? as u64,
                crc32c: u32::from_str_radix(&crc, 16).unwrap_or(!0),
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(Some(rows))
}

/// The `run_index` table, or None when the pack has none.
pub fn read_run_index(conn: &Connection) -> Result<Option<Vec<(i64, RowLocation)>>> {
    if !has_table(conn, "run_index")? {
        return Ok(None);
    }
    let mut stmt = conn
        .prepare("SELECT run_id, shard, row_offset, global_row FROM run_index ORDER BY run_id")?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                RowLocation {
                    shard: r.get(1)?,
                    row_offset: r.get::<_, i64>(2)? as u64,
                    global_row: r.get::<_, i64>(3)? as u64,
                },
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(Some(rows))
}

/// One row of `runs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRow {
    pub id: i64,
    pub seed: i64,
    pub steps: i64,
    pub max_score: i64,
    pub highest_tile: i64,
}

/// Every row of `runs`, by id.
/// Every `runs.id`, ascending.
pub fn read_run_ids(conn: &Connection) -> Result<Vec<i64>> {
    let mut stmt = conn.prepare("SELECT id FROM runs ORDER BY id")?;
    let ids = stmt
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(ids)
}

pub fn read_runs(conn: &Connection) -> Result<Vec<RunRow>> {
    let mut stmt =
        conn.prepare("SELECT id, seed, steps, max_score, highest_tile FROM runs ORDER BY id")?;
    let rows = stmt
        .query_map([], |r| {
            Ok(RunRow {
                id: r.get(0)?,
                seed: r.get(1)?,
                steps: r.get(2)?,
                max_score: r.get(3)?,
                highest_tile: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Why SQL that names `depth` selected no runs, when the reason is that no run records a depth
/// (`run_details.depth` NULL for all of them, as in a pack converted from the reference
/// packer's, which recorded none): a sentence to add to "selects no runs", else None.
///
/// ```
/// use dataset_packer::format::metadata::no_depth_note;
/// assert!(no_depth_note("depth = 6", [None, None]).is_some());
/// assert!(no_depth_note("depth = 6", [Some(7)]).is_none());
/// assert!(no_depth_note("max_score > 10", [None]).is_none());
/// ```
pub fn no_depth_note(sql: &str, depths: impl IntoIterator<Item = Option<i64>>) -> Option<String> {
    let lower = sql.to_ascii_lowercase();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let names_depth = lower.match_indices("depth").any(|(at, _)| {
        !lower[..at].ends_with(word) && !lower[at + "depth".len()..].starts_with(word)
    });
    if !names_depth || depths.into_iter().any(|d| d.is_some()) {
        return None;
    }
    Some(
        "the pack records no depth (run_details.depth is NULL for every run, as in a pack \
         converted from the reference packer's): re-pack the raw logs, or set it, e.g. \
         `sqlite3 PACK/metadata.db \"UPDATE run_details SET depth = 6\"` for a pack of one \
         depth (docs/migration.md, \"depth\")"
            .to_string(),
    )
}

/// `run_details` by run id (empty when the pack has no such table).
pub fn read_run_details(conn: &Connection) -> Result<std::collections::HashMap<i64, RunDetails>> {
    let mut out = std::collections::HashMap::new();
    if !has_table(conn, "run_details")? {
        return Ok(out);
    }
    let mut stmt = conn.prepare("SELECT * FROM run_details")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>("run_id")?, run_details_of(r)?)))?;
    for row in rows {
        let (id, d) = row?;
        out.insert(id, d);
    }
    Ok(out)
}

/// A `run_details` row (from `SELECT *`); columns an older pack lacks read as None.
fn run_details_of(r: &rusqlite::Row) -> rusqlite::Result<RunDetails> {
    Ok(RunDetails {
        source_path: column_if_present(r, "source_path")?,
        rows_path: column_if_present(r, "rows_path")?,
        depth: column_if_present(r, "depth")?,
        game_index: column_if_present(r, "game_index")?,
        num_moves: column_if_present(r, "num_moves")?,
        max_rank: column_if_present(r, "max_rank")?,
        sum_tile: column_if_present(r, "sum_tile")?,
        seconds: column_if_present(r, "seconds")?,
        source_pack: column_if_present(r, "source_pack")?,
        source_run_id: column_if_present(r, "source_run_id")?,
        fingerprint: column_if_present(r, "fingerprint")?,
        sidecar_bytes: column_if_present(r, "sidecar_bytes")?,
        rows_bytes: column_if_present(r, "rows_bytes")?,
    })
}

/// Rows of a two-column text/int table if it exists (session, finding_counts, skipped_runs, …).
fn read_pairs<T: rusqlite::types::FromSql>(
    conn: &Connection,
    table: &str,
    a: &str,
    b: &str,
) -> Result<Vec<(String, T)>> {
    if !has_table(conn, table)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(&format!("SELECT {a}, {b} FROM {table} ORDER BY {a}"))?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

pub fn read_session(conn: &Connection) -> Result<Vec<(String, String)>> {
    read_pairs(conn, "session", "meta_key", "meta_value")
}

pub fn read_finding_counts(conn: &Connection) -> Result<Vec<(String, i64)>> {
    read_pairs(conn, "finding_counts", "kind", "count")
}

pub fn read_skipped(conn: &Connection) -> Result<Vec<(String, String)>> {
    read_pairs(conn, "skipped_runs", "source_path", "reason")
}

pub fn read_orphans(conn: &Connection) -> Result<Vec<String>> {
    if !has_table(conn, "orphan_rows_files")? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare("SELECT path FROM orphan_rows_files ORDER BY path")?;
    let rows = stmt
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

pub fn read_findings(conn: &Connection) -> Result<Vec<FindingRecord>> {
    if !has_table(conn, "findings")? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(
        "SELECT kind, run_id, source_path, line, step_index, detail FROM findings ORDER BY rowid",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(FindingRecord {
                kind: r.get(0)?,
                run_id: r.get(1)?,
                source_path: r.get(2)?,
                line: r.get::<_, Option<i64>>(3)?.map(|v| v as u64),
                step_index: r.get::<_, Option<i64>>(4)?.map(|v| v as u64),
                detail: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Copies the findings, skipped runs and orphans of a source pack into a new one, with run ids
/// renumbered by `new_id` (merge, shuffle and export carry them over); examples of runs
/// `new_id` leaves out (None) are dropped. Kinds in `recomputed` are left for the caller,
/// which finds them anew.
pub fn copy_findings(
    db: &MetadataWriter,
    src: &Connection,
    new_id: &dyn Fn(u32) -> Option<u32>,
    recomputed: &[&str],
) -> Result<()> {
    for (kind, count) in read_finding_counts(src)? {
        if !recomputed.contains(&kind.as_str()) {
            db.add_finding_count(&kind, count)?;
        }
    }
    for f in read_findings(src)? {
        if recomputed.contains(&f.kind.as_str()) {
            continue;
        }
        let run_id = match f.run_id {
            None => None,
            Some(old) => match new_id(old) {
                Some(new) => Some(new),
                None => continue,
            },
        };
        db.insert_finding(&FindingRecord { run_id, ..f })?;
    }
    for (path, reason) in read_skipped(src)? {
        db.insert_skipped(&path, &reason)?;
    }
    for path in read_orphans(src)? {
        db.insert_orphan(&path)?;
    }
    Ok(())
}

/// The `companions` table (empty when the pack has none), by name and shard.
pub fn read_companions(conn: &Connection) -> Result<Vec<CompanionRecord>> {
    if !has_table(conn, "companions")? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(
        "SELECT name, shard, file_name, descr, shape, rows, bytes, crc32c FROM companions
         ORDER BY name, shard",
    )?;
    let rows = stmt
        .query_map([], |r| {
            let crc: String = r.get(7)?;
            Ok(CompanionRecord {
                name: r.get(0)?,
                shard: r.get(1)?,
                file_name: r.get(2)?,
                descr: r.get(3)?,
                shape: r.get(4)?,
                rows: r.get::<_, i64>(5)?.max(0) as u64,
                bytes: r.get::<_, i64>(6)?.max(0) as u64,
                crc32c: u32::from_str_radix(&crc, 16).unwrap_or(!0),
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// One run looked up by id: its `runs` row, its `run_details` row and where its rows start
/// (`run_index`); `None` where the pack has no such table or row.
#[derive(Debug, Clone, PartialEq)]
pub struct RunLookup {
    pub run: RunRow,
    pub details: Option<RunDetails>,
    pub first_row: Option<RowLocation>,
}

/// Reads one run by id (three primary-key lookups, whatever the number of runs), or None when
/// `runs` has no such id. `run_details` columns an older pack lacks read as None.
pub fn read_run(conn: &Connection, id: i64) -> Result<Option<RunLookup>> {
    let run = conn
        .query_row(
            "SELECT id, seed, steps, max_score, highest_tile FROM runs WHERE id = ?1",
            [id],
            |r| {
                Ok(RunRow {
                    id: r.get(0)?,
                    seed: r.get(1)?,
                    steps: r.get(2)?,
                    max_score: r.get(3)?,
                    highest_tile: r.get(4)?,
                })
            },
        )
        .optional()?;
    let Some(run) = run else { return Ok(None) };
    let details = if has_table(conn, "run_details")? {
        conn.query_row(
            "SELECT * FROM run_details WHERE run_id = ?1",
            [id],
            run_details_of,
        )
        .optional()?
    } else {
        None
    };
    let first_row = if has_table(conn, "run_index")? {
        conn.query_row(
            "SELECT shard, row_offset, global_row FROM run_index WHERE run_id = ?1",
            [id],
            |r| {
                Ok(RowLocation {
                    shard: r.get(0)?,
                    row_offset: r.get::<_, i64>(1)? as u64,
                    global_row: r.get::<_, i64>(2)? as u64,
                })
            },
        )
        .optional()?
    } else {
        None
    };
    Ok(Some(RunLookup {
        run,
        details,
        first_row,
    }))
}

/// A nullable column by name; None also when the table has no such column.
fn column_if_present<T: rusqlite::types::FromSql>(
    r: &rusqlite::Row,
    name: &str,
) -> rusqlite::Result<Option<T>> {
    match r.as_ref().column_index(name) {
        Ok(i) => r.get(i),
        Err(_) => Ok(None),
    }
}

/// `(count, smallest id, largest id)` of `runs` (ids None when it is empty).
pub fn run_id_range(conn: &Connection) -> Result<(i64, Option<i64>, Option<i64>)> {
    Ok(
        conn.query_row("SELECT COUNT(*), MIN(id), MAX(id) FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wal_mode_database_is_read_without_files_beside_it() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("odd name ü%?#");
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join(FILE_NAME);
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY); INSERT INTO runs VALUES (7);",
        )
        .unwrap();
        drop(conn);
        assert!(is_wal_mode(&path));
        let n: i64 = open_read_only(&path)
            .unwrap()
            .query_row("SELECT id FROM runs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 7);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [FILE_NAME]);
    }

    #[test]
    fn formats_utc_times() {
        assert_eq!(utc_iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_iso8601(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_iso8601(1_795_446_309), "2026-11-23T15:05:09Z");
        assert_eq!(utc_iso8601(4_107_542_399), "2100-02-28T23:59:59Z");
    }
}
