#!/usr/bin/env bash
# Hosted Ebbflow memcached (apps/memcached, Linux sockets, one core) against memcached
# 1.6 (Debian's, `-t 1`), in the same run, driven by bench's mc-load in closed loop:
# CONNS connections, one request in flight each, ETC workload (keys 20-70 B, values
# 1-1024 B, 30:1 gets to sets, Zipf 0.99) over KEYS keys, preloaded; req/s, p50/p99, and
# the server's CPU time per request (/proc/PID/stat over the measured window).
#
# Throughput within a p99 objective is memcached-skeptic.sh's: one offered-load grid for
# both servers, several rounds, three clients. The open-loop sweep this script had
# (SWEEP=1: one sweep per server, each on its own grid from its own closed-loop peak,
# credited with its best passing point even above failing ones) is gone with issue 23.
#
# Each server runs pinned to CPU 0 (taskset), started fresh for each run and alternated
# run by run (ROUNDS); mc-load runs pinned to CPU 1. Both servers: 1024 MB, 1024
# connections. Summary: median [min-max] per figure and the ratio of medians, with a
# verdict "parity" when the ranges overlap. Raw output in OUT_DIR.
#
# Usage: bench/scripts/memcached-compare.sh   (env: ROUNDS=3 CONNS=32 KEYS=100000
#        DURATION=3s OUT_DIR=/tmp/memcached-compare CARGO_TARGET_DIR=...)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
KEYS=${KEYS:-100000}
DURATION=${DURATION:-3s}
OUT_DIR=${OUT_DIR:-/tmp/memcached-compare}
[[ ${SWEEP:-0} == 0 ]] || { echo "memcached-compare: SWEEP is gone: use bench/scripts/memcached-skeptic.sh" >&2; exit 2; }

die() { echo "memcached-compare: error: $*" >&2; exit 1; }
for t in memcached taskset; do
  command -v "$t" >/dev/null || { echo "SKIPPED: memcached-compare: $t is not installed"; exit 0; }
done
(($(nproc) >= 2)) || die "needs 2 CPUs"

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
target=${CARGO_TARGET_DIR:-$PWD/target}
# Two builds: `-p memcached -p ebb-bench --bin mc-load` would build mc-load alone.
cargo build --release -q -p memcached
cargo build --release -q -p ebb-bench --bin mc-load
ebb_mc=$target/release/memcached
load=$target/release/mc-load
mkdir -p "$OUT_DIR"
# shellcheck source=bench/lib.sh
source bench/lib.sh
RUN_ID=0

SERVER_PID=""
trap stop EXIT


# serve NAME: starts the server on CPU 0 on a free port; sets SERVER_PID and PORT
serve() {
  PORT=$(free_port)
  local log=$OUT_DIR/server-$1-$RUN_ID.log
  case $1 in
    ebb) EBB_CPUS=1 taskset -c 0 "$ebb_mc" -p "$PORT" -m 1024 -c 1024 -t 1 >"$log" 2>&1 & ;;
    memcached)
      local user=()
      [[ $(id -u) == 0 ]] && user=(-u nobody)
      taskset -c 0 memcached -l 127.0.0.1 -p "$PORT" -U 0 -t 1 -m 1024 -c 1024 "${user[@]}" >"$log" 2>&1 &
      ;;
  esac
  SERVER_PID=$!
  local i
  for ((i = 0; i < 100; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
    sleep 0.05
  done
  cat "$log" >&2
  die "$1 did not start"
}

common=(--pin-core 1 --conns "$CONNS" --workload etc --keys "$KEYS")

echo "# memcached-compare: $ROUNDS rounds, $CONNS connections, ETC over $KEYS keys, $DURATION windows"
: >"$OUT_DIR/closed.txt"
for ((round = 1; round <= ROUNDS; round++)); do
  if ((round % 2)); then order=(ebb memcached); else order=(memcached ebb); fi
  for name in "${order[@]}"; do
    RUN_ID="$round-$name"
    serve "$name"
    mc_closed_loop "$name" "$SERVER_PID" "$DURATION" "$load" --addr "127.0.0.1:$PORT" "${common[@]}"
    stop
  done
done

mc_summary ebb memcached "server CPU µs/req"

