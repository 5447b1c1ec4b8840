#!/usr/bin/env bash
# Side-by-side benchmark: the same "submit N one by one, then wait for all"
# Python program (loop.py) with Celery's own client on Redis and with cohort's
# Python client on one cohort node and on three. See README.md.
#
#   clients/bench/run.sh
#
# Environment (all optional):
#   BENCH_NS="5000 50000"   job counts to run
#   BENCH_VENV=/tmp/cohort-bench-venv
#   BENCH_PYTHON=python3    interpreter the venv is made with (3.11 is what requirements.txt pins for)
#   BENCH_TIMEOUT=600       seconds one run of loop.py may take
#   BENCH_WARMUP=200        untimed jobs run once per system before its timed runs (0: none)
#   COHORT_BIN              default: target/release/cohort of this repo
#   COHORT_ECHO_WASM        default: target/wasm-guests/wasm32-wasip2/release/fixture_echo.wasm
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
COHORT_BIN=${COHORT_BIN:-$REPO/target/release/cohort}
COHORT_ECHO_WASM=${COHORT_ECHO_WASM:-$REPO/target/wasm-guests/wasm32-wasip2/release/fixture_echo.wasm}
BENCH_NS=${BENCH_NS:-5000 50000}
BENCH_VENV=${BENCH_VENV:-/tmp/cohort-bench-venv}
BENCH_PYTHON=${BENCH_PYTHON:-python3}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-600}
BENCH_WARMUP=${BENCH_WARMUP:-200}

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ -x $COHORT_BIN ]] || die "no cohort binary at $COHORT_BIN (cargo build --release, or set COHORT_BIN)"
[[ -f $COHORT_ECHO_WASM ]] || die "no echo component at $COHORT_ECHO_WASM (cargo build builds it, or set COHORT_ECHO_WASM)"
COHORT_BIN=$(cd "$(dirname "$COHORT_BIN")" && pwd)/$(basename "$COHORT_BIN")
COHORT_ECHO_WASM=$(cd "$(dirname "$COHORT_ECHO_WASM")" && pwd)/$(basename "$COHORT_ECHO_WASM")
cd "$HERE" # celery -A tasks imports tasks.py from the working directory

WORK=$(mktemp -d /tmp/cohort-bench.XXXXXX)
PIDS=()

alive() { # pid: running (not gone, not a zombie)
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    [[ $stat != *") Z "* ]]
}

