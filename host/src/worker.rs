//! The worker: pulls attempts from the master and runs them in the runtime.
//!
//! # Loop
//!
//! The worker long-polls the master with its free slot count; the poll is
//! also its heartbeat, so it polls at least every [`POLL_WAIT`] even when
//! every slot is busy (with `free = 0`). Each assignment runs in its own
//! task holding one slot: the module comes from the local module store, or
//! is fetched from a back-end node (sha256 checked) and stored there first;
//! it is compiled once and cached, usually before its first job (the module
//! store compiles each module stored here ahead: see `modules.rs`), else
//! before the attempt starts: the attempt's timeout starts once it is
//! compiled; it is run with the attempt's timeout and memory limit
//! and the checkpoint of an earlier attempt, and the outcome is reported with
//! the attempt's `(job id, attempt)`, so a report that arrives after the
//! master gave up on the attempt is ignored there.
//!
//! * **Checkpoints** go to the master while the job runs, at most one per
//!   `CHECKPOINT_INTERVAL`: a `watch` channel keeps only the newest, so a
//!   job that checkpoints in a loop neither queues up memory nor floods the
//!   journal.
//! * **Progress** goes to a [`ProgressBoard`] on this node and rides on the
//!   next poll to the master's node (at least every [`POLL_WAIT`]), so any
//!   front-end can show it; it is volatile (not journaled) by design.
//! * **Stop** orders (a cancelled job) drop the attempt's future, which
//!   stops the guest at its next yield point.
//! * **Guest code runs on its own threads** (a separate async runtime, one
//!   thread per CPU). A CPU-bound job yields only every epoch tick, and an
//!   async runtime whose tasks are always runnable polls its timers and
//!   sockets only every few dozen task polls: sharing threads with jobs
//!   delayed gossip heartbeats by most of a second, enough for the failure
//!   detector to declare busy workers dead. The node's control plane
//!   (gossip, HTTP, master calls) keeps its own threads.
//! * **Prefetch for short jobs.** Every poll is a round trip to the master
//!   and its assignment a journal write, so a worker that asks only for
//!   free slots leaves each slot idle for that round trip after every job:
//!   with jobs of tens of microseconds the slots were idle most of the time.
//!   While the attempts it runs are short (a moving average under
//!   [`PREFETCH_RUN_MAX`]), a worker also asks, per slot, for as many
//!   attempts as it runs during one poll round trip (both moving averages;
//!   at least 1, at most [`PREFETCH_PER_SLOT_MAX`]), which wait here, in
//!   assignment order, for a slot: a waiting attempt waits about one round
//!   trip, the time it would have waited for its poll anyway.
//!   Long jobs are not prefetched: an attempt waiting behind a long one on a
//!   busy worker while another worker is idle would cost far more than the
//!   round trip saves. A waiting attempt is held (its lease runs, a stop
//!   order drops it) and its timeout starts when it runs.
//! * **Leases count the run, not the data.** An attempt's lease (its
//!   timeout plus the master's grace, from its assignment) must not run
//!   out while the worker fetches and compiles its module, fetches its
//!   input blobs (gigabytes, perhaps) or stores its output blobs on a
//!   majority of the back-ends. While an attempt is in one of those
//!   phases, the worker renews its lease every quarter of the grace
//!   (within [`RENEW_EVERY_MIN`]..[`RENEW_EVERY_MAX`]), all due attempts
//!   in one `Renew`; each renewal starts the lease again. An attempt
//!   prepared within that first quarter, as most are, sends nothing. A
//!   worker that dies stops renewing, and the attempt is lost when the
//!   last lease runs out, as before; a transfer that stalls fails the
//!   attempt after `BLOB_IDLE_TIMEOUT` without bytes, so a renewed
//!   attempt still ends.
//! * **Shutdown**: stop polling, let running attempts finish within a grace
//!   period, stop the rest, then tell the master this worker is gone so its
//!   unfinished attempts are re-queued at once rather than at lease expiry.
//!
//! [`POLL_WAIT`]: crate::limits::POLL_WAIT
//! [`PREFETCH_RUN_MAX`]: crate::limits::PREFETCH_RUN_MAX
//! [`PREFETCH_PER_SLOT_MAX`]: crate::limits::PREFETCH_PER_SLOT_MAX
//! [`RENEW_EVERY_MIN`]: crate::limits::RENEW_EVERY_MIN
//! [`RENEW_EVERY_MAX`]: crate::limits::RENEW_EVERY_MAX

pub mod blobs;
pub use blobs::{Voters, WorkerBlobs};

use crate::cluster::link::MasterLink;
use crate::cluster::module_fetch::ModuleFetcher;
use crate::contract::{MasterError, Poll, PollResult, ProgressReport};
use crate::limits::{
    CHECKPOINT_INTERVAL, GONE_REPORT_WAIT, LOG_TAIL_BYTES, POLL_RETRY, POLL_WAIT,
    PREFETCH_PER_SLOT_MAX, PREFETCH_RUN_MAX, RENEW_EVERY_MAX, RENEW_EVERY_MIN, REPORT_RETRY_WAIT,
    REPORTING_MAX,
};
use crate::modules::ModuleStore;
use crate::runtime::{
    Digest, JobFailure, JobLimits, JobObserver, JobReport, JobRequest, Module, ModuleError,
    Progress, RecordFuture, Recorder, Recording, Runtime, Unrecorded,
};
use cohort_master::limits::RENEWALS_MAX;
use cohort_master::{Assignment, Command, Failure, JobId, Outcome, RecordedCall, Reply, TapeMark};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot, watch};
use tracing::Instrument;

