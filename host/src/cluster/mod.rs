//! The cluster: membership, the master as a singleton, the proxy that
//! reaches it, the replicated journal, and modules across nodes.
//!
//! * [`membership`] — chitchat gossip behind a watch of the live view (and
//!   an in-memory twin for tests); age order decides who hosts the master.
//! * [`singleton`] — starts the master on the oldest live back-end node and
//!   nowhere else.
//!   (The replicated journal, take-over and hand-over are
//!   `crate::replication`.)
//! * [`link`] — the singleton proxy every node uses to reach the master.
//! * [`modules`] — uploads replicated to every back-end node; fetch on
//!   first use elsewhere.

pub mod history;
pub mod link;
pub mod membership;
pub mod modules;
pub mod singleton;

#[cfg(test)]
mod wire_tests;
