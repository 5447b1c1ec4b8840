//! Running one attempt of a job: its store, its host functions, its limits,
//! and how every way it can end is told apart.
//!
//! Each attempt gets a fresh `Store` (so nothing leaks between jobs) built
//! around a [`JobState`]: a WASI context with no filesystem, no sockets, no
//! environment and stdout/stderr wired into the job's bounded log;
//! `wasi:http` whose requests go through the job's egress grants (none:
//! every request is refused; see [`super::egress`]); a resource limiter
//! that caps linear memory and table growth; and the job's latest progress,
//! checkpoint and outbound calls.
//!
//! An attempt's [`Secrets`] fill the headers its grants set on its calls,
//! and their values are masked (`[secret:NAME]`) in everything it reports
//! but its output: the log (see [`super::job_log`]), progress messages and
//! failure texts. Each text is masked whole before it is cut to its bound,
//! so no cut leaves the beginning of a value behind. The output and the
//! checkpoint are not masked: they are the job's own data, handed to its
//! caller and its next attempt as they are, and a job that puts a value
//! there put it there on purpose; changing them would corrupt them.
//!
//! Time is bounded twice, because each mechanism alone has a hole:
//!
//! * the engine's epoch ticks every [`EPOCH_TICK`]; on each tick the store's
//!   deadline callback either yields to the async executor (so a CPU-bound
//!   job never starves the node's other tasks for longer than one tick) or,
//!   past the job's deadline, stops the guest with a trap;
//! * epochs are not checked while the guest is blocked inside a host call
//!   (e.g. a WASI sleep), so the whole attempt also runs under
//!   `tokio::time::timeout`, with a little grace so the epoch normally wins.
//!
//! A job can end in exactly one [`JobReport::outcome`]; failures carry a
//! stable code ([`JobFailure::code`]). Flags set by the limiter and the
//! deadline callback, not error-message matching, decide which limit was hit.
//!
//! [`EPOCH_TICK`]: crate::limits::EPOCH_TICK

use super::egress::{CallSink, Egress, HttpCall, HttpGrant, JobEgress, Ledger};
use super::job_blobs::{Blobs, JobBlobs, OutputFault, WrittenBlob};
use super::job_limits::JobLimits;
use super::job_log::{JobLog, Mask, SharedLog};
use super::job_world::cohort::job::{blobs, host, types};
use super::job_world::legacy::cohort::job as legacy;
use super::job_world::{Job, JobPre};
use super::observer::{JobObserver, LineLevel};
use super::tape::{Recording, Tape, TapeClock, TapeRandom};
use crate::limits::{
    ERROR_CODE_BYTES_MAX, ERROR_MESSAGE_BYTES_MAX, HOST_TIMEOUT_GRACE, PROGRESS_MESSAGE_BYTES_MAX,
    TABLE_ELEMENTS_MAX,
};
use cohort_master::TraceContext;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasmtime::component::{Resource, ResourceTable};
use wasmtime::{Engine, ResourceLimiter, Store, Trap, UpdateDeadline, WasmBacktrace};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// What to run: the input and the conditions of this attempt.
#[derive(Debug, Default)]
pub struct JobRequest {
    /// The job's input bytes.
    pub input: Vec<u8>,
    /// Resource limits of this attempt.
    pub limits: JobLimits,
    /// The checkpoint saved by an earlier attempt, offered to the guest.
    pub resume_state: Option<Vec<u8>>,
    /// Who to tell about logs, progress and checkpoints as they happen.
    pub observer: Option<Arc<dyn JobObserver>>,
    /// The outbound HTTP(S) calls the job may make; empty: none, every
    /// request is refused (and recorded).
    pub egress: Vec<HttpGrant>,
    /// The plaintext of the secrets `egress` names: what its headers'
    /// `{secret:NAME}` placeholders are filled with (a call needing one
    /// that is not here is refused, `egress_secret_unavailable`), and what
    /// is masked in the attempt's log, progress and failure.
    pub secrets: Secrets,
    /// The names of `secrets` the job may read itself (the host
    /// interface's `secret`); the others only fill headers.
    pub readable: Vec<String>,
    /// What the attempt replays of its job's recorded calls, and where its
    /// own go (see [`super::tape`]); by default nothing is recorded.
    pub recording: Recording,
    /// The blobs the job may read and where it writes its own (see
    /// [`super::job_blobs`]); by default none.
    pub blobs: JobBlobs,
    /// The trace context the job's outbound calls carry as their
    /// `traceparent` (see [`super::egress`]): the attempt's span, when
    /// the job has a context and the node exports spans (the job's own
    /// context when its trace was sampled out); `None`: none.
    pub trace: Option<TraceContext>,
}

