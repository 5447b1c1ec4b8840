//! Outbound HTTP end to end: a real node, a job (`fixture_http`) deployed
//! by name, grants given and taken with the CLI, and local servers that
//! count what reaches them. Every refusal is checked twice: the job sees
//! an error, and the attempt's record shows the call with its code; the
//! servers show that nothing refused ever arrived.

mod support;

use cohort::api::types::{CallRecord, JobResponse};
use cohort::client::Node as Api;
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use support::http::{Seen, Server, respond};
use support::*;

/// Longest a test server holds a request it never answers.
const HANG_MAX: Duration = Duration::from_secs(20);

/// A server on 127.0.0.1 that answers by path: `/big` with `big_bytes`
/// bytes, `/hang` never (until [`HANG_MAX`] or the test ends), `/trickle`
/// one byte every 200 ms, `/reject` `500 Oops`, anything else `200 hello`;
/// over TLS with `tls` when given. It records every request it reads.
fn serving(big_bytes: usize, tls: Option<Arc<rustls::ServerConfig>>) -> Server {
    let answer =
        move |seen: &Seen, writer: &mut dyn Write, stop: &AtomicBool| match seen.path.as_str() {
            "/big" => {
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {big_bytes}\r\n\r\n");
                writer.write_all(head.as_bytes())?;
                let chunk = vec![b'x'; 64 << 10];
                let mut left = big_bytes;
                while left > 0 {
                    let n = left.min(chunk.len());
                    writer.write_all(&chunk[..n])?;
                    left -= n;
                }
                Ok(())
            }
            "/hang" => {
                let until = Instant::now() + HANG_MAX;
                while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(std::io::Error::other("never answered"))
            }
            "/trickle" => {
                writer.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")?;
                for _ in 0..1000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                    writer.write_all(b"t")?;
                }
                Ok(())
            }
            "/reject" => respond(writer, "500 Oops", &[], b"oops"),
            _ => respond(writer, "200 OK", &[], b"hello"),
        };
    Server::start_with(tls, Arc::new(answer))
}

/// A call of the fixture's input.
fn call(method: &str, url: &str) -> Value {
    json!({"method": method, "url": url, "timeout_ms": 5_000})
}

/// Runs `fixture_http` (by `module`, a name or a digest) with `calls`; the
/// settled job and the fixture's results.
async fn run_calls(client: &Api, module: &str, calls: Vec<Value>) -> (JobResponse, Vec<Value>) {
    let input = json!({ "calls": calls }).to_string();
    let id = client.submit(&job(module, &input)).await.unwrap().id;
    let done = settle(client, id).await;
    assert_eq!(done.state, "succeeded", "{done:?}");
    let output: Value = serde_json::from_slice(&client.result(id).await.unwrap()).unwrap();
    let results = output["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), calls.len(), "{output}");
    (done, results)
}

/// The recorded calls of the job's last attempt.
fn calls_of(job: &JobResponse) -> &[CallRecord] {
    &job.attempts.last().expect("an attempt").calls
}

/// The error codes of the recorded calls, in order (`ok` for a response).
fn codes(job: &JobResponse) -> Vec<String> {
    calls_of(job)
        .iter()
        .map(|c| c.error.clone().unwrap_or_else(|| "ok".into()))
        .collect()
}

fn cli_ok(node: &Node, args: &[&str]) -> String {
    let out = node.cli(args, b"");
    assert!(out.status.success(), "cohort {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn deploy_caller(node: &Node) {
    let file = guest("fixture_http");
    cli_ok(node, &["deploy", "caller", file.to_str().unwrap()]);
}

/// [`deploy_caller`], granted `origin`.
fn deploy_granted(node: &Node, origin: &str) {
    deploy_caller(node);
    cli_ok(node, &["grant", "caller", "--http", origin]);
}

/// Grants, each refusal form, the Host header, bounds and timeouts,
/// revokes, and the records and metrics, on a node running jobs in its
/// threads.
#[test]
fn a_job_reaches_what_its_name_is_granted_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &["--slots", "2"]);
    grants_and_refusals(&node, dir.path());
}

