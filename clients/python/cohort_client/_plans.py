"""The client's request flows, written once for both clients.

A *plan* is a generator that yields what it needs done, a `Send` (one HTTP
request) or a `Sleep`, and is sent back the outcome: the ``httpx.Response``
or the ``httpx.RequestError`` for a `Send`, ``None`` after a `Sleep`. Its
return value is the flow's result; a failure is raised as `CohortError`.
`Client` runs plans with ``httpx.Client`` and ``time.sleep``, `AsyncClient`
with ``httpx.AsyncClient`` and ``asyncio.sleep``: retries, failover, the
batch's resending and the fallbacks below exist only here.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Generator, List, Optional, Sequence, TypeVar, Union

import httpx

from . import _core
from ._core import (
    Attempts,
    Backoff,
    Finished,
    JobCore,
    Module,
    ModuleCache,
    NodeSet,
    Pending,
    RequestCounter,
    Settings,
)
from .errors import CohortError

T = TypeVar("T")


class Send:
    """Send one request; the plan is sent back its response or its
    ``httpx.RequestError``."""

    __slots__ = ("method", "url", "content", "timeout")

    def __init__(self, method: str, url: str, content: Optional[bytes], timeout: httpx.Timeout) -> None:
        self.method = method
        self.url = url
        self.content = content
        self.timeout = timeout


class Sleep:
    """Pause before the next try."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


Op = Union[Send, Sleep]
Plan = Generator[Op, Any, T]