/// A moving average with no sample yet.
const UNKNOWN_US: u64 = u64::MAX;

/// Live progress of attempts running on this node, for the API.
#[derive(Debug, Clone, Default)]
pub struct ProgressBoard(Arc<Mutex<HashMap<JobId, Progress>>>);

impl ProgressBoard {
    /// The latest progress of job `id`, if it is running here and reported.
    pub fn get(&self, id: JobId) -> Option<Progress> {
        self.lock().get(&id).cloned()
    }

    fn set(&self, id: JobId, progress: Progress) {
        self.lock().insert(id, progress);
    }

    fn clear(&self, id: JobId) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Progress>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Its id in the cluster.
    pub id: String,
    /// Attempts it runs at once.
    pub slots: u32,
    /// Limits for what an attempt does not set (memory, output, log,
    /// checkpoint); the attempt's own timeout and memory limit win.
    pub limits: JobLimits,
    /// The cluster key's sealer, which opens the secrets an attempt's
    /// grants name (none: a node without a key, where secrets cannot be).
    pub sealer: Option<Arc<crate::security::Sealer>>,
    /// Its labels and the most memory it gives one attempt, said with
    /// every poll (`cohort_master::pools`).
    pub pool: cohort_master::WorkerPool,
}

/// The plaintext of an attempt's sealed `secrets`, by name. One that does
/// not open (sealed with a key this node no longer holds, or no key at
/// all) is left out and said in the node's log: the calls that need it are
/// then refused, and nothing else of the attempt changes.
fn open_secrets(
    sealer: Option<&crate::security::Sealer>,
    id: JobId,
    secrets: Vec<(String, Vec<u8>)>,
) -> Vec<(String, String)> {
    (secrets.into_iter())
        .filter_map(|(name, sealed)| {
            let opened = match sealer {
                Some(sealer) => crate::security::secrets::open(sealer, &name, &sealed)
                    .map_err(|error| error.to_string()),
                None => Err("this node has no cluster key".to_owned()),
            };
            match opened.map(String::from_utf8) {
                Ok(Ok(value)) => Some((name, value)),
                Ok(Err(_)) => {
                    tracing::warn!(
                        "job {id}: secret {name} is not UTF-8 text; its calls are refused"
                    );
                    None
                }
                Err(error) => {
                    tracing::warn!(
                        "job {id}: secret {name} cannot be opened ({error}); its calls are refused"
                    );
                    None
                }
            }
        })
        .collect()
}

/// A running worker.
#[derive(Debug)]
pub struct Worker {
    stop_polling: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    shared: Arc<Shared>,
    /// Renews leases ([`renew_leases`]); stopped with the worker.
    renewer: tokio::task::JoinHandle<()>,
    /// Where guest code runs (see the module docs); shut down with the worker.
    jobs: Option<tokio::runtime::Runtime>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.renewer.abort();
        if let Some(jobs) = self.jobs.take() {
            jobs.shutdown_background();
        }
    }
}

#[derive(Debug)]
struct Shared {
    options: WorkerOptions,
    master: MasterLink,
    modules: Arc<ModuleStore>,
    fetcher: ModuleFetcher,
    runtime: Runtime,
    /// The node's blobs: attempts' inputs and outputs.
    blobs: WorkerBlobs,
    /// The job threads' runtime.
    jobs: tokio::runtime::Handle,
    progress: ProgressBoard,
    slots: Arc<Semaphore>,
    /// Signalled whenever an attempt stops running.
    finished: tokio::sync::Notify,
    /// Moving average of attempts' run time, in microseconds
    /// ([`UNKNOWN_US`] before the first).
    run_us: std::sync::atomic::AtomicU64,
    /// Moving average of the round trip of polls that brought work, in
    /// microseconds.
    poll_us: std::sync::atomic::AtomicU64,
    /// One permit per attempt whose outcome is not yet acknowledged.
    reporting: Arc<Semaphore>,
    running: Mutex<HashMap<(JobId, u32), oneshot::Sender<()>>>,
    /// Finished attempts whose outcome is being reported.
    unreported: Mutex<HashSet<(JobId, u32)>>,
    /// Attempts being prepared or keeping their outputs, with when their
    /// lease is next renewed and how often ([`renew_leases`]).
    renewing: Mutex<HashMap<(JobId, u32), (Instant, Duration)>>,
    /// Signalled when an attempt starts being renewed while
    /// [`renew_leases`] waits for one (`renewer_idle`): a worker starting
    /// thousands of attempts a second wakes it at most once per renewal
    /// interval, not once per attempt.
    renewing_changed: tokio::sync::Notify,
    renewer_idle: std::sync::atomic::AtomicBool,
    /// One permit per slot: attempts whose job ended and whose output
    /// blobs are being stored, past their slot (see [`attempt_outcome`]).
    keeping: Semaphore,
}

