//! Writing the state as a snapshot, whole or in parts.
//!
//! The snapshot's layout is written here and only here
//! ([`Master::write_part`]); `restore` reads it back. Its first part is
//! the bytes a derived `Serialize` of the whole state wrote before
//! finished jobs were packed, so every snapshot version reads the same
//! way, and later parts (tokens, request ids, keys, schedules, DAGs,
//! deployments, grants, recorded calls, blobs, blobs kept, locality,
//! pools) were
//! appended one version at a time ([`SNAPSHOT_VERSION`]).
//!
//! Invariants: the parts of a snapshot written with a [`SnapshotCursor`]
//! are, concatenated, exactly the whole snapshot's bytes, as long as
//! nothing is applied in between; a whole snapshot is measured before it
//! is written ([`Count`]), so its buffer never grows. The index is not
//! written: it is rebuilt on restore.

use crate::limits::SNAPSHOT_PART_PRESIZE_MAX;
use std::collections::BTreeMap;
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::master::Master;
use crate::protocol::*;
use crate::scan::Held;
use crate::workers::Worker;

/// Version byte of snapshots: the state, then API tokens, then request
/// ids, then what keys hold, then schedules and DAGs, then deployments
/// and the jobs submitted by a module name, then egress grants and calls,
/// then recorded calls and the secrets jobs may read, then the jobs'
/// blobs (digests and sizes; its [`JobOptions`] have `input_blob`), then
/// the blobs the cluster keeps, then what workers hold and when jobs with
/// an input blob joined the line (and [`Config`] has `locality_wait_ms`),
/// then workers' pools (and [`JobOptions`] have `labels`); since version
/// 13, jobs' attempts have their [`Usage`]; since version 14, the jobs of
/// namespaces other than the default follow (and [`JobOptions`] and
/// tokens have `namespace`); since version 15, the namespaces' quotas
/// and their fair shares' weights and virtual times follow.
/// Older snapshots are still read: version 14 (no quotas, every weight
/// 1 and every namespace at virtual time 0), version 13 (every job and token in the
/// default namespace or cluster-wide), version 12 (attempts without usage),
/// version 11 (no pools: every worker has
/// the default, and options have no labels), version 10 (no locality: none known,
/// and a [`Config`] without `locality_wait_ms`, read as 0), version 9
/// (no blobs kept but those its jobs and schedules name, which are kept
/// as named), version 8 (no blobs; its [`JobOptions`], in
/// the keys and the schedules, have no `input_blob`), version 7 (no
/// recorded calls or readable secrets; its grants have no `record`),
/// version 6 (no grants or calls),
/// version 5 (no deployments; its [`JobOptions`], in the keys and
/// the schedules, have no `module`), version 4 (no schedules or DAGs),
/// version 3 (no keys), version 2 (tokens, no request ids) and version 1
/// (the state alone, from before tokens existed).
pub const SNAPSHOT_VERSION: u8 = 15;

/// The fields of [`Master`] before its jobs, as its snapshot holds them.
#[derive(Serialize)]
pub(crate) struct HeadRef<'a> {
    pub(crate) config: &'a Config,
    pub(crate) next_id: JobId,
    pub(crate) next_seq: u64,
}

#[derive(Deserialize)]
pub(crate) struct Head {
    pub(crate) config: Config,
    pub(crate) next_id: JobId,
    pub(crate) next_seq: u64,
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
pub(crate) struct Tail {
    pub(crate) workers: BTreeMap<String, Worker>,
    pub(crate) submitted_total: u64,
    pub(crate) attempts_total: u64,
    pub(crate) retries_total: u64,
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

/// Where a snapshot is written: a buffer, or a count of its bytes.
pub(crate) trait Sink {
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

impl Master {
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
                // Tests making an older version's bytes write its records
                // as that version did.
                #[cfg(test)]
                Held::Done(done) if !crate::protocol::legacy::writing_now() => {
                    sink.put(&done.unpack().expect("a packed job decodes"))
                }
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

