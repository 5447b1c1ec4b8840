// Counts the primes below a limit with a segmented sieve of Eratosthenes:
// the TypeScript twin of examples/primes.
//
// The job input is JSON `{"limit": N}`, its output `{"limit": N, "count": C}`.
// It reports progress after every segment and checkpoints
// `{"limit": N, "next": M, "count": C}` (all primes below M counted, the same
// checkpoint as the Rust job's), so an attempt that is retried resumes where
// the last one stopped instead of starting over.

import { JobError, checkpointJson, info, job, progress, resumeJson } from "cohort-job";

/**
 * Numbers sieved per segment. The sieve keeps odd numbers only, so this is a
 * 512 KiB Uint8Array, and a segment is roughly 0.1 s of work between
 * progress reports in the (interpreting) engine.
 */
const SEGMENT_LEN = 1 << 20;

/** Largest accepted limit; keeps the base-prime table small (sqrt < 2^20). */
const LIMIT_MAX = 2 ** 40;

interface Request {
  limit: number;
}

interface Response {
  limit: number;
  count: number;
}

/** Where an attempt stopped: all primes below `next` have been counted. */
interface Checkpoint {
  limit: number;
  next: number;
  count: number;
}

export const run = job.json((request: unknown): Response => {
  const { limit } = parseRequest(request);
  let lo = 0;
  let count = 0;
  const saved = resumeJson<unknown>();
  if (saved !== undefined) {
    const c = parseCheckpoint(saved);
    if (c.limit === limit) {
      info(`resuming at ${c.next} with ${c.count} primes counted`);
      lo = c.next;
      count = c.count;
    }
  }
  const base = basePrimes(limit);
  const scratch = new Uint8Array(SEGMENT_LEN / 2);
  while (lo < limit) {
    const hi = Math.min(lo + SEGMENT_LEN, limit);
    count += countSegment(lo, hi, base, scratch);
    lo = hi;
    checkpointJson({ limit, next: lo, count } satisfies Checkpoint);
    progress(lo / limit, "sieving");
  }
  return { limit, count };
});

function parseRequest(request: unknown): Request {
  const limit = (request as Partial<Request> | null)?.limit;
  if (typeof request !== "object" || request === null || !isCount(limit)) {
    throw JobError.badInput('expected {"limit": N} with N a non-negative integer');
  }
  if (limit > LIMIT_MAX) {
    throw JobError.badInput(`limit must be at most ${LIMIT_MAX}`);
  }
  return { limit };
}

/**
 * A checkpoint that does not parse is an error rather than a fresh start:
 * silently starting over could hide a bug.
 */
function parseCheckpoint(saved: unknown): Checkpoint {
  const c = saved as Partial<Checkpoint> | null;
  if (
    typeof c !== "object" ||
    c === null ||
    !isCount(c.limit) ||
    !isCount(c.next) ||
    !isCount(c.count) ||
    c.next > c.limit
  ) {
    throw new JobError("bad_checkpoint", `cannot decode checkpoint: ${JSON.stringify(saved)}`);
  }
  return { limit: c.limit, next: c.next, count: c.count };
}

function isCount(n: unknown): n is number {
  return typeof n === "number" && Number.isSafeInteger(n) && n >= 0;
}

/** The primes up to and including `sqrt(limit)`. */
function basePrimes(limit: number): number[] {
  const root = isqrt(limit);
  const composite = new Uint8Array(root + 1);
  const primes: number[] = [];
  for (let n = 2; n <= root; n++) {
    if (composite[n] === 0) {
      primes.push(n);
      for (let m = n * n; m <= root; m += n) {
        composite[m] = 1;
      }
    }
  }
  return primes;
}

/**
 * The number of primes `p` with `lo <= p < hi`, given `base` from
 * `basePrimes` for a limit of at least `hi`. `scratch` holds one byte per
 * odd number of the segment (at least `(hi - lo) / 2 + 1` of them) and is
 * reused between segments.
 */
function countSegment(lo: number, hi: number, base: readonly number[], scratch: Uint8Array): number {
  if (hi <= lo) {
    return 0;
  }
  // Index i stands for the odd number first + 2i. (Numbers go up to 2^40:
  // no bitwise operators, which truncate to 32 bits.)
  const first = lo % 2 === 0 ? lo + 1 : lo;
  const size = first < hi ? Math.floor((hi - 1 - first) / 2) + 1 : 0;
  const odd = scratch.subarray(0, size);
  odd.fill(1);
  for (let k = 1; k < base.length; k++) {
    const p = base[k];
    if (p * p >= hi) {
      break;
    }
    // The first odd multiple of p that is at least max(p^2, lo).
    let m = Math.max(p * p, Math.ceil(lo / p) * p);
    if (m % 2 === 0) {
      m += p;
    }
    for (let i = (m - first) / 2; i < size; i += p) {
      odd[i] = 0;
    }
  }
  // 1 is not prime; 2 is the one even prime.
  if (first === 1 && size > 0) {
    odd[0] = 0;
  }
  let count = lo <= 2 && 2 < hi ? 1 : 0;
  // indexOf scans natively: one interpreted step per prime, not per number.
  for (let i = odd.indexOf(1); i !== -1; i = odd.indexOf(1, i + 1)) {
    count++;
  }
  return count;
}

function isqrt(n: number): number {
  let r = Math.floor(Math.sqrt(n));
  while (r * r > n) {
    r--;
  }
  while ((r + 1) * (r + 1) <= n) {
    r++;
  }
  return r;
}
