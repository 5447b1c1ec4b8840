// cohort-job: `fetch` for a job that does not call out.
//
// `cohort build` bundles this module first (esbuild --inject) into a job
// whose code never names `fetch`, and builds the component without the
// engine's HTTP support, so that it imports no more than such a job needs.
// The engine's fetch would then trap; a job that reaches fetch anyway (by a
// name computed at run time) gets this rejection instead, which it can
// catch.

// A method, so that the function is named `fetch` whatever esbuild renames.
globalThis.fetch = {
  fetch() {
    return Promise.reject(
      new TypeError(
        "fetch: this job was built without HTTP support: `cohort build` adds it when the " +
          "job's code names `fetch` (as in `fetch(url)` or `globalThis.fetch`)",
      ),
    );
  },
}.fetch;
