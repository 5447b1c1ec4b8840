//! Data locality: a job starts, when it can, on a worker whose node
//! already holds its input blob, without that starving any work.
//!
//! A job's *data blob* ([`Master::data_blob_of`]) is its input blob or,
//! for a DAG's job that reads its parents' outputs, the largest of those:
//! a child goes where its parent wrote, since a worker's cache keeps the
//! outputs its attempts wrote. Below, "input" means that blob.
//!
//! # What the master is told
//!
//! Every poll carries what the worker's node holds ([`Command::Poll`]'s
//! `holds`): the first 8 bytes ([`BlobPrefix`]) of the digests of the
//! blobs in its store, at most [`HOLDS_MAX`], the ones it used last,
//! sorted. Digests are sha256, so their prefixes are uniform: two blobs
//! share one with probability about n²/2⁶⁵, and a false match only costs
//! locality (the worker fetches the blob as it would anyway), never
//! correctness. A list rather than a Bloom filter because a worker holds
//! few inputs (a cache of large blobs) and a list costs 8 bytes per blob
//! held, nothing when it holds none (most polls), never saturates, and
//! compares exactly. The master journals it only when it changed
//! (`WorkerHolds`), keeps it per worker, drops it with the worker
//! (`WorkerLost`) and writes it in snapshots (from version 11), so a
//! master that takes over knows what the one before knew. A list a
//! journal or snapshot holds is decoded, not trusted: it is sorted,
//! deduplicated and cut to [`HOLDS_MAX`] as it is applied or read.
//!
//! # Delay scheduling
//!
//! When worker `W` polls, the ready line is walked in its order
//! (priority, then first come first served) as always, and a job is
//! *passed over* for `W` exactly when all of these hold:
//!
//! * it has a data blob, and `W` does not hold it;
//! * another worker that is live (heard from within `worker_ttl_ms`)
//!   holds it, busy or not: under load every holder is busy at the moment
//!   another polls, and a wait only for free holders never waited;
//! * it joined the line less than `locality_wait_ms` ago (`ready_at`).
//!
//! A job that has a data blob `W` does not hold, younger than the wait and
//! not passed over (no other worker holds it) is taken only into one of `W`'s
//! free slots (its slots minus the attempts it runs, in the master's view),
//! never as prefetch (the room a poll asks for beyond them while jobs are
//! short): whoever runs it fetches it, and fetched into a worker with
//! attempts queued ahead of it, it would churn that worker's cache before it
//! runs and evict what the next jobs find there. Without this rule the
//! master's choices did not show: prefetching workers took whatever was in
//! line, and a simulated cluster with caches (`locality_tests`) found as
//! many inputs in the cache with the wait as without; with it, and the
//! wait for busy holders, far more (BENCHMARKS.md, "locality").
//!
//! The wait counts from joining the line, so a backlog that takes longer
//! than the wait to drain is past it by the time it reaches the front and
//! drains in line order: `--locality-wait` should cover the backlog a
//! cluster keeps when locality matters (BENCHMARKS.md, "locality", has
//! the bench with a wait shorter than its backlog and one that covers
//! it). Counting from when a job reached the front instead needs that
//! moment journaled; not done.
//!
//! Every other job is taken in line order, up to the free slots the poll
//! has. A job `W` holds therefore goes ahead of the earlier jobs passed
//! over, and only of those: jobs are never reordered otherwise. When
//! something may be passed over, a poll looks at the first
//! [`LOCALITY_SCAN_MAX`] startable jobs of the line (or as many as its
//! free slots, if more), so a poll stays cheap; when nothing may be (no
//! job with a data blob in line, no other worker holds anything, or
//! `locality_wait_ms` is 0) it looks at no more than it starts, as
//! without locality.
//!
//! **Bound.** A job is passed over only while it is younger than
//! `locality_wait_ms` in the line: from then on every poll takes it in
//! its place in line. So a ready job within the scan, startable under its
//! key's limits, starts at the latest at the first poll with a free slot
//! after `ready_at + locality_wait_ms` that has no more than its free
//! slots' worth of jobs ahead of it, which is the bound without locality
//! plus the wait (the host polls parked workers again at every tick, a
//! tenth of a second, so a waiting worker does look again). The seeded
//! simulation in the tests checks it on every poll.
//!
//! `ready_at` is state (journaled by the events that put a job in line,
//! snapshotted) and kept only for jobs in line with a data blob; the
//! decision reads time from `now` only, so it is deterministic.
//!
//! # Measured
//!
//! `input_assignments` counts attempts started of jobs with a data
//! blob, `local_assignments` those started on a worker that said it held
//! the input (a count that also moves without waiting, when the line
//! happens to put a job where its data is); both are in
//! [`Stats`] and on the host's `/metrics`.
//!
//! Caveats: a key limit counts a job passed over as if started in the
//! same poll (so a poll may start fewer of a key's jobs than it could,
//! never more), and a worker's free slots are the master's view (slots
//! minus the attempts it runs, prefetched ones included).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::limits::{HOLDS_MAX, LOCALITY_SCAN_MAX};
use crate::master::Master;
use crate::protocol::*;

