//! The job world's generated bindings. This is the only place `bindgen!` is
//! called for the job contract: `wit/job.wit` (`cohort:job@0.2.0`, what
//! jobs are built against) and, in [`legacy`], the frozen
//! `wit/legacy/job-0.1.0.wit`, whose `host` interface the linker also
//! provides so that modules built against 0.1.0 keep running.
//!
//! `wasi:io` is wasmtime-wasi's own binding: the streams `blobs` hands out
//! are the resources every other WASI stream is, read and written through
//! the `wasi:io/streams` the linker already holds.

wasmtime::component::bindgen!({
    path: ["../wit/deps/io.wit", "../wit/job.wit"],
    world: "cohort:job/job",
    imports: { default: trappable },
    exports: { default: async },
    with: {
        "wasi:io": wasmtime_wasi::p2::bindings::io,
    },
});

/// `cohort:job@0.1.0`: only its `host` interface is linked (its `run`
/// export has the type 0.2.0's has, so one [`JobPre`] serves both).
pub mod legacy {
    wasmtime::component::bindgen!({
        path: "../wit/legacy/job-0.1.0.wit",
        world: "job",
        imports: { default: trappable },
        exports: { default: async },
    });
}
