//! Streams rows into `steps.npy` or `steps-NNNNN.npy` shards: header first (patched with the
//! final row count on close, NumPy's header has room for it), rows appended in order, a CRC-32C
//! of every shard's bytes computed on the way, every shard fsynced before it counts as written.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Context, Result, ensure, err, fail};

use crate::format::metadata::{RowLocation, ShardRecord};
use crate::format::npy;
use crate::format::row::ROW_BYTES;
use crate::format::search;
use crate::thread_cpu::Span;

/// At most this many shards: the 5-digit index runs 00000..=99999.
pub const MAX_SHARDS: u64 = 100_000;

/// File name of file `index` of a family (`steps`, or a companion array's name): `NAME.npy`
/// when the pack is one file (`shard_rows` None), else `NAME-NNNNN.npy`.
pub fn file_name(prefix: &str, shard_rows: Option<u64>, index: u32) -> String {
    match shard_rows {
        None => format!("{prefix}.npy"),
        Some(_) => format!("{prefix}-{index:05}.npy"),
    }
}

/// What a writer's files hold: the pack's steps rows, or the rows of a companion array (any
/// dtype and trailing shape, split into files exactly like the steps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLayout {
    /// File name prefix: `steps`, or the companion's name.
    pub prefix: String,
    /// The dtype's `descr` as the `.npy` header writes it.
    pub descr: String,
    /// The shape after the first axis.
    pub trailing: Vec<u64>,
    pub row_bytes: usize,
}

impl FileLayout {
    /// The pack's own rows: `steps` files of 48-byte rows.
    pub fn steps() -> FileLayout {
        FileLayout {
            prefix: "steps".into(),
            descr: npy::STEP_ROW_DESCR.into(),
            trailing: Vec::new(),
            row_bytes: ROW_BYTES,
        }
    }

    /// The `search` companion family: the current logger's search statistics, one
    /// [`search::DESCR`] row per step row.
    pub fn search() -> FileLayout {
        FileLayout {
            prefix: search::FAMILY.into(),
            descr: search::DESCR.into(),
            trailing: Vec::new(),
            row_bytes: search::ROW_BYTES,
        }
    }

    /// The `.npy` header of a file of `rows` rows (its length does not depend on `rows`).
    pub fn header(&self, rows: u64) -> Vec<u8> {
        let mut shape = vec![rows];
        shape.extend_from_slice(&self.trailing);
        npy::array_header(&self.descr, &shape)
    }

    /// The header of a file of `rows` rows as a reader parses it back (a header near the
    /// format's length limits may not read back as the array it was written for).
    pub fn header_read_back(&self, rows: u64) -> Result<npy::ArrayHeader, npy::HeaderError> {
        npy::parse_array_header(&self.header(rows))
    }
}

/// Everything needed to continue writing after a restart (see [`ShardWriter::snapshot`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WriterState {
    pub next_index: u32,
    pub total_rows: u64,
    /// Rows in the shard still open (None when no shard is open).
    pub current_rows: Option<u64>,
    pub current_crc: u32,
    pub written: Vec<ShardRecord>,
}

struct OpenShard {
    file: BufWriter<File>,
    path: PathBuf,
    header_len: u64,
    row_bytes: u64,
    rows: u64,
    data_crc: u32,
    /// Bytes of the file already handed to the kernel for writeback.
    flushed_to: u64,
    /// Once rows are placed in the shard ([`ShardWriter::place_rows`]): the handle their
    /// writers share. From then on rows only go in by placement.
    shared: Option<Arc<SharedShard>>,
    /// The size the file was extended to for [`Placement::prefault`] (0: not extended).
    extended_to: u64,
}

/// A shard file as the threads writing placed rows into it share it.
struct SharedShard {
    file: File,
    path: PathBuf,
    /// The mapping [`Placement::prefault`] faults pages in through (the file is extended for
    /// it), when placements are prefaulted.
    map: Option<Mapping>,
    /// What the thread-CPU probe calls the writes into this file (see [`write_span`]).
    write_span: &'static str,
    /// The end of the pages faulted in through `map` so far.
    populated_to: AtomicU64,
    /// Bytes written since the mapping's entries were last dropped.
    unreleased: AtomicU64,
    /// Placements handed out and not yet dropped.
    inflight: AtomicUsize,
    /// The first failure of a placement (a write error, or rows never written).
    error: Mutex<Option<String>>,
}

impl SharedShard {
    /// Counts `bytes` written into pages faulted in through the mapping, and every
    /// [`RELEASE_EVERY`] bytes drops the mapping's page-table entries (the pages stay in the
    /// file's cache), so that it does not add the file's size to the process's resident
    /// memory. Once per so many bytes rather than per write: each drop makes the kernel tell
    /// every CPU running the process to forget the entries.
    fn written_through_map(&self, bytes: u64) {
        let Some(map) = &self.map else {
            return;
        };
        let before = self.unreleased.fetch_add(bytes, Ordering::AcqRel);
        if before + bytes < RELEASE_EVERY
            || self.unreleased.swap(0, Ordering::AcqRel) < RELEASE_EVERY
        {
            return;
        }
        let _release = Span::start("copy: release");
        // Entries of pages faulted in and not yet written go too: harmless, the write finds
        // them in the file's cache all the same.
        map.release(0, self.populated_to.load(Ordering::Acquire) as usize);
    }

    fn fail(&self, message: String) {
        let mut error = self.error.lock().unwrap_or_else(|e| e.into_inner());
        error.get_or_insert(message);
    }
}

/// Rows placed in a shard file but not yet written there: a byte range of the caller's
/// buffer and the file offset it goes to. Any thread may write it ([`Placement::write`]), in
/// any order; the shard is closed once every placement in it is written or dropped (a
/// placement dropped unwritten fails the writer's [`ShardWriter::finish`]).
pub struct Placement {
    shard: Arc<SharedShard>,
    offset: u64,
    range: Range<usize>,
    written: bool,
}

