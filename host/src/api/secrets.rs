//! `/v1/secrets`: named values a grant's headers may name
//! (`Authorization: Bearer {secret:STRIPE}`), so the node adds them to a
//! job's granted requests and the job never holds them.
//!
//! The node that receives a value seals it with the cluster key
//! (`security::secrets`) before the master sees it; the master keeps the
//! sealed bytes only. No route answers a value back, sealed or not: the
//! list says names, times and which deployments use each. A node without
//! a cluster key refuses secrets (`secrets_unavailable`): nothing would
//! protect them on disk. Admin scope throughout.

use super::types::{
    SecretBody, SecretDeletedResponse, SecretListResponse, SecretRequest, SecretResponse,
};
use super::{Api, ApiError, ErrorCode, Reply200, json};
use crate::limits::SECRET_VALUE_BYTES_MAX;
use crate::security::secrets;
use cohort_master::{Command, Reply, check_secret_name as why_not};
use hyper::StatusCode;

/// The refusal of an invalid secret name.
fn check_secret_name(name: &str) -> Result<(), ApiError> {
    why_not(name).map_err(|why| ApiError::new(ErrorCode::InvalidSecret, why))
}

impl Api {
    /// `POST /v1/secrets/{name}`.
    pub(super) async fn secret_set(
        &self,
        name: &str,
        request: SecretRequest,
    ) -> Result<Reply200, ApiError> {
        check_secret_name(name)?;
        let Some(sealer) = &self.security.sealer else {
            return Err(ApiError::new(
                ErrorCode::SecretsUnavailable,
                "this node has no cluster key, so nothing would protect secrets on disk; \
                 start the nodes with --cluster-key to keep secrets",
            ));
        };
        let value = request.value.as_bytes();
        if value.is_empty() || value.len() > SECRET_VALUE_BYTES_MAX {
            return Err(ApiError::new(
                ErrorCode::InvalidSecret,
                format!("a secret's value is 1 to {SECRET_VALUE_BYTES_MAX} bytes"),
            ));
        }
        // A value goes into header values, where a control character (a
        // line break above all) could never be sent.
        if value.iter().any(|b| b.is_ascii_control() && *b != b'\t') {
            return Err(ApiError::new(
                ErrorCode::InvalidSecret,
                "a secret's value has no control characters (line breaks included):                  it is sent in header values",
            ));
        }
        let command = Command::SetSecret {
            name: name.to_owned(),
            sealed: secrets::seal(sealer, name, value),
        };
        let Reply::SecretSet { created } = self.master.command(command).await? else {
            return Err(ApiError::new(ErrorCode::Internal, "unexpected reply"));
        };
        Ok(json(
            StatusCode::OK,
            &SecretResponse {
                name: name.to_owned(),
                created,
            },
        ))
    }

    /// `GET /v1/secrets`.
    pub(super) async fn secret_list(&self) -> Result<Reply200, ApiError> {
        let views = self.master.secrets().await?;
        let secrets = (views.into_iter())
            .map(|view| SecretBody {
                name: view.name,
                updated_at: view.updated_at,
                used_by: view.used_by,
            })
            .collect();
        Ok(json(StatusCode::OK, &SecretListResponse { secrets }))
    }

    /// `DELETE /v1/secrets/{name}`.
    pub(super) async fn secret_delete(&self, name: &str) -> Result<Reply200, ApiError> {
        check_secret_name(name)?;
        let command = Command::DeleteSecret {
            name: name.to_owned(),
        };
        self.master.command(command).await?;
        Ok(json(
            StatusCode::OK,
            &SecretDeletedResponse {
                name: name.to_owned(),
                deleted: true,
            },
        ))
    }
}
