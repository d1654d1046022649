//! What a merge refuses before it writes anything: an input given twice, an output that is an
//! input (or, when inputs are to be deleted, inside or around one), and companion families it
//! cannot carry or would orphan.

use std::path::{Path, PathBuf};

use super::MergeOptions;
use super::source::Source;
use crate::error::{Context, Result, err};
use crate::pack::families::{self, Scan};
use crate::pack::publish::list_names;
use crate::store::Location;

/// Duplicate inputs, an output that is an input, and (when inputs are to be deleted) an output
/// inside or around an input are refused before anything is read.
pub(super) fn refuse_unsafe(inputs: &[PathBuf], output: &Path, delete: bool) -> Result<()> {
    let canon = |p: &Path| -> Result<PathBuf> {
        if let Some(Ok(Location::Remote(url))) = p.to_str().map(Location::parse) {
            if delete {
                return Err(err!(
                    Refused,
                    "input {url} is in object storage, and merge deletes no remote pack; merge \
                     without deleting the inputs"
                )
                .with_option("delete_inputs"));
            }
            // Told apart by their URL; an object store has no links to resolve.
            return Ok(PathBuf::from(url.to_string()));
        }
        crate::pack::open::check_is_pack(p).with_context(|| format!("input {}", p.display()))?;
        std::fs::canonicalize(p).with_context(|| format!("input {}", p.display()))
    };
    let canon_inputs: Vec<PathBuf> = inputs.iter().map(|p| canon(p)).collect::<Result<_>>()?;
    for (i, a) in canon_inputs.iter().enumerate() {
        if canon_inputs[..i].contains(a) {
            return Err(err!(
                Refused,
                "{} is given twice as an input",
                inputs[i].display()
            ));
        }
    }
    // The output may not exist yet: resolve its nearest existing ancestor.
    let out = resolve_maybe_missing(output)?;
    for (given, input) in inputs.iter().zip(&canon_inputs) {
        if &out == input {
            return Err(
                err!(Refused, "the output {} is also an input", output.display())
                    .with_option("output"),
            );
        }
        if delete && out.starts_with(input) {
            return Err(err!(
                Refused,
                "the inputs are to be deleted, and the output {} is inside the input {}",
                output.display(),
                given.display()
            )
            .with_option("delete_inputs"));
        }
        if delete && input.starts_with(&out) {
            return Err(err!(
                Refused,
                "the inputs are to be deleted, and the output {} contains the input {}",
                output.display(),
                given.display()
            )
            .with_option("delete_inputs"));
        }
    }
    Ok(())
}

fn resolve_maybe_missing(path: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    let mut existing = abs.as_path();
    let mut rest = Vec::new();
    let no_ancestor = || err!(Io, "{}: no existing ancestor folder", path.display());
    while !existing.exists() {
        rest.push(existing.file_name().ok_or_else(no_ancestor)?.to_owned());
        existing = existing.parent().ok_or_else(no_ancestor)?;
    }
    let mut out = std::fs::canonicalize(existing)?;
    for part in rest.into_iter().rev() {
        out.push(part);
    }
    Ok(out)
}

/// The companion families the output carries: those every input has, alike, unless dropped.
/// A family that does not line up in an input is an error (unless dropped); when the inputs are
/// to be deleted, so is an input holding `*.npy` files this tool cannot account for, or a
/// family dropped (its files would be orphaned).
pub(super) fn carried_companions(
    sources: &[Source],
    options: &MergeOptions,
) -> Result<Vec<String>> {
    let dropped = &options.drop_companion;
    for src in sources {
        for (name, problem) in &src.companions.problems {
            if !dropped.contains(name) || options.delete_inputs {
                let e = err!(
                    Corrupt,
                    "input {}: companion {name} does not line up with its shards: {problem}{}",
                    src.path.display(),
                    if options.delete_inputs {
                        String::new()
                    } else {
                        format!(" (drop companion {name} to leave it out)")
                    }
                );
                return Err(if options.delete_inputs {
                    e
                } else {
                    e.with_option("drop_companion")
                });
            }
        }
        if options.delete_inputs {
            if !src.companions.unaccounted.is_empty() {
                return Err(err!(
                    Refused,
                    "the inputs are to be deleted, and input {} holds {}, which is neither a shard nor a companion array; move it away first (nothing was written)",
                    src.path.display(),
                    list_names(&src.companions.unaccounted)
                )
                .with_option("delete_inputs"));
            }
            if let Some(f) = src
                .companions
                .families
                .iter()
                .find(|f| dropped.contains(&f.name))
            {
                return Err(err!(
                    Refused,
                    "deleting the inputs would orphan {}'s companion {} (it is dropped from the output); nothing was written",
                    src.path.display(),
                    f.name
                )
                .with_option("delete_inputs"));
            }
        }
    }
    let scans: Vec<(&Path, &Scan)> = sources
        .iter()
        .map(|s| (s.path.as_path(), &s.companions))
        .collect();
    families::common_families(&scans, dropped)
}
