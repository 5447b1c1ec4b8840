//! The backup and restore drill of docs/operations.md ("Backups"), with
//! real `cohort node` processes: a three-voter cluster with a cluster key,
//! a module, a deployment granted a secret, a blob, finished and queued
//! jobs; one voter killed and its data directory copied; every node lost;
//! the cluster restored under the voters' ids, each from a copy of that one
//! directory, on new addresses, with a new worker.

mod support;

use cohort::client::Node as Api;
use serde_json::{Value, json};
use std::path::Path;
use support::{converge_via, guest, job, live, metrics, settle, start_with, token_at, upload};
use tokio::io::AsyncReadExt;

/// The back-end nodes: the journal's voters.
const VOTERS: [&str; 3] = ["a", "b", "c"];
/// Their roles: no worker, so jobs wait while the one worker is gone.
const BACK_END: &str = "back-end,front-end";

/// What the drill saw before the backup, checked after the restore.
struct Before {
    echo: String,
    /// Finished before the backup: (id, input), each a result.
    finished: Vec<(u64, String)>,
    /// Queued when the backup was taken: (id, input).
    queued: Vec<(u64, String)>,
    /// The job reading the secret, finished and queued.
    secret_jobs: [u64; 2],
    blob: (String, Vec<u8>),
}

#[test]
fn a_cluster_restored_from_one_voter_s_copy_keeps_its_jobs_secrets_blobs_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    // The cluster key lives outside the data directories: it is backed up
    // on its own, and the restored cluster needs the same file.
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, cohort::security::key::generate()).unwrap();
    let key_arg = ["--cluster-key", key.to_str().unwrap()];
    // The nodes' data directories, all lost later.
    let lost = tempfile::TempDir::new_in(dir.path()).unwrap();

    let a = start_with(&lost, "a", BACK_END, None, &key_arg);
    let b = start_with(&lost, "b", BACK_END, Some(&a), &key_arg);
    let c = start_with(&lost, "c", BACK_END, Some(&a), &key_arg);
    let mut w = start_with(&lost, "w", "worker", Some(&a), &key_arg);
    let admin = token_at(&a.url, &key, "admin");
    let client = Api::with_options(&a.url, Some(&admin), None).unwrap();
    let rt = support::runtime();

    rt.block_on(async {
        converge_via(&client, "3 voters and a live worker", |cluster| {
            cluster.voters == VOTERS && live(cluster).contains(&"w")
        })
        .await;
    });
    // A deployment whose jobs may read secret SMTP (fixture_http reads the
    // secrets its input names and says whether each was readable).
    let as_admin = |args: &[&str], stdin: &[u8]| {
        let mut all = args.to_vec();
        all.extend(["--token", &admin]);
        let out = a.cli(&all, stdin);
        assert!(out.status.success(), "cohort {args:?}: {out:?}");
    };
    let http = guest("fixture_http");
    as_admin(&["deploy", "caller", http.to_str().unwrap()], b"");
    as_admin(&["secret", "set", "SMTP"], b"smtp-password-4711\n");
    as_admin(&["grant", "caller", "--secret", "SMTP"], b"");
    let reads_secret = json!({ "calls": [], "secrets": ["SMTP"] }).to_string();

    let before = rt.block_on(async {
        let echo = upload(&client, "fixture_echo").await;
        let blob_bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let blob = client.put_blob(blob_bytes.clone().into()).await.unwrap();

        let mut finished = Vec::new();
        for n in 0..4 {
            let input = format!("finished {n}");
            let id = client.submit(&job(&echo, &input)).await.unwrap().id;
            finished.push((id, input));
        }
        let secret_done = client
            .submit(&job("caller", &reads_secret))
            .await
            .unwrap()
            .id;
        for (id, input) in &finished {
            let done = settle(&client, *id).await;
            assert_eq!(done.state, "succeeded", "{done:?}");
            assert_eq!(&client.result(*id).await.unwrap()[..], input.as_bytes());
        }
        check_secret_read(&client, secret_done).await;
        Before {
            echo,
            finished,
            queued: Vec::new(),
            secret_jobs: [secret_done, 0],
            blob: (blob.digest, blob_bytes),
        }
    });

    // The only worker goes: what is submitted now waits in the queue.
    w.terminate();
    let before = rt.block_on(async {
        converge_via(&client, "the worker gone", |cluster| {
            !live(cluster).contains(&"w")
        })
        .await;
        let mut before = before;
        for n in 0..3 {
            let input = format!("queued {n}");
            let id = client.submit(&job(&before.echo, &input)).await.unwrap().id;
            before.queued.push((id, input));
        }
        before.secret_jobs[1] = client
            .submit(&job("caller", &reads_secret))
            .await
            .unwrap()
            .id;
        for id in before
            .queued
            .iter()
            .map(|(id, _)| *id)
            .chain([before.secret_jobs[1]])
        {
            assert_eq!(client.job(id, 0).await.unwrap().state, "queued");
        }
        before
    });

    // The backup, as documented: a voter other than the master's node,
    // caught up, stopped, its whole data directory copied. Stopped by
    // SIGKILL: the copy needs no clean stop, only a directory nothing
    // writes to (what a crash leaves, which the journal recovers from).
    let master = rt.block_on(async { client.cluster().await.unwrap().master_node });
    let mut nodes = vec![a, b, c];
    let backed_up = nodes.iter().position(|n| n.name() != master).unwrap();
    let name = nodes[backed_up].name();
    rt.block_on(async {
        let master_url = &nodes.iter().find(|n| n.name() == master).unwrap().url;
        let on_master = Api::with_options(master_url, Some(&admin), None).unwrap();
        let caught_up = format!("cohort_replica_behind_entries{{node=\"{name}\"}} 0\n");
        support::eventually_async(&format!("{name} caught up"), support::OBSERVE, || async {
            let text = metrics(&on_master).await;
            if text.contains(&caught_up) {
                Ok(())
            } else {
                Err(text)
            }
        })
        .await;
    });
    nodes[backed_up].kill();
    let backup = dir.path().join("backup");
    copy_dir(&nodes[backed_up].data_dir, &backup);
    // The copy checked offline: `cohort replay` reads its snapshot and
    // journal through the master and shows the jobs it holds.
    let out = support::cohort(&["replay", "--data-dir", backup.to_str().unwrap()], b"");
    assert!(out.status.success(), "{out:?}");
    let replayed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let state = &replayed["state"];
    assert_eq!(state["jobs"]["succeeded"], json!(5), "{replayed}");
    let mut queued: Vec<u64> = before.queued.iter().map(|(id, _)| *id).collect();
    queued.push(before.secret_jobs[1]);
    queued.sort_unstable();
    assert_eq!(state["queued"], json!(queued), "{replayed}");
    // A token made after the backup is not in it.
    let late = token_at(&nodes[(backed_up + 1) % 3].url, &key, "read");

    // Every node lost: processes killed, directories never used again.
    for node in &mut nodes {
        node.kill();
    }
    drop(nodes);

    // The restore: every voter id again, each from its own copy of the
    // backup (without the backed-up node's id file), on new addresses,
    // the first without a seed; and a new worker.
    let fresh = tempfile::TempDir::new_in(dir.path()).unwrap();
    for id in VOTERS {
        let data = fresh.path().join(id);
        copy_dir(&backup, &data);
        std::fs::remove_file(data.join("node-id")).unwrap();
    }
    let a = start_with(&fresh, "a", BACK_END, None, &key_arg);
    let b = start_with(&fresh, "b", BACK_END, Some(&a), &key_arg);
    let c = start_with(&fresh, "c", BACK_END, Some(&a), &key_arg);
    let _worker = start_with(&fresh, "w2", "worker", Some(&a), &key_arg);
    // The admin token made before the backup still works: its hash is in
    // the journal. Through a node other than the first.
    let client = Api::with_options(&c.url, Some(&admin), None).unwrap();
    rt.block_on(async {
        let cluster = converge_via(&client, "the restored voters and worker", |cluster| {
            cluster.voters == VOTERS
                && !cluster.master_node.is_empty()
                && live(cluster).contains(&"w2")
        })
        .await;
        assert!(
            VOTERS.contains(&cluster.master_node.as_str()),
            "{cluster:?}"
        );

        for (id, input) in &before.finished {
            let done = settle(&client, *id).await;
            assert_eq!(done.state, "succeeded", "{done:?}");
            assert_eq!(&client.result(*id).await.unwrap()[..], input.as_bytes());
        }
        check_secret_read(&client, before.secret_jobs[0]).await;
        // The queued jobs run on the new worker, the secret opened with the
        // same cluster key.
        for (id, input) in &before.queued {
            let done = settle(&client, *id).await;
            assert_eq!(done.state, "succeeded", "{done:?}");
            assert_eq!(done.attempts.last().unwrap().worker, "w2", "{done:?}");
            assert_eq!(&client.result(*id).await.unwrap()[..], input.as_bytes());
        }
        check_secret_read(&client, before.secret_jobs[1]).await;
        // New jobs run, their module served by the restored back-end nodes.
        let id = client.submit(&job(&before.echo, "after")).await.unwrap().id;
        assert_eq!(settle(&client, id).await.state, "succeeded");
        assert_eq!(&client.result(id).await.unwrap()[..], b"after");
        let id = client
            .submit(&job("caller", &reads_secret))
            .await
            .unwrap()
            .id;
        check_secret_read(&client, id).await;
        // The blob, from every restored node.
        for node in [&a, &b, &c] {
            let via = Api::with_options(&node.url, Some(&admin), None).unwrap();
            let mut reader = via.get_blob(&before.blob.0, None).await.unwrap();
            let mut bytes = Vec::new();
            reader.read_to_end(&mut bytes).await.unwrap();
            assert!(bytes == before.blob.1, "the blob through {}", node.url);
        }
        // The token made after the backup is unknown to the restored
        // cluster.
        let late_client = Api::with_options(&a.url, Some(&late), None).unwrap();
        let refused = late_client
            .cluster()
            .await
            .expect_err("a token made after the backup");
        assert_eq!(refused.code(), "unauthorized", "{refused}");
    });
}

/// Job `id` of deployment "caller" succeeded and could read secret SMTP.
async fn check_secret_read(client: &Api, id: u64) {
    let done = settle(client, id).await;
    assert_eq!(done.state, "succeeded", "{done:?}");
    let output: Value = serde_json::from_slice(&client.result(id).await.unwrap()).unwrap();
    assert_eq!(output["secrets"], json!([true]), "{output}");
}

/// Copies directory `from` (a stopped node's data directory, or a copy of
/// one) whole to `to`, as `cp -a` would.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