impl Placement {
    /// Asks the kernel for the file's pages that [`Placement::write`] is going to fill, through
    /// a mapping of them (with [`ShardWriter::prefault_placements`]; otherwise nothing).
    ///
    /// Why: the kernel takes one `write` into a file at a time (the inode's lock, on tmpfs,
    /// ext4 and XFS alike), and most of a write's time into fresh pages goes to allocating
    /// them. A page fault allocates the same page without that lock, so with the pages there
    /// the write that follows only copies, and many threads can fill one file. It costs more
    /// CPU in all (the pages are zeroed and mapped first), so it pays only when the writes
    /// would otherwise queue for the lock. A failure is ignored: the write then allocates the
    /// pages itself and reports any real error (a full disk).
    ///
    /// `rows` is the buffer given to [`ShardWriter::place_rows`]: pages [`Placement::write`]
    /// leaves unwritten (zeros) are not faulted in either.
    pub fn prefault(&self, rows: &[u8]) {
        let Some(map) = &self.shard.map else {
            return;
        };
        let bytes = &rows[self.range.clone()];
        for (start, end) in pieces_to_write(bytes, self.offset) {
            let at = self.offset + start as u64;
            if !map.populate(at, end - start) {
                return;
            }
            self.shard
                .populated_to
                .fetch_max(at + (end - start) as u64, Ordering::AcqRel);
        }
    }

    /// Writes the placed rows: `rows` is the buffer given to [`ShardWriter::place_rows`]. A
    /// failure is reported when the shard is closed.
    ///
    /// Whole file pages of zeros are left unwritten: a placement lies past everything written
    /// to the file before it (a shard with placed rows grows only by placement, from a file
    /// created empty), and unwritten bytes there read as zeros (a hole, or the zeros that
    /// closing the shard extends it with). The `search` family of a run without statistics (a
    /// tuple-valued stretch of a game, or a game of the old layout) is zeros: writing them cost
    /// the kernel a fresh page and a copy for every 4 KiB.
    pub fn write(mut self, rows: &[u8]) {
        let bytes = &rows[self.range.clone()];
        let pieces = pieces_to_write(bytes, self.offset);
        let under_lock = Span::start(self.shard.write_span);
        for &(start, end) in &pieces {
            let at = self.offset + start as u64;
            if let Err(e) = self.shard.file.write_all_at(&bytes[start..end], at) {
                let path = self.shard.path.display();
                self.shard.fail(format!("writing {path}: {e}"));
                break;
            }
        }
        drop(under_lock);
        self.shard.written_through_map(bytes.len() as u64);
        start_writeback(&self.shard.file, self.offset, bytes.len() as u64);
        self.written = true;
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        if !self.written {
            self.shard.fail(format!(
                "internal error: rows placed in {} were never written",
                self.shard.path.display()
            ));
        }
        self.shard.inflight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// File pages, for [`pieces_to_write`].
const PAGE: usize = 4096;

/// The byte ranges of `bytes` (to go to file offset `offset`) that have to be written: all but
/// the whole file pages (of [`PAGE`] bytes, at multiples of it) that hold only zeros, in ranges
/// of at most [`WRITE_PIECE`] bytes.
fn pieces_to_write(bytes: &[u8], offset: u64) -> Vec<(usize, usize)> {
    let mut pieces: Vec<(usize, usize)> = Vec::new();
    let mut keep = |start: usize, end: usize| match pieces.last_mut() {
        Some(last) if last.1 == start && end - last.0 <= WRITE_PIECE => last.1 = end,
        _ => pieces.push((start, end)),
    };
    // The part before the first page boundary, then page by page (the last may be partial).
    let head = ((PAGE as u64 - offset % PAGE as u64) % PAGE as u64) as usize;
    let mut start = 0;
    while start < bytes.len() {
        let end = if start == 0 && head > 0 {
            head.min(bytes.len())
        } else {
            (start + PAGE).min(bytes.len())
        };
        let whole_page = end - start == PAGE;
        if !(whole_page && is_zero(&bytes[start..end])) {
            keep(start, end);
        }
        start = end;
    }
    pieces
}

/// Whether `bytes` are all zero: 64 bytes at a time (a fold the compiler vectorizes), stopping
/// at the first 64 with a one bit, which rows of data have at once.
fn is_zero(bytes: &[u8]) -> bool {
    bytes
        .chunks(64)
        .all(|c| c.iter().fold(0u8, |acc, &b| acc | b) == 0)
}

/// The thread-CPU probe's name for the writes into the file at `path`: the kernel takes one
/// write into a file at a time (the inode's lock, on tmpfs, ext4 and XFS alike), so each
/// file's writes are serial work, whichever threads make them.
fn write_span(path: &Path) -> &'static str {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    if name.starts_with("steps") {
        "write into one file: steps"
    } else if name.starts_with(search::FAMILY) {
        "write into one file: search"
    } else {
        "write into one file: another family"
    }
}

/// A shared mapping of a shard file, through which [`Placement::prefault`] faults pages in.
/// It covers the shard's largest size (or [`RESERVE_UNBOUNDED`] bytes of address space when
/// that is not known), however long the file is yet: it is made once, since making and
/// removing mappings takes a lock of the whole process's address space. Nothing is ever read
/// or written through it.
struct Mapping {
    addr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is only handed to the kernel (madvise, munmap), never dereferenced.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

/// Bytes written through a shard's mapping between two drops of its page-table entries (at most
/// this much of each file is resident for the mapping).
const RELEASE_EVERY: u64 = 8 << 20;

/// Address space reserved for a shard of no set size: 1 TiB.
const RESERVE_UNBOUNDED: u64 = 1 << 40;

impl Mapping {
    /// A mapping of `len` bytes of `file`; None when the kernel refuses (a limit on address
    /// space, say): the writes then allocate their pages themselves.
    fn new(file: &File, len: u64) -> Option<Mapping> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(len).ok()?.max(1);
        // SAFETY: a fresh shared mapping of an open file; see the type's comment.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        (addr != libc::MAP_FAILED).then_some(Mapping { addr, len })
    }

