//! `GET /metrics`: Prometheus/OpenMetrics text, rendered per scrape from
//! the master's counters and state (prometheus-client does the encoding).

use crate::master::service::MasterCounters;
use crate::replication::ReplicationStatus;
use cohort_master::{JobState, NamespaceView, Stats};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};

type Labels = Vec<(String, String)>;

fn counter(value: u64) -> Counter<u64, AtomicU64> {
    let counter = Counter::<u64, AtomicU64>::default();
    counter.inc_by(value);
    counter
}

fn gauge(value: u64) -> Gauge {
    let gauge = Gauge::<i64>::default();
    gauge.set(value as i64);
    gauge
}

fn load(value: &AtomicU64) -> u64 {
    value.load(Ordering::Relaxed)
}

/// Attempt leases this node's worker had renewed while it prepared them
/// or stored their outputs (each attempt of each accepted `Renew`).
pub static LEASES_RENEWED: AtomicU64 = AtomicU64::new(0);

/// Renders every metric.
pub fn render(
    stats: &Stats,
    namespaces: &[NamespaceView],
    counters: &MasterCounters,
    replication: &ReplicationStatus,
    responses: &Family<Labels, Counter<u64, AtomicU64>>,
) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::with_prefix("cohort");
    register_jobs(&mut registry, stats);
    register_namespaces(&mut registry, namespaces);
    register_journal(&mut registry, counters, replication);
    register_master(&mut registry, counters);
    register_replication(&mut registry, replication);
    registry.register(
        "http_responses",
        "HTTP responses by status",
        responses.clone(),
    );
    register_security(&mut registry);
    register_egress(&mut registry);
    register_usage(&mut registry);
    register_modules(&mut registry);
    register_worker_blobs(&mut registry);
    let mut out = String::new();
    encode(&mut out, &registry)?;
    Ok(out)
}

/// The master's view of the jobs and workers.
fn register_jobs(registry: &mut Registry, stats: &Stats) {
    let jobs = Family::<Labels, Gauge>::default();
    for state in JobState::ALL {
        jobs.get_or_create(&vec![("state".into(), state.name().into())])
            .set(stats.jobs[state as usize] as i64);
    }
    registry.register("jobs", "Jobs known to the master, by state", jobs);
    registry.register(
        "jobs_submitted",
        "Jobs accepted since the journal began",
        counter(stats.submitted_total),
    );
    registry.register(
        "attempts",
        "Attempts started since the journal began",
        counter(stats.attempts_total),
    );
    registry.register(
        "retries",
        "Attempts re-queued after a failure or expiry",
        counter(stats.retries_total),
    );
    registry.register(
        "workers",
        "Workers known to the master",
        gauge(stats.workers),
    );
    registry.register(
        "result_bytes",
        "Bytes of job results held",
        gauge(stats.result_bytes),
    );
    registry.register(
        "blobs_kept",
        "Blobs the cluster keeps (uploads, and those held jobs and schedules name)",
        gauge(stats.blobs_kept),
    );
    registry.register(
        "blob_bytes_kept",
        "Bytes of the blobs the cluster keeps (each node holding a copy stores them)",
        gauge(stats.blob_bytes_kept),
    );
    registry.register(
        "assignments_with_input_blob",
        "Attempts the master started of jobs reading a blob (their input blob, or a DAG parent's output)",
        counter(stats.input_assignments),
    );
    registry.register(
        "assignments_local",
        "Of those, attempts started on a worker that said its node held the blob",
        counter(stats.local_assignments),
    );
    registry.register(
        "workers_holding_blobs",
        "Workers whose last poll said their node holds blobs",
        gauge(stats.workers_holding),
    );
    registry.register(
        "jobs_unplaceable",
        "Jobs in line that no worker the master knows has the labels and memory for",
        gauge(stats.unplaceable),
    );
}

