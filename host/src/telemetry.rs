//! Traces and structured logs: what a node tells an operator about where
//! a job's time went.
//!
//! **Traces.** A job is one trace: the node that takes the submission
//! opens `cohort.submit` (a child of the client's W3C `traceparent` when
//! it sends a valid one, a new root otherwise), the hop to the master's
//! node is `cohort.proxy`, the master's node records `cohort.master.decide`
//! and `cohort.master.commit` (journaled and replicated to a majority),
//! and each attempt is `cohort.attempt` on its worker, with
//! `cohort.module.fetch`, `cohort.module.load`, `cohort.run` and
//! `cohort.report` (the result) under it; the job's outbound calls
//! carry the attempt's span as their W3C `traceparent` (see "Trace
//! context" in [`crate::runtime::egress`]), so the services it calls join
//! the trace. The job carries its context
//! from the submission to every worker that runs it as
//! [`cohort_master::TraceContext`] in its options (26 bytes kept with the
//! job in the master, journaled, replicated and snapshotted), so a retry
//! on another worker, or after the master moved, joins the same trace.
//! A DAG's jobs join the DAG's submission; a schedule's firings start
//! traces of their own that link to the request that created it.
//!
//! Spans go out over OTLP/HTTP (protobuf) through the OpenTelemetry SDK's
//! batch processor, on its own thread, which sends through [`otlp`]'s
//! hyper client on the node's runtime. Tracing is off unless an endpoint
//! is set (`--otlp-endpoint`, or the standard `OTEL_EXPORTER_OTLP_ENDPOINT`
//! / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); sampling is parent-based
//! (`--trace-sample RATIO`, or `OTEL_TRACES_SAMPLER[_ARG]`).
//!
//! **Sampling before the span.** A submission without a client context
//! under `--trace-sample` is decided before its span is made ([`root`]),
//! with the SDK's own rule on a new trace id: sampled out, it makes no
//! span at all and its jobs carry that trace id with the sampled flag
//! clear, so nothing after it makes one either ([`wanted`]); sampled in,
//! its span carries `cohort.presampled`, which [`RootSampler`] takes as
//! the decision made (no second draw, which would sample ratio² of
//! them). Making the span and dropping it was what tracing at 1% still
//! cost a submission.
//!
//! **Logs.** `--log-format json` writes one JSON object per line
//! ([`json`]); a line inside a job's span carries the span's `job_id`,
//! `attempt`, `trace_id` and `node` as fields of its own. With
//! `--otlp-job-logs` on a node that exports traces, each line a job logs
//! through its host's `log` is also an OTLP log record ([`logs`]): the
//! runtime hands the line (masked, cut as the job's log keeps it) to the
//! attempt's observer, in a sandbox process as a frame to its node, and
//! the worker emits it with the job's id, attempt, module and the
//! attempt's trace and span ids, through the SDK's batch processor (a
//! bounded queue: a line past it is dropped and counted) to `/v1/logs`.
//!
//! Invariants: with tracing off and text logs no job span is created
//! ([`spans`] is false), so the only per-job cost is the context a client
//! sent (kept as it came); a malformed `traceparent` is ignored (the
//! submission starts a new root), never refused.

pub mod json;
pub mod logs;
pub mod otlp;

use cohort_master::TraceContext;
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceState};
use opentelemetry::{KeyValue, SpanId, TraceId};
use std::io::IsTerminal;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The `tracing` target of the job spans (enabled whatever `COHORT_LOG`
/// says, unless it names this target).
pub const TARGET: &str = "cohort::trace";

pub use crate::contract::{TRACEPARENT, traceparent};

/// How a node writes its log lines (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `key=value` lines for people.
    #[default]
    Text,
    /// One JSON object per line for machines.
    Json,
}

