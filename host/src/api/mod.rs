//! The HTTP API (hyper, HTTP/1.1 keep-alive).
//!
//! Every route and its errors are listed in the README. Design notes:
//!
//! * **Errors** are JSON `{code, message}`; the code is stable and decides
//!   the status ([`status_for`]). `429` and `503` carry `Retry-After`.
//! * **Bodies are bounded** before they are read: modules by the module
//!   limit, jobs by [`JOB_BODY_BYTES_MAX`], batches by
//!   [`BATCH_BODY_BYTES_MAX`]; beyond, `413 body_too_large`.
//! * **Acknowledged means durable**: `202` is sent only after the master's
//!   journal fsync that covers the job (see [`crate::master::service`]).
//! * **Waiting** (`?wait_ms=`) is a watch on the job, not a poll loop, and is
//!   capped at [`WAIT_MS_MAX`].
//! * **Connections are bounded** ([`CONNECTIONS_MAX`]); beyond, clients wait
//!   to be accepted, so waits and bodies in flight are bounded too.

pub mod types;

use crate::cluster::link::{self, MasterLink};
use crate::cluster::membership::{Roles, View};
use crate::cluster::modules::ModuleFetcher;
use crate::master::MasterError;
use crate::modules::ModuleStore;
use crate::runtime::{Digest, ModuleError};
use crate::worker::ProgressBoard;
use base64::Engine as _;
use bytes::Bytes;
use cohort_master::{Answer, Command, JobSpec, JobState, JobView, Query, Rejection, Reply};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use types::*;

/// Largest `POST /v1/jobs` body: a 4 MiB input in base64 plus the fields.
pub const JOB_BODY_BYTES_MAX: usize = 6 << 20;
/// Largest `POST /v1/jobs/batch` body.
pub const BATCH_BODY_BYTES_MAX: usize = 64 << 20;
/// Most jobs in one batch.
pub const BATCH_JOBS_MAX: usize = 10_000;
/// Longest `wait_ms` honoured.
pub const WAIT_MS_MAX: u64 = 60_000;
/// Jobs per page of `GET /v1/jobs` when `limit` is not given.
pub const LIST_LIMIT_DEFAULT: u32 = 100;
/// Pause after a failed `accept` (out of file descriptors and the like).
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(50);
/// Time given to open connections to finish when the node stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Connections served at once (each may hold a long-poll and a body).
pub const CONNECTIONS_MAX: usize = 4096;
/// A client must send its request headers within this.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Defaults applied to submissions that leave a field out.
#[derive(Debug, Clone, Copy)]
pub struct JobDefaults {
    /// Per-attempt timeout.
    pub timeout_ms: u64,
    /// Attempts.
    pub max_attempts: u32,
    /// Largest memory limit a job may ask for on this node.
    pub memory_bytes_max: u64,
}

/// Who this node is, for `GET /v1/cluster`.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// Node id (also its worker id).
    pub id: String,
    /// Roles (a node without `front-end` refuses the public API).
    pub roles: Roles,
}

/// Everything a request handler needs.
#[derive(Debug)]
pub struct Api {
    /// The master, wherever it runs.
    pub master: MasterLink,
    /// Fetches and replicates modules between nodes.
    pub fetcher: ModuleFetcher,
    /// The cluster as this node sees it.
    pub view: watch::Receiver<View>,
    /// Where a leaving master's state arrives (back-end nodes only).
    pub handover: Option<Arc<crate::cluster::handover::Inbox>>,
    /// This node's journal replica (back-end nodes).
    pub replica: Option<Arc<crate::cluster::replica::Replica>>,
    /// Asks the node to leave the cluster (as SIGTERM does).
    pub leave: Arc<tokio::sync::Notify>,
    /// Uploaded modules.
    pub modules: Arc<ModuleStore>,
    /// Live progress of local attempts.
    pub progress: ProgressBoard,
    /// This node.
    pub node: NodeInfo,
    /// Submission defaults.
    pub defaults: JobDefaults,
    /// Responses by status, for `/metrics`.
    pub responses: Family<Vec<(String, String)>, Counter<u64, AtomicU64>>,
}

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    /// An error with `code` (which decides the status) and `message`.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            status: status_for(code),
            body: ErrorBody {
                code: code.into(),
                message: message.into(),
            },
        }
    }
}

