#!/usr/bin/env bash
# loop-backend.sh: epoll vs io_uring as the per-core loop's backend.
#
# Two minimal single-threaded echo servers that differ only in the backend,
# bench/src/bin/epoll-echo.rs (edge-triggered epoll + read/sendmsg, what
# ebb-hosted's loop does per core) and bench/src/bin/uring-echo.rs (recv/send
# SQEs, one in flight per connection, submit_and_wait(1)), run alternately under
# the same closed-loop load (bench/src/bin/echo-load.rs); then the cost of the
# non-blocking "any events?" check (bench/src/bin/poll-cost.rs). Prints markdown.
#
# Usage: bench/loop-backend.sh            (from anywhere; runs in the repo root)
#
# Environment (defaults in brackets):
#   REPEATS [5]        runs per backend and load; the order rotates each repeat
#                      (2 backends: ABBA...; 3: ABC, BCA, CAB, ...)
#   BACKENDS ["epoll uring uring-defer"]
#                      epoll: epoll-echo; uring: uring-echo --setup plain;
#                      uring-defer: uring-echo --setup defer
#                      (IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN)
#   CONNS [32]         echo-load --conns of the throughput run set
#   LAT_CONNS [1]      echo-load --conns of the latency run set ("" = skip)
#   SIZE [64]          echo-load --size (bytes)
#   DURATION [5s]      echo-load --duration (measured part)
#   WARMUP [1s]        echo-load --warmup (not measured)
#   POLL_RUNS [7]      poll-cost --runs (each run is POLL_CALLS calls)
#   POLL_CALLS [1000000]
#   BIN_DIR            where the binaries are [$CARGO_TARGET_DIR or target]/release
#   SKIP_BUILD [0]     1: do not run cargo build
#   OUT_DIR            raw results (JSON lines, server logs)
#                      [target/loop-backend/YYYYmmdd-HHMMSS]
#
# Servers are pinned to CPU 0 (`taskset -c 0`), echo-load to CPU 1
# (`--pin-core 1`), poll-cost to CPU 0. Exits non-zero if a server fails to
# start or echo-load reports errors.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

REPEATS=${REPEATS:-5}
BACKENDS=${BACKENDS:-epoll uring uring-defer}
CONNS=${CONNS:-32}
LAT_CONNS=${LAT_CONNS-1}
SIZE=${SIZE:-64}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
POLL_RUNS=${POLL_RUNS:-7}
POLL_CALLS=${POLL_CALLS:-1000000}
SKIP_BUILD=${SKIP_BUILD:-0}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BIN_DIR=${BIN_DIR:-$TARGET_DIR/release}
LOAD_BIN=$BIN_DIR/echo-load
OUT_DIR=${OUT_DIR:-$TARGET_DIR/loop-backend/$(date +%Y%m%d-%H%M%S)}

die() { echo "loop-backend: error: $*" >&2; exit 1; }

