//! Bulk actions: cancel, or retry, every job a [`JobFilter`] matches.
//!
//! A `Bulk` is one decision holding one event per job changed (at most
//! [`BULK_MAX`](crate::limits::BULK_MAX); run it again for the rest), all in one batch, and the
//! same filter as a query counts what it would change, so a preview and
//! the action agree. A retry (`Retried`) moves a failed, dead or cancelled
//! job back to `queued` with its attempts kept and its limit raised by the
//! attempts granted; the outcome it had is cleared, and a DAG's job waits
//! again for parents that have not succeeded.
//!
//! Invariant: matching reads packed jobs in place; only the jobs a retry
//! changes are unpacked. This module does not define what a filter
//! matches (see `query`).

use crate::limits::BULK_MAX;
use std::collections::BTreeSet;
use std::ops::Bound;

use crate::index::{ready_key, set_state};
use crate::master::Master;
use crate::protocol::*;
use crate::query::filter_matches;
use crate::scan::{Facts, Held};
use crate::validation::validate_bulk;

impl Master {
    pub(crate) fn decide_bulk(
        &self,
        now: Millis,
        action: BulkAction,
        filter: &JobFilter,
    ) -> Result<Decision, Rejection> {
        validate_bulk(action, filter, &self.config)?;
        let kinds = self
            .bulk_matches(action, filter)
            .map(|(id, job)| match action {
                BulkAction::Cancel => EventKind::Cancelled { id },
                BulkAction::Retry { attempts } => EventKind::Retried {
                    id,
                    max_attempts: job.attempts.saturating_add(attempts),
                },
            });
        let events: Vec<Event> = (kinds.take(BULK_MAX))
            .map(|kind| Event { at: now, kind })
            .collect();
        Ok(Decision {
            reply: Reply::Bulk {
                changed: events.len() as u64,
            },
            events,
        })
    }

    /// Answers [`Query::Bulk`]: how many jobs the action would change.
    pub(crate) fn count_bulk(
        &self,
        action: BulkAction,
        filter: &JobFilter,
    ) -> Result<Answer, Rejection> {
        validate_bulk(action, filter, &self.config)?;
        Ok(Answer::Count(
            self.bulk_matches(action, filter).take(BULK_MAX).count() as u64,
        ))
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
            None => self.scan_namespace(filter.namespace.as_deref(), Bound::Unbounded, false),
        };
        named
            .filter(move |(_, held)| action.applies_to(held.state()))
            .filter_map(|(id, held)| Some((id, held.facts()?)))
            .filter(move |(id, job)| filter_matches(filter, *id, job, self))
    }

    pub(crate) fn apply_retried(
        &mut self,
        id: JobId,
        max_attempts: u32,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        if self
            .done
            .get(&id)
            .is_some_and(|done| BulkAction::RETRY_FROM.contains(&done.state()))
            && let Some(job) = self.done.remove(&id).and_then(|done| done.unpack())
        {
            self.jobs.insert(id, Box::new(job));
        }
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if !BulkAction::RETRY_FROM.contains(&job.state) {
            return;
        }
        self.index
            .finished
            .remove(&(job.finished_at.take().unwrap_or(0), id));
        set_state(
            &mut self.index,
            self.namespaces.of(id),
            job,
            JobState::Queued,
        );
        job.spec.max_attempts = max_attempts;
        job.error = None;
        job.seq = self.next_seq;
        self.next_seq += 1;
        // A DAG's job waits again for the parents that have not
        // succeeded (a retry of the parent releases it).
        let unfinished = self.unsucceeded_parents(id);
        let job = &self.jobs[&id];
        if unfinished > 0 {
            self.dags.waiting.insert(id, unfinished);
        } else {
            let needs = self.keyed.needs(id, &job.spec);
            let (key, namespace) = (self.keyed.key(id), self.namespaces.of(id));
            (self.index).enqueue(ready_key(self.order, job, id), key, needs, namespace);
            self.joined_line(id, at);
            effects.push(Effect::WorkAvailable);
        }
    }
}
