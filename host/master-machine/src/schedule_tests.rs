//! Schedules: ticks fire once whoever decides them, late ticks within the
//! catch-up window fire, older ones are missed until backfilled, overlap
//! policies, and bad schedules.

use super::*;
use crate::limits::BACKFILL_TICKS_MAX;
use crate::scenarios::create_schedule;
use proptest::prelude::*;
use std::collections::BTreeSet;

const SECOND: Every = Every::Interval { ms: 1_000 };

/// The ticks the events fired, per schedule, in order.
fn fired(events: &[Event]) -> Vec<(String, Millis, JobId)> {
    events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::ScheduleFired { name, tick, id, .. } => Some((name.clone(), *tick, *id)),
            _ => None,
        })
        .collect()
}

fn view(sim: &Sim, name: &str) -> ScheduleView {
    match sim.master.query(0, &Query::Schedule { name: name.into() }) {
        Ok(Answer::Schedule(view)) => *view,
        other => panic!("schedule {name}: {other:?}"),
    }
}

fn ticks(events: &[Event]) -> Vec<Millis> {
    fired(events).into_iter().map(|(_, tick, _)| tick).collect()
}

#[test]
fn an_interval_schedule_fires_each_tick_once_and_a_restored_master_goes_on() {
    let mut sim = Sim::new();
    sim.ok(T, create_schedule("s", SECOND, Overlap::AllowAll, 60_000));
    assert_eq!(
        view(&sim, "s").upcoming,
        vec![T + 1_000, T + 2_000, T + 3_000, T + 4_000, T + 5_000]
    );
    for now in [T + 999, T + 1_000, T + 1_000, T + 1_500, T + 2_000] {
        sim.ok(now, Command::Tick);
    }
    assert_eq!(ticks(&sim.events), vec![T + 1_000, T + 2_000]);
    let (_, _, job) = fired(&sim.events)[0].clone();
    assert_eq!(sim.job(job).state, JobState::Queued);
    assert_eq!(sim.job(job).submitted_at, T + 1_000);

    // A new master from the snapshot, or from the journal, decides the
    // next tick and not the last one again.
    let mut restored = Sim::new();
    restored.master = Master::restore(&sim.master.snapshot()).unwrap();
    let mut replayed = Sim::new();
    for event in &sim.events {
        replayed.master.apply(event);
    }
    assert_eq!(replayed.master.snapshot(), sim.master.snapshot());
    for sim in [&mut restored, &mut replayed] {
        sim.ok(T + 2_000, Command::Tick);
        sim.ok(T + 3_000, Command::Tick);
        assert_eq!(ticks(&sim.events), vec![T + 3_000]);
    }
    let status = view(&restored, "s");
    assert_eq!(status.fired_total, 3);
    assert_eq!(status.last.map(|(tick, _)| tick), Some(T + 3_000));
}

#[test]
fn late_ticks_fire_within_the_catch_up_window_and_older_ones_wait_for_a_backfill() {
    let mut sim = Sim::new();
    sim.ok(T, create_schedule("s", SECOND, Overlap::AllowAll, 5_000));
    // No master decided anything for 20 s: the ticks of the last 5 s (and
    // the second of grace) fire late, the older ones are missed.
    sim.ok(T + 20_000, Command::Tick);
    let late: Vec<Millis> = (14..=20).map(|n| T + n * 1_000).collect();
    assert_eq!(ticks(&sim.events), late);
    let status = view(&sim, "s");
    assert_eq!(status.missed, vec![(T + 1_000, T + 14_000)]);
    assert_eq!(status.upcoming[0], T + 21_000);

    // A backfill of part of the range, then of all of it; then nothing.
    sim.events.clear();
    let reply = sim.ok(
        T + 20_001,
        Command::Backfill {
            name: "s".into(),
            from: T + 3_000,
            to: T + 5_000,
        },
    );
    assert_eq!(ticks(&sim.events), vec![T + 3_000, T + 4_000]);
    let Reply::Backfilled { ids } = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(ids.len(), 2);
    assert_eq!(
        view(&sim, "s").missed,
        vec![(T + 1_000, T + 3_000), (T + 5_000, T + 14_000)]
    );
    sim.events.clear();
    sim.ok(
        T + 20_002,
        Command::Backfill {
            name: "s".into(),
            from: 0,
            to: u64::MAX,
        },
    );
    let rest: Vec<Millis> = [1, 2, 5, 6, 7, 8, 9, 10, 11, 12, 13]
        .iter()
        .map(|n| T + n * 1_000)
        .collect();
    assert_eq!(ticks(&sim.events), rest);
    assert!(view(&sim, "s").missed.is_empty());
    let reply = sim.ok(
        T + 20_003,
        Command::Backfill {
            name: "s".into(),
            from: 0,
            to: u64::MAX,
        },
    );
    assert_eq!(reply, Reply::Backfilled { ids: Vec::new() });
    assert_eq!(view(&sim, "s").fired_total, 7 + 2 + 11);
}

