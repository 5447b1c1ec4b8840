//! cohort: a job coordinator that runs WebAssembly jobs on a cluster.
//!
//! This crate is the `cohort` binary and its library. Modules:
//!
//! * [`runtime`] — the sandboxed wasmtime runtime that runs job modules.
//! * [`exec`] — `cohort exec`: run one module locally, no cluster.
//! * [`demo`] — `cohort demo`: render a picture from many mandelbrot jobs.
//! * [`guests`] — the example job components built into this binary.
//! * [`journal`] — the append-only, checksummed journal the master will
//!   event-source its state into.

pub mod api;
pub mod cli;
pub mod client;
pub mod demo;
pub mod exec;
pub mod guests;
pub mod journal;
pub mod master;
pub mod metrics;
pub mod modules;
pub mod node;
pub mod runtime;
pub mod worker;