/// This node's worker's input blobs and its cache.
fn register_worker_blobs(registry: &mut Registry) {
    use crate::blobs::counts;
    let inputs = Family::<Labels, Counter<u64, AtomicU64>>::default();
    for (place, count) in [
        ("local", &counts::INPUTS_LOCAL),
        ("fetched", &counts::INPUTS_FETCHED),
    ] {
        inputs
            .get_or_create(&vec![("where".into(), place.into())])
            .inc_by(load(count));
    }
    registry.register(
        "worker_inputs",
        "Input blobs of this node's attempts, by where they were: in its store, or fetched",
        inputs,
    );
    registry.register(
        "worker_leases_renewed",
        "Attempt leases this node's worker renewed while it fetched or compiled their module, fetched their inputs or stored their outputs",
        counter(load(&LEASES_RENEWED)),
    );
    registry.register(
        "blob_cache_evicted",
        "Blobs this node's cache removed as least recently used",
        counter(load(&counts::CACHE_EVICTED)),
    );
    registry.register(
        "blob_cache_evicted_bytes",
        "Bytes of the blobs this node's cache removed",
        counter(load(&counts::CACHE_EVICTED_BYTES)),
    );
}

/// This process's journal writes.
fn register_journal(
    registry: &mut Registry,
    counters: &MasterCounters,
    replication: &ReplicationStatus,
) {
    registry.register(
        "journal_events",
        "Events made durable by this process",
        counter(load(&counters.events)),
    );
    registry.register(
        "journal_syncs",
        "Journal fsyncs by this process",
        counter(replication.syncs),
    );
    let sync_seconds = Counter::<f64, AtomicU64>::default();
    sync_seconds.inc_by(replication.sync_nanos as f64 / 1e9);
    registry.register(
        "journal_sync_seconds",
        "Time spent in journal fsync",
        sync_seconds,
    );
}

/// The master this node hosts.
fn register_master(registry: &mut Registry, counters: &MasterCounters) {
    registry.register(
        "master_commands",
        "Commands decided by the master",
        counter(load(&counters.commands)),
    );
    registry.register(
        "snapshots",
        "Master snapshots written",
        counter(load(&counters.snapshots)),
    );
    registry.register(
        "master_memory_bytes",
        "Linear memory of the master component this node hosts (its high-water mark: Wasm memory never shrinks; 0 when it hosts none)",
        gauge(load(&counters.memory_bytes)),
    );
    let longest = Gauge::<f64, AtomicU64>::default();
    longest.set(load(&counters.pass_longest_nanos) as f64 / 1e9);
    registry.register(
        "master_pass_longest_seconds",
        "Longest the master's thread spent in one pass on this node (deciding a batch of requests and handing it to replication, a snapshot included when it takes one itself), since it started: the longest it served nothing",
        longest,
    );
}

/// How far the voters are behind the master's journal.
fn register_replication(registry: &mut Registry, replication: &ReplicationStatus) {
    registry.register(
        "replicas_needed",
        "Voters (back-end nodes, this one included) that must hold a journal batch before it is acknowledged: a majority",
        gauge(replication.needed as u64),
    );
    registry.register(
        "replicas_healthy",
        "Voters that acknowledged the master's appends in the last 3 s (this node included)",
        gauge(replication.healthy as u64),
    );
    registry.register(
        "journal_uncommitted_entries",
        "Journal entries appended on the master's node, not yet on a majority of the voters",
        gauge(replication.uncommitted),
    );
    let behind = Family::<Labels, Gauge>::default();
    for (node, entries) in &replication.behind {
        behind
            .get_or_create(&vec![("node".into(), node.clone())])
            .set(*entries as i64);
    }
    registry.register(
        "replica_behind_entries",
        "Journal entries each replica lacks",
        behind,
    );
    registry.register(
        "unreplicated_batches",
        "Batches whose callers were told replicas_unavailable",
        counter(replication.unreplicated_batches),
    );
    registry.register(
        "voters",
        "Back-end nodes in the journaled voter set, as this node's journal has it",
        gauge(replication.voters.len() as u64),
    );
}

/// What the node refused, by what and why.
fn register_security(registry: &mut Registry) {
    let refused = Family::<Labels, Counter<u64, AtomicU64>>::default();
    for ((what, reason), count) in crate::security::counters::snapshot() {
        refused
            .get_or_create(&vec![
                ("what".into(), what.into()),
                ("reason".into(), reason.into()),
            ])
            .inc_by(count);
    }
    registry.register(
        "security_refused",
        "Gossip datagrams dropped, requests and connections refused, by what and why",
        refused,
    );
}

