//! Reading an existing pack: find its shards (in either naming), parse their headers, map row
//! ranges into memory a chunk at a time (so resident memory stays bounded whatever the pack
//! size), and load `valuation_types.json`. Shared by validate, merge, stats, show and export.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Context, Result, fail};
use memmap2::{Mmap, MmapOptions};

use crate::format::npy::{self, Header, RowLayout};
use crate::format::valuation::{self, ValuationTable};
use crate::pack::files::is_shard_name;

/// One shard file and what its header says. `path` names it in messages; every read goes
/// through `file`, the file as it was opened with the pack (see [`crate::pack::snapshot`]):
/// a publish that renames another file over the path changes nothing this reader sees.
#[derive(Debug, Clone)]
pub struct Shard {
    pub index: u32,
    pub name: String,
    pub path: PathBuf,
    pub file: Arc<File>,
    pub header: Header,
    pub file_len: u64,
    /// For a remote pack's file read block by block: what fills the view file before a read.
    pub(crate) lazy: Option<Arc<crate::pack::lazy::LazyFile>>,
}

impl Shard {
    /// For a remote shard read block by block, gives back the space its fetched blocks take
    /// in the view ([`crate::pack::lazy::LazyFile::release`]); nothing for any other. Only
    /// once no map of the shard is alive.
    pub(crate) fn release(&self) {
        if let Some(lazy) = &self.lazy {
            lazy.release();
        }
    }

    /// Makes sure bytes `offset..offset + len` of the file are there to read (a remote pack's
    /// file read block by block has them fetched; any other file has them already).
    fn ensure(&self, offset: u64, len: u64) -> Result<()> {
        match &self.lazy {
            Some(lazy) => lazy.ensure(offset, len),
            None => Ok(()),
        }
    }

    /// Bytes per row of this shard's layout (48, or 46 for legacy packed shards).
    pub fn row_bytes(&self) -> usize {
        self.header
            .layout
            .row_bytes()
            .expect("only shards of a known layout are listed")
    }

    /// The file size the header promises (in u128: a header's row count times the row size
    /// can be any number, and a product that wraps must not match a file's size).
    pub fn expected_len(&self) -> u128 {
        self.header.data_offset as u128 + u128::from(self.header.rows) * self.row_bytes() as u128
    }

    /// CRC-32C of the whole file, given the CRC of its data section (computed while reading
    /// it): the header's CRC combined with it, so the data is not read again.
    pub fn file_crc(&self, data_crc: u32, data_len: usize) -> std::io::Result<u32> {
        use std::os::unix::fs::FileExt;
        let mut header = vec![0u8; self.header.data_offset];
        self.file.read_exact_at(&mut header, 0)?;
        Ok(crate::crc::combine(
            crate::crc::crc32c(&header),
            data_crc,
            data_len,
        ))
    }

    /// Rows `start..start + count` (count > 0) in the 48-byte layout, whatever the shard's,
    /// read in order (a few rows are read as rows at random: no read-ahead around them).
    pub fn read_aligned(&self, start: u64, count: u64) -> Result<AlignedRows> {
        let bulk = count * self.row_bytes() as u64 >= WILL_NEED_MIN as u64;
        let access = if bulk {
            Access::Sequential
        } else {
            Access::Random
        };
        let map = self.map_rows(start, count, access)?;
        Ok(if self.row_bytes() == crate::format::row::ROW_BYTES {
            AlignedRows::Mapped(map)
        } else {
            let rows = crate::format::row::legacy_rows_to_aligned(&map);
            AlignedRows::Converted { raw: map, rows }
        })
    }

    /// Whether the shard is in the legacy packed 46-byte layout.
    pub fn is_legacy(&self) -> bool {
        self.header.layout == RowLayout::LegacyPacked
    }

    /// Rows `start..start + count` (count > 0) as a full pack holds them: 48-byte rows, and
    /// for a legacy shard `ev_legal` recomputed from the board (see
    /// [`crate::format::row::recompute_ev_legal`]); also how many rows' `ev_legal` that changed.
    /// What commands that write a pack from another one read (and fingerprints describe).
    pub fn read_upgraded(&self, start: u64, count: u64) -> Result<(AlignedRows, u64)> {
        let mut rows = self.read_aligned(start, count)?;
        let changed = match &mut rows {
            AlignedRows::Mapped(_) => 0,
            AlignedRows::Converted { rows, .. } => crate::format::row::recompute_ev_legal(rows),
        };
        Ok((rows, changed))
    }

