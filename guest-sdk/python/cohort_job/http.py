"""Outbound HTTP(S) from a job: a small blocking client.

A job may call out over HTTP only where the operator of its cohort node
granted it (``cohort grant NAME --http URL``). A request outside every grant
fails with an :class:`HttpError` whose code is ``http_denied``; nothing in
the job needs to change once the grant is there.

.. code-block:: python

    from cohort_job import http, info, job

    @job(input="json", output="json")
    def run(request):
        status = http.get("https://api.example.com/v1/status", timeout=10)
        info(f"status: {status.raise_for_status().text()}")
        charge = http.post(
            "https://api.example.com/v1/charges",
            json={"amount": request["amount"]},
            headers={"Idempotency-Key": request["order"]},
            timeout=10,
        ).raise_for_status()
        return charge.json()

:func:`request` (and its shortcuts :func:`get`, :func:`post`, :func:`put`,
:func:`patch`, :func:`delete`, :func:`head`) sends one request and reads
the whole response into a :class:`Response` (``status``, ``headers``,
``body``, ``text()``, ``json()``). Any status is a response, ``404`` and
``500`` included; :meth:`Response.raise_for_status` turns those into errors.

:class:`HttpError` is a :class:`~cohort_job.JobError`: left uncaught in the
job function, it fails the job with its code (``http_denied``,
``http_timeout``, ``http_error``, ...; see :class:`HttpError`) and a message
naming the request's method and origin (never its path or query, which may
hold a secret).

Behaviour, as in the Rust SDK's ``cohort_guest::http``:

* Calls block until the whole response body has been read. A body larger
  than ``max_response_bytes`` (64 MiB by default) is the error
  ``http_response_too_large``; the job's memory limit applies on top.
* Without ``timeout`` a call waits as long as the node lets it (the job's own
  deadline bounds it in the end). With one (seconds), the whole call, from
  connecting to the last byte of the body, must fit in it.
* Only ``http`` and ``https`` URLs, without credentials in them; the host and
  path are sent as written, non-ASCII characters of the path percent-encoded.
* A body is sent with a ``Content-Length`` header (added unless given). The
  node sets ``Host`` itself: headers only the node may set are refused.
* Redirects are not followed: a ``3xx`` answer is returned as it is.
* A job may run more than once: a call with side effects should carry an
  idempotency key the server honours, the same on every attempt.

Outside a built job (plain CPython, e.g. a unit test of the job function)
there is no node to make the call: every request fails with ``http_error``
unless a test replaces :data:`transport` (a function from a
:class:`PreparedRequest` to a :class:`Response`).
"""

from __future__ import annotations

import json as _json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, List, Mapping, Optional, Tuple, Union

from . import JobError

try:  # Present when componentize-py builds the job (bindings of wasi:http).
    from componentize_py_types import Err as _Err
    from componentize_py_types import Ok as _Ok
    from wit_world.imports import http_types as _t
    from wit_world.imports import monotonic_clock as _clock
    from wit_world.imports import outgoing_handler as _handler
    from wit_world.imports import poll as _poll
    from wit_world.imports import streams as _streams
except ImportError:  # Plain CPython: no node to call through.
    _t = None


__all__ = [
    "HttpError",
    "MAX_RESPONSE_BYTES",
    "PreparedRequest",
    "Response",
    "delete",
    "get",
    "head",
    "patch",
    "post",
    "put",
    "request",
]

#: The most response body bytes a call reads unless it says otherwise
#: (``max_response_bytes``): 64 MiB.
MAX_RESPONSE_BYTES = 64 << 20

#: The most bytes asked of a stream at once.
_CHUNK_BYTES = 64 * 1024

#: How much of a body an error message quotes.
_EXCERPT_CHARS = 200

Headers = Union[Mapping[str, str], Iterable[Tuple[str, str]], None]
Body = Union[bytes, bytearray, memoryview, str, None]