/// The plaintext of secrets, by name. Its `Debug` names them and never
/// shows a value; it is carried to a sandbox process in the request frame.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Secrets(Vec<(String, String)>);

impl Secrets {
    /// The secrets `(name, plaintext)`; for a name given twice, the first.
    pub fn new(secrets: Vec<(String, String)>) -> Self {
        Self(secrets)
    }

    /// The plaintext of the secret `name`, if it is here.
    pub fn get(&self, name: &str) -> Option<&str> {
        (self.0.iter())
            .find(|(held, _)| held == name)
            .map(|(_, value)| value.as_str())
    }

    /// The names held.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(name, _)| name.as_str())
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each `(name, plaintext)`.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
    }
}

impl From<Vec<(String, String)>> for Secrets {
    fn from(secrets: Vec<(String, String)>) -> Self {
        Self::new(secrets)
    }
}

impl FromIterator<(String, String)> for Secrets {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(secrets: I) -> Self {
        Self::new(secrets.into_iter().collect())
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Redacted;
        impl std::fmt::Debug for Redacted {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("<redacted>")
            }
        }
        f.debug_map()
            .entries(self.names().map(|name| (name, Redacted)))
            .finish()
    }
}

/// The latest progress report of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// How far along, in `[0, 1]`.
    pub fraction: f32,
    /// What the job says it is doing.
    pub message: String,
}

impl Progress {
    /// A job's progress call as it is kept: the fraction clamped to `[0, 1]`
    /// (NaN as 0), the message masked by `mask` and then cut at
    /// [`PROGRESS_MESSAGE_BYTES_MAX`].
    pub(crate) fn bounded(fraction: f32, message: String, mask: Option<&Mask>) -> Self {
        let fraction = if fraction.is_nan() {
            0.0
        } else {
            fraction.clamp(0.0, 1.0)
        };
        let message = bounded_text(message, mask, PROGRESS_MESSAGE_BYTES_MAX);
        Self { fraction, message }
    }

    /// Whether this is a report [`bounded`](Self::bounded) could have made:
    /// what a sandbox process may relay.
    pub(crate) fn is_bounded(&self) -> bool {
        (0.0..=1.0).contains(&self.fraction) && self.message.len() <= PROGRESS_MESSAGE_BYTES_MAX
    }
}

/// A job's output, or `output_too_large` past the limit.
pub(crate) fn bounded_output(output: Vec<u8>, limits: &JobLimits) -> Result<Vec<u8>, JobFailure> {
    if output.len() as u64 > limits.output_bytes {
        return Err(JobFailure::OutputTooLarge {
            size_bytes: output.len() as u64,
            limit_bytes: limits.output_bytes,
        });
    }
    Ok(output)
}

/// How one attempt of a job ended, and what it left behind.
#[derive(Debug)]
pub struct JobReport {
    /// The output, or why there is none.
    pub outcome: Result<Vec<u8>, JobFailure>,
    /// The job's log (stdout, stderr and log lines), possibly truncated.
    pub log: Vec<u8>,
    /// Log bytes dropped because the log limit was reached.
    pub log_dropped_bytes: u64,
    /// The last progress report, if any.
    pub progress: Option<Progress>,
    /// The last checkpoint, if any.
    pub checkpoint: Option<Vec<u8>>,
    /// Wall-clock time from instantiation to the end of the call.
    pub duration: Duration,
    /// The most linear memory the instance held at once, in bytes.
    pub memory_peak_bytes: u64,
    /// CPU time its threads used running it (see `runtime::cpu`).
    pub cpu: Duration,
    /// Body bytes its outbound calls sent and received, all of them.
    pub egress_bytes: u64,
    /// The first [`CALLS_RECORDED_MAX`] outbound calls the job made, sent or
    /// refused, in the order it made them.
    ///
    /// [`CALLS_RECORDED_MAX`]: cohort_master::limits::CALLS_RECORDED_MAX
    pub calls: Vec<HttpCall>,
    /// Calls made beyond those recorded.
    pub calls_dropped: u32,
    /// The output blobs of a successful attempt, in the order the job
    /// created them (none otherwise); their files go when this is dropped.
    pub outputs: Vec<WrittenBlob>,
}

