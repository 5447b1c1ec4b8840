//! Request ids: one job per submission however often it arrives,
//! forgotten after their time or beyond their count, kept in snapshots.

use super::*;
use crate::keys::Keyed;
use crate::master::*;
use crate::protocol::*;
use crate::scenarios::{request, spec, submit};
use crate::testing::run;

const T: Millis = 1_000_000;

fn submitted(id: JobId) -> Result<Reply, Rejection> {
    Ok(Reply::Submitted {
        id,
        existing: false,
    })
}

#[test]
fn the_same_request_twice_is_one_job_and_different_ones_are_two() {
    let mut master = Master::new();
    assert_eq!(run(&mut master, T, submit(1, spec(1, b"a"))), submitted(1));
    // The retry of a forward: the first answer, nothing new.
    let decision = master.decide(T + 5, &submit(1, spec(1, b"a"))).unwrap();
    assert!(decision.events.is_empty(), "{decision:?}");
    assert_eq!(Ok(decision.reply), submitted(1));
    // Two requests with the same content are two jobs.
    assert_eq!(
        run(&mut master, T + 6, submit(2, spec(1, b"a"))),
        submitted(2)
    );
    assert_eq!(master.stats().submitted_total, 2);
    // A remembered request is answered even when a new one would not be.
    run(
        &mut master,
        T + 7,
        Command::Configure(Config {
            queue_max: 2,
            ..Config::default()
        }),
    )
    .unwrap();
    assert_eq!(
        run(&mut master, T + 8, submit(3, spec(1, b"b")))
            .unwrap_err()
            .code,
        codes::QUEUE_FULL
    );
    assert_eq!(
        run(&mut master, T + 9, submit(1, spec(1, b"a"))),
        submitted(1)
    );
}

#[test]
fn request_ids_are_purged_after_their_time() {
    let mut master = Master::new();
    run(&mut master, T, submit(1, spec(1, b"a"))).unwrap();
    // Decided exactly TTL before the purge's cut: kept.
    let second = T + REQUEST_PURGE_PERIOD_MS;
    run(&mut master, second, submit(2, spec(1, b"b"))).unwrap();
    // Past the TTL but within the purge period: still remembered.
    let due = T + REQUEST_TTL_MS + REQUEST_PURGE_PERIOD_MS;
    assert!(
        master
            .decide(due - 1, &Command::Tick)
            .unwrap()
            .events
            .is_empty()
    );
    assert_eq!(
        master
            .decide(due - 1, &submit(1, spec(1, b"a")))
            .unwrap()
            .events,
        []
    );
    // One event forgets every id past its time, and only those.
    let tick = master.decide(due, &Command::Tick).unwrap();
    assert_eq!(
        tick.events,
        [Event {
            at: due,
            kind: EventKind::RequestsExpired {
                before: due - REQUEST_TTL_MS
            },
        }]
    );
    for event in &tick.events {
        master.apply(event);
    }
    assert_eq!(master.requests.len(), 1, "{:?}", master.requests);
    // A forgotten id is a new submission; the other is still known.
    assert_eq!(
        run(&mut master, due + 1, submit(1, spec(1, b"a"))),
        submitted(3)
    );
    assert_eq!(
        run(&mut master, due + 2, submit(2, spec(1, b"b"))),
        submitted(2)
    );
    assert!(
        master
            .decide(due + 3, &Command::Tick)
            .unwrap()
            .events
            .is_empty()
    );
}

#[test]
fn beyond_the_count_bound_the_oldest_ids_are_forgotten() {
    let mut master = Master::new();
    for (seq, at) in [(5, T + 2), (6, T), (7, T + 1)] {
        master.remember_request(request(seq), seq, at, 2);
    }
    // 6 was decided first: it goes, whatever its id.
    let kept: Vec<_> = master.requests.iter().map(|(r, _)| r.seq).collect();
    assert_eq!(kept, [5, 7]);
    master.remember_request(request(8), 8, T + 3, 2);
    let kept: Vec<_> = master.requests.iter().map(|(r, _)| r.seq).collect();
    assert_eq!(kept, [5, 8]);
}

