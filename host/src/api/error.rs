//! The public API's errors: one enum of every code it can answer.
//!
//! A code is a client's contract: its string never changes on the wire
//! (clients and the README's table depend on it), and it alone decides the
//! HTTP status and whether a retry of the same request may help. So all
//! three live in one table, [`ErrorCode`]'s definition below, and nothing
//! else in the node spells a code as a string. A unit test checks the table
//! against the README's, so the documentation cannot drift from the code.
//!
//! Rejections come from the master as strings (`cohort_master::codes`: the
//! master is a separate component, possibly newer than this node). Each
//! known one maps onto a variant; an unknown one keeps its string, answered
//! as `500` and not retryable ([`ApiError::from`] a [`Rejection`]), because
//! this node cannot say what it means.

use super::types::ErrorBody;
use crate::contract::MasterError;
use crate::runtime::ModuleError;
use cohort_master::Rejection;
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
    /// No token has this id.
    TokenNotFound = "token_not_found", NOT_FOUND, false;
    /// No schedule has this name.
    ScheduleNotFound = "schedule_not_found", NOT_FOUND, false;
    /// No DAG has this id (or all its jobs were purged).
    DagNotFound = "dag_not_found", NOT_FOUND, false;
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
    /// A rollback while the built-in master runs and always did.
    NothingToRollBack = "nothing_to_roll_back", CONFLICT, false;
    /// The master's node runs the master natively (`--master-core native`).
    UpgradeUnsupported = "upgrade_unsupported", CONFLICT, false;
    /// The request body is over the route's limit.
    BodyTooLarge = "body_too_large", PAYLOAD_TOO_LARGE, false;
    /// The job's input is over the input limit.
    InputTooLarge = "input_too_large", PAYLOAD_TOO_LARGE, false;
    /// The module is over the module limit.
    ModuleTooLarge = "module_too_large", PAYLOAD_TOO_LARGE, false;
    /// A checkpoint over the checkpoint limit.
    CheckpointTooLarge = "checkpoint_too_large", PAYLOAD_TOO_LARGE, false;
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
    /// A job field out of range.
    InvalidJob = "invalid_job", UNPROCESSABLE_ENTITY, false;
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

/// What a rejection with a code this node does not know is answered with.
const UNKNOWN_CODE_STATUS: StatusCode = StatusCode::INTERNAL_SERVER_ERROR;

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    pub(super) status: StatusCode,
    pub(super) body: ErrorBody,
    /// For `405`: the methods the route allows.
    pub(super) allow: Option<&'static str>,
}

impl ApiError {
    /// An error with `code` (which decides the status) and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status: code.status(),
            body: error_body(code, message),
            allow: None,
        }
    }

    /// A `405`, naming the methods the route allows.
    pub(super) fn method_not_allowed(allow: &'static str, message: impl Into<String>) -> Self {
        Self {
            allow: Some(allow),
            ..Self::new(ErrorCode::MethodNotAllowed, message)
        }
    }

    /// Its HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Its JSON body.
    pub fn body(&self) -> &ErrorBody {
        &self.body
    }
}

/// The body of an error with `code`.
pub fn error_body(code: ErrorCode, message: impl Into<String>) -> ErrorBody {
    ErrorBody {
        code: code.as_str().into(),
        message: message.into(),
        retryable: Some(code.retryable()),
    }
}

impl From<Rejection> for ApiError {
    fn from(r: Rejection) -> Self {
        match r.code.parse::<ErrorCode>() {
            Ok(code) => Self::new(code, r.message),
            Err(_) => {
                tracing::warn!(code = %r.code, "the master answered with a code this node does not know");
                Self {
                    status: UNKNOWN_CODE_STATUS,
                    body: ErrorBody {
                        code: r.code,
                        message: r.message,
                        retryable: Some(false),
                    },
                    allow: None,
                }
            }
        }
    }
}

impl From<MasterError> for ApiError {
    fn from(error: MasterError) -> Self {
        match error {
            MasterError::Rejected(r) => r.into(),
            MasterError::Unavailable(reason) => Self::new(ErrorCode::MasterUnavailable, reason),
            MasterError::Unreplicated(reason) => Self::new(ErrorCode::ReplicasUnavailable, reason),
            MasterError::Moved(url) => Self::new(
                ErrorCode::MasterUnavailable,
                format!("the master moved to {url}"),
            ),
            error @ MasterError::Indeterminate(_) => {
                Self::new(ErrorCode::OutcomeUnknown, error.to_string())
            }
        }
    }
}

impl From<&ModuleError> for ErrorCode {
    fn from(error: &ModuleError) -> Self {
        match error {
            ModuleError::TooLarge { .. } => ErrorCode::ModuleTooLarge,
            ModuleError::Invalid(_) => ErrorCode::ModuleInvalid,
            ModuleError::WrongWorld(_) => ErrorCode::ModuleWrongWorld,
            ModuleError::JobVersion { .. } => ErrorCode::ModuleJobVersion,
            ModuleError::UnsupportedImport { .. } => ErrorCode::ModuleUnsupportedImport,
            ModuleError::Internal(_) => ErrorCode::Internal,
        }
    }
}

