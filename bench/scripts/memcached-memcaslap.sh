#!/usr/bin/env bash
# Hosted Ebbflow memcached (apps/memcached, Linux sockets, one core) against memcached
# 1.6 (Debian's, `-t 1`), driven by memcaslap (libmemcached-tools) as an independent
# client: the issue's "same comparisons driven by memcaslap".
#
# memcaslap runs with an ETC-like configuration file (-F, bench/lib.sh's
# memcaslap_etc_config, which says what it holds). One thread (-T 1), CONCS concurrencies (one TCP
# connection each, one request outstanding each: no multi-get), DURATION per run.
#
# Each server runs pinned to CPU 0, started fresh for each run, alternated run by run
# (ROUNDS); memcaslap runs pinned to CPU 1. Both servers: -m 1024 -c 1024. Per run:
# memcaslap's TPS (operations over the whole run, its start included, no warm-up), and
# the server's CPU time (/proc/PID/stat utime + stime around memcaslap) divided by the
# requests the server counted (`stats` cmd_get + cmd_set before and after). Summary per
# concurrency: median [min-max] of both, and ebb / memcached per round (back-to-back
# runs) with its median and range; "parity" when the two servers' TPS ranges overlap.
# Raw output in OUT_DIR.
#
# SERVERS (default "ebb memcached") may add ebb-nopoll: ours with EBB_IDLE_POLL_US=0 (an
# idle core sleeps in epoll_wait at once instead of polling for 50 µs), to see what the
# polling does on a CPU shared with other work.
#
# Usage: bench/scripts/memcached-memcaslap.sh   (env: ROUNDS=3 CONCS="1 8 32"
#        DURATION=5s SERVERS="ebb memcached" OUT_DIR=/tmp/memcached-memcaslap
#        CARGO_TARGET_DIR=...)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
CONCS=${CONCS:-1 8 32}
DURATION=${DURATION:-5s}
OUT_DIR=${OUT_DIR:-/tmp/memcached-memcaslap}
read -r -a servers <<<"${SERVERS:-ebb memcached}"

die() { echo "memcached-memcaslap: error: $*" >&2; exit 1; }
for t in memcached memcaslap taskset python3; do
  command -v "$t" >/dev/null || { echo "SKIPPED: memcached-memcaslap: $t is not installed"; exit 0; }
done
(($(nproc) >= 2)) || die "needs 2 CPUs"

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
target=${CARGO_TARGET_DIR:-$PWD/target}
cargo build --release -q -p memcached
ebb_mc=$target/release/memcached
mkdir -p "$OUT_DIR"
# shellcheck source=bench/lib.sh
source bench/lib.sh

cfg=$OUT_DIR/etc.cfg
memcaslap_etc_config "$cfg"

SERVER_PID=""
trap stop EXIT


# serve NAME: the server on CPU 0 on a free port; sets SERVER_PID and PORT
serve() {
  PORT=$(free_port)
  local log=$OUT_DIR/server-$1-$RUN_ID.log
  case $1 in
    ebb) EBB_CPUS=1 taskset -c 0 "$ebb_mc" -p "$PORT" -m 1024 -c 1024 -t 1 >"$log" 2>&1 & ;;
    ebb-nopoll) EBB_CPUS=1 EBB_IDLE_POLL_US=0 taskset -c 0 "$ebb_mc" -p "$PORT" -m 1024 -c 1024 \
      -t 1 >"$log" 2>&1 & ;;
    memcached)
      local user=()
      [[ $(id -u) == 0 ]] && user=(-u nobody)
      taskset -c 0 memcached -l 127.0.0.1 -p "$PORT" -U 0 -t 1 -m 1024 -c 1024 "${user[@]}" >"$log" 2>&1 &
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

