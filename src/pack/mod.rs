//! The pack as a library: what a Rust program uses to read a pack ([`Pack`]) and to write
//! one ([`PackWriter`]), and under them the machinery every command shares.
//!
//! ```
//! # fn main() -> dataset_packer::Result<()> {
//! # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
//! # let path = fixture.path();
//! use dataset_packer::Pack;
//!
//! let pack = Pack::open(path)?; // read-only, memory-mapped; headers, dtype, metadata.db checked
//! println!("{} rows in {} runs", pack.len(), pack.num_runs());
//! let run = pack.run(3)?; // run 3's rows in step order
//! for step in run.steps() {
//!     let _ = (step.step_index(), step.move_dir(), step.exponents(), step.branch_evs());
//! }
//! pack.verify()?; // everything `dataset-packer validate` checks
//! # Ok(()) }
//! ```
//!
//! # Stability
//!
//! The names re-exported at the crate root are the public surface, and they and their
//! methods follow semantic versioning: for reading, [`Pack`], [`Run`], [`Step`], [`Steps`],
//! [`Runs`], [`Companion`], [`CompanionValue`] and [`Param`]; for writing, [`PackWriter`],
//! [`WriterOptions`], [`NewRun`], [`NewStep`] and [`Published`]; the operations, errors and
//! progress at the crate root (see the crate's documentation). Everything else the crate
//! exports (`cmd`, `format`, `raw`, …, and [`crate::verify`]'s report types) is the command-line
//! tool's machinery, public only so its own tests reach it, and may change in any release.
//!
//! # What `open` checks, and what `verify` adds
//!
//! [`Pack::open`] reads only headers and `metadata.db`: the folder is a pack, its shards are
//! named and numbered as the format says, every header has the pack's row dtype (or the
//! legacy packed 46-byte one, whose rows read as the full pack `export --format pack` makes of
//! them: converted per shard on first touch, `ev_legal` recomputed from the board) and the
//! size it promises, `metadata.db` has the schema, its shard records match the files, and its runs
//! add up to the shards' rows. [`Pack::verify`] reads every byte: checksums, every row, every
//! run, companions, fingerprints, as `validate` does. Rows read through the API are not
//! checksummed on the way; call `verify` once when the pack's provenance is in doubt.

mod change;
mod companion;
#[doc(hidden)]
pub mod doc_support;
mod run;
mod step;

// The machinery under the public reader: crate-internal, shared by the commands and the
// writers. See docs/architecture.md for what each owns.
pub(crate) mod checks;
pub(crate) mod families;
pub(crate) mod files;
pub(crate) mod fingerprints;
pub(crate) mod lazy;
pub(crate) mod open;
pub(crate) mod publish;
pub(crate) mod query;
pub(crate) mod remote;
pub(crate) mod remote_output;
pub(crate) mod run_index;
pub(crate) mod shard_writer;
pub(crate) mod shards;
pub(crate) mod snapshot;
pub mod versions;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Context, Result, err, fail};
use memmap2::Mmap;

pub use change::{move_tag, tag, untag};
pub use companion::{Companion, CompanionValue};
pub use run::{Run, Runs};
pub use step::{Step, Steps};
pub use versions::{History, Version, VersionSpec};
pub(crate) use writer::StagedPack;
pub use writer::{NewRun, NewStep, PackWriter, Published, WriterOptions};

use crate::format::metadata;
use crate::format::row::ROW_BYTES;
use families::Scan;
use shards::Shard;

/// An open pack: its shards memory-mapped read-only, its `metadata.db` open read-only.
///
/// `Pack` is `Send + Sync`: share one between threads with `&Pack` or an `Arc`.
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// let pack = dataset_packer::Pack::open(fixture.path())?;
/// assert_eq!((pack.len(), pack.num_runs()), (2240, 10));
/// # Ok(()) }
/// ```
pub struct Pack {
    /// The pack as the user named it: a folder, or a URL.
    dir: PathBuf,
    /// Where its files are read from; for a remote pack, the view that keeps them in the
    /// cache while the pack is open.
    _located: open::Located,
    shards: Vec<Shard>,
    /// Each shard's rows.
    maps: Vec<ShardRows>,
    /// The global row where each shard starts, then the total.
    starts: Vec<u64>,
    /// In a Mutex only so that `Pack` is `Sync` (a connection is `Send`, not `Sync`).
    conn: Mutex<rusqlite::Connection>,
    valuation_names: Vec<String>,
    /// Run ids in ascending order, with their `runs.steps`.
    runs: Vec<(i64, i64)>,
    shuffled: bool,
    companions: Scan,
    /// The version read, with the pack's history.
    view: versions::View,
}

