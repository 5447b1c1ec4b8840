"""What `Client` and `AsyncClient` share: everything but the I/O and the waiting.

The two clients differ only in how they send requests (threads and
``httpx.Client``, or tasks and ``httpx.AsyncClient``) and how a handle is
woken. Keys, backoff, failover, batching decisions, the waiter's book of
watched jobs and the parsing of answers are here, once; the request flows
built on them (retries, uploads, batches, cancels) are in `_plans`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import re
import secrets
import ssl
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

import httpx

from ._codes import ERROR_CODES
from .errors import CohortError, JobFailed

if TYPE_CHECKING:
    from ._blobs import BlobInfo

__version__ = "0.1.0"

#: A module: its digest (64 hex digits), a deployment's name, a path to a
#: ``.wasm`` file, or its bytes.
Module = Union[str, "os.PathLike[str]", bytes]

# The protocol's numbers (clients/PROTOCOL.md).
BATCH_JOBS_MAX = 1000
BATCH_BYTES_MAX = 8 << 20
BATCHES_IN_FLIGHT = 4
WAIT_IDS_MAX = 10_000
WAIT_SLOTS = 4
WAIT_LONG_MS = 25_000
WAIT_LAST_SLOT_MS = 1_000
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 5.0
SKIP_FIRST_S = 2.0
SKIP_MAX_S = 30.0
KEY_PREFIX = "py-"
# The server's: a batch holds at most 10,000 jobs.
SERVER_BATCH_JOBS_MAX = 10_000
# A connection that cannot be made within this is a node that does not answer.
CONNECT_TIMEOUT_S = 5.0

_DIGEST = re.compile(r"[0-9a-f]{64}")
# A deployment's name: 1 to 63 of a-z 0-9 . _ -, starting with a letter or
# digit (never a digest: a digest has 64).
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
# A W3C trace context header (version 00): a trace id of 32 lowercase hex
# digits and a parent span id of 16, neither all zeros, and 2 of flags.
_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_ID_SEGMENT = re.compile(r"/\d+(?=/|$)")
_DIGEST_SEGMENT = re.compile(r"/[0-9a-f]{64}(?=/|$)")


def check_traceparent(traceparent: str) -> str:
    """``traceparent`` if it is a W3C trace context header of version 00
    (``00-<32 hex trace id>-<16 hex span id>-<2 hex flags>``, lowercase,
    neither id all zeros); else raise ``ValueError`` saying what one is."""
    if isinstance(traceparent, str) and _TRACEPARENT.fullmatch(traceparent):
        return traceparent
    raise ValueError(
        f"{traceparent!r} is not a W3C traceparent: one is 00-<trace id: 32 lowercase hex digits, "
        "not all 0>-<span id: 16 lowercase hex digits, not all 0>-<flags: 2 hex digits>"
    )


def new_idempotency_key() -> str:
    """A key for a submission: the client's prefix and 128 random bits."""
    return KEY_PREFIX + secrets.token_hex(16)


# ---------------------------------------------------------------------------
# Settings


