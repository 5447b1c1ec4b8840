// Types of the cohort-job SDK (index.js). The WIT-level types come from
// types/, which `jco guest-types` generates from wit/job.wit (see README.md).

/// <reference path="./types/job.d.ts" />

import type { Level as WitLevel, JobError as WitJobError } from "cohort:job/types@0.2.0";

/** Severity of a log line: "trace" | "debug" | "info" | "warn" | "error". */
export type Level = WitLevel;

/** The `job-error` record a failed job returns: `{ code, message }`. */
export type JobErrorRecord = WitJobError;

/** Bytes a job may return or checkpoint. */
export type Bytes = Uint8Array | ArrayBuffer | ArrayBufferView;

/** A value a job function may return: the value itself or a Promise of it. */
export type MaybePromise<T> = T | PromiseLike<T>;

/**
 * The component's `run` export as the SDK builds it: the generated
 * signature, except that it returns a Promise when the job function does.
 */
export type Run = (
  input: Parameters<typeof import("cohort:job/job@0.2.0").run>[0],
) => MaybePromise<ReturnType<typeof import("cohort:job/job@0.2.0").run>>;

/**
 * Why a job failed: a short machine-readable `code` (such as `bad_input`)
 * and a human-readable `message`. Throw it from a job function to fail the
 * job with exactly that code and message.
 */
export declare class JobError extends Error implements WitJobError {
  constructor(code: string, message: string, options?: { cause?: unknown });
  /** A short machine-readable code such as `bad_input`. */
  code: string;
  /** The input could not be understood (code `bad_input`). */
  static badInput(message: string): JobError;
}

/** Wraps job functions into the component's `run` export. */
export interface JobWrapper {
  /** `export const run = job((input: Uint8Array) => output)`: bytes in, bytes out. */
  (fn: (input: Uint8Array) => MaybePromise<Bytes>): Run;
  /**
   * String in, string out (both UTF-8). Input that is not UTF-8 fails the
   * job with `bad_input`.
   */
  text(fn: (input: string) => MaybePromise<string>): Run;
  /**
   * JSON in, JSON out: the input parsed as UTF-8 JSON (malformed input fails
   * the job with `bad_input`; its shape is not checked, so `I` is a promise
   * the job should verify), the result `JSON.stringify`'d.
   */
  json<I = unknown, O = unknown>(fn: (input: I) => MaybePromise<O>): Run;
}

/** Wraps job functions into the component's `run` export. */
export declare const job: JobWrapper;

/** Appends one line to the job's log. Throws a TypeError for an unknown level. */
export declare function log(level: Level, message: string): void;
/** Logs `message` at level `trace`. */
export declare function trace(message: string): void;
/** Logs `message` at level `debug`. */
export declare function debug(message: string): void;
/** Logs `message` at level `info`. */
export declare function info(message: string): void;
/** Logs `message` at level `warn`. */
export declare function warn(message: string): void;
/** Logs `message` at level `error`. */
export declare function error(message: string): void;

/**
 * Reports how far the job has come: `fraction` in [0, 1] (clamped by the
 * host) and a short message. Only the latest report is kept.
 */
export declare function progress(fraction: number, message?: string): void;

/**
 * Saves `state` as this job's checkpoint, replacing any earlier one. A
 * larger checkpoint than the node allows (16 MiB by default) stops the job
 * with the error code `checkpoint_too_large`.
 */
export declare function checkpoint(state: Bytes): void;

/** The checkpoint saved by an earlier attempt of this job, if any. */
export declare function resumeState(): Uint8Array | undefined;

/**
 * The value of secret `name` if the operator let this job's deployment name
 * read it (`cohort grant NAME --secret SECRET`), else `undefined`. Its value
 * is masked wherever the job's log, progress and failure show it.
 */
export declare function secret(name: string): string | undefined;

/** Saves `value`, JSON-encoded, as this job's checkpoint (`bad_checkpoint` if it cannot be). */
export declare function checkpointJson(value: unknown): void;

/**
 * The JSON checkpoint saved by an earlier attempt of this job, if any; a
 * checkpoint that does not parse throws the JobError `bad_checkpoint`.
 */
export declare function resumeJson<T = unknown>(): T | undefined;

/**
 * A blob this job may read, as `blobs.inputs()` lists it.
 */
export interface InputBlob {
  /**
   * Its name for this job: `input` for the job's own input blob,
   * `PARENT/OUTPUT` for the output `OUTPUT` of DAG parent `PARENT`.
   */
  name: string;
  /** Its sha256: 64 lowercase hex digits, as the HTTP API writes it. */
  digest: string;
  /**
   * Its size in bytes: a number, as a web Blob's size is, exact up to
   * 2^53 - 1 (8 PiB).
   */
  size: number;
}

