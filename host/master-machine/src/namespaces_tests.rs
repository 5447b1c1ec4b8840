//! Namespaces: a job's namespace is kept from its submission until it is
//! forgotten, through the journal, packing, snapshots and restores in
//! parts; a caller confined to one sees its jobs only and learns nothing
//! of the others'; idempotency keys are per namespace; bytes of format 13
//! and snapshots of version 13 decode with every job in the default
//! namespace and every token cluster-wide.

use super::*;
use crate::namespaces::NamespaceTotals;
use crate::steps::{finish, poll, spec, submit_with, token};
use crate::testing::{assert_journal_and_snapshot_agree, decide_and_apply, restore_in_parts};

const T: Millis = 1_000_000;

fn in_namespace(name: Option<&str>) -> JobOptions {
    JobOptions {
        namespace: name.map(str::to_owned),
        ..JobOptions::default()
    }
}

fn keyed(key: &str) -> JobSpec {
    JobSpec {
        idempotency_key: Some(key.into()),
        ..spec(1, b"x")
    }
}

fn within(namespace: &str, query: Query) -> Query {
    Query::InNamespace {
        namespace: namespace.into(),
        query: Box::new(query),
    }
}

fn listed(master: &Master, query: Query) -> Vec<JobId> {
    match master.query(T, &query) {
        Ok(Answer::Jobs { jobs, .. }) => jobs.iter().map(|job| job.id).collect(),
        other => panic!("a listing, not {other:?}"),
    }
}

fn all_jobs() -> Query {
    Query::Jobs {
        filter: JobFilter::default(),
        after: None,
        limit: 100,
        newest_first: false,
    }
}

/// Job 1 in `team-a` (keyed `k`, finished), job 2 in the default
/// namespace (keyed `k` too), job 3 in `b`, a token confined to `team-a`.
fn ran() -> (Master, Vec<Event>) {
    let (mut master, mut journal) = (Master::new(), Vec::new());
    let mut run = |master: &mut Master, now: Millis, command: Command| {
        decide_and_apply(master, &mut journal, now, &command).expect("accepted")
    };
    run(
        &mut master,
        T,
        submit_with(1, keyed("k"), in_namespace(Some("team-a"))),
    );
    run(
        &mut master,
        T,
        submit_with(2, keyed("k"), in_namespace(None)),
    );
    run(
        &mut master,
        T,
        submit_with(3, spec(1, b"y"), in_namespace(Some("b"))),
    );
    run(&mut master, T, poll("w", 1));
    let ok = Outcome::Succeeded(b"r".to_vec());
    run(&mut master, T + 1, finish(1, 1, "w", ok));
    let confined = TokenRecord {
        namespace: Some("team-a".into()),
        ..token("t1", &["read"])
    };
    run(&mut master, T + 2, Command::CreateToken(confined));
    (master, journal)
}

