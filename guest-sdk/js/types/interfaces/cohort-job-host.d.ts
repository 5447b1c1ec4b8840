/// <reference path="./cohort-job-types.d.ts" />
declare module 'cohort:job/host@0.2.0' {
  /**
   * Appends one line to the job's log. Logs are bounded per job: past the
   * limit, lines are dropped and the log ends with a truncation marker.
   */
  export function log(level: Level, message: string): void;
  /**
   * Reports how far the job has come: `fraction` in [0, 1] (clamped), and
   * a short message. Only the latest report is kept.
   */
  export function progress(fraction: number, message: string): void;
  /**
   * Saves `state` as this job's checkpoint, replacing any earlier one. If
   * the attempt is lost (worker death, timeout), the next attempt can
   * resume from it. A checkpoint larger than the host's limit stops the
   * job with the error code `checkpoint_too_large`.
   */
  export function checkpoint(state: Uint8Array): void;
  /**
   * The last checkpoint saved by an earlier attempt of this job, if any.
   */
  export function resumeState(): Uint8Array | undefined;
  /**
   * The value of secret `name`, if the operator let this job's
   * deployment name read it (`cohort grant NAME --secret SECRET`); none
   * otherwise. Its value is masked wherever the job's log, progress and
   * failure show it. A secret a grant only sets as a header is never
   * readable.
   */
  export function secret(name: string): string | undefined;
  export type Level = import('cohort:job/types@0.2.0').Level;
}
