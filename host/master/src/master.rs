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
//! matches (at most [`BULK_MAX`]) in one decision: one event per job, all
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
//! least [`REQUEST_TTL_MS`] after its decision (far longer than a node
//! retries one request: [`REQUEST_TTL_MS`] explains) and for at most
//! [`REQUESTS_MAX`] submissions (the oldest are forgotten first beyond it).
//!
//! # Keys
//!
//! A submission's [`JobOptions`] may name a key with limits ([`KeyLimit`]:
//! at most `running_max` attempts of the key's jobs at once, at most
//! `starts_per_second` started in any [`RATE_WINDOW_MS`]) and a uniqueness
//! key ([`Unique`]: a submission whose key a job submitted less than
//! `window_ms` earlier holds gets that job). Each limited key has its own
//! line of ready jobs; `ready` holds only the unkeyed jobs and the first of
//! each line (`Index::enqueue`), so a poll looks at one job per waiting
//! key (`Master::startable`). Start times and uniqueness holds are state
//! (they outlive their jobs); the events that add them also forget up to
//! `FORGET_PER_EVENT` ended ones, so no `apply` does unbounded work.
//!
//! # Bounds
//!
//! Queued jobs are bounded by `queue_max` (`queue_full` beyond it); inputs,
//! results, checkpoints and log tails have size limits; finished jobs are
//! purged after `retention_ms`, beyond `finished_max`, or when their results
//! exceed `results_bytes_total_max`, oldest first; request ids as above.
//! Finished jobs, most of the state, are held packed ([`Done`]): the
//! bytes a snapshot holds for each, unpacked when one is read, retried or
//! purged. `apply` packs the jobs an event finished as its last step.
//! `Tick` emits at most [`TICK_EVENTS_MAX`] events so no single batch is
//! unbounded, a `Bulk` at most [`BULK_MAX`]; a listing scans at most
//! [`LIST_SCAN_MAX`] jobs and says where to go on.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::dag::{self, Dag, Dags, Node};
use crate::protocol::*;
use crate::requests::{Request, Requests};
use crate::schedule::{
    self, BACKFILL_TICKS_MAX, LATE_GRACE_MS, SCHEDULES_MAX, Schedule, TICKS_PER_TICK_MAX,
};

/// Most events one `Tick` produces; the rest wait for the next tick.
pub const TICK_EVENTS_MAX: usize = 4096;
/// Bytes of an attempt's log kept (its end).
pub const LOG_TAIL_BYTES_MAX: usize = 4096;
/// Longest idempotency key.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 256;
/// Longest worker id.
pub const WORKER_ID_BYTES_MAX: usize = 256;
/// A polling worker is journaled as seen this many times per worker TTL
/// (not on every poll), so it is never lost while it polls.
pub const WORKER_SEEN_PER_TTL: u64 = 4;
/// Most jobs one listing returns.
pub const LIST_LIMIT_MAX: u32 = 1000;
/// Most jobs one [`Command::Bulk`] changes (run it again for the rest).
pub const BULK_MAX: usize = 10_000;
/// Longest text a [`JobFilter`] looks for in errors.
pub const FILTER_TEXT_BYTES_MAX: usize = 256;
/// Most ids a [`JobFilter`] may name.
pub const FILTER_IDS_MAX: usize = 1000;
/// Most finished jobs one [`Query::Recent`] looks at.
pub const RECENT_SCAN_MAX: usize = 100_000;
/// Most ids one [`Query::Finished`] may ask about: the API's most jobs
/// per batch, so a client may wait for a whole batch in one request.
pub const FINISHED_IDS_MAX: usize = 10_000;
/// Longest duration a configuration may set (a year).
pub const CONFIG_DURATION_MS_MAX: u64 = 365 * 24 * 3_600_000;
/// Largest `attempts_max` a configuration may set.
pub const ATTEMPTS_MAX_MAX: u32 = 10_000;
/// Most API tokens kept.
pub const TOKENS_MAX: usize = 10_000;
/// Longest token id.
pub const TOKEN_ID_BYTES_MAX: usize = 64;
/// Longest token name.
pub const TOKEN_NAME_BYTES_MAX: usize = 256;
/// The scopes a token may carry.
pub const TOKEN_SCOPES: [&str; 3] = ["read", "submit", "admin"];
/// Version byte of snapshots: the state, then API tokens, then request
/// ids, then what keys hold. Older snapshots are still read: version 3 (no
/// keys), version 2 (tokens, no request ids) and version 1 (the state
/// alone, from before tokens existed).
pub const SNAPSHOT_VERSION: u8 = 5;
/// Longest concurrency, rate or uniqueness key.
pub const KEY_BYTES_MAX: usize = 256;
/// Largest `running_max` and `starts_per_second` a key limit may ask for.
pub const KEY_LIMIT_MAX: u32 = 10_000;
/// The window a key's `starts_per_second` counts starts in.
pub const RATE_WINDOW_MS: Millis = 1_000;
/// Longest uniqueness window (30 days).
pub const UNIQUE_WINDOW_MS_MAX: Millis = 30 * 24 * 3_600_000;
/// Most uniqueness keys held at once (`unique_keys_full` beyond, until
/// windows end).
pub const UNIQUE_KEYS_MAX: usize = 1_000_000;
/// Ended uniqueness holds and idle rate windows forgotten per event that
/// adds one: they go faster than they come, and no event does unbounded
/// work.
const FORGET_PER_EVENT: usize = 8;
/// How long after its decision a submission's request id is remembered at
/// least. A node sends a request again only within `PROXY_WAIT` (10 s) of
/// sending it first, so the resend is decided seconds after the first
/// copy, unless the master is frozen in between: one paused for longer
/// than the failure detector allows is replaced, and its late decisions
/// never commit. Five minutes leaves a wide margin. (A lone back-end node,
/// which nobody replaces, frozen for longer than this between deciding a
/// submission and deciding its resend would make a second job.)
pub const REQUEST_TTL_MS: Millis = 5 * 60_000;
/// Expired request ids are forgotten together, once the oldest is this far
/// past [`REQUEST_TTL_MS`]: one event per period under steady load, not
/// one per tick.
pub const REQUEST_PURGE_PERIOD_MS: Millis = 10_000;
/// Most request ids remembered; beyond, the oldest is forgotten at each new
/// submission. At the highest submission rate measured (about 100,000 per
/// second in bursts, BENCHMARKS.md) this still covers 10 s, as long as a
/// node resends one request; at sustained rates (about 10,000 per second),
/// 100 s. Full, the table takes about 125 MiB if every id came alone (a
/// run each, a little more than the 110 MiB measured for one map entry
/// per id) and a few MiB if they came in batches (`requests::Requests`).
pub const REQUESTS_MAX: usize = 1_000_000;

/// Most jobs one listing looks at (a filtered listing returns a cursor to
/// continue rather than scanning everything).
pub const LIST_SCAN_MAX: usize = 100_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Job {
    spec: JobSpec,
    state: JobState,
    submitted_at: Millis,
    finished_at: Option<Millis>,
    not_before: Option<Millis>,
    lease_until: Option<Millis>,
    /// Position in the FIFO of its priority.
    seq: u64,
    attempts: Vec<Attempt>,
    error: Option<Failure>,
    result: Option<Vec<u8>>,
    checkpoint: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Worker {
    slots: u32,
    last_seen: Millis,
    running: BTreeSet<JobId>,
}

/// The master's whole state.
///
/// Its snapshot form (see [`Master::snapshot`]) starts with what
/// `postcard` makes of the fields up to `retries_total` as one struct, in
/// which `jobs` and `done` are one map of every job by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Master {
    config: Config,
    next_id: JobId,
    next_seq: u64,
    /// Unfinished jobs; a job that finishes moves to `done` at the end of
    /// the [`apply`](Master::apply) that finished it.
    jobs: BTreeMap<JobId, Box<Job>>,
    /// Finished jobs, packed (see [`Done`]).
    done: BTreeMap<JobId, Done>,
    workers: BTreeMap<String, Worker>,
    submitted_total: u64,
    attempts_total: u64,
    retries_total: u64,
    /// API tokens by id; written after the rest in a snapshot (see
    /// [`SNAPSHOT_VERSION`]).
    tokens: BTreeMap<String, TokenRecord>,
    /// Request ids of the submissions that created a job (see the module
    /// notes), in runs (see [`Requests`]); written after the tokens in a
    /// snapshot, as a map.
    requests: Requests,
    /// Keys, limits and uniqueness (see [`Keyed`]); written after the
    /// request ids in a snapshot.
    pub(crate) keyed: Keyed,
    /// Schedules by name (see [`crate::schedule`]); written after the keys
    /// in a snapshot.
    schedules: BTreeMap<String, Schedule>,
    /// DAGs (see [`crate::dag`]); written after the schedules in a
    /// snapshot.
    dags: Dags,
    // Indexes, rebuilt from the jobs on restore (not in snapshots).
    pub(crate) index: Index,
    /// How runnable jobs are lined up: a property of the master build, not
    /// of its state (not in snapshots; see [`Order`]).
    order: Order,
}

/// A finished job, packed: its state's number (its place in
/// [`JobState::ALL`]), then its record as `postcard` bytes (exactly the
/// bytes a snapshot holds for it), in one allocation. Finished jobs are
/// most of what a master holds (a million by default), never change again
/// until they are purged or retried, and are read one at a time; packed,
/// one takes about a third of the memory it takes as a [`Job`] in a map
/// (BENCHMARKS.md, "Finished jobs packed"), and its map entry is a
/// pointer and a length.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Done {
    packed: Box<[u8]>,
}

impl Done {
    fn pack(job: &Job) -> Done {
        let packed =
            postcard::to_extend(job, Self::state_byte(job)).expect("postcard encoding into a Vec");
        Done {
            packed: packed.into(),
        }
    }

    /// `job` as `record`, its postcard bytes.
    fn of(job: &Job, record: &[u8]) -> Done {
        let mut packed = Vec::with_capacity(1 + record.len());
        packed.extend_from_slice(&Self::state_byte(job));
        packed.extend_from_slice(record);
        Done {
            packed: packed.into(),
        }
    }

    /// The state's number: its place in [`JobState::ALL`], as the index's
    /// counts number it.
    fn state_byte(job: &Job) -> Vec<u8> {
        vec![job.state as u8]
    }

    fn state(&self) -> JobState {
        JobState::ALL[usize::from(self.packed[0])]
    }

    /// The job's record, as a snapshot holds it.
    fn record(&self) -> &[u8] {
        &self.packed[1..]
    }

    /// When the job was submitted, read in place.
    fn submitted_at(&self) -> Option<Millis> {
        let (head, _): (PackedHead, _) = postcard::take_from_bytes(self.record()).ok()?;
        Some(head.submitted_at)
    }

    /// The job. The bytes were encoded by [`Done::pack`] or checked when
    /// their snapshot was restored, so decoding them fails only if memory
    /// was corrupted; such a job reads as gone (on every replica alike).
    fn unpack(&self) -> Option<Job> {
        postcard::from_bytes(self.record()).ok()
    }

    /// Its [`Facts`], read in place (`None` only as [`Done::unpack`]).
    fn facts(&self) -> Option<Facts<'_>> {
        let (packed, _): (Packed, _) = postcard::take_from_bytes(self.record()).ok()?;
        Some(Facts {
            state: packed.state,
            module: packed.spec.module,
            priority: packed.spec.priority,
            submitted_at: packed.submitted_at,
            finished_at: packed.finished_at,
            attempts: packed.attempts.len() as u32,
            error: packed.error.map(|e| (e.code, e.message)),
        })
    }
}

/// The fields of [`Master`] before its jobs, as its snapshot holds them.
#[derive(Serialize)]
struct HeadRef<'a> {
    config: &'a Config,
    next_id: JobId,
    next_seq: u64,
}

#[derive(Deserialize)]
struct Head {
    config: Config,
    next_id: JobId,
    next_seq: u64,
}

/// The fields of [`Master`] after its jobs, as its snapshot holds them.
#[derive(Serialize)]
struct TailRef<'a> {
    workers: &'a BTreeMap<String, Worker>,
    submitted_total: u64,
    attempts_total: u64,
    retries_total: u64,
}

#[derive(Deserialize)]
struct Tail {
    workers: BTreeMap<String, Worker>,
    submitted_total: u64,
    attempts_total: u64,
    retries_total: u64,
}

/// How the master lines runnable jobs up for workers: the one scheduling
/// policy a master build may choose without changing its state or events.
///
/// The line is an index rebuilt from the jobs, never journaled or
/// snapshotted, so two builds that differ only here read each other's
/// snapshots and journals and reach byte-identical states: one can be
/// switched for the other on a running cluster (`cohort master upgrade`),
/// and what changes is which job the next poll hands out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// Highest priority first, first come first served within a priority
    /// (the built-in master).
    #[default]
    Priority,
    /// First come first served, whatever the priority.
    Fifo,
}

/// What jobs submitted with [`JobOptions`] leave behind. Holds and start
/// times outlive the jobs (a purged job's key still holds for its window,
/// its starts still count for a second), so they are state, not index.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Keyed {
    /// The options of every job submitted with some.
    pub(crate) options: BTreeMap<JobId, JobOptions>,
    /// Uniqueness keys: the job holding each, and until when.
    pub(crate) uniques: BTreeMap<String, Hold>,
    /// Start times of the latest attempts per limited key, oldest first
    /// (at most [`KEY_LIMIT_MAX`], the highest rate one may ask for).
    pub(crate) starts: BTreeMap<String, VecDeque<Millis>>,
}

impl Keyed {
    /// The limit job `id` was submitted with.
    fn limit(&self, id: JobId) -> Option<&KeyLimit> {
        self.options.get(&id)?.limit.as_ref()
    }

    /// The key of job `id`'s limit.
    fn key(&self, id: JobId) -> Option<&str> {
        self.limit(id).map(|limit| limit.key.as_str())
    }
}

/// A uniqueness key's job and the end of its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Hold {
    job: JobId,
    until: Millis,
}

/// A runnable job's place in line: (-priority, seq, id).
pub(crate) type Place = (i64, u64, JobId);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Index {
    /// Runnable jobs without a key limit, and the first in line of each
    /// limited key.
    pub(crate) ready: BTreeSet<Place>,
    /// Runnable jobs per limited key, in line.
    pub(crate) key_ready: BTreeMap<String, BTreeSet<Place>>,
    /// Running attempts per limited key.
    pub(crate) key_running: BTreeMap<String, u32>,
    /// Uniqueness holds by their end: (until, key).
    unique_until: BTreeSet<(Millis, String)>,
    /// Limited keys by their latest start: (at, key).
    latest_start: BTreeSet<(Millis, String)>,
    /// Jobs backing off: (not_before, id).
    delayed: BTreeSet<(Millis, JobId)>,
    /// Running attempts: (lease_until, id).
    leases: BTreeSet<(Millis, JobId)>,
    /// Finished jobs: (finished_at, id).
    finished: BTreeSet<(Millis, JobId)>,
    keys: BTreeMap<String, JobId>,
    counts: [u64; JobState::COUNT],
    result_bytes: u64,
    /// Jobs held per module.
    modules: BTreeMap<Digest, u64>,
    /// The schedule that fired each unfinished job a schedule fired.
    fired_by: BTreeMap<JobId, String>,
}

impl Index {
    /// Counts a finished job in, as [`Master::rebuild_index`] counts in an
    /// unfinished one.
    fn add_done(&mut self, id: JobId, job: &Job) {
        self.counts[job.state as usize] += 1;
        *self.modules.entry(job.spec.module).or_default() += 1;
        if let Some(key) = &job.spec.idempotency_key {
            self.keys.insert(key.clone(), id);
        }
        self.finished.insert((job.finished_at.unwrap_or(0), id));
        self.result_bytes += job.result.as_ref().map_or(0, |r| r.len() as u64);
    }

    /// Puts a runnable job in line: in [`ready`](Self::ready), or in its
    /// key's line (and in `ready` if it is now that line's first).
    fn enqueue(&mut self, place: Place, key: Option<&str>) {
        let Some(key) = key else {
            self.ready.insert(place);
            return;
        };
        let line = self.key_ready.entry(key.to_owned()).or_default();
        let first = line.first().copied();
        line.insert(place);
        if first.is_none_or(|first| place < first) {
            if let Some(first) = first {
                self.ready.remove(&first);
            }
            self.ready.insert(place);
        }
    }

    /// Takes a job out of line (the next of its key's line moves up).
    fn dequeue(&mut self, place: Place, key: Option<&str>) {
        let Some(key) = key else {
            self.ready.remove(&place);
            return;
        };
        let Some(line) = self.key_ready.get_mut(key) else {
            return;
        };
        line.remove(&place);
        if self.ready.remove(&place)
            && let Some(&next) = line.first()
        {
            self.ready.insert(next);
        }
        if line.is_empty() {
            self.key_ready.remove(key);
        }
    }
}