@dataclass(frozen=True)
class Settings:
    """A client's options, checked once."""

    urls: Tuple[str, ...]
    token: Optional[str]
    ca_cert: Optional[str]
    linger_s: float
    batch_max: int
    retry_deadline_s: float
    request_timeout_s: float
    #: The caller's W3C ``traceparent``, sent with every request.
    traceparent: Optional[str] = None

    @classmethod
    def make(
        cls,
        urls: Union[str, Sequence[str]],
        token: Optional[str],
        ca_cert: Optional["Union[str, os.PathLike[str]]"],
        linger_ms: float,
        batch_max: int,
        retry_deadline_s: float,
        request_timeout_s: float,
    ) -> "Settings":
        """Check the options; raise ``ValueError`` on a bad one."""
        listed = [urls] if isinstance(urls, str) else list(urls)
        if not listed:
            raise ValueError("give at least one node URL")
        clean = []
        for url in listed:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ValueError(f"a node URL starts with http:// or https://, not {url!r}")
            clean.append(url.rstrip("/"))
        if linger_ms < 0:
            raise ValueError("linger_ms must be at least 0")
        if not 1 <= batch_max <= SERVER_BATCH_JOBS_MAX:
            raise ValueError(f"batch_max must be from 1 to {SERVER_BATCH_JOBS_MAX}")
        if retry_deadline_s < 0:
            raise ValueError("retry_deadline_s must be at least 0")
        if request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be above 0")
        return cls(
            urls=tuple(clean),
            token=token,
            ca_cert=None if ca_cert is None else os.fspath(ca_cert),
            linger_s=linger_ms / 1000.0,
            batch_max=batch_max,
            retry_deadline_s=float(retry_deadline_s),
            request_timeout_s=float(request_timeout_s),
        )

    def with_traceparent(self, traceparent: str) -> "Settings":
        """These settings sending ``traceparent`` (checked by
        `check_traceparent`) with every request."""
        return replace(self, traceparent=check_traceparent(traceparent))

    def http_options(self) -> Dict[str, Any]:
        """Keyword arguments for ``httpx.Client`` and ``httpx.AsyncClient``.

        ``https://`` nodes are checked against the system's roots, or
        against ``ca_cert`` when given.
        """
        headers = {"user-agent": f"cohort-client-python/{__version__}"}
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        if self.traceparent is not None:
            headers["traceparent"] = self.traceparent
        verify: Union[bool, ssl.SSLContext] = True
        if self.ca_cert is not None or any(u.startswith("https://") for u in self.urls):
            verify = ssl.create_default_context(cafile=self.ca_cert)
        return {"headers": headers, "verify": verify, "timeout": self.timeout(0.0)}

    def timeout(self, extra_s: float) -> httpx.Timeout:
        """The timeouts of one request that may take ``extra_s`` more to answer."""
        total = self.request_timeout_s + extra_s
        return httpx.Timeout(total, connect=min(CONNECT_TIMEOUT_S, total))

    def deadline(self) -> float:
        """When a request started now gives up retrying."""
        return time.monotonic() + self.retry_deadline_s


# ---------------------------------------------------------------------------
# Errors from answers


def error_from_answer(status: int, body: bytes) -> CohortError:
    """The error an answer that is not a success carries.

    The server answers every error as ``{"code", "message", "retryable"}``;
    ``429`` and ``503`` are always worth another try.
    """
    code: Optional[str] = None
    message = ""
    retryable: Any = None
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("code"), str):
        code = data["code"]
        message = str(data.get("message", ""))
        retryable = data.get("retryable")
    if code is None:
        code = f"http_{status}"
        message = body[:200].decode("utf-8", "replace") or f"HTTP {status}"
    if not isinstance(retryable, bool):
        retryable = status in (408, 429, 503)
    return CohortError(code, message, status, retryable or status in (429, 503))


#: The status the server answers a code it does not know with (one from a
#: newer master, say); also this client's for a code not in its table.
UNKNOWN_CODE_STATUS = 500


def status_of_code(code: str) -> int:
    """The HTTP status the server answers ``code`` with: its row of the
    server's table (`_codes`, from clients/openapi.json), or 500."""
    row = ERROR_CODES.get(code)
    return UNKNOWN_CODE_STATUS if row is None else row[0]


def refused_item_error(result: Mapping[str, Any]) -> CohortError:
    """The error of a job a batch's answer refused (its item is an error
    inside the ``202``). Its status is the one the server answers its code
    with: what the same job, submitted alone, would have been refused with."""
    code = str(result["code"])
    return CohortError(code, str(result.get("message", "")), status_of_code(code), result.get("retryable") is True)


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a ``Retry-After`` header (cohort sends whole seconds)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def bad_answer(what: str) -> CohortError:
    """A node answered something that is not the API's format."""
    return CohortError("bad_answer", what)


def load_json(body: bytes) -> Any:
    """A success answer's JSON, or ``bad_answer``."""
    try:
        return json.loads(body)
    except ValueError as error:
        raise bad_answer(f"not JSON: {error}") from None


def route_of(method: str, path: str) -> str:
    """The route a request goes to, for counting: ``GET /v1/jobs/{id}``,
    ``GET /v1/blobs/{digest}``."""
    path = _DIGEST_SEGMENT.sub("/{digest}", path.split("?", 1)[0])
    return f"{method} {_ID_SEGMENT.sub('/{id}', path)}"


