/**
 * The TypeScript client of cohort: submissions batched within a linger
 * window, results awaited through one long-poll waiter, retries with
 * idempotency keys and failover across a list of nodes.
 *
 * @packageDocumentation
 */

export { BLOB_COPY_BYTES_PER_SEC, BLOB_FETCH_WAIT_MS, BLOB_TRY_TIMEOUT_MS } from "./blobs.js";
export { Client, type MapOptions } from "./client.js";
export { CohortError, JobFailed, WaitTimeout, type CohortErrorDetails } from "./errors.js";
export { Job } from "./job.js";
export type {
  AttemptStatus,
  BlobEntry,
  BlobPage,
  BlobInfo,
  BlobRange,
  BlobStream,
  CallRecord,
  ClientOptions,
  DagJob,
  DagStatus,
  DeploymentStatus,
  DeploymentVersion,
  DeployResult,
  GrantOptions,
  GrantRequest,
  GrantsResult,
  HttpGrant,
  JobStatus,
  NamespaceInfo,
  OutputBlob,
  PutBlobOptions,
  Quotas,
  ScheduleOptions,
  ScheduleStatus,
  SecretInfo,
  SecretResult,
  SubmitOptions,
  Usage,
} from "./types.js";
