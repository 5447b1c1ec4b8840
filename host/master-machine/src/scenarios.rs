//! Scripted command sequences that exercise every transition of the master.
//!
//! The unit tests run them natively; the host's tests replay the same steps
//! through the Wasm build and require byte-identical events, effects,
//! replies, answers and snapshots. A step is `(now, command)`.

use crate::master::{REQUEST_PURGE_PERIOD_MS, REQUEST_TTL_MS};
use crate::protocol::*;

/// A named sequence of `(now, command)` steps.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// What it exercises.
    pub name: &'static str,
    /// The steps, in order.
    pub steps: Vec<(Millis, Command)>,
}

/// A job spec with test defaults: module `[n; 32]`, 1 s timeout, 3 attempts.
pub fn spec(n: u8, input: &[u8]) -> JobSpec {
    JobSpec {
        module: [n; 32],
        input: input.to_vec(),
        timeout_ms: 1_000,
        memory_bytes: None,
        max_attempts: 3,
        priority: 0,
        idempotency_key: None,
    }
}

/// The request id numbered `seq` (of one node process).
pub fn request(seq: u64) -> RequestId {
    RequestId { origin: 0, seq }
}

/// A submission of `spec` as request `seq`.
pub fn submit(seq: u64, spec: JobSpec) -> Command {
    submit_with(seq, spec, JobOptions::default())
}

/// A submission of `spec` with `options` as request `seq`.
pub fn submit_with(seq: u64, spec: JobSpec, options: JobOptions) -> Command {
    Command::Submit {
        spec,
        request: request(seq),
        options,
    }
}

/// Options limiting the jobs of `key`.
pub fn limited(key: &str, running_max: Option<u32>, starts_per_second: Option<u32>) -> JobOptions {
    JobOptions {
        limit: Some(KeyLimit {
            key: key.into(),
            running_max,
            starts_per_second,
        }),
        unique: None,
    }
}

/// Options making the job unique under `key` for `window_ms`.
pub fn unique(key: &str, window_ms: u64) -> JobOptions {
    JobOptions {
        limit: None,
        unique: Some(Unique {
            key: key.into(),
            window_ms,
        }),
    }
}

/// A `Poll` from worker `w` with `free` free slots out of 4.
pub fn poll(w: &str, free: u32) -> Command {
    Command::Poll {
        worker: w.into(),
        slots: 4,
        free,
    }
}

/// A report of `outcome` for attempt `attempt` of job `id` by worker `w`.
pub fn finish(id: JobId, attempt: u32, w: &str, outcome: Outcome) -> Command {
    Command::Finish {
        id,
        attempt,
        worker: w.into(),
        outcome,
        duration_ms: 5,
        log_tail: "done\n".into(),
    }
}

/// A failure outcome with `code`.
pub fn failed(code: &str) -> Outcome {
    Outcome::Failed(Failure {
        code: code.into(),
        message: format!("{code} happened"),
    })
}

/// Every scenario.
pub fn all() -> Vec<Scenario> {
    let t = 1_000_000;
    let mut all = vec![
        success(t),
        priority_and_fifo(t),
        retry_then_dead(t),
        job_error(t),
        lease_expiry(t),
        cancel(t),
        idempotency_keys(t),
        bounded_queue(t),
        worker_lost(t),
        checkpoint_carried(t),
        retention(t),
        request_ids(t),
        key_limits(t),
        unique_keys(t),
        tokens(t),
        dag(t),
        schedules(),
    ];
    // Requests of different scenarios come from different origins, so
    // scenarios replayed on one master (as the host's comparison of the
    // Wasm and native builds does) are distinct submissions.
    for (n, scenario) in all.iter_mut().enumerate() {
        for (_, command) in &mut scenario.steps {
            match command {
                Command::Submit { request, .. } => request.origin = n as u64 + 1,
                Command::SubmitDag(spec) => spec.request.origin = n as u64 + 1,
                _ => {}
            }
        }
    }
    all
}

// One function per scenario, in `all`'s order: a scenario's place numbers
// its requests' origin, so the order is part of what the host compares.

fn success(t: Millis) -> Scenario {
    Scenario {
        name: "success",
        steps: vec![
            (t, submit(1, spec(1, b"a"))),
            (t + 1, poll("w1", 4)),
            (t + 2, finish(1, 1, "w1", Outcome::Succeeded(b"A".to_vec()))),
        ],
    }
}

fn priority_and_fifo(t: Millis) -> Scenario {
    let mut high = spec(2, b"high");
    high.priority = 5;
    Scenario {
        name: "priority and fifo",
        steps: vec![
            (t, submit(1, spec(1, b"1"))),
            (t, submit(2, spec(1, b"2"))),
            (t, submit(3, high)),
            (t + 1, poll("w1", 2)),
            (t + 2, poll("w2", 2)),
        ],
    }
}

