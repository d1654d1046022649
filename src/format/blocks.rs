//! Block checksums: the CRC-32C of each aligned block of a pack file, recorded in
//! `metadata.db`'s `file_blocks` table, so that a reader of a remote pack can fetch and check
//! any byte range without the whole file.
//!
//! A file of `bytes` bytes is cut into blocks of `block_bytes` (the last one shorter); its
//! `file_blocks` row holds, for the file's name and whole-file CRC-32C (`crc32c`, as
//! `shards`/`companions` record it: a file replaced under its name is another row), the block
//! size and the blocks' CRC-32Cs as one BLOB of little-endian u32s. The blocks' CRCs combine
//! into the file's, which is how a writer checks them against the CRC it recorded while
//! writing, and how a reader checks a row before trusting it.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::{Context, Error, ErrorKind, Result};

/// The block size this tool's writers record: 1 MiB. Small enough that one game (about
/// 1 MB of rows at 20,000 steps) or a few scattered rows fetch a few MiB, not a shard; a
/// reader merges neighbouring blocks into one request, so the size of a transfer is not tied
/// to it. A 150 GB pack records 150,000 CRCs: 600 KB in `metadata.db`.
pub const BLOCK_BYTES: u64 = 1 << 20;

/// The block size writers record: [`BLOCK_BYTES`], unless `DATASET_PACKER_BLOCK_BYTES` gives
/// another (a number of bytes, at least 4096: for tests on small packs and for benches of
/// other sizes).
///
/// ```
/// assert!(dataset_packer::format::blocks::block_bytes() >= 4096);
/// ```
pub fn block_bytes() -> u64 {
    std::env::var("DATASET_PACKER_BLOCK_BYTES")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&n| n >= 4096)
        .unwrap_or(BLOCK_BYTES)
}

/// The `file_blocks` table (created by [`crate::format::metadata::MetadataWriter`]).
pub const TABLE: &str = "file_blocks";

/// One file's block checksums.
///
/// ```
/// use dataset_packer::format::blocks::FileBlocks;
///
/// let data = vec![7u8; 2_500_000];
/// let blocks = FileBlocks::of_bytes(&data, 1 << 20);
/// assert_eq!(blocks.count(), 3);
/// assert_eq!(blocks.range(2), (2 << 20, 2_500_000 - (2 << 20)));
/// // The blocks' CRCs combine into the whole file's.
/// assert_eq!(blocks.whole_crc(), FileBlocks::of_bytes(&data, 1 << 30).crcs[0]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileBlocks {
    /// The file's size.
    pub bytes: u64,
    /// The size of every block but the last.
    pub block_bytes: u64,
    /// Each block's CRC-32C, in file order.
    pub crcs: Vec<u32>,
}

impl FileBlocks {
    /// The block checksums of `data`, in blocks of `block_bytes`.
    pub fn of_bytes(data: &[u8], block_bytes: u64) -> FileBlocks {
        let crcs = data
            .chunks(block_bytes.max(1) as usize)
            .map(crate::crc::crc32c)
            .collect();
        FileBlocks {
            bytes: data.len() as u64,
            block_bytes,
            crcs,
        }
    }

    /// The block checksums of the open `file` (`path` names it in messages), read a block at
    /// a time.
    pub fn of_file(file: &File, path: &Path, block_bytes: u64) -> Result<FileBlocks> {
        let bytes = file
            .metadata()
            .with_context(|| format!("reading the size of {}", path.display()))?
            .len();
        let mut buf = vec![0u8; block_bytes as usize];
        let mut crcs = Vec::with_capacity(bytes.div_ceil(block_bytes) as usize);
        let mut offset = 0;
        while offset < bytes {
            let len = block_bytes.min(bytes - offset) as usize;
            file.read_exact_at(&mut buf[..len], offset)
                .with_context(|| format!("reading {}", path.display()))?;
            crcs.push(crate::crc::crc32c(&buf[..len]));
            offset += len as u64;
        }
        Ok(FileBlocks {
            bytes,
            block_bytes,
            crcs,
        })
    }

