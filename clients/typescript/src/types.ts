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
}

/** Options of one submission. Unset fields take the node's defaults. */
export interface SubmitOptions {
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
}

/** A job as `GET /v1/jobs/{id}` and `DELETE /v1/jobs/{id}` answer it (times in ms since the Unix epoch). */
export interface JobStatus {
  id: number;
  /** The module's digest. */
  module: string;
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
}
