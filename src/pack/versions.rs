//! A pack's versions: its identity (`pack_id`), the history `metadata.db` keeps of it (one
//! version per publish: rows, runs, files, companion families, the command line, and for a new
//! pack the packs it came from), the tags that name versions, and a pack read as one of its
//! versions was.
//!
//! Changes in place only ever append (`pack --update` adds rows at the end and runs with higher
//! ids; `attach` adds a family; `detach` removes one), so version N of a pack is a prefix of
//! it: the first `rows` rows of the files it lists, the `runs` smallest run ids, and the
//! families it lists. Reading it needs no row scan: [`View::restrict`] shadows the tables of a
//! read-only `metadata.db` connection with temporary views of that version (every SQL read,
//! selections included, sees only its runs), and [`View::cut`] cuts the shard list to its rows.
//! A pack made before versions reads as version 1 of itself, with no `pack_id`.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::error::{Context, Error, Result, err, fail};
use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;

use crate::format::metadata::{self, MetadataWriter, PACK_ID, STEPS_FAMILY};
use crate::pack::publish::OutputDir;
use crate::pack::shards::{self, Shard};

/// Which version of a pack to read: the latest, a number, or a tag.
///
/// ```
/// use dataset_packer::VersionSpec;
///
/// assert_eq!("3".parse::<VersionSpec>()?, VersionSpec::Number(3));
/// assert_eq!("latest".parse::<VersionSpec>()?, VersionSpec::Latest);
/// assert_eq!("paper-v1".parse::<VersionSpec>()?, VersionSpec::Tag("paper-v1".into()));
/// assert!("0".parse::<VersionSpec>().is_err());
/// # Ok::<(), dataset_packer::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum VersionSpec {
    /// The pack as it is now.
    #[default]
    Latest,
    /// Version N (1, 2, …).
    Number(u32),
    /// The version a tag names.
    Tag(String),
}

impl FromStr for VersionSpec {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<VersionSpec> {
        if s == "latest" {
            return Ok(VersionSpec::Latest);
        }
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            return match s.parse::<u32>() {
                Ok(n) if n > 0 => Ok(VersionSpec::Number(n)),
                _ => fail!(
                    InvalidInput,
                    "version {s} does not exist: versions are numbered from 1"
                ),
            };
        }
        check_tag_name(s)?;
        Ok(VersionSpec::Tag(s.to_string()))
    }
}

impl fmt::Display for VersionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VersionSpec::Latest => f.write_str("latest"),
            VersionSpec::Number(n) => write!(f, "{n}"),
            VersionSpec::Tag(t) => f.write_str(t),
        }
    }
}

/// Refuses a tag name that could be read as something else: empty, all digits (a version
/// number), `latest`, or with characters outside letters, digits and `._-`.
pub fn check_tag_name(name: &str) -> Result<()> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if name.is_empty() || !ok_chars || name.len() > 200 {
        fail!(
            InvalidInput,
            "tag {name:?}: a tag is 1 to 200 letters, digits, '.', '_' or '-' (and not all digits)"
        );
    }
    if name.bytes().all(|b| b.is_ascii_digit()) || name == "latest" {
        fail!(
            InvalidInput,
            "tag {name:?} would read as a version number or `latest`; pick another name"
        );
    }
    Ok(())
}

/// One file of a version, as the history records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionFile {
    /// `steps`, or a companion family's name.
    pub family: String,
    pub shard: u32,
    pub file_name: String,
    /// The file's rows that belong to the version.
    pub rows: u64,
    /// The file's size and CRC-32C when the version was made.
    pub bytes: u64,
    pub crc32c: String,
}

/// A pack a new pack was made from: its identity and the version that was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    pub pack_id: Option<String>,
    pub version: u32,
    pub path: String,
}

impl fmt::Display for Source {
    /// `pack_id@version` (`unversioned@1` for a pack made before versions).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = self.pack_id.as_deref().unwrap_or("unversioned");
        write!(f, "{id}@{}", self.version)
    }
}