impl Shared {
    /// Every attempt this worker holds: running or still being reported.
    fn held(&self) -> Vec<(JobId, u32)> {
        let mut held: Vec<(JobId, u32)> = self.running().keys().copied().collect();
        held.extend(
            self.unreported
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .copied(),
        );
        held
    }

    /// The latest progress of every running attempt, for the next poll.
    fn progress_reports(&self) -> Vec<ProgressReport> {
        let running: Vec<(JobId, u32)> = self.running().keys().copied().collect();
        running
            .into_iter()
            .filter_map(|(id, attempt)| {
                self.progress.get(id).map(|p| ProgressReport {
                    id,
                    attempt,
                    fraction: p.fraction,
                    message: p.message,
                })
            })
            .collect()
    }

    /// Attempts to ask the master for: the free slots, plus the prefetch
    /// room while jobs are short.
    fn wanted(&self) -> u32 {
        let slots = self.options.slots;
        let run_us = self.run_us.load(Ordering::Relaxed);
        let per_slot = if run_us < PREFETCH_RUN_MAX.as_micros() as u64 {
            let poll_us = match self.poll_us.load(Ordering::Relaxed) {
                UNKNOWN_US => 0,
                poll_us => poll_us,
            };
            poll_us
                .div_ceil(run_us.max(1))
                .clamp(1, PREFETCH_PER_SLOT_MAX) as u32
        } else {
            0
        };
        let cap = slots.saturating_add(slots.saturating_mul(per_slot));
        // Every attempt assigned and not done running (waiting for a slot,
        // or running) is in `running`.
        let in_hand = u32::try_from(self.running().len()).unwrap_or(u32::MAX);
        cap.saturating_sub(in_hand)
    }

    /// The next poll: its heartbeat, the attempts wanted, what the worker
    /// holds and their progress.
    fn next_poll(&self) -> Poll {
        Poll {
            worker: self.options.id.clone(),
            slots: self.options.slots,
            free: self.wanted(),
            wait_ms: POLL_WAIT.as_millis() as u64,
            progress: self.progress_reports(),
            held: self.held(),
            holds: self.blobs.transfer.store().holds(),
            pool: self.options.pool.clone(),
        }
    }

    /// Records the round trip of a poll that brought work.
    fn polled(&self, took: Duration) {
        average(&self.poll_us, took);
    }

    /// Records that an attempt stopped running after `ran`.
    fn ran(&self, ran: Option<Duration>) {
        if let Some(ran) = ran {
            average(&self.run_us, ran);
        }
        self.finished.notify_one();
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<(JobId, u32), oneshot::Sender<()>>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The job of `attempt` stopped running after `ran`: it is held until
    /// reported (moved from running to unreported at once) and its slot
    /// is free for the next.
    fn stopped_running(
        &self,
        attempt: (JobId, u32),
        slot: OwnedSemaphorePermit,
        ran: Option<Duration>,
    ) {
        self.unreported
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(attempt);
        self.running().remove(&attempt);
        drop(slot);
        self.ran(ran);
    }

    /// Renews the lease of attempt `(id, attempt)`, whose grace is
    /// `grace_ms`, until the returned guard is dropped: while it is
    /// prepared or keeps its outputs (see the module docs).
    fn renewing(&self, id: JobId, attempt: u32, grace_ms: u64) -> Renewing<'_> {
        let every = (Duration::from_millis(grace_ms) / 4).clamp(RENEW_EVERY_MIN, RENEW_EVERY_MAX);
        self.renewals()
            .insert((id, attempt), (Instant::now() + every, every));
        if self.renewer_idle.swap(false, Ordering::SeqCst) {
            self.renewing_changed.notify_one();
        }
        Renewing {
            shared: self,
            attempt: (id, attempt),
        }
    }

    fn renewals(&self) -> std::sync::MutexGuard<'_, HashMap<(JobId, u32), (Instant, Duration)>> {
        self.renewing.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An attempt whose lease is renewed while this lives ([`Shared::renewing`]).
struct Renewing<'a> {
    shared: &'a Shared,
    attempt: (JobId, u32),
}

impl Drop for Renewing<'_> {
    fn drop(&mut self) {
        self.shared.renewals().remove(&self.attempt);
    }
}

