//! Write a cohort job as one Rust function.
//!
//! A cohort job is a WebAssembly component that turns input bytes into output
//! bytes. This crate hides the component-model glue: mark one function with
//! [`#[job]`](job), build the crate as a `cdylib` for `wasm32-wasip2`, and the
//! resulting `.wasm` file is a job module that any cohort node can run.
//!
//! ```no_run
//! use cohort_guest::{Json, JobError, job, progress};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize)]
//! struct Request {
//!     numbers: Vec<u64>,
//! }
//!
//! #[derive(Serialize)]
//! struct Response {
//!     sum: u64,
//! }
//!
//! #[job]
//! fn run(Json(request): Json<Request>) -> Result<Json<Response>, JobError> {
//!     if request.numbers.is_empty() {
//!         return Err(JobError::new("empty", "give me at least one number"));
//!     }
//!     cohort_guest::info!("summing {} numbers", request.numbers.len());
//!     let sum = request.numbers.iter().sum();
//!     progress(1.0, "done");
//!     Ok(Json(Response { sum }))
//! }
//! ```
//!
//! with this `Cargo.toml`:
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! cohort-guest = "0.1"
//! serde = { version = "1", features = ["derive"] }
//! ```
//!
//! and build it with plain cargo (no other tool needed):
//!
//! ```sh
//! rustup target add wasm32-wasip2
//! cargo build --release --target wasm32-wasip2
//! cohort exec target/wasm32-wasip2/release/my_job.wasm --input request.json
//! ```
//!
//! # Inputs and outputs
//!
//! The job function takes one argument of a type implementing [`FromInput`]
//! (`Vec<u8>`, `String`, or [`Json<T>`]) and returns `Result<O, E>` where `O`
//! implements [`IntoOutput`] (the same three) and `E` converts into a
//! [`JobError`]. A malformed input becomes the job error `bad_input`.
//!
//! # Logs, progress, checkpoints
//!
//! [`log!`] (and [`info!`], [`warn!`], ...) append to the job's log; so does
//! anything printed to stdout or stderr. [`progress`] reports how far the job
//! has come. [`checkpoint`] saves state that a retry of the same job, possibly
//! on another machine, reads back with [`resume_state`]: a long job that
//! checkpoints does not start over when its worker dies.
//!
//! # Blobs
//!
//! [`blobs`] reads the large data a job was given and writes its own, as
//! streams ([`std::io::Read`], [`std::io::Write`]): `blobs::open(blobs::INPUT)`
//! for the job's input blob, `blobs::create("out.csv")` for an output, kept
//! as a blob when the job succeeds. Memory stays bounded however large the
//! data.
//!
//! # Outbound HTTP
//!
//! [`http`] makes blocking HTTP(S) calls (`http::get`, `http::post`,
//! `http::Request`). A node lets a job reach only the URLs its operator
//! granted to it; any other call fails with `http_denied`.
//!
//! # Execution model
//!
//! A job may be run more than once (cohort retries attempts whose worker died
//! or whose deadline passed), so it should be idempotent: the same input gives
//! the same output. It runs with no filesystem, no environment variables and
//! no network beyond the HTTP grants of its deployment, under memory and time
//! limits set by the node.

#![deny(missing_docs)]

// Lets the generated bindings and the `#[job]` expansion name this crate
// as `::cohort_guest` from inside it too.
extern crate self as cohort_guest;

use serde::{Serialize, de::DeserializeOwned};
use std::fmt;

/// Marks the function that is this component's job. See the crate docs.
pub use cohort_guest_macros::job;

pub mod blobs;
pub mod http;

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        // `job.wit` alone, with the one package it uses: `wit/` as a
        // directory would also hold `master.wit`, another package.
        path: ["../wit/deps/io.wit", "../wit/job.wit"],
        world: "cohort:job/job@0.2.0",
        // `wasi:io` is the `wasip2` crate's, as for `http`: one binding of
        // each stream type in a job, whichever part of it uses them.
        with: {
            "wasi:io/error@0.2.12": ::wasip2::io::error,
            "wasi:io/poll@0.2.12": ::wasip2::io::poll,
            "wasi:io/streams@0.2.12": ::wasip2::io::streams,
        },
        pub_export_macro: true,
        export_macro_name: "__export_job",
        default_bindings_module: "::cohort_guest::bindings",
        runtime_path: "::cohort_guest::__private::wit_bindgen::rt",
    });
}

