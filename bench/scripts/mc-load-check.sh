#!/usr/bin/env bash
# mc-load against memcaslap on the same memcached: do the two generators agree on the
# closed-loop throughput of one server?
#
# Starts Debian's memcached (`memcached -t 1 -U 0 -m 1024`, one worker thread, pinned to
# SERVER_CPU, default 0, listening on 127.0.0.1:PORT only) and, ROUNDS times, runs
#   memcaslap -s 127.0.0.1:PORT -t DURATIONs -c CONNS -T 1 -X VALUE      (pinned to CLIENT_CPU)
#   mc-load --closed-loop --depth 1 --conns CONNS --workload fixed --key-size 64
#           --value-size VALUE --get-ratio 0.9 --keys CONNS*10000 --pin-core CLIENT_CPU
# in alternating order (drift from the other load on the machine hits both alike).
# Why these mc-load arguments: without a config file (-F) memcaslap uses 64-byte keys,
# a 0.9 get / 0.1 set mix, -X for the value size, one outstanding request per
# concurrency (TCP, no multi-get), and a task window of 10k keys per concurrency, so
# CONNS*10k distinct keys, each set before it is read (no misses). mc-load preloads the
# same number of keys once (round 1) so its gets hit too, and measures DURATION after a
# 1 s warm-up; memcaslap has no warm-up (its TPS covers the whole run, set-up included).
# Prints every round and the medians, and the ratio mc-load ÷ memcaslap.
#
# Usage: bench/scripts/mc-load-check.sh   (env: ROUNDS=3 DURATION=5 CONNS=32 VALUE=64
#        PORT=<free port> SERVER_CPU=0 CLIENT_CPU=1 MC_LOAD=<path, else built here>)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNS=${CONNS:-32}
VALUE=${VALUE:-64}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}

for tool in memcached memcaslap taskset ss python3 /usr/bin/time; do
    if ! command -v "$tool" >/dev/null; then
        echo "SKIPPED: mc-load-check: $tool is not installed (apt-get install memcached libmemcached-tools)"
        exit 0
    fi
done

cd "$(dirname "$0")/../.."
if [[ -z ${MC_LOAD:-} ]]; then
    cargo build --release -p ebb-bench --bin mc-load >&2
    MC_LOAD=${CARGO_TARGET_DIR:-target}/release/mc-load
fi

# A port nobody listens on: other memcacheds on this machine must not get our load.
if [[ -z ${PORT:-} ]]; then
    for _ in $(seq 50); do
        PORT=$((30000 + RANDOM % 20000))
        ss -Hltn "sport = :$PORT" | grep -q . || break
    done
fi
if ss -Hltn "sport = :$PORT" | grep -q .; then
    echo "mc-load-check: port $PORT is in use" >&2
    exit 1
fi

user=()
[[ $(id -u) == 0 ]] && user=(-u nobody) # memcached refuses to run as root without -u
taskset -c "$SERVER_CPU" memcached -t 1 -p "$PORT" -U 0 -m 1024 -l 127.0.0.1 "${user[@]}" &
MC_PID=$!
trap 'kill $MC_PID 2>/dev/null; wait $MC_PID 2>/dev/null || true' EXIT
for _ in $(seq 50); do
    ss -Hltn "sport = :$PORT" | grep -q . && break
    sleep 0.1
done
echo "memcached $(memcached -V | cut -d' ' -f2) pid $MC_PID on 127.0.0.1:$PORT, CPU $SERVER_CPU;" \
    "clients on CPU $CLIENT_CPU; $CONNS conns, 64 B keys, $VALUE B values, get ratio 0.9, ${DURATION}s"

