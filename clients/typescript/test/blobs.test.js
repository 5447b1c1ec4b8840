// Blobs through the client, against a fake node: a local HTTP server that
// speaks /v1/blobs (no cohort node), so that the tests see the bytes on the
// wire: streamed uploads, streamed downloads, ranges, a download cut
// midway, a node answering the wrong bytes; and jobs given an input blob,
// whose output blobs come back (/v1/jobs/batch, /v1/jobs/wait,
// GET /v1/jobs/{id}), and the labels and namespace a submission carries. No node needed.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, before, test } from "node:test";
import { BLOB_COPY_BYTES_PER_SEC, BLOB_FETCH_WAIT_MS, Client, CohortError, JobFailed } from "../dist/index.js";
import { blobTiming, copyAllowanceMs, outputBlobsOf, rangeHeader } from "../dist/blobs.js";

const MiB = 1 << 20;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function sha256(bytes) {
  return createHash("sha256").update(bytes).digest("hex");
}

/** `size` bytes that differ at every offset (a shifted range shows). */
function dataOf(size, seed = 1) {
  const block = Buffer.alloc(64 * 1024);
  for (let i = 0; i < block.length; i += 32) createHash("sha256").update(`${seed}:${i}`).digest().copy(block, i);
  const data = Buffer.alloc(size);
  for (let i = 0; i < size; i += block.length) block.copy(data, i, 0, Math.min(block.length, size - i));
  return data;
}

/**
 * A node that stores blobs in memory and answers /v1/blobs as cohort does.
 * `cutGet` cuts that many GET bodies in the middle; `cutPut` closes that
 * many uploads' connections after reading about `cutPutAfter` bytes;
 * `wrong` maps a digest to the bytes answered for it; `hold` (a promise)
 * makes a GET send `holdBytes`, then wait for it (10 s at most, then
 * `heldOut` and the connection closed) before the rest. `putDelayMs`
 * delays an upload's answer once its body has come (the node copying the
 * blob to others), `getDelayMs` a download's head (the node fetching it).
 *
 * Jobs submitted to it finish at once: one given an input blob succeeds,
 * having written the output blob `upper.txt` (the input blob's bytes in
 * upper case), with that blob's size as its output; one without succeeds
 * with its inline input as its output, writing no blob. `jobs` holds each
 * job's submission as it came, by id.
 */
