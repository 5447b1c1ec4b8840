//! Deployments: module names, their versions and rollbacks, jobs, DAGs
//! and schedules by name, the bounds, snapshots, and the older formats
//! whose options had no `module`.

use super::*;
use crate::limits::INTERVAL_MS_MIN;
use crate::master::SNAPSHOT_VERSION;
use crate::scenarios::{
    dag_node, finish, limited, poll, schedule_spec, spec, submit_dag, submit_with,
};
use crate::testing::restore_in_parts;
use crate::testing::run;

const T: Millis = 1_000_000;

/// The events `command` leads to at `now`, applied; panics if refused.
fn events(master: &mut Master, now: Millis, command: Command) -> Vec<EventKind> {
    let decision = master.decide(now, &command).expect("accepted");
    for event in &decision.events {
        master.apply(event);
    }
    decision
        .events
        .into_iter()
        .map(|event| event.kind)
        .collect()
}

fn refused(master: &Master, command: Command) -> Code {
    master.decide(T, &command).expect_err("refused").code
}

fn deploy(name: &str, n: u8) -> Command {
    Command::Deploy {
        name: name.into(),
        digest: [n; 32],
    }
}

fn rollback(name: &str, to: Option<u32>) -> Command {
    Command::Rollback {
        name: name.into(),
        to,
    }
}

fn undeploy(name: &str) -> Command {
    Command::Undeploy { name: name.into() }
}

fn reply(version: u32, n: u8, existing: bool) -> Reply {
    Reply::Deployed {
        version,
        digest: [n; 32],
        existing,
    }
}

/// Options naming the module `name`.
fn by_name(name: &str) -> JobOptions {
    JobOptions {
        module: Some(name.into()),
        ..JobOptions::default()
    }
}

/// A submission of `spec(9, input)` (digest `[9; 32]`, which the name
/// replaces) by module name.
fn submit_named(seq: u64, name: &str, input: &[u8]) -> Command {
    submit_with(seq, spec(9, input), by_name(name))
}

fn deployment(master: &Master, name: &str) -> DeploymentView {
    match master.query(T, &Query::Deployment { name: name.into() }) {
        Ok(Answer::Deployment(view)) => *view,
        other => panic!("{other:?}"),
    }
}

fn job(master: &Master, id: JobId) -> JobView {
    match master.query(T, &Query::Job { id }) {
        Ok(Answer::Job(view)) => *view,
        other => panic!("{other:?}"),
    }
}

/// The digests of `master`'s deployment `name`, newest first.
fn digests(master: &Master, name: &str) -> Vec<u8> {
    let view = deployment(master, name);
    view.versions.iter().map(|v| v.digest[0]).collect()
}

#[test]
fn names_are_short_lower_case_words_never_a_digest() {
    for good in ["a", "send-email", "v1.2_x", "0day", &"a".repeat(63)] {
        assert!(valid_module_name(good), "{good}");
    }
    let hex = "ab".repeat(32);
    for bad in [
        "",
        "-a",
        ".a",
        "_a",
        "Send",
        "a b",
        "a/b",
        "é",
        &"a".repeat(64),
        &hex,
    ] {
        assert!(!valid_module_name(bad), "{bad:?}");
    }
    let master = Master::new();
    for command in [
        deploy("Bad", 1),
        rollback("Bad", None),
        undeploy("Bad"),
        submit_named(1, "Bad", b""),
    ] {
        assert_eq!(refused(&master, command), codes::INVALID_MODULE_NAME);
    }
}

#[test]
fn a_deploy_makes_a_version_unless_the_digest_is_current() {
    let mut master = Master::new();
    assert_eq!(run(&mut master, T, deploy("m", 1)), Ok(reply(1, 1, false)));
    assert_eq!(
        events(&mut master, T + 1, deploy("m", 2)),
        [EventKind::Deployed {
            name: "m".into(),
            digest: [2; 32],
            version: 2,
            rollback_of: None,
        }]
    );
    // The current digest again: nothing, and the current version.
    let again = master.decide(T + 2, &deploy("m", 2)).unwrap();
    assert_eq!((again.events, again.reply), (Vec::new(), reply(2, 2, true)));
    // An older digest is a new version.
    assert_eq!(
        run(&mut master, T + 3, deploy("m", 1)),
        Ok(reply(3, 1, false))
    );
    let view = deployment(&master, "m");
    assert_eq!(view.versions_total, 3);
    assert_eq!(
        view.current,
        ModuleVersion {
            version: 3,
            digest: [1; 32],
            at: T + 3,
            rollback_of: None,
        }
    );
    assert_eq!(digests(&master, "m"), [1, 2, 1]);
}

