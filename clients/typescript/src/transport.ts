/**
 * Requests to a list of cohort nodes: failover, retries with backoff, and
 * cohort's JSON errors turned into {@link CohortError}s.
 *
 * @packageDocumentation
 */

import { CohortError, closedError } from "./errors.js";

/** First pause of the backoff; it doubles on each retry. */
const BACKOFF_FIRST_MS = 50;
/** Longest pause of the backoff. */
const BACKOFF_MAX_MS = 5_000;
/** How long a node that failed is skipped at first; it doubles while it keeps failing. */
const SKIP_FIRST_MS = 2_000;
/** Longest a failing node is skipped. */
const SKIP_MAX_MS = 30_000;

/**
 * The pause before retry number `attempt` (0 for the first): exponential
 * backoff with full jitter, uniform in [0, min(5 s, 50 ms * 2^attempt)].
 */
export function backoffMs(attempt: number): number {
  return Math.random() * Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** Math.min(attempt, 20));
}

/** A request body read as it is sent: made anew by each try. */
export type BodySource = () => AsyncIterable<Uint8Array>;

/** One request, sent again unchanged on each retry. */
export interface RequestSpec {
  method: "GET" | "HEAD" | "POST" | "PUT" | "DELETE";
  /** The path and query, e.g. `/v1/jobs/batch`. */
  path: string;
  /**
   * A JSON text (sent as `application/json`), bytes (as `contentType`), or
   * a {@link BodySource} (as `contentType`), called by each try and sent as
   * it is read: chunked, unless `headers` give its `content-length`.
   */
  body?: string | Uint8Array | BodySource;
  /** The content type of a bytes or streamed body. */
  contentType?: string;
  /** More request headers. */
  headers?: Record<string, string>;
  /** When to stop retrying (`Date.now()` milliseconds). */
  deadline: number;
  /**
   * Longest one try may take before it counts as a transport failure; for
   * a streamed body (sent or received), longest it may go without a chunk.
   */
  tryTimeoutMs: number;
  /**
   * How much longer than `tryTimeoutMs` the answer's head may take once the
   * body has been sent, given the bytes sent: for a node that copies an
   * upload, or fetches a blob, before it answers. (A body given whole is
   * counted as sent from the start: the try may take that much longer.)
   * A streamed answer's body then waits `tryTimeoutMs` per chunk again.
   */
  headExtraMs?: (bytesSent: number) => number;
}

/** A success answer, its body read. */
export interface Answer {
  status: number;
  headers: Headers;
  body: Uint8Array;
}

/**
 * A success answer whose body is read as it comes ({@link Transport.stream}).
 * A read that waits longer than the try timeout, or a connection that
 * breaks, errors the body with `unreachable` (retryable); the client's
 * `close()` errors it with `closed`.
 */
export interface StreamedAnswer {
  status: number;
  headers: Headers;
  body: ReadableStream<Uint8Array>;
}

/** A node of the list, and how long it is skipped after failing. */
class Node {
  private failures = 0;
  /** Skipped until this time (`Date.now()` milliseconds). */
  skippedUntil = 0;

  constructor(readonly url: string) {}

  /** It failed to connect, reset, timed out or answered `503`. */
  failed(now: number): void {
    this.skippedUntil = now + Math.min(SKIP_MAX_MS, SKIP_FIRST_MS * 2 ** Math.min(this.failures, 10));
    this.failures += 1;
  }

  /** It answered (anything but a `503`). */
  answered(): void {
    this.failures = 0;
    this.skippedUntil = 0;
  }
}

/** A try that did not succeed but may be retried. */
interface Retry {
  error: CohortError;
  /** The answer's `Retry-After`, a lower bound for the next pause. */
  retryAfterMs: number;
}

/** Sends requests to the first node of the list that answers. */
export class Transport {
  private readonly nodes: Node[];
  private readonly headers: Record<string, string>;
  private readonly closing = new AbortController();

  constructor(
    urls: readonly string[],
    token: string | undefined,
    private readonly fetch: typeof globalThis.fetch,
  ) {
    this.nodes = urls.map((url) => new Node(url.replace(/\/+$/, "")));
    this.headers = token === undefined ? {} : { authorization: `Bearer ${token}` };
  }

  /** Sends `name: value` with every request from now on (set before the first). */
  setHeader(name: string, value: string): void {
    this.headers[name] = value;
  }

  /** Whether {@link close} was called. */
  get closed(): boolean {
    return this.closing.signal.aborted;
  }

  /** Aborts every request in flight and every pause; later requests fail with `closed`. */
  close(): void {
    this.closing.abort();
  }

  /** Sends `spec` until it succeeds, and parses the answer as JSON. */
  async json<T>(spec: RequestSpec): Promise<T> {
    const body = await this.send(spec);
    try {
      return JSON.parse(new TextDecoder().decode(body)) as T;
    } catch (cause) {
      throw new CohortError("bad_response", `${spec.method} ${spec.path}: the answer is not JSON`, { cause });
    }
  }

