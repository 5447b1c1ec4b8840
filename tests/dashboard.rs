//! The dashboard and the routes made for it, against real nodes: the API
//! routes from Rust (filters, bulk actions, the overview and its event
//! stream, inputs, modules), then the page itself in a real headless
//! Chromium (Debian's package; `tests/browser/install-chromium` installs
//! it when missing) driven by `tests/browser/dashboard.mjs` with the
//! playwright-core pinned in `tests/browser/package-lock.json`.
//! Screenshots land in `target/tmp/dashboard-screenshots/`. The page
//! test also grants a deployment an HTTP server of its own and checks the
//! grant on the modules page and a job's calls on its page.

mod support;

use cohort::api::types::{
    BulkRequest, HttpGrantBody, JobFilterBody, JobListResponse, SubmitRequest,
};
use cohort::client::Node as Api;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use support::http::{Seen, Server, respond};
use support::{Node, OBSERVE, eventually, eventually_async, run_bounded, runtime, settle, upload};

/// The repository root.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// Jobs in the journal for the first-render measurement.
const RENDER_JOBS: usize = 100_000;

/// The jobs made in each state, by state name, the echo module, and the
/// jobs that run it.
struct Jobs {
    by_state: BTreeMap<&'static str, Vec<u64>>,
    echo: String,
    echoes: Vec<u64>,
}

impl Jobs {
    /// As `COHORT_JOBS` for the browser script.
    fn json(&self) -> String {
        let mut value = serde_json::to_value(&self.by_state).unwrap();
        value["module"] = self.echo.clone().into();
        value.to_string()
    }
}

fn submit(module: &str, input: &str, max_attempts: Option<u32>) -> SubmitRequest {
    SubmitRequest {
        max_attempts,
        ..support::job(module, input)
    }
}

