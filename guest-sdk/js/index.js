// cohort-job: write a cohort job in JavaScript or TypeScript.
//
// A cohort job is a WebAssembly component that turns input bytes into output
// bytes (the `job` world of wit/job.wit). This module hides the component
// glue: export a function named `run`, wrapped by `job`, and `cohort build`
// turns the project into a job component that any cohort node can run.
//
//     import { job, JobError, info, progress } from "cohort-job";
//
//     export const run = job.json((request) => {
//       if (!Array.isArray(request?.numbers)) {
//         throw new JobError("bad_input", 'expected {"numbers": [...]}');
//       }
//       info(`summing ${request.numbers.length} numbers`);
//       const sum = request.numbers.reduce((a, b) => a + b, 0);
//       progress(1, "done");
//       return { sum };
//     });
//
// with a package.json whose "main" names that file:
//
//     { "name": "sum", "type": "module", "main": "index.js" }
//
// Build and run:
//
//     cohort build .                  # -> dist/sum.wasm
//     echo '{"numbers":[1,2,3]}' | cohort exec dist/sum.wasm --input -
//
// `cohort build` bundles the entry and its imports with esbuild (TypeScript
// is stripped there; with a tsconfig.json, tsc type-checks first), resolving
// "cohort-job" to this SDK, then makes the component with componentize-js,
// which embeds the StarlingMonkey engine (SpiderMonkey compiled to
// WebAssembly). No Node.js APIs: `fs`, `process`, `Buffer` and the like do
// not exist; dependencies from npm are fine if they are plain JavaScript.
//
// Inputs and outputs
//
//   job(fn)       fn(Uint8Array) -> Uint8Array (or ArrayBuffer, typed array)
//   job.text(fn)  fn(string) -> string, both UTF-8; input that is not UTF-8
//                 is the job error `bad_input`
//   job.json(fn)  fn(any) -> any: the input parsed as UTF-8 JSON (malformed
//                 input is `bad_input`), the result JSON.stringify'd
//
// `fn` may be async (return a Promise); timers and promises run to the end
// before the job finishes. A Promise that never settles stops the job with
// a trap.
//
// Errors
//
//   throw new JobError(code, message)   the job fails with that code/message
//   anything else thrown                the job fails with code
//                                       `uncaught_exception`, the message
//                                       being "Name: message" and the stack
//   a result of the wrong type          code `bad_output`
//
// A thrown plain object with string `code` and `message` also counts as a
// job error. Failing never traps the component: a trap is kept for real
// faults (out of memory, a Promise that never settles).
//
// Logs, progress, checkpoints
//
// `log(level, message)` and its shortcuts `trace`, `debug`, `info`, `warn`,
// `error` append one line to the job's log; so does `console.log` and the
// rest of `console` (they write to stdout and stderr, which the host puts in
// the log). `progress(fraction, message)` reports how far the job has come.
// `checkpoint(bytes)` saves state that a retry of the same job, possibly on
// another machine, reads back with `resumeState()`; `checkpointJson` and
// `resumeJson` do the same with JSON.
//
// Blobs
//
// Large data comes and goes as streams, not as the input and output bytes:
// `blobs.inputs()` lists the blobs the job was given (`input` for its own
// input blob, `PARENT/OUTPUT` for outputs of its DAG parents), and
// `blobs.open(name)` reads one a chunk at a time:
//
//     for await (const chunk of blobs.open("input")) { ... }   // Uint8Array
//
// `blobs.create(name)` writes an output blob, kept when the job succeeds:
//
//     const out = blobs.create("counts.tsv");
//     out.write(`${word}\t${count}\n`);                        // or bytes
//
// However large the blob, the SDK holds one chunk of it at a time: a read
// returns at most 64 KiB, and writes are buffered 4 KiB at a time (the
// most wasi:io takes at once). An output still open when the job function
// returns is flushed and closed then. A blob the node refuses (no input of
// that name, a bad output name) throws a BlobError, a JobError with code
// `blob_open_failed` or `blob_create_failed`; a read or write that fails
// throws one with code `io_error`.
//
// Execution model
//
// A job may run more than once: cohort retries attempts whose worker died or
// whose deadline passed, so a job should be idempotent (the same input gives
// the same output). It runs with no filesystem, no sockets and no
// environment variables, under the memory and time limits of the node;
// clocks, random numbers and stdout/stderr are available. Each attempt
// starts from a fresh instance.
//
// Calling out
//
// `fetch` calls HTTP(S) endpoints, as far as the operator granted the job's
// deployment name (`cohort grant NAME --http URL`): `cohort build` gives a
// job whose code names `fetch` the engine's fetch over wasi:http (see
// fetch.js). A call no grant covers rejects with a TypeError naming the
// call, and the job's log has the node's reason (`egress_denied`).
//
// The module's top-level code runs at build time (componentize-js snapshots
// the engine with Wizer) and its results are saved in the component: tables
// computed there cost nothing at run time, but Date.now() is frozen, and a
// host function (log, progress, ...) or random numbers (Math.random,
// crypto.getRandomValues) called there fail the build.
//
// Known limits of the engine (StarlingMonkey)
//
// * Regular expressions have no Unicode property escapes: /\p{L}/u is a
//   SyntaxError at build time. Spell out code point ranges instead.
// * There is no Intl and no String.prototype.normalize: toLocaleString and
//   localeCompare are not locale-aware, and toLowerCase does not apply the
//   Greek final sigma rule ("ΟΔΟΣ".toLowerCase() is "οδοσ", not "οδος").
//   Other case mappings, including "İ" -> "i̇", are the full Unicode ones.
// * JavaScript runs in an interpreter (no JIT): tight loops are one to two
//   orders of magnitude slower than in Node.js. Prefer built-ins that do the
//   loop natively (split, replaceAll, indexOf, TypedArray fill, Map) to
//   character-at-a-time code.
// * A returned Promise that never settles stops the job with a trap.
// * Error stacks name lines of the bundle esbuild made, not of the source.