impl From<Rejection> for ApiError {
    fn from(r: Rejection) -> Self {
        Self::new(&r.code, r.message)
    }
}

impl From<MasterError> for ApiError {
    fn from(error: MasterError) -> Self {
        match error {
            MasterError::Rejected(r) => r.into(),
            MasterError::Unavailable(reason) => Self::new("master_unavailable", reason),
            MasterError::Unreplicated(reason) => Self::new("replicas_unavailable", reason),
            MasterError::Moved(url) => {
                Self::new("master_unavailable", format!("the master moved to {url}"))
            }
            error @ MasterError::Indeterminate(_) => {
                Self::new("outcome_unknown", error.to_string())
            }
        }
    }
}

impl From<ModuleError> for ApiError {
    fn from(error: ModuleError) -> Self {
        Self::new(error.code(), error.to_string())
    }
}

/// The HTTP status of an error code.
pub fn status_for(code: &str) -> StatusCode {
    match code {
        "bad_json" | "bad_request" | "undecodable" => StatusCode::BAD_REQUEST,
        "not_found" | "job_not_found" | "job_expired" | "module_not_stored" => {
            StatusCode::NOT_FOUND
        }
        "method_not_allowed" => StatusCode::METHOD_NOT_ALLOWED,
        "job_finished"
        | "job_not_finished"
        | "job_not_succeeded"
        | "idempotency_conflict"
        | "already_master" => StatusCode::CONFLICT,
        "body_too_large" | "input_too_large" | "module_too_large" | "checkpoint_too_large" => {
            StatusCode::PAYLOAD_TOO_LARGE
        }
        "invalid_job" | "module_invalid" | "module_wrong_world" | "module_not_found" => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        "queue_full" => StatusCode::TOO_MANY_REQUESTS,
        "master_unavailable"
        | "replicas_unavailable"
        | "outcome_unknown"
        | "shutting_down"
        | "replication_failed" => StatusCode::SERVICE_UNAVAILABLE,
        "not_front_end" => StatusCode::FORBIDDEN,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

type Reply200 = Response<Full<Bytes>>;

fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Reply200 {
    let body = serde_json::to_vec(value).expect("API types serialize");
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn bytes(content_type: &'static str, body: impl Into<Bytes>) -> Reply200 {
    let mut response = Response::new(Full::new(body.into()));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn error_response(error: ApiError) -> Reply200 {
    let mut response = json(error.status, &error.body);
    if matches!(
        error.status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

/// Serves `api` on `listener` until `shutdown` turns true, then lets open
/// requests finish for a few seconds.
pub async fn serve(listener: TcpListener, api: Arc<Api>, mut shutdown: watch::Receiver<bool>) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let connections = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    loop {
        // At the bound, new connections wait in the kernel's accept queue.
        let Ok(slot) = connections.clone().acquire_owned().await else {
            break;
        };
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(error) => {
                        // Out of file descriptors and the like: back off.
                        tracing::warn!("accept failed: {error}");
                        tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let api = api.clone();
                let service = hyper::service::service_fn(move |request| {
                    let api = api.clone();
                    async move { Ok::<_, Infallible>(api.handle(request).await) }
                });
                let connection = graceful.watch(
                    http.serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                );
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!("connection ended: {error}");
                    }
                    drop(slot);
                });
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::info!("closing HTTP connections still open after {SHUTDOWN_GRACE:?}");
    }
}

fn params(request: &Request<Incoming>) -> HashMap<String, String> {
    request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) => (key.to_string(), value.to_string()),
            None => (pair.to_string(), String::new()),
        })
        .collect()
}

fn number<T: std::str::FromStr>(
    params: &HashMap<String, String>,
    name: &str,
) -> Result<Option<T>, ApiError> {
    params
        .get(name)
        .map(|value| {
            value.parse().map_err(|_| {
                ApiError::new(
                    "bad_request",
                    format!("{name} must be a number, got {value:?}"),
                )
            })
        })
        .transpose()
}

fn job_id(text: &str) -> Result<u64, ApiError> {
    text.parse()
        .map_err(|_| ApiError::new("bad_request", format!("job ids are numbers, got {text:?}")))
}

