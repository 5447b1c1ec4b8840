//! Fair shares: namespaces that compete get CPU in proportion to their
//! weights whatever their jobs cost and whoever came first; an idle
//! namespace keeps no credit; a namespace alone takes every slot;
//! priorities order jobs within a namespace; the shares go through the
//! journal and snapshots, so a restored master hands out slots as the
//! one before would have; bad weights are `invalid_weight`.

use super::*;
use crate::namespaces::DEFAULT;
use crate::steps::{finish, poll, spec, submit_with};
use crate::testing::{assert_journal_and_snapshot_agree, decide_and_apply};
use std::collections::BTreeMap;

const T: Millis = 1_000_000;

/// A cluster of one worker with `slots` slots running namespaces' jobs,
/// each attempt costing the CPU its namespace's jobs cost.
struct Sim {
    master: Master,
    journal: Vec<Event>,
    seq: u64,
    now: Millis,
    /// CPU each namespace's attempts cost, in microseconds.
    cost: BTreeMap<String, u64>,
    /// Running attempts, oldest first: (job, its namespace).
    running: std::collections::VecDeque<(JobId, String)>,
    /// CPU used per namespace.
    used: BTreeMap<String, u64>,
    /// Attempts started per namespace.
    starts: BTreeMap<String, u64>,
}

impl Sim {
    fn new(cost: &[(&str, u64)]) -> Self {
        Sim {
            master: Master::new(),
            journal: Vec::new(),
            seq: 0,
            now: T,
            cost: cost.iter().map(|&(n, c)| (n.to_owned(), c)).collect(),
            running: Default::default(),
            used: BTreeMap::new(),
            starts: BTreeMap::new(),
        }
    }

    fn run(&mut self, command: Command) -> Result<Vec<Event>, Rejection> {
        decide_and_apply(&mut self.master, &mut self.journal, self.now, &command)
    }

    fn submit(&mut self, namespace: &str, n: usize, priority: i32) -> Vec<JobId> {
        let mut ids = Vec::new();
        for _ in 0..n {
            self.seq += 1;
            let options = JobOptions {
                namespace: (namespace != DEFAULT).then(|| namespace.to_owned()),
                ..JobOptions::default()
            };
            let job = JobSpec {
                priority,
                ..spec(1, b"x")
            };
            let events = self
                .run(submit_with(self.seq, job, options))
                .expect("taken");
            ids.extend(events.iter().filter_map(|event| match event.kind {
                EventKind::Submitted { id, .. } => Some(id),
                _ => None,
            }));
        }
        ids
    }

    /// Fills the worker's free slots; the jobs started, in order.
    fn fill(&mut self, slots: usize) -> Vec<JobId> {
        let free = slots - self.running.len();
        self.now += 1;
        let events = self.run(poll("w", free as u32)).expect("a poll");
        let mut ids = Vec::new();
        for event in events {
            if let EventKind::Assigned { id, .. } = event.kind {
                let name = crate::namespaces::name_of(self.master.namespaces.of(id)).to_owned();
                *self.starts.entry(name.clone()).or_default() += 1;
                self.running.push_back((id, name));
                ids.push(id);
            }
        }
        ids
    }

    /// Ends the oldest running attempt, as metered.
    fn end_one(&mut self) {
        let (id, name) = self.running.pop_front().expect("one running");
        let cpu_us = self.cost[&name];
        *self.used.entry(name).or_default() += cpu_us;
        self.now += 1;
        self.run(costing(id, "w", cpu_us)).expect("finished");
    }

    /// `rounds` times: fill the slots, end the oldest attempt.
    fn churn(&mut self, slots: usize, rounds: usize) {
        for _ in 0..rounds {
            self.fill(slots);
            if !self.running.is_empty() {
                self.end_one();
            }
        }
    }

    fn used(&self, name: &str) -> u64 {
        self.used.get(name).copied().unwrap_or(0)
    }
}

/// A success of job `id`'s first attempt on `worker`, metered at `cpu_us`.
fn costing(id: JobId, worker: &str, cpu_us: u64) -> Command {
    let mut report = finish(id, 1, worker, Outcome::Succeeded(b"r".to_vec()));
    if let Command::Finish { usage, .. } = &mut report {
        usage.cpu_us = cpu_us;
    }
    report
}

fn weight(namespace: &str, weight: u32) -> Command {
    Command::SetWeight {
        namespace: namespace.into(),
        weight,
    }
}