/// Why a job attempt produced no output. See [`code`](Self::code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobFailure {
    /// The job ran to completion and returned an error of its own.
    #[error("the job failed: {code}: {message}")]
    JobError {
        /// The job's own error code.
        code: String,
        /// The job's own message.
        message: String,
    },
    /// The guest trapped (a panic, `unreachable`, an out-of-bounds access...).
    #[error("the job trapped: {message}{}", backtrace.as_deref().map(|b| format!("\n{b}")).unwrap_or_default())]
    Trap {
        /// What trapped.
        message: String,
        /// The Wasm call stack at the trap, when available.
        backtrace: Option<String>,
    },
    /// The attempt ran past its time limit.
    #[error("the job ran longer than its {limit_ms} ms time limit")]
    Timeout {
        /// The limit, in milliseconds.
        limit_ms: u64,
    },
    /// The job tried to grow its memory past its limit.
    #[error(
        "the job tried to use {requested_bytes} bytes of memory; its limit is {limit_bytes} bytes"
    )]
    MemoryLimit {
        /// The total it asked for.
        requested_bytes: u64,
        /// The limit.
        limit_bytes: u64,
    },
    /// The job returned more output than allowed, or wrote more to its
    /// output blobs (together) than allowed.
    #[error("the job's output came to {size_bytes} bytes; the limit is {limit_bytes} bytes")]
    OutputTooLarge {
        /// Its output size.
        size_bytes: u64,
        /// The limit.
        limit_bytes: u64,
    },
    /// The job saved a checkpoint larger than allowed.
    #[error("the job saved a {size_bytes}-byte checkpoint; the limit is {limit_bytes} bytes")]
    CheckpointTooLarge {
        /// The checkpoint's size.
        size_bytes: u64,
        /// The limit.
        limit_bytes: u64,
    },
    /// The node's disk filled (or failed) while the job wrote an output
    /// blob: the attempt's outputs are discarded, every stored blob is
    /// intact.
    #[error("the node could not store the job's output blobs: {message}")]
    BlobStoreFull {
        /// What the disk said.
        message: String,
    },
    /// An input blob's file on the node could not be read (removed by
    /// hand, a disk error): retried, maybe on another worker.
    #[error("the node could not read an input blob: {message}")]
    BlobUnavailable {
        /// What went wrong.
        message: String,
    },
    /// The host could not run the job (e.g. instantiation failed).
    #[error("internal error: {message}")]
    Internal {
        /// What went wrong.
        message: String,
    },
}

impl JobFailure {
    /// This failure as it is reported: every secret value in its texts
    /// masked by `mask`, then the job's own code and message cut to their
    /// bounds ([`ERROR_CODE_BYTES_MAX`], [`ERROR_MESSAGE_BYTES_MAX`]).
    pub(crate) fn reported(self, mask: Option<&Mask>) -> Self {
        let masked = |text: String| match mask {
            Some(mask) => mask.text(&text),
            None => text,
        };
        match self {
            JobFailure::JobError { code, message } => JobFailure::JobError {
                code: bounded_text(code, mask, ERROR_CODE_BYTES_MAX),
                message: bounded_text(message, mask, ERROR_MESSAGE_BYTES_MAX),
            },
            JobFailure::Trap { message, backtrace } => JobFailure::Trap {
                message: masked(message),
                backtrace: backtrace.map(masked),
            },
            JobFailure::Internal { message } => JobFailure::Internal {
                message: masked(message),
            },
            failure @ (JobFailure::Timeout { .. }
            | JobFailure::BlobStoreFull { .. }
            | JobFailure::BlobUnavailable { .. }
            | JobFailure::MemoryLimit { .. }
            | JobFailure::OutputTooLarge { .. }
            | JobFailure::CheckpointTooLarge { .. }) => failure,
        }
    }

    /// The stable, machine-readable code of this failure.
    pub fn code(&self) -> &'static str {
        match self {
            JobFailure::JobError { .. } => "job_error",
            JobFailure::Trap { .. } => "trap",
            JobFailure::Timeout { .. } => "timeout",
            JobFailure::MemoryLimit { .. } => "memory_limit",
            JobFailure::OutputTooLarge { .. } => "output_too_large",
            JobFailure::CheckpointTooLarge { .. } => "checkpoint_too_large",
            JobFailure::BlobStoreFull { .. } => "blob_store_full",
            JobFailure::BlobUnavailable { .. } => "blob_unavailable",
            JobFailure::Internal { .. } => "internal",
        }
    }

    /// Whether a resource limit (time, memory, output, checkpoint) was hit.
    pub fn is_limit(&self) -> bool {
        matches!(
            self,
            JobFailure::Timeout { .. }
                | JobFailure::MemoryLimit { .. }
                | JobFailure::OutputTooLarge { .. }
                | JobFailure::CheckpointTooLarge { .. }
        )
    }
}

