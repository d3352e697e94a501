#!/usr/bin/env bash
# Where the main job's CPU goes, thread by thread, against memcached -t 1 — the bound on
# its closed-loop throughput when everything runs on one CPU.
#
# Each round, alternated: memcached `-t 1`, then `ebb run --mem 1536M memcached -- -t 1`
# (one vCPU, the published port through the forwards in the monitor), each pinned to
# CPU 1 (`taskset -c 1`: the monitor's vCPU and device threads inherit it), driven by
# memcaslap on CPU 0 (32 concurrencies, one thread, closed loop, DURATION). For each
# thread of the server: user and system CPU time over the run, per request
# (memcaslap's op count), from /proc/PID/task/TID/stat.
#
# Closed loop at the limit, CPU 1 is busy all the time, so requests per second is
# 1 / (CPU time per request summed over the server's threads). The device thread does
# the same socket work as memcached (one recv, one send per request, on kernel TCP)
# plus the frames to and from the guest: its time alone bounds the ratio to memcached
# from above, whatever the guest costs.
#
# Usage: bench/scripts/main-job-threads.sh  (KVM; env: ROUNDS=5 DURATION=4
#        OUT=bench/results/skeptic/DATE-threads CARGO_TARGET_DIR=...)
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-4}
OUT=${OUT:-/tmp/main-job-threads}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
MC_PORT=${MC_PORT:-22121}
MAIN_PORT=${MAIN_PORT:-22122}

skip() { echo "SKIPPED: main-job-threads: $1"; exit 0; }
[[ -w /dev/kvm ]] || skip "needs /dev/kvm"
for t in memcached memcaslap taskset; do command -v "$t" >/dev/null || skip "$t is not installed"; done
[[ $(nproc) -ge 2 ]] || skip "needs two CPUs (server on CPU 1, client on CPU 0)"

(cd "$ROOT" && cargo build --release -q -p ebb-cli)
EBB=$TARGET/release/ebb
mkdir -p "$OUT"
CSV=$OUT/threads.csv
echo "round,server,thread,user_ticks,sys_ticks,ops,seconds" >"$CSV"
HZ=$(getconf CLK_TCK)

# Per-thread "comm user sys" for every thread of PID.
snap() { for t in /proc/"$1"/task/*; do echo "$(cat "$t"/comm) $(awk '{print $14, $15}' "$t"/stat)"; done; }

# Drives PORT for DURATION seconds; prints the op count.
drive() {
  taskset -c 0 memcaslap -s 127.0.0.1:"$1" -t "${DURATION}s" -c 32 -T 1 2>&1 |
    awk '/Run time/ && /Ops/ { for (i = 1; i <= NF; i++) if ($i == "Ops:") ops = $(i + 1) } END { print ops + 0 }'
}

measure() { # round server pid port
  local before after ops
  before=$(snap "$3")
  ops=$(drive "$4")
  after=$(snap "$3")
  paste <(echo "$before") <(echo "$after") |
    awk -v r="$1" -v s="$2" -v ops="$ops" -v d="$DURATION" \
      '{ u[$1] += $5 - $2; y[$1] += $6 - $3 } END { for (c in u) printf "%s,%s,%s,%d,%d,%d,%s\n", r, s, c, u[c], y[c], ops, d }' >>"$CSV"
}

for r in $(seq "$ROUNDS"); do
  taskset -c 1 memcached -u "$(id -un)" -p "$MC_PORT" -U 0 -t 1 -m 1024 -l 127.0.0.1 &
  P=$!
  sleep 1
  measure "$r" memcached "$P" "$MC_PORT"
  kill "$P"; wait "$P" 2>/dev/null || true

  LOG=$OUT/main-$r.log
  taskset -c 1 "$EBB" run --mem 1536M -p 127.0.0.1:"$MAIN_PORT":11211 memcached -- -t 1 >"$LOG" 2>&1 &
  P=$!
  for _ in $(seq 300); do grep -q listening "$LOG" && break; sleep 0.1; done
  E=$(pgrep -x ebb -P "$P" || echo "$P")
  sleep 0.5
  measure "$r" main "$E" "$MAIN_PORT"
  kill "$P" 2>/dev/null; wait "$P" 2>/dev/null || true
  sleep 0.5
  echo "main-job-threads: round $r of $ROUNDS done" >&2
done

# Per round: req/s and µs of CPU per request, per thread and in all; then medians
# [min-max] over rounds.
awk -F, -v hz="$HZ" '
  NR == 1 { next }
  { us = 1e6 / hz / ($6 > 0 ? $6 : 1)
    key = $1 "," $2
    ops[key] = $6; secs[key] = $7
    t[key "," $3 ",user"] += $4 * us; t[key "," $3 ",sys"] += $5 * us
    all[key] += ($4 + $5) * us
    if ($2 == "main" && $3 != "kvm-nx-lpage-re") threads[$3] = 1
    rounds[$1] = 1 }
  function med(a, n, f,   i, j, x) {
    if (f == "") f = "%.1f"
    for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return sprintf(f " [" f "-" f "]", (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2, a[1], a[n])
  }
  END {
    n = 0; for (r in rounds) n++
    split("", a); i = 0; for (r in rounds) a[++i] = ops[r ",memcached"] / secs[r ",memcached"] / 1000
    printf "memcached -t 1: %s k req/s\n", med(a, n)
    split("", a); i = 0; for (r in rounds) a[++i] = all[r ",memcached"]
    printf "  CPU per request, all threads: %s us\n", med(a, n)
    split("", a); i = 0; for (r in rounds) a[++i] = ops[r ",main"] / secs[r ",main"] / 1000
    printf "main job: %s k req/s\n", med(a, n)
    split("", a); i = 0; for (r in rounds) a[++i] = ops[r ",main"] / ops[r ",memcached"]
    printf "  ratio to memcached (same round): %s\n", med(a, n, "%.2f")
    split("", a); i = 0; for (r in rounds) a[++i] = all[r ",main"]
    printf "  CPU per request, all threads: %s us\n", med(a, n)
    for (th in threads) for (k = 1; k <= 2; k++) {
      kind = (k == 1) ? "user" : "sys"
      split("", a); i = 0; for (r in rounds) a[++i] = t[r ",main," th "," kind]
      printf "  %-12s %-4s %s us\n", th, kind, med(a, n)
    }
    split("", a); i = 0; for (r in rounds) a[++i] = t[r ",memcached,mc-worker,user"] + t[r ",memcached,mc-worker,sys"]
    split("", b); i = 0; for (r in rounds) b[++i] = t[r ",main,virtio-net,user"] + t[r ",main,virtio-net,sys"]
    split("", c); i = 0; for (r in rounds) c[++i] = all[r ",memcached"] / (t[r ",main,virtio-net,user"] + t[r ",main,virtio-net,sys"])
    printf "memcached worker: %s us; the device thread alone: %s us\n", med(a, n), med(b, n)
    printf "ceiling with a guest that costs nothing (memcached all / device thread): %s\n", med(c, n, "%.2f")
  }' "$CSV" | tee "$OUT/summary.txt"
