//! The master's messages: commands in, events and replies out, effects for
//! the host, queries and answers, and the versioned bytes they travel as.
//!
//! Every message crosses the Wasm boundary (and the journal, for events) as
//! `[FORMAT_VERSION] ++ postcard(value)`. A reader refuses a version it does
//! not know instead of misreading it; a format change bumps the byte and
//! keeps a decoder for the old one where bytes outlive the process that
//! wrote them, so old journals stay replayable.
//!
//! Formats: 1, the first; 2, `Submit` and `Submitted` carry the
//! submission's [`RequestId`], and `RequestsExpired` exists; 3, `Submit`
//! and `Submitted` carry the job's [`JobOptions`] (concurrency and rate
//! keys, uniqueness); 4, schedules and DAGs (commands, events, replies,
//! queries and answers added at the end of their enums); 5,
//! deployments (module names: `Deploy`, `Rollback`, `Undeploy`, their
//! events, reply, queries and answers, at the end of their enums) and
//! [`JobOptions::module`], a third field of the options wherever they
//! appear (`Submitted`, a DAG's jobs, `ScheduleCreated`); 6, egress
//! grants, secrets and call records (`Grant`, `Revoke`, `SetSecret`,
//! `DeleteSecret`, `Granted`, `SecretSet`, `SecretDeleted`,
//! `CallsRecorded`, at the end of their enums; `Finish` carries the
//! attempt's calls, an [`Assignment`] its grants and sealed secrets,
//! views show grants and calls; [`JobOptions::egress`] a fourth field); 7,
//! recorded calls and secrets jobs read (`RecordCall`,
//! `CallRecorded`, `SecretsShared`, `TapeMarked` at the end of their enums;
//! a `Checkpoint` carries its [`TapeMark`], an [`Assignment`] its
//! [`Replay`] and readable secrets, `Grant` and `Revoke` secrets;
//! [`HttpGrant::record`] a last field of every grant); 8, blobs
//! ([`JobOptions::input_blob`] a fifth field of the options, the blob a
//! job reads; [`Outcome::Wrote`], a success that wrote output blobs, at
//! the end of its enum; an [`Assignment`] carries the [`NamedBlob`]s the
//! attempt may read, views and [`Finished`] a job's blobs); 9, the
//! blobs the cluster keeps (`KeepBlob`, `DropBlob`, `BlobKept`,
//! `BlobDropped`, `BlobsCollected`, `Query::Blobs` and its answer, at the
//! end of their enums; see [`crate::blobs`]); 10, data locality
//! (`Poll` carries what the worker holds, `WorkerHolds` at the end of its
//! enum, [`Config::locality_wait_ms`] a last field of the configuration,
//! [`Stats`] three last fields; see [`crate::locality`]) and trace
//! contexts ([`JobOptions::trace`], a sixth field of the options, handed
//! to each attempt in its [`Assignment`]); 11, lease renewals
//! (`Renew` and `Renewed` at the end of their enums: a worker renews the
//! lease of an attempt while it prepares it or keeps its outputs; see
//! [`crate::attempts`]); 12, worker pools (`Poll` carries the
//! worker's [`WorkerPool`], `WorkerPool` at the end of its enum,
//! [`JobOptions::labels`] a seventh field of the options, views and
//! [`Stats`] say which jobs no known worker can run; see
//! [`crate::pools`]); 13, what attempts cost (`Finish` carries the
//! attempt's [`Usage`], a last field, and so do `Finished`, which decodes
//! from older bytes with none, and every [`Attempt`]); 14,
//! namespaces ([`JobOptions::namespace`], an eighth field of the options,
//! and [`TokenRecord::namespace`], a last field of a token; see
//! [`crate::namespaces`]); 15, quotas and fair shares per
//! namespace (`SetQuotas`, `SetWeight`, `QuotasSet` and `WeightSet` at
//! the end of their enums, a [`NamespaceView`]'s `quotas`,
//! `result_bytes` and `weight`; see [`crate::quotas`], [`crate::shares`]);
//! 16, schedules acted on within a namespace (`ScheduleIn`) and a
//! listing of the blobs the cluster keeps (`Query::KeptBlobs` and its
//! answer), at the end of their enums; 17 (now), purging a blob that
//! finished jobs name (`PurgeBlob`, `BlobPurged`, at the end of their
//! enums; see [`crate::blobs`]). Events are the
//! only messages kept on disk, so [`decode_event`] still reads formats 1
//! to 16 (whose `Submitted` lacks what came later, whose options
//! before 5 have two fields: they decode with `module: None`, and whose
//! `Configured` before 10 has no `locality_wait_ms`: it decodes as 0); every other
//! message of an older format is refused as an unknown version (nodes of
//! one cluster run one format).
//!
//! # Blobs
//!
//! Blobs are large data kept by the nodes under their sha256 digest; the
//! master never holds their bytes. What it journals and keeps is a
//! [`Blob`] (digest and size) for a job's input blob and a [`NamedBlob`]
//! (name, digest, size) for each output blob a successful attempt wrote
//! (see [`crate::blobs`]): a few dozen bytes each, whatever the blobs'
//! sizes. It also keeps the registry of the blobs the cluster keeps (an
//! upload's, once durable, and every one a held job or schedule names),
//! which decides when a blob nothing names is collected.

pub use crate::egress::{HttpCall, HttpGrant};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Version byte in front of every encoded message and event.
pub const FORMAT_VERSION: u8 = 17;

/// The sixteenth format: the current types without purging a named blob
/// (`PurgeBlob`, `BlobPurged`, at the end of their enums); its events
/// still decode ([`decode_event`]).
pub const FORMAT_VERSION_16: u8 = 16;

/// The fifteenth format: the current types without schedules acted on
/// within a namespace and the listing of kept blobs (`ScheduleIn`,
/// `Query::KeptBlobs` and its answer, at the end of their enums, so its
/// events decode as they are; [`decode_event`]).
pub const FORMAT_VERSION_15: u8 = 15;

/// The fourteenth format: the current types without quotas and weights
/// (`SetQuotas`, `SetWeight`, `QuotasSet`, `WeightSet`, at the end of
/// their enums, and what a [`NamespaceView`] says of them); its events
/// still decode
/// ([`decode_event`]).
pub const FORMAT_VERSION_14: u8 = 14;

/// The thirteenth format: the current types without namespaces
/// ([`JobOptions::namespace`], the options' last field, and
/// [`TokenRecord::namespace`], a token's); its events still decode
/// ([`decode_event`]), in the default namespace.
pub const FORMAT_VERSION_13: u8 = 13;

/// The twelfth format: the current types without what attempts cost
/// (`Finish`'s and `Finished`'s last field, `usage`); its events still
/// decode ([`decode_event`]), their attempts with no [`Usage`].
pub const FORMAT_VERSION_12: u8 = 12;

/// The eleventh format: the current types without worker pools (`Poll`'s
/// `pool`, `WorkerPool` at the end of its enum, [`JobOptions::labels`],
/// the options' last field); its events still decode ([`decode_event`]).
pub const FORMAT_VERSION_11: u8 = 11;

/// The tenth format: the current types without lease renewals (`Renew`
/// and `Renewed` at the end of their enums, so its events decode as they
/// are; [`decode_event`]).
pub const FORMAT_VERSION_10: u8 = 10;

/// The ninth format: the current types without data locality (`Poll`'s
/// `holds`, `WorkerHolds` at the end of its enum, [`Config`]'s last field
/// `locality_wait_ms`); its events still decode ([`decode_event`]).
pub const FORMAT_VERSION_9: u8 = 9;

/// The eighth format: the current types without the blob registry
/// (`KeepBlob`, `DropBlob`, their events, `Query::Blobs` and its answer,
/// at the end of their enums, so its events decode as they are;
/// [`decode_event`]).
pub const FORMAT_VERSION_8: u8 = 8;

/// The seventh format: the current types without blobs
/// ([`JobOptions::input_blob`], a last field of the options, and
/// [`Outcome::Wrote`], at the end of its enum); its events still decode
/// ([`decode_event`]).
pub const FORMAT_VERSION_7: u8 = 7;

/// The sixth format: the current types without recorded calls
/// (`RecordCall`, `CallRecorded`, `TapeMarked` at the end of their enums)
/// and without [`HttpGrant::record`], a last field of every grant; its
/// events still decode ([`decode_event`]).
pub const FORMAT_VERSION_6: u8 = 6;

/// The fifth format: the current types without the egress commands and
/// events (added at the end of their enums, so its events decode as they
/// are; [`decode_event`]).
pub const FORMAT_VERSION_5: u8 = 5;

/// The fourth format: the current types without `JobOptions::module` and
/// the deployment commands, events, replies, queries and answers (added at
/// the end of their enums); its events still decode ([`decode_event`]).
pub const FORMAT_VERSION_4: u8 = 4;

/// The third format: the current types without the schedule commands and
/// events (added at the end of their enums, so its bytes decode as they
/// are; [`decode_event`]).
pub const FORMAT_VERSION_3: u8 = 3;

/// The first format, still read for journaled events ([`decode_event`]).
pub const FORMAT_VERSION_1: u8 = 1;

/// The second format, still read for journaled events ([`decode_event`]).
pub const FORMAT_VERSION_2: u8 = 2;

/// A job's id: dense, assigned by the master from 1.
pub type JobId = u64;

/// A sha256: a module's, or a blob's.
pub type Digest = [u8; 32];

/// A blob's digest's first 8 bytes: how a worker says which blobs it
/// holds ([`Command::Poll`]'s `holds`; see [`crate::locality`]).
pub type BlobPrefix = [u8; 8];

/// Milliseconds since the Unix epoch, as passed in by the host.
pub type Millis = u64;

/// Encodes `value` as versioned postcard.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(FORMAT_VERSION);
    // Serializing plain data into a Vec cannot fail.
    postcard::to_extend(value, out).expect("postcard encoding into a Vec")
}

/// Decodes versioned postcard bytes written by [`encode`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Rejection> {
    match bytes.split_first() {
        Some((&FORMAT_VERSION, body)) => legacy::options(legacy::FIELDS_NOW, || {
            postcard::from_bytes(body)
        })
        .map_err(|error| Rejection::new(codes::UNDECODABLE, format!("cannot decode: {error}"))),
        Some((version, _)) => Err(Rejection::new(
            codes::UNKNOWN_VERSION,
            format!("format version {version}, this master reads {FORMAT_VERSION}"),
        )),
        None => Err(Rejection::new(codes::UNDECODABLE, "empty message")),
    }
}

/// Decodes a journaled [`Event`] of this format or of an older one.
///
/// Format 1's `Submitted` had no request id (it decodes with `request:
/// None`), formats 1 and 2 had no options (they decode with none), and
/// formats 3 and 4 had options without `module` (they decode with `module:
/// None`, in `Submitted` and in `ScheduleCreated`'s spec alike), format 5
/// without `egress`, and formats before 8 without `input_blob` (`None`);
/// grants before format 7 had no `record` (they decode with `record:
/// None`, the default). Every other event of an older format has the same
/// bytes in this one. What was added since a format (an event kind, or
/// [`Outcome::Wrote`]) is refused in its bytes, which never held it. A
/// [`Config`] of a format before 10 has no `locality_wait_ms` (it decodes
/// as 0: no waiting for locality, as then), and a `Finished` of a format
/// before 13 no `usage` (it decodes as `None`: not measured).
pub fn decode_event(bytes: &[u8]) -> Result<Event, Rejection> {
    let (format, body) = match bytes.split_first() {
        Some((&format, body)) if (FORMAT_VERSION_1..FORMAT_VERSION).contains(&format) => {
            (format, body)
        }
        _ => return decode(bytes),
    };
    legacy::config(format >= FORMAT_VERSION_10, || decode_older(format, body))
}

/// [`decode_event`] of the bytes of an older `format`.
fn decode_older(format: u8, body: &[u8]) -> Result<Event, Rejection> {
    let event = match format {
        FORMAT_VERSION_1 => older::event(body, older::FORMAT_1)?,
        FORMAT_VERSION_2 => older::event(body, older::FORMAT_2)?,
        _ => {
            // How many fields the format's options have (see `legacy`).
            let fields = match format {
                FORMAT_VERSION_3 | FORMAT_VERSION_4 => 2,
                FORMAT_VERSION_5 => 3,
                FORMAT_VERSION_6 => 4,
                FORMAT_VERSION_7 => 5,
                FORMAT_VERSION_8 | FORMAT_VERSION_9 => 6,
                FORMAT_VERSION_10 | FORMAT_VERSION_11 => 7,
                FORMAT_VERSION_12 => 8,
                FORMAT_VERSION_13 => 9,
                _ => legacy::FIELDS_NOW,
            };
            legacy::options(fields, || postcard::from_bytes(body)).map_err(|error| {
                Rejection::new(codes::UNDECODABLE, format!("cannot decode: {error}"))
            })?
        }
    };
    of_format(event, format)
}