#[test]
fn a_backfill_beyond_its_bound_or_of_an_empty_range_is_refused() {
    let mut sim = Sim::new();
    sim.ok(T, create_schedule("s", SECOND, Overlap::AllowAll, 0));
    let later = T + (BACKFILL_TICKS_MAX as u64 + 10) * 1_000;
    sim.ok(later, Command::Tick);
    let backfill = |from, to| Command::Backfill {
        name: "s".into(),
        from,
        to,
    };
    let refused = sim.run(later, backfill(0, u64::MAX)).unwrap_err();
    assert_eq!(refused.code, codes::INVALID_SCHEDULE);
    assert!(refused.message.starts_with("to:"), "{}", refused.message);
    let refused = sim.run(later, backfill(T + 5, T + 5)).unwrap_err();
    assert!(refused.message.starts_with("from:"), "{}", refused.message);
    let unknown = sim
        .run(
            later,
            Command::Backfill {
                name: "nope".into(),
                from: 0,
                to: 1,
            },
        )
        .unwrap_err();
    assert_eq!(unknown.code, codes::SCHEDULE_NOT_FOUND);
    // Within the bound it is accepted.
    let reply = sim.ok(later, backfill(T, T + 501_000));
    assert!(matches!(reply, Reply::Backfilled { ids } if ids.len() == 500));
}

/// Fires tick 1 (job 1 stays queued), then decides ticks 2 and 3 under
/// `overlap`; returns the simulation and job 1's id.
fn overlapping(overlap: Overlap) -> (Sim, JobId) {
    let mut sim = Sim::new();
    sim.ok(T, create_schedule("s", SECOND, overlap, 60_000));
    sim.ok(T + 1_000, Command::Tick);
    let first = fired(&sim.events)[0].2;
    sim.ok(T + 2_000, Command::Tick);
    sim.ok(T + 3_000, Command::Tick);
    (sim, first)
}

#[test]
fn overlap_policies_skip_buffer_allow_or_cancel() {
    let (sim, _) = overlapping(Overlap::Skip);
    assert_eq!(ticks(&sim.events), vec![T + 1_000]);
    assert_eq!(view(&sim, "s").skipped_total, 2);

    let (sim, first) = overlapping(Overlap::AllowAll);
    assert_eq!(ticks(&sim.events), vec![T + 1_000, T + 2_000, T + 3_000]);
    assert_eq!(view(&sim, "s").active.len(), 3);
    assert_eq!(sim.job(first).state, JobState::Queued);

    let (sim, first) = overlapping(Overlap::CancelRunning);
    assert_eq!(ticks(&sim.events), vec![T + 1_000, T + 2_000, T + 3_000]);
    assert_eq!(sim.job(first).state, JobState::Cancelled);
    assert_eq!(sim.job(first + 1).state, JobState::Cancelled);
    assert_eq!(view(&sim, "s").active, vec![first + 2]);

    // Buffer one: tick 2 waits, tick 3 is skipped; when job 1 ends, tick 2
    // fires at the next decision, once.
    let (mut sim, first) = overlapping(Overlap::BufferOne);
    assert_eq!(ticks(&sim.events), vec![T + 1_000]);
    let status = view(&sim, "s");
    assert_eq!(
        (status.buffered, status.skipped_total),
        (Some(T + 2_000), 1)
    );
    sim.ok(T + 3_100, poll("w1", 1));
    sim.ok(
        T + 3_200,
        finish(first, 1, "w1", Outcome::Succeeded(b"ok".to_vec())),
    );
    assert!(view(&sim, "s").active.is_empty());
    sim.ok(T + 3_300, Command::Tick);
    sim.ok(T + 3_400, Command::Tick);
    assert_eq!(ticks(&sim.events), vec![T + 1_000, T + 2_000]);
    assert_eq!(view(&sim, "s").buffered, None);
}