    /// The snapshot as version 10 wrote it: without the locality, and
    /// with a [`Config`] without `locality_wait_ms` (what tests of older
    /// versions start from; see [`Master::before_locality`]).
    #[cfg(test)]
    pub(crate) fn snapshot_v10(&self) -> Vec<u8> {
        // Its options have no `trace` either.
        let now = crate::protocol::legacy::written_before_trace(|| self.snapshot());
        let config = postcard::to_allocvec(&self.config).expect("postcard encoding into a Vec");
        let wait = postcard::to_allocvec(&self.config.locality_wait_ms).expect("encoded");
        let locality = postcard::to_allocvec(&self.locality).expect("encoded");
        let pools = postcard::to_allocvec(&self.pools).expect("encoded");
        let namespaces = postcard::to_allocvec(&self.namespaces)
            .expect("encoded")
            .len()
            + postcard::to_allocvec(&self.quotas).expect("encoded").len()
            + postcard::to_allocvec(&self.shares).expect("encoded").len();
        let head_end = 1 + config.len();
        [
            &[10][..],
            &now[1..head_end - wait.len()],
            &now[head_end..now.len() - locality.len() - pools.len() - namespaces],
        ]
        .concat()
    }

    /// This master as a snapshot of version 10 or older restores it: no
    /// locality known, and no waiting for it (and no pools).
    #[cfg(test)]
    pub(crate) fn before_locality(&self) -> Master {
        let mut master = self.before_pools();
        master.config.locality_wait_ms = 0;
        master.locality = Default::default();
        master
    }

    /// The snapshot as version 11 wrote it: without the pools, and with
    /// [`JobOptions`] without `labels` (see [`Master::before_pools`]).
    #[cfg(test)]
    pub(crate) fn snapshot_v11(&self) -> Vec<u8> {
        let now = crate::protocol::legacy::written_before_labels(|| self.snapshot());
        let pools = postcard::to_allocvec(&self.pools).expect("encoded");
        let namespaces = postcard::to_allocvec(&self.namespaces)
            .expect("encoded")
            .len()
            + postcard::to_allocvec(&self.quotas).expect("encoded").len()
            + postcard::to_allocvec(&self.shares).expect("encoded").len();
        [&[11][..], &now[1..now.len() - pools.len() - namespaces]].concat()
    }

    /// The snapshot as version 12 wrote it: attempts without their usage
    /// (see [`Master::before_usage`]).
    #[cfg(test)]
    pub(crate) fn snapshot_v12(&self) -> Vec<u8> {
        let now = crate::protocol::legacy::written_before_usage(|| self.snapshot());
        let namespaces = postcard::to_allocvec(&self.namespaces)
            .expect("encoded")
            .len()
            + postcard::to_allocvec(&self.quotas).expect("encoded").len()
            + postcard::to_allocvec(&self.shares).expect("encoded").len();
        [&[12][..], &now[1..now.len() - namespaces]].concat()
    }

    /// The snapshot as version 13 wrote it: no namespaces (see
    /// [`Master::before_namespaces`]).
    #[cfg(test)]
    pub(crate) fn snapshot_v13(&self) -> Vec<u8> {
        let now = crate::protocol::legacy::written_before_namespaces(|| self.snapshot());
        let namespaces = postcard::to_allocvec(&self.namespaces)
            .expect("encoded")
            .len()
            + postcard::to_allocvec(&self.quotas).expect("encoded").len()
            + postcard::to_allocvec(&self.shares).expect("encoded").len();
        [&[13][..], &now[1..now.len() - namespaces]].concat()
    }

    /// The snapshot as version 14 wrote it: no quotas (see
    /// [`Master::before_quotas`]).
    #[cfg(test)]
    pub(crate) fn snapshot_v14(&self) -> Vec<u8> {
        let now = self.snapshot();
        let quotas = postcard::to_allocvec(&self.quotas).expect("encoded").len()
            + postcard::to_allocvec(&self.shares).expect("encoded").len();
        [&[14][..], &now[1..now.len() - quotas]].concat()
    }

    /// This master as a snapshot of version 14 or older restores it: no
    /// namespace has quotas, every weight is 1 and every virtual time 0.
    #[cfg(test)]
    pub(crate) fn before_quotas(&self) -> Master {
        let mut master = self.clone();
        master.quotas = Default::default();
        master.shares = Default::default();
        master
    }

