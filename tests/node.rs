//! End-to-end tests of `cohort node`: real processes on loopback, driven
//! over HTTP and through the CLI, killed and restarted on their data dirs.

mod support;

use cohort::api::ErrorCode;
use cohort::api::types::*;
use cohort::client::{ClientError, Node as Api};
use hyper::Method;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{
    Node, SETTLE, converge, eventually, eventually_async, guest, job, parse_event, runtime, settle,
    upload,
};

/// The status and code of an API error; checks that the body said whether
/// a retry may help, as the code's table does (`job_not_finished` is a
/// `409` that is retryable: only the body can say so).
async fn api_error(result: Result<impl std::fmt::Debug, ClientError>) -> (u16, String) {
    match result {
        Err(ClientError::Api {
            status,
            code,
            retryable,
            ..
        }) => {
            let known: ErrorCode = code.parse().expect("one of the API's codes");
            assert_eq!(retryable, known.retryable(), "{code}'s retryable");
            (status, code)
        }
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[test]
fn examples_run_through_the_cli_and_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &["--slots", "2"]);

    // CLI: upload + submit + wait prints the job's output.
    let input = dir.path().join("words.txt");
    std::fs::write(&input, "the cat saw the dog").unwrap();
    let wordcount = guest("wordcount");
    let out = node.cli(
        &[
            "submit",
            wordcount.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
            "--wait",
        ],
        b"",
    );
    assert!(out.status.success(), "{out:?}");
    let counted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(counted["words"], 5);
    assert_eq!(counted["unique"], 4);

    // Input from stdin, id printed, then status/result/jobs.
    let out = node.cli(
        &["submit", wordcount.to_str().unwrap(), "-i", "-"],
        b"a b a",
    );
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let out = node.cli(&["result", &id, "--wait"], b"");
    assert!(out.status.success(), "{out:?}");
    let counted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(counted["words"], 3);
    let out = node.cli(&["status", &id], b"");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("succeeded"), "{text}");
    assert!(
        text.contains("counted 3 words"),
        "the log tail is shown: {text}"
    );
    // And what it cost: each attempt, and the job's attempts together.
    let cost = costs_printed(&text);
    assert_eq!(cost.len(), 2, "the attempt's and the job's: {text}");
    assert_eq!(cost[0], cost[1], "one attempt: {text}");
    let out = node.cli(&["jobs", "--json"], b"");
    let page: JobListResponse = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(page.jobs.len(), 2);
    let out = node.cli(&["cluster"], b"");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("master on"),
        "{out:?}"
    );

    // Many jobs with a progress bar and a summary.
    let echo = guest("fixture_echo");
    let out = node.cli(
        &["submit", echo.to_str().unwrap(), "--many", "200", "--wait"],
        b"",
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("200 jobs: 200 succeeded"),
        "{out:?}"
    );

    // The API: JSON and base64 inputs, priorities, the raw result.
    runtime().block_on(async {
        let client = Api::new(&node.url);
        let echo = upload(&client, "fixture_echo").await;
        let mut request = job(&echo, "");
        request.input = None;
        request.input_json = Some(serde_json::json!({"n": 7}));
        let accepted = client.submit(&request).await.unwrap();
        assert_eq!(settle(&client, accepted.id).await.state, "succeeded");
        assert_eq!(
            &client.result(accepted.id).await.unwrap()[..],
            br#"{"n":7}"#
        );
        request.input_json = None;
        request.input_base64 = Some("AAEC/w==".into());
        let accepted = client.submit(&request).await.unwrap();
        settle(&client, accepted.id).await;
        assert_eq!(
            &client.result(accepted.id).await.unwrap()[..],
            &[0, 1, 2, 255]
        );
        let metrics = client
            .call(Method::GET, "/metrics", "text/plain", Default::default())
            .await
            .unwrap()
            .1;
        let metrics = String::from_utf8_lossy(&metrics);
        assert!(
            metrics.contains("cohort_jobs{state=\"succeeded\"} 204"),
            "{metrics}"
        );
        assert!(metrics.contains("cohort_journal_syncs_total"), "{metrics}");
        // A lone node is the one voter, its own majority.
        assert!(metrics.contains("cohort_voters 1"), "{metrics}");
        assert!(metrics.contains("cohort_replicas_needed 1"), "{metrics}");
        // The node hosts the master's Wasm component: its memory is shown.
        let memory: u64 = (metrics.lines())
            .find_map(|l| l.strip_prefix("cohort_master_memory_bytes "))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(memory > 0, "{metrics}");
        // It decided those jobs in passes: the longest is shown.
        let longest: f64 = (metrics.lines())
            .find_map(|l| l.strip_prefix("cohort_master_pass_longest_seconds "))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0);
        assert!(longest > 0.0, "{metrics}");
    });
}