/// One version of a pack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Version {
    pub version: u32,
    /// When it was made (UTC, ISO 8601); empty when a pack made before versions did not say.
    pub created_utc: String,
    /// What made it: `pack`, `update`, `attach`, `detach`, `merge`, `shuffle`, `export`,
    /// `PackWriter`.
    pub operation: String,
    pub rows: u64,
    pub runs: u64,
    /// The command line (its arguments); empty for the version 1 of a pack made before
    /// versions.
    pub command: Vec<String>,
    /// Its companion families.
    pub families: Vec<String>,
    pub files: Vec<VersionFile>,
    /// The tags that name it.
    pub tags: Vec<String>,
    /// For the version that made the pack: the packs it came from.
    pub sources: Vec<Source>,
}

/// A pack's identity and history.
#[derive(Debug, Clone, Serialize)]
pub struct History {
    /// None for a pack made before versions (read as version 1 of itself).
    pub pack_id: Option<String>,
    /// Whether `metadata.db` records the history (false: version 1 is what the pack is now).
    pub recorded: bool,
    /// Oldest first.
    pub versions: Vec<Version>,
}

impl History {
    /// Reads the history of the pack whose `metadata.db` is `conn`.
    pub fn read(conn: &Connection) -> Result<History> {
        let mut history = History::read_summary(conn)?;
        if history.recorded {
            for v in &mut history.versions {
                v.files = version_files(conn, v.version)?;
            }
        }
        Ok(history)
    }

