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
//! * [`blob_transfer`] — blobs copied to a majority of the back-end nodes
//!   on upload, and fetched by a node that lacks one.
//! * [`blob_gc`] — each node deletes its copies of the blobs the cluster
//!   no longer keeps (the master decides which).

pub mod blob_gc;
pub mod blob_s3;
pub mod blob_transfer;
pub mod history;
pub mod link;
pub mod module_fetch;
pub mod queries;
pub mod singleton;

#[cfg(test)]
mod wire_tests;