async fn read_body(request: Request<Incoming>, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            "body_too_large",
            format!("the body limit here is {limit} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(too_large());
    }
    match Limited::new(request.into_body(), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Err(error) => Err(ApiError::new(
            "bad_request",
            format!("could not read the body: {error}"),
        )),
    }
}

/// A module digest from a request; a malformed one is reported with `code`,
/// like a module that does not exist.
fn parse_digest(text: &str, code: &str) -> Result<Digest, ApiError> {
    text.parse()
        .map_err(|e: crate::runtime::module::DigestParseError| ApiError::new(code, e.to_string()))
}

fn not_stored(code: &str, digest: &Digest) -> ApiError {
    ApiError::new(
        code,
        format!("no module {digest} is stored; upload it with POST /v1/modules"),
    )
}

fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::new("bad_json", e.to_string()))
}

impl Api {
    async fn handle(&self, request: Request<Incoming>) -> Reply200 {
        let response = self.route(request).await.unwrap_or_else(error_response);
        self.responses
            .get_or_create(&vec![(
                "status".to_string(),
                response.status().as_u16().to_string(),
            )])
            .inc();
        response
    }

    async fn route(&self, request: Request<Incoming>) -> Result<Reply200, ApiError> {
        let path = request.uri().path().to_string();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let method = request.method().clone();
        let open_to_all = matches!(
            segments.as_slice(),
            ["healthz" | "metrics"]
                | ["internal", ..]
                | ["v1", "cluster"]
                | ["v1", "modules", _]
                | ["v1", "node", "leave"]
        );
        if !self.node.roles.front_end && !open_to_all {
            return Err(ApiError::new(
                "not_front_end",
                format!(
                    "node {} has no front-end role; send API requests to a front-end node",
                    self.node.id
                ),
            ));
        }
        match (&method, segments.as_slice()) {
            (&Method::POST, ["internal", "v1", "master"]) => {
                let body = read_body(request, BATCH_BODY_BYTES_MAX).await?;
                let answer = link::serve_wire(&self.master, &body).await;
                Ok(bytes("application/x-postcard", answer))
            }
            (&Method::POST, ["internal", "v1", "handover"]) => {
                let Some(inbox) = &self.handover else {
                    return Err(ApiError::new(
                        "bad_request",
                        "this node is not a back-end node",
                    ));
                };
                if self.master.local().is_some() {
                    return Err(ApiError::new(
                        "already_master",
                        "this node already hosts the master",
                    ));
                }
                let body = read_body(request, crate::cluster::handover::HANDOVER_BYTES_MAX).await?;
                let epoch = inbox
                    .accept(&body)
                    .await
                    .map_err(|e| ApiError::new("internal", e))?;
                Ok(json(StatusCode::OK, &serde_json::json!({ "epoch": epoch })))
            }
            (&Method::POST, ["internal", "v1", "replica"]) => {
                let Some(replica) = &self.replica else {
                    return Err(ApiError::new(
                        "bad_request",
                        "this node is not a back-end node",
                    ));
                };
                let body = read_body(request, crate::cluster::replica::REPLICA_BYTES_MAX).await?;
                Ok(bytes(
                    "application/x-postcard",
                    replica.serve_wire(&body).await,
                ))
            }
            (&Method::POST, ["internal", "v1", "modules"]) => {
                let body = read_body(request, crate::runtime::module::MODULE_BYTES_MAX).await?;
                let (digest, _) = self.modules.put(&body).await?;
                Ok(json(
                    StatusCode::OK,
                    &ModuleBody {
                        digest: digest.to_string(),
                        bytes: body.len() as u64,
                    },
                ))
            }
            (&Method::GET, ["healthz"]) => self.health(),
            (&Method::POST, ["v1", "node", "leave"]) => {
                self.leave.notify_one();
                Ok(json(
                    StatusCode::ACCEPTED,
                    &serde_json::json!({ "node": self.node.id, "status": "leaving" }),
                ))
            }
            (&Method::GET, ["metrics"]) => self.metrics().await,
            (&Method::POST, ["v1", "modules"]) => {
                let body = read_body(request, crate::runtime::module::MODULE_BYTES_MAX).await?;
                let (digest, new) = self.modules.put(&body).await?;
                self.fetcher
                    .replicate(&body)
                    .await
                    .map_err(|e| ApiError::new("replication_failed", e.to_string()))?;
                let status = if new {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                Ok(json(
                    status,
                    &ModuleBody {
                        digest: digest.to_string(),
                        bytes: body.len() as u64,
                    },
                ))
            }
            (&Method::GET, ["v1", "modules"]) => Ok(json(
                StatusCode::OK,
                &ModuleListResponse {
                    modules: self
                        .modules
                        .list()
                        .into_iter()
                        .map(|m| ModuleBody {
                            digest: m.digest.to_string(),
                            bytes: m.bytes,
                        })
                        .collect(),
                },
            )),
            (&Method::GET, ["v1", "modules", digest]) => {
                let digest = parse_digest(digest, "module_not_stored")?;
                if !self.modules.contains(&digest) {
                    return Err(not_stored("module_not_stored", &digest));
                }
                let wasm = self.modules.read(&digest).await?;
                Ok(bytes("application/wasm", wasm))
            }
            (&Method::POST, ["v1", "jobs"]) => {
                let body = read_body(request, JOB_BODY_BYTES_MAX).await?;
                let submit: SubmitRequest = parse_json(&body)?;
                let accepted = self.submit(submit).await?;
                Ok(json(StatusCode::ACCEPTED, &accepted))
            }
            (&Method::POST, ["v1", "jobs", "batch"]) => {
                let body = read_body(request, BATCH_BODY_BYTES_MAX).await?;
                let batch: BatchRequest = parse_json(&body)?;
                Ok(json(StatusCode::ACCEPTED, &self.submit_batch(batch).await?))
            }
            (&Method::GET, ["v1", "jobs"]) => self.list(&params(&request)).await,
            (&Method::GET, ["v1", "jobs", id]) => {
                let id = job_id(id)?;
                self.wait(id, &params(&request)).await?;
                let Answer::Job(view) = self.master.query(Query::Job { id }).await? else {
                    return Err(ApiError::new("internal", "unexpected answer"));
                };
                let mut response = self.job_response(view);
                if response.state == "running" && response.progress.is_none() {
                    // Running on another node: its worker's last poll brought it.
                    let current = response.attempts.last().map(|a| a.number);
                    response.progress = self
                        .master
                        .progress(id)
                        .await?
                        .filter(|p| Some(p.attempt) == current)
                        .map(|p| ProgressBody {
                            fraction: p.fraction,
                            message: p.message,
                        });
                }
                Ok(json(StatusCode::OK, &response))
            }
            (&Method::DELETE, ["v1", "jobs", id]) => {
                let id = job_id(id)?;
                self.master.command(Command::Cancel { id }).await?;
                let Answer::Job(view) = self.master.query(Query::Job { id }).await? else {
                    return Err(ApiError::new("internal", "unexpected answer"));
                };
                Ok(json(StatusCode::OK, &self.job_response(view)))
            }
            (&Method::GET, ["v1", "jobs", id, "result"]) => {
                let id = job_id(id)?;
                self.wait(id, &params(&request)).await?;
                match self.master.query(Query::Result { id }).await? {
                    Answer::Result(result) => Ok(bytes("application/octet-stream", result)),
                    _ => Err(ApiError::new("internal", "unexpected answer")),
                }
            }
            (&Method::GET, ["v1", "cluster"]) => self.cluster().await,
            (_, ["healthz" | "metrics"])
            | (_, ["v1", "modules" | "jobs" | "cluster"])
            | (_, ["v1", "modules" | "jobs", _])
            | (_, ["v1", "jobs", _, "result"]) => Err(ApiError::new(
                "method_not_allowed",
                format!("{method} is not allowed on {path}"),
            )),
            _ => Err(ApiError::new("not_found", format!("no route {path}"))),
        }
    }

    fn health(&self) -> Result<Reply200, ApiError> {
        if self.master.local().is_some_and(|m| m.has_failed()) {
            return Err(ApiError::new(
                "master_unavailable",
                "the master stopped after a failure; see the node's log",
            ));
        }
        Ok(json(StatusCode::OK, &serde_json::json!({"status": "ok"})))
    }

    async fn wait(&self, id: u64, params: &HashMap<String, String>) -> Result<(), ApiError> {
        let wait_ms = number::<u64>(params, "wait_ms")?
            .unwrap_or(0)
            .min(WAIT_MS_MAX);
        if wait_ms > 0 {
            self.master
                .wait_settled(id, Duration::from_millis(wait_ms))
                .await?;
        }
        Ok(())
    }

    async fn spec(&self, submit: SubmitRequest) -> Result<JobSpec, ApiError> {
        let digest = parse_digest(&submit.module, "module_not_found")?;
        if !self.fetcher.ensure(&self.modules, &digest).await? {
            return Err(not_stored("module_not_found", &digest));
        }
        let inputs = [
            submit.input.is_some(),
            submit.input_base64.is_some(),
            submit.input_json.is_some(),
        ];
        if inputs.iter().filter(|&&given| given).count() > 1 {
            return Err(ApiError::new(
                "bad_request",
                "give at most one of input, input_base64 and input_json",
            ));
        }
        let input = if let Some(text) = submit.input {
            text.into_bytes()
        } else if let Some(encoded) = submit.input_base64 {
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| ApiError::new("bad_request", format!("input_base64: {e}")))?
        } else if let Some(value) = submit.input_json {
            serde_json::to_vec(&value).expect("a JSON value serializes")
        } else {
            Vec::new()
        };
        if let Some(memory) = submit.memory_bytes
            && (memory == 0 || memory > self.defaults.memory_bytes_max)
        {
            return Err(ApiError::new(
                "invalid_job",
                format!(
                    "memory_bytes must be 1 to {} on this node",
                    self.defaults.memory_bytes_max
                ),
            ));
        }
        Ok(JobSpec {
            module: digest.to_bytes(),
            input,
            timeout_ms: submit.timeout_ms.unwrap_or(self.defaults.timeout_ms),
            memory_bytes: submit.memory_bytes,
            max_attempts: submit.max_attempts.unwrap_or(self.defaults.max_attempts),
            priority: submit.priority.unwrap_or(0),
            idempotency_key: submit.idempotency_key,
        })
    }

