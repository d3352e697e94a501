#!/usr/bin/env bash
# The main job as the README runs it — `ebb run memcached`: native memcached under
# ebb-vmm with rootless networking through passt, 127.0.0.1:11211 on the host forwarded
# to the guest — against memcached 1.6 `-t 1` on the host's loopback, in the same run,
# both driven by bench's mc-load from the host (closed loop, ETC, one request in flight
# per connection, client pinned to CPU 1):
#
#   main      - `ebb run memcached`, exactly the README's command (its default vCPUs and
#               memory), not pinned: what a user who follows the README gets;
#   main-cpu0 - `taskset -c 0 ebb run --cpus 1 memcached`: the monitor, its vCPU, its
#               I/O thread and passt (a child, so it inherits the mask) all on CPU 0 —
#               the same one CPU memcached gets;
#   memcached - `taskset -c 0 memcached -t 1 -l 127.0.0.1` (its default -m 64, as the
#               main job's).
#
# Server CPU per request counts every thread of the server's processes: for the main job
# the ebb process (vCPUs, I/O thread, main thread) and passt.
#
# Usage: bench/scripts/main-job.sh   (KVM and passt; no root needed. env: ROUNDS=3
#        CONNS_LIST="1 32" KEYS=100000 DURATION=3s SERVERS="main main-cpu0 memcached"
#        OUT_DIR=/tmp/main-job CARGO_TARGET_DIR=...)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
CONNS_LIST=${CONNS_LIST:-1 32}
KEYS=${KEYS:-100000}
DURATION=${DURATION:-3s}
SERVERS=${SERVERS:-main main-cpu0 memcached}
OUT_DIR=${OUT_DIR:-/tmp/main-job}

die() { echo "main-job: error: $*" >&2; exit 1; }
skip() { echo "SKIPPED: main-job: $1"; exit 0; }
[[ -w /dev/kvm ]] || skip "needs /dev/kvm (without it the main job runs hosted)"
for t in memcached passt taskset python3; do command -v "$t" >/dev/null || skip "$t is not installed"; done
# The main job forwards 127.0.0.1:11211, where Debian's memcached package starts a
# service of its own.
if python3 -c "import socket; socket.create_connection(('127.0.0.1', 11211), 1)" 2>/dev/null; then
  skip "127.0.0.1:11211 is in use (Debian's memcached service? systemctl stop memcached)"
fi

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
target=${CARGO_TARGET_DIR:-$PWD/target}
cargo build --release -q -p ebb-cli
cargo build --release -q -p ebb-bench --bin mc-load
ebb=$target/release/ebb
load=$target/release/mc-load
mkdir -p "$OUT_DIR"
# shellcheck source=bench/lib.sh
source bench/lib.sh

# The image is built once here, so no round times a build (the run ends by its
# timeout, which `ebb` reports as a failure).
"$ebb" run --timeout 1 memcached >"$OUT_DIR/build.log" 2>&1 || true
grep -q "running memcached natively" "$OUT_DIR/build.log" ||
  skip "ebb runs memcached hosted here: $(head -n1 "$OUT_DIR/build.log")"

SERVER_PID=""
SERVER_PIDS=""
mc_port=""
# serve NAME ROUND: starts the server; sets SERVER_PID (to stop), SERVER_PIDS (whose CPU
# time counts, comma-separated) and ADDR
serve() {
  local log=$OUT_DIR/server-$1-$2.log
  case $1 in
    main | main-cpu0)
      if [[ $1 == main ]]; then
        setsid "$ebb" run memcached >"$log" 2>&1 &
      else
        setsid taskset -c 0 "$ebb" run --cpus 1 memcached >"$log" 2>&1 &
      fi
      SERVER_PID=$!
      local i
      for ((i = 0; i < 100; i++)); do
        grep -q "listening on" "$log" && break
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log" >&2; die "$1 exited"; }
        sleep 0.1
      done
      grep -q "listening on" "$log" || { cat "$log" >&2; die "$1 did not start"; }
      local passt
      passt=$(pgrep -P "$SERVER_PID" passt | head -n1) || die "$1: no passt child"
      SERVER_PIDS="$SERVER_PID,$passt"
      ADDR=127.0.0.1:11211
      ;;
    memcached)
      mc_port=$(free_port)
      local as_user=()
      [[ $(id -u) != 0 ]] || as_user=(-u nobody) # memcached refuses to run as root
      taskset -c 0 memcached -l 127.0.0.1 -p "$mc_port" -U 0 -t 1 "${as_user[@]}" >"$log" 2>&1 &
      SERVER_PID=$!
      SERVER_PIDS=$SERVER_PID
      ADDR=127.0.0.1:$mc_port
      ;;
  esac
  local i
  for ((i = 0; i < 100; i++)); do
    python3 -c "import socket,sys; socket.create_connection(('${ADDR%:*}', ${ADDR#*:}), 1)" \
      2>/dev/null && return 0
    sleep 0.1
  done
  die "$1 is not reachable at $ADDR"
}

