//! `GET /v1/namespaces`: each namespace's jobs, what they cost and its
//! quotas, as the master counts them (see `cohort_master::namespaces`);
//! `POST /v1/namespaces/{name}/quotas` sets a namespace's quotas (see
//! `cohort_master::quotas`); `POST /v1/namespaces/{name}/weight` its
//! weight for its fair share (see `cohort_master::shares`).

use super::types::{
    NamespaceBody, NamespaceListResponse, QuotasBody, QuotasResponse, WeightBody, WeightResponse,
};
use super::{Api, ApiError, Reply200, json};
use crate::codes::ErrorCode;
use cohort_master::{Command, JobState, Quotas, Reply};
use hyper::StatusCode;

impl Api {
    /// `GET /v1/namespaces`: every namespace's, or namespace `within`'s
    /// alone for a caller confined to it.
    pub(super) async fn namespaces(&self, within: Option<&str>) -> Result<Reply200, ApiError> {
        Ok(json(StatusCode::OK, &self.namespace_list(within).await?))
    }

    /// What `GET /v1/namespaces` answers a caller confined to `within`
    /// (`None`: cluster-wide); a confined token's event stream sends it
    /// too.
    pub(super) async fn namespace_list(
        &self,
        within: Option<&str>,
    ) -> Result<NamespaceListResponse, ApiError> {
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
                result_bytes: view.result_bytes,
                quotas: quotas_body(view.quotas),
                weight: view.weight,
            })
            .collect();
        Ok(NamespaceListResponse { namespaces })
    }

    /// `POST /v1/namespaces/{name}/quotas`: all four at once, each left out
    /// none.
    pub(super) async fn namespace_quotas(
        &self,
        name: &str,
        body: QuotasBody,
    ) -> Result<Reply200, ApiError> {
        check_namespace(name)?;
        let quotas = quotas_of(&body);
        cohort_master::quotas::check(&quotas)
            .map_err(|why| ApiError::new(ErrorCode::InvalidQuota, why))?;
        self.setting(Command::SetQuotas {
            namespace: name.to_owned(),
            quotas,
        })
        .await?;
        let response = QuotasResponse {
            namespace: name.to_owned(),
            quotas: body,
        };
        Ok(json(StatusCode::OK, &response))
    }

    /// `POST /v1/namespaces/{name}/weight`.
    pub(super) async fn namespace_weight(
        &self,
        name: &str,
        body: WeightBody,
    ) -> Result<Reply200, ApiError> {
        check_namespace(name)?;
        cohort_master::shares::check_weight(body.weight)
            .map_err(|why| ApiError::new(ErrorCode::InvalidWeight, why))?;
        self.setting(Command::SetWeight {
            namespace: name.to_owned(),
            weight: body.weight,
        })
        .await?;
        let response = WeightResponse {
            namespace: name.to_owned(),
            weight: body.weight,
        };
        Ok(json(StatusCode::OK, &response))
    }

    /// Sends a namespace's setting (quotas, a weight) to the master, which
    /// answers it `Done` once durable.
    async fn setting(&self, command: Command) -> Result<(), ApiError> {
        match self.master.command(command).await? {
            Reply::Done => Ok(()),
            _ => Err(ApiError::new(ErrorCode::Internal, "unexpected reply")),
        }
    }
}

/// Refuses a name that cannot be a namespace's (`invalid_namespace`).
pub(crate) fn check_namespace(name: &str) -> Result<(), ApiError> {
    cohort_master::namespaces::check_name(name)
        .map_err(|why| ApiError::new(ErrorCode::InvalidNamespace, why))
}

/// A namespace's quotas as the master keeps them, from the API's body.
pub(crate) fn quotas_of(body: &QuotasBody) -> Quotas {
    Quotas {
        waiting_max: body.waiting_max,
        running_max: body.running_max,
        submissions_per_second: body.submissions_per_second,
        result_bytes_max: body.result_bytes_max,
    }
}

/// A namespace's quotas as the API shows them.
fn quotas_body(quotas: Quotas) -> QuotasBody {
    QuotasBody {
        waiting_max: quotas.waiting_max,
        running_max: quotas.running_max,
        submissions_per_second: quotas.submissions_per_second,
        result_bytes_max: quotas.result_bytes_max,
    }
}
