//! A client of the HTTP API, used by the CLI, the tests and the benchmarks.

use crate::api::types::*;
use crate::peer::Peer;
use bytes::Bytes;
use cohort_master::JobId;
use hyper::{Method, StatusCode};
use std::time::Duration;

/// Longest one call may take: a long-poll waits up to
/// [`WAIT_MS_MAX`](crate::api::WAIT_MS_MAX) (60 s) on the server, and a
/// module upload may be 64 MiB.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error.
    #[error("{code}: {message} (HTTP {status})")]
    Api {
        /// HTTP status.
        status: u16,
        /// Stable code.
        code: String,
        /// Message.
        message: String,
        /// Whether the same request may succeed if sent again (the
        /// server's `retryable`; from the status if it sent none).
        retryable: bool,
    },
    /// The server could not be reached or the exchange failed.
    #[error("cannot reach {server}: {reason}")]
    Transport {
        /// The server URL.
        server: String,
        /// What went wrong.
        reason: String,
    },
    /// The answer was not what the API promises.
    #[error("unexpected answer from the server: {0}")]
    Protocol(String),
}

impl ClientError {
    /// The API error code, if the server sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether sending the same request again may succeed: the server said
    /// so, or it could not be reached (which may pass). Resend a submission
    /// with an idempotency key, lest it run twice.
    pub fn retryable(&self) -> bool {
        match self {
            ClientError::Api { retryable, .. } => *retryable,
            ClientError::Transport { .. } => true,
            ClientError::Protocol(_) => false,
        }
    }
}

/// Whether an error answer without a `retryable` field (an older server, a
/// proxy) may succeed again: the statuses that say "not now".
fn retryable_status(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    )
}

/// A connection pool to one cohort server.
#[derive(Debug, Clone)]
pub struct Client {
    server: String,
    peer: Peer,
}

impl Client {
    /// A client of `server` (e.g. `http://127.0.0.1:7070`).
    pub fn new(server: &str) -> Self {
        Self {
            server: server.trim_end_matches('/').to_string(),
            peer: Peer::default(),
        }
    }

    /// A client of `server` that sends `token` and trusts the PEM CA
    /// certificate `ca_cert` (or the system's roots) for `https://`.
    pub fn with_options(
        server: &str,
        token: Option<&str>,
        ca_cert: Option<&std::path::Path>,
    ) -> anyhow::Result<Self> {
        let tls = if server.starts_with("https://") {
            Some(crate::security::tls::client_config(ca_cert)?)
        } else {
            None
        };
        Ok(Self {
            server: server.trim_end_matches('/').to_string(),
            peer: Peer::new(tls, None, token)?,
        })
    }

    /// The server URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Sends a request; returns the status and body of a success, or the
    /// server's error.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let url = format!("{}{path}", self.server);
        let (status, body) = self
            .peer
            .exchange(method, &url, content_type, body, REQUEST_TIMEOUT)
            .await
            .map_err(|reason| ClientError::Transport {
                server: self.server.clone(),
                reason,
            })?;
        if status.is_success() {
            return Ok((status, body));
        }
        match serde_json::from_slice::<ErrorBody>(&body) {
            Ok(error) => Err(ClientError::Api {
                status: status.as_u16(),
                code: error.code,
                message: error.message,
                retryable: error.retryable.unwrap_or(retryable_status(status)),
            }),
            Err(_) => Err(ClientError::Api {
                status: status.as_u16(),
                code: "http_error".into(),
                message: String::from_utf8_lossy(&body).chars().take(500).collect(),
                retryable: retryable_status(status),
            }),
        }
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ClientError> {
        let (_, bytes) = self
            .call(
                method,
                path,
                "application/json",
                Bytes::from(body.unwrap_or_default()),
            )
            .await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Uploads a module; returns its digest.
    pub async fn upload(&self, wasm: Vec<u8>) -> Result<String, ClientError> {
        let (_, body) = self
            .call(
                Method::POST,
                "/v1/modules",
                "application/wasm",
                Bytes::from(wasm),
            )
            .await?;
        let module: ModuleBody =
            serde_json::from_slice(&body).map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(module.digest)
    }

    /// Submits one job.
    pub async fn submit(&self, request: &SubmitRequest) -> Result<SubmitResponse, ClientError> {
        let body = serde_json::to_vec(request).expect("serializes");
        self.json(Method::POST, "/v1/jobs", Some(body)).await
    }

    /// Submits many jobs in one request.
    pub async fn submit_batch(&self, request: &BatchRequest) -> Result<BatchResponse, ClientError> {
        let body = serde_json::to_vec(request).expect("serializes");
        self.json(Method::POST, "/v1/jobs/batch", Some(body)).await
    }

    /// A job's status; with `wait_ms`, waits up to that long for it to
    /// finish first.
    pub async fn job(&self, id: JobId, wait_ms: u64) -> Result<JobResponse, ClientError> {
        self.json(
            Method::GET,
            &format!("/v1/jobs/{id}?wait_ms={wait_ms}"),
            None,
        )
        .await
    }

    /// A job's result bytes.
    pub async fn result(&self, id: JobId) -> Result<Bytes, ClientError> {
        let path = format!("/v1/jobs/{id}/result");
        Ok(self
            .call(Method::GET, &path, "application/json", Bytes::new())
            .await?
            .1)
    }

    /// A page of jobs.
    pub async fn jobs(
        &self,
        state: Option<&str>,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<JobListResponse, ClientError> {
        let mut path = format!("/v1/jobs?limit={limit}");
        if let Some(state) = state {
            path.push_str(&format!("&state={state}"));
        }
        if let Some(cursor) = cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        self.json(Method::GET, &path, None).await
    }

    /// Cancels a job.
    pub async fn cancel(&self, id: JobId) -> Result<JobResponse, ClientError> {
        self.json(Method::DELETE, &format!("/v1/jobs/{id}"), None)
            .await
    }

    /// The cluster view.
    pub async fn cluster(&self) -> Result<ClusterResponse, ClientError> {
        self.json(Method::GET, "/v1/cluster", None).await
    }
}
