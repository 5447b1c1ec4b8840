/**
 * Blobs: data of any length named by the sha256 of its bytes, streamed to
 * the cluster (`PUT /v1/blobs`) and back (`GET /v1/blobs/{digest}`), never
 * held whole: ranges, the bodies of uploads, a download that resumes where
 * it broke, and the temporary file a download is saved through.
 *
 * @packageDocumentation
 */

import { createHash, randomBytes, type Hash } from "node:crypto";
import { createReadStream } from "node:fs";
import { open, rename, unlink, type FileHandle } from "node:fs/promises";
import { basename, dirname, join, resolve as resolvePath } from "node:path";
import { CohortError } from "./errors.js";
import type { StreamedAnswer } from "./transport.js";
import type { BlobEntry, BlobInfo, BlobRange, BlobStream, ClientOptions, OutputBlob } from "./types.js";

/** The request header naming the digest an upload must have. */
export const SHA256_HEADER = "x-cohort-sha256";
/**
 * The slowest rate, in bytes a second, at which a node is taken to copy a
 * blob between nodes (16 MiB/s). A node answers an upload only once the
 * blob is durable on a majority of the back-end nodes, copying it after its
 * last byte arrived: once an upload's body has been sent, its answer is
 * waited for the try timeout plus one second per this many bytes sent (a
 * 64 GiB blob: 4096 s more). A resumed download, whose blob's size is
 * known, allows as much for a node without a copy to copy the blob up to
 * the range it resumes at. See {@link ClientOptions.blobTimeouts}.
 */
export const BLOB_COPY_BYTES_PER_SEC = 16 * 1024 * 1024;
/**
 * How much longer than the try timeout a download waits for its answer's
 * head when the blob's size is not known (its first request): 10 minutes. A
 * node without a copy answers once its copy from another has the first MiB,
 * or all of a smaller blob, a range once the copy also reaches the range's
 * first byte. Once the body flows, the try timeout is again the longest
 * wait for each next chunk.
 */
export const BLOB_FETCH_WAIT_MS = 600_000;
/** The try timeout of blob calls: the longest wait for progress (a chunk, or the answer's head). */
export const BLOB_TRY_TIMEOUT_MS = 30_000;
/** A download failing this many times in a row without a byte between gives up. */
const RESUMES_WITHOUT_PROGRESS_MAX = 3;
/** How much of a file is read at a time. */
const FILE_CHUNK_BYTES = 1 << 20;

const ANY_CASE_DIGEST = /^[0-9a-fA-F]{64}$/;
const CONTENT_RANGE = /^bytes (\d+)-(\d+)\/(\d+)$/;

/**
 * A digest as the caller gave it, in lowercase if it is one (64 hex digits,
 * either case): digests are case-insensitive hex, and the node, the `ETag`
 * and the bytes' sha256 spell them in lowercase. Anything else is left as
 * it is, for the node to answer.
 */
export function blobDigest(digest: string): string {
  return typeof digest === "string" && ANY_CASE_DIGEST.test(digest) ? digest.toLowerCase() : digest;
}

/** The route of blob `digest` (one path segment, whatever it holds). */
export function blobPath(digest: string): string {
  return `/v1/blobs/${encodeURIComponent(blobDigest(digest))}`;
}

/** How long blob calls wait: {@link ClientOptions.blobTimeouts}, checked, with their defaults. */
export interface BlobTiming {
  tryTimeoutMs: number;
  copyBytesPerSec: number;
  fetchWaitMs: number;
}

/** `options`' blob timeouts, checked (a `RangeError` for one that is not a positive number). */
export function blobTiming(options: ClientOptions["blobTimeouts"] = {}): BlobTiming {
  const timing: BlobTiming = {
    tryTimeoutMs: options.tryTimeoutMs ?? BLOB_TRY_TIMEOUT_MS,
    copyBytesPerSec: options.copyBytesPerSec ?? BLOB_COPY_BYTES_PER_SEC,
    fetchWaitMs: options.fetchWaitMs ?? BLOB_FETCH_WAIT_MS,
  };
  for (const [name, value] of Object.entries(timing)) {
    if (!(typeof value === "number" && value > 0)) {
      throw new RangeError(`blobTimeouts.${name} must be above 0, not ${value}`);
    }
  }
  return timing;
}

