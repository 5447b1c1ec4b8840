// Schedules and DAGs through the client, against a real node.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client } from "../dist/index.js";
import { echoWasm as echo, startNode } from "../testing/cluster.js";

let node;
let client;

before(async () => {
  node = await startNode({ nodeId: "t-workflows" });
  client = new Client(node.url);
});

after(async () => {
  await client?.close();
  await node?.stop();
});

test("a schedule fires, pauses, resumes and is deleted; bad timings name their field", { timeout: 30_000 }, async () => {
  const made = await client.createSchedule("ts-beat", echo, "tick", { everyMs: 1000, overlap: "allow_all" });
  assert.equal(made.upcoming[0], made.created_at + 1000);
  assert.equal(made.namespace, "default");
  assert.deepEqual((await client.schedules()).map((s) => s.name), ["ts-beat"]);
  let shown = await client.schedule("ts-beat");
  while (shown.fired_total === 0) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    shown = await client.schedule("ts-beat");
  }
  assert.equal(await client.get(shown.last_job).text(), "tick");
  assert.equal((await client.pauseSchedule("ts-beat")).paused, true);
  assert.equal((await client.pauseSchedule("ts-beat", false)).paused, false);
  assert.deepEqual(await client.backfill("ts-beat"), []);
  await client.deleteSchedule("ts-beat");
  await assert.rejects(client.schedule("ts-beat"), { code: "schedule_not_found", status: 404 });
  await assert.rejects(client.createSchedule("bad", echo, null, { cron: "* * * * *", timezone: "Mars/Olympus" }), (error) => {
    assert.equal(error.code, "invalid_schedule");
    assert.match(error.message, /timezone/);
    return true;
  });
});

test("a DAG's child gets its parent's output; a cycle is refused", { timeout: 30_000 }, async () => {
  const dag = await client.submitDag([
    { name: "a", module: echo, input: "A" },
    { name: "b", module: echo, input: "B", after: ["a"] },
  ]);
  assert.equal(dag.jobs.length, 2);
  const envelope = await client.get(dag.jobs[1]).json();
  assert.deepEqual(envelope, { input: "B", parents: [{ id: dag.jobs[0], name: "a", output: "A", blobs: [] }] });
  assert.equal((await client.dag(dag.id)).state, "succeeded");
  const late = client.submit(echo, "C", { after: [dag.jobs[0]] });
  assert.equal((await late.json()).parents[0].output, "A");
  await assert.rejects(client.submitDag([{ name: "x", module: echo, after: ["x"] }]), { code: "invalid_dag", status: 422 });
});
