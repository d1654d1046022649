//! Adding a companion family to a pack, or removing one, in place (what `attach` and `detach`
//! do). Attaching: check the name and that the pack has no family of it yet, read the given
//! arrays' headers and check that they line up with the pack (one array per shard, or one for
//! the whole pack that is split at the shard boundaries), copy their rows into staged
//! `NAME-NNNNN.npy` files (checksummed), record them in a staged copy of `metadata.db`, and
//! publish both at once; the shards stay in place. Detaching: the family's files and its
//! records in `metadata.db` go in one publish (a staged copy of `metadata.db` without them is
//! the commit point), so the pack never records a family whose files are gone, nor the reverse.
//! Both read the pack through its opener ([`crate::pack::open::open`]).

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use crate::error::{Context, Error, ErrorKind, Result, fail};
use crate::format::dtype::Dtype;
use crate::format::metadata::{self, MetadataWriter, ShardRecord};
use crate::format::npy::ArrayHeader;
use crate::format::row::ROW_BYTES;
use crate::pack::families::{self, describe};
use crate::pack::files;
use crate::pack::publish::OutputDir;
use crate::pack::shard_writer::{FileLayout, ShardWriter};
use crate::pack::shards::Shard;
use crate::pack::versions::VersionSpec;
use crate::progress::{Bar, Observer};

/// Bytes copied per read.
const COPY_BYTES: u64 = 1 << 20;

/// How [`attach`] works: where its progress goes (default: nowhere).
///
/// ```
/// use dataset_packer::AttachOptions;
/// use dataset_packer::progress::Observer;
/// let options = AttachOptions::default().progress(Observer::default());
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
pub struct AttachOptions {
    progress: Observer,
}

impl AttachOptions {
    /// Where progress goes (rows copied).
    pub fn progress(mut self, progress: Observer) -> AttachOptions {
        self.progress = progress;
        self
    }
}

/// What [`attach`] added: the family's dtype, trailing shape, rows and files.
#[derive(Debug)]
pub struct AttachSummary {
    layout: FileLayout,
    files: Vec<ShardRecord>,
    rows: u64,
}

impl AttachSummary {
    /// The family's dtype, as its `.npy` headers write it (`'<f4'`).
    pub fn descr(&self) -> &str {
        &self.layout.descr
    }

    /// The shape of a row (empty for one value per row).
    pub fn trailing_shape(&self) -> &[u64] {
        &self.layout.trailing
    }

    /// `'<f4'` and the trailing shape as a reader says them (`float32 × 8`).
    pub fn describe(&self) -> String {
        describe(&self.layout.descr, &self.layout.trailing)
    }

    /// Rows in all (the pack's).
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The files written (`NAME-NNNNN.npy` or `NAME.npy`), with their rows, bytes and CRC-32C.
    pub fn files(&self) -> &[ShardRecord] {
        &self.files
    }
}

/// Adds the companion family `name` to the pack at `pack`, its rows copied from the NumPy
/// arrays `sources`, in order: one per shard with that shard's rows, one with a row for every
/// row of the pack, or any whose rows add up to the pack's (cut at the shard boundaries; as
/// many arrays as shards must then carry row keys); any dtype and trailing shape, in C order,
/// without Python objects. Arrays of a structured dtype with integer `run_id` and
/// `step_index` fields (the trainer's annotation rows) have every row checked against the
/// pack's row it lands on. The shards stay in place; the family's files
/// and its records in `metadata.db` are published at once. What `dataset-packer attach` does.
///
/// Errors: [`ErrorKind::Refused`] for a bad name (`[a-z][a-z0-9_]*`, not `steps`) or a family
/// the pack already has, [`ErrorKind::InvalidInput`] (naming the array) for arrays that do not
/// line up with the pack.
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// # let pack_dir = fixture.path();
/// # let scores = dataset_packer::pack::doc_support::temp_dir().with_extension("npy");
/// # let mut bytes = dataset_packer::format::npy::array_header("'<f4'", &[2240]);
/// # bytes.extend((0..2240).flat_map(|i| (i as f32).to_le_bytes()));
/// # std::fs::write(&scores, bytes)?;
/// use dataset_packer::{AttachOptions, Pack, attach, detach};
///
/// // `scores`: an .npy file of one float32 per row of the pack.
/// let added = attach(pack_dir, "score", &[scores.clone()], &AttachOptions::default())?;
/// assert_eq!((added.descr(), added.rows()), ("'<f4'", 2240));
/// assert_eq!(Pack::open(pack_dir)?.companion_names(), ["score"]);
///
/// let removed = detach(pack_dir, "score")?;
/// assert_eq!(removed.files(), ["score.npy"]);
/// assert!(Pack::open(pack_dir)?.companion_names().is_empty());
/// # std::fs::remove_file(&scores)?;
/// # Ok(()) }
/// ```
pub fn attach(
    pack: impl AsRef<Path>,
    name: &str,
    sources: &[PathBuf],
    options: &AttachOptions,
) -> Result<AttachSummary> {
    check_name(name)?;
    crate::pack::remote_output::change_at(pack.as_ref(), |pack| {
        attach_here(pack, name, sources, options)
    })
}

