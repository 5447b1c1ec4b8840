"""The asyncio client against real cohort nodes."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

from cohort_client import AsyncClient, BlobInfo, CohortError, JobFailed, WaitTimeout

from .conftest import Node, StartNode, all_job_ids

RESULT_TIMEOUT_S = 60.0
TEST_TIMEOUT_S = 120.0
#: A caller's trace id, sent in its traceparent.
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_async_client_does_the_same(
    start_node: StartNode, dead_url: str, echo_wasm: str, trap_wasm: str
) -> None:
    node = start_node("p1")
    idle = start_node("p2", slots=0)
    jobs_count = 1000

    async def main() -> None:
        async with AsyncClient([dead_url, node.url]) as client:
            jobs = [await client.submit(echo_wasm, f"job {i}".encode()) for i in range(jobs_count)]
            for i, job in enumerate(jobs):
                assert await job.result(timeout=RESULT_TIMEOUT_S) == f"job {i}".encode()
            ids = [await job.id for job in jobs]
            assert len(set(ids)) == jobs_count
            counts = client.request_counts()
            assert counts["POST /v1/jobs/batch"] <= jobs_count // 20, counts
            assert counts["POST /v1/jobs/wait"] <= jobs_count // 10, counts

            # Submissions from many tasks at once share batches too.
            many = await asyncio.gather(*(client.submit(echo_wasm, {"n": i}) for i in range(200)))
            assert [await job.json(timeout=RESULT_TIMEOUT_S) for job in many] == [{"n": i} for i in range(200)]
            assert await client.map(echo_wasm, ["a", b"b"], timeout=RESULT_TIMEOUT_S) == [b"a", b"b"]

            refused = await client.submit("0" * 64, b"x")
            with pytest.raises(CohortError) as error:
                await refused.id
            assert (error.value.code, error.value.status) == ("module_not_found", 422)

            trap = await client.submit(trap_wasm, b"x", max_attempts=1)
            with pytest.raises(JobFailed) as failed:
                await trap.result(timeout=RESULT_TIMEOUT_S)
            assert failed.value.code.startswith("trap") and failed.value.state == "dead"

            first = await client.submit(echo_wasm, "once", idempotency_key="async-key")
            first_id = await first.id
            second = await client.submit(echo_wasm, "once", idempotency_key="async-key")
            assert await second.id == first_id
            assert not await first.existing and await second.existing
            # In one batch, the server decides the two concurrently: either may
            # be the one that found the other.
            twins = [await client.submit(echo_wasm, "twin", idempotency_key="async-twin") for _ in range(2)]
            assert await twins[0].id == await twins[1].id
            assert sorted([await twins[0].existing, await twins[1].existing]) == [False, True]
            assert await (await client.get(await first.id)).text(timeout=RESULT_TIMEOUT_S) == "once"
            assert (await second.status())["state"] == "succeeded"
            # A client made with the caller's traceparent: its jobs are in the
            # caller's trace, and the node shows its id.
            async with client.with_traceparent(f"00-{TRACE}-00f067aa0ba902b7-01") as traced:
                in_trace = await traced.submit(echo_wasm, "traced")
                assert await in_trace.text(timeout=RESULT_TIMEOUT_S) == "traced"
                assert (await in_trace.status())["trace_id"] == TRACE
            assert "trace_id" not in await second.status()

        async with AsyncClient(idle.url) as client:
            queued = await client.submit(echo_wasm, b"never runs")
            with pytest.raises(WaitTimeout):
                await queued.result(timeout=0.3)
            assert (await queued.cancel())["state"] == "cancelled"
            with pytest.raises(JobFailed) as cancelled:
                await queued.result(timeout=RESULT_TIMEOUT_S)
            assert cancelled.value.code == "cancelled"
            assert queued.done()

            # Schedules and DAGs (this node runs nothing: they wait).
            made = await client.create_schedule("async-beat", echo_wasm, cron="0 0 * * *", timezone="Europe/Paris")
            assert made["timezone"] == "Europe/Paris" and len(made["upcoming"]) == 5
            assert [s["name"] for s in await client.schedules()] == ["async-beat"]
            await client.delete_schedule("async-beat")
            assert await client.schedules() == []
            dag = await client.submit_dag(
                [{"name": "a", "module": echo_wasm}, {"name": "b", "module": echo_wasm, "after": ["a"]}],
                on_failure="cancel_dag",
            )
            status = await client.dag(dag["id"])
            assert (status["state"], status["waiting"], status["on_failure"]) == ("running", 1, "cancel_dag")
            again = await client.submit_dag([{"name": "a", "module": echo_wasm}], idempotency_key="async-dag")
            same = await client.submit_dag([{"name": "a", "module": echo_wasm}], idempotency_key="async-dag")
            assert same["id"] == again["id"] and same["existing"]

    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT_S))
    assert len(all_job_ids(node.url)) == jobs_count + 200 + 2 + 1 + 1 + 1 + 1


def test_async_deployments(start_node: StartNode, dead_url: str, echo_wasm: str, trap_wasm: str) -> None:
    node = start_node("p1")

    async def main() -> None:
        async with AsyncClient(node.url) as client:
            made = await client.deploy("async-echo", echo_wasm)
            assert (made["version"], made["existing"]) == (1, False)
            assert (await client.deploy("async-echo", made["digest"]))["existing"]
            job = await client.submit("async-echo", "by name")
            assert await job.text(timeout=RESULT_TIMEOUT_S) == "by name"
            status = await job.status()
            assert (status["module_name"], status["module_version"]) == ("async-echo", 1)
            assert (await client.deploy("async-echo", trap_wasm))["version"] == 2
            back = await client.rollback("async-echo")
            assert (back["version"], back["digest"]) == (3, made["digest"])
            assert (await client.deployment("async-echo"))["current"]["rollback_of"] == 1
            assert [d["name"] for d in await client.deployments()] == ["async-echo"]
            granted = await client.grant("async-echo", ["https://api.example.com/v1/"], methods=["POST"])
            api = {"url": "https://api.example.com:443/v1/", "methods": ["POST"]}
            assert granted == {"name": "async-echo", "http": [api], "secrets": []}
            assert (await client.deployment("async-echo"))["grants"] == [api]
            with pytest.raises(CohortError) as bad:
                await client.grant("async-echo", "ftp://x")
            assert (bad.value.code, bad.value.status) == ("invalid_grant", 422)
            team = {"x-team": "ops"}
            with_headers = await client.grant("async-echo", "https://api.example.com/", headers=team)
            assert {"url": "https://api.example.com:443/", "headers": team} in with_headers["http"]
            assert await client.revoke("async-echo") == {"name": "async-echo", "http": [], "secrets": []}
            # No cluster key on this node: no secrets.
            with pytest.raises(CohortError) as unavailable:
                await client.set_secret("STRIPE", "sk_test_1")
            assert (unavailable.value.code, unavailable.value.status, unavailable.value.retryable) == (
                "secrets_unavailable",
                409,
                False,
            )
            assert await client.secrets() == []
            with pytest.raises(CohortError) as missing:
                await client.delete_secret("STRIPE")
            assert missing.value.code == "secret_not_found"
            assert client.request_counts()["DELETE /v1/secrets/STRIPE"] == 1
            assert (await client.deployment("async-echo"))["grants"] == []
            await client.undeploy("async-echo")
            assert await client.deployments() == []

        async with AsyncClient([dead_url, node.url]) as client:
            await client.deploy("async-twice", made["digest"])  # the dead node is skipped now
            with pytest.raises(CohortError) as nothing:
                await client.rollback("async-twice")
            assert nothing.value.code == "nothing_to_roll_back"
            assert client.request_counts()["POST /v1/deployments/async-twice/rollback"] == 1

    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT_S))


class _AsyncSource:
    """A binary stream whose ``read`` is a coroutine, giving at most
    ``piece`` bytes at a time (a socket's reader, say)."""

    def __init__(self, data: bytes, piece: int = 50_000) -> None:
        self._data = data
        self._at = 0
        self._piece = piece

    async def read(self, size: int = -1) -> bytes:
        await asyncio.sleep(0)
        size = self._piece if size < 0 else min(size, self._piece)
        chunk = self._data[self._at : self._at + size]
        self._at += len(chunk)
        return chunk


def test_async_blobs(node: Node, tmp_path: Path) -> None:
    def sha256(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    small = os.urandom(200_000)
    large = os.urandom((3 << 20) + 4_321)
    source = tmp_path / "large.bin"
    source.write_bytes(large)
    streamed = os.urandom((1 << 20) + 99)

    async def main() -> None:
        async with AsyncClient(node.url) as client:
            stored = await client.put_blob(small)
            assert stored == BlobInfo(sha256(small), len(small))
            assert await client.put_blob(small) == stored
            from_file = await client.put_blob_file(source)
            assert from_file == BlobInfo(sha256(large), len(large))
            assert await client.put_blob_file(str(source)) == from_file
            from_stream = await client.put_blob_stream(_AsyncSource(streamed))
            assert from_stream == BlobInfo(sha256(streamed), len(streamed))
            assert await client.put_blob_stream(_AsyncSource(streamed), sha256=sha256(streamed)) == from_stream

            for info in (stored, from_file, from_stream):
                assert await client.head_blob(info.digest) == info
            listed = await client.list_blobs()
            assert sorted((blob.info for blob in listed), key=lambda b: b.digest) == sorted(
                [stored, from_file, from_stream], key=lambda b: b.digest
            )
            assert all((blob.kept, blob.refs) == (True, 0) for blob in listed), listed

            async with client.open_blob(from_file.digest) as reader:
                assert (reader.size, reader.start, reader.length) == (len(large), 0, len(large))
                assert b"".join([chunk async for chunk in reader]) == large
            start, end = (1 << 20) - 3, (3 << 20) + 7
            async with client.open_blob(from_file.digest, start, end) as reader:
                assert (reader.start, reader.length) == (start, end - start)
                first = await reader.read(10)
                assert first + await reader.read() == large[start:end]
            reader = await client.open_blob(from_file.digest, -65_537)
            try:
                assert (reader.start, reader.length) == (len(large) - 65_537, 65_537)
                assert await reader.read() == large[-65_537:]
            finally:
                await reader.aclose()

            saved = tmp_path / "copy.bin"
            assert await client.get_blob_to_file(from_stream.digest, saved) == from_stream
            assert saved.read_bytes() == streamed
            assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]

            missing = sha256(b"never uploaded, async")
            assert await client.head_blob(missing) is None
            with pytest.raises(CohortError) as not_found:
                async with client.open_blob(missing):
                    pass
            assert (not_found.value.code, not_found.value.status) == ("blob_not_found", 404)
            with pytest.raises(CohortError) as not_found:
                await client.get_blob_to_file(missing, tmp_path / "missing.bin")
            assert not_found.value.code == "blob_not_found"
            assert not (tmp_path / "missing.bin").exists()
            with pytest.raises(CohortError) as past:
                await client.open_blob(stored.digest, len(small))
            assert (past.value.code, past.value.status) == ("range_not_satisfiable", 416)

            wrong = os.urandom(70_000)
            with pytest.raises(CohortError) as mismatch:
                await client.put_blob_stream(_AsyncSource(wrong), sha256=sha256(b"not these bytes"))
            assert (mismatch.value.code, mismatch.value.status) == ("blob_digest_mismatch", 422)
            assert await client.head_blob(sha256(wrong)) is None
            assert len(await client.list_blobs()) == 3

            # Nothing names it: no longer kept (the node's copy stays for its
            # grace period), then unknown to the cluster.
            assert await client.delete_blob(stored.digest) is None
            with pytest.raises(CohortError) as again:
                await client.delete_blob(stored.digest)
            assert (again.value.code, again.value.status) == ("blob_not_found", 404)
            kept = {blob.digest: blob.kept for blob in await client.list_blobs()}
            assert kept == {stored.digest: False, from_file.digest: True, from_stream.digest: True}, kept

    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT_S))
