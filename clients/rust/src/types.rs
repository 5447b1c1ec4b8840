//! The JSON bodies of the HTTP API, shared by the server (the `cohort`
//! crate serves them) and the clients.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A job's id: assigned by the master, increasing. (Fields below spell
/// it `u64`, as they do [`Millis`], so the OpenAPI schemas are plain
/// integers.)
pub type JobId = u64;
/// Milliseconds since the Unix epoch.
pub type Millis = u64;

/// One attempt of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attempt {
    /// Number, from 1.
    pub number: u32,
    /// The worker that ran it.
    pub worker: String,
    /// When it started.
    pub started_at: u64,
    /// When it ended (if it has).
    pub ended_at: Option<u64>,
    /// How it ended: `succeeded`, or a failure code.
    pub outcome: Option<String>,
    /// Failure message, if any.
    pub message: Option<String>,
    /// Run time reported by the worker.
    pub duration_ms: Option<u64>,
    /// End of its log.
    pub log_tail: String,
    /// Its outbound HTTP calls, in order (the first 64): granted or
    /// refused, never with a path, query, header or body.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallRecord>,
    /// How many more calls it made than `calls` lists.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub calls_dropped: u32,
    /// What it cost, as its worker's sandbox measured it. Absent while it
    /// runs, for an attempt that ended without its worker's report (lost
    /// with its worker, its lease expired), and for attempts reported
    /// before the cluster measured them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// What attempts cost: CPU time, peak memory and outbound bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    /// CPU time the attempt's threads used running it (its Wasm and the
    /// host calls it made inline), in microseconds; for a job, the sum
    /// over its attempts.
    pub cpu_us: u64,
    /// The most linear memory its instance held at once, in bytes; for a
    /// job, the highest of its attempts'.
    pub memory_peak_bytes: u64,
    /// Body bytes of its outbound HTTP calls, sent and received, every
    /// call counted (recorded or not); for a job, the sum.
    pub egress_bytes: u64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One outbound HTTP call of an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallRecord {
    /// Its method.
    pub method: String,
    /// `scheme://host:port` it went to.
    pub origin: String,
    /// The response's status, if one came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Why it failed, if it did: `egress_denied`, `egress_address_refused`,
    /// `egress_timeout`, `egress_response_too_large`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Request body bytes sent.
    pub sent_bytes: u64,
    /// Response body bytes received.
    pub received_bytes: u64,
    /// From the request to the end of its response or its failure.
    pub ms: u64,
}

/// What a deployment's jobs may reach over HTTP(S).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HttpGrantBody {
    /// `scheme://host[:port][/path]`: `https://api.example.com/v1/`,
    /// `https://*.example.com`, `http://10.0.0.5:8080`, `http://[fd00::5]`;
    /// a port of `*` allows any; the path is a prefix. Answers spell it in
    /// full (`https://api.example.com:443/v1/`).
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 1024, example = "https://api.example.com/v1/")
    )]
    pub url: String,
    /// Methods allowed [default: any].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Whether a name may resolve to a private, loopback or link-local
    /// address [default: false; an address in `url` is always allowed].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub private: bool,
    /// Headers the node sets on every request this grant allows, replacing
    /// the job's: `{"authorization": "Bearer {secret:STRIPE}"}`. A
    /// `{secret:NAME}` placeholder is filled in by the sending node from
    /// the cluster's secrets, so the job never holds the value (at most 8;
    /// not `host`, `content-length` or another header the node sets).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub headers: std::collections::BTreeMap<String, String>,
    /// Whether the calls this grant allows are recorded: the response made
    /// durable before the job sees it, and replayed to a later attempt
    /// making the same call instead of sending it again [default: calls
    /// whose method is not `GET`, `HEAD` or `OPTIONS`]. Answers leave it
    /// out when it is the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<bool>,
}

/// `POST /v1/secrets/{name}`: a secret's value (admin scope).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SecretRequest {
    /// The value: 1 to 16,384 bytes of UTF-8. Sealed with the cluster key
    /// by the node that receives it; never answered back.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 16384))]
    pub value: String,
}

/// A secret set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SecretResponse {
    /// Its name.
    pub name: String,
    /// True if it did not exist before.
    pub created: bool,
}

/// One secret as listed: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SecretBody {
    /// Its name.
    pub name: String,
    /// When it was last set (ms since the Unix epoch).
    pub updated_at: u64,
    /// The deployments whose grants name it.
    pub used_by: Vec<String>,
}

/// `GET /v1/secrets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SecretListResponse {
    /// Every secret, by name.
    pub secrets: Vec<SecretBody>,
}

/// `DELETE /v1/secrets/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SecretDeletedResponse {
    /// Its name.
    pub name: String,
    /// Always true.
    pub deleted: bool,
}

/// `POST /v1/deployments/{name}/grants` (added) and
/// `POST /v1/deployments/{name}/grants/revoke` (taken away).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    /// Outbound HTTP(S) grants.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<HttpGrantBody>,
    /// Secrets the jobs may read themselves (`secret(name)` in the job
    /// SDKs), by name: at most 16 a deployment; each must exist. A secret
    /// a grant's header names stays unreadable unless listed here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
}

/// A deployment's grants after a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GrantsResponse {
    /// The deployment.
    pub name: String,
    /// All its grants now.
    pub http: Vec<HttpGrantBody>,
    /// The secrets its jobs may read now.
    #[serde(default)]
    pub secrets: Vec<String>,
}

/// Every error: a stable code and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// Stable machine-readable code ("Error codes" in docs/http-api.md
    /// for the API's own errors).
    pub code: String,
    /// Explanation.
    pub message: String,
    /// Whether sending the same request again may succeed. Set on every
    /// error the API answers; absent from a job's failure (its attempts
    /// are retried by the master, up to `max_attempts`) and from servers
    /// older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
}

