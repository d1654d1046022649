//! The input side: raw Macroxue drops (sidecars + gzipped JSONL rows). Knows JSON and gzip,
//! nothing about shards.

pub mod discover;
pub mod gzip;
pub mod row;
pub mod run;
pub mod sidecar;
