"""The asyncio client: a batcher task, a waiter of 4 tasks, ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Generator,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    TypeVar,
    Union,
    cast,
)

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
from ._plans import Plan, Plans, Send, Work, awaiting
from .errors import CohortError, WaitTimeout

T = TypeVar("T")


class AsyncJob(JobCore):
    """A submitted job. Made by `AsyncClient.submit` or `AsyncClient.get`."""

    _accepted: asyncio.Event
    _done: asyncio.Event

    def __init__(self, client: "AsyncClient", idempotency_key: Optional[str]) -> None:
        super().__init__(idempotency_key)
        self._client = client
        self._accepted = asyncio.Event()
        self._done = asyncio.Event()

    @property
    def id(self) -> Awaitable[int]:
        """``await job.id``: the job's id, once its batch is answered. Raises
        the server's error if the submission was refused."""
        return self._id_when_accepted()

    @property
    def existing(self) -> Awaitable[bool]:
        """``await job.existing``: whether the submission found an existing
        job with its key."""
        return self._existing_when_accepted()

    async def _id_when_accepted(self) -> int:
        await self._accepted.wait()
        return self._accepted_id()

    async def _existing_when_accepted(self) -> bool:
        await self._accepted.wait()
        return self._accepted_existing()

    async def result(self, timeout: Optional[float] = None) -> bytes:
        """The job's output, once it succeeded; as `Job.result`."""
        try:
            await asyncio.wait_for(self._done.wait(), timeout)
        except asyncio.TimeoutError:
            raise WaitTimeout(timeout or 0.0) from None
        return await self._client._run(self._client._plans.output(self))

    async def json(self, timeout: Optional[float] = None) -> Any:
        """The output parsed as JSON."""
        return json.loads(await self.result(timeout))

    async def text(self, timeout: Optional[float] = None) -> str:
        """The output as UTF-8 text."""
        return (await self.result(timeout)).decode("utf-8")

    async def outputs(self, timeout: Optional[float] = None) -> List[OutputBlob]:
        """The output blobs the job wrote, once it succeeded; as
        `Job.outputs`."""
        try:
            await asyncio.wait_for(self._done.wait(), timeout)
        except asyncio.TimeoutError:
            raise WaitTimeout(timeout or 0.0) from None
        return self._settled_outputs()

    async def status(self) -> Dict[str, Any]:
        """The job as ``GET /v1/jobs/{id}`` shows it; as `Job.status`
        (``input_blob``, ``outputs``, ``labels`` and ``unplaceable``
        included)."""
        return await self._client._run(self._client._plans.job_view("GET", await self.id))

    async def cancel(self) -> Dict[str, Any]:
        """Cancel the job; as `Job.cancel`."""
        return await self._client._run(self._client._plans.cancel(await self.id))


