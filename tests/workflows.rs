//! Workflow features of the master against real nodes: a DAG of 1,000
//! jobs run in topological order with its parents' outputs, a schedule
//! that fires each tick once across kills, a partition and a hand-over of
//! the master,
//! concurrency and rate keys enforced across the workers of three nodes
//! (and across a kill -9 of the master), uniqueness windows, and the
//! refusals of bad options.

mod support;

use cohort::api::types::{
    BackfillRequest, BatchItem, BatchRequest, DagJobRequest, DagRequest, JobFilterBody,
    JobResponse, JobSummaryBody, ScheduleRequest, ScheduleResponse, SubmitRequest,
};
use cohort::client::{ClientError, JobQuery, Node as Api};
use std::collections::BTreeSet;
use std::time::Duration;
use support::{
    Node, OBSERVE, converge, cut_off, eventually, eventually_async, guest as guest_file, live,
    runtime, settle, start, upload,
};

fn guest_path(name: &str) -> String {
    guest_file(name).to_str().unwrap().to_string()
}

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

const ALL: &str = "back-end,worker,front-end";

/// Every job of `module`, oldest first.
async fn jobs_of(client: &Api, module: &str) -> Vec<JobSummaryBody> {
    let mut jobs = Vec::new();
    let mut cursor = None;
    loop {
        let query = JobQuery {
            filter: JobFilterBody {
                module: Some(module.into()),
                ..JobFilterBody::default()
            },
            limit: Some(1000),
            cursor: cursor.clone(),
            ..JobQuery::default()
        };
        let page = client.list(&query).await.unwrap();
        jobs.extend(page.jobs);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return jobs,
        }
    }
}

/// The schedule through whichever node answers.
async fn schedule_of(nodes: &[Option<Node>], name: &str) -> ScheduleResponse {
    let what = format!("a node to answer for {name}");
    eventually_async(&what, OBSERVE, async || {
        let mut errors = Vec::new();
        for node in nodes.iter().flatten() {
            match Api::new(&node.url).schedule(name).await {
                Ok(schedule) => return Ok(schedule),
                Err(error) => errors.push(error.to_string()),
            }
        }
        Err(errors.join("; "))
    })
    .await
}

/// Most a tick may fire after its time here: the time to detect a dead
/// master and take over (a few seconds on a loaded machine), within the
/// default catch-up window of a minute, so no tick is missed.
const FIRE_LATE_MAX_MS: u64 = 20_000;