    /// `advice` for the whole pages holding `[from, from + len)`; false past the mapping or
    /// when the kernel says no.
    fn advise(&self, from: u64, len: usize, advice: libc::c_int) -> bool {
        let start = from - from % PAGE as u64;
        let end = from + len as u64;
        if len == 0 || end > self.len as u64 {
            return false;
        }
        // SAFETY: a range inside the mapping; the advice only affects its page tables.
        unsafe {
            libc::madvise(
                self.addr.add(start as usize),
                (end - start) as usize,
                advice,
            ) == 0
        }
    }

    /// Faults in the file's pages of `[from, from + len)` (`MADV_POPULATE_WRITE`, Linux 5.14:
    /// a page that cannot be had gives an error, never a SIGBUS).
    fn populate(&self, from: u64, len: usize) -> bool {
        self.advise(from, len, libc::MADV_POPULATE_WRITE)
    }

    /// Drops this process's page-table entries for them again (the pages stay in the file's
    /// cache).
    fn release(&self, from: u64, len: usize) {
        self.advise(from, len, libc::MADV_DONTNEED);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapped once, by its owner.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

/// Starts the kernel's writeback of a byte range just written (see [`Flusher`]; placed rows
/// are written on the caller's threads, which start it themselves).
fn start_writeback(file: &File, from: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open fd and a byte range inside the file; the call only starts I/O.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            from as i64,
            len as i64,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// Start writeback of every this many bytes as they are written, so the fsync before publish
/// finds little left to do (the disk works while we compute).
const WRITEBACK_EVERY: u64 = 2 << 20;

/// Bytes handed to one `write` call at most. From 2 MiB up, the kernel puts the page cache in
/// 2 MiB folios, and filling fresh ones was measured up to 10x slower on the 2-core benchmark
/// VM (kernel 6.18): writing 192 MB took 0.35-0.5 s with `dd bs=2M` against 35 ms with
/// `bs=1M`, nearly all of it in the kernel's copy into the new folios.
const WRITE_PIECE: usize = 1 << 20;

/// How far ahead of the placements a file is extended for [`Placement::prefault`]: one
/// `ftruncate` per this many bytes placed.
const EXTEND_STEP: u64 = 64 << 20;

/// Writes smaller than this are gathered in a buffer first; larger ones go straight to the
/// file (a buffer as large as the pieces would copy every byte once more).
const BUFFER_BYTES: usize = 64 << 10;

impl OpenShard {
    fn end_offset(&self) -> u64 {
        self.header_len + self.rows * self.row_bytes
    }

    /// Makes the file at least `end` bytes long (a page fault past the end of a file fails),
    /// in steps of [`EXTEND_STEP`] but never past `most`, the shard's full size. Only the
    /// thread that places rows does this, in order, so the file never shrinks under a
    /// placement being written.
    fn extend_for(&mut self, end: u64, most: Option<u64>) -> Result<()> {
        if end <= self.extended_to {
            return Ok(());
        }
        let step = EXTEND_STEP;
        let to = end.div_ceil(step) * step;
        let to = most.map_or(to, |m| to.min(m)).max(end);
        self.file
            .get_ref()
            .set_len(to)
            .with_context(|| format!("writing {}", self.path.display()))?;
        self.extended_to = to;
        Ok(())
    }

    /// The handle placed rows are written through (made on the first placement).
    /// With `prefault`, the shared file is mapped for [`Placement::prefault`], over `most`
    /// bytes (the shard's largest size, when it has one).
    fn share(&mut self, prefault: bool, most: Option<u64>) -> Result<Arc<SharedShard>> {
        if let Some(shared) = &self.shared {
            return Ok(shared.clone());
        }
        // Rows written before (the header, an update's carried rows) reach the file first.
        self.file
            .flush()
            .with_context(|| format!("writing {}", self.path.display()))?;
        let file = self
            .file
            .get_ref()
            .try_clone()
            .with_context(|| format!("opening {}", self.path.display()))?;
        let map = prefault
            .then(|| Mapping::new(&file, most.unwrap_or(RESERVE_UNBOUNDED)))
            .flatten();
        let shared = Arc::new(SharedShard {
            file,
            path: self.path.clone(),
            map,
            write_span: write_span(&self.path),
            populated_to: AtomicU64::new(0),
            unreleased: AtomicU64::new(0),
            inflight: AtomicUsize::new(0),
            error: Mutex::new(None),
        });
        self.shared = Some(shared.clone());
        Ok(shared)
    }

    /// Hands what is written but not yet handed over to the background writeback thread.
    fn start_writeback(&mut self, flusher: &Flusher) -> Result<()> {
        let end = self.end_offset();
        if end - self.flushed_to < WRITEBACK_EVERY {
            return Ok(());
        }
        self.file.flush()?;
        flusher.kick(self.file.get_ref(), self.flushed_to, end - self.flushed_to);
        self.flushed_to = end;
        Ok(())
    }
}

/// Starts the kernel's writeback of byte ranges on a thread of its own: submitting the I/O
/// (`sync_file_range`) costs about as much CPU as writing the bytes did, and the writer has
/// better things to do. Purely an optimisation: every shard is fsynced when it is closed.
struct Flusher {
    ranges: std::sync::mpsc::Sender<(File, u64, u64)>,
}

impl Flusher {
    fn start() -> Flusher {
        let (ranges, todo) = std::sync::mpsc::channel::<(File, u64, u64)>();
        let thread = std::thread::Builder::new().name("writeback".into());
        let started = thread.spawn(move || {
            use std::os::fd::AsRawFd;
            for (file, from, len) in todo {
                // SAFETY: a valid open fd and a byte range inside the file; the call only
                // starts I/O.
                unsafe {
                    libc::sync_file_range(
                        file.as_raw_fd(),
                        from as i64,
                        len as i64,
                        libc::SYNC_FILE_RANGE_WRITE,
                    );
                }
            }
            crate::thread_cpu::thread_done();
        });
        // Without the thread, the ranges are never started: harmless (see above).
        drop(started);
        Flusher { ranges }
    }

    /// Asks for writeback of `len` bytes of `file` from `from` (a failure to ask is harmless).
    fn kick(&self, file: &File, from: u64, len: u64) {
        if let Ok(file) = file.try_clone() {
            let _ = self.ranges.send((file, from, len));
        }
    }
}

/// Writes rows into shards inside `dir` (a staging folder).
pub struct ShardWriter {
    dir: PathBuf,
    shard_rows: Option<u64>,
    /// Rows of each file, when they are given rather than `shard_rows` each (companion files
    /// attached to an existing pack follow its shards).
    sizes: Option<Vec<u64>>,
    layout: FileLayout,
    header_len: u64,
    current: Option<OpenShard>,
    /// Full shards with placed rows, closed (in order) once all of those are written.
    filled: VecDeque<OpenShard>,
    next_index: u32,
    total_rows: u64,
    written: Vec<ShardRecord>,
    flusher: Flusher,
    /// Rows the caller said it will write in all (see [`ShardWriter::expect_rows`]).
    expected_rows: Option<u64>,
    /// Whether placements can be prefaulted ([`ShardWriter::prefault_placements`]).
    prefault: bool,
}

impl ShardWriter {
    pub fn new(dir: &Path, shard_rows: Option<u64>) -> ShardWriter {
        ShardWriter::with_layout(dir, shard_rows, FileLayout::steps())
    }

    /// A writer of files of another layout (a companion array's), split like the steps.
    pub fn with_layout(dir: &Path, shard_rows: Option<u64>, layout: FileLayout) -> ShardWriter {
        ShardWriter {
            dir: dir.to_path_buf(),
            shard_rows,
            sizes: None,
            header_len: layout.header(0).len() as u64,
            layout,
            current: None,
            filled: VecDeque::new(),
            next_index: 0,
            total_rows: 0,
            written: Vec::new(),
            flusher: Flusher::start(),
            expected_rows: None,
            prefault: false,
        }
    }

    /// A writer of files of `layout` holding `sizes[i]` rows each, named like the shards of a
    /// pack of one file (`numbered` false) or of several: companion files for existing shards.
    pub fn with_sizes(
        dir: &Path,
        layout: FileLayout,
        sizes: Vec<u64>,
        numbered: bool,
    ) -> ShardWriter {
        let name_as = numbered.then(|| sizes.first().copied().unwrap_or(1).max(1));
        let mut w = ShardWriter::with_layout(dir, name_as, layout);
        w.sizes = Some(sizes);
        w
    }

    /// Rows file `index` holds at most (None: no limit).
    fn limit(&self, index: u32) -> Option<u64> {
        match &self.sizes {
            Some(sizes) => Some(sizes.get(index as usize).copied().unwrap_or(0)),
            None => self.shard_rows,
        }
    }

    /// A writer that extends a pack whose shards `kept` (all full) stay as they are: global
    /// rows continue after theirs, the next shard written is `kept.len()`, and
    /// [`ShardWriter::finish`] lists them first.
    pub fn after(dir: &Path, shard_rows: Option<u64>, kept: Vec<ShardRecord>) -> ShardWriter {
        ShardWriter::after_with_layout(dir, shard_rows, FileLayout::steps(), kept)
    }

    /// [`ShardWriter::after`] for the files of another layout (a companion family's).
    pub fn after_with_layout(
        dir: &Path,
        shard_rows: Option<u64>,
        layout: FileLayout,
        kept: Vec<ShardRecord>,
    ) -> ShardWriter {
        let mut w = ShardWriter::with_layout(dir, shard_rows, layout);
        w.next_index = kept.len() as u32;
        w.total_rows = kept.iter().map(|s| s.rows).sum();
        w.written = kept;
        w
    }

    pub fn total_rows(&self) -> u64 {
        self.total_rows
    }

    /// Tells the writer how many rows it will be given in all, so each shard's disk space is
    /// reserved when it is opened (`fallocate`): a full disk is reported before the copy
    /// rather than in the middle of it, and filling reserved space costs the filesystem less
    /// (ext4: about a third less time in `write`). A shard left shorter is cut back to size.
    pub fn expect_rows(&mut self, total: u64) {
        self.expected_rows = Some(total);
    }

    /// Lets the placements' writers call [`Placement::prefault`] before
    /// [`Placement::write`]: the file is made long enough for every placement when it is
    /// placed (in steps of [`EXTEND_STEP`]; closing cuts it back to size).
    pub fn prefault_placements(&mut self, yes: bool) {
        self.prefault = yes;
    }

    /// Reserves the space of the shard being opened, when the total is known.
    fn reserve(&self, file: &File, path: &Path) -> Result<()> {
        let Some(total) = self.expected_rows else {
            return Ok(());
        };
        let rows = total
            .saturating_sub(self.total_rows)
            .min(self.limit(self.next_index).unwrap_or(u64::MAX));
        let bytes = self.header_len + rows * self.layout.row_bytes as u64;
        use std::os::fd::AsRawFd;
        // SAFETY: a valid open fd; mode 0 allocates blocks and extends the size.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, bytes as libc::off_t) };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            // Filesystems without fallocate simply do not get the head start.
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(()),
            _ => {
                Err(err).with_context(|| format!("reserving {bytes} bytes for {}", path.display()))
            }
        }
    }

    /// Flushes what was written so far to the kernel and returns the state to resume from.
    /// It does not fsync: [`ShardWriter::resume`] checks the files against the state's CRCs
    /// instead, so a machine crash is detected rather than resumed from silently.
    pub fn snapshot(&mut self) -> Result<WriterState> {
        let placed = self.current.as_ref().is_some_and(|s| s.shared.is_some());
        ensure!(
            !placed && self.filled.is_empty(),
            Corrupt,
            "internal error: a snapshot of a writer with placed rows"
        );
        if let Some(s) = &mut self.current {
            s.file.flush()?;
        }
        Ok(WriterState {
            next_index: self.next_index,
            total_rows: self.total_rows,
            current_rows: self.current.as_ref().map(|s| s.rows),
            current_crc: self.current.as_ref().map_or(0, |s| s.data_crc),
            written: self.written.clone(),
        })
    }

    /// Continues a writer from a snapshot: the shards it completed must match their recorded
    /// size and CRC, the open shard's first rows must match the recorded CRC; the open shard is
    /// cut back to those rows (anything written after the snapshot is dropped) and appended to.
    pub fn resume(dir: &Path, shard_rows: Option<u64>, state: &WriterState) -> Result<ShardWriter> {
        ShardWriter::resume_with_layout(dir, shard_rows, FileLayout::steps(), state)
    }

    /// [`ShardWriter::resume`] for files of another layout.
    pub fn resume_with_layout(
        dir: &Path,
        shard_rows: Option<u64>,
        layout: FileLayout,
        state: &WriterState,
    ) -> Result<ShardWriter> {
        let header_len = layout.header(0).len() as u64;
        let row_bytes = layout.row_bytes as u64;
        for done in &state.written {
            let path = dir.join(&done.file_name);
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            if bytes.len() as u64 != done.bytes || crate::crc::crc32c(&bytes) != done.crc32c {
                fail!(
                    Corrupt,
                    "{} no longer matches what was written before the interruption",
                    path.display()
                );
            }
        }
        let current = match state.current_rows {
            None => None,
            Some(rows) => {
                let path = dir.join(file_name(&layout.prefix, shard_rows, state.next_index - 1));
                let file = File::options()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .with_context(|| format!("reopening {}", path.display()))?;
                let data_len = rows * row_bytes;
                let mut data = vec![0u8; data_len as usize];
                file.read_exact_at(&mut data, header_len)
                    .with_context(|| format!("reading {}", path.display()))?;
                if crate::crc::crc32c(&data) != state.current_crc {
                    fail!(
                        Corrupt,
                        "{} no longer matches what was written before the interruption",
                        path.display()
                    );
                }
                file.set_len(header_len + data_len)?;
                let mut file = BufWriter::with_capacity(BUFFER_BYTES, file);
                std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))?;
                let flushed_to = header_len + data_len;
                Some(OpenShard {
                    file,
                    path,
                    header_len,
                    row_bytes,
                    rows,
                    data_crc: state.current_crc,
                    flushed_to,
                    shared: None,
                    extended_to: 0,
                })
            }
        };
        Ok(ShardWriter {
            dir: dir.to_path_buf(),
            shard_rows,
            sizes: None,
            layout,
            header_len,
            current,
            filled: VecDeque::new(),
            next_index: state.next_index,
            total_rows: state.total_rows,
            written: state.written.clone(),
            flusher: Flusher::start(),
            expected_rows: None,
            prefault: false,
        })
    }

