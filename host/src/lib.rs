//! cohort: a job coordinator that runs WebAssembly jobs on a cluster.
//!
//! This crate is the `cohort` binary and its library. Modules:
//!
//! * [`runtime`] — the sandboxed wasmtime runtime that runs job modules.
//! * [`master`] — the host side of the master: its component, the
//!   group-committing journal writer, snapshots and recovery.
//! * [`journal`] — the append-only, checksummed journal of master events.
//! * [`worker`] — pulls attempts from the master and runs them.
//! * [`modules`] — uploaded job modules, content-addressed on disk.
//! * [`api`] — the HTTP API; [`client`] and [`cli`] — its client and the
//!   CLI commands built on it; [`metrics`] — `/metrics`.
//! * [`node`] — `cohort node`: everything above in one process;
//!   [`events`] — what it reports happening, machine-readable.
//! * [`peer`] — bounded HTTP exchanges with other cohort processes.
//! * [`security`] — the cluster key (sealed gossip and node-to-node
//!   bodies), API tokens and TLS.
//! * [`exec`] — `cohort exec`: run one module locally, no server.
//! * [`demo`] — `cohort demo`: render a picture from many mandelbrot jobs.
//! * [`guests`] — the components built into this binary (the master and the
//!   mandelbrot example).

pub mod api;
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
#[cfg(test)]
mod layers;
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
