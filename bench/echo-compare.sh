#!/usr/bin/env bash
# echo-compare.sh: Ebbflow's echo server vs an idiomatic tokio echo server under
# the same closed-loop load (bench/src/bin/echo-load.rs).
#
# Usage: bench/echo-compare.sh            (from anywhere; runs in the repo root)
#
# Environment (defaults in brackets):
#   REPEATS [5]        runs per server; the two servers alternate (ABBA order:
#                      odd repeats start with ebb, even ones with tokio)
#   CONNS [32]         echo-load --conns
#   SIZE [64]          echo-load --size (bytes)
#   DURATION [5s]      echo-load --duration (measured part)
#   WARMUP [1s]        echo-load --warmup (not measured)
#   SERVER_CORES [1]   1: each server pinned to core 0 (`taskset -c 0`, 1 core /
#                         1 worker), load generator pinned to core 1;
#                      2: servers on cores 0-1 (2 cores / 2 workers), generator
#                         unpinned;
#                      "1 2": both configurations, one after the other.
#   EBB_ECHO_BIN       path of the Ebbflow echo binary [target/release/echo];
#                      point it at another server (e.g. target/release/tokio-echo)
#                      to run the comparison without Ebbflow's echo. The `echo`
#                      package is then not built.
#   EBB_ECHO_ARGS      server arguments [--port 0] (the core count is the CPUs the
#                      server is pinned to; EBB_IDLE_POLL_US=0 turns polling off), or
#                      [--port 0 --workers N] when EBB_ECHO_BIN is a tokio-echo
#   BIN_DIR            where echo-load and tokio-echo are [$CARGO_TARGET_DIR or
#                      target]/release
#   SKIP_BUILD [0]     1: do not run cargo build
#   OUT_DIR            raw results (JSON lines, server logs)
#                      [target/echo-compare/YYYYmmdd-HHMMSS]
#
# Beside requests/s and latency, each run reports the server's CPU time per request:
# user + system time of the server process (all threads, /proc/PID/stat) over the
# measured interval (sampled when the warm-up ends and when the load ends), divided by
# the requests answered in it. Ebbflow's core polls for EBB_IDLE_POLL_US (50 µs by
# default) before it sleeps and tokio sleeps at once, so a throughput or latency win
# can be bought with CPU time: the CPU column says whether it was.
#
# Both servers print `... listening on 127.0.0.1:PORT ...` once ready; the port
# is parsed from that line. Exits non-zero if a server fails to start or
# echo-load reports errors.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

REPEATS=${REPEATS:-5}
CONNS=${CONNS:-32}
SIZE=${SIZE:-64}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
SERVER_CORES=${SERVER_CORES:-1}
SKIP_BUILD=${SKIP_BUILD:-0}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BIN_DIR=${BIN_DIR:-$TARGET_DIR/release}
EBB_BIN=${EBB_ECHO_BIN:-$BIN_DIR/echo}
TOKIO_BIN=$BIN_DIR/tokio-echo
LOAD_BIN=$BIN_DIR/echo-load
OUT_DIR=${OUT_DIR:-$TARGET_DIR/echo-compare/$(date +%Y%m%d-%H%M%S)}

die() { echo "echo-compare: error: $*" >&2; exit 1; }

command -v taskset >/dev/null || die "taskset not found (util-linux)"
[[ $REPEATS =~ ^[1-9][0-9]*$ ]] || die "REPEATS must be a positive integer"
for c in $SERVER_CORES; do
  [[ $c == 1 || $c == 2 ]] || die "SERVER_CORES must be 1, 2 or \"1 2\" (got '$c')"
done
(( $(nproc) >= 2 )) || die "needs at least 2 CPUs (have $(nproc))"

if [[ $SKIP_BUILD != 1 ]]; then
  if [[ -n ${EBB_ECHO_BIN:-} ]]; then
    cargo build --release -p ebb-bench
  else
    cargo build --release -p ebb-bench -p echo
  fi
fi
for b in "$EBB_BIN" "$TOKIO_BIN" "$LOAD_BIN"; do
  [[ -x $b ]] || die "missing binary $b"
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

# shellcheck source=bench/lib.sh
source bench/lib.sh # (the script runs from the repo root)

FAILED=0