command -v taskset >/dev/null || die "taskset not found (util-linux)"
[[ $REPEATS =~ ^[1-9][0-9]*$ ]] || die "REPEATS must be a positive integer"
read -r -a BACKEND_LIST <<<"$BACKENDS"
((${#BACKEND_LIST[@]} > 0)) || die "BACKENDS is empty"
for b in "${BACKEND_LIST[@]}"; do
  [[ $b == epoll || $b == uring || $b == uring-defer ]] ||
    die "unknown backend '$b' (epoll, uring, uring-defer)"
done
(($(nproc) >= 2)) || die "needs at least 2 CPUs (have $(nproc))"

if [[ $SKIP_BUILD != 1 ]]; then
  cargo build --release -p ebb-bench
fi
for b in epoll-echo uring-echo poll-cost echo-load; do
  [[ -x $BIN_DIR/$b ]] || die "missing binary $BIN_DIR/$b"
done
mkdir -p "$OUT_DIR"

SERVER_PID=""
cleanup() {
  if [[ -n $SERVER_PID ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# server_cmd BACKEND -> sets CMD (array)
server_cmd() {
  case $1 in
    epoll) CMD=("$BIN_DIR/epoll-echo" --port 0) ;;
    uring) CMD=("$BIN_DIR/uring-echo" --port 0 --setup plain) ;;
    uring-defer) CMD=("$BIN_DIR/uring-echo" --port 0 --setup defer) ;;
  esac
}

# shellcheck source=bench/lib.sh
source bench/lib.sh # (the script runs from the repo root)

FAILED=0

# run_set CONNS
run_set() {
  local conns=$1 tag="conns$1" n=${#BACKEND_LIST[@]}
  local b
  for b in "${BACKEND_LIST[@]}"; do
    : >"$OUT_DIR/$tag-$b.rps"; : >"$OUT_DIR/$tag-$b.p50"; : >"$OUT_DIR/$tag-$b.p99"
    : >"$OUT_DIR/$tag-$b.cpu"
  done

  echo
  echo "## conns=$conns size=$SIZE duration=$DURATION warmup=$WARMUP (server on CPU 0, echo-load on CPU 1)"
  echo
  echo "| run | backend | rps | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | errors | server CPU ns/req | loadavg(1m) |"
  echo "|----:|---------|----:|-------:|-------:|-------:|---------:|-------:|-------:|------------------:|------------:|"

  local r k name
  for ((r = 1; r <= REPEATS; r++)); do
    for ((k = 0; k < n; k++)); do
      name=${BACKEND_LIST[$(((r - 1 + k) % n))]}
      RUN_ID="$tag-$r"
      local load
      load=$(cut -d' ' -f1 /proc/loadavg)
      server_cmd "$name"
      start_server "$name" 0 "${CMD[@]}"
      local json rc=0 cpu0 cpu1
      cpu0=$(cut -d' ' -f1 "/proc/$SERVER_PID/schedstat")
      json=$("$LOAD_BIN" --addr "127.0.0.1:$PORT" --conns "$conns" --size "$SIZE" \
        --duration "$DURATION" --warmup "$WARMUP" --pin-core 1 \
        2>"$OUT_DIR/load-$name-$RUN_ID.err") || rc=$?
      cpu1=$(cut -d' ' -f1 "/proc/$SERVER_PID/schedstat")
      cleanup
      # Server CPU ns per request: on-CPU time over the whole load (warm-up
      # included) / requests scaled to warm-up + measured time.
      local cpu_ns
      cpu_ns=$(awk -v c=$((cpu1 - cpu0)) -v n="$(json_field "$json" requests)" \
        -v d="$(json_field "$json" duration_s)" -v w="$(json_field "$json" warmup_s)" \
        'BEGIN { t = n * (d + w) / d; printf "%.0f", (t > 0) ? c / t : 0 }')
      echo "{\"config\":\"$tag\",\"run\":$r,\"backend\":\"$name\",\"loadavg\":$load,\"server_cpu_ns_per_req\":$cpu_ns,\"result\":${json:-null},\"rc\":$rc}" >>"$OUT_DIR/results.jsonl"
      if [[ -z $json ]]; then
        cat "$OUT_DIR/load-$name-$RUN_ID.err" >&2
        die "echo-load against $name (run $r) failed (exit $rc)"
      fi
      if ((rc != 0)); then
        FAILED=1
        sed 's/^/    /' "$OUT_DIR/load-$name-$RUN_ID.err" >&2
      fi
      json_field "$json" rps >>"$OUT_DIR/$tag-$name.rps"
      json_field "$json" p50_us >>"$OUT_DIR/$tag-$name.p50"
      json_field "$json" p99_us >>"$OUT_DIR/$tag-$name.p99"
      echo "$cpu_ns" >>"$OUT_DIR/$tag-$name.cpu"
      printf '| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$r" "$name" \
        "$(json_field "$json" rps)" "$(json_field "$json" p50_us)" \
        "$(json_field "$json" p90_us)" "$(json_field "$json" p99_us)" \
        "$(json_field "$json" p999_us)" "$(json_field "$json" max_us)" \
        "$(json_field "$json" errors)" "$cpu_ns" "$load"
    done
  done

  echo
  echo "### Summary conns=$conns ($REPEATS runs each; medians, spread = min–max; ratios = backend / epoll medians)"
  echo
  echo "| backend | median rps | rps spread | median p50 µs | median p99 µs | p99 spread µs | median server CPU ns/req | CPU spread | rps ratio | p50 ratio | p99 ratio | CPU/req ratio |"
  echo "|---------|-----------:|-----------:|--------------:|--------------:|--------------:|------------------:|-----------:|----------:|----------:|----------:|----------:|"
  local base_rps="" base_p50="" base_p99="" base_cpu=""
  if [[ -s $OUT_DIR/$tag-epoll.rps ]]; then
    read -r base_rps _ _ < <(stats "$OUT_DIR/$tag-epoll.rps")
    read -r base_p50 _ _ < <(stats "$OUT_DIR/$tag-epoll.p50")
    read -r base_p99 _ _ < <(stats "$OUT_DIR/$tag-epoll.p99")
    read -r base_cpu _ _ < <(stats "$OUT_DIR/$tag-epoll.cpu")
  fi
  for b in "${BACKEND_LIST[@]}"; do
    local rm rmin rmax pm pmin pmax lm cm cmin cmax
    read -r cm cmin cmax < <(stats "$OUT_DIR/$tag-$b.cpu")
    read -r rm rmin rmax < <(stats "$OUT_DIR/$tag-$b.rps")
    read -r pm pmin pmax < <(stats "$OUT_DIR/$tag-$b.p99")
    read -r lm _ _ < <(stats "$OUT_DIR/$tag-$b.p50")
    awk -v b="$b" -v rm="$rm" -v rmin="$rmin" -v rmax="$rmax" -v lm="$lm" -v pm="$pm" \
      -v pmin="$pmin" -v pmax="$pmax" -v br="$base_rps" -v bl="$base_p50" -v bp="$base_p99" \
      -v cm="$cm" -v cmin="$cmin" -v cmax="$cmax" -v bc="$base_cpu" 'BEGIN {
      rr = (br > 0) ? sprintf("%.3f×", rm / br) : "–"
      lr = (bl > 0) ? sprintf("%.3f×", lm / bl) : "–"
      pr = (bp > 0) ? sprintf("%.3f×", pm / bp) : "–"
      cr = (bc > 0) ? sprintf("%.3f×", cm / bc) : "–"
      printf "| %s | %s | %s–%s | %s | %s | %s–%s | %.0f | %.0f–%.0f | %s | %s | %s | %s |\n", b, rm, rmin, rmax, lm, pm, pmin, pmax, cm, cmin, cmax, rr, lr, pr, cr }'
  done
}

echo "# loop-backend $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nproc) CPUs ($(uname -r))"
echo "backends: ${BACKEND_LIST[*]}; repeats: $REPEATS; raw results: $OUT_DIR"
run_set "$CONNS"
if [[ -n $LAT_CONNS ]]; then
  run_set "$LAT_CONNS"
fi

echo
echo "## Non-blocking event check, idle instance (poll-cost on CPU 0; $POLL_RUNS runs × $POLL_CALLS calls)"
echo
POLL_JSON=$(taskset -c 0 "$BIN_DIR/poll-cost" --runs "$POLL_RUNS" --calls "$POLL_CALLS")
echo "$POLL_JSON" >"$OUT_DIR/poll-cost.json"
echo "| primitive | median ns/call | min–max ns |"
echo "|-----------|---------------:|-----------:|"
for key in epoll_pwait2_zero uring_cq_peek uring_enter_zero uring_enter_getevents uring_defer_enter_getevents; do
  read -r med mn mx < <(sed -n "s/.*\"$key\":{\"median_ns\":\([0-9.]*\),\"min_ns\":\([0-9.]*\),\"max_ns\":\([0-9.]*\)}.*/\1 \2 \3/p" <<<"$POLL_JSON")
  echo "| $key | $med | $mn–$mx |"
done

if ((FAILED)); then
  die "echo-load reported connection errors (see above and $OUT_DIR)"
fi
