//! Workers as the master knows them: seen when they poll, lost when they
//! fall silent or leave the cluster.
//!
//! A worker is journaled as seen only when it is new, its slots changed,
//! or a fraction of the worker TTL passed ([`WORKER_SEEN_PER_TTL`]), not
//! on every poll, so the journal does not grow with polling while a
//! polling worker is never lost. Losing a worker fails each attempt it
//! was running (`worker_lost`, retryable).
//!
//! Invariant: a worker's `running` names only jobs whose current attempt
//! it holds (restore drops any other). This module does not decide which
//! jobs a poll gets (see `attempts`).

use crate::limits::WORKER_SEEN_PER_TTL;
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::master::{Master, decided};
use crate::protocol::*;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Worker {
    pub(crate) slots: u32,
    pub(crate) last_seen: Millis,
    pub(crate) running: BTreeSet<JobId>,
}

impl Master {
    /// The `WorkerSeen` a poll by `worker` with `slots` at `now` is
    /// journaled with, if the master should note it.
    pub(crate) fn worker_seen(&self, now: Millis, worker: &str, slots: u32) -> Option<EventKind> {
        let seen = match self.workers.get(worker) {
            None => true,
            Some(known) => {
                known.slots != slots
                    || now >= known.last_seen + self.config.worker_ttl_ms / WORKER_SEEN_PER_TTL
            }
        };
        seen.then(|| EventKind::WorkerSeen {
            worker: worker.to_owned(),
            slots,
        })
    }

    pub(crate) fn decide_worker_gone(
        &self,
        now: Millis,
        worker: &str,
    ) -> Result<Decision, Rejection> {
        if self.workers.contains_key(worker) {
            decided(
                now,
                vec![EventKind::WorkerLost {
                    worker: worker.to_owned(),
                }],
            )
        } else {
            decided(now, Vec::new())
        }
    }

    pub(crate) fn apply_worker_seen(&mut self, worker: &str, slots: u32, at: Millis) {
        let entry = self.workers.entry(worker.to_owned()).or_insert(Worker {
            slots,
            last_seen: at,
            running: BTreeSet::new(),
        });
        entry.slots = slots;
        entry.last_seen = entry.last_seen.max(at);
    }

    /// Notes that `worker` runs job `id` since `at`.
    pub(crate) fn worker_runs(&mut self, worker: &str, id: JobId, at: Millis) {
        let entry = self.workers.entry(worker.to_owned()).or_insert(Worker {
            slots: 0,
            last_seen: at,
            running: BTreeSet::new(),
        });
        entry.running.insert(id);
        entry.last_seen = entry.last_seen.max(at);
    }

    pub(crate) fn apply_worker_lost(
        &mut self,
        worker: &str,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        self.locality.holds.remove(worker);
        self.pools.remove(worker);
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

    /// Answers [`Query::Workers`].
    pub(crate) fn workers_view(&self) -> Vec<WorkerView> {
        self.workers
            .iter()
            .map(|(id, w)| WorkerView {
                id: id.clone(),
                slots: w.slots,
                running: w.running.len() as u32,
                last_seen: w.last_seen,
                pool: self.pool_of(id).clone(),
            })
            .collect()
    }
}