class AsyncClient:
    """The asyncio twin of `Client`: the same options, batching, waiting,
    retries and failover, with coroutines. Use it within one event loop.

    Use it as an async context manager, or await `close`.
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
        self._http = httpx.AsyncClient(**settings.http_options())
        self._queue = BatchQueue(settings.linger_s, settings.batch_max)
        self._book = WaitBook()
        self._closing = False
        # Made in the event loop on first use (Python 3.9's bind to a loop).
        self._batch_changed: Optional[asyncio.Event] = None
        self._book_changed: Optional[asyncio.Event] = None
        self._senders: Optional[asyncio.Semaphore] = None
        self._batcher: Optional["asyncio.Task[None]"] = None
        self._sending: Set["asyncio.Task[None]"] = set()
        self._waiters: List["asyncio.Task[None]"] = []

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def with_traceparent(self, traceparent: str) -> "AsyncClient":
        """A new client with this one's options that sends ``traceparent``
        with every request; as `Client.with_traceparent` (a plain call: it
        sends nothing). Close each client."""
        client = AsyncClient.__new__(AsyncClient)
        client._start(self._plans.settings.with_traceparent(traceparent))
        return client

    async def close(self) -> None:
        """Send every submission made so far, then stop; handles still
        waiting for a result fail with ``closed``."""
        if self._closing:
            return
        self._closing = True
        if self._batcher is not None:
            assert self._batch_changed is not None
            self._batch_changed.set()
            await self._batcher
        if self._sending:
            await asyncio.gather(*self._sending)
        for waiter in self._waiters:
            waiter.cancel()
        await asyncio.gather(*self._waiters, return_exceptions=True)
        for job in self._book.close():
            job._fail(_core.closed_error())
        await self._http.aclose()

    def request_counts(self) -> Dict[str, int]:
        """HTTP requests sent so far, by route, every try counted."""
        return self._plans.counter.snapshot()

    # One request flow each: written once, with its signature and
    # documentation, in `Plans`.
    upload = awaiting(Plans.upload)

    async def submit(
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
    ) -> AsyncJob:
        """Queue a job and return its handle at once; as `Client.submit`
        (``input_blob``, ``labels`` and ``namespace`` included)."""
        key, body = await self._run(
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
        if self._closing:
            raise _core.closed_error()
        job = AsyncJob(self, key)
        if self._batcher is None:
            self._batch_changed = asyncio.Event()
            self._senders = asyncio.Semaphore(BATCHES_IN_FLIGHT)
            self._batcher = asyncio.create_task(self._batch_loop())
        if self._queue.add(Pending(job, body, self._plans.settings.deadline())):
            assert self._batch_changed is not None
            self._batch_changed.set()
        return job

    async def map(
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
        """Run ``module`` on every input; the outputs, in order; as
        `Client.map` (``input_blob`` and ``labels`` included)."""
        named = await self._run(self._plans.named(module))
        jobs = [
            await self.submit(
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
        return [await job.result(_core.remaining(deadline)) for job in jobs]

    # One request flow each, as `upload`.
    create_schedule = awaiting(Plans.create_schedule)
    schedules = awaiting(Plans.schedules)
    schedule = awaiting(Plans.schedule)
    pause_schedule = awaiting(Plans.pause_schedule)
    resume_schedule = awaiting(Plans.resume_schedule)
    delete_schedule = awaiting(Plans.delete_schedule)
    backfill = awaiting(Plans.backfill)
    submit_dag = awaiting(Plans.submit_dag)
    dag = awaiting(Plans.dag)
    deploy = awaiting(Plans.deploy)
    rollback = awaiting(Plans.rollback)
    deployments = awaiting(Plans.deployments)
    deployment = awaiting(Plans.deployment)
    undeploy = awaiting(Plans.undeploy)
    grant = awaiting(Plans.grant)
    revoke = awaiting(Plans.revoke)
    set_secret = awaiting(Plans.set_secret)
    secrets = awaiting(Plans.secrets)
    delete_secret = awaiting(Plans.delete_secret)
    namespaces = awaiting(Plans.namespaces)
    set_quotas = awaiting(Plans.set_quotas)
    set_weight = awaiting(Plans.set_weight)
    put_blob = awaiting(Plans.put_blob)
    put_blob_file = awaiting(Plans.put_blob_file)
    put_blob_stream = awaiting(Plans.put_blob_stream)
    head_blob = awaiting(Plans.head_blob)
    list_blobs = awaiting(Plans.list_blobs)
    kept_blobs = awaiting(Plans.kept_blobs)
    delete_blob = awaiting(Plans.delete_blob)
    purge_blob = awaiting(Plans.purge_blob)

    def open_blob(self, digest: str, start: Optional[int] = None, end: Optional[int] = None) -> "BlobOpening":
        """Blob ``digest`` as an `AsyncBlobReader`, as `Client.open_blob`:
        ``async with client.open_blob(d) as reader:`` (closed at the end of
        the block), or ``reader = await client.open_blob(d)`` (then
        ``await reader.aclose()``)."""
        first = _blobs.range_header(start, end)
        window = ReadWindow(digest)

        async def reopen(byte_range: Optional[str]) -> httpx.Response:
            return await self._run(self._plans.blob_body(window.digest, byte_range, window.known_size))

        return BlobOpening(AsyncBlobReader._open(window, first, reopen))

    async def get_blob_to_file(self, digest: str, path: "Union[str, os.PathLike[str]]") -> BlobInfo:
        """Save blob ``digest`` at ``path``, as `Client.get_blob_to_file`
        (its file I/O in a thread)."""
        async with self.open_blob(digest) as reader:
            part = await asyncio.to_thread(PartFile, path, digest)
            try:
                async for chunk in reader:
                    await asyncio.to_thread(part.write, chunk)
            except BaseException:
                await asyncio.to_thread(part.discard)
                raise
            return await asyncio.to_thread(part.commit)

    async def get(self, job_id: int) -> AsyncJob:
        """A handle for a job submitted elsewhere."""
        if self._closing:
            raise _core.closed_error()
        job = AsyncJob(self, None)
        job._accept(job_id, True)
        self._watch([job])
        return job

    async def _batch_loop(self) -> None:
        """Hand each batch to a sender task once its window ends or it is
        full; when closing, send what waits at once and stop."""
        assert self._batch_changed is not None and self._senders is not None
        while True:
            while not self._queue.ready(time.monotonic(), self._closing):
                if self._closing:
                    return
                end = self._queue.window_end()
                self._batch_changed.clear()
                try:
                    await asyncio.wait_for(
                        self._batch_changed.wait(), None if end is None else max(0.0, end - time.monotonic())
                    )
                except asyncio.TimeoutError:
                    pass
            await self._senders.acquire()
            sender = asyncio.create_task(self._send_batch(self._queue.take()))
            self._sending.add(sender)
            sender.add_done_callback(self._sending.discard)

    async def _send_batch(self, batch: List[Pending]) -> None:
        assert self._senders is not None
        try:
            await self._run(self._plans.send_batch(batch, self._watch))
        finally:
            self._senders.release()

    def _watch(self, jobs: Sequence[JobCore]) -> None:
        """Give accepted jobs to the waiter (started on first use)."""
        for job in jobs:
            self._book.watch(job)
        if self._closing or not jobs:
            return  # close() fails the jobs still watched
        if self._book_changed is None:
            self._book_changed = asyncio.Event()
            self._waiters = [asyncio.create_task(self._wait_loop()) for _ in range(WAIT_SLOTS)]
        self._book_changed.set()

    async def _wait_loop(self) -> None:
        """One of the waiter's 4 slots: long-poll for the watched jobs."""
        assert self._book_changed is not None
        while True:
            plan = self._book.next_request()
            if plan is None:
                self._book_changed.clear()
                await self._book_changed.wait()
                continue
            ids, wait_ms = plan
            try:
                finished = await self._run(self._plans.wait(ids, wait_ms))
            except CohortError as error:
                for job in self._book.failed(ids):
                    job._fail(error)
                self._book_changed.set()
                continue
            for job, done in self._book.answered(ids, finished):
                job._finish(done)
            self._book_changed.set()

    async def _run(self, plan: Plan[T]) -> T:
        """Carry a plan out (see `cohort_client._plans`)."""
        try:
            op = next(plan)
            while True:
                if isinstance(op, Send):
                    answer: Union[httpx.Response, httpx.RequestError]
                    try:
                        answer = await _send(self._http, op)
                    except httpx.RequestError as error:
                        answer = error
                    op = plan.send(answer)
                elif isinstance(op, Work):
                    op = plan.send(await asyncio.to_thread(op.function, *op.args))
                else:
                    await asyncio.sleep(op.seconds)
                    op = plan.send(None)
        except StopIteration as finished:
            return cast(T, finished.value)