/// The costs `cohort status` prints (`CPU 0.123 ms, peak memory 1088
/// KiB, outbound 0 bytes`), each checked for its shape.
fn costs_printed(text: &str) -> Vec<String> {
    (text.match_indices("CPU "))
        .map(|(at, _)| {
            let cost = &text[at..];
            let cost = &cost[..cost.find(" bytes").expect("outbound bytes") + 6];
            let words: Vec<&str> = cost.split(' ').collect();
            assert_eq!(words.len(), 10, "{cost:?}");
            let cpu: f64 = words[1].parse().expect("CPU ms");
            assert!(cpu > 0.0 && words[2] == "ms,", "{cost:?}");
            assert!(words[5].parse::<u64>().expect("KiB") > 0, "{cost:?}");
            assert_eq!(&words[7..], ["outbound", "0", "bytes"], "{cost:?}");
            cost.to_owned()
        })
        .collect()
}

/// Sends `request` as raw bytes and reads the response status and body.
fn raw_exchange(url: &str, request: &str) -> (u16, String) {
    use std::io::Read;
    let addr = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    // The server closes after refusing a body it did not read.
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        response.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&response).contains("}") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[test]
fn bad_input_gets_a_stable_code_and_the_node_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    // No worker: jobs stay queued, so queue and cancel behaviour is exact.
    let node = Node::start(dir.path(), &["--slots", "0", "--queue-max", "3"]);
    runtime().block_on(async {
        let client = Api::new(&node.url);
        let raw = |method: Method, path: &'static str, body: Vec<u8>| {
            let client = client.clone();
            async move {
                client
                    .call(method, path, "application/json", body.into())
                    .await
            }
        };
        let cases: Vec<(Method, &str, Vec<u8>, u16, &str)> = vec![
            (
                Method::POST,
                "/v1/modules",
                b"garbage".to_vec(),
                422,
                "module_invalid",
            ),
            (
                Method::POST,
                "/v1/modules",
                b"\0asm\x01\0\0\0".to_vec(),
                422,
                "module_invalid",
            ),
            (
                Method::POST,
                "/v1/modules",
                std::fs::read(guest("fixture_wrong_world")).unwrap(),
                422,
                "module_wrong_world",
            ),
            (
                Method::POST,
                "/v1/modules",
                std::fs::read(guest("fixture_future_job")).unwrap(),
                422,
                "module_job_version",
            ),
            (
                Method::POST,
                "/v1/modules",
                std::fs::read(guest("fixture_foreign_import")).unwrap(),
                422,
                "module_unsupported_import",
            ),
            (Method::POST, "/v1/jobs", b"{bad".to_vec(), 400, "bad_json"),
            (
                Method::POST,
                "/v1/jobs",
                br#"{"module": "00", "surprise": 1}"#.to_vec(),
                400,
                "bad_json",
            ),
            (
                Method::POST,
                "/v1/jobs",
                format!(r#"{{"module": "{}"}}"#, "ab".repeat(32)).into_bytes(),
                422,
                "module_not_found",
            ),
            (Method::GET, "/v1/jobs/999", vec![], 404, "job_not_found"),
            (Method::GET, "/v1/jobs/abc", vec![], 400, "bad_request"),
            (
                Method::GET,
                "/v1/jobs?state=sleepy",
                vec![],
                400,
                "bad_request",
            ),
            (
                Method::POST,
                "/v1/jobs/wait",
                b"[1]".to_vec(),
                400,
                "bad_json",
            ),
            (
                Method::POST,
                "/v1/jobs/wait",
                br#"{"ids": [-1]}"#.to_vec(),
                400,
                "bad_json",
            ),
            (
                Method::POST,
                "/v1/jobs/wait",
                format!(r#"{{"ids": [{}1]}}"#, "1,".repeat(10_000)).into_bytes(),
                413,
                "body_too_large",
            ),
            (
                Method::GET,
                "/v1/jobs/wait",
                vec![],
                405,
                "method_not_allowed",
            ),
            (Method::GET, "/v1/nothing", vec![], 404, "not_found"),
            (Method::PUT, "/v1/jobs", vec![], 405, "method_not_allowed"),
        ];
        for (method, path, body, status, code) in cases {
            let got = api_error(raw(method.clone(), path, body).await).await;
            assert_eq!(got, (status, code.to_string()), "{method} {path}");
        }

        // An oversized body is refused from its declared length, unread.
        let (status, body) = raw_exchange(
            &node.url,
            "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 7340032\r\n\r\n",
        );
        assert_eq!(status, 413, "{body}");
        assert!(body.contains("body_too_large"), "{body}");

        let echo = upload(&client, "fixture_echo").await;
        let mut bad = job(&echo, "x");
        bad.max_attempts = Some(0);
        assert_eq!(
            api_error(client.submit(&bad).await).await,
            (422, "invalid_job".into())
        );
        let mut both = job(&echo, "x");
        both.input_base64 = Some("eA==".into());
        assert_eq!(
            api_error(client.submit(&both).await).await,
            (400, "bad_request".into())
        );

        // Idempotency: the same key is the same job; another input conflicts.
        let mut keyed = job(&echo, "once");
        keyed.idempotency_key = Some("k1".into());
        let first = client.submit(&keyed).await.unwrap();
        let again = client.submit(&keyed).await.unwrap();
        assert_eq!((again.id, again.existing), (first.id, true));
        keyed.input = Some("twice".into());
        assert_eq!(
            api_error(client.submit(&keyed).await).await,
            (409, "idempotency_conflict".into())
        );

        // The queue holds three; the fourth is refused with 429.
        let second = client.submit(&job(&echo, "2")).await.unwrap();
        client.submit(&job(&echo, "3")).await.unwrap();
        assert_eq!(
            api_error(client.submit(&job(&echo, "4")).await).await,
            (429, "queue_full".into())
        );

        // Cancel a queued job; it is then finished; it has no result.
        let cancelled = client.cancel(second.id).await.unwrap();
        assert_eq!(cancelled.state, "cancelled");
        assert_eq!(
            api_error(client.cancel(second.id).await).await,
            (409, "job_finished".into())
        );
        assert_eq!(
            api_error(client.result(second.id).await).await,
            (409, "job_not_succeeded".into())
        );
        assert_eq!(
            api_error(client.result(first.id).await).await,
            (409, "job_not_finished".into())
        );
        // With room again, submissions are accepted.
        client.submit(&job(&echo, "5")).await.unwrap();
        let health = client
            .call(Method::GET, "/healthz", "text/plain", Default::default())
            .await
            .unwrap();
        assert_eq!(health.0, 200);
    });
}

