// Deployments through the client, against a real node: a name pointing at
// a module, that jobs, DAG jobs and schedules give as their module.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client } from "../dist/index.js";
import { countingFetch, deadUrl, echoWasm as echo, startNode, trapWasm as trap } from "../testing/cluster.js";

let node;
let client;

before(async () => {
  node = await startNode({ nodeId: "t-deployments" });
  client = new Client(node.url);
});

after(async () => {
  await client?.close();
  await node?.stop();
});

test("a deploy names a module; jobs run what the name points at when accepted; rollbacks are new versions", { timeout: 30_000 }, async () => {
  const digest = await client.upload(echo);
  const first = await client.deploy("ts-echo", echo);
  assert.deepEqual(first, { name: "ts-echo", version: 1, digest, existing: false });
  // Safe to repeat: the same module again makes no version (by digest too).
  assert.equal((await client.deploy("ts-echo", echo)).existing, true);
  assert.deepEqual(await client.deploy("ts-echo", digest), { ...first, existing: true });

  const job = client.submit("ts-echo", "by name");
  assert.equal(await job.text(), "by name");
  const status = await job.status();
  assert.deepEqual([status.module, status.module_name, status.module_version], [digest, "ts-echo", 1]);
  // What it cost: its one attempt's usage is the job's.
  assert.ok(status.usage.cpu_us > 0 && status.usage.memory_peak_bytes > 0, JSON.stringify(status.usage));
  assert.deepEqual(status.attempts[0].usage, status.usage);
  const outputs = await client.map("ts-echo", ["a", "b"]);
  assert.deepEqual(outputs.map((output) => new TextDecoder().decode(output)), ["a", "b"]);
  const dag = await client.submitDag([{ name: "a", module: "ts-echo", input: "in a DAG" }]);
  assert.equal(await client.get(dag.jobs[0]).text(), "in a DAG");
  await client.createSchedule("ts-named", "ts-echo", null, { cron: "0 0 * * *" });
  await assert.rejects(client.undeploy("ts-echo"), { code: "module_name_in_use", status: 409 });
  await client.deleteSchedule("ts-named");

  // A deploy changes what later jobs run, never what an accepted job runs.
  const trapped = await client.deploy("ts-echo", trap);
  assert.equal(trapped.version, 2);
  assert.notEqual(trapped.digest, digest);
  await assert.rejects(client.submit("ts-echo", "x", { maxAttempts: 1 }).result(), { state: "dead" });
  assert.equal((await job.status()).module, digest);

  assert.deepEqual(await client.rollback("ts-echo"), { name: "ts-echo", version: 3, digest, existing: false });
  assert.equal(await client.submit("ts-echo", "rolled back").text(), "rolled back");
  assert.equal((await client.rollback("ts-echo", 2)).digest, trapped.digest);
  const shown = await client.deployment("ts-echo");
  assert.equal(shown.current.version, 4);
  assert.equal(shown.current.rollback_of, 2);
  assert.equal(shown.versions_total, 4);
  assert.deepEqual(shown.versions.map((v) => v.version), [4, 3, 2, 1]);
  assert.deepEqual((await client.deployments()).map((d) => [d.name, d.current.version]), [["ts-echo", 4]]);
  await assert.rejects(client.rollback("ts-echo", 99), { code: "module_version_not_found", status: 404 });

  await client.deploy("ts-once", digest);
  await assert.rejects(client.rollback("ts-once"), { code: "nothing_to_roll_back", status: 409, retryable: false });
  await client.undeploy("ts-echo");
  await assert.rejects(client.deployment("ts-echo"), { code: "module_name_not_found", status: 404 });
  assert.deepEqual((await client.deployments()).map((d) => d.name), ["ts-once"]);
  // A string in a name's shape that no file has is a name, not a path.
  await assert.rejects(client.submit("ts-echo", "x").id(), { code: "module_name_not_found" });
  await assert.rejects(client.deploy("Not_A_Name", digest), { code: "invalid_module_name", status: 422 });
});

test("a rollback is sent once: not retried on the next node after a failure", { timeout: 30_000 }, async () => {
  const digest = await client.upload(echo);
  await client.deploy("ts-twice", digest);
  await client.deploy("ts-twice", trap);
  const counter = countingFetch();
  const dead = await deadUrl();
  const failing = new Client([dead, node.url], { fetch: counter.fetch });
  try {
    await assert.rejects(failing.rollback("ts-twice"), { code: "unreachable" });
    assert.equal(counter.byPath.get("/v1/deployments/ts-twice/rollback"), 1);
    assert.equal((await failing.deployment("ts-twice")).current.version, 2, "not rolled back");
    // The dead node is skipped now: the next rollback goes to the live one.
    assert.equal((await failing.rollback("ts-twice")).version, 3);
  } finally {
    await failing.close();
  }
});

