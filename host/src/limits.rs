//! Every limit of this crate: sizes, counts, timeouts, waits, intervals and
//! retries, in one place (as TigerBeetle's `constants.zig`).
//!
//! **The rule: a limit of the `cohort` crate is written here and only
//! here**; the modules it bounds import it (`use crate::limits::...`). One
//! file shows what bounds the node and how the bounds fit together: where
//! one limit must fit within another, a compile-time assert says so next
//! to them, with why, so changing one value cannot silently break another.
//!
//! What is not here: constants that are not limits (routes, format and
//! version bytes, names, an encoding's magic numbers, header sizes of a
//! format), test-only constants, and the limits of the master's state
//! machine and of the replication protocol, which live in their crates
//! (`cohort_master`, `cohort_replication`) and are referred to from here.
//!
//! This module is on the ground floor (`layers.rs`): it imports nothing
//! from the crate.

use std::time::Duration;

// ---- HTTP API: connections, headers and bodies

/// Connections served at once (each may hold a long-poll and a body).
pub const CONNECTIONS_MAX: usize = 4096;
/// Connections one client address may hold at once. The cluster's own
/// nodes are not counted: a node forwarding to the master holds one
/// connection per request in flight.
pub const CONNECTIONS_PER_CLIENT_MAX: usize = 256;
/// A client must send its request headers within this.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// A TLS handshake must finish within this.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest spent writing the `429` to a client over its connection bound.
pub(crate) const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause after a failed `accept` (out of file descriptors and the like).
pub(crate) const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(50);
/// Time given to open connections to finish when the node stops.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Every body gets this long, plus [`BODY_RATE_MIN`] for its size.
pub const BODY_READ_BASE: Duration = Duration::from_secs(10);
/// The slowest body rate waited for, in bytes a second.
pub const BODY_RATE_MIN: u64 = 1 << 20;

/// Largest `POST /v1/jobs` body: a 4 MiB input in base64 plus the fields.
pub const JOB_BODY_BYTES_MAX: usize = 6 << 20;
/// Largest `POST /v1/jobs/batch` body; also the node-to-node route to the
/// master (`/internal/v1/master`), which carries the proxy's batches.
pub const BATCH_BODY_BYTES_MAX: usize = 64 << 20;
/// Most jobs in one batch.
pub const BATCH_JOBS_MAX: usize = 10_000;
/// Largest `POST /v1/jobs/wait` body: 10,000 ids of 20 digits and commas.
pub const WAIT_BODY_BYTES_MAX: usize = 256 << 10;
/// Largest body of the small control requests (token operations, a module
/// fetch by digest).
pub const CONTROL_BODY_BYTES_MAX: usize = 64 << 10;
/// Largest value of a secret (`cohort secret set`), in bytes: sealed, it
/// stays within the master's bound of a sealed secret.
pub const SECRET_VALUE_BYTES_MAX: usize = 16 << 10;

// A batch can carry at least one job of the largest size.
const _: () = assert!(BATCH_BODY_BYTES_MAX >= JOB_BODY_BYTES_MAX);
// A client waits for all of a batch's jobs with one wait request.
const _: () = assert!(BATCH_JOBS_MAX <= cohort_master::limits::FINISHED_IDS_MAX);
// A wait naming as many ids as the master answers for (a u64 is at most 20
// digits, plus a comma) fits the wait's body limit.
const _: () = assert!(cohort_master::limits::FINISHED_IDS_MAX * 21 <= WAIT_BODY_BYTES_MAX);

// ---- HTTP API: what requests may ask for

/// Longest idempotency key, in characters (within the master's limit in
/// bytes, whatever the characters).
pub const IDEMPOTENCY_KEY_CHARS_MAX: usize = 64;
/// Longest concurrency or uniqueness key, in characters (within the
/// master's limit in bytes, whatever the characters).
pub const KEY_CHARS_MAX: usize = 64;
/// Longest token name, in characters (within the master's limit in bytes).
pub const TOKEN_NAME_CHARS_MAX: usize = 64;
/// Longest text a filter looks for in errors (within the master's
/// bound in bytes, whatever the characters).
pub const FILTER_TEXT_CHARS_MAX: usize = cohort_master::limits::FILTER_TEXT_BYTES_MAX / 4;

// A character is at most 4 bytes of UTF-8: any key or name the API takes
// fits the master's limit in bytes.
const _: () =
    assert!(IDEMPOTENCY_KEY_CHARS_MAX * 4 <= cohort_master::limits::IDEMPOTENCY_KEY_BYTES_MAX);
const _: () = assert!(KEY_CHARS_MAX * 4 <= cohort_master::limits::KEY_BYTES_MAX);
const _: () = assert!(TOKEN_NAME_CHARS_MAX * 4 <= cohort_master::limits::TOKEN_NAME_BYTES_MAX);

/// Longest `wait_ms` honoured.
pub const WAIT_MS_MAX: u64 = 60_000;
/// Largest output `POST /v1/jobs/wait` sends inline.
pub const WAIT_OUTPUT_BYTES_MAX: u64 = 64 << 10;
/// Most output bytes one `POST /v1/jobs/wait` answer sends inline.
pub const WAIT_OUTPUTS_BYTES_MAX: u64 = 4 << 20;
/// Jobs per page of `GET /v1/jobs` when `limit` is not given.
pub const LIST_LIMIT_DEFAULT: u32 = 100;
/// The catch-up window of a schedule that does not give one.
pub const CATCH_UP_MS_DEFAULT: u64 = 60_000;
/// Longest a voter removal asked of the master's node may take.
pub(crate) const VOTER_CHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for the master's token list when a request names an
/// unknown token.
pub(crate) const TOKEN_REFRESH_WAIT: Duration = Duration::from_secs(2);

