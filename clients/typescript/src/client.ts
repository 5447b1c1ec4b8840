/**
 * The cohort client: uploads, batched submissions, one waiter for results,
 * over a list of nodes.
 *
 * @packageDocumentation
 */

import { createHash, randomBytes } from "node:crypto";
import { readFile, stat } from "node:fs/promises";
import { resolve as resolvePath } from "node:path";
import { Batcher } from "./batcher.js";
import {
  BlobDownload,
  HashedOnce,
  PartFile,
  ReadWindow,
  SHA256_HEADER,
  blobDigest,
  blobEntryOf,
  blobPath,
  blobTiming,
  copyAllowanceMs,
  type BlobTiming,
  fileChunks,
  hashFile,
  headInfo,
  rangeHeader,
  storedAs,
  validDigest,
} from "./blobs.js";
import { CohortError, closedError } from "./errors.js";
import { Job, type JobContext } from "./job.js";
import { Transport, type StreamedAnswer } from "./transport.js";
import type {
  BlobEntry,
  BlobPage,
  BlobInfo,
  BlobRange,
  BlobStream,
  ClientOptions,
  DagJob,
  DagStatus,
  DeploymentStatus,
  DeployResult,
  GrantOptions,
  GrantRequest,
  GrantsResult,
  HttpGrant,
  PutBlobOptions,
  ScheduleOptions,
  ScheduleStatus,
  NamespaceInfo,
  Quotas,
  SecretInfo,
  SecretResult,
  SubmitOptions,
} from "./types.js";
import { Waiter } from "./waiter.js";

/** A module digest: the sha256 of its bytes, in hex. */
const DIGEST = /^[0-9a-f]{64}$/;
/** A deployment's name: 1 to 63 of `a-z 0-9 . _ -`, starting with a letter or digit (never a digest). */
const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
/** Most jobs of one batch request the server takes. */
const BATCH_JOBS_MAX = 10_000;
/** Longest one try of a schedule or DAG call may take. */
const CALL_TRY_TIMEOUT_MS = 30_000;
/** Longest one try of an upload may take: 30 s, plus 1 ms per KiB of module. */
const uploadTimeoutMs = (bytes: number): number => 30_000 + bytes / 1024;

/**
 * A W3C trace context header of version 00: a trace id of 32 lowercase hex
 * digits and a parent span id of 16, neither all zeros, and 2 of flags.
 */
const TRACEPARENT = /^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$/;

/**
 * `traceparent` if it is a W3C trace context header of version 00
 * (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`, lowercase,
 * neither id all zeros); else a `RangeError` saying what one is.
 */
function checkTraceparent(traceparent: string): string {
  if (typeof traceparent === "string" && TRACEPARENT.test(traceparent)) return traceparent;
  throw new RangeError(
    `${JSON.stringify(traceparent)} is not a W3C traceparent: one is 00-<trace id: 32 lowercase hex digits, ` +
      "not all 0>-<span id: 16 lowercase hex digits, not all 0>-<flags: 2 hex digits>",
  );
}

/** Options of {@link Client.map}: those of every submission, without an idempotency key. */
export type MapOptions = Omit<SubmitOptions, "idempotencyKey">;

/**
 * A client of a cohort cluster.
 *
 * ```ts
 * const client = new Client(["http://10.0.0.1:7070", "http://10.0.0.2:7070"]);
 * const job = client.submit("./wordcount.wasm", "a b a");
 * console.log(await job.json());
 * await client.close();
 * ```
 */
export class Client {
  private readonly context: JobContext;
  private readonly batcher: Batcher;
  /** Uploads of modules given as paths, by absolute path. */
  private readonly uploads = new Map<string, Promise<string>>();
  /** Strings found to be deployment names (no file has them), so not looked up again. */
  private readonly names = new Set<string>();
  /** Submissions that have not learnt their id yet. */
  private readonly submitting = new Set<Promise<unknown>>();
  /** How long blob calls wait. */
  private readonly blobTiming: BlobTiming;
  /** The nodes and options it was made with, for {@link Client.withTraceparent}. */
  private readonly made: { urls: readonly string[]; options: ClientOptions };

  /**
   * @param urls - the nodes' base URLs (`http://HOST:PORT` or `https://...`);
   *   requests go to the first that answers, the others on failure.
   * @param options - see {@link ClientOptions}.
   */
  constructor(urls: string | readonly string[], options: ClientOptions = {}) {
    const list = typeof urls === "string" ? [urls] : [...urls];
    if (list.length === 0) throw new RangeError("a cohort client needs at least one node URL");
    const lingerMs = options.lingerMs ?? 1;
    const batchMax = options.batchMax ?? 1_000;
    const retryDeadlineMs = options.retryDeadlineMs ?? 60_000;
    if (!(lingerMs >= 0)) throw new RangeError(`lingerMs must be 0 or more, not ${lingerMs}`);
    if (!Number.isInteger(batchMax) || batchMax < 1 || batchMax > BATCH_JOBS_MAX) {
      throw new RangeError(`batchMax must be an integer from 1 to ${BATCH_JOBS_MAX}, not ${batchMax}`);
    }
    if (!(retryDeadlineMs >= 0)) throw new RangeError(`retryDeadlineMs must be 0 or more, not ${retryDeadlineMs}`);
    this.blobTiming = blobTiming(options.blobTimeouts);
    const transport = new Transport(list, options.token, options.fetch ?? globalThis.fetch);
    this.context = { transport, waiter: new Waiter(transport, retryDeadlineMs), retryDeadlineMs };
    this.batcher = new Batcher(transport, lingerMs, batchMax);
    this.made = { urls: list, options };
  }

