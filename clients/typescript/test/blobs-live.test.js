// Blobs through the client, against a real node: bytes, a file and a stream
// stored under the sha256 of their bytes, read back whole and by range,
// saved to a file; the node's refusals, with their codes; and a job that
// streams its input blob and writes an output blob.

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Client } from "../dist/index.js";
import { echoWasm, startNode, wordcountWasm } from "../testing/cluster.js";

const MiB = 1 << 20;

function sha256(bytes) {
  return createHash("sha256").update(bytes).digest("hex");
}

/** `data` as a web `ReadableStream`, in pieces of `piece` bytes. */
function streamOf(data, piece = 64 * 1024) {
  let at = 0;
  return new ReadableStream({
    pull(controller) {
      if (at >= data.length) {
        controller.close();
        return;
      }
      controller.enqueue(new Uint8Array(data.subarray(at, at + piece)));
      at += piece;
    },
  });
}

/** `data` as an async iterable of `Uint8Array`s. */
async function* piecesOf(data, piece = 100_000) {
  for (let at = 0; at < data.length; at += piece) {
    await new Promise((resolve) => setImmediate(resolve));
    yield data.subarray(at, at + piece);
  }
}

/** Every byte of a `BlobStream`, iterated. */
async function bytesOf(blob) {
  const chunks = [];
  for await (const chunk of blob) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/** Every byte of a `BlobStream`'s `body`. */
async function bodyOf(blob) {
  return Buffer.from(await new Response(blob.body).arrayBuffer());
}

const byDigest = (a, b) => (a.digest < b.digest ? -1 : a.digest > b.digest ? 1 : 0);

let node;
let client;
let dir;

before(async () => {
  node = await startNode({ nodeId: "t-blobs" });
  client = new Client(node.url);
  dir = await mkdtemp(join(tmpdir(), "cohort-ts-blobs-"));
});

after(async () => {
  await client?.close();
  await node?.stop();
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
});

test("blobs go up as bytes, a file and a stream, and come back whole, by range and to a file", { timeout: 60_000 }, async () => {
  const small = randomBytes(300_000);
  // A few MiB, not a multiple of the client's 1 MiB chunks.
  const large = randomBytes(3 * MiB + 12_345);
  const source = join(dir, "large.bin");
  await writeFile(source, large);
  const streamed = randomBytes(2 * MiB + 777);

  // Bytes: the digest is the sha256 of the bytes; again, the same.
  const stored = await client.putBlob(small);
  assert.deepEqual(stored, { digest: sha256(small), bytes: small.length });
  assert.deepEqual(await client.putBlob(small), stored);
  assert.deepEqual(await client.putBlob(new Uint8Array(small)), stored);

  // A file, streamed from disk.
  const fromFile = await client.putBlobFile(source);
  assert.deepEqual(fromFile, { digest: sha256(large), bytes: large.length });
  assert.deepEqual(await client.putBlobFile(source), fromFile);
  assert.deepEqual(await client.putBlob(large), fromFile, "the file's bytes, sent as bytes: the same blob");

  // A stream of unknown length: a web ReadableStream, an async iterable.
  const fromStream = await client.putBlob(streamOf(streamed));
  assert.deepEqual(fromStream, { digest: sha256(streamed), bytes: streamed.length });
  assert.deepEqual(await client.putBlob(piecesOf(streamed), { sha256: sha256(streamed) }), fromStream);

  // HEAD and the list.
  for (const info of [stored, fromFile, fromStream]) {
    assert.deepEqual(await client.headBlob(info.digest), info);
  }
  const listed = await client.listBlobs();
  const infos = listed.map(({ digest, bytes }) => ({ digest, bytes }));
  assert.deepEqual(infos.sort(byDigest), [stored, fromFile, fromStream].sort(byDigest));
  // The cluster's listing, a page at a time, by digest.
  const page = await client.keptBlobs({ limit: 2 });
  const sorted = [...listed].sort(byDigest);
  assert.deepEqual(page, { blobs: sorted.slice(0, 2), next: sorted[1].digest });
  assert.deepEqual(await client.keptBlobs({ after: page.next }), { blobs: sorted.slice(2) });
  // Kept by the cluster, named by nothing: collected after the retention
  // time (1 h by default) from the last upload.
  const now = Date.now();
  for (const blob of listed) {
    assert.deepEqual([blob.kept, blob.refs], [true, 0], JSON.stringify(blob));
    assert.ok(now < blob.collect_at && blob.collect_at <= now + 3_600_000 + 60_000, JSON.stringify(blob));
  }

  // Whole, a middle range, a suffix (the last bytes), an end past the blob's.
  const whole = await client.getBlob(fromFile.digest);
  assert.deepEqual([whole.digest, whole.size, whole.start, whole.length], [fromFile.digest, large.length, 0, large.length]);
  assert.ok((await bytesOf(whole)).equals(large));
  const [start, end] = [MiB - 5, 2 * MiB + 9]; // across chunk boundaries
  const middle = await client.getBlob(fromFile.digest, { start, end });
  assert.deepEqual([middle.size, middle.start, middle.length], [large.length, start, end - start]);
  assert.ok((await bodyOf(middle)).equals(large.subarray(start, end)));
  const suffix = await client.getBlob(fromFile.digest, { start: -4321 });
  assert.deepEqual([suffix.start, suffix.length], [large.length - 4321, 4321]);
  assert.ok((await bytesOf(suffix)).equals(large.subarray(-4321)));
  const tail = await client.getBlob(fromFile.digest, { start: large.length - 10, end: large.length + 1000 });
  assert.ok((await bytesOf(tail)).equals(large.subarray(-10)));
  const last = await client.getBlob(stored.digest, { start: small.length - 1 });
  assert.ok((await bytesOf(last)).equals(small.subarray(-1)));
  const longer = await client.getBlob(stored.digest, { start: -(small.length + 100) });
  assert.ok((await bytesOf(longer)).equals(small), "a suffix longer than the blob: the whole blob");
  const first = await client.getBlob(fromStream.digest, { start: 0, end: 1 });
  assert.ok((await bytesOf(first)).equals(streamed.subarray(0, 1)));
  // Left early: the rest is not read; the client goes on.
  const early = await client.getBlob(fromFile.digest);
  for await (const chunk of early) {
    assert.ok(chunk.byteLength > 0);
    break;
  }

  // Saved to a file: the same bytes, and no partial file left beside it.
  const savedDir = join(dir, "saved");
  await mkdir(savedDir);
  const saved = join(savedDir, "copy.bin");
  assert.deepEqual(await client.getBlobToFile(fromFile.digest, saved), fromFile);
  assert.ok((await readFile(saved)).equals(large));
  assert.deepEqual(await client.getBlobToFile(fromStream.digest, saved), fromStream);
  assert.ok((await readFile(saved)).equals(streamed), "an existing file is replaced");
  assert.deepEqual(await readdir(savedDir), ["copy.bin"]);
});

test("a missing blob, a range past the end and a stream with the wrong sha256 are refused with their codes", { timeout: 60_000 }, async () => {
  const data = randomBytes(150_000);
  const stored = await client.putBlob(data);

  const missing = sha256(Buffer.from("never uploaded"));
  assert.equal(await client.headBlob(missing), null);
  await assert.rejects(client.getBlob(missing), { code: "blob_not_found", status: 404 });
  await assert.rejects(client.getBlob(missing, { start: 10, end: 20 }), { code: "blob_not_found", status: 404 });
  const nowhere = join(dir, "missing.bin");
  await assert.rejects(client.getBlobToFile(missing, nowhere), { code: "blob_not_found" });
  assert.ok(!(await readdir(dir)).includes("missing.bin"));
  assert.deepEqual((await readdir(dir)).filter((name) => name.endsWith(".part")), []);

  for (const range of [{ start: data.length }, { start: data.length + 10, end: data.length + 20 }]) {
    await assert.rejects(
      client.getBlob(stored.digest, range),
      { code: "range_not_satisfiable", status: 416 },
      JSON.stringify(range),
    );
  }

  const before = await client.listBlobs();
  const wrong = randomBytes(100_000);
  const claimed = sha256(Buffer.from("something else"));
  await assert.rejects(client.putBlob(piecesOf(wrong), { sha256: claimed }), {
    code: "blob_digest_mismatch",
    status: 422,
  });
  await assert.rejects(client.putBlob(streamOf(wrong), { sha256: claimed }), {
    code: "blob_digest_mismatch",
    status: 422,
  });
  await assert.rejects(client.putBlob(wrong, { sha256: claimed }), { code: "blob_digest_mismatch", status: 422 });
  assert.equal(await client.headBlob(sha256(wrong)), null);
  assert.equal(await client.headBlob(claimed), null);
  const listed = await client.listBlobs();
  assert.deepEqual([...listed].sort(byDigest), [...before].sort(byDigest));
  assert.ok(!listed.some((blob) => blob.digest === sha256(wrong) || blob.digest === claimed));
});

test("a job streams its input blob and writes an output blob, downloaded as any blob", { timeout: 60_000 }, async () => {
  // wordcount, given an input blob, streams it and writes `counts.tsv`:
  // every word and its count, by count descending then word ascending.
  const wordcount = wordcountWasm();
  const text = "The cat and the hat and the bat\n".repeat(50) + "zebra";
  const expected = "the\t150\nand\t100\nbat\t50\ncat\t50\nhat\t50\nzebra\t1\n";
  const info = await client.putBlob(Buffer.from(text));
  const job = client.submit(wordcount, undefined, { inputBlob: info });
  const result = await job.json(60_000);
  assert.deepEqual([result.words, result.unique], [401, 6], JSON.stringify(result));
  assert.deepEqual(result.top[0], { word: "the", count: 150 });
  const outputs = await job.outputs();
  assert.deepEqual(outputs.map((blob) => blob.name), ["counts.tsv"]);
  const [counts] = outputs;
  assert.equal(counts.bytes, Buffer.byteLength(expected));
  const view = await job.status();
  assert.deepEqual(view.input_blob, info);
  assert.deepEqual(view.outputs, [counts]);
  // Downloaded as any blob, its sha256 checked.
  const saved = join(dir, "counts.tsv");
  assert.deepEqual(await client.getBlobToFile(counts.digest, saved), { digest: counts.digest, bytes: counts.bytes });
  const tsv = await readFile(saved, "utf8");
  const top = result.top[0];
  assert.equal(tsv.split("\n")[0], `${top.word}\t${top.count}`);
  assert.equal(tsv, expected);
  // A job without a blob: none in its view, none written.
  const inline = client.submit(wordcount, "a b a");
  assert.equal((await inline.json(60_000)).words, 3);
  assert.deepEqual(await inline.outputs(), []);
  const bare = await inline.status();
  assert.equal(bare.input_blob, undefined);
  assert.equal(bare.outputs, undefined);
  // A blob the cluster does not have, and a digest that is not one.
  const missing = client.submit(wordcount, undefined, { inputBlob: sha256(Buffer.from("never uploaded")) });
  await assert.rejects(missing.id(), { code: "blob_not_found", status: 404 });
  const malformed = client.submit(wordcount, undefined, { inputBlob: "not-a-digest" });
  await assert.rejects(malformed.id(), { code: "invalid_job", status: 422 });
});

test("a blob nothing names is deleted; one a job or a schedule names is not", { timeout: 60_000 }, async () => {
  const loose = await client.putBlob(Buffer.from("nothing names these bytes (ts)"));
  const named = await client.putBlob(Buffer.from("a job reads these bytes (ts)"));
  const scheduled = await client.putBlob(Buffer.from("a schedule's jobs read these bytes (ts)"));

  // Nothing names it: no longer kept at once, then unknown to the cluster.
  assert.equal(await client.deleteBlob(loose.digest.toUpperCase()), undefined, "either case");
  await assert.rejects(client.deleteBlob(loose.digest), { code: "blob_not_found", status: 404 });
  // A job may no longer name it (upload it again first).
  await assert.rejects(client.submit(echoWasm, "x", { inputBlob: loose }).id(), { code: "blob_not_found", status: 404 });

  // A held job names it, finished or not: refused while the job is held.
  const job = client.submit(echoWasm, "reads a blob", { inputBlob: named });
  assert.equal(await job.text(60_000), "reads a blob");
  await assert.rejects(client.deleteBlob(named.digest), { code: "blob_in_use", status: 409, retryable: false });

  // A schedule's template names it while the schedule exists.
  await client.createSchedule("ts-blob-reader", echoWasm, "tick", { everyMs: 3_600_000, job: { inputBlob: scheduled } });
  await assert.rejects(client.deleteBlob(scheduled.digest), { code: "blob_in_use", status: 409 });

  // What the node lists: the copies it still has (deleted after its grace
  // period), each with what the cluster says of it.
  let listed = new Map((await client.listBlobs()).map((blob) => [blob.digest, blob]));
  assert.deepEqual(listed.get(loose.digest), { ...loose, kept: false, refs: 0 });
  assert.deepEqual(listed.get(named.digest), { ...named, kept: true, refs: 1 });
  assert.deepEqual(listed.get(scheduled.digest), { ...scheduled, kept: true, refs: 1 });

  // The schedule gone, nothing names it: deleted at once.
  await client.deleteSchedule("ts-blob-reader");
  listed = new Map((await client.listBlobs()).map((blob) => [blob.digest, blob]));
  assert.equal(listed.get(scheduled.digest).refs, 0);
  assert.equal(typeof listed.get(scheduled.digest).collect_at, "number");
  await client.deleteBlob(scheduled.digest);
  await assert.rejects(client.deleteBlob(scheduled.digest), { code: "blob_not_found" });
  // Uploaded again, kept again.
  assert.deepEqual(await client.putBlob(Buffer.from("nothing names these bytes (ts)")), loose);
  listed = new Map((await client.listBlobs()).map((blob) => [blob.digest, blob]));
  assert.equal(listed.get(loose.digest).kept, true);
  // Purged, the blob a finished job read goes with that job.
  assert.equal(await client.purgeBlob(named.digest), 1);
  await assert.rejects(job.status(), { code: "job_expired", status: 404 });
  await assert.rejects(client.purgeBlob(named.digest), { code: "blob_not_found", status: 404 });
});
