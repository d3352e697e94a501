#!/usr/bin/env bash
# Hoard threadtest: Ebbflow's allocator against glibc, jemalloc and mimalloc, same run.
# Usage: bench/threadtest.sh [REPEATS] [RAW_OUT]
#        bench/threadtest.sh --summary RAW     (only the tables, from a recorded raw file)
# Each repeat runs every (config, threads, allocator) once, allocators rotated, so slow
# drifts in background load hit all of them alike. Prints medians and min–max.
set -euo pipefail
cd "$(dirname "$0")/.."
SUMMARY_ONLY=0
if [[ ${1:-} == --summary ]]; then SUMMARY_ONLY=1; RAW=$2; else
REPEATS=${1:-5}
RAW=${2:-bench/results/threadtest-raw.txt}
fi
ALLOCS=(ebb glibc jemalloc mimalloc)
# "N I": Hoard's two configurations, unscaled (every run here takes well under 20 s).
CONFIGS=("100000 1000" "100 1000000")
if ((!SUMMARY_ONLY)); then
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
fi
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
# Per repeat: the fastest peer's time over ebb's (above 1: ebb was faster), so the spread
# shows every repeat, not one favourable run.
per_rep = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    f = dict(kv.split("=") for kv in line.split())
    per_rep[(int(f["objects"]), int(f["iterations"]), int(f["threads"]), int(f["rep"]))][f["allocator"]] = float(f["seconds"])
print()
print("| N | i | threads | best peer / ebb, per repeat: median (min–max) | ebb fastest in |")
print("|---|---|---|---|---|")
configs = sorted({k[:3] for k in per_rep}, key=lambda k: (-k[0], k[2]))
for cfg in configs:
    ratios = []
    for (n, i, t, rep), times in sorted(per_rep.items()):
        if (n, i, t) != cfg or "ebb" not in times or len(times) < 2:
            continue
        best = min(v for a, v in times.items() if a != "ebb")
        ratios.append(best / times["ebb"])
    if ratios:
        wins = sum(r > 1 for r in ratios)
        print(f"| {cfg[0]:,} | {cfg[1]:,} | {cfg[2]} | {statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f}×) | {wins} of {len(ratios)} |")
PY
