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
const node = await import("./blobs-stub.js");
const { job, JobError, blobs, BlobError } = sdk;

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

// ---------------------------------------------------------------- blobs

/** `size` bytes that differ from one offset to the next (mod 251). */
const pattern = (size) => Uint8Array.from({ length: size }, (_, i) => i % 251);
/** The host calls of one kind, as [name, size]. */
const callsOf = (kind) => node.calls.filter(([k]) => k === kind).map(([, name, size]) => [name, size]);

test("inputs lists the blobs with their sizes as numbers; input finds one", () => {
  node.reset();
  assert.deepEqual(blobs.inputs(), []);
  assert.equal(blobs.input(blobs.INPUT), undefined);
  node.inputBlobs.set("input", bytes("abc"));
  node.inputBlobs.set("parse/rows.csv", pattern(10));
  const [input, rows] = blobs.inputs();
  assert.deepEqual(input, {
    name: "input",
    digest: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    size: 3,
  });
  assert.equal(typeof rows.size, "number");
  assert.deepEqual(blobs.input("parse/rows.csv"), rows);
});

test("a reader returns the blob in chunks of at most 64 KiB, and closes at its end", async () => {
  node.reset();
  const data = pattern(200 * 1024 + 5);
  node.inputBlobs.set("input", data);
  const reader = blobs.open("input");
  const chunks = [];
  for await (const chunk of reader) {
    assert.ok(chunk instanceof Uint8Array);
    chunks.push(chunk);
  }
  assert.deepEqual(chunks.map((c) => c.length), [65536, 65536, 65536, 5 + 8192]);
  assert.deepEqual(Buffer.concat(chunks), Buffer.from(data));
  assert.equal(reader.position, data.length);
  assert.ok(callsOf("read").every(([, len]) => len <= 65536));
  assert.deepEqual(callsOf("drop-input"), [["input", 0]], "the stream is dropped at the end");
  assert.equal(reader.read(), undefined, "and stays at its end");
  // Smaller reads, and short chunks from the node, are fine.
  node.faults.readMax = 7;
  const small = blobs.open("input");
  assert.deepEqual(small.read(3), data.subarray(0, 3));
  assert.deepEqual(small.read(), data.subarray(3, 10));
  assert.equal(small.position, 10);
  assert.throws(() => small.read(0), RangeError);
  small.close();
  assert.throws(() => small.read(), (e) => e instanceof BlobError && e.code === "io_error" && /is closed/.test(e.message));
});

test("a reader starts at an offset, and leaving a loop early closes it", () => {
  node.reset();
  const data = pattern(1000);
  node.inputBlobs.set("input", data);
  for (const offset of [990, 990n]) {
    const reader = blobs.open("input", { offset });
    assert.equal(reader.position, 990);
    assert.deepEqual([...reader].flatMap((c) => [...c]), [...data.subarray(990)]);
  }
  assert.equal(blobs.open("input", { offset: 1000 }).read(), undefined, "an offset at the end reads nothing");
  for (const chunk of blobs.open("input")) {
    assert.equal(chunk.length, 1000);
    break;
  }
  assert.equal(callsOf("drop-input").length, 4);
  assert.throws(() => blobs.open("input", { offset: -1 }), RangeError);
  assert.throws(() => blobs.open("input", { offset: 1.5 }), RangeError);
  assert.throws(() => blobs.open("input", { offset: 1n << 64n }), RangeError);
  assert.throws(() => blobs.open("input", { offset: "1" }), TypeError);
});

test("refused opens and failed reads are BlobErrors that fail the job with their code", async () => {
  node.reset();
  node.inputBlobs.set("input", pattern(100));
  const missing = (() => {
    try {
      blobs.open("nope");
    } catch (e) {
      return e;
    }
  })();
  assert.ok(missing instanceof BlobError && missing instanceof JobError);
  assert.deepEqual([missing.code, missing.operation, missing.blob], ["blob_open_failed", "open", "nope"]);
  assert.equal(missing.message, 'cannot open the input blob "nope": no input blob named "nope"');
  const past = await failure(job(() => blobs.open("input", { offset: 101 })), bytes(""));
  assert.equal(past.code, "blob_open_failed");
  assert.match(past.message, /past the end/);

  node.faults.readMax = 40;
  node.faults.failReadAt = 40;
  const reader = blobs.open("input");
  assert.equal(reader.read().length, 40);
  assert.throws(
    () => reader.read(),
    (e) => e.code === "io_error" && e.message === 'reading the input blob "input" failed at byte 40: the blob\'s replica is gone',
  );
  assert.ok(node.ioErrors.every((e) => e.dropped), "the error resource is dropped");
  assert.equal(callsOf("drop-input").length, 1, "a failed stream is dropped");
  const failed = await failure(job(() => [...blobs.open("input")]), bytes(""));
  assert.equal(failed.code, "io_error");
});