// ---- HTTP API: the dashboard's event streams

/// Time between two overviews on an event stream.
pub const EVENTS_INTERVAL: Duration = Duration::from_secs(1);
/// Events queued ahead of a slow reader; beyond, the stream's task waits
/// to send, so a slow reader slows its own stream and queues nothing more.
pub(crate) const EVENTS_BUFFERED: usize = 2;
/// Event streams one node serves at once.
pub const EVENT_STREAMS_MAX: usize = 64;
/// The window of the overview's recent finishes and latency.
pub const RECENT_MS: u64 = 10_000;

// ---- The proxy to the master (`cluster`)

/// Longest a call waits for a reachable master.
pub const PROXY_WAIT: Duration = Duration::from_secs(10);
/// Most calls waiting for a master at once.
pub const PROXY_WAITING_MAX: usize = 1024;
/// Pause between a call's attempts while no master answers.
pub(crate) const PROXY_RETRY_PAUSE: Duration = Duration::from_millis(20);
/// Extra time allowed on the wire beyond a call's own wait.
pub(crate) const WIRE_SLACK: Duration = Duration::from_secs(10);
/// Longest an upgrade's check may take on the master's node.
pub const UPGRADE_WAIT: Duration = Duration::from_secs(120);
/// Batches of commands on the wire at once per destination.
pub const PROXY_BATCHES_IN_FLIGHT: usize = 2;
/// Most commands in one batch.
pub const BATCH_COMMANDS_MAX: usize = 1024;
/// Most encoded bytes of commands in one batch (a single larger command
/// goes alone); well within the route's body limit.
pub(crate) const BATCH_BYTES_MAX: usize = BATCH_BODY_BYTES_MAX / 4;

// A batch of commands, with its few bytes of framing, fits the body limit
// of the route that receives it (`/internal/v1/master`).
const _: () = assert!(BATCH_BYTES_MAX < BATCH_BODY_BYTES_MAX);
// A command's exchange outlasts the master's commit wait, so a batch that
// does not commit is answered `replicas_unavailable`, not timed out as
// an unknown outcome.
const _: () = assert!(COMMIT_WAIT.as_millis() < WIRE_SLACK.as_millis());

/// Pause before trying again to start a master that could not start yet.
pub const MASTER_START_RETRY: Duration = Duration::from_millis(250);
/// How long a worker must stay out of the live set before its attempts are
/// re-queued (a worker that comes back sooner keeps them).
pub const WORKER_LOST_AFTER: Duration = Duration::from_secs(2);
/// How long a node that rejoined listens to gossip before deciding again
/// (its fresh view first shows only itself).
pub(crate) const REJOIN_SETTLE: Duration = Duration::from_secs(1);
/// Entries of the cluster's history (members, master moves) a node keeps,
/// newest first.
pub const CLUSTER_HISTORY_MAX: usize = 50;

// ---- `cohort exec`

/// Most bytes of compiled modules `cohort exec` keeps in its per-user
/// cache: a few dozen Python or JavaScript jobs (their size compiled is in
/// BENCHMARKS.md, `#exec-first-run`), far more Rust ones.
pub const EXEC_CACHE_BYTES_MAX: u64 = 2 << 30;

// ---- Workers

/// Longest a poll waits for work; also the heartbeat period.
pub const POLL_WAIT: Duration = Duration::from_secs(1);
/// Pause after a failed poll before the next.
pub(crate) const POLL_RETRY: Duration = Duration::from_millis(200);
/// Least time between two checkpoints of one attempt sent to the master:
/// a job may checkpoint after every slice of work, and each recorded one is
/// a journal write.
pub(crate) const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(500);
/// How often a worker renews the lease of an attempt it is preparing or
/// keeping the outputs of, beyond the first moment (see the worker's
/// module docs): a quarter of the lease's grace, within these bounds, so
/// that three renewals in a row may be lost or late before the lease runs
/// out. The floor only matters for a grace under [`LEASE_GRACE_MIN`]
/// (one the master was given otherwise): it keeps a grace of 0 from
/// renewing in a loop.
pub(crate) const RENEW_EVERY_MIN: Duration = Duration::from_millis(100);
pub(crate) const RENEW_EVERY_MAX: Duration = Duration::from_secs(1);
/// Bounds of `--lease-grace`: shorter would lose attempts to a slow
/// report; longer leaves a hung attempt's job waiting for hours.
pub const LEASE_GRACE_MIN: Duration = Duration::from_secs(1);
pub const LEASE_GRACE_MAX: Duration = Duration::from_secs(3600);
/// Longest a stopping worker tries to tell the master it is gone.
pub(crate) const GONE_REPORT_WAIT: Duration = Duration::from_secs(2);
/// Longest an attempt's outcome report is retried while no master takes it.
pub(crate) const REPORT_RETRY_WAIT: Duration = Duration::from_secs(30);
/// Attempts whose outcome may be on its way to the master at once (slots
/// are freed before the report is acknowledged).
pub(crate) const REPORTING_MAX: usize = 1 << 20;
/// Most attempts per slot a worker takes beyond its free slots while its
/// jobs are short (see the worker's module docs). Throughput bench, one
/// node with the default slots and a fixed prefetch: 1 per slot 27k
/// jobs/s, 4 39k/s, 16 43k/s.
pub(crate) const PREFETCH_PER_SLOT_MAX: u64 = 16;
/// Moving average of attempts' run time under which a worker prefetches.
pub(crate) const PREFETCH_RUN_MAX: Duration = Duration::from_millis(5);
/// Bytes of the end of an attempt's log sent with its outcome: all the
/// master keeps.
pub(crate) const LOG_TAIL_BYTES: usize = cohort_master::limits::LOG_TAIL_BYTES_MAX;
/// Default worker slots per CPU, and the least.
pub(crate) const SLOTS_PER_CPU: u32 = 8;
pub(crate) const SLOTS_MIN: u32 = 16;

