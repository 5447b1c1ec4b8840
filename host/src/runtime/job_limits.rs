//! Per-job resource limits ([`JobLimits`]): what one attempt may use,
//! checked against the ceilings, and how limits are written on the command
//! line. The defaults a node applies when a job does not ask for less (or
//! more, up to the node's ceilings) and the ceilings themselves are in
//! [`crate::limits`].

use crate::limits::{
    CHECKPOINT_BYTES_CEILING, CHECKPOINT_BYTES_DEFAULT, LOG_BYTES_CEILING, LOG_BYTES_DEFAULT,
    MEMORY_BYTES_CEILING, MEMORY_BYTES_DEFAULT, OUTPUT_BYTES_CEILING, OUTPUT_BYTES_DEFAULT,
    TIMEOUT_MS_CEILING, TIMEOUT_MS_DEFAULT,
};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The resources one attempt of a job may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobLimits {
    /// Total linear memory the job's instance may grow to, in bytes.
    pub memory_bytes: u64,
    /// Wall-clock time one attempt may take, in milliseconds.
    pub timeout_ms: u64,
    /// Largest output the job may return, in bytes.
    pub output_bytes: u64,
    /// Log bytes kept; later output is dropped and a marker says how much.
    pub log_bytes: u64,
    /// Largest checkpoint the job may save, in bytes.
    pub checkpoint_bytes: u64,
}

impl Default for JobLimits {
    fn default() -> Self {
        Self {
            memory_bytes: MEMORY_BYTES_DEFAULT,
            timeout_ms: TIMEOUT_MS_DEFAULT,
            output_bytes: OUTPUT_BYTES_DEFAULT,
            log_bytes: LOG_BYTES_DEFAULT,
            checkpoint_bytes: CHECKPOINT_BYTES_DEFAULT,
        }
    }
}

/// A limit outside what cohort allows.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{name} must be between 1 and {ceiling}, got {value}")]
pub struct LimitError {
    /// Which limit.
    pub name: &'static str,
    /// The value asked for.
    pub value: u64,
    /// The largest allowed value.
    pub ceiling: u64,
}

impl JobLimits {
    /// The timeout as a [`Duration`].
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// Checks every limit against its ceiling (and that none is zero).
    pub fn validate(&self) -> Result<(), LimitError> {
        let checks = [
            ("memory_bytes", self.memory_bytes, MEMORY_BYTES_CEILING),
            ("timeout_ms", self.timeout_ms, TIMEOUT_MS_CEILING),
            ("output_bytes", self.output_bytes, OUTPUT_BYTES_CEILING),
            ("log_bytes", self.log_bytes, LOG_BYTES_CEILING),
            (
                "checkpoint_bytes",
                self.checkpoint_bytes,
                CHECKPOINT_BYTES_CEILING,
            ),
        ];
        for (name, value, ceiling) in checks {
            if value == 0 || value > ceiling {
                return Err(LimitError {
                    name,
                    value,
                    ceiling,
                });
            }
        }
        Ok(())
    }
}

/// Parses a byte size such as `512`, `64k`, `256MiB` or `2G` (binary units).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let (number, unit) = split_number(text)
        .ok_or_else(|| format!("`{text}` is not a size (try 512, 64KiB, 256MiB, 2GiB)"))?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        other => return Err(format!("unknown size unit `{other}` (use KiB, MiB or GiB)")),
    };
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// Parses a duration such as `500ms`, `30s`, `5m` or `2h`; a bare number is
/// seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = split_number(text)
        .ok_or_else(|| format!("`{text}` is not a duration (try 500ms, 30s, 5m)"))?;
    let millis = match unit {
        "ms" => Some(number),
        "" | "s" => number.checked_mul(1000),
        "m" | "min" => number.checked_mul(60_000),
        "h" => number.checked_mul(3_600_000),
        other => {
            return Err(format!(
                "unknown duration unit `{other}` (use ms, s, m or h)"
            ));
        }
    };
    millis
        .map(Duration::from_millis)
        .ok_or_else(|| format!("`{text}` is too long"))
}

/// Splits `"  64 MiB "` into `(64, "MiB")`; `None` without leading digits.
fn split_number(text: &str) -> Option<(u64, &str)> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    Some((digits.parse().ok()?, unit.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        JobLimits::default().validate().unwrap();
    }

    #[test]
    fn zero_and_above_ceiling_are_rejected() {
        let zero = JobLimits {
            timeout_ms: 0,
            ..JobLimits::default()
        };
        assert_eq!(zero.validate().unwrap_err().name, "timeout_ms");
        let huge = JobLimits {
            memory_bytes: MEMORY_BYTES_CEILING + 1,
            ..JobLimits::default()
        };
        assert_eq!(huge.validate().unwrap_err().name, "memory_bytes");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("512"), Ok(512));
        assert_eq!(parse_bytes("64k"), Ok(64 << 10));
        assert_eq!(parse_bytes("256MiB"), Ok(256 << 20));
        assert_eq!(parse_bytes("2 GB"), Ok(2 << 30));
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("99999999999999G").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("soon").is_err());
    }
}