  /**
   * Sends `spec` until a node answers it with success (2xx), and returns
   * the answer's body. Transport failures, `429`, `503` and answers whose
   * `retryable` is true are retried (on the next node that is not skipped,
   * else after a backoff pause) until `spec.deadline`; then the last error
   * is thrown, with the code `unreachable` if it was a transport failure.
   * Other errors are thrown at once.
   */
  async send(spec: RequestSpec): Promise<Uint8Array> {
    return (await this.answer(spec)).body;
  }

  /** As {@link send}, with the answer's status and headers. */
  answer(spec: RequestSpec): Promise<Answer> {
    return this.retried(spec, false) as Promise<Answer>;
  }

  /**
   * As {@link answer}, but the success answer's body is left to be read as
   * it comes (an error answer's is read, for its code).
   */
  stream(spec: RequestSpec): Promise<StreamedAnswer> {
    return this.retried(spec, true) as Promise<StreamedAnswer>;
  }

  private async retried(spec: RequestSpec, streamed: boolean): Promise<Answer | StreamedAnswer> {
    for (let attempt = 0; ; ) {
      if (this.closed) throw closedError();
      const node = this.pick();
      const outcome = await this.try(node, spec, streamed);
      if (!("error" in outcome)) return outcome;
      const now = Date.now();
      if (now >= spec.deadline || now + outcome.retryAfterMs > spec.deadline) throw outcome.error;
      // A node that failed is skipped: the next one that is not gets the
      // request at once.
      if (node.skippedUntil > now && this.nodes.some((other) => other.skippedUntil <= now)) continue;
      const pause = Math.max(backoffMs(attempt), outcome.retryAfterMs);
      attempt += 1;
      await this.sleep(Math.min(pause, spec.deadline - now));
    }
  }

  /** The first node not skipped, or else the one whose skip ends first. */
  private pick(): Node {
    const now = Date.now();
    const free = this.nodes.find((node) => node.skippedUntil <= now);
    return free ?? this.nodes.reduce((a, b) => (b.skippedUntil < a.skippedUntil ? b : a));
  }

  /**
   * One try on `node`: the success answer (its body read, or with
   * `streamed` left to be read), a {@link Retry}, or a thrown error that is
   * final.
   */
  private async try(node: Node, spec: RequestSpec, streamed: boolean): Promise<Answer | StreamedAnswer | Retry> {
    const headers: Record<string, string> = { ...this.headers, ...spec.headers };
    if (typeof spec.body === "string") headers["content-type"] = "application/json";
    else if (spec.body !== undefined) headers["content-type"] = spec.contentType ?? "application/octet-stream";
    // One try ends at its timeout (for a streamed body, that long without
    // a chunk), or when the client closes.
    const abort = new AbortController();
    const clock = new TryClock(spec.tryTimeoutMs, () => abort.abort());
    const onClose = (): void => abort.abort();
    this.closing.signal.addEventListener("abort", onClose);
    const release = (): void => {
      clock.pause();
      this.closing.signal.removeEventListener("abort", onClose);
    };
    const what = `${spec.method} ${spec.path} to ${node.url}`;
    const failure = (cause: unknown): CohortError => {
      if (this.closed) return closedError();
      const reason = clock.timedOut ? `no answer within ${Math.round(clock.limitMs)} ms` : describe(cause);
      return new CohortError("unreachable", `${what}: ${reason}`, { retryable: true, cause });
    };
    let response: Response;
    let body: Uint8Array | undefined;
    // A body given whole is sent as fetch likes: its allowance counts from the start.
    const extraMs = spec.headExtraMs ?? ((): number => 0);
    clock.start(typeof spec.body === "function" ? 0 : extraMs(byteLength(spec.body)));
    try {
      const init: RequestInit & { duplex?: "half" } = { method: spec.method, headers, signal: abort.signal };
      if (typeof spec.body === "function") {
        init.body = restarting(spec.body(), clock, extraMs) as RequestInit["body"];
        init.duplex = "half";
      } else {
        init.body = spec.body;
      }
      response = await this.fetch(node.url + spec.path, init);
      const ok = response.status >= 200 && response.status < 300;
      if (!streamed || !ok) body = new Uint8Array(await response.arrayBuffer());
    } catch (caught) {
      release();
      // The client's own error from a streamed body (a file that changed):
      // final, whatever fetch wrapped it in.
      const own = ownError(caught);
      if (own !== undefined) throw own;
      const error = failure(caught);
      if (error.code === "closed") throw error;
      node.failed(Date.now());
      return { error, retryAfterMs: 0 };
    }
    if (response.status === 503) node.failed(Date.now());
    else node.answered();
    if (body === undefined) {
      // A streamed success: the clock runs only while a read waits.
      clock.pause();
      return { status: response.status, headers: response.headers, body: watched(response, clock, release, failure) };
    }
    release();
    if (response.status >= 200 && response.status < 300) return { status: response.status, headers: response.headers, body };
    const error = errorOfAnswer(response.status, body, `${spec.method} ${spec.path}`);
    if (!error.retryable) throw error;
    return { error, retryAfterMs: retryAfterMs(response.headers.get("retry-after")) };
  }