impl Default for Master {
    fn default() -> Self {
        Self::new()
    }
}

fn reject<T>(code: &str, message: impl Into<String>) -> Result<T, Rejection> {
    Err(Rejection::new(code, message))
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
            index: Index::default(),
            order: Order::default(),
        }
    }

    /// This master with runnable jobs lined up by `order` (the line is
    /// rebuilt at once).
    pub fn with_order(mut self, order: Order) -> Self {
        self.order = order;
        self.index.ready.clear();
        self.index.key_ready.clear();
        for (&id, job) in &self.jobs {
            if job.state == JobState::Queued
                && job.not_before.is_none()
                && !self.dags.waiting.contains_key(&id)
            {
                (self.index).enqueue(ready_key(order, job, id), self.keyed.key(id));
            }
        }
        self
    }

    /// `postcard` of the fields up to `retries_total`, as if `jobs` and
    /// `done` were one map (the snapshot's first part; the bytes a
    /// derived `Serialize` of the whole state wrote before jobs were
    /// packed, so every snapshot version reads the same way).
    #[cfg(test)]
    fn write_state(&self, sink: &mut impl Sink) {
        self.write_head(sink);
        self.write_jobs(sink, Bound::Unbounded, usize::MAX);
        self.write_tail(sink);
    }

    /// The state's fields before its jobs, and how many jobs follow.
    fn write_head(&self, sink: &mut impl Sink) {
        sink.put(&HeadRef {
            config: &self.config,
            next_id: self.next_id,
            next_seq: self.next_seq,
        });
        sink.put(&(self.jobs.len() + self.done.len()));
    }

    /// The jobs after `past`, each its id and record, until `sink` holds
    /// `bytes_max`: the last id written then, or `None` once every job is.
    fn write_jobs(
        &self,
        sink: &mut impl Sink,
        past: Bound<JobId>,
        bytes_max: usize,
    ) -> Option<JobId> {
        for (id, held) in self.scan(past, false) {
            sink.put(&id);
            match held {
                Held::Live(job) => sink.put(job),
                Held::Done(done) => sink.raw(done.record()),
            }
            if sink.len() >= bytes_max {
                return Some(id);
            }
        }
        None
    }

    /// The state's fields after its jobs.
    fn write_tail(&self, sink: &mut impl Sink) {
        sink.put(&TailRef {
            workers: &self.workers,
            submitted_total: self.submitted_total,
            attempts_total: self.attempts_total,
            retries_total: self.retries_total,
        });
    }

    /// [`write_state`](Self::write_state) after `out`.
    #[cfg(test)]
    fn encode_state(&self, mut out: Vec<u8>) -> Vec<u8> {
        self.write_state(&mut out);
        out
    }

    /// Writes the snapshot from `cursor` on into `sink`, until it holds
    /// `bytes_max` (at least one byte is always written) or the snapshot
    /// ends, and moves `cursor` to where the next part starts.
    ///
    /// The snapshot's layout is here and only here: the version, the
    /// state's head, its jobs, its tail, the tokens, the request ids
    /// (a map: their count, then each id and request), the keys, the
    /// schedules and the DAGs.
    fn write_part(&self, sink: &mut impl Sink, cursor: &mut SnapshotCursor, bytes_max: usize) {
        let bytes_max = bytes_max.max(1);
        loop {
            match *cursor {
                SnapshotCursor::Start => {
                    sink.raw(&[SNAPSHOT_VERSION]);
                    self.write_head(sink);
                    *cursor = SnapshotCursor::Jobs(Bound::Unbounded);
                }
                SnapshotCursor::Jobs(past) => {
                    if let Some(last) = self.write_jobs(sink, past, bytes_max) {
                        *cursor = SnapshotCursor::Jobs(Bound::Excluded(last));
                        return;
                    }
                    self.write_tail(sink);
                    sink.put(&self.tokens);
                    sink.put(&self.requests.len());
                    *cursor = SnapshotCursor::Requests(None);
                }
                SnapshotCursor::Requests(past) => {
                    for entry in self.requests.iter_after(past) {
                        sink.put(&entry);
                        if sink.len() >= bytes_max {
                            *cursor = SnapshotCursor::Requests(Some(entry.0));
                            return;
                        }
                    }
                    *cursor = SnapshotCursor::Rest;
                }
                SnapshotCursor::Rest => {
                    sink.put(&self.keyed);
                    sink.put(&self.schedules);
                    sink.put(&self.dags);
                    *cursor = SnapshotCursor::End;
                }
                SnapshotCursor::End => return,
            }
            if sink.len() >= bytes_max {
                return;
            }
        }
    }

    /// The next part of this state's snapshot from `cursor`, at least one
    /// byte and about `bytes_max` (a part ends after the job or request id
    /// that reached it); empty once the snapshot is whole. The parts in
    /// order are exactly [`snapshot`](Self::snapshot), if nothing is
    /// applied in between; written in parts, a snapshot never needs a
    /// buffer of its whole size in the component's memory.
    pub fn snapshot_part(&self, cursor: &mut SnapshotCursor, bytes_max: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes_max.clamp(1, SNAPSHOT_PART_PRESIZE_MAX));
        self.write_part(&mut out, cursor, bytes_max);
        out
    }

    /// The whole state as versioned bytes: `[SNAPSHOT_VERSION] ++
    /// postcard(state) ++ postcard(tokens) ++ postcard(request ids) ++
    /// postcard(keys) ++ postcard(schedules) ++ postcard(DAGs)`.
    ///
    /// Measured first, then written into a buffer of that size: grown by
    /// doubling, the buffer of a snapshot of a million finished jobs took
    /// some 190 MiB of the component's memory at its peak, which Wasm
    /// memory keeps (BENCHMARKS.md, "Finished jobs packed").
    pub fn snapshot(&self) -> Vec<u8> {
        let mut size = Count(0);
        self.write_part(&mut size, &mut SnapshotCursor::Start, usize::MAX);
        let mut out = Vec::with_capacity(size.0);
        self.write_part(&mut out, &mut SnapshotCursor::Start, usize::MAX);
        out
    }

    /// A master from [`snapshot`](Self::snapshot) bytes, or from a snapshot
    /// of an older version (see [`SNAPSHOT_VERSION`]): what it did not hold
    /// starts empty. The same as [`Restoring`] given the bytes as one
    /// part.
    pub fn restore(bytes: &[u8]) -> Result<Self, Rejection> {
        let mut restoring = Restoring::default();
        restoring.feed(bytes)?;
        restoring.finish()
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Builds the index from the unfinished jobs and `done`, the entries
    /// of the finished ones ([`Index::add_done`]).
    fn rebuild_index(&mut self, done: Index) {
        // A snapshot is decoded, not trusted: a worker "running" a job the
        // snapshot does not hold would make a later event fail. Every node
        // restoring the same bytes drops the same references, so replicas
        // stay identical.
        let jobs = &self.jobs;
        for worker in self.workers.values_mut() {
            worker.running.retain(|id| jobs.contains_key(id));
        }
        // Options of jobs the snapshot does not hold are dropped, like the
        // workers' references above.
        let held = |id: &JobId| jobs.contains_key(id) || self.done.contains_key(id);
        self.keyed.options.retain(|id, _| held(id));
        // DAG records of jobs the snapshot does not hold are dropped too;
        // only queued jobs wait.
        self.dags.nodes.retain(|id, _| held(id));
        (self.dags.waiting).retain(|id, _| {
            jobs.get(id)
                .is_some_and(|job| job.state == JobState::Queued)
        });
        self.dags.rebuild();
        let mut fired_by = BTreeMap::new();
        for (name, schedule) in &mut self.schedules {
            schedule
                .active
                .retain(|id| jobs.get(id).is_some_and(|job| !job.state.is_terminal()));
            for &id in &schedule.active {
                fired_by.insert(id, name.clone());
            }
        }
        let mut index = Index {
            unique_until: (self.keyed.uniques.iter())
                .map(|(key, hold)| (hold.until, key.clone()))
                .collect(),
            latest_start: (self.keyed.starts.iter())
                .filter_map(|(key, starts)| Some((*starts.back()?, key.clone())))
                .collect(),
            fired_by,
            ..done
        };
        for (&id, job) in &self.jobs {
            index.counts[job.state as usize] += 1;
            *index.modules.entry(job.spec.module).or_default() += 1;
            if let Some(key) = &job.spec.idempotency_key {
                index.keys.insert(key.clone(), id);
            }
            match job.state {
                JobState::Queued if self.dags.waiting.contains_key(&id) => {}
                JobState::Queued => match job.not_before {
                    Some(at) => {
                        index.delayed.insert((at, id));
                    }
                    None => index.enqueue(ready_key(self.order, job, id), self.keyed.key(id)),
                },
                JobState::Running => {
                    if let Some(until) = job.lease_until {
                        index.leases.insert((until, id));
                    }
                    if let Some(key) = self.keyed.key(id) {
                        *index.key_running.entry(key.to_owned()).or_default() += 1;
                    }
                }
                // Finished jobs were counted from `done`.
                _ => {}
            }
        }
        self.index = index;
    }

    fn queued(&self) -> u64 {
        self.index.counts[JobState::Queued as usize]
    }

    /// Job `id`, finished (unpacked) or not.
    fn find(&self, id: JobId) -> Option<Cow<'_, Job>> {
        match self.jobs.get(&id) {
            Some(job) => Some(Cow::Borrowed(job)),
            None => self.done.get(&id)?.unpack().map(Cow::Owned),
        }
    }

    /// The state of job `id`, without unpacking it.
    fn state_of(&self, id: JobId) -> Option<JobState> {
        match self.jobs.get(&id) {
            Some(job) => Some(job.state),
            None => Some(self.done.get(&id)?.state()),
        }
    }

    /// Whether job `id` is held, finished or not.
    fn holds(&self, id: JobId) -> bool {
        self.jobs.contains_key(&id) || self.done.contains_key(&id)
    }

    /// Moves job `id` to `done` if it finished.
    fn pack(&mut self, id: JobId) {
        if let Some(job) = self.jobs.get(&id)
            && job.state.is_terminal()
        {
            let job = self.jobs.remove(&id).expect("present");
            self.done.insert(id, Done::pack(&job));
        }
    }

    fn job(&self, id: JobId) -> Result<Cow<'_, Job>, Rejection> {
        match self.find(id) {
            Some(job) => Ok(job),
            None if id > 0 && id < self.next_id => reject(
                codes::JOB_EXPIRED,
                format!("job {id} finished and its record was removed after the retention time"),
            ),
            None => reject(codes::JOB_NOT_FOUND, format!("no job {id}")),
        }
    }

    /// What `command` at time `now` leads to; changes nothing.
    pub fn decide(&self, now: Millis, command: &Command) -> Result<Decision, Rejection> {
        let event = |kind| Event { at: now, kind };
        let done = |events| {
            Ok(Decision {
                events,
                reply: Reply::Done,
            })
        };
        match command {
            Command::Configure(config) => {
                validate_config(config)?;
                if *config == self.config {
                    return done(Vec::new());
                }
                done(vec![event(EventKind::Configured(config.clone()))])
            }
            Command::Submit {
                spec,
                request,
                options,
            } => self.decide_submit(now, spec, *request, options),
            Command::Bulk { action, filter } => {
                validate_bulk(*action, filter, &self.config)?;
                let kinds = self
                    .bulk_matches(*action, filter)
                    .map(|(id, job)| match action {
                        BulkAction::Cancel => EventKind::Cancelled { id },
                        BulkAction::Retry { attempts } => EventKind::Retried {
                            id,
                            max_attempts: job.attempts.saturating_add(*attempts),
                        },
                    });
                let events: Vec<Event> = kinds.take(BULK_MAX).map(event).collect();
                Ok(Decision {
                    reply: Reply::Bulk {
                        changed: events.len() as u64,
                    },
                    events,
                })
            }
            Command::Cancel { id } => {
                let job = self.job(*id)?;
                if job.state.is_terminal() {
                    return reject(
                        codes::JOB_FINISHED,
                        format!("job {id} already finished: {}", job.state.name()),
                    );
                }
                done(vec![event(EventKind::Cancelled { id: *id })])
            }
            Command::Poll {
                worker,
                slots,
                free,
            } => {
                if worker.is_empty() || worker.len() > WORKER_ID_BYTES_MAX {
                    return reject(codes::INVALID_JOB, "worker ids are 1 to 256 bytes");
                }
                let mut events = Vec::new();
                let seen = match self.workers.get(worker) {
                    None => true,
                    Some(known) => {
                        known.slots != *slots
                            || now
                                >= known.last_seen + self.config.worker_ttl_ms / WORKER_SEEN_PER_TTL
                    }
                };
                if seen {
                    events.push(event(EventKind::WorkerSeen {
                        worker: worker.clone(),
                        slots: *slots,
                    }));
                }
                for id in self.startable(now, *free as usize) {
                    // A journal is decoded, not trusted: a job replaced
                    // under its id may leave a place in line behind.
                    let Some(job) = self.jobs.get(&id) else {
                        continue;
                    };
                    events.push(event(EventKind::Assigned {
                        id,
                        attempt: job.attempts.len() as u32 + 1,
                        worker: worker.clone(),
                        lease_until: now
                            .saturating_add(job.spec.timeout_ms)
                            .saturating_add(self.config.lease_grace_ms),
                    }));
                }
                done(events)
            }
            Command::Checkpoint { id, attempt, data } => {
                if let Err(reason) = self.current_attempt(*id, *attempt, None) {
                    return Ok(ignored(reason));
                }
                if data.len() as u64 > self.config.checkpoint_bytes_max {
                    return reject(
                        codes::CHECKPOINT_TOO_LARGE,
                        format!(
                            "checkpoint of {} bytes, the limit is {}",
                            data.len(),
                            self.config.checkpoint_bytes_max
                        ),
                    );
                }
                done(vec![event(EventKind::Checkpointed {
                    id: *id,
                    attempt: *attempt,
                    data: data.clone(),
                })])
            }
            Command::Finish {
                id,
                attempt,
                worker,
                outcome,
                duration_ms,
                log_tail,
            } => {
                if let Err(reason) = self.current_attempt(*id, *attempt, Some(worker)) {
                    return Ok(ignored(reason));
                }
                let outcome = match outcome {
                    Outcome::Succeeded(result)
                        if result.len() as u64 > self.config.result_bytes_max =>
                    {
                        Outcome::Failed(Failure {
                            code: "output_too_large".into(),
                            message: format!(
                                "result of {} bytes, the master keeps at most {}",
                                result.len(),
                                self.config.result_bytes_max
                            ),
                        })
                    }
                    other => other.clone(),
                };
                done(vec![event(EventKind::Finished {
                    id: *id,
                    attempt: *attempt,
                    outcome,
                    duration_ms: *duration_ms,
                    log_tail: tail(log_tail, LOG_TAIL_BYTES_MAX).into(),
                })])
            }
            Command::WorkerGone { worker } => {
                if self.workers.contains_key(worker) {
                    done(vec![event(EventKind::WorkerLost {
                        worker: worker.clone(),
                    })])
                } else {
                    done(Vec::new())
                }
            }
            Command::Tick => done(self.decide_tick(now)),
            Command::CreateToken(record) => {
                validate_token(record)?;
                if self.tokens.contains_key(&record.id) {
                    return reject(
                        codes::TOKEN_EXISTS,
                        format!("a token with id {} exists", record.id),
                    );
                }
                if self.tokens.len() >= TOKENS_MAX {
                    return reject(
                        codes::INVALID_TOKEN,
                        format!("at most {TOKENS_MAX} tokens; revoke some first"),
                    );
                }
                done(vec![event(EventKind::TokenCreated(TokenRecord {
                    created_at: now,
                    ..record.clone()
                }))])
            }
            Command::RevokeToken { id } => {
                if !self.tokens.contains_key(id) {
                    return reject(codes::TOKEN_NOT_FOUND, format!("no token with id {id}"));
                }
                done(vec![event(EventKind::TokenRevoked { id: id.clone() })])
            }
            Command::CreateSchedule(spec) => {
                validate_spec(&self.config, &spec.job)?;
                validate_options(&spec.options)?;
                let next = schedule::validate(spec, now)?;
                if self.schedules.contains_key(&spec.name) {
                    return reject(
                        codes::SCHEDULE_EXISTS,
                        format!("a schedule named {} exists", spec.name),
                    );
                }
                if self.schedules.len() >= SCHEDULES_MAX {
                    return reject(
                        codes::INVALID_SCHEDULE,
                        format!("at most {SCHEDULES_MAX} schedules; delete some first"),
                    );
                }
                done(vec![event(EventKind::ScheduleCreated {
                    spec: spec.clone(),
                    next,
                })])
            }
            Command::PauseSchedule { name, paused } => {
                let schedule = self.schedule(name)?;
                if schedule.paused == *paused {
                    return done(Vec::new());
                }
                let next = match paused {
                    true => schedule.next,
                    false => schedule.tick_after(now),
                };
                done(vec![event(EventKind::SchedulePaused {
                    name: name.clone(),
                    paused: *paused,
                    next,
                })])
            }
            Command::DeleteSchedule { name } => {
                self.schedule(name)?;
                done(vec![event(EventKind::ScheduleDeleted {
                    name: name.clone(),
                })])
            }
            Command::Backfill { name, from, to } => self.decide_backfill(now, name, *from, *to),
            Command::SubmitDag(spec) => self.decide_dag(now, spec),
        }
    }

    fn decide_dag(&self, now: Millis, spec: &DagSpec) -> Result<Decision, Rejection> {
        let existing = |dag: DagId, created: bool| {
            let jobs = self
                .dags
                .dags
                .get(&dag)
                .map_or(Vec::new(), |d| d.jobs.clone());
            Ok(Decision {
                events: Vec::new(),
                reply: Reply::Dag {
                    id: dag,
                    jobs,
                    existing: !created,
                },
            })
        };
        if let Some(seen) = self.requests.get(&spec.request)
            && let Some(node) = self.dags.nodes.get(&seen.job)
        {
            return existing(node.dag, true);
        }
        if let Some(key) = &spec.idempotency_key {
            if key.is_empty() || key.len() > IDEMPOTENCY_KEY_BYTES_MAX {
                return reject(
                    codes::INVALID_DAG,
                    format!("idempotency_key: 1 to {IDEMPOTENCY_KEY_BYTES_MAX} bytes"),
                );
            }
            if let Some(&dag) = self.dags.keys.get(key) {
                return existing(dag, false);
            }
        }
        dag::validate_shape(spec)?;
        let invalid = |message: String| Err(Rejection::new(codes::INVALID_DAG, message));
        for (i, node) in spec.nodes.iter().enumerate() {
            if node.spec.idempotency_key.is_some() {
                return invalid(format!(
                    "jobs[{i}].idempotency_key: a DAG's jobs take none (give the DAG one)"
                ));
            }
            if node.options.unique.is_some() {
                return invalid(format!("jobs[{i}].unique_key: a DAG's jobs take none"));
            }
            validate_spec(&self.config, &node.spec)
                .and_then(|()| validate_options(&node.options))
                .map_err(|r| Rejection::new(&r.code, format!("jobs[{i}]: {}", r.message)))?;
            for parent in &node.after {
                let DagRef::Job(id) = *parent else { continue };
                let job = self.job(id).map_err(|r| {
                    Rejection::new(
                        codes::INVALID_DAG,
                        format!("jobs[{i}].after: {}", r.message),
                    )
                })?;
                if job.state.is_terminal() && job.state != JobState::Succeeded {
                    return invalid(format!(
                        "jobs[{i}].after: job {id} is {}; retry it first",
                        job.state.name()
                    ));
                }
            }
        }
        let n = spec.nodes.len() as u64;
        if self.queued().saturating_add(n) > self.config.queue_max {
            return reject(
                codes::QUEUE_FULL,
                format!(
                    "{} jobs are waiting and the DAG adds {n}, the limit is {}",
                    self.queued(),
                    self.config.queue_max
                ),
            );
        }
        let first = self.next_id;
        let ids: Vec<JobId> = (0..n).map(|k| first.saturating_add(k)).collect();
        let mut events: Vec<Event> = (spec.nodes.iter().zip(&ids))
            .map(|(node, &id)| Event {
                at: now,
                kind: EventKind::Submitted {
                    id,
                    spec: node.spec.clone(),
                    request: None,
                    options: node.options.clone(),
                },
            })
            .collect();
        let nodes = (spec.nodes.iter().zip(&ids))
            .map(|(node, &id)| {
                let mut parents: Vec<JobId> = (node.after.iter())
                    .map(|parent| match *parent {
                        DagRef::Node(p) => ids[p as usize],
                        DagRef::Job(id) => id,
                    })
                    .collect();
                parents.sort_unstable();
                parents.dedup();
                DagNode {
                    id,
                    name: node.name.clone(),
                    parents,
                    outputs: node.outputs,
                }
            })
            .collect();
        let dag = self.dags.next;
        events.push(Event {
            at: now,
            kind: EventKind::DagCreated {
                dag,
                on_failure: spec.on_failure,
                nodes,
                request: Some(spec.request),
                idempotency_key: spec.idempotency_key.clone(),
            },
        });
        Ok(Decision {
            events,
            reply: Reply::Dag {
                id: dag,
                jobs: ids,
                existing: false,
            },
        })
    }

    fn schedule(&self, name: &str) -> Result<&Schedule, Rejection> {
        self.schedules
            .get(name)
            .ok_or_else(|| Rejection::new(codes::SCHEDULE_NOT_FOUND, format!("no schedule {name}")))
    }

    fn decide_backfill(
        &self,
        now: Millis,
        name: &str,
        from: Millis,
        to: Millis,
    ) -> Result<Decision, Rejection> {
        let schedule = self.schedule(name)?;
        if from >= to {
            return reject(codes::INVALID_SCHEDULE, "from: must be before to");
        }
        let ticks = schedule.missed_ticks(from, to, BACKFILL_TICKS_MAX);
        if ticks.len() > BACKFILL_TICKS_MAX {
            return reject(
                codes::INVALID_SCHEDULE,
                format!(
                    "to: more than {BACKFILL_TICKS_MAX} missed ticks in from..to; backfill a narrower range at a time"
                ),
            );
        }
        if self.queued().saturating_add(ticks.len() as u64) > self.config.queue_max {
            return reject(
                codes::QUEUE_FULL,
                format!(
                    "{} jobs are waiting and the backfill adds {}, the limit is {}",
                    self.queued(),
                    ticks.len(),
                    self.config.queue_max
                ),
            );
        }
        let ids: Vec<JobId> = (0..ticks.len() as u64)
            .map(|n| self.next_id.saturating_add(n))
            .collect();
        let mut events: Vec<Event> = (ticks.iter().zip(&ids))
            .map(|(&tick, &id)| Event {
                at: now,
                kind: EventKind::ScheduleFired {
                    name: name.to_owned(),
                    tick,
                    id,
                    next: schedule.next,
                },
            })
            .collect();
        if !ticks.is_empty() {
            events.push(Event {
                at: now,
                kind: EventKind::ScheduleBackfilled {
                    name: name.to_owned(),
                    from,
                    to,
                },
            });
        }
        Ok(Decision {
            events,
            reply: Reply::Backfilled { ids },
        })
    }

    /// The events of the schedules' due ticks (see [`crate::schedule`]).
    fn decide_schedules(&self, now: Millis, room: usize, kinds: &mut Vec<EventKind>) {
        let new_jobs = std::cell::Cell::new(0u64);
        let full = |kinds: &Vec<EventKind>| kinds.len() >= room;
        for (name, schedule) in &self.schedules {
            let due = schedule.next.is_some_and(|next| next <= now) || schedule.buffered.is_some();
            if schedule.paused || !due || full(kinds) {
                continue;
            }
            // Jobs of this schedule that will be unfinished after the
            // events so far.
            let mut active: Vec<JobId> = schedule.active.iter().copied().collect();
            let mut buffered = schedule.buffered;
            let mut next = schedule.next;
            let fire = |kinds: &mut Vec<EventKind>, tick, next, active: &mut Vec<JobId>| {
                let id = self.next_id.saturating_add(new_jobs.get());
                new_jobs.set(new_jobs.get() + 1);
                active.push(id);
                kinds.push(EventKind::ScheduleFired {
                    name: name.clone(),
                    tick,
                    id,
                    next,
                });
            };
            if let Some(tick) = buffered
                && active.is_empty()
            {
                fire(kinds, tick, next, &mut active);
                buffered = None;
            }
            let mut decided = 0;
            while let Some(tick) = next {
                if tick > now || full(kinds) || decided == TICKS_PER_TICK_MAX {
                    break;
                }
                decided += 1;
                let window = schedule.spec.catch_up_ms.saturating_add(LATE_GRACE_MS);
                let earliest = now.saturating_sub(window);
                if tick < earliest {
                    next = schedule.tick_after(earliest.saturating_sub(1));
                    kinds.push(EventKind::ScheduleMissed {
                        name: name.clone(),
                        from: tick,
                        to: next.unwrap_or(earliest),
                        next,
                    });
                    continue;
                }
                let following = schedule.tick_after(tick);
                let skip = |reason| EventKind::ScheduleSkipped {
                    name: name.clone(),
                    tick,
                    reason,
                    next: following,
                };
                if self.queued().saturating_add(new_jobs.get()) >= self.config.queue_max {
                    kinds.push(skip(SkipReason::QueueFull));
                } else if active.is_empty() {
                    fire(kinds, tick, following, &mut active);
                } else {
                    match schedule.spec.overlap {
                        Overlap::AllowAll => fire(kinds, tick, following, &mut active),
                        Overlap::Skip => kinds.push(skip(SkipReason::Overlap)),
                        Overlap::BufferOne if buffered.is_none() => {
                            buffered = Some(tick);
                            kinds.push(EventKind::ScheduleBuffered {
                                name: name.clone(),
                                tick,
                                next: following,
                            });
                        }
                        Overlap::BufferOne => kinds.push(skip(SkipReason::Overlap)),
                        Overlap::CancelRunning => {
                            kinds.extend(active.drain(..).map(|id| EventKind::Cancelled { id }));
                            fire(kinds, tick, following, &mut active);
                        }
                    }
                }
                next = following;
            }
        }
    }

    fn decide_submit(
        &self,
        now: Millis,
        spec: &JobSpec,
        request: RequestId,
        options: &JobOptions,
    ) -> Result<Decision, Rejection> {
        if let Some(seen) = self.requests.get(&request) {
            // The same request again (a forward retried): whatever changed
            // since, it gets the first one's answer.
            return Ok(Decision {
                events: Vec::new(),
                reply: Reply::Submitted {
                    id: seen.job,
                    existing: false,
                },
            });
        }
        let config = &self.config;
        validate_spec(config, spec)?;
        if let Some(key) = &spec.idempotency_key
            && let Some(&id) = self.index.keys.get(key)
        {
            let job = self.find(id).expect("an idempotency key's job is held");
            if job.spec.module != spec.module || job.spec.input != spec.input {
                return reject(
                    codes::IDEMPOTENCY_CONFLICT,
                    format!(
                        "idempotency key {key:?} belongs to job {id}, which has a different module or input"
                    ),
                );
            }
            return Ok(Decision {
                events: Vec::new(),
                reply: Reply::Submitted { id, existing: true },
            });
        }
        validate_options(options)?;
        if let Some(unique) = &options.unique {
            match self.keyed.uniques.get(&unique.key) {
                Some(hold) if hold.until > now => {
                    return Ok(Decision {
                        events: Vec::new(),
                        reply: Reply::Submitted {
                            id: hold.job,
                            existing: true,
                        },
                    });
                }
                // An ended hold is replaced; otherwise one more must fit,
                // or one must end now (and be forgotten on the way).
                Some(_) => {}
                None if self.keyed.uniques.len() < UNIQUE_KEYS_MAX => {}
                None if self
                    .index
                    .unique_until
                    .first()
                    .is_some_and(|(until, _)| *until <= now) => {}
                None => {
                    return reject(
                        codes::UNIQUE_KEYS_FULL,
                        format!(
                            "{UNIQUE_KEYS_MAX} uniqueness keys are held; they free up as their windows end"
                        ),
                    );
                }
            }
        }
        if self.queued() >= config.queue_max {
            return reject(
                codes::QUEUE_FULL,
                format!(
                    "{} jobs are waiting, the limit is {}",
                    self.queued(),
                    config.queue_max
                ),
            );
        }
        let id = self.next_id;
        Ok(Decision {
            events: vec![Event {
                at: now,
                kind: EventKind::Submitted {
                    id,
                    spec: spec.clone(),
                    request: Some(request),
                    options: options.clone(),
                },
            }],
            reply: Reply::Submitted {
                id,
                existing: false,
            },
        })
    }

    /// Whether `attempt` is the running attempt of job `id` (held by
    /// `worker`, when given); otherwise why not.
    fn current_attempt(&self, id: JobId, attempt: u32, worker: Option<&str>) -> Result<(), String> {
        let job = match self.jobs.get(&id) {
            Some(job) if job.state == JobState::Running => job,
            _ => {
                return Err(match self.state_of(id) {
                    Some(state) => format!("job {id} is {}", state.name()),
                    None => format!("no job {id}"),
                });
            }
        };
        let current = job.attempts.last().expect("a running job has an attempt");
        if current.number != attempt {
            return Err(format!(
                "attempt {attempt} of job {id} was superseded by attempt {}",
                current.number
            ));
        }
        if let Some(worker) = worker
            && current.worker != worker
        {
            return Err(format!(
                "attempt {attempt} of job {id} is not held by {worker}"
            ));
        }
        Ok(())
    }

    fn decide_tick(&self, now: Millis) -> Vec<Event> {
        let mut kinds = Vec::new();
        let room = |kinds: &Vec<EventKind>| kinds.len() < TICK_EVENTS_MAX;
        for &(until, id) in &self.index.leases {
            if until > now || !room(&kinds) {
                break;
            }
            let attempt = self.jobs[&id].attempts.last().map_or(0, |a| a.number);
            kinds.push(EventKind::Expired {
                id,
                attempt,
                code: "lease_expired".into(),
            });
        }
        for &(at, id) in &self.index.delayed {
            if at > now || !room(&kinds) {
                break;
            }
            kinds.push(EventKind::Released { id });
        }
        for (worker, state) in &self.workers {
            if !room(&kinds) {
                break;
            }
            if now >= state.last_seen.saturating_add(self.config.worker_ttl_ms) {
                kinds.push(EventKind::WorkerLost {
                    worker: worker.clone(),
                });
            }
        }
        // Finished jobs, oldest first: past retention, or beyond the count
        // and result-bytes bounds.
        let mut excess =
            (self.index.finished.len() as u64).saturating_sub(self.config.finished_max);
        let mut bytes = self.index.result_bytes;
        for &(finished_at, id) in &self.index.finished {
            if !room(&kinds) {
                break;
            }
            let expired = finished_at.saturating_add(self.config.retention_ms) <= now;
            let over = excess > 0 || bytes > self.config.results_bytes_total_max;
            if !expired && !over {
                break;
            }
            kinds.push(EventKind::Purged { id });
            excess = excess.saturating_sub(1);
            // The bytes a purge frees matter only while over their bound
            // (they only go down): only then is the job unpacked for them.
            if bytes > self.config.results_bytes_total_max {
                let held = self.find(id).and_then(|j| j.result.as_ref().map(Vec::len));
                bytes = bytes.saturating_sub(held.map_or(0, |len| len as u64));
            }
        }
        self.decide_schedules(now, TICK_EVENTS_MAX, &mut kinds);
        // Request ids past their time, all at once when the oldest is a
        // period overdue.
        if let Some(oldest) = self.requests.oldest_at()
            && oldest.saturating_add(REQUEST_TTL_MS + REQUEST_PURGE_PERIOD_MS) <= now
            && room(&kinds)
        {
            kinds.push(EventKind::RequestsExpired {
                before: now.saturating_sub(REQUEST_TTL_MS),
            });
        }
        kinds
            .into_iter()
            .map(|kind| Event { at: now, kind })
            .collect()
    }

    /// Applies one event; returns what the host must do about it. The
    /// jobs it finished are packed last (see [`Done`]).
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
        for effect in &effects[from..] {
            if let Effect::Settled { id, .. } = *effect {
                self.pack(id);
            }
        }
    }

    fn apply_event(&mut self, event: &Event, effects: &mut Vec<Effect>) {
        let at = event.at;
        match &event.kind {
            EventKind::Configured(config) => self.config = config.clone(),
            EventKind::TokenCreated(record) => {
                self.tokens.insert(record.id.clone(), record.clone());
            }
            EventKind::TokenRevoked { id } => {
                self.tokens.remove(id);
            }
            EventKind::Submitted {
                id,
                spec,
                request,
                options,
            } => {
                self.add_job(*id, spec.clone(), options, at);
                if let Some(request) = request {
                    self.remember_request(*request, *id, at, REQUESTS_MAX);
                }
                effects.push(Effect::WorkAvailable);
            }
            EventKind::ScheduleCreated { spec, next } => {
                if !self.schedules.contains_key(&spec.name) {
                    let schedule = Schedule::new(spec.clone(), at, *next);
                    self.schedules.insert(spec.name.clone(), schedule);
                }
            }
            EventKind::ScheduleFired {
                name,
                tick,
                id,
                next,
            } => {
                let Some(schedule) = self.schedules.get(name) else {
                    return;
                };
                if self.holds(*id) {
                    return;
                }
                let (spec, options) = (schedule.spec.job.clone(), schedule.spec.options.clone());
                self.add_job(*id, spec, &options, at);
                self.index.fired_by.insert(*id, name.clone());
                let schedule = self.schedules.get_mut(name).expect("present");
                schedule.active.insert(*id);
                if schedule.last.is_none_or(|(last, _)| last < *tick) {
                    schedule.last = Some((*tick, *id));
                }
                schedule.fired_total += 1;
                if schedule.buffered == Some(*tick) {
                    schedule.buffered = None;
                }
                schedule.next = *next;
                effects.push(Effect::WorkAvailable);
            }
            EventKind::ScheduleSkipped { name, next, .. } => {
                if let Some(schedule) = self.schedules.get_mut(name) {
                    schedule.skipped_total += 1;
                    schedule.next = *next;
                }
            }
            EventKind::ScheduleBuffered { name, tick, next } => {
                if let Some(schedule) = self.schedules.get_mut(name) {
                    schedule.buffered = Some(*tick);
                    schedule.next = *next;
                }
            }
            EventKind::ScheduleMissed {
                name,
                from,
                to,
                next,
            } => {
                if let Some(schedule) = self.schedules.get_mut(name) {
                    schedule.miss(*from, *to);
                    schedule.next = *next;
                }
            }
            EventKind::SchedulePaused { name, paused, next } => {
                if let Some(schedule) = self.schedules.get_mut(name) {
                    schedule.paused = *paused;
                    schedule.next = *next;
                }
            }
            EventKind::ScheduleBackfilled { name, from, to } => {
                if let Some(schedule) = self.schedules.get_mut(name) {
                    schedule.unmiss(*from, *to);
                }
            }
            EventKind::ScheduleDeleted { name } => {
                if let Some(schedule) = self.schedules.remove(name) {
                    for id in schedule.active {
                        self.index.fired_by.remove(&id);
                    }
                }
            }
            EventKind::DagCreated {
                dag,
                on_failure,
                nodes,
                request,
                idempotency_key,
            } => self.create_dag(
                *dag,
                *on_failure,
                nodes,
                *request,
                idempotency_key,
                at,
                effects,
            ),
            EventKind::RequestsExpired { before } => {
                self.requests.expire_before(*before);
            }
            EventKind::Assigned {
                id,
                attempt,
                worker,
                lease_until,
            } => {
                let Some(job) = self.jobs.get_mut(id) else {
                    return;
                };
                if job.state != JobState::Queued {
                    return;
                }
                self.index
                    .dequeue(ready_key(self.order, job, *id), self.keyed.key(*id));
                if let Some(key) = self.keyed.key(*id) {
                    *self.index.key_running.entry(key.to_owned()).or_default() += 1;
                    let key = key.to_owned();
                    self.note_start(key, at);
                }
                let job = self.jobs.get_mut(id).expect("present");
                set_state(&mut self.index.counts, job, JobState::Running);
                job.lease_until = Some(*lease_until);
                job.attempts.push(Attempt {
                    number: *attempt,
                    worker: worker.clone(),
                    started_at: at,
                    ended_at: None,
                    outcome: None,
                    message: None,
                    duration_ms: None,
                    log_tail: String::new(),
                });
                self.index.leases.insert((*lease_until, *id));
                let entry = self.workers.entry(worker.clone()).or_insert(Worker {
                    slots: 0,
                    last_seen: at,
                    running: BTreeSet::new(),
                });
                entry.running.insert(*id);
                entry.last_seen = entry.last_seen.max(at);
                self.attempts_total += 1;
                let job = &self.jobs[id];
                let input = match self.dags.nodes.get(id) {
                    Some(node) if node.outputs && !node.parents.is_empty() => {
                        let outputs: Vec<Option<Vec<u8>>> = (node.parents.iter())
                            .map(|parent| self.find(*parent).and_then(|j| j.into_owned().result))
                            .collect();
                        let parents: Vec<(JobId, &str, Option<&[u8]>)> = (node.parents.iter())
                            .zip(&outputs)
                            .map(|(parent, output)| {
                                let name = self.dags.nodes.get(parent).map_or("", |n| &n.name);
                                (*parent, name, output.as_deref())
                            })
                            .collect();
                        dag::envelope(&job.spec.input, &parents)
                    }
                    _ => job.spec.input.clone(),
                };
                effects.push(Effect::Assign(Assignment {
                    id: *id,
                    attempt: *attempt,
                    worker: worker.clone(),
                    module: job.spec.module,
                    input,
                    timeout_ms: job.spec.timeout_ms,
                    memory_bytes: job.spec.memory_bytes,
                    checkpoint: job.checkpoint.clone(),
                }));
            }
            EventKind::Checkpointed { id, attempt, data } => {
                if let Some(job) = self.jobs.get_mut(id)
                    && job.state == JobState::Running
                    && job.attempts.last().map(|a| a.number) == Some(*attempt)
                {
                    job.checkpoint = Some(data.clone());
                }
            }
            EventKind::Finished {
                id,
                attempt,
                outcome,
                duration_ms,
                log_tail,
            } => {
                if !self.end_attempt(*id, *attempt, at, effects) {
                    return;
                }
                let job = self.jobs.get_mut(id).expect("checked by end_attempt");
                let current = job.attempts.last_mut().expect("checked by end_attempt");
                current.duration_ms = Some(*duration_ms);
                current.log_tail = log_tail.clone();
                match outcome {
                    Outcome::Succeeded(result) => {
                        current.outcome = Some("succeeded".into());
                        self.index.result_bytes += result.len() as u64;
                        job.result = Some(result.clone());
                        self.settle(*id, JobState::Succeeded, at, effects);
                    }
                    Outcome::Failed(failure) => {
                        self.fail_attempt(*id, failure.clone(), at, effects)
                    }
                }
            }
            EventKind::Expired { id, attempt, code } => {
                if self.end_attempt(*id, *attempt, at, effects) {
                    let message = match code.as_str() {
                        "worker_lost" => "the worker running the attempt was lost",
                        _ => "the attempt's lease expired without a report",
                    };
                    self.fail_attempt(
                        *id,
                        Failure {
                            code: code.clone(),
                            message: message.into(),
                        },
                        at,
                        effects,
                    );
                }
            }
            EventKind::Cancelled { id } => self.cancel(*id, None, at, effects),
            EventKind::Released { id } => {
                let Some(job) = self.jobs.get_mut(id) else {
                    return;
                };
                if let Some(not_before) = job.not_before.take() {
                    self.index.delayed.remove(&(not_before, *id));
                    job.seq = self.next_seq;
                    self.next_seq += 1;
                    self.index
                        .enqueue(ready_key(self.order, job, *id), self.keyed.key(*id));
                    effects.push(Effect::WorkAvailable);
                }
            }
            EventKind::WorkerSeen { worker, slots } => {
                let entry = self.workers.entry(worker.clone()).or_insert(Worker {
                    slots: *slots,
                    last_seen: at,
                    running: BTreeSet::new(),
                });
                entry.slots = *slots;
                entry.last_seen = entry.last_seen.max(at);
            }
            EventKind::WorkerLost { worker } => {
                if let Some(state) = self.workers.remove(worker) {
                    for id in state.running {
                        let current = self.jobs.get(&id).and_then(|j| j.attempts.last());
                        let Some(attempt) = current.map(|a| a.number) else {
                            continue;
                        };
                        if self.end_attempt(id, attempt, at, effects) {
                            self.fail_attempt(
                                id,
                                Failure {
                                    code: "worker_lost".into(),
                                    message: format!("worker {worker} was lost"),
                                },
                                at,
                                effects,
                            );
                        }
                    }
                }
            }
            EventKind::Retried { id, max_attempts } => {
                if self
                    .done
                    .get(id)
                    .is_some_and(|done| BulkAction::RETRY_FROM.contains(&done.state()))
                    && let Some(job) = self.done.remove(id).and_then(|done| done.unpack())
                {
                    self.jobs.insert(*id, Box::new(job));
                }
                let Some(job) = self.jobs.get_mut(id) else {
                    return;
                };
                if !BulkAction::RETRY_FROM.contains(&job.state) {
                    return;
                }
                self.index
                    .finished
                    .remove(&(job.finished_at.take().unwrap_or(0), *id));
                set_state(&mut self.index.counts, job, JobState::Queued);
                job.spec.max_attempts = *max_attempts;
                job.error = None;
                job.seq = self.next_seq;
                self.next_seq += 1;
                // A DAG's job waits again for the parents that have not
                // succeeded (a retry of the parent releases it).
                let unfinished = self.unsucceeded_parents(*id);
                let job = &self.jobs[id];
                if unfinished > 0 {
                    self.dags.waiting.insert(*id, unfinished);
                } else {
                    self.index
                        .enqueue(ready_key(self.order, job, *id), self.keyed.key(*id));
                    effects.push(Effect::WorkAvailable);
                }
            }
            EventKind::Purged { id } => {
                if let Some(job) = self.done.remove(id).and_then(|done| done.unpack()) {
                    self.index.counts[job.state as usize] -= 1;
                    if let Some(count) = self.index.modules.get_mut(&job.spec.module) {
                        *count -= 1;
                        if *count == 0 {
                            self.index.modules.remove(&job.spec.module);
                        }
                    }
                    self.index
                        .finished
                        .remove(&(job.finished_at.unwrap_or(0), *id));
                    self.index.result_bytes -= job.result.as_ref().map_or(0, |r| r.len() as u64);
                    if let Some(key) = &job.spec.idempotency_key {
                        self.index.keys.remove(key);
                    }
                    self.keyed.options.remove(id);
                    self.forget_dag_job(*id);
                }
            }
        }
    }

    /// Queues a new job (a submission, or a schedule's tick).
    fn add_job(&mut self, id: JobId, spec: JobSpec, options: &JobOptions, at: Millis) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let job = Job {
            spec,
            state: JobState::Queued,
            submitted_at: at,
            finished_at: None,
            not_before: None,
            lease_until: None,
            seq,
            attempts: Vec::new(),
            error: None,
            result: None,
            checkpoint: None,
        };
        if !options.is_empty() {
            self.keyed.options.insert(id, options.clone());
        }
        if let Some(unique) = &options.unique {
            self.hold_unique(&unique.key, id, at.saturating_add(unique.window_ms), at);
        }
        self.index
            .enqueue(ready_key(self.order, &job, id), self.keyed.key(id));
        if let Some(key) = &job.spec.idempotency_key {
            self.index.keys.insert(key.clone(), id);
        }
        self.index.counts[JobState::Queued as usize] += 1;
        *self.index.modules.entry(job.spec.module).or_default() += 1;
        // An id is never submitted twice but by a hostile journal, whose
        // second copy replaces the first (finished or not) on every replica.
        self.done.remove(&id);
        self.jobs.insert(id, Box::new(job));
        self.next_id = self.next_id.max(id.saturating_add(1));
        self.submitted_total += 1;
    }

    /// Remembers that `request` created `job` at `at`, forgetting the
    /// oldest ids beyond `max`.
    fn remember_request(&mut self, request: RequestId, job: JobId, at: Millis, max: usize) {
        // `decide` never repeats an id it remembers, but a journal is
        // decoded, not trusted: a repeat replaces the entry, consistently.
        self.requests.insert(request, Request { job, at });
        while self.requests.len() > max && self.requests.pop_oldest().is_some() {}
    }

    /// Closes the running attempt `attempt` of job `id` (lease and worker
    /// bookkeeping); false if that is not the running attempt.
    fn end_attempt(
        &mut self,
        id: JobId,
        attempt: u32,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) -> bool {
        let Some(job) = self.jobs.get_mut(&id) else {
            return false;
        };
        if job.state != JobState::Running {
            return false;
        }
        let Some(current) = job.attempts.last_mut() else {
            return false;
        };
        if current.number != attempt {
            return false;
        }
        current.ended_at = Some(at);
        if let Some(until) = job.lease_until.take() {
            self.index.leases.remove(&(until, id));
        }
        if let Some(worker) = self.workers.get_mut(&current.worker) {
            worker.running.remove(&id);
        }
        if let Some(key) = self.keyed.key(id)
            && let Some(running) = self.index.key_running.get_mut(key)
        {
            *running -= 1;
            if *running == 0 {
                self.index.key_running.remove(key);
            }
            // A place under the key's limit opened: its next job may start.
            if self.index.key_ready.contains_key(key) {
                effects.push(Effect::WorkAvailable);
            }
        }
        true
    }

    /// Up to `free` ready jobs that may start at `now`, in line: a limited
    /// key's jobs only while the key is under its limits, counting the
    /// starts this decision makes. A key whose first job may not start is
    /// passed over whole, so a poll looks at no more than one job per
    /// waiting key beyond those it starts.
    pub(crate) fn startable(&self, now: Millis, free: usize) -> Vec<JobId> {
        let mut out = Vec::new();
        let mut lines = self.index.ready.iter().copied().peekable();
        // The next of a key's jobs, once the one before it was taken.
        let mut moved_up = BTreeSet::new();
        let mut started: BTreeMap<&str, u32> = BTreeMap::new();
        while out.len() < free {
            let place = match (lines.peek(), moved_up.first()) {
                (Some(first), Some(up)) if up < first => moved_up.pop_first(),
                (Some(_), _) => lines.next(),
                (None, _) => moved_up.pop_first(),
            };
            let Some(place) = place else {
                break;
            };
            let id = place.2;
            let Some(limit) = self.keyed.limit(id) else {
                out.push(id);
                continue;
            };
            let count = started.entry(limit.key.as_str()).or_default();
            if !self.under_limit(limit, now, *count) {
                continue;
            }
            *count += 1;
            out.push(id);
            // A journal is decoded, not trusted: a job replaced under its
            // id may name a key whose line is gone; it then moves no one up.
            let line = self.index.key_ready.get(&limit.key);
            let after = (Bound::Excluded(place), Bound::Unbounded);
            if let Some(&next) = line.and_then(|line| line.range(after).next()) {
                moved_up.insert(next);
            }
        }
        out
    }

    /// Whether one more attempt of `limit`'s key may start at `now`, with
    /// `started` more already started by the decision being made.
    fn under_limit(&self, limit: &KeyLimit, now: Millis, started: u32) -> bool {
        if let Some(max) = limit.running_max {
            let running = self.index.key_running.get(&limit.key).copied();
            if running.unwrap_or(0).saturating_add(started) >= max {
                return false;
            }
        }
        if let Some(rate) = limit.starts_per_second {
            let since = now.saturating_sub(RATE_WINDOW_MS);
            let recent = self.keyed.starts.get(&limit.key).map_or(0, |starts| {
                starts.len() - starts.partition_point(|&at| at <= since)
            });
            if (recent as u32).saturating_add(started) >= rate {
                return false;
            }
        }
        true
    }

    /// Records an attempt of a limited key's job started at `at`; forgets
    /// the start times of keys idle for a whole window.
    fn note_start(&mut self, key: String, at: Millis) {
        let idle = at.saturating_sub(RATE_WINDOW_MS);
        for _ in 0..FORGET_PER_EVENT {
            match self.index.latest_start.first() {
                Some((latest, _)) if *latest <= idle => {
                    let (_, key) = self.index.latest_start.pop_first().expect("present");
                    self.keyed.starts.remove(&key);
                }
                _ => break,
            }
        }
        let starts = self.keyed.starts.entry(key.clone()).or_default();
        if let Some(&latest) = starts.back() {
            self.index.latest_start.remove(&(latest, key.clone()));
        }
        starts.push_back(at);
        if starts.len() > KEY_LIMIT_MAX as usize {
            starts.pop_front();
        }
        let latest = *starts.back().expect("just pushed");
        self.index.latest_start.insert((latest, key));
    }

    /// Gives uniqueness key `key` to `job` until `until`; forgets holds
    /// that ended by `at`.
    fn hold_unique(&mut self, key: &str, job: JobId, until: Millis, at: Millis) {
        for _ in 0..FORGET_PER_EVENT {
            match self.index.unique_until.first() {
                Some((end, _)) if *end <= at => {
                    let (_, ended) = self.index.unique_until.pop_first().expect("present");
                    self.keyed.uniques.remove(&ended);
                }
                _ => break,
            }
        }
        if let Some(old) = self
            .keyed
            .uniques
            .insert(key.to_owned(), Hold { job, until })
        {
            self.index.unique_until.remove(&(old.until, key.to_owned()));
        }
        self.index.unique_until.insert((until, key.to_owned()));
    }

    /// After an ended attempt failed: retry after a backoff, or fail the job.
    fn fail_attempt(&mut self, id: JobId, failure: Failure, at: Millis, effects: &mut Vec<Effect>) {
        let config = &self.config;
        let job = self.jobs.get_mut(&id).expect("caller checked");
        if let Some(current) = job.attempts.last_mut() {
            current.outcome = Some(failure.code.clone());
            current.message = Some(failure.message.clone());
        }
        let made = job.attempts.len() as u32;
        let retryable = RETRYABLE_CODES.contains(&failure.code.as_str());
        if retryable && made < job.spec.max_attempts {
            let backoff = config
                .backoff_base_ms
                .saturating_mul(1u64 << (made - 1).min(32))
                .min(config.backoff_max_ms);
            let not_before = at.saturating_add(backoff);
            set_state(&mut self.index.counts, job, JobState::Queued);
            job.not_before = Some(not_before);
            self.index.delayed.insert((not_before, id));
            self.retries_total += 1;
            return;
        }
        job.error = Some(failure);
        let state = if retryable {
            JobState::Dead
        } else {
            JobState::Failed
        };
        self.settle(id, state, at, effects);
    }

    /// Moves a job to a terminal state, then carries out what that means
    /// for the DAG jobs waiting on it (see [`crate::dag`]), on a work list.
    fn settle(&mut self, id: JobId, state: JobState, at: Millis, effects: &mut Vec<Effect>) {
        self.settle_one(id, state, at, effects);
        if !self.dags.children.contains_key(&id) && !self.dags.nodes.contains_key(&id) {
            return;
        }
        let mut ended = vec![(id, state)];
        // DAGs cancelled whole by this cascade: their jobs are all handled.
        let mut cancelled_dags = BTreeSet::new();
        while let Some((id, state)) = ended.pop() {
            let children = self.dags.children.get(&id).cloned().unwrap_or_default();
            if state == JobState::Succeeded {
                for child in children {
                    let Some(left) = self.dags.waiting.get_mut(&child) else {
                        continue;
                    };
                    *left = left.saturating_sub(1);
                    if *left == 0 {
                        self.dags.waiting.remove(&child);
                        if let Some(job) = self.jobs.get(&child)
                            && job.state == JobState::Queued
                        {
                            self.index
                                .enqueue(ready_key(self.order, job, child), self.keyed.key(child));
                            effects.push(Effect::WorkAvailable);
                        }
                    }
                }
                continue;
            }
            // A failure: the whole DAG of a `cancel_dag` job, and each
            // waiting child by its own DAG's policy.
            let mut doomed: Vec<(JobId, &str)> = Vec::new();
            let mut cancel_dag = |dag_id: DagId, doomed: &mut Vec<(JobId, &str)>| {
                if let Some(dag) = self.dags.dags.get(&dag_id)
                    && dag.on_failure == OnFailure::CancelDag
                    && cancelled_dags.insert(dag_id)
                {
                    doomed.extend(dag.jobs.iter().map(|&job| (job, "dag_cancelled")));
                    return true;
                }
                false
            };
            if let Some(node) = self.dags.nodes.get(&id) {
                cancel_dag(node.dag, &mut doomed);
            }
            for child in children {
                let Some(node) = self.dags.nodes.get(&child) else {
                    continue;
                };
                let whole = (self.dags.dags.get(&node.dag))
                    .is_some_and(|dag| dag.on_failure == OnFailure::CancelDag);
                if !whole {
                    doomed.push((child, "parent_failed"));
                } else {
                    cancel_dag(node.dag, &mut doomed);
                }
            }
            for (job, code) in doomed {
                let unfinished = self.jobs.get(&job).is_some_and(|j| !j.state.is_terminal());
                if !unfinished {
                    continue;
                }
                let failure = Failure {
                    code: code.into(),
                    message: format!("job {id} ended {}", state.name()),
                };
                self.cancel_one(job, Some(failure), at, effects);
                ended.push((job, JobState::Cancelled));
            }
        }
    }

    /// Cancels job `id` if it has not finished (with `error`, when a DAG's
    /// failure is the reason).
    fn cancel(&mut self, id: JobId, error: Option<Failure>, at: Millis, effects: &mut Vec<Effect>) {
        if self.cancel_stop(id, at, effects) {
            if error.is_some() {
                self.jobs.get_mut(&id).expect("present").error = error;
            }
            self.settle(id, JobState::Cancelled, at, effects);
        }
    }

    /// [`cancel`](Self::cancel) without the DAG cascade (the caller runs it).
    fn cancel_one(
        &mut self,
        id: JobId,
        error: Option<Failure>,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        if self.cancel_stop(id, at, effects) {
            if error.is_some() {
                self.jobs.get_mut(&id).expect("present").error = error;
            }
            self.settle_one(id, JobState::Cancelled, at, effects);
        }
    }

    /// Stops a running job's attempt or takes a queued job out of line;
    /// false if the job is gone or finished.
    fn cancel_stop(&mut self, id: JobId, at: Millis, effects: &mut Vec<Effect>) -> bool {
        let Some(job) = self.jobs.get(&id) else {
            return false;
        };
        match job.state {
            JobState::Running => {
                let attempt = job.attempts.last().expect("running has an attempt");
                let (worker, number) = (attempt.worker.clone(), attempt.number);
                self.end_attempt(id, number, at, effects);
                let job = self.jobs.get_mut(&id).expect("present");
                let current = job.attempts.last_mut().expect("present");
                current.outcome = Some("cancelled".into());
                effects.push(Effect::Stop {
                    worker,
                    id,
                    attempt: number,
                });
            }
            JobState::Queued if self.dags.waiting.remove(&id).is_some() => {}
            JobState::Queued => self.unqueue(id),
            _ => return false,
        }
        true
    }

    /// How many of a DAG job's parents have not succeeded (a purged one
    /// counts as succeeded: only finished jobs are purged, and a failed
    /// one already acted on its children).
    fn unsucceeded_parents(&self, id: JobId) -> u32 {
        let Some(node) = self.dags.nodes.get(&id) else {
            return 0;
        };
        (node.parents.iter())
            .filter(|parent| {
                self.state_of(**parent)
                    .is_some_and(|state| state != JobState::Succeeded)
            })
            .count() as u32
    }

    #[allow(clippy::too_many_arguments)]
    fn create_dag(
        &mut self,
        id: DagId,
        on_failure: OnFailure,
        nodes: &[DagNode],
        request: Option<RequestId>,
        key: &Option<String>,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        // A journal is decoded, not trusted: a DAG id or job already in a
        // DAG, or a job that does not exist, leaves the event without
        // effect on it.
        if self.dags.dags.contains_key(&id) {
            return;
        }
        let nodes: Vec<&DagNode> = (nodes.iter())
            .filter(|node| self.holds(node.id) && !self.dags.nodes.contains_key(&node.id))
            .collect();
        self.dags.next = self.dags.next.max(id.saturating_add(1));
        let jobs: Vec<JobId> = nodes.iter().map(|node| node.id).collect();
        self.dags.dags.insert(
            id,
            Dag {
                on_failure,
                created_at: at,
                left: jobs.len() as u64,
                jobs,
                key: key.clone(),
            },
        );
        if let Some(key) = key {
            self.dags.keys.insert(key.clone(), id);
        }
        for node in &nodes {
            self.dags.nodes.insert(
                node.id,
                Node {
                    dag: id,
                    name: node.name.clone(),
                    parents: node.parents.clone(),
                    outputs: node.outputs,
                },
            );
            for &parent in &node.parents {
                self.dags.children.entry(parent).or_default().push(node.id);
            }
        }
        if let (Some(request), Some(first)) = (request, nodes.first()) {
            self.remember_request(request, first.id, at, REQUESTS_MAX);
        }
        // Jobs with a parent that has not succeeded leave the line; one
        // whose parent already failed is cancelled at once.
        let mut failed = Vec::new();
        for node in &nodes {
            let unfinished = self.unsucceeded_parents(node.id);
            if unfinished == 0 || self.state_of(node.id) != Some(JobState::Queued) {
                continue;
            }
            self.unqueue(node.id);
            self.dags.waiting.insert(node.id, unfinished);
            for parent in &node.parents {
                if let Some(state) = self.state_of(*parent)
                    && state.is_terminal()
                    && state != JobState::Succeeded
                {
                    failed.push((*parent, state));
                }
            }
        }
        for (parent, state) in failed {
            // Replays the parent's failure for its new children.
            let children = self.dags.children.get(&parent).cloned().unwrap_or_default();
            for child in children {
                if self.dags.nodes.get(&child).is_some_and(|n| n.dag == id) {
                    let failure = Failure {
                        code: "parent_failed".into(),
                        message: format!("job {parent} ended {}", state.name()),
                    };
                    self.cancel(child, Some(failure), at, effects);
                }
            }
        }
    }

    /// Forgets a purged job's DAG records (and the DAG with its last job).
    fn forget_dag_job(&mut self, id: JobId) {
        self.dags.waiting.remove(&id);
        let Some(node) = self.dags.nodes.remove(&id) else {
            return;
        };
        for parent in &node.parents {
            if let Some(children) = self.dags.children.get_mut(parent) {
                children.retain(|&child| child != id);
                if children.is_empty() {
                    self.dags.children.remove(parent);
                }
            }
        }
        if let Some(dag) = self.dags.dags.get_mut(&node.dag) {
            dag.left = dag.left.saturating_sub(1);
            if dag.left == 0 {
                let dag = self.dags.dags.remove(&node.dag).expect("present");
                if let Some(key) = dag.key {
                    self.dags.keys.remove(&key);
                }
            }
        }
    }

    /// Moves a job to a terminal state.
    fn settle_one(&mut self, id: JobId, state: JobState, at: Millis, effects: &mut Vec<Effect>) {
        let job = self.jobs.get_mut(&id).expect("caller checked");
        set_state(&mut self.index.counts, job, state);
        job.finished_at = Some(at);
        job.checkpoint = None;
        self.index.finished.insert((at, id));
        effects.push(Effect::Settled { id, state });
        if let Some(name) = self.index.fired_by.remove(&id)
            && let Some(schedule) = self.schedules.get_mut(&name)
        {
            schedule.active.remove(&id);
        }
    }

    /// The jobs `filter` matches that `action` would change, by id (only
    /// the named ones when the filter names ids).
    fn bulk_matches<'a>(
        &'a self,
        action: BulkAction,
        filter: &'a JobFilter,
    ) -> impl Iterator<Item = (JobId, Facts<'a>)> + 'a {
        let named: Box<dyn Iterator<Item = (JobId, Held<'a>)>> = match &filter.ids {
            Some(ids) => Box::new(
                ids.iter()
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .filter_map(|&id| Some((id, self.held(id)?))),
            ),
            None => self.scan(Bound::Unbounded, false),
        };
        named
            .filter(move |(_, held)| action.applies_to(held.state()))
            .filter_map(|(id, held)| Some((id, held.facts()?)))
            .filter(move |(id, job)| filter_matches(filter, *id, job))
    }

    /// Job `id` as it is held.
    fn held(&self, id: JobId) -> Option<Held<'_>> {
        match self.jobs.get(&id) {
            Some(job) => Some(Held::Live(job)),
            None => self.done.get(&id).map(Held::Done),
        }
    }

    /// Every job held, finished or not, by id: from the first after `past`
    /// up, or from the last before it down (`newest_first`).
    fn scan(
        &self,
        past: Bound<JobId>,
        newest_first: bool,
    ) -> Box<dyn Iterator<Item = (JobId, Held<'_>)> + '_> {
        let done = |(&id, done)| (id, Held::Done(done));
        if newest_first {
            let range = (Bound::Unbounded, past);
            Box::new(Merge {
                a: (self.jobs.range(range).rev())
                    .map(|(&id, job)| (id, Held::Live(job)))
                    .peekable(),
                b: self.done.range(range).rev().map(done).peekable(),
                descending: true,
            })
        } else {
            let range = (past, Bound::Unbounded);
            Box::new(Merge {
                a: (self.jobs.range(range))
                    .map(|(&id, job)| (id, Held::Live(job)))
                    .peekable(),
                b: self.done.range(range).map(done).peekable(),
                descending: false,
            })
        }
    }

    /// Jobs finished in the `window_ms` before `now`: how many, and the
    /// percentiles of their time from submission to the end.
    fn recent(&self, now: Millis, window_ms: u64) -> Recent {
        let since = now.saturating_sub(window_ms);
        let mut took: Vec<u64> = self
            .index
            .finished
            .range((since, 0)..)
            .rev()
            .take(RECENT_SCAN_MAX)
            .filter_map(|&(at, id)| Some(at.saturating_sub(self.done.get(&id)?.submitted_at()?)))
            .collect();
        // Two selections, not a sort: this runs every second for each open
        // dashboard, on the master's thread.
        let mut percentile = |p: usize| {
            let at = (took.len() * p / 100).min(took.len().checked_sub(1)?);
            Some(*took.select_nth_unstable(at).1)
        };
        let (p50_ms, p99_ms) = (percentile(50), percentile(99));
        Recent {
            finished: took.len() as u64,
            p50_ms,
            p99_ms,
        }
    }

    /// Removes a queued job from the ready or delayed set.
    fn unqueue(&mut self, id: JobId) {
        let job = self.jobs.get_mut(&id).expect("caller checked");
        match job.not_before.take() {
            Some(at) => {
                self.index.delayed.remove(&(at, id));
            }
            None => self
                .index
                .dequeue(ready_key(self.order, job, id), self.keyed.key(id)),
        }
    }

    /// Answers a read-only query.
    pub fn query(&self, now: Millis, query: &Query) -> Result<Answer, Rejection> {
        match query {
            Query::Job { id } => Ok(Answer::Job(Box::new(self.view(*id, &*self.job(*id)?)))),
            Query::Result { id } => {
                let job = self.job(*id)?;
                match (&job.result, job.state) {
                    (Some(result), _) => Ok(Answer::Result(result.clone())),
                    (None, state) if !state.is_terminal() => reject(
                        codes::JOB_NOT_FINISHED,
                        format!("job {id} is {}", state.name()),
                    ),
                    (None, state) => reject(
                        codes::JOB_NOT_SUCCEEDED,
                        format!("job {id} is {} and has no result", state.name()),
                    ),
                }
            }
            Query::Jobs {
                filter,
                after,
                limit,
                newest_first,
            } => {
                validate_filter(filter)?;
                let limit = (*limit).clamp(1, LIST_LIMIT_MAX) as usize;
                let past = after.map_or(Bound::Unbounded, Bound::Excluded);
                let mut scan = self.scan(past, *newest_first);
                let mut jobs = Vec::new();
                let mut last = None;
                for (id, held) in scan.by_ref().take(LIST_SCAN_MAX) {
                    last = Some(id);
                    // Finished jobs of other states stay packed.
                    if filter.state.is_some_and(|state| state != held.state()) {
                        continue;
                    }
                    let Some(job) = held.facts() else {
                        continue;
                    };
                    if filter_matches(filter, id, &job) {
                        jobs.push(summary(id, &job));
                        if jobs.len() == limit {
                            break;
                        }
                    }
                }
                // The next page continues after the last job looked at
                // (the page filled, or the scan reached its bound), if any
                // job is left to look at.
                let more = scan.next().is_some();
                Ok(Answer::Jobs {
                    jobs,
                    next: if more { last } else { None },
                })
            }
            Query::Bulk { action, filter } => {
                validate_bulk(*action, filter, &self.config)?;
                Ok(Answer::Count(
                    self.bulk_matches(*action, filter).take(BULK_MAX).count() as u64,
                ))
            }
            Query::Recent { window_ms } => Ok(Answer::Recent(self.recent(now, *window_ms))),
            Query::ModuleUse => {
                // Schedules hold their template's module as a job does.
                let mut uses = self.index.modules.clone();
                for schedule in self.schedules.values() {
                    *uses.entry(schedule.spec.job.module).or_default() += 1;
                }
                Ok(Answer::ModuleUse(uses.into_iter().collect()))
            }
            Query::Schedules => Ok(Answer::Schedules(
                self.schedules.values().map(Schedule::view).collect(),
            )),
            Query::Schedule { name } => Ok(Answer::Schedule(Box::new(self.schedule(name)?.view()))),
            Query::Dag { id } => {
                let Some(dag) = self.dags.dags.get(id) else {
                    return reject(codes::DAG_NOT_FOUND, format!("no DAG {id}"));
                };
                let mut counts = [0u64; JobState::COUNT];
                let mut waiting = 0;
                let jobs = (dag.jobs.iter())
                    .map(|job| {
                        let state = self.state_of(*job);
                        if let Some(state) = state {
                            counts[state as usize] += 1;
                        }
                        waiting += u64::from(self.dags.waiting.contains_key(job));
                        let node = self.dags.nodes.get(job);
                        let name = node.map_or(String::new(), |n| n.name.clone());
                        let parents = node.map_or(Vec::new(), |n| n.parents.clone());
                        (*job, name, state, parents)
                    })
                    .collect();
                Ok(Answer::Dag(Box::new(DagView {
                    id: *id,
                    on_failure: dag.on_failure,
                    created_at: dag.created_at,
                    counts,
                    waiting,
                    jobs,
                })))
            }
            Query::Input { id } => Ok(Answer::Input(self.job(*id)?.spec.input.clone())),
            Query::Stats => Ok(Answer::Stats(self.stats())),
            Query::Workers => Ok(Answer::Workers(
                self.workers
                    .iter()
                    .map(|(id, w)| WorkerView {
                        id: id.clone(),
                        slots: w.slots,
                        running: w.running.len() as u32,
                        last_seen: w.last_seen,
                    })
                    .collect(),
            )),
            Query::Tokens => Ok(Answer::Tokens(self.tokens.values().cloned().collect())),
            Query::Finished {
                ids,
                output_max,
                output_total,
            } => self.finished(ids, *output_max, *output_total),
        }
    }

    /// Answers [`Query::Finished`].
    fn finished(
        &self,
        ids: &[JobId],
        output_max: u64,
        output_total: u64,
    ) -> Result<Answer, Rejection> {
        if ids.len() > FINISHED_IDS_MAX {
            return reject(
                codes::UNDECODABLE,
                format!("asked about {} jobs; at most {FINISHED_IDS_MAX}", ids.len()),
            );
        }
        let mut room = output_total;
        let mut finished = Vec::new();
        for &id in ids {
            let job = match self.job(id) {
                Ok(job) if job.state.is_terminal() => job,
                Ok(_) => continue,
                Err(unknown) => {
                    finished.push(Finished {
                        id,
                        state: None,
                        error: Some(Failure {
                            code: unknown.code,
                            message: unknown.message,
                        }),
                        output: None,
                        output_bytes: None,
                    });
                    continue;
                }
            };
            let size = job.result.as_ref().map(|r| r.len() as u64);
            let output = match &job.result {
                Some(result) if size <= Some(output_max.min(room)) => {
                    room -= result.len() as u64;
                    Some(result.clone())
                }
                _ => None,
            };
            finished.push(Finished {
                id,
                state: Some(job.state),
                error: job.error.clone(),
                output,
                output_bytes: size,
            });
        }
        Ok(Answer::Finished(finished))
    }

    /// Counters over the whole state.
    pub fn stats(&self) -> Stats {
        Stats {
            jobs: self.index.counts,
            submitted_total: self.submitted_total,
            attempts_total: self.attempts_total,
            retries_total: self.retries_total,
            workers: self.workers.len() as u64,
            result_bytes: self.index.result_bytes,
        }
    }

    fn view(&self, id: JobId, job: &Job) -> JobView {
        JobView {
            id,
            module: job.spec.module,
            state: job.state,
            priority: job.spec.priority,
            max_attempts: job.spec.max_attempts,
            timeout_ms: job.spec.timeout_ms,
            idempotency_key: job.spec.idempotency_key.clone(),
            submitted_at: job.submitted_at,
            finished_at: job.finished_at,
            not_before: job.not_before,
            attempts: job.attempts.clone(),
            error: job.error.clone(),
            result_bytes: job.result.as_ref().map(|r| r.len() as u64),
            input_bytes: job.spec.input.len() as u64,
            has_checkpoint: job.checkpoint.is_some(),
            options: self.keyed.options.get(&id).cloned().unwrap_or_default(),
            dag: (self.dags.nodes.get(&id)).map(|node| (node.dag, node.name.clone())),
            parents: (self.dags.nodes.get(&id)).map_or(Vec::new(), |node| node.parents.clone()),
            waiting: self.dags.waiting.contains_key(&id),
        }
    }
}

