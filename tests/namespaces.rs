//! Namespaces, tried against a real `cohort node` with a cluster key:
//! tokens confined to a namespace submit into it, see its jobs only and
//! learn nothing of another's (the same `404 job_not_found` as for a job
//! that never was, over the API, the Rust client and the CLI); they reach
//! no cluster-wide route; idempotency keys are per namespace; a
//! cluster-wide token sees and filters every namespace; bad names get
//! `invalid_namespace`; and all of it survives a kill -9 of the node.
//! Schedules are their jobs' namespace's: a confined token creates,
//! lists, reads, pauses, backfills and deletes its own only (another's is
//! `schedule_not_found`), and its schedule fires jobs into its namespace.
//! Quotas, set by a cluster-wide admin (API and CLI): past one a
//! namespace's submission is `429 quota_exceeded` with `Retry-After` and
//! no other namespace is held back; a namespace at its quota of running
//! attempts leaves free slots to the others; quotas survive a kill -9.
//! Fair shares on a 3-node cluster: two namespaces whose jobs cost ten
//! times apart, weighted 1 and 2, get CPU time about 1 : 2 whichever
//! came first, before and after a kill -9 of the master's node.

mod support;

use cohort::client::types::{
    BackfillRequest, BatchRequest, BulkRequest, DagJobRequest, DagRequest, JobFilterBody,
    QuotasBody, ScheduleRequest, SubmitRequest,
};
use cohort::client::{ClientError, JobQuery, Node as Api};
use cohort::security::key::generate;
use std::collections::BTreeMap;
use std::path::Path;
use support::{Node, runtime, start_with, upload};

const ROLES: &str = "back-end,worker,front-end";

fn secure(dir: &tempfile::TempDir, key: &Path) -> Node {
    start_with(
        dir,
        "n1",
        ROLES,
        None,
        &["--cluster-key", key.to_str().unwrap()],
    )
}

fn client(node: &Node, token: &str) -> Api {
    Api::with_options(&node.url, Some(token), None).unwrap()
}

/// `(status, code, message)` of a refused call.
fn refusal<T: std::fmt::Debug>(result: Result<T, ClientError>) -> (u16, String, String) {
    match result {
        Err(ClientError::Api {
            status,
            code,
            message,
            ..
        }) => (status, code, message),
        other => panic!("a refusal, not {other:?}"),
    }
}

/// A job that waits in line: no worker has the label it asks for.
fn waiting(module: &str, input: &str) -> SubmitRequest {
    SubmitRequest {
        labels: BTreeMap::from([("pool".into(), "none".into())]),
        ..support::job(module, input)
    }
}

async fn listed(api: &Api, namespace: Option<&str>) -> Vec<(u64, String)> {
    let query = JobQuery {
        namespace: namespace.map(String::from),
        ..JobQuery::default()
    };
    let page = api.list(&query).await.unwrap();
    page.jobs.into_iter().map(|j| (j.id, j.namespace)).collect()
}

