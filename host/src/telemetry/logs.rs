//! A job's own log lines as OpenTelemetry log records
//! (`--otlp-job-logs`).
//!
//! Each line a job logs through its host's `log` becomes one record: the
//! line as its body, its level as the severity, the time it was logged,
//! the job's id, attempt and module and the node as attributes, and the
//! trace and span ids of the attempt (its own span, or for a trace sampled
//! out the job's context), so a collector shows the lines under the span
//! that logged them. Records go out over OTLP/HTTP protobuf to
//! `/v1/logs` through the SDK's batch processor, sent by [`super::otlp`]'s
//! client, as spans are.
//!
//! Bounded: at most [`QUEUE_MAX`] records wait to be exported; a line past
//! that is dropped and counted ([`dropped`]), never waited for. A line is
//! what the job's log keeps of it (masked, cut at the log's room, none
//! once the log is full), so a record is never longer than the job's
//! `log_bytes`.

use crate::contract::LineLevel;
use cohort_master::TraceContext;
use opentelemetry::logs::{AnyValue, LogRecord, Logger, LoggerProvider, Severity};
use opentelemetry::trace::TraceFlags;
use opentelemetry::{SpanId, TraceId};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{
    BatchConfigBuilder, BatchLogProcessor, LogBatch, LogExporter, SdkLogger, SdkLoggerProvider,
};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::SystemTime;

/// Most records waiting to be exported; a line past them is dropped.
pub const QUEUE_MAX: usize = 2048;

/// Most records in one export request.
pub const BATCH_MAX: usize = 512;

/// Most bytes of a line a record carries: a longer line is cut (on a
/// character boundary) and its record marked `cohort.truncated`. With
/// [`QUEUE_MAX`], it bounds the queue's memory at 16 MiB however large
/// the jobs' logs are.
pub const BODY_BYTES_MAX: usize = 8 << 10;

static LOGGER: OnceLock<SdkLogger> = OnceLock::new();
/// Records handed to the SDK and not yet taken by an export.
static QUEUED: AtomicUsize = AtomicUsize::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Whether job log lines are forwarded.
pub fn on() -> bool {
    LOGGER.get().is_some()
}

/// Lines dropped because [`QUEUE_MAX`] records were waiting.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// One line a job logged, and whose it is.
#[derive(Debug, Clone, Copy)]
pub struct Line<'a> {
    pub job_id: u64,
    pub attempt: u32,
    /// The module's digest (hex).
    pub module: &'a str,
    /// The attempt's span, or the job's context when the attempt has none.
    pub trace: Option<&'a TraceContext>,
    pub level: LineLevel,
    pub message: &'a str,
}

/// Forwards `line` as logged now, unless forwarding is off or the queue
/// is full (then it is counted in [`dropped`]).
pub fn emit(line: &Line<'_>) {
    let Some(logger) = LOGGER.get() else {
        return;
    };
    if opentelemetry::Context::is_current_telemetry_suppressed() {
        return;
    }
    if QUEUED.fetch_add(1, Ordering::Relaxed) >= QUEUE_MAX {
        QUEUED.fetch_sub(1, Ordering::Relaxed);
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let mut record = logger.create_log_record();
    fill(&mut record, line, SystemTime::now());
    logger.emit(record);
}

/// The severity of a job's level.
fn severity(level: LineLevel) -> Severity {
    match level {
        LineLevel::Trace => Severity::Trace,
        LineLevel::Debug => Severity::Debug,
        LineLevel::Info => Severity::Info,
        LineLevel::Warn => Severity::Warn,
        LineLevel::Error => Severity::Error,
    }
}

/// Writes `line`, logged `at`, into `record`.
fn fill(record: &mut impl LogRecord, line: &Line<'_>, at: SystemTime) {
    record.set_severity_number(severity(line.level));
    record.set_severity_text(line.level.name());
    record.set_timestamp(at);
    let mut cut = line.message.len().min(BODY_BYTES_MAX);
    while !line.message.is_char_boundary(cut) {
        cut -= 1;
    }
    record.set_body(AnyValue::from(line.message[..cut].to_string()));
    if cut < line.message.len() {
        record.add_attribute("cohort.truncated", true);
    }
    record.add_attribute(
        "cohort.job_id",
        i64::try_from(line.job_id).unwrap_or(i64::MAX),
    );
    record.add_attribute("cohort.attempt", i64::from(line.attempt));
    record.add_attribute("cohort.node", super::node().to_string());
    if !line.module.is_empty() {
        record.add_attribute("cohort.module", line.module.to_string());
    }
    if let Some(trace) = line.trace {
        record.set_trace_context(
            TraceId::from_bytes(trace.trace_id),
            SpanId::from_bytes(trace.span_id),
            Some(TraceFlags::new(trace.flags & 1)),
        );
    }
}

/// The OTLP exporter, counting the records it takes off the queue.
#[derive(Debug)]
struct Counted(opentelemetry_otlp::LogExporter);

impl LogExporter for Counted {
    fn export(
        &self,
        batch: LogBatch<'_>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        QUEUED.fetch_sub(batch.iter().count(), Ordering::Relaxed);
        self.0.export(batch)
    }

    fn shutdown_with_timeout(&self, timeout: std::time::Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.0.set_resource(resource);
    }
}

/// Starts forwarding: records go to `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`
/// when set, else `url` + `/v1/logs` (`url`: the node's `--otlp-endpoint`),
/// else to `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/logs`. The provider is
/// the caller's to shut down.
pub(super) fn start(
    url: Option<&str>,
    resource: opentelemetry_sdk::Resource,
    client: super::otlp::Client,
) -> anyhow::Result<SdkLoggerProvider> {
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let mut exporter = opentelemetry_otlp::LogExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_http_client(client);
    let logs_endpoint =
        std::env::var("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT").is_ok_and(|v| !v.is_empty());
    if let Some(url) = url
        && !logs_endpoint
    {
        exporter = exporter.with_endpoint(logs_url(url));
    }
    let processor = BatchLogProcessor::builder(Counted(exporter.build()?))
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(QUEUE_MAX)
                .with_max_export_batch_size(BATCH_MAX)
                .build(),
        )
        .build();
    let provider = SdkLoggerProvider::builder()
        .with_resource(resource)
        .with_log_processor(processor)
        .build();
    let _ = LOGGER.set(provider.logger("cohort.job"));
    Ok(provider)
}