fn retry_then_dead(t: Millis) -> Scenario {
    Scenario {
        name: "retry with backoff, then dead",
        steps: vec![
            (t, submit(1, spec(1, b"x"))),
            (t + 1, poll("w1", 1)),
            (t + 2, finish(1, 1, "w1", failed("trap"))),
            (t + 3, poll("w1", 1)),
            (t + 600, Command::Tick),
            (t + 601, poll("w1", 1)),
            (t + 602, finish(1, 2, "w1", failed("timeout"))),
            (t + 2_000, Command::Tick),
            (t + 2_001, poll("w1", 1)),
            (t + 2_002, finish(1, 3, "w1", failed("internal"))),
        ],
    }
}

fn job_error(t: Millis) -> Scenario {
    Scenario {
        name: "job error fails at once",
        steps: vec![
            (t, submit(1, spec(1, b"x"))),
            (t + 1, poll("w1", 1)),
            (t + 2, finish(1, 1, "w1", failed("job_error"))),
        ],
    }
}

fn lease_expiry(t: Millis) -> Scenario {
    Scenario {
        name: "lease expiry, late result ignored",
        steps: vec![
            (t, submit(1, spec(1, b"x"))),
            (t + 1, poll("w1", 1)),
            (t + 1 + 6_001, Command::Tick),
            (t + 8_000, Command::Tick),
            (t + 8_001, poll("w2", 1)),
            (
                t + 8_002,
                finish(1, 1, "w1", Outcome::Succeeded(b"late".to_vec())),
            ),
            (
                t + 8_003,
                finish(1, 2, "w2", Outcome::Succeeded(b"on time".to_vec())),
            ),
            (
                t + 8_004,
                finish(1, 2, "w2", Outcome::Succeeded(b"twice".to_vec())),
            ),
        ],
    }
}

fn cancel(t: Millis) -> Scenario {
    Scenario {
        name: "cancel queued, running and finished",
        steps: vec![
            (t, submit(1, spec(1, b"q"))),
            (t, submit(2, spec(1, b"r"))),
            (t + 1, Command::Cancel { id: 1 }),
            (t + 2, poll("w1", 4)),
            (t + 3, Command::Cancel { id: 2 }),
            (
                t + 4,
                finish(2, 1, "w1", Outcome::Succeeded(b"late".to_vec())),
            ),
            (t + 5, Command::Cancel { id: 2 }),
            (t + 6, Command::Cancel { id: 99 }),
        ],
    }
}

fn idempotency_keys(t: Millis) -> Scenario {
    let mut keyed = spec(1, b"k");
    keyed.idempotency_key = Some("key-1".into());
    let mut other = keyed.clone();
    other.input = b"different".to_vec();
    Scenario {
        name: "idempotency keys",
        steps: vec![
            (t, submit(1, keyed.clone())),
            (t + 1, submit(2, keyed)),
            (t + 2, submit(3, other)),
        ],
    }
}

fn bounded_queue(t: Millis) -> Scenario {
    Scenario {
        name: "bounded queue",
        steps: vec![
            (
                t,
                Command::Configure(Config {
                    queue_max: 2,
                    ..Config::default()
                }),
            ),
            (t, submit(1, spec(1, b"1"))),
            (t, submit(2, spec(1, b"2"))),
            (t, submit(3, spec(1, b"3"))),
            (t + 1, poll("w1", 1)),
            (t + 2, submit(4, spec(1, b"4"))),
        ],
    }
}

fn worker_lost(t: Millis) -> Scenario {
    let mut slow = spec(1, b"slow");
    slow.timeout_ms = 60_000;
    Scenario {
        name: "worker lost by silence and by membership",
        steps: vec![
            (t, submit(1, slow.clone())),
            (t, submit(2, slow)),
            (t + 1, poll("w1", 1)),
            (t + 1, poll("w2", 1)),
            (
                t + 500,
                Command::WorkerGone {
                    worker: "w2".into(),
                },
            ),
            (t + 10_001, Command::Tick),
            (t + 10_002, Command::Tick),
        ],
    }
}

fn checkpoint_carried(t: Millis) -> Scenario {
    Scenario {
        name: "checkpoint carried to the retry",
        steps: vec![
            (t, submit(1, spec(1, b"long"))),
            (t + 1, poll("w1", 1)),
            (
                t + 2,
                Command::Checkpoint {
                    id: 1,
                    attempt: 1,
                    data: b"half".to_vec(),
                },
            ),
            (
                t + 3,
                Command::WorkerGone {
                    worker: "w1".into(),
                },
            ),
            (
                t + 4,
                Command::Checkpoint {
                    id: 1,
                    attempt: 1,
                    data: b"stale".to_vec(),
                },
            ),
            (t + 600, Command::Tick),
            (t + 601, poll("w2", 1)),
        ],
    }
}

