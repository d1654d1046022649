//! Finding the runs of a raw drop: walk the input root (following symlinks, never looping),
//! pair each sidecar `BASE.meta.json[.gz]` with its rows file in the same folder, `BASE.jsonl.gz`
//! or plain `BASE.jsonl` (the logger writes the latter without `-Z`; one drop may mix both), and
//! order runs by their sidecar path relative to the root, component by component.

use rayon::prelude::*;
use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Context, Result, fail};

const META: &str = ".meta.json";
const META_GZ: &str = ".meta.json.gz";
const ROWS_GZ: &str = ".jsonl.gz";
const ROWS_PLAIN: &str = ".jsonl";

/// How a rows file is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowsForm {
    /// `BASE.jsonl.gz`: one or more gzip members.
    Gzip,
    /// `BASE.jsonl`: the text itself.
    Plain,
}

/// The detail recorded for a rows file without a sidecar, naming the sidecars looked for.
pub fn orphan_detail(rows: &Path) -> String {
    let name = rows.file_name().unwrap_or_default().to_string_lossy();
    let base = name
        .strip_suffix(ROWS_GZ)
        .or_else(|| name.strip_suffix(ROWS_PLAIN))
        .unwrap_or(&name);
    format!(
        "rows file without a sidecar ({base}{META} or {base}{META_GZ}): a game still running or killed; skipped"
    )
}

/// One run found in the drop, in run order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSource {
    /// Sidecar path relative to the root (decides the run order).
    pub rel_sidecar: PathBuf,
    pub sidecar: PathBuf,
    pub rows: PathBuf,
    pub rel_rows: PathBuf,
    pub rows_form: RowsForm,
    /// Size of the rows file (0 when missing), for progress and `pack --update`.
    pub rows_bytes: u64,
    /// Size of the sidecar file (of the one named by `sidecar`).
    pub sidecar_bytes: u64,
    /// Set when pairing already shows the run is invalid.
    pub problem: Option<String>,
}

/// What the walk found.
#[derive(Debug, Default)]
pub struct Discovery {
    pub runs: Vec<RunSource>,
    /// Rows files (`.jsonl.gz` or `.jsonl`) with no sidecar (games still running or killed),
    /// relative to the root.
    pub orphans: Vec<PathBuf>,
    /// Things the walk could not follow (symlink loops, unreadable folders): warnings.
    pub warnings: Vec<String>,
}

#[derive(Default)]
struct Base {
    /// Sizes of `BASE.meta.json` and `BASE.meta.json.gz` when present.
    meta: Option<u64>,
    meta_gz: Option<u64>,
    /// Sizes of `BASE.jsonl.gz` and `BASE.jsonl` when present.
    rows_gz: Option<u64>,
    rows_plain: Option<u64>,
}

/// Walks `root` and returns its runs in run-id order.
pub fn discover(root: &Path) -> Result<Discovery> {
    let meta =
        std::fs::metadata(root).with_context(|| format!("cannot read input {}", root.display()))?;
    if !meta.is_dir() {
        fail!(InvalidInput, "input {} is not a directory", root.display());
    }
    let mut bases: BTreeMap<(PathBuf, String), Base> = BTreeMap::new();
    let mut found = Discovery::default();
    let mut ancestors = HashSet::new();
    walk(
        root,
        Path::new(""),
        &mut ancestors,
        &mut bases,
        &mut found.warnings,
    );

    for ((dir, base), b) in bases {
        let rel = |suffix: &str| dir.join(format!("{base}{suffix}"));
        if b.meta.is_none() && b.meta_gz.is_none() {
            let present = [(b.rows_gz, ROWS_GZ), (b.rows_plain, ROWS_PLAIN)];
            for (_, suffix) in present.iter().filter(|(size, _)| size.is_some()) {
                found.orphans.push(rel(suffix));
            }
            continue;
        }
        let (rel_sidecar, sidecar_bytes) = match b.meta {
            Some(size) => (rel(META), size),
            None => (rel(META_GZ), b.meta_gz.unwrap_or(0)),
        };
        let problem = if b.meta.is_some() && b.meta_gz.is_some() {
            Some(format!(
                "both {base}{META} and {base}{META_GZ} exist; keep one"
            ))
        } else if b.rows_gz.is_some() && b.rows_plain.is_some() {
            Some(format!(
                "two rows files for one run, {} and {}; keep one (gzip the plain one or delete it)",
                root.join(rel(ROWS_GZ)).display(),
                root.join(rel(ROWS_PLAIN)).display()
            ))
        } else if b.rows_gz.is_none() && b.rows_plain.is_none() {
            Some(format!(
                "the rows file is missing next to the sidecar: neither {base}{ROWS_GZ} nor {base}{ROWS_PLAIN} exists"
            ))
        } else {
            None
        };
        // A plain file only when it is the one there; the gzip name otherwise (and for messages).
        let (form, suffix, rows_bytes) = match (b.rows_gz, b.rows_plain) {
            (None, Some(size)) => (RowsForm::Plain, ROWS_PLAIN, size),
            (size, _) => (RowsForm::Gzip, ROWS_GZ, size.unwrap_or(0)),
        };
        found.runs.push(RunSource {
            sidecar: root.join(&rel_sidecar),
            rows: root.join(rel(suffix)),
            rel_rows: rel(suffix),
            rows_form: form,
            rel_sidecar,
            rows_bytes,
            sidecar_bytes,
            problem,
        });
    }
    found.runs.sort_by(|a, b| a.rel_sidecar.cmp(&b.rel_sidecar));
    found.orphans.sort();
    Ok(found)
}