    async fn submit(&self, submit: SubmitRequest) -> Result<SubmitResponse, ApiError> {
        let spec = self.spec(submit).await?;
        match self.master.command(Command::Submit(spec)).await? {
            Reply::Submitted { id, existing } => Ok(SubmitResponse { id, existing }),
            other => Err(ApiError::new(
                "internal",
                format!("unexpected reply {other:?}"),
            )),
        }
    }

    async fn submit_batch(&self, batch: BatchRequest) -> Result<BatchResponse, ApiError> {
        if batch.jobs.len() > BATCH_JOBS_MAX {
            return Err(ApiError::new(
                "body_too_large",
                format!("at most {BATCH_JOBS_MAX} jobs per batch"),
            ));
        }
        // Send every command before awaiting any, so the whole batch lands
        // in as few journal syncs as possible.
        let mut pending = Vec::with_capacity(batch.jobs.len());
        for submit in batch.jobs {
            pending.push(match self.spec(submit).await {
                Ok(spec) => {
                    let master = self.master.clone();
                    Ok(tokio::spawn(async move {
                        master.command(Command::Submit(spec)).await
                    }))
                }
                Err(error) => Err(error),
            });
        }
        let mut results = Vec::with_capacity(pending.len());
        for item in pending {
            let outcome = match item {
                Err(error) => Err(error),
                Ok(task) => match task.await {
                    Ok(Ok(Reply::Submitted { id, existing })) => {
                        Ok(SubmitResponse { id, existing })
                    }
                    Ok(Ok(other)) => Err(ApiError::new(
                        "internal",
                        format!("unexpected reply {other:?}"),
                    )),
                    Ok(Err(error)) => Err(error.into()),
                    Err(error) => Err(ApiError::new("internal", error.to_string())),
                },
            };
            results.push(match outcome {
                Ok(accepted) => BatchItem::Accepted(accepted),
                Err(error) => BatchItem::Refused(error.body),
            });
        }
        Ok(BatchResponse { results })
    }