/// `event`, unless it holds what came after `format`: a kind added since
/// (deployments in 5, egress in 6, recorded calls and shared secrets in
/// 7, the blob registry in 9, what workers hold in 10, lease renewals in
/// 11, worker pools in 12, quotas and weights in 15, blob purges in 17)
/// or a success with output blobs (8), which bytes of that format never
/// held.
fn of_format(event: Event, format: u8) -> Result<Event, Rejection> {
    let (added, what) = match &event.kind {
        EventKind::Deployed { .. } | EventKind::Undeployed { .. } => {
            (FORMAT_VERSION_5, "a deployment event")
        }
        EventKind::Granted { .. }
        | EventKind::SecretSet { .. }
        | EventKind::SecretDeleted { .. }
        | EventKind::CallsRecorded { .. } => (FORMAT_VERSION_6, "an egress event"),
        EventKind::CallRecorded { .. }
        | EventKind::TapeMarked { .. }
        | EventKind::SecretsShared { .. } => {
            (FORMAT_VERSION_7, "a recorded-call or shared-secret event")
        }
        EventKind::Finished {
            outcome: Outcome::Wrote(_),
            ..
        } => (FORMAT_VERSION_8, "a success with output blobs"),
        EventKind::BlobKept { .. }
        | EventKind::BlobDropped { .. }
        | EventKind::BlobsCollected { .. } => (FORMAT_VERSION_9, "a blob registry event"),
        EventKind::WorkerHolds { .. } => (FORMAT_VERSION_10, "a locality event"),
        EventKind::Renewed { .. } => (FORMAT_VERSION_11, "a lease renewal"),
        EventKind::WorkerPool { .. } => (FORMAT_VERSION_12, "a worker pool event"),
        EventKind::QuotasSet { .. } | EventKind::WeightSet { .. } => {
            (FORMAT_VERSION_15, "a quota or weight event")
        }
        // The format after 16: a constant, not `FORMAT_VERSION`, which
        // moves on with the next format.
        EventKind::BlobPurged { .. } => (FORMAT_VERSION_16 + 1, "a blob purge"),
        _ => return Ok(event),
    };
    if format >= added {
        return Ok(event);
    }
    Err(Rejection::new(
        codes::UNDECODABLE,
        format!("{what} in the bytes of format {format}, which came in format {added}"),
    ))
}

mod older {
    use super::*;

    /// What an older format's events looked like.
    pub struct Format {
        /// Whether `Submitted` carried a request id.
        pub request: bool,
        /// The first kind the format did not have.
        pub first_new_kind: u32,
    }

    /// Format 1: no request ids, and no kind from `RequestsExpired` on.
    pub const FORMAT_1: Format = Format {
        request: false,
        first_new_kind: 13,
    };
    /// Format 2: request ids, and every kind this format has.
    pub const FORMAT_2: Format = Format {
        request: true,
        first_new_kind: u32::MAX,
    };

    /// `EventKind::Submitted`'s index, the same in every format.
    const SUBMITTED: u32 = 1;

    pub fn event(body: &[u8], format: Format) -> Result<Event, Rejection> {
        let undecodable = |error: postcard::Error| {
            Rejection::new(codes::UNDECODABLE, format!("cannot decode: {error}"))
        };
        let (at, rest): (Millis, _) = postcard::take_from_bytes(body).map_err(undecodable)?;
        let (kind, fields): (u32, _) = postcard::take_from_bytes(rest).map_err(undecodable)?;
        if kind >= format.first_new_kind {
            return Err(Rejection::new(
                codes::UNDECODABLE,
                format!("event kind {kind} did not exist in this event's format"),
            ));
        }
        if kind != SUBMITTED {
            return legacy::options(2, || postcard::from_bytes(body)).map_err(undecodable);
        }
        let (id, spec, request) = if format.request {
            postcard::from_bytes::<(JobId, JobSpec, Option<RequestId>)>(fields)
        } else {
            postcard::from_bytes::<(JobId, JobSpec)>(fields).map(|(id, spec)| (id, spec, None))
        }
        .map_err(undecodable)?;
        Ok(Event {
            at,
            kind: EventKind::Submitted {
                id,
                spec,
                request,
                options: JobOptions::default(),
            },
        })
    }
}

/// Names one submission where it entered the cluster: the node that
/// received the client's request draws it once and sends it with every
/// forward and retry of that request, so a master that receives the
/// request twice (a forward retried after a timeout, or sent again to the
/// next master) creates one job and answers both with it.
///
/// `origin` is drawn at random when the node process starts; `seq` counts
/// that process's submissions. Ids are never reused by a process, and two
/// processes share an origin with probability 2^-64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RequestId {
    /// Random per node process.
    pub origin: u64,
    /// The process's count of submissions.
    pub seq: u64,
}

impl RequestId {
    /// The smallest id (a bound for ranges).
    pub const MIN: RequestId = RequestId { origin: 0, seq: 0 };
}

/// Why the master refused a command or query: a stable code.
///
/// On the wire (postcard, and the Wasm interface's `code` string) a code is
/// its string ([`Code::as_str`]), so the bytes are what they were when codes
/// were plain strings. A code this build does not know, from a newer master
/// or made by the host (an upgrade's checks), is kept whole as
/// [`Code::Other`]: it is passed on, never lost or misread.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Code {
    /// The job queue is at its bound.
    QueueFull,
    /// No job has this id (and none ever had).
    JobNotFound,
    /// The job existed but its record was removed after the retention time.
    JobExpired,
    /// The job is already in a terminal state.
    JobFinished,
    /// The job has not finished, so there is no result yet.
    JobNotFinished,
    /// The idempotency key belongs to a job with a different module or input
    /// (inline, or its input blob).
    IdempotencyConflict,
    /// A job spec or configuration field is out of range.
    InvalidJob,
    /// Bytes that are not a message of this format.
    Undecodable,
    /// A message or snapshot of a format version this master does not read.
    UnknownVersion,
    /// A token with this id already exists.
    TokenExists,
    /// No token has this id.
    TokenNotFound,
    /// A token's id, name or scopes are out of range.
    InvalidToken,
    /// A job's input is over the input limit.
    InputTooLarge,
    /// The job finished without a result.
    JobNotSucceeded,
    /// A checkpoint over the checkpoint limit.
    CheckpointTooLarge,
    /// A job filter or bulk action out of range.
    InvalidFilter,
    /// The master holds as many uniqueness keys as it may; they free up as
    /// their windows end.
    UniqueKeysFull,
    /// A schedule's name, timing, template or backfill range is invalid.
    InvalidSchedule,
    /// A schedule with this name exists.
    ScheduleExists,
    /// No schedule has this name.
    ScheduleNotFound,
    /// A DAG with a cycle, an unknown or failed parent, or over a bound.
    InvalidDag,
    /// No DAG has this id (or all its jobs were purged).
    DagNotFound,
    /// A module name that is not 1 to
    /// [`MODULE_NAME_BYTES_MAX`](crate::limits::MODULE_NAME_BYTES_MAX)
    /// bytes of `a-z 0-9 . _ -` starting with a letter or a digit.
    InvalidModuleName,
    /// No deployment has this name.
    ModuleNameNotFound,
    /// The deployment does not keep this version (never made, or
    /// forgotten beyond [`MODULE_VERSIONS_KEPT`](crate::limits::MODULE_VERSIONS_KEPT)).
    ModuleVersionNotFound,
    /// A rollback of a deployment with no version before the current one.
    NothingToRollBack,
    /// A schedule names the deployment, so it may not be removed.
    ModuleNameInUse,
    /// The master holds as many deployment names as it may
    /// ([`MODULE_NAMES_MAX`](crate::limits::MODULE_NAMES_MAX)).
    ModuleNamesFull,
    /// A grant that is no `scheme://host[:port][/path]` pattern (see
    /// [`crate::egress`]), or methods that are no HTTP methods.
    InvalidGrant,
    /// A deployment name holds as many grants as it may
    /// ([`GRANTS_PER_NAME_MAX`](crate::limits::GRANTS_PER_NAME_MAX)).
    TooManyGrants,
    /// No secret has this name.
    SecretNotFound,
    /// A grant's header names the secret, so it may not be deleted.
    SecretInUse,
    /// A secret name that is not 1 to 64 of `A-Z 0-9 _`, or a sealed value
    /// over its bound.
    InvalidSecret,
    /// The master holds as many secrets as it may
    /// ([`SECRETS_MAX`](crate::limits::SECRETS_MAX)).
    SecretsFull,
    /// A recorded call over its bounds, or one the job's record of calls
    /// has no room for (see [`crate::tapes`]).
    RecordTooLarge,
    /// The cluster keeps no blob with this digest (never uploaded, or
    /// collected: see [`crate::blobs`]).
    BlobNotFound,
    /// A held job or schedule names the blob, so it may not be dropped.
    BlobInUse,
    /// The cluster keeps as many blobs as it may
    /// ([`BLOBS_KEPT_MAX`](crate::limits::BLOBS_KEPT_MAX)).
    BlobsFull,
    /// A namespace name that is not 1 to 63 of `a-z 0-9 -` starting with
    /// a letter or digit, or a cluster-wide query asked within a namespace
    /// (see [`crate::namespaces`]).
    InvalidNamespace,
    /// A job in a namespace new to the master, which keeps as many as it
    /// may ([`NAMESPACES_MAX`](crate::limits::NAMESPACES_MAX)).
    NamespacesFull,
    /// A quota that is 0 or past its bound (see [`crate::quotas`]).
    InvalidQuota,
    /// The namespace is at one of its quotas: too many jobs waiting, too
    /// many submissions in the last second, or too many result bytes kept
    /// (see [`crate::quotas`]); retry later.
    QuotaExceeded,
    /// A namespace's weight that is not 1 to
    /// [`WEIGHT_MAX`](crate::limits::WEIGHT_MAX) (see [`crate::shares`]).
    InvalidWeight,
    /// A code this build does not know.
    Other(String),
}

impl Code {
    /// Every code this build makes, in the order of the table.
    pub const ALL: &[Code] = &[
        Code::QueueFull,
        Code::JobNotFound,
        Code::JobExpired,
        Code::JobFinished,
        Code::JobNotFinished,
        Code::IdempotencyConflict,
        Code::InvalidJob,
        Code::Undecodable,
        Code::UnknownVersion,
        Code::TokenExists,
        Code::TokenNotFound,
        Code::InvalidToken,
        Code::InputTooLarge,
        Code::JobNotSucceeded,
        Code::CheckpointTooLarge,
        Code::InvalidFilter,
        Code::UniqueKeysFull,
        Code::InvalidSchedule,
        Code::ScheduleExists,
        Code::ScheduleNotFound,
        Code::InvalidDag,
        Code::DagNotFound,
        Code::InvalidModuleName,
        Code::ModuleNameNotFound,
        Code::ModuleVersionNotFound,
        Code::NothingToRollBack,
        Code::ModuleNameInUse,
        Code::ModuleNamesFull,
        Code::InvalidGrant,
        Code::TooManyGrants,
        Code::SecretNotFound,
        Code::SecretInUse,
        Code::InvalidSecret,
        Code::SecretsFull,
        Code::RecordTooLarge,
        Code::BlobNotFound,
        Code::BlobInUse,
        Code::BlobsFull,
        Code::InvalidNamespace,
        Code::NamespacesFull,
        Code::InvalidQuota,
        Code::QuotaExceeded,
        Code::InvalidWeight,
    ];

    /// The code on the wire (stable).
    pub fn as_str(&self) -> &str {
        match self {
            Code::QueueFull => "queue_full",
            Code::JobNotFound => "job_not_found",
            Code::JobExpired => "job_expired",
            Code::JobFinished => "job_finished",
            Code::JobNotFinished => "job_not_finished",
            Code::IdempotencyConflict => "idempotency_conflict",
            Code::InvalidJob => "invalid_job",
            Code::Undecodable => "undecodable",
            Code::UnknownVersion => "unknown_version",
            Code::TokenExists => "token_exists",
            Code::TokenNotFound => "token_not_found",
            Code::InvalidToken => "invalid_token",
            Code::InputTooLarge => "input_too_large",
            Code::JobNotSucceeded => "job_not_succeeded",
            Code::CheckpointTooLarge => "checkpoint_too_large",
            Code::InvalidFilter => "invalid_filter",
            Code::UniqueKeysFull => "unique_keys_full",
            Code::InvalidSchedule => "invalid_schedule",
            Code::ScheduleExists => "schedule_exists",
            Code::ScheduleNotFound => "schedule_not_found",
            Code::InvalidDag => "invalid_dag",
            Code::DagNotFound => "dag_not_found",
            Code::InvalidModuleName => "invalid_module_name",
            Code::ModuleNameNotFound => "module_name_not_found",
            Code::ModuleVersionNotFound => "module_version_not_found",
            Code::NothingToRollBack => "nothing_to_roll_back",
            Code::ModuleNameInUse => "module_name_in_use",
            Code::ModuleNamesFull => "module_names_full",
            Code::InvalidGrant => "invalid_grant",
            Code::TooManyGrants => "too_many_grants",
            Code::SecretNotFound => "secret_not_found",
            Code::SecretInUse => "secret_in_use",
            Code::InvalidSecret => "invalid_secret",
            Code::SecretsFull => "secrets_full",
            Code::RecordTooLarge => "record_too_large",
            Code::BlobNotFound => "blob_not_found",
            Code::BlobInUse => "blob_in_use",
            Code::BlobsFull => "blobs_full",
            Code::InvalidNamespace => "invalid_namespace",
            Code::NamespacesFull => "namespaces_full",
            Code::InvalidQuota => "invalid_quota",
            Code::QuotaExceeded => "quota_exceeded",
            Code::InvalidWeight => "invalid_weight",
            Code::Other(code) => code,
        }
    }
}

impl From<&str> for Code {
    fn from(code: &str) -> Self {
        Code::ALL
            .iter()
            .find(|known| known.as_str() == code)
            .cloned()
            .unwrap_or_else(|| Code::Other(code.to_string()))
    }
}

impl From<String> for Code {
    fn from(code: String) -> Self {
        match Code::from(code.as_str()) {
            Code::Other(_) => Code::Other(code),
            known => known,
        }
    }
}

impl core::fmt::Display for Code {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Ok(Code::from(code.as_ref()))
    }
}