#[test]
fn weights_share_the_cpu_measured_not_the_jobs_counted() {
    // Team a's attempts cost ten times team b's; b weighs twice a. Team a
    // came first with a long backlog.
    let mut sim = Sim::new(&[("a", 100_000), ("b", 10_000)]);
    sim.run(weight("b", 2)).expect("set");
    sim.submit("a", 400, 0);
    sim.submit("b", 4000, 0);
    sim.churn(4, 1500);
    let (a, b) = (sim.used("a") as f64, sim.used("b") as f64);
    let ratio = b / a;
    assert!(
        (1.8..=2.2).contains(&ratio),
        "CPU b/a {ratio:.3} (a {a}, b {b}), not 2 within 10%"
    );
    // In jobs, b ran some twenty times as many attempts as a.
    let starts = sim.starts["b"] as f64 / sim.starts["a"] as f64;
    assert!(starts > 15.0, "b/a attempts {starts}");
    assert_journal_and_snapshot_agree(&sim.master, &sim.journal);
}

#[test]
fn an_idle_namespace_keeps_no_credit_and_one_alone_takes_every_slot() {
    let mut sim = Sim::new(&[("a", 10_000), ("b", 10_000)]);
    sim.submit("a", 600, 0);
    // Alone, a takes every slot.
    assert_eq!(sim.fill(4).len(), 4);
    sim.churn(4, 300);
    assert_eq!(sim.starts.get("b"), None);
    // b comes now: it shares with a from here on, it does not first take
    // everything for the 300 attempts it was not there for.
    sim.submit("b", 600, 0);
    let before = sim.starts["a"];
    sim.churn(4, 100);
    let (a, b) = (sim.starts["a"] - before, sim.starts["b"]);
    assert!(a >= 45 && b >= 45, "after b came: a {a}, b {b}");
    assert_journal_and_snapshot_agree(&sim.master, &sim.journal);
}

#[test]
fn priorities_order_jobs_within_a_namespace_not_across() {
    let mut sim = Sim::new(&[("a", 10_000), ("b", 10_000)]);
    let low = sim.submit("a", 2, 0);
    let high = sim.submit("a", 2, 9);
    let b = sim.submit("b", 2, 0);
    // One slot at a time: a's high-priority jobs before its low ones,
    // and b's turns between a's, whatever a's priorities.
    let mut order = Vec::new();
    for _ in 0..6 {
        order.extend(sim.fill(1));
        sim.end_one();
    }
    let a_order: Vec<JobId> = (order.iter().copied())
        .filter(|id| !b.contains(id))
        .collect();
    assert_eq!(a_order, [high[0], high[1], low[0], low[1]]);
    let b_at: Vec<usize> = (order.iter().enumerate())
        .filter(|(_, id)| b.contains(id))
        .map(|(at, _)| at)
        .collect();
    assert!(
        b_at[0] <= 1 && b_at[1] <= 3,
        "b's turns {b_at:?} in {order:?}"
    );
}

#[test]
fn a_restored_master_hands_out_slots_as_the_one_before() {
    let mut sim = Sim::new(&[("a", 50_000), ("b", 5_000)]);
    sim.run(weight("a", 3)).expect("set");
    sim.submit("a", 100, 0);
    sim.submit("b", 300, 0);
    sim.churn(4, 120);
    assert_journal_and_snapshot_agree(&sim.master, &sim.journal);
    let mut restored = Master::restore(&sim.master.snapshot()).unwrap();
    for _ in 0..50 {
        let command = poll("w2", 3);
        let now = sim.now + 1;
        let mine = sim.master.decide(now, &command).map(|d| d.events);
        let theirs = restored.decide(now, &command).map(|d| d.events);
        assert_eq!(mine, theirs, "the same starts");
        let events = mine.unwrap();
        for event in &events {
            sim.master.apply(event);
            restored.apply(event);
        }
        sim.now = now;
        // End what started, as metered, on both.
        for event in events {
            if let EventKind::Assigned { id, .. } = event.kind {
                let report = costing(id, "w2", 7_000);
                for event in sim.master.decide(sim.now, &report).unwrap().events {
                    sim.master.apply(&event);
                    restored.apply(&event);
                }
            }
        }
    }
    assert_eq!(restored, sim.master);
}

