//! The master, host side: runs the master component (`host/master`) on the
//! node that hosts it, journals its events and serves its callers.
//!
//! * [`core`] — the component (or the same logic linked natively) behind
//!   one byte-level interface.
//! * [`store`] — journal segments and snapshots on disk; recovery.
//! * [`upgrade`] — another master build switched in on a running cluster:
//!   the checks, the journal's switch record, uploaded builds on disk.
//! * `shadow` — a second instance of the master that follows its events,
//!   so snapshots are serialized off the master's thread.
//! * [`standby`] — a copy of the master on the other back-end nodes, fed
//!   every committed entry, that a take-over starts from.
//! * [`service`] — the master thread, which hands its events to the node's
//!   replication (`crate::replication`); the [`MasterHandle`] every caller
//!   uses.

mod bindings;
pub mod core;
pub mod service;
mod shadow;
pub mod standby;
pub mod store;
#[cfg(test)]
mod testing;
pub mod upgrade;

pub use self::core::CoreKind;
pub use service::{
    MasterError, MasterHandle, MasterOptions, RecoveryReport, SnapshotSource, Warm, now_ms, start,
    start_warm,
};
