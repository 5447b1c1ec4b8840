//! Jobs that read and write blobs as streams, end to end, against real
//! `cohort node` processes on loopback: a job with a small memory limit
//! streaming an input blob many times its memory, and writing an output
//! blob served by digest; submissions naming blobs that are not there;
//! outputs past the node's ceiling; a DAG passing a large intermediate by
//! digest between sandbox processes, with the journal holding digests
//! only; and a worker killed with `kill -9` mid-stream, its job completed
//! on another worker.
//!
//! The Rust `wordcount` example is the streaming job; `fixture-blobs`
//! (tests/fixtures/blobs) runs scripted steps (copy, write, fail...) for
//! the rest. Python and JavaScript streaming jobs are in
//! `tests/languages.rs`, with their toolchains.

mod support;

use cohort::api::types::{DagJobRequest, DagRequest, JobResponse, SubmitRequest};
use cohort::client::Node as Api;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use support::{
    Node, OBSERVE, converge, eventually, eventually_async, infos, live, runtime, settle, start,
    start_with, upload,
};
use tokio::io::AsyncReadExt;

const ALL: &str = "back-end,worker,front-end";

/// The tests here start clusters and move tens of MiB: one at a time, so
/// that failure detection measures the nodes, not a busy machine.
static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    MACHINE.lock().unwrap_or_else(|e| e.into_inner())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `copies` copies of `piece` to `path` (never all of it in
/// memory); returns its sha256.
fn repeated_file(path: &Path, piece: &[u8], copies: usize) -> String {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut hasher = Sha256::new();
    for _ in 0..copies {
        file.write_all(piece).unwrap();
        hasher.update(piece);
    }
    file.flush().unwrap();
    hex(&hasher.finalize())
}

/// The whole of blob `digest`, downloaded.
async fn download(client: &Api, digest: &str) -> Vec<u8> {
    let mut reader = client.get_blob(digest, None).await.unwrap();
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes).await.unwrap();
    bytes
}

fn succeeded(job: &JobResponse) {
    assert_eq!(job.state, "succeeded", "{job:#?}");
}

/// `wordcount`'s answer for `copies` copies of a text whose answer is
/// `one`: every count times `copies`, the same words in the same order.
fn scaled(one: &Value, copies: u64) -> Value {
    let mut all = one.clone();
    all["words"] = json!(one["words"].as_u64().unwrap() * copies);
    for entry in all["top"].as_array_mut().unwrap() {
        entry["count"] = json!(entry["count"].as_u64().unwrap() * copies);
    }
    all
}

/// A `word\tcount` table with every count times `copies`.
fn scaled_tsv(one: &str, copies: u64) -> String {
    one.lines()
        .map(|line| {
            let (word, count) = line.rsplit_once('\t').unwrap();
            let count: u64 = count.parse().unwrap();
            format!("{word}\t{}\n", count * copies)
        })
        .collect()
}