#[test]
fn failing_jobs_end_with_their_code_and_do_not_disturb_others() {
    failing_jobs(&["--slots", "4"]);
}

/// The same in sandbox processes: a timeout is a kill, a cancel drops
/// (and so kills) the job's process, and the node's slot comes back.
#[test]
fn failing_jobs_in_sandbox_processes_end_the_same_way() {
    failing_jobs(&["--slots", "4", "--job-isolation", "process"]);
}

fn failing_jobs(args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), args);
    runtime().block_on(async {
        let client = Api::new(&node.url);
        let once = |module: &str, input: &str, timeout_ms: Option<u64>, memory: Option<u64>| {
            let mut request = job(module, input);
            request.max_attempts = Some(1);
            request.timeout_ms = timeout_ms;
            request.memory_bytes = memory;
            request
        };
        let trap = upload(&client, "fixture_trap").await;
        let spin = upload(&client, "fixture_spin").await;
        let hog = upload(&client, "fixture_hog").await;
        let bigout = upload(&client, "fixture_bigout").await;
        let wordcount = upload(&client, "wordcount").await;
        let echo = upload(&client, "fixture_echo").await;
        let mut not_utf8 = once(&wordcount, "", None, None);
        not_utf8.input = None;
        not_utf8.input_base64 = Some("//79".into());
        let cases = vec![
            (once(&trap, "", None, None), "dead", "trap"),
            (once(&spin, "", Some(300), None), "dead", "timeout"),
            (once(&spin, "sleep", Some(300), None), "dead", "timeout"),
            (
                once(&hog, "", None, Some(32 << 20)),
                "failed",
                "memory_limit",
            ),
            (
                once(&bigout, "32", None, None),
                "failed",
                "output_too_large",
            ),
            (not_utf8, "failed", "job_error"),
        ];
        let mut ids = Vec::new();
        for (request, _, _) in &cases {
            ids.push(client.submit(request).await.unwrap().id);
        }
        let fine = client.submit(&job(&echo, "still here")).await.unwrap();
        let mut ended = Vec::new();
        for (id, (_, state, code)) in ids.into_iter().zip(&cases) {
            let job = settle(&client, id).await;
            assert_eq!(job.state, *state, "{job:?}");
            assert_eq!(job.error.as_ref().unwrap().code, *code, "{job:?}");
            ended.push(job);
        }
        let fine = settle(&client, fine.id).await;
        assert_eq!(fine.state, "succeeded");

        // Every attempt says what it cost, as its sandbox measured it: one
        // spinning until its timeout used CPU, one sleeping until its
        // timeout little; the job's usage is its attempts' together.
        let cost = |job: &JobResponse| job.attempts[0].usage.expect("metered");
        let (spun, slept) = (cost(&ended[1]), cost(&ended[2]));
        assert!(spun.cpu_us >= 40_000, "spinning for 300 ms used {spun:?}");
        assert!(
            slept.cpu_us < spun.cpu_us,
            "sleeping used {slept:?}, spinning {spun:?}"
        );
        assert!(
            cost(&fine).cpu_us > 0 && cost(&fine).memory_peak_bytes > 0,
            "{fine:?}"
        );
        assert_eq!(cost(&fine).egress_bytes, 0);
        for job in ended.iter().chain([&fine]) {
            assert_eq!(job.usage, cost(job), "one attempt: the job's usage is its");
        }

        // A retryable failure is retried with backoff, then dead-lettered.
        let mut retried = job(&trap, "");
        retried.max_attempts = Some(2);
        let id = client.submit(&retried).await.unwrap().id;
        let dead = settle(&client, id).await;
        assert_eq!(dead.state, "dead");
        assert_eq!(dead.attempts.len(), 2);
        assert!(dead.attempts[1].started_at >= dead.attempts[0].ended_at.unwrap() + 500);
        let each: Vec<_> = dead.attempts.iter().map(|a| a.usage.unwrap()).collect();
        assert_eq!(dead.usage.cpu_us, each[0].cpu_us + each[1].cpu_us);
        assert_eq!(
            dead.usage.memory_peak_bytes,
            each[0].memory_peak_bytes.max(each[1].memory_peak_bytes)
        );
        // The node counts the CPU of every attempt it ran and reported.
        let cpu = support::metric_f64(&client, "cohort_job_cpu_seconds_total").await;
        assert!(cpu >= spun.cpu_us as f64 / 1e6, "{cpu} s counted");
        let attempts = support::metric(&client, "cohort_job_attempts_metered_total").await;
        assert_eq!(attempts, 9, "the 7 jobs above and the retried one's 2");

        // A running job is cancelled: the attempt stops and frees its slot.
        let mut long = job(&spin, "");
        long.timeout_ms = Some(600_000);
        let id = client.submit(&long).await.unwrap().id;
        eventually_async(&format!("job {id} to run"), SETTLE, async || {
            match client.job(id, 0).await.unwrap().state.as_str() {
                "running" => Ok(()),
                state => Err(format!("it is {state}")),
            }
        })
        .await;
        assert_eq!(client.cancel(id).await.unwrap().state, "cancelled");
        eventually_async(
            "the cancelled attempt to stop",
            SETTLE,
            async || match client
                .cluster()
                .await
                .unwrap()
                .workers
                .first()
                .map(|w| w.running)
            {
                Some(0) => Ok(()),
                busy => Err(format!("the worker still runs {busy:?}")),
            },
        )
        .await;
    });
}

