//! Process isolation: each running job in a sandbox process of its own.
//!
//! # Why
//!
//! A job running on the node's threads is stopped at its deadline by epoch
//! checks that wasmtime compiles into every loop back-edge and function
//! entry. On a loop whose body is a handful of instructions, that check
//! costs as much as the body (BENCHMARKS.md, "CPU-bound kernels"). With
//! [`Isolation::Process`](super::Isolation::Process) modules are compiled
//! without those checks and every attempt runs in a `cohort sandbox` child
//! process, which the node kills at the job's deadline: that stops any code,
//! however tight its loop, and the kernel's scheduler (not epoch yields)
//! shares the cores. A crash of the process that runs a job (a wasmtime
//! bug, the kernel's OOM killer) then costs that attempt only.
//!
//! # Design
//!
//! * **A pool of children.** Children start on demand, run one job at a time
//!   and are reused; there are never more than the runtime's slots. A child
//!   that was killed (deadline) or failed is dropped, and the next job starts
//!   a fresh one. A reaper thread stops children idle for a minute
//!   ([`RuntimeConfig::sandbox_idle_max`](super::RuntimeConfig)), so a node
//!   that was busy once does not keep their memory.
//! * **Compiled once, by the node.** [`Runtime::load`](super::Runtime::load)
//!   validates and compiles as it always does (a bad module is refused before
//!   any job) and writes the artifact to the disk cache; a child, built with
//!   the same engine settings and so the same cache directory, loads it by
//!   digest. Without a data directory the runtime keeps one of its own.
//! * **Frames over stdin/stdout.** Each frame is a little-endian `u32`
//!   length then a postcard body. Node to child: one [`Request`] per job
//!   (with the job's egress grants, the plaintext of the secrets they name,
//!   and the node's egress bounds: the pipe is the node's own, to its own
//!   child).
//!   Child to node: [`Event::Log`], [`Event::Progress`],
//!   [`Event::Checkpoint`] and [`Event::Call`] as they happen (so the log,
//!   checkpoint and finished calls of a killed attempt survive, as they do
//!   in-thread), then [`Event::Done`] with the outcome and the attempt's
//!   record of calls, which replaces the calls relayed. Each log byte
//!   crosses once: the node's report is built from what was relayed, in a
//!   [`JobLog`] of its own.
//! * **The child is hostile.** It runs untrusted code; if that code escaped
//!   the sandbox, the frames are its voice. The node bounds every frame by
//!   the job's own limits (and a record of calls by its bound, each call's
//!   strings by theirs), and a frame that does not decode, an early exit
//!   or a closed pipe fail the attempt with `internal` and kill the child.
//!   A child's death never touches another job. The child masks the
//!   attempt's secret values where it runs the job (before any text is
//!   cut to its bound); the node masks what it relays once more, so that
//!   what it reports holds no value whatever the child sent.
//! * **Least environment.** A child gets none of the node's environment
//!   variables but its log filter and `RUST_BACKTRACE`.
//! * **No orphans.** A child exits when its stdin closes (the node is gone or
//!   dropped it), and a watchdog thread exits it when its parent process is
//!   gone, which covers a guest spinning in a loop after the node was killed.
//!
//! # Not here
//!
//! The child is the same binary with the same privileges as the node: no
//! seccomp filter, namespaces or resource limits of the OS beyond wasmtime's
//! own. It isolates faults and time, not a guest that escaped wasmtime.

use super::egress::{self, EgressLimits, HttpCall, HttpGrant};
use super::job::{JobFailure, JobReport, JobRequest, Progress, Secrets, bounded_output};
use super::job_blobs::{self, BlobSpace};
use super::job_blobs::{JobBlobs, WrittenBlob};
use super::job_limits::JobLimits;
use super::job_log::{JobLog, Mask};
use super::module::Digest;
use super::observer::{JobObserver, LineLevel};
use super::tape::{Recorder, Recording, Unrecorded};
use crate::limits::{
    SANDBOX_FRAME_SLACK_BYTES, SANDBOX_KILL_GRACE, SANDBOX_REAPER_PERIOD_MAX,
    SANDBOX_REAPER_PERIOD_MIN,
};
use cohort_master::limits::{CALLS_RECORDED_MAX, OUTPUTS_MAX};
use cohort_master::{RecordedCall, Replay, TapeMark};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The only environment variables a sandbox process is given: its log
/// filter and Rust's backtrace switch.
const SANDBOX_ENV: &[&str] = &["COHORT_LOG", "RUST_BACKTRACE"];