class RequestCounter:
    """How many HTTP requests a client sent, by route (every try counts)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Dict[str, int] = {}

    def count(self, method: str, path: str) -> None:
        """Count one request."""
        route = route_of(method, path)
        with self._lock:
            self._counts[route] = self._counts.get(route, 0) + 1

    def snapshot(self) -> Dict[str, int]:
        """The counts so far."""
        with self._lock:
            return dict(self._counts)


# ---------------------------------------------------------------------------
# Retrying and failover


class Backoff:
    """Exponential backoff with full jitter: 50 ms doubling to at most 5 s,
    each pause uniform in [0, that]; a ``Retry-After`` is a lower bound."""

    def __init__(self) -> None:
        self._ceiling = BACKOFF_FIRST_S

    def pause(self, retry_after: Optional[float] = None) -> float:
        """The next pause, in seconds."""
        pause = random.uniform(0.0, self._ceiling)
        self._ceiling = min(self._ceiling * 2.0, BACKOFF_MAX_S)
        if retry_after is not None:
            pause = max(pause, retry_after)
        return pause


class NodeSet:
    """The nodes a client talks to, in its order of preference.

    A node that fails to connect, resets or answers ``503`` is skipped for
    2 s, doubling to 30 s while it keeps failing; one that answers is used
    again at once. Shared by every request of a client (thread-safe).
    """

    def __init__(self, urls: Sequence[str]) -> None:
        self._urls = list(urls)
        self._lock = threading.Lock()
        self._skip_until = [0.0] * len(self._urls)
        self._streak = [0] * len(self._urls)

    def pick(self, now: float, tried: "set[str]") -> str:
        """The first node not skipped and not tried yet; when there is none,
        the untried one whose skip ends first (or, all tried, any's)."""
        with self._lock:
            order = sorted(
                range(len(self._urls)),
                key=lambda i: (
                    self._urls[i] in tried,
                    max(self._skip_until[i], now),
                    i,
                ),
            )
            return self._urls[order[0]]

    def usable(self, now: float, tried: "set[str]") -> bool:
        """Whether some node not tried yet is not skipped."""
        with self._lock:
            return any(
                url not in tried and self._skip_until[i] <= now for i, url in enumerate(self._urls)
            )

    def failed(self, url: str, now: float) -> None:
        """The node failed to connect, reset, or answered ``503``."""
        with self._lock:
            i = self._urls.index(url)
            self._streak[i] += 1
            skip = min(SKIP_FIRST_S * 2.0 ** (self._streak[i] - 1), SKIP_MAX_S)
            self._skip_until[i] = now + skip

    def answered(self, url: str) -> None:
        """The node answered (whatever it said, but ``503``)."""
        with self._lock:
            i = self._urls.index(url)
            self._streak[i] = 0
            self._skip_until[i] = 0.0


class Attempts:
    """The tries of one request: which node next, and the pause after a failure.

    A request is retried, with the same body, after a transport failure, a
    ``429`` or ``503``, or an error the server calls ``retryable``; until the
    deadline, then it fails with the last error. A node at fault (transport
    failure, ``503``) is skipped and the next one tried at once; when every
    node was tried, the client pauses (``Backoff``) before another round.
    """

    def __init__(self, nodes: NodeSet, deadline: float) -> None:
        self._nodes = nodes
        self._deadline = deadline
        self._backoff = Backoff()
        self._tried: "set[str]" = set()
        self.last_error: Optional[CohortError] = None

    def node(self) -> str:
        """The node to send the next try to."""
        return self._nodes.pick(time.monotonic(), self._tried)

    def succeeded(self, node: str) -> None:
        """The try got a success answer."""
        self._nodes.answered(node)

    def transport_failed(self, node: str, error: Exception) -> Optional[float]:
        """The try failed to connect, was reset, or timed out.

        Returns the pause before the next try, or ``None`` to give up with
        ``last_error``.
        """
        detail = str(error) or type(error).__name__
        failure = CohortError("unreachable", f"{node}: {detail}", None, True)
        return self._failed(node, failure, None, at_fault=True)

    def refused(self, node: str, status: int, body: bytes, retry_after: Optional[str]) -> Optional[float]:
        """The try got an error answer. As `transport_failed`."""
        if status != 503:
            self._nodes.answered(node)
        return self._failed(
            node, error_from_answer(status, body), parse_retry_after(retry_after), at_fault=status == 503
        )

    def _failed(
        self, node: str, error: CohortError, retry_after: Optional[float], at_fault: bool
    ) -> Optional[float]:
        self.last_error = error
        now = time.monotonic()
        if at_fault:
            self._nodes.failed(node, now)
            self._tried.add(node)
        remaining = self._deadline - now
        if not error.retryable or remaining <= 0:
            return None
        if at_fault and self._nodes.usable(now, self._tried):
            return 0.0
        self._tried.clear()
        return min(self._backoff.pause(retry_after), remaining)


# ---------------------------------------------------------------------------
# Modules


class ModuleCache:
    """Which modules this client uploaded: by path (and size and mtime, so an
    edited file is uploaded again) and by digest."""

    def __init__(self) -> None:
        self._by_path: Dict[Tuple[str, int, int], str] = {}
        self._uploaded: "set[str]" = set()

    @staticmethod
    def digest_named(module: Module) -> Optional[str]:
        """The digest ``module`` names, if it is one (64 hex digits)."""
        if isinstance(module, str) and _DIGEST.fullmatch(module):
            return module
        return None

    @staticmethod
    def named(module: Module) -> Optional[str]:
        """What a job names ``module`` by as it is given, if it is a digest or
        a deployment's name; ``None`` for a module to upload first. A string
        in a name's shape (``send-email``, ``job.wasm``) is a path if a file
        has it, and a name otherwise, as ``cohort submit`` decides."""
        digest = ModuleCache.digest_named(module)
        if digest is not None:
            return digest
        if isinstance(module, str) and _NAME.fullmatch(module) and not os.path.isfile(module):
            return module
        return None

    def cached(self, module: Module) -> Optional[str]:
        """The digest of a module already uploaded from this path."""
        if isinstance(module, (bytes, bytearray, memoryview)):
            return None
        return self._by_path.get(self._path_key(module))

    @staticmethod
    def read(module: Module) -> bytes:
        """The bytes of a module given as bytes or as a path."""
        if isinstance(module, (bytes, bytearray, memoryview)):
            return bytes(module)
        with open(module, "rb") as file:
            return file.read()

    def was_uploaded(self, data: bytes) -> Optional[str]:
        """The digest of ``data`` if this client uploaded it already."""
        digest = hashlib.sha256(data).hexdigest()
        return digest if digest in self._uploaded else None

    def remember(self, module: Module, digest: str) -> None:
        """``module`` is stored on the cluster as ``digest``."""
        self._uploaded.add(digest)
        if not isinstance(module, (bytes, bytearray, memoryview)):
            self._by_path[self._path_key(module)] = digest

    @staticmethod
    def _path_key(path: "Union[str, os.PathLike[str]]") -> Tuple[str, int, int]:
        absolute = os.path.abspath(path)
        stat = os.stat(absolute)
        return (absolute, stat.st_size, stat.st_mtime_ns)


def digest_of_upload(body: bytes) -> str:
    """The digest in ``POST /v1/modules``'s answer."""
    data = load_json(body)
    if not isinstance(data, dict) or not isinstance(data.get("digest"), str):
        raise bad_answer("an upload's answer without a digest")
    return str(data["digest"])


def local_digest(data: bytes) -> str:
    """A module's digest: the sha256 of its bytes, as the server names it."""
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------
# Job handles


@dataclass(frozen=True)
class OutputBlob:
    """A blob a job wrote (its SDK's ``blobs.create(name)``), kept by the
    cluster once the job succeeded: download it with `Client.open_blob` or
    `Client.get_blob_to_file` by its ``digest``, or give it to another job
    as its ``input_blob``."""

    #: The name the job gave it (``counts.tsv``).
    name: str
    #: The sha256 of its bytes, 64 lowercase hex digits.
    digest: str
    #: Its size in bytes.
    bytes: int


#: A job's input blob, as a submission takes it: a digest (64 hex digits,
#: either case, optionally ``sha256:``-prefixed), or anything with a
#: ``digest``: the `BlobInfo` that `Client.put_blob` returns, or another
#: job's `OutputBlob`.
InputBlob = Union[str, "BlobInfo", OutputBlob]


def input_blob_digest(blob: InputBlob) -> str:
    """What a submission's ``input_blob`` sends: a string as it is given
    (the node checks it: ``invalid_job`` if it is not a digest,
    ``blob_not_found`` if the cluster has no such blob), or the
    ``digest`` of a `BlobInfo` or an `OutputBlob`."""
    if isinstance(blob, str):
        return blob
    digest = getattr(blob, "digest", None)
    if not isinstance(digest, str):
        raise TypeError(f"an input blob is a digest or a BlobInfo, not {type(blob).__name__}")
    return digest


def output_blobs_of(value: Any, job_id: Any) -> Tuple[OutputBlob, ...]:
    """The ``outputs`` of a job's answer (absent: none), checked."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise bad_answer(f"job {job_id}'s outputs are not a list: {value!r}")
    blobs: List[OutputBlob] = []
    for item in value:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("digest"), str)
            or not isinstance(item.get("bytes"), int)
            or isinstance(item.get("bytes"), bool)
        ):
            raise bad_answer(f"job {job_id}'s output blob is not {{name, digest, bytes}}: {item!r}")
        blobs.append(OutputBlob(item["name"], item["digest"], item["bytes"]))
    return tuple(blobs)


@dataclass(frozen=True)
class Finished:
    """A finished job, as ``POST /v1/jobs/wait`` lists it."""

    id: int
    state: str
    error: Optional[CohortError]
    output: Optional[bytes]
    output_bytes: Optional[int]
    #: The output blobs it wrote, when it succeeded, in creation order.
    outputs: Tuple[OutputBlob, ...] = ()


class Signal(Protocol):
    """What a job handle's callers wait on: a ``threading.Event`` or an
    ``asyncio.Event``."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


class JobCore:
    """What a job handle knows of its job.

    `Job` and `AsyncJob` add how a caller waits for it: they make the two
    signals below (events of their kind), set here when the job is accepted
    or refused (``_accepted``) and when its outcome is known (``_done``).
    """

    _accepted: Signal
    _done: Signal

    def __init__(self, idempotency_key: Optional[str]) -> None:
        self._key = idempotency_key
        self._id: Optional[int] = None
        self._existing: Optional[bool] = None
        self._failure: Optional[CohortError] = None
        self._finished: Optional[Finished] = None
        self._output: Optional[bytes] = None

    @property
    def idempotency_key(self) -> Optional[str]:
        """The submission's key (``None`` for a handle from ``get``)."""
        return self._key

    def done(self) -> bool:
        """Whether the job's outcome is known (finished, or refused)."""
        return self._done.is_set()

    def _signal_accepted(self) -> None:
        self._accepted.set()

    def _signal_finished(self) -> None:
        self._done.set()

    def _accept(self, job_id: int, existing: bool) -> None:
        self._id = job_id
        self._existing = existing
        self._signal_accepted()

    def _fail(self, error: CohortError) -> None:
        """The job's submission was refused, or its outcome cannot be learnt."""
        if self._failure is None and self._finished is None:
            self._failure = error
        self._signal_accepted()
        self._signal_finished()

    def _finish(self, finished: Finished) -> None:
        if self._failure is None and self._finished is None:
            self._finished = finished
            self._output = finished.output
        self._signal_finished()

    def _accepted_id(self) -> int:
        """The id, once accepted; the refusal otherwise."""
        if self._id is None:
            assert self._failure is not None
            raise self._failure
        return self._id

    def _accepted_existing(self) -> bool:
        self._accepted_id()
        assert self._existing is not None
        return self._existing

    def _settled_output(self) -> Optional[bytes]:
        """The output of a finished job; ``None`` when it must be fetched
        (too large to come inline). Raises why the job has none."""
        self._succeeded()
        return self._output

    def _settled_outputs(self) -> List[OutputBlob]:
        """The output blobs of a finished job (none: empty). Raises why
        the job has none, as `_settled_output`."""
        return list(self._succeeded().outputs)

    def _succeeded(self) -> Finished:
        """The finished job's report, if it succeeded; raises why not."""
        if self._failure is not None:
            raise self._failure
        finished = self._finished
        assert finished is not None
        if finished.state == "succeeded":
            return finished
        if finished.state == "unknown":
            error = finished.error or CohortError("job_not_found", f"no job {finished.id}")
            raise CohortError(error.code, error.message, None, False)
        if finished.error is not None:
            raise JobFailed(finished.id, finished.state, finished.error.code, finished.error.message)
        # The server gives a cancelled job no error of its own.
        raise JobFailed(finished.id, finished.state, finished.state, f"job {finished.id} was {finished.state}")

    def _keep_output(self, output: bytes) -> None:
        self._output = output

    def __repr__(self) -> str:
        if self._failure is not None:
            state = f"error={self._failure.code}"
        elif self._finished is not None:
            state = f"state={self._finished.state}"
        else:
            state = "pending" if self._id is not None else "submitting"
        return f"{type(self).__name__}(id={self._id}, {state})"


# ---------------------------------------------------------------------------
# Submissions and batches


def encode_submission(module: str, input: Any, *, idempotency_key: str, **options: Any) -> bytes:
    """One job of ``POST /v1/jobs/batch``, as JSON (see `job_body`)."""
    body = job_body(module, input, **options)
    body["idempotency_key"] = idempotency_key
    return dump_json(body)


def schedule_path(name: str, action: Optional[str] = None) -> str:
    """The route of schedule ``name`` (and of an action on it)."""
    from urllib.parse import quote

    path = "/v1/schedules/" + quote(name, safe="")
    return path if action is None else f"{path}/{action}"


def deployment_path(name: str, action: Optional[str] = None) -> str:
    """The route of deployment ``name`` (and of an action on it)."""
    from urllib.parse import quote

    path = "/v1/deployments/" + quote(name, safe="")
    return path if action is None else f"{path}/{action}"


def namespace_path(name: str, what: str) -> str:
    """The route of namespace ``name``'s ``what`` (``quotas``, ``weight``)."""
    from urllib.parse import quote

    return "/v1/namespaces/" + quote(name, safe="") + "/" + what


def secret_path(name: str) -> str:
    """The route of secret ``name``."""
    from urllib.parse import quote

    return "/v1/secrets/" + quote(name, safe="")


#: An outbound HTTP(S) grant of a deployment: its URL pattern
#: (``"https://api.example.com/v1/"``), or a dict ``{"url", "methods",
#: "private", "headers", "record"}`` as the API spells it.
Grant = Union[str, Mapping[str, Any]]


def grants_body(
    http: Optional[Union[Grant, Sequence[Grant]]],
    methods: Optional[Sequence[str]],
    private: bool,
    headers: Optional[Mapping[str, str]] = None,
    record: Optional[bool] = None,
    secrets: Optional[Union[str, Sequence[str]]] = None,
) -> Dict[str, Any]:
    """``{"http": [...], "secrets": [...]}`` of ``POST
    /v1/deployments/{name}/grants`` (and ``.../grants/revoke``): each URL
    string with ``methods`` (none: any), ``private``, ``headers`` (none: no
    header) and ``record`` (none: the default, left out), each dict as it
    is; ``secrets`` the names of secrets the jobs may read (a string is one
    name). ``http`` left out when ``None``, ``secrets`` when ``None`` or
    empty."""
    body: Dict[str, Any] = {}
    if http is not None:
        body["http"] = _grant_list(http, methods, private, headers, record)
    if isinstance(secrets, str):
        secrets = [secrets]
    if secrets:
        body["secrets"] = [str(name) for name in secrets]
    return body


def _grant_list(
    http: Union[Grant, Sequence[Grant]],
    methods: Optional[Sequence[str]],
    private: bool,
    headers: Optional[Mapping[str, str]],
    record: Optional[bool],
) -> List[Dict[str, Any]]:
    """The ``http`` list of `grants_body`."""
    if isinstance(http, (str, Mapping)):
        http = [http]
    if isinstance(methods, str):
        methods = [methods]
    grants: List[Dict[str, Any]] = []
    for grant in http:
        if isinstance(grant, str):
            entry: Dict[str, Any] = {"url": grant}
            if methods:
                entry["methods"] = list(methods)
            if private:
                entry["private"] = True
            if headers:
                entry["headers"] = dict(headers)
            if record is not None:
                entry["record"] = bool(record)
        elif isinstance(grant, Mapping):
            entry = dict(grant)
        else:
            raise TypeError(f"a grant is a URL string or a dict with a 'url', not {type(grant).__name__}")
        grants.append(entry)
    return grants


def dump_json(value: Any) -> bytes:
    """A request body."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def job_body(
    module: str,
    input: Any,
    *,
    input_blob: Optional[InputBlob] = None,
    timeout_ms: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    max_attempts: Optional[int] = None,
    priority: Optional[int] = None,
    concurrency_key: Optional[str] = None,
    concurrency_limit: Optional[int] = None,
    rate_limit: Optional[int] = None,
    unique_key: Optional[str] = None,
    unique_window_ms: Optional[int] = None,
    after: Optional[Sequence[int]] = None,
    egress: Optional[Union[Grant, Sequence[Grant]]] = None,
    labels: Optional[Mapping[str, str]] = None,
    namespace: Optional[str] = None,
) -> Dict[str, Any]:
    """A job as ``POST /v1/jobs`` takes it (``module``: a digest or a
    deployment's name): bytes go as ``input_base64``, text as ``input``, any
    other value as ``input_json``. ``input_blob`` (see `InputBlob`) goes
    as the digest of the blob the job reads as a stream, beside any
    inline input. ``egress`` narrows what the job may call to these grants
    (URL strings or dicts), each within a grant of the deployment it is
    submitted by. ``labels`` (``{"gpu": "a100"}``) go as the object of the
    labels a worker must have to run the job (the node checks them).
    ``namespace`` names the job's namespace. Options left ``None`` are left
    out, and ``labels`` when empty too."""
    body: Dict[str, Any] = {"module": module}
    if isinstance(input, (bytes, bytearray, memoryview)):
        body["input_base64"] = base64.b64encode(input).decode("ascii")
    elif isinstance(input, str):
        body["input"] = input
    elif input is not None:
        body["input_json"] = input
    options = (
        ("input_blob", None if input_blob is None else input_blob_digest(input_blob)),
        ("timeout_ms", timeout_ms),
        ("memory_bytes", memory_bytes),
        ("max_attempts", max_attempts),
        ("priority", priority),
        ("concurrency_key", concurrency_key),
        ("concurrency_limit", concurrency_limit),
        ("rate_limit", rate_limit),
        ("unique_key", unique_key),
        ("unique_window_ms", unique_window_ms),
        ("after", list(after) if after else None),
        ("egress", grants_body(egress, None, False)["http"] if egress is not None else None),
        ("labels", dict(labels) if labels else None),
        ("namespace", namespace),
    )
    for name, value in options:
        if value is not None:
            body[name] = value
    return body


class Pending:
    """A submission waiting for its batch, or for its retry."""

    __slots__ = ("job", "body", "arrived", "deadline")

    def __init__(self, job: JobCore, body: bytes, deadline: float) -> None:
        self.job = job
        self.body = body
        self.arrived = time.monotonic()
        self.deadline = deadline


class BatchQueue:
    """Submissions waiting for the linger window to end.

    The window opens with the first waiting submission; when it ends, or as
    soon as a full batch waits (``batch_max`` jobs or 8 MiB of body), a batch
    goes out. Not thread-safe: the sync client holds a lock around it.
    """

    def __init__(self, linger_s: float, jobs_max: int, bytes_max: int = BATCH_BYTES_MAX) -> None:
        self._linger_s = linger_s
        self._jobs_max = jobs_max
        self._bytes_max = bytes_max
        self._items: Deque[Pending] = deque()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: Pending) -> bool:
        """Queue a submission; true if the batcher should look now (a window
        opened, or a batch is full)."""
        self._items.append(item)
        self._bytes += len(item.body) + 1
        return len(self._items) == 1 or self.full()

    def full(self) -> bool:
        """Whether a full batch waits."""
        return len(self._items) >= self._jobs_max or self._bytes >= self._bytes_max

    def window_end(self) -> Optional[float]:
        """When the open window ends (``None``: none is open)."""
        return self._items[0].arrived + self._linger_s if self._items else None

    def ready(self, now: float, flushing: bool) -> bool:
        """Whether a batch should go out now."""
        if not self._items:
            return False
        end = self.window_end()
        return flushing or self.full() or (end is not None and now >= end)

    def take(self) -> List[Pending]:
        """The next batch: the oldest submissions, within the bounds."""
        batch: List[Pending] = []
        size = 0
        while self._items and len(batch) < self._jobs_max:
            item = self._items[0]
            if batch and size + len(item.body) + 1 > self._bytes_max:
                break
            self._items.popleft()
            batch.append(item)
            size += len(item.body) + 1
        self._bytes -= size
        return batch


def batch_body(items: Sequence[Pending]) -> bytes:
    """``POST /v1/jobs/batch``'s body."""
    return b'{"jobs":[' + b",".join(item.body for item in items) + b"]}"


def settle_batch(items: Sequence[Pending], body: bytes) -> Tuple[List[JobCore], List[Pending]]:
    """Apply a batch's answer to its jobs.

    Accepted jobs learn their id; refused ones fail with their error, except
    those whose error is ``retryable`` and whose deadline has not passed:
    they are returned to be sent again (only those). Returns the accepted
    jobs and the ones to send again.
    """
    data = load_json(body)
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list) or len(results) != len(items):
        raise bad_answer("a batch's answer without one result per job")
    accepted: List[JobCore] = []
    again: List[Pending] = []
    now = time.monotonic()
    for item, result in zip(items, results):
        if isinstance(result, dict) and isinstance(result.get("id"), int):
            item.job._accept(result["id"], bool(result.get("existing", False)))
            accepted.append(item.job)
            continue
        if isinstance(result, dict) and isinstance(result.get("code"), str):
            error = refused_item_error(result)
        else:
            error = bad_answer(f"a batch's result that is neither an id nor an error: {result!r}")
        if error.retryable and now < item.deadline:
            again.append(item)
        else:
            item.job._fail(error)
    return accepted, again


# ---------------------------------------------------------------------------
# Waiting


def wait_body(ids: Sequence[int], wait_ms: int) -> bytes:
    """``POST /v1/jobs/wait``'s body."""
    return json.dumps({"ids": list(ids), "wait_ms": wait_ms}, separators=(",", ":")).encode()


def parse_wait_answer(body: bytes) -> Dict[int, Finished]:
    """The finished jobs in ``POST /v1/jobs/wait``'s answer, by id."""
    data = load_json(body)
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, list):
        raise bad_answer("a wait's answer without jobs")
    finished: Dict[int, Finished] = {}
    for job in jobs:
        if not isinstance(job, dict) or not isinstance(job.get("id"), int):
            raise bad_answer(f"a finished job without an id: {job!r}")
        error = job.get("error")
        output = job.get("output_base64")
        try:
            decoded = None if output is None else base64.b64decode(output, validate=True)
        except (ValueError, TypeError):
            raise bad_answer(f"job {job['id']}'s output is not base64") from None
        finished[job["id"]] = Finished(
            id=job["id"],
            state=str(job.get("state", "unknown")),
            error=(
                CohortError(str(error.get("code", "")), str(error.get("message", "")))
                if isinstance(error, dict)
                else None
            ),
            output=decoded,
            output_bytes=job.get("output_bytes"),
            outputs=output_blobs_of(job.get("outputs"), job["id"]),
        )
    return finished


