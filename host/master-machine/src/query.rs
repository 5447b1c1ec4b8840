//! Reads: what [`Master::query`] answers, and the forms a job is shown in
//! (a view, a listing's summary) and filtered by.
//!
//! Queries never change the state and never need the journal. Every
//! scan is bounded: a listing looks at most at [`LIST_SCAN_MAX`](crate::limits::LIST_SCAN_MAX) jobs and
//! returns a cursor to go on from, recent finishes look at most at
//! [`RECENT_SCAN_MAX`], a `Finished` asks about at most
//! [`FINISHED_IDS_MAX`] ids and its outputs fit the sizes asked for.
//! Finished jobs stay packed unless a query shows one whole (a view, a
//! result, an input).
//!
//! This module does not decide anything; the reads that belong to one
//! concern (a DAG, a schedule, the workers, the tokens, a bulk preview)
//! live with it and are dispatched from here.

use crate::limits::{FINISHED_IDS_MAX, LIST_LIMIT_MAX, LIST_SCAN_MAX, RECENT_SCAN_MAX};
use std::ops::Bound;

use crate::master::{Job, Master, reject};
use crate::protocol::*;
use crate::scan::Facts;
use crate::schedule::Schedule;
use crate::validation::validate_filter;

impl Master {
    /// Answers a read-only query.
    pub fn query(&self, now: Millis, query: &Query) -> Result<Answer, Rejection> {
        match query {
            Query::Job { id } => Ok(Answer::Job(Box::new(self.view(*id, &*self.job(*id)?)))),
            Query::Result { id } => self.result(*id),
            Query::Jobs {
                filter,
                after,
                limit,
                newest_first,
            } => self.list(filter, *after, *limit, *newest_first),
            Query::Bulk { action, filter } => self.count_bulk(*action, filter),
            Query::Recent { window_ms } => Ok(Answer::Recent(self.recent(now, *window_ms))),
            Query::ModuleUse => Ok(Answer::ModuleUse(self.module_use())),
            Query::Schedules => Ok(Answer::Schedules(
                self.schedules.values().map(Schedule::view).collect(),
            )),
            Query::Schedule { name } => Ok(Answer::Schedule(Box::new(self.schedule(name)?.view()))),
            Query::Dag { id } => self.dag_view(*id),
            Query::Deployments => Ok(Answer::Deployments(self.deployments_view())),
            Query::Secrets => Ok(Answer::Secrets(self.secrets_view())),
            Query::Blobs { digests } => self.blobs_status(digests),
            Query::Deployment { name } => {
                Ok(Answer::Deployment(Box::new(self.deployment_view(name)?)))
            }
            Query::Input { id } => Ok(Answer::Input(self.job(*id)?.spec.input.clone())),
            Query::Stats => Ok(Answer::Stats(self.stats())),
            Query::Workers => Ok(Answer::Workers(self.workers_view())),
            Query::Tokens => Ok(Answer::Tokens(self.token_list())),
            Query::Finished {
                ids,
                output_max,
                output_total,
            } => self.finished(ids, *output_max, *output_total),
            Query::Namespaces => Ok(Answer::Namespaces(self.namespaces_view())),
            Query::InNamespace { namespace, query } => {
                self.query_in_namespace(now, namespace, query)
            }
            Query::KeptBlobs { after, limit } => Ok(self.kept_blobs(after.as_ref(), *limit)),
        }
    }

    /// Answers [`Query::Result`].
    fn result(&self, id: JobId) -> Result<Answer, Rejection> {
        let job = self.job(id)?;
        match (&job.result, job.state) {
            (Some(result), _) => Ok(Answer::Result(result.clone())),
            (None, state) if !state.is_terminal() => reject(
                codes::JOB_NOT_FINISHED,
                format!("job {id} is {}", state.name()),
            ),
            (None, state) => reject(
                codes::JOB_NOT_SUCCEEDED,
                format!("job {id} is {} and has no result", state.name()),
            ),
        }
    }

