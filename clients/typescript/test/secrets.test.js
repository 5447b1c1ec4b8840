// Secrets and a grant's headers: the requests the client sends, and which
// it retries, against a fake node. No node needed.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, CohortError } from "../dist/index.js";

/** A JSON answer. */
function answer(status, body) {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}

/**
 * A `fetch` that records each request (`method origin+path body`) and
 * answers with the next of `replies`: a `Response`, or an `Error` thrown as
 * a transport failure.
 */
function fakeFetch(replies) {
  const sent = [];
  const fetch = async (url, init) => {
    sent.push({ method: init.method, url: String(url), body: init.body === undefined ? undefined : JSON.parse(init.body) });
    const reply = replies.shift();
    assert.ok(reply !== undefined, `an unexpected request: ${init.method} ${url}`);
    if (reply instanceof Error) throw new TypeError("fetch failed", { cause: reply });
    return reply;
  };
  return { sent, fetch };
}

test("a grant's headers are sent with it, and with its revoke", async () => {
  const headers = { authorization: "Bearer {secret:STRIPE}" };
  const granted = { name: "pay", http: [{ url: "https://api.stripe.com:443/v1/", methods: ["POST"], headers }] };
  const { sent, fetch } = fakeFetch([answer(200, granted), answer(200, { name: "pay", http: [] })]);
  const client = new Client("http://a", { fetch });
  try {
    const grant = { url: "https://api.stripe.com/v1/", methods: ["POST"], headers };
    assert.deepEqual(await client.grant("pay", grant), granted);
    assert.deepEqual(await client.revoke("pay", [grant]), { name: "pay", http: [] });
    assert.deepEqual(sent, [
      { method: "POST", url: "http://a/v1/deployments/pay/grants", body: { http: [grant] } },
      { method: "POST", url: "http://a/v1/deployments/pay/grants/revoke", body: { http: [grant] } },
    ]);
  } finally {
    await client.close();
  }
});

test("a grant's recording choice is sent as given, and left out when not given", async () => {
  const recorded = { url: "https://api.stripe.com:443/v1/", record: true };
  const granted = { name: "pay", http: [recorded, { url: "https://search.example.com:443/", record: false }] };
  const { sent, fetch } = fakeFetch([answer(200, granted)]);
  const client = new Client("http://a", { fetch });
  try {
    const grants = [
      { url: "https://api.stripe.com/v1/", record: true },
      { url: "https://search.example.com/", record: false },
      "https://hooks.example.com/",
    ];
    assert.deepEqual(await client.grant("pay", grants), granted);
    assert.deepEqual(sent[0].body, {
      http: [grants[0], grants[1], { url: "https://hooks.example.com/" }],
    });
  } finally {
    await client.close();
  }
});

test("secrets a job may read are granted and revoked by name", async () => {
  const granted = { name: "mail", http: [], secrets: ["SMTP"] };
  const none = { name: "mail", http: [], secrets: [] };
  const { sent, fetch } = fakeFetch([answer(200, granted), answer(200, none), answer(200, none), answer(200, none)]);
  const client = new Client("http://a", { fetch });
  try {
    assert.deepEqual(await client.grant("mail", [], { secrets: ["SMTP"] }), granted);
    assert.deepEqual(await client.revoke("mail", undefined, { secrets: ["SMTP"] }), none);
    await client.revoke("mail", "https://smtp.example.com/", { secrets: ["SMTP"] });
    // Neither grants nor secrets: every grant and readable secret goes.
    await client.revoke("mail");
    assert.deepEqual(sent, [
      { method: "POST", url: "http://a/v1/deployments/mail/grants", body: { http: [], secrets: ["SMTP"] } },
      { method: "POST", url: "http://a/v1/deployments/mail/grants/revoke", body: { secrets: ["SMTP"] } },
      {
        method: "POST",
        url: "http://a/v1/deployments/mail/grants/revoke",
        body: { http: [{ url: "https://smtp.example.com/" }], secrets: ["SMTP"] },
      },
      { method: "DELETE", url: "http://a/v1/deployments/mail/grants", body: undefined },
    ]);
  } finally {
    await client.close();
  }
});

