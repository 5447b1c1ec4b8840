"""The client's request flows, written once for both clients.

A *plan* is a generator that yields what it needs done, a `Send` (one HTTP
request), a `Sleep` or a `Work` (blocking file I/O), and is sent back the
outcome: the ``httpx.Response`` or the ``httpx.RequestError`` for a `Send`,
``None`` after a `Sleep`, the function's result for a `Work`. Its return
value is the flow's result; a failure is raised as `CohortError`. `Client`
runs plans with ``httpx.Client``, ``time.sleep`` and direct calls,
`AsyncClient` with ``httpx.AsyncClient``, ``asyncio.sleep`` and
``asyncio.to_thread``: retries, failover, the batch's resending and the
fallbacks below exist only here.

A client method that is one request flow and nothing else (uploads,
deployments, schedules, DAGs) is written here once, as a plan with the
method's signature and documentation, and made a method of each client by
`blocking` or `awaiting`; so the two clients cannot drift apart on it.
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from urllib.parse import urlencode
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Coroutine,
    Dict,
    Generator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

import httpx

from . import _blobs, _core
from ._blobs import BlobEntry, BlobInfo, BlobPage, BodySource, FileBody, StreamBody
from ._core import (
    Attempts,
    Backoff,
    Finished,
    Grant,
    InputBlob,
    JobCore,
    Module,
    ModuleCache,
    NodeSet,
    Pending,
    RequestCounter,
    Settings,
)
from .errors import CohortError

if TYPE_CHECKING:
    from typing_extensions import Concatenate, ParamSpec

    P = ParamSpec("P")

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class Send:
    """Send one request; the plan is sent back its response or its
    ``httpx.RequestError``.

    ``content`` is bytes, or a `BodySource` read as it is sent (its
    ``chunks()`` or, by `AsyncClient`, its ``achunks()``). With ``stream``,
    a success answer's body is left unread, for the plan's caller to read
    (and close); an error answer's is read (and the answer closed) before
    the plan sees it. With ``head_extra``, the answer's head is waited for
    ``head_extra(bytes sent)`` seconds longer than the read timeout once
    the body has gone (see `_blobs.HeadWait`).
    """

    __slots__ = ("method", "url", "content", "timeout", "headers", "stream", "head_extra")

    def __init__(
        self,
        method: str,
        url: str,
        content: Optional[Union[bytes, BodySource]],
        timeout: httpx.Timeout,
        headers: Optional[Mapping[str, str]] = None,
        stream: bool = False,
        head_extra: Optional[Callable[[int], float]] = None,
    ) -> None:
        self.method = method
        self.url = url
        self.content = content
        self.timeout = timeout
        self.headers = headers
        self.stream = stream
        self.head_extra = head_extra

    def head_wait(self) -> Optional[_blobs.HeadWait]:
        """A `_blobs.HeadWait` of ``head_extra``, if it has one."""
        return None if self.head_extra is None else _blobs.HeadWait(self.head_extra)


class Sleep:
    """Pause before the next try."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class Work:
    """Call a blocking function (file I/O); the plan is sent back its
    result. `AsyncClient` calls it in a thread."""

    __slots__ = ("function", "args")

    def __init__(self, function: Callable[..., Any], *args: Any) -> None:
        self.function = function
        self.args = args


