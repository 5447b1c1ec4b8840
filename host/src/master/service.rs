//! The master service: the master component on its own thread, feeding
//! the node's replication thread (`crate::replication`), which journals,
//! replicates and commits.
//!
//! # Data flow
//!
//! ```text
//! callers ──Request──▶ master thread ──propose(events, completions)──▶ replication thread
//!  (HTTP, worker)       decide → apply                                 append…, fsync, replicate,
//!      ▲                                                               completions once committed
//!      └──────────────────────────── replies, assignments, wake-ups ◀──┘
//! ```
//!
//! * The master thread owns the component. It takes every request waiting
//!   in its channel (up to [`BATCH_REQUESTS_MAX`]), runs each through
//!   `decide` and at once `apply`, so the next decision sees the previous
//!   one's effects, and hands the batch's events to replication together
//!   with the *completions*: replies, assignments, answers and wake-ups that
//!   must not leave the process before those events are committed.
//! * Replication appends every batch waiting for it and fsyncs once (group
//!   commit), sends them to the other back-end nodes, and runs their
//!   completions in order once a majority of the voters holds them durably.
//!   An HTTP `202` therefore means "on disk on a majority of the voters",
//!   and a read never shows state that a crash could take back.
//! * While replication syncs, the master thread already decides the next
//!   batch: the two overlap, which is where the throughput comes from.
//! * A failed write or sync stops the service: the in-memory state is then
//!   ahead of the journal, so the only safe continuation is a restart that
//!   recovers from disk. Every waiting caller gets `master_unavailable`.
//! * Every [`SNAPSHOT_EVERY_DEFAULT`] events (and on clean shutdown) the
//!   master thread takes a snapshot; replication compacts the journal under
//!   it once the events before it are committed.
//!
//! # Waiting
//!
//! Workers long-poll: a poll that finds no work is parked until jobs become
//! runnable (the `WorkAvailable` effect), the next tick (a rate-limited
//! key may start again a second after its last starts) or its wait ends. Clients may wait
//! for a job to settle; the watch fires on its `Settled` effect. A client
//! waiting for many jobs at once ([`MasterHandle::wait_finished`]) is one
//! watch over all of them: it fires on the first to settle and is then
//! forgotten as a whole ([`Watchers`]), so a long-poll over 10,000 jobs
//! costs the master one pass to register and one to drop, however it ends.
//!
//! [`BATCH_REQUESTS_MAX`]: crate::limits::BATCH_REQUESTS_MAX
//! [`SNAPSHOT_EVERY_DEFAULT`]: crate::limits::SNAPSHOT_EVERY_DEFAULT

use super::core::{Core, CoreKind, MasterComponent};
use super::handover;
use super::recovery::{
    MasterOptions, Recovered, Replayer, ShadowFrom, StartError, Warm, replay_as_read,
};
use super::shadow::{Shadow, Taken};
use super::upgrade::{self, Build, Builds, Switch};
use crate::codes::ErrorCode;
use crate::contract::{MasterError, Poll, PollResult, ProgressReport, now_ms};
use crate::journal::durable::Snapshot as StoredSnapshot;
use crate::limits::{
    BATCH_REQUESTS_MAX, MASTER_CHANNEL_CAPACITY, MASTER_TICK_INTERVAL, PROGRESS_KEPT_MAX,
    RECORDING_BYTES_MAX, STOPS_PER_WORKER_MAX, WAIT_GATHER,
};
use crate::replication::{Completion, Events, Replication, ReplicationStatus, Started};
use cohort_master::{
    Answer, Assignment, Command, Config, Effect, Failure, JobId, JobState, Millis, Outcome, Query,
    Rejection, Reply, decode, encode,
};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// The span of the master's decision on a submission that carries a
/// trace context, with that context (none while tracing is off: the
/// master thread pays one branch per command).
fn decision_span(command: &Command) -> Option<(tracing::Span, cohort_master::TraceContext)> {
    if !crate::telemetry::tracing_on() {
        return None;
    }
    let trace = match command {
        Command::Submit { options, .. } => *options.trace.as_deref()?,
        Command::SubmitDag(dag) => *dag.nodes.first()?.options.trace.as_deref()?,
        _ => return None,
    };
    if !crate::telemetry::wanted(Some(&trace)) {
        return None;
    }
    let span = crate::telemetry::job_span!(
        "cohort.master.decide",
        job_id = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty
    );
    crate::telemetry::adopt(&span, Some(&trace));
    Some((span, trace))
}

/// The span from a submission's decision to its events' commit (journaled
/// and replicated to a majority of the voters), a sibling of the
/// decision's; it ends when the completion runs.
fn commit_span(
    decide: tracing::Span,
    trace: cohort_master::TraceContext,
    result: &Result<(Reply, Vec<Assignment>), Rejection>,
) -> tracing::Span {
    let job_id = match result {
        Ok((Reply::Submitted { id, .. }, _)) => Some(*id),
        Ok((Reply::Dag { jobs, .. }, _)) => jobs.first().copied(),
        _ => None,
    };
    if let Some(id) = job_id {
        decide.record("job_id", id);
    }
    if let Err(rejection) = result {
        decide.record("otel.status_code", "ERROR");
        decide.record("otel.status_description", rejection.to_string().as_str());
    }
    drop(decide);
    let commit = crate::telemetry::job_span!("cohort.master.commit", job_id = job_id);
    crate::telemetry::adopt(&commit, Some(&trace));
    commit
}

/// Where the master's periodic snapshots are taken (`cohort node
/// --snapshots`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SnapshotSource {
    /// A shadow instance on its own thread ([`super::shadow`]).
    Shadow,
    /// The master's own thread, which pauses for it.
    Master,
}

/// What startup found and did.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// Epoch of the newest journal entry found (0: none).
    pub journal_epoch: u64,
    /// Index of the snapshot restored, if any.
    pub snapshot_index: Option<u64>,
    /// Started from a warm standby's state before this index.
    pub warm: Option<u64>,
    /// Journal events replayed after it.
    pub events_replayed: u64,
    /// Bytes of a torn final write cut from the journal.
    pub torn_bytes: u64,
    /// Time from opening the journal to serving.
    pub duration: Duration,
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct MasterCounters {
    /// Events made durable.
    pub events: AtomicU64,
    /// Commands decided.
    pub commands: AtomicU64,
    /// Snapshots written.
    pub snapshots: AtomicU64,
    /// The master component's linear memory ([`Core::memory_bytes`]).
    pub memory_bytes: AtomicU64,
    /// The longest the master's thread spent in one pass, in nanoseconds:
    /// from taking a batch of requests (or a tick) to handing its events
    /// to replication, a snapshot included when it takes one itself. It
    /// serves nothing meanwhile: this is the master's longest pause.
    pub pass_longest_nanos: AtomicU64,
}

type Respond<T> = oneshot::Sender<Result<T, MasterError>>;

enum Request {
    /// Boxed: a submission is far larger than the other requests.
    Command(Box<Command>, Respond<Reply>),
    Query(Query, Respond<Answer>),
    Poll(Poll, Instant, Respond<PollResult>),
    Progress(JobId, oneshot::Sender<Option<ProgressReport>>),
    Watch(JobId, oneshot::Sender<()>),
    /// [`Query::Finished`]; if none of the jobs has finished, a watch over
    /// all of them that fires on the first to settle.
    WaitFinished(Query, Respond<Answer>, oneshot::Sender<()>),
    Shutdown(oneshot::Sender<()>),
    /// The first step of an upgrade: the state now, and from now on the
    /// events decided are kept for the new master to replay.
    Rehearse(Respond<Rehearsal>),
    /// The last step: the new master (started from the rehearsal's state)
    /// replays the events since, and takes over if it reaches the state the
    /// running master hands it.
    Switch(Box<SwitchTo>, Respond<SwitchReport>),
    /// An upgrade refused between its two steps: stop keeping events.
    EndRehearsal(u64),
}

