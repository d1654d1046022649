//! Companion arrays: arrays other tools keep next to a pack, aligned row by row with its shards
//! (`embeddings-00000.npy` beside `steps-00000.npy`, or `embeddings.npy` beside a single
//! `steps.npy`). A family `NAME-NNNNN.npy`, NAME matching `[a-z][a-z0-9_]*` and not `steps`, is
//! a companion when its files pair one to one with the shards and each file's first axis
//! equals its shard's row count, with one dtype and trailing shape in every file. They are
//! recognised in place by that rule (the tools that write them know nothing of this one);
//! this module finds them, says precisely what does not line up, and knows what
//! `metadata.db` records of them. The commands that move rows move their companion rows too.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Context, Result, err};

use crate::format::metadata::CompanionRecord;
use crate::format::npy::{self, ArrayHeader};
use crate::format::search;
use crate::pack::files::parse_file_name;
use crate::pack::shard_writer::{FileLayout, file_name};
use crate::pack::shards::{HeldFile, Shard};

/// One file of a family.
#[derive(Debug, Clone)]
pub struct CompanionFile {
    pub file_name: String,
    /// Names the file in messages; it is read through `file`, opened with the pack (as
    /// [`Shard::file`]).
    pub path: PathBuf,
    pub file: Arc<File>,
    pub header: ArrayHeader,
}

/// A companion family that lines up with the pack.
#[derive(Debug, Clone)]
pub struct Family {
    pub name: String,
    /// The dtype's `descr`, as the files' headers have it.
    pub descr: String,
    pub trailing: Vec<u64>,
    pub row_bytes: usize,
    /// One per shard, in shard order.
    pub files: Vec<CompanionFile>,
}

impl Family {
    /// How a writer writes files of this family.
    pub fn layout(&self) -> FileLayout {
        FileLayout {
            prefix: self.name.clone(),
            descr: self.descr.clone(),
            trailing: self.trailing.clone(),
            row_bytes: self.row_bytes,
        }
    }

    /// Whether this is the `search` family of `pack --search-stats` (its name and dtype), not
    /// a family of that name from another tool.
    pub fn holds_search_stats(&self) -> bool {
        self.name == search::FAMILY && self.layout() == FileLayout::search()
    }

    /// The dtype of the family's items (its first file's).
    pub fn header_dtype(&self) -> &crate::format::dtype::Dtype {
        &self.files[0].header.dtype
    }

    /// Bytes on disk, headers included.
    pub fn bytes(&self) -> u64 {
        self.files
            .iter()
            .map(|f| f.header.data_offset as u64 + f.header.rows() * self.row_bytes as u64)
            .sum()
    }

    /// The dtype and trailing shape, for messages and `stats`: `'<f4' (64,)`.
    pub fn describe(&self) -> String {
        describe(&self.descr, &self.trailing)
    }

    /// Whether another family holds rows of the same dtype and trailing shape.
    pub fn same_kind(&self, other: &Family) -> bool {
        self.descr == other.descr && self.trailing == other.trailing
    }

    /// For a remote pack read block by block, gives back the space file `shard` of the
    /// family takes in the view (see [`crate::pack::lazy::LazyFile::release`]).
    pub(crate) fn release(&self, shard: usize) {
        if let Some(lazy) = self
            .files
            .get(shard)
            .and_then(|f| crate::pack::lazy::for_path(&f.path))
        {
            lazy.release();
        }
    }

    /// Opens file `shard` for reading rows with [`OpenCompanion::read_rows`].
    pub fn open(&self, shard: usize) -> Result<OpenCompanion<'_>> {
        let f = &self.files[shard];
        Ok(OpenCompanion {
            file: f,
            row_bytes: self.row_bytes as u64,
            handle: &f.file,
            lazy: crate::pack::lazy::for_path(&f.path),
        })
    }
}