  /**
   * A new client with this one's nodes and options that sends `traceparent`,
   * the W3C trace context of the caller's span
   * (`00-<trace id>-<span id>-<flags>`), with every request: the cluster's
   * spans for its submissions (the proxy hop, the master's decision and
   * commit, every attempt on whichever worker) join that trace, and its
   * jobs' {@link Job.status} show its `trace_id`.
   *
   * Throws a `RangeError` for a value that is not a version-00 traceparent
   * (32 lowercase hex digits of trace id and 16 of span id, neither all
   * zeros, and 2 of flags). The new client has its own batches, waiter and
   * uploads; this one is left as it was. Close each.
   */
  withTraceparent(traceparent: string): Client {
    checkTraceparent(traceparent);
    const client = new Client(this.made.urls, this.made.options);
    client.context.transport.setHeader("traceparent", traceparent);
    return client;
  }

  /**
   * Uploads a job module (`POST /v1/modules`) and returns its digest. A
   * module given as a path is uploaded once: later calls (and submissions
   * naming the path) reuse the digest.
   */
  upload(pathOrBytes: string | Uint8Array): Promise<string> {
    if (typeof pathOrBytes !== "string") return this.uploadBytes(pathOrBytes);
    const path = resolvePath(pathOrBytes);
    let upload = this.uploads.get(path);
    if (upload === undefined) {
      upload = this.readModule(path).then((bytes) => this.uploadBytes(bytes));
      this.uploads.set(path, upload);
      // A failed upload is tried again by the next call.
      upload.catch(() => this.uploads.delete(path));
    }
    return upload;
  }

  /**
   * Submits a job and returns its handle at once; the submission goes out
   * in one batch request with every other made within the linger window,
   * and the job is watched by the one waiter as soon as it is accepted.
   *
   * @param module - a digest (64 hex digits), a deployment's name (see
   *   {@link Client.deploy}; the master resolves it to the name's current
   *   module when it accepts the job), or the path of a `.wasm` file
   *   (uploaded once). A string in a name's shape is a path if a file has
   *   it, else a name.
   * @param input - bytes (`Uint8Array`, sent as `input_base64`), text
   *   (`input`) or any other JSON value (`input_json`); none: empty input.
   * @param options - see {@link SubmitOptions}; `inputBlob` gives the job a
   *   blob to read as a stream, beside `input`.
   */
  submit(module: string, input?: unknown, options: SubmitOptions = {}): Job {
    const key = options.idempotencyKey ?? newIdempotencyKey();
    const deadline = Date.now() + this.context.retryDeadlineMs;
    // The fields after the module, as JSON: `"input":...,"idempotency_key":...}`.
    const rest = JSON.stringify(submissionFields(input, options, key)).slice(1);
    const enqueue = (digest: string): Promise<number> =>
      new Promise((resolve, reject) => {
        const json = `{"module":${JSON.stringify(digest)},${rest}`;
        this.batcher.add({ json, deadline, resolve, reject });
      });
    const id = this.context.transport.closed
      ? Promise.reject(closedError())
      : DIGEST.test(module)
        ? enqueue(module)
        : this.named(module).then(enqueue);
    this.submitting.add(id);
    const settled = (): void => void this.submitting.delete(id);
    id.then(settled, settled);
    return new Job(this.context, id, key, true);
  }

  /**
   * Runs `module` on each input and returns the outputs in order: one
   * submission per input (batched), all awaited by the one waiter. Rejects
   * with the first failure.
   */
  async map(module: string, inputs: Iterable<unknown>, options: MapOptions = {}): Promise<Uint8Array[]> {
    const named = await this.named(module);
    const jobs = Array.from(inputs, (input) => this.submit(named, input, options));
    return Promise.all(jobs.map((job) => job.result()));
  }

  /**
   * A handle on a job submitted earlier, by its id. Unlike a submitted
   * job's, it is watched from its first `result()` call.
   */
  get(id: number): Job {
    if (!Number.isSafeInteger(id) || id < 0) throw new RangeError(`a job id is an integer of 0 or more, not ${id}`);
    return new Job(this.context, Promise.resolve(id), null, false);
  }

