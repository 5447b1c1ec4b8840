//! The node-to-node routes (`/internal/v1/...`): the server side of the
//! links between nodes, kept apart from the public API (`crate::api`).
//!
//! They share the node's one HTTP listener: `api` hands any path under
//! `/internal/` here before looking at tokens. Every body is sealed with
//! the cluster key when the node has one (`crate::security::seal`), bound
//! to its method and path, and the answer to the request's nonce and
//! status; unsealed, foreign, stale or replayed requests are `401` and
//! change nothing. The routes, all `POST`, each with its body limit
//! ([`body_limit`]):
//!
//! * `master` — the proxy's requests to the master (`cluster::link`);
//! * `replication` — replication messages between back-end nodes
//!   (`crate::replication::transport`), handed to this node's driver;
//! * `voters` — a voter removal asked of the master's node;
//! * `modules`, `modules/fetch` — module copies between nodes;
//! * `masters`, `masters/fetch` — uploaded master components, checked and
//!   stored on every back-end node before a switch (`crate::master::upgrade`);
//! * `tokens` — token operations proved with the cluster key.

use crate::api::auth;
use crate::api::error::{ApiError, ErrorCode};
use crate::api::types::ModuleBody;
use crate::api::{
    Reply200, bytes, error_response, json, no_route, not_stored, parse_digest, read_body, token_op,
};
use crate::cluster::link::{self, MasterLink};
use crate::master::upgrade::{self, MasterStore};
use crate::modules::ModuleStore;
use crate::peer::{SEALED_CONTENT_TYPE, answer_context, request_context};
use crate::replication::Replication;
use crate::security::Sealer;
use crate::security::counters::{self, what};
use crate::security::key::Purpose;
use crate::security::seal::Freshness;
use crate::security::token::TokenTable;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use std::sync::Arc;

/// What the node-to-node routes reach on this node.
pub struct Internal {
    /// This node (named in refusals).
    pub node_id: String,
    /// Opens requests and seals answers (`None`: no cluster key; the routes
    /// take plain bodies, and the node listens on loopback only).
    pub sealer: Option<Arc<Sealer>>,
    /// The master, wherever it runs.
    pub master: MasterLink,
    /// This node's replication (back-end nodes).
    pub replication: Option<Replication>,
    /// The module store.
    pub modules: Arc<ModuleStore>,
    /// The token table refreshed after token operations.
    pub tokens: Option<Arc<TokenTable>>,
    /// Uploaded master components.
    pub masters: MasterStore,
}

impl std::fmt::Debug for Internal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Internal")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

/// The internal routes (all `POST`) and the largest body each takes: the
/// one list of them that [`Internal`] serves.
pub fn body_limit(segments: &[&str]) -> Option<usize> {
    Some(match segments {
        ["internal", "v1", "master"] => crate::contract::BATCH_BODY_BYTES_MAX,
        ["internal", "v1", "replication"] => crate::replication::transport::ENVELOPE_BYTES_MAX,
        ["internal", "v1", "voters"] => crate::contract::CONTROL_BODY_BYTES_MAX,
        ["internal", "v1", "modules"] => crate::runtime::module::MODULE_BYTES_MAX,
        ["internal", "v1", "masters"] => upgrade::MASTER_BYTES_MAX,
        ["internal", "v1", "modules", "fetch"]
        | ["internal", "v1", "masters", "fetch"]
        | ["internal", "v1", "tokens"] => crate::contract::CONTROL_BODY_BYTES_MAX,
        _ => return None,
    })
}

