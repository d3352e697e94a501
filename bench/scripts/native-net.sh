#!/usr/bin/env bash
# Native networking (issue 10): the native guest (ebb-net in a KVM guest under ebb-vmm,
# over virtio-net and a TAP device) against hosted ebb-net over TAP and Linux over veth,
# in the same run.
#
# The client is Linux in a network namespace at 10.0.2.2/24, pinned to CPU 1; the server
# answers at 10.0.2.15, pinned to CPU 0:
#   native - tests/guests net_echo (echo on port 7) under `ebb-vmm --cpus 1 --pin --net
#            tap=NAME`; the whole monitor process (vCPU thread, virtio-net I/O thread,
#            main thread) is pinned to VMM_CPUS (default 0) with taskset, so it gets one
#            CPU like the others. The TAP's kernel end is moved into the namespace.
#   native-split - the monitor started on CPUs 0,1 (so it knows it has a CPU beside
#            its vCPU: the I/O thread and the guest poll before sleeping), the vCPU pinned
#            to CPU 0 by --pin, and the virtio-net I/O thread moved to CPU 1 (taskset -p on
#            its thread id), where it shares the CPU with the client. On one CPU (native)
#            neither polls: each would only keep the other, which holds the work, waiting
#   native-nocsum, native-split-nocsum - as native and native-split with `ebb-vmm
#            --net-offload off`: the virtio-net device offers no checksum offload (native
#            and native-split negotiate CSUM and GUEST_CSUM with the TAP backend), for
#            comparing offload on and off in the same run
#   hosted - apps/sink --echo on ebb-net over a TAP device, the same way
#   linux  - apps/sink --echo on Linux sockets in the root namespace, reached from the
#            namespace over a veth pair (created for the run, default offloads)
# Same addresses for all three, so the client is identical. Each round runs the configs
# in turn (alternated), each on a freshly started server:
#   pp64:  64-byte ping-pong, one connection, TCP_NODELAY, PP_SECONDS (net-sweep)
#   sweep: NetPIPE-style ping-pong, powers of two 1 B - 1 MiB, SWEEP_SECONDS per size
#   bulk:  streaming echo, one connection, BULK_SECONDS: writes and reads at once, so the
#          rate is both directions at the same time (the native guest only echoes), with
#          at most BULK_WINDOW bytes in flight (default: no limit)
# Beside every figure: the server's host CPU time per round trip (per MiB for bulk) from
# /proc/PID/stat (utime + stime of the whole process: for native the vCPU, I/O and main
# threads of ebb-vmm together), and for native the monitor's exits, kicks and wake-ups
# per round trip (SIGUSR1 counter lines before and after each window).
# One-direction bulk needs a native sink, which does not exist yet: HOOK below
# (NATIVE_SINK_IMAGE). Summary (median [min-max] over rounds, ratios of medians, verdicts
# against the issue's targets) on stdout and in OUT_DIR/summary.txt; raw CSVs, server
# logs and the sweep plot (PLOT) in OUT_DIR. Needs root and KVM; prints SKIPPED otherwise.
#
# Usage: bench/scripts/native-net.sh   (env: ROUNDS=5 PP_SECONDS=5 SWEEP_SECONDS=500ms
#        BULK_SECONDS=5 BULK_CHUNK=32768 BULK_WINDOW=0
#        CONFIGS="native native-split hosted linux" WORKLOADS="pp64 sweep bulk"
#        VMM_CPUS=0 NATIVE_GUEST_ARGS= OUT_DIR=/tmp/native-net
#        PLOT=OUT_DIR/net-sweep.svg CARGO_TARGET_DIR=... NATIVE_SINK_IMAGE=...)
set -euo pipefail