import * as host from "cohort:job/host@0.2.0";
import * as blobHost from "cohort:job/blobs@0.2.0";

/** The log levels, least severe first. */
const LEVELS = ["trace", "debug", "info", "warn", "error"];

/** How long (in UTF-16 units) the message of an uncaught exception may be. */
const MAX_MESSAGE = 2000;

/** Decodes strict UTF-8, keeping a leading byte order mark like Rust does. */
const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const ENCODER = new TextEncoder();

/**
 * Why a job failed: a short machine-readable `code` (such as `bad_input`)
 * and a human-readable `message`. Throw it from a job function to fail the
 * job with exactly that code and message.
 */
export class JobError extends Error {
  /**
   * @param {string} code a short machine-readable code, e.g. `bad_input`
   * @param {string} message a human-readable explanation
   * @param {{ cause?: unknown }} [options]
   */
  constructor(code, message, options) {
    super(String(message), options);
    this.name = "JobError";
    /** @type {string} */
    this.code = String(code);
  }

  /**
   * The input could not be understood (code `bad_input`).
   * @param {string} message
   */
  static badInput(message) {
    return new JobError("bad_input", message);
  }

  toString() {
    return `${this.code}: ${this.message}`;
  }
}

/**
 * Wraps a job function taking and returning bytes into the component's
 * `run` export: `export const run = job((input) => output)`.
 *
 * @param {(input: Uint8Array) => unknown} fn
 */
export function job(fn) {
  return wrap(fn, "job", identity, toOutputBytes);
}

/**
 * Like `job`, for a function from string to string (both UTF-8).
 *
 * @param {(input: string) => unknown} fn
 */
job.text = function text(fn) {
  return wrap(fn, "job.text", decodeInput, encodeText);
};

/**
 * Like `job`, for a function from a JSON value to a JSON value.
 *
 * @param {(input: any) => unknown} fn
 */
job.json = function json(fn) {
  return wrap(fn, "job.json", parseInput, encodeJson);
};

/**
 * The component's `run`: decodes the input, calls `fn`, encodes its result
 * (awaiting it if it is a Promise), closes the output blobs `fn` left open
 * and turns every failure into the WIT `job-error` record, which
 * componentize-js returns as the `err` case.
 *
 * @param {(input: any) => unknown} fn
 * @param {string} name
 * @param {(bytes: Uint8Array) => unknown} decode
 * @param {(value: unknown) => Uint8Array} encode
 * @returns {(input: Uint8Array) => Uint8Array | Promise<Uint8Array>}
 */
function wrap(fn, name, decode, encode) {
  if (typeof fn !== "function") {
    throw new TypeError(`${name}() takes the job function, not ${describeType(fn)}`);
  }
  return function run(input) {
    /** @type {unknown} */
    let result;
    try {
      result = fn(decode(input));
    } catch (thrown) {
      throw fail(thrown);
    }
    if (isThenable(result)) {
      return Promise.resolve(result).then(
        (value) => finish(value, encode),
        (thrown) => {
          throw fail(thrown);
        },
      );
    }
    return finish(result, encode);
  };
}

/**
 * The job's output: `value` encoded, once every output blob still open is
 * flushed and closed (a write that fails there fails the job).
 *
 * @param {unknown} value
 * @param {(value: unknown) => Uint8Array} encode
 */
