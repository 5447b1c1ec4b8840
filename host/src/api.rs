//! The public HTTP API (hyper, HTTP/1.1 keep-alive).
//!
//! Every route is one entry of the route table ([`routes`]), which decides
//! its scope, the nodes that serve it, its body limit and its handler; the
//! routes and their errors are documented in `docs/http-api.md` and in the
//! OpenAPI document built from the same table ([`openapi`]). The
//! node-to-node routes share this listener but are served by [`internal`]:
//! any route under `/internal/` goes there before tokens are looked at.
//! Design notes:
//!
//! * **Errors** are JSON `{code, message, retryable}`; the code is one of
//!   [`ErrorCode`], stable, and decides the status and `retryable` ([`error`]).
//!   `429` and `503` carry `Retry-After`.
//! * **Bodies are bounded** before they are read: modules by the module
//!   limit, jobs by [`JOB_BODY_BYTES_MAX`], batches by
//!   [`BATCH_BODY_BYTES_MAX`], waits by [`WAIT_BODY_BYTES_MAX`]; beyond,
//!   `413 body_too_large`.
//! * **Acknowledged means durable**: `202` is sent only once the job's
//!   journal entry is fsynced on a majority of the voters (see
//!   [`crate::master::service`], [`crate::replication`]).
//! * **One request, one job**: each submitted job gets a request id here,
//!   where the client's request arrived ([`request_ids`]), and keeps it
//!   through every forward and retry to the master, which creates the job
//!   once. Only a submission that got no answer from any master within the
//!   proxy's wait is `503 outcome_unknown` (see [`crate::cluster::link`]).
//! * **Waiting** (`?wait_ms=`) is a watch on the job, not a poll loop, and is
//!   capped at [`WAIT_MS_MAX`]. `POST /v1/jobs/wait` is one watch over up
//!   to 10,000 jobs, answered with the finished ones (outputs inline up to
//!   [`WAIT_OUTPUT_BYTES_MAX`] each, [`WAIT_OUTPUTS_BYTES_MAX`] in all): a
//!   client waits for all its jobs with a few requests, not one per job.
//! * **Connections are bounded** ([`CONNECTIONS_MAX`]); beyond, clients wait
//!   to be accepted, so waits and bodies in flight are bounded too. Headers
//!   must arrive within [`HEADER_READ_TIMEOUT`] and a body within
//!   [`body_deadline`] (`408 request_timeout`), so a slow client cannot
//!   hold a connection for long.
//! * **Security** ([`auth`], [`crate::security`]): tokens and scopes on the
//!   public routes once the node has a cluster key; the `/internal/` routes
//!   take sealed bodies instead ([`internal`]).
//!   With TLS on, a connection is TLS if its first byte starts a handshake;
//!   plain connections may only use the sealed internal routes.
//!
//! [`JOB_BODY_BYTES_MAX`]: crate::limits::JOB_BODY_BYTES_MAX
//! [`BATCH_BODY_BYTES_MAX`]: crate::limits::BATCH_BODY_BYTES_MAX
//! [`WAIT_BODY_BYTES_MAX`]: crate::limits::WAIT_BODY_BYTES_MAX
//! [`WAIT_MS_MAX`]: crate::limits::WAIT_MS_MAX
//! [`WAIT_OUTPUT_BYTES_MAX`]: crate::limits::WAIT_OUTPUT_BYTES_MAX
//! [`WAIT_OUTPUTS_BYTES_MAX`]: crate::limits::WAIT_OUTPUTS_BYTES_MAX
//! [`CONNECTIONS_MAX`]: crate::limits::CONNECTIONS_MAX
//! [`HEADER_READ_TIMEOUT`]: crate::limits::HEADER_READ_TIMEOUT

pub mod auth;
pub mod blobs;
pub mod dags;
pub mod dashboard;
pub mod deployments;
pub mod error;
pub mod http;
pub mod internal;
pub mod namespaces;
pub mod openapi;
pub mod request_ids;
pub mod routes;
pub mod schedules;
pub mod secrets;
pub mod upgrades;
/// The JSON bodies, shared with the clients (`cohort_client::types`).
use crate::limits::{
    ACCEPT_RETRY_PAUSE, BATCH_JOBS_MAX, CONNECTIONS_MAX, CONNECTIONS_PER_CLIENT_MAX,
    HEADER_READ_TIMEOUT, IDEMPOTENCY_KEY_CHARS_MAX, KEY_CHARS_MAX, LIST_LIMIT_DEFAULT,
    REFUSAL_WRITE_TIMEOUT, SHUTDOWN_GRACE, TLS_HANDSHAKE_TIMEOUT, TOKEN_REFRESH_WAIT,
    VOTER_CHANGE_TIMEOUT, WAIT_MS_MAX, WAIT_OUTPUT_BYTES_MAX, WAIT_OUTPUTS_BYTES_MAX,
};
pub use cohort_client::types;
pub mod wire;

use crate::cluster::link::MasterLink;
use crate::cluster::module_fetch::ModuleFetcher;
use crate::membership::{Roles, View};
use crate::modules::ModuleStore;
use crate::runtime::Digest;
use crate::security::Sealer;
use crate::security::counters::{self, what};
use crate::security::token::{Holder, TokenTable};
use crate::worker::ProgressBoard;
pub use auth::refresh_tokens;
use base64::Engine as _;
use bytes::Bytes;
use cohort_master::namespaces::name_of;
use cohort_master::{Command, JobOptions, JobSpec, JobState, JobView, KeyLimit, Reply, Unique};
pub use error::{ApiError, ErrorCode};
pub use http::body_deadline;
pub(crate) use http::{
    Body, ModuleRef, Reply200, bytes, error_response, json, module_ref, no_route, not_stored,
    parse_digest, parse_json, read_body,
};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::AUTHORIZATION;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use routes::{Access, Handler, Miss, Serves};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use types::*;

/// How `input_base64` is read: the standard alphabet, padded, and
/// lenient about the unused bits of the last symbol, which some encoders
/// leave set (the bytes are the same either way).
const INPUT_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

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
    /// This node's journal replication (back-end nodes).
    pub replication: Option<crate::replication::Replication>,
    /// The node-to-node routes (`/internal/...`), served on the same
    /// listener.
    pub internal: Arc<internal::Internal>,
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
    /// How this node protects itself.
    pub security: Security,
    /// Draws the request id of each submitted job.
    pub request_ids: request_ids::RequestIds,
    /// What this node saw happen to the cluster lately.
    pub history: Arc<crate::cluster::history::History>,
    /// Event streams (`GET /v1/events`) this node may still open.
    pub event_streams: Arc<tokio::sync::Semaphore>,
    /// Turns true when the node stops serving: event streams end.
    pub closing: watch::Receiver<bool>,
    /// Blobs stored here, and their copies on other nodes.
    pub blobs: crate::cluster::blob_transfer::BlobTransfer,
}

