"""Large inputs and outputs as file objects: blobs, read and written a piece
at a time.

A job can be given blobs (data of any size, kept by the cluster under their
sha256 digest) and can write blobs of its own. Their bytes never pass
through the job's memory all at once: :func:`open` returns a binary file
object that reads an input blob as a stream, :func:`create` one that
writes an output blob.

.. code-block:: python

    import io
    from cohort_job import blobs, job

    @job(output="json")
    def run(_):
        lines = 0
        with io.TextIOWrapper(blobs.open("input"), encoding="utf-8") as text:
            for line in text:
                lines += 1
        with blobs.create("summary.txt") as out:
            out.write(f"{lines} lines\\n".encode())
        return {"lines": lines}

The blobs a job may read are listed by :func:`inputs`: ``input`` for the
job's ``input_blob``, and ``PARENT/OUTPUT`` for the output ``OUTPUT`` of
the DAG parent ``PARENT`` when the job asked for its parents' outputs.
:func:`open` reads one from its start or from an ``offset`` (a job resuming
from a checkpoint can start where it stopped: ``tell()`` on the file object
is the position in the blob). Text is read by wrapping the file object:
``io.TextIOWrapper(blobs.open("input"), encoding="utf-8")``.

:func:`create` starts an output blob (names: 1 to 128 bytes of ASCII
letters, digits, ``.``, ``_`` and ``-``; creating a name again starts that
output over). The outputs of an attempt that succeeds are kept as blobs and
listed with the job's result by name, digest and size; those of a failed
attempt are discarded. Close an output (``with`` does) once written: an
output still open when the job function returns is flushed and closed
then, but bytes a wrapper around it (an ``io.TextIOWrapper``) still holds
are not.

Errors
======

A failure is a :class:`BlobError`, a :class:`~cohort_job.JobError`, so left
uncaught it fails the job with its code (the codes of the Rust and
JavaScript SDKs):

``blob_open_failed``
    the node refused to open the input: no input of that name, or an
    offset past its end. The message is the node's reason.
``blob_create_failed``
    the node refused to create the output: a bad name, more outputs than a
    job may write (64), or a node that keeps no blobs.
``io_error``
    a read or write failed: reading an input broke off (its file on the
    node could not be read); a write went past the job's output ceiling
    (the node then fails the job with ``output_too_large`` whatever the job
    does) or hit a full disk (``blob_store_full``, likewise); or the output
    was created again since.

Bounds
======

Each read asks the node for at most :data:`READ_BYTES_MAX` bytes, and each
write hands it at most :data:`WRITE_BYTES_MAX` (``wasi:io``'s limit for one
``blocking-write-and-flush``). The file objects buffer
:data:`BUFFER_BYTES` each, so a job holds only what it keeps of the data.

Outside a built job
===================

In plain CPython (a unit test of the job function) there is no node: the
blobs are :data:`local`'s, a :class:`LocalBlobs` that a test fills with
``local.add_input(name, data)`` and whose ``outputs`` hold what the job
wrote. It refuses what a node refuses (unknown inputs, offsets past the
end, bad output names, too many outputs).
"""

from __future__ import annotations

import hashlib
import io
import re
import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from . import JobError

try:  # Present when componentize-py builds the job (bindings of cohort:job/blobs).
    from componentize_py_types import Err as _Err
    from wit_world.imports import blobs as _wit_blobs
    from wit_world.imports.streams import StreamError_Closed as _Closed
except ImportError:  # Plain CPython: the in-memory `local` blobs stand in.
    _wit_blobs = None

    class _Err(Exception):  # type: ignore[no-redef]
        """The local stand-in of componentize-py's ``Err``: a failed
        ``result``, its payload in ``value``."""

        def __init__(self, value: Any) -> None:
            super().__init__(value)
            self.value = value

    class _Closed:  # type: ignore[no-redef]
        """The local stand-in of ``StreamError_Closed``: the stream ended."""


__all__ = [
    "BUFFER_BYTES",
    "Blob",
    "BlobError",
    "LocalBlobs",
    "READ_BYTES_MAX",
    "WRITE_BYTES_MAX",
    "create",
    "inputs",
    "local",
    "open",
]

