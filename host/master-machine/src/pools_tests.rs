//! Pools: a job starts only on a worker with its labels and memory; jobs
//! no worker can run are counted and wait without holding up the rest;
//! pools are journaled once per change, forgotten with the worker and
//! kept by snapshots; older bytes decode with none; and a seeded property
//! checks every poll's choice against the line.

use proptest::prelude::*;

use super::*;
use crate::scenarios::{limited, spec, submit, submit_with};
use crate::testing::{decide_and_apply, restore_in_parts};

const T: Millis = 1_000_000;
const GIB: u64 = 1 << 30;

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn pool(pairs: &[(&str, &str)], memory_max: Option<u64>) -> WorkerPool {
    WorkerPool {
        labels: labels(pairs),
        memory_max,
    }
}

/// A master driven as the host drives it, with its journal.
#[derive(Default)]
struct Run {
    master: Master,
    events: Vec<Event>,
    seq: u64,
}

impl Run {
    fn run(&mut self, now: Millis, command: Command) -> Result<Vec<Event>, Rejection> {
        decide_and_apply(&mut self.master, &mut self.events, now, &command)
    }

    /// The jobs a poll by `worker` with `pool` and `free` slots starts.
    fn poll(&mut self, now: Millis, worker: &str, free: u32, pool: &WorkerPool) -> Vec<JobId> {
        let command = Command::Poll {
            worker: worker.into(),
            slots: 8,
            free,
            holds: Vec::new(),
            pool: pool.clone(),
        };
        (self.run(now, command).expect("a poll is accepted").iter())
            .filter_map(|event| match event.kind {
                EventKind::Assigned { id, .. } => Some(id),
                _ => None,
            })
            .collect()
    }

    /// Submits a job asking for `pairs` and `memory`, with `options`.
    fn job_with(
        &mut self,
        now: Millis,
        pairs: &[(&str, &str)],
        memory: Option<u64>,
        options: JobOptions,
    ) -> JobId {
        self.seq += 1;
        let spec = JobSpec {
            memory_bytes: memory,
            ..spec(1, b"x")
        };
        let options = JobOptions {
            labels: labels(pairs),
            ..options
        };
        let events = self
            .run(now, submit_with(self.seq, spec, options))
            .expect("accepted");
        match events[0].kind {
            EventKind::Submitted { id, .. } => id,
            ref other => panic!("submitted, not {other:?}"),
        }
    }

    fn job(&mut self, now: Millis, pairs: &[(&str, &str)], memory: Option<u64>) -> JobId {
        self.job_with(now, pairs, memory, JobOptions::default())
    }

    fn view(&self, id: JobId) -> JobView {
        match self.master.query(T, &Query::Job { id }) {
            Ok(Answer::Job(view)) => *view,
            other => panic!("a job view, not {other:?}"),
        }
    }
}

#[test]
fn labels_are_checked_and_matched_by_equality() {
    assert_eq!(
        check_labels(&labels(&[("gpu", "a100"), ("zone", "eu-1")])),
        Ok(())
    );
    assert_eq!(check_labels(&[]), Ok(()));
    let bad = [
        labels(&[("", "x")]),
        labels(&[("GPU", "x")]),
        labels(&[("-gpu", "x")]),
        labels(&[("gpu", "")]),
        labels(&[("gpu", "a b")]),
        labels(&[("gpu", "a=b")]),
        labels(&[("zone", "eu"), ("gpu", "a100")]),
        labels(&[("gpu", "a"), ("gpu", "b")]),
        vec![("k".repeat(64), "v".into())],
        vec![("k".into(), "v".repeat(64))],
        (0..17).map(|n| (format!("k{n:02}"), "v".into())).collect(),
    ];
    for labels in bad {
        assert!(check_labels(&labels).is_err(), "{labels:?} is refused");
    }
    let gpu = Needs::of(&labels(&[("gpu", "a100")]), Some(GIB)).unwrap();
    assert!(gpu.fit(&pool(&[("gpu", "a100"), ("zone", "eu")], Some(2 * GIB))));
    assert!(
        gpu.fit(&pool(&[("gpu", "a100")], None)),
        "memory not said fits any"
    );
    assert!(!gpu.fit(&pool(&[("gpu", "h100")], None)));
    assert!(!gpu.fit(&pool(&[("gpu", "a100")], Some(GIB - 1))));
    assert!(!gpu.fit(&WorkerPool::default()));
    assert_eq!(
        Needs::of(&[], None),
        None,
        "a job asking nothing has no needs"
    );
}