hz=$(getconf CLK_TCK)
# Other work on the machine moves both servers' figures; say how busy it was.
busy() { echo "load average $(cut -d' ' -f1-3 /proc/loadavg)$(sed -n 's/^some avg10=\([^ ]*\) avg60=\([^ ]*\).*/, CPU pressure avg10 \1 % avg60 \2 %/p' /proc/pressure/cpu 2>/dev/null)"; }
echo "# memcached-memcaslap: $ROUNDS rounds, concurrencies $CONCS, $DURATION per run, servers" \
  "${servers[*]}; $(git rev-parse --short HEAD) $(date -u +%FT%TZ); $(busy)"
: >"$OUT_DIR/runs.txt"
for conc in $CONCS; do
  for ((round = 1; round <= ROUNDS; round++)); do
    order=("${servers[@]}")
    if ((round % 2 == 0)); then # alternate: reversed in even rounds
      order=()
      for ((i = ${#servers[@]} - 1; i >= 0; i--)); do order+=("${servers[i]}"); done
    fi
    for name in "${order[@]}"; do
      RUN_ID="$conc-$round-$name"
      serve "$name"
      n0=$(mc_requests "$PORT")
      before=$(cpu_ticks "$SERVER_PID")
      out=$(taskset -c 1 memcaslap -s "127.0.0.1:$PORT" -F "$cfg" -t "$DURATION" -c "$conc" -T 1 2>&1) ||
        { echo "$out" >&2; die "memcaslap failed against $name"; }
      after=$(cpu_ticks "$SERVER_PID")
      n1=$(mc_requests "$PORT")
      echo "$out" >"$OUT_DIR/memcaslap-$RUN_ID.txt"
      tps=$(sed -n 's/.*TPS: *\([0-9]*\).*/\1/p' <<<"$out" | tail -n1)
      misses=$(sed -n 's/^get_misses: *\([0-9]*\).*/\1/p' <<<"$out" | tail -n1)
      cpu=$(awk -v t=$((after - before)) -v hz="$hz" -v n=$((n1 - n0)) \
        'BEGIN { if (n > 0) printf "%.2f", t * 1e6 / hz / n; else print "nan" }')
      echo "$conc $round $name $tps $((n1 - n0)) $cpu ${misses:-?}" | tee -a "$OUT_DIR/runs.txt"
      stop
    done
  done
done

echo "# after: $(busy)"
python3 - "$OUT_DIR/runs.txt" <<'PY' | tee "$OUT_DIR/summary.md"
import collections, statistics, sys
runs = collections.defaultdict(dict)
names = []
for line in open(sys.argv[1]):
    conc, rnd, name, tps, n, cpu, misses = line.split()
    runs[int(conc)][(int(rnd), name)] = (float(tps), float(cpu), misses)
    if name not in names:
        names.append(name)
def mmm(v, f="{:.0f}"):
    return f"{f.format(statistics.median(v))} [{f.format(min(v))}–{f.format(max(v))}]"
print("\n| concurrency | server | ops/s (memcaslap TPS) | server CPU µs/req | ÷ memcached per round | median [min–max] | verdict |")
print("|---|---|---|---|---|---|---|")
for conc in sorted(runs):
    r = runs[conc]
    rounds = sorted({k[0] for k in r})
    m = [r[(i, "memcached")][0] for i in rounds]
    for name in names:
        t = [r[(i, name)][0] for i in rounds]
        c = [r[(i, name)][1] for i in rounds]
        row = f"| {conc} | {name} | {mmm(t)} | {mmm(c, '{:.1f}')} |"
        if name == "memcached":
            row += " | | |"
        else:
            ratios = [a / b for a, b in zip(t, m)]
            overlap = min(t) <= max(m) and min(m) <= max(t)
            verdict = "parity (ranges overlap)" if overlap else (
                f"{name} ahead" if statistics.median(t) > statistics.median(m) else "memcached ahead")
            row += (f" {' '.join(f'{x:.2f}' for x in ratios)} | {statistics.median(ratios):.2f} "
                    f"[{min(ratios):.2f}–{max(ratios):.2f}] | {verdict} |")
        print(row)
PY
