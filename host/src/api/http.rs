//! The plain HTTP pieces every handler uses, public or node-to-node:
//! answers (JSON, bytes, errors with their status and headers), bounded
//! body reads, and the common parsing of what a request names.
//!
//! Nothing here knows a route: [`super::routes`] decides which body limit a
//! request gets, and the handlers what its bytes mean. A body is read once,
//! bounded before its first byte (by its declared length) and in time (by
//! [`body_deadline`]), so a slow or oversized client costs the node little.

use super::error::{ApiError, ErrorCode};
use super::routes::Miss;
use crate::limits::{BODY_RATE_MIN, BODY_READ_BASE};
use crate::runtime::Digest;
use crate::security::counters::{self, what};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONNECTION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use hyper::{Method, Response, StatusCode};
use std::convert::Infallible;
use std::time::Duration;

/// How long a body of at most `bytes` may take to arrive.
pub fn body_deadline(bytes: u64) -> Duration {
    BODY_READ_BASE + Duration::from_millis(bytes.saturating_mul(1000) / BODY_RATE_MIN)
}

pub(crate) type Reply200 = Response<Full<Bytes>>;

/// Any response body: whole ([`Reply200`]) or streamed (`GET /v1/events`).
pub(crate) type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

pub(crate) fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Reply200 {
    let body = serde_json::to_vec(value).expect("API types serialize");
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

pub(crate) fn bytes(content_type: &'static str, body: impl Into<Bytes>) -> Reply200 {
    let mut response = Response::new(Full::new(body.into()));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

pub(crate) fn error_response(error: ApiError) -> Reply200 {
    let mut response = json(error.status, &error.body);
    if matches!(
        error.status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if error.status == StatusCode::REQUEST_TIMEOUT {
        // The rest of a slow body is not worth waiting for.
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    if let Some(allow) = error.allow {
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static(allow));
    }
    response
}

/// Reads a body of at most `limit` bytes (beyond: `too_large_code`) within
/// [`body_deadline`]; `headers` are the request's (its declared length is
/// checked before a byte is read).
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Incoming,
    limit: usize,
    too_large_code: ErrorCode,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            too_large_code,
            format!("the body limit here is {limit} bytes"),
        )
    };
    let declared = headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(too_large());
    }
    let deadline = body_deadline(declared.unwrap_or(limit as u64));
    let collected = tokio::time::timeout(deadline, Limited::new(body, limit).collect());
    let Ok(collected) = collected.await else {
        counters::refused(what::CONNECTION, "slow_body");
        return Err(ApiError::new(
            ErrorCode::RequestTimeout,
            format!("the body did not arrive within {deadline:?}"),
        ));
    };
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Err(error) => Err(ApiError::new(
            ErrorCode::BadRequest,
            format!("could not read the body: {error}"),
        )),
    }
}

/// A module digest from a request; a malformed one is reported with `code`,
/// like a module that does not exist.
pub(crate) fn parse_digest(text: &str, code: ErrorCode) -> Result<Digest, ApiError> {
    text.parse()
        .map_err(|e: crate::runtime::module::DigestParseError| ApiError::new(code, e.to_string()))
}

/// What a request's `module` names: 64 hex digits are a digest, anything
/// else must be a deployment's name.
pub(crate) enum ModuleRef {
    /// A module by its digest.
    Digest(Digest),
    /// A deployment by its name.
    Name(String),
}

/// Reads a `module`: a malformed digest is `digest_code`, a string that is
/// neither a digest nor a deployment name is `name_code`.
pub(crate) fn module_ref(
    text: &str,
    digest_code: ErrorCode,
    name_code: ErrorCode,
) -> Result<ModuleRef, ApiError> {
    if text.len() == 64 {
        return parse_digest(text, digest_code).map(ModuleRef::Digest);
    }
    check_name(text, name_code)?;
    Ok(ModuleRef::Name(text.to_owned()))
}

/// A deployment name the master would refuse, refused as `code` before
/// anything else is checked (the master's rule, so the two never
/// disagree).
pub(crate) fn check_name(name: &str, code: ErrorCode) -> Result<(), ApiError> {
    if cohort_master::valid_module_name(name) {
        return Ok(());
    }
    Err(ApiError::new(
        code,
        format!(
            "{name:?} is neither a sha256 (64 hex digits) nor a deployment name (1 to {} \
             characters of a-z 0-9 . _ - starting with a letter or digit)",
            cohort_master::limits::MODULE_NAME_BYTES_MAX
        ),
    ))
}

pub(crate) fn not_stored(code: ErrorCode, digest: &Digest) -> ApiError {
    ApiError::new(
        code,
        format!("no module {digest} is stored; upload it with POST /v1/modules"),
    )
}

/// `405` with the allowed methods for a known resource, `404` otherwise.
pub(crate) fn no_route(miss: Miss, method: &Method, path: &str) -> ApiError {
    match miss {
        Miss::MethodNotAllowed { allow, .. } => ApiError::method_not_allowed(
            allow,
            format!("{method} is not allowed on {path} (allowed: {allow})"),
        ),
        Miss::NotFound => ApiError::new(ErrorCode::NotFound, format!("no route {path}")),
    }
}

pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    // Every body is an object: serde would also read a struct from an
    // array of its fields in order, which no client means.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::new(
            ErrorCode::BadJson,
            "the body is a JSON object",
        ));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::new(ErrorCode::BadJson, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::QuotasBody;

    #[test]
    fn a_body_is_a_json_object_and_its_whole_floats_are_integers() {
        let parsed: QuotasBody = parse_json(b" {\"waiting_max\": 10.0}").unwrap();
        assert_eq!(parsed.waiting_max, Some(10));
        for body in [&b"[null, null]"[..], b"[]", b"null", b"7", b"", b"\"{}\""] {
            let error = parse_json::<QuotasBody>(body).unwrap_err();
            assert_eq!(error.body.code, "bad_json", "{body:?}");
        }
        let fraction = parse_json::<QuotasBody>(b"{\"running_max\": 1.5}").unwrap_err();
        assert_eq!(fraction.body.code, "bad_json");
    }
}