#[test]
fn pause_resume_and_delete() {
    let mut sim = Sim::new();
    sim.ok(T, create_schedule("s", SECOND, Overlap::AllowAll, 60_000));
    let pause = |paused| Command::PauseSchedule {
        name: "s".into(),
        paused,
    };
    sim.ok(T + 500, pause(true));
    sim.ok(T + 500, pause(true));
    sim.ok(T + 5_000, Command::Tick);
    assert!(ticks(&sim.events).is_empty());
    assert!(view(&sim, "s").upcoming.is_empty());
    // Resumed: from the first tick after now, and nothing counted missed.
    sim.ok(T + 5_500, pause(false));
    sim.ok(T + 6_000, Command::Tick);
    assert_eq!(ticks(&sim.events), vec![T + 6_000]);
    assert!(view(&sim, "s").missed.is_empty());
    let job = fired(&sim.events)[0].2;
    sim.ok(T + 6_100, Command::DeleteSchedule { name: "s".into() });
    sim.ok(T + 9_000, Command::Tick);
    assert_eq!(ticks(&sim.events), vec![T + 6_000]);
    // The jobs it fired stay; the name is free again.
    assert_eq!(sim.job(job).state, JobState::Queued);
    let gone = sim.run(T + 9_000, pause(true)).unwrap_err();
    assert_eq!(gone.code, codes::SCHEDULE_NOT_FOUND);
    sim.ok(T + 9_000, create_schedule("s", SECOND, Overlap::Skip, 0));
}

/// A schedule of namespace `namespace` (`None`: the default one).
fn schedule_of(name: &str, namespace: Option<&str>) -> Command {
    let mut spec = crate::steps::schedule_spec(name, SECOND, Overlap::AllowAll, 60_000);
    spec.options.namespace = namespace.map(str::to_owned);
    Command::CreateSchedule(spec)
}

fn within(namespace: Option<&str>, name: &str, action: ScheduleAction) -> Command {
    Command::ScheduleIn {
        namespace: namespace.map(str::to_owned),
        name: name.into(),
        action,
    }
}

