//! The pack as a library.

pub mod verify;
