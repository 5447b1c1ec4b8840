/**
 * The options of the client and of a submission, and the job status the
 * API answers.
 *
 * @packageDocumentation
 */

/** Options of a {@link Client}. */
export interface ClientOptions {
  /** Sent as `Authorization: Bearer TOKEN` (needed when the cluster has a key). */
  token?: string;
  /** How long a submission waits for others to share its batch request, in ms (default 1). */
  lingerMs?: number;
  /** Most jobs per batch request (default 1,000; at most 10,000). A full batch goes out at once. */
  batchMax?: number;
  /** How long a request or submission is retried before it fails with its last error, in ms (default 60,000). */
  retryDeadlineMs?: number;
  /** The `fetch` to use (default: the global one), e.g. to count or trace requests. */
  fetch?: typeof globalThis.fetch;
  /** How long blob calls wait; each field has its default. */
  blobTimeouts?: {
    /**
     * Longest a blob call's try goes without progress (a chunk sent or
     * received, or the answer's head), in ms (default 30,000).
     */
    tryTimeoutMs?: number;
    /**
     * The slowest rate, in bytes a second, at which a node is taken to copy
     * a blob between nodes (default `BLOB_COPY_BYTES_PER_SEC`, 16 MiB/s):
     * once an upload's body has been sent, its answer is waited for
     * `tryTimeoutMs` plus one second per this many bytes sent (the node
     * answers once the blob is durable on a majority of the back-end nodes),
     * and a resumed download's head as long for the blob's size.
     */
    copyBytesPerSec?: number;
    /**
     * How much longer than `tryTimeoutMs` a download waits for its answer's
     * head when the blob's size is not known, in ms (default
     * `BLOB_FETCH_WAIT_MS`, 10 minutes): a node without a copy answers
     * once its copy has the first MiB, or all of a smaller blob, a range
     * once the copy also reaches it.
     */
    fetchWaitMs?: number;
  };
}

/** Options of one submission. Unset fields take the node's defaults. */
export interface SubmitOptions {
  /**
   * A blob stored in the cluster ({@link Client.putBlob} and its kin) that
   * the job reads as a stream, as its input blob `input` (the job SDKs'
   * `blobs.open("input")`), beside any inline input: its digest (64 hex
   * digits, either case, optionally `sha256:`-prefixed; sent as given), or
   * anything with a `digest`: the {@link BlobInfo} `putBlob` resolves to,
   * or another job's {@link OutputBlob}. The submission is refused with
   * `blob_not_found` (404) if the cluster has no such blob, `invalid_job`
   * (422) if it is not a digest. What the job writes comes back as
   * {@link Job.outputs}.
   */
  inputBlob?: string | { readonly digest: string };
  /** Wall-clock limit of one attempt, in ms (1 ms to 1 h). */
  timeoutMs?: number;
  /** Memory limit of one attempt, in bytes. */
  memoryBytes?: number;
  /** Attempts before the job is dead (1 to 100; default 3). */
  maxAttempts?: number;
  /** Higher runs first (default 0). */
  priority?: number;
  /**
   * Submissions with the same key get the same job. Without one, the
   * client makes a key of its own, so that retries never create a second
   * job.
   */
  idempotencyKey?: string;
  /** Jobs sharing this key share its `concurrencyLimit` and `rateLimit`, cluster-wide. */
  concurrencyKey?: string;
  /** At most this many of the key's jobs run at once (1 to 10,000). */
  concurrencyLimit?: number;
  /** At most this many of the key's jobs start in any second (1 to 10,000). */
  rateLimit?: number;
  /**
   * A submission whose key matches a job submitted less than
   * `uniqueWindowMs` earlier gets that job instead of a new one.
   */
  uniqueKey?: string;
  /** How long a `uniqueKey` holds after a submission, in ms (up to 30 days). */
  uniqueWindowMs?: number;
  /**
   * Ids of jobs this one waits for: it starts once all succeeded, and its
   * input becomes `{"input", "parents": [{"id", "name", "output", "blobs"}]}`,
   * and the job may read each parent's output blobs as `PARENT/OUTPUT`.
   */
  after?: number[];
  /**
   * Narrows what the job may call to these grants (URL strings or grants),
   * each within a grant of the deployment it names its module by: a job may
   * narrow its grants, never widen them (`invalid_grant`, also for a grant
   * with `headers` or `record`: it takes those of the grant covering it).
   */
  egress?: string | HttpGrant | readonly (string | HttpGrant)[];
  /**
   * Labels a worker must have to run the job (`{ gpu: "a100", zone: "eu" }`):
   * it starts only on a worker started with all of them (`cohort node
   * --labels gpu=a100,zone=eu`) and, if it asks for `memoryBytes`, whose
   * `--job-memory-max` (when set) is at least that; until the master knows
   * such a worker, the job waits in line ({@link JobStatus.unplaceable}). At
   * most 16; keys 1 to 63 bytes of `a-z 0-9 . _ - /`, starting with a letter
   * or digit, values 1 to 63 bytes of letters, digits and `. _ -`
   * (`invalid_job`, 422, if not). Sent only when not empty.
   */
  labels?: Readonly<Record<string, string>>;
  /**
   * The job's namespace (1 to 63 of `a-z 0-9 -`; `invalid_namespace`, 422,
   * if not). Left out, the job goes in the token's namespace when the token
   * is confined to one, else in `default`; a confined token may name only
   * its own (`forbidden`, 403), and sees its namespace's jobs only: another's
   * is `job_not_found` (404), as if it never was.
   */
  namespace?: string;
}

