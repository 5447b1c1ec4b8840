"""Blobs through both clients, against a fake node: a local HTTP server in a
thread that speaks ``/v1/blobs`` (no cohort node), so that the tests see the
bytes on the wire: chunked uploads, streamed downloads, ranges, a download
cut midway, a node answering the wrong bytes; and jobs given an input blob,
whose output blobs come back (``/v1/jobs/batch``, ``/v1/jobs/wait``,
``GET /v1/jobs/{id}``), and the labels and namespace a submission
carries."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import os
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

import httpx

from cohort_client import AsyncClient, BlobEntry, BlobInfo, Client, CohortError, OutputBlob
from cohort_client import _blobs
from cohort_client._blobs import BLOB_CHUNK_BYTES, check_etag, range_header
from cohort_client._core import Settings
from cohort_client._plans import Plans, Send

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Seen:
    """One request the fake node got."""

    def __init__(self, method: str, path: str, headers: Dict[str, str]) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = b""
        self.chunks = 0  # chunks of a chunked body


class FakeNode:
    """A node that stores blobs in memory and answers ``/v1/blobs`` as
    cohort does. ``cut_get`` cuts that many ``GET`` bodies in the middle
    (the connection closed); ``cut_put`` closes that many uploads' connections
    after reading ``cut_put_after`` bytes, without an answer; ``wrong`` maps a
    digest to the bytes answered for it; ``hold`` makes a ``GET`` send
    ``hold_bytes``, then wait for the event before the rest. ``put_delay_s``
    delays an upload's answer once its body has come (the node copying the
    blob to others), ``get_delay_s`` a download's head (the node fetching
    the blob).

    Jobs submitted to it finish at once: one given an input blob succeeds,
    having written the output blob ``upper.txt`` (the input blob's bytes in
    upper case), with that blob's size as its output; one without succeeds
    with its inline input as its output, writing no blob. ``jobs`` holds
    each job's submission as it came, by id."""

    def __init__(self) -> None:
        self.blobs: Dict[str, bytes] = {}
        self.jobs: Dict[int, Dict[str, Any]] = {}
        self.seen: List[Seen] = []
        self.cut_get = 0
        self.cut_put = 0
        self.cut_put_after = BLOB_CHUNK_BYTES
        self.wrong: Dict[str, bytes] = {}
        self.hold: Optional[threading.Event] = None
        self.hold_bytes = 0
        self.held_out = False
        self.put_delay_s = 0.0
        self.get_delay_s = 0.0
        node = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_PUT(self) -> None:
                node.put(self)

            def do_POST(self) -> None:
                node.post(self)

            def do_GET(self) -> None:
                node.get(self, head=False)

            def do_HEAD(self) -> None:
                node.get(self, head=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()

    def requests(self, method: str) -> List[Seen]:
        return [seen for seen in self.seen if seen.method == method]

    # The routes.

    def put(self, handler: BaseHTTPRequestHandler) -> None:
        seen = self._seen(handler)
        if handler.path != "/v1/blobs":
            return self._error(handler, 404, "not_found")
        if self.cut_put > 0:
            self.cut_put -= 1
            handler.rfile.read(self.cut_put_after)
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        if handler.headers.get("transfer-encoding", "").lower() == "chunked":
            seen.body, seen.chunks = _read_chunked(handler.rfile)
        else:
            seen.body = handler.rfile.read(int(handler.headers["content-length"]))
        digest = sha256(seen.body)
        expected = handler.headers.get("x-cohort-sha256")
        if expected is not None and expected != digest:
            return self._error(handler, 422, "blob_digest_mismatch")
        status = 200 if digest in self.blobs else 201
        self.blobs[digest] = seen.body
        if self.put_delay_s:
            time.sleep(self.put_delay_s)
        try:
            self._json(handler, status, {"digest": digest, "bytes": len(seen.body)})
        except OSError:
            handler.close_connection = True  # the client gave up and went

    def post(self, handler: BaseHTTPRequestHandler) -> None:
        seen = self._seen(handler)
        seen.body = handler.rfile.read(int(handler.headers["content-length"]))
        request = json.loads(seen.body)
        if handler.path == "/v1/jobs/batch":
            return self._json(handler, 202, {"results": [self._submit(job) for job in request["jobs"]]})
        if handler.path == "/v1/jobs/wait":
            finished = [self._finished(job_id) for job_id in request["ids"] if job_id in self.jobs]
            return self._json(handler, 200, {"jobs": finished})
        return self._error(handler, 404, "not_found")

    def _submit(self, job: Dict[str, Any]) -> Dict[str, Any]:
        """A batch's item: the job's id, or its refusal."""
        given = job.get("input_blob")
        if given is not None:
            # As the node reads it: either case, optionally `sha256:`.
            digest = given[len("sha256:") :] if given.startswith("sha256:") else given
            if digest.lower() not in self.blobs:
                return {"code": "blob_not_found", "message": f"no blob {given}", "retryable": False}
        job_id = len(self.jobs) + 1
        self.jobs[job_id] = job
        return {"id": job_id, "existing": False}

    def _job_blobs(self, job_id: int) -> Tuple[Optional[Dict[str, Any]], List[Dict[str, Any]]]:
        """A job's input blob (as the view shows it) and its output blobs,
        the latter stored here as a node keeps them."""
        given = self.jobs[job_id].get("input_blob")
        if given is None:
            return None, []
        digest = given[len("sha256:") :].lower() if given.startswith("sha256:") else given.lower()
        data = self.blobs[digest]
        upper = data.upper()
        self.blobs[sha256(upper)] = upper
        output = {"name": "upper.txt", "digest": sha256(upper), "bytes": len(upper)}
        return {"digest": digest, "bytes": len(data)}, [output]

    def _finished(self, job_id: int) -> Dict[str, Any]:
        """A job as ``POST /v1/jobs/wait`` lists it: succeeded."""
        job = self.jobs[job_id]
        input_blob, outputs = self._job_blobs(job_id)
        output = str(input_blob["bytes"]).encode() if input_blob else job.get("input", "").encode()
        item: Dict[str, Any] = {
            "id": job_id,
            "state": "succeeded",
            "error": None,
            "output_base64": base64.b64encode(output).decode(),
            "output_bytes": len(output),
        }
        if outputs:
            item["outputs"] = outputs
        return item

    def _view(self, job_id: int) -> Dict[str, Any]:
        """A job as ``GET /v1/jobs/{id}`` shows it (the fields at hand)."""
        input_blob, outputs = self._job_blobs(job_id)
        view: Dict[str, Any] = {"id": job_id, "module": self.jobs[job_id]["module"], "state": "succeeded"}
        if input_blob is not None:
            view["input_blob"] = input_blob
        if outputs:
            view["outputs"] = outputs
        return view

    def get(self, handler: BaseHTTPRequestHandler, head: bool) -> None:
        self._seen(handler)
        if handler.path.startswith("/v1/jobs/") and not head:
            job_id = int(handler.path[len("/v1/jobs/") :])
            if job_id not in self.jobs:
                return self._error(handler, 404, "job_not_found")
            return self._json(handler, 200, self._view(job_id))
        if handler.path == "/v1/blobs" and not head:
            listed = [{"digest": d, "bytes": len(b)} for d, b in sorted(self.blobs.items())]
            return self._json(handler, 200, {"blobs": listed})
        digest = handler.path[len("/v1/blobs/") :]
        if not handler.path.startswith("/v1/blobs/") or digest not in self.blobs:
            return self._error(handler, 404, "blob_not_found", head)
        data = self.wrong.get(digest, self.blobs[digest])
        size = len(data)
        if self.get_delay_s and not head:
            time.sleep(self.get_delay_s)
        start, stop, status = 0, size, 200
        header = handler.headers.get("range")
        if header is not None:
            found = _RANGE.fullmatch(header)
            assert found is not None, header
            first, last = found.groups()
            if first == "":
                start, stop = max(0, size - int(last)), size
            else:
                start = int(first)
                stop = size if last == "" else min(size, int(last) + 1)
            if start >= size:
                return self._error(handler, 416, "range_not_satisfiable", head, {"content-range": f"bytes */{size}"})
            status = 206
        handler.send_response(status)
        handler.send_header("content-type", "application/octet-stream")
        handler.send_header("content-length", str(stop - start))
        handler.send_header("etag", f'"{digest}"')
        handler.send_header("accept-ranges", "bytes")
        if status == 206:
            handler.send_header("content-range", f"bytes {start}-{stop - 1}/{size}")
        handler.end_headers()
        if head:
            return
        body = data[start:stop]
        if self.cut_get > 0:
            self.cut_get -= 1
            handler.wfile.write(body[: len(body) // 2])
            handler.wfile.flush()
            handler.close_connection = True
            return
        if self.hold is not None:
            handler.wfile.write(body[: self.hold_bytes])
            handler.wfile.flush()
            if not self.hold.wait(10):
                self.held_out = True
                handler.close_connection = True
                return
            body = body[self.hold_bytes :]
        handler.wfile.write(body)

    def _seen(self, handler: BaseHTTPRequestHandler) -> Seen:
        seen = Seen(handler.command, handler.path, {k.lower(): v for k, v in handler.headers.items()})
        self.seen.append(seen)
        return seen

    def _json(self, handler: BaseHTTPRequestHandler, status: int, body: Any, head: bool = False,
              headers: Optional[Dict[str, str]] = None) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", "0" if head else str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        if not head:
            handler.wfile.write(data)

    def _error(self, handler: BaseHTTPRequestHandler, status: int, code: str, head: bool = False,
               headers: Optional[Dict[str, str]] = None) -> None:
        self._json(handler, status, {"code": code, "message": f"a fake {code}", "retryable": False}, head, headers)


def _read_chunked(rfile: Any) -> Tuple[bytes, int]:
    """A chunked body, and how many chunks it came in."""
    parts = []
    while True:
        size = int(rfile.readline().split(b";")[0].strip(), 16)
        if size == 0:
            while rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(parts), len(parts)
        parts.append(rfile.read(size))
        rfile.readline()


@pytest.fixture
def fake() -> Iterator[FakeNode]:
    node = FakeNode()
    yield node
    node.stop()


@pytest.fixture
def fakes() -> Iterator[Callable[[], FakeNode]]:
    nodes: List[FakeNode] = []

    def make() -> FakeNode:
        nodes.append(FakeNode())
        return nodes[-1]

    yield make
    for node in nodes:
        node.stop()


def data_of(size: int, seed: int = 1) -> bytes:
    """``size`` bytes that differ at every offset (a shifted range shows)."""
    block = hashlib.sha256(str(seed).encode()).digest() * 2048  # 64 KiB
    return (block * (size // len(block) + 1))[:size]


# A range as a slice takes it, as HTTP spells it.


def test_ranges_are_slices_spelled_as_http_ranges() -> None:
    assert range_header(None, None) is None
    assert range_header(0, None) is None
    assert range_header(10, None) == "bytes=10-"
    assert range_header(10, 20) == "bytes=10-19"
    assert range_header(None, 1) == "bytes=0-0"
    assert range_header(-5, None) == "bytes=-5"
    for start, end in ((5, 5), (6, 5), (-5, 10), (0, -1)):
        with pytest.raises(ValueError):
            range_header(start, end)
    with pytest.raises(TypeError):
        range_header(1.5, None)  # type: ignore[arg-type]


# The blocking client.


def test_a_stream_is_sent_chunked_whole_and_once(fake: FakeNode) -> None:
    data = data_of(3 * BLOB_CHUNK_BYTES + 12345)
    with Client(fake.url) as client:
        info = client.put_blob_stream(io.BytesIO(data))
        assert info == BlobInfo(sha256(data), len(data))
        # Stored before: the same answer (200, not 201).
        assert client.put_blob_stream(io.BytesIO(data)) == info
    put = fake.requests("PUT")[0]
    assert put.headers.get("transfer-encoding") == "chunked" and "content-length" not in put.headers
    assert "x-cohort-sha256" not in put.headers
    assert put.body == data and put.chunks >= 4, put.chunks
    assert put.headers["content-type"] == "application/octet-stream"


def test_a_stream_with_a_wrong_sha256_is_refused_and_not_retried(fake: FakeNode) -> None:
    with Client(fake.url) as client:
        with pytest.raises(CohortError) as refused:
            client.put_blob_stream(io.BytesIO(b"abc"), sha256="0" * 64)
        assert (refused.value.code, refused.value.status) == ("blob_digest_mismatch", 422)
        with pytest.raises(ValueError):
            client.put_blob_stream(io.BytesIO(b"abc"), sha256="not a digest")
        with pytest.raises(TypeError):
            client.put_blob_stream(io.StringIO("text"))
    assert len(fake.requests("PUT")) == 1


def test_bytes_and_files_are_sent_with_their_sha256_and_failed_over(
    fakes: Callable[[], FakeNode], tmp_path: Path
) -> None:
    first, second = fakes(), fakes()
    data = data_of(2 * BLOB_CHUNK_BYTES + 7, seed=2)
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    # The first node breaks the connection midway through the upload: the
    # file is sent again, whole, to the next node.
    first.cut_put = 1
    with Client([first.url, second.url], retry_deadline_s=10) as client:
        assert client.put_blob_file(path) == BlobInfo(sha256(data), len(data))
        assert client.put_blob(b"small") == BlobInfo(sha256(b"small"), 5)
    [cut] = first.requests("PUT")
    assert cut.headers["content-length"] == str(len(data))
    put_file, put_bytes = second.requests("PUT")
    assert put_file.body == data and put_file.chunks == 0
    assert put_file.headers["content-length"] == str(len(data))
    assert put_file.headers["x-cohort-sha256"] == sha256(data)
    assert put_bytes.body == b"small" and put_bytes.headers["x-cohort-sha256"] == sha256(b"small")


def test_a_stream_cut_midway_is_not_sent_again(fakes: Callable[[], FakeNode]) -> None:
    first, second = fakes(), fakes()
    first.cut_put = 1
    with Client([first.url, second.url], retry_deadline_s=10) as client:
        with pytest.raises(CohortError) as failed:
            client.put_blob_stream(io.BytesIO(data_of(2 * BLOB_CHUNK_BYTES)))
        assert failed.value.code == "unreachable"
    assert len(first.requests("PUT")) == 1 and second.requests("PUT") == []


def test_a_blob_is_read_as_it_arrives_and_by_range(fake: FakeNode) -> None:
    data = data_of(3 * BLOB_CHUNK_BYTES, seed=3)
    digest = sha256(data)
    fake.blobs[digest] = data
    fake.hold = threading.Event()
    fake.hold_bytes = 1000
    with Client(fake.url) as client:
        with client.open_blob(digest) as reader:
            assert (reader.digest, reader.size, reader.start, reader.length) == (digest, len(data), 0, len(data))
            # The first bytes come while the node still holds back the rest.
            assert reader.read(1000) == data[:1000]
            assert not fake.held_out
            fake.hold.set()
            assert reader.read(10) == data[1000:1010]
            assert b"".join(reader.iter_chunks()) == data[1010:]
            assert reader.read(1) == b""
        fake.hold = None
        with client.open_blob(digest, 10, 20) as reader:
            assert (reader.start, reader.length, reader.size) == (10, 10, len(data))
            assert reader.read() == data[10:20]
        with client.open_blob(digest, -7) as reader:
            assert reader.read() == data[-7:] and reader.start == len(data) - 7
        with client.open_blob(digest, len(data) - 3) as reader:
            assert reader.read() == data[-3:]
        with pytest.raises(CohortError) as refused:
            client.open_blob(digest, len(data))
        assert (refused.value.code, refused.value.status) == ("range_not_satisfiable", 416)
        with pytest.raises(CohortError) as missing:
            client.open_blob("0" * 64)
        assert (missing.value.code, missing.value.status) == ("blob_not_found", 404)
    ranges = [seen.headers.get("range") for seen in fake.requests("GET")]
    assert ranges == [None, "bytes=10-19", "bytes=-7", f"bytes={len(data) - 3}-", f"bytes={len(data)}-", None]
    assert all(seen.headers["accept-encoding"] == "identity" for seen in fake.requests("GET"))


def test_a_download_cut_midway_resumes_where_it_broke(fake: FakeNode, tmp_path: Path) -> None:
    data = data_of(2 * BLOB_CHUNK_BYTES + 99, seed=4)
    digest = sha256(data)
    fake.blobs[digest] = data
    with Client(fake.url, retry_deadline_s=10) as client:
        fake.cut_get = 1
        with client.open_blob(digest, 5) as reader:
            assert reader.read() == data[5:]
        fake.cut_get = 1
        target = tmp_path / "out.bin"
        assert client.get_blob_to_file(digest, target) == BlobInfo(digest, len(data))
        assert target.read_bytes() == data
    ranges = [seen.headers.get("range") for seen in fake.requests("GET")]
    end = len(data) - 1
    assert ranges == ["bytes=5-", f"bytes={5 + (len(data) - 5) // 2}-{end}", None, f"bytes={len(data) // 2}-{end}"]


def test_a_download_whose_bytes_are_not_the_blob_is_not_saved(fake: FakeNode, tmp_path: Path) -> None:
    data = data_of(BLOB_CHUNK_BYTES + 1, seed=5)
    digest = sha256(data)
    fake.blobs[digest] = data
    fake.wrong[digest] = data[:-1] + b"\0"
    target = tmp_path / "out.bin"
    target.write_bytes(b"kept")
    with Client(fake.url) as client:
        with pytest.raises(CohortError) as mismatch:
            client.get_blob_to_file(digest, target)
        assert mismatch.value.code == "blob_digest_mismatch" and digest in mismatch.value.message
        assert target.read_bytes() == b"kept"
        assert sorted(os.listdir(tmp_path)) == ["out.bin"]
        # A blob it lacks: nothing is left either.
        with pytest.raises(CohortError) as missing:
            client.get_blob_to_file("1" * 64, tmp_path / "none.bin")
        assert missing.value.code == "blob_not_found"
        assert sorted(os.listdir(tmp_path)) == ["out.bin"]


def test_blobs_are_listed_and_looked_at(fake: FakeNode) -> None:
    with Client(fake.url) as client:
        stored = client.put_blob(b"hello")
        # A node that says nothing of what the cluster keeps: left unknown.
        assert client.list_blobs() == [BlobEntry(stored.digest, stored.bytes)]
        assert client.list_blobs()[0].info == stored
        assert client.head_blob(stored.digest) == stored
        assert client.head_blob("2" * 64) is None
        # A digest is one path segment, whatever it holds.
        assert client.head_blob("../jobs") is None
        counts = client.request_counts()
    assert fake.requests("HEAD")[-1].path == "/v1/blobs/..%2Fjobs"
    assert counts["HEAD /v1/blobs/{digest}"] == 2 and counts["PUT /v1/blobs"] == 1


# The asyncio client: the same flows.


def test_the_async_client_streams_blobs_too(fake: FakeNode, tmp_path: Path) -> None:
    data = data_of(2 * BLOB_CHUNK_BYTES + 3, seed=6)
    digest = sha256(data)
    path = tmp_path / "in.bin"
    path.write_bytes(data)

    async def main() -> None:
        async with AsyncClient(fake.url, retry_deadline_s=10) as client:
            assert await client.put_blob_stream(io.BytesIO(data)) == BlobInfo(digest, len(data))
            assert await client.put_blob_file(path) == BlobInfo(digest, len(data))
            assert await client.put_blob(b"x") == BlobInfo(sha256(b"x"), 1)
            assert await client.head_blob(digest) == BlobInfo(digest, len(data))
            assert await client.head_blob("3" * 64) is None
            assert sorted(await client.list_blobs(), key=lambda b: b.bytes) == [
                BlobEntry(sha256(b"x"), 1),
                BlobEntry(digest, len(data)),
            ]
            async with client.open_blob(digest, 3, 9) as reader:
                assert (reader.start, reader.length, reader.size) == (3, 6, len(data))
                assert await reader.read(2) == data[3:5]
                assert await reader.read() == data[5:9]
            fake.cut_get = 1
            reader = await client.open_blob(digest)
            try:
                assert b"".join([chunk async for chunk in reader]) == data
            finally:
                await reader.aclose()
            out = tmp_path / "out.bin"
            assert await client.get_blob_to_file(digest, out) == BlobInfo(digest, len(data))
            assert out.read_bytes() == data
            fake.wrong[digest] = b"\0" + data[1:]
            with pytest.raises(CohortError) as mismatch:
                await client.get_blob_to_file(digest, tmp_path / "bad.bin")
            assert mismatch.value.code == "blob_digest_mismatch"
            with pytest.raises(CohortError) as refused:
                await client.open_blob(digest, len(data) + 1)
            assert refused.value.code == "range_not_satisfiable"

    asyncio.run(main())
    stream, from_file = fake.requests("PUT")[:2]
    assert stream.headers.get("transfer-encoding") == "chunked" and stream.body == data and stream.chunks >= 3
    assert from_file.headers["content-length"] == str(len(data)) and from_file.headers["x-cohort-sha256"] == digest
    ranges = [seen.headers.get("range") for seen in fake.requests("GET")[1:]]
    assert ranges[:2] == ["bytes=3-8", None] and ranges[2] == f"bytes={len(data) // 2}-{len(data) - 1}"
    assert sorted(os.listdir(tmp_path)) == ["in.bin", "out.bin"]


# The waits for a node that copies or fetches a blob before it answers.


def test_an_uploads_answer_is_waited_for_longer_the_larger_the_blob(
    fakes: Callable[[], FakeNode], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once its body has gone, an upload's answer is waited for the read
    timeout (0.3 s) plus the bytes sent at the copy rate (1,000 bytes at
    1,000 bytes a second): an answer 0.8 s after the body comes in time,
    from bytes, a file or a stream, by either client; one later than 1.3 s
    does not, nor one after 0.3 s to an empty upload. All at once."""
    monkeypatch.setattr(_blobs, "BLOB_COPY_BYTES_PER_S", 1000)
    data = data_of(1000, seed=7)
    info = BlobInfo(sha256(data), len(data))
    path = tmp_path / "in.bin"
    path.write_bytes(data)
    late, too_late = fakes(), fakes()
    late.put_delay_s, too_late.put_delay_s = 0.8, 3.0
    options: Dict[str, Any] = {"request_timeout_s": 0.3, "retry_deadline_s": 0}

    def refused(url: str, content: bytes) -> Tuple[CohortError, float]:
        started = time.monotonic()
        with Client(url, **options) as client:
            with pytest.raises(CohortError) as failed:
                client.put_blob(content)
        return failed.value, time.monotonic() - started

    async def put_async() -> BlobInfo:
        async with AsyncClient(late.url, **options) as client:
            return await client.put_blob_stream(io.BytesIO(data))

    started = time.monotonic()
    with Client(late.url, **options) as client, ThreadPoolExecutor(6) as pool:
        from_bytes = pool.submit(client.put_blob, data)
        from_file = pool.submit(client.put_blob_file, path)
        from_stream = pool.submit(client.put_blob_stream, io.BytesIO(data))
        from_async = pool.submit(asyncio.run, put_async())
        beyond = pool.submit(refused, too_late.url, data)
        empty = pool.submit(refused, late.url, b"")
        assert from_bytes.result() == info
        assert from_file.result() == info
        assert from_stream.result() == info
        assert from_async.result() == info
        assert time.monotonic() - started >= 0.8
        error, waited = beyond.result()
        assert error.code == "unreachable" and 1.3 <= waited < 2.5, (error, waited)
        error, waited = empty.result()
        assert error.code == "unreachable" and waited < 0.75, (error, waited)
    assert len(late.requests("PUT")) == 5 and len(too_late.requests("PUT")) == 1


def test_a_downloads_head_may_wait_for_the_node_to_fetch_the_blob(
    fake: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head of a download of unknown size is waited for the read timeout
    plus `BLOB_FETCH_WAIT_S` (here 0.3 s + 1 s); then the body's reads wait
    the read timeout again. A resumed download, of known size, allows the
    size at the copy rate instead."""
    monkeypatch.setattr(_blobs, "BLOB_FETCH_WAIT_S", 1.0)
    monkeypatch.setattr(_blobs, "BLOB_COPY_BYTES_PER_S", 1000)
    data = data_of(5000, seed=8)
    digest = sha256(data)
    fake.blobs[digest] = data
    fake.get_delay_s = 0.8
    with Client(fake.url, request_timeout_s=0.3, retry_deadline_s=0) as client:
        with client.open_blob(digest) as reader:
            assert reader._response.request.extensions["timeout"]["read"] == 0.3
            assert reader.read() == data

    async def main() -> bytes:
        async with AsyncClient(fake.url, request_timeout_s=0.3, retry_deadline_s=0) as client:
            async with client.open_blob(digest, 10) as reader:
                return await reader.read()

    assert asyncio.run(main()) == data[10:]
    plans = Plans(Settings.make(fake.url, None, None, 1.0, 10, 0.0, 0.3))
    first: Send = next(plans.blob_body(digest, None))
    resumed: Send = next(plans.blob_body(digest, "bytes=100-", 5000))
    assert first.head_extra is not None and first.head_extra(0) == 1.0
    assert resumed.head_extra is not None and resumed.head_extra(0) == 5.0
    upload: Send = next(plans.put_blob(b"x" * 2500))
    assert upload.head_extra is not None and upload.head_extra(2500) == 2.5


def test_the_allowance_is_the_bytes_at_16_mib_a_second() -> None:
    assert _blobs.BLOB_COPY_BYTES_PER_S == 16 << 20
    assert _blobs.copy_allowance_s(64 << 30) == 4096.0
    assert _blobs.fetch_allowance_s(None) == _blobs.BLOB_FETCH_WAIT_S == 600.0
    assert _blobs.fetch_allowance_s(8 << 20) == 0.5


# Digests in either case.


def test_a_digest_in_uppercase_names_the_same_blob(fake: FakeNode, tmp_path: Path) -> None:
    data = data_of(BLOB_CHUNK_BYTES + 5, seed=9)
    digest = sha256(data)
    upper = digest.upper()
    with Client(fake.url) as client:
        assert client.put_blob_stream(io.BytesIO(data), sha256=upper) == BlobInfo(digest, len(data))
        assert client.head_blob(upper) == BlobInfo(digest, len(data))
        with client.open_blob(upper, 3, 9) as reader:
            assert reader.digest == digest and reader.read() == data[3:9]
        fake.cut_get = 1  # resumed under the same, lowercase, name
        assert client.get_blob_to_file(upper, tmp_path / "out.bin") == BlobInfo(digest, len(data))
        assert (tmp_path / "out.bin").read_bytes() == data

    async def main() -> BlobInfo:
        async with AsyncClient(fake.url) as client:
            assert await client.head_blob(upper) == BlobInfo(digest, len(data))
            return await client.get_blob_to_file(upper, tmp_path / "async.bin")

    assert asyncio.run(main()) == BlobInfo(digest, len(data))
    assert fake.requests("PUT")[0].headers["x-cohort-sha256"] == digest
    assert {seen.path for seen in fake.seen if seen.method != "PUT"} == {f"/v1/blobs/{digest}"}
    # An ETag in either case names the same blob; another blob's does not.
    check_etag(httpx.Headers({"etag": f'"{upper}"'}), digest)
    with pytest.raises(CohortError):
        check_etag(httpx.Headers({"etag": f'"{sha256(b"other")}"'}), upper)


# Jobs given an input blob, and the blobs they write.

#: A module digest the fake node takes as it is (nothing is uploaded).
MODULE = "ab" * 32
RESULT_TIMEOUT_S = 10.0


def test_a_jobs_input_blob_is_sent_as_given_and_its_output_blobs_come_back(fake: FakeNode) -> None:
    text = b"a b a"
    with Client(fake.url) as client:
        info = client.put_blob(text)
        by_info = client.submit(MODULE, input_blob=info)
        # A string goes as it is given: the node reads either case and `sha256:`.
        by_text = client.submit(MODULE, "inline too", input_blob="sha256:" + info.digest.upper())
        plain = client.submit(MODULE, "no blob")
        upper = OutputBlob("upper.txt", sha256(b"A B A"), len(text))
        assert by_info.outputs(timeout=RESULT_TIMEOUT_S) == [upper]
        assert by_text.outputs(timeout=RESULT_TIMEOUT_S) == [upper]
        assert by_info.text() == str(len(text))
        # None written: empty.
        assert plain.outputs(timeout=RESULT_TIMEOUT_S) == [] and plain.text() == "no blob"
        # The view as the node answers it, absent fields absent.
        view = by_info.status()
        assert view["input_blob"] == {"digest": info.digest, "bytes": len(text)}
        assert view["outputs"] == [{"name": "upper.txt", "digest": upper.digest, "bytes": upper.bytes}]
        assert "input_blob" not in plain.status() and "outputs" not in plain.status()
        # An output blob downloads as any blob, and is the next job's input.
        with client.open_blob(upper.digest) as reader:
            assert reader.read() == b"A B A"
        chained = client.submit(MODULE, input_blob=upper)
        assert chained.outputs(timeout=RESULT_TIMEOUT_S) == [upper]
        # A blob the cluster does not have: the node's refusal.
        missing = client.submit(MODULE, input_blob="0" * 64)
        with pytest.raises(CohortError) as refused:
            missing.id
        assert (refused.value.code, refused.value.status) == ("blob_not_found", 404)
        with pytest.raises(CohortError):
            missing.outputs(timeout=RESULT_TIMEOUT_S)
        with pytest.raises(TypeError):
            client.submit(MODULE, input_blob=42)  # type: ignore[arg-type]
    sent = [fake.jobs[job_id] for job_id in sorted(fake.jobs)]
    assert [job.get("input_blob") for job in sent] == [info.digest, "sha256:" + info.digest.upper(), None, upper.digest]
    assert "input_blob" not in sent[2] and sent[1]["input"] == "inline too"


def test_the_async_client_sends_an_input_blob_and_gets_its_outputs(fake: FakeNode) -> None:
    async def main() -> None:
        async with AsyncClient(fake.url) as client:
            info = await client.put_blob(b"x y")
            job = await client.submit(MODULE, input_blob=info.digest)
            plain = await client.submit(MODULE, "z")
            outputs = await job.outputs(timeout=RESULT_TIMEOUT_S)
            assert outputs == [OutputBlob("upper.txt", sha256(b"X Y"), 3)]
            assert await plain.outputs(timeout=RESULT_TIMEOUT_S) == []
            view = await job.status()
            assert view["input_blob"] == {"digest": info.digest, "bytes": 3} and len(view["outputs"]) == 1
            assert "outputs" not in await plain.status()
            async with client.open_blob(outputs[0].digest) as reader:
                assert await reader.read() == b"X Y"
            assert await client.map(MODULE, ["", ""], input_blob=info) == [b"3", b"3"]

    asyncio.run(main())
    sent = [fake.jobs[job_id] for job_id in sorted(fake.jobs)]
    digest = sha256(b"x y")
    assert [job.get("input_blob") for job in sent] == [digest, None, digest, digest]
    assert "input_blob" not in sent[1]



def test_labels_go_as_an_object_only_when_given_by_submit_and_map(fake: FakeNode) -> None:
    gpu = {"gpu": "a100", "zone": "eu"}
    with Client(fake.url) as client:
        labelled = client.submit(MODULE, "labelled", labels=gpu, memory_bytes=64 << 20)
        plain = client.submit(MODULE, "plain")
        empty = client.submit(MODULE, "empty", labels={})
        assert [job.text(RESULT_TIMEOUT_S) for job in (labelled, plain, empty)] == ["labelled", "plain", "empty"]
        assert client.map(MODULE, ["map 1", "map 2"], labels={"gpu": "a100"}) == [b"map 1", b"map 2"]

    async def main() -> None:
        async with AsyncClient(fake.url) as client:
            job = await client.submit(MODULE, "async", labels=gpu)
            bare = await client.submit(MODULE, "async plain")
            assert await job.text(RESULT_TIMEOUT_S) == "async" and await bare.text(RESULT_TIMEOUT_S) == "async plain"
            assert await client.map(MODULE, ["async map"], labels=gpu) == [b"async map"]

    asyncio.run(main())
    sent = {job["input"]: job for job in fake.jobs.values()}
    assert {input: job.get("labels") for input, job in sent.items()} == {
        "labelled": gpu,
        "plain": None,
        "empty": None,
        "map 1": {"gpu": "a100"},
        "map 2": {"gpu": "a100"},
        "async": gpu,
        "async plain": None,
        "async map": gpu,
    }
    # None given, or none in them: no `labels` key at all.
    assert all("labels" not in sent[input] for input in ("plain", "empty", "async plain"))
    assert sent["labelled"]["memory_bytes"] == 64 << 20


def test_a_namespace_goes_only_when_given_by_submit_and_map(fake: FakeNode) -> None:
    with Client(fake.url) as client:
        named = client.submit(MODULE, "named", namespace="team-a")
        plain = client.submit(MODULE, "plain")
        assert [job.text(RESULT_TIMEOUT_S) for job in (named, plain)] == ["named", "plain"]
        assert client.map(MODULE, ["map"], namespace="team-b") == [b"map"]

    async def main() -> None:
        async with AsyncClient(fake.url) as client:
            job = await client.submit(MODULE, "async", namespace="team-a")
            assert await job.text(RESULT_TIMEOUT_S) == "async"
            assert await client.map(MODULE, ["async map"], namespace="team-b") == [b"async map"]

    asyncio.run(main())
    sent = {job["input"]: job for job in fake.jobs.values()}
    assert {input: job.get("namespace") for input, job in sent.items()} == {
        "named": "team-a",
        "plain": None,
        "map": "team-b",
        "async": "team-a",
        "async map": "team-b",
    }
    assert "namespace" not in sent["plain"]
