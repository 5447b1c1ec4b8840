// cohort-job: `fetch` for a job that calls out.
//
// `cohort build` bundles this module first (esbuild --inject) into a job
// whose code names `fetch`, and builds the component with the engine's
// HTTP support: the job's `fetch` is StarlingMonkey's, over the standard
// wasi:http/outgoing-handler, and a cohort node sends each request only as
// the operator granted the job's deployment name (`cohort grant NAME --http
// URL`).
//
// The engine rejects every failed call with the same bare
// `TypeError: NetworkError when attempting to fetch resource`. This wraps
// the engine's fetch to say which call failed (its method and origin, never
// the path or query, which may hold a secret) and where to find why: the
// node writes the reason of each refused or failed call to the job's log
// (`[cohort] egress_denied: POST https://api.example.com is not granted to
// this job`) and records it with the attempt. The original error is the
// new one's `cause`; other errors pass through unchanged.

const engineFetch = globalThis.fetch;

/** Methods fetch upper-cases (the Fetch standard's "normalize"). */
const NORMALIZED = ["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"];

/**
 * `METHOD origin` of a fetch call, as far as it can be told.
 *
 * @param {unknown} input
 * @param {{ method?: unknown } | undefined} init
 */
function describeCall(input, init) {
  let method = "GET";
  let url = "";
  try {
    if (typeof Request === "function" && input instanceof Request) {
      method = input.method;
      url = input.url;
    } else {
      url = input instanceof URL ? input.href : String(input);
    }
    if (init != null && init.method !== undefined) {
      method = String(init.method);
      if (NORMALIZED.includes(method.toUpperCase())) {
        method = method.toUpperCase();
      }
    }
    return `${method} ${new URL(url).origin}`;
  } catch {
    return method;
  }
}

// A method, so that the function is named `fetch` whatever esbuild renames.
globalThis.fetch = {
  async fetch(input, init) {
    try {
      return await engineFetch(input, init);
    } catch (error) {
      if (error instanceof TypeError && /NetworkError/.test(error.message)) {
        throw new TypeError(
          `fetch ${describeCall(input, init)} failed: the node did not allow the call or could ` +
            "not complete it; the job's log says why (e.g. `egress_denied: ... is not granted " +
            "to this job`: no grant of the job's deployment name covers the call)",
          { cause: error },
        );
      }
      throw error;
    }
  },
}.fetch;