/// The Rust `wordcount`, given a 96 MiB input blob and a 24 MiB memory
/// limit, streams it (the same counts as 96 copies of its 1 MiB piece
/// give, inline), and writes its table of counts as an output blob that
/// `GET /v1/blobs/{digest}` serves; the job's view names both blobs.
#[test]
fn a_job_streams_an_input_blob_larger_than_its_memory_and_writes_an_output_blob() {
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir, "n1", ALL, None);
    runtime().block_on(async {
        let client = Api::new(&node.url);
        let wordcount = upload(&client, "wordcount").await;
        let piece = support::text::sample(1 << 20);
        let copies = 96u64;
        let memory = 24u64 << 20;

        // The piece inline: what one copy counts to.
        let id = (client.submit(&SubmitRequest::new(&wordcount).text(&piece)))
            .await
            .unwrap()
            .id;
        succeeded(&settle(&client, id).await);
        let one: Value = serde_json::from_slice(&client.result(id).await.unwrap()).unwrap();

        // The piece as a blob: the same answer, and its table.
        let small = client.put_blob(piece.clone().into()).await.unwrap();
        let job = SubmitRequest {
            memory_bytes: Some(memory),
            ..SubmitRequest::new(&wordcount).input_blob(&small.digest)
        };
        let id = client.submit(&job).await.unwrap().id;
        let job = settle(&client, id).await;
        succeeded(&job);
        let answer: Value = serde_json::from_slice(&client.result(id).await.unwrap()).unwrap();
        assert_eq!(answer, one, "streamed and inline counts of the same text");
        assert_eq!(job.outputs.len(), 1, "{job:#?}");
        assert_eq!(job.outputs[0].name, "counts.tsv");
        let table = String::from_utf8(download(&client, &job.outputs[0].digest).await).unwrap();
        assert_eq!(table.len() as u64, job.outputs[0].bytes);
        let top: Vec<String> = (one["top"].as_array().unwrap().iter())
            .map(|e| format!("{}\t{}", e["word"].as_str().unwrap(), e["count"]))
            .collect();
        let first: Vec<&str> = table.lines().take(top.len()).collect();
        assert_eq!(first, top, "the table starts with the top words");
        assert_eq!(
            table.lines().count() as u64,
            one["unique"].as_u64().unwrap(),
            "one line per distinct word"
        );

        // 96 copies: four times the job's memory, streamed.
        let path = dir.path().join("big.txt");
        let digest = repeated_file(&path, piece.as_bytes(), copies as usize);
        let big = client.put_blob_file(&path).await.unwrap();
        assert_eq!(big.digest, digest);
        assert!(big.bytes > 3 * memory, "{} bytes", big.bytes);
        let job = SubmitRequest {
            memory_bytes: Some(memory),
            ..SubmitRequest::new(&wordcount).input_blob(format!("sha256:{digest}"))
        };
        let id = client.submit(&job).await.unwrap().id;
        let job = settle(&client, id).await;
        succeeded(&job);
        let input = job
            .input_blob
            .as_ref()
            .expect("the view names the input blob");
        assert_eq!(
            (input.digest.as_str(), input.bytes),
            (digest.as_str(), big.bytes)
        );
        let answer: Value = serde_json::from_slice(&client.result(id).await.unwrap()).unwrap();
        assert_eq!(answer, scaled(&one, copies));
        let output = &job.outputs[0];
        let big_table = String::from_utf8(download(&client, &output.digest).await).unwrap();
        assert_eq!(big_table, scaled_tsv(&table, copies));
        assert_eq!(output.digest, hex(&Sha256::digest(big_table.as_bytes())));

        // The CLI shows the blobs.
        let status = node.cli(&["status", &id.to_string()], b"");
        let text = String::from_utf8_lossy(&status.stdout);
        assert!(text.contains(&format!("input blob  {digest}")), "{text}");
        assert!(
            text.contains(&format!("output      counts.tsv {}", output.digest)),
            "{text}"
        );
    });
}