/// The same checks with every job in a sandbox process.
#[test]
fn a_job_in_a_sandbox_process_is_held_to_the_same_grants() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &["--slots", "2", "--job-isolation", "process"]);
    grants_and_refusals(&node, dir.path());
}

fn grants_and_refusals(node: &Node, _dir: &Path) {
    let rt = runtime();
    // Submitted with a trace context to a node that exports no spans: the
    // jobs' calls carry none (see `a_traced_jobs_calls_join_its_trace`).
    let client = Api::new(&node.url)
        .with_traceparent(&format!("00-{TRACE}-{CLIENT_SPAN}-01"))
        .unwrap();
    // Over the 16 MiB response bound.
    let server = serving(17 << 20, None);
    let other = serving(0, None);
    let (p, q) = (server.port(), other.port());
    deploy_caller(node);
    let ok = format!("http://127.0.0.1:{p}/ok");

    rt.block_on(async {
        // No grant: no network, and the attempt says why.
        let (done, results) = run_calls(&client, "caller", vec![call("POST", &ok)]).await;
        assert_eq!(
            results[0]["wasi_code"], "HTTP-request-denied",
            "{results:?}"
        );
        assert_eq!(codes(&done), ["egress_denied"]);
        assert_eq!(calls_of(&done)[0].origin, format!("http://127.0.0.1:{p}"));
        assert!(server.seen().is_empty());
    });

    let shown = cli_ok(
        node,
        &["grant", "caller", "--http", &ok, "--methods", "POST"],
    );
    assert!(
        shown.contains(&format!("http://127.0.0.1:{p}/ok (POST)")),
        "{shown}"
    );

    rt.block_on(async {
        let odd_hosts = [
            format!("http://2130706433:{p}/ok"),
            format!("http://0x7f000001:{p}/ok"),
            format!("http://0177.0.0.1:{p}/ok"),
            format!("http://127.1:{p}/ok"),
            format!("http://0.0.0.0:{p}/ok"),
            format!("http://[::ffff:127.0.0.1]:{p}/ok"),
            format!("http://[::1]:{p}/ok"),
            format!("http://localhost:{p}/ok"),
        ];
        let mut calls = vec![
            call("POST", &ok),
            call("GET", &ok),
            call("POST", &format!("http://127.0.0.1:{p}/other")),
            call("POST", &format!("http://127.0.0.1:{p}/ok/../admin")),
            call("POST", &format!("http://127.0.0.1:{q}/ok")),
            call("POST", &format!("https://127.0.0.1:{p}/ok")),
        ];
        calls.extend(odd_hosts.iter().map(|url| call("POST", url)));
        let (done, results) = run_calls(&client, "caller", calls).await;
        assert_eq!(results[0]["status"], 200, "{results:?}");
        assert_eq!(results[0]["body"], "hello");
        for (n, result) in results.iter().enumerate().skip(1) {
            assert_eq!(
                result["wasi_code"], "HTTP-request-denied",
                "call {n}: {result}"
            );
        }
        let mut expected = vec!["ok".to_owned()];
        expected.extend(std::iter::repeat_n(
            "egress_denied".to_owned(),
            results.len() - 1,
        ));
        assert_eq!(codes(&done), expected);
        // Only the granted call arrived, with the authority as its Host.
        let seen = server.seen();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(
            (seen[0].method.as_str(), seen[0].path.as_str()),
            ("POST", "/ok")
        );
        assert_eq!(seen[0].host, format!("127.0.0.1:{p}"));
        assert_eq!(seen[0].header("traceparent"), None, "{seen:?}");
        assert!(other.seen().is_empty());
        let first = &calls_of(&done)[0];
        assert_eq!((first.method.as_str(), first.status), ("POST", Some(200)));
        assert_eq!(first.received_bytes, 5);
        // The attempt's usage counts its outbound body bytes, both ways.
        let usage = done.attempts[0].usage.expect("metered");
        assert_eq!(usage.egress_bytes, first.sent_bytes + first.received_bytes);
        assert_eq!(done.usage.egress_bytes, usage.egress_bytes);

        // A job cannot set the Host header: wasi:http refuses it before
        // the node sees the request.
        let mut spoofed = call("POST", &ok);
        spoofed["headers"] = json!([["Host", "metadata.google.internal"]]);
        let (_, results) = run_calls(&client, "caller", vec![spoofed]).await;
        assert_eq!(results[0]["code"], "http_invalid_request", "{results:?}");
        assert_eq!(server.seen().len(), 1);

        // The same module by digest holds no grant: grants go with names.
        let digest = upload(&client, "fixture_http").await;
        let (done, _) = run_calls(&client, &digest, vec![call("POST", &ok)]).await;
        assert_eq!(codes(&done), ["egress_denied"]);
    });

    // A name that resolves to loopback needs `--private`; the address
    // written in a grant needs nothing more.
    let by_name = format!("http://localhost:{p}/ok");
    cli_ok(node, &["grant", "caller", "--http", &by_name]);
    rt.block_on(async {
        let (done, results) = run_calls(&client, "caller", vec![call("GET", &by_name)]).await;
        assert!(results[0]["error"].is_string(), "{results:?}");
        assert_eq!(codes(&done), ["egress_address_refused"]);
    });
    cli_ok(node, &["grant", "caller", "--http", &by_name, "--private"]);
    rt.block_on(async {
        let (done, results) = run_calls(&client, "caller", vec![call("GET", &by_name)]).await;
        assert_eq!(results[0]["status"], 200, "{results:?}");
        assert_eq!(codes(&done), ["ok"]);
    });

    // Bounds: a response over 16 MiB, a server that never answers, one
    // that trickles.
    let any = format!("http://127.0.0.1:{p}");
    cli_ok(node, &["grant", "caller", "--http", &any]);
    rt.block_on(async {
        let mut big = call("GET", &format!("{any}/big"));
        big["max_response_bytes"] = json!(64 << 20);
        big["echo_body"] = json!(false);
        let mut hang = call("GET", &format!("{any}/hang"));
        hang["timeout_ms"] = json!(1_000);
        let mut trickle = call("GET", &format!("{any}/trickle"));
        trickle["timeout_ms"] = json!(1_000);
        let (done, results) = run_calls(&client, "caller", vec![big, hang, trickle]).await;
        for result in &results {
            assert!(result["error"].is_string(), "{results:?}");
        }
        let codes = codes(&done);
        assert_eq!(codes[0], "egress_response_too_large", "{codes:?}");
        // The job's 1 s is both its own deadline and the node's first-byte
        // timeout for the call: whichever fires first ends it.
        assert_eq!(results[1]["code"], "http_timeout", "{results:?}");
        assert!(
            ["egress_timeout", "egress_unfinished"].contains(&codes[1].as_str()),
            "{codes:?}"
        );
        // The job gave up on the trickle after its 1 s: the answer came
        // (200), and the record shows how little of its body did.
        let trickled = &calls_of(&done)[2];
        assert_eq!(trickled.status, Some(200), "{trickled:?}");
        assert!(trickled.received_bytes < 1000, "{trickled:?}");
        let text = metrics(&client).await;
        for result in ["ok", "egress_denied", "egress_address_refused"] {
            assert!(
                text.contains(&format!("cohort_egress_calls_total{{result=\"{result}\"}}")),
                "{result} not counted:\n{text}"
            );
        }
    });

    // Revoked, the name's jobs have no network again.
    let left = cli_ok(node, &["revoke", "caller"]);
    assert!(left.contains("has no grants"), "{left}");
    rt.block_on(async {
        let before = server.seen().len();
        let (done, _) = run_calls(&client, "caller", vec![call("POST", &ok)]).await;
        assert_eq!(codes(&done), ["egress_denied"]);
        assert_eq!(server.seen().len(), before);
        let shown = client.deployment("caller").await.unwrap();
        assert!(shown.grants.is_empty(), "{shown:?}");
    });
}

