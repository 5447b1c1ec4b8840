//! `cohort sandbox`: the child's side of process isolation.
//!
//! A node starts this process (the same binary) and hands it one job at a
//! time over stdin; the child runs each with a [`Runtime`] of its own and
//! answers with the frames described in [`super::sandbox`], which owns the
//! wire and the node's side (the pool). Kept apart from that module so that
//! the pool, which the engine holds, does not import the engine back.
//!
//! The child trusts the node and nothing else: it reads only frames bounded
//! by [`SANDBOX_REQUEST_BYTES_MAX`], loads modules only from the compiled-module
//! cache the node wrote, and exits when its stdin closes or its parent is
//! gone (see the watchdog below).
//!
//! [`SANDBOX_REQUEST_BYTES_MAX`]: crate::limits::SANDBOX_REQUEST_BYTES_MAX

use super::egress::{CallSink, HttpCall};
use super::engine::Runtime;
use super::job::{JobFailure, JobReport, JobRequest, Progress};
use super::module::Digest;
use super::observer::{JobObserver, LineLevel};
use super::sandbox::{Done, Event, Recorded, Request, decode, frame};
use super::tape::{RecordFuture, Recorder, Recording, Unrecorded};
use crate::limits::{MEMORY_BYTES_CEILING, SANDBOX_ORPHAN_CHECK, SANDBOX_REQUEST_BYTES_MAX};
use cohort_master::{RecordedCall, TapeMark};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a child whose node is gone exits.
const ORPHANED_EXIT_CODE: i32 = 3;

/// The arguments of `cohort sandbox`, which only a node starts.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// The node runtime's data directory (its compiled-module cache).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// The node's largest job memory limit.
    #[arg(long)]
    pub memory_bytes_max: u64,
    /// The node's process id: this process exits once its parent is another
    /// (the node died, even before this process started).
    #[arg(long)]
    pub parent_pid: i32,
    /// A PEM file of CA certificates jobs' `https` calls trust besides the
    /// system's roots (the node's own).
    #[arg(long)]
    pub egress_ca: Option<PathBuf>,
}

/// Forwards a running job's log, progress, checkpoints and calls to the node.
#[derive(Debug)]
struct Forward {
    /// Standard output as a plain file: `std::io::Stdout` splits writes at
    /// newlines, and a frame is binary.
    out: Mutex<std::fs::File>,
    /// Whether the job running now relays its lines one by one
    /// (`Request::lines`).
    lines: AtomicBool,
}

impl Forward {
    fn send(&self, event: &Event) -> std::io::Result<()> {
        let frame = frame(event)?;
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        out.write_all(&frame)?;
        out.flush()
    }
}

impl JobObserver for Forward {
    // A failed write means the node is gone or stopped listening; the job
    // ends when the node kills this process or the watchdog sees it gone.
    fn log(&self, bytes: &[u8]) {
        let _ = self.send(&Event::Log(bytes.to_vec()));
    }

    fn wants_lines(&self) -> bool {
        self.lines.load(Ordering::Relaxed)
    }

    fn log_line(&self, level: LineLevel, message: &str) {
        let _ = self.send(&Event::Line(level, message.to_string()));
    }

    fn progress(&self, fraction: f32, message: &str) {
        let _ = self.send(&Event::Progress(Progress {
            fraction,
            message: message.to_string(),
        }));
    }

    fn checkpoint(&self, state: &[u8], mark: Option<TapeMark>) {
        let _ = self.send(&Event::Checkpoint(state.to_vec(), mark));
    }
}

/// Makes the attempt's recorded calls durable through the node: each is
/// sent when the job's call asks (so before the attempt's `Done`), and the
/// node answers them in the order they came. One reader per call reads one
/// answer and hands it to the oldest call still waiting, whether or not
/// that call still waits for it: every answer is read before the next job's
/// request (see [`Answers::drained`]).
#[derive(Debug)]
struct ThroughNode {
    forward: Arc<Forward>,
    answers: Arc<Answers>,
}

