//! The scheduler's state and its two functions: `decide` and `apply`.
//!
//! `decide(now, command)` reads the state and returns the events the command
//! leads to (or a rejection); it never changes anything. `apply(event)`
//! changes the state and returns effects for the host. Only `apply` mutates,
//! and it reads nothing but the state and the event (the event carries its
//! decision time), so replaying a journal rebuilds exactly the state the live
//! master had. Every collection is ordered (`BTreeMap`/`BTreeSet`), so the
//! same events give the same choices on every machine and in every build.
//!
//! # Job lifecycle
//!
//! `queued -> running -> succeeded | failed | cancelled | dead`. A failed
//! attempt whose code is in [`RETRYABLE_CODES`] goes back to `queued` after
//! an exponential backoff until `max_attempts` attempts have been made; then
//! the job is `dead` (dead-lettered). Any other failure (the job's own
//! `job_error`, an oversized result) makes it `failed` at once. A running
//! attempt holds a lease of `timeout_ms + lease_grace_ms`; when it lapses, or
//! its worker is lost, the attempt fails with `lease_expired` / `worker_lost`.
//! Only the report of the current attempt from the worker that holds it is
//! recorded, so each job has exactly one outcome.
//!
//! A [`Command::Bulk`] cancels, or retries, every job a [`JobFilter`]
//! matches (at most [`BULK_MAX`](crate::limits::BULK_MAX)) in one decision: one event per job, all
//! in one batch. A retry (`Retried`) moves a failed, dead or cancelled job
//! back to `queued` with its attempts kept and its limit raised by the
//! attempts granted; the outcome it had is cleared.
//!
//! # One job per submission
//!
//! Every `Submit` carries a [`RequestId`] drawn by the node where the
//! client's request arrived, and the same id travels with every forward
//! and retry of that request. The master remembers the id of each
//! submission that created a job, with the job's id and the decision time;
//! a `Submit` whose id it remembers creates nothing and gets the reply the
//! first one got. So a node may send a submission again whenever it does
//! not know whether the master acted (a timeout, a dropped connection, a
//! master that died: the next one adopted the journal and with it the
//! table), and one client request is never two jobs. Idempotency keys are
//! the client's version of the same idea, across its own retries; request
//! ids are internal and never shown.
//!
//! The table is state like any other: filled by `Submitted` events, kept in
//! snapshots, rebuilt identically by replay; it holds a batch's ids as one
//! run (`requests::Requests`). An id is remembered for at
//! least [`REQUEST_TTL_MS`](crate::limits::REQUEST_TTL_MS) after its decision (far longer than a node
//! retries one request: [`REQUEST_TTL_MS`](crate::limits::REQUEST_TTL_MS) explains) and for at most
//! [`REQUESTS_MAX`](crate::limits::REQUESTS_MAX) submissions (the oldest are forgotten first beyond it).
//!
//! # Keys
//!
//! A submission's [`JobOptions`] may name a key with limits ([`KeyLimit`]:
//! at most `running_max` attempts of the key's jobs at once, at most
//! `starts_per_second` started in any [`RATE_WINDOW_MS`](crate::limits::RATE_WINDOW_MS)) and a uniqueness
//! key ([`Unique`]: a submission whose key a job submitted less than
//! `window_ms` earlier holds gets that job). Each limited key has its own
//! line of ready jobs; the lines a poll walks (`ready` and the lines per
//! namespace and needs) hold only the unkeyed jobs and the first of each
//! key's line (`Index::enqueue`), so a poll looks at one job per waiting
//! key (`Master::startable`). Start times and uniqueness holds are state
//! (they outlive their jobs); the events that add them also forget up to
//! `FORGET_PER_EVENT` ended ones, so no `apply` does unbounded work.
//!
//! # Bounds
//!
//! Queued jobs are bounded by `queue_max` (`queue_full` beyond it); inputs,
//! results, checkpoints and log tails have size limits; a job writes at most
//! [`OUTPUTS_MAX`](crate::limits::OUTPUTS_MAX) output blobs, of which the
//! master keeps names, digests and sizes only; finished jobs are
//! purged after `retention_ms`, beyond `finished_max`, or when their results
//! (with their output blobs' names and digests) exceed
//! `results_bytes_total_max`, oldest first; request ids as above;
//! module names at most [`MODULE_NAMES_MAX`](crate::limits::MODULE_NAMES_MAX),
//! each keeping its newest
//! [`MODULE_VERSIONS_KEPT`](crate::limits::MODULE_VERSIONS_KEPT) versions.
//! Finished jobs, most of the state, are held packed (`Done`): the
//! bytes a snapshot holds for each, unpacked when one is read, retried or
//! purged. `apply` packs the jobs an event finished as its last step.
//! `Tick` emits at most [`TICK_EVENTS_MAX`](crate::limits::TICK_EVENTS_MAX) events so no single batch is
//! unbounded, a `Bulk` at most [`BULK_MAX`](crate::limits::BULK_MAX); a listing scans at most
//! [`LIST_SCAN_MAX`](crate::limits::LIST_SCAN_MAX) jobs and says where to go on.
//!
//! # Where the rest lives
//!
//! This module holds the state and the two entry points, whose matches
//! only dispatch; each concern is a module of its own, adding to
//! `impl Master`: `jobs` (submitting, cancelling, settling, purging),
//! `attempts` (assigning, checkpoints, reports, retries), `workers`,
//! `tick` (the periodic sweep), `keys` (concurrency and rate limits),
//! `uniqueness`, `requests`, [`crate::schedule`], [`crate::dag`],
//! [`crate::deployments`] (module names), `grants` (egress grants,
//! secrets and calls), [`crate::tapes`] (recorded calls),
//! [`crate::blobs`] (the digests of the blobs jobs read and write),
//! [`crate::locality`] (what workers hold, and which poll a job waits
//! for), [`crate::pools`] (which worker fits a job),
//! [`crate::namespaces`] (whose a job is, and what a confined caller
//! sees), [`crate::quotas`] (how much one namespace may hold),
//! [`crate::shares`] (each namespace's fair share of the workers), `bulk`,
//! `tokens`, `query` and `scan` (reads), `index` (what is rebuilt, not
//! kept), `done` (finished jobs packed), `snapshot` and `restore`, and
//! `validation` (what commands may ask for).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::index::Order;
pub use crate::restore::Restoring;
pub use crate::snapshot::{SNAPSHOT_VERSION, SnapshotCursor};
pub use crate::tokens::TOKEN_SCOPES;

