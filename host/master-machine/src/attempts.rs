//! Attempts: a queued job handed to a polling worker, its checkpoints, its
//! report, its lease, and the retry after a failure.
//!
//! Only the report of the current attempt from the worker that holds it
//! is recorded ([`Master::current_attempt`]); any other is answered
//! `Ignored` and changes nothing, so each job has exactly one outcome. A
//! running attempt holds a lease of `timeout_ms + lease_grace_ms`; when it
//! lapses (see `tick`) or its worker is lost, the attempt fails. The
//! lease covers the job's run, not the moving of its data: while a worker
//! prepares an attempt (fetches or compiles its module, fetches its input
//! blobs) or keeps its output blobs for longer than a moment, it renews
//! the lease ([`Command::Renew`], every quarter of the grace, for all
//! such attempts at once), and each renewal starts the lease again from
//! the moment it is decided. A worker that stops renewing (it died, or
//! lost its way to the master) loses the attempt as before, once the last
//! lease it got runs out. A failure
//! whose code is in [`RETRYABLE_CODES`] goes back to the queue after an
//! exponential backoff until the job's `max_attempts`; then it is `dead`.
//! Any other failure fails the job at once.
//!
//! Invariants: a running job's last attempt has no end, a lease entry
//! and a place in its worker's `running` set; [`Master::end_attempt`]
//! undoes all three together. This module does not settle jobs (see
//! `jobs`).

use crate::index::{ready_key, set_state};
use crate::limits::{HOLDS_MAX, LOG_TAIL_BYTES_MAX, RENEWALS_MAX, WORKER_ID_BYTES_MAX};
use crate::master::{Master, decided, reject};
use crate::protocol::*;
use crate::validation::validate_outputs;

impl Master {
    pub(crate) fn decide_poll(
        &self,
        now: Millis,
        worker: &str,
        slots: u32,
        free: u32,
        (holds, pool): (&[BlobPrefix], &WorkerPool),
    ) -> Result<Decision, Rejection> {
        check_worker(worker, holds.len() > HOLDS_MAX, || {
            format!("a poll names at most {HOLDS_MAX} blobs held")
        })?;
        // A pool is checked when it is new: the one the master knows was.
        let said = self.worker_pool(worker, pool);
        if said.is_some()
            && let Err(why) = crate::pools::check_labels(&pool.labels)
        {
            return reject(codes::INVALID_JOB, format!("a worker's labels: {why}"));
        }
        let holds = crate::locality::bounded_holds(holds);
        let mut kinds = Vec::new();
        kinds.extend(self.worker_seen(now, worker, slots));
        kinds.extend(self.worker_holds(worker, &holds));
        kinds.extend(said);
        for id in self.assignable(now, worker, (&holds, pool), free as usize) {
            // A journal is decoded, not trusted: a job replaced under its
            // id may leave a place in line behind.
            let Some(job) = self.jobs.get(&id) else {
                continue;
            };
            kinds.push(EventKind::Assigned {
                id,
                attempt: job.attempts.len() as u32 + 1,
                worker: worker.to_owned(),
                lease_until: now
                    .saturating_add(job.spec.timeout_ms)
                    .saturating_add(self.config.lease_grace_ms),
            });
        }
        decided(now, kinds)
    }

    /// `worker`'s renewal of the leases of `attempts` (see the module
    /// notes): one event for those still current and held by it.
    pub(crate) fn decide_renew(
        &self,
        now: Millis,
        worker: &str,
        attempts: &[(JobId, u32)],
    ) -> Result<Decision, Rejection> {
        check_worker(worker, attempts.len() > RENEWALS_MAX, || {
            format!("a renewal names at most {RENEWALS_MAX} attempts")
        })?;
        // An attempt named twice is renewed once (of two attempts of one
        // job, only the current one is).
        let mut named = attempts.to_vec();
        named.sort_unstable();
        named.dedup();
        let mut leases: Vec<(JobId, u32, Millis)> = Vec::new();
        for (id, attempt) in named {
            if self.current_attempt(id, attempt, Some(worker)).is_err() {
                continue;
            }
            let job = &self.jobs[&id];
            let lease_until = now
                .saturating_add(job.spec.timeout_ms)
                .saturating_add(self.config.lease_grace_ms);
            leases.push((id, attempt, lease_until));
        }
        if leases.is_empty() {
            return Ok(ignored(format!(
                "no attempt of the {} named is running on {worker}",
                attempts.len()
            )));
        }
        decided(now, vec![EventKind::Renewed { leases }])
    }