/// `'<f4' (64,)` or `'<f4'` for a dtype and trailing shape.
pub fn describe(descr: &str, trailing: &[u64]) -> String {
    match trailing {
        [] => descr.to_string(),
        [n] => format!("{descr} ({n},)"),
        dims => format!(
            "{descr} ({})",
            dims.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A companion file open for reading row ranges.
pub struct OpenCompanion<'a> {
    pub file: &'a CompanionFile,
    row_bytes: u64,
    handle: &'a File,
    /// For a remote pack's file read block by block, what fills it before a read.
    lazy: Option<std::sync::Arc<crate::pack::lazy::LazyFile>>,
}

impl OpenCompanion<'_> {
    /// Reads rows `start..start + count` into `buf` (replacing its contents).
    pub fn read_rows(&self, start: u64, count: u64, buf: &mut Vec<u8>) -> Result<()> {
        use std::os::unix::fs::FileExt;
        buf.resize((count * self.row_bytes) as usize, 0);
        let offset = self.file.header.data_offset as u64 + start * self.row_bytes;
        if let Some(lazy) = &self.lazy {
            lazy.ensure(offset, buf.len() as u64)?;
        }
        self.handle
            .read_exact_at(buf, offset)
            .with_context(|| format!("reading {}", self.file.path.display()))
    }

    /// The CRC-32C of the whole file, given the CRC of its data (computed while reading it).
    pub fn file_crc(&self, data_crc: u32) -> Result<u32> {
        use std::os::unix::fs::FileExt;
        let mut header = vec![0u8; self.file.header.data_offset];
        self.handle
            .read_exact_at(&mut header, 0)
            .with_context(|| format!("reading {}", self.file.path.display()))?;
        let data_len = (self.file.header.rows() * self.row_bytes) as usize;
        Ok(crate::crc::combine(
            crate::crc::crc32c(&header),
            data_crc,
            data_len,
        ))
    }
}

/// What a pack folder holds besides its shards.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Families that line up with the shards, by name.
    pub families: Vec<Family>,
    /// Families named like companions that do not line up: (name, what is wrong, precisely).
    pub problems: Vec<(String, String)>,
    /// `*.npy` files that are neither shards nor named like companions.
    pub unaccounted: Vec<String>,
    /// Families an earlier version of the pack had and a later one detached (name, the
    /// version that did): their rows of that version are gone, whatever files of that name
    /// (another attachment's) the folder holds now.
    pub gone: Vec<(String, u32)>,
}

impl Scan {
    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.iter().find(|f| f.name == name)
    }
}

/// Finds the companion families of the pack in `dir` whose shards are `shards`.
pub fn scan(dir: &Path, shards: &[Shard]) -> Result<Scan> {
    let mut out = Scan::default();
    let mut groups: BTreeMap<String, Vec<(Option<u32>, String)>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".npy") || name.starts_with("steps") {
            continue; // shards, and stray steps files (the shard listing reports those)
        }
        if !entry.path().is_file() {
            continue;
        }
        match parse_file_name(&name) {
            Some((family, index)) => groups
                .entry(family.to_string())
                .or_default()
                .push((index, name.clone())),
            None => out.unaccounted.push(name),
        }
    }
    out.unaccounted.sort();
    let single = shards.len() == 1 && shards[0].name == "steps.npy";
    for (name, mut files) in groups {
        files.sort();
        match line_up(dir, &name, &files, shards, single) {
            Ok(family) => out.families.push(family),
            Err(problem) => out.problems.push((name, problem)),
        }
    }
    Ok(out)
}

