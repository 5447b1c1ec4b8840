//! The table of remembered request ids, held in runs.
//!
//! The master remembers, for every submission that created a job, its
//! [`RequestId`] with the job's id and the decision time ([`Request`]; why:
//! the module notes of [`crate::master`]). Under load that is hundreds of
//! thousands of entries (five minutes of submissions), and as one map
//! entry each, with an index by time, it took about 110 MiB per million:
//! a third of a master holding a million finished jobs, and again in every
//! other copy of the state (BENCHMARKS.md).
//!
//! Submissions mostly arrive in batches, and a batch is one decision: its
//! request ids are consecutive numbers of one origin (a node draws them
//! together), its jobs consecutive ids, its time one. So the table holds
//! **runs**: `len` consecutive ids of one origin that created `len`
//! consecutive jobs at one time, one entry for the whole batch. What it
//! answers, and the map a snapshot holds, are exactly those of one entry
//! per id: every operation is defined per id, and a run is split when an
//! operation takes one id out of its middle.
//!
//! A run of one id costs a little more than a plain entry (about 64
//! bytes against 56, by their sizes); ids submitted one at a
//! time, from several nodes interleaved, each in its own millisecond, make
//! such runs. That is the worst case, and it is bounded by
//! [`REQUESTS_MAX`](crate::limits::REQUESTS_MAX) like the rest.
//!
//! The master's side is here too: a `Submitted` event remembers its id
//! (forgetting the oldest beyond [`REQUESTS_MAX`](crate::limits::REQUESTS_MAX)), and a `Tick` forgets
//! every id past [`REQUEST_TTL_MS`](crate::limits::REQUEST_TTL_MS) in one `RequestsExpired` event once
//! the oldest is a [`REQUEST_PURGE_PERIOD_MS`] overdue. This module does
//! not decide what a remembered submission is answered (see `jobs`).

use crate::limits::{REQUEST_PURGE_PERIOD_MS, REQUEST_TTL_MS};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound;

#[cfg(test)]
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use crate::master::Master;
use crate::protocol::{EventKind, JobId, Millis, RequestId};

/// What the master remembers of a submission's request id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Request {
    /// The job it created.
    pub job: JobId,
    /// When it was decided.
    pub at: Millis,
}

/// `len` consecutive ids of one origin, from the run's key, that created
/// `len` consecutive jobs from `job`, all at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    job: JobId,
    at: Millis,
    len: u32,
}

impl Run {
    /// Whether this run, from `first`, holds `id`.
    fn holds(&self, first: RequestId, id: RequestId) -> bool {
        first.origin == id.origin && id.seq.wrapping_sub(first.seq) < u64::from(self.len)
    }

    /// Whether `id` creating `request` is this run's next (the id after its
    /// last, with the job after its last, at its time): then the run grows
    /// instead of a new one starting.
    fn grows_by(&self, first: RequestId, id: RequestId, request: Request) -> bool {
        first.origin == id.origin
            && self.len < u32::MAX
            && first.seq.checked_add(u64::from(self.len)) == Some(id.seq)
            && self.job.checked_add(u64::from(self.len)) == Some(request.job)
            && self.at == request.at
    }

    /// The request of the id `offset` places after the run's first.
    fn at_offset(&self, offset: u64) -> Request {
        Request {
            job: self.job.wrapping_add(offset),
            at: self.at,
        }
    }
}

/// Request ids and what each created, as a map from [`RequestId`] to
/// [`Request`] (encoded as that map)
/// ordered by decision time as well.
#[derive(Clone, Default)]
pub(crate) struct Requests {
    /// Runs by their first id.
    runs: BTreeMap<RequestId, Run>,
    /// Runs by time, then first id: the oldest id is the first of the
    /// first run.
    by_time: BTreeSet<(Millis, RequestId)>,
    /// Ids held, over all runs.
    len: usize,
}

impl Requests {
    /// Ids held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no id is held.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The run holding `id`: its first id, the run and `id`'s offset in it.
    fn run_of(&self, id: RequestId) -> Option<(RequestId, Run, u64)> {
        let (&first, &run) = self.runs.range(..=id).next_back()?;
        run.holds(first, id)
            .then(|| (first, run, id.seq.wrapping_sub(first.seq)))
    }