function finish(value, encode) {
  try {
    const output = encode(value);
    closeWriters();
    return output;
  } catch (thrown) {
    throw fail(thrown);
  }
}

/**
 * The job error of a failed job, its open outputs dropped unwritten: the
 * node discards a failed attempt's outputs anyway.
 *
 * @param {unknown} thrown
 */
function fail(thrown) {
  abandonWriters();
  return toJobError(thrown);
}

/** @param {Uint8Array} bytes */
function identity(bytes) {
  return bytes;
}

/** @param {Uint8Array} bytes */
function decodeInput(bytes) {
  try {
    return UTF8.decode(bytes);
  } catch {
    throw new JobError("bad_input", `input is not UTF-8: invalid byte sequence at byte ${invalidUtf8Offset(bytes)}`);
  }
}

/**
 * Where the first invalid UTF-8 sequence of `bytes` starts: at the first
 * U+FFFD of a lossy decoding that is not an encoded U+FFFD of the input.
 *
 * @param {Uint8Array} bytes
 */
function invalidUtf8Offset(bytes) {
  const text = new TextDecoder("utf-8", { ignoreBOM: true }).decode(bytes);
  let offset = 0;
  for (let from = 0, i; (i = text.indexOf("\ufffd", from)) !== -1; from = i + 1) {
    offset += ENCODER.encode(text.slice(from, i)).length;
    if (bytes[offset] !== 0xef || bytes[offset + 1] !== 0xbf || bytes[offset + 2] !== 0xbd) {
      return offset;
    }
    offset += 3;
  }
  return bytes.length;
}

/** @param {Uint8Array} bytes */
function parseInput(bytes) {
  const text = decodeInput(bytes);
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new JobError("bad_input", `input is not the expected JSON: ${messageOf(error)}`);
  }
}

/** @param {unknown} value */
function toOutputBytes(value) {
  if (value instanceof Uint8Array) {
    return value;
  }
  if (value instanceof ArrayBuffer) {
    return new Uint8Array(value);
  }
  if (ArrayBuffer.isView(value)) {
    return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  }
  const hint = typeof value === "string" ? " (use job.text for a string result)" : "";
  throw new JobError("bad_output", `the job returned ${describeType(value)}, not bytes${hint}`);
}

/** @param {unknown} value */
function encodeText(value) {
  if (typeof value !== "string") {
    throw new JobError("bad_output", `the job returned ${describeType(value)}, not a string`);
  }
  return ENCODER.encode(value);
}

/** @param {unknown} value */
function encodeJson(value) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    throw new JobError("bad_output", `output cannot be JSON-encoded: ${messageOf(error)}`);
  }
  if (text === undefined) {
    throw new JobError(
      "bad_output",
      `output cannot be JSON-encoded: the job returned ${describeType(value)}`,
    );
  }
  return ENCODER.encode(text);
}

/**
 * @param {unknown} value
 * @returns {value is PromiseLike<unknown>}
 */
function isThenable(value) {
  return (
    value !== null &&
    (typeof value === "object" || typeof value === "function") &&
    typeof (/** @type {{ then?: unknown }} */ (value).then) === "function"
  );
}

/**
 * Any thrown value as the WIT `job-error` record; never throws itself.
 *
 * @param {unknown} thrown
 * @returns {{ code: string, message: string }}
 */
function toJobError(thrown) {
  try {
    if (thrown instanceof JobError) {
      return { code: String(thrown.code), message: String(thrown.message) };
    }
    if (
      thrown !== null &&
      typeof thrown === "object" &&
      !(thrown instanceof Error) &&
      "code" in thrown &&
      "message" in thrown &&
      typeof thrown.code === "string" &&
      typeof thrown.message === "string"
    ) {
      return { code: thrown.code, message: thrown.message };
    }
    return { code: "uncaught_exception", message: clip(describeError(thrown)) };
  } catch {
    return { code: "uncaught_exception", message: "the job threw a value that cannot be described" };
  }
}

/**
 * "Name: message", the stack and the causes of a thrown value.
 *
 * @param {unknown} thrown
 * @returns {string}
 */
function describeError(thrown, depth = 0) {
  if (!(thrown instanceof Error)) {
    if (typeof thrown === "string") {
      return thrown;
    }
    if (thrown === undefined || thrown === null || typeof thrown !== "object") {
      return `the job threw ${describeValue(thrown)}`;
    }
    let json;
    try {
      json = JSON.stringify(thrown);
    } catch {
      // Cyclic, or holds a BigInt: fall through.
    }
    return `the job threw ${json && json !== "{}" ? json : describeType(thrown)}`;
  }
  let text = `${thrown.name || "Error"}: ${thrown.message}`;
  const stack = cleanStack(thrown.stack);
  if (stack) {
    text += `\n${stack}`;
  }
  if (thrown.cause !== undefined && depth < 3) {
    text += `\ncaused by: ${describeError(thrown.cause, depth + 1)}`;
  }
  return text;
}