class Plans:
    """A client's state shared by its requests (its nodes, counters and
    uploaded modules), and the plans of its requests."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.nodes = NodeSet(settings.urls)
        self.counter = RequestCounter()
        self.modules = ModuleCache()

    def call(
        self,
        method: str,
        path: str,
        *,
        content: Optional[bytes] = None,
        deadline: Optional[float] = None,
        extra_s: float = 0.0,
    ) -> Plan[httpx.Response]:
        """One request, with failover and retries until ``deadline`` (see
        `Attempts`); its success answer."""
        attempts = Attempts(self.nodes, self.settings.deadline() if deadline is None else deadline)
        timeout = self.settings.timeout(extra_s)
        while True:
            node = attempts.node()
            self.counter.count(method, path)
            answer = yield Send(method, node + path, content, timeout)
            if isinstance(answer, httpx.Response):
                if answer.is_success:
                    attempts.succeeded(node)
                    return answer
                pause = attempts.refused(node, answer.status_code, answer.content, answer.headers.get("retry-after"))
            else:
                pause = attempts.transport_failed(node, answer)
            if pause is None:
                assert attempts.last_error is not None
                raise attempts.last_error
            yield Sleep(pause)

    def upload(self, module: Module) -> Plan[str]:
        """Upload a module given as a path or bytes; its digest. A path is
        uploaded once (again if the file changes). When the token may not
        upload (``forbidden``), the module is named by its digest, as
        ``cohort submit`` does: someone else may have uploaded it."""
        cached = self.modules.cached(module)
        if cached is not None:
            return cached
        data = ModuleCache.read(module)
        digest = self.modules.was_uploaded(data)
        if digest is None:
            try:
                response = yield from self.call("POST", "/v1/modules", content=data)
                digest = _core.digest_of_upload(response.content)
            except CohortError as error:
                if error.code != "forbidden":
                    raise
                digest = _core.local_digest(data)
        self.modules.remember(module, digest)
        return digest

    def digest(self, module: Module) -> Plan[str]:
        """The digest ``module`` names, uploading it if it is a path or bytes."""
        named = ModuleCache.digest_named(module)
        if named is not None:
            return named
        return (yield from self.upload(module))

    def send_batch(self, batch: List[Pending], accepted: Callable[[List[JobCore]], None]) -> Plan[None]:
        """Send a batch; hand its accepted jobs to ``accepted``; send its
        retryable refusals again (only those) until their deadline. Fails
        every job of the batch if the request itself fails for good."""
        backoff = Backoff()
        while batch:
            deadline = min(item.deadline for item in batch)
            try:
                response = yield from self.call(
                    "POST", "/v1/jobs/batch", content=_core.batch_body(batch), deadline=deadline
                )
                done, batch = _core.settle_batch(batch, response.content)
            except CohortError as error:
                for item in batch:
                    item.job._fail(error)
                return
            accepted(done)
            if batch:
                yield Sleep(min(backoff.pause(), max(0.0, deadline - time.monotonic())))

    def json(self, method: str, path: str, body: Any = None) -> Plan[Any]:
        """One request with a JSON body (or none); its JSON answer."""
        content = None if body is None else _core.dump_json(body)
        response = yield from self.call(method, path, content=content)
        return _core.load_json(response.content)

    def create_schedule(
        self, name: str, module: Module, input: Any, timing: Dict[str, Any], options: Dict[str, Any]
    ) -> Plan[Dict[str, Any]]:
        """``POST /v1/schedules``: the schedule."""
        digest = yield from self.digest(module)
        body: Dict[str, Any] = {"name": name, "job": _core.job_body(digest, input, **options)}
        body.update((key, value) for key, value in timing.items() if value is not None)
        return (yield from self.json("POST", "/v1/schedules", body))

    def submit_dag(
        self, jobs: Sequence[Dict[str, Any]], on_failure: Optional[str], idempotency_key: Optional[str]
    ) -> Plan[Dict[str, Any]]:
        """``POST /v1/dags``, with a key of the client's when none is given,
        so that a retry never makes a second DAG."""
        body_jobs: List[Dict[str, Any]] = []
        for job in jobs:
            options = dict(job)
            entry: Dict[str, Any] = {"name": options.pop("name")}
            module = options.pop("module")
            input = options.pop("input", None)
            for edge in ("after", "after_jobs", "parent_outputs"):
                if options.get(edge) is not None:
                    entry[edge] = options.pop(edge)
                options.pop(edge, None)
            digest = yield from self.digest(module)
            entry["job"] = _core.job_body(digest, input, **options)
            body_jobs.append(entry)
        body: Dict[str, Any] = {
            "jobs": body_jobs,
            "idempotency_key": idempotency_key if idempotency_key is not None else _core.new_idempotency_key(),
        }
        if on_failure is not None:
            body["on_failure"] = on_failure
        return (yield from self.json("POST", "/v1/dags", body))

    def wait(self, ids: Sequence[int], wait_ms: int) -> Plan[Dict[int, Finished]]:
        """One ``POST /v1/jobs/wait``: the jobs among ``ids`` that finished."""
        response = yield from self.call(
            "POST", "/v1/jobs/wait", content=_core.wait_body(ids, wait_ms), extra_s=wait_ms / 1000.0
        )
        return _core.parse_wait_answer(response.content)

    def fetch_result(self, job_id: int) -> Plan[bytes]:
        """A succeeded job's output, too large to have come inline."""
        response = yield from self.call("GET", f"/v1/jobs/{job_id}/result")
        return response.content

    def job_view(self, method: str, job_id: int) -> Plan[Dict[str, Any]]:
        """``GET`` or ``DELETE /v1/jobs/{id}``: the job's view."""
        response = yield from self.call(method, f"/v1/jobs/{job_id}")
        view = _core.load_json(response.content)
        if not isinstance(view, dict):
            raise _core.bad_answer("a job's view that is not an object")
        return view

    def cancel(self, job_id: int) -> Plan[Dict[str, Any]]:
        """Cancel a job; its view. One already cancelled (by an earlier try
        whose answer was lost, or by anyone) is returned as it is."""
        try:
            return (yield from self.job_view("DELETE", job_id))
        except CohortError as error:
            if error.code != "job_finished":
                raise
            view = yield from self.job_view("GET", job_id)
            if view.get("state") != "cancelled":
                raise error
            return view
