"""Client of cohort, the WebAssembly job coordinator.

```python
from cohort_client import Client

with Client(["http://127.0.0.1:7070"]) as client:
    jobs = [client.submit("wordcount.wasm", text) for text in texts]   # batched
    outputs = [job.json(timeout=60) for job in jobs]                   # one long-poll waiter
```

`Client` is blocking (threads), `AsyncClient` the same with coroutines. Both
follow clients/PROTOCOL.md: submissions batched within a linger window,
client-made idempotency keys, retries with backoff and jitter, one
long-poll waiter for every awaited job, failover across nodes, and one
error type, `CohortError`.
"""

from ._async import AsyncBlobReader, AsyncClient, AsyncJob
from ._blobs import BlobEntry, BlobInfo, BlobPage
from ._core import OutputBlob, __version__
from ._sync import BlobReader, Client, Job
from .errors import CohortError, JobFailed, WaitTimeout

__all__ = [
    "AsyncBlobReader",
    "AsyncClient",
    "AsyncJob",
    "BlobEntry",
    "BlobInfo",
    "BlobPage",
    "BlobReader",
    "Client",
    "CohortError",
    "Job",
    "JobFailed",
    "OutputBlob",
    "WaitTimeout",
    "__version__",
]