/// `POST /v1/jobs`: what to run. At most one of `input`, `input_base64`,
/// `input_json` (none: empty input).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// The module: its sha256 (from `POST /v1/modules`), or a deployment's
    /// name (from `POST /v1/deployments/{name}`), which the master resolves
    /// to the name's current module when it accepts the job.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^([0-9a-f]{64}|[a-z0-9][a-z0-9._-]{0,62})$")
    )]
    pub module: String,
    /// Input as UTF-8 text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// Input as base64 (standard alphabet, padded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")
    )]
    pub input_base64: Option<String>,
    /// Input as a JSON value (passed to the job serialized).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_json: Option<serde_json::Value>,
    /// A blob (from `PUT /v1/blobs`) the job reads as a stream, as its
    /// input blob `input`: its sha256, 64 hex digits (either case,
    /// optionally written `sha256:<64 hex>`). It must be stored in the
    /// cluster when the job is submitted (`404 blob_not_found` otherwise).
    /// Goes with any of the inline inputs, or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^(sha256:)?[0-9a-fA-F]{64}$"))]
    pub input_blob: Option<String>,
    /// Wall-clock limit of one attempt (default: the node's; at most the
    /// master's limit, one hour unless configured).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 3_600_000))]
    pub timeout_ms: Option<u64>,
    /// Memory limit of one attempt (default: the node's; at most the
    /// node's `--job-memory-max`, 4 GiB unless configured).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 4_294_967_296_u64))]
    pub memory_bytes: Option<u64>,
    /// Attempts before the job is dead-lettered (default 3; at most the
    /// master's limit, 100 unless configured).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 100))]
    pub max_attempts: Option<u32>,
    /// Higher runs first (default 0).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    pub priority: Option<i32>,
    /// Submissions with the same key get the same job (1 to 64
    /// characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 64))]
    pub idempotency_key: Option<String>,
    /// Jobs sharing this key (1 to 64 characters) share its
    /// `concurrency_limit` and `rate_limit`, cluster-wide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 64))]
    pub concurrency_key: Option<String>,
    /// At most this many of the key's jobs run at once (1 to 10,000; needs
    /// `concurrency_key`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10_000))]
    pub concurrency_limit: Option<u32>,
    /// At most this many of the key's jobs start in any second (1 to
    /// 10,000; needs `concurrency_key`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10_000))]
    pub rate_limit: Option<u32>,
    /// A submission whose `unique_key` (1 to 64 characters) matches a job
    /// submitted less than `unique_window_ms` earlier gets that job,
    /// whatever its state or input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 64))]
    pub unique_key: Option<String>,
    /// How long after a job's submission its `unique_key` holds (1 ms to
    /// 30 days; needs `unique_key`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 2_592_000_000_u64))]
    pub unique_window_ms: Option<u64>,
    /// Ids of jobs this one waits for: it starts once all of them
    /// succeeded and gets their outputs with its input, as a DAG's job
    /// does (at most 100).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "whole::many")]
    #[cfg_attr(feature = "openapi", schema(max_items = 100))]
    pub after: Vec<u64>,
    /// Narrows what the job may call to these grants, each within a grant
    /// of the deployment `module` names (a job may narrow its grants, never
    /// widen them) [default: every grant of the name, as it is when each
    /// attempt starts].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_items = 32))]
    pub egress: Option<Vec<HttpGrantBody>>,
    /// Labels a worker must have to run the job, each `key: value` (at
    /// most 16; keys 1 to 63 bytes of `a-z`, `0-9`, `.`, `_`, `-`, `/`,
    /// starting with a letter or digit; values 1 to 63 bytes of letters,
    /// digits, `.`, `_`, `-`): the job starts only on a worker started
    /// with all of them (`cohort node --labels`), and, if it asks for
    /// `memory_bytes`, whose `--job-memory-max` is at least that. Until
    /// such a worker is known, the job is `unplaceable`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The namespace the job belongs to (default: the token's, if it is
    /// confined to one, else `default`; 1 to 63 of `a-z`, `0-9`, `-`,
    /// starting with a letter or digit). A token confined to a namespace
    /// may name only its own (`403 forbidden`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$"))]
    pub namespace: Option<String>,
}

impl SubmitRequest {
    /// A submission of `module` (a digest) with empty input.
    pub fn new(module: impl Into<String>) -> Self {
        Self {
            module: module.into(),
            ..Self::default()
        }
    }

    /// With `input` as the job's input bytes (sent in base64).
    pub fn bytes(mut self, input: impl AsRef<[u8]>) -> Self {
        use base64::Engine as _;
        self.input = None;
        self.input_json = None;
        self.input_base64 = Some(base64::engine::general_purpose::STANDARD.encode(input));
        self
    }

    /// With `input` as the job's input text.
    pub fn text(mut self, input: impl Into<String>) -> Self {
        self.input_base64 = None;
        self.input_json = None;
        self.input = Some(input.into());
        self
    }

    /// With `input` as the job's input, serialized as JSON.
    pub fn json(mut self, input: serde_json::Value) -> Self {
        self.input = None;
        self.input_base64 = None;
        self.input_json = Some(input);
        self
    }

    /// With the blob `digest` (stored in the cluster) as the input blob the
    /// job reads as a stream; any inline input stays.
    pub fn input_blob(mut self, digest: impl Into<String>) -> Self {
        self.input_blob = Some(digest.into());
        self
    }

    /// Asking for a worker with the label `key=value` (see
    /// [`labels`](Self::labels)).
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// In namespace `name` (see [`namespace`](Self::namespace)).
    pub fn in_namespace(mut self, name: impl Into<String>) -> Self {
        self.namespace = Some(name.into());
        self
    }
}

/// An output blob a job wrote: what `GET /v1/blobs/{digest}` serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OutputBlob {
    /// The name the job gave it.
    pub name: String,
    /// The sha256 of its bytes, 64 lowercase hex digits.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub digest: String,
    /// Its size.
    pub bytes: u64,
}

/// `202` to a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubmitResponse {
    /// The job's id.
    pub id: u64,
    /// True if the idempotency key matched an existing job.
    pub existing: bool,
}

/// `POST /v1/jobs/batch`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// The jobs, each as for `POST /v1/jobs`.
    pub jobs: Vec<SubmitRequest>,
}

/// One job's fate in a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum BatchItem {
    /// Accepted.
    Accepted(SubmitResponse),
    /// Refused, with why.
    Refused(ErrorBody),
}

/// `202` to a batch: one item per job, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchResponse {
    /// Per job.
    pub results: Vec<BatchItem>,
}

/// A running job's latest progress report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProgressBody {
    /// In `[0, 1]`.
    pub fraction: f32,
    /// What it is doing.
    pub message: String,
}