/// What the master knows of where blobs are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Locality {
    /// What each known worker last said it holds (sorted, distinct, at
    /// most [`HOLDS_MAX`]; a worker that holds nothing has no entry).
    pub(crate) holds: BTreeMap<String, Vec<BlobPrefix>>,
    /// When each job in line with a data blob joined it.
    pub(crate) ready_at: BTreeMap<JobId, Millis>,
    /// Attempts started of jobs with a data blob.
    pub(crate) input_assignments: u64,
    /// Of those, on a worker that said it held the input.
    pub(crate) local_assignments: u64,
}

/// The prefix a worker names blob `digest` by.
pub fn prefix(digest: &Digest) -> BlobPrefix {
    let mut prefix = [0; 8];
    prefix.copy_from_slice(&digest[..8]);
    prefix
}

/// What a node holding `digests` says in its poll: their prefixes,
/// sorted and distinct, the first [`HOLDS_MAX`] given (a node lists the
/// ones it used last first).
pub fn holds_of<'a>(digests: impl IntoIterator<Item = &'a Digest>) -> Vec<BlobPrefix> {
    let mut holds: Vec<BlobPrefix> = digests.into_iter().take(HOLDS_MAX).map(prefix).collect();
    holds.sort_unstable();
    holds.dedup();
    holds
}

/// `holds` sorted, distinct and cut to [`HOLDS_MAX`]: what a journal's
/// or a snapshot's list is taken as.
pub(crate) fn bounded_holds(holds: &[BlobPrefix]) -> Vec<BlobPrefix> {
    let mut holds = holds.to_vec();
    holds.sort_unstable();
    holds.dedup();
    holds.truncate(HOLDS_MAX);
    holds
}

/// Whether `holds` (sorted) names blob `digest`.
pub(crate) fn names(holds: &[BlobPrefix], digest: &Digest) -> bool {
    holds.binary_search(&prefix(digest)).is_ok()
}

/// A snapshot's locality, bounded as a journal's would be.
pub(crate) fn bounded(mut locality: Locality) -> Locality {
    for holds in locality.holds.values_mut() {
        *holds = bounded_holds(holds);
    }
    locality.holds.retain(|_, holds| !holds.is_empty());
    locality
}

impl Master {
    /// The `WorkerHolds` a poll by `worker` saying it holds `holds` is
    /// journaled with, if the master knew otherwise.
    pub(crate) fn worker_holds(&self, worker: &str, holds: &[BlobPrefix]) -> Option<EventKind> {
        let known = self
            .locality
            .holds
            .get(worker)
            .map_or(&[][..], Vec::as_slice);
        (known != holds).then(|| EventKind::WorkerHolds {
            worker: worker.to_owned(),
            holds: holds.to_vec(),
        })
    }

    pub(crate) fn apply_worker_holds(&mut self, worker: &str, holds: &[BlobPrefix]) {
        let holds = bounded_holds(holds);
        // A journal is decoded, not trusted: only a known worker holds.
        if holds.is_empty() || !self.workers.contains_key(worker) {
            self.locality.holds.remove(worker);
        } else {
            self.locality.holds.insert(worker.to_owned(), holds);
        }
    }

    /// The blob job `id`'s place goes by: its input blob, else, for a
    /// DAG's job that reads its parents' outputs, the largest of those
    /// (the first of the largest, in the order the job reads them).
    pub(crate) fn data_blob_of(&self, id: JobId) -> Option<Digest> {
        if let Some(input) = self.input_blob_of(id) {
            return Some(input.digest);
        }
        let node = self.dags.nodes.get(&id).filter(|node| node.outputs)?;
        let mut largest: Option<&NamedBlob> = None;
        for output in (node.parents.iter()).flat_map(|&parent| self.outputs_of(parent)) {
            if largest.is_none_or(|l| output.size > l.size) {
                largest = Some(output);
            }
        }
        largest.map(|blob| blob.digest)
    }

    /// Job `id` joined the line at `at`.
    pub(crate) fn joined_line(&mut self, id: JobId, at: Millis) {
        if self.data_blob_of(id).is_some() {
            self.locality.ready_at.insert(id, at);
        }
    }

