"""Posts an event to a webhook: the Python twin of the Rust `webhook` example.

Input: JSON `{"url": "https://hooks.example.com/...", "event": {...}}`. The
job POSTs `event` as JSON to `url`, with an `Idempotency-Key` header derived
from the input, and returns `{"status": 204}` when the webhook answers `2xx`.
Any other answer fails the job with the code `webhook_rejected`; a call that
gets no answer fails with the SDK's `http_*` code (`http_denied` when the
deployment has no grant for the URL, `http_timeout`, `http_error`).

The job sets no credentials: an `Authorization` header, say, comes from the
operator's grant (`--header 'Authorization: Bearer {secret:HOOK_TOKEN}'`),
filled in by the node, so the job never holds the secret.

cohort may run a job more than once, so the idempotency key is the SHA-256
of the job's input, the same on every attempt: a webhook that honours
`Idempotency-Key` ignores the repeats.
"""

import hashlib
import json

from cohort_job import JobError, http, info, job

#: How long one delivery may take (seconds), from connecting to the last
#: byte of the answer.
TIMEOUT = 10

#: The most answer body this job reads; webhook answers are short.
MAX_ANSWER_BYTES = 64 * 1024

USAGE = 'expected {"url": "https://...", "event": {...}}'


@job(input="bytes", output="json")
def run(data: bytes) -> dict:
    try:
        delivery = json.loads(data)
    except ValueError as e:
        raise JobError.bad_input(f"{USAGE}: {e}") from None
    if not isinstance(delivery, dict) or not isinstance(delivery.get("url"), str):
        raise JobError.bad_input(USAGE)
    if not isinstance(delivery.get("event"), dict):
        raise JobError.bad_input("`event` must be a JSON object")
    key = hashlib.sha256(data).hexdigest()
    info(f"delivering the event, idempotency key {key}")

    response = http.post(
        delivery["url"],
        json=delivery["event"],
        headers={"Idempotency-Key": key},
        timeout=TIMEOUT,
        max_response_bytes=MAX_ANSWER_BYTES,
    )
    # Redirects are not followed, so a 3xx is a failure too. The message
    # names the status and the start of the answer's body.
    try:
        response.raise_for_status()
    except http.HttpError as e:
        raise JobError("webhook_rejected", e.message) from None
    info(f"delivered: {response.status}")
    return {"status": response.status}