#[test]
fn rollbacks_flip_between_the_last_two_versions_or_go_to_one() {
    let mut master = Master::new();
    assert_eq!(
        refused(&master, rollback("m", None)),
        codes::MODULE_NAME_NOT_FOUND
    );
    run(&mut master, T, deploy("m", 1)).unwrap();
    assert_eq!(
        refused(&master, rollback("m", None)),
        codes::NOTHING_TO_ROLL_BACK
    );
    run(&mut master, T, deploy("m", 2)).unwrap();
    run(&mut master, T, deploy("m", 3)).unwrap();
    // 3 -> 2 -> 3 -> 2: each a new version, saying which it returned to.
    assert_eq!(
        events(&mut master, T + 1, rollback("m", None)),
        [EventKind::Deployed {
            name: "m".into(),
            digest: [2; 32],
            version: 4,
            rollback_of: Some(2),
        }]
    );
    assert_eq!(
        run(&mut master, T + 2, rollback("m", None)),
        Ok(reply(5, 3, false))
    );
    assert_eq!(deployment(&master, "m").current.rollback_of, Some(3));
    assert_eq!(
        run(&mut master, T + 3, rollback("m", None)),
        Ok(reply(6, 2, false))
    );
    // To a version by number.
    assert_eq!(
        run(&mut master, T + 4, rollback("m", Some(1))),
        Ok(reply(7, 1, false))
    );
    assert_eq!(deployment(&master, "m").current.rollback_of, Some(1));
    // To a version with the current digest: nothing to do.
    let same = master.decide(T + 5, &rollback("m", Some(1))).unwrap();
    assert_eq!((same.events, same.reply), (Vec::new(), reply(7, 1, true)));
    for missing in [0, 8, u32::MAX] {
        assert_eq!(
            refused(&master, rollback("m", Some(missing))),
            codes::MODULE_VERSION_NOT_FOUND
        );
    }
    assert_eq!(digests(&master, "m"), [1, 2, 3, 2, 3, 2, 1]);
}

#[test]
fn only_the_newest_versions_are_kept() {
    let mut master = Master::new();
    let total = MODULE_VERSIONS_KEPT as u32 + 10;
    for n in 0..total {
        run(&mut master, T + n as u64, deploy("m", (n % 2) as u8)).unwrap();
    }
    let view = deployment(&master, "m");
    assert_eq!(view.versions.len(), MODULE_VERSIONS_KEPT);
    assert_eq!(view.versions_total, total);
    assert_eq!(view.versions[0].version, total, "newest first");
    let oldest = total - MODULE_VERSIONS_KEPT as u32 + 1;
    assert_eq!(view.versions.last().unwrap().version, oldest);
    assert_eq!(
        refused(&master, rollback("m", Some(oldest - 1))),
        codes::MODULE_VERSION_NOT_FOUND
    );
    assert!(run(&mut master, T + 100, rollback("m", Some(oldest))).is_ok());
    let restored = Master::restore(&master.snapshot()).unwrap();
    assert_eq!(restored, master);
}

#[test]
fn names_are_bounded() {
    let mut master = Master::new();
    for n in 0..MODULE_NAMES_MAX {
        master.apply(&Event {
            at: T,
            kind: EventKind::Deployed {
                name: format!("m{n}"),
                digest: [1; 32],
                version: 1,
                rollback_of: None,
            },
        });
    }
    assert_eq!(refused(&master, deploy("new", 1)), codes::MODULE_NAMES_FULL);
    // A name held takes new versions still.
    assert_eq!(run(&mut master, T, deploy("m0", 2)), Ok(reply(2, 2, false)));
    let Ok(Answer::Deployments(all)) = master.query(T, &Query::Deployments) else {
        panic!("deployments")
    };
    assert_eq!(all.len(), MODULE_NAMES_MAX);
    run(&mut master, T, undeploy("m1")).unwrap();
    assert!(run(&mut master, T, deploy("new", 1)).is_ok());
}