/// `GET /v1/jobs/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobResponse {
    /// Id.
    pub id: u64,
    /// Module sha256.
    pub module: String,
    /// The deployment name it was submitted by, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_name: Option<String>,
    /// That name's version when the job was accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_version: Option<u32>,
    /// `queued`, `running`, `succeeded`, `failed`, `cancelled` or `dead`.
    pub state: String,
    /// Priority.
    pub priority: i32,
    /// Attempt limit.
    pub max_attempts: u32,
    /// Per-attempt timeout.
    pub timeout_ms: u64,
    /// Idempotency key.
    pub idempotency_key: Option<String>,
    /// Submission time (ms since the Unix epoch).
    pub submitted_at: u64,
    /// Time it reached its terminal state.
    pub finished_at: Option<u64>,
    /// Earliest next attempt while backing off.
    pub not_before: Option<u64>,
    /// Every attempt so far.
    pub attempts: Vec<Attempt>,
    /// What its attempts cost, all together: the attempts that say (see
    /// [`Attempt::usage`]). Zero before any has.
    #[serde(default)]
    pub usage: Usage,
    /// Why it failed, when it did.
    pub error: Option<ErrorBody>,
    /// Result size once succeeded.
    pub result_bytes: Option<u64>,
    /// Input size.
    pub input_bytes: u64,
    /// Whether a checkpoint is stored for a retry to resume from.
    pub has_checkpoint: bool,
    /// Latest progress while running.
    pub progress: Option<ProgressBody>,
    /// The key whose limits it shares.
    #[serde(default)]
    pub concurrency_key: Option<String>,
    /// At most this many of the key's jobs run at once.
    #[serde(default)]
    pub concurrency_limit: Option<u32>,
    /// At most this many of the key's jobs start in any second.
    #[serde(default)]
    pub rate_limit: Option<u32>,
    /// Its uniqueness key.
    #[serde(default)]
    pub unique_key: Option<String>,
    /// How long after its submission the uniqueness key holds.
    #[serde(default)]
    pub unique_window_ms: Option<u64>,
    /// The DAG it belongs to.
    #[serde(default)]
    pub dag: Option<u64>,
    /// Its name in the DAG.
    #[serde(default)]
    pub dag_name: Option<String>,
    /// The jobs it waits for (or waited for).
    #[serde(default)]
    pub parents: Vec<u64>,
    /// Still waiting for a parent (its state is `queued`).
    #[serde(default)]
    pub waiting: bool,
    /// The labels a worker must have to run it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The namespace it belongs to.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// In line (`queued`), and no worker the master knows has its labels
    /// and memory: it waits for one to join.
    #[serde(default)]
    pub unplaceable: bool,
    /// The blob it reads as its input blob, when it was given one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_blob: Option<BlobInfo>,
    /// The output blobs it wrote, once succeeded, in the order it created
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<OutputBlob>,
    /// The W3C trace id (32 hex digits) its spans and log lines carry:
    /// the caller's, when the submission came with a valid `traceparent`,
    /// else the one the node started for it. Absent when it has none (no
    /// `traceparent` and no export) and for a schedule's firings, whose
    /// attempts start traces of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HealthResponse {
    /// `ok`.
    pub status: String,
}

/// `202` to `POST /v1/node/leave`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeavingResponse {
    /// The node's id.
    pub node: String,
    /// `leaving`.
    pub status: String,
}

/// `GET /v1/master`: which master build runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MasterBuildResponse {
    /// The node hosting the master.
    pub node: String,
    /// Its epoch.
    pub epoch: u64,
    /// The build running: `built-in` or `sha256:<hex>`.
    pub build: String,
    /// The build `POST /v1/master/rollback` returns to.
    pub previous: String,
}

/// `200` to `POST /v1/master/upgrade` and `/v1/master/rollback`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MasterSwitchResponse {
    /// The build before: `built-in` or `sha256:<hex>`.
    pub from: String,
    /// The build running now.
    pub to: String,
    /// False when `to` already ran (nothing changed).
    pub switched: bool,
    /// Events the new build replayed in its check.
    pub replayed_events: u64,
    /// How long the master stopped serving for the switch, ms.
    pub pause_ms: u64,
}

/// `202` to `DELETE /v1/cluster/voters/{node}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RemovingResponse {
    /// The node being removed from the voter set.
    pub removing: String,
}

/// `200` to `DELETE /v1/tokens/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevokedResponse {
    /// The token's id.
    pub id: String,
    /// `true`.
    pub revoked: bool,
}

/// `POST /v1/jobs/wait`: wait for the first of `ids` to finish.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WaitRequest {
    /// The jobs (at most 10,000).
    #[serde(with = "whole::many")]
    #[cfg_attr(feature = "openapi", schema(max_items = 10_000))]
    pub ids: Vec<u64>,
    /// Longest wait for the first to finish (ms; more than 60,000 waits
    /// 60,000; default 0: answer at once).
    #[serde(default, with = "whole::one")]
    pub wait_ms: u64,
}

/// A finished (or unknown) job in a [`WaitResponse`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FinishedBody {
    /// Id.
    pub id: u64,
    /// `succeeded`, `failed`, `cancelled`, `dead`, or `unknown` (an id the
    /// cluster does not know, or whose record expired; see `error`).
    pub state: String,
    /// Why it did not succeed (or why it is unknown).
    pub error: Option<ErrorBody>,
    /// Its output in base64, when succeeded and small enough to come
    /// inline; otherwise `GET /v1/jobs/{id}/result`.
    pub output_base64: Option<String>,
    /// Its output's size, when succeeded.
    pub output_bytes: Option<u64>,
    /// The output blobs it wrote, when succeeded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<OutputBlob>,
}

/// `200` to `POST /v1/jobs/wait`: the finished jobs among those asked
/// about (none if the wait ended first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitResponse {
    /// The finished ones, in the order asked.
    pub jobs: Vec<FinishedBody>,
}

