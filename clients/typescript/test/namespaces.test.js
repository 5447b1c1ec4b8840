// Namespaces through the client, against a real node with a cluster key: a
// client with a token confined to a namespace submits into it and sees its
// jobs only; another namespace's job is `job_not_found`, as a job that never
// was; cluster-wide routes are `forbidden` to it; a cluster-wide token sees
// every job and names the namespace.

import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Client } from "../dist/index.js";
import { cohort, echoWasm as echo, startNode, token, waitReady } from "../testing/cluster.js";

let node;
let keyDir;
const tokens = {};

before(async () => {
  keyDir = await mkdtemp(join(tmpdir(), "cohort-ts-key-"));
  const key = join(keyDir, "cluster.key");
  await cohort(["keygen", key]);
  node = await startNode({ nodeId: "t-namespaces", args: ["--cluster-key", key], ready: false });
  tokens.admin = await token(node.url, key, "admin");
  tokens.a = await token(node.url, key, "submit,read", "ts-team-a");
  tokens.b = await token(node.url, key, "submit,read", "ts-team-b");
  await waitReady(node.url, 1, undefined, tokens.admin);
});

after(async () => {
  await node?.stop();
  if (keyDir !== undefined) await rm(keyDir, { recursive: true, force: true });
});

test("a namespace's token sees its own jobs and nothing of another's", { timeout: 60_000 }, async () => {
  const root = new Client(node.url, { token: tokens.admin });
  const a = new Client(node.url, { token: tokens.a });
  const b = new Client(node.url, { token: tokens.b });
  try {
    // Modules are cluster-wide: uploaded by a cluster-wide token.
    const digest = await root.upload(echo);
    await assert.rejects(a.upload(echo), { code: "forbidden", status: 403 });

    const mine = a.submit(digest, "team a's");
    assert.equal(await mine.text(), "team a's");
    const id = await mine.id();
    assert.equal((await mine.status()).namespace, "ts-team-a");

    // Team b learns nothing of it: the answer of a job that never was.
    await assert.rejects(b.get(id).status(), { code: "job_not_found", status: 404 });
    await assert.rejects(b.get(id).result(), { code: "job_not_found" });
    await assert.rejects(b.secrets(), { code: "forbidden", status: 403 });
    // Naming another namespace is refused; its own is its default.
    await assert.rejects(b.submit(digest, "x", { namespace: "ts-team-a" }).id(), { code: "forbidden", status: 403 });
    const theirs = b.submit(digest, "team b's");
    assert.equal(await theirs.text(), "team b's");
    assert.equal((await theirs.status()).namespace, "ts-team-b");

    // A cluster-wide token sees both, and names a namespace itself.
    assert.equal((await root.get(id).status()).namespace, "ts-team-a");
    const named = root.submit(digest, "by the admin", { namespace: "ts-team-a" });
    assert.equal(await named.text(), "by the admin");
    assert.equal((await a.get(await named.id()).status()).namespace, "ts-team-a");

    // Weights and quotas are the cluster's to give; each namespace's
    // figures are its own to read.
    assert.deepEqual(await root.setWeight("ts-team-a", 2), { namespace: "ts-team-a", weight: 2 });
    assert.deepEqual(await root.setQuotas("ts-team-a", { waiting_max: 100 }), {
      namespace: "ts-team-a",
      quotas: { waiting_max: 100 },
    });
    await assert.rejects(a.setWeight("ts-team-a", 5), { code: "forbidden", status: 403 });
    await assert.rejects(root.setQuotas("ts-team-a", { running_max: 0 }), { code: "invalid_quota", status: 422 });
    const seen = Object.fromEntries((await root.namespaces()).map((n) => [n.name, n]));
    assert.deepEqual([seen["ts-team-a"].weight, seen["ts-team-a"].quotas], [2, { waiting_max: 100 }]);
    assert.equal(seen["ts-team-a"].submitted_total, 2);
    assert.deepEqual((await a.namespaces()).map((n) => n.name), ["ts-team-a"]);
  } finally {
    await Promise.all([root.close(), a.close(), b.close()]);
  }
});
