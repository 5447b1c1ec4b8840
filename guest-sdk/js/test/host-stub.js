// The `cohort:job/host` interface for the SDK's unit tests under Node.js:
// records what the SDK asks of the host, so tests can look.
export const calls = [];
let saved;

export function log(level, message) {
  calls.push(["log", level, message]);
}

export function progress(fraction, message) {
  calls.push(["progress", fraction, message]);
}

export function checkpoint(state) {
  saved = state;
  calls.push(["checkpoint", state.length]);
}

export function resumeState() {
  return saved;
}

// The secrets a test lets the job read.
export const secrets = new Map();

export function secret(name) {
  calls.push(["secret", name]);
  return secrets.get(name);
}