// An outcome report outlasts one proxy call's wait for a master, so it is
// retried across a master's move rather than given up after one try.
const _: () = assert!(PROXY_WAIT.as_millis() < REPORT_RETRY_WAIT.as_millis());

// ---- Jobs: the resources of one attempt

/// Default linear-memory ceiling of one job: 256 MiB.
pub const MEMORY_BYTES_DEFAULT: u64 = 256 << 20;
/// Default wall-clock time one attempt may run: 60 s.
pub const TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// Default largest output a job may return: 16 MiB.
pub const OUTPUT_BYTES_DEFAULT: u64 = 16 << 20;
/// Default log bytes kept per job (stdout, stderr and `log` lines together).
pub const LOG_BYTES_DEFAULT: u64 = 1 << 20;
/// Default largest checkpoint a job may save: 16 MiB.
pub const CHECKPOINT_BYTES_DEFAULT: u64 = 16 << 20;

/// Largest linear memory anyone can ask for: 4 GiB, a 32-bit memory's
/// whole address space. This and the other ceilings are hard: no request
/// may go above them, whatever the node config.
pub const MEMORY_BYTES_CEILING: u64 = 4 << 30;
/// Longest timeout anyone can ask for: 24 h.
pub const TIMEOUT_MS_CEILING: u64 = 24 * 3600 * 1000;
/// Largest output anyone can ask for: 256 MiB.
pub const OUTPUT_BYTES_CEILING: u64 = 256 << 20;
/// Largest log anyone can ask for: 64 MiB.
pub const LOG_BYTES_CEILING: u64 = 64 << 20;
/// Largest checkpoint anyone can ask for: 256 MiB.
pub const CHECKPOINT_BYTES_CEILING: u64 = 256 << 20;

// The default limits pass `JobLimits::validate`.
const _: () = assert!(
    MEMORY_BYTES_DEFAULT <= MEMORY_BYTES_CEILING
        && TIMEOUT_MS_DEFAULT <= TIMEOUT_MS_CEILING
        && OUTPUT_BYTES_DEFAULT <= OUTPUT_BYTES_CEILING
        && LOG_BYTES_DEFAULT <= LOG_BYTES_CEILING
        && CHECKPOINT_BYTES_DEFAULT <= CHECKPOINT_BYTES_CEILING
);

/// Longest progress message kept, in bytes.
pub(crate) const PROGRESS_MESSAGE_BYTES_MAX: usize = 256;
/// Longest job-error code kept, in bytes.
pub(crate) const ERROR_CODE_BYTES_MAX: usize = 64;
/// Longest job-error message kept, in bytes.
pub(crate) const ERROR_MESSAGE_BYTES_MAX: usize = 4096;
/// Largest single write accepted from the guest's stdout/stderr at once.
pub(crate) const WRITE_CHUNK_BYTES_MAX: usize = 64 << 10;

// ---- Blobs: large data streamed in and out (`blobs`, `cluster::blob_transfer`)

/// Default ceiling of one blob (`--blob-bytes-max`), in bytes: 64 GiB.
pub const BLOB_BYTES_MAX_DEFAULT: u64 = 64 << 30;
/// Bytes gathered from the network before one write to the blob's file
/// (and one hash update), on a blocking thread while the next gathers.
pub(crate) const BLOB_WRITE_BYTES: usize = 1 << 20;
/// Bytes of a blob written between hand-overs of its file to the disk
/// (each waits for the one before), so the sync before it is kept is
/// short however large the blob.
pub(crate) const BLOB_SYNC_BYTES: u64 = 64 << 20;
/// Free space a node keeps on its data directory's disk: a blob write that
/// would leave less is refused (`blob_store_full`), so blobs never take
/// the room the journal needs.
pub const BLOB_DISK_RESERVE_BYTES: u64 = 1 << 30;
/// A download through a node without a copy of its blob is answered once
/// more than this many bytes of the node's copy came, and relayed as the
/// rest comes; a blob no larger is answered from the stored copy, checked
/// (its errors with their codes): 1 MiB.
pub const RELAY_AFTER_BYTES: u64 = 1 << 20;
/// Bytes read from a blob's file per chunk of a response.
pub(crate) const BLOB_READ_BYTES: usize = 256 << 10;
/// Chunks of a response read ahead of the network.
pub(crate) const BLOB_READ_AHEAD: usize = 2;
/// Blobs a node takes at once (uploads and copies pushed to it), and
/// separately blobs it sends at once (downloads and copies fetched from
/// it), so readers never take the places uploads need. An upload holds at
/// most `2 * BLOB_WRITE_BYTES` of memory (one batch gathering, one being
/// written) and a download `(BLOB_READ_AHEAD + 2) * BLOB_READ_BYTES` (the
/// chunks queued, one being read, one being sent): at most 512 MiB and
/// 256 MiB.
/// One more is refused with `blobs_busy` (503, `Retry-After`); a download
/// whose reader takes nothing for [`BLOB_IDLE_TIMEOUT`] gives its place
/// back.
pub const BLOB_STREAMS_MAX: usize = 256;
/// Longest wait for the next bytes of a blob upload or transfer: past it,
/// the upload is refused as slow (`request_timeout`). An upload must also
/// keep an average of [`BODY_RATE_MIN`] after [`BODY_READ_BASE`].
pub const BLOB_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Frames of a blob sent to another node made ahead of the network.
pub(crate) const BLOB_FRAMES_AHEAD: usize = 1;
/// Largest plaintext of one frame of a blob sent between nodes.
pub(crate) const BLOB_FRAME_BYTES: usize = 1 << 20;
/// Copies of one upload pushed to other back-end nodes at once.
pub(crate) const BLOB_PUSHES_MAX: usize = 8;
const _: () = assert!(BLOB_WRITE_BYTES <= BLOB_FRAME_BYTES);