async function fakeNode() {
  const node = {
    blobs: new Map(),
    jobs: new Map(),
    seen: [],
    cutGet: 0,
    cutPut: 0,
    cutPutAfter: MiB,
    wrong: new Map(),
    hold: null,
    holdBytes: 0,
    heldOut: false,
    putDelayMs: 0,
    getDelayMs: 0,
    requests: (method) => node.seen.filter((seen) => seen.method === method),
  };
  const json = (res, status, body, extra = {}) => {
    const text = JSON.stringify(body);
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...extra });
    res.end(text);
  };
  const refuse = (res, status, code, extra) => json(res, status, { code, message: `a fake ${code}`, retryable: false }, extra);
  // A job's input blob, as the node reads it (either case, optionally
  // `sha256:`), as its view shows it; and its output blobs, stored here.
  const jobBlobs = (id) => {
    const given = node.jobs.get(id).input_blob;
    if (given === undefined) return { inputBlob: undefined, outputs: [] };
    const digest = given.replace(/^sha256:/, "").toLowerCase();
    const data = node.blobs.get(digest);
    const upper = Buffer.from(data.toString("latin1").toUpperCase(), "latin1");
    node.blobs.set(sha256(upper), upper);
    return {
      inputBlob: { digest, bytes: data.length },
      outputs: [{ name: "upper.txt", digest: sha256(upper), bytes: upper.length }],
    };
  };
  const finished = (id) => {
    const { inputBlob, outputs } = jobBlobs(id);
    const output = Buffer.from(inputBlob === undefined ? (node.jobs.get(id).input ?? "") : String(inputBlob.bytes));
    const item = { id, state: "succeeded", error: null, output_base64: output.toString("base64"), output_bytes: output.length };
    if (outputs.length > 0) item.outputs = outputs;
    return item;
  };
  const jobs = async (req, res, seen) => {
    const parts = [];
    for await (const chunk of req) parts.push(chunk);
    seen.body = Buffer.concat(parts);
    const body = seen.body.length === 0 ? {} : JSON.parse(seen.body);
    if (req.method === "POST" && req.url === "/v1/jobs/batch") {
      const results = body.jobs.map((job) => {
        const given = job.input_blob;
        if (given !== undefined && !node.blobs.has(given.replace(/^sha256:/, "").toLowerCase())) {
          return { code: "blob_not_found", message: `no blob ${given}`, retryable: false };
        }
        const id = node.jobs.size + 1;
        node.jobs.set(id, job);
        return { id, existing: false };
      });
      return json(res, 202, { results });
    }
    if (req.method === "POST" && req.url === "/v1/jobs/wait") {
      return json(res, 200, { jobs: body.ids.filter((id) => node.jobs.has(id)).map(finished) });
    }
    const id = Number(req.url.slice("/v1/jobs/".length));
    if (req.method !== "GET" || !node.jobs.has(id)) return refuse(res, 404, "job_not_found");
    const { inputBlob, outputs } = jobBlobs(id);
    const view = { id, module: node.jobs.get(id).module, state: "succeeded" };
    if (inputBlob !== undefined) view.input_blob = inputBlob;
    if (outputs.length > 0) view.outputs = outputs;
    return json(res, 200, view);
  };
  const server = createServer(async (req, res) => {
    const seen = { method: req.method, url: req.url, headers: req.headers, body: Buffer.alloc(0) };
    node.seen.push(seen);
    if (req.url.startsWith("/v1/jobs/")) return jobs(req, res, seen);
    if (req.method === "PUT" && req.url === "/v1/blobs") {
      const parts = [];
      let read = 0;
      const cut = node.cutPut > 0;
      if (cut) node.cutPut -= 1;
      try {
        for await (const chunk of req) {
          parts.push(chunk);
          read += chunk.length;
          if (cut && read >= node.cutPutAfter) {
            req.socket.destroy();
            return;
          }
        }
      } catch {
        return;
      }
      seen.body = Buffer.concat(parts);
      const digest = sha256(seen.body);
      const expected = req.headers["x-cohort-sha256"];
      if (expected !== undefined && expected !== digest) return refuse(res, 422, "blob_digest_mismatch");
      const status = node.blobs.has(digest) ? 200 : 201;
      node.blobs.set(digest, seen.body);
      if (node.putDelayMs > 0) await sleep(node.putDelayMs);
      if (res.destroyed) return; // the client gave up and went
      return json(res, status, { digest, bytes: seen.body.length });
    }
    if (req.method === "GET" && req.url === "/v1/blobs") {
      return json(res, 200, { blobs: [...node.blobs].map(([digest, bytes]) => ({ digest, bytes: bytes.length })) });
    }
    const digest = req.url.startsWith("/v1/blobs/") ? req.url.slice("/v1/blobs/".length) : null;
    if ((req.method !== "GET" && req.method !== "HEAD") || digest === null) return refuse(res, 404, "not_found");
    if (!node.blobs.has(digest)) {
      if (req.method === "HEAD") return res.writeHead(404).end();
      return refuse(res, 404, "blob_not_found");
    }
    const data = node.wrong.get(digest) ?? node.blobs.get(digest);
    const size = data.length;
    if (node.getDelayMs > 0 && req.method === "GET") {
      await sleep(node.getDelayMs);
      if (res.destroyed) return;
    }
    let [start, stop, status] = [0, size, 200];
    const headers = { "content-type": "application/octet-stream", etag: `"${digest}"`, "accept-ranges": "bytes" };
    const range = req.headers.range;
    if (range !== undefined) {
      const found = /^bytes=(\d*)-(\d*)$/.exec(range);
      assert.ok(found, range);
      if (found[1] === "") [start, stop] = [Math.max(0, size - Number(found[2])), size];
      else [start, stop] = [Number(found[1]), found[2] === "" ? size : Math.min(size, Number(found[2]) + 1)];
      if (start >= size) return refuse(res, 416, "range_not_satisfiable", { "content-range": `bytes */${size}` });
      status = 206;
      headers["content-range"] = `bytes ${start}-${stop - 1}/${size}`;
    }
    headers["content-length"] = stop - start;
    res.writeHead(status, headers);
    if (req.method === "HEAD") return res.end();
    let body = data.subarray(start, stop);
    if (node.cutGet > 0) {
      node.cutGet -= 1;
      res.write(body.subarray(0, Math.floor(body.length / 2)), () => res.socket.destroy());
      return;
    }
    if (node.hold !== null) {
      res.write(body.subarray(0, node.holdBytes));
      let timer;
      const released = await Promise.race([
        node.hold.then(() => true),
        new Promise((resolve) => {
          timer = setTimeout(resolve, 10_000, false);
        }),
      ]);
      clearTimeout(timer);
      if (!released) {
        node.heldOut = true;
        res.socket.destroy();
        return;
      }
      body = body.subarray(node.holdBytes);
    }
    res.end(body);
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  node.url = `http://127.0.0.1:${server.address().port}`;
  node.stop = async () => {
    server.closeAllConnections();
    server.close();
    await once(server, "close");
  };
  return node;
}

let dir;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), "cohort-ts-blobs-"));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs `body` with fresh fake nodes and a client of them, then stops them all. */
async function withNodes(count, options, body) {
  const nodes = [];
  for (let i = 0; i < count; i += 1) nodes.push(await fakeNode());
  const client = new Client(
    nodes.map((node) => node.url),
    options,
  );
  try {
    await body(client, ...nodes);
  } finally {
    await client.close();
    for (const node of nodes) await node.stop();
  }
}

