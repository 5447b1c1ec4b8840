//! Every limit of the master, in one place (as TigerBeetle's
//! `constants.zig`): sizes, counts, windows and periods that bound what a
//! command may ask and what one decision may do. A limit is written here
//! and only here; the module that enforces it imports it. Where one limit
//! must fit another, a compile-time assert at the end says so.

use crate::protocol::Millis;

// Jobs and their attempts.
/// Longest idempotency key.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 256;
/// Bytes of an attempt's log kept (its end).
pub const LOG_TAIL_BYTES_MAX: usize = 4096;
/// Longest duration a configuration may set (a year).
pub const CONFIG_DURATION_MS_MAX: u64 = 365 * 24 * 3_600_000;
/// Largest `attempts_max` a configuration may set.
pub const ATTEMPTS_MAX_MAX: u32 = 10_000;

// Workers.
/// Longest worker id.
pub const WORKER_ID_BYTES_MAX: usize = 256;
/// A polling worker is journaled as seen this many times per worker TTL
/// (not on every poll), so it is never lost while it polls.
pub const WORKER_SEEN_PER_TTL: u64 = 4;

// Submissions remembered by request id.
/// How long after its decision a submission's request id is remembered at
/// least. A node sends a request again only within `PROXY_WAIT` (10 s) of
/// sending it first, so the resend is decided seconds after the first
/// copy, unless the master is frozen in between: one paused for longer
/// than the failure detector allows is replaced, and its late decisions
/// never commit. Five minutes leaves a wide margin. (A lone back-end node,
/// which nobody replaces, frozen for longer than this between deciding a
/// submission and deciding its resend would make a second job.)
pub const REQUEST_TTL_MS: Millis = 5 * 60_000;
/// Expired request ids are forgotten together, once the oldest is this far
/// past [`REQUEST_TTL_MS`]: one event per period under steady load, not
/// one per tick.
pub const REQUEST_PURGE_PERIOD_MS: Millis = 10_000;
/// Most request ids remembered; beyond, the oldest is forgotten at each new
/// submission. At the highest submission rate measured (about 100,000 per
/// second in bursts, BENCHMARKS.md) this still covers 10 s, as long as a
/// node resends one request; at sustained rates (about 10,000 per second),
/// 100 s. Full, the table takes about 125 MiB if every id came alone (a
/// run each, a little more than the 110 MiB measured for one map entry
/// per id) and a few MiB if they came in batches (`Requests`).
pub const REQUESTS_MAX: usize = 1_000_000;

// Keys: limits, rates and uniqueness.
/// Longest concurrency, rate or uniqueness key.
pub const KEY_BYTES_MAX: usize = 256;

/// Longest namespace name, in bytes (a DNS label's length: names travel in
/// URLs, headers and metric labels).
pub const NAMESPACES_NAME_BYTES_MAX: usize = 63;

/// Most namespaces the master keeps totals for (each a few dozen bytes);
/// a job in a namespace beyond them is refused.
pub const NAMESPACES_MAX: usize = 10_000;

/// Largest quota of jobs waiting or attempts running a namespace may be
/// given (see [`crate::quotas`]): past any queue a cluster holds.
pub const QUOTA_JOBS_MAX: u64 = 1_000_000_000;

/// Largest quota of submissions a second (see [`crate::quotas`]): far
/// past what one master decides.
pub const QUOTA_RATE_MAX: u64 = 1_000_000;

/// Largest quota of result bytes kept (see [`crate::quotas`]): 1 PiB.
pub const QUOTA_BYTES_MAX: u64 = 1 << 50;

/// Largest weight a namespace may have for its fair share (see
/// [`crate::shares`]).
pub const WEIGHT_MAX: u32 = 10_000;
/// Largest `running_max` and `starts_per_second` a key limit may ask for.
pub const KEY_LIMIT_MAX: u32 = 10_000;
/// The window a key's `starts_per_second` counts starts in.
pub const RATE_WINDOW_MS: Millis = 1_000;
/// Ended uniqueness holds and idle rate windows forgotten per event that
/// adds one: they go faster than they come, and no event does unbounded
/// work.
pub(crate) const FORGET_PER_EVENT: usize = 8;
/// Longest uniqueness window (30 days).
pub const UNIQUE_WINDOW_MS_MAX: Millis = 30 * 24 * 3_600_000;
/// Most uniqueness keys held at once (`unique_keys_full` beyond, until
/// windows end).
pub const UNIQUE_KEYS_MAX: usize = 1_000_000;