impl std::fmt::Debug for Pack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pack")
            .field("dir", &self.dir)
            .field("rows", &self.len())
            .field("runs", &self.num_runs())
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl Pack {
    /// Opens the pack in folder `path` read-only: every shard memory-mapped, `metadata.db`
    /// opened read-only, and the structure checked (see the module doc); nothing is read row
    /// by row. An error names the file at fault.
    ///
    /// `path` may also be the URL of a pack in object storage (`s3://bucket/prefix`,
    /// `gs://…`, `az://…`, `https://…`): every file of it is then fetched into the node's
    /// cache (see [`crate::store::CacheConfig`]), each checked against its recorded CRC-32C,
    /// and kept there while the `Pack` lives; errors name the URL. Credentials come from the
    /// environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
    /// `AWS_ENDPOINT_URL`, …).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// use dataset_packer::Pack;
    /// let pack = Pack::open(fixture.path())?;
    /// assert_eq!(pack.path(), fixture.path());
    /// let missing = Pack::open(fixture.path().join("nope")).unwrap_err();
    /// assert!(missing.to_string().ends_with("nope does not exist"));
    /// # Ok(()) }
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Pack> {
        Pack::open_version(path, &VersionSpec::Latest)
    }

    /// Opens the pack in folder `path` as version `spec` of it was: exactly its rows, runs and
    /// companion families, nothing added later (see [`versions`]). Costs what
    /// [`Pack::open`] costs: no row is read. An error lists the versions or tags the pack has.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// use dataset_packer::{Pack, VersionSpec};
    /// let pack = Pack::open_version(fixture.path(), &VersionSpec::Number(1))?;
    /// assert_eq!((pack.version(), pack.len()), (1, 2240));
    /// assert!(Pack::open_version(fixture.path(), &"9".parse()?).is_err());
    /// # Ok(()) }
    /// ```
    pub fn open_version(path: impl AsRef<Path>, spec: &VersionSpec) -> Result<Pack> {
        // A remote pack's files are fetched a block at a time as rows are read.
        let located = open::locate_lazy(path.as_ref())?;
        located.name_errors(Pack::open_located(&located, spec))
    }

    /// [`Pack::open_version`] of a pack already located (its files in `located.dir()`): one
    /// snapshot of the folder, even while another process publishes into it.
    fn open_located(located: &open::Located, spec: &VersionSpec) -> Result<Pack> {
        snapshot::consistently(located.dir(), || Pack::open_once(located, spec))
    }

    fn open_once(located: &open::Located, spec: &VersionSpec) -> Result<Pack> {
        let dir = located.dir().to_path_buf();
        let conn = shards::open_metadata(&dir)?;
        let invalid = |what: String| {
            err!(
                Corrupt,
                "{} is not a valid pack: {what}; `dataset-packer validate {}` says more",
                dir.display(),
                dir.display()
            )
        };
        let problems = metadata::schema_problems(&conn)
            .with_context(|| format!("reading {}", dir.join(metadata::FILE_NAME).display()))?;
        if let Some(p) = problems.first() {
            return Err(invalid(format!("{}: {p}", metadata::FILE_NAME)));
        }
        let opened = open::open_once(&dir, spec, true)?;
        let companions = opened.families();
        let valuation_names = opened.valuations()?.names().to_vec();
        let open::Opened {
            conn, shards, view, ..
        } = opened;
        let starts = shards::shard_starts(&shards);
        let runs = metadata::read_run_steps(&conn)?;
        let mut checks = vec![checks::check_total_steps(
            &runs,
            *starts.last().expect("a start per shard and the end"),
        )];
        if let Some(records) = metadata::read_shard_records(&conn)? {
            checks.push(checks::check_checksums(&dir, &records, &shards, None));
        }
        if let Some(failed) = checks.iter().find(|c| c.failures > 0) {
            return Err(invalid(format!(
                "{}: {}",
                failed.name,
                failed.examples.first().map_or("", String::as_str)
            )));
        }
        let shuffled = metadata::session_value(&conn, "shuffled")?.as_deref() == Some("true");
        let maps = shards
            .iter()
            .map(ShardRows::map)
            .collect::<Result<Vec<_>>>()?;
        Ok(Pack {
            dir: located.given().to_path_buf(),
            _located: located.clone(),
            shards,
            maps,
            starts,
            conn: Mutex::new(conn),
            valuation_names,
            runs,
            shuffled,
            companions,
            view,
        })
    }

    /// The version of the pack this reader reads (the latest unless opened with
    /// [`Pack::open_version`]); 1 for a pack made before versions.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert_eq!(pack.version(), 1);
    /// # Ok(()) }
    /// ```
    pub fn version(&self) -> u32 {
        self.view.version().version
    }

    /// The pack's identity: 32 hex digits drawn when it was made, kept by every change in
    /// place (`pack --update`, `attach`, `detach`); None for a pack made before versions.
    /// With [`Pack::version`] it names the data exactly: `pack_id@version`.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert_eq!(pack.pack_id().map(str::len), Some(32));
    /// # Ok(()) }
    /// ```
    pub fn pack_id(&self) -> Option<&str> {
        self.view.history.pack_id.as_deref()
    }

    /// The pack's history, oldest version first, each with its files (one version for a pack
    /// made before versions): what `dataset-packer versions --json` lists.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let first = &pack.versions()?[0];
    /// assert_eq!((first.version, first.operation.as_str(), first.rows), (1, "pack", 2240));
    /// assert_eq!(first.files[0].file_name, "steps.npy");
    /// # Ok(()) }
    /// ```
    pub fn versions(&self) -> Result<Vec<Version>> {
        Ok(History::read(&self.conn())?.versions)
    }

    /// The folder the pack was opened from (for a remote pack, its URL as given).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert!(pack.path().join("metadata.db").is_file());
    /// # Ok(()) }
    /// ```
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Rows (steps) in the pack, across all shards.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert_eq!(pack.len(), pack.steps().count() as u64);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> u64 {
        *self.starts.last().expect("a start per shard and the end")
    }

    /// Whether the pack holds no rows.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// assert!(!dataset_packer::Pack::open(fixture.path())?.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs (games) in the pack: the rows of its `runs` table.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert_eq!(pack.num_runs(), pack.run_ids().len());
    /// # Ok(()) }
    /// ```
    pub fn num_runs(&self) -> usize {
        self.runs.len()
    }

    /// The run ids, ascending (what [`Pack::run`] takes).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert_eq!(pack.run_ids(), (0..10).collect::<Vec<u32>>());
    /// # Ok(()) }
    /// ```
    pub fn run_ids(&self) -> Vec<u32> {
        // Ids that do not fit a row's u32 run_id have no rows; `verify` reports them.
        self.runs
            .iter()
            .filter_map(|&(id, _)| u32::try_from(id).ok())
            .collect()
    }

    /// The valuation type names: index = the `valuation_type` id a [`Step`] carries.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let step = pack.row(0)?;
    /// let name = &pack.valuation_names()[step.valuation_type() as usize];
    /// assert!(!name.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn valuation_names(&self) -> &[String] {
        &self.valuation_names
    }

    /// Whether the pack is a shuffled copy (`shuffle`'s output): its rows are in random
    /// order, so a run's rows are scattered and [`Pack::run`] cannot find them.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// assert!(!dataset_packer::Pack::open(fixture.path())?.is_shuffled());
    /// # Ok(()) }
    /// ```
    pub fn is_shuffled(&self) -> bool {
        self.shuffled
    }

    /// The row at global index `index` (rows numbered across shards, in file order).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let first = pack.row(0)?;
    /// assert_eq!((first.run_id(), first.step_index()), (0, 0));
    /// assert!(pack.row(pack.len()).is_err());
    /// # Ok(()) }
    /// ```
    pub fn row(&self, index: u64) -> Result<Step<'_>> {
        if index >= self.len() {
            fail!(
                InvalidInput,
                "row {index} is past the end of {} ({} rows)",
                self.dir.display(),
                self.len()
            );
        }
        let shard = self.starts.partition_point(|&s| s <= index) - 1;
        let at = (index - self.starts[shard]) as usize;
        Ok(Step::new(&self.shard_rows(shard)[at]))
    }

    /// Every row of the pack, in file order.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let moves_up = pack.steps().filter(|s| s.move_dir() == 0).count();
    /// assert!(moves_up > 0);
    /// # Ok(()) }
    /// ```
    pub fn steps(&self) -> Steps<'_> {
        self.steps_in(0..self.len())
    }

    /// The rows with global indices in `range`, in file order (clipped to the pack's end):
    /// what a reader that splits the pack between workers takes.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let some: Vec<u32> = pack.steps_in(10..13).map(|s| s.step_index()).collect();
    /// assert_eq!(some, [10, 11, 12]);
    /// # Ok(()) }
    /// ```
    pub fn steps_in(&self, range: std::ops::Range<u64>) -> Steps<'_> {
        let end = range.end.min(self.len());
        let start = range.start.min(end);
        Steps::new(self, start, end)
    }

    /// Run `id`'s rows in step order, found through the pack's run index (or, in a pack
    /// from another tool that records none, rebuilt from the runs table). A shuffled pack
    /// has no run order: it is an error there.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let run = pack.run(7)?;
    /// assert!(run.steps().all(|s| s.run_id() == 7));
    /// assert!(pack.run(99).is_err());
    /// # Ok(()) }
    /// ```
    pub fn run(&self, id: u32) -> Result<Run<'_>> {
        self.refuse_shuffled()?;
        let conn = self.conn();
        let Some(found) = metadata::read_run(&conn, i64::from(id))? else {
            return Err(self.view.missing_run(&conn, &self.dir, id));
        };
        let steps = found.run.steps as u64;
        let at = match found.first_row {
            Some(at) => at,
            None if metadata::has_table(&conn, "run_index")? => fail!(
                Corrupt,
                "{}/metadata.db has no run_index entry for run {id}; `dataset-packer validate {}` says more",
                self.dir.display(),
                self.dir.display()
            ),
            None => {
                crate::pack::run_index::locate_unindexed(&conn, &self.shards, i64::from(id), steps)?
            }
        };
        drop(conn);
        Run::at(self, id, at.global_row, steps)
    }

    /// Every run, in id order (each as [`Pack::run`] gives it).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let mut rows = 0;
    /// for run in pack.runs()? {
    ///     rows += run?.len();
    /// }
    /// assert_eq!(rows, pack.len());
    /// # Ok(()) }
    /// ```
    pub fn runs(&self) -> Result<Runs<'_>> {
        self.refuse_shuffled()?;
        let index = metadata::read_run_index(&self.conn())?;
        Ok(Runs::new(self, index))
    }

    /// The run ids that `sql` selects, ascending: the same SQL, with the same rules, as
    /// `dataset-packer export --where` — a WHERE expression over the columns of `runs` and
    /// `run_details`, or a query that returns run ids.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let deep = pack.select("depth = 7")?;
    /// assert_eq!(deep.len(), 5);
    /// let best = pack.select("SELECT id FROM runs ORDER BY max_score DESC LIMIT 1")?;
    /// assert_eq!(best.len(), 1);
    /// assert!(pack.select("DELETE FROM runs").is_err());
    /// # Ok(()) }
    /// ```
    pub fn select(&self, sql: &str) -> Result<Vec<u32>> {
        self.select_with(sql, &[])
    }

    /// [`Pack::select`] with values for the SQL's parameters (`?`, `:name`), as `--param`
    /// gives them.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// use dataset_packer::{Pack, Param};
    /// let pack = Pack::open(fixture.path())?;
    /// let min = Param::parse("min=5000")
    ///     .map_err(|e| dataset_packer::Error::new(dataset_packer::ErrorKind::InvalidInput, e))?;
    /// let ids = pack.select_with("max_score > :min", &[min])?;
    /// assert!(ids.iter().all(|&id| id < 10));
    /// # Ok(()) }
    /// ```
    pub fn select_with(&self, sql: &str, params: &[Param]) -> Result<Vec<u32>> {
        self.select_within(sql, params, &SqlLimits::default())
    }

    /// [`Pack::select_with`] under other limits than the default (`--sql-timeout`,
    /// `--sql-memory`): a selection that runs longer, or needs more memory, is stopped with an
    /// error that says which limit it passed.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// use std::time::Duration;
    /// use dataset_packer::{Pack, SqlLimits};
    /// let pack = Pack::open(fixture.path())?;
    /// let quick = SqlLimits { time: Duration::from_millis(200), ..SqlLimits::default() };
    /// let endless = "WITH RECURSIVE t(x) AS (SELECT 0 UNION ALL SELECT x FROM t) SELECT x FROM t";
    /// let e = pack.select_within(endless, &[], &quick).unwrap_err();
    /// assert!(e.to_string().contains("its time limit"));
    /// # Ok(()) }
    /// ```
    pub fn select_within(
        &self,
        sql: &str,
        params: &[Param],
        limits: &SqlLimits,
    ) -> Result<Vec<u32>> {
        let ids = crate::pack::query::run_ids(&self.conn(), sql, params, "select", limits)?;
        ids.into_iter()
            .map(|id| {
                u32::try_from(id).map_err(|_| {
                    err!(
                        Corrupt,
                        "{}: runs.id {id} cannot be a run_id",
                        self.dir.join(metadata::FILE_NAME).display()
                    )
                })
            })
            .collect()
    }

    /// The names of the companion arrays that line up with the pack (`embeddings` for
    /// `embeddings-00000.npy` …), sorted.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert_eq!(pack.companion_names(), ["score"]);
    /// # Ok(()) }
    /// ```
    pub fn companion_names(&self) -> Vec<&str> {
        self.companions
            .families
            .iter()
            .map(|f| f.name.as_str())
            .collect()
    }

    /// The companion array `name`, memory-mapped: its rows aligned one to one with the pack's.
    /// An error says what is wrong with a family that does not line up.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let score = pack.companion("score")?;
    /// assert_eq!((score.descr(), score.len()), ("'<f4'", pack.len()));
    /// assert!(pack.companion("nope").is_err());
    /// # Ok(()) }
    /// ```
    pub fn companion(&self, name: &str) -> Result<Companion<'_>> {
        self.view.check_family(&self.dir, name)?;
        if let Some(family) = self.companions.family(name) {
            return Companion::open(self, family);
        }
        if let Some((_, problem)) = self.companions.problems.iter().find(|(n, _)| n == name) {
            fail!(
                Corrupt,
                "{}: companion {name} does not line up with the shards: {problem}",
                self.dir.display()
            );
        }
        fail!(
            InvalidInput,
            "{} has no companion array {name} (it has: {})",
            self.dir.display(),
            match self.companion_names() {
                names if names.is_empty() => "none".to_string(),
                names => names.join(", "),
            }
        )
    }

    fn refuse_shuffled(&self) -> Result<()> {
        if self.shuffled {
            fail!(
                Unsupported,
                "{} is shuffled (session shuffled=true): a run's rows are scattered and there is no run index; read the run in the pack it was shuffled from",
                self.dir.display()
            );
        }
        Ok(())
    }

    pub(crate) fn conn(&self) -> std::sync::MutexGuard<'_, rusqlite::Connection> {
        // A panic while holding the lock leaves the read-only connection as good as before.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shard `shard`'s rows.
    fn shard_rows(&self, shard: usize) -> &[[u8; ROW_BYTES]] {
        self.maps[shard].rows()
    }

    /// Rows `skip..skip + count` of shard `shard` are about to be read in order: the
    /// kernel is asked for them at once (the maps are read at random otherwise).
    fn will_read(&self, shard: usize, skip: usize, count: usize) {
        self.maps[shard].will_read(skip, count);
    }

    /// The global row where each shard starts, then the total.
    fn starts(&self) -> &[u64] {
        &self.starts
    }
}

