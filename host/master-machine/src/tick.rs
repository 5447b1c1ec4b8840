//! The periodic sweep: what a `Tick` decides.
//!
//! The host ticks the master about ten times a second; a tick turns time
//! into events: leases that lapsed expire their attempts, backoffs that
//! ended release their jobs, silent workers are lost, finished jobs past
//! retention or beyond their bounds are purged (oldest first), schedules
//! fire (see [`crate::schedule`]) and old request ids are forgotten.
//!
//! Invariant: one tick decides at most [`TICK_EVENTS_MAX`](crate::limits::TICK_EVENTS_MAX) events, so no
//! batch is unbounded; what did not fit waits for the next tick, in the
//! same order. Like every decision, a tick reads the state and changes
//! nothing; the events it decides do the work when applied.

use crate::limits::TICK_EVENTS_MAX;
use crate::master::{Master, decided};
use crate::protocol::*;

/// Whether a tick's events so far leave room for another.
fn room(kinds: &[EventKind]) -> bool {
    kinds.len() < TICK_EVENTS_MAX
}

impl Master {
    /// What a `Tick` at `now` decides.
    pub(crate) fn decide_tick(&self, now: Millis) -> Result<Decision, Rejection> {
        let mut kinds = Vec::new();
        self.expire_leases(now, &mut kinds);
        self.release_delayed(now, &mut kinds);
        self.lose_silent_workers(now, &mut kinds);
        self.purge_finished(now, &mut kinds);
        self.decide_schedules(now, TICK_EVENTS_MAX, &mut kinds);
        // Blobs nothing names any more, past retention (one event).
        if room(&kinds) {
            self.collect_blobs(now, &mut kinds);
        }
        // Request ids past their time, all at once when the oldest is a
        // period overdue.
        if let Some(expired) = self.requests_expired(now)
            && room(&kinds)
        {
            kinds.push(expired);
        }
        decided(now, kinds)
    }

    /// Attempts whose lease lapsed by `now`.
    fn expire_leases(&self, now: Millis, kinds: &mut Vec<EventKind>) {
        for &(until, id) in &self.index.leases {
            if until > now || !room(kinds) {
                break;
            }
            let attempt = self.jobs[&id].attempts.last().map_or(0, |a| a.number);
            kinds.push(EventKind::Expired {
                id,
                attempt,
                code: "lease_expired".into(),
            });
        }
    }

    /// Jobs whose backoff ended by `now`.
    fn release_delayed(&self, now: Millis, kinds: &mut Vec<EventKind>) {
        for &(at, id) in &self.index.delayed {
            if at > now || !room(kinds) {
                break;
            }
            kinds.push(EventKind::Released { id });
        }
    }

    /// Workers not seen for a worker TTL.
    fn lose_silent_workers(&self, now: Millis, kinds: &mut Vec<EventKind>) {
        for (worker, state) in &self.workers {
            if !room(kinds) {
                break;
            }
            if now >= state.last_seen.saturating_add(self.config.worker_ttl_ms) {
                kinds.push(EventKind::WorkerLost {
                    worker: worker.clone(),
                });
            }
        }
    }

    /// Finished jobs, oldest first: past retention, or beyond the count
    /// and result-bytes bounds (results, and output blobs' names and
    /// digests; see [`crate::blobs`]).
    fn purge_finished(&self, now: Millis, kinds: &mut Vec<EventKind>) {
        let mut excess =
            (self.index.finished.len() as u64).saturating_sub(self.config.finished_max);
        let mut bytes = self.index.result_bytes;
        for &(finished_at, id) in &self.index.finished {
            if !room(kinds) {
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
                let outputs = crate::blobs::output_bytes(self.outputs_of(id));
                bytes = bytes.saturating_sub(held.map_or(0, |len| len as u64) + outputs);
            }
        }
    }
}