ROUNDS=${ROUNDS:-5}
PP_SECONDS=${PP_SECONDS:-5}
SWEEP_SECONDS=${SWEEP_SECONDS:-500ms}
BULK_SECONDS=${BULK_SECONDS:-5}
# Streaming echo: bytes per write, and at most BULK_WINDOW bytes not yet echoed back
# (0: no limit but TCP's windows). Runs up to the fifth (docs/benchmarks.md) used 131072,
# a workaround for an echo stall since fixed; with it the stream was bound by round-trip
# latency (at most 128 KiB per round trip), not by what each side can move.
BULK_CHUNK=${BULK_CHUNK:-32768}
BULK_WINDOW=${BULK_WINDOW:-0}
CONFIGS=${CONFIGS:-native native-split hosted linux}
# Which workloads each round runs (a subset for quick looks; the summary shows n/a for
# the rest).
WORKLOADS=${WORKLOADS:-pp64 sweep bulk}
VMM_CPUS=${VMM_CPUS:-0}
# Extra guest arguments for the native configs (passed after `--`), e.g. runtime knobs.
NATIVE_GUEST_ARGS=${NATIVE_GUEST_ARGS:-}
OUT_DIR=${OUT_DIR:-/tmp/native-net}
PLOT=${PLOT:-$OUT_DIR/net-sweep.svg}
# HOOK (one-direction bulk): a native image that listens on 10.0.2.15:SINK_PORT, prints
# a line containing 'listening on' to its console once it does, and discards what it
# receives. When set, each round also streams one way (client -> server)
# to it and to `sink` (hosted and linux). Note that `sink` SHA-256s what it receives, so a
# fair native peer must do the same work (or sink gets a discard mode).
NATIVE_SINK_IMAGE=${NATIVE_SINK_IMAGE:-}
SINK_PORT=${SINK_PORT:-9000}

skip() {
  echo "SKIPPED: native-net: $1"
  exit 0
}
die() {
  echo "native-net: $*" >&2
  exit 1
}

[[ $(id -u) -eq 0 ]] || skip "needs root (TAP devices, network namespaces)"
[[ -c /dev/net/tun ]] || skip "no /dev/net/tun"
[[ -r /dev/kvm && -w /dev/kvm ]] || skip "no usable /dev/kvm"
for tool in ip taskset cargo; do
  command -v "$tool" >/dev/null || skip "\`$tool\` is not installed"
done

repo="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=../lib.sh
source "$repo/bench/lib.sh"
target="${CARGO_TARGET_DIR:-$repo/target}"
guest_target="$repo/tests/guests/target"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
exec > >(tee "$OUT_DIR/log.txt") 2>&1

# Build fresh, right before measuring (ebb-net and the monitor may be changing under us).
(cd "$repo" && cargo build --release -q -p ebb-vmm -p sink &&
  cargo build --release -q -p ebb-bench --bin net-sweep &&
  cargo build --release -q --target x86_64-unknown-none \
    --manifest-path tests/guests/Cargo.toml --target-dir "$guest_target") || die "build failed"
vmm="$target/release/ebb-vmm"
sink="$target/release/sink"
sweep="$target/release/net-sweep"
net_echo="$guest_target/x86_64-unknown-none/release/net_echo"

state_file="$OUT_DIR/state.txt"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git -C "$repo" rev-parse HEAD)"
  echo "uncommitted files: $(git -C "$repo" status --porcelain | wc -l)"
  echo "kernel: $(uname -r); cpus: $(nproc); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "rounds: $ROUNDS; pp64 ${PP_SECONDS}s; sweep $SWEEP_SECONDS per size; bulk ${BULK_SECONDS}s; configs: $CONFIGS"
  echo "native guest arguments: ${NATIVE_GUEST_ARGS:-(none)}"
  echo "server CPU: ebb-vmm on CPU(s) $VMM_CPUS (vCPU pinned with --pin; native-split: I/O thread on CPU 1), sink on CPU 0; client on CPU 1"
} | tee "$state_file"

id=$$
ns="ebbnn$id"
tap=""
starts=0
veth_host="vnh$id"
veth_ns="vnn$id"
server_ip=10.0.2.15
client_ip=10.0.2.2
server_pid=""
server_log=""