#[test]
fn a_schedule_is_acted_on_within_its_namespace_only() {
    let mut sim = Sim::new();
    sim.ok(T, schedule_of("a", Some("team-a")));
    sim.ok(T, schedule_of("d", None));
    let pause = ScheduleAction::Pause { paused: true };
    // Another namespace's schedule is not found, as a missing one is;
    // nothing is decided.
    for (namespace, name) in [(Some("team-b"), "a"), (None, "a"), (Some("team-a"), "d")] {
        for action in [
            pause.clone(),
            ScheduleAction::Delete,
            ScheduleAction::Backfill { from: T, to: T + 1 },
        ] {
            let refused = sim.run(T + 1, within(namespace, name, action)).unwrap_err();
            assert_eq!(
                refused.code,
                codes::SCHEDULE_NOT_FOUND,
                "{namespace:?} {name}"
            );
            assert_eq!(refused.message, format!("no schedule {name}"));
        }
    }
    // Read within a namespace: its own schedules only (the master answers).
    let read = |namespace: &str, query: Query| {
        let query = query.within(Some(namespace));
        sim.master.query(T + 1, &query)
    };
    match read("team-a", Query::Schedules) {
        Ok(Answer::Schedules(views)) => {
            let names: Vec<&str> = views.iter().map(|v| v.spec.name.as_str()).collect();
            assert_eq!(names, ["a"]);
        }
        other => panic!("schedules: {other:?}"),
    }
    match read("default", Query::Schedules) {
        Ok(Answer::Schedules(views)) => assert_eq!(views.len(), 1, "d alone"),
        other => panic!("schedules: {other:?}"),
    }
    let other = read("team-b", Query::Schedule { name: "a".into() }).unwrap_err();
    assert_eq!(
        (other.code, other.message.as_str()),
        (codes::SCHEDULE_NOT_FOUND, "no schedule a")
    );
    assert!(read("team-a", Query::Schedule { name: "a".into() }).is_ok());
    let missing = sim.run(T + 1, within(Some("team-a"), "x", pause.clone()));
    assert_eq!(missing.unwrap_err().message, "no schedule x");
    assert!(!view(&sim, "a").paused && !view(&sim, "d").paused);
    // Its own, by name or as `default`.
    sim.ok(T + 1, within(Some("team-a"), "a", pause.clone()));
    sim.ok(T + 1, within(Some("default"), "d", pause));
    assert!(view(&sim, "a").paused && view(&sim, "d").paused);
    sim.ok(
        T + 2,
        within(Some("team-a"), "a", ScheduleAction::Pause { paused: false }),
    );
    sim.ok(T + 5_000, Command::Tick);
    let job = fired(&sim.events)[0].2;
    assert_eq!(sim.master.namespaces.of(job), Some("team-a"));
    // Deleted and created again by another namespace under the same name:
    // the first namespace's command finds no schedule of its own.
    sim.ok(
        T + 6_000,
        within(Some("team-a"), "a", ScheduleAction::Delete),
    );
    sim.ok(T + 6_000, schedule_of("a", Some("team-b")));
    let refused = sim.run(
        T + 6_001,
        within(Some("team-a"), "a", ScheduleAction::Delete),
    );
    assert_eq!(refused.unwrap_err().code, codes::SCHEDULE_NOT_FOUND);
    assert_eq!(
        view(&sim, "a").spec.options.namespace.as_deref(),
        Some("team-b")
    );
}