/// A shard's rows as the reader hands them out: mapped as they are, or, for a legacy packed
/// 46-byte shard, converted to the 48-byte layout with `ev_legal` recomputed from the board
/// (what every command that writes a pack from a legacy one writes) the first time a row of
/// it is read, so opening stays cheap and a legacy shard costs its rows' memory once.
enum ShardRows {
    Empty,
    Mapped(Mmap),
    Legacy {
        raw: Mmap,
        rows: std::sync::OnceLock<Vec<[u8; ROW_BYTES]>>,
    },
}

impl ShardRows {
    fn map(shard: &Shard) -> Result<ShardRows> {
        if shard.header.rows == 0 {
            return Ok(ShardRows::Empty);
        }
        let map = shard.map_rows(0, shard.header.rows, shards::Access::Random)?;
        Ok(if shard.is_legacy() {
            ShardRows::Legacy {
                raw: map,
                rows: std::sync::OnceLock::new(),
            }
        } else {
            ShardRows::Mapped(map)
        })
    }

    fn will_read(&self, skip: usize, count: usize) {
        // A legacy shard is read whole once, when converted: nothing to ask for.
        if let ShardRows::Mapped(map) = self {
            shards::will_need(map, skip * ROW_BYTES, count * ROW_BYTES);
        }
    }