/// Checks one family against the shards; the error says precisely what does not line up.
fn line_up(
    dir: &Path,
    name: &str,
    files: &[(Option<u32>, String)],
    shards: &[Shard],
    single: bool,
) -> Result<Family, String> {
    let expected = |i: usize| file_name(name, (!single).then_some(1), i as u32);
    if single {
        if let Some((_, f)) = files.iter().find(|(i, _)| i.is_some()) {
            return Err(format!(
                "{f}: named for a sharded pack, but the pack is one steps.npy (its companion would be {name}.npy)"
            ));
        }
    } else if let Some((_, f)) = files.iter().find(|(i, _)| i.is_none()) {
        return Err(format!(
            "{f}: named for a pack of one steps.npy, but the pack has shards {} … (its companions would be {name}-00000.npy …)",
            shards.first().map_or("none", |s| s.name.as_str())
        ));
    }
    let index = |i: &Option<u32>| i.unwrap_or(0) as usize;
    if let Some((_, f)) = files.iter().find(|(i, _)| index(i) >= shards.len()) {
        return Err(format!(
            "{name}: {f} has no shard to pair with (the pack has {} shard{})",
            shards.len(),
            if shards.len() == 1 { "" } else { "s" }
        ));
    }
    if let Some((i, s)) = shards
        .iter()
        .enumerate()
        .find(|(i, _)| !files.iter().any(|(j, _)| index(j) == *i))
    {
        return Err(format!(
            "{name}: {} has no {} ({} of {} files)",
            s.name,
            expected(i),
            files.len(),
            shards.len()
        ));
    }
    let mut out: Vec<CompanionFile> = Vec::with_capacity(files.len());
    for ((_, f), shard) in files.iter().zip(shards) {
        let path = dir.join(f);
        let file = crate::pack::snapshot::hold(&path).map_err(|e| format!("{f}: {e}"))?;
        let header = read_open_header(&file).map_err(|e| format!("{f}: {e:#}"))?;
        check_file(f, &file, &header, shard)?;
        if let Some(first) = out.first()
            && (first.header.descr != header.descr || first.header.trailing() != header.trailing())
        {
            return Err(format!(
                "{f}: dtype {}, but {} has {} (every file of a family has one dtype and shape)",
                describe(&header.descr, header.trailing()),
                first.file_name,
                describe(&first.header.descr, first.header.trailing())
            ));
        }
        out.push(CompanionFile {
            file_name: f.clone(),
            path,
            file: Arc::new(file),
            header,
        });
    }
    let first = &out[0].header;
    Ok(Family {
        name: name.to_string(),
        descr: first.descr.clone(),
        trailing: first.trailing().to_vec(),
        row_bytes: first.row_bytes().unwrap_or(0) as usize,
        files: out,
    })
}

/// One file's header against its shard: readable rows, the shard's row count, its size.
fn check_file(f: &str, file: &File, header: &ArrayHeader, shard: &Shard) -> Result<(), String> {
    if header.shape.is_empty() {
        return Err(format!("{f}: a 0-dimensional array has no rows"));
    }
    if header.fortran_order && header.shape.len() > 1 {
        return Err(format!(
            "{f}: Fortran-ordered, so its rows are not contiguous; save it in C order"
        ));
    }
    if header.dtype.has_objects() {
        return Err(format!(
            "{f}: holds Python objects (dtype {}), which are pointers, not data",
            header.descr
        ));
    }
    let row_bytes = header
        .row_bytes()
        .filter(|&b| b > 0 && b <= 1 << 30)
        .ok_or_else(|| format!("{f}: rows of {} are too large or empty", header.descr))?;
    if header.rows() != shard.header.rows {
        return Err(format!(
            "{f}: {} rows, but {} has {}",
            header.rows(),
            shard.name,
            shard.header.rows
        ));
    }
    let want = header
        .rows()
        .checked_mul(row_bytes)
        .and_then(|d| d.checked_add(header.data_offset as u64));
    let len = file.metadata().map_err(|e| format!("{f}: {e}"))?.len();
    if want != Some(len) {
        return Err(format!(
            "{f}: {len} bytes, but its header promises {} ({} rows of {row_bytes} bytes after a {}-byte header)",
            want.map_or("more".into(), |w| w.to_string()),
            header.rows(),
            header.data_offset
        ));
    }
    Ok(())
}

/// Reads and parses the header of the `.npy` file at `path`.
pub fn read_header(path: &Path) -> Result<ArrayHeader> {
    read_open_header(&File::open(path).context("cannot open")?)
}