async def _send(client: httpx.AsyncClient, op: Send) -> httpx.Response:
    """One request of a plan, as `_sync._send`."""
    wait = op.head_wait()
    content: Any = op.content
    if isinstance(op.content, BodySource):
        content = op.content.achunks() if wait is None else wait.achunks(op.content.achunks())
    request = client.build_request(op.method, op.url, content=content, headers=op.headers, timeout=op.timeout)
    if wait is not None:
        wait.bind(request, None if isinstance(op.content, BodySource) else len(op.content or b""))
    response = await client.send(request, stream=op.stream)
    if wait is not None:
        wait.head_came()
    if op.stream and not response.is_success:
        try:
            await response.aread()
        finally:
            await response.aclose()
    return response


Reopen = Callable[[Optional[str]], Awaitable[httpx.Response]]


class AsyncBlobReader(WindowFacts):
    """A blob (or a range of it) read from the node as the caller reads,
    as `BlobReader`: ``await reader.read(n)``, or ``async for chunk in
    reader`` (chunks as they arrive). Made by `AsyncClient.open_blob`;
    close it (``async with``, or ``await reader.aclose()``)."""

    def __init__(self, response: httpx.Response, window: ReadWindow, reopen: Reopen) -> None:
        self._response = response
        self._window = window
        self._reopen = reopen
        self._chunks: AsyncIterator[bytes] = response.aiter_raw()
        self._pending = b""
        self.closed = False

    @classmethod
    async def _open(cls, window: ReadWindow, first: Optional[str], reopen: Reopen) -> "AsyncBlobReader":
        response = await reopen(first)
        try:
            window.accept(response, ranged=first is not None)
        except BaseException:
            await response.aclose()
            raise
        return cls(response, window, reopen)


    async def read(self, size: Optional[int] = -1) -> bytes:
        """Up to ``size`` bytes (all that is left if ``size`` is negative or
        ``None``): fewer only at the end."""
        if size is None or size < 0:
            return b"".join([chunk async for chunk in self])
        parts: List[bytes] = []
        wanted = size
        while wanted > 0:
            if not self._pending:
                chunk = await self._next_chunk()
                if chunk is None:
                    break
                self._pending = chunk
            part, self._pending = self._pending[:wanted], self._pending[wanted:]
            parts.append(part)
            wanted -= len(part)
        return b"".join(parts)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iter_chunks()

    async def _iter_chunks(self) -> AsyncIterator[bytes]:
        if self._pending:
            pending, self._pending = self._pending, b""
            yield pending
        while True:
            chunk = await self._next_chunk()
            if chunk is None:
                return
            yield chunk

    async def aclose(self) -> None:
        """Give the connection back (the rest of the body unread)."""
        if not self.closed:
            self.closed = True
            await self._response.aclose()

    async def __aenter__(self) -> "AsyncBlobReader":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _next_chunk(self) -> Optional[bytes]:
        """The next bytes of the body, as `BlobReader`'s."""
        if self.closed:
            raise ValueError("read of a closed blob reader")
        window = self._window
        while window.remaining > 0:
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                chunk = None
            except httpx.TransportError as error:
                await self._resume(error)
                continue
            if chunk is None:
                await self._resume(_blobs.body_ended_early(window))
                continue
            window.advance(chunk)
            if chunk:
                return chunk
        return None

    async def _resume(self, error: Exception) -> None:
        await self._response.aclose()
        byte_range = self._window.broken(error)
        self._response = await self._reopen(byte_range)
        self._chunks = self._response.aiter_raw()
        try:
            self._window.accept(self._response, ranged=True)
        except BaseException:
            await self._response.aclose()
            raise


class BlobOpening:
    """What `AsyncClient.open_blob` returns: awaited, the reader; used with
    ``async with``, the reader, closed at the end of the block."""

    def __init__(self, opening: Awaitable[AsyncBlobReader]) -> None:
        self._opening = opening
        self._reader: Optional[AsyncBlobReader] = None

    def __await__(self) -> Generator[Any, None, AsyncBlobReader]:
        return self._opening.__await__()

    async def __aenter__(self) -> AsyncBlobReader:
        self._reader = await self._opening
        return self._reader

    async def __aexit__(self, *exc_info: object) -> None:
        if self._reader is not None:
            await self._reader.aclose()