    /// Where the next row written will land.
    pub fn position(&self) -> RowLocation {
        let limit = self.limit(self.next_index.saturating_sub(1));
        let (shard, row_offset) = match (&self.current, limit) {
            (Some(s), Some(limit)) if s.rows == limit => (self.next_index, 0),
            (Some(s), _) => (self.next_index - 1, s.rows),
            (None, _) => (self.next_index, 0),
        };
        RowLocation {
            shard,
            row_offset,
            global_row: self.total_rows,
        }
    }

    fn open_next(&mut self) -> Result<()> {
        if u64::from(self.next_index) >= MAX_SHARDS {
            return Err(err!(
                Refused,
                "shards of {} rows would need more than {MAX_SHARDS} shards; choose a larger \
                 shard size",
                self.shard_rows.unwrap_or(0)
            )
            .with_option("shard_rows"));
        }
        if let Some(sizes) = &self.sizes {
            ensure!(
                (self.next_index as usize) < sizes.len(),
                Corrupt,
                "more rows than the {} files of {} hold",
                sizes.len(),
                self.layout.prefix
            );
        }
        let name = file_name(&self.layout.prefix, self.shard_rows, self.next_index);
        let path = self.dir.join(&name);
        // Readable too: a shared mapping of it (`Placement::prefault`) needs both.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        self.reserve(&file, &path)?;
        let mut file = BufWriter::with_capacity(BUFFER_BYTES, file);
        file.write_all(&self.layout.header(0))?;
        self.current = Some(OpenShard {
            file,
            path,
            header_len: self.header_len,
            row_bytes: self.layout.row_bytes as u64,
            rows: 0,
            data_crc: 0,
            flushed_to: 0,
            shared: None,
            extended_to: 0,
        });
        self.next_index += 1;
        Ok(())
    }