/// A submission naming a blob the cluster does not hold is refused
/// (`404 blob_not_found`), as is one naming no sha256 (`422`); a job whose
/// outputs pass the node's ceiling fails (`output_too_large`) and leaves no
/// blob; a refused output name is the job's to handle; a job that wrote an
/// output and then failed leaves none.
#[test]
fn bad_blob_inputs_and_outputs_get_their_codes() {
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let node = start_with(&dir, "n1", ALL, None, &["--blob-bytes-max", "4MiB"]);
    runtime().block_on(async {
        let client = Api::new(&node.url);
        let blobs = upload(&client, "fixture_blobs").await;
        let missing = hex(&Sha256::digest(b"never uploaded"));
        let error = client
            .submit(&SubmitRequest::new(&blobs).input_blob(&missing))
            .await
            .unwrap_err();
        let status = match &error {
            cohort::client::ClientError::Api { status, .. } => *status,
            _ => 0,
        };
        assert_eq!((status, error.code()), (404, "blob_not_found"), "{error}");
        for bad in ["", "abc", "sha256:zz", &"0".repeat(65)] {
            let error = client
                .submit(&SubmitRequest::new(&blobs).input_blob(bad))
                .await
                .unwrap_err();
            assert_eq!(error.code(), "invalid_job", "{bad:?}: {error}");
        }

        let steps = |steps: Value| SubmitRequest::new(&blobs).json(json!({ "steps": steps }));
        let before = infos(client.list_blobs().await.unwrap());

        // Past the ceiling: the job sees its write refused and carries on;
        // the attempt fails all the same, and is not retried.
        let id = client
            .submit(&steps(
                json!([{"op": "write", "to": "big", "bytes": 5 << 20}]),
            ))
            .await
            .unwrap()
            .id;
        let job = settle(&client, id).await;
        assert_eq!(job.state, "failed", "{job:#?}");
        assert_eq!(job.error.as_ref().unwrap().code, "output_too_large");
        assert_eq!(job.attempts.len(), 1);

        // Wrote an output, then failed: nothing kept.
        let id = client
            .submit(&steps(json!([
                {"op": "write", "to": "kept-not", "bytes": 1000},
                {"op": "fail", "code": "changed_my_mind"},
            ])))
            .await
            .unwrap()
            .id;
        let job = settle(&client, id).await;
        assert_eq!(job.error.as_ref().unwrap().code, "job_error", "{job:#?}");
        assert!(job.outputs.is_empty());

        // Refused names: the job is told why.
        let id = client
            .submit(&steps(json!([
                {"op": "create", "to": "../escape"},
                {"op": "create", "to": ".hidden"},
                {"op": "read", "from": "input"},
            ])))
            .await
            .unwrap()
            .id;
        let job = settle(&client, id).await;
        succeeded(&job);
        let answer: Value = serde_json::from_slice(&client.result(id).await.unwrap()).unwrap();
        for (n, expected) in ["output names", "output names", "no input blob"]
            .iter()
            .enumerate()
        {
            let error = answer["steps"][n]["error"].as_str().unwrap_or_default();
            assert!(error.contains(expected), "step {n}: {answer}");
        }

        assert_eq!(
            infos(client.list_blobs().await.unwrap()),
            before,
            "no blob was kept"
        );
        let partial = node.data_dir.join("blobs").join("partial");
        let left: Vec<_> = std::fs::read_dir(&partial).unwrap().collect();
        assert!(left.is_empty(), "{left:?} left in {}", partial.display());
    });
}