# halt: stops the server (the main job with Ctrl-C, as a user would: SIGINT to its group)
halt() {
  [[ -n $SERVER_PID ]] || return 0
  kill -INT -- "-$SERVER_PID" 2>/dev/null || kill -INT "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
trap halt EXIT

# measure NAME CONNS: preload and 1 s of load (not measured), then a closed-loop window
# of DURATION with the servers' CPU time around it; appends to $OUT_DIR/closed.txt
measure() {
  local name=$1 conns=$2 out n p
  local cmd=(taskset -c 1 "$load" --addr "$ADDR" --conns "$conns" --workload etc --keys "$KEYS")
  "${cmd[@]}" --closed-loop --preload --warmup 0s --duration 1s >/dev/null
  local before=() after=() per=()
  for p in ${SERVER_PIDS//,/ }; do before+=("$(cpu_ticks "$p")"); done
  out=$("${cmd[@]}" --closed-loop --warmup 0s --duration "$DURATION" --json)
  for p in ${SERVER_PIDS//,/ }; do after+=("$(cpu_ticks "$p")"); done
  n=$(json_field "$out" requests)
  # µs of CPU per request of each process, then of all of them
  for i in "${!before[@]}"; do
    per+=("$(awk -v t=$((after[i] - before[i])) -v hz="$(getconf CLK_TCK)" -v n="$n" \
      'BEGIN { if (n > 0) printf "%.2f", t * 1e6 / hz / n; else print "nan" }')")
  done
  local total
  total=$(printf '%s\n' "${per[@]}" | awk '{ s += $1 } END { printf "%.2f", s }')
  echo "$name/$conns $(json_field "$out" rps) $(json_field "$out" p50_us) $(json_field "$out" p99_us) $total" |
    tee -a "$OUT_DIR/closed.txt"
  # the main job's split: the ebb process (vCPUs and I/O thread) and passt
  if ((${#per[@]} == 2)); then echo "$name/$conns ${per[0]} ${per[1]}" >>"$OUT_DIR/split.txt"; fi
}

: >"$OUT_DIR/closed.txt"
: >"$OUT_DIR/split.txt"
for ((round = 1; round <= ROUNDS; round++)); do
  # shellcheck disable=SC2086 # the names, one word each
  round_order "$round" $SERVERS
  for name in "${ORDER[@]}"; do
    serve "$name" "$round"
    for conns in $CONNS_LIST; do measure "$name" "$conns"; done
    halt
  done
done
: >"$OUT_DIR/summary.txt"
if [[ " $SERVERS " == *" memcached "* ]]; then
  for conns in $CONNS_LIST; do
    for name in $SERVERS; do
      [[ $name == memcached ]] || mc_summary "$name/$conns" "memcached/$conns" "server CPU µs/req" append
    done
  done
fi
{
  echo
  echo "| server | ebb process CPU µs/req | passt CPU µs/req |"
  echo "|---|---|---|"
  for name in $SERVERS; do
    for conns in $CONNS_LIST; do
      grep -q "^$name/$conns " "$OUT_DIR/split.txt" || continue
      echo "| $name/$conns | $(awk -v n="$name/$conns" '$1 == n { print $2 }' "$OUT_DIR/split.txt" | stats - 1 |
        awk '{ printf "%s [%s-%s]", $1, $2, $3 }') | $(awk -v n="$name/$conns" '$1 == n { print $3 }' \
        "$OUT_DIR/split.txt" | stats - 1 | awk '{ printf "%s [%s-%s]", $1, $2, $3 }') |"
    done
  done
} | tee -a "$OUT_DIR/summary.txt"
