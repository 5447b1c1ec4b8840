//! Quotas: each refuses past its bound with `quota_exceeded` (or, for
//! running attempts, lets no more start) for its namespace alone; quotas
//! and buckets go through the journal and snapshots; bad quotas are
//! `invalid_quota`; a snapshot of version 14 restores with none.

use super::*;
use crate::namespaces::DEFAULT;
use crate::steps::{dag_node, finish, poll, spec, submit_dag, submit_with};
use crate::testing::{assert_journal_and_snapshot_agree, decide_and_apply};

const T: Millis = 1_000_000;

fn in_namespace(name: Option<&str>) -> JobOptions {
    JobOptions {
        namespace: name.map(str::to_owned),
        ..JobOptions::default()
    }
}

fn set(namespace: &str, quotas: Quotas) -> Command {
    Command::SetQuotas {
        namespace: namespace.into(),
        quotas,
    }
}

/// A master and its journal, with each command decided and applied.
struct Run {
    master: Master,
    journal: Vec<Event>,
    seq: u64,
}

impl Run {
    fn new() -> Self {
        Run {
            master: Master::new(),
            journal: Vec::new(),
            seq: 0,
        }
    }

    fn run(&mut self, now: Millis, command: Command) -> Result<Vec<Event>, Rejection> {
        decide_and_apply(&mut self.master, &mut self.journal, now, &command)
    }

    fn submit(&mut self, now: Millis, namespace: Option<&str>) -> Result<Vec<Event>, Rejection> {
        self.seq += 1;
        let command = submit_with(self.seq, spec(1, b"x"), in_namespace(namespace));
        self.run(now, command)
    }

    fn started(&mut self, now: Millis, worker: &str) -> Vec<JobId> {
        let events = self.run(now, poll(worker, 16)).expect("a poll");
        (events.iter())
            .filter_map(|event| match &event.kind {
                EventKind::Assigned { id, .. } => Some(*id),
                _ => None,
            })
            .collect()
    }
}

fn code(result: Result<Vec<Event>, Rejection>) -> Code {
    result.expect_err("refused").code
}

#[test]
fn quotas_that_are_zero_absurd_or_of_no_namespace_are_refused() {
    let mut run = Run::new();
    let zero = Quotas {
        waiting_max: Some(0),
        ..Quotas::default()
    };
    assert_eq!(code(run.run(T, set("a", zero))), codes::INVALID_QUOTA);
    let absurd = Quotas {
        result_bytes_max: Some(u64::MAX),
        ..Quotas::default()
    };
    assert_eq!(code(run.run(T, set("a", absurd))), codes::INVALID_QUOTA);
    let fast = Quotas {
        submissions_per_second: Some(u32::MAX),
        ..Quotas::default()
    };
    assert_eq!(code(run.run(T, set("a", fast))), codes::INVALID_QUOTA);
    let fine = Quotas {
        running_max: Some(1),
        ..Quotas::default()
    };
    assert_eq!(code(run.run(T, set("A b", fine))), codes::INVALID_NAMESPACE);
    assert!(run.journal.is_empty(), "nothing decided");
    // A namespace given quotas before its first job is listed.
    run.run(T, set("new", fine)).expect("set");
    let Ok(Answer::Namespaces(views)) = run.master.query(T, &Query::Namespaces) else {
        panic!("namespaces");
    };
    assert_eq!(views.len(), 1);
    assert_eq!((views[0].name.as_str(), views[0].quotas), ("new", fine));
    // Set to none, they are gone (the namespace stays known).
    run.run(T, set("new", Quotas::default())).expect("cleared");
    assert!(run.master.quotas.set.is_empty());
    assert_journal_and_snapshot_agree(&run.master, &run.journal);
}

