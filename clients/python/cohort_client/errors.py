"""The one error type of the client, and its two kinds for waiting."""

from __future__ import annotations

from typing import Any, Optional, Tuple


class CohortError(Exception):
    """Every failure the client reports.

    Attributes:
        code: the server's stable code ("Error codes" in
            docs/http-api.md), a job's own failure code, or one of the
            client's: ``unreachable`` (no node answered within the retry
            deadline), ``wait_timeout``, ``closed`` (the client was closed),
            ``bad_answer`` (a node answered something that is not the API's
            format); and the server's ``blob_digest_mismatch``, with no
            ``status``, when the client finds a download's bytes are not
            its digest's, or a file changed while it was uploaded.
        message: an explanation for people.
        status: the HTTP status of the answer that carried the error; for
            a job a batch's answer refused, the status the server answers
            its code with (what the job, submitted alone, would have got);
            ``None`` when no answer carried it (a transport failure, a
            job's own failure).
        retryable: whether the same request, sent again later, may succeed.
    """

    def __init__(
        self, code: str, message: str, status: Optional[int] = None, retryable: bool = False
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.retryable = retryable

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        return (CohortError, (self.code, self.message, self.status, self.retryable))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, "
            f"status={self.status!r}, retryable={self.retryable!r})"
        )


class JobFailed(CohortError):
    """A job ended without succeeding: ``failed``, ``dead`` or ``cancelled``.

    ``code`` is the job's own error code (``trap``, ``timeout``,
    ``memory_limit``, ``job_error``..., or ``cancelled``).
    """

    def __init__(self, job_id: int, state: str, code: str, message: str) -> None:
        super().__init__(code, message)
        self.job_id = job_id
        self.state = state

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        return (JobFailed, (self.job_id, self.state, self.code, self.message))


class WaitTimeout(CohortError):
    """``result()`` gave up after its ``timeout``; the job goes on."""

    def __init__(self, timeout: float) -> None:
        super().__init__("wait_timeout", f"the job did not finish within {timeout:g} s", None, True)
        self.timeout = timeout

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        return (WaitTimeout, (self.timeout,))
