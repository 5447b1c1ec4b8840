//! `/v1/schedules`: create, list, read, pause, resume, delete and backfill
//! schedules. The node turns the request into a [`ScheduleSpec`] (the job
//! template is checked exactly as a submission is, module included) and
//! the master decides the rest: names, timings, time zones and the ticks
//! themselves (see `cohort_master::schedule`).
//!
//! A schedule is its jobs' namespace's. A token confined to a namespace
//! (`within`) creates schedules whose jobs are its namespace's, lists and
//! reads only those (`Query::InNamespace`: the master answers), and acts
//! on one through `Command::ScheduleIn`, which
//! the master decides only if the schedule is still that namespace's: the
//! check and the act are one decision. Another namespace's schedule is
//! `schedule_not_found`, as a missing one is. Names are unique in the
//! cluster (a name another namespace holds is `409 schedule_exists`), as
//! concurrency keys are: docs/security.md says so.

use super::types::{
    BackfillRequest, BackfillResponse, MissedRange, ScheduleDeletedResponse, ScheduleListResponse,
    ScheduleRequest, ScheduleResponse,
};
use super::{Api, ApiError, ErrorCode, Reply200, json};
use crate::limits::CATCH_UP_MS_DEFAULT;
use crate::runtime::Digest;
use cohort_master::{Command, Every, Overlap, Reply, ScheduleAction, ScheduleSpec, ScheduleView};
use hyper::StatusCode;

impl Api {
    /// `POST /v1/schedules`.
    pub(super) async fn schedule_create(
        &self,
        within: Option<&str>,
        request: ScheduleRequest,
        given: Option<cohort_master::TraceContext>,
    ) -> Result<Reply200, ApiError> {
        let invalid = |message: &str| Err(ApiError::new(ErrorCode::InvalidSchedule, message));
        let every = match (request.cron, request.every_ms) {
            (Some(expression), None) => Every::Cron {
                expression,
                timezone: request.timezone.unwrap_or_else(|| "UTC".into()),
            },
            (None, Some(ms)) if request.timezone.is_none() => Every::Interval { ms },
            (None, Some(_)) => return invalid("timezone: only a cron schedule has one"),
            (Some(_), Some(_)) => return invalid("cron, every_ms: give one of the two, not both"),
            (None, None) => return invalid("cron, every_ms: give one of the two"),
        };
        let overlap = match request.overlap.as_deref() {
            None => Overlap::Skip,
            Some(name) => match Overlap::from_name(name) {
                Some(overlap) => overlap,
                None => {
                    return invalid(
                        "overlap: one of skip, buffer_one, allow_all and cancel_running",
                    );
                }
            },
        };
        if request.job.unique_key.is_some() || request.job.unique_window_ms.is_some() {
            return invalid("job.unique_key: a schedule fires once per tick already");
        }
        if request.job.idempotency_key.is_some() {
            return invalid("job.idempotency_key: every tick is a new job");
        }
        let (job, mut options) = self.submission(within, request.job).await?;
        // Each firing starts a trace of its own, linked to this request's.
        let span = crate::telemetry::job_span!(
            "cohort.schedule.create",
            otel.kind = "server",
            schedule = request.name.as_str()
        );
        options.trace = crate::telemetry::job_context(&span, given).map(|trace| {
            Box::new(cohort_master::TraceContext {
                link: true,
                ..trace
            })
        });
        let name = request.name;
        let spec = ScheduleSpec {
            name: name.clone(),
            every,
            job,
            options,
            overlap,
            catch_up_ms: request.catch_up_ms.unwrap_or(CATCH_UP_MS_DEFAULT),
        };
        self.master.command(Command::CreateSchedule(spec)).await?;
        let view = self.schedule_view(within, &name).await?;
        Ok(json(StatusCode::CREATED, &response(view)))
    }

    /// `GET /v1/schedules`.
    pub(super) async fn schedule_list(&self, within: Option<&str>) -> Result<Reply200, ApiError> {
        let views = self.master.schedules(within).await?;
        let schedules = views.into_iter().map(response).collect();
        Ok(json(StatusCode::OK, &ScheduleListResponse { schedules }))
    }

    /// `GET /v1/schedules/{name}`.
    pub(super) async fn schedule_get(
        &self,
        within: Option<&str>,
        name: &str,
    ) -> Result<Reply200, ApiError> {
        let view = self.schedule_view(within, name).await?;
        Ok(json(StatusCode::OK, &response(view)))
    }