#[test]
fn idempotency_keys_belong_to_their_namespace() {
    let (master, _) = ran();
    assert!(master.done.contains_key(&1), "job 1 is packed");
    let again = |master: &Master, namespace: Option<&str>| {
        let command = submit_with(9, keyed("k"), in_namespace(namespace));
        match master.decide(T + 3, &command).expect("accepted").reply {
            Reply::Submitted { id, existing } => (id, existing),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(again(&master, Some("team-a")), (1, true));
    assert_eq!(again(&master, None), (2, true));
    assert_eq!(again(&master, Some("b")), (4, false), "b's own job");
    // The same after a restore, whole or in parts: finished jobs' keys
    // come back in their namespace.
    for restored in [
        Master::restore(&master.snapshot()).unwrap(),
        restore_in_parts(&master.snapshot(), 7).unwrap(),
    ] {
        assert_eq!(restored, master);
        assert_eq!(again(&restored, Some("team-a")), (1, true));
        assert_eq!(again(&restored, None), (2, true));
    }
}

#[test]
fn a_confined_caller_sees_its_namespace_and_nothing_of_the_others() {
    let (master, _) = ran();
    let not_found = |query: Query| {
        let refused = master.query(T, &query).unwrap_err();
        assert_eq!(refused.code, codes::JOB_NOT_FOUND, "{query:?}");
        refused.message
    };
    for id in [2, 3] {
        for query in [Query::Job { id }, Query::Result { id }, Query::Input { id }] {
            // The message of a job that never was.
            assert_eq!(not_found(within("team-a", query)), format!("no job {id}"));
        }
    }
    assert_eq!(
        not_found(within("team-a", Query::Job { id: 99 })),
        "no job 99"
    );
    match master.query(T, &within("team-a", Query::Job { id: 1 })) {
        Ok(Answer::Job(view)) => assert_eq!(view.options.namespace.as_deref(), Some("team-a")),
        other => panic!("{other:?}"),
    }
    assert_eq!(listed(&master, within("team-a", all_jobs())), [1]);
    assert_eq!(listed(&master, within(DEFAULT, all_jobs())), [2]);
    assert_eq!(listed(&master, all_jobs()), [1, 2, 3], "cluster-wide");
    // A filter naming another namespace is overruled, not obeyed.
    let theirs = Query::Jobs {
        filter: JobFilter {
            namespace: Some("b".into()),
            ..JobFilter::default()
        },
        after: None,
        limit: 100,
        newest_first: false,
    };
    assert_eq!(listed(&master, theirs.clone()), [3]);
    assert_eq!(listed(&master, within("team-a", theirs)), [1]);
    let finished = Query::Finished {
        ids: vec![3, 1, 2],
        output_max: 100,
        output_total: 100,
    };
    match master.query(T, &within("team-a", finished)) {
        Ok(Answer::Finished(finished)) => {
            let seen: Vec<_> = finished
                .iter()
                .map(|f| (f.id, f.state, f.error.as_ref().map(|e| e.code.clone())))
                .collect();
            let unknown = Some("job_not_found".to_owned());
            assert_eq!(
                seen,
                [
                    (3, None, unknown.clone()),
                    (1, Some(JobState::Succeeded), None),
                    (2, None, unknown),
                ]
            );
        }
        other => panic!("{other:?}"),
    }
    let refused = master
        .query(T, &within("team-a", Query::Stats))
        .unwrap_err();
    assert_eq!(refused.code, codes::INVALID_NAMESPACE);
    let refused = master.query(T, &within("Team A", all_jobs())).unwrap_err();
    assert_eq!(refused.code, codes::INVALID_NAMESPACE);
}

#[test]
fn namespaces_survive_the_journal_snapshots_and_forgetting() {
    let (master, journal) = ran();
    assert_journal_and_snapshot_agree(&master, &journal);
    assert_eq!(master.tokens["t1"].namespace.as_deref(), Some("team-a"));
    // Forgotten after retention: its namespace and key go with it.
    let mut forgetting = master.clone();
    let mut journal = Vec::new();
    let later = T + forgetting.config.retention_ms + 10;
    decide_and_apply(&mut forgetting, &mut journal, later, &Command::Tick).expect("ticks");
    assert!(!forgetting.done.contains_key(&1));
    assert_eq!(forgetting.namespaces.of(1), None);
    assert!(
        !forgetting
            .index
            .keys
            .contains_key(&(Some("team-a".into()), "k".into()))
    );
    assert_eq!(Master::restore(&forgetting.snapshot()).unwrap(), forgetting);
}

#[test]
fn a_snapshot_of_version_13_restores_everything_in_the_default_namespace() {
    let (master, _) = ran();
    let old = Master::restore(&master.snapshot_v13()).unwrap();
    assert_eq!(old, master.before_namespaces());
    assert_eq!(listed(&old, within(DEFAULT, all_jobs())), [1, 2, 3]);
    assert_eq!(old.tokens["t1"].namespace, None, "cluster-wide");
    assert_eq!(Master::restore(&old.snapshot()).unwrap(), old);
}

#[test]
fn events_of_format_13_decode_in_the_default_namespace() {
    let (_, journal) = ran();
    let old_bytes = |event: &Event| {
        let old = crate::protocol::legacy::written_before_namespaces(|| encode(event));
        [&[FORMAT_VERSION_13][..], &old[1..]].concat()
    };
    let mut old_master = Master::new();
    for event in &journal {
        let decoded = decode_event(&old_bytes(event)).expect("decodes");
        match &decoded.kind {
            EventKind::Submitted { options, .. } => assert_eq!(options.namespace, None),
            EventKind::TokenCreated(token) => assert_eq!(token.namespace, None),
            _ => {}
        }
        old_master.apply(&decoded);
    }
    assert_eq!(listed(&old_master, within(DEFAULT, all_jobs())), [1, 2, 3]);
    // Bytes of this format that lack the namespace are refused, not misread.
    let created = journal
        .iter()
        .find(|e| matches!(e.kind, EventKind::TokenCreated(_)))
        .unwrap();
    let cut = [&[FORMAT_VERSION][..], &old_bytes(created)[1..]].concat();
    assert_eq!(decode_event(&cut).unwrap_err().code, codes::UNDECODABLE);
}

#[test]
fn bad_namespace_names_are_refused() {
    let master = Master::new();
    let long = "a".repeat(64);
    for name in [DEFAULT, "", "Team", "-a", "a_b", "a b", long.as_str()] {
        let command = submit_with(1, spec(1, b"x"), in_namespace(Some(name)));
        let refused = master.decide(T, &command).unwrap_err();
        assert_eq!(refused.code, codes::INVALID_NAMESPACE, "{name:?}");
        if name != DEFAULT {
            let confined = TokenRecord {
                namespace: Some(name.into()),
                ..token("t1", &["read"])
            };
            let refused = master
                .decide(T, &Command::CreateToken(confined))
                .unwrap_err();
            assert_eq!(refused.code, codes::INVALID_NAMESPACE, "{name:?}");
        }
    }
    for name in ["a", "team-a", "0", &"a".repeat(63)] {
        let command = submit_with(1, spec(1, b"x"), in_namespace(Some(name)));
        assert!(master.decide(T, &command).is_ok(), "{name:?}");
    }
    // A token may be confined to the default namespace by its name.
    let confined = TokenRecord {
        namespace: Some(DEFAULT.into()),
        ..token("t1", &["read"])
    };
    assert!(master.decide(T, &Command::CreateToken(confined)).is_ok());
}

/// A DAG of one job `name` in `namespace`, after `after`, keyed `key`.
fn dag(seq: u64, namespace: Option<&str>, after: Vec<DagRef>, key: Option<&str>) -> Command {
    let mut node = crate::steps::dag_node("job", after);
    node.options.namespace = namespace.map(str::to_owned);
    let mut command = crate::steps::submit_dag(seq, vec![node], OnFailure::SkipDescendants);
    if let Command::SubmitDag(spec) = &mut command {
        spec.idempotency_key = key.map(str::to_owned);
    }
    command
}

#[test]
fn a_dag_is_one_namespaces_and_its_parents_and_keys_too() {
    let (mut master, mut journal) = ran();
    let refused = |master: &Master, command: &Command| master.decide(T, command).unwrap_err();
    // A parent of another namespace is no job to the DAG: the same words
    // as an id that never was.
    let theirs = refused(
        &master,
        &dag(20, Some("team-a"), vec![DagRef::Job(3)], None),
    );
    let never = refused(
        &master,
        &dag(21, Some("team-a"), vec![DagRef::Job(99)], None),
    );
    assert_eq!(theirs.code, codes::INVALID_DAG);
    assert_eq!(theirs.message, "jobs[0].after: no job 3");
    assert_eq!(never.message, "jobs[0].after: no job 99");
    // Its own namespace's parent is fine (job 1 succeeded).
    let own = dag(22, Some("team-a"), vec![DagRef::Job(1)], None);
    decide_and_apply(&mut master, &mut journal, T + 3, &own).expect("accepted");
    // Its status is team A's alone.
    let status = |namespace: &str| master.query(T, &within(namespace, Query::Dag { id: 1 }));
    assert!(matches!(status("team-a"), Ok(Answer::Dag(_))));
    let refused_status = status("b").unwrap_err();
    assert_eq!(
        (refused_status.code, refused_status.message.as_str()),
        (codes::DAG_NOT_FOUND, "no DAG 1")
    );
    let never = master
        .query(T, &within("b", Query::Dag { id: 99 }))
        .unwrap_err();
    assert_eq!(never.message, "no DAG 99");
    // Every job of a DAG in one namespace.
    let mut mixed = dag(23, Some("team-a"), vec![], None);
    if let Command::SubmitDag(spec) = &mut mixed {
        let mut other = crate::steps::dag_node("other", vec![]);
        other.options.namespace = Some("b".into());
        spec.nodes.push(other);
    }
    let refused_mixed = refused(&master, &mixed);
    assert_eq!(refused_mixed.code, codes::INVALID_DAG, "{refused_mixed:?}");
    // DAG keys are each namespace's own, through a restore.
    let reply = |master: &mut Master, journal: &mut Vec<Event>, command: &Command| {
        let decision = master.decide(T + 4, command).expect("accepted");
        for event in &decision.events {
            master.apply(event);
            journal.push(event.clone());
        }
        match decision.reply {
            Reply::Dag { id, existing, .. } => (id, existing),
            other => panic!("{other:?}"),
        }
    };
    let (a_dag, _) = reply(
        &mut master,
        &mut journal,
        &dag(24, Some("team-a"), vec![], Some("d")),
    );
    let (default_dag, existing) =
        reply(&mut master, &mut journal, &dag(25, None, vec![], Some("d")));
    assert!(a_dag != default_dag && !existing);
    let mut restored = Master::restore(&master.snapshot()).unwrap();
    assert_eq!(restored, master);
    let again = reply(
        &mut restored,
        &mut journal,
        &dag(26, Some("team-a"), vec![], Some("d")),
    );
    assert_eq!(again, (a_dag, true));
    let bad_key = refused(&master, &dag(27, None, vec![], Some("a\0b")));
    assert_eq!(bad_key.code, codes::INVALID_DAG);
}

#[test]
fn each_namespace_counts_its_jobs_and_what_they_cost() {
    let (master, journal) = ran();
    let views = |master: &Master, query: Query| match master.query(T, &query) {
        Ok(Answer::Namespaces(views)) => views,
        other => panic!("{other:?}"),
    };
    let state = |view: &NamespaceView, state: JobState| view.jobs[state as usize];
    let all = views(&master, Query::Namespaces);
    let names: Vec<&str> = all.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["b", DEFAULT, "team-a"]);
    // Job 1 (team A) succeeded, charged its attempt; 2 (default) and 3
    // (b) wait in line.
    let [b, default, team_a] = [&all[0], &all[1], &all[2]];
    assert_eq!(state(team_a, JobState::Succeeded), 1);
    assert_eq!(
        team_a.totals,
        NamespaceTotals {
            submitted: 1,
            attempts_metered: 1,
            cpu_us: 3_000,
            egress_bytes: 0,
        }
    );
    assert_eq!(
        (state(default, JobState::Queued), default.totals.submitted),
        (1, 1)
    );
    assert_eq!((state(b, JobState::Queued), b.totals.cpu_us), (1, 0));
    let summed: u64 = all.iter().flat_map(|v| v.jobs).sum();
    assert_eq!(summed, master.index.counts.iter().sum::<u64>());
    // A confined caller sees its own.
    let own = views(&master, within("team-a", Query::Namespaces));
    assert_eq!(own, std::slice::from_ref(team_a));
    // Replayed and restored alike (the counts are rebuilt, the totals kept).
    let mut replayed = Master::new();
    for event in &journal {
        replayed.apply(event);
    }
    assert_eq!(views(&replayed, Query::Namespaces), all);
    let restored = restore_in_parts(&master.snapshot(), 9).unwrap();
    assert_eq!(views(&restored, Query::Namespaces), all);
    // Purged: the job leaves its counts, not its totals.
    let mut forgetting = master.clone();
    let later = T + forgetting.config.retention_ms + 10;
    decide_and_apply(&mut forgetting, &mut Vec::new(), later, &Command::Tick).expect("ticks");
    let after = views(&forgetting, Query::Namespaces);
    assert_eq!(state(&after[2], JobState::Succeeded), 0);
    assert_eq!(after[2].totals, team_a.totals);
}

#[test]
fn uniqueness_keys_belong_to_their_namespace() {
    let mut master = Master::new();
    let unique = |namespace: Option<&str>, key: &str| JobOptions {
        unique: Some(Unique {
            key: key.into(),
            window_ms: 60_000,
        }),
        ..in_namespace(namespace)
    };
    let submit = |master: &mut Master, seq, options| {
        let decision = master
            .decide(T, &submit_with(seq, spec(1, b"x"), options))
            .expect("accepted");
        for event in &decision.events {
            master.apply(event);
        }
        match decision.reply {
            Reply::Submitted { id, existing } => (id, existing),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        submit(&mut master, 1, unique(Some("team-a"), "nightly")),
        (1, false)
    );
    // Another namespace's hold is not this one's answer.
    assert_eq!(submit(&mut master, 2, unique(None, "nightly")), (2, false));
    assert_eq!(
        submit(&mut master, 3, unique(Some("b"), "nightly")),
        (3, false)
    );
    assert_eq!(
        submit(&mut master, 4, unique(Some("team-a"), "nightly")),
        (1, true)
    );
    assert_eq!(Master::restore(&master.snapshot()).unwrap(), master);
    let refused = master
        .decide(T, &submit_with(5, spec(1, b"x"), unique(None, "a\0b")))
        .unwrap_err();
    assert_eq!(refused.code, codes::INVALID_JOB);
}

#[test]
fn a_journal_naming_the_default_namespace_is_read_as_the_default() {
    // No decision writes it; a journal is decoded, not trusted.
    let mut master = Master::new();
    master.apply(&Event {
        at: T,
        kind: EventKind::Submitted {
            id: 1,
            spec: keyed("k"),
            request: None,
            options: in_namespace(Some(DEFAULT)),
        },
    });
    assert_eq!(master.namespaces.of(1), None);
    assert!(master.index.namespace_counts.is_empty());
    assert!(master.index.keys.contains_key(&(None, "k".to_owned())));
    let views: Vec<_> = master
        .namespaces_view()
        .into_iter()
        .map(|v| (v.name, v.jobs[0]))
        .collect();
    assert_eq!(views, [(DEFAULT.to_owned(), 1)]);
    assert_eq!(Master::restore(&master.snapshot()).unwrap(), master);
    // A snapshot naming it is read the same way.
    let mut hostile = master.clone();
    hostile.namespaces.jobs.insert(1, DEFAULT.to_owned());
    assert_eq!(Master::restore(&hostile.snapshot()).unwrap(), master);
}

#[test]
fn namespaces_are_bounded() {
    let mut master = Master::new();
    let names: Vec<String> = (0..crate::limits::NAMESPACES_MAX)
        .map(|n| format!("n{n}"))
        .collect();
    for name in &names {
        master.namespaces.submitted(Some(name));
    }
    let new = submit_with(1, spec(1, b"x"), in_namespace(Some("one-more")));
    assert_eq!(
        master.decide(T, &new).unwrap_err().code,
        codes::NAMESPACES_FULL
    );
    // A known one still takes jobs, and so does the default one only once
    // it is known: it counts like any other.
    let known = submit_with(2, spec(1, b"x"), in_namespace(Some("n7")));
    assert!(master.decide(T, &known).is_ok());
    let default = submit_with(3, spec(1, b"x"), in_namespace(None));
    assert_eq!(
        master.decide(T, &default).unwrap_err().code,
        codes::NAMESPACES_FULL
    );
    // A journal past the bound adds no name.
    master.namespaces.submitted(Some("from-a-journal"));
    assert_eq!(
        master.namespaces.totals.len(),
        crate::limits::NAMESPACES_MAX
    );
}

/// A namespace's listing and bulk count walk its own jobs, from the index,
/// not the cluster's: two jobs of `team-a` around more jobs of other
/// namespaces than a listing looks at come in one page with no cursor,
/// both ways, for a confined caller and a cluster-wide filter.
#[test]
fn a_small_namespace_among_many_jobs_lists_in_one_page() {
    let mut master = Master::new();
    let mut journal = Vec::new();
    let mut seq = 0;
    let mut submit = |master: &mut Master, namespace: Option<&str>| {
        seq += 1;
        let command = submit_with(seq, spec(1, b"x"), in_namespace(namespace));
        decide_and_apply(master, &mut journal, T, &command).expect("taken");
        journal.clear();
    };
    submit(&mut master, Some("team-a"));
    for n in 0..crate::limits::LIST_SCAN_MAX + 10 {
        submit(&mut master, [None, Some("team-b")][n % 2]);
    }
    submit(&mut master, Some("team-a"));
    let last = master.jobs.keys().next_back().copied().expect("jobs");
    for newest_first in [false, true] {
        let query = Query::Jobs {
            filter: JobFilter::default(),
            after: None,
            limit: 10,
            newest_first,
        };
        let mut expected = vec![1, last];
        if newest_first {
            expected.reverse();
        }
        match master.query(T, &within("team-a", query.clone())) {
            Ok(Answer::Jobs { jobs, next }) => {
                let ids: Vec<JobId> = jobs.iter().map(|job| job.id).collect();
                assert_eq!(
                    (ids, next),
                    (expected.clone(), None),
                    "newest first: {newest_first}"
                );
            }
            other => panic!("a listing, not {other:?}"),
        }
        let Query::Jobs { filter, .. } = &query else {
            unreachable!()
        };
        let named = Query::Jobs {
            filter: JobFilter {
                namespace: Some("team-a".into()),
                ..filter.clone()
            },
            after: Some(1),
            limit: 10,
            newest_first: false,
        };
        assert_eq!(listed(&master, named), [last]);
    }
    // A bulk change of the namespace counts its own jobs.
    let count = Query::Bulk {
        action: BulkAction::Cancel,
        filter: JobFilter {
            namespace: Some("team-a".into()),
            ..JobFilter::default()
        },
    };
    assert!(matches!(master.query(T, &count), Ok(Answer::Count(2))));
    // A namespace with no job lists nothing.
    assert_eq!(
        listed(&master, within("team-c", all_jobs())),
        Vec::<JobId>::new()
    );
}
