//! Live upgrade of the master on a real 3-node cluster: broken master
//! components refused by name with the running master untouched; the
//! example FIFO master switched in and back under a steady stream of
//! submissions (nothing acknowledged lost or run twice), a kill -9 of the
//! master right after the switch coming back on the new build; and
//! `cohort replay` following the switches in a node's journal.

mod support;

use cohort::client::{ClientError, JobQuery, Node as Api};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::{
    Node, OBSERVE, converge, eventually_async, guest, live, runtime, settle, start_with, upload,
};

const ALL: &str = "back-end,worker,front-end";
const NO_STANDBY: &[&str] = &["--standby", "off"];

/// Submissions the stream gets acknowledged between two steps of the
/// test, so that every master along the way serves a run of them.
const STREAM_STRIDE: usize = 20;

/// The master build as the node at `url` reports it, retried while the
/// cluster settles.
async fn build_at(url: &str) -> String {
    let what = format!("the master build at {url}");
    eventually_async(&what, OBSERVE, async || {
        let build = Api::new(url).master_build().await;
        build.map(|b| b.build).inspect_err(|error| {
            eprintln!("waiting for the master: {error}");
        })
    })
    .await
}

/// What a stream saw: each acknowledged key's job id, and when each
/// submission began and how long it took.
type Seen = (BTreeMap<String, u64>, Vec<(Instant, Duration)>);

/// Submissions, one at a time, each with its own idempotency key, through
/// whichever node answers; every acknowledged id with its key, and each
/// submission's time from first try to acknowledgement.
struct Stream {
    stop: Arc<AtomicBool>,
    /// Submissions acknowledged so far.
    acked: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Seen>,
}

