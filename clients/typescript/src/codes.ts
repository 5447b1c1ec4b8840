/**
 * The server's error codes: the HTTP status each is answered with and
 * whether a retry may help.
 *
 * Generated from clients/openapi.json by clients/gen_error_codes.py: do not edit.
 * test/codes.test.js checks it against the document.
 *
 * @packageDocumentation
 */

/** A code's row of the server's table. */
export interface CodeRow {
  /** The HTTP status the server answers the code with. */
  readonly status: number;
  /** Whether the same request, sent again later, may succeed. */
  readonly retryable: boolean;
}

/** Every code the API documents, by status then code. */
export const ERROR_CODES: ReadonlyMap<string, CodeRow> = new Map<string, CodeRow>([
  ["bad_json", { status: 400, retryable: false }],
  ["bad_request", { status: 400, retryable: false }],
  ["invalid_token", { status: 400, retryable: false }],
  ["tls_required", { status: 400, retryable: false }],
  ["unauthorized", { status: 401, retryable: false }],
  ["forbidden", { status: 403, retryable: false }],
  ["not_front_end", { status: 403, retryable: false }],
  ["blob_not_found", { status: 404, retryable: false }],
  ["dag_not_found", { status: 404, retryable: false }],
  ["job_expired", { status: 404, retryable: false }],
  ["job_not_found", { status: 404, retryable: false }],
  ["module_name_not_found", { status: 404, retryable: false }],
  ["module_not_stored", { status: 404, retryable: false }],
  ["module_version_not_found", { status: 404, retryable: false }],
  ["not_found", { status: 404, retryable: false }],
  ["schedule_not_found", { status: 404, retryable: false }],
  ["secret_not_found", { status: 404, retryable: false }],
  ["token_not_found", { status: 404, retryable: false }],
  ["request_timeout", { status: 408, retryable: true }],
  ["blob_in_use", { status: 409, retryable: false }],
  ["blobs_full", { status: 409, retryable: true }],
  ["idempotency_conflict", { status: 409, retryable: false }],
  ["job_finished", { status: 409, retryable: false }],
  ["job_not_finished", { status: 409, retryable: true }],
  ["job_not_succeeded", { status: 409, retryable: false }],
  ["module_name_in_use", { status: 409, retryable: false }],
  ["module_names_full", { status: 409, retryable: false }],
  ["namespaces_full", { status: 409, retryable: false }],
  ["nothing_to_roll_back", { status: 409, retryable: false }],
  ["schedule_exists", { status: 409, retryable: false }],
  ["secret_in_use", { status: 409, retryable: false }],
  ["secrets_full", { status: 409, retryable: false }],
  ["secrets_unavailable", { status: 409, retryable: false }],
  ["token_exists", { status: 409, retryable: false }],
  ["too_many_grants", { status: 409, retryable: false }],
  ["upgrade_busy", { status: 409, retryable: true }],
  ["upgrade_unsupported", { status: 409, retryable: false }],
  ["blob_too_large", { status: 413, retryable: false }],
  ["body_too_large", { status: 413, retryable: false }],
  ["input_too_large", { status: 413, retryable: false }],
  ["module_too_large", { status: 413, retryable: false }],
  ["range_not_satisfiable", { status: 416, retryable: false }],
  ["blob_digest_mismatch", { status: 422, retryable: false }],
  ["invalid_dag", { status: 422, retryable: false }],
  ["invalid_filter", { status: 422, retryable: false }],
  ["invalid_grant", { status: 422, retryable: false }],
  ["invalid_job", { status: 422, retryable: false }],
  ["invalid_master", { status: 422, retryable: false }],
  ["invalid_module_name", { status: 422, retryable: false }],
  ["invalid_namespace", { status: 422, retryable: false }],
  ["invalid_quota", { status: 422, retryable: false }],
  ["invalid_schedule", { status: 422, retryable: false }],
  ["invalid_secret", { status: 422, retryable: false }],
  ["invalid_weight", { status: 422, retryable: false }],
  ["master_nondeterministic_import", { status: 422, retryable: false }],
  ["master_replay_diverged", { status: 422, retryable: false }],
  ["master_snapshot_unreadable", { status: 422, retryable: false }],
  ["master_traps", { status: 422, retryable: false }],
  ["master_wrong_world", { status: 422, retryable: false }],
  ["module_invalid", { status: 422, retryable: false }],
  ["module_job_version", { status: 422, retryable: false }],
  ["module_not_found", { status: 422, retryable: false }],
  ["module_unsupported_import", { status: 422, retryable: false }],
  ["module_wrong_world", { status: 422, retryable: false }],
  ["queue_full", { status: 429, retryable: true }],
  ["quota_exceeded", { status: 429, retryable: true }],
  ["too_many_connections", { status: 429, retryable: true }],
  ["unique_keys_full", { status: 429, retryable: true }],
  ["headers_too_large", { status: 431, retryable: false }],
  ["internal", { status: 500, retryable: false }],
  ["unknown_version", { status: 500, retryable: false }],
  ["blob_store_corrupt", { status: 502, retryable: false }],
  ["blob_store_unavailable", { status: 503, retryable: true }],
  ["blobs_busy", { status: 503, retryable: true }],
  ["master_unavailable", { status: 503, retryable: true }],
  ["outcome_unknown", { status: 503, retryable: true }],
  ["replicas_unavailable", { status: 503, retryable: true }],
  ["replication_failed", { status: 503, retryable: true }],
  ["blob_store_full", { status: 507, retryable: true }],
]);
