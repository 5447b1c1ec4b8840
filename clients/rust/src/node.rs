//! One node's HTTP API, call by call: what the [`Client`](crate::Client)
//! is built on, and what the CLI, the tests and the benchmarks use for
//! everything but submitting and waiting.

use crate::transport::{Body, HeadWait, Transport, TransportError};
use crate::types::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::{Method, Response, StatusCode};
use std::time::Duration;

/// Longest one call may take: a long-poll waits up to 60 s on the server,
/// and a module upload may be 64 MiB. (A streamed blob call is bounded by
/// the time since its body last moved instead, with an allowance for the
/// blob's size once it has all gone: see [`Transport::send`] and
/// [`BLOB_COPY_BYTES_PER_SEC`](crate::BLOB_COPY_BYTES_PER_SEC).)
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
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
        /// The server's `Retry-After`: wait at least this long first.
        retry_after: Option<Duration>,
    },
    /// The server could not be reached or the exchange failed.
    #[error("cannot reach {server}: {reason}")]
    Transport {
        /// The server URL.
        server: String,
        /// What went wrong.
        reason: String,
        /// True if the request never reached the server.
        not_sent: bool,
    },
    /// A job did not succeed: its state (`failed`, `dead`, `cancelled`,
    /// or `unknown`) and the job's own error code and message.
    #[error("job {id} {state}: {code}: {message}")]
    Job {
        /// The job.
        id: JobId,
        /// Its state.
        state: String,
        /// Its error code (`trap`, `timeout`, ..., `cancelled`).
        code: String,
        /// Its error message.
        message: String,
    },
    /// A wait ended before the job finished.
    #[error("job {} did not finish within {waited:?}", id.map_or("(not yet accepted)".into(), |id| id.to_string()))]
    WaitTimeout {
        /// The job, if its submission had landed.
        id: Option<JobId>,
        /// How long it was waited for.
        waited: Duration,
    },
    /// The answer was not what the API promises.
    #[error("unexpected answer from the server: {0}")]
    Protocol(String),
}

impl ClientError {
    /// The error's stable code: the server's, the job's, or
    /// `unreachable`, `wait_timeout`, `protocol` for the client's own.
    pub fn code(&self) -> &str {
        match self {
            ClientError::Api { code, .. } | ClientError::Job { code, .. } => code,
            ClientError::Transport { .. } => "unreachable",
            ClientError::WaitTimeout { .. } => "wait_timeout",
            ClientError::Protocol(_) => "protocol",
        }
    }

    /// Whether sending the same request again may succeed: the server said
    /// so, or it could not be reached (which may pass). Resend a submission
    /// with an idempotency key, lest it run twice.
    pub fn retryable(&self) -> bool {
        match self {
            ClientError::Api { retryable, .. } => *retryable,
            ClientError::Transport { .. } => true,
            ClientError::Protocol(_)
            | ClientError::Job { .. }
            | ClientError::WaitTimeout { .. } => false,
        }
    }

    /// The error of a job a batch's answer refused (its item is an error
    /// body inside the `202`). Its status is the one the server answers
    /// its code with ([`status_of_code`]): what the same job, submitted
    /// alone, would have been refused with.
    pub fn refused(error: ErrorBody) -> Self {
        ClientError::Api {
            status: status_of_code(&error.code),
            retryable: error.retryable.unwrap_or(false),
            code: error.code,
            message: error.message,
            retry_after: None,
        }
    }
}

/// The status the server answers a code it does not know with (one from a
/// newer master, say); also this client's for a code not in its table.
pub const UNKNOWN_CODE_STATUS: u16 = 500;

/// The HTTP status the server answers `code` with: its row of
/// [`ERROR_CODES`](crate::ERROR_CODES), or [`UNKNOWN_CODE_STATUS`].
pub fn status_of_code(code: &str) -> u16 {
    crate::ERROR_CODES
        .iter()
        .find(|(known, _, _)| *known == code)
        .map_or(UNKNOWN_CODE_STATUS, |&(_, status, _)| status)
}