    /// Where global row `row` lands (rows before it all written or about to be).
    pub fn location_of(&self, row: u64) -> RowLocation {
        if let Some(sizes) = &self.sizes {
            let mut start = 0;
            for (i, &n) in sizes.iter().enumerate() {
                if row < start + n || i + 1 == sizes.len() {
                    return RowLocation {
                        shard: i as u32,
                        row_offset: row - start,
                        global_row: row,
                    };
                }
                start += n;
            }
        }
        match self.shard_rows {
            Some(limit) => RowLocation {
                shard: (row / limit) as u32,
                row_offset: row % limit,
                global_row: row,
            },
            None => RowLocation {
                shard: 0,
                row_offset: row,
                global_row: row,
            },
        }
    }

    /// Appends whole rows (a multiple of 48 bytes), starting new shards as they fill.
    pub fn write_rows(&mut self, bytes: &[u8]) -> Result<()> {
        self.append(bytes, None, None)
    }

    /// Like [`ShardWriter::write_rows`], for rows whose CRC-32C the caller already computed
    /// (merge checksums its input anyway): their bytes are not read again unless they straddle
    /// two shards.
    pub fn write_rows_with_crc(&mut self, bytes: &[u8], crc: u32) -> Result<()> {
        self.append(bytes, Some(crc), None)
    }