/// The codes as constants, by their wire names.
pub mod codes {
    use super::Code;

    /// [`Code::QueueFull`].
    pub const QUEUE_FULL: Code = Code::QueueFull;
    /// [`Code::JobNotFound`].
    pub const JOB_NOT_FOUND: Code = Code::JobNotFound;
    /// [`Code::JobExpired`].
    pub const JOB_EXPIRED: Code = Code::JobExpired;
    /// [`Code::JobFinished`].
    pub const JOB_FINISHED: Code = Code::JobFinished;
    /// [`Code::JobNotFinished`].
    pub const JOB_NOT_FINISHED: Code = Code::JobNotFinished;
    /// [`Code::IdempotencyConflict`].
    pub const IDEMPOTENCY_CONFLICT: Code = Code::IdempotencyConflict;
    /// [`Code::InvalidJob`].
    pub const INVALID_JOB: Code = Code::InvalidJob;
    /// [`Code::Undecodable`].
    pub const UNDECODABLE: Code = Code::Undecodable;
    /// [`Code::UnknownVersion`].
    pub const UNKNOWN_VERSION: Code = Code::UnknownVersion;
    /// [`Code::TokenExists`].
    pub const TOKEN_EXISTS: Code = Code::TokenExists;
    /// [`Code::TokenNotFound`].
    pub const TOKEN_NOT_FOUND: Code = Code::TokenNotFound;
    /// [`Code::InvalidToken`].
    pub const INVALID_TOKEN: Code = Code::InvalidToken;
    /// [`Code::InputTooLarge`].
    pub const INPUT_TOO_LARGE: Code = Code::InputTooLarge;
    /// [`Code::JobNotSucceeded`].
    pub const JOB_NOT_SUCCEEDED: Code = Code::JobNotSucceeded;
    /// [`Code::CheckpointTooLarge`].
    pub const CHECKPOINT_TOO_LARGE: Code = Code::CheckpointTooLarge;
    /// [`Code::InvalidFilter`].
    pub const INVALID_FILTER: Code = Code::InvalidFilter;
    /// [`Code::UniqueKeysFull`].
    pub const UNIQUE_KEYS_FULL: Code = Code::UniqueKeysFull;
    /// [`Code::InvalidSchedule`].
    pub const INVALID_SCHEDULE: Code = Code::InvalidSchedule;
    /// [`Code::ScheduleExists`].
    pub const SCHEDULE_EXISTS: Code = Code::ScheduleExists;
    /// [`Code::ScheduleNotFound`].
    pub const SCHEDULE_NOT_FOUND: Code = Code::ScheduleNotFound;
    /// [`Code::InvalidDag`].
    pub const INVALID_DAG: Code = Code::InvalidDag;
    /// [`Code::DagNotFound`].
    pub const DAG_NOT_FOUND: Code = Code::DagNotFound;
    /// [`Code::InvalidModuleName`].
    pub const INVALID_MODULE_NAME: Code = Code::InvalidModuleName;
    /// [`Code::ModuleNameNotFound`].
    pub const MODULE_NAME_NOT_FOUND: Code = Code::ModuleNameNotFound;
    /// [`Code::ModuleVersionNotFound`].
    pub const MODULE_VERSION_NOT_FOUND: Code = Code::ModuleVersionNotFound;
    /// [`Code::NothingToRollBack`].
    pub const NOTHING_TO_ROLL_BACK: Code = Code::NothingToRollBack;
    /// [`Code::ModuleNameInUse`].
    pub const MODULE_NAME_IN_USE: Code = Code::ModuleNameInUse;
    /// [`Code::ModuleNamesFull`].
    pub const MODULE_NAMES_FULL: Code = Code::ModuleNamesFull;
    /// [`Code::InvalidGrant`].
    pub const INVALID_GRANT: Code = Code::InvalidGrant;
    /// [`Code::TooManyGrants`].
    pub const TOO_MANY_GRANTS: Code = Code::TooManyGrants;
    /// [`Code::SecretNotFound`].
    pub const SECRET_NOT_FOUND: Code = Code::SecretNotFound;
    /// [`Code::SecretInUse`].
    pub const SECRET_IN_USE: Code = Code::SecretInUse;
    /// [`Code::InvalidSecret`].
    pub const INVALID_SECRET: Code = Code::InvalidSecret;
    /// [`Code::SecretsFull`].
    pub const SECRETS_FULL: Code = Code::SecretsFull;
    /// [`Code::RecordTooLarge`].
    pub const RECORD_TOO_LARGE: Code = Code::RecordTooLarge;
    /// [`Code::BlobNotFound`].
    pub const BLOB_NOT_FOUND: Code = Code::BlobNotFound;
    /// [`Code::BlobInUse`].
    pub const BLOB_IN_USE: Code = Code::BlobInUse;
    /// [`Code::BlobsFull`].
    pub const BLOBS_FULL: Code = Code::BlobsFull;
    /// [`Code::InvalidNamespace`].
    pub const INVALID_NAMESPACE: Code = Code::InvalidNamespace;
    /// [`Code::NamespacesFull`].
    pub const NAMESPACES_FULL: Code = Code::NamespacesFull;
    /// [`Code::InvalidQuota`].
    pub const INVALID_QUOTA: Code = Code::InvalidQuota;
    /// [`Code::QuotaExceeded`].
    pub const QUOTA_EXCEEDED: Code = Code::QuotaExceeded;
    /// [`Code::InvalidWeight`].
    pub const INVALID_WEIGHT: Code = Code::InvalidWeight;

    /// Every code a rejection may carry (the host maps each onto its API
    /// error codes, and its tests check that none is missing).
    pub const ALL: &[Code] = Code::ALL;
}

/// Failure codes that mean "try again" (up to `max_attempts`): the attempt
/// failed for a reason that may not recur elsewhere or later. Any other code
/// (for example the job's own `job_error`) fails the job at once.
pub const RETRYABLE_CODES: &[&str] = &[
    "trap",
    "timeout",
    "internal",
    "lease_expired",
    "worker_lost",
    "module_unavailable",
    "blob_unavailable",
    "blob_store_full",
    "replication_failed",
];

/// Why the master refused a command or query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    /// Stable machine-readable code.
    pub code: Code,
    /// Explanation for people.
    pub message: String,
}

impl Rejection {
    /// A rejection with `code` and `message`.
    pub fn new(code: impl Into<Code>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl std::error::Error for Rejection {}

impl core::fmt::Display for Rejection {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// Tunables of the master. They are part of its state (set by the
/// [`Command::Configure`] event), so replay uses the values that were in
/// force when each event happened.
///
/// Its `Deserialize` is written by hand (in `legacy`): bytes of formats
/// before 10 and snapshots before version 11 end before
/// `locality_wait_ms`, and decode with it 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Config {
    /// Most jobs waiting to run (queued or backing off) at once.
    pub queue_max: u64,
    /// Largest job input accepted.
    pub input_bytes_max: u64,
    /// Largest job result kept.
    pub result_bytes_max: u64,
    /// Largest checkpoint kept.
    pub checkpoint_bytes_max: u64,
    /// How long a finished job stays queryable.
    pub retention_ms: u64,
    /// Most finished jobs kept; the oldest are removed first beyond it.
    pub finished_max: u64,
    /// Most result bytes kept over all finished jobs (output blobs count
    /// for their names and digests, see [`crate::blobs`]).
    pub results_bytes_total_max: u64,
    /// Delay before the first retry; doubles with each further attempt.
    pub backoff_base_ms: u64,
    /// Longest delay between attempts.
    pub backoff_max_ms: u64,
    /// A running attempt's lease is its timeout plus this.
    pub lease_grace_ms: u64,
    /// A worker not heard from for this long is declared lost.
    pub worker_ttl_ms: u64,
    /// Largest `timeout_ms` a job may ask for.
    pub timeout_ms_max: u64,
    /// Largest `max_attempts` a job may ask for.
    pub attempts_max: u32,
    /// Longest a ready job whose input blob another free worker holds is
    /// passed over by the workers that do not hold it (0: never; see
    /// [`crate::locality`]).
    pub locality_wait_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            queue_max: 1_000_000,
            input_bytes_max: 4 << 20,
            result_bytes_max: 16 << 20,
            checkpoint_bytes_max: 16 << 20,
            retention_ms: 60 * 60 * 1000,
            finished_max: 1_000_000,
            results_bytes_total_max: 1 << 30,
            backoff_base_ms: 500,
            backoff_max_ms: 60_000,
            lease_grace_ms: 5_000,
            worker_ttl_ms: 10_000,
            timeout_ms_max: 3_600_000,
            attempts_max: 100,
            locality_wait_ms: 1_000,
        }
    }
}

/// What a client asks to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// sha256 of the job module (stored by the host before submission).
    pub module: Digest,
    /// Bytes passed to the job's `run`.
    pub input: Vec<u8>,
    /// Wall-clock limit of one attempt.
    pub timeout_ms: u64,
    /// Memory limit of one attempt (`None`: the worker's default).
    pub memory_bytes: Option<u64>,
    /// Attempts before the job is dead-lettered (at least 1).
    pub max_attempts: u32,
    /// Higher runs first; FIFO within a priority.
    pub priority: i32,
    /// Submissions with the same key return the same job.
    pub idempotency_key: Option<String>,
}

/// What a submission asks of the master beyond running the job: limits
/// shared by every job with the same key, uniqueness, and the module by
/// its deployment name. None by default.
///
/// Its `Serialize` and `Deserialize` are written by hand (in `legacy`;
/// tests write older bytes with the first): bytes of formats
/// before 5 (events) and of snapshots before version 6 hold the first two
/// fields only, and decode with `module: None`; those of format 5 and
/// snapshot version 6 the first three, and decode with `egress: None`;
/// those of formats 6 and 7 and snapshot versions 7 and 8 the first four,
/// and decode with `input_blob: None`; those of formats 8 and 9 and
/// snapshot versions 9 and 10 the first five, and decode with `trace:
/// None`; those of formats 10 and 11 and snapshot version 11 the first
/// six, and decode with no `labels`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobOptions {
    /// Limits on the jobs that share a key, enforced cluster-wide.
    pub limit: Option<KeyLimit>,
    /// At most one job per key within a window.
    pub unique: Option<Unique>,
    /// The module named by its deployment name; the master resolves it to
    /// the current digest, which replaces `spec.module` (see
    /// [`crate::deployments`]).
    pub module: Option<String>,
    /// What of its deployment name's grants the job may use: each of these
    /// must lie within one of the name's grants ([`HttpGrant::covers`]);
    /// `None`: all of them (see the `grants` module).
    pub egress: Option<Vec<HttpGrant>>,
    /// The blob the job reads as its input `input` (stored by the host
    /// before submission, which checks that it exists; the master keeps
    /// its digest and size only, see [`crate::blobs`]).
    pub input_blob: Option<Blob>,
    /// The W3C trace context the job's spans join (see [`TraceContext`]);
    /// the host sets it, the master keeps it and hands it to each attempt.
    /// Boxed: commands and events stay small when no job is traced.
    pub trace: Option<Box<TraceContext>>,
    /// The labels a worker must have to run the job, each `(key, value)`,
    /// sorted by key, keys unique (empty: any worker; see
    /// [`crate::pools`]).
    pub labels: Vec<(String, String)>,
    /// The namespace the job belongs to (`None`: the default one, which is
    /// never written by its name; see [`crate::namespaces`]).
    pub namespace: Option<String>,
}

/// What a worker offers jobs, from its node's flags: its labels and the
/// most memory it gives one attempt. The master starts a job only on a
/// worker whose pool has every label the job asks for and room for the
/// memory it asks (see [`crate::pools`]). The default, no labels and no
/// memory said, is what the master assumes of a worker it was never told
/// of (journals before format 12).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerPool {
    /// `(key, value)`, sorted by key, keys unique.
    pub labels: Vec<(String, String)>,
    /// The most memory one attempt may have on the worker (`None`: not
    /// said; any job's request fits).
    pub memory_max: Option<u64>,
}

/// A job's W3C trace context (`traceparent`, without `tracestate`): the
/// span its submission made (or the one its client sent), kept with the
/// job so that every attempt, on whichever worker and after whichever
/// fail-over, reports into the trace of its submission. 26 bytes of
/// fixed size; the master never reads it but to refuse zero ids
/// (`validation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    /// The trace's id (not all zero).
    pub trace_id: [u8; 16],
    /// The parent span's id (not all zero).
    pub span_id: [u8; 8],
    /// The W3C trace flags (bit 0: sampled).
    pub flags: u8,
    /// The job's spans start a trace of their own that links to this
    /// context instead of joining it (a schedule's firings link to the
    /// request that created the schedule).
    pub link: bool,
}

/// A blob as the master knows it: its digest and size, never its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blob {
    /// Its sha256.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
}

/// A blob with its name for a job: an output it wrote (named by the job:
/// [`valid_output_name`](crate::blobs::valid_output_name)), or, in an
/// [`Assignment`], one it may read (`input`, or `PARENT/OUTPUT`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedBlob {
    /// Its name.
    pub name: String,
    /// Its sha256.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
}

/// The hand-written `Deserialize` of [`JobOptions`]: `limit`, `unique`,
/// then `module`, `egress`, `input_blob`, `trace` and `labels` as far as
/// the bytes being decoded have them (events of formats before 5 and
/// snapshots before version 6: none; format 5 and version 6: `module`
/// only; formats 6 and 7 and versions 7 and 8: not `input_blob`; formats 8
/// and 9 and versions 9 and 10: not `trace`; formats 10 and 11 and version
/// 11: not `labels`), which [`legacy::options`]
/// says for the decoding it wraps. Postcard lets a struct's visitor stop
/// before its last field, so the older bytes decode as they are, with the
/// later fields `None`.
pub(crate) mod legacy {
    use super::{Blob, HttpGrant, JobOptions, KeyLimit, TraceContext, Unique};
    use serde::Deserialize;
    use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
    use std::cell::Cell;