/// A client's trace: its id, and its span a submission is a child of.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// A job on a node exporting traces calls out within its trace: each
/// request carries the job's trace id with its attempt's span as parent
/// (in place of a `traceparent` the job set, whose `tracestate` goes with
/// it) and the submission's sampled flag; a job submitted without a
/// context carries the trace its submission started. In a sandbox
/// process, so the context crosses to the child with the job.
#[test]
fn a_traced_jobs_calls_join_its_trace() {
    // Spans are accepted and thrown away (tests/tracing.rs reads them).
    let spans = Server::start(|_seen, writer, _stop| {
        let protobuf = [("content-type", "application/x-protobuf")];
        respond(writer, "200 OK", &protobuf, b"")
    });
    let endpoint = format!("http://127.0.0.1:{}", spans.port());
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(
        dir.path(),
        &[
            "--slots",
            "1",
            "--job-isolation",
            "process",
            "--otlp-endpoint",
            &endpoint,
            "--trace-sample",
            "1",
        ],
    );
    let server = serving(0, None);
    let p = server.port();
    deploy_granted(&node, &format!("http://127.0.0.1:{p}"));
    let url = format!("http://127.0.0.1:{p}/ok");
    let mut own = call("GET", &url);
    own["headers"] = json!([
        [
            "traceparent",
            "00-11111111111111111111111111111111-2222222222222222-01"
        ],
        ["tracestate", "guest=1"]
    ]);
    // The fields of a `traceparent`: trace id, parent span id, flags.
    let fields = |seen: &Seen| -> (String, String, String) {
        let header =
            (seen.header("traceparent")).unwrap_or_else(|| panic!("no traceparent: {seen:?}"));
        match header.split('-').collect::<Vec<_>>()[..] {
            ["00", trace, span, flags] => (trace.into(), span.into(), flags.into()),
            _ => panic!("not a traceparent: {header}"),
        }
    };
    let rt = runtime();
    rt.block_on(async {
        let sampled = Api::new(&node.url)
            .with_traceparent(&format!("00-{TRACE}-{CLIENT_SPAN}-01"))
            .unwrap();
        let (done, _) = run_calls(&sampled, "caller", vec![call("GET", &url), own]).await;
        assert_eq!(codes(&done), ["ok", "ok"]);
        let seen = server.seen();
        assert_eq!(seen.len(), 2, "{seen:?}");
        let (trace, parent, flags) = fields(&seen[0]);
        assert_eq!((trace.as_str(), flags.as_str()), (TRACE, "01"));
        assert_ne!(parent, CLIENT_SPAN, "the attempt's span, not the client's");
        // The job's own header gave way: one attempt, one parent.
        assert_eq!(fields(&seen[1]), fields(&seen[0]));
        assert_eq!(seen[1].header("tracestate"), None, "{seen:?}");

        // Sampled out by the client: the called service is told so.
        let unsampled = Api::new(&node.url)
            .with_traceparent(&format!("00-{TRACE}-{CLIENT_SPAN}-00"))
            .unwrap();
        run_calls(&unsampled, "caller", vec![call("GET", &url)]).await;
        let (trace, _, flags) = fields(&server.seen()[2]);
        assert_eq!((trace.as_str(), flags.as_str()), (TRACE, "00"));

        // No context sent: the submission started the job's trace.
        let plain = Api::new(&node.url);
        run_calls(&plain, "caller", vec![call("GET", &url)]).await;
        let (trace, _, flags) = fields(&server.seen()[3]);
        assert_ne!(trace, TRACE);
        assert_eq!(flags, "01");
    });
}

