#!/usr/bin/env bash
# Hosted Ebbflow memcached with the system allocator (glibc malloc; built with
# `--no-default-features`) against the same server with ebb-mem's per-core slab allocator
# as its global allocator (the default `ebb-allocator` feature; what a native image always
# uses), in the same run, driven by
# bench's mc-load in closed loop on the ETC workload (keys 20-70 B, values 1-1024 B, 30:1
# gets to sets, Zipf 0.99, preloaded):
#
#   for each connection count in CONNS_LIST: ROUNDS rounds, the two builds alternated
#   round by round, each started fresh, pinned to CPU 0 (mc-load on CPU 1); req/s,
#   p50/p99 and the server's CPU time per request; median [min-max] and the ratio.
#
# Usage: bench/scripts/memcached-allocator.sh  (env: ROUNDS=5 CONNS_LIST="1 32"
#        KEYS=100000 DURATION=3s OUT_DIR=/tmp/memcached-allocator CARGO_TARGET_DIR=...)
set -euo pipefail

ROUNDS=${ROUNDS:-5}
CONNS_LIST=${CONNS_LIST:-"1 32"}
KEYS=${KEYS:-100000}
DURATION=${DURATION:-3s}
OUT_DIR_BASE=${OUT_DIR:-/tmp/memcached-allocator}

die() { echo "memcached-allocator: error: $*" >&2; exit 1; }
command -v taskset >/dev/null || { echo "SKIPPED: memcached-allocator: taskset is not installed"; exit 0; }
(($(nproc) >= 2)) || die "needs 2 CPUs"

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
target=${CARGO_TARGET_DIR:-$PWD/target}
mkdir -p "$OUT_DIR_BASE"
# Two builds of the same source; the second is copied aside before the first is rebuilt.
cargo build --release -q -p memcached --no-default-features
cp "$target/release/memcached" "$OUT_DIR_BASE/memcached-system"
cargo build --release -q -p memcached
cargo build --release -q -p ebb-bench --bin mc-load
cp "$target/release/memcached" "$OUT_DIR_BASE/memcached-ebb-mem"
load=$target/release/mc-load
# shellcheck source=bench/lib.sh
source bench/lib.sh

SERVER_PID=""
trap stop EXIT

echo "# memcached-allocator: $ROUNDS rounds, ETC over $KEYS keys, $DURATION windows"
for conns in $CONNS_LIST; do
  OUT_DIR=$OUT_DIR_BASE/conns-$conns
  mkdir -p "$OUT_DIR"
  : >"$OUT_DIR/closed.txt"
  echo "## $conns connection(s), one request in flight each"
  for ((round = 1; round <= ROUNDS; round++)); do
    if ((round % 2)); then order=(system ebb-mem); else order=(ebb-mem system); fi
    for name in "${order[@]}"; do
      RUN_ID="$round-$name"
      EBB_CPUS=1 start_server "$name" 0 "$OUT_DIR_BASE/memcached-$name" -p 0 -m 1024 -c 1024 -t 1
      mc_closed_loop "$name" "$SERVER_PID" "$DURATION" "$load" --addr "127.0.0.1:$PORT" \
        --pin-core 1 --conns "$conns" --workload etc --keys "$KEYS"
      stop
    done
  done
  mc_summary ebb-mem system "server CPU µs/req"
done
