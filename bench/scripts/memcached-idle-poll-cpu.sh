#!/usr/bin/env bash
# Host CPU per request at equal offered load: hosted Ebbflow memcached with its idle
# poll on (the default, EBB_IDLE_POLL_US=50, adaptive: see ebb-core's event runtime) and
# off (EBB_IDLE_POLL_US=0), against memcached 1.6 `-t 1` (MEMCACHED, default Debian's).
#
# Each server runs fresh, pinned to CPU 0; mc-load (open loop, Poisson arrivals, ETC over
# KEYS preloaded keys, CONNS connections) on CPU 1 offers each load of QPS for a
# DURATION window after a 1 s warm-up. The server's user and system time
# (/proc/PID/stat fields 14 and 15, every thread) over the window, divided by the
# requests mc-load completed in it, give µs per request of each. Servers alternate
# round by round (ROUNDS). One line per (round, server, load) in OUT_DIR/cpu.txt:
#   server qps achieved_rps p99_us user_us_per_req sys_us_per_req total_us_per_req
# and a summary (median [min-max] over rounds) in OUT_DIR/summary.txt.
#
# Usage: bench/scripts/memcached-idle-poll-cpu.sh   (env: ROUNDS=3 CONNS=32 KEYS=100000
#        QPS="2000 10000 32000" DURATION=3s MEMCACHED=/usr/bin/memcached
#        OUT_DIR=/tmp/memcached-idle-poll-cpu CARGO_TARGET_DIR=...)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
KEYS=${KEYS:-100000}
QPS=${QPS:-2000 10000 32000}
DURATION=${DURATION:-3s}
MEMCACHED=${MEMCACHED:-$(command -v memcached || true)}
OUT_DIR=${OUT_DIR:-/tmp/memcached-idle-poll-cpu}

die() { echo "memcached-idle-poll-cpu: error: $*" >&2; exit 1; }
[[ -x $MEMCACHED ]] || { echo "SKIPPED: memcached-idle-poll-cpu: memcached is not installed"; exit 0; }
command -v taskset >/dev/null || { echo "SKIPPED: memcached-idle-poll-cpu: taskset is not installed"; exit 0; }
(($(nproc) >= 2)) || die "needs 2 CPUs"

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
target=${CARGO_TARGET_DIR:-$PWD/target}
cargo build --release -q -p memcached
cargo build --release -q -p ebb-bench --bin mc-load
ebb_mc=$target/release/memcached
load=$target/release/mc-load
mkdir -p "$OUT_DIR"
source bench/lib.sh
RUN_ID=0
SERVER_PID=""
trap stop EXIT

serve() {
  PORT=$(free_port)
  local log=$OUT_DIR/server-$1-$RUN_ID.log
  case $1 in
    ebb-poll) EBB_CPUS=1 EBB_IDLE_POLL_US=50 taskset -c 0 "$ebb_mc" -p "$PORT" -m 1024 -c 1024 -t 1 >"$log" 2>&1 & ;;
    ebb-nopoll) EBB_CPUS=1 EBB_IDLE_POLL_US=0 taskset -c 0 "$ebb_mc" -p "$PORT" -m 1024 -c 1024 -t 1 >"$log" 2>&1 & ;;
    memcached)
      local user=()
      [[ $(id -u) == 0 ]] && user=(-u nobody)
      taskset -c 0 "$MEMCACHED" -l 127.0.0.1 -p "$PORT" -U 0 -t 1 -m 1024 -c 1024 "${user[@]}" >"$log" 2>&1 &
      ;;
  esac
  SERVER_PID=$!
  local i
  for ((i = 0; i < 100; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
    sleep 0.05
  done
  cat "$log" >&2
  die "$1 did not start"
}

# ticks PID FIELD -> clock ticks of user (14) or system (15) time
ticks() { awk -v f="$2" '{ print $f }' "/proc/$1/stat"; }

common=(--pin-core 1 --conns "$CONNS" --workload etc --keys "$KEYS")
hz=$(getconf CLK_TCK)
servers=(ebb-poll ebb-nopoll memcached)
echo "# memcached-idle-poll-cpu: $ROUNDS rounds, $CONNS connections, offered loads $QPS, $DURATION windows"
: >"$OUT_DIR/cpu.txt"
for ((round = 1; round <= ROUNDS; round++)); do
  # Rotate the order each round.
  order=("${servers[@]:round%3}" "${servers[@]:0:round%3}")
  for name in "${order[@]}"; do
    RUN_ID="$round-$name"
    serve "$name"
    "$load" --addr "127.0.0.1:$PORT" "${common[@]}" --closed-loop --preload --warmup 0s --duration 1s >/dev/null
    for qps in $QPS; do
      "$load" --addr "127.0.0.1:$PORT" "${common[@]}" --qps "$qps" --warmup 0s --duration 1s >/dev/null
      u0=$(ticks "$SERVER_PID" 14) s0=$(ticks "$SERVER_PID" 15)
      out=$("$load" --addr "127.0.0.1:$PORT" "${common[@]}" --qps "$qps" --warmup 0s --duration "$DURATION" --json)
      u1=$(ticks "$SERVER_PID" 14) s1=$(ticks "$SERVER_PID" 15)
      n=$(json_field "$out" requests)
      awk -v name="$name" -v qps="$qps" -v rps="$(json_field "$out" rps)" -v p99="$(json_field "$out" p99_us)" \
        -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$hz" -v n="$n" 'BEGIN {
          if (n <= 0) { print name, qps, rps, p99, "nan nan nan"; exit }
          uu = u * 1e6 / hz / n; su = s * 1e6 / hz / n
          printf "%s %s %.0f %s %.2f %.2f %.2f\n", name, qps, rps, p99, uu, su, uu + su }' |
        tee -a "$OUT_DIR/cpu.txt"
    done
    stop
  done
done

{
  echo "| server | offered req/s | achieved req/s | p99 µs | user µs/req | system µs/req | total µs/req |"
  echo "|---|---|---|---|---|---|---|"
  for qps in $QPS; do
    for name in "${servers[@]}"; do
      row="| $name | $qps"
      for col in 3 4 5 6 7; do
        read -r m lo hi < <(awk -v n="$name" -v q="$qps" -v c="$col" '$1 == n && $2 == q { print $c }' "$OUT_DIR/cpu.txt" | stats - 2)
        row+=" | $m [$lo–$hi]"
      done
      echo "$row |"
    done
  done
} | tee "$OUT_DIR/summary.txt"
