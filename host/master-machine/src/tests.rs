//! Unit tests of the scheduling logic, natively.

use crate::limits::{RENEWALS_MAX, WORKER_ID_BYTES_MAX};
use crate::scenarios::{self, failed, finish, poll, spec};
use crate::script::Script;
use crate::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// A submission of `spec` under a request id no other submission in these
/// tests uses: a new request, as a client's next call is.
fn new_submit(spec: JobSpec) -> Command {
    static SEQ: AtomicU64 = AtomicU64::new(1_000_000);
    scenarios::submit(SEQ.fetch_add(1, Ordering::Relaxed), spec)
}

/// Drives a master the way the host does: decide, then apply each event.
struct Sim {
    master: Master,
    effects: Vec<Effect>,
    events: Vec<Event>,
}

impl Sim {
    fn new() -> Self {
        Self {
            master: Master::new(),
            effects: Vec::new(),
            events: Vec::new(),
        }
    }

    fn run(&mut self, now: Millis, command: Command) -> Result<Reply, Rejection> {
        let decision = self.master.decide(now, &command)?;
        for event in decision.events {
            self.effects.extend(self.master.apply(&event));
            self.events.push(event);
        }
        Ok(decision.reply)
    }

    fn ok(&mut self, now: Millis, command: Command) -> Reply {
        self.run(now, command).expect("accepted")
    }

    fn scenario(name: &str) -> Self {
        let scenario = scenarios::all()
            .into_iter()
            .find(|s| s.name == name)
            .expect("scenario exists");
        let mut sim = Self::new();
        for (now, command) in scenario.steps {
            let _ = sim.run(now, command);
        }
        sim
    }

    fn job(&self, id: JobId) -> JobView {
        match self.master.query(0, &Query::Job { id }) {
            Ok(Answer::Job(view)) => *view,
            other => panic!("job {id}: {other:?}"),
        }
    }

    fn assigned(&self) -> Vec<(JobId, u32, String)> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Assign(a) => Some((a.id, a.attempt, a.worker.clone())),
                _ => None,
            })
            .collect()
    }

    fn settled(&self) -> Vec<(JobId, JobState)> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Settled { id, state } => Some((*id, *state)),
                _ => None,
            })
            .collect()
    }
}

const T: Millis = 1_000_000;

#[test]
fn a_job_runs_and_keeps_its_result() {
    let sim = Sim::scenario("success");
    assert_eq!(sim.assigned(), vec![(1, 1, "w1".to_string())]);
    assert_eq!(sim.settled(), vec![(1, JobState::Succeeded)]);
    let job = sim.job(1);
    assert_eq!(job.attempts.len(), 1);
    assert_eq!(job.attempts[0].outcome.as_deref(), Some("succeeded"));
    assert_eq!(job.attempts[0].log_tail, "done\n");
    assert_eq!(
        sim.master.query(0, &Query::Result { id: 1 }),
        Ok(Answer::Result(b"A".to_vec()))
    );
}

#[test]
fn higher_priority_first_then_fifo() {
    let sim = Sim::scenario("priority and fifo");
    let order: Vec<JobId> = sim.assigned().iter().map(|a| a.0).collect();
    assert_eq!(order, vec![3, 1, 2]);
}

#[test]
fn a_fifo_build_hands_jobs_out_in_arrival_order_over_the_same_state() {
    // The same steps through a master lined up first come, first served.
    let scenario = scenarios::all()
        .into_iter()
        .find(|s| s.name == "priority and fifo")
        .expect("scenario exists");
    let mut fifo = Sim::new();
    fifo.master = Master::new().with_order(Order::Fifo);
    let mut built_in = Sim::new();
    for (now, command) in scenario.steps {
        let _ = fifo.run(now, command.clone());
        let _ = built_in.run(now, command);
    }
    let order: Vec<JobId> = fifo.assigned().iter().map(|a| a.0).collect();
    assert_eq!(order, vec![1, 2, 3]);
    // The order is no part of the state: the other build restores the
    // snapshot to the same bytes and lines the same jobs up its own way.
    let snapshot = fifo.master.snapshot();
    let restored = Master::restore(&snapshot)
        .unwrap()
        .with_order(Order::Priority);
    assert_eq!(restored.snapshot(), snapshot);
    assert_ne!(built_in.assigned(), fifo.assigned());
}

#[test]
fn retryable_failures_back_off_then_dead_letter() {
    let mut sim = Sim::new();
    sim.ok(T, new_submit(spec(1, b"x")));
    sim.ok(T + 1, poll("w1", 1));
    sim.ok(T + 2, finish(1, 1, "w1", failed("trap")));
    let job = sim.job(1);
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.not_before, Some(T + 2 + 500));
    // Still backing off: a poll gets nothing, an early tick releases nothing.
    sim.ok(T + 3, poll("w1", 1));
    sim.ok(T + 501, Command::Tick);
    assert_eq!(sim.assigned().len(), 1);
    sim.ok(T + 502, Command::Tick);
    sim.ok(T + 503, poll("w1", 1));
    assert_eq!(sim.assigned().len(), 2);
    sim.ok(T + 504, finish(1, 2, "w1", failed("timeout")));
    // The second backoff doubles.
    assert_eq!(sim.job(1).not_before, Some(T + 504 + 1_000));
    sim.ok(T + 1_504, Command::Tick);
    sim.ok(T + 1_505, poll("w1", 1));
    sim.ok(T + 1_506, finish(1, 3, "w1", failed("internal")));
    let job = sim.job(1);
    assert_eq!(job.state, JobState::Dead);
    assert_eq!(
        job.error.as_ref().map(|e| e.code.as_str()),
        Some("internal")
    );
    assert_eq!(sim.settled(), vec![(1, JobState::Dead)]);
    assert_eq!(sim.master.stats().retries_total, 2);
}

#[test]
fn the_same_scenario_dead_letters_after_three_attempts() {
    let sim = Sim::scenario("retry with backoff, then dead");
    assert_eq!(sim.job(1).state, JobState::Dead);
    assert_eq!(sim.job(1).attempts.len(), 3);
}

#[test]
fn a_job_error_is_not_retried() {
    let sim = Sim::scenario("job error fails at once");
    let job = sim.job(1);
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(job.attempts.len(), 1);
    assert_eq!(
        sim.master
            .query(0, &Query::Result { id: 1 })
            .unwrap_err()
            .code,
        "job_not_succeeded"
    );
}

