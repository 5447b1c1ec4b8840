/**
 * A handle on one job: its id once its batch is answered, its result
 * through the client's waiter, its status and its cancellation.
 *
 * @packageDocumentation
 */

import { outputBlobsOf } from "./blobs.js";
import { CohortError, JobFailed, WaitTimeout, statusOfCode } from "./errors.js";
import type { Transport } from "./transport.js";
import type { JobStatus, OutputBlob } from "./types.js";
import type { Finished, Waiter } from "./waiter.js";

/** What a job handle uses of its client. */
export interface JobContext {
  readonly transport: Transport;
  readonly waiter: Waiter;
  readonly retryDeadlineMs: number;
}

/** Longest one try of a small request may take. */
const TRY_TIMEOUT_MS = 30_000;

/** A submitted job (from `Client.submit`) or a known one (from `Client.get`). */
export class Job {
  /**
   * How the job ended, as the waiter reports it. A submitted job is handed
   * to the waiter as soon as its id is known, so that results awaited one
   * by one are mostly there already; a handle from `Client.get` on its
   * first `result()`. Only this handle holds the report: a handle the
   * program dropped is collected with it once the waiter has delivered. A
   * wait that failed (no node answered before the retry deadline, or the
   * client closed) is forgotten, so the next call asks again.
   */
  private finished: Promise<Finished> | undefined;
  /** The outcome once known (its output, or the job's own failure), kept for later calls. */
  private outcome: Promise<Uint8Array> | undefined;

  /** @internal Made by the client. */
  constructor(
    private readonly context: JobContext,
    private readonly jobId: Promise<number>,
    /**
     * The submission's idempotency key (the caller's, or one the client
     * made); `null` for a handle from `Client.get`.
     */
    readonly idempotencyKey: string | null,
    /** Whether to watch the job as soon as its id is known (a submission), or from the first `result()`. */
    watchNow: boolean,
  ) {
    // A refusal is reported to whoever awaits the id or the result; a
    // handle nobody awaits must not make it an unhandled rejection.
    jobId.catch(() => undefined);
    if (watchNow) this.watch();
  }

  /** The waiter's report of the job's end, asked for once (again only if it failed). */
  private watch(): Promise<Finished> {
    if (this.finished === undefined) {
      const waiter = this.context.waiter;
      const finished = this.jobId.then((id) => waiter.wait(id));
      this.finished = finished;
      finished.catch(() => {
        if (this.finished === finished) this.finished = undefined;
      });
    }
    return this.finished;
  }

  /**
   * The job's id, once its batch was answered. Rejects with the server's
   * error if the submission was refused (e.g. `module_not_found`), or with
   * the last error if it could not be sent before the retry deadline.
   */
  id(): Promise<number> {
    return this.jobId;
  }

  /**
   * The job's output, once it succeeded, as the client's one waiter sees
   * it finish (`POST /v1/jobs/wait`). Rejects with {@link JobFailed}
   * (the job's own error code: `trap`, `timeout`, `cancelled`, ...) if it
   * did not, and with {@link WaitTimeout} if `timeoutMs` is given and the
   * job has not finished that long after the call (or, if its submission
   * was still being sent, once its id is known). A timeout ends only this
   * call: the job stays watched, and a later call gets its outcome.
   */
  async result(timeoutMs?: number): Promise<Uint8Array> {
    const finished = await this.ended(timeoutMs);
    if (this.outcome === undefined) {
      const outcome = this.output(finished);
      this.outcome = outcome;
      // Only the job's own outcome is final: an output that could not be
      // fetched is fetched again by the next call.
      outcome.catch((error: unknown) => {
        if (!(error instanceof JobFailed) && this.outcome === outcome) this.outcome = undefined;
      });
    }
    return this.outcome;
  }

  /**
   * The output blobs the job wrote (the job SDKs' `blobs.create(name)`),
   * once it succeeded, in the order it created them; empty if it wrote
   * none. Each is downloaded with {@link Client.getBlob} or
   * {@link Client.getBlobToFile} by its `digest`. They come with the
   * waiter's report of the job's end: no request of their own. Rejects as
   * {@link result} does.
   */
  async outputs(timeoutMs?: number): Promise<OutputBlob[]> {
    const finished = await this.ended(timeoutMs);
    succeeded(finished);
    return outputBlobsOf(finished.outputs, finished.id);
  }

  /** The job's output parsed as JSON (see {@link result}). */
  async json<T = unknown>(timeoutMs?: number): Promise<T> {
    return JSON.parse(await this.text(timeoutMs)) as T;
  }

  /** The job's output decoded as UTF-8 (see {@link result}). */
  async text(timeoutMs?: number): Promise<string> {
    return new TextDecoder().decode(await this.result(timeoutMs));
  }

  /**
   * The job's current status (`GET /v1/jobs/{id}`), with its `input_blob`
   * and, once it succeeded, its `outputs` (each absent when there is none).
   */
  async status(): Promise<JobStatus> {
    return this.request("GET", `/v1/jobs/${await this.jobId}`);
  }

  /**
   * Cancels the job (`DELETE /v1/jobs/{id}`) and returns its status; a
   * running attempt is stopped. Rejects with `job_finished` if the job had
   * already finished.
   */
  async cancel(): Promise<JobStatus> {
    return this.request("DELETE", `/v1/jobs/${await this.jobId}`);
  }

  /**
   * The waiter's report of the job's end; rejects with {@link WaitTimeout}
   * if `timeoutMs` (counted from the call) passes first.
   */
  private async ended(timeoutMs: number | undefined): Promise<Finished> {
    const start = Date.now();
    const id = await this.jobId;
    const left = timeoutMs === undefined ? undefined : Math.max(0, timeoutMs - (Date.now() - start));
    return within(this.watch(), left, () => new WaitTimeout(id, timeoutMs ?? 0));
  }

  private request(method: "GET" | "DELETE", path: string): Promise<JobStatus> {
    return this.context.transport.json<JobStatus>({
      method,
      path,
      deadline: Date.now() + this.context.retryDeadlineMs,
      tryTimeoutMs: TRY_TIMEOUT_MS,
    });
  }

  /**
   * The output of a finished job: inline in the wait's answer, or fetched
   * with `GET /v1/jobs/{id}/result` when it was too large to come inline.
   */
  private async output(finished: Finished): Promise<Uint8Array> {
    succeeded(finished);
    if (finished.output_base64 !== null) return new Uint8Array(Buffer.from(finished.output_base64, "base64"));
    return this.context.transport.send({
      method: "GET",
      path: `/v1/jobs/${finished.id}/result`,
      deadline: Date.now() + this.context.retryDeadlineMs,
      tryTimeoutMs: TRY_TIMEOUT_MS + (finished.output_bytes ?? 0) / 1024,
    });
  }
}

/**
 * Returns if the job succeeded; throws why it did not: {@link JobFailed}
 * with its own error, or the cluster's error for a job it does not know.
 */
function succeeded(finished: Finished): void {
  const { id, state, error } = finished;
  if (state === "succeeded") return;
  if (state === "unknown") {
    const code = error?.code ?? "job_not_found";
    throw new CohortError(code, error?.message ?? `no job ${id}`, { status: statusOfCode(code) });
  }
  throw new JobFailed(id, state, error?.code ?? state, error?.message);
}

/**
 * `promise`, or `expired()` as its rejection if `ms` (when given) passes
 * first; the promise itself goes on, for a later call.
 */
function within<T>(promise: Promise<T>, ms: number | undefined, expired: () => Error): Promise<T> {
  if (ms === undefined) return promise;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(expired()), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
