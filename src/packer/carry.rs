//! What `pack --update` carries from the pack into its staged copy: the last, partial shard
//! (and its file of the `search` family) copied row for row and checked against the checksum
//! the pack recorded, so a damaged shard is never extended; and the `search` family's writer,
//! continuing after the files that stay in place.

use std::path::Path;

use super::existing::{Existing, as_recorded};
use crate::error::{Result, fail};
use crate::format::metadata::{self, ShardRecord};
use crate::format::search;
use crate::pack::families;
use crate::pack::shard_writer::{FileLayout, ShardWriter};
use crate::pack::shards::Shard;

/// Rows copied per read when the last shard is rewritten (≈ 1 MiB).
const COPY_ROWS: u64 = 21_845;

/// Copies the rows of the shard being rewritten into the writer, checking them against the
/// checksum the pack recorded (a damaged shard is never extended).
pub(super) fn copy_shard(
    shard: &Shard,
    record: &ShardRecord,
    writer: &mut ShardWriter,
) -> Result<()> {
    let file = shard.open()?;
    let data_len = (shard.header.rows as usize) * shard.row_bytes();
    copy_checked(
        shard.header.rows,
        &shard.path,
        record,
        writer,
        |start, n, buf| file.read_raw_into(start, n, buf),
        |data_crc| Ok(shard.file_crc(data_crc, data_len)?),
    )
}

/// Copies `rows` rows of the file at `path` into `writer` (`read` gives rows `start..start+n`),
/// and checks the file's checksum (`file_crc` of the data's) against its record.
fn copy_checked(
    rows: u64,
    path: &Path,
    record: &ShardRecord,
    writer: &mut ShardWriter,
    read: impl Fn(u64, u64, &mut Vec<u8>) -> Result<()>,
    file_crc: impl Fn(u32) -> Result<u32>,
) -> Result<()> {
    let mut buf = Vec::new();
    let mut data_crc = 0u32;
    let mut done = 0u64;
    while done < rows {
        let n = (rows - done).min(COPY_ROWS);
        read(done, n, &mut buf)?;
        let crc = crate::crc::crc32c(&buf);
        data_crc = crate::crc::combine(data_crc, crc, buf.len());
        writer.write_rows_with_crc(&buf, crc)?;
        done += n;
    }
    let crc = file_crc(data_crc)?;
    if crc != record.crc32c {
        fail!(
            Corrupt,
            "{} does not match its recorded checksum (crc32c recorded {:08x}, computed {crc:08x}); nothing was written; run `dataset-packer validate`",
            path.display(),
            record.crc32c
        );
    }
    Ok(())
}

/// The writer of the `search` family, continuing the pack's: its files before shard `kept` stay
/// in place (their records carry over), and the file of the rewritten last shard is copied
/// into staging first, checked against its recorded checksum.
pub(super) fn search_writer(
    existing: &Existing,
    staging: &Path,
    kept: usize,
    rewritten: Option<usize>,
) -> Result<ShardWriter> {
    let dir = existing.dir.display();
    let scan = existing.opened.families();
    if let Some((_, problem)) = scan.problems.iter().find(|(n, _)| n == search::FAMILY) {
        fail!(
            Corrupt,
            "{dir}: the search family does not line up with the shards: {problem}; run `dataset-packer validate {dir}`"
        );
    }
    let family = scan
        .family(search::FAMILY)
        .expect("checked: the pack has the family");
    if !family.holds_search_stats() {
        fail!(
            Unsupported,
            "{dir}: its search family holds {}, not the search statistics this version writes ({}); an update keeping search statistics cannot extend it",
            family.describe(),
            search::DESCR
        );
    }
    let mut records: Vec<ShardRecord> = metadata::read_companions(&existing.opened.conn)?
        .into_iter()
        .filter(|r| r.name == search::FAMILY)
        .map(|r| ShardRecord {
            shard: r.shard,
            file_name: r.file_name,
            rows: r.rows,
            bytes: r.bytes,
            crc32c: r.crc32c,
        })
        .collect();
    records.sort_by_key(|r| r.shard);
    let on_disk = family
        .files
        .iter()
        .map(|f| (f.file_name.as_str(), f.header.rows()));
    if !as_recorded(on_disk, &records) {
        fail!(
            Corrupt,
            "{dir}: the search files do not match the companions table of metadata.db; run `dataset-packer validate {dir}`"
        );
    }
    let mut writer = ShardWriter::after_with_layout(
        staging,
        existing.shard_rows,
        FileLayout::search(),
        records[..kept].to_vec(),
    );
    if let Some(last) = rewritten {
        copy_companion_file(family, last, &records[last], &mut writer)?;
    }
    Ok(writer)
}

/// Copies file `shard` of a companion family into `writer`, checked against its record.
fn copy_companion_file(
    family: &families::Family,
    shard: usize,
    record: &ShardRecord,
    writer: &mut ShardWriter,
) -> Result<()> {
    let file = family.open(shard)?;
    let f = &family.files[shard];
    copy_checked(
        f.header.rows(),
        &f.path,
        record,
        writer,
        |start, n, buf| file.read_rows(start, n, buf),
        |data_crc| file.file_crc(data_crc),
    )
}