/// The calls waiting for the node's answers, oldest first, and stdin.
#[derive(Debug)]
struct Answers {
    stdin: Mutex<std::io::Stdin>,
    waiting: Mutex<VecDeque<tokio::sync::oneshot::Sender<Recorded>>>,
    /// Told when the last waiting call got its answer.
    none_waiting: std::sync::Condvar,
}

impl Answers {
    fn waiting(
        &self,
    ) -> std::sync::MutexGuard<'_, VecDeque<tokio::sync::oneshot::Sender<Recorded>>> {
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reads one answer and hands it to the oldest waiting call.
    fn read_one(&self) {
        let mut stdin = self
            .stdin
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let answer = match read_frame::<Recorded>(&mut *stdin) {
            Ok(Some(answer)) => answer,
            Ok(None) => Err(Unrecorded::Failed("the node is gone".into())),
            Err(error) => Err(Unrecorded::Failed(format!(
                "the node's answer was not read: {error}"
            ))),
        };
        let mut waiting = self.waiting();
        if let Some(call) = waiting.pop_front() {
            let _ = call.send(answer);
        }
        if waiting.is_empty() {
            self.none_waiting.notify_all();
        }
    }

    /// Waits until every answer asked for was read, so that the next frame
    /// on stdin is the node's next request.
    fn drained(&self) {
        let waiting = self.waiting();
        let _drained = self
            .none_waiting
            .wait_while(waiting, |waiting| !waiting.is_empty())
            .unwrap_or_else(|poisoned| poisoned.into_inner());
    }
}

impl Recorder for ThroughNode {
    fn record(&self, call: RecordedCall) -> RecordFuture {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let sent = {
            // In the order sent, so the answers, which come in that order,
            // go to their calls.
            let mut waiting = self.answers.waiting();
            let sent = self.forward.send(&Event::Record(call));
            if sent.is_ok() {
                waiting.push_back(answer);
            }
            sent
        };
        if let Err(error) = sent {
            return Box::pin(async move {
                Err(Unrecorded::Failed(format!("the node is gone: {error}")))
            });
        }
        let answers = self.answers.clone();
        std::thread::Builder::new()
            .name("cohort-sandbox-answer".into())
            .spawn(move || answers.read_one())
            .expect("can spawn a thread for the node's answer");
        Box::pin(async move {
            answered.await.unwrap_or_else(|_| {
                Err(Unrecorded::Failed("the node's answer was not read".into()))
            })
        })
    }
}