fn walk(
    dir: &Path,
    rel: &Path,
    ancestors: &mut HashSet<(u64, u64)>,
    bases: &mut BTreeMap<(PathBuf, String), Base>,
    warnings: &mut Vec<String>,
) {
    let id = match std::fs::metadata(dir) {
        Ok(m) => (m.dev(), m.ino()),
        Err(e) => {
            warnings.push(format!("cannot read {}: {e}", dir.display()));
            return;
        }
    };
    if !ancestors.insert(id) {
        warnings.push(format!(
            "{} links back to a folder above it; not followed again",
            dir.display()
        ));
        return;
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            warnings.push(format!("cannot list {}: {e}", dir.display()));
            ancestors.remove(&id);
            return;
        }
    };
    let mut names: Vec<_> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    names.sort();
    // Follow symlinks; a dangling link to a run file still counts, so its run reports it. The
    // files are looked at on the caller's rayon pool (pack's has one thread per worker): a
    // drop holds thousands of runs, and this walk is done before any run is parsed.
    let metas: Vec<_> = names
        .par_iter()
        .map(|name| std::fs::metadata(dir.join(name)))
        .collect();
    for (name, meta) in names.into_iter().zip(metas) {
        let path = dir.join(&name);
        let child_rel = rel.join(&name);
        if meta.as_ref().is_ok_and(|m| m.is_dir()) {
            walk(&path, &child_rel, ancestors, bases, warnings);
            continue;
        }
        let Some(name) = name.to_str() else { continue };
        let size = meta.as_ref().map(|m| m.len()).unwrap_or(0);
        let (base, kind) = if let Some(b) = name.strip_suffix(META_GZ) {
            (b, 0)
        } else if let Some(b) = name.strip_suffix(META) {
            (b, 1)
        } else if let Some(b) = name.strip_suffix(ROWS_GZ) {
            (b, 2)
        } else if let Some(b) = name.strip_suffix(ROWS_PLAIN) {
            (b, 3)
        } else {
            continue;
        };
        let entry = bases
            .entry((rel.to_path_buf(), base.to_string()))
            .or_default();
        match kind {
            0 => entry.meta_gz = Some(size),
            1 => entry.meta = Some(size),
            2 => entry.rows_gz = Some(size),
            _ => entry.rows_plain = Some(size),
        }
    }
    ancestors.remove(&id);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"x").unwrap();
    }

    #[test]
    fn pairs_orders_and_flags() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for f in [
            "b/x.meta.json",
            "b/x.jsonl.gz",
            "a-b/y.meta.json.gz",
            "a-b/y.jsonl.gz",
            "a/z.meta.json",
            "a/o.jsonl.gz",
            "c/w.meta.json",
            "c/w.meta.json.gz",
            "c/w.jsonl.gz",
        ] {
            touch(&r.join(f));
        }
        std::os::unix::fs::symlink(r, r.join("b/loop")).unwrap();
        let d = discover(r).unwrap();
        let rels: Vec<_> = d
            .runs
            .iter()
            .map(|x| x.rel_sidecar.to_str().unwrap().to_string())
            .collect();
        // Component-wise order: "a" < "a-b" < "b" (a plain string sort would put "a-b/…" first).
        assert_eq!(
            rels,
            [
                "a/z.meta.json",
                "a-b/y.meta.json.gz",
                "b/x.meta.json",
                "c/w.meta.json"
            ]
        );
        assert!(d.runs[0].problem.as_deref().unwrap().contains("missing"));
        assert!(d.runs[1].problem.is_none());
        assert!(d.runs[3].problem.as_deref().unwrap().contains("both"));
        assert_eq!(d.orphans, [PathBuf::from("a/o.jsonl.gz")]);
        assert_eq!(d.warnings.len(), 1);
    }

    #[test]
    fn pairs_plain_rows_files_and_flags_two() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for f in [
            "p.meta.json",
            "p.jsonl",
            "g.meta.json",
            "g.jsonl.gz",
            "two.meta.json",
            "two.jsonl",
            "two.jsonl.gz",
            "none.meta.json",
            "o1.jsonl",
            "o2.jsonl",
            "o2.jsonl.gz",
        ] {
            touch(&r.join(f));
        }
        let d = discover(r).unwrap();
        let by = |name: &str| {
            d.runs
                .iter()
                .find(|x| x.rel_sidecar == Path::new(name))
                .unwrap()
        };
        let p = by("p.meta.json");
        assert_eq!(
            (p.rows_form, p.rel_rows.to_str()),
            (RowsForm::Plain, Some("p.jsonl"))
        );
        assert_eq!((p.rows_bytes, p.problem.as_deref()), (1, None));
        let g = by("g.meta.json");
        assert_eq!(
            (g.rows_form, g.rel_rows.to_str()),
            (RowsForm::Gzip, Some("g.jsonl.gz"))
        );
        let two = by("two.meta.json").problem.as_deref().unwrap();
        for both in ["two.jsonl.gz and ", "two.jsonl;"] {
            assert!(two.contains(both), "{two}");
        }
        let none = by("none.meta.json").problem.as_deref().unwrap();
        assert!(
            none.contains("missing") && none.contains("none.jsonl.gz nor none.jsonl exists"),
            "{none}"
        );
        let orphans: Vec<_> = d.orphans.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(orphans, ["o1.jsonl", "o2.jsonl", "o2.jsonl.gz"]);
        assert_eq!(
            orphan_detail(Path::new("a/o1.jsonl")),
            "rows file without a sidecar (o1.meta.json or o1.meta.json.gz): a game still running or killed; skipped"
        );
    }
}