use crate::blobs::{Blobs, Registry};
use crate::dag::Dags;
use crate::deployments::Deployments;
use crate::done::Done;
use crate::grants::Egress;
use crate::index::Index;
use crate::keys::Keyed;
use crate::locality::Locality;
use crate::pools::Pools;
use crate::protocol::*;
use crate::requests::Requests;
use crate::schedule::Schedule;
use crate::tapes::Tapes;
use crate::validation::validate_config;
use crate::workers::Worker;

/// A job's record: what a snapshot holds for it, field for field (the
/// order is the format; [`Done`] reads some fields in place).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Job {
    pub(crate) spec: JobSpec,
    pub(crate) state: JobState,
    pub(crate) submitted_at: Millis,
    pub(crate) finished_at: Option<Millis>,
    pub(crate) not_before: Option<Millis>,
    pub(crate) lease_until: Option<Millis>,
    /// Position in the FIFO of its priority.
    pub(crate) seq: u64,
    pub(crate) attempts: Vec<Attempt>,
    pub(crate) error: Option<Failure>,
    pub(crate) result: Option<Vec<u8>>,
    pub(crate) checkpoint: Option<Vec<u8>>,
}

/// The master's whole state.
///
/// Its snapshot form (see [`Master::snapshot`]) starts with what
/// `postcard` makes of the fields up to `retries_total` as one struct, in
/// which `jobs` and `done` are one map of every job by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Master {
    pub(crate) config: Config,
    pub(crate) next_id: JobId,
    pub(crate) next_seq: u64,
    /// Unfinished jobs; a job that finishes moves to `done` at the end of
    /// the [`apply`](Master::apply) that finished it.
    pub(crate) jobs: BTreeMap<JobId, Box<Job>>,
    /// Finished jobs, packed (see [`Done`]).
    pub(crate) done: BTreeMap<JobId, Done>,
    pub(crate) workers: BTreeMap<String, Worker>,
    pub(crate) submitted_total: u64,
    pub(crate) attempts_total: u64,
    pub(crate) retries_total: u64,
    /// API tokens by id; written after the rest in a snapshot (see
    /// [`SNAPSHOT_VERSION`]).
    pub(crate) tokens: BTreeMap<String, TokenRecord>,
    /// Request ids of the submissions that created a job (see the module
    /// notes), in runs (see [`Requests`]); written after the tokens in a
    /// snapshot, as a map.
    pub(crate) requests: Requests,
    /// Keys, limits and uniqueness (see [`Keyed`]); written after the
    /// request ids in a snapshot.
    pub(crate) keyed: Keyed,
    /// Schedules by name (see [`crate::schedule`]); written after the keys
    /// in a snapshot.
    pub(crate) schedules: BTreeMap<String, Schedule>,
    /// DAGs (see [`crate::dag`]); written after the schedules in a
    /// snapshot.
    pub(crate) dags: Dags,
    /// Module names and the jobs submitted by one (see
    /// [`crate::deployments`]); written after the DAGs in a snapshot.
    pub(crate) deployments: Deployments,
    /// Grants by deployment name and calls by job (see
    /// [`crate::grants`]); written after the deployments in a snapshot.
    pub(crate) egress: Egress,
    /// Each job's recorded calls (see [`crate::tapes`]); written after the
    /// grants in a snapshot.
    pub(crate) tapes: Tapes,
    /// Each job's input and output blobs, digests and sizes (see
    /// [`crate::blobs`]); written after the recorded calls in a snapshot.
    pub(crate) blobs: Blobs,
    /// The blobs the cluster keeps (see [`crate::blobs`]); written after
    /// the jobs' blobs in a snapshot.
    pub(crate) registry: Registry,
    /// What workers hold and when blob jobs joined the line (see
    /// [`crate::locality`]); written after the blobs kept in a snapshot.
    pub(crate) locality: Locality,
    /// Workers' labels and memory (see [`crate::pools`]); written after
    /// what workers hold in a snapshot.
    pub(crate) pools: Pools,
    /// The jobs of namespaces other than the default (see
    /// [`crate::namespaces`]); written after the pools in a snapshot.
    pub(crate) namespaces: crate::namespaces::Namespaces,
    /// Namespaces' quotas (see [`crate::quotas`]); written after the
    /// namespaces in a snapshot.
    pub(crate) quotas: crate::quotas::QuotaBook,
    /// Namespaces' weights and virtual times (see [`crate::shares`]);
    /// written after the quotas in a snapshot.
    pub(crate) shares: crate::shares::Shares,
    // Indexes, rebuilt from the jobs on restore (not in snapshots).
    pub(crate) index: Index,
    /// How runnable jobs are lined up: a property of the master build, not
    /// of its state (not in snapshots; see [`Order`]).
    pub(crate) order: Order,
}