class HttpError(JobError):
    """Why a call failed. ``code`` is one of

    ``http_invalid_request``
        the request is malformed (URL, method, header), or sets a header the
        node reserves for itself;
    ``http_denied``
        the node did not allow the call (``HTTP-request-denied``): no grant of
        the job covers it;
    ``http_timeout``
        the call ran out of time (its own ``timeout``, or the node's);
    ``http_error``
        the name did not resolve, the connection was refused or broke, TLS
        failed, or the answer was malformed;
    ``http_response_too_large``
        the response body is larger than the call reads;
    ``http_bad_response``
        the body is not the text or JSON expected (``text()``, ``json()``);
    ``http_status``
        the server answered with a status that is not ``2xx``
        (:meth:`Response.raise_for_status`).

    ``wasi_code`` is the ``wasi:http`` error code the node reported, spelled
    as in the interface (``HTTP-request-denied``, ``connection-refused``,
    ...), or ``None``; ``status`` is the response status for
    ``http_status``. A subclass of :class:`~cohort_job.JobError`: uncaught,
    it fails the job with its code and message.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        wasi_code: Optional[str] = None,
        status: Optional[int] = None,
    ) -> None:
        super().__init__(code, message)
        self.wasi_code = wasi_code
        self.status = status

    @property
    def is_timeout(self) -> bool:
        """Whether the call ran out of time."""
        return self.code == "http_timeout"

    def _context(self, context: str) -> "HttpError":
        self.message = f"{context}: {self.message}"
        self.args = (self.code, self.message)
        return self

    def __repr__(self) -> str:
        return f"HttpError({self.code!r}, {self.message!r})"


# -- responses ----------------------------------------------------------------


@dataclass
class Response:
    """An HTTP response, its body read in full."""

    #: The status code, e.g. ``200``.
    status: int
    #: The headers in the order received, names in lowercase. A value that is
    #: not UTF-8 is decoded with replacement characters.
    headers: List[Tuple[str, str]] = field(default_factory=list)
    #: The body.
    body: bytes = b""

    @property
    def ok(self) -> bool:
        """Whether the status is ``2xx``."""
        return 200 <= self.status < 300

    def header(self, name: str) -> Optional[str]:
        """The first value of header ``name`` (any case), if any."""
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def text(self) -> str:
        """The body as text. Bodies are read as UTF-8, whatever charset the
        ``Content-Type`` names; one that is not UTF-8 is ``http_bad_response``."""
        try:
            return self.body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise HttpError("http_bad_response", f"the response body is not UTF-8 text: {e}") from None

    def json(self) -> Any:
        """The body parsed as JSON; a body that is not JSON is
        ``http_bad_response``."""
        try:
            return _json.loads(self.text())
        except ValueError as e:
            raise HttpError(
                "http_bad_response", f"the response body is not the expected JSON: {e}"
            ) from None

    def raise_for_status(self) -> "Response":
        """The response itself if its status is ``2xx``, else an
        :class:`HttpError` ``http_status`` naming the status and the start of
        the body."""
        if self.ok:
            return self
        message = f"the server answered {self.status}"
        excerpt = _body_excerpt(self.body)
        if excerpt:
            message += f": {excerpt}"
        raise HttpError("http_status", message, status=self.status)


def _body_excerpt(body: bytes) -> str:
    text = " ".join(body.decode("utf-8", "replace").split())
    if len(text) > _EXCERPT_CHARS:
        text = text[:_EXCERPT_CHARS] + "…"
    return text


# -- requests -----------------------------------------------------------------


@dataclass
class PreparedRequest:
    """A request checked and ready to go out (what :data:`transport` gets)."""

    method: str
    https: bool
    #: ``host[:port]``, as written.
    authority: str
    #: From the first ``/``, query included, without the fragment.
    path_with_query: str
    headers: List[Tuple[str, str]]
    body: bytes
    #: Seconds, or ``None``.
    timeout: Optional[float]
    max_response_bytes: int

    @property
    def origin(self) -> str:
        """``scheme://authority``: what error messages show of the URL."""
        return f"{'https' if self.https else 'http'}://{self.authority}"

    @property
    def context(self) -> str:
        """``METHOD origin``, the prefix of every error message about the call."""
        return f"{self.method} {self.origin}"