Op = Union[Send, Sleep, Work]
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
        content: Optional[Union[bytes, BodySource]] = None,
        deadline: Optional[float] = None,
        extra_s: float = 0.0,
        headers: Optional[Mapping[str, str]] = None,
        stream: bool = False,
        head_extra: Optional[Callable[[int], float]] = None,
    ) -> Plan[httpx.Response]:
        """One request, with failover and retries until ``deadline`` (see
        `Attempts`); its success answer (its body unread with ``stream``).
        ``head_extra``: as `Send`'s."""
        attempts = Attempts(self.nodes, self.settings.deadline() if deadline is None else deadline)
        timeout = self.settings.timeout(extra_s)
        while True:
            node = attempts.node()
            self.counter.count(method, path)
            answer = yield Send(method, node + path, content, timeout, headers, stream, head_extra)
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

    def named(self, module: Module) -> Plan[str]:
        """What a job names ``module`` by: its digest or a deployment's name
        as given (see `ModuleCache.named`), or the digest of a path or bytes,
        uploaded first."""
        named = ModuleCache.named(module)
        if named is not None:
            return named
        return (yield from self.upload(module))

    def submission(
        self, module: Module, input: Any, idempotency_key: Optional[str], **options: Any
    ) -> Plan[Tuple[str, bytes]]:
        """A job's idempotency key (the caller's, or one the client makes, so
        that retries never make a second job) and its item of a batch; the
        module is uploaded first if it is a path or bytes."""
        named = yield from self.named(module)
        key = idempotency_key if idempotency_key is not None else _core.new_idempotency_key()
        return key, _core.encode_submission(named, input, idempotency_key=key, **options)

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

    def json(self, method: str, path: str, body: Any = None, *, deadline: Optional[float] = None) -> Plan[Any]:
        """One request with a JSON body (or none); its JSON answer. Retried
        until ``deadline`` as `call` does (a deadline already past: sent
        once, never retried)."""
        content = None if body is None else _core.dump_json(body)
        response = yield from self.call(method, path, content=content, deadline=deadline)
        return _core.load_json(response.content)

    # The clients' methods that are one request flow each (see `blocking`):
    # their signatures and documentation are `Client`'s and `AsyncClient`'s.

    def upload(self, module: Module) -> Plan[str]:
        """Upload a module (a path to a ``.wasm`` file, or its bytes) and
        return its digest. A path is uploaded once and then remembered
        (until the file changes). If the token may not upload
        (``forbidden``), the module is named by its digest, as ``cohort
        submit`` does: someone else may have uploaded it."""
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

    def create_schedule(
        self,
        name: str,
        module: Module,
        input: Any = None,
        *,
        input_blob: Optional[InputBlob] = None,
        cron: Optional[str] = None,
        timezone: Optional[str] = None,
        every_ms: Optional[int] = None,
        overlap: Optional[str] = None,
        catch_up_ms: Optional[int] = None,
        timeout_ms: Optional[int] = None,
        max_attempts: Optional[int] = None,
        priority: Optional[int] = None,
        concurrency_key: Optional[str] = None,
        concurrency_limit: Optional[int] = None,
        labels: Optional[Mapping[str, str]] = None,
    ) -> Plan[Dict[str, Any]]:
        """Create a schedule that submits ``module`` with ``input`` at every
        tick of ``cron`` (read in ``timezone``, default UTC) or every
        ``every_ms``; ``overlap`` is ``skip`` (default), ``buffer_one``,
        ``allow_all`` or ``cancel_running``. Returns the schedule, with its
        next ticks (``upcoming``). Each tick fires exactly once. ``module``
        is as `submit`'s: a deployment's name is resolved at each tick;
        ``input_blob`` too: every job fired reads that blob (which must be
        stored when the schedule is created); ``labels`` too: every job
        fired starts only on a worker with them."""
        named = yield from self.named(module)
        job = _core.job_body(
            named,
            input,
            input_blob=input_blob,
            timeout_ms=timeout_ms,
            max_attempts=max_attempts,
            priority=priority,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
            labels=labels,
        )
        timing = {
            "cron": cron,
            "timezone": timezone,
            "every_ms": every_ms,
            "overlap": overlap,
            "catch_up_ms": catch_up_ms,
        }
        body: Dict[str, Any] = {"name": name, "job": job}
        body.update((key, value) for key, value in timing.items() if value is not None)
        return (yield from self.json("POST", "/v1/schedules", body))

    def schedules(self) -> Plan[List[Dict[str, Any]]]:
        """Every schedule, by name."""
        answer = yield from self.json("GET", "/v1/schedules")
        return list(answer["schedules"])

    def schedule(self, name: str) -> Plan[Dict[str, Any]]:
        """One schedule: timing, next ticks, unfinished jobs, counters,
        missed ranges."""
        return (yield from self.json("GET", _core.schedule_path(name)))

    def pause_schedule(self, name: str) -> Plan[Dict[str, Any]]:
        """Pause a schedule: its ticks neither fire nor count as missed."""
        return (yield from self.json("POST", _core.schedule_path(name, "pause"), {}))

    def resume_schedule(self, name: str) -> Plan[Dict[str, Any]]:
        """Resume a schedule from its first tick after now."""
        return (yield from self.json("POST", _core.schedule_path(name, "resume"), {}))

    def delete_schedule(self, name: str) -> Plan[None]:
        """Delete a schedule; the jobs it fired stay."""
        yield from self.json("DELETE", _core.schedule_path(name))

    def backfill(self, name: str, from_ms: Optional[int] = None, to_ms: Optional[int] = None) -> Plan[List[int]]:
        """Fire a schedule's missed ticks in ``from_ms..to_ms`` (default:
        all, at most 1,000 at a time); the new jobs' ids."""
        body = {key: value for key, value in (("from", from_ms), ("to", to_ms)) if value is not None}
        answer = yield from self.json("POST", _core.schedule_path(name, "backfill"), body)
        return list(answer["ids"])

    def submit_dag(
        self,
        jobs: Sequence[Dict[str, Any]],
        *,
        on_failure: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Plan[Dict[str, Any]]:
        """Submit jobs with edges as one DAG, all or nothing. Each job is a
        dict: ``name``, ``module`` (a digest, a deployment's name or a
        path), ``input``, ``after`` (names of the DAG's jobs it waits for),
        ``after_jobs`` (ids of existing jobs), ``parent_outputs`` (default
        true: the input becomes ``{"input", "parents": [{"id", "name",
        "output", "blobs"}]}``, and the job may read each parent's output
        blobs as ``PARENT/OUTPUT``) and any option of `submit` (``input_blob`` among
        them). Returns ``{"id", "jobs": [ids in order], "existing"}``;
        the client makes an idempotency key when none is given, so that a
        retry never makes a second DAG."""
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
            named = yield from self.named(module)
            entry["job"] = _core.job_body(named, input, **options)
            body_jobs.append(entry)
        body: Dict[str, Any] = {
            "jobs": body_jobs,
            "idempotency_key": idempotency_key if idempotency_key is not None else _core.new_idempotency_key(),
        }
        if on_failure is not None:
            body["on_failure"] = on_failure
        return (yield from self.json("POST", "/v1/dags", body))

    def dag(self, dag_id: int) -> Plan[Dict[str, Any]]:
        """A DAG's status: ``state`` (``running``, ``succeeded``, ``failed``,
        ``cancelled``), ``counts``, ``waiting`` and every job."""
        return (yield from self.json("GET", f"/v1/dags/{int(dag_id)}"))

    def deploy(self, name: str, module: Module) -> Plan[Dict[str, Any]]:
        """Point deployment ``name`` at ``module`` (a digest, or a path to a
        ``.wasm`` file or its bytes, uploaded first as `upload` does): jobs,
        DAG jobs and schedules may then give ``name`` as their module.
        Returns ``{"name", "version", "digest", "existing"}``: a new version,
        unless the name already pointed at this module (``existing``), so
        it is safe to repeat."""
        digest = ModuleCache.digest_named(module)
        if digest is None:
            digest = yield from self.upload(module)
        return (yield from self.json("POST", _core.deployment_path(name), {"digest": digest}))

    def rollback(self, name: str, to: Optional[int] = None) -> Plan[Dict[str, Any]]:
        """Point deployment ``name`` back at the module of version ``to``
        (default: the version current before the current one) as a new
        version; returns it as `deploy` does. Sent once, to one node, and
        never retried: a rollback repeated after a lost answer would roll
        back again (so after an ``unreachable`` or any retryable error, look
        at `deployment` before trying again). ``nothing_to_roll_back`` if
        there is no earlier version, ``module_version_not_found`` if ``to``
        is not kept."""
        body = {} if to is None else {"to": to}
        path = _core.deployment_path(name, "rollback")
        return (yield from self.json("POST", path, body, deadline=time.monotonic()))

    def deployments(self) -> Plan[List[Dict[str, Any]]]:
        """Every deployment, by name: ``name``, ``current`` (``version``,
        ``digest``, ``deployed_at``, ``rollback_of``), ``versions_total``,
        ``grants`` (what its jobs may reach over HTTP(S), as `grant`
        answers them) and ``secrets`` (the secrets its jobs may read)."""
        answer = yield from self.json("GET", "/v1/deployments")
        return list(answer["deployments"])

    def deployment(self, name: str) -> Plan[Dict[str, Any]]:
        """One deployment, as `deployments` lists it, with its ``versions``
        kept (the newest 50), newest first."""
        return (yield from self.json("GET", _core.deployment_path(name)))

    def undeploy(self, name: str) -> Plan[None]:
        """Remove deployment ``name``, its versions, its grants and the
        secrets its jobs may read; jobs keep the module they resolved to.
        ``module_name_in_use`` while a schedule names it."""
        yield from self.json("DELETE", _core.deployment_path(name))

    def grant(
        self,
        name: str,
        http: Optional[Union[Grant, Sequence[Grant]]] = None,
        methods: Optional[Sequence[str]] = None,
        private: bool = False,
        headers: Optional[Mapping[str, str]] = None,
        record: Optional[bool] = None,
        secrets: Optional[Union[str, Sequence[str]]] = None,
    ) -> Plan[Dict[str, Any]]:
        """Let the jobs of deployment ``name`` call HTTP(S) endpoints, or
        read secrets, or both (admin scope). ``http`` is a URL pattern
        (``"https://api.example.com/v1/"``: ``scheme://host[:port][/path]``,
        the path a prefix, ``*.`` before a domain, ``*`` for any port) or a
        list of them; each string is granted with ``methods`` (default:
        any), ``private`` (whether a name may resolve to a private or
        loopback address), ``headers`` (default: none) and ``record``, and a
        dict ``{"url", "methods",
        "private", "headers", "record"}`` in the list is granted as it is.
        ``headers`` (at most 8) are set by the node on every request the
        grant allows, replacing the job's: ``{"authorization": "Bearer
        {secret:STRIPE}"}``, where ``{secret:NAME}`` is filled in from
        secret ``NAME`` (see `set_secret`) by the node that sends the
        request, so the job never holds the value. ``record`` says which
        calls the grant records (each response made durable before the job
        sees it, and replayed to a later attempt making the same call
        instead of sending it again): ``True`` every one, ``False`` none,
        ``None`` (the default) those whose method is not ``GET``, ``HEAD``
        or ``OPTIONS``. Granting a pattern the name holds replaces that
        grant, its headers and ``record`` included. ``secrets`` (a name or a
        list of names) are secrets the jobs may read themselves, with the
        job SDKs' ``secret(name)``, their values masked in the jobs' logs,
        progress and failures (at most 16 a deployment); a secret that only
        a header names stays unreadable, and a credential that only goes in
        a header is better left there (a job that reads a value can send it
        anywhere its grants allow). Returns ``{"name", "http": [...],
        "secrets": [...]}``: every grant of the name now, each ``url``
        spelled in full (``https://api.example.com:443/v1/``), ``methods``,
        ``private``, ``headers`` and ``record`` only when set, and every
        secret its jobs may read. Safe to repeat (a grant the name has is
        not added twice), so retried as `deploy` is. ``invalid_grant`` for
        a pattern, method or header that is not one, or for neither
        ``http`` nor ``secrets`` given; ``too_many_grants`` past 32 grants
        or 16 readable secrets, ``module_name_not_found`` for a name not
        deployed, ``secret_not_found`` for a header or ``secrets`` naming a
        secret that does not exist, ``invalid_secret`` for a name that
        cannot be one."""
        body = _core.grants_body(http, methods, private, headers, record, secrets)
        return (yield from self.json("POST", _core.deployment_path(name, "grants"), body))

    def revoke(
        self,
        name: str,
        http: Optional[Union[Grant, Sequence[Grant]]] = None,
        methods: Optional[Sequence[str]] = None,
        private: bool = False,
        headers: Optional[Mapping[str, str]] = None,
        secrets: Optional[Union[str, Sequence[str]]] = None,
    ) -> Plan[Dict[str, Any]]:
        """Take grants from deployment ``name`` (admin scope): those of
        ``http``, given as `grant` takes them (a grant goes only if its URL,
        methods, private flag and headers are the ones given, whatever it
        records), and the secrets of ``secrets`` its jobs may no longer
        read; or, with neither given, every grant and every readable secret
        (its jobs then have no network and read no secret; empty lists are
        refused with ``invalid_grant``). Returns what the name holds after,
        as `grant` does; safe to repeat, so retried."""
        if http is None and secrets is None:
            return (yield from self.json("DELETE", _core.deployment_path(name, "grants")))
        body = _core.grants_body(http, methods, private, headers, None, secrets)
        return (yield from self.json("POST", _core.deployment_path(name, "grants/revoke"), body))

    def set_secret(self, name: str, value: str) -> Plan[Dict[str, Any]]:
        """Set secret ``name`` (1 to 64 of ``A-Z 0-9 _``, not starting with a
        digit) to ``value`` (1 to 16,384 bytes of text; admin scope), for a
        grant's ``headers`` to name as ``{secret:NAME}``, or for a grant's
        ``secrets`` to let jobs read (see `grant`). The node that receives
        it seals it with the cluster key before the master sees it; nothing
        answers it back. Returns ``{"name", "created"}`` (``created``: it
        did not exist before; false if an earlier try, whose answer was
        lost, set it). Safe to repeat, so
        retried as `grant` is. ``secrets_unavailable`` (409) on a node
        without a cluster key, ``secrets_full`` (409) past 1,000 secrets,
        ``invalid_secret`` (422) for a name or value out of range."""
        return (yield from self.json("POST", _core.secret_path(name), {"value": value}))

    def secrets(self) -> Plan[List[Dict[str, Any]]]:
        """Every secret, by name (admin scope): ``name``, ``updated_at`` (ms
        since the Unix epoch) and ``used_by`` (the deployments whose grants
        name it, or whose jobs may read it); never a value."""
        answer = yield from self.json("GET", "/v1/secrets")
        return list(answer["secrets"])

    def delete_secret(self, name: str) -> Plan[None]:
        """Delete secret ``name`` (admin scope). ``secret_in_use`` (409)
        while a grant names it or a deployment's jobs may read it (`secrets`
        says whose: revoke those first), ``secret_not_found`` (404) if there
        is none. Sent once, to one node, and never retried, as `rollback`
        is: a delete repeated after a lost answer would say
        ``secret_not_found`` (so after an ``unreachable`` or any retryable
        error, look at `secrets`)."""
        yield from self.json("DELETE", _core.secret_path(name), deadline=time.monotonic())

    def namespaces(self) -> Plan[List[Dict[str, Any]]]:
        """Every namespace, by name (a token confined to one: its own):
        ``name``, ``jobs`` (by state), ``submitted_total``,
        ``attempts_metered``, ``cpu_us``, ``egress_bytes`` (what its
        attempts cost), ``result_bytes`` (kept by its jobs), ``quotas`` and
        ``weight``."""
        answer = yield from self.json("GET", "/v1/namespaces")
        return list(answer["namespaces"])

    def set_quotas(
        self,
        namespace: str,
        *,
        waiting_max: Optional[int] = None,
        running_max: Optional[int] = None,
        submissions_per_second: Optional[int] = None,
        result_bytes_max: Optional[int] = None,
    ) -> Plan[Dict[str, Any]]:
        """Set ``namespace``'s quotas, all four at once: each one not given
        is no quota (a cluster-wide admin token). Past ``waiting_max``,
        ``submissions_per_second`` or ``result_bytes_max``, a submission in
        the namespace is ``quota_exceeded`` (429, retryable); past
        ``running_max``, its jobs wait. ``invalid_quota`` (422) for 0 or a
        value past its bound. Returns ``{"namespace", "quotas"}``; safe to
        repeat, so retried."""
        given = {
            "waiting_max": waiting_max,
            "running_max": running_max,
            "submissions_per_second": submissions_per_second,
            "result_bytes_max": result_bytes_max,
        }
        body = {name: value for name, value in given.items() if value is not None}
        return (yield from self.json("POST", _core.namespace_path(namespace, "quotas"), body))

    def set_weight(self, namespace: str, weight: int) -> Plan[Dict[str, Any]]:
        """Set ``namespace``'s weight (1, the default, to 10,000; a
        cluster-wide admin token): namespaces competing for workers get CPU
        time in proportion to their weights. ``invalid_weight`` (422)
        otherwise. Returns ``{"namespace", "weight"}``; safe to repeat, so
        retried."""
        return (yield from self.json("POST", _core.namespace_path(namespace, "weight"), {"weight": weight}))

    def put_blob(self, data: bytes) -> Plan[BlobInfo]:
        """Store ``data`` as a blob (``PUT /v1/blobs``, submit scope); its
        digest (the sha256 of its bytes) and size. Sent with its sha256
        (``X-Cohort-Sha256``), so a node stores it only whole and right,
        and retried and failed over as a read is. Storing bytes already
        stored is harmless. ``blob_too_large`` (413) past the cluster's
        ceiling, ``blob_store_full`` (507), ``replication_failed`` (503,
        retried), ``blobs_full`` (409, retried) while the cluster keeps as
        many uploaded blobs as it may.

        The cluster keeps the blob for its retention time (``--retention``)
        after this upload at least, and while a held job or a schedule
        names it; then every node deletes its copy (`delete_blob` stops
        keeping it at once). Upload it again to keep it longer.

        The node answers once the blob is durable on a majority of the
        back-end nodes, copying it after its last byte arrived: every
        upload waits for its answer ``request_timeout_s`` plus one second
        per `BLOB_COPY_BYTES_PER_S` bytes sent (16 MiB/s) once its body
        has gone."""
        content = bytes(data)
        sent = BlobInfo(_core.local_digest(content), len(content))
        response = yield from self.call(
            "PUT", "/v1/blobs", content=content, headers=_put_headers(sent.digest), head_extra=_blobs.copy_allowance_s
        )
        return _blobs.blob_info_of(response.content, sent)

    def put_blob_file(self, path: "Union[str, os.PathLike[str]]") -> Plan[BlobInfo]:
        """Store the file at ``path`` as a blob, as `put_blob`, never holding
        it whole: read once to hash it, then streamed in chunks with its
        size and sha256, so a retry (or the next node) sends it again,
        whole. A file that changes meanwhile is refused
        (``blob_digest_mismatch``)."""
        info = yield Work(_blobs.hash_file, path)
        body = FileBody(path, info)
        headers = {**_put_headers(info.digest), **body.headers()}
        response = yield from self.call(
            "PUT", "/v1/blobs", content=body, headers=headers, head_extra=_blobs.copy_allowance_s
        )
        return _blobs.blob_info_of(response.content, info)

    def put_blob_stream(self, fileobj: Any, sha256: Optional[str] = None) -> Plan[BlobInfo]:
        """Store what a binary file object reads (a pipe, a socket's file,
        a file being written...) as a blob, read in chunks and sent as they
        come (chunked). It cannot be read twice, so it is sent once, to
        one node, never retried (after an error, send it again from its
        start). ``sha256``, when known (64 hex digits, either case), is
        sent for the node to check (``blob_digest_mismatch``); either way
        the answer is checked against the bytes sent."""
        body = StreamBody(fileobj)
        headers = _put_headers(_blobs.valid_digest(sha256))
        response = yield from self.call(
            "PUT",
            "/v1/blobs",
            content=body,
            headers=headers,
            deadline=time.monotonic(),
            head_extra=_blobs.copy_allowance_s,
        )
        return _blobs.blob_info_of(response.content, body.sent())

    def head_blob(self, digest: str) -> Plan[Optional[BlobInfo]]:
        """Blob ``digest``'s size (``HEAD /v1/blobs/{digest}``), or ``None``
        if the cluster has no such blob. ``digest`` is hex in either
        case."""
        digest = _blobs.blob_digest(digest)
        try:
            response = yield from self.call("HEAD", _blobs.blob_path(digest))
        except CohortError as error:
            if error.status == 404:
                return None
            raise
        return _blobs.head_info(response, digest)

    def list_blobs(self) -> Plan[List[BlobEntry]]:
        """Every blob the answering node stores (``GET /v1/blobs``; not the
        cluster's), each a `BlobEntry`: its digest and size, whether the
        cluster keeps it (``kept``), how many held jobs and schedules name
        it (``refs``) and when the cluster stops keeping it if nothing
        names it (``collect_at``, ms since the Unix epoch); those three are
        ``None`` when the node could not ask the master."""
        response = yield from self.call("GET", "/v1/blobs")
        return _blobs.blob_list_of(response.content)

    def kept_blobs(self, after: Optional[str] = None, limit: Optional[int] = None) -> Plan[BlobPage]:
        """A page of the blobs the cluster keeps, wherever their copies are
        (``GET /v1/blobs?scope=cluster``, read scope), by digest: the
        first ``limit`` (1 to 1,000; the node's default 100 when ``None``)
        after digest ``after``. The page's ``next`` is the ``after`` of the
        next one (``None`` on the last)."""
        query = {"scope": "cluster"}
        if after is not None:
            query["after"] = _blobs.blob_digest(after)
        if limit is not None:
            query["limit"] = str(limit)
        response = yield from self.call("GET", "/v1/blobs?" + urlencode(query))
        return _blobs.blob_page_of(response.content)

    def delete_blob(self, digest: str) -> Plan[None]:
        """Stop the cluster keeping blob ``digest`` (``DELETE
        /v1/blobs/{digest}``, submit scope); every node deletes its copy
        once its grace period (``--blob-grace``) has passed. Only a blob
        nothing names: ``blob_in_use`` (409) while a held job (its input
        blob or an output blob it wrote) or a schedule names it (those keep
        it until the retention time after they are gone),
        ``blob_not_found`` (404) if the cluster keeps no such blob.
        ``digest`` is hex in either case. Sent once, to one node, and never
        retried, as `delete_secret` is: a delete repeated after a lost
        answer would say ``blob_not_found``."""
        yield from self.json("DELETE", _blobs.blob_path(digest), deadline=time.monotonic())

    def purge_blob(self, digest: str) -> Plan[int]:
        """Stop the cluster keeping blob ``digest`` even though finished jobs
        name it (``POST /v1/blobs/{digest}/purge``, admin scope): those that
        read it as their input are purged with it, those that wrote it no
        longer list it among their outputs; returns how many finished jobs
        named it. ``blob_in_use`` (409) while a job that has not finished
        reads it or a schedule gives it to its jobs (cancel or delete those
        first), ``blob_not_found`` (404) if the cluster keeps no such blob.
        Sent once, to one node, and never retried, as `delete_blob` is."""
        answer = yield from self.json("POST", _blobs.blob_path(digest) + "/purge", deadline=time.monotonic())
        jobs = answer.get("jobs") if isinstance(answer, dict) else None
        if not isinstance(jobs, int) or isinstance(jobs, bool):
            raise CohortError("bad_answer", f"a purge's answer without its count of jobs: {answer!r}")
        return jobs

    def blob_body(self, digest: str, byte_range: Optional[str], size: Optional[int] = None) -> Plan[httpx.Response]:
        """``GET /v1/blobs/{digest}`` (with a ``Range`` header), the answer's
        body left unread: the readers' request. A node without a copy
        answers once its copy has the first MiB, or all of a smaller blob
        (a range: once the copy also reaches it), so the head is waited for
        longer: `_blobs.fetch_allowance_s` of the blob's ``size`` (when
        known: a resumed download)."""
        headers = {"accept-encoding": "identity"}
        if byte_range is not None:
            headers["range"] = byte_range
        extra = _blobs.fetch_allowance_s(size)
        return (
            yield from self.call(
                "GET", _blobs.blob_path(digest), headers=headers, stream=True, head_extra=lambda _sent: extra
            )
        )

    def wait(self, ids: Sequence[int], wait_ms: int) -> Plan[Dict[int, Finished]]:
        """One ``POST /v1/jobs/wait``: the jobs among ``ids`` that finished."""
        response = yield from self.call(
            "POST", "/v1/jobs/wait", content=_core.wait_body(ids, wait_ms), extra_s=wait_ms / 1000.0
        )
        return _core.parse_wait_answer(response.content)

    def output(self, job: JobCore) -> Plan[bytes]:
        """A finished job's output: as it came inline, or fetched (once)
        when it was too large to. Raises why the job has none."""
        output = job._settled_output()
        if output is None:
            response = yield from self.call("GET", f"/v1/jobs/{job._accepted_id()}/result")
            output = response.content
            job._keep_output(output)
        return output

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


def _put_headers(sha256: Optional[str]) -> Dict[str, str]:
    """The headers of a ``PUT /v1/blobs``: the digest the bytes must have,
    when known."""
    headers = {"content-type": "application/octet-stream"}
    if sha256 is not None:
        headers[_blobs.SHA256_HEADER] = sha256
    return headers


def blocking(plan: Callable[Concatenate[Plans, P], Plan[T]]) -> Callable[Concatenate[Any, P], T]:
    """``plan`` as a method of `Client`: carried out before it returns."""

    def method(client: Any, *args: Any, **kwargs: Any) -> T:
        return client._run(plan(client._plans, *args, **kwargs))

    return _presented_as(method, plan)


def awaiting(plan: Callable[Concatenate[Plans, P], Plan[T]]) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """``plan`` as a method of `AsyncClient`: a coroutine that carries it out."""

    async def method(client: Any, *args: Any, **kwargs: Any) -> T:
        return await client._run(plan(client._plans, *args, **kwargs))

    return _presented_as(method, plan)


def _presented_as(method: F, plan: Callable[..., Any]) -> F:
    """``method`` with ``plan``'s name, documentation and signature, except
    that it returns the plan's result (``X`` for ``Plan[X]``): what ``help``
    and ``inspect`` show of the client's method."""
    functools.update_wrapper(method, plan)
    signature = inspect.signature(plan)
    returns = signature.return_annotation
    if isinstance(returns, str) and returns.startswith("Plan[") and returns.endswith("]"):
        result = returns[len("Plan[") : -1]
        method.__signature__ = signature.replace(return_annotation=result)  # type: ignore[attr-defined]
    return method
