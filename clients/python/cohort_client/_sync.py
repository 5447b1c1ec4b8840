"""The blocking client: a batcher thread, a waiter of 4 threads, ``httpx.Client``."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, TypeVar, Union, cast

import httpx

from . import _blobs, _core
from ._blobs import BlobInfo, BodySource, PartFile, ReadWindow, WindowFacts
from ._core import (
    BATCHES_IN_FLIGHT,
    WAIT_SLOTS,
    BatchQueue,
    InputBlob,
    JobCore,
    Module,
    OutputBlob,
    Pending,
    Settings,
    WaitBook,
)
from ._plans import Plan, Plans, Send, Work, blocking
from .errors import CohortError, WaitTimeout

T = TypeVar("T")


class Job(JobCore):
    """A submitted job. Made by `Client.submit` or `Client.get`."""

    _accepted: threading.Event
    _done: threading.Event

    def __init__(self, client: "Client", idempotency_key: Optional[str]) -> None:
        super().__init__(idempotency_key)
        self._client = client
        self._accepted = threading.Event()
        self._done = threading.Event()

    @property
    def id(self) -> int:
        """The job's id; blocks until its batch is answered. Raises the
        server's error if the submission was refused."""
        self._accepted.wait()
        return self._accepted_id()

    @property
    def existing(self) -> bool:
        """Whether the submission found an existing job with its key (as
        ``id``, blocks until known)."""
        self._accepted.wait()
        return self._accepted_existing()

    def result(self, timeout: Optional[float] = None) -> bytes:
        """The job's output, once it succeeded.

        Raises `JobFailed` (with the job's error code) if it failed, died or
        was cancelled, `WaitTimeout` after ``timeout`` seconds, and
        `CohortError` if it was refused or its outcome cannot be learnt.
        """
        if not self._done.wait(timeout):
            raise WaitTimeout(timeout or 0.0)
        return self._client._run(self._client._plans.output(self))

    def json(self, timeout: Optional[float] = None) -> Any:
        """The output parsed as JSON."""
        return json.loads(self.result(timeout))

    def text(self, timeout: Optional[float] = None) -> str:
        """The output as UTF-8 text."""
        return self.result(timeout).decode("utf-8")

    def outputs(self, timeout: Optional[float] = None) -> List[OutputBlob]:
        """The output blobs the job wrote, once it succeeded, in the order it
        created them (empty if it wrote none), each an `OutputBlob` to download
        with `Client.open_blob` or `Client.get_blob_to_file`. They come with
        the waiter's report of the job's end: no request of their own.
        Raises as `result` does."""
        if not self._done.wait(timeout):
            raise WaitTimeout(timeout or 0.0)
        return self._settled_outputs()

    def status(self) -> Dict[str, Any]:
        """The job as ``GET /v1/jobs/{id}`` shows it: state, attempts,
        progress, ``module`` (the digest it runs) and, for a job submitted by
        a deployment's name, ``module_name`` and ``module_version``... An
        attempt that called out over HTTP(S) lists its ``calls`` (the first
        64, each ``{"method", "origin", "status" or "error", "sent_bytes",
        "received_bytes", "ms"}``; see `Client.grant`) and ``calls_dropped``
        (how many more it made); both are absent when it made none. A job
        given an input blob shows it as ``input_blob`` (``{"digest",
        "bytes"}``), and a job that succeeded having written output blobs
        lists them as ``outputs`` (``[{"name", "digest", "bytes"}]``, in the
        order it created them, as `outputs` gives them); each is absent
        when there is none. ``trace_id`` (32 hex digits) is the W3C trace
        the job is in (see `Client.with_traceparent`), absent when it is in
        none. ``labels`` are those it was submitted with (absent when none),
        and ``unplaceable`` is true while it waits in line and no worker the
        master knows has its labels and memory: it waits for one to join.
        ``usage`` (``{"cpu_us", "memory_peak_bytes", "egress_bytes"}``) is
        what its attempts cost together, as their sandboxes measured it, and
        each attempt that reported has its own (absent while it runs).
        The dict is the node's JSON, as it came."""
        return self._client._run(self._client._plans.job_view("GET", self.id))

    def cancel(self) -> Dict[str, Any]:
        """Cancel the job if queued or running (``DELETE /v1/jobs/{id}``);
        returns it as `status` does. A job already cancelled is returned as
        it is; cancelling one that finished otherwise raises ``job_finished``."""
        return self._client._run(self._client._plans.cancel(self.id))


