/// <reference path="./wasi-io-streams.d.ts" />
declare module 'cohort:job/blobs@0.2.0' {
  /**
   * The blobs this job may read, in a stable order (`input` first).
   */
  export function inputs(): Array<Blob>;
  /**
   * Opens the input blob `name` for reading from byte `offset` (0: its
   * start; a job resuming from a checkpoint may start where it stopped).
   * The stream ends at the blob's end. An error says why it cannot be
   * opened: no input of that name, or an offset past its end.
   */
  export function open(name: string, offset: bigint): InputStream;
  /**
   * Creates the output blob `name` (1 to 128 bytes of ASCII letters,
   * digits, `.`, `_` and `-`, not starting with `.`), and returns the
   * stream its bytes are written to. Creating a name again starts that
   * output over. When the attempt succeeds, each output is kept as a blob, durable on a
   * majority of the back-end nodes before the job is reported done, and
   * listed with the job's result by name, digest and size; a failed
   * attempt's outputs are discarded. A write past the job's output
   * ceiling (`--blob-bytes-max` of its node, over all its outputs)
   * fails, and so does the job (`output_too_large`). An error says why
   * an output cannot be created: a bad name, or more than 64 outputs.
   */
  export function create(name: string): OutputStream;
  export type InputStream = import('wasi:io/streams@0.2.12').InputStream;
  export type OutputStream = import('wasi:io/streams@0.2.12').OutputStream;
  /**
   * A blob this job may read.
   */
  export interface Blob {
    /**
     * Its name for this job: `input` for the job's `input_blob`;
     * `PARENT/OUTPUT` for the output `OUTPUT` of DAG parent `PARENT`
     * (the parent's name in the DAG).
     */
    name: string,
    /**
     * Its sha256, 64 lowercase hex digits, as the HTTP API writes it.
     */
    digest: string,
    /**
     * Its size in bytes.
     */
    size: bigint,
  }
}