/// The state an upgrade's check starts from.
pub struct Rehearsal {
    token: u64,
    state: Vec<u8>,
}

/// A checked master, ready to take over.
pub struct SwitchTo {
    token: u64,
    to: Build,
    /// Started from the rehearsal's state.
    core: Box<dyn Core>,
    component: MasterComponent,
}

/// Events kept since a rehearsal, for the new master to replay.
struct Recording {
    token: u64,
    events: Vec<Vec<u8>>,
    bytes: usize,
    overflowed: bool,
}

/// What an upgrade or rollback did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SwitchReport {
    /// The build before.
    pub from: Build,
    /// The build now running.
    pub to: Build,
    /// False when `to` was already running (nothing was done).
    pub switched: bool,
    /// Events the new master replayed during the check.
    pub replayed_events: u64,
    /// How long the master stopped serving for the switch itself.
    pub pause_ms: u64,
}

/// A cheap, cloneable way to talk to the master.
#[derive(Clone)]
pub struct MasterHandle {
    tx: mpsc::Sender<Request>,
    epoch: u64,
    counters: Arc<MasterCounters>,
    failed: Arc<AtomicBool>,
    superseded: watch::Receiver<Option<u64>>,
    done: watch::Receiver<bool>,
    replication: Replication,
    /// The builds in force, as the master thread last set them.
    builds: Arc<std::sync::Mutex<Builds>>,
    data_dir: PathBuf,
    cache_dir: PathBuf,
    core: CoreKind,
}

impl std::fmt::Debug for MasterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterHandle").finish_non_exhaustive()
    }
}

fn gone() -> MasterError {
    MasterError::Unavailable("the master stopped".into())
}

impl MasterHandle {
    async fn ask<T>(&self, make: impl FnOnce(Respond<T>) -> Request) -> Result<T, MasterError> {
        let (respond, answer) = oneshot::channel();
        self.tx.send(make(respond)).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }

    /// Runs a command; the reply comes once its events are durable.
    pub async fn command(&self, command: Command) -> Result<Reply, MasterError> {
        self.ask(|respond| Request::Command(Box::new(command), respond))
            .await
    }

    /// Runs commands in order, all of them queued before any reply is
    /// awaited, so they share the master's batches and journal syncs; the
    /// replies in the same order.
    pub async fn commands(&self, commands: Vec<Command>) -> Vec<Result<Reply, MasterError>> {
        let mut answers = Vec::with_capacity(commands.len());
        for command in commands {
            let (respond, answer) = oneshot::channel();
            let sent = (self.tx.send(Request::Command(Box::new(command), respond))).await;
            answers.push(sent.ok().map(|()| answer));
        }
        let mut replies = Vec::with_capacity(answers.len());
        for answer in answers {
            replies.push(match answer {
                Some(answer) => answer.await.map_err(|_| gone()).and_then(|reply| reply),
                None => Err(gone()),
            });
        }
        replies
    }

    /// Answers a query from durable state.
    pub async fn query(&self, query: Query) -> Result<Answer, MasterError> {
        self.ask(|respond| Request::Query(query, respond)).await
    }

    /// Asks for up to `poll.free` jobs, waiting up to `poll.wait_ms` for
    /// work to appear.
    pub async fn poll(&self, poll: Poll) -> Result<PollResult, MasterError> {
        let until = Instant::now() + Duration::from_millis(poll.wait_ms);
        self.ask(|respond| Request::Poll(poll, until, respond))
            .await
    }