    /// What the bytes of this format hold: [`JobOptions`] with their seven
    /// fields, [`HttpGrant`]s with their last, `record`, and attempts
    /// with their [`Usage`](super::Usage) (9).
    pub(crate) const FIELDS_NOW: u8 = 10;

    thread_local! {
        /// How many fields the [`JobOptions`] being decoded have: 2 to 4;
        /// 5: four, and grants have `record`; 6: five (`input_blob`), and
        /// grants have `record`; 7: six (`trace`), and grants have `record`;
        /// 8: seven (`labels`), and grants have `record`; 9: the same, and
        /// attempts (`Finished`, [`Attempt`](super::Attempt)) have `usage`;
        /// 10: eight (`namespace`), and tokens have `namespace`.
        static FIELDS_KEPT: Cell<u8> = const { Cell::new(FIELDS_NOW) };
    }

    /// Whether the [`HttpGrant`]s being decoded have their `record` field
    /// (bytes of format 7 and snapshots of version 8 on).
    pub(crate) fn grants_record() -> bool {
        FIELDS_KEPT.with(Cell::get) >= 5
    }

    thread_local! {
        /// Whether the [`Config`](super::Config) being decoded has
        /// `locality_wait_ms` (bytes of format 10 and snapshots of
        /// version 11 on).
        static CONFIG_LOCALITY: Cell<bool> = const { Cell::new(true) };
    }

    /// Runs `decode` with [`Config`](super::Config)s read with
    /// `locality_wait_ms` or without it (then 0); puts back what was in
    /// force after, even if `decode` panics.
    pub(crate) fn config<T>(locality: bool, decode: impl FnOnce() -> T) -> T {
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                CONFIG_LOCALITY.with(|cell| cell.set(self.0));
            }
        }
        let _restore = Restore(CONFIG_LOCALITY.with(|cell| cell.replace(locality)));
        decode()
    }

    /// The fields of [`Config`](super::Config), in order, each with how to
    /// read it and where it goes: `locality_wait_ms`, the last, is not in
    /// the bytes of formats before 10 (postcard writes a struct as its
    /// fields one after the other, so older bytes end just before it).
    macro_rules! config_fields {
        ($($field:ident: $ty:ty),* $(,)?) => {
            const CONFIG_FIELDS: &[&str] = &[$(stringify!($field)),*];

            #[derive(Deserialize)]
            #[serde(field_identifier, rename_all = "snake_case")]
            #[allow(non_camel_case_types)]
            enum ConfigField {
                $($field,)*
                #[serde(other)]
                Other,
            }

            struct ConfigVisitor;

            impl<'de> Visitor<'de> for ConfigVisitor {
                type Value = super::Config;

                fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                    formatter.write_str("struct Config")
                }

                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<super::Config, A::Error> {
                    let locality = CONFIG_LOCALITY.with(Cell::get);
                    let mut config = super::Config::default();
                    let mut at = 0;
                    $(
                        if stringify!($field) != "locality_wait_ms" || locality {
                            config.$field = seq
                                .next_element::<$ty>()?
                                .ok_or_else(|| de::Error::invalid_length(at, &self))?;
                        } else {
                            config.$field = 0;
                        }
                        at += 1;
                    )*
                    let _ = at;
                    Ok(config)
                }

                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<super::Config, A::Error> {
                    let mut config = super::Config::default();
                    while let Some(field) = map.next_key()? {
                        match field {
                            $(ConfigField::$field => config.$field = map.next_value()?,)*
                            ConfigField::Other => {
                                map.next_value::<de::IgnoredAny>()?;
                            }
                        }
                    }
                    Ok(config)
                }
            }
        };
    }

    config_fields! {
        queue_max: u64,
        input_bytes_max: u64,
        result_bytes_max: u64,
        checkpoint_bytes_max: u64,
        retention_ms: u64,
        finished_max: u64,
        results_bytes_total_max: u64,
        backoff_base_ms: u64,
        backoff_max_ms: u64,
        lease_grace_ms: u64,
        worker_ttl_ms: u64,
        timeout_ms_max: u64,
        attempts_max: u32,
        locality_wait_ms: u64,
    }

    impl<'de> Deserialize<'de> for super::Config {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_struct("Config", CONFIG_FIELDS, ConfigVisitor)
        }
    }

    /// Runs `decode` with [`JobOptions`] read as their first `fields`
    /// fields (2 before format 5, 3 in format 5, 4 in format 6, and grants
    /// without `record` in all of these; 5 in format 7: four fields and
    /// grants with `record`; [`FIELDS_NOW`] since); puts back what was in
    /// force after, even if `decode` panics.
    pub(crate) fn options<T>(fields: u8, decode: impl FnOnce() -> T) -> T {
        struct Restore(u8);
        impl Drop for Restore {
            fn drop(&mut self) {
                FIELDS_KEPT.with(|cell| cell.set(self.0));
            }
        }
        let _restore = Restore(FIELDS_KEPT.with(|cell| cell.replace(fields)));
        decode()
    }

    const FIELDS: &[&str] = &[
        "limit",
        "unique",
        "module",
        "egress",
        "input_blob",
        "trace",
        "labels",
        "namespace",
    ];

    thread_local! {
        /// How [`JobOptions`] are written, counted as [`FIELDS_KEPT`]
        /// counts: [`FIELDS_NOW`] always, but in tests making the bytes of
        /// an older format ([`written_before_trace`],
        /// [`written_before_labels`]).
        static FIELDS_WRITTEN: Cell<u8> = const { Cell::new(FIELDS_NOW) };
    }

    /// Runs `encode` with [`JobOptions`] written as `fields` counts them.
    #[cfg(test)]
    fn written_as<T>(fields: u8, encode: impl FnOnce() -> T) -> T {
        struct Restore(u8);
        impl Drop for Restore {
            fn drop(&mut self) {
                FIELDS_WRITTEN.with(|cell| cell.set(self.0));
            }
        }
        let _restore = Restore(FIELDS_WRITTEN.with(|cell| cell.replace(fields)));
        encode()
    }

    /// Runs `encode` with [`JobOptions`] written as formats before 10 and
    /// snapshots before version 11 hold them (without `trace` and
    /// `labels`), for tests that make such bytes.
    #[cfg(test)]
    pub(crate) fn written_before_trace<T>(encode: impl FnOnce() -> T) -> T {
        written_as(6, encode)
    }

    /// Runs `encode` with [`JobOptions`] written as formats 10 and 11 and
    /// snapshot version 11 hold them (without `labels`, and attempts
    /// without `usage`), for tests that make such bytes.
    #[cfg(test)]
    pub(crate) fn written_before_labels<T>(encode: impl FnOnce() -> T) -> T {
        written_as(7, encode)
    }

    /// Runs `encode` with attempts written as format 12 and snapshot
    /// version 12 hold them (without `usage`), for tests that make such
    /// bytes.
    #[cfg(test)]
    pub(crate) fn written_before_usage<T>(encode: impl FnOnce() -> T) -> T {
        written_as(8, encode)
    }

    /// Runs `encode` with options and tokens written as format 13 and
    /// snapshot version 13 hold them (without `namespace`), for tests that
    /// make such bytes.
    #[cfg(test)]
    pub(crate) fn written_before_namespaces<T>(encode: impl FnOnce() -> T) -> T {
        written_as(9, encode)
    }

    /// Whether bytes are being written as this format writes them (not in
    /// tests making older bytes).
    #[cfg(test)]
    pub(crate) fn writing_now() -> bool {
        FIELDS_WRITTEN.with(Cell::get) == FIELDS_NOW
    }

    /// Writes `value`, a field the bytes have since `since` (as
    /// [`FIELDS_WRITTEN`] counts), or (making older bytes in tests)
    /// nothing: postcard writes a unit as no bytes.
    fn write_since<T: serde::Serialize, S: serde::Serializer>(
        since: u8,
        value: &Option<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match FIELDS_WRITTEN.with(Cell::get) >= since {
            true => serde::Serialize::serialize(value, serializer),
            false => serializer.serialize_unit(),
        }
    }

    /// Reads a field the bytes have since `since` (as [`FIELDS_KEPT`]
    /// counts), or (in older bytes, which do not have it) reads nothing and
    /// gives `None`: a unit is no bytes to postcard.
    fn read_since<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        since: u8,
        deserializer: D,
    ) -> Result<Option<T>, D::Error> {
        if FIELDS_KEPT.with(Cell::get) >= since {
            return Option::<T>::deserialize(deserializer);
        }
        struct Absent<T>(std::marker::PhantomData<T>);
        impl<'de, T> Visitor<'de> for Absent<T> {
            type Value = Option<T>;

            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("nothing")
            }

            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
        }
        deserializer.deserialize_unit(Absent(std::marker::PhantomData))
    }

    /// Writes an attempt's `usage` (bytes of format 13 and snapshot
    /// version 13 on: [`write_since`]).
    pub(crate) fn write_usage<S: serde::Serializer>(
        usage: &Option<super::Usage>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        write_since(9, usage, serializer)
    }

    /// Reads an attempt's `usage`: `None` from bytes of a format before 13
    /// and snapshots before version 13 ([`read_since`]).
    pub(crate) fn read_usage<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<super::Usage>, D::Error> {
        read_since(9, deserializer)
    }

    /// Writes a token's `namespace` (bytes of format 14 and snapshot
    /// version 14 on: [`write_since`]).
    pub(crate) fn write_namespace<S: serde::Serializer>(
        namespace: &Option<String>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        write_since(10, namespace, serializer)
    }

    /// Reads a token's `namespace`: `None` (cluster-wide) from bytes of a
    /// format before 14 and snapshots before version 14 ([`read_since`]).
    pub(crate) fn read_namespace<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<String>, D::Error> {
        read_since(10, deserializer)
    }

    impl serde::Serialize for JobOptions {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeStruct;
            let written = FIELDS_WRITTEN.with(Cell::get);
            let (trace, labels, namespace) = (written >= 7, written >= 8, written >= 10);
            let len = 5 + usize::from(trace) + usize::from(labels) + usize::from(namespace);
            let mut out = serializer.serialize_struct("JobOptions", len)?;
            out.serialize_field("limit", &self.limit)?;
            out.serialize_field("unique", &self.unique)?;
            out.serialize_field("module", &self.module)?;
            out.serialize_field("egress", &self.egress)?;
            out.serialize_field("input_blob", &self.input_blob)?;
            if trace {
                out.serialize_field("trace", &self.trace)?;
            }
            if labels {
                out.serialize_field("labels", &self.labels)?;
            }
            if namespace {
                out.serialize_field("namespace", &self.namespace)?;
            }
            out.end()
        }
    }

    #[derive(Deserialize)]
    #[serde(field_identifier, rename_all = "snake_case")]
    enum Field {
        Limit,
        Unique,
        Module,
        Egress,
        InputBlob,
        Trace,
        Labels,
        Namespace,
        #[serde(other)]
        Other,
    }

    struct OptionsVisitor;

    impl<'de> Visitor<'de> for OptionsVisitor {
        type Value = JobOptions;

        fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
            formatter.write_str("struct JobOptions")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<JobOptions, A::Error> {
            let limit: Option<KeyLimit> = seq
                .next_element()?
                .ok_or_else(|| de::Error::invalid_length(0, &self))?;
            let unique: Option<Unique> = seq
                .next_element()?
                .ok_or_else(|| de::Error::invalid_length(1, &self))?;
            let fields = FIELDS_KEPT.with(Cell::get);
            let module = match fields >= 3 {
                true => seq.next_element::<Option<String>>()?.flatten(),
                false => None,
            };
            let egress = match fields >= 4 {
                true => seq.next_element::<Option<Vec<HttpGrant>>>()?.flatten(),
                false => None,
            };
            let input_blob = match fields >= 6 {
                true => seq.next_element::<Option<Blob>>()?.flatten(),
                false => None,
            };
            let trace = match fields >= 7 {
                true => seq.next_element::<Option<Box<TraceContext>>>()?.flatten(),
                false => None,
            };
            let labels = match fields >= 8 {
                true => (seq.next_element::<Vec<(String, String)>>()?).unwrap_or_default(),
                false => Vec::new(),
            };
            let namespace = match fields >= 10 {
                true => seq.next_element::<Option<String>>()?.flatten(),
                false => None,
            };
            Ok(JobOptions {
                limit,
                unique,
                module,
                egress,
                input_blob,
                trace,
                labels,
                namespace,
            })
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JobOptions, A::Error> {
            let mut options = JobOptions::default();
            while let Some(field) = map.next_key()? {
                match field {
                    Field::Limit => options.limit = map.next_value()?,
                    Field::Unique => options.unique = map.next_value()?,
                    Field::Module => options.module = map.next_value()?,
                    Field::Egress => options.egress = map.next_value()?,
                    Field::InputBlob => options.input_blob = map.next_value()?,
                    Field::Trace => options.trace = map.next_value()?,
                    Field::Labels => options.labels = map.next_value()?,
                    Field::Namespace => options.namespace = map.next_value()?,
                    Field::Other => {
                        map.next_value::<de::IgnoredAny>()?;
                    }
                }
            }
            Ok(options)
        }
    }

    impl<'de> Deserialize<'de> for JobOptions {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_struct("JobOptions", FIELDS, OptionsVisitor)
        }
    }
}

