//! One module per subcommand; each reads like the command's story.

pub mod merge;
pub mod pack;
pub mod shuffle;
pub mod validate;
