//! The packages and the monitoring files under `host/deploy/`, each checked
//! by its own tool, and the image run as a cluster:
//!
//! * the Prometheus alert rules by `promtool check rules` and their unit
//!   tests (`promtool test rules`, synthetic series), every alert with a
//!   case where it fires;
//! * the Grafana dashboard's queries parsed by promtool (as recording
//!   rules), and every metric name (and label) the dashboard and the rules
//!   use found in the `/metrics` of a real 3-node cluster;
//! * the systemd unit by `systemd-analyze verify` (no warning) and its
//!   `systemd-analyze security` exposure, which docs/operations.md states;
//! * the Kubernetes manifests by `kubernetes-validate` (pinned, with
//!   hashes, in `target/tmp`), strict, against the oldest and newest
//!   Kubernetes they are written for, without network;
//! * the Containerfile built by podman and a 3-node cluster run from the
//!   image.
//!
//! Tools: Debian's promtool, podman and runc through
//! `host/deploy/tools/install-debian-tools` when missing (pinned to a
//! major.minor version), kubernetes-validate through [`pinned_venv`].
//!
//! What the image test does not build: no image registry is reachable from
//! the machines these tests run on, so the base images are made here. The
//! runtime stage runs on a base assembled from this machine's Debian 12
//! files (glibc, `/bin/sh`, the CA certificates: what the stage needs of
//! `debian:bookworm-slim`), and the build stage is replaced
//! (`--build-context build=DIR`) by a directory holding the binary cargo
//! built for these tests; the build stage's own command, `cargo install
//! --locked --path host`, is the one docs/operations.md documents for a
//! host install.

mod support;

use cohort::client::Node as Api;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;
use support::{
    OBSERVE, converge_via, eventually, eventually_async, job, live, pinned_venv, run_bounded,
    runtime, settle, start_with, upload,
};

/// The repository root.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The Kubernetes releases the manifests are validated against: the
/// oldest they are written for (the preStop `sleep` action is on by
/// default from 1.30) and the newest the pinned validator knows.
const KUBERNETES_VERSIONS: &[&str] = &["1.30.0", "1.37.0"];

/// The uid and gid the image runs as (the Containerfile's `USER`).
const IMAGE_USER: u32 = 65532;

/// Longest a container may take to stop on SIGTERM before podman kills
/// it: the node's leave (a hand-over, then the attempts' grace) fits well
/// within it.
const STOP_TIMEOUT_S: u32 = 30;

/// A file under `host/deploy/`.
fn deploy(path: &str) -> PathBuf {
    Path::new(ROOT).join("host/deploy").join(path)
}