/// Grant commands are checked by the node and by the master, and a bad
/// one changes nothing.
#[test]
fn bad_grants_are_refused_with_their_code() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &["--slots", "1"]);
    deploy_caller(&node);
    for (url, want) in [
        ("ftp://files.example.com", "invalid_grant"),
        ("http://2130706433", "invalid_grant"),
        ("http://0.0.0.0", "invalid_grant"),
        ("http://*.com", "invalid_grant"),
        ("http://user@example.com", "invalid_grant"),
    ] {
        let out = node.cli(&["grant", "caller", "--http", url], b"");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(want),
            "{url}: {out:?}"
        );
    }
    let out = node.cli(&["grant", "nobody", "--http", "https://example.com"], b"");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("module_name_not_found"),
        "{out:?}"
    );
    let rt = runtime();
    let client = Api::new(&node.url);
    rt.block_on(async {
        let shown = client.deployment("caller").await.unwrap();
        assert!(shown.grants.is_empty(), "{shown:?}");
    });
}

/// A CA and a server configuration with a certificate it signed for
/// `127.0.0.1` and `localhost`; the CA's PEM is written to `ca_path`.
fn certified(ca_path: &Path) -> Arc<rustls::ServerConfig> {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    std::fs::write(ca_path, ca_cert.pem()).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    let cert = rcgen::CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key.into())
        .unwrap();
    Arc::new(config)
}