impl JobOptions {
    /// True when the options ask for nothing.
    pub fn is_empty(&self) -> bool {
        self.limit.is_none()
            && self.unique.is_none()
            && self.module.is_none()
            && self.labels.is_empty()
            && self.namespace.is_none()
    }
}

/// Limits on the jobs sharing `key`: each is checked, with the limits the
/// job being started carries, before an attempt of it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyLimit {
    /// The key (1 to [`KEY_BYTES_MAX`](crate::limits::KEY_BYTES_MAX)
    /// bytes).
    pub key: String,
    /// At most this many attempts of the key's jobs run at once.
    pub running_max: Option<u32>,
    /// At most this many attempts of the key's jobs start in any second.
    pub starts_per_second: Option<u32>,
}

/// A submission whose key matches a job submitted less than `window_ms`
/// earlier gets that job, whatever its state, instead of a new one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unique {
    /// The key (1 to [`KEY_BYTES_MAX`](crate::limits::KEY_BYTES_MAX)
    /// bytes).
    pub key: String,
    /// How long after the job's submission the key holds.
    pub window_ms: u64,
}

/// How an attempt ended, as reported by its worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The job returned this output (and wrote no output blob).
    Succeeded(Vec<u8>),
    /// The attempt failed.
    Failed(Failure),
    /// The job returned an output and wrote output blobs (stored by the
    /// worker's node before it reports): a success like
    /// [`Outcome::Succeeded`], whose blobs the job keeps (last, so the
    /// bytes of the others are what they were).
    Wrote(Output),
}

impl Outcome {
    /// The result and output blobs of a success (of either kind); `None`
    /// for a failure. Whatever treats a success reads it through this, so
    /// both kinds are treated alike.
    pub fn succeeded(&self) -> Option<(&[u8], &[NamedBlob])> {
        match self {
            Outcome::Succeeded(result) => Some((result, &[])),
            Outcome::Wrote(output) => Some((&output.result, &output.blobs)),
            Outcome::Failed(_) => None,
        }
    }
}

/// A success that wrote output blobs ([`Outcome::Wrote`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Output {
    /// What the job returned.
    pub result: Vec<u8>,
    /// The output blobs it wrote, in the order it created them (at most
    /// [`OUTPUTS_MAX`](crate::limits::OUTPUTS_MAX), names unique; see
    /// [`check_outputs`](crate::blobs::check_outputs)).
    pub blobs: Vec<NamedBlob>,
}

/// A failed attempt: a stable code and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Stable code (`job_error`, `trap`, `timeout`, `lease_expired`, ...).
    pub code: String,
    /// Explanation.
    pub message: String,
}

impl From<Rejection> for Failure {
    /// A refusal as a job's failure (an unknown job in
    /// [`Answer::Finished`]).
    fn from(rejection: Rejection) -> Self {
        Failure {
            code: rejection.code.as_str().to_owned(),
            message: rejection.message,
        }
    }
}

/// Input to [`decide`](crate::Master::decide).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Replace the configuration.
    Configure(Config),
    /// Queue a job, once per `request`: a request id the master remembers
    /// gets the reply its first submission got and creates nothing.
    Submit {
        /// What to run.
        spec: JobSpec,
        /// The submission's id, drawn where it entered the cluster.
        request: RequestId,
        /// Keys, limits and uniqueness.
        options: JobOptions,
    },
    /// Cancel a job that has not finished.
    Cancel {
        /// The job.
        id: JobId,
    },
    /// A worker is alive and can take up to `free` more jobs.
    Poll {
        /// The worker's id (unique in the cluster).
        worker: String,
        /// Its total slots.
        slots: u32,
        /// Jobs it can start now.
        free: u32,
        /// The blobs its node holds, by [`BlobPrefix`] (at most
        /// [`HOLDS_MAX`](crate::limits::HOLDS_MAX), the ones it used last;
        /// empty: none). The master prefers to start a job where its input
        /// blob is ([`crate::locality`]).
        holds: Vec<BlobPrefix>,
        /// Its labels and the most memory it gives one attempt (see
        /// [`crate::pools`]).
        pool: WorkerPool,
    },
    /// A running attempt saved a checkpoint.
    Checkpoint {
        /// The job.
        id: JobId,
        /// The attempt number (from 1).
        attempt: u32,
        /// The state to resume from.
        data: Vec<u8>,
        /// Where the attempt was in its record of calls when it saved it
        /// (`None`: a job that records nothing); a later attempt resuming
        /// from `data` replays the record from there ([`crate::tapes`]).
        mark: Option<TapeMark>,
    },
    /// A worker reports how an attempt ended.
    Finish {
        /// The job.
        id: JobId,
        /// The attempt number.
        attempt: u32,
        /// The reporting worker.
        worker: String,
        /// The result or failure.
        outcome: Outcome,
        /// How long the attempt ran.
        duration_ms: u64,
        /// The end of the attempt's log.
        log_tail: String,
        /// The attempt's outbound calls, the first
        /// [`CALLS_RECORDED_MAX`](crate::limits::CALLS_RECORDED_MAX).
        calls: Vec<HttpCall>,
        /// How many more calls it made.
        calls_dropped: u32,
        /// What the attempt cost, as its sandbox measured it.
        usage: Usage,
    },
    /// A worker is known to be gone (membership, shutdown): re-queue its work.
    WorkerGone {
        /// The worker.
        worker: String,
    },
    /// Time passed: expire leases and workers, release backoffs, purge.
    Tick,
    /// Record a new API token (its hash, never the token).
    CreateToken(TokenRecord),
    /// Revoke an API token.
    RevokeToken {
        /// The token's id.
        id: String,
    },
    /// Cancel or retry every job `filter` matches that the action applies
    /// to, at most [`BULK_MAX`](crate::limits::BULK_MAX) of them, in one
    /// decision (the events of all of them commit together).
    Bulk {
        /// What to do.
        action: BulkAction,
        /// Which jobs.
        filter: JobFilter,
    },
    /// Create a schedule (see [`crate::schedule`]).
    CreateSchedule(ScheduleSpec),
    /// Pause a schedule (its ticks are neither fired nor counted as missed)
    /// or resume it (from its first tick after now).
    PauseSchedule {
        /// The schedule.
        name: String,
        /// Pause (true) or resume (false).
        paused: bool,
    },
    /// Delete a schedule; the jobs it fired stay.
    DeleteSchedule {
        /// The schedule.
        name: String,
    },
    /// Fire a schedule's missed ticks in `from..to` (at most
    /// [`BACKFILL_TICKS_MAX`](crate::limits::BACKFILL_TICKS_MAX)).
    Backfill {
        /// The schedule.
        name: String,
        /// First time (inclusive).
        from: Millis,
        /// End (exclusive).
        to: Millis,
    },
    /// Queue a set of jobs with edges between them (and to existing jobs)
    /// as one DAG, all or nothing (see [`crate::dag`]).
    SubmitDag(DagSpec),
    /// Point deployment `name` at module `digest`: a new version, unless
    /// `digest` is the current one's (see [`crate::deployments`]).
    Deploy {
        /// The deployment's name ([`valid_module_name`](crate::valid_module_name)).
        name: String,
        /// The module (stored by the host before).
        digest: Digest,
    },
    /// Return deployment `name` to an earlier version, as a new version
    /// with that version's digest.
    Rollback {
        /// The deployment's name.
        name: String,
        /// The version to return to; `None`: the one current before the
        /// current one.
        to: Option<u32>,
    },
    /// Remove deployment `name` and its history (refused while a schedule
    /// names it).
    Undeploy {
        /// The deployment's name.
        name: String,
    },
    /// Add `grants` to what deployment `name`'s jobs may reach (see
    /// [`crate::egress`]); a grant it holds already is not added twice.
    Grant {
        /// The deployment's name.
        name: String,
        /// The grants to add.
        grants: Vec<HttpGrant>,
        /// Secrets its jobs may read themselves (see the `grants` module).
        secrets: Vec<String>,
    },
    /// Take `grants` from deployment `name` (none listed: all of them).
    Revoke {
        /// The deployment's name.
        name: String,
        /// The grants to take; with `secrets` empty too: every grant and
        /// every secret.
        grants: Vec<HttpGrant>,
        /// Secrets its jobs may no longer read.
        secrets: Vec<String>,
    },
    /// Set secret `name` to `sealed`: its value sealed by a node with the
    /// cluster key (the master never sees the plaintext).
    SetSecret {
        /// The secret's name ([`valid_secret_name`](crate::egress::valid_secret_name)).
        name: String,
        /// Its sealed value.
        sealed: Vec<u8>,
    },
    /// Delete secret `name` (refused while a grant names it).
    DeleteSecret {
        /// The secret's name.
        name: String,
    },
    /// A running attempt made a recorded call: keep its response (and the
    /// clock and random reads before it) for a later attempt to replay,
    /// durable before the job sees the response ([`crate::tapes`]).
    RecordCall {
        /// The job.
        id: JobId,
        /// The attempt.
        attempt: u32,
        /// The call.
        call: RecordedCall,
    },
    /// A blob is durable on a majority of the back-end nodes (an upload):
    /// the cluster keeps it, for at least `retention_ms` from now unless a
    /// job or schedule names it longer (see [`crate::blobs`]).
    KeepBlob {
        /// The blob.
        blob: Blob,
    },
    /// Stop keeping blob `digest` now (refused while a held job or
    /// schedule names it); the nodes delete their copies.
    DropBlob {
        /// The blob's sha256.
        digest: Digest,
    },
    /// `worker` is still preparing these attempts (fetching or compiling
    /// their module, fetching their input blobs) or keeping their output
    /// blobs: each running one's lease starts again from now (see
    /// [`crate::attempts`]). Attempts that ended, moved on or are held by
    /// another worker are skipped.
    Renew {
        /// The reporting worker.
        worker: String,
        /// `(job, attempt)`, at most
        /// [`RENEWALS_MAX`](crate::limits::RENEWALS_MAX).
        attempts: Vec<(JobId, u32)>,
    },
    /// Set namespace `namespace`'s quotas (all `None`: none), replacing
    /// the ones it had (see [`crate::quotas`]).
    SetQuotas {
        /// The namespace (`default` for the default one).
        namespace: String,
        /// Its quotas.
        quotas: Quotas,
    },
    /// Set namespace `namespace`'s weight for its fair share of the
    /// workers (see [`crate::shares`]; 1: the default).
    SetWeight {
        /// The namespace (`default` for the default one).
        namespace: String,
        /// Its weight, 1 to [`WEIGHT_MAX`](crate::limits::WEIGHT_MAX).
        weight: u32,
    },
    /// `action` on schedule `name` for a caller confined to namespace
    /// `namespace` (`None`: the default one): decided as the command it
    /// stands for only if the schedule's jobs are that namespace's; a
    /// schedule of another namespace is `schedule_not_found`, as a
    /// missing one is. The check and the act are one decision, so a
    /// schedule deleted and created again under the same name by another
    /// namespace in between is never acted on.
    ScheduleIn {
        /// The caller's namespace.
        namespace: Option<String>,
        /// The schedule's name.
        name: String,
        /// What to do with it.
        action: ScheduleAction,
    },
    /// Stop keeping blob `digest` now even though finished jobs name it:
    /// those that read it as their input are purged, as at retention, and
    /// those that wrote it no longer list it among their outputs (see
    /// [`crate::blobs`]). Refused (`blob_in_use`) while an unfinished job
    /// reads it, as its input or as a parent's output, or a schedule
    /// names it. Answered with [`Reply::Bulk`]: how many jobs forgot it.
    PurgeBlob {
        /// The blob's sha256.
        digest: Digest,
    },
}

/// What [`Command::ScheduleIn`] does with a schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScheduleAction {
    /// As [`Command::PauseSchedule`].
    Pause {
        /// Pause (`true`) or resume (`false`).
        paused: bool,
    },
    /// As [`Command::DeleteSchedule`].
    Delete,
    /// As [`Command::Backfill`].
    Backfill {
        /// First time (inclusive).
        from: Millis,
        /// End (exclusive).
        to: Millis,
    },
}

/// A DAG's id: dense, assigned by the master from 1.
pub type DagId = u64;

/// A DAG as submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DagSpec {
    /// Its jobs (at most [`DAG_JOBS_MAX`](crate::limits::DAG_JOBS_MAX)).
    pub nodes: Vec<DagNodeSpec>,
    /// What a job's failure does to the rest.
    pub on_failure: OnFailure,
    /// The submission's id (as [`Command::Submit`]'s).
    pub request: RequestId,
    /// A resubmission with the same key gets the same DAG.
    pub idempotency_key: Option<String>,
}

/// One job of a DAG.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DagNodeSpec {
    /// Its name, unique in the DAG.
    pub name: String,
    /// What to run (no idempotency key).
    pub spec: JobSpec,
    /// Its options (no uniqueness).
    pub options: JobOptions,
    /// The jobs it waits for.
    pub after: Vec<DagRef>,
    /// Whether it receives its parents' outputs with its input.
    pub outputs: bool,
}

/// A parent of a DAG's job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DagRef {
    /// Another job of the same DAG, by its index in `nodes`.
    Node(u32),
    /// A job that exists already.
    Job(JobId),
}

/// What a failed job (failed, dead or cancelled) does to its DAG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnFailure {
    /// Its descendants are cancelled (error `parent_failed`); the other
    /// branches go on.
    SkipDescendants,
    /// Every unfinished job of the DAG is cancelled (error
    /// `dag_cancelled`).
    CancelDag,
}

impl OnFailure {
    /// Every policy.
    pub const ALL: [OnFailure; 2] = [OnFailure::SkipDescendants, OnFailure::CancelDag];