async function* chunksOf(data, size) {
  for (let i = 0; i < data.length; i += size) yield data.subarray(i, i + size);
}

test("a range is a slice, spelled as an HTTP range", () => {
  assert.equal(rangeHeader({}), undefined);
  assert.equal(rangeHeader({ start: 0 }), undefined);
  assert.equal(rangeHeader({ start: 10 }), "bytes=10-");
  assert.equal(rangeHeader({ start: 10, end: 20 }), "bytes=10-19");
  assert.equal(rangeHeader({ end: 1 }), "bytes=0-0");
  assert.equal(rangeHeader({ start: -5 }), "bytes=-5");
  for (const range of [{ start: 5, end: 5 }, { start: 6, end: 5 }, { start: -5, end: 10 }, { end: -1 }, { start: 1.5 }]) {
    assert.throws(() => rangeHeader(range), RangeError, JSON.stringify(range));
  }
});

test("a stream is sent chunked, whole and once; a wrong sha256 is refused", { timeout: 30_000 }, async () => {
  await withNodes(1, {}, async (client, node) => {
    const data = dataOf(3 * MiB + 12345);
    const info = await client.putBlob(chunksOf(data, 256 * 1024));
    assert.deepEqual(info, { digest: sha256(data), bytes: data.length });
    // A web ReadableStream too; stored before, the same answer.
    assert.deepEqual(await client.putBlob(Readable.toWeb(Readable.from(chunksOf(data, MiB)))), info);
    for (const put of node.requests("PUT")) {
      assert.equal(put.headers["transfer-encoding"], "chunked");
      assert.equal(put.headers["content-length"], undefined);
      assert.equal(put.headers["x-cohort-sha256"], undefined);
      assert.equal(put.headers["content-type"], "application/octet-stream");
      assert.ok(put.body.equals(data));
    }
    await assert.rejects(client.putBlob(chunksOf(data, MiB), { sha256: "0".repeat(64) }), {
      code: "blob_digest_mismatch",
      status: 422,
    });
    assert.equal(node.requests("PUT").length, 3);
    await assert.rejects(client.putBlob(chunksOf(data, MiB), { sha256: "not a digest" }), RangeError);
    await assert.rejects(client.putBlob("text"), TypeError);
  });
});

test("bytes and files are sent with their size and sha256, and failed over", { timeout: 30_000 }, async () => {
  await withNodes(2, { retryDeadlineMs: 10_000 }, async (client, first, second) => {
    const data = dataOf(2 * MiB + 7, 2);
    const path = join(dir, "data.bin");
    await writeFile(path, data);
    // The first node breaks the connection midway through the upload: the
    // file is sent again, whole, to the next node.
    first.cutPut = 1;
    assert.deepEqual(await client.putBlobFile(path), { digest: sha256(data), bytes: data.length });
    const small = new TextEncoder().encode("small");
    assert.deepEqual(await client.putBlob(small), { digest: sha256(small), bytes: 5 });
    const [cut] = first.requests("PUT");
    assert.equal(cut.headers["content-length"], String(data.length));
    const [fromFile, fromBytes] = second.requests("PUT");
    assert.ok(fromFile.body.equals(data));
    assert.equal(fromFile.headers["content-length"], String(data.length));
    assert.equal(fromFile.headers["transfer-encoding"], undefined);
    assert.equal(fromFile.headers["x-cohort-sha256"], sha256(data));
    assert.equal(fromBytes.headers["x-cohort-sha256"], sha256(small));
    // An empty file is a blob too.
    const empty = join(dir, "empty.bin");
    await writeFile(empty, "");
    assert.deepEqual(await client.putBlobFile(empty), { digest: sha256(Buffer.alloc(0)), bytes: 0 });
    await assert.rejects(client.putBlobFile(join(dir, "missing.bin")), { code: "file_unreadable" });
  });
});