/// HTTPS: a server whose certificate the operator's CA (`--egress-ca`)
/// signed is reached; one signed by a CA nobody trusts is not, and the
/// record says why.
#[test]
fn https_calls_trust_the_system_roots_and_the_operators_ca_only() {
    let dir = tempfile::tempdir().unwrap();
    let trusted_ca = dir.path().join("trusted-ca.pem");
    let trusted = serving(0, Some(certified(&trusted_ca)));
    let stranger = serving(0, Some(certified(&dir.path().join("other-ca.pem"))));
    let data = dir.path().join("data");
    let ca = trusted_ca.to_str().unwrap();
    let node = Node::start(&data, &["--slots", "1", "--egress-ca", ca]);
    deploy_caller(&node);
    let (t, u) = (trusted.port(), stranger.port());
    for port in [t, u] {
        cli_ok(
            &node,
            &[
                "grant",
                "caller",
                "--http",
                &format!("https://127.0.0.1:{port}"),
            ],
        );
    }
    let rt = runtime();
    let client = Api::new(&node.url);
    rt.block_on(async {
        let calls = vec![
            call("POST", &format!("https://127.0.0.1:{t}/ok")),
            call("POST", &format!("https://127.0.0.1:{u}/ok")),
        ];
        let (done, results) = run_calls(&client, "caller", calls).await;
        assert_eq!(results[0]["status"], 200, "{results:?}");
        assert_eq!(results[0]["body"], "hello");
        assert!(results[1]["error"].is_string(), "{results:?}");
        assert_eq!(codes(&done), ["ok", "egress_tls_failed"]);
        assert_eq!(trusted.seen().len(), 1);
        assert!(stranger.seen().is_empty());
    });
    // A CA file that holds no certificate stops the node at start.
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate").unwrap();
    let refused = Node::try_start(
        &dir.path().join("data2"),
        &["--egress-ca", empty.to_str().unwrap()],
    );
    assert!(refused.is_err(), "a node started with an unusable CA file");
}