/// A node whose one slot is held by a job that never ends, with jobs in
/// every state: succeeded, failed, dead, running, queued, cancelled.
async fn jobs_in_every_state(client: &Api) -> Jobs {
    let echo = upload(client, "fixture_echo").await;
    // The modules page names the deployments that run a module.
    client.deploy("greet", &echo).await.unwrap();
    let primes = upload(client, "primes").await;
    let trap = upload(client, "fixture_trap").await;
    let spin = upload(client, "fixture_spin").await;
    let mut by_state: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    let mut echoes = Vec::new();
    let mut add = |state, id, module: &str| {
        by_state.entry(state).or_default().push(id);
        if module == echo || module == "greet" {
            echoes.push(id);
        }
    };
    for (state, request) in [
        ("succeeded", submit(&echo, "hello", None)),
        // By the deployment's name: it runs echo, and says so by name.
        ("succeeded", submit("greet", "world", None)),
        ("failed", submit(&primes, "not json", None)),
        ("dead", submit(&trap, "", Some(1))),
        // Long enough (≥ 40 ms) that the worker's average run time is over
        // the 5 ms under which it asks for jobs ahead of its free slots:
        // the queued jobs below stay queued behind the one that never ends.
        ("succeeded", submit(&primes, r#"{"limit": 50000000}"#, None)),
    ] {
        let id = client.submit(&request).await.unwrap().id;
        assert_eq!(settle(client, id).await.state, state);
        add(state, id, &request.module);
    }
    // Sleeps in a host call: holds the slot, burns no CPU.
    let running = client
        .submit(&submit(&spin, "sleep", None))
        .await
        .unwrap()
        .id;
    wait_state(client, running, "running").await;
    add("running", running, &spin);
    // The first asks for a label the node's worker does not have: it
    // waits, unplaceable, whatever the slot does.
    for input in ["q1", "q2", "q3"] {
        let mut request = submit(&echo, input, None);
        if input == "q1" {
            request = request.label("gpu", "a100");
        }
        let id = client.submit(&request).await.unwrap().id;
        add("queued", id, &echo);
    }
    let cancelled = by_state["queued"][2];
    client.cancel(cancelled).await.unwrap();
    by_state.get_mut("queued").unwrap().pop();
    by_state.insert("cancelled", vec![cancelled]);
    Jobs {
        by_state,
        echo,
        echoes,
    }
}

async fn wait_state(client: &Api, id: u64, state: &str) {
    let what = format!("job {id} to be {state}");
    eventually_async(&what, OBSERVE, async || {
        let job = client.job(id, 0).await.unwrap();
        if job.state == state {
            Ok(())
        } else {
            Err(format!("it stayed {}", job.state))
        }
    })
    .await
}

/// The body of a `GET` of `path` (query string as written).
async fn get(client: &Api, path: &str) -> bytes::Bytes {
    let (_, body) = client
        .call(
            hyper::Method::GET,
            path,
            "application/json",
            bytes::Bytes::new(),
        )
        .await
        .unwrap();
    body
}

/// One page of `GET /v1/jobs?{query}`.
async fn list(client: &Api, query: &str) -> JobListResponse {
    serde_json::from_slice(&get(client, &format!("/v1/jobs?{query}")).await).unwrap()
}

fn ids(page: &JobListResponse) -> Vec<u64> {
    page.jobs.iter().map(|j| j.id).collect()
}

/// A node `n1` in `dir` with `roles`, one worker slot and `extra` flags.
fn one_slot(dir: &tempfile::TempDir, roles: &str, extra: &[&str]) -> Node {
    let mut args = vec!["--node-id", "n1", "--roles", roles, "--slots", "1"];
    args.extend(extra);
    Node::start(&dir.path().join("n1"), &args)
}

#[test]
fn listings_filter_and_page_and_bulk_actions_preview_then_change() {
    let dir = tempfile::tempdir().unwrap();
    let node = one_slot(&dir, "back-end,worker,front-end", &[]);
    runtime().block_on(async {
        let client = Api::new(&node.url);
        let jobs = jobs_in_every_state(&client).await;
        let failed = jobs.by_state["failed"][0];
        // Filters, newest first, and a cursor.
        let page = list(&client, "state=failed").await;
        assert_eq!(ids(&page), [failed]);
        let summary = &page.jobs[0];
        assert!(summary.error_code.is_some() && summary.finished_at.is_some());
        let page = list(&client, &format!("module={}&order=newest", jobs.echo)).await;
        let mut echoes = jobs.echoes.clone();
        echoes.sort_by(|a, b| b.cmp(a));
        assert_eq!(ids(&page), echoes);
        let named: Vec<_> = (page.jobs.iter())
            .filter_map(|job| Some((job.module_name.as_deref()?, job.module_version?)))
            .collect();
        assert_eq!(named, [("greet", 1)], "the job submitted by name lists it");
        let first = list(&client, "order=newest&limit=2").await;
        let cursor = first.next_cursor.clone().expect("more pages");
        let second = list(&client, &format!("order=newest&limit=2&cursor={cursor}")).await;
        assert!(ids(&second).iter().all(|id| *id < ids(&first)[1]));
        // Text in the error, percent-encoded as browsers send it.
        let code = summary.error_code.clone().unwrap();
        let page = list(&client, &format!("error={}", code.to_uppercase())).await;
        assert_eq!(ids(&page), [failed]);
        let page = list(&client, "error=no%20such%20text").await;
        assert!(page.jobs.is_empty());
        // A bulk cancel of the queued jobs: preview, then one command.
        let queued = JobFilterBody {
            state: Some("queued".into()),
            ..JobFilterBody::default()
        };
        let cancel = |dry_run| BulkRequest {
            action: "cancel".into(),
            filter: queued.clone(),
            dry_run,
            attempts: None,
        };
        let preview = client.bulk(&cancel(true)).await.unwrap();
        assert_eq!(preview.matched, Some(2));
        let out = node.cli(&["bulk", "cancel", "--state", "queued", "--dry-run"], b"");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "would cancel 2 jobs\n"
        );
        let out = node.cli(&["jobs", "--state", "queued", "--newest"], b"");
        let listed: Vec<u64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| line.split_whitespace().next()?.parse().ok())
            .collect();
        let mut newest_first = jobs.by_state["queued"].clone();
        newest_first.reverse();
        assert_eq!(listed, newest_first);
        assert!(
            list(&client, "state=queued").await.jobs.len() == 2,
            "a preview changes nothing"
        );
        let done = client.bulk(&cancel(false)).await.unwrap();
        assert_eq!(done.changed, Some(2));
        assert!(list(&client, "state=queued").await.jobs.is_empty());
        // A retry of the failed and the dead job by id: they run again.
        let retry = BulkRequest {
            action: "retry".into(),
            filter: JobFilterBody {
                ids: Some(vec![
                    failed,
                    jobs.by_state["dead"][0],
                    jobs.by_state["succeeded"][0],
                ]),
                ..JobFilterBody::default()
            },
            dry_run: false,
            attempts: Some(2),
        };
        assert_eq!(client.bulk(&retry).await.unwrap().changed, Some(2));
        let job = client.job(failed, 0).await.unwrap();
        assert_eq!((job.state.as_str(), job.max_attempts), ("queued", 3));
        assert_eq!(job.attempts.len(), 1, "its history is kept");
        // Bad input: a code and a message naming the field.
        for (body, code, field) in [
            (r#"{"action": "delete"}"#, "bad_request", "action"),
            (
                r#"{"action": "retry", "attempts": 0}"#,
                "invalid_filter",
                "attempts",
            ),
            (
                r#"{"action": "cancel", "filter": {"state": "lost"}}"#,
                "bad_request",
                "state",
            ),
            (r#"{"action": "cancel", "filter": [null]}"#, "bad_json", ""),
            (
                r#"{"action": "cancel", "filter": {"colour": 1}}"#,
                "bad_json",
                "colour",
            ),
        ] {
            let refused = client
                .call(
                    hyper::Method::POST,
                    "/v1/jobs/bulk",
                    "application/json",
                    bytes::Bytes::from(body),
                )
                .await
                .unwrap_err();
            assert_eq!(refused.code(), code, "{body}: {refused}");
            assert!(refused.to_string().contains(field), "{body}: {refused}");
        }
    });
}

#[test]
fn the_overview_its_event_stream_inputs_and_modules_describe_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let node = one_slot(&dir, "back-end,worker,front-end", &[]);
    runtime().block_on(async {
        let client = Api::new(&node.url);
        let jobs = jobs_in_every_state(&client).await;
        let overview = client.overview().await.unwrap();
        for (state, ids) in &jobs.by_state {
            assert_eq!(overview.jobs[*state], ids.len() as u64, "{state}");
        }
        assert_eq!(overview.master.node, overview.node);
        assert!(overview.master.epoch >= 1);
        assert_eq!(overview.nodes.len(), 1);
        // At least the cancel, made a moment ago (the others may have
        // ended more than the window ago on a slow machine).
        assert!(overview.finished_recent >= 1, "{overview:?}");
        let latency = overview.latency_ms.expect("jobs finished lately");
        assert!(latency.p50 <= latency.p99);
        assert!(overview.replicas.is_empty(), "one back-end node");
        assert!(
            overview.history.iter().any(|h| h.kind == "master_moved"),
            "{:?}",
            overview.history
        );
        // The event stream: an overview now, and one showing a new job.
        let mut stream = EventStream::open(&node.url);
        let first = stream.next_overview();
        let submitted = first["submitted_total"].as_u64().unwrap();
        client
            .submit(&support::job(&jobs.echo, "live"))
            .await
            .unwrap();
        eventually("an event showing the new job", OBSERVE, || {
            match stream.next_overview()["submitted_total"].as_u64().unwrap() {
                total if total == submitted => Err(format!("submitted_total stayed {total}")),
                _ => Ok(()),
            }
        });
        // A job's input, as it was sent.
        let queued = jobs.by_state["queued"][0];
        let input = get(&client, &format!("/v1/jobs/{queued}/input")).await;
        assert_eq!(&input[..], b"q1");
        // It asks for a label no worker has: it says so, and is counted.
        assert!(client.job(queued, 0).await.unwrap().unplaceable);
        assert_eq!(support::metric(&client, "cohort_jobs_unplaceable").await, 1);
        // Modules: what each is, and how many jobs use it.
        let modules = client.modules().await.unwrap().modules;
        let echo = modules.iter().find(|m| m.digest == jobs.echo).unwrap();
        assert_eq!(echo.language.as_deref(), Some("rust"));
        assert!(
            echo.world
                .as_deref()
                .is_some_and(|w| w.starts_with("cohort:job/job")),
            "{echo:?}"
        );
        assert_eq!(echo.jobs, Some(6), "{echo:?}");
        assert!(echo.first_seen.is_some_and(|t| t > 0));
        // No tokens on this node: every scope.
        let who = client.whoami().await.unwrap();
        assert!(!who.tokens_required);
        assert_eq!(who.scopes, ["read", "submit", "admin"]);
    });
}

/// A `GET /v1/events` stream read over a plain socket, event by event.
struct EventStream {
    socket: std::net::TcpStream,
    buffer: Vec<u8>,
}

impl EventStream {
    fn open(url: &str) -> Self {
        let address = url.trim_start_matches("http://");
        let mut socket = std::net::TcpStream::connect(address).unwrap();
        socket.set_read_timeout(Some(OBSERVE)).unwrap();
        write!(
            socket,
            "GET /v1/events HTTP/1.1\r\nhost: {address}\r\naccept: text/event-stream\r\n\r\n"
        )
        .unwrap();
        Self {
            socket,
            buffer: Vec::new(),
        }
    }

    /// The next `overview` event's data.
    fn next_overview(&mut self) -> serde_json::Value {
        loop {
            let text = String::from_utf8_lossy(&self.buffer).into_owned();
            if let Some(start) = text.find("event: overview\ndata: ") {
                let data = &text[start + "event: overview\ndata: ".len()..];
                if let Some(end) = data.find("\n\n") {
                    let value = serde_json::from_str(&data[..end]).unwrap();
                    let consumed = start + "event: overview\ndata: ".len() + end + 2;
                    self.buffer.drain(..text[..consumed].len());
                    return value;
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.socket.read(&mut chunk).expect("the stream goes on");
            assert!(n > 0, "the stream ended: {text}");
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The pinned browser tools: Debian's Chromium and playwright-core.
struct Browser {
    chromium: PathBuf,
    node_modules: PathBuf,
}

fn browser() -> Browser {
    // The tests of this file run in parallel: one installs, the others
    // wait for it.
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _installing = INSTALL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let chromium = PathBuf::from("/usr/bin/chromium");
    let scripts = Path::new(ROOT).join("tests/browser");
    if !chromium.exists() {
        let out = run_bounded(&mut Command::new(scripts.join("install-chromium")), b"");
        assert!(
            out.status.success(),
            "installing chromium failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser");
    let lock = std::fs::read(scripts.join("package-lock.json")).unwrap();
    let stamp = work.join("lock.stamp");
    if std::fs::read(&stamp).ok() != Some(lock.clone()) {
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).unwrap();
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(scripts.join(file), work.join(file)).unwrap();
        }
        let out = run_bounded(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&work),
            b"",
        );
        assert!(
            out.status.success(),
            "npm ci: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(&stamp, &lock).unwrap();
    }
    Browser {
        chromium,
        node_modules: work.join("node_modules"),
    }
}

/// Runs the browser script in `mode` against `node`; returns its stdout.
fn drive(node: &Node, mode: &str, env: &[(&str, String)]) -> String {
    let browser = browser();
    let screenshots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots");
    std::fs::create_dir_all(&screenshots).unwrap();
    let out = run_bounded(
        Command::new("node")
            .arg(Path::new(ROOT).join("tests/browser/dashboard.mjs"))
            .env("COHORT_URL", &node.url)
            .env("COHORT_MODE", mode)
            .env("CHROMIUM", &browser.chromium)
            .env("NODE_MODULES", &browser.node_modules)
            .env("SCREENSHOTS", &screenshots)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str()))),
        b"",
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the browser test failed:\n{stdout}\n{}\n--- node:\n{}",
        String::from_utf8_lossy(&out.stderr),
        node.stderr()
    );
    stdout
}

/// A server on 127.0.0.1 that answers every request `200 ok`.
fn ok_server() -> Server {
    Server::start(
        |_: &Seen, writer: &mut dyn std::io::Write, _: &AtomicBool| {
            respond(writer, "200 OK", &[], b"ok")
        },
    )
}

/// Outbound HTTP as the pages show it: the deployment `caller`
/// (`fixture_http`) granted POST to a local server, and a job of it that
/// called that server and an address no grant names.
struct Egress {
    job: u64,
    deployment: &'static str,
    grant: String,
    origin: String,
    denied: String,
}

impl Egress {
    /// As `COHORT_EGRESS` for the browser script.
    fn json(&self) -> String {
        serde_json::json!({
            "job": self.job,
            "deployment": self.deployment,
            "grant": self.grant,
            "origin": self.origin,
            "denied": self.denied,
        })
        .to_string()
    }
}

/// Deploys `fixture_http` as `caller`, grants it POST to a local server
/// with the CLI (as `token`), and runs one job of it: one call granted, one
/// refused.
fn egress_job(node: &Node, token: &str) -> Egress {
    // Serves until the job's calls are checked, at the end of this function.
    let server = ok_server();
    let port = server.port();
    let grant = format!("http://127.0.0.1:{port}/");
    let deployment = "caller";
    let rt = runtime();
    let client = Api::with_options(&node.url, Some(token), None).unwrap();
    rt.block_on(async {
        let digest = upload(&client, "fixture_http").await;
        client.deploy(deployment, &digest).await.unwrap();
    });
    let args = ["grant", deployment, "--http", &grant, "--methods", "POST"];
    let out = node.cli(&[&args[..], &["--token", token]].concat(), b"");
    assert!(out.status.success(), "cohort {args:?}: {out:?}");
    let origin = format!("http://127.0.0.1:{port}");
    let denied = "http://203.0.113.9:80".to_owned();
    rt.block_on(async {
        let shown = client.deployment(deployment).await.unwrap();
        let granted = HttpGrantBody {
            url: grant.clone(),
            methods: vec!["POST".into()],
            ..HttpGrantBody::default()
        };
        assert_eq!(shown.grants, [granted]);
        let input = serde_json::json!({"calls": [
            {"method": "POST", "url": format!("{origin}/x")},
            {"url": "http://203.0.113.9/"},
        ]});
        let request = support::job(deployment, &input.to_string());
        let id = client.submit(&request).await.unwrap().id;
        let done = settle(&client, id).await;
        assert_eq!(done.state, "succeeded", "{done:?}");
        let calls = &done.attempts.last().expect("an attempt").calls;
        let seen: Vec<_> = (calls.iter())
            .map(|c| (&c.method[..], &c.origin[..], c.status, c.error.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                ("POST", origin.as_str(), Some(200), None),
                ("GET", denied.as_str(), None, Some("egress_denied")),
            ]
        );
        Egress {
            job: id,
            deployment,
            grant,
            origin,
            denied,
        }
    })
}

/// Writes the cluster key file and returns its path.
fn key_file(dir: &Path) -> PathBuf {
    let path = dir.join("cluster.key");
    std::fs::write(&path, cohort::security::key::generate()).unwrap();
    path
}

#[test]
fn every_page_works_in_a_real_browser_with_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path());
    let node = one_slot(
        &dir,
        "back-end,worker,front-end",
        &["--cluster-key", key.to_str().unwrap()],
    );
    let admin = support::token_at(&node.url, &key, "admin");
    let read = support::token_at(&node.url, &key, "read");
    let team = support::token_with(&node.url, &key, "read", &["--namespace", "team-a"]);
    // Before the jobs below: one of them holds the node's one slot.
    let egress = egress_job(&node, &admin);
    let (jobs, team_job) = runtime().block_on(async {
        let client = Api::with_options(&node.url, Some(&admin), None).unwrap();
        let jobs = jobs_in_every_state(&client).await;
        // A team's one job, queued behind the job that holds the slot.
        let request = SubmitRequest {
            namespace: Some("team-a".into()),
            ..support::job(&jobs.echo, "team a's")
        };
        let team_job = client.submit(&request).await.unwrap().id;
        client.set_weight("team-a", 3).await.unwrap();
        let quotas = cohort::client::types::QuotasBody {
            waiting_max: Some(100),
            ..Default::default()
        };
        client.set_quotas("team-a", &quotas).await.unwrap();
        (jobs, team_job)
    });
    let team = serde_json::json!({"token": team, "job": team_job}).to_string();
    let out = drive(
        &node,
        "pages",
        &[
            ("COHORT_TOKEN", admin),
            ("COHORT_READ_TOKEN", read),
            ("COHORT_JOBS", jobs.json()),
            ("COHORT_EGRESS", egress.json()),
            ("COHORT_TEAM", team),
        ],
    );
    println!("{out}");
}