/**
 * The stack without the frames of the component glue, runs of one frame
 * (deep recursion) told once with their count.
 *
 * @param {unknown} stack
 */
function cleanStack(stack) {
  if (typeof stack !== "string") {
    return "";
  }
  const frames = stack
    .split("\n")
    .filter((frame) => frame !== "" && !frame.includes("initializer.js"));
  const lines = [];
  for (let i = 0; i < frames.length; ) {
    let j = i + 1;
    while (j < frames.length && frames[j] === frames[i]) {
      j += 1;
    }
    lines.push(`    at ${frames[i]}${j - i > 1 ? ` (${j - i} times)` : ""}`);
    i = j;
  }
  return lines.join("\n");
}

/** @param {unknown} value */
function describeValue(value) {
  if (typeof value === "symbol" || typeof value === "bigint") {
    return value.toString() + (typeof value === "bigint" ? "n" : "");
  }
  if (typeof value === "function") {
    return "a function";
  }
  return String(value);
}

/**
 * The message of a caught error, or the value itself as a string.
 *
 * @param {unknown} error
 */
function messageOf(error) {
  return error instanceof Error ? error.message : String(error);
}

/** @param {unknown} value */
function describeType(value) {
  if (value === null) return "null";
  if (value === undefined) return "undefined";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object") {
    const name = value.constructor?.name;
    return name && name !== "Object" ? `a ${name}` : "an object";
  }
  return `a ${typeof value}`;
}

/**
 * Clips `text` to MAX_MESSAGE UTF-16 units, not splitting a surrogate pair.
 *
 * @param {string} text
 */
function clip(text) {
  if (text.length <= MAX_MESSAGE) {
    return text;
  }
  let end = MAX_MESSAGE - 1;
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) {
    end -= 1;
  }
  return `${text.slice(0, end)}…`;
}

// ---------------------------------------------------------------- host calls

/**
 * Appends one line to the job's log.
 *
 * @param {"trace" | "debug" | "info" | "warn" | "error"} level
 * @param {string} message
 */
export function log(level, message) {
  if (!LEVELS.includes(level)) {
    throw new TypeError(`unknown log level ${JSON.stringify(String(level))}: use one of ${LEVELS.join(", ")}`);
  }
  host.log(level, String(message));
}

/** Logs `message` at level `trace`. @param {string} message */
export function trace(message) {
  host.log("trace", String(message));
}

/** Logs `message` at level `debug`. @param {string} message */
export function debug(message) {
  host.log("debug", String(message));
}

/** Logs `message` at level `info`. @param {string} message */
export function info(message) {
  host.log("info", String(message));
}

/** Logs `message` at level `warn`. @param {string} message */
export function warn(message) {
  host.log("warn", String(message));
}

/** Logs `message` at level `error`. @param {string} message */
export function error(message) {
  host.log("error", String(message));
}

/**
 * Reports how far the job has come: `fraction` in [0, 1] (the host clamps
 * it) and a short message. Only the latest report is kept.
 *
 * @param {number} fraction
 * @param {string} [message]
 */
export function progress(fraction, message = "") {
  const f = Number(fraction);
  host.progress(Number.isNaN(f) ? 0 : f, String(message));
}

/**
 * Saves `state` as this job's checkpoint, replacing any earlier one. A
 * later attempt of the same job reads it back with `resumeState`.
 * Checkpoints are bounded by the node (16 MiB by default); a larger one
 * stops the job with the error code `checkpoint_too_large`.
 *
 * @param {Uint8Array | ArrayBuffer | ArrayBufferView} state
 */
export function checkpoint(state) {
  let bytes;
  if (state instanceof Uint8Array) {
    bytes = state;
  } else if (state instanceof ArrayBuffer) {
    bytes = new Uint8Array(state);
  } else if (ArrayBuffer.isView(state)) {
    bytes = new Uint8Array(state.buffer, state.byteOffset, state.byteLength);
  } else {
    throw new TypeError(`checkpoint() takes bytes, not ${describeType(state)} (see checkpointJson)`);
  }
  host.checkpoint(bytes);
}

/**
 * The checkpoint saved by an earlier attempt of this job, if any.
 *
 * @returns {Uint8Array | undefined}
 */
export function resumeState() {
  return host.resumeState() ?? undefined;
}