/// Where records go for a node exporting to `url`.
fn logs_url(url: &str) -> String {
    format!("{}/v1/logs", url.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::Key;

    #[test]
    fn a_line_becomes_a_record_with_its_job_level_and_trace() {
        let provider = SdkLoggerProvider::builder().build();
        let logger = provider.logger("test");
        let trace = TraceContext {
            trace_id: [0x4b; 16],
            span_id: [0x0f; 8],
            flags: 1,
            link: false,
        };
        let line = Line {
            job_id: 42,
            attempt: 2,
            module: "ab12",
            trace: Some(&trace),
            level: LineLevel::Warn,
            message: "disk almost full",
        };
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let mut record = logger.create_log_record();
        fill(&mut record, &line, at);
        assert_eq!(record.severity_number(), Some(Severity::Warn));
        assert_eq!(record.severity_text(), Some("WARN"));
        assert_eq!(record.timestamp(), Some(at));
        assert_eq!(
            record.body(),
            Some(&AnyValue::from("disk almost full".to_string()))
        );
        let attribute = |key: &str| {
            record
                .attributes_iter()
                .find(|(k, _)| *k == Key::from(key.to_string()))
                .map(|(_, v)| v.clone())
        };
        assert_eq!(attribute("cohort.job_id"), Some(AnyValue::Int(42)));
        assert_eq!(attribute("cohort.attempt"), Some(AnyValue::Int(2)));
        assert_eq!(
            attribute("cohort.module"),
            Some(AnyValue::from("ab12".to_string()))
        );
        assert!(attribute("cohort.node").is_some());
        let context = record.trace_context().unwrap();
        assert_eq!(context.trace_id, TraceId::from_bytes([0x4b; 16]));
        assert_eq!(context.span_id, SpanId::from_bytes([0x0f; 8]));
        assert_eq!(context.trace_flags, Some(TraceFlags::SAMPLED));

        // Without a trace, the record has no ids (the SDK would otherwise
        // take the current context's, and a job thread has none).
        let mut untraced = logger.create_log_record();
        fill(
            &mut untraced,
            &Line {
                trace: None,
                ..line
            },
            at,
        );
        assert!(untraced.trace_context().is_none());
        assert!(attribute("cohort.truncated").is_none());

        // A line past the body's bound is cut on a character boundary and
        // says so.
        let long = format!("{}é", "x".repeat(BODY_BYTES_MAX - 1));
        let mut cut = logger.create_log_record();
        fill(
            &mut cut,
            &Line {
                message: &long,
                ..line
            },
            at,
        );
        assert_eq!(
            cut.body(),
            Some(&AnyValue::from("x".repeat(BODY_BYTES_MAX - 1)))
        );
        let truncated = (cut.attributes_iter())
            .find(|(k, _)| *k == Key::from("cohort.truncated"))
            .map(|(_, v)| v.clone());
        assert_eq!(truncated, Some(AnyValue::Boolean(true)));
    }

    #[test]
    fn every_job_level_has_its_severity() {
        for (level, number, name) in [
            (LineLevel::Trace, Severity::Trace, "TRACE"),
            (LineLevel::Debug, Severity::Debug, "DEBUG"),
            (LineLevel::Info, Severity::Info, "INFO"),
            (LineLevel::Warn, Severity::Warn, "WARN"),
            (LineLevel::Error, Severity::Error, "ERROR"),
        ] {
            assert_eq!((severity(level), level.name()), (number, name));
        }
    }

    #[test]
    fn records_go_to_v1_logs_under_the_endpoint() {
        assert_eq!(
            logs_url("http://collector:4318/"),
            "http://collector:4318/v1/logs"
        );
        assert_eq!(logs_url("http://c:4318"), "http://c:4318/v1/logs");
    }
}