/// A job in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobSummaryBody {
    /// Id.
    pub id: u64,
    /// State name.
    pub state: String,
    /// Attempts so far.
    pub attempts: u32,
    /// Submission time.
    pub submitted_at: u64,
    /// When it finished.
    #[serde(default)]
    pub finished_at: Option<u64>,
    /// Its module's sha256.
    #[serde(default)]
    pub module: String,
    /// Its priority.
    #[serde(default)]
    pub priority: i32,
    /// Why it failed, if it did.
    #[serde(default)]
    pub error_code: Option<String>,
    /// The deployment name it was submitted by, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_name: Option<String>,
    /// That name's version when the job was accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_version: Option<u32>,
    /// The namespace it belongs to.
    #[serde(default = "default_namespace")]
    pub namespace: String,
}

/// The namespace of a job a node of an older version answered about.
fn default_namespace() -> String {
    "default".to_owned()
}

/// `GET /v1/jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobListResponse {
    /// A page of jobs, by ascending id (descending with `order=newest`).
    pub jobs: Vec<JobSummaryBody>,
    /// Pass as `cursor` for the next page; absent at the end.
    pub next_cursor: Option<String>,
}

/// A stored module.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModuleBody {
    /// sha256.
    pub digest: String,
    /// Size.
    pub bytes: u64,
    /// When the answering node stored it (in `GET /v1/modules`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_seen: Option<u64>,
    /// `rust`, `python`, `javascript` or `unknown`, from the toolchains'
    /// marks in the module (in `GET /v1/modules`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// Its world: `cohort:job/job`, with the package version when it
    /// imports the host interface (in `GET /v1/modules`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<String>,
    /// Jobs the master holds that run it (in `GET /v1/modules`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<u64>,
}

/// Which jobs a bulk action is about: every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JobFilterBody {
    /// In this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Running this module (its sha256), or submitted by this deployment
    /// name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// With this priority.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    pub priority: Option<i32>,
    /// Submitted at or after (ms since the Unix epoch).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    pub from: Option<u64>,
    /// Submitted at or before.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    pub to: Option<u64>,
    /// Text in the error's code or message (ASCII case ignored, at most
    /// 64 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Only these jobs (at most 1,000).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::some_many"
    )]
    pub ids: Option<Vec<u64>>,
}

/// `POST /v1/jobs/bulk`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    /// `cancel` (jobs not finished) or `retry` (failed, dead and cancelled
    /// jobs).
    pub action: String,
    /// Which jobs (a JSON object).
    #[serde(default, deserialize_with = "object")]
    pub filter: JobFilterBody,
    /// Count the jobs the action would change; change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// For `retry`: attempts each job gets (default: the node's
    /// `--max-attempts`); a cancel ignores it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    pub attempts: Option<u32>,
}

/// `200` to `POST /v1/jobs/bulk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkResponse {
    /// With `dry_run`: jobs the action would change now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<u64>,
    /// Without: jobs it changed (at most 10,000 per request; send it
    /// again for the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<u64>,
}

/// `GET /v1/whoami`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WhoamiResponse {
    /// The node's API needs tokens.
    pub tokens_required: bool,
    /// The id of the token the request carried.
    pub token: Option<String>,
    /// What the caller may do: `read`, `submit`, `admin`.
    pub scopes: Vec<String>,
    /// The namespace the caller's token is confined to (absent:
    /// cluster-wide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// The master in [`OverviewResponse`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MasterBody {
    /// The node hosting it (empty if none is known).
    pub node: String,
    /// Its epoch.
    pub epoch: u64,
}

/// Submission-to-end times in [`OverviewResponse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LatencyBody {
    /// Median, ms.
    pub p50: u64,
    /// 99th percentile, ms.
    pub p99: u64,
}

/// A replica in [`OverviewResponse`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplicaBody {
    /// The replica's node.
    pub node: String,
    /// Journal entries it lacks.
    pub behind: u64,
}

/// Something the answering node saw happen, in [`OverviewResponse`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryBody {
    /// When (ms since the Unix epoch).
    pub at: u64,
    /// `node_joined`, `node_leaving`, `node_gone` or `master_moved`.
    pub kind: String,
    /// For people.
    pub message: String,
}

/// `GET /v1/namespaces`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NamespaceListResponse {
    /// Every namespace that held a job since the cluster counts them, by
    /// name (a token confined to one: that one, once it held a job).
    pub namespaces: Vec<NamespaceBody>,
}

/// A namespace: the jobs it holds and what it submitted and spent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NamespaceBody {
    /// Its name (`default` for the default one).
    pub name: String,
    /// The jobs it holds, by state (every state, 0 included).
    pub jobs: std::collections::BTreeMap<String, u64>,
    /// Jobs it submitted since its first (purged ones included).
    pub submitted_total: u64,
    /// Its attempts whose worker said what they cost.
    pub attempts_metered: u64,
    /// Their CPU time, in microseconds.
    pub cpu_us: u64,
    /// Their outbound body bytes, both ways.
    pub egress_bytes: u64,
    /// The bytes of results its held jobs keep (inline outputs and output
    /// blobs).
    #[serde(default)]
    pub result_bytes: u64,
    /// Its quotas (none set: `{}`).
    #[serde(default)]
    pub quotas: QuotasBody,
    /// Its weight for its fair share of the workers (1 unless set).
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

/// `POST /v1/namespaces/{name}/weight`: a namespace's weight for its
/// fair share of the workers, measured in the CPU its attempts use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WeightBody {
    /// 1 (the default) to 10,000: namespaces that compete for workers get
    /// CPU time in proportion to their weights.
    #[serde(with = "whole::one")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10_000))]
    pub weight: u32,
}

/// `POST /v1/namespaces/{name}/weight`: the weight the namespace has now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WeightResponse {
    /// The namespace.
    pub namespace: String,
    /// Its weight.
    pub weight: u32,
}

/// A namespace's quotas: each one left out is no quota. `PUT
/// /v1/namespaces/{name}/quotas` sets all four at once (`{}`: none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QuotasBody {
    /// Most jobs waiting (queued, backing off or waiting for parents); a
    /// submission past it is `429 quota_exceeded`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1_000_000_000))]
    pub waiting_max: Option<u64>,
    /// Most attempts running at once; more wait in line.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1_000_000_000))]
    pub running_max: Option<u32>,
    /// Most jobs submitted a second (a bucket of one second's worth); past
    /// it, `429 quota_exceeded`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1_000_000))]
    pub submissions_per_second: Option<u32>,
    /// Most bytes of results its held jobs keep; while they keep as many,
    /// a submission is `429 quota_exceeded`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1, maximum = 1_125_899_906_842_624_u64)
    )]
    pub result_bytes_max: Option<u64>,
}

