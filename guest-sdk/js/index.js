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

import * as host from "cohort:job/host@0.1.0";

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
 * (awaiting it if it is a Promise) and turns every failure into the WIT
 * `job-error` record, which componentize-js returns as the `err` case.
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
      throw toJobError(thrown);
    }
    if (isThenable(result)) {
      return Promise.resolve(result).then(
        (value) => finish(value, encode),
        (thrown) => {
          throw toJobError(thrown);
        },
      );
    }
    return finish(result, encode);
  };
}

/**
 * @param {unknown} value
 * @param {(value: unknown) => Uint8Array} encode
 */
function finish(value, encode) {
  try {
    return encode(value);
  } catch (thrown) {
    throw toJobError(thrown);
  }
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