/// One attempt, node to child.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Request {
    pub(super) digest: [u8; 32],
    pub(super) input: Vec<u8>,
    pub(super) limits: JobLimits,
    pub(super) resume_state: Option<Vec<u8>>,
    /// The job's grants.
    pub(super) egress: Vec<HttpGrant>,
    /// The plaintext of the secrets they name.
    pub(super) secrets: Secrets,
    /// The node's bounds on the job's calls.
    pub(super) egress_limits: EgressLimits,
    /// The secrets the job may read.
    pub(super) readable: Vec<String>,
    /// The job, what the attempt replays, and whether it records its calls
    /// (through the node: [`Event::Record`]).
    pub(super) job: u64,
    pub(super) replay: Replay,
    pub(super) records: bool,
    /// The blobs the job reads (files the child opens) and where it writes.
    pub(super) blobs: JobBlobs,
    /// The context the job's calls carry (`JobRequest::trace`).
    pub(super) trace: Option<cohort_master::TraceContext>,
    /// Whether the node's observer wants the job's lines one by one
    /// ([`Event::Line`]).
    pub(super) lines: bool,
}

/// What a child tells the node about the attempt it runs.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Event {
    /// Log bytes the job's log kept.
    Log(Vec<u8>),
    /// One line the job logged, as [`JobObserver::log_line`] has it (only
    /// when [`Request::lines`] asks).
    Line(LineLevel, String),
    /// A progress report, already clamped and truncated.
    Progress(Progress),
    /// A checkpoint within the job's limit, and where the attempt was in
    /// its record of calls.
    Checkpoint(Vec<u8>, Option<TapeMark>),
    /// A recorded call to make durable: the node answers on the child's
    /// stdin with a [`Recorded`] frame before the child goes on.
    Record(RecordedCall),
    /// A call that entered the attempt's record, as it ended.
    Call(HttpCall),
    /// The attempt's end.
    Done(Done),
}

/// The node's answer to an [`Event::Record`]: `Ok` once the call is
/// durable, or why it is not.
pub(super) type Recorded = Result<(), Unrecorded>;

/// What a finished attempt's [`JobReport`] holds beyond the log, progress
/// and checkpoint already relayed.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Done {
    /// The output, or the failure as JSON: `JobFailure` is internally
    /// tagged, which postcard cannot carry, and its JSON is its API form.
    outcome: Result<Vec<u8>, String>,
    /// Log bytes the child's log dropped (it relays only what it kept).
    log_dropped_bytes: u64,
    duration_us: u64,
    memory_peak_bytes: u64,
    /// CPU time the attempt used, metered in the child.
    cpu_us: u64,
    egress_bytes: u64,
    /// The CPU time the child has used so far, all its threads: what the
    /// next attempt, should it end without the child's word, is charged
    /// from.
    process_cpu_us: u64,
    /// The attempt's record of calls, in the order they were made.
    calls: Vec<HttpCall>,
    calls_dropped: u32,
    /// A successful attempt's outputs, left in files of the attempt's
    /// blob space for the node to take.
    outputs: Vec<SentBlob>,
}

/// An output blob a child wrote: the node takes the file only from the
/// attempt's blob space, and its store hashes the bytes again (the child is
/// not trusted to have).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct SentBlob {
    name: String,
    digest: [u8; 32],
    size: u64,
    path: PathBuf,
}

/// The node's side: starts children, hands each one job at a time.
#[derive(Debug)]
pub(crate) struct Sandboxes {
    program: PathBuf,
    data_dir: PathBuf,
    memory_bytes_max: u64,
    /// The CA file children trust for jobs' `https` calls.
    egress_ca: Option<PathBuf>,
    /// Children waiting for a job, and since when; the reaper thread holds
    /// a weak reference.
    idle: Arc<Mutex<Vec<Idle>>>,
}

/// A child waiting for its next job.
#[derive(Debug)]
struct Idle {
    sandbox: Sandbox,
    since: Instant,
}

/// One child process and its pipes.
#[derive(Debug)]
struct Sandbox {
    process: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The CPU time the child said it had used, all its threads, when it
    /// last reported an attempt (zero before its first).
    cpu_reported: Duration,
}

