//! Traces and JSON logs, end to end: real `cohort node` processes export
//! over OTLP/HTTP to a receiver in this test, which decodes every request
//! with the official OTLP definitions (`opentelemetry-proto`) and asserts
//! on the decoded spans and job log records (`--otlp-job-logs`); and a
//! node with `--log-format json` is read line by line.

mod support;

use cohort::client::Node as Api;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::http::{Server, respond};
use support::{
    CONVERGE, EVENT_WAIT, converge, eventually, eventually_async, job, runtime, settle, start_with,
    upload,
};

/// The client's context: its trace, and its span the submission's is a
/// child of.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// How long the nodes' batch exporters may take to send a span (their
/// schedule is 5 s).
const EXPORTED: Duration = Duration::from_secs(60);

/// One span as received, with the resource it came from.
#[derive(Debug, Clone)]
struct Received {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: Vec<KeyValue>,
    instance: Option<String>,
}

impl Received {
    fn text(&self, key: &str) -> Option<String> {
        attribute(&self.attributes, key).and_then(|value| match value {
            any_value::Value::StringValue(text) => Some(text),
            _ => None,
        })
    }

    /// An integer attribute (a field recorded after the span started
    /// arrives as its text).
    fn int(&self, key: &str) -> Option<i64> {
        attribute(&self.attributes, key).and_then(|value| match value {
            any_value::Value::IntValue(n) => Some(n),
            any_value::Value::StringValue(text) => text.parse().ok(),
            _ => None,
        })
    }
}