    /// What `id` created, if it is remembered.
    pub fn get(&self, id: &RequestId) -> Option<Request> {
        self.run_of(*id)
            .map(|(_, run, offset)| run.at_offset(offset))
    }

    /// Remembers `id` as `request`; returns what it replaces.
    pub fn insert(&mut self, id: RequestId, request: Request) -> Option<Request> {
        // One lookup finds the run holding `id` (a repeat, taken out
        // first) or the one before it; a new id in sequence, as replay
        // and every batch insert them, needs no other.
        let old = match self.runs.range_mut(..=id).next_back() {
            Some((&first, run)) if run.holds(first, id) => self.remove(&id),
            Some((&first, run)) if run.grows_by(first, id, request) => {
                run.len += 1;
                self.len += 1;
                return None;
            }
            _ => None,
        };
        self.len += 1;
        // Now that `id` is held nowhere, the run before it may grow.
        if old.is_some()
            && let Some((&first, run)) = self.runs.range_mut(..id).next_back()
            && run.grows_by(first, id, request)
        {
            run.len += 1;
            return old;
        }
        self.add_run(
            id,
            Run {
                job: request.job,
                at: request.at,
                len: 1,
            },
        );
        old
    }

    fn add_run(&mut self, first: RequestId, run: Run) {
        self.by_time.insert((run.at, first));
        self.runs.insert(first, run);
    }

    fn take_run(&mut self, first: RequestId) -> Option<Run> {
        let run = self.runs.remove(&first)?;
        self.by_time.remove(&(run.at, first));
        Some(run)
    }

    /// Forgets `id`; returns what it had created.
    pub fn remove(&mut self, id: &RequestId) -> Option<Request> {
        let (first, run, offset) = self.run_of(*id)?;
        self.take_run(first);
        self.len -= 1;
        if offset > 0 {
            let len = offset as u32;
            self.add_run(first, Run { len, ..run });
        }
        let after = u64::from(run.len) - offset - 1;
        if after > 0 {
            let next = RequestId {
                origin: id.origin,
                seq: id.seq + 1,
            };
            let job = run.job.wrapping_add(offset + 1);
            let len = after as u32;
            self.add_run(next, Run { job, len, ..run });
        }
        Some(run.at_offset(offset))
    }

    /// When the oldest id held was decided.
    pub fn oldest_at(&self) -> Option<Millis> {
        self.by_time.first().map(|&(at, _)| at)
    }

    /// Forgets the oldest id (by decision time, then id).
    pub fn pop_oldest(&mut self) -> Option<(RequestId, Request)> {
        let &(_, first) = self.by_time.first()?;
        let request = self.remove(&first)?;
        Some((first, request))
    }

    /// Forgets every id decided before `before`.
    pub fn expire_before(&mut self, before: Millis) {
        let kept = self.by_time.split_off(&(before, RequestId::MIN));
        for (_, first) in std::mem::replace(&mut self.by_time, kept) {
            if let Some(run) = self.runs.remove(&first) {
                self.len -= run.len as usize;
            }
        }
    }

    /// Every id and its request, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (RequestId, Request)> + '_ {
        self.iter_after(None)
    }

    /// Every id after `past` (all if `None`) and its request, in id order.
    pub fn iter_after(
        &self,
        past: Option<RequestId>,
    ) -> impl Iterator<Item = (RequestId, Request)> + '_ {
        // From the run holding `past`, or the first after it.
        let from = past
            .and_then(|past| self.runs.range(..=past).next_back())
            .map_or(Bound::Unbounded, |(&first, _)| Bound::Included(first));
        (self.runs.range((from, Bound::Unbounded)))
            .flat_map(|(first, run)| {
                (0..u64::from(run.len)).map(move |offset| {
                    let id = RequestId {
                        origin: first.origin,
                        seq: first.seq + offset,
                    };
                    (id, run.at_offset(offset))
                })
            })
            .filter(move |&(id, _)| past.is_none_or(|past| id > past))
    }
}