impl Default for Master {
    fn default() -> Self {
        Self::new()
    }
}

pub(crate) fn reject<T>(code: Code, message: impl Into<String>) -> Result<T, Rejection> {
    Err(Rejection::new(code, message))
}

/// The refusal of a job id the master does not hold (never was, or, to
/// a caller confined to another namespace, not its own: the same words).
pub(crate) fn no_job(id: JobId) -> Rejection {
    Rejection::new(codes::JOB_NOT_FOUND, format!("no job {id}"))
}

/// A decision of `kinds`, each an event at `now`, with the plain reply.
pub(crate) fn decided(now: Millis, kinds: Vec<EventKind>) -> Result<Decision, Rejection> {
    Ok(Decision {
        events: kinds
            .into_iter()
            .map(|kind| Event { at: now, kind })
            .collect(),
        reply: Reply::Done,
    })
}

impl Master {
    /// An empty master with the default [`Config`].
    pub fn new() -> Self {
        Self {
            config: Config::default(),
            next_id: 1,
            next_seq: 0,
            jobs: BTreeMap::new(),
            done: BTreeMap::new(),
            workers: BTreeMap::new(),
            submitted_total: 0,
            attempts_total: 0,
            retries_total: 0,
            tokens: BTreeMap::new(),
            requests: Requests::default(),
            keyed: Keyed::default(),
            schedules: BTreeMap::new(),
            dags: Dags {
                next: 1,
                ..Dags::default()
            },
            deployments: Deployments::default(),
            egress: Egress::default(),
            tapes: Tapes::default(),
            blobs: Blobs::default(),
            registry: Registry::default(),
            locality: Locality::default(),
            pools: Pools::default(),
            namespaces: Default::default(),
            quotas: Default::default(),
            shares: Default::default(),
            index: Index::default(),
            order: Order::default(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn queued(&self) -> u64 {
        self.index.counts[JobState::Queued as usize]
    }

    /// Job `id`, finished (unpacked) or not.
    pub(crate) fn find(&self, id: JobId) -> Option<Cow<'_, Job>> {
        match self.jobs.get(&id) {
            Some(job) => Some(Cow::Borrowed(job)),
            None => self.done.get(&id)?.unpack().map(Cow::Owned),
        }
    }

    /// The state of job `id`, without unpacking it.
    pub(crate) fn state_of(&self, id: JobId) -> Option<JobState> {
        match self.jobs.get(&id) {
            Some(job) => Some(job.state),
            None => Some(self.done.get(&id)?.state()),
        }
    }

    /// Whether job `id` is held, finished or not.
    pub(crate) fn holds(&self, id: JobId) -> bool {
        self.jobs.contains_key(&id) || self.done.contains_key(&id)
    }

    pub(crate) fn job(&self, id: JobId) -> Result<Cow<'_, Job>, Rejection> {
        match self.find(id) {
            Some(job) => Ok(job),
            None if id > 0 && id < self.next_id => reject(
                codes::JOB_EXPIRED,
                format!(
                    "job {id} finished and its record was removed (after the retention time, or with its input blob)"
                ),
            ),
            None => Err(no_job(id)),
        }
    }

    /// What `command` at time `now` leads to; changes nothing.
    pub fn decide(&self, now: Millis, command: &Command) -> Result<Decision, Rejection> {
        match command {
            Command::Configure(config) => self.decide_configure(now, config),
            Command::Submit {
                spec,
                request,
                options,
            } => self.decide_submit(now, spec, *request, options),
            Command::Bulk { action, filter } => self.decide_bulk(now, *action, filter),
            Command::Cancel { id } => self.decide_cancel(now, *id),
            Command::Poll {
                worker,
                slots,
                free,
                holds,
                pool,
            } => self.decide_poll(now, worker, *slots, *free, (holds, pool)),
            Command::Checkpoint {
                id,
                attempt,
                data,
                mark,
            } => self.decide_checkpoint(now, *id, *attempt, data, mark.as_ref()),
            Command::Finish {
                id,
                attempt,
                worker,
                outcome,
                duration_ms,
                log_tail,
                calls,
                calls_dropped,
                usage,
            } => self.decide_finish(
                now,
                (*id, *attempt, worker),
                outcome,
                (*duration_ms, *usage),
                log_tail,
                (calls, *calls_dropped),
            ),
            Command::WorkerGone { worker } => self.decide_worker_gone(now, worker),
            Command::Renew { worker, attempts } => self.decide_renew(now, worker, attempts),
            Command::SetQuotas { namespace, quotas } => {
                self.decide_set_quotas(now, namespace, quotas)
            }
            Command::SetWeight { namespace, weight } => {
                self.decide_set_weight(now, namespace, *weight)
            }
            Command::Tick => self.decide_tick(now),
            Command::CreateToken(record) => self.decide_create_token(now, record),
            Command::RevokeToken { id } => self.decide_revoke_token(now, id),
            Command::CreateSchedule(spec) => self.decide_create_schedule(now, spec),
            Command::PauseSchedule { name, paused } => {
                self.decide_pause_schedule(now, name, *paused)
            }
            Command::DeleteSchedule { name } => self.decide_delete_schedule(now, name),
            Command::Backfill { name, from, to } => self.decide_backfill(now, name, *from, *to),
            Command::ScheduleIn {
                namespace,
                name,
                action,
            } => self.decide_schedule_in(now, namespace.as_deref(), name, action),
            Command::SubmitDag(spec) => self.decide_dag(now, spec),
            Command::Deploy { name, digest } => self.decide_deploy(now, name, digest),
            Command::Rollback { name, to } => self.decide_rollback(now, name, *to),
            Command::Undeploy { name } => self.decide_undeploy(now, name),
            Command::Grant {
                name,
                grants,
                secrets,
            } => self.decide_grant(now, name, grants, secrets),
            Command::Revoke {
                name,
                grants,
                secrets,
            } => self.decide_revoke(now, name, grants, secrets),
            Command::SetSecret { name, sealed } => self.decide_set_secret(now, name, sealed),
            Command::DeleteSecret { name } => self.decide_delete_secret(now, name),
            Command::RecordCall { id, attempt, call } => {
                self.decide_record_call(now, *id, *attempt, call)
            }
            Command::KeepBlob { blob } => self.decide_keep_blob(now, blob),
            Command::DropBlob { digest } => self.decide_drop_blob(now, digest),
            Command::PurgeBlob { digest } => self.decide_purge_blob(now, digest),
        }
    }

    fn decide_configure(&self, now: Millis, config: &Config) -> Result<Decision, Rejection> {
        validate_config(config)?;
        if *config == self.config {
            return decided(now, Vec::new());
        }
        decided(now, vec![EventKind::Configured(config.clone())])
    }

    /// Applies one event; returns what the host must do about it. The
    /// jobs it finished are packed last (see `Done`).
    pub fn apply(&mut self, event: &Event) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.apply_into(event, &mut effects);
        effects
    }