/// Whether an error answer without a `retryable` field (an older server, a
/// proxy) may succeed again: the statuses that say "not now".
fn retryable_status(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    )
}

/// Most bytes of an error's body read from a streamed call's answer.
const ERROR_BODY_MAX: usize = 64 << 10;

/// The error an answer with `status` and `body` (the API's [`ErrorBody`],
/// or anything else from a proxy or an older server) stands for.
fn api_error(status: StatusCode, body: &[u8], retry_after: Option<Duration>) -> ClientError {
    let (code, message, retryable) = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(error) => (
            error.code,
            error.message,
            error.retryable.unwrap_or(retryable_status(status)),
        ),
        Err(_) => (
            "http_error".into(),
            String::from_utf8_lossy(body).chars().take(500).collect(),
            retryable_status(status),
        ),
    };
    ClientError::Api {
        status: status.as_u16(),
        code,
        message,
        retryable,
        retry_after,
    }
}

/// A connection pool to one cohort node.
#[derive(Debug, Clone)]
pub struct Node {
    server: String,
    transport: Transport,
    pub(crate) timing: Timing,
}

/// The waits of a node's streamed (blob) calls: the constants, or a
/// test's shorter ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    /// The usual wait: [`REQUEST_TIMEOUT`].
    pub request: Duration,
    /// [`BLOB_COPY_BYTES_PER_SEC`](crate::BLOB_COPY_BYTES_PER_SEC).
    pub copy_bytes_per_sec: u64,
    /// [`BLOB_FETCH_WAIT`](crate::BLOB_FETCH_WAIT).
    pub fetch: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            request: REQUEST_TIMEOUT,
            copy_bytes_per_sec: crate::BLOB_COPY_BYTES_PER_SEC,
            fetch: crate::BLOB_FETCH_WAIT,
        }
    }
}

impl Node {
    /// A client of `server` (e.g. `http://127.0.0.1:7070`), without a
    /// token, trusting no TLS server.
    pub fn new(server: &str) -> Self {
        Self::with_transport(
            server,
            Transport::new(crate::tls::trusting_nothing(), None).expect("no token to refuse"),
        )
    }

    /// A client of `server` that sends `token` and trusts the PEM CA
    /// certificate `ca_cert` (or the system's roots) for `https://`.
    pub fn with_options(
        server: &str,
        token: Option<&str>,
        ca_cert: Option<&std::path::Path>,
    ) -> Result<Self, String> {
        let tls = if server.starts_with("https://") {
            crate::tls::client_config(ca_cert)?
        } else {
            crate::tls::trusting_nothing()
        };
        Ok(Self::with_transport(server, Transport::new(tls, token)?))
    }

    /// A client of `server` over `transport` (shared by several nodes'
    /// clients).
    pub fn with_transport(server: &str, transport: Transport) -> Self {
        Self {
            server: server.trim_end_matches('/').to_string(),
            transport,
            timing: Timing::default(),
        }
    }

    /// This node's client sending the W3C `traceparent` of the caller's
    /// span with every request (`00-<trace id>-<span id>-<flags>`): the
    /// cluster's spans for a submission made through it (the proxy hop,
    /// the master's decision and commit, every attempt) join that trace.
    pub fn with_traceparent(&self, traceparent: &str) -> Result<Self, String> {
        Ok(Self {
            server: self.server.clone(),
            transport: self.transport.clone().with_traceparent(traceparent)?,
            timing: self.timing,
        })
    }