/// Submits echo jobs from `writers` tasks until the node stops answering;
/// returns every acknowledged `(id, input)`.
async fn burst(
    url: &str,
    module: &str,
    writers: usize,
    acked: Arc<Mutex<Vec<(u64, String)>>>,
) -> Vec<(u64, String)> {
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let client = Api::new(url);
        let module = module.to_string();
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0.. {
                let input = format!("writer {writer} job {n}");
                match client.submit(&job(&module, &input)).await {
                    Ok(accepted) => acked.lock().unwrap().push((accepted.id, input)),
                    Err(_) => return,
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    acked.lock().unwrap().clone()
}

/// Every acknowledged job is present after the restart, succeeds with its
/// own input as output, and records exactly one successful attempt.
async fn check_every_acked_job(client: &Api, acked: &[(u64, String)]) {
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for (id, input) in acked {
        let job = settle(client, *id).await;
        assert_eq!(job.state, "succeeded", "job {id}: {job:?}");
        let successes = job
            .attempts
            .iter()
            .filter(|a| a.outcome.as_deref() == Some("succeeded"))
            .count();
        assert_eq!(successes, 1, "job {id} recorded one outcome: {job:?}");
        for attempt in &job.attempts {
            *outcomes
                .entry(attempt.outcome.clone().unwrap_or_default())
                .or_default() += 1;
        }
        let result = client.result(*id).await.unwrap();
        assert_eq!(&result[..], input.as_bytes(), "job {id}");
    }
    eprintln!("attempt outcomes: {outcomes:?}");
}

#[test]
fn kill_9_during_a_burst_loses_no_acknowledged_job() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), &["--slots", "2"]);
    let rt = runtime();
    let echo = rt.block_on(upload(&Api::new(&node.url), "fixture_echo"));
    let url = node.url.clone();
    let acked = Arc::new(Mutex::new(Vec::new()));
    let submitting = rt.spawn({
        let acked = acked.clone();
        async move { burst(&url, &echo, 8, acked).await }
    });
    eventually("the burst to get going", SETTLE, || {
        match acked.lock().unwrap().len() {
            len if len >= 100 => Ok(()),
            len => Err(format!("{len} of 100 jobs acknowledged")),
        }
    });
    node.kill();
    let acked = rt.block_on(submitting).unwrap();

    let node = Node::start(dir.path(), &["--slots", "2"]);
    rt.block_on(async {
        converge(&node, "the master recovered", |c| c.master_epoch > 0).await;
        let client = Api::new(&node.url);
        check_every_acked_job(&client, &acked).await;
        // Nothing acknowledged is missing from the listing either.
        let mut listed = Vec::new();
        let mut cursor = None;
        loop {
            let page = client.jobs(None, 1000, cursor.as_deref()).await.unwrap();
            listed.extend(page.jobs.iter().map(|j| j.id));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        for (id, _) in &acked {
            assert!(listed.binary_search(id).is_ok(), "job {id} is listed");
        }
    });
}

