//! Every error code the node answers with, in one table: the code's wire
//! string, its HTTP status and whether a retry may help.
//!
//! The table sits on the ground floor so that every layer names a code by
//! its variant: the API (`crate::api::error`) answers with them, and the
//! master's service and the upgrade checks put them in the rejections they
//! make (`ErrorCode::as_str`), which the API parses back into the same
//! variant. Nothing in the node spells a code as a string literal.
//!
//! A code is a client's contract: its string never changes on the wire, and
//! the clients' tables are checked against this one (through the OpenAPI
//! document, which lists every code with its status).

use hyper::StatusCode;

/// Defines [`ErrorCode`] from one table: variant, wire string, status,
/// retryable.
macro_rules! error_codes {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident = $code:literal, $status:ident, $retryable:literal;
    )*) => {
        /// Every error code the public API answers with.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum ErrorCode {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl ErrorCode {
            /// Every code, in the order of the table.
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The code on the wire (stable).
            pub const fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $code,)* }
            }

            /// The HTTP status it is answered with.
            pub const fn status(self) -> StatusCode {
                match self { $(ErrorCode::$variant => StatusCode::$status,)* }
            }

            /// Whether sending the same request again, later, may succeed
            /// (the node or the cluster was briefly unable to serve it);
            /// `false`: the request itself must change.
            pub const fn retryable(self) -> bool {
                match self { $(ErrorCode::$variant => $retryable,)* }
            }
        }

        impl std::str::FromStr for ErrorCode {
            type Err = UnknownCode;

            fn from_str(code: &str) -> Result<Self, UnknownCode> {
                match code {
                    $($code => Ok(ErrorCode::$variant),)*
                    _ => Err(UnknownCode(code.to_string())),
                }
            }
        }
    };
}