test("a stream cut midway is not sent again", { timeout: 30_000 }, async () => {
  await withNodes(2, { retryDeadlineMs: 10_000 }, async (client, first, second) => {
    first.cutPut = 1;
    await assert.rejects(client.putBlob(chunksOf(dataOf(3 * MiB), MiB)), (error) => {
      assert.equal(error.code, "unreachable");
      assert.ok(error.message.includes(first.url), error.message);
      return true;
    });
    assert.equal(first.requests("PUT").length, 1);
    assert.equal(second.requests("PUT").length, 0);
  });
});

test("a blob is read as it arrives, and by range", { timeout: 30_000 }, async () => {
  await withNodes(1, {}, async (client, node) => {
    const data = dataOf(3 * MiB, 3);
    const digest = sha256(data);
    node.blobs.set(digest, data);
    let release;
    node.hold = new Promise((resolve) => {
      release = resolve;
    });
    node.holdBytes = 1000;
    const blob = await client.getBlob(digest);
    assert.deepEqual([blob.digest, blob.size, blob.start, blob.length], [digest, data.length, 0, data.length]);
    // The first bytes come while the node still holds back the rest.
    const reader = blob.body.getReader();
    const first = await reader.read();
    assert.ok(data.subarray(0, first.value.length).equals(first.value) && first.value.length <= 1000);
    assert.equal(node.heldOut, false);
    release();
    const parts = [first.value];
    for (let next = await reader.read(); !next.done; next = await reader.read()) parts.push(next.value);
    assert.ok(Buffer.concat(parts).equals(data));
    node.hold = null;

    const collect = async (stream) => {
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      return Buffer.concat(chunks);
    };
    const ranged = await client.getBlob(digest, { start: 10, end: 20 });
    assert.deepEqual([ranged.start, ranged.length, ranged.size], [10, 10, data.length]);
    assert.ok((await collect(ranged)).equals(data.subarray(10, 20)));
    const last = await client.getBlob(digest, { start: -7 });
    assert.equal(last.start, data.length - 7);
    assert.ok((await collect(last)).equals(data.subarray(-7)));
    assert.ok((await collect(await client.getBlob(digest, { start: data.length - 3 }))).equals(data.subarray(-3)));
    await assert.rejects(client.getBlob(digest, { start: data.length }), (error) => {
      assert.ok(error instanceof CohortError);
      assert.deepEqual([error.code, error.status], ["range_not_satisfiable", 416]);
      return true;
    });
    await assert.rejects(client.getBlob("0".repeat(64)), { code: "blob_not_found", status: 404 });
    const gets = node.requests("GET");
    assert.deepEqual(
      gets.map((seen) => seen.headers.range),
      [undefined, "bytes=10-19", "bytes=-7", `bytes=${data.length - 3}-`, `bytes=${data.length}-`, undefined],
    );
    for (const seen of gets) assert.equal(seen.headers["accept-encoding"], "identity");
  });
});

test("a download cut midway resumes where it broke", { timeout: 30_000 }, async () => {
  await withNodes(1, { retryDeadlineMs: 10_000 }, async (client, node) => {
    const data = dataOf(2 * MiB + 99, 4);
    const digest = sha256(data);
    node.blobs.set(digest, data);
    node.cutGet = 1;
    const chunks = [];
    for await (const chunk of await client.getBlob(digest, { start: 5 })) chunks.push(chunk);
    assert.ok(Buffer.concat(chunks).equals(data.subarray(5)));
    node.cutGet = 1;
    const target = join(dir, "resumed.bin");
    assert.deepEqual(await client.getBlobToFile(digest, target), { digest, bytes: data.length });
    assert.ok((await readFile(target)).equals(data));
    const ranges = node.requests("GET").map((seen) => seen.headers.range);
    assert.equal(ranges.length, 4);
    assert.equal(ranges[0], "bytes=5-");
    assert.match(ranges[1], new RegExp(`^bytes=\\d+-${data.length - 1}$`));
    assert.ok(Number(/=(\d+)-/.exec(ranges[1])[1]) > 5, ranges[1]);
    assert.equal(ranges[2], undefined);
    assert.match(ranges[3], new RegExp(`^bytes=[1-9]\\d*-${data.length - 1}$`));
  });
});