    /// The shard, for reading its rows with [`ShardFile`].
    pub fn open(&self) -> Result<ShardFile<'_>> {
        Ok(ShardFile {
            shard: self,
            file: &self.file,
        })
    }

    /// Maps rows `start..start + count` (count > 0) of this shard read-only, telling the
    /// kernel how they will be read ([`Access`]).
    pub fn map_rows(&self, start: u64, count: u64, access: Access) -> Result<Mmap> {
        debug_assert!(count > 0, "an empty range cannot be mapped");
        let rb = self.row_bytes() as u64;
        self.ensure(self.header.data_offset as u64 + start * rb, count * rb)?;
        // SAFETY: the file was opened with the pack and is never rewritten in place (the
        // tool's writers publish new files by rename), and its size was checked against the
        // header when it was opened, so the range lies inside it.
        let map = unsafe {
            MmapOptions::new()
                .offset(self.header.data_offset as u64 + start * rb)
                .len((count * rb) as usize)
                .map(&*self.file)
        }
        .with_context(|| format!("mapping {}", self.path.display()))?;
        advise(&map, access);
        Ok(map)
    }
}

/// How the rows of a map will be read. The kernel decides from it how much a page fault
/// reads around its page: without a hint, up to the disk's `read_ahead_kb` (8 MiB on some
/// disks), which makes each row read at random cost megabytes on a cold pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// In order, chunk after chunk (the scans of `stats`, `validate`, `shuffle`): read far
    /// ahead.
    Sequential,
    /// By index, anywhere (the library's reader): read the page asked for, and the ranges
    /// known to be read whole through [`will_need`].
    Random,
}

/// Tells the kernel how `map` will be read (a hint: where it fails, the reads are the same).
pub fn advise(map: &Mmap, access: Access) {
    #[cfg(unix)]
    {
        let advice = match access {
            Access::Sequential => memmap2::Advice::Sequential,
            Access::Random => memmap2::Advice::Random,
        };
        if let Err(e) = map.advise(advice) {
            log::debug!("madvise({advice:?}) failed: {e}");
        }
    }
    #[cfg(not(unix))]
    let _ = (map, access);
}

/// Bytes below which a range is read without asking for it first: a few pages' faults cost
/// less than the call.
const WILL_NEED_MIN: usize = 1 << 20;

/// Asks the kernel to start reading bytes `offset..offset + len` of `map` in large requests
/// (a range about to be read whole, in a map read at random), and returns at once.
pub fn will_need(map: &Mmap, offset: usize, len: usize) {
    #[cfg(unix)]
    if len >= WILL_NEED_MIN
        && let Err(e) = map.advise_range(memmap2::Advice::WillNeed, offset, len)
    {
        log::debug!("madvise(WillNeed) failed: {e}");
    }
    #[cfg(not(unix))]
    let _ = (map, offset, len);
}

/// Releases each shard ([`Shard::release`], or what `release` gives back of shard `i`) once
/// a pass that goes through the shards in order, chunk by chunk, has moved past it: told the
/// shard of each chunk whose result it takes, in order ([`ReleaseBehind::reached`]), every
/// chunk before it is done, and so is every map of an earlier shard. The last one is released
/// when this is dropped.
pub(crate) struct ReleaseBehind<F: FnMut(usize)> {
    release: F,
    current: Option<usize>,
}

/// [`ReleaseBehind`] of the shards themselves.
pub(crate) fn release_behind(shards: &[Shard]) -> ReleaseBehind<impl FnMut(usize) + '_> {
    ReleaseBehind::new(|i| shards[i].release())
}

impl<F: FnMut(usize)> ReleaseBehind<F> {
    pub fn new(release: F) -> ReleaseBehind<F> {
        ReleaseBehind {
            release,
            current: None,
        }
    }

    /// The pass has taken the result of a chunk of shard `si`.
    pub fn reached(&mut self, si: usize) {
        if let Some(done) = self.current.filter(|&c| c != si) {
            (self.release)(done);
        }
        self.current = Some(si);
    }
}

impl<F: FnMut(usize)> Drop for ReleaseBehind<F> {
    fn drop(&mut self) {
        if let Some(last) = self.current {
            (self.release)(last);
        }
    }
}