def request(
    method: str,
    url: str,
    *,
    headers: Headers = None,
    body: Body = None,
    json: Any = None,
    timeout: Optional[float] = None,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
) -> Response:
    """Sends a request and reads its whole response.

    ``method`` is sent as given (``"GET"``, ``"POST"``, ...; methods are
    case-sensitive). ``headers`` is a mapping or a list of ``(name, value)``
    pairs (a list may repeat a name). ``body`` is bytes, or a ``str`` sent as
    UTF-8; ``json`` instead sends that value as JSON, with ``Content-Type:
    application/json`` unless the headers name a content type. ``timeout``
    (seconds) bounds the whole call; ``max_response_bytes`` the body read.

    Returns the :class:`Response` whatever its status; raises
    :class:`HttpError` when there is none.
    """
    prepared = _prepare(method, url, headers, body, json, timeout, max_response_bytes)
    try:
        return transport(prepared)
    except HttpError as e:
        raise e._context(prepared.context) from None


def get(url: str, **options: Any) -> Response:
    """``request("GET", url, ...)``."""
    return request("GET", url, **options)


def head(url: str, **options: Any) -> Response:
    """``request("HEAD", url, ...)``."""
    return request("HEAD", url, **options)


def post(url: str, body: Body = None, **options: Any) -> Response:
    """``request("POST", url, body=body, ...)``."""
    return request("POST", url, body=body, **options)


def put(url: str, body: Body = None, **options: Any) -> Response:
    """``request("PUT", url, body=body, ...)``."""
    return request("PUT", url, body=body, **options)


def patch(url: str, body: Body = None, **options: Any) -> Response:
    """``request("PATCH", url, body=body, ...)``."""
    return request("PATCH", url, body=body, **options)


def delete(url: str, **options: Any) -> Response:
    """``request("DELETE", url, ...)``."""
    return request("DELETE", url, **options)


def _invalid(message: str) -> HttpError:
    return HttpError("http_invalid_request", message)