#[test]
fn a_namespace_at_its_waiting_quota_is_refused_and_no_other_is() {
    let mut run = Run::new();
    let quotas = Quotas {
        waiting_max: Some(2),
        ..Quotas::default()
    };
    run.run(T, set("a", quotas)).expect("set");
    run.submit(T, Some("a")).expect("first");
    let held = JobOptions {
        namespace: Some("a".into()),
        ..crate::steps::unique("u", 60_000)
    };
    run.run(T, submit_with(50, spec(1, b"x"), held.clone()))
        .expect("second, holding a uniqueness key");
    // At its quota, the namespace still gets the job its key names: no
    // job is made.
    let again = run
        .run(T, submit_with(51, spec(1, b"x"), held))
        .expect("answered");
    assert!(again.is_empty(), "no event: {again:?}");
    let refused = run.submit(T, Some("a")).expect_err("third");
    assert_eq!(refused.code, codes::QUOTA_EXCEEDED);
    assert!(
        refused.message.contains("2 jobs are waiting"),
        "{refused:?}"
    );
    run.submit(T, None)
        .expect("the default namespace has no quota");
    run.submit(T, Some("b"))
        .expect("another namespace has none");
    // A DAG of two into a namespace with room for none is refused whole.
    let mut nodes = vec![dag_node("x", Vec::new()), dag_node("y", Vec::new())];
    for node in &mut nodes {
        node.options.namespace = Some("a".into());
    }
    let dag = submit_dag(100, nodes, OnFailure::SkipDescendants);
    assert_eq!(code(run.run(T, dag)), codes::QUOTA_EXCEEDED);
    // One started: one waits less, so one more may come.
    assert_eq!(run.started(T, "w").len(), 4);
    run.submit(T, Some("a")).expect("room again");
    // The default namespace's quota counts its own jobs only.
    run.run(T, set(DEFAULT, quotas)).expect("set");
    run.submit(T, None).expect("the default's first waiting");
    run.submit(T, None).expect("its second");
    assert_eq!(code(run.submit(T, None)), codes::QUOTA_EXCEEDED);
    assert_journal_and_snapshot_agree(&run.master, &run.journal);
}

#[test]
fn a_namespace_at_its_running_quota_starts_no_more_and_others_start() {
    let mut run = Run::new();
    let quotas = Quotas {
        running_max: Some(2),
        ..Quotas::default()
    };
    run.run(T, set("a", quotas)).expect("set");
    for _ in 0..5 {
        run.submit(T, Some("a")).expect("a's");
    }
    run.submit(T, None).expect("the default's");
    run.submit(T, Some("b")).expect("b's");
    // Jobs 1 and 2 of `a` (its first two), the default's 6, b's 7, each
    // namespace in its turn.
    assert_eq!(run.started(T, "w1"), [1, 6, 7, 2]);
    assert_eq!(run.started(T + 1, "w2"), Vec::<JobId>::new(), "a is at 2");
    // One of a's ends: one more of a's starts, not two.
    let ok = Outcome::Succeeded(b"r".to_vec());
    run.run(T + 2, finish(1, 1, "w1", ok)).expect("finished");
    assert_eq!(run.started(T + 3, "w2"), [3]);
    // Raised, the quota lets the rest start; lowered, it stops no attempt.
    let more = Quotas {
        running_max: Some(10),
        ..Quotas::default()
    };
    run.run(T + 4, set("a", more)).expect("raised");
    assert_eq!(run.started(T + 5, "w2"), [4, 5]);
    run.run(T + 6, set("a", quotas)).expect("lowered");
    assert_eq!(run.master.index.in_state(Some("a"), JobState::Running), 4);
    assert_journal_and_snapshot_agree(&run.master, &run.journal);
}

#[test]
fn submissions_a_second_refill_with_time_and_a_large_dag_enters_a_full_bucket() {
    let mut run = Run::new();
    let quotas = Quotas {
        submissions_per_second: Some(2),
        ..Quotas::default()
    };
    run.run(T, set("a", quotas)).expect("set");
    run.submit(T, Some("a")).expect("first");
    run.submit(T, Some("a")).expect("second");
    let refused = run.submit(T, Some("a")).expect_err("third in the second");
    assert_eq!(refused.code, codes::QUOTA_EXCEEDED);
    assert!(refused.message.contains("500 ms"), "{refused:?}");
    run.submit(T, Some("b")).expect("b has no quota");
    assert_eq!(code(run.submit(T + 499, Some("a"))), codes::QUOTA_EXCEEDED);
    run.submit(T + 500, Some("a"))
        .expect("half a second: one more");
    assert_eq!(code(run.submit(T + 500, Some("a"))), codes::QUOTA_EXCEEDED);
    // A take-over neither refills nor empties the bucket.
    assert_journal_and_snapshot_agree(&run.master, &run.journal);
    // Full again after a second: a DAG of five is admitted into it, and
    // the namespace then waits out the debt of three jobs (1.5 s) and
    // the half second of its next.
    let mut nodes: Vec<DagNodeSpec> = (0..5)
        .map(|n| dag_node(&format!("n{n}"), Vec::new()))
        .collect();
    for node in &mut nodes {
        node.options.namespace = Some("a".into());
    }
    run.run(T + 1500, submit_dag(100, nodes, OnFailure::SkipDescendants))
        .expect("a DAG into a full bucket");
    assert_eq!(code(run.submit(T + 3499, Some("a"))), codes::QUOTA_EXCEEDED);
    run.submit(T + 3500, Some("a")).expect("the debt paid");
    assert_journal_and_snapshot_agree(&run.master, &run.journal);
}