/// A node's security settings, as the API applies them.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// Seals and opens node-to-node bodies (`None`: the node has no
    /// cluster key, and its internal routes are open).
    pub sealer: Option<Arc<Sealer>>,
    /// The tokens allowed on the public API (`None`: no token needed).
    pub tokens: Option<Arc<TokenTable>>,
    /// TLS for the public API.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Started with `--insecure` (listening beyond loopback without a key).
    pub insecure: bool,
}

/// Serves `api` on `listener` until `shutdown` turns true, then lets open
/// requests finish for a few seconds.
pub async fn serve(listener: TcpListener, api: Arc<Api>, mut shutdown: watch::Receiver<bool>) {
    let mut http = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    http.http2().timer(hyper_util::rt::TokioTimer::new());
    let http = Arc::new(http);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let tls = api
        .security
        .tls
        .clone()
        .map(tokio_rustls::TlsAcceptor::from);
    let connections = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    let per_client = PerClient::default();
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
                let Some(held) = per_client.admit(&api, &stream) else {
                    counters::refused(what::CONNECTION, "too_many_connections");
                    if api.security.tls.is_none() {
                        tokio::spawn(refuse_connection(stream));
                    }
                    continue;
                };
                let (api, http, watcher, tls) = (api.clone(), http.clone(), graceful.watcher(), tls.clone());
                tokio::spawn(async move {
                    serve_connection(stream, api, &http, watcher, tls).await;
                    drop((slot, held));
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

/// Connections held per client address.
#[derive(Debug, Clone, Default)]
struct PerClient(Arc<std::sync::Mutex<HashMap<std::net::IpAddr, usize>>>);

/// One connection counted against its client; uncounted when dropped.
struct Held(PerClient, std::net::IpAddr);

impl Drop for Held {
    fn drop(&mut self) {
        let mut counts = self.0.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = counts.get_mut(&self.1) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.1);
            }
        }
    }
}

impl PerClient {
    /// Counts `stream` against its client address: `None` if that client
    /// holds [`CONNECTIONS_PER_CLIENT_MAX`] already, `Some(None)` for a
    /// member of the cluster (not counted), `Some(guard)` otherwise.
    fn admit(&self, api: &Api, stream: &tokio::net::TcpStream) -> Option<Option<Held>> {
        let Ok(peer) = stream.peer_addr() else {
            return Some(None);
        };
        let ip = peer.ip();
        let member = api.view.borrow().members.iter().any(|m| {
            m.http
                .trim_start_matches("http://")
                .parse::<std::net::SocketAddr>()
                .is_ok_and(|addr| addr.ip() == ip)
        });
        if member {
            return Some(None);
        }
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let count = counts.entry(ip).or_default();
        if *count >= CONNECTIONS_PER_CLIENT_MAX {
            return None;
        }
        *count += 1;
        Some(Some(Held(self.clone(), ip)))
    }
}

/// Answers a connection over the per-client bound with a JSON `429` and
/// closes it.
async fn refuse_connection(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let error = ApiError::new(
        ErrorCode::TooManyConnections,
        format!("at most {CONNECTIONS_PER_CLIENT_MAX} connections per client address"),
    );
    // Written before hyper sees the connection, so by hand; the body and
    // status are the API's own.
    let body = serde_json::to_string(&error.body).expect("API types serialize");
    let status = error.status;
    let answer = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, stream.write_all(answer.as_bytes())).await;
}

/// Serves one connection: TLS if TLS is on and the client starts a
/// handshake, plain HTTP otherwise.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    api: Arc<Api>,
    http: &hyper_util::server::conn::auto::Builder<TokioExecutor>,
    graceful: hyper_util::server::graceful::Watcher,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let Some(acceptor) = tls else {
        return serve_io(stream, api, http, graceful, false).await;
    };
    let mut first = [0u8; 1];
    match tokio::time::timeout(HEADER_READ_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        _ => return,
    }
    if first[0] != crate::security::tls::HANDSHAKE_BYTE {
        // Plain HTTP on a TLS node: sealed internal routes only (the
        // handler answers `tls_required` to anything else).
        return serve_io(stream, api, http, graceful, false).await;
    }
    let stream = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            counters::refused(what::CONNECTION, "tls_handshake");
            tracing::debug!("TLS handshake failed: {error}");
            return;
        }
        Err(_) => {
            counters::refused(what::CONNECTION, "tls_handshake_timeout");
            return;
        }
    };
    serve_io(stream, api, http, graceful, true).await;
}

/// Serves HTTP/1.1 or HTTP/2 on `io` until the client or the node closes
/// it; `secure`: the connection is TLS.
async fn serve_io<I>(
    io: I,
    api: Arc<Api>,
    http: &hyper_util::server::conn::auto::Builder<TokioExecutor>,
    graceful: hyper_util::server::graceful::Watcher,
    secure: bool,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request| {
        let api = api.clone();
        async move { Ok::<_, std::convert::Infallible>(api.handle(request, secure).await) }
    });
    let connection = graceful.watch(
        http.serve_connection(TokioIo::new(wire::JsonErrors::new(io)), service)
            .into_owned(),
    );
    if let Err(error) = connection.await {
        tracing::debug!("connection ended: {error}");
    }
}

/// The query string's parameters, percent-decoded (`+` is a space, as
/// browsers send forms; bytes that are not UTF-8 become U+FFFD). A
/// repeated name keeps its last value.
fn params(uri: &hyper::Uri) -> HashMap<String, String> {
    form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .into_owned()
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
                    ErrorCode::BadRequest,
                    format!("{name} must be a number, got {value:?}"),
                )
            })
        })
        .transpose()
}

/// A submission's keys, limits and uniqueness, checked against the
/// master's bounds with the JSON fields' names.
/// The master command of a checked submission: a plain `Submit`, or, for
/// a job that waits for others (`after`), a DAG of that one job whose key
/// is the job's idempotency key.
fn submit_command(
    (mut spec, options): (JobSpec, JobOptions),
    after: Vec<u64>,
    request: cohort_master::RequestId,
) -> Result<Command, ApiError> {
    if after.is_empty() {
        return Ok(Command::Submit {
            spec,
            request,
            options,
        });
    }
    if options.unique.is_some() {
        return Err(ApiError::new(
            ErrorCode::InvalidJob,
            "after: a job that waits for others takes no unique_key",
        ));
    }
    let idempotency_key = spec.idempotency_key.take();
    Ok(Command::SubmitDag(cohort_master::DagSpec {
        nodes: vec![cohort_master::DagNodeSpec {
            name: "job".into(),
            spec,
            options,
            after: after.into_iter().map(cohort_master::DagRef::Job).collect(),
            outputs: true,
        }],
        on_failure: cohort_master::OnFailure::SkipDescendants,
        request,
        idempotency_key,
    }))
}