impl Stream {
    fn start(urls: Vec<String>, module: String) -> Stream {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let acked_count = Arc::new(AtomicUsize::new(0));
        let counter = acked_count.clone();
        let task = tokio::spawn(async move {
            let mut acked = BTreeMap::new();
            let mut latencies = Vec::new();
            let mut n = 0u64;
            while !flag.load(Ordering::Relaxed) {
                n += 1;
                let key = format!("stream-{n}");
                let mut request = support::job(&module, &key);
                request.idempotency_key = Some(key.clone());
                let began = Instant::now();
                let mut turn = 0usize;
                // A node down or a master moving: the same key elsewhere,
                // until one answers.
                let what = format!("an answer to submission {key}");
                // Each try owns what it sends (its future cannot borrow
                // from the closure that counts the turns).
                let id = eventually_async(&what, OBSERVE, || {
                    let client = Api::new(&urls[turn % urls.len()]);
                    turn += 1;
                    let request = request.clone();
                    async move { client.submit(&request).await.map(|s| s.id) }
                })
                .await;
                latencies.push((began, began.elapsed()));
                acked.insert(key, id);
                counter.fetch_add(1, Ordering::Relaxed);
                // Paces the stream: a steady load, not a flood.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (acked, latencies)
        });
        Stream {
            stop,
            acked: acked_count,
            task,
        }
    }

    /// Waits (bounded) until [`STREAM_STRIDE`] more submissions are
    /// acknowledged: the stream flows through the cluster as it is now.
    async fn flows(&self) {
        let count = self.acked.load(Ordering::Relaxed) + STREAM_STRIDE;
        let what = format!("{count} submissions of the stream acknowledged");
        eventually_async(&what, OBSERVE, async || {
            match self.acked.load(Ordering::Relaxed) {
                acked if acked >= count => Ok(()),
                acked => Err(format!("{acked} are")),
            }
        })
        .await
    }

    async fn finish(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// The longest submission that was waiting at some point of `window` and
/// was answered before its end (one answered later waited on what came
/// next).
fn longest_in(latencies: &[(Instant, Duration)], window: (Instant, Instant)) -> Duration {
    (latencies.iter())
        .filter(|(began, took)| *began + *took >= window.0 && *began + *took <= window.1)
        .map(|(_, took)| *took)
        .max()
        .unwrap_or_default()
}

/// The index of the node hosting the master.
async fn master_at(nodes: &[Option<Node>], names: &[&str]) -> usize {
    let any = nodes.iter().flatten().next().unwrap();
    let cluster = converge(any, "a master", |c| !c.master_node.is_empty()).await;
    names
        .iter()
        .position(|n| *n == cluster.master_node)
        .unwrap()
}

fn code_of(error: ClientError) -> String {
    match error {
        ClientError::Api { code, .. } => code,
        other => panic!("not an API error: {other}"),
    }
}

#[test]
fn the_master_is_upgraded_and_rolled_back_under_load_and_survives_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let names = ["n1", "n2", "n3"];
    // No warm standbys: the node taking over after the kill below must
    // recover from the journal, switch record included, and fetch the
    // build it lacks (a standby would already run it).
    let mut nodes = support::start_all(&dir, &names, ALL, NO_STANDBY);
    let fifo = std::fs::read(guest("fifo_master")).unwrap();
    let fifo_build = format!("sha256:{}", cohort::runtime::Digest::of(&fifo));
    let rt = runtime();
    rt.block_on(async {
        let first = nodes[0].as_ref().unwrap();
        converge(first, "3 voters", |c| c.voters == names).await;
        let client = Api::new(&first.url);
        let echo = upload(&client, "fixture_echo").await;
        assert_eq!(build_at(&first.url).await, "built-in");

        // Broken masters are refused by name; the running one goes on.
        let code = code_of(client.rollback_master().await.unwrap_err());
        assert_eq!(code, "nothing_to_roll_back");
        for (fixture, expected) in [
            ("fixture_wrong_world", "master_wrong_world"),
            ("fixture_master_trap", "master_traps"),
            ("fixture_master_clock", "master_nondeterministic_import"),
            ("fixture_master_stale", "master_snapshot_unreadable"),
            ("fixture_echo", "master_nondeterministic_import"),
        ] {
            let wasm = std::fs::read(guest(fixture)).unwrap();
            let refused = client.upgrade_master(wasm).await.unwrap_err();
            assert_eq!(code_of(refused), expected, "{fixture}");
        }
        let garbage = client.upgrade_master(b"not a component".to_vec()).await;
        assert_eq!(code_of(garbage.unwrap_err()), "invalid_master");
        assert_eq!(build_at(&first.url).await, "built-in");
        let after = client.submit(&support::job(&echo, "still here")).await;
        assert_eq!(settle(&client, after.unwrap().id).await.state, "succeeded");

        let urls: Vec<String> = nodes.iter().flatten().map(|n| n.url.clone()).collect();
        let stream = Stream::start(urls, echo.clone());
        stream.flows().await;

        // The yardstick: a graceful hand-over of the master (its window
        // runs to the upgrade, the upgrade's to the kill).
        let at = master_at(&nodes, &names).await;
        let handover_began = Instant::now();
        let mut leaving = nodes[at].take().unwrap();
        assert!(leaving.terminate().success(), "{}", leaving.stderr());
        let other = nodes.iter().flatten().next().unwrap();
        converge(other, "a new master", |c| {
            !c.master_node.is_empty() && c.master_node != names[at]
        })
        .await;
        drop(leaving);
        nodes[at] = Some(start_with(&dir, names[at], ALL, Some(other), NO_STANDBY));
        let back = nodes[at].as_ref().unwrap();
        converge(back, "3 live nodes", |c| live(c).len() == 3).await;
        stream.flows().await;

        // The upgrade, through the CLI of a node that may not host the
        // master.
        let via = (master_at(&nodes, &names).await + 1) % 3;
        let upgrade_began = Instant::now();
        let path = guest("fifo_master");
        let out = nodes[via].as_ref().unwrap().cli(
            &["master", "upgrade", path.to_str().unwrap(), "--json"],
            b"",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["to"], fifo_build.as_str(), "{report}");
        assert_eq!(report["switched"], true, "{report}");
        for node in nodes.iter().flatten() {
            assert_eq!(build_at(&node.url).await, fifo_build);
        }

        // kill -9 of the master right after the switch: the next master
        // replays the switch and runs the new build. Its copy of the build
        // is removed first, so it must fetch it from the third node.
        let at = master_at(&nodes, &names).await;
        let any = nodes.iter().flatten().next().unwrap();
        let cluster = converge(any, "a master", |c| !c.master_node.is_empty()).await;
        let successor = (cluster.nodes.iter())
            .find(|n| n.status == "live" && n.id != names[at])
            .unwrap()
            .id
            .clone();
        let copies = dir.path().join(&successor).join("masters");
        std::fs::remove_dir_all(&copies).unwrap();
        let killed_at = Instant::now();
        nodes[at].as_mut().unwrap().kill();
        let killed = nodes[at].take().unwrap();
        let other = nodes.iter().flatten().next().unwrap();
        converge(other, "a new master", |c| {
            !c.master_node.is_empty() && c.master_node != names[at]
        })
        .await;
        assert_eq!(build_at(&other.url).await, fifo_build);
        let fetched_name = format!("{}.wasm", &fifo_build["sha256:".len()..]);
        let fetched = copies.join(&fetched_name);
        assert_eq!(
            std::fs::read(&fetched).unwrap(),
            fifo,
            "{successor} fetched the build"
        );
        drop(killed);
        nodes[at] = Some(start_with(&dir, names[at], ALL, Some(other), NO_STANDBY));
        let back = nodes[at].as_ref().unwrap();
        converge(back, "3 live nodes", |c| live(c).len() == 3).await;

        // A back-end node that joins after the upgrade lacks the build its
        // warm standby must run: the standby ends, the node fetches the
        // build from the others, and the next standby follows.
        let late = support::start(&dir, "n4", "back-end", Some(back));
        let copy = dir.path().join("n4").join("masters").join(&fetched_name);
        let what = "a standby on n4 with the fetched build";
        eventually_async(what, OBSERVE, async || {
            let stderr = late.stderr();
            let ready = stderr.rfind("event=standby_ready");
            let ended = stderr.rfind("event=standby_ended");
            if copy.is_file() && ready > ended {
                Ok(())
            } else {
                Err(format!("its stderr:\n{stderr}"))
            }
        })
        .await;
        assert_eq!(std::fs::read(&copy).unwrap(), fifo);
        stream.flows().await;

        // And back.
        let out = nodes[via]
            .as_ref()
            .unwrap()
            .cli(&["master", "rollback"], b"");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("from {fifo_build} to built-in")),
            "{text}"
        );
        let out = nodes[via].as_ref().unwrap().cli(&["master", "status"], b"");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("build:    built-in"), "{text}");
        assert!(text.contains(&format!("previous: {fifo_build}")), "{text}");
        stream.flows().await;
        let (acked, latencies) = stream.finish().await;

        // Nothing acknowledged was lost or made twice, and each ran to one
        // success.
        let any = Api::new(&nodes[via].as_ref().unwrap().url);
        let mut listed = Vec::new();
        let mut cursor = None;
        loop {
            let query = JobQuery {
                filter: cohort::api::types::JobFilterBody {
                    module: Some(echo.clone()),
                    ..Default::default()
                },
                limit: Some(1000),
                cursor: cursor.clone(),
                ..JobQuery::default()
            };
            let page = any.list(&query).await.unwrap();
            listed.extend(page.jobs.into_iter().map(|job| job.id));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        // The stream's jobs plus the one submitted before it.
        assert_eq!(listed.len(), acked.len() + 1, "jobs of the module");
        for (key, id) in &acked {
            let job = settle(&any, *id).await;
            assert_eq!(job.state, "succeeded", "{key}: {job:?}");
            let successes = (job.attempts.iter())
                .filter(|a| a.outcome.as_deref() == Some("succeeded"))
                .count();
            assert_eq!(successes, 1, "{key}: {job:?}");
            assert_eq!(job.idempotency_key.as_deref(), Some(key.as_str()));
        }
        eprintln!(
            "{} submissions acknowledged; longest wait during the graceful hand-over {:?}, \
             during the upgrade {:?} (the switch itself paused the master {} ms)",
            acked.len(),
            longest_in(&latencies, (handover_began, upgrade_began)),
            longest_in(&latencies, (upgrade_began, killed_at)),
            report["pause_ms"]
        );
    });

    // The journal of a stopped node replays across both switches, and the
    // recorded snapshots agree.
    let mut stopped = nodes[0].take().unwrap();
    assert!(stopped.terminate().success(), "{}", stopped.stderr());
    let data_dir = dir.path().join("n1");
    let out = support::cohort(
        &[
            "replay",
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--verify",
        ],
        b"",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["master"]["build"], "built-in", "{report}");
    assert_eq!(report["verify"]["ok"], true, "{report}");
    drop(stopped);
}