/** How long a node is given to copy (or fetch) `bytes` of a blob before it answers, in ms. */
export function copyAllowanceMs(bytes: number, timing: BlobTiming): number {
  return (bytes / timing.copyBytesPerSec) * 1000;
}

/**
 * The `Range` header of bytes `start` to `end` of a blob, as
 * `Uint8Array.slice` takes them: `end` excluded, either left out for that
 * end of the blob, a negative `start` (without `end`) for the last
 * `-start` bytes. `undefined` for the whole blob. Throws a `RangeError`
 * for a range HTTP cannot ask for (empty, or a negative `end`).
 */
export function rangeHeader(range: BlobRange = {}): string | undefined {
  const { start, end } = range;
  for (const [name, value] of [["start", start], ["end", end]] as const) {
    if (value !== undefined && !Number.isSafeInteger(value)) {
      throw new RangeError(`${name} must be an integer, not ${value}`);
    }
  }
  if (start !== undefined && start < 0) {
    if (end !== undefined) throw new RangeError("a negative start (the last bytes) takes no end");
    return `bytes=${start}`; // "bytes=-N"
  }
  const first = start ?? 0;
  if (end === undefined) return first === 0 ? undefined : `bytes=${first}-`;
  if (end < 0) throw new RangeError(`end must be 0 or more, not ${end}`);
  if (end <= first) throw new RangeError(`an empty range: end (${end}) must be above start (${first})`);
  return `bytes=${first}-${end - 1}`;
}

/** A digest, checked (64 hex digits, either case), in lowercase. */
export function validDigest(digest: string): string {
  if (typeof digest !== "string" || !ANY_CASE_DIGEST.test(digest)) {
    throw new RangeError(`a sha256 is 64 hex digits, not ${JSON.stringify(digest)}`);
  }
  return digest.toLowerCase();
}

/** A node's answer that is not the API's. */
function badResponse(message: string): CohortError {
  return new CohortError("bad_response", message);
}

/** A `{digest, bytes}` of an answer, checked. */
export function blobInfoOf(value: unknown): BlobInfo {
  const info = value as Partial<BlobInfo> | null;
  if (typeof info?.digest !== "string" || !Number.isSafeInteger(info.bytes)) {
    throw badResponse(`a blob that is not {digest, bytes}: ${JSON.stringify(value)}`);
  }
  return { digest: info.digest, bytes: info.bytes as number };
}

/** A blob of `GET /v1/blobs`'s answer: `{digest, bytes}` and, when the node says, `kept`, `refs` and `collect_at`, checked. */
export function blobEntryOf(value: unknown): BlobEntry {
  const entry: BlobEntry = blobInfoOf(value);
  const { kept, refs, collect_at } = value as Partial<BlobEntry>;
  const count = (n: unknown) => n === undefined || (Number.isSafeInteger(n) && (n as number) >= 0);
  if ((kept !== undefined && typeof kept !== "boolean") || !count(refs) || !count(collect_at)) {
    throw badResponse(`a listed blob whose kept, refs or collect_at is of another type: ${JSON.stringify(value)}`);
  }
  if (kept !== undefined) entry.kept = kept;
  if (refs !== undefined) entry.refs = refs;
  if (collect_at !== undefined) entry.collect_at = collect_at;
  return entry;
}

/** The `outputs` of job `id`'s answer (absent: none), each `{name, digest, bytes}`, checked. */
export function outputBlobsOf(value: unknown, id: number): OutputBlob[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw badResponse(`job ${id}'s outputs are not a list: ${JSON.stringify(value)}`);
  return value.map((item: unknown) => {
    const blob = item as Partial<OutputBlob> | null;
    if (typeof blob?.name !== "string" || typeof blob.digest !== "string" || !Number.isSafeInteger(blob.bytes)) {
      throw badResponse(`job ${id}'s output blob is not {name, digest, bytes}: ${JSON.stringify(item)}`);
    }
    return { name: blob.name, digest: blob.digest, bytes: blob.bytes as number };
  });
}