// Queries and listings.
/// Most jobs one listing returns.
pub const LIST_LIMIT_MAX: u32 = 1000;
/// Longest text a [`JobFilter`](crate::protocol::JobFilter) looks for in errors.
pub const FILTER_TEXT_BYTES_MAX: usize = 256;
/// Most ids a [`JobFilter`](crate::protocol::JobFilter) may name.
pub const FILTER_IDS_MAX: usize = 1000;
/// Most finished jobs one [`Query::Recent`](crate::protocol::Query::Recent) looks at.
pub const RECENT_SCAN_MAX: usize = 100_000;
/// Most ids one [`Query::Finished`](crate::protocol::Query::Finished) may ask about: the API's most jobs
/// per batch, so a client may wait for a whole batch in one request.
pub const FINISHED_IDS_MAX: usize = 10_000;
/// Most jobs one listing looks at (a filtered listing returns a cursor to
/// continue rather than scanning everything).
pub const LIST_SCAN_MAX: usize = 100_000;

// Bulk operations.
/// Most jobs one [`Command::Bulk`](crate::protocol::Command::Bulk) changes (run it again for the rest).
pub const BULK_MAX: usize = 10_000;

// API tokens.
/// Most API tokens kept.
pub const TOKENS_MAX: usize = 10_000;
/// Longest token id.
pub const TOKEN_ID_BYTES_MAX: usize = 64;
/// Longest token name.
pub const TOKEN_NAME_BYTES_MAX: usize = 256;

// Schedules and the tick.
/// Most schedules a cluster holds.
pub const SCHEDULES_MAX: usize = 10_000;
/// Longest schedule name, in bytes.
pub const SCHEDULE_NAME_BYTES_MAX: usize = 128;
/// Longest cron expression, in bytes.
pub const EXPRESSION_BYTES_MAX: usize = 256;
/// Shortest interval (cron's own resolution is a second as well).
pub const INTERVAL_MS_MIN: Millis = 1_000;
/// Longest interval.
pub const INTERVAL_MS_MAX: Millis = 366 * 24 * 3_600_000;
/// Longest catch-up window.
pub const CATCH_UP_MS_MAX: Millis = 7 * 24 * 3_600_000;
/// Most ticks one backfill fires.
pub const BACKFILL_TICKS_MAX: usize = 1_000;
/// Missed ranges kept per schedule (the oldest are forgotten beyond it).
pub const MISSED_RANGES_MAX: usize = 100;
/// Next ticks a schedule's view lists.
pub const UPCOMING_MAX: usize = 5;
/// How late a tick may be decided and still count as on time, whatever
/// the catch-up window: the host ticks the master every 100 ms, and a busy
/// master may come to a tick a little later (so a window of 0 means "never
/// fire late", not "miss every tick").
pub const LATE_GRACE_MS: Millis = 1_000;
/// Most ticks of one schedule one `Tick` decides (the rest wait for the
/// next `Tick`, a tenth of a second later).
pub const TICKS_PER_TICK_MAX: usize = 1_000;
/// Most events one `Tick` produces; the rest wait for the next tick.
pub const TICK_EVENTS_MAX: usize = 4096;

// DAGs.
/// Most jobs in one DAG.
pub const DAG_JOBS_MAX: usize = 10_000;
/// Most parents of one job.
pub const PARENTS_MAX: usize = 100;
/// Most edges in one DAG.
pub const EDGES_MAX: usize = 100_000;
/// Most input bytes of all a DAG's jobs together.
pub const DAG_INPUT_BYTES_MAX: u64 = 16 << 20;
/// Longest name of a DAG's job, in bytes.
pub const NODE_NAME_BYTES_MAX: usize = 128;

// Deployments (module names).
/// Longest deployment name, in bytes: below 64, so a name is never a hex
/// digest.
pub const MODULE_NAME_BYTES_MAX: usize = 63;
/// Most deployment names held (`module_names_full` beyond).
pub const MODULE_NAMES_MAX: usize = 10_000;
/// Versions kept per deployment name: the newest; older ones are
/// forgotten (a rollback to one is refused with
/// `module_version_not_found`), their numbers never reused.
pub const MODULE_VERSIONS_KEPT: usize = 50;