    async fn list(&self, params: &HashMap<String, String>) -> Result<Reply200, ApiError> {
        let state = match params.get("state") {
            None => None,
            Some(name) => Some(JobState::from_name(name).ok_or_else(|| {
                ApiError::new(
                    "bad_request",
                    format!(
                        "unknown state {name:?}: use queued, running, succeeded, failed, cancelled or dead"
                    ),
                )
            })?),
        };
        let query = Query::Jobs {
            state,
            after: number(params, "cursor")?,
            limit: number(params, "limit")?.unwrap_or(LIST_LIMIT_DEFAULT),
        };
        let Answer::Jobs { jobs, next } = self.master.query(query).await? else {
            return Err(ApiError::new("internal", "unexpected answer"));
        };
        Ok(json(
            StatusCode::OK,
            &JobListResponse {
                jobs: jobs
                    .into_iter()
                    .map(|j| JobSummaryBody {
                        id: j.id,
                        state: j.state.name().into(),
                        attempts: j.attempts,
                        submitted_at: j.submitted_at,
                    })
                    .collect(),
                next_cursor: next.map(|n| n.to_string()),
            },
        ))
    }

    fn job_response(&self, view: JobView) -> JobResponse {
        JobResponse {
            id: view.id,
            module: Digest::from(view.module).to_string(),
            state: view.state.name().into(),
            priority: view.priority,
            max_attempts: view.max_attempts,
            timeout_ms: view.timeout_ms,
            idempotency_key: view.idempotency_key,
            submitted_at: view.submitted_at,
            finished_at: view.finished_at,
            not_before: view.not_before,
            attempts: view.attempts,
            error: view.error.map(|f| ErrorBody {
                code: f.code,
                message: f.message,
            }),
            result_bytes: view.result_bytes,
            input_bytes: view.input_bytes,
            has_checkpoint: view.has_checkpoint,
            progress: (view.state == JobState::Running)
                .then(|| self.progress.get(view.id))
                .flatten()
                .map(|p| ProgressBody {
                    fraction: p.fraction,
                    message: p.message,
                }),
        }
    }