    /// The policy's name in the API.
    pub fn name(self) -> &'static str {
        match self {
            OnFailure::SkipDescendants => "skip_descendants",
            OnFailure::CancelDag => "cancel_dag",
        }
    }

    /// The policy named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|policy| policy.name() == name)
    }
}

/// A DAG's job as the journal records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DagNode {
    /// The job.
    pub id: JobId,
    /// Its name in the DAG.
    pub name: String,
    /// The jobs it waits for.
    pub parents: Vec<JobId>,
    /// Whether it receives their outputs.
    pub outputs: bool,
}

/// A schedule: a job template fired at every tick of a timing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    /// Its name, unique in the cluster (1 to
    /// [`SCHEDULE_NAME_BYTES_MAX`](crate::limits::SCHEDULE_NAME_BYTES_MAX)
    /// bytes of `A-Z a-z 0-9 . _ -`).
    pub name: String,
    /// When it fires.
    pub every: Every,
    /// The job each tick submits (no idempotency key).
    pub job: JobSpec,
    /// The options of each job (a key limit; no uniqueness).
    pub options: JobOptions,
    /// What a tick does while the job of an earlier tick has not finished.
    pub overlap: Overlap,
    /// Ticks missed by at most this much (the master was down, or being
    /// taken over) still fire late; older ones are recorded as missed.
    pub catch_up_ms: u64,
}

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Every {
    /// At the times a cron expression matches in a time zone.
    Cron {
        /// Five fields (minute hour day-of-month month day-of-week) or six
        /// (seconds first).
        expression: String,
        /// An IANA time zone name (`UTC`, `Europe/Paris`).
        timezone: String,
    },
    /// Every `ms` milliseconds from the schedule's creation.
    Interval {
        /// The period.
        ms: u64,
    },
}

/// What a tick does while a job an earlier tick fired has not finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Overlap {
    /// Skip the tick.
    Skip,
    /// Keep one tick, fired when the running job ends; skip the rest.
    BufferOne,
    /// Fire anyway.
    AllowAll,
    /// Cancel the unfinished jobs, then fire.
    CancelRunning,
}

impl Overlap {
    /// Every policy.
    pub const ALL: [Overlap; 4] = [
        Overlap::Skip,
        Overlap::BufferOne,
        Overlap::AllowAll,
        Overlap::CancelRunning,
    ];

    /// The policy's name in the API.
    pub fn name(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer_one",
            Overlap::AllowAll => "allow_all",
            Overlap::CancelRunning => "cancel_running",
        }
    }

    /// The policy named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|policy| policy.name() == name)
    }
}

/// Why a tick fired no job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SkipReason {
    /// The overlap policy said so.
    Overlap,
    /// The queue was at its bound.
    QueueFull,
}

/// What a [`Command::Bulk`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BulkAction {
    /// Cancel the matching jobs that have not finished.
    Cancel,
    /// Queue the matching failed, dead and cancelled jobs again, each with
    /// this many more attempts.
    Retry {
        /// Attempts granted (1 to the configured `attempts_max`).
        attempts: u32,
    },
}

impl BulkAction {
    /// The states a retry queues a job again from.
    pub const RETRY_FROM: [JobState; 3] = [JobState::Failed, JobState::Dead, JobState::Cancelled];

    /// Whether the action changes a job in `state`.
    pub fn applies_to(self, state: JobState) -> bool {
        match self {
            BulkAction::Cancel => !state.is_terminal(),
            BulkAction::Retry { .. } => Self::RETRY_FROM.contains(&state),
        }
    }
}

/// Which jobs a listing or a bulk command is about: every condition given
/// must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFilter {
    /// In this state.
    pub state: Option<JobState>,
    /// Running this module.
    pub module: Option<Digest>,
    /// With this priority.
    pub priority: Option<i32>,
    /// Submitted at or after.
    pub from: Option<Millis>,
    /// Submitted at or before.
    pub to: Option<Millis>,
    /// Text found in the error's code or message, ignoring ASCII case
    /// (at most [`FILTER_TEXT_BYTES_MAX`](crate::limits::FILTER_TEXT_BYTES_MAX)).
    pub error: Option<String>,
    /// Only these jobs (at most
    /// [`FILTER_IDS_MAX`](crate::limits::FILTER_IDS_MAX)).
    pub ids: Option<Vec<JobId>>,
    /// Submitted by this deployment name (whichever version).
    pub module_name: Option<String>,
    /// In this namespace (`default` for the default one; see
    /// [`crate::namespaces`]).
    pub namespace: Option<String>,
}

/// An API token as the master keeps it: only the SHA-256 of its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Public id (the token's second part).
    pub id: String,
    /// What it is for, for people.
    pub name: String,
    /// `read`, `submit`, `admin`.
    pub scopes: Vec<String>,
    /// SHA-256 of the token's secret part.
    pub hash: [u8; 32],
    /// When it was created (set by the master when it decides).
    pub created_at: Millis,
    /// The namespace it is confined to (`None`: cluster-wide; see
    /// [`crate::namespaces`]). Read as `None` from the bytes of a format
    /// before 14, which have no such field.
    #[serde(
        serialize_with = "legacy::write_namespace",
        deserialize_with = "legacy::read_namespace"
    )]
    pub namespace: Option<String>,
}

/// Something that happened, in the journal. `at` is the decision time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// When it was decided.
    pub at: Millis,
    /// What happened.
    pub kind: EventKind,
}

/// The kinds of [`Event`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// The configuration changed.
    Configured(Config),
    /// A job was accepted.
    Submitted {
        /// Its new id.
        id: JobId,
        /// What to run.
        spec: JobSpec,
        /// The submission's id (`None` in events of format 1).
        request: Option<RequestId>,
        /// Keys, limits and uniqueness (none in events of formats 1 and 2).
        options: JobOptions,
    },
    /// An attempt started on a worker.
    Assigned {
        /// The job.
        id: JobId,
        /// Attempt number (from 1).
        attempt: u32,
        /// The worker.
        worker: String,
        /// When the attempt is presumed lost if not finished.
        lease_until: Millis,
    },
    /// A running attempt saved state.
    Checkpointed {
        /// The job.
        id: JobId,
        /// Its attempt.
        attempt: u32,
        /// The state.
        data: Vec<u8>,
    },
    /// The current attempt ended with a report from its worker.
    Finished {
        /// The job.
        id: JobId,
        /// Its attempt.
        attempt: u32,
        /// Result or failure.
        outcome: Outcome,
        /// How long it ran.
        duration_ms: u64,
        /// End of its log.
        log_tail: String,
        /// What it cost (`None` in the bytes of formats before 13).
        #[serde(
            default,
            serialize_with = "legacy::write_usage",
            deserialize_with = "legacy::read_usage"
        )]
        usage: Option<Usage>,
    },
    /// The current attempt was given up on without a report.
    Expired {
        /// The job.
        id: JobId,
        /// Its attempt.
        attempt: u32,
        /// `lease_expired` or `worker_lost`.
        code: String,
    },
    /// A job was cancelled.
    Cancelled {
        /// The job.
        id: JobId,
    },
    /// A job's retry backoff ended: it is runnable again.
    Released {
        /// The job.
        id: JobId,
    },
    /// A worker was heard from.
    WorkerSeen {
        /// The worker.
        worker: String,
        /// Its slots.
        slots: u32,
    },
    /// A worker is gone; its attempts are re-queued.
    WorkerLost {
        /// The worker.
        worker: String,
    },
    /// A finished job's record was removed (retention).
    Purged {
        /// The job.
        id: JobId,
    },
    /// An API token was created.
    TokenCreated(TokenRecord),
    /// An API token was revoked.
    TokenRevoked {
        /// Its id.
        id: String,
    },
    /// Request ids of submissions decided before `before` are forgotten.
    RequestsExpired {
        /// Decision times below this are forgotten.
        before: Millis,
    },
    /// A failed, dead or cancelled job was queued again (a bulk retry).
    Retried {
        /// The job.
        id: JobId,
        /// Its new limit of attempts, counting those already made.
        max_attempts: u32,
    },
    /// A schedule was created.
    ScheduleCreated {
        /// What it is.
        spec: ScheduleSpec,
        /// Its first tick (`None`: it never fires).
        next: Option<Millis>,
    },
    /// A schedule's tick fired: job `id` was submitted from its template.
    /// Decided once per tick, so a tick is one job whoever decides it.
    ScheduleFired {
        /// The schedule.
        name: String,
        /// The tick.
        tick: Millis,
        /// The new job.
        id: JobId,
        /// The schedule's next tick after this event.
        next: Option<Millis>,
    },
    /// A tick fired no job.
    ScheduleSkipped {
        /// The schedule.
        name: String,
        /// The tick.
        tick: Millis,
        /// Why.
        reason: SkipReason,
        /// The next tick.
        next: Option<Millis>,
    },
    /// A tick was kept to fire when the running job ends (`buffer_one`).
    ScheduleBuffered {
        /// The schedule.
        name: String,
        /// The tick.
        tick: Millis,
        /// The next tick.
        next: Option<Millis>,
    },
    /// Ticks in `from..to` were older than the catch-up window when the
    /// master came to them; they are recorded for a backfill.
    ScheduleMissed {
        /// The schedule.
        name: String,
        /// The first missed tick.
        from: Millis,
        /// The end of the missed range.
        to: Millis,
        /// The next tick (the first that will fire).
        next: Option<Millis>,
    },
    /// A schedule was paused or resumed.
    SchedulePaused {
        /// The schedule.
        name: String,
        /// Paused (true) or resumed.
        paused: bool,
        /// The next tick (on resume: the first after the event).
        next: Option<Millis>,
    },
    /// Missed ticks in `from..to` were fired by a backfill (the
    /// `ScheduleFired` events before this one) and are no longer missed.
    ScheduleBackfilled {
        /// The schedule.
        name: String,
        /// First time (inclusive).
        from: Millis,
        /// End (exclusive).
        to: Millis,
    },
    /// A schedule was deleted.
    ScheduleDeleted {
        /// The schedule.
        name: String,
    },
    /// The jobs just submitted (the `Submitted` events before this one in
    /// the same decision) form DAG `dag`: jobs with unfinished parents
    /// leave the ready queue until their parents succeed.
    DagCreated {
        /// Its id.
        dag: DagId,
        /// What a failure does.
        on_failure: OnFailure,
        /// Its jobs.
        nodes: Vec<DagNode>,
        /// The submission's id.
        request: Option<RequestId>,
        /// The DAG's idempotency key.
        idempotency_key: Option<String>,
    },
    /// Deployment `name` now points at `digest`, as its `version`.
    Deployed {
        /// The deployment.
        name: String,
        /// Its module.
        digest: Digest,
        /// Its new version (from 1, never reused).
        version: u32,
        /// The version a rollback returned to.
        rollback_of: Option<u32>,
    },
    /// Deployment `name` was removed with its history.
    Undeployed {
        /// The deployment.
        name: String,
    },
    /// Deployment `name`'s grants are now `grants` (empty: none).
    Granted {
        /// The deployment.
        name: String,
        /// All its grants.
        grants: Vec<HttpGrant>,
    },
    /// Secret `name` now has the sealed value `sealed`.
    SecretSet {
        /// The secret.
        name: String,
        /// Its sealed value.
        sealed: Vec<u8>,
    },
    /// Secret `name` was deleted.
    SecretDeleted {
        /// The secret.
        name: String,
    },
    /// The outbound calls of a job's attempt, recorded with its report
    /// (just before its `Finished`).
    CallsRecorded {
        /// The job.
        id: JobId,
        /// Its attempt.
        attempt: u32,
        /// The calls kept.
        calls: Vec<HttpCall>,
        /// How many more it made.
        dropped: u32,
    },
    /// A [`Command::RecordCall`] was accepted: the job's record of calls
    /// drops those at `call.ordinal` and after, then keeps `call`.
    CallRecorded {
        /// The job.
        id: JobId,
        /// The attempt that made it.
        attempt: u32,
        /// The call.
        call: RecordedCall,
    },
    /// The secrets deployment `name`'s jobs may read became `secrets`.
    SecretsShared {
        /// The deployment.
        name: String,
        /// All of them now, sorted.
        secrets: Vec<String>,
    },
    /// A checkpoint with a [`TapeMark`] was kept (with its
    /// `Checkpointed`): the job's record of calls drops those before it.
    TapeMarked {
        /// The job.
        id: JobId,
        /// The attempt.
        attempt: u32,
        /// Where the checkpoint was taken.
        mark: TapeMark,
    },
    /// The cluster keeps `blob` (an upload; see [`Command::KeepBlob`]).
    BlobKept {
        /// The blob.
        blob: Blob,
    },
    /// The cluster no longer keeps blob `digest` ([`Command::DropBlob`]).
    BlobDropped {
        /// The blob's sha256.
        digest: Digest,
    },
    /// Blobs nothing named for `retention_ms` are no longer kept (a
    /// tick's; at most [`BLOBS_COLLECTED_MAX`](crate::limits::BLOBS_COLLECTED_MAX)).
    BlobsCollected {
        /// Their sha256s.
        digests: Vec<Digest>,
    },
    /// A worker's poll said it holds other blobs than the master knew
    /// (see [`crate::locality`]).
    WorkerHolds {
        /// The worker.
        worker: String,
        /// What it holds now, sorted (empty: nothing).
        holds: Vec<BlobPrefix>,
    },
    /// Running attempts' leases started again ([`Command::Renew`]).
    Renewed {
        /// `(job, attempt, lease_until)`: each attempt's new lease.
        leases: Vec<(JobId, u32, Millis)>,
    },
    /// A worker's poll named another pool than the master knew (see
    /// [`crate::pools`]).
    WorkerPool {
        /// The worker.
        worker: String,
        /// Its labels and memory now.
        pool: WorkerPool,
    },
    /// A namespace's quotas were set ([`Command::SetQuotas`]).
    QuotasSet {
        /// The namespace (`default` for the default one).
        namespace: String,
        /// Its quotas (all `None`: none).
        quotas: Quotas,
    },
    /// A namespace's weight was set ([`Command::SetWeight`]).
    WeightSet {
        /// The namespace (`default` for the default one).
        namespace: String,
        /// Its weight.
        weight: u32,
    },
    /// Blob `digest` was purged ([`Command::PurgeBlob`]): the finished
    /// jobs that read it as their input are purged, the others that name
    /// it as an output forget it, and the cluster no longer keeps it.
    BlobPurged {
        /// The blob's sha256.
        digest: Digest,
    },
}