// Egress grants and call records (see `crate::egress`).
/// Longest URL pattern of a grant, in bytes.
pub const GRANT_URL_BYTES_MAX: usize = 1024;
/// Most methods one grant lists.
pub const GRANT_METHODS_MAX: usize = 16;
/// Most grants one deployment name holds (`too_many_grants` beyond).
pub const GRANTS_PER_NAME_MAX: usize = 32;
/// Most secrets one deployment name's jobs may read (`too_many_grants`
/// beyond).
pub const GRANT_SECRETS_MAX: usize = 16;
/// Most calls kept in one attempt's record: the first ones; the rest are
/// counted (`calls_dropped`).
pub const CALLS_RECORDED_MAX: usize = 64;
/// Longest method a grant lists, in bytes (letters only).
pub const GRANT_METHOD_BYTES_MAX: usize = 16;
/// Longest header name a grant sets, in bytes.
pub const GRANT_HEADER_NAME_BYTES_MAX: usize = 64;
/// Longest method kept in a call's record, in bytes.
pub const CALL_METHOD_BYTES_MAX: usize = 32;
/// Longest origin (`scheme://host:port`) kept in a call's record, in
/// bytes: a DNS name's 253 and the rest.
pub const CALL_ORIGIN_BYTES_MAX: usize = 300;
/// Longest error code kept in a call's record, in bytes.
pub const CALL_ERROR_BYTES_MAX: usize = 64;
/// Most headers one grant sets.
pub const GRANT_HEADERS_MAX: usize = 8;
/// Longest value template of a grant's header, in bytes.
pub const GRANT_HEADER_BYTES_MAX: usize = 1024;

// Secrets (see `crate::grants`).
/// Longest secret name, in bytes.
pub const SECRET_NAME_BYTES_MAX: usize = 64;
/// Most secrets held (`secrets_full` beyond).
pub const SECRETS_MAX: usize = 1_000;
/// Largest sealed value of a secret, in bytes: its plaintext (at most
/// 16 KiB, checked by the node that seals it) and the seal's overhead.
pub const SECRET_SEALED_BYTES_MAX: usize = (16 << 10) + 128;

// Recorded calls (see `crate::tapes`).
/// Longest URL of a recorded call, in bytes (the query included).
pub const RECORD_URL_BYTES_MAX: usize = 8 << 10;
/// Most response headers a recorded call keeps.
pub const RECORD_HEADERS_MAX: usize = 64;
/// Most bytes of a recorded call's response headers, names and values.
pub const RECORD_HEADER_BYTES_MAX: usize = 32 << 10;
/// Largest response body a recorded call keeps: a larger one fails the
/// call (`egress_record_too_large`), since it could not be replayed.
pub const RECORD_BODY_BYTES_MAX: usize = 1 << 20;
/// Most clock and random reads kept with one recorded call: the first
/// ones; a later attempt replays those and reads the rest anew.
pub const RECORD_READS_MAX: usize = 4096;
/// What one kept read counts for at least against [`TAPE_BYTES_MAX`]: a
/// clock read's seconds and nanoseconds, with room for their encoding.
pub const READ_BYTES_MIN: usize = 16;
/// Most random bytes kept with one recorded call, all its reads together.
pub const RECORD_RANDOM_BYTES_MAX: usize = 64 << 10;
/// Most recorded calls a job keeps (since its last checkpoint): a call
/// past it fails (`egress_record_too_large`).
pub const TAPE_CALLS_MAX: usize = 1024;
/// Most bytes of recorded calls a job keeps (since its last checkpoint),
/// bodies, headers, URLs and reads together.
pub const TAPE_BYTES_MAX: u64 = 8 << 20;

// Blobs (see `crate::blobs`).
/// Longest name of an output blob, in bytes (ASCII letters, digits, `.`,
/// `_` and `-`).
pub const OUTPUT_NAME_BYTES_MAX: usize = 128;
/// Most output blobs one job writes (a report with more is refused).
pub const OUTPUTS_MAX: usize = 64;
/// What an output blob counts for against a configuration's
/// `results_bytes_total_max`, beyond its name: its digest and size.
pub const OUTPUT_BYTES_FIXED: u64 = 32 + 8;