/// The tracing flags of `cohort node`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TraceArgs {
    /// Export traces over OTLP/HTTP to this base URL (`/v1/traces` is
    /// appended), e.g. `http://localhost:4318`. Off by default; the
    /// standard `OTEL_EXPORTER_OTLP_ENDPOINT` and
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` also turn it on.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// The fraction of new traces sampled (0 to 1; parent-based: a
    /// submission whose `traceparent` is sampled always is) [default:
    /// `OTEL_TRACES_SAMPLER[_ARG]`, else 1].
    #[arg(long, value_name = "RATIO", value_parser = parse_ratio)]
    pub trace_sample: Option<f64>,
    /// Also forward each line a job logs (its host's `log`) as an OTLP log
    /// record to `/v1/logs` under the endpoint (or
    /// `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`), with the job's id, attempt and
    /// trace. Only while traces are exported.
    #[arg(long, env = "COHORT_OTLP_JOB_LOGS")]
    pub otlp_job_logs: bool,
}

fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("`{text}` is no ratio from 0 to 1")),
    }
}

static TRACING: AtomicBool = AtomicBool::new(false);
static SPANS: AtomicBool = AtomicBool::new(false);
static JSON_LOGS: AtomicBool = AtomicBool::new(false);
static NODE: OnceLock<String> = OnceLock::new();
/// The ratio of `--trace-sample` below 1, while spans are exported: the
/// one [`root`] samples new submissions by.
static ROOT_RATIO: OnceLock<f64> = OnceLock::new();

/// The attribute of a submission's span sampled in by [`root`].
pub const PRESAMPLED: &str = "cohort.presampled";

/// How a submission starts its trace ([`root`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Root {
    /// Sampled out: make no span; the jobs carry this context (a new
    /// trace id, the sampled flag clear).
    Out(TraceContext),
    /// Sampled in: make the span with [`PRESAMPLED`], as a new root.
    In,
    /// Make the span as any other, under the client's context if it sent
    /// one: sampling is not decided here.
    Span(Option<TraceContext>),
}

/// Decides how a submission whose client sent `given` starts its trace:
/// here, by `--trace-sample`'s ratio, only for a new root on a node that
/// exports spans and writes text logs (JSON lines want every span for
/// their fields); otherwise by the SDK's sampler as the span starts.
pub fn root(given: Option<TraceContext>) -> Root {
    let ratio = match ROOT_RATIO.get() {
        Some(ratio) if given.is_none() && !JSON_LOGS.load(Ordering::Relaxed) => *ratio,
        _ => return Root::Span(given),
    };
    use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
    let ids = RandomIdGenerator::default();
    let trace_id = ids.new_trace_id();
    if sampled(ratio, trace_id) {
        return Root::In;
    }
    Root::Out(TraceContext {
        trace_id: trace_id.to_bytes(),
        span_id: ids.new_span_id().to_bytes(),
        flags: 0,
        link: false,
    })
}

/// The SDK's `TraceIdRatioBased` rule: the low 63 bits of the trace id
/// under `ratio` of their range, so a service downstream sampling by the
/// same ratio decides the same.
fn sampled(ratio: f64, trace_id: TraceId) -> bool {
    use opentelemetry_sdk::trace::{Sampler, SamplingDecision, ShouldSample};
    let decision = Sampler::TraceIdRatioBased(ratio).should_sample(
        None,
        trace_id,
        "",
        &opentelemetry::trace::SpanKind::Server,
        &[],
        &[],
    );
    decision.decision == SamplingDecision::RecordAndSample
}

/// The node's sampler under `--trace-sample`: parent-based by the ratio,
/// except that a span sampled in by [`root`] ([`PRESAMPLED`]) is sampled.
#[derive(Debug, Clone)]
struct RootSampler(opentelemetry_sdk::trace::Sampler);

impl opentelemetry_sdk::trace::ShouldSample for RootSampler {
    fn should_sample(
        &self,
        parent: Option<&opentelemetry::Context>,
        trace_id: TraceId,
        name: &str,
        kind: &opentelemetry::trace::SpanKind,
        attributes: &[KeyValue],
        links: &[opentelemetry::trace::Link],
    ) -> opentelemetry_sdk::trace::SamplingResult {
        if attributes.iter().any(|a| a.key.as_str() == PRESAMPLED) {
            return opentelemetry_sdk::trace::SamplingResult {
                decision: opentelemetry_sdk::trace::SamplingDecision::RecordAndSample,
                attributes: Vec::new(),
                trace_state: TraceState::default(),
            };
        }
        (self.0).should_sample(parent, trace_id, name, kind, attributes, links)
    }
}

/// Whether spans are exported.
pub fn tracing_on() -> bool {
    TRACING.load(Ordering::Relaxed)
}

/// Whether job spans are made at all: for export, or for the fields of
/// JSON log lines.
pub fn spans() -> bool {
    SPANS.load(Ordering::Relaxed)
}

/// Whether a job whose context is `context` gets spans past its
/// submission (the master's decision and commit, its attempts and what
/// they do). Not when the trace was sampled out and spans are only for
/// export: parent-based sampling would drop them anyway, and making them
/// was most of what tracing cost a job (the submission's own span is
/// not made either when [`root`] sampled it out; BENCHMARKS.md, "Tracing
/// cost", has what is left). JSON log lines
/// keep every job's spans for their fields; a job without a context (it
/// came through a node not tracing) gets its own.
pub fn wanted(context: Option<&TraceContext>) -> bool {
    spans()
        && (JSON_LOGS.load(Ordering::Relaxed)
            || !tracing_on()
            || context.is_none_or(|c| c.flags & 1 == 1))
}

/// This node's id, once known (the `node` of log lines and span
/// attributes).
pub fn node() -> &'static str {
    NODE.get().map_or("", String::as_str)
}

/// Names this node in what follows (log lines, spans).
pub fn set_node(id: &str) {
    let _ = NODE.set(id.to_string());
}

/// A job span at `TARGET`, or a disabled one when [`spans`] is off.
macro_rules! job_span {
    ($name:literal $(, $($fields:tt)*)?) => {
        if $crate::telemetry::spans() {
            ::tracing::info_span!(
                target: "cohort::trace",
                $name,
                node = $crate::telemetry::node(),
                trace_id = ::tracing::field::Empty
                $(, $($fields)*)?
            )
        } else {
            ::tracing::Span::none()
        }
    };
}
pub(crate) use job_span;

/// A submission's span and the context its jobs carry, its trace started
/// as [`root`] decides: `submission_span!(given, "name", fields...)`.
macro_rules! submission_span {
    ($given:expr, $name:literal $(, $($fields:tt)*)?) => {
        match $crate::telemetry::root($given) {
            $crate::telemetry::Root::Out(trace) => (::tracing::Span::none(), Some(trace)),
            $crate::telemetry::Root::In => {
                let span = $crate::telemetry::job_span!(
                    $name,
                    { $crate::telemetry::PRESAMPLED } = true
                    $(, $($fields)*)?
                );
                let trace = $crate::telemetry::job_context(&span, None);
                (span, trace)
            }
            $crate::telemetry::Root::Span(given) => {
                let span = $crate::telemetry::job_span!($name $(, $($fields)*)?);
                let trace = $crate::telemetry::job_context(&span, given);
                (span, trace)
            }
        }
    };
}
pub(crate) use submission_span;

/// A [`job_span`] inside another: none when the span it is in is none
/// (its job's trace was sampled out, see [`wanted`]), so a sampled-out
/// job's steps never start traces of their own.
macro_rules! job_step_span {
    ($name:literal $(, $($fields:tt)*)?) => {
        if ::tracing::Span::current().is_disabled() {
            ::tracing::Span::none()
        } else {
            $crate::telemetry::job_span!($name $(, $($fields)*)?)
        }
    };
}
pub(crate) use job_step_span;

/// What tracing a process was started with; [`Telemetry::shutdown`]
/// flushes what is left to export.
pub struct Telemetry {
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
    /// Job log lines' records ([`logs`]), when forwarded.
    job_logs: Option<opentelemetry_sdk::logs::SdkLoggerProvider>,
}

impl Telemetry {
    /// Exports the spans and job log records still queued (bounded by the
    /// SDK's timeout) and stops the exporters. Blocking: call it off the
    /// async workers.
    pub fn shutdown(self) {
        if let Some(provider) = self.job_logs
            && let Err(error) = provider.shutdown()
        {
            eprintln!("warning: job log records not all exported: {error}");
        }
        if let Some(provider) = self.provider
            && let Err(error) = provider.shutdown()
        {
            eprintln!("warning: traces not all exported: {error}");
        }
    }
}

/// Where traces go, when on: the endpoint from the flag or the
/// environment.
fn endpoint(args: &TraceArgs) -> Option<Option<String>> {
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v == "none");
    if disabled {
        return None;
    }
    if let Some(url) = &args.otlp_endpoint {
        return Some(Some(url.clone()));
    }
    let set = |name| std::env::var(name).is_ok_and(|v| !v.is_empty());
    (set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") || set("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .then_some(None)
}

/// Sets up the process's logging and, when `traces` asks and an endpoint
/// is configured, trace export (in the context of a tokio runtime, which
/// the exporter sends on). `instance` names the node in the resource
/// (`service.instance.id`) when it is known this early.
pub fn init(
    format: LogFormat,
    traces: Option<&TraceArgs>,
    instance: Option<&str>,
) -> anyhow::Result<Telemetry> {
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("COHORT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(crate::events::DEFAULT_FILTER));
    if !std::env::var("COHORT_LOG").is_ok_and(|v| v.contains(TARGET)) {
        filter = filter.add_directive(format!("{TARGET}=info").parse()?);
    }
    if traces.is_some_and(|t| t.otlp_job_logs && endpoint(t).is_none()) {
        eprintln!(
            "warning: --otlp-job-logs forwards nothing while traces are not exported \
             (--otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)"
        );
    }
    let (provider, job_logs) = match traces.and_then(|t| Some((t, endpoint(t)?))) {
        Some((traces, url)) => {
            let client = otlp::Client::new(tokio::runtime::Handle::try_current()?)?;
            let job_logs = match traces.otlp_job_logs {
                true => Some(logs::start(
                    url.as_deref(),
                    resource(instance),
                    client.clone(),
                )?),
                false => None,
            };
            let provider = provider(url, traces.trace_sample, instance, client)?;
            (Some(provider), job_logs)
        }
        None => (None, None),
    };
    let otel = provider.as_ref().map(|provider| {
        use opentelemetry::trace::TracerProvider;
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("cohort"))
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target(TARGET, tracing::Level::INFO),
            )
    });
    TRACING.store(provider.is_some(), Ordering::Relaxed);
    if provider.is_some()
        && let Some(ratio) = traces.and_then(|t| t.trace_sample).filter(|r| *r < 1.0)
    {
        let _ = ROOT_RATIO.set(ratio);
    }
    SPANS.store(
        provider.is_some() || format == LogFormat::Json,
        Ordering::Relaxed,
    );
    JSON_LOGS.store(format == LogFormat::Json, Ordering::Relaxed);
    use tracing_subscriber::Layer;
    let fmt = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(json::Lines)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .try_init()?;
    Ok(Telemetry { provider, job_logs })
}

/// The SDK's provider: OTLP/HTTP protobuf to `url` (or the environment's
/// endpoint), batched, parent-based sampling.
fn provider(
    url: Option<String>,
    ratio: Option<f64>,
    instance: Option<&str>,
    client: otlp::Client,
) -> anyhow::Result<opentelemetry_sdk::trace::SdkTracerProvider> {
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_http_client(client);
    if let Some(url) = url {
        exporter = exporter.with_endpoint(format!("{}/v1/traces", url.trim_end_matches('/')));
    }
    let exporter = exporter.build()?;
    let mut builder = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_resource(resource(instance))
        .with_batch_exporter(exporter);
    if let Some(ratio) = ratio {
        use opentelemetry_sdk::trace::Sampler;
        let ratio_based = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)));
        builder = builder.with_sampler(RootSampler(ratio_based));
    }
    Ok(builder.build())
}

/// What names this process in what it exports: `service.name` (unless
/// `OTEL_SERVICE_NAME` does), `service.version` and, when known,
/// `service.instance.id`.
fn resource(instance: Option<&str>) -> opentelemetry_sdk::Resource {
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name("cohort");
    }
    resource = resource.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if let Some(instance) = instance {
        resource =
            resource.with_attribute(KeyValue::new("service.instance.id", instance.to_string()));
    }
    resource.build()
}

/// Parses a W3C `traceparent` (version `00`, or a later version read as
/// `00` as the spec asks); `None` for anything malformed, or with a zero
/// id.
pub fn parse_traceparent(header: &str) -> Option<TraceContext> {
    let header = header.trim();
    let mut parts = header.split('-');
    let version = parts.next()?;
    let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
    let rest = parts.next();
    if version.len() != 2 || version == "ff" || (version == "00" && rest.is_some()) {
        return None;
    }
    if !version
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return None;
    }
    let trace_id: [u8; 16] = hex(trace)?;
    let span_id: [u8; 8] = hex(span)?;
    let [flags] = hex::<1>(flags)?;
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some(TraceContext {
        trace_id,
        span_id,
        flags,
        link: false,
    })
}

/// Lowercase hex of exactly `N` bytes.
fn hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let bytes = text.as_bytes();
    if bytes.len() != 2 * N {
        return None;
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let mut out = [0; N];
    for (i, pair) in bytes.chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// The trace id of `context` in hex, as log lines show it.
pub fn trace_id_hex(context: &TraceContext) -> String {
    TraceId::from_bytes(context.trace_id).to_string()
}

fn remote(context: &TraceContext) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(context.trace_id),
        SpanId::from_bytes(context.span_id),
        TraceFlags::new(context.flags & 1),
        true,
        TraceState::NONE,
    )
}

/// Puts `span` under `context` (or, for a `link`ing context, links it),
/// and records its `trace_id` field. Without export the field is the
/// context's own trace id.
pub fn adopt(span: &tracing::Span, context: Option<&TraceContext>) {
    if span.is_disabled() {
        return;
    }
    if tracing_on() {
        if let Some(context) = context {
            if context.link {
                span.add_link(remote(context));
            } else {
                let parent =
                    opentelemetry::Context::new().with_remote_span_context(remote(context));
                let _ = span.set_parent(parent);
            }
        }
        if let Some(own) = own_context(span) {
            span.record("trace_id", tracing::field::display(trace_id_hex(&own)));
        }
    } else if let Some(context) = context {
        span.record("trace_id", tracing::field::display(trace_id_hex(context)));
    }
}

/// `span`'s own context, when it is exported and valid: what the job
/// carries onwards.
pub fn own_context(span: &tracing::Span) -> Option<TraceContext> {
    if !tracing_on() || span.is_disabled() {
        return None;
    }
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context.is_valid().then(|| TraceContext {
        trace_id: span_context.trace_id().to_bytes(),
        span_id: span_context.span_id().to_bytes(),
        flags: span_context.trace_flags().to_u8(),
        link: false,
    })
}

/// The context a job's outbound calls carry as their `traceparent`, on a
/// node that exports spans, for a job with a context (`job`): its
/// attempt's `span`, with the sampled flag parent-based sampling took
/// from the job's; or, for a trace sampled out whose attempt has no span
/// ([`wanted`]), the job's context as it is, so the called service learns
/// the decision (`-00`) and samples the call out too, rather than
/// starting a trace of its own. `None` otherwise: the calls carry none.
pub fn outbound_context(span: &tracing::Span, job: Option<&TraceContext>) -> Option<TraceContext> {
    let job = job?;
    if !tracing_on() {
        return None;
    }
    own_context(span).or_else(|| {
        let sampled_out = job.flags & 1 == 0 && !job.link;
        sampled_out.then_some(TraceContext {
            link: false,
            ..*job
        })
    })
}

/// What a submission's steps run in: its `span`, or none when the trace
/// the jobs carry (`trace`) is sampled out ([`wanted`]), so that a
/// sampled-out submission makes no span past its own (no proxy span, no
/// span entered and left at every poll of each job of a batch). Its own
/// is none too when [`root`] sampled it out; not when the client's
/// context did, which its span joins.
pub fn steps_span(span: &tracing::Span, trace: Option<&TraceContext>) -> tracing::Span {
    if wanted(trace) {
        span.clone()
    } else {
        tracing::Span::none()
    }
}

/// Puts a submission's `span` under the client's `given` context
/// ([`adopt`]) and answers the context the jobs it submits carry: the
/// span's own when exported, else what the client sent, as it came.
pub fn job_context(span: &tracing::Span, given: Option<TraceContext>) -> Option<TraceContext> {
    adopt(span, given.as_ref());
    own_context(span).or(given)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_and_malformed_ones_are_ignored() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parse_traceparent(header).unwrap();
        assert_eq!(context.flags, 1);
        assert_eq!(traceparent(&context), header);
        assert_eq!(trace_id_hex(&context), "4bf92f3577b34da6a3ce929d0e0e4736");
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
            "not a traceparent at all",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
        // A later version may add fields after the flags.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more";
        assert_eq!(parse_traceparent(later).unwrap().flags, 0);
    }

    #[test]
    fn ratios_are_from_zero_to_one() {
        assert_eq!(parse_ratio("0.01"), Ok(0.01));
        assert_eq!(parse_ratio("1"), Ok(1.0));
        assert!(parse_ratio("1.5").is_err());
        assert!(parse_ratio("-0.1").is_err());
        assert!(parse_ratio("half").is_err());
    }

    #[test]
    fn a_presampled_root_is_sampled_and_any_other_by_its_ratio() {
        use opentelemetry_sdk::trace::{Sampler, SamplingDecision, ShouldSample};
        let none = RootSampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            0.0,
        ))));
        let kind = opentelemetry::trace::SpanKind::Server;
        let id = TraceId::from_bytes([7; 16]);
        let presampled = [KeyValue::new(PRESAMPLED, true)];
        let decide = |attributes: &[KeyValue]| {
            none.should_sample(None, id, "cohort.submit", &kind, attributes, &[])
                .decision
        };
        assert_eq!(decide(&presampled), SamplingDecision::RecordAndSample);
        assert_eq!(decide(&[]), SamplingDecision::Drop);
        // The SDK's rule on the low 63 bits of the trace id.
        let low = |n: u64| {
            let mut bytes = [0; 16];
            bytes[8..].copy_from_slice(&(n << 1).to_be_bytes());
            TraceId::from_bytes(bytes)
        };
        assert!(sampled(0.5, low(0)));
        assert!(sampled(0.5, low((1 << 62) - 1)));
        assert!(!sampled(0.5, low(1 << 62)));
        assert!(!sampled(0.0, low(0)));
        assert!(sampled(1.0, low(u64::MAX >> 1)));
    }
}
