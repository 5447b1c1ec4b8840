//! DAGs: children wait for their parents and get their outputs, failures
//! cancel by policy, bad graphs create nothing, and the state survives
//! snapshots and replay.

use super::*;
use crate::scenarios::{dag_node, submit_dag};

fn ok(outcome: &str) -> Outcome {
    Outcome::Succeeded(outcome.as_bytes().to_vec())
}

/// Submits `nodes` as one DAG; its job ids.
fn dag(sim: &mut Sim, nodes: Vec<DagNodeSpec>, on_failure: OnFailure) -> Vec<JobId> {
    static SEQ: AtomicU64 = AtomicU64::new(1);
    let command = submit_dag(SEQ.fetch_add(1, Ordering::Relaxed), nodes, on_failure);
    match sim.ok(T, command) {
        Reply::Dag { jobs, existing, .. } => {
            assert!(!existing);
            jobs
        }
        other => panic!("{other:?}"),
    }
}

/// Polls for up to 100 jobs: their (id, input) in the order assigned.
fn poll_all(sim: &mut Sim, now: Millis) -> Vec<(JobId, Vec<u8>)> {
    sim.effects.clear();
    sim.ok(now, poll("w1", 100));
    sim.effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Assign(a) => Some((a.id, a.input.clone())),
            _ => None,
        })
        .collect()
}

fn node(name: &str, after: &[u32]) -> DagNodeSpec {
    dag_node(name, after.iter().map(|&p| DagRef::Node(p)).collect())
}

#[test]
fn a_diamond_runs_in_order_and_children_get_their_parents_outputs() {
    let mut sim = Sim::new();
    let ids = dag(
        &mut sim,
        vec![
            node("a", &[]),
            node("b", &[0]),
            node("c", &[0]),
            node("d", &[1, 2]),
        ],
        OnFailure::SkipDescendants,
    );
    let (a, b, c, d) = (ids[0], ids[1], ids[2], ids[3]);
    assert!(sim.job(d).waiting);
    assert_eq!(sim.job(d).parents, vec![b, c]);
    assert_eq!(sim.job(d).dag.map(|(_, name)| name), Some("d".into()));
    assert_eq!(poll_all(&mut sim, T + 1), vec![(a, b"a".to_vec())]);
    sim.ok(T + 2, finish(a, 1, "w1", ok("A")));
    let second = poll_all(&mut sim, T + 3);
    assert_eq!(
        second.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![b, c]
    );
    let input: serde_json::Value = serde_json::from_slice(&second[0].1).unwrap();
    assert_eq!(
        input,
        serde_json::json!({
            "input": "b",
            "parents": [{"id": a, "name": "a", "output": "A", "blobs": []}]
        })
    );
    sim.ok(T + 4, finish(b, 1, "w1", ok("B")));
    assert!(poll_all(&mut sim, T + 5).is_empty(), "d waits for c");
    sim.ok(T + 6, finish(c, 1, "w1", Outcome::Succeeded(vec![0xff])));
    let last = poll_all(&mut sim, T + 7);
    assert_eq!(last.len(), 1);
    let input: serde_json::Value = serde_json::from_slice(&last[0].1).unwrap();
    assert_eq!(input["parents"][0]["output"], "B");
    assert_eq!(
        input["parents"][1]["output"],
        serde_json::json!({"base64": "/w=="})
    );
    sim.ok(T + 8, finish(d, 1, "w1", ok("D")));
    let Ok(Answer::Dag(view)) = sim.master.query(T, &Query::Dag { id: 1 }) else {
        panic!()
    };
    assert_eq!(view.counts[JobState::Succeeded as usize], 4);
    assert_eq!(view.waiting, 0);
}

