//! One row of a pack as the reader hands it out ([`Step`]: a reference into the mapped shard,
//! decoded field by field on demand), and iteration over a range of rows ([`Steps`]).

use crate::format::board;
use crate::format::row::{ROW_BYTES, offset};

use super::Pack;

/// One step (row) of a pack: a view of its 48 bytes in the mapped shard, each accessor
/// decoding one column of the spec's `STEP_ROW_DTYPE`. Copying a `Step` copies a reference.
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// let pack = dataset_packer::Pack::open(fixture.path())?;
/// let step = pack.row(5)?;
/// println!("{step:?}");
/// assert_eq!(step.run_id(), 0);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct Step<'a> {
    row: &'a [u8; ROW_BYTES],
}

impl<'a> Step<'a> {
    pub(super) fn new(row: &'a [u8; ROW_BYTES]) -> Step<'a> {
        Step { row }
    }

    /// The row's 48 bytes, laid out as the format's `STEP_ROW_DTYPE` (what NumPy reads from
    /// a shard; for a legacy pack, the row as a full pack holds it).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let row = pack.row(0)?.as_bytes();
    /// assert_eq!(u32::from_le_bytes(row[..4].try_into().unwrap()), pack.row(0)?.run_id());
    /// # Ok(()) }
    /// ```
    pub fn as_bytes(&self) -> &'a [u8; ROW_BYTES] {
        self.row
    }

    #[inline]
    fn u32_at(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.row[at..at + 4].try_into().expect("four bytes"))
    }

    /// The run (game) this step belongs to: an id of the pack's `runs` table.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert!(pack.run(4)?.steps().all(|s| s.run_id() == 4));
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn run_id(&self) -> u32 {
        self.u32_at(offset::RUN_ID)
    }

    /// The step's index within its run (0 for the first move; strictly increasing along a
    /// run, with gaps where the logger skipped steps).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let steps: Vec<u32> = pack.run(2)?.steps().map(|s| s.step_index()).collect();
    /// assert!(steps.windows(2).all(|w| w[0] < w[1]));
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn step_index(&self) -> u32 {
        self.u32_at(offset::STEP_INDEX)
    }

    /// The game's random seed (the same for every step of a run).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let run = pack.run(1)?;
    /// let seed = run.steps().next().unwrap().seed();
    /// assert!(run.steps().all(|s| s.seed() == seed));
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn seed(&self) -> u32 {
        self.u32_at(offset::SEED)
    }

    /// The largest tile exponent on the board (11 for a 2048 tile, 16 for 65536).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let step = pack.row(100)?;
    /// assert_eq!(step.max_rank(), *step.exponents().iter().max().unwrap());
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn max_rank(&self) -> u8 {
        self.row[offset::MAX_RANK]
    }

    /// The move played: 0 up, 1 down, 2 left, 3 right.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert!(pack.steps().all(|s| s.move_dir() <= 3));
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn move_dir(&self) -> u8 {
        self.row[offset::MOVE_DIR]
    }

    /// The board before the move: 16 tile exponents, row-major from the top-left cell
    /// (0 empty, 1 for a 2, … 16 for 65536).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let step = pack.row(0)?;
    /// let board = step.exponents();
    /// let tiles: Vec<u32> = board.iter().map(|&e| if e == 0 { 0 } else { 1 << e }).collect();
    /// assert_eq!(board.iter().max(), Some(&step.max_rank()));
    /// # assert_eq!(tiles.len(), 16);
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn exponents(&self) -> [u8; 16] {
        let board = u64::from_le_bytes(
            self.row[offset::BOARD..offset::BOARD + 8]
                .try_into()
                .expect("eight bytes"),
        );
        let mask = u16::from_le_bytes([
            self.row[offset::TILE_65536_MASK],
            self.row[offset::TILE_65536_MASK + 1],
        ]);
        board::unpack(board, mask)
    }

    /// The expected values of the four moves (up, down, left, right) as the search logged
    /// them, stored as is (0.0 for a move it did not evaluate).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let step = pack.row(0)?;
    /// let evs = step.branch_evs();
    /// assert!(evs.iter().all(|e| e.is_finite()));
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn branch_evs(&self) -> [f32; 4] {
        std::array::from_fn(|k| f32::from_bits(self.u32_at(offset::BRANCH_EVS + 4 * k)))
    }

    /// Which moves are legal (change the board), up, down, left, right: the `ev_legal` bits.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let step = pack.row(0)?;
    /// assert!(step.legal()[step.move_dir() as usize]);
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn legal(&self) -> [bool; 4] {
        let bits = self.row[offset::EV_LEGAL];
        std::array::from_fn(|k| bits & (1 << k) != 0)
    }

    /// Which evaluator produced the EVs: an index into [`Pack::valuation_names`].
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let names = pack.valuation_names();
    /// assert!(pack.steps().all(|s| (s.valuation_type() as usize) < names.len()));
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn valuation_type(&self) -> u8 {
        self.row[offset::VALUATION_TYPE]
    }

    /// The board's static evaluation (Macroxue's line heuristic), computed at pack time.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let evals: Vec<i32> = pack.run(0)?.steps().map(|s| s.board_eval()).collect();
    /// assert!(evals.iter().any(|&e| e != evals[0]));
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn board_eval(&self) -> i32 {
        self.u32_at(offset::BOARD_EVAL) as i32
    }
}