#[test]
fn a_job_starts_only_on_a_worker_with_its_labels_and_memory() {
    let mut run = Run::default();
    let plain = pool(&[], Some(GIB));
    let gpu = pool(&[("gpu", "a100")], Some(8 * GIB));
    let on_gpu = run.job(T, &[("gpu", "a100")], None);
    let big = run.job(T, &[], Some(4 * GIB));
    let any = run.job(T, &[], None);
    // The plain worker takes only the job that asks nothing, though the
    // others are ahead of it in line.
    assert_eq!(run.poll(T + 1, "plain", 8, &plain), [any]);
    assert_eq!(run.poll(T + 2, "plain", 8, &plain), Vec::<JobId>::new());
    // The GPU worker has the label and the memory: it takes both, in line.
    assert_eq!(run.poll(T + 3, "gpu", 8, &gpu), [on_gpu, big]);
    let views = [on_gpu, big, any].map(|id| run.view(id));
    assert!(
        views
            .iter()
            .all(|view| view.state == JobState::Running && !view.unplaceable)
    );
    assert_eq!(views[0].options.labels, labels(&[("gpu", "a100")]));
}

#[test]
fn a_job_no_worker_can_run_is_counted_and_runs_when_one_joins() {
    let mut run = Run::default();
    let plain = pool(&[("zone", "eu")], Some(GIB));
    run.poll(T, "plain", 0, &plain);
    let ids: Vec<JobId> = (0..3)
        .map(|_| run.job(T, &[("gpu", "a100")], None))
        .collect();
    let huge = run.job(T, &[], Some(64 * GIB));
    let any = run.job(T, &[], None);
    assert!(run.view(ids[0]).unplaceable && run.view(huge).unplaceable);
    assert!(!run.view(any).unplaceable);
    assert_eq!(run.master.stats().unplaceable, 4);
    // They wait without holding up what the worker can run.
    assert_eq!(run.poll(T + 1, "plain", 1, &plain), [any]);
    // A worker with the label joins: the labelled jobs are placeable,
    // and start on it in line; the huge one still waits.
    let gpu = pool(&[("gpu", "a100"), ("zone", "eu")], Some(16 * GIB));
    assert_eq!(run.poll(T + 2, "gpu", 8, &gpu), ids);
    assert_eq!(run.master.stats().unplaceable, 1);
    assert!(run.view(huge).unplaceable && !run.view(ids[0]).unplaceable);
    // The worker is lost: its attempts go back to the line, where no
    // known worker can run them.
    run.run(
        T + 3,
        Command::WorkerGone {
            worker: "gpu".into(),
        },
    )
    .unwrap();
    assert!(
        !run.master.pools.contains_key("gpu"),
        "forgotten with the worker"
    );
    assert_eq!(
        run.master.stats().unplaceable,
        1,
        "backing off, not in line"
    );
    let view = run.view(ids[0]);
    assert_eq!((view.state, view.unplaceable), (JobState::Queued, false));
    // Once their backoff ends they are in line again, unplaceable.
    let later = T + 3 + run.master.config.backoff_max_ms + 1;
    run.run(later, Command::Tick).unwrap();
    assert_eq!(run.master.stats().unplaceable, 4);
    assert!(run.view(ids[0]).unplaceable);
}

#[test]
fn a_flood_for_one_pool_does_not_hold_up_another() {
    let mut run = Run::default();
    let gpu_only: Vec<JobId> = (0..500)
        .map(|_| run.job(T, &[("gpu", "a100")], None))
        .collect();
    let plain = run.job(T, &[], None);
    let plain_pool = pool(&[], None);
    assert_eq!(run.poll(T + 1, "cpu", 1, &plain_pool), [plain]);
    // The flood is one line; a poll that fits no needs never walks it.
    assert_eq!(run.master.index.lines.len(), 1);
    assert_eq!(run.master.index.needs_of.len(), gpu_only.len());
    assert!(run.master.index.ready.is_empty());
}

#[test]
fn a_key_line_spans_pools_and_waits_for_a_fitting_poll() {
    let mut run = Run::default();
    let limit = limited("k", Some(1), None);
    let first = run.job_with(T, &[("gpu", "a100")], None, limit.clone());
    let second = run.job_with(T, &[], None, limit);
    let plain = pool(&[], None);
    let gpu = pool(&[("gpu", "a100")], None);
    // The key's first job needs a GPU: the plain worker cannot run it,
    // and the key's next job waits behind it in the key's line.
    assert_eq!(run.poll(T + 1, "cpu", 4, &plain), Vec::<JobId>::new());
    assert_eq!(run.poll(T + 2, "gpu", 4, &gpu), [first]);
    // The key is at its limit until the first ends.
    assert_eq!(run.poll(T + 3, "cpu", 4, &plain), Vec::<JobId>::new());
    run.run(
        T + 4,
        crate::scenarios::finish(first, 1, "gpu", Outcome::Succeeded(vec![])),
    )
    .unwrap();
    assert_eq!(run.poll(T + 5, "cpu", 4, &plain), [second]);
}