    /// Job `id` left the line.
    pub(crate) fn left_line(&mut self, id: JobId) {
        self.locality.ready_at.remove(&id);
    }

    /// Counts an attempt of job `id` started on `worker`.
    pub(crate) fn count_assignment(&mut self, id: JobId, worker: &str) {
        let Some(data) = self.data_blob_of(id) else {
            return;
        };
        let local = (self.locality.holds.get(worker)).is_some_and(|holds| names(holds, &data));
        self.locality.input_assignments += 1;
        self.locality.local_assignments += u64::from(local);
    }

    /// Drops what a snapshot says of workers and jobs it does not hold
    /// otherwise (see [`Master::rebuild_index`]).
    pub(crate) fn retain_locality(&mut self) {
        let workers = &self.workers;
        (self.locality.holds).retain(|worker, _| workers.contains_key(worker));
        let kept: Vec<JobId> = (self.locality.ready_at.keys().copied())
            .filter(|id| {
                (self.jobs.get(id))
                    .is_some_and(|job| job.state == JobState::Queued && job.not_before.is_none())
                    && !self.dags.waiting.contains_key(id)
                    && self.data_blob_of(*id).is_some()
            })
            .collect();
        (self.locality.ready_at).retain(|id, _| kept.binary_search(id).is_ok());
    }

    /// Up to `free` ready jobs to start on `worker`, which holds `holds`
    /// and has `pool`, at `now`: the line's startable jobs in order, but
    /// those passed over for locality (see the module notes).
    pub(crate) fn assignable(
        &self,
        now: Millis,
        worker: &str,
        (holds, pool): (&[BlobPrefix], &WorkerPool),
        free: usize,
    ) -> Vec<JobId> {
        let wait = self.config.locality_wait_ms;
        let ttl = self.config.worker_ttl_ms;
        let live = |state: &crate::workers::Worker| now < state.last_seen.saturating_add(ttl);
        // Only a job in line with a data blob (so in `ready_at`) is ever
        // passed over or kept out of the prefetch room: without one, the
        // poll is what it is without locality, whatever the workers hold.
        if wait == 0 || free == 0 || self.locality.ready_at.is_empty() {
            return self.startable(now, free, pool);
        }
        let alone = !(self.workers.iter()).any(|(other, state)| other != worker && live(state));
        if alone {
            return self.startable(now, free, pool);
        }
        // The other workers a job could wait for: live, holding something.
        let others: Vec<&[BlobPrefix]> = (self.locality.holds.iter())
            .filter(|(other, _)| other.as_str() != worker)
            .filter(|(other, _)| (self.workers.get(*other)).is_some_and(&live))
            .map(|(_, holds)| holds.as_slice())
            .collect();
        // The poller's slots not running an attempt; the rest of `free` is
        // room to prefetch.
        let slots = (self.workers.get(worker)).map_or(free, |state| {
            (state.slots as usize).saturating_sub(state.running.len())
        });
        // Nothing to pass over, and no input to keep out of the prefetch
        // room: look at no more than is started, as without locality.
        if others.is_empty() && free <= slots {
            return self.startable(now, free, pool);
        }
        let place = |id: JobId| {
            let Some(data) = self.data_blob_of(id) else {
                return Place::Here;
            };
            let young =
                (self.locality.ready_at.get(&id)).is_some_and(|&at| now < at.saturating_add(wait));
            if !young || names(holds, &data) {
                Place::Here
            } else if others.iter().any(|other| names(other, &data)) {
                Place::Elsewhere
            } else {
                Place::InASlot
            }
        };
        let mut taken = 0;
        (self
            .startable(now, free.max(LOCALITY_SCAN_MAX), pool)
            .into_iter())
        .filter(|&id| {
            let take = match place(id) {
                Place::Here => true,
                Place::Elsewhere => false,
                Place::InASlot => taken < slots,
            };
            taken += usize::from(take);
            take
        })
        .take(free)
        .collect()
    }
}

/// Where a job in line may start, for a poll ([`Master::assignable`]).
enum Place {
    /// On the poller: it has no data blob, the poller holds it, or it
    /// waited long enough.
    Here,
    /// Not on the poller: another live worker holds its input.
    Elsewhere,
    /// On the poller, but in a free slot rather than as prefetch: no other
    /// worker holds its input, so whichever runs it fetches it; it goes to
    /// a worker about to run it, not to one whose cache the attempts ahead
    /// of it would churn before it runs.
    InASlot,
}

#[cfg(test)]
#[path = "locality_tests.rs"]
mod locality_tests;