/// Renews the leases of the attempts being prepared or keeping their
/// outputs, each once its renewal is due, all due at once in one
/// [`Command::Renew`]; waits while there are none. An attempt that is
/// prepared within its first renewal interval (most are) costs a map
/// entry, and wakes this at most once an interval.
///
/// Sleeping until the earliest renewal due, it is not told of new
/// attempts: theirs are due a whole interval after they start, no sooner
/// than the ones it sleeps for (the interval comes from the grace, which
/// is the cluster's, so all attempts share it).
async fn renew_leases(shared: Arc<Shared>) {
    loop {
        let next = shared.renewals().values().map(|(due, _)| *due).min();
        let Some(due) = next else {
            // Idle first, then look again: an attempt added in between
            // either is seen now or finds the flag and notifies (a
            // notification before the wait is kept for it).
            shared.renewer_idle.store(true, Ordering::SeqCst);
            if shared.renewals().is_empty() {
                shared.renewing_changed.notified().await;
            }
            shared.renewer_idle.store(false, Ordering::SeqCst);
            continue;
        };
        tokio::time::sleep_until(due.into()).await;
        let now = Instant::now();
        let attempts: Vec<(JobId, u32)> = {
            let mut renewals = shared.renewals();
            let due: Vec<(JobId, u32)> = renewals
                .iter()
                .filter(|(_, (at, _))| *at <= now)
                .map(|(attempt, _)| *attempt)
                .collect();
            for attempt in &due {
                if let Some((at, every)) = renewals.get_mut(attempt) {
                    *at = now + *every;
                }
            }
            due
        };
        if attempts.is_empty() {
            continue;
        }
        // As many commands as the master takes attempts in one (a worker
        // of thousands of slots may prepare more at once). Not retried:
        // the next renewal is due within a quarter of the grace.
        for attempts in attempts.chunks(RENEWALS_MAX) {
            let renew = Command::Renew {
                worker: shared.options.id.clone(),
                attempts: attempts.to_vec(),
            };
            match shared.master.command(renew).await {
                Ok(_) => {
                    let count = attempts.len() as u64;
                    crate::metrics::LEASES_RENEWED.fetch_add(count, Ordering::Relaxed);
                }
                Err(error) => tracing::debug!("leases not renewed: {error}"),
            }
        }
    }
}

/// Folds `sample` into the moving average `into` (microseconds) over about
/// the last eight samples: one slow job among short ones does not stop
/// prefetching for good. Only the poll loop and finishing attempts write
/// these; a lost update between two of them only skews the average.
fn average(into: &std::sync::atomic::AtomicU64, sample: Duration) {
    let us = u64::try_from(sample.as_micros()).unwrap_or(u64::MAX);
    let old = into.load(Ordering::Relaxed);
    let new = if old == UNKNOWN_US {
        us
    } else {
        (old.saturating_mul(7).saturating_add(us)) / 8
    };
    into.store(new, Ordering::Relaxed);
}

impl Worker {
    /// Starts polling `master` for work.
    pub fn start(
        options: WorkerOptions,
        master: MasterLink,
        modules: Arc<ModuleStore>,
        fetcher: ModuleFetcher,
        runtime: Runtime,
        progress: ProgressBoard,
        blobs: WorkerBlobs,
    ) -> std::io::Result<Self> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let jobs = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("cohort-job")
            .enable_time()
            // Pipes to sandbox processes (`--job-isolation process`).
            .enable_io()
            .build()?;
        let slots = options.slots as usize;
        let shared = Arc::new(Shared {
            jobs: jobs.handle().clone(),
            slots: Arc::new(Semaphore::new(options.slots as usize)),
            finished: Default::default(),
            run_us: std::sync::atomic::AtomicU64::new(UNKNOWN_US),
            poll_us: std::sync::atomic::AtomicU64::new(UNKNOWN_US),
            reporting: Arc::new(Semaphore::new(REPORTING_MAX)),
            unreported: Mutex::default(),
            options,
            master,
            modules,
            fetcher,
            runtime,
            progress,
            blobs,
            running: Mutex::new(HashMap::new()),
            renewing: Mutex::default(),
            renewing_changed: Default::default(),
            renewer_idle: Default::default(),
            keeping: Semaphore::new(slots),
        });
        let (stop_polling, stopped) = watch::channel(false);
        let task = tokio::spawn(poll_loop(shared.clone(), stopped));
        let renewer = tokio::spawn(renew_leases(shared.clone()));
        Ok(Self {
            stop_polling,
            task,
            renewer,
            shared,
            jobs: Some(jobs),
        })
    }

    /// Stops taking work, waits up to `grace` for running attempts, stops
    /// the rest and reports this worker gone so they are re-queued.
    pub async fn shutdown(mut self, grace: Duration) {
        let _ = self.stop_polling.send(true);
        let _ = (&mut self.task).await;
        let shared = &self.shared;
        let drained =
            tokio::time::timeout(grace, shared.reporting.acquire_many(REPORTING_MAX as u32)).await;
        if drained.is_err() {
            let stops: Vec<_> = shared.running().drain().collect();
            crate::events::emit!(
                warn,
                crate::events::ATTEMPTS_STOPPED,
                count = stops.len(),
                grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                "attempts still running after the grace period; stopping them"
            );
            for (_, stop) in stops {
                let _ = stop.send(());
            }
        }
        let gone = Command::WorkerGone {
            worker: shared.options.id.clone(),
        };
        match tokio::time::timeout(GONE_REPORT_WAIT, shared.master.command(gone)).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!("could not report this worker gone: {error}"),
            Err(_) => tracing::warn!(
                "no master took this worker's leave within {GONE_REPORT_WAIT:?}; its attempts will be re-queued when it is seen gone"
            ),
        }
        if let Some(jobs) = self.jobs.take() {
            jobs.shutdown_background();
        }
    }
}

