/**
 * The client's one waiter: every submitted job is watched, from the moment
 * its id is known, through `POST /v1/jobs/wait` long-polls, at most 4 in
 * flight, instead of one request per job.
 *
 * @packageDocumentation
 */

import { CohortError, closedError } from "./errors.js";
import { Transport } from "./transport.js";
import type { OutputBlob } from "./types.js";

/** Most long-polls in flight at once. */
const POLLS_MAX = 4;
/** Most ids in one long-poll. */
const IDS_PER_POLL_MAX = 10_000;
/** How long a long-poll waits, unless it takes the last free slot. */
const WAIT_MS = 25_000;
/** How long the long-poll of the last free slot waits, so newly awaited jobs are seen soon. */
const LAST_SLOT_WAIT_MS = 1_000;
/** Time a long-poll's try is given beyond its `wait_ms` before it counts as a transport failure. */
const POLL_GRACE_MS = 15_000;

/** A finished (or unknown) job, as `POST /v1/jobs/wait` lists it. */
export interface Finished {
  id: number;
  /** `succeeded`, `failed`, `cancelled`, `dead`, or `unknown` (see `error`). */
  state: string;
  error: { code: string; message: string } | null;
  /** The output, when it came inline; else it is fetched with `GET /v1/jobs/{id}/result`. */
  output_base64: string | null;
  output_bytes: number | null;
  /** The output blobs it wrote, when it succeeded; absent when none (or from older nodes). */
  outputs?: OutputBlob[];
}

/** One caller awaiting a job. */
interface Watcher {
  resolve: (finished: Finished) => void;
  reject: (error: CohortError) => void;
}

/** Watches jobs together until each finishes. */
export class Waiter {
  /** The callers awaiting each watched job. */
  private readonly watchers = new Map<number, Set<Watcher>>();
  /** Watched jobs that no long-poll in flight asks about. */
  private readonly unwatched = new Set<number>();
  private polls = 0;
  private closed = false;

  constructor(
    private readonly transport: Transport,
    private readonly retryDeadlineMs: number,
  ) {}

  /** Resolves when job `id` has finished (or is unknown to the cluster). */
  wait(id: number): Promise<Finished> {
    if (this.closed) return Promise.reject(closedError());
    return new Promise((resolve, reject) => {
      const watcher: Watcher = { resolve, reject };
      let watchers = this.watchers.get(id);
      if (watchers === undefined) {
        watchers = new Set();
        this.watchers.set(id, watchers);
        this.unwatched.add(id);
      }
      watchers.add(watcher);
      this.pump();
    });
  }

  /** Fails every wait with `closed`; later waits fail at once. */
  close(): void {
    this.closed = true;
    const watchers = [...this.watchers.values()].flatMap((set) => [...set]);
    this.watchers.clear();
    this.unwatched.clear();
    for (const watcher of watchers) watcher.reject(closedError());
  }

  /** Starts long-polls for the unwatched jobs while a slot is free. */
  private pump(): void {
    while (!this.closed && this.polls < POLLS_MAX && this.unwatched.size > 0) {
      const ids: number[] = [];
      for (const id of this.unwatched) {
        if (ids.length === IDS_PER_POLL_MAX) break;
        ids.push(id);
      }
      for (const id of ids) this.unwatched.delete(id);
      this.polls += 1;
      const waitMs = this.polls === POLLS_MAX ? LAST_SLOT_WAIT_MS : WAIT_MS;
      void this.poll(ids, waitMs).finally(() => {
        this.polls -= 1;
        this.pump();
      });
    }
  }

  /**
   * One long-poll: settles the watchers of the jobs that finished and
   * gives the others back to be watched again. If the request fails for
   * good (past the retry deadline, or refused), the watchers of its jobs
   * fail with its error.
   */
  private async poll(ids: number[], waitMs: number): Promise<void> {
    let finished: Finished[];
    try {
      const body = JSON.stringify({ ids, wait_ms: waitMs });
      finished = (
        await this.transport.json<{ jobs: Finished[] }>({
          method: "POST",
          path: "/v1/jobs/wait",
          body,
          deadline: Date.now() + this.retryDeadlineMs,
          tryTimeoutMs: waitMs + POLL_GRACE_MS,
        })
      ).jobs;
    } catch (caught) {
      for (const id of ids) this.settle(id, (watcher) => watcher.reject(caught as CohortError));
      return;
    }
    const done = new Set<number>();
    for (const job of finished) {
      done.add(job.id);
      this.settle(job.id, (watcher) => watcher.resolve(job));
    }
    for (const id of ids) if (!done.has(id) && this.watchers.has(id)) this.unwatched.add(id);
  }

  /** Ends the wait of every watcher of job `id`. */
  private settle(id: number, end: (watcher: Watcher) => void): void {
    const watchers = this.watchers.get(id);
    if (watchers === undefined) return;
    this.watchers.delete(id);
    for (const watcher of watchers) end(watcher);
  }
}