/// Where a snapshot is written: a buffer, or a count of its bytes.
trait Sink {
    fn put<T: Serialize + ?Sized>(&mut self, value: &T);
    fn raw(&mut self, bytes: &[u8]);
    /// Bytes written so far.
    fn len(&self) -> usize;
}

impl Sink for Vec<u8> {
    fn put<T: Serialize + ?Sized>(&mut self, value: &T) {
        let out = std::mem::take(self);
        *self = postcard::to_extend(value, out).expect("postcard encoding into a Vec");
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    fn len(&self) -> usize {
        Vec::len(self)
    }
}

/// Bytes a [`Sink`] would have been given.
struct Count(usize);

impl Sink for Count {
    fn put<T: Serialize + ?Sized>(&mut self, value: &T) {
        let size = postcard::ser_flavors::Size::default();
        self.0 +=
            postcard::serialize_with_flavor(value, size).expect("postcard measures any value");
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }

    fn len(&self) -> usize {
        self.0
    }
}

/// A master being restored from a snapshot given in parts, in order
/// ([`feed`](Restoring::feed) each, then [`finish`](Restoring::finish)):
/// what [`Master::restore`] does with the whole, without ever holding the
/// whole. Each job and request id is decoded as soon as its bytes are
/// all there; a part that ends within one keeps those bytes for the next.
///
/// The snapshot's layout is [`Master::write_part`]'s: the version, the
/// state's head and job count, the jobs (each its id and record; finished
/// ones are packed as they are read, so each is decoded once and a
/// snapshot is checked whole), the tail, then, by version, the tokens (2),
/// the request ids (3: their count, then each), the keys (4), the
/// schedules and DAGs (5).
#[derive(Debug, Default)]
pub struct Restoring {
    stage: Stage,
    version: u8,
    master: Master,
    /// The index entries of the finished jobs read so far.
    done: Index,
    last: Option<JobId>,
    /// The start of an item the parts so far end within.
    pending: Vec<u8>,
    /// `pending` is decoded again once it is this long: twice what it was
    /// when it last fell short, so an item as large as many parts (a big
    /// map of keys) costs a few decodings, not one per part.
    retry_at: usize,
}

/// What [`Restoring`] reads next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Stage {
    #[default]
    Version,
    Head,
    Jobs(usize),
    Tail,
    Tokens,
    RequestCount,
    Requests(usize),
    Keyed,
    Schedules,
    Dags,
    End,
}