/// The reply to a command's sender, sent once its events are durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Done; nothing to report.
    Done,
    /// A job was accepted; `existing` when the idempotency key matched one.
    /// A submission whose request id was seen before gets the reply the
    /// first one got (`existing: false` if that one created the job).
    Submitted {
        /// The job's id.
        id: JobId,
        /// True if the submission created no job (its key matched one).
        existing: bool,
    },
    /// The report was not recorded (for example a superseded attempt).
    Ignored {
        /// Why.
        reason: String,
    },
    /// A [`Command::Bulk`] changed this many jobs.
    Bulk {
        /// Jobs cancelled or queued again.
        changed: u64,
    },
    /// A [`Command::Backfill`] submitted these jobs, one per missed tick.
    Backfilled {
        /// The jobs, in tick order.
        ids: Vec<JobId>,
    },
    /// A DAG was accepted (or, `existing`, its idempotency key matched one).
    Dag {
        /// Its id.
        id: DagId,
        /// Its jobs, in the order submitted.
        jobs: Vec<JobId>,
        /// True if the submission created nothing.
        existing: bool,
    },
    /// A [`Command::Deploy`] or [`Command::Rollback`] was accepted.
    Deployed {
        /// The deployment's current version.
        version: u32,
        /// Its module.
        digest: Digest,
        /// True if the digest was the current one's already (a deploy
        /// that changed nothing).
        existing: bool,
    },
    /// A [`Command::Grant`] or [`Command::Revoke`] was accepted.
    Granted {
        /// The deployment's grants now.
        grants: Vec<HttpGrant>,
        /// The secrets its jobs may read now.
        secrets: Vec<String>,
    },
    /// A [`Command::SetSecret`] was accepted.
    SecretSet {
        /// True if the secret did not exist before.
        created: bool,
    },
}

/// A job's assignment to a worker: everything needed to run one attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// The job.
    pub id: JobId,
    /// The attempt number (from 1).
    pub attempt: u32,
    /// The worker it is for.
    pub worker: String,
    /// The module to run.
    pub module: Digest,
    /// Its input.
    pub input: Vec<u8>,
    /// Wall-clock limit.
    pub timeout_ms: u64,
    /// Memory limit (`None`: worker default).
    pub memory_bytes: Option<u64>,
    /// The last checkpoint of an earlier attempt, to resume from.
    pub checkpoint: Option<Vec<u8>>,
    /// What the attempt may reach over HTTP: its deployment name's grants
    /// when it is assigned (none for a job submitted by digest).
    pub egress: Vec<HttpGrant>,
    /// The sealed values of the secrets the headers of `egress` name, by
    /// name: the worker's node opens them with the cluster key.
    pub secrets: Vec<(String, Vec<u8>)>,
    /// The recorded calls this attempt replays, from where its checkpoint
    /// was taken, and what names its calls ([`crate::tapes`]).
    pub replay: Replay,
    /// The secrets of `secrets` the job may read itself (the others only
    /// fill `egress`'s headers).
    pub readable: Vec<String>,
    /// The blobs the attempt may read, names unique: the job's
    /// [`input_blob`](JobOptions::input_blob) named `input` first; then,
    /// for a DAG's job submitted with `outputs`, each parent's output
    /// blobs named `PARENT/OUTPUT`, parents in the order of the job's
    /// `parents`, outputs in the order the parent wrote them (see
    /// [`crate::blobs`]).
    pub blobs: Vec<NamedBlob>,
    /// The job's trace context ([`JobOptions::trace`]), for the attempt's
    /// spans.
    pub trace: Option<TraceContext>,
    /// How long past `timeout_ms` the attempt's lease runs
    /// ([`Config::lease_grace_ms`]): the worker renews it well within this
    /// while it prepares the attempt or keeps its outputs
    /// ([`Command::Renew`]).
    pub lease_grace_ms: u64,
}

/// A call whose response a job saw only once it was durable: what a later
/// attempt making the same call (the same ordinal, method, URL and body)
/// gets instead of sending it again. See [`crate::tapes`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedCall {
    /// Which of the job's calls it was, from 0 (every call counts,
    /// recorded or not, refused or not), across attempts.
    pub ordinal: u32,
    /// Its method.
    pub method: String,
    /// Its URL as the job wrote it (query included).
    pub url: String,
    /// The sha256 of the request body the job sent.
    pub body_sha256: Digest,
    /// The response's status.
    pub status: u16,
    /// The response's headers, lowercase names, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The response's body.
    pub body: Vec<u8>,
    /// The clock and random reads the attempt made since its previous
    /// recorded call (or its start, or its checkpoint), in order.
    pub reads: Vec<Read>,
}

/// A clock or random read a job made, recorded to be replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Read {
    /// The wall clock.
    Clock {
        /// Seconds since the Unix epoch.
        seconds: u64,
        /// And nanoseconds.
        nanos: u32,
    },
    /// Random bytes (secure or not).
    Random(Vec<u8>),
}

/// Where an attempt was in its record when it saved a checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TapeMark {
    /// How many calls the job had made (the ordinal of its next).
    pub calls: u32,
    /// How many clock and random reads it had made since its last
    /// recorded call: the next recorded call's first reads, which an
    /// attempt resuming from the checkpoint does not replay.
    pub reads: u32,
}

/// What an attempt replays ([`Assignment::replay`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replay {
    /// Where the checkpoint it resumes from was taken (zero: from the
    /// start).
    pub mark: TapeMark,
    /// The recorded calls from there on, by ordinal.
    pub calls: Vec<RecordedCall>,
    /// When the job was submitted: with its id, what its calls'
    /// idempotency keys are made from.
    pub submitted_at: Millis,
}

/// What the host must do after events are applied and durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Effect {
    /// Hand this attempt to its worker (boxed: it carries the attempt's
    /// grants, secrets and record, far more than the other effects).
    Assign(Box<Assignment>),
    /// Stop a running attempt (cancelled or superseded).
    Stop {
        /// The worker running it.
        worker: String,
        /// The job.
        id: JobId,
        /// The attempt.
        attempt: u32,
    },
    /// Jobs became runnable: waiting workers should poll again.
    WorkAvailable,
    /// A job reached a terminal state.
    Settled {
        /// The job.
        id: JobId,
        /// Its final state.
        state: JobState,
    },
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum JobState {
    /// Waiting for a worker (possibly backing off before a retry).
    Queued,
    /// An attempt is running.
    Running,
    /// Finished with a result.
    Succeeded,
    /// Finished with the job's own error, or a failure that is not retried.
    Failed,
    /// Cancelled by a client.
    Cancelled,
    /// Dead-lettered: every allowed attempt failed.
    Dead,
}

// `ALL[state as usize] == state`, checked as the crate compiles: the
// master's counts and a packed job's state byte number states so.
const _: () = {
    let mut at = 0;
    while at < JobState::COUNT {
        assert!(
            JobState::ALL[at] as usize == at,
            "JobState::ALL is out of order"
        );
        at += 1;
    }
};

impl JobState {
    /// Every state, in declaration order (the order of [`Stats::jobs`]).
    pub const ALL: [JobState; 6] = [
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Dead,
    ];

    /// How many states there are.
    pub const COUNT: usize = Self::ALL.len();

    /// True for states a job never leaves.
    pub fn is_terminal(self) -> bool {
        !matches!(self, JobState::Queued | JobState::Running)
    }

    /// The state's name in the API.
    pub fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Dead => "dead",
        }
    }

    /// Parses [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.name() == name)
    }
}

/// A read-only question for [`query`](crate::Master::query).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Query {
    /// One job's record.
    Job {
        /// The job.
        id: JobId,
    },
    /// One job's result bytes.
    Result {
        /// The job.
        id: JobId,
    },
    /// Jobs `filter` matches, by ascending id after `after` (or, when
    /// `newest_first`, by descending id before it).
    Jobs {
        /// Which jobs.
        filter: JobFilter,
        /// Continue past this id.
        after: Option<JobId>,
        /// Most jobs to return.
        limit: u32,
        /// Newest (highest id) first.
        newest_first: bool,
    },
    /// How many jobs a [`Command::Bulk`] with `action` and `filter` would
    /// change now.
    Bulk {
        /// What to do.
        action: BulkAction,
        /// Which jobs.
        filter: JobFilter,
    },
    /// Jobs finished in the last `window_ms`, and how long they took from
    /// submission.
    Recent {
        /// How far back.
        window_ms: u64,
    },
    /// How many jobs the master holds per module.
    ModuleUse,
    /// One job's input bytes.
    Input {
        /// The job.
        id: JobId,
    },
    /// Counters.
    Stats,
    /// Known workers.
    Workers,
    /// API tokens (hashes only), by id.
    Tokens,
    /// Which of `ids` have finished (or are unknown), with their outcome:
    /// what a client waiting for many jobs at once asks for. At most
    /// [`FINISHED_IDS_MAX`](crate::limits::FINISHED_IDS_MAX) ids. A
    /// succeeded job's output comes along when it is at most `output_max`
    /// bytes and the answer's outputs stay within `output_total`; its
    /// output blobs (names, digests and sizes) always do.
    Finished {
        /// The jobs asked about.
        ids: Vec<JobId>,
        /// Largest output sent inline.
        output_max: u64,
        /// Most output bytes in the whole answer.
        output_total: u64,
    },
    /// Every schedule, by name.
    Schedules,
    /// One schedule.
    Schedule {
        /// Its name.
        name: String,
    },
    /// A DAG's status.
    Dag {
        /// Its id.
        id: DagId,
    },
    /// Every deployment, by name, without their versions.
    Deployments,
    /// One deployment, with the versions it keeps.
    Deployment {
        /// Its name.
        name: String,
    },
    /// Every secret's name, when it was set and who uses it (never a
    /// value, sealed or not).
    Secrets,
    /// Whether the cluster keeps each of `digests`, and what names it (at
    /// most [`BLOBS_ASKED_MAX`](crate::limits::BLOBS_ASKED_MAX)): what a
    /// node asks before it deletes its copies, and what listings show.
    Blobs {
        /// The blobs asked about.
        digests: Vec<Digest>,
    },
    /// Every namespace that ever held a job, by name: the jobs it holds
    /// per state, what it submitted and what its attempts cost (see
    /// [`crate::namespaces`]).
    Namespaces,
    /// `query` as a caller confined to `namespace` may see it (see
    /// [`crate::namespaces`]): one job (`Job`, `Result`, `Input`) only if
    /// it is the namespace's, and otherwise `job_not_found`, whether it
    /// belongs to another namespace, was removed, or never was; a DAG
    /// (`Dag`) likewise, `dag_not_found`; listings
    /// and bulk counts (`Jobs`, `Bulk`) of the namespace's jobs only;
    /// `Namespaces` of that namespace only; `Schedules` and `Schedule`
    /// of the schedules whose jobs are the namespace's (another's is
    /// `schedule_not_found`);
    /// `Finished` with every job of another namespace unknown. Any other
    /// query is refused (`invalid_namespace`): it is cluster-wide.
    InNamespace {
        /// The caller's namespace (`default` for the default one).
        namespace: String,
        /// What it asks.
        query: Box<Query>,
    },
    /// A page of the blobs the cluster keeps, by digest: the first
    /// `limit` (1 to [`LIST_LIMIT_MAX`](crate::limits::LIST_LIMIT_MAX))
    /// after `after` (see [`crate::blobs`]).
    KeptBlobs {
        /// The last digest of the page before (`None`: from the first).
        after: Option<Digest>,
        /// The most blobs to answer.
        limit: u32,
    },
}

impl Query {
    /// This query as a caller confined to `namespace` asks it
    /// ([`Query::InNamespace`]); as it is for a cluster-wide one (`None`).
    pub fn within(self, namespace: Option<&str>) -> Query {
        match namespace {
            Some(namespace) => Query::InNamespace {
                namespace: namespace.to_owned(),
                query: Box::new(self),
            },
            None => self,
        }
    }

    /// The jobs a [`Query::Finished`] asks about, asked within a
    /// namespace or not; `None` for any other query.
    pub fn finished_ids(&self) -> Option<&[JobId]> {
        match self {
            Query::Finished { ids, .. } => Some(ids),
            Query::InNamespace { query, .. } => query.finished_ids(),
            _ => None,
        }
    }
}

/// What the cluster knows of a blob ([`Query::Blobs`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobStatus {
    /// Its sha256.
    pub digest: Digest,
    /// Whether the cluster keeps it; a node deletes its copy of a blob
    /// the cluster does not keep.
    pub kept: bool,
    /// How many held jobs' blobs (inputs and outputs) and schedules name
    /// it.
    pub refs: u32,
    /// When it stops being kept unless something names it or it is
    /// uploaded again (`None`: kept, and named; or not kept).
    pub collect_at: Option<Millis>,
}

