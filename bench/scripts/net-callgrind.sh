#!/usr/bin/env bash
# ebb-net against smoltcp in instructions (docs/benchmarks.md, "ebb-net against smoltcp"):
# each configuration of bench/net (package ebb-net-bench) under
# `valgrind --tool=callgrind`, with the harness's fixed setup subtracted: the same command
# with `--rounds 1` (ping-pong) or `--bytes 1460` (stream) is run too, and the figures
# are the differences, so they count only the extra round trips or bytes. Instruction
# counts repeat within 0.3 % from run to run (the real clock feeds the stacks' timers),
# so one run of each is enough.
#
# Per configuration it prints instructions per round trip (ping-pong) or per MB (stream),
# frames per round trip or per MB (counted at the benchmark's link), instructions per
# frame, and heap allocations per round trip or per MB.
#
# Usage: bench/scripts/net-callgrind.sh   (env: ROUNDS=5000 BYTES=10000000
#        CARGO_TARGET_DIR=...). Needs valgrind; prints SKIPPED otherwise.
set -euo pipefail

ROUNDS=${ROUNDS:-5000}
BYTES=${BYTES:-10000000}

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/../lib.sh"
net_bench net-callgrind valgrind
repo=$REPO
bench=$NET_BENCH
echo "# $(cd "$repo" && git rev-parse --short HEAD) $(date -u +%FT%TZ) $(valgrind --version)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One run under callgrind: prints "<instructions> <the benchmark's own output line>".
measure() {
  local out="$work/callgrind.out"
  local line
  line=$(valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$out" \
    "$bench" "$@" 2>/dev/null)
  local total
  total=$(awk '/^(summary|totals):/ { print $2; exit }' "$out")
  echo "$total $line"
}

results="$work/results"
stacks=("--stack ebb" "--stack smoltcp --smoltcp-ack-delay default"
  "--stack smoltcp --smoltcp-ack-delay none")
for checksums in "" "--checksum-offload"; do
  for stack in "${stacks[@]}"; do
    # shellcheck disable=SC2086 # the options are words
    {
      echo "pingpong|$stack $checksums|$(measure $stack $checksums ping-pong --rounds 1)|$(measure $stack $checksums ping-pong --rounds "$ROUNDS")"
      echo "stream|$stack $checksums|$(measure $stack $checksums stream --bytes 1460)|$(measure $stack $checksums stream --bytes "$BYTES")"
    } | tee -a "$results" >/dev/null
  done
done

python3 - "$results" "$ROUNDS" "$BYTES" <<'PY'
import re, sys
path, rounds, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def parse(cell):
    total, line = cell.split(" ", 1)
    fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
    return int(total), int(fields["frames"]), int(fields["allocs"]), int(fields["dropped"])

print(f"ping-pong: {rounds} round trips of 64 B minus 1; stream: {nbytes} B minus 1460 B")
print()
print("| workload | stack | checksums | instructions | frames | instructions per frame | allocations |")
print("|---|---|---|---|---|---|---|")
for row in open(path):
    workload, config, small, large = row.rstrip("\n").split("|")
    (i1, f1, a1, d1), (i2, f2, a2, d2) = parse(small), parse(large)
    assert d1 == 0 and d2 == 0, f"frames dropped: {row}"
    stack = re.sub(r"--stack |--smoltcp-ack-delay |--checksum-offload", "", config).split()
    stack = stack[0] + (f" (ack delay {stack[1]})" if len(stack) > 1 else "")
    checksums = "offload" if "offload" in config else "software"
    di, df, da = i2 - i1, f2 - f1, a2 - a1
    if workload == "pingpong":
        n, unit = rounds - 1, "round trip"
        print(f"| ping-pong, per {unit} | {stack} | {checksums} | {di / n / 1e3:.2f} k | "
              f"{df / n:.2f} | {di / df:.0f} | {da / n:.3f} |")
    else:
        mb = (nbytes - 1460) / 1e6
        print(f"| stream, per MB | {stack} | {checksums} | {di / mb / 1e6:.3f} M | "
              f"{df / mb:.1f} | {di / df:.0f} | {da / mb:.1f} |")
PY