#[test]
fn a_namespaces_token_sees_its_own_jobs_and_nothing_of_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, generate()).unwrap();
    let mut node = secure(&dir, &key);
    let token = |scopes: &str, namespace: Option<&str>| {
        let extra: Vec<&str> = namespace.map_or(vec![], |n| vec!["--namespace", n]);
        support::token_with(&node.url, &key, scopes, &extra)
    };
    let admin = token("admin", None);
    let team_a = token("admin", Some("team-a"));
    let team_b = token("submit,read", Some("team-b"));
    let rt = runtime();
    let (a_jobs, b_job, counted) = rt.block_on(async {
        let root = client(&node, &admin);
        let (a, b) = (client(&node, &team_a), client(&node, &team_b));
        let echo = upload(&root, "fixture_echo").await;

        // Each token submits into its namespace; a cluster-wide one
        // chooses (the default one when it names none).
        let a1 = a.submit(&waiting(&echo, "a1")).await.unwrap().id;
        let b1 = b.submit(&waiting(&echo, "b1")).await.unwrap().id;
        let root_default = root.submit(&waiting(&echo, "r")).await.unwrap().id;
        let root_in_a = SubmitRequest {
            namespace: Some("team-a".into()),
            ..waiting(&echo, "r-a")
        };
        let a2 = root.submit(&root_in_a).await.unwrap().id;
        assert_eq!(a.job(a1, 0).await.unwrap().namespace, "team-a");
        assert_eq!(root.job(b1, 0).await.unwrap().namespace, "team-b");
        assert_eq!(root.job(root_default, 0).await.unwrap().namespace, "default");
        assert_eq!(a.job(a2, 0).await.unwrap().namespace, "team-a");

        // Another namespace's job is no job: the same answer, word for
        // word, as an id that never was, on every job route.
        let never = b1 + 1_000;
        for (id, other) in [(b1, never), (root_default, never + 1)] {
            let seen = refusal(a.job(id, 0).await);
            let unseen = refusal(a.job(other, 0).await);
            assert_eq!(seen.0, 404, "{seen:?}");
            assert_eq!(seen.1, "job_not_found");
            assert_eq!(seen.2.replace(&id.to_string(), "N"), unseen.2.replace(&other.to_string(), "N"));
            assert_eq!(refusal(a.job(id, 50).await).1, "job_not_found", "waiting");
            assert_eq!(refusal(a.result(id).await).1, "job_not_found");
            assert_eq!(refusal(a.cancel(id).await).1, "job_not_found");
            let input = a
                .call(hyper::Method::GET, &format!("/v1/jobs/{id}/input"), "", Default::default())
                .await;
            assert_eq!(refusal(input).1, "job_not_found");
        }
        assert_eq!(root.job(b1, 0).await.unwrap().state, "queued", "not cancelled");
        let waited = a.wait(&[b1, a1], 0).await.unwrap();
        let states: Vec<_> = waited.jobs.iter().map(|j| (j.id, j.state.as_str())).collect();
        assert_eq!(states, [(b1, "unknown")], "a's own job still waits");
        assert_eq!(waited.jobs[0].error.as_ref().unwrap().code, "job_not_found");

        // Listings: a confined token lists its own, whatever it asks for;
        // a cluster-wide one lists all, or one namespace.
        let own = vec![(a1, "team-a".to_string()), (a2, "team-a".to_string())];
        assert_eq!(listed(&a, None).await, own);
        assert_eq!(listed(&a, Some("team-b")).await, own);
        assert_eq!(listed(&root, Some("team-a")).await, own);
        assert_eq!(listed(&root, Some("default")).await, [(root_default, "default".into())]);
        assert_eq!(listed(&root, None).await.len(), 4);

        // Submitting into another namespace is refused; so is waiting for
        // another's job as a parent, as for a job that never was.
        let elsewhere = SubmitRequest {
            namespace: Some("team-b".into()),
            ..support::job(&echo, "x")
        };
        let (status, code, _) = refusal(a.submit(&elsewhere).await);
        assert_eq!((status, code.as_str()), (403, "forbidden"));
        let after = |id| SubmitRequest {
            after: vec![id],
            ..support::job(&echo, "x")
        };
        let (seen, unseen) = (refusal(a.submit(&after(b1)).await), refusal(a.submit(&after(never)).await));
        assert_eq!((seen.0, seen.1.as_str()), (422, "invalid_dag"));
        assert_eq!(seen.2.replace(&b1.to_string(), "N"), unseen.2.replace(&never.to_string(), "N"));

        // A DAG of a confined token is its namespace's, and its status
        // another namespace's `dag_not_found`, as a DAG that never was.
        let request = DagRequest {
            jobs: vec![DagJobRequest {
                name: "only".into(),
                job: waiting(&echo, "dag"),
                ..DagJobRequest::default()
            }],
            ..DagRequest::default()
        };
        let dag = a.submit_dag(&request).await.unwrap();
        assert_eq!(a.job(dag.jobs[0], 0).await.unwrap().namespace, "team-a");
        assert_eq!(a.dag(dag.id).await.unwrap().jobs.len(), 1);
        let (seen, unseen) = (refusal(b.dag(dag.id).await), refusal(b.dag(dag.id + 100).await));
        assert_eq!((seen.0, seen.1.as_str()), (404, "dag_not_found"));
        assert_eq!(seen.2.replace(&dag.id.to_string(), "N"), unseen.2.replace(&(dag.id + 100).to_string(), "N"));

        // Idempotency keys are each namespace's own.
        let keyed = |input| SubmitRequest {
            idempotency_key: Some("nightly".into()),
            ..waiting(&echo, input)
        };
        let a_keyed = a.submit(&keyed("x")).await.unwrap();
        let b_keyed = b.submit(&keyed("x")).await.unwrap();
        assert_ne!(a_keyed.id, b_keyed.id);
        assert_eq!(a.submit(&keyed("x")).await.unwrap().id, a_keyed.id);

        // A bulk cancel of a confined admin token changes its own jobs.
        let cancel = BulkRequest {
            action: "cancel".into(),
            filter: JobFilterBody::default(),
            dry_run: false,
            attempts: None,
        };
        assert_eq!(a.bulk(&cancel).await.unwrap().changed, Some(4), "a1, a2, the DAG's, the keyed one");
        assert_eq!(root.job(b1, 0).await.unwrap().state, "queued");
        assert_eq!(root.job(b_keyed.id, 0).await.unwrap().state, "queued");

        // Cluster-wide routes are not a confined token's, whatever its
        // scopes; `whoami` says where it reaches.
        for (method, path) in [
            (hyper::Method::GET, "/metrics"),
            (hyper::Method::GET, "/v1/overview"),
            (hyper::Method::GET, "/v1/secrets"),
            (hyper::Method::GET, "/v1/cluster"),
            (hyper::Method::GET, "/v1/modules"),
            (hyper::Method::GET, "/v1/tokens"),
            (hyper::Method::GET, "/v1/deployments"),
            (hyper::Method::GET, "/v1/no/such/route"),
        ] {
            let (status, code, message) =
                refusal(a.call(method.clone(), path, "application/json", Default::default()).await);
            assert_eq!((status, code.as_str()), (403, "forbidden"), "{method} {path}");
            assert!(message.contains("team-a"), "{message}");
        }
        let whoami = a.whoami().await.unwrap();
        assert_eq!(whoami.namespace.as_deref(), Some("team-a"));
        assert_eq!(root.whoami().await.unwrap().namespace, None);

        // Bad names.
        let bad = SubmitRequest {
            namespace: Some("Team A".into()),
            ..support::job(&echo, "x")
        };
        assert_eq!(refusal(root.submit(&bad).await).1, "invalid_namespace");
        let bad_listing = root
            .call(hyper::Method::GET, "/v1/jobs?namespace=-a", "", Default::default())
            .await;
        assert_eq!(refusal(bad_listing).1, "invalid_namespace");
        let bad_token = br#"{"id":"0123456789ab","scopes":["read"],"sha256":"00000000000000000000000000000000000000000000000000000000000000aa","namespace":"A_B"}"#;
        let created = root
            .call(hyper::Method::POST, "/v1/tokens", "application/json", bad_token.to_vec().into())
            .await;
        assert_eq!(refusal(created).1, "invalid_namespace");
        // Each namespace's counts and costs: all of them for a
        // cluster-wide token, its own for a confined one, and in /metrics.
        let ran = b.submit(&support::job(&echo, "runs")).await.unwrap().id;
        support::settle(&root, ran).await;
        let all = root.namespaces().await.unwrap().namespaces;
        let names: Vec<&str> = all.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["default", "team-a", "team-b"]);
        let team_b = &all[2];
        assert_eq!((team_b.jobs["queued"], team_b.jobs["succeeded"]), (2, 1));
        assert_eq!((team_b.submitted_total, team_b.attempts_metered), (3, 1));
        assert_eq!(all[1].jobs["cancelled"], 4);
        let own = a.namespaces().await.unwrap().namespaces;
        assert_eq!(own, [all[1].clone()]);
        let metrics = support::metrics(&root).await;
        for series in [
            "cohort_namespace_jobs{namespace=\"team-a\",state=\"cancelled\"} 4",
            "cohort_namespace_jobs_submitted_total{namespace=\"team-b\"} 3",
            "cohort_namespace_attempts_metered_total{namespace=\"team-b\"} 1",
            // Each cluster-wide route a confined token tried, above.
            "cohort_security_refused_total{what=\"token\",reason=\"namespace\"} 8",
        ] {
            assert!(metrics.contains(series), "{series} in:\n{metrics}");
        }
        (vec![a1, a2, dag.jobs[0], a_keyed.id], b1, all)
    });

    // The CLI: a confined token's listing, status and submission.
    let cli = |args: &[&str]| node.cli(args, b"");
    let out = cli(&["jobs", "--token", &team_a]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        listing.contains("team-a") && !listing.contains("team-b"),
        "{listing}"
    );
    let out = cli(&["status", &b_job.to_string(), "--token", &team_a]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("job_not_found"));
    let out = cli(&["status", &a_jobs[0].to_string(), "--token", &team_a]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("namespace   team-a"));
    let out = cli(&["token", "list", "--token", &admin]);
    let tokens = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        tokens.contains("NAMESPACE") && tokens.contains("team-b"),
        "{tokens}"
    );
    let out = cli(&["namespaces", "--token", &team_b]);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        table.contains("team-b") && !table.contains("team-a"),
        "{table}"
    );
    let out = cohort_token_create(&node, &key, "Bad Name");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("namespace"));

    // Killed and started again: the journal keeps every job's namespace
    // and every token's.
    node.kill();
    node = secure(&dir, &key);
    rt.block_on(async {
        let a = client(&node, &team_a);
        let query = JobQuery::default();
        let seen = support::retrying(std::time::Instant::now(), || a.list(&query)).await;
        let ids: Vec<u64> = seen.jobs.iter().map(|j| j.id).collect();
        assert_eq!(ids, a_jobs);
        assert_eq!(refusal(a.job(b_job, 0).await).1, "job_not_found");
        assert_eq!(
            client(&node, &team_b)
                .job(b_job, 0)
                .await
                .unwrap()
                .namespace,
            "team-b"
        );
        let root = client(&node, &admin);
        assert_eq!(root.namespaces().await.unwrap().namespaces, counted);
    });
}