/// An output blob as the API shows it.
fn output_blob(blob: cohort_master::NamedBlob) -> OutputBlob {
    OutputBlob {
        name: blob.name,
        digest: Digest::from(blob.digest).to_string(),
        bytes: blob.size,
    }
}

/// The answer to a submission's reply (a job's, or a one-job DAG's).
/// The client's W3C trace context, if its `traceparent` is well formed
/// (a malformed one is ignored: the submission starts a new trace).
fn traced(headers: &hyper::HeaderMap) -> Option<cohort_master::TraceContext> {
    let value = headers.get(crate::telemetry::TRACEPARENT)?.to_str().ok()?;
    crate::telemetry::parse_traceparent(value)
}

/// Sends a submission's `command` to the master: the proxy hop, a span of
/// its own under the submission's.
async fn proxied(master: &MasterLink, command: Command) -> Result<Reply, ApiError> {
    use tracing::Instrument;
    let span = crate::telemetry::job_step_span!(
        "cohort.proxy",
        otel.kind = "client",
        master = tracing::field::Empty
    );
    if !span.is_disabled() {
        let host = master.host().map(|(node, _)| node).unwrap_or_default();
        span.record("master", host.as_str());
    }
    Ok(master.command(command).instrument(span).await?)
}

fn accepted(reply: Reply) -> Result<SubmitResponse, ApiError> {
    match reply {
        Reply::Submitted { id, existing } => Ok(SubmitResponse { id, existing }),
        Reply::Dag { jobs, existing, .. } if jobs.len() == 1 => Ok(SubmitResponse {
            id: jobs[0],
            existing,
        }),
        other => Err(ApiError::new(
            ErrorCode::Internal,
            format!("unexpected reply {other:?}"),
        )),
    }
}

fn options(submit: &SubmitRequest) -> Result<JobOptions, ApiError> {
    use cohort_master::limits::{KEY_LIMIT_MAX, UNIQUE_WINDOW_MS_MAX};
    let invalid = |message: String| Err(ApiError::new(ErrorCode::InvalidJob, message));
    for (field, key) in [
        ("concurrency_key", &submit.concurrency_key),
        ("unique_key", &submit.unique_key),
    ] {
        if let Some(key) = key
            && !(1..=KEY_CHARS_MAX).contains(&key.chars().count())
        {
            return invalid(format!("{field} must be 1 to {KEY_CHARS_MAX} characters"));
        }
    }
    for (field, limit) in [
        ("concurrency_limit", submit.concurrency_limit),
        ("rate_limit", submit.rate_limit),
    ] {
        match limit {
            Some(limit) if !(1..=KEY_LIMIT_MAX).contains(&limit) => {
                return invalid(format!("{field} must be 1 to {KEY_LIMIT_MAX}"));
            }
            Some(_) if submit.concurrency_key.is_none() => {
                return invalid(format!("{field} needs a concurrency_key"));
            }
            _ => {}
        }
    }
    let limit = match &submit.concurrency_key {
        None => None,
        Some(_) if submit.concurrency_limit.is_none() && submit.rate_limit.is_none() => {
            return invalid("concurrency_key needs concurrency_limit or rate_limit".into());
        }
        Some(key) => Some(KeyLimit {
            key: key.clone(),
            running_max: submit.concurrency_limit,
            starts_per_second: submit.rate_limit,
        }),
    };
    let unique = match (&submit.unique_key, submit.unique_window_ms) {
        (None, None) => None,
        (None, Some(_)) => return invalid("unique_window_ms needs a unique_key".into()),
        (Some(_), None) => return invalid("unique_key needs unique_window_ms".into()),
        (Some(_), Some(window)) if !(1..=UNIQUE_WINDOW_MS_MAX).contains(&window) => {
            return invalid(format!(
                "unique_window_ms must be 1 to {UNIQUE_WINDOW_MS_MAX}"
            ));
        }
        (Some(key), Some(window_ms)) => Some(Unique {
            key: key.clone(),
            window_ms,
        }),
    };
    let egress = match &submit.egress {
        None => None,
        Some(grants) => Some(
            (grants.iter())
                .map(deployments::grant_of)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|why| ApiError::new(ErrorCode::InvalidGrant, format!("egress: {why}")))?,
        ),
    };
    let labels: Vec<(String, String)> = submit.labels.clone().into_iter().collect();
    if let Err(why) = cohort_master::check_labels(&labels) {
        return invalid(format!("labels: {why}"));
    }
    Ok(JobOptions {
        limit,
        unique,
        module: None,
        labels,
        egress,
        // Set by the submission once the blob is found in the cluster.
        input_blob: None,
        // Set by the submission from its span (`telemetry`).
        trace: None,
        // Set by the submission from the caller's token.
        namespace: None,
    })
}

/// The namespace a job submitted by a caller confined to `within` (or a
/// cluster-wide one: `None`) and naming `asked` belongs to, as the master
/// keeps it (`None`: the default one). A confined caller names its own
/// namespace or none.
fn job_namespace(within: Option<&str>, asked: Option<&str>) -> Result<Option<String>, ApiError> {
    let name = match (within, asked) {
        (Some(mine), Some(asked)) if mine != asked => {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                format!("namespace: this token reaches namespace {mine} only, not {asked}"),
            ));
        }
        (Some(name), _) | (None, Some(name)) => name,
        (None, None) => return Ok(None),
    };
    namespaces::check_namespace(name)?;
    Ok((name != cohort_master::namespaces::DEFAULT).then(|| name.to_owned()))
}

fn job_id(text: &str) -> Result<u64, ApiError> {
    text.parse().map_err(|_| {
        ApiError::new(
            ErrorCode::BadRequest,
            format!("job ids are numbers, got {text:?}"),
        )
    })
}

