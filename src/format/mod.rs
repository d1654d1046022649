//! The pack format: the contract in the pack-format spec, with no CLI concerns.

pub mod blocks;
pub mod board;
pub mod dtype;
pub mod fingerprint;
pub mod metadata;
pub mod npy;
pub mod row;
pub mod search;
pub mod valuation;
