//! Posts an event to a webhook.
//!
//! Input: JSON `{"url": "https://hooks.example.com/...", "event": {...}}`.
//! The job POSTs `event` as JSON to `url`, with an `Idempotency-Key` header
//! derived from the input, and returns `{"status": 204}` when the webhook
//! answers `2xx`. Any other answer fails the job with the code
//! `webhook_rejected`; a call that gets no answer fails with the SDK's
//! `http_*` code (`http_denied` when the deployment has no grant for the
//! URL, `http_timeout`, `http_error`).
//!
//! cohort may run a job more than once (a retry after a lost worker, say), so
//! the same input must not deliver the event twice. The idempotency key is the
//! SHA-256 of the job's input, the same on every attempt: a webhook that
//! honours `Idempotency-Key` ignores the repeats.

use cohort_guest::http::{Method, Request};
use cohort_guest::{JobError, Json, job};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// How long one delivery may take, from connecting to the last byte of the
/// answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The most answer body this job reads; webhook answers are short.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

#[derive(Deserialize)]
struct Delivery {
    url: String,
    event: serde_json::Value,
}

#[derive(Serialize)]
struct Delivered {
    status: u16,
}

#[job]
fn run(input: Vec<u8>) -> Result<Json<Delivered>, JobError> {
    let delivery: Delivery = serde_json::from_slice(&input).map_err(|e| {
        JobError::bad_input(format!(
            r#"expected {{"url": "https://...", "event": {{...}}}}: {e}"#
        ))
    })?;
    if !delivery.event.is_object() {
        return Err(JobError::bad_input("`event` must be a JSON object"));
    }
    let body = serde_json::to_vec(&delivery.event)
        .map_err(|e| JobError::bad_input(format!("cannot encode the event: {e}")))?;
    let key = idempotency_key(&input);
    cohort_guest::info!("delivering {} bytes, idempotency key {key}", body.len());

    let response = Request::new(Method::Post, delivery.url)
        .header("Content-Type", "application/json")
        .header("Idempotency-Key", key)
        .body(body)
        .timeout(TIMEOUT)
        .max_response_bytes(MAX_ANSWER_BYTES)
        .send()?;

    // Redirects are not followed, so a 3xx is a failure too. The message
    // names the status and the start of the answer's body.
    let response = response
        .error_for_status()
        .map_err(|e| JobError::new("webhook_rejected", e.to_string()))?;
    cohort_guest::info!("delivered: {}", response.status);
    Ok(Json(Delivered {
        status: response.status,
    }))
}

/// A key that is the same for the same input on every attempt of the job:
/// the hex SHA-256 of the input.
fn idempotency_key(input: &[u8]) -> String {
    Sha256::digest(input)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_a_stable_hash_of_the_input() {
        let input = br#"{"url": "https://h/x", "event": {"a": 1}}"#;
        let key = idempotency_key(input);
        assert_eq!(key.len(), 64);
        assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(key, idempotency_key(input));
        assert_ne!(
            key,
            idempotency_key(br#"{"url": "https://h/x", "event": {"a": 2}}"#)
        );
        assert_eq!(
            idempotency_key(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