error_codes! {
    /// Malformed JSON, or unknown fields.
    BadJson = "bad_json", BAD_REQUEST, false;
    /// A bad id, parameter or input encoding, or a request that is not HTTP.
    BadRequest = "bad_request", BAD_REQUEST, false;
    /// Bytes that are not a message of the master's format.
    Undecodable = "undecodable", BAD_REQUEST, false;
    /// Plain HTTP to a node that serves its API over TLS.
    TlsRequired = "tls_required", BAD_REQUEST, false;
    /// A token's id, name or scopes are out of range.
    InvalidToken = "invalid_token", BAD_REQUEST, false;
    /// No token, not a token, an unknown or revoked one; a node-to-node
    /// request without the cluster key.
    Unauthorized = "unauthorized", UNAUTHORIZED, false;
    /// The token lacks the route's scope.
    Forbidden = "forbidden", FORBIDDEN, false;
    /// The node has no front-end role.
    NotFrontEnd = "not_front_end", FORBIDDEN, false;
    /// No such route.
    NotFound = "not_found", NOT_FOUND, false;
    /// No job has this id.
    JobNotFound = "job_not_found", NOT_FOUND, false;
    /// The job was purged after its retention time.
    JobExpired = "job_expired", NOT_FOUND, false;
    /// No module with this digest is stored here.
    ModuleNotStored = "module_not_stored", NOT_FOUND, false;
    /// No blob with this digest is stored in the cluster (or the digest is
    /// not 64 hex digits).
    BlobNotFound = "blob_not_found", NOT_FOUND, false;
    /// No token has this id.
    TokenNotFound = "token_not_found", NOT_FOUND, false;
    /// No schedule has this name.
    ScheduleNotFound = "schedule_not_found", NOT_FOUND, false;
    /// No DAG has this id (or all its jobs were purged).
    DagNotFound = "dag_not_found", NOT_FOUND, false;
    /// No deployment has this name.
    ModuleNameNotFound = "module_name_not_found", NOT_FOUND, false;
    /// No secret has this name.
    SecretNotFound = "secret_not_found", NOT_FOUND, false;
    /// A rollback to a version the deployment no longer keeps (or never
    /// had).
    ModuleVersionNotFound = "module_version_not_found", NOT_FOUND, false;
    /// A known route, another method.
    MethodNotAllowed = "method_not_allowed", METHOD_NOT_ALLOWED, false;
    /// The body did not arrive in time (the connection is closed).
    RequestTimeout = "request_timeout", REQUEST_TIMEOUT, true;
    /// Cancelling a job that already finished.
    JobFinished = "job_finished", CONFLICT, false;
    /// The job has no result yet: it has not finished.
    JobNotFinished = "job_not_finished", CONFLICT, true;
    /// The job finished without a result.
    JobNotSucceeded = "job_not_succeeded", CONFLICT, false;
    /// The idempotency key belongs to a job with another module or input.
    IdempotencyConflict = "idempotency_conflict", CONFLICT, false;
    /// A token with this id exists.
    TokenExists = "token_exists", CONFLICT, false;
    /// A schedule with this name exists.
    ScheduleExists = "schedule_exists", CONFLICT, false;
    /// Another master upgrade started meanwhile, or the cluster journaled
    /// too much while the new master was checked.
    UpgradeBusy = "upgrade_busy", CONFLICT, true;
    /// A master rollback while the built-in master runs and always did; a
    /// deployment rollback with no earlier version.
    NothingToRollBack = "nothing_to_roll_back", CONFLICT, false;
    /// Undeploying a name a schedule still names.
    ModuleNameInUse = "module_name_in_use", CONFLICT, false;
    /// A new deployment name beyond the cluster's limit of names.
    ModuleNamesFull = "module_names_full", CONFLICT, false;
    /// A deployment name would hold more grants than its limit (32).
    TooManyGrants = "too_many_grants", CONFLICT, false;
    /// Deleting a secret a grant's header names.
    SecretInUse = "secret_in_use", CONFLICT, false;
    /// Deleting a blob a held job (its input or an output) or a schedule
    /// names.
    BlobInUse = "blob_in_use", CONFLICT, false;
    /// A new blob beyond the most the cluster keeps for uploads
    /// (1,000,000): delete some, or wait for their collection.
    BlobsFull = "blobs_full", CONFLICT, true;
    /// A job in a namespace new to the cluster, which keeps as many as it
    /// may (10,000).
    NamespacesFull = "namespaces_full", CONFLICT, false;
    /// A new secret beyond the cluster's limit of secrets (1,000).
    SecretsFull = "secrets_full", CONFLICT, false;
    /// Secrets on a node without a cluster key: nothing would protect them
    /// on disk.
    SecretsUnavailable = "secrets_unavailable", CONFLICT, false;
    /// The master's node runs the master natively (`--master-core native`).
    UpgradeUnsupported = "upgrade_unsupported", CONFLICT, false;
    /// The request body is over the route's limit.
    BodyTooLarge = "body_too_large", PAYLOAD_TOO_LARGE, false;
    /// The job's input is over the input limit.
    InputTooLarge = "input_too_large", PAYLOAD_TOO_LARGE, false;
    /// The module is over the module limit.
    ModuleTooLarge = "module_too_large", PAYLOAD_TOO_LARGE, false;
    /// A blob over the cluster's blob ceiling (`--blob-bytes-max`).
    BlobTooLarge = "blob_too_large", PAYLOAD_TOO_LARGE, false;
    /// A `Range` that starts past the blob's end.
    RangeNotSatisfiable = "range_not_satisfiable", RANGE_NOT_SATISFIABLE, false;
    /// A checkpoint over the checkpoint limit.
    CheckpointTooLarge = "checkpoint_too_large", PAYLOAD_TOO_LARGE, false;
    /// A worker's recorded call over what a job's record keeps (workers
    /// only: a job sees `egress_record_too_large`).
    RecordTooLarge = "record_too_large", PAYLOAD_TOO_LARGE, false;
    /// Not a WebAssembly component.
    ModuleInvalid = "module_invalid", UNPROCESSABLE_ENTITY, false;
    /// A component, but not a `cohort:job` job.
    ModuleWrongWorld = "module_wrong_world", UNPROCESSABLE_ENTITY, false;
    /// Built against another version of the `cohort:job` package.
    ModuleJobVersion = "module_job_version", UNPROCESSABLE_ENTITY, false;
    /// Imports an interface the sandbox does not provide.
    ModuleUnsupportedImport = "module_unsupported_import", UNPROCESSABLE_ENTITY, false;
    /// A submission names a module no node has.
    ModuleNotFound = "module_not_found", UNPROCESSABLE_ENTITY, false;
    /// An uploaded master that is not a Wasm component this node compiles.
    InvalidMaster = "invalid_master", UNPROCESSABLE_ENTITY, false;
    /// An uploaded master that does not export `cohort:master/master`.
    MasterWrongWorld = "master_wrong_world", UNPROCESSABLE_ENTITY, false;
    /// An uploaded master importing a clock, randomness, files, sockets or
    /// anything else a deterministic master may not.
    MasterNondeterministicImport = "master_nondeterministic_import", UNPROCESSABLE_ENTITY, false;
    /// An uploaded master whose `init` traps or refuses to start empty.
    MasterTraps = "master_traps", UNPROCESSABLE_ENTITY, false;
    /// An uploaded master that cannot read the running master's state.
    MasterSnapshotUnreadable = "master_snapshot_unreadable", UNPROCESSABLE_ENTITY, false;
    /// An uploaded master that replays the recent journal to another state
    /// than the running master's.
    MasterReplayDiverged = "master_replay_diverged", UNPROCESSABLE_ENTITY, false;
    /// An uploaded blob whose bytes do not have the sha256 its
    /// `X-Cohort-Sha256` header named: nothing was stored.
    BlobDigestMismatch = "blob_digest_mismatch", UNPROCESSABLE_ENTITY, false;
    /// A job field out of range.
    InvalidJob = "invalid_job", UNPROCESSABLE_ENTITY, false;
    /// A deployment name that is not 1 to 63 characters of `a-z 0-9 . _ -`
    /// starting with a letter or digit.
    InvalidModuleName = "invalid_module_name", UNPROCESSABLE_ENTITY, false;
    /// A namespace name that is not 1 to 63 of `a-z 0-9 -` starting with a
    /// letter or digit.
    InvalidNamespace = "invalid_namespace", UNPROCESSABLE_ENTITY, false;
    /// A quota that is 0 or past its bound (jobs waiting or running at
    /// most 1,000,000,000, submissions a second 1,000,000, result bytes
    /// 1 PiB).
    InvalidQuota = "invalid_quota", UNPROCESSABLE_ENTITY, false;
    /// A namespace's weight that is not 1 to 10,000.
    InvalidWeight = "invalid_weight", UNPROCESSABLE_ENTITY, false;
    /// A grant that is no `scheme://host[:port][/path]` pattern of http or
    /// https, or methods that are no HTTP methods.
    InvalidGrant = "invalid_grant", UNPROCESSABLE_ENTITY, false;
    /// A secret name that is not 1 to 64 of `A-Z 0-9 _` (not starting with
    /// a digit), or a value that is empty or over 16 KiB.
    InvalidSecret = "invalid_secret", UNPROCESSABLE_ENTITY, false;
    /// A bulk action's filter or attempts out of range.
    InvalidFilter = "invalid_filter", UNPROCESSABLE_ENTITY, false;
    /// A schedule's name, timing (cron expression, time zone, interval),
    /// overlap policy, catch-up window, template or backfill range is
    /// invalid.
    InvalidSchedule = "invalid_schedule", UNPROCESSABLE_ENTITY, false;
    /// A DAG with a cycle, an unknown or failed parent, a duplicate name,
    /// or over a bound.
    InvalidDag = "invalid_dag", UNPROCESSABLE_ENTITY, false;
    /// The job queue is at its bound.
    QueueFull = "queue_full", TOO_MANY_REQUESTS, true;
    /// The namespace is at one of its quotas (jobs waiting, submissions a
    /// second, result bytes kept); retry after `Retry-After`.
    QuotaExceeded = "quota_exceeded", TOO_MANY_REQUESTS, true;
    /// The master holds its most uniqueness keys; they free up as their
    /// windows end.
    UniqueKeysFull = "unique_keys_full", TOO_MANY_REQUESTS, true;
    /// Over the connections one client address may hold.
    TooManyConnections = "too_many_connections", TOO_MANY_REQUESTS, true;
    /// The request's headers are over the size limit.
    HeadersTooLarge = "headers_too_large", REQUEST_HEADER_FIELDS_TOO_LARGE, false;
    /// No master reachable in time, or it stopped after a journal failure.
    MasterUnavailable = "master_unavailable", SERVICE_UNAVAILABLE, true;
    /// A submission may or may not have reached a master (retry it with the
    /// same idempotency key).
    OutcomeUnknown = "outcome_unknown", SERVICE_UNAVAILABLE, true;
    /// Too few voters hold the journal: refused, or not known durable.
    ReplicasUnavailable = "replicas_unavailable", SERVICE_UNAVAILABLE, true;
    /// An upload could not be stored on every back-end node.
    ReplicationFailed = "replication_failed", SERVICE_UNAVAILABLE, true;
    /// A blob write would leave less than the 1 GiB a node keeps free on
    /// its data disk for its journal (or the disk filled): nothing was
    /// stored, the blobs already there are intact.
    BlobStoreFull = "blob_store_full", INSUFFICIENT_STORAGE, true;
    /// The node takes its most blobs at once (uploads and copies pushed to
    /// it), or sends its most (downloads and copies fetched from it);
    /// retry after `Retry-After`.
    BlobsBusy = "blobs_busy", SERVICE_UNAVAILABLE, true;
    /// The S3-compatible blob store (`--blob-store`) is unreachable, refused
    /// the node's credentials or has no such bucket: nothing was kept.
    BlobStoreUnavailable = "blob_store_unavailable", SERVICE_UNAVAILABLE, true;
    /// The blob store's object for a blob does not hold the blob's bytes
    /// (changed or damaged in the store): it is not served; uploading the
    /// blob again repairs it.
    BlobStoreCorrupt = "blob_store_corrupt", BAD_GATEWAY, false;
    /// The host failed (a bug or an exhausted machine).
    Internal = "internal", INTERNAL_SERVER_ERROR, false;
    /// The master does not read this message format (nodes of incompatible
    /// versions).
    UnknownVersion = "unknown_version", INTERNAL_SERVER_ERROR, false;
}

/// A code that is not one of [`ErrorCode`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown error code {0:?}")]
pub struct UnknownCode(pub String);

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