#[test]
fn a_schedule_every_second_fires_each_tick_once_across_kills_a_partition_and_a_hand_over() {
    let dir = tempfile::tempdir().unwrap();
    let names = ["n1", "n2", "n3"];
    let mut nodes = support::start_all(&dir, &names, ALL, &[]);
    let rt = runtime();
    rt.block_on(async {
        let first = nodes[0].as_ref().unwrap();
        converge(first, "3 voters", |c| c.voters == names).await;
        let client = Api::new(&first.url);
        let echo = upload(&client, "fixture_echo").await;
        let request = ScheduleRequest {
            name: "every-second".into(),
            every_ms: Some(1_000),
            overlap: Some("allow_all".into()),
            job: support::job(&echo, "tick"),
            ..ScheduleRequest::default()
        };
        let created = client.create_schedule(&request).await.unwrap();
        assert_eq!(created.upcoming[0], created.created_at + 1_000);
        assert_eq!(created.catch_up_ms, 60_000);

        // Three kill -9 of the master's node, a partition that cuts it off
        // from the others, and one graceful hand-over; each node comes
        // back (or the partition heals) before the next fault.
        for (n, fault) in ["kill -9", "partition", "kill -9", "kill -9", "SIGTERM"]
            .into_iter()
            .enumerate()
        {
            let fired = schedule_of(&nodes, "every-second").await.fired_total;
            // Let a few ticks fire under this master first.
            let what = format!("3 more ticks than {fired} before the {fault}");
            eventually_async(&what, OBSERVE, async || {
                match schedule_of(&nodes, "every-second").await.fired_total {
                    now if now >= fired + 3 => Ok(()),
                    now => Err(format!("{now} fired")),
                }
            })
            .await;
            // A tick just fired: place the fault shortly before the next
            // one (at a different point each time), so that the next
            // master has a tick to fire late. A sleep: the timing is the
            // point.
            tokio::time::sleep(Duration::from_millis(500 + 100 * n as u64)).await;
            let any = nodes.iter().flatten().next().unwrap();
            let cluster = converge(any, "a master", |c| !c.master_node.is_empty()).await;
            let at = names
                .iter()
                .position(|n| *n == cluster.master_node)
                .unwrap();
            if fault == "partition" {
                // Cut the master off both ways; the others elect a new one
                // while the old one, alone, can make nothing durable.
                let master = nodes[at].as_ref().unwrap();
                let others: Vec<(usize, &Node)> = (nodes.iter().enumerate())
                    .filter(|(i, _)| *i != at)
                    .filter_map(|(i, node)| Some((i, node.as_ref()?)))
                    .collect();
                let other_nodes: Vec<&Node> = others.iter().map(|(_, node)| *node).collect();
                cut_off(&dir, names[at], &other_nodes);
                for (i, _) in &others {
                    cut_off(&dir, names[*i], &[master]);
                }
                let old = cluster.master_node.clone();
                converge(other_nodes[0], "a new master on the majority side", |c| {
                    !c.master_node.is_empty() && c.master_node != old
                })
                .await;
                for name in names {
                    cut_off(&dir, name, &[]);
                }
                let new = converge(other_nodes[0], "a master", |c| !c.master_node.is_empty())
                    .await
                    .master_node;
                converge(master, "healed: the old master follows the new one", |c| {
                    live(c).len() == 3 && c.master_node == new
                })
                .await;
                continue;
            }
            let mut master = nodes[at].take().unwrap();
            if fault == "kill -9" {
                master.kill();
            } else {
                assert!(master.terminate().success(), "{}", master.stderr());
            }
            let other = nodes.iter().flatten().next().unwrap();
            let old = cluster.master_node.clone();
            converge(other, "a new master", |c| {
                !c.master_node.is_empty() && c.master_node != old
            })
            .await;
            drop(master);
            nodes[at] = Some(start(&dir, names[at], ALL, Some(other)));
            let back = nodes[at].as_ref().unwrap();
            converge(back, "3 live nodes", |c| live(c).len() == 3).await;
        }
        // Run past a minute in all: at most 62 s from the creation, and
        // the time a tick may take to show.
        let until = created.created_at + 62_000;
        let what = format!("a tick at or after {until}");
        eventually_async(&what, Duration::from_secs(62) + OBSERVE, async || {
            let schedule = schedule_of(&nodes, "every-second").await;
            match schedule.last_tick {
                Some(last) if last >= until => Ok(()),
                _ => Err(format!("{schedule:?}")),
            }
        })
        .await;
        let any = Api::new(&nodes[1].as_ref().unwrap().url);
        any.pause_schedule("every-second", true).await.unwrap();
        let schedule = schedule_of(&nodes, "every-second").await;
        let jobs = jobs_of(&any, &echo).await;

        // Every tick from the first to the last fired exactly once: one job
        // each, in tick order, none missed or skipped.
        let last = schedule.last_tick.unwrap();
        let ticks = (last - created.created_at) / 1_000;
        assert_eq!(schedule.fired_total, ticks, "{schedule:?}");
        assert_eq!(jobs.len() as u64, ticks, "jobs of the schedule's module");
        assert_eq!(schedule.skipped_total, 0);
        assert!(schedule.missed.is_empty(), "{:?}", schedule.missed);
        let mut late = Vec::new();
        for (n, job) in jobs.iter().enumerate() {
            let tick = created.created_at + (n as u64 + 1) * 1_000;
            assert!(job.submitted_at >= tick, "job {} before its tick", job.id);
            late.push(job.submitted_at - tick);
        }
        late.sort();
        let worst = *late.last().unwrap();
        eprintln!(
            "{ticks} ticks; fired late by p50 {} ms, p99 {} ms, at worst {worst} ms",
            late[late.len() / 2],
            late[late.len() * 99 / 100]
        );
        assert!(worst <= FIRE_LATE_MAX_MS, "a tick fired {worst} ms late");
        for job in &jobs {
            assert_eq!(settle(&any, job.id).await.state, "succeeded");
        }
        // Nothing was missed, so a backfill fires nothing.
        let backfill = any
            .backfill("every-second", &BackfillRequest::default())
            .await
            .unwrap();
        assert!(backfill.ids.is_empty());
    });
}

/// The parents of job `i` of the test DAG: a few earlier jobs, so the
/// graph has long paths, wide layers and shared ancestors.
fn parents_of(i: usize) -> Vec<usize> {
    let mut parents: Vec<usize> = match i {
        0..=9 => Vec::new(),
        _ => vec![i / 2, i - 1 - (i * 7) % 10, (i * 13) % i],
    };
    parents.sort_unstable();
    parents.dedup();
    parents
}

