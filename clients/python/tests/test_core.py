"""The shared logic of both clients, without a server: the protocol's numbers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

import httpx
import pytest

from cohort_client import AsyncClient, BlobInfo, Client, CohortError, JobFailed, OutputBlob
from cohort_client._core import (
    Attempts,
    Backoff,
    BatchQueue,
    Finished,
    JobCore,
    ModuleCache,
    NodeSet,
    Pending,
    Settings,
    WaitBook,
    batch_body,
    error_from_answer,
    grants_body,
    job_body,
    new_idempotency_key,
    parse_wait_answer,
    settle_batch,
)
from cohort_client._plans import Plan, Plans, Send


class Handle(JobCore):
    """A handle that records what woke it."""

    def __init__(self) -> None:
        super().__init__(new_idempotency_key())
        self.woken = 0

    def _signal_accepted(self) -> None:
        self.woken += 1

    def _signal_finished(self) -> None:
        self.woken += 1


def test_keys_are_prefixed_and_random() -> None:
    keys = {new_idempotency_key() for _ in range(1000)}
    assert len(keys) == 1000
    assert all(key.startswith("py-") and len(key) == 3 + 32 for key in keys)


def test_backoff_is_full_jitter_doubling_to_5_s_with_retry_after_as_floor() -> None:
    backoff = Backoff()
    ceilings = [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    for ceiling in ceilings:
        assert 0.0 <= backoff.pause() <= ceiling
    assert Backoff().pause(retry_after=2.0) == 2.0


def test_errors_say_whether_to_retry() -> None:
    refused = error_from_answer(422, b'{"code":"module_not_found","message":"no","retryable":false}')
    assert (refused.code, refused.status, refused.retryable) == ("module_not_found", 422, False)
    busy = error_from_answer(503, b'{"code":"master_unavailable","message":"later","retryable":true}')
    assert busy.retryable
    assert error_from_answer(429, b"not json").retryable
    assert error_from_answer(502, b"Bad Gateway").code == "http_502"


def test_a_failing_node_is_skipped_and_the_next_tried_at_once() -> None:
    nodes = NodeSet(["http://a", "http://b"])
    attempts = Attempts(nodes, time.monotonic() + 60)
    assert attempts.node() == "http://a"
    assert attempts.transport_failed("http://a", OSError("refused")) == 0.0
    assert attempts.node() == "http://b"
    # A later request starts at b while a is skipped.
    assert Attempts(nodes, time.monotonic() + 60).node() == "http://b"
    assert attempts.refused("http://b", 404, b'{"code":"job_not_found","message":"x"}', None) is None
    assert attempts.last_error is not None and attempts.last_error.code == "job_not_found"


def test_a_request_gives_up_at_its_deadline_with_unreachable() -> None:
    attempts = Attempts(NodeSet(["http://a"]), time.monotonic())
    assert attempts.transport_failed("http://a", OSError("refused")) is None
    assert attempts.last_error is not None and attempts.last_error.code == "unreachable"


def test_batches_are_bounded_by_jobs_and_bytes() -> None:
    queue = BatchQueue(linger_s=3600.0, jobs_max=1000, bytes_max=10_000)
    body = json.dumps("x" * 996).encode()  # 998 bytes: 10 fit in 10,000 with their commas
    woke = [queue.add(Pending(Handle(), body, time.monotonic() + 60)) for _ in range(25)]
    assert woke[0] and not woke[1] and queue.full()
    first = queue.take()
    assert len(first) == 10
    assert json.loads(batch_body(first)) == {"jobs": ["x" * 996] * 10}
    assert len(queue.take()) == 10 and len(queue.take()) == 5 and len(queue) == 0


def test_a_batch_answer_accepts_refuses_and_resends_only_retryable_items() -> None:
    handles = [Handle() for _ in range(3)]
    items = [Pending(handle, b"{}", time.monotonic() + 60) for handle in handles]
    answer = {
        "results": [
            {"id": 7, "existing": True},
            {"code": "module_not_found", "message": "no", "retryable": False},
            {"code": "outcome_unknown", "message": "later", "retryable": True},
        ]
    }
    accepted, again = settle_batch(items, json.dumps(answer).encode())
    assert accepted == [handles[0]] and handles[0]._accepted_id() == 7 and handles[0]._accepted_existing()
    assert again == [items[2]]
    try:
        handles[1]._accepted_id()
    except CohortError as error:
        assert error.code == "module_not_found"
    else:
        raise AssertionError("a refused job has no id")


def test_the_waiter_keeps_4_requests_and_the_last_waits_1_s() -> None:
    book = WaitBook()
    handles = [Handle() for _ in range(6)]
    plans = []
    for number, handle in enumerate(handles):
        handle._accept(number, False)
        book.watch(handle)
        plans.append(book.next_request())
    assert [plan[1] for plan in plans[:4] if plan] == [25_000, 25_000, 25_000, 1_000]
    assert plans[4] is None and plans[5] is None
    settled = book.answered([3], {})
    assert settled == []
    plan = book.next_request()
    assert plan == ([4, 5, 3], 1_000)


def test_a_module_is_a_digest_a_name_or_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    digest = "ab" * 32
    assert ModuleCache.named(digest) == digest
    assert ModuleCache.named("send-email") == "send-email"
    assert ModuleCache.named("v1.2_x") == "v1.2_x"
    # Not in a name's shape: a path, uploaded first.
    for path in ("Send-Email", "-x", "./job.wasm", "build/job.wasm", "x" * 64, b"\0asm"):
        assert ModuleCache.named(path) is None, path
    # A name's shape, but a file has it: a path, as `cohort submit` decides.
    monkeypatch.chdir(tmp_path)
    assert ModuleCache.named("job.wasm") == "job.wasm"
    (tmp_path / "job.wasm").write_bytes(b"\0asm")
    assert ModuleCache.named("job.wasm") is None


def test_grants_are_url_strings_or_dicts() -> None:
    assert grants_body("https://a.example/", None, False) == {"http": [{"url": "https://a.example/"}]}
    assert grants_body(["https://a.example/", {"url": "http://10.0.0.5", "private": True}], ["POST"], True) == {
        "http": [
            {"url": "https://a.example/", "methods": ["POST"], "private": True},
            {"url": "http://10.0.0.5", "private": True},
        ]
    }
    assert grants_body(["https://a.example/"], "GET", False) == {"http": [{"url": "https://a.example/", "methods": ["GET"]}]}
    with pytest.raises(TypeError):
        grants_body([42], None, False)  # type: ignore[list-item]


def test_a_submission_narrows_its_grants_with_egress() -> None:
    body = job_body("hooks", "x", egress=["http://127.0.0.1:8080/ok", {"url": "https://a.example/", "methods": ["POST"]}])
    assert body["egress"] == [
        {"url": "http://127.0.0.1:8080/ok"},
        {"url": "https://a.example/", "methods": ["POST"]},
    ]
    assert "egress" not in job_body("hooks", "x")


def test_an_input_blob_is_sent_as_given_and_left_out_when_not_given() -> None:
    digest = "cd" * 32
    # A string as it is (the node checks it), a BlobInfo or an OutputBlob by its digest.
    assert job_body("m", None, input_blob="sha256:" + digest.upper()) == {
        "module": "m",
        "input_blob": "sha256:" + digest.upper(),
    }
    with_info = job_body("m", "text", input_blob=BlobInfo(digest, 9))
    assert with_info == {"module": "m", "input": "text", "input_blob": digest}
    assert job_body("m", b"\x00", input_blob=OutputBlob("counts.tsv", digest, 9))["input_blob"] == digest
    assert "input_blob" not in job_body("m", "text")
    with pytest.raises(TypeError):
        job_body("m", None, input_blob=7)  # type: ignore[arg-type]


def test_grants_may_carry_headers_naming_secrets() -> None:
    headers = {"authorization": "Bearer {secret:STRIPE}"}
    assert grants_body("https://api.stripe.com/v1/", ["POST"], False, headers) == {
        "http": [{"url": "https://api.stripe.com/v1/", "methods": ["POST"], "headers": headers}]
    }
    # Each URL string gets its own copy; a dict keeps its own headers (or none).
    body = grants_body(["https://a.example/", {"url": "https://b.example/"}], None, False, headers)
    assert body == {"http": [{"url": "https://a.example/", "headers": headers}, {"url": "https://b.example/"}]}
    assert body["http"][0]["headers"] is not headers
    assert grants_body("https://a.example/", None, False, {}) == {"http": [{"url": "https://a.example/"}]}


def test_a_grant_says_which_calls_it_records_only_when_told() -> None:
    # None: the node's default (every method but GET, HEAD and OPTIONS), left out.
    assert grants_body("https://a.example/", ["POST"], False) == {"http": [{"url": "https://a.example/", "methods": ["POST"]}]}
    assert grants_body("https://a.example/", None, False, None, True) == {"http": [{"url": "https://a.example/", "record": True}]}
    assert grants_body(["https://a.example/", {"url": "https://b.example/", "record": True}], None, False, None, False) == {
        "http": [{"url": "https://a.example/", "record": False}, {"url": "https://b.example/", "record": True}]
    }


# The plans of single requests, against canned answers (no server).

Answer = Union[httpx.Response, Exception]
Sent = Tuple[str, str, Any]


def carry_out(plan: "Plan[Any]", answers: Sequence[Answer]) -> Tuple[List[Sent], Any]:
    """Run ``plan`` (without sleeping), answering its requests in order:
    what it sent (method, URL, JSON body) and what it returned."""
    sent: List[Sent] = []
    pending = list(answers)
    outcome: Optional[Answer] = None
    try:
        while True:
            op = plan.send(outcome)
            if isinstance(op, Send):
                sent.append((op.method, op.url, None if op.content is None else json.loads(op.content)))
                outcome = pending.pop(0)
            else:
                outcome = None
    except StopIteration as done:
        return sent, done.value


def plans(*urls: str) -> Plans:
    return Plans(Settings.make(list(urls) or ["http://a"], None, None, 1, 1000, 60.0, 30.0))


def ok(body: Any) -> httpx.Response:
    return httpx.Response(200, json=body)


def refusal(status: int, code: str, retryable: bool) -> httpx.Response:
    return httpx.Response(status, json={"code": code, "message": "why", "retryable": retryable})


def test_a_grant_with_headers_and_its_revoke_send_them() -> None:
    headers = {"authorization": "Bearer {secret:STRIPE}"}
    answer = {"name": "pay", "http": [{"url": "https://api.stripe.com:443/v1/", "headers": headers}]}
    sent, result = carry_out(plans().grant("pay", "https://api.stripe.com/v1/", headers=headers), [ok(answer)])
    assert sent == [
        ("POST", "http://a/v1/deployments/pay/grants", {"http": [{"url": "https://api.stripe.com/v1/", "headers": headers}]})
    ]
    assert result == answer
    sent, _ = carry_out(plans().revoke("pay", "https://api.stripe.com/v1/", headers=headers), [ok(answer)])
    assert sent == [
        (
            "POST",
            "http://a/v1/deployments/pay/grants/revoke",
            {"http": [{"url": "https://api.stripe.com/v1/", "headers": headers}]},
        )
    ]


def test_secrets_a_job_may_read_are_granted_and_revoked_by_name() -> None:
    answer = {"name": "mail", "http": [], "secrets": ["SMTP"]}
    sent, result = carry_out(plans().grant("mail", secrets=["SMTP"]), [ok(answer)])
    assert sent == [("POST", "http://a/v1/deployments/mail/grants", {"secrets": ["SMTP"]})]
    assert result == answer
    # With grants, in one body; a string is one name.
    sent, _ = carry_out(plans().grant("mail", "https://smtp.example.com/", secrets="SMTP"), [ok(answer)])
    assert sent[0][2] == {"http": [{"url": "https://smtp.example.com/"}], "secrets": ["SMTP"]}
    sent, _ = carry_out(plans().revoke("mail", secrets=["SMTP"]), [ok({"name": "mail", "http": [], "secrets": []})])
    assert sent == [("POST", "http://a/v1/deployments/mail/grants/revoke", {"secrets": ["SMTP"]})]
    # Neither: every grant and readable secret goes.
    sent, _ = carry_out(plans().revoke("mail"), [ok({"name": "mail", "http": [], "secrets": []})])
    assert sent == [("DELETE", "http://a/v1/deployments/mail/grants", None)]
    # An empty list is sent as it is (refused with invalid_grant), never taken for "all".
    assert grants_body(None, None, False, None, None, []) == {}


def test_setting_a_secret_is_retried_and_fails_over() -> None:
    sent, result = carry_out(
        plans("http://a", "http://b").set_secret("STRIPE", "sk_live_1"),
        [httpx.ConnectError("refused"), refusal(503, "master_unavailable", True), ok({"name": "STRIPE", "created": True})],
    )
    body = {"value": "sk_live_1"}
    assert [(method, url) for method, url, _ in sent] == [
        ("POST", "http://a/v1/secrets/STRIPE"),
        ("POST", "http://b/v1/secrets/STRIPE"),
        ("POST", "http://a/v1/secrets/STRIPE"),
    ]
    assert all(content == body for _, _, content in sent)
    assert result == {"name": "STRIPE", "created": True}


def test_a_node_without_a_cluster_key_refuses_secrets_at_once() -> None:
    with pytest.raises(CohortError) as refused:
        carry_out(plans().set_secret("STRIPE", "x"), [refusal(409, "secrets_unavailable", False)])
    assert (refused.value.code, refused.value.status, refused.value.retryable) == ("secrets_unavailable", 409, False)


def test_secrets_are_listed_by_name() -> None:
    listed = [{"name": "STRIPE", "updated_at": 1700000000000, "used_by": ["pay"]}]
    sent, result = carry_out(plans().secrets(), [ok({"secrets": listed})])
    assert sent == [("GET", "http://a/v1/secrets", None)]
    assert result == listed


def test_deleting_a_secret_is_sent_once() -> None:
    sent, result = carry_out(plans().delete_secret("STRIPE"), [ok({"name": "STRIPE", "deleted": True})])
    assert (sent, result) == ([("DELETE", "http://a/v1/secrets/STRIPE", None)], None)
    # Not retried, not even on the next node: it may have been deleted.
    for failure in (httpx.ConnectError("refused"), refusal(503, "master_unavailable", True)):
        with pytest.raises(CohortError) as failed:
            carry_out(plans("http://a", "http://b").delete_secret("STRIPE"), [failure])
        assert failed.value.code in ("unreachable", "master_unavailable")
    # A name is one path segment, whatever it holds.
    sent, _ = carry_out(plans().delete_secret("A/B"), [ok({})])
    assert sent[0][1] == "http://a/v1/secrets/A%2FB"


def test_schedules_and_dags_send_an_input_blob_in_their_jobs() -> None:
    digest = "ef" * 32
    module = "12" * 32
    answer = {"name": "nightly", "every_ms": 60_000, "upcoming": []}
    schedule = plans().create_schedule("nightly", module, input_blob=BlobInfo(digest, 1), every_ms=60_000)
    sent, _ = carry_out(schedule, [ok(answer)])
    assert sent[0][2]["job"] == {"module": module, "input_blob": digest}
    sent, _ = carry_out(plans().create_schedule("nightly", module, "x", every_ms=60_000), [ok(answer)])
    assert sent[0][2]["job"] == {"module": module, "input": "x"}
    jobs = [
        {"name": "count", "module": module, "input_blob": digest},
        {"name": "report", "module": module, "after": ["count"]},
    ]
    sent, _ = carry_out(plans().submit_dag(jobs), [ok({"id": 1, "jobs": [1, 2], "existing": False})])
    dag_jobs = [entry["job"] for entry in sent[0][2]["jobs"]]
    assert dag_jobs == [{"module": module, "input_blob": digest}, {"module": module}]


def test_a_waits_answer_carries_the_output_blobs_of_a_job() -> None:
    blob = {"name": "counts.tsv", "digest": "ab" * 32, "bytes": 12}
    answer = {
        "jobs": [
            {"id": 1, "state": "succeeded", "error": None, "output_base64": "", "output_bytes": 0, "outputs": [blob]},
            {"id": 2, "state": "succeeded", "error": None, "output_base64": "", "output_bytes": 0},
        ]
    }
    finished = parse_wait_answer(json.dumps(answer).encode())
    assert finished[1].outputs == (OutputBlob("counts.tsv", "ab" * 32, 12),)
    assert finished[2].outputs == ()
    for bad in ({"name": "x", "digest": "ab" * 32}, {"name": "x", "digest": "ab" * 32, "bytes": True}, "x"):
        wrong = {"jobs": [{"id": 3, "state": "succeeded", "outputs": [bad]}]}
        with pytest.raises(CohortError) as refused:
            parse_wait_answer(json.dumps(wrong).encode())
        assert refused.value.code == "bad_answer"


def test_a_handle_gives_the_output_blobs_of_a_job_that_succeeded_only() -> None:
    blob = OutputBlob("counts.tsv", "ab" * 32, 12)
    succeeded, empty, dead = Handle(), Handle(), Handle()
    for number, handle in enumerate((succeeded, empty, dead)):
        handle._accept(number, False)
    succeeded._finish(Finished(0, "succeeded", None, b"{}", 2, (blob,)))
    empty._finish(Finished(1, "succeeded", None, b"{}", 2))
    dead._finish(Finished(2, "dead", CohortError("trap", "unreachable"), None, None))
    assert succeeded._settled_outputs() == [blob]
    assert empty._settled_outputs() == []
    with pytest.raises(JobFailed) as failed:
        dead._settled_outputs()
    assert (failed.value.code, failed.value.state) == ("trap", "dead")


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_malformed_traceparent_is_refused() -> None:
    settings = Settings.make("http://127.0.0.1:1", None, None, 1.0, 10, 1.0, 1.0)
    for bad in [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        " " + TRACEPARENT,
        TRACEPARENT + "\n",
        None,
        42,
    ]:
        with pytest.raises(ValueError, match="not a W3C traceparent"):
            settings.with_traceparent(bad)  # type: ignore[arg-type]
    # The clients refuse it before they make anything.
    with Client("http://127.0.0.1:1") as client, pytest.raises(ValueError, match="not a W3C traceparent"):
        client.with_traceparent(TRACEPARENT.upper())
    with pytest.raises(ValueError, match="not a W3C traceparent"):
        AsyncClient("http://127.0.0.1:1").with_traceparent(TRACEPARENT[:-3])


def test_a_traceparent_goes_with_every_request_of_the_new_client_only() -> None:
    settings = Settings.make("http://127.0.0.1:1", "secret", None, 1.0, 10, 1.0, 1.0)
    traced = settings.with_traceparent(TRACEPARENT)
    assert traced.http_options()["headers"]["traceparent"] == TRACEPARENT
    assert traced.http_options()["headers"]["authorization"] == "Bearer secret"
    assert "traceparent" not in settings.http_options()["headers"]
    assert (traced.urls, traced.token, traced.batch_max) == (settings.urls, settings.token, settings.batch_max)
    # Unsampled (flags 00) and other flags are as valid.
    assert settings.with_traceparent(TRACEPARENT[:-2] + "00").traceparent == TRACEPARENT[:-2] + "00"
    with Client("http://127.0.0.1:1", token="secret") as client, client.with_traceparent(TRACEPARENT) as other:
        assert other is not client
        assert other._http.headers["traceparent"] == TRACEPARENT
        assert other._http.headers["authorization"] == "Bearer secret"
        assert "traceparent" not in client._http.headers