fn newest_segment(data_dir: &Path) -> std::path::PathBuf {
    let mut segments: Vec<_> = std::fs::read_dir(data_dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segments.sort();
    segments.pop().expect("a journal segment")
}

#[test]
fn a_torn_tail_is_cut_and_a_corrupt_middle_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), &["--slots", "2"]);
    let rt = runtime();
    let acked: Vec<(u64, String)> = rt.block_on(async {
        let client = Api::new(&node.url);
        let echo = upload(&client, "fixture_echo").await;
        let mut acked = Vec::new();
        for n in 0..20 {
            let input = format!("job {n}");
            let id = client.submit(&job(&echo, &input)).await.unwrap().id;
            settle(&client, id).await;
            acked.push((id, input));
        }
        acked
    });
    node.kill();

    // A crash in the middle of a write: half a frame at the end.
    let segment = newest_segment(dir.path());
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap();
    file.write_all(&[40, 0, 0, 0, 1, 2, 3]).unwrap();
    drop(file);
    let mut node = Node::start(dir.path(), &["--slots", "2"]);
    node.wait_event("journal_torn", &[("bytes", "7")]);
    rt.block_on(check_every_acked_job(&Api::new(&node.url), &acked));
    node.kill();

    // Damage in the middle is refused with where it is, never skipped.
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[100] ^= 0x55;
    std::fs::write(&segment, bytes).unwrap();
    let stderr = match Node::try_start(dir.path(), &["--slots", "2"]) {
        Ok(mut node) => {
            let (status, stderr) = node.wait_exit();
            assert!(!status.success(), "a node ran on a corrupt journal");
            stderr
        }
        Err(stderr) => stderr,
    };
    assert!(stderr.contains("corrupt"), "{stderr}");
    assert!(stderr.contains("segment 0"), "{stderr}");
}