/// Caps a job instance's memories and tables, and remembers what it refused.
#[derive(Debug)]
struct JobLimiter {
    memory_bytes_max: u64,
    /// Sum of the current sizes of all the instance's linear memories.
    memory_bytes: u64,
    memory_peak_bytes: u64,
    /// Set when a growth was refused: the total that was asked for.
    memory_refused_bytes: Option<u64>,
}

impl ResourceLimiter for JobLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.memory_bytes - current as u64 + desired as u64;
        if total > self.memory_bytes_max {
            self.memory_refused_bytes = Some(total);
            // An error (rather than `Ok(false)`) stops the guest right here
            // instead of letting it limp on after a failed allocation.
            return Err(wasmtime::format_err!(
                "memory limit of {} bytes reached",
                self.memory_bytes_max
            ));
        }
        self.memory_bytes = total;
        self.memory_peak_bytes = self.memory_peak_bytes.max(total);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= TABLE_ELEMENTS_MAX)
    }
}

/// Everything a running job's store holds.
pub struct JobState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    egress: JobEgress,
    /// The attempt's record of calls, when its clock and random reads go
    /// through it: a checkpoint says where in it the attempt was.
    tape: Option<Tape>,
    table: ResourceTable,
    limiter: JobLimiter,
    log: SharedLog,
    /// Masks the attempt's secret values in its progress messages.
    mask: Option<Arc<Mask>>,
    /// The secrets the job may read, `(name, plaintext)`; `None`: one this
    /// node could not open.
    readable: Vec<(String, Option<String>)>,
    latest: Arc<Mutex<Latest>>,
    resume_state: Option<Vec<u8>>,
    checkpoint_bytes_max: u64,
    observer: Option<Arc<dyn JobObserver>>,
    deadline: Instant,
    timed_out: bool,
    checkpoint_refused_bytes: Option<u64>,
    blobs: Blobs,
}

/// Progress and checkpoint, kept outside the store so that they survive an
/// attempt that is cut off by the host-side timeout.
#[derive(Debug, Default)]
struct Latest {
    progress: Option<Progress>,
    checkpoint: Option<Vec<u8>>,
}

impl WasiView for JobState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for JobState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.egress,
        }
    }
}

impl types::Host for JobState {}

impl host::Host for JobState {
    fn log(&mut self, level: types::Level, message: String) -> wasmtime::Result<()> {
        let level = match level {
            types::Level::Trace => LineLevel::Trace,
            types::Level::Debug => LineLevel::Debug,
            types::Level::Info => LineLevel::Info,
            types::Level::Warn => LineLevel::Warn,
            types::Level::Error => LineLevel::Error,
        };
        // The line on its own, for an observer that wants it: as much of it
        // as the log has room for, masked.
        let room = match &self.observer {
            Some(observer) if observer.wants_lines() => self.log.room(),
            _ => 0,
        };
        let name = level.name();
        let mut line = Vec::with_capacity(name.len() + message.len() + 2);
        line.extend_from_slice(name.as_bytes());
        line.push(b' ');
        line.extend_from_slice(message.as_bytes());
        line.push(b'\n');
        self.log.append(&line);
        if room > 0
            && let Some(observer) = &self.observer
        {
            observer.log_line(level, &bounded_text(message, self.mask.as_deref(), room));
        }
        Ok(())
    }

    fn progress(&mut self, fraction: f32, message: String) -> wasmtime::Result<()> {
        let progress = Progress::bounded(fraction, message, self.mask.as_deref());
        if let Some(observer) = &self.observer {
            observer.progress(progress.fraction, &progress.message);
        }
        lock(&self.latest).progress = Some(progress);
        Ok(())
    }

    fn checkpoint(&mut self, state: Vec<u8>) -> wasmtime::Result<()> {
        if state.len() as u64 > self.checkpoint_bytes_max {
            self.checkpoint_refused_bytes = Some(state.len() as u64);
            return Err(wasmtime::format_err!(
                "checkpoint limit of {} bytes exceeded",
                self.checkpoint_bytes_max
            ));
        }
        if let Some(observer) = &self.observer {
            observer.checkpoint(&state, self.tape.as_ref().map(Tape::mark));
        }
        lock(&self.latest).checkpoint = Some(state);
        Ok(())
    }

    fn resume_state(&mut self) -> wasmtime::Result<Option<Vec<u8>>> {
        Ok(self.resume_state.clone())
    }