test("a reader asks again after an empty read, within a bound, and refuses oversized chunks", () => {
  node.reset();
  node.inputBlobs.set("input", bytes("hello"));
  node.faults.emptyReads = 3;
  assert.equal(text(blobs.open("input").read()), "hello");
  node.faults.emptyReads = 1e9;
  assert.throws(() => blobs.open("input").read(), /no bytes 1000 times in a row/);
  node.faults.emptyReads = 0;
  node.faults.oversizedReads = true;
  assert.throws(() => blobs.open("input").read(2), /returned 3 bytes for a read of at most 2/);
});

test("a writer hands the node at most 4096 bytes a write, buffering small writes", () => {
  node.reset();
  const out = blobs.create("out.bin");
  for (let i = 0; i < 1000; i++) {
    out.write(`line ${i}\n`);
  }
  const lines = Array.from({ length: 1000 }, (_, i) => `line ${i}\n`).join("");
  assert.ok(callsOf("write").every(([, n]) => n === 4096), "only full buffers so far");
  out.write(pattern(10000));
  out.write(new Uint16Array([0x6968]).buffer);
  out.write(new DataView(bytes("xyz").buffer, 1, 1));
  out.write("");
  out.write("é€𝄞");
  assert.equal(out.written, lines.length + 10000 + 2 + 1 + 9);
  out.close();
  out.close();
  const expected = Buffer.concat([bytes(lines), pattern(10000), bytes("hiy"), bytes("é€𝄞")]);
  assert.deepEqual(node.written("out.bin"), expected);
  const sizes = callsOf("write").map(([, n]) => n);
  assert.ok(sizes.every((n) => n > 0 && n <= 4096), `${sizes}`);
  assert.equal(sizes.length, Math.ceil(expected.length / 4096), "no write smaller than needed");
  assert.deepEqual(callsOf("drop-output"), [["out.bin", 0]]);
  assert.throws(() => out.write("more"), (e) => e.code === "io_error" && /"out.bin" is closed/.test(e.message));
  const other = blobs.create("other");
  assert.throws(() => other.write({}), TypeError);
  other.close();
});

test("outputs left open are flushed when the job returns, and dropped when it fails", async () => {
  node.reset();
  const run = job.text(async (input) => {
    blobs.create("echo.txt").write(input);
    await new Promise((resolve) => setTimeout(resolve, 1));
    return "done";
  });
  assert.equal(text(await run(bytes("hello"))), "done");
  assert.equal(text(node.written("echo.txt")), "hello");
  assert.deepEqual(callsOf("drop-output"), [["echo.txt", 0]]);

  node.reset();
  const failing = await failure(job(() => {
    blobs.create("partial.txt").write("unfinished");
    throw new JobError("gave_up", "no");
  }), bytes(""));
  assert.equal(failing.code, "gave_up");
  assert.equal(node.written("partial.txt").length, 0, "the buffer is not written");
  assert.deepEqual(callsOf("drop-output"), [["partial.txt", 0]]);

  node.reset();
  node.faults.outputBytesMax = 5000;
  const tooLarge = await failure(job(() => {
    blobs.create("big").write(pattern(4096 + 1000));
    return new Uint8Array(0);
  }), bytes(""));
  assert.equal(tooLarge.code, "io_error", "from the flush when the job returns");
  assert.match(tooLarge.message, /^writing the output blob "big" failed: output_too_large/);
});

test("refused creates are BlobErrors; creating a name again starts it over", async () => {
  node.reset();
  const bad = await failure(job(() => blobs.create("no/slashes")), bytes(""));
  assert.equal(bad.code, "blob_create_failed");
  assert.match(bad.message, /^cannot create the output blob "no\/slashes": an output name is/);

  const first = blobs.create("log.txt");
  first.write("old");
  const second = blobs.create("log.txt");
  assert.throws(() => first.write("more"), /is closed/);
  second.write("new");
  second.close();
  assert.equal(text(node.written("log.txt")), "new");

  // A stream the node closed (the same name created again behind the SDK's back).
  const third = blobs.create("log.txt");
  node.create("log.txt");
  third.write("buffered");
  assert.throws(() => third.write(pattern(4096)), (e) => e.code === "io_error" && /closed by the node/.test(e.message));
  assert.throws(() => third.write("more"), /is closed/, "a failed writer stays closed");
});

test("a reader and a writer are web streams too", async () => {
  node.reset();
  const data = pattern(150000);
  node.inputBlobs.set("input", data);
  await blobs.open("input").stream().pipeTo(blobs.create("copy").stream());
  assert.deepEqual(node.written("copy"), Buffer.from(data));
  assert.deepEqual(callsOf("drop-output"), [["copy", 0]]);
  const reader = blobs.open("input");
  const stream = reader.stream().getReader();
  assert.equal((await stream.read()).value.length, 65536);
  await stream.cancel();
  assert.throws(() => reader.read(), /is closed/, "cancelling the stream closes the reader");
  assert.ok(callsOf("read").length <= 1 + 4, "a stream reads only when asked");
});
