//! The job world's generated bindings. This is the only place `bindgen!` is
//! called for `wit/job.wit`.

wasmtime::component::bindgen!({
    path: "../wit/job.wit",
    world: "job",
    imports: { default: trappable },
    exports: { default: async },
});