    /// The latest progress a worker reported for job `id`, if running.
    pub async fn progress(&self, id: JobId) -> Result<Option<ProgressReport>, MasterError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Progress(id, tx))
            .await
            .map_err(|_| gone())?;
        rx.await.map_err(|_| gone())
    }

    /// Waits until job `id` is in a terminal state (or unknown), at most
    /// `wait`. Returns whether it settled.
    pub async fn wait_settled(&self, id: JobId, wait: Duration) -> Result<bool, MasterError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Watch(id, tx))
            .await
            .map_err(|_| gone())?;
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(())) => Ok(true),
            Ok(Err(_)) => Err(gone()),
            Err(_) => Ok(false),
        }
    }

    /// The finished (or unknown) jobs among `query`'s (a
    /// [`Query::Finished`]), waiting up to `wait` for the first of them to
    /// finish if none has.
    pub async fn wait_finished(&self, query: Query, wait: Duration) -> Result<Answer, MasterError> {
        let deadline = tokio::time::Instant::now() + wait;
        let (notify, settled) = oneshot::channel();
        let answer = self
            .ask(|respond| Request::WaitFinished(query.clone(), respond, notify))
            .await?;
        if !matches!(&answer, Answer::Finished(jobs) if jobs.is_empty()) {
            return Ok(answer);
        }
        match tokio::time::timeout_at(deadline, settled).await {
            Ok(Ok(())) => {
                // Jobs submitted together finish together: the next ones
                // come in this answer rather than one request each.
                if query.finished_ids().is_some_and(|ids| ids.len() > 1) {
                    tokio::time::sleep_until(
                        deadline.min(tokio::time::Instant::now() + WAIT_GATHER),
                    )
                    .await;
                }
                self.query(query).await
            }
            Ok(Err(_)) => Err(gone()),
            Err(_) => Ok(answer),
        }
    }

    /// The master build running and the one a rollback returns to.
    pub fn builds(&self) -> Builds {
        *self.builds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Switches the master to `to` (already in this node's master store,
    /// or the built-in one) after checking it (see [`upgrade`]). A refusal
    /// changes nothing.
    pub async fn upgrade(&self, to: Build) -> Result<SwitchReport, MasterError> {
        let refused = |code: ErrorCode, message: String| {
            MasterError::Rejected(Rejection::new(code.as_str(), message))
        };
        if self.core == CoreKind::Native {
            return Err(refused(
                ErrorCode::UpgradeUnsupported,
                "this node runs the master natively (--master-core native), which is always \
                 the built-in master"
                    .into(),
            ));
        }
        let builds = self.builds();
        if builds.active == to {
            return Ok(SwitchReport {
                from: to,
                to,
                switched: false,
                replayed_events: 0,
                pause_ms: 0,
            });
        }
        let (data_dir, cache_dir) = (self.data_dir.clone(), self.cache_dir.clone());
        let component = tokio::task::spawn_blocking(move || {
            MasterComponent::load_build(&data_dir, &cache_dir, to)
        })
        .await
        .map_err(|e| MasterError::Unavailable(format!("the compiler thread failed: {e}")))?
        .map_err(|e| refused(ErrorCode::InvalidMaster, format!("{e:#}")))?;
        let rehearsal = self.ask(Request::Rehearse).await?;
        let token = rehearsal.token;
        let started = tokio::task::spawn_blocking(move || {
            let core = handover::start(
                &component,
                Some(&rehearsal.state),
                ErrorCode::MasterSnapshotUnreadable,
            );
            (component, core)
        })
        .await;
        let (component, core) = match started {
            Ok((component, Ok(core))) => (component, core),
            Ok((_, Err(rejection))) => {
                let _ = self.tx.send(Request::EndRehearsal(token)).await;
                return Err(MasterError::Rejected(rejection));
            }
            Err(e) => {
                let _ = self.tx.send(Request::EndRehearsal(token)).await;
                return Err(MasterError::Unavailable(format!("the check failed: {e}")));
            }
        };
        let switch = Box::new(SwitchTo {
            token,
            to,
            core,
            component,
        });
        self.ask(|respond| Request::Switch(switch, respond)).await
    }

    /// Switches back to the build that ran before the last switch.
    pub async fn rollback(&self) -> Result<SwitchReport, MasterError> {
        let builds = self.builds();
        if builds == Builds::default() {
            return Err(MasterError::Rejected(Rejection::new(
                ErrorCode::NothingToRollBack.as_str(),
                "the built-in master runs and always did: there is nothing to roll back to",
            )));
        }
        self.upgrade(builds.previous).await
    }

    /// Flushes, snapshots and stops the master.
    pub async fn shutdown(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Request::Shutdown(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// The epoch this master incarnation writes with.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The service's counters.
    pub fn counters(&self) -> &MasterCounters {
        &self.counters
    }

    /// Whether the service stopped because of a failure.
    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed) || self.replication.failed()
    }

    /// How replication stands.
    pub fn replication_status(&self) -> Option<ReplicationStatus> {
        Some(self.replication.status())
    }

    /// Changes to the newer epoch when a replica says this master was
    /// superseded (it then commits nothing more and stops).
    pub fn superseded(&self) -> watch::Receiver<Option<u64>> {
        self.superseded.clone()
    }

    /// Waits until the master thread has exited, everything it proposed
    /// handed to replication.
    pub async fn stopped(&self) {
        let mut done = self.done.clone();
        let _ = done.wait_for(|done| *done).await;
    }
}

/// Recovers the master from `options.data_dir` and starts its threads. Call
/// from within a tokio runtime (blocking: recovery reads the whole journal).
pub fn start(
    options: MasterOptions,
    replication: Replication,
    started: Started,
) -> Result<(MasterHandle, RecoveryReport), StartError> {
    start_warm(options, replication, started, None, |_| Ok(()))
}

/// [`start`], from a warm standby's master (`warm`, the state before
/// `started.warm`) when there is one: only the entries after it are
/// applied. `prepare` sees each chunk of events before it is replayed
/// (the node fetches the master builds a chunk switches to); its error
/// stops the start.
pub fn start_warm(
    options: MasterOptions,
    replication: Replication,
    started: Started,
    warm: Option<Warm>,
    prepare: impl FnMut(&[Vec<u8>]) -> Result<(), String>,
) -> Result<(MasterHandle, RecoveryReport), StartError> {
    let began = Instant::now();
    let Started {
        epoch,
        snapshot,
        events,
        warm: warm_from,
        restore,
        ..
    } = started;
    let snapshot_index = snapshot.as_ref().map(|s| s.index);
    let (replayer, shadow_from, events_replayed) = bring_up_to_date(
        &options, warm, warm_from, snapshot, events, restore, prepare,
    )?;
    let Replayer {
        core,
        builds,
        components,
        ..
    } = replayer;
    let shadow = options
        .shadow
        .then(|| Shadow::start(options.clone(), components.loaded, shadow_from));
    let report = RecoveryReport {
        journal_epoch: epoch.saturating_sub(1),
        snapshot_index,
        warm: warm_from,
        events_replayed,
        torn_bytes: 0,
        duration: began.elapsed(),
    };

    let counters = Arc::new(MasterCounters::default());
    let failed = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel(MASTER_CHANNEL_CAPACITY);
    let superseded = replication.superseded();
    let (done_tx, done) = watch::channel(false);
    let shared_builds = Arc::new(std::sync::Mutex::new(builds));
    let mut master = MasterLoop {
        shadow,
        builds,
        shared_builds: shared_builds.clone(),
        recording: None,
        rehearsals: 0,
        epoch,
        core,
        rx,
        replication: replication.clone(),
        runtime: tokio::runtime::Handle::current(),
        snapshot_every: options.snapshot_every.max(1),
        events_since_snapshot: 0,
        parked: Vec::new(),
        watchers: Watchers::default(),
        stops: HashMap::new(),
        progress: HashMap::new(),
        batch: Batch::default(),
        counters: counters.clone(),
        failed: failed.clone(),
        superseded: superseded.clone(),
        believed: HashMap::new(),
        done: done_tx,
    };
    // Before serving: the configuration in force, and every worker the
    // journal knows that is not known alive has lost its attempts.
    master
        .startup(options.config, &options.live_workers)
        .map_err(|e| StartError::Core(e.context("starting the master")))?;
    std::thread::Builder::new()
        .name("cohort-master".into())
        .spawn(move || master.run())
        .map_err(|e| StartError::Core(e.into()))?;
    Ok((
        MasterHandle {
            tx,
            epoch,
            counters,
            failed,
            superseded,
            done,
            replication,
            builds: shared_builds,
            data_dir: options.data_dir.clone(),
            cache_dir: options.cache_dir.clone(),
            core: options.core,
        },
        report,
    ))
}

/// The master brought up to date: from the warm standby's state when it
/// is the one the journal's read starts after, else from the snapshot,
/// replaying the events as they are read; and where the shadow starts.
fn bring_up_to_date<'a>(
    options: &'a MasterOptions,
    warm: Option<Warm>,
    warm_from: Option<u64>,
    snapshot: Option<StoredSnapshot>,
    events: Events,
    restore: crate::replication::journal_storage::Restore,
    prepare: impl FnMut(&[Vec<u8>]) -> Result<(), String>,
) -> Result<(Replayer<'a>, ShadowFrom, u64), StartError> {
    match (warm, warm_from) {
        (Some(warm), Some(from)) if warm.at == from => {
            let mut replayer = Replayer::resume(options, warm);
            let replayed = replay_as_read(&mut replayer, events, prepare, |_| {})?;
            Ok((replayer, ShadowFrom::Disk(restore), replayed))
        }
        (None, None) => {
            // Each chunk is replayed as it arrives, and kept for the
            // shadow, which starts from the same state.
            let mut replayer = Replayer::recover(options, snapshot.as_ref())?;
            let mut all = Vec::new();
            let replayed =
                replay_as_read(&mut replayer, events, prepare, |chunk| all.extend(chunk))?;
            let recovered = Arc::new(Recovered {
                snapshot,
                events: all,
            });
            Ok((replayer, ShadowFrom::Recovered(recovered), replayed))
        }
        (warm, from) => Err(StartError::Core(anyhow::anyhow!(
            "a standby's state before {:?} cannot start a master whose journal is read from {from:?}",
            warm.map(|w| w.at)
        ))),
    }
}

#[derive(Default)]
struct Batch {
    events: Vec<Vec<u8>>,
    /// How many of `events` the shadow has.
    shadowed: usize,
    completions: Vec<Completion>,
    work_available: bool,
}

struct Parked {
    worker: String,
    slots: u32,
    free: u32,
    /// What the worker's node holds (see `cohort_master::locality`).
    holds: Vec<cohort_master::BlobPrefix>,
    /// Its labels and memory (see `cohort_master::pools`).
    pool: cohort_master::WorkerPool,
    until: Instant,
    respond: Respond<PollResult>,
}

struct MasterLoop {
    core: Box<dyn Core>,
    /// Where snapshots are taken, if not here.
    shadow: Option<Shadow>,
    /// The master build running and the one before.
    builds: Builds,
    shared_builds: Arc<std::sync::Mutex<Builds>>,
    /// Events kept for an upgrade being checked.
    recording: Option<Recording>,
    /// Rehearsals started (their tokens).
    rehearsals: u64,
    rx: mpsc::Receiver<Request>,
    replication: Replication,
    runtime: tokio::runtime::Handle,
    snapshot_every: u64,
    events_since_snapshot: u64,
    parked: Vec<Parked>,
    watchers: Watchers,
    stops: HashMap<String, Vec<(JobId, u32)>>,
    progress: HashMap<JobId, ProgressReport>,
    batch: Batch,
    counters: Arc<MasterCounters>,
    failed: Arc<AtomicBool>,
    /// The epoch this master writes with.
    epoch: u64,
    superseded: watch::Receiver<Option<u64>>,
    /// The attempts each worker ran when this master started, until that
    /// worker's first poll compares them with what it holds.
    believed: HashMap<String, Vec<(JobId, u32)>>,
    /// Set when the thread exits.
    done: watch::Sender<bool>,
}

