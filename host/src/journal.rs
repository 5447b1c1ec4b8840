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

/// An fsync slower than this is logged: it delays every acknowledgement
/// waiting for it (disks and virtual machines stall now and then).
pub const SLOW_SYNC: std::time::Duration = std::time::Duration::from_millis(50);
