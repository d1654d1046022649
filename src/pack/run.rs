//! One run (game) of a pack: where its rows are, found through the run index, and checked to
//! carry its id at both ends before they are handed out.

use crate::error::{Result, err, fail};

use crate::format::metadata::RowLocation;

use super::{Pack, Steps};

/// One run's rows, contiguous and in step order (an unshuffled pack keeps them so).
///
/// ```
/// # fn main() -> anyhow::Result<()> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// let pack = dataset_packer::Pack::open(fixture.path())?;
/// let run = pack.run(0)?;
/// println!("run {} has {} steps", run.id(), run.len());
/// # Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct Run<'a> {
    pack: &'a Pack,
    id: u32,
    first: u64,
    len: u64,
}

impl<'a> Run<'a> {
    /// Run `id` of `len` rows from global row `first`, checked: the rows are in the pack and
    /// the first and last carry the run's id (a run index pointing elsewhere is an error).
    pub(super) fn at(pack: &'a Pack, id: u32, first: u64, len: u64) -> Result<Run<'a>> {
        let end = first.checked_add(len).filter(|&e| e <= pack.len());
        let hint = || {
            format!(
                "`dataset-packer validate {}` says more",
                pack.path().display()
            )
        };
        if end.is_none() {
            fail!(Corrupt, 
                "{}: metadata.db places run {id}'s {len} rows from global row {first}, past the pack's {} rows; {}",
                pack.path().display(),
                pack.len(),
                hint()
            );
        }
        if len > 0 {
            for at in [first, first + len - 1] {
                let found = pack.row(at)?.run_id();
                if found != id {
                    fail!(Corrupt, 
                        "{}: global row {at} belongs to run {found}, but metadata.db places run {id} there; {}",
                        pack.path().display(),
                        hint()
                    );
                }
            }
        }
        Ok(Run {
            pack,
            id,
            first,
            len,
        })
    }

    /// The run's id.
    ///
    /// ```
    /// # fn main() -> anyhow::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert_eq!(pack.run(6)?.id(), 6);
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Steps (rows) in the run.
    ///
    /// ```
    /// # fn main() -> anyhow::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let run = pack.run(3)?;
    /// assert_eq!(run.len(), run.steps().count() as u64);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the run has no rows.
    ///
    /// ```
    /// # fn main() -> anyhow::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert!(!pack.run(3)?.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The global row index of the run's first row (what [`Pack::row`] takes).
    ///
    /// ```
    /// # fn main() -> anyhow::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let run = pack.run(8)?;
    /// assert_eq!(pack.row(run.first_row())?.run_id(), 8);
    /// # Ok(()) }
    /// ```
    pub fn first_row(&self) -> u64 {
        self.first
    }

    /// The run's rows in step order.
    ///
    /// ```
    /// # fn main() -> anyhow::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// const NAMES: [&str; 4] = ["up", "down", "left", "right"];
    /// let moves: Vec<&str> = pack.run(0)?.steps().map(|s| NAMES[s.move_dir() as usize]).collect();
    /// assert_eq!(moves.len() as u64, pack.run(0)?.len());
    /// # Ok(()) }
    /// ```
    pub fn steps(&self) -> Steps<'a> {
        self.pack.steps_in(self.first..self.first + self.len)
    }
}

impl std::fmt::Debug for Run<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("id", &self.id)
            .field("first_row", &self.first)
            .field("len", &self.len)
            .finish()
    }
}

/// Every run of a pack in id order, from [`Pack::runs`]: each checked as [`Pack::run`]
/// checks it.
///
/// ```
/// # fn main() -> anyhow::Result<()> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// let pack = dataset_packer::Pack::open(fixture.path())?;
/// let longest = pack.runs()?.map(|r| r.map(|r| r.len())).collect::<anyhow::Result<Vec<_>>>()?;
/// assert_eq!(longest.len(), pack.num_runs());
/// # Ok(()) }
/// ```
pub struct Runs<'a> {
    pack: &'a Pack,
    /// The run index's entries, by run id (None: the pack records none).
    index: Option<Vec<(i64, RowLocation)>>,
    next: usize,
    /// Without an index: where the next run starts. Runs lie in id order, each `runs.steps`
    /// rows long (the rule `run_index::locate_unindexed` rebuilds one run's place by; summed
    /// here as the runs go by, so listing every run is not quadratic).
    unindexed_start: u64,
}

impl<'a> Runs<'a> {
    pub(super) fn new(pack: &'a Pack, index: Option<Vec<(i64, RowLocation)>>) -> Runs<'a> {
        Runs {
            pack,
            index,
            next: 0,
            unindexed_start: 0,
        }
    }
}

impl<'a> Iterator for Runs<'a> {
    type Item = Result<Run<'a>>;

    fn next(&mut self) -> Option<Result<Run<'a>>> {
        let &(id, steps) = self.pack.runs.get(self.next)?;
        let slot = self.next;
        let entry = self.index.as_ref().map(|i| i.get(slot));
        self.next += 1;
        let steps = steps.max(0) as u64;
        let unindexed_start = self.unindexed_start;
        self.unindexed_start += steps;
        let Ok(id) = u32::try_from(id) else {
            return Some(Err(err!(Corrupt, 
                "{}: runs.id {id} cannot be a run_id",
                self.pack.path().display()
            )));
        };
        Some(match entry {
            // The index lists the runs in id order, as `runs` does; where it does not (a
            // damaged pack), the lookup by id says what is wrong.
            Some(Some((indexed, at))) if *indexed == i64::from(id) => {
                Run::at(self.pack, id, at.global_row, steps)
            }
            Some(_) => self.pack.run(id),
            // `Pack::open` checked that the runs add up to the rows; `Run::at` checks that
            // each run's first and last rows carry its id.
            None => Run::at(self.pack, id, unindexed_start, steps),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.pack.runs.len() - self.next;
        (n, Some(n))
    }
}