/// This test's scratch directory under cargo's target/tmp.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("packaging")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Installs the Debian tools when one is missing (once per test binary).
fn debian_tools() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let script = deploy("tools/install-debian-tools");
        let out = run_bounded(&mut Command::new(&script), b"");
        assert!(
            out.status.success(),
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// Runs `command`, failing the test with its output unless it succeeds;
/// returns its stdout.
fn ok(command: &mut Command) -> String {
    let out = run_bounded(command, b"");
    assert!(out.status.success(), "{command:?}: {}", both(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A command's stdout and stderr, for a failure message.
fn both(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn promtool() -> Command {
    debian_tools();
    let mut command = Command::new("promtool");
    command.current_dir(deploy("prometheus"));
    command
}

/// The alert names `alerts.yml` defines, in order.
fn alert_names(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert: "))
        .map(|name| name.trim().to_string())
        .collect()
}

#[test]
fn alert_rules_pass_promtool_and_each_alert_has_a_unit_test_where_it_fires() {
    let out = ok(promtool().args(["check", "rules", "alerts.yml"]));
    let names = alert_names(&std::fs::read_to_string(deploy("prometheus/alerts.yml")).unwrap());
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", names.len())),
        "{out}"
    );
    ok(promtool().args(["test", "rules", "alerts.test.yml"]));

    // A case fires an alert when it expects a series of it (`exp_labels`);
    // every alert needs one, or a rule that never fires would pass.
    let tests = std::fs::read_to_string(deploy("prometheus/alerts.test.yml")).unwrap();
    let firing: BTreeSet<&str> = tests
        .split("- eval_time:")
        .filter(|case| case.contains("exp_labels:"))
        .filter_map(|case| case.split("alertname:").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    for name in &names {
        assert!(
            firing.contains(name.as_str()),
            "alerts.test.yml has no case where {name} fires"
        );
    }

    // The example configuration loads the rules; promtool also checks
    // that its token file exists, so it gets one here.
    let dir = scratch("prometheus");
    let token = dir.join("cohort.token");
    std::fs::write(&token, "cohort_example\n").unwrap();
    let config = std::fs::read_to_string(deploy("prometheus/prometheus.yml")).unwrap();
    let moved = config.replace("/etc/prometheus/cohort.token", token.to_str().unwrap());
    assert_ne!(moved, config);
    std::fs::write(dir.join("prometheus.yml"), moved).unwrap();
    std::fs::copy(deploy("prometheus/alerts.yml"), dir.join("alerts.yml")).unwrap();
    let out = ok(promtool()
        .arg("check")
        .arg("config")
        .arg(dir.join("prometheus.yml")));
    assert!(out.contains("SUCCESS"), "{out}");
}

/// The dashboard, parsed.
fn dashboard() -> Value {
    let text = std::fs::read_to_string(deploy("grafana/cohort.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every panel of the dashboard that queries (not the rows), with its
/// queries.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, Vec<String>)> {
    let panels = dashboard["panels"].as_array().expect("panels");
    (panels.iter())
        .filter(|panel| panel["type"] != "row")
        .map(|panel| {
            let exprs = panel["targets"].as_array().expect("targets");
            let exprs = exprs
                .iter()
                .map(|t| t["expr"].as_str().unwrap().to_string());
            (
                panel["title"].as_str().unwrap().to_string(),
                exprs.collect(),
            )
        })
        .collect()
}

/// A dashboard query as Prometheus gets it: Grafana's variables filled in.
fn as_sent(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$job", "cohort")
}

#[test]
fn dashboard_panels_are_placed_and_their_queries_parse() {
    let dashboard = dashboard();
    assert_eq!(dashboard["uid"], "cohort-cluster");
    let panels = dashboard["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    for panel in panels {
        assert!(ids.insert(panel["id"].as_u64().unwrap()), "{panel}");
        let grid = &panel["gridPos"];
        let right = grid["x"].as_u64().unwrap() + grid["w"].as_u64().unwrap();
        assert!(right <= 24, "past Grafana's 24 columns: {panel}");
        if panel["type"] != "row" {
            assert_eq!(panel["datasource"]["uid"], "${datasource}", "{panel}");
            assert!(panel["description"].as_str().is_some_and(|d| !d.is_empty()));
        }
    }
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let names: Vec<&str> = variables
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["datasource", "job"]);

    // promtool parses every query as the expression of a recording rule.
    let mut rules = Vec::new();
    for (n, (title, exprs)) in dashboard_queries(&dashboard).into_iter().enumerate() {
        assert!(!exprs.is_empty(), "{title} queries nothing");
        for (m, expr) in exprs.iter().enumerate() {
            assert!(expr.contains("{job=\"$job\"}"), "{title}: {expr}");
            rules
                .push(json!({"record": format!("dashboard:panel_{n}_{m}"), "expr": as_sent(expr)}));
        }
    }
    let dir = scratch("dashboard");
    let file = dir.join("queries.json");
    let groups = json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(&file, groups.to_string()).unwrap();
    let out = ok(promtool().arg("check").arg("rules").arg(&file));
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", rules.len())),
        "{out}"
    );
}

/// A metric selector in a query: the metric and its label matchers
/// `(label, operator, value)`.
type Selector = (String, Vec<(String, String, String)>);

/// The cohort metrics a query names, with their label matchers, and the
/// labels it groups by (`by (...)`).
fn selectors(expr: &str) -> (Vec<Selector>, BTreeSet<String>) {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("cohort_") {
        let starts_word = rest[..at]
            .chars()
            .last()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'));
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let mut matchers = Vec::new();
        if let Some(inner) = tail[end..].strip_prefix('{') {
            let inner = &inner[..inner.find('}').expect("closed selector")];
            for matcher in inner.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                let op_at = matcher.find(['=', '!']).expect("an operator");
                let label = matcher[..op_at].trim();
                let op_end = matcher[op_at..].find('"').expect("a quoted value") + op_at;
                let value = matcher[op_end..].trim_matches('"');
                matchers.push((
                    label.into(),
                    matcher[op_at..op_end].trim().into(),
                    value.into(),
                ));
            }
        }
        if starts_word {
            found.push((name.to_string(), matchers));
        }
        rest = &tail[end..];
    }
    let mut by = BTreeSet::new();
    for part in expr.split("by (").skip(1) {
        let labels = &part[..part.find(')').expect("closed by")];
        by.extend(labels.split(',').map(|l| l.trim().to_string()));
    }
    (found, by)
}

/// Every query of the dashboard and of the alert rules (the rules' `expr`
/// blocks: every line between `expr:` and the next key).
fn all_queries() -> Vec<String> {
    let mut queries: Vec<String> = (dashboard_queries(&dashboard()).into_iter())
        .flat_map(|(_, exprs)| exprs)
        .collect();
    let rules = std::fs::read_to_string(deploy("prometheus/alerts.yml")).unwrap();
    let mut current: Option<String> = None;
    for line in rules.lines() {
        let trimmed = line.trim();
        if let Some(expr) = trimmed.strip_prefix("expr:") {
            current = Some(expr.trim().trim_start_matches('|').to_string());
        } else if let Some(expr) = current.as_mut() {
            if trimmed.ends_with(':') || trimmed.contains(": ") || trimmed.starts_with('-') {
                queries.push(current.take().unwrap());
            } else {
                expr.push(' ');
                expr.push_str(trimmed);
            }
        }
    }
    queries.extend(current);
    queries
}

/// The samples of an OpenMetrics text: metric name to label sets.
fn samples(text: &str) -> BTreeMap<String, Vec<BTreeMap<String, String>>> {
    let mut out: BTreeMap<String, Vec<BTreeMap<String, String>>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let mut labels = BTreeMap::new();
        if line[end..].starts_with('{') {
            let inner = &line[end + 1..line.find('}').unwrap()];
            for pair in inner.split("\",").map(|p| p.trim_end_matches('"')) {
                if let Some((key, value)) = pair.split_once("=\"") {
                    labels.insert(key.to_string(), value.to_string());
                }
            }
        }
        out.entry(line[..end].to_string()).or_default().push(labels);
    }
    out
}

/// What is still missing from the scrapes: a metric a query names, a
/// label it matches or groups by, a value it matches exactly.
fn missing(
    queries: &[String],
    scraped: &BTreeMap<String, Vec<BTreeMap<String, String>>>,
) -> Vec<String> {
    // Prometheus adds these to every series it scrapes.
    let target = ["job", "instance"];
    let mut missing = Vec::new();
    let mut labels_anywhere = BTreeSet::new();
    for sets in scraped.values() {
        labels_anywhere.extend(sets.iter().flat_map(|set| set.keys().cloned()));
    }
    for query in queries {
        let (found, by) = selectors(query);
        for (name, matchers) in found {
            let Some(sets) = scraped.get(&name) else {
                missing.push(format!("{name} (in {query})"));
                continue;
            };
            for (label, op, value) in matchers.iter().filter(|m| !target.contains(&m.0.as_str())) {
                let has_label = sets.iter().any(|set| set.contains_key(label));
                let has_value = op != "=" || sets.iter().any(|set| set.get(label) == Some(value));
                if !has_label || !has_value {
                    missing.push(format!("{name}{{{label}{op}\"{value}\"}}"));
                }
            }
        }
        for label in by.iter().filter(|l| !target.contains(&l.as_str())) {
            if !labels_anywhere.contains(label) {
                missing.push(format!("a metric labelled {label} (in {query})"));
            }
        }
    }
    missing
}

#[test]
fn every_metric_and_label_the_dashboard_and_alerts_name_is_exported_by_a_real_cluster() {
    let queries = all_queries();
    // The cohort metrics named (Prometheus's own `up` aside).
    let named: BTreeSet<String> = queries
        .iter()
        .flat_map(|q| selectors(q).0.into_iter().map(|(name, _)| name))
        .collect();
    assert!(named.len() >= 20, "{named:?}");

    // Three nodes sealed with a cluster key, as in production.
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    let out = support::cohort(&["keygen", key.to_str().unwrap()], b"");
    assert!(out.status.success(), "{}", both(&out));
    // A queue of two, so that a DAG of three is refused with 429.
    let flags = ["--cluster-key", key.to_str().unwrap(), "--queue-max", "2"];
    let all = "back-end,worker,front-end";
    let a = start_with(&dir, "a", all, None, &flags);
    let b = start_with(&dir, "b", all, Some(&a), &flags);
    let c = start_with(&dir, "c", all, Some(&a), &flags);
    let token = support::token_at(&a.url, &key, "admin");
    let clients: Vec<Api> = [&a, &b, &c]
        .iter()
        .map(|node| Api::with_options(&node.url, Some(&token), None).unwrap())
        .collect();

    runtime().block_on(async {
        converge_via(&clients[1], "three live nodes", |c| live(c).len() == 3).await;
        // Jobs (through a node that may not host the master), one of which
        // calls out without a grant (egress_denied on its worker); a
        // request without a token (a security refusal).
        let echo = upload(&clients[1], "fixture_echo").await;
        let id = clients[1].submit(&job(&echo, "hello")).await.unwrap().id;
        assert_eq!(settle(&clients[1], id).await.state, "succeeded");
        let http = upload(&clients[2], "fixture_http").await;
        let call =
            json!({"calls": [{"method": "GET", "url": "http://127.0.0.1:9/", "timeout_ms": 1000}]});
        let id = clients[2]
            .submit(&job(&http, &call.to_string()))
            .await
            .unwrap()
            .id;
        assert_eq!(settle(&clients[2], id).await.state, "succeeded");
        let anonymous = Api::new(&b.url);
        assert!(anonymous.cluster().await.is_err());
        let three: Vec<Value> = (0..3)
            .map(|n| json!({"name": format!("j{n}"), "job": {"module": echo, "input": "x"}}))
            .collect();
        let dag = json!({ "jobs": three }).to_string();
        let (post, json_type) = (hyper::Method::POST, "application/json");
        let refused = clients[0].call(post, "/v1/dags", json_type, dag.into());
        let refused = refused.await.unwrap_err();
        assert!(refused.to_string().contains("queue_full"), "{refused}");

        eventually_async("every named metric in the scrapes", OBSERVE, async || {
            let mut scraped = BTreeMap::new();
            for client in &clients {
                for (name, sets) in samples(&support::metrics(client).await) {
                    scraped.entry(name).or_insert_with(Vec::new).extend(sets);
                }
            }
            match missing(&queries, &scraped) {
                gaps if gaps.is_empty() => Ok(()),
                gaps => Err(format!("missing: {gaps:#?}")),
            }
        })
        .await;
    });
}

/// A root for `systemd-analyze --root`: the unit, the binary where
/// `ExecStart` has it, the files the unit reads, and the system's units
/// (the default dependencies the unit is checked against).
fn systemd_root() -> PathBuf {
    let root = scratch("systemd-root");
    let units = ["/lib/systemd/system", "/usr/lib/systemd/system"]
        .into_iter()
        .find(|dir| Path::new(dir).join("multi-user.target").exists())
        .expect("systemd's units");
    std::fs::create_dir_all(root.join("lib/systemd")).unwrap();
    ok(Command::new("cp")
        .arg("-a")
        .arg(units)
        .arg(root.join("lib/systemd/system")));
    for (from, to) in [
        (
            deploy("systemd/cohort.service"),
            "etc/systemd/system/cohort.service",
        ),
        (deploy("systemd/cohort.env"), "etc/cohort/cohort.env"),
        (deploy("systemd/cohort.env"), "etc/cohort/cluster.key"),
        (
            PathBuf::from(env!("CARGO_BIN_EXE_cohort")),
            "usr/local/bin/cohort",
        ),
    ] {
        let to = root.join(to);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to).unwrap();
        }
    }
    root
}

#[test]
fn systemd_unit_verifies_clean_with_the_exposure_the_docs_state() {
    let root = systemd_root();
    let unit = "/etc/systemd/system/cohort.service";
    let out = run_bounded(
        Command::new("systemd-analyze")
            .arg("verify")
            .arg(format!("--root={}", root.display()))
            .arg(unit),
        b"",
    );
    // Clean: a setting systemd cannot parse is only a warning, and the
    // exit status stays 0.
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        both(&out)
    );

    let out = run_bounded(
        Command::new("systemd-analyze")
            .args(["security", "--offline=true", "--no-pager"])
            .arg(format!("--root={}", root.display()))
            .arg(unit),
        b"",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let exposure = text
        .lines()
        .find_map(|line| {
            line.split("Overall exposure level for cohort.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no exposure figure: {}", both(&out)))
        .to_string();
    let docs = std::fs::read_to_string(Path::new(ROOT).join("docs/operations.md")).unwrap();
    let stated = format!("exposure level {exposure} ");
    assert!(
        docs.contains(&stated),
        "docs/operations.md does not state the unit's `systemd-analyze security` figure ({stated:?})"
    );
}

#[test]
fn kubernetes_manifests_validate_strictly_against_the_schemas_offline() {
    let venv = pinned_venv("kubernetes-validate", &deploy("tools/requirements.txt"));
    let manifests: Vec<PathBuf> = std::fs::read_dir(deploy("kubernetes"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    assert_eq!(manifests.len(), 4, "{manifests:?}");
    // Without a network namespace of its own when the machine lets us make
    // one: the schemas must come with the package.
    let offline = Command::new("unshare")
        .args(["--net", "true"])
        .status()
        .is_ok_and(|s| s.success());
    let validate = |version: &str, files: &[PathBuf]| {
        let mut command = if offline {
            let mut command = Command::new("unshare");
            command
                .arg("--net")
                .arg(venv.join("bin/kubernetes-validate"));
            command
        } else {
            Command::new(venv.join("bin/kubernetes-validate"))
        };
        command.args(["--strict", "-k", version]).args(files);
        run_bounded(&mut command, b"")
    };
    for version in KUBERNETES_VERSIONS {
        let out = validate(version, &manifests);
        assert!(out.status.success(), "Kubernetes {version}: {}", both(&out));
    }

    // The check catches a misspelt field.
    let statefulset = std::fs::read_to_string(deploy("kubernetes/statefulset.yaml")).unwrap();
    let broken = scratch("kubernetes").join("statefulset.yaml");
    let typo = statefulset.replace("terminationGracePeriodSeconds", "terminationGracePeriod");
    assert_ne!(typo, statefulset);
    std::fs::write(&broken, typo).unwrap();
    let out = validate(KUBERNETES_VERSIONS[0], &[broken]);
    assert!(!out.status.success(), "{}", both(&out));

    // What the schemas cannot see: the names the manifests share.
    let services = std::fs::read_to_string(deploy("kubernetes/service.yaml")).unwrap();
    let secret = std::fs::read_to_string(deploy("kubernetes/secret.yaml")).unwrap();
    assert!(statefulset.contains("serviceName: cohort\n"));
    assert!(services.contains("  name: cohort\n") && services.contains("clusterIP: None"));
    assert!(statefulset.contains("secretName: cohort-cluster-key"));
    assert!(secret.contains("  name: cohort-cluster-key\n"));
    for pod in 0..3 {
        assert!(
            statefulset.contains(&format!("cohort-{pod}.cohort:7070")),
            "seed {pod}"
        );
    }
}

/// podman with this test's own storage (vfs: no overlay driver needed)
/// and runc (see install-debian-tools).
struct Engine {
    /// Images and containers (under target/tmp, made anew each run).
    storage: PathBuf,
    /// podman's run-time state: a short path of its own (podman refuses
    /// one over 50 characters, which target/tmp can exceed).
    run: tempfile::TempDir,
}

impl Engine {
    fn new(storage: PathBuf) -> Engine {
        let run = tempfile::Builder::new()
            .prefix("cohort-podman-")
            .tempdir_in("/tmp")
            .unwrap();
        Engine { storage, run }
    }

    fn podman(&self) -> Command {
        let mut command = Command::new("podman");
        command
            .arg("--root")
            .arg(&self.storage)
            .arg("--runroot")
            .arg(self.run.path())
            .args(["--storage-driver", "vfs", "--runtime", "runc"])
            .args(["--cgroup-manager", "cgroupfs", "--events-backend", "file"]);
        command
    }
}

/// Most processes (threads included) the image's user may have in the
/// test's containers: three nodes use a few hundred.
const CONTAINER_NPROC_MAX: u64 = 4096;

/// `--ulimit` flags within this process's own limits: podman's defaults
/// raise them, which a process without CAP_SYS_RESOURCE may not (and runc
/// is refused even this process's own `nproc`, hence the bound).
fn ulimits() -> Vec<String> {
    let current = |resource| {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `limit` is a valid rlimit for getrlimit to fill.
        assert_eq!(unsafe { libc::getrlimit(resource, &mut limit) }, 0);
        limit.rlim_cur
    };
    let nofile = current(libc::RLIMIT_NOFILE);
    let nproc = current(libc::RLIMIT_NPROC).min(CONTAINER_NPROC_MAX);
    vec![
        "--ulimit".into(),
        format!("nofile={nofile}:{nofile}"),
        "--ulimit".into(),
        format!("nproc={nproc}:{nproc}"),
    ]
}

/// The runtime stage's stand-in base: this machine's glibc, `/bin/sh` and
/// CA certificates, imported as an image.
fn runtime_base(engine: &Engine, work: &Path) -> String {
    let rootfs = work.join("rootfs");
    let mut files: BTreeSet<PathBuf> = BTreeSet::new();
    for program in [env!("CARGO_BIN_EXE_cohort"), "/bin/sh"] {
        files.insert(program.into());
        let out = ok(Command::new("ldd").arg(program));
        files.extend(
            out.split_whitespace()
                .filter(|word| word.starts_with('/'))
                .map(PathBuf::from),
        );
    }
    files.insert("/etc/ssl/certs/ca-certificates.crt".into());
    for file in &files {
        let to = rootfs.join(file.strip_prefix("/").unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        // The bytes, not a link: the image holds no link to outside it.
        std::fs::copy(file, &to).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
    // The binary goes in through the Containerfile, not the base.
    std::fs::remove_file(rootfs.join(env!("CARGO_BIN_EXE_cohort").trim_start_matches('/')))
        .unwrap();
    std::fs::create_dir_all(rootfs.join("tmp")).unwrap();
    ok(Command::new("chmod").arg("1777").arg(rootfs.join("tmp")));
    let tar = work.join("rootfs.tar");
    ok(Command::new("tar")
        .arg("-C")
        .arg(&rootfs)
        .arg("-cf")
        .arg(&tar)
        .arg("."));
    let image = "localhost/cohort-test/runtime-base:bookworm".to_string();
    ok(engine.podman().arg("import").arg(&tar).arg(&image));
    image
}

/// Containers this test started, removed when it ends however it ends.
struct Containers<'a> {
    engine: &'a Engine,
    names: Vec<String>,
}

impl Containers<'_> {
    fn logs(&self) -> String {
        let mut all = String::new();
        for name in &self.names {
            let out = run_bounded(self.engine.podman().args(["logs", name.as_str()]), b"");
            all.push_str(&format!("--- {name}:\n{}", both(&out)));
        }
        all
    }
}

impl Drop for Containers<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        for name in &self.names {
            let _ = run_bounded(
                self.engine
                    .podman()
                    .args(["rm", "-f", "-t", "0", name.as_str()]),
                b"",
            );
        }
    }
}

/// A free TCP port on loopback whose UDP twin is free too (gossip).
fn free_port() -> u16 {
    eventually("a free TCP and UDP port", Duration::from_secs(5), || {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let port = tcp.local_addr().unwrap().port();
        std::net::UdpSocket::bind(("127.0.0.1", port))
            .map(|_| port)
            .map_err(|e| e.to_string())
    })
}

#[test]
fn the_container_image_builds_and_runs_a_three_node_cluster() {
    debian_tools();
    let work = scratch("image");
    let engine = Engine::new(work.join("storage"));
    let base = runtime_base(&engine, &work);

    // The build stage's output: the binary, and the empty data directory.
    let stage = work.join("build-stage");
    std::fs::create_dir_all(stage.join("out/bin")).unwrap();
    std::fs::create_dir_all(stage.join("out/data")).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_cohort"), stage.join("out/bin/cohort")).unwrap();
    let context = work.join("context");
    std::fs::create_dir_all(&context).unwrap();
    let image = "localhost/cohort-test/cohort:dev";
    ok(engine
        .podman()
        .args(["build", "--network=none", "--pull=never"])
        .args(ulimits())
        .arg("-f")
        .arg(deploy("Containerfile"))
        .arg(format!("--build-context=build={}", stage.display()))
        .arg(format!("--build-arg=RUNTIME_IMAGE={base}"))
        .args(["-t", image])
        .arg(&context));
    let config = ok(engine.podman().args([
        "image",
        "inspect",
        "--format",
        "{{.Config.User}} {{json .Config.Entrypoint}} {{json .Config.Cmd}} {{.Config.StopSignal}}",
        image,
    ]));
    assert_eq!(
        config.trim(),
        format!("{IMAGE_USER}:{IMAGE_USER} [\"/usr/local/bin/cohort\"] [\"node\"] SIGTERM")
    );

    // The cluster key and data directories as the image's user reads them.
    let key = work.join("cluster.key");
    let out = support::cohort(&["keygen", key.to_str().unwrap()], b"");
    assert!(out.status.success(), "{}", both(&out));
    std::os::unix::fs::chown(&key, Some(IMAGE_USER), Some(IMAGE_USER)).unwrap();
    let names = ["a", "b", "c"];
    let ports: Vec<u16> = names.iter().map(|_| free_port()).collect();
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let mut token = None;
    let mut containers = Containers {
        engine: &engine,
        names: Vec::new(),
    };
    for (n, &name) in names.iter().enumerate() {
        let data = work.join(format!("data-{name}"));
        std::fs::create_dir_all(&data).unwrap();
        std::os::unix::fs::chown(&data, Some(IMAGE_USER), Some(IMAGE_USER)).unwrap();
        let container = format!("cohort-test-{name}-{}", ports[n]);
        containers.names.push(container.clone());
        let listen = format!("127.0.0.1:{}", ports[n]);
        let seed = format!("127.0.0.1:{}", ports[0]);
        let mut run = engine.podman();
        run.args(["run", "--detach", "--network=host", "--name", &container])
            .args(ulimits())
            .arg(format!(
                "--volume={}:/etc/cohort/cluster.key:ro",
                key.display()
            ))
            .arg(format!("--volume={}:/var/lib/cohort", data.display()))
            .args([
                image,
                "node",
                "--node-id",
                name,
                "--listen",
                listen.as_str(),
                "--cluster-key",
                "/etc/cohort/cluster.key",
            ])
            .args(["--slots", "4"]);
        if n > 0 {
            run.args(["--seed", seed.as_str()]);
        }
        ok(&mut run);
        // As the docs start a cluster: the first node hosts the master
        // (a token needs one) before the others join it.
        if n == 0 {
            token = Some(support::token_at(&urls[0], &key, "admin"));
        }
    }
    let token = token.expect("made by the first node");
    let clients: Vec<Api> = (urls.iter())
        .map(|url| Api::with_options(url, Some(&token), None).unwrap())
        .collect();

    runtime().block_on(async {
        let cluster = converge_via(&clients[1], "three live nodes", |c| live(c).len() == 3).await;
        assert!(cluster.security.cluster_key, "{cluster:?}");
        let echo = upload(&clients[1], "fixture_echo").await;
        for client in &clients {
            let id = client
                .submit(&job(&echo, "from a container"))
                .await
                .unwrap()
                .id;
            let done = settle(client, id).await;
            assert_eq!(done.state, "succeeded", "{done:?}");
            assert_eq!(
                &client.result(id).await.unwrap()[..],
                &b"from a container"[..]
            );
        }
        // SIGTERM to the master's node: it hands the master over and
        // exits 0 within the stop timeout; the others go on.
        let master = cluster.master_node.clone();
        let n = names
            .iter()
            .position(|name| *name == master)
            .expect("a node hosts the master");
        let stop = ok(engine.podman().args([
            "stop",
            "-t",
            STOP_TIMEOUT_S.to_string().as_str(),
            containers.names[n].as_str(),
        ]));
        assert!(stop.contains(&containers.names[n]), "{stop}");
        let code = ok(engine.podman().args([
            "inspect",
            "--format",
            "{{.State.ExitCode}}",
            containers.names[n].as_str(),
        ]));
        assert_eq!(code.trim(), "0", "{}", containers.logs());
        let survivor = &clients[(n + 1) % 3];
        converge_via(survivor, "another master", |c| {
            !c.master_node.is_empty() && c.master_node != master
        })
        .await;
        let request = job(&echo, "after the move");
        let id = support::retrying(std::time::Instant::now(), || survivor.submit(&request))
            .await
            .id;
        assert_eq!(settle(survivor, id).await.state, "succeeded");
    });
}
