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
//! `(now, command)`. The commands' builders with the scripts' defaults
//! are in [`crate::steps`] (re-exported here, for the tests that build
//! their steps in Rust).

use crate::protocol::*;
use crate::script::{self, Script};
pub use crate::steps::*;

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
    "grants-travel-with-a-deployment-name-to-each-attempt-and-calls-are-recorded.txt",
    "recorded-calls-replayed-to-the-next-attempt.txt",
    "jobs-read-an-input-blob-and-dag-children-read-their-parents-output-blobs.txt",
    "a-job-starts-where-its-input-blob-is-waiting-a-bounded-time-for-it.txt",
    "a-worker-renews-the-lease-of-an-attempt-it-prepares.txt",
    "jobs-start-only-on-a-worker-with-their-labels-and-memory.txt",
    "idempotency-keys-belong-to-a-namespace-and-names-are-checked.txt",
    "quotas-hold-one-namespace-back-and-no-other.txt",
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
