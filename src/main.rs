//! The `dataset-packer` binary: parses the command line and dispatches to a subcommand.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use dataset_packer::cmd;

#[derive(Parser)]
#[command(
    name = "dataset-packer",
    version,
    about = "Turns raw 2048 self-play logs into training-ready NumPy shards + a SQLite run index",
    after_help = "Logging: set RUST_LOG=info (or debug) for details on stderr."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Folder of the local cache of packs read from object storage (s3://, gs://, az://,
    /// https://), shared by every process of the machine that names it [env:
    /// DATASET_PACKER_CACHE; default: ~/.cache/dataset-packer].
    #[arg(long, global = true, value_name = "DIR")]
    cache: Option<std::path::PathBuf>,
    /// Most bytes the cache may hold, like 50GiB [env: DATASET_PACKER_CACHE_LIMIT; default:
    /// 50GiB].
    #[arg(long = "cache-limit", global = true, value_name = "SIZE", value_parser = cache_size)]
    cache_limit: Option<u64>,
    /// Commit to object storage even where the store ignores create-only writes: you say no
    /// other process writes the packs this command writes (without it, such a store is
    /// refused, since two writers there could lose each other's work silently).
    #[arg(long = "single-writer", global = true)]
    single_writer: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Pack a raw drop (*.meta.json[.gz] + *.jsonl.gz or *.jsonl) into shards, metadata.db and valuation_types.json.
    Pack(cmd::pack::PackArgs),
    /// Combine packs into one, renumbering runs and unifying valuation ids.
    Merge(cmd::merge::MergeArgs),
    /// Write a globally shuffled copy of a pack, in bounded memory.
    Shuffle(cmd::shuffle::ShuffleArgs),
    /// Check that a pack is complete, consistent and loader-ready (exit 0 valid, 1 invalid).
    Validate(cmd::validate::ValidateArgs),
    /// Describe a pack: runs, rows, scores, tiles reached, valuation types, moves, findings.
    Stats(cmd::stats::StatsArgs),
    /// Write one self-contained HTML page of charts about one or more packs, to compare them.
    Report(cmd::report::ReportArgs),
    /// Show one run move by move: boards, moves, valuation types and EVs.
    Show(cmd::show::ShowArgs),
    /// Export runs of a pack as JSONL (raw format), Parquet, or a new smaller pack.
    Export(cmd::export::ExportArgs),
    /// Add a companion array (embeddings, annotations…) aligned row by row with a pack.
    Attach(cmd::attach::AttachArgs),
    /// Remove a companion array family from a pack.
    Detach(cmd::detach::DetachArgs),
    /// List a pack's versions: every state it had, what made it, and its tags.
    Versions(cmd::versions::VersionsArgs),
    /// Browse a pack's runs in a web page served on this machine (and as a JSON API).
    View(cmd::view::ViewArgs),
    /// Name a version of a pack (or remove a name) to read it later with --version NAME.
    Tag(cmd::tag::TagArgs),
    /// Delete the objects of a pack in object storage that no kept version names.
    Gc(cmd::gc::GcArgs),
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`dataset-packer stats … | head`), like other Unix tools,
    // instead of panicking in println!.
    // SAFETY: called first thing, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Ctrl-C and SIGTERM remove what a writer staged (before any other thread starts).
    dataset_packer::interrupt::install();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        if let Some(hint) = pack_hint(&e) {
            eprint!("{}", e.render());
            eprintln!("\n{hint}");
            std::process::exit(e.exit_code());
        }
        e.exit()
    });
    if let Err(e) = configure_cache(&cli) {
        eprintln!("{}", dataset_packer::cli::render(&e));
        return ExitCode::from(dataset_packer::cli::exit_code(&e));
    }
    let result = match &cli.command {
        Command::Pack(args) if args.update => cmd::pack_update::run(args).map(|()| true),
        Command::Pack(args) => cmd::pack::run(args).map(|()| true),
        Command::Validate(args) => cmd::validate::run(args),
        Command::Merge(args) => cmd::merge::run(args).map(|()| true),
        Command::Shuffle(args) => cmd::shuffle::run(args).map(|()| true),
        Command::Stats(args) => cmd::stats::run(args).map(|()| true),
        Command::Report(args) => cmd::report::run(args).map(|()| true),
        Command::Show(args) => cmd::show::run(args).map(|()| true),
        Command::Export(args) => cmd::export::run(args).map(|()| true),
        Command::Attach(args) => cmd::attach::run(args).map(|()| true),
        Command::Detach(args) => cmd::detach::run(args).map(|()| true),
        Command::Versions(args) => cmd::versions::run(args).map(|()| true),
        Command::View(args) => cmd::view::run(args).map(|()| true),
        Command::Tag(args) => cmd::tag::run(args).map(|()| true),
        Command::Gc(args) => cmd::gc::run(args).map(|()| true),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("{}", dataset_packer::cli::render(&e));
            ExitCode::from(dataset_packer::cli::exit_code(&e))
        }
    }
}

/// Sets the process's cache of remote files from `--cache` / `--cache-limit` over what the
/// environment says.
fn configure_cache(cli: &Cli) -> anyhow::Result<()> {
    use dataset_packer::store;
    store::set_single_writer(cli.single_writer);
    if cli.cache.is_none() && cli.cache_limit.is_none() {
        return Ok(());
    }
    let mut config = store::CacheConfig::from_env()?;
    if let Some(dir) = &cli.cache {
        config = config.dir(dir);
    }
    if let Some(bytes) = cli.cache_limit {
        config = config.limit(bytes);
    }
    store::set_cache_config(config);
    Ok(())
}

/// `--cache-limit`'s value: a malformed size is a usage error (exit 2), as clap's own are.
fn cache_size(text: &str) -> Result<u64, String> {
    dataset_packer::store::parse_size(text).map_err(|e| e.to_string())
}

/// A hint for `pack RAW PACK`, which every other command's habit of taking plain paths
/// suggests: pack takes its two folders as options.
fn pack_hint(e: &clap::Error) -> Option<String> {
    if e.kind() != clap::error::ErrorKind::UnknownArgument {
        return None;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let at = args.iter().position(|a| !a.starts_with('-'))?;
    if args[at] != "pack" {
        return None;
    }
    Some(cmd::pack::positional_hint(&args[at + 1..]))
}