#[test]
fn a_renewed_lease_starts_again_and_only_its_worker_renews_it() {
    let mut sim = Sim::new();
    sim.ok(T, new_submit(spec(1, b"x")));
    sim.ok(T, new_submit(spec(1, b"y")));
    sim.ok(T + 1, poll("w1", 1));
    sim.ok(T + 2, poll("w2", 1));
    let renew = |worker: &str, attempts: Vec<(JobId, u32)>| Command::Renew {
        worker: worker.into(),
        attempts,
    };
    // w1 prepares job 1 for 5 s: renewed at T + 5_000, its lease runs to
    // T + 11_000 (1 s timeout + 5 s grace from then). A renewal naming an
    // attempt w1 does not hold (job 2 is w2's), an attempt that is not
    // current and a job that does not exist changes nothing of theirs.
    let reply = sim.ok(T + 5_000, renew("w1", vec![(1, 1), (2, 1), (1, 2), (9, 1)]));
    assert_eq!(reply, Reply::Done);
    assert_eq!(
        sim.events.last().map(|e| &e.kind),
        Some(&EventKind::Renewed {
            leases: vec![(1, 1, T + 11_000)]
        })
    );
    sim.ok(T + 6_003, Command::Tick);
    assert_eq!(sim.job(1).state, JobState::Running);
    assert_eq!(sim.job(2).state, JobState::Queued, "w2 did not renew");
    // Nothing of it current: ignored, no event.
    let events = sim.events.len();
    let reply = sim.ok(T + 6_004, renew("w2", vec![(2, 1)]));
    assert!(matches!(reply, Reply::Ignored { .. }), "{reply:?}");
    assert_eq!(sim.events.len(), events);
    // w1's heartbeats, asking for nothing more: it is not lost.
    let heartbeat = Command::Poll {
        worker: "w1".into(),
        slots: 1,
        free: 0,
        holds: Vec::new(),
        pool: WorkerPool::default(),
    };
    sim.ok(T + 8_000, heartbeat.clone());
    sim.ok(T + 10_998, heartbeat);
    sim.ok(T + 10_999, Command::Tick);
    assert_eq!(sim.job(1).state, JobState::Running);
    sim.ok(T + 11_000, Command::Tick);
    assert_eq!(
        sim.job(1).attempts[0].outcome.as_deref(),
        Some("lease_expired")
    );
    // Bad input: a worker id out of bounds, too many attempts.
    let long = "w".repeat(WORKER_ID_BYTES_MAX + 1);
    assert_eq!(
        sim.run(T + 11_002, renew(&long, vec![(1, 2)]))
            .unwrap_err()
            .code,
        codes::INVALID_JOB
    );
    let many = (0..=RENEWALS_MAX as u64).map(|id| (id, 1)).collect();
    assert_eq!(
        sim.run(T + 11_003, renew("w1", many)).unwrap_err().code,
        codes::INVALID_JOB
    );
}

#[test]
fn a_renewal_never_shortens_a_lease_and_format_10_bytes_never_held_one() {
    let mut sim = Sim::new();
    sim.ok(T, new_submit(spec(1, b"x")));
    sim.ok(T + 1, poll("w1", 1));
    // A journal is decoded, not trusted: an earlier lease is not taken.
    sim.master.apply(&Event {
        at: T + 2,
        kind: EventKind::Renewed {
            leases: vec![(1, 1, T + 10), (1, 2, T + 60_000)],
        },
    });
    sim.ok(T + 6_001, Command::Tick);
    assert_eq!(
        sim.job(1).attempts[0].outcome.as_deref(),
        Some("lease_expired")
    );
    let renewed = Event {
        at: T,
        kind: EventKind::Renewed {
            leases: vec![(1, 1, T)],
        },
    };
    assert_eq!(decode_event(&encode(&renewed)), Ok(renewed.clone()));
    let old = [&[FORMAT_VERSION_10][..], &encode(&renewed)[1..]].concat();
    assert_eq!(decode_event(&old).unwrap_err().code, codes::UNDECODABLE);
    // A format-10 configuration still has its locality wait.
    let configured = Event {
        at: T,
        kind: EventKind::Configured(Config {
            locality_wait_ms: 7,
            ..Config::default()
        }),
    };
    let old = [&[FORMAT_VERSION_10][..], &encode(&configured)[1..]].concat();
    assert_eq!(decode_event(&old), Ok(configured));
}

#[test]
fn an_expired_lease_is_retried_and_a_late_result_ignored() {
    let mut sim = Sim::new();
    sim.ok(T, new_submit(spec(1, b"x")));
    sim.ok(T + 1, poll("w1", 1));
    // Lease: 1 s timeout + 5 s grace. One ms before it: nothing.
    sim.ok(T + 6_000, Command::Tick);
    assert_eq!(sim.job(1).state, JobState::Running);
    sim.ok(T + 6_001, Command::Tick);
    let job = sim.job(1);
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.attempts[0].outcome.as_deref(), Some("lease_expired"));
    sim.ok(T + 7_000, Command::Tick);
    sim.ok(T + 7_001, poll("w2", 1));
    let late = sim.ok(
        T + 7_002,
        finish(1, 1, "w1", Outcome::Succeeded(b"late".to_vec())),
    );
    assert!(matches!(late, Reply::Ignored { .. }), "{late:?}");
    sim.ok(
        T + 7_003,
        finish(1, 2, "w2", Outcome::Succeeded(b"mine".to_vec())),
    );
    let twice = sim.ok(
        T + 7_004,
        finish(1, 2, "w2", Outcome::Succeeded(b"again".to_vec())),
    );
    assert!(matches!(twice, Reply::Ignored { .. }));
    assert_eq!(sim.settled(), vec![(1, JobState::Succeeded)]);
    assert_eq!(
        sim.master.query(0, &Query::Result { id: 1 }),
        Ok(Answer::Result(b"mine".to_vec()))
    );
}

#[test]
fn a_report_from_a_worker_that_does_not_hold_the_attempt_is_ignored() {
    let mut sim = Sim::new();
    sim.ok(T, new_submit(spec(1, b"x")));
    sim.ok(T + 1, poll("w1", 1));
    let reply = sim.ok(T + 2, finish(1, 1, "w2", Outcome::Succeeded(vec![])));
    assert!(matches!(reply, Reply::Ignored { .. }));
    assert_eq!(sim.job(1).state, JobState::Running);
}