test("a download whose bytes are not the blob is not saved", { timeout: 30_000 }, async () => {
  await withNodes(1, {}, async (client, node) => {
    const data = dataOf(MiB + 1, 5);
    const digest = sha256(data);
    node.blobs.set(digest, data);
    node.wrong.set(digest, Buffer.concat([data.subarray(0, -1), Buffer.from([0])]));
    const sub = await mkdtemp(join(dir, "mismatch-"));
    const target = join(sub, "out.bin");
    await writeFile(target, "kept");
    await assert.rejects(client.getBlobToFile(digest, target), (error) => {
      assert.ok(error instanceof CohortError);
      assert.equal(error.code, "blob_digest_mismatch");
      assert.ok(error.message.includes(digest));
      return true;
    });
    assert.equal(await readFile(target, "utf8"), "kept");
    assert.deepEqual(await readdir(sub), ["out.bin"]);
    // A blob it lacks: nothing is left either.
    await assert.rejects(client.getBlobToFile("1".repeat(64), join(sub, "none.bin")), { code: "blob_not_found" });
    assert.deepEqual(await readdir(sub), ["out.bin"]);
  });
});

test("blobs are listed and looked at", { timeout: 30_000 }, async () => {
  await withNodes(1, {}, async (client, node) => {
    const stored = await client.putBlob(new TextEncoder().encode("hello"));
    assert.deepEqual(await client.listBlobs(), [stored]);
    assert.deepEqual(await client.headBlob(stored.digest), stored);
    assert.equal(await client.headBlob("2".repeat(64)), null);
    // A digest is one path segment, whatever it holds.
    assert.equal(await client.headBlob("../jobs"), null);
    assert.equal(node.requests("HEAD").at(-1).url, "/v1/blobs/..%2Fjobs");
  });
});

test("an upload's answer is waited for longer the larger the blob", { timeout: 30_000 }, async () => {
  // Once its body has gone, the try timeout (300 ms) plus the bytes sent at
  // the copy rate (1,000 bytes at 1,000 a second): an answer 800 ms after
  // the body comes in time, from bytes, a stream or a file; one later than
  // 1.3 s does not, nor one after 300 ms to an empty upload. All at once.
  const options = { retryDeadlineMs: 0, blobTimeouts: { tryTimeoutMs: 300, copyBytesPerSec: 1000 } };
  await withNodes(2, options, async (client, late, tooLate) => {
    late.putDelayMs = 800;
    tooLate.putDelayMs = 3000;
    const data = dataOf(1000, 7);
    const info = { digest: sha256(data), bytes: data.length };
    const path = join(dir, "late.bin");
    await writeFile(path, data);
    const timed = async (promise) => {
      const started = Date.now();
      try {
        return { value: await promise, ms: Date.now() - started };
      } catch (error) {
        return { error, ms: Date.now() - started };
      }
    };
    const tooLateClient = new Client(tooLate.url, options);
    try {
      const [fromBytes, fromStream, fromFile, beyond, empty] = await Promise.all([
        timed(client.putBlob(new Uint8Array(data))),
        timed(client.putBlob(chunksOf(data, 100))),
        timed(client.putBlobFile(path)),
        timed(tooLateClient.putBlob(chunksOf(data, 100))),
        timed(client.putBlob(new Uint8Array(0))),
      ]);
      for (const done of [fromBytes, fromStream, fromFile]) {
        assert.equal(done.error, undefined);
        assert.deepEqual(done.value, info);
        assert.ok(done.ms >= 800, `${done.ms}`);
      }
      assert.equal(beyond.error?.code, "unreachable");
      assert.match(beyond.error.message, /no answer within 1300 ms/);
      assert.ok(beyond.ms >= 1300 && beyond.ms < 2500, `${beyond.ms}`);
      assert.equal(empty.error?.code, "unreachable");
      assert.match(empty.error.message, /no answer within 300 ms/);
      assert.ok(empty.ms < 750, `${empty.ms}`);
    } finally {
      await tooLateClient.close();
    }
    assert.equal(late.requests("PUT").length, 4);
    assert.equal(tooLate.requests("PUT").length, 1);
  });
});