/** An upload's answer, checked against what was sent (`bad_response` if the node stored other bytes). */
export function storedAs(answer: unknown, sent: BlobInfo): BlobInfo {
  const info = blobInfoOf(answer);
  if (info.digest !== sent.digest || info.bytes !== sent.bytes) {
    throw badResponse(`the node stored ${info.digest} (${info.bytes} bytes), not the ${sent.digest} sent`);
  }
  return info;
}

/** A blob's `ETag`, when the answer has one, names the blob asked for. */
export function checkEtag(headers: Headers, digest: string): void {
  const etag = headers.get("etag");
  if (etag !== null && blobDigest(etag.replace(/^W\//, "").replace(/"/g, "")) !== blobDigest(digest)) {
    throw badResponse(`blob ${digest} answered with the ETag ${etag}`);
  }
}

/** An integer header, or `undefined`. */
function integerHeader(headers: Headers, name: string): number | undefined {
  const value = headers.get(name);
  return value !== null && /^\d+$/.test(value) ? Number(value) : undefined;
}

/** The blob a `HEAD /v1/blobs/{digest}` answer describes. */
export function headInfo(headers: Headers, given: string): BlobInfo {
  const digest = blobDigest(given);
  checkEtag(headers, digest);
  const bytes = integerHeader(headers, "content-length");
  if (bytes === undefined) throw badResponse(`blob ${digest}'s HEAD without a Content-Length`);
  return { digest, bytes };
}

/** A file's sha256 and size, read in chunks. */
export async function hashFile(path: string): Promise<BlobInfo> {
  const hash = createHash("sha256");
  let bytes = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: FILE_CHUNK_BYTES })) {
    hash.update(chunk as Buffer);
    bytes += (chunk as Buffer).byteLength;
  }
  return { digest: hash.digest("hex"), bytes };
}

/**
 * A file of known size, read anew by each try; one that ends early
 * changed since it was hashed (`blob_digest_mismatch`, final).
 */
export async function* fileChunks(path: string, info: BlobInfo): AsyncIterable<Uint8Array> {
  let left = info.bytes;
  if (left === 0) return;
  for await (const chunk of createReadStream(path, { end: info.bytes - 1, highWaterMark: FILE_CHUNK_BYTES })) {
    left -= (chunk as Buffer).byteLength;
    yield chunk as Buffer;
  }
  if (left > 0) {
    throw new CohortError("blob_digest_mismatch", `${path} is shorter than its ${info.bytes} bytes hashed: it changed`);
  }
}

/** A stream of bytes sent once, hashed as it goes. */
export class HashedOnce {
  private readonly hash: Hash = createHash("sha256");
  private bytes = 0;
  private used = false;

  constructor(private readonly source: AsyncIterable<Uint8Array>) {}

  /** The chunks, hashed; only once. */
  async *chunks(): AsyncIterable<Uint8Array> {
    if (this.used) throw new Error("a stream's body is sent once");
    this.used = true;
    for await (const chunk of this.source) {
      if (!(chunk instanceof Uint8Array)) {
        throw new TypeError(`a blob's stream gave ${typeof chunk}, not a Uint8Array`);
      }
      this.hash.update(chunk);
      this.bytes += chunk.byteLength;
      yield chunk;
    }
  }

  /** What was sent. */
  sent(): BlobInfo {
    return { digest: this.hash.digest("hex"), bytes: this.bytes };
  }
}

/**
 * Where a download stands: bytes `start` to `stop` (excluded) of a blob of
 * `size` bytes, read up to `position`. A download broken by a transport
 * failure resumes with a `Range` from `position`, on the next node: a blob
 * never changes under its digest.
 */
export class ReadWindow {
  start = 0;
  stop = 0;
  size = 0;
  position = 0;
  private opened = false;
  private stalls = 0;
  private progressSinceOpen = false;
  readonly digest: string;

