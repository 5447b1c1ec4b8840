//! Builds the workspace's guest crates (example jobs, test fixtures) for
//! `wasm32-wasip2`, so that a plain `cargo build` or `cargo test` has every
//! component it needs and no prebuilt `.wasm` lives in git.
//!
//! * The guests are built by a nested `cargo build --release` with its own
//!   target dir (`<target>/wasm-guests`): sharing the outer one can deadlock on
//!   cargo's lock, and one fixed dir (rather than `OUT_DIR`) lets the dev,
//!   test, clippy and release builds share a single guest build.
//! * If the `wasm32-wasip2` target is missing it is added with rustup; if that
//!   fails the build stops with the exact command to run.
//! * Jobs are built with Wasm SIMD (`-Ctarget-feature=+simd128`), as
//!   `cohort build` builds Rust jobs, so that the benches measure what users
//!   run; masters are built without it, as the master crate's own default.
//! * The host learns where the components are through `COHORT_GUESTS_DIR`.

use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

/// Master packages to build, as named in their Cargo.toml.
const MASTERS: &[&str] = &[
    "cohort-master-component",
    "fifo-master",
    "fixture-master-trap",
    "fixture-master-clock",
    "fixture-master-stale",
    "fixture-master-reformat",
];

/// Job packages to build, as named in their Cargo.toml.
const JOBS: &[&str] = &[
    "wordcount",
    "primes",
    "mandelbrot",
    "fixture-echo",
    "fixture-depth",
    "fixture-trap",
    "fixture-spin",
    "fixture-hog",
    "fixture-flood",
    "fixture-bigout",
    "fixture-wrong-world",
    "fixture-escape",
    "fixture-future-job",
    "fixture-legacy-job",
    "fixture-blobs",
    "fixture-foreign-import",
    "fixture-kernels",
    "fixture-http",
    "webhook",
];

/// What `cohort build` gives Rust jobs (see `host/src/build.rs`).
const JOB_RUSTFLAGS: &str = "-Ctarget-feature=+simd128";

/// Environment that must not leak from the outer build into the guest build:
/// host flags, a forced target, or clippy as the compiler wrapper (which
/// would change the guests' fingerprints and rebuild them every time).
const SCRUBBED_ENV: &[&str] = &[
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_BUILD_TARGET",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTC_WRAPPER",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
];

fn main() {
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir
        .parent()
        .expect("host/ has a parent")
        .to_path_buf();
    for watched in [
        "wit",
        "host/master-machine",
        "guest-sdk",
        "examples",
        "tests/fixtures",
        "Cargo.lock",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");

    ensure_target_installed();

    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| {
            if dir.is_relative() {
                workspace.join(dir)
            } else {
                dir
            }
        })
        .unwrap_or_else(|| workspace.join("target"))
        .join("wasm-guests");

    build_guests(&workspace, &target_dir, MASTERS, None);
    build_guests(&workspace, &target_dir, JOBS, Some(JOB_RUSTFLAGS));

    let out = target_dir.join(TARGET).join("release");
    for guest in MASTERS.iter().chain(JOBS) {
        let file = out.join(format!("{}.wasm", guest.replace('-', "_")));
        assert!(
            file.exists(),
            "guest build did not produce {}",
            file.display()
        );
    }
    println!("cargo:rustc-env=COHORT_GUESTS_DIR={}", out.display());
}

/// Builds `packages` for the guest target with `rustflags` (one nested
/// cargo run; different flags keep separate dependency builds in the same
/// target dir, so the two runs never rebuild each other's).
fn build_guests(workspace: &Path, target_dir: &Path, packages: &[&str], rustflags: Option<&str>) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace)
        .args(["build", "--release", "--target", TARGET]);
    for package in packages {
        command.args(["-p", package]);
    }
    for var in SCRUBBED_ENV {
        command.env_remove(var);
    }
    if let Some(flags) = rustflags {
        command.env("CARGO_ENCODED_RUSTFLAGS", flags);
    }
    command.env("CARGO_TARGET_DIR", target_dir);
    // Small components: no DWARF (the name section stays, so traps still
    // show function names in their Wasm backtrace).
    command
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the guest components: {e}"));
    if !status.success() {
        panic!("building the guest components for {TARGET} failed (see the cargo output above)");
    }
}

/// Makes sure the Rust standard library for `wasm32-wasip2` is installed,
/// installing it with rustup when it is not.
fn ensure_target_installed() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    if target_libdir_exists(&rustc) {
        return;
    }
    println!("cargo:warning=the {TARGET} target is missing; running `rustup target add {TARGET}`");
    let mut rustup = Command::new("rustup");
    rustup.args(["target", "add", TARGET]);
    // Install for the toolchain this build runs on, not rustup's default.
    if let Ok(toolchain) = std::env::var("RUSTUP_TOOLCHAIN") {
        rustup.args(["--toolchain", &toolchain]);
    }
    let installed = rustup.status().map(|s| s.success()).unwrap_or(false);
    if !installed || !target_libdir_exists(&rustc) {
        panic!(
            "\n\ncohort builds its job components for the `{TARGET}` target, which is not \
             installed and could not be added automatically.\nInstall it with:\n\n    \
             rustup target add {TARGET}\n\nthen build again.\n"
        );
    }
}

fn target_libdir_exists(rustc: &str) -> bool {
    let output = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", TARGET])
        .output();
    match output {
        Ok(out) if out.status.success() => {
            let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
            has_std_rlib(Path::new(&dir))
        }
        _ => false,
    }
}

/// The standard library's rlib carries a hash in its name (`libstd-<hash>.rlib`).
fn has_std_rlib(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries.flatten().any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with("libstd-") && name.ends_with(".rlib")
            })
        })
        .unwrap_or(false)
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("cargo sets {name} for build scripts"))
}