test("a download's head may wait for the node to fetch the blob; its body, the try timeout", { timeout: 30_000 }, async () => {
  const options = { retryDeadlineMs: 0, blobTimeouts: { tryTimeoutMs: 300, fetchWaitMs: 1000 } };
  await withNodes(1, options, async (client, node) => {
    const data = dataOf(5000, 8);
    const digest = sha256(data);
    node.blobs.set(digest, data);
    // The head comes 800 ms late: within 300 ms + 1 s.
    node.getDelayMs = 800;
    let started = Date.now();
    const blob = await client.getBlob(digest);
    assert.ok(Date.now() - started >= 800);
    const chunks = [];
    for await (const chunk of blob) chunks.push(chunk);
    assert.ok(Buffer.concat(chunks).equals(data));

    // Once the body flows, a chunk is waited for 300 ms, not 1.3 s: a
    // stalled body is resumed from where it stopped after 300 ms.
    node.getDelayMs = 0;
    let release;
    node.hold = new Promise((resolve) => {
      release = resolve;
    });
    node.holdBytes = 100;
    const stalled = await client.getBlob(digest);
    const reader = stalled.body.getReader();
    let read = 0;
    while (read < 100) read += (await reader.read()).value.length;
    started = Date.now();
    const next = await reader.read();
    const waited = Date.now() - started;
    assert.ok(waited >= 300 && waited < 1000, `${waited}`);
    assert.ok(Buffer.from(next.value).equals(data.subarray(100, 100 + next.value.length)));
    assert.equal(node.requests("GET").at(-1).headers.range, `bytes=100-${data.length - 1}`);
    release();
    node.hold = null;
    await reader.cancel();
  });
});

test("the waits' defaults: 16 MiB a second, 10 minutes", () => {
  assert.equal(BLOB_COPY_BYTES_PER_SEC, 16 * MiB);
  assert.equal(BLOB_FETCH_WAIT_MS, 600_000);
  const timing = blobTiming();
  assert.equal(copyAllowanceMs(64 * 1024 * MiB, timing), 4096_000);
  assert.deepEqual(blobTiming({ copyBytesPerSec: 10 }), { ...timing, copyBytesPerSec: 10 });
  for (const bad of [0, -1, Number.NaN]) {
    assert.throws(() => new Client("http://127.0.0.1:9", { blobTimeouts: { copyBytesPerSec: bad } }), RangeError);
  }
});

test("a digest in uppercase names the same blob", { timeout: 30_000 }, async () => {
  await withNodes(1, { retryDeadlineMs: 10_000 }, async (client, node) => {
    const data = dataOf(MiB + 5, 9);
    const digest = sha256(data);
    const upper = digest.toUpperCase();
    const info = { digest, bytes: data.length };
    assert.deepEqual(await client.putBlob(chunksOf(data, MiB), { sha256: upper }), info);
    assert.equal(node.requests("PUT")[0].headers["x-cohort-sha256"], digest);
    assert.deepEqual(await client.headBlob(upper), info);
    const ranged = await client.getBlob(upper, { start: 3, end: 9 });
    assert.equal(ranged.digest, digest);
    const chunks = [];
    for await (const chunk of ranged) chunks.push(chunk);
    assert.ok(Buffer.concat(chunks).equals(data.subarray(3, 9)));
    node.cutGet = 1; // resumed under the same, lowercase, name
    const target = join(dir, "upper.bin");
    assert.deepEqual(await client.getBlobToFile(upper, target), info);
    assert.ok((await readFile(target)).equals(data));
    const paths = new Set(node.seen.filter((seen) => seen.method !== "PUT").map((seen) => seen.url));
    assert.deepEqual([...paths], [`/v1/blobs/${digest}`]);
  });
});

// Jobs given an input blob, and the blobs they write.

/** A module digest the fake node takes as it is (nothing is uploaded). */
const MODULE = "ab".repeat(32);