    /// `POST /v1/schedules/{name}/pause` and `/resume`.
    pub(super) async fn schedule_pause(
        &self,
        within: Option<&str>,
        name: &str,
        paused: bool,
    ) -> Result<Reply200, ApiError> {
        let command = act(within, name, ScheduleAction::Pause { paused });
        self.master.command(command).await?;
        self.schedule_get(within, name).await
    }

    /// `DELETE /v1/schedules/{name}`.
    pub(super) async fn schedule_delete(
        &self,
        within: Option<&str>,
        name: &str,
    ) -> Result<Reply200, ApiError> {
        self.master
            .command(act(within, name, ScheduleAction::Delete))
            .await?;
        Ok(json(
            StatusCode::OK,
            &ScheduleDeletedResponse {
                name: name.to_owned(),
                deleted: true,
            },
        ))
    }

    /// `POST /v1/schedules/{name}/backfill`.
    pub(super) async fn schedule_backfill(
        &self,
        within: Option<&str>,
        name: &str,
        request: BackfillRequest,
    ) -> Result<Reply200, ApiError> {
        let (from, to) = (request.from.unwrap_or(0), request.to.unwrap_or(u64::MAX));
        let command = act(within, name, ScheduleAction::Backfill { from, to });
        let Reply::Backfilled { ids } = self.master.command(command).await? else {
            return Err(ApiError::new(ErrorCode::Internal, "unexpected reply"));
        };
        Ok(json(StatusCode::ACCEPTED, &BackfillResponse { ids }))
    }

    /// Schedule `name`, if `within` reaches it (the master answers
    /// another namespace's as not found, as a missing one).
    async fn schedule_view(
        &self,
        within: Option<&str>,
        name: &str,
    ) -> Result<ScheduleView, ApiError> {
        Ok(self.master.schedule(within, name.into()).await?)
    }
}

/// The namespace of a schedule's jobs, by name (`default`).
fn namespace_of(spec: &ScheduleSpec) -> &str {
    cohort_master::namespaces::name_of(spec.options.namespace.as_deref())
}

/// The command doing `action` on schedule `name` for a caller confined to
/// `within`: one the master decides only if the schedule is that
/// namespace's, or, cluster-wide (`None`), the plain one.
fn act(within: Option<&str>, name: &str, action: ScheduleAction) -> Command {
    let name = name.to_owned();
    match (within, action) {
        (Some(namespace), action) => Command::ScheduleIn {
            namespace: Some(namespace.to_owned()),
            name,
            action,
        },
        (None, ScheduleAction::Pause { paused }) => Command::PauseSchedule { name, paused },
        (None, ScheduleAction::Delete) => Command::DeleteSchedule { name },
        (None, ScheduleAction::Backfill { from, to }) => Command::Backfill { name, from, to },
    }
}

fn response(view: ScheduleView) -> ScheduleResponse {
    let spec = view.spec;
    let namespace = namespace_of(&spec).to_owned();
    let (cron, timezone, every_ms) = match spec.every {
        Every::Cron {
            expression,
            timezone,
        } => (Some(expression), Some(timezone), None),
        Every::Interval { ms } => (None, None, Some(ms)),
    };
    ScheduleResponse {
        namespace,
        name: spec.name,
        cron,
        timezone,
        every_ms,
        overlap: spec.overlap.name().into(),
        catch_up_ms: spec.catch_up_ms,
        // A schedule naming a deployment resolves it at each firing.
        module: (spec.options.module.clone())
            .unwrap_or_else(|| Digest::from(spec.job.module).to_string()),
        input_bytes: spec.job.input.len() as u64,
        priority: spec.job.priority,
        max_attempts: spec.job.max_attempts,
        timeout_ms: spec.job.timeout_ms,
        concurrency_key: spec.options.limit.map(|limit| limit.key),
        created_at: view.created_at,
        paused: view.paused,
        upcoming: view.upcoming,
        buffered: view.buffered,
        active: view.active,
        last_tick: view.last.map(|(tick, _)| tick),
        last_job: view.last.map(|(_, job)| job),
        fired_total: view.fired_total,
        skipped_total: view.skipped_total,
        missed: (view.missed.into_iter())
            .map(|(from, to)| MissedRange { from, to })
            .collect(),
    }
}
