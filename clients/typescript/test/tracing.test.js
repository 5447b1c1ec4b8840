// The caller's W3C trace context: checked by the client and sent with every
// request of the client made for it. No node needed (batching.test.js sees
// a node adopt it).

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client } from "../dist/index.js";

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACEPARENT = `00-${TRACE}-00f067aa0ba902b7-01`;

test("a malformed traceparent is refused with a RangeError", async () => {
  const client = new Client("http://127.0.0.1:1");
  try {
    for (const bad of [
      "",
      `00-${TRACE}-00f067aa0ba902b7`,
      `00-${TRACE}-00f067aa0ba902b7-01-more`,
      `01-${TRACE}-00f067aa0ba902b7-01`,
      `ff-${TRACE}-00f067aa0ba902b7-01`,
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
      `00-${TRACE}-0000000000000000-01`,
      `00-${TRACE.toUpperCase()}-00f067aa0ba902b7-01`,
      "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
      `00-${TRACE}-00f067aa0ba902b7-1`,
      ` ${TRACEPARENT}`,
      `${TRACEPARENT}\n`,
      undefined,
      42,
    ]) {
      assert.throws(() => client.withTraceparent(bad), (error) => {
        assert.ok(error instanceof RangeError, String(error));
        assert.match(error.message, /is not a W3C traceparent/);
        return true;
      }, JSON.stringify(bad));
    }
  } finally {
    await client.close();
  }
});

test("the new client sends the traceparent with every request; the first sends none", async () => {
  const seen = [];
  const fetch = async (url, init) => {
    seen.push({ path: new URL(url).pathname, headers: new Headers(init.headers) });
    return new Response(JSON.stringify({ digest: "ab".repeat(32), bytes: 1 }), {
      status: 200,
      headers: { "content-type": "application/json" },
    });
  };
  const client = new Client("http://127.0.0.1:1", { fetch, token: "secret" });
  const traced = client.withTraceparent(TRACEPARENT);
  try {
    assert.notEqual(traced, client);
    await traced.upload(new Uint8Array([1]));
    await client.upload(new Uint8Array([2]));
    assert.deepEqual(seen.map((s) => s.path), ["/v1/modules", "/v1/modules"]);
    assert.equal(seen[0].headers.get("traceparent"), TRACEPARENT);
    assert.equal(seen[0].headers.get("authorization"), "Bearer secret", "the options carry over");
    assert.equal(seen[1].headers.get("traceparent"), null);
  } finally {
    await traced.close();
    await client.close();
  }
});