fn undecodable(error: postcard::Error) -> Rejection {
    Rejection::new(codes::UNDECODABLE, format!("cannot decode: {error}"))
}

/// The value `bytes` start with and the bytes after it; `None` if they
/// end within it.
fn take<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<Option<(T, &'a [u8])>, Rejection> {
    match postcard::take_from_bytes(bytes) {
        Ok(taken) => Ok(Some(taken)),
        Err(postcard::Error::DeserializeUnexpectedEnd) => Ok(None),
        Err(error) => Err(undecodable(error)),
    }
}

impl Restoring {
    /// Reads the next part.
    pub fn feed(&mut self, part: &[u8]) -> Result<(), Rejection> {
        if self.pending.is_empty() {
            let used = self.decode(part)?;
            self.keep(&part[used..]);
            return Ok(());
        }
        self.pending.extend_from_slice(part);
        if self.pending.len() >= self.retry_at {
            self.decode_pending()?;
        }
        Ok(())
    }

    fn decode_pending(&mut self) -> Result<(), Rejection> {
        let pending = std::mem::take(&mut self.pending);
        let used = self.decode(&pending)?;
        self.keep(&pending[used..]);
        Ok(())
    }

    /// Keeps `rest`, the start of an item, for the next part.
    fn keep(&mut self, rest: &[u8]) {
        self.pending = rest.to_vec();
        self.retry_at = rest.len().saturating_mul(2);
    }