class Client:
    """A blocking client of a cohort cluster.

    ``urls`` is one node's URL or several: requests go to the first that
    answers. Submissions are batched: every `submit` made within
    ``linger_ms`` of the first waiting one goes out in one
    ``POST /v1/jobs/batch`` (at most ``batch_max`` jobs); a background thread
    sends them. Results are awaited together by one long-poll waiter. A
    failed request is retried with backoff until ``retry_deadline_s``.

    Use it as a context manager, or call `close`.
    """

    def __init__(
        self,
        urls: Union[str, Sequence[str]],
        token: Optional[str] = None,
        ca_cert: Optional["Union[str, os.PathLike[str]]"] = None,
        linger_ms: float = 1.0,
        batch_max: int = _core.BATCH_JOBS_MAX,
        retry_deadline_s: float = 60.0,
        request_timeout_s: float = 30.0,
    ) -> None:
        self._start(Settings.make(urls, token, ca_cert, linger_ms, batch_max, retry_deadline_s, request_timeout_s))

    def _start(self, settings: Settings) -> None:
        self._plans = Plans(settings)
        self._http = httpx.Client(**settings.http_options())
        self._lock = threading.Lock()
        self._batch_changed = threading.Condition(self._lock)
        self._book_changed = threading.Condition(self._lock)
        self._queue = BatchQueue(settings.linger_s, settings.batch_max)
        self._book = WaitBook()
        self._senders = threading.BoundedSemaphore(BATCHES_IN_FLIGHT)
        self._pool: Optional[ThreadPoolExecutor] = None
        self._batcher: Optional[threading.Thread] = None
        self._waiters: List[threading.Thread] = []
        # The waiter slots' own connections, closed by close() to end a
        # long-poll in flight.
        self._waiter_http: List[httpx.Client] = []
        self._closing = False
        self._stopped = threading.Event()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def with_traceparent(self, traceparent: str) -> "Client":
        """A new client with this one's options that sends ``traceparent``, the
        W3C trace context of the caller's span
        (``00-<trace id>-<span id>-<flags>``), with every request: the
        cluster's spans for its submissions (the proxy hop, the master's
        decision and commit, every attempt on whichever worker) join that
        trace, and the jobs' ``status()`` show its ``trace_id``.

        Raises ``ValueError`` for a value that is not a version-00
        traceparent (32 lowercase hex digits of trace id and 16 of span id,
        neither all zeros, and 2 of flags). The new client has its own
        batches, waiter and connections, and this one is left as it was:
        close each (or use each with ``with``)."""
        client = Client.__new__(Client)
        client._start(self._plans.settings.with_traceparent(traceparent))
        return client

    def close(self) -> None:
        """Send every submission made so far, then stop.

        Handles still waiting for a result fail with ``closed``. Long-polls
        in flight are cut (their connections closed) and the client's
        threads have ended when this returns: none is left to run while
        the interpreter shuts down.
        """
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._batch_changed.notify()
        if self._batcher is not None:
            self._batcher.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        with self._lock:
            self._stopped.set()
            jobs = self._book.close()
            self._book_changed.notify_all()
        for job in jobs:
            job._fail(_core.closed_error())
        with self._lock:
            connections = list(self._waiter_http)
            waiters = list(self._waiters)
        for http in connections:
            http.close()
        for waiter in waiters:
            waiter.join()
        self._http.close()

    def request_counts(self) -> Dict[str, int]:
        """HTTP requests sent so far, by route (``"POST /v1/jobs/batch"``...),
        every try counted."""
        return self._plans.counter.snapshot()

    # One request flow each: written once, with its signature and
    # documentation, in `Plans`.
    upload = blocking(Plans.upload)

    def submit(
        self,
        module: Module,
        input: Any = None,
        *,
        input_blob: Optional[InputBlob] = None,
        timeout_ms: Optional[int] = None,
        memory_bytes: Optional[int] = None,
        max_attempts: Optional[int] = None,
        priority: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        concurrency_key: Optional[str] = None,
        concurrency_limit: Optional[int] = None,
        rate_limit: Optional[int] = None,
        unique_key: Optional[str] = None,
        unique_window_ms: Optional[int] = None,
        after: Optional[Sequence[int]] = None,
        egress: Optional[Any] = None,
        labels: Optional[Mapping[str, str]] = None,
        namespace: Optional[str] = None,
    ) -> Job:
        """Submit a job and return its handle at once.

        ``module`` is a digest, a deployment's name (resolved by the master
        to the name's current module when it accepts the job; the job's
        `status` then shows ``module_name`` and ``module_version``) or a path
        (uploaded first, once). ``input``:
        bytes are sent as they are, a str as text, anything else as JSON,
        ``None`` as an empty input. The job goes out with the other
        submissions of its linger window; without an ``idempotency_key`` the
        client makes one, so retries never make a second job.

        Jobs sharing a ``concurrency_key`` run at most ``concurrency_limit``
        at once and start at most ``rate_limit`` a second, cluster-wide. A
        submission whose ``unique_key`` matches a job submitted less than
        ``unique_window_ms`` earlier gets that job instead of a new one.
        ``egress`` (URL strings or grant dicts) narrows what the job may
        call to grants within its deployment name's (``invalid_grant`` if
        wider).

        ``labels`` (``{"gpu": "a100", "zone": "eu"}``) are what a worker
        must have to run the job: it starts only on a worker started with
        all of them (``cohort node --labels gpu=a100,zone=eu``) and, if it
        asks for ``memory_bytes``, whose ``--job-memory-max`` (when set) is
        at least that; until the master knows such a worker, the job waits
        in line (its `status` shows ``unplaceable``). At most 16; keys 1 to
        63 bytes of ``a-z 0-9 . _ - /``, starting with a letter or digit,
        values 1 to 63 bytes of letters, digits and ``. _ -``
        (``invalid_job``, 422, if not). Sent only when not empty.

        ``namespace`` is the job's namespace (1 to 63 of ``a-z 0-9 -``;
        ``invalid_namespace``, 422, if not). Left out, the job goes in the
        token's namespace when the token is confined to one, else in
        ``default``; a confined token may name only its own (``forbidden``,
        403). A confined token sees its namespace's jobs only: another's
        is ``job_not_found`` (404), as if it never was.

        ``input_blob`` is a blob stored in the cluster (`put_blob` and its
        kin) that the job reads as a stream, as its input blob ``input``
        (the job SDKs' ``blobs.open("input")``), beside any inline
        ``input``: its digest (64 hex digits, either case, optionally
        ``sha256:``-prefixed; sent as given), the `BlobInfo` `put_blob`
        returns, or an `OutputBlob` of another job. The submission is
        refused with ``blob_not_found`` (404) if the cluster has no such
        blob, ``invalid_job`` (422) if it is not a digest. What the job
        writes comes back as `Job.outputs`.
        """
        key, body = self._run(
            self._plans.submission(
                module,
                input,
                idempotency_key,
                input_blob=input_blob,
                timeout_ms=timeout_ms,
                memory_bytes=memory_bytes,
                max_attempts=max_attempts,
                priority=priority,
                concurrency_key=concurrency_key,
                concurrency_limit=concurrency_limit,
                rate_limit=rate_limit,
                unique_key=unique_key,
                unique_window_ms=unique_window_ms,
                after=after,
                egress=egress,
                labels=labels,
                namespace=namespace,
            )
        )
        job = Job(self, key)
        with self._lock:
            if self._closing:
                raise _core.closed_error()
            if self._batcher is None:
                self._pool = ThreadPoolExecutor(BATCHES_IN_FLIGHT, thread_name_prefix="cohort-send")
                self._batcher = threading.Thread(target=self._batch_loop, name="cohort-batcher", daemon=True)
                self._batcher.start()
            if self._queue.add(Pending(job, body, self._plans.settings.deadline())):
                self._batch_changed.notify()
        return job

    def map(
        self,
        module: Module,
        inputs: Iterable[Any],
        *,
        timeout: Optional[float] = None,
        input_blob: Optional[InputBlob] = None,
        timeout_ms: Optional[int] = None,
        memory_bytes: Optional[int] = None,
        max_attempts: Optional[int] = None,
        priority: Optional[int] = None,
        labels: Optional[Mapping[str, str]] = None,
        namespace: Optional[str] = None,
    ) -> List[bytes]:
        """Run ``module`` on every input; the outputs, in order. Raises the
        first failure met. ``timeout`` (seconds) bounds the whole wait.
        ``input_blob``, ``labels`` and ``namespace``, when given, are every
        job's (see `submit`)."""
        named = self._run(self._plans.named(module))
        jobs = [
            self.submit(
                named,
                item,
                input_blob=input_blob,
                timeout_ms=timeout_ms,
                memory_bytes=memory_bytes,
                max_attempts=max_attempts,
                priority=priority,
                labels=labels,
                namespace=namespace,
            )
            for item in inputs
        ]
        deadline = None if timeout is None else time.monotonic() + timeout
        return [job.result(_core.remaining(deadline)) for job in jobs]

    # One request flow each, as `upload`.
    create_schedule = blocking(Plans.create_schedule)
    schedules = blocking(Plans.schedules)
    schedule = blocking(Plans.schedule)
    pause_schedule = blocking(Plans.pause_schedule)
    resume_schedule = blocking(Plans.resume_schedule)
    delete_schedule = blocking(Plans.delete_schedule)
    backfill = blocking(Plans.backfill)
    submit_dag = blocking(Plans.submit_dag)
    dag = blocking(Plans.dag)
    deploy = blocking(Plans.deploy)
    rollback = blocking(Plans.rollback)
    deployments = blocking(Plans.deployments)
    deployment = blocking(Plans.deployment)
    undeploy = blocking(Plans.undeploy)
    grant = blocking(Plans.grant)
    revoke = blocking(Plans.revoke)
    set_secret = blocking(Plans.set_secret)
    secrets = blocking(Plans.secrets)
    delete_secret = blocking(Plans.delete_secret)
    namespaces = blocking(Plans.namespaces)
    set_quotas = blocking(Plans.set_quotas)
    set_weight = blocking(Plans.set_weight)
    put_blob = blocking(Plans.put_blob)
    put_blob_file = blocking(Plans.put_blob_file)
    put_blob_stream = blocking(Plans.put_blob_stream)
    head_blob = blocking(Plans.head_blob)
    list_blobs = blocking(Plans.list_blobs)
    kept_blobs = blocking(Plans.kept_blobs)
    delete_blob = blocking(Plans.delete_blob)
    purge_blob = blocking(Plans.purge_blob)

    def open_blob(self, digest: str, start: Optional[int] = None, end: Optional[int] = None) -> "BlobReader":
        """Blob ``digest`` as a readable binary file (`BlobReader`: ``with
        client.open_blob(d) as f: f.read(n)``), read from the node as it is
        read, never held whole. ``start`` and ``end`` ask for a range, as a
        slice does: ``end`` excluded, a negative ``start`` (without ``end``)
        for the last ``-start`` bytes. ``blob_not_found`` (404) if the
        cluster has no such blob, ``range_not_satisfiable`` (416) for a
        ``start`` past its end. ``digest`` is hex in either case.

        A node without a copy of the blob answers once its copy from another
        has the first MiB, or all of a smaller blob, and a range once the
        copy also reaches the range's first byte: the answer's head is
        waited for ``request_timeout_s`` plus `BLOB_FETCH_WAIT_S` (10
        minutes; plus one second per `BLOB_COPY_BYTES_PER_S` bytes of the
        blob instead when a broken download resumes, its size known); then
        each read waits ``request_timeout_s`` at most."""
        first = _blobs.range_header(start, end)
        digest = _blobs.blob_digest(digest)
        window = ReadWindow(digest)

        def reopen(byte_range: Optional[str]) -> httpx.Response:
            return self._run(self._plans.blob_body(digest, byte_range, window.known_size))

        response = reopen(first)
        try:
            window.accept(response, ranged=first is not None)
        except BaseException:
            response.close()
            raise
        return BlobReader(response, window, reopen)

    def get_blob_to_file(self, digest: str, path: "Union[str, os.PathLike[str]]") -> BlobInfo:
        """Save blob ``digest`` at ``path``, streamed to a temporary file
        beside it (``.NAME.XXXX.part``) whose sha256 is checked before it
        is renamed into place: ``path`` is never left holding part of a
        blob, or other bytes. ``blob_digest_mismatch`` (the temporary file
        removed) if the bytes received are not the blob's; as
        `open_blob` otherwise."""
        with self.open_blob(digest) as reader:
            part = PartFile(path, digest)
            try:
                for chunk in reader.iter_chunks():
                    part.write(chunk)
            except BaseException:
                part.discard()
                raise
            return part.commit()

    def get(self, job_id: int) -> Job:
        """A handle for a job submitted elsewhere."""
        if self._closing:
            raise _core.closed_error()
        job = Job(self, None)
        job._accept(job_id, True)
        self._watch([job])
        return job

    def _batch_loop(self) -> None:
        """Hand each batch to a sender once its window ends or it is full;
        when closing, send what waits at once and stop."""
        assert self._pool is not None
        while True:
            with self._lock:
                while not self._queue.ready(time.monotonic(), self._closing):
                    if self._closing:
                        return
                    end = self._queue.window_end()
                    self._batch_changed.wait(None if end is None else max(0.0, end - time.monotonic()))
            self._senders.acquire()
            with self._lock:
                batch = self._queue.take()
            self._pool.submit(self._send_batch, batch)

    def _send_batch(self, batch: List[Pending]) -> None:
        try:
            self._run(self._plans.send_batch(batch, self._watch))
        finally:
            self._senders.release()

    def _watch(self, jobs: Sequence[JobCore]) -> None:
        """Give accepted jobs to the waiter (started on first use)."""
        if not jobs:
            return
        with self._lock:
            if self._stopped.is_set():
                late = list(jobs)
            else:
                late = []
                for job in jobs:
                    self._book.watch(job)
                while len(self._waiters) < WAIT_SLOTS:
                    waiter = threading.Thread(target=self._wait_loop, name="cohort-waiter", daemon=True)
                    self._waiters.append(waiter)
                    waiter.start()
                self._book_changed.notify_all()
        for job in late:
            job._fail(_core.closed_error())

    def _wait_loop(self) -> None:
        """One of the waiter's 4 slots: long-poll for the watched jobs."""
        with httpx.Client(**self._plans.settings.http_options()) as http:
            with self._lock:
                if self._stopped.is_set():
                    return
                self._waiter_http.append(http)
            while True:
                with self._lock:
                    plan = self._book.next_request()
                    while plan is None and not self._stopped.is_set():
                        self._book_changed.wait()
                        plan = self._book.next_request()
                    if plan is None:
                        return
                ids, wait_ms = plan
                try:
                    finished = self._run(self._plans.wait(ids, wait_ms), http=http, stop=self._stopped)
                except CohortError as error:
                    with self._lock:
                        jobs = self._book.failed(ids)
                        self._book_changed.notify_all()
                    for job in jobs:
                        job._fail(error)
                    continue
                with self._lock:
                    settled = self._book.answered(ids, finished)
                    self._book_changed.notify_all()
                for job, done in settled:
                    job._finish(done)

    def _run(
        self, plan: Plan[T], http: Optional[httpx.Client] = None, stop: Optional[threading.Event] = None
    ) -> T:
        """Carry a plan out (see `cohort_client._plans`); ``stop`` ends its
        pauses with ``closed``."""
        client = http or self._http
        try:
            op = next(plan)
            while True:
                if isinstance(op, Send):
                    answer: Union[httpx.Response, httpx.RequestError]
                    try:
                        answer = _send(client, op)
                    except httpx.RequestError as error:
                        answer = error
                    except RuntimeError:
                        # close() closed this connection pool under us.
                        if stop is None or not stop.is_set():
                            raise
                        plan.close()
                        raise _core.closed_error() from None
                    op = plan.send(answer)
                elif isinstance(op, Work):
                    op = plan.send(op.function(*op.args))
                elif stop is None:
                    time.sleep(op.seconds)
                    op = plan.send(None)
                elif stop.wait(op.seconds):
                    plan.close()
                    raise _core.closed_error()
                else:
                    op = plan.send(None)
        except StopIteration as finished:
            return cast(T, finished.value)