/// `POST /v1/namespaces/{name}/quotas`: the quotas the namespace has now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QuotasResponse {
    /// The namespace.
    pub namespace: String,
    /// Its quotas.
    pub quotas: QuotasBody,
}

/// `GET /v1/overview`, and each `overview` event of `GET /v1/events`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OverviewResponse {
    /// The answering node's clock (ms since the Unix epoch).
    pub at: u64,
    /// The answering node.
    pub node: String,
    /// Where the master runs.
    pub master: MasterBody,
    /// Jobs the master holds, by state name.
    pub jobs: std::collections::BTreeMap<String, u64>,
    /// Jobs accepted since the journal began.
    pub submitted_total: u64,
    /// Attempts started since the journal began.
    pub attempts_total: u64,
    /// Attempts re-queued after a failure or expiry.
    pub retries_total: u64,
    /// Jobs that finished in the last `recent_ms`.
    pub finished_recent: u64,
    /// The window of `finished_recent` and `latency_ms`.
    pub recent_ms: u64,
    /// Submission-to-end times of those jobs (absent if none).
    pub latency_ms: Option<LatencyBody>,
    /// Journal entries each replica lacks (empty with one back-end node).
    pub replicas: Vec<ReplicaBody>,
    /// The nodes, oldest first, as in `GET /v1/cluster`.
    pub nodes: Vec<NodeBody>,
    /// The workers the master knows.
    pub workers: Vec<WorkerBody>,
    /// What the answering node saw happen lately, newest first.
    pub history: Vec<HistoryBody>,
}

/// `GET /v1/modules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModuleListResponse {
    /// Every stored module.
    pub modules: Vec<ModuleBody>,
}

/// A stored blob: `201` (newly stored) or `200` (already stored) to
/// `PUT /v1/blobs`, and each item of `GET /v1/blobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlobInfo {
    /// The sha256 of its bytes, 64 lowercase hex digits: its name.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub digest: String,
    /// Its size.
    pub bytes: u64,
}

/// A blob the answering node stores, in `GET /v1/blobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlobEntry {
    /// The sha256 of its bytes, 64 lowercase hex digits: its name.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub digest: String,
    /// Its size.
    pub bytes: u64,
    /// Whether the cluster keeps the blob (absent when the master could
    /// not be asked): a copy of a blob the cluster does not keep is
    /// deleted once the node's `--blob-grace` has passed since it was
    /// last stored or uploaded here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<bool>,
    /// How many held jobs (their inputs and outputs) and schedules name
    /// it (absent when the master could not be asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refs: Option<u32>,
    /// When the cluster stops keeping it, in ms since the Unix epoch,
    /// unless something names it or it is uploaded again before; absent
    /// while something names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collect_at: Option<u64>,
}

impl BlobEntry {
    /// The blob's digest and size.
    pub fn info(&self) -> BlobInfo {
        BlobInfo {
            digest: self.digest.clone(),
            bytes: self.bytes,
        }
    }
}

/// `GET /v1/blobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlobList {
    /// Every blob the answering node stores, by digest; with
    /// `scope=cluster`, a page of the blobs the cluster keeps.
    pub blobs: Vec<BlobEntry>,
    /// With `scope=cluster`, the `after` of the next page (absent: this
    /// was the last, or a node's listing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `POST /v1/blobs/{digest}/purge`: the cluster no longer keeps the blob,
/// and the finished jobs that named it forgot it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlobPurged {
    /// The blob's sha256, 64 lowercase hex digits.
    pub digest: String,
    /// Always true: the nodes delete their copies within their grace
    /// period (`--blob-grace`).
    pub purged: bool,
    /// How many finished jobs named it: those that read it as their input
    /// were purged, the others no longer list it among their outputs.
    pub jobs: u64,
}

/// `DELETE /v1/blobs/{digest}`: the cluster no longer keeps the blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlobDeleted {
    /// The blob's sha256, 64 lowercase hex digits.
    pub digest: String,
    /// Always true: the nodes delete their copies within their grace
    /// period (`--blob-grace`).
    pub deleted: bool,
}

/// A node in `GET /v1/cluster`, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeBody {
    /// Node id.
    pub id: String,
    /// HTTP address.
    pub http: String,
    /// Roles.
    pub roles: Vec<String>,
    /// Start time in ns since the Unix epoch: the age order.
    pub generation: u64,
    /// `live`, `leaving` or `dead`.
    pub status: String,
    /// Whether it hosts the master.
    pub master: bool,
    /// Worker slots.
    pub slots: u32,
    /// Slots running an attempt, as the master sees it.
    pub busy: u32,
    /// The cohort version it runs (rolling upgrades mix versions).
    pub version: String,
    /// Where this node believes the master runs (`node@epoch`).
    pub master_seen: String,
}

/// A worker in `GET /v1/cluster`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerBody {
    /// Worker id.
    pub id: String,
    /// Slots.
    pub slots: u32,
    /// Attempts running.
    pub running: u32,
    /// Last heard from.
    pub last_seen: u64,
    /// Its labels (`cohort node --labels`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The most memory it gives one attempt (`--job-memory-max`), when it
    /// said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<u64>,
}

/// `GET /v1/cluster`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterResponse {
    /// Members.
    pub nodes: Vec<NodeBody>,
    /// Node hosting the master.
    pub master_node: String,
    /// The master's epoch.
    pub master_epoch: u64,
    /// Workers the master knows.
    pub workers: Vec<WorkerBody>,
    /// The back-end nodes whose majority commits the journal (the voter
    /// set as the answering node's journal has it; empty on a node that is
    /// not a back-end).
    #[serde(default)]
    pub voters: Vec<String>,
    /// How the answering node protects itself.
    #[serde(default)]
    pub security: SecurityBody,
    /// Why the master could not be asked which workers it knows (a lost
    /// quorum, no master yet); `workers` is then empty. The node still
    /// answers with the membership it sees, so a cluster that cannot
    /// decide can be looked at. Absent when the master answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_error: Option<ErrorBody>,
}