/// [`attach`] on a pack in a local folder.
fn attach_here(
    pack: &Path,
    name: &str,
    sources: &[PathBuf],
    options: &AttachOptions,
) -> Result<AttachSummary> {
    let out = OutputDir::open_existing(pack)?;
    let opened = crate::pack::open::open(pack, &VersionSpec::Latest, false)?;
    let shards = opened.shards;
    refuse_existing(pack, &opened.conn, name)?;
    if sources.is_empty() {
        return Err(
            Error::new(ErrorKind::Refused, format!("no arrays to attach as {name}"))
                .with_option("from"),
        );
    }
    let sources: Vec<Source> = sources
        .iter()
        .map(|p| open_source(p))
        .collect::<Result<_>>()?;
    let layout = line_up(name, &sources, &shards)?;

    let staging = out.begin_staging()?;
    let sizes: Vec<u64> = shards.iter().map(|s| s.header.rows).collect();
    let single = shards.len() == 1 && shards[0].name == "steps.npy";
    let mut writer = ShardWriter::with_sizes(&staging, layout.clone(), sizes, !single);
    let total: u64 = shards.iter().map(|s| s.header.rows).sum();
    writer.expect_rows(total);
    let bar = Bar::rows(&options.progress, "attach", total);
    let mut pack_rows = PackRows::new(&shards);
    for src in &sources {
        copy_rows(
            src,
            layout.row_bytes as u64,
            &mut writer,
            &bar,
            &mut pack_rows,
        )?;
    }
    bar.finish_and_clear();
    let files = writer.finish()?;
    let db = MetadataWriter::extend_copy(pack, &staging, "attach")?;
    for record in families::records(&layout, &files) {
        db.insert_companion(&record)?;
    }
    db.finish()?;
    let mut kept = out.pack_files()?;
    kept.retain(|n| n != metadata::FILE_NAME);
    out.publish_keeping(&kept)?;
    Ok(AttachSummary {
        layout,
        files,
        rows: total,
    })
}

/// What [`detach`] removed: the family's file names and their bytes.
#[derive(Debug)]
pub struct DetachSummary {
    files: Vec<String>,
    bytes: u64,
}

impl DetachSummary {
    /// The files removed (none when only the records were left).
    pub fn files(&self) -> &[String] {
        &self.files
    }

