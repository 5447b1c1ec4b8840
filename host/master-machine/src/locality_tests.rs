//! Locality: a job waits, for at most `locality_wait_ms`, for a free
//! worker that holds its input; what workers hold is journaled once per
//! change, bounded however it is decoded, forgotten with the worker and
//! kept by snapshots; and a seeded simulation checks on every poll that
//! no job waits past the bound.

use proptest::prelude::*;

use super::*;
use crate::limits::{HOLDS_MAX, LOCALITY_SCAN_MAX};
use crate::scenarios::{blob, finish, spec, submit, submit_with};
use crate::testing::{decide_and_apply, restore_in_parts};

const T: Millis = 1_000_000;

/// A master driven as the host drives it, with its journal.
struct Run {
    master: Master,
    events: Vec<Event>,
}

impl Run {
    fn new() -> Self {
        Self {
            master: Master::new(),
            events: Vec::new(),
        }
    }

    fn run(&mut self, now: Millis, command: Command) -> Result<Vec<Event>, Rejection> {
        decide_and_apply(&mut self.master, &mut self.events, now, &command)
    }

    fn ok(&mut self, now: Millis, command: Command) -> Vec<Event> {
        self.run(now, command).expect("accepted")
    }

    /// The jobs a poll by `worker` holding blobs `held` (by digest byte)
    /// starts, in order.
    fn poll(&mut self, now: Millis, worker: &str, free: u32, held: &[u8]) -> Vec<JobId> {
        (self.ok(now, poll_holding(worker, 4, free, held)).iter())
            .filter_map(|event| match event.kind {
                EventKind::Assigned { id, .. } => Some(id),
                _ => None,
            })
            .collect()
    }

    /// Submits a job reading blob `[n; 32]` (kept first), or none.
    fn job(&mut self, now: Millis, seq: u64, n: Option<u8>) {
        if let Some(n) = n
            && !self.master.registry.keeps(&[n; 32])
        {
            self.ok(now, Command::KeepBlob { blob: blob(n, 10) });
        }
        let options = JobOptions {
            input_blob: n.map(|n| blob(n, 10)),
            ..JobOptions::default()
        };
        self.ok(now, submit_with(seq, spec(1, b"x"), options));
    }

    fn configure(&mut self, now: Millis, wait_ms: u64) {
        let config = Config {
            locality_wait_ms: wait_ms,
            ..Config::default()
        };
        self.ok(now, Command::Configure(config));
    }
}

fn poll_holding(worker: &str, slots: u32, free: u32, held: &[u8]) -> Command {
    let digests: Vec<Digest> = held.iter().map(|&n| [n; 32]).collect();
    Command::Poll {
        worker: worker.into(),
        slots,
        free,
        holds: holds_of(&digests),
        pool: WorkerPool::default(),
    }
}