#: The most bytes one read asks the node for (the node returns at most
#: 256 KiB anyway).
READ_BYTES_MAX = 64 * 1024

#: The most bytes one write hands the node: ``wasi:io`` lets a
#: ``blocking-write-and-flush`` take at most 4096.
WRITE_BYTES_MAX = 4096

#: The buffer of each file object :func:`open` and :func:`create` return.
BUFFER_BYTES = 64 * 1024

#: Output names, as the node accepts them.
_OUTPUT_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")

#: Most outputs one job writes, as the node allows.
_OUTPUTS_MAX = 64


class BlobError(JobError):
    """Why a blob could not be opened, created, read or written. ``code`` is
    ``blob_open_failed``, ``blob_create_failed`` or ``io_error`` (see the
    module's documentation); ``name`` is the blob's. A subclass of
    :class:`~cohort_job.JobError`: uncaught, it fails the job with its code
    and message."""

    def __init__(self, code: str, message: str, *, name: str) -> None:
        super().__init__(code, message)
        self.name = name

    def __repr__(self) -> str:
        return f"BlobError({self.code!r}, {self.message!r})"


@dataclass(frozen=True)
class Blob:
    """A blob this job may read."""

    #: Its name for this job: ``input`` for the job's ``input_blob``,
    #: ``PARENT/OUTPUT`` for the output ``OUTPUT`` of DAG parent ``PARENT``.
    name: str
    #: Its sha256: 64 lowercase hex digits, as the HTTP API writes it.
    digest: str
    #: Its size in bytes.
    size: int


def inputs() -> List[Blob]:
    """The blobs this job may read, in a stable order (``input`` first)."""
    return [Blob(blob.name, blob.digest, int(blob.size)) for blob in _host.inputs()]


