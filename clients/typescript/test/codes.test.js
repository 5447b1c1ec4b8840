// The client's table of error codes is the server's, and a batch's refused
// item reports the status the server answers its code with. No node needed.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { Client, CohortError } from "../dist/index.js";
import { ERROR_CODES } from "../dist/codes.js";
import { statusOfCode } from "../dist/errors.js";

// The node's OpenAPI document (generated from its ErrorCode enum): beside
// this package, or where tests/clients.rs, which runs a copy, says.
const documentPath = process.env.COHORT_OPENAPI_JSON ?? fileURLToPath(new URL("../../openapi.json", import.meta.url));

/** Every code of the document's error examples: its status and `retryable`. */
function documented() {
  const document = JSON.parse(readFileSync(documentPath, "utf8"));
  const codes = new Map();
  for (const [path, item] of Object.entries(document.paths)) {
    for (const [method, operation] of Object.entries(item)) {
      for (const [status, response] of Object.entries(operation.responses ?? {})) {
        for (const media of Object.values(response.content ?? {})) {
          for (const example of Object.values(media.examples ?? {})) {
            const value = example.value;
            if (typeof value?.code !== "string") continue;
            const row = { status: Number(status), retryable: value.retryable };
            const known = codes.get(value.code) ?? row;
            assert.deepEqual(known, row, `${value.code}: ${method} ${path}`);
            codes.set(value.code, row);
          }
        }
      }
    }
  }
  return codes;
}

test("the table of error codes is the server's document's", () => {
  const expected = documented();
  assert.ok(expected.size >= 40, `the document lists ${expected.size} codes: not read right`);
  const wrong = [...expected].filter(([code, row]) => {
    const got = ERROR_CODES.get(code);
    return got?.status !== row.status || got?.retryable !== row.retryable;
  });
  const extra = [...ERROR_CODES.keys()].filter((code) => !expected.has(code));
  assert.deepEqual(
    { wrong, extra },
    { wrong: [], extra: [] },
    "src/codes.ts is not clients/openapi.json's table: run python3 clients/gen_error_codes.py",
  );
  for (const [code, { status }] of expected) assert.equal(statusOfCode(code), status, code);
});

test("a refused batch item has the status its code is answered with", { timeout: 10_000 }, async () => {
  const cases = [
    ["module_not_found", false, 422],
    ["invalid_job", false, 422],
    ["invalid_dag", false, 422],
    ["idempotency_conflict", false, 409],
    ["unique_keys_full", true, 429],
    ["queue_full", true, 429],
    ["outcome_unknown", true, 503],
    // A code from a newer master: the server answers it with 500.
    ["from_a_newer_master", false, 500],
  ];
  // A node that refuses every job of a batch, each with its case's code.
  const fetch = async (url, init) => {
    assert.equal(new URL(url).pathname, "/v1/jobs/batch");
    const { jobs } = JSON.parse(init.body);
    const results = jobs.map((job) => {
      const [code, retryable] = cases[Number(job.input)];
      return { code, message: "why", retryable };
    });
    return new Response(JSON.stringify({ results }), { status: 202, headers: { "content-type": "application/json" } });
  };
  // No time to retry: a retryable refusal fails its handle too.
  const client = new Client("http://127.0.0.1:1", { fetch, lingerMs: 50, retryDeadlineMs: 0 });
  try {
    const jobs = cases.map((_, i) => client.submit("0".repeat(64), String(i)));
    for (const [i, [code, retryable, status]] of cases.entries()) {
      await assert.rejects(jobs[i].id(), (error) => {
        assert.ok(error instanceof CohortError);
        assert.deepEqual([error.code, error.status, error.retryable], [code, status, retryable]);
        return true;
      });
    }
  } finally {
    await client.close();
  }
});
