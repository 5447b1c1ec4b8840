// The `cohort:job/blobs` interface for the SDK's unit tests under Node.js:
// blobs in memory, behind streams that act as the component's bindings do
// (componentize-js 0.23): a WIT `result` error is thrown as an Error whose
// `payload` is the error value, u64s are bigints, and a resource is dropped
// by its Symbol.dispose method, after which using it traps. Tests put input
// blobs in `inputBlobs`, read what was written in `outputs`, inject faults
// through `faults`, and look at the host calls in `calls`.
import { createHash } from "node:crypto";

const DISPOSE = Symbol.dispose || Symbol.for("dispose");

/** The most bytes one blocking-write-and-flush may carry (wasi:io). */
const WRITE_MAX = 4096;

/** What componentize-js throws for a `result` error. */
class ComponentError extends Error {
  constructor(value) {
    super(typeof value === "string" ? value : `${String(value)} (see error.payload)`);
    Object.defineProperty(this, "payload", { value, enumerable: typeof value !== "string" });
  }
}

/** The `wasi:io/error` resource. */
class IoError {
  constructor(message) {
    this.message = message;
    this.dropped = false;
  }
  toDebugString() {
    return this.message;
  }
  [DISPOSE]() {
    this.dropped = true;
  }
}

/** The input blobs: name -> bytes. */
export const inputBlobs = new Map();
/** The outputs: name -> { bytes: number[] chunks joined on read, stream }. */
export const outputs = new Map();
/** Host calls as [kind, name, size], for tests to look at. */
export const calls = [];
/** Faults to inject; `reset` clears them. */
export const faults = {};
/** The error resources handed out, to check that the SDK drops them. */
export const ioErrors = [];

/** Forgets every blob, output, call and fault. */
export function reset() {
  inputBlobs.clear();
  outputs.clear();
  calls.length = 0;
  ioErrors.length = 0;
  for (const key of Object.keys(faults)) {
    delete faults[key];
  }
}

/** The bytes written to output `name` so far. */
export function written(name) {
  return Buffer.concat(outputs.get(name).chunks);
}

function fail(message) {
  const error = new IoError(message);
  ioErrors.push(error);
  return new ComponentError({ tag: "last-operation-failed", val: error });
}

function checkU64(value, what) {
  if (typeof value !== "bigint" || value < 0n) {
    throw new TypeError(`${what} must be a u64 as a bigint, got ${typeof value} ${value}`);
  }
}

class InputStream {
  #bytes;
  #at;
  #name;
  dropped = false;

  constructor(name, bytes, at) {
    this.#name = name;
    this.#bytes = bytes;
    this.#at = at;
  }

  blockingRead(len) {
    checkU64(len, "blocking-read's len");
    if (this.dropped) {
      throw new Error("trap: the input-stream was dropped");
    }
    calls.push(["read", this.#name, Number(len)]);
    if (faults.emptyReads > 0) {
      faults.emptyReads -= 1;
      return new Uint8Array(0);
    }
    if (faults.failReadAt !== undefined && this.#at >= faults.failReadAt) {
      throw fail("the blob's replica is gone");
    }
    if (this.#at >= this.#bytes.length) {
      throw new ComponentError({ tag: "closed" });
    }
    const size = faults.oversizedReads ? Number(len) + 1 : Math.min(Number(len), faults.readMax ?? Infinity);
    const chunk = this.#bytes.slice(this.#at, this.#at + size);
    this.#at += chunk.length;
    return chunk;
  }

  [DISPOSE]() {
    calls.push(["drop-input", this.#name, 0]);
    this.dropped = true;
  }
}

class OutputStream {
  #name;
  closed = false;
  dropped = false;

  constructor(name) {
    this.#name = name;
  }

  blockingWriteAndFlush(contents) {
    if (this.dropped) {
      throw new Error("trap: the output-stream was dropped");
    }
    if (contents.length > WRITE_MAX) {
      throw new Error(`trap: blocking-write-and-flush of ${contents.length} bytes, more than ${WRITE_MAX}`);
    }
    calls.push(["write", this.#name, contents.length]);
    if (this.closed) {
      throw new ComponentError({ tag: "closed" });
    }
    const output = outputs.get(this.#name);
    if (faults.outputBytesMax !== undefined && output.size + contents.length > faults.outputBytesMax) {
      throw fail("output_too_large: the job's outputs hold more than the node allows");
    }
    // Copied, as the bindings copy into the component's memory.
    output.chunks.push(Uint8Array.from(contents));
    output.size += contents.length;
  }

  [DISPOSE]() {
    calls.push(["drop-output", this.#name, 0]);
    this.dropped = true;
  }
}

export function inputs() {
  return [...inputBlobs].map(([name, bytes]) => ({
    name,
    digest: `${createHash("sha256").update(bytes).digest("hex")}`,
    size: BigInt(bytes.length),
  }));
}

export function open(name, offset) {
  checkU64(offset, "open's offset");
  const bytes = inputBlobs.get(name);
  if (bytes === undefined) {
    throw new ComponentError(`no input blob named ${JSON.stringify(name)}`);
  }
  if (offset > BigInt(bytes.length)) {
    throw new ComponentError(`offset ${offset} is past the end of the blob (${bytes.length} bytes)`);
  }
  calls.push(["open", name, Number(offset)]);
  return new InputStream(name, bytes, Number(offset));
}

export function create(name) {
  if (!/^[A-Za-z0-9._-]{1,128}$/.test(name)) {
    throw new ComponentError("an output name is 1 to 128 ASCII letters, digits, '.', '_' and '-'");
  }
  const earlier = outputs.get(name);
  if (earlier !== undefined) {
    earlier.stream.closed = true;
  }
  const stream = new OutputStream(name);
  outputs.set(name, { chunks: [], size: 0, stream });
  calls.push(["create", name, 0]);
  return stream;
}