def _send(client: httpx.Client, op: Send) -> httpx.Response:
    """One request of a plan. A streamed answer that is an error is read
    whole (it is small) and closed: the plan reads its code."""
    wait = op.head_wait()
    content: Any = op.content
    if isinstance(op.content, BodySource):
        content = op.content.chunks() if wait is None else wait.chunks(op.content.chunks())
    request = client.build_request(op.method, op.url, content=content, headers=op.headers, timeout=op.timeout)
    if wait is not None:
        wait.bind(request, None if isinstance(op.content, BodySource) else len(op.content or b""))
    response = client.send(request, stream=op.stream)
    if wait is not None:
        wait.head_came()
    if op.stream and not response.is_success:
        try:
            response.read()
        finally:
            response.close()
    return response


class BlobReader(WindowFacts, io.RawIOBase):
    """A blob (or a range of it) as a readable binary file, read from the
    node as the caller reads: made by `Client.open_blob`. Use it as a
    context manager (or call `close`), so that its connection is given
    back.

    ``read(n)`` returns ``n`` bytes unless the blob ends first;
    `iter_chunks` gives them as they come. A transport failure midway
    resumes where it broke, on the next node (a blob never changes under
    its digest), until the retry deadline; too many failures in a row
    without progress raise ``unreachable``.
    """

    def __init__(
        self, response: httpx.Response, window: ReadWindow, reopen: "Callable[[Optional[str]], httpx.Response]"
    ) -> None:
        super().__init__()
        self._response = response
        self._window = window
        self._reopen = reopen
        self._chunks: Iterator[bytes] = response.iter_raw()
        self._pending = b""


    def readable(self) -> bool:
        return True

    def readinto(self, buffer: "Any") -> int:
        view = memoryview(buffer).cast("B")
        if not self._pending:
            chunk = self._next_chunk()
            if chunk is None:
                return 0
            self._pending = chunk
        count = min(len(view), len(self._pending))
        view[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def read(self, size: Optional[int] = -1) -> bytes:
        """Up to ``size`` bytes (all that is left if ``size`` is negative or
        ``None``): fewer only at the end."""
        if size is None or size < 0:
            return self.readall()
        parts: List[bytes] = []
        wanted = size
        while wanted > 0:
            if not self._pending:
                chunk = self._next_chunk()
                if chunk is None:
                    break
                self._pending = chunk
            part, self._pending = self._pending[:wanted], self._pending[wanted:]
            parts.append(part)
            wanted -= len(part)
        return b"".join(parts)

    def readall(self) -> bytes:
        """Every byte left (the range held whole: prefer `iter_chunks`)."""
        return b"".join(self.iter_chunks())

    def iter_chunks(self) -> Iterator[bytes]:
        """The bytes left, chunk by chunk as they arrive."""
        if self._pending:
            pending, self._pending = self._pending, b""
            yield pending
        while True:
            chunk = self._next_chunk()
            if chunk is None:
                return
            yield chunk

    def close(self) -> None:
        if not self.closed:
            self._response.close()
        super().close()

    def _next_chunk(self) -> Optional[bytes]:
        """The next bytes of the body (resuming a broken download), or
        ``None`` at the end of the range."""
        if self.closed:
            raise ValueError("read of a closed blob reader")
        window = self._window
        while window.remaining > 0:
            try:
                chunk = next(self._chunks, None)
                if chunk is None:
                    raise _blobs.body_ended_early(window)
            except httpx.TransportError as error:
                self._response.close()
                byte_range = window.broken(error)
                self._response = self._reopen(byte_range)
                self._chunks = self._response.iter_raw()
                try:
                    window.accept(self._response, ranged=True)
                except BaseException:
                    self._response.close()
                    raise
                continue
            window.advance(chunk)
            if chunk:
                return chunk
        return None