/**
 * The value of secret `name` if the operator let this job's deployment name
 * read it (`cohort grant NAME --secret SECRET`), else `undefined` (the job's
 * log then says why). Its value is masked wherever the job's log, progress
 * and failure show it. A credential that only goes in a request header is
 * better set by the grant (`--header 'Authorization: Bearer {secret:NAME}'`):
 * the job never holds that one.
 *
 * @param {string} name
 * @returns {string | undefined}
 */
export function secret(name) {
  return host.secret(String(name)) ?? undefined;
}

/**
 * Saves `value`, JSON-encoded, as this job's checkpoint. A value that
 * cannot be encoded throws the JobError `bad_checkpoint`.
 *
 * @param {unknown} value
 */
export function checkpointJson(value) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    throw new JobError("bad_checkpoint", `cannot encode checkpoint: ${messageOf(error)}`);
  }
  if (text === undefined) {
    throw new JobError("bad_checkpoint", `cannot encode checkpoint: got ${describeType(value)}`);
  }
  host.checkpoint(ENCODER.encode(text));
}

/**
 * The JSON checkpoint saved by an earlier attempt of this job, if any. A
 * checkpoint that does not parse throws the JobError `bad_checkpoint`
 * rather than returning undefined: silently starting over could hide a bug.
 *
 * @returns {any}
 */
export function resumeJson() {
  const bytes = resumeState();
  if (bytes === undefined) {
    return undefined;
  }
  try {
    return JSON.parse(UTF8.decode(bytes));
  } catch (error) {
    throw new JobError("bad_checkpoint", `cannot decode checkpoint: ${messageOf(error)}`);
  }
}

// ---------------------------------------------------------------- blobs

/**
 * The most bytes one read asks of the node: the largest chunk a BlobReader
 * returns, and so what reading costs in memory.
 */
const READ_BYTES_MAX = 64 * 1024;

/**
 * The most bytes wasi:io's blocking-write-and-flush takes at once: the size
 * of a BlobWriter's buffer and of each write it hands to the node.
 */
const WRITE_BYTES_MAX = 4096;

/**
 * How many empty reads in a row a BlobReader takes before it gives up. A
 * blocking read returns at least one byte unless the stream has ended, so
 * one empty read is odd and a thousand a broken stream.
 */
const EMPTY_READS_MAX = 1000;

/** The largest offset a WIT u64 holds. */
const U64_MAX = (1n << 64n) - 1n;

/** Vouches that a BlobReader or BlobWriter is made by this module. */
const INTERNAL = Symbol("cohort-job internal");

/** How a BlobWriter is dropped without writing what it still buffers. */
const DROP = Symbol("drop");

/**
 * The method by which the component's bindings drop a resource (the
 * stream's handle on the node), as componentize-js names it.
 */
const DISPOSE = Symbol.dispose || Symbol.for("dispose");

/** The BlobWriters not yet closed, closed when the job function returns. */
const openWriters = new Set();

/**
 * Why a blob could not be read or written: a JobError whose code says what
 * failed, with the blob's name. Uncaught, it fails the job with that code.
 *
 * * `blob_open_failed`: `blobs.open` was refused (no input of that name,
 *   or an offset past its end);
 * * `blob_create_failed`: `blobs.create` was refused (a bad name, or more
 *   outputs than a job may have);
 * * `io_error`: a read or write failed, or the reader or writer was closed.
 */
export class BlobError extends JobError {
  /**
   * @param {"open" | "create" | "read" | "write"} operation what failed
   * @param {string} blob the blob's name
   * @param {string} message a human-readable explanation, naming the blob
   * @param {{ cause?: unknown }} [options]
   */
  constructor(operation, blob, message, options) {
    super(BLOB_ERROR_CODES[operation] ?? "io_error", message, options);
    this.name = "BlobError";
    /** What failed: `"open"`, `"create"`, `"read"` or `"write"`. */
    this.operation = operation;
    /** The name of the blob it failed on. */
    this.blob = String(blob);
  }
}

/** The JobError code of each failed blob operation. */
const BLOB_ERROR_CODES = {
  open: "blob_open_failed",
  create: "blob_create_failed",
  read: "io_error",
  write: "io_error",
};

/**
 * Reads an input blob a chunk at a time: `read()` returns the next chunk
 * (a Uint8Array of at most 64 KiB) or `undefined` at the blob's end. It is
 * also iterable (`for` and `for await`) and `stream()` makes it a web
 * ReadableStream. Reads block until the node has bytes; only one chunk is
 * held at a time. Made by `blobs.open`.
 */
export class BlobReader {
  /** The stream on the node; undefined once closed. */
  #stream;
  /** Whether the stream ended (rather than being closed early). */
  #ended = false;