#[test]
fn cancel_queued_running_and_finished() {
    let sim = Sim::scenario("cancel queued, running and finished");
    assert_eq!(sim.job(1).state, JobState::Cancelled);
    assert_eq!(sim.job(2).state, JobState::Cancelled);
    // Job 1 was cancelled before the poll, so only job 2 ran.
    assert_eq!(sim.assigned(), vec![(2, 1, "w1".to_string())]);
    assert!(sim.effects.contains(&Effect::Stop {
        worker: "w1".into(),
        id: 2,
        attempt: 1
    }));
    assert_eq!(
        sim.settled(),
        vec![(1, JobState::Cancelled), (2, JobState::Cancelled)]
    );
    let mut sim = sim;
    assert_eq!(
        sim.run(T, Command::Cancel { id: 2 }).unwrap_err().code,
        codes::JOB_FINISHED
    );
    assert_eq!(
        sim.run(T, Command::Cancel { id: 99 }).unwrap_err().code,
        codes::JOB_NOT_FOUND
    );
}

#[test]
fn an_idempotency_key_returns_the_same_job() {
    let mut sim = Sim::new();
    let mut keyed = spec(1, b"k");
    keyed.idempotency_key = Some("key".into());
    assert_eq!(
        sim.ok(T, new_submit(keyed.clone())),
        Reply::Submitted {
            id: 1,
            existing: false
        }
    );
    assert_eq!(
        sim.ok(T + 1, new_submit(keyed.clone())),
        Reply::Submitted {
            id: 1,
            existing: true
        }
    );
    assert_eq!(sim.master.stats().submitted_total, 1);
    keyed.input = b"other".to_vec();
    assert_eq!(
        sim.run(T + 2, new_submit(keyed)).unwrap_err().code,
        codes::IDEMPOTENCY_CONFLICT
    );
}

#[test]
fn a_repeated_request_id_is_one_job_until_it_expires() {
    let sim = Sim::scenario("a request id sent twice is one job, until it expires");
    let submitted: Vec<JobId> = sim
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Submitted { id, .. } => Some(id),
            _ => None,
        })
        .collect();
    // Request 1, request 2, and request 1 again once forgotten.
    assert_eq!(submitted, [1, 2, 3]);
    let expired = sim
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::RequestsExpired { .. }))
        .count();
    assert_eq!(expired, 1);
}

#[test]
fn the_queue_is_bounded() {
    let mut sim = Sim::scenario("bounded queue");
    // Jobs 1 and 2 were queued, 3 refused; after one ran, 4 fit.
    assert_eq!(sim.master.stats().submitted_total, 3);
    assert_eq!(
        sim.run(T + 3, new_submit(spec(1, b"5"))).unwrap_err().code,
        codes::QUEUE_FULL
    );
}

#[test]
fn lost_workers_have_their_attempts_retried() {
    let sim = Sim::scenario("worker lost by silence and by membership");
    for id in [1, 2] {
        let job = sim.job(id);
        assert_eq!(job.state, JobState::Queued, "job {id}");
        assert_eq!(job.attempts[0].outcome.as_deref(), Some("worker_lost"));
    }
    assert!(sim.master.query(0, &Query::Workers) == Ok(Answer::Workers(vec![])));
}

#[test]
fn a_checkpoint_is_handed_to_the_retry_and_stale_ones_ignored() {
    let sim = Sim::scenario("checkpoint carried to the retry");
    let retry = sim
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Assign(a) if a.attempt == 2 => Some((**a).clone()),
            _ => None,
        })
        .next()
        .expect("a second attempt");
    assert_eq!(retry.checkpoint.as_deref(), Some(&b"half"[..]));
}

#[test]
fn finished_jobs_are_purged_after_retention() {
    let mut sim = Sim::scenario("retention purges finished jobs");
    let error = sim.master.query(0, &Query::Job { id: 1 }).unwrap_err();
    assert_eq!(error.code, codes::JOB_EXPIRED);
    assert_eq!(
        sim.master.query(0, &Query::Job { id: 2 }).unwrap_err().code,
        codes::JOB_NOT_FOUND
    );
    assert_eq!(sim.master.stats().jobs, [0; 6]);
    // Purging is idempotent across ticks: the second tick had nothing to do.
    let purges = sim
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Purged { .. }))
        .count();
    assert_eq!(purges, 1);
    sim.ok(T + 3_600_005, Command::Tick);
}

#[test]
fn finished_jobs_beyond_the_count_bound_are_purged_oldest_first() {
    let mut sim = Sim::new();
    sim.ok(
        T,
        Command::Configure(Config {
            finished_max: 2,
            ..Config::default()
        }),
    );
    for n in 0..4u8 {
        sim.ok(T + n as u64, new_submit(spec(1, &[n])));
        sim.ok(T + n as u64, Command::Cancel { id: n as u64 + 1 });
    }
    sim.ok(T + 10, Command::Tick);
    assert_eq!(sim.job(4).state, JobState::Cancelled);
    assert_eq!(sim.job(3).state, JobState::Cancelled);
    assert_eq!(
        sim.master.query(0, &Query::Job { id: 1 }).unwrap_err().code,
        codes::JOB_EXPIRED
    );
}

#[test]
fn an_oversized_result_fails_the_job() {
    let mut sim = Sim::new();
    sim.ok(
        T,
        Command::Configure(Config {
            result_bytes_max: 4,
            ..Config::default()
        }),
    );
    sim.ok(T, new_submit(spec(1, b"x")));
    sim.ok(T, poll("w1", 1));
    sim.ok(T, finish(1, 1, "w1", Outcome::Succeeded(vec![0; 5])));
    let job = sim.job(1);
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(job.error.unwrap().code, "output_too_large");
}

#[test]
fn invalid_specs_are_rejected() {
    let mut sim = Sim::new();
    let mut bad = spec(1, b"");
    bad.max_attempts = 0;
    assert_eq!(
        sim.run(T, new_submit(bad)).unwrap_err().code,
        codes::INVALID_JOB
    );
    let mut bad = spec(1, b"");
    bad.timeout_ms = 0;
    assert_eq!(
        sim.run(T, new_submit(bad)).unwrap_err().code,
        codes::INVALID_JOB
    );
    let big = spec(1, &vec![0; (4 << 20) + 1]);
    assert_eq!(
        sim.run(T, new_submit(big)).unwrap_err().code,
        "input_too_large"
    );
    assert_eq!(sim.master.stats().submitted_total, 0);
}

