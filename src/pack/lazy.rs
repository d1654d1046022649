//! A file of a remote pack's view filled block by block as it is read: what lets a reader of a
//! pack in object storage fetch only the bytes it needs.
//!
//! The view holds the file at its full size with nothing in it but its npy header (fetched
//! at open: a 4 KiB read, more only for a longer header); every read of the pack's rows goes
//! through [`LazyFile::ensure`] first (the shard and companion readers look the file up by
//! its path, [`for_path`]), which fetches the blocks the range touches through the node's
//! cache ([`Cache::fetch_block`], each checked against the CRC-32C `metadata.db` records for
//! it) and writes them into the view file. A block once filled stays while the pack is open, unless a reader streaming
//! through a pack larger than its cache gives the file's blocks back once it is past them
//! ([`LazyFile::release`]; no map of the file may be alive then).
//!
//! The header read at open is not checked against a block CRC (a block is 1 MiB): it is
//! checked against the file's recorded size, and when a block that overlaps it is filled the
//! checked bytes must equal it, else the read fails as corrupt. Only the header's bytes are
//! kept in memory, and each file costs one small read at open.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::error::{Context, Error, ErrorKind, Result};
use crate::format::blocks::FileBlocks;
use crate::store::{Cache, Url};

/// Blocks fetched at once: enough requests in flight to fill a link to a store.
pub(crate) const PARALLEL_BLOCKS: usize = 8;

/// Headers read at once when a pack is opened: each is a few KiB, so their time is the
/// store's latency, and a pack of thousands of shards needs many in flight (1,600 shards 25 ms
/// away: 11 s with 8, 1.3 s with 64).
pub(crate) const PARALLEL_HEADERS: usize = 64;

/// Bytes of a file's start read at open, enough for an npy header (this tool writes 128 bytes,
/// NumPy a few KiB at most for a structured dtype with many fields); a longer header is read
/// by a second request.
const HEAD_BYTES: u64 = 4 << 10;

/// A view file filled on demand.
#[derive(Debug)]
pub(crate) struct LazyFile {
    path: PathBuf,
    url: Url,
    blocks: FileBlocks,
    cache: Cache,
    out: File,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    filled: Vec<bool>,
    /// The unchecked npy header written at open, compared with the blocks it overlaps when
    /// they are filled.
    head: Vec<u8>,
}

impl LazyFile {
    /// Makes the view file `path` of the object at `url` (`blocks` its recorded checksums):
    /// full size, its head fetched, every block still to fetch.
    pub fn create(path: &Path, url: Url, blocks: FileBlocks, cache: Cache) -> Result<LazyFile> {
        let out = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        out.set_len(blocks.bytes)
            .with_context(|| format!("sizing {}", path.display()))?;
        let head = read_header(&cache, &url, blocks.bytes)?;
        out.write_all_at(&head, 0)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(LazyFile {
            path: path.to_path_buf(),
            url,
            state: Mutex::new(State {
                filled: vec![false; blocks.count()],
                head,
            }),
            blocks,
            cache,
            out,
        })
    }

    /// Makes sure bytes `start..start + len` of the file are in the view: fetches the blocks
    /// of them not yet there (several at once), checked, and writes them in.
    pub fn ensure(&self, start: u64, len: u64) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let missing: Vec<usize> = self
            .blocks
            .covering(start, start + len)
            .filter(|&b| !state.filled[b])
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        // Each block written as it arrives: memory holds the blocks in flight, not the range.
        // Each block in flight is pinned in the cache: at most half of it.
        let threads = (self.cache.limit() / (2 * self.blocks.block_bytes.max(1)))
            .clamp(1, PARALLEL_BLOCKS as u64) as usize;
        let State { filled, head } = &mut *state;
        let head: &[u8] = head;
        crate::ordered::ordered_try_map(
            &missing,
            threads,
            threads,
            || (),
            |_, &b| self.fill_block(b, head),
            |i, written| {
                written?;
                filled[missing[i]] = true;
                Ok(())
            },
        )
    }

    /// Gives back the view file's disk space (its data past the head fetched at open) and
    /// marks every block to fetch again: for a reader that streams through a pack larger
    /// than its cache, once it is done with this file. The caller makes sure no map of the
    /// file is alive: a map would read the holes as zeros.
    pub fn release(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let keep = state.head.len() as u64;
        if keep < self.blocks.bytes {
            use std::os::fd::AsRawFd;
            // SAFETY: a valid open descriptor; punching a hole only frees the range.
            let rc = unsafe {
                libc::fallocate(
                    self.out.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    keep as libc::off_t,
                    (self.blocks.bytes - keep) as libc::off_t,
                )
            };
            if rc != 0 {
                // Filesystems without hole punching keep the bytes: only the space is lost.
                log::debug!("{}: the space could not be given back", self.path.display());
            }
        }
        state.filled.iter_mut().for_each(|f| *f = false);
    }

    /// Checks every byte of the file against its recorded block CRCs, a few blocks at a
    /// time, giving each back once checked ([`LazyFile::release`]): what `validate` does for
    /// a file it does not otherwise read, in bounded space.
    pub fn check_every_block(&self) -> Result<()> {
        let all: Vec<usize> = (0..self.blocks.count()).collect();
        for batch in all.chunks(PARALLEL_BLOCKS) {
            let (start, _) = self.blocks.range(batch[0]);
            let (last, len) = self.blocks.range(*batch.last().expect("a batch"));
            self.ensure(start, last + len - start)?;
            self.release();
        }
        Ok(())
    }

    /// Fetches block `b` and writes it into the view file (what of it `head`, the unchecked
    /// bytes written at open, holds compared with them).
    fn fill_block(&self, b: usize, head: &[u8]) -> Result<()> {
        let bytes = self.fetch_block(b)?;
        let (offset, _) = self.blocks.range(b);
        if !agrees_with_head(head, offset, &bytes) {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!(
                    "{}: its first bytes changed between two reads (the header read at open \
                     is not the one its checked first block holds)",
                    self.url
                ),
            ));
        }
        self.out
            .write_all_at(&bytes, offset)
            .with_context(|| format!("writing {}", self.path.display()))
    }

    fn fetch_block(&self, b: usize) -> Result<Vec<u8>> {
        let (offset, len) = self.blocks.range(b);
        let entry = self
            .cache
            .fetch_block(&self.url, offset, len, self.blocks.crcs[b])?;
        std::fs::read(entry.path()).with_context(|| format!("reading {}", entry.path().display()))
    }
}