impl Api {
    async fn handle(self: &Arc<Self>, request: Request<Incoming>, secure: bool) -> Response<Body> {
        let whole = |response: Reply200| response.map(BodyExt::boxed);
        let path = request.uri().path().to_string();
        let method = request.method().clone();
        let segments = routes::segments(&path);
        let found = routes::find(&method, &segments);
        let response = if path.starts_with("/internal/") {
            // Node to node: sealed bodies, no tokens (`internal`).
            match found {
                Ok(found) if found.route.handler == Handler::InternalBlobPut => {
                    let (parts, body) = request.into_parts();
                    let sealer = self.security.sealer.as_ref();
                    whole(blobs::receive_push(&self.blobs, sealer, &parts, body).await)
                }
                Ok(found) if found.route.handler == Handler::InternalBlobFetch => {
                    let (parts, body) = request.into_parts();
                    let voters = || (self.replication.as_ref()).map(|r| r.voter_count());
                    let internal = &self.internal;
                    blobs::serve_fetch(&self.blobs, internal, found.route, voters, &parts, body)
                        .await
                }
                Ok(found) if found.route.access == Access::Sealed => {
                    whole(self.internal.serve(found, request).await)
                }
                Ok(_) => whole(error_response(no_route(Miss::NotFound, &method, &path))),
                Err(miss) => whole(error_response(no_route(miss, &method, &path))),
            }
        } else {
            match self.admit(&request, secure, &found).await {
                Err(error) => whole(error_response(error)),
                Ok(_)
                    if found.is_err() || found.is_ok_and(|f| f.route.access == Access::Sealed) =>
                {
                    let miss = found.err().unwrap_or(Miss::NotFound);
                    whole(error_response(no_route(miss, &method, &path)))
                }
                Ok(holder) => {
                    let found = found.expect("a route");
                    if found.route.handler == Handler::Events {
                        let within = holder.as_ref().and_then(|h| h.namespace.clone());
                        self.events(within)
                            .unwrap_or_else(|error| whole(error_response(error)))
                    } else if matches!(
                        found.route.handler,
                        Handler::BlobPut | Handler::BlobGet | Handler::BlobHead
                    ) {
                        self.blob_route(found, request)
                            .await
                            .unwrap_or_else(|error| whole(error_response(error)))
                    } else {
                        whole(
                            self.dispatch(found, request, holder)
                                .await
                                .unwrap_or_else(error_response),
                        )
                    }
                }
            }
        };
        self.responses
            .get_or_create(&vec![(
                "status".to_string(),
                response.status().as_u16().to_string(),
            )])
            .inc();
        response
    }

    /// The scopes and namespace of the request's token; refreshes the
    /// node's copy of the tokens once if the token is unknown here (it may
    /// be new).
    async fn authenticate(
        &self,
        table: &TokenTable,
        request: &Request<Incoming>,
    ) -> Result<Holder, ApiError> {
        use crate::security::token::{Refusal, bearer};
        let header = request
            .headers()
            .get(AUTHORIZATION)
            .map(|v| v.to_str().unwrap_or(""));
        let refuse = |refusal: Refusal| {
            counters::refused(what::TOKEN, refusal.reason());
            ApiError::new(ErrorCode::Unauthorized, refusal.message())
        };
        let token = bearer(header).map_err(refuse)?;
        match table.check(token) {
            Err(Refusal::Unknown) => {
                // Perhaps made a moment ago on another node.
                let refresh = table.refresh_after_miss(
                    std::time::Instant::now(),
                    refresh_tokens(&self.master, table),
                );
                let _ = tokio::time::timeout(TOKEN_REFRESH_WAIT, refresh).await;
                table.check(token).map_err(refuse)
            }
            checked => checked.map_err(refuse),
        }
    }

    /// Whether this request may be served here: TLS when TLS is on, a
    /// token with the route's scope when tokens are on (a request without
    /// a route needs one too: see [`routes`]), and a front-end node unless
    /// every node serves the route; a token confined to a namespace only
    /// reaches the routes of a namespace's jobs (`in_namespace`), and is
    /// refused any other as one without the scope is. Returns what the
    /// token holds when one was checked.
    async fn admit(
        &self,
        request: &Request<Incoming>,
        secure: bool,
        found: &Result<routes::Found<'_>, Miss>,
    ) -> Result<Option<Holder>, ApiError> {
        if self.security.tls.is_some() && !secure {
            counters::refused(what::CONNECTION, "plain_http_on_tls");
            return Err(ApiError::new(
                ErrorCode::TlsRequired,
                "this node serves its API over TLS: use https://",
            ));
        }
        let method = request.method();
        let mut checked = None;
        if let Some(table) = &self.security.tokens
            && let Some(scope) = routes::scope(method, found)
        {
            let holder = self.authenticate(table, request).await?;
            if let Some(namespace) = &holder.namespace
                && !found.is_ok_and(|found| found.route.in_namespace)
            {
                counters::refused(what::TOKEN, "namespace");
                return Err(ApiError::new(
                    ErrorCode::Forbidden,
                    format!(
                        "{method} {} is cluster-wide; this token reaches namespace {namespace}'s jobs only",
                        request.uri().path(),
                    ),
                ));
            }
            let scopes = holder.scopes;
            checked = Some(holder);
            if !scopes.allow(scope) {
                counters::refused(what::TOKEN, "scope");
                return Err(ApiError::new(
                    ErrorCode::Forbidden,
                    format!(
                        "{method} {} needs a token with the {} scope",
                        request.uri().path(),
                        scope.name()
                    ),
                ));
            }
        }
        let serves = match found {
            Ok(found) => found.route.serves,
            Err(miss) => miss.serves(),
        };
        if !self.node.roles.front_end && serves == Serves::FrontEnd {
            return Err(ApiError::new(
                ErrorCode::NotFrontEnd,
                format!(
                    "node {} has no front-end role; send API requests to a front-end node",
                    self.node.id
                ),
            ));
        }
        Ok(checked)
    }