/// The webhook example end to end: deployed and granted as its README
/// says, it POSTs its event as JSON with an idempotency key that is the
/// same for the same input, and a webhook's refusal fails the job.
#[test]
fn the_webhook_example_posts_its_event_with_a_stable_idempotency_key() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &["--slots", "1"]);
    let hooks = serving(0, None);
    let p = hooks.port();
    let file = guest("webhook");
    cli_ok(&node, &["deploy", "webhook", file.to_str().unwrap()]);
    let granted = format!("http://127.0.0.1:{p}/hooks/");
    cli_ok(
        &node,
        &["grant", "webhook", "--http", &granted, "--methods", "POST"],
    );
    let rt = runtime();
    let client = Api::new(&node.url);
    rt.block_on(async {
        let input = json!({"url": format!("{granted}orders"), "event": {"order": 17}}).to_string();
        for _ in 0..2 {
            let id = client.submit(&job("webhook", &input)).await.unwrap().id;
            let done = settle(&client, id).await;
            assert_eq!(done.state, "succeeded", "{done:?}");
            let out: Value = serde_json::from_slice(&client.result(id).await.unwrap()).unwrap();
            assert_eq!(out["status"], 200);
        }
        let seen = hooks.seen();
        assert_eq!(seen.len(), 2, "{seen:?}");
        let header = |seen: &Seen, name: &str| seen.header(name).map(str::to_owned);
        for delivery in &seen {
            assert_eq!(
                (delivery.method.as_str(), delivery.path.as_str()),
                ("POST", "/hooks/orders")
            );
            assert_eq!(
                header(delivery, "content-type").as_deref(),
                Some("application/json")
            );
            let event: Value = serde_json::from_slice(&delivery.body).unwrap();
            assert_eq!(event, json!({"order": 17}));
        }
        // The same input, the same key: a webhook that honours it delivers
        // the event once.
        let key = header(&seen[0], "idempotency-key").expect("an idempotency key");
        assert_eq!(header(&seen[1], "idempotency-key"), Some(key));

        let input =
            json!({"url": format!("{granted}../reject"), "event": {"order": 18}}).to_string();
        let id = client.submit(&job("webhook", &input)).await.unwrap().id;
        let done = settle(&client, id).await;
        assert_eq!(done.state, "failed", "{done:?}");
        assert_eq!(codes(&done), ["egress_denied"]);
        let input = json!({"url": format!("http://127.0.0.1:{p}/reject"), "event": {}}).to_string();
        let id = client.submit(&job("webhook", &input)).await.unwrap().id;
        let done = settle(&client, id).await;
        assert_eq!(done.state, "failed", "{done:?}");
        assert_eq!(codes(&done), ["egress_denied"]);
    });
    // Granted, the webhook's refusal is the job's failure.
    cli_ok(
        &node,
        &[
            "grant",
            "webhook",
            "--http",
            &format!("http://127.0.0.1:{p}/reject"),
        ],
    );
    rt.block_on(async {
        let input = json!({"url": format!("http://127.0.0.1:{p}/reject"), "event": {}}).to_string();
        let id = client.submit(&job("webhook", &input)).await.unwrap().id;
        let done = settle(&client, id).await;
        assert_eq!(done.state, "failed", "{done:?}");
        let error = done.error.as_ref().expect("an error");
        assert_eq!(error.code, "job_error", "{done:?}");
        assert!(
            error
                .message
                .starts_with("webhook_rejected: the server answered 500"),
            "{done:?}"
        );
        assert_eq!(calls_of(&done)[0].status, Some(500));
    });
}

/// A submission narrows what its name is granted for that one job, and is
/// refused if it asks for more.
#[test]
fn a_submission_narrows_its_grants_and_never_widens_them() {
    use cohort::api::types::HttpGrantBody;
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &["--slots", "1"]);
    let server = serving(0, None);
    let p = server.port();
    deploy_granted(&node, &format!("http://127.0.0.1:{p}"));
    let rt = runtime();
    let client = Api::new(&node.url);
    let narrowed = |url: String, methods: &[&str], calls: &[Value]| {
        let mut request = job("caller", &json!({ "calls": calls }).to_string());
        request.egress = Some(vec![HttpGrantBody {
            url,
            methods: methods.iter().map(|m| (*m).to_owned()).collect(),
            ..HttpGrantBody::default()
        }]);
        request
    };
    rt.block_on(async {
        let calls = [
            call("POST", &format!("http://127.0.0.1:{p}/ok")),
            call("GET", &format!("http://127.0.0.1:{p}/ok")),
            call("POST", &format!("http://127.0.0.1:{p}/other")),
        ];
        let request = narrowed(format!("http://127.0.0.1:{p}/ok"), &["POST"], &calls);
        let id = client.submit(&request).await.unwrap().id;
        let done = settle(&client, id).await;
        assert_eq!(done.state, "succeeded", "{done:?}");
        assert_eq!(codes(&done), ["ok", "egress_denied", "egress_denied"]);
        // The same calls without narrowing: the name's whole grant.
        let (done, _) = run_calls(&client, "caller", calls.to_vec()).await;
        assert_eq!(codes(&done), ["ok", "ok", "ok"]);

        // Wider than the name's grants: refused at submission.
        for wider in [
            format!("http://127.0.0.1:{}", p.wrapping_add(1)),
            format!("https://127.0.0.1:{p}"),
            "http://api.example.com".to_owned(),
        ] {
            let refused = client.submit(&narrowed(wider.clone(), &[], &[])).await;
            let error = refused.expect_err("a wider grant");
            assert!(
                error.to_string().contains("invalid_grant"),
                "{wider}: {error}"
            );
        }
        // Narrowing a job submitted by digest: it has nothing to narrow.
        let digest = upload(&client, "fixture_http").await;
        let mut by_digest = narrowed(format!("http://127.0.0.1:{p}/ok"), &[], &[]);
        by_digest.module = digest;
        let error = client.submit(&by_digest).await.expect_err("by digest");
        assert!(error.to_string().contains("invalid_grant"), "{error}");
        // A job's own grants set no headers: they are the operator's.
        let mut with_header = narrowed(format!("http://127.0.0.1:{p}/ok"), &[], &[]);
        if let Some(grants) = with_header.egress.as_mut() {
            grants[0].headers.insert("x-team".into(), "ops".into());
        }
        let error = client.submit(&with_header).await.expect_err("a header");
        assert!(error.to_string().contains("invalid_grant"), "{error}");
    });
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut left = vec![dir.to_path_buf()];
    while let Some(path) = left.pop() {
        if path.is_dir() {
            left.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if let Ok(bytes) = std::fs::read(&path)
            && bytes.windows(needle.len()).any(|w| w == needle)
        {
            found.push(path);
        }
    }
    found
}