#[test]
fn listing_pages_with_a_cursor_and_filters_by_state() {
    let mut sim = Sim::new();
    for n in 0..5u8 {
        sim.ok(T, new_submit(spec(1, &[n])));
    }
    sim.ok(T, Command::Cancel { id: 2 });
    let page = |after, state, limit| match sim.master.query(
        0,
        &Query::Jobs {
            filter: JobFilter {
                state,
                ..JobFilter::default()
            },
            after,
            limit,
            newest_first: false,
        },
    ) {
        Ok(Answer::Jobs { jobs, next }) => (jobs.iter().map(|j| j.id).collect::<Vec<_>>(), next),
        other => panic!("{other:?}"),
    };
    assert_eq!(page(None, None, 2), (vec![1, 2], Some(2)));
    assert_eq!(page(Some(2), None, 2), (vec![3, 4], Some(4)));
    assert_eq!(page(Some(4), None, 2), (vec![5], None));
    assert_eq!(
        page(None, Some(JobState::Queued), 10),
        (vec![1, 3, 4, 5], None)
    );
}

/// Five jobs: 1 succeeded (module 1), 2 failed with `job_error` (module
/// 2, priority 5), 3 cancelled, 4 running, 5 queued (module 2); submitted
/// at T, T+1, ... T+4.
fn five_jobs_in_every_state() -> Sim {
    let mut sim = Sim::new();
    sim.ok(T, new_submit(spec(1, b"a")));
    sim.ok(
        T + 1,
        new_submit(JobSpec {
            priority: 5,
            ..spec(2, b"b")
        }),
    );
    sim.ok(T + 2, new_submit(spec(1, b"c")));
    sim.ok(T + 3, new_submit(spec(1, b"d")));
    sim.ok(T + 4, new_submit(spec(2, b"e")));
    sim.ok(T + 5, poll("w1", 2));
    sim.ok(T + 6, finish(2, 1, "w1", failed("job_error")));
    sim.ok(T + 7, Command::Cancel { id: 3 });
    sim.ok(T + 8, poll("w1", 1));
    sim.ok(T + 9, finish(1, 1, "w1", Outcome::Succeeded(b"A".to_vec())));
    let states: Vec<JobState> = (1..=5).map(|id| sim.job(id).state).collect();
    use JobState::*;
    assert_eq!(states, [Succeeded, Failed, Cancelled, Running, Queued]);
    sim
}