    /// Places whole rows whose CRC-32C the caller computed, without writing them: the rows
    /// take their place in the shards (and in the shards' checksums) now, and the caller
    /// writes each returned [`Placement`] from `bytes`, on any thread and in any order, before
    /// [`ShardWriter::finish`]. The bytes of the files are the same as with
    /// [`ShardWriter::write_rows`]; the copying moves off the thread that orders the rows.
    /// Once a shard has placed rows, rows only go into it by placement.
    pub fn place_rows(&mut self, bytes: &[u8], crc: u32) -> Result<Vec<Placement>> {
        let mut placed = Vec::with_capacity(1);
        self.append(bytes, Some(crc), Some(&mut placed))?;
        Ok(placed)
    }

    /// Appends `bytes` (whose CRC-32C may be given): written, or with `placed` placed.
    fn append(
        &mut self,
        mut bytes: &[u8],
        crc_of_all: Option<u32>,
        mut placed: Option<&mut Vec<Placement>>,
    ) -> Result<()> {
        let row_bytes = self.layout.row_bytes;
        debug_assert_eq!(bytes.len() % row_bytes, 0);
        fault_injection::check(self.total_rows + (bytes.len() / row_bytes) as u64)?;
        let all_len = bytes.len();
        self.close_filled(false)?;
        while !bytes.is_empty() {
            let limit = self.limit(self.next_index.saturating_sub(1));
            let full = matches!((&self.current, limit), (Some(s), Some(l)) if s.rows == l);
            if full {
                self.retire_current()?;
            }
            if self.current.is_none() {
                self.open_next()?;
            }
            let limit = self.limit(self.next_index - 1);
            let shard = self.current.as_mut().expect("a shard is open");
            let room = limit.map_or(u64::MAX, |l| l - shard.rows);
            let rows = ((bytes.len() / row_bytes) as u64).min(room);
            let (now, rest) = bytes.split_at(rows as usize * row_bytes);
            match placed.as_deref_mut() {
                Some(placed) => {
                    let most = limit.map(|l| shard.header_len + l * shard.row_bytes);
                    let shared = shard.share(self.prefault, most)?;
                    if shared.map.is_some() {
                        shard.extend_for(shard.end_offset() + now.len() as u64, most)?;
                    }
                    shared.inflight.fetch_add(1, Ordering::AcqRel);
                    let from = all_len - bytes.len();
                    placed.push(Placement {
                        shard: shared,
                        offset: shard.end_offset(),
                        range: from..from + now.len(),
                        written: false,
                    });
                }
                None => {
                    ensure!(
                        shard.shared.is_none(),
                        Corrupt,
                        "internal error: rows written after rows placed in {}",
                        shard.path.display()
                    );
                    // Pieces of at most 1 MiB: see WRITE_PIECE.
                    for piece in now.chunks(WRITE_PIECE) {
                        shard
                            .file
                            .write_all(piece)
                            .with_context(|| format!("writing {}", shard.path.display()))?;
                    }
                }
            }
            let crc = match crc_of_all {
                Some(crc) if now.len() == all_len => crc,
                _ => crate::crc::crc32c(now),
            };
            shard.data_crc = crate::crc::combine(shard.data_crc, crc, now.len());
            shard.rows += rows;
            if shard.shared.is_none() {
                shard.start_writeback(&self.flusher)?;
            }
            self.total_rows += rows;
            bytes = rest;
        }
        Ok(())
    }

    /// Closes the full shard: now, or once its placed rows are written.
    fn retire_current(&mut self) -> Result<()> {
        match &self.current {
            Some(s) if s.shared.is_some() => {
                self.filled.extend(self.current.take());
                Ok(())
            }
            _ => self.close_current(),
        }
    }

    /// Closes the full shards whose placed rows are all written; with `all`, every one (their
    /// placements must be written or dropped by then).
    fn close_filled(&mut self, all: bool) -> Result<()> {
        while let Some(shard) = self.filled.front() {
            let shared = shard
                .shared
                .as_ref()
                .expect("filled shards have placed rows");
            if !all && shared.inflight.load(Ordering::Acquire) != 0 {
                break;
            }
            let shard = self.filled.pop_front().expect("a front");
            self.close(shard)?;
        }
        Ok(())
    }

    fn close_current(&mut self) -> Result<()> {
        let Some(shard) = self.current.take() else {
            return Ok(());
        };
        self.close(shard)
    }

    /// Writes a shard's header, gives back unused reserved space, syncs it and records it.
    fn close(&mut self, shard: OpenShard) -> Result<()> {
        if let Some(shared) = &shard.shared {
            ensure!(
                shared.inflight.load(Ordering::Acquire) == 0,
                Corrupt,
                "internal error: {} closed before its placed rows were written",
                shard.path.display()
            );
            if let Some(e) = shared
                .error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                fail!(Io, "{e}");
            }
        }
        let path = shard.path;
        let file = shard.file.into_inner().map_err(|e| e.into_error())?;
        let header = self.layout.header(shard.rows);
        file.write_all_at(&header, 0)
            .with_context(|| format!("writing {}", path.display()))?;
        // Space reserved for rows that never came is given back.
        let data_len = shard.rows as usize * self.layout.row_bytes;
        let len = (header.len() + data_len) as u64;
        if file.metadata()?.len() != len {
            file.set_len(len)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        file.sync_all()
            .with_context(|| format!("syncing {}", path.display()))?;
        self.written.push(ShardRecord {
            // Shards close in order, after every earlier one (kept ones included).
            shard: self.written.len() as u32,
            file_name: path.file_name().unwrap().to_string_lossy().into_owned(),
            rows: shard.rows,
            bytes: (header.len() + data_len) as u64,
            crc32c: crate::crc::combine(crate::crc::crc32c(&header), shard.data_crc, data_len),
        });
        Ok(())
    }