#[test]
fn a_dag_of_a_thousand_jobs_runs_in_topological_order_with_its_parents_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let mut n1 = start(&dir, "n1", ALL, None);
    let n2 = start(&dir, "n2", ALL, Some(&n1));
    let rt = runtime();
    rt.block_on(async {
        converge(&n2, "2 voters", |c| c.voters == ["n1", "n2"]).await;
        let client = Api::new(&n2.url);
        let depth = upload(&client, "fixture_depth").await;
        const N: usize = 1000;
        let request = DagRequest {
            jobs: (0..N)
                .map(|i| DagJobRequest {
                    name: format!("j{i}"),
                    job: support::job(&depth, &format!("{i}")),
                    after: parents_of(i).iter().map(|p| format!("j{p}")).collect(),
                    ..DagJobRequest::default()
                })
                .collect(),
            ..DagRequest::default()
        };
        let submitted = client.submit_dag(&request).await.unwrap();
        assert_eq!(submitted.jobs.len(), N);
        // Kill the master's node midway: the DAG goes on from the journal.
        eventually_async("300 of the DAG's jobs to succeed", OBSERVE, async || {
            let status = client.dag(submitted.id).await.unwrap();
            if status.counts["succeeded"] >= 300 {
                Ok(())
            } else {
                Err(format!("{:?}", status.counts))
            }
        })
        .await;
        n1.kill();
        let n1 = start(&dir, "n1", ALL, Some(&n2));
        converge(&n2, "n1 back", |c| live(c).len() == 2).await;
        let status = eventually_async("the DAG to end", 3 * OBSERVE, async || {
            let status = client.dag(submitted.id).await.unwrap();
            if status.state != "running" {
                Ok(status)
            } else {
                Err(format!("{:?}", status.counts))
            }
        })
        .await;
        assert_eq!(status.state, "succeeded", "{:?}", status.counts);
        assert_eq!(status.counts["succeeded"], N as u64);

        // Every job's output is the longest path to it, computed here from
        // the graph alone: it saw each parent's output.
        let mut expected = vec![0u64; N];
        let mut jobs = Vec::with_capacity(N);
        for i in 0..N {
            expected[i] = 1 + parents_of(i)
                .iter()
                .map(|&p| expected[p])
                .max()
                .unwrap_or(0);
            let id = submitted.jobs[i];
            let output = client.result(id).await.unwrap();
            assert_eq!(
                std::str::from_utf8(&output).unwrap(),
                expected[i].to_string(),
                "job j{i}"
            );
            jobs.push(client.job(id, 0).await.unwrap());
        }
        assert!(*expected.iter().max().unwrap() >= 10, "the graph is deep");
        // Topological order, from the master's record: every attempt of a
        // job started after each of its parents finished.
        for i in 0..N {
            let job = &jobs[i];
            assert_eq!(job.parents.len(), parents_of(i).len());
            assert_eq!(job.dag, Some(submitted.id));
            for &p in &parents_of(i) {
                let finished = jobs[p].finished_at.unwrap();
                for attempt in &job.attempts {
                    assert!(
                        attempt.started_at >= finished,
                        "j{i} started before j{p} finished"
                    );
                }
            }
        }
        // A cycle, or an unknown parent, is refused with nothing created.
        let newest = JobQuery {
            newest_first: true,
            limit: Some(1),
            ..JobQuery::default()
        };
        let before = client.list(&newest).await.unwrap();
        let cyclic = DagRequest {
            jobs: vec![
                DagJobRequest {
                    name: "a".into(),
                    job: support::job(&depth, "a"),
                    after: vec!["b".into()],
                    ..DagJobRequest::default()
                },
                DagJobRequest {
                    name: "b".into(),
                    job: support::job(&depth, "b"),
                    after: vec!["a".into()],
                    ..DagJobRequest::default()
                },
            ],
            ..DagRequest::default()
        };
        let refused = client.submit_dag(&cyclic).await.unwrap_err();
        assert_eq!(refused.code(), "invalid_dag");
        let mut unknown = cyclic.clone();
        unknown.jobs[1].after = vec!["nope".into()];
        let refused = client.submit_dag(&unknown).await.unwrap_err();
        assert_eq!(refused.code(), "invalid_dag");
        assert!(refused.to_string().contains("nope"), "{refused}");
        assert_eq!(client.list(&newest).await.unwrap().jobs, before.jobs);

        // A plain submission may wait for jobs too (its idempotency key
        // holds as for any job).
        let last = submitted.jobs[N - 1];
        let after = SubmitRequest {
            after: vec![last, submitted.jobs[0]],
            idempotency_key: Some("after-the-dag".into()),
            ..support::job(&depth, "x")
        };
        let child = client.submit(&after).await.unwrap();
        let again = client.submit(&after).await.unwrap();
        assert_eq!((again.id, again.existing), (child.id, true));
        assert_eq!(settle(&client, child.id).await.state, "succeeded");
        let output = client.result(child.id).await.unwrap();
        assert_eq!(
            std::str::from_utf8(&output).unwrap(),
            (expected[N - 1] + 1).to_string()
        );
        let unknown = SubmitRequest {
            after: vec![u64::MAX / 2],
            ..support::job(&depth, "y")
        };
        let refused = client.submit(&unknown).await.unwrap_err();
        assert_eq!(refused.code(), "invalid_dag", "{refused}");
        drop(n1);
    });
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
        eventually_async("10 of k's jobs to succeed", OBSERVE, async || {
            let mut done = 0;
            for id in &keyed {
                done += usize::from(c2.job(*id, 0).await.unwrap().state == "succeeded");
            }
            if done >= 10 {
                Ok(())
            } else {
                Err(format!("{done} did"))
            }
        })
        .await;
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
        let next = eventually_async("the 50 ms window to end", OBSERVE, async || {
            let reply = client.submit(&short("2")).await.unwrap();
            if !reply.existing {
                return Ok(reply);
            }
            assert_eq!(reply.id, held.id);
            Err(format!("job {} is still the key's", reply.id))
        })
        .await;
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