    /// The blocks as `file_blocks` records them, checked: `file` names the file in messages.
    pub fn from_record(file: &str, bytes: u64, block_bytes: i64, blob: &[u8]) -> Result<Self> {
        let corrupt = |what: &str| {
            Error::new(
                ErrorKind::Corrupt,
                format!("{TABLE} of {file}: {what} (metadata.db is damaged)"),
            )
        };
        if block_bytes <= 0 {
            return Err(corrupt(&format!("a block size of {block_bytes}")));
        }
        let block_bytes = block_bytes as u64;
        let count = bytes.div_ceil(block_bytes);
        if blob.len() as u64 != 4 * count {
            return Err(corrupt(&format!(
                "{} bytes of CRCs for {count} blocks of {block_bytes} bytes in {bytes}",
                blob.len()
            )));
        }
        let crcs = blob
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(FileBlocks {
            bytes,
            block_bytes,
            crcs,
        })
    }

    /// The CRCs as the BLOB `file_blocks` records.
    pub fn to_blob(&self) -> Vec<u8> {
        self.crcs.iter().flat_map(|c| c.to_le_bytes()).collect()
    }

    /// How many blocks the file has.
    pub fn count(&self) -> usize {
        self.crcs.len()
    }

    /// Block `index`'s (offset, length) in the file.
    pub fn range(&self, index: usize) -> (u64, u64) {
        let start = index as u64 * self.block_bytes;
        (start, self.block_bytes.min(self.bytes - start))
    }

    /// The blocks that hold bytes `start..end` of the file (empty for an empty range).
    pub fn covering(&self, start: u64, end: u64) -> std::ops::Range<usize> {
        if start >= end {
            return 0..0;
        }
        let first = (start / self.block_bytes) as usize;
        let last = (end.min(self.bytes).div_ceil(self.block_bytes)) as usize;
        first..last.max(first)
    }

    /// Whether the blocks' CRCs combine into `crc32c`, a file's CRC-32C as `metadata.db`
    /// records it (8 hex digits).
    pub fn combine_into(&self, crc32c: &str) -> bool {
        format!("{:08x}", self.whole_crc()) == crc32c
    }

    /// The whole file's CRC-32C, combined from its blocks'.
    pub fn whole_crc(&self) -> u32 {
        (0..self.count()).fold(0, |crc, i| {
            crate::crc::combine(crc, self.crcs[i], self.range(i).1 as usize)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_combine_into_the_file_crc_at_every_size() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
        for block in [1, 7, 4096, 9_999, 10_000, 10_001] {
            let blocks = FileBlocks::of_bytes(&data, block);
            assert_eq!(
                blocks.whole_crc(),
                crate::crc::crc32c(&data),
                "block {block}"
            );
            let back =
                FileBlocks::from_record("f", data.len() as u64, block as i64, &blocks.to_blob())
                    .unwrap();
            assert_eq!(back, blocks);
        }
        assert_eq!(FileBlocks::of_bytes(&[], 16).count(), 0);
        assert_eq!(
            FileBlocks::of_bytes(&[], 16).whole_crc(),
            crate::crc::crc32c(&[])
        );
    }

    #[test]
    fn covering_blocks_are_the_ones_a_range_touches() {
        let blocks = FileBlocks::of_bytes(&[0u8; 100], 30);
        assert_eq!(blocks.covering(0, 100), 0..4);
        assert_eq!(blocks.covering(29, 31), 0..2);
        assert_eq!(blocks.covering(30, 60), 1..2);
        assert_eq!(blocks.covering(95, 100), 3..4);
        assert_eq!(blocks.covering(5, 5), 0..0);
        assert_eq!(blocks.range(3), (90, 10));
    }

    #[test]
    fn a_damaged_record_is_refused() {
        let e = FileBlocks::from_record("steps-00000.npy", 100, 30, &[0; 12]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corrupt);
        assert!(e.to_string().contains("steps-00000.npy"), "{e}");
        assert!(FileBlocks::from_record("f", 100, 0, &[]).is_err());
    }
}