#[test]
fn prefixes_come_from_the_digest_and_are_sorted_distinct_and_bounded() {
    let mut digest = [0u8; 32];
    digest[..8].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(prefix(&digest), [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(holds_of(&[[9; 32], [3; 32], [9; 32]]), vec![[3; 8], [9; 8]]);
    let many: Vec<Digest> = (0..HOLDS_MAX as u32 + 10)
        .map(|n| {
            let mut digest = [0; 32];
            digest[..4].copy_from_slice(&n.to_be_bytes());
            digest
        })
        .collect();
    let holds = holds_of(&many);
    assert_eq!(holds.len(), HOLDS_MAX, "the first ones given");
    assert!(names(&holds, &many[0]) && !names(&holds, &many[HOLDS_MAX]));
}

#[test]
fn a_job_waits_for_the_free_holder_then_goes_anywhere() {
    let mut run = Run::new();
    run.poll(T, "w2", 0, &[7]);
    run.poll(T, "w1", 0, &[]);
    run.job(T, 1, Some(7));
    run.job(T, 2, None);
    // w1 does not hold blob 7 and w2, which does, has free slots.
    assert_eq!(run.poll(T + 1, "w1", 4, &[]), [2]);
    assert_eq!(run.poll(T + 999, "w1", 4, &[]), Vec::<JobId>::new());
    // The wait is over: any worker takes it.
    assert_eq!(run.poll(T + 1_000, "w1", 4, &[]), [1]);
    let stats = run.master.stats();
    assert_eq!((stats.input_assignments, stats.local_assignments), (1, 0));
}

#[test]
fn the_holder_takes_its_job_ahead_of_those_passed_over_and_it_counts() {
    let mut run = Run::new();
    run.poll(T, "w1", 0, &[8]);
    run.poll(T, "w2", 0, &[7]);
    run.job(T, 1, Some(8));
    run.job(T, 2, Some(7));
    // w2 passes job 1 over (w1 holds it) and takes its own.
    assert_eq!(run.poll(T + 1, "w2", 1, &[7]), [2]);
    assert_eq!(run.poll(T + 2, "w1", 1, &[8]), [1]);
    let stats = run.master.stats();
    assert_eq!((stats.input_assignments, stats.local_assignments), (2, 2));
}

#[test]
fn nothing_waits_with_no_wait_configured_or_no_live_holder() {
    let mut run = Run::new();
    run.configure(T, 0);
    run.poll(T, "w2", 0, &[7]);
    run.job(T, 1, Some(7));
    assert_eq!(run.poll(T + 1, "w1", 4, &[]), [1]);
    // Waiting again: for the holder even while its slots are all busy,
    // until the wait is over.
    run.configure(T + 1, 1_000);
    run.job(T + 1, 2, Some(7));
    run.job(T + 1, 3, Some(7));
    let busy = run.ok(T + 1, poll_holding("w2", 1, 1, &[7]));
    assert!(matches!(
        busy.last().unwrap().kind,
        EventKind::Assigned { id: 2, .. }
    ));
    assert_eq!(run.poll(T + 2, "w1", 4, &[]), Vec::<JobId>::new());
    assert_eq!(run.poll(T + 1_001, "w1", 4, &[]), [3]);
    // A holder not heard from for a worker TTL is not waited for either.
    let mut run = Run::new();
    run.poll(T, "w2", 0, &[7]);
    let ttl = run.master.config().worker_ttl_ms;
    run.poll(T + ttl - 1_000, "w1", 0, &[]);
    run.job(T + ttl - 1_000, 1, Some(7));
    assert_eq!(run.poll(T + ttl, "w1", 4, &[]), [1]);
}

#[test]
fn a_held_job_goes_ahead_of_those_passed_over_only_within_the_scan() {
    for (ahead, reached) in [(LOCALITY_SCAN_MAX - 1, true), (LOCALITY_SCAN_MAX, false)] {
        let mut run = Run::new();
        run.poll(T, "w2", 0, &[7]);
        for seq in 0..ahead as u64 {
            run.job(T, seq + 1, Some(7));
        }
        run.job(T, ahead as u64 + 1, Some(8));
        let started = run.poll(T + 1, "w1", 1, &[8]);
        assert_eq!(!started.is_empty(), reached, "{ahead} jobs ahead");
    }
}

#[test]
fn a_dag_child_goes_where_its_parents_largest_output_is() {
    use crate::scenarios::{dag_node, named_blob, submit_dag, wrote};
    let mut run = Run::new();
    run.poll(T, "w1", 0, &[]);
    run.poll(T, "w2", 0, &[]);
    let child = dag_node("c", vec![DagRef::Node(0), DagRef::Node(1)]);
    let mut blind = dag_node("d", vec![DagRef::Node(0), DagRef::Node(1)]);
    blind.outputs = false;
    let dag = vec![dag_node("a", vec![]), dag_node("b", vec![]), child, blind];
    run.ok(T, submit_dag(1, dag, OnFailure::SkipDescendants));
    assert_eq!(run.poll(T + 1, "w1", 1, &[]), [1]);
    assert_eq!(run.poll(T + 1, "w2", 1, &[]), [2]);
    let big = wrote(b"a", vec![named_blob("big", 5, 500)]);
    run.ok(T + 2, finish(1, 1, "w1", big));
    let small = wrote(b"b", vec![named_blob("small", 6, 50)]);
    run.ok(T + 2, finish(2, 1, "w2", small));
    // w1's next poll says it holds what it wrote, before it has room.
    run.poll(T + 2, "w1", 0, &[5]);
    // `c` reads both outputs and waits for w1, which wrote the larger;
    // `d` reads neither and goes anywhere.
    assert_eq!(run.poll(T + 3, "w2", 4, &[6]), [4]);
    let restored = Master::restore(&run.master.snapshot()).unwrap();
    assert_eq!(restored, run.master, "the wait survives a snapshot");
    assert_eq!(run.poll(T + 4, "w1", 4, &[5]), [3]);
    let stats = run.master.stats();
    assert_eq!((stats.input_assignments, stats.local_assignments), (1, 1));
}

#[test]
fn priorities_still_order_the_line_for_the_holder() {
    let mut run = Run::new();
    run.poll(T, "w2", 0, &[7]);
    run.job(T, 1, Some(7));
    let mut urgent = spec(1, b"u");
    urgent.priority = 5;
    run.ok(T, submit(2, urgent));
    run.job(T, 3, Some(7));
    assert_eq!(run.poll(T + 1, "w2", 2, &[7]), [2, 1]);
}

#[test]
fn what_workers_hold_is_journaled_per_change_and_forgotten_with_them() {
    let mut run = Run::new();
    let holds = |events: &[Event]| {
        (events.iter())
            .filter(|event| matches!(event.kind, EventKind::WorkerHolds { .. }))
            .count()
    };
    assert_eq!(holds(&run.ok(T, poll_holding("w", 4, 0, &[7, 8]))), 1);
    assert_eq!(holds(&run.ok(T, poll_holding("w", 4, 0, &[8, 7]))), 0);
    assert_eq!(holds(&run.ok(T, poll_holding("w", 4, 0, &[7]))), 1);
    assert_eq!(run.master.locality.holds["w"], vec![[7; 8]]);
    run.ok(T, Command::WorkerGone { worker: "w".into() });
    assert!(run.master.locality.holds.is_empty());
    // More than a poll may say is refused, changing nothing.
    let too_many = Command::Poll {
        worker: "w".into(),
        slots: 1,
        free: 1,
        holds: vec![[0; 8]; HOLDS_MAX + 1],
        pool: WorkerPool::default(),
    };
    let before = run.master.clone();
    let refused = run.run(T, too_many).unwrap_err();
    assert_eq!(
        (refused.code, run.master == before),
        (codes::INVALID_JOB, true)
    );
}

#[test]
fn a_journal_s_holds_are_bounded_and_only_a_known_worker_s_are_kept() {
    let mut master = Master::new();
    let hostile = |worker: &str| Event {
        at: T,
        kind: EventKind::WorkerHolds {
            worker: worker.into(),
            holds: (0..HOLDS_MAX as u16 + 5)
                .rev()
                .flat_map(|n| [[n as u8, (n >> 8) as u8, 0, 0, 0, 0, 0, 0]; 2])
                .collect(),
        },
    };
    master.apply(&hostile("nobody"));
    assert!(master.locality.holds.is_empty());
    master.apply(&Event {
        at: T,
        kind: EventKind::WorkerSeen {
            worker: "w".into(),
            slots: 1,
        },
    });
    master.apply(&hostile("w"));
    let kept = &master.locality.holds["w"];
    assert_eq!(kept.len(), HOLDS_MAX);
    assert!(kept.windows(2).all(|pair| pair[0] < pair[1]));
}

#[test]
fn a_snapshot_and_a_replay_keep_what_workers_hold_and_the_waits() {
    let mut run = Run::new();
    run.configure(T, 2_000);
    run.poll(T, "w2", 0, &[7, 9]);
    run.poll(T, "w1", 0, &[8]);
    run.job(T, 1, Some(7));
    run.job(T + 5, 2, Some(8));
    run.job(T + 5, 3, Some(9));
    assert_eq!(run.poll(T + 6, "w1", 1, &[8]), [2]);
    run.ok(
        T + 7,
        finish(2, 1, "w1", Outcome::Succeeded(b"ok".to_vec())),
    );
    let master = &run.master;
    assert_eq!(master.locality.ready_at.len(), 2);
    let snapshot = master.snapshot();
    assert_eq!(snapshot[0], crate::master::SNAPSHOT_VERSION);
    let restored = Master::restore(&snapshot).unwrap();
    assert_eq!(&restored, master);
    assert_eq!(restore_in_parts(&snapshot, 5).unwrap(), *master);
    let mut replayed = Master::new();
    for event in &run.events {
        replayed.apply(event);
    }
    assert_eq!(&replayed, master);
    // The restored master waits exactly as long.
    let mut again = Run {
        master: restored,
        events: Vec::new(),
    };
    assert_eq!(again.poll(T + 1_999, "w1", 4, &[8]), Vec::<JobId>::new());
    assert_eq!(again.poll(T + 2_000, "w1", 4, &[8]), [1]);
    // An older snapshot knows of no locality and waits for none.
    let old = Master::restore(&master.snapshot_v10()).unwrap();
    assert_eq!(old, master.before_locality());
}

#[test]
fn events_of_format_9_decode_with_no_wait_and_never_hold_what_workers_hold() {
    let configured = Event {
        at: T,
        kind: EventKind::Configured(Config {
            locality_wait_ms: 0,
            ..Config::default()
        }),
    };
    let now = encode(&configured);
    // Format 9 wrote the configuration without its last field (0 here).
    assert_eq!(now.last(), Some(&0));
    let old = [&[FORMAT_VERSION_9][..], &now[1..now.len() - 1]].concat();
    assert_eq!(decode_event(&old), Ok(configured));
    let holds = Event {
        at: T,
        kind: EventKind::WorkerHolds {
            worker: "w".into(),
            holds: vec![[1; 8]],
        },
    };
    let old = [&[FORMAT_VERSION_9][..], &encode(&holds)[1..]].concat();
    assert_eq!(decode_event(&old).unwrap_err().code, codes::UNDECODABLE);
}

/// One step of the simulation.
#[derive(Debug, Clone)]
enum Step {
    /// Time passes.
    Wait(Millis),
    /// A job reading blob `[n; 32]` (`None`: no blob) with a priority.
    Submit(Option<u8>, i32),
    /// Worker `w` polls, asking for its free slots and this many more
    /// (prefetch).
    Poll(usize, u32),
    /// Worker `w` finishes its oldest attempt.
    Finish(usize),
    /// Worker `w`'s node now holds these blobs.
    Hold(usize, Vec<u8>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..700u64).prop_map(Step::Wait),
        3 => (proptest::option::of(0..4u8), 0..3i32).prop_map(|(n, p)| Step::Submit(n, p)),
        5 => (0..3usize, prop_oneof![3 => Just(0u32), 1 => 1..4u32])
            .prop_map(|(w, extra)| Step::Poll(w, extra)),
        3 => (0..3usize).prop_map(Step::Finish),
        1 => (0..3usize, proptest::collection::vec(0..4u8, 0..3))
            .prop_map(|(w, held)| Step::Hold(w, held)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Every poll takes, in line order, each startable job it may not pass
    /// over (no input blob, held by the poller, or in line for
    /// `locality_wait_ms` already) while it has room, and never one behind
    /// it; one that no other live worker holds, while its free slots (not
    /// its prefetch room) last; a job passed over is younger than the
    /// wait. So a job is started at the latest by the first poll with room
    /// for it after its wait. Replay and snapshots agree throughout.
    #[test]
    fn no_job_waits_past_the_bound(
        wait in prop_oneof![Just(0u64), Just(500), Just(1_000)],
        slots in proptest::collection::vec(1..3u32, 3),
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        let mut run = Run::new();
        run.configure(T, wait);
        let names = ["w0", "w1", "w2"];
        let mut held: Vec<Vec<u8>> = vec![vec![0], vec![1, 2], vec![]];
        let mut now = T;
        let mut seq = 0;
        for step in steps {
            match step {
                Step::Wait(ms) => now += ms,
                Step::Submit(n, priority) => {
                    seq += 1;
                    if let Some(n) = n
                        && !run.master.registry.keeps(&[n; 32])
                    {
                        run.ok(now, Command::KeepBlob { blob: blob(n, 10) });
                    }
                    let mut job = spec(1, b"x");
                    job.priority = priority;
                    let options = JobOptions {
                        input_blob: n.map(|n| blob(n, 10)),
                        ..JobOptions::default()
                    };
                    run.ok(now, submit_with(seq, job, options));
                }
                Step::Hold(w, blobs) => held[w] = blobs,
                Step::Finish(w) => {
                    let oldest = (run.master.workers.get(names[w]))
                        .and_then(|state| state.running.first().copied());
                    if let Some(id) = oldest {
                        let attempt = run.master.jobs[&id].attempts.len() as u32;
                        let ok = Outcome::Succeeded(Vec::new());
                        run.ok(now, finish(id, attempt, names[w], ok));
                    }
                }
                Step::Poll(w, extra) => {
                    let running = (run.master.workers.get(names[w]))
                        .map_or(0, |state| state.running.len() as u32);
                    let in_slots = slots[w].saturating_sub(running) as usize;
                    let free = in_slots as u32 + extra;
                    let holds = poll_holding(names[w], slots[w], free, &held[w]);
                    let Command::Poll { holds: said, .. } = &holds else { unreachable!() };
                    // What the poll finds, with the holds it brings.
                    let mut before = run.master.clone();
                    if let Some(kind) = before.worker_holds(names[w], said) {
                        before.apply(&Event { at: now, kind });
                    }
                    let line = before.startable(now, LOCALITY_SCAN_MAX.max(free as usize), &WorkerPool::default());
                    let started: Vec<JobId> = (run.ok(now, holds).iter())
                        .filter_map(|event| match event.kind {
                            EventKind::Assigned { id, .. } => Some(id),
                            _ => None,
                        })
                        .collect();
                    prop_assert!(started.len() <= free as usize);
                    // Started in line order, from the line.
                    let places: Vec<usize> = (started.iter())
                        .map(|id| line.iter().position(|l| l == id).expect("from the line"))
                        .collect();
                    prop_assert!(places.windows(2).all(|p| p[0] < p[1]));
                    let last = places.last().copied();
                    for (place, id) in line.iter().enumerate() {
                        if started.contains(id) {
                            continue;
                        }
                        let input = before.input_blob_of(*id).map(|b| b.digest);
                        let ready_at = before.locality.ready_at.get(id).copied();
                        let overdue = ready_at.is_none_or(|at| now >= at + wait);
                        let mine = input.is_some_and(|d| names_any(&before, names[w], &d));
                        let alone = before.workers.iter().all(|(other, _)| other == names[w])
                            || !before.workers.iter().any(|(other, state)| {
                                other != names[w]
                                    && now < state.last_seen + before.config().worker_ttl_ms
                            });
                        if input.is_none() || overdue || mine || wait == 0 || alone {
                            // It may not be passed over: only a full poll
                            // leaves it, with everything started ahead.
                            prop_assert_eq!(started.len(), free as usize, "job {} left", id);
                            prop_assert!(last.is_none_or(|last| last < place));
                        } else if !held_by_other(&before, names[w], now, &input.unwrap()) {
                            // Taken into a free slot while there is one.
                            let ahead = places.iter().filter(|&&p| p < place).count();
                            prop_assert!(
                                started.len() == free as usize || ahead >= in_slots,
                                "job {} left with {} of {} slots taken", id, ahead, in_slots
                            );
                        }
                    }
                }
            }
        }
        let restored = Master::restore(&run.master.snapshot()).unwrap();
        prop_assert_eq!(&restored, &run.master);
        let mut replayed = Master::new();
        for event in &run.events {
            replayed.apply(event);
        }
        prop_assert_eq!(&replayed, &run.master);
    }
}

/// Whether a live worker other than `worker` said it holds blob `digest`.
fn held_by_other(master: &Master, worker: &str, now: Millis, digest: &Digest) -> bool {
    let ttl = master.config().worker_ttl_ms;
    (master.workers.iter()).any(|(other, state)| {
        other != worker && now < state.last_seen + ttl && names_any(master, other, digest)
    })
}

/// Whether `worker` said it holds blob `digest`.
fn names_any(master: &Master, worker: &str, digest: &Digest) -> bool {
    (master.locality.holds.get(worker)).is_some_and(|holds| names(holds, digest))
}

/// A cluster the way the bench runs it (`cargo bench --bench node --
/// locality`), simulated: three workers of two slots that ask for more
/// attempts than they have slots while jobs are short (prefetch), each
/// with a cache of three blobs (least recently used out, a running
/// attempt's input kept), and 240 jobs reading one of nine blobs. Each
/// attempt finds its input in the cache or fetches it (which takes longer
/// than the run). The share of inputs found in the cache, with the
/// default wait and without one.
fn simulated_local_share(wait_ms: u64) -> f64 {
    const WORKERS: usize = 3;
    const SLOTS: usize = 2;
    const CACHE: usize = 3;
    const BLOBS: u64 = 9;
    const JOBS: u64 = 240;
    const RUN_MS: Millis = 3;
    const FETCH_MS: Millis = 12;
    /// Attempts a worker asks for beyond its slots.
    const PREFETCH: usize = 2 * SLOTS;

    #[derive(Default)]
    struct Worker {
        /// Least recently used first.
        cache: Vec<u8>,
        /// Assigned, waiting for a slot.
        waiting: std::collections::VecDeque<JobId>,
        /// Running: the job, its input and when it ends.
        running: Vec<(JobId, u8, Millis)>,
    }
    let mut run = Run::new();
    run.configure(T, wait_ms);
    let names = ["w0", "w1", "w2"];
    let mut workers: Vec<Worker> = (0..WORKERS).map(|_| Worker::default()).collect();
    for name in names {
        run.poll(T, name, 0, &[]);
    }
    let mut input = BTreeMap::new();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for seq in 1..=JOBS {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let n = (state % BLOBS) as u8;
        run.job(T, seq, Some(n));
        input.insert(seq, n);
    }
    let (mut local, mut fetched, mut done) = (0u64, 0u64, 0u64);
    let mut now = T;
    while done < JOBS {
        now += 1;
        assert!(now < T + 600_000, "the simulated jobs did not finish");
        for (w, worker) in workers.iter_mut().enumerate() {
            let ended: Vec<JobId> = (worker.running.iter())
                .filter(|(_, _, at)| *at <= now)
                .map(|(id, _, _)| *id)
                .collect();
            for id in ended {
                worker.running.retain(|(job, _, _)| *job != id);
                let attempt = run.master.jobs[&id].attempts.len() as u32;
                run.ok(
                    now,
                    finish(id, attempt, names[w], Outcome::Succeeded(Vec::new())),
                );
                done += 1;
            }
            while worker.running.len() < SLOTS {
                let Some(id) = worker.waiting.pop_front() else {
                    break;
                };
                let n = input[&id];
                let ends = match worker.cache.iter().position(|&held| held == n) {
                    Some(at) => {
                        local += 1;
                        worker.cache.remove(at);
                        now + RUN_MS
                    }
                    None => {
                        fetched += 1;
                        now + FETCH_MS + RUN_MS
                    }
                };
                worker.cache.push(n);
                worker.running.push((id, n, ends));
                // Evict the least recently used blobs no attempt reads.
                while worker.cache.len() > CACHE {
                    let pinned = |held: u8| worker.running.iter().any(|(_, n, _)| *n == held);
                    match worker.cache.iter().position(|&held| !pinned(held)) {
                        Some(at) => drop(worker.cache.remove(at)),
                        None => break,
                    }
                }
            }
            let in_hand = worker.waiting.len() + worker.running.len();
            let free = (SLOTS + PREFETCH).saturating_sub(in_hand) as u32;
            let holds = worker.cache.clone();
            let poll = poll_holding(names[w], SLOTS as u32, free, &holds);
            for event in run.ok(now, poll) {
                if let EventKind::Assigned { id, .. } = event.kind {
                    worker.waiting.push_back(id);
                }
            }
        }
    }
    local as f64 / (local + fetched) as f64
}

#[test]
fn with_a_wait_more_inputs_are_found_where_the_job_runs() {
    let (with, without) = (simulated_local_share(1_000), simulated_local_share(0));
    eprintln!("local share: {with:.3} with the wait, {without:.3} without");
    assert!(
        with > without + 0.2,
        "{with:.3} with the wait, {without:.3} without"
    );
}
