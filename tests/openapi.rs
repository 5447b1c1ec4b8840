//! The OpenAPI contract against a live node: schemathesis (pinned with
//! hashes in `tests/schemathesis/requirements.txt`, installed into
//! `target/tmp/schemathesis` on first use) generates requests from the
//! document the node serves and checks every answer, in every phase
//! (examples, coverage, fuzzing, and stateful: chains of calls that follow
//! the document's links). Zero failures, or the test fails with
//! schemathesis' report, whose curl lines reproduce each failure.
//! The options are explained in `tests/schemathesis/README.md`.

mod support;

use cohort::client::Node as Api;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::faults::exclusive;
use support::{Node, converge, job, pinned_venv, run_bounded, runtime, upload};

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/schemathesis")
}

#[test]
fn schemathesis_finds_no_failure_in_any_phase() {
    let _turn = exclusive();
    let cli =
        pinned_venv("schemathesis", &here().join("requirements.txt")).join("bin/schemathesis");
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("node"), &[]);
    // Something for the routes to find: a module and finished jobs.
    runtime().block_on(async {
        converge(&node, "a master", |c| !c.master_node.is_empty()).await;
        let api = Api::new(&node.url);
        let echo = upload(&api, "fixture_echo").await;
        for input in ["x", "y", "z"] {
            let id = api.submit(&job(&echo, input)).await.unwrap().id;
            api.job(id, 10_000).await.unwrap();
        }
    });
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let out = run_bounded(
        Command::new(&cli)
            .current_dir(&work)
            .env("HYPOTHESIS_STORAGE_DIRECTORY", work.join("hypothesis"))
            .env("SCHEMATHESIS_HOOKS", here().join("hooks.py"))
            .arg("--config-file")
            .arg(here().join("schemathesis.toml"))
            .arg("--no-color")
            .arg("run")
            .arg(format!("{}/openapi.json", node.url))
            .args(["--url", &node.url])
            .args(["--checks", "all"])
            .args(["--phases", "examples,coverage,fuzzing,stateful"])
            // Leaving stops the node under test; removing a voter could
            // remove the only one; the event stream never ends by itself
            // (tests/dashboard.rs reads it).
            .args(["--exclude-path", "/v1/node/leave"])
            .args(["--exclude-path", "/v1/cluster/voters/{node}"])
            .args(["--exclude-path", "/v1/events"])
            .args([
                "--max-examples",
                "25",
                "--seed",
                "20261123",
                "--workers",
                "1",
            ])
            .args(["--generation-database", "none", "--request-timeout", "10"])
            .args(["--wait-for-schema", "30", "--continue-on-failure"])
            .args(["--output-sanitize", "false", "--output-truncate", "false"]),
        b"",
    );
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{report}"
    );
    // The node is still up, and still serves.
    let health = runtime().block_on(async { Api::new(&node.url).cluster().await });
    assert!(health.is_ok(), "{health:?}\n{}", node.stderr());
}