/// Whether `bytes`, read at `offset` of a file, hold what `head` (the file's first bytes, read
/// unchecked at open) holds where the two overlap.
fn agrees_with_head(head: &[u8], offset: u64, bytes: &[u8]) -> bool {
    let Ok(start) = usize::try_from(offset) else {
        return true;
    };
    if start >= head.len() {
        return true;
    }
    let overlap = (head.len() - start).min(bytes.len());
    bytes[..overlap] == head[start..start + overlap]
}

/// The npy header of the object at `url` (of `bytes` bytes), read by one small request (two
/// for a header longer than it) and checked ([`check_head`]): only the header's bytes.
fn read_header(cache: &Cache, url: &Url, bytes: u64) -> Result<Vec<u8>> {
    use crate::format::npy;
    if bytes == 0 {
        return Ok(Vec::new());
    }
    let mut head = cache.fetch_range(url, 0, HEAD_BYTES.min(bytes))?;
    let size = npy::header_size(&head[..head.len().min(12)]).ok();
    if let Some(size) = size.filter(|&s| s > head.len() && s as u64 <= bytes) {
        let rest = cache.fetch_range(url, head.len() as u64, (size - head.len()) as u64)?;
        head.extend_from_slice(&rest);
    }
    check_head(url, &head, bytes)?;
    head.truncate(size.unwrap_or(head.len()));
    Ok(head)
}

/// That `head`, the first bytes of the object at `url`, starts with the `.npy` header of an
/// array of `bytes` bytes: the header is read before its block is checked, so a damaged one
/// is refused here, naming the object.
fn check_head(url: &Url, head: &[u8], bytes: u64) -> Result<()> {
    use crate::format::npy;
    let parsed = npy::header_size(&head[..head.len().min(12)])
        .ok()
        .filter(|&size| size <= head.len())
        .and_then(|size| npy::parse_array_header(&head[..size]).ok());
    let fits = parsed.as_ref().is_some_and(|h| {
        h.row_bytes()
            .and_then(|r| r.checked_mul(h.rows()))
            .and_then(|data| data.checked_add(h.data_offset as u64))
            == Some(bytes)
    });
    if !fits {
        return Err(Error::new(
            ErrorKind::Corrupt,
            format!(
                "{url}: its first bytes are not the .npy header of an array of {bytes} bytes, \
                 as metadata.db records it (a damaged or replaced object)"
            ),
        ));
    }
    Ok(())
}

/// The lazy files of the views alive in this process, by their path in the view.
fn registry() -> &'static Mutex<HashMap<PathBuf, Weak<LazyFile>>> {
    static FILES: OnceLock<Mutex<HashMap<PathBuf, Weak<LazyFile>>>> = OnceLock::new();
    FILES.get_or_init(Mutex::default)
}

/// Registers `file` so that readers of its path find it; it stays found while it lives.
pub(crate) fn register(file: &Arc<LazyFile>) {
    let mut files = registry().lock().unwrap_or_else(|e| e.into_inner());
    files.retain(|_, f| f.strong_count() > 0);
    files.insert(file.path.clone(), Arc::downgrade(file));
}

/// The lazy file at `path`, when it is one (a remote pack's file read block by block).
pub(crate) fn for_path(path: &Path) -> Option<Arc<LazyFile>> {
    let files = registry().lock().unwrap_or_else(|e| e.into_inner());
    files.get(path).and_then(Weak::upgrade)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_compared_with_the_head_where_they_overlap() {
        let head: Vec<u8> = (0..100u8).collect();
        // A block inside the head, one across its end, one past it, one larger than it.
        assert!(agrees_with_head(&head, 10, &head[10..30]));
        assert!(!agrees_with_head(&head, 10, &head[11..31]));
        let mut across = head[90..].to_vec();
        across.extend([7; 50]);
        assert!(agrees_with_head(&head, 90, &across));
        across[3] ^= 1;
        assert!(!agrees_with_head(&head, 90, &across));
        assert!(agrees_with_head(&head, 100, &[1, 2, 3]));
        assert!(agrees_with_head(&head, 9_437_184, &[0; 64]));
        let mut larger = head.clone();
        larger.extend([0; 1000]);
        assert!(agrees_with_head(&head, 0, &larger));
        assert!(agrees_with_head(&[], 0, &larger));
    }
}