    /// Answers [`Query::Jobs`]: a page of the jobs `filter` matches.
    fn list(
        &self,
        filter: &JobFilter,
        after: Option<JobId>,
        limit: u32,
        newest_first: bool,
    ) -> Result<Answer, Rejection> {
        validate_filter(filter)?;
        let limit = limit.clamp(1, LIST_LIMIT_MAX) as usize;
        let past = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut scan = self.scan_namespace(filter.namespace.as_deref(), past, newest_first);
        let mut jobs = Vec::new();
        let mut last = None;
        for (id, held) in scan.by_ref().take(LIST_SCAN_MAX) {
            last = Some(id);
            // Finished jobs of other states stay packed.
            if filter.state.is_some_and(|state| state != held.state()) {
                continue;
            }
            let Some(job) = held.facts() else {
                continue;
            };
            if filter_matches(filter, id, &job, self) {
                let mut summary = summary(id, &job, self.deployments.of_job(id));
                summary.namespace = self.namespaces.of(id).map(str::to_owned);
                jobs.push(summary);
                if jobs.len() == limit {
                    break;
                }
            }
        }
        // The next page continues after the last job looked at
        // (the page filled, or the scan reached its bound), if any
        // job is left to look at.
        let more = scan.next().is_some();
        Ok(Answer::Jobs {
            jobs,
            next: if more { last } else { None },
        })
    }

    /// Jobs finished in the `window_ms` before `now`: how many, and the
    /// percentiles of their time from submission to the end.
    fn recent(&self, now: Millis, window_ms: u64) -> Recent {
        let since = now.saturating_sub(window_ms);
        let mut took: Vec<u64> = self
            .index
            .finished
            .range((since, 0)..)
            .rev()
            .take(RECENT_SCAN_MAX)
            .filter_map(|&(at, id)| Some(at.saturating_sub(self.done.get(&id)?.submitted_at()?)))
            .collect();
        // Two selections, not a sort: this runs every second for each open
        // dashboard, on the master's thread.
        let mut percentile = |p: usize| {
            let at = (took.len() * p / 100).min(took.len().checked_sub(1)?);
            Some(*took.select_nth_unstable(at).1)
        };
        let (p50_ms, p99_ms) = (percentile(50), percentile(99));
        Recent {
            finished: took.len() as u64,
            p50_ms,
            p99_ms,
        }
    }

    /// Answers [`Query::ModuleUse`]: jobs held per module.
    fn module_use(&self) -> Vec<(Digest, u64)> {
        // Schedules hold their template's module as a job does.
        let mut uses = self.index.modules.clone();
        for schedule in self.schedules.values() {
            *uses.entry(schedule.spec.job.module).or_default() += 1;
        }
        uses.into_iter().collect()
    }

    /// Answers [`Query::Finished`].
    fn finished(
        &self,
        ids: &[JobId],
        output_max: u64,
        output_total: u64,
    ) -> Result<Answer, Rejection> {
        if ids.len() > FINISHED_IDS_MAX {
            return reject(
                codes::UNDECODABLE,
                format!("asked about {} jobs; at most {FINISHED_IDS_MAX}", ids.len()),
            );
        }
        let mut room = output_total;
        let mut finished = Vec::new();
        for &id in ids {
            let job = match self.job(id) {
                Ok(job) if job.state.is_terminal() => job,
                Ok(_) => continue,
                Err(unknown) => {
                    finished.push(Finished {
                        id,
                        state: None,
                        error: Some(Failure::from(unknown)),
                        output: None,
                        output_bytes: None,
                        outputs: Vec::new(),
                    });
                    continue;
                }
            };
            let size = job.result.as_ref().map(|r| r.len() as u64);
            let output = match &job.result {
                Some(result) if size <= Some(output_max.min(room)) => {
                    room -= result.len() as u64;
                    Some(result.clone())
                }
                _ => None,
            };
            finished.push(Finished {
                id,
                state: Some(job.state),
                error: job.error.clone(),
                output,
                output_bytes: size,
                outputs: self.outputs_of(id).to_vec(),
            });
        }
        Ok(Answer::Finished(finished))
    }

