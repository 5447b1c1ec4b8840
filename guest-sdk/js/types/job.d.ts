/// <reference path="./interfaces/cohort-job-blobs.d.ts" />
/// <reference path="./interfaces/cohort-job-host.d.ts" />
/// <reference path="./interfaces/cohort-job-types.d.ts" />
/// <reference path="./interfaces/wasi-io-error.d.ts" />
/// <reference path="./interfaces/wasi-io-poll.d.ts" />
/// <reference path="./interfaces/wasi-io-streams.d.ts" />
declare module 'cohort:job/job@0.2.0' {
  export type JobError = import('cohort:job/types@0.2.0').JobError;
  export type * as CohortJobBlobs020 from 'cohort:job/blobs@0.2.0'; // import cohort:job/blobs@0.2.0
  export type * as CohortJobHost020 from 'cohort:job/host@0.2.0'; // import cohort:job/host@0.2.0
  export type * as CohortJobTypes020 from 'cohort:job/types@0.2.0'; // import cohort:job/types@0.2.0
  export type * as WasiIoError0212 from 'wasi:io/error@0.2.12'; // import wasi:io/error@0.2.12
  export type * as WasiIoPoll0212 from 'wasi:io/poll@0.2.12'; // import wasi:io/poll@0.2.12
  export type * as WasiIoStreams0212 from 'wasi:io/streams@0.2.12'; // import wasi:io/streams@0.2.12
  /**
  * Runs the job on `input`, returning its output or a job error.
  */
  export function run(input: Uint8Array): Uint8Array;
}