impl MasterLoop {
    fn startup(&mut self, config: Config, live_workers: &[String]) -> anyhow::Result<()> {
        self.execute(now_ms(), &Command::Configure(config))?
            .map_err(|r| anyhow::anyhow!("configuration refused: {r}"))?;
        if let Answer::Workers(workers) = self.query(now_ms(), &Query::Workers)?? {
            for worker in workers
                .into_iter()
                .filter(|w| !live_workers.contains(&w.id))
            {
                self.execute(now_ms(), &Command::WorkerGone { worker: worker.id })??;
            }
        }
        self.believed = self.running_attempts(now_ms())?;
        self.flush()
    }

    fn run(mut self) {
        (self.counters.memory_bytes).store(self.core.memory_bytes(), Ordering::Relaxed);
        let mut next_tick = Instant::now() + MASTER_TICK_INTERVAL;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            let first = self
                .runtime
                .block_on(async { tokio::time::timeout(wait, self.rx.recv()).await });
            // Only a newer epoch stops this master: the value may be left
            // from an earlier master of this node that was superseded
            // before this one took over.
            let superseded = self.superseded.borrow().filter(|&newer| newer > self.epoch);
            if let Some(epoch) = superseded {
                tracing::warn!("superseded by epoch {epoch}: the master stops");
                return self.stop(None);
            }
            let pass = Instant::now();
            let result = match first {
                Ok(None) => return self.stop(None),
                Ok(Some(Request::Shutdown(done))) => return self.stop(Some(done)),
                Ok(Some(request)) => self.serve_batch(request),
                Err(_elapsed) => Ok(None),
            };
            let result = result.and_then(|shutdown| {
                if Instant::now() >= next_tick {
                    next_tick = Instant::now() + MASTER_TICK_INTERVAL;
                    self.execute(now_ms(), &Command::Tick)??;
                    self.expire_parked();
                    // A key's rate window moves on with time, not with an
                    // event: parked polls look again at every tick.
                    self.batch.work_available = true;
                }
                self.wake_parked()?;
                self.flush()?;
                Ok(shutdown)
            });
            let nanos = u64::try_from(pass.elapsed().as_nanos()).unwrap_or(u64::MAX);
            (self.counters.pass_longest_nanos).fetch_max(nanos, Ordering::Relaxed);
            match result {
                Ok(None) => {}
                Ok(Some(done)) => return self.stop(Some(done)),
                Err(error) => {
                    tracing::error!("the master failed and stops: {error:#}");
                    self.failed.store(true, Ordering::Relaxed);
                    self.done.send_replace(true);
                    return;
                }
            }
        }
    }

    /// Serves `first` and whatever else is waiting; returns a shutdown
    /// request if one arrived (it is served after the batch).
    fn serve_batch(&mut self, first: Request) -> anyhow::Result<Option<oneshot::Sender<()>>> {
        // Checked once per batch, not per request: the replication state is
        // shared with the sessions.
        let ready = self.ready();
        self.serve(first, &ready)?;
        for _ in 1..BATCH_REQUESTS_MAX {
            match self.rx.try_recv() {
                Ok(Request::Shutdown(done)) => return Ok(Some(done)),
                Ok(request) => self.serve(request, &ready)?,
                Err(_) => break,
            }
        }
        Ok(None)
    }

    /// Whether requests may be decided now (see [`Replication::ready`]).
    fn ready(&self) -> Result<(), MasterError> {
        self.replication.ready()
    }

    fn serve(&mut self, request: Request, ready: &Result<(), MasterError>) -> anyhow::Result<()> {
        let now = now_ms();
        if let Err(error) = ready.clone() {
            self.refuse(request, error);
            return Ok(());
        }
        match request {
            Request::Command(command, respond) => {
                let decide = decision_span(&command);
                let result = {
                    let _entered = decide.as_ref().map(|(span, _)| span.enter());
                    self.execute(now, &command)?
                };
                let commit = decide.map(|(decide, trace)| commit_span(decide, trace, &result));
                self.complete(move |outcome| {
                    // Committed (or failed): the commit span ends here.
                    drop(commit);
                    let _ = respond.send(outcome.and_then(|()| {
                        result
                            .map(|(reply, _)| reply)
                            .map_err(MasterError::Rejected)
                    }));
                });
            }
            Request::Query(query, respond) => {
                let answer = self.query(now, &query)?.map_err(MasterError::Rejected);
                self.complete(move |outcome| {
                    let _ = respond.send(outcome.and(answer));
                });
            }
            Request::Poll(poll, until, respond) => self.serve_poll(now, poll, until, respond)?,
            Request::Progress(id, respond) => {
                let _ = respond.send(self.progress.get(&id).cloned());
            }
            Request::Watch(id, notify) => self.serve_watch(now, id, notify)?,
            Request::WaitFinished(query, respond, notify) => {
                self.serve_wait_finished(now, query, respond, notify)?;
            }
            Request::Rehearse(respond) => self.rehearse(respond)?,
            Request::Switch(switch, respond) => {
                let result = self.switch(*switch)?;
                match result {
                    Ok(report) => self.complete(move |outcome| {
                        let _ = respond.send(outcome.map(|()| report));
                    }),
                    Err(rejection) => drop(respond.send(Err(MasterError::Rejected(rejection)))),
                }
            }
            Request::EndRehearsal(token) => {
                if self.recording.as_ref().is_some_and(|r| r.token == token) {
                    self.recording = None;
                }
            }
            Request::Shutdown(_) => unreachable!("handled by the caller"),
        }
        Ok(())
    }

    /// Refuses `request` with `error` instead of deciding what could not
    /// be committed (progress, held in memory, is still answered).
    fn refuse(&mut self, request: Request, error: MasterError) {
        match request {
            Request::Command(_, respond) => drop(respond.send(Err(error))),
            Request::Query(_, respond) => drop(respond.send(Err(error))),
            Request::Poll(_, _, respond) => drop(respond.send(Err(error))),
            Request::Watch(..) => {}
            Request::WaitFinished(_, respond, _) => drop(respond.send(Err(error))),
            Request::Progress(id, respond) => {
                let _ = respond.send(self.progress.get(&id).cloned());
            }
            Request::Rehearse(respond) => drop(respond.send(Err(error))),
            Request::Switch(_, respond) => drop(respond.send(Err(error))),
            Request::EndRehearsal(_) => self.recording = None,
            Request::Shutdown(_) => unreachable!("handled by the caller"),
        }
    }

    /// A worker's poll: reconciles what a new master believes it runs,
    /// keeps its progress, and answers with work now or parks it.
    fn serve_poll(
        &mut self,
        now: Millis,
        poll: Poll,
        until: Instant,
        respond: Respond<PollResult>,
    ) -> anyhow::Result<()> {
        let Poll {
            worker,
            slots,
            free,
            progress,
            held,
            holds,
            pool,
            ..
        } = poll;
        if let Some(believed) = self.believed.remove(&worker) {
            self.reconcile(now, &worker, believed, &held)?;
        }
        for report in progress {
            if self.progress.len() < PROGRESS_KEPT_MAX || self.progress.contains_key(&report.id) {
                self.progress.insert(report.id, report);
            }
        }
        let parked = Parked {
            worker,
            slots,
            free,
            holds,
            pool,
            until,
            respond,
        };
        if let Some(parked) = self.poll(now, parked)? {
            self.parked.push(parked);
        }
        Ok(())
    }

    /// Fires `notify` once job `id` has settled (at once, after commit, if
    /// it already has, or is unknown).
    fn serve_watch(
        &mut self,
        now: Millis,
        id: JobId,
        notify: oneshot::Sender<()>,
    ) -> anyhow::Result<()> {
        let settled = match self.query(now, &Query::Job { id })? {
            Ok(Answer::Job(view)) => view.state.is_terminal(),
            _ => true,
        };
        if settled {
            self.complete(move |outcome| {
                if outcome.is_ok() {
                    let _ = notify.send(());
                }
            });
        } else {
            self.watchers.add(vec![id], notify);
        }
        Ok(())
    }

    /// Answers which of the jobs have finished; when none has, also
    /// watches them all, so the caller can ask again on the first to settle.
    fn serve_wait_finished(
        &mut self,
        now: Millis,
        query: Query,
        respond: Respond<Answer>,
        notify: oneshot::Sender<()>,
    ) -> anyhow::Result<()> {
        let Some(ids) = query.finished_ids() else {
            let _ = respond.send(Err(MasterError::Unavailable(
                "a wait for finished jobs needs Query::Finished".into(),
            )));
            return Ok(());
        };
        let ids = ids.to_vec();
        let answer = self.query(now, &query)?.map_err(MasterError::Rejected);
        if matches!(&answer, Ok(Answer::Finished(jobs)) if jobs.is_empty()) {
            self.watchers.add(ids, notify);
        }
        self.complete(move |outcome| {
            let _ = respond.send(outcome.and(answer));
        });
        Ok(())
    }

    /// Starts recording events for an upgrade's check, and answers with
    /// the state the recording starts from.
    fn rehearse(&mut self, respond: Respond<Rehearsal>) -> anyhow::Result<()> {
        self.rehearsals += 1;
        let token = self.rehearsals;
        self.recording = Some(Recording {
            token,
            events: Vec::new(),
            bytes: 0,
            overflowed: false,
        });
        self.take_snapshot(
            true,
            Box::new(move |state| {
                let _ = respond.send(
                    state
                        .map(|(_, state)| Rehearsal { token, state })
                        .map_err(|e| MasterError::Unavailable(format!("{e:#}"))),
                );
            }),
        )
    }

    /// The switch itself (see [`upgrade`]): the new master replays what was
    /// decided since its rehearsal; its state must then be the running
    /// master's (compared as snapshots, taken on two threads at once), and
    /// it runs from here on, the switch record joining the batch. A build
    /// with another snapshot format is compared in its own format, started
    /// from the running state as a replay of the switch will start it. A
    /// refusal leaves everything as it was. An error is the running master's
    /// own failure.
    fn switch(&mut self, switch: SwitchTo) -> anyhow::Result<Result<SwitchReport, Rejection>> {
        let began = Instant::now();
        let SwitchTo {
            token,
            to,
            mut core,
            component,
        } = switch;
        let busy = |message: &str| {
            Ok(Err(Rejection::new(
                ErrorCode::UpgradeBusy.as_str(),
                message,
            )))
        };
        let recording = match self.recording.take() {
            Some(recording) if recording.token == token => recording,
            other => {
                self.recording = other;
                return busy("another upgrade started meanwhile; the later one goes on");
            }
        };
        if recording.overflowed {
            return busy(&format!(
                "the running master journaled more than {RECORDING_BYTES_MAX} bytes of events \
                 while the new one was checked; try again when the cluster is quieter"
            ));
        }
        let from = self.builds.active;
        if from == to {
            return Ok(Ok(SwitchReport {
                from,
                to,
                switched: false,
                replayed_events: 0,
                pause_ms: 0,
            }));
        }
        if let Err(rejection) = handover::replay(core.as_mut(), &recording.events) {
            return Ok(Err(rejection));
        }
        let handed = match self.checked_handover(core, &component, recording.events.len())? {
            Ok(handed) => handed,
            Err(rejection) => return Ok(Err(rejection)),
        };
        self.core = handed;
        self.builds = self.builds.switched(to);
        *self.shared_builds.lock().unwrap_or_else(|e| e.into_inner()) = self.builds;
        self.batch
            .events
            .push(upgrade::encode_switch(&Switch { from, to }));
        self.events_since_snapshot += 1;
        crate::events::emit!(
            info,
            crate::events::MASTER_SWITCHED,
            from = %from,
            to = %to,
            replayed = recording.events.len(),
            "the master switched to another build"
        );
        Ok(Ok(SwitchReport {
            from,
            to,
            switched: true,
            replayed_events: recording.events.len() as u64,
            pause_ms: began.elapsed().as_millis() as u64,
        }))
    }

    /// The new build's instance to run from here on, if its state after
    /// replaying the `replayed_events` recorded events is the running
    /// master's (see [`switch`](Self::switch)); a refusal otherwise. An
    /// error is the running master's own failure.
    fn checked_handover(
        &mut self,
        mut core: Box<dyn Core>,
        component: &MasterComponent,
        replayed_events: usize,
    ) -> anyhow::Result<Result<Box<dyn Core>, Rejection>> {
        // Both states at once, on two threads: the running master's (what
        // it hands over) and the new build's after its replay.
        let (running, replayed) = std::thread::scope(|scope| {
            let replayed = scope.spawn(|| core.snapshot());
            (self.core.snapshot(), replayed.join())
        });
        let running = running?;
        let trapped = |e: String| {
            Ok(Err(Rejection::new(
                ErrorCode::MasterReplayDiverged.as_str(),
                format!("the new master failed taking a snapshot: {e}"),
            )))
        };
        let replayed = match replayed {
            Ok(Ok(state)) => state,
            Ok(Err(e)) => return trapped(format!("{e:#}")),
            Err(_) => return trapped("it panicked".into()),
        };
        let diverged = || {
            Ok(Err(Rejection::new(
                ErrorCode::MasterReplayDiverged.as_str(),
                format!(
                    "replaying the {} events journaled during the check gave another state than \
                     the running master's: the new build does not read this journal the same way",
                    replayed_events
                ),
            )))
        };
        Ok(Ok(if running.first() == replayed.first() {
            // The same snapshot format: the replayed instance holds the
            // running state byte for byte, and is what a replay of the
            // switch record builds (`init` of those bytes).
            if running != replayed {
                return diverged();
            }
            core
        } else {
            // The new build writes another format: start it from the
            // running state as a replay of the switch will, and compare in
            // its format.
            let mut handed = match handover::start(
                component,
                Some(&running),
                ErrorCode::MasterSnapshotUnreadable,
            ) {
                Ok(handed) => handed,
                Err(rejection) => return Ok(Err(rejection)),
            };
            match handed.snapshot() {
                Ok(state) if state == replayed => handed,
                Ok(_) => return diverged(),
                Err(e) => return trapped(format!("{e:#}")),
            }
        }))
    }

    /// Which worker runs which attempt, from the state this master started
    /// with (one pass over the running jobs).
    fn running_attempts(
        &mut self,
        now: Millis,
    ) -> anyhow::Result<HashMap<String, Vec<(JobId, u32)>>> {
        let mut believed: HashMap<String, Vec<(JobId, u32)>> = HashMap::new();
        let mut after = None;
        loop {
            let page = Query::Jobs {
                filter: cohort_master::JobFilter {
                    state: Some(JobState::Running),
                    ..cohort_master::JobFilter::default()
                },
                after,
                limit: cohort_master::limits::LIST_LIMIT_MAX,
                newest_first: false,
            };
            let Ok(Answer::Jobs { jobs, next }) = self.query(now, &page)? else {
                break;
            };
            for job in jobs {
                if let Ok(Answer::Job(view)) = self.query(now, &Query::Job { id: job.id })?
                    && let Some(attempt) = view.attempts.last()
                    && attempt.ended_at.is_none()
                {
                    believed
                        .entry(attempt.worker.clone())
                        .or_default()
                        .push((job.id, attempt.number));
                }
            }
            match next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        Ok(believed)
    }

    /// Fails, as `worker_lost`, every attempt of `believed` (what this
    /// master started believing `worker` runs) that the worker does not
    /// hold (see [`Poll::held`]). One that ended since is left alone: the
    /// master ignores a report for an attempt that is not current.
    fn reconcile(
        &mut self,
        now: Millis,
        worker: &str,
        believed: Vec<(JobId, u32)>,
        held: &[(JobId, u32)],
    ) -> anyhow::Result<()> {
        let held: HashSet<(JobId, u32)> = held.iter().copied().collect();
        for (id, attempt) in believed.into_iter().filter(|a| !held.contains(a)) {
            crate::events::emit!(
                info,
                crate::events::ATTEMPT_REQUEUED,
                job = id,
                attempt,
                worker = %worker,
                "an attempt never reached its worker; re-queued"
            );
            let command = Command::Finish {
                id,
                attempt,
                worker: worker.to_string(),
                outcome: Outcome::Failed(Failure {
                    code: "worker_lost".into(),
                    message: "the assignment never reached the worker (the master changed)".into(),
                }),
                duration_ms: 0,
                log_tail: String::new(),
                calls: Vec::new(),
                calls_dropped: 0,
                usage: cohort_master::Usage::default(),
            };
            let _ = self.execute(now, &command)?;
        }
        Ok(())
    }

    /// Runs a poll; returns it back if it found nothing and may wait.
    fn poll(&mut self, now: Millis, parked: Parked) -> anyhow::Result<Option<Parked>> {
        let command = Command::Poll {
            worker: parked.worker.clone(),
            slots: parked.slots,
            free: parked.free,
            holds: parked.holds.clone(),
            pool: parked.pool.clone(),
        };
        let assignments = match self.execute(now, &command)? {
            Err(rejection) => {
                let _ = parked.respond.send(Err(MasterError::Rejected(rejection)));
                return Ok(None);
            }
            Ok((_, assignments)) => assignments,
        };
        let stops = self.stops.remove(&parked.worker).unwrap_or_default();
        if assignments.is_empty()
            && stops.is_empty()
            && parked.free > 0
            && parked.until > Instant::now()
        {
            return Ok(Some(parked));
        }
        self.complete(move |outcome| {
            let _ = parked
                .respond
                .send(outcome.map(|()| PollResult { assignments, stops }));
        });
        Ok(None)
    }

    fn wake_parked(&mut self) -> anyhow::Result<()> {
        let work = std::mem::take(&mut self.batch.work_available);
        if self.parked.is_empty() || (!work && self.stops.is_empty()) {
            return Ok(());
        }
        let now = now_ms();
        for parked in std::mem::take(&mut self.parked) {
            if parked.respond.is_closed() {
                continue;
            }
            if !work && !self.stops.contains_key(&parked.worker) {
                self.parked.push(parked);
                continue;
            }
            if let Some(parked) = self.poll(now, parked)? {
                self.parked.push(parked);
            }
        }
        Ok(())
    }

    fn expire_parked(&mut self) {
        let now = Instant::now();
        let (expired, waiting) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| p.until <= now || p.respond.is_closed());
        self.parked = waiting;
        for parked in expired {
            let _ = parked.respond.send(Ok(PollResult::default()));
        }
        self.watchers.forget_abandoned();
    }

    fn complete(&mut self, completion: impl FnOnce(Result<(), MasterError>) + Send + 'static) {
        self.batch.completions.push(Box::new(completion));
    }

    fn query(&mut self, now: Millis, query: &Query) -> anyhow::Result<Result<Answer, Rejection>> {
        Ok(match self.core.query(now, encode(query))? {
            Ok(bytes) => Ok(decode(&bytes).map_err(|r| anyhow::anyhow!("bad answer: {r}"))?),
            Err(rejection) => Err(rejection),
        })
    }

    /// Decides `command`, applies its events and routes their effects;
    /// returns the reply and any assignments. The events join the batch.
    #[allow(clippy::type_complexity)]
    fn execute(
        &mut self,
        now: Millis,
        command: &Command,
    ) -> anyhow::Result<Result<(Reply, Vec<Assignment>), Rejection>> {
        self.counters.commands.fetch_add(1, Ordering::Relaxed);
        let (events, reply) = match self.core.decide(now, encode(command))? {
            Ok(decision) => decision,
            Err(rejection) => return Ok(Err(rejection)),
        };
        let reply: Reply = decode(&reply).map_err(|r| anyhow::anyhow!("bad reply: {r}"))?;
        let mut assigned = Vec::new();
        if events.is_empty() {
            return Ok(Ok((reply, assigned)));
        }
        let effects = self
            .core
            .apply(&events)?
            .map_err(|r| anyhow::anyhow!("the master refused its own events: {r}"))?;
        self.events_since_snapshot += events.len() as u64;
        if let Some(recording) = &mut self.recording
            && !recording.overflowed
        {
            recording.bytes += events.iter().map(Vec::len).sum::<usize>();
            recording.overflowed = recording.bytes > RECORDING_BYTES_MAX;
            if !recording.overflowed {
                recording.events.extend(events.iter().cloned());
            }
        }
        self.batch.events.extend(events);
        for effect in effects {
            match decode(&effect).map_err(|r| anyhow::anyhow!("bad effect: {r}"))? {
                Effect::Assign(assignment) => assigned.push(*assignment),
                Effect::Stop {
                    worker,
                    id,
                    attempt,
                } => {
                    let stops = self.stops.entry(worker).or_default();
                    if stops.len() == STOPS_PER_WORKER_MAX {
                        stops.remove(0);
                    }
                    stops.push((id, attempt));
                }
                Effect::WorkAvailable => self.batch.work_available = true,
                Effect::Settled { id, .. } => {
                    self.progress.remove(&id);
                    let watchers = self.watchers.settled(id);
                    if !watchers.is_empty() {
                        self.complete(move |outcome| {
                            if outcome.is_ok() {
                                for watcher in watchers {
                                    let _ = watcher.send(());
                                }
                            }
                        });
                    }
                }
            }
        }
        Ok(Ok((reply, assigned)))
    }

    /// Hands the batch to replication (and the shadow), and a snapshot
    /// when one is due.
    fn flush(&mut self) -> anyhow::Result<()> {
        self.feed_shadow();
        let batch = std::mem::take(&mut self.batch);
        if !batch.events.is_empty() || !batch.completions.is_empty() {
            self.counters
                .events
                .fetch_add(batch.events.len() as u64, Ordering::Relaxed);
            self.replication.propose(batch.events, batch.completions);
        }
        self.batch.work_available = batch.work_available;
        if self.events_since_snapshot >= self.snapshot_every {
            self.snapshot(true)?;
        }
        (self.counters.memory_bytes).store(self.core.memory_bytes(), Ordering::Relaxed);
        Ok(())
    }

    /// The events of the batch being formed that the shadow lacks. A
    /// shadow given up is dropped (its thread then ends).
    fn feed_shadow(&mut self) {
        if let Some(shadow) = &self.shadow {
            shadow.feed(&self.batch.events[self.batch.shadowed..]);
            if !shadow.healthy() {
                self.shadow = None;
            }
        }
        self.batch.shadowed = self.batch.events.len();
    }

    /// A snapshot for the journal after every event so far: from the
    /// shadow if `shadowed` and there is one, else taken here.
    fn snapshot(&mut self, shadowed: bool) -> anyhow::Result<()> {
        self.events_since_snapshot = 0;
        self.counters.snapshots.fetch_add(1, Ordering::Relaxed);
        let slot = self.replication.snapshot_slot();
        self.take_snapshot(
            shadowed,
            Box::new(move |state| {
                if let Ok((builds, state)) = state {
                    slot.fill(upgrade::wrap_state(builds, state));
                }
            }),
        )
    }

    /// Hands `taken` the state after every event decided so far: taken by
    /// the shadow if `shadowed` and it is healthy, else here (the master
    /// pauses for it).
    fn take_snapshot(&mut self, shadowed: bool, mut taken: Taken) -> anyhow::Result<()> {
        if shadowed && self.shadow.is_some() {
            self.feed_shadow();
            if let Some(shadow) = &self.shadow {
                match shadow.snapshot(taken) {
                    Ok(()) => return Ok(()),
                    Err(back) => {
                        taken = back;
                        self.shadow = None;
                    }
                }
            }
        }
        let state = self.core.snapshot()?;
        taken(Ok((self.builds, state)));
        Ok(())
    }

    fn stop(mut self, done: Option<oneshot::Sender<()>>) {
        for parked in std::mem::take(&mut self.parked) {
            let _ = parked.respond.send(Ok(PollResult::default()));
        }
        // Always snapshot (a restart or the next master starts from it),
        // unless superseded: then this node's state is not the cluster's.
        let superseded = self.superseded.borrow().is_some();
        let result = self.flush().and_then(|()| {
            if superseded {
                Ok(())
            } else {
                self.snapshot(false)
            }
        });
        if let Err(error) = result {
            tracing::error!("the master could not flush while stopping: {error:#}");
        }
        self.runtime.block_on(self.replication.flush());
        self.done.send_replace(true);
        if let Some(done) = done {
            let _ = done.send(());
        }
    }
}