  constructor(digest: string) {
    this.digest = blobDigest(digest);
  }

  /** The blob's size once an answer gave it. */
  get knownSize(): number | undefined {
    return this.opened ? this.size : undefined;
  }

  /** Takes an answer to a (resumed) `GET`: its window, checked. */
  accept(answer: StreamedAnswer, ranged: boolean): void {
    checkEtag(answer.headers, this.digest);
    const length = integerHeader(answer.headers, "content-length");
    let start: number;
    let stop: number;
    let size: number;
    if (answer.status === 206) {
      const found = CONTENT_RANGE.exec(answer.headers.get("content-range") ?? "");
      if (found === null) throw badResponse(`a 206 with the Content-Range ${answer.headers.get("content-range")}`);
      start = Number(found[1]);
      stop = Number(found[2]) + 1;
      size = Number(found[3]);
      if (stop > size || (length !== undefined && length !== stop - start)) {
        throw badResponse(`a 206 whose Content-Range ${start}-${stop - 1}/${size} is not its length (${length})`);
      }
    } else if (answer.status === 200 && !ranged) {
      if (length === undefined) throw badResponse(`blob ${this.digest} answered without a Content-Length`);
      [start, stop, size] = [0, length, length];
    } else {
      throw badResponse(`a range of blob ${this.digest} answered with ${answer.status}`);
    }
    if (!this.opened) {
      [this.start, this.stop, this.size, this.position] = [start, stop, size, start];
      this.opened = true;
    } else if (start !== this.position || stop !== this.stop || size !== this.size) {
      throw badResponse(
        `resumed at ${this.position} of ${this.size} bytes, the node answered bytes ${start}-${stop - 1}/${size}`,
      );
    }
    this.progressSinceOpen = false;
  }

  /** Bytes of the window not read yet. */
  get remaining(): number {
    return this.stop - this.position;
  }

  /** `chunk` came: the position moves past it. */
  advance(chunk: Uint8Array): void {
    if (chunk.byteLength > this.remaining) {
      throw badResponse(`blob ${this.digest}'s body is longer than its ${this.stop - this.start} bytes`);
    }
    if (chunk.byteLength > 0) {
      this.position += chunk.byteLength;
      this.progressSinceOpen = true;
      this.stalls = 0;
    }
  }

  /**
   * The download broke with `error` (`unreachable`): the `Range` to resume
   * with; `error` itself after too many failures in a row without progress.
   */
  broken(error: CohortError): string {
    if (!this.progressSinceOpen) this.stalls += 1;
    if (this.stalls >= RESUMES_WITHOUT_PROGRESS_MAX) throw error;
    return rangeHeader({ start: this.position, end: this.stop }) as string;
  }
}

/** A blob's bytes as they arrive, resuming where a broken download broke. */
export class BlobDownload implements BlobStream {
  readonly body: ReadableStream<Uint8Array>;
  private reader: ReadableStreamDefaultReader<Uint8Array>;

  /**
   * @param answer - the first answer, its window accepted by `window`
   * @param reopen - asks for bytes again, with a `Range`
   */
  constructor(
    answer: StreamedAnswer,
    private readonly window: ReadWindow,
    private readonly reopen: (range: string) => Promise<StreamedAnswer>,
  ) {
    this.reader = answer.body.getReader();
    this.body = new ReadableStream<Uint8Array>(
      {
        pull: (controller) =>
          this.pull(controller).catch(async (error: unknown) => {
            // Failed for good: give the connection back.
            await this.reader.cancel().catch(() => undefined);
            throw error;
          }),
        cancel: async (reason) => {
          await this.reader.cancel(reason).catch(() => undefined);
        },
      },
      { highWaterMark: 0 },
    );
  }

  get digest(): string {
    return this.window.digest;
  }

  get size(): number {
    return this.window.size;
  }

  get start(): number {
    return this.window.start;
  }