#[test]
fn a_namespaces_schedules_are_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, generate()).unwrap();
    let node = secure(&dir, &key);
    let token = |scopes: &str, namespace: &str| {
        support::token_with(&node.url, &key, scopes, &["--namespace", namespace])
    };
    let admin = support::token_with(&node.url, &key, "admin", &[]);
    let (team_a, team_b) = (token("submit,read", "team-a"), token("admin", "team-b"));
    runtime().block_on(async {
        let root = client(&node, &admin);
        let (a, b) = (client(&node, &team_a), client(&node, &team_b));
        let echo = upload(&root, "fixture_echo").await;
        let schedule = |name: &str, namespace: Option<&str>| ScheduleRequest {
            name: name.into(),
            every_ms: Some(1_000),
            job: SubmitRequest {
                namespace: namespace.map(str::to_owned),
                ..support::job(&echo, name)
            },
            ..ScheduleRequest::default()
        };
        // Created by a confined token: its namespace's, whatever the job
        // says of none; naming another namespace is forbidden.
        let made = a.create_schedule(&schedule("beat", None)).await.unwrap();
        assert_eq!(made.namespace, "team-a");
        let elsewhere = a.create_schedule(&schedule("x", Some("team-b"))).await;
        assert_eq!(refusal(elsewhere).1, "forbidden");
        root.create_schedule(&schedule("root-beat", Some("team-b")))
            .await
            .unwrap();
        root.pause_schedule("root-beat", true).await.unwrap();

        // Listed and read by its namespace and by a cluster-wide token.
        let names = |list: Vec<cohort::client::types::ScheduleResponse>| -> Vec<(String, String)> {
            list.into_iter().map(|s| (s.name, s.namespace)).collect()
        };
        let mine = names(a.schedules().await.unwrap().schedules);
        assert_eq!(mine, [("beat".to_owned(), "team-a".to_owned())]);
        let theirs = names(b.schedules().await.unwrap().schedules);
        assert_eq!(theirs, [("root-beat".to_owned(), "team-b".to_owned())]);
        assert_eq!(root.schedules().await.unwrap().schedules.len(), 2);
        assert_eq!(a.schedule("beat").await.unwrap().namespace, "team-a");

        // Another namespace's schedule is no schedule: the same answer,
        // word for word, as a name that never was, on every route.
        let never = refusal(b.schedule("never").await);
        assert_eq!((never.0, never.1.as_str()), (404, "schedule_not_found"));
        let other = refusal(b.schedule("beat").await);
        assert_eq!(
            other,
            (404, "schedule_not_found".into(), "no schedule beat".into())
        );
        assert_eq!(refusal(b.pause_schedule("beat", true).await), other);
        assert_eq!(refusal(b.pause_schedule("beat", false).await), other);
        assert_eq!(
            refusal(b.backfill("beat", &BackfillRequest::default()).await),
            other
        );
        assert_eq!(refusal(b.delete_schedule("beat").await), other);
        assert_eq!(
            refusal(a.delete_schedule("root-beat").await).1,
            "schedule_not_found"
        );
        // Names are the cluster's: one another namespace holds is taken.
        let taken = refusal(b.create_schedule(&schedule("beat", None)).await);
        assert_eq!((taken.0, taken.1.as_str()), (409, "schedule_exists"));

        // It fires jobs into its namespace, which only it (and a
        // cluster-wide token) reads.
        let fired = loop {
            if let Some(job) = a.schedule("beat").await.unwrap().last_job {
                break job;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        assert_eq!(a.job(fired, 0).await.unwrap().namespace, "team-a");
        assert_eq!(refusal(b.job(fired, 0).await).1, "job_not_found");

        // Its own namespace pauses, resumes, backfills and deletes it.
        assert!(a.pause_schedule("beat", true).await.unwrap().paused);
        assert!(!a.pause_schedule("beat", false).await.unwrap().paused);
        let empty = BackfillRequest {
            from: Some(0),
            to: Some(1),
        };
        assert_eq!(
            a.backfill("beat", &empty).await.unwrap().ids,
            Vec::<u64>::new()
        );
        assert!(a.delete_schedule("beat").await.unwrap().deleted);
        assert_eq!(refusal(a.schedule("beat").await).1, "schedule_not_found");
        assert!(b.delete_schedule("root-beat").await.unwrap().deleted);
        assert!(root.schedules().await.unwrap().schedules.is_empty());
    });
}

fn cohort_token_create(node: &Node, key: &Path, namespace: &str) -> std::process::Output {
    let key = key.to_str().unwrap();
    let args = [
        "token",
        "create",
        "--cluster-key",
        key,
        "--scope",
        "read",
        "--namespace",
        namespace,
    ];
    node.cli(&args, b"")
}

/// The jobs namespace `name` holds in `state`, as the node counts them.
/// Namespace `name`'s jobs running and queued, from one answer.
async fn running_and_queued(api: &Api, name: &str) -> (u64, u64) {
    let list = api.namespaces().await.unwrap();
    let namespace = list.namespaces.iter().find(|n| n.name == name);
    let count = |state: &str| namespace.map_or(0, |n| n.jobs.get(state).copied().unwrap_or(0));
    (count("running"), count("queued"))
}

async fn held(api: &Api, name: &str, state: &str) -> u64 {
    let list = api.namespaces().await.unwrap();
    let namespace = list.namespaces.iter().find(|n| n.name == name);
    namespace.map_or(0, |n| n.jobs.get(state).copied().unwrap_or(0))
}

#[test]
fn quotas_refuse_past_their_bound_hold_back_running_attempts_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, generate()).unwrap();
    let mut node = secure(&dir, &key);
    let admin = support::token_with(&node.url, &key, "admin", &[]);
    let team_a = support::token_with(&node.url, &key, "admin", &["--namespace", "team-a"]);
    let rt = runtime();
    // Quotas are the cluster's to give: a team's admin cannot set its own.
    let (status, code, _) = refusal(rt.block_on(async {
        let quotas = QuotasBody {
            waiting_max: Some(1000),
            ..QuotasBody::default()
        };
        client(&node, &team_a).set_quotas("team-a", &quotas).await
    }));
    assert_eq!((status, code.as_str()), (403, "forbidden"));
    // Bad quotas and names, refused by the node and by the CLI first.
    rt.block_on(async {
        let root = client(&node, &admin);
        let zero = QuotasBody {
            running_max: Some(0),
            ..QuotasBody::default()
        };
        let (status, code, message) = refusal(root.set_quotas("team-a", &zero).await);
        assert_eq!((status, code.as_str()), (422, "invalid_quota"), "{message}");
        assert!(message.contains("running_max"), "{message}");
        let fine = QuotasBody {
            running_max: Some(1),
            ..QuotasBody::default()
        };
        let (status, code, _) = refusal(root.set_quotas("Team_A", &fine).await);
        assert_eq!((status, code.as_str()), (422, "invalid_namespace"));
    });
    let with_token = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--token", admin.as_str()]);
        node.cli(&all, b"")
    };
    let absurd = with_token(&[
        "quota",
        "set",
        "team-a",
        "--submissions-per-second",
        "9999999",
    ]);
    assert!(!absurd.status.success());
    assert!(String::from_utf8_lossy(&absurd.stderr).contains("submissions_per_second"));
    // Team a may hold two jobs waiting; team b may run one attempt.
    let set = with_token(&["quota", "set", "team-a", "--waiting-max", "2"]);
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&set.stdout).trim(),
        "namespace team-a: waiting<=2"
    );
    let set = with_token(&["quota", "set", "team-b", "--running-max", "1"]);
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    rt.block_on(async {
        let root = client(&node, &admin);
        let a = client(&node, &team_a);
        let spin = upload(&root, "fixture_spin").await;
        a.submit(&waiting(&spin, "a1")).await.unwrap();
        a.submit(&waiting(&spin, "a2")).await.unwrap();
        let refused = a.submit(&waiting(&spin, "a3")).await;
        let Err(ClientError::Api {
            status,
            code,
            message,
            retry_after,
            ..
        }) = refused
        else {
            panic!("a refusal, not {refused:?}");
        };
        assert_eq!(
            (status, code.as_str()),
            (429, "quota_exceeded"),
            "{message}"
        );
        assert!(message.contains("team-a"), "{message}");
        assert!(retry_after.is_some(), "429 carries Retry-After");
        // The default namespace and another one are not held back.
        root.submit(&waiting(&spin, "d1")).await.unwrap();
        let elsewhere = SubmitRequest {
            namespace: Some("team-c".into()),
            ..waiting(&spin, "c1")
        };
        root.submit(&elsewhere).await.unwrap();
        // Team b's three attempts run one at a time (each times out after
        // a while), though the node has slots for more: a job of another
        // namespace submitted after them starts meanwhile.
        let sleeper = || SubmitRequest {
            namespace: Some("team-b".into()),
            timeout_ms: Some(1500),
            max_attempts: Some(1),
            ..support::job(&spin, "sleep")
        };
        let mut b_jobs = Vec::new();
        for _ in 0..3 {
            b_jobs.push(root.submit(&sleeper()).await.unwrap().id);
        }
        support::eventually_async("team b running one", support::SETTLE, || async {
            match running_and_queued(&root, "team-b").await {
                (1, 2) => Ok(()),
                other => Err(format!("(running, queued) {other:?}")),
            }
        })
        .await;
        let other = root
            .submit(&SubmitRequest {
                timeout_ms: Some(1500),
                max_attempts: Some(1),
                ..support::job(&spin, "sleep")
            })
            .await
            .unwrap()
            .id;
        support::eventually_async(
            "another namespace's job running",
            support::SETTLE,
            || async {
                let job = root.job(other, 0).await.unwrap();
                let b_running = held(&root, "team-b", "running").await;
                assert!(b_running <= 1, "team b runs {b_running} attempts");
                match job.state.as_str() {
                    "queued" => Err("queued".to_owned()),
                    _ => Ok(()),
                }
            },
        )
        .await;
        // All of team b's jobs end, never two running at once.
        support::eventually_async("team b's jobs ended", support::SETTLE, || async {
            // Both counts from one answer: read apart, a job could start
            // between them and be counted in neither.
            let (running, queued) = running_and_queued(&root, "team-b").await;
            assert!(running <= 1, "team b runs {running} attempts");
            match (running, queued) {
                (0, 0) => Ok(()),
                other => Err(format!("(running, queued) {other:?}")),
            }
        })
        .await;
        let starts: Vec<(u64, u64)> = {
            let mut starts = Vec::new();
            for id in &b_jobs {
                let job = root.job(*id, 0).await.unwrap();
                let attempt = &job.attempts[0];
                // The master's times: the end is its report, or its lease's
                // expiry (a sleep in a host call may outlast its timeout).
                starts.push((attempt.started_at, attempt.ended_at.unwrap()));
            }
            starts
        };
        for pair in starts.windows(2) {
            assert!(pair[1].0 >= pair[0].1, "attempts overlapped: {starts:?}");
        }
    });
    // The quotas are journaled: after a kill -9 they are listed and hold.
    node.kill();
    node = secure(&dir, &key);
    rt.block_on(async {
        let root = client(&node, &admin);
        let list = support::retrying(std::time::Instant::now(), || root.namespaces()).await;
        let quotas: Vec<(String, QuotasBody)> = (list.namespaces.iter())
            .filter(|n| n.quotas != QuotasBody::default())
            .map(|n| (n.name.clone(), n.quotas))
            .collect();
        let expected = [
            (
                "team-a".to_owned(),
                QuotasBody {
                    waiting_max: Some(2),
                    ..QuotasBody::default()
                },
            ),
            (
                "team-b".to_owned(),
                QuotasBody {
                    running_max: Some(1),
                    ..QuotasBody::default()
                },
            ),
        ];
        assert_eq!(quotas, expected);
        let a = client(&node, &team_a);
        let spin = upload(&root, "fixture_spin").await;
        let (status, code, _) = refusal(a.submit(&waiting(&spin, "a3")).await);
        assert_eq!((status, code.as_str()), (429, "quota_exceeded"));
        // Cleared, the namespace submits again.
        let clear = node.cli(&["quota", "clear", "team-a", "--token", &admin], b"");
        assert!(
            clear.status.success(),
            "{}",
            String::from_utf8_lossy(&clear.stderr)
        );
        a.submit(&waiting(&spin, "a3")).await.unwrap();
        let metrics = support::metrics(&root).await;
        assert!(
            metrics
                .contains("cohort_namespace_quota{namespace=\"team-b\",quota=\"running_max\"} 1"),
            "{metrics}"
        );
    });
}