    /// Closes the last shard (creating an empty one if nothing was written: a pack always has a
    /// shard) and returns every shard's record.
    pub fn finish(mut self) -> Result<Vec<ShardRecord>> {
        if self.current.is_none() && self.written.is_empty() && self.filled.is_empty() {
            self.open_next()?;
        }
        self.close_filled(true)?;
        self.close_current()?;
        Ok(self.written)
    }
}

/// A test hook: with `DATASET_PACKER_FAIL_AFTER_ROWS=N` in the environment, every writer fails
/// once it has been handed more than N rows, so tests can make pack, merge or shuffle die
/// midway and check that nothing is published and nothing is deleted.
mod fault_injection {
    use std::sync::OnceLock;

    static LIMIT: OnceLock<Option<u64>> = OnceLock::new();

    pub fn check(rows_after_write: u64) -> crate::Result<()> {
        use crate::error::fail;
        let limit = LIMIT.get_or_init(|| {
            std::env::var("DATASET_PACKER_FAIL_AFTER_ROWS")
                .ok()?
                .parse()
                .ok()
        });
        match limit {
            Some(n) if rows_after_write > *n => {
                fail!(
                    Io,
                    "injected failure after {n} rows (DATASET_PACKER_FAIL_AFTER_ROWS)"
                )
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_rows_across_shards_and_records_them() {
        let t = tempfile::tempdir().unwrap();
        let mut w = ShardWriter::new(t.path(), Some(3));
        let rows: Vec<u8> = (0..7u8).flat_map(|i| [i; ROW_BYTES]).collect();
        assert_eq!(
            w.position(),
            RowLocation {
                shard: 0,
                row_offset: 0,
                global_row: 0
            }
        );
        w.write_rows(&rows[..2 * ROW_BYTES]).unwrap();
        w.write_rows(&rows[2 * ROW_BYTES..3 * ROW_BYTES]).unwrap();
        assert_eq!(
            w.position(),
            RowLocation {
                shard: 1,
                row_offset: 0,
                global_row: 3
            }
        );
        w.write_rows(&rows[3 * ROW_BYTES..]).unwrap();
        let recs = w.finish().unwrap();
        assert_eq!(recs.iter().map(|r| r.rows).collect::<Vec<_>>(), [3, 3, 1]);
        for r in &recs {
            let bytes = std::fs::read(t.path().join(&r.file_name)).unwrap();
            assert_eq!(bytes.len() as u64, r.bytes);
            assert_eq!(crate::crc::crc32c(&bytes), r.crc32c);
            assert_eq!(npy::parse_header(&bytes).unwrap().rows, r.rows);
        }
        assert_eq!(recs[2].file_name, "steps-00002.npy");
    }

    #[test]
    fn a_given_crc_is_used_whole_and_recomputed_across_a_shard_boundary() {
        let t = tempfile::tempdir().unwrap();
        let mut w = ShardWriter::new(t.path(), Some(4));
        let rows: Vec<u8> = (0..10u8).flat_map(|i| [i; ROW_BYTES]).collect();
        let (first, rest) = rows.split_at(3 * ROW_BYTES);
        w.write_rows_with_crc(first, crate::crc::crc32c(first))
            .unwrap();
        // 7 rows: 1 completes shard 0, 4 fill shard 1, 2 start shard 2.
        w.write_rows_with_crc(rest, crate::crc::crc32c(rest))
            .unwrap();
        let recs = w.finish().unwrap();
        assert_eq!(recs.iter().map(|r| r.rows).collect::<Vec<_>>(), [4, 4, 2]);
        for r in &recs {
            let bytes = std::fs::read(t.path().join(&r.file_name)).unwrap();
            assert_eq!(crate::crc::crc32c(&bytes), r.crc32c, "{}", r.file_name);
        }
    }

    /// The files and records of `rows` written in `cuts` pieces by `write_rows`, and placed
    /// then written by other threads in reverse order: they must be the same.
    #[test]
    fn placed_rows_written_out_of_order_give_the_same_files_as_written_rows() {
        let rows: Vec<u8> = (0..23u8).flat_map(|i| [i; ROW_BYTES]).collect();
        let cuts = [0, 2, 3, 9, 10, 17, 23].map(|r| r * ROW_BYTES);
        let pieces: Vec<&[u8]> = cuts.windows(2).map(|w| &rows[w[0]..w[1]]).collect();
        for shard_rows in [None, Some(4), Some(5), Some(100)] {
            let written = tempfile::tempdir().unwrap();
            let mut w = ShardWriter::new(written.path(), shard_rows);
            // A first piece written the usual way (as an update's carried rows are).
            w.write_rows(pieces[0]).unwrap();
            for p in &pieces[1..] {
                w.write_rows(p).unwrap();
            }
            let expected = w.finish().unwrap();

            let placed = tempfile::tempdir().unwrap();
            let mut w = ShardWriter::new(placed.path(), shard_rows);
            w.write_rows(pieces[0]).unwrap();
            let mut todo = Vec::new();
            for p in &pieces[1..] {
                let crc = crate::crc::crc32c(p);
                todo.push((*p, w.place_rows(p, crc).unwrap()));
            }
            std::thread::scope(|scope| {
                for (bytes, placements) in todo.into_iter().rev() {
                    scope.spawn(move || {
                        for placement in placements.into_iter().rev() {
                            placement.write(bytes);
                        }
                    });
                }
            });
            let got = w.finish().unwrap();
            assert_eq!(got, expected, "shard_rows {shard_rows:?}");
            for r in &got {
                let a = std::fs::read(written.path().join(&r.file_name)).unwrap();
                let b = std::fs::read(placed.path().join(&r.file_name)).unwrap();
                assert_eq!(a, b, "{} (shard_rows {shard_rows:?})", r.file_name);
                assert_eq!(crate::crc::crc32c(&b), r.crc32c);
            }
        }
    }

    #[test]
    fn a_placement_never_written_fails_the_writer() {
        let t = tempfile::tempdir().unwrap();
        let mut w = ShardWriter::new(t.path(), Some(4));
        let rows: Vec<u8> = (0..6u8).flat_map(|i| [i; ROW_BYTES]).collect();
        let placements = w.place_rows(&rows, crate::crc::crc32c(&rows)).unwrap();
        assert_eq!(placements.len(), 2, "6 rows in shards of 4: two pieces");
        drop(placements);
        let err = w.finish().unwrap_err().to_string();
        assert!(err.contains("never written"), "{err}");
    }

    #[test]
    fn rows_cannot_be_written_after_rows_were_placed_in_the_same_shard() {
        let t = tempfile::tempdir().unwrap();
        let mut w = ShardWriter::new(t.path(), None);
        let rows = vec![7u8; 2 * ROW_BYTES];
        for p in w.place_rows(&rows, crate::crc::crc32c(&rows)).unwrap() {
            p.write(&rows);
        }
        let err = w.write_rows(&rows).unwrap_err().to_string();
        assert!(err.contains("after rows placed"), "{err}");
    }

    #[test]
    fn only_whole_pages_of_zeros_are_left_unwritten() {
        // 3 pages and a bit, at an offset 100 bytes before a page boundary: a partial head,
        // a zero page, a page with one byte set, a zero page, a partial zero tail.
        let mut bytes = vec![0u8; 100 + 3 * PAGE + 50];
        bytes[100 + PAGE + 7] = 1;
        let offset = 5 * PAGE as u64 - 100;
        assert_eq!(
            pieces_to_write(&bytes, offset),
            [
                (0, 100),
                (100 + PAGE, 100 + 2 * PAGE),
                (100 + 3 * PAGE, 100 + 3 * PAGE + 50)
            ]
        );
        // Data is written whole, in pieces of at most WRITE_PIECE bytes.
        let data = vec![7u8; WRITE_PIECE + 3 * PAGE];
        assert_eq!(
            pieces_to_write(&data, 0),
            [(0, WRITE_PIECE), (WRITE_PIECE, WRITE_PIECE + 3 * PAGE)]
        );
        assert!(is_zero(&[0; 200]) && !is_zero(&[0, 0, 9]) && is_zero(&[]));
    }

    #[test]
    fn placed_rows_with_pages_of_zeros_read_back_exactly() {
        for shard_rows in [Some(3000), None] {
            place_zeros_and_data(shard_rows, false);
        }
    }

    #[test]
    fn prefaulted_placements_give_the_same_files() {
        for shard_rows in [Some(3000), None] {
            place_zeros_and_data(shard_rows, true);
        }
    }

    /// Runs of rows (data, zeros in whole pages, data, zeros at the very end), placed, then
    /// written in reverse order as workers may (prefaulted first with `prefault`), split
    /// across shards of `shard_rows`: the files hold exactly the rows, and their records the
    /// right sizes and CRCs.
    fn place_zeros_and_data(shard_rows: Option<u64>, prefault: bool) {
        let t = tempfile::tempdir().unwrap();
        let mut w = ShardWriter::new(t.path(), shard_rows);
        w.prefault_placements(prefault);
        let run = |fill: u8, n: usize| vec![fill; n * ROW_BYTES];
        let runs = [
            run(3, 700),
            run(0, 1500),
            run(5, 10),
            run(0, 2000),
            run(0, 900),
        ];
        let mut placements = Vec::new();
        for r in &runs {
            placements.push(w.place_rows(r, crate::crc::crc32c(r)).unwrap());
            // A prefaulted file is made long enough for its placements when they are placed
            // (the mapping's page faults cannot go past its end).
            let open = w.current.as_ref().unwrap();
            let len = std::fs::metadata(&open.path).unwrap().len();
            assert_eq!(
                len >= open.end_offset(),
                prefault,
                "{len} {}",
                open.end_offset()
            );
        }
        for (r, placed) in runs.iter().zip(placements).rev() {
            for p in placed {
                p.prefault(r);
                p.write(r);
            }
        }
        let recs = w.finish().unwrap();
        let all: Vec<u8> = runs.concat();
        let mut at = 0;
        for r in &recs {
            let bytes = std::fs::read(t.path().join(&r.file_name)).unwrap();
            assert_eq!(bytes.len() as u64, r.bytes, "{}", r.file_name);
            assert_eq!(crate::crc::crc32c(&bytes), r.crc32c, "{}", r.file_name);
            let data = &bytes[npy::HEADER_LEN..];
            assert_eq!(data, &all[at..at + data.len()], "{}", r.file_name);
            at += data.len();
        }
        assert_eq!(at, all.len());
    }

    #[test]
    fn reserved_space_is_given_back_when_fewer_rows_come() {
        let t = tempfile::tempdir().unwrap();
        let mut w = ShardWriter::new(t.path(), Some(4));
        w.expect_rows(10);
        let rows: Vec<u8> = (0..6u8).flat_map(|i| [i; ROW_BYTES]).collect();
        w.write_rows(&rows).unwrap();
        let recs = w.finish().unwrap();
        assert_eq!(recs.iter().map(|r| r.rows).collect::<Vec<_>>(), [4, 2]);
        for r in &recs {
            let bytes = std::fs::read(t.path().join(&r.file_name)).unwrap();
            assert_eq!(bytes.len() as u64, r.bytes, "{}", r.file_name);
            assert_eq!(bytes.len(), npy::HEADER_LEN + r.rows as usize * ROW_BYTES);
            assert_eq!(crate::crc::crc32c(&bytes), r.crc32c);
        }
    }

    #[test]
    fn an_empty_pack_still_has_one_shard() {
        let t = tempfile::tempdir().unwrap();
        let recs = ShardWriter::new(t.path(), None).finish().unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].file_name, "steps.npy");
        assert_eq!(recs[0].rows, 0);
    }
}