  get length(): number {
    return this.window.stop - this.window.start;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    const reader = this.body.getReader();
    try {
      for (;;) {
        const next = await reader.read();
        if (next.done) return;
        yield next.value;
      }
    } finally {
      // Left early (a break, a throw): the rest is not wanted.
      await reader.cancel().catch(() => undefined);
    }
  }

  private async pull(controller: ReadableStreamDefaultController<Uint8Array>): Promise<void> {
    const window = this.window;
    while (window.remaining > 0) {
      let next: { done: boolean; value?: Uint8Array };
      try {
        next = await this.reader.read();
      } catch (caught) {
        const error = caught instanceof CohortError ? caught : new CohortError("unreachable", String(caught));
        if (error.code !== "unreachable") throw error;
        await this.resume(error);
        continue;
      }
      if (next.done || next.value === undefined) {
        const ended = new CohortError("unreachable", `blob ${window.digest}'s body ended ${window.remaining} bytes early`, {
          retryable: true,
        });
        await this.resume(ended);
        continue;
      }
      window.advance(next.value);
      if (next.value.byteLength > 0) {
        controller.enqueue(next.value);
        return;
      }
    }
    controller.close();
  }

  private async resume(error: CohortError): Promise<void> {
    await this.reader.cancel().catch(() => undefined);
    const range = this.window.broken(error);
    const answer = await this.reopen(range);
    this.reader = answer.body.getReader();
    try {
      this.window.accept(answer, true);
    } catch (caught) {
      await this.reader.cancel().catch(() => undefined);
      throw caught;
    }
  }
}

/**
 * A download saved beside its destination: `.NAME.XXXX.part` in the same
 * directory, hashed as it is written, renamed over the destination only
 * once whole and its sha256 the digest asked for.
 */
export class PartFile {
  private readonly hash = createHash("sha256");
  private bytes = 0;

  private constructor(
    private readonly handle: FileHandle,
    readonly path: string,
    private readonly destination: string,
    private readonly digest: string,
  ) {}

  /** Creates the temporary file beside `destination`. */
  static async create(destination: string, given: string): Promise<PartFile> {
    const digest = blobDigest(given);
    const absolute = resolvePath(destination);
    const path = join(dirname(absolute), `.${basename(absolute)}.${randomBytes(6).toString("hex")}.part`);
    let handle: FileHandle;
    try {
      handle = await open(path, "wx");
    } catch (cause) {
      throw unwritable(destination, cause);
    }
    return new PartFile(handle, path, absolute, digest);
  }

  /** Appends `chunk`. */
  async write(chunk: Uint8Array): Promise<void> {
    try {
      for (let offset = 0; offset < chunk.byteLength; ) {
        offset += (await this.handle.write(chunk, offset, chunk.byteLength - offset)).bytesWritten;
      }
    } catch (cause) {
      throw unwritable(this.destination, cause);
    }
    this.hash.update(chunk);
    this.bytes += chunk.byteLength;
  }

  /**
   * Checks the bytes' sha256 and renames the file into place (synced
   * first); `blob_digest_mismatch` (the file removed) if they are not the
   * blob's.
   */
  async commit(): Promise<BlobInfo> {
    const actual = this.hash.digest("hex");
    if (actual !== this.digest) {
      await this.discard();
      throw new CohortError(
        "blob_digest_mismatch",
        `the ${this.bytes} bytes received for blob ${this.digest} have sha256 ${actual}; nothing was saved`,
      );
    }
    try {
      await this.handle.sync();
      await this.handle.close();
      await rename(this.path, this.destination);
    } catch (cause) {
      await this.discard();
      throw unwritable(this.destination, cause);
    }
    return { digest: this.digest, bytes: this.bytes };
  }

  /** Closes and removes the temporary file. */
  async discard(): Promise<void> {
    await this.handle.close().catch(() => undefined);
    await unlink(this.path).catch(() => undefined);
  }
}

/** The error of a file that could not be written. */
function unwritable(path: string, cause: unknown): CohortError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  return new CohortError("file_unwritable", `cannot write ${path}: ${reason}`, { cause });
}