/// The `service.instance.id` of an export's resource: the node that sent it.
fn instance_of(resource: Option<Resource>) -> Option<String> {
    let attributes = resource.map(|r| r.attributes).unwrap_or_default();
    match attribute(&attributes, "service.instance.id") {
        Some(any_value::Value::StringValue(id)) => Some(id),
        _ => None,
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<any_value::Value> {
    (attributes.iter())
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone())
        .and_then(|AnyValue { value }| value)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One job log record as received.
#[derive(Debug, Clone)]
struct Record {
    body: String,
    severity_number: i32,
    severity_text: String,
    time_unix_nano: u64,
    trace_id: String,
    span_id: String,
    attributes: Vec<KeyValue>,
    instance: Option<String>,
}

impl Record {
    fn text(&self, key: &str) -> Option<String> {
        match attribute(&self.attributes, key) {
            Some(any_value::Value::StringValue(text)) => Some(text),
            _ => None,
        }
    }

    fn int(&self, key: &str) -> Option<i64> {
        match attribute(&self.attributes, key) {
            Some(any_value::Value::IntValue(n)) => Some(n),
            _ => None,
        }
    }
}

/// An OTLP/HTTP receiver on an ephemeral loopback port: every request
/// must be `POST /v1/traces` or `POST /v1/logs` with a protobuf body that
/// decodes.
struct Receiver {
    server: Server,
}

impl Receiver {
    fn start() -> Receiver {
        let server = Server::start(|_seen, writer, _stop| {
            // An empty ExportTraceServiceResponse: all accepted.
            respond(
                writer,
                "200 OK",
                &[("content-type", "application/x-protobuf")],
                b"",
            )
        });
        Receiver { server }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port())
    }

    /// The bodies of the requests to `path` so far (each request, to
    /// whichever path, checked).
    fn bodies(&self, path: &str) -> Vec<Vec<u8>> {
        let mut bodies = Vec::new();
        for seen in self.server.seen() {
            assert_eq!(seen.method, "POST", "{}", seen.path);
            assert!(
                ["/v1/traces", "/v1/logs"].contains(&seen.path.as_str()),
                "{}",
                seen.path
            );
            assert_eq!(seen.header("content-type"), Some("application/x-protobuf"));
            if seen.path == path {
                bodies.push(seen.body);
            }
        }
        bodies
    }

    /// Every job log record received so far.
    fn records(&self) -> Vec<Record> {
        let mut records = Vec::new();
        for body in self.bodies("/v1/logs") {
            let request = ExportLogsServiceRequest::decode(body.as_slice())
                .expect("an OTLP logs export request");
            for resource in request.resource_logs {
                let instance = instance_of(resource.resource);
                for scope in resource.scope_logs {
                    for record in scope.log_records {
                        let body = match record.body.and_then(|AnyValue { value }| value) {
                            Some(any_value::Value::StringValue(text)) => text,
                            other => panic!("a text body, not {other:?}"),
                        };
                        records.push(Record {
                            body,
                            severity_number: record.severity_number,
                            severity_text: record.severity_text,
                            time_unix_nano: record.time_unix_nano,
                            trace_id: hex(&record.trace_id),
                            span_id: hex(&record.span_id),
                            attributes: record.attributes,
                            instance: instance.clone(),
                        });
                    }
                }
            }
        }
        records
    }

    /// Every span received so far.
    fn spans(&self) -> Vec<Received> {
        let mut spans = Vec::new();
        for body in self.bodies("/v1/traces") {
            let request =
                ExportTraceServiceRequest::decode(body.as_slice()).expect("an OTLP export request");
            for resource in request.resource_spans {
                let instance = instance_of(resource.resource);
                for scope in resource.scope_spans {
                    for span in scope.spans {
                        spans.push(Received {
                            name: span.name,
                            trace_id: hex(&span.trace_id),
                            span_id: hex(&span.span_id),
                            parent: hex(&span.parent_span_id),
                            attributes: span.attributes,
                            instance: instance.clone(),
                        });
                    }
                }
            }
        }
        spans
    }
}

/// Waits until the spans received satisfy `done`; returns them.
fn received(
    receiver: &Receiver,
    what: &str,
    done: impl Fn(&[Received]) -> Result<(), String>,
) -> Vec<Received> {
    eventually(what, EXPORTED, || {
        let spans = receiver.spans();
        match done(&spans) {
            Ok(()) => Ok(spans),
            Err(why) => Err(format!("{why}; received: {spans:#?}")),
        }
    })
}

#[test]
fn a_job_submitted_through_another_node_and_retried_after_its_worker_died_is_one_trace() {
    let receiver = Receiver::start();
    let endpoint = receiver.endpoint();
    let traced = ["--otlp-endpoint", &endpoint, "--trace-sample", "1"];
    let dir = tempfile::tempdir().unwrap();
    let n1 = start_with(&dir, "n1", "back-end,front-end", None, &traced);
    let n2 = start_with(&dir, "n2", "worker,front-end", Some(&n1), &traced);
    let n3 = start_with(&dir, "n3", "worker", Some(&n1), &traced);
    let mut nodes = [Some(n2), Some(n3)];
    let rt = runtime();
    let (id, victim) = rt.block_on(async {
        converge(&n1, "both workers", |c| c.workers.len() == 2).await;
        converge(nodes[0].as_ref().unwrap(), "the master on n1", |c| {
            c.master_node == "n1"
        })
        .await;
        let primes = upload(&Api::new(&n1.url), "primes").await;
        // Through n2, which does not host the master: the proxy hop.
        let client = Api::new(&nodes[0].as_ref().unwrap().url)
            .with_traceparent(&format!("00-{TRACE}-{CLIENT_SPAN}-01"))
            .unwrap();
        // Long enough to be caught running after its submission's spans
        // were exported (n2 may be the worker that dies).
        let long = cohort::api::types::SubmitRequest {
            timeout_ms: Some(600_000),
            ..job(&primes, r#"{"limit": 2000000000}"#)
        };
        let id = (client.submit(&long).await).unwrap().id;
        let running = eventually_async("the job to run", CONVERGE, || async {
            let job = client.job(id, 0).await.unwrap();
            match (job.state.as_str(), job.attempts.last()) {
                ("running", Some(attempt)) => Ok(attempt.worker.clone()),
                _ => Err(format!("{job:?}")),
            }
        })
        .await;
        (id, running)
    });
    // The submission's spans on n2 are exported before its worker may die.
    received(&receiver, "the submission's spans", |spans| {
        let exported = |name: &str| spans.iter().any(|s| s.trace_id == TRACE && s.name == name);
        match exported("cohort.submit") && exported("cohort.proxy") {
            true => Ok(()),
            false => Err("not yet".into()),
        }
    });
    let job = rt.block_on(Api::new(&n1.url).job(id, 0)).unwrap();
    assert_eq!(
        job.state, "running",
        "still running when its worker dies: {job:?}"
    );
    // kill -9 the worker running it: its attempt's spans die with it, and
    // the master re-queues the job for the other worker.
    let index = if victim == "n2" { 0 } else { 1 };
    nodes[index].take().unwrap().kill();
    let survivor = nodes[1 - index].as_ref().unwrap();
    let job = rt.block_on(settle(&Api::new(&n1.url), id));
    assert_eq!(job.state, "succeeded", "{job:?}");
    assert_eq!(job.attempts.len(), 2, "{job:?}");
    let survivor_name = survivor.name();
    let spans = received(&receiver, "the job's trace", |spans| {
        let ours: Vec<_> = spans.iter().filter(|s| s.trace_id == TRACE).collect();
        let named = |name: &str| ours.iter().filter(|s| s.name == name).count();
        let retried = ours
            .iter()
            .any(|s| s.name == "cohort.attempt" && s.int("attempt") == Some(2));
        let reported = ours.iter().any(|s| {
            s.name == "cohort.report" && s.text("node").as_deref() == Some(&survivor_name)
        });
        if named("cohort.submit") == 1
            && named("cohort.proxy") == 1
            && named("cohort.master.decide") == 1
            && named("cohort.master.commit") == 1
            && retried
            && named("cohort.run") >= 1
            && reported
        {
            Ok(())
        } else {
            Err("not every span of the job yet".into())
        }
    });
    let ours: Vec<_> = spans.into_iter().filter(|s| s.trace_id == TRACE).collect();
    let one = |name: &str| {
        let found: Vec<_> = ours.iter().filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "{name}: {ours:#?}");
        found[0].clone()
    };
    // Submission on n2, a child of the client's span.
    let submit = one("cohort.submit");
    assert_eq!(submit.parent, CLIENT_SPAN);
    assert_eq!(submit.text("node").as_deref(), Some("n2"));
    assert_eq!(submit.instance.as_deref(), Some("n2"));
    assert_eq!(submit.int("job_id"), Some(id as i64));
    let proxy = one("cohort.proxy");
    assert_eq!(proxy.parent, submit.span_id);
    assert_eq!(proxy.text("master").as_deref(), Some("n1"));
    // The master's decision and commit, on n1, under the submission.
    for name in ["cohort.master.decide", "cohort.master.commit"] {
        let span = one(name);
        assert_eq!(span.parent, submit.span_id, "{name}");
        assert_eq!(span.text("node").as_deref(), Some("n1"), "{name}");
        assert_eq!(span.instance.as_deref(), Some("n1"), "{name}");
        assert_eq!(span.int("job_id"), Some(id as i64), "{name}");
    }
    // The retried attempt on the survivor, under the submission, with its
    // module, run and report under it.
    let attempt = (ours.iter())
        .find(|s| s.name == "cohort.attempt" && s.int("attempt") == Some(2))
        .unwrap()
        .clone();
    assert_eq!(attempt.parent, submit.span_id);
    assert_eq!(attempt.text("node"), Some(survivor_name.clone()));
    assert_eq!(attempt.int("job_id"), Some(id as i64));
    for name in ["cohort.module", "cohort.run", "cohort.report"] {
        let under = (ours.iter())
            .filter(|s| s.name == name && s.parent == attempt.span_id)
            .count();
        assert_eq!(under, 1, "{name} under the retried attempt: {ours:#?}");
    }
    let nodes: BTreeSet<_> = ours.iter().filter_map(|s| s.text("node")).collect();
    assert!(nodes.len() >= 2, "spans from {nodes:?}");
    drop(n1);
}

#[test]
fn without_tracing_nothing_is_exported_and_a_malformed_traceparent_starts_a_new_trace() {
    let receiver = Receiver::start();
    let endpoint = receiver.endpoint();
    let dir = tempfile::tempdir().unwrap();
    let quiet = start_with(&dir, "quiet", "back-end,worker,front-end", None, &[]);
    let traced = start_with(
        &dir,
        "traced",
        "back-end,worker,front-end",
        None,
        &["--otlp-endpoint", &endpoint],
    );
    let malformed = format!("00-{TRACE}-{CLIENT_SPAN}");
    // Each is a cluster of its own: submit once its master is up.
    quiet.wait_event("hosting", &[]);
    traced.wait_event("hosting", &[]);
    let rt = runtime();
    let id = rt.block_on(async {
        let mut ids = Vec::new();
        for node in [&quiet, &traced] {
            let client = Api::new(&node.url).with_traceparent(&malformed).unwrap();
            // A job that logs a line (which no node forwards: neither has
            // `--otlp-job-logs`).
            let legacy = upload(&client, "fixture_legacy_job").await;
            // Accepted as if it came without one.
            let id = client.submit(&job(&legacy, "hello")).await.unwrap().id;
            assert_eq!(settle(&client, id).await.state, "succeeded");
            ids.push(id);
        }
        ids[1]
    });
    // The traced node's submission is a root of a trace of its own.
    let spans = received(
        &receiver,
        "the traced node's submission",
        |spans| match spans.iter().any(|s| s.name == "cohort.submit") {
            true => Ok(()),
            false => Err("no submission yet".into()),
        },
    );
    let submit = spans.iter().find(|s| s.name == "cohort.submit").unwrap();
    assert_eq!(submit.parent, "", "{submit:?}");
    assert_ne!(submit.trace_id, TRACE);
    assert_eq!(submit.int("job_id"), Some(id as i64), "{submit:#?}");
    // The quiet node, stopped cleanly (a node with an exporter flushes it
    // then), sent nothing; the traced node, stopped too, sent spans but
    // no log record: its job's line is not forwarded without
    // `--otlp-job-logs`.
    let (mut quiet, mut traced) = (quiet, traced);
    assert!(quiet.terminate().success());
    assert!(traced.terminate().success());
    let spans = receiver.spans();
    assert!(
        spans
            .iter()
            .all(|s| s.text("node").as_deref() == Some("traced")),
        "{spans:#?}"
    );
    assert!(
        receiver.bodies("/v1/logs").is_empty(),
        "{:#?}",
        receiver.records()
    );
}

/// Under `--trace-sample`, a submission without a context is sampled
/// before its span is made: a job sampled out exports no span at all,
/// though it carries a trace id; a job sampled in exports its whole trace,
/// rooted at a submission marked `cohort.presampled` (sampled once, not
/// again by the SDK); a client's sampled context is followed whatever the
/// ratio.
#[test]
fn a_submission_is_sampled_before_its_span_and_only_once() {
    const JOBS: usize = 32;
    let receiver = Receiver::start();
    let endpoint = receiver.endpoint();
    let dir = tempfile::tempdir().unwrap();
    let traced = ["--otlp-endpoint", &endpoint, "--trace-sample", "0.5"];
    let mut node = start_with(&dir, "half", "back-end,worker,front-end", None, &traced);
    node.wait_event("hosting", &[]);
    let rt = runtime();
    let (jobs, marked) = rt.block_on(async {
        let client = Api::new(&node.url);
        let legacy = upload(&client, "fixture_legacy_job").await;
        let mut jobs = Vec::new();
        for _ in 0..JOBS {
            let id = client.submit(&job(&legacy, "hi")).await.unwrap().id;
            let settled = settle(&client, id).await;
            assert_eq!(settled.state, "succeeded", "{settled:?}");
            let trace = (settled.trace_id.clone()).unwrap_or_else(|| panic!("{settled:?}"));
            jobs.push((id, trace));
        }
        let sampled = Api::new(&node.url)
            .with_traceparent(&format!("00-{TRACE}-{CLIENT_SPAN}-01"))
            .unwrap();
        let marked = sampled.submit(&job(&legacy, "hi")).await.unwrap().id;
        assert_eq!(settle(&client, marked).await.state, "succeeded");
        (jobs, marked)
    });
    // Stopped cleanly, the node flushes what it has to export.
    assert!(node.terminate().success());
    let spans = receiver.spans();
    let traces: BTreeSet<_> = jobs.iter().map(|(_, trace)| trace.clone()).collect();
    assert_eq!(traces.len(), JOBS, "a trace each: {jobs:?}");
    let (mut kept, mut dropped) = (0, 0);
    for (id, trace) in &jobs {
        let ours: Vec<_> = spans.iter().filter(|s| &s.trace_id == trace).collect();
        if ours.is_empty() {
            dropped += 1;
            continue;
        }
        kept += 1;
        let named = |name: &str| ours.iter().filter(|s| s.name == name).count();
        for name in [
            "cohort.submit",
            "cohort.attempt",
            "cohort.run",
            "cohort.report",
        ] {
            assert_eq!(named(name), 1, "job {id}, {name}: {ours:#?}");
        }
        let submit = ours.iter().find(|s| s.name == "cohort.submit").unwrap();
        assert_eq!(submit.parent, "", "a root: {submit:?}");
        assert_eq!(submit.int("job_id"), Some(*id as i64), "{submit:?}");
        let presampled = attribute(&submit.attributes, "cohort.presampled");
        assert_eq!(presampled, Some(any_value::Value::BoolValue(true)));
    }
    // Each trace is drawn once at 1/2: both outcomes among 32 (all one
    // way has odds of 2^-31).
    assert!(kept > 0 && dropped > 0, "{kept} kept, {dropped} dropped");
    // Nothing else was exported but the client's sampled trace, whole,
    // under its span and without the mark.
    let others: Vec<_> = (spans.iter())
        .filter(|s| !traces.contains(&s.trace_id))
        .collect();
    assert!(others.iter().all(|s| s.trace_id == TRACE), "{others:#?}");
    let submit = (others.iter())
        .find(|s| s.name == "cohort.submit")
        .unwrap_or_else(|| panic!("the client's trace: {others:#?}"));
    assert_eq!(submit.parent, CLIENT_SPAN);
    assert_eq!(submit.int("job_id"), Some(marked as i64));
    assert_eq!(attribute(&submit.attributes, "cohort.presampled"), None);
    assert!(others.iter().any(|s| s.name == "cohort.run"), "{others:#?}");
}

#[test]
fn a_jobs_log_lines_arrive_as_log_records_under_its_attempt_in_either_isolation() {
    let receiver = Receiver::start();
    let endpoint = receiver.endpoint();
    let forwarding = ["--otlp-endpoint", &endpoint, "--otlp-job-logs"];
    let dir = tempfile::tempdir().unwrap();
    let roles = "back-end,worker,front-end";
    // Two clusters of one node: jobs in the node's threads, and in
    // sandbox processes (whose lines reach the node as frames).
    let threads = start_with(&dir, "threads", roles, None, &forwarding);
    let isolated = [&forwarding[..], &["--job-isolation", "process"]].concat();
    let processes = start_with(&dir, "processes", roles, None, &isolated);
    threads.wait_event("hosting", &[]);
    processes.wait_event("hosting", &[]);
    let rt = runtime();
    let ids: Vec<(String, u64)> = rt.block_on(async {
        let mut ids = Vec::new();
        for node in [&threads, &processes] {
            let client = Api::new(&node.url)
                .with_traceparent(&format!("00-{TRACE}-{CLIENT_SPAN}-01"))
                .unwrap();
            let legacy = upload(&client, "fixture_legacy_job").await;
            let id = client.submit(&job(&legacy, "hello")).await.unwrap().id;
            assert_eq!(settle(&client, id).await.state, "succeeded");
            ids.push((node.name(), id));
        }
        ids
    });
    let line = "legacy job: 5 bytes in";
    let records = eventually("both jobs' log records", EXPORTED, || {
        let records = receiver.records();
        let from = |node: &str| {
            (records.iter())
                .any(|r| r.body == line && r.text("cohort.node").as_deref() == Some(node))
        };
        match from("threads") && from("processes") {
            true => Ok(records),
            false => Err(format!("not yet: {records:#?}")),
        }
    });
    let spans = received(&receiver, "both attempts' spans", |spans| {
        let attempts = (spans.iter())
            .filter(|s| s.name == "cohort.attempt" && s.trace_id == TRACE)
            .count();
        match attempts {
            2 => Ok(()),
            _ => Err("not yet".into()),
        }
    });
    for (node, id) in ids {
        let record = (records.iter())
            .find(|r| r.text("cohort.node").as_deref() == Some(node.as_str()))
            .unwrap();
        assert_eq!(record.body, line, "{record:#?}");
        assert_eq!(record.int("cohort.job_id"), Some(id as i64), "{record:#?}");
        assert_eq!(record.int("cohort.attempt"), Some(1), "{record:#?}");
        assert!(record.text("cohort.module").is_some(), "{record:#?}");
        // SEVERITY_NUMBER_INFO.
        assert_eq!(record.severity_number, 9, "{record:#?}");
        assert_eq!(record.severity_text, "INFO", "{record:#?}");
        assert!(record.time_unix_nano > 0, "{record:#?}");
        assert_eq!(record.instance.as_deref(), Some(node.as_str()));
        // Under the job's trace, as its attempt's span logged it.
        let attempt = (spans.iter())
            .find(|s| s.name == "cohort.attempt" && s.text("node").as_deref() == Some(&node))
            .unwrap_or_else(|| panic!("{node}'s attempt: {spans:#?}"));
        assert_eq!(record.trace_id, TRACE, "{record:#?}");
        assert_eq!(record.span_id, attempt.span_id, "{record:#?}");
    }
}

#[test]
fn json_log_lines_parse_and_name_the_job_and_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["--log-format", "json", "node", "--listen", "127.0.0.1:0"])
        .args(["--node-id", "solo", "--slots", "2", "--data-dir"])
        .arg(dir.path())
        .env(
            "COHORT_LOG",
            "warn,cohort::events=info,cohort::job_log=info",
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = Arc::new(Mutex::new(String::new()));
    let mut pipe = child.stderr.take().unwrap();
    let sink = stderr.clone();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        sink.lock().unwrap().push_str(&text);
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let url = line
        .split("listening on ")
        .nth(1)
        .expect("the address")
        .trim()
        .to_string();
    let trace = rt_submit(&url);
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = support::wait_bounded(&mut child, EVENT_WAIT, "the stopping node");
    reader.join().unwrap();
    let text = stderr.lock().unwrap().clone();
    assert!(status.success(), "{status:?}: {text}");
    let (id, trace_id) = trace;
    let mut about_the_job = 0;
    for line in text.lines() {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        for key in ["ts", "level", "target", "node"] {
            assert!(value.get(key).is_some(), "{key} in {line}");
        }
        assert_eq!(value["node"], "solo", "{line}");
        if value["target"] == "cohort::job_log" {
            assert_eq!(value["job_id"], id, "{line}");
            assert_eq!(value["attempt"], 1, "{line}");
            assert_eq!(value["trace_id"], trace_id.as_str(), "{line}");
            assert_eq!(value["span"], "cohort.attempt", "{line}");
            about_the_job += 1;
        }
    }
    assert!(about_the_job >= 1, "the job's log line: {text}");
}

/// Submits the legacy job (which logs one line) with a traceparent to the
/// node at `url` and waits for it; its id and the trace id.
fn rt_submit(url: &str) -> (u64, String) {
    runtime().block_on(async {
        let client = Api::new(url)
            .with_traceparent(&format!("00-{TRACE}-{CLIENT_SPAN}-01"))
            .unwrap();
        let legacy = upload(&client, "fixture_legacy_job").await;
        let id = client.submit(&job(&legacy, "old news")).await.unwrap().id;
        let settled = settle(&client, id).await;
        assert_eq!(settled.state, "succeeded", "{settled:?}");
        (id, TRACE.to_string())
    })
}