// ---- Runtime: the engine and its instance pool

/// Largest module accepted, in bytes.
pub const MODULE_BYTES_MAX: usize = 64 << 20;
/// Default number of jobs that may run at once in one runtime.
pub const CONCURRENT_JOBS_DEFAULT: u32 = 64;
/// Most jobs one runtime may run at once: each slot reserves address space
/// for its memories (4 GiB + guard each), and 10,000 slots stay well inside
/// a 64-bit process's 128 TiB.
pub const CONCURRENT_JOBS_MAX: u32 = 10_000;
/// Default number of compiled modules kept in memory.
pub const MODULE_CACHE_LEN_DEFAULT: usize = 64;
/// Modules compiled at once. Each compilation already uses every core
/// (Cranelift compiles functions in parallel), so more would only multiply
/// memory use; further loads wait their turn.
pub(crate) const COMPILES_CONCURRENT_MAX: usize = 2;
/// Modules waiting to be compiled ahead of their first job on a node
/// (`ModuleStore::compile_ahead`); one announced beyond it is compiled at
/// its first job instead.
pub(crate) const COMPILE_AHEAD_QUEUE_MAX: usize = 64;
/// Modules remembered as not compiling on a node, so that their jobs fail
/// at once rather than compiling again; beyond it the memory is cleared.
pub(crate) const UNUSABLE_MODULES_MAX: usize = 1024;
/// How often the engine's epoch advances: the granularity of deadlines and
/// the longest a job runs before yielding to the executor.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);
/// Extra time the host-side timeout allows beyond the job's deadline, so that
/// the epoch deadline (which stops the guest cleanly) fires first.
pub(crate) const HOST_TIMEOUT_GRACE: Duration = Duration::from_millis(100);
/// Core instances one job component may create. Rust components for
/// wasm32-wasip2 create 2 to 4 (the program plus adapter shims);
/// componentize-py's create 14 (38 when built with `--stub-wasi`, which
/// adds a stub instance per WASI interface); componentize-js's fewer than 16.
/// The pool reserves no memory per instance slot, only this count.
pub(crate) const CORE_INSTANCES_PER_COMPONENT_MAX: u32 = 64;
/// Linear memories one job component may define: every toolchain above
/// uses one (the language runtime and libc share it); a few more leave
/// room for components composed of several programs.
pub(crate) const MEMORIES_PER_COMPONENT_MAX: u32 = 4;
/// Tables one job component may define: one per core module that calls
/// indirectly (the runtime, libc, each adapter shim); 8 sufficed for
/// Rust, componentize-py and componentize-js builds, 16 leaves room.
pub(crate) const TABLES_PER_COMPONENT_MAX: u32 = 16;
/// Most elements one table of a job instance may grow to (function pointers
/// of big programs); also sizes the instance pool's tables.
pub(crate) const TABLE_ELEMENTS_MAX: usize = 100_000;
/// Largest component/core instance metadata; generous for big Rust programs.
pub(crate) const INSTANCE_METADATA_BYTES_MAX: usize = 1 << 20;
/// Bytes of a freed linear memory that are reset in place (instead of
/// returned to the OS with `madvise`, whose TLB shootdowns and the next
/// job's page faults were most of an empty job's cost) when the kernel can
/// tell which pages a job dirtied (`PAGEMAP_SCAN`, Linux ≥ 6.7): only those
/// are reset, so the cost follows what the job touched, not this bound.
pub(crate) const MEMORY_KEEP_RESIDENT_SCANNED_BYTES: usize = 16 << 20;
/// The same without `PAGEMAP_SCAN`, where the lowest bytes are zeroed
/// whether touched or not. Measured on the empty-job benchmark: 1 MiB costs
/// more in zeroing than it saves (p50 32 µs), none costs page faults
/// (20 µs), 64 KiB covers a small job's hot stack and heap (14 µs).
pub(crate) const MEMORY_KEEP_RESIDENT_BYTES: usize = 64 << 10;

// The default runtime configuration is valid.
const _: () = assert!(CONCURRENT_JOBS_DEFAULT <= CONCURRENT_JOBS_MAX);
// The pool's totals are slots times the per-component counts, in a u32.
const _: () = assert!(
    CONCURRENT_JOBS_MAX as u64 * CORE_INSTANCES_PER_COMPONENT_MAX as u64 <= u32::MAX as u64
);
// A deadline is checked every epoch tick: the grace covers one, so the
// clean epoch deadline fires before the host-side timeout.
const _: () = assert!(EPOCH_TICK.as_millis() < HOST_TIMEOUT_GRACE.as_millis());

// ---- Runtime: sandbox processes

/// How long a sandbox process may wait for a job before it is stopped: long
/// enough that a steady trickle of jobs reuses it, short enough that a node
/// that was busy once gives the memory back.
pub const SANDBOX_IDLE_MAX_DEFAULT: Duration = Duration::from_secs(60);
/// Compiled modules a sandbox process keeps in memory: it runs one job at a
/// time, and the node's disk cache is a read away.
pub(crate) const SANDBOX_MODULE_CACHE_LEN: usize = 8;
/// How long past a job's deadline the node waits before killing its child.
/// The child's own timeout (which fires when the guest waits in a host
/// call) ends such an attempt cleanly [`HOST_TIMEOUT_GRACE`] past the
/// deadline, keeping the child for the next job; a guest busy in its own
/// code is killed here.
pub(crate) const SANDBOX_KILL_GRACE: Duration = Duration::from_millis(250);
/// Room in a child's frame beyond the job's own bytes (codes, messages,
/// backtraces, the log's truncation marker).
pub(crate) const SANDBOX_FRAME_SLACK_BYTES: u64 = 1 << 20;
/// Shortest and longest wait between two looks for idle children to stop
/// (a quarter of the idle limit, within these).
pub(crate) const SANDBOX_REAPER_PERIOD_MIN: Duration = Duration::from_millis(10);
pub(crate) const SANDBOX_REAPER_PERIOD_MAX: Duration = Duration::from_secs(5);
/// Largest request a child accepts: an input, a resume state and the
/// recorded calls it replays.
pub(crate) const SANDBOX_REQUEST_BYTES_MAX: u64 = 1 << 30;
/// How often a child checks that the node that started it is still there.
pub(crate) const SANDBOX_ORPHAN_CHECK: Duration = Duration::from_millis(200);