#[test]
fn sigterm_stops_cleanly_and_the_restart_replays_from_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), &["--slots", "2"]);
    let rt = runtime();
    let acked = rt.block_on(async {
        let client = Api::new(&node.url);
        let echo = upload(&client, "fixture_echo").await;
        let mut acked = Vec::new();
        for n in 0..30 {
            let input = format!("job {n}");
            acked.push((client.submit(&job(&echo, &input)).await.unwrap().id, input));
        }
        acked
    });
    let status = node.terminate();
    assert!(status.success(), "{status:?}: {}", node.stderr());
    // It has exited: everything it reported is there.
    let stopping = node.events("stopping");
    assert_eq!(stopping.len(), 1, "{}", node.stderr());
    assert_eq!(stopping[0]["cause"], "SIGTERM");
    assert_eq!(node.events("stopped").len(), 1, "{}", node.stderr());

    let node = Node::start(dir.path(), &["--slots", "2"]);
    let hosting = node.wait_event("hosting", &[("events_replayed", "0")]);
    assert_ne!(hosting["snapshot"], "none", "{hosting:?}");
    rt.block_on(check_every_acked_job(&Api::new(&node.url), &acked));
}

#[test]
fn two_nodes_cannot_share_a_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let _node = Node::start(dir.path(), &["--slots", "0"]);
    let stderr = match Node::try_start(dir.path(), &["--slots", "0"]) {
        Ok(_) => panic!("a second node started on the same data dir"),
        Err(stderr) => stderr,
    };
    assert!(stderr.contains("another cohort node is using"), "{stderr}");
}

