//! `GET /v1/namespaces`: each namespace's jobs and what they cost, as the
//! master counts them (see `cohort_master::namespaces`).

use super::types::{NamespaceBody, NamespaceListResponse};
use super::{Api, ApiError, Reply200, json};
use cohort_master::JobState;
use hyper::StatusCode;

impl Api {
    /// `GET /v1/namespaces`: every namespace's, or namespace `within`'s
    /// alone for a caller confined to it.
    pub(super) async fn namespaces(&self, within: Option<&str>) -> Result<Reply200, ApiError> {
        let views = self.master.namespaces(within).await?;
        let namespaces = (views.into_iter())
            .map(|view| NamespaceBody {
                jobs: (JobState::ALL.iter())
                    .map(|&state| (state.name().to_owned(), view.jobs[state as usize]))
                    .collect(),
                name: view.name,
                submitted_total: view.totals.submitted,
                attempts_metered: view.totals.attempts_metered,
                cpu_us: view.totals.cpu_us,
                egress_bytes: view.totals.egress_bytes,
            })
            .collect();
        Ok(json(StatusCode::OK, &NamespaceListResponse { namespaces }))
    }
}