stop_server() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
linux_down() { ip link del "$veth_host" 2>/dev/null || true; }
cleanup() {
  stop_server
  linux_down
  ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
trap "exit 130" INT TERM # so the EXIT trap runs on a signal too

ip netns add "$ns"
ip -n "$ns" link set lo up

# linux_up: the veth pair, 10.0.2.15 in the root namespace, 10.0.2.2 in the namespace
# (only while the linux config runs, so 10.0.2.0/24 never has two routes).
linux_up() {
  ip link add "$veth_host" type veth peer name "$veth_ns"
  ip link set "$veth_ns" netns "$ns"
  ip addr add "$server_ip/24" dev "$veth_host"
  ip link set "$veth_host" up
  ip -n "$ns" addr add "$client_ip/24" dev "$veth_ns"
  ip -n "$ns" link set "$veth_ns" up
}

# wait_listening: the server's log shows 'listening on' (all three print it)
wait_listening() {
  local i
  for ((i = 0; i < 400; i++)); do
    grep -q 'listening on' "$server_log" && return 0
    kill -0 "$server_pid" 2>/dev/null || { cat "$server_log" >&2; die "$1 exited before listening"; }
    sleep 0.05
  done
  cat "$server_log" >&2
  die "$1 did not print 'listening on' within 20 s"
}

# tap_to_ns: the TAP device the server created goes into the namespace (it vanishes when
# the server exits)
tap_to_ns() {
  local i
  for ((i = 0; i < 100; i++)); do
    ip link show "$tap" >/dev/null 2>&1 && break
    sleep 0.02
  done
  ip link set "$tap" netns "$ns"
  ip -n "$ns" addr add "$client_ip/24" dev "$tap"
  ip -n "$ns" link set "$tap" up
}

# start CONFIG ROUND [IMAGE PORT]: the CONFIG's echo server (or with IMAGE/PORT: a sink)
start() {
  local config=$1 round=$2 image=${3:-$net_echo}
  server_log="$OUT_DIR/server-$config-$round.log"
  starts=$((starts + 1))
  tap="ebn${id}x$starts" # a fresh name: the last server's device may still be going away
  : >"$server_log"
  case $config in
    native | native-split | native-nocsum | native-split-nocsum)
      local cpus=$VMM_CPUS
      [[ $config == native-split* ]] && cpus=0,1
      local offload=on
      [[ $config == *-nocsum ]] && offload=off
      local guest_args=()
      [[ -n $NATIVE_GUEST_ARGS ]] && read -r -a guest_args <<<"-- $NATIVE_GUEST_ARGS"
      taskset -c "$cpus" "$vmm" "$image" --cpus 1 --pin --net "tap=$tap" \
        --net-offload "$offload" "${guest_args[@]}" >"$server_log" 2>&1 &
      server_pid=$!
      wait_listening "ebb-vmm"
      if [[ $config == native-split* ]]; then
        io_thread_to "$server_pid" 1 || die "cannot move the virtio-net thread to CPU 1"
      fi
      tap_to_ns
      ;;
    hosted)
      local mode=(--echo --port 7)
      [[ $# -gt 2 ]] && mode=(--port "$4")
      taskset -c 0 "$sink" "${mode[@]}" --tap "$tap" --ip "$server_ip/24" >"$server_log" 2>&1 &
      server_pid=$!
      wait_listening "sink (hosted)"
      tap_to_ns
      ;;
    linux)
      linux_up
      local mode=(--echo --port 7)
      [[ $# -gt 2 ]] && mode=(--port "$4")
      EBB_CPUS=1 taskset -c 0 "$sink" "${mode[@]}" --addr "$server_ip" >"$server_log" 2>&1 &
      server_pid=$!
      wait_listening "sink (linux)"
      ;;
    *) die "unknown config $config (CONFIGS: native native-split native-nocsum native-split-nocsum hosted linux)" ;;
  esac
}
stop() {
  stop_server
  [[ $1 == linux ]] && linux_down
  return 0
}

# client CONFIG ARGS...: net-sweep in the namespace on CPU 1, with the server's CPU time
# (and for native the monitor's counters) around each window
client() {
  local config=$1
  shift
  local probe=(--server-pid "$server_pid")
  [[ $config == native* ]] && probe+=(--vmm-log "$server_log")
  ip netns exec "$ns" taskset -c 1 "$sweep" "$@" --label "$config" "${probe[@]}"
}

# measure OUT_FILE CONFIG ROUND WHAT ARGS...: appends the client's rows (header once);
# a failure (e.g. a stalled guest) is recorded in failures.txt and the run goes on
measure() {
  local file=$1 config=$2 round=$3 what=$4
  shift 4
  local out rc=0
  out=$(client "$config" "$@" 2>"$OUT_DIR/client-err.txt") || rc=$?
  if ((rc != 0)); then
    echo "round $round $config $what: FAILED: $(tr '\n' ' ' <"$OUT_DIR/client-err.txt")" |
      tee -a "$OUT_DIR/failures.txt" >&2
    return 1
  fi
  if [[ -s $file ]]; then sed 1d <<<"$out" >>"$file"; else echo "$out" >>"$file"; fi
  sed 1d <<<"$out" | sed "s/^/round $round: /"
}

pp64="$OUT_DIR/pp64.csv"
sweep_csv="$OUT_DIR/sweep.csv"
bulk_csv="$OUT_DIR/bulk-echo.csv"
oneway_csv="$OUT_DIR/bulk-send.csv"
: >"$pp64"
: >"$sweep_csv"
: >"$bulk_csv"
: >"$oneway_csv"
: >"$OUT_DIR/failures.txt"
read -r -a configs <<<"$CONFIGS"
# wants WORKLOAD: whether WORKLOADS names it
wants() { [[ " $WORKLOADS " == *" $1 "* ]]; }

for ((round = 1; round <= ROUNDS; round++)); do
  for config in "${configs[@]}"; do
    echo "== round $round/$ROUNDS: $config"
    start "$config" "$round"
    # After a failure the server may be wedged: skip its remaining workloads this round.
    addr=(--addr "$server_ip:7")
    { ! wants pp64 || measure "$pp64" "$config" "$round" pp64 pingpong "${addr[@]}" --sizes 64 \
      --seconds "${PP_SECONDS}s" --warmup 1s; } &&
      { ! wants sweep || measure "$sweep_csv" "$config" "$round" sweep pingpong "${addr[@]}" \
        --sizes sweep --seconds "$SWEEP_SECONDS"; } &&
      { ! wants bulk || measure "$bulk_csv" "$config" "$round" bulk stream "${addr[@]}" --mode echo \
        --chunk "$BULK_CHUNK" --window "$BULK_WINDOW" --duration "${BULK_SECONDS}s" --warmup 1s; } ||
      true
    stop "$config"
    if [[ -n $NATIVE_SINK_IMAGE ]]; then
      start "$config" "$round-sink" "$NATIVE_SINK_IMAGE" "$SINK_PORT"
      measure "$oneway_csv" "$config" "$round" bulk-send stream --mode send \
        --addr "$server_ip:$SINK_PORT" --duration "${BULK_SECONDS}s" --warmup 1s || true
      stop "$config"
    fi
  done
done

# ---------------------------------------------------------------------------------------
# Summary.

# values FILE CONFIG COLUMN [SIZE]: the column's values of CONFIG's rows (of SIZE)
values() {
  [[ -s $1 ]] || return 0
  awk -F, -v t="$2" -v c="$3" -v s="${4:-}" '
    NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
    $1 == "target" { next }
    $1 == t && (s == "" || $2 == s) && (c in h) && $h[c] != "" { print $h[c] }' "$1"
}
# fig FILE CONFIG COLUMN DIGITS [SIZE] -> "median [min-max]" (or "n/a")
fig() {
  local m lo hi
  read -r m lo hi <<<"$(values "$1" "$2" "$3" "${5:-}" | stats - "$4")"
  if [[ $m == nan ]]; then echo "n/a"; else echo "$m [$lo-$hi]"; fi
}
med() { values "$1" "$2" "$3" "${4:-}" | stats - 6 | cut -d' ' -f1; }
lo() { values "$1" "$2" "$3" "${4:-}" | stats - 6 | cut -d' ' -f2; }
hi() { values "$1" "$2" "$3" "${4:-}" | stats - 6 | cut -d' ' -f3; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
# verdict_lower NATIVE FILE COLUMN OTHER TARGET [SIZE]: lower is better; NATIVE/OTHER <= TARGET
verdict_lower() {
  local n=$1 f=$2 c=$3 o=$4 t=$5 s=${6:-}
  awk -v nm="$(med "$f" "$n" "$c" "$s")" -v nl="$(lo "$f" "$n" "$c" "$s")" \
    -v om="$(med "$f" "$o" "$c" "$s")" -v oh="$(hi "$f" "$o" "$c" "$s")" -v t="$t" 'BEGIN {
    if (nm == "nan" || om == "nan") { print "n/a"; exit }
    if (nm <= t * om) print "meets target (<= " t "x)"
    else if (nl <= t * oh) print "misses target (" t "x) at the median; ranges overlap at " t "x"
    else print "misses target (" t "x)" }'
}
# verdict_higher NATIVE FILE COLUMN OTHER TARGET: higher is better; NATIVE/OTHER >= TARGET
verdict_higher() {
  local n=$1 f=$2 c=$3 o=$4 t=$5
  awk -v nm="$(med "$f" "$n" "$c")" -v nh="$(hi "$f" "$n" "$c")" \
    -v om="$(med "$f" "$o" "$c")" -v ol="$(lo "$f" "$o" "$c")" -v t="$t" 'BEGIN {
    if (nm == "nan" || om == "nan") { print "n/a"; exit }
    if (nm >= t * om) print "meets target (>= " t "x)"
    else if (nh >= t * ol) print "misses target (" t "x) at the median; ranges overlap at " t "x"
    else print "misses target (" t "x)" }'
}