/// Most blobs the cluster keeps for uploads ([`Command::KeepBlob`](crate::Command::KeepBlob)):
/// an upload past it is refused (`blobs_full`) until blobs are dropped or
/// collected. The blobs held jobs and schedules name are kept whatever
/// this count, bounded by the jobs' own bounds (at most
/// [`OUTPUTS_MAX`] outputs and one input each). Each costs the master
/// some 100 bytes.
pub const BLOBS_KEPT_MAX: usize = 1_000_000;

/// Most blobs one tick stops keeping (`BlobsCollected`, one event); the
/// rest wait for the next tick.
pub const BLOBS_COLLECTED_MAX: usize = 1024;

/// Most blobs one [`Query::Blobs`](crate::Query::Blobs) asks about.
pub const BLOBS_ASKED_MAX: usize = 1024;

/// Most attempts one [`Command::Renew`](crate::Command::Renew) renews: a
/// worker sends one for all the attempts it is preparing or keeping
/// outputs for, at most one per slot.
pub const RENEWALS_MAX: usize = 1024;

// Data locality (see `crate::locality`).
/// Most blobs a worker's poll says it holds ([`BlobPrefix`](crate::BlobPrefix)es of 8
/// bytes: 4 KiB at most): the ones its node used last.
pub const HOLDS_MAX: usize = 512;
/// How far into the line of ready jobs a poll looks for jobs to start
/// when it passes some over for locality: a job whose input the polling
/// worker holds goes ahead of at most this many before it.
pub const LOCALITY_SCAN_MAX: usize = 128;
/// Longest `locality_wait_ms` a configuration may set.
pub const LOCALITY_WAIT_MS_MAX: Millis = 60_000;

// Worker pools (see `crate::pools`).
/// Most labels a worker has or a job asks for.
pub const LABELS_MAX: usize = 16;
/// Longest label key or value, in bytes.
pub const LABEL_BYTES_MAX: usize = 63;

// Snapshots.
/// The most a part's buffer is allocated with before it is written (a
/// part asked to be larger grows as it is written).
pub(crate) const SNAPSHOT_PART_PRESIZE_MAX: usize = 4 << 20;

// How the limits fit together.
const _: () = {
    // A listing can fill its largest page from what it may scan.
    assert!(LIST_LIMIT_MAX as usize <= LIST_SCAN_MAX);
    assert!(LIST_LIMIT_MAX as usize <= RECENT_SCAN_MAX);
    // A filter names no more jobs than one page can show.
    assert!(FILTER_IDS_MAX <= LIST_LIMIT_MAX as usize);
    // Expired request ids are purged well within their time to live, so an
    // id is forgotten at most one period late.
    assert!(REQUEST_PURGE_PERIOD_MS < REQUEST_TTL_MS);
    // A tick on time by the grace is still before the next tick of the
    // shortest interval.
    assert!(LATE_GRACE_MS <= INTERVAL_MS_MIN);
    // A job waits for fewer parents than a DAG has jobs.
    assert!(PARENTS_MAX < DAG_JOBS_MAX);
    // One tick's events can hold every tick one schedule may fire in it.
    assert!(TICKS_PER_TICK_MAX <= TICK_EVENTS_MAX);
    // A deployment name is never mistaken for a module's hex digest.
    assert!(MODULE_NAME_BYTES_MAX < 64);
    // A rollback has a version before the current one to go to.
    assert!(MODULE_VERSIONS_KEPT >= 2);
    // A job's record holds at least one call of every size.
    assert!(
        (RECORD_BODY_BYTES_MAX
            + RECORD_HEADER_BYTES_MAX
            + RECORD_URL_BYTES_MAX
            + RECORD_RANDOM_BYTES_MAX
            + RECORD_READS_MAX * READ_BYTES_MIN) as u64
            <= TAPE_BYTES_MAX
    );
    // Every name fits one answer of `Query::Deployments`.
    assert!(MODULE_NAMES_MAX <= FINISHED_IDS_MAX);
    // The blobs an attempt may read (its input, and every output of each
    // of its parents, named `PARENT/OUTPUT`) take no more of its
    // assignment than the record of calls it may carry.
    assert!(
        (1 + PARENTS_MAX * OUTPUTS_MAX) as u64
            * ((NODE_NAME_BYTES_MAX + 1 + OUTPUT_NAME_BYTES_MAX) as u64 + OUTPUT_BYTES_FIXED)
            <= TAPE_BYTES_MAX
    );
};