test("a job's input blob is sent as given, left out when not given, and its output blobs come back", { timeout: 30_000 }, async () => {
  await withNodes(1, {}, async (client, node) => {
    const text = Buffer.from("a b a");
    const info = await client.putBlob(text);
    const byInfo = client.submit(MODULE, undefined, { inputBlob: info });
    // A string goes as it is given: the node reads either case and `sha256:`.
    const byText = client.submit(MODULE, "inline too", { inputBlob: `sha256:${info.digest.toUpperCase()}` });
    const plain = client.submit(MODULE, "no blob");
    const upper = { name: "upper.txt", digest: sha256(Buffer.from("A B A")), bytes: text.length };
    assert.deepEqual(await byInfo.outputs(10_000), [upper]);
    assert.deepEqual(await byText.outputs(10_000), [upper]);
    assert.equal(await byInfo.text(), String(text.length));
    // None written: empty.
    assert.deepEqual(await plain.outputs(10_000), []);
    assert.equal(await plain.text(), "no blob");
    // The view, its absent fields undefined.
    const view = await byInfo.status();
    assert.deepEqual(view.input_blob, { digest: info.digest, bytes: text.length });
    assert.deepEqual(view.outputs, [upper]);
    const bare = await plain.status();
    assert.equal(bare.input_blob, undefined);
    assert.equal(bare.outputs, undefined);
    // An output blob downloads as any blob, and is the next job's input.
    const download = await client.getBlob(upper.digest);
    assert.equal(Buffer.from(await new Response(download.body).arrayBuffer()).toString(), "A B A");
    const chained = client.submit(MODULE, undefined, { inputBlob: upper });
    assert.deepEqual(await chained.outputs(10_000), [upper]);
    // A blob the cluster does not have: the node's refusal.
    const missing = client.submit(MODULE, undefined, { inputBlob: "0".repeat(64) });
    await assert.rejects(missing.id(), { name: "CohortError", code: "blob_not_found", status: 404 });
    await assert.rejects(missing.outputs(10_000), (error) => error.code === "blob_not_found");
    assert.throws(() => client.submit(MODULE, undefined, { inputBlob: 42 }), TypeError);
    // Each job's submission as it came.
    const sent = [...node.jobs.values()];
    assert.deepEqual(
      sent.map((job) => job.input_blob),
      [info.digest, `sha256:${info.digest.toUpperCase()}`, undefined, upper.digest],
    );
    assert.ok(!("input_blob" in sent[2]));
    assert.equal(sent[1].input, "inline too");
  });
});

test("schedules, DAGs and map send an input blob in their jobs", { timeout: 30_000 }, async () => {
  const sent = [];
  const fetch = async (url, init) => {
    sent.push({ path: new URL(url).pathname, body: JSON.parse(init.body) });
    const path = new URL(url).pathname;
    const reply = path === "/v1/dags" ? { id: 1, jobs: [1, 2], existing: false } : { name: "nightly", upcoming: [] };
    return new Response(JSON.stringify(reply), { status: 200, headers: { "content-type": "application/json" } });
  };
  const client = new Client("http://a", { fetch });
  const digest = "ef".repeat(32);
  try {
    await client.createSchedule("nightly", MODULE, undefined, { everyMs: 60_000, job: { inputBlob: { digest, bytes: 1 } } });
    await client.createSchedule("plain", MODULE, "x", { everyMs: 60_000 });
    await client.submitDag([
      { name: "count", module: MODULE, options: { inputBlob: digest } },
      { name: "report", module: MODULE, after: ["count"] },
    ]);
  } finally {
    await client.close();
  }
  assert.deepEqual(sent[0].body.job, { module: MODULE, input_blob: digest });
  assert.deepEqual(sent[1].body.job, { module: MODULE, input: "x" });
  assert.deepEqual(
    sent[2].body.jobs.map((entry) => entry.job),
    [{ module: MODULE, input_blob: digest }, { module: MODULE }],
  );
  await withNodes(1, {}, async (client, node) => {
    const info = await client.putBlob(Buffer.from("x y"));
    assert.deepEqual(
      (await client.map(MODULE, ["", ""], { inputBlob: info })).map((output) => Buffer.from(output).toString()),
      ["3", "3"],
    );
    assert.deepEqual([...node.jobs.values()].map((job) => job.input_blob), [info.digest, info.digest]);
  });
});