/// What the node saw of an attempt, relayed as it ran: the report of one
/// that finished, or of one that was killed (as an in-thread attempt cut
/// off by its timeout is reported).
struct Seen {
    /// Capped at the job's limit and masked again: the child is not
    /// trusted to have.
    log: JobLog,
    progress: Option<Progress>,
    checkpoint: Option<Vec<u8>>,
    observer: Option<Arc<dyn JobObserver>>,
    /// Masks the attempt's secret values in its progress and failure.
    mask: Option<Arc<Mask>>,
    /// Calls relayed as they ended (in the order they ended).
    calls: Vec<HttpCall>,
}

impl Sandboxes {
    /// Children are started by `program`; one idle for `idle_max` is
    /// stopped (its memory is the node's). They trust `egress_ca` for jobs'
    /// `https` calls.
    pub(crate) fn new(
        program: PathBuf,
        data_dir: PathBuf,
        memory_bytes_max: u64,
        idle_max: Duration,
        egress_ca: Option<PathBuf>,
    ) -> Self {
        let idle = Arc::new(Mutex::new(Vec::new()));
        spawn_reaper(Arc::downgrade(&idle), idle_max);
        Self {
            program,
            data_dir,
            memory_bytes_max,
            egress_ca,
            idle,
        }
    }

    /// Runs one attempt of the module `digest` (compiled into the disk cache
    /// by this runtime) in a child, its calls bounded by `egress_limits`.
    /// The caller holds one of the runtime's slots, so there are never more
    /// children than slots.
    pub(crate) async fn run(
        &self,
        digest: Digest,
        request: JobRequest,
        egress_limits: EgressLimits,
    ) -> JobReport {
        let started = Instant::now();
        let JobRequest {
            input,
            limits,
            resume_state,
            observer,
            egress,
            secrets,
            readable,
            recording,
            blobs,
            trace,
        } = request;
        let space = blobs.space.clone();
        let Recording {
            job,
            replay,
            recorder,
        } = recording;
        let deadline = tokio::time::Instant::now() + limits.timeout() + SANDBOX_KILL_GRACE;
        let mask = Mask::new(&secrets);
        let lines = observer.as_ref().is_some_and(|o| o.wants_lines());
        let mut seen = Seen {
            log: JobLog::new(
                usize::try_from(limits.log_bytes).unwrap_or(usize::MAX),
                observer.clone(),
            )
            .masking(mask.clone()),
            progress: None,
            checkpoint: None,
            observer,
            mask,
            calls: Vec::new(),
        };
        let mut sandbox = match self.take() {
            Ok(sandbox) => sandbox,
            Err(error) => {
                return seen.failed(
                    JobFailure::Internal {
                        message: format!(
                            "cannot start a sandbox process ({}): {error}",
                            self.program.display()
                        ),
                    },
                    started,
                    None,
                );
            }
        };
        let request = Request {
            digest: digest.to_bytes(),
            input,
            limits,
            resume_state,
            egress,
            secrets,
            readable,
            egress_limits,
            job,
            replay,
            records: recorder.is_some(),
            blobs,
            trace,
            lines,
        };
        let exchange = sandbox.exchange(&request, recorder.as_deref(), &mut seen);
        let mut report = match tokio::time::timeout_at(deadline, exchange).await {
            Ok(Ok(done)) => {
                sandbox.cpu_reported = Duration::from_micros(done.process_cpu_us);
                self.put_back(sandbox);
                seen.done(done, &limits, space.as_ref())
            }
            Ok(Err(error)) => {
                let cpu = sandbox.cpu_since_reported();
                let status = sandbox.kill().await;
                tracing::warn!(%digest, %error, status, "a sandbox process failed; it was stopped");
                let failure = JobFailure::Internal {
                    message: format!(
                        "the sandbox process running the job failed: {error} (it {status})"
                    ),
                };
                seen.failed(failure, started, cpu)
            }
            Err(_deadline) => {
                let cpu = sandbox.cpu_since_reported();
                sandbox.kill().await;
                let failure = JobFailure::Timeout {
                    limit_ms: limits.timeout_ms,
                };
                seen.failed(failure, started, cpu)
            }
        };
        // Metered on one thread: never more than the attempt took, whatever
        // the child says (or the kernel counted for it since it started).
        report.cpu = report.cpu.min(started.elapsed());
        report
    }

