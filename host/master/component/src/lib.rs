//! cohort's built-in master component: `wit/master.wit`'s world over
//! [`cohort_master::instance`], runnable jobs lined up by priority. Built
//! for `wasm32-wasip2` by `host/build.rs` and embedded in the binary; the
//! default master of every new cluster.

#![cfg(target_arch = "wasm32")]

use cohort_master::{Order, instance};

wit_bindgen::generate!({
    path: "../../../wit/master.wit",
    world: "master",
});

fn rejection(r: cohort_master::Rejection) -> Rejection {
    Rejection {
        code: r.code,
        message: r.message,
    }
}

struct BuiltIn;

impl Guest for BuiltIn {
    fn init(snapshot: Option<Vec<u8>>) -> Result<(), Rejection> {
        instance::init(snapshot.as_deref(), Order::Priority).map_err(rejection)
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

export!(BuiltIn);
