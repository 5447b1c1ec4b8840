"""The blocking client against real cohort nodes."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from cohort_client import BlobEntry, BlobInfo, Client, CohortError, JobFailed, WaitTimeout

from .conftest import KeyedNode, Node, StartNode, all_job_ids

RESULT_TIMEOUT_S = 60.0
#: A caller's trace id, sent in its traceparent.
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_a_loop_of_submissions_is_batched_and_awaited_together(node: Node, echo_wasm: str) -> None:
    jobs_count = 2000
    with Client(node.url) as client:
        jobs = [client.submit(echo_wasm, f"job {i}".encode()) for i in range(jobs_count)]
        for i, job in enumerate(jobs):
            assert job.result(timeout=RESULT_TIMEOUT_S) == f"job {i}".encode()
        counts = client.request_counts()
    assert len({job.id for job in jobs}) == jobs_count
    assert counts["POST /v1/modules"] == 1
    # One request per linger window (or per full batch), not per job.
    assert counts["POST /v1/jobs/batch"] <= jobs_count // 20, counts
    # One long-poll answers for many jobs.
    assert counts["POST /v1/jobs/wait"] <= jobs_count // 10, counts
    assert "POST /v1/jobs" not in counts and "GET /v1/jobs/{id}" not in counts, counts


def test_keys_uniqueness_and_the_trace_context_reach_the_master(node: Node, echo_wasm: str) -> None:
    with Client(node.url) as client:
        limited = client.submit(echo_wasm, "a", concurrency_key="api", concurrency_limit=2, rate_limit=10)
        first = client.submit(echo_wasm, "b", unique_key="daily", unique_window_ms=3_600_000)
        assert limited.result(timeout=RESULT_TIMEOUT_S) == b"a"
        assert first.result(timeout=RESULT_TIMEOUT_S) == b"b"
        status = limited.status()
        assert (status["concurrency_key"], status["concurrency_limit"], status["rate_limit"]) == ("api", 2, 10)
        # Within the window, another input: the first job.
        second = client.submit(echo_wasm, "c", unique_key="daily", unique_window_ms=3_600_000)
        assert second.result(timeout=RESULT_TIMEOUT_S) == b"b"
        assert second.id == first.id and second.existing
        with pytest.raises(CohortError) as refused:
            client.submit(echo_wasm, "d", rate_limit=5).result(timeout=RESULT_TIMEOUT_S)
        assert refused.value.code == "invalid_job" and "concurrency_key" in str(refused.value)

        # A client made with the caller's traceparent puts its jobs in the
        # caller's trace: the node shows the trace id (and, exporting no
        # spans, none for a job submitted without one).
        with client.with_traceparent(f"00-{TRACE}-00f067aa0ba902b7-01") as traced:
            job = traced.submit(echo_wasm, "traced")
            assert job.result(timeout=RESULT_TIMEOUT_S) == b"traced"
            assert job.status()["trace_id"] == TRACE
            assert "trace_id" not in limited.status()
            # Every request carries it, a DAG's submission too.
            dag = traced.submit_dag([{"name": "a", "module": echo_wasm, "input": "in a DAG"}])
            assert client.get(dag["jobs"][0]).status()["trace_id"] == TRACE


def test_schedules_and_dags(node: Node, echo_wasm: str) -> None:
    with Client(node.url) as client:
        created = client.create_schedule("py-beat", echo_wasm, "tick", every_ms=1000, overlap="allow_all")
        assert created["every_ms"] == 1000 and created["overlap"] == "allow_all"
        assert created["namespace"] == "default"
        assert created["upcoming"][0] == created["created_at"] + 1000
        assert [s["name"] for s in client.schedules()] == ["py-beat"]
        # The first tick fires: its job is in the schedule's record.
        deadline = time.monotonic() + RESULT_TIMEOUT_S
        while client.schedule("py-beat")["fired_total"] == 0:
            assert time.monotonic() < deadline, "no tick fired"
            time.sleep(0.05)
        job = client.get(client.schedule("py-beat")["last_job"])
        assert job.result(timeout=RESULT_TIMEOUT_S) == b"tick"
        assert client.pause_schedule("py-beat")["paused"]
        assert not client.resume_schedule("py-beat")["paused"]
        assert client.backfill("py-beat") == []
        client.delete_schedule("py-beat")
        with pytest.raises(CohortError) as refused:
            client.schedule("py-beat")
        assert refused.value.code == "schedule_not_found"
        with pytest.raises(CohortError) as refused:
            client.create_schedule("bad", echo_wasm, cron="61 * * * *")
        assert refused.value.code == "invalid_schedule" and "cron" in str(refused.value)

        dag = client.submit_dag(
            [
                {"name": "a", "module": echo_wasm, "input": "A"},
                {"name": "b", "module": echo_wasm, "input": "B", "after": ["a"]},
            ]
        )
        child = client.get(dag["jobs"][1])
        envelope = child.json(timeout=RESULT_TIMEOUT_S)
        assert envelope == {"input": "B", "parents": [{"id": dag["jobs"][0], "name": "a", "output": "A", "blobs": []}]}
        assert client.dag(dag["id"])["state"] == "succeeded"
        late = client.submit(echo_wasm, "C", after=[dag["jobs"][0]])
        assert late.json(timeout=RESULT_TIMEOUT_S)["parents"][0]["output"] == "A"
        with pytest.raises(CohortError) as refused:
            client.submit_dag([{"name": "x", "module": echo_wasm, "after": ["x"]}])
        assert refused.value.code == "invalid_dag"


def test_deployments_name_modules_and_roll_back(node: Node, dead_url: str, echo_wasm: str, trap_wasm: str) -> None:
    with Client(node.url) as client:
        echo = client.upload(echo_wasm)
        first = client.deploy("py-echo", echo_wasm)
        assert first == {"name": "py-echo", "version": 1, "digest": echo, "existing": False}
        # Safe to repeat: the same module again makes no version (by digest too).
        assert client.deploy("py-echo", echo_wasm)["existing"]
        assert client.deploy("py-echo", echo) == {**first, "existing": True}

        # Jobs, schedules and DAG jobs name their module by the name.
        job = client.submit("py-echo", "by name")
        assert job.text(timeout=RESULT_TIMEOUT_S) == "by name"
        status = job.status()
        assert (status["module"], status["module_name"], status["module_version"]) == (echo, "py-echo", 1)
        assert client.map("py-echo", ["a", "b"], timeout=RESULT_TIMEOUT_S) == [b"a", b"b"]
        dag = client.submit_dag([{"name": "a", "module": "py-echo", "input": "in a DAG"}])
        assert client.get(dag["jobs"][0]).text(timeout=RESULT_TIMEOUT_S) == "in a DAG"
        client.create_schedule("py-named", "py-echo", cron="0 0 * * *")
        with pytest.raises(CohortError) as in_use:
            client.undeploy("py-echo")
        assert (in_use.value.code, in_use.value.status) == ("module_name_in_use", 409)
        client.delete_schedule("py-named")

        # A deploy changes what later jobs run, never what an accepted one runs.
        trap = client.deploy("py-echo", trap_wasm)
        assert (trap["version"], trap["existing"]) == (2, False) and trap["digest"] != echo
        with pytest.raises(JobFailed):
            client.submit("py-echo", "x", max_attempts=1).result(timeout=RESULT_TIMEOUT_S)
        assert job.status()["module"] == echo

        back = client.rollback("py-echo")
        assert (back["version"], back["digest"], back["existing"]) == (3, echo, False)
        assert client.submit("py-echo", "rolled back").text(timeout=RESULT_TIMEOUT_S) == "rolled back"
        assert client.rollback("py-echo", to=2)["digest"] == trap["digest"]
        shown = client.deployment("py-echo")
        assert shown["current"]["version"] == 4 and shown["current"]["rollback_of"] == 2
        assert shown["versions_total"] == 4
        assert [v["version"] for v in shown["versions"]] == [4, 3, 2, 1]
        listed = client.deployments()
        assert [(d["name"], d["current"]["version"]) for d in listed] == [("py-echo", 4)]
        with pytest.raises(CohortError) as not_kept:
            client.rollback("py-echo", to=99)
        assert not_kept.value.code == "module_version_not_found"

        client.deploy("py-once", echo)
        with pytest.raises(CohortError) as nothing:
            client.rollback("py-once")
        assert (nothing.value.code, nothing.value.status) == ("nothing_to_roll_back", 409)
        client.undeploy("py-echo")
        with pytest.raises(CohortError) as gone:
            client.deployment("py-echo")
        assert gone.value.code == "module_name_not_found"
        assert [d["name"] for d in client.deployments()] == ["py-once"]
        # A string in a name's shape that no file has is a name, not a path.
        with pytest.raises(CohortError) as unknown:
            client.submit("py-echo", "x").id
        assert unknown.value.code == "module_name_not_found"
        with pytest.raises(CohortError) as invalid:
            client.deploy("Not_A_Name", echo)
        assert invalid.value.code == "invalid_module_name"
        client.deploy("py-twice", echo)
        client.deploy("py-twice", trap["digest"])

    # A rollback is sent once: after a failure it is not retried on the next
    # node (it might have rolled back already); the next call goes there.
    with Client([dead_url, node.url]) as client:
        with pytest.raises(CohortError) as unreachable:
            client.rollback("py-twice")
        assert unreachable.value.code == "unreachable"
        assert client.request_counts()["POST /v1/deployments/py-twice/rollback"] == 1
        assert client.deployment("py-twice")["current"]["version"] == 2
        assert client.rollback("py-twice")["version"] == 3


def test_grants_say_what_a_deployment_may_call(node: Node, echo_wasm: str) -> None:
    with Client(node.url) as client:
        client.deploy("py-granted", echo_wasm)
        assert client.deployment("py-granted")["grants"] == []
        api = {"url": "https://api.example.com:443/v1/", "methods": ["POST"]}
        granted = client.grant("py-granted", ["https://api.example.com/v1/"], methods=["POST"])
        assert granted == {"name": "py-granted", "http": [api], "secrets": []}
        # Safe to repeat (and retried): a grant the name has is not added twice.
        assert client.grant("py-granted", "https://api.example.com/v1/", methods=["post"]) == granted
        assert client.deployment("py-granted")["grants"] == [api]
        assert [d["grants"] for d in client.deployments()] == [[api]]
        # A dict is granted as it is.
        internal = {"url": "http://10.0.0.5:8080/", "private": True}
        both = client.grant("py-granted", [{"url": "http://10.0.0.5:8080", "private": True}])["http"]
        assert sorted(both, key=lambda g: g["url"]) == [internal, api]

        with pytest.raises(CohortError) as bad:
            client.grant("py-granted", "ftp://x")
        assert (bad.value.code, bad.value.status, bad.value.retryable) == ("invalid_grant", 422, False)
        with pytest.raises(CohortError) as unknown:
            client.grant("py-nowhere", "https://api.example.com/")
        assert unknown.value.code == "module_name_not_found"
        assert len(client.deployment("py-granted")["grants"]) == 2

        # A revoke takes a grant as it was given: URL, methods, private flag.
        assert len(client.revoke("py-granted", "https://api.example.com/v1/")["http"]) == 2
        after = client.revoke("py-granted", "https://api.example.com/v1/", methods=["POST"])
        assert after == {"name": "py-granted", "http": [internal], "secrets": []}
        # None: every grant.
        assert client.revoke("py-granted") == {"name": "py-granted", "http": [], "secrets": []}
        assert client.deployment("py-granted")["grants"] == []
        assert client.revoke("py-granted")["http"] == []
        assert client.request_counts()["DELETE /v1/deployments/py-granted/grants"] == 2


def test_secrets_need_a_cluster_key_and_grants_carry_headers(node: Node, echo_wasm: str) -> None:
    # The node has no cluster key: nothing would protect a secret on disk.
    with Client(node.url) as client:
        with pytest.raises(CohortError) as unavailable:
            client.set_secret("STRIPE", "sk_test_1")
        assert (unavailable.value.code, unavailable.value.status, unavailable.value.retryable) == (
            "secrets_unavailable",
            409,
            False,
        )
        assert client.request_counts()["POST /v1/secrets/STRIPE"] == 1
        with pytest.raises(CohortError) as invalid:
            client.set_secret("not a name", "x")
        assert (invalid.value.code, invalid.value.status) == ("invalid_secret", 422)
        assert client.secrets() == []
        with pytest.raises(CohortError) as missing:
            client.delete_secret("STRIPE")
        assert (missing.value.code, missing.value.status) == ("secret_not_found", 404)
        assert client.request_counts()["DELETE /v1/secrets/STRIPE"] == 1

        # A grant's headers: set by the node on the requests it allows.
        client.deploy("py-headers", echo_wasm)
        team = {"x-team": "ops"}
        granted = client.grant("py-headers", "https://api.example.com/v1/", headers=team)
        assert granted == {"name": "py-headers", "http": [{"url": "https://api.example.com:443/v1/", "headers": team}], "secrets": []}
        assert client.deployment("py-headers")["grants"] == granted["http"]
        with pytest.raises(CohortError) as unknown:
            client.grant("py-headers", "https://api.stripe.com/", headers={"authorization": "Bearer {secret:STRIPE}"})
        assert (unknown.value.code, unknown.value.status) == ("secret_not_found", 404)
        # A revoke names the headers it was granted with.
        assert len(client.revoke("py-headers", "https://api.example.com/v1/")["http"]) == 1
        assert client.revoke("py-headers", "https://api.example.com/v1/", headers=team)["http"] == []


def test_inputs_outputs_and_handles(node: Node, echo_wasm: str) -> None:
    large = os.urandom(100 << 10)  # over the 64 KiB a wait answer carries inline
    with Client([node.url]) as client:
        digest = client.upload(echo_wasm)
        assert len(digest) == 64 and client.upload(echo_wasm) == digest
        as_text = client.submit(digest, "héllo")
        as_json = client.submit(echo_wasm, {"numbers": [1, 2, 3]})
        as_bytes = client.submit(echo_wasm, large, priority=5, timeout_ms=10_000, memory_bytes=64 << 20)
        empty = client.submit(echo_wasm)
        assert as_text.text(timeout=RESULT_TIMEOUT_S) == "héllo"
        assert as_json.json(timeout=RESULT_TIMEOUT_S) == {"numbers": [1, 2, 3]}
        assert as_bytes.result(timeout=RESULT_TIMEOUT_S) == large
        assert empty.result(timeout=RESULT_TIMEOUT_S) == b""
        assert as_text.done() and not as_text.existing
        assert as_text.idempotency_key is not None and as_text.idempotency_key.startswith("py-")
        assert as_text.idempotency_key != as_json.idempotency_key

        status = as_bytes.status()
        assert status["id"] == as_bytes.id
        assert status["state"] == "succeeded"
        assert status["priority"] == 5 and status["timeout_ms"] == 10_000
        assert status["idempotency_key"] == as_bytes.idempotency_key
        # What it cost: its one attempt's usage is the job's.
        assert status["usage"]["cpu_us"] > 0 and status["usage"]["memory_peak_bytes"] >= 100 << 10
        assert status["attempts"][0]["usage"] == status["usage"]

        again = client.get(as_json.id)
        assert again.json(timeout=RESULT_TIMEOUT_S) == {"numbers": [1, 2, 3]}
        assert client.map(digest, [b"a", "b", [3]], timeout=RESULT_TIMEOUT_S) == [b"a", b"b", b"[3]"]
        assert client.request_counts()["GET /v1/jobs/{id}/result"] == 1
        assert client.request_counts()["POST /v1/modules"] == 1


def test_refusals_failures_and_cancels(start_node: StartNode, echo_wasm: str, trap_wasm: str) -> None:
    node = start_node("p1")
    with Client(node.url) as client:
        unknown = client.submit("0" * 64, b"x")
        trap = client.submit(trap_wasm, b"x", max_attempts=1)
        with pytest.raises(CohortError) as refused:
            unknown.id
        assert refused.value.code == "module_not_found" and not refused.value.retryable
        assert refused.value.status == 422, "a refused item has its code's status, as alone"
        with pytest.raises(CohortError) as again:
            unknown.result(timeout=RESULT_TIMEOUT_S)
        assert again.value.code == "module_not_found"
        assert unknown.done()

        with pytest.raises(JobFailed) as failed:
            trap.result(timeout=RESULT_TIMEOUT_S)
        assert failed.value.code.startswith("trap"), failed.value
        assert failed.value.state == "dead" and failed.value.job_id == trap.id
        assert trap.status()["state"] == "dead"

        with pytest.raises(CohortError) as not_found:
            client.get(10**12).result(timeout=RESULT_TIMEOUT_S)
        assert not_found.value.code == "job_not_found"

        finished = client.submit(echo_wasm, b"done")
        finished.result(timeout=RESULT_TIMEOUT_S)
        with pytest.raises(CohortError) as too_late:
            finished.cancel()
        assert too_late.value.code == "job_finished" and too_late.value.status == 409

    # A node that runs nothing: its jobs stay queued until cancelled.
    idle = start_node("p2", slots=0)
    with Client(idle.url) as client:
        queued = client.submit(echo_wasm, b"never runs")
        with pytest.raises(WaitTimeout):
            queued.result(timeout=0.3)
        assert queued.status()["state"] == "queued"
        assert queued.cancel()["state"] == "cancelled"
        assert queued.cancel()["state"] == "cancelled"
        with pytest.raises(JobFailed) as cancelled:
            queued.result(timeout=RESULT_TIMEOUT_S)
        assert cancelled.value.code == "cancelled" and cancelled.value.state == "cancelled"


def test_idempotency_key_gives_the_same_job(node: Node, echo_wasm: str) -> None:
    with Client(node.url) as client:
        first = client.submit(echo_wasm, b"once", idempotency_key="test-key-1")
        first_id = first.id
        second = client.submit(echo_wasm, b"once", idempotency_key="test-key-1")
        assert second.id == first_id
        assert not first.existing and second.existing
        assert second.idempotency_key == "test-key-1"
        assert first.result(timeout=RESULT_TIMEOUT_S) == second.result(timeout=RESULT_TIMEOUT_S) == b"once"
        conflict = client.submit(echo_wasm, b"other input", idempotency_key="test-key-1")
        with pytest.raises(CohortError) as refused:
            conflict.id
        assert refused.value.code == "idempotency_conflict"
    assert all_job_ids(node.url) == [first_id]


def test_unreachable_after_the_retry_deadline(dead_url: str, echo_wasm: str) -> None:
    with Client(dead_url, retry_deadline_s=0.5) as client:
        job = client.submit("0" * 64, b"x")
        with pytest.raises(CohortError) as unreachable:
            job.id
        assert unreachable.value.code == "unreachable" and unreachable.value.retryable
        with pytest.raises(CohortError) as upload:
            client.upload(echo_wasm)
        assert upload.value.code == "unreachable"
        assert client.request_counts()["POST /v1/jobs/batch"] > 1  # retried


def test_failover_past_a_dead_node(node: Node, dead_url: str, echo_wasm: str) -> None:
    with Client([dead_url, node.url]) as client:
        inputs = [f"input {i}".encode() for i in range(300)]
        assert client.map(echo_wasm, inputs, timeout=RESULT_TIMEOUT_S) == inputs
        counts = client.request_counts()
    # The dead node is skipped after its first refusal, not tried per request.
    assert counts["POST /v1/jobs/batch"] <= 300 // 10, counts


def test_failover_when_the_first_node_dies_mid_loop(start_node: StartNode, echo_wasm: str) -> None:
    first = start_node("p1")
    # Not a back-end node: two voters could not lose one.
    second = start_node("p2", seed=first, roles="worker,front-end")
    jobs_count = 2000
    with Client([second.url, first.url]) as client:
        digest = client.upload(echo_wasm)
        jobs = []
        for i in range(jobs_count):
            jobs.append(client.submit(digest, f"job {i}".encode()))
            if i == 300:
                jobs[0].result(timeout=RESULT_TIMEOUT_S)
            if i == 1000:
                os.kill(second.process.pid, signal.SIGKILL)
        for i, job in enumerate(jobs):
            assert job.result(timeout=RESULT_TIMEOUT_S) == f"job {i}".encode()
    ids = [job.id for job in jobs]
    assert len(set(ids)) == jobs_count
    # Every submission made exactly one job, retries included.
    assert sorted(all_job_ids(first.url)) == sorted(ids)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_blobs_go_up_and_come_back_whole_and_by_range(node: Node, tmp_path: Path) -> None:
    directory = tmp_path
    small = os.urandom(300_000)
    # A few MiB, not a multiple of the client's 1 MiB chunks.
    large = os.urandom((3 << 20) + 12_345)
    source = directory / "large.bin"
    source.write_bytes(large)
    streamed = os.urandom((2 << 20) + 777)

    with Client(node.url) as client:
        # Bytes: the digest is the sha256 of the bytes; again, the same.
        stored = client.put_blob(small)
        assert stored == BlobInfo(sha256(small), len(small))
        assert client.put_blob(small) == stored

        # A file, streamed from disk.
        from_file = client.put_blob_file(source)
        assert from_file == BlobInfo(sha256(large), len(large))
        assert client.put_blob_file(source) == from_file
        assert client.put_blob(large) == from_file, "the file's bytes, sent as bytes: the same blob"

        # A stream of unknown length (a pipe, written by a thread as it is read).
        def pipe_of(data: bytes) -> "io.BufferedReader":
            read_end, write_end = os.pipe()

            def write() -> None:
                with os.fdopen(write_end, "wb") as pipe:
                    for at in range(0, len(data), 65_536):
                        pipe.write(data[at : at + 65_536])

            threading.Thread(target=write, daemon=True).start()
            return os.fdopen(read_end, "rb")

        with pipe_of(streamed) as pipe:
            from_stream = client.put_blob_stream(pipe)
        assert from_stream == BlobInfo(sha256(streamed), len(streamed))
        with pipe_of(streamed) as pipe:
            assert client.put_blob_stream(pipe, sha256=sha256(streamed)) == from_stream

        # HEAD and the list.
        for info in (stored, from_file, from_stream):
            assert client.head_blob(info.digest) == info
        listed = client.list_blobs()
        assert {stored, from_file, from_stream} == {blob.info for blob in listed}, listed
        assert len(listed) == 3, "each blob listed once"
        # Kept by the cluster, named by nothing: collected after the
        # retention time (1 h by default) from the last upload.
        now_ms = time.time() * 1000
        for blob in listed:
            assert (blob.kept, blob.refs) == (True, 0), blob
            assert blob.collect_at is not None and now_ms < blob.collect_at <= now_ms + 3_600_000 + 60_000, blob
        # The cluster's listing, a page at a time, by digest.
        first = client.kept_blobs(limit=2)
        by_digest = sorted(listed, key=lambda b: b.digest)
        assert (first.blobs, first.next) == (by_digest[:2], by_digest[1].digest), first
        last = client.kept_blobs(after=first.next.upper())
        assert (last.blobs, last.next) == (by_digest[2:], None), last

        # Whole, a middle range, a suffix (the last bytes), an end past the blob's.
        with client.open_blob(from_file.digest) as reader:
            assert (reader.digest, reader.size, reader.start, reader.length) == (
                from_file.digest,
                len(large),
                0,
                len(large),
            )
            assert reader.read() == large
        middle = (1 << 20) - 5, (2 << 20) + 9  # across chunk boundaries
        with client.open_blob(from_file.digest, *middle) as reader:
            assert (reader.size, reader.start, reader.length) == (len(large), middle[0], middle[1] - middle[0])
            parts = []
            while True:
                part = reader.read(100_000)
                if not part:
                    break
                parts.append(part)
            assert b"".join(parts) == large[middle[0] : middle[1]]
        with client.open_blob(from_file.digest, -4321) as reader:
            assert (reader.start, reader.length) == (len(large) - 4321, 4321)
            assert reader.read() == large[-4321:]
        with client.open_blob(from_file.digest, start=len(large) - 10, end=len(large) + 1000) as reader:
            assert reader.read() == large[-10:]
        with client.open_blob(stored.digest, start=len(small) - 1) as reader:
            assert reader.read() == small[-1:]
        with client.open_blob(stored.digest, -(len(small) + 100)) as reader:
            assert reader.read() == small, "a suffix longer than the blob: the whole blob"
        with client.open_blob(from_stream.digest, 0, 1) as reader:
            assert list(reader.iter_chunks()) == [streamed[:1]]

        # Saved to a file: the same bytes, and no partial file left beside it.
        saved = directory / "saved" / "copy.bin"
        saved.parent.mkdir()
        assert client.get_blob_to_file(from_file.digest, saved) == from_file
        assert saved.read_bytes() == large
        assert client.get_blob_to_file(from_stream.digest, str(saved)) == from_stream
        assert saved.read_bytes() == streamed, "an existing file is replaced"
        assert sorted(p.name for p in saved.parent.iterdir()) == ["copy.bin"]

        # A blob the cluster does not have.
        missing = sha256(b"never uploaded")
        assert client.head_blob(missing) is None
        with pytest.raises(CohortError) as not_found:
            client.open_blob(missing)
        assert (not_found.value.code, not_found.value.status) == ("blob_not_found", 404)
        with pytest.raises(CohortError) as not_found:
            client.open_blob(missing, 10, 20)
        assert not_found.value.code == "blob_not_found"
        with pytest.raises(CohortError) as not_found:
            client.get_blob_to_file(missing, directory / "missing.bin")
        assert not_found.value.code == "blob_not_found"
        assert not (directory / "missing.bin").exists()

        # A range that starts past the end.
        for start, end in ((len(small), None), (len(small) + 10, len(small) + 20)):
            with pytest.raises(CohortError) as past:
                client.open_blob(stored.digest, start, end)
            assert (past.value.code, past.value.status) == ("range_not_satisfiable", 416), (start, end)

        # A stream whose bytes are not the sha256 it names: refused, nothing kept.
        wrong = os.urandom(100_000)
        with pytest.raises(CohortError) as mismatch:
            client.put_blob_stream(io.BytesIO(wrong), sha256=sha256(b"something else"))
        assert (mismatch.value.code, mismatch.value.status) == ("blob_digest_mismatch", 422)
        assert client.head_blob(sha256(wrong)) is None
        assert client.head_blob(sha256(b"something else")) is None
        assert sorted(client.list_blobs(), key=lambda b: b.digest) == sorted(listed, key=lambda b: b.digest)
        counts = client.request_counts()
    assert counts["PUT /v1/blobs"] == 8, counts


def test_a_job_streams_its_input_blob_and_writes_an_output_blob(
    node: Node, wordcount_wasm: str, tmp_path: Path
) -> None:
    # wordcount, given an input blob, streams it and writes `counts.tsv`:
    # every word and its count, by count descending then word ascending.
    text = "The cat and the hat and the bat\n" * 50 + "zebra"
    expected = "the\t150\nand\t100\nbat\t50\ncat\t50\nhat\t50\nzebra\t1\n"
    with Client(node.url) as client:
        info = client.put_blob(text.encode())
        job = client.submit(wordcount_wasm, input_blob=info)
        result = job.json(timeout=RESULT_TIMEOUT_S)
        assert (result["words"], result["unique"]) == (401, 6), result
        assert result["top"][0] == {"word": "the", "count": 150}, result
        outputs = job.outputs()
        assert [blob.name for blob in outputs] == ["counts.tsv"], outputs
        counts = outputs[0]
        assert counts.bytes == len(expected)
        view = job.status()
        assert view["input_blob"] == {"digest": info.digest, "bytes": info.bytes}, view
        assert view["outputs"] == [{"name": "counts.tsv", "digest": counts.digest, "bytes": counts.bytes}], view
        # Downloaded as any blob, its sha256 checked.
        saved = tmp_path / "counts.tsv"
        assert client.get_blob_to_file(counts.digest, saved) == BlobInfo(counts.digest, counts.bytes)
        lines = saved.read_text().splitlines()
        top = result["top"][0]
        assert lines[0] == f"{top['word']}\t{top['count']}"
        assert saved.read_text() == expected
        # A job without a blob: none in its view, none written.
        inline = client.submit(wordcount_wasm, "a b a")
        assert inline.json(timeout=RESULT_TIMEOUT_S)["words"] == 3
        assert inline.outputs() == []
        view = inline.status()
        assert "input_blob" not in view and "outputs" not in view, view
        # A blob the cluster does not have, and a digest that is not one.
        missing = client.submit(wordcount_wasm, input_blob=sha256(b"never uploaded"))
        with pytest.raises(CohortError) as refused:
            missing.id
        assert (refused.value.code, refused.value.status) == ("blob_not_found", 404)
        malformed = client.submit(wordcount_wasm, input_blob="not-a-digest")
        with pytest.raises(CohortError) as refused:
            malformed.id
        assert (refused.value.code, refused.value.status) == ("invalid_job", 422)


def test_a_blob_nothing_names_is_deleted_and_one_a_job_or_schedule_names_is_not(node: Node, echo_wasm: str) -> None:
    with Client(node.url) as client:
        loose = client.put_blob(b"nothing names these bytes")
        named = client.put_blob(b"a job reads these bytes")
        scheduled = client.put_blob(b"a schedule's jobs read these bytes")

        # Nothing names it: no longer kept at once, then unknown to the cluster.
        assert client.delete_blob(loose.digest.upper()) is None, "either case"
        with pytest.raises(CohortError) as again:
            client.delete_blob(loose.digest)
        assert (again.value.code, again.value.status) == ("blob_not_found", 404)
        # A job may no longer name it (upload it again first).
        with pytest.raises(CohortError) as refused:
            client.submit(echo_wasm, "x", input_blob=loose).id
        assert (refused.value.code, refused.value.status) == ("blob_not_found", 404)

        # A held job names it, finished or not: refused while the job is held.
        job = client.submit(echo_wasm, "reads a blob", input_blob=named)
        assert job.result(timeout=RESULT_TIMEOUT_S) == b"reads a blob"
        with pytest.raises(CohortError) as in_use:
            client.delete_blob(named.digest)
        assert (in_use.value.code, in_use.value.status) == ("blob_in_use", 409)
        assert not in_use.value.retryable

        # A schedule's template names it while the schedule exists.
        client.create_schedule("py-blob-reader", echo_wasm, "tick", input_blob=scheduled, every_ms=3_600_000)
        with pytest.raises(CohortError) as in_use:
            client.delete_blob(scheduled.digest)
        assert in_use.value.code == "blob_in_use"

        # What the node lists: the copies it still has (deleted after its
        # grace period), each with what the cluster says of it.
        listed = {blob.digest: blob for blob in client.list_blobs()}
        assert listed[loose.digest] == BlobEntry(loose.digest, loose.bytes, kept=False, refs=0), listed
        assert listed[named.digest] == BlobEntry(named.digest, named.bytes, kept=True, refs=1), listed
        assert listed[scheduled.digest] == BlobEntry(scheduled.digest, scheduled.bytes, kept=True, refs=1), listed

        # The schedule gone, nothing names it: deleted at once.
        client.delete_schedule("py-blob-reader")
        listed = {blob.digest: blob for blob in client.list_blobs()}
        assert (listed[scheduled.digest].refs, listed[scheduled.digest].collect_at is not None) == (0, True)
        client.delete_blob(scheduled.digest)
        with pytest.raises(CohortError) as gone:
            client.delete_blob(scheduled.digest)
        assert gone.value.code == "blob_not_found"
        # Uploaded again, kept again.
        assert client.put_blob(b"nothing names these bytes") == loose
        assert {blob.digest: blob for blob in client.list_blobs()}[loose.digest].kept is True
        # Purged, the blob a finished job read goes with that job.
        assert client.purge_blob(named.digest) == 1
        with pytest.raises(CohortError) as gone:
            job.status()
        assert gone.value.code == "job_expired"
        with pytest.raises(CohortError) as gone:
            client.purge_blob(named.digest)
        assert (gone.value.code, gone.value.status) == ("blob_not_found", 404)
        counts = client.request_counts()
    assert counts["DELETE /v1/blobs/{digest}"] == 6, counts


def test_a_namespaces_token_sees_its_own_jobs_and_nothing_of_anothers(keyed_node: KeyedNode, echo_wasm: str) -> None:
    admin = keyed_node.token("admin")
    team_a = keyed_node.token("submit,read", namespace="py-team-a")
    team_b = keyed_node.token("submit,read", namespace="py-team-b")
    url = keyed_node.url
    with Client(url, token=admin) as root, Client(url, token=team_a) as a, Client(url, token=team_b) as b:
        # Modules are cluster-wide: uploaded by a cluster-wide token; a
        # confined one may not, and names the module by its digest.
        digest = root.upload(echo_wasm)
        assert a.upload(echo_wasm) == digest
        with pytest.raises(CohortError) as forbidden:
            a.secrets()
        assert (forbidden.value.code, forbidden.value.status) == ("forbidden", 403)

        mine = a.submit(digest, b"team a's")
        assert mine.result(timeout=RESULT_TIMEOUT_S) == b"team a's"
        assert mine.status()["namespace"] == "py-team-a"

        # Team b learns nothing of it: the answer of a job that never was.
        with pytest.raises(CohortError) as unknown:
            b.get(mine.id).status()
        assert (unknown.value.code, unknown.value.status) == ("job_not_found", 404)
        # Waited for among others, it is unknown too (a wait's answer, no status of its own).
        with pytest.raises(CohortError) as unknown:
            b.get(mine.id).result(timeout=RESULT_TIMEOUT_S)
        assert unknown.value.code == "job_not_found"
        with pytest.raises(CohortError) as elsewhere:
            b.submit(digest, b"x", namespace="py-team-a").id
        assert (elsewhere.value.code, elsewhere.value.status) == ("forbidden", 403)
        theirs = b.submit(digest, b"team b's")
        assert theirs.result(timeout=RESULT_TIMEOUT_S) == b"team b's"
        assert theirs.status()["namespace"] == "py-team-b"

        # A cluster-wide token sees both, and names a namespace itself.
        assert root.get(mine.id).status()["namespace"] == "py-team-a"
        named = root.submit(digest, b"by the admin", namespace="py-team-a")
        assert named.result(timeout=RESULT_TIMEOUT_S) == b"by the admin"
        assert a.get(named.id).status()["namespace"] == "py-team-a"

        # Weights and quotas are the cluster's to give; each namespace's
        # figures are its own to read.
        assert root.set_weight("py-team-a", 2) == {"namespace": "py-team-a", "weight": 2}
        assert root.set_quotas("py-team-a", waiting_max=100) == {
            "namespace": "py-team-a",
            "quotas": {"waiting_max": 100},
        }
        with pytest.raises(CohortError) as refused:
            a.set_weight("py-team-a", 5)
        assert (refused.value.code, refused.value.status) == ("forbidden", 403)
        with pytest.raises(CohortError) as invalid:
            root.set_quotas("py-team-a", running_max=0)
        assert (invalid.value.code, invalid.value.status) == ("invalid_quota", 422)
        seen = {n["name"]: n for n in root.namespaces()}
        assert {"py-team-a", "py-team-b"} <= set(seen)
        assert (seen["py-team-a"]["weight"], seen["py-team-a"]["quotas"]) == (2, {"waiting_max": 100})
        assert seen["py-team-a"]["submitted_total"] == 2
        assert [n["name"] for n in a.namespaces()] == ["py-team-a"]