/// Reads and parses the header of `file`, a `.npy` file just opened.
fn read_open_header(file: &File) -> Result<ArrayHeader> {
    let (head, _) = crate::pack::shards::read_head(file)?;
    npy::parse_array_header(&head).context("bad .npy header")
}

/// Keeps the rows of `buf` (`row_bytes` each) whose entry in `keep` is true, in order.
pub fn keep_rows(buf: &mut Vec<u8>, row_bytes: usize, keep: &[bool]) {
    let mut kept = 0;
    for (i, &k) in keep.iter().enumerate() {
        if k {
            buf.copy_within(i * row_bytes..(i + 1) * row_bytes, kept);
            kept += row_bytes;
        }
    }
    buf.truncate(kept);
}

/// The records of a family written with `layout`, from its writer's file records.
pub fn records(
    layout: &FileLayout,
    files: &[crate::format::metadata::ShardRecord],
) -> Vec<CompanionRecord> {
    files
        .iter()
        .map(|f| CompanionRecord {
            name: layout.prefix.clone(),
            shard: f.shard,
            file_name: f.file_name.clone(),
            descr: layout.descr.clone(),
            shape: serde_json::to_string(&layout.trailing).expect("numbers serialise"),
            rows: f.rows,
            bytes: f.bytes,
            crc32c: f.crc32c,
        })
        .collect()
}

/// Checks the files of `family` for shards `which` against the checksums `metadata.db`
/// records for it (nothing to check when it records none: attached by another tool).
pub fn verify_family(
    dir: &Path,
    family: &Family,
    recorded: &[CompanionRecord],
    which: &[usize],
    workers: usize,
) -> Result<()> {
    let records: Vec<&CompanionRecord> =
        recorded.iter().filter(|r| r.name == family.name).collect();
    if records.is_empty() {
        return Ok(());
    }
    let files: Vec<HeldFile> = which
        .iter()
        .map(|&i| {
            let f = &family.files[i];
            let r = records.iter().find(|r| r.file_name == f.file_name);
            let (bytes, crc) = r.map_or((u64::MAX, 0), |r| (r.bytes, r.crc32c));
            HeldFile {
                file: &f.file,
                path: &f.path,
                name: &f.file_name,
                bytes,
                crc,
            }
        })
        .collect();
    crate::pack::shards::verify_files(dir, &files, workers)
}

/// The families a command carries: every family of every input (by name, same dtype and shape
/// everywhere) except those `dropped`; a family missing from some input, or of another kind
/// there, is an error naming it.
pub fn common_families(inputs: &[(&Path, &Scan)], dropped: &[String]) -> Result<Vec<String>> {
    let mut names: Vec<String> = inputs
        .iter()
        .flat_map(|(_, s)| s.families.iter().map(|f| f.name.clone()))
        .collect();
    names.sort();
    names.dedup();
    names.retain(|n| !dropped.contains(n));
    for name in &names {
        let mut first: Option<(&Path, &Family)> = None;
        for (path, scan) in inputs {
            let Some(f) = scan.family(name) else {
                return Err(err!(
                    Refused,
                    "companion {name} is in {} but not in {}; drop companion {name} to leave it out",
                    inputs
                        .iter()
                        .find(|(_, s)| s.family(name).is_some())
                        .map_or(String::new(), |(p, _)| p.display().to_string()),
                    path.display()
                )
                .with_option("drop_companion"));
            };
            match first {
                None => first = Some((path, f)),
                Some((p0, f0)) if !f0.same_kind(f) => {
                    return Err(err!(
                        Refused,
                        "companion {name} is {} in {} but {} in {}; drop companion {name} to leave it out",
                        f0.describe(),
                        p0.display(),
                        f.describe(),
                        path.display()
                    )
                    .with_option("drop_companion"));
                }
                Some(_) => {}
            }
        }
    }
    Ok(names)
}