/// CPU seconds each of namespaces `a` and `b` used, as the master counts.
async fn cpu(api: &Api) -> (f64, f64) {
    let list = api.namespaces().await.unwrap();
    let of = |name: &str| {
        let namespace = list.namespaces.iter().find(|n| n.name == name);
        namespace.map_or(0.0, |n| n.cpu_us as f64 / 1e6)
    };
    (of("a"), of("b"))
}

/// Waits until `a` and `b` used `seconds` more CPU together than at
/// `from`; the share of it `b` got per second `a` got.
async fn ratio_over(api: &Api, from: (f64, f64), seconds: f64) -> f64 {
    let what = format!("{seconds} CPU seconds more after {from:?}");
    let now = support::eventually_async(&what, support::SETTLE, || async {
        let now = cpu(api).await;
        match now.0 + now.1 - from.0 - from.1 >= seconds {
            true => Ok(now),
            false => Err(format!("{now:?}")),
        }
    })
    .await;
    let (a, b) = (now.0 - from.0, now.1 - from.1);
    assert!(a > 0.0, "a got no CPU: {from:?} to {now:?}");
    b / a
}

#[test]
fn weighted_namespaces_share_the_cpu_by_cost_through_a_kill_of_the_masters_node() {
    let dir = tempfile::tempdir().unwrap();
    // n1 hosts the master and runs no job; n2 and n3 run them (4 slots
    // each) and keep a majority of the back-ends when n1 dies.
    let mut n1 = support::start(&dir, "n1", "back-end,front-end", None);
    let n2 = support::start(&dir, "n2", "back-end,worker,front-end", Some(&n1));
    let n3 = support::start(&dir, "n3", "back-end,worker,front-end", Some(&n1));
    let rt = runtime();
    rt.block_on(async {
        support::converge(&n1, "the workers, the master on n1", |c| {
            c.workers.len() == 2 && c.master_node == "n1"
        })
        .await;
        let api = Api::new(&n1.url);
        let spin = upload(&api, "fixture_spin").await;
        api.set_weight("b", 2).await.unwrap();
        let (status, code, _) = refusal(api.set_weight("b", 0).await);
        assert_eq!((status, code.as_str()), (422, "invalid_weight"));
        // Team a first, with a backlog that would hold every slot for a
        // while; then team b, whose jobs cost a tenth of a's.
        let spinning = |namespace: &str, timeout_ms: u64, n: usize| BatchRequest {
            jobs: (0..n)
                .map(|_| SubmitRequest {
                    namespace: Some(namespace.into()),
                    timeout_ms: Some(timeout_ms),
                    max_attempts: Some(1),
                    ..support::job(&spin, "spin")
                })
                .collect(),
        };
        api.submit_batch(&spinning("a", 500, 150)).await.unwrap();
        api.submit_batch(&spinning("b", 50, 2400)).await.unwrap();
        // Until a's first attempts end, the master can only guess what
        // they cost (its first guess low, a takes more than its share at
        // first, and pays it back once they are metered): the shares are
        // measured from the start, over many attempts of each, as the
        // bound says a share is exact to about one attempt per slot.
        let before = ratio_over(&api, (0.0, 0.0), 8.0).await;
        assert!(
            (1.4..=2.9).contains(&before),
            "b/a {before:.2}, not about 2"
        );
        eprintln!("CPU b/a before the kill: {before:.2}");
    });
    // The master's node dies; n2 takes over with the journal, and with it
    // the namespaces' accounts.
    n1.kill();
    rt.block_on(async {
        let api = Api::new(&n2.url);
        support::converge(&n2, "the master on another node", |c| {
            c.master_node != "n1" && !c.master_node.is_empty()
        })
        .await;
        let weights = api.namespaces().await.unwrap();
        let b = weights.namespaces.iter().find(|n| n.name == "b").unwrap();
        assert_eq!(b.weight, 2);
        let from = cpu(&api).await;
        let after = ratio_over(&api, from, 8.0).await;
        assert!(
            (1.4..=2.9).contains(&after),
            "b/a {after:.2} after the kill, not about 2"
        );
        eprintln!("CPU b/a after the kill: {after:.2}");
        // Done: cancel what is left, so the nodes stop at once.
        let cancel = BulkRequest {
            action: "cancel".into(),
            filter: JobFilterBody::default(),
            dry_run: false,
            attempts: None,
        };
        support::retrying(std::time::Instant::now(), || api.bulk(&cancel)).await;
    });
    drop(n3);
}
