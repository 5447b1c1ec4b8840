//! `/v1/deployments`: names that point at modules.
//!
//! A deployment is a name (`send-email`) pointing at a stored module's
//! digest, with its versions kept: deploying another module makes a new
//! version, a rollback makes a new version pointing at an earlier one's
//! module. Jobs, DAG jobs and schedules may name their module by a
//! deployment's name; the master resolves it to the name's current module
//! when it accepts the job (at each firing, for a schedule) and records
//! name and version on the job. The node checks what only it can (the
//! module is stored in the cluster); the master keeps the names, decides
//! versions and validates names (`cohort_master::deployments`).
//!
//! `/v1/deployments/{name}/grants` adds what a name's jobs may reach over
//! HTTP(S), `.../grants/revoke` and `DELETE .../grants` take it away (see
//! `cohort_master::egress` for the patterns, `crate::runtime::egress` for
//! where a call is checked). A grant is parsed here, for a clear error at
//! once, and again by the master, which trusts no command.

use super::types::{
    CallRecord, DeployRequest, DeployResponse, DeploymentListResponse, DeploymentResponse,
    DeploymentVersion, GrantRequest, GrantsResponse, HttpGrantBody, RollbackRequest,
    UndeployResponse,
};
use super::{Api, ApiError, ErrorCode, Reply200, json};
use crate::api::http::{check_name, not_stored, parse_digest};
use crate::runtime::Digest;
use cohort_master::{Command, DeploymentView, HttpCall, HttpGrant, ModuleVersion, Reply};
use hyper::StatusCode;

impl Api {
    /// `GET /v1/deployments`.
    pub(super) async fn deployment_list(&self) -> Result<Reply200, ApiError> {
        let views = self.master.deployments().await?;
        let deployments = views.into_iter().map(response).collect();
        Ok(json(
            StatusCode::OK,
            &DeploymentListResponse { deployments },
        ))
    }

    /// `GET /v1/deployments/{name}`.
    pub(super) async fn deployment_get(&self, name: &str) -> Result<Reply200, ApiError> {
        let view = self.master.deployment(name.to_owned()).await?;
        Ok(json(StatusCode::OK, &response(view)))
    }

    /// `POST /v1/deployments/{name}`: the module must be stored in the
    /// cluster (uploaded with `POST /v1/modules`), so a name always points
    /// at a module workers can fetch.
    pub(super) async fn deploy(
        &self,
        name: &str,
        request: DeployRequest,
    ) -> Result<Reply200, ApiError> {
        check_name(name, ErrorCode::InvalidModuleName)?;
        let digest = parse_digest(&request.digest, ErrorCode::ModuleNotFound)?;
        if !self.fetcher.ensure(&self.modules, &digest).await? {
            return Err(not_stored(ErrorCode::ModuleNotFound, &digest));
        }
        let command = Command::Deploy {
            name: name.to_owned(),
            digest: digest.to_bytes(),
        };
        self.deployed(name, command).await
    }

    /// `POST /v1/deployments/{name}/rollback`.
    pub(super) async fn deployment_rollback(
        &self,
        name: &str,
        request: RollbackRequest,
    ) -> Result<Reply200, ApiError> {
        check_name(name, ErrorCode::InvalidModuleName)?;
        let command = Command::Rollback {
            name: name.to_owned(),
            to: request.to,
        };
        self.deployed(name, command).await
    }

    /// `DELETE /v1/deployments/{name}`.
    pub(super) async fn undeploy(&self, name: &str) -> Result<Reply200, ApiError> {
        check_name(name, ErrorCode::InvalidModuleName)?;
        let name = name.to_owned();
        (self.master)
            .command(Command::Undeploy { name: name.clone() })
            .await?;
        Ok(json(
            StatusCode::OK,
            &UndeployResponse {
                name,
                deleted: true,
            },
        ))
    }