  /**
   * Creates a schedule that submits `module` with `input` at every tick of
   * `options.cron` or every `options.everyMs`; each tick fires exactly
   * once. Resolves to the schedule, with its next ticks.
   */
  async createSchedule(
    name: string,
    module: string,
    input: unknown,
    options: ScheduleOptions,
  ): Promise<ScheduleStatus> {
    const job = { module: await this.named(module), ...submissionFields(input, options.job ?? {}, null) };
    const body: Record<string, unknown> = { name, job };
    if (options.cron !== undefined) body.cron = options.cron;
    if (options.timezone !== undefined) body.timezone = options.timezone;
    if (options.everyMs !== undefined) body.every_ms = options.everyMs;
    if (options.overlap !== undefined) body.overlap = options.overlap;
    if (options.catchUpMs !== undefined) body.catch_up_ms = options.catchUpMs;
    return this.call<ScheduleStatus>("POST", "/v1/schedules", body);
  }

  /** Every schedule, by name. */
  async schedules(): Promise<ScheduleStatus[]> {
    return (await this.call<{ schedules: ScheduleStatus[] }>("GET", "/v1/schedules")).schedules;
  }

  /** One schedule. */
  schedule(name: string): Promise<ScheduleStatus> {
    return this.call<ScheduleStatus>("GET", schedulePath(name));
  }

  /** Pauses (`true`) or resumes a schedule. */
  pauseSchedule(name: string, paused = true): Promise<ScheduleStatus> {
    return this.call<ScheduleStatus>("POST", schedulePath(name, paused ? "pause" : "resume"), {});
  }

  /** Deletes a schedule; the jobs it fired stay. */
  async deleteSchedule(name: string): Promise<void> {
    await this.call("DELETE", schedulePath(name));
  }

  /** Fires a schedule's missed ticks in `from..to` (default: all); the new jobs' ids. */
  async backfill(name: string, from?: number, to?: number): Promise<number[]> {
    const body: Record<string, number> = {};
    if (from !== undefined) body.from = from;
    if (to !== undefined) body.to = to;
    return (await this.call<{ ids: number[] }>("POST", schedulePath(name, "backfill"), body)).ids;
  }

  /**
   * Submits jobs with edges as one DAG, all or nothing; resolves to its id
   * and its jobs' ids in order. Without an `idempotencyKey` the client
   * makes one, so a retry never makes a second DAG.
   */
  async submitDag(
    jobs: readonly DagJob[],
    options: { onFailure?: "skip_descendants" | "cancel_dag"; idempotencyKey?: string } = {},
  ): Promise<{ id: number; jobs: number[]; existing: boolean }> {
    const entries = [];
    for (const job of jobs) {
      const entry: Record<string, unknown> = {
        name: job.name,
        job: { module: await this.named(job.module), ...submissionFields(job.input, job.options ?? {}, null) },
      };
      if (job.after !== undefined) entry.after = job.after;
      if (job.afterJobs !== undefined) entry.after_jobs = job.afterJobs;
      if (job.parentOutputs !== undefined) entry.parent_outputs = job.parentOutputs;
      entries.push(entry);
    }
    const body: Record<string, unknown> = {
      jobs: entries,
      idempotency_key: options.idempotencyKey ?? newIdempotencyKey(),
    };
    if (options.onFailure !== undefined) body.on_failure = options.onFailure;
    return this.call("POST", "/v1/dags", body);
  }

  /** A DAG's status: its state, counts per state and every job. */
  dag(id: number): Promise<DagStatus> {
    return this.call<DagStatus>("GET", `/v1/dags/${id}`);
  }

  /**
   * Points deployment `name` at `module` (a digest, or a `.wasm` path or
   * bytes, uploaded first as {@link Client.upload} does): jobs, DAG jobs and
   * schedules may then give `name` as their module. Resolves to the version
   * now current: a new one, unless the name already pointed at this module
   * (`existing`), so it is safe to repeat.
   */
  async deploy(name: string, module: string | Uint8Array): Promise<DeployResult> {
    const digest = typeof module === "string" && DIGEST.test(module) ? module : await this.upload(module);
    return this.call<DeployResult>("POST", deploymentPath(name), { digest });
  }

  /**
   * Points deployment `name` back at the module of version `to` (default:
   * the version current before the current one), as a new version. Sent
   * once, to one node, and never retried: a rollback repeated after a lost
   * answer would roll back again (after an `unreachable` or any retryable
   * error, look at {@link Client.deployment} before trying again). Rejects
   * with `nothing_to_roll_back` if there is no earlier version,
   * `module_version_not_found` if `to` is not kept.
   */
  rollback(name: string, to?: number): Promise<DeployResult> {
    const body = to === undefined ? {} : { to };
    return this.call<DeployResult>("POST", deploymentPath(name, "rollback"), body, Date.now());
  }

  /** Every deployment, by name, with its current version (`versions` empty). */
  async deployments(): Promise<DeploymentStatus[]> {
    return (await this.call<{ deployments: DeploymentStatus[] }>("GET", "/v1/deployments")).deployments;
  }