    fn take(&self) -> std::io::Result<Sandbox> {
        while let Some(Idle { mut sandbox, .. }) = self.lock_idle().pop() {
            // One that died while idle (killed from outside, say) would fail
            // a job it never ran.
            match sandbox.process.try_wait() {
                Ok(None) => return Ok(sandbox),
                Ok(Some(status)) => {
                    tracing::warn!(%status, "an idle sandbox process had exited; starting another")
                }
                Err(error) => tracing::warn!(%error, "cannot check an idle sandbox process"),
            }
        }
        let mut command = Command::new(&self.program);
        // Nothing of the node's environment (where its keys are, say) but
        // what the sandbox's own logging reads.
        command.env_clear();
        for name in SANDBOX_ENV {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
            .arg("sandbox")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--memory-bytes-max")
            .arg(self.memory_bytes_max.to_string())
            .arg("--parent-pid")
            .arg(std::process::id().to_string());
        if let Some(ca) = &self.egress_ca {
            command.arg("--egress-ca").arg(ca);
        }
        let mut process = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = process.stdin.take().expect("stdin is piped");
        let stdout = process.stdout.take().expect("stdout is piped");
        Ok(Sandbox {
            process,
            stdin,
            stdout: BufReader::new(stdout),
            cpu_reported: Duration::ZERO,
        })
    }

    fn put_back(&self, sandbox: Sandbox) {
        self.lock_idle().push(Idle {
            sandbox,
            since: Instant::now(),
        });
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        lock(&self.idle)
    }
}

fn lock(idle: &Mutex<Vec<Idle>>) -> std::sync::MutexGuard<'_, Vec<Idle>> {
    idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Stops children idle for `idle_max` (dropping one kills it), checking a
/// few times per `idle_max`, until the runtime that owns `idle` is gone.
fn spawn_reaper(idle: std::sync::Weak<Mutex<Vec<Idle>>>, idle_max: Duration) {
    let every = (idle_max / 4).clamp(SANDBOX_REAPER_PERIOD_MIN, SANDBOX_REAPER_PERIOD_MAX);
    std::thread::Builder::new()
        .name("cohort-sandbox-reaper".into())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                let Some(idle) = idle.upgrade() else {
                    return;
                };
                let stale: Vec<Idle> = {
                    let mut idle = lock(&idle);
                    let (stale, fresh) = std::mem::take(&mut *idle)
                        .into_iter()
                        .partition(|child| child.since.elapsed() >= idle_max);
                    *idle = fresh;
                    stale
                };
                if !stale.is_empty() {
                    tracing::debug!(stopped = stale.len(), "idle sandbox processes stopped");
                }
            }
        })
        .expect("can spawn the sandbox reaper thread");
}

impl Sandbox {
    /// Sends the request and relays the child's events until it is done.
    /// Recorded calls go to `recorder`; the child's requests for them are
    /// bounded like the calls it may make.
    async fn exchange(
        &mut self,
        request: &Request,
        recorder: Option<&dyn Recorder>,
        seen: &mut Seen,
    ) -> std::io::Result<Done> {
        self.stdin.write_all(&frame(request)?).await?;
        self.stdin.flush().await?;
        let mut records: u32 = 0;

        let limits = &request.limits;
        let frame_max = limits.output_bytes
            + limits.log_bytes
            + limits.checkpoint_bytes
            + cohort_master::limits::TAPE_BYTES_MAX
            + SANDBOX_FRAME_SLACK_BYTES;
        loop {
            let mut length = [0u8; 4];
            self.stdout.read_exact(&mut length).await?;
            let length = u64::from(u32::from_le_bytes(length));
            if length > frame_max {
                return Err(invalid(format!(
                    "it sent a {length}-byte frame; this job's limit is {frame_max}"
                )));
            }
            let mut body = vec![0u8; length as usize];
            self.stdout.read_exact(&mut body).await?;
            let event: Event = decode(&body)?;
            match event {
                Event::Log(bytes) => seen.log.append(&bytes),
                Event::Line(level, message) => {
                    if message.len() as u64 > limits.log_bytes {
                        return Err(invalid(format!(
                            "it relayed a {}-byte log line; this job's log holds {}",
                            message.len(),
                            limits.log_bytes
                        )));
                    }
                    if let Some(observer) = &seen.observer {
                        let message = match seen.mask.as_deref() {
                            Some(mask) => mask.text(&message),
                            None => message,
                        };
                        observer.log_line(level, &message);
                    }
                }
                Event::Progress(progress) => {
                    if !progress.is_bounded() {
                        return Err(invalid(format!(
                            "it reported progress {} with a {}-byte message",
                            progress.fraction,
                            progress.message.len()
                        )));
                    }
                    let progress = Progress::bounded(
                        progress.fraction,
                        progress.message,
                        seen.mask.as_deref(),
                    );
                    if let Some(observer) = &seen.observer {
                        observer.progress(progress.fraction, &progress.message);
                    }
                    seen.progress = Some(progress);
                }
                Event::Checkpoint(state, mark) => {
                    if state.len() as u64 > limits.checkpoint_bytes {
                        return Err(invalid(format!(
                            "it sent a {}-byte checkpoint; the limit is {}",
                            state.len(),
                            limits.checkpoint_bytes
                        )));
                    }
                    if mark.is_some() && recorder.is_none() {
                        return Err(invalid(
                            "it marked a checkpoint of an attempt that records nothing".into(),
                        ));
                    }
                    if let Some(observer) = &seen.observer {
                        observer.checkpoint(&state, mark);
                    }
                    seen.checkpoint = Some(state);
                }
                Event::Call(call) => {
                    if seen.calls.len() >= CALLS_RECORDED_MAX || !egress::is_bounded(&call) {
                        return Err(invalid(format!(
                            "it relayed a call over the record's bounds ({} calls so far)",
                            seen.calls.len()
                        )));
                    }
                    seen.calls.push(call);
                }
                Event::Record(call) => {
                    records += 1;
                    let Some(recorder) = recorder else {
                        return Err(invalid(
                            "it recorded a call for an attempt that records nothing".into(),
                        ));
                    };
                    if records > request.egress_limits.calls_per_attempt {
                        return Err(invalid(format!(
                            "it recorded more calls than the {} an attempt makes",
                            request.egress_limits.calls_per_attempt
                        )));
                    }
                    cohort_master::check_call(&call)
                        .map_err(|why| invalid(format!("it recorded a call {why}")))?;
                    let answer: Recorded = recorder.record(call).await;
                    self.stdin.write_all(&frame(&answer)?).await?;
                    self.stdin.flush().await?;
                }
                Event::Done(done) => {
                    check_calls(&done.calls, done.calls_dropped)?;
                    return Ok(done);
                }
            }
        }
    }