    /// Counters over the whole state.
    pub fn stats(&self) -> Stats {
        let (blobs_kept, blob_bytes_kept) = self.registry.totals();
        Stats {
            jobs: self.index.counts,
            submitted_total: self.submitted_total,
            attempts_total: self.attempts_total,
            retries_total: self.retries_total,
            workers: self.workers.len() as u64,
            result_bytes: self.index.result_bytes,
            blobs_kept,
            blob_bytes_kept,
            input_assignments: self.locality.input_assignments,
            local_assignments: self.locality.local_assignments,
            workers_holding: self.locality.holds.len() as u64,
            unplaceable: self.unplaceable_count(),
        }
    }

    fn view(&self, id: JobId, job: &Job) -> JobView {
        let named = self.deployments.of_job(id);
        let mut options = self.keyed.options.get(&id).cloned().unwrap_or_default();
        options.module = named.map(|(name, _)| name.to_owned());
        options.namespace = self.namespaces.of(id).map(str::to_owned);
        JobView {
            id,
            module: job.spec.module,
            state: job.state,
            priority: job.spec.priority,
            max_attempts: job.spec.max_attempts,
            timeout_ms: job.spec.timeout_ms,
            idempotency_key: job.spec.idempotency_key.clone(),
            submitted_at: job.submitted_at,
            finished_at: job.finished_at,
            not_before: job.not_before,
            attempts: job.attempts.clone(),
            error: job.error.clone(),
            result_bytes: job.result.as_ref().map(|r| r.len() as u64),
            input_bytes: job.spec.input.len() as u64,
            has_checkpoint: job.checkpoint.is_some(),
            options,
            dag: (self.dags.nodes.get(&id)).map(|node| (node.dag, node.name.clone())),
            parents: (self.dags.nodes.get(&id)).map_or(Vec::new(), |node| node.parents.clone()),
            waiting: self.dags.waiting.contains_key(&id),
            module_name: named.map(|(name, _)| name.to_owned()),
            module_version: named.and_then(|(_, version)| version),
            calls: self.calls_of(id),
            input_blob: self.input_blob_of(id).cloned(),
            outputs: self.outputs_of(id).to_vec(),
            unplaceable: self.unplaceable(id),
        }
    }
}

/// The listing's short form of a job, with the deployment name it was
/// submitted by.
fn summary(id: JobId, job: &Facts, named: Option<(&str, Option<u32>)>) -> JobSummary {
    JobSummary {
        id,
        state: job.state,
        attempts: job.attempts,
        submitted_at: job.submitted_at,
        finished_at: job.finished_at,
        module: job.module,
        priority: job.priority,
        error_code: job.error.map(|(code, _)| code.to_owned()),
        module_name: named.map(|(name, _)| name.to_owned()),
        module_version: named.and_then(|(_, version)| version),
        namespace: None,
    }
}

/// Whether job `id` meets every condition of `filter`.
pub(crate) fn filter_matches(filter: &JobFilter, id: JobId, job: &Facts, master: &Master) -> bool {
    let deployments = &master.deployments;
    let contains = |haystack: &str, needle: &str| {
        haystack
            .as_bytes()
            .windows(needle.len().max(1))
            .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
            || needle.is_empty()
    };
    filter.state.is_none_or(|s| s == job.state)
        && filter.module.is_none_or(|m| m == job.module)
        && filter.priority.is_none_or(|p| p == job.priority)
        && filter.from.is_none_or(|from| job.submitted_at >= from)
        && filter.to.is_none_or(|to| job.submitted_at <= to)
        && filter.ids.as_ref().is_none_or(|ids| ids.contains(&id))
        && (filter.module_name.as_deref()).is_none_or(|wanted| {
            deployments
                .of_job(id)
                .is_some_and(|(name, _)| name == wanted)
        })
        && (filter.namespace.as_deref()).is_none_or(|name| master.namespaces.holds(name, id))
        && filter.error.as_deref().is_none_or(|text| {
            job.error
                .is_some_and(|(code, message)| contains(code, text) || contains(message, text))
        })
}
