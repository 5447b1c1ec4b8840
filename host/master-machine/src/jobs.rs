//! A job's life outside its attempts: submitted (or fired by a schedule),
//! cancelled, settled in a terminal state, purged.
//!
//! A submission is answered without a new job when its request id is
//! remembered (a forward retried; see `requests`), its idempotency key
//! names a job (with the same module and input, or it is a conflict) or
//! its uniqueness key holds (see `uniqueness`); otherwise it makes one
//! `Submitted` event, unless the queue is full. Every job's end goes
//! through [`Master::settle`], which also carries the end to the DAG jobs
//! waiting on it (see [`crate::dag`]).
//!
//! Invariants: a job's state and the index's counts change together
//! (`set_state`); a settled job is packed at the end of the `apply` that
//! settled it (see `done`), and only a finished job is purged. This module
//! does not run attempts (see `attempts`).

use crate::index::{ready_key, set_state};
use crate::limits::REQUESTS_MAX;
use crate::master::{Job, Master, decided, reject};
use crate::protocol::*;
use crate::validation::{validate_options, validate_spec};

impl Master {
    pub(crate) fn decide_submit(
        &self,
        now: Millis,
        spec: &JobSpec,
        request: RequestId,
        options: &JobOptions,
    ) -> Result<Decision, Rejection> {
        let answered = |id, existing| {
            Ok(Decision {
                events: Vec::new(),
                reply: Reply::Submitted { id, existing },
            })
        };
        if let Some(seen) = self.requests.get(&request) {
            // The same request again (a forward retried): whatever changed
            // since, it gets the first one's answer.
            return answered(seen.job, false);
        }
        let spec = &*self.resolved_spec(spec, options)?;
        let config = &self.config;
        validate_spec(config, spec)?;
        crate::namespaces::validate(options)?;
        self.namespaces.check_room(options.namespace.as_deref())?;
        if let Some(id) = self.idempotent_job(spec, options)? {
            return answered(id, true);
        }
        validate_options(options)?;
        self.check_narrowed(options)?;
        self.check_input_blob(options)?;
        if let Some(id) = self.unique_holder(now, options)? {
            return answered(id, true);
        }
        // Past the answers that make no job: a namespace at a quota still
        // gets the job its key names.
        self.check_quotas(now, options.namespace.as_deref(), 1)?;
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

    /// The job `spec`'s idempotency key names, if any; a conflict if that
    /// job has another module or input (inline, or its input blob).
    fn idempotent_job(
        &self,
        spec: &JobSpec,
        options: &JobOptions,
    ) -> Result<Option<JobId>, Rejection> {
        let Some(key) = &spec.idempotency_key else {
            return Ok(None);
        };
        let scoped = (options.namespace.clone(), key.clone());
        let Some(&id) = self.index.keys.get(&scoped) else {
            return Ok(None);
        };
        let job = self.find(id).expect("an idempotency key's job is held");
        if job.spec.module != spec.module
            || job.spec.input != spec.input
            || self.input_blob_of(id) != options.input_blob.as_ref()
        {
            return reject(
                codes::IDEMPOTENCY_CONFLICT,
                format!(
                    "idempotency key {key:?} belongs to job {id}, which has a different module or input"
                ),
            );
        }
        Ok(Some(id))
    }

    pub(crate) fn decide_cancel(&self, now: Millis, id: JobId) -> Result<Decision, Rejection> {
        let job = self.job(id)?;
        if job.state.is_terminal() {
            return reject(
                codes::JOB_FINISHED,
                format!("job {id} already finished: {}", job.state.name()),
            );
        }
        decided(now, vec![EventKind::Cancelled { id }])
    }

    pub(crate) fn apply_submitted(
        &mut self,
        id: JobId,
        spec: &JobSpec,
        request: Option<RequestId>,
        options: &JobOptions,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        self.add_job(id, spec.clone(), options, at);
        if let Some(request) = request {
            self.remember_request(request, id, at, REQUESTS_MAX);
        }
        effects.push(Effect::WorkAvailable);
    }

    /// Queues a new job (a submission, or a schedule's tick).
    pub(crate) fn add_job(&mut self, id: JobId, spec: JobSpec, options: &JobOptions, at: Millis) {
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
        let kept = options.limit.is_some()
            || options.unique.is_some()
            || options.trace.is_some()
            || !options.labels.is_empty();
        if kept {
            // The name is recorded with the deployments, and the input
            // blob with the blobs, not here; the trace context is kept
            // here for the job's assignments, the labels for placement.
            let keyed = JobOptions {
                module: None,
                input_blob: None,
                namespace: None,
                ..options.clone()
            };
            self.keyed.options.insert(id, keyed);
        }
        self.record_input_blob(id, options.input_blob.as_ref(), at);
        // A decision never names the default namespace; a journal, decoded,
        // not trusted, might.
        let namespace = crate::namespaces::canonical(options.namespace.as_deref());
        self.namespaces.record(&mut self.index, id, namespace);
        self.record_narrowed(id, options);
        match &options.module {
            Some(name) => self.deployments.record_job(id, name, &job.spec.module),
            // A journal's id submitted twice replaces the first's record.
            None => drop(self.deployments.jobs.remove(&id)),
        }
        if let Some(unique) = &options.unique {
            let key = crate::namespaces::scoped_key(namespace, &unique.key);
            self.hold_unique(&key, id, at.saturating_add(unique.window_ms), at);
        }
        let needs = self.keyed.needs(id, &job.spec);
        let place = ready_key(self.order, &job, id);
        (self.index).enqueue(place, self.keyed.key(id), needs, namespace);
        self.joined_line(id, at);
        if let Some(key) = &job.spec.idempotency_key {
            let scoped = (namespace.map(str::to_owned), key.clone());
            self.index.keys.insert(scoped, id);
        }
        self.index.counts[JobState::Queued as usize] += 1;
        let idle = self.index.in_state(namespace, JobState::Queued) == 0
            && self.index.in_state(namespace, JobState::Running) == 0;
        if idle {
            (self.shares).woken(crate::namespaces::name_of(namespace));
            self.index.touch(namespace);
        }
        (self.index).count_in(namespace, JobState::Queued);
        self.namespaces.submitted(namespace);
        self.quotas.draw(namespace, at);
        *self.index.modules.entry(job.spec.module).or_default() += 1;
        // An id is never submitted twice but by a hostile journal, whose
        // second copy replaces the first (finished or not) on every replica.
        self.done.remove(&id);
        self.jobs.insert(id, Box::new(job));
        self.next_id = self.next_id.max(id.saturating_add(1));
        self.submitted_total += 1;
    }

    /// Cancels job `id` if it has not finished (with `error`, when a DAG's
    /// failure is the reason).
    pub(crate) fn cancel(
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
            self.settle(id, JobState::Cancelled, at, effects);
        }
    }