async fn poll_loop(shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) {
    if !announce_fresh(&shared, &mut stopped).await {
        return;
    }
    loop {
        if *stopped.borrow() {
            return;
        }
        if shared.wanted() == 0 {
            // Wait for an attempt to finish, but come back in time for the
            // heartbeat.
            tokio::select! {
                _ = shared.finished.notified() => {}
                _ = tokio::time::sleep(POLL_WAIT) => {}
                _ = stopped.changed() => return,
            }
        }
        let poll = shared.next_poll();
        let asked = tokio::time::Instant::now();
        let polled = tokio::select! {
            polled = shared.master.poll(poll) => polled,
            _ = stopped.changed() => return,
        };
        if matches!(&polled, Ok(result) if !result.assignments.is_empty()) {
            shared.polled(asked.elapsed());
        }
        match polled {
            Ok(result) => take_poll_result(&shared, result),
            Err(
                MasterError::Unavailable(reason)
                | MasterError::Unreplicated(reason)
                | MasterError::Moved(reason)
                | MasterError::Indeterminate(reason),
            ) => {
                // The master is moving, stopping or waiting for replicas:
                // keep trying until told to stop.
                tracing::debug!("poll failed: {reason}");
                tokio::select! {
                    _ = tokio::time::sleep(POLL_RETRY) => {}
                    _ = stopped.changed() => return,
                }
            }
            Err(MasterError::Rejected(rejection)) => {
                tracing::warn!("poll refused: {rejection}");
                tokio::time::sleep(POLL_RETRY).await;
            }
        }
    }
}

/// Tells the master this worker runs nothing, retrying until a master
/// answers; false if told to stop first.
///
/// A worker that starts runs nothing: whatever the master believes this
/// worker id runs (a previous process that crashed and came back before
/// membership noticed) is lost, and is re-queued now rather than when its
/// leases run out.
async fn announce_fresh(shared: &Shared, stopped: &mut watch::Receiver<bool>) -> bool {
    loop {
        if *stopped.borrow() {
            return false;
        }
        let fresh = Command::WorkerGone {
            worker: shared.options.id.clone(),
        };
        let told = tokio::select! {
            told = shared.master.command(fresh) => told,
            _ = stopped.changed() => return false,
        };
        match told {
            Ok(_) | Err(MasterError::Rejected(_)) => return true,
            Err(error) => {
                tracing::debug!("cannot announce the worker yet: {error}");
                tokio::select! {
                    _ = tokio::time::sleep(POLL_RETRY) => {}
                    _ = stopped.changed() => return false,
                }
            }
        }
    }
}

/// Stops the attempts the master stopped and starts the ones it assigned,
/// each in a task of its own.
fn take_poll_result(shared: &Arc<Shared>, PollResult { assignments, stops }: PollResult) {
    for key in stops {
        if let Some(stop) = shared.running().remove(&key) {
            let _ = stop.send(());
        }
    }
    for assignment in assignments {
        let (stop, stopped) = oneshot::channel();
        shared
            .running()
            .insert((assignment.id, assignment.attempt), stop);
        let report = shared
            .reporting
            .clone()
            .try_acquire_owned()
            .expect("reporting permits outnumber slots");
        let shared = shared.clone();
        tokio::spawn(async move {
            run_attempt(&shared, assignment, stopped).await;
            drop(report);
        });
    }
}

/// Forwards a running job's progress and checkpoints.
#[derive(Debug)]
struct Forwarder {
    id: JobId,
    progress: ProgressBoard,
    checkpoint: watch::Sender<Option<(Vec<u8>, Option<TapeMark>)>>,
    /// The attempt's span: the job's own log lines are node log lines
    /// within it (target `cohort::job_log`, off unless `COHORT_LOG` turns
    /// it on), with the job's fields.
    span: tracing::Span,
    /// What the job's lines carry when forwarded as OTLP log records
    /// (`--otlp-job-logs`, see [`crate::telemetry::logs`]).
    attempt: u32,
    module: String,
    trace: Option<cohort_master::TraceContext>,
}

impl JobObserver for Forwarder {
    fn log(&self, bytes: &[u8]) {
        if self.span.is_disabled()
            || !tracing::enabled!(target: "cohort::job_log", tracing::Level::INFO)
        {
            return;
        }
        let text = String::from_utf8_lossy(bytes);
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            tracing::info!(target: "cohort::job_log", parent: &self.span, text = line);
        }
    }

    fn wants_lines(&self) -> bool {
        crate::telemetry::logs::on()
    }

    fn log_line(&self, level: crate::runtime::observer::LineLevel, message: &str) {
        crate::telemetry::logs::emit(&crate::telemetry::logs::Line {
            job_id: self.id,
            attempt: self.attempt,
            module: &self.module,
            trace: self.trace.as_ref(),
            level,
            message,
        });
    }

    fn progress(&self, fraction: f32, message: &str) {
        self.progress.set(
            self.id,
            Progress {
                fraction,
                message: message.into(),
            },
        );
    }

    fn checkpoint(&self, state: &[u8], mark: Option<TapeMark>) {
        self.checkpoint.send_replace(Some((state.to_vec(), mark)));
    }
}

