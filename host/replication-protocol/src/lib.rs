//! cohort's replication core.
//!
//! The master's journal is replicated to every back-end node. This crate
//! holds the protocol that does it, as a sans-IO state machine
//! ([`Replicator`]): journal replication and commit, epochs and the fence,
//! take-over by the node that should host the master (adopting the most
//! advanced journal a majority of voters holds), hand-over, catch-up of a
//! lagging or new replica, step-down, and the journaled voter set.
//!
//! How any node reaches the master through whichever node hosts it is
//! decided here too ([`proxy::Call`]): the node's proxy and the simulator
//! run the same retry rules.
//!
//! Networking, disk and clocks are the caller's: messages come in through
//! `step`, time through `tick`, and every input returns the messages to
//! send and the effects to apply. The same code runs in the node and in
//! the deterministic simulator (`sim`, built for tests and with the
//! `sim` feature), which runs many nodes over a network that drops,
//! delays, duplicates and partitions, with crashes that lose unsynced
//! writes, pauses and clock skew, and checks after each seed that nothing
//! acknowledged was lost, no request made two jobs, one master led each
//! epoch and every journal converged. Its seeded generator ([`rng::Rng`])
//! is public so the host's fault-injection tests draw from the same one.

pub mod message;
pub mod node;
pub mod proxy;
pub mod rng;
pub mod shape;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod storage;

pub use message::Message;
pub use node::{Effect, Options, Output, ProposeError, Replicator, TakeOverError};
pub use shape::Shape;
pub use storage::{
    Entry, MemStorage, NodeId, Payload, Snapshot, Storage, StorageError, take_within,
};
