//! Data locality end to end, against real `cohort node` processes on
//! loopback: one back-end node and two worker-only nodes of one slot each.
//! A job reading a blob one worker's cache holds runs there, found local
//! (the workers' `cohort_worker_inputs_total`, the master's
//! `cohort_assignments_local_total`); while that worker stays busy, a job
//! reading the same blob runs on the other worker once its wait is over;
//! and a worker's cache beyond `--blob-cache-bytes` drops the blob it used
//! least recently, never one a running job reads.
//!
//! The job is `fixture-blobs` (tests/fixtures/blobs): `read` reads its
//! input blob, `copy` with a pause copies it slowly (the busy job).

mod support;

use cohort::client::Node as Api;
use cohort::client::types::{JobResponse, SubmitRequest};
use serde_json::{Value, json};
use std::path::PathBuf;
use support::{
    CONVERGE, Node, OBSERVE, converge, eventually_async, live, metric, runtime, settle, upload,
};

/// A node of `roles` named `name`, one slot, joining `seed`.
fn node(
    dir: &tempfile::TempDir,
    name: &str,
    roles: &str,
    seed: Option<&Node>,
    extra: &[&str],
) -> Node {
    let cut = support::partition_file(dir, name);
    let seed = seed.map(support::gossip);
    let mut args = vec!["--node-id", name, "--roles", roles, "--slots", "1"];
    args.extend(["--fault-partition", cut.to_str().unwrap()]);
    if let Some(seed) = &seed {
        args.extend(["--seed", seed]);
    }
    args.extend(extra);
    Node::start(&dir.path().join(name), &args)
}

/// The blobs stored on `node` (digests in hex).
fn stored(node: &Node) -> Vec<String> {
    let dir: PathBuf = node.data_dir.join("blobs");
    let mut names: Vec<String> = (std::fs::read_dir(dir).unwrap())
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.len() == 64)
        .collect();
    names.sort();
    names
}

/// The value of the metric line starting with `name` on `client`'s node.
/// The worker that ran `job`'s last attempt.
fn ran_on(job: &JobResponse) -> &str {
    job.attempts.last().map_or("", |a| a.worker.as_str())
}

#[test]
fn jobs_run_where_their_input_is_and_elsewhere_after_their_wait() {
    let dir = tempfile::tempdir().unwrap();
    // Shorter than the busy job's pause, so a job waiting for its holder
    // runs elsewhere while the holder is still busy.
    let back = node(
        &dir,
        "back",
        "back-end,front-end",
        None,
        &["--locality-wait", "3s"],
    );
    let cache = ["--blob-cache-bytes", "1536KiB"];
    let w1 = node(&dir, "w1", "worker,front-end", Some(&back), &cache);
    let rt = runtime();
    let (client, c1) = (Api::new(&back.url), Api::new(&w1.url));
    rt.block_on(async {
        converge(&back, "two nodes", |c| live(c).len() == 2).await;
        let module = upload(&client, "fixture_blobs").await;
        let data = client.put_blob(vec![7u8; 1 << 20].into()).await.unwrap();
        let read = || {
            SubmitRequest::new(&module)
                .json(json!({"steps": [{"op": "read", "from": "input"}]}))
                .input_blob(&data.digest)
        };
        // The only worker runs the first job: its node fetches the blob.
        let first = client.submit(&read()).await.unwrap().id;
        let job = settle(&client, first).await;
        assert_eq!((job.state.as_str(), ran_on(&job)), ("succeeded", "w1"), "{job:#?}");
        let digest = data.digest.trim_start_matches("sha256:").to_string();
        assert_eq!(stored(&w1), std::slice::from_ref(&digest));
        assert_eq!(metric(&c1, "cohort_worker_inputs_total{where=\"fetched\"}").await, 1);

        // A second worker joins; the master learns from w1's polls that
        // its node holds the blob.
        let w2 = node(&dir, "w2", "worker,front-end", Some(&back), &cache);
        let c2 = Api::new(&w2.url);
        converge(&back, "three nodes", |c| live(c).len() == 3).await;
        eventually_async("the master to know who holds blobs", CONVERGE, async || {
            match metric(&client, "cohort_workers_holding_blobs").await {
                1 => Ok(()),
                seen => Err(seen),
            }
        })
        .await;
        // While w1 has its slot free, jobs reading the blob run there.
        for _ in 0..3 {
            let id = client.submit(&read()).await.unwrap().id;
            let job = settle(&client, id).await;
            assert_eq!((job.state.as_str(), ran_on(&job)), ("succeeded", "w1"), "{job:#?}");
        }
        assert_eq!(metric(&c1, "cohort_worker_inputs_total{where=\"local\"}").await, 3);
        assert_eq!(metric(&c2, "cohort_worker_inputs_total{where=\"fetched\"}").await, 0);
        assert!(metric(&client, "cohort_assignments_local_total").await >= 3);

        // w1 busy with a slow copy of the blob: a job reading it waits for
        // w1 up to its wait, then runs on w2 (w1 is busy far longer).
        let slow = SubmitRequest {
            timeout_ms: Some(600_000),
            ..SubmitRequest::new(&module)
                .json(json!({"steps": [{"op": "copy", "from": "input", "to": "out", "pause_ms": 120_000}]}))
                .input_blob(&data.digest)
        };
        let busy = client.submit(&slow).await.unwrap().id;
        let running = eventually_async("the slow job to run", OBSERVE, async || {
            match client.job(busy, 0).await {
                Ok(job) if job.state == "running" => Ok(job),
                seen => Err(format!("{seen:?}")),
            }
        })
        .await;
        assert_eq!(ran_on(&running), "w1", "{running:#?}");
        let id = client.submit(&read()).await.unwrap().id;
        let job = settle(&client, id).await;
        assert_eq!((job.state.as_str(), ran_on(&job)), ("succeeded", "w2"), "{job:#?}");
        assert_eq!(metric(&c2, "cohort_worker_inputs_total{where=\"fetched\"}").await, 1);

        // w2's cache holds 1.5 MiB: a job reading another blob of 1 MiB
        // there (w1 is still busy) drops the first, which no job reads any
        // more.
        let other = client.put_blob(vec![8u8; 1 << 20].into()).await.unwrap();
        let id = client.submit(&read().input_blob(&other.digest)).await.unwrap().id;
        let job = settle(&client, id).await;
        assert_eq!((job.state.as_str(), ran_on(&job)), ("succeeded", "w2"), "{job:#?}");
        let answer: Value = serde_json::from_slice(&client.result(id).await.unwrap()).unwrap();
        assert_eq!(answer["steps"][0]["bytes"], json!(1 << 20), "{answer}");
        let other = other.digest.trim_start_matches("sha256:").to_string();
        assert_eq!(stored(&w2), [other]);
        assert_eq!(metric(&c2, "cohort_blob_cache_evicted_total").await, 1);
        // All the while, w1 ran its slow job, its blob kept.
        assert_eq!(client.job(busy, 0).await.unwrap().state, "running");
        assert_eq!(stored(&w1), [digest]);
        client.cancel(busy).await.unwrap();
    });
}
