//! End-to-end tests of a cluster: several `cohort node` processes on
//! loopback that find each other by gossip, elect where the master runs and
//! spread jobs over their workers.

mod support;

use cohort::client::Node as Api;
use std::collections::BTreeSet;
use std::time::Duration;
use support::faults::check_job;
use support::{
    CONVERGE, converge, job, live, running_with_checkpoint, runtime, settle, start, upload,
};

#[test]
fn a_cluster_converges_with_one_master_on_the_oldest_back_end() {
    let dir = tempfile::tempdir().unwrap();
    // n1: back-end without a worker, so every job runs on another node.
    let n1 = start(&dir, "n1", "back-end,front-end", None);
    let n2 = start(&dir, "n2", "back-end,worker", Some(&n1));
    let n3 = start(&dir, "n3", "worker,front-end", Some(&n1));
    let rt = runtime();
    rt.block_on(async {
        for node in [&n1, &n2, &n3] {
            let cluster = converge(node, "3 live nodes and the master on n1", |c| {
                live(c).len() == 3 && c.master_node == "n1"
            })
            .await;
            // Oldest first, and exactly one node says it hosts the master.
            assert_eq!(live(&cluster), ["n1", "n2", "n3"]);
            let hosts: Vec<_> = cluster.nodes.iter().filter(|n| n.master).collect();
            assert_eq!(hosts.len(), 1);
            assert_eq!(hosts[0].id, "n1");
            assert_eq!(cluster.master_epoch, 1);
            assert!(
                cluster
                    .nodes
                    .iter()
                    .all(|n| n.version == env!("CARGO_PKG_VERSION"))
            );
        }
        // Every node publishes the same belief about the master.
        for node in [&n1, &n2, &n3] {
            converge(node, "every node seeing n1@1", |c| {
                c.nodes.iter().all(|n| n.master_seen == "n1@1")
            })
            .await;
        }

        // Jobs submitted to any front-end run on the other nodes' workers.
        let via_n3 = Api::new(&n3.url);
        let via_n1 = Api::new(&n1.url);
        // Uploaded through n3 (not a back-end): stored on n1 and n2 first.
        let echo = upload(&via_n3, "fixture_echo").await;
        let mut ids = Vec::new();
        for n in 0..40 {
            let client = if n % 2 == 0 { &via_n3 } else { &via_n1 };
            let request = job(&echo, &format!("job {n}"));
            ids.push((
                client.submit(&request).await.unwrap().id,
                format!("job {n}"),
            ));
        }
        let mut workers = BTreeSet::new();
        for (id, input) in &ids {
            let job = settle(&via_n1, *id).await;
            assert_eq!(job.state, "succeeded", "{job:?}");
            workers.insert(job.attempts[0].worker.clone());
            assert_eq!(&via_n3.result(*id).await.unwrap()[..], input.as_bytes());
        }
        assert!(!workers.contains("n1"), "n1 has no worker: {workers:?}");
        assert_eq!(
            workers,
            BTreeSet::from(["n2".to_string(), "n3".to_string()]),
            "both workers took jobs"
        );
        // A front-end-less node refuses public API calls with a clear code.
        let via_n2 = Api::new(&n2.url);
        let refused = via_n2.jobs(None, 1, None).await.unwrap_err();
        assert_eq!(refused.code(), "not_front_end");
    });

    // A younger back-end joining does not move the master.
    let mut n4 = start(&dir, "n4", "back-end,worker,front-end", Some(&n2));
    rt.block_on(async {
        let cluster = converge(&n4, "4 live nodes", |c| live(c).len() == 4).await;
        assert_eq!(cluster.master_node, "n1");
        // A sleep: the master must stay put for a while, not just now.
        tokio::time::sleep(Duration::from_secs(2)).await;
        for node in [&n1, &n4] {
            let cluster = Api::new(&node.url).cluster().await.unwrap();
            assert_eq!(cluster.master_node, "n1");
            assert_eq!(cluster.nodes.iter().filter(|n| n.master).count(), 1);
        }
        // n3 (no back-end role) never hosted the master, nor n4.
        assert_eq!(n3.events("hosting"), []);
        assert_eq!(n4.events("hosting"), []);
        assert_eq!(n1.events("hosting").len(), 1, "{}", n1.stderr());
    });

    // `cohort leave` stops a node gracefully; the others see it go.
    let out = n4.cli(&["leave"], b"");
    assert!(out.status.success(), "{out:?}");
    let (status, stderr) = n4.wait_exit();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("asked to leave"), "{stderr}");
    rt.block_on(async {
        converge(&n1, "n4 gone", |c| !live(c).contains(&"n4")).await;
    });
}