    /// The master the parts fed make up.
    pub fn finish(mut self) -> Result<Master, Rejection> {
        if !self.pending.is_empty() {
            self.decode_pending()?;
        }
        if self.stage != Stage::End {
            return Err(match self.stage {
                Stage::Version => Rejection::new(codes::UNDECODABLE, "an empty snapshot"),
                _ => undecodable(postcard::Error::DeserializeUnexpectedEnd),
            });
        }
        self.master.rebuild_index(self.done);
        Ok(self.master)
    }

    /// Decodes what `bytes` hold whole; how many bytes that took.
    fn decode(&mut self, bytes: &[u8]) -> Result<usize, Rejection> {
        let mut used = 0;
        while self.stage != Stage::End {
            match self.step(&bytes[used..])? {
                Some(rest) => used = bytes.len() - rest.len(),
                None => return Ok(used),
            }
        }
        let after = bytes.len() - used;
        // Version 1 was written by `encode`, which ignores trailing bytes.
        if self.version >= 2 && after > 0 {
            return Err(Rejection::new(
                codes::UNDECODABLE,
                format!("{after} bytes after the snapshot"),
            ));
        }
        Ok(bytes.len())
    }

    /// Decodes the next item from `bytes`: the bytes after it, or `None`
    /// if they end within it.
    fn step<'a>(&mut self, bytes: &'a [u8]) -> Result<Option<&'a [u8]>, Rejection> {
        // The value taken, or `Ok(None)` when `bytes` end within it.
        macro_rules! taken {
            ($take:expr) => {
                match $take? {
                    Some(taken) => taken,
                    None => return Ok(None),
                }
            };
        }
        let master = &mut self.master;
        let (stage, rest) = match self.stage {
            Stage::Version => {
                let Some((&version, rest)) = bytes.split_first() else {
                    return Ok(None);
                };
                if !(1..=SNAPSHOT_VERSION).contains(&version) {
                    return Err(Rejection::new(
                        codes::UNKNOWN_VERSION,
                        format!(
                            "snapshot version {version}, this master reads 1 to {SNAPSHOT_VERSION}"
                        ),
                    ));
                }
                self.version = version;
                (Stage::Head, rest)
            }
            Stage::Head => {
                let (head, rest) = taken!(take::<Head>(bytes));
                let (count, rest) = taken!(take::<usize>(rest));
                *master = Master {
                    config: head.config,
                    next_id: head.next_id,
                    next_seq: head.next_seq,
                    ..Master::new()
                };
                (Stage::Jobs(count), rest)
            }
            Stage::Jobs(0) => (Stage::Tail, bytes),
            Stage::Jobs(left) => {
                let (id, record) = taken!(take::<JobId>(bytes));
                let (job, rest) = taken!(take::<Job>(record));
                if self.last.is_some_and(|last| last >= id) {
                    return Err(Rejection::new(
                        codes::UNDECODABLE,
                        format!("job {id} out of order in the snapshot"),
                    ));
                }
                self.last = Some(id);
                if job.state.is_terminal() {
                    self.done.add_done(id, &job);
                    let record = &record[..record.len() - rest.len()];
                    master.done.insert(id, Done::of(&job, record));
                } else {
                    master.jobs.insert(id, Box::new(job));
                }
                (Stage::Jobs(left - 1), rest)
            }
            Stage::Tail => {
                let (tail, rest) = taken!(take::<Tail>(bytes));
                master.workers = tail.workers;
                master.submitted_total = tail.submitted_total;
                master.attempts_total = tail.attempts_total;
                master.retries_total = tail.retries_total;
                (self.after(1, Stage::Tokens), rest)
            }
            Stage::Tokens => {
                let (tokens, rest) = taken!(take(bytes));
                master.tokens = tokens;
                (self.after(2, Stage::RequestCount), rest)
            }
            Stage::RequestCount => {
                let (count, rest) = taken!(take::<usize>(bytes));
                (Stage::Requests(count), rest)
            }
            Stage::Requests(0) => (self.after(3, Stage::Keyed), bytes),
            Stage::Requests(left) => {
                let ((id, request), rest) = taken!(take::<(RequestId, Request)>(bytes));
                // As a map decodes: an id read twice keeps its last.
                master.requests.insert(id, request);
                (Stage::Requests(left - 1), rest)
            }
            Stage::Keyed => {
                let (keyed, rest) = taken!(take(bytes));
                master.keyed = keyed;
                (self.after(4, Stage::Schedules), rest)
            }
            Stage::Schedules => {
                let (schedules, rest) = taken!(take(bytes));
                master.schedules = schedules;
                (Stage::Dags, rest)
            }
            Stage::Dags => {
                let (dags, rest) = taken!(take(bytes));
                master.dags = dags;
                (Stage::End, rest)
            }
            Stage::End => return Ok(None),
        };
        self.stage = stage;
        Ok(Some(rest))
    }

    /// `next` if the snapshot's version is past `version`, else the end.
    fn after(&self, version: u8, next: Stage) -> Stage {
        if self.version > version {
            next
        } else {
            Stage::End
        }
    }
}