  /** One deployment, with the versions kept (the newest 50), newest first. */
  deployment(name: string): Promise<DeploymentStatus> {
    return this.call<DeploymentStatus>("GET", deploymentPath(name));
  }

  /**
   * Removes deployment `name` and its versions; jobs keep the module they
   * resolved to. Rejects with `module_name_in_use` while a schedule names it.
   */
  async undeploy(name: string): Promise<void> {
    await this.call("DELETE", deploymentPath(name));
  }

  /**
   * Lets the jobs of deployment `name` call HTTP(S) endpoints and read the
   * secrets of `options.secrets` (admin scope): each grant a URL pattern
   * (`https://api.example.com/v1/`: `scheme://host[:port][/path]`, the
   * path a prefix, `*.` before a domain, `*` for any port), allowed any
   * method, or an {@link HttpGrant}
   * with its `methods`, `private`, `headers` (set by the node on the
   * requests the grant allows; `{secret:NAME}` in one is filled in from
   * secret `NAME`, see {@link Client.setSecret}) and `record` (which calls
   * are recorded and replayed to later attempts, see
   * {@link HttpGrant.record}). Granting a pattern the name holds replaces
   * that grant. `grants` may be empty when `options.secrets` is not
   * (`client.grant("mail", [], { secrets: ["SMTP"] })`). Resolves to every
   * grant of the name now and the secrets its jobs may read. Safe to
   * repeat (a grant the name has is not added twice), so retried as
   * {@link Client.deploy} is. Rejects with `invalid_grant` for a pattern,
   * method or header that is not one, or for no grant and no secret;
   * `too_many_grants` past 32 grants or 16 readable secrets,
   * `module_name_not_found` for a name not deployed, `secret_not_found`
   * for a header or a secret naming no secret, `invalid_secret` for a name
   * that cannot be one.
   */
  grant(
    name: string,
    grants: string | HttpGrant | readonly (string | HttpGrant)[],
    options: GrantOptions = {},
  ): Promise<GrantsResult> {
    return this.call<GrantsResult>("POST", deploymentPath(name, "grants"), grantRequest(grants, options));
  }

  /**
   * Takes grants from deployment `name` (admin scope): those given, as
   * {@link Client.grant} takes them (a grant goes only if its URL,
   * methods, `private` and `headers` are the ones given, whatever it
   * records), and the secrets of `options.secrets` from those its jobs may
   * read; or, with no grants and no `options.secrets` given, every grant
   * and readable secret (its jobs then have no network and read no
   * secret; empty lists are refused with `invalid_grant`). Resolves to
   * what the name holds after; safe to repeat, so retried.
   */
  revoke(
    name: string,
    grants?: string | HttpGrant | readonly (string | HttpGrant)[],
    options: GrantOptions = {},
  ): Promise<GrantsResult> {
    if (grants === undefined && options.secrets === undefined) {
      return this.call<GrantsResult>("DELETE", deploymentPath(name, "grants"));
    }
    return this.call<GrantsResult>("POST", deploymentPath(name, "grants/revoke"), grantRequest(grants, options));
  }

  /**
   * Sets secret `name` (1 to 64 of `A-Z 0-9 _`, not starting with a digit)
   * to `value` (1 to 16,384 bytes of text; admin scope), for a grant's
   * `headers` to name as `{secret:NAME}` (see {@link HttpGrant.headers}),
   * or for jobs to read (see {@link GrantOptions.secrets}). The node that
   * receives it seals it with the cluster key before the master sees it;
   * nothing answers it back. Safe to repeat, so retried as
   * {@link Client.grant} is. Rejects with `secrets_unavailable` (409) on a
   * node without a cluster key, `secrets_full` (409) past 1,000 secrets,
   * `invalid_secret` (422) for a name or value out of range.
   */
  setSecret(name: string, value: string): Promise<SecretResult> {
    return this.call<SecretResult>("POST", secretPath(name), { value });
  }

  /**
   * Every namespace, by name (a token confined to one: its own): its jobs
   * by state, what its attempts cost, the result bytes its jobs keep, its
   * quotas and its weight.
   */
  async namespaces(): Promise<NamespaceInfo[]> {
    return (await this.call<{ namespaces: NamespaceInfo[] }>("GET", "/v1/namespaces")).namespaces;
  }

  /**
   * Sets namespace `name`'s quotas, all four at once: each one left out is
   * no quota (a cluster-wide admin token). Past a quota a submission in the
   * namespace is `quota_exceeded` (429, retryable), or (`running_max`) its
   * jobs wait. Rejects with `invalid_quota` (422) for 0 or a value past its
   * bound. Safe to repeat, so retried.
   */
  setQuotas(name: string, quotas: Quotas): Promise<{ namespace: string; quotas: Quotas }> {
    return this.call("POST", `/v1/namespaces/${encodeURIComponent(name)}/quotas`, quotas);
  }