impl Internal {
    pub async fn serve(&self, request: Request<Incoming>) -> Reply200 {
        let path = request.uri().path().to_string();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let method = request.method().clone();
        let limit = match body_limit(&segments) {
            Some(limit) if method == Method::POST => limit,
            _ => return error_response(no_route(&method, &path, &segments)),
        };
        let sealed = request
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes() == SEALED_CONTENT_TYPE.as_bytes());
        let unauthorized = |reason: &'static str, message: String| {
            counters::refused(what::INTERNAL, reason);
            error_response(ApiError::new(ErrorCode::Unauthorized, message))
        };
        let Some(sealer) = &self.sealer else {
            if sealed {
                return unauthorized(
                    "no_key_here",
                    format!(
                        "node {} has no cluster key; start every node with the same --cluster-key",
                        self.node_id
                    ),
                );
            }
            let body = match read_body(request, limit).await {
                Ok(body) => body,
                Err(error) => return error_response(error),
            };
            return self
                .route(&segments, body)
                .await
                .unwrap_or_else(error_response);
        };
        if !sealed {
            return unauthorized(
                "unsealed",
                format!(
                    "node {} only takes node-to-node requests sealed with its cluster key",
                    self.node_id
                ),
            );
        }
        let body = match read_body(request, limit + crate::security::seal::OVERHEAD).await {
            Ok(body) => body,
            Err(error) => return error_response(error),
        };
        let opened = match sealer.open(
            Purpose::Http,
            &request_context(b"POST", path.as_bytes()),
            &body,
            Freshness::Once,
        ) {
            Ok(opened) => opened,
            Err(error) => return unauthorized(error.reason(), format!("refused: {error}")),
        };
        let answer = self
            .route(&segments, Bytes::from(opened.plaintext))
            .await
            .unwrap_or_else(error_response);
        let (mut parts, body) = answer.into_parts();
        let body = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let code = parts.status.as_u16().to_be_bytes();
        let (sealed, _) = sealer.seal(Purpose::Http, &answer_context(&opened.nonce, &code), &body);
        parts
            .headers
            .insert(CONTENT_TYPE, HeaderValue::from_static(SEALED_CONTENT_TYPE));
        Response::from_parts(parts, Full::new(Bytes::from(sealed)))
    }

    /// The routes other nodes (and `cohort token --cluster-key`) call, with
    /// their bodies already opened.
    async fn route(&self, segments: &[&str], body: Bytes) -> Result<Reply200, ApiError> {
        match segments {
            ["internal", "v1", "master"] => {
                let answer = link::serve_wire(&self.master, &body).await;
                Ok(bytes("application/x-postcard", answer))
            }
            ["internal", "v1", "voters"] => {
                let node: String = cohort_master::decode(&body)
                    .map_err(|r| ApiError::new(ErrorCode::BadRequest, r.to_string()))?;
                let result = match &self.replication {
                    Some(replication) => replication.remove_voter(node).await,
                    None => Err(crate::replication::RemoveVoterError::NotMaster),
                };
                Ok(bytes(
                    "application/x-postcard",
                    cohort_master::encode(&result),
                ))
            }
            ["internal", "v1", "replication"] => {
                let Some(replication) = &self.replication else {
                    return Err(ApiError::new(
                        ErrorCode::BadRequest,
                        "this node is not a back-end node",
                    ));
                };
                let envelope = crate::replication::transport::decode_envelope(&body)
                    .map_err(|r| ApiError::new(ErrorCode::BadRequest, r.to_string()))?;
                for message in envelope.messages {
                    replication.deliver(envelope.from.clone(), message);
                }
                Ok(bytes("application/x-postcard", Vec::new()))
            }
            ["internal", "v1", "modules"] => {
                let (digest, _) = self.modules.put(&body).await?;
                Ok(json(
                    StatusCode::OK,
                    &ModuleBody {
                        digest: digest.to_string(),
                        bytes: body.len() as u64,
                        ..ModuleBody::default()
                    },
                ))
            }
            ["internal", "v1", "modules", "fetch"] => {
                let text = std::str::from_utf8(&body).unwrap_or_default();
                let digest = parse_digest(text, ErrorCode::ModuleNotStored)?;
                if !self.modules.contains(&digest) {
                    return Err(not_stored(ErrorCode::ModuleNotStored, &digest));
                }
                Ok(bytes("application/wasm", self.modules.read(&digest).await?))
            }
            ["internal", "v1", "masters"] => {
                let digest = store_master(&self.masters, body).await?;
                Ok(json(StatusCode::OK, &upgrade_body(digest)))
            }
            ["internal", "v1", "masters", "fetch"] => {
                let text = std::str::from_utf8(&body).unwrap_or_default();
                let digest = parse_digest(text, ErrorCode::NotFound)?.to_bytes();
                match self.masters.read(&digest) {
                    Ok(wasm) => Ok(bytes("application/wasm", wasm)),
                    Err(error) => Err(ApiError::new(ErrorCode::NotFound, format!("{error:#}"))),
                }
            }
            ["internal", "v1", "tokens"] => {
                let op = cohort_master::decode::<auth::TokenOp>(&body)?;
                token_op(&self.master, self.tokens.as_ref(), op).await
            }
            // serve() routed only what body_limit knows.
            _ => unreachable!("an internal route without a body limit"),
        }
    }
}

/// Checks an uploaded master component (compiling it into the node's
/// compile cache) and stores it; its digest.
pub async fn store_master(masters: &MasterStore, wasm: Bytes) -> Result<[u8; 32], ApiError> {
    let masters = masters.clone();
    tokio::task::spawn_blocking(move || {
        crate::master::handover::check_component(&wasm, Some(masters.data_dir()))?;
        masters.put(&wasm).map_err(|e| {
            cohort_master::Rejection::new(
                ErrorCode::Internal.as_str(),
                format!("cannot store the master: {e}"),
            )
        })
    })
    .await
    .map_err(|e| ApiError::new(ErrorCode::Internal, format!("the check failed: {e}")))?
    .map_err(ApiError::from)
}

/// What a node answers for a stored master.
pub fn upgrade_body(digest: [u8; 32]) -> serde_json::Value {
    serde_json::json!({ "digest": upgrade::Build::Uploaded(digest).name() })
}
