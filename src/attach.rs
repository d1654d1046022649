//! Adding a companion family to a pack, or removing one, in place (what `attach` and `detach`
//! do). Attaching: check the name and that the pack has no family of it yet, read the given
//! arrays' headers and check that they line up with the pack (one array per shard, or one for
//! the whole pack that is split at the shard boundaries), copy their rows into staged
//! `NAME-NNNNN.npy` files (checksummed), record them in a staged copy of `metadata.db`, and
//! publish both at once; the shards stay in place. Detaching: the family's files and its
//! records in `metadata.db` go in one publish (a staged copy of `metadata.db` without them is
//! the commit point), so the pack never records a family whose files are gone, nor the reverse.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::UsageError;
use crate::format::metadata::{self, MetadataWriter, ShardRecord};
use crate::format::npy::ArrayHeader;
use crate::pack::families::{self, describe};
use crate::pack::files;
use crate::pack::publish::OutputDir;
use crate::pack::shard_writer::{FileLayout, ShardWriter};
use crate::pack::shards::{self, Shard};
use crate::progress::{Bar, Observer};

/// Bytes copied per read.
const COPY_BYTES: u64 = 1 << 20;

/// What [`attach`] added.
pub struct Attached {
    pub layout: FileLayout,
    pub files: Vec<ShardRecord>,
    pub rows: u64,
}

