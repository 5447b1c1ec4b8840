"""Write a cohort job as one Python function.

A cohort job is a WebAssembly component that turns input bytes into output
bytes. This package hides the component-model glue: mark one function with
``@job``, build the project with ``cohort build``, and the resulting ``.wasm``
file is a job module that any cohort node can run.

.. code-block:: python

    # app.py
    from cohort_job import JobError, info, job, progress

    @job(input="json", output="json")
    def run(request):
        numbers = request.get("numbers") if isinstance(request, dict) else None
        if not numbers:
            raise JobError("empty", 'give me {"numbers": [...]}, at least one')
        info(f"summing {len(numbers)} numbers")
        total = sum(numbers)
        progress(1.0, "done")
        return {"sum": total}

with this ``pyproject.toml`` beside it:

.. code-block:: toml

    [project]
    name = "sum"
    version = "0.1.0"

    [tool.cohort]
    module = "app"      # the module that holds the @job function

and build and run it:

.. code-block:: sh

    cohort build .                      # writes dist/sum.wasm, prints its path
    echo '{"numbers": [1, 2, 3]}' | cohort exec dist/sum.wasm --input -
    # {"sum":6}

``cohort build`` runs componentize-py (the version cohort pins, installed on
first use), which bundles CPython 3.14, the job module, everything it
imports and this package into one component of the ``cohort:job`` world
(some 19 MB; a node compiles it once and caches the result). Pure-Python
packages can be copied into the project directory; ones with C extensions
generally cannot be used.

Inputs and outputs
==================

``@job`` alone passes the input as ``bytes`` and expects ``bytes`` (or a
``bytearray`` / ``memoryview``) back. ``@job(input=..., output=...)`` picks
another form for either side:

``"bytes"``
    the raw bytes (the default);
``"text"``
    a ``str``, the input decoded as UTF-8 and the output encoded as UTF-8;
``"json"``
    any JSON value: the input is parsed as UTF-8 JSON, the output written as
    compact JSON (no spaces, non-ASCII characters kept as they are).

An input that is not valid UTF-8 or JSON becomes the job error ``bad_input``
without calling the function; an output of the wrong type (say, a ``str``
from a ``bytes`` job) or one that JSON cannot encode becomes ``bad_output``.
The returned value is the job's only output: what the job prints goes to
its log.

Errors
======

``raise JobError(code, message)`` fails the job with that code and message.
Any other exception does not crash the module: it fails the job with the
code ``uncaught_exception`` and a message made of the exception
(``ValueError: bad value``) followed by the end of its traceback.

Logs, progress, checkpoints
===========================

``log(level, message)`` (and ``trace``, ``debug``, ``info``, ``warn``,
``error``) append a line to the job's log; so does anything printed with
``print()`` or written to ``sys.stderr``. ``progress(fraction, message)``
reports how far the job has come. ``checkpoint(state)`` saves bytes that a
retry of the same job, possibly on another machine, reads back with
``resume_state()``: a long job that checkpoints does not start over when its
worker dies. ``checkpoint_json`` and ``resume_json`` do the same for JSON
values.

Blobs
=====

A job can also be given blobs, data of any size kept by the cluster under
their sha256 digest, and write blobs of its own (its outputs). They are
streams, read and written a piece at a time, so a job with little memory
can process data of any size: :mod:`cohort_job.blobs` lists them
(``blobs.inputs()``), opens one as a binary file object
(``blobs.open("input")``; wrap it in ``io.TextIOWrapper(...,
encoding="utf-8")`` for text) and creates outputs
(``blobs.create("counts.tsv")``). A failure is a ``BlobError``, a
``JobError`` whose code (``blob_open_failed``, ``blob_create_failed``,
``io_error``) fails the job if left uncaught. Outputs left open
are flushed and closed when the job function returns.

Execution model
===============

A job may be run more than once (cohort retries attempts whose worker died
or whose deadline passed), so it should be idempotent: the same input gives
the same output. It runs with no filesystem, no sockets and no environment
variables, under memory and time limits set by the node (``cohort exec``
defaults to 256 MiB and 60 s). It may call the HTTP(S) endpoints the
operator granted its deployment name, with :mod:`cohort_job.http`, and
read and write blobs with :mod:`cohort_job.blobs`.

The module's top-level code runs once, at build time, and what it leaves in
memory is saved in the component: tables computed at import time cost
nothing when the job runs. Three consequences:

* import every module you need (your own ones too) at the top of the file:
  only what the build imported is in the component, so an ``import`` that
  first runs inside the job fails with ``ModuleNotFoundError``;
* the host functions (``log``, ``progress``, ``checkpoint``, ...) work only
  while the job runs: calling one at import time fails the build;
* an exception at import time fails the build too, with its traceback; so
  does a module with no ``@job`` function (componentize-py then reports
  ``module 'app' has no attribute 'WitWorld'``) or with two of them.

Testing
=======

The package also imports in plain CPython, outside a build: ``@job`` returns
the function unchanged, so tests can call it directly, and
``call(run, b"...")`` returns the bytes the built module would return (or
raises its :class:`JobError`). There, logs and progress go to stderr,
checkpoints stay in memory, and blobs are ``cohort_job.blobs.local``'s: a
test adds inputs with ``blobs.local.add_input("input", data)`` and reads
what the job wrote in ``blobs.local.outputs``.
"""

