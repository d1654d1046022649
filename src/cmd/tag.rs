//! `tag`: name a version of a pack (`tag PACK NAME [--version N]`), or remove a name
//! (`tag PACK --delete NAME`). A tag changes no data, so it makes no version.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::pack::versions::{self, VersionSpec};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer tag packs/d6 paper-baseline             # names the latest version
  dataset-packer tag packs/d6 nightly --version 3 --move # moves the name to version 3
  dataset-packer tag packs/d6 --delete paper-baseline
  dataset-packer stats packs/d6 --version paper-baseline
  dataset-packer tag s3://training/team/d6 nightly       # a new commit of the remote pack

A tag is 1 to 200 letters, digits, '.', '_' or '-', not all digits and not `latest`. A name
already on another version is moved only with --move (exit 2 without it). On a URL the tag
is a commit of its own; exit 2 if another writer committed first.")]
pub struct TagArgs {
    /// The pack (a folder, or an s3://, gs://, az:// URL).
    #[arg(value_name = "PACK")]
    pub pack: PathBuf,
    /// The name to give (or, with --delete, to remove).
    #[arg(value_name = "NAME", value_parser = tag_name)]
    pub name: String,
    /// The version to name: a number, another tag, or `latest` (the default).
    #[arg(
        long,
        value_name = "N|NAME",
        default_value = "latest",
        conflicts_with = "delete"
    )]
    pub version: VersionSpec,
    /// Move the name when it is already on another version (without it, that is refused:
    /// a paper or a checkpoint may cite the name).
    #[arg(long = "move", conflicts_with = "delete")]
    pub move_tag: bool,
    /// Remove the tag NAME instead.
    #[arg(long)]
    pub delete: bool,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A well-formed tag name, checked as clap checks the other arguments (a malformed one is a
/// usage error, exit 2).
fn tag_name(text: &str) -> Result<String, String> {
    versions::check_tag_name(text).map_err(|e| e.to_string())?;
    Ok(text.to_string())
}

pub fn run(args: &TagArgs) -> Result<()> {
    let version = if args.delete {
        crate::untag(&args.pack, &args.name)?
    } else if args.move_tag {
        crate::move_tag(&args.pack, &args.name, &args.version)?
    } else {
        crate::tag(&args.pack, &args.name, &args.version)?
    };
    if args.json {
        let doc = serde_json::json!({
            "pack": args.pack.display().to_string(),
            "tag": args.name,
            "version": version,
            "deleted": args.delete,
        });
        println!("{doc}");
    } else if args.delete {
        println!(
            "removed tag {} (version {version}) from {}",
            args.name,
            args.pack.display()
        );
    } else {
        println!(
            "tagged version {version} of {} {}",
            args.pack.display(),
            args.name
        );
    }
    Ok(())
}