    /// [`cancel`](Self::cancel) without the DAG cascade (the caller runs it).
    pub(crate) fn cancel_one(
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

    /// Moves a job to a terminal state, then carries out what that means
    /// for the DAG jobs waiting on it (see [`crate::dag`]).
    pub(crate) fn settle(
        &mut self,
        id: JobId,
        state: JobState,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        self.settle_one(id, state, at, effects);
        self.settle_dag(id, state, at, effects);
    }

    /// Moves a job to a terminal state.
    pub(crate) fn settle_one(
        &mut self,
        id: JobId,
        state: JobState,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        let job = self.jobs.get_mut(&id).expect("caller checked");
        set_state(&mut self.index, self.namespaces.of(id), job, state);
        job.finished_at = Some(at);
        job.checkpoint = None;
        self.tapes.remove(&id);
        self.index.finished.insert((at, id));
        effects.push(Effect::Settled { id, state });
        if let Some(name) = self.index.fired_by.remove(&id)
            && let Some(schedule) = self.schedules.get_mut(&name)
        {
            schedule.active.remove(&id);
        }
    }

    /// Forgets a finished job (retention, or a bound; see `tick`).
    pub(crate) fn apply_purged(&mut self, id: JobId, at: Millis) {
        if let Some(job) = self.done.remove(&id).and_then(|done| done.unpack()) {
            self.index.counts[job.state as usize] -= 1;
            (self.index).count_out(self.namespaces.of(id), job.state);
            if let Some(count) = self.index.modules.get_mut(&job.spec.module) {
                *count -= 1;
                if *count == 0 {
                    self.index.modules.remove(&job.spec.module);
                }
            }
            self.index
                .finished
                .remove(&(job.finished_at.unwrap_or(0), id));
            let bytes = job.result.as_ref().map_or(0, |r| r.len() as u64);
            (self.index).sub_results(self.namespaces.of(id), bytes);
            self.forget_blobs(id, at);
            if let Some(key) = &job.spec.idempotency_key {
                let namespace = self.namespaces.of(id).map(str::to_owned);
                self.index.keys.remove(&(namespace, key.clone()));
            }
            self.namespaces.forget(&mut self.index, id);
            self.keyed.options.remove(&id);
            self.deployments.jobs.remove(&id);
            self.egress.calls.remove(&id);
            self.egress.narrowed.remove(&id);
            self.forget_dag_job(id);
        }
    }
}