    async fn cluster(&self) -> Result<Reply200, ApiError> {
        let Answer::Workers(workers) = self.master.query(Query::Workers).await? else {
            return Err(ApiError::new("internal", "unexpected answer"));
        };
        let busy = |id: &str| workers.iter().find(|w| w.id == id).map_or(0, |w| w.running);
        let (master_node, master_epoch) = self.master.host().unwrap_or_default();
        let view = self.view.borrow().clone();
        let mut nodes: Vec<NodeBody> = view
            .members
            .iter()
            .map(|m| NodeBody {
                id: m.node_id.clone(),
                http: m.http.clone(),
                roles: m.roles.names().into_iter().map(String::from).collect(),
                generation: m.generation,
                status: if m.leaving { "leaving" } else { "live" }.into(),
                master: m.node_id == master_node,
                slots: m.slots,
                busy: busy(&m.node_id),
                version: m.version.clone(),
                master_seen: m.master_seen.clone(),
            })
            .collect();
        nodes.extend(view.dead.iter().map(|id| NodeBody {
            id: id.clone(),
            http: String::new(),
            roles: Vec::new(),
            generation: 0,
            status: "dead".into(),
            master: false,
            slots: 0,
            busy: 0,
            version: String::new(),
            master_seen: String::new(),
        }));
        Ok(json(
            StatusCode::OK,
            &ClusterResponse {
                nodes,
                master_node,
                master_epoch,
                workers: workers
                    .into_iter()
                    .map(|w| WorkerBody {
                        id: w.id,
                        slots: w.slots,
                        running: w.running,
                        last_seen: w.last_seen,
                    })
                    .collect(),
            },
        ))
    }

    async fn metrics(&self) -> Result<Reply200, ApiError> {
        let Answer::Stats(stats) = self.master.query(Query::Stats).await? else {
            return Err(ApiError::new("internal", "unexpected answer"));
        };
        let local = self.master.local();
        let idle = crate::master::service::MasterCounters::default();
        let counters = local.as_ref().map_or(&idle, |m| m.counters());
        let replication = local
            .as_ref()
            .and_then(|m| m.replication_status())
            .unwrap_or_default();
        let text = crate::metrics::render(&stats, counters, &replication, &self.responses)
            .map_err(|e| ApiError::new("internal", e.to_string()))?;
        Ok(bytes(
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            text,
        ))
    }
}
