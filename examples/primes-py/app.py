"""Counts the primes below a limit with a segmented sieve of Eratosthenes:
the Python twin of the Rust `primes` example.

The job input is JSON `{"limit": N}`, its output `{"limit": N, "count": C}`.
It reports progress after every segment and checkpoints
`{"limit": N, "next": ..., "count": ...}` (the Rust job's format, so either
can resume the other's checkpoint); an attempt that is retried (say, because
its worker died) resumes where the last one stopped instead of starting over.
"""

import json
from math import isqrt

from cohort_job import JobError, checkpoint_json, info, job, progress, resume_json

#: Numbers sieved per segment (a 16 MiB bytearray): some 50-70 ms of work in
#: Wasm between two progress reports and checkpoints. (2^22 sieves about 10%
#: faster overall but checkpoints four times as often; 2^20 is slower, the
#: Python loop over the base primes then weighing more than the sieve.)
SEGMENT_LEN = 1 << 24

#: Largest accepted limit, as in the Rust job (the base primes stay below 2^20).
LIMIT_MAX = 1 << 40


def base_primes(limit: int) -> list[int]:
    """The primes up to and including `isqrt(limit)`."""
    root = isqrt(limit)
    if root < 2:
        return []
    is_prime = bytearray([1]) * (root + 1)
    is_prime[0] = is_prime[1] = 0
    for n in range(2, isqrt(root) + 1):
        if is_prime[n]:
            is_prime[n * n :: n] = bytes(len(range(n * n, root + 1, n)))
    return [n for n, flag in enumerate(is_prime) if flag]


def count_segment(lo: int, hi: int, base: list[int]) -> int:
    """The number of primes `p` with `lo <= p < hi`, given `base` from
    `base_primes` for a limit of at least `hi`."""
    if hi <= lo:
        return 0
    size = hi - lo
    flags = bytearray([1]) * size
    # Crossing off is one slice assignment per prime: the stride loop runs
    # in C, not in Python.
    for p in base:
        first = p * p
        if first >= hi:
            break
        if first < lo:
            first = -(-lo // p) * p
        start = first - lo
        flags[start::p] = bytes((size - 1 - start) // p + 1)
    # 0 and 1 are not prime.
    for n in range(lo, min(hi, 2)):
        flags[n - lo] = 0
    return flags.count(1)


def count_primes(limit: int) -> int:
    """The number of primes below `limit`, one segment at a time (what the
    job does, minus its progress and checkpoints)."""
    base = base_primes(limit)
    count = 0
    for lo in range(0, limit, SEGMENT_LEN):
        count += count_segment(lo, min(lo + SEGMENT_LEN, limit), base)
    return count


def parse_request(request: object) -> int:
    """The limit asked for, or a `bad_input` job error."""
    if not isinstance(request, dict) or "limit" not in request:
        raise JobError.bad_input('expected {"limit": N}')
    limit = request["limit"]
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise JobError.bad_input(f"limit must be a non-negative integer, not {json.dumps(limit)}")
    if limit > LIMIT_MAX:
        raise JobError.bad_input(f"limit must be at most {LIMIT_MAX}")
    return limit


def resume_point(limit: int) -> tuple[int, int]:
    """Where to start: `(next, count)` from an earlier attempt's checkpoint
    for the same limit, else `(0, 0)`."""
    saved = resume_json()
    if saved is None:
        return 0, 0
    if not isinstance(saved, dict):
        raise JobError("bad_checkpoint", f"checkpoint is not an object: {saved!r}")
    if saved.get("limit", limit) != limit:
        return 0, 0
    lo, count = saved.get("next"), saved.get("count")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (lo, count)):
        raise JobError("bad_checkpoint", f"checkpoint lacks next/count: {saved!r}")
    lo = min(lo, limit)
    info(f"resuming at {lo} with {count} primes counted")
    return lo, count


@job(input="json", output="json")
def run(request: object) -> dict:
    limit = parse_request(request)
    lo, count = resume_point(limit)
    base = base_primes(limit)
    while lo < limit:
        hi = min(lo + SEGMENT_LEN, limit)
        count += count_segment(lo, hi, base)
        lo = hi
        checkpoint_json({"limit": limit, "next": lo, "count": count})
        progress(lo / limit, "sieving")
    return {"limit": limit, "count": count}