#[test]
fn jobs_of_a_killed_worker_resume_elsewhere_from_their_checkpoints_with_one_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let n1 = start(&dir, "n1", "back-end,front-end", None);
    let n2 = start(&dir, "n2", "worker", Some(&n1));
    let n3 = start(&dir, "n3", "worker", Some(&n1));
    runtime().block_on(async {
        converge(&n1, "both workers", |c| c.workers.len() == 2).await;
        let client = Api::new(&n1.url);
        let primes = upload(&client, "primes").await;
        // Long enough (seconds) to be caught running; four keep both workers busy.
        let mut ids = Vec::new();
        for _ in 0..4 {
            let request = job(&primes, r#"{"limit": 300000000}"#);
            ids.push(client.submit(&request).await.unwrap().id);
        }
        // Kill a worker once one of its attempts has saved a checkpoint.
        let mut progress_seen = false;
        let workers = ["n2", "n3"];
        let checkpointed = running_with_checkpoint(&client, &ids, &workers, CONVERGE, |job| {
            // n1 runs no worker: progress reaches it through the polls.
            progress_seen |= job
                .progress
                .as_ref()
                .is_some_and(|p| p.message == "sieving");
            progress_seen
        })
        .await;
        let (mut victim, survivor) = if checkpointed.attempts.last().unwrap().worker == "n2" {
            ((n2, "n2"), (n3, "n3"))
        } else {
            ((n3, "n3"), (n2, "n2"))
        };
        let checkpointed = checkpointed.id;
        victim.0.kill();
        assert!(
            progress_seen,
            "progress of jobs on other nodes is visible on n1"
        );
        let mut rerun = 0;
        for id in &ids {
            // The invariants every fault test checks: settled, one outcome.
            let expected = br#"{"limit":300000000,"count":16252325}"#;
            let job = check_job(&client, *id, expected).await;
            let outcomes: Vec<_> = job
                .attempts
                .iter()
                .map(|a| (a.worker.as_str(), a.outcome.as_deref().unwrap_or("")))
                .collect();
            if outcomes
                .iter()
                .any(|(w, o)| *w == victim.1 && *o == "worker_lost")
            {
                rerun += 1;
                assert_eq!(outcomes.last().unwrap().0, survivor.1, "{outcomes:?}");
            }
        }
        assert!(
            rerun > 0,
            "some job was running on {} when it died",
            victim.1
        );
        // The checkpointed job resumed on the survivor from its checkpoint.
        let job = client.job(checkpointed, 0).await.unwrap();
        let last = job.attempts.last().unwrap();
        assert_eq!(last.worker, survivor.1);
        assert!(last.log_tail.contains("resuming at"), "{job:?}");
        // Membership, not the lease (timeout + 5 s), noticed: n1 says so.
        n1.wait_event("worker_gone", &[("worker", victim.1)]);
        drop(survivor);
    });
}

