"""What `Client` and `AsyncClient` share of blobs: everything but the I/O.

A blob is data of any length named by the sha256 of its bytes, stored by
the cluster (``PUT /v1/blobs``) and read back whole or by byte range
(``GET /v1/blobs/{digest}``). Neither client ever holds a whole blob: an
upload is read from its file in chunks of `BLOB_CHUNK_BYTES` as it is
sent, a download is handed on chunk by chunk as it arrives. Here are the
request bodies (`FileBody`, `StreamBody`), the ranges, the parsing of
answers, a download's bookkeeping (`ReadWindow`) and the temporary file a
download is saved through (`PartFile`); the readers are `BlobReader`
(`_sync`) and `AsyncBlobReader` (`_async`).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import io
import os
import re
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Any, AsyncIterator, Callable, Dict, Iterator, List, Optional, Union
from urllib.parse import quote

import httpx

from ._core import bad_answer, load_json
from .errors import CohortError

#: How much of a file is read (and sent, or written) at a time.
BLOB_CHUNK_BYTES = 1 << 20
#: The request header naming the digest an upload must have.
SHA256_HEADER = "x-cohort-sha256"
#: A download that fails this many times in a row without a byte between
#: gives up (a failure after progress resumes where it broke, again).
RESUMES_WITHOUT_PROGRESS_MAX = 3
#: The slowest rate, in bytes a second, at which a node is taken to copy a
#: blob between nodes (16 MiB/s). A node answers an upload only once the
#: blob is durable on a majority of the back-end nodes, copying it after
#: its last byte arrived: once an upload's body has been sent, its answer
#: is waited for ``request_timeout_s`` plus one second per this many bytes
#: sent (a 64 GiB blob: 4096 s more). A resumed download, whose blob's
#: size is known, allows as much for a node without a copy to copy the
#: blob up to the range it resumes at.
BLOB_COPY_BYTES_PER_S = 16 << 20
#: How much longer than ``request_timeout_s`` a download waits for its
#: answer's head when the blob's size is not known (its first request): 10
#: minutes. A node without a copy answers once its copy from another has the
#: first MiB, or all of a smaller blob, a range once the copy also reaches
#: the range's first byte. Once the body flows, ``request_timeout_s`` is
#: again the longest wait for each next bytes.
BLOB_FETCH_WAIT_S = 600.0

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_ANY_CASE_DIGEST = re.compile(r"[0-9a-fA-F]{64}")

#: A path to a file, as ``open`` takes it.
Path = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class BlobInfo:
    """A blob stored by the cluster: the sha256 of its bytes (64 lowercase
    hex digits) and its size."""

    digest: str
    bytes: int


@dataclass(frozen=True)
class BlobEntry:
    """A blob the answering node stores, as ``GET /v1/blobs`` lists it:
    `BlobInfo`'s digest and size, and what the cluster says of it (each
    ``None`` when the node could not ask the master)."""

    #: The sha256 of its bytes, 64 lowercase hex digits.
    digest: str
    #: Its size in bytes.
    bytes: int
    #: Whether the cluster keeps the blob. A node deletes its copy of a
    #: blob the cluster does not keep once its grace period
    #: (``--blob-grace``) has passed since an upload or copy last stored or
    #: found it there.
    kept: Optional[bool] = None
    #: How many held jobs (their input and output blobs) and schedules
    #: name it; while any does, the cluster keeps it.
    refs: Optional[int] = None
    #: When the cluster stops keeping it, in ms since the Unix epoch,
    #: unless something names it or it is uploaded again first; ``None``
    #: while something names it (or when it is not kept).
    collect_at: Optional[int] = None

    @property
    def info(self) -> BlobInfo:
        """Its digest and size, as `Client.put_blob` returns them."""
        return BlobInfo(self.digest, self.bytes)


def blob_digest(digest: str) -> str:
    """A digest as the caller gave it, in lowercase if it is one (64 hex
    digits, either case): digests are case-insensitive hex, and the node,
    the ``ETag`` and the bytes' sha256 spell them in lowercase. Anything
    else is left as it is, for the node to answer."""
    if isinstance(digest, str) and _ANY_CASE_DIGEST.fullmatch(digest):
        return digest.lower()
    return digest


def blob_path(digest: str) -> str:
    """The route of blob ``digest`` (one path segment, whatever it holds)."""
    return "/v1/blobs/" + quote(blob_digest(digest), safe="")


def copy_allowance_s(size: int) -> float:
    """How long a node is given to copy (or fetch) ``size`` bytes of a blob
    before it answers: ``size / BLOB_COPY_BYTES_PER_S`` seconds."""
    return size / BLOB_COPY_BYTES_PER_S


def fetch_allowance_s(size: Optional[int]) -> float:
    """How much longer than the read timeout a download's answer's head may
    take: `copy_allowance_s` of the blob's ``size``, or
    `BLOB_FETCH_WAIT_S` when it is not known."""
    return BLOB_FETCH_WAIT_S if size is None else copy_allowance_s(size)


class HeadWait:
    """Waits longer for one request's answer's head: its read timeout plus
    ``extra(sent)`` seconds once its body (``sent`` bytes) has gone; after
    the head, the read timeout again (`head_came`), for the body's reads.

    httpcore takes the read timeout from the request's ``timeout``
    extension as each wait begins (the head's, then the body's), so it is
    changed there: by the body's iterator as it ends (a stream's size is
    known only then), or at once for a body of known bytes (`bind`)."""

    def __init__(self, extra: Callable[[int], float]) -> None:
        self._extra = extra
        self._timeouts: Optional[Dict[str, Optional[float]]] = None
        self._read: Optional[float] = None

    def bind(self, request: httpx.Request, sent: Optional[int]) -> None:
        """Wait for ``request``; ``sent``: its body's length, if it is bytes
        (``None`` for a body that `chunks` or `achunks` counts)."""
        timeouts = request.extensions.get("timeout")
        if not isinstance(timeouts, dict):
            return
        self._timeouts = timeouts
        self._read = timeouts.get("read")
        if sent is not None:
            self.body_sent(sent)

    def body_sent(self, sent: int) -> None:
        """The body has gone: the head may take ``extra(sent)`` longer."""
        if self._timeouts is not None and self._read is not None:
            self._timeouts["read"] = self._read + self._extra(sent)

    def head_came(self) -> None:
        """The head came: the body's reads wait the read timeout."""
        if self._timeouts is not None:
            self._timeouts["read"] = self._read

    def chunks(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        """``chunks``, counted; `body_sent` once they end."""
        sent = 0
        for chunk in chunks:
            sent += len(chunk)
            yield chunk
        self.body_sent(sent)

    async def achunks(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """`chunks` for ``httpx.AsyncClient``."""
        sent = 0
        async for chunk in chunks:
            sent += len(chunk)
            yield chunk
        self.body_sent(sent)


def range_header(start: Optional[int], end: Optional[int]) -> Optional[str]:
    """The ``Range`` header of bytes ``start`` to ``end`` of a blob, as a
    slice takes them: ``end`` excluded, ``None`` for either end of the blob,
    a negative ``start`` (without ``end``) for the last ``-start`` bytes.
    ``None`` for the whole blob. Raises ``ValueError`` for a range HTTP
    cannot ask for (empty, or negative ``end``)."""
    for name, value in (("start", start), ("end", end)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name} is an int or None, not {type(value).__name__}")
    if start is not None and start < 0:
        if end is not None:
            raise ValueError("a negative start (the last bytes) takes no end")
        return f"bytes={start}"  # "bytes=-N"
    first = start or 0
    if end is None:
        return None if first == 0 else f"bytes={first}-"
    if end < 0:
        raise ValueError(f"end must be at least 0, not {end}")
    if end <= first:
        raise ValueError(f"an empty range: end ({end}) must be above start ({first})")
    return f"bytes={first}-{end - 1}"


def blob_info_of(body: bytes, expected: Optional[BlobInfo] = None) -> BlobInfo:
    """The ``{"digest", "bytes"}`` of an upload's answer, checked against
    what was sent when known (``bad_answer`` if the node stored other
    bytes)."""
    info = _info(load_json(body))
    if expected is not None and info != expected:
        raise bad_answer(f"the node stored {info.digest} ({info.bytes} bytes), not the {expected.digest} sent")
    return info


@dataclass(frozen=True)
class BlobPage:
    """A page of the blobs the cluster keeps (``GET
    /v1/blobs?scope=cluster``), by digest."""

    #: The blobs, each kept (``kept`` is ``True``).
    blobs: List[BlobEntry]
    #: The ``after`` of the next page; ``None`` on the last.
    next: Optional[str] = None


def blob_page_of(body: bytes) -> BlobPage:
    """The page of ``GET /v1/blobs?scope=cluster``'s answer."""
    data = load_json(body)
    following = data.get("next") if isinstance(data, dict) else None
    if following is not None and not isinstance(following, str):
        raise bad_answer("a page of blobs whose next is not a digest")
    return BlobPage(blob_list_of(body), following)


def blob_list_of(body: bytes) -> List[BlobEntry]:
    """The blobs of ``GET /v1/blobs``'s answer."""
    data = load_json(body)
    blobs = data.get("blobs") if isinstance(data, dict) else None
    if not isinstance(blobs, list):
        raise bad_answer("a list of blobs without blobs")
    return [_entry(blob) for blob in blobs]


def _entry(data: Any) -> BlobEntry:
    info = _info(data)
    kept, refs, collect_at = (data.get(field) for field in ("kept", "refs", "collect_at"))
    if (
        (kept is not None and not isinstance(kept, bool))
        or not _optional_count(refs)
        or not _optional_count(collect_at)
    ):
        raise bad_answer(f"a listed blob whose kept, refs or collect_at is of another type: {data!r}")
    return BlobEntry(info.digest, info.bytes, kept, refs, collect_at)


def _optional_count(value: Any) -> bool:
    """Whether ``value`` is absent or a count (an int that is not a bool, at least 0)."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


def _info(data: Any) -> BlobInfo:
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("digest"), str)
        or not isinstance(data.get("bytes"), int)
        or isinstance(data.get("bytes"), bool)
    ):
        raise bad_answer(f"a blob that is not {{digest, bytes}}: {data!r}")
    return BlobInfo(data["digest"], data["bytes"])


def check_etag(headers: httpx.Headers, digest: str) -> None:
    """A blob's ``ETag`` (when the answer has one) names the blob asked for."""
    etag = headers.get("etag")
    if etag is not None and blob_digest(etag.removeprefix("W/").strip('"')) != blob_digest(digest):
        raise bad_answer(f"blob {digest} answered with the ETag {etag}")


def head_info(response: httpx.Response, digest: str) -> BlobInfo:
    """The blob a ``HEAD /v1/blobs/{digest}`` describes."""
    digest = blob_digest(digest)
    check_etag(response.headers, digest)
    length = _integer(response.headers.get("content-length"))
    if length is None:
        raise bad_answer(f"blob {digest}'s HEAD without a Content-Length")
    return BlobInfo(digest, length)


def _integer(text: Optional[str]) -> Optional[int]:
    return int(text) if text is not None and text.isdigit() else None


# ---------------------------------------------------------------------------
# Downloads


class ReadWindow:
    """Where a download stands: the bytes ``start`` to ``stop`` (excluded)
    of a blob of ``size`` bytes, read up to ``position``.

    A download broken by a transport failure (a reset, a node killed, a
    body cut short) resumes with a ``Range`` from ``position`` on the next
    node: a blob never changes under its digest, so the bytes that follow
    are the same from any node. Not thread-safe (a reader is used by one
    caller at a time).
    """

    def __init__(self, digest: str) -> None:
        self.digest = blob_digest(digest)
        self.start = 0
        self.stop = 0
        self.size = 0
        self.position = 0
        self._opened = False
        self._stalls = 0
        self._progress_since_open = False

    def accept(self, response: httpx.Response, ranged: bool) -> None:
        """Take an answer to a (resumed) ``GET``: its window, checked."""
        check_etag(response.headers, self.digest)
        length = _integer(response.headers.get("content-length"))
        if response.status_code == 206:
            found = _CONTENT_RANGE.fullmatch(response.headers.get("content-range", ""))
            if found is None:
                raise bad_answer(f"a 206 with the Content-Range {response.headers.get('content-range')!r}")
            first, last, size = (int(group) for group in found.groups())
            start, stop = first, last + 1
            if stop > size or (length is not None and length != stop - start):
                raise bad_answer(f"a 206 whose Content-Range {first}-{last}/{size} is not its length ({length})")
        elif response.status_code == 200 and not ranged:
            if length is None:
                raise bad_answer(f"blob {self.digest} answered without a Content-Length")
            start, stop, size = 0, length, length
        else:
            raise bad_answer(f"a range of blob {self.digest} answered with {response.status_code}")
        if not self._opened:
            self.start, self.stop, self.size, self.position = start, stop, size, start
            self._opened = True
        elif (start, stop, size) != (self.position, self.stop, self.size):
            raise bad_answer(
                f"resumed at {self.position} of {self.size} bytes, the node answered bytes {start}-{stop - 1}/{size}"
            )
        self._progress_since_open = False

    @property
    def known_size(self) -> Optional[int]:
        """The blob's size once an answer gave it, else ``None``."""
        return self.size if self._opened else None

    @property
    def remaining(self) -> int:
        """Bytes of the window not read yet."""
        return self.stop - self.position

    def advance(self, chunk: bytes) -> None:
        """``chunk`` came: the position moves past it."""
        if len(chunk) > self.remaining:
            raise bad_answer(f"blob {self.digest}'s body is longer than its {self.stop - self.start} bytes")
        if chunk:
            self.position += len(chunk)
            self._progress_since_open = True
            self._stalls = 0

    def broken(self, error: Exception) -> Optional[str]:
        """The download broke with ``error`` (a transport failure, or a body
        that ended early): the ``Range`` to resume with, or ``unreachable``
        raised after too many failures in a row without progress."""
        if not self._progress_since_open:
            self._stalls += 1
        if self._stalls >= RESUMES_WITHOUT_PROGRESS_MAX:
            detail = str(error) or type(error).__name__
            raise CohortError(
                "unreachable", f"blob {self.digest} broke off at byte {self.position}: {detail}", None, True
            ) from error
        header = range_header(self.position, self.stop)
        assert header is not None and self.remaining > 0
        return header


class WindowFacts:
    """What a blob reader (sync or async) tells of the bytes it gives,
    read from its ``_window``."""

    _window: ReadWindow

    @property
    def digest(self) -> str:
        """The blob's digest."""
        return self._window.digest

    @property
    def size(self) -> int:
        """The whole blob's size in bytes (whatever range is read)."""
        return self._window.size

    @property
    def start(self) -> int:
        """The offset in the blob of the first byte this reader gives."""
        return self._window.start

    @property
    def length(self) -> int:
        """How many bytes this reader gives in all (the range's length)."""
        return self._window.stop - self._window.start


def body_ended_early(window: ReadWindow) -> Exception:
    """The error of a body that ended before its window did."""
    return httpx.RemoteProtocolError(f"the body ended {window.remaining} bytes early")


class PartFile:
    """A download saved beside its destination: ``.NAME.XXXX.part`` in the
    same directory, hashed as it is written, renamed over the destination
    only once whole and its sha256 the digest asked for (`commit`), else
    removed (`discard`). Blocking calls: `AsyncClient` runs each in a
    thread."""

    def __init__(self, destination: Path, digest: str) -> None:
        self.destination = os.fspath(destination)
        self.digest = blob_digest(digest)
        directory, name = os.path.split(os.path.abspath(self.destination))
        fd, self.path = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=directory)
        self._file: IO[bytes] = os.fdopen(fd, "wb")
        self._hash = hashlib.sha256()
        self.bytes = 0

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``."""
        self._file.write(chunk)
        self._hash.update(chunk)
        self.bytes += len(chunk)

    def commit(self) -> BlobInfo:
        """Check the bytes' sha256; rename the file into place (synced
        first, so a crash never leaves a torn file under the name).
        Raises ``blob_digest_mismatch`` (the file removed) if the bytes are
        not the blob's."""
        actual = self._hash.hexdigest()
        if actual != self.digest:
            self.discard()
            raise CohortError(
                "blob_digest_mismatch",
                f"the {self.bytes} bytes received for blob {self.digest} have sha256 {actual}; nothing was saved",
            )
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            os.replace(self.path, self.destination)
        except BaseException:
            self.discard()
            raise
        return BlobInfo(self.digest, self.bytes)

    def discard(self) -> None:
        """Close and remove the partial file."""
        self._file.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