impl std::fmt::Debug for Step<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Step")
            .field("run_id", &self.run_id())
            .field("step_index", &self.step_index())
            .field("seed", &self.seed())
            .field("max_rank", &self.max_rank())
            .field("move_dir", &self.move_dir())
            .field("exponents", &self.exponents())
            .field("branch_evs", &self.branch_evs())
            .field("legal", &self.legal())
            .field("valuation_type", &self.valuation_type())
            .field("board_eval", &self.board_eval())
            .finish()
    }
}

/// The rows of a range of a pack, in file order (across shard boundaries).
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// let pack = dataset_packer::Pack::open(fixture.path())?;
/// let steps = pack.steps();
/// assert_eq!(steps.len() as u64, pack.len());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Steps<'a> {
    pack: &'a Pack,
    /// The rest of the current shard's rows in the range.
    rows: std::slice::Iter<'a, [u8; ROW_BYTES]>,
    /// The next shard to continue into.
    next_shard: usize,
    /// Rows left in the range after `rows`.
    after: u64,
}

impl<'a> Steps<'a> {
    /// Global rows `start..end` (both within the pack).
    pub(super) fn new(pack: &'a Pack, start: u64, end: u64) -> Steps<'a> {
        let starts = pack.starts();
        // The shard holding `start` (the last shard that starts at or before it, skipping
        // empty shards).
        let shard = starts.partition_point(|&s| s <= start).saturating_sub(1);
        let mut steps = Steps {
            pack,
            rows: [].iter(),
            next_shard: shard,
            after: end - start,
        };
        if shard < starts.len() - 1 && end > start {
            let skip = (start - starts[shard]) as usize;
            steps.enter_shard(skip);
        }
        steps
    }

    /// Continues into shard `next_shard`, from its row `skip`.
    fn enter_shard(&mut self, skip: usize) {
        let all = self.pack.shard_rows(self.next_shard);
        let rows = &all[skip.min(all.len())..];
        let take = rows.len().min(self.after as usize);
        self.pack
            .will_read(self.next_shard, skip.min(all.len()), take);
        self.rows = rows[..take].iter();
        self.after -= take as u64;
        self.next_shard += 1;
    }
}

impl<'a> Iterator for Steps<'a> {
    type Item = Step<'a>;

    #[inline]
    fn next(&mut self) -> Option<Step<'a>> {
        loop {
            if let Some(row) = self.rows.next() {
                return Some(Step::new(row));
            }
            if self.after == 0 {
                return None;
            }
            self.enter_shard(0);
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.rows.len() + self.after as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Steps<'_> {}
