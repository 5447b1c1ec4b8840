//! Data locality: a job starts, when it can, on a worker whose node
//! already holds its input blob, without that starving any work.
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
//! * it has an input blob, and `W` does not hold it;
//! * another worker that is live (heard from within `worker_ttl_ms`) and
//!   has a free slot (fewer attempts running than its slots) holds it;
//! * it joined the line less than `locality_wait_ms` ago (`ready_at`).
//!
//! Every other job is taken in line order, up to the free slots the poll
//! has. A job `W` holds therefore goes ahead of the earlier jobs passed
//! over, and only of those: jobs are never reordered otherwise. When
//! something may be passed over, a poll looks at the first
//! [`LOCALITY_SCAN_MAX`] startable jobs of the line (or as many as its
//! free slots, if more), so a poll stays cheap; when nothing may be (no
//! other free worker holds anything, or `locality_wait_ms` is 0) it looks
//! at no more than it starts, as without locality.
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
//! snapshotted) and kept only for jobs in line with an input blob; the
//! decision reads time from `now` only, so it is deterministic.
//!
//! # Measured
//!
//! `input_assignments` counts attempts started of jobs with an input
//! blob, `local_assignments` those started on a worker that said it held
//! the input (a count that also moves without waiting, when the line
//! happens to put a job where its data is); both are in
//! [`Stats`] and on the host's `/metrics`.
//!
//! Caveats: a key limit counts a job passed over as if started in the
//! same poll (so a poll may start fewer of a key's jobs than it could,
//! never more), and a worker's slots are the master's view (slots minus
//! attempts it runs), not its prefetch room.

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
    /// When each job in line with an input blob joined it.
    pub(crate) ready_at: BTreeMap<JobId, Millis>,
    /// Attempts started of jobs with an input blob.
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

    /// Job `id` joined the line at `at`.
    pub(crate) fn joined_line(&mut self, id: JobId, at: Millis) {
        if self.input_blob_of(id).is_some() {
            self.locality.ready_at.insert(id, at);
        }
    }

    /// Job `id` left the line.
    pub(crate) fn left_line(&mut self, id: JobId) {
        self.locality.ready_at.remove(&id);
    }

    /// Counts an attempt of job `id` started on `worker`.
    pub(crate) fn count_assignment(&mut self, id: JobId, worker: &str) {
        let Some(input) = self.input_blob_of(id) else {
            return;
        };
        let local =
            (self.locality.holds.get(worker)).is_some_and(|holds| names(holds, &input.digest));
        self.locality.input_assignments += 1;
        self.locality.local_assignments += u64::from(local);
    }

    /// Drops what a snapshot says of workers and jobs it does not hold
    /// otherwise (see [`Master::rebuild_index`]).
    pub(crate) fn retain_locality(&mut self) {
        let workers = &self.workers;
        (self.locality.holds).retain(|worker, _| workers.contains_key(worker));
        let (jobs, waiting, blobs) = (&self.jobs, &self.dags.waiting, &self.blobs);
        self.locality.ready_at.retain(|id, _| {
            jobs.get(id)
                .is_some_and(|job| job.state == JobState::Queued && job.not_before.is_none())
                && !waiting.contains_key(id)
                && blobs.get(id).is_some_and(|blobs| blobs.input.is_some())
        });
    }

    /// Up to `free` ready jobs to start on `worker`, which holds `holds`,
    /// at `now`: the line's startable jobs in order, but those passed over
    /// for locality (see the module notes).
    pub(crate) fn assignable(
        &self,
        now: Millis,
        worker: &str,
        holds: &[BlobPrefix],
        free: usize,
    ) -> Vec<JobId> {
        let wait = self.config.locality_wait_ms;
        let ttl = self.config.worker_ttl_ms;
        // The other workers a job could wait for: live, with a free slot,
        // holding something.
        let others: Vec<&[BlobPrefix]> = (self.locality.holds.iter())
            .filter(|(other, _)| other.as_str() != worker)
            .filter(|(other, _)| {
                self.workers.get(*other).is_some_and(|state| {
                    now < state.last_seen.saturating_add(ttl)
                        && (state.running.len() as u64) < u64::from(state.slots)
                })
            })
            .map(|(_, holds)| holds.as_slice())
            .collect();
        if wait == 0 || others.is_empty() || free == 0 {
            return self.startable(now, free);
        }
        let passed_over = |id: JobId| {
            let Some(input) = self.input_blob_of(id) else {
                return false;
            };
            let young =
                (self.locality.ready_at.get(&id)).is_some_and(|&at| now < at.saturating_add(wait));
            young
                && !names(holds, &input.digest)
                && others.iter().any(|other| names(other, &input.digest))
        };
        (self.startable(now, free.max(LOCALITY_SCAN_MAX)).into_iter())
            .filter(|&id| !passed_over(id))
            .take(free)
            .collect()
    }
}

#[cfg(test)]
#[path = "locality_tests.rs"]
mod locality_tests;