/// Where the next part of a snapshot written in parts
/// ([`Master::snapshot_part`]) starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SnapshotCursor {
    /// At its beginning.
    #[default]
    Start,
    /// At the jobs after this bound.
    Jobs(Bound<JobId>),
    /// At the request ids after this one (`None`: at the first).
    Requests(Option<RequestId>),
    /// At what follows the request ids.
    Rest,
    /// Past its end.
    End,
}

/// The most a part's buffer is allocated with before it is written (a
/// part asked to be larger grows as it is written).
const SNAPSHOT_PART_PRESIZE_MAX: usize = 4 << 20;

/// A job as [`Master::scan`] meets it: unfinished, or finished and
/// still packed.
#[derive(Clone, Copy)]
enum Held<'a> {
    Live(&'a Job),
    Done(&'a Done),
}

impl<'a> Held<'a> {
    fn state(self) -> JobState {
        match self {
            Held::Live(job) => job.state,
            Held::Done(done) => done.state(),
        }
    }

    fn facts(self) -> Option<Facts<'a>> {
        match self {
            Held::Live(job) => Some(Facts::of(job)),
            Held::Done(done) => done.facts(),
        }
    }
}

/// Two iterators ordered by id (both ascending, or both descending) as
/// one; no id is in both.
struct Merge<A: Iterator, B: Iterator> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
    descending: bool,
}

impl<'h, A, B> Iterator for Merge<A, B>
where
    A: Iterator<Item = (JobId, Held<'h>)>,
    B: Iterator<Item = (JobId, Held<'h>)>,
{
    type Item = (JobId, Held<'h>);

    fn next(&mut self) -> Option<Self::Item> {
        let take_a = match (self.a.peek(), self.b.peek()) {
            (Some((a, _)), Some((b, _))) => (a < b) != self.descending,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if take_a { self.a.next() } else { self.b.next() }
    }
}

/// The listing's short form of a job.
fn summary(id: JobId, job: &Facts) -> JobSummary {
    JobSummary {
        id,
        state: job.state,
        attempts: job.attempts,
        submitted_at: job.submitted_at,
        finished_at: job.finished_at,
        module: job.module,
        priority: job.priority,
        error_code: job.error.map(|(code, _)| code.to_owned()),
    }
}

/// Whether job `id` meets every condition of `filter`.
fn filter_matches(filter: &JobFilter, id: JobId, job: &Facts) -> bool {
    let contains = |haystack: &str, needle: &str| {
        haystack
            .as_bytes()
            .windows(needle.len().max(1))
            .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
            || needle.is_empty()
    };
    filter.state.is_none_or(|s| s == job.state)
        && filter.module.is_none_or(|m| m == job.module)
        && filter.priority.is_none_or(|p| p == job.priority)
        && filter.from.is_none_or(|from| job.submitted_at >= from)
        && filter.to.is_none_or(|to| job.submitted_at <= to)
        && filter.ids.as_ref().is_none_or(|ids| ids.contains(&id))
        && filter.error.as_deref().is_none_or(|text| {
            job.error
                .is_some_and(|(code, message)| contains(code, text) || contains(message, text))
        })
}

/// What listings, filters and bulk changes read of a job. A packed job
/// gives it without unpacking: its record is read in place up to the
/// error ([`Packed`]), strings borrowed, the rest skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Facts<'a> {
    state: JobState,
    module: Digest,
    priority: i32,
    submitted_at: Millis,
    finished_at: Option<Millis>,
    attempts: u32,
    /// Code and message.
    error: Option<(&'a str, &'a str)>,
}

impl<'a> Facts<'a> {
    fn of(job: &'a Job) -> Self {
        Facts {
            state: job.state,
            module: job.spec.module,
            priority: job.spec.priority,
            submitted_at: job.submitted_at,
            finished_at: job.finished_at,
            attempts: job.attempts.len() as u32,
            error: (job.error.as_ref()).map(|e| (e.code.as_str(), e.message.as_str())),
        }
    }
}

/// A [`Job`]'s record read in place, field for field up to its error (a
/// unit test checks the two agree): postcard has no field names, so the
/// order is the format.
#[derive(Deserialize)]
struct Packed<'a> {
    #[serde(borrow)]
    spec: PackedSpec<'a>,
    state: JobState,
    submitted_at: Millis,
    finished_at: Option<Millis>,
    _not_before: Option<Millis>,
    _lease_until: Option<Millis>,
    _seq: u64,
    #[serde(borrow)]
    attempts: Vec<PackedAttempt<'a>>,
    #[serde(borrow)]
    error: Option<PackedFailure<'a>>,
}

/// The first fields of a [`Job`]'s record, read in place.
#[derive(Deserialize)]
struct PackedHead<'a> {
    #[serde(borrow)]
    _spec: PackedSpec<'a>,
    _state: JobState,
    submitted_at: Millis,
}

/// [`JobSpec`] read in place.
#[derive(Deserialize)]
struct PackedSpec<'a> {
    module: Digest,
    _input: &'a [u8],
    _timeout_ms: u64,
    _memory_bytes: Option<u64>,
    _max_attempts: u32,
    priority: i32,
    #[serde(borrow)]
    _idempotency_key: Option<&'a str>,
}

