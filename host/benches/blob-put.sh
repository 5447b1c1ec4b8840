#!/usr/bin/env bash
# One upload timed from outside, for farm-bench's paired runs: starts a
# fresh node (NODE, default target/release/cohort) on a loopback port with
# a data directory beside FILE, uploads FILE with `CLI blob put` (as a
# file, or `- < FILE` with MODE=stdin), and stops the node.
#
#   farm-bench -n 8 --timeout 800 --vs 'host/benches/blob-put.sh /tmp/cohort-before big.bin' \
#       -- host/benches/blob-put.sh target/release/cohort big.bin
set -euo pipefail
cli=$1
file=$2
node=${NODE:-target/release/cohort}
dir=$(mktemp -d "$(dirname "$file")/blob-put-node.XXXXXX")
"$node" node --listen 127.0.0.1:0 --data-dir "$dir" > "$dir/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
url=
for _ in $(seq 200); do
    url=$(grep -o "http://127.0.0.1:[0-9]*" "$dir/log" | head -1 || true)
    if [ -n "$url" ] && curl -sf "$url/healthz" > /dev/null; then break; fi
    sleep 0.05
done
[ -n "$url" ] || { echo "the node did not start: $(cat "$dir/log")" >&2; exit 1; }
sync
if [ "${MODE:-file}" = stdin ]; then
    "$cli" blob put --server "$url" - < "$file" > /dev/null
else
    "$cli" blob put --server "$url" "$file" > /dev/null
fi
