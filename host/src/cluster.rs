//! The cluster: the master as a singleton, the proxy that reaches it, and
//! modules across nodes. (Who is alive is `crate::membership`, a layer
//! below, which replication uses too.)
//!
//! * [`singleton`] — starts the master on the oldest live back-end node and
//!   nowhere else.
//!   (The replicated journal, take-over and hand-over are
//!   `crate::replication`.)
//! * [`link`] — the singleton proxy every node uses to reach the master.
//! * [`module_fetch`] — uploads replicated to every back-end node; fetch on
//!   first use elsewhere.

pub mod blob_transfer;
pub mod history;
pub mod link;
pub mod module_fetch;
pub mod queries;
pub mod singleton;

#[cfg(test)]
mod wire_tests;
