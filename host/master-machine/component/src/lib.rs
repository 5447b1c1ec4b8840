//! cohort's built-in master component: `wit/master.wit`'s `master-parts`
//! world over [`cohort_master::instance`], runnable jobs lined up by
//! priority. Built for `wasm32-wasip2` by `host/build.rs` and embedded in
//! the binary; the default master of every new cluster.

#![cfg(target_arch = "wasm32")]

use cohort_master::{Order, guest_over_instance};

wit_bindgen::generate!({
    path: "../../../wit/master.wit",
    world: "master-parts",
});

struct BuiltIn;

guest_over_instance!(BuiltIn, Order::Priority);

export!(BuiltIn);