#[test]
fn the_listing_is_by_name_without_versions() {
    let mut master = Master::new();
    for (name, n) in [("b", 1), ("a", 2), ("b", 3)] {
        run(&mut master, T, deploy(name, n)).unwrap();
    }
    let Ok(Answer::Deployments(all)) = master.query(T, &Query::Deployments) else {
        panic!("deployments")
    };
    let listed: Vec<_> = (all.iter())
        .map(|v| (v.name.as_str(), v.current.version, v.versions.len()))
        .collect();
    assert_eq!(listed, [("a", 1, 0), ("b", 2, 0)]);
    assert_eq!(
        master
            .query(T, &Query::Deployment { name: "c".into() })
            .unwrap_err()
            .code,
        codes::MODULE_NAME_NOT_FOUND
    );
}

#[test]
fn a_submission_by_name_runs_the_current_digest_and_records_its_version() {
    let mut master = Master::new();
    assert_eq!(
        refused(&master, submit_named(1, "m", b"a")),
        codes::MODULE_NAME_NOT_FOUND
    );
    run(&mut master, T, deploy("m", 1)).unwrap();
    run(&mut master, T, deploy("m", 2)).unwrap();
    let submitted = events(&mut master, T + 1, submit_named(1, "m", b"a"));
    let [
        EventKind::Submitted {
            spec: made,
            options,
            ..
        },
    ] = &submitted[..]
    else {
        panic!("{submitted:?}")
    };
    assert_eq!(
        made.module, [2; 32],
        "the current digest replaces the given one"
    );
    assert_eq!(options.module.as_deref(), Some("m"));
    run(&mut master, T + 2, rollback("m", None)).unwrap();
    let named = JobOptions {
        module: Some("m".into()),
        ..limited("k", Some(1), None)
    };
    run(
        &mut master,
        T + 3,
        submit_with(2, spec(9, b"b"), named.clone()),
    )
    .unwrap();
    let (first, second) = (job(&master, 1), job(&master, 2));
    assert_eq!(
        (
            first.module,
            first.module_name.as_deref(),
            first.module_version
        ),
        ([2; 32], Some("m"), Some(2))
    );
    assert_eq!((second.module, second.module_version), ([1; 32], Some(3)));
    assert_eq!(second.options, named, "the options as submitted");
    // Keys are kept without the name, which the deployments record.
    assert_eq!(master.keyed.options[&2].module, None);
    // An idempotency key compares the resolved digest.
    let keyed = |n| JobSpec {
        idempotency_key: Some("i".into()),
        ..spec(n, b"c")
    };
    run(&mut master, T + 4, submit_with(3, keyed(9), by_name("m"))).unwrap();
    let same = submit_with(4, keyed(1), JobOptions::default());
    assert_eq!(
        run(&mut master, T + 5, same),
        Ok(Reply::Submitted {
            id: 3,
            existing: true
        })
    );
    run(&mut master, T + 6, deploy("m", 5)).unwrap();
    let moved = submit_with(5, keyed(9), by_name("m"));
    assert_eq!(refused(&master, moved), codes::IDEMPOTENCY_CONFLICT);
    // Undeployed, a name keeps its jobs' records.
    run(&mut master, T + 7, undeploy("m")).unwrap();
    assert_eq!(job(&master, 1).module_name.as_deref(), Some("m"));
    assert_eq!(
        refused(&master, submit_named(6, "m", b"d")),
        codes::MODULE_NAME_NOT_FOUND
    );
}

#[test]
fn listings_and_bulk_actions_filter_by_the_name_jobs_were_submitted_by() {
    let mut master = Master::new();
    run(&mut master, T, deploy("m", 1)).unwrap();
    run(&mut master, T, submit_named(1, "m", b"a")).unwrap();
    // The same module by digest: not submitted by the name.
    run(
        &mut master,
        T,
        submit_with(2, spec(1, b"b"), JobOptions::default()),
    )
    .unwrap();
    run(&mut master, T, deploy("m", 2)).unwrap();
    run(&mut master, T, submit_named(3, "m", b"c")).unwrap();
    let by_name = |name: &str| JobFilter {
        module_name: Some(name.into()),
        ..JobFilter::default()
    };
    let list = |filter: JobFilter| {
        let query = Query::Jobs {
            filter,
            after: None,
            limit: 10,
            newest_first: false,
        };
        match master.query(T, &query) {
            Ok(Answer::Jobs { jobs, .. }) => Ok(jobs
                .iter()
                .map(|j| (j.id, j.module_version))
                .collect::<Vec<_>>()),
            Ok(other) => panic!("{other:?}"),
            Err(rejection) => Err(rejection.code),
        }
    };
    assert_eq!(list(by_name("m")), Ok(vec![(1, Some(1)), (3, Some(2))]));
    assert_eq!(list(by_name("other")), Ok(vec![]));
    assert_eq!(list(by_name("Not A Name")), Err(codes::INVALID_FILTER));
    // A bulk action by name changes those jobs only.
    let cancel = Command::Bulk {
        action: BulkAction::Cancel,
        filter: by_name("m"),
    };
    assert_eq!(
        run(&mut master, T + 1, cancel).unwrap(),
        Reply::Bulk { changed: 2 }
    );
    assert_eq!(job(&master, 2).state, JobState::Queued);
}