    /// Their bytes in all.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Removes the companion family `name` (its files and its records in `metadata.db`, in one
/// publish) from the pack at `pack`; the shards are not touched. What `dataset-packer detach`
/// does. Errors: [`ErrorKind::Refused`] for a bad name, [`ErrorKind::InvalidInput`] when the
/// pack has no such family. See [`attach`] for an example.
pub fn detach(pack: impl AsRef<Path>, name: &str) -> Result<DetachSummary> {
    check_name(name)?;
    crate::pack::remote_output::change_at(pack.as_ref(), |pack| detach_here(pack, name))
}

/// [`detach`] on a pack in a local folder.
fn detach_here(pack: &Path, name: &str) -> Result<DetachSummary> {
    let out = OutputDir::open_existing(pack)?;
    let files = files::family_files(pack, name)?;
    // Detaching touches no shard: a legacy pack's are fine.
    let opened = crate::pack::open::open(pack, &VersionSpec::Latest, true)?;
    let recorded = records_family(&opened.conn, name)?;
    drop(opened);
    if files.is_empty() && !recorded {
        fail!(
            InvalidInput,
            "{} has no companion {name} (no {name}-NNNNN.npy or {name}.npy)",
            pack.display(),
        );
    }
    let bytes: u64 = files
        .iter()
        .map(|f| {
            std::fs::metadata(pack.join(f))
                .map(|m| m.len())
                .unwrap_or(0)
        })
        .sum();
    let staging = out.begin_staging()?;
    let db = MetadataWriter::extend_copy(pack, &staging, "detach")?;
    db.delete_companion(name)?;
    db.finish()?;
    let mut kept = out.pack_files()?;
    kept.retain(|n| n != metadata::FILE_NAME);
    out.publish_with(&kept, &files)?;
    Ok(DetachSummary { files, bytes })
}

/// Whether the pack's `metadata.db` (`conn`) records the family `name`.
fn records_family(conn: &Connection, name: &str) -> Result<bool> {
    Ok(metadata::read_companions(conn)?
        .iter()
        .any(|r| r.name == name))
}

/// One input array.
struct Source {
    path: PathBuf,
    header: ArrayHeader,
}

/// A family name is `[a-z][a-z0-9_]*` and not `steps`.
fn check_name(name: &str) -> Result<()> {
    if !files::valid_name(name) {
        return Err(Error::new(
            ErrorKind::Refused,
            format!("{name:?}: a companion's name is [a-z][a-z0-9_]* and not \"steps\""),
        )
        .with_option("name"));
    }
    Ok(())
}

/// A pack that already has files (or records) of the family is refused.
fn refuse_existing(pack: &Path, conn: &Connection, name: &str) -> Result<()> {
    let files = files::family_files(pack, name)?;
    if !files.is_empty() || records_family(conn, name)? {
        fail!(
            Refused,
            "{} already has a companion {name} ({}); detach it first to replace it",
            pack.display(),
            if files.is_empty() {
                "recorded in metadata.db".to_string()
            } else {
                crate::pack::publish::list_names(&files)
            },
        );
    }
    Ok(())
}

fn open_source(path: &Path) -> Result<Source> {
    let header = families::read_header(path)
        .map_err(|e| match e {
            e if e.kind() == ErrorKind::Io => e,
            e => e.with_kind(ErrorKind::InvalidInput),
        })
        .with_context(|| format!("{}", path.display()))?;
    let name = path.display();
    if header.shape.is_empty() {
        fail!(InvalidInput, "{name}: a 0-dimensional array has no rows");
    }
    if header.fortran_order && header.shape.len() > 1 {
        fail!(
            InvalidInput,
            "{name}: Fortran-ordered, so its rows are not contiguous; save it in C order"
        );
    }
    if header.dtype.has_objects() {
        fail!(
            InvalidInput,
            "{name}: holds Python objects (dtype {}), which are pointers, not data",
            header.descr
        );
    }
    let Some(row_bytes) = header.row_bytes().filter(|&b| b > 0 && b <= 1 << 30) else {
        fail!(
            InvalidInput,
            "{name}: rows of {} are too large or empty",
            header.descr
        );
    };
    let len = std::fs::metadata(path)?.len();
    let want = header.data_offset as u128 + u128::from(header.rows()) * u128::from(row_bytes);
    if u128::from(len) != want {
        fail!(
            InvalidInput,
            "{name}: {len} bytes, but its header promises {want} ({} rows of {row_bytes} bytes)",
            header.rows()
        );
    }
    Ok(Source {
        path: path.to_path_buf(),
        header,
    })
}

/// The family's layout, when the sources line up with the shards: one per shard with its
/// row count, or one with every row of the pack; one dtype and trailing shape in all.
fn line_up(name: &str, sources: &[Source], shards: &[Shard]) -> Result<FileLayout> {
    let first = &sources[0].header;
    for s in &sources[1..] {
        if s.header.descr != first.descr || s.header.trailing() != first.trailing() {
            fail!(
                InvalidInput,
                "{}: dtype {}, but {} has {} (a family has one dtype and shape)",
                s.path.display(),
                describe(&s.header.descr, s.header.trailing()),
                sources[0].path.display(),
                describe(&first.descr, first.trailing())
            );
        }
    }
    let total: u64 = shards.iter().map(|s| s.header.rows).sum();
    let given: u64 = sources.iter().map(|s| s.header.rows()).sum();
    if sources.len() == 1 && given != total {
        fail!(
            InvalidInput,
            "{}: {given} rows, but the pack has {total} (one array for the whole pack needs a row for each of its rows)",
            sources[0].path.display(),
        );
    }
    if given != total {
        fail!(
            InvalidInput,
            "{} arrays of {given} rows in all, but the pack has {total} rows: the arrays' rows must add up to the pack's (one per shard, one for the whole pack, or any files in order, cut at the shard boundaries)",
            sources.len(),
        );
    }
    // As many arrays as shards, but not of their sizes, and nothing in them to check the
    // rows by: most likely arrays given out of order, which cutting would misalign silently.
    if sources.len() == shards.len() && row_keys(first).is_none() {
        for (src, shard) in sources.iter().zip(shards) {
            if src.header.rows() != shard.header.rows {
                fail!(
                    InvalidInput,
                    "{}: {} rows, but {} (the shard it pairs with) has {}",
                    src.path.display(),
                    src.header.rows(),
                    shard.name,
                    shard.header.rows
                );
            }
        }
    }
    let layout = FileLayout {
        prefix: name.to_string(),
        descr: first.descr.clone(),
        trailing: first.trailing().to_vec(),
        row_bytes: first.row_bytes().expect("checked") as usize,
    };
    // The header each file gets (format 3.0 when a name needs UTF-8) must read back as the
    // same array, by this tool and by NumPy alike: near the length limit it may not.
    match layout.header_read_back(total) {
        Ok(h) if h.dtype == first.dtype && h.trailing() == first.trailing() => Ok(layout),
        reread => fail!(
            InvalidInput,
            "{}: cannot attach it: the header its companion files would have does not read back as its dtype ({})",
            sources[0].path.display(),
            reread.map_or_else(|e| e.to_string(), |h| format!("it reads as {}", h.descr))
        ),
    }
}

/// Copies `src`'s rows into `writer` (which cuts them at the shard boundaries); where they
/// carry the pack's row keys ([`row_keys`]), each is first checked against the pack's row it
/// lands on (`pack_rows`, which follows the copy across arrays).
fn copy_rows(
    src: &Source,
    row_bytes: u64,
    writer: &mut ShardWriter,
    bar: &Bar,
    pack_rows: &mut PackRows,
) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(&src.path)
        .with_context(|| format!("opening {}", src.path.display()))?;
    let keys = row_keys(&src.header);
    let rows_per_read = (COPY_BYTES / row_bytes).max(1);
    let mut buf = Vec::new();
    let mut done = 0u64;
    while done < src.header.rows() {
        let n = (src.header.rows() - done).min(rows_per_read);
        buf.resize((n * row_bytes) as usize, 0);
        file.read_exact_at(&mut buf, src.header.data_offset as u64 + done * row_bytes)
            .with_context(|| format!("reading {}", src.path.display()))?;
        match &keys {
            Some(keys) => pack_rows.check(src, keys, &buf, row_bytes as usize, done)?,
            None => pack_rows.skip(n),
        }
        writer.write_rows(&buf)?;
        bar.inc(n);
        done += n;
    }
    Ok(())
}

