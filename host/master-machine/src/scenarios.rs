//! The master's scenarios: command sequences that exercise every
//! transition of the master, written as text scripts in `scenarios/*.txt`
//! beside the crate (format: [`crate::script`]), each command followed by
//! what the master answered.
//!
//! The unit tests run them natively and compare the answers with the ones
//! written in the scripts (`COHORT_BLESS=1` rewrites them); the host's
//! tests replay the same steps through the Wasm build and require
//! byte-identical events, effects, replies, answers and snapshots. The
//! scripts are compiled in, so [`all`] reads no file. A step is
//! `(now, command)`. The helpers below build commands with the defaults
//! the scripts use, for the tests that build theirs in Rust.

use crate::protocol::*;
use crate::script::{self, Script};

/// A named sequence of `(now, command)` steps.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// What it exercises.
    pub name: &'static str,
    /// The steps, in order.
    pub steps: Vec<(Millis, Command)>,
}

/// `[(file, text)]` of the files named, from `scenarios/`.
macro_rules! embed {
    ($($file:literal),* $(,)?) => {
        [$(($file, include_str!(concat!("../scenarios/", $file)))),*]
    };
}

/// The scripts, `(file name in scenarios/, text)`, in order: a scenario's
/// place numbers its requests' origin (from 1), so scenarios replayed on
/// one master (as the host's comparison of the Wasm and native builds
/// does) are distinct submissions, and the order is part of what the host
/// compares. A new scenario is a new file, named at the end of this list.
pub const SCRIPTS: &[(&str, &str)] = &embed![
    "success.txt",
    "priority-and-fifo.txt",
    "retry-with-backoff-then-dead.txt",
    "job-error-fails-at-once.txt",
    "lease-expiry-late-result-ignored.txt",
    "cancel-queued-running-and-finished.txt",
    "idempotency-keys.txt",
    "bounded-queue.txt",
    "worker-lost-by-silence-and-by-membership.txt",
    "checkpoint-carried-to-the-retry.txt",
    "retention-purges-finished-jobs.txt",
    "a-request-id-sent-twice-is-one-job-until-it-expires.txt",
    "keys-limit-running-attempts-and-starts-per-second.txt",
    "a-unique-key-answers-with-its-window-s-job.txt",
    "api-tokens-are-created-refused-when-invalid-or-taken-and-revoked.txt",
    "a-dag-runs-in-order-children-get-their-parents-outputs-a-failure-skips.txt",
    "schedules-fire-once-per-tick-by-cron-in-a-time-zone-and-by-interval.txt",
    "deployments-name-a-module-roll-back-and-resolve-jobs-dags-and-schedules-by-name.txt",
];

/// Every script, read, with its file name.
///
/// # Panics
///
/// If a script is malformed, with its file, line and error.
pub fn scripts() -> Vec<(&'static str, Script<'static>)> {
    (SCRIPTS.iter().zip(1..))
        .map(|(&(file, text), origin)| {
            match script::parse(&format!("scenarios/{file}"), text, origin) {
                Ok(script) => (file, script),
                Err(error) => panic!("{error}"),
            }
        })
        .collect()
}

/// Every scenario, in [`SCRIPTS`]' order.
pub fn all() -> Vec<Scenario> {
    (scripts().into_iter())
        .map(|(_, script)| Scenario {
            name: script.name,
            steps: (script.steps.into_iter())
                .map(|step| (step.at, step.command))
                .collect(),
        })
        .collect()
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
        module: None,
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
        module: None,
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