/// Who waits for which jobs to settle: groups of jobs, each with one
/// wake-up that fires when the first of its jobs settles, after which the
/// whole group is forgotten.
#[derive(Default)]
struct Watchers {
    groups: HashMap<u64, (Vec<JobId>, oneshot::Sender<()>)>,
    by_job: HashMap<JobId, Vec<u64>>,
    next: u64,
}

impl Watchers {
    /// Wakes `notify` when the first of `ids` settles.
    fn add(&mut self, ids: Vec<JobId>, notify: oneshot::Sender<()>) {
        let group = self.next;
        self.next += 1;
        for &id in &ids {
            self.by_job.entry(id).or_default().push(group);
        }
        self.groups.insert(group, (ids, notify));
    }

    /// Job `id` settled: the wake-ups of the groups it was in, whose jobs
    /// are no longer watched.
    fn settled(&mut self, id: JobId) -> Vec<oneshot::Sender<()>> {
        let groups = self.by_job.remove(&id).unwrap_or_default();
        groups
            .into_iter()
            .filter_map(|group| self.remove(group))
            .collect()
    }

    /// Forgets the groups whose waiter stopped waiting.
    fn forget_abandoned(&mut self) {
        let abandoned: Vec<u64> = self
            .groups
            .iter()
            .filter(|(_, (_, notify))| notify.is_closed())
            .map(|(&group, _)| group)
            .collect();
        for group in abandoned {
            self.remove(group);
        }
    }

