//! Naming versions of a pack wherever it is: the tag functions of [`super::versions`], which
//! change a local folder in place, made to work on a URL too, as a commit of its own
//! ([`super::remote_output::change_at`]).

use std::path::Path;

use super::remote_output::change_at;
use super::versions::{self, VersionSpec};
use crate::error::Result;

/// Names the version `spec` names of the pack at `pack` (a folder or a URL) `name`, and
/// returns its number. What `dataset-packer tag PACK NAME` does; refused when the name is on
/// another version (see [`move_tag`]).
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// use dataset_packer::{tag, VersionSpec};
/// assert_eq!(tag(fixture.path(), "paper", &VersionSpec::Latest)?, 1);
/// # Ok(()) }
/// ```
pub fn tag(pack: impl AsRef<Path>, name: &str, spec: &VersionSpec) -> Result<u32> {
    change_at(pack.as_ref(), |dir| versions::tag(dir, name, spec))
}

/// [`tag`], moving the name from the version it is on, if any.
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// use dataset_packer::{move_tag, tag, VersionSpec};
/// tag(fixture.path(), "best", &VersionSpec::Latest)?;
/// assert_eq!(move_tag(fixture.path(), "best", &VersionSpec::Number(1))?, 1);
/// # Ok(()) }
/// ```
pub fn move_tag(pack: impl AsRef<Path>, name: &str, spec: &VersionSpec) -> Result<u32> {
    change_at(pack.as_ref(), |dir| versions::move_tag(dir, name, spec))
}

/// Removes the tag `name` from the pack at `pack` (a folder or a URL); returns the version it
/// named.
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack()?;
/// use dataset_packer::{tag, untag, VersionSpec};
/// tag(fixture.path(), "old", &VersionSpec::Latest)?;
/// assert_eq!(untag(fixture.path(), "old")?, 1);
/// # Ok(()) }
/// ```
pub fn untag(pack: impl AsRef<Path>, name: &str) -> Result<u32> {
    change_at(pack.as_ref(), |dir| versions::untag(dir, name))
}
