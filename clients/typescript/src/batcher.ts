/**
 * Auto-batching of submissions: every submission made within the linger
 * window goes out in one `POST /v1/jobs/batch`.
 *
 * @packageDocumentation
 */

import { CohortError, type RefusedItem, closedError, refusedItemError } from "./errors.js";
import { Transport, backoffMs } from "./transport.js";

/** Most body bytes of one batch request. */
const BATCH_BYTES_MAX = 8 << 20;
/** Longest one try of a batch request may take: 30 s, plus 1 ms per KiB of body. */
const tryTimeoutMs = (bytes: number): number => 30_000 + bytes / 1024;

/** A submission waiting for its job id. */
export interface Submission {
  /** The job as JSON, exactly as sent on every try (with its idempotency key). */
  readonly json: string;
  /** When to stop retrying it (`Date.now()` milliseconds). */
  readonly deadline: number;
  /** Called with the job's id. */
  readonly resolve: (id: number) => void;
  /** Called with the reason it was refused or could not be sent. */
  readonly reject: (error: CohortError) => void;
}

/** One item of a batch's answer: accepted, or refused. */
type BatchItem = { id: number; existing: boolean } | RefusedItem;

/** A submission with its number of retries so far. */
interface Queued {
  submission: Submission;
  retries: number;
}

/** Gathers submissions and sends them in batches. */
export class Batcher {
  private queue: Queued[] = [];
  private queuedBytes = 0;
  private linger: NodeJS.Timeout | undefined;
  /** Submissions waiting out a backoff pause before they are queued again. */
  private readonly pausing = new Map<NodeJS.Timeout, Queued>();
  private closed = false;

  constructor(
    private readonly transport: Transport,
    private readonly lingerMs: number,
    private readonly batchMax: number,
  ) {}

  /** Queues a submission; it goes out when the linger window ends or its batch is full. */
  add(submission: Submission): void {
    this.enqueue({ submission, retries: 0 });
  }

  /** Sends what is queued now, without waiting for the linger window to end. */
  flush(): void {
    clearTimeout(this.linger);
    this.linger = undefined;
    if (this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    this.queuedBytes = 0;
    void this.send(batch);
  }

  /** Fails every queued or pausing submission with `closed`; later ones fail at once. */
  close(): void {
    this.closed = true;
    clearTimeout(this.linger);
    const dropped = [...this.queue, ...this.pausing.values()];
    for (const timer of this.pausing.keys()) clearTimeout(timer);
    this.queue = [];
    this.queuedBytes = 0;
    this.pausing.clear();
    for (const queued of dropped) queued.submission.reject(closedError());
  }

  private enqueue(queued: Queued): void {
    if (this.closed) {
      queued.submission.reject(closedError());
      return;
    }
    const bytes = Buffer.byteLength(queued.submission.json) + 1;
    if (this.queue.length > 0 && this.queuedBytes + bytes > BATCH_BYTES_MAX) this.flush();
    this.queue.push(queued);
    this.queuedBytes += bytes;
    if (this.queue.length >= this.batchMax || this.queuedBytes >= BATCH_BYTES_MAX) this.flush();
    else this.linger ??= setTimeout(() => this.flush(), this.lingerMs);
  }

  /**
   * Sends one batch (retried by the transport until its earliest deadline),
   * then settles each submission with its item of the answer. Items
   * refused with a retryable error are queued again after a backoff pause,
   * until their own deadline; so are all of them if the request itself
   * failed with a retryable error before some of their deadlines.
   */
  private async send(batch: Queued[]): Promise<void> {
    const body = `{"jobs":[${batch.map((queued) => queued.submission.json).join(",")}]}`;
    let results: BatchItem[];
    try {
      const answer = await this.transport.json<{ results: BatchItem[] }>({
        method: "POST",
        path: "/v1/jobs/batch",
        body,
        deadline: Math.min(...batch.map((queued) => queued.submission.deadline)),
        tryTimeoutMs: tryTimeoutMs(Buffer.byteLength(body)),
      });
      results = answer.results;
      if (!Array.isArray(results) || results.length !== batch.length) {
        throw new CohortError("bad_response", `a batch of ${batch.length} jobs was answered with another count`);
      }
    } catch (caught) {
      const error = caught as CohortError;
      for (const queued of batch) this.retryOrReject(queued, error);
      return;
    }
    results.forEach((item, index) => {
      const queued = batch[index] as Queued;
      if ("id" in item) queued.submission.resolve(item.id);
      else this.retryOrReject(queued, refusedItemError(item));
    });
  }

  private retryOrReject(queued: Queued, error: CohortError): void {
    const left = queued.submission.deadline - Date.now();
    if (!error.retryable || left <= 0 || this.closed) {
      queued.submission.reject(error);
      return;
    }
    const timer = setTimeout(
      () => {
        this.pausing.delete(timer);
        this.enqueue(queued);
      },
      Math.min(backoffMs(queued.retries), left),
    );
    queued.retries += 1;
    this.pausing.set(timer, queued);
  }
}