#[test]
fn the_pages_render_with_100000_jobs_in_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    // No worker: the jobs stay queued, and the node only serves.
    let node = one_slot(&dir, "back-end,front-end", &[]);
    // Ten thousand submissions at once are more than a node queues while
    // no master is up yet (it refuses the rest, retryable).
    node.wait_event("hosting", &[]);
    runtime().block_on(async {
        let client = Api::new(&node.url);
        let echo = upload(&client, "fixture_echo").await;
        let batch = cohort::api::types::BatchRequest {
            jobs: (0..10_000)
                .map(|n| support::job(&echo, &n.to_string()))
                .collect(),
        };
        for _ in 0..RENDER_JOBS / 10_000 {
            let answer = client.submit_batch(&batch).await.unwrap();
            assert_eq!(answer.results.len(), 10_000);
            let refused: Vec<_> = answer
                .results
                .iter()
                .filter(|r| !matches!(r, cohort::api::types::BatchItem::Accepted(_)))
                .take(3)
                .collect();
            assert!(refused.is_empty(), "{refused:?}");
        }
        assert_eq!(
            client.overview().await.unwrap().jobs["queued"],
            RENDER_JOBS as u64
        );
    });
    let out = drive(&node, "render", &[]);
    // The times go to BENCHMARKS.md; a test asserts no speed.
    let line = out
        .lines()
        .find(|l| l.starts_with('{') && l.contains("jobs_ms"))
        .unwrap_or_else(|| panic!("no timing line in:\n{out}"));
    let times: serde_json::Value = serde_json::from_str(line).unwrap();
    println!("first render with {RENDER_JOBS} jobs: {times}");
}