#[test]
fn a_snapshot_keeps_the_request_ids_and_older_versions_have_none() {
    let mut master = Master::new();
    run(&mut master, T, submit(1, spec(1, b"a"))).unwrap();
    run(&mut master, T + 1, submit(2, spec(1, b"b"))).unwrap();
    let mut restored = Master::restore(&master.snapshot()).unwrap();
    assert_eq!(restored, master, "the table and its index");
    assert_eq!(
        run(&mut restored, T + 2, submit(2, spec(1, b"b"))),
        submitted(2)
    );
    assert_eq!(restored.stats().submitted_total, 2);
    // Expiry works from the restored index too.
    let due = T + 1 + REQUEST_TTL_MS + REQUEST_PURGE_PERIOD_MS;
    run(&mut restored, due, Command::Tick).unwrap();
    assert!(restored.requests.is_empty());

    // Version 2: the state and the tokens, no request ids.
    let mut version_2 = master.encode_state_v10(vec![2]);
    version_2 = postcard::to_extend(&master.tokens, version_2).unwrap();
    let mut old = Master::restore(&version_2).unwrap();
    assert!(old.requests.is_empty());
    assert_eq!(old.stats(), master.stats());
    assert_eq!(run(&mut old, T + 2, submit(2, spec(1, b"b"))), submitted(3));
}

#[test]
fn events_of_format_1_replay_without_request_ids() {
    let spec = spec(1, b"a");
    // Format 1's `Submitted { id, spec }`, and a kind both formats share.
    let submitted = postcard::to_extend(&(7u64, 1u32, 3u64, &spec), vec![1]).unwrap();
    let cancelled = postcard::to_extend(&(8u64, 6u32, 3u64), vec![1]).unwrap();
    let expected = Event {
        at: 7,
        kind: EventKind::Submitted {
            id: 3,
            spec: spec.clone(),
            request: None,
            options: JobOptions::default(),
        },
    };
    assert_eq!(decode_event(&submitted), Ok(expected.clone()));
    assert_eq!(
        decode_event(&cancelled),
        Ok(Event {
            at: 8,
            kind: EventKind::Cancelled { id: 3 }
        })
    );
    // Format 1 had no `RequestsExpired`; a plain decoder refuses format 1.
    let expired = postcard::to_extend(&(9u64, 13u32, 1u64), vec![1]).unwrap();
    assert_eq!(decode_event(&expired).unwrap_err().code, codes::UNDECODABLE);
    assert_eq!(
        decode::<Event>(&submitted).unwrap_err().code,
        codes::UNKNOWN_VERSION
    );
    // The kinds' indexes the format-1 reader relies on.
    let now = |kind| encode(&Event { at: 7, kind })[2];
    assert_eq!(now(expected.kind.clone()), 1);
    assert_eq!(now(EventKind::RequestsExpired { before: 0 }), 13);
    let mut master = Master::new();
    master.apply(&decode_event(&submitted).unwrap());
    assert!(master.requests.is_empty());
    assert_eq!(master.stats().submitted_total, 1);
}

#[test]
fn events_of_format_2_replay_without_options() {
    let spec = spec(1, b"a");
    let request = Some(RequestId { origin: 4, seq: 5 });
    // Format 2's `Submitted { id, spec, request }`.
    let submitted = postcard::to_extend(&(7u64, 1u32, 3u64, &spec, request), vec![2]).unwrap();
    let retried = postcard::to_extend(&(8u64, 14u32, 3u64, 4u32), vec![2]).unwrap();
    assert_eq!(
        decode_event(&submitted),
        Ok(Event {
            at: 7,
            kind: EventKind::Submitted {
                id: 3,
                spec: spec.clone(),
                request,
                options: JobOptions::default(),
            },
        })
    );
    assert_eq!(
        decode_event(&retried),
        Ok(Event {
            at: 8,
            kind: EventKind::Retried {
                id: 3,
                max_attempts: 4
            }
        })
    );
    assert_eq!(
        decode::<Event>(&submitted).unwrap_err().code,
        codes::UNKNOWN_VERSION
    );
    // This format's `Submitted` is format 2's followed by the options
    // (six absent fields, no labels and no namespace).
    let now = encode(&Event {
        at: 7,
        kind: EventKind::Submitted {
            id: 3,
            spec,
            request,
            options: JobOptions::default(),
        },
    });
    assert_eq!(now[1..now.len() - 8], submitted[1..]);
}