test("labels go as an object only when given: by submit, map, schedules and DAGs", { timeout: 30_000 }, async () => {
  const gpu = { gpu: "a100", zone: "eu" };
  await withNodes(1, {}, async (client, node) => {
    const jobs = [
      client.submit(MODULE, "labelled", { labels: gpu, memoryBytes: 64 * MiB }),
      client.submit(MODULE, "plain"),
      client.submit(MODULE, "empty", { labels: {} }),
    ];
    assert.deepEqual(await Promise.all(jobs.map((job) => job.text(10_000))), ["labelled", "plain", "empty"]);
    const outputs = await client.map(MODULE, ["map 1", "map 2"], { labels: { gpu: "a100" } });
    assert.deepEqual(outputs.map((output) => Buffer.from(output).toString()), ["map 1", "map 2"]);
    // Each job's submission as it came, by its input.
    const sent = new Map([...node.jobs.values()].map((job) => [job.input, job]));
    assert.deepEqual(Object.fromEntries([...sent].map(([input, job]) => [input, job.labels])), {
      labelled: gpu,
      plain: undefined,
      empty: undefined,
      "map 1": { gpu: "a100" },
      "map 2": { gpu: "a100" },
    });
    // None given, or none in them: no `labels` key at all.
    assert.ok(!("labels" in sent.get("plain")) && !("labels" in sent.get("empty")));
    assert.equal(sent.get("labelled").memory_bytes, 64 * MiB);
  });
  const sent = [];
  const fetch = async (url, init) => {
    sent.push(JSON.parse(init.body));
    const reply = new URL(url).pathname === "/v1/dags" ? { id: 1, jobs: [1, 2], existing: false } : { name: "gpu", upcoming: [] };
    return new Response(JSON.stringify(reply), { status: 200, headers: { "content-type": "application/json" } });
  };
  const client = new Client("http://a", { fetch });
  try {
    await client.createSchedule("gpu", MODULE, undefined, { everyMs: 60_000, job: { labels: gpu } });
    await client.submitDag([
      { name: "train", module: MODULE, options: { labels: gpu } },
      { name: "report", module: MODULE, after: ["train"] },
    ]);
  } finally {
    await client.close();
  }
  assert.deepEqual(sent[0].job, { module: MODULE, labels: gpu });
  assert.deepEqual(sent[1].jobs.map((entry) => entry.job), [{ module: MODULE, labels: gpu }, { module: MODULE }]);
});

test("a namespace goes only when given: by submit and map", { timeout: 30_000 }, async () => {
  await withNodes(1, {}, async (client, node) => {
    const jobs = [client.submit(MODULE, "named", { namespace: "team-a" }), client.submit(MODULE, "plain")];
    assert.deepEqual(await Promise.all(jobs.map((job) => job.text(10_000))), ["named", "plain"]);
    const outputs = await client.map(MODULE, ["map"], { namespace: "team-b" });
    assert.deepEqual(outputs.map((output) => Buffer.from(output).toString()), ["map"]);
    const sent = new Map([...node.jobs.values()].map((job) => [job.input, job]));
    assert.deepEqual(Object.fromEntries([...sent].map(([input, job]) => [input, job.namespace])), {
      named: "team-a",
      plain: undefined,
      map: "team-b",
    });
    assert.ok(!("namespace" in sent.get("plain")));
  });
});

test("a wait's output blobs are checked; a job that did not succeed has its failure, not outputs", async () => {
  const blob = { name: "counts.tsv", digest: "ab".repeat(32), bytes: 12 };
  assert.deepEqual(outputBlobsOf([blob], 1), [blob]);
  assert.deepEqual(outputBlobsOf(undefined, 1), []);
  for (const bad of [[{ name: "x", digest: blob.digest }], [{ ...blob, bytes: "12" }], ["x"], {}]) {
    assert.throws(() => outputBlobsOf(bad, 1), (error) => error instanceof CohortError && error.code === "bad_response");
  }
  const fetch = async (url) => {
    const path = new URL(url).pathname;
    const reply =
      path === "/v1/jobs/batch"
        ? { results: [{ id: 9, existing: false }] }
        : {
            jobs: [
              { id: 9, state: "dead", error: { code: "trap", message: "unreachable" }, output_base64: null, output_bytes: null },
            ],
          };
    return new Response(JSON.stringify(reply), { status: path === "/v1/jobs/batch" ? 202 : 200 });
  };
  const client = new Client("http://a", { fetch });
  try {
    const job = client.submit(MODULE, undefined, { inputBlob: blob });
    await assert.rejects(job.outputs(10_000), (error) => {
      assert.ok(error instanceof JobFailed);
      assert.deepEqual([error.code, error.state], ["trap", "dead"]);
      return true;
    });
  } finally {
    await client.close();
  }
});