    fn secret(&mut self, name: String) -> wasmtime::Result<Option<String>> {
        let found = (self.readable.iter()).find(|(held, _)| *held == name);
        let value = found.and_then(|(_, value)| value.clone());
        if value.is_none() {
            // Why, in the log, never a value: the name is the job's own
            // text, bounded.
            let name = truncate_utf8(name, cohort_master::limits::SECRET_NAME_BYTES_MAX);
            let line = match found {
                Some(_) => format!(
                    "[cohort] secret {name:?} could not be opened on this node (the node's log says why)\n"
                ),
                None => format!(
                    "[cohort] secret {name:?} is not one this job may read (cohort grant NAME --secret {name})\n"
                ),
            };
            self.log.append(line.as_bytes());
        }
        Ok(value)
    }
}

impl blobs::Host for JobState {
    fn inputs(&mut self) -> wasmtime::Result<Vec<blobs::Blob>> {
        Ok((self.blobs.inputs().into_iter())
            .map(|(name, digest, size)| blobs::Blob {
                name,
                digest: super::Digest::from(digest).to_string(),
                size,
            })
            .collect())
    }

    fn open(
        &mut self,
        name: String,
        offset: u64,
    ) -> wasmtime::Result<Result<Resource<wasmtime_wasi::p2::DynInputStream>, String>> {
        match self.blobs.open(&name, offset) {
            Ok(reader) => {
                let stream: wasmtime_wasi::p2::DynInputStream = Box::new(reader);
                Ok(Ok(self.table.push(stream)?))
            }
            Err(why) => Ok(Err(why)),
        }
    }

    fn create(
        &mut self,
        name: String,
    ) -> wasmtime::Result<Result<Resource<wasmtime_wasi::p2::DynOutputStream>, String>> {
        match self.blobs.create(&name) {
            Ok(writer) => {
                let stream: wasmtime_wasi::p2::DynOutputStream = Box::new(writer);
                Ok(Ok(self.table.push(stream)?))
            }
            Err(why) => Ok(Err(why)),
        }
    }
}

/// `cohort:job@0.1.0`'s `host`, for modules built against it: the same
/// functions as 0.2.0's.
impl legacy::types::Host for JobState {}

impl legacy::host::Host for JobState {
    fn log(&mut self, level: legacy::types::Level, message: String) -> wasmtime::Result<()> {
        let level = match level {
            legacy::types::Level::Trace => types::Level::Trace,
            legacy::types::Level::Debug => types::Level::Debug,
            legacy::types::Level::Info => types::Level::Info,
            legacy::types::Level::Warn => types::Level::Warn,
            legacy::types::Level::Error => types::Level::Error,
        };
        host::Host::log(self, level, message)
    }

    fn progress(&mut self, fraction: f32, message: String) -> wasmtime::Result<()> {
        host::Host::progress(self, fraction, message)
    }

    fn checkpoint(&mut self, state: Vec<u8>) -> wasmtime::Result<()> {
        host::Host::checkpoint(self, state)
    }

    fn resume_state(&mut self) -> wasmtime::Result<Option<Vec<u8>>> {
        host::Host::resume_state(self)
    }

    fn secret(&mut self, name: String) -> wasmtime::Result<Option<String>> {
        host::Host::secret(self, name)
    }
}

fn lock(latest: &Mutex<Latest>) -> std::sync::MutexGuard<'_, Latest> {
    latest
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `text` masked by `mask`, then cut at `bytes_max`: masked first, so that
/// no cut leaves the beginning of a value behind.
fn bounded_text(text: String, mask: Option<&Mask>, bytes_max: usize) -> String {
    let text = match mask {
        Some(mask) => mask.text(&text),
        None => text,
    };
    truncate_utf8(text, bytes_max)
}