#[test]
fn pools_are_journaled_once_per_change_and_kept_by_snapshots() {
    let mut run = Run::default();
    let gpu = pool(&[("gpu", "a100")], Some(8 * GIB));
    let count = |run: &Run| {
        (run.events.iter())
            .filter(|event| matches!(event.kind, EventKind::WorkerPool { .. }))
            .count()
    };
    run.poll(T, "w1", 0, &gpu);
    run.poll(T + 1, "w1", 0, &gpu);
    run.poll(T + 2, "w2", 0, &WorkerPool::default());
    assert_eq!(count(&run), 1, "said once, and the default never");
    run.poll(T + 3, "w1", 0, &pool(&[("gpu", "h100")], Some(8 * GIB)));
    assert_eq!(count(&run), 2);
    run.job(T + 4, &[("gpu", "h100")], Some(GIB));
    run.job(T + 4, &[("gpu", "a100")], None);
    let master = &run.master;
    let workers = master.workers_view();
    assert_eq!(workers[0].pool, pool(&[("gpu", "h100")], Some(8 * GIB)));
    let snapshot = master.snapshot();
    assert_eq!(snapshot[0], crate::master::SNAPSHOT_VERSION);
    assert_eq!(&Master::restore(&snapshot).unwrap(), master);
    assert_eq!(&restore_in_parts(&snapshot, 7).unwrap(), master);
    let mut replayed = Master::new();
    for event in &run.events {
        replayed.apply(event);
    }
    assert_eq!(&replayed, master);
    assert_eq!(replayed.stats().unplaceable, 1);
    // A snapshot of version 11 knows of no pools or labels.
    let old = Master::restore(&master.snapshot_v11()).unwrap();
    assert_eq!(old, master.before_pools());
    assert_eq!(old.stats().unplaceable, 0);
}

#[test]
fn a_hostile_journal_cannot_plant_unchecked_labels_or_a_pool_without_a_worker() {
    let mut master = Master::new();
    let said = |worker: &str, pool: WorkerPool| Event {
        at: T,
        kind: EventKind::WorkerPool {
            worker: worker.into(),
            pool,
        },
    };
    master.apply(&said("ghost", pool(&[("gpu", "a100")], None)));
    assert!(master.pools.is_empty(), "no pool for a worker never seen");
    master.apply(&Event {
        at: T,
        kind: EventKind::WorkerSeen {
            worker: "w".into(),
            slots: 1,
        },
    });
    let bad = pool(&[("zone", "eu"), ("gpu", "a100")], Some(GIB));
    master.apply(&said("w", bad));
    let unsorted_dropped = pool(&[], Some(GIB));
    assert_eq!(master.pool_of("w"), &unsorted_dropped);
    assert_eq!(Master::restore(&master.snapshot()).unwrap(), master);
}

#[test]
fn bad_labels_and_bad_pools_are_refused() {
    let mut run = Run::default();
    let options = JobOptions {
        labels: labels(&[("GPU", "a100")]),
        ..JobOptions::default()
    };
    let refused = run
        .run(T, submit_with(1, spec(1, b"x"), options))
        .unwrap_err();
    assert_eq!(refused.code, codes::INVALID_JOB);
    assert!(refused.message.contains("label key"), "{}", refused.message);
    let poll = Command::Poll {
        worker: "w".into(),
        slots: 1,
        free: 1,
        holds: Vec::new(),
        pool: pool(&[("b", "1"), ("a", "1")], None),
    };
    assert_eq!(run.run(T, poll).unwrap_err().code, codes::INVALID_JOB);
    assert!(run.events.is_empty(), "nothing journaled");
    run.run(T, submit(2, spec(1, b"x"))).unwrap();
}

#[test]
fn events_of_format_11_decode_with_no_labels_and_never_hold_a_pool() {
    let submitted = Event {
        at: T,
        kind: EventKind::Submitted {
            id: 1,
            spec: spec(1, b"x"),
            request: None,
            options: limited("k", Some(1), None),
        },
    };
    let old = crate::protocol::legacy::written_before_labels(|| encode(&submitted));
    let old = [&[FORMAT_VERSION_11][..], &old[1..]].concat();
    assert_eq!(decode_event(&old), Ok(submitted.clone()));
    assert_ne!(
        old[1..],
        encode(&submitted)[1..],
        "format 12 writes the labels"
    );
    let said = Event {
        at: T,
        kind: EventKind::WorkerPool {
            worker: "w".into(),
            pool: WorkerPool::default(),
        },
    };
    let old = [&[FORMAT_VERSION_11][..], &encode(&said)[1..]].concat();
    assert_eq!(decode_event(&old).unwrap_err().code, codes::UNDECODABLE);
    assert_eq!(decode_event(&encode(&said)), Ok(said));
}