  /**
   * Sets namespace `name`'s weight, 1 (the default) to 10,000 (a
   * cluster-wide admin token): namespaces competing for workers get CPU
   * time in proportion to their weights. Rejects with `invalid_weight`
   * (422) otherwise. Safe to repeat, so retried.
   */
  setWeight(name: string, weight: number): Promise<{ namespace: string; weight: number }> {
    return this.call("POST", `/v1/namespaces/${encodeURIComponent(name)}/weight`, { weight });
  }

  /** Every secret, by name (admin scope): when it was last set and which deployments' grants name it or jobs may read it; never a value. */
  async secrets(): Promise<SecretInfo[]> {
    return (await this.call<{ secrets: SecretInfo[] }>("GET", "/v1/secrets")).secrets;
  }

  /**
   * Deletes secret `name` (admin scope). Rejects with `secret_in_use` (409)
   * while a grant names it or a deployment's jobs may read it
   * ({@link Client.secrets} says whose),
   * `secret_not_found` (404) if there is none. Sent once, to one node, and
   * never retried, as {@link Client.rollback} is: a delete repeated after a
   * lost answer would say `secret_not_found` (after an `unreachable` or any
   * retryable error, look at {@link Client.secrets}).
   */
  async deleteSecret(name: string): Promise<void> {
    await this.call("DELETE", secretPath(name), undefined, Date.now());
  }

  /**
   * Stores bytes as a blob (`PUT /v1/blobs`, submit scope) and resolves to
   * its digest (the sha256 of its bytes) and size. A `Uint8Array` is sent
   * with its sha256 (`X-Cohort-Sha256`), so a node stores it only whole
   * and right, and is retried and failed over as a read is. A
   * `ReadableStream` or an async iterable of `Uint8Array`s is sent as it is
   * read (chunked), never held whole; it cannot be read twice, so it is
   * sent once, to one node, never retried (after an error, send it again
   * from its start), and the answer is checked against the bytes sent.
   * Storing bytes already stored is harmless. Rejects with
   * `blob_too_large` (413) past the cluster's ceiling, `blob_digest_mismatch`
   * (422) when `options.sha256` (64 hex digits, either case) is not the
   * bytes', `blob_store_full` (507), `replication_failed` (503, retried for
   * bytes), `blobs_full` (409, retried for bytes) while the cluster keeps
   * as many uploaded blobs as it may.
   *
   * The cluster keeps the blob for its retention time (`--retention`) after
   * this upload at least, and while a held job or a schedule names it; then
   * every node deletes its copy ({@link Client.deleteBlob} stops keeping it
   * at once). Upload it again to keep it longer.
   *
   * The node answers once the blob is durable on a majority of the back-end
   * nodes, copying it after its last byte arrived: every upload waits for
   * its answer, once its body has gone, the try timeout plus one second per
   * {@link BLOB_COPY_BYTES_PER_SEC} bytes sent (see
   * {@link ClientOptions.blobTimeouts}).
   */
  async putBlob(
    data: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
    options: PutBlobOptions = {},
  ): Promise<BlobInfo> {
    const expected = options.sha256 === undefined ? undefined : validDigest(options.sha256);
    if (data instanceof Uint8Array) {
      const sent = { digest: createHash("sha256").update(data).digest("hex"), bytes: data.byteLength };
      const answer = await this.context.transport.json<unknown>({
        method: "PUT",
        path: "/v1/blobs",
        body: data,
        headers: { [SHA256_HEADER]: expected ?? sent.digest },
        deadline: Date.now() + this.context.retryDeadlineMs,
        // Sent whole, as fetch likes: 1 ms per KiB to send it.
        tryTimeoutMs: this.blobTiming.tryTimeoutMs + data.byteLength / 1024,
        headExtraMs: this.copyAllowance,
      });
      return storedAs(answer, sent);
    }
    if (typeof (data as AsyncIterable<Uint8Array>)?.[Symbol.asyncIterator] !== "function") {
      throw new TypeError("putBlob takes a Uint8Array, a ReadableStream or an async iterable of Uint8Arrays");
    }
    const stream = new HashedOnce(data as AsyncIterable<Uint8Array>);
    const answer = await this.context.transport.json<unknown>({
      method: "PUT",
      path: "/v1/blobs",
      body: () => stream.chunks(),
      headers: expected === undefined ? {} : { [SHA256_HEADER]: expected },
      deadline: Date.now(),
      tryTimeoutMs: this.blobTiming.tryTimeoutMs,
      headExtraMs: this.copyAllowance,
    });
    return storedAs(answer, stream.sent());
  }