    /// Answers a public request already admitted: reads its body within
    /// the route's bound, then hands it to the route's handler.
    async fn dispatch(
        &self,
        found: routes::Found<'_>,
        request: Request<Incoming>,
        holder: Option<Holder>,
    ) -> Result<Reply200, ApiError> {
        let route = found.route;
        let (parts, incoming) = request.into_parts();
        let body = if route.body_bytes_max > 0 {
            read_body(
                &parts.headers,
                incoming,
                route.body_bytes_max,
                route.too_large,
            )
            .await?
        } else {
            Bytes::new()
        };
        // Every route with a `{...}` segment names it; the table's test
        // holds that, so an empty one is only ever a route without.
        let param = found.param.unwrap_or_default();
        let params = || params(&parts.uri);
        // The namespace a confined token reaches (`None`: cluster-wide).
        let within = holder.as_ref().and_then(|h| h.namespace.as_deref());
        match route.handler {
            Handler::Healthz => self.health(),
            Handler::OpenApi => Ok(bytes("application/json", openapi::document())),
            Handler::Metrics => self.metrics().await,
            Handler::NodeLeave => Ok(self.node_leave()),
            Handler::DashboardPage
            | Handler::DashboardIndex
            | Handler::DashboardScript
            | Handler::DashboardStyle => dashboard::asset(parts.uri.path())
                .ok_or_else(|| no_route(Miss::NotFound, &parts.method, parts.uri.path())),
            Handler::ModuleUpload => self.module_upload(body).await,
            Handler::ModuleList => self.module_list().await,
            Handler::ModuleGet => self.module_get(param).await,
            Handler::DeploymentList => self.deployment_list().await,
            Handler::DeploymentGet => self.deployment_get(param).await,
            Handler::Deploy => self.deploy(param, parse_json(&body)?).await,
            Handler::DeploymentRollback => {
                self.deployment_rollback(param, parse_json(&body)?).await
            }
            Handler::Undeploy => self.undeploy(param).await,
            Handler::GrantAdd => self.grants_change(param, parse_json(&body)?, false).await,
            Handler::GrantRevoke => self.grants_change(param, parse_json(&body)?, true).await,
            Handler::GrantRevokeAll => self.grants_revoke_all(param).await,
            Handler::SecretList => self.secret_list().await,
            Handler::SecretSet => self.secret_set(param, parse_json(&body)?).await,
            Handler::SecretDelete => self.secret_delete(param).await,
            Handler::BlobList => blobs::list(&self.blobs, &self.master, &params()).await,
            Handler::BlobDelete => blobs::delete(&self.master, param).await,
            Handler::BlobPurge => blobs::purge(&self.master, param).await,
            // Streamed: `handle` answers them before dispatching.
            Handler::BlobPut | Handler::BlobGet | Handler::BlobHead => {
                Err(ApiError::new(ErrorCode::Internal, "a streamed route"))
            }
            Handler::JobSubmit => {
                let given = traced(&parts.headers);
                let accepted = self.submit(within, parse_json(&body)?, given).await?;
                Ok(json(StatusCode::ACCEPTED, &accepted))
            }
            Handler::JobBatch => {
                let given = traced(&parts.headers);
                let accepted = self.submit_batch(within, parse_json(&body)?, given).await?;
                Ok(json(StatusCode::ACCEPTED, &accepted))
            }
            Handler::JobWait => {
                let finished = self.wait_finished(within, parse_json(&body)?).await?;
                Ok(json(StatusCode::OK, &finished))
            }
            Handler::JobList => self.list(within, &params()).await,
            Handler::JobBulk => self.bulk(within, parse_json(&body)?).await,
            Handler::JobGet => self.job_get(within, job_id(param)?, &params()).await,
            Handler::JobCancel => self.job_cancel(within, job_id(param)?).await,
            Handler::JobResult => self.job_result(within, job_id(param)?, &params()).await,
            Handler::JobInput => self.input(within, job_id(param)?).await,
            Handler::DagSubmit => {
                self.dag_submit(within, parse_json(&body)?, traced(&parts.headers))
                    .await
            }
            Handler::DagGet => self.dag_status(within, job_id(param)?).await,
            Handler::ScheduleList => self.schedule_list(within).await,
            Handler::ScheduleCreate => {
                self.schedule_create(within, parse_json(&body)?, traced(&parts.headers))
                    .await
            }
            Handler::ScheduleGet => self.schedule_get(within, param).await,
            Handler::ScheduleDelete => self.schedule_delete(within, param).await,
            Handler::SchedulePause => self.schedule_pause(within, param, true).await,
            Handler::ScheduleResume => self.schedule_pause(within, param, false).await,
            Handler::ScheduleBackfill => {
                (self.schedule_backfill(within, param, parse_json(&body)?)).await
            }
            Handler::Overview => Ok(json(StatusCode::OK, &self.overview().await?)),
            // Streamed: `handle` answers it before dispatching.
            Handler::Events => Err(ApiError::new(ErrorCode::Internal, "a streamed route")),
            Handler::Whoami => Ok(self.whoami(&parts.headers, holder)),
            Handler::Namespaces => self.namespaces(within).await,
            Handler::NamespaceQuotas => self.namespace_quotas(param, parse_json(&body)?).await,
            Handler::NamespaceWeight => self.namespace_weight(param, parse_json(&body)?).await,
            Handler::Cluster => self.cluster().await,
            Handler::VoterRemove => self.remove_voter(param).await,
            Handler::MasterBuild => self.master_build().await,
            Handler::MasterUpgrade => self.master_upgrade(body).await,
            Handler::MasterRollback => self.master_rollback().await,
            Handler::TokenList => self.tokens(auth::TokenOp::List).await,
            Handler::TokenCreate => self.tokens(auth::TokenOp::Create(parse_json(&body)?)).await,
            Handler::TokenRevoke => self.tokens(auth::TokenOp::Revoke(param.to_string())).await,
            Handler::InternalMaster
            | Handler::InternalReplication
            | Handler::InternalVoters
            | Handler::InternalModules
            | Handler::InternalModuleFetch
            | Handler::InternalMasters
            | Handler::InternalMasterFetch
            | Handler::InternalTokens
            | Handler::InternalBlobPut
            | Handler::InternalBlobFetch => {
                Err(no_route(Miss::NotFound, &parts.method, parts.uri.path()))
            }
        }
    }

    /// The blob routes, which stream their bodies both ways.
    async fn blob_route(
        &self,
        found: routes::Found<'_>,
        request: Request<Incoming>,
    ) -> Result<Response<Body>, ApiError> {
        let (parts, body) = request.into_parts();
        let param = found.param.unwrap_or_default();
        match found.route.handler {
            Handler::BlobPut => {
                let voters = (self.replication.as_ref()).map(|r| r.voter_count());
                let answer =
                    blobs::put(&self.blobs, &self.master, voters, &parts.headers, body).await?;
                Ok(answer.map(BodyExt::boxed))
            }
            Handler::BlobHead => blobs::get(&self.blobs, param, &parts.headers, true).await,
            _ => blobs::get(&self.blobs, param, &parts.headers, false).await,
        }
    }

    /// `POST /v1/node/leave`: the node leaves as on SIGTERM.
    fn node_leave(&self) -> Reply200 {
        self.leave.notify_one();
        json(
            StatusCode::ACCEPTED,
            &LeavingResponse {
                node: self.node.id.clone(),
                status: "leaving".into(),
            },
        )
    }

    /// `GET /v1/modules/{digest}`: a module's bytes.
    async fn module_get(&self, digest: &str) -> Result<Reply200, ApiError> {
        let digest = parse_digest(digest, ErrorCode::ModuleNotStored)?;
        if !self.modules.contains(&digest) {
            return Err(not_stored(ErrorCode::ModuleNotStored, &digest));
        }
        let wasm = self.modules.read(&digest).await?;
        Ok(bytes("application/wasm", wasm))
    }

