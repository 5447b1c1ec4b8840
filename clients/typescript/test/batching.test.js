// 2,000 echo jobs through one client: every result is its own input, and
// the submissions and the waiting cost far fewer requests than jobs. Also
// what a submission carries besides: inputs of each kind, and the caller's
// trace context.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client } from "../dist/index.js";
import { countingFetch, echoWasm as echo, startNode } from "../testing/cluster.js";

let node;

before(async () => {
  node = await startNode({ nodeId: "t1" });
});

after(async () => {
  await node?.stop();
});

test("2,000 jobs submitted in a loop cost a few batch and wait requests", { timeout: 30_000 }, async (t) => {
  const counter = countingFetch();
  const client = new Client(node.url, { fetch: counter.fetch });
  try {
    const digest = await client.upload(echo);
    assert.match(digest, /^[0-9a-f]{64}$/);
    const jobs = [];
    for (let i = 0; i < 2_000; i += 1) jobs.push(client.submit(echo, `input ${i}`));
    const outputs = await Promise.all(jobs.map((job) => job.text()));
    outputs.forEach((output, i) => assert.equal(output, `input ${i}`));
    const ids = await Promise.all(jobs.map((job) => job.id()));
    assert.equal(new Set(ids).size, 2_000, "every job has an id of its own");

    const batches = counter.byPath.get("/v1/jobs/batch") ?? 0;
    const waits = counter.byPath.get("/v1/jobs/wait") ?? 0;
    t.diagnostic(`requests by path: ${JSON.stringify(Object.fromEntries(counter.byPath))}`);
    assert.equal(counter.byPath.get("/v1/modules"), 1, "the module path is uploaded once");
    assert.ok(batches >= 2 && batches <= 4, `2,000 submissions took ${batches} batch requests`);
    assert.ok(waits <= 200, `2,000 results took ${waits} wait requests`);
    assert.ok(counter.total() < 250, `${counter.total()} requests in all: ${JSON.stringify([...counter.byPath])}`);
  } finally {
    await client.close();
  }
});

test("results awaited one by one were watched from acceptance: a few wait requests", { timeout: 30_000 }, async (t) => {
  const counter = countingFetch();
  const client = new Client(node.url, { fetch: counter.fetch });
  try {
    const jobs = [];
    for (let i = 0; i < 2_000; i += 1) jobs.push(client.submit(echo, `one by one ${i}`));
    for (const [i, job] of jobs.entries()) assert.equal(await job.text(), `one by one ${i}`);
    const waits = counter.byPath.get("/v1/jobs/wait") ?? 0;
    t.diagnostic(`2,000 results awaited one by one: ${waits} wait requests`);
    assert.ok(waits < 2_000 / 20, `2,000 results awaited one by one took ${waits} wait requests`);
  } finally {
    await client.close();
  }
});

test("bytes, text and JSON inputs arrive as given; map keeps the order", { timeout: 20_000 }, async () => {
  const client = new Client(node.url);
  try {
    const bytes = new Uint8Array([0, 1, 2, 253, 254, 255]);
    assert.deepEqual(await client.submit(echo, bytes).result(), bytes);
    assert.equal(await client.submit(echo, "héllo").text(), "héllo");
    assert.deepEqual(await client.submit(echo, { a: [1, 2], b: "c" }).json(), { a: [1, 2], b: "c" });
    assert.deepEqual(await client.submit(echo).result(), new Uint8Array());

    const outputs = await client.map(echo, [1, 2, 3, 4, 5].map((n) => ({ n })));
    assert.deepEqual(
      outputs.map((output) => JSON.parse(new TextDecoder().decode(output))),
      [1, 2, 3, 4, 5].map((n) => ({ n })),
    );
  } finally {
    await client.close();
  }
});

test("an output too large to come inline is fetched with GET /v1/jobs/{id}/result", { timeout: 20_000 }, async () => {
  const counter = countingFetch();
  const client = new Client(node.url, { fetch: counter.fetch });
  try {
    const input = new Uint8Array(200 * 1024).map((_, i) => (i * 7) % 251);
    const job = client.submit(echo, input);
    assert.deepEqual(await job.result(), input);
    assert.equal(counter.byPath.get(`/v1/jobs/${await job.id()}/result`), 1);
  } finally {
    await client.close();
  }
});

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";

test("a client made with a traceparent puts its jobs in the caller's trace: the node shows its trace id", { timeout: 30_000 }, async () => {
  const client = new Client(node.url);
  const traced = client.withTraceparent(`00-${TRACE}-00f067aa0ba902b7-01`);
  try {
    const job = traced.submit(echo, "traced");
    const plain = client.submit(echo, "plain");
    assert.equal(await job.text(), "traced");
    assert.equal(await plain.text(), "plain");
    assert.equal((await job.status()).trace_id, TRACE);
    // A node that exports no spans gives a job submitted without one none.
    assert.equal((await plain.status()).trace_id, undefined);
    const dag = await traced.submitDag([{ name: "a", module: echo, input: "in a DAG" }]);
    assert.equal((await client.get(dag.jobs[0]).status()).trace_id, TRACE);
  } finally {
    await traced.close();
    await client.close();
  }
});