/// An open shard, read a chunk at a time into buffers (what a sequential copy wants: no page
/// faults, no mappings to tear down).
pub struct ShardFile<'a> {
    shard: &'a Shard,
    file: &'a File,
}

impl ShardFile<'_> {
    /// Byte range in the file of rows `start..start + count`.
    fn byte_range(&self, start: u64, count: u64) -> (u64, u64) {
        let rb = self.shard.row_bytes() as u64;
        (
            self.shard.header.data_offset as u64 + start * rb,
            count * rb,
        )
    }

    /// Asks the kernel to start reading rows `start..start + count` into the page cache in the
    /// background (`POSIX_FADV_WILLNEED`), so a reader that prefetches its next chunk while it
    /// works on this one does not wait for data the kernel had dropped from memory. Advisory:
    /// a failure only means the read will wait.
    pub fn prefetch(&self, start: u64, count: u64) {
        use std::os::fd::AsRawFd;
        let (offset, len) = self.byte_range(start, count);
        // SAFETY: a valid open fd; the call only schedules readahead.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            );
        }
    }

    /// Reads rows `start..start + count` as they are in the file (46-byte rows for a legacy
    /// shard) into `buf`, replacing its contents.
    pub fn read_raw_into(&self, start: u64, count: u64, buf: &mut Vec<u8>) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let (offset, len) = self.byte_range(start, count);
        self.shard.ensure(offset, len)?;
        buf.resize(len as usize, 0);
        self.file
            .read_exact_at(buf, offset)
            .with_context(|| format!("reading {}", self.shard.path.display()))
    }
}

impl ShardFile<'_> {
    /// Reads rows `start..start + count` as [`Shard::read_upgraded`] gives them into `buf`
    /// (replacing its contents), and returns how many rows' `ev_legal` changed.
    pub fn read_upgraded_into(&self, start: u64, count: u64, buf: &mut Vec<u8>) -> Result<u64> {
        self.read_raw_into(start, count, buf)?;
        if !self.shard.is_legacy() {
            return Ok(0);
        }
        *buf = crate::format::row::legacy_rows_to_aligned(buf);
        Ok(crate::format::row::recompute_ev_legal(buf))
    }
}

/// Rows of a shard in the 48-byte layout: mapped straight from the file, or (for a legacy
/// packed shard) converted into memory. `raw()` is the file's bytes either way.
pub enum AlignedRows {
    Mapped(Mmap),
    Converted { raw: Mmap, rows: Vec<u8> },
}

impl AlignedRows {
    /// The bytes as they are in the file (46-byte rows for a legacy shard).
    pub fn raw(&self) -> &[u8] {
        match self {
            AlignedRows::Mapped(m) | AlignedRows::Converted { raw: m, .. } => m,
        }
    }
}

impl std::ops::Deref for AlignedRows {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            AlignedRows::Mapped(m) => m,
            AlignedRows::Converted { rows, .. } => rows,
        }
    }
}

/// The shard files of a pack, and every structural problem found while listing them.
#[derive(Debug, Default)]
pub struct ShardListing {
    /// Shards whose header could be read and whose layout is known, in shard order.
    pub shards: Vec<Shard>,
    /// Problems: naming, gaps, strays, unreadable headers, unknown dtypes, size mismatches.
    pub problems: Vec<String>,
    /// Shards in the legacy packed 46-byte layout.
    pub legacy: Vec<String>,
}