/// Secrets: set with the CLI (sealed by the node), named by a grant's
/// header, added by the node to that grant's requests only; the job never
/// holds the value, a value the server echoes is masked in the job's log,
/// no byte on the node's disk holds it, only an admin may touch secrets,
/// and a node without a cluster key refuses them.
#[test]
fn a_granted_secret_reaches_its_host_only_and_nowhere_else() {
    const VALUE: &str = "sk_live_Zq8xP3nV7kR2";
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, cohort::security::key::generate()).unwrap();
    let key_arg = key.to_str().unwrap();
    let data = dir.path().join("data");
    let node = Node::start(&data, &["--slots", "1", "--cluster-key", key_arg]);
    let admin = token_at(&node.url, &key, "admin");
    let submit = token_at(&node.url, &key, "submit,read");
    let as_admin = |args: &[&str], stdin: &[u8]| {
        let mut all = args.to_vec();
        all.extend(["--token", &admin]);
        let out = node.cli(&all, stdin);
        assert!(out.status.success(), "cohort {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let stripe = serving(0, None);
    let other = serving(0, None);
    let (s, o) = (stripe.port(), other.port());
    let file = guest("fixture_http");
    as_admin(&["deploy", "caller", file.to_str().unwrap()], b"");

    // A grant naming a secret that does not exist is refused.
    let stripe_url = format!("http://127.0.0.1:{s}/v1/");
    let header = "Authorization: Bearer {secret:STRIPE}";
    let mut args = vec!["grant", "caller", "--http", &stripe_url, "--header", header];
    args.extend(["--token", &admin]);
    let out = node.cli(&args, b"");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("secret_not_found"),
        "{out:?}"
    );

    let set = as_admin(
        &["secret", "set", "STRIPE"],
        format!("{VALUE}\n").as_bytes(),
    );
    assert!(set.contains("secret STRIPE set"), "{set}");
    // A value with a line break could never go into a header.
    let args = ["secret", "set", "BROKEN", "--token", &admin];
    let out = node.cli(&args, b"two\nlines\n");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid_secret"),
        "{out:?}"
    );
    as_admin(
        &["grant", "caller", "--http", &stripe_url, "--header", header],
        b"",
    );
    as_admin(
        &[
            "grant",
            "caller",
            "--http",
            &format!("http://127.0.0.1:{o}"),
        ],
        b"",
    );
    let listed = as_admin(&["secret", "list"], b"");
    assert!(
        listed.contains("STRIPE") && listed.contains("caller"),
        "{listed}"
    );
    assert!(!listed.contains(VALUE), "{listed}");

    let rt = runtime();
    let client = Api::with_options(&node.url, Some(&submit), None).unwrap();
    rt.block_on(async {
        let mut own = call("POST", &format!("{stripe_url}charges"));
        own["headers"] = json!([["Authorization", "Bearer the-job-s-own"]]);
        let calls = vec![own, call("POST", &format!("http://127.0.0.1:{o}/ok"))];
        let (done, results) = run_calls(&client, "caller", calls).await;
        assert_eq!(results[0]["status"], 200, "{results:?}");
        assert_eq!(codes(&done), ["ok", "ok"]);
        // The grant's host got the secret, in place of the job's header;
        // the other host got nothing.
        let seen = stripe.seen();
        let auth = |seen: &Seen| seen.header("authorization").map(str::to_owned);
        assert_eq!(
            auth(&seen[0]).as_deref(),
            Some(format!("Bearer {VALUE}").as_str())
        );
        assert_eq!(auth(&other.seen()[0]), None);
        // Nothing the job reports holds the value.
        let output = client.result(done.id).await.unwrap();
        assert!(!output.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()));
        let shown = format!("{done:?}");
        assert!(!shown.contains(VALUE), "{shown}");

        // A token without admin may not touch secrets.
        let refused = client
            .set_secret("STRIPE", "stolen")
            .await
            .expect_err("submit token");
        assert!(refused.to_string().contains("forbidden"), "{refused}");
        let refused = client.secrets().await.expect_err("submit token");
        assert!(refused.to_string().contains("forbidden"), "{refused}");
    });

    // A secret the jobs may read: granted by name, read by the job, masked
    // in its log; one a grant only puts in a header stays unreadable.
    const READ: &str = "smtp-Hq7mW2xL9";
    as_admin(&["secret", "set", "SMTP"], format!("{READ}\n").as_bytes());
    let granted = as_admin(&["grant", "caller", "--secret", "SMTP"], b"");
    assert!(granted.contains("its jobs may read: SMTP"), "{granted}");
    rt.block_on(async {
        let input = json!({ "calls": [], "secrets": ["SMTP", "STRIPE", "NONE"] }).to_string();
        let id = client.submit(&job("caller", &input)).await.unwrap().id;
        let done = settle(&client, id).await;
        assert_eq!(done.state, "succeeded", "{done:?}");
        let output: Value = serde_json::from_slice(&client.result(id).await.unwrap()).unwrap();
        assert_eq!(output["secrets"], json!([true, false, false]), "{output}");
        let log = &done.attempts.last().unwrap().log_tail;
        assert!(log.contains("secret SMTP is [secret:SMTP]"), "{log}");
        assert!(
            log.contains("[cohort] secret \"STRIPE\" is not one this job may read"),
            "{log}"
        );
        assert!(!format!("{done:?}").contains(READ), "{done:?}");
    });
    let out = node.cli(&["secret", "delete", "SMTP", "--token", &admin], b"");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("secret_in_use"),
        "{out:?}"
    );
    let revoked = as_admin(&["revoke", "caller", "--secret", "SMTP"], b"");
    assert!(!revoked.contains("may read"), "{revoked}");
    as_admin(&["secret", "delete", "SMTP"], b"");

    // In use, a secret stays; revoked, it goes.
    let out = node.cli(&["secret", "delete", "STRIPE", "--token", &admin], b"");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("secret_in_use"),
        "{out:?}"
    );
    // The value is nowhere on disk: not in the journal, the snapshots or
    // the module store.
    for value in [VALUE, READ] {
        assert_eq!(
            files_holding(&data, value.as_bytes()),
            Vec::<std::path::PathBuf>::new()
        );
    }
    as_admin(&["revoke", "caller"], b"");
    as_admin(&["secret", "delete", "STRIPE"], b"");

    // A node without a cluster key refuses secrets.
    let plain = Node::start(&dir.path().join("plain"), &["--slots", "1"]);
    let out = plain.cli(&["secret", "set", "STRIPE"], b"x\n");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("secrets_unavailable"),
        "{out:?}"
    );
}
