#!/usr/bin/env bash
# Hoard threadtest: Ebbflow's allocator against glibc, jemalloc and mimalloc, same run.
# Usage: bench/threadtest.sh [REPEATS] [RAW_OUT]
# Each repeat runs every (config, threads, allocator) once, allocators rotated, so slow
# drifts in background load hit all of them alike. Prints medians and min–max.
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=${1:-5}
RAW=${2:-bench/results/threadtest-raw.txt}
ALLOCS=(ebb glibc jemalloc mimalloc)
# "N I": Hoard's two configurations, unscaled (every run here takes well under 20 s).
CONFIGS=("100000 1000" "100 1000000")
cargo build --release -q -p ebb-bench --features tikv-jemallocator,mimalloc \
  --bin threadtest-ebb --bin threadtest-glibc --bin threadtest-jemalloc --bin threadtest-mimalloc
: > "$RAW"
for rep in $(seq 1 "$REPEATS"); do
  for cfg in "${CONFIGS[@]}"; do
    read -r n i <<< "$cfg"
    for t in 1 2; do
      for k in 0 1 2 3; do
        a=${ALLOCS[$(( (k + rep) % 4 ))]}
        echo "rep=$rep load=$(cut -d' ' -f1 /proc/loadavg) $(./target/release/threadtest-$a -t "$t" -n "$n" -i "$i")" | tee -a "$RAW"
      done
    done
  done
done
python3 - "$RAW" <<'PY'
import sys, re, statistics, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = dict(kv.split("=") for kv in line.split())
    runs[(int(f["objects"]), int(f["iterations"]), int(f["threads"]), f["allocator"])].append(float(f["seconds"]))
print("| N | i | threads | allocator | median s | min–max s | runs |")
print("|---|---|---|---|---|---|---|")
for key in sorted(runs, key=lambda k: (-k[0], k[2], k[3])):
    v = runs[key]
    print(f"| {key[0]:,} | {key[1]:,} | {key[2]} | {key[3]} | {statistics.median(v):.3f} | {min(v):.3f}–{max(v):.3f} | {len(v)} |")
PY