/// [`Attempt`] read in place (only counted).
#[derive(Deserialize)]
struct PackedAttempt<'a> {
    _number: u32,
    _worker: &'a str,
    _started_at: Millis,
    _ended_at: Option<Millis>,
    #[serde(borrow)]
    _outcome: Option<&'a str>,
    #[serde(borrow)]
    _message: Option<&'a str>,
    _duration_ms: Option<u64>,
    _log_tail: &'a str,
}

/// [`Failure`] read in place.
#[derive(Deserialize)]
struct PackedFailure<'a> {
    code: &'a str,
    message: &'a str,
}

/// Checks a job's spec against the configuration.
fn validate_spec(config: &Config, spec: &JobSpec) -> Result<(), Rejection> {
    if spec.max_attempts == 0 || spec.max_attempts > config.attempts_max {
        return reject(
            codes::INVALID_JOB,
            format!("max_attempts must be 1 to {}", config.attempts_max),
        );
    }
    if spec.timeout_ms == 0 || spec.timeout_ms > config.timeout_ms_max {
        return reject(
            codes::INVALID_JOB,
            format!("timeout_ms must be 1 to {}", config.timeout_ms_max),
        );
    }
    if spec.input.len() as u64 > config.input_bytes_max {
        return reject(
            codes::INPUT_TOO_LARGE,
            format!(
                "input of {} bytes, the limit is {}",
                spec.input.len(),
                config.input_bytes_max
            ),
        );
    }
    if let Some(key) = &spec.idempotency_key
        && (key.is_empty() || key.len() > IDEMPOTENCY_KEY_BYTES_MAX)
    {
        return reject(
            codes::INVALID_JOB,
            format!("idempotency keys are 1 to {IDEMPOTENCY_KEY_BYTES_MAX} bytes"),
        );
    }
    Ok(())
}

fn validate_options(options: &JobOptions) -> Result<(), Rejection> {
    let key = |field: &str, key: &str| {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return reject(
                codes::INVALID_JOB,
                format!("{field} must be 1 to {KEY_BYTES_MAX} bytes"),
            );
        }
        Ok(())
    };
    if let Some(limit) = &options.limit {
        key("limit.key", &limit.key)?;
        if limit.running_max.is_none() && limit.starts_per_second.is_none() {
            return reject(
                codes::INVALID_JOB,
                "a key limit needs running_max or starts_per_second",
            );
        }
        let fields = [
            ("limit.running_max", limit.running_max),
            ("limit.starts_per_second", limit.starts_per_second),
        ];
        for (field, value) in fields {
            if value.is_some_and(|value| !(1..=KEY_LIMIT_MAX).contains(&value)) {
                return reject(
                    codes::INVALID_JOB,
                    format!("{field} must be 1 to {KEY_LIMIT_MAX}"),
                );
            }
        }
    }
    if let Some(unique) = &options.unique {
        key("unique.key", &unique.key)?;
        if !(1..=UNIQUE_WINDOW_MS_MAX).contains(&unique.window_ms) {
            return reject(
                codes::INVALID_JOB,
                format!("unique.window_ms must be 1 to {UNIQUE_WINDOW_MS_MAX}"),
            );
        }
    }
    Ok(())
}

fn validate_filter(filter: &JobFilter) -> Result<(), Rejection> {
    if filter
        .error
        .as_ref()
        .is_some_and(|t| t.len() > FILTER_TEXT_BYTES_MAX)
    {
        return reject(
            codes::INVALID_FILTER,
            format!("error: at most {FILTER_TEXT_BYTES_MAX} bytes"),
        );
    }
    if filter
        .ids
        .as_ref()
        .is_some_and(|ids| ids.len() > FILTER_IDS_MAX)
    {
        return reject(
            codes::INVALID_FILTER,
            format!("ids: at most {FILTER_IDS_MAX}"),
        );
    }
    Ok(())
}

fn validate_bulk(action: BulkAction, filter: &JobFilter, config: &Config) -> Result<(), Rejection> {
    validate_filter(filter)?;
    if let BulkAction::Retry { attempts } = action
        && (attempts == 0 || attempts > config.attempts_max)
    {
        return reject(
            codes::INVALID_FILTER,
            format!("attempts must be 1 to {}", config.attempts_max),
        );
    }
    Ok(())
}

fn ready_key(order: Order, job: &Job, id: JobId) -> Place {
    match order {
        Order::Priority => (-(job.spec.priority as i64), job.seq, id),
        Order::Fifo => (0, job.seq, id),
    }
}

fn set_state(counts: &mut [u64; JobState::COUNT], job: &mut Job, state: JobState) {
    counts[job.state as usize] -= 1;
    counts[state as usize] += 1;
    job.state = state;
}

fn ignored(reason: String) -> Decision {
    Decision {
        events: Vec::new(),
        reply: Reply::Ignored { reason },
    }
}

/// The last `max` bytes of `text`, cut at a character boundary.
fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

fn validate_token(record: &TokenRecord) -> Result<(), Rejection> {
    let id_ok = !record.id.is_empty()
        && record.id.len() <= TOKEN_ID_BYTES_MAX
        && record
            .id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !id_ok {
        return reject(
            codes::INVALID_TOKEN,
            format!("a token id is 1 to {TOKEN_ID_BYTES_MAX} letters, digits or dashes"),
        );
    }
    if record.name.len() > TOKEN_NAME_BYTES_MAX {
        return reject(
            codes::INVALID_TOKEN,
            format!("a token name is at most {TOKEN_NAME_BYTES_MAX} bytes"),
        );
    }
    let mut seen = BTreeSet::new();
    for scope in &record.scopes {
        if !TOKEN_SCOPES.contains(&scope.as_str()) || !seen.insert(scope) {
            return reject(
                codes::INVALID_TOKEN,
                format!("unknown or repeated scope {scope:?}: use read, submit or admin"),
            );
        }
    }
    if seen.is_empty() {
        return reject(codes::INVALID_TOKEN, "a token needs at least one scope");
    }
    Ok(())
}