/**
 * The web `ReadableStream` type where the project's `lib` declares it (add
 * `"DOM"`), `unknown` where it does not, so that a project without web
 * types still type-checks.
 */
export type WebReadableStream = typeof globalThis extends {
  ReadableStream: abstract new (...args: any[]) => infer S;
}
  ? S
  : unknown;

/** The web `WritableStream` type, as `WebReadableStream` is the readable one. */
export type WebWritableStream = typeof globalThis extends {
  WritableStream: abstract new (...args: any[]) => infer S;
}
  ? S
  : unknown;

/** What failed about a blob: `BlobError.operation`. */
export type BlobOperation = "open" | "create" | "read" | "write";

/**
 * Why a blob could not be read or written: a JobError whose `code` says
 * what failed (`blob_open_failed`, `blob_create_failed`, or `io_error` for
 * a failed read or write). Uncaught, it fails the job with that code.
 */
export declare class BlobError extends JobError {
  constructor(operation: BlobOperation, blob: string, message: string, options?: { cause?: unknown });
  /** What failed. */
  operation: BlobOperation;
  /** The name of the blob it failed on. */
  blob: string;
}

/**
 * Reads an input blob a chunk at a time (at most 64 KiB each): `read()`,
 * `for (const chunk of reader)`, `for await`, or `stream()`. Made by
 * `blobs.open`.
 */
export declare class BlobReader implements Iterable<Uint8Array>, AsyncIterable<Uint8Array> {
  private constructor();
  /** The input blob's name. */
  readonly name: string;
  /**
   * The blob's offset of the next byte this reader returns: checkpoint it,
   * and a retry can go on with `blobs.open(name, { offset })`.
   */
  readonly position: number;
  /**
   * The next chunk, at most `maxBytes` long (and at most 64 KiB), or
   * `undefined` at the blob's end. Throws a BlobError (`io_error`) if the
   * read fails or the reader was closed.
   */
  read(maxBytes?: number): Uint8Array | undefined;
  /** Lets go of the blob's stream; leaving a loop over the reader does too. */
  close(): void;
  [Symbol.iterator](): Iterator<Uint8Array>;
  [Symbol.asyncIterator](): AsyncIterator<Uint8Array>;
  /**
   * The rest of the blob as a web ReadableStream of Uint8Array chunks;
   * cancelling it closes the reader.
   */
  stream(): WebReadableStream;
}

/** A chunk a BlobWriter takes: bytes, or a string written as UTF-8. */
export type Chunk = Bytes | string;

/**
 * Writes an output blob, kept when the job succeeds. Writes are buffered
 * (4 KiB); a writer still open when the job function returns is flushed
 * and closed then. Made by `blobs.create`.
 */
export declare class BlobWriter {
  private constructor();
  /** The output blob's name. */
  readonly name: string;
  /** How many bytes were written so far. */
  readonly written: number;
  /**
   * Writes `chunk`. Throws a BlobError (`io_error`) if the writer is
   * closed or the node refuses the bytes (past the job's output ceiling
   * the node fails the job with `output_too_large`).
   */
  write(chunk: Chunk): void;
  /** Hands the buffered bytes to the node now. */
  flush(): void;
  /** Flushes and lets go of the stream; closing twice is fine. */
  close(): void;
  /**
   * A web WritableStream of chunks onto this writer; closing or aborting it
   * closes the writer.
   */
  stream(): WebWritableStream;
}

/** The blobs this job may read and write, as streams. */
export declare const blobs: {
  /** The name of the job's own input blob: `"input"`. */
  readonly INPUT: "input";
  /** The blobs this job may read, in a stable order (`input` first). */
  inputs(): InputBlob[];
  /** The input blob `name`, or `undefined` if the job was given none of that name. */
  input(name: string): InputBlob | undefined;
  /**
   * Opens the input blob `name` from byte `offset` (default 0). Throws a
   * BlobError (`blob_open_failed`) for no input of that name or an offset
   * past its end.
   */
  open(name: string, options?: { offset?: number | bigint }): BlobReader;
  /**
   * Creates the output blob `name` (1 to 128 ASCII letters, digits, `.`,
   * `_`, `-`); creating it again starts it over. Throws a BlobError
   * (`blob_create_failed`) for a name the node refuses or too many outputs.
   */
  create(name: string): BlobWriter;
};