/// Adds the family `name`, its rows copied from the arrays `from`, to the pack in `pack`
/// (a progress bar unless `quiet`).
pub fn attach(pack: &Path, name: &str, from: &[PathBuf], observer: &Observer) -> Result<Attached> {
    check_name(name)?;
    let out = OutputDir::open_existing(pack)?;
    let shards = shards::open_shards(pack, false)?;
    refuse_existing(pack, name)?;
    let sources: Vec<Source> = from.iter().map(|p| open_source(p)).collect::<Result<_>>()?;
    let layout = line_up(name, &sources, &shards)?;

    let staging = out.begin_staging()?;
    let sizes: Vec<u64> = shards.iter().map(|s| s.header.rows).collect();
    let single = shards.len() == 1 && shards[0].name == "steps.npy";
    let mut writer = ShardWriter::with_sizes(&staging, layout.clone(), sizes, !single);
    let total: u64 = shards.iter().map(|s| s.header.rows).sum();
    writer.expect_rows(total);
    let bar = Bar::rows(observer, "attach", total);
    for src in &sources {
        copy_rows(src, layout.row_bytes as u64, &mut writer, &bar)?;
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
    Ok(Attached {
        layout,
        files,
        rows: total,
    })
}

/// What [`detach`] removed: the family's file names and their bytes.
pub struct Detached {
    pub files: Vec<String>,
    pub bytes: u64,
}

/// Removes the family `name` (its files and its records) from the pack in `pack`.
pub fn detach(pack: &Path, name: &str) -> Result<Detached> {
    check_name(name)?;
    let out = OutputDir::open_existing(pack)?;
    let files = files::family_files(pack, name)?;
    let recorded = metadata::read_companions(&shards::open_metadata(pack)?)?
        .iter()
        .any(|r| r.name == name);
    if files.is_empty() && !recorded {
        bail!(
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
    Ok(Detached { files, bytes })
}

/// One input array.
struct Source {
    path: PathBuf,
    header: ArrayHeader,
}

/// A family name is `[a-z][a-z0-9_]*` and not `steps` (exit 2 otherwise).
fn check_name(name: &str) -> Result<()> {
    if !files::valid_name(name) {
        return Err(UsageError(format!(
            "--name {name:?}: a companion's name is [a-z][a-z0-9_]* and not \"steps\""
        ))
        .into());
    }
    Ok(())
}

/// A pack that already has files (or records) of the family is refused.
fn refuse_existing(pack: &Path, name: &str) -> Result<()> {
    let files = files::family_files(pack, name)?;
    let recorded = metadata::read_companions(&shards::open_metadata(pack)?)?
        .iter()
        .any(|r| r.name == name);
    if !files.is_empty() || recorded {
        bail!(
            "{} already has a companion {name} ({}); `dataset-packer detach {} --name {name}` first to replace it",
            pack.display(),
            if files.is_empty() {
                "recorded in metadata.db".to_string()
            } else {
                crate::pack::publish::list_names(&files)
            },
            pack.display()
        );
    }
    Ok(())
}

fn open_source(path: &Path) -> Result<Source> {
    let header = families::read_header(path).with_context(|| format!("{}", path.display()))?;
    let name = path.display();
    if header.shape.is_empty() {
        bail!("{name}: a 0-dimensional array has no rows");
    }
    if header.fortran_order && header.shape.len() > 1 {
        bail!("{name}: Fortran-ordered, so its rows are not contiguous; save it in C order");
    }
    if header.dtype.has_objects() {
        bail!(
            "{name}: holds Python objects (dtype {}), which are pointers, not data",
            header.descr
        );
    }
    let row_bytes = header
        .row_bytes()
        .filter(|&b| b > 0 && b <= 1 << 30)
        .with_context(|| format!("{name}: rows of {} are too large or empty", header.descr))?;
    let len = std::fs::metadata(path)?.len();
    let want = header.data_offset as u128 + u128::from(header.rows()) * u128::from(row_bytes);
    if u128::from(len) != want {
        bail!(
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
            bail!(
                "{}: dtype {}, but {} has {} (a family has one dtype and shape)",
                s.path.display(),
                describe(&s.header.descr, s.header.trailing()),
                sources[0].path.display(),
                describe(&first.descr, first.trailing())
            );
        }
    }
    let total: u64 = shards.iter().map(|s| s.header.rows).sum();
    if sources.len() == shards.len() {
        for (src, shard) in sources.iter().zip(shards) {
            if src.header.rows() != shard.header.rows {
                bail!(
                    "{}: {} rows, but {} (the shard it pairs with) has {}",
                    src.path.display(),
                    src.header.rows(),
                    shard.name,
                    shard.header.rows
                );
            }
        }
    } else if sources.len() == 1 {
        if first.rows() != total {
            bail!(
                "{}: {} rows, but the pack has {total} (one array for the whole pack needs a row for each of its rows)",
                sources[0].path.display(),
                first.rows()
            );
        }
    } else {
        bail!(
            "{} arrays for a pack of {} shard{}: give one per shard, or one for the whole pack",
            sources.len(),
            shards.len(),
            if shards.len() == 1 { "" } else { "s" }
        );
    }
    let layout = FileLayout {
        prefix: name.to_string(),
        descr: first.descr.clone(),
        trailing: first.trailing().to_vec(),
        row_bytes: first.row_bytes().expect("checked") as usize,
    };
    // The header each file gets (format 3.0 when a name needs UTF-8) must read back as the
    // same array, by this tool and by NumPy alike: near the length limit it may not.
    match crate::format::npy::parse_array_header(&layout.header(total)) {
        Ok(h) if h.dtype == first.dtype && h.trailing() == first.trailing() => Ok(layout),
        reread => bail!(
            "{}: cannot attach it: the header its companion files would have does not read back as its dtype ({})",
            sources[0].path.display(),
            reread.map_or_else(|e| e.to_string(), |h| format!("it reads as {}", h.descr))
        ),
    }
}

fn copy_rows(src: &Source, row_bytes: u64, writer: &mut ShardWriter, bar: &Bar) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(&src.path)
        .with_context(|| format!("opening {}", src.path.display()))?;
    let rows_per_read = (COPY_BYTES / row_bytes).max(1);
    let mut buf = Vec::new();
    let mut done = 0u64;
    while done < src.header.rows() {
        let n = (src.header.rows() - done).min(rows_per_read);
        buf.resize((n * row_bytes) as usize, 0);
        file.read_exact_at(&mut buf, src.header.data_offset as u64 + done * row_bytes)
            .with_context(|| format!("reading {}", src.path.display()))?;
        writer.write_rows(&buf)?;
        bar.inc(n);
        done += n;
    }
    Ok(())
}
