/// <reference path="./interfaces/cohort-job-host.d.ts" />
/// <reference path="./interfaces/cohort-job-types.d.ts" />
declare module 'cohort:job/job@0.1.0' {
  export type JobError = import('cohort:job/types@0.1.0').JobError;
  export type * as CohortJobHost010 from 'cohort:job/host@0.1.0'; // import cohort:job/host@0.1.0
  export type * as CohortJobTypes010 from 'cohort:job/types@0.1.0'; // import cohort:job/types@0.1.0
  /**
  * Runs the job on `input`, returning its output or a job error.
  */
  export function run(input: Uint8Array): Uint8Array;
}