/// The outbound calls of the attempts this node ran, by result, and their
/// body bytes: counted when an attempt is reported.
static EGRESS: std::sync::Mutex<EgressCounts> = std::sync::Mutex::new(EgressCounts {
    calls: std::collections::BTreeMap::new(),
    sent: 0,
    received: 0,
});

struct EgressCounts {
    calls: std::collections::BTreeMap<&'static str, u64>,
    sent: u64,
    received: u64,
}

/// The result a call with `error` is counted under: `ok` (a response
/// came), one of the runtime's codes ([`CallError::ALL`]), or `other` (a
/// code this build does not make, so labels stay few); calls beyond an
/// attempt's recorded ones are `unrecorded`.
///
/// [`CallError::ALL`]: crate::runtime::CallError::ALL
fn egress_result(error: Option<&str>) -> &'static str {
    match error {
        None => "ok",
        Some(code) => (crate::runtime::CallError::ALL.iter())
            .map(|error| error.code())
            .find(|known| *known == code)
            .unwrap_or("other"),
    }
}

/// Counts an attempt's reported calls (and `dropped` more, unrecorded).
pub fn count_egress(calls: &[cohort_master::HttpCall], dropped: u32) {
    if calls.is_empty() && dropped == 0 {
        return;
    }
    let mut counts = EGRESS.lock().unwrap_or_else(|e| e.into_inner());
    for call in calls {
        let result = egress_result(call.error.as_deref());
        *counts.calls.entry(result).or_default() += 1;
        counts.sent = counts.sent.saturating_add(call.sent_bytes);
        counts.received = counts.received.saturating_add(call.received_bytes);
    }
    if dropped > 0 {
        *counts.calls.entry("unrecorded").or_default() += u64::from(dropped);
    }
}

/// CPU time, in microseconds, of the attempts this node ran, counted
/// when each is reported, and how many were.
static USAGE_CPU_US: AtomicU64 = AtomicU64::new(0);
static USAGE_ATTEMPTS: AtomicU64 = AtomicU64::new(0);

/// Counts what an attempt this node ran cost.
pub fn count_usage(usage: &cohort_master::Usage) {
    USAGE_CPU_US.fetch_add(usage.cpu_us, Ordering::Relaxed);
    USAGE_ATTEMPTS.fetch_add(1, Ordering::Relaxed);
}

