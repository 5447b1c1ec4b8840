// Resolves the component imports the SDK names (`cohort:job/host@...`,
// `cohort:job/blobs@...`) to the stubs beside this file, so the SDK runs
// under plain Node.js.
const STUBS = {
  "cohort:job/host": "./host-stub.js",
  "cohort:job/blobs": "./blobs-stub.js",
};

export async function resolve(specifier, context, next) {
  const stub = STUBS[specifier.split("@")[0]];
  if (stub !== undefined) {
    return { url: new URL(stub, import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