    /// `POST /v1/deployments/{name}/grants` (`revoke` false) and
    /// `POST /v1/deployments/{name}/grants/revoke` (true).
    pub(super) async fn grants_change(
        &self,
        name: &str,
        request: GrantRequest,
        revoke: bool,
    ) -> Result<Reply200, ApiError> {
        check_name(name, ErrorCode::InvalidModuleName)?;
        let grants = (request.http.iter())
            .map(grant_of)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|why| ApiError::new(ErrorCode::InvalidGrant, why))?;
        if grants.is_empty() && request.secrets.is_empty() {
            return Err(ApiError::new(
                ErrorCode::InvalidGrant,
                "`http` and `secrets` list nothing (DELETE /v1/deployments/{name}/grants revokes all)",
            ));
        }
        // The master checks the secrets' names and count, as it checks the
        // grants again.
        let (name, secrets) = (name.to_owned(), request.secrets);
        let command = match revoke {
            false => Command::Grant {
                name,
                grants,
                secrets,
            },
            true => Command::Revoke {
                name,
                grants,
                secrets,
            },
        };
        self.granted(command).await
    }

    /// `DELETE /v1/deployments/{name}/grants`: every grant of the name.
    pub(super) async fn grants_revoke_all(&self, name: &str) -> Result<Reply200, ApiError> {
        check_name(name, ErrorCode::InvalidModuleName)?;
        let command = Command::Revoke {
            name: name.to_owned(),
            grants: Vec::new(),
            secrets: Vec::new(),
        };
        self.granted(command).await
    }

    async fn granted(&self, command: Command) -> Result<Reply200, ApiError> {
        let (Command::Grant { name, .. } | Command::Revoke { name, .. }) = &command else {
            return Err(ApiError::new(ErrorCode::Internal, "not a grant command"));
        };
        let name = name.clone();
        let Reply::Granted { grants, secrets } = self.master.command(command).await? else {
            return Err(ApiError::new(ErrorCode::Internal, "unexpected reply"));
        };
        Ok(json(
            StatusCode::OK,
            &GrantsResponse {
                name,
                http: grants.iter().map(grant_body).collect(),
                secrets,
            },
        ))
    }

    async fn deployed(&self, name: &str, command: Command) -> Result<Reply200, ApiError> {
        let Reply::Deployed {
            version,
            digest,
            existing,
        } = self.master.command(command).await?
        else {
            return Err(ApiError::new(ErrorCode::Internal, "unexpected reply"));
        };
        Ok(json(
            StatusCode::OK,
            &DeployResponse {
                name: name.to_owned(),
                version,
                digest: Digest::from(digest).to_string(),
                existing,
            },
        ))
    }
}

fn version(version: ModuleVersion) -> DeploymentVersion {
    DeploymentVersion {
        version: version.version,
        digest: Digest::from(version.digest).to_string(),
        deployed_at: version.at,
        rollback_of: version.rollback_of,
    }
}

fn response(view: DeploymentView) -> DeploymentResponse {
    DeploymentResponse {
        name: view.name,
        current: version(view.current),
        versions_total: view.versions_total,
        versions: view.versions.into_iter().map(version).collect(),
        grants: view.grants.iter().map(grant_body).collect(),
        secrets: view.secrets,
    }
}

/// The grant `body` spells, or why it is none (the master checks it again).
pub(crate) fn grant_of(body: &HttpGrantBody) -> Result<HttpGrant, String> {
    let headers: Vec<(String, String)> = (body.headers.iter())
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    Ok(HttpGrant::parse(&body.url, &body.methods, body.private)?
        .with_headers(&headers)?
        .with_record(body.record))
}

/// A grant as the API spells it.
pub(crate) fn grant_body(grant: &HttpGrant) -> HttpGrantBody {
    HttpGrantBody {
        url: grant.url(),
        methods: grant.methods.clone(),
        private: grant.private,
        headers: grant.headers.iter().cloned().collect(),
        record: grant.record,
    }
}

/// A recorded call as the API shows it.
pub(crate) fn call_record(call: HttpCall) -> CallRecord {
    CallRecord {
        method: call.method,
        origin: call.origin,
        status: call.status,
        error: call.error,
        sent_bytes: call.sent_bytes,
        received_bytes: call.received_bytes,
        ms: call.ms,
    }
}