#[test]
fn a_namespace_keeping_its_most_result_bytes_is_refused_until_they_go() {
    let mut run = Run::new();
    let quotas = Quotas {
        result_bytes_max: Some(3),
        ..Quotas::default()
    };
    run.run(T, set("a", quotas)).expect("set");
    run.submit(T, Some("a")).expect("first");
    run.submit(T, Some("a")).expect("second");
    run.submit(T, None).expect("the default's");
    assert_eq!(run.started(T, "w"), [1, 3, 2]);
    let ok = |result: &[u8]| Outcome::Succeeded(result.to_vec());
    run.run(T + 1, finish(1, 1, "w", ok(b"ab")))
        .expect("finished");
    run.run(T + 1, finish(3, 1, "w", ok(b"defaults")))
        .expect("finished");
    run.submit(T + 2, Some("a")).expect("2 bytes kept: under 3");
    run.run(T + 3, finish(2, 1, "w", ok(b"cd")))
        .expect("finished");
    let refused = run.submit(T + 4, Some("a")).expect_err("4 bytes kept");
    assert_eq!(refused.code, codes::QUOTA_EXCEEDED);
    assert!(refused.message.contains("4 bytes"), "{refused:?}");
    run.submit(T + 4, None).expect("the default keeps its own");
    let Ok(Answer::Namespaces(views)) = run.master.query(T, &Query::Namespaces) else {
        panic!("namespaces");
    };
    let bytes: Vec<(&str, u64)> = (views.iter())
        .map(|view| (view.name.as_str(), view.result_bytes))
        .collect();
    assert_eq!(bytes, [("a", 4), (DEFAULT, 8)]);
    assert_journal_and_snapshot_agree(&run.master, &run.journal);
    // Purged with retention, they no longer count.
    let config = Config {
        retention_ms: 1,
        ..Config::default()
    };
    run.run(T + 5, Command::Configure(config))
        .expect("configured");
    run.run(T + 10_000, Command::Tick).expect("ticked");
    assert_eq!(run.master.index.result_bytes_in(Some("a")), 0);
    run.submit(T + 10_001, Some("a")).expect("room again");
    assert_journal_and_snapshot_agree(&run.master, &run.journal);
}

#[test]
fn a_snapshot_of_version_14_restores_with_no_quotas_and_events_of_format_14_decode() {
    let mut run = Run::new();
    run.submit(T, Some("a")).expect("submitted");
    let quotas = Quotas {
        waiting_max: Some(5),
        submissions_per_second: Some(9),
        ..Quotas::default()
    };
    run.run(T, set("a", quotas)).expect("set");
    let weight = Command::SetWeight {
        namespace: "a".into(),
        weight: 3,
    };
    run.run(T, weight).expect("weighted");
    let old = Master::restore(&run.master.snapshot_v14()).unwrap();
    assert_eq!(old, run.master.before_quotas());
    assert_eq!(Master::restore(&old.snapshot()).unwrap(), old);
    // Format 14's bytes of what it had decode as themselves; a quota
    // event in them is refused, not misread.
    for event in &run.journal {
        let bytes = [&[FORMAT_VERSION_14][..], &encode(event)[1..]].concat();
        match &event.kind {
            EventKind::QuotasSet { .. } | EventKind::WeightSet { .. } => {
                assert_eq!(decode_event(&bytes).unwrap_err().code, codes::UNDECODABLE)
            }
            _ => assert_eq!(&decode_event(&bytes).unwrap(), event),
        }
        // Format 15, where quotas came, decodes every one of them: a
        // journal written before a later format is read after it.
        let bytes = [&[FORMAT_VERSION_15][..], &encode(event)[1..]].concat();
        assert_eq!(&decode_event(&bytes).unwrap(), event);
    }
}

#[test]
fn a_restored_journal_with_a_hostile_quota_keeps_its_bounds() {
    let mut master = Master::new();
    let quotas = Quotas {
        running_max: Some(1),
        ..Quotas::default()
    };
    // A name that is no namespace is dropped as it is applied.
    master.apply(&Event {
        at: T,
        kind: EventKind::QuotasSet {
            namespace: "Not One".into(),
            quotas,
        },
    });
    assert!(master.quotas.set.is_empty());
    // A snapshot naming quotas of a namespace it does not know, or a
    // bucket without a rate, restores without them.
    let mut forged = Master::new();
    forged.quotas.set.insert("ghost".into(), quotas);
    forged
        .quotas
        .buckets
        .insert("ghost".into(), Default::default());
    let restored = Master::restore(&forged.snapshot()).unwrap();
    assert_eq!(restored.quotas, Default::default());
}
