//! Every example and every misbehaving fixture, run through the real runtime.
//! Each failing case is followed by a healthy job on the same runtime: one
//! bad module must never affect the next job.
//!
//! This file runs them with jobs on the runtime's threads;
//! `runtime_process.rs` runs the same cases in sandbox processes.

const ISOLATION: Isolation = Isolation::Thread;

include!("runtime/cases.rs");
