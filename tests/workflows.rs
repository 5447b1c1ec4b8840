//! Workflow features of the master against real nodes: concurrency and
//! rate keys enforced across the workers of three nodes (and across a
//! kill -9 of the master), uniqueness windows, and the refusals of bad
//! options.

mod support;

use cohort::api::types::{BatchItem, BatchRequest, JobResponse, SubmitRequest};
use cohort::client::{ClientError, Node as Api};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use support::{Node, converge, live, runtime, settle, start, upload};

/// Longest a state may take to show.
const OBSERVE: Duration = Duration::from_secs(60);

/// A primes job of about a tenth of a second.
fn primes(module: &str, n: u64) -> SubmitRequest {
    SubmitRequest {
        input_json: Some(serde_json::json!({ "limit": 20_000_000 + n })),
        ..SubmitRequest::new(module)
    }
}

/// The most attempts of `jobs` running at once, from the master's record
/// of when each attempt started and ended (an attempt that has not ended
/// counts as running to the end). An end and a start at the same
/// millisecond do not overlap: the master decides the start after the end.
fn most_at_once(jobs: &[JobResponse]) -> usize {
    let mut edges: Vec<(u64, i32)> = Vec::new();
    for attempt in jobs.iter().flat_map(|job| &job.attempts) {
        edges.push((attempt.started_at, 1));
        edges.push((attempt.ended_at.unwrap_or(u64::MAX), -1));
    }
    // Ends (-1) sort before starts (+1) at the same time.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

/// The most attempts of `jobs` started within any window of a second.
fn most_started_in_a_second(jobs: &[JobResponse]) -> usize {
    let mut starts: Vec<u64> = (jobs.iter().flat_map(|job| &job.attempts))
        .map(|attempt| attempt.started_at)
        .collect();
    starts.sort();
    (0..starts.len())
        .map(|i| starts[i..].partition_point(|&at| at < starts[i] + 1_000))
        .max()
        .unwrap_or(0)
}

#[test]
fn a_concurrency_key_of_two_holds_across_three_nodes_and_a_master_kill() {
    let dir = tempfile::tempdir().unwrap();
    let mut n1 = start(&dir, "n1", "back-end,worker,front-end", None);
    let n2 = start(&dir, "n2", "back-end,worker,front-end", Some(&n1));
    let n3 = start(&dir, "n3", "back-end,worker,front-end", Some(&n1));
    let rt = runtime();
    rt.block_on(async {
        converge(&n2, "3 voters", |c| c.voters == ["n1", "n2", "n3"]).await;
        let (c1, c2, c3) = (Api::new(&n1.url), Api::new(&n2.url), Api::new(&n3.url));
        let module = upload(&c1, "primes").await;
        // 40 jobs share key k (2 at once); 24 share key r (4 starts a
        // second); 24 have no key and may use every slot of the three
        // workers. Submitted through all three nodes.
        let clients = [&c1, &c2, &c3];
        let (mut keyed, mut rated, mut free) = (Vec::new(), Vec::new(), Vec::new());
        for n in 0..40u64 {
            let request = SubmitRequest {
                concurrency_key: Some("k".into()),
                concurrency_limit: Some(2),
                ..primes(&module, n)
            };
            keyed.push(clients[n as usize % 3].submit(&request).await.unwrap().id);
            if n < 24 {
                let request = SubmitRequest {
                    concurrency_key: Some("r".into()),
                    rate_limit: Some(4),
                    ..primes(&module, 100 + n)
                };
                rated.push(clients[n as usize % 3].submit(&request).await.unwrap().id);
                free.push(
                    clients[n as usize % 3]
                        .submit(&primes(&module, 200 + n))
                        .await
                        .unwrap()
                        .id,
                );
            }
        }
        // Kill -9 the master's node once a quarter of k's jobs succeeded:
        // the next master must go on enforcing the limits it replays.
        let started = Instant::now();
        loop {
            let mut done = 0;
            for id in &keyed {
                done += usize::from(c2.job(*id, 0).await.unwrap().state == "succeeded");
            }
            if done >= 10 {
                break;
            }
            assert!(started.elapsed() < OBSERVE, "k's jobs do not run");
        }
        n1.kill();
        converge(&n2, "a new master on n2 or n3", |c| {
            live(c).len() == 2 && c.master_node != "n1" && !c.master_node.is_empty()
        })
        .await;
        let settled = |ids: Vec<u64>| {
            let c2 = &c2;
            async move {
                let mut jobs = Vec::new();
                for id in ids {
                    jobs.push(settle(c2, id).await);
                }
                jobs
            }
        };
        let keyed = settled(keyed).await;
        let rated = settled(rated).await;
        let free = settled(free).await;
        for job in keyed.iter().chain(&rated).chain(&free) {
            assert_eq!(job.state, "succeeded", "{job:?}");
        }
        assert_eq!(keyed[0].concurrency_key.as_deref(), Some("k"));
        assert_eq!(keyed[0].concurrency_limit, Some(2));
        assert_eq!(rated[0].rate_limit, Some(4));
        assert_eq!(free[0].concurrency_key, None);

        let at_once = most_at_once(&keyed);
        assert!(at_once <= 2, "key k ran {at_once} attempts at once");
        assert_eq!(at_once, 2, "the limit is a limit, not a queue of one");
        let in_a_second = most_started_in_a_second(&rated);
        assert!(in_a_second <= 4, "key r started {in_a_second} in a second");
        // Without a key, jobs spread over the slots of every worker.
        let spread = most_at_once(&free);
        assert!(spread > 2, "unkeyed jobs ran at most {spread} at once");
        let workers: BTreeSet<&str> = (keyed.iter().flat_map(|j| &j.attempts))
            .map(|a| a.worker.as_str())
            .collect();
        assert!(workers.len() >= 2, "k's jobs ran on {workers:?}");
    });
}

#[test]
fn a_unique_key_gives_its_windows_job_and_bad_options_name_their_field() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &[]);
    let rt = runtime();
    rt.block_on(async {
        let client = Api::new(&node.url);
        let echo = upload(&client, "fixture_echo").await;
        let unique = |input: &str, window_ms: u64| SubmitRequest {
            unique_key: Some("nightly-report".into()),
            unique_window_ms: Some(window_ms),
            ..support::job(&echo, input)
        };
        let first = client.submit(&unique("a", 3_600_000)).await.unwrap();
        assert!(!first.existing);
        // Within the window: the same job, whatever the input or its state.
        let again = client
            .submit(&unique("other input", 3_600_000))
            .await
            .unwrap();
        assert_eq!((again.id, again.existing), (first.id, true));
        let job = settle(&client, first.id).await;
        assert_eq!(job.state, "succeeded");
        assert_eq!(job.unique_key.as_deref(), Some("nightly-report"));
        assert_eq!(job.unique_window_ms, Some(3_600_000));
        let after = client.submit(&unique("b", 3_600_000)).await.unwrap();
        assert_eq!((after.id, after.existing), (first.id, true));

        // A key with a short window: once it ended, a new job.
        let short = |input: &str| SubmitRequest {
            unique_key: Some("short".into()),
            unique_window_ms: Some(50),
            ..support::job(&echo, input)
        };
        let held = client.submit(&short("1")).await.unwrap();
        let started = Instant::now();
        let next = loop {
            let reply = client.submit(&short("2")).await.unwrap();
            if !reply.existing {
                break reply;
            }
            assert_eq!(reply.id, held.id);
            assert!(started.elapsed() < OBSERVE, "the 50 ms window never ended");
        };
        assert_ne!(next.id, held.id);

        // Bad options: 422 invalid_job, the message names the field, and
        // nothing is created.
        let before = client.overview().await.unwrap().submitted_total;
        let cases: [(&str, SubmitRequest); 9] = [
            (
                "concurrency_limit",
                SubmitRequest {
                    concurrency_key: Some("k".into()),
                    concurrency_limit: Some(0),
                    ..support::job(&echo, "x")
                },
            ),
            (
                "concurrency_limit",
                SubmitRequest {
                    concurrency_key: Some("k".into()),
                    concurrency_limit: Some(10_001),
                    ..support::job(&echo, "x")
                },
            ),
            (
                "rate_limit",
                SubmitRequest {
                    rate_limit: Some(5),
                    ..support::job(&echo, "x")
                },
            ),
            (
                "concurrency_key",
                SubmitRequest {
                    concurrency_key: Some("k".into()),
                    ..support::job(&echo, "x")
                },
            ),
            (
                "concurrency_key",
                SubmitRequest {
                    concurrency_key: Some("k".repeat(65)),
                    concurrency_limit: Some(1),
                    ..support::job(&echo, "x")
                },
            ),
            (
                "unique_window_ms",
                SubmitRequest {
                    unique_key: Some("u".into()),
                    ..support::job(&echo, "x")
                },
            ),
            (
                "unique_window_ms",
                SubmitRequest {
                    unique_key: Some("u".into()),
                    unique_window_ms: Some(0),
                    ..support::job(&echo, "x")
                },
            ),
            (
                "unique_window_ms",
                SubmitRequest {
                    unique_key: Some("u".into()),
                    unique_window_ms: Some(31 * 24 * 3_600_000),
                    ..support::job(&echo, "x")
                },
            ),
            (
                "unique_key",
                SubmitRequest {
                    unique_key: Some(String::new()),
                    unique_window_ms: Some(1),
                    ..support::job(&echo, "x")
                },
            ),
        ];
        for (field, request) in &cases {
            match client.submit(request).await {
                Err(ClientError::Api {
                    status,
                    code,
                    message,
                    ..
                }) => {
                    assert_eq!((status, code.as_str()), (422, "invalid_job"), "{message}");
                    assert!(message.contains(field), "{field}: {message}");
                }
                other => panic!("{field}: {other:?}"),
            }
        }
        // In a batch, a bad job is refused alone.
        let batch = BatchRequest {
            jobs: vec![cases[0].1.clone(), support::job(&echo, "fine")],
        };
        let results = client.submit_batch(&batch).await.unwrap().results;
        assert!(matches!(&results[0], BatchItem::Refused(e) if e.code == "invalid_job"));
        assert!(matches!(&results[1], BatchItem::Accepted(_)));
        assert_eq!(client.overview().await.unwrap().submitted_total, before + 1);

        // The CLI passes the options through.
        let out = node.cli(
            &[
                "submit",
                &echo,
                "--concurrency-key",
                "cli",
                "--concurrency-limit",
                "1",
                "--rate-limit",
                "3",
                "--unique-key",
                "cli-once",
                "--unique-for",
                "1h",
                "--wait",
            ],
            b"",
        );
        assert!(out.status.success(), "{out:?}");
        let out = node.cli(
            &[
                "submit",
                &echo,
                "--unique-key",
                "cli-once",
                "--unique-for",
                "1h",
            ],
            b"",
        );
        let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        let job = client.job(id, 0).await.unwrap();
        assert_eq!(
            (
                job.concurrency_key.as_deref(),
                job.concurrency_limit,
                job.rate_limit
            ),
            (Some("cli"), Some(1), Some(3)),
            "the second submission got the first job"
        );
        let out = node.cli(&["submit", &echo, "--rate-limit", "3"], b"");
        assert!(
            !out.status.success(),
            "--rate-limit needs --concurrency-key"
        );
    });
}
