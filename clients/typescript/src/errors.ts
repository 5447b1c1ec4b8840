/**
 * The one error type of the client, and its two refinements.
 *
 * Every failure carries cohort's stable `code` (the README's "Error codes"),
 * a `message` for people, the HTTP `status` it came with and whether trying
 * again later may succeed (`retryable`). A few codes are the client's own:
 *
 * - `unreachable`: no node answered before the retry deadline;
 * - `wait_timeout`: {@link WaitTimeout}, a `result()` that ran out of time;
 * - `closed`: the client was closed before the operation ended;
 * - `module_unreadable`: a module path that could not be read;
 * - `bad_response`: an answer that is not cohort's (e.g. from a proxy).
 *
 * @packageDocumentation
 */

/** The HTTP statuses of the README's "Error codes" table, with their codes. */
const CODES_BY_STATUS: ReadonlyArray<readonly [number, readonly string[]]> = [
  [400, ["bad_json", "bad_request", "undecodable", "tls_required", "invalid_token"]],
  [401, ["unauthorized"]],
  [403, ["forbidden", "not_front_end"]],
  [404, ["not_found", "job_not_found", "job_expired", "module_not_stored", "token_not_found"]],
  [405, ["method_not_allowed"]],
  [408, ["request_timeout"]],
  [409, ["job_finished", "job_not_succeeded", "idempotency_conflict", "token_exists", "job_not_finished"]],
  [413, ["body_too_large", "input_too_large", "module_too_large", "checkpoint_too_large"]],
  [
    422,
    [
      "module_invalid",
      "module_wrong_world",
      "module_job_version",
      "module_unsupported_import",
      "module_not_found",
      "invalid_job",
    ],
  ],
  [429, ["queue_full", "too_many_connections"]],
  [431, ["headers_too_large"]],
  [503, ["master_unavailable", "outcome_unknown", "replicas_unavailable", "replication_failed"]],
];

const STATUS_OF_CODE = new Map(
  CODES_BY_STATUS.flatMap(([status, codes]) => codes.map((code) => [code, status] as const)),
);

/**
 * The HTTP status cohort answers `code` with: a refused item of a batch
 * comes inside a `202`, but is the refusal a single submission would have
 * got with that status. A code the table does not know is a `500`, as on
 * the server.
 */
export function statusOfCode(code: string): number {
  return STATUS_OF_CODE.get(code) ?? 500;
}

/** What a {@link CohortError} is made of besides its code and message. */
export interface CohortErrorDetails {
  /** The HTTP status of the refusal; `null` when no HTTP answer carried it. */
  status?: number | null;
  /** Whether the same request, sent again later, may succeed. */
  retryable?: boolean;
  /** The underlying error (a transport failure's, a file read's). */
  cause?: unknown;
}

/** Any failure of a cohort request or job. */
export class CohortError extends Error {
  override name = "CohortError";
  /** cohort's stable code, e.g. `module_not_found`, `queue_full`, `trap`. */
  readonly code: string;
  /**
   * The HTTP status of the refusal (for a refused batch item, the status
   * its code is answered with); `null` when no HTTP answer carried the
   * error: a job's own failure, a transport failure, a wait that timed out.
   */
  readonly status: number | null;
  /** Whether sending the same request again, later, may succeed. */
  readonly retryable: boolean;

  constructor(code: string, message: string, details: CohortErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.code = code;
    this.status = details.status ?? null;
    this.retryable = details.retryable ?? false;
  }
}

/**
 * A job that did not succeed: `failed` (its own error, or one retrying
 * cannot fix), `dead` (every attempt failed, e.g. with `trap` or
 * `timeout`) or `cancelled`. Its `code` is the job's own error code; a
 * cancelled job has none on the server, and the code `cancelled` here.
 */
export class JobFailed extends CohortError {
  override name = "JobFailed";
  /** The job's id. */
  readonly jobId: number;
  /** The job's final state: `failed`, `dead` or `cancelled`. */
  readonly state: string;

  constructor(jobId: number, state: string, code: string, message?: string) {
    super(code, message === undefined ? `job ${jobId} ${state}` : `job ${jobId} ${state}: ${message}`);
    this.jobId = jobId;
    this.state = state;
  }
}

/** A `result(timeoutMs)` whose job had not finished in time (code `wait_timeout`). */
export class WaitTimeout extends CohortError {
  override name = "WaitTimeout";
  /** The job's id. */
  readonly jobId: number;

  constructor(jobId: number, timeoutMs: number) {
    super("wait_timeout", `job ${jobId} did not finish within ${timeoutMs} ms`, { retryable: true });
    this.jobId = jobId;
  }
}

/** The error of an operation cut short by `close()`. */
export function closedError(): CohortError {
  return new CohortError("closed", "the client was closed");
}
