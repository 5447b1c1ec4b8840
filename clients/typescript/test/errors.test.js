// The server's refusals and the jobs' failures, as the client reports them.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, CohortError, JobFailed, WaitTimeout } from "../dist/index.js";
import { echoWasm as echo, startNode, trapWasm as trap } from "../testing/cluster.js";

let node;
let client;

before(async () => {
  node = await startNode({ nodeId: "t1" });
  client = new Client(node.url);
});

after(async () => {
  await client?.close();
  await node?.stop();
});

test("a submission with an unknown module digest fails its id with module_not_found", { timeout: 10_000 }, async () => {
  const job = client.submit("0".repeat(64), "x");
  await assert.rejects(job.id(), (error) => {
    assert.ok(error instanceof CohortError);
    assert.equal(error.code, "module_not_found");
    assert.equal(error.status, 422);
    assert.equal(error.retryable, false);
    return true;
  });
  await assert.rejects(job.result(), { code: "module_not_found" });
});

test("a refused item fails only its own handle in a shared batch", { timeout: 10_000 }, async () => {
  const good = client.submit(echo, "fine");
  const bad = client.submit(echo, "x", { timeoutMs: 0 });
  await assert.rejects(bad.id(), { code: "invalid_job", status: 422 });
  assert.equal(await good.text(), "fine");
});

test("a job that traps fails its result with JobFailed and the code trap", { timeout: 15_000 }, async () => {
  const job = client.submit(trap, "boom");
  await assert.rejects(job.result(), (error) => {
    assert.ok(error instanceof JobFailed);
    assert.ok(error instanceof CohortError);
    assert.equal(error.code, "trap");
    assert.equal(error.state, "dead", "a trap is retried, then the job is dead");
    assert.equal(error.retryable, false);
    assert.equal(error.status, null);
    return true;
  });
  const status = await job.status();
  assert.equal(status.state, "dead");
  assert.equal(status.error.code, "trap");
  assert.equal(status.attempts.length, status.max_attempts);
  // The outcome is kept: asking again fails the same way without waiting.
  await assert.rejects(job.result(), { name: "JobFailed", code: "trap" });
});

test("an unknown job id fails its result with job_not_found", { timeout: 10_000 }, async () => {
  await assert.rejects(client.get(987_654_321).result(), { code: "job_not_found", status: 404 });
  await assert.rejects(client.get(987_654_321).status(), { code: "job_not_found", status: 404 });
});

test("a module path that cannot be read fails with module_unreadable", { timeout: 10_000 }, async () => {
  await assert.rejects(client.submit("/nonexistent/job.wasm").id(), { code: "module_unreadable" });
  await assert.rejects(client.upload(new Uint8Array([1, 2, 3])), { code: "module_invalid", status: 422 });
});

test("the same idempotency key gives the same job", { timeout: 10_000 }, async () => {
  const idempotencyKey = `ts-test-${process.pid}-${Date.now()}`;
  const first = client.submit(echo, "once", { idempotencyKey });
  const again = client.submit(echo, "once", { idempotencyKey });
  assert.equal(first.idempotencyKey, idempotencyKey);
  const id = await first.id();
  assert.equal(await again.id(), id);
  const later = client.submit(echo, "once", { idempotencyKey });
  assert.equal(await later.id(), id);
  assert.equal(await later.text(), "once");
  assert.equal((await later.status()).idempotency_key, idempotencyKey);
  // Another input under the same key is refused.
  await assert.rejects(client.submit(echo, "other", { idempotencyKey }).id(), {
    code: "idempotency_conflict",
    status: 409,
  });
  // Without a key, the client makes one per submission.
  const a = client.submit(echo, "once");
  const b = client.submit(echo, "once");
  assert.match(a.idempotencyKey, /^ts-[0-9a-f]{32}$/);
  assert.notEqual(a.idempotencyKey, b.idempotencyKey);
  assert.notEqual(await a.id(), await b.id());
});

test("a queued job is cancelled; its result fails with cancelled", { timeout: 20_000 }, async () => {
  // A node with no slots runs nothing: its jobs stay queued.
  const idle = await startNode({ nodeId: "t2", args: ["--slots", "0"], workers: 0 });
  const idleClient = new Client(idle.url);
  try {
    const job = idleClient.submit(echo, "never runs");
    assert.equal((await job.status()).state, "queued");
    await assert.rejects(job.result(200), (error) => {
      assert.ok(error instanceof WaitTimeout);
      assert.equal(error.code, "wait_timeout");
      return true;
    });
    const cancelled = await job.cancel();
    assert.equal(cancelled.id, await job.id());
    assert.equal(cancelled.state, "cancelled");
    await assert.rejects(job.result(), (error) => {
      assert.ok(error instanceof JobFailed);
      assert.equal(error.state, "cancelled");
      assert.equal(error.code, "cancelled");
      assert.equal(error.message, `job ${error.jobId} cancelled`);
      return true;
    });
    await assert.rejects(job.cancel(), { code: "job_finished", status: 409, retryable: false });
  } finally {
    await idleClient.close();
    await idle.stop();
  }
});

test("a full queue (429 queue_full) is retried until room is made or the deadline passes", { timeout: 20_000 }, async () => {
  const idle = await startNode({ nodeId: "t3", args: ["--slots", "0", "--queue-max", "1"], workers: 0 });
  const patient = new Client(idle.url);
  const hasty = new Client(idle.url, { retryDeadlineMs: 500 });
  try {
    const queued = patient.submit(echo, "first");
    await queued.id();
    const started = Date.now();
    await assert.rejects(hasty.submit(echo, "second").id(), { code: "queue_full", status: 429, retryable: true });
    assert.ok(Date.now() - started >= 400, "it was retried until the deadline");

    const waiting = patient.submit(echo, "third");
    await new Promise((resolve) => setTimeout(resolve, 300));
    await queued.cancel();
    assert.ok((await waiting.id()) > (await queued.id()), "accepted once the queue had room");
  } finally {
    await hasty.close();
    await patient.close();
    await idle.stop();
  }
});