/** When and how a schedule fires ({@link Client.createSchedule}). */
export interface ScheduleOptions {
  /** A cron expression: five fields, or six with seconds first. */
  cron?: string;
  /** The IANA time zone `cron` is read in (default `UTC`). */
  timezone?: string;
  /** Or: fire every this many ms from creation (1 s to 366 days). */
  everyMs?: number;
  /** `skip` (default), `buffer_one`, `allow_all` or `cancel_running`. */
  overlap?: "skip" | "buffer_one" | "allow_all" | "cancel_running";
  /** Ticks missed by at most this much fire late (default 60,000 ms). */
  catchUpMs?: number;
  /** Options of each job (no idempotency or uniqueness key, no `after`). */
  job?: Omit<SubmitOptions, "idempotencyKey" | "uniqueKey" | "uniqueWindowMs" | "after">;
}

/** A schedule as `GET /v1/schedules/{name}` shows it. */
export interface ScheduleStatus {
  /** Its name, unique in the cluster. */
  name: string;
  /** The namespace its jobs are in (a confined token sees its own only). */
  namespace: string;
  cron?: string;
  timezone?: string;
  every_ms?: number;
  overlap: string;
  catch_up_ms: number;
  module: string;
  created_at: number;
  paused: boolean;
  /** Its next ticks (ms since the Unix epoch). */
  upcoming: number[];
  buffered?: number;
  /** Jobs it fired that have not finished. */
  active: number[];
  last_tick?: number;
  last_job?: number;
  fired_total: number;
  skipped_total: number;
  missed: { from: number; to: number }[];
  [field: string]: unknown;
}

/** One job of a DAG ({@link Client.submitDag}). */
export interface DagJob {
  /** Its name, unique in the DAG. */
  name: string;
  /** A digest, a deployment's name, or the path of a `.wasm` file (uploaded once). */
  module: string;
  /** As `submit`'s input. */
  input?: unknown;
  /** Names of the DAG's jobs it waits for. */
  after?: string[];
  /** Ids of existing jobs it waits for. */
  afterJobs?: number[];
  /** Receive the parents' outputs with the input (default true). */
  parentOutputs?: boolean;
  /** The job's options. */
  options?: Omit<SubmitOptions, "idempotencyKey" | "uniqueKey" | "uniqueWindowMs" | "after">;
}

/** A DAG as `GET /v1/dags/{id}` shows it. */
export interface DagStatus {
  id: number;
  /** `running`, `succeeded`, `failed` or `cancelled`. */
  state: string;
  on_failure: string;
  created_at: number;
  counts: Record<string, number>;
  waiting: number;
  jobs: { id: number; name: string; state: string; parents: number[] }[];
}

/** One attempt of a job, as `GET /v1/jobs/{id}` shows it. */
export interface AttemptStatus {
  number: number;
  worker: string;
  started_at: number;
  ended_at: number | null;
  outcome: string | null;
  message: string | null;
  duration_ms: number | null;
  log_tail: string;
  /**
   * Its outbound HTTP(S) calls, in order (the first 64), granted or
   * refused; absent when it made none.
   */
  calls?: CallRecord[];
  /** How many more calls it made than `calls` lists; absent when none. */
  calls_dropped?: number;
  /**
   * What it cost, as its worker's sandbox measured it; absent while it
   * runs and for an attempt that ended without its worker's report.
   */
  usage?: Usage;
}

