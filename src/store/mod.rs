//! Packs in object storage, which every command reads and writes through: where a pack is
//! ([`Location`]: a folder or an `s3://`, `gs://`, `az://`, `http(s)://` URL), a blocking
//! client configured from the environment as the AWS tools read it ([`Store`]), a bounded
//! local cache that the processes of a node share ([`Cache`]), and a pack's table of commits:
//! objects written once, versions committed with a create-only write ([`Commit`],
//! [`publish_commit`]).
//!
//! The store knows objects, not packs: it imports the format's file names and nothing of
//! the pack reader, so that the reader can be built on it.

mod cache;
mod client;
mod config;
mod gc;
mod location;
mod publish;
mod table;
mod workdirs;

pub use cache::{Cache, Entry};
pub use client::{Listed, Object, Store, StoreOptions, Transfers};
pub use config::{
    CACHE_LIMIT_VAR, CACHE_VAR, CacheConfig, cache_config, set_cache_config, set_single_writer,
    single_writer,
};
pub use gc::{GcOptions, GcSummary, gc, parse_age};
pub use location::{Location, Scheme, Url};
pub use publish::{CommitOptions, PublishSummary, publish_commit};
pub use table::{
    Commit, Committed, FileRef, Head, OBJECTS, PROBES, VERSIONS, WriterId,
    check_conditional_writes, commit_numbers, conflict, head, latest_commit, read_commit,
    read_small_file, try_commit,
};
pub(crate) use workdirs::{fresh_staging, new_view_dir, sweep_stale_staging, sweep_stale_views};

use crate::error::{Error, ErrorKind, Result};

/// A size in bytes, as a user writes it: `50GiB`, `512MiB`, `1.5G`, `4096`, `10GB`
/// (K/M/G/T and KiB… are powers of 1024; KB, MB, GB, TB powers of 1000).
///
/// ```
/// use dataset_packer::store::parse_size;
/// assert_eq!(parse_size("50GiB")?, 50 << 30);
/// assert_eq!(parse_size("1.5M")?, 3 << 19);
/// assert_eq!(parse_size("2GB")?, 2_000_000_000);
/// assert!(parse_size("lots").is_err());
/// # Ok::<(), dataset_packer::Error>(())
/// ```
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let invalid = || {
        Error::new(
            ErrorKind::InvalidInput,
            format!("{text:?} is not a size like 50GiB, 512MiB or 1000000"),
        )
    };
    let value: f64 = number.parse().map_err(|_| invalid())?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(invalid()),
    };
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(invalid());
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size(" 2 KiB ").unwrap(), 2048);
        assert_eq!(parse_size("1t").unwrap(), 1 << 40);
        assert_eq!(parse_size("3MB").unwrap(), 3_000_000);
        for bad in ["", "GiB", "1.2.3G", "5 parsecs", "-1G", "1e400"] {
            let err = parse_size(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad}");
        }
    }
}