    fn remove(&mut self, group: u64) -> Option<oneshot::Sender<()>> {
        let (ids, notify) = self.groups.remove(&group)?;
        for id in ids {
            if let Some(groups) = self.by_job.get_mut(&id) {
                groups.retain(|&g| g != group);
                if groups.is_empty() {
                    self.by_job.remove(&id);
                }
            }
        }
        Some(notify)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_group_of_watched_jobs_wakes_once_and_is_forgotten_whole() {
        let mut watchers = Watchers::default();
        let (many, mut woken) = oneshot::channel();
        watchers.add(vec![1, 2, 3], many);
        let (one, mut single) = oneshot::channel();
        watchers.add(vec![2], one);
        let wakes = watchers.settled(2);
        assert_eq!(wakes.len(), 2);
        for wake in wakes {
            wake.send(()).unwrap();
        }
        assert!(woken.try_recv().is_ok() && single.try_recv().is_ok());
        // Jobs 1 and 3 were in the woken group only: nothing waits on them.
        assert!(watchers.settled(1).is_empty() && watchers.settled(3).is_empty());
        assert!(watchers.by_job.is_empty() && watchers.groups.is_empty());
        // A waiter that gave up is dropped at the next sweep.
        let (gone, receiver) = oneshot::channel();
        watchers.add(vec![4, 5], gone);
        drop(receiver);
        watchers.forget_abandoned();
        assert!(watchers.by_job.is_empty() && watchers.groups.is_empty());
    }
    use super::*;
    use cohort_master::JobSpec;

    fn options(dir: &std::path::Path, live_workers: &[&str]) -> MasterOptions {
        MasterOptions {
            data_dir: dir.to_path_buf(),
            cache_dir: dir.to_path_buf(),
            config: Config::default(),
            core: CoreKind::Native,
            snapshot_every: crate::limits::SNAPSHOT_EVERY_DEFAULT,
            live_workers: live_workers.iter().map(|w| w.to_string()).collect(),
            component: None,
            shadow: true,
        }
    }

    async fn start_in(options: MasterOptions) -> MasterHandle {
        recover_in(options).await.0
    }

    /// A master started in `options.data_dir`, with its recovery report.
    async fn recover_in(options: MasterOptions) -> (MasterHandle, RecoveryReport) {
        let (replication, started) = loop {
            // A previous master's replication lets go of the journal
            // once its last handle is dropped.
            match Replication::solo(&options.data_dir).await {
                Ok(solo) => break solo,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        tokio::task::spawn_blocking(move || start(options, replication, started))
            .await
            .unwrap()
            .unwrap()
    }

    /// A Wasm master in `dir` with worker `w` alive, and guest `name` stored as
    /// a build it may switch to.
    async fn wasm_master_with(
        dir: &std::path::Path,
        name: &str,
    ) -> (MasterHandle, MasterOptions, Build) {
        let options = MasterOptions {
            core: CoreKind::Wasm,
            ..options(dir, &["w"])
        };
        let master = start_in(options.clone()).await;
        let build = upgrade::MasterStore::new(dir).put(&guest(name)).unwrap();
        (master, options, Build::Uploaded(build))
    }

    fn poll(held: Vec<(JobId, u32)>) -> Poll {
        Poll {
            worker: "w".into(),
            slots: 4,
            free: 4,
            wait_ms: 0,
            progress: Vec::new(),
            held,
            holds: Vec::new(),
            pool: Default::default(),
        }
    }

    async fn last_attempt(master: &MasterHandle, id: JobId) -> (JobState, Option<String>) {
        let Answer::Job(view) = master.query(Query::Job { id }).await.unwrap() else {
            panic!("not a job");
        };
        let outcome = view.attempts.last().and_then(|a| a.outcome.clone());
        (view.state, outcome)
    }

    /// An assignment whose poll answer never reached the worker (the master
    /// died first) is re-queued by the next master at the worker's first
    /// poll, not at its lease's end; one the worker holds is kept.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_new_master_requeues_assignments_the_worker_never_got() {
        let dir = tempfile::tempdir().unwrap();
        let master = start_in(options(dir.path(), &[])).await;
        let mut ids = Vec::new();
        for n in 0..2u8 {
            let spec = JobSpec {
                module: [7; 32],
                input: vec![n],
                timeout_ms: 60_000,
                memory_bytes: None,
                max_attempts: 3,
                priority: 0,
                idempotency_key: None,
            };
            let request = cohort_master::RequestId {
                origin: 1,
                seq: n.into(),
            };
            let submit = Command::Submit {
                spec,
                request,
                options: Default::default(),
            };
            let Reply::Submitted { id, .. } = master.command(submit).await.unwrap() else {
                panic!("not submitted");
            };
            ids.push(id);
        }
        let assigned = master.poll(poll(Vec::new())).await.unwrap().assignments;
        assert_eq!(assigned.len(), 2);
        master.shutdown().await;
        master.stopped().await;

        // The next incarnation; the worker got only the first assignment.
        let master = start_in(options(dir.path(), &["w"])).await;
        master.poll(poll(vec![(ids[0], 1)])).await.unwrap();
        assert_eq!(
            last_attempt(&master, ids[0]).await,
            (JobState::Running, None)
        );
        assert_eq!(
            last_attempt(&master, ids[1]).await,
            (JobState::Queued, Some("worker_lost".into()))
        );
        // Only the first poll of each worker is compared.
        master.poll(poll(Vec::new())).await.unwrap();
        assert_eq!(last_attempt(&master, ids[0]).await.0, JobState::Running);
        master.shutdown().await;
    }

    fn guest(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/{name}.wasm", env!("COHORT_GUESTS_DIR"))).unwrap()
    }

    /// Submits a job of `priority`; its id.
    async fn submit(master: &MasterHandle, seq: u64, priority: i32) -> JobId {
        let spec = JobSpec {
            module: [7; 32],
            input: vec![],
            timeout_ms: 60_000,
            memory_bytes: None,
            max_attempts: 3,
            priority,
            idempotency_key: None,
        };
        let submit = Command::Submit {
            spec,
            request: cohort_master::RequestId { origin: 9, seq },
            options: Default::default(),
        };
        let Reply::Submitted { id, .. } = master.command(submit).await.unwrap() else {
            panic!("not submitted");
        };
        id
    }

    /// Periodic snapshots, taken by the shadow or (without one) by the
    /// master, compact the journal while the master serves; a restart
    /// starts from the newest and holds every job.
    #[tokio::test(flavor = "multi_thread")]
    async fn periodic_snapshots_compact_the_journal_with_or_without_a_shadow() {
        for shadow in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let options = MasterOptions {
                snapshot_every: 40,
                shadow,
                ..options(dir.path(), &[])
            };
            let master = start_in(options.clone()).await;
            for seq in 0..300 {
                submit(&master, seq, 0).await;
            }
            // Written while the master runs: not the one a stop takes.
            let deadline = Instant::now() + Duration::from_secs(20);
            while crate::journal::durable::latest_snapshot(dir.path())
                .unwrap()
                .is_none_or(|s| s.index <= 200)
            {
                assert!(Instant::now() < deadline, "no snapshot (shadow: {shadow})");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(master.counters().snapshots.load(Ordering::Relaxed) >= 5);
            master.shutdown().await;
            drop(master);
            let (master, report) = recover_in(options).await;
            assert!(report.snapshot_index.is_some());
            let Answer::Stats(stats) = master.query(Query::Stats).await.unwrap() else {
                panic!("not stats");
            };
            assert_eq!(stats.jobs[0], 300, "every job is queued (shadow: {shadow})");
            master.shutdown().await;
        }
    }

    /// The job the next one-slot poll starts.
    async fn next_started(master: &MasterHandle) -> JobId {
        let one = Poll {
            free: 1,
            ..poll(Vec::new())
        };
        let assigned = master.poll(one).await.unwrap().assignments;
        assert_eq!(assigned.len(), 1);
        assigned[0].id
    }

    /// The example FIFO master switched in on a running master: jobs are
    /// then handed out in arrival order, the switch survives a restart, a
    /// repeat changes nothing, and a rollback restores the built-in
    /// master.
    #[tokio::test(flavor = "multi_thread")]
    async fn an_upgrade_switches_the_policy_in_place_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let (master, options, fifo) = wasm_master_with(dir.path(), "fifo_master").await;
        // Built in: the higher priority first.
        let low = submit(&master, 1, 0).await;
        let high = submit(&master, 2, 10).await;
        assert_eq!(next_started(&master).await, high);
        let report = master.upgrade(fifo).await.unwrap();
        assert!(report.switched, "{report:?}");
        assert_eq!((report.from, report.to), (Build::BuiltIn, fifo));
        assert_eq!(master.builds().active, fifo);
        // Arrival order now: `low` waited longest, whatever the priority.
        let higher = submit(&master, 3, 20).await;
        assert_eq!(next_started(&master).await, low);
        let again = master.upgrade(fifo).await.unwrap();
        assert!(!again.switched);
        master.shutdown().await;
        master.stopped().await;

        let master = start_in(options.clone()).await;
        assert_eq!(
            master.builds(),
            Builds {
                active: fifo,
                previous: Build::BuiltIn
            }
        );
        assert_eq!(last_attempt(&master, higher).await.0, JobState::Queued);
        let back = master.rollback().await.unwrap();
        assert_eq!(
            (back.from, back.to, back.switched),
            (fifo, Build::BuiltIn, true)
        );
        let highest = submit(&master, 4, 30).await;
        let _lowest = submit(&master, 5, -5).await;
        assert_eq!(next_started(&master).await, highest);
        master.shutdown().await;
    }

    /// A master that cannot read the running one's state is refused by
    /// name, and the running master goes on as it was.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_refused_upgrade_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (master, _, stale) = wasm_master_with(dir.path(), "fixture_master_stale").await;
        let first = submit(&master, 1, 0).await;
        let Err(MasterError::Rejected(refusal)) = master.upgrade(stale).await else {
            panic!("a master that reads no snapshot was switched in");
        };
        assert_eq!(
            refusal.code,
            ErrorCode::MasterSnapshotUnreadable.as_str(),
            "{refusal}"
        );
        assert_eq!(master.builds(), Builds::default());
        let second = submit(&master, 2, 0).await;
        assert_eq!(next_started(&master).await, first);
        assert_eq!(next_started(&master).await, second);
        let Err(MasterError::Rejected(refusal)) = master.rollback().await else {
            panic!("a rollback with nothing to roll back to");
        };
        assert_eq!(refusal.code, ErrorCode::NothingToRollBack.as_str());
        master.shutdown().await;
    }

    /// A build with another snapshot format passes the check in its own
    /// format, runs across a restart, and cannot be rolled back from by a
    /// build that does not read that format: refused, nothing changed.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_build_with_a_new_snapshot_format_is_checked_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let (master, options, reformat) =
            wasm_master_with(dir.path(), "fixture_master_reformat").await;
        let first = submit(&master, 1, 0).await;
        let report = master.upgrade(reformat).await.unwrap();
        assert!(report.switched, "{report:?}");
        let second = submit(&master, 2, 0).await;
        master.shutdown().await;
        master.stopped().await;

        let master = start_in(options).await;
        assert_eq!(master.builds().active, reformat);
        assert_eq!(next_started(&master).await, first);
        let Err(MasterError::Rejected(refusal)) = master.rollback().await else {
            panic!("the built-in master took a state it cannot read");
        };
        assert_eq!(
            refusal.code,
            ErrorCode::MasterSnapshotUnreadable.as_str(),
            "{refusal}"
        );
        assert_eq!(master.builds().active, reformat);
        assert_eq!(next_started(&master).await, second);
        master.shutdown().await;
    }
}