/** What attempts cost (for a job: its attempts together). */
export interface Usage {
  /** CPU time used running it (its Wasm and the host calls it made), in microseconds; summed for a job. */
  cpu_us: number;
  /** The most linear memory its instance held at once, in bytes; the highest for a job. */
  memory_peak_bytes: number;
  /** Body bytes of its outbound HTTP calls, sent and received; summed for a job. */
  egress_bytes: number;
}

/** One outbound HTTP(S) call of an attempt (never its path, query, headers or body). */
export interface CallRecord {
  /** Its method. */
  method: string;
  /** `scheme://host:port` it went to. */
  origin: string;
  /** The response's status, if one came. */
  status?: number;
  /** Why it failed, if it did: `egress_denied`, `egress_address_refused`, `egress_timeout`, `egress_response_too_large`, `egress_record_too_large`, `egress_record_failed`, ... */
  error?: string;
  /** Request body bytes sent. */
  sent_bytes: number;
  /** Response body bytes received. */
  received_bytes: number;
  /** From the request to the end of its response or its failure, in ms. */
  ms: number;
}

/**
 * What a deployment's jobs may reach over HTTP(S) ({@link Client.grant}).
 * Answers spell `url` in full (`https://api.example.com:443/v1/`) and give
 * `methods`, `private`, `headers` and `record` only when set.
 */
export interface HttpGrant {
  /**
   * `scheme://host[:port][/path]`: `https://api.example.com/v1/`,
   * `https://*.example.com`, `http://10.0.0.5:8080`, `http://[fd00::5]`; a
   * port of `*` allows any; the path is a prefix.
   */
  url: string;
  /** The methods allowed (default: any). */
  methods?: string[];
  /**
   * Whether a name may resolve to a private, loopback or link-local
   * address (default false; an address written in `url` is always allowed).
   */
  private?: boolean;
  /**
   * Headers the node sets on every request this grant allows, replacing
   * the job's (at most 8; not `host`, `content-length` or another the node
   * sets): `{ authorization: "Bearer {secret:STRIPE}" }`. A
   * `{secret:NAME}` placeholder is filled in from secret `NAME`
   * ({@link Client.setSecret}) by the node that sends the request, so the
   * job never holds the value.
   */
  headers?: Record<string, string>;
  /**
   * Whether the calls this grant allows are recorded: each response made
   * durable before the job sees it, and replayed to a later attempt that
   * makes the same call instead of sending it again. `true` records every
   * call, `false` none; absent (the default), those whose method is not
   * `GET`, `HEAD` or `OPTIONS`. A submission's `egress` grants cannot set
   * it: they record as the deployment's grant that covers them.
   */
  record?: boolean;
}

/** The answer to {@link Client.setSecret}. */
export interface SecretResult {
  /** The secret's name. */
  name: string;
  /** Whether it did not exist before (false too if an earlier try, whose answer was lost, set it). */
  created: boolean;
}

/**
 * A namespace's quotas (`POST /v1/namespaces/{name}/quotas`): each one left
 * out is no quota.
 */
export interface Quotas {
  /** Most jobs waiting; past it a submission is `quota_exceeded` (429). */
  waiting_max?: number;
  /** Most attempts running at once; more wait in line. */
  running_max?: number;
  /** Most jobs submitted a second; past it, `quota_exceeded` (429). */
  submissions_per_second?: number;
  /** Most bytes of results its jobs keep; while they keep as many, `quota_exceeded` (429). */
  result_bytes_max?: number;
}

/** A namespace as {@link Client.namespaces} lists it. */
export interface NamespaceInfo {
  /** Its name (`default` for the default one). */
  name: string;
  /** The jobs it holds, by state. */
  jobs: Record<string, number>;
  /** Jobs it submitted since its first. */
  submitted_total: number;
  /** Its attempts whose worker said what they cost. */
  attempts_metered: number;
  /** Their CPU time, in microseconds. */
  cpu_us: number;
  /** Their outbound body bytes, both ways. */
  egress_bytes: number;
  /** The bytes of results its jobs keep. */
  result_bytes: number;
  /** Its quotas (`{}`: none). */
  quotas: Quotas;
  /** Its weight for its fair share of the workers. */
  weight: number;
}

