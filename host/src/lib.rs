//! cohort: a job coordinator that runs WebAssembly jobs on a cluster.
//!
//! This crate is the `cohort` binary and its library. Its modules, in
//! layers from the top down; each imports only those on lower lines (the
//! `layers` test checks it; ARCHITECTURE.md, "The map", draws it):
//!
//! * [`cli`], [`demo`], [`node`] — the client commands, `cohort demo`, and
//!   `cohort node`: everything below in one process.
//! * [`api`] — the HTTP API, public and node-to-node, from one route table.
//! * [`worker`] — pulls attempts from the master and runs them.
//! * [`cluster`] — the master as a singleton, the proxy that reaches it
//!   from any node, modules across nodes; [`metrics`] — `/metrics`;
//!   [`replay`] — `cohort replay`.
//! * [`master`] — the host side of the master: its component, the master
//!   thread, recovery, upgrades, standbys.
//! * [`replication`] — the driver of the replication protocol
//!   (`cohort-replication`): the journal replicated to the back-end nodes.
//! * [`peer`] — bounded HTTP exchanges with other cohort processes;
//!   [`membership`] — who is in the cluster (chitchat gossip).
//! * [`security`] — the cluster key (sealed gossip and node-to-node
//!   bodies), API tokens and TLS.
//! * [`exec`] — `cohort exec`: run one module locally, no server;
//!   [`modules`] — uploaded job modules, content-addressed on disk;
//!   [`fault`] — network partitions for fault tests.
//! * [`runtime`] — the sandboxed wasmtime runtime that runs job modules;
//!   [`journal`] — the append-only, checksummed journal, snapshots on disk;
//!   [`build`] — `cohort build`, `new` and `toolchain`.
//! * [`contract`] — what every layer knows of the master; [`limits`] —
//!   every limit of the crate (sizes, counts, timeouts), in one place;
//!   [`codes`] — every error code; [`events`] — what a node reports
//!   happening; [`guests`] — the components built into this binary.
//!   [`client`] is the Rust client of the HTTP API, which the CLI uses.

pub mod api;
pub mod blobs;
pub mod build;
pub mod cli;
/// The Rust client of the HTTP API (the `cohort-client` crate), which the
/// CLI, the tests and the benchmarks use.
pub use cohort_client as client;
pub mod cluster;
pub mod codes;
pub mod contract;
pub mod demo;
pub mod events;
pub mod exec;
pub mod fault;
pub mod guests;
pub mod journal;
pub mod labels;
#[cfg(test)]
mod layers;
pub mod limits;
pub mod master;
pub mod membership;
pub mod metrics;
pub mod modules;
pub mod node;
pub mod peer;
pub mod replay;
pub mod replication;
pub mod runtime;
pub mod security;
pub mod telemetry;
pub mod worker;

/// The section titled `heading` (`"\n## Title\n"`) of the document `file`
/// (a path from the repository's root), up to the next `## ` heading: for
/// tests that keep documented tables and the code in step.
#[cfg(test)]
pub(crate) fn doc_section(file: &str, heading: &str) -> &'static str {
    let doc: &'static str = match file {
        "docs/http-api.md" => include_str!("../../docs/http-api.md"),
        other => panic!("{other:?} is not a document the tests include"),
    };
    doc.split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("{file} has a section {heading:?}"))
        .split("\n## ")
        .next()
        .unwrap_or_default()
}