/// Where a source's rows say which row of the pack they belong to: the byte ranges of its
/// `run_id` and `step_index` fields (unsigned or signed little-endian integers, in a
/// structured dtype with one item per row), as the trainer's annotation rows have them.
struct RowKeys {
    run_id: Key,
    step_index: Key,
}

/// An integer field of a row: its offset, its size and whether it is signed.
#[derive(Clone, Copy)]
struct Key {
    offset: usize,
    size: usize,
    signed: bool,
}

fn row_keys(header: &ArrayHeader) -> Option<RowKeys> {
    let Dtype::Struct { fields, .. } = &header.dtype else {
        return None;
    };
    if !header.trailing().is_empty() {
        return None;
    }
    let integer = |name: &str| {
        fields
            .iter()
            .find(|f| f.name == name)
            .and_then(|f| match f.dtype {
                Dtype::Scalar { order, kind, size }
                    if matches!(kind, 'u' | 'i')
                        && order != '>'
                        && matches!(size, 1 | 2 | 4 | 8) =>
                {
                    Some(Key {
                        offset: f.offset,
                        size,
                        signed: kind == 'i',
                    })
                }
                _ => None,
            })
    };
    Some(RowKeys {
        run_id: integer("run_id")?,
        step_index: integer("step_index")?,
    })
}