/// A node's security settings, in `GET /v1/cluster`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SecurityBody {
    /// Gossip and node-to-node requests are sealed with a cluster key.
    pub cluster_key: bool,
    /// The ids of the keys it holds (the sealing key first); never the keys.
    pub key_ids: Vec<String>,
    /// The public API needs tokens.
    pub tokens: bool,
    /// The public API is served over TLS.
    pub tls: bool,
    /// Started with `--insecure`: reachable beyond loopback with no key.
    pub insecure: bool,
}

/// JSON numbers read as integers: `3`, and also `3.0`, which JSON
/// Schema's `integer` (the OpenAPI document's) includes and serde's
/// integers refuse.
/// A struct read from a JSON object only (serde would also read one
/// from an array of its fields in order).
fn object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error as _;
    let fields = serde_json::Map::deserialize(deserializer)?;
    T::deserialize(serde_json::Value::Object(fields)).map_err(D::Error::custom)
}

/// `POST /v1/schedules`: a job fired at every tick of a cron expression
/// (`cron`, in `timezone`) or of an interval (`every_ms`); give one of the
/// two.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ScheduleRequest {
    /// Unique name: 1 to 128 characters of `A-Z a-z 0-9 . _ -`.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9._-]{1,128}$", min_length = 1, max_length = 128)
    )]
    pub name: String,
    /// Five fields (`minute hour day-of-month month day-of-week`) or six
    /// (seconds first), as cron reads them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 256))]
    pub cron: Option<String>,
    /// The IANA time zone `cron` is read in (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Fire every this many milliseconds from creation (1 s to 366 days).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1000, maximum = 31_622_400_000_u64)
    )]
    pub every_ms: Option<u64>,
    /// While a job an earlier tick fired has not finished: `skip` the tick
    /// (default), `buffer_one` (fire one when it ends), `allow_all`, or
    /// `cancel_running` (cancel it, then fire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<String>,
    /// Ticks missed by at most this much, plus a second of grace (no
    /// master for a while), fire late; older ones are recorded for a
    /// backfill (default 60,000; at most 7 days).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 604_800_000_u64))]
    pub catch_up_ms: Option<u64>,
    /// The job each tick submits, as for `POST /v1/jobs` (without
    /// `idempotency_key`, `unique_key` or `unique_window_ms`).
    pub job: SubmitRequest,
}

/// A range of missed ticks, `from` inclusive, `to` exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MissedRange {
    /// First (ms since the Unix epoch).
    pub from: u64,
    /// End.
    pub to: u64,
}

/// A schedule: what it fires, when, and what it did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleResponse {
    /// Its name (unique in the cluster).
    pub name: String,
    /// The namespace its jobs belong to (a token confined to a namespace
    /// sees its own namespace's schedules only).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Its cron expression, for a cron schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The expression's time zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Its period, for an interval schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    /// `skip`, `buffer_one`, `allow_all` or `cancel_running`.
    pub overlap: String,
    /// The catch-up window.
    pub catch_up_ms: u64,
    /// The module each job runs: its sha256, or the deployment name each
    /// firing resolves.
    pub module: String,
    /// Each job's input size.
    pub input_bytes: u64,
    /// Each job's priority.
    pub priority: i32,
    /// Each job's attempt limit.
    pub max_attempts: u32,
    /// Each job's per-attempt timeout.
    pub timeout_ms: u64,
    /// Each job's concurrency key, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
    /// When it was created (ms since the Unix epoch).
    pub created_at: u64,
    /// Paused: it fires nothing until resumed.
    pub paused: bool,
    /// Its next ticks (none while paused).
    pub upcoming: Vec<u64>,
    /// A tick `buffer_one` keeps for when the running job ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffered: Option<u64>,
    /// Jobs it fired that have not finished.
    pub active: Vec<u64>,
    /// The latest tick fired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_tick: Option<u64>,
    /// That tick's job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_job: Option<u64>,
    /// Ticks fired (backfills included).
    pub fired_total: u64,
    /// Ticks skipped (overlap policy, or a full queue).
    pub skipped_total: u64,
    /// Ticks older than the catch-up window when a master came to them,
    /// which a backfill can still fire (at most 100 ranges, oldest first).
    pub missed: Vec<MissedRange>,
}

/// `GET /v1/schedules`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleListResponse {
    /// Every schedule, by name.
    pub schedules: Vec<ScheduleResponse>,
}

/// `POST /v1/schedules/{name}/backfill`: fire the missed ticks in
/// `from..to` (at most 1,000; the default range is all of them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BackfillRequest {
    /// First time, inclusive (ms since the Unix epoch; default 0).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    pub from: Option<u64>,
    /// End, exclusive (default: no end).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    pub to: Option<u64>,
}

/// `202` to a backfill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BackfillResponse {
    /// One job per missed tick fired, in tick order.
    pub ids: Vec<u64>,
}

/// `200` to `DELETE /v1/schedules/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleDeletedResponse {
    /// The schedule's name.
    pub name: String,
    /// `true`. The jobs it fired stay.
    pub deleted: bool,
}

/// `POST /v1/deployments/{name}`: point the name at a stored module.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DeployRequest {
    /// The module's sha256 (from `POST /v1/modules`).
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub digest: String,
}

/// `POST /v1/deployments/{name}/rollback`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RollbackRequest {
    /// The version to return to [default: the one current before the
    /// current one].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "whole::option"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 4_294_967_295_u64))]
    pub to: Option<u32>,
}

/// One version of a deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeploymentVersion {
    /// Its number (from 1, one more at every deploy or rollback).
    pub version: u32,
    /// The module's sha256.
    pub digest: String,
    /// When it became current (ms since the Unix epoch).
    pub deployed_at: u64,
    /// The version a rollback returned to, when this version is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<u32>,
}

/// A deployment: a name and the module it points at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeploymentResponse {
    /// The name.
    pub name: String,
    /// The current version.
    pub current: DeploymentVersion,
    /// Versions ever made of this name.
    pub versions_total: u32,
    /// The versions kept, newest first (in `GET /v1/deployments/{name}`;
    /// empty in the list).
    #[serde(default)]
    pub versions: Vec<DeploymentVersion>,
    /// What its jobs may reach over HTTP(S).
    #[serde(default)]
    pub grants: Vec<HttpGrantBody>,
    /// The secrets its jobs may read.
    #[serde(default)]
    pub secrets: Vec<String>,
}

