//! The client libraries against real nodes: the Rust client
//! (`clients/rust`, which the CLI uses) here, and the Python and
//! TypeScript clients' own suites (pytest, node's test runner), run with
//! the toolchains they pin, against nodes those suites start from this
//! build's `cohort` binary.

mod support;

use cohort::client::{Client, ClientError, Job, Node as Api, Options, SubmitRequest};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::faults::exclusive;
use support::{
    Node, converge, guest, live, metrics, pinned_venv, run_bounded, runtime, start, upload,
};

const ALL: &str = "back-end,worker,front-end";
/// Longest a test waits for one job's result.
const RESULT_WAIT: Duration = Duration::from_secs(60);

fn client_of(urls: &[&str]) -> Client {
    Client::new(urls, Options::default()).expect("valid URLs")
}

/// A node serving with the master and a worker, and the echo module.
fn ready_node(dir: &Path, extra: &[&str]) -> (Node, String) {
    let node = Node::start(dir, extra);
    let echo = runtime().block_on(async {
        converge(&node, "a master", |c| !c.master_node.is_empty()).await;
        upload(&Api::new(&node.url), "fixture_echo").await
    });
    (node, echo)
}

/// The `cohort_http_responses_total` samples of a node, summed.
async fn responses(node: &Api) -> u64 {
    metrics(node)
        .await
        .lines()
        .filter(|l| l.starts_with("cohort_http_responses_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[test]
fn a_loop_of_submits_goes_out_in_batches_and_results_come_through_one_waiter() {
    // Alone on the machine: how many wait requests the results take grows
    // with how long the jobs take to finish.
    let _turn = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let (node, echo) = ready_node(dir.path(), &[]);
    let rt = runtime();
    rt.block_on(async {
        let api = Api::new(&node.url);
        let before = responses(&api).await;
        let client = client_of(&[&node.url]);
        const JOBS: usize = 5_000;
        let jobs: Vec<Job> = (0..JOBS)
            .map(|i| client.submit(SubmitRequest::new(&echo).text(format!("job {i}"))))
            .collect();
        for (i, job) in jobs.iter().enumerate() {
            let output = job.result(Some(RESULT_WAIT)).await.unwrap();
            assert_eq!(&output[..], format!("job {i}").as_bytes());
        }
        let ids: BTreeSet<u64> = futures_ids(&jobs).await;
        assert_eq!(ids.len(), JOBS, "one job per submission");
        // Everything but the two scrapes was the client's.
        let requests = responses(&api).await.saturating_sub(before);
        eprintln!("{JOBS} jobs: {requests} requests");
        // One request per job would be 10,000 (a submission and a wait
        // each); 124 here, on an idle 2-core machine.
        assert!(
            requests * 4 < JOBS as u64,
            "{JOBS} jobs took {requests} requests: not batched"
        );
    });
}

async fn futures_ids(jobs: &[Job]) -> BTreeSet<u64> {
    let mut ids = BTreeSet::new();
    for job in jobs {
        ids.insert(job.id().await.unwrap());
    }
    ids
}

#[test]
fn refusals_and_failed_jobs_carry_their_codes() {
    let dir = tempfile::tempdir().unwrap();
    // No slots: submitted jobs stay queued until cancelled.
    let (idle, echo) = ready_node(&dir.path().join("idle"), &["--slots", "0"]);
    let (node, _) = ready_node(&dir.path().join("busy"), &[]);
    let rt = runtime();
    rt.block_on(async {
        let client = client_of(&[&node.url]);
        let unknown = client.submit(SubmitRequest::new("ab".repeat(32)));
        let error = unknown.id().await.unwrap_err();
        assert_eq!(error.code(), "module_not_found", "{error}");
        assert!(!error.retryable());
        // A batch's refused item has the status its code is answered with
        // (what the job, submitted alone, would have got), not the 202.
        assert!(
            matches!(error, ClientError::Api { status: 422, .. }),
            "{error:?}"
        );

        let trap = upload(&Api::new(&node.url), "fixture_trap").await;
        let job = client.submit(SubmitRequest {
            max_attempts: Some(1),
            ..SubmitRequest::new(&trap)
        });
        match job.result(Some(RESULT_WAIT)).await {
            Err(ClientError::Job { state, code, .. }) => {
                assert_eq!((state.as_str(), code.as_str()), ("dead", "trap"));
            }
            other => panic!("a trapping job: {other:?}"),
        }

        let idle_client = client_of(&[&idle.url]);
        let queued = idle_client.submit(SubmitRequest::new(&echo));
        let waited = queued.result(Some(Duration::from_millis(300))).await;
        assert!(
            matches!(waited, Err(ClientError::WaitTimeout { .. })),
            "{waited:?}"
        );
        assert_eq!(queued.cancel().await.unwrap().state, "cancelled");
        let error = queued.result(Some(RESULT_WAIT)).await.unwrap_err();
        assert_eq!(error.code(), "cancelled", "{error}");

        // The same key: the same job.
        let key = Some("clients-test-key".to_string());
        let submit = |key: &Option<String>| {
            idle_client.submit(SubmitRequest {
                idempotency_key: key.clone(),
                ..SubmitRequest::new(&echo)
            })
        };
        let first = submit(&key).accepted().await.unwrap();
        let again = submit(&key).accepted().await.unwrap();
        assert!(!first.existing);
        assert_eq!(first.id, again.id);
        assert!(again.existing);
    });
}

#[test]
fn a_node_that_does_not_answer_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let (node, echo) = ready_node(dir.path(), &[]);
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    runtime().block_on(async {
        let client = client_of(&[&dead, &node.url]);
        for i in 0..50 {
            let job = client.submit(SubmitRequest::new(&echo).text(format!("{i}")));
            let output = job.result(Some(RESULT_WAIT)).await.unwrap();
            assert_eq!(&output[..], format!("{i}").as_bytes());
        }
    });
}

/// Every job in the cluster, by id, with its idempotency key.
async fn all_jobs(api: &Api) -> Vec<(u64, Option<String>)> {
    let mut jobs = Vec::new();
    let mut cursor = None;
    loop {
        let page = api.jobs(None, 1000, cursor.as_deref()).await.unwrap();
        for job in page.jobs {
            let record = api.job(job.id, 0).await.unwrap();
            jobs.push((job.id, record.idempotency_key));
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return jobs,
        }
    }
}

#[test]
fn a_client_submitting_while_the_master_is_killed_makes_each_submission_one_job() {
    let _turn = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let mut n1 = start(&dir, "n1", ALL, None);
    let n2 = start(&dir, "n2", ALL, Some(&n1));
    let n3 = start(&dir, "n3", ALL, Some(&n1));
    let echo = rt.block_on(async {
        for node in [&n1, &n2, &n3] {
            converge(node, "3 voters, the master on n1, 3 workers", |c| {
                live(c).len() == 3
                    && c.master_node == "n1"
                    && c.workers.len() == 3
                    && c.voters.len() == 3
            })
            .await;
        }
        upload(&Api::new(&n1.url), "fixture_echo").await
    });
    // The master's node first: its loss is the worst case for the client.
    let client = rt.block_on(async { client_of(&[&n1.url, &n2.url, &n3.url]) });
    const ROUNDS: usize = 30;
    const PER_ROUND: usize = 100;
    let mut jobs = Vec::new();
    rt.block_on(async {
        for round in 0..ROUNDS {
            let batch: Vec<(String, Job)> = (0..PER_ROUND)
                .map(|i| {
                    let input = format!("round {round} job {i}");
                    let job = client.submit(SubmitRequest::new(&echo).text(&input));
                    (input, job)
                })
                .collect();
            if round == ROUNDS / 3 {
                n1.kill();
            }
            // Wait for the round to land, so that the kill falls between
            // submissions in flight rather than after all of them.
            for (_, job) in &batch {
                job.id().await.unwrap();
            }
            jobs.extend(batch);
        }
        for (input, job) in &jobs {
            let output = job.result(Some(RESULT_WAIT)).await.unwrap();
            assert_eq!(&output[..], input.as_bytes());
        }
        let survivor = Api::new(&n2.url);
        converge(&n2, "the master on a survivor", |c| {
            ["n2", "n3"].contains(&c.master_node.as_str())
        })
        .await;
        let in_cluster = all_jobs(&survivor).await;
        let ids: BTreeSet<u64> =
            futures_ids(&jobs.iter().map(|(_, j)| j.clone()).collect::<Vec<_>>()).await;
        assert_eq!(ids.len(), ROUNDS * PER_ROUND, "distinct ids");
        let found: BTreeSet<u64> = in_cluster.iter().map(|(id, _)| *id).collect();
        assert_eq!(
            in_cluster.len(),
            ROUNDS * PER_ROUND,
            "the cluster holds exactly one job per submission"
        );
        assert_eq!(found, ids);
        let keys: BTreeSet<&str> = in_cluster
            .iter()
            .filter_map(|(_, k)| k.as_deref())
            .collect();
        assert_eq!(
            keys.len(),
            ROUNDS * PER_ROUND,
            "one job per idempotency key"
        );
    });
}

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where the test toolchains go (`target/tmp`, kept between runs).
fn scratch(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Runs `command` bounded in time; panics with its output if it fails.
fn run(command: &mut Command) -> String {
    let what = format!("{command:?}");
    let out = run_bounded(command, b"");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

/// The environment the clients' own suites read: which binary to start
/// nodes from, the components to run, and the node's OpenAPI document
/// (whose error codes each client's table must be).
fn suite_env(command: &mut Command) -> &mut Command {
    command
        .env("COHORT_BIN", env!("CARGO_BIN_EXE_cohort"))
        .env("COHORT_OPENAPI_JSON", root().join("clients/openapi.json"))
        .env("COHORT_ECHO_WASM", guest("fixture_echo"))
        .env("COHORT_TRAP_WASM", guest("fixture_trap"))
        .env("COHORT_WORDCOUNT_WASM", guest("wordcount"))
        .env_remove("COHORT_LOG")
}

#[test]
fn the_python_client_passes_its_suite() {
    let _turn = exclusive();
    let venv = pinned_venv(
        "clients-python",
        &root().join("clients/python/requirements-test.txt"),
    );
    let python = venv.join("bin/python");
    // Installed as a user would, from a copy of the package (a build writes
    // beside the sources), with the venv's setuptools (no download).
    let source = scratch("clients-python-src");
    let _ = std::fs::remove_dir_all(&source);
    std::fs::create_dir_all(&source).unwrap();
    for entry in ["pyproject.toml", "README.md", "cohort_client"] {
        copy(
            &root().join("clients/python").join(entry),
            &source.join(entry),
        );
    }
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--force-reinstall",
        ])
        .arg(&source));
    let out = run(suite_env(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .arg(root().join("clients/python/tests"))
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    ));
    assert!(out.contains(" passed"), "{out}");
}

#[test]
fn the_typescript_client_passes_its_suite() {
    let _turn = exclusive();
    let package = root().join("clients/typescript");
    // A copy, so that node_modules and dist stay out of the checkout.
    let work = scratch("clients-typescript");
    let _ = std::fs::remove_dir_all(work.join("src"));
    let _ = std::fs::remove_dir_all(work.join("test"));
    let _ = std::fs::remove_dir_all(work.join("testing"));
    std::fs::create_dir_all(&work).unwrap();
    for entry in [
        "package.json",
        "package-lock.json",
        "tsconfig.json",
        "src",
        "test",
        "testing",
    ] {
        copy(&package.join(entry), &work.join(entry));
    }
    let lock = std::fs::read(package.join("package-lock.json")).unwrap();
    let stamp = work.join("lock.stamp");
    if std::fs::read(&stamp).ok() != Some(lock.clone()) {
        run(Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&work));
        std::fs::write(&stamp, &lock).unwrap();
    }
    let out = run(suite_env(
        Command::new("npm").args(["test"]).current_dir(&work),
    ));
    assert!(out.contains("# fail 0"), "{out}");
}

/// Copies a file or a directory tree.
fn copy(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
}