fn validate_config(config: &Config) -> Result<(), Rejection> {
    let positive = [
        ("queue_max", config.queue_max),
        ("timeout_ms_max", config.timeout_ms_max),
        ("worker_ttl_ms", config.worker_ttl_ms),
        ("attempts_max", config.attempts_max as u64),
    ];
    for (name, value) in positive {
        if value == 0 {
            return reject(codes::INVALID_JOB, format!("{name} must be positive"));
        }
    }
    // Durations are added to times: bounded, they can never overflow one.
    let durations = [
        ("timeout_ms_max", config.timeout_ms_max),
        ("worker_ttl_ms", config.worker_ttl_ms),
        ("retention_ms", config.retention_ms),
        ("backoff_base_ms", config.backoff_base_ms),
        ("backoff_max_ms", config.backoff_max_ms),
        ("lease_grace_ms", config.lease_grace_ms),
    ];
    for (name, value) in durations {
        if value > CONFIG_DURATION_MS_MAX {
            return reject(
                codes::INVALID_JOB,
                format!("{name} is at most {CONFIG_DURATION_MS_MAX} ms (a year)"),
            );
        }
    }
    if config.attempts_max > ATTEMPTS_MAX_MAX {
        return reject(
            codes::INVALID_JOB,
            format!("attempts_max is at most {ATTEMPTS_MAX_MAX}"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod token_tests {
    //! Tokens are journaled state: created and revoked by events, kept in
    //! snapshots, and the first snapshot format (no tokens) still restores.
    use super::*;
    use crate::scenarios::token;

    fn run(master: &mut Master, now: Millis, command: Command) -> Result<(), Rejection> {
        let decision = master.decide(now, &command)?;
        for event in &decision.events {
            master.apply(event);
        }
        Ok(())
    }

    fn tokens(master: &Master) -> Vec<TokenRecord> {
        match master.query(0, &Query::Tokens).unwrap() {
            Answer::Tokens(tokens) => tokens,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn create_revoke_and_snapshot() {
        let mut master = Master::new();
        run(&mut master, 5, Command::CreateToken(token("a", &["read"]))).unwrap();
        run(
            &mut master,
            6,
            Command::CreateToken(token("b", &["admin", "submit"])),
        )
        .unwrap();
        let exists = run(&mut master, 7, Command::CreateToken(token("a", &["read"])));
        assert_eq!(exists.unwrap_err().code, codes::TOKEN_EXISTS);
        let listed = tokens(&master);
        assert_eq!(listed.len(), 2);
        assert_eq!(
            listed[0].created_at, 5,
            "the master's decision time, not the caller's"
        );
        let restored = Master::restore(&master.snapshot()).unwrap();
        assert_eq!(tokens(&restored), listed);
        run(&mut master, 8, Command::RevokeToken { id: "a".into() }).unwrap();
        assert_eq!(tokens(&master).len(), 1);
        let gone = run(&mut master, 9, Command::RevokeToken { id: "a".into() });
        assert_eq!(gone.unwrap_err().code, codes::TOKEN_NOT_FOUND);
    }

    #[test]
    fn invalid_tokens_are_refused_with_a_reason() {
        let master = Master::new();
        for record in [
            token("", &["read"]),
            token("has space", &["read"]),
            token(&"x".repeat(TOKEN_ID_BYTES_MAX + 1), &["read"]),
            token("a", &[]),
            token("a", &["read", "read"]),
            token("a", &["root"]),
            TokenRecord {
                name: "n".repeat(TOKEN_NAME_BYTES_MAX + 1),
                ..token("a", &["read"])
            },
        ] {
            let error = master
                .decide(0, &Command::CreateToken(record.clone()))
                .unwrap_err();
            assert_eq!(error.code, codes::INVALID_TOKEN, "{record:?}");
        }
    }

    #[test]
    fn first_format_snapshots_still_restore_without_tokens() {
        let mut master = Master::new();
        let submit = crate::scenarios::submit(1, crate::scenarios::spec(1, b"x"));
        run(&mut master, 1, submit).unwrap();
        // Version 1 was `encode(&master)` when that wrote format byte 1.
        let old_format = master.encode_state(vec![1]);
        let restored = Master::restore(&old_format).unwrap();
        assert_eq!(restored.stats(), master.stats());
        assert!(tokens(&restored).is_empty());
        let mut trailing = master.snapshot();
        trailing.push(0);
        assert_eq!(
            Master::restore(&trailing).unwrap_err().code,
            codes::UNDECODABLE
        );
        assert_eq!(
            Master::restore(&[SNAPSHOT_VERSION + 1]).unwrap_err().code,
            codes::UNKNOWN_VERSION
        );
    }
}

#[cfg(test)]
mod request_tests {
    //! Request ids: one job per submission however often it arrives,
    //! forgotten after their time or beyond their count, kept in snapshots.
    use super::*;
    use crate::scenarios::{request, spec, submit};

    const T: Millis = 1_000_000;

    fn run(master: &mut Master, now: Millis, command: Command) -> Result<Reply, Rejection> {
        let decision = master.decide(now, &command)?;
        for event in &decision.events {
            master.apply(event);
        }
        Ok(decision.reply)
    }

    fn submitted(id: JobId) -> Result<Reply, Rejection> {
        Ok(Reply::Submitted {
            id,
            existing: false,
        })
    }

    #[test]
    fn the_same_request_twice_is_one_job_and_different_ones_are_two() {
        let mut master = Master::new();
        assert_eq!(run(&mut master, T, submit(1, spec(1, b"a"))), submitted(1));
        // The retry of a forward: the first answer, nothing new.
        let decision = master.decide(T + 5, &submit(1, spec(1, b"a"))).unwrap();
        assert!(decision.events.is_empty(), "{decision:?}");
        assert_eq!(Ok(decision.reply), submitted(1));
        // Two requests with the same content are two jobs.
        assert_eq!(
            run(&mut master, T + 6, submit(2, spec(1, b"a"))),
            submitted(2)
        );
        assert_eq!(master.stats().submitted_total, 2);
        // A remembered request is answered even when a new one would not be.
        run(
            &mut master,
            T + 7,
            Command::Configure(Config {
                queue_max: 2,
                ..Config::default()
            }),
        )
        .unwrap();
        assert_eq!(
            run(&mut master, T + 8, submit(3, spec(1, b"b")))
                .unwrap_err()
                .code,
            codes::QUEUE_FULL
        );
        assert_eq!(
            run(&mut master, T + 9, submit(1, spec(1, b"a"))),
            submitted(1)
        );
    }

    #[test]
    fn request_ids_are_purged_after_their_time() {
        let mut master = Master::new();
        run(&mut master, T, submit(1, spec(1, b"a"))).unwrap();
        // Decided exactly TTL before the purge's cut: kept.
        let second = T + REQUEST_PURGE_PERIOD_MS;
        run(&mut master, second, submit(2, spec(1, b"b"))).unwrap();
        // Past the TTL but within the purge period: still remembered.
        let due = T + REQUEST_TTL_MS + REQUEST_PURGE_PERIOD_MS;
        assert!(
            master
                .decide(due - 1, &Command::Tick)
                .unwrap()
                .events
                .is_empty()
        );
        assert_eq!(
            master
                .decide(due - 1, &submit(1, spec(1, b"a")))
                .unwrap()
                .events,
            []
        );
        // One event forgets every id past its time, and only those.
        let tick = master.decide(due, &Command::Tick).unwrap();
        assert_eq!(
            tick.events,
            [Event {
                at: due,
                kind: EventKind::RequestsExpired {
                    before: due - REQUEST_TTL_MS
                },
            }]
        );
        for event in &tick.events {
            master.apply(event);
        }
        assert_eq!(master.requests.len(), 1, "{:?}", master.requests);
        // A forgotten id is a new submission; the other is still known.
        assert_eq!(
            run(&mut master, due + 1, submit(1, spec(1, b"a"))),
            submitted(3)
        );
        assert_eq!(
            run(&mut master, due + 2, submit(2, spec(1, b"b"))),
            submitted(2)
        );
        assert!(
            master
                .decide(due + 3, &Command::Tick)
                .unwrap()
                .events
                .is_empty()
        );
    }

    #[test]
    fn beyond_the_count_bound_the_oldest_ids_are_forgotten() {
        let mut master = Master::new();
        for (seq, at) in [(5, T + 2), (6, T), (7, T + 1)] {
            master.remember_request(request(seq), seq, at, 2);
        }
        // 6 was decided first: it goes, whatever its id.
        let kept: Vec<_> = master.requests.iter().map(|(r, _)| r.seq).collect();
        assert_eq!(kept, [5, 7]);
        master.remember_request(request(8), 8, T + 3, 2);
        let kept: Vec<_> = master.requests.iter().map(|(r, _)| r.seq).collect();
        assert_eq!(kept, [5, 8]);
    }

    #[test]
    fn a_snapshot_keeps_the_request_ids_and_older_versions_have_none() {
        let mut master = Master::new();
        run(&mut master, T, submit(1, spec(1, b"a"))).unwrap();
        run(&mut master, T + 1, submit(2, spec(1, b"b"))).unwrap();
        let mut restored = Master::restore(&master.snapshot()).unwrap();
        assert_eq!(restored, master, "the table and its index");
        assert_eq!(
            run(&mut restored, T + 2, submit(2, spec(1, b"b"))),
            submitted(2)
        );
        assert_eq!(restored.stats().submitted_total, 2);
        // Expiry works from the restored index too.
        let due = T + 1 + REQUEST_TTL_MS + REQUEST_PURGE_PERIOD_MS;
        run(&mut restored, due, Command::Tick).unwrap();
        assert!(restored.requests.is_empty());

        // Version 2: the state and the tokens, no request ids.
        let mut version_2 = master.encode_state(vec![2]);
        version_2 = postcard::to_extend(&master.tokens, version_2).unwrap();
        let mut old = Master::restore(&version_2).unwrap();
        assert!(old.requests.is_empty());
        assert_eq!(old.stats(), master.stats());
        assert_eq!(run(&mut old, T + 2, submit(2, spec(1, b"b"))), submitted(3));
    }

    #[test]
    fn events_of_format_1_replay_without_request_ids() {
        let spec = spec(1, b"a");
        // Format 1's `Submitted { id, spec }`, and a kind both formats share.
        let submitted = postcard::to_extend(&(7u64, 1u32, 3u64, &spec), vec![1]).unwrap();
        let cancelled = postcard::to_extend(&(8u64, 6u32, 3u64), vec![1]).unwrap();
        let expected = Event {
            at: 7,
            kind: EventKind::Submitted {
                id: 3,
                spec: spec.clone(),
                request: None,
                options: JobOptions::default(),
            },
        };
        assert_eq!(decode_event(&submitted), Ok(expected.clone()));
        assert_eq!(
            decode_event(&cancelled),
            Ok(Event {
                at: 8,
                kind: EventKind::Cancelled { id: 3 }
            })
        );
        // Format 1 had no `RequestsExpired`; a plain decoder refuses format 1.
        let expired = postcard::to_extend(&(9u64, 13u32, 1u64), vec![1]).unwrap();
        assert_eq!(decode_event(&expired).unwrap_err().code, codes::UNDECODABLE);
        assert_eq!(
            decode::<Event>(&submitted).unwrap_err().code,
            codes::UNKNOWN_VERSION
        );
        // The kinds' indexes the format-1 reader relies on.
        let now = |kind| encode(&Event { at: 7, kind })[2];
        assert_eq!(now(expected.kind.clone()), 1);
        assert_eq!(now(EventKind::RequestsExpired { before: 0 }), 13);
        let mut master = Master::new();
        master.apply(&decode_event(&submitted).unwrap());
        assert!(master.requests.is_empty());
        assert_eq!(master.stats().submitted_total, 1);
    }

    #[test]
    fn events_of_format_2_replay_without_options() {
        let spec = spec(1, b"a");
        let request = Some(RequestId { origin: 4, seq: 5 });
        // Format 2's `Submitted { id, spec, request }`.
        let submitted = postcard::to_extend(&(7u64, 1u32, 3u64, &spec, request), vec![2]).unwrap();
        let retried = postcard::to_extend(&(8u64, 14u32, 3u64, 4u32), vec![2]).unwrap();
        assert_eq!(
            decode_event(&submitted),
            Ok(Event {
                at: 7,
                kind: EventKind::Submitted {
                    id: 3,
                    spec: spec.clone(),
                    request,
                    options: JobOptions::default(),
                },
            })
        );
        assert_eq!(
            decode_event(&retried),
            Ok(Event {
                at: 8,
                kind: EventKind::Retried {
                    id: 3,
                    max_attempts: 4
                }
            })
        );
        assert_eq!(
            decode::<Event>(&submitted).unwrap_err().code,
            codes::UNKNOWN_VERSION
        );
        // This format's `Submitted` is format 2's followed by the options.
        let now = encode(&Event {
            at: 7,
            kind: EventKind::Submitted {
                id: 3,
                spec,
                request,
                options: JobOptions::default(),
            },
        });
        assert_eq!(now[1..now.len() - 2], submitted[1..]);
    }

    #[test]
    fn a_snapshot_keeps_what_keys_hold_and_version_3_has_none() {
        use crate::scenarios::{limited, poll, submit_with, unique};
        let mut master = Master::new();
        let options = JobOptions {
            unique: unique("u", 60_000).unique,
            ..limited("k", Some(1), Some(5))
        };
        run(&mut master, T, submit_with(1, spec(1, b"a"), options)).unwrap();
        let limit = limited("k", Some(1), Some(5));
        run(&mut master, T, submit_with(2, spec(1, b"b"), limit)).unwrap();
        run(&mut master, T + 1, poll("w", 4)).unwrap();
        let mut restored = Master::restore(&master.snapshot()).unwrap();
        assert_eq!(restored, master, "holds, starts and their indexes");
        // The key's hold and its running attempt survive the snapshot.
        let again = submit_with(3, spec(1, b"c"), unique("u", 60_000));
        assert_eq!(
            run(&mut restored, T + 2, again.clone()),
            Ok(Reply::Submitted {
                id: 1,
                existing: true
            })
        );
        assert_eq!(restored.startable(T + 2, 4), Vec::<JobId>::new());

        // Version 3: no options; the jobs run without limits.
        let mut version_3 = master.encode_state(vec![3]);
        version_3 = postcard::to_extend(&master.tokens, version_3).unwrap();
        version_3 = postcard::to_extend(&master.requests, version_3).unwrap();
        let mut old = Master::restore(&version_3).unwrap();
        assert_eq!(old.keyed, Keyed::default());
        assert_eq!(old.startable(T + 2, 4), vec![2]);
        assert_eq!(run(&mut old, T + 2, again), submitted(3));
    }

    #[test]
    fn events_of_format_3_replay_as_they_are_and_format_4_is_pinned() {
        // Format 3 had the kinds up to `Retried`, encoded as today.
        let retried = [3, 8, 14, 3, 4];
        assert_eq!(
            decode_event(&retried),
            Ok(Event {
                at: 8,
                kind: EventKind::Retried {
                    id: 3,
                    max_attempts: 4
                }
            })
        );
        assert_eq!(
            decode::<Event>(&retried).unwrap_err().code,
            codes::UNKNOWN_VERSION
        );
        // The new kinds' bytes: a change to them fails here, not in a
        // journal someone replays.
        let fired = Event {
            at: 9,
            kind: EventKind::ScheduleFired {
                name: "s".into(),
                tick: 8,
                id: 3,
                next: Some(10),
            },
        };
        assert_eq!(encode(&fired), [4, 9, 16, 1, b's', 8, 3, 1, 10]);
        let created = Event {
            at: 9,
            kind: EventKind::DagCreated {
                dag: 1,
                on_failure: OnFailure::CancelDag,
                nodes: vec![DagNode {
                    id: 3,
                    name: "a".into(),
                    parents: vec![2],
                    outputs: true,
                }],
                request: None,
                idempotency_key: None,
            },
        };
        assert_eq!(
            encode(&created),
            [4, 9, 23, 1, 1, 1, 3, 1, b'a', 1, 2, 1, 0, 0]
        );
        for event in [fired, created] {
            assert_eq!(decode_event(&encode(&event)), Ok(event));
        }
    }

    #[test]
    fn a_version_4_snapshot_restores_without_schedules_or_dags() {
        use crate::scenarios::create_schedule;
        let mut master = Master::new();
        run(&mut master, T, submit(1, spec(1, b"a"))).unwrap();
        let every = Every::Interval { ms: 1_000 };
        run(
            &mut master,
            T,
            create_schedule("s", every, Overlap::Skip, 0),
        )
        .unwrap();
        let mut version_4 = master.encode_state(vec![4]);
        version_4 = postcard::to_extend(&master.tokens, version_4).unwrap();
        version_4 = postcard::to_extend(&master.requests, version_4).unwrap();
        version_4 = postcard::to_extend(&master.keyed, version_4).unwrap();
        let old = Master::restore(&version_4).unwrap();
        assert!(old.schedules.is_empty());
        assert_eq!(old.dags.dags.len(), 0);
        assert_eq!(old.jobs, master.jobs);
        // And the current version keeps both.
        let now = Master::restore(&master.snapshot()).unwrap();
        assert_eq!(now, master);
        assert_eq!(master.snapshot()[0], 5);
    }
}

#[cfg(test)]
mod done_tests {
    //! Finished jobs are packed: the snapshot's bytes do not change, and
    //! a packed job reads, retries and purges as an unpacked one did.
    use super::*;
    use crate::scenarios::{failed, finish, poll, spec, submit};

    fn run(master: &mut Master, now: Millis, command: Command) -> Reply {
        let decision = master.decide(now, &command).unwrap();
        for event in &decision.events {
            master.apply(event);
        }
        decision.reply
    }

    /// Jobs 1 and 3 succeed, 2 fails, 4 runs, 5 waits.
    fn mixed() -> Master {
        let mut master = Master::new();
        for n in 1..=5 {
            run(&mut master, 10, submit(n, spec(n as u8, b"in")));
        }
        run(&mut master, 20, poll("w", 4));
        let ok = || Outcome::Succeeded(b"out".to_vec());
        run(&mut master, 30, finish(1, 1, "w", ok()));
        run(&mut master, 30, finish(2, 1, "w", failed("job_error")));
        run(&mut master, 30, finish(3, 1, "w", ok()));
        master
    }

    /// The parts of `master`'s snapshot of about `bytes_max` each.
    fn parts(master: &Master, bytes_max: usize) -> Vec<Vec<u8>> {
        let mut cursor = SnapshotCursor::Start;
        let mut parts = Vec::new();
        loop {
            let part = master.snapshot_part(&mut cursor, bytes_max);
            if part.is_empty() {
                return parts;
            }
            parts.push(part);
            assert!(parts.len() < 10_000, "the parts never end");
        }
    }

    #[test]
    fn a_snapshot_in_parts_is_the_snapshot() {
        let mut master = mixed();
        // Request ids in two runs, to be split across parts too.
        for n in 6..=9 {
            run(&mut master, 40 + n, submit(n, spec(1, b"more")));
        }
        let whole = master.snapshot();
        for bytes_max in [0, 1, 2, 7, 50, 300, 1 << 20] {
            let parts = parts(&master, bytes_max);
            assert_eq!(parts.concat(), whole, "parts of {bytes_max}");
            if bytes_max <= 1 {
                // A part ends after the job or request id that reached
                // the size: one each (and the head, tail and rest).
                assert!(parts.len() > 9 + 9, "{}", parts.len());
            }
        }
        assert_eq!(parts(&Master::new(), 1).concat(), Master::new().snapshot());
        assert_eq!(parts(&master, usize::MAX), [whole]);
    }

    #[test]
    fn a_snapshot_restores_from_parts_of_any_size() {
        let mut master = mixed();
        for n in 6..=9 {
            run(&mut master, 40 + n, submit(n, spec(1, b"more")));
        }
        let whole = master.snapshot();
        for size in [1, 3, 100, whole.len()] {
            let restored = crate::testing::restore_in_parts(&whole, size).unwrap();
            assert_eq!(restored, master, "parts of {size}");
        }
        // Cut short, or with a byte too many: refused, as whole.
        let short = crate::testing::restore_in_parts(&whole[..whole.len() - 1], 4);
        assert_eq!(short.unwrap_err().code, codes::UNDECODABLE);
        let long = [&whole[..], &[0]].concat();
        let refusal = crate::testing::restore_in_parts(&long, 4).unwrap_err();
        assert_eq!(refusal.message, "1 bytes after the snapshot");
        // A machine refused a part is as it was, and starts again.
        let mut machine = crate::Machine::default();
        assert!(
            machine
                .init_part(&whole[..10], false, Order::Priority)
                .is_ok()
        );
        assert!(
            machine
                .init_part(&[0xFF; 10], false, Order::Priority)
                .is_err()
        );
        assert_eq!(machine.master(), &Master::new());
        machine.init_part(&whole, true, Order::Priority).unwrap();
        assert_eq!(machine.master(), &master);
    }

    #[test]
    fn a_machine_starts_its_parts_again_after_an_apply() {
        let mut machine = crate::Machine::init(Some(&mixed().snapshot())).unwrap();
        let first = machine.snapshot_part(10);
        assert_eq!(first[0], SNAPSHOT_VERSION);
        let decision = machine.decide(50, &crate::encode(&submit(6, spec(1, b"x"))));
        let (events, _) = decision.unwrap();
        machine.apply(&events).unwrap();
        let mut parts = Vec::new();
        loop {
            let part = machine.snapshot_part(10);
            if part.is_empty() {
                break;
            }
            parts.push(part);
        }
        assert_eq!(
            parts.concat(),
            machine.snapshot(),
            "of the new state, whole"
        );
        // And the next call starts another.
        assert_eq!(machine.snapshot_part(10)[0], SNAPSHOT_VERSION);
    }

    /// What the state's derived `Serialize` wrote when every job was one
    /// map of `Job`s.
    #[derive(Serialize)]
    struct Derived<'a> {
        config: &'a Config,
        next_id: JobId,
        next_seq: u64,
        jobs: BTreeMap<JobId, Box<Job>>,
        workers: &'a BTreeMap<String, Worker>,
        submitted_total: u64,
        attempts_total: u64,
        retries_total: u64,
    }

    fn derived(master: &Master) -> Vec<u8> {
        let mut jobs = master.jobs.clone();
        for (&id, done) in &master.done {
            jobs.insert(id, Box::new(done.unpack().unwrap()));
        }
        postcard::to_allocvec(&Derived {
            config: &master.config,
            next_id: master.next_id,
            next_seq: master.next_seq,
            jobs,
            workers: &master.workers,
            submitted_total: master.submitted_total,
            attempts_total: master.attempts_total,
            retries_total: master.retries_total,
        })
        .unwrap()
    }

    #[test]
    fn finished_jobs_are_packed_and_snapshots_keep_their_bytes() {
        let master = mixed();
        assert_eq!(master.done.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(master.jobs.keys().copied().collect::<Vec<_>>(), [4, 5]);
        assert_eq!(master.encode_state(Vec::new()), derived(&master));
        // Measured exactly before it is written: its buffer never grows.
        let snapshot = master.snapshot();
        assert_eq!(snapshot.capacity(), snapshot.len());
        let restored = Master::restore(&snapshot).unwrap();
        assert_eq!(restored, master);
        assert_eq!(restored.stats(), master.stats());
        assert_eq!(restored.index, master.index);
    }

    #[test]
    fn a_packed_job_gives_the_facts_its_job_gives() {
        let mut master = mixed();
        let keyed = JobSpec {
            idempotency_key: Some("key".into()),
            memory_bytes: Some(1 << 20),
            priority: -3,
            ..spec(6, b"input")
        };
        run(&mut master, 40, submit(6, keyed));
        run(&mut master, 41, Command::Cancel { id: 6 });
        assert_eq!(master.done.len(), 4);
        for done in master.done.values() {
            let job = done.unpack().unwrap();
            assert_eq!(done.facts(), Some(Facts::of(&job)));
            assert_eq!(done.state(), job.state);
            assert_eq!(done.submitted_at(), Some(job.submitted_at));
        }
        assert_eq!(
            master.done[&2].facts().unwrap().error.unwrap().0,
            "job_error"
        );
        assert_eq!(master.done[&6].facts().unwrap().priority, -3);
    }

    #[test]
    fn a_packed_job_reads_as_it_was() {
        let master = mixed();
        let Answer::Job(view) = master.query(40, &Query::Job { id: 2 }).unwrap() else {
            panic!()
        };
        assert_eq!(view.state, JobState::Failed);
        assert_eq!(view.error.unwrap().code, "job_error");
        assert_eq!(view.attempts[0].log_tail, "done\n");
        assert_eq!(
            master.query(40, &Query::Result { id: 1 }).unwrap(),
            Answer::Result(b"out".to_vec())
        );
        let listing = |state| Query::Jobs {
            filter: JobFilter {
                state,
                ..JobFilter::default()
            },
            after: None,
            limit: 10,
            newest_first: true,
        };
        let ids = |answer| match answer {
            Answer::Jobs { jobs, .. } => jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            ids(master.query(40, &listing(None)).unwrap()),
            [5, 4, 3, 2, 1]
        );
        let succeeded = Some(JobState::Succeeded);
        assert_eq!(ids(master.query(40, &listing(succeeded)).unwrap()), [3, 1]);
        let Answer::Recent(recent) = master.query(40, &Query::Recent { window_ms: 100 }).unwrap()
        else {
            panic!()
        };
        assert_eq!((recent.finished, recent.p50_ms), (3, Some(20)));
    }

    #[test]
    fn a_retried_job_unpacks_and_a_purged_one_is_gone() {
        let mut master = mixed();
        let retry = Command::Bulk {
            action: BulkAction::Retry { attempts: 1 },
            filter: JobFilter {
                state: Some(JobState::Failed),
                ..JobFilter::default()
            },
        };
        assert_eq!(run(&mut master, 40, retry), Reply::Bulk { changed: 1 });
        assert_eq!(master.jobs[&2].state, JobState::Queued);
        assert!(!master.done.contains_key(&2));
        master.apply(&Event {
            at: 50,
            kind: EventKind::Purged { id: 1 },
        });
        assert!(!master.holds(1));
        assert_eq!(master.stats().jobs[JobState::Succeeded as usize], 1);
        assert_eq!(master.stats().result_bytes, 3);
        assert_eq!(
            master.query(50, &Query::Job { id: 1 }).unwrap_err().code,
            codes::JOB_EXPIRED
        );
        let restored = Master::restore(&master.snapshot()).unwrap();
        assert_eq!(restored, master);
        assert_eq!(restored.index, master.index);
    }

    #[test]
    fn results_over_their_bound_purge_the_oldest_until_under_it() {
        // Jobs 1 and 3 hold 3 bytes each, 2 none; all finished at 30.
        let mut master = mixed();
        let config = Config {
            results_bytes_total_max: 3,
            ..master.config.clone()
        };
        run(&mut master, 40, Command::Configure(config));
        run(&mut master, 50, Command::Tick);
        assert_eq!(master.done.keys().copied().collect::<Vec<_>>(), [2, 3]);
        assert_eq!(master.stats().result_bytes, 3);
        // Under the bound, nothing more goes.
        run(&mut master, 60, Command::Tick);
        assert_eq!(master.done.len(), 2);
    }

    #[test]
    fn a_snapshot_with_jobs_out_of_order_is_refused() {
        let master = mixed();
        let mut bytes = master.encode_state(vec![1]);
        // Job 2's id in place of job 3's: ids must ascend.
        let head = postcard::to_allocvec(&HeadRef {
            config: &master.config,
            next_id: master.next_id,
            next_seq: master.next_seq,
        })
        .unwrap();
        let first = 1 + head.len() + 1 + 1 + master.done[&1].record().len();
        assert_eq!(bytes[first], 2);
        bytes[first] = 1;
        assert_eq!(
            Master::restore(&bytes).unwrap_err().code,
            codes::UNDECODABLE
        );
    }
}