    /// This master as a snapshot of version 13 or older restores it: every
    /// job in the default namespace, every token cluster-wide.
    #[cfg(test)]
    pub(crate) fn before_namespaces(&self) -> Master {
        let mut master = self.before_quotas();
        master.namespaces = Default::default();
        master.index.namespace_result_bytes.clear();
        master.index.default_counts = master.index.counts;
        master.index.namespace_counts.clear();
        master.index.namespace_jobs.clear();
        for token in master.tokens.values_mut() {
            token.namespace = None;
        }
        // Every key in the default namespace, a live job's over a finished
        // one's (as a restore keys them).
        let keys = std::mem::take(&mut master.index.keys);
        let (done, live): (Vec<_>, Vec<_>) =
            (keys.into_iter()).partition(|(_, id)| master.done.contains_key(id));
        for ((_, key), id) in done.into_iter().chain(live) {
            master.index.keys.insert((None, key), id);
        }
        let order = master.order;
        master.with_order(order)
    }

    /// This master as a snapshot of version 12 or older restores it: no
    /// attempt says what it cost.
    #[cfg(test)]
    pub(crate) fn before_usage(&self) -> Master {
        let mut master = self.before_namespaces();
        for job in master.jobs.values_mut() {
            for attempt in &mut job.attempts {
                attempt.usage = None;
            }
        }
        for done in master.done.values_mut() {
            let mut job = done.unpack().expect("a packed job decodes");
            for attempt in &mut job.attempts {
                attempt.usage = None;
            }
            *done = crate::done::Done::pack(&job);
        }
        master
    }

    /// This master as a snapshot of version 11 or older restores it: every
    /// worker in the default pool, and no job asking for labels (and no
    /// attempt's usage).
    #[cfg(test)]
    pub(crate) fn before_pools(&self) -> Master {
        let mut master = self.before_usage();
        master.pools = Default::default();
        for options in master.keyed.options.values_mut() {
            options.labels.clear();
        }
        let order = master.order;
        master.with_order(order)
    }

    /// [`write_state`](Self::write_state) after `out`.
    #[cfg(test)]
    pub(crate) fn encode_state(&self, mut out: Vec<u8>) -> Vec<u8> {
        self.write_state(&mut out);
        out
    }

    /// [`encode_state`](Self::encode_state) as versions before 11 wrote
    /// it: a [`Config`] without `locality_wait_ms` (and attempts without
    /// their usage).
    #[cfg(test)]
    pub(crate) fn encode_state_v10(&self, out: Vec<u8>) -> Vec<u8> {
        let start = out.len();
        let mut bytes = crate::protocol::legacy::written_before_usage(|| self.encode_state(out));
        let config = postcard::to_allocvec(&self.config).expect("postcard encoding into a Vec");
        let wait = postcard::to_allocvec(&self.config.locality_wait_ms).expect("encoded");
        let end = start + config.len();
        bytes.drain(end - wait.len()..end);
        bytes
    }

    /// Writes the snapshot from `cursor` on into `sink`, until it holds
    /// `bytes_max` (at least one byte is always written) or the snapshot
    /// ends, and moves `cursor` to where the next part starts.
    ///
    /// The snapshot's layout is here and only here: the version, the
    /// state's head, its jobs, its tail, the tokens, the request ids
    /// (a map: their count, then each id and request), the keys, the
    /// schedules, the DAGs, the deployments, the egress grants and
    /// calls, the recorded calls with the secrets jobs may read, the
    /// jobs' blobs, the blobs the cluster keeps, the locality, the
    /// workers' pools, the jobs' namespaces, and the namespaces' quotas and
    /// shares.
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
                    sink.put(&self.deployments);
                    sink.put(&self.egress);
                    sink.put(&(&self.tapes, &self.egress.readable));
                    sink.put(&self.blobs);
                    sink.put(&self.registry.kept);
                    sink.put(&self.locality);
                    sink.put(&self.pools);
                    sink.put(&self.namespaces);
                    sink.put(&self.quotas);
                    sink.put(&self.shares);
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
    /// postcard(keys) ++ postcard(schedules) ++ postcard(DAGs) ++
    /// postcard(deployments) ++ postcard(grants and calls) ++
    /// postcard((recorded calls, readable secrets)) ++ postcard(blobs) ++
    /// postcard(kept blobs) ++ postcard(locality) ++ postcard(pools) ++
    /// postcard(namespaces) ++ postcard(quotas) ++ postcard(shares)`.
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
}