# ---------------------------------------------------------------------------
# Uploads


class BodySource:
    """A request body read as it is sent: ``chunks()`` for ``httpx.Client``,
    ``achunks()`` (its reads in a thread) for ``httpx.AsyncClient``."""

    def chunks(self) -> Iterator[bytes]:
        raise NotImplementedError

    def achunks(self) -> AsyncIterator[bytes]:
        raise NotImplementedError

    def headers(self) -> Dict[str, str]:
        """The headers the body needs (its ``content-length`` when known)."""
        return {}


def hash_file(path: Path) -> BlobInfo:
    """A file's sha256 and size, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as file:
        while True:
            chunk = file.read(BLOB_CHUNK_BYTES)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
    return BlobInfo(digest.hexdigest(), size)


class FileBody(BodySource):
    """A file of known size and digest, opened anew by each try (so a
    retry sends it again, whole). The file ending before its size is
    ``blob_digest_mismatch``: it changed since it was hashed."""

    def __init__(self, path: Path, info: BlobInfo) -> None:
        self.path = os.fspath(path)
        self.info = info

    def headers(self) -> Dict[str, str]:
        return {"content-length": str(self.info.bytes)}

    def chunks(self) -> Iterator[bytes]:
        with open(self.path, "rb") as file:
            left = self.info.bytes
            while left > 0:
                chunk = file.read(min(BLOB_CHUNK_BYTES, left))
                if not chunk:
                    raise self._changed()
                left -= len(chunk)
                yield chunk

    async def achunks(self) -> AsyncIterator[bytes]:
        file = await asyncio.to_thread(open, self.path, "rb")
        try:
            left = self.info.bytes
            while left > 0:
                chunk = await asyncio.to_thread(file.read, min(BLOB_CHUNK_BYTES, left))
                if not chunk:
                    raise self._changed()
                left -= len(chunk)
                yield chunk
        finally:
            await asyncio.to_thread(file.close)

    def _changed(self) -> CohortError:
        return CohortError(
            "blob_digest_mismatch", f"{self.path} is shorter than its {self.info.bytes} bytes hashed: it changed"
        )


class StreamBody(BodySource):
    """A binary file object, read in chunks once (it cannot be read
    again, so the upload is never retried), hashed as it is sent."""

    def __init__(self, fileobj: Any) -> None:
        if not callable(getattr(fileobj, "read", None)) or isinstance(fileobj, io.TextIOBase):
            raise TypeError(f"put_blob_stream takes a binary file object, not {type(fileobj).__name__}")
        self._file = fileobj
        self._hash = hashlib.sha256()
        self._bytes = 0
        self._used = False

    def sent(self) -> BlobInfo:
        """The digest and size of what was read and sent."""
        return BlobInfo(self._hash.hexdigest(), self._bytes)

    def _take(self, chunk: Any) -> bytes:
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise TypeError(f"a blob's file object read {type(chunk).__name__}, not bytes: open it in binary mode")
        data = bytes(chunk)
        self._hash.update(data)
        self._bytes += len(data)
        return data

    def _once(self) -> None:
        if self._used:
            raise RuntimeError("a stream's body is sent once")
        self._used = True

    def chunks(self) -> Iterator[bytes]:
        self._once()
        while True:
            chunk = self._file.read(BLOB_CHUNK_BYTES)
            if chunk is None:  # a non-blocking file with nothing yet
                time.sleep(0.01)
                continue
            if not chunk:
                return
            yield self._take(chunk)

    async def achunks(self) -> AsyncIterator[bytes]:
        self._once()
        read = self._file.read
        coroutine = inspect.iscoroutinefunction(read)
        while True:
            chunk = await read(BLOB_CHUNK_BYTES) if coroutine else await asyncio.to_thread(read, BLOB_CHUNK_BYTES)
            if chunk is None:
                await asyncio.sleep(0.01)
                continue
            if not chunk:
                return
            yield self._take(chunk)


def valid_digest(digest: Optional[str]) -> Optional[str]:
    """``digest`` in lowercase if it is one (64 hex digits, either case);
    ``ValueError`` otherwise (``None`` stays ``None``)."""
    if digest is None:
        return None
    if not (isinstance(digest, str) and _ANY_CASE_DIGEST.fullmatch(digest)):
        raise ValueError(f"a sha256 is 64 hex digits, not {digest!r}")
    return digest.lower()
