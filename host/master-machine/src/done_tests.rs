//! Finished jobs are packed: the snapshot's bytes do not change, and
//! a packed job reads, retries and purges as an unpacked one did.

use std::collections::BTreeMap;

use serde::Serialize;

use super::*;
use crate::master::*;
use crate::scenarios::{failed, finish, poll, spec, submit};
use crate::snapshot::HeadRef;
use crate::workers::Worker;

fn run(master: &mut Master, now: Millis, command: Command) -> Reply {
    crate::testing::run(master, now, command).unwrap()
}

/// Jobs 1 and 3 succeed, 2 fails, 4 runs, 5 waits.
fn mixed() -> Master {
    let mut master = Master::new();
    for n in 1..=5 {
        run(&mut master, 10, submit(n, spec(n as u8, b"in")));
    }
    run(&mut master, 20, poll("w", 4));
    let ok = || Outcome::Succeeded(b"out".to_vec());
    run(&mut master, 30, finish(1, 1, "w", ok()));
    run(&mut master, 30, finish(2, 1, "w", failed("job_error")));
    run(&mut master, 30, finish(3, 1, "w", ok()));
    master
}

/// The parts of `master`'s snapshot of about `bytes_max` each.
fn parts(master: &Master, bytes_max: usize) -> Vec<Vec<u8>> {
    let mut cursor = SnapshotCursor::Start;
    let mut parts = Vec::new();
    loop {
        let part = master.snapshot_part(&mut cursor, bytes_max);
        if part.is_empty() {
            return parts;
        }
        parts.push(part);
        assert!(parts.len() < 10_000, "the parts never end");
    }
}

#[test]
fn a_snapshot_in_parts_is_the_snapshot() {
    let mut master = mixed();
    // Request ids in two runs, to be split across parts too.
    for n in 6..=9 {
        run(&mut master, 40 + n, submit(n, spec(1, b"more")));
    }
    let whole = master.snapshot();
    for bytes_max in [0, 1, 2, 7, 50, 300, 1 << 20] {
        let parts = parts(&master, bytes_max);
        assert_eq!(parts.concat(), whole, "parts of {bytes_max}");
        if bytes_max <= 1 {
            // A part ends after the job or request id that reached
            // the size: one each (and the head, tail and rest).
            assert!(parts.len() > 9 + 9, "{}", parts.len());
        }
    }
    assert_eq!(parts(&Master::new(), 1).concat(), Master::new().snapshot());
    assert_eq!(parts(&master, usize::MAX), [whole]);
}

#[test]
fn a_snapshot_restores_from_parts_of_any_size() {
    let mut master = mixed();
    for n in 6..=9 {
        run(&mut master, 40 + n, submit(n, spec(1, b"more")));
    }
    let whole = master.snapshot();
    for size in [1, 3, 100, whole.len()] {
        let restored = crate::testing::restore_in_parts(&whole, size).unwrap();
        assert_eq!(restored, master, "parts of {size}");
    }
    // Cut short, or with a byte too many: refused, as whole.
    let short = crate::testing::restore_in_parts(&whole[..whole.len() - 1], 4);
    assert_eq!(short.unwrap_err().code, codes::UNDECODABLE);
    let long = [&whole[..], &[0]].concat();
    let refusal = crate::testing::restore_in_parts(&long, 4).unwrap_err();
    assert_eq!(refusal.message, "1 bytes after the snapshot");
    // A machine refused a part is as it was, and starts again.
    let mut machine = crate::Machine::default();
    assert!(
        machine
            .init_part(&whole[..10], false, Order::Priority)
            .is_ok()
    );
    assert!(
        machine
            .init_part(&[0xFF; 10], false, Order::Priority)
            .is_err()
    );
    assert_eq!(machine.master(), &Master::new());
    machine.init_part(&whole, true, Order::Priority).unwrap();
    assert_eq!(machine.master(), &master);
}

#[test]
fn a_machine_starts_its_parts_again_after_an_apply() {
    let mut machine = crate::Machine::init(Some(&mixed().snapshot())).unwrap();
    let first = machine.snapshot_part(10);
    assert_eq!(first[0], SNAPSHOT_VERSION);
    let decision = machine.decide(50, &crate::encode(&submit(6, spec(1, b"x"))));
    let (events, _) = decision.unwrap();
    machine.apply(&events).unwrap();
    let mut parts = Vec::new();
    loop {
        let part = machine.snapshot_part(10);
        if part.is_empty() {
            break;
        }
        parts.push(part);
    }
    assert_eq!(
        parts.concat(),
        machine.snapshot(),
        "of the new state, whole"
    );
    // And the next call starts another.
    assert_eq!(machine.snapshot_part(10)[0], SNAPSHOT_VERSION);
}

/// What the state's derived `Serialize` wrote when every job was one
/// map of `Job`s.
#[derive(Serialize)]
struct Derived<'a> {
    config: &'a Config,
    next_id: JobId,
    next_seq: u64,
    jobs: BTreeMap<JobId, Box<Job>>,
    workers: &'a BTreeMap<String, Worker>,
    submitted_total: u64,
    attempts_total: u64,
    retries_total: u64,
}

fn derived(master: &Master) -> Vec<u8> {
    let mut jobs = master.jobs.clone();
    for (&id, done) in &master.done {
        jobs.insert(id, Box::new(done.unpack().unwrap()));
    }
    postcard::to_allocvec(&Derived {
        config: &master.config,
        next_id: master.next_id,
        next_seq: master.next_seq,
        jobs,
        workers: &master.workers,
        submitted_total: master.submitted_total,
        attempts_total: master.attempts_total,
        retries_total: master.retries_total,
    })
    .unwrap()
}