/// `cohort sandbox`: runs the jobs a node sends on stdin, one at a time,
/// until stdin closes.
pub fn serve(args: SandboxArgs) -> anyhow::Result<()> {
    spawn_orphan_watchdog(args.parent_pid);
    anyhow::ensure!(
        (1..=MEMORY_BYTES_CEILING).contains(&args.memory_bytes_max),
        "--memory-bytes-max must be 1..={MEMORY_BYTES_CEILING}"
    );
    let executor = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let runtime = Runtime::sandbox_child(args.data_dir, args.memory_bytes_max, args.egress_ca)?;
    let stdout = std::io::stdout().as_fd().try_clone_to_owned()?;
    let forward = Arc::new(Forward {
        out: Mutex::new(std::fs::File::from(stdout)),
        lines: AtomicBool::new(false),
    });
    let answers = Arc::new(Answers {
        stdin: Mutex::new(std::io::stdin()),
        waiting: Mutex::default(),
        none_waiting: std::sync::Condvar::new(),
    });
    loop {
        // An answer to a call the last job dropped comes first.
        answers.drained();
        let request = {
            let mut stdin = answers
                .stdin
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            read_request(&mut *stdin)?
        };
        let Some(request) = request else { break };
        let digest = Digest::from(request.digest);
        let request_limits = request.limits;
        forward.lines.store(request.lines, Ordering::Relaxed);
        let report = executor.block_on(async {
            match runtime.cached(&digest).await {
                Some(module) => {
                    let observer: Arc<dyn JobObserver> = forward.clone();
                    let relay = forward.clone();
                    let on_call: CallSink = Arc::new(move |call: &HttpCall| {
                        // As for the log: a node that stopped listening
                        // kills this process soon.
                        let _ = relay.send(&Event::Call(call.clone()));
                    });
                    let recorder: Option<Arc<dyn Recorder>> = match request.records {
                        true => Some(Arc::new(ThroughNode {
                            forward: forward.clone(),
                            answers: answers.clone(),
                        })),
                        false => None,
                    };
                    let job = JobRequest {
                        input: request.input,
                        limits: request_limits,
                        resume_state: request.resume_state,
                        observer: Some(observer),
                        egress: request.egress,
                        secrets: request.secrets,
                        readable: request.readable,
                        recording: Recording {
                            job: request.job,
                            replay: request.replay,
                            recorder,
                        },
                        blobs: request.blobs,
                        trace: request.trace,
                    };
                    runtime
                        .run_with(&module, job, Some(request.egress_limits), Some(on_call))
                        .await
                }
                None => JobReport {
                    outcome: Err(JobFailure::Internal {
                        message: format!(
                            "module {digest} is not in the compiled-module cache the sandbox reads"
                        ),
                    }),
                    log: Vec::new(),
                    log_dropped_bytes: 0,
                    progress: None,
                    checkpoint: None,
                    duration: Duration::ZERO,
                    memory_peak_bytes: 0,
                    cpu: Duration::ZERO,
                    egress_bytes: 0,
                    calls: Vec::new(),
                    calls_dropped: 0,
                    outputs: Vec::new(),
                },
            }
        });
        forward.send(&Event::Done(Done::of(report)))?;
    }
    Ok(())
}

/// The next request, or `None` once the node closed stdin.
fn read_request(stdin: &mut impl Read) -> anyhow::Result<Option<Request>> {
    read_frame(stdin)
}

/// The next frame from the node, or `None` once it closed stdin.
fn read_frame<T: serde::de::DeserializeOwned>(stdin: &mut impl Read) -> anyhow::Result<Option<T>> {
    let mut length = [0u8; 4];
    match stdin.read_exact(&mut length) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error.into()),
    }
    let length = u64::from(u32::from_le_bytes(length));
    anyhow::ensure!(
        length <= SANDBOX_REQUEST_BYTES_MAX,
        "a {length}-byte request is over {SANDBOX_REQUEST_BYTES_MAX}"
    );
    let mut body = vec![0u8; length as usize];
    stdin.read_exact(&mut body)?;
    Ok(Some(decode(&body)?))
}

/// Exits this process once its parent is not `parent` (the node died and
/// the process was re-parented). The node names itself rather than this
/// process reading its parent at start: a node that died between the spawn
/// and that read would otherwise never be missed.
fn spawn_orphan_watchdog(parent: i32) {
    let orphaned = move || {
        // SAFETY: getppid has no preconditions and cannot fail.
        unsafe { libc::getppid() != parent }
    };
    if orphaned() {
        std::process::exit(ORPHANED_EXIT_CODE);
    }
    std::thread::Builder::new()
        .name("cohort-sandbox-watchdog".into())
        .spawn(move || {
            loop {
                std::thread::sleep(SANDBOX_ORPHAN_CHECK);
                if orphaned() {
                    std::process::exit(ORPHANED_EXIT_CODE);
                }
            }
        })
        .expect("can spawn the sandbox watchdog thread");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_over_the_bound_is_refused_before_it_is_read() {
        let mut frame = u32::MAX.to_le_bytes().to_vec();
        frame.extend_from_slice(&[0; 16]);
        let error = read_request(&mut frame.as_slice()).unwrap_err();
        assert!(error.to_string().contains("over"), "{error}");
        assert!(read_request(&mut [].as_slice()).unwrap().is_none());
    }
}