/// Equal when they hold the same ids with the same requests, however
/// these are split into runs (a restored table joins what arrived apart).
impl PartialEq for Requests {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for Requests {}

impl fmt::Debug for Requests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// The map a snapshot holds: what tests write to build a snapshot of an
/// older version. A snapshot itself writes the entries one by one
/// (`Master::write_part`) and a restore reads them so (`Restoring`).
impl Master {
    /// Remembers that `request` created `job` at `at`, forgetting the
    /// oldest ids beyond `max`.
    pub(crate) fn remember_request(
        &mut self,
        request: RequestId,
        job: JobId,
        at: Millis,
        max: usize,
    ) {
        // `decide` never repeats an id it remembers, but a journal is
        // decoded, not trusted: a repeat replaces the entry, consistently.
        self.requests.insert(request, Request { job, at });
        while self.requests.len() > max && self.requests.pop_oldest().is_some() {}
    }

    /// The event forgetting the request ids past their time at `now`, when
    /// the oldest is a period overdue.
    pub(crate) fn requests_expired(&self, now: Millis) -> Option<EventKind> {
        let oldest = self.requests.oldest_at()?;
        (oldest.saturating_add(REQUEST_TTL_MS + REQUEST_PURGE_PERIOD_MS) <= now).then(|| {
            EventKind::RequestsExpired {
                before: now.saturating_sub(REQUEST_TTL_MS),
            }
        })
    }