/** A secret as {@link Client.secrets} lists it: never its value. */
export interface SecretInfo {
  /** Its name. */
  name: string;
  /** When it was last set (ms since the Unix epoch). */
  updated_at: number;
  /** The deployments whose grants name it, or whose jobs may read it. */
  used_by: string[];
}

/**
 * The body of a grant or a revoke (`POST /v1/deployments/{name}/grants`,
 * `.../grants/revoke`): both fields optional, not both empty.
 */
export interface GrantRequest {
  /** Outbound HTTP(S) grants. */
  http?: HttpGrant[];
  /** Secrets the jobs may read themselves, by name. */
  secrets?: string[];
}

/** What {@link Client.grant} and {@link Client.revoke} take besides grants. */
export interface GrantOptions {
  /**
   * Secrets ({@link Client.setSecret}) the jobs may read themselves with
   * the job SDKs' `secret(name)`, their values masked in the jobs' logs,
   * progress and failures (at most 16 a deployment); for a revoke, those
   * they may no longer read. A secret only a grant's `headers` name stays
   * unreadable, and a credential that only goes in a header is better left
   * there: a job that reads a value can send it anywhere its grants allow.
   */
  secrets?: readonly string[];
}

/** The answer to a grant or a revoke: every grant of the deployment now, and the secrets its jobs may read. */
export interface GrantsResult {
  /** The deployment. */
  name: string;
  /** All its grants. */
  http: HttpGrant[];
  /** The secrets its jobs may read now; absent from nodes older than readable secrets. */
  secrets?: string[];
}

/** A job as `GET /v1/jobs/{id}` and `DELETE /v1/jobs/{id}` answer it (times in ms since the Unix epoch). */
export interface JobStatus {
  id: number;
  /** The module's digest (the one its deployment name resolved to, when submitted by name). */
  module: string;
  /** The deployment name it was submitted by, when it was. */
  module_name?: string | null;
  /** That name's version when the job was accepted. */
  module_version?: number | null;
  /** `queued`, `running`, `succeeded`, `failed`, `dead` or `cancelled`. */
  state: string;
  priority: number;
  max_attempts: number;
  timeout_ms: number;
  idempotency_key: string | null;
  submitted_at: number;
  finished_at: number | null;
  /** A job waiting for a retry runs no earlier than this. */
  not_before: number | null;
  attempts: AttemptStatus[];
  /** Why it did not succeed. */
  error: { code: string; message: string } | null;
  result_bytes: number | null;
  input_bytes: number;
  has_checkpoint: boolean;
  /** The latest progress the running job reported. */
  progress: { fraction: number; message: string } | null;
  /** The key whose limits it shares, and the limits it was submitted with. */
  concurrency_key?: string | null;
  concurrency_limit?: number | null;
  rate_limit?: number | null;
  /** Its uniqueness key and window. */
  unique_key?: string | null;
  unique_window_ms?: number | null;
  /** The labels a worker must have to run it (`labels`); absent when it asks for none. */
  labels?: Record<string, string>;
  /** The namespace it belongs to (`default` unless it was given one). Absent from nodes older than namespaces. */
  namespace?: string;
  /**
   * In line (`queued`), and no worker the master knows has its labels and
   * memory: it waits for one to join. Absent from nodes older than labels.
   */
  unplaceable?: boolean;
  /** What its attempts cost, all together. Absent from nodes older than usage. */
  usage?: Usage;
  /** The blob it reads as its input blob (`inputBlob`); absent when it was given none. */
  input_blob?: BlobInfo;
  /**
   * The output blobs it wrote, once it succeeded, in the order it created
   * them (as {@link Job.outputs} gives them); absent when there are none.
   */
  outputs?: OutputBlob[];
  /**
   * The W3C trace id (32 hex digits) its spans and log lines carry: the
   * caller's, when it was submitted with a traceparent
   * ({@link Client.withTraceparent}), else the one the node started for it;
   * absent when it has none (no traceparent and no span export) and for a
   * schedule's firings.
   */
  trace_id?: string;
}

/** One version of a deployment. */
export interface DeploymentVersion {
  /** Its number (from 1, one more at every deploy or rollback). */
  version: number;
  /** The module's digest. */
  digest: string;
  /** When it became current (ms since the Unix epoch). */
  deployed_at: number;
  /** The version a rollback returned to, when this version is one. */
  rollback_of?: number | null;
}

