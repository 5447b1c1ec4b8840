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