fn retention(t: Millis) -> Scenario {
    Scenario {
        name: "retention purges finished jobs",
        steps: vec![
            (t, submit(1, spec(1, b"a"))),
            (t + 1, poll("w1", 1)),
            (t + 2, finish(1, 1, "w1", Outcome::Succeeded(b"A".to_vec()))),
            (t + 3_600_001, Command::Tick),
            (t + 3_600_003, Command::Tick),
        ],
    }
}

fn request_ids(t: Millis) -> Scenario {
    Scenario {
        name: "a request id sent twice is one job, until it expires",
        steps: vec![
            (t, submit(1, spec(1, b"a"))),
            // A forward retried: the same request, the same job.
            (t + 1, submit(1, spec(1, b"a"))),
            // Another request with the same content: another job.
            (t + 2, submit(2, spec(1, b"a"))),
            (t + 3, poll("w1", 1)),
            (t + 4, finish(1, 1, "w1", Outcome::Succeeded(b"A".to_vec()))),
            (t + 5, submit(1, spec(1, b"a"))),
            (t + REQUEST_TTL_MS, Command::Tick),
            (
                t + 2 + REQUEST_TTL_MS + REQUEST_PURGE_PERIOD_MS,
                Command::Tick,
            ),
            // Forgotten: request 1 is new again.
            (
                t + 3 + REQUEST_TTL_MS + REQUEST_PURGE_PERIOD_MS,
                submit(1, spec(1, b"a")),
            ),
        ],
    }
}

fn key_limits(t: Millis) -> Scenario {
    Scenario {
        name: "keys limit running attempts and starts per second",
        steps: vec![
            (
                t,
                submit_with(1, spec(1, b"a"), limited("k", Some(2), None)),
            ),
            (
                t,
                submit_with(2, spec(1, b"b"), limited("k", Some(2), None)),
            ),
            (
                t,
                submit_with(3, spec(1, b"c"), limited("k", Some(2), None)),
            ),
            (t, submit(4, spec(1, b"free"))),
            (
                t,
                submit_with(5, spec(1, b"r1"), limited("r", None, Some(1))),
            ),
            (
                t,
                submit_with(6, spec(1, b"r2"), limited("r", None, Some(1))),
            ),
            // Starts a, b, free and r1: c waits for a place, r2 for
            // the next second.
            (t + 1, poll("w1", 8)),
            (t + 2, poll("w2", 8)),
            (t + 3, finish(1, 1, "w1", Outcome::Succeeded(b"A".to_vec()))),
            // c takes a's place.
            (t + 4, poll("w2", 8)),
            (t + 1_000, poll("w2", 8)),
            // r1 started at t + 1: a second later r2 may start.
            (t + 1_001, poll("w2", 8)),
            (t + 1_002, finish(2, 1, "w1", failed("trap"))),
            (t + 1_003, Command::Cancel { id: 3 }),
        ],
    }
}

fn unique_keys(t: Millis) -> Scenario {
    Scenario {
        name: "a unique key answers with its window's job",
        steps: vec![
            (t, submit_with(1, spec(1, b"a"), unique("u", 1_000))),
            // Within the window, whatever the input: job 1.
            (t + 10, submit_with(2, spec(1, b"b"), unique("u", 1_000))),
            (t + 11, poll("w1", 1)),
            (
                t + 12,
                finish(1, 1, "w1", Outcome::Succeeded(b"A".to_vec())),
            ),
            (t + 999, submit_with(3, spec(1, b"c"), unique("u", 1_000))),
            // The window ended: a new job.
            (t + 1_000, submit_with(4, spec(1, b"d"), unique("u", 1_000))),
            (t + 1_001, submit_with(5, spec(1, b"e"), unique("", 1_000))),
            (t + 1_002, submit_with(6, spec(1, b"f"), unique("v", 0))),
            (
                t + 1_003,
                submit_with(7, spec(1, b"g"), limited("k", None, None)),
            ),
            (
                t + 1_004,
                submit_with(8, spec(1, b"h"), limited("k", Some(0), None)),
            ),
        ],
    }
}

fn tokens(t: Millis) -> Scenario {
    Scenario {
        name: "API tokens are created, refused when invalid or taken, and revoked",
        steps: vec![
            (t, Command::CreateToken(token("ci", &["submit", "read"]))),
            (t + 1, Command::CreateToken(token("ci", &["read"]))),
            (t + 2, Command::CreateToken(token("bad id!", &["read"]))),
            (t + 3, Command::CreateToken(token("x", &["root"]))),
            (t + 4, Command::CreateToken(token("y", &[]))),
            (t + 5, Command::CreateToken(token("ops", &["admin"]))),
            (t + 6, Command::RevokeToken { id: "ci".into() }),
            (t + 7, Command::RevokeToken { id: "ci".into() }),
        ],
    }
}

