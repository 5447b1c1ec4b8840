//! `cohort replay` on the data directories of nodes that ran jobs through a
//! kill -9 of the master: one job's whole history, the state at a point,
//! the determinism check (Wasm against native, and the older snapshot
//! replayed up to the newer one), and a comparison with another master
//! component.

mod support;

use cohort::client::Node as Api;
use serde_json::Value;
use support::{cohort, converge, runtime, settle, start_with, upload};

const ALL: &str = "back-end,worker,front-end";

fn replay(dir: &std::path::Path, extra: &[&str]) -> (Option<i32>, Value, String) {
    let data_dir = dir.to_str().unwrap();
    let mut args = vec!["replay", "--data-dir", data_dir];
    args.extend(extra);
    let out = cohort(&args, b"");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), report, stderr)
}

#[test]
fn replay_shows_a_jobs_whole_history_and_verifies_the_state() {
    let dir = tempfile::tempdir().unwrap();
    // Snapshots every 40 events, so the directories hold two of them.
    let snapshots = ["--snapshot-every", "40"];
    let mut n1 = start_with(&dir, "n1", ALL, None, &snapshots);
    let mut n2 = start_with(&dir, "n2", ALL, Some(&n1), &snapshots);
    let mut n3 = start_with(&dir, "n3", ALL, Some(&n1), &snapshots);
    let rt = runtime();
    let (first, last) = rt.block_on(async {
        converge(&n2, "3 voters", |c| c.voters == ["n1", "n2", "n3"]).await;
        let client = Api::new(&n2.url);
        let echo = upload(&client, "fixture_echo").await;
        let mut ids = Vec::new();
        for n in 0..60 {
            ids.push(
                client
                    .submit(&support::job(&echo, &format!("a{n}")))
                    .await
                    .unwrap()
                    .id,
            );
        }
        for &id in &ids {
            assert_eq!(settle(&client, id).await.state, "succeeded");
        }
        // The master's node dies; n2 takes over and goes on.
        n1.kill();
        converge(&n2, "a new master", |c| {
            !c.master_node.is_empty() && c.master_node != "n1"
        })
        .await;
        for n in 0..60 {
            ids.push(
                client
                    .submit(&support::job(&echo, &format!("b{n}")))
                    .await
                    .unwrap()
                    .id,
            );
        }
        for &id in &ids[60..] {
            assert_eq!(settle(&client, id).await.state, "succeeded");
        }
        (ids[0], *ids.last().unwrap())
    });
    assert!(n2.terminate().success(), "{}", n2.stderr());
    assert!(n3.terminate().success(), "{}", n3.stderr());
    let n2_dir = dir.path().join("n2");

    // One job's whole history, on the node that took over.
    let (code, report, stderr) = replay(&n2_dir, &["--job", &first.to_string(), "--verify"]);
    assert_eq!(code, Some(0), "{stderr}");
    let history: Vec<&str> = (report["history"].as_array().unwrap().iter())
        .map(|step| {
            step["event"]
                .as_str()
                .unwrap()
                .split([' ', '{'])
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(history, ["Submitted", "Assigned", "Finished"], "{report:#}");
    assert_eq!(report["job"]["state"], "succeeded");
    assert_eq!(report["state"]["jobs"]["succeeded"], 120);
    assert_eq!(report["verify"]["ok"], true, "{report:#}");
    let recorded = report["verify"]["recorded"].as_str().unwrap();
    assert!(recorded.contains("byte for byte"), "{recorded}");

    // The state at a point: before the last job was submitted, it did not
    // exist; the native build replays the same.
    let index = report["history"][0]["index"].as_u64().unwrap();
    let (code, early, stderr) = replay(
        &n2_dir,
        &[
            "--until",
            &(index + 1).to_string(),
            "--job",
            &last.to_string(),
            "--core",
            "native",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(early["job"].is_string(), "{early:#}");
    // It stopped right after the first job's submission: the only one.
    assert_eq!(early["state"]["submitted_total"], 1, "{early:#}");

    // Another master component over the same events: the same build
    // acts the same; a job module is no master.
    let same = support::guest("cohort_master_component");
    let (code, compared, stderr) = replay(&n2_dir, &["--compare", same.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(compared["compare"]["differing_events"], 0, "{compared:#}");
    assert_eq!(compared["compare"]["same_state_at_the_end"], true);
    let echo = support::guest("fixture_echo");
    let (code, _, stderr) = replay(&n2_dir, &["--compare", echo.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("not a master component"), "{stderr}");

    // Not a data directory: a clear error.
    let (code, _, stderr) = replay(dir.path(), &[]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no journal"), "{stderr}");
}