fn listed(sim: &Sim, filter: JobFilter, newest_first: bool) -> Vec<JobId> {
    match sim.master.query(
        T,
        &Query::Jobs {
            filter,
            after: None,
            limit: 100,
            newest_first,
        },
    ) {
        Ok(Answer::Jobs { jobs, next: None }) => jobs.iter().map(|j| j.id).collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn listing_filters_by_every_field_and_pages_newest_first() {
    let sim = five_jobs_in_every_state();
    let all = JobFilter::default();
    assert_eq!(listed(&sim, all.clone(), true), [5, 4, 3, 2, 1]);
    let by = |f: fn(&mut JobFilter)| {
        let mut filter = JobFilter::default();
        f(&mut filter);
        listed(&sim, filter, false)
    };
    assert_eq!(by(|f| f.module = Some([2; 32])), [2, 5]);
    assert_eq!(by(|f| f.priority = Some(5)), [2]);
    assert_eq!(
        by(|f| (f.from, f.to) = (Some(T + 1), Some(T + 3))),
        [2, 3, 4]
    );
    assert_eq!(by(|f| f.error = Some("JOB_err".into())), [2]);
    assert_eq!(by(|f| f.error = Some("happened".into())), [2]);
    assert_eq!(by(|f| f.error = Some("trap".into())), Vec::<JobId>::new());
    assert_eq!(by(|f| f.state = Some(JobState::Running)), [4]);
    // Pages newest first continue below the cursor.
    let page = sim.master.query(
        T,
        &Query::Jobs {
            filter: all.clone(),
            after: Some(4),
            limit: 2,
            newest_first: true,
        },
    );
    let Ok(Answer::Jobs { jobs, next }) = page else {
        panic!("{page:?}")
    };
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [3, 2]);
    assert_eq!(next, Some(2));
    let summary = &jobs[1];
    assert_eq!(
        (
            summary.module,
            summary.priority,
            summary.error_code.as_deref()
        ),
        ([2; 32], 5, Some("job_error"))
    );
    assert!(summary.finished_at.is_some());
    // Bounds are refused with a code naming the field.
    let long = JobFilter {
        error: Some("x".repeat(crate::limits::FILTER_TEXT_BYTES_MAX + 1)),
        ..JobFilter::default()
    };
    let refused = sim.master.query(
        T,
        &Query::Jobs {
            filter: long,
            after: None,
            limit: 1,
            newest_first: false,
        },
    );
    let rejection = refused.unwrap_err();
    assert_eq!(rejection.code, codes::INVALID_FILTER);
    assert!(rejection.message.starts_with("error:"), "{rejection:?}");
}

#[test]
fn a_bulk_cancel_previews_then_cancels_every_unfinished_match_in_one_decision() {
    let mut sim = five_jobs_in_every_state();
    let cancel = |filter| Query::Bulk {
        action: BulkAction::Cancel,
        filter,
    };
    let preview = sim.master.query(T, &cancel(JobFilter::default()));
    assert_eq!(
        preview,
        Ok(Answer::Count(2)),
        "the running and the queued job"
    );
    let events = sim.events.len();
    let reply = sim.ok(
        T + 20,
        Command::Bulk {
            action: BulkAction::Cancel,
            filter: JobFilter::default(),
        },
    );
    assert_eq!(reply, Reply::Bulk { changed: 2 });
    assert_eq!(sim.events.len(), events + 2);
    assert_eq!(sim.job(4).state, JobState::Cancelled);
    assert_eq!(sim.job(5).state, JobState::Cancelled);
    assert_eq!(
        sim.master.query(T, &cancel(JobFilter::default())),
        Ok(Answer::Count(0))
    );
    assert!(
        sim.effects
            .iter()
            .any(|e| matches!(e, Effect::Stop { id: 4, .. }))
    );
}

#[test]
fn a_bulk_retry_queues_failed_dead_and_cancelled_jobs_with_more_attempts() {
    let mut sim = five_jobs_in_every_state();
    let retry = BulkAction::Retry { attempts: 2 };
    let only = |ids: &[JobId]| JobFilter {
        ids: Some(ids.to_vec()),
        ..JobFilter::default()
    };
    // Named jobs that cannot be retried (succeeded, running) are skipped.
    let preview = sim.master.query(
        T,
        &Query::Bulk {
            action: retry,
            filter: only(&[1, 2, 4, 99]),
        },
    );
    assert_eq!(preview, Ok(Answer::Count(1)));
    let reply = sim.ok(
        T + 20,
        Command::Bulk {
            action: retry,
            filter: only(&[1, 2, 3, 4, 99]),
        },
    );
    assert_eq!(reply, Reply::Bulk { changed: 2 });
    let job = sim.job(2);
    assert_eq!(
        (job.state, job.max_attempts, job.error),
        (JobState::Queued, 3, None)
    );
    assert_eq!(job.finished_at, None);
    assert_eq!(sim.master.stats().jobs[JobState::Failed as usize], 0);
    // It runs again, as attempt 2, and keeps its history.
    sim.ok(T + 21, poll("w2", 4));
    let assigned: Vec<_> = sim.assigned().into_iter().filter(|a| a.2 == "w2").collect();
    // Priority first (job 2's is 5), then the order they were queued in.
    assert_eq!(
        assigned,
        [
            (2, 2, "w2".into()),
            (5, 1, "w2".into()),
            (3, 1, "w2".into())
        ]
    );
    assert_eq!(sim.job(2).attempts[0].outcome.as_deref(), Some("job_error"));
    // Zero attempts, or more than the configuration allows, are refused.
    for attempts in [0, Config::default().attempts_max + 1] {
        let refused = sim.run(
            T + 22,
            Command::Bulk {
                action: BulkAction::Retry { attempts },
                filter: JobFilter::default(),
            },
        );
        assert_eq!(refused.unwrap_err().code, codes::INVALID_FILTER);
    }
}

#[test]
fn one_bulk_command_changes_at_most_its_bound() {
    let mut sim = Sim::new();
    let over = crate::limits::BULK_MAX + 3;
    for n in 0..over {
        sim.ok(T, new_submit(spec(1, &n.to_le_bytes())));
    }
    let cancel = Command::Bulk {
        action: BulkAction::Cancel,
        filter: JobFilter::default(),
    };
    let changed = crate::limits::BULK_MAX as u64;
    assert_eq!(sim.ok(T, cancel.clone()), Reply::Bulk { changed });
    assert_eq!(sim.ok(T, cancel), Reply::Bulk { changed: 3 });
    assert_eq!(
        sim.master.stats().jobs[JobState::Cancelled as usize],
        over as u64
    );
}

#[test]
fn recent_finishes_module_use_and_inputs_are_answered() {
    let sim = five_jobs_in_every_state();
    let recent = sim.master.query(T + 10, &Query::Recent { window_ms: 5 });
    // Jobs 2 (ended T+6, submitted T+1), 3 (T+7, T+2) and 1 (T+9, T):
    // 5, 5 and 9 ms.
    assert_eq!(
        recent,
        Ok(Answer::Recent(Recent {
            finished: 3,
            p50_ms: Some(5),
            p99_ms: Some(9),
        }))
    );
    let recent = sim.master.query(T + 10, &Query::Recent { window_ms: 2 });
    assert_eq!(
        recent,
        Ok(Answer::Recent(Recent {
            finished: 1,
            p50_ms: Some(9),
            p99_ms: Some(9),
        }))
    );
    assert_eq!(
        sim.master.query(T, &Query::ModuleUse),
        Ok(Answer::ModuleUse(vec![([1; 32], 3), ([2; 32], 2)]))
    );
    assert_eq!(
        sim.master.query(T, &Query::Input { id: 4 }),
        Ok(Answer::Input(b"d".to_vec()))
    );
    assert_eq!(
        sim.master
            .query(T, &Query::Input { id: 9 })
            .unwrap_err()
            .code,
        codes::JOB_NOT_FOUND
    );
}

#[test]
fn workers_are_journaled_only_when_they_change_or_go_quiet() {
    let mut sim = Sim::new();
    sim.ok(T, poll("w1", 0));
    sim.ok(T + 100, poll("w1", 0));
    assert_eq!(sim.events.len(), 1);
    sim.ok(T + 2_500, poll("w1", 0));
    assert_eq!(sim.events.len(), 2);
}

#[test]
fn a_snapshot_restores_the_same_state_and_future() {
    for scenario in scenarios::all() {
        let half = scenario.steps.len() / 2;
        let mut live = Sim::new();
        for (now, command) in &scenario.steps[..half] {
            let _ = live.run(*now, command.clone());
        }
        let mut restored = Sim {
            master: Master::restore(&live.master.snapshot()).expect("restores"),
            effects: live.effects.clone(),
            events: live.events.clone(),
        };
        assert_eq!(restored.master, live.master, "{}", scenario.name);
        for (now, command) in &scenario.steps[half..] {
            assert_eq!(
                live.run(*now, command.clone()),
                restored.run(*now, command.clone()),
                "{}",
                scenario.name
            );
        }
        assert_eq!(live.events, restored.events, "{}", scenario.name);
        assert_eq!(live.effects, restored.effects, "{}", scenario.name);
        assert_eq!(live.master.snapshot(), restored.master.snapshot());
    }
}

#[test]
fn replaying_the_events_rebuilds_the_state() {
    for scenario in scenarios::all() {
        let mut live = Sim::new();
        for (now, command) in scenario.steps {
            let _ = live.run(now, command);
        }
        let mut replayed = Master::new();
        let mut effects = Vec::new();
        for event in &live.events {
            effects.extend(replayed.apply(event));
        }
        assert_eq!(replayed, live.master, "{}", scenario.name);
        assert_eq!(effects, live.effects, "{}", scenario.name);
    }
}

#[test]
fn one_call_applying_many_events_says_work_is_available_once() {
    let mut collapsed = 0;
    for scenario in scenarios::all() {
        let mut live = Sim::new();
        for (now, command) in scenario.steps {
            let _ = live.run(now, command);
        }
        // The same events through the machine in one call: the same
        // effects, but `WorkAvailable` once, where it first arose.
        let mut machine = Machine::default();
        let encoded: Vec<Vec<u8>> = live.events.iter().map(encode).collect();
        let effects: Vec<Effect> = (machine.apply(&encoded).unwrap().iter())
            .map(|bytes| decode(bytes).unwrap())
            .collect();
        let mut once = false;
        let expected: Vec<Effect> = (live.effects.iter())
            .filter(|e| **e != Effect::WorkAvailable || !std::mem::replace(&mut once, true))
            .cloned()
            .collect();
        collapsed += live.effects.len() - expected.len();
        assert_eq!(effects, expected, "{}", scenario.name);
        assert_eq!(machine.master(), &live.master, "{}", scenario.name);
    }
    assert!(collapsed > 0, "no scenario repeats WorkAvailable");
}

#[test]
fn unknown_versions_and_garbage_are_refused() {
    let mut bytes = encode(&Command::Tick);
    assert_eq!(decode::<Command>(&bytes), Ok(Command::Tick));
    bytes[0] = FORMAT_VERSION + 1;
    assert_eq!(
        decode::<Command>(&bytes).unwrap_err().code,
        codes::UNKNOWN_VERSION
    );
    assert_eq!(
        decode::<Command>(&[FORMAT_VERSION, 200, 1])
            .unwrap_err()
            .code,
        codes::UNDECODABLE
    );
    assert_eq!(decode::<Command>(&[]).unwrap_err().code, codes::UNDECODABLE);
    let mut machine = Machine::default();
    assert!(machine.apply(&[vec![FORMAT_VERSION, 99]]).is_err());
    assert!(Machine::init(Some(&[7])).is_err());
}

// Properties of the decoders (messages and snapshots from untrusted bytes).
#[path = "fuzz.rs"]
mod fuzz;

#[test]
fn finished_answers_only_finished_and_unknown_jobs_with_outputs_within_bounds() {
    let mut sim = Sim::new();
    for input in [&b"a"[..], b"b", b"c", b"d"] {
        sim.ok(T, new_submit(spec(1, input)));
    }
    sim.ok(T + 1, poll("w1", 4));
    sim.ok(
        T + 2,
        finish(1, 1, "w1", Outcome::Succeeded(b"0123456789".to_vec())),
    );
    sim.ok(
        T + 2,
        finish(2, 1, "w1", Outcome::Succeeded(b"01234".to_vec())),
    );
    sim.ok(
        T + 2,
        finish(3, 1, "w1", Outcome::Succeeded(b"0123".to_vec())),
    );
    let ask = |ids: Vec<JobId>, output_max, output_total| Query::Finished {
        ids,
        output_max,
        output_total,
    };
    // Job 4 is running, 9 was never submitted; 10 bytes is over the
    // per-job bound of 8, and job 3's 4 bytes no longer fit in the total
    // after job 2's 5.
    let Ok(Answer::Finished(jobs)) = sim.master.query(0, &ask(vec![9, 1, 4, 2, 3], 8, 8)) else {
        panic!("an answer");
    };
    let seen: Vec<_> = jobs
        .iter()
        .map(|j| (j.id, j.state, j.output.as_deref(), j.output_bytes))
        .collect();
    assert_eq!(
        seen,
        vec![
            (9, None, None, None),
            (1, Some(JobState::Succeeded), None, Some(10)),
            (2, Some(JobState::Succeeded), Some(&b"01234"[..]), Some(5)),
            (3, Some(JobState::Succeeded), None, Some(4)),
        ]
    );
    assert_eq!(
        jobs[0].error.as_ref().map(|e| e.code.as_str()),
        Some(codes::JOB_NOT_FOUND.as_str())
    );
    // A job that failed for good: its state and error, no output.
    sim.ok(T + 3, finish(4, 1, "w1", failed("job_error")));
    let Ok(Answer::Finished(jobs)) = sim.master.query(0, &ask(vec![4], 8, 8)) else {
        panic!("an answer");
    };
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].state, Some(JobState::Failed));
    assert_eq!(
        jobs[0].error.as_ref().map(|e| e.code.as_str()),
        Some("job_error")
    );
    assert_eq!(
        (jobs[0].output.as_ref(), jobs[0].output_bytes),
        (None, None)
    );
    let too_many = ask(vec![1; crate::limits::FINISHED_IDS_MAX + 1], 8, 8);
    assert_eq!(
        sim.master.query(0, &too_many).unwrap_err().code,
        codes::UNDECODABLE
    );
}

