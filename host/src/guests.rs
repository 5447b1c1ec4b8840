//! Job components built from this workspace's `examples/` by `build.rs` and
//! embedded in the binary, so `cohort demo` needs nothing on disk.

/// The `mandelbrot` example: renders one tile of the Mandelbrot set as PNG.
pub const MANDELBROT: &[u8] =
    include_bytes!(concat!(env!("COHORT_GUESTS_DIR"), "/mandelbrot.wasm"));

/// The built-in master component (`host/master-machine/component`, world
/// `cohort:master/master`).
pub const MASTER: &[u8] = include_bytes!(concat!(
    env!("COHORT_GUESTS_DIR"),
    "/cohort_master_component.wasm"
));
