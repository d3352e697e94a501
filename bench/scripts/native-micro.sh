#!/usr/bin/env bash
# Native micro-benchmarks, each against its Linux peer in the same run (see
# bench/results/native-micro.md):
#   1. library-OS call (event::core_id, event::now) vs Linux: getpid (raw system call) and
#      clock_gettime(CLOCK_MONOTONIC) (vDSO, no system call: the peer of event::now), cycles;
#      and two exits to the monitor: the CLOCK hypercall (port I/O) and, as root (a TAP
#      device gives the guest a virtio-MMIO transport), a register read (an MMIO exit);
#   2. OS noise: gaps between back-to-back TSC reads, native guest vs Linux process, core 0;
#   3. cross-core wake-up: spawn_on to a vCPU asleep in WAIT vs FUTEX_WAKE of a thread;
#   4. Hoard threadtest natively (1 and 2 vCPUs) vs hosted ebb, glibc, jemalloc, mimalloc.
# Usage: bench/scripts/native-micro.sh [REPEATS] [NOISE_SECONDS] [RAW_OUT]
#   BENCHES="libos noise wake threadtest" (the default) picks which to run.
# Each repeat runs every benchmark once, native and Linux back to back, so slow drifts in
# background load hit both alike. Prints medians, min–max and native/Linux ratios.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPEATS=${1:-3}
NOISE_SECONDS=${2:-5}
RAW=${3:-${TMPDIR:-/tmp}/native-micro-raw.txt}
BENCHES=${BENCHES:-libos noise wake threadtest}
want() { [[ " $BENCHES " == *" $1 "* ]]; }
TARGET=${CARGO_TARGET_DIR:-target}

cargo build --release -q -p ebb-vmm
cargo build --release -q -p ebb-bench --features tikv-jemallocator,mimalloc \
  --bin getpid-cycles --bin tsc-noise --bin wake-latency \
  --bin threadtest-ebb --bin threadtest-glibc --bin threadtest-jemalloc --bin threadtest-mimalloc
# The guests with the workspace's release settings (thin LTO, one codegen unit), which the
# Linux peers above get from the root Cargo.toml: the same compiler work on both sides.
# (tests/guests' own profile has neither; without them the allocator's fast path is not
# inlined natively and costs ~2x, see bench/results/native-micro.md.)
CARGO_PROFILE_RELEASE_LTO=thin CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
  cargo build --release -q --target x86_64-unknown-none --manifest-path tests/guests/Cargo.toml \
  --target-dir "$TARGET/guests-lto"
VMM=$TARGET/release/ebb-vmm
GUESTS=$TARGET/guests-lto/x86_64-unknown-none/release
BIN=$TARGET/release

# run LABEL COMMAND... : runs it, prefixes every output line with the repeat and label
run() {
  local label=$1
  shift
  "$@" | sed "s/^/rep=$rep bench=$label load=$(cut -d' ' -f1 /proc/loadavg) /" | tee -a "$RAW"
}

: >"$RAW"
for rep in $(seq 1 "$REPEATS"); do
  if want libos; then
    mmio=()
    [[ $(id -u) == 0 ]] && mmio=(--net "tap=ebbmicro$$")
    run libos "$VMM" "$GUESTS/bench_libos_call" --cpus 1 --pin --timeout 120 "${mmio[@]}"
    run libos taskset -c 0 "$BIN/getpid-cycles"
  fi
  if want noise; then
    run noise "$VMM" "$GUESTS/bench_noise" --cpus 1 --pin --timeout $((NOISE_SECONDS + 60)) -- "seconds=$NOISE_SECONDS"
    run noise taskset -c 0 "$BIN/tsc-noise" --seconds "$NOISE_SECONDS"
  fi
  if want wake; then
    run wake "$VMM" "$GUESTS/bench_wake" --cpus 2 --pin --timeout 120 -- rounds=500
    run wake "$BIN/wake-latency" --rounds 500 --waker-core 0 --sleeper-core 1
  fi
  want threadtest || continue
  for cfg in "100000 1000" "100 1000000"; do
    read -r n i <<<"$cfg"
    for t in 1 2; do
      run threadtest "$VMM" "$GUESTS/bench_threadtest" --cpus "$t" --pin --timeout 120 -- "n=$n" "i=$i"
      for a in ebb glibc jemalloc mimalloc; do
        run threadtest "$BIN/threadtest-$a" -t "$t" -n "$n" -i "$i"
      done
    done
  done
done