/// Each namespace's jobs and totals, from the master (one series per
/// namespace, and per state it holds jobs in; at most
/// [`NAMESPACES_MAX`](cohort_master::limits::NAMESPACES_MAX) namespaces).
fn register_namespaces(registry: &mut Registry, namespaces: &[NamespaceView]) {
    let jobs = Family::<Labels, Gauge>::default();
    let submitted = Family::<Labels, Counter<u64, AtomicU64>>::default();
    let metered = Family::<Labels, Counter<u64, AtomicU64>>::default();
    let cpu = Family::<Labels, Counter<f64, AtomicU64>>::default();
    let egress = Family::<Labels, Counter<u64, AtomicU64>>::default();
    let result_bytes = Family::<Labels, Gauge>::default();
    let quotas = Family::<Labels, Gauge>::default();
    let weights = Family::<Labels, Gauge>::default();
    for view in namespaces {
        let name = || vec![("namespace".to_string(), view.name.clone())];
        for state in JobState::ALL {
            let count = view.jobs[state as usize];
            if count > 0 {
                let mut labels = name();
                labels.push(("state".into(), state.name().into()));
                jobs.get_or_create(&labels).set(count as i64);
            }
        }
        let totals = &view.totals;
        submitted.get_or_create(&name()).inc_by(totals.submitted);
        metered
            .get_or_create(&name())
            .inc_by(totals.attempts_metered);
        cpu.get_or_create(&name())
            .inc_by(totals.cpu_us as f64 / 1e6);
        egress.get_or_create(&name()).inc_by(totals.egress_bytes);
        weights.get_or_create(&name()).set(i64::from(view.weight));
        let kept = i64::try_from(view.result_bytes).unwrap_or(i64::MAX);
        result_bytes.get_or_create(&name()).set(kept);
        let set = [
            ("waiting_max", view.quotas.waiting_max),
            ("running_max", view.quotas.running_max.map(u64::from)),
            (
                "submissions_per_second",
                view.quotas.submissions_per_second.map(u64::from),
            ),
            ("result_bytes_max", view.quotas.result_bytes_max),
        ];
        for (quota, value) in set {
            if let Some(value) = value {
                let mut labels = name();
                labels.push(("quota".into(), quota.into()));
                let value = i64::try_from(value).unwrap_or(i64::MAX);
                quotas.get_or_create(&labels).set(value);
            }
        }
    }
    registry.register(
        "namespace_jobs",
        "Jobs each namespace holds, by state",
        jobs,
    );
    registry.register(
        "namespace_jobs_submitted",
        "Jobs each namespace submitted since its first",
        submitted,
    );
    registry.register(
        "namespace_attempts_metered",
        "Attempts of each namespace whose worker said what they cost",
        metered,
    );
    registry.register(
        "namespace_cpu_seconds",
        "CPU time each namespace's attempts used, metered in their sandboxes, cluster-wide",
        cpu,
    );
    registry.register(
        "namespace_egress_bytes",
        "Outbound body bytes of each namespace's attempts, both ways, cluster-wide",
        egress,
    );
    registry.register(
        "namespace_result_bytes",
        "Bytes of results each namespace's held jobs keep",
        result_bytes,
    );
    registry.register(
        "namespace_quota",
        "Each namespace's quotas, by quota (only those set)",
        quotas,
    );
    registry.register(
        "namespace_weight",
        "Each namespace's weight for its fair share of the workers",
        weights,
    );
}

fn register_usage(registry: &mut Registry) {
    let cpu = Counter::<f64, AtomicU64>::default();
    cpu.inc_by(load(&USAGE_CPU_US) as f64 / 1e6);
    registry.register(
        "job_cpu_seconds",
        "CPU time the attempts this node ran used, metered in their sandboxes",
        cpu,
    );
    registry.register(
        "job_attempts_metered",
        "Attempts this node reported with what they cost (one that never started, zero)",
        counter(load(&USAGE_ATTEMPTS)),
    );
}

fn register_egress(registry: &mut Registry) {
    let counts = EGRESS.lock().unwrap_or_else(|e| e.into_inner());
    let calls = Family::<Labels, Counter<u64, AtomicU64>>::default();
    for (result, count) in &counts.calls {
        calls
            .get_or_create(&vec![("result".into(), (*result).into())])
            .inc_by(*count);
    }
    registry.register(
        "job_logs_dropped",
        "Job log lines not forwarded as OTLP log records: the export queue was full",
        counter(crate::telemetry::logs::dropped()),
    );
    registry.register(
        "egress_calls",
        "Outbound HTTP calls of the jobs this node ran, by result (ok, or why not)",
        calls,
    );
    let bytes = Family::<Labels, Counter<u64, AtomicU64>>::default();
    bytes
        .get_or_create(&vec![("direction".into(), "sent".into())])
        .inc_by(counts.sent);
    bytes
        .get_or_create(&vec![("direction".into(), "received".into())])
        .inc_by(counts.received);
    registry.register(
        "egress_body_bytes",
        "Body bytes of the outbound HTTP calls of the jobs this node ran",
        bytes,
    );
}

fn register_modules(registry: &mut Registry) {
    use crate::modules::{CompiledWhen, MODULES_COMPILED};
    let compiled = Family::<Labels, Counter<u64, AtomicU64>>::default();
    for when in [CompiledWhen::Announced, CompiledWhen::FirstJob] {
        compiled
            .get_or_create(&vec![("when".into(), when.name().into())])
            .inc_by(load(&MODULES_COMPILED[when as usize]));
    }
    registry.register(
        "modules_compiled",
        "Job modules this node compiled: when announced (ahead of their first job here) or for a job",
        compiled,
    );
}
