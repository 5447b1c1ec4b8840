//! The master, host side: runs the master component (`host/master-machine`) on the
//! node that hosts it, journals its events and serves its callers.
//!
//! From the bottom up (each imports only those above it in this list; the
//! journal segments and snapshots on disk are `crate::journal::durable`):
//!
//! * [`upgrade`] — which master build runs: the journal's switch record,
//!   the snapshot's build tag, uploaded builds on disk, the upgrade's codes.
//! * [`core`] — the component (or the same logic linked natively) behind
//!   one byte-level interface.
//! * [`handover`] — checking a build and handing a running state to it.
//! * `recovery` — a master brought up to date from a snapshot and the
//!   journal, or from a warm standby; the options a master starts with.
//! * `shadow` — a second instance of the master that follows its events,
//!   so snapshots are serialized off the master's thread.
//! * [`standby`] — a copy of the master on the other back-end nodes, fed
//!   every committed entry, that a take-over starts from.
//! * [`service`] — the master thread, which hands its events to the node's
//!   replication (`crate::replication`); the [`MasterHandle`] every caller
//!   uses.

pub mod core;
pub mod handover;
mod master_world;
mod recovery;
pub mod service;
mod shadow;
pub mod standby;
#[cfg(test)]
mod testing;
pub mod upgrade;

pub use self::core::CoreKind;
pub use recovery::{MasterOptions, StartError, Warm};
pub use service::{MasterHandle, RecoveryReport, SnapshotSource, start, start_warm};
