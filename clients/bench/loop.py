"""Submit N jobs one by one in a plain loop, then wait for every result in order.

    python loop.py celery N
    python loop.py cohort N URL[,URL...] ECHO_WASM

The same program for both systems: start the timer; submit N jobs, one call
per job (`echo.delay(f"job {i}")` with Celery, `client.submit(module,
f"job {i}")` with cohort's Python client); then wait for each result in
submission order (`r.get()`, `job.result()`), check that it equals its input,
and stop the timer. Prints one JSON line:
{"system", "n", "nodes", "seconds", "jobs_per_s", "submit_seconds"}.

Set-up that a real program does once (importing the Celery app; making the
cohort client and uploading the module) is outside the timer.
"""

import json
import sys
import time

RESULT_TIMEOUT_S = 600.0


def run_celery(n):
    from tasks import echo

    start = time.perf_counter()
    pending = []
    for i in range(n):
        pending.append((f"job {i}", echo.delay(f"job {i}")))
    submitted = time.perf_counter()
    for expected, r in pending:
        got = r.get(timeout=RESULT_TIMEOUT_S)
        if got != expected:
            raise SystemExit(f"celery: result {got!r} != input {expected!r}")
    end = time.perf_counter()
    return start, submitted, end, 1


def run_cohort(n, urls, wasm):
    from cohort_client import Client

    with Client(urls) as client:
        module = client.upload(wasm)
        start = time.perf_counter()
        pending = []
        for i in range(n):
            pending.append((f"job {i}".encode(), client.submit(module, f"job {i}")))
        submitted = time.perf_counter()
        for expected, job in pending:
            got = job.result(timeout=RESULT_TIMEOUT_S)
            if got != expected:
                raise SystemExit(f"cohort: result {got!r} != input {expected!r}")
        end = time.perf_counter()
    return start, submitted, end, len(urls)


def main(argv):
    usage = "usage: loop.py celery N | loop.py cohort N URL[,URL...] ECHO_WASM"
    if len(argv) < 3:
        raise SystemExit(usage)
    system, n = argv[1], int(argv[2])
    if system == "celery" and len(argv) == 3:
        start, submitted, end, nodes = run_celery(n)
    elif system == "cohort" and len(argv) == 5:
        urls = [u for u in argv[3].split(",") if u]
        start, submitted, end, nodes = run_cohort(n, urls, argv[4])
    else:
        raise SystemExit(usage)
    seconds = end - start
    print(
        json.dumps(
            {
                "system": system,
                "n": n,
                "nodes": nodes,
                "seconds": round(seconds, 3),
                "jobs_per_s": round(n / seconds, 1),
                "submit_seconds": round(submitted - start, 3),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv)