/// `--cache-dir`: nodes sharing one compile the master into it once (the
/// second loads the first's artifact, and neither writes compiled code into
/// its data directory); a directory others may write to is refused, since
/// compiled code loaded from it runs as native code.
#[test]
fn nodes_share_a_private_compile_cache() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let artifacts = || -> Vec<(PathBuf, u64)> {
        let Ok(engines) = std::fs::read_dir(cache.join("compiled")) else {
            return Vec::new();
        };
        let mut found: Vec<(PathBuf, u64)> = engines
            .flat_map(|engine| std::fs::read_dir(engine.unwrap().path()).unwrap())
            .map(|file| file.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "cwasm"))
            .map(|path| {
                let inode = std::fs::metadata(&path).unwrap().ino();
                (path, inode)
            })
            .collect();
        found.sort();
        found
    };
    let env = [("COHORT_CACHE_DIR", cache.to_str().unwrap())];
    let start = |name: &str| {
        Node::try_start_env(&dir.path().join(name), &["--slots", "0"], &env)
            .unwrap_or_else(|stderr| panic!("{stderr}"))
    };
    let first = start("a");
    first.wait_event("hosting", &[]);
    let compiled = artifacts();
    assert!(
        !compiled.is_empty(),
        "nothing compiled into {}",
        cache.display()
    );
    let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the cache directory is the node user's alone");
    let second = start("b");
    second.wait_event("hosting", &[]);
    assert_eq!(
        artifacts(),
        compiled,
        "the second node compiled the master again"
    );
    for node in ["a", "b"] {
        assert!(!dir.path().join(node).join("compiled").exists(), "{node}");
    }
    drop((first, second));

    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let stderr = match Node::try_start_env(&dir.path().join("c"), &["--slots", "0"], &env) {
        Ok(_) => panic!("a node compiled into a directory anyone may write to"),
        Err(stderr) => stderr,
    };
    assert!(stderr.contains("--cache-dir"), "{stderr}");
    assert!(stderr.contains("others may write to it"), "{stderr}");
}