#[test]
fn a_dag_s_jobs_by_name_run_the_current_digest() {
    let mut master = Master::new();
    let mut a = dag_node("a", Vec::new());
    a.options = by_name("m");
    let b = dag_node("b", vec![DagRef::Node(0)]);
    let dag = |seq| submit_dag(seq, vec![a.clone(), b.clone()], OnFailure::CancelDag);
    let refusal = master.decide(T, &dag(1)).unwrap_err();
    assert_eq!(refusal.code, codes::MODULE_NAME_NOT_FOUND);
    assert!(refusal.message.starts_with("jobs[0]: module:"), "{refusal}");
    run(&mut master, T, deploy("m", 4)).unwrap();
    let kinds = events(&mut master, T + 1, dag(2));
    let modules: Vec<_> = (kinds.iter())
        .filter_map(|kind| match kind {
            EventKind::Submitted { spec, .. } => Some(spec.module[0]),
            _ => None,
        })
        .collect();
    assert_eq!(modules, [4, 1], "the named job only");
    assert_eq!(job(&master, 1).module_version, Some(1));
    assert_eq!(job(&master, 2).module_name, None);
    // A DAG does not hold its name.
    assert!(run(&mut master, T + 2, undeploy("m")).is_ok());
}

/// Schedule `s` of the module named `m`, every second.
fn named_schedule() -> Command {
    let mut spec = schedule_spec(
        "s",
        Every::Interval {
            ms: INTERVAL_MS_MIN,
        },
        Overlap::AllowAll,
        0,
    );
    spec.options = by_name("m");
    Command::CreateSchedule(spec)
}

#[test]
fn a_schedule_by_name_runs_the_digest_current_at_each_firing() {
    let mut master = Master::new();
    assert_eq!(
        refused(&master, named_schedule()),
        codes::MODULE_NAME_NOT_FOUND
    );
    run(&mut master, T, deploy("m", 1)).unwrap();
    run(&mut master, T, named_schedule()).unwrap();
    run(&mut master, T + 1_000, Command::Tick).unwrap();
    run(&mut master, T + 1_500, deploy("m", 2)).unwrap();
    run(&mut master, T + 2_000, Command::Tick).unwrap();
    let (first, second) = (job(&master, 1), job(&master, 2));
    assert_eq!((first.module, first.module_version), ([1; 32], Some(1)));
    assert_eq!((second.module, second.module_version), ([2; 32], Some(2)));
    assert_eq!(second.module_name.as_deref(), Some("m"));
    // Replay gives the same jobs: the firing's digest is state, not input.
    let restored = Master::restore(&master.snapshot()).unwrap();
    assert_eq!(restored, master);
    // The schedule holds its name.
    assert_eq!(refused(&master, undeploy("m")), codes::MODULE_NAME_IN_USE);
    run(
        &mut master,
        T + 2_100,
        Command::DeleteSchedule { name: "s".into() },
    )
    .unwrap();
    assert_eq!(run(&mut master, T + 2_200, undeploy("m")), Ok(Reply::Done));
    assert_eq!(
        refused(&master, undeploy("m")),
        codes::MODULE_NAME_NOT_FOUND
    );
    // Versions start again from 1 under a name deployed anew.
    assert_eq!(
        run(&mut master, T + 2_300, deploy("m", 3)),
        Ok(reply(1, 3, false))
    );
}