/// Lists and inspects the shards of `dir` without failing on problems (see `problems`).
pub fn list_shards(dir: &Path) -> Result<ShardListing> {
    let mut out = ShardListing::default();
    let mut single = false;
    let mut numbered: Vec<(u32, String)> = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("steps") && name.ends_with(".npy")) {
            continue;
        }
        if !is_shard_name(&name) {
            out.problems.push(format!(
                "stray file {name}: not a shard name (steps.npy or steps-NNNNN.npy)"
            ));
        } else if name == "steps.npy" {
            single = true;
        } else {
            numbered.push((name[6..11].parse().expect("five digits"), name));
        }
    }
    numbered.sort();
    if single && !numbered.is_empty() {
        out.problems
            .push("both steps.npy and steps-NNNNN.npy shards are present".into());
    }
    if !single && numbered.is_empty() {
        out.problems
            .push("no shard: neither steps.npy nor steps-00000.npy exists".into());
    }
    for (want, (got, name)) in numbered.iter().enumerate() {
        if *got as usize != want {
            out.problems.push(format!(
                "missing steps-{want:05}.npy: shard indices are not contiguous from 00000 \
                 ({name} comes after it)"
            ));
            break;
        }
    }
    let mut names: Vec<(u32, String)> = numbered;
    if single {
        names.insert(0, (0, "steps.npy".to_string()));
    }
    for (index, name) in names {
        let path = dir.join(&name);
        match inspect(&path) {
            Ok((file, header, file_len)) => {
                let shard = Shard {
                    index,
                    name: name.clone(),
                    path: path.clone(),
                    file: Arc::new(file),
                    header,
                    file_len,
                    lazy: crate::pack::lazy::for_path(&path),
                };
                match &shard.header.layout {
                    RowLayout::Other(descr) => {
                        out.problems
                            .push(format!("{name}: dtype {descr} is not the pack row dtype"));
                        continue;
                    }
                    RowLayout::LegacyPacked => out.legacy.push(name.clone()),
                    RowLayout::Aligned => {}
                }
                // Every later read of the shard (rows × row size, offsets, maps, buffers)
                // is bounded by the file's size because of this check.
                if u128::from(shard.file_len) != shard.expected_len() {
                    out.problems.push(format!(
                        "{name}: file is {} bytes, the header promises {} ({} rows × {} + {}-byte header)",
                        shard.file_len,
                        shard.expected_len(),
                        shard.header.rows,
                        shard.row_bytes(),
                        shard.header.data_offset
                    ));
                    continue;
                }
                out.shards.push(shard);
            }
            Err(e) => out.problems.push(format!("{name}: {e:#}")),
        }
    }
    let total = out
        .shards
        .iter()
        .try_fold(0u64, |sum, s| sum.checked_add(s.header.rows));
    if total.is_none() {
        out.problems
            .push("the shards hold more than 2^64 rows together".into());
        out.shards.clear();
    }
    Ok(out)
}

/// The shard file at `path`, opened to be held ([`crate::pack::snapshot::hold`]), with its
/// header and length.
fn inspect(path: &Path) -> Result<(File, Header, u64)> {
    let file = crate::pack::snapshot::hold(path).context("cannot open")?;
    let (head, len) = read_head(&file)?;
    let header = npy::parse_header(&head).context("bad .npy header")?;
    Ok((file, header, len))
}

/// The header bytes of the `.npy` file `file` (all of them, whatever their length, and
/// never more than NumPy reads: see [`npy::header_size`]) and the file's length.
pub fn read_head(file: &File) -> Result<(Vec<u8>, u64)> {
    use std::io::Read;
    let len = file.metadata().context("cannot open")?.len();
    // Read from the start; only a file just opened is passed here.
    let mut file: &File = file;
    let mut prefix = Vec::with_capacity(12);
    file.by_ref()
        .take(12)
        .read_to_end(&mut prefix)
        .context("cannot read the header")?;
    let size = npy::header_size(&prefix).context("bad .npy header")?;
    let mut head = prefix;
    file.take(size.saturating_sub(head.len()) as u64)
        .read_to_end(&mut head)
        .context("cannot read the header")?;
    Ok((head, len))
}

/// Loads `valuation_types.json` (any of the accepted forms).
pub fn read_valuations(dir: &Path) -> Result<ValuationTable> {
    let path = dir.join(valuation::FILE_NAME);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    ValuationTable::from_json(&text).with_context(|| format!("{}", path.display()))
}

/// Lists shards and fails on any structural problem: for commands that read a pack they
/// trust (validate reports problems instead). Legacy packed shards are accepted when `legacy_ok`.
pub fn open_shards(dir: &Path, legacy_ok: bool) -> Result<Vec<Shard>> {
    let listing = list_shards(dir)?;
    if let Some(p) = listing.problems.first() {
        fail!(Corrupt, "{} is not a valid pack: {p}", dir.display());
    }
    if !legacy_ok && let Some(name) = listing.legacy.first() {
        fail!(
            Unsupported,
            "{}: {name} is a legacy packed 46-byte shard; {}",
            dir.display(),
            upgrade_hint(dir)
        );
    }
    Ok(listing.shards)
}

/// How to turn a legacy pack into a full one, for messages.
pub fn upgrade_hint(dir: &Path) -> String {
    format!(
        "`dataset-packer export {} --format pack --output NEW_PACK` (or `merge`) converts it to a full pack",
        dir.display()
    )
}