    /// The CPU time the child used since its last report (read from the
    /// kernel, not the child): what an attempt that ends without the
    /// child's word (killed at its deadline, or failed) is charged, read
    /// before the child is stopped. `None` if it cannot be read.
    fn cpu_since_reported(&self) -> Option<Duration> {
        let used = super::cpu::process_cpu(self.process.id()?)?;
        Some(used.saturating_sub(self.cpu_reported))
    }

    /// Kills the child and says how it ended.
    async fn kill(mut self) -> String {
        let _ = self.process.start_kill();
        match self.process.wait().await {
            Ok(status) => format!("exited: {status}"),
            Err(error) => format!("could not be waited for: {error}"),
        }
    }
}

impl Seen {
    /// The report of an attempt the child finished. Its output is checked
    /// against the job's limit again: the child is not trusted to have.
    fn done(mut self, done: Done, limits: &JobLimits, space: Option<&BlobSpace>) -> JobReport {
        let outcome = match done.outcome {
            Ok(output) => bounded_output(output, limits),
            Err(json) => Err(decode_failure(&json)),
        };
        let (outcome, outputs) = match (outcome, taken(done.outputs, space)) {
            (Ok(output), Ok(outputs)) => (Ok(output), outputs),
            (Ok(_), Err(why)) => (
                Err(JobFailure::Internal {
                    message: format!(
                        "the sandbox process reported outputs it could not have written: {why}"
                    ),
                }),
                Vec::new(),
            ),
            (Err(failure), _) => (Err(failure), Vec::new()),
        };
        self.log.count_dropped(done.log_dropped_bytes);
        // The child's record is whole and in order; it replaces the relayed.
        self.calls = done.calls;
        let mut report = self.report(
            outcome,
            Duration::from_micros(done.duration_us),
            done.memory_peak_bytes,
            done.calls_dropped,
        );
        report.outputs = outputs;
        report.cpu = Duration::from_micros(done.cpu_us);
        report.egress_bytes = done.egress_bytes;
        report
    }

    /// The report of an attempt that ended without the child's word: the
    /// calls it relayed (those still running, and any beyond the record,
    /// are unknown), charged `cpu` (what the kernel counted for its child,
    /// when known).
    fn failed(self, failure: JobFailure, started: Instant, cpu: Option<Duration>) -> JobReport {
        let mut report = self.report(Err(failure), started.elapsed(), 0, 0);
        report.cpu = cpu.unwrap_or_default();
        report
    }

