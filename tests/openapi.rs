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
use support::{Node, converge, job, run_bounded, runtime, upload};

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/schemathesis")
}

/// The schemathesis CLI, installed from the pins (again when they change).
fn schemathesis() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("schemathesis");
    let requirements = here().join("requirements.txt");
    let stamp = venv.join("requirements.stamp");
    let wanted = std::fs::read_to_string(&requirements).unwrap();
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(&wanted) {
        let _ = std::fs::remove_dir_all(&venv);
        let install = |command: &mut Command| {
            let out = run_bounded(command, b"");
            assert!(
                out.status.success(),
                "{command:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        install(Command::new("python3").arg("-m").arg("venv").arg(&venv));
        install(
            Command::new(venv.join("bin/python"))
                .args(["-m", "pip", "install", "--quiet", "--require-hashes", "-r"])
                .arg(&requirements),
        );
        std::fs::write(&stamp, &wanted).unwrap();
    }
    venv.join("bin/schemathesis")
}

#[test]
fn schemathesis_finds_no_failure_in_any_phase() {
    let _turn = exclusive();
    let cli = schemathesis();
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
            // remove the only one.
            .args(["--exclude-path", "/v1/node/leave"])
            .args(["--exclude-path", "/v1/cluster/voters/{node}"])
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
