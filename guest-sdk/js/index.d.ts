// Types of the cohort-job SDK (index.js). The WIT-level types come from
// types/, which `jco guest-types` generates from wit/job.wit (see README.md).

/// <reference path="./types/job.d.ts" />

import type { Level as WitLevel, JobError as WitJobError } from "cohort:job/types@0.1.0";

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
  input: Parameters<typeof import("cohort:job/job@0.1.0").run>[0],
) => MaybePromise<ReturnType<typeof import("cohort:job/job@0.1.0").run>>;

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