#[test]
fn a_snapshot_keeps_what_keys_hold_and_version_3_has_none() {
    use crate::scenarios::{limited, poll, submit_with, unique};
    let mut master = Master::new();
    let options = JobOptions {
        unique: unique("u", 60_000).unique,
        ..limited("k", Some(1), Some(5))
    };
    run(&mut master, T, submit_with(1, spec(1, b"a"), options)).unwrap();
    let limit = limited("k", Some(1), Some(5));
    run(&mut master, T, submit_with(2, spec(1, b"b"), limit)).unwrap();
    run(&mut master, T + 1, poll("w", 4)).unwrap();
    let mut restored = Master::restore(&master.snapshot()).unwrap();
    assert_eq!(restored, master, "holds, starts and their indexes");
    // The key's hold and its running attempt survive the snapshot.
    let again = submit_with(3, spec(1, b"c"), unique("u", 60_000));
    assert_eq!(
        run(&mut restored, T + 2, again.clone()),
        Ok(Reply::Submitted {
            id: 1,
            existing: true
        })
    );
    assert_eq!(
        restored.startable(T + 2, 4, &WorkerPool::default()),
        Vec::<JobId>::new()
    );

    // Version 3: no options; the jobs run without limits.
    let mut version_3 = master.encode_state_v10(vec![3]);
    version_3 = postcard::to_extend(&master.tokens, version_3).unwrap();
    version_3 = postcard::to_extend(&master.requests, version_3).unwrap();
    let mut old = Master::restore(&version_3).unwrap();
    assert_eq!(old.keyed, Keyed::default());
    assert_eq!(old.startable(T + 2, 4, &WorkerPool::default()), vec![2]);
    assert_eq!(run(&mut old, T + 2, again), submitted(3));
}

#[test]
fn events_of_format_3_replay_as_they_are_and_format_4_is_pinned() {
    // Format 3 had the kinds up to `Retried`, encoded as today.
    let retried = [3, 8, 14, 3, 4];
    assert_eq!(
        decode_event(&retried),
        Ok(Event {
            at: 8,
            kind: EventKind::Retried {
                id: 3,
                max_attempts: 4
            }
        })
    );
    assert_eq!(
        decode::<Event>(&retried).unwrap_err().code,
        codes::UNKNOWN_VERSION
    );
    // Format 4's new kinds' bytes, the same in format 5: a change to them
    // fails here, not in a journal someone replays.
    let fired = Event {
        at: 9,
        kind: EventKind::ScheduleFired {
            name: "s".into(),
            tick: 8,
            id: 3,
            next: Some(10),
        },
    };
    let fired_4 = [4, 9, 16, 1, b's', 8, 3, 1, 10];
    assert_eq!(decode_event(&fired_4).as_ref(), Ok(&fired));
    assert_eq!(
        encode(&fired)[..],
        [&[FORMAT_VERSION][..], &fired_4[1..]].concat()
    );
    let created = Event {
        at: 9,
        kind: EventKind::DagCreated {
            dag: 1,
            on_failure: OnFailure::CancelDag,
            nodes: vec![DagNode {
                id: 3,
                name: "a".into(),
                parents: vec![2],
                outputs: true,
            }],
            request: None,
            idempotency_key: None,
        },
    };
    let created_4 = [4, 9, 23, 1, 1, 1, 3, 1, b'a', 1, 2, 1, 0, 0];
    assert_eq!(decode_event(&created_4).as_ref(), Ok(&created));
    assert_eq!(
        encode(&created)[..],
        [&[FORMAT_VERSION][..], &created_4[1..]].concat()
    );
    for event in [fired, created] {
        assert_eq!(decode_event(&encode(&event)), Ok(event));
    }
}

#[test]
fn a_version_4_snapshot_restores_without_schedules_or_dags() {
    use crate::scenarios::create_schedule;
    let mut master = Master::new();
    run(&mut master, T, submit(1, spec(1, b"a"))).unwrap();
    let every = Every::Interval { ms: 1_000 };
    run(
        &mut master,
        T,
        create_schedule("s", every, Overlap::Skip, 0),
    )
    .unwrap();
    let mut version_4 = master.encode_state_v10(vec![4]);
    version_4 = postcard::to_extend(&master.tokens, version_4).unwrap();
    version_4 = postcard::to_extend(&master.requests, version_4).unwrap();
    version_4 = postcard::to_extend(&master.keyed, version_4).unwrap();
    let old = Master::restore(&version_4).unwrap();
    assert!(old.schedules.is_empty());
    assert_eq!(old.dags.dags.len(), 0);
    assert_eq!(old.jobs, master.jobs);
    // And the current version keeps both.
    let now = Master::restore(&master.snapshot()).unwrap();
    assert_eq!(now, master);
    assert_eq!(master.snapshot()[0], SNAPSHOT_VERSION);
}
