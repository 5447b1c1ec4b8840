//! The master's journal: durable, append-only, framed and checksummed.
//!
//! See [`log`] for the design notes; [`durable`] lays a node's journal,
//! snapshots and promise out in its data directory.

pub mod durable;
pub mod frame;
pub mod log;
pub mod storage;

pub use log::{Entry, Journal, JournalError, Recovered, Shape};
pub use storage::{FsStorage, MemStorage, Storage};
