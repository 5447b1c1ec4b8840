"""The client's table of error codes is the server's, and a batch's refused
item reports the status the server answers its code with."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, Tuple

from cohort_client import CohortError
from cohort_client._codes import ERROR_CODES
from cohort_client._core import JobCore, Pending, settle_batch, status_of_code

#: The node's OpenAPI document, generated from its ``ErrorCode`` enum.
DOCUMENT = Path(__file__).resolve().parents[2] / "openapi.json"


def documented() -> Dict[str, Tuple[int, bool]]:
    """Every code of the document's error examples, with its status and
    ``retryable`` (a code answered with two fails)."""
    document = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    codes: Dict[str, Tuple[int, bool]] = {}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, response in operation.get("responses", {}).items():
                for media in response.get("content", {}).values():
                    for example in media.get("examples", {}).values():
                        value: Any = example.get("value")
                        if not isinstance(value, dict) or not isinstance(value.get("code"), str):
                            continue
                        row = (int(status), value["retryable"])
                        known = codes.setdefault(value["code"], row)
                        assert known == row, f"{value['code']}: {method} {path}"
    return codes


def test_the_table_is_the_documents() -> None:
    expected = documented()
    assert len(expected) >= 40, f"the document lists {len(expected)} codes: not read right"
    wrong = {code: row for code, row in expected.items() if ERROR_CODES.get(code) != row}
    extra = sorted(set(ERROR_CODES) - set(expected))
    assert not wrong and not extra, (
        "cohort_client/_codes.py is not clients/openapi.json's table (run python3 clients/gen_error_codes.py): "
        f"the document's rows it lacks or has otherwise: {wrong}; codes the document lacks: {extra}"
    )
    for code, (status, _) in expected.items():
        assert status_of_code(code) == status, code


class Handle(JobCore):
    def _signal_accepted(self) -> None:
        pass

    def _signal_finished(self) -> None:
        pass


def test_a_refused_batch_item_has_the_status_its_code_is_answered_with() -> None:
    cases = [
        ("module_not_found", False, 422),
        ("invalid_job", False, 422),
        ("invalid_dag", False, 422),
        ("idempotency_conflict", False, 409),
        ("unique_keys_full", True, 429),
        ("queue_full", True, 429),
        ("outcome_unknown", True, 503),
        # A code from a newer master: the server answers it with 500.
        ("from_a_newer_master", False, 500),
    ]
    handles = [Handle(None) for _ in cases]
    # Past its deadline: a retryable refusal fails its handle too.
    items = [Pending(handle, b"{}", time.monotonic() - 1) for handle in handles]
    answer = {"results": [{"code": code, "message": "why", "retryable": retry} for code, retry, _ in cases]}
    accepted, again = settle_batch(items, json.dumps(answer).encode())
    assert accepted == [] and again == []
    for handle, (code, retryable, status) in zip(handles, cases):
        try:
            handle._accepted_id()
        except CohortError as error:
            assert (error.code, error.status, error.retryable) == (code, status, retryable)
        else:
            raise AssertionError(f"{code}: a refused job has no id")
