// Several node URLs: a dead one is skipped, and a node killed under a
// stream of submissions costs only retries: every job is done exactly once.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client } from "../dist/index.js";
import { countingFetch, deadUrl, echoWasm as echo, listJobs, startNode, waitReady } from "../testing/cluster.js";

test("a dead first URL is skipped for the live one", { timeout: 20_000 }, async () => {
  const node = await startNode({ nodeId: "t1" });
  const dead = await deadUrl();
  const counter = countingFetch();
  const client = new Client([dead, node.url], { fetch: counter.fetch });
  try {
    const outputs = await client.map(echo, ["a", "b", "c"]);
    assert.deepEqual(outputs.map((output) => new TextDecoder().decode(output)), ["a", "b", "c"]);
    // Once refused, the dead node is skipped rather than tried by every request.
    assert.equal(await client.submit(echo, "d").text(), "d");
    assert.equal(counter.byOrigin.get(dead), 1, `requests by node: ${JSON.stringify([...counter.byOrigin])}`);
  } finally {
    await client.close();
    await node.stop();
  }
});

test("every URL dead: the request fails with unreachable after the retry deadline", { timeout: 10_000 }, async () => {
  const client = new Client([await deadUrl(), await deadUrl()], { retryDeadlineMs: 500 });
  try {
    const started = Date.now();
    await assert.rejects(client.submit("0".repeat(64), "x").id(), { code: "unreachable", retryable: true });
    assert.ok(Date.now() - started >= 400, "it retried until the deadline");
  } finally {
    await client.close();
  }
});

test("a result that timed out or found no node is waited for again by the next call", { timeout: 20_000 }, async () => {
  const node = await startNode({ nodeId: "t1" });
  // While cut, every wait request fails as a refused connection would.
  let cut = true;
  const fetchCut = async (input, init) => {
    if (cut && new URL(String(input)).pathname === "/v1/jobs/wait") throw new TypeError("fetch failed: cut by the test");
    return fetch(input, init);
  };
  const client = new Client(node.url, { fetch: fetchCut, retryDeadlineMs: 500 });
  try {
    const job = client.submit(echo, "after the outage");
    await job.id();
    await assert.rejects(job.result(50), { name: "WaitTimeout", code: "wait_timeout" });
    await assert.rejects(job.result(), { code: "unreachable", retryable: true });
    cut = false;
    assert.equal(await job.text(), "after the outage");
  } finally {
    await client.close();
    await node.stop();
  }
});

test("the client's first node killed mid-loop: every job done exactly once", { timeout: 45_000 }, async (t) => {
  // The first node hosts the master and is the only voter; the second
  // (the client's first URL) works and serves the API but keeps no
  // replica, so the cluster survives its loss.
  const first = await startNode({ nodeId: "t1" });
  const second = await startNode({
    nodeId: "t2",
    seed: first.gossip,
    args: ["--roles", "worker,front-end"],
  });
  const counter = countingFetch();
  // Armed, the next batch that the second node answers kills it instead of
  // handing the answer over: its jobs exist, but the client never learns
  // their ids and must submit them again elsewhere.
  let armed = false;
  const fetchKilling = async (input, init) => {
    const response = await counter.fetch(input, init);
    if (armed && String(input) === `${second.url}/v1/jobs/batch`) {
      armed = false;
      await response.arrayBuffer();
      await second.kill();
      throw new TypeError("fetch failed: the node was killed before its answer arrived");
    }
    return response;
  };
  const client = new Client([second.url, first.url], { fetch: fetchKilling });
  try {
    await waitReady(first.url, 2);
    const rounds = 20;
    const perRound = 50;
    const jobs = [];
    const outputs = [];
    for (let round = 0; round < rounds; round += 1) {
      armed = round === rounds / 2;
      const batch = [];
      for (let i = 0; i < perRound; i += 1) batch.push(client.submit(echo, `round ${round} job ${i}`));
      jobs.push(...batch);
      outputs.push(...(await Promise.all(batch.map((job) => job.text()))));
    }
    assert.equal(second.process.signalCode, "SIGKILL", "the second node was killed");
    const total = rounds * perRound;
    assert.equal(outputs.length, total);
    outputs.forEach((output, n) => assert.equal(output, `round ${Math.floor(n / perRound)} job ${n % perRound}`));
    const ids = await Promise.all(jobs.map((job) => job.id()));
    assert.equal(new Set(ids).size, total, "distinct ids");
    const known = await listJobs(first.url);
    assert.equal(known.length, total, "the batch sent again made no second job");
    assert.ok(known.every((job) => job.state === "succeeded"), "every job succeeded");
    t.diagnostic(
      `requests by node: ${JSON.stringify(Object.fromEntries(counter.byOrigin))}; failed: ${counter.failed}`,
    );
  } finally {
    await client.close();
    await second.stop();
    await first.stop();
  }
});
