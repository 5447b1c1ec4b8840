// Resolves the component imports the SDK names (`cohort:job/host@...`) to
// the stub beside this file, so the SDK runs under plain Node.js.
export async function resolve(specifier, context, next) {
  if (specifier.startsWith("cohort:job/host")) {
    return { url: new URL("./host-stub.js", import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
