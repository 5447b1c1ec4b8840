//! What commands may ask for: every check of a submission's spec and
//! options, a report's output blobs, a filter, a bulk action, a token and
//! a configuration.
//!
//! Checks run in `decide`, before any event exists, so a refused command
//! changes nothing; `apply` checks nothing again, since it cannot fail
//! (it takes a journal's values as they come, and copes). Each refusal
//! names the field and its bound in the message, under a stable code.
//!
//! Invariant: durations a configuration sets are at most
//! [`CONFIG_DURATION_MS_MAX`], so adding one to a time never overflows.
//! This module reads no state: checks against what the master holds (a
//! taken name, a full queue) stay with their concern.

use crate::limits::{
    ATTEMPTS_MAX_MAX, CONFIG_DURATION_MS_MAX, FILTER_IDS_MAX, FILTER_TEXT_BYTES_MAX,
    IDEMPOTENCY_KEY_BYTES_MAX, KEY_BYTES_MAX, KEY_LIMIT_MAX, LOCALITY_WAIT_MS_MAX,
    TOKEN_ID_BYTES_MAX, TOKEN_NAME_BYTES_MAX, UNIQUE_WINDOW_MS_MAX,
};
use std::collections::BTreeSet;

use crate::master::reject;
use crate::protocol::*;
use crate::tokens::TOKEN_SCOPES;

/// Checks a job's spec against the configuration.
pub(crate) fn validate_spec(config: &Config, spec: &JobSpec) -> Result<(), Rejection> {
    if spec.max_attempts == 0 || spec.max_attempts > config.attempts_max {
        return reject(
            codes::INVALID_JOB,
            format!("max_attempts must be 1 to {}", config.attempts_max),
        );
    }
    if spec.timeout_ms == 0 || spec.timeout_ms > config.timeout_ms_max {
        return reject(
            codes::INVALID_JOB,
            format!("timeout_ms must be 1 to {}", config.timeout_ms_max),
        );
    }
    if spec.input.len() as u64 > config.input_bytes_max {
        return reject(
            codes::INPUT_TOO_LARGE,
            format!(
                "input of {} bytes, the limit is {}",
                spec.input.len(),
                config.input_bytes_max
            ),
        );
    }
    if let Some(key) = &spec.idempotency_key
        && (key.is_empty() || key.len() > IDEMPOTENCY_KEY_BYTES_MAX)
    {
        return reject(
            codes::INVALID_JOB,
            format!("idempotency keys are 1 to {IDEMPOTENCY_KEY_BYTES_MAX} bytes"),
        );
    }
    Ok(())
}

pub(crate) fn validate_options(options: &JobOptions) -> Result<(), Rejection> {
    let key = |field: &str, key: &str| {
        // No NUL: a namespace's uniqueness keys are kept as
        // `NAMESPACE\0KEY` (see `namespaces::scoped_key`).
        if key.is_empty() || key.len() > KEY_BYTES_MAX || key.contains('\0') {
            return reject(
                codes::INVALID_JOB,
                format!("{field} must be 1 to {KEY_BYTES_MAX} bytes, without NUL"),
            );
        }
        Ok(())
    };
    // W3C: a context with a zero trace or span id is invalid; the host
    // never sends one (it ignores such a `traceparent`).
    if let Some(trace) = &options.trace
        && (trace.trace_id == [0; 16] || trace.span_id == [0; 8])
    {
        return reject(codes::INVALID_JOB, "trace context with a zero id");
    }
    if let Err(why) = crate::pools::check_labels(&options.labels) {
        return reject(codes::INVALID_JOB, format!("labels: {why}"));
    }
    if let Some(limit) = &options.limit {
        key("limit.key", &limit.key)?;
        if limit.running_max.is_none() && limit.starts_per_second.is_none() {
            return reject(
                codes::INVALID_JOB,
                "a key limit needs running_max or starts_per_second",
            );
        }
        let fields = [
            ("limit.running_max", limit.running_max),
            ("limit.starts_per_second", limit.starts_per_second),
        ];
        for (field, value) in fields {
            if value.is_some_and(|value| !(1..=KEY_LIMIT_MAX).contains(&value)) {
                return reject(
                    codes::INVALID_JOB,
                    format!("{field} must be 1 to {KEY_LIMIT_MAX}"),
                );
            }
        }
    }
    if let Some(unique) = &options.unique {
        key("unique.key", &unique.key)?;
        if !(1..=UNIQUE_WINDOW_MS_MAX).contains(&unique.window_ms) {
            return reject(
                codes::INVALID_JOB,
                format!("unique.window_ms must be 1 to {UNIQUE_WINDOW_MS_MAX}"),
            );
        }
    }
    Ok(())
}

