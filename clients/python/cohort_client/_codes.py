"""The server's error codes: the HTTP status each is answered with and
whether a retry may help.

Generated from clients/openapi.json by clients/gen_error_codes.py: do not edit.
tests/test_codes.py checks it against the document.
"""

from typing import Dict, Tuple

#: Every code the API documents: code -> (HTTP status, retryable).
ERROR_CODES: Dict[str, Tuple[int, bool]] = {
    "bad_json": (400, False),
    "bad_request": (400, False),
    "invalid_token": (400, False),
    "tls_required": (400, False),
    "unauthorized": (401, False),
    "forbidden": (403, False),
    "not_front_end": (403, False),
    "dag_not_found": (404, False),
    "job_expired": (404, False),
    "job_not_found": (404, False),
    "module_not_stored": (404, False),
    "not_found": (404, False),
    "schedule_not_found": (404, False),
    "token_not_found": (404, False),
    "request_timeout": (408, True),
    "idempotency_conflict": (409, False),
    "job_finished": (409, False),
    "job_not_finished": (409, True),
    "job_not_succeeded": (409, False),
    "nothing_to_roll_back": (409, False),
    "schedule_exists": (409, False),
    "token_exists": (409, False),
    "upgrade_busy": (409, True),
    "upgrade_unsupported": (409, False),
    "body_too_large": (413, False),
    "input_too_large": (413, False),
    "module_too_large": (413, False),
    "invalid_dag": (422, False),
    "invalid_filter": (422, False),
    "invalid_job": (422, False),
    "invalid_master": (422, False),
    "invalid_schedule": (422, False),
    "master_nondeterministic_import": (422, False),
    "master_replay_diverged": (422, False),
    "master_snapshot_unreadable": (422, False),
    "master_traps": (422, False),
    "master_wrong_world": (422, False),
    "module_invalid": (422, False),
    "module_job_version": (422, False),
    "module_not_found": (422, False),
    "module_unsupported_import": (422, False),
    "module_wrong_world": (422, False),
    "queue_full": (429, True),
    "too_many_connections": (429, True),
    "unique_keys_full": (429, True),
    "headers_too_large": (431, False),
    "internal": (500, False),
    "unknown_version": (500, False),
    "master_unavailable": (503, True),
    "outcome_unknown": (503, True),
    "replicas_unavailable": (503, True),
    "replication_failed": (503, True),
}
