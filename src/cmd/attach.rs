//! `attach`: add a companion family to a pack. The story: check the name and that the pack has
//! no family of it yet, read the given arrays' headers and check that they line up with the
//! pack (one array per shard, or one for the whole pack that is split at the shard
//! boundaries), copy their rows into staged `NAME-NNNNN.npy` files (checksummed), record them
//! in a staged copy of `metadata.db`, and publish both at once; the shards stay in place.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::UsageError;
use crate::format::metadata::{self, MetadataWriter};
use crate::format::npy::ArrayHeader;
use crate::pack::families::{self, describe};
use crate::pack::files;
use crate::pack::publish::OutputDir;
use crate::pack::shard_writer::{FileLayout, ShardWriter};
use crate::pack::shards::{self, Shard};
use crate::progress::{self, thousands};

/// Bytes copied per read.
const COPY_BYTES: u64 = 1 << 20;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer attach packs/d6 --name embeddings --from emb-00000.npy emb-00001.npy emb-00002.npy
  dataset-packer attach packs/d6 --name embeddings --from all-embeddings.npy
  dataset-packer attach packs/d6 --name labels --from labels.npy --json

A companion is an array aligned row by row with the pack: row i of its file k belongs to row i
of steps-0000k.npy. Give one array per shard, in shard order, each with that shard's row
count; or one array with a row for every row of the pack, which is split at the shard
boundaries. Any dtype and trailing shape (C order, no Python objects). merge, shuffle and
export carry companions with their rows; validate checks them.")]
pub struct AttachArgs {
    /// The pack to add the companion to.
    #[arg(value_name = "PACK")]
    pub pack: PathBuf,
    // The help is an attribute, not a doc comment: rustdoc would read its brackets as links.
    #[arg(
        long,
        value_name = "NAME",
        help = "Name of the family: [a-z][a-z0-9_]*, not \"steps\" (files NAME-NNNNN.npy)"
    )]
    pub name: String,
    /// The arrays (.npy): one per shard in shard order, or one for the whole pack.
    #[arg(long = "from", value_name = "PATH", num_args = 1.., required = true)]
    pub from: Vec<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// One input array.
struct Source {
    path: PathBuf,
    header: ArrayHeader,
}

pub fn run(args: &AttachArgs) -> Result<()> {
    let started = Instant::now();
    check_name(&args.name)?;
    let out = OutputDir::open_existing(&args.pack)?;
    let shards = shards::open_shards(&args.pack, false)?;
    refuse_existing(&args.pack, &args.name)?;
    let sources: Vec<Source> = args
        .from
        .iter()
        .map(|p| open_source(p))
        .collect::<Result<_>>()?;
    let layout = line_up(&args.name, &sources, &shards)?;

    let staging = out.begin_staging()?;
    let sizes: Vec<u64> = shards.iter().map(|s| s.header.rows).collect();
    let single = shards.len() == 1 && shards[0].name == "steps.npy";
    let mut writer = ShardWriter::with_sizes(&staging, layout.clone(), sizes, !single);
    let total: u64 = shards.iter().map(|s| s.header.rows).sum();
    writer.expect_rows(total);
    let bar = progress::rows_bar(total, args.quiet, "attach");
    for src in &sources {
        copy_rows(src, layout.row_bytes as u64, &mut writer, &bar)?;
    }
    bar.finish_and_clear();
    let files = writer.finish()?;
    let db = MetadataWriter::extend_copy(&args.pack, &staging)?;
    for record in families::records(&layout, &files) {
        db.insert_companion(&record)?;
    }
    db.finish()?;
    let mut kept = out.pack_files()?;
    kept.retain(|n| n != metadata::FILE_NAME);
    out.publish_keeping(&kept)?;

    let bytes: u64 = files.iter().map(|f| f.bytes).sum();
    let elapsed = started.elapsed().as_secs_f64();
    if args.json {
        let doc = serde_json::json!({
            "pack": args.pack.display().to_string(),
            "name": args.name,
            "dtype": layout.descr,
            "trailing_shape": layout.trailing,
            "rows": total,
            "files": files.iter().map(|f| serde_json::json!({"file": f.file_name, "rows": f.rows, "bytes": f.bytes, "crc32c": format!("{:08x}", f.crc32c)})).collect::<Vec<_>>(),
            "bytes": bytes,
            "elapsed_s": elapsed,
        });
        println!("{doc}");
    } else {
        println!(
            "attached {} ({}) to {}: {} file{}, {} rows, {:.1} MB in {elapsed:.2} s",
            args.name,
            describe(&layout.descr, &layout.trailing),
            args.pack.display(),
            files.len(),
            if files.len() == 1 { "" } else { "s" },
            thousands(total),
            bytes as f64 / 1e6
        );
    }
    Ok(())
}

/// A family name is `[a-z][a-z0-9_]*` and not `steps` (exit 2 otherwise).
pub fn check_name(name: &str) -> Result<()> {
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
    let want = header.data_offset as u64 + header.rows() * row_bytes;
    if len != want {
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
    Ok(FileLayout {
        prefix: name.to_string(),
        descr: first.descr.clone(),
        trailing: first.trailing().to_vec(),
        row_bytes: first.row_bytes().expect("checked") as usize,
    })
}

fn copy_rows(
    src: &Source,
    row_bytes: u64,
    writer: &mut ShardWriter,
    bar: &indicatif::ProgressBar,
) -> Result<()> {
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