#[test]
fn bad_schedules_are_refused_and_create_nothing() {
    let mut sim = Sim::new();
    sim.ok(T, create_schedule("s", SECOND, Overlap::Skip, 0));
    let taken = sim
        .run(T, create_schedule("s", SECOND, Overlap::Skip, 0))
        .unwrap_err();
    assert_eq!(taken.code, codes::SCHEDULE_EXISTS);
    let mut bad = Vec::new();
    let Command::CreateSchedule(good) = create_schedule("t", SECOND, Overlap::Skip, 0) else {
        unreachable!()
    };
    let mut keyed = good.clone();
    keyed.job.idempotency_key = Some("k".into());
    bad.push(keyed);
    let mut unique = good.clone();
    unique.options.unique = Some(Unique {
        key: "u".into(),
        window_ms: 1,
    });
    bad.push(unique);
    let mut attempts = good.clone();
    attempts.job.max_attempts = 0;
    bad.push(attempts);
    let mut limit = good.clone();
    limit.options.limit = Some(KeyLimit {
        key: "k".into(),
        running_max: Some(0),
        starts_per_second: None,
    });
    bad.push(limit);
    let mut never = good.clone();
    never.every = Every::Cron {
        expression: "0 0 30 2 *".into(),
        timezone: "UTC".into(),
    };
    bad.push(never);
    for spec in bad {
        let refused = sim
            .run(T, Command::CreateSchedule(spec.clone()))
            .unwrap_err();
        assert!(
            [codes::INVALID_SCHEDULE, codes::INVALID_JOB].contains(&refused.code),
            "{spec:?}: {refused:?}"
        );
    }
    match sim.master.query(T, &Query::Schedules) {
        Ok(Answer::Schedules(all)) => assert_eq!(all.len(), 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_schedule_holds_its_module_like_a_job() {
    let mut sim = Sim::new();
    sim.ok(T, create_schedule("s", SECOND, Overlap::Skip, 0));
    let Ok(Answer::ModuleUse(uses)) = sim.master.query(T, &Query::ModuleUse) else {
        panic!()
    };
    assert_eq!(uses, vec![([1; 32], 1)]);
}

/// One step of the property below.
#[derive(Debug, Clone)]
enum Step {
    /// Time passes; the master ticks.
    Tick(Millis),
    /// A worker runs every queued job to the end.
    Work,
    /// The master dies: the last `lost` events decided were not durable
    /// and a new master starts from the snapshot taken `back` events ago
    /// plus the journal after it.
    Crash { lost: usize, back: usize },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..4_000u64).prop_map(Step::Tick),
        1 => Just(Step::Work),
        1 => (0..4usize, 0..40usize).prop_map(|(lost, back)| Step::Crash { lost, back }),
    ]
}

proptest! {
    /// Whatever the timing, work and crashes (with undurable events lost),
    /// the durable journal fires each tick at most once, within its
    /// catch-up window; every tick up to the end is fired, skipped or
    /// recorded as missed.
    #[test]
    fn each_tick_fires_at_most_once_across_crashes(
        overlap in prop::sample::select(Overlap::ALL.to_vec()),
        catch_up in prop::sample::select(vec![0u64, 1_500, 10_000]),
        steps in prop::collection::vec(step(), 1..60),
    ) {
        let mut sim = Sim::new();
        sim.ok(T, create_schedule("s", SECOND, overlap, catch_up));
        let mut now = T;
        for step in steps {
            match step {
                Step::Tick(advance) => {
                    now += advance;
                    sim.ok(now, Command::Tick);
                }
                Step::Work => {
                    sim.effects.clear();
                    sim.ok(now, poll("w1", 1000));
                    for (id, attempt, _) in sim.assigned() {
                        sim.ok(now, finish(id, attempt, "w1", Outcome::Succeeded(Vec::new())));
                    }
                }
                Step::Crash { lost, back } => {
                    // The schedule's creation was acknowledged: durable.
                    let durable = sim.events.len().saturating_sub(lost).max(1);
                    sim.events.truncate(durable);
                    let from = durable.saturating_sub(back);
                    let mut snapshot = Master::new();
                    for event in &sim.events[..from] {
                        snapshot.apply(event);
                    }
                    let mut master = Master::restore(&snapshot.snapshot()).unwrap();
                    for event in &sim.events[from..] {
                        master.apply(event);
                    }
                    sim.master = master;
                }
            }
        }
        sim.ok(now, Command::Tick);
        let mut seen = BTreeSet::new();
        let mut skipped = BTreeSet::new();
        for event in &sim.events {
            match &event.kind {
                EventKind::ScheduleFired { tick, .. } => {
                    prop_assert!(seen.insert(*tick), "tick {tick} fired twice");
                    prop_assert!(*tick <= event.at);
                    if overlap != Overlap::BufferOne {
                        let window = catch_up + crate::limits::LATE_GRACE_MS;
                        prop_assert!(event.at - tick <= window, "tick {tick} fired at {}", event.at);
                    }
                }
                EventKind::ScheduleSkipped { tick, .. } | EventKind::ScheduleBuffered { tick, .. } => {
                    prop_assert!(skipped.insert(*tick));
                }
                _ => {}
            }
        }
        let status = view(&sim, "s");
        let next = status.upcoming[0];
        prop_assert!(next > now);
        for tick in (T + 1_000..next).step_by(1_000) {
            let missed = status.missed.iter().any(|&(from, to)| from <= tick && tick < to);
            prop_assert!(
                seen.contains(&tick) || skipped.contains(&tick) || missed,
                "tick {tick} was neither fired, skipped nor missed"
            );
        }
    }
}