/// A secret as the API lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretView {
    /// Its name.
    pub name: String,
    /// When it was last set.
    pub updated_at: Millis,
    /// The deployment names whose grants name it.
    pub used_by: Vec<String>,
}

/// A deployment: a module name and the versions it pointed at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeploymentView {
    /// Its name.
    pub name: String,
    /// The current version.
    pub current: ModuleVersion,
    /// The versions kept, newest first (empty in [`Answer::Deployments`]).
    pub versions: Vec<ModuleVersion>,
    /// Versions ever made under this name (the newest's number).
    pub versions_total: u32,
    /// What its jobs may reach over HTTP.
    pub grants: Vec<HttpGrant>,
    /// The secrets its jobs may read.
    pub secrets: Vec<String>,
}

/// One version of a deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleVersion {
    /// Its number (from 1).
    pub version: u32,
    /// Its module.
    pub digest: Digest,
    /// When it was made.
    pub at: Millis,
    /// The version a rollback returned to, if it is one.
    pub rollback_of: Option<u32>,
}

/// A DAG as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DagView {
    /// Its id.
    pub id: DagId,
    /// What a failure does.
    pub on_failure: OnFailure,
    /// When it was submitted.
    pub created_at: Millis,
    /// Jobs per state (purged ones are not counted).
    pub counts: [u64; JobState::COUNT],
    /// Jobs that wait for a parent.
    pub waiting: u64,
    /// Its jobs in the order submitted: id, name, state (`None`: purged),
    /// parents.
    pub jobs: Vec<(JobId, String, Option<JobState>, Vec<JobId>)>,
}

/// A schedule as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleView {
    /// What it is.
    pub spec: ScheduleSpec,
    /// When it was created.
    pub created_at: Millis,
    /// Paused.
    pub paused: bool,
    /// Its next ticks (at most
    /// [`UPCOMING_MAX`](crate::limits::UPCOMING_MAX); none while paused).
    pub upcoming: Vec<Millis>,
    /// A tick kept by `buffer_one`, fired when the running job ends.
    pub buffered: Option<Millis>,
    /// Jobs it fired that have not finished.
    pub active: Vec<JobId>,
    /// The latest tick fired, and its job.
    pub last: Option<(Millis, JobId)>,
    /// Ticks fired (a backfill's included).
    pub fired_total: u64,
    /// Ticks skipped (overlap, full queue).
    pub skipped_total: u64,
    /// Ranges `from..to` of missed ticks a backfill can still fire, oldest
    /// first.
    pub missed: Vec<(Millis, Millis)>,
}

/// One attempt of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Number, from 1.
    pub number: u32,
    /// The worker that ran it.
    pub worker: String,
    /// When it started.
    pub started_at: Millis,
    /// When it ended (if it has).
    pub ended_at: Option<Millis>,
    /// How it ended: `succeeded`, or a failure code.
    pub outcome: Option<String>,
    /// Failure message, if any.
    pub message: Option<String>,
    /// Run time reported by the worker.
    pub duration_ms: Option<u64>,
    /// End of its log.
    pub log_tail: String,
    /// What it cost, as its worker's sandbox measured it (`None` until it
    /// ends, for an attempt that ended without a report, and for one
    /// reported in a format before 13).
    #[serde(
        default,
        serialize_with = "legacy::write_usage",
        deserialize_with = "legacy::read_usage"
    )]
    pub usage: Option<Usage>,
}

/// What one attempt cost, measured by the worker that ran it: the CPU
/// time of the threads while they ran the job (its Wasm and the host
/// calls it made, not the node's own work around it), the most linear
/// memory its instance held at once, and the body bytes of its outbound
/// calls, sent and received (every call, recorded or not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// CPU time, in microseconds.
    pub cpu_us: u64,
    /// Peak linear memory, in bytes.
    pub memory_peak_bytes: u64,
    /// Outbound body bytes, both ways.
    pub egress_bytes: u64,
}

impl Usage {
    /// `self` and `other` as one: times and bytes added, the higher peak.
    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            cpu_us: self.cpu_us.saturating_add(other.cpu_us),
            memory_peak_bytes: self.memory_peak_bytes.max(other.memory_peak_bytes),
            egress_bytes: self.egress_bytes.saturating_add(other.egress_bytes),
        }
    }
}

/// A job as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobView {
    /// Id.
    pub id: JobId,
    /// Module digest.
    pub module: Digest,
    /// State.
    pub state: JobState,
    /// Priority.
    pub priority: i32,
    /// Attempt limit.
    pub max_attempts: u32,
    /// Per-attempt timeout.
    pub timeout_ms: u64,
    /// Idempotency key.
    pub idempotency_key: Option<String>,
    /// Submission time.
    pub submitted_at: Millis,
    /// Time of the terminal state.
    pub finished_at: Option<Millis>,
    /// Earliest start of the next attempt while backing off.
    pub not_before: Option<Millis>,
    /// Attempts so far.
    pub attempts: Vec<Attempt>,
    /// Why it failed (terminal failures).
    pub error: Option<Failure>,
    /// Size of the result, once succeeded.
    pub result_bytes: Option<u64>,
    /// Input size.
    pub input_bytes: u64,
    /// Whether a checkpoint is stored.
    pub has_checkpoint: bool,
    /// Keys, limits and uniqueness it was submitted with.
    pub options: JobOptions,
    /// Its DAG and its name there.
    pub dag: Option<(DagId, String)>,
    /// The jobs it waits for (or waited for).
    pub parents: Vec<JobId>,
    /// Whether it still waits for one of them.
    pub waiting: bool,
    /// The deployment name its module was named by at submission.
    pub module_name: Option<String>,
    /// The deployment's version current at submission.
    pub module_version: Option<u32>,
    /// The outbound calls of its attempts that made any.
    pub calls: Vec<AttemptCalls>,
    /// The blob it reads as its input.
    pub input_blob: Option<Blob>,
    /// The output blobs it wrote, once succeeded.
    pub outputs: Vec<NamedBlob>,
    /// Queued, and no known worker has the labels and memory it asks for
    /// (see [`crate::pools`]): it waits for such a worker to join.
    pub unplaceable: bool,
}

/// The outbound calls of one attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptCalls {
    /// The attempt.
    pub attempt: u32,
    /// Its calls, the first
    /// [`CALLS_RECORDED_MAX`](crate::limits::CALLS_RECORDED_MAX).
    pub calls: Vec<HttpCall>,
    /// How many more it made.
    pub dropped: u32,
}

/// Short form of a job for listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSummary {
    /// Id.
    pub id: JobId,
    /// State.
    pub state: JobState,
    /// Attempts so far.
    pub attempts: u32,
    /// Submission time.
    pub submitted_at: Millis,
    /// When it finished.
    pub finished_at: Option<Millis>,
    /// Its module.
    pub module: Digest,
    /// Its priority.
    pub priority: i32,
    /// Why it failed, if it did.
    pub error_code: Option<String>,
    /// The deployment name it was submitted by, if it was.
    pub module_name: Option<String>,
    /// That name's version when the job was accepted.
    pub module_version: Option<u32>,
    /// Its namespace (`None`: the default one).
    pub namespace: Option<String>,
}

/// Counters over the whole master.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Jobs per state, indexed like [`JobState`]'s declaration order.
    pub jobs: [u64; JobState::COUNT],
    /// Jobs ever submitted.
    pub submitted_total: u64,
    /// Attempts ever started.
    pub attempts_total: u64,
    /// Attempts re-queued after a failure or expiry.
    pub retries_total: u64,
    /// Known workers.
    pub workers: u64,
    /// Bytes of results held, with those the names and digests of output
    /// blobs take (see [`crate::blobs`]).
    pub result_bytes: u64,
    /// Blobs the cluster keeps (see [`crate::blobs`]).
    pub blobs_kept: u64,
    /// Their bytes in all (on each node that holds a copy).
    pub blob_bytes_kept: u64,
    /// Attempts started of jobs with an input blob.
    pub input_assignments: u64,
    /// Of those, the ones started on a worker that said it held the input
    /// (see [`crate::locality`]).
    pub local_assignments: u64,
    /// Known workers whose last poll said their node holds blobs.
    pub workers_holding: u64,
    /// Runnable jobs that no known worker has the labels and memory for
    /// (see [`crate::pools`]).
    pub unplaceable: u64,
}

/// A known worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerView {
    /// Id.
    pub id: String,
    /// Total slots.
    pub slots: u32,
    /// Attempts it is running.
    pub running: u32,
    /// When it was last heard from.
    pub last_seen: Millis,
    /// Its labels and memory.
    pub pool: WorkerPool,
}

/// The answer to a [`Query`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// For [`Query::Job`].
    Job(Box<JobView>),
    /// For [`Query::Result`].
    Result(Vec<u8>),
    /// For [`Query::Jobs`]: a page, and the cursor for the next one.
    Jobs {
        /// The page.
        jobs: Vec<JobSummary>,
        /// Pass as `after` to continue; `None` at the end.
        next: Option<JobId>,
    },
    /// For [`Query::Stats`].
    Stats(Stats),
    /// For [`Query::Workers`].
    Workers(Vec<WorkerView>),
    /// For [`Query::Tokens`].
    Tokens(Vec<TokenRecord>),
    /// For [`Query::Finished`]: the finished or unknown jobs, in the order
    /// asked.
    Finished(Vec<Finished>),
    /// For [`Query::Bulk`]: jobs the command would change.
    Count(u64),
    /// For [`Query::Recent`].
    Recent(Recent),
    /// For [`Query::ModuleUse`]: (module, jobs), by module.
    ModuleUse(Vec<(Digest, u64)>),
    /// For [`Query::Input`].
    Input(Vec<u8>),
    /// For [`Query::Schedules`].
    Schedules(Vec<ScheduleView>),
    /// For [`Query::Schedule`].
    Schedule(Box<ScheduleView>),
    /// For [`Query::Dag`].
    Dag(Box<DagView>),
    /// For [`Query::Deployments`].
    Deployments(Vec<DeploymentView>),
    /// For [`Query::Deployment`].
    Deployment(Box<DeploymentView>),
    /// For [`Query::Secrets`].
    Secrets(Vec<SecretView>),
    /// For [`Query::Blobs`], in the order asked.
    Blobs(Vec<BlobStatus>),
    /// For [`Query::Namespaces`], by name.
    Namespaces(Vec<NamespaceView>),
    /// For [`Query::KeptBlobs`]: the page, by digest, and the digest the
    /// next page starts after (`None`: this was the last).
    KeptBlobs {
        /// Each kept blob's status and size.
        blobs: Vec<KeptBlob>,
        /// Where the next page starts.
        next: Option<Digest>,
    },
}

/// A blob the cluster keeps, as [`Query::KeptBlobs`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptBlob {
    /// What [`Query::Blobs`] says of it (`kept` always true).
    pub status: BlobStatus,
    /// Its size in bytes.
    pub size: u64,
}

/// A namespace as [`Query::Namespaces`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceView {
    /// Its name (`default` for the default one).
    pub name: String,
    /// The jobs it holds, per state (as [`Stats::jobs`]).
    pub jobs: [u64; JobState::COUNT],
    /// What it submitted and spent since its first job.
    pub totals: crate::namespaces::NamespaceTotals,
    /// Its quotas (none set: unbounded but for the cluster's own limits).
    pub quotas: Quotas,
    /// The bytes of results its held jobs keep (inline results and named
    /// outputs, as [`Stats::result_bytes`] counts them).
    pub result_bytes: u64,
    /// Its weight for its fair share of the workers (see
    /// [`crate::shares`]; 1 unless set).
    pub weight: u32,
}

/// A namespace's quotas (see [`crate::quotas`]); `None` is no quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    /// Most jobs waiting (queued, whether runnable, backing off or
    /// waiting for parents); a submission past it is `quota_exceeded`.
    pub waiting_max: Option<u64>,
    /// Most attempts running at once: more wait in line.
    pub running_max: Option<u32>,
    /// Most jobs submitted a second (a token bucket holding one second's
    /// worth); a submission past it is `quota_exceeded`.
    pub submissions_per_second: Option<u32>,
    /// Most bytes of results its held jobs keep; while they keep as many,
    /// a submission is `quota_exceeded`.
    pub result_bytes_max: Option<u64>,
}

/// Jobs finished lately ([`Query::Recent`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recent {
    /// Jobs finished in the window (at most
    /// [`RECENT_SCAN_MAX`](crate::limits::RECENT_SCAN_MAX) are looked at).
    pub finished: u64,
    /// Median time from submission to the end, in ms (`None` if none).
    pub p50_ms: Option<u64>,
    /// 99th percentile of the same.
    pub p99_ms: Option<u64>,
}

/// A finished (or unknown) job in [`Answer::Finished`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    /// The job.
    pub id: JobId,
    /// Its terminal state; `None` if the master does not know the job.
    pub state: Option<JobState>,
    /// Why it did not succeed, or why it is unknown (`job_not_found`,
    /// `job_expired`).
    pub error: Option<Failure>,
    /// Its output, when inline (see [`Query::Finished`]).
    pub output: Option<Vec<u8>>,
    /// Its output's size, when it succeeded.
    pub output_bytes: Option<u64>,
    /// The output blobs it wrote, when it succeeded (always sent: a few
    /// dozen bytes each).
    pub outputs: Vec<NamedBlob>,
}

/// What [`decide`](crate::Master::decide) returns for an accepted command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Events to journal and apply, in order.
    pub events: Vec<Event>,
    /// The reply, once the events are durable.
    pub reply: Reply,
}