    fn report(
        mut self,
        outcome: Result<Vec<u8>, JobFailure>,
        duration: Duration,
        memory_peak_bytes: u64,
        calls_dropped: u32,
    ) -> JobReport {
        self.log.flush();
        JobReport {
            outcome: outcome.map_err(|failure| failure.reported(self.mask.as_deref())),
            log_dropped_bytes: self.log.dropped_bytes(),
            log: self.log.finish(),
            progress: self.progress,
            checkpoint: self.checkpoint,
            duration,
            memory_peak_bytes,
            // What the child metered, once it reports, or was charged.
            cpu: Duration::ZERO,
            egress_bytes: 0,
            calls: self.calls,
            calls_dropped,
            outputs: Vec::new(),
        }
    }
}

/// A child's outputs as the node takes them: files directly in the
/// attempt's blob space, within its bounds (count, names, bytes). Their
/// digests are checked when they are stored ([`WrittenBlob::verified`]).
fn taken(sent: Vec<SentBlob>, space: Option<&BlobSpace>) -> Result<Vec<WrittenBlob>, String> {
    // Whatever happens, every file named is removed unless it is taken.
    let mut files = Vec::with_capacity(sent.len());
    let mut named = Vec::with_capacity(sent.len());
    for blob in sent {
        let inside = space.is_some_and(|space| job_blobs::adoptable(&space.dir, &blob.path));
        files.push(
            inside
                .then(|| tempfile::TempPath::try_from_path(&blob.path).ok())
                .flatten(),
        );
        named.push(blob);
    }
    let Some(space) = space else {
        return match named.is_empty() {
            true => Ok(Vec::new()),
            false => Err("this attempt had no blob space".into()),
        };
    };
    if named.len() > OUTPUTS_MAX {
        return Err(format!("{} outputs, over {OUTPUTS_MAX}", named.len()));
    }
    let total = named
        .iter()
        .try_fold(0u64, |total, blob| total.checked_add(blob.size));
    if total.is_none_or(|total| total > space.bytes_max) {
        return Err("more output bytes than the job may write".into());
    }
    let mut taken = Vec::with_capacity(named.len());
    for (blob, file) in named.into_iter().zip(files) {
        job_blobs::check_output_name(&blob.name)?;
        if taken.iter().any(|t: &WrittenBlob| t.name == blob.name) {
            return Err(format!("output {:?} twice", blob.name));
        }
        let Some(file) = file else {
            return Err(format!(
                "output {:?} is not a file of the attempt's blob space",
                blob.name
            ));
        };
        taken.push(WrittenBlob {
            name: blob.name,
            digest: blob.digest,
            size: blob.size,
            file,
            verified: false,
        });
    }
    Ok(taken)
}

impl Done {
    /// What the child sends at the end of `report` (whose log, progress and
    /// checkpoint it has already relayed).
    pub(super) fn of(report: JobReport) -> Self {
        Self {
            outcome: report.outcome.map_err(|failure| {
                serde_json::to_string(&failure).expect("a job failure serializes")
            }),
            log_dropped_bytes: report.log_dropped_bytes,
            duration_us: u64::try_from(report.duration.as_micros()).unwrap_or(u64::MAX),
            memory_peak_bytes: report.memory_peak_bytes,
            cpu_us: u64::try_from(report.cpu.as_micros()).unwrap_or(u64::MAX),
            egress_bytes: report.egress_bytes,
            process_cpu_us: u64::try_from(super::cpu::own_process_cpu().as_micros())
                .unwrap_or(u64::MAX),
            calls: report.calls,
            calls_dropped: report.calls_dropped,
            // Left for the node, which removes them unless it stores them.
            outputs: (report.outputs.into_iter())
                .filter_map(|blob| {
                    let path = blob.file.keep().ok()?;
                    Some(SentBlob {
                        name: blob.name,
                        digest: blob.digest,
                        size: blob.size,
                        path,
                    })
                })
                .collect(),
        }
    }
}

/// Refuses a child's record of calls that no attempt could have made.
fn check_calls(calls: &[HttpCall], dropped: u32) -> std::io::Result<()> {
    let made = calls.len() as u64 + u64::from(dropped);
    if made > u64::from(crate::limits::EGRESS_CALLS_PER_ATTEMPT_MAX) {
        return Err(invalid(format!(
            "it reported {made} calls; an attempt makes at most {}",
            crate::limits::EGRESS_CALLS_PER_ATTEMPT_MAX
        )));
    }
    if calls.len() > CALLS_RECORDED_MAX {
        return Err(invalid(format!(
            "it reported {} calls; a record holds {CALLS_RECORDED_MAX}",
            calls.len()
        )));
    }
    if !calls.iter().all(egress::is_bounded) {
        return Err(invalid(
            "it reported a call whose method, origin or error is too long".to_owned(),
        ));
    }
    Ok(())
}