run_config() {
  local ncores=$1 cpus client_pin=() ebb_args tokio_args
  if [[ $ncores == 1 ]]; then
    cpus=0
    client_pin=(--pin-core 1)
  else
    cpus=0-1
  fi
  if [[ -n ${EBB_ECHO_ARGS:-} ]]; then
    read -r -a ebb_args <<<"$EBB_ECHO_ARGS"
  elif [[ $(basename "$EBB_BIN") == tokio-echo ]]; then
    ebb_args=(--port 0 --workers "$ncores")
  else
    ebb_args=(--port 0)
  fi
  tokio_args=(--port 0 --workers "$ncores")

  local tag="cores$ncores"
  : >"$OUT_DIR/$tag-ebb.rps"; : >"$OUT_DIR/$tag-ebb.p99"; : >"$OUT_DIR/$tag-ebb.cpu"
  : >"$OUT_DIR/$tag-tokio.rps"; : >"$OUT_DIR/$tag-tokio.p99"; : >"$OUT_DIR/$tag-tokio.cpu"
  local tick_us duration_s
  tick_us=$(awk -v hz="$(getconf CLK_TCK)" 'BEGIN { print 1000000 / hz }')
  duration_s=$(seconds "$DURATION")

  echo
  echo "## SERVER_CORES=$ncores: servers on CPU $cpus, echo-load ${client_pin[*]:-unpinned}; conns=$CONNS size=$SIZE duration=$DURATION warmup=$WARMUP"
  echo
  echo "| run | server | rps | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | errors | server CPU µs/req | server CPU % of a core |"
  echo "|----:|--------|----:|-------:|-------:|-------:|---------:|-------:|-------:|------:|------:|"

  local r order name
  for ((r = 1; r <= REPEATS; r++)); do
    if ((r % 2)); then order=(ebb tokio); else order=(tokio ebb); fi
    for name in "${order[@]}"; do
      RUN_ID="$tag-$r"
      if [[ $name == ebb ]]; then
        start_server ebb "$cpus" "$EBB_BIN" "${ebb_args[@]}"
      else
        start_server tokio "$cpus" "$TOKIO_BIN" "${tokio_args[@]}"
      fi
      local json rc=0 ticks_file=$OUT_DIR/ticks-$name-$RUN_ID
      # The server's CPU time when the warm-up ends (sampled beside the load) and when
      # the load ends.
      (sleep "$(seconds "$WARMUP")"; cpu_ticks "$SERVER_PID" >"$ticks_file") &
      local sampler=$!
      json=$("$LOAD_BIN" --addr "127.0.0.1:$PORT" --conns "$CONNS" --size "$SIZE" \
        --duration "$DURATION" --warmup "$WARMUP" "${client_pin[@]}" \
        2>"$OUT_DIR/load-$name-$RUN_ID.err") || rc=$?
      local ticks_end ticks_start
      ticks_end=$(cpu_ticks "$SERVER_PID")
      wait "$sampler" || true
      ticks_start=$(cat "$ticks_file")
      cleanup
      echo "{\"config\":\"$tag\",\"run\":$r,\"server\":\"$name\",\"result\":${json:-null},\"rc\":$rc}" >>"$OUT_DIR/results.jsonl"
      if [[ -z $json ]]; then
        cat "$OUT_DIR/load-$name-$RUN_ID.err" >&2
        die "echo-load against $name (run $r) failed (exit $rc)"
      fi
      if ((rc != 0)); then
        FAILED=1
        sed 's/^/    /' "$OUT_DIR/load-$name-$RUN_ID.err" >&2
      fi
      local rps p99 cpu_us busy
      rps=$(json_field "$json" rps)
      p99=$(json_field "$json" p99_us)
      read -r cpu_us busy < <(awk -v t=$((ticks_end - ticks_start)) -v tick="$tick_us" \
        -v rps="$rps" -v d="$duration_s" 'BEGIN {
          cpu = t * tick; printf "%.2f %.0f\n", (rps > 0 ? cpu / (rps * d) : 0), cpu / (d * 10000) }')
      echo "$rps" >>"$OUT_DIR/$tag-$name.rps"
      echo "$p99" >>"$OUT_DIR/$tag-$name.p99"
      echo "$cpu_us" >>"$OUT_DIR/$tag-$name.cpu"
      printf '| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$r" "$name" "$rps" \
        "$(json_field "$json" p50_us)" "$(json_field "$json" p90_us)" "$p99" \
        "$(json_field "$json" p999_us)" "$(json_field "$json" max_us)" \
        "$(json_field "$json" errors)" "$cpu_us" "$busy"
    done
  done

  local er_med er_min er_max tr_med tr_min tr_max ep_med ep_min ep_max tp_med tp_min tp_max
  local ec_med ec_min ec_max tc_med tc_min tc_max
  read -r ec_med ec_min ec_max < <(stats "$OUT_DIR/$tag-ebb.cpu")
  read -r tc_med tc_min tc_max < <(stats "$OUT_DIR/$tag-tokio.cpu")
  read -r er_med er_min er_max < <(stats "$OUT_DIR/$tag-ebb.rps")
  read -r tr_med tr_min tr_max < <(stats "$OUT_DIR/$tag-tokio.rps")
  read -r ep_med ep_min ep_max < <(stats "$OUT_DIR/$tag-ebb.p99")
  read -r tp_med tp_min tp_max < <(stats "$OUT_DIR/$tag-tokio.p99")
  echo
  echo "### Summary SERVER_CORES=$ncores ($REPEATS runs each; medians, spread = min–max)"
  echo
  echo "| server | median rps | rps spread | median p99 µs | p99 spread µs | median server CPU µs/req | CPU spread |"
  echo "|--------|-----------:|-----------:|--------------:|--------------:|------:|------:|"
  echo "| ebb ($(basename "$EBB_BIN")) | $er_med | $er_min–$er_max | $ep_med | $ep_min–$ep_max | $ec_med | $ec_min–$ec_max |"
  echo "| tokio | $tr_med | $tr_min–$tr_max | $tp_med | $tp_min–$tp_max | $tc_med | $tc_min–$tc_max |"
  awk -v er="$er_med" -v tr="$tr_med" -v ep="$ep_med" -v tp="$tp_med" -v ec="$ec_med" -v tc="$tc_med" 'BEGIN {
    printf "| **ebb/tokio** | **%.3f×** | | **%.3f×** | | **%.2f×** | |\n", (tr > 0 ? er / tr : 0), (tp > 0 ? ep / tp : 0), (tc > 0 ? ec / tc : 0) }'
}

echo "# echo-compare $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nproc) CPUs ($(uname -r))"
echo "ebb server: $EBB_BIN; tokio server: $TOKIO_BIN; raw results: $OUT_DIR"
for c in $SERVER_CORES; do
  run_config "$c"
done
if ((FAILED)); then
  die "echo-load reported connection errors (see above and $OUT_DIR)"
fi