/// `GET /v1/deployments`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeploymentListResponse {
    /// Every deployment, by name.
    pub deployments: Vec<DeploymentResponse>,
}

/// `200` to a deploy or a rollback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeployResponse {
    /// The name.
    pub name: String,
    /// The version now current.
    pub version: u32,
    /// Its module's sha256.
    pub digest: String,
    /// `true` when the name already pointed at this module (no new
    /// version).
    pub existing: bool,
}

/// `200` to `DELETE /v1/deployments/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UndeployResponse {
    /// The name.
    pub name: String,
    /// `true`. Jobs accepted by this name keep the module they resolved to.
    pub deleted: bool,
}

/// `POST /v1/dags`: jobs with edges, accepted all or nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DagRequest {
    /// The jobs (1 to 10,000).
    pub jobs: Vec<DagJobRequest>,
    /// What a job that fails (or is dead, or cancelled) does to the rest:
    /// `skip_descendants` (default: its descendants are cancelled with
    /// error `parent_failed`, other branches run on) or `cancel_dag`
    /// (every unfinished job of the DAG is cancelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<String>,
    /// The same key again gets the same DAG (1 to 64 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 64))]
    pub idempotency_key: Option<String>,
}

/// One job of a DAG.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DagJobRequest {
    /// Its name, unique in the DAG (1 to 128 characters).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub name: String,
    /// The job, as for `POST /v1/jobs` (without `idempotency_key` or
    /// `unique_key`).
    pub job: SubmitRequest,
    /// Names of the DAG's jobs it waits for (at most 100 parents in all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// Ids of existing jobs it waits for.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "whole::many")]
    pub after_jobs: Vec<u64>,
    /// Receive the parents' outputs with the input (default `true`): the
    /// job's input is then `{"input", "parents": [{"id", "name",
    /// "output", "blobs"}]}`, and it may read each parent's output blobs
    /// (`blobs`) as `PARENT/OUTPUT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_outputs: Option<bool>,
}

/// `202` to `POST /v1/dags`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DagSubmitResponse {
    /// The DAG's id.
    pub id: u64,
    /// Its jobs' ids, in the order submitted.
    pub jobs: Vec<u64>,
    /// True if the idempotency key matched an existing DAG.
    pub existing: bool,
}

/// A job of a DAG, in its status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DagJobBody {
    /// Its id.
    pub id: u64,
    /// Its name in the DAG.
    pub name: String,
    /// Its state, or `purged`.
    pub state: String,
    /// The jobs it waits for.
    pub parents: Vec<u64>,
}

/// `GET /v1/dags/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DagResponse {
    /// Its id.
    pub id: u64,
    /// `running` while a job is queued or running, else `succeeded` when
    /// all did, `failed` when one failed or is dead, else `cancelled`.
    pub state: String,
    /// `skip_descendants` or `cancel_dag`.
    pub on_failure: String,
    /// When it was submitted (ms since the Unix epoch).
    pub created_at: u64,
    /// Its jobs per state (purged ones not counted).
    pub counts: std::collections::BTreeMap<String, u64>,
    /// Queued jobs that still wait for a parent.
    pub waiting: u64,
    /// Its jobs in the order submitted.
    pub jobs: Vec<DagJobBody>,
}

mod whole {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    fn integer<T: TryFrom<i128>>(number: &serde_json::Number) -> Result<T, String> {
        let value = match (number.as_u64(), number.as_i64(), number.as_f64()) {
            (Some(u), _, _) => i128::from(u),
            (None, Some(i), _) => i128::from(i),
            // Past 2^64 a float cannot be any integer type here.
            (None, None, Some(f)) if f.fract() == 0.0 && f.abs() < 2e19 => f as i128,
            _ => return Err(format!("{number} is not a whole number in range")),
        };
        T::try_from(value).map_err(|_| format!("{number} is out of range"))
    }

    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer, T: Serialize>(
            value: &Option<T>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            value.serialize(serializer)
        }

        pub fn deserialize<'de, D: Deserializer<'de>, T: TryFrom<i128>>(
            deserializer: D,
        ) -> Result<Option<T>, D::Error> {
            Option::<serde_json::Number>::deserialize(deserializer)?
                .map(|n| integer(&n))
                .transpose()
                .map_err(D::Error::custom)
        }
    }

    pub mod one {
        use super::*;

        pub fn serialize<S: Serializer, T: Serialize>(
            value: &T,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            value.serialize(serializer)
        }

        pub fn deserialize<'de, D: Deserializer<'de>, T: TryFrom<i128>>(
            deserializer: D,
        ) -> Result<T, D::Error> {
            integer(&serde_json::Number::deserialize(deserializer)?).map_err(D::Error::custom)
        }
    }

    pub mod some_many {
        use super::*;

        pub fn serialize<S: Serializer, T: Serialize>(
            value: &Option<Vec<T>>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            value.serialize(serializer)
        }

        pub fn deserialize<'de, D: Deserializer<'de>, T: TryFrom<i128>>(
            deserializer: D,
        ) -> Result<Option<Vec<T>>, D::Error> {
            Option::<Vec<serde_json::Number>>::deserialize(deserializer)?
                .map(|numbers| numbers.iter().map(integer).collect::<Result<_, _>>())
                .transpose()
                .map_err(D::Error::custom)
        }
    }

    pub mod many {
        use super::*;

        pub fn serialize<S: Serializer, T: Serialize>(
            value: &[T],
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            value.serialize(serializer)
        }

        pub fn deserialize<'de, D: Deserializer<'de>, T: TryFrom<i128>>(
            deserializer: D,
        ) -> Result<Vec<T>, D::Error> {
            Vec::<serde_json::Number>::deserialize(deserializer)?
                .iter()
                .map(integer)
                .collect::<Result<_, _>>()
                .map_err(D::Error::custom)
        }
    }
}

#[cfg(test)]
mod decode_tests {
    //! Request bodies are parsed before anything checks them: any bytes
    //! and any JSON value parse as `SubmitRequest` / `BatchRequest` or fail
    //! with an error (the server's `bad_json`), never a panic, and nesting
    //! deeper than serde_json's recursion limit (128) is refused rather
    //! than overflowing the stack. What parses serializes back to the same
    //! request. Long run:
    //! `PROPTEST_CASES=100000 cargo test -p cohort-client --lib types`.
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    fn config() -> ProptestConfig {
        // `proptest!` lets PROPTEST_CASES override this.
        ProptestConfig::with_cases(512)
    }