memcaslap_run() {
    local out
    # /usr/bin/time adds its CPU time (user system, seconds) as the last line.
    out=$(/usr/bin/time -f '%U %S' taskset -c "$CLIENT_CPU" memcaslap -s "127.0.0.1:$PORT" \
        -t "${DURATION}s" -c "$CONNS" -T 1 -X "$VALUE" 2>&1)
    # "Run time: 5.0s Ops: 107272 TPS: 21426 Net_rate: 4.3M/s" and cmd_get/cmd_set/get_misses
    python3 -c '
import re, sys
t = sys.stdin.read()
g = lambda k: int(re.search(k + r":\s*(\d+)", t).group(1))
tps = int(re.search(r"TPS:\s*(\d+)", t).group(1))
ops = int(re.search(r"Ops:\s*(\d+)", t).group(1))
user, system = map(float, t.strip().splitlines()[-1].split())
# CPU per operation over the whole process, start-up included.
print(tps, g("cmd_get"), g("cmd_set"), g("get_misses"), round((user + system) / ops * 1e6, 2))' <<<"$out"
}

preload=(--preload)
mc_load_run() {
    "$MC_LOAD" --addr "127.0.0.1:$PORT" --pin-core "$CLIENT_CPU" --closed-loop --depth 1 \
        --conns "$CONNS" --workload fixed --key-size 64 --value-size "$VALUE" \
        --get-ratio 0.9 --keys $((CONNS * 10000)) --warmup 1s --duration "${DURATION}s" \
        "${preload[@]}" --json |
        python3 -c '
import json, sys
o = json.load(sys.stdin)
print(round(o["rps"]), o["gets"], o["sets"], o["hit_ratio"], o["errors"], o["p50_us"], o["p99_us"],
      o["client_cpu_pct"], round(o["client_cpu_pct"] / 100 / max(o["rps"], 1) * 1e6, 2))'
    preload=()
}

# Other work on the machine moves both tools' figures; say how busy it was.
load() { echo "load average $(cut -d' ' -f1-3 /proc/loadavg)$(sed -n 's/^some avg10=\([^ ]*\) avg60=\([^ ]*\).*/, CPU pressure avg10 \1 % avg60 \2 %/p' /proc/pressure/cpu 2>/dev/null)"; }
echo "before: $(load)"
printf '%-6s %-10s %10s %10s %10s %s\n' round tool req/s gets sets detail
ms=()
ml=()
for r in $(seq "$ROUNDS"); do
    order=(memcaslap mc-load)
    ((r % 2 == 0)) && order=(mc-load memcaslap)
    for tool in "${order[@]}"; do
        if [[ $tool == memcaslap ]]; then
            read -r tps gets sets misses cpu_op < <(memcaslap_run)
            ms+=("$tps")
            printf '%-6s %-10s %10s %10s %10s get_misses=%s client_cpu_per_op=%sus\n' \
                "$r" memcaslap "$tps" "$gets" "$sets" "$misses" "$cpu_op"
        else
            read -r rps gets sets hit errors p50 p99 cpu cpu_op < <(mc_load_run)
            ml+=("$rps")
            printf '%-6s %-10s %10s %10s %10s hit_ratio=%s errors=%s p50=%sus p99=%sus client_cpu=%s%% client_cpu_per_op=%sus\n' \
                "$r" mc-load "$rps" "$gets" "$sets" "$hit" "$errors" "$p50" "$p99" "$cpu" "$cpu_op"
        fi
    done
done

echo "after: $(load)"
python3 - "${ms[*]}" "${ml[*]}" <<'EOF'
import statistics, sys
ms = [float(v) for v in sys.argv[1].split()]
ml = [float(v) for v in sys.argv[2].split()]
a, b = statistics.median(ms), statistics.median(ml)
# Each round's two runs are back to back, so a round's ratio shares its load.
paired = [y / x for x, y in zip(ms, ml)]
print(f"median req/s: memcaslap {a:.0f} [{min(ms):.0f}-{max(ms):.0f}], "
      f"mc-load {b:.0f} [{min(ml):.0f}-{max(ml):.0f}]; mc-load / memcaslap = {b / a:.3f}")
print("per-round mc-load / memcaslap: " + " ".join(f"{r:.2f}" for r in paired)
      + f"; median {statistics.median(paired):.3f}")
EOF