    fn rows(&self) -> &[[u8; ROW_BYTES]] {
        match self {
            ShardRows::Empty => &[],
            ShardRows::Mapped(map) => map.as_chunks::<ROW_BYTES>().0,
            ShardRows::Legacy { raw, rows } => rows.get_or_init(|| {
                let mut bytes = crate::format::row::legacy_rows_to_aligned(raw);
                crate::format::row::recompute_ev_legal(&mut bytes);
                bytes.as_chunks::<ROW_BYTES>().0.to_vec()
            }),
        }
    }
}

/// A value for an SQL parameter of [`Pack::select_with`].
pub use crate::pack::query::Param;
/// The time and memory a selection may take ([`Pack::select_within`]).
pub use crate::pack::query::SqlLimits;

#[cfg(all(test, target_os = "linux"))]
mod access_hints {
    use super::Pack;
    use super::shards::Access;
    use std::path::Path;

    /// The kernel's VmFlags of each mapping of `file` in this process: "rr" marks a map
    /// advised MADV_RANDOM, "sr" MADV_SEQUENTIAL.
    fn vm_flags(file: &Path) -> Vec<Vec<String>> {
        let target = file.canonicalize().expect("the file exists");
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let (mut found, mut current) = (Vec::new(), None::<String>);
        for line in smaps.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields
                .first()
                .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
            {
                current = fields.get(5).map(|s| s.to_string());
            } else if fields.first() == Some(&"VmFlags:") && current.as_deref() == target.to_str() {
                found.push(fields[1..].iter().map(|s| s.to_string()).collect());
            }
        }
        found
    }

    #[test]
    fn the_readers_maps_are_random_and_the_scans_maps_sequential() {
        let fixture = crate::pack::doc_support::fixture_pack_with_companion().unwrap();
        let pack = Pack::open(fixture.path()).unwrap();
        let shard = &pack.shards[0];
        let flags = vm_flags(&shard.path);
        assert!(!flags.is_empty(), "the shard is mapped");
        assert!(
            flags.iter().all(|f| f.contains(&"rr".to_string())),
            "{flags:?}"
        );
        let score = pack.companion("score").unwrap();
        let flags = vm_flags(&fixture.path().join("score.npy"));
        assert!(
            flags.iter().all(|f| f.contains(&"rr".to_string())),
            "{flags:?}"
        );
        assert_eq!(score.row(3).unwrap(), 3f32.to_le_bytes());
        drop(pack);

        let pack = Pack::open(fixture.path()).unwrap();
        let shard = &pack.shards[0];
        let before = vm_flags(&shard.path).len();
        let scan = shard
            .map_rows(0, shard.header.rows, Access::Sequential)
            .unwrap();
        let flags = vm_flags(&shard.path);
        assert_eq!(flags.len(), before + 1);
        assert_eq!(
            flags
                .iter()
                .filter(|f| f.contains(&"sr".to_string()))
                .count(),
            1,
            "{flags:?}"
        );
        assert_eq!(scan.len(), shard.header.rows as usize * shard.row_bytes());
    }
}