use bindings::cohort::job::host;
use bindings::cohort::job::types::Level as WitLevel;

/// Why a job failed: a short machine-readable `code` and a human `message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobError {
    /// A short machine-readable code such as `bad_input`.
    pub code: String,
    /// A human-readable explanation.
    pub message: String,
}

impl JobError {
    /// A job error with the given code and message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }

    /// The input could not be understood (code `bad_input`).
    pub fn bad_input(message: impl fmt::Display) -> Self {
        Self::new("bad_input", message.to_string())
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for JobError {}

/// A failed read or write (of a [`blobs`] stream, say) fails the job with
/// the code `io_error`, so that `?` works on it in a `#[job]` function.
impl From<std::io::Error> for JobError {
    fn from(error: std::io::Error) -> Self {
        JobError::new("io_error", error.to_string())
    }
}

/// A value carried as JSON: as an input it is parsed from the input bytes,
/// as an output it is serialized into the output bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Json<T>(pub T);

/// Types a job can take as its input.
pub trait FromInput: Sized {
    /// Converts the raw input bytes, or explains why they are not valid.
    fn from_input(bytes: Vec<u8>) -> Result<Self, JobError>;
}

/// Types a job can return as its output.
pub trait IntoOutput {
    /// Converts the output into the bytes the job returns.
    fn into_output(self) -> Result<Vec<u8>, JobError>;
}

impl FromInput for Vec<u8> {
    fn from_input(bytes: Vec<u8>) -> Result<Self, JobError> {
        Ok(bytes)
    }
}

impl FromInput for String {
    fn from_input(bytes: Vec<u8>) -> Result<Self, JobError> {
        String::from_utf8(bytes)
            .map_err(|e| JobError::bad_input(format!("input is not UTF-8: {e}")))
    }
}

impl<T: DeserializeOwned> FromInput for Json<T> {
    fn from_input(bytes: Vec<u8>) -> Result<Self, JobError> {
        serde_json::from_slice(&bytes)
            .map(Json)
            .map_err(|e| JobError::bad_input(format!("input is not the expected JSON: {e}")))
    }
}

impl IntoOutput for Vec<u8> {
    fn into_output(self) -> Result<Vec<u8>, JobError> {
        Ok(self)
    }
}

impl IntoOutput for String {
    fn into_output(self) -> Result<Vec<u8>, JobError> {
        Ok(self.into_bytes())
    }
}

impl<T: Serialize> IntoOutput for Json<T> {
    fn into_output(self) -> Result<Vec<u8>, JobError> {
        serde_json::to_vec(&self.0)
            .map_err(|e| JobError::new("bad_output", format!("output cannot be JSON-encoded: {e}")))
    }
}

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal progress information.
    Info,
    /// Something unexpected that the job handled.
    Warn,
    /// Something failed.
    Error,
}

/// Appends one line to the job's log. Prefer the [`log!`] family of macros.
pub fn log(level: Level, message: &str) {
    let level = match level {
        Level::Trace => WitLevel::Trace,
        Level::Debug => WitLevel::Debug,
        Level::Info => WitLevel::Info,
        Level::Warn => WitLevel::Warn,
        Level::Error => WitLevel::Error,
    };
    host::log(level, message);
}

/// Reports progress: `fraction` in `[0, 1]` and a short message.
pub fn progress(fraction: f32, message: &str) {
    host::progress(fraction, message);
}

/// Saves `state` as this job's checkpoint, replacing any earlier one.
///
/// A later attempt of the same job reads it back with [`resume_state`].
/// Checkpoints are bounded by the node (16 MiB by default); a larger one
/// stops the job with the error code `checkpoint_too_large`.
pub fn checkpoint(state: &[u8]) {
    host::checkpoint(state);
}

/// Saves `state`, JSON-encoded, as this job's checkpoint.
pub fn checkpoint_json<T: Serialize>(state: &T) -> Result<(), JobError> {
    let bytes = serde_json::to_vec(state)
        .map_err(|e| JobError::new("bad_checkpoint", format!("cannot encode checkpoint: {e}")))?;
    checkpoint(&bytes);
    Ok(())
}

/// The checkpoint saved by an earlier attempt of this job, if any.
pub fn resume_state() -> Option<Vec<u8>> {
    host::resume_state()
}

/// The value of secret `name`, if the operator let this job's deployment
/// name read it (`cohort grant NAME --secret SECRET`); `None` otherwise (the
/// job's log then says why). Its value is masked wherever the job's log,
/// progress and failure show it. For a credential that only goes in a
/// request's header, let the grant set the header instead
/// (`--header 'Authorization: Bearer {secret:NAME}'`): the job never holds
/// that one.
pub fn secret(name: &str) -> Option<String> {
    host::secret(name)
}

/// The JSON checkpoint saved by an earlier attempt of this job, if any.
///
/// A checkpoint that does not parse as `T` is an error rather than `None`:
/// silently starting over could hide a bug in the job.
pub fn resume_json<T: DeserializeOwned>() -> Result<Option<T>, JobError> {
    match resume_state() {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| JobError::new("bad_checkpoint", format!("cannot decode checkpoint: {e}"))),
    }
}

