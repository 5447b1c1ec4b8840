//! Every job held, unfinished or packed, as one sequence by id.
//!
//! Unfinished jobs and finished ones live in two maps (`jobs` and `done`);
//! listings, bulk changes and the snapshot writer all want them as one,
//! in id order either way, without unpacking the finished ones. A scan
//! merges the two ranges lazily ([`Merge`]) and hands out each job as it
//! is held ([`Held`]); what filters read of it ([`Facts`]) comes from the
//! record in place when it is packed.
//!
//! Invariant: no id is in both maps (a job moves to `done` once, at the
//! end of the `apply` that finished it). This module does not decide what
//! matches a filter (see `query`).

use std::ops::Bound;

use crate::done::Done;
use crate::master::{Job, Master};
use crate::protocol::*;

/// A job as [`Master::scan`] meets it: unfinished, or finished and
/// still packed.
#[derive(Clone, Copy)]
pub(crate) enum Held<'a> {
    Live(&'a Job),
    Done(&'a Done),
}

impl<'a> Held<'a> {
    pub(crate) fn state(self) -> JobState {
        match self {
            Held::Live(job) => job.state,
            Held::Done(done) => done.state(),
        }
    }

    pub(crate) fn facts(self) -> Option<Facts<'a>> {
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

/// What listings, filters and bulk changes read of a job. A packed job
/// gives it without unpacking: its record is read in place up to the
/// error (`Packed`), strings borrowed, the rest skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Facts<'a> {
    pub(crate) state: JobState,
    pub(crate) module: Digest,
    pub(crate) priority: i32,
    pub(crate) submitted_at: Millis,
    pub(crate) finished_at: Option<Millis>,
    pub(crate) attempts: u32,
    /// Code and message.
    pub(crate) error: Option<(&'a str, &'a str)>,
}

impl<'a> Facts<'a> {
    pub(crate) fn of(job: &'a Job) -> Self {
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

impl Master {
    /// Job `id` as it is held.
    pub(crate) fn held(&self, id: JobId) -> Option<Held<'_>> {
        match self.jobs.get(&id) {
            Some(job) => Some(Held::Live(job)),
            None => self.done.get(&id).map(Held::Done),
        }
    }

    /// The jobs held that a filter naming namespace `namespace` (if any)
    /// may match, as [`scan`](Self::scan) orders them: only that
    /// namespace's jobs, from the index, when it is not the default one
    /// (whose jobs are all the others: every job is walked).
    pub(crate) fn scan_namespace(
        &self,
        namespace: Option<&str>,
        past: Bound<JobId>,
        newest_first: bool,
    ) -> Box<dyn Iterator<Item = (JobId, Held<'_>)> + '_> {
        let name = match namespace {
            Some(name) if name != crate::namespaces::DEFAULT => name,
            _ => return self.scan(past, newest_first),
        };
        let Some(ids) = self.index.namespace_jobs.get(name) else {
            return Box::new(std::iter::empty());
        };
        let held = |&id: &JobId| Some((id, self.held(id)?));
        match newest_first {
            true => Box::new(ids.range((Bound::Unbounded, past)).rev().filter_map(held)),
            false => Box::new(ids.range((past, Bound::Unbounded)).filter_map(held)),
        }
    }

    /// Every job held, finished or not, by id: from the first after `past`
    /// up, or from the last before it down (`newest_first`).
    pub(crate) fn scan(
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
}