impl From<ModuleError> for ApiError {
    fn from(error: ModuleError) -> Self {
        Self::new(ErrorCode::from(&error), error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_code_is_unique_and_round_trips() {
        let mut seen = BTreeSet::new();
        for &code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "{code:?} repeats a string");
            assert_eq!(code.as_str().parse::<ErrorCode>(), Ok(code));
            assert_eq!(code.to_string(), code.as_str());
            assert!(
                code.status().is_client_error() || code.status().is_server_error(),
                "{code:?}"
            );
        }
        assert_eq!(
            "no_such_code".parse::<ErrorCode>(),
            Err(UnknownCode("no_such_code".into()))
        );
    }

    /// The codes of the README's table of statuses, with each row's status
    /// and whether the row says they are retryable.
    fn readme_codes() -> Vec<(u16, String, bool)> {
        let section = crate::doc_section("docs/http-api.md", "\n## Error codes\n");
        let table = section
            .split("| status | codes | retryable |")
            .nth(1)
            .expect("the Error codes section has a status table with a retryable column");
        let mut codes = Vec::new();
        for row in table.lines().skip(2) {
            if !row.starts_with('|') {
                break;
            }
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 3, "a row of three cells: {row}");
            let status: u16 = cells[0].trim().parse().expect("a status");
            let retryable = match cells[2].trim() {
                "yes" => true,
                "no" => false,
                other => panic!("retryable is yes or no, not {other:?}: {row}"),
            };
            // Codes are the backquoted words at the start of each
            // comma-separated item (explanations follow in parentheses).
            let mut rest = cells[1];
            while let Some(start) = rest.find('`') {
                let after = &rest[start + 1..];
                let end = after.find('`').expect("closing backquote");
                let preceding = rest[..start].trim_end();
                let word = &after[..end];
                if (preceding.is_empty() || preceding.ends_with(',') || preceding.ends_with(')'))
                    && !word.contains(['-', ' '])
                {
                    codes.push((status, word.to_string(), retryable));
                }
                rest = skip_parenthesis(&after[end + 1..]);
            }
        }
        codes
    }

    /// `text` past a parenthesized explanation it starts with.
    fn skip_parenthesis(text: &str) -> &str {
        let trimmed = text.trim_start();
        if !trimmed.starts_with('(') {
            return text;
        }
        let mut depth = 0;
        for (i, c) in trimmed.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return &trimmed[i + 1..];
                    }
                }
                _ => {}
            }
        }
        ""
    }

    #[test]
    fn the_readme_lists_exactly_these_codes_with_their_status_and_retryability() {
        let listed = readme_codes();
        let names: BTreeSet<&str> = listed.iter().map(|(_, c, _)| c.as_str()).collect();
        assert_eq!(names.len(), listed.len(), "a code listed twice: {listed:?}");
        let known: BTreeSet<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names, known, "README's error table vs ErrorCode");
        for (status, name, retryable) in &listed {
            let code: ErrorCode = name.parse().unwrap();
            assert_eq!(code.status().as_u16(), *status, "{name}'s status");
            assert_eq!(code.retryable(), *retryable, "{name}'s retryability");
        }
    }

    #[test]
    fn every_master_code_is_known_here() {
        for &code in cohort_master::codes::ALL {
            let known: ErrorCode = code.parse().unwrap();
            let error = ApiError::from(Rejection::new(code, "x"));
            assert_eq!(error.status, known.status(), "{code}");
            assert_eq!(error.body, error_body(known, "x"));
        }
    }

    #[test]
    fn an_unknown_master_code_keeps_its_string_and_gets_the_fallback() {
        let error = ApiError::from(Rejection::new("from_a_newer_master", "new"));
        assert_eq!(error.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(error.body.code, "from_a_newer_master");
        assert_eq!(error.body.retryable, Some(false));
    }

    #[test]
    fn master_errors_and_module_errors_map_onto_codes() {
        let cases = [
            (MasterError::Unavailable("x".into()), "master_unavailable"),
            (
                MasterError::Unreplicated("x".into()),
                "replicas_unavailable",
            ),
            (MasterError::Moved("http://n2".into()), "master_unavailable"),
            (MasterError::Indeterminate("x".into()), "outcome_unknown"),
        ];
        for (error, code) in cases {
            let error = ApiError::from(error);
            assert_eq!(error.body.code, code);
            assert_eq!(error.body.retryable, Some(true), "{code}");
            assert_eq!(error.status, StatusCode::SERVICE_UNAVAILABLE);
        }
        let module = ModuleError::Invalid("garbage".into());
        assert_eq!(ErrorCode::from(&module).as_str(), module.code());
        let module = ModuleError::Internal("disk".into());
        assert_eq!(ErrorCode::from(&module).as_str(), module.code());
    }
}