/// Labels a generated job asks for or a generated worker has: from a
/// small alphabet, so that some match.
fn some_labels() -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::btree_map(
        prop_oneof![Just("gpu"), Just("zone")].prop_map(str::to_owned),
        prop_oneof![Just("a"), Just("b")].prop_map(str::to_owned),
        0..=2,
    )
    .prop_map(|map| map.into_iter().collect())
}

#[derive(Debug, Clone)]
enum Step {
    Submit {
        labels: Vec<(String, String)>,
        memory: Option<u64>,
        priority: i32,
        key: bool,
    },
    Poll {
        worker: usize,
        free: u32,
    },
    Finish {
        worker: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (some_labels(), prop::option::of(1u64..4), -1i32..2, prop::bool::weighted(0.2))
            .prop_map(|(labels, memory, priority, key)| Step::Submit {
                labels,
                memory: memory.map(|m| m * GIB),
                priority,
                key,
            }),
        2 => (0usize..3, 0u32..4).prop_map(|(worker, free)| Step::Poll { worker, free }),
        1 => (0usize..3).prop_map(|worker| Step::Finish { worker }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every poll starts only jobs its pool fits, takes them in line
    /// among those it may run, and leaves none it could have taken.
    #[test]
    fn every_poll_takes_the_first_jobs_in_line_that_fit_it(
        pools in proptest::collection::vec((some_labels(), prop::option::of(1u64..4)), 3),
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        let pools: Vec<WorkerPool> = (pools.into_iter())
            .map(|(labels, memory)| WorkerPool { labels, memory_max: memory.map(|m| m * GIB) })
            .collect();
        let mut run = Run::default();
        let mut now = T;
        for step in steps {
            now += 1;
            match step {
                Step::Submit { labels, memory, priority, key } => {
                    run.seq += 1;
                    let spec = JobSpec { memory_bytes: memory, priority, ..spec(1, b"x") };
                    let options = JobOptions {
                        labels,
                        ..if key { limited("k", Some(2), None) } else { JobOptions::default() }
                    };
                    run.run(now, submit_with(run.seq, spec, options)).unwrap();
                }
                Step::Poll { worker, free } => {
                    let pool = &pools[worker];
                    let name = format!("w{worker}");
                    // What the line says this poll should take: the first
                    // queued, runnable jobs in order whose needs fit,
                    // with the key's limit and line counted.
                    let before = run.master.clone();
                    let taken = run.poll(now, &name, free, pool);
                    let mut expected = Vec::new();
                    let mut line: Vec<(i64, u64, JobId)> = (before.jobs.iter())
                        .filter(|(_, job)| job.state == JobState::Queued && job.not_before.is_none())
                        .map(|(&id, job)| crate::index::ready_key(before.order, job, id))
                        .collect();
                    line.sort();
                    let mut key_running = before.index.key_running.get("k").copied().unwrap_or(0);
                    let mut key_blocked = false;
                    for (_, _, id) in line {
                        if expected.len() == free as usize {
                            break;
                        }
                        let keyed = before.keyed.key(id).is_some();
                        let fits = before.needs_of(id).is_none_or(|needs| needs.fit(pool));
                        if keyed {
                            // A key's line moves in order: its first job
                            // that does not fit holds the rest back.
                            if key_blocked || key_running >= 2 {
                                continue;
                            }
                            if !fits {
                                key_blocked = true;
                                continue;
                            }
                            key_running += 1;
                        } else if !fits {
                            continue;
                        }
                        expected.push(id);
                    }
                    prop_assert_eq!(taken, expected);
                }
                Step::Finish { worker } => {
                    let name = format!("w{worker}");
                    let running = run.master.workers.get(&name).and_then(|w| w.running.first().copied());
                    if let Some(id) = running {
                        let finish = crate::scenarios::finish(id, 1, &name, Outcome::Succeeded(vec![]));
                        run.run(now, finish).unwrap();
                    }
                }
            }
            // The count of unplaceable jobs is what the views say.
            let unplaceable = (run.master.jobs.keys()).filter(|&&id| run.master.unplaceable(id)).count();
            let in_line = (run.master.jobs.iter())
                .filter(|(id, job)| job.state == JobState::Queued && job.not_before.is_none() && run.master.unplaceable(**id))
                .count();
            prop_assert_eq!(unplaceable, in_line);
            prop_assert_eq!(run.master.stats().unplaceable, in_line as u64);
        }
        let mut replayed = Master::new();
        for event in &run.events {
            replayed.apply(event);
        }
        prop_assert_eq!(&replayed, &run.master);
        prop_assert_eq!(&Master::restore(&run.master.snapshot()).unwrap(), &run.master);
    }
}
