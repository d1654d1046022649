//! What a merge refuses before it writes anything: an input given twice, an output that is an
//! input (or, when inputs are to be deleted, inside or around one), and companion families it
//! cannot carry or would orphan.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::Options;
use super::source::Source;
use crate::UsageError;
use crate::pack::families::{self, Scan};
use crate::pack::publish::list_names;
use crate::pack::shards;

/// Duplicate inputs, an output that is an input, and (with --delete-inputs) an output inside or
/// around an input are refused before anything is read.
pub(super) fn refuse_unsafe(inputs: &[PathBuf], output: &Path, delete: bool) -> Result<()> {
    let canon = |p: &Path| {
        shards::check_is_pack(p).with_context(|| format!("input {}", p.display()))?;
        std::fs::canonicalize(p).with_context(|| format!("input {}", p.display()))
    };
    let canon_inputs: Vec<PathBuf> = inputs.iter().map(|p| canon(p)).collect::<Result<_>>()?;
    for (i, a) in canon_inputs.iter().enumerate() {
        if canon_inputs[..i].contains(a) {
            return Err(UsageError(format!(
                "{} is given twice as an input",
                inputs[i].display()
            ))
            .into());
        }
    }
    // The output may not exist yet: resolve its nearest existing ancestor.
    let out = resolve_maybe_missing(output)?;
    for (given, input) in inputs.iter().zip(&canon_inputs) {
        if &out == input {
            return Err(
                UsageError(format!("the output {} is also an input", output.display())).into(),
            );
        }
        if delete && out.starts_with(input) {
            return Err(UsageError(format!(
                "--delete-inputs: the output {} is inside the input {}",
                output.display(),
                given.display()
            ))
            .into());
        }
        if delete && input.starts_with(&out) {
            return Err(UsageError(format!(
                "--delete-inputs: the output {} contains the input {}",
                output.display(),
                given.display()
            ))
            .into());
        }
    }
    Ok(())
}

fn resolve_maybe_missing(path: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    let mut existing = abs.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        rest.push(
            existing
                .file_name()
                .context("no existing ancestor")?
                .to_owned(),
        );
        existing = existing.parent().context("no existing ancestor")?;
    }
    let mut out = std::fs::canonicalize(existing)?;
    for part in rest.into_iter().rev() {
        out.push(part);
    }
    Ok(out)
}

/// The companion families the output carries: those every input has, alike, unless dropped.
/// A family that does not line up in an input is an error (unless dropped); with
/// --delete-inputs, so is an input holding `*.npy` files this tool cannot account for, or a
/// family dropped (its files would be orphaned).
pub(super) fn carried_companions(sources: &[Source], options: &Options) -> Result<Vec<String>> {
    let dropped = &options.drop_companions;
    for src in sources {
        for (name, problem) in &src.companions.problems {
            if !dropped.contains(name) || options.delete_inputs {
                bail!(
                    "input {}: companion {name} does not line up with its shards: {problem}{}",
                    src.path.display(),
                    if options.delete_inputs {
                        String::new()
                    } else {
                        format!(" (pass --drop-companion {name} to leave it out)")
                    }
                );
            }
        }
        if options.delete_inputs {
            if !src.companions.unaccounted.is_empty() {
                return Err(UsageError(format!(
                    "--delete-inputs: input {} holds {}, which is neither a shard nor a companion array; move it away first (nothing was written)",
                    src.path.display(),
                    list_names(&src.companions.unaccounted)
                ))
                .into());
            }
            if let Some(f) = src
                .companions
                .families
                .iter()
                .find(|f| dropped.contains(&f.name))
            {
                return Err(UsageError(format!(
                    "--delete-inputs would orphan {}'s companion {} (--drop-companion leaves it out of the output); nothing was written",
                    src.path.display(),
                    f.name
                ))
                .into());
            }
        }
    }
    let scans: Vec<(&Path, &Scan)> = sources
        .iter()
        .map(|s| (s.path.as_path(), &s.companions))
        .collect();
    Ok(families::common_families(&scans, dropped)?)
}
