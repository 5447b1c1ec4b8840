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

/** One request, sent again unchanged on each retry. */
export interface RequestSpec {
  method: "GET" | "POST" | "DELETE";
  /** The path and query, e.g. `/v1/jobs/batch`. */
  path: string;
  /** A JSON text (sent as `application/json`) or bytes (as `contentType`). */
  body?: string | Uint8Array;
  /** The content type of a bytes body. */
  contentType?: string;
  /** When to stop retrying (`Date.now()` milliseconds). */
  deadline: number;
  /** Longest one try may take before it counts as a transport failure. */
  tryTimeoutMs: number;
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
    for (let attempt = 0; ; ) {
      if (this.closed) throw closedError();
      const node = this.pick();
      const outcome = await this.try(node, spec);
      if (outcome instanceof Uint8Array) return outcome;
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

  /** One try on `node`: the body on success, a {@link Retry}, or a thrown error that is final. */
  private async try(node: Node, spec: RequestSpec): Promise<Uint8Array | Retry> {
    const headers: Record<string, string> = { ...this.headers };
    if (typeof spec.body === "string") headers["content-type"] = "application/json";
    else if (spec.body !== undefined) headers["content-type"] = spec.contentType ?? "application/octet-stream";
    // One try ends at its timeout, or when the client closes.
    const abort = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      abort.abort();
    }, spec.tryTimeoutMs);
    const onClose = (): void => abort.abort();
    this.closing.signal.addEventListener("abort", onClose);
    let status: number;
    let retryAfter: string | null;
    let body: Uint8Array;
    try {
      const response = await this.fetch(node.url + spec.path, {
        method: spec.method,
        headers,
        body: spec.body,
        signal: abort.signal,
      });
      status = response.status;
      retryAfter = response.headers.get("retry-after");
      body = new Uint8Array(await response.arrayBuffer());
    } catch (cause) {
      if (this.closed) throw closedError();
      node.failed(Date.now());
      const reason = timedOut ? `no answer within ${Math.round(spec.tryTimeoutMs)} ms` : describe(cause);
      const error = new CohortError("unreachable", `${spec.method} ${spec.path} to ${node.url}: ${reason}`, {
        retryable: true,
        cause,
      });
      return { error, retryAfterMs: 0 };
    } finally {
      clearTimeout(timer);
      this.closing.signal.removeEventListener("abort", onClose);
    }
    if (status === 503) node.failed(Date.now());
    else node.answered();
    if (status >= 200 && status < 300) return body;
    const error = errorOfAnswer(status, body, `${spec.method} ${spec.path}`);
    if (!error.retryable) throw error;
    return { error, retryAfterMs: retryAfterMs(retryAfter) };
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

/** A transport failure's reason, from fetch's error and its cause. */
function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : "";
  return `${error.message}${cause}`;
}
