// Real cohort nodes for the tests: each test starts the nodes it needs from
// $COHORT_BIN, on loopback ports of their own and temporary data
// directories, and kills them at the end.

import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** How long a node may take to serve and see its cluster ready. */
const START_TIMEOUT_MS = 30_000;
/** How often the cluster's readiness is polled. */
const POLL_MS = 50;

/**
 * What the tests run, from the environment. A missing variable fails every
 * test file at import (the tests never skip).
 */
function fromEnv() {
  const wanted = {
    COHORT_BIN: "the cohort binary",
    COHORT_ECHO_WASM: "a job component that returns its input unchanged",
    COHORT_TRAP_WASM: "a job component that always traps",
  };
  const missing = Object.keys(wanted).filter((name) => !process.env[name]);
  if (missing.length > 0) {
    const list = Object.entries(wanted).map(([name, what]) => `  ${name}: ${what}`).join("\n");
    throw new Error(`not set: ${missing.join(", ")}; the tests need\n${list}`);
  }
  return {
    bin: process.env.COHORT_BIN,
    echoWasm: process.env.COHORT_ECHO_WASM,
    trapWasm: process.env.COHORT_TRAP_WASM,
  };
}

export const { bin, echoWasm, trapWasm } = fromEnv();

/**
 * The `wordcount` example's component, from $COHORT_WORDCOUNT_WASM: given
 * an input blob, it streams it and writes the output blob `counts.tsv`.
 * Only the tests of blobs given to jobs need it, and fail (never skip)
 * without it.
 */
export function wordcountWasm() {
  const path = process.env.COHORT_WORDCOUNT_WASM;
  if (!path) {
    throw new Error("not set: COHORT_WORDCOUNT_WASM, the wordcount example's component (streams its input blob)");
  }
  return path;
}

/** Nodes still running: killed when the test process exits, whatever ended it. */
const running = new Set();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/**
 * Starts `cohort node` and resolves once it serves and `GET /v1/cluster`
 * shows a master and at least `workers` workers.
 *
 * @param {object} options
 * @param {string} options.nodeId - its `--node-id`
 * @param {string} [options.seed] - the gossip address of a node to join
 * @param {string[]} [options.args] - more flags (e.g. `--slots 0`)
 * @param {number} [options.workers] - workers to wait for (default 1; 0 for a node that runs nothing)
 * @param {boolean} [options.ready] - wait for the master and workers (default true; a node with a
 *   cluster key answers `GET /v1/cluster` only to a token: wait with {@link waitReady} once there is one)
 */
