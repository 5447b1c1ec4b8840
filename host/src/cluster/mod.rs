//! The cluster: membership, the master as a singleton, the proxy that
//! reaches it, the replicated journal, and modules across nodes.
//!
//! * [`membership`] — chitchat gossip behind a watch of the live view (and
//!   an in-memory twin for tests); age order decides who hosts the master.
//! * [`singleton`] — starts the master on the oldest live back-end node and
//!   nowhere else.
//! * [`replica`] — every back-end node's copy of the master's journal and
//!   the epoch fence (the master's side is `master::replicate`).
//! * [`takeover`] — claiming a new epoch and adopting the most advanced
//!   journal before a node starts the master.
//! * [`handover`] — moving the master's state to the next back-end node
//!   when its host leaves.
//! * [`link`] — the singleton proxy every node uses to reach the master.
//! * [`modules`] — uploads replicated to every back-end node; fetch on
//!   first use elsewhere.

pub mod handover;
pub mod link;
pub mod membership;
pub mod modules;
pub mod replica;
pub mod singleton;
pub mod takeover;

#[cfg(test)]
mod wire_tests;