/// How many rows of the legacy shards among `shards` have an `ev_legal` that recomputing it
/// from the board changes (what an upgrade of the pack reports).
pub fn ev_legal_changes(shards: &[Shard]) -> Result<u64> {
    let mut changed = 0;
    for (i, start, count) in chunks(shards, 128 * 1024) {
        if shards[i].is_legacy() {
            changed += shards[i].read_upgraded(start, count)?.1;
        }
    }
    Ok(changed)
}

/// The global row where each shard starts, then the pack's total row count.
pub fn shard_starts(shards: &[Shard]) -> Vec<u64> {
    let mut starts = Vec::with_capacity(shards.len() + 1);
    starts.push(0);
    for s in shards {
        starts.push(starts.last().unwrap() + s.header.rows);
    }
    starts
}

/// Rows `start..start + count` of shard `shard` (an index into the pack's shard list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub shard: usize,
    pub start: u64,
    pub count: u64,
}

/// Splits the global rows `range` into pieces at shard boundaries (`starts` from
/// [`shard_starts`]), each of at most `max_rows` rows. Rows past the pack's end are left out.
pub fn pieces_of(starts: &[u64], range: std::ops::Range<u64>, max_rows: u64, out: &mut Vec<Piece>) {
    let shards = starts.len() - 1;
    let mut row = range.start;
    while row < range.end {
        let shard = starts.partition_point(|&s| s <= row) - 1;
        if shard >= shards {
            break;
        }
        let start = row - starts[shard];
        let count = (range.end - row).min(starts[shard + 1] - row).min(max_rows);
        out.push(Piece {
            shard,
            start,
            count,
        });
        row += count;
    }
}

/// Splits `shards` into (shard, first row, rows) chunks of at most `chunk_rows` rows.
pub fn chunks(shards: &[Shard], chunk_rows: u64) -> Vec<(usize, u64, u64)> {
    let mut out = Vec::new();
    for (i, s) in shards.iter().enumerate() {
        let mut start = 0;
        while start < s.header.rows {
            let n = chunk_rows.min(s.header.rows - start);
            out.push((i, start, n));
            start += n;
        }
    }
    out
}

/// run_id → position in `runs`: a dense table when ids are compact (the normal case),
/// a hash map otherwise. Memory is proportional to the number of runs either way.
pub enum RunSlots {
    Dense(Vec<u32>),
    Sparse(HashMap<u32, u32>),
}

impl RunSlots {
    pub fn new(ids: &[u32]) -> RunSlots {
        let max = ids.iter().copied().max().unwrap_or(0) as usize;
        if max < ids.len() * 4 + 1024 {
            let mut v = vec![u32::MAX; max + 1];
            for (slot, &id) in ids.iter().enumerate() {
                v[id as usize] = slot as u32;
            }
            RunSlots::Dense(v)
        } else {
            RunSlots::Sparse(
                ids.iter()
                    .enumerate()
                    .map(|(slot, &id)| (id, slot as u32))
                    .collect(),
            )
        }
    }

    #[inline]
    pub fn get(&self, id: u32) -> Option<u32> {
        match self {
            RunSlots::Dense(v) => v.get(id as usize).copied().filter(|&s| s != u32::MAX),
            RunSlots::Sparse(m) => m.get(&id).copied(),
        }
    }

    pub fn contains_slot(&self, id: u32, slots: &[u32]) -> bool {
        self.get(id).is_some_and(|s| slots.contains(&s))
    }
}

/// Checks the shards `which` (indices into `shards`) of the pack at `dir` against the CRC-32C
/// its `metadata.db` records, reading each whole file (in parallel on `workers` threads), so a
/// command never hands out rows of a damaged shard; a mismatch is an error naming the shard.
/// A pack that records no checksums (another tool's) is read with a one-line warning.
pub fn verify_shards(
    dir: &Path,
    conn: &rusqlite::Connection,
    shards: &[Shard],
    which: &[usize],
    workers: usize,
) -> Result<()> {
    let Some(records) = crate::format::metadata::read_shard_records(conn)? else {
        log::warn!(
            "{} records no shard checksums (a pack from another tool): its rows are read unverified",
            dir.display()
        );
        return Ok(());
    };
    let files: Vec<HeldFile> = which
        .iter()
        .map(|&i| {
            let shard = &shards[i];
            let record = records.iter().find(|r| r.file_name == shard.name);
            let (bytes, crc) = record.map_or((u64::MAX, 0), |r| (r.bytes, r.crc32c));
            HeldFile {
                file: &shard.file,
                path: &shard.path,
                name: &shard.name,
                bytes,
                crc,
            }
        })
        .collect();
    verify_files(dir, &files, workers)
}