  /** Waits `ms`, or until the client closes. */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.closing.signal.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.closing.signal.addEventListener("abort", done);
    });
  }
}

/** A try's timeout: aborts the try once it has run `ms` since `start()`, unless paused. */
class TryClock {
  timedOut = false;
  /** What the clock last started with: `ms` and the extra. */
  limitMs: number;
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly ms: number,
    private readonly abort: () => void,
  ) {
    this.limitMs = ms;
  }

  /** (Re)starts the clock: the try has `ms` (and `extraMs`) from now. */
  start(extraMs = 0): void {
    clearTimeout(this.timer);
    this.limitMs = this.ms + extraMs;
    // setTimeout takes at most 2^31 - 1 ms (24.8 days); past it, waits that long.
    this.timer = setTimeout(
      () => {
        this.timedOut = true;
        this.abort();
      },
      Math.min(this.limitMs, TIMER_MAX_MS),
    );
  }

  /** Stops the clock (a streamed body the caller is not reading). */
  pause(): void {
    clearTimeout(this.timer);
  }
}

/** The longest delay `setTimeout` takes. */
const TIMER_MAX_MS = 2 ** 31 - 1;

/** The bytes of a body given whole. */
function byteLength(body: string | Uint8Array | undefined): number {
  if (body === undefined) return 0;
  return typeof body === "string" ? Buffer.byteLength(body) : body.byteLength;
}

/**
 * A streamed request body that restarts the try's clock at every chunk,
 * and once it has all gone, with `extraMs` of the bytes sent.
 */
async function* restarting(
  source: AsyncIterable<Uint8Array>,
  clock: TryClock,
  extraMs: (bytesSent: number) => number,
): AsyncIterable<Uint8Array> {
  let sent = 0;
  for await (const chunk of source) {
    clock.start();
    sent += chunk.byteLength;
    yield chunk;
  }
  clock.start(extraMs(sent));
}

/**
 * A streamed answer's body, read as the caller reads: the try's clock runs
 * while a read waits; a failed read errors the stream with `failure`'s
 * error (`unreachable`, or `closed`); `release` once it ends, either way.
 */
function watched(
  response: Response,
  clock: TryClock,
  release: () => void,
  failure: (cause: unknown) => CohortError,
): ReadableStream<Uint8Array> {
  const body = response.body;
  if (body === null) {
    release();
    return new ReadableStream<Uint8Array>({ start: (controller) => controller.close() });
  }
  const reader = body.getReader();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        clock.start();
        let next: { done: boolean; value?: Uint8Array };
        try {
          next = await reader.read();
        } catch (cause) {
          release();
          controller.error(failure(cause));
          return;
        }
        clock.pause();
        if (next.done || next.value === undefined) {
          release();
          controller.close();
        } else {
          controller.enqueue(next.value);
        }
      },
      async cancel(reason) {
        release();
        await reader.cancel(reason).catch(() => undefined);
      },
    },
    { highWaterMark: 0 },
  );
}

/** cohort's JSON error (`{"code", "message", "retryable"}`) of a non-2xx answer. */
function errorOfAnswer(status: number, body: Uint8Array, what: string): CohortError {
  const text = new TextDecoder().decode(body);
  const retryableStatus = status === 429 || status === 503;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (typeof parsed === "object" && parsed !== null && typeof (parsed as { code?: unknown }).code === "string") {
    const { code, message, retryable } = parsed as { code: string; message?: unknown; retryable?: unknown };
    return new CohortError(code, typeof message === "string" ? message : code, {
      status,
      retryable: retryable === true || retryableStatus,
    });
  }
  return new CohortError("bad_response", `${what}: HTTP ${status}: ${text.slice(0, 200)}`, {
    status,
    retryable: retryableStatus,
  });
}

/** A `Retry-After` header (seconds, or an HTTP date) in milliseconds from now; 0 if absent. */
function retryAfterMs(header: string | null): number {
  if (header === null) return 0;
  const seconds = Number(header);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(header);
  return Number.isNaN(date) ? 0 : Math.max(0, date - Date.now());
}

/** A {@link CohortError} that `error` is, or was caused by. */
function ownError(error: unknown): CohortError | undefined {
  for (let cause = error, depth = 0; cause instanceof Error && depth < 4; cause = cause.cause, depth += 1) {
    if (cause instanceof CohortError) return cause;
  }
  return undefined;
}

/** A transport failure's reason, from fetch's error and its cause. */
function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : "";
  return `${error.message}${cause}`;
}