    /// [`apply`](Self::apply), adding the effects to `effects` (a replay
    /// of many events reuses one vector).
    pub fn apply_into(&mut self, event: &Event, effects: &mut Vec<Effect>) {
        let from = effects.len();
        self.apply_event(event, effects);
        if !self.index.dirty.is_empty() {
            self.rekey();
        }
        for effect in &effects[from..] {
            if let Effect::Settled { id, .. } = *effect {
                self.pack(id);
            }
        }
    }

    fn apply_event(&mut self, event: &Event, effects: &mut Vec<Effect>) {
        let at = event.at;
        match &event.kind {
            EventKind::Configured(config) => self.apply_configured(config),
            EventKind::TokenCreated(record) => self.apply_token_created(record),
            EventKind::TokenRevoked { id } => self.apply_token_revoked(id),
            EventKind::Submitted {
                id,
                spec,
                request,
                options,
            } => self.apply_submitted(*id, spec, *request, options, at, effects),
            EventKind::ScheduleCreated { spec, next } => {
                self.apply_schedule_created(spec, *next, at)
            }
            EventKind::ScheduleFired {
                name,
                tick,
                id,
                next,
            } => self.apply_schedule_fired(name, *tick, *id, *next, at, effects),
            EventKind::ScheduleSkipped { name, next, .. } => {
                self.apply_schedule_skipped(name, *next)
            }
            EventKind::ScheduleBuffered { name, tick, next } => {
                self.apply_schedule_buffered(name, *tick, *next)
            }
            EventKind::ScheduleMissed {
                name,
                from,
                to,
                next,
            } => self.apply_schedule_missed(name, *from, *to, *next),
            EventKind::SchedulePaused { name, paused, next } => {
                self.apply_schedule_paused(name, *paused, *next)
            }
            EventKind::ScheduleBackfilled { name, from, to } => {
                self.apply_schedule_backfilled(name, *from, *to)
            }
            EventKind::ScheduleDeleted { name } => self.apply_schedule_deleted(name, at),
            EventKind::DagCreated {
                dag,
                on_failure,
                nodes,
                request,
                idempotency_key,
            } => self.apply_dag_created(
                *dag,
                *on_failure,
                nodes,
                *request,
                idempotency_key,
                at,
                effects,
            ),
            EventKind::RequestsExpired { before } => self.apply_requests_expired(*before),
            EventKind::Assigned {
                id,
                attempt,
                worker,
                lease_until,
            } => self.apply_assigned(*id, *attempt, worker, *lease_until, at, effects),
            EventKind::Checkpointed { id, attempt, data } => {
                self.apply_checkpointed(*id, *attempt, data)
            }
            EventKind::Finished {
                id,
                attempt,
                outcome,
                duration_ms,
                log_tail,
                usage,
            } => self.apply_finished(
                (*id, *attempt),
                outcome,
                (*duration_ms, *usage),
                log_tail,
                at,
                effects,
            ),
            EventKind::Expired { id, attempt, code } => {
                self.apply_expired(*id, *attempt, code, at, effects)
            }
            EventKind::Cancelled { id } => self.cancel(*id, None, at, effects),
            EventKind::Released { id } => self.apply_released(*id, at, effects),
            EventKind::WorkerSeen { worker, slots } => self.apply_worker_seen(worker, *slots, at),
            EventKind::WorkerLost { worker } => self.apply_worker_lost(worker, at, effects),
            EventKind::Retried { id, max_attempts } => {
                self.apply_retried(*id, *max_attempts, at, effects)
            }
            EventKind::Purged { id } => self.apply_purged(*id, at),
            EventKind::Deployed {
                name,
                digest,
                version,
                rollback_of,
            } => self.apply_deployed(name, digest, *version, *rollback_of, at),
            EventKind::Undeployed { name } => self.apply_undeployed(name),
            EventKind::Granted { name, grants } => self.apply_granted(name, grants),
            EventKind::SecretSet { name, sealed } => self.apply_secret_set(name, sealed, at),
            EventKind::SecretDeleted { name } => self.apply_secret_deleted(name),
            EventKind::CallsRecorded {
                id,
                attempt,
                calls,
                dropped,
            } => self.apply_calls_recorded(*id, *attempt, calls, *dropped),
            EventKind::CallRecorded { id, attempt, call } => {
                self.apply_call_recorded(*id, *attempt, call)
            }
            EventKind::SecretsShared { name, secrets } => self.apply_secrets_shared(name, secrets),
            EventKind::TapeMarked { id, attempt, mark } => {
                self.apply_tape_marked(*id, *attempt, mark)
            }
            EventKind::BlobKept { blob } => self.apply_blob_kept(blob, at),
            EventKind::BlobDropped { digest } => self.apply_blob_dropped(digest),
            EventKind::BlobPurged { digest } => self.apply_blob_purged(digest, at),
            EventKind::BlobsCollected { digests } => self.apply_blobs_collected(digests),
            EventKind::WorkerHolds { worker, holds } => self.apply_worker_holds(worker, holds),
            EventKind::WorkerPool { worker, pool } => self.apply_worker_pool(worker, pool),
            EventKind::Renewed { leases } => self.apply_renewed(leases),
            EventKind::QuotasSet { namespace, quotas } => {
                self.apply_quotas_set(namespace, quotas, at)
            }
            EventKind::WeightSet { namespace, weight } => self.apply_weight_set(namespace, *weight),
        }
    }

    fn apply_configured(&mut self, config: &Config) {
        self.config = config.clone();
    }
}
