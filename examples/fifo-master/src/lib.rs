//! A custom cohort master: the built-in scheduler with one policy changed.
//! Runnable jobs are handed out first come first served; a job's
//! `priority` no longer lets it jump the line.
//!
//! It exports the same world as the built-in master (`wit/master.wit`'s
//! `master-parts`) and keeps its state and events byte for byte (the line
//! is an index rebuilt from the jobs, see `cohort_master::Order`), so it
//! can be switched in on a running cluster and switched back:
//!
//! ```text
//! cohort master upgrade target/wasm-guests/wasm32-wasip2/release/fifo_master.wasm
//! cohort master rollback
//! ```
//!
//! A master with a deeper change (new state, new events) is built the same
//! way, from a fork of `host/master-machine`: keep it deterministic (no clock, no
//! randomness, no I/O; time arrives as `now-ms`), make it read the running
//! master's snapshot, and `cohort master upgrade` checks the rest.

#![cfg(target_arch = "wasm32")]

use cohort_master::{Order, guest_over_instance};

wit_bindgen::generate!({
    path: "../../wit/master.wit",
    world: "master-parts",
});

struct FifoMaster;

// The one difference from the built-in master: the order.
guest_over_instance!(FifoMaster, Order::Fifo);

export!(FifoMaster);