/// Makes an attempt's recorded calls durable: a `RecordCall` the master
/// journals, retried (it is idempotent: the same call at the same ordinal)
/// while no master takes it, for at most [`REPORT_RETRY_WAIT`], as an
/// outcome is.
#[derive(Debug)]
struct MasterRecorder {
    master: MasterLink,
    id: JobId,
    attempt: u32,
}

impl Recorder for MasterRecorder {
    fn record(&self, call: RecordedCall) -> RecordFuture {
        let (master, id, attempt) = (self.master.clone(), self.id, self.attempt);
        Box::pin(async move {
            let command = Command::RecordCall { id, attempt, call };
            match retried(&master, command, (id, attempt, "call")).await {
                Ok(Reply::Done) => Ok(()),
                Ok(Reply::Ignored { reason }) => Err(Unrecorded::Failed(format!(
                    "the master did not keep it: {reason}"
                ))),
                Ok(other) => Err(Unrecorded::Failed(format!("the master answered {other:?}"))),
                Err(MasterError::Rejected(rejection))
                    if rejection.code == cohort_master::codes::RECORD_TOO_LARGE =>
                {
                    Err(Unrecorded::TooLarge(rejection.message))
                }
                Err(error) => Err(Unrecorded::Failed(error.to_string())),
            }
        })
    }
}

/// Waits for a slot, runs one attempt and reports it. The slot is freed as
/// soon as the job stops running, before the report is acknowledged, so the
/// next poll overlaps the journal sync of this outcome.
async fn run_attempt(shared: &Shared, assignment: Assignment, mut stopped: oneshot::Receiver<()>) {
    let slot = tokio::select! {
        slot = shared.slots.clone().acquire_owned() => slot.expect("the slots are never closed"),
        _ = &mut stopped => {
            tracing::debug!("job {} attempt {} stopped before it ran", assignment.id, assignment.attempt);
            shared.running().remove(&(assignment.id, assignment.attempt));
            shared.ran(None);
            return;
        }
    };
    run_in_slot(shared, assignment, stopped, slot).await;
}

/// Runs one attempt holding `slot` and reports it, freeing the slot as soon
/// as the job stopped running.
async fn run_in_slot(
    shared: &Shared,
    assignment: Assignment,
    stopped: oneshot::Receiver<()>,
    slot: OwnedSemaphorePermit,
) {
    let (id, attempt) = (assignment.id, assignment.attempt);
    // The attempt's span joins its job's trace (the context the job
    // carries from its submission); every line logged within has the
    // job's fields.
    let span = if crate::telemetry::wanted(assignment.trace.as_ref()) {
        crate::telemetry::job_span!(
            "cohort.attempt",
            job_id = id,
            attempt = attempt,
            worker = shared.options.id.as_str()
        )
    } else {
        tracing::Span::none()
    };
    crate::telemetry::adopt(&span, assignment.trace.as_ref());
    // What the job's outbound calls carry: this span as their parent.
    let calls_trace = crate::telemetry::outbound_context(&span, assignment.trace.as_ref());
    run_in_slot_traced(shared, assignment, calls_trace, stopped, slot)
        .instrument(span)
        .await;
}

/// [`run_in_slot`] within the attempt's span.
async fn run_in_slot_traced(
    shared: &Shared,
    assignment: Assignment,
    calls_trace: Option<cohort_master::TraceContext>,
    stopped: oneshot::Receiver<()>,
    slot: OwnedSemaphorePermit,
) {
    let (id, attempt) = (assignment.id, assignment.attempt);
    let mut slot = Some(slot);
    let Some(Ended {
        outcome,
        ran,
        log,
        calls,
        calls_dropped,
        usage,
    }) = attempt_outcome(shared, assignment, calls_trace, stopped, &mut slot).await
    else {
        tracing::debug!("job {id} attempt {attempt} stopped");
        drop(slot);
        shared.ran(None);
        return;
    };
    // Unless it was freed before the outputs were stored.
    if let Some(slot) = slot {
        shared.stopped_running((id, attempt), slot, ran);
    }
    let duration_ms = ran.map_or(0, |ran| ran.as_millis() as u64);
    let start = log.len().saturating_sub(LOG_TAIL_BYTES);
    crate::metrics::count_egress(&calls, calls_dropped);
    crate::metrics::count_usage(&usage);
    let reporting = crate::telemetry::job_step_span!(
        "cohort.report",
        outcome = match &outcome {
            Outcome::Failed(failure) => failure.code.as_str(),
            _ => "succeeded",
        }
    );
    let command = Command::Finish {
        id,
        attempt,
        worker: shared.options.id.clone(),
        outcome,
        duration_ms,
        log_tail: String::from_utf8_lossy(&log[start..]).into_owned(),
        calls,
        calls_dropped,
        usage,
    };
    report_outcome(shared, command, id, attempt)
        .instrument(reporting)
        .await;
    shared
        .unreported
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(id, attempt));
}