test("grants say what a deployment's jobs may call; revoked one by one or all at once", { timeout: 30_000 }, async () => {
  await client.deploy("ts-granted", echo);
  assert.deepEqual((await client.deployment("ts-granted")).grants, []);
  const api = { url: "https://api.example.com:443/v1/", methods: ["POST"] };
  const granted = await client.grant("ts-granted", [{ url: "https://api.example.com/v1/", methods: ["POST"] }]);
  assert.deepEqual(granted, { name: "ts-granted", http: [api], secrets: [] });
  // Safe to repeat (and retried): a grant the name has is not added twice.
  assert.deepEqual(await client.grant("ts-granted", { url: "https://api.example.com/v1/", methods: ["post"] }), granted);
  assert.deepEqual((await client.deployment("ts-granted")).grants, [api]);
  assert.deepEqual((await client.deployments()).find((d) => d.name === "ts-granted").grants, [api]);
  // A URL string allows any method.
  const anyMethod = { url: "https://*.example.org:*/" };
  const both = (await client.grant("ts-granted", "https://*.example.org:*")).http;
  assert.deepEqual([...both].sort((a, b) => a.url.localeCompare(b.url)), [anyMethod, api]);

  await assert.rejects(client.grant("ts-granted", "ftp://x"), { code: "invalid_grant", status: 422, retryable: false });
  await assert.rejects(client.grant("ts-nowhere", "https://api.example.com/"), { code: "module_name_not_found" });
  assert.equal((await client.deployment("ts-granted")).grants.length, 2);

  // A revoke takes a grant as it was given: URL, methods, private flag.
  assert.equal((await client.revoke("ts-granted", "https://api.example.com/v1/")).http.length, 2);
  assert.deepEqual(await client.revoke("ts-granted", [{ url: "https://api.example.com/v1/", methods: ["POST"] }]), {
    name: "ts-granted",
    http: [anyMethod],
    secrets: [],
  });
  // None given: every grant.
  assert.deepEqual(await client.revoke("ts-granted"), { name: "ts-granted", http: [], secrets: [] });
  assert.deepEqual((await client.deployment("ts-granted")).grants, []);
  await assert.rejects(client.revoke("ts-granted", []), { code: "invalid_grant", status: 422 });
  await client.undeploy("ts-granted");
});

test("secrets need a cluster key; a grant's headers are kept and revoked with it", { timeout: 30_000 }, async () => {
  // This node has no cluster key: nothing would protect a secret on disk.
  const counter = countingFetch();
  const counted = new Client(node.url, { fetch: counter.fetch });
  try {
    await assert.rejects(counted.setSecret("STRIPE", "sk_test_1"), {
      code: "secrets_unavailable",
      status: 409,
      retryable: false,
    });
    assert.equal(counter.byPath.get("/v1/secrets/STRIPE"), 1);
    await assert.rejects(counted.setSecret("not a name", "x"), { code: "invalid_secret", status: 422 });
    assert.deepEqual(await counted.secrets(), []);
    await assert.rejects(counted.deleteSecret("STRIPE"), { code: "secret_not_found", status: 404 });
    assert.equal(counter.byPath.get("/v1/secrets/STRIPE"), 2);
  } finally {
    await counted.close();
  }

  await client.deploy("ts-headers", echo);
  const team = { url: "https://api.example.com/v1/", headers: { "x-team": "ops" } };
  const granted = await client.grant("ts-headers", team);
  assert.deepEqual(granted, { name: "ts-headers", http: [{ ...team, url: "https://api.example.com:443/v1/" }], secrets: [] });
  assert.deepEqual((await client.deployment("ts-headers")).grants, granted.http);
  const secretHeader = { url: "https://api.stripe.com/", headers: { authorization: "Bearer {secret:STRIPE}" } };
  await assert.rejects(client.grant("ts-headers", secretHeader), { code: "secret_not_found", status: 404 });
  // A revoke names the headers it was granted with.
  assert.equal((await client.revoke("ts-headers", "https://api.example.com/v1/")).http.length, 1);
  assert.deepEqual((await client.revoke("ts-headers", team)).http, []);
  await client.undeploy("ts-headers");
});