    /// `DELETE /v1/jobs/{id}`: cancels the job (of namespace `within`
    /// only, if the caller is confined to one); answers its record.
    async fn job_cancel(&self, within: Option<&str>, id: u64) -> Result<Reply200, ApiError> {
        if within.is_some() {
            // Another namespace's job is no job to this caller.
            self.master.job(within, id).await?;
        }
        self.master.command(Command::Cancel { id }).await?;
        let view = self.master.job(within, id).await?;
        Ok(json(StatusCode::OK, &self.job_response(view)))
    }

    /// `GET /v1/jobs/{id}/result`: a succeeded job's output, once settled
    /// if asked to wait.
    async fn job_result(
        &self,
        within: Option<&str>,
        id: u64,
        params: &HashMap<String, String>,
    ) -> Result<Reply200, ApiError> {
        self.wait(within, id, params).await?;
        let result = self.master.result(within, id).await?;
        Ok(bytes("application/octet-stream", result))
    }

    /// `POST /v1/modules`: checks the module (without compiling it) and
    /// stores it here and on the other back-end nodes, durably; then sends
    /// it to the nodes that run jobs without being back-end nodes. Each
    /// node compiles it in the background, after this answer.
    async fn module_upload(&self, body: Bytes) -> Result<Reply200, ApiError> {
        let (digest, new) = self.modules.put(&body).await?;
        self.fetcher
            .replicate(&body)
            .await
            .map_err(|e| ApiError::new(ErrorCode::ReplicationFailed, e.to_string()))?;
        self.fetcher.push_to_workers(body.clone());
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
                ..ModuleBody::default()
            },
        ))
    }

    /// `GET /v1/jobs/{id}`: the job, once settled if asked to wait, with
    /// the progress of its running attempt.
    async fn job_get(
        &self,
        within: Option<&str>,
        id: u64,
        params: &HashMap<String, String>,
    ) -> Result<Reply200, ApiError> {
        self.wait(within, id, params).await?;
        let view = self.master.job(within, id).await?;
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

    /// Creates, revokes or lists tokens through the master.
    async fn tokens(&self, op: auth::TokenOp) -> Result<Reply200, ApiError> {
        auth::token_op(&self.master, self.security.tokens.as_ref(), op).await
    }

    fn health(&self) -> Result<Reply200, ApiError> {
        if self.master.local().is_some_and(|m| m.has_failed()) {
            return Err(ApiError::new(
                ErrorCode::MasterUnavailable,
                "the master stopped after a failure; see the node's log",
            ));
        }
        Ok(json(
            StatusCode::OK,
            &HealthResponse {
                status: "ok".into(),
            },
        ))
    }

    /// Waits up to `wait_ms` (a query parameter) for job `id` to settle;
    /// a caller confined to namespace `within` waits only for one of its
    /// own (another's is `job_not_found` at once).
    async fn wait(
        &self,
        within: Option<&str>,
        id: u64,
        params: &HashMap<String, String>,
    ) -> Result<(), ApiError> {
        let wait_ms = number::<u64>(params, "wait_ms")?
            .unwrap_or(0)
            .min(WAIT_MS_MAX);
        if wait_ms > 0 {
            if within.is_some() {
                self.master.job(within, id).await?;
            }
            self.master
                .wait_settled(id, Duration::from_millis(wait_ms))
                .await?;
        }
        Ok(())
    }

    /// What to run and what the master is asked beyond it, checked field
    /// by field (errors name the JSON field).
    async fn submission(
        &self,
        within: Option<&str>,
        submit: SubmitRequest,
    ) -> Result<(JobSpec, JobOptions), ApiError> {
        let mut options = options(&submit)?;
        options.namespace = job_namespace(within, submit.namespace.as_deref())?;
        // A deployment's name is resolved by the master when it accepts the
        // job (the placeholder digest is replaced); a name always points
        // at a module stored in the cluster.
        let module = module_ref(
            &submit.module,
            ErrorCode::ModuleNotFound,
            ErrorCode::InvalidModuleName,
        )?;
        let digest = match module {
            ModuleRef::Name(name) => {
                options.module = Some(name);
                Digest::from([0; 32])
            }
            ModuleRef::Digest(digest) => {
                if !self.fetcher.ensure(&self.modules, &digest).await? {
                    return Err(not_stored(ErrorCode::ModuleNotFound, &digest));
                }
                digest
            }
        };
        let inputs = [
            submit.input.is_some(),
            submit.input_base64.is_some(),
            submit.input_json.is_some(),
        ];
        if inputs.iter().filter(|&&given| given).count() > 1 {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                "give at most one of input, input_base64 and input_json",
            ));
        }
        let input = if let Some(text) = submit.input {
            text.into_bytes()
        } else if let Some(encoded) = submit.input_base64 {
            INPUT_BASE64
                .decode(encoded)
                .map_err(|e| ApiError::new(ErrorCode::BadRequest, format!("input_base64: {e}")))?
        } else if let Some(value) = submit.input_json {
            serde_json::to_vec(&value).expect("a JSON value serializes")
        } else {
            Vec::new()
        };
        if let Some(digest) = &submit.input_blob {
            options.input_blob = Some(blobs::input_blob(&self.blobs, digest).await?);
        }
        if let Some(key) = &submit.idempotency_key
            && !(1..=IDEMPOTENCY_KEY_CHARS_MAX).contains(&key.chars().count())
        {
            return Err(ApiError::new(
                ErrorCode::InvalidJob,
                format!("idempotency_key must be 1 to {IDEMPOTENCY_KEY_CHARS_MAX} characters"),
            ));
        }
        if let Some(memory) = submit.memory_bytes
            && (memory == 0 || memory > self.defaults.memory_bytes_max)
        {
            return Err(ApiError::new(
                ErrorCode::InvalidJob,
                format!(
                    "memory_bytes must be 1 to {} on this node",
                    self.defaults.memory_bytes_max
                ),
            ));
        }
        let spec = JobSpec {
            module: digest.to_bytes(),
            input,
            timeout_ms: submit.timeout_ms.unwrap_or(self.defaults.timeout_ms),
            memory_bytes: submit.memory_bytes,
            max_attempts: submit.max_attempts.unwrap_or(self.defaults.max_attempts),
            priority: submit.priority.unwrap_or(0),
            idempotency_key: submit.idempotency_key,
        };
        Ok((spec, options))
    }

    async fn submit(
        &self,
        within: Option<&str>,
        mut submit: SubmitRequest,
        given: Option<cohort_master::TraceContext>,
    ) -> Result<SubmitResponse, ApiError> {
        use tracing::Instrument;
        let (span, trace) = crate::telemetry::submission_span!(
            given,
            "cohort.submit",
            otel.kind = "server",
            job_id = tracing::field::Empty
        );
        let steps = crate::telemetry::steps_span(&span, trace.as_ref());
        let request = self.request_ids.next();
        let after = std::mem::take(&mut submit.after);
        let work = async {
            let (spec, mut options) = self.submission(within, submit).await?;
            options.trace = trace.map(Box::new);
            let command = submit_command((spec, options), after, request)?;
            accepted(proxied(&self.master, command).await?)
        };
        let accepted = work.instrument(steps).await?;
        span.record("job_id", accepted.id);
        Ok(accepted)
    }

    async fn submit_batch(
        &self,
        within: Option<&str>,
        batch: BatchRequest,
        given: Option<cohort_master::TraceContext>,
    ) -> Result<BatchResponse, ApiError> {
        if batch.jobs.len() > BATCH_JOBS_MAX {
            return Err(ApiError::new(
                ErrorCode::BodyTooLarge,
                format!("at most {BATCH_JOBS_MAX} jobs per batch"),
            ));
        }
        // Send every command before awaiting any, so the whole batch lands
        // in as few journal syncs as possible. Each job is a submission of
        // its own, with its own request id.
        // The batch is one request, so one trace: its jobs carry its span.
        let (span, trace) = crate::telemetry::submission_span!(
            given,
            "cohort.submit",
            otel.kind = "server",
            jobs = batch.jobs.len()
        );
        let steps = crate::telemetry::steps_span(&span, trace.as_ref());
        let requests = self.request_ids.take(batch.jobs.len());
        let mut pending = Vec::with_capacity(batch.jobs.len());
        for (mut submit, request) in batch.jobs.into_iter().zip(requests) {
            let after = std::mem::take(&mut submit.after);
            let command = match self.submission(within, submit).await {
                Ok((spec, mut options)) => {
                    options.trace = trace.map(Box::new);
                    submit_command((spec, options), after, request)
                }
                Err(error) => Err(error),
            };
            pending.push(command.map(|command| {
                use tracing::Instrument;
                let master = self.master.clone();
                tokio::spawn(
                    async move { proxied(&master, command).await }.instrument(steps.clone()),
                )
            }));
        }
        let mut results = Vec::with_capacity(pending.len());
        for item in pending {
            let outcome = match item {
                Err(error) => Err(error),
                Ok(task) => match task.await {
                    Ok(Ok(reply)) => accepted(reply),
                    Ok(Err(error)) => Err(error),
                    Err(error) => Err(ApiError::new(ErrorCode::Internal, error.to_string())),
                },
            };
            results.push(match outcome {
                Ok(accepted) => BatchItem::Accepted(accepted),
                Err(error) => BatchItem::Refused(error.body),
            });
        }
        Ok(BatchResponse { results })
    }

    async fn wait_finished(
        &self,
        within: Option<&str>,
        wait: WaitRequest,
    ) -> Result<WaitResponse, ApiError> {
        if wait.ids.len() > cohort_master::limits::FINISHED_IDS_MAX {
            return Err(ApiError::new(
                ErrorCode::BodyTooLarge,
                format!(
                    "at most {} ids per wait",
                    cohort_master::limits::FINISHED_IDS_MAX
                ),
            ));
        }
        if wait.ids.is_empty() {
            return Ok(WaitResponse { jobs: Vec::new() });
        }
        let waiting = Duration::from_millis(wait.wait_ms.min(WAIT_MS_MAX));
        let jobs = (self.master)
            .finished(
                within,
                wait.ids,
                WAIT_OUTPUT_BYTES_MAX,
                WAIT_OUTPUTS_BYTES_MAX,
                waiting,
            )
            .await?;
        let engine = &base64::engine::general_purpose::STANDARD;
        Ok(WaitResponse {
            jobs: jobs
                .into_iter()
                .map(|job| FinishedBody {
                    id: job.id,
                    state: job.state.map_or("unknown", JobState::name).into(),
                    error: job.error.map(|e| ErrorBody {
                        code: e.code,
                        message: e.message,
                        retryable: None,
                    }),
                    output_base64: job.output.map(|o| engine.encode(o)),
                    output_bytes: job.output_bytes,
                    outputs: job.outputs.into_iter().map(output_blob).collect(),
                })
                .collect(),
        })
    }

    /// `GET /v1/jobs`: a page of the jobs the parameters ask for (of
    /// namespace `within` only, if the caller is confined to one).
    async fn list(
        &self,
        within: Option<&str>,
        params: &HashMap<String, String>,
    ) -> Result<Reply200, ApiError> {
        let filter = dashboard::filter_from_params(params)?;
        let newest_first = match params.get("order").map(String::as_str) {
            None | Some("oldest") => false,
            Some("newest") => true,
            Some(other) => {
                return Err(ApiError::new(
                    ErrorCode::BadRequest,
                    format!("order: {other:?} is not newest or oldest"),
                ));
            }
        };
        let limit = number(params, "limit")?.unwrap_or(LIST_LIMIT_DEFAULT);
        let most = cohort_master::limits::LIST_LIMIT_MAX;
        if !(1..=most).contains(&limit) {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                format!("limit must be 1 to {most}, got {limit}"),
            ));
        }
        let after = number(params, "cursor")?;
        let page = (self.master)
            .jobs(within, filter, after, limit, newest_first)
            .await?;
        let (jobs, next) = (page.jobs, page.next);
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
                        finished_at: j.finished_at,
                        module: Digest::from(j.module).to_string(),
                        priority: j.priority,
                        error_code: j.error_code,
                        module_name: j.module_name,
                        module_version: j.module_version,
                        namespace: name_of(j.namespace.as_deref()).to_owned(),
                    })
                    .collect(),
                next_cursor: next.map(|n| n.to_string()),
            },
        ))
    }

    fn job_response(&self, view: JobView) -> JobResponse {
        let usage = (view.attempts.iter())
            .filter_map(|attempt| attempt.usage)
            .fold(cohort_master::Usage::default(), cohort_master::Usage::plus);
        JobResponse {
            id: view.id,
            module: Digest::from(view.module).to_string(),
            module_name: view.module_name,
            module_version: view.module_version,
            state: view.state.name().into(),
            priority: view.priority,
            max_attempts: view.max_attempts,
            timeout_ms: view.timeout_ms,
            idempotency_key: view.idempotency_key,
            submitted_at: view.submitted_at,
            finished_at: view.finished_at,
            not_before: view.not_before,
            attempts: view
                .attempts
                .into_iter()
                .map(|a| {
                    let calls = view.calls.iter().find(|c| c.attempt == a.number);
                    Attempt {
                        number: a.number,
                        worker: a.worker,
                        started_at: a.started_at,
                        ended_at: a.ended_at,
                        outcome: a.outcome,
                        message: a.message,
                        duration_ms: a.duration_ms,
                        log_tail: a.log_tail,
                        calls: calls.map_or(Vec::new(), |c| {
                            c.calls
                                .iter()
                                .cloned()
                                .map(deployments::call_record)
                                .collect()
                        }),
                        calls_dropped: calls.map_or(0, |c| c.dropped),
                        usage: a.usage.map(usage_body),
                    }
                })
                .collect(),
            usage: usage_body(usage),
            error: view.error.map(|f| ErrorBody {
                code: f.code,
                message: f.message,
                retryable: None,
            }),
            result_bytes: view.result_bytes,
            input_bytes: view.input_bytes,
            has_checkpoint: view.has_checkpoint,
            concurrency_key: view.options.limit.as_ref().map(|l| l.key.clone()),
            concurrency_limit: view.options.limit.as_ref().and_then(|l| l.running_max),
            rate_limit: view
                .options
                .limit
                .as_ref()
                .and_then(|l| l.starts_per_second),
            unique_key: view.options.unique.as_ref().map(|u| u.key.clone()),
            unique_window_ms: view.options.unique.as_ref().map(|u| u.window_ms),
            dag: view.dag.as_ref().map(|(dag, _)| *dag),
            dag_name: view.dag.map(|(_, name)| name),
            parents: view.parents,
            waiting: view.waiting,
            labels: view.options.labels.into_iter().collect(),
            namespace: name_of(view.options.namespace.as_deref()).to_owned(),
            unplaceable: view.unplaceable,
            input_blob: view.input_blob.map(|blob| BlobInfo {
                digest: Digest::from(blob.digest).to_string(),
                bytes: blob.size,
            }),
            outputs: view.outputs.into_iter().map(output_blob).collect(),
            trace_id: (view.options.trace.as_deref())
                .filter(|trace| !trace.link)
                .map(crate::telemetry::trace_id_hex),
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
        Ok(json(StatusCode::OK, &self.cluster_body().await?))
    }

    /// `GET /v1/modules`: what each module is, and how many jobs the
    /// master holds that run it.
    async fn module_list(&self) -> Result<Reply200, ApiError> {
        let uses = self.master.module_use().await?;
        let uses: HashMap<[u8; 32], u64> = uses.into_iter().collect();
        let mut modules = Vec::new();
        for module in self.modules.list() {
            let details = self.modules.details(&module.digest).await?;
            modules.push(ModuleBody {
                digest: module.digest.to_string(),
                bytes: module.bytes,
                first_seen: Some(details.first_seen),
                language: Some(details.language.into()),
                world: details.world,
                jobs: Some(uses.get(&module.digest.to_bytes()).copied().unwrap_or(0)),
            });
        }
        Ok(json(StatusCode::OK, &ModuleListResponse { modules }))
    }

    /// `GET /v1/cluster`'s answer. The membership is this node's own view;
    /// only the workers come from the master, so a master that cannot
    /// answer (no quorum, no master yet) empties them and says why rather
    /// than hiding the membership an operator needs to see what is wrong.
    async fn cluster_body(&self) -> Result<ClusterResponse, ApiError> {
        let (workers, master_error) = match self.master.workers().await {
            Ok(workers) => (workers, None),
            Err(error) => (Vec::new(), Some(ApiError::from(error).body().clone())),
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
        Ok(ClusterResponse {
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
                    labels: w.pool.labels.into_iter().collect(),
                    memory_max: w.pool.memory_max,
                })
                .collect(),
            voters: self
                .replication
                .as_ref()
                .map(|r| r.status().voters)
                .unwrap_or_default(),
            security: SecurityBody {
                cluster_key: self.security.sealer.is_some(),
                key_ids: self
                    .security
                    .sealer
                    .as_ref()
                    .map(|s| s.keyring().ids())
                    .unwrap_or_default(),
                tokens: self.security.tokens.is_some(),
                tls: self.security.tls.is_some(),
                insecure: self.security.insecure,
            },
            master_error,
        })
    }

    /// `DELETE /v1/cluster/voters/{node}`: done by the master's node, so
    /// asked there (sealed) from any other.
    async fn remove_voter(&self, node: &str) -> Result<Reply200, ApiError> {
        use crate::replication::RemoveVoterError;
        let local = match &self.replication {
            Some(replication) if replication.status().leading.is_some() => {
                Some(replication.remove_voter(node.to_string()).await)
            }
            _ => None,
        };
        let result = match local {
            Some(result) => result,
            None => {
                let host = self
                    .view
                    .borrow()
                    .master_host()
                    .map(|m| m.http.clone())
                    .ok_or_else(|| {
                        ApiError::new(ErrorCode::MasterUnavailable, "no node hosts the master")
                    })?;
                let answer = self
                    .master
                    .peer()
                    .post_postcard(
                        &format!("{host}/internal/v1/voters"),
                        &node.to_string(),
                        VOTER_CHANGE_TIMEOUT,
                    )
                    .await
                    .map_err(|e| ApiError::new(ErrorCode::MasterUnavailable, e.message))?;
                cohort_master::decode::<Result<(), RemoveVoterError>>(&answer)
                    .map_err(|r| ApiError::new(ErrorCode::MasterUnavailable, r.to_string()))?
            }
        };
        match result {
            Ok(()) => Ok(json(
                StatusCode::ACCEPTED,
                &RemovingResponse {
                    removing: node.to_string(),
                },
            )),
            Err(error @ RemoveVoterError::NotMaster) => Err(ApiError::new(
                ErrorCode::MasterUnavailable,
                error.to_string(),
            )),
            Err(error @ RemoveVoterError::NotAVoter(_)) => {
                Err(ApiError::new(ErrorCode::NotFound, error.to_string()))
            }
            Err(error @ RemoveVoterError::MasterNode(_)) => {
                Err(ApiError::new(ErrorCode::BadRequest, error.to_string()))
            }
        }
    }

    async fn metrics(&self) -> Result<Reply200, ApiError> {
        let stats = self.master.stats().await?;
        let namespaces = self.master.namespaces(None).await?;
        let local = self.master.local();
        let idle = crate::master::service::MasterCounters::default();
        let counters = local.as_ref().map_or(&idle, |m| m.counters());
        let replication = self
            .replication
            .as_ref()
            .map(|r| r.status())
            .unwrap_or_default();
        let text =
            crate::metrics::render(&stats, &namespaces, counters, &replication, &self.responses)
                .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
        Ok(bytes(
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            text,
        ))
    }
}

/// An attempt's or a job's [`Usage`](cohort_master::Usage) as the API
/// shows it.
fn usage_body(usage: cohort_master::Usage) -> Usage {
    Usage {
        cpu_us: usage.cpu_us,
        memory_peak_bytes: usage.memory_peak_bytes,
        egress_bytes: usage.egress_bytes,
    }
}
