//! One input of a merge: checked before anything is written, then read. Its recorded
//! checksums (shards and companions) are verified against the CRCs computed while copying.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Result, err, fail};
use crate::format::fingerprint::Fingerprint;
use crate::format::metadata::{self, CompanionRecord, RunDetails, RunRow, ShardRecord};
use crate::format::valuation::ValuationTable;
use crate::pack::families::{OpenCompanion, Scan};
use crate::pack::fingerprints;
use crate::pack::open::Located;
use crate::pack::shards::Shard;
use crate::pack::versions::VersionSpec;
use crate::verify;

/// One input pack, validated and read.
pub(super) struct Source {
    /// The input as the user named it (a folder, or a URL).
    pub(super) path: PathBuf,
    /// Where its files are read from (a remote input's view in the cache, kept while merging).
    located: Located,
    pub(super) shards: Vec<Shard>,
    pub(super) runs: Vec<RunRow>,
    pub(super) details: HashMap<i64, RunDetails>,
    pub(super) valuations: ValuationTable,
    pub(super) session: Vec<(String, String)>,
    /// Its metadata.db (in a Mutex only so the reading thread can share the Source).
    pub(super) conn: Mutex<rusqlite::Connection>,
    /// Each run's fingerprint, in `runs` order (recorded, or computed from the rows).
    pub(super) fingerprints: Vec<Fingerprint>,
    /// Its companion arrays, and the checksums it recorded for them.
    pub(super) companions: Scan,
    companion_records: Vec<CompanionRecord>,
    /// The shard checksums the input recorded, verified while copying.
    recorded: Option<Vec<ShardRecord>>,
}

impl Source {
    /// Validates an input before anything is written. An input that records shard checksums
    /// gets the structure and metadata checks here and its CRCs verified while it is copied
    /// (so it is read once); one without checksums (an older tool's) gets the full row pass.
    pub(super) fn open(path: &Path, options: &verify::Options) -> Result<Source> {
        let located = crate::pack::open::locate(path)?;
        located.name_errors(Source::open_located(located.clone(), options))
    }

    fn open_located(located: Located, options: &verify::Options) -> Result<Source> {
        let (path, dir) = (located.given(), located.dir());
        // Its records alone, before it is validated: a shuffled pack is refused as such, and
        // the recorded checksums decide how much the validation reads.
        let db = crate::pack::open::open_records(dir);
        let shuffled = db
            .as_ref()
            .and_then(|c| metadata::session_value(c, "shuffled").ok());
        if shuffled.flatten().as_deref() == Some("true") {
            fail!(
                Refused,
                "input {} is a shuffled pack; merge combines packs in run order: merge the unshuffled packs first, then shuffle the result",
                path.display()
            );
        }
        let recorded = db.and_then(|c| metadata::read_shard_records(&c).ok().flatten());
        let options = verify::Options {
            scan_rows: recorded.is_none(),
            ..options.clone()
        };
        let report = verify::check_located(&located, &options)?;
        if !report.valid() {
            fail!(
                Corrupt,
                "input {} is not a valid pack; nothing was written:\n{}",
                path.display(),
                report.failures()
            );
        }
        let opened = crate::pack::open::open(dir, &VersionSpec::Latest, true)?;
        let companions = opened.families();
        let valuations = opened.valuations()?;
        let crate::pack::open::Opened { conn, shards, .. } = opened;
        let session = metadata::read_session(&conn)?;
        let runs = metadata::read_runs(&conn)?;
        let details = metadata::read_run_details(&conn)?;
        let (fingerprints, _) =
            fingerprints::of_pack(dir, &shards, &runs, &details, &valuations, options.workers)?;
        let companion_records = metadata::read_companions(&conn)?;
        Ok(Source {
            path: path.to_path_buf(),
            located: located.clone(),
            shards,
            runs,
            details,
            valuations,
            session,
            conn: Mutex::new(conn),
            fingerprints,
            companions,
            companion_records,
            recorded,
        })
    }

    pub(super) fn rows(&self) -> u64 {
        self.shards.iter().map(|s| s.header.rows).sum()
    }

    /// How messages name one of its runs: the pack and the run's source file, or its id.
    pub(super) fn describe_run(&self, slot: usize) -> String {
        let run = &self.runs[slot];
        match self
            .details
            .get(&run.id)
            .and_then(|d| d.source_path.as_deref())
        {
            Some(p) => format!("{} of {}", p, self.path.display()),
            None => format!("run {} of {}", run.id, self.path.display()),
        }
    }

    /// Its path as recorded in the output (canonical when it resolves).
    pub(super) fn canonical_path(&self) -> String {
        if self.located.is_remote() {
            return self.path.display().to_string();
        }
        std::fs::canonicalize(&self.path)
            .unwrap_or_else(|_| self.path.clone())
            .display()
            .to_string()
    }

    /// Compares the CRC of shard `index` just copied with the one the pack recorded (when it
    /// did).
    pub(super) fn verify_checksum(&self, index: usize, data_crc: u32) -> Result<()> {
        let Some(record) = self.recorded.as_ref().and_then(|r| r.get(index)) else {
            return Ok(());
        };
        let shard = &self.shards[index];
        let data_len = (shard.header.rows * shard.row_bytes() as u64) as usize;
        let crc = shard.file_crc(data_crc, data_len)?;
        if crc != record.crc32c {
            return Err(err!(
                Corrupt,
                "input {}: {} does not match its recorded checksum (crc32c recorded {:08x}, computed {crc:08x}); nothing was written",
                self.path.display(),
                shard.name,
                record.crc32c
            ));
        }
        Ok(())
    }

    /// Compares a companion file just read with the CRC the pack recorded (when it did).
    pub(super) fn verify_companion(&self, cf: &OpenCompanion, data_crc: u32) -> Result<()> {
        let Some(record) = self
            .companion_records
            .iter()
            .find(|r| r.file_name == cf.file.file_name)
        else {
            return Ok(());
        };
        let crc = cf.file_crc(data_crc)?;
        if crc != record.crc32c {
            return Err(err!(
                Corrupt,
                "input {}: {} does not match its recorded checksum (crc32c recorded {:08x}, computed {crc:08x}); nothing was written",
                self.path.display(),
                cf.file.file_name,
                record.crc32c
            ));
        }
        Ok(())
    }
}
