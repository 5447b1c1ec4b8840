//! A custom cohort master: the built-in scheduler with one policy changed.
//! Runnable jobs are handed out first come first served; a job's
//! `priority` no longer lets it jump the line.
//!
//! It exports the same world as the built-in master (`wit/master.wit`) and
//! keeps its state and events byte for byte (the line is an index rebuilt
//! from the jobs, see `cohort_master::Order`), so it can be switched in on a
//! running cluster and switched back:
//!
//! ```text
//! cohort master upgrade target/wasm-guests/wasm32-wasip2/release/fifo_master.wasm
//! cohort master rollback
//! ```
//!
//! A master with a deeper change (new state, new events) is built the same
//! way, from a fork of `host/master`: keep it deterministic (no clock, no
//! randomness, no I/O; time arrives as `now-ms`), make it read the running
//! master's snapshot, and `cohort master upgrade` checks the rest.

#![cfg(target_arch = "wasm32")]

use cohort_master::{Order, instance};

wit_bindgen::generate!({
    path: "../../wit/master.wit",
    world: "master",
});

fn rejection(r: cohort_master::Rejection) -> Rejection {
    Rejection {
        code: r.code,
        message: r.message,
    }
}

struct FifoMaster;

impl Guest for FifoMaster {
    fn init(snapshot: Option<Vec<u8>>) -> Result<(), Rejection> {
        // The one difference from the built-in master.
        instance::init(snapshot.as_deref(), Order::Fifo).map_err(rejection)
    }

    fn decide(now_ms: u64, command: Vec<u8>) -> Result<Decision, Rejection> {
        let (events, reply) = instance::decide(now_ms, &command).map_err(rejection)?;
        Ok(Decision { events, reply })
    }

    fn apply(events: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, Rejection> {
        instance::apply(&events).map_err(rejection)
    }

    fn snapshot() -> Vec<u8> {
        instance::snapshot()
    }

    fn query(now_ms: u64, query: Vec<u8>) -> Result<Vec<u8>, Rejection> {
        instance::query(now_ms, &query).map_err(rejection)
    }
}

export!(FifoMaster);