#[test]
fn the_cli_manages_schedules_and_dags() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &[]);
    let echo = guest_path("fixture_echo");
    let cli = |args: &[&str]| {
        let out = node.cli(args, b"");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = cli(&[
        "schedule",
        "create",
        "beat",
        &echo,
        "--every",
        "1s",
        "--overlap",
        "allow_all",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("schedule beat: every 1000 ms"), "{out}");
    let (_, out, _) = cli(&["schedule", "list"]);
    assert!(out.contains("beat") && out.contains("active"), "{out}");
    // Wait for a tick to fire, observed in the schedule's record.
    eventually("a tick to fire", OBSERVE, || {
        let (_, out, _) = cli(&["schedule", "show", "beat", "--json"]);
        let shown: serde_json::Value = serde_json::from_str(&out).unwrap();
        if shown["fired_total"].as_u64().unwrap() >= 1 {
            Ok(())
        } else {
            Err(out)
        }
    });
    let (code, out, _) = cli(&["schedule", "pause", "beat"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("paused"), "{out}");
    assert_eq!(cli(&["schedule", "resume", "beat"]).0, Some(0));
    assert_eq!(cli(&["schedule", "delete", "beat"]).0, Some(0));
    let (code, _, err) = cli(&["schedule", "show", "beat"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("schedule_not_found"), "{err}");
    // Bad timings are refused by name.
    let (code, _, err) = cli(&["schedule", "create", "bad", &echo, "--cron", "61 * * * *"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("invalid_schedule") && err.contains("cron"),
        "{err}"
    );
    let (code, _, err) = cli(&[
        "schedule",
        "create",
        "bad",
        &echo,
        "--cron",
        "* * * * *",
        "--timezone",
        "Mars/Olympus",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("timezone"), "{err}");

    // A DAG from a file, waited for.
    let rt = runtime();
    let digest = rt.block_on(upload(&Api::new(&node.url), "fixture_echo"));
    let file = dir.path().join("dag.json");
    let dag = serde_json::json!({
        "jobs": [
            {"name": "a", "job": {"module": digest, "input": "A"}},
            {"name": "b", "job": {"module": digest, "input": "B"}, "after": ["a"], "parent_outputs": false},
        ]
    });
    std::fs::write(&file, dag.to_string()).unwrap();
    let (code, out, err) = cli(&["dag", "submit", file.to_str().unwrap(), "--wait"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("succeeded (2 jobs"), "{out}");
    let (code, out, _) = cli(&["dag", "status", "1", "--json"]);
    assert_eq!(code, Some(0));
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["jobs"][1]["parents"][0], status["jobs"][0]["id"]);
    // Without parent outputs, b got its own input alone.
    let b = status["jobs"][1]["id"].as_u64().unwrap();
    let output = rt.block_on(Api::new(&node.url).result(b)).unwrap();
    assert_eq!(&output[..], b"B");
}
