// Unit tests of the cohort-job SDK under Node.js (`node --test
// guest-sdk/js/test/sdk.test.js`), with the host interface stubbed; run by
// tests/languages.rs. The same SDK inside a component is tested end to end
// there too.
import { register } from "node:module";
import assert from "node:assert/strict";
import { test } from "node:test";

register("./hooks.js", import.meta.url);
const sdk = await import("../index.js");
const host = await import("./host-stub.js");
const { job, JobError } = sdk;

const bytes = (text) => new TextEncoder().encode(text);
const text = (data) => new TextDecoder().decode(data);

/** The job error `run(input)` fails with (thrown, or a rejected promise). */
async function failure(run, input) {
  try {
    await run(input);
  } catch (thrown) {
    return thrown;
  }
  assert.fail("the job succeeded");
}

test("bytes, text and JSON jobs", async () => {
  assert.equal(text(job((input) => input.reverse())(bytes("abc"))), "cba");
  assert.equal(text(job.text((s) => s.toUpperCase())(bytes("straße"))), "STRASSE");
  const sum = job.json((r) => ({ sum: r.n.reduce((a, b) => a + b, 0), é: true }));
  assert.equal(text(sum(bytes('{"n": [1, 2]}'))), '{"sum":3,"é":true}');
  assert.equal(text(await job(async (input) => input)(bytes("later"))), "later");
});

test("malformed input is bad_input, a wrong result bad_output", async () => {
  const invalid = await failure(job.text((s) => s), new Uint8Array([0x63, 0x61, 0x66, 0xe9]));
  assert.equal(invalid.code, "bad_input");
  assert.match(invalid.message, /at byte 3/);
  assert.equal((await failure(job.json((v) => v), bytes("{"))).code, "bad_input");
  const wrong = await failure(job(() => "not bytes"), bytes(""));
  assert.equal(wrong.code, "bad_output");
  assert.match(wrong.message, /job\.text/);
});

test("job errors keep their code; anything else thrown is uncaught_exception", async () => {
  const own = await failure(job(() => { throw new JobError("too_big", "the input is too big"); }), bytes(""));
  assert.deepEqual([own.code, own.message], ["too_big", "the input is too big"]);
  const thrownString = await failure(job(() => { throw "boom"; }), bytes(""));
  assert.deepEqual([thrownString.code, thrownString.message], ["uncaught_exception", "boom"]);
  const typeError = await failure(job(() => null.x), bytes(""));
  assert.equal(typeError.code, "uncaught_exception");
  assert.match(typeError.message, /^TypeError: /);
  assert.ok(typeError.message.length <= 2100);
  const rejected = await failure(job(async () => { throw new Error("later"); }), bytes(""));
  assert.equal(rejected.code, "uncaught_exception");
  assert.match(rejected.message, /^Error: later/);
  assert.equal((await failure(job(() => { throw undefined; }), bytes(""))).code, "uncaught_exception");
});

test("logs, progress and checkpoints reach the host", () => {
  host.calls.length = 0;
  sdk.info("hello");
  sdk.progress(0.5, "half");
  sdk.checkpointJson({ next: 7, count: 4 });
  assert.deepEqual(sdk.resumeJson(), { next: 7, count: 4 });
  assert.deepEqual(host.calls.slice(0, 2), [["log", "info", "hello"], ["progress", 0.5, "half"]]);
  assert.equal(host.calls[2][0], "checkpoint");
  assert.throws(() => job("not a function"), TypeError);
});

test("a secret is what the host lets the job read, or undefined", () => {
  assert.equal(sdk.secret("SMTP"), undefined);
  host.secrets.set("SMTP", "hunter2");
  assert.equal(sdk.secret("SMTP"), "hunter2");
  host.secrets.clear();
});

test("fetch.js names the failed call and keeps the engine's error as its cause", async () => {
  const engine = globalThis.fetch;
  const calls = [];
  globalThis.fetch = async (input, init) => {
    calls.push([input, init]);
    if (String(input instanceof Request ? input.url : input).includes("/ok")) {
      return new Response("fine", { status: 201 });
    }
    if (String(input).includes("/odd")) {
      throw new RangeError("not a network error");
    }
    throw new TypeError("NetworkError when attempting to fetch resource");
  };
  try {
    await import("../fetch.js");
    const answer = await fetch("http://127.0.0.1:9/ok", { method: "post", body: "x" });
    assert.equal(answer.status, 201);
    assert.equal(calls[0][1].body, "x");
    const refused = await fetch("https://api.example.com:8443/v1/secret?key=k", { method: "post" })
      .then(() => assert.fail("resolved"), (e) => e);
    assert.ok(refused instanceof TypeError);
    assert.match(refused.message, /^fetch POST https:\/\/api\.example\.com:8443 failed: /);
    assert.match(refused.message, /egress_denied/);
    assert.doesNotMatch(refused.message, /secret|key=/);
    assert.match(refused.cause.message, /NetworkError/);
    const request = new Request("http://h.example/x", { method: "PATCH" });
    assert.match((await fetch(request).catch((e) => e)).message, /^fetch PATCH http:\/\/h\.example failed/);
    assert.match((await fetch("not a url").catch((e) => e)).message, /^fetch GET failed/);
    const odd = await fetch("http://h.example/odd").catch((e) => e);
    assert.ok(odd instanceof RangeError);
    assert.equal(fetch.name, "fetch");
  } finally {
    globalThis.fetch = engine;
  }
});

test("no-fetch.js makes fetch reject, not trap", async () => {
  const engine = globalThis.fetch;
  try {
    await import("../no-fetch.js");
    const refused = await fetch("http://127.0.0.1:9/").then(() => assert.fail("resolved"), (e) => e);
    assert.ok(refused instanceof TypeError);
    assert.match(refused.message, /built without HTTP support/);
  } finally {
    globalThis.fetch = engine;
  }
});