#[test]
fn a_back_end_gone_for_good_is_removed_from_the_voters_by_the_operator() {
    let dir = tempfile::tempdir().unwrap();
    let all = "back-end,worker,front-end";
    let n1 = start(&dir, "n1", all, None);
    let n2 = start(&dir, "n2", all, Some(&n1));
    let mut n3 = start(&dir, "n3", all, Some(&n1));
    let rt = runtime();
    let primes = rt.block_on(async {
        converge(&n2, "3 voters", |c| c.voters == ["n1", "n2", "n3"]).await;
        upload(&Api::new(&n1.url), "primes").await
    });
    n3.kill();
    let remove =
        |node: &str| support::cohort(&["cluster", "remove", node, "--server", &n2.url], b"");
    // Asked through n2, done by the master's node n1.
    let out = remove("n3");
    assert!(out.status.success(), "{out:?}");
    rt.block_on(async {
        converge(&n2, "n3 no longer a voter", |c| c.voters == ["n1", "n2"]).await;
    });
    // Neither an unknown node nor the master's own node can be removed.
    let unknown = remove("n9");
    assert!(!unknown.status.success());
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("not_found"),
        "{unknown:?}"
    );
    let master = remove("n1");
    assert!(!master.status.success());
    assert!(
        String::from_utf8_lossy(&master.stderr).contains("hosts the master"),
        "{master:?}"
    );
    // Two voters left, both alive: the cluster still commits.
    rt.block_on(async {
        let client = Api::new(&n1.url);
        let id = client
            .submit(&job(&primes, r#"{"limit": 100}"#))
            .await
            .unwrap()
            .id;
        check_job(&client, id, br#"{"limit":100,"count":25}"#).await;
    });
}

/// Worker pools: a job asking for labels or memory starts only on a
/// worker that has them; until one is known it is `unplaceable` (its view
/// and `cohort_jobs_unplaceable` say so) and runs as soon as one joins;
/// when that worker is killed, its job waits again, unplaceable, and
/// runs on it once it is back.
#[test]
fn jobs_run_only_on_workers_with_their_labels_and_memory_and_wait_for_one() {
    use cohort::client::types::SubmitRequest;
    let dir = tempfile::tempdir().unwrap();
    let back = start(&dir, "back", "back-end,front-end", None);
    let small = [
        "--labels",
        "zone=eu",
        "--job-memory",
        "64MiB",
        "--job-memory-max",
        "128MiB",
    ];
    let cpu = support::start_with(&dir, "cpu", "worker,front-end", Some(&back), &small);
    let gpu_flags = ["--labels", "zone=eu,gpu=a100"];
    let rt = runtime();
    let client = &Api::new(&back.url);
    let unplaceable = async || support::metric(client, "cohort_jobs_unplaceable").await;
    rt.block_on(async {
        converge(&back, "two nodes", |c| {
            live(c).len() == 2 && c.workers.len() == 1
        })
        .await;
        let echo = upload(client, "fixture_echo").await;
        let on_gpu = client
            .submit(&job(&echo, "gpu").label("gpu", "a100"))
            .await
            .unwrap()
            .id;
        let big = SubmitRequest {
            memory_bytes: Some(1 << 30),
            ..job(&echo, "big")
        };
        let big = client.submit(&big).await.unwrap().id;
        // What the cpu worker can run runs, though the others are ahead
        // of it in line.
        let plain = client.submit(&job(&echo, "plain")).await.unwrap().id;
        let done = settle(client, plain).await;
        assert_eq!(
            (done.state.as_str(), done.attempts[0].worker.as_str()),
            ("succeeded", "cpu")
        );
        for id in [on_gpu, big] {
            let view = client.job(id, 0).await.unwrap();
            assert_eq!(
                (view.state.as_str(), view.unplaceable),
                ("queued", true),
                "{view:#?}"
            );
        }
        assert_eq!(client.job(on_gpu, 0).await.unwrap().labels["gpu"], "a100");
        assert_eq!(unplaceable().await, 2);

        // A worker with the label and the memory joins: both run there.
        let mut gpu = support::start_with(&dir, "gpu", "worker,front-end", Some(&back), &gpu_flags);
        for id in [on_gpu, big] {
            let done = settle(client, id).await;
            assert_eq!(
                (done.state.as_str(), done.attempts[0].worker.as_str()),
                ("succeeded", "gpu")
            );
        }
        assert_eq!(unplaceable().await, 0);
        let cluster = converge(&back, "both workers", |c| c.workers.len() == 2).await;
        let said = |id: &str| cluster.workers.iter().find(|w| w.id == id).unwrap().clone();
        assert_eq!(said("gpu").labels.len(), 2);
        assert_eq!(said("cpu").memory_max, Some(128 << 20));

        // Killed while it runs a job for its pool: the job waits again, in
        // line and unplaceable, and runs once the worker is back.
        let spin = upload(client, "fixture_spin").await;
        let held = SubmitRequest {
            max_attempts: Some(5),
            ..job(&spin, "sleep").label("gpu", "a100")
        };
        let held = client.submit(&held).await.unwrap().id;
        let running = async |attempt: usize| {
            let waiting = format!("job {held}'s attempt {attempt} to run on gpu");
            support::eventually_async(&waiting, support::OBSERVE, async || {
                match client.job(held, 0).await {
                    Ok(job) if job.state == "running" && job.attempts.len() == attempt => Ok(job),
                    seen => Err(format!("{seen:?}")),
                }
            })
            .await
        };
        assert_eq!(running(1).await.attempts[0].worker, "gpu");
        gpu.kill();
        support::eventually_async(
            "the job to wait, unplaceable",
            support::OBSERVE,
            async || match client.job(held, 0).await {
                Ok(job) if job.unplaceable && job.state == "queued" => Ok(job),
                seen => Err(format!("{seen:?}")),
            },
        )
        .await;
        assert_eq!(unplaceable().await, 1);
        let gpu = support::start_with(&dir, "gpu", "worker,front-end", Some(&back), &gpu_flags);
        assert_eq!(running(2).await.attempts[1].worker, "gpu");
        assert_eq!(unplaceable().await, 0);
        client.cancel(held).await.unwrap();

        // Labels that cannot be are refused, by the API and the CLI.
        let bad = job(&echo, "x").label("GPU", "a100");
        match client.submit(&bad).await {
            Err(cohort::client::ClientError::Api {
                status,
                code,
                message,
                ..
            }) => {
                assert_eq!((status, code.as_str()), (422, "invalid_job"));
                assert!(message.contains("label key"), "{message}");
            }
            other => panic!("refused, not {other:?}"),
        }
        let out = back.cli(&["submit", &echo, "--labels", "gpu"], b"");
        assert!(!out.status.success());
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("is not KEY=VALUE"), "{said}");
        let out = back.cli(&["submit", &echo, "--labels", "gpu=a100", "--wait"], b"");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // So are a node's, before it starts.
        let bad = ["--labels", "zone=eu,GPU=a"];
        let refused = support::Node::try_start(&dir.path().join("bad"), &bad);
        let said = refused
            .err()
            .expect("a node with a bad label does not start");
        assert!(said.contains("label key \"GPU\""), "{said}");
        drop((cpu, gpu));
    });
}