// The child ends an attempt cleanly before the node kills it.
const _: () = assert!(HOST_TIMEOUT_GRACE.as_millis() < SANDBOX_KILL_GRACE.as_millis());
// The reaper's period is `clamp`ed between these, which panics otherwise.
const _: () =
    assert!(SANDBOX_REAPER_PERIOD_MIN.as_millis() <= SANDBOX_REAPER_PERIOD_MAX.as_millis());
// A request resuming from the largest checkpoint fits what a child reads.
const _: () = assert!(CHECKPOINT_BYTES_CEILING < SANDBOX_REQUEST_BYTES_MAX);
// A child's frames carry a u32 length: the largest one the node accepts
// (output, log and checkpoint at their ceilings, a recorded call, and the
// slack) fits it.
const _: () = assert!(
    OUTPUT_BYTES_CEILING
        + LOG_BYTES_CEILING
        + CHECKPOINT_BYTES_CEILING
        + cohort_master::limits::TAPE_BYTES_MAX
        + SANDBOX_FRAME_SLACK_BYTES
        <= u32::MAX as u64
);
// A request replaying a whole record of calls fits what a child reads.
const _: () = assert!(
    CHECKPOINT_BYTES_CEILING + 2 * cohort_master::limits::TAPE_BYTES_MAX
        < SANDBOX_REQUEST_BYTES_MAX
);
const _: () = assert!(SANDBOX_REQUEST_BYTES_MAX <= u32::MAX as u64);

// ---- Runtime: egress (a job's outbound HTTP calls, `runtime::egress`)

