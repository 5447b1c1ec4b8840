//! The node-to-node routes (`/internal/v1/...`): the server side of the
//! links between nodes, kept apart from the public API (`crate::api`).
//!
//! They share the node's one HTTP listener: `api` hands any route under
//! `/internal/` here before looking at tokens. Every body is sealed with
//! the cluster key when the node has one (`crate::security::seal`), bound
//! to its method and path, and the answer to the request's nonce and
//! status; unsealed, foreign, stale or replayed requests are `401` and
//! change nothing. The routes, all `POST`, are entries of the one route
//! table ([`super::routes`]), which gives each its body limit:
//!
//! * `master` — the proxy's requests to the master (`cluster::link`);
//! * `replication` — replication messages between back-end nodes
//!   (`crate::replication::transport`), handed to this node's driver;
//! * `voters` — a voter removal asked of the master's node;
//! * `modules`, `modules/fetch` — module copies between nodes;
//! * `masters`, `masters/fetch` — uploaded master components, checked and
//!   stored on every back-end node before a switch (`crate::master::upgrade`);
//! * `tokens` — token operations proved with the cluster key.

use super::auth::{self, token_op};
use super::error::{ApiError, ErrorCode};
use super::http::{Reply200, bytes, error_response, json, not_stored, parse_digest, read_body};
use super::routes::{Found, Handler, Route};
use super::types::ModuleBody;
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
use hyper::http::request::Parts;
use hyper::{Request, Response, StatusCode};
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

impl Internal {
    /// Serves `request`, whose route `found` is one of the sealed ones.
    pub async fn serve(&self, found: Found<'_>, request: Request<Incoming>) -> Reply200 {
        let (parts, body) = request.into_parts();
        let (body, nonce) = match self.open_request(found.route, &parts, body).await {
            Ok(opened) => opened,
            Err(refused) => return refused,
        };
        let answer = self
            .route(found.route.handler, body)
            .await
            .unwrap_or_else(error_response);
        match (&self.sealer, nonce) {
            (Some(sealer), Some(nonce)) => seal_answer(sealer, &nonce, answer).await,
            _ => answer,
        }
    }

    /// The body of a node-to-node request of `route`, read within the
    /// route's bound and opened, with the nonce its answer is sealed to
    /// (`None` without a cluster key); or the answer refusing it.
    pub async fn open_request(
        &self,
        route: &Route,
        parts: &Parts,
        body: Incoming,
    ) -> Result<(Bytes, Option<[u8; 24]>), Reply200> {
        let limit = route.body_bytes_max;
        let sealed = parts
            .headers
            .get(CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes() == SEALED_CONTENT_TYPE.as_bytes());
        let unauthorized = |reason: &'static str, message: String| {
            counters::refused(what::INTERNAL, reason);
            error_response(ApiError::new(ErrorCode::Unauthorized, message))
        };
        let Some(sealer) = &self.sealer else {
            if sealed {
                return Err(unauthorized(
                    "no_key_here",
                    format!(
                        "node {} has no cluster key; start every node with the same --cluster-key",
                        self.node_id
                    ),
                ));
            }
            let body = read_body(&parts.headers, body, limit, route.too_large).await;
            return Ok((body.map_err(error_response)?, None));
        };
        if !sealed {
            return Err(unauthorized(
                "unsealed",
                format!(
                    "node {} only takes node-to-node requests sealed with its cluster key",
                    self.node_id
                ),
            ));
        }
        let limit = limit + crate::security::seal::OVERHEAD;
        let body = (read_body(&parts.headers, body, limit, route.too_large).await)
            .map_err(error_response)?;
        let opened = sealer
            .open(
                Purpose::Http,
                &request_context(b"POST", parts.uri.path().as_bytes()),
                &body,
                Freshness::Once,
            )
            .map_err(|error| unauthorized(error.reason(), format!("refused: {error}")))?;
        Ok((Bytes::from(opened.plaintext), Some(opened.nonce)))
    }

    /// The routes other nodes (and `cohort token --cluster-key`) call, with
    /// their bodies already opened.
    async fn route(&self, handler: Handler, body: Bytes) -> Result<Reply200, ApiError> {
        match handler {
            Handler::InternalMaster => {
                let answer = link::serve_wire(&self.master, &body).await;
                Ok(bytes("application/x-postcard", answer))
            }
            Handler::InternalVoters => {
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
            Handler::InternalReplication => {
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
            Handler::InternalModules => {
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
            Handler::InternalModuleFetch => {
                let text = std::str::from_utf8(&body).unwrap_or_default();
                let digest = parse_digest(text, ErrorCode::ModuleNotStored)?;
                if !self.modules.contains(&digest) {
                    return Err(not_stored(ErrorCode::ModuleNotStored, &digest));
                }
                Ok(bytes("application/wasm", self.modules.read(&digest).await?))
            }
            Handler::InternalMasters => {
                let digest = store_master(&self.masters, body).await?;
                Ok(json(StatusCode::OK, &upgrade_body(digest)))
            }
            Handler::InternalMasterFetch => {
                let text = std::str::from_utf8(&body).unwrap_or_default();
                let digest = parse_digest(text, ErrorCode::NotFound)?.to_bytes();
                match self.masters.read(&digest) {
                    Ok(wasm) => Ok(bytes("application/wasm", wasm)),
                    Err(error) => Err(ApiError::new(ErrorCode::NotFound, format!("{error:#}"))),
                }
            }
            Handler::InternalTokens => {
                let op = cohort_master::decode::<auth::TokenOp>(&body)?;
                token_op(&self.master, self.tokens.as_ref(), op).await
            }
            // The API hands over only the sealed routes.
            public => Err(ApiError::new(
                ErrorCode::Internal,
                format!("{public:?} is not a node-to-node route"),
            )),
        }
    }
}

/// `answer`, sealed to the nonce of the request (or blob stream) it
/// answers.
pub(super) async fn seal_answer(sealer: &Sealer, nonce: &[u8; 24], answer: Reply200) -> Reply200 {
    let (mut parts, body) = answer.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let code = parts.status.as_u16().to_be_bytes();
    let (sealed, _) = sealer.seal(Purpose::Http, &answer_context(nonce, &code), &body);
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static(SEALED_CONTENT_TYPE));
    Response::from_parts(parts, Full::new(Bytes::from(sealed)))
}

/// Checks an uploaded master component (compiling it into the node's
/// compile cache) and stores it; its digest.
pub async fn store_master(masters: &MasterStore, wasm: Bytes) -> Result<[u8; 32], ApiError> {
    let masters = masters.clone();
    tokio::task::spawn_blocking(move || {
        crate::master::handover::check_component(&wasm, Some(masters.cache_dir()))?;
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