    /// This node's client with `timing` for its blob calls (tests).
    #[cfg(test)]
    pub(crate) fn with_timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
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
        self.call_within(method, path, content_type, body, REQUEST_TIMEOUT)
            .await
    }

    /// [`call`](Self::call), failing past `timeout`.
    pub async fn call_within(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let url = format!("{}{path}", self.server);
        let answer = self
            .transport
            .exchange(method, &url, content_type, body, timeout)
            .await
            .map_err(|e| self.unreachable(e))?;
        let (status, body) = (answer.status, answer.body);
        if status.is_success() {
            return Ok((status, body));
        }
        Err(api_error(status, &body, answer.retry_after))
    }

    /// Sends `body` (streamed) with `headers` to `path` as
    /// [`Transport::send`] does, waiting for the head as `wait` says;
    /// returns a success with its body still to be read, or the server's
    /// error (its body read, up to [`ERROR_BODY_MAX`] bytes, within
    /// `wait.timeout`).
    pub(crate) async fn open(
        &self,
        method: Method,
        path: &str,
        headers: HeaderMap,
        body: Body,
        wait: HeadWait,
    ) -> Result<Response<Incoming>, ClientError> {
        let url = format!("{}{path}", self.server);
        let timeout = wait.timeout;
        let response = self
            .transport
            .send(method, &url, headers, body, wait)
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = crate::transport::retry_after(response.headers());
        // The error's body is small; what cannot be read in time is left
        // out (the status still says what happened).
        let read = Limited::new(response.into_body(), ERROR_BODY_MAX).collect();
        let body = match tokio::time::timeout(timeout, read).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            _ => Bytes::new(),
        };
        Err(api_error(status, &body, retry_after))
    }

    /// A transport failure as this node's [`ClientError::Transport`].
    pub(crate) fn unreachable(&self, error: TransportError) -> ClientError {
        ClientError::Transport {
            server: self.server.clone(),
            reason: error.message,
            not_sent: error.not_sent,
        }
    }

    pub(crate) async fn json<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ClientError> {
        self.json_within(method, path, body, REQUEST_TIMEOUT).await
    }

    async fn json_within<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<T, ClientError> {
        let (_, bytes) = self
            .call_within(
                method,
                path,
                "application/json",
                Bytes::from(body.unwrap_or_default()),
                timeout,
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
        self.submit_batch_within(request, REQUEST_TIMEOUT).await
    }

    /// [`submit_batch`](Self::submit_batch), failing past `timeout`.
    pub async fn submit_batch_within(
        &self,
        request: &BatchRequest,
        timeout: Duration,
    ) -> Result<BatchResponse, ClientError> {
        let body = serde_json::to_vec(request).expect("serializes");
        self.json_within(Method::POST, "/v1/jobs/batch", Some(body), timeout)
            .await
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
        self.list(&JobQuery {
            filter: JobFilterBody {
                state: state.map(String::from),
                ..JobFilterBody::default()
            },
            limit: Some(limit),
            cursor: cursor.map(String::from),
            ..JobQuery::default()
        })
        .await
    }

    /// A page of the jobs `query` asks for.
    pub async fn list(&self, query: &JobQuery) -> Result<JobListResponse, ClientError> {
        self.json(Method::GET, &format!("/v1/jobs?{}", query.encode()), None)
            .await
    }

    /// Cancels a job.
    pub async fn cancel(&self, id: JobId) -> Result<JobResponse, ClientError> {
        self.json(Method::DELETE, &format!("/v1/jobs/{id}"), None)
            .await
    }

    /// The finished jobs among `ids` (at most 10,000), waiting up to
    /// `wait_ms` for the first to finish if none has.
    pub async fn wait(&self, ids: &[JobId], wait_ms: u64) -> Result<WaitResponse, ClientError> {
        self.wait_within(ids, wait_ms, REQUEST_TIMEOUT).await
    }

    /// [`wait`](Self::wait), failing past `timeout`.
    pub async fn wait_within(
        &self,
        ids: &[JobId],
        wait_ms: u64,
        timeout: Duration,
    ) -> Result<WaitResponse, ClientError> {
        let body = serde_json::to_vec(&WaitRequest {
            ids: ids.to_vec(),
            wait_ms,
        })
        .expect("serializes");
        self.json_within(Method::POST, "/v1/jobs/wait", Some(body), timeout)
            .await
    }

    /// The cluster view.
    pub async fn cluster(&self) -> Result<ClusterResponse, ClientError> {
        self.json(Method::GET, "/v1/cluster", None).await
    }

    /// The dashboard's overview: counters, latency, nodes, replica lag.
    pub async fn overview(&self) -> Result<OverviewResponse, ClientError> {
        self.json(Method::GET, "/v1/overview", None).await
    }

    /// Cancels or retries every job a filter matches (or, with
    /// `dry_run`, counts them).
    pub async fn bulk(&self, request: &BulkRequest) -> Result<BulkResponse, ClientError> {
        let body = serde_json::to_vec(request).expect("serializes");
        self.json(Method::POST, "/v1/jobs/bulk", Some(body)).await
    }

    /// Submits a DAG of jobs, all or nothing.
    pub async fn submit_dag(&self, request: &DagRequest) -> Result<DagSubmitResponse, ClientError> {
        let body = serde_json::to_vec(request).expect("serializes");
        self.json(Method::POST, "/v1/dags", Some(body)).await
    }

    /// A DAG's status.
    pub async fn dag(&self, id: u64) -> Result<DagResponse, ClientError> {
        self.json(Method::GET, &format!("/v1/dags/{id}"), None)
            .await
    }

    /// Creates a schedule.
    pub async fn create_schedule(
        &self,
        request: &ScheduleRequest,
    ) -> Result<ScheduleResponse, ClientError> {
        let body = serde_json::to_vec(request).expect("serializes");
        self.json(Method::POST, "/v1/schedules", Some(body)).await
    }

    /// Every schedule.
    pub async fn schedules(&self) -> Result<ScheduleListResponse, ClientError> {
        self.json(Method::GET, "/v1/schedules", None).await
    }

    /// One schedule.
    pub async fn schedule(&self, name: &str) -> Result<ScheduleResponse, ClientError> {
        let path = format!("/v1/schedules/{name}");
        self.json(Method::GET, &path, None).await
    }

    /// Pauses (`true`) or resumes a schedule.
    pub async fn pause_schedule(
        &self,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleResponse, ClientError> {
        let action = if paused { "pause" } else { "resume" };
        let path = format!("/v1/schedules/{name}/{action}");
        self.json(Method::POST, &path, Some(b"{}".to_vec())).await
    }

    /// Deletes a schedule (the jobs it fired stay).
    pub async fn delete_schedule(
        &self,
        name: &str,
    ) -> Result<ScheduleDeletedResponse, ClientError> {
        let path = format!("/v1/schedules/{name}");
        self.json(Method::DELETE, &path, None).await
    }

    /// Which master build runs.
    pub async fn master_build(&self) -> Result<MasterBuildResponse, ClientError> {
        self.json(Method::GET, "/v1/master", None).await
    }

    /// Uploads a master component and switches the cluster to it (see
    /// `cohort master upgrade`).
    pub async fn upgrade_master(&self, wasm: Vec<u8>) -> Result<MasterSwitchResponse, ClientError> {
        let (_, body) = self
            .call(
                Method::POST,
                "/v1/master/upgrade",
                "application/wasm",
                Bytes::from(wasm),
            )
            .await?;
        serde_json::from_slice(&body).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Switches the master back to the build before the last switch.
    pub async fn rollback_master(&self) -> Result<MasterSwitchResponse, ClientError> {
        self.json(Method::POST, "/v1/master/rollback", None).await
    }

    /// Fires a schedule's missed ticks in a range.
    pub async fn backfill(
        &self,
        name: &str,
        request: &BackfillRequest,
    ) -> Result<BackfillResponse, ClientError> {
        let body = serde_json::to_vec(request).expect("serializes");
        let path = format!("/v1/schedules/{name}/backfill");
        self.json(Method::POST, &path, Some(body)).await
    }

    /// The stored modules, with what each is.
    pub async fn modules(&self) -> Result<ModuleListResponse, ClientError> {
        self.json(Method::GET, "/v1/modules", None).await
    }

    /// Points deployment `name` at the stored module `digest` (a new
    /// version unless it already points there).
    pub async fn deploy(&self, name: &str, digest: &str) -> Result<DeployResponse, ClientError> {
        let request = DeployRequest {
            digest: digest.to_owned(),
        };
        let body = serde_json::to_vec(&request).expect("serializes");
        let path = format!("/v1/deployments/{name}");
        self.json(Method::POST, &path, Some(body)).await
    }

    /// Points deployment `name` back at an earlier version's module
    /// (`to`: the version; `None`: the one before the current one).
    pub async fn rollback(
        &self,
        name: &str,
        to: Option<u32>,
    ) -> Result<DeployResponse, ClientError> {
        let body = serde_json::to_vec(&RollbackRequest { to }).expect("serializes");
        let path = format!("/v1/deployments/{name}/rollback");
        self.json(Method::POST, &path, Some(body)).await
    }

    /// Every deployment, by name.
    pub async fn deployments(&self) -> Result<DeploymentListResponse, ClientError> {
        self.json(Method::GET, "/v1/deployments", None).await
    }

    /// One deployment, with its kept versions.
    pub async fn deployment(&self, name: &str) -> Result<DeploymentResponse, ClientError> {
        let path = format!("/v1/deployments/{name}");
        self.json(Method::GET, &path, None).await
    }

    /// Removes deployment `name` (jobs keep the module they resolved to).
    pub async fn undeploy(&self, name: &str) -> Result<UndeployResponse, ClientError> {
        let path = format!("/v1/deployments/{name}");
        self.json(Method::DELETE, &path, None).await
    }

    /// Adds outbound HTTP(S) grants to deployment `name`; its grants after.
    pub async fn grant(
        &self,
        name: &str,
        grants: &[HttpGrantBody],
    ) -> Result<GrantsResponse, ClientError> {
        let request = GrantRequest {
            http: grants.to_vec(),
            ..GrantRequest::default()
        };
        self.change_grants(name, &request, false).await
    }

    /// Adds (`revoke` false) or takes away (true) the grants and readable
    /// secrets of `request` for deployment `name`; all it holds after.
    pub async fn change_grants(
        &self,
        name: &str,
        request: &GrantRequest,
        revoke: bool,
    ) -> Result<GrantsResponse, ClientError> {
        let body = serde_json::to_vec(request).expect("serializes");
        let path = match revoke {
            false => format!("/v1/deployments/{name}/grants"),
            true => format!("/v1/deployments/{name}/grants/revoke"),
        };
        self.json(Method::POST, &path, Some(body)).await
    }

    /// Takes `grants` from deployment `name` (none listed: every grant);
    /// its grants after.
    pub async fn revoke(
        &self,
        name: &str,
        grants: &[HttpGrantBody],
    ) -> Result<GrantsResponse, ClientError> {
        if grants.is_empty() {
            let path = format!("/v1/deployments/{name}/grants");
            return self.json(Method::DELETE, &path, None).await;
        }
        let request = GrantRequest {
            http: grants.to_vec(),
            ..GrantRequest::default()
        };
        self.change_grants(name, &request, true).await
    }

    /// Sets secret `name` to `value` (admin; the node seals it).
    pub async fn set_secret(&self, name: &str, value: &str) -> Result<SecretResponse, ClientError> {
        let request = SecretRequest {
            value: value.to_owned(),
        };
        let body = serde_json::to_vec(&request).expect("serializes");
        let path = format!("/v1/secrets/{name}");
        self.json(Method::POST, &path, Some(body)).await
    }

    /// Every secret's name, time and users (never a value).
    pub async fn secrets(&self) -> Result<SecretListResponse, ClientError> {
        self.json(Method::GET, "/v1/secrets", None).await
    }

    /// Deletes secret `name` (refused while a grant names it).
    pub async fn delete_secret(&self, name: &str) -> Result<SecretDeletedResponse, ClientError> {
        let path = format!("/v1/secrets/{name}");
        self.json(Method::DELETE, &path, None).await
    }

    /// What this client's token may do.
    pub async fn whoami(&self) -> Result<WhoamiResponse, ClientError> {
        self.json(Method::GET, "/v1/whoami", None).await
    }

    /// Each namespace's jobs and what they cost (a token confined to a
    /// namespace: its own).
    pub async fn namespaces(&self) -> Result<NamespaceListResponse, ClientError> {
        self.json(Method::GET, "/v1/namespaces", None).await
    }

    /// Sets namespace `name`'s quotas, all four at once (an admin token
    /// that is not confined to a namespace; `QuotasBody::default()`: none).
    pub async fn set_quotas(
        &self,
        name: &str,
        quotas: &QuotasBody,
    ) -> Result<QuotasResponse, ClientError> {
        let path = format!("/v1/namespaces/{name}/quotas");
        let body = serde_json::to_vec(quotas).expect("quotas serialize");
        self.json(Method::POST, &path, Some(body)).await
    }

    /// Sets namespace `name`'s weight for its fair share of the workers
    /// (an admin token that is not confined to a namespace).
    pub async fn set_weight(&self, name: &str, weight: u32) -> Result<WeightResponse, ClientError> {
        let path = format!("/v1/namespaces/{name}/weight");
        let body = serde_json::to_vec(&WeightBody { weight }).expect("a weight serializes");
        self.json(Method::POST, &path, Some(body)).await
    }
}

/// Which page of `GET /v1/jobs` to ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobQuery {
    /// Which jobs (`ids` is not a listing's filter and is not sent).
    pub filter: JobFilterBody,
    /// Newest (highest id) first.
    pub newest_first: bool,
    /// Most jobs (the node's default, 100, when absent).
    pub limit: Option<u32>,
    /// The previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Only jobs of this namespace (a token confined to one sees its own
    /// only, whatever this says).
    pub namespace: Option<String>,
}

impl JobQuery {
    /// The query string, percent-encoded.
    pub fn encode(&self) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        let f = &self.filter;
        let numbers = [
            ("priority", f.priority.map(i64::from)),
            ("from", f.from.and_then(|n| i64::try_from(n).ok())),
            ("to", f.to.and_then(|n| i64::try_from(n).ok())),
            ("limit", self.limit.map(i64::from)),
        ];
        for (name, value) in [
            ("state", &f.state),
            ("module", &f.module),
            ("error", &f.error),
            ("namespace", &self.namespace),
        ] {
            if let Some(value) = value {
                query.append_pair(name, value);
            }
        }
        for (name, value) in numbers {
            if let Some(value) = value {
                query.append_pair(name, &value.to_string());
            }
        }
        if self.newest_first {
            query.append_pair("order", "newest");
        }
        if let Some(cursor) = &self.cursor {
            query.append_pair("cursor", cursor);
        }
        query.finish()
    }
}

