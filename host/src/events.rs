//! Node events: what happened to a node, in a form machines can read.
//!
//! The changes an operator (or a test) needs to see, such as the master
//! hosted, handed over or superseded, a worker gone, or the node stopping,
//! are `tracing` events on the target [`TARGET`]. Each carries an `event`
//! field with its name (one of [`ALL`]), fields with its facts, and a
//! message for people. The node's default log filter shows them on stderr,
//! one line each, fields as `key=value` after the message:
//!
//! ```text
//! 2026-11-23T13:43:28.123456Z  INFO cohort::events: hosting the master event=hosting epoch=2 voters=["n1", "n2", "n3"] snapshot=none events_replayed=12 took_ms=84
//! ```
//!
//! Names and fields are a contract, like the API's error codes: `docs/http-api.md`
//! lists them and tests match them. Messages are not. Free text in a field
//! (a reason, an error) is quoted, so a line splits into fields without
//! ambiguity; durations are whole milliseconds (`_ms`).

/// The `tracing` target of every node event.
pub const TARGET: &str = "cohort::events";

/// The node's log filter when `COHORT_LOG` is not set: warnings, and every
/// node event.
pub const DEFAULT_FILTER: &str = "warn,cohort::events=info";

/// Emits the node event `$name` at `$level` (`info`, `warn`, `error`),
/// followed by its fields and message as for `tracing`'s macros.
macro_rules! emit {
    ($level:ident, $name:expr, $($rest:tt)+) => {
        ::tracing::$level!(target: "cohort::events", event = %$name, $($rest)+)
    };
}
pub(crate) use emit;

/// Defines the event names and [`ALL`].
macro_rules! names {
    ($( $(#[doc = $doc:literal])* $constant:ident = $name:literal; )*) => {
        $( $(#[doc = $doc])* pub const $constant: &str = $name; )*
        /// Every event name.
        pub const ALL: &[&str] = &[$($constant),*];
    };
}

names! {
    /// This node hosts the master: `epoch`, `voters`, `snapshot` (the
    /// index it recovered from, or `none`), `events_replayed`, `took_ms`.
    HOSTING = "hosting";
    /// This node stopped hosting the master (flushed, snapshotted):
    /// `epoch`, `took_ms`.
    STOPPED_HOSTING = "stopped_hosting";
    /// This node handed the master over: `to`, `epoch`, `took_ms`.
    HANDED_OVER = "handed_over";
    /// A hand-over failed; the master steps down instead: `to`, `error`.
    HANDOVER_FAILED = "handover_failed";
    /// Another node handed the master over to this one: `from`, `epoch`.
    HANDOVER_RECEIVED = "handover_received";
    /// This node should host the master and waits for `from` to hand it
    /// over.
    HANDOVER_AWAITED = "handover_awaited";
    /// No hand-over came from `from`; this node takes the master over
    /// anyway: `reason` (`not_advertised`, `timeout`, `silent`).
    HANDOVER_MISSED = "handover_missed";
    /// This node should host the master but cannot yet (too few voters
    /// answer): `reason`, `retry_ms`.
    TAKEOVER_DEFERRED = "takeover_deferred";
    /// This node's journal leads the cluster's: `epoch`, `adopted` (the
    /// node whose more advanced journal it copied, or `none`).
    LEADING = "leading";
    /// This node's journal stopped leading: `epoch`, `newer` (the epoch
    /// that superseded it, or the same epoch when it let go).
    STEPPED_DOWN = "stepped_down";
    /// This node led without a master started for too long and lets go.
    LEAD_ABANDONED = "lead_abandoned";
    /// This node's master was superseded by a newer one; it steps down and
    /// rejoins as the youngest node: `epoch`, `newer`.
    SUPERSEDED = "superseded";
    /// The master's shadow, which takes its snapshots off the master's
    /// thread, failed; the master takes them itself from now on: `error`.
    MASTER_SHADOW_FAILED = "master_shadow_failed";
    /// This node's warm standby recovered and follows the journal:
    /// `index`, `snapshot`, `events_replayed`, `took_ms`.
    STANDBY_READY = "standby_ready";
    /// This node's warm standby ended (another starts): `reason`.
    STANDBY_ENDED = "standby_ended";
    /// The voter set changed: `voters`.
    VOTERS_CHANGED = "voters_changed";
    /// Replication found something that should not happen: `reason`.
    REPLICATION_FAULT = "replication_fault";
    /// An unfinished write was cut from the journal's end at start:
    /// `bytes`.
    JOURNAL_TORN = "journal_torn";
    /// A worker left the cluster; its attempts are re-queued: `worker`.
    WORKER_GONE = "worker_gone";
    /// An attempt the master believed a worker ran never reached it, and
    /// is re-queued: `job`, `attempt`, `worker`.
    ATTEMPT_REQUEUED = "attempt_requeued";
    /// Attempts still running past the grace period when the worker
    /// stopped were stopped: `count`, `grace_ms`.
    ATTEMPTS_STOPPED = "attempts_stopped";
    /// This node compiled a job module into its compiled cache: `digest`,
    /// `when` (`announced`: ahead of its first job here, when the module
    /// was stored; `first_job`: for a job), `took_ms`.
    MODULE_COMPILED = "module_compiled";
    /// A stored module does not compile or link on this node; its jobs
    /// fail with `code`: `digest`, `code`, `error`.
    MODULE_UNUSABLE = "module_unusable";
    /// The node stops: `cause` (`SIGTERM`, `interrupt`, `leave`),
    /// `grace_ms`.
    STOPPING = "stopping";
    /// The node stopped cleanly.
    STOPPED = "stopped";
    /// The master switched to another build (`cohort master upgrade` or
    /// `rollback`): `from`, `to` (`built-in` or `sha256:…`), `replayed`
    /// (events the new build replayed in its check).
    MASTER_SWITCHED = "master_switched";
    /// Fault injection (tests): the addresses this node is cut off from
    /// changed: `cut_off`.
    PARTITION = "partition";
    /// The node deleted its copies of blobs the cluster no longer keeps
    /// (`cluster::blob_gc`): `count`, `bytes`.
    BLOBS_DELETED = "blobs_deleted";
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    /// What the node's log writer received.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn names_are_unique_and_the_readme_lists_exactly_them() {
        let names: BTreeSet<&str> = ALL.iter().copied().collect();
        assert_eq!(names.len(), ALL.len(), "an event name repeats");
        let section = crate::doc_section("docs/http-api.md", "\n## Logging\n");
        let listed: BTreeSet<&str> = section
            .lines()
            .filter_map(|row| row.strip_prefix("| `"))
            .filter_map(|row| row.split('`').next())
            .collect();
        assert_eq!(
            listed, names,
            "docs/http-api.md's event table vs events::ALL"
        );
    }

    /// The default filter shows events (and warnings) and nothing else,
    /// as a line with `event=NAME` and the fields, free text quoted.
    #[test]
    fn the_default_filter_prints_events_as_key_value_lines() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_env_filter(tracing_subscriber::EnvFilter::new(DEFAULT_FILTER))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            emit!(
                info,
                HOSTING,
                epoch = 2u64,
                reason = "two words",
                "hosting the master"
            );
            tracing::info!(target: "cohort::node", "not an event: hidden by default");
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("not an event"), "{text}");
        let line = text.lines().next().unwrap();
        assert!(line.contains(TARGET), "{line}");
        assert!(
            line.ends_with(r#"hosting the master event=hosting epoch=2 reason="two words""#),
            "{line}"
        );
    }
}