/// Three back-end nodes running jobs in sandbox processes: a DAG's parent
/// writes a 24 MiB output blob and its child, given it as `parent/big`,
/// copies it; both outputs are the same blob, durable on a majority; the
/// nodes' journals stay far smaller than the blob (they hold its digest).
#[test]
fn a_dag_passes_a_large_intermediate_by_digest() {
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let isolation = ["--job-isolation", "process"];
    let n1 = start_with(&dir, "n1", ALL, None, &isolation);
    let n2 = start_with(&dir, "n2", ALL, Some(&n1), &isolation);
    let n3 = start_with(&dir, "n3", ALL, Some(&n1), &isolation);
    let nodes = [&n1, &n2, &n3];
    runtime().block_on(async {
        let client = Api::new(&n1.url);
        converge(&n1, "3 voters", |c| {
            live(c).len() == 3 && c.voters.len() == 3
        })
        .await;
        let blobs = upload(&client, "fixture_blobs").await;
        let size = 24u64 << 20;
        let job = |steps: Value| SubmitRequest::new(&blobs).json(json!({ "steps": steps }));
        let dag = DagRequest {
            jobs: vec![
                DagJobRequest {
                    name: "parent".into(),
                    job: job(json!([{"op": "write", "to": "big", "bytes": size}])),
                    ..Default::default()
                },
                DagJobRequest {
                    name: "child".into(),
                    job: job(json!([
                        {"op": "list"},
                        {"op": "copy", "from": "parent/big", "to": "copy"},
                    ])),
                    after: vec!["parent".into()],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let dag = client.submit_dag(&dag).await.unwrap();
        let parent = settle(&client, dag.jobs[0]).await;
        let child = settle(&client, dag.jobs[1]).await;
        succeeded(&parent);
        succeeded(&child);
        let big = &parent.outputs[0];
        assert_eq!((big.name.as_str(), big.bytes), ("big", size));
        assert_eq!(big.digest, hex(&Sha256::digest(vec![b'x'; size as usize])));
        let answer: Value =
            serde_json::from_slice(&client.result(child.id).await.unwrap()).unwrap();
        assert_eq!(
            answer["steps"][0]["inputs"],
            json!([{"name": "parent/big", "digest": big.digest, "size": size}]),
        );
        assert_eq!(answer["steps"][1]["sha256"], json!(big.digest));
        assert_eq!(
            child.outputs[0].digest, big.digest,
            "the copy is the same blob"
        );
        let holders = nodes
            .iter()
            .filter(|n| n.data_dir.join("blobs").join(&big.digest).is_file())
            .count();
        assert!(holders >= 2, "on {holders} of 3 back-end nodes");
        for node in nodes {
            let journal = dir_bytes(&node.data_dir, &["blobs", "modules", "cache"]);
            assert!(
                journal < size / 4,
                "{}: {journal} bytes outside its blobs and modules",
                node.name()
            );
        }
    });
}

/// Bytes of the files under `dir`, leaving out its subdirectories named in
/// `except` (at its top level).
fn dir_bytes(dir: &Path, except: &[&str]) -> u64 {
    let mut total = 0;
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let path = entry.path();
            let skipped = at == dir
                && except
                    .iter()
                    .any(|name| entry.file_name().to_str() == Some(name));
            match entry.metadata() {
                Ok(meta) if meta.is_dir() && !skipped => stack.push(path),
                Ok(meta) if meta.is_file() => total += meta.len(),
                _ => {}
            }
        }
    }
    total
}

/// The worker streaming a job's input into its output is killed with
/// `kill -9` once the output is half written; the job completes on another
/// worker with the whole blob, and nothing of the dead attempt is listed.
#[test]
fn a_worker_killed_mid_stream_leaves_its_job_to_complete_elsewhere() {
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let n1 = start(&dir, "n1", ALL, None);
    let n2 = start(&dir, "n2", ALL, Some(&n1));
    let n3 = start(&dir, "n3", ALL, Some(&n1));
    let mut nodes = [Some(n1), Some(n2), Some(n3)];
    runtime().block_on(async {
        let n1 = nodes[0].as_ref().unwrap();
        let client = Api::new(&n1.url);
        converge(n1, "3 voters", |c| {
            live(c).len() == 3 && c.voters.len() == 3
        })
        .await;
        let blobs = upload(&client, "fixture_blobs").await;
        let input: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        let info = client.put_blob(input.clone().into()).await.unwrap();
        // Every node holds the input before the job starts, so that the
        // worker left is never the only way to it.
        eventually("the input on every node", OBSERVE, || {
            let held = (nodes.iter().flatten())
                .filter(|n| n.data_dir.join("blobs").join(&info.digest).is_file())
                .count();
            if held == 3 {
                Ok(())
            } else {
                Err(format!("on {held}"))
            }
        });
        let job = SubmitRequest {
            max_attempts: Some(3),
            ..SubmitRequest::new(&blobs)
                .json(json!({"steps": [{
                    "op": "copy", "from": "input", "to": "copy",
                    "chunk": 64 << 10, "pause_ms": 40,
                }]}))
                .input_blob(&info.digest)
        };
        let id = client.submit(&job).await.unwrap().id;
        // The worker running it, once it has written part of the output.
        let (victim, first) = eventually_async("the copy half written", OBSERVE, async || {
            let job = client.job(id, 0).await.map_err(|e| e.to_string())?;
            let worker = (job.attempts.last())
                .map(|a| a.worker.clone())
                .unwrap_or_default();
            let at = nodes
                .iter()
                .position(|n| n.as_ref().is_some_and(|n| n.name() == worker));
            let written = at.map_or(0, |at| partial_bytes(nodes[at].as_ref().unwrap()));
            match at {
                Some(at) if job.state == "running" && written >= 4 << 20 => Ok((at, job)),
                _ => Err(format!(
                    "{} on {worker:?}, {written} bytes written",
                    job.state
                )),
            }
        })
        .await;
        nodes[victim].as_mut().unwrap().kill();
        nodes[victim] = None;
        let alive = nodes.iter().flatten().next().unwrap();
        let client = Api::new(&alive.url);
        let job = settle(&client, id).await;
        succeeded(&job);
        assert!(job.attempts.len() >= 2, "{job:#?}");
        assert_ne!(
            job.attempts.last().unwrap().worker,
            first.attempts[0].worker
        );
        assert_eq!(job.outputs.len(), 1);
        assert_eq!(
            job.outputs[0].digest, info.digest,
            "the whole input, copied"
        );
        assert_eq!(download(&client, &job.outputs[0].digest).await, input);
    });
}

/// Bytes in the attempts' output files under a node's `blobs/partial/`.
fn partial_bytes(node: &Node) -> u64 {
    let partial = node.data_dir.join("blobs").join("partial");
    dir_bytes(&partial, &[])
}