  /**
   * @param {symbol} token
   * @param {string} name
   * @param {any} stream
   * @param {number} position
   */
  constructor(token, name, stream, position) {
    if (token !== INTERNAL) {
      throw new TypeError("a BlobReader comes from blobs.open()");
    }
    /** The input blob's name. */
    this.name = name;
    /**
     * The blob's offset of the next byte this reader returns: where it was
     * opened plus what was read since. Checkpoint it, and a retry can go
     * on from there with `blobs.open(name, { offset })`.
     */
    this.position = position;
    this.#stream = stream;
  }

  /**
   * The next chunk of the blob, at most `maxBytes` long (at most 64 KiB
   * whatever it asks), or `undefined` at the blob's end. Throws a
   * BlobError (`io_error`) if the read fails or the reader was closed.
   *
   * @param {number} [maxBytes]
   * @returns {Uint8Array | undefined}
   */
  read(maxBytes = READ_BYTES_MAX) {
    if (!Number.isInteger(maxBytes) || maxBytes < 1) {
      throw new RangeError(`read() takes a positive whole number of bytes, not ${describeValue(maxBytes)}`);
    }
    const len = Math.min(maxBytes, READ_BYTES_MAX);
    for (let empty = 0; empty < EMPTY_READS_MAX; empty++) {
      if (this.#stream === undefined) {
        if (this.#ended) {
          return undefined;
        }
        throw new BlobError("read", this.name, `the input blob ${quote(this.name)} is closed`);
      }
      let chunk;
      try {
        chunk = this.#stream.blockingRead(BigInt(len));
      } catch (thrown) {
        const detail = streamErrorDetail(payloadOf(thrown));
        this.#ended = detail === undefined;
        this.close();
        if (this.#ended) {
          return undefined;
        }
        throw new BlobError(
          "read",
          this.name,
          `reading the input blob ${quote(this.name)} failed at byte ${this.position}: ${detail}`,
        );
      }
      if (chunk.length > len) {
        // Keeping the extra bytes would make `position` a lie; dropping them
        // would lose data.
        this.close();
        throw new BlobError(
          "read",
          this.name,
          `reading the input blob ${quote(this.name)}: the node returned ${chunk.length} bytes for a read of at most ${len}`,
        );
      }
      if (chunk.length > 0) {
        this.position += chunk.length;
        return chunk;
      }
    }
    this.close();
    throw new BlobError(
      "read",
      this.name,
      `reading the input blob ${quote(this.name)}: the node returned no bytes ${EMPTY_READS_MAX} times in a row`,
    );
  }

  /**
   * Lets go of the blob's stream on the node. Reading on throws a
   * BlobError, unless the blob had ended (then reads return `undefined`).
   * Leaving a `for` loop over the reader closes it. Closing twice is fine.
   */
  close() {
    const stream = this.#stream;
    this.#stream = undefined;
    stream?.[DISPOSE]?.();
  }

  /** The chunks to the blob's end; leaving the loop early closes the reader. */
  *[Symbol.iterator]() {
    try {
      for (let chunk; (chunk = this.read()) !== undefined; ) {
        yield chunk;
      }
    } finally {
      this.close();
    }
  }

  /** The same chunks, for `for await`. */
  async *[Symbol.asyncIterator]() {
    yield* this[Symbol.iterator]();
  }

  /**
   * The rest of the blob as a web ReadableStream of Uint8Array chunks
   * (which reads only when asked: it holds no chunk ahead), for
   * `pipeThrough(new DecompressionStream("gzip"))` and the like. Cancelling
   * it closes the reader.
   *
   * @returns {ReadableStream<Uint8Array>}
   */
  stream() {
    if (typeof ReadableStream !== "function") {
      throw new TypeError("this engine has no ReadableStream: iterate the reader instead");
    }
    return new ReadableStream(
      {
        pull: (controller) => {
          const chunk = this.read();
          if (chunk === undefined) {
            controller.close();
          } else {
            controller.enqueue(chunk);
          }
        },
        cancel: () => this.close(),
      },
      { highWaterMark: 0 },
    );
  }
}

/**
 * Writes an output blob: `write(chunk)` takes bytes or a string (written as
 * UTF-8), `close()` ends the output, and `stream()` makes it a web
 * WritableStream. Writes are buffered up to 4 KiB, the most wasi:io takes
 * at once, and each full buffer goes to the node, which keeps the output
 * when the job succeeds. A writer still open when the job function
 * returns is flushed and closed then. Made by `blobs.create`.
 */
export class BlobWriter {
  /** The stream on the node; undefined once closed. */
  #stream;
  /** Bytes written but not yet handed to the node: #buffered of them. */
  #buffer = new Uint8Array(WRITE_BYTES_MAX);
  #buffered = 0;