#[test]
fn retention_drops_a_job_s_record_with_the_job() {
    let mut master = Master::new();
    run(&mut master, T, deploy("m", 1)).unwrap();
    run(&mut master, T, submit_named(1, "m", b"a")).unwrap();
    run(&mut master, T, poll("w", 1)).unwrap();
    let ok = Outcome::Succeeded(Vec::new());
    run(&mut master, T + 1, finish(1, 1, "w", ok)).unwrap();
    assert!(master.deployments.jobs.contains_key(&1));
    let later = T + 1 + master.config().retention_ms;
    let purged = events(&mut master, later, Command::Tick);
    assert!(purged.contains(&EventKind::Purged { id: 1 }), "{purged:?}");
    assert!(master.deployments.jobs.is_empty());
}

#[test]
fn snapshots_keep_deployments_and_job_records() {
    let mut master = Master::new();
    for (name, n) in [("m", 1), ("m", 2), ("n", 3)] {
        run(&mut master, T, deploy(name, n)).unwrap();
    }
    run(&mut master, T, submit_named(1, "m", b"a")).unwrap();
    run(&mut master, T, submit_named(2, "n", b"b")).unwrap();
    run(&mut master, T, rollback("m", None)).unwrap();
    run(&mut master, T, named_schedule()).unwrap();
    run(&mut master, T + 1_000, Command::Tick).unwrap();
    let snapshot = master.snapshot();
    assert_eq!(snapshot[0], SNAPSHOT_VERSION);
    let restored = Master::restore(&snapshot).unwrap();
    assert_eq!(restored, master);
    assert_eq!(restored.snapshot(), snapshot, "identical bytes");
    assert_eq!(restore_in_parts(&snapshot, 3).unwrap(), master);
    // Jobs of one name share its allocation once restored.
    let (first, _) = &restored.deployments.jobs[&1];
    let (third, _) = &restored.deployments.jobs[&3];
    assert!(Arc::ptr_eq(first, third));
    assert!(Arc::ptr_eq(first, &restored.deployments.names["m"].name));
    assert_eq!(job(&restored, 3).module_version, Some(3));
}

// ---- Older formats ---------------------------------------------------

/// `JobOptions` as formats 3 and 4 (and snapshots up to version 5) wrote
/// them: two fields.
#[derive(serde::Serialize)]
struct OptionsV4 {
    limit: Option<KeyLimit>,
    unique: Option<Unique>,
}

/// `ScheduleSpec` of format 4.
#[derive(serde::Serialize)]
struct ScheduleSpecV4<'a> {
    name: &'a str,
    every: &'a Every,
    job: &'a JobSpec,
    options: OptionsV4,
    overlap: Overlap,
    catch_up_ms: u64,
}

fn limit_v4() -> OptionsV4 {
    OptionsV4 {
        limit: limited("k", Some(2), None).limit,
        unique: None,
    }
}

/// `EventKind` indexes, the same in formats 4 and 5.
const SUBMITTED: u32 = 1;
const SCHEDULE_CREATED: u32 = 15;

#[test]
fn events_of_format_4_decode_with_no_module() {
    let job_spec = spec(1, b"a");
    let request = Some(crate::scenarios::request(5));
    let submitted = (7u64, SUBMITTED, 3u64, &job_spec, request, limit_v4());
    let submitted = postcard::to_extend(&submitted, vec![FORMAT_VERSION_4]).unwrap();
    let expected = Event {
        at: 7,
        kind: EventKind::Submitted {
            id: 3,
            spec: job_spec.clone(),
            request,
            options: limited("k", Some(2), None),
        },
    };
    assert_eq!(decode_event(&submitted), Ok(expected.clone()));
    // Later formats write the third to eighth fields.
    let now = encode(&expected);
    assert_eq!(now[1..now.len() - 6], submitted[1..]);
    assert_eq!(now[now.len() - 6..], [0, 0, 0, 0, 0, 0]);
    // A DAG's job is a `Submitted` without a request, then the DAG.
    let node = (
        8u64,
        SUBMITTED,
        4u64,
        &job_spec,
        None::<RequestId>,
        limit_v4(),
    );
    let node = postcard::to_extend(&node, vec![FORMAT_VERSION_4]).unwrap();
    let created = [4, 8, 23, 1, 1, 1, 4, 1, b'a', 0, 1, 0, 0];
    let mut master = Master::new();
    for bytes in [&node[..], &created] {
        master.apply(&decode_event(bytes).unwrap());
    }
    assert_eq!(job(&master, 4).dag, Some((1, "a".into())));
    assert_eq!(job(&master, 4).options, limited("k", Some(2), None));
    // A schedule's spec holds options too, followed by more fields.
    let every = Every::Interval { ms: 1_000 };
    let spec = ScheduleSpecV4 {
        name: "s",
        every: &every,
        job: &job_spec,
        options: limit_v4(),
        overlap: Overlap::BufferOne,
        catch_up_ms: 60_000,
    };
    let schedule = (9u64, SCHEDULE_CREATED, spec, Some(10u64));
    let schedule = postcard::to_extend(&schedule, vec![FORMAT_VERSION_4]).unwrap();
    let Ok(Event {
        kind: EventKind::ScheduleCreated { spec, next },
        ..
    }) = decode_event(&schedule)
    else {
        panic!("{:?}", decode_event(&schedule))
    };
    assert_eq!(
        (spec.options, spec.overlap, spec.catch_up_ms, next),
        (
            limited("k", Some(2), None),
            Overlap::BufferOne,
            60_000,
            Some(10)
        )
    );
    // Format 4 never held the deployment kinds.
    let deployed = encode(&Event {
        at: 1,
        kind: EventKind::Undeployed { name: "m".into() },
    });
    let old = [&[FORMAT_VERSION_4][..], &deployed[1..]].concat();
    assert_eq!(decode_event(&old).unwrap_err().code, codes::UNDECODABLE);
    assert!(decode_event(&deployed).is_ok());
}

