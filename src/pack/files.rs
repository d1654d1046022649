//! The names of a pack's files, and which files of a folder they are: the shards
//! (`steps.npy`, `steps-NNNNN.npy`), `metadata.db` and `valuation_types.json`, and the files of
//! companion families (`NAME.npy`, `NAME-NNNNN.npy`). Naming rules only: the modules that
//! read, write and publish packs all ask here, and this module asks none of them.

use std::path::Path;

use crate::error::{Context, Result};

use crate::format::{metadata, valuation};

/// The folder inside a pack's folder where a writer builds what it publishes
/// ([`crate::pack::publish`]).
pub const STAGING: &str = ".dataset-packer-staging";

/// The manifest in [`STAGING`] that makes a staged pack complete: from the moment it is
/// written, the publish swaps the files in (and a killed one is finished by the next writer).
pub const COMPLETE: &str = ".complete";

/// Fails, of kind `Unsupported`, when `path` is written as a URL (`s3://bucket/pack`,
/// `gs://…`, `https://…`: a scheme of letters, digits, `+`, `-` or `.` before `://`), where a
/// local folder is all that can be taken (a shuffle's input, a pack changed in place, a
/// staged output): a URL taken as a path would be a folder named `s3:` in the working
/// directory. Reading and publishing packs in object storage go through `pack::open::locate`
/// and `pack::remote_output` instead.
pub fn refuse_url(path: &Path) -> Result<()> {
    let text = path.to_string_lossy();
    let Some((scheme, _)) = text.split_once("://") else {
        return Ok(());
    };
    let is_scheme = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if is_scheme {
        return Err(crate::error::err!(
            Unsupported,
            "{text}: a URL ({scheme}://) where this takes a local folder only (copy the pack \
             to a local folder first: `dataset-packer export {text} --format pack --output DIR`)"
        ));
    }
    Ok(())
}

/// Whether `name` is a file a pack consists of (and so a file this tool may replace).
pub fn is_pack_file(name: &str) -> bool {
    is_shard_name(name)
        || name == metadata::FILE_NAME
        || name == valuation::FILE_NAME
        || ["-wal", "-shm", "-journal"]
            .iter()
            .any(|s| name.strip_prefix(metadata::FILE_NAME) == Some(s))
}

/// `steps.npy` or `steps-NNNNN.npy` (exactly five digits).
pub fn is_shard_name(name: &str) -> bool {
    name == "steps.npy"
        || name
            .strip_prefix("steps-")
            .and_then(|s| s.strip_suffix(".npy"))
            .is_some_and(|d| d.len() == 5 && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `name` can name a companion family: `[a-z][a-z0-9_]*`, not `steps`.
pub fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && name != "steps"
}

/// The family and shard index of a companion file name: `NAME-NNNNN.npy` → (NAME, Some(N)),
/// `NAME.npy` → (NAME, None); None for any other name (and for the pack's own shards).
pub fn parse_file_name(file: &str) -> Option<(&str, Option<u32>)> {
    let stem = file.strip_suffix(".npy")?;
    if let Some((name, digits)) = stem.rsplit_once('-')
        && digits.len() == 5
        && digits.bytes().all(|b| b.is_ascii_digit())
        && valid_name(name)
    {
        return Some((name, Some(digits.parse().expect("five digits"))));
    }
    valid_name(stem).then_some((stem, None))
}

/// Every file in `dir` named like a companion file (lined up with the shards or not), sorted:
/// for commands that must not orphan them.
pub fn companion_files(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if !is_shard_name(&name) && parse_file_name(&name).is_some() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// The files in `dir` of the companion family `name` (lined up with the shards or not), sorted.
pub fn family_files(dir: &Path, name: &str) -> Result<Vec<String>> {
    Ok(companion_files(dir)?
        .into_iter()
        .filter(|f| parse_file_name(f).is_some_and(|(n, _)| n == name))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_refused_and_paths_are_not() {
        for url in [
            "s3://team/packs/d6",
            "gs://b/p",
            "https://host/p",
            "az+x.y-z://a",
        ] {
            let e = refuse_url(Path::new(url)).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Unsupported);
            assert!(e.to_string().starts_with(url), "{e}");
        }
        for path in [
            "packs/d6", "./s3:/d6", "/data/p", "a b://c", "://x", "9s://x",
        ] {
            assert!(refuse_url(Path::new(path)).is_ok(), "{path}");
        }
    }

    #[test]
    fn names() {
        assert_eq!(
            parse_file_name("embeddings-00003.npy"),
            Some(("embeddings", Some(3)))
        );
        assert_eq!(parse_file_name("emb_2.npy"), Some(("emb_2", None)));
        assert_eq!(parse_file_name("steps-00000.npy"), None);
        assert_eq!(parse_file_name("Embeddings.npy"), None);
        assert_eq!(parse_file_name("x-1.npy"), None);
        assert_eq!(parse_file_name("2x.npy"), None);
        assert_eq!(parse_file_name("a.b.npy"), None);
        assert!(!valid_name("steps") && valid_name("steps2") && !valid_name(""));
    }

    #[test]
    fn knows_its_files() {
        assert!(is_shard_name("steps.npy"));
        assert!(is_shard_name("steps-00042.npy"));
        assert!(!is_shard_name("steps-0042.npy"));
        assert!(!is_shard_name("steps-old.npy"));
        assert!(is_pack_file("metadata.db-wal"));
        assert!(!is_pack_file("notes.txt"));
    }
}