test("setting a secret is retried and fails over, as a grant is", async () => {
  const { sent, fetch } = fakeFetch([
    new Error("connect ECONNREFUSED"),
    answer(503, { code: "master_unavailable", message: "later", retryable: true }),
    answer(200, { name: "STRIPE", created: true }),
  ]);
  const client = new Client(["http://a", "http://b"], { fetch });
  try {
    assert.deepEqual(await client.setSecret("STRIPE", "sk_live_1"), { name: "STRIPE", created: true });
    assert.deepEqual(
      sent.map((request) => [request.method, request.url]),
      [
        ["POST", "http://a/v1/secrets/STRIPE"],
        ["POST", "http://b/v1/secrets/STRIPE"],
        ["POST", "http://a/v1/secrets/STRIPE"],
      ],
    );
    for (const request of sent) assert.deepEqual(request.body, { value: "sk_live_1" });
  } finally {
    await client.close();
  }
});

test("a node without a cluster key refuses a secret at once", async () => {
  const refusal = { code: "secrets_unavailable", message: "no cluster key", retryable: false };
  const { sent, fetch } = fakeFetch([answer(409, refusal)]);
  const client = new Client("http://a", { fetch });
  try {
    await assert.rejects(client.setSecret("STRIPE", "x"), (error) => {
      assert.ok(error instanceof CohortError);
      assert.deepEqual([error.code, error.status, error.retryable], ["secrets_unavailable", 409, false]);
      return true;
    });
    assert.equal(sent.length, 1);
  } finally {
    await client.close();
  }
});

test("secrets are listed by name, never with a value", async () => {
  const listed = [{ name: "STRIPE", updated_at: 1_700_000_000_000, used_by: ["pay"] }];
  const { sent, fetch } = fakeFetch([answer(200, { secrets: listed })]);
  const client = new Client("http://a", { fetch });
  try {
    assert.deepEqual(await client.secrets(), listed);
    assert.deepEqual(sent, [{ method: "GET", url: "http://a/v1/secrets", body: undefined }]);
  } finally {
    await client.close();
  }
});

test("deleting a secret is sent once, to one node, never retried", async () => {
  const deleted = fakeFetch([answer(200, { name: "STRIPE", deleted: true })]);
  const client = new Client("http://a", { fetch: deleted.fetch });
  try {
    assert.equal(await client.deleteSecret("STRIPE"), undefined);
    assert.deepEqual(deleted.sent, [{ method: "DELETE", url: "http://a/v1/secrets/STRIPE", body: undefined }]);
  } finally {
    await client.close();
  }
  // A failure is final: the first try may have deleted it.
  for (const [failure, code] of [
    [new Error("connect ECONNREFUSED"), "unreachable"],
    [answer(503, { code: "master_unavailable", message: "later", retryable: true }), "master_unavailable"],
  ]) {
    const failing = fakeFetch([failure]);
    const client = new Client(["http://a", "http://b"], { fetch: failing.fetch });
    try {
      await assert.rejects(client.deleteSecret("STRIPE"), { code });
      assert.equal(failing.sent.length, 1);
    } finally {
      await client.close();
    }
  }
});

test("a secret's name is one path segment, whatever it holds", async () => {
  const { sent, fetch } = fakeFetch([
    answer(422, { code: "invalid_secret", message: "no name", retryable: false }),
  ]);
  const client = new Client("http://a", { fetch });
  try {
    await assert.rejects(client.setSecret("A/B", "x"), { code: "invalid_secret", status: 422 });
    assert.equal(sent[0].url, "http://a/v1/secrets/A%2FB");
  } finally {
    await client.close();
  }
});
