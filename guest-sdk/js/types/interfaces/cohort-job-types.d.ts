declare module 'cohort:job/types@0.2.0' {
  /**
   * Why a job failed, as told by the job itself.
   */
  export interface JobError {
    /**
     * A short machine-readable code chosen by the job author,
     * e.g. `bad-input`.
     */
    code: string,
    /**
     * A human-readable explanation.
     */
    message: string,
  }
  /**
   * Severity of a log line.
   * # Variants
   * 
   * ## `"trace"`
   * 
   * ## `"debug"`
   * 
   * ## `"info"`
   * 
   * ## `"warn"`
   * 
   * ## `"error"`
   */
  export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
}
