//! `view`: a local web viewer of a pack's runs. The story: open the pack's version and bind the
//! address (a port in use is refused, naming it), say where the page is, and answer requests
//! until Ctrl-C.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::{ViewOptions, Viewer};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  dataset-packer view packs/d6                       # then open http://127.0.0.1:8048/
  dataset-packer view packs/d6 --port 0              # any free port; the address is printed
  dataset-packer view packs/d6 --version 3
  dataset-packer view s3://training/team/d6
  curl 'http://127.0.0.1:8048/api/runs?where=depth%20%3D%207&order=-max_score&limit=10'
  curl 'http://127.0.0.1:8048/api/runs/7?from=200&limit=50'

The page lists the runs (sort by a column, filter with the SQL --where takes, pages of 50)
and shows a run step by step: /run/7?step=120 opens step 120 of run 7; the left and right
arrow keys step, Home and End jump to the ends. Companion families are shown beside the
teacher; a family with a move (an argmax_head field, or four per-move values such as the
trainer's policy_p1) has the steps where its move differs from the teacher's marked.
The JSON API: /api/pack, /api/runs, /api/runs/<id>, /api/runs/<id>/timeline,
/api/runs/<id>/disagreements (see the README). The viewer only reads: GET and HEAD.")]
pub struct ViewArgs {
    /// The pack folder (or s3://, gs://, az://, https:// URL).
    #[arg(value_name = "PACK")]
    pub pack: PathBuf,
    #[command(flatten)]
    pub version: crate::cli::VersionArg,
    /// The address to listen on. The default lets only this machine in; 0.0.0.0 lets in
    /// every machine that reaches this one (the pack is then readable by all of them).
    #[arg(long, value_name = "ADDRESS", default_value = "127.0.0.1")]
    pub host: String,
    /// The port to listen on (0: any free port).
    #[arg(long, value_name = "PORT", default_value_t = 8048)]
    pub port: u16,
    #[command(flatten)]
    pub limits: crate::cli::SqlLimitArgs,
}

pub fn run(args: &ViewArgs) -> Result<()> {
    let options = ViewOptions::default()
        .version(args.version.version.clone())
        .host(&args.host)
        .port(args.port)
        .limits(args.limits.limits());
    let viewer = Viewer::open(&args.pack, &options)?;
    let mut out = std::io::stdout();
    writeln!(out, "serving {}", viewer.describe())?;
    writeln!(out, "open {}  (Ctrl-C stops)", viewer.url())?;
    out.flush()?;
    viewer.serve()?;
    Ok(())
}