/// A file of an opened pack to check against what `metadata.db` records of it (`bytes` is
/// `u64::MAX` when it records nothing).
pub struct HeldFile<'a> {
    pub file: &'a File,
    pub path: &'a Path,
    pub name: &'a str,
    pub bytes: u64,
    pub crc: u32,
}

/// Checks whole files against their records in parallel.
pub fn verify_files(dir: &Path, files: &[HeldFile], workers: usize) -> Result<()> {
    crate::ordered::ordered_try_map(
        files,
        workers,
        workers * 2,
        || (),
        |_, held| -> Result<()> {
            let HeldFile {
                file,
                path,
                name,
                bytes,
                crc,
            } = *held;
            if crate::pack::lazy::for_path(path).is_some() {
                // A remote file read block by block: each block is checked against its
                // recorded CRC-32C as it is fetched, and reading the whole file here would
                // fetch all of it.
                return Ok(());
            }
            if bytes == u64::MAX {
                fail!(
                    Corrupt,
                    "{}: {name} has no checksum recorded in metadata.db, which lists the pack's files; run `dataset-packer validate {}`",
                    dir.display(),
                    dir.display()
                );
            }
            let len = file
                .metadata()
                .with_context(|| format!("reading {}", path.display()))?
                .len();
            let computed = crate::crc::open_file_crc(file, path)?;
            if len != bytes || computed != crc {
                fail!(
                    Corrupt,
                    "{}: {name} does not match its recorded checksum ({len} bytes, crc32c {computed:08x}; recorded {bytes} bytes, crc32c {crc:08x}): the pack is damaged; run `dataset-packer validate {}`",
                    dir.display(),
                    dir.display()
                );
            }
            Ok(())
        },
        |_, checked| checked,
    )
}

/// Opens the `metadata.db` of the pack at `dir` read-only, with a clear error when `dir` is not
/// a folder or holds no `metadata.db` (so is not a pack).
pub fn open_metadata(dir: &Path) -> Result<rusqlite::Connection> {
    check_is_pack(dir)?;
    crate::format::metadata::open_read_only(&dir.join(crate::format::metadata::FILE_NAME))
}

/// Fails, saying what `dir` is instead, unless it is a folder holding a `metadata.db`: does not
/// exist, is a file, or is not a pack (with a hint when it holds raw self-play logs). A
/// publish under way (no `metadata.db` for a moment) is waited for.
pub fn check_is_pack(dir: &Path) -> Result<()> {
    crate::pack::snapshot::consistently(dir, || check_is_pack_now(dir))
}

fn check_is_pack_now(dir: &Path) -> Result<()> {
    crate::pack::files::refuse_url(dir)?;
    if !dir.exists() {
        fail!(NotAPack, "{} does not exist", dir.display());
    }
    if !dir.is_dir() {
        fail!(
            NotAPack,
            "{} is not a folder (a pack is a folder)",
            dir.display()
        );
    }
    if dir.join(crate::format::metadata::FILE_NAME).is_file() {
        return Ok(());
    }
    if crate::pack::snapshot::publish_under_way(dir) {
        fail!(
            NotAPack,
            "{} has a pack's files but no {}: a publish into it is under way, or was interrupted (the next write into the folder finishes it); try again",
            dir.display(),
            crate::format::metadata::FILE_NAME
        );
    }
    let raw = std::fs::read_dir(dir)
        .map(|entries| {
            entries.filter_map(|e| e.ok()).any(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.ends_with(".meta.json")
                    || name.ends_with(".meta.json.gz")
                    || name.ends_with(".jsonl.gz")
                    || name.ends_with(".jsonl")
                    || (e.path().is_dir() && !name.starts_with('.'))
            })
        })
        .unwrap_or(false);
    fail!(
        NotAPack,
        "{} is not a pack (no {}){}; to pack raw logs: `dataset-packer pack --input {} --output PACK`",
        dir.display(),
        crate::format::metadata::FILE_NAME,
        if raw {
            ": it looks like raw self-play logs"
        } else {
            ""
        },
        dir.display()
    )
}
