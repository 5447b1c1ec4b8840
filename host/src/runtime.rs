//! The sandboxed WebAssembly runtime that runs job modules.
//!
//! See [`engine`] for the design notes.

pub(crate) mod cpu;
pub mod egress;
pub mod engine;
pub mod job;
pub mod job_blobs;
pub mod job_limits;
pub mod job_log;
pub mod job_world;
pub mod module;
pub mod module_check;
pub mod observer;
pub mod sandbox;
pub mod sandbox_child;
pub mod tape;

pub use egress::{AddressKind, CallError, EgressLimits, HttpCall, HttpGrant};
pub use engine::{Isolation, Runtime, RuntimeConfig, RuntimeError};
pub use job::{JobFailure, JobReport, JobRequest, Progress, Secrets};
pub use job_limits::JobLimits;
pub use module::{Digest, Module, ModuleError};
pub use observer::JobObserver;
pub use tape::{RecordFuture, Recorder, Recording, Unrecorded};
