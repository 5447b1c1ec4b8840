//! Who may call what.
//!
//! * `GET /healthz` is open to anyone: load balancers probe it, and it says
//!   nothing but "up".
//! * Every other public route needs a token once the node has a cluster key
//!   (see [`crate::security::token`]): `read` for every `GET` (jobs,
//!   results, modules, the cluster, `/metrics`, which names nodes and
//!   load), `submit` for `POST /v1/jobs` and `/v1/jobs/batch`, `admin`
//!   for everything else (module uploads, cancels, `leave`, removing a
//!   voter, listing and managing tokens).
//!   Unknown routes need a token too, so probing without one learns
//!   nothing about which routes exist.
//! * `/internal/...` routes are for nodes: their bodies are sealed with the
//!   cluster key ([`crate::security::seal`]), no token involved.
//!
//! A missing, malformed, unknown or revoked token is `401 unauthorized`; a
//! valid token without the scope is `403 forbidden`. Both are counted.

use super::error::{ApiError, ErrorCode};
use super::http::{Reply200, json};
use super::types::RevokedResponse;
use crate::cluster::link::MasterLink;
use crate::limits::TOKEN_NAME_CHARS_MAX;
use crate::runtime::Digest;
#[cfg(doc)]
use crate::security::token::Scope;
use crate::security::token::TokenTable;
use cohort_master::Command;
use hyper::StatusCode;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// `POST /v1/tokens`: a token made by the caller (`cohort token create`),
/// of which the node sees only the hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenCreateRequest {
    /// The token's id (its second part; `cohort token create` makes 12
    /// hex digits).
    #[schema(pattern = "^[A-Za-z0-9-]{1,64}$")]
    pub id: String,
    /// What it is for.
    #[serde(default)]
    #[schema(max_length = 64)]
    pub name: String,
    /// `read`, `submit`, `admin`: at least one, each once.
    #[schema(value_type = Vec<ScopeName>, min_items = 1)]
    pub scopes: Vec<String>,
    /// SHA-256 of the token's secret part, hex.
    #[schema(pattern = "^(sha256:)?[0-9a-fA-F]{64}$")]
    pub sha256: String,
    /// The namespace the token is confined to: it then reaches that
    /// namespace's jobs only, and no cluster-wide route (absent:
    /// cluster-wide). Always written: the sealed route reads it as
    /// postcard, which has no absent fields.
    #[serde(default)]
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub namespace: Option<String>,
}

/// A scope's name, as tokens carry it (in the OpenAPI document; the
/// master checks the names, [`Scope`] is what a node enforces).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScopeName {
    /// Reads: jobs, results, modules, the cluster, metrics.
    Read,
    /// Submissions.
    Submit,
    /// Everything else: uploads, cancels, tokens, the cluster's voters.
    Admin,
}

/// A token as listed (never its secret or hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenBody {
    /// Id.
    pub id: String,
    /// What it is for.
    pub name: String,
    /// Scopes.
    pub scopes: Vec<String>,
    /// When it was made (ms since the Unix epoch).
    pub created_at: u64,
    /// The namespace it is confined to (absent: cluster-wide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `201` to `POST /v1/tokens`: the token as listed, and whether the node
/// that answered checks tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenCreatedResponse {
    /// The token (`created_at` 0 until listed).
    #[serde(flatten)]
    pub token: TokenBody,
    /// Whether the answering node checks tokens. `false` on a node
    /// without a cluster key (on loopback, or beyond it with
    /// `--insecure`): it lets every request in, with or without a token.
    /// The token is kept all the same, and nodes started with the key
    /// check it.
    pub checked: bool,
}

/// `GET /v1/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenListResponse {
    /// Every token, by id.
    pub tokens: Vec<TokenBody>,
}

/// What `POST /internal/v1/tokens` asks (postcard): the same operations
/// for a caller that proves the cluster key instead of an admin token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenOp {
    /// Create a token.
    Create(TokenCreateRequest),
    /// Revoke a token by id.
    Revoke(String),
    /// List tokens.
    List,
}

/// Refreshes `table` from the master's token records.
pub async fn refresh_tokens(master: &MasterLink, table: &TokenTable) {
    match master.tokens().await {
        Ok(records) => table.replace(&records),
        Err(error) => tracing::debug!("cannot refresh the tokens: {error}"),
    }
}

/// Creates, revokes or lists tokens through the master (the public route
/// and the sealed internal one).
pub(crate) async fn token_op(
    master: &MasterLink,
    tokens: Option<&Arc<TokenTable>>,
    op: TokenOp,
) -> Result<Reply200, ApiError> {
    match op {
        TokenOp::List => {
            let records = master.tokens().await?;
            Ok(json(
                StatusCode::OK,
                &TokenListResponse {
                    tokens: records
                        .into_iter()
                        .map(|r| TokenBody {
                            id: r.id,
                            name: r.name,
                            scopes: r.scopes,
                            created_at: r.created_at,
                            namespace: r.namespace,
                        })
                        .collect(),
                },
            ))
        }
        TokenOp::Create(request) => {
            if request.name.chars().count() > TOKEN_NAME_CHARS_MAX {
                return Err(ApiError::new(
                    ErrorCode::InvalidToken,
                    format!(
                        "a token name is at most {} characters",
                        TOKEN_NAME_CHARS_MAX
                    ),
                ));
            }
            let hash = request
                .sha256
                .parse::<Digest>()
                .map_err(|_| {
                    ApiError::new(ErrorCode::InvalidToken, "sha256 must be 64 hex digits")
                })?
                .to_bytes();
            let record = cohort_master::TokenRecord {
                id: request.id,
                name: request.name,
                scopes: request.scopes,
                hash,
                created_at: 0,
                namespace: request.namespace,
            };
            master.command(Command::CreateToken(record.clone())).await?;
            if let Some(table) = tokens {
                table.insert(&record);
            }
            Ok(json(
                StatusCode::CREATED,
                &TokenCreatedResponse {
                    token: TokenBody {
                        id: record.id,
                        name: record.name,
                        scopes: record.scopes,
                        created_at: 0,
                        namespace: record.namespace,
                    },
                    checked: tokens.is_some(),
                },
            ))
        }
        TokenOp::Revoke(id) => {
            master
                .command(Command::RevokeToken { id: id.clone() })
                .await?;
            if let Some(table) = tokens {
                table.remove(&id);
            }
            Ok(json(StatusCode::OK, &RevokedResponse { id, revoked: true }))
        }
    }
}