#[test]
fn finished_jobs_are_packed_and_snapshots_keep_their_bytes() {
    let master = mixed();
    assert_eq!(master.done.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(master.jobs.keys().copied().collect::<Vec<_>>(), [4, 5]);
    assert_eq!(master.encode_state(Vec::new()), derived(&master));
    // Measured exactly before it is written: its buffer never grows.
    let snapshot = master.snapshot();
    assert_eq!(snapshot.capacity(), snapshot.len());
    let restored = Master::restore(&snapshot).unwrap();
    assert_eq!(restored, master);
    assert_eq!(restored.stats(), master.stats());
    assert_eq!(restored.index, master.index);
}

#[test]
fn a_packed_job_gives_the_facts_its_job_gives() {
    let mut master = mixed();
    let keyed = JobSpec {
        idempotency_key: Some("key".into()),
        memory_bytes: Some(1 << 20),
        priority: -3,
        ..spec(6, b"input")
    };
    run(&mut master, 40, submit(6, keyed));
    run(&mut master, 41, Command::Cancel { id: 6 });
    assert_eq!(master.done.len(), 4);
    for done in master.done.values() {
        let job = done.unpack().unwrap();
        assert_eq!(done.facts(), Some(Facts::of(&job)));
        assert_eq!(done.state(), job.state);
        assert_eq!(done.submitted_at(), Some(job.submitted_at));
    }
    assert_eq!(
        master.done[&2].facts().unwrap().error.unwrap().0,
        "job_error"
    );
    assert_eq!(master.done[&6].facts().unwrap().priority, -3);
}

#[test]
fn a_packed_job_reads_as_it_was() {
    let master = mixed();
    let Answer::Job(view) = master.query(40, &Query::Job { id: 2 }).unwrap() else {
        panic!()
    };
    assert_eq!(view.state, JobState::Failed);
    assert_eq!(view.error.unwrap().code, "job_error");
    assert_eq!(view.attempts[0].log_tail, "done\n");
    assert_eq!(
        master.query(40, &Query::Result { id: 1 }).unwrap(),
        Answer::Result(b"out".to_vec())
    );
    let listing = |state| Query::Jobs {
        filter: JobFilter {
            state,
            ..JobFilter::default()
        },
        after: None,
        limit: 10,
        newest_first: true,
    };
    let ids = |answer| match answer {
        Answer::Jobs { jobs, .. } => jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        ids(master.query(40, &listing(None)).unwrap()),
        [5, 4, 3, 2, 1]
    );
    let succeeded = Some(JobState::Succeeded);
    assert_eq!(ids(master.query(40, &listing(succeeded)).unwrap()), [3, 1]);
    let Answer::Recent(recent) = master.query(40, &Query::Recent { window_ms: 100 }).unwrap()
    else {
        panic!()
    };
    assert_eq!((recent.finished, recent.p50_ms), (3, Some(20)));
}

#[test]
fn a_retried_job_unpacks_and_a_purged_one_is_gone() {
    let mut master = mixed();
    let retry = Command::Bulk {
        action: BulkAction::Retry { attempts: 1 },
        filter: JobFilter {
            state: Some(JobState::Failed),
            ..JobFilter::default()
        },
    };
    assert_eq!(run(&mut master, 40, retry), Reply::Bulk { changed: 1 });
    assert_eq!(master.jobs[&2].state, JobState::Queued);
    assert!(!master.done.contains_key(&2));
    master.apply(&Event {
        at: 50,
        kind: EventKind::Purged { id: 1 },
    });
    assert!(!master.holds(1));
    assert_eq!(master.stats().jobs[JobState::Succeeded as usize], 1);
    assert_eq!(master.stats().result_bytes, 3);
    assert_eq!(
        master.query(50, &Query::Job { id: 1 }).unwrap_err().code,
        codes::JOB_EXPIRED
    );
    let restored = Master::restore(&master.snapshot()).unwrap();
    assert_eq!(restored, master);
    assert_eq!(restored.index, master.index);
}

#[test]
fn results_over_their_bound_purge_the_oldest_until_under_it() {
    // Jobs 1 and 3 hold 3 bytes each, 2 none; all finished at 30.
    let mut master = mixed();
    let config = Config {
        results_bytes_total_max: 3,
        ..master.config.clone()
    };
    run(&mut master, 40, Command::Configure(config));
    run(&mut master, 50, Command::Tick);
    assert_eq!(master.done.keys().copied().collect::<Vec<_>>(), [2, 3]);
    assert_eq!(master.stats().result_bytes, 3);
    // Under the bound, nothing more goes.
    run(&mut master, 60, Command::Tick);
    assert_eq!(master.done.len(), 2);
}

#[test]
fn a_snapshot_with_jobs_out_of_order_is_refused() {
    let master = mixed();
    let mut bytes = master.encode_state(vec![1]);
    // Job 2's id in place of job 3's: ids must ascend.
    let head = postcard::to_allocvec(&HeadRef {
        config: &master.config,
        next_id: master.next_id,
        next_seq: master.next_seq,
    })
    .unwrap();
    let first = 1 + head.len() + 1 + 1 + master.done[&1].record().len();
    assert_eq!(bytes[first], 2);
    bytes[first] = 1;
    assert_eq!(
        Master::restore(&bytes).unwrap_err().code,
        codes::UNDECODABLE
    );
}
