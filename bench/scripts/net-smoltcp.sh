#!/usr/bin/env bash
# ebb-net against smoltcp in wall-clock time (docs/benchmarks.md, "ebb-net against
# smoltcp"): bench/net (package ebb-net-bench) pinned to one core with taskset, RUNS runs;
# within each run every workload runs the three stacks back to back (ebb-net, smoltcp
# with its default delayed ACK, smoltcp with `set_ack_delay(None)`), so a slow moment of
# the machine hits all three alike. Prints the load average before and after, then the
# median (min–max) of each row and the ratios ebb-net ÷ smoltcp (for the p50 latency,
# smoltcp's p50 ÷ ebb-net's, so above 1 means ebb-net is better either way) with the range
# of the per-run ratios, and a verdict: "parity" where that range of per-run ratios
# includes 1 (some runs favour each stack), otherwise which one is ahead. The per-run
# ratio pairs rows measured moments apart, so a run slowed for all stacks alike (which
# makes the rows' own min–max ranges overlap) does not hide a consistent difference.
#
# Usage: bench/scripts/net-smoltcp.sh   (env: RUNS=7 CPU=1 ROUNDS=50000 BYTES=100000000
#        CARGO_TARGET_DIR=...). Needs taskset; prints SKIPPED otherwise.
set -euo pipefail

RUNS=${RUNS:-7}
CPU=${CPU:-1}
ROUNDS=${ROUNDS:-50000}
BYTES=${BYTES:-100000000}

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/../lib.sh"
net_bench net-smoltcp taskset
repo=$REPO
bench=$NET_BENCH
echo "# $(cd "$repo" && git rev-parse --short HEAD) $(date -u +%FT%TZ) on CPU $CPU, $RUNS runs"
echo "# before: $(uptime)"

results=$(mktemp)
trap 'rm -f "$results"' EXIT
stacks=("--stack ebb" "--stack smoltcp --smoltcp-ack-delay default"
  "--stack smoltcp --smoltcp-ack-delay none")
workloads=("ping-pong --rounds $ROUNDS" "stream --bytes $BYTES"
  "--checksum-offload ping-pong --rounds $ROUNDS" "--checksum-offload stream --bytes $BYTES")
for run in $(seq 1 "$RUNS"); do
  for workload in "${workloads[@]}"; do
    for stack in "${stacks[@]}"; do
      # shellcheck disable=SC2086 # the options are words
      echo "$run $(taskset -c "$CPU" "$bench" $stack $workload)" >>"$results"
    done
  done
done
echo "# after:  $(uptime)"
echo

python3 - "$results" <<'PY'
import statistics, sys
rows = {}   # (workload, checksums) -> stack -> list of (run, fields)
for line in open(sys.argv[1]):
    run, rest = line.split(" ", 1)
    fields = dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)
    stack = fields["stack"] + (f" (ack delay {fields['ack_delay']})" if "ack_delay" in fields else "")
    workload = "ping-pong" if rest.split()[2 + ("ack_delay" in fields)] == "pingpong" else "stream"
    rows.setdefault((workload, fields["checksums"]), {}).setdefault(stack, []).append((int(run), fields))

def med(xs):
    return f"{statistics.median(xs):,.0f} ({min(xs):,.0f}–{max(xs):,.0f})"

metrics = {"ping-pong": [("round trips/s", "round_trips_s", False), ("p50 ns", "p50_ns", True)],
           "stream": [("Mbit/s", "mbit_s", False)]}
print("| workload | checksums | metric | ebb | smoltcp (ack delay default) | smoltcp (ack delay none) "
      "| ebb ÷ smoltcp default, median (per-run range) | ebb ÷ smoltcp none, likewise |")
print("|---|---|---|---|---|---|---|---|")
for (workload, checksums), by_stack in rows.items():
    for name, key, lower_is_better in metrics[workload]:
        vals = {s: [float(f[key]) for _, f in runs] for s, runs in by_stack.items()}
        ebb = vals["ebb"]
        cells = []
        for other in ("smoltcp (ack delay default)", "smoltcp (ack delay none)"):
            o = vals[other]
            per_run = [(b / a if lower_is_better else a / b) for a, b in zip(ebb, o)]
            m = (statistics.median(o) / statistics.median(ebb) if lower_is_better
                 else statistics.median(ebb) / statistics.median(o))
            # Paired within each run, so a run slowed for all stacks alike does not blur it.
            spans_one = min(per_run) <= 1 <= max(per_run)
            verdict = "parity" if spans_one else ("ebb ahead" if m > 1 else "smoltcp ahead")
            cells.append(f"{m:.2f} ({min(per_run):.2f}–{max(per_run):.2f}), {verdict}")
        print(f"| {workload} | {checksums} | {name} | {med(ebb)} | "
              f"{med(vals['smoltcp (ack delay default)'])} | {med(vals['smoltcp (ack delay none)'])} | "
              f"{cells[0]} | {cells[1]} |")
PY
