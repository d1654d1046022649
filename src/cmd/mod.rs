//! One module per subcommand; each reads like the command's story.

pub mod attach;
pub mod detach;
pub mod export;
pub mod gc;
pub mod merge;
pub mod pack;
pub mod pack_update;
pub mod progress;
pub mod report;
pub mod show;
pub mod shuffle;
pub mod stats;
pub mod tag;
pub mod validate;
pub mod versions;
pub mod view;