  /**
   * @param {symbol} token
   * @param {string} name
   * @param {any} stream
   */
  constructor(token, name, stream) {
    if (token !== INTERNAL) {
      throw new TypeError("a BlobWriter comes from blobs.create()");
    }
    /** The output blob's name. */
    this.name = name;
    /** How many bytes were written so far (the buffered ones too). */
    this.written = 0;
    this.#stream = stream;
  }

  /**
   * Writes `chunk`: bytes, or a string, written as UTF-8. Throws a
   * BlobError (`io_error`) if the writer is closed or the node refuses the
   * bytes (the job is then failing: past its output ceiling, the node
   * fails it with `output_too_large`).
   *
   * @param {Uint8Array | ArrayBuffer | ArrayBufferView | string} chunk
   */
  write(chunk) {
    const bytes = toChunkBytes(chunk);
    this.#checkOpen();
    let at = 0;
    if (this.#buffered > 0) {
      at = Math.min(WRITE_BYTES_MAX - this.#buffered, bytes.length);
      this.#buffer.set(bytes.subarray(0, at), this.#buffered);
      this.#buffered += at;
      if (this.#buffered < WRITE_BYTES_MAX) {
        this.written += bytes.length;
        return;
      }
      this.#send(this.#buffer);
      this.#buffered = 0;
    }
    for (; bytes.length - at >= WRITE_BYTES_MAX; at += WRITE_BYTES_MAX) {
      this.#send(bytes.subarray(at, at + WRITE_BYTES_MAX));
    }
    this.#buffer.set(bytes.subarray(at), 0);
    this.#buffered = bytes.length - at;
    this.written += bytes.length;
  }

  /** Hands the buffered bytes to the node now. */
  flush() {
    this.#checkOpen();
    if (this.#buffered > 0) {
      this.#send(this.#buffer.subarray(0, this.#buffered));
      this.#buffered = 0;
    }
  }

  /**
   * Flushes the writer and lets go of its stream: the output is what was
   * written. Writing on throws a BlobError. Closing twice is fine.
   */
  close() {
    if (this.#stream !== undefined) {
      this.flush();
      this[DROP]();
    }
  }

  /**
   * A web WritableStream onto this writer, for `pipeTo`: its chunks are
   * written as by `write`, and closing or aborting it closes the writer.
   *
   * @returns {WritableStream<Uint8Array | ArrayBuffer | ArrayBufferView | string>}
   */
  stream() {
    if (typeof WritableStream !== "function") {
      throw new TypeError("this engine has no WritableStream: call write() instead");
    }
    return new WritableStream({
      write: (chunk) => this.write(chunk),
      close: () => this.close(),
      abort: () => this.close(),
    });
  }

  /** Lets go of the stream, without writing what is buffered. */
  [DROP]() {
    const stream = this.#stream;
    this.#stream = undefined;
    this.#buffered = 0;
    openWriters.delete(this);
    stream?.[DISPOSE]?.();
  }

  #checkOpen() {
    if (this.#stream === undefined) {
      throw new BlobError("write", this.name, `the output blob ${quote(this.name)} is closed`);
    }
  }

  /**
   * Hands `bytes` (at most WRITE_BYTES_MAX) to the node, waiting until it
   * took them; a failed write closes the writer.
   *
   * @param {Uint8Array} bytes
   */
  #send(bytes) {
    try {
      this.#stream.blockingWriteAndFlush(bytes);
    } catch (thrown) {
      const detail = streamErrorDetail(payloadOf(thrown));
      this[DROP]();
      throw new BlobError(
        "write",
        this.name,
        detail === undefined
          ? `the output blob ${quote(this.name)} was closed by the node (it was created again, or the job is failing)`
          : `writing the output blob ${quote(this.name)} failed: ${detail}`,
      );
    }
  }
}

/**
 * The blobs this job may read and write. See `blobs.open` and
 * `blobs.create`, and the Blobs section at the top of this module.
 */