  /**
   * Stores the file at `path` as a blob, as {@link Client.putBlob} stores
   * bytes, never holding it whole: read once to hash it, then streamed
   * from disk with its size and sha256, so a retry (or the next node)
   * sends it again, whole. Rejects with `file_unreadable` for a file that
   * cannot be read, `blob_digest_mismatch` for one that changes meanwhile.
   */
  async putBlobFile(path: string): Promise<BlobInfo> {
    let info: BlobInfo;
    try {
      info = await hashFile(path);
    } catch (cause) {
      const reason = cause instanceof Error ? cause.message : String(cause);
      throw new CohortError("file_unreadable", `cannot read ${path}: ${reason}`, { cause });
    }
    const answer = await this.context.transport.json<unknown>({
      method: "PUT",
      path: "/v1/blobs",
      body: () => fileChunks(path, info),
      headers: { [SHA256_HEADER]: info.digest, "content-length": String(info.bytes) },
      deadline: Date.now() + this.context.retryDeadlineMs,
      tryTimeoutMs: this.blobTiming.tryTimeoutMs,
      headExtraMs: this.copyAllowance,
    });
    return storedAs(answer, info);
  }

  /**
   * A blob's size (`HEAD /v1/blobs/{digest}`), or `null` if the cluster has
   * no such blob. `digest` is hex in either case.
   */
  async headBlob(given: string): Promise<BlobInfo | null> {
    const digest = blobDigest(given);
    try {
      const answer = await this.context.transport.answer({
        method: "HEAD",
        path: blobPath(digest),
        deadline: Date.now() + this.context.retryDeadlineMs,
        tryTimeoutMs: this.blobTiming.tryTimeoutMs,
      });
      return headInfo(answer.headers, digest);
    } catch (error) {
      if (error instanceof CohortError && error.status === 404) return null;
      throw error;
    }
  }

  /**
   * Every blob the answering node stores (`GET /v1/blobs`; not the
   * cluster's), each a {@link BlobEntry}: its digest and size, whether the
   * cluster keeps it (`kept`), how many held jobs and schedules name it
   * (`refs`) and when the cluster stops keeping it if nothing names it
   * (`collect_at`, ms since the Unix epoch); those three are absent when
   * the node could not ask the master.
   */
  async listBlobs(): Promise<BlobEntry[]> {
    const answer = await this.call<{ blobs?: unknown }>("GET", "/v1/blobs");
    if (!Array.isArray(answer.blobs)) throw new CohortError("bad_response", "a list of blobs without blobs");
    return answer.blobs.map(blobEntryOf);
  }

  /**
   * A page of the blobs the cluster keeps, wherever their copies are
   * (`GET /v1/blobs?scope=cluster`, read scope), by digest: the first
   * `limit` (1 to 1,000; the node's default 100 when left out) after digest
   * `after`. The page's `next` is the `after` of the next one (absent on
   * the last).
   */
  async keptBlobs(options: { after?: string; limit?: number } = {}): Promise<BlobPage> {
    const query = new URLSearchParams({ scope: "cluster" });
    if (options.after !== undefined) query.set("after", options.after);
    if (options.limit !== undefined) query.set("limit", String(options.limit));
    const answer = await this.call<{ blobs?: unknown; next?: unknown }>("GET", `/v1/blobs?${query}`);
    if (!Array.isArray(answer.blobs)) throw new CohortError("bad_response", "a page of blobs without blobs");
    if (answer.next !== undefined && typeof answer.next !== "string") {
      throw new CohortError("bad_response", "a page of blobs whose next is not a digest");
    }
    const page: BlobPage = { blobs: answer.blobs.map(blobEntryOf) };
    if (answer.next !== undefined) page.next = answer.next;
    return page;
  }

  /**
   * Stops the cluster keeping blob `digest` (`DELETE /v1/blobs/{digest}`,
   * submit scope); every node deletes its copy once its grace period
   * (`--blob-grace`) has passed. Only a blob nothing names: rejects with
   * `blob_in_use` (409) while a held job (its input blob or an output blob
   * it wrote) or a schedule names it (those keep it until the retention
   * time after they are gone), `blob_not_found` (404) if the cluster keeps
   * no such blob. `digest` is hex in either case. Sent once, to one node,
   * and never retried, as {@link Client.deleteSecret} is: a delete
   * repeated after a lost answer would say `blob_not_found`.
   */
  async deleteBlob(digest: string): Promise<void> {
    await this.call("DELETE", blobPath(digest), undefined, Date.now());
  }

  /**
   * Stops the cluster keeping blob `digest` even though finished jobs name
   * it (`POST /v1/blobs/{digest}/purge`, admin scope): those that read it
   * as their input are purged with it, those that wrote it no longer list
   * it among their outputs. Resolves to how many finished jobs named it.
   * Rejects with `blob_in_use` (409) while a job that has not finished
   * reads it or a schedule gives it to its jobs (cancel or delete those
   * first), `blob_not_found` (404) if the cluster keeps no such blob. Sent
   * once, to one node, and never retried, as {@link Client.deleteBlob} is.
   */
  async purgeBlob(digest: string): Promise<number> {
    const answer = await this.call<{ jobs?: unknown }>("POST", `${blobPath(digest)}/purge`, undefined, Date.now());
    if (typeof answer.jobs !== "number") {
      throw new CohortError("bad_response", "a purge's answer without its count of jobs");
    }
    return answer.jobs;
  }