/// Calls one attempt may make, refused ones included; later ones are
/// refused (`egress_calls_exhausted`).
pub const EGRESS_CALLS_PER_ATTEMPT_MAX: u32 = 1_000;
/// Calls of one attempt in flight at once (each holds a socket, and while
/// its name resolves a thread); more wait for one to end.
pub const EGRESS_CALLS_AT_ONCE_MAX: u32 = 16;
/// Request and response body bytes of one attempt, all its calls
/// together: 256 MiB (`egress_bytes_exhausted` past it).
pub const EGRESS_BYTES_PER_ATTEMPT_MAX: u64 = 256 << 20;
/// Largest request body one call sends: 16 MiB
/// (`egress_request_too_large`).
pub const EGRESS_REQUEST_BYTES_MAX: u64 = 16 << 20;
/// Largest response body one call receives: 16 MiB
/// (`egress_response_too_large`).
pub const EGRESS_RESPONSE_BYTES_MAX: u64 = 16 << 20;
/// Largest response head (status line and headers) one call receives.
pub const EGRESS_RESPONSE_HEAD_BYTES_MAX: usize = 64 << 10;
/// Longest name lookup, TCP connection and TLS handshake of one call,
/// together (a job may ask for less).
pub const EGRESS_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait from a request to its response's head (a job may ask for
/// less).
pub const EGRESS_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait between two chunks of a response body (a job may ask for
/// less).
pub const EGRESS_BETWEEN_BYTES_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest call, from its request to the end of its response body: a
/// server trickling a byte at a time cannot hold an attempt longer.
pub const EGRESS_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Addresses of one name tried at most (the resolver's first).
pub(crate) const EGRESS_ADDRESSES_MAX: usize = 16;
/// Refused addresses the node's debug log names at most (the job's log
/// names their kinds only).
pub(crate) const EGRESS_ADDRESSES_LOGGED_MAX: usize = 4;
/// Longest method kept in a call's record, in bytes (the master's bound).
pub const EGRESS_METHOD_BYTES_MAX: usize = cohort_master::limits::CALL_METHOD_BYTES_MAX;
/// Longest origin (`scheme://host:port`) kept in a call's record, in bytes
/// (the master's bound).
pub const EGRESS_ORIGIN_BYTES_MAX: usize = cohort_master::limits::CALL_ORIGIN_BYTES_MAX;
/// Shortest secret value masked in what an attempt reports (its log,
/// progress and failure): a shorter one (`a`, `42`) would blot out the
/// text around it without hiding anything worth hiding.
pub const SECRET_MASKED_BYTES_MIN: usize = 4;

// An attempt can have as many calls in flight as it may make.
const _: () = assert!(EGRESS_CALLS_AT_ONCE_MAX <= EGRESS_CALLS_PER_ATTEMPT_MAX);
// One call at its size limits fits what an attempt may move.
const _: () = assert!(
    EGRESS_REQUEST_BYTES_MAX <= EGRESS_BYTES_PER_ATTEMPT_MAX
        && EGRESS_RESPONSE_BYTES_MAX <= EGRESS_BYTES_PER_ATTEMPT_MAX
);
// Each phase's own limit can be reached before the whole call's.
const _: () = assert!(
    EGRESS_CONNECT_TIMEOUT.as_millis() < EGRESS_CALL_TIMEOUT.as_millis()
        && EGRESS_FIRST_BYTE_TIMEOUT.as_millis() < EGRESS_CALL_TIMEOUT.as_millis()
        && EGRESS_BETWEEN_BYTES_TIMEOUT.as_millis() < EGRESS_CALL_TIMEOUT.as_millis()
);
// An origin holds the longest DNS name with `https://`, a port and the
// brackets of an IPv6 address.
const _: () = assert!(EGRESS_ORIGIN_BYTES_MAX >= 253 + "https://[]:65535".len());
// An attempt's record (a sandbox process sends it in its last frame)
// fits the frame's slack many times over: each call is its method,
// origin, error code and a few numbers.
const _: () = assert!(
    cohort_master::limits::CALLS_RECORDED_MAX
        * (EGRESS_METHOD_BYTES_MAX + EGRESS_ORIGIN_BYTES_MAX + ERROR_CODE_BYTES_MAX + 64)
        <= SANDBOX_FRAME_SLACK_BYTES as usize / 8
);
// hyper refuses a smaller bound on a response head.
const _: () = assert!(EGRESS_RESPONSE_HEAD_BYTES_MAX >= 8192);

// ---- The master service (`master`)

/// How often time is passed to the master (`Tick`): lease expiry, backoff
/// release, retention.
pub const MASTER_TICK_INTERVAL: Duration = Duration::from_millis(100);
/// Requests one batch takes from the channel at most.
pub const BATCH_REQUESTS_MAX: usize = 4096;
/// Requests that may wait for the master thread; senders wait beyond it.
pub(crate) const MASTER_CHANNEL_CAPACITY: usize = 16_384;
/// How long a wait for many jobs goes on gathering after the first of
/// them finished ([`MasterHandle::wait_finished`](crate::master::MasterHandle::wait_finished)).
pub const WAIT_GATHER: Duration = Duration::from_millis(10);
/// Default number of events between snapshots.
pub const SNAPSHOT_EVERY_DEFAULT: u64 = 200_000;
/// Most progress reports kept (one per running job); beyond, new ones are
/// dropped until jobs settle.
pub(crate) const PROGRESS_KEPT_MAX: usize = 1_000_000;
/// Stop orders kept per worker until its next poll; a worker that never
/// polls again is lost anyway, so older orders beyond this are dropped.
pub(crate) const STOPS_PER_WORKER_MAX: usize = 10_000;
/// Most bytes of events kept while an upgrade is checked.
pub(crate) const RECORDING_BYTES_MAX: usize = 64 << 20;
/// Most bytes of an uploaded master component.
pub const MASTER_BYTES_MAX: usize = 64 << 20;
/// Most bytes the master component may hand the host in one call (its
/// snapshot is the largest).
pub(crate) const MASTER_HOSTCALL_BYTES_MAX: usize = 4 << 30;
/// Bytes of a snapshot in each `snapshot-part` and `init-part` call: the
/// most of it the component holds at once.
pub(crate) const SNAPSHOT_PART_BYTES: u32 = 1 << 20;
/// Events applied per call while replaying the journal.
pub(crate) const REPLAY_CHUNK: usize = 4096;
/// Batches waiting for the shadow at most; beyond, the shadow is given
/// up. A shadow serializing a million jobs is busy for about a second;
/// this holds far more batches than a master proposes in that time.
pub(crate) const SHADOW_BATCHES_WAITING_MAX: usize = 65_536;
/// Batches waiting for the standby at most; beyond, it is given up. A
/// follower hands over committed entries about once per replication
/// wake-up, so this is minutes of a busy cluster.
pub(crate) const STANDBY_BATCHES_WAITING_MAX: usize = 65_536;

// ---- Replication

/// How often an idle master tells its followers it is alive. The messages
/// are small and go to the voters only, so a short period costs little and
/// sets how soon a dead master is noticed.
pub const HEARTBEAT_MS: u64 = 25;
/// How long a follower that heard its master declines claims. A follower
/// calls its master silent one heartbeat later ([`silence_ms`])
/// and the oldest back-end node then takes over: kill -9 of the master to
/// a new master is about this plus a claim's round trip and the master's
/// start, instead of gossip's failure detection (~0.45 s) and the 1.5 s
/// lease this replaced. Leases only keep a live master from being replaced
/// on a mistake; fencing by epoch is what keeps two masters from
/// committing.
///
/// [`silence_ms`]: crate::replication::silence_ms
pub const LEASE_MS: u64 = 125;
/// A replication request (an append, a read of a journal) unanswered
/// this long is sent again.
pub const REPLICATION_REQUEST_TIMEOUT_MS: u64 = 1_000;
/// A take-over that has no majority after this long gives up.
pub const CLAIM_TIMEOUT_MS: u64 = 1_000;
/// Least wait between two take-over attempts.
pub const CLAIM_RETRY_MS: u64 = 250;
/// How often the replication core's timers run.
pub(crate) const REPLICATION_TICK: Duration = Duration::from_millis(10);
/// Longest a batch waits to be committed before its callers are told
/// `replicas_unavailable`.
pub const COMMIT_WAIT: Duration = Duration::from_secs(5);
/// Master batches handed over but not yet appended, at most.
pub const BATCHES_IN_FLIGHT_MAX: usize = 64;
/// Inputs handled per wake-up at most, before timers run again.
pub(crate) const INPUTS_PER_WAKE_MAX: usize = 4096;
/// Entry bytes read for a standby per wake-up at most: a standby far
/// behind catches up over several wake-ups, never holding the replication
/// thread.
pub(crate) const FOLLOW_BYTES_MAX: usize = 1 << 20;
/// Longest the pulse covers a replication thread held in one step (see
/// the replication module's notes): a disk stalled longer is taken for a
/// dead one.
pub const STALL_COVERED_MAX: Duration = Duration::from_secs(2);
/// A master refuses new work while no majority of voters acknowledged an
/// append this recently.
pub(crate) const QUORUM_SILENCE_MAX_MS: u64 = 3_000;
/// Longest a node leads without its master started before stepping down.
pub(crate) const UNCLAIMED_MAX: Duration = Duration::from_secs(5);
/// Longest a hand-over waits for the successor to catch up.
pub(crate) const HANDOVER_CATCH_UP_MAX: Duration = Duration::from_secs(10);
/// Bytes of recent journal entries kept in memory for replication.
pub const REPLICATION_WINDOW_BYTES_MAX: usize = 64 << 20;
/// Events a [`Restore`](crate::replication::journal_storage::Restore) hands on at a time.
pub const RESTORE_CHUNK: usize = 16_384;
/// Largest replication envelope accepted (a snapshot of the master's state).
pub const ENVELOPE_BYTES_MAX: usize = 1 << 30;
/// Replication messages queued per destination at most.
pub(crate) const REPLICATION_QUEUE_MAX: usize = 4096;
/// Replication messages one post carries at most.
pub(crate) const MESSAGES_PER_POST_MAX: usize = 256;
/// Longest one replication post may take (snapshots excepted).
pub(crate) const REPLICATION_POST_TIMEOUT: Duration = Duration::from_secs(5);

// An unanswered request is sent again only after several heartbeats, not
// in a storm while the answer is on its way.
const _: () = assert!(HEARTBEAT_MS < REPLICATION_REQUEST_TIMEOUT_MS);
// A claim outlives the leases of the followers it asks, which decline it
// while they still hear the old master.
const _: () = assert!(LEASE_MS < CLAIM_TIMEOUT_MS);
// A live master's heartbeat reaches its followers within their lease.
const _: () = assert!(HEARTBEAT_MS < LEASE_MS);
// Heartbeats are sent from the core's timers, which run every tick.
const _: () = assert!(REPLICATION_TICK.as_millis() <= HEARTBEAT_MS as u128);
// The pulse exists to keep followers' leases through a stalled step.
const _: () = assert!((LEASE_MS as u128) < STALL_COVERED_MAX.as_millis());
// An idle master's heartbeats are acknowledged well within the quorum's
// silence bound, so a healthy idle master never refuses work.
const _: () = assert!(HEARTBEAT_MS < QUORUM_SILENCE_MAX_MS);
// An append carries at least one entry: the largest journal record fits
// one replication envelope.
const _: () = assert!(RECORD_BYTES_MAX < ENVELOPE_BYTES_MAX);

// ---- The journal on disk

/// Largest payload a journal frame may carry.
pub const RECORD_BYTES_MAX: usize = 64 << 20;
/// A segment is closed and a new one started past this size.
pub const SEGMENT_BYTES_MAX: u64 = 64 << 20;
/// Snapshots kept (the newest plus spares).
pub(crate) const SNAPSHOTS_KEPT: usize = 2;
/// Bytes of a snapshot file written between two syncs.
pub(crate) const SNAPSHOT_SYNC_BYTES: usize = 4 << 20;
/// An fsync slower than this is logged: it delays every acknowledgement
/// waiting for it (disks and virtual machines stall now and then).
pub const SLOW_SYNC: Duration = Duration::from_millis(50);

// ---- Gossip and membership

/// Time between gossip rounds.
pub const GOSSIP_INTERVAL: Duration = Duration::from_millis(100);
/// Phi above which a silent node is declared dead.
pub const PHI_THRESHOLD: f64 = 8.0;
/// How long dead nodes are remembered (shown as dead) before being dropped.
pub const DEAD_NODE_GRACE: Duration = Duration::from_secs(60);
/// Heartbeat intervals the failure detector averages over.
pub(crate) const GOSSIP_HEARTBEAT_SAMPLES: usize = 1000;
/// Longer silences are not counted as intervals (a paused process).
pub(crate) const GOSSIP_HEARTBEAT_INTERVAL_MAX: Duration = Duration::from_secs(10);
/// How long deleted keys are remembered (so late peers learn of the
/// deletion) before they are garbage-collected.
pub(crate) const DELETED_KEY_GRACE: Duration = Duration::from_secs(3600);
/// Gossip rounds a leaving node waits so the others hear it is leaving.
pub(crate) const LEAVE_ROUNDS: u32 = 3;
/// Largest UDP payload (IPv4): the largest sealed gossip message.
pub const DATAGRAM_BYTES_MAX: usize = 65_507;
/// Pause after a gossip receive error that is not an ICMP report (one
/// gossip round).
pub(crate) const GOSSIP_RECV_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// Longest wait for a datagram to cross the loopback codec.
pub(crate) const GOSSIP_CODEC_WAIT: Duration = Duration::from_millis(100);
/// Most opened envelopes waiting for chitchat; beyond, datagrams are
/// dropped (and counted), as a full socket buffer would.
pub(crate) const GOSSIP_RECEIVED_MAX: usize = 1024;
/// Most gossip envelopes waiting to be sealed and sent.
pub(crate) const GOSSIP_SENDING_MAX: usize = 1024;

// A gossip round's interval counts as a heartbeat interval.
const _: () = assert!(GOSSIP_INTERVAL.as_millis() < GOSSIP_HEARTBEAT_INTERVAL_MAX.as_millis());

// ---- Security and node-to-node exchanges

/// Longest a bulk transfer between nodes may take: a module, a snapshot
/// of the master's state, a hand-over, a page of journal entries.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(60);
/// Most keys one cluster key file may hold (rotation needs two).
pub const KEYS_MAX: usize = 4;
/// Largest cluster key file read.
pub(crate) const KEY_FILE_BYTES_MAX: u64 = 64 << 10;
/// Largest difference between a sealed message's sending time and the
/// receiver's clock, either way.
pub const SEAL_WINDOW_MS: u64 = 30_000;
/// Most nonces one replay guard remembers (about 64 bytes each). Past it,
/// new messages are refused rather than remembered badly; at the default
/// window it allows 33k sealed messages a second per node.
pub const SEAL_REPLAY_ENTRIES_MAX: usize = 2_000_000;
/// How often a node refreshes its copy of the tokens.
pub const TOKEN_REFRESH_EVERY: Duration = Duration::from_secs(1);
/// Least time between two refreshes caused by unknown token ids.
pub const TOKEN_MISS_REFRESH_MIN: Duration = Duration::from_millis(50);

// A request naming an unknown token brings a refresh sooner than the
// periodic one would.
const _: () = assert!(TOKEN_MISS_REFRESH_MIN.as_millis() < TOKEN_REFRESH_EVERY.as_millis());
// Such a request waits out the pacing of those refreshes, and then one.
const _: () = assert!(TOKEN_MISS_REFRESH_MIN.as_millis() < TOKEN_REFRESH_WAIT.as_millis());

// ---- The node: joining, hosting the master, its standby

/// How long a node that joins through seeds listens to gossip before it
/// decides whether it hosts the master, so it first hears of older nodes.
pub(crate) const JOIN_SETTLE: Duration = Duration::from_secs(1);
/// Departed hosts remembered at most.
pub(crate) const DEPARTED_KEPT_MAX: usize = 64;
/// Longest a node that should host the master waits for the node still
/// advertising it to hand it over.
pub(crate) const HANDOVER_WAIT: Duration = Duration::from_secs(10);
/// How often the node checks whether its master stopped after a failure.
pub(crate) const MASTER_FAILURE_CHECK_INTERVAL: Duration = Duration::from_millis(200);
/// How often a node checks that its warm standby runs; the least time
/// between two starts of one, doubled after each standby that ended
/// within [`STANDBY_SETTLED`] of its start (one that keeps failing, for a
/// build this node lacks, say, is not restarted in a loop), up to
/// [`STANDBY_RETRY_MAX`].
pub(crate) const STANDBY_CHECK: Duration = Duration::from_secs(1);
pub(crate) const STANDBY_RETRY: Duration = Duration::from_secs(5);
pub(crate) const STANDBY_RETRY_MAX: Duration = Duration::from_secs(300);
pub(crate) const STANDBY_SETTLED: Duration = Duration::from_secs(60);

// The successor waits for a hand-over at least as long as the old host
// waits for it to catch up, or it takes over a hand-over under way.
const _: () = assert!(HANDOVER_CATCH_UP_MAX.as_millis() <= HANDOVER_WAIT.as_millis());
// The standby's backoff starts within its cap.
const _: () = assert!(STANDBY_RETRY.as_millis() <= STANDBY_RETRY_MAX.as_millis());

// ---- Tools: the CLI, `cohort demo`, `cohort replay`, fault injection

/// Longest a token operation sealed with the cluster key may take (it
/// waits for the master's journal).
pub(crate) const TOKEN_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often `cohort dag submit --wait` asks for the DAG's status.
pub(crate) const DAG_POLL: Duration = Duration::from_millis(200);

// The CLI waits longer than the node it asks waits for a master, so it
// gets the node's answer rather than a timeout of its own.
const _: () = assert!(PROXY_WAIT.as_millis() < TOKEN_CALL_TIMEOUT.as_millis());

/// Largest picture side the demo draws, in pixels.
pub(crate) const DEMO_SIDE_MAX: u32 = 16_384;
/// Tile sides the demo accepts; the upper bound is the mandelbrot example's
/// own limit on one tile.
pub(crate) const DEMO_TILE_SIDE_MIN: u32 = 16;
pub(crate) const DEMO_TILE_SIDE_MAX: u32 = 1024;
/// Nodes the demo cluster may have.
pub(crate) const DEMO_NODES_MAX: u32 = 9;
/// Tiles the demo waits for at once.
pub(crate) const DEMO_WAITS_IN_FLIGHT: usize = 64;
/// A demo node must print its address within this, and the cluster form
/// within it too.
pub(crate) const DEMO_START_TIMEOUT: Duration = Duration::from_secs(60);
/// Time each demo child gets to stop after SIGTERM before it is killed.
pub(crate) const DEMO_STOP_GRACE: Duration = Duration::from_secs(5);
/// How often a stopping demo child is checked for exit, and the forming
/// cluster for its members.
pub(crate) const DEMO_CHILD_EXIT_POLL: Duration = Duration::from_millis(20);
pub(crate) const DEMO_CLUSTER_POLL: Duration = Duration::from_millis(100);
/// Jobs per submission request of the demo.
pub(crate) const DEMO_SUBMIT_BATCH: usize = 1000;
/// Tries of a tile's status, moving to the next node after each failure.
pub(crate) const DEMO_WAIT_TRIES_MAX: usize = 100;
/// Pause between those tries.
pub(crate) const DEMO_WAIT_RETRY: Duration = Duration::from_millis(100);

// The demo submits each chunk of tiles as one batch request.
const _: () = assert!(DEMO_SUBMIT_BATCH <= BATCH_JOBS_MAX);

/// Most differing entries `cohort replay --compare` lists.
pub(crate) const REPLAY_DIFFERENCES_LISTED_MAX: usize = 20;
/// Most ids of queued and of running jobs `cohort replay` lists in the state.
pub(crate) const REPLAY_LISTED_MAX: u32 = 100;
/// Longest description of one event in a job's history `cohort replay`
/// prints.
pub(crate) const REPLAY_EVENT_TEXT_MAX: usize = 400;

/// How often a fault test's partition file is read.
pub const PARTITION_POLL: Duration = Duration::from_millis(100);