#[test]
fn keys_limit_running_attempts_and_starts_per_second() {
    let sim = Sim::scenario("keys limit running attempts and starts per second");
    let w = |n: &str| n.to_string();
    assert_eq!(
        sim.assigned(),
        vec![
            // a and b fill key k's two places, r1 key r's one start a
            // second; c and r2 wait.
            (1, 1, w("w1")),
            (2, 1, w("w1")),
            (4, 1, w("w1")),
            (5, 1, w("w1")),
            // a finished: c takes its place.
            (3, 1, w("w2")),
            // A second after r1 started.
            (6, 1, w("w2")),
        ]
    );
    assert_eq!(
        sim.job(3).options,
        scenarios::limited("k", Some(2), None),
        "a job shows its options"
    );
    assert_eq!(sim.job(4).options, JobOptions::default());
    // Every attempt of k ended (a succeeded, b backs off, c cancelled):
    // only r's two are counted as running.
    let running: Vec<_> = sim.master.index.key_running.iter().collect();
    assert_eq!(running, [(&"r".to_string(), &2)]);
    assert_eq!(
        sim.master.startable(T + 1_004, 8, &WorkerPool::default()),
        Vec::<JobId>::new()
    );
}

#[test]
fn a_key_limit_that_frees_a_place_wakes_the_workers() {
    let mut sim = Sim::new();
    let k = || scenarios::limited("k", Some(1), None);
    sim.ok(T, scenarios::submit_with(1, spec(1, b"a"), k()));
    sim.ok(T, scenarios::submit_with(2, spec(1, b"b"), k()));
    sim.ok(T + 1, poll("w1", 4));
    sim.effects.clear();
    sim.ok(T + 2, finish(1, 1, "w1", Outcome::Succeeded(Vec::new())));
    assert!(sim.effects.contains(&Effect::WorkAvailable));
    sim.ok(T + 3, poll("w1", 4));
    assert_eq!(sim.assigned(), vec![(2, 1, "w1".to_string())]);
    // The last of the key's jobs ends: no one waits, no wake-up.
    sim.effects.clear();
    sim.ok(T + 4, finish(2, 1, "w1", Outcome::Succeeded(Vec::new())));
    assert!(!sim.effects.contains(&Effect::WorkAvailable));
}