  /**
   * Reads blob `digest`, or the bytes of `range` (as `slice` takes them:
   * `end` excluded; a negative `start` for the last bytes), as they arrive:
   * resolves once the node answers, to a {@link BlobStream} with the
   * blob's `size` and the range's `start` and `length`, whose `body` (or
   * the stream itself, async-iterated) gives the bytes. A download broken
   * midway (a reset, a node lost) resumes where it broke on the next node.
   * Rejects with `blob_not_found` (404), `range_not_satisfiable` (416) for
   * a `start` past the end. `digest` is hex in either case.
   *
   * A node without a copy of the blob answers once its copy from another has
   * the first MiB, or all of a smaller blob, and a range once the copy also
   * reaches the range's first byte: the answer's head is waited for the try
   * timeout plus {@link BLOB_FETCH_WAIT_MS} (10 minutes; plus the blob's size
   * at {@link BLOB_COPY_BYTES_PER_SEC} instead when a broken download
   * resumes, its size known); then each chunk is waited for the try timeout
   * at most.
   */
  async getBlob(digest: string, range: BlobRange = {}): Promise<BlobStream> {
    const first = rangeHeader(range);
    const window = new ReadWindow(digest);
    const timing = this.blobTiming;
    const open = (byteRange: string | undefined): Promise<StreamedAnswer> =>
      this.context.transport.stream({
        method: "GET",
        path: blobPath(window.digest),
        // The bytes as stored (fetch asks for `identity` itself with a range).
        headers: byteRange === undefined ? { "accept-encoding": "identity" } : { range: byteRange },
        deadline: Date.now() + this.context.retryDeadlineMs,
        tryTimeoutMs: timing.tryTimeoutMs,
        headExtraMs: () => {
          const size = window.knownSize;
          return size === undefined ? timing.fetchWaitMs : copyAllowanceMs(size, timing);
        },
      });
    const answer = await open(first);
    try {
      window.accept(answer, first !== undefined);
    } catch (error) {
      await answer.body.cancel().catch(() => undefined);
      throw error;
    }
    return new BlobDownload(answer, window, open);
  }

  /**
   * Saves blob `digest` at `path`: streamed to a temporary file beside it
   * (`.NAME.XXXX.part`) whose sha256 is checked before it is renamed into
   * place, so `path` never holds part of a blob, or other bytes. Rejects
   * with `blob_digest_mismatch` (the temporary file removed) if the bytes
   * received are not the blob's, `file_unwritable` if the file cannot be
   * written; as {@link Client.getBlob} otherwise.
   */
  async getBlobToFile(digest: string, path: string): Promise<BlobInfo> {
    const blob = await this.getBlob(digest);
    let part: PartFile;
    try {
      part = await PartFile.create(path, blob.digest);
    } catch (error) {
      await blob.body.cancel().catch(() => undefined);
      throw error;
    }
    try {
      for await (const chunk of blob) await part.write(chunk);
    } catch (error) {
      await part.discard();
      throw error;
    }
    return part.commit();
  }

  /** How long a node is given to copy the `bytesSent` of an upload before it answers, in ms. */
  private readonly copyAllowance = (bytesSent: number): number => copyAllowanceMs(bytesSent, this.blobTiming);

  /**
   * One JSON request, retried and failed over until `deadline` (default:
   * the retry deadline; one already past: sent once, never retried).
   */
  private call<T>(
    method: "GET" | "POST" | "DELETE",
    path: string,
    body?: unknown,
    deadline = Date.now() + this.context.retryDeadlineMs,
  ): Promise<T> {
    return this.context.transport.json<T>({
      method,
      path,
      body: body === undefined ? undefined : JSON.stringify(body),
      deadline,
      tryTimeoutMs: CALL_TRY_TIMEOUT_MS,
    });
  }

  /**
   * What a job names `module` by: a digest or a deployment's name as
   * given, or the digest of a path, uploaded first. A string in a name's
   * shape (`send-email`, `job.wasm`) is a path if a file has it, and a name
   * otherwise, as `cohort submit` decides.
   */
  private async named(module: string): Promise<string> {
    if (DIGEST.test(module) || this.names.has(module)) return module;
    if (NAME.test(module) && !this.uploads.has(resolvePath(module)) && !(await isFile(module))) {
      this.names.add(module);
      return module;
    }
    return this.upload(module);
  }

  /**
   * Sends the submissions still in the linger window and waits until every
   * submission knows its id (or failed), then stops: results still awaited
   * and later calls fail with the code `closed`, and requests in flight are
   * abandoned.
   */
  async close(): Promise<void> {
    this.batcher.flush();
    while (this.submitting.size > 0) await Promise.allSettled([...this.submitting]);
    this.batcher.close();
    this.context.waiter.close();
    this.context.transport.close();
  }