    /// Renewed leases (see [`Master::decide_renew`]): a lease only moves
    /// later, and only for the current attempt.
    pub(crate) fn apply_renewed(&mut self, leases: &[(JobId, u32, Millis)]) {
        for &(id, attempt, lease_until) in leases {
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            if job.state != JobState::Running
                || job.attempts.last().map(|a| a.number) != Some(attempt)
            {
                continue;
            }
            let Some(old) = job.lease_until.filter(|&old| old < lease_until) else {
                continue;
            };
            job.lease_until = Some(lease_until);
            self.index.leases.remove(&(old, id));
            self.index.leases.insert((lease_until, id));
        }
    }

    pub(crate) fn decide_checkpoint(
        &self,
        now: Millis,
        id: JobId,
        attempt: u32,
        data: &[u8],
        mark: Option<&TapeMark>,
    ) -> Result<Decision, Rejection> {
        if let Err(reason) = self.current_attempt(id, attempt, None) {
            return Ok(ignored(reason));
        }
        if let Some(mark) = mark {
            self.check_mark(id, mark)?;
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
        decided(
            now,
            std::iter::once(EventKind::Checkpointed {
                id,
                attempt,
                data: data.to_vec(),
            })
            .chain(mark.map(|mark| EventKind::TapeMarked {
                id,
                attempt,
                mark: *mark,
            }))
            .collect(),
        )
    }

    /// The report of attempt `attempt` of job `id` from `worker`: its
    /// outcome, `(run time, cost)`, log tail and `(calls, calls dropped)`.
    pub(crate) fn decide_finish(
        &self,
        now: Millis,
        (id, attempt, worker): (JobId, u32, &str),
        outcome: &Outcome,
        (duration_ms, usage): (u64, Usage),
        log_tail: &str,
        (calls, calls_dropped): (&[HttpCall], u32),
    ) -> Result<Decision, Rejection> {
        if let Err(reason) = self.current_attempt(id, attempt, Some(worker)) {
            return Ok(ignored(reason));
        }
        validate_outputs(outcome)?;
        let outcome = match outcome.succeeded() {
            Some((result, _)) if result.len() as u64 > self.config.result_bytes_max => {
                Outcome::Failed(Failure {
                    code: "output_too_large".into(),
                    message: format!(
                        "result of {} bytes, the master keeps at most {}",
                        result.len(),
                        self.config.result_bytes_max
                    ),
                })
            }
            _ => outcome.clone(),
        };
        let mut kinds: Vec<EventKind> = Self::calls_event(id, attempt, calls, calls_dropped)
            .into_iter()
            .collect();
        kinds.push(EventKind::Finished {
            id,
            attempt,
            outcome,
            duration_ms,
            log_tail: tail(log_tail, LOG_TAIL_BYTES_MAX).into(),
            usage: Some(usage),
        });
        decided(now, kinds)
    }

    /// Whether `attempt` is the running attempt of job `id` (held by
    /// `worker`, when given); otherwise why not.
    pub(crate) fn current_attempt(
        &self,
        id: JobId,
        attempt: u32,
        worker: Option<&str>,
    ) -> Result<(), String> {
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

    pub(crate) fn apply_assigned(
        &mut self,
        id: JobId,
        attempt: u32,
        worker: &str,
        lease_until: Millis,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if job.state != JobState::Queued {
            return;
        }
        self.index
            .dequeue(ready_key(self.order, job, id), self.keyed.key(id));
        self.left_line(id);
        self.key_started(id, at);
        (self.shares).started(crate::namespaces::name_of(self.namespaces.of(id)));
        let job = self.jobs.get_mut(&id).expect("present");
        set_state(
            &mut self.index,
            self.namespaces.of(id),
            job,
            JobState::Running,
        );
        job.lease_until = Some(lease_until);
        job.attempts.push(Attempt {
            number: attempt,
            worker: worker.to_owned(),
            started_at: at,
            ended_at: None,
            outcome: None,
            message: None,
            duration_ms: None,
            usage: None,
            log_tail: String::new(),
        });
        self.index.leases.insert((lease_until, id));
        self.worker_runs(worker, id, at);
        self.count_assignment(id, worker);
        self.attempts_total += 1;
        let job = &self.jobs[&id];
        let crate::grants::JobEgress {
            grants: egress,
            secrets,
            readable,
        } = self.egress_of_job(id);
        let (blobs, parents_blobs) = self.assignment_blobs(id);
        effects.push(Effect::Assign(Box::new(Assignment {
            id,
            attempt,
            worker: worker.to_owned(),
            module: job.spec.module,
            input: self.assignment_input(id, job, &parents_blobs),
            timeout_ms: job.spec.timeout_ms,
            memory_bytes: job.spec.memory_bytes,
            checkpoint: job.checkpoint.clone(),
            egress,
            secrets,
            replay: self.replay_of(id, job.submitted_at),
            readable,
            blobs,
            trace: (self.keyed.options.get(&id))
                .and_then(|options| options.trace.as_deref().copied()),
            lease_grace_ms: self.config.lease_grace_ms,
        })));
    }

    pub(crate) fn apply_checkpointed(&mut self, id: JobId, attempt: u32, data: &[u8]) {
        if let Some(job) = self.jobs.get_mut(&id)
            && job.state == JobState::Running
            && job.attempts.last().map(|a| a.number) == Some(attempt)
        {
            job.checkpoint = Some(data.to_vec());
        }
    }

    pub(crate) fn apply_finished(
        &mut self,
        (id, attempt): (JobId, u32),
        outcome: &Outcome,
        (duration_ms, usage): (u64, Option<Usage>),
        log_tail: &str,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        // A journal is decoded, not trusted: a report a decision would
        // have refused (outputs over their bounds) changes nothing, as the
        // refusal did.
        if validate_outputs(outcome).is_err() {
            return;
        }
        if !self.end_attempt(id, attempt, at, effects) {
            return;
        }
        let job = self.jobs.get_mut(&id).expect("checked by end_attempt");
        let current = job.attempts.last_mut().expect("checked by end_attempt");
        current.duration_ms = Some(duration_ms);
        current.log_tail = log_tail.to_owned();
        current.usage = usage;
        if let Some(usage) = usage {
            self.namespaces.charge(id, usage);
            let namespace = self.namespaces.of(id);
            (self.shares).charge(crate::namespaces::name_of(namespace), usage.cpu_us);
            self.index.touch(namespace);
        }
        match outcome {
            Outcome::Failed(failure) => self.fail_attempt(id, failure.clone(), at, effects),
            Outcome::Succeeded(_) | Outcome::Wrote(_) => {
                let (result, outputs) = outcome.succeeded().expect("a success");
                current.outcome = Some("succeeded".into());
                (self.index).add_results(self.namespaces.of(id), result.len() as u64, true);
                job.result = Some(result.to_vec());
                self.record_outputs(id, outputs, at);
                self.settle(id, JobState::Succeeded, at, effects);
            }
        }
    }

    pub(crate) fn apply_expired(
        &mut self,
        id: JobId,
        attempt: u32,
        code: &str,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        if self.end_attempt(id, attempt, at, effects) {
            let message = match code {
                "worker_lost" => "the worker running the attempt was lost",
                _ => "the attempt's lease expired without a report",
            };
            self.fail_attempt(
                id,
                Failure {
                    code: code.to_owned(),
                    message: message.into(),
                },
                at,
                effects,
            );
        }
    }

    /// A backoff ended: the job joins the line again, at its end.
    pub(crate) fn apply_released(&mut self, id: JobId, at: Millis, effects: &mut Vec<Effect>) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if let Some(not_before) = job.not_before.take() {
            self.index.delayed.remove(&(not_before, id));
            job.seq = self.next_seq;
            self.next_seq += 1;
            let needs = self.keyed.needs(id, &job.spec);
            let (key, namespace) = (self.keyed.key(id), self.namespaces.of(id));
            (self.index).enqueue(ready_key(self.order, job, id), key, needs, namespace);
            self.joined_line(id, at);
            effects.push(Effect::WorkAvailable);
        }
    }

    /// Closes the running attempt `attempt` of job `id` (lease and worker
    /// bookkeeping); false if that is not the running attempt.
    pub(crate) fn end_attempt(
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
        self.key_ended(id, effects);
        true
    }

    /// After an ended attempt failed: retry after a backoff, or fail the job.
    pub(crate) fn fail_attempt(
        &mut self,
        id: JobId,
        failure: Failure,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
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
            set_state(
                &mut self.index,
                self.namespaces.of(id),
                job,
                JobState::Queued,
            );
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
}

/// Refuses a worker's command with an id out of bounds, or whose list is
/// `too_long` (then saying `why`).
fn check_worker(
    worker: &str,
    too_long: bool,
    why: impl FnOnce() -> String,
) -> Result<(), Rejection> {
    if worker.is_empty() || worker.len() > WORKER_ID_BYTES_MAX {
        return reject(codes::INVALID_JOB, "worker ids are 1 to 256 bytes");
    }
    if too_long {
        return reject(codes::INVALID_JOB, why());
    }
    Ok(())
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

#[cfg(test)]
#[path = "usage_tests.rs"]
mod usage_tests;