#[test]
fn a_waiting_key_does_not_hold_back_other_jobs_or_their_order() {
    let mut sim = Sim::new();
    let k = || scenarios::limited("k", Some(1), None);
    let mut high = spec(1, b"high");
    high.priority = 9;
    sim.ok(T, scenarios::submit_with(1, spec(1, b"k1"), k()));
    sim.ok(T, scenarios::submit_with(2, spec(1, b"k2"), k()));
    sim.ok(T, new_submit(spec(1, b"x")));
    sim.ok(T, scenarios::submit_with(4, high, k()));
    sim.ok(T, new_submit(spec(1, b"y")));
    // The high-priority job leads key k's line: it and the unlimited jobs
    // start, in order; k1 and k2 wait.
    sim.ok(T + 1, poll("w1", 8));
    let order: Vec<JobId> = sim.assigned().iter().map(|a| a.0).collect();
    assert_eq!(order, vec![4, 3, 5]);
    // One job per waiting key is looked at, however long its line.
    assert_eq!(sim.master.index.ready.len(), 1);
    assert_eq!(sim.master.index.key_ready["k"].len(), 2);
}

#[test]
fn a_unique_key_answers_with_its_windows_job_and_bad_options_name_the_field() {
    let mut sim = Sim::new();
    let scenario = scenarios::all()
        .into_iter()
        .find(|s| s.name == "a unique key answers with its window's job")
        .expect("scenario");
    let replies: Vec<_> = (scenario.steps.into_iter())
        .map(|(now, command)| sim.run(now, command))
        .collect();
    let job = |id| {
        Ok(Reply::Submitted {
            id,
            existing: false,
        })
    };
    let existing = |id| Ok(Reply::Submitted { id, existing: true });
    assert_eq!(replies[0], job(1));
    assert_eq!(replies[1], existing(1), "within the window, any input");
    assert_eq!(
        replies[4],
        existing(1),
        "a finished job still holds its key"
    );
    assert_eq!(replies[5], job(2), "the window ended");
    let refused: Vec<String> = replies[6..]
        .iter()
        .map(|reply| {
            let rejection = reply.clone().unwrap_err();
            assert_eq!(rejection.code, codes::INVALID_JOB);
            rejection.message
        })
        .collect();
    assert!(refused[0].contains("unique.key"), "{refused:?}");
    assert!(refused[1].contains("unique.window_ms"), "{refused:?}");
    assert!(refused[2].contains("running_max or starts_per_second"));
    assert!(refused[3].contains("limit.running_max"), "{refused:?}");
    assert_eq!(sim.master.stats().submitted_total, 2, "nothing half made");
}

#[test]
fn ended_unique_holds_and_idle_rate_windows_are_forgotten() {
    let mut sim = Sim::new();
    let rated = || scenarios::limited("r", None, Some(100));
    for n in 0..20u8 {
        let unique = scenarios::unique(&format!("u{n}"), 10);
        sim.ok(T, scenarios::submit_with(n.into(), spec(1, &[n]), unique));
    }
    sim.ok(T, scenarios::submit_with(100, spec(1, b"r"), rated()));
    sim.ok(T + 1, poll("w1", 30));
    assert_eq!(sim.master.keyed.uniques.len(), 20);
    assert_eq!(sim.master.keyed.starts.len(), 1);
    // Later events that add a hold or a start forget a few ended ones each.
    for n in 0..3u8 {
        let unique = scenarios::unique(&format!("later{n}"), 10);
        sim.ok(
            T + 5_000,
            scenarios::submit_with(200 + u64::from(n), spec(2, &[n]), unique),
        );
    }
    // 8, then 8, then the last 4 of the 20 ended holds.
    let held: Vec<&String> = sim.master.keyed.uniques.keys().collect();
    assert_eq!(held, ["later0", "later1", "later2"]);
    sim.ok(
        T + 5_000,
        scenarios::submit_with(300, spec(1, b"q"), scenarios::limited("q", Some(1), None)),
    );
    sim.ok(T + 5_001, poll("w1", 4));
    assert_eq!(
        sim.master.keyed.starts.keys().collect::<Vec<_>>(),
        vec!["q"],
        "r's window was idle"
    );
}

mod key_limits {
    use super::*;
    use proptest::prelude::*;

    /// What a generated run does next.
    #[derive(Debug, Clone)]
    enum Step {
        /// Submit a job of key `key` (or of none).
        Submit { key: Option<u8>, priority: i32 },
        /// Worker `worker` polls with `free` slots.
        Poll { worker: u8, free: u32 },
        /// The `nth` running job (in id order) ends, failing when `fail`.
        Finish { nth: usize, fail: bool },
        /// The `nth` job is cancelled.
        Cancel { nth: u64 },
        /// Time passes.
        Wait { ms: u64 },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (proptest::option::of(0..3u8), -1..2i32)
                .prop_map(|(key, priority)| Step::Submit { key, priority }),
            4 => (0..3u8, 0..5u32).prop_map(|(worker, free)| Step::Poll { worker, free }),
            3 => (0..8usize, any::<bool>()).prop_map(|(nth, fail)| Step::Finish { nth, fail }),
            1 => (1..30u64).prop_map(|nth| Step::Cancel { nth }),
            3 => prop_oneof![0..50u64, 200..1_500u64].prop_map(|ms| Step::Wait { ms }),
        ]
    }

    /// Key `n`'s limits: at most n + 1 running; keys 1 and 2 also at most
    /// 2n starts a second.
    fn limits(key: u8) -> JobOptions {
        let rate = (key > 0).then_some(2 * u32::from(key));
        scenarios::limited(&format!("k{key}"), Some(u32::from(key) + 1), rate)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the schedule, no key ever has more attempts running
        /// than its limit, nor more starts in a second than its rate; and
        /// a snapshot mid-way restores the same state.
        #[test]
        fn no_key_ever_exceeds_its_limits(steps in proptest::collection::vec(step(), 1..120)) {
            let mut sim = Sim::new();
            let mut now = T;
            let mut seq = 0u64;
            for step in steps {
                match step {
                    Step::Submit { key, priority } => {
                        seq += 1;
                        let mut spec = spec(1, &seq.to_le_bytes());
                        spec.priority = priority;
                        let options = key.map(limits).unwrap_or_default();
                        sim.ok(now, scenarios::submit_with(seq, spec, options));
                    }
                    Step::Poll { worker, free } => {
                        sim.ok(now, poll(&format!("w{worker}"), free));
                    }
                    Step::Finish { nth, fail } => {
                        let running: Vec<JobView> = (1..=seq)
                            .map(|id| sim.job(id))
                            .filter(|job| job.state == JobState::Running)
                            .collect();
                        if let Some(job) = running.get(nth) {
                            let attempt = job.attempts.last().expect("running");
                            let outcome = if fail { failed("trap") } else { Outcome::Succeeded(Vec::new()) };
                            let worker = attempt.worker.clone();
                            sim.ok(now, finish(job.id, attempt.number, &worker, outcome));
                        }
                    }
                    Step::Cancel { nth } => {
                        let _ = sim.run(now, Command::Cancel { id: nth });
                    }
                    Step::Wait { ms } => {
                        now += ms;
                        sim.ok(now, Command::Tick);
                    }
                }
                // Attempts as the job views show them, per key.
                let mut attempts: BTreeMap<String, Vec<(Millis, Option<Millis>)>> = BTreeMap::new();
                for id in 1..=seq {
                    let job = sim.job(id);
                    if let Some(limit) = &job.options.limit {
                        let times = job.attempts.iter().map(|a| (a.started_at, a.ended_at));
                        attempts.entry(limit.key.clone()).or_default().extend(times);
                    }
                }
                for (key, times) in &attempts {
                    let n: u8 = key[1..].parse().expect("k<n>");
                    let limit = limits(n).limit.expect("a limit");
                    let running = times.iter().filter(|(_, end)| end.is_none()).count();
                    prop_assert!(running as u32 <= limit.running_max.expect("max"), "{key}: {running} running");
                    if let Some(rate) = limit.starts_per_second {
                        for &(start, _) in times {
                            let within = times.iter().filter(|(s, _)| *s >= start && *s < start + crate::limits::RATE_WINDOW_MS).count();
                            prop_assert!(within as u32 <= rate, "{key}: {within} starts in a second from {start}");
                        }
                    }
                }
            }
            let restored = Master::restore(&sim.master.snapshot()).expect("restores");
            prop_assert_eq!(restored, sim.master.clone());
        }
    }
}