#[test]
fn a_version_5_snapshot_restores_its_schedules_and_keys_with_no_module() {
    let mut master = Master::new();
    let mut spec = schedule_spec("s", Every::Interval { ms: 1_000 }, Overlap::Skip, 0);
    spec.options = limited("k", Some(2), None);
    run(&mut master, T, Command::CreateSchedule(spec)).unwrap();
    run(&mut master, T + 1_000, Command::Tick).unwrap();
    assert_eq!(master.keyed.options.len(), 1);
    // Version 5's layout, its options of two fields, by hand.
    let mut bytes = master.encode_state_v10(vec![5]);
    bytes = postcard::to_extend(&master.tokens, bytes).unwrap();
    bytes = postcard::to_extend(&master.requests, bytes).unwrap();
    let options: std::collections::BTreeMap<JobId, OptionsV4> = (master.keyed.options.keys())
        .map(|&id| (id, limit_v4()))
        .collect();
    let keyed = (options, &master.keyed.uniques, &master.keyed.starts);
    bytes = postcard::to_extend(&keyed, bytes).unwrap();
    let schedules: Vec<_> = (master.schedules.iter())
        .map(|(name, s)| {
            let spec = ScheduleSpecV4 {
                name: &s.spec.name,
                every: &s.spec.every,
                job: &s.spec.job,
                options: limit_v4(),
                overlap: s.spec.overlap,
                catch_up_ms: s.spec.catch_up_ms,
            };
            let rest = (
                s.created_at,
                s.paused,
                s.next,
                s.buffered,
                &s.active,
                s.last,
            );
            let totals = (s.fired_total, s.skipped_total, &s.missed);
            (name, (spec, rest, totals))
        })
        .collect();
    bytes = postcard::to_extend(&schedules, bytes).unwrap();
    bytes = postcard::to_extend(&master.dags, bytes).unwrap();
    let old = Master::restore(&bytes).unwrap();
    let master = master.before_locality();
    assert_eq!(old, master, "the same state, with no deployments");
    assert_eq!(restore_in_parts(&bytes, 2).unwrap(), master);
    // A version 5 snapshot ends after the DAGs.
    let mut longer = bytes.clone();
    longer.extend([0, 0]);
    assert_eq!(
        Master::restore(&longer).unwrap_err().code,
        codes::UNDECODABLE
    );
    // Read as version 6, the same bytes lack the deployments.
    bytes[0] = 6;
    assert!(Master::restore(&bytes).is_err());
}

#[test]
fn a_job_s_options_read_by_name_in_self_describing_formats() {
    let options = JobOptions {
        module: Some("m".into()),
        ..limited("k", Some(1), None)
    };
    let json = serde_json::to_string(&options).unwrap();
    assert_eq!(serde_json::from_str::<JobOptions>(&json).unwrap(), options);
    let older: JobOptions = serde_json::from_str(r#"{"limit":null,"unique":null}"#).unwrap();
    assert_eq!(older, JobOptions::default());
}
