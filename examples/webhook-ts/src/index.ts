// Posts an event to a webhook: the TypeScript twin of examples/webhook.
//
// Input: JSON `{"url": "https://hooks.example.com/...", "event": {...}}`.
// The job POSTs `event` as JSON to `url`, with an `Idempotency-Key` header
// derived from the input, and returns `{"status": 204}` when the webhook
// answers `2xx`. Any other answer fails the job with the code
// `webhook_rejected`, no answer within 10 s with `http_timeout`. A call the
// node refuses or cannot complete rejects, failing the job with
// `uncaught_exception`; the job's log says why (`egress_denied: ...`).
//
// The job sets no credentials: an `Authorization` header, say, comes from
// the operator's grant (`--header 'Authorization: Bearer {secret:HOOK_TOKEN}'`),
// filled in by the node, so the job never holds the secret.
//
// cohort may run a job more than once, so the idempotency key is the
// SHA-256 of the job's input, the same on every attempt: a webhook that
// honours `Idempotency-Key` ignores the repeats.

import { JobError, info, job } from "cohort-job";

/** How long one delivery may take, from sending to the last byte. */
const TIMEOUT_MS = 10_000;

/** How much of a refusal's body the error message quotes. */
const EXCERPT_CHARS = 200;

const USAGE = 'expected {"url": "https://...", "event": {...}}';

interface Delivery {
  url: string;
  event: Record<string, unknown>;
}

// `job.text` decodes strict UTF-8, so the text encodes back to the very
// bytes of the input, which the key hashes.
export const run = job.text(async (input: string): Promise<string> => {
  const { url, event } = parseDelivery(input);
  const key = await idempotencyKey(input);
  info(`delivering the event, idempotency key ${key}`);
  const status = await within(TIMEOUT_MS, deliver(url, event, key));
  info(`delivered: ${status}`);
  return JSON.stringify({ status });
});

/** POSTs `event`; its answer's status if `2xx`, else `webhook_rejected`. */
async function deliver(url: string, event: object, key: string): Promise<number> {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": key },
    body: JSON.stringify(event),
    redirect: "manual",
  });
  // A 3xx is a failure too. The message names the status and the start of
  // the answer's body.
  if (!response.ok) {
    const text = (await response.text()).split(/\s+/).join(" ").trim();
    const excerpt = text.length > EXCERPT_CHARS ? `${text.slice(0, EXCERPT_CHARS)}…` : text;
    throw new JobError("webhook_rejected", `the server answered ${response.status}${excerpt && `: ${excerpt}`}`);
  }
  return response.status;
}

/** `work`, or `http_timeout` after `ms` (the engine's fetch takes no deadline). */
async function within<T>(ms: number, work: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new JobError("http_timeout", `the webhook did not answer within ${ms / 1000} s`)), ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function parseDelivery(input: string): Delivery {
  let delivery: Partial<Delivery> | null;
  try {
    delivery = JSON.parse(input);
  } catch (e) {
    throw JobError.badInput(`${USAGE}: ${e}`);
  }
  if (typeof delivery !== "object" || delivery === null || typeof delivery.url !== "string") {
    throw JobError.badInput(USAGE);
  }
  const { url, event } = delivery;
  if (typeof event !== "object" || event === null || Array.isArray(event)) {
    throw JobError.badInput("`event` must be a JSON object");
  }
  return { url, event };
}

/** The hex SHA-256 of the input: the same on every attempt of the job. */
async function idempotencyKey(input: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(input));
  return Array.from(new Uint8Array(digest), (byte) => byte.toString(16).padStart(2, "0")).join("");
}