// Schedules.
#[path = "schedule_tests.rs"]
mod schedules;

// DAGs.
#[path = "dag_tests.rs"]
mod dags;

#[test]
fn codes_keep_their_wire_strings_and_unknown_ones_survive() {
    for code in Code::ALL {
        assert_eq!(Code::from(code.as_str()), *code);
        // A code is its string on the wire, as when codes were strings.
        assert_eq!(encode(code), encode(&code.as_str().to_string()));
    }
    let newer = Rejection::new("a_code_from_a_newer_master", "m");
    assert_eq!(newer.code, Code::Other("a_code_from_a_newer_master".into()));
    let back: Rejection = decode(&encode(&newer)).unwrap();
    assert_eq!(back, newer);
    assert_eq!(back.code.as_str(), "a_code_from_a_newer_master");
}

/// The folder of the scenarios' blessed transcripts.
fn transcripts_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

/// `text` with each run of one number repeated (a digest `[1, 1, ...]`)
/// written `[1; 32]`, so a transcript's lines stay readable.
fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else {
            out.push_str(&rest[open..]);
            return out;
        };
        let items: Vec<&str> = after[..close].split(", ").collect();
        let numbers = items
            .iter()
            .all(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()));
        if numbers && items.len() > 4 && items.iter().all(|i| *i == items[0]) {
            out.push_str(&format!("[{}; {}]", items[0], items.len()));
            rest = &after[close + 1..];
        } else {
            out.push('[');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A scenario's name as a file name: lower-case words joined by `-`.
fn slug(name: &str) -> String {
    let words: Vec<String> = name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    words.join("-")
}

/// What the master says to `command` at `now`: its reply or refusal
/// (`<`), then, indented, the events it decided and the effects they had.
fn output(sim: &mut Sim, now: Millis, command: &Command) -> String {
    use std::fmt::Write;
    let mut text = String::new();
    let (events, effects) = (sim.events.len(), sim.effects.len());
    match sim.run(now, command.clone()) {
        Ok(reply) => writeln!(text, "< {}", compact(&format!("{reply:?}"))),
        Err(refused) => writeln!(text, "< refused {refused}"),
    }
    .expect("writes to a string");
    for event in &sim.events[events..] {
        let _ = writeln!(
            text,
            "  event at {}: {}",
            event.at,
            compact(&format!("{:?}", event.kind))
        );
    }
    for effect in &sim.effects[effects..] {
        let _ = writeln!(text, "  effect {}", compact(&format!("{effect:?}")));
    }
    text
}

/// `script` as its file should read: its commands as written, each with
/// what the master, run from empty, says to it.
fn transcript(script: &Script<'_>) -> String {
    let mut sim = Sim::new();
    script.render(|step| output(&mut sim, step.at, &step.command))
}

/// Every scenario's script (`scenarios/<name>.txt`, named after its first
/// line) holds, under each command, what the master answers to it now: a
/// change of the master's behaviour shows as a text diff to review.
/// `COHORT_BLESS=1` rewrites the answers, keeping the commands as written.
#[test]
fn scenario_transcripts_are_the_blessed_ones() {
    let dir = transcripts_dir();
    let bless = std::env::var_os("COHORT_BLESS").is_some();
    let mut names = std::collections::BTreeSet::new();
    let mut differ = Vec::new();
    for ((file, committed), (_, script)) in scenarios::SCRIPTS.iter().zip(scenarios::scripts()) {
        assert_eq!(
            *file,
            format!("{}.txt", slug(script.name)),
            "scenarios/{file} is named after its first line"
        );
        let text = transcript(&script);
        if bless {
            std::fs::write(dir.join(file), &text).unwrap();
        } else if text != *committed {
            differ.push(file.to_string());
        }
        names.insert(file.to_string());
    }
    assert!(
        differ.is_empty(),
        "the master now answers these scenarios otherwise: {differ:?}; if that is intended, \
         run COHORT_BLESS=1 cargo test -p cohort-master scenario_transcripts and review the diff"
    );
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            names.contains(&name),
            "scenarios/{name} belongs to no scenario: remove it, or name it in scenarios::SCRIPTS"
        );
    }
}

#[test]
fn compact_folds_only_runs_of_one_number() {
    assert_eq!(compact("m: [7, 7, 7, 7, 7, 7], x"), "m: [7; 6], x");
    assert_eq!(compact("[1, 2, 3, 4, 5]"), "[1, 2, 3, 4, 5]");
    assert_eq!(compact("[a, a, a, a, a] [3, 3]"), "[a, a, a, a, a] [3, 3]");
}