pub(crate) fn truncate_utf8(mut text: String, bytes_max: usize) -> String {
    if text.len() > bytes_max {
        let mut cut = bytes_max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

/// Runs one attempt of a module (its instance-pre, `pre`) on `request` and
/// reports how it ended.
/// Never panics on anything the guest does.
/// `epochs` says whether the engine checks epochs (in-thread isolation);
/// without them the deadline is kept by whoever runs this process.
/// The job's `wasi:http` requests go out through `egress`; `on_call` hears
/// of each recorded call as it ends.
pub(crate) async fn execute(
    engine: &Engine,
    pre: &JobPre<JobState>,
    request: JobRequest,
    epochs: bool,
    egress: &Egress,
    on_call: Option<CallSink>,
) -> JobReport {
    let JobRequest {
        input,
        limits,
        resume_state,
        observer,
        egress: grants,
        secrets,
        readable,
        recording,
        blobs,
        trace,
    } = request;
    let blobs = Blobs::new(blobs);
    // What the job may read: the readable secrets, opened by this node
    // (`None`: one it could not open).
    let readable: Vec<(String, Option<String>)> = (readable.into_iter())
        .map(|name| {
            let value = secrets.get(&name).map(str::to_owned);
            (name, value)
        })
        .collect();
    let tape = Tape::new(recording);
    // Only a job whose grants may record reads its clock and random
    // numbers through the tape: the others pay nothing for it.
    let taped = tape.records() && grants.iter().any(|grant| grant.record != Some(false));
    let mask = Mask::new(&secrets);
    let log = SharedLog::new(
        JobLog::new(
            usize::try_from(limits.log_bytes).unwrap_or(usize::MAX),
            observer.clone(),
        )
        .masking(mask.clone()),
    );
    let latest = Arc::new(Mutex::new(Latest::default()));
    // Outside the store, so that the calls of an attempt cut off by the
    // host-side timeout are reported too.
    let ledger = Ledger::new(on_call);
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdout(log.clone())
        .stderr(log.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    if taped {
        wasi.wall_clock(TapeClock(tape.clone()))
            .secure_random(TapeRandom(tape.clone()))
            .insecure_random(TapeRandom(tape.clone()));
    }
    let wasi = wasi.build();
    let started = Instant::now();
    let state = JobState {
        wasi,
        http: WasiHttpCtx::new(),
        egress: JobEgress::new(
            egress.clone(),
            (grants, secrets),
            ledger.clone(),
            log.clone(),
            tape.clone(),
        )
        .with_trace(trace.as_ref()),
        // Every job run by a worker numbers its calls from its checkpoint's
        // mark, so that its idempotency keys go on where they were (even if
        // its grants changed in between).
        tape: tape.records().then(|| tape.clone()),
        table: ResourceTable::new(),
        limiter: JobLimiter {
            memory_bytes_max: limits.memory_bytes,
            memory_bytes: 0,
            memory_peak_bytes: 0,
            memory_refused_bytes: None,
        },
        log: log.clone(),
        mask: mask.clone(),
        readable,
        latest: latest.clone(),
        resume_state,
        checkpoint_bytes_max: limits.checkpoint_bytes,
        observer,
        deadline: started + limits.timeout(),
        timed_out: false,
        checkpoint_refused_bytes: None,
        blobs: blobs.clone(),
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limiter);
    if epochs {
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            let state = ctx.data_mut();
            if Instant::now() >= state.deadline {
                state.timed_out = true;
                return Err(wasmtime::format_err!("job deadline exceeded"));
            }
            Ok(UpdateDeadline::Yield(1))
        });
    }

    let mut cpu = Duration::ZERO;
    let result = {
        let call = std::pin::pin!(call_run(&mut store, pre, &input));
        let call = super::cpu::Metered::new(call, &mut cpu);
        tokio::time::timeout(limits.timeout() + HOST_TIMEOUT_GRACE, call).await
    };
    let duration = started.elapsed();

    let state = store.data();
    let outcome = match result {
        Err(_elapsed) => Err(JobFailure::Timeout {
            limit_ms: limits.timeout_ms,
        }),
        Ok(Ok(Ok(output))) => bounded_output(output, &limits),
        // Cut to their bounds (after masking) below.
        Ok(Ok(Err(job_error))) => Err(JobFailure::JobError {
            code: job_error.code,
            message: job_error.message,
        }),
        Ok(Err(CallError::Instantiate(error))) => match state.limiter.memory_refused_bytes {
            // The module's initial memory alone is over this job's limit.
            Some(requested_bytes) => Err(JobFailure::MemoryLimit {
                requested_bytes,
                limit_bytes: limits.memory_bytes,
            }),
            None => Err(JobFailure::Internal {
                message: format!("cannot instantiate the module: {error:#}"),
            }),
        },
        Ok(Err(CallError::Run(error))) => Err(classify(state, &limits, &error)),
    };
    // A recorded call that could not be made durable was sent: the attempt
    // fails whatever the job made of it, and the next one sends it again
    // with the same idempotency key.
    let outcome = match tape.failure() {
        Some(why) => Err(JobFailure::Internal {
            message: format!("a recorded call could not be kept: {why}"),
        }),
        None => outcome,
    };
    // Outputs that went wrong fail the attempt whatever the job made of
    // the refused write; a success keeps them.
    let (outcome, outputs) = match outcome {
        Ok(output) => match blobs.finish() {
            Ok(outputs) => (Ok(output), outputs),
            Err(fault) => (Err(fault.into()), Vec::new()),
        },
        // Discarded unflushed (their files go with `blobs`).
        Err(failure) => (Err(blobs.fault().map_or(failure, Into::into)), Vec::new()),
    };
    let outcome = outcome.map_err(|failure| failure.reported(mask.as_deref()));
    let latest = std::mem::take(&mut *lock(&latest));
    let memory_peak_bytes = state.limiter.memory_peak_bytes;
    // Before the store (and the responses it holds) goes: a call still
    // running now is recorded as unfinished, however its drop goes.
    let (calls, calls_dropped) = ledger.close();
    let egress_bytes = ledger.bytes();
    drop(store);
    log.flush();
    JobReport {
        outcome,
        log_dropped_bytes: log.dropped_bytes(),
        log: log.take(),
        progress: latest.progress,
        checkpoint: latest.checkpoint,
        duration,
        memory_peak_bytes,
        cpu,
        egress_bytes,
        calls,
        calls_dropped,
        outputs,
    }
}

impl From<OutputFault> for JobFailure {
    fn from(fault: OutputFault) -> Self {
        match fault {
            OutputFault::TooLarge { wanted, limit } => JobFailure::OutputTooLarge {
                size_bytes: wanted,
                limit_bytes: limit,
            },
            OutputFault::Disk(message) => JobFailure::BlobStoreFull { message },
            OutputFault::Input(message) => JobFailure::BlobUnavailable { message },
        }
    }
}

enum CallError {
    Instantiate(wasmtime::Error),
    Run(wasmtime::Error),
}

async fn call_run(
    store: &mut Store<JobState>,
    pre: &JobPre<JobState>,
    input: &[u8],
) -> Result<Result<Vec<u8>, types::JobError>, CallError> {
    let instance: Job = pre
        .instantiate_async(&mut *store)
        .await
        .map_err(CallError::Instantiate)?;
    instance
        .call_run(&mut *store, input)
        .await
        .map_err(CallError::Run)
}

/// Names the failure of a call that returned an error, using the flags the
/// limiter and the host functions set (which are exact) before falling back
/// to the trap code in the error.
fn classify(state: &JobState, limits: &JobLimits, error: &wasmtime::Error) -> JobFailure {
    if let Some(requested_bytes) = state.limiter.memory_refused_bytes {
        return JobFailure::MemoryLimit {
            requested_bytes,
            limit_bytes: limits.memory_bytes,
        };
    }
    if state.timed_out {
        return JobFailure::Timeout {
            limit_ms: limits.timeout_ms,
        };
    }
    if let Some(size_bytes) = state.checkpoint_refused_bytes {
        return JobFailure::CheckpointTooLarge {
            size_bytes,
            limit_bytes: limits.checkpoint_bytes,
        };
    }
    let message = match error.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => format!("{:#}", error.root_cause()),
    };
    let backtrace = error
        .downcast_ref::<WasmBacktrace>()
        .map(|bt| bt.to_string())
        .filter(|bt| !bt.trim().is_empty());
    JobFailure::Trap { message, backtrace }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_codes_are_stable() {
        let cases = [
            (
                JobFailure::JobError {
                    code: "x".into(),
                    message: "y".into(),
                },
                "job_error",
            ),
            (
                JobFailure::Trap {
                    message: "m".into(),
                    backtrace: None,
                },
                "trap",
            ),
            (JobFailure::Timeout { limit_ms: 1 }, "timeout"),
            (
                JobFailure::MemoryLimit {
                    requested_bytes: 2,
                    limit_bytes: 1,
                },
                "memory_limit",
            ),
            (
                JobFailure::OutputTooLarge {
                    size_bytes: 2,
                    limit_bytes: 1,
                },
                "output_too_large",
            ),
            (
                JobFailure::CheckpointTooLarge {
                    size_bytes: 2,
                    limit_bytes: 1,
                },
                "checkpoint_too_large",
            ),
            (
                JobFailure::Internal {
                    message: "m".into(),
                },
                "internal",
            ),
        ];
        for (failure, code) in cases {
            assert_eq!(failure.code(), code);
            let json = serde_json::to_value(&failure).unwrap();
            assert_eq!(json["kind"], code, "serialized tag matches the code");
        }
    }

    #[test]
    fn limiter_counts_all_memories_and_refuses_past_the_limit() {
        let mut limiter = JobLimiter {
            memory_bytes_max: 100,
            memory_bytes: 0,
            memory_peak_bytes: 0,
            memory_refused_bytes: None,
        };
        assert!(limiter.memory_growing(0, 60, None).unwrap());
        assert!(limiter.memory_growing(0, 30, None).unwrap()); // a second memory
        assert!(limiter.memory_growing(60, 70, None).unwrap());
        assert!(limiter.memory_growing(70, 80, None).is_err());
        assert_eq!(limiter.memory_refused_bytes, Some(110));
        assert_eq!(limiter.memory_peak_bytes, 100);
    }

    #[test]
    fn progress_is_kept_bounded_and_only_bounded_reports_pass() {
        let long = "é".repeat(PROGRESS_MESSAGE_BYTES_MAX);
        for (fraction, kept) in [(f32::NAN, 0.0), (-1.0, 0.0), (0.5, 0.5), (7.0, 1.0)] {
            let progress = Progress::bounded(fraction, long.clone(), None);
            assert_eq!(progress.fraction, kept);
            assert!(progress.message.len() <= PROGRESS_MESSAGE_BYTES_MAX);
            assert!(progress.is_bounded());
        }
        let relayed = |fraction: f32, message: &str| Progress {
            fraction,
            message: message.into(),
        };
        assert!(!relayed(1.5, "").is_bounded());
        assert!(!relayed(f32::NAN, "").is_bounded());
        assert!(!relayed(0.5, &long).is_bounded());
        let limits = JobLimits {
            output_bytes: 2,
            ..JobLimits::default()
        };
        assert_eq!(bounded_output(vec![1, 2], &limits), Ok(vec![1, 2]));
        assert_eq!(
            bounded_output(vec![1, 2, 3], &limits),
            Err(JobFailure::OutputTooLarge {
                size_bytes: 3,
                limit_bytes: 2
            })
        );
    }

    fn api_key() -> Option<Arc<Mask>> {
        Mask::new(&Secrets::new(vec![(
            "API_KEY".into(),
            "s3cr3t-value".into(),
        )]))
    }

    #[test]
    fn a_progress_message_is_masked_before_it_is_cut() {
        let mask = api_key();
        let progress = Progress::bounded(0.5, "calling with s3cr3t-value".into(), mask.as_deref());
        assert_eq!(progress.message, "calling with [secret:API_KEY]");
        // Cut first, the message would end with the value's beginning.
        let long = format!("{}s3cr3t-value", "x".repeat(PROGRESS_MESSAGE_BYTES_MAX - 6));
        let progress = Progress::bounded(0.5, long, mask.as_deref());
        assert!(progress.is_bounded());
        assert!(
            progress.message.ends_with("xx[secre"),
            "{}",
            progress.message
        );
    }

    #[test]
    fn a_failure_is_masked_before_it_is_cut() {
        let mask = api_key();
        let error = JobFailure::JobError {
            code: format!("{}s3cr3t-value", "c".repeat(ERROR_CODE_BYTES_MAX - 4)),
            message: "the server said: bad key s3cr3t-value".into(),
        }
        .reported(mask.as_deref());
        let JobFailure::JobError { code, message } = &error else {
            panic!("{error:?}")
        };
        assert_eq!(code.len(), ERROR_CODE_BYTES_MAX);
        assert!(code.ends_with("cccc[sec"), "{code}");
        assert_eq!(message, "the server said: bad key [secret:API_KEY]");
        let trap = JobFailure::Trap {
            message: "s3cr3t-value".into(),
            backtrace: Some("at s3cr3t-value".into()),
        }
        .reported(mask.as_deref());
        assert!(!format!("{trap:?}").contains("s3cr3t"), "{trap:?}");
        let internal = JobFailure::Internal {
            message: "s3cr3t-value".into(),
        };
        assert_eq!(
            internal.reported(mask.as_deref()).to_string(),
            "internal error: [secret:API_KEY]"
        );
        // Without secrets, only the job's own texts are cut.
        let long = JobFailure::JobError {
            code: "c".repeat(ERROR_CODE_BYTES_MAX + 1),
            message: "m".into(),
        };
        let JobFailure::JobError { code, .. } = long.reported(None) else {
            unreachable!()
        };
        assert_eq!(code.len(), ERROR_CODE_BYTES_MAX);
    }

    #[test]
    fn secrets_never_show_their_values_in_debug() {
        let secrets: Secrets = vec![("API_KEY".to_owned(), "s3cr3t-value".to_owned())].into();
        assert_eq!(secrets.get("API_KEY"), Some("s3cr3t-value"));
        assert_eq!(secrets.get("OTHER"), None);
        assert_eq!(format!("{secrets:?}"), r#"{"API_KEY": <redacted>}"#);
        let request = JobRequest {
            secrets,
            ..JobRequest::default()
        };
        assert!(!format!("{request:?}").contains("s3cr3t"), "{request:?}");
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate_utf8("héllo".into(), 2), "h");
        assert_eq!(truncate_utf8("abc".into(), 10), "abc");
    }
}