def _prepare(
    method: str,
    url: str,
    headers: Headers,
    body: Body,
    json_value: Any,
    timeout: Optional[float],
    max_response_bytes: int,
) -> PreparedRequest:
    if not isinstance(method, str) or not _is_token(method):
        raise _invalid(f"{method!r} is not a valid HTTP method")
    if not isinstance(url, str):
        raise _invalid(f"the URL must be a str, not {type(url).__name__}")
    https, authority, path_with_query = _parse_url(url)
    context = f"{method} {'https' if https else 'http'}://{authority}"
    pairs: List[Tuple[str, str]] = []
    items = headers.items() if isinstance(headers, Mapping) else (headers or ())
    for item in items:
        try:
            name, value = item
        except (TypeError, ValueError):
            raise _invalid(f"{context}: headers are (name, value) pairs, not {item!r}") from None
        if not isinstance(name, str) or not isinstance(value, str):
            raise _invalid(f"{context}: header names and values are str, not {item!r}")
        try:
            _check_header(name, value)
        except HttpError as e:
            raise e._context(context) from None
        pairs.append((name, value))

    def has(name: str) -> bool:
        return any(n.lower() == name for n, _ in pairs)

    if json_value is not None:
        if body is not None:
            raise _invalid(f"{context}: give either body or json, not both")
        try:
            data = _json.dumps(json_value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise _invalid(f"{context}: cannot encode the JSON body: {e}") from None
        payload = data.encode("utf-8")
        if not has("content-type"):
            pairs.append(("Content-Type", "application/json"))
    elif body is None:
        payload = b""
    elif isinstance(body, str):
        payload = body.encode("utf-8")
    elif isinstance(body, (bytes, bytearray, memoryview)):
        payload = bytes(body)
    else:
        raise _invalid(f"{context}: the body is bytes or str, not {type(body).__name__} (json= takes any JSON value)")
    if not has("content-length") and (payload or method in ("POST", "PUT", "PATCH")):
        pairs.append(("Content-Length", str(len(payload))))
    if timeout is not None:
        try:
            timeout = float(timeout)
        except (TypeError, ValueError):
            raise _invalid(f"{context}: timeout is in seconds, not {timeout!r}") from None
        if not timeout > 0:
            raise _invalid(f"{context}: timeout must be positive, not {timeout!r}")
    if not isinstance(max_response_bytes, int) or max_response_bytes < 0:
        raise _invalid(f"{context}: max_response_bytes must be a non-negative int")
    return PreparedRequest(
        method=method,
        https=https,
        authority=authority,
        path_with_query=path_with_query,
        headers=pairs,
        body=payload,
        timeout=timeout,
        max_response_bytes=max_response_bytes,
    )


def _parse_url(url: str) -> Tuple[bool, str, str]:
    """(https, authority, path_with_query) of an http(s) URL."""

    def invalid(why: str) -> HttpError:
        return _invalid(f"invalid URL {url!r}: {why}")

    if any(c.isspace() or ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in url):
        raise invalid("it contains whitespace or control characters (percent-encode them)")
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise invalid("it does not start with http:// or https://")
    if scheme.lower() == "https":
        https = True
    elif scheme.lower() == "http":
        https = False
    else:
        raise invalid("only http and https URLs are supported")
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        raise invalid("credentials in a URL are not supported; send them in an Authorization header")
    why = _check_authority(authority)
    if why:
        raise invalid(why)
    tail = tail.split("#", 1)[0]
    path = tail if tail.startswith("/") else "/" + tail
    encoded = "".join(
        c if c.isascii() else "".join(f"%{b:02X}" for b in c.encode("utf-8")) for c in path
    )
    return https, authority, encoded


_HOST_CHARS = frozenset("-._~%!$&'()*+,;=")


def _check_authority(authority: str) -> Optional[str]:
    """What is wrong with ``host[:port]``, or ``None``."""
    if not authority:
        return "it has no host"
    if not authority.isascii():
        return "the host is not ASCII; write an international name in its xn-- form"
    host: Optional[str]
    if authority.startswith("["):
        address, closed, after = authority[1:].partition("]")
        if not closed:
            return "an IPv6 address misses its closing `]`"
        if not address or not all(c.isalnum() or c in ":.%-_~" for c in address):
            return f"`[{address}]` is not an IPv6 address"
        if after and not after.startswith(":"):
            return "only a :port may follow an IPv6 address"
        host, port = None, (after[1:] if after else None)
    elif authority.count(":") > 1:
        return "an IPv6 address must be written in brackets, as in http://[::1]:8080/"
    else:
        host, colon, port_text = authority.partition(":")
        port = port_text if colon else None
    if host is not None:
        if not host:
            return "it has no host"
        for c in host:
            if not (c.isalnum() or c in _HOST_CHARS):
                return f"`{c}` cannot appear in a host name"
    if port is not None and (not port.isdigit() or not port.isascii() or int(port) > 65535):
        return f"`{port}` is not a port number (0 to 65535)"
    return None


_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~")


def _is_token(text: str) -> bool:
    """Whether ``text`` is an HTTP token (a header name or method, RFC 9110)."""
    return bool(text) and all(
        (c.isascii() and c.isalnum()) or c in _TOKEN_CHARS for c in text
    )


def _check_header(name: str, value: str) -> None:
    if not _is_token(name):
        raise _invalid(f"{name!r} is not a valid header name")
    # Field values: visible characters, spaces and tabs; never CR, LF or other
    # control characters, which could smuggle extra headers.
    if any((ord(c) < 0x20 and c != "\t") or 0x7F <= ord(c) < 0xA0 for c in value):
        raise _invalid(f"the value of header {name!r} contains a line break or control character")


# -- the call, over wasi:http/outgoing-handler -----------------------------------


def _no_transport(prepared: PreparedRequest) -> Response:
    raise HttpError(
        "http_error",
        "no cohort node to make the call: cohort_job.http calls out only in a built job "
        "(in a unit test, replace cohort_job.http.transport)",
    )


def _wasi_transport(prepared: PreparedRequest) -> Response:
    deadline = _Deadline(prepared.timeout) if prepared.timeout is not None else None
    headers = _t.Fields()
    for name, value in prepared.headers:
        try:
            headers.append(name, value.encode("utf-8"))
        except _Err as e:
            _drop(headers)
            raise _header_error(name, e.value) from None
    outgoing = _t.OutgoingRequest(headers)

    def unsupported(what: str) -> HttpError:
        return _invalid(f"the node does not accept this request's {what}")

    for setter, value, what in (
        (outgoing.set_method, _wasi_method(prepared.method), "method"),
        (outgoing.set_scheme, _t.Scheme_Https() if prepared.https else _t.Scheme_Http(), "scheme"),
        (outgoing.set_authority, prepared.authority, "host"),
        (outgoing.set_path_with_query, prepared.path_with_query, "path or query"),
    ):
        try:
            setter(value)
        except _Err:
            raise unsupported(what) from None

    options = None
    if prepared.timeout is not None:
        options = _t.RequestOptions()
        nanos = int(prepared.timeout * 1e9)
        # A node may not support each of these; the deadline kept here
        # bounds the call anyway.
        for setter in (
            options.set_connect_timeout,
            options.set_first_byte_timeout,
            options.set_between_bytes_timeout,
        ):
            try:
                setter(nanos)
            except _Err:
                pass

    # The body, if any, is written after the request is handed over: the
    # node sends it as it is written, so a body larger than the node's
    # buffer never waits for a request that has not started.
    out_body = outgoing.body() if prepared.body else None
    try:
        future = _handler.handle(outgoing, options)
    except _Err as e:
        _drop(out_body)
        raise _node_error(e.value) from None
    with future:
        with future.subscribe() as response_ready:
            write_error = None
            if out_body is not None:
                try:
                    _write_body(out_body, prepared.body, response_ready, deadline)
                except HttpError as e:
                    if e.code == "http_timeout":
                        raise
                    # Whatever stopped the body, the response tells how the
                    # call ended: an answer the server gave early, or the
                    # node's error code for the request.
                    write_error = e
            while True:
                outcome = future.get()
                if outcome is None:
                    _wait([response_ready], deadline)
                    continue
                if isinstance(outcome, _Err):
                    raise HttpError("http_error", "the response was already taken")
                inner = outcome.value
                if isinstance(inner, _Ok):
                    incoming = inner.value
                    break
                if write_error is not None and write_error.code == "http_invalid_request":
                    # The body broke the request's own rules (its
                    # Content-Length, say): that is the cause.
                    raise write_error
                raise _node_error(inner.value)
        with incoming:
            status = incoming.status()
            # Answers to HEAD, and 1xx, 204 and 304 answers, have no body
            # whatever their Content-Length says.
            has_body = prepared.method != "HEAD" and not (100 <= status < 200 or status in (204, 304))
            return _read_response(incoming, status, has_body, prepared.max_response_bytes, deadline)


def _drop(*resources: Any) -> None:
    """Releases wasi resources now, children first."""
    for resource in resources:
        if resource is not None:
            resource.__exit__(None, None, None)


def _write_body(body: Any, data: bytes, response_ready: Any, deadline: Optional["_Deadline"]) -> None:
    """Streams ``data`` into the outgoing ``body``, then finishes it (or drops
    it unfinished, which tells the node it is incomplete)."""
    try:
        stream = body.write()
    except _Err:
        _drop(body)
        raise HttpError("http_error", "the request body is unavailable") from None
    try:
        _write_all(stream, data, response_ready, deadline)
    except BaseException:
        _drop(stream, body)
        raise
    _drop(stream)
    try:
        _t.OutgoingBody.finish(body, None)
    except _Err as e:
        raise _node_error(e.value) from None


def _write_all(stream: Any, data: bytes, response_ready: Any, deadline: Optional["_Deadline"]) -> None:
    view = memoryview(data)
    flushing = False
    with stream.subscribe() as writable:
        while True:
            try:
                permitted = stream.check_write()
            except _Err as e:
                raise _stream_error(e.value) from None
            if permitted == 0:
                # Wait for room, unless the node answers first (an early
                # error, or a server that replies before reading it all).
                if _wait([writable, response_ready], deadline) == 1:
                    if not view:
                        return  # All written; only the flush was pending.
                    raise HttpError("http_error", "the server answered before the request body was sent")
                continue
            if not view:
                if flushing:
                    return  # Room again after the flush: everything went out.
                try:
                    stream.flush()
                except _Err as e:
                    raise _stream_error(e.value) from None
                flushing = True
                continue
            n = min(permitted, _CHUNK_BYTES, len(view))
            try:
                stream.write(bytes(view[:n]))
            except _Err as e:
                raise _stream_error(e.value) from None
            view = view[n:]


def _read_response(
    incoming: Any, status: int, has_body: bool, limit: int, deadline: Optional["_Deadline"]
) -> Response:
    with incoming.headers() as fields:
        headers = [(name, value.decode("utf-8", "replace")) for name, value in fields.entries()]

    def too_large() -> HttpError:
        return HttpError(
            "http_response_too_large",
            f"the response body is larger than the {_byte_size(limit)} this call reads "
            "(see max_response_bytes)",
        )

    declared = None
    if has_body:
        for name, value in headers:
            if name.lower() == "content-length":
                try:
                    declared = int(value.strip())
                except ValueError:
                    pass
                break
    if declared is not None and declared > limit:
        raise too_large()
    try:
        body = incoming.consume()
    except _Err:
        raise HttpError("http_error", "the response body was already taken") from None
    # Trailers, if any, are not read: dropping the body is enough.
    with body:
        try:
            stream = body.stream()
        except _Err:
            raise HttpError("http_error", "the response body was already taken") from None
        with stream:
            data = _read_body(stream, limit, deadline, too_large)
    return Response(status=status, headers=headers, body=data)


def _read_body(stream: Any, limit: int, deadline: Optional["_Deadline"], too_large: Callable[[], HttpError]) -> bytes:
    chunks = bytearray()
    with stream.subscribe() as readable:
        while True:
            # Ask for one byte past the limit, to tell "exactly the limit"
            # from "more".
            room = limit - len(chunks) + 1
            try:
                chunk = stream.read(min(room, _CHUNK_BYTES))
            except _Err as e:
                if isinstance(e.value, _streams.StreamError_Closed):
                    return bytes(chunks)
                raise _stream_error(e.value) from None
            if not chunk:
                _wait([readable], deadline)
                continue
            if len(chunk) > limit - len(chunks):
                raise too_large()
            chunks += chunk


class _Deadline:
    """When the call must be over, on the monotonic clock."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.at = _clock.now() + int(timeout * 1e9)

    def passed(self) -> bool:
        return _clock.now() >= self.at

    def error(self) -> HttpError:
        return HttpError(
            "http_timeout", f"the call did not complete within its timeout of {self.timeout:g} s"
        )


def _wait(pollables: List[Any], deadline: Optional[_Deadline]) -> int:
    """Blocks until one of ``pollables`` is ready, returning its index, or
    raises ``http_timeout`` once the deadline has passed."""
    if deadline is None:
        return min(_poll.poll(pollables))
    # Checked first, so that a steady trickle of bytes cannot outlast the
    # deadline.
    if deadline.passed():
        raise deadline.error()
    with _clock.subscribe_instant(deadline.at) as timer:
        ready = _poll.poll(pollables + [timer])
    mine = [i for i in ready if i < len(pollables)]
    if not mine:
        raise deadline.error()
    return min(mine)


def _byte_size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")


def _wasi_method(method: str) -> Any:
    if method in _METHODS:
        return getattr(_t, f"Method_{method.capitalize()}")()
    return _t.Method_Other(method)


def _header_error(name: str, error: Any) -> HttpError:
    why = {
        "HeaderError_InvalidSyntax": "is not valid",
        "HeaderError_Forbidden": "is set by the node only, not by jobs",
        "HeaderError_Immutable": "cannot be changed",
    }.get(type(error).__name__, "was refused")
    return _invalid(f"header `{name}` {why}")


def _stream_error(error: Any) -> HttpError:
    if isinstance(error, _streams.StreamError_Closed):
        return HttpError("http_error", "the connection was closed")
    io_error = error.value
    try:
        code = _t.http_error_code(io_error)
        if code is not None:
            return _node_error(code)
        return HttpError("http_error", io_error.to_debug_string())
    finally:
        _drop(io_error)


def _node_error(code: Any) -> HttpError:
    """The error for a ``wasi:http`` error code."""
    kind, name, description = _describe(code)
    return HttpError(kind, f"{description} ({name})", wasi_code=name)


# (kind, interface name, description) by variant case; a description may use
# the case's payload, as {value}.
_DENIED, _INVALID, _TIMEOUT, _TRANSPORT, _TOO_LARGE = (
    "http_denied",
    "http_invalid_request",
    "http_timeout",
    "http_error",
    "http_response_too_large",
)
_CODES = {
    "DnsTimeout": (_TIMEOUT, "DNS-timeout", "the host name lookup timed out"),
    "DnsError": (_TRANSPORT, "DNS-error", "the host name did not resolve"),
    "DestinationNotFound": (_TRANSPORT, "destination-not-found", "the host name did not resolve"),
    "DestinationUnavailable": (_TRANSPORT, "destination-unavailable", "the server is unavailable"),
    "DestinationIpProhibited": (
        _DENIED,
        "destination-IP-prohibited",
        "the node does not allow connecting to that address",
    ),
    "DestinationIpUnroutable": (_TRANSPORT, "destination-IP-unroutable", "the address cannot be reached"),
    "ConnectionRefused": (_TRANSPORT, "connection-refused", "the connection was refused"),
    "ConnectionTerminated": (_TRANSPORT, "connection-terminated", "the connection was closed unexpectedly"),
    "ConnectionTimeout": (_TIMEOUT, "connection-timeout", "connecting timed out"),
    "ConnectionReadTimeout": (_TIMEOUT, "connection-read-timeout", "reading from the server timed out"),
    "ConnectionWriteTimeout": (_TIMEOUT, "connection-write-timeout", "writing to the server timed out"),
    "ConnectionLimitReached": (
        _TRANSPORT,
        "connection-limit-reached",
        "the node's connection limit was reached",
    ),
    "TlsProtocolError": (_TRANSPORT, "TLS-protocol-error", "the TLS handshake failed"),
    "TlsCertificateError": (
        _TRANSPORT,
        "TLS-certificate-error",
        "the server's TLS certificate was not accepted",
    ),
    "TlsAlertReceived": (_TRANSPORT, "TLS-alert-received", "the server sent a TLS alert"),
    "HttpRequestDenied": (
        _DENIED,
        "HTTP-request-denied",
        "the node did not allow this request: no HTTP grant of this job covers it",
    ),
    "HttpRequestLengthRequired": (
        _INVALID,
        "HTTP-request-length-required",
        "the request needs a Content-Length",
    ),
    "HttpRequestBodySize": (
        _INVALID,
        "HTTP-request-body-size",
        "the request body does not match its Content-Length, or is larger than the node sends",
    ),
    "HttpRequestMethodInvalid": (_INVALID, "HTTP-request-method-invalid", "the method is not valid"),
    "HttpRequestUriInvalid": (_INVALID, "HTTP-request-URI-invalid", "the URL is not valid"),
    "HttpRequestUriTooLong": (_INVALID, "HTTP-request-URI-too-long", "the URL is too long"),
    "HttpRequestHeaderSectionSize": (
        _INVALID,
        "HTTP-request-header-section-size",
        "the request headers are too large",
    ),
    "HttpRequestHeaderSize": (_INVALID, "HTTP-request-header-size", "a request header is too large"),
    "HttpRequestTrailerSectionSize": (
        _INVALID,
        "HTTP-request-trailer-section-size",
        "the request trailers are too large",
    ),
    "HttpRequestTrailerSize": (_INVALID, "HTTP-request-trailer-size", "a request trailer is too large"),
    "HttpResponseIncomplete": (_TRANSPORT, "HTTP-response-incomplete", "the response ended early"),
    "HttpResponseHeaderSectionSize": (
        _TRANSPORT,
        "HTTP-response-header-section-size",
        "the response headers are too large",
    ),
    "HttpResponseHeaderSize": (_TRANSPORT, "HTTP-response-header-size", "a response header is too large"),
    "HttpResponseBodySize": (_TOO_LARGE, "HTTP-response-body-size", "the response body is too large"),
    "HttpResponseTrailerSectionSize": (
        _TRANSPORT,
        "HTTP-response-trailer-section-size",
        "the response trailers are too large",
    ),
    "HttpResponseTrailerSize": (_TRANSPORT, "HTTP-response-trailer-size", "a response trailer is too large"),
    "HttpResponseTransferCoding": (
        _TRANSPORT,
        "HTTP-response-transfer-coding",
        "the response's transfer coding is not supported",
    ),
    "HttpResponseContentCoding": (
        _TRANSPORT,
        "HTTP-response-content-coding",
        "the response's content coding is not supported",
    ),
    "HttpResponseTimeout": (_TIMEOUT, "HTTP-response-timeout", "the server did not answer in time"),
    "HttpUpgradeFailed": (_TRANSPORT, "HTTP-upgrade-failed", "the protocol upgrade failed"),
    "HttpProtocolError": (_TRANSPORT, "HTTP-protocol-error", "the server's answer broke the HTTP protocol"),
    "LoopDetected": (_TRANSPORT, "loop-detected", "a request loop was detected"),
    "ConfigurationError": (
        _TRANSPORT,
        "configuration-error",
        "the node's HTTP configuration refused the request",
    ),
    "InternalError": (_TRANSPORT, "internal-error", "the node failed to make the request"),
}


def _describe(code: Any) -> Tuple[str, str, str]:
    """Kind, interface name and readable description of an ``error-code``
    value (a generated ``ErrorCode_*`` dataclass)."""
    case = type(code).__name__.split("_", 1)[-1]
    kind, name, description = _CODES.get(
        case, (_TRANSPORT, case, "the node could not make the request")
    )
    payload = getattr(code, "value", None)
    if case == "DnsError" and getattr(payload, "rcode", None):
        description += f": {payload.rcode}"
    elif case == "TlsAlertReceived" and getattr(payload, "alert_message", None):
        description = f"the server sent a TLS alert: {payload.alert_message}"
    elif case == "HttpRequestBodySize" and isinstance(payload, int):
        description = f"the request body ({payload} bytes) does not match its Content-Length, or is larger than the node sends"
    elif case == "HttpResponseBodySize" and isinstance(payload, int):
        description += f" ({payload} bytes)"
    elif case in ("HttpResponseTransferCoding", "HttpResponseContentCoding") and isinstance(payload, str):
        which = "transfer" if case == "HttpResponseTransferCoding" else "content"
        description = f"the response's {which} coding `{payload}` is not supported"
    elif case == "InternalError" and isinstance(payload, str):
        description = f"the node failed to make the request: {payload}"
    return kind, name, description


#: How requests go out: over ``wasi:http`` in a built job; in plain CPython,
#: a function that fails every call (a test may put its own here).
transport: Callable[[PreparedRequest], Response] = (
    _no_transport if _t is None else _wasi_transport
)
