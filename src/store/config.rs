//! Where the node's cache of remote files lives and how large it may grow: from the
//! environment (`DATASET_PACKER_CACHE`, `DATASET_PACKER_CACHE_LIMIT`), or set once for the
//! process by a program (the command line's `--cache` and `--cache-limit` do this).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use super::cache::Cache;
use super::parse_size;
use crate::error::{Context, Result};

/// The variable naming the cache folder (default: [`Cache::default_dir`]).
pub const CACHE_VAR: &str = "DATASET_PACKER_CACHE";
/// The variable holding the cache's size limit, in bytes or as `50GiB`.
pub const CACHE_LIMIT_VAR: &str = "DATASET_PACKER_CACHE_LIMIT";

/// The cache folder and its size limit.
///
/// ```
/// use dataset_packer::store::CacheConfig;
///
/// let config = CacheConfig::from_env()?.limit(8 << 30);
/// assert_eq!(config.limit, 8 << 30);
/// # Ok::<(), dataset_packer::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// The cache folder (shared by every process of the node that names it).
    pub dir: PathBuf,
    /// The most bytes the cache may hold.
    pub limit: u64,
}

impl CacheConfig {
    /// The limit when none is given: 50 GiB.
    pub const DEFAULT_LIMIT: u64 = 50 << 30;

    /// The configuration the environment gives: `DATASET_PACKER_CACHE` (else
    /// [`Cache::default_dir`]) and `DATASET_PACKER_CACHE_LIMIT` (else
    /// [`CacheConfig::DEFAULT_LIMIT`]).
    pub fn from_env() -> Result<CacheConfig> {
        let dir = match std::env::var_os(CACHE_VAR).filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => Cache::default_dir()?,
        };
        let limit = match std::env::var(CACHE_LIMIT_VAR) {
            Ok(text) if !text.trim().is_empty() => {
                parse_size(&text).with_context(|| format!("{CACHE_LIMIT_VAR}={text}"))?
            }
            _ => CacheConfig::DEFAULT_LIMIT,
        };
        Ok(CacheConfig { dir, limit })
    }

    /// The same with another folder.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> CacheConfig {
        self.dir = dir.into();
        self
    }

    /// The same with another limit.
    pub fn limit(mut self, limit: u64) -> CacheConfig {
        self.limit = limit;
        self
    }
}

static PROCESS_CONFIG: OnceLock<CacheConfig> = OnceLock::new();

/// Sets the cache configuration of this process, before anything reads a remote pack (the
/// command line calls it with `--cache` / `--cache-limit`); later calls change nothing and
/// return false.
pub fn set_cache_config(config: CacheConfig) -> bool {
    PROCESS_CONFIG.set(config).is_ok()
}

/// The cache configuration of this process: the one [`set_cache_config`] set, else
/// [`CacheConfig::from_env`].
pub fn cache_config() -> Result<CacheConfig> {
    match PROCESS_CONFIG.get() {
        Some(config) => Ok(config.clone()),
        None => CacheConfig::from_env(),
    }
}

static SINGLE_WRITER: AtomicBool = AtomicBool::new(false);

/// Says that no other process writes the packs this process writes to object storage (the
/// command line's `--single-writer`), so that a commit to a store that ignores create-only
/// writes is made anyway instead of refused ([`crate::store::check_conditional_writes`]).
///
/// ```
/// use dataset_packer::store::{set_single_writer, single_writer};
/// set_single_writer(true);
/// assert!(single_writer());
/// ```
pub fn set_single_writer(yes: bool) {
    SINGLE_WRITER.store(yes, Ordering::Relaxed);
}

/// Whether [`set_single_writer`] said so.
pub fn single_writer() -> bool {
    SINGLE_WRITER.load(Ordering::Relaxed)
}