  private async uploadBytes(bytes: Uint8Array): Promise<string> {
    const answer = await this.context.transport.json<{ digest: string; bytes: number }>({
      method: "POST",
      path: "/v1/modules",
      body: bytes,
      contentType: "application/wasm",
      deadline: Date.now() + this.context.retryDeadlineMs,
      tryTimeoutMs: uploadTimeoutMs(bytes.byteLength),
    });
    return answer.digest;
  }

  private async readModule(path: string): Promise<Uint8Array> {
    try {
      return await readFile(path);
    } catch (cause) {
      const reason = cause instanceof Error ? cause.message : String(cause);
      throw new CohortError("module_unreadable", `cannot read the module ${path}: ${reason}`, { cause });
    }
  }
}

/**
 * A new idempotency key: `ts-` and 128 random bits in hex, so that a
 * retried submission finds the job its first try created.
 */
function newIdempotencyKey(): string {
  return `ts-${randomBytes(16).toString("hex")}`;
}

/** Whether a file is at `path`. */
async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/** The route of deployment `name` (and of an action on it). */
function deploymentPath(name: string, action?: string): string {
  const path = `/v1/deployments/${encodeURIComponent(name)}`;
  return action === undefined ? path : `${path}/${action}`;
}

/** The route of secret `name`. */
function secretPath(name: string): string {
  return `/v1/secrets/${encodeURIComponent(name)}`;
}

/**
 * The body of a grant or a revoke: `http` when grants are given, `secrets`
 * when some are.
 */
function grantRequest(
  grants: string | HttpGrant | readonly (string | HttpGrant)[] | undefined,
  options: GrantOptions,
): GrantRequest {
  const body: GrantRequest = {};
  if (grants !== undefined) body.http = grantList(grants);
  if (options.secrets !== undefined && options.secrets.length > 0) body.secrets = [...options.secrets];
  return body;
}

/** Grants as `{"http": [...]}` lists them: a URL string is `{ url }`, a grant is sent as it is. */
function grantList(grants: string | HttpGrant | readonly (string | HttpGrant)[]): HttpGrant[] {
  const list = (Array.isArray(grants) ? grants : [grants]) as readonly (string | HttpGrant)[];
  return list.map((grant) => (typeof grant === "string" ? { url: grant } : grant));
}

/** The route of schedule `name` (and of an action on it). */
function schedulePath(name: string, action?: string): string {
  const path = `/v1/schedules/${encodeURIComponent(name)}`;
  return action === undefined ? path : `${path}/${action}`;
}

/** A submission's fields other than its module, as the API names them. */
function submissionFields(input: unknown, options: SubmitOptions, key: string | null): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  if (input instanceof Uint8Array) {
    fields.input_base64 = Buffer.from(input.buffer, input.byteOffset, input.byteLength).toString("base64");
  } else if (typeof input === "string") fields.input = input;
  else if (input !== undefined) fields.input_json = input;
  if (options.inputBlob !== undefined) fields.input_blob = inputBlobDigest(options.inputBlob);
  if (options.timeoutMs !== undefined) fields.timeout_ms = options.timeoutMs;
  if (options.memoryBytes !== undefined) fields.memory_bytes = options.memoryBytes;
  if (options.maxAttempts !== undefined) fields.max_attempts = options.maxAttempts;
  if (options.priority !== undefined) fields.priority = options.priority;
  if (options.concurrencyKey !== undefined) fields.concurrency_key = options.concurrencyKey;
  if (options.concurrencyLimit !== undefined) fields.concurrency_limit = options.concurrencyLimit;
  if (options.rateLimit !== undefined) fields.rate_limit = options.rateLimit;
  if (options.uniqueKey !== undefined) fields.unique_key = options.uniqueKey;
  if (options.uniqueWindowMs !== undefined) fields.unique_window_ms = options.uniqueWindowMs;
  if (options.after !== undefined) fields.after = options.after;
  if (options.egress !== undefined) fields.egress = grantList(options.egress);
  if (options.labels !== undefined && Object.keys(options.labels).length > 0) fields.labels = { ...options.labels };
  if (options.namespace !== undefined) fields.namespace = options.namespace;
  if (key !== null) fields.idempotency_key = key;
  return fields;
}

/**
 * What a submission's `inputBlob` sends: a string as it is given (the node
 * checks it: `invalid_job` if it is not a digest, `blob_not_found` if the
 * cluster has no such blob), or the `digest` of a `BlobInfo` or an
 * `OutputBlob`.
 */
function inputBlobDigest(blob: string | { readonly digest: string }): string {
  if (typeof blob === "string") return blob;
  if (typeof blob?.digest !== "string") {
    throw new TypeError(`an input blob is a digest or a BlobInfo, not ${JSON.stringify(blob)}`);
  }
  return blob.digest;
}