#[test]
fn a_failure_skips_its_descendants_and_the_other_branches_run() {
    let mut sim = Sim::new();
    // a -> b -> c, and e alone.
    let ids = dag(
        &mut sim,
        vec![
            node("a", &[]),
            node("b", &[0]),
            node("c", &[1]),
            node("e", &[]),
        ],
        OnFailure::SkipDescendants,
    );
    assert_eq!(poll_all(&mut sim, T + 1).len(), 2);
    sim.ok(T + 2, finish(ids[0], 1, "w1", failed("job_error")));
    for &id in &ids[1..3] {
        let job = sim.job(id);
        assert_eq!(job.state, JobState::Cancelled);
        assert_eq!(job.error.unwrap().code, "parent_failed");
    }
    assert_eq!(sim.job(ids[3]).state, JobState::Running);
    sim.ok(T + 3, finish(ids[3], 1, "w1", ok("E")));
    assert_eq!(sim.job(ids[3]).state, JobState::Succeeded);

    // A retry of the failed parent and its skipped children: the children
    // wait for the parent again, then run.
    sim.ok(
        T + 4,
        Command::Bulk {
            action: BulkAction::Retry { attempts: 1 },
            filter: JobFilter {
                ids: Some(ids[..3].to_vec()),
                ..JobFilter::default()
            },
        },
    );
    assert!(sim.job(ids[1]).waiting);
    assert_eq!(
        poll_all(&mut sim, T + 5)
            .iter()
            .map(|(id, _)| *id)
            .collect::<Vec<_>>(),
        vec![ids[0]]
    );
    sim.ok(T + 6, finish(ids[0], 2, "w1", ok("A")));
    assert_eq!(
        poll_all(&mut sim, T + 7)
            .iter()
            .map(|(id, _)| *id)
            .collect::<Vec<_>>(),
        vec![ids[1]]
    );
}

#[test]
fn cancel_dag_cancels_every_unfinished_job_running_ones_included() {
    let mut sim = Sim::new();
    let ids = dag(
        &mut sim,
        vec![node("a", &[]), node("b", &[0]), node("e", &[])],
        OnFailure::CancelDag,
    );
    assert_eq!(poll_all(&mut sim, T + 1).len(), 2);
    sim.effects.clear();
    sim.ok(T + 2, finish(ids[0], 1, "w1", failed("job_error")));
    for &id in &ids[1..] {
        assert_eq!(sim.job(id).state, JobState::Cancelled);
        assert_eq!(sim.job(id).error.unwrap().code, "dag_cancelled");
    }
    assert!(
        sim.effects
            .iter()
            .any(|e| matches!(e, Effect::Stop { id, .. } if *id == ids[2]))
    );
    // A user's cancel of a job inside such a DAG cancels it all, too.
    let ids = dag(
        &mut sim,
        vec![node("x", &[]), node("y", &[0])],
        OnFailure::CancelDag,
    );
    sim.ok(T + 3, Command::Cancel { id: ids[0] });
    assert_eq!(sim.job(ids[1]).state, JobState::Cancelled);
}

#[test]
fn bad_graphs_are_refused_and_create_nothing() {
    let mut sim = Sim::new();
    let before = sim.master.snapshot();
    let refuse = |sim: &mut Sim, nodes: Vec<DagNodeSpec>| {
        let command = submit_dag(99, nodes, OnFailure::SkipDescendants);
        let refused = sim.run(T, command).unwrap_err();
        assert_eq!(refused.code, codes::INVALID_DAG, "{refused:?}");
        refused.message
    };
    assert!(
        refuse(
            &mut sim,
            vec![node("a", &[2]), node("b", &[0]), node("c", &[1])]
        )
        .contains("cycle")
    );
    assert!(
        refuse(&mut sim, vec![dag_node("a", vec![DagRef::Job(4242)])]).starts_with("jobs[0].after")
    );
    let mut keyed = node("a", &[]);
    keyed.spec.idempotency_key = Some("k".into());
    assert!(refuse(&mut sim, vec![keyed]).starts_with("jobs[0].idempotency_key"));
    assert_eq!(sim.master.snapshot(), before, "nothing was created");
    // A parent that failed must be retried first.
    sim.ok(T, new_submit(spec(1, b"p")));
    poll_all(&mut sim, T + 1);
    sim.ok(T + 2, finish(1, 1, "w1", failed("job_error")));
    assert!(refuse(&mut sim, vec![dag_node("a", vec![DagRef::Job(1)])]).contains("failed"));
}

