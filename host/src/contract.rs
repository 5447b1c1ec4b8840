//! The ground floor of the node: what every layer may know about the
//! master, depending on none of them.
//!
//! The master's service (`crate::master`) runs the master; the API
//! (`crate::api`) serves it; replication, security, cluster and the worker
//! sit between or below them. Each of those needs a few of the same facts:
//! how a request to the master fails ([`MasterError`]), what a worker's poll
//! carries ([`Poll`], [`PollResult`], [`ProgressReport`]) and the clock the
//! master's commands are stamped with ([`now_ms`]). They live here so that
//! no lower layer imports the service or the API to learn them: imports run
//! one way, down to this file. How large a body may be (the
//! `*_BODY_BYTES_MAX` bounds, which the proxy sizes its batches from) is in
//! [`crate::limits`], beside every other limit.
//!
//! This module holds types and functions only: no I/O, no state, nothing
//! that could pull another module of the crate in.

use cohort_master::{Assignment, BlobPrefix, JobId, Millis, Rejection};
use std::time::{SystemTime, UNIX_EPOCH};

// ---- the master as its callers see it

/// A running attempt's latest progress, carried by its worker's polls. It
/// is volatile (not journaled): the master's node keeps the newest per job
/// so any front-end can show it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProgressReport {
    /// The job.
    pub id: JobId,
    /// The attempt reporting.
    pub attempt: u32,
    /// In `[0, 1]`.
    pub fraction: f32,
    /// What it is doing.
    pub message: String,
}

/// A worker's poll: who it is, how much it can take, how long it may wait
/// for work, and the progress of what it runs. Also its heartbeat.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Poll {
    /// Worker id.
    pub worker: String,
    /// Its total slots.
    pub slots: u32,
    /// Jobs it can start now.
    pub free: u32,
    /// Longest wait for work, in milliseconds.
    pub wait_ms: u64,
    /// Progress of its running attempts.
    pub progress: Vec<ProgressReport>,
    /// Every attempt `(job, attempt)` it holds: running, or finished with
    /// its outcome not yet acknowledged. A master that just took over
    /// compares it, once per worker, with the attempts it believes the
    /// worker runs: one missing was assigned by the old master in an
    /// answer that never arrived, and is re-queued at once instead of at
    /// its lease's end.
    pub held: Vec<(JobId, u32)>,
    /// The blobs its node holds, by digest prefix (the ones used last, at
    /// most `HOLDS_MAX`): the master prefers to start a job where its
    /// input blob is (`cohort_master::locality`).
    pub holds: Vec<BlobPrefix>,
    /// Its labels and the most memory it gives one attempt: the master
    /// starts a job only where they fit (`cohort_master::pools`).
    pub pool: cohort_master::WorkerPool,
}

/// What a worker's poll brings back.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PollResult {
    /// Attempts to start.
    pub assignments: Vec<Assignment>,
    /// Attempts to stop (cancelled jobs): `(job, attempt)`.
    pub stops: Vec<(JobId, u32)>,
}

/// Why a request to the master failed.
#[derive(Debug, Clone, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum MasterError {
    /// The master refused it.
    #[error("{0}")]
    Rejected(Rejection),
    /// The master is stopping, stopped or failed.
    #[error("the master is not available: {0}")]
    Unavailable(String),
    /// Too few replicas hold the journal: the request was refused, or its
    /// outcome is not known to be durable (retry with the same
    /// idempotency key).
    #[error("not enough replicas: {0}")]
    Unreplicated(String),
    /// This node handed the master over to the node at this URL.
    #[error("the master moved to {0}")]
    Moved(String),
    /// The master may have acted on the request but no answer came: while
    /// the proxy still waits, it sends the request again; once it gives up
    /// on a submission, whether the job exists is unknown.
    #[error("no answer from the master; it may or may not have taken effect: {0}")]
    Indeterminate(String),
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The W3C header a submission's context comes in and outbound calls
/// carry.
pub const TRACEPARENT: &str = "traceparent";

/// `context` as a `traceparent` header value.
pub fn traceparent(context: &cohort_master::TraceContext) -> String {
    let mut out = String::with_capacity(55);
    out.push_str("00-");
    for byte in context.trace_id {
        out.push_str(&format!("{byte:02x}"));
    }
    out.push('-');
    for byte in context.span_id {
        out.push_str(&format!("{byte:02x}"));
    }
    out.push_str(&format!("-{:02x}", context.flags & 1));
    out
}

/// The level of a line a job logs: the runtime's (its log, a sandbox's
/// frames) and what telemetry forwards it as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LineLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl LineLevel {
    /// The level as the job's log shows it (`INFO`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Trace => "TRACE",
            Self::Debug => "DEBUG",
            Self::Info => "INFO",
            Self::Warn => "WARN",
            Self::Error => "ERROR",
        }
    }
}
