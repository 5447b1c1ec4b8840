/**
 * The one error type of the client, and its two refinements.
 *
 * Every failure carries cohort's stable `code` ("Error codes" in
 * docs/http-api.md), a `message` for people, the HTTP `status` it came with
 * and whether trying again later may succeed (`retryable`). A few codes are
 * the client's own:
 *
 * - `unreachable`: no node answered before the retry deadline;
 * - `wait_timeout`: {@link WaitTimeout}, a `result()` that ran out of time;
 * - `closed`: the client was closed before the operation ended;
 * - `module_unreadable`: a module path that could not be read;
 * - `file_unreadable`, `file_unwritable`: a blob's file that could not be
 *   read or written;
 * - `bad_response`: an answer that is not cohort's (e.g. from a proxy).
 *
 * The server's `blob_digest_mismatch` also comes, with a `null` status,
 * from the client: a download whose bytes are not its digest's, or a file
 * that changed while it was uploaded.
 *
 * @packageDocumentation
 */

import { ERROR_CODES } from "./codes.js";

/**
 * The status the server answers a code it does not know with (one from a
 * newer master, say); also this client's for a code not in its table.
 */
const UNKNOWN_CODE_STATUS = 500;

/**
 * The HTTP status cohort answers `code` with: its row of the server's
 * table (`codes.ts`, generated from clients/openapi.json), or `500`, as the
 * server answers a code it does not know.
 */
export function statusOfCode(code: string): number {
  return ERROR_CODES.get(code)?.status ?? UNKNOWN_CODE_STATUS;
}

/** An item of a batch's answer that refused its job. */
export interface RefusedItem {
  code: string;
  message: string;
  retryable?: boolean | null;
}

/**
 * The error of a job a batch's answer refused (its item is an error inside
 * the `202`). Its status is the one the server answers its code with: what
 * the same job, submitted alone, would have been refused with.
 */
export function refusedItemError(item: RefusedItem): CohortError {
  return new CohortError(item.code, item.message, {
    status: statusOfCode(item.code),
    retryable: item.retryable === true,
  });
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