/// How an attempt ended, as its report to the master carries it.
struct Ended {
    outcome: Outcome,
    /// How long it ran (`None`: it never started).
    ran: Option<Duration>,
    log: Vec<u8>,
    /// Its outbound calls, the first ones, and how many more it made.
    calls: Vec<cohort_master::HttpCall>,
    calls_dropped: u32,
    /// What it cost (nothing for an attempt that never ran).
    usage: cohort_master::Usage,
}

/// Fetches the attempt's module and runs it: its outcome, how long it ran,
/// its log and its calls; `None` if it was stopped (or its task failed)
/// before an outcome. Its calls carry `calls_trace` (the attempt's span)
/// as their parent.
///
/// A job that wrote output blobs gives up `slot` once it ran, before
/// they are stored on a majority of the back-ends: storing gigabytes
/// takes no CPU a slot stands for, and the next job may run meanwhile.
/// At most one attempt per slot stores outputs at once
/// ([`Shared::keeping`]), so a worker whose jobs write faster than its
/// network carries them waits, holding its slot, rather than piling up
/// outputs on its disk.
async fn attempt_outcome(
    shared: &Shared,
    assignment: Assignment,
    calls_trace: Option<cohort_master::TraceContext>,
    mut stopped: oneshot::Receiver<()>,
    slot: &mut Option<OwnedSemaphorePermit>,
) -> Option<Ended> {
    let Assignment {
        id,
        attempt,
        module,
        input,
        timeout_ms,
        memory_bytes,
        checkpoint,
        egress,
        secrets,
        replay,
        readable,
        blobs,
        lease_grace_ms,
        ..
    } = assignment;
    // The lease counts the run, not fetching and compiling: renewed until
    // the job starts.
    let preparing = shared.renewing(id, attempt, lease_grace_ms);
    let digest = Digest::from(module);
    let not_run = |failure: Failure| {
        Some(Ended {
            outcome: Outcome::Failed(failure),
            ran: None,
            log: Vec::new(),
            calls: Vec::new(),
            calls_dropped: 0,
            usage: cohort_master::Usage::default(),
        })
    };
    let fetching = crate::telemetry::job_step_span!("cohort.module", module = %digest);
    let compiled = match (shared.fetcher.get(&shared.modules, &digest))
        .instrument(fetching)
        .await
    {
        Ok(compiled) => compiled,
        // Fetching or the disk failed: another attempt may do better.
        Err(error @ ModuleError::Internal(_)) => {
            return not_run(Failure {
                code: "module_unavailable".into(),
                message: format!("module {digest}: {error}"),
            });
        }
        // The module does not compile or link here: its own code, which
        // is not retried.
        Err(error) => {
            return not_run(Failure {
                code: error.code().into(),
                message: format!("module {digest} cannot run: {error}"),
            });
        }
    };
    // A cancel while the inputs are fetched stops the fetch, as it stops
    // the job.
    let prepare = shared.blobs.prepare(&blobs);
    tokio::pin!(prepare);
    let mut _quiet = None;
    let prepared = loop {
        tokio::select! {
            prepared = &mut prepare => break prepared,
            stop = &mut stopped => match stop {
                Ok(()) => return None,
                // No one can stop it any more; a receiver that has answered
                // must not be polled again, so the job gets a quiet one.
                Err(_) => {
                    let (sender, receiver) = oneshot::channel();
                    _quiet = Some(sender);
                    stopped = receiver;
                }
            },
        }
    };
    let mut prepared = match prepared {
        Ok(prepared) => prepared,
        Err(failure) => return not_run(failure),
    };
    let (checkpoints, latest) = watch::channel(None);
    let span = tracing::Span::current();
    // The forwarded lines' trace: the attempt's span, or the job's context
    // when the attempt has none (sampled out).
    let trace = match crate::telemetry::logs::on() {
        true => crate::telemetry::own_context(&span).or(calls_trace),
        false => None,
    };
    let forwarder = Arc::new(Forwarder {
        id,
        progress: shared.progress.clone(),
        checkpoint: checkpoints,
        span,
        attempt,
        module: digest.to_string(),
        trace,
    });
    let sender = tokio::spawn(send_checkpoints(shared.master.clone(), id, attempt, latest));
    let limits = JobLimits {
        timeout_ms,
        memory_bytes: memory_bytes.unwrap_or(shared.options.limits.memory_bytes),
        ..shared.options.limits
    };
    let request = JobRequest {
        input,
        limits,
        resume_state: checkpoint,
        observer: Some(forwarder),
        egress,
        secrets: crate::runtime::Secrets::new(open_secrets(
            shared.options.sealer.as_deref(),
            id,
            secrets,
        )),
        readable,
        recording: Recording {
            job: id,
            replay,
            recorder: Some(Arc::new(MasterRecorder {
                master: shared.master.clone(),
                id,
                attempt,
            })),
        },
        blobs: std::mem::take(&mut prepared.blobs),
        trace: calls_trace,
    };
    let running = crate::telemetry::job_step_span!("cohort.run");
    drop(preparing);
    let report = run_job(shared, (id, attempt), compiled, request, stopped)
        .instrument(running)
        .await;
    // The attempt is over: its outcome matters now, not a checkpoint still
    // waiting for its interval (one that races the outcome is ignored by
    // the master, whose attempt has ended).
    sender.abort();
    shared.progress.clear(id);
    let report = report?;
    let outcome = match report.outcome {
        Ok(output) if report.outputs.is_empty() => Outcome::Succeeded(output),
        Ok(result) => {
            // Storing the outputs on a majority of the back-ends is not
            // the run either.
            let renewing = shared.renewing(id, attempt, lease_grace_ms);
            let keeping =
                (shared.keeping.acquire().await).expect("the keeping semaphore is never closed");
            if let Some(slot) = slot.take() {
                shared.stopped_running((id, attempt), slot, Some(report.duration));
            }
            let kept = shared.blobs.keep(&shared.master, report.outputs).await;
            drop((keeping, renewing));
            match kept {
                Ok(blobs) => Outcome::Wrote(cohort_master::Output { result, blobs }),
                Err(failure) => Outcome::Failed(failure),
            }
        }
        Err(failure) => Outcome::Failed(failure_of(&failure)),
    };
    drop(prepared);
    Some(Ended {
        outcome,
        ran: Some(report.duration),
        log: report.log,
        calls: report.calls,
        calls_dropped: report.calls_dropped,
        usage: cohort_master::Usage {
            cpu_us: u64::try_from(report.cpu.as_micros()).unwrap_or(u64::MAX),
            memory_peak_bytes: report.memory_peak_bytes,
            egress_bytes: report.egress_bytes,
        },
    })
}