#[test]
fn existing_jobs_as_parents_hold_a_child_until_they_succeed() {
    let mut sim = Sim::new();
    sim.ok(T, new_submit(spec(1, b"p")));
    sim.ok(T, new_submit(spec(1, b"q")));
    sim.ok(T + 1, finish(0, 0, "w", ok("")));
    assert_eq!(poll_all(&mut sim, T + 1).len(), 2);
    sim.ok(T + 2, finish(1, 1, "w1", ok("P")));
    // Job 1 succeeded, job 2 runs: the child waits for job 2 only.
    let ids = dag(
        &mut sim,
        vec![dag_node("c", vec![DagRef::Job(1), DagRef::Job(2)])],
        OnFailure::SkipDescendants,
    );
    assert!(poll_all(&mut sim, T + 3).is_empty());
    sim.ok(T + 4, finish(2, 1, "w1", ok("Q")));
    let assigned = poll_all(&mut sim, T + 5);
    assert_eq!(assigned[0].0, ids[0]);
    let input: serde_json::Value = serde_json::from_slice(&assigned[0].1).unwrap();
    assert_eq!(input["parents"][0]["output"], "P");
    assert_eq!(input["parents"][1]["output"], "Q");
}

#[test]
fn the_same_request_or_key_is_the_same_dag() {
    let mut sim = Sim::new();
    let command = submit_dag(
        7,
        vec![node("a", &[]), node("b", &[0])],
        OnFailure::SkipDescendants,
    );
    let first = sim.ok(T, command.clone());
    let Reply::Dag { id, jobs, .. } = first.clone() else {
        panic!()
    };
    assert_eq!(
        sim.ok(T + 1, command),
        Reply::Dag {
            id,
            jobs: jobs.clone(),
            existing: false
        }
    );
    let mut keyed = submit_dag(8, vec![node("a", &[])], OnFailure::SkipDescendants);
    let Command::SubmitDag(spec) = &mut keyed else {
        unreachable!()
    };
    spec.idempotency_key = Some("nightly".into());
    let Reply::Dag { id: keyed_id, .. } = sim.ok(T, keyed.clone()) else {
        panic!()
    };
    let Command::SubmitDag(spec) = &mut keyed else {
        unreachable!()
    };
    spec.request.seq = 9;
    assert!(matches!(sim.ok(T, keyed), Reply::Dag { id, existing: true, .. } if id == keyed_id));
}

#[test]
fn a_dag_survives_a_snapshot_and_replay_and_is_forgotten_when_purged() {
    let mut sim = Sim::new();
    let ids = dag(
        &mut sim,
        vec![node("a", &[]), node("b", &[0]), node("c", &[0, 1])],
        OnFailure::SkipDescendants,
    );
    poll_all(&mut sim, T + 1);
    sim.ok(T + 2, finish(ids[0], 1, "w1", ok("A")));
    let restored = Master::restore(&sim.master.snapshot()).unwrap();
    assert_eq!(restored, sim.master);
    let mut replayed = Master::new();
    for event in &sim.events {
        replayed.apply(event);
    }
    assert_eq!(replayed.snapshot(), sim.master.snapshot());
    // Run it out, then purge everything: the DAG is gone.
    for (id, _) in poll_all(&mut sim, T + 3) {
        sim.ok(T + 4, finish(id, 1, "w1", ok("x")));
    }
    for (id, _) in poll_all(&mut sim, T + 5) {
        sim.ok(T + 6, finish(id, 1, "w1", ok("x")));
    }
    assert_eq!(sim.job(ids[2]).state, JobState::Succeeded);
    let retention = sim.master.config().retention_ms;
    sim.ok(T + 7 + retention, Command::Tick);
    let gone = sim.master.query(T, &Query::Dag { id: 1 }).unwrap_err();
    assert_eq!(gone.code, codes::DAG_NOT_FOUND);
}

use proptest::prelude::*;

/// A DAG whose job `i` waits for some earlier jobs (acyclic by
/// construction), with the outcome each job's attempts report.
fn random_dag() -> impl Strategy<Value = (Vec<Vec<u32>>, Vec<bool>)> {
    (1..24usize).prop_flat_map(|n| {
        let parents = (0..n)
            .map(|i| {
                if i == 0 {
                    Just(Vec::new()).boxed()
                } else {
                    prop::collection::btree_set(0..i as u32, 0..=3.min(i))
                        .prop_map(|set| set.into_iter().collect())
                        .boxed()
                }
            })
            .collect::<Vec<_>>();
        (
            parents,
            prop::collection::vec(prop::bool::weighted(0.85), n),
        )
    })
}