    pub(crate) fn apply_requests_expired(&mut self, before: Millis) {
        self.requests.expire_before(before);
    }
}

#[cfg(test)]
impl Serialize for Requests {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len))?;
        for (id, request) in self.iter() {
            map.serialize_entry(&id, &request)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The table it stands for: one map entry per id, and its index by
    /// time (what the master held before runs).
    #[derive(Default)]
    struct Model {
        map: BTreeMap<RequestId, Request>,
        by_time: BTreeSet<(Millis, RequestId)>,
    }

    impl Model {
        fn insert(&mut self, id: RequestId, request: Request) -> Option<Request> {
            let old = self.map.insert(id, request);
            if let Some(old) = old {
                self.by_time.remove(&(old.at, id));
            }
            self.by_time.insert((request.at, id));
            old
        }

        fn remove(&mut self, id: &RequestId) -> Option<Request> {
            let old = self.map.remove(id)?;
            self.by_time.remove(&(old.at, *id));
            Some(old)
        }

        fn pop_oldest(&mut self) -> Option<(RequestId, Request)> {
            let (_, id) = self.by_time.pop_first()?;
            Some((id, self.map.remove(&id)?))
        }

        fn expire_before(&mut self, before: Millis) {
            let kept = self.by_time.split_off(&(before, RequestId::MIN));
            for (_, id) in std::mem::replace(&mut self.by_time, kept) {
                self.map.remove(&id);
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// A batch: `len` ids of `origin` from `seq`, jobs from `job`, at `at`.
        Batch {
            origin: u64,
            seq: u64,
            job: JobId,
            at: Millis,
            len: u64,
        },
        Remove(u64, u64),
        PopOldest,
        Expire(Millis),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few origins, seqs, jobs and times, so ids meet, overlap, repeat
        // and join.
        prop_oneof![
            4 => (0..3u64, 0..40u64, 0..40u64, 0..6u64, 1..6u64).prop_map(
                |(origin, seq, job, at, len)| Op::Batch { origin, seq, job, at, len }
            ),
            2 => (0..3u64, 0..45u64).prop_map(|(origin, seq)| Op::Remove(origin, seq)),
            1 => Just(Op::PopOldest),
            1 => (0..7u64).prop_map(Op::Expire),
        ]
    }

    fn check(requests: &Requests, model: &Model) {
        assert_eq!(requests.len(), model.map.len());
        assert!(requests.iter().eq(model.map.iter().map(|(&k, &v)| (k, v))));
        assert_eq!(
            requests.oldest_at(),
            model.by_time.first().map(|&(at, _)| at)
        );
        let runs: usize = requests.runs.values().map(|run| run.len as usize).sum();
        assert_eq!(runs, requests.len, "runs add up");
        assert_eq!(requests.runs.len(), requests.by_time.len(), "indexed once");
        // No two runs overlap.
        let mut ends = BTreeMap::new();
        for (first, run) in &requests.runs {
            if let Some(&end) = ends.get(&first.origin) {
                assert!(first.seq >= end, "{first:?} overlaps");
            }
            ends.insert(first.origin, first.seq + u64::from(run.len));
        }
        // From any id on, as the map's range after it.
        for seq in 0..45 {
            let past = RequestId { origin: 1, seq };
            let expected = model.map.range((Bound::Excluded(past), Bound::Unbounded));
            assert!(
                requests
                    .iter_after(Some(past))
                    .eq(expected.map(|(&k, &v)| (k, v)))
            );
        }
        // Its encoding is the map's.
        let bytes = postcard::to_allocvec(requests).unwrap();
        assert_eq!(bytes, postcard::to_allocvec(&model.map).unwrap());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Any sequence of operations answers, orders and encodes as the
        /// plain map and index do.
        #[test]
        fn runs_behave_as_one_entry_per_id(ops in proptest::collection::vec(op(), 1..60)) {
            let mut requests = Requests::default();
            let mut model = Model::default();
            for op in ops {
                match op {
                    Op::Batch { origin, seq, job, at, len } => {
                        for i in 0..len {
                            let id = RequestId { origin, seq: seq + i };
                            let request = Request { job: job + i, at };
                            prop_assert_eq!(requests.insert(id, request), model.insert(id, request));
                        }
                    }
                    Op::Remove(origin, seq) => {
                        let id = RequestId { origin, seq };
                        prop_assert_eq!(requests.remove(&id), model.remove(&id));
                    }
                    Op::PopOldest => prop_assert_eq!(requests.pop_oldest(), model.pop_oldest()),
                    Op::Expire(before) => {
                        requests.expire_before(before);
                        model.expire_before(before);
                    }
                }
                for seq in 0..45 {
                    let id = RequestId { origin: 1, seq };
                    prop_assert_eq!(requests.get(&id), model.map.get(&id).copied());
                }
                check(&requests, &model);
            }
        }
    }

    #[test]
    fn a_batch_is_one_run_and_taking_from_its_middle_splits_it() {
        let mut requests = Requests::default();
        for i in 0..1_000 {
            let id = RequestId {
                origin: 7,
                seq: 100 + i,
            };
            requests.insert(id, Request { job: 50 + i, at: 9 });
        }
        assert_eq!((requests.len(), requests.runs.len()), (1_000, 1));
        let middle = RequestId {
            origin: 7,
            seq: 600,
        };
        assert_eq!(requests.remove(&middle), Some(Request { job: 550, at: 9 }));
        assert_eq!((requests.len(), requests.runs.len()), (999, 2));
        assert_eq!(requests.get(&middle), None);
        let after = RequestId {
            origin: 7,
            seq: 601,
        };
        assert_eq!(requests.get(&after), Some(Request { job: 551, at: 9 }));
        // Another time, another job or another origin starts a run.
        let next = RequestId {
            origin: 7,
            seq: 1_100,
        };
        requests.insert(next, Request { job: 1_050, at: 10 });
        assert_eq!(requests.runs.len(), 3);
    }

    #[test]
    fn ids_at_the_top_of_their_range_and_repeats_never_panic() {
        // Ids at the top of their range, jobs that would wrap, repeats.
        let top = RequestId {
            origin: u64::MAX,
            seq: u64::MAX,
        };
        let below = RequestId {
            origin: u64::MAX,
            seq: u64::MAX - 1,
        };
        let entries = [
            (
                below,
                Request {
                    job: u64::MAX,
                    at: u64::MAX,
                },
            ),
            (
                top,
                Request {
                    job: 0,
                    at: u64::MAX,
                },
            ),
            (below, Request { job: 3, at: 0 }),
        ];
        let mut requests = Requests::default();
        for (id, request) in entries {
            requests.insert(id, request);
        }
        assert_eq!(requests.len(), 2);
        assert_eq!(requests.get(&below), Some(Request { job: 3, at: 0 }));
        assert_eq!(
            requests.get(&top),
            Some(Request {
                job: 0,
                at: u64::MAX
            })
        );
    }
}

#[cfg(test)]
#[path = "requests_tests.rs"]
mod request_tests;