impl Key {
    /// The field's value in `row`, widened (a negative value cannot match a pack's row).
    fn read(self, row: &[u8]) -> i128 {
        let Key {
            offset,
            size,
            signed,
        } = self;
        let mut bytes = [0u8; 16];
        bytes[..size].copy_from_slice(&row[offset..offset + size]);
        if signed && row[offset + size - 1] & 0x80 != 0 {
            bytes[size..].fill(0xff);
        }
        i128::from_le_bytes(bytes)
    }
}

/// The pack's rows in order, read alongside the copy to check the sources' row keys.
struct PackRows<'a> {
    shards: &'a [Shard],
    /// The next row: its shard and its row in it, and its global index.
    shard: usize,
    at: u64,
    global: u64,
}

impl<'a> PackRows<'a> {
    fn new(shards: &'a [Shard]) -> PackRows<'a> {
        PackRows {
            shards,
            shard: 0,
            at: 0,
            global: 0,
        }
    }

    /// The shard the next row is in, and how many of its rows are left (past the shards
    /// whose rows are all behind).
    fn current(&mut self) -> (&'a Shard, u64) {
        while self.at == self.shards[self.shard].header.rows {
            self.shard += 1;
            self.at = 0;
        }
        let shard = &self.shards[self.shard];
        (shard, shard.header.rows - self.at)
    }

    fn skip(&mut self, mut n: u64) {
        self.global += n;
        while n > 0 {
            let step = self.current().1.min(n);
            self.at += step;
            n -= step;
        }
    }

    /// Checks `buf`'s rows (from row `first` of `src`) against the pack's next rows.
    fn check(
        &mut self,
        src: &Source,
        keys: &RowKeys,
        buf: &[u8],
        row_bytes: usize,
        first: u64,
    ) -> Result<()> {
        let mut rows = buf.chunks_exact(row_bytes).enumerate();
        while rows.len() > 0 {
            let (shard, left) = self.current();
            let count = left.min(rows.len() as u64);
            let theirs = shard.read_aligned(self.at, count)?;
            for (ours, (i, row)) in theirs.chunks_exact(ROW_BYTES).zip(rows.by_ref()) {
                let run = u32::from_le_bytes(ours[..4].try_into().expect("4 bytes"));
                let step = u32::from_le_bytes(ours[4..8].try_into().expect("4 bytes"));
                let (their_run, their_step) = (keys.run_id.read(row), keys.step_index.read(row));
                if (their_run, their_step) != (i128::from(run), i128::from(step)) {
                    let global = self.global;
                    fail!(
                        InvalidInput,
                        "{} row {}: run_id {their_run}, step_index {their_step}, but the pack's row {global} ({} row {}) is run {run}, step {step}: the arrays do not line up with the pack (give them in order; nothing was attached)",
                        src.path.display(),
                        first + i as u64,
                        shard.name,
                        self.at,
                    );
                }
                self.at += 1;
                self.global += 1;
            }
        }
        Ok(())
    }
}