    const FIELDS: [&str; 11] = [
        "labels",
        "module",
        "input",
        "input_base64",
        "input_json",
        "timeout_ms",
        "memory_bytes",
        "max_attempts",
        "priority",
        "idempotency_key",
        "jobs",
    ];

    /// JSON values built mostly from the requests' own field names, so
    /// generated objects get past `deny_unknown_fields` and reach the
    /// field types. No floats: serde_json's default float parsing may move
    /// the last bit, which is not what this is about.
    fn json() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            4 => proptest::sample::select(FIELDS.to_vec()).prop_map(String::from),
            1 => any::<String>(),
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            prop_oneof![Just(-1i64), Just(0), Just(1), Just(u32::MAX as i64 + 1)]
                .prop_map(Value::from),
            any::<String>().prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(key.clone(), inner, 0..6)
                    .prop_map(|fields| Value::Object(fields.into_iter().collect())),
            ]
        })
    }

    /// Objects shaped like a submission: a module string and some of the
    /// other fields with values of any type, so many of them parse.
    fn submission() -> impl Strategy<Value = Value> {
        let field = proptest::sample::select(FIELDS[1..9].to_vec()).prop_map(String::from);
        let value = prop_oneof![
            2 => any::<u32>().prop_map(Value::from),
            1 => any::<String>().prop_map(Value::from),
            1 => json(),
        ];
        (
            any::<String>(),
            proptest::collection::btree_map(field, value, 0..5),
        )
            .prop_map(|(module, mut fields)| {
                fields.insert("module".into(), Value::from(module));
                Value::Object(fields.into_iter().collect())
            })
    }

    /// Bytes that are mostly JSON tokens, including the awkward ones
    /// (numbers out of range, lone surrogates, unterminated strings).
    fn json_ish() -> impl Strategy<Value = Vec<u8>> {
        let token = prop_oneof![
            4 => proptest::sample::select(vec![
                "{", "}", "[", "]", ",", ":", "\"module\"", "\"jobs\"", "\"input_json\"",
                "\"priority\"", "\"ab\"", "1e999", "-0", "18446744073709551616", "-1",
                "null", "true", "\"\\ud800\"", "\"", "\\u0000", " ",
            ])
            .prop_map(|t| t.as_bytes().to_vec()),
            1 => proptest::collection::vec(any::<u8>(), 1..4),
        ];
        proptest::collection::vec(token, 0..40).prop_map(|tokens| tokens.concat())
    }

    fn parses_or_fails(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(request) = serde_json::from_slice::<SubmitRequest>(bytes) {
            let again = serde_json::to_vec(&request)?;
            prop_assert_eq!(serde_json::from_slice::<SubmitRequest>(&again)?, request);
        }
        if let Ok(batch) = serde_json::from_slice::<BatchRequest>(bytes) {
            let again = serde_json::to_vec(&batch)?;
            prop_assert_eq!(serde_json::from_slice::<BatchRequest>(&again)?, batch);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_bytes_parse_or_fail(bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..256),
            json_ish(),
        ]) {
            // Floats may appear here; only "no panic" is asked of them.
            let _ = serde_json::from_slice::<SubmitRequest>(&bytes);
            let _ = serde_json::from_slice::<BatchRequest>(&bytes);
        }

        #[test]
        fn any_json_parses_to_a_request_that_round_trips_or_fails(
            value in prop_oneof![json(), submission()],
        ) {
            parses_or_fails(&serde_json::to_vec(&value)?)?;
            // The same value as a batch's only job.
            let batch = serde_json::json!({ "jobs": [value] });
            parses_or_fails(&serde_json::to_vec(&batch)?)?;
        }
    }

    #[test]
    fn whole_floats_are_integers_and_other_numbers_are_refused() {
        let request: SubmitRequest =
            serde_json::from_str(r#"{"module":"ab","max_attempts":3.0,"priority":-2.0}"#).unwrap();
        assert_eq!(
            (request.max_attempts, request.priority),
            (Some(3), Some(-2))
        );
        let rollback: RollbackRequest = serde_json::from_str(r#"{"to":506280.0}"#).unwrap();
        assert_eq!(rollback.to, Some(506_280));
        assert!(serde_json::from_str::<RollbackRequest>(r#"{"to":1.5}"#).is_err());
        for bad in [r#"1.5"#, r#"-1"#, r#"4294967296"#, r#"1e30"#, r#""3""#] {
            let body = format!(r#"{{"module":"ab","max_attempts":{bad}}}"#);
            assert!(
                serde_json::from_str::<SubmitRequest>(&body).is_err(),
                "{bad}"
            );
        }
        let wait: WaitRequest = serde_json::from_str(r#"{"ids":[1,2.0],"wait_ms":5.0}"#).unwrap();
        assert_eq!((wait.ids, wait.wait_ms), (vec![1, 2], 5));
        assert!(serde_json::from_str::<WaitRequest>(r#"{"ids":[-1]}"#).is_err());
    }

    #[test]
    fn a_valid_request_parses() {
        let body = br#"{"module":"ab","input_json":{"x":[1,2]},"priority":-3}"#;
        let request: SubmitRequest = serde_json::from_slice(body).unwrap();
        assert_eq!(request.priority, Some(-3));
        assert!(serde_json::from_slice::<SubmitRequest>(br#"{"module":"ab","x":1}"#).is_err());
    }

    /// 100 000 levels of `[` inside `input_json`, alone and in a batch:
    /// an error at depth 128, not a stack overflow (which would abort the
    /// node, not fail the request).
    #[test]
    fn deep_nesting_is_refused_not_recursed_into() {
        let deep = "[".repeat(100_000);
        let submit = format!(r#"{{"module":"ab","input_json":{deep}"#);
        let error = serde_json::from_str::<SubmitRequest>(&submit).unwrap_err();
        assert!(error.to_string().contains("recursion limit"), "{error}");
        let batch = format!(r#"{{"jobs":[{submit}"#);
        let error = serde_json::from_str::<BatchRequest>(&batch).unwrap_err();
        assert!(error.to_string().contains("recursion limit"), "{error}");
    }
}
