#!/usr/bin/env bash
# ebb-net on one TAP queue (one core) against two queues (two cores), in the same run:
# apps/sink --echo over TAP with --queues 1 and --queues 2, loaded by bench's echo-load
# (CONNS connections, one 64-byte request in flight each) from a network namespace.
# Rows alternate; each server is started for its run and stopped after it.
#
# On a 2-vCPU machine the load generator shares a CPU with the second queue's core, so
# this shows the cost of steering and of the second core's contention, not scaling.
#
# Usage: bench/scripts/net-queues.sh   (env: ROUNDS=3 CONNS=32 SECONDS_PER_RUN=4
#        CARGO_TARGET_DIR=...). Needs root; prints SKIPPED otherwise.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-4}

skip() {
  echo "SKIPPED: net-queues: $1"
  exit 0
}
[[ $(id -u) -eq 0 ]] || skip "needs root (TAP devices, network namespaces)"
[[ -c /dev/net/tun ]] || skip "no /dev/net/tun"
for tool in ip cargo python3; do
  command -v "$tool" >/dev/null || skip "\`$tool\` is not installed"
done

repo="$(cd "$(dirname "$0")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}"
(cd "$repo" && cargo build --release -q -p sink && cargo build --release -q -p ebb-bench --bin echo-load)
sink="$target/release/sink"
load="$target/release/echo-load"

ns="ebbqueues$$"
dev="ebq$$"
ip netns add "$ns"
server=""
cleanup() {
  [[ -n "$server" ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT

results=$(mktemp)
for round in $(seq 1 "$ROUNDS"); do
  for queues in 1 2; do
    "$sink" --echo --port 7000 --tap "$dev" --ip 10.79.0.2/24 --queues "$queues" >/dev/null 2>&1 &
    server=$!
    for _ in $(seq 1 50); do ip link show "$dev" >/dev/null 2>&1 && break; sleep 0.1; done
    ip link set "$dev" netns "$ns"
    ip -n "$ns" addr add 10.79.0.1/24 dev "$dev"
    ip -n "$ns" link set "$dev" up
    sleep 0.3
    json=$(ip netns exec "$ns" "$load" --addr 10.79.0.2:7000 --conns "$CONNS" --size 64 \
      --duration "${SECONDS_PER_RUN}s" --warmup 1s | tail -1)
    echo "round $round queues $queues $json"
    echo "$queues $json" >>"$results"
    kill "$server"
    wait "$server" 2>/dev/null || true
    server=""
  done
done

python3 - "$results" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    q, js = line.split(" ", 1)
    rows.setdefault(q, []).append(json.loads(js))
for q in sorted(rows):
    rps = [r["rps"] for r in rows[q]]
    p50 = [r["p50_us"] for r in rows[q]]
    p99 = [r["p99_us"] for r in rows[q]]
    print(f"queues {q}: rps median {statistics.median(rps):,.0f} (min {min(rps):,.0f}, max {max(rps):,.0f}); "
          f"p50 {statistics.median(p50):.0f} us; p99 {statistics.median(p99):.0f} us")
if "1" in rows and "2" in rows:
    r = statistics.median(x["rps"] for x in rows["2"]) / statistics.median(x["rps"] for x in rows["1"])
    print(f"two queues / one queue, median rps: {r:.2f}")
PY
rm -f "$results"