{
  echo
  echo "== summary: median [min-max] over $ROUNDS rounds; load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "-- 64-byte ping-pong, 1 connection, ${PP_SECONDS}s (server CPU = host CPU time of the whole server process)"
  echo "| config | round trips/s | p50 µs | p99 µs | server CPU µs/rt | exits/rt | kicks/rt | wake-ups/rt |"
  echo "|---|---|---|---|---|---|---|---|"
  for config in "${configs[@]}"; do
    echo "| $config | $(fig "$pp64" "$config" rt_per_s 0) | $(fig "$pp64" "$config" p50_us 1) |" \
      "$(fig "$pp64" "$config" p99_us 1) | $(fig "$pp64" "$config" server_cpu_us_per_rt 1) |" \
      "$(fig "$pp64" "$config" exits_per_rt 2) | $(fig "$pp64" "$config" kicks_per_rt 3) |" \
      "$(fig "$pp64" "$config" wakeups_per_rt 2) |"
  done
  echo
  echo "-- bulk: streaming echo, 1 connection, ${BULK_SECONDS}s, $BULK_CHUNK-byte writes, $( ((BULK_WINDOW)) && echo "at most $BULK_WINDOW bytes in flight" || echo "no limit on bytes in flight"); Mbit/s echoed (= each direction, both at once)"
  echo "| config | Mbit/s | server CPU µs/MiB | exits/MiB | kicks/MiB | wake-ups/MiB |"
  echo "|---|---|---|---|---|---|"
  for config in "${configs[@]}"; do
    echo "| $config | $(fig "$bulk_csv" "$config" mbps 0) | $(fig "$bulk_csv" "$config" server_cpu_us_per_mib 0) |" \
      "$(fig "$bulk_csv" "$config" exits_per_mib 1) | $(fig "$bulk_csv" "$config" kicks_per_mib 2) |" \
      "$(fig "$bulk_csv" "$config" wakeups_per_mib 1) |"
  done
  if [[ -s $oneway_csv ]]; then
    echo
    echo "-- bulk one way (client -> sink), ${BULK_SECONDS}s"
    echo "| config | Mbit/s | server CPU µs/MiB | exits/MiB |"
    echo "|---|---|---|---|"
    for config in "${configs[@]}"; do
      echo "| $config | $(fig "$oneway_csv" "$config" mbps 0) | $(fig "$oneway_csv" "$config" server_cpu_us_per_mib 0) |" \
        "$(fig "$oneway_csv" "$config" exits_per_mib 1) |"
    done
    for native in native native-split; do
      [[ " ${configs[*]} " == *" $native "* && " ${configs[*]} " == *" hosted "* ]] || continue
      echo "$native/hosted bulk one way Mbit/s: $(ratio "$(med "$oneway_csv" "$native" mbps)" "$(med "$oneway_csv" hosted mbps)")" \
        "- $(verdict_higher "$native" "$oneway_csv" mbps hosted 0.8)"
    done
  else
    echo "(one-direction bulk: not run; needs a native sink, see NATIVE_SINK_IMAGE)"
  fi
  echo
  echo "-- sweep: median over rounds of p50 round trip (µs) and NetPIPE Mbit/s (8*size / (mean RTT/2))"
  header="| size B |"
  rule="|---|"
  for config in "${configs[@]}"; do
    header+=" $config p50 µs | $config Mbit/s | $config CPU µs/rt |"
    rule+="---|---|---|"
  done
  for config in "${configs[@]}"; do
    [[ $config == native* ]] && { header+=" $config exits/rt |"; rule+="---|"; }
  done
  echo "$header"
  echo "$rule"
  for ((size = 1; size <= 1048576; size *= 2)); do
    row="| $size |"
    for config in "${configs[@]}"; do
      row+=" $(values "$sweep_csv" "$config" p50_us "$size" | stats - 1 | cut -d' ' -f1) |"
      row+=" $(values "$sweep_csv" "$config" mbps "$size" | stats - 1 | cut -d' ' -f1) |"
      row+=" $(values "$sweep_csv" "$config" server_cpu_us_per_rt "$size" | stats - 1 | cut -d' ' -f1) |"
    done
    for config in "${configs[@]}"; do
      [[ $config == native* ]] &&
        row+=" $(values "$sweep_csv" "$config" exits_per_rt "$size" | stats - 2 | cut -d' ' -f1) |"
    done
    echo "$row"
  done
  echo
  echo "-- ratios of medians and verdicts against the issue's targets"
  for native in native native-split; do
    for other in hosted linux; do
      [[ " ${configs[*]} " == *" $native "* && " ${configs[*]} " == *" $other "* ]] || continue
      [[ $other == hosted ]] && t=1.2 || t=1.5
      echo "$native/$other 64 B p50: $(ratio "$(med "$pp64" "$native" p50_us)" "$(med "$pp64" "$other" p50_us)")" \
        "- $(verdict_lower "$native" "$pp64" p50_us "$other" "$t")"
      echo "$native/$other 64 B p99: $(ratio "$(med "$pp64" "$native" p99_us)" "$(med "$pp64" "$other" p99_us)")" \
        "- $(verdict_lower "$native" "$pp64" p99_us "$other" "$t")"
      echo "$native/$other 64 B server CPU per rt: $(ratio "$(med "$pp64" "$native" server_cpu_us_per_rt)" "$(med "$pp64" "$other" server_cpu_us_per_rt)")"
      echo "$native/$other bulk echo Mbit/s: $(ratio "$(med "$bulk_csv" "$native" mbps)" "$(med "$bulk_csv" "$other" mbps)")" \
        "$([[ $other == hosted ]] && echo "- $(verdict_higher "$native" "$bulk_csv" mbps hosted 0.8)")"
    done
  done
  for native in native native-split; do
    [[ " ${configs[*]} " == *" $native "* && " ${configs[*]} " == *" $native-nocsum "* ]] || continue
    off="$native-nocsum"
    echo "$native checksum offload on/off: 64 B p50 $(ratio "$(med "$pp64" "$native" p50_us)" "$(med "$pp64" "$off" p50_us)")," \
      "64 B round trips/s $(ratio "$(med "$pp64" "$native" rt_per_s)" "$(med "$pp64" "$off" rt_per_s)")," \
      "64 B server CPU/rt $(ratio "$(med "$pp64" "$native" server_cpu_us_per_rt)" "$(med "$pp64" "$off" server_cpu_us_per_rt)")," \
      "bulk echo Mbit/s $(ratio "$(med "$bulk_csv" "$native" mbps)" "$(med "$bulk_csv" "$off" mbps)")," \
      "bulk echo CPU/MiB $(ratio "$(med "$bulk_csv" "$native" server_cpu_us_per_mib)" "$(med "$bulk_csv" "$off" server_cpu_us_per_mib)")" \
      "$([[ -s $oneway_csv ]] && echo ", one way Mbit/s $(ratio "$(med "$oneway_csv" "$native" mbps)" "$(med "$oneway_csv" "$off" mbps)"), one way CPU/MiB $(ratio "$(med "$oneway_csv" "$native" server_cpu_us_per_mib)" "$(med "$oneway_csv" "$off" server_cpu_us_per_mib)")")"
  done
  if [[ -s $OUT_DIR/failures.txt ]]; then
    echo
    echo "-- failures ($(wc -l <"$OUT_DIR/failures.txt"))"
    cat "$OUT_DIR/failures.txt"
  fi
} | tee "$OUT_DIR/summary.txt"

if [[ -s $sweep_csv ]]; then
  mkdir -p "$(dirname "$PLOT")"
  "$sweep" plot --input "$sweep_csv" --out "$PLOT" \
    --title "TCP ping-pong, 1 connection: native guest vs hosted ebb-net (TAP) vs Linux (veth)" &&
    echo "plot: $PLOT"
fi