#[test]
fn weights_that_are_zero_or_absurd_or_of_no_namespace_are_refused() {
    let mut sim = Sim::new(&[]);
    let refused = |sim: &mut Sim, command| sim.run(command).expect_err("refused").code;
    assert_eq!(refused(&mut sim, weight("a", 0)), codes::INVALID_WEIGHT);
    let absurd = crate::limits::WEIGHT_MAX + 1;
    assert_eq!(
        refused(&mut sim, weight("a", absurd)),
        codes::INVALID_WEIGHT
    );
    assert_eq!(refused(&mut sim, weight("A!", 2)), codes::INVALID_NAMESPACE);
    sim.run(weight("a", 5)).expect("set");
    let Ok(Answer::Namespaces(views)) = sim.master.query(T, &Query::Namespaces) else {
        panic!("namespaces");
    };
    assert_eq!((views[0].name.as_str(), views[0].weight), ("a", 5));
    // Back to 1, it is not kept.
    sim.run(weight("a", 1)).expect("set");
    assert!(sim.master.shares.weights.is_empty());
    // A journal's hostile weight is dropped as it is applied.
    sim.master.apply(&Event {
        at: T,
        kind: EventKind::WeightSet {
            namespace: "b".into(),
            weight: 0,
        },
    });
    assert!(sim.master.shares.weights.is_empty());
    assert_journal_and_snapshot_agree(&sim.master, &sim.journal);
}

/// What a poll of `free` slots should start, by brute force (no key
/// limits, quotas or needs): each slot to the namespace whose key,
/// computed afresh from the accounts, is smallest, its first job in line;
/// ties to the first place.
fn reference(master: &Master, free: usize) -> Vec<JobId> {
    let mut lines: BTreeMap<Option<String>, Vec<crate::index::Place>> = BTreeMap::new();
    lines.entry(None).or_default().extend(&master.index.ready);
    for (line, places) in &master.index.lines {
        lines
            .entry(line.namespace.clone())
            .or_default()
            .extend(places);
    }
    for line in lines.values_mut() {
        line.sort_by(|a, b| b.cmp(a));
    }
    let mut keys: BTreeMap<Option<String>, u128> = (lines.keys())
        .map(|namespace| (namespace.clone(), master.share_key(namespace.as_deref())))
        .collect();
    let mut out = Vec::new();
    while out.len() < free {
        let first = (lines.iter())
            .filter_map(|(namespace, line)| Some(((keys[namespace], *line.last()?), namespace)))
            .min();
        let Some((_, namespace)) = first else {
            break;
        };
        let namespace = namespace.clone();
        let place = lines
            .get_mut(&namespace)
            .and_then(Vec::pop)
            .expect("a place");
        out.push(place.2);
        let key = keys.get_mut(&namespace).expect("a key");
        *key += master.share_step(namespace.as_deref());
    }
    out
}

/// A poll opens namespaces lazily, in the order of the keys and first
/// places the index keeps (checked against the accounts each round);
/// among 40 namespaces of random weights, costs and priorities,
/// churned, it starts exactly what the brute-force walk of every
/// namespace's line with keys computed afresh would.
#[test]
fn a_poll_among_many_namespaces_starts_what_brute_force_would() {
    const NAMESPACES: u64 = 40;
    for seed in 1..=12u64 {
        let mut state = seed;
        let mut draw = move |n: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n
        };
        let names: Vec<String> = (0..NAMESPACES)
            .map(|n| match n {
                0 => DEFAULT.to_owned(),
                n => format!("ns{n}"),
            })
            .collect();
        let mut sim = Sim::new(&[]);
        for name in &names {
            sim.cost.insert(name.clone(), 1 + draw(20_000));
            if name != DEFAULT {
                sim.run(weight(name, 1 + draw(5) as u32)).expect("a weight");
            }
        }
        for round in 0..60 {
            for _ in 0..draw(6) {
                let name = names[draw(NAMESPACES) as usize].clone();
                sim.submit(&name, 1 + draw(4) as usize, draw(3) as i32);
            }
            let index = &sim.master.index;
            let namespaces = (index.lines.keys().map(|line| line.namespace.clone()))
                .chain([None])
                .collect::<std::collections::BTreeSet<_>>();
            let fresh: BTreeMap<Option<String>, (u128, crate::index::Place)> = (namespaces.iter())
                .filter_map(|namespace| {
                    let first = index.first_in_line(namespace.as_deref())?;
                    Some((
                        namespace.clone(),
                        (sim.master.share_key(namespace.as_deref()), first),
                    ))
                })
                .collect();
            assert_eq!(index.share_keys, fresh, "seed {seed}, round {round}");
            let by_key = (fresh
                .iter()
                .map(|(namespace, &key)| (key, namespace.clone())))
            .collect();
            assert_eq!(index.by_key, by_key, "seed {seed}, round {round}");
            for free in [1, 3, 16] {
                let now = sim.now + 1;
                assert_eq!(
                    sim.master.startable(now, free, &WorkerPool::default()),
                    reference(&sim.master, free),
                    "seed {seed}, round {round}, {free} free"
                );
            }
            sim.fill(8);
            for _ in 0..draw(4) {
                if !sim.running.is_empty() {
                    sim.end_one();
                }
            }
        }
        assert!(sim.starts.len() > 10, "seed {seed}: {:?}", sim.starts);
    }
}