from __future__ import annotations

import json
import linecache  # noqa: F401  (imported at build time for traceback formatting)
import sys
import traceback
from typing import Any, Callable, Dict, Optional, TypeVar, Union, overload

try:  # Present when componentize-py builds the job (bindings of cohort:job).
    from componentize_py_types import Err as _Err
    from wit_world.imports import host as _wit_host
    from wit_world.imports import types as _types
except ImportError:  # Plain CPython: unit tests of a job, run without cohort.
    _Err = None  # type: ignore[assignment,misc]
    _wit_host = None
    _types = None


__all__ = [
    "JobError",
    "blobs",
    "call",
    "checkpoint",
    "checkpoint_json",
    "debug",
    "error",
    "http",
    "info",
    "job",
    "log",
    "progress",
    "resume_json",
    "resume_state",
    "secret",
    "trace",
    "warn",
]

__version__ = "0.2.0"

#: The input and output forms ``@job`` accepts.
FORMS = ("bytes", "text", "json")

#: The log levels, lowest first.
LEVELS = ("trace", "debug", "info", "warn", "error")

#: How much of an uncaught exception's traceback goes into the job error.
TRACEBACK_LIMIT = 2000


class JobError(Exception):
    """Why a job failed: a short machine-readable ``code`` and a human
    ``message``. Raise it from the job function to fail the job."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = str(code)
        self.message = str(message)

    @classmethod
    def bad_input(cls, message: str) -> "JobError":
        """The input could not be understood (code ``bad_input``)."""
        return cls("bad_input", message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"JobError({self.code!r}, {self.message!r})"


class _LocalHost:
    """The host functions outside a built job (plain CPython, say in a unit
    test of the job function): logs and progress go to stderr, the
    checkpoint stays in memory (``resume_state()`` starts as ``None``), and
    ``secret(name)`` reads ``secrets``, which a test may fill."""

    def __init__(self) -> None:
        self.state: Optional[bytes] = None
        self.secrets: Dict[str, str] = {}

    def log(self, level: int, message: str) -> None:
        print(f"{LEVELS[level].upper()} {message}", file=sys.stderr)

    def progress(self, fraction: float, message: str) -> None:
        print(f"[progress] {min(max(fraction, 0.0), 1.0):.0%} {message}", file=sys.stderr)

    def checkpoint(self, state: bytes) -> None:
        self.state = state

    def resume_state(self) -> Optional[bytes]:
        return self.state

    def secret(self, name: str) -> Optional[str]:
        return self.secrets.get(name)


_local_host = _LocalHost() if _wit_host is None else None


# -- logs ---------------------------------------------------------------------

_LEVEL_NAMES = {name: i for i, name in enumerate(LEVELS)}
_LEVEL_NAMES["warning"] = _LEVEL_NAMES["warn"]


def log(level: str, message: object) -> None:
    """Appends one line to the job's log at ``level``: one of ``"trace"``,
    ``"debug"``, ``"info"``, ``"warn"`` (or ``"warning"``) and ``"error"``."""
    try:
        index = _LEVEL_NAMES[str(level).lower()]
    except KeyError:
        raise ValueError(
            f"unknown log level {level!r}; expected one of {', '.join(LEVELS)}"
        ) from None
    if _wit_host is None:
        _local_host.log(index, str(message))
    else:
        _wit_host.log(_types.Level(index), str(message))


def trace(message: object) -> None:
    """Logs a line at level ``trace``."""
    log("trace", message)


def debug(message: object) -> None:
    """Logs a line at level ``debug``."""
    log("debug", message)


def info(message: object) -> None:
    """Logs a line at level ``info``."""
    log("info", message)


def warn(message: object) -> None:
    """Logs a line at level ``warn``."""
    log("warn", message)


def error(message: object) -> None:
    """Logs a line at level ``error``."""
    log("error", message)


# -- progress and checkpoints ---------------------------------------------------


def progress(fraction: float, message: str = "") -> None:
    """Reports progress: ``fraction`` in ``[0, 1]`` (clamped by the host) and a
    short message. Only the latest report is kept."""
    (_wit_host or _local_host).progress(float(fraction), str(message))


def checkpoint(state: Union[bytes, bytearray, memoryview]) -> None:
    """Saves ``state`` as this job's checkpoint, replacing any earlier one.

    A later attempt of the same job reads it back with :func:`resume_state`.
    Checkpoints are bounded by the node (16 MiB by default); a larger one
    stops the job with the error code ``checkpoint_too_large``.
    """
    if not isinstance(state, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"checkpoint() takes bytes, not {type(state).__name__} "
            "(checkpoint_json() takes any JSON value)"
        )
    (_wit_host or _local_host).checkpoint(bytes(state))


def resume_state() -> Optional[bytes]:
    """The checkpoint saved by an earlier attempt of this job, or ``None``."""
    state = (_wit_host or _local_host).resume_state()
    return None if state is None else bytes(state)


def secret(name: str) -> Optional[str]:
    """The value of secret ``name`` if the operator let this job's deployment
    name read it (``cohort grant NAME --secret SECRET``), else ``None`` (the
    job's log then says why). Its value is masked wherever the job's log,
    progress and failure show it. A credential that only goes in a request
    header is better set by the grant (``--header 'Authorization: Bearer
    {secret:NAME}'``): the job never holds that one."""
    return (_wit_host or _local_host).secret(str(name))


def checkpoint_json(state: Any) -> None:
    """Saves ``state``, as compact JSON, as this job's checkpoint."""
    try:
        encoded = _dump_json(state)
    except (TypeError, ValueError) as e:
        raise JobError("bad_checkpoint", f"cannot encode checkpoint: {e}") from None
    checkpoint(encoded)


def resume_json() -> Any:
    """The JSON checkpoint saved by an earlier attempt of this job, or ``None``.

    A checkpoint that does not parse is the job error ``bad_checkpoint``
    rather than ``None``: silently starting over could hide a bug in the job.
    """
    state = resume_state()
    if state is None:
        return None
    try:
        return _load_json(state)
    except ValueError as e:
        raise JobError("bad_checkpoint", f"cannot decode checkpoint: {e}") from None


# -- JSON ---------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _load_json(data: bytes) -> Any:
    # UnicodeDecodeError and json.JSONDecodeError are both ValueErrors.
    return json.loads(bytes(data).decode("utf-8"), parse_constant=_reject_constant)


def _dump_json(value: Any) -> bytes:
    return json.dumps(
        value, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


# -- the job ------------------------------------------------------------------


def _decode_input(form: str, data: bytes) -> Any:
    if form == "bytes":
        return data
    if form == "text":
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JobError.bad_input(f"input is not UTF-8: {e}") from None
    try:
        return _load_json(data)
    except UnicodeDecodeError as e:
        raise JobError.bad_input(f"input is not UTF-8: {e}") from None
    except (ValueError, RecursionError) as e:
        raise JobError.bad_input(f"input is not valid JSON: {e}") from None


def _encode_output(form: str, value: Any) -> bytes:
    if form == "bytes":
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        hint = ' (declare @job(output="text") to return a str)' if isinstance(value, str) else ""
        raise JobError(
            "bad_output",
            f"the job returned {type(value).__name__}, expected bytes{hint}",
        )
    if form == "text":
        if not isinstance(value, str):
            raise JobError(
                "bad_output", f"the job returned {type(value).__name__}, expected str"
            )
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise JobError("bad_output", f"output cannot be UTF-8-encoded: {e}") from None
    try:
        return _dump_json(value)
    except (TypeError, ValueError, RecursionError) as e:
        raise JobError("bad_output", f"output cannot be JSON-encoded: {e}") from None


def _describe(e: BaseException) -> str:
    """``ValueError: x`` and the end of the traceback, minus the SDK's frame."""
    head = "".join(traceback.format_exception_only(e)).strip()
    try:
        frames = e.__traceback__.tb_next if e.__traceback__ is not None else None
        tb = "".join(traceback.format_exception(type(e), e, frames)).rstrip()
    except Exception:  # A broken __str__ or the like: the head will do.
        return head
    if len(tb) > TRACEBACK_LIMIT:
        tb = "...\n" + tb[-TRACEBACK_LIMIT:]
    return f"{head}\n\n{tb}"


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def call(fn: Callable[[Any], Any], data: bytes) -> bytes:
    """Runs the ``@job`` function ``fn`` on the input ``data`` as the built
    module does: decodes the input, calls ``fn``, encodes its result. Returns
    the output bytes or raises :class:`JobError` (``bad_input``,
    ``uncaught_exception``, ...), so a job's unit tests can check the bytes
    it would return, in plain CPython."""
    forms = getattr(fn, "__cohort_job__", None)
    if forms is None:
        raise TypeError(f"{getattr(fn, '__qualname__', fn)!r} is not a @job function")
    return _call(fn, data, forms["input"], forms["output"])


def _call(fn: Callable[[Any], Any], data: bytes, input: str, output: str) -> bytes:
    try:
        value = _decode_input(input, bytes(data))
        encoded = _encode_output(output, _invoke(fn, value))
        # Outputs the job left open get their last bytes to the node before
        # it is told the job succeeded; a failure there fails the job.
        _invoke(blobs._close_outputs, True)
        return encoded
    except BaseException:
        blobs._close_outputs(False)  # A failed attempt's outputs are discarded.
        raise
    finally:
        _flush()


def _invoke(fn: Callable[[Any], Any], value: Any) -> Any:
    try:
        return fn(value)
    except JobError:
        raise
    except BaseException as e:  # noqa: BLE001 - even SystemExit must not trap
        raise JobError("uncaught_exception", _describe(e)) from None


def _run(fn: Callable[[Any], Any], data: bytes, input: str, output: str) -> bytes:
    """The body of ``WitWorld.run``: a job error becomes the WIT ``Err``."""
    try:
        return _call(fn, data, input, output)
    except JobError as e:
        raise _Err(_types.JobError(code=e.code, message=e.message)) from None
    except BaseException as e:  # A JobError subclass whose code breaks, say.
        raise _Err(_types.JobError(code="uncaught_exception", message=_describe(e))) from None


F = TypeVar("F", bound=Callable[[Any], Any])


@overload
def job(fn: F) -> F: ...


@overload
def job(*, input: str = "bytes", output: str = "bytes") -> Callable[[F], F]: ...


def job(fn: Optional[F] = None, *, input: str = "bytes", output: str = "bytes") -> Any:
    """Marks ``fn`` as this module's job: ``@job`` (bytes in, bytes out) or
    ``@job(input=FORM, output=FORM)`` with FORM ``"bytes"``, ``"text"`` or
    ``"json"``.

    Installs the ``WitWorld`` class that componentize-py exports into the
    function's module, and returns ``fn`` unchanged (so it can still be
    called directly, e.g. from tests). A module has at most one job.
    """
    for side, form in (("input", input), ("output", output)):
        if form not in FORMS:
            expected = ", ".join(map(repr, FORMS))
            raise ValueError(f"@job({side}={form!r}): expected one of {expected}")

    def install(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"@job decorates a function, not {type(fn).__name__}")
        module = sys.modules.get(fn.__module__)
        if module is None:
            raise RuntimeError(f"@job: module {fn.__module__!r} is not imported")
        existing = getattr(module, "WitWorld", None)
        if existing is not None:
            other = getattr(existing, "_cohort_job", None)
            what = f"@job {other.__qualname__}" if other is not None else "a WitWorld class"
            raise RuntimeError(
                f"@job {fn.__qualname__}: module {module.__name__!r} already has {what}; "
                "a module holds one job"
            )

        class WitWorld:
            """The ``cohort:job`` world's export, as componentize-py expects it."""

            _cohort_job = fn

            def run(self, input_bytes: bytes) -> bytes:
                return _run(fn, input_bytes, input, output)

        WitWorld.__module__ = module.__name__
        module.WitWorld = WitWorld  # type: ignore[attr-defined]
        fn.__cohort_job__ = {"input": input, "output": output}  # type: ignore[attr-defined]
        return fn

    if fn is not None:
        return install(fn)
    return install


# Imported here, at build time with the rest of the SDK, so that
# `cohort_job.http` and `cohort_job.blobs` work in a job whether it imports
# the submodule or only the package.
from . import blobs, http  # noqa: E402