/// Sends a running attempt's newest checkpoint to the master until the
/// attempt ends (the caller aborts this).
async fn send_checkpoints(
    master: MasterLink,
    id: JobId,
    attempt: u32,
    mut latest: watch::Receiver<Option<(Vec<u8>, Option<TapeMark>)>>,
) {
    while latest.changed().await.is_ok() {
        let data = latest.borrow_and_update().clone();
        if let Some((data, mark)) = data {
            let command = Command::Checkpoint {
                id,
                attempt,
                data,
                mark,
            };
            if let Err(error) = master.command(command).await {
                tracing::warn!("job {id}: checkpoint not recorded: {error}");
            }
            // At most one checkpoint per interval reaches the journal;
            // newer ones replace older ones meanwhile.
            tokio::time::sleep(CHECKPOINT_INTERVAL).await;
        }
    }
}

/// Runs the job on the job threads until it ends or is stopped; `None`
/// when stopped or when its task failed.
async fn run_job(
    shared: &Shared,
    (id, attempt): (JobId, u32),
    compiled: Module,
    request: JobRequest,
    stopped: oneshot::Receiver<()>,
) -> Option<JobReport> {
    let runtime = shared.runtime.clone();
    let mut running = shared
        .jobs
        .spawn(async move { runtime.run(&compiled, request).await });
    tokio::select! {
        report = &mut running => match report {
            Ok(report) => Some(report),
            Err(error) => {
                tracing::error!("job {id} attempt {attempt}: the job task failed: {error}");
                None
            }
        },
        Ok(()) = stopped => {
            running.abort();
            None
        }
    }
}

/// Reports an attempt's outcome, retrying while no master can take it (it
/// is moving, or waiting for replicas) for at most [`REPORT_RETRY_WAIT`].
/// Giving up early would leave the attempt running in the master's eyes
/// until its lease ran out. A report that did land before an error is
/// answered as stale on the retry: never recorded twice.
async fn report_outcome(shared: &Shared, command: Command, id: JobId, attempt: u32) {
    match retried(&shared.master, command, (id, attempt, "outcome")).await {
        Ok(_) => {}
        Err(MasterError::Rejected(rejection)) => {
            tracing::debug!("job {id} attempt {attempt}: outcome refused: {rejection}");
        }
        Err(error) => tracing::warn!(
            "job {id} attempt {attempt}: outcome not recorded within {REPORT_RETRY_WAIT:?}: {error}"
        ),
    }
}

/// Sends `command` (about attempt `attempt` of job `id`, a `what`) until a
/// master answers or refuses it, retrying while none can take it (it is
/// moving, or waiting for replicas) for at most [`REPORT_RETRY_WAIT`]. For
/// commands whose resend is harmless: an outcome (answered as stale the
/// second time) or a recorded call (the same call at the same ordinal).
async fn retried(
    master: &MasterLink,
    command: Command,
    (id, attempt, what): (JobId, u32, &str),
) -> Result<Reply, MasterError> {
    let started = tokio::time::Instant::now();
    loop {
        match master.command(command.clone()).await {
            Err(error @ MasterError::Rejected(_)) => return Err(error),
            Err(error) if started.elapsed() < REPORT_RETRY_WAIT => {
                tracing::debug!("job {id} attempt {attempt}: {what} not recorded yet: {error}");
                tokio::time::sleep(POLL_RETRY).await;
            }
            answered => return answered,
        }
    }
}

fn failure_of(failure: &JobFailure) -> Failure {
    let message = match failure {
        JobFailure::JobError { code, message } => format!("{code}: {message}"),
        other => other.to_string(),
    };
    Failure {
        code: failure.code().into(),
        message,
    }
}