/// Checks the output blobs a report carries ([`check_outputs`]): a
/// worker is a node of the cluster, so a report out of bounds is
/// `invalid_job`, as its other malformed commands are.
///
/// [`check_outputs`]: crate::blobs::check_outputs
pub(crate) fn validate_outputs(outcome: &Outcome) -> Result<(), Rejection> {
    match outcome.succeeded() {
        Some((_, outputs)) => crate::blobs::check_outputs(outputs)
            .map_err(|why| Rejection::new(codes::INVALID_JOB, why)),
        None => Ok(()),
    }
}

pub(crate) fn validate_filter(filter: &JobFilter) -> Result<(), Rejection> {
    if filter
        .error
        .as_ref()
        .is_some_and(|t| t.len() > FILTER_TEXT_BYTES_MAX)
    {
        return reject(
            codes::INVALID_FILTER,
            format!("error: at most {FILTER_TEXT_BYTES_MAX} bytes"),
        );
    }
    if filter
        .ids
        .as_ref()
        .is_some_and(|ids| ids.len() > FILTER_IDS_MAX)
    {
        return reject(
            codes::INVALID_FILTER,
            format!("ids: at most {FILTER_IDS_MAX}"),
        );
    }
    if let Some(name) = &filter.module_name
        && !crate::deployments::valid_module_name(name)
    {
        return reject(
            codes::INVALID_FILTER,
            format!("module_name: {name:?} is no deployment name"),
        );
    }
    if let Some(name) = &filter.namespace {
        crate::namespaces::check_name(name).or_else(|why| reject(codes::INVALID_FILTER, why))?;
    }
    Ok(())
}

pub(crate) fn validate_bulk(
    action: BulkAction,
    filter: &JobFilter,
    config: &Config,
) -> Result<(), Rejection> {
    validate_filter(filter)?;
    if let BulkAction::Retry { attempts } = action
        && (attempts == 0 || attempts > config.attempts_max)
    {
        return reject(
            codes::INVALID_FILTER,
            format!("attempts must be 1 to {}", config.attempts_max),
        );
    }
    Ok(())
}

pub(crate) fn validate_token(record: &TokenRecord) -> Result<(), Rejection> {
    let id_ok = !record.id.is_empty()
        && record.id.len() <= TOKEN_ID_BYTES_MAX
        && record
            .id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !id_ok {
        return reject(
            codes::INVALID_TOKEN,
            format!("a token id is 1 to {TOKEN_ID_BYTES_MAX} letters, digits or dashes"),
        );
    }
    if record.name.len() > TOKEN_NAME_BYTES_MAX {
        return reject(
            codes::INVALID_TOKEN,
            format!("a token name is at most {TOKEN_NAME_BYTES_MAX} bytes"),
        );
    }
    let mut seen = BTreeSet::new();
    for scope in &record.scopes {
        if !TOKEN_SCOPES.contains(&scope.as_str()) || !seen.insert(scope) {
            return reject(
                codes::INVALID_TOKEN,
                format!("unknown or repeated scope {scope:?}: use read, submit or admin"),
            );
        }
    }
    if seen.is_empty() {
        return reject(codes::INVALID_TOKEN, "a token needs at least one scope");
    }
    Ok(())
}

pub(crate) fn validate_config(config: &Config) -> Result<(), Rejection> {
    let positive = [
        ("queue_max", config.queue_max),
        ("timeout_ms_max", config.timeout_ms_max),
        ("worker_ttl_ms", config.worker_ttl_ms),
        ("attempts_max", config.attempts_max as u64),
    ];
    for (name, value) in positive {
        if value == 0 {
            return reject(codes::INVALID_JOB, format!("{name} must be positive"));
        }
    }
    // Durations are added to times: bounded, they can never overflow one.
    let durations = [
        ("timeout_ms_max", config.timeout_ms_max),
        ("worker_ttl_ms", config.worker_ttl_ms),
        ("retention_ms", config.retention_ms),
        ("backoff_base_ms", config.backoff_base_ms),
        ("backoff_max_ms", config.backoff_max_ms),
        ("lease_grace_ms", config.lease_grace_ms),
    ];
    for (name, value) in durations {
        if value > CONFIG_DURATION_MS_MAX {
            return reject(
                codes::INVALID_JOB,
                format!("{name} is at most {CONFIG_DURATION_MS_MAX} ms (a year)"),
            );
        }
    }
    if config.locality_wait_ms > LOCALITY_WAIT_MS_MAX {
        return reject(
            codes::INVALID_JOB,
            format!("locality_wait_ms is at most {LOCALITY_WAIT_MS_MAX} ms"),
        );
    }
    if config.attempts_max > ATTEMPTS_MAX_MAX {
        return reject(
            codes::INVALID_JOB,
            format!("attempts_max is at most {ATTEMPTS_MAX_MAX}"),
        );
    }
    Ok(())
}