def open(name: str, offset: int = 0) -> io.BufferedReader:
    """Opens the input blob ``name`` for reading from byte ``offset`` (0: its
    start), as a binary file object that reads the blob a piece at a time.
    ``read()`` returns ``b""`` at the blob's end; ``tell()`` is the position
    in the blob. Raises :class:`BlobError` ``blob_open_failed`` if the node
    refuses (no input of that name, an offset past its end)."""
    if not isinstance(name, str):
        raise TypeError(f"a blob name is a str, not {type(name).__name__}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"offset is a byte position (an int >= 0), not {offset!r}")
    try:
        stream = _host.open(name, offset)
    except _Err as e:
        raise BlobError(
            "blob_open_failed", f"cannot open the input blob {name!r}: {e.value}", name=name
        ) from None
    return io.BufferedReader(_BlobReader(stream, name, offset), BUFFER_BYTES)


def create(name: str) -> io.BufferedWriter:
    """Creates the output blob ``name`` (1 to 128 bytes of ASCII letters,
    digits, ``.``, ``_`` and ``-``, not starting with ``.``), starting it
    over if it was created before (an earlier writer of it is not flushed
    when the job ends, and fails if written again), and returns a binary file object its bytes are written to.
    Raises :class:`BlobError` ``blob_create_failed`` if the node refuses (a bad
    name, too many outputs)."""
    if not isinstance(name, str):
        raise TypeError(f"a blob name is a str, not {type(name).__name__}")
    # The output starts over: earlier writers of the name are not flushed
    # when the job ends (their buffers belong to the earlier start).
    for earlier in list(_open_outputs):
        if earlier.raw.name == name:
            earlier.raw.supersede()
            _open_outputs.discard(earlier)
    try:
        stream = _host.create(name)
    except _Err as e:
        raise BlobError(
            "blob_create_failed", f"cannot create the output blob {name!r}: {e.value}", name=name
        ) from None
    writer = io.BufferedWriter(_BlobWriter(stream, name), BUFFER_BYTES)
    _open_outputs.add(writer)
    return writer


# -- the streams --------------------------------------------------------------


def _drop(resource: Any) -> None:
    """Releases a ``wasi:io`` resource now rather than when it is collected."""
    resource.__exit__(None, None, None)


def _stream_failure(name: str, what: str, error: Any) -> BlobError:
    """The error for a ``stream-error`` other than ``closed``: its
    ``last-operation-failed`` payload is a ``wasi:io/error`` resource."""
    resource = getattr(error, "value", None)
    try:
        why = resource.to_debug_string() if resource is not None else repr(error)
    finally:
        if resource is not None:
            _drop(resource)
    return BlobError("io_error", f"{what} blob {name!r} failed: {why}", name=name)


def _check_open(file: io.RawIOBase) -> None:
    if file.closed:
        raise ValueError("I/O operation on a closed blob")


class _BlobReader(io.RawIOBase):
    """An input blob's ``input-stream`` as a raw binary file: ``readinto``
    is one ``blocking-read``, and the stream's ``closed`` is the end."""

    def __init__(self, stream: Any, name: str, offset: int) -> None:
        super().__init__()
        self._stream = stream
        self._name = name
        self._position = offset
        self._ended = False

    @property
    def name(self) -> str:
        """The blob's name."""
        return self._name

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        """The position in the blob: the offset it was opened at plus the
        bytes read since."""
        _check_open(self)
        return self._position

    def readinto(self, buffer: Any) -> int:
        _check_open(self)
        view = memoryview(buffer).cast("B")
        if self._ended or not len(view):
            return 0
        while True:
            try:
                data = self._stream.blocking_read(min(len(view), READ_BYTES_MAX))
            except _Err as e:
                if isinstance(e.value, _Closed):
                    self._ended = True
                    return 0
                raise _stream_failure(self._name, "reading the input", e.value) from None
            # A blocking read returns at least one byte or ends the stream;
            # an empty answer is asked again rather than taken for the end.
            if data:
                break
        n = len(data)
        view[:n] = data
        self._position += n
        return n

    def close(self) -> None:
        if not self.closed:
            stream, self._stream = self._stream, None
            try:
                _drop(stream)
            finally:
                super().close()


class _BlobWriter(io.RawIOBase):
    """An output blob's ``output-stream`` as a raw binary file: ``write``
    hands the node every byte, in ``blocking-write-and-flush`` calls of at
    most :data:`WRITE_BYTES_MAX` bytes."""

    def __init__(self, stream: Any, name: str) -> None:
        super().__init__()
        self._stream = stream
        self._name = name
        self._superseded = False

    def supersede(self) -> None:
        """The output was created again: the stream is given back, later
        writes fail, and the job's end does not flush this writer (what it
        buffered belongs to the output's earlier start)."""
        self._superseded = True
        stream, self._stream = self._stream, None
        if stream is not None:
            _drop(stream)

    @property
    def name(self) -> str:
        """The blob's name."""
        return self._name

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        _check_open(self)
        view = memoryview(data).cast("B")
        if self._superseded:
            raise BlobError(
                "io_error",
                f"the output blob {self._name!r} is closed: it was created again",
                name=self._name,
            )
        for start in range(0, len(view), WRITE_BYTES_MAX):
            try:
                self._stream.blocking_write_and_flush(bytes(view[start : start + WRITE_BYTES_MAX]))
            except _Err as e:
                if isinstance(e.value, _Closed):
                    raise BlobError(
                        "io_error",
                        f"the output blob {self._name!r} is closed: it was created again, "
                        "or an earlier write to an output failed",
                        name=self._name,
                    ) from None
                raise _stream_failure(self._name, "writing the output", e.value) from None
        return len(view)

    def close(self) -> None:
        if not self.closed:
            stream, self._stream = self._stream, None
            try:
                if stream is not None:
                    _drop(stream)
            finally:
                super().close()


#: The file objects :func:`create` returned that may still be open, closed
#: by :func:`_close_outputs` when the job function returns.
_open_outputs: "weakref.WeakSet[io.BufferedWriter]" = weakref.WeakSet()


def _close_outputs(check: bool) -> None:
    """Flushes and closes every output the job left open. With ``check``
    (the job succeeded), the first failure is raised: the bytes did not all
    reach the node. Without (the job failed, its outputs are discarded),
    failures are ignored."""
    failure: Optional[BaseException] = None
    for writer in list(_open_outputs):
        try:
            writer.close()
        except BaseException as e:  # noqa: BLE001 - every output is closed
            if failure is None:
                failure = e
    _open_outputs.clear()
    if check and failure is not None:
        raise failure


# -- outside a built job ------------------------------------------------------


class LocalBlobs:
    """The blobs of a job run in plain CPython: inputs a test adds, outputs
    kept in memory. It answers as a node does (the same refusals), so a job's blob code can be
    tested without one."""

    def __init__(self) -> None:
        self._inputs: Dict[str, bytes] = {}
        self._outputs: Dict[str, bytearray] = {}

    @property
    def outputs(self) -> Dict[str, bytes]:
        """What the job wrote, by output name: the bytes that reached the
        "node" so far, whether or not the output was closed yet."""
        return {name: bytes(data) for name, data in self._outputs.items()}

    def add_input(self, name: str, data: Union[bytes, bytearray, memoryview]) -> Blob:
        """Gives the job the input blob ``name`` (``input`` for its
        ``input_blob``) holding ``data``, replacing one of that name; returns
        it as :func:`inputs` lists it."""
        self._inputs[name] = bytes(data)
        return self._blob(name)

    def clear(self) -> None:
        """Forgets every input and output."""
        self._inputs.clear()
        self._outputs.clear()

    def _blob(self, name: str) -> Blob:
        data = self._inputs[name]
        return Blob(name, hashlib.sha256(data).hexdigest(), len(data))

    # What the node answers, as the generated bindings
    # (`wit_world.imports.blobs`) hand it over.

    def inputs(self) -> List[Blob]:
        return [self._blob(name) for name in sorted(self._inputs, key=lambda name: (name != "input", name))]

    def open(self, name: str, offset: int) -> "_LocalInputStream":
        data = self._inputs.get(name)
        if data is None:
            have = ", ".join(sorted(self._inputs)) or "none"
            raise _Err(f"this job has no input blob named {name!r} (it has: {have})")
        if offset > len(data):
            raise _Err(f"offset {offset} is past the end of input {name!r} ({len(data)} bytes)")
        return _LocalInputStream(data, offset)

    def create(self, name: str) -> "_LocalOutputStream":
        if not _OUTPUT_NAME.fullmatch(name):
            raise _Err(
                "output names are 1 to 128 bytes of ASCII letters, digits, '.', '_' and '-'; "
                f"{name!r} is not"
            )
        if name not in self._outputs and len(self._outputs) >= _OUTPUTS_MAX:
            raise _Err(f"a job may write at most {_OUTPUTS_MAX} outputs")
        # Created again, an output starts over; a stream of the old one is
        # stale (its buffer is no longer the output's).
        self._outputs[name] = bytearray()
        return _LocalOutputStream(self._outputs, name)


class _LocalInputStream:
    """An in-memory ``input-stream``."""

    def __init__(self, data: bytes, offset: int) -> None:
        self._data = memoryview(data)
        self._at = offset

    def blocking_read(self, length: int) -> bytes:
        if self._at >= len(self._data):
            raise _Err(_Closed())
        chunk = bytes(self._data[self._at : self._at + length])
        self._at += len(chunk)
        return chunk

    def __exit__(self, *_: Any) -> None:
        self._data = memoryview(b"")


class _LocalOutputStream:
    """An in-memory ``output-stream`` into a :class:`LocalBlobs`' outputs."""

    def __init__(self, outputs: Dict[str, bytearray], name: str) -> None:
        self._outputs = outputs
        self._name = name
        self._data = outputs[name]

    def blocking_write_and_flush(self, contents: bytes) -> None:
        if len(contents) > WRITE_BYTES_MAX:
            # What wasi:io does: a trap, not an error the job could catch.
            raise RuntimeError(
                f"blocking-write-and-flush of {len(contents)} bytes: wasi:io takes at most {WRITE_BYTES_MAX}"
            )
        if self._outputs.get(self._name) is not self._data:
            raise _Err(_Closed())
        self._data += contents

    def __exit__(self, *_: Any) -> None:
        pass


#: The blobs of a job run in plain CPython (see :class:`LocalBlobs`);
#: ``None`` in a built job, whose blobs are the node's.
local: Optional[LocalBlobs] = LocalBlobs() if _wit_blobs is None else None

#: What answers `inputs`, `open` and `create`: the node (the generated
#: bindings) in a built job, :data:`local` in plain CPython.
_host: Any = _wit_blobs if _wit_blobs is not None else local