#[cfg(test)]
mod query_tests {
    use super::*;

    #[test]
    fn a_listing_query_is_percent_encoded_and_omits_what_is_absent() {
        assert_eq!(JobQuery::default().encode(), "");
        let query = JobQuery {
            filter: JobFilterBody {
                state: Some("failed".into()),
                error: Some("disk full & 50%".into()),
                priority: Some(-2),
                ids: Some(vec![1]),
                ..JobFilterBody::default()
            },
            newest_first: true,
            limit: Some(5),
            cursor: Some("9".into()),
            namespace: Some("team-a".into()),
        };
        assert_eq!(
            query.encode(),
            "state=failed&error=disk+full+%26+50%25&namespace=team-a&priority=-2&limit=5&order=newest&cursor=9"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(code: &str, retryable: Option<bool>) -> ErrorBody {
        ErrorBody {
            code: code.into(),
            message: "why".into(),
            retryable,
        }
    }

    #[test]
    fn a_refused_batch_item_has_the_status_its_code_is_answered_with() {
        let cases = [
            ("module_not_found", Some(false), 422, false),
            ("invalid_job", Some(false), 422, false),
            ("invalid_dag", Some(false), 422, false),
            ("idempotency_conflict", Some(false), 409, false),
            ("unique_keys_full", Some(true), 429, true),
            ("queue_full", Some(true), 429, true),
            ("outcome_unknown", Some(true), 503, true),
            ("replicas_unavailable", None, 503, false),
            // A code from a newer master: the server answers it with 500.
            ("from_a_newer_master", Some(false), 500, false),
        ];
        for (code, retryable, status, retry) in cases {
            let error = ClientError::refused(item(code, retryable));
            assert_eq!(error.code(), code);
            assert_eq!(error.retryable(), retry, "{code}");
            match error {
                ClientError::Api { status: got, .. } => assert_eq!(got, status, "{code}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