python3 - "$RAW" <<'PY'
import sys, statistics as st, collections
rows = []
for line in open(sys.argv[1]):
    f = {}
    for word in line.split():
        if "=" in word:
            k, v = word.split("=", 1)
            f[k] = v
    rows.append(f)

def spread(v, fmt="{:.1f}"):
    return f"{fmt.format(st.median(v))} ({fmt.format(min(v))}–{fmt.format(max(v))})"

def ratio_line(name, num, den, fmt="{:.1f}"):
    r = [a / b for a, b in zip(num, den) if b]
    if r:
        print(f"| {name} | {spread(r, '{:.2f}')}× |")

reps = sorted({int(f["rep"]) for f in rows})
print(f"Repeats: {len(reps)}. Values: median over repeats (min–max).\n")

print("### 1. Library-OS call vs Linux getpid (cycles per call, loop included)\n")
print("| side | call | min over batches | median over batches |")
print("|---|---|---|---|")
calls = collections.defaultdict(lambda: ([], []))
for f in rows:
    if f.get("bench") == "libos" and "call" in f:
        mins, meds = calls[(f["side"], f["call"])]
        mins.append(float(f["min"])); meds.append(float(f["median"]))
for (side, call), (mins, meds) in sorted(calls.items()):
    print(f"| {side} | {call} | {spread(mins)} | {spread(meds)} |")
print("\n| ratio (per repeat, median batch) | value |\n|---|---|")
for call in ("core_id", "now"):
    if ("native", call) in calls and ("linux", "getpid") in calls:
        ratio_line(f"getpid / {call}", calls[("linux", "getpid")][1], calls[("native", call)][1])
if ("native", "now") in calls and ("linux", "clock_gettime") in calls:
    ratio_line("clock_gettime (vDSO) / now", calls[("linux", "clock_gettime")][1], calls[("native", "now")][1])

print("\n### 2. OS noise (gaps between consecutive TSC reads, core 0)\n")
keys = ["median", "p999", "p9999", "max", "max_ns", "over_1us", "over_10us", "over_100us", "gaps"]
noise = collections.defaultdict(lambda: collections.defaultdict(list))
for f in rows:
    if f.get("bench") == "noise" and "max" in f:
        for k in keys:
            noise[f["side"]][k].append(float(f[k]))
print("| side | " + " | ".join(keys) + " |")
print("|---" * (len(keys) + 1) + "|")
for side in sorted(noise):
    print(f"| {side} | " + " | ".join(spread(noise[side][k], "{:.0f}") for k in keys) + " |")
if "native" in noise and "linux" in noise:
    print("\n| ratio (per repeat) | value |\n|---|---|")
    ratio_line("max gap linux / native", noise["linux"]["max"], noise["native"]["max"])
    ratio_line("p99.99 linux / native", noise["linux"]["p9999"], noise["native"]["p9999"])

print("\n### 3. Cross-core wake-up (µs)\n")
wake = collections.defaultdict(lambda: collections.defaultdict(list))
for f in rows:
    if f.get("bench") == "wake" and "what" in f:
        for k in ("min_us", "median_us", "p99_us", "max_us"):
            wake[(f["side"], f["what"])][k].append(float(f[k]))
print("| side | what | min | median | p99 | max |\n|---|---|---|---|---|---|")
for (side, what), d in sorted(wake.items()):
    print(f"| {side} | {what} | " + " | ".join(spread(d[k]) for k in ("min_us", "median_us", "p99_us", "max_us")) + " |")
print("\n| ratio (per repeat, medians) | value |\n|---|---|")
for what in ("oneway", "roundtrip"):
    if ("native", what) in wake and ("linux", what) in wake:
        ratio_line(f"{what} native / linux", wake[("native", what)]["median_us"], wake[("linux", what)]["median_us"])

print("\n### 4. Hoard threadtest (seconds)\n")
tt = collections.defaultdict(list)
for f in rows:
    if f.get("bench") == "threadtest" and "allocator" in f:
        tt[(int(f["objects"]), int(f["iterations"]), int(f["threads"]), f["allocator"])].append(float(f["seconds"]))
print("| N | i | threads/vCPUs | allocator | median s (min–max) | / hosted ebb |\n|---|---|---|---|---|---|")
for key in sorted(tt, key=lambda k: (-k[0], k[2], k[3])):
    base = tt.get((key[0], key[1], key[2], "ebb"))
    rel = f"{st.median(tt[key]) / st.median(base):.2f}×" if base else ""
    print(f"| {key[0]:,} | {key[1]:,} | {key[2]} | {key[3]} | {spread(tt[key], '{:.3f}')} | {rel} |")
PY