/** A deployment as `GET /v1/deployments/{name}` shows it: a name and the module it points at. */
export interface DeploymentStatus {
  name: string;
  /** The current version. */
  current: DeploymentVersion;
  /** Versions ever made of this name. */
  versions_total: number;
  /** The versions kept (the newest 50), newest first; empty in {@link Client.deployments}' list. */
  versions: DeploymentVersion[];
  /** What its jobs may reach over HTTP(S) (see {@link Client.grant}); absent from nodes older than grants. */
  grants?: HttpGrant[];
  /** The secrets its jobs may read (see {@link GrantOptions.secrets}); absent from nodes older than readable secrets. */
  secrets?: string[];
}

/** The answer to a deploy or a rollback: the version now current. */
export interface DeployResult {
  name: string;
  /** The version now current. */
  version: number;
  /** Its module's digest. */
  digest: string;
  /** Whether the name already pointed at this module (no new version was made). */
  existing: boolean;
}

/** A blob stored by the cluster: data named by the sha256 of its bytes ({@link Client.putBlob}). */
export interface BlobInfo {
  /** The sha256 of its bytes, 64 lowercase hex digits. */
  digest: string;
  /** Its size in bytes. */
  bytes: number;
}

/**
 * A blob the answering node stores, as `GET /v1/blobs` lists it
 * ({@link Client.listBlobs}): its digest and size, and what the cluster
 * says of it (each absent when the node could not ask the master).
 */
export interface BlobEntry extends BlobInfo {
  /**
   * Whether the cluster keeps the blob. A node deletes its copy of a blob
   * the cluster does not keep once its grace period (`--blob-grace`) has
   * passed since an upload or copy last stored or found it there.
   */
  kept?: boolean;
  /** How many held jobs (their input and output blobs) and schedules name it; while any does, the cluster keeps it. */
  refs?: number;
  /**
   * When the cluster stops keeping it, in ms since the Unix epoch, unless
   * something names it or it is uploaded again first; absent while
   * something names it (or when it is not kept).
   */
  collect_at?: number;
}

/** A page of the blobs the cluster keeps ({@link Client.keptBlobs}), by digest. */
export interface BlobPage {
  /** The blobs, each kept. */
  blobs: BlobEntry[];
  /** The `after` of the next page; absent on the last. */
  next?: string;
}

/**
 * A blob a job wrote (the job SDKs' `blobs.create(name)`), kept by the
 * cluster once the job succeeded ({@link Job.outputs}): download it with
 * {@link Client.getBlob} or {@link Client.getBlobToFile} by its `digest`,
 * or give it to another job as its `inputBlob`.
 */
export interface OutputBlob {
  /** The name the job gave it (`counts.tsv`). */
  name: string;
  /** The sha256 of its bytes, 64 lowercase hex digits. */
  digest: string;
  /** Its size in bytes. */
  bytes: number;
}

/**
 * Which bytes of a blob to read, as `Uint8Array.slice` takes them: from
 * `start` (default 0; a negative one, without `end`, for the last `-start`
 * bytes) up to `end` (excluded; default the blob's end).
 */
export interface BlobRange {
  start?: number;
  end?: number;
}

/** Options of {@link Client.putBlob}. */
export interface PutBlobOptions {
  /**
   * The sha256 the bytes must have (64 hex digits, either case), sent for the
   * node to check (`blob_digest_mismatch`, 422, stores nothing). Without
   * it, bytes are sent with theirs; a stream is checked after, against
   * the answer.
   */
  sha256?: string;
}

/**
 * A blob (or a range of it) read as it arrives ({@link Client.getBlob}):
 * read `body`, or iterate the stream itself (`for await (const chunk of
 * blob)`), once. A download broken midway resumes where it broke, on the
 * next node. Cancel `body` (or leave the loop) to stop early.
 */
export interface BlobStream extends AsyncIterable<Uint8Array> {
  /** The blob's digest. */
  readonly digest: string;
  /** The whole blob's size in bytes, whatever range is read. */
  readonly size: number;
  /** The offset in the blob of the first byte given. */
  readonly start: number;
  /** How many bytes are given in all (the range's length). */
  readonly length: number;
  /** The bytes, as they arrive. */
  readonly body: ReadableStream<Uint8Array>;
}