#[derive(Debug, Clone)]
enum DagStep {
    /// A worker runs up to this many ready jobs to their end.
    Work(u32),
    /// A user cancels job number `n % jobs`.
    Cancel(usize),
    /// The master restarts from a snapshot.
    Restart,
}

fn dag_step() -> impl Strategy<Value = DagStep> {
    prop_oneof![
        6 => (1..6u32).prop_map(DagStep::Work),
        1 => any::<usize>().prop_map(DagStep::Cancel),
        1 => Just(DagStep::Restart),
    ]
}

/// What must hold of a DAG's jobs at every moment.
fn check_dag(sim: &Sim, ids: &[JobId], on_failure: OnFailure) -> Result<(), TestCaseError> {
    let jobs: Vec<JobView> = ids.iter().map(|&id| sim.job(id)).collect();
    let state = |id: JobId| jobs[ids.iter().position(|&j| j == id).unwrap()].state;
    let failed = |s: JobState| s.is_terminal() && s != JobState::Succeeded;
    for job in &jobs {
        let parents_done = job.parents.iter().all(|&p| state(p) == JobState::Succeeded);
        prop_assert_eq!(
            job.waiting,
            job.state == JobState::Queued && !parents_done,
            "job {} waits iff queued with a parent not succeeded",
            job.id
        );
        if job.state == JobState::Running || job.state == JobState::Succeeded {
            prop_assert!(
                parents_done,
                "job {} ran before its parents succeeded",
                job.id
            );
        }
        if job.parents.iter().any(|&p| failed(state(p))) {
            prop_assert!(
                job.state.is_terminal(),
                "job {} outlived a failed parent",
                job.id
            );
        }
    }
    if on_failure == OnFailure::CancelDag && jobs.iter().any(|job| failed(job.state)) {
        for job in &jobs {
            prop_assert!(
                job.state.is_terminal(),
                "job {} outlived its cancelled DAG",
                job.id
            );
        }
    }
    Ok(())
}

proptest! {
    /// Whatever the graph, outcomes, cancels and restarts: no job runs
    /// before its parents succeeded, a failure ends its descendants (or
    /// the whole DAG), waiting is exactly "a parent has not succeeded",
    /// a snapshot restores the same master, and the DAG always ends.
    #[test]
    fn dags_run_in_order_and_fail_by_their_policy(
        (parents, succeeds) in random_dag(),
        on_failure in prop::sample::select(OnFailure::ALL.to_vec()),
        steps in prop::collection::vec(dag_step(), 0..30),
    ) {
        let mut sim = Sim::new();
        let nodes: Vec<DagNodeSpec> = (parents.iter().enumerate())
            .map(|(i, after)| node(&format!("n{i}"), after))
            .collect();
        let ids = dag(&mut sim, nodes, on_failure);
        let outcome = |id: JobId| {
            let i = ids.iter().position(|&j| j == id).unwrap();
            if succeeds[i] { ok("x") } else { failed("job_error") }
        };
        let mut now = T;
        let work = |sim: &mut Sim, now: &mut Millis, free: u32| {
            *now += 10;
            let assigned = {
                sim.effects.clear();
                sim.ok(*now, poll("w1", free));
                sim.assigned()
            };
            for (id, attempt, _) in &assigned {
                sim.ok(*now, finish(*id, *attempt, "w1", outcome(*id)));
            }
            assigned.len()
        };
        for step in steps {
            match step {
                DagStep::Work(free) => {
                    work(&mut sim, &mut now, free);
                }
                DagStep::Cancel(n) => {
                    let _ = sim.run(now, Command::Cancel { id: ids[n % ids.len()] });
                }
                DagStep::Restart => {
                    let restored = Master::restore(&sim.master.snapshot()).unwrap();
                    prop_assert_eq!(&restored, &sim.master);
                    sim.master = restored;
                }
            }
            check_dag(&sim, &ids, on_failure)?;
        }
        // Run it out: it ends, every job in a terminal state.
        for _ in 0..ids.len() + 1 {
            if work(&mut sim, &mut now, 100) == 0 {
                break;
            }
            check_dag(&sim, &ids, on_failure)?;
        }
        for &id in &ids {
            prop_assert!(sim.job(id).state.is_terminal(), "job {} never ended", id);
        }
    }
}