export async function startNode({ nodeId, seed, args = [], workers = 1, ready = true }) {
  const dataDir = await mkdtemp(join(tmpdir(), `cohort-ts-${nodeId}-`));
  const flags = ["node", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--node-id", nodeId, ...args];
  if (seed !== undefined) flags.push("--seed", seed);
  const child = spawn(bin, flags, { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (chunk) => {
    stderr = (stderr + chunk).slice(-8192);
  });
  running.add(child);
  // Ends when the node exits, or at once if it could not be started.
  const exited = once(child, "exit")
    .catch(() => undefined)
    .finally(() => running.delete(child));
  const node = {
    nodeId,
    dataDir,
    process: child,
    url: "",
    gossip: "",
    /** Kills the node (SIGKILL) and waits for it to exit. */
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
    /** Kills the node and removes its data directory. */
    async stop() {
      await node.kill();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
  try {
    const line = await listeningLine(child, () => stderr);
    const match = /gossiping on (\S+), listening on (http:\/\/\S+)/.exec(line);
    if (match === null) throw new Error(`node ${nodeId} printed an unexpected line: ${line}`);
    node.gossip = match[1];
    node.url = match[2];
    if (ready) await waitReady(node.url, workers, START_TIMEOUT_MS);
  } catch (error) {
    await node.stop();
    throw new Error(`node ${nodeId} did not start: ${error.message}\n--- its stderr ---\n${stderr}`);
  }
  return node;
}

/** Reads the node's stdout until the line with `listening on http://ADDR`. */
function listeningLine(child, stderr) {
  return new Promise((resolve, reject) => {
    let stdout = "";
    const timer = setTimeout(() => reject(new Error(`no "listening on" line within ${START_TIMEOUT_MS} ms`)), START_TIMEOUT_MS);
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk) => {
      stdout += chunk;
      const line = stdout.split("\n").find((l) => l.includes("listening on http://"));
      if (line !== undefined) {
        clearTimeout(timer);
        resolve(line);
      }
    });
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${bin}: ${error.message}`));
    });
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`it exited (${code ?? signal}) before listening: ${stderr().slice(-2000)}`));
    });
  });
}

/**
 * Polls `GET /v1/cluster` on `url` (with `token`, if given) until it names a master and lists at
 * least `workers` workers.
 */
export async function waitReady(url, workers, timeoutMs = START_TIMEOUT_MS, token = undefined) {
  const deadline = Date.now() + timeoutMs;
  let last = "no answer yet";
  const headers = token === undefined ? {} : { authorization: `Bearer ${token}` };
  for (;;) {
    try {
      const response = await fetch(`${url}/v1/cluster`, { headers, signal: AbortSignal.timeout(2_000) });
      const cluster = await response.json();
      if (cluster.master_node != null && (cluster.workers ?? []).length >= workers) return cluster;
      last = JSON.stringify({ master_node: cluster.master_node, workers: cluster.workers });
    } catch (error) {
      last = String(error);
    }
    if (Date.now() > deadline) throw new Error(`cluster at ${url} not ready within ${timeoutMs} ms: ${last}`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** Runs `cohort ...args`; its stdout, or an error with its stderr. */
export function cohort(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk) => (stdout += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk) => (stderr += chunk));
    const timer = setTimeout(() => child.kill("SIGKILL"), START_TIMEOUT_MS);
    child.once("error", reject);
    child.once("exit", (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(stdout);
      else reject(new Error(`cohort ${args.join(" ")} exited ${code}: ${stderr}`));
    });
  });
}

/**
 * A token with `scopes` (e.g. `"submit,read"`), confined to `namespace` if given, made through the
 * node at `url` by proving the cluster key in the file `key`; tried again while the master comes up.
 */
export async function token(url, key, scopes, namespace = undefined) {
  const args = ["token", "create", "--server", url, "--cluster-key", key, "--scope", scopes];
  if (namespace !== undefined) args.push("--namespace", namespace);
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    try {
      return (await cohort(args)).trim();
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  }
}

/** A loopback URL on which nothing listens (a port taken, then freed). */
export async function deadUrl() {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address();
  server.close();
  await once(server, "close");
  return `http://127.0.0.1:${port}`;
}

/**
 * A `fetch` that counts its calls by path (e.g. `/v1/jobs/batch`) and by
 * origin, and the calls that failed without an answer.
 */
export function countingFetch() {
  const counter = {
    byPath: new Map(),
    byOrigin: new Map(),
    failed: 0,
    total: () => [...counter.byPath.values()].reduce((a, b) => a + b, 0),
    fetch: async (input, init) => {
      const url = new URL(String(input));
      count(counter.byPath, url.pathname);
      count(counter.byOrigin, url.origin);
      try {
        return await fetch(input, init);
      } catch (error) {
        counter.failed += 1;
        throw error;
      }
    },
  };
  return counter;
}

function count(map, key) {
  map.set(key, (map.get(key) ?? 0) + 1);
}

/** Every job the cluster at `url` knows, through `GET /v1/jobs` pages. */
export async function listJobs(url) {
  const jobs = [];
  let cursor = null;
  do {
    const query = cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`;
    const response = await fetch(`${url}/v1/jobs?limit=1000${query}`);
    if (!response.ok) throw new Error(`GET /v1/jobs: ${response.status} ${await response.text()}`);
    const page = await response.json();
    jobs.push(...page.jobs);
    cursor = page.next_cursor ?? null;
  } while (cursor !== null);
  return jobs;
}
