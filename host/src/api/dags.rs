//! `/v1/dags`: submit a DAG of jobs, all or nothing, and read its status.
//! The node checks each job as a submission (module included) and turns
//! names into edges; the master checks the graph (cycles, parents) and
//! decides the rest (see `cohort_master::dag`).

use super::types::{DagJobBody, DagRequest, DagResponse, DagSubmitResponse};
use super::{Api, ApiError, ErrorCode, Reply200, json};
use cohort_master::{Command, DagId, DagNodeSpec, DagRef, DagSpec, JobState, OnFailure, Reply};
use hyper::StatusCode;
use std::collections::HashMap;

impl Api {
    /// `POST /v1/dags`: every job in the caller's namespace if it is
    /// confined to one.
    pub(super) async fn dag_submit(
        &self,
        within: Option<&str>,
        request: DagRequest,
        given: Option<cohort_master::TraceContext>,
    ) -> Result<Reply200, ApiError> {
        // The DAG is one trace: each of its jobs is a child of its
        // submission's span.
        let (span, trace) = crate::telemetry::submission_span!(
            given,
            "cohort.dag.submit",
            otel.kind = "server",
            dag_id = tracing::field::Empty
        );
        let invalid = |message: String| Err(ApiError::new(ErrorCode::InvalidDag, message));
        let on_failure = match request.on_failure.as_deref() {
            None => OnFailure::SkipDescendants,
            Some(name) => match OnFailure::from_name(name) {
                Some(policy) => policy,
                None => return invalid("on_failure: skip_descendants or cancel_dag".into()),
            },
        };
        let max = cohort_master::limits::DAG_JOBS_MAX;
        if request.jobs.is_empty() || request.jobs.len() > max {
            return invalid(format!("jobs: 1 to {max} per DAG"));
        }
        if let Some(key) = &request.idempotency_key
            && !(1..=super::IDEMPOTENCY_KEY_CHARS_MAX).contains(&key.chars().count())
        {
            return invalid(format!(
                "idempotency_key: 1 to {} characters",
                super::IDEMPOTENCY_KEY_CHARS_MAX
            ));
        }
        let index: HashMap<&str, u32> = (request.jobs.iter().enumerate())
            .map(|(i, job)| (job.name.as_str(), i as u32))
            .collect();
        let mut edges = Vec::with_capacity(request.jobs.len());
        for (i, job) in request.jobs.iter().enumerate() {
            let mut after = Vec::with_capacity(job.after.len() + job.after_jobs.len());
            for name in &job.after {
                match index.get(name.as_str()) {
                    Some(&parent) => after.push(DagRef::Node(parent)),
                    None => return invalid(format!("jobs[{i}].after: no job named {name:?}")),
                }
            }
            after.extend(job.after_jobs.iter().map(|&id| DagRef::Job(id)));
            edges.push(after);
        }
        let mut nodes = Vec::with_capacity(request.jobs.len());
        for ((i, job), after) in request.jobs.into_iter().enumerate().zip(edges) {
            if job.job.idempotency_key.is_some() {
                return invalid(format!(
                    "jobs[{i}].job.idempotency_key: a DAG's jobs take none (give the DAG one)"
                ));
            }
            if job.job.unique_key.is_some() || job.job.unique_window_ms.is_some() {
                return invalid(format!("jobs[{i}].job.unique_key: a DAG's jobs take none"));
            }
            let (spec, mut options) =
                self.submission(within, job.job)
                    .await
                    .map_err(|mut error| {
                        error.body.message = format!("jobs[{i}]: {}", error.body.message);
                        error
                    })?;
            options.trace = trace.map(Box::new);
            nodes.push(DagNodeSpec {
                name: job.name,
                spec,
                options,
                after,
                outputs: job.parent_outputs.unwrap_or(true),
            });
        }
        let command = Command::SubmitDag(DagSpec {
            nodes,
            on_failure,
            request: self.request_ids.next(),
            idempotency_key: request.idempotency_key,
        });
        let reply = {
            use tracing::Instrument;
            super::proxied(&self.master, command)
                .instrument(crate::telemetry::steps_span(&span, trace.as_ref()))
                .await?
        };
        let Reply::Dag { id, jobs, existing } = reply else {
            return Err(ApiError::new(ErrorCode::Internal, "unexpected reply"));
        };
        span.record("dag_id", id);
        Ok(json(
            StatusCode::ACCEPTED,
            &DagSubmitResponse { id, jobs, existing },
        ))
    }

    /// `GET /v1/dags/{id}`.
    pub(super) async fn dag_status(
        &self,
        within: Option<&str>,
        id: DagId,
    ) -> Result<Reply200, ApiError> {
        let view = self.master.dag(within, id).await?;
        let count = |state: JobState| view.counts[state as usize];
        let unfinished = count(JobState::Queued) + count(JobState::Running);
        let total: u64 = view.counts.iter().sum();
        let state = if unfinished > 0 {
            "running"
        } else if count(JobState::Succeeded) == total {
            "succeeded"
        } else if count(JobState::Failed) + count(JobState::Dead) > 0 {
            "failed"
        } else {
            "cancelled"
        };
        let counts = (JobState::ALL.iter())
            .map(|&state| (state.name().to_string(), count(state)))
            .collect();
        let jobs = (view.jobs.into_iter())
            .map(|(id, name, state, parents)| DagJobBody {
                id,
                name,
                state: state.map_or("purged", JobState::name).into(),
                parents,
            })
            .collect();
        Ok(json(
            StatusCode::OK,
            &DagResponse {
                id: view.id,
                state: state.into(),
                on_failure: view.on_failure.name().into(),
                created_at: view.created_at,
                counts,
                waiting: view.waiting,
                jobs,
            },
        ))
    }
}