/// Logs a formatted line at the given [`Level`]:
/// `log!(Level::Warn, "retrying {}", n)`.
#[macro_export]
macro_rules! log {
    ($level:expr, $($arg:tt)+) => {
        $crate::log($level, &::std::format!($($arg)+))
    };
}

/// Logs a formatted line at level `trace`.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Trace, $($arg)+) };
}

/// Logs a formatted line at level `debug`.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Debug, $($arg)+) };
}

/// Logs a formatted line at level `info`.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Info, $($arg)+) };
}

/// Logs a formatted line at level `warn`.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Warn, $($arg)+) };
}

/// Logs a formatted line at level `error`.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Error, $($arg)+) };
}

#[doc(hidden)]
pub mod __private {
    pub use crate::bindings::Guest;
    pub use crate::bindings::cohort::job::types::JobError as WitJobError;
    pub use wit_bindgen;

    use crate::{FromInput, IntoOutput, JobError};

    /// The body of the generated `Guest::run`: decode, call, encode.
    pub fn run_job<I, O, E>(
        input: Vec<u8>,
        job: fn(I) -> Result<O, E>,
    ) -> Result<Vec<u8>, WitJobError>
    where
        I: FromInput,
        O: IntoOutput,
        E: Into<JobError>,
    {
        let output = I::from_input(input)
            .and_then(|input| job(input).map_err(Into::into))
            .and_then(IntoOutput::into_output);
        output.map_err(|e| WitJobError {
            code: e.code,
            message: e.message,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    struct Point {
        x: i32,
    }

    fn double(Json(p): Json<Point>) -> Result<Json<Point>, JobError> {
        if p.x < 0 {
            return Err(JobError::new("negative", "x must be >= 0"));
        }
        Ok(Json(Point { x: p.x * 2 }))
    }

    #[test]
    fn json_round_trip_through_run_job() {
        let out = __private::run_job(br#"{"x":21}"#.to_vec(), double).unwrap();
        assert_eq!(out, br#"{"x":42}"#);
    }

    #[test]
    fn malformed_input_is_bad_input() {
        let err = __private::run_job(b"{nope".to_vec(), double).unwrap_err();
        assert_eq!(err.code, "bad_input");
        assert!(err.message.contains("JSON"), "{}", err.message);
    }

    #[test]
    fn job_errors_pass_through() {
        let err = __private::run_job(br#"{"x":-1}"#.to_vec(), double).unwrap_err();
        assert_eq!(
            (err.code.as_str(), err.message.as_str()),
            ("negative", "x must be >= 0")
        );
    }

    #[test]
    fn io_errors_fail_the_job_as_io_error() {
        fn job() -> Result<(), JobError> {
            Err(std::io::Error::other("disk on fire"))?;
            Ok(())
        }
        assert_eq!(
            job().unwrap_err(),
            JobError::new("io_error", "disk on fire")
        );
    }

    #[test]
    fn non_utf8_string_input_is_bad_input() {
        let err = String::from_input(vec![0xff, 0xfe]).unwrap_err();
        assert_eq!(err.code, "bad_input");
    }
}