class WaitBook:
    """The waiter's book: which jobs are watched and which requests are out.

    Every job handle whose id is known is watched (held weakly: a handle
    dropped by its caller is no longer watched) until its job finishes.
    At most 4 ``POST /v1/jobs/wait`` are in flight; ids not in one go into
    the next as soon as one of the 4 is free, and a request that returns
    gives its unfinished ids back. The last free slot's request waits at
    most 1 s, the others 25 s. Not thread-safe: the sync client holds a
    lock around it.
    """

    def __init__(self) -> None:
        self._watched: Dict[int, List["weakref.ref[JobCore]"]] = {}
        self._unsent: Dict[int, None] = {}
        self._in_flight = 0

    def watch(self, job: JobCore) -> None:
        """Watch a handle whose id is known."""
        job_id = job._accepted_id()
        self._watched.setdefault(job_id, []).append(weakref.ref(job))
        self._unsent[job_id] = None

    def next_request(self) -> Optional[Tuple[List[int], int]]:
        """The ids and ``wait_ms`` of the next request, if a slot is free
        and some watched ids are in no request; counts it in flight."""
        if self._in_flight >= WAIT_SLOTS:
            return None
        ids: List[int] = []
        while self._unsent and len(ids) < WAIT_IDS_MAX:
            job_id = next(iter(self._unsent))
            del self._unsent[job_id]
            if self._alive(job_id):
                ids.append(job_id)
        if not ids:
            return None
        self._in_flight += 1
        return ids, (WAIT_LAST_SLOT_MS if self._in_flight == WAIT_SLOTS else WAIT_LONG_MS)

    def answered(self, ids: Sequence[int], finished: Mapping[int, Finished]) -> List[Tuple[JobCore, Finished]]:
        """A request returned: its finished jobs, to settle; the others are
        watched again."""
        self._in_flight -= 1
        settled: List[Tuple[JobCore, Finished]] = []
        for job_id in ids:
            done = finished.get(job_id)
            if done is None:
                if self._alive(job_id):
                    self._unsent[job_id] = None
                continue
            for job in self._take(job_id):
                settled.append((job, done))
        return settled

    def failed(self, ids: Sequence[int]) -> List[JobCore]:
        """A request failed for good: its jobs, to fail."""
        self._in_flight -= 1
        return [job for job_id in ids for job in self._take(job_id)]

    def close(self) -> List[JobCore]:
        """Stop watching: every watched job, to fail."""
        jobs = [job for job_id in list(self._watched) for job in self._take(job_id)]
        self._unsent.clear()
        return jobs

    def _alive(self, job_id: int) -> bool:
        refs = [ref for ref in self._watched.get(job_id, []) if ref() is not None]
        if refs:
            self._watched[job_id] = refs
            return True
        self._watched.pop(job_id, None)
        return False

    def _take(self, job_id: int) -> List[JobCore]:
        refs = self._watched.pop(job_id, [])
        self._unsent.pop(job_id, None)
        return [job for job in (ref() for ref in refs) if job is not None]


def closed_error() -> CohortError:
    """The error of anything asked of a closed client."""
    return CohortError("closed", "the client was closed")


def remaining(deadline: Optional[float]) -> Optional[float]:
    """Seconds until ``deadline`` (``None``: no deadline), at least 0."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())