export const blobs = Object.freeze({
  /** The name of the job's own input blob (its `input_blob`). */
  INPUT: "input",

  /**
   * The blobs this job may read, in a stable order (`input` first): each
   * `{ name, digest, size }`, `digest` being its sha256, 64 lowercase hex digits
   * and `size` a number of bytes (exact up to 2^53 - 1, 8 PiB, as for a
   * web Blob). Empty when the job was given none.
   *
   * @returns {{ name: string, digest: string, size: number }[]}
   */
  inputs() {
    return blobHost.inputs().map(({ name, digest, size }) => ({ name, digest, size: Number(size) }));
  },

  /**
   * The input blob `name` as `inputs()` lists it, or `undefined` if the job
   * was given none of that name.
   *
   * @param {string} name
   */
  input(name) {
    const wanted = String(name);
    return blobs.inputs().find((blob) => blob.name === wanted);
  },

  /**
   * Opens the input blob `name` for reading from byte `offset` (default 0;
   * a number or a bigint). Throws a BlobError (`blob_open_failed`) if the
   * job has no input of that name or `offset` is past its end.
   *
   * @param {string} name
   * @param {{ offset?: number | bigint }} [options]
   * @returns {BlobReader}
   */
  open(name, options = {}) {
    const blob = String(name);
    const offset = toOffset(options?.offset ?? 0);
    let stream;
    try {
      stream = blobHost.open(blob, offset);
    } catch (thrown) {
      throw new BlobError("open", blob, `cannot open the input blob ${quote(blob)}: ${payloadOf(thrown)}`);
    }
    return new BlobReader(INTERNAL, blob, stream, Number(offset));
  },

  /**
   * Creates the output blob `name` (1 to 128 ASCII letters, digits, `.`,
   * `_` and `-`) and returns its writer. Creating a name again starts that
   * output over (an earlier writer of it is closed without writing what it
   * buffers). Throws a BlobError (`blob_create_failed`) for a name the
   * node refuses, or past the number of outputs a job may have.
   *
   * @param {string} name
   * @returns {BlobWriter}
   */
  create(name) {
    const blob = String(name);
    for (const writer of [...openWriters]) {
      if (writer.name === blob) {
        writer[DROP]();
      }
    }
    let stream;
    try {
      stream = blobHost.create(blob);
    } catch (thrown) {
      throw new BlobError("create", blob, `cannot create the output blob ${quote(blob)}: ${payloadOf(thrown)}`);
    }
    const writer = new BlobWriter(INTERNAL, blob, stream);
    openWriters.add(writer);
    return writer;
  },
});

/** Flushes and closes every writer still open (when the job returns). */
function closeWriters() {
  for (const writer of [...openWriters]) {
    writer.close();
  }
}

/** Drops every writer still open, unwritten (when the job fails). */
function abandonWriters() {
  for (const writer of [...openWriters]) {
    writer[DROP]();
  }
}

/**
 * The `err` value of a failed call into the node (componentize-js throws
 * it as the `payload` of an Error); anything else thrown is rethrown.
 *
 * @param {unknown} thrown
 * @returns {any}
 */
function payloadOf(thrown) {
  if (thrown !== null && typeof thrown === "object" && "payload" in thrown) {
    return thrown.payload;
  }
  throw thrown;
}

/**
 * What a wasi:io stream-error says: `undefined` for `closed` (the end of
 * an input, an output the node closed), else the node's explanation.
 *
 * @param {any} error
 * @returns {string | undefined}
 */
function streamErrorDetail(error) {
  if (error?.tag === "closed") {
    return undefined;
  }
  if (error?.tag === "last-operation-failed") {
    try {
      return String(error.val.toDebugString());
    } finally {
      error.val[DISPOSE]?.();
    }
  }
  return `unexpected stream error ${describeValue(error?.tag ?? error)}`;
}

/**
 * A blob offset as the WIT u64: a whole number or bigint from 0 up.
 *
 * @param {unknown} offset
 * @returns {bigint}
 */
function toOffset(offset) {
  if (typeof offset === "bigint" && offset >= 0n && offset <= U64_MAX) {
    return offset;
  }
  if (typeof offset === "number" && Number.isSafeInteger(offset) && offset >= 0) {
    return BigInt(offset);
  }
  if (typeof offset !== "bigint" && typeof offset !== "number") {
    throw new TypeError(`the offset of blobs.open() is a number or a bigint, not ${describeType(offset)}`);
  }
  throw new RangeError(`the offset of blobs.open() is a whole number of bytes from 0, not ${describeValue(offset)}`);
}

/**
 * A chunk to write as bytes: strings as UTF-8.
 *
 * @param {unknown} chunk
 * @returns {Uint8Array}
 */
function toChunkBytes(chunk) {
  if (typeof chunk === "string") {
    return ENCODER.encode(chunk);
  }
  if (chunk instanceof Uint8Array) {
    return chunk;
  }
  if (chunk instanceof ArrayBuffer) {
    return new Uint8Array(chunk);
  }
  if (ArrayBuffer.isView(chunk)) {
    return new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  }
  throw new TypeError(`write() takes bytes or a string, not ${describeType(chunk)}`);
}

/** A blob name in a message: JSON-quoted, so odd characters show. @param {string} name */
function quote(name) {
  return JSON.stringify(name);
}