/// The tests read node events from stderr lines (`support::parse_event`):
/// quoted text, lists and plain values each come back whole.
#[test]
fn event_lines_parse_into_names_and_fields() {
    let line = r#"2026-11-23T13:43:28.123456Z  INFO cohort::events: hosting the master event=hosting epoch=2 voters=["n1", "n2"] reason="a \"quoted\" = text" snapshot=none"#;
    let (name, fields) = parse_event(line).unwrap();
    assert_eq!(name, "hosting");
    assert_eq!(fields["epoch"], "2");
    assert_eq!(fields["voters"], r#"["n1", "n2"]"#);
    assert_eq!(fields["reason"], r#"a "quoted" = text"#);
    assert_eq!(fields["snapshot"], "none");
    assert_eq!(fields.len(), 4);
    assert!(parse_event("  WARN cohort::node: no event here").is_none());
}

/// Deployments end to end: a name deployed with the CLI, jobs and a
/// schedule naming it, a new version, a rollback, every refusal with its
/// code, and the names surviving a kill -9 (they are master state).
#[test]
fn jobs_run_a_deployment_by_name_across_deploys_rollbacks_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), &["--slots", "2"]);
    let rt = runtime();
    let client = Api::new(&node.url);
    let echo_file = guest("fixture_echo");
    let out = node.cli(&["deploy", "greet", echo_file.to_str().unwrap()], b"");
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("version 1"),
        "{out:?}"
    );
    let (echo, wordcount) = rt.block_on(async {
        (
            upload(&client, "fixture_echo").await,
            upload(&client, "wordcount").await,
        )
    });
    rt.block_on(async {
        // A job by name runs the name's module and records name and version.
        let id = client.submit(&job("greet", "hello")).await.unwrap().id;
        let done = settle(&client, id).await;
        assert_eq!(done.state, "succeeded", "{done:?}");
        assert_eq!(
            (
                done.module.as_str(),
                done.module_name.as_deref(),
                done.module_version
            ),
            (echo.as_str(), Some("greet"), Some(1))
        );
        assert_eq!(&client.result(id).await.unwrap()[..], b"hello");

        // A new version: later jobs run it; the same module again is no new
        // version.
        let deployed = client.deploy("greet", &wordcount).await.unwrap();
        assert_eq!((deployed.version, deployed.existing), (2, false));
        let again = client.deploy("greet", &wordcount).await.unwrap();
        assert_eq!((again.version, again.existing), (2, true));
        let id = client.submit(&job("greet", "a b a")).await.unwrap().id;
        let done = settle(&client, id).await;
        assert_eq!(
            (done.module.as_str(), done.module_version),
            (wordcount.as_str(), Some(2))
        );
        let counted: serde_json::Value =
            serde_json::from_slice(&client.result(id).await.unwrap()).unwrap();
        assert_eq!(counted["words"], 3);

        // Refusals, each with its code.
        let refused = |module: &str| job(module, "x");
        assert_eq!(
            api_error(client.submit(&refused("nobody")).await).await,
            (404, "module_name_not_found".into())
        );
        assert_eq!(
            api_error(client.submit(&refused("Not A Name")).await).await,
            (422, "invalid_module_name".into())
        );
        assert_eq!(
            api_error(client.deploy("greet", &"0".repeat(64)).await).await,
            (422, "module_not_found".into())
        );
        assert_eq!(
            api_error(client.deploy("-greet", &echo).await).await,
            (422, "invalid_module_name".into())
        );
        assert_eq!(
            api_error(client.rollback("greet", Some(9)).await).await,
            (404, "module_version_not_found".into())
        );
        assert_eq!(
            api_error(client.rollback("nobody", None).await).await,
            (404, "module_name_not_found".into())
        );
    });

    // A rollback (CLI) is a new version running the previous module.
    let out = node.cli(&["rollback", "greet", "--json"], b"");
    assert!(out.status.success(), "{out:?}");
    let rolled: DeployResponse = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((rolled.version, rolled.digest.as_str()), (3, echo.as_str()));

    // Names are the master's state: they survive a kill -9.
    node.kill();
    let node = Node::start(dir.path(), &["--slots", "2"]);
    let client = Api::new(&node.url);
    rt.block_on(async {
        converge(&node, "the master recovered", |c| c.master_epoch > 0).await;
        let shown = client.deployment("greet").await.unwrap();
        let versions: Vec<(u32, Option<u32>)> = shown
            .versions
            .iter()
            .map(|v| (v.version, v.rollback_of))
            .collect();
        assert_eq!(versions, [(3, Some(1)), (2, None), (1, None)]);
        assert_eq!(shown.versions_total, 3);
        let listed = client.deployments().await.unwrap().deployments;
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].current.digest, echo);
        let id = client.submit(&job("greet", "again")).await.unwrap().id;
        assert_eq!(&settle_result(&client, id).await[..], b"again");
        // Listed by the name, whichever version each ran.
        let query = cohort::client::JobQuery {
            filter: JobFilterBody {
                module: Some("greet".into()),
                ..JobFilterBody::default()
            },
            ..cohort::client::JobQuery::default()
        };
        let listed = client.list(&query).await.unwrap().jobs;
        let versions: Vec<Option<u32>> = listed.iter().map(|j| j.module_version).collect();
        assert_eq!(versions, [Some(1), Some(2), Some(3)], "{listed:?}");

        // A schedule naming it keeps it deployed.
        let schedule = ScheduleRequest {
            name: "greeter".into(),
            every_ms: Some(3_600_000),
            job: job("greet", "tick"),
            ..ScheduleRequest::default()
        };
        client.create_schedule(&schedule).await.unwrap();
        assert_eq!(
            api_error(client.undeploy("greet").await).await,
            (409, "module_name_in_use".into())
        );
        client.delete_schedule("greeter").await.unwrap();
        assert!(client.undeploy("greet").await.unwrap().deleted);
        assert_eq!(
            api_error(client.deployment("greet").await).await,
            (404, "module_name_not_found".into())
        );
    });
}

async fn settle_result(client: &Api, id: u64) -> bytes::Bytes {
    let done = settle(client, id).await;
    assert_eq!(done.state, "succeeded", "{done:?}");
    client.result(id).await.unwrap()
}