fn dag(t: Millis) -> Scenario {
    Scenario {
        name: "a DAG runs in order, children get their parents' outputs, a failure skips",
        steps: vec![
            (
                t,
                submit_dag(
                    1,
                    vec![
                        dag_node("a", vec![]),
                        dag_node("b", vec![DagRef::Node(0)]),
                        dag_node("c", vec![DagRef::Node(0), DagRef::Node(1)]),
                        dag_node("f", vec![]),
                        dag_node("g", vec![DagRef::Node(3)]),
                    ],
                    OnFailure::SkipDescendants,
                ),
            ),
            (t + 1, poll("w1", 4)),
            (t + 2, finish(1, 1, "w1", Outcome::Succeeded(b"A".to_vec()))),
            (t + 3, finish(4, 1, "w1", failed("job_error"))),
            (t + 4, poll("w1", 4)),
            (t + 5, finish(2, 1, "w1", Outcome::Succeeded(vec![0, 0xff]))),
            (t + 6, poll("w1", 4)),
            (
                t + 7,
                submit_dag(
                    2,
                    vec![dag_node("x", vec![DagRef::Node(0)])],
                    OnFailure::CancelDag,
                ),
            ),
        ],
    }
}

fn schedules() -> Scenario {
    Scenario {
        name: "schedules fire once per tick, by cron in a time zone and by interval",
        steps: {
            // 2026-03-28T23:59:00Z: Paris skips 02:00-03:00 on the 29th.
            let night = 1_774_742_340_000;
            let cron = Every::Cron {
                expression: "0 */30 * * * *".into(),
                timezone: "Europe/Paris".into(),
            };
            let interval = Every::Interval { ms: 1_000 };
            vec![
                (
                    night,
                    create_schedule("paris", cron, Overlap::AllowAll, 60_000),
                ),
                (
                    night,
                    create_schedule("s", interval.clone(), Overlap::Skip, 0),
                ),
                (
                    night,
                    create_schedule("bad", interval, Overlap::Skip, 8 * 86_400_000),
                ),
                (night + 1_000, Command::Tick),
                (night + 2_000, poll("w1", 1)),
                (night + 3_000, Command::Tick),
                (night + 3_000, Command::Tick),
                // Four hours later: the cron's ticks beyond its minute of
                // catch-up are missed, the rest fire.
                (night + 4 * 3_600_000, Command::Tick),
                (
                    night + 4 * 3_600_000 + 1,
                    Command::Backfill {
                        name: "paris".into(),
                        from: 0,
                        to: u64::MAX,
                    },
                ),
                (
                    night + 4 * 3_600_000 + 2,
                    Command::PauseSchedule {
                        name: "s".into(),
                        paused: true,
                    },
                ),
                (night + 5 * 3_600_000, Command::Tick),
                (
                    night + 5 * 3_600_000 + 1,
                    Command::DeleteSchedule { name: "s".into() },
                ),
            ]
        },
    }
}

/// A command creating schedule `name` of `spec(1, name)`.
pub fn create_schedule(name: &str, every: Every, overlap: Overlap, catch_up_ms: u64) -> Command {
    Command::CreateSchedule(schedule_spec(name, every, overlap, catch_up_ms))
}

/// Schedule `name` of `spec(1, name)`.
pub fn schedule_spec(name: &str, every: Every, overlap: Overlap, catch_up_ms: u64) -> ScheduleSpec {
    ScheduleSpec {
        name: name.into(),
        every,
        job: spec(1, name.as_bytes()),
        options: JobOptions::default(),
        overlap,
        catch_up_ms,
    }
}

/// A DAG job named `name` running `spec(1, name)`, receiving its parents'
/// outputs.
pub fn dag_node(name: &str, after: Vec<DagRef>) -> DagNodeSpec {
    DagNodeSpec {
        name: name.into(),
        spec: spec(1, name.as_bytes()),
        options: JobOptions::default(),
        after,
        outputs: true,
    }
}

/// A DAG submission of `nodes` under request number `seq`.
pub fn submit_dag(seq: u64, nodes: Vec<DagNodeSpec>, on_failure: OnFailure) -> Command {
    Command::SubmitDag(DagSpec {
        nodes,
        on_failure,
        request: request(seq),
        idempotency_key: None,
    })
}

/// A token record with `id` and `scopes` (hash `[7; 32]`).
pub fn token(id: &str, scopes: &[&str]) -> TokenRecord {
    TokenRecord {
        id: id.into(),
        name: format!("{id} token"),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        hash: [7; 32],
        created_at: 0,
    }
}