    /// [`History::read`] without the versions' file lists (each version's `files` is empty
    /// but for a pack made before versions): what opening a version needs, in a few queries
    /// however long the history.
    pub fn read_summary(conn: &Connection) -> Result<History> {
        let pack_id = metadata::session_value(conn, PACK_ID)?;
        if metadata::latest_version(conn)?.is_none() {
            return Ok(History {
                pack_id: None,
                recorded: false,
                versions: vec![unrecorded_version(conn)?],
            });
        }
        let mut stmt = conn.prepare(
            "SELECT version, created_utc, operation, rows, runs, command FROM main.versions
             ORDER BY version",
        )?;
        let mut versions = stmt
            .query_map([], |r| {
                Ok(Version {
                    version: r.get(0)?,
                    created_utc: r.get(1)?,
                    operation: r.get(2)?,
                    rows: r.get::<_, i64>(3)? as u64,
                    runs: r.get::<_, i64>(4)? as u64,
                    command: serde_json::from_str(&r.get::<_, String>(5)?).unwrap_or_default(),
                    families: Vec::new(),
                    files: Vec::new(),
                    tags: Vec::new(),
                    sources: Vec::new(),
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut each =
            |sql: &str,
             add: &mut dyn FnMut(&mut Version, &rusqlite::Row) -> rusqlite::Result<()>|
             -> Result<()> {
                let mut stmt = conn.prepare(sql)?;
                let mut rows = stmt.query([])?;
                while let Some(row) = rows.next()? {
                    let number: u32 = row.get(0)?;
                    if let Some(v) = versions.iter_mut().find(|v| v.version == number) {
                        add(v, row)?;
                    }
                }
                Ok(())
            };
        each(
            "SELECT DISTINCT version, family FROM main.version_files
             WHERE family <> 'steps' ORDER BY version, family",
            &mut |v, r| {
                v.families.push(r.get(1)?);
                Ok(())
            },
        )?;
        each(
            "SELECT version, name FROM main.version_tags ORDER BY name",
            &mut |v, r| {
                v.tags.push(r.get(1)?);
                Ok(())
            },
        )?;
        each(
            "SELECT version, pack_id, source_version, path FROM main.version_sources
             ORDER BY rowid",
            &mut |v, r| {
                v.sources.push(Source {
                    pack_id: r.get(1)?,
                    version: r.get(2)?,
                    path: r.get(3)?,
                });
                Ok(())
            },
        )?;
        Ok(History {
            pack_id,
            recorded: true,
            versions,
        })
    }

    /// The latest version.
    pub fn latest(&self) -> &Version {
        self.versions.last().expect("a history has a version")
    }

    /// The version `spec` names in the pack at `dir` (for messages), or an error that lists
    /// what the pack has.
    pub fn find(&self, dir: &Path, spec: &VersionSpec) -> Result<&Version> {
        let numbers = || {
            let (first, last) = (self.versions[0].version, self.latest().version);
            if first == last {
                format!("it has version {first} only")
            } else {
                format!("it has versions {first} to {last}")
            }
        };
        match spec {
            VersionSpec::Latest => Ok(self.latest()),
            VersionSpec::Number(n) => self
                .versions
                .iter()
                .find(|v| v.version == *n)
                .with_context(|| format!("{} has no version {n}: {}", dir.display(), numbers())),
            VersionSpec::Tag(t) => {
                let found = self.versions.iter().find(|v| v.tags.contains(t));
                found.with_context(|| {
                    let tags: Vec<&str> = self
                        .versions
                        .iter()
                        .flat_map(|v| v.tags.iter().map(String::as_str))
                        .collect();
                    format!(
                        "{} has no tag {t:?} ({}; {})",
                        dir.display(),
                        if tags.is_empty() {
                            "it has no tags".to_string()
                        } else {
                            format!("its tags: {}", tags.join(", "))
                        },
                        numbers()
                    )
                })
            }
        }
    }

    /// The first version after `version` that does not have `family`: the one that removed it.
    pub fn removed_in(&self, version: u32, family: &str) -> Option<u32> {
        self.versions
            .iter()
            .filter(|v| v.version > version)
            .find(|v| !v.families.iter().any(|f| f == family))
            .map(|v| v.version)
    }

    /// Whether any version lists `family` (one none lists was put there by another tool).
    fn records_family(&self, family: &str) -> bool {
        self.versions
            .iter()
            .any(|v| v.families.iter().any(|f| f == family))
    }

    /// `pack_id@version` (`unversioned@1` for a pack made before versions).
    pub fn identity(&self, version: u32) -> String {
        format!(
            "{}@{version}",
            self.pack_id.as_deref().unwrap_or("unversioned")
        )
    }
}

/// Version 1 of a pack made before versions: the pack as its tables describe it now.
fn unrecorded_version(conn: &Connection) -> Result<Version> {
    let rows: i64 = if metadata::has_table(conn, "shards")? {
        conn.query_row(
            "SELECT COALESCE((SELECT SUM(rows) FROM main.shards),
                             (SELECT SUM(steps) FROM main.runs), 0)",
            [],
            |r| r.get(0),
        )?
    } else {
        conn.query_row("SELECT COALESCE(SUM(steps), 0) FROM main.runs", [], |r| {
            r.get(0)
        })?
    };
    let runs: i64 = conn.query_row("SELECT COUNT(*) FROM main.runs", [], |r| r.get(0))?;
    let mut files: Vec<VersionFile> = metadata::read_shard_records(conn)?
        .unwrap_or_default()
        .into_iter()
        .map(|s| VersionFile {
            family: STEPS_FAMILY.into(),
            shard: s.shard,
            file_name: s.file_name,
            rows: s.rows,
            bytes: s.bytes,
            crc32c: format!("{:08x}", s.crc32c),
        })
        .collect();
    files.extend(
        metadata::read_companions(conn)?
            .into_iter()
            .map(|c| VersionFile {
                family: c.name,
                shard: c.shard,
                file_name: c.file_name,
                rows: c.rows,
                bytes: c.bytes,
                crc32c: format!("{:08x}", c.crc32c),
            }),
    );
    Ok(Version {
        version: 1,
        created_utc: metadata::session_value(conn, "created_utc")?.unwrap_or_default(),
        operation: metadata::session_value(conn, "command")?.unwrap_or_else(|| "unknown".into()),
        rows: rows as u64,
        runs: runs as u64,
        command: Vec::new(),
        families: families_of(&files),
        files,
        tags: Vec::new(),
        sources: Vec::new(),
    })
}

fn version_files(conn: &Connection, version: u32) -> Result<Vec<VersionFile>> {
    let mut stmt = conn.prepare_cached(
        "SELECT family, shard, file_name, rows, bytes, crc32c FROM main.version_files
         WHERE version = ?1 ORDER BY family <> 'steps', family, shard",
    )?;
    let files = stmt
        .query_map([version], |r| {
            Ok(VersionFile {
                family: r.get(0)?,
                shard: r.get(1)?,
                file_name: r.get(2)?,
                rows: r.get::<_, i64>(3)? as u64,
                bytes: r.get::<_, i64>(4)? as u64,
                crc32c: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(files)
}

fn families_of(files: &[VersionFile]) -> Vec<String> {
    let names: BTreeSet<&str> = files
        .iter()
        .filter(|f| f.family != STEPS_FAMILY)
        .map(|f| f.family.as_str())
        .collect();
    names.into_iter().map(str::to_string).collect()
}

/// A pack read as one of its versions: what [`View::restrict`] and [`View::cut`] apply.
#[derive(Debug, Clone)]
pub struct View {
    pub history: History,
    /// Index into `history.versions`.
    index: usize,
}

impl View {
    /// The view of the version `spec` names of the pack whose `metadata.db` is `conn` (at
    /// `dir`, for messages).
    pub fn resolve(conn: &Connection, dir: &Path, spec: &VersionSpec) -> Result<View> {
        let mut history = History::read_summary(conn)?;
        let number = history.find(dir, spec)?.version;
        let index = history
            .versions
            .iter()
            .position(|v| v.version == number)
            .expect("found above");
        if history.recorded {
            history.versions[index].files = version_files(conn, number)?;
        }
        Ok(View { history, index })
    }

    /// The version read.
    pub fn version(&self) -> &Version {
        &self.history.versions[self.index]
    }

    /// Whether it is the latest version (the pack as it is: nothing to restrict).
    pub fn is_latest(&self) -> bool {
        self.index + 1 == self.history.versions.len()
    }

    /// Makes the read-only connection `conn` see the pack as the version was: temporary views
    /// named like the tables shadow them (SQLite resolves an unqualified name in `temp`
    /// first), so the version's runs, shards, families and totals are all any query sees,
    /// a user's run selection included. Finding counts stay the latest's (they are not kept
    /// per version); finding examples are those of the version's runs.
    pub fn restrict(&self, conn: &Connection) -> Result<()> {
        if self.is_latest() {
            return Ok(());
        }
        let v = self.version();
        // The id of the version's last run: runs added later have higher ids.
        let last_run: Option<i64> = match v.runs {
            0 => None,
            n => conn
                .query_row(
                    "SELECT id FROM main.runs ORDER BY id LIMIT 1 OFFSET ?1",
                    [n as i64 - 1],
                    |r| r.get(0),
                )
                .optional()?,
        };
        let last = last_run.unwrap_or(-1);
        let mut sql = format!(
            "CREATE TEMP VIEW runs AS SELECT * FROM main.runs WHERE id <= {last};
             CREATE TEMP VIEW run_details AS SELECT * FROM main.run_details WHERE run_id <= {last};"
        );
        // `findings` keeps its rowid: its examples are read in the order they were recorded.
        for (table, column, rowid) in [
            ("run_index", "run_id", ""),
            ("findings", "run_id", "rowid AS rowid, "),
        ] {
            if metadata::has_table(conn, table)? {
                sql.push_str(&format!(
                    "CREATE TEMP VIEW {table} AS SELECT {rowid}* FROM main.{table}
                     WHERE {column} IS NULL OR {column} <= {last};"
                ));
            }
        }
        let version = v.version;
        let steps = v.files.iter().filter(|f| f.family == STEPS_FAMILY).count();
        sql.push_str(&format!(
            "CREATE TEMP VIEW shards AS
               SELECT v.shard AS shard, v.file_name AS file_name, v.rows AS rows,
                      COALESCE(m.bytes, v.bytes) AS bytes, COALESCE(m.crc32c, v.crc32c) AS crc32c
               FROM main.version_files v LEFT JOIN main.shards m ON m.file_name = v.file_name
               WHERE v.version = {version} AND v.family = '{STEPS_FAMILY}';
             CREATE TEMP VIEW companions AS
               SELECT c.name AS name, v.shard AS shard, v.file_name AS file_name,
                      c.descr AS descr, c.shape AS shape, v.rows AS rows, c.bytes AS bytes,
                      c.crc32c AS crc32c
               FROM main.version_files v JOIN main.companions c
                 ON c.name = v.family AND c.shard = v.shard
               WHERE v.version = {version} AND v.family <> '{STEPS_FAMILY}';
             CREATE TEMP VIEW session AS
               SELECT meta_key, CASE meta_key
                 WHEN 'total_rows' THEN '{rows}'
                 WHEN 'total_runs' THEN '{runs}'
                 WHEN 'shard_count' THEN '{steps}'
                 ELSE meta_value END AS meta_value
               FROM main.session;",
            rows = v.rows,
            runs = v.runs,
        ));
        conn.execute_batch(&sql)
            .context("reading metadata.db as an earlier version")
    }

    /// Cuts the pack's shards (listed as they are now) to the version: the files it lists,
    /// each to its rows. An error when the files hold less than the version recorded (the
    /// pack was rewritten, not grown).
    pub fn cut(&self, dir: &Path, mut shards: Vec<Shard>) -> Result<Vec<Shard>> {
        if self.is_latest() {
            return Ok(shards);
        }
        let v = self.version();
        let steps: Vec<&VersionFile> = v
            .files
            .iter()
            .filter(|f| f.family == STEPS_FAMILY)
            .collect();
        if steps.is_empty() {
            // A pack made before versions that recorded no shards: its rows are a prefix.
            return Ok(cut_rows(shards, v.rows));
        }
        if steps.len() > shards.len() {
            fail!(
                Corrupt,
                "{}: version {} lists {} shard files, the folder has {}: the pack was rewritten since",
                dir.display(),
                v.version,
                steps.len(),
                shards.len()
            );
        }
        shards.truncate(steps.len());
        for (shard, file) in shards.iter_mut().zip(&steps) {
            if shard.name != file.file_name || shard.header.rows < file.rows {
                fail!(
                    Corrupt,
                    "{}: version {} has {} rows of {}, the folder has {} with {} rows: the pack was rewritten since",
                    dir.display(),
                    v.version,
                    file.rows,
                    file.file_name,
                    shard.name,
                    shard.header.rows
                );
            }
            shard.header.rows = file.rows;
        }
        Ok(shards)
    }

    /// Refuses `family` when the version cannot give it: removed by a later version (named),
    /// or added by a later one. Families no version records (placed by other tools) pass.
    pub fn check_family(&self, dir: &Path, family: &str) -> Result<()> {
        let v = self.version();
        if !self.history.recorded || !self.history.records_family(family) {
            return Ok(());
        }
        if v.families.iter().any(|f| f == family) {
            return match self.history.removed_in(v.version, family) {
                Some(removed) => fail!(
                    InvalidInput,
                    "{} version {}: its companion {family} was removed by version {removed} ({}); its rows are still readable without it",
                    dir.display(),
                    v.version,
                    self.history
                        .versions
                        .iter()
                        .find(|x| x.version == removed)
                        .map_or("", |x| x.operation.as_str())
                ),
                None => Ok(()),
            };
        }
        let added = self
            .history
            .versions
            .iter()
            .find(|x| x.version > v.version && x.families.iter().any(|f| f == family));
        match added {
            Some(added) => fail!(
                InvalidInput,
                "{} version {} has no companion {family}: version {} added it",
                dir.display(),
                v.version,
                added.version
            ),
            None => fail!(
                InvalidInput,
                "{} version {} has no companion {family}",
                dir.display(),
                v.version
            ),
        }
    }

    /// The error for a run id the version does not have: its runs and their ids (those of
    /// `conn`, restricted to the version), and for an earlier version how many runs the latest
    /// has.
    pub fn missing_run(&self, conn: &Connection, dir: &Path, id: impl fmt::Display) -> Error {
        let (count, min, max) = match metadata::run_id_range(conn) {
            Ok(range) => range,
            Err(e) => return e,
        };
        let ids = match (min, max) {
            (Some(a), Some(b)) => format!("ids {a}–{b}"),
            _ => "no ids".into(),
        };
        let v = self.version();
        if self.is_latest() {
            return err!(
                InvalidInput,
                "run {id} is not in {} (its runs table has {count} runs, {ids})",
                dir.display()
            );
        }
        err!(
            InvalidInput,
            "run {id} is not in version {} of {} (it has {count} runs, {ids}; the latest version, {}, has {})",
            v.version,
            dir.display(),
            self.history.latest().version,
            self.history.latest().runs
        )
    }

    /// Whether the version has `family` (families no version records, placed by other tools,
    /// belong to every version).
    pub fn has_family(&self, family: &str) -> bool {
        let v = self.version();
        !self.history.recorded
            || v.families.iter().any(|f| f == family)
            || !self.history.records_family(family)
    }
}

/// Records in a new pack's `db` that it was made from the pack at `dir` (whose `metadata.db`
/// is `conn`), read as `version` (None: its latest): the new pack's lineage.
pub(crate) fn record_source(
    db: &MetadataWriter,
    dir: &Path,
    conn: &Connection,
    version: Option<u32>,
) -> Result<()> {
    let history = History::read(conn)?;
    let version = version.unwrap_or(history.latest().version);
    db.record_source(
        history.pack_id.as_deref(),
        version,
        &dir.display().to_string(),
    )
}

/// The first `rows` rows of `shards` (at least one shard stays, maybe cut to no rows).
fn cut_rows(shards: Vec<Shard>, rows: u64) -> Vec<Shard> {
    let mut left = rows;
    let mut out = Vec::new();
    for mut s in shards {
        if left == 0 && !out.is_empty() {
            break;
        }
        s.header.rows = s.header.rows.min(left);
        left -= s.header.rows;
        out.push(s);
    }
    out
}

/// Names the version `spec` names of the pack at `dir` `name`, in place with the publish
/// protocol; returns the version named. The pack gets no new version: a tag is a name, not a
/// change of data. A name that is already on another version is refused, of kind `Refused`
/// naming that version (a paper or a checkpoint may cite it): [`move_tag`] moves it. Naming
/// the version the name is already on changes nothing.
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// use dataset_packer::{ErrorKind, Pack, VersionSpec};
/// let named = dataset_packer::tag(fixture.path(), "baseline", &VersionSpec::Latest)?;
/// let pack = Pack::open_version(fixture.path(), &"baseline".parse()?)?;
/// assert_eq!(pack.version(), named);
/// assert_eq!(dataset_packer::tag(fixture.path(), "baseline", &VersionSpec::Number(1))?, 1);
/// # Ok(()) }
/// ```
pub fn tag(dir: &Path, name: &str, spec: &VersionSpec) -> Result<u32> {
    name_version(dir, name, spec, false)
}

/// [`tag`], moving the name from the version it is on, if any, to the version `spec` names.
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// use dataset_packer::VersionSpec;
/// dataset_packer::tag(fixture.path(), "best", &VersionSpec::Latest)?;
/// assert_eq!(dataset_packer::move_tag(fixture.path(), "best", &VersionSpec::Number(1))?, 1);
/// # Ok(()) }
/// ```
pub fn move_tag(dir: &Path, name: &str, spec: &VersionSpec) -> Result<u32> {
    name_version(dir, name, spec, true)
}

fn name_version(dir: &Path, name: &str, spec: &VersionSpec, moving: bool) -> Result<u32> {
    check_tag_name(name)?;
    let out = OutputDir::open_existing(dir)?;
    let history = History::read(&shards::open_metadata(dir)?)?;
    let version = history.find(dir, spec)?.version;
    if let Some(on) = history
        .versions
        .iter()
        .find(|v| v.tags.iter().any(|t| t == name))
    {
        if on.version == version {
            return Ok(version);
        }
        if !moving {
            return Err(err!(
                Refused,
                "{}: the tag {name} is on version {} already; moving a name that may be cited is asked for explicitly",
                dir.display(),
                on.version
            )
            .with_option("move"));
        }
    }
    let staging = out.begin_staging()?;
    let db = MetadataWriter::annotate_copy(dir, &staging)?;
    db.set_tag(name, version)?;
    db.finish()?;
    publish_metadata(out)?;
    Ok(version)
}

/// Removes the tag `name` from the pack at `dir`; returns the version it named.
pub fn untag(dir: &Path, name: &str) -> Result<u32> {
    let out = OutputDir::open_existing(dir)?;
    let staging = out.begin_staging()?;
    let db = MetadataWriter::annotate_copy(dir, &staging)?;
    let Some(version) = db.delete_tag(name)? else {
        fail!(InvalidInput, "{} has no tag {name:?}", dir.display());
    };
    db.finish()?;
    publish_metadata(out)?;
    Ok(version)
}

/// Publishes a staged `metadata.db`, every other file of the pack kept in place.
fn publish_metadata(out: OutputDir) -> Result<()> {
    let mut kept = out.pack_files()?;
    kept.retain(|n| n != metadata::FILE_NAME);
    out.publish_keeping(&kept)
}