/// A failure the child sent as JSON.
fn decode_failure(json: &str) -> JobFailure {
    serde_json::from_str(json).unwrap_or_else(|error| JobFailure::Internal {
        message: format!("the sandbox process sent a failure that does not decode: {error}"),
    })
}

/// `message` as one frame (length, then body), written with one call.
pub(super) fn frame(message: &impl Serialize) -> std::io::Result<Vec<u8>> {
    let mut frame = postcard::to_extend(message, vec![0u8; 4]).map_err(std::io::Error::other)?;
    let length = u32::try_from(frame.len() - 4)
        .map_err(|_| std::io::Error::other("a message is larger than a frame"))?;
    frame[..4].copy_from_slice(&length.to_le_bytes());
    Ok(frame)
}

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

pub(super) fn decode<T: DeserializeOwned>(body: &[u8]) -> std::io::Result<T> {
    match postcard::take_from_bytes(body) {
        Ok((value, [])) => Ok(value),
        Ok((_, rest)) => Err(invalid(format!(
            "a frame has {} bytes after its message",
            rest.len()
        ))),
        Err(error) => Err(invalid(format!("a frame does not decode: {error}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_and_requests_round_trip_and_trailing_bytes_are_refused() {
        let request = Request {
            digest: [7; 32],
            input: b"input".to_vec(),
            limits: JobLimits::default(),
            resume_state: Some(b"state".to_vec()),
            egress: vec![
                HttpGrant::parse("https://api.example.com/v1", &["POST".into()], true)
                    .unwrap()
                    .with_headers(&[("authorization".into(), "Bearer {secret:API_KEY}".into())])
                    .unwrap(),
            ],
            secrets: vec![("API_KEY".to_owned(), "s3cr3t-value".to_owned())].into(),
            egress_limits: EgressLimits {
                calls_per_attempt: 3,
                ..EgressLimits::default()
            },
            readable: vec!["API_KEY".into()],
            job: 4,
            replay: Replay {
                mark: TapeMark { calls: 1, reads: 0 },
                submitted_at: 8,
                ..Replay::default()
            },
            records: true,
            blobs: JobBlobs {
                inputs: vec![job_blobs::InputBlob {
                    name: "input".into(),
                    digest: [9; 32],
                    size: 10,
                    path: "/data/blobs/09".into(),
                }],
                space: Some(BlobSpace {
                    dir: "/data/blobs/partial/attempt-1".into(),
                    bytes_max: 1 << 30,
                }),
            },
            trace: Some(cohort_master::TraceContext {
                trace_id: [1; 16],
                span_id: [2; 8],
                flags: 1,
                link: false,
            }),
            lines: true,
        };
        let body = postcard::to_allocvec(&request).unwrap();
        let back: Request = decode(&body).unwrap();
        assert_eq!(back.digest, [7; 32]);
        assert_eq!(back.limits, JobLimits::default());
        assert_eq!(back.resume_state.as_deref(), Some(&b"state"[..]));
        assert_eq!(back.egress, request.egress);
        assert_eq!(back.secrets, request.secrets);
        assert_eq!(back.secrets.get("API_KEY"), Some("s3cr3t-value"));
        assert_eq!(back.egress_limits, request.egress_limits);
        assert_eq!(back.blobs, request.blobs);
        assert_eq!(back.trace, request.trace);
        assert!(back.lines);
        assert!(!format!("{back:?}").contains("s3cr3t"), "{back:?}");

        let mut longer = body.clone();
        longer.push(0);
        assert!(decode::<Request>(&longer).is_err());
        assert!(decode::<Event>(&[0xff, 0xff, 0xff]).is_err());

        let line = postcard::to_allocvec(&Event::Line(LineLevel::Warn, "low disk".into())).unwrap();
        let Event::Line(level, message) = decode(&line).unwrap() else {
            panic!("a line event")
        };
        assert_eq!((level, message.as_str()), (LineLevel::Warn, "low disk"));
    }

    #[test]
    fn a_failure_keeps_its_code_across_the_wire() {
        let report = JobReport {
            outcome: Err(JobFailure::MemoryLimit {
                requested_bytes: 2,
                limit_bytes: 1,
            }),
            log: b"log".to_vec(),
            log_dropped_bytes: 4,
            progress: None,
            checkpoint: Some(vec![1]),
            duration: Duration::from_millis(5),
            memory_peak_bytes: 6,
            cpu: Duration::from_micros(4_321),
            egress_bytes: 9,
            calls: vec![call("egress_denied")],
            calls_dropped: 7,
            outputs: Vec::new(),
        };
        let event = Event::Done(Done::of(report));
        let body = postcard::to_allocvec(&event).unwrap();
        let Event::Done(done) = decode(&body).unwrap() else {
            panic!("a done event")
        };
        // The node relayed the log as it came; the child dropped 4 bytes.
        let mut seen = Seen {
            log: JobLog::new(64, None),
            progress: None,
            checkpoint: None,
            observer: None,
            mask: None,
            calls: vec![call("egress_timeout")],
        };
        seen.log.append(b"log");
        let back = seen.done(done, &JobLimits::default(), None);
        assert_eq!(
            back.outcome.unwrap_err(),
            JobFailure::MemoryLimit {
                requested_bytes: 2,
                limit_bytes: 1
            }
        );
        assert_eq!(back.log_dropped_bytes, 4);
        let log = String::from_utf8(back.log).unwrap();
        assert!(
            log.starts_with("log\n[cohort] log truncated: 4 bytes"),
            "{log}"
        );
        assert_eq!(back.duration, Duration::from_millis(5));
        assert_eq!(back.memory_peak_bytes, 6);
        assert_eq!(
            (back.cpu, back.egress_bytes),
            (Duration::from_micros(4_321), 9)
        );
        // The child's record replaces the calls it relayed.
        assert_eq!(back.calls, [call("egress_denied")]);
        assert_eq!(back.calls_dropped, 7);
    }

    #[test]
    fn the_node_masks_what_a_child_relays_again() {
        let secrets: Secrets = vec![("API_KEY".to_owned(), "s3cr3t-value".to_owned())].into();
        let mask = Mask::new(&secrets);
        let mut seen = Seen {
            log: JobLog::new(1000, None).masking(mask.clone()),
            progress: None,
            checkpoint: None,
            observer: None,
            mask,
            calls: Vec::new(),
        };
        // A value split across two frames.
        seen.log.append(b"got s3cr3t");
        seen.log.append(b"-value\n");
        let failure = JobFailure::JobError {
            code: "bad_key".into(),
            message: "s3cr3t-value".into(),
        };
        let done = Done {
            outcome: Err(serde_json::to_string(&failure).unwrap()),
            log_dropped_bytes: 0,
            duration_us: 1,
            memory_peak_bytes: 1,
            cpu_us: 1,
            egress_bytes: 0,
            process_cpu_us: 1,
            calls: Vec::new(),
            calls_dropped: 0,
            outputs: Vec::new(),
        };
        let report = seen.done(done, &JobLimits::default(), None);
        assert_eq!(report.log, b"got [secret:API_KEY]\n");
        assert_eq!(
            report.outcome.unwrap_err(),
            JobFailure::JobError {
                code: "bad_key".into(),
                message: "[secret:API_KEY]".into()
            }
        );
    }

    fn call(error: &str) -> HttpCall {
        HttpCall {
            method: "GET".into(),
            origin: "https://api.example.com:443".into(),
            status: None,
            error: Some(error.into()),
            sent_bytes: 0,
            received_bytes: 0,
            ms: 1,
        }
    }

    #[test]
    fn a_record_of_calls_no_attempt_could_make_is_refused() {
        assert!(check_calls(&vec![call("egress_denied"); CALLS_RECORDED_MAX], 0).is_ok());
        assert!(check_calls(&vec![call("egress_denied"); CALLS_RECORDED_MAX + 1], 0).is_err());
        assert!(check_calls(&[], u32::MAX).is_err());
        assert!(check_calls(&[call("no_such_code")], 0).is_err());
        let long_origin = HttpCall {
            origin: "h".repeat(crate::limits::EGRESS_ORIGIN_BYTES_MAX + 1),
            ..call("egress_denied")
        };
        assert!(check_calls(&[long_origin], 0).is_err());
        let long_method = HttpCall {
            method: "M".repeat(crate::limits::EGRESS_METHOD_BYTES_MAX + 1),
            ..call("egress_denied")
        };
        assert!(check_calls(&[long_method], 0).is_err());
        let long_code = call(&"e".repeat(crate::limits::ERROR_CODE_BYTES_MAX + 1));
        assert!(check_calls(&[long_code], 0).is_err());
    }
}
