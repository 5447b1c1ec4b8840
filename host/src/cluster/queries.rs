//! The master's queries as typed calls on [`MasterLink`].
//!
//! On the wire a query is one [`Query`] and its answer one [`Answer`]; the
//! master answers each query with exactly one variant. Callers should not
//! each re-check that pairing, so every query has one method here that
//! returns what its variant carries. An answer of another variant (a
//! master build that breaks the pairing) is `MasterError::Unavailable`,
//! as any other answer the proxy cannot use.

use super::link::MasterLink;
use crate::contract::MasterError;
use cohort_master::{
    Answer, BlobStatus, BulkAction, DagId, DagView, DeploymentView, Digest, Finished, JobFilter,
    JobId, JobSummary, JobView, KeptBlob, NamespaceView, Query, Recent, ScheduleView, SecretView,
    Stats, TokenRecord, WorkerView,
};
use std::time::Duration;

/// A page of [`MasterLink::jobs`]: the jobs, and the cursor for the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPage {
    /// The page.
    pub jobs: Vec<JobSummary>,
    /// Pass as `after` to continue; `None` at the end.
    pub next: Option<JobId>,
}

fn mismatch(query: &str, answer: &Answer) -> MasterError {
    MasterError::Unavailable(format!(
        "the master answered a {query} query with {answer:?}"
    ))
}

/// Defines one method per query: its name, arguments, the [`Query`] it
/// sends, the [`Answer`] variant it expects and what it returns of it.
macro_rules! queries {
    ($(
        $(#[$doc:meta])*
        $name:ident($($arg:ident: $ty:ty),*) -> $out:ty =
            $query:expr => $pattern:pat => $value:expr;
    )*) => {
        impl MasterLink {
            $(
                $(#[$doc])*
                pub async fn $name(&self, $($arg: $ty),*) -> Result<$out, MasterError> {
                    match self.query($query).await? {
                        $pattern => Ok($value),
                        other => Err(mismatch(stringify!($name), &other)),
                    }
                }
            )*
        }
    };
}

queries! {
    /// Every deployment (without their versions).
    deployments() -> Vec<DeploymentView> = Query::Deployments => Answer::Deployments(views) => views;
    /// One deployment with its kept versions.
    deployment(name: String) -> DeploymentView =
        Query::Deployment { name } => Answer::Deployment(view) => *view;
    /// Every secret's name, time and users (never a value).
    secrets() -> Vec<SecretView> = Query::Secrets => Answer::Secrets(views) => views;
    /// One job's record, as a caller confined to namespace `within` (or a
    /// cluster-wide one) sees it: another namespace's job is
    /// `job_not_found` ([`Query::InNamespace`]).
    job(within: Option<&str>, id: JobId) -> JobView =
        Query::Job { id }.within(within) => Answer::Job(view) => *view;
    /// One job's result bytes (seen from `within`, as [`job`](Self::job)).
    result(within: Option<&str>, id: JobId) -> Vec<u8> =
        Query::Result { id }.within(within) => Answer::Result(bytes) => bytes;
    /// One job's input bytes (seen from `within`, as [`job`](Self::job)).
    input(within: Option<&str>, id: JobId) -> Vec<u8> =
        Query::Input { id }.within(within) => Answer::Input(bytes) => bytes;
    /// A page of the jobs `filter` matches (see [`Query::Jobs`]), of
    /// namespace `within` only if it is given.
    jobs(
        within: Option<&str>,
        filter: JobFilter,
        after: Option<JobId>,
        limit: u32,
        newest_first: bool
    ) -> JobPage =
        Query::Jobs { filter, after, limit, newest_first }.within(within) =>
        Answer::Jobs { jobs, next } => JobPage { jobs, next };
    /// How many jobs a bulk `action` over `filter` would change now (of
    /// namespace `within` only if it is given).
    bulk_count(within: Option<&str>, action: BulkAction, filter: JobFilter) -> u64 =
        Query::Bulk { action, filter }.within(within) => Answer::Count(count) => count;
    /// Jobs finished in the last `window_ms`.
    recent(window_ms: u64) -> Recent = Query::Recent { window_ms } => Answer::Recent(recent) => recent;
    /// Jobs the master holds per module.
    module_use() -> Vec<(Digest, u64)> = Query::ModuleUse => Answer::ModuleUse(uses) => uses;
    /// The master's counters.
    stats() -> Stats = Query::Stats => Answer::Stats(stats) => stats;
    /// The workers the master knows.
    workers() -> Vec<WorkerView> = Query::Workers => Answer::Workers(workers) => workers;
    /// The API tokens (hashes only).
    tokens() -> Vec<TokenRecord> = Query::Tokens => Answer::Tokens(records) => records;
    /// Every schedule, by name (of namespace `within` only, if it is
    /// given).
    schedules(within: Option<&str>) -> Vec<ScheduleView> =
        Query::Schedules.within(within) => Answer::Schedules(views) => views;
    /// One schedule (seen from `within`: another namespace's is
    /// `schedule_not_found`).
    schedule(within: Option<&str>, name: String) -> ScheduleView =
        Query::Schedule { name }.within(within) => Answer::Schedule(view) => *view;
    /// Every namespace's jobs and totals (of namespace `within` only, if
    /// it is given).
    namespaces(within: Option<&str>) -> Vec<NamespaceView> =
        Query::Namespaces.within(within) => Answer::Namespaces(views) => views;
    /// A DAG's status (seen from `within`, as [`job`](Self::job):
    /// another namespace's DAG is `dag_not_found`).
    dag(within: Option<&str>, id: DagId) -> DagView =
        Query::Dag { id }.within(within) => Answer::Dag(view) => *view;
    /// Whether the cluster keeps each of `digests` (at most
    /// [`BLOBS_ASKED_MAX`](cohort_master::limits::BLOBS_ASKED_MAX)), and what names it.
    blobs(digests: Vec<Digest>) -> Vec<BlobStatus> =
        Query::Blobs { digests } => Answer::Blobs(status) => status;
    /// A page of the blobs the cluster keeps, by digest, and where the
    /// next starts ([`Query::KeptBlobs`]).
    kept_blobs(after: Option<Digest>, limit: u32) -> (Vec<KeptBlob>, Option<Digest>) =
        Query::KeptBlobs { after, limit } => Answer::KeptBlobs { blobs, next } => (blobs, next);
}

impl MasterLink {
    /// The finished jobs among `ids` (outputs inline within the bounds),
    /// waiting up to `wait` for the first to finish if none has; seen from
    /// namespace `within` if it is given (another's jobs are unknown).
    pub async fn finished(
        &self,
        within: Option<&str>,
        ids: Vec<JobId>,
        output_max: u64,
        output_total: u64,
        wait: Duration,
    ) -> Result<Vec<Finished>, MasterError> {
        let query = Query::Finished {
            ids,
            output_max,
            output_total,
        }
        .within(within);
        match self.wait_finished(query, wait).await? {
            Answer::Finished(jobs) => Ok(jobs),
            other => Err(mismatch("finished", &other)),
        }
    }
}
