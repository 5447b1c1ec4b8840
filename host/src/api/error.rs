//! The public API's errors: one enum of every code it can answer.
//!
//! A code is a client's contract: its string never changes on the wire
//! (clients and the table in `docs/http-api.md` depend on it), and it alone decides the
//! HTTP status and whether a retry of the same request may help. So all
//! three live in one table, [`ErrorCode`]'s definition below, and nothing
//! else in the node spells a code as a string. A unit test checks the table
//! against the documentation's, so the two cannot drift apart.
//!
//! Rejections come from the master as strings (`cohort_master::codes`: the
//! master is a separate component, possibly newer than this node). Each
//! known one maps onto a variant; an unknown one keeps its string, answered
//! as `500` and not retryable ([`ApiError::from`] a [`Rejection`]), because
//! this node cannot say what it means.

use super::types::ErrorBody;
pub use crate::codes::{ErrorCode, UnknownCode};
use crate::contract::MasterError;
use crate::runtime::ModuleError;
use cohort_master::Rejection;
use hyper::StatusCode;

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
        match r.code.as_str().parse::<ErrorCode>() {
            Ok(code) => Self::new(code, r.message),
            Err(_) => {
                tracing::warn!(code = %r.code, "the master answered with a code this node does not know");
                Self {
                    status: UNKNOWN_CODE_STATUS,
                    body: ErrorBody {
                        code: r.code.as_str().to_string(),
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

    /// The codes of the documentation's table of statuses, with each row's status
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
        assert_eq!(names, known, "docs/http-api.md's error table vs ErrorCode");
        for (status, name, retryable) in &listed {
            let code: ErrorCode = name.parse().unwrap();
            assert_eq!(code.status().as_u16(), *status, "{name}'s status");
            assert_eq!(code.retryable(), *retryable, "{name}'s retryability");
        }
    }

    #[test]
    fn every_master_code_is_known_here() {
        for code in cohort_master::codes::ALL {
            let known: ErrorCode = code.as_str().parse().unwrap();
            let error = ApiError::from(Rejection::new(code.clone(), "x"));
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