stop() { # pid...: SIGTERM each one's process group, wait up to 20 s, then SIGKILL
    local pid i
    for pid in "$@"; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "$@"; do
        for ((i = 0; i < 200; i++)); do alive "$pid" || break; sleep 0.1; done
        if alive "$pid"; then
            log "pid $pid did not stop in 20 s: SIGKILL"
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
    local keep=() p
    for p in "${PIDS[@]}"; do
        for pid in "$@"; do [[ $p == "$pid" ]] && continue 2; done
        keep+=("$p")
    done
    PIDS=("${keep[@]}")
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    ((${#PIDS[@]} == 0)) || stop "${PIDS[@]}"
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts a command in its own session (so stop() reaches its children, e.g.
# Celery's pool processes) with stdout and stderr to files; sets STARTED.
start() { # out err cmd...
    local out=$1 err=$2
    shift 2
    setsid "$@" >"$out" 2>"$err" </dev/null &
    STARTED=$!
    PIDS+=("$STARTED")
}

# ---------------------------------------------------------------- installs
if ! command -v redis-server >/dev/null; then
    log "installing redis-server (Debian)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
VPY=$BENCH_VENV/bin/python
if ! "$VPY" -c 'import celery, redis, cohort_client' 2>/dev/null; then
    log "making the venv $BENCH_VENV"
    [[ -x $VPY ]] || "$BENCH_PYTHON" -m venv "$BENCH_VENV"
    "$VPY" -m pip install -q --require-hashes -r "$HERE/requirements.txt"
    # Built from a copy so the checkout gets no build/ or egg-info; its one
    # dependency (httpx) and the build back-end come hashed from requirements.txt.
    cp -r "$REPO/clients/python" "$WORK/pyclient"
    rm -rf "$WORK/pyclient/build" "$WORK"/pyclient/*.egg-info
    "$VPY" -m pip install -q --no-deps --no-build-isolation "$WORK/pyclient"
    rm -rf "$WORK/pyclient"
fi
"$VPY" -m pip check >/dev/null || die "pip check failed in $BENCH_VENV"

free_port() {
    "$VPY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

RESULTS=$WORK/results.jsonl
: >"$RESULTS"
FAILED=0

# run_loop LABEL ARGS...: one timed run of loop.py, its JSON line kept.
run_loop() {
    local label=$1 rc=0
    shift
    log "$label"
    timeout "$BENCH_TIMEOUT" "$VPY" "$HERE/loop.py" "$@" >"$WORK/run.out" || rc=$?
    if ((rc != 0)); then
        log "FAILED ($label): exit $rc$( ((rc == 124)) && echo ", over BENCH_TIMEOUT=${BENCH_TIMEOUT}s")"
        FAILED=1
        return 0
    fi
    cat "$WORK/run.out" >&2
    tail -n 1 "$WORK/run.out" >>"$RESULTS"
}

warm_up() { # ARGS... of loop.py without N
    local system=$1
    shift
    ((BENCH_WARMUP > 0)) || return 0
    log "warm-up: $system, $BENCH_WARMUP jobs (not counted)"
    local rc=0
    timeout "$BENCH_TIMEOUT" "$VPY" "$HERE/loop.py" "$system" "$BENCH_WARMUP" "$@" >/dev/null || rc=$?
    if ((rc != 0)); then
        log "FAILED (warm-up of $system): exit $rc; skipping its runs"
        FAILED=1
        return 1
    fi
}

# ---------------------------------------------------------------- Celery on Redis
celery_phase() {
    local port
    port=$(free_port)
    mkdir -p "$WORK/redis"
    start "$WORK/redis/out" "$WORK/redis/err" \
        redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK/redis"
    local redis_pid=$STARTED
    export REDIS_URL="redis://127.0.0.1:$port/0"
    local i
    for ((i = 0; i < 100; i++)); do
        "$VPY" -c "import redis; redis.Redis(port=$port).ping()" 2>/dev/null && break
        alive "$redis_pid" || { cat "$WORK/redis/out" "$WORK/redis/err" >&2; die "redis-server exited"; }
        sleep 0.1
    done
    ((i < 100)) || die "redis-server did not answer on port $port"
    log "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on 127.0.0.1:$port (no RDB, no AOF)"

    # Prefork pool, 2 processes: the machine's core count, Celery's own
    # default for --concurrency (os.cpu_count()), and its default pool.
    start "$WORK/celery.out" "$WORK/celery.err" \
        "$BENCH_VENV/bin/celery" -A tasks worker --pool prefork --concurrency 2 \
        --loglevel warning --hostname "bench@%h"
    local worker_pid=$STARTED
    for ((i = 0; i < 60; i++)); do
        "$BENCH_VENV/bin/celery" -A tasks inspect ping --timeout 1 >/dev/null 2>&1 && break
        alive "$worker_pid" || { cat "$WORK/celery.err" >&2; die "celery worker exited"; }
    done
    ((i < 60)) || { cat "$WORK/celery.err" >&2; die "celery worker did not answer a ping in 60 tries"; }
    log "celery $("$VPY" -c 'import celery; print(celery.__version__)') worker ready (prefork, concurrency 2)"

    if warm_up celery; then
        for n in $BENCH_NS; do run_loop "celery, N=$n" celery "$n"; done
    fi
    stop "$worker_pid"
    stop "$redis_pid"
    unset REDIS_URL
}

# ---------------------------------------------------------------- cohort
# start_node DIR ID [--seed ADDR]: sets NODE_URL, NODE_GOSSIP, STARTED.
start_node() {
    local dir=$1 id=$2
    shift 2
    mkdir -p "$dir"
    start "$dir/$id.out" "$dir/$id.err" \
        "$COHORT_BIN" node --listen 127.0.0.1:0 --data-dir "$dir/$id" --node-id "$id" "$@"
    local pid=$STARTED line="" i
    for ((i = 0; i < 300; i++)); do
        line=$(grep -m1 'listening on http://' "$dir/$id.out" 2>/dev/null || true)
        [[ -n $line ]] && break
        alive "$pid" || { cat "$dir/$id.err" >&2; die "cohort node $id exited"; }
        sleep 0.1
    done
    [[ -n $line ]] || die "cohort node $id printed no address in 30 s"
    NODE_URL=${line##*listening on }
    NODE_GOSSIP=$(sed -n 's/.* gossiping on \([^,]*\), listening on .*/\1/p' <<<"$line")
    [[ -n $NODE_GOSSIP ]] || die "no gossip address in: $line"
    log "cohort node $id: $NODE_URL (gossip $NODE_GOSSIP)"
}

# wait_cluster NODES URL...: every URL shows a master, NODES workers and NODES voters.
wait_cluster() {
    "$VPY" - "$@" <<'EOF'
import json, sys, time, urllib.request
want, urls = int(sys.argv[1]), sys.argv[2:]
deadline = time.monotonic() + 60
last = {}
while time.monotonic() < deadline:
    ok = True
    for url in urls:
        try:
            with urllib.request.urlopen(url + "/v1/cluster", timeout=2) as r:
                c = json.load(r)
        except Exception as e:
            last[url] = repr(e)
            ok = False
            continue
        last[url] = {k: c.get(k) for k in ("master_node", "voters")} | {"workers": len(c.get("workers") or [])}
        if not (c.get("master_node") and len(c.get("workers") or []) >= want and len(c.get("voters") or []) >= want):
            ok = False
    if ok:
        sys.exit(0)
    time.sleep(0.2)
print("cluster not ready in 60 s:", json.dumps(last), file=sys.stderr)
sys.exit(1)
EOF
}

cohort_phase() {
    local nodes=$1 dir=$WORK/cohort$1 urls=() pids=() seed
    start_node "$dir" b1
    urls+=("$NODE_URL")
    pids+=("$STARTED")
    seed=$NODE_GOSSIP
    local k
    for ((k = 2; k <= nodes; k++)); do
        start_node "$dir" "b$k" --seed "$seed"
        urls+=("$NODE_URL")
        pids+=("$STARTED")
    done
    wait_cluster "$nodes" "${urls[@]}" || die "cohort cluster of $nodes not ready"
    log "cohort cluster of $nodes ready ($("$COHORT_BIN" --version 2>/dev/null || echo cohort), default slots)"
    local joined
    joined=$(IFS=,; echo "${urls[*]}")
    if warm_up cohort "$joined" "$COHORT_ECHO_WASM"; then
        for n in $BENCH_NS; do run_loop "cohort, $nodes node(s), N=$n" cohort "$n" "$joined" "$COHORT_ECHO_WASM"; done
    fi
    stop "${pids[@]}"
    rm -rf "$dir"
}

log "nproc $(nproc); N: $BENCH_NS; venv $BENCH_VENV; cohort $COHORT_BIN"
# One system at a time on the machine: each phase starts its processes, runs
# every N, and stops them before the next phase starts.
celery_phase
cohort_phase 1
cohort_phase 3

# ---------------------------------------------------------------- table
"$VPY" - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
order = {("celery", 1): 0, ("cohort", 1): 1, ("cohort", 3): 2}
rows.sort(key=lambda r: (r["n"], order.get((r["system"], r["nodes"]), 9)))
name = {"celery": "Celery 5 + Redis (prefork, concurrency 2)", "cohort": "cohort (Python client)"}
print("| system | nodes | N | seconds | jobs/s |")
print("|---|---:|---:|---:|---:|")
for r in rows:
    print(f"| {name[r['system']]} | {r['nodes']} | {r['n']:,} | {r['seconds']:.2f} | {r['jobs_per_s']:,.0f} |")
print()
by = {(r["system"], r["nodes"], r["n"]): r for r in rows}
for n in sorted({r["n"] for r in rows}):
    c = by.get(("celery", 1, n))
    for nodes in (3, 1):
        k = by.get(("cohort", nodes, n))
        if c and k:
            print(f"N = {n:,}: cohort {nodes} node{'s' if nodes > 1 else ''} / Celery = "
                  f"{k['jobs_per_s'] / c['jobs_per_s']:.1f}x")
EOF
((FAILED == 0)) || die "some runs failed (see above)"
