#!/usr/bin/env bash
# The memcached comparison a skeptic accepts (issue 23, build point 4): every server
# against Debian's memcached 1.6.18 `-t 1`, in the same run, on ONE offered-load grid,
# driven by three clients, ROUNDS rounds with the servers alternated, raw CSVs kept.
#
# Servers (SERVERS, space-separated; each started fresh for every client of every round):
#   memcached   Debian's memcached `-t 1 SERVER_ARGS` (nothing else changed)
#   ebb         apps/memcached hosted on Linux sockets (release build, EBB_CPUS=1, -t 1)
#   ebb-pollN   the same with its idle-poll window set to N µs (EBB_IDLE_POLL_US=N; 0: no spin)
#   ebb-xdp     apps/memcached hosted on ebb-net over AF_XDP: `--xdp VETH --ip 10.0.5.1/24`
#               on the host end of the veth (SKIPPED while the binary has no --xdp)
#   native-xdp  ebb-vmm booting the native memcached image, one vCPU, `--net xdp=VETH`,
#               the guest at 10.0.5.1 (SKIPPED while ebb-vmm has no xdp= backend)
#   native-tap  the same over a TAP device (`--net tap=NAME`), the TAP's kernel end in the
#               client's namespace as 10.0.2.2/24, the guest at 10.0.2.15 (as
#               memcached-native.sh)
#   main        the README's main job: `ebb run memcached -- -t 1` (one vCPU, from -t),
#               its default rootless network, a free loopback port published to the
#               guest's 11211 (`-p 127.0.0.1:PORT:11211`), `--mem 1536M` for SERVER_ARGS'
#               -m; NET=lo only; every thread of the ebb process and of its children
#               (passt) counted and pinned to SERVER_CPU
#   main-passt  the same with `--net passt`: every frame through passt (the main job's
#               path before the in-monitor forwards), for comparison
#   main-default  the README's command as it is, without `-t 1`: as many vCPUs as the
#               host has CPUs (run it with SERVER_CPU=0,1 to leave it unpinned, as a user
#               would)
#   main-niceN  `main` with its vCPU at nice N below the device thread on their shared CPU
#               (EBB_VMM_VCPU_NICE=N; the default is ebb_vmm::VCPU_NICE_ON_SHARED_CPUS)
#   main-normal-io  `main` with its device thread kept at normal priority
#               (EBB_VMM_IO_REAL_TIME=0; as root it runs at SCHED_FIFO 1 by default)
# Every server runs pinned to SERVER_CPU (1), the whole process (for ebb-vmm: the vCPU,
# the device thread and the main thread); every client runs pinned to CLIENT_CPU (0).
#
# The path: with only memcached and ebb (NET=lo, the default then) the client reaches the
# servers over loopback. With an AF_XDP or TAP server in SERVERS (NET=veth, the default
# then), or NET=veth, every server is reached through the SAME veth pair: one queue each
# way, the peer in a network namespace (10.0.5.2/24, `ethtool -K peer tx-checksumming
# off`, as a local sender's partial checksums would not be completed for AF_XDP) where
# the clients run; memcached and ebb listen on the host end (10.0.5.1), ebb-xdp and
# native-xdp own it (its kernel address is removed while they run).
#
# Clients (CLIENTS), each at every offered load in LOADS (total requests/s over CONNS
# connections, the same grid for every server), DURATION seconds a point:
#   memtier    memtier_benchmark (MEMTIER=path; not packaged in Debian 12, build it from
#              github.com/RedisLabs/memtier_benchmark), memcache_text, one thread, CONNS
#              connections, `--rate-limiting LOAD/CONNS`: EVENLY SPACED requests per
#              connection; set:get 1:9, values 1-1024 B uniform, KEYS keys uniform,
#              preloaded once per server start; p50/p99 are memtier's (from the request's
#              write, so a late send hides its wait: see the achieved rate)
#   memtier-closed  the same memtier run with no rate limit: CLOSED LOOP (one request in
#              flight per connection), one run per server and round, not on the grid: its
#              throughput and p50/p99 (the issue's first measurement of the main job)
#   memcaslap  memcaslap (libmemcached-tools), one thread, CONNS concurrencies, bench/lib.sh's
#              ETC-like mix, CLOSED LOOP (one request in flight per concurrency): one run
#              per server and round, not on the grid, because its `--tps` does not pace
#              (Debian's 1.1.4: ms_need_yield divides operations by elapsed µs in integer
#              arithmetic, so the rate it compares is 0 below 1M/s per connection;
#              `memcaslap -c 1 -T 1 --tps=1k` runs at ~20k/s here). It prints no
#              percentiles: its throughput and CPU per request (at its own load) only
#   mc-load    bench's mc-load, open loop, PACED by POISSON arrivals at LOAD over CONNS
#              connections (a request is sent at its time whether or not earlier ones
#              were answered), ETC (keys 20-70 B, values 1-1024 B, 30:1, Zipf 0.99) over
#              KEYS preloaded keys, 1 s warm-up then DURATION; latency from the scheduled
#              send
#
# Per point (one CSV row): offered and achieved requests/s; p50/p99 µs; the client's CPU
# (percent of its core: /usr/bin/time's user+system over its run, mc-load's own over its
# window) - a point whose client used >= CLIENT_BOUND_PCT % is labelled `client-bound`,
# one short of 95 % of its offered load `short`; the server's CPU per request, user and
# system separately (/proc/PID/stat of every server process, all threads) and the
# softirq time of each of the two CPUs (/proc/stat) per request, over the client's run,
# divided by the requests the server counted in it (`stats` cmd_get + cmd_set before
# and after). softirq caveat: this kernel has no IRQ_TIME_ACCOUNTING, so a softirq tick
# that interrupts the server is in its system time as well as in /proc/stat's softirq:
# user + system + softirq is an upper bound of "all CPU counted"; both servers alike.
# softirq is the whole CPU's, other work on the machine included.
#
# System calls per request (SYSCALLS=1): after the grid, one more window at CPU_LOAD per
# server and round with the first client in CLIENTS that takes a load (memtier, else
# mc-load), under `perf stat -e raw_syscalls:sys_enter -p PID` (every server process, all
# threads), divided by the requests the server counted. It is a window of its own as
# perf's counting costs the server a little.
#
# Throughput at SLO (per server, client and round): the highest offered load whose point
# AND EVERY LOWER ONE has p99 <= SLO_US and reached 95 % of its offered load; 0 when the
# lowest point fails. Summary: medians with [min-max] over the rounds, per-round ratios
# to memcached (both servers' runs of a round are back to back) with their median and
# range, "parity" where the two servers' ranges overlap; host CPU per request compared at
# CPU_LOAD (one of LOADS) under evenly spaced (memtier) and paced (mc-load) load.
#
# Output: OUT/STAMP-points.csv, OUT/STAMP-syscalls.csv, OUT/STAMP-summary.md (OUT
# defaults to bench/results/skeptic, STAMP to the UTC date and time); server and client
# logs in WORK_DIR. NOTE is written into the summary (say how busy the machine was).
#
# Usage: bench/scripts/memcached-skeptic.sh   (root for veth/TAP/AF_XDP and perf;
#        env: SERVERS="memcached ebb" CLIENTS="memtier memcaslap mc-load" ROUNDS=5
#        LOADS="8000 16000 32000 48000 64000 80000 96000" CPU_LOAD=32000 CONNS=32
#        KEYS=100000 DURATION=5 SLO_US=500 SERVER_CPU=1 CLIENT_CPU=0 CLIENT_BOUND_PCT=90
#        SERVER_ARGS="-m 1024 -c 1024" MEMTIER=memtier_benchmark NET=lo|veth SYSCALLS=1
#        OUT=bench/results/skeptic STAMP=... WORK_DIR=/tmp/memcached-skeptic NOTE=...
#        CARGO_TARGET_DIR=...)
set -euo pipefail

SERVERS=${SERVERS:-memcached ebb}
CLIENTS=${CLIENTS:-memtier memcaslap mc-load}
ROUNDS=${ROUNDS:-5}
LOADS=${LOADS:-8000 16000 32000 48000 64000 80000 96000}
CPU_LOAD=${CPU_LOAD:-32000}
CONNS=${CONNS:-32}
KEYS=${KEYS:-100000}
DURATION=${DURATION:-5}
SLO_US=${SLO_US:-500}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
CLIENT_BOUND_PCT=${CLIENT_BOUND_PCT:-90}
SERVER_ARGS=${SERVER_ARGS:--m 1024 -c 1024}
MEMTIER=${MEMTIER:-$(command -v memtier_benchmark || true)}
SYSCALLS=${SYSCALLS:-1}
NOTE=${NOTE:-}
WORK_DIR=${WORK_DIR:-/tmp/memcached-skeptic}

me=memcached-skeptic
die() { echo "$me: error: $*" >&2; exit 1; }
skip() { echo "SKIPPED: $me: $1"; exit 0; }
for t in memcached taskset python3 /usr/bin/time; do
  command -v "$t" >/dev/null || skip "$t is not installed"
done
(($(nproc) >= 2)) || skip "needs 2 CPUs"
[[ " $LOADS " == *" $CPU_LOAD "* ]] || die "CPU_LOAD $CPU_LOAD is not one of LOADS ($LOADS)"

# Which servers and clients can run here; the others are left out with the reason.
read -r -a want_servers <<<"$SERVERS"
read -r -a want_clients <<<"$CLIENTS"
veth_wanted=0
for s in "${want_servers[@]}"; do
  case $s in
    memcached | ebb | ebb-poll[0-9]* | main | main-passt | main-default | main-nice[0-9]* | main-normal-io) ;;
    ebb-xdp | native-xdp | native-tap) veth_wanted=1 ;;
    *) die "unknown server $s (memcached ebb ebb-pollN ebb-xdp native-xdp native-tap main main-passt main-default main-niceN main-normal-io)" ;;
  esac
done
[[ " $SERVERS " == *" memcached "* ]] || die "SERVERS must include memcached (the baseline)"
NET=${NET:-$( ((veth_wanted)) && echo veth || echo lo)}
[[ $NET == lo || $NET == veth ]] || die "NET is lo or veth, not $NET"
((veth_wanted == 0)) || [[ $NET == veth ]] || die "AF_XDP and TAP servers need NET=veth"
[[ $NET == lo || " $SERVERS " != *" main"* ]] || die "main and main-passt need NET=lo"
if [[ $NET == veth ]]; then
  [[ $(id -u) == 0 ]] || skip "NET=veth needs root (a veth pair and a network namespace)"
  for t in ip ethtool; do command -v "$t" >/dev/null || skip "$t is not installed"; done
fi

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo=$PWD
OUT=${OUT:-$repo/bench/results/skeptic}
STAMP=${STAMP:-$(date -u +%Y-%m-%dT%H%M)}
target=${CARGO_TARGET_DIR:-$repo/target}
mkdir -p "$WORK_DIR" "$OUT"
# shellcheck source=bench/lib.sh
source bench/lib.sh

# Two builds: `-p memcached -p ebb-bench --bin mc-load` would build mc-load alone.
cargo build --release -q -p memcached
cargo build --release -q -p ebb-bench --bin mc-load
ebb_mc=$target/release/memcached
mc_load=$target/release/mc-load
native_wanted=0
for s in "${want_servers[@]}"; do [[ $s == native-* ]] && native_wanted=1; done
if ((native_wanted)); then
  cargo build --release -q -p ebb-vmm
  cargo build --release -q -p memcached --target x86_64-unknown-none
fi
vmm=$target/release/ebb-vmm
image=$target/x86_64-unknown-none/release/memcached
main_wanted=0
for s in "${want_servers[@]}"; do [[ $s == main* ]] && main_wanted=1; done
if ((main_wanted)); then
  cargo build --release -q -p ebb-cli
  # The image once, here, so that no start times a build.
  "$target/release/ebb" build memcached >/dev/null
fi
ebb_cli=$target/release/ebb

# unavailable SERVER -> the reason it cannot run here, or nothing
unavailable() {
  case $1 in
    ebb-xdp)
      # An unknown option fails at once, naming it; a known one gets as far as the device.
      local out
      out=$(timeout 5 "$ebb_mc" --xdp ebbskeptic-none -p 1 2>&1 || true)
      if grep -q "unknown option --xdp" <<<"$out"; then
        echo "apps/memcached has no --xdp option yet (the AF_XDP device is being built)"
      fi
      ;;
    main | main-passt | main-default | main-nice* | main-normal-io)
      [[ -w /dev/kvm ]] || { echo "needs /dev/kvm (the main job would run hosted)"; return; }
      command -v passt >/dev/null || echo "passt is not installed"
      ;;
    native-xdp | native-tap)
      [[ -w /dev/kvm ]] || { echo "needs /dev/kvm"; return; }
      [[ $(id -u) == 0 ]] || { echo "needs root"; return; }
      if [[ $1 == native-xdp ]] && ! "$vmm" --help 2>&1 | grep -q "xdp"; then
        echo "ebb-vmm has no --net xdp= backend yet"
      fi
      ;;
  esac
}
servers=()
for s in "${want_servers[@]}"; do
  why=$(unavailable "$s")
  if [[ -n $why ]]; then echo "SKIPPED: $me: server $s: $why"; else servers+=("$s"); fi
done
clients=()
for c in "${want_clients[@]}"; do
  case $c in
    memtier | memtier-closed)
      if [[ -n $MEMTIER && -x $MEMTIER ]]; then clients+=("$c"); else
        echo "SKIPPED: $me: client $c: MEMTIER is not an executable memtier_benchmark" \
          "(build it from github.com/RedisLabs/memtier_benchmark: autoreconf -i && ./configure && make)"
      fi
      ;;
    memcaslap)
      if command -v memcaslap >/dev/null; then clients+=(memcaslap); else
        echo "SKIPPED: $me: client memcaslap: not installed (libmemcached-tools)"
      fi
      ;;
    mc-load) clients+=(mc-load) ;;
    *) die "unknown client $c (memtier memtier-closed memcaslap mc-load)" ;;
  esac
done
((${#clients[@]} > 0)) || skip "no client can run"
if [[ $SYSCALLS == 1 ]] && ! { command -v perf >/dev/null &&
  perf stat -e raw_syscalls:sys_enter -- true >/dev/null 2>&1; }; then
  echo "SKIPPED: $me: system calls per request: perf cannot count raw_syscalls:sys_enter here"
  SYSCALLS=0
fi

# The network: loopback, or the veth pair (host end $veth, peer in namespace $ns).
ns=ebbsk$$
veth=ebbskv$$
tap=ebbskt$$
in_ns=()
HOST_IP=127.0.0.1
if [[ $NET == veth ]]; then
  in_ns=(ip netns exec "$ns")
  HOST_IP=10.0.5.1
fi
SERVER_PID=""
SERVER_PIDS=""
cleanup() {
  stop
  if [[ $NET == veth ]]; then
    ip link del "$veth" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  fi
}
trap cleanup EXIT
if [[ $NET == veth ]]; then
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "$veth" numtxqueues 1 numrxqueues 1 type veth peer name "${veth}p" \
    numtxqueues 1 numrxqueues 1
  ip link set "${veth}p" netns "$ns"
  ip -n "$ns" addr add 10.0.5.2/24 dev "${veth}p"
  ip netns exec "$ns" ethtool -K "${veth}p" tx-checksumming off >/dev/null
  ip -n "$ns" link set "${veth}p" up
  ip link set "$veth" up
fi

# host_address on|off: the kernel's address on the veth's host end (memcached and ebb on
# sockets need it; ebb-xdp and native-xdp answer for it themselves)
host_address() {
  [[ $NET == veth ]] || return 0
  ip addr flush dev "$veth"
  [[ $1 == off ]] || ip addr add "$HOST_IP/24" dev "$veth"
}

# reachable ADDR PORT: a client-side TCP connect succeeds
reachable() {
  "${in_ns[@]}" python3 -c 'import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1).close()' \
    "$1" "$2" 2>/dev/null
}

# serve NAME: starts server NAME on SERVER_CPU; sets SERVER_PID (to stop), SERVER_PIDS
# (whose CPU counts), ADDR and PORT (where the client reaches it)
serve() {
  local name=$1 log=$WORK_DIR/server-$1-$RUN_ID.log
  local -a args
  read -r -a args <<<"$SERVER_ARGS"
  PORT=$(free_port)
  ADDR=$HOST_IP
  case $name in
    memcached)
      host_address on
      local user=()
      [[ $(id -u) == 0 ]] && user=(-u nobody)
      taskset -c "$SERVER_CPU" memcached -l "$ADDR" -p "$PORT" -U 0 -t 1 "${args[@]}" "${user[@]}" >"$log" 2>&1 &
      ;;
    ebb)
      host_address on
      EBB_CPUS=1 taskset -c "$SERVER_CPU" "$ebb_mc" -l "$ADDR" -p "$PORT" -t 1 "${args[@]}" >"$log" 2>&1 &
      ;;
    ebb-poll*)
      # ebb with its idle-poll window set: ebb-poll0 never spins, ebb-poll10 up to 10 µs
      host_address on
      EBB_IDLE_POLL_US=${name#ebb-poll} EBB_CPUS=1 taskset -c "$SERVER_CPU" "$ebb_mc" -l "$ADDR" \
        -p "$PORT" -t 1 "${args[@]}" >"$log" 2>&1 &
      ;;
    ebb-xdp)
      host_address off
      EBB_CPUS=1 taskset -c "$SERVER_CPU" "$ebb_mc" --xdp "$veth" --ip "$ADDR/24" -p "$PORT" -t 1 \
        "${args[@]}" >"$log" 2>&1 &
      ;;
    native-xdp)
      host_address off
      PORT=11211
      taskset -c "$SERVER_CPU" "$vmm" "$image" --cpus 1 --mem 1536M --net "xdp=$veth" -- \
        --ip "$ADDR/24" -p "$PORT" "${args[@]}" >"$log" 2>&1 &
      ;;
    native-tap)
      PORT=11211
      ADDR=10.0.2.15
      taskset -c "$SERVER_CPU" "$vmm" "$image" --cpus 1 --mem 1536M --net "tap=$tap" -- \
        -p "$PORT" "${args[@]}" >"$log" 2>&1 &
      ;;
    main | main-passt | main-default | main-nice* | main-normal-io)
      local net=() cores=(-t 1) nice=()
      [[ $name == main-passt ]] && net=(--net passt)
      [[ $name == main-default ]] && cores=()
      [[ $name == main-nice* ]] && nice=("EBB_VMM_VCPU_NICE=${name#main-nice}")
      [[ $name == main-normal-io ]] && nice=("EBB_VMM_IO_REAL_TIME=0")
      env "${nice[@]}" taskset -c "$SERVER_CPU" "$ebb_cli" run --mem 1536M "${net[@]}" \
        -p "127.0.0.1:$PORT:11211" memcached -- "${cores[@]}" "${args[@]}" >"$log" 2>&1 &
      ;;
  esac
  SERVER_PID=$!
  SERVER_PIDS=$SERVER_PID
  local i
  if [[ $name == native-tap ]]; then
    for ((i = 0; i < 100; i++)); do
      ip link show "$tap" >/dev/null 2>&1 && grep -q "listening on" "$log" && break
      sleep 0.1
    done
    ip link set "$tap" netns "$ns" || { cat "$log" >&2; die "native-tap: no TAP device $tap"; }
    ip -n "$ns" addr add 10.0.2.2/24 dev "$tap"
    ip -n "$ns" link set "$tap" up
  fi
  for ((i = 0; i < 150; i++)); do
    if reachable "$ADDR" "$PORT"; then
      if [[ $name == main* ]]; then
        # The monitor's children (passt) count too.
        SERVER_PIDS="$SERVER_PID $(pgrep -P "$SERVER_PID" | tr '\n' ' ')"
        # A refused or reset connect may be passt's before the guest listens.
        sleep 0.5
      fi
      return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  cat "$log" >&2
  die "$name is not reachable at $ADDR:$PORT"
}

# requests -> cmd_get + cmd_set of the running server (asked from the client's side)
requests() { "${in_ns[@]}" bash -c "source bench/lib.sh && mc_requests $PORT $ADDR"; }

hz=$(getconf CLK_TCK)
# snapshot -> "user system softirq_cpu0 softirq_cpu1" ticks: the server processes'
# (all threads) and the two CPUs' softirq time
snapshot() {
  local u=0 s=0 pid
  for pid in $SERVER_PIDS; do
    read -r a b < <(awk '{ print $14, $15 }' "/proc/$pid/stat")
    u=$((u + a)) s=$((s + b))
  done
  echo "$u $s $(awk '$1 == "cpu0" { a = $8 } $1 == "cpu1" { b = $8 } END { print a, b }' /proc/stat)"
}

memcaslap_cfg=$WORK_DIR/etc.cfg
memcaslap_etc_config "$memcaslap_cfg"

# preload CLIENT: fills the keys CLIENT's gets ask for (memcaslap sets its own)
preload() {
  case $1 in
    memtier | memtier-closed)
      "${in_ns[@]}" taskset -c "$CLIENT_CPU" "$MEMTIER" -s "$ADDR" -p "$PORT" -P memcache_text -t 1 \
        -c 8 --ratio=1:0 --key-pattern=P:P --key-minimum=1 --key-maximum="$KEYS" \
        --data-size-range=1-1024 --data-size-pattern=R --requests=allkeys --hide-histogram \
        >"$WORK_DIR/preload-$RUN_ID.log" 2>&1 || { cat "$WORK_DIR/preload-$RUN_ID.log" >&2; die "memtier preload failed"; }
      ;;
    mc-load)
      "${in_ns[@]}" "$mc_load" --addr "$ADDR:$PORT" --pin-core "$CLIENT_CPU" --conns "$CONNS" \
        --workload etc --keys "$KEYS" --closed-loop --preload --warmup 0s --duration 1s >/dev/null
      ;;
  esac
}

# drive CLIENT LOAD: one point; prints "achieved p50_us p99_us client_cpu_pct"
drive() {
  local client=$1 load=$2 log=$WORK_DIR/$1-$RUN_ID-$2
  case $client in
    memtier | memtier-closed)
      local pacing=()
      [[ $client == memtier ]] && pacing=(--rate-limiting="$((load / CONNS))")
      "${in_ns[@]}" /usr/bin/time -f '%e %U %S' -o "$log.time" taskset -c "$CLIENT_CPU" "$MEMTIER" \
        -s "$ADDR" -p "$PORT" -P memcache_text -t 1 -c "$CONNS" --ratio=1:9 --key-pattern=R:R \
        --key-minimum=1 --key-maximum="$KEYS" --data-size-range=1-1024 --data-size-pattern=R \
        --test-time="$DURATION" "${pacing[@]}" --hide-histogram --print-percentiles=50,99 \
        --json-out-file="$log.json" >"$log.txt" 2>&1 || { cat "$log.txt" >&2; die "memtier failed"; }
      python3 - "$log.json" "$log.time" "$DURATION" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["ALL STATS"]
t = j["Totals"]
# The window asked for: memtier's "Total duration" is sometimes a second short of it (seen
# with --test-time=2: 1018 ms beside a Count of two seconds' requests).
secs = float(sys.argv[3])
p = t["Percentile Latencies"]
wall, user, system = map(float, open(sys.argv[2]).read().split()[-3:])
print(round(t["Count"] / secs, 1), round(p["p50.00"] * 1000, 1), round(p["p99.00"] * 1000, 1),
      round(100 * (user + system) / wall, 1))
PY
      ;;
    memcaslap)
      "${in_ns[@]}" /usr/bin/time -f '%e %U %S' -o "$log.time" taskset -c "$CLIENT_CPU" memcaslap \
        -s "$ADDR:$PORT" -F "$memcaslap_cfg" -t "${DURATION}s" -c "$CONNS" -T 1 \
        >"$log.txt" 2>&1 || { cat "$log.txt" >&2; die "memcaslap failed"; }
      python3 - "$log.txt" "$log.time" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
tps = re.findall(r"TPS:\s*(\d+)", out)
if not tps:
    sys.exit("no TPS in memcaslap's output")
wall, user, system = map(float, open(sys.argv[2]).read().split()[-3:])
print(tps[-1], "nan", "nan", round(100 * (user + system) / wall, 1))
PY
      ;;
    mc-load)
      "${in_ns[@]}" taskset -c "$CLIENT_CPU" "$mc_load" --addr "$ADDR:$PORT" --pin-core "$CLIENT_CPU" \
        --conns "$CONNS" --workload etc --keys "$KEYS" --qps "$load" --warmup 1s \
        --duration "${DURATION}s" --json >"$log.json" 2>"$log.txt" || { cat "$log.txt" >&2; die "mc-load failed"; }
      python3 - "$log.json" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
print(o["rps"], o["p50_us"], o["p99_us"], o["client_cpu_pct"])
PY
      ;;
  esac
}

kind_of() { case $1 in memtier) echo evenly-spaced ;; memcaslap | memtier-closed) echo closed-loop ;; mc-load) echo paced-poisson ;; esac; }
# loads_of CLIENT -> its grid (a closed-loop client: one point)
loads_of() { if [[ $(kind_of "$1") == closed-loop ]]; then echo closed; else echo "$LOADS"; fi; }

# The system calls' window runs at CPU_LOAD: with the first client that takes a load.
syscall_client=""
for c in "${clients[@]}"; do [[ -n $syscall_client || $(kind_of "$c") == closed-loop ]] || syscall_client=$c; done
points_csv=$OUT/$STAMP-points.csv
syscalls_csv=$OUT/$STAMP-syscalls.csv
summary_md=$OUT/$STAMP-summary.md
echo "round,client,load_kind,server,offered_rps,achieved_rps,p50_us,p99_us,client_cpu_pct,server_requests,server_user_us_per_req,server_sys_us_per_req,softirq_cpu0_us_per_req,softirq_cpu1_us_per_req,label" >"$points_csv"
echo "round,client,server,offered_rps,server_requests,syscalls,syscalls_per_req" >"$syscalls_csv"

busy() { echo "load average $(cut -d' ' -f1-3 /proc/loadavg)$(sed -n 's/^some avg10=\([^ ]*\) avg60=\([^ ]*\).*/, CPU pressure avg10 \1 % avg60 \2 %/p' /proc/pressure/cpu 2>/dev/null)"; }
header="$(git describe --always --dirty --abbrev=7) $(date -u +%FT%TZ); servers ${servers[*]}; clients ${clients[*]}; $ROUNDS rounds; loads $LOADS; $CONNS connections; ${DURATION}s a point; NET=$NET; server CPU $SERVER_CPU, client CPU $CLIENT_CPU"
echo "# $me: $header"
echo "# before: $(busy)"
before_busy=$(busy)

for ((round = 1; round <= ROUNDS; round++)); do
  round_order "$round" "${servers[@]}"
  for client in "${clients[@]}"; do
    for name in "${ORDER[@]}"; do
      RUN_ID=$round-$client-$name
      serve "$name"
      preload "$client"
      for load in $(loads_of "$client"); do
        n0=$(requests)
        read -r u0 s0 q0 r0 <<<"$(snapshot)"
        point=$(drive "$client" "$load") || die "$client against $name at $load failed"
        read -r achieved p50 p99 ccpu <<<"$point"
        read -r u1 s1 q1 r1 <<<"$(snapshot)"
        n1=$(requests)
        row=$(awk -v n=$((n1 - n0)) -v hz="$hz" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v q=$((q1 - q0)) \
          -v r=$((r1 - r0)) -v a="$achieved" -v o="$load" -v c="$ccpu" -v bound="$CLIENT_BOUND_PCT" 'BEGIN {
            f = n > 0 ? 1e6 / hz / n : 0
            label = ""
            if (c + 0 >= bound) label = "client-bound"
            if (o != "closed" && a + 0 < 0.95 * o) label = label (label == "" ? "" : " ") "short"
            printf "%d,%.2f,%.2f,%.2f,%.2f,%s", n, u * f, s * f, q * f, r * f, label }')
        line="$round,$client,$(kind_of "$client"),$name,$load,$achieved,$p50,$p99,$ccpu,$row"
        echo "$line" >>"$points_csv"
        echo "$line"
      done
      if [[ $SYSCALLS == 1 && $client == "$syscall_client" ]]; then
        RUN_ID=$RUN_ID-syscalls
        perf_out=$WORK_DIR/perf-$RUN_ID.csv
        perf stat -x, -e raw_syscalls:sys_enter -p "${SERVER_PIDS// /,}" -o "$perf_out" &
        perf_pid=$!
        sleep 0.3
        n0=$(requests)
        drive "$client" "$CPU_LOAD" >/dev/null || die "$client against $name (system calls) failed"
        n1=$(requests)
        kill -INT "$perf_pid"
        wait "$perf_pid" || true
        calls=$(awk -F, '$3 ~ /raw_syscalls:sys_enter/ { print $1 }' "$perf_out")
        line=$(awk -v n=$((n1 - n0)) -v c="$calls" -v r="$round" -v cl="$client" -v s="$name" -v o="$CPU_LOAD" \
          'BEGIN { printf "%s,%s,%s,%s,%d,%s,%.3f", r, cl, s, o, n, c, (n > 0 ? c / n : 0) }')
        echo "$line" >>"$syscalls_csv"
        echo "syscalls: $line"
      fi
      stop
    done
  done
done
after_busy=$(busy)
echo "# after: $after_busy"

python3 - "$points_csv" "$syscalls_csv" "$SLO_US" "$CPU_LOAD" "$header" "$before_busy" "$after_busy" "$NOTE" \
  "$(basename "$points_csv")" "$(basename "$syscalls_csv")" <<'PY' | tee "$summary_md"
import collections, csv, statistics, sys

points_csv, syscalls_csv, slo, cpu_load, header, before, after, note, pname, sname = sys.argv[1:]
slo, cpu_load = float(slo), float(cpu_load)
rows = list(csv.DictReader(open(points_csv)))
calls = list(csv.DictReader(open(syscalls_csv)))

def f(v):
    try:
        return float(v)
    except ValueError:
        return float("nan")

def mmm(v, fmt="{:.0f}"):
    v = [x for x in v if x == x]
    if not v:
        return "–"
    return f"{fmt.format(statistics.median(v))} [{fmt.format(min(v))}–{fmt.format(max(v))}]"

def compare(a, b):
    """Per-round ratios a/b, their median [range], and the verdict from the ranges."""
    pairs = [(x, y) for x, y in zip(a, b) if x == x and y == y]
    if not pairs:
        return "–", "–", "–"
    pairs = [(x, y) for x, y in pairs if y]
    if not pairs:
        return "–", "–", "–"
    ratios = [x / y for x, y in pairs]
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    overlap = min(xs) <= max(ys) and min(ys) <= max(xs)
    verdict = "parity (ranges overlap)" if overlap else ("higher" if statistics.median(xs) > statistics.median(ys) else "lower")
    return " ".join(f"{r:.2f}" for r in ratios), mmm(ratios, "{:.2f}"), verdict

servers, clients = [], []
for r in rows:
    if r["server"] not in servers:
        servers.append(r["server"])
    if r["client"] not in clients:
        clients.append(r["client"])
rounds = sorted({int(r["round"]) for r in rows})
others = [s for s in servers if s != "memcached"]
by = collections.defaultdict(list)  # (client, server, round) -> rows by load
for r in rows:
    by[(r["client"], r["server"], int(r["round"]))].append(r)

def passes(r):
    return f(r["p99_us"]) <= slo and f(r["achieved_rps"]) >= 0.95 * f(r["offered_rps"])

def at_slo(points):
    """(highest passing load with every lower one passing, mark): mark "+" when every
    point passed (the grid ended before the server did), "c" when the first failing
    point, or a passing one, had a client-bound client (the client, not the server, may
    have set the limit)."""
    best, mark = 0.0, "+"
    for r in sorted(points, key=lambda r: f(r["offered_rps"])):
        bound = "client-bound" in r["label"].split()
        if not passes(r):
            mark = "c" if bound else ""
            break
        if bound:
            mark = "c"
        best = f(r["offered_rps"])
    return best, mark

def ratio_table(what, per_round):
    """A table of each server's figure per round (`per_round(server)`: (value, mark)
    pairs), its median [range], and its per-round ratios to memcached's."""
    print(f"| server | {what}, per round | median [min–max] | ÷ memcached per round | median [min–max] | verdict |")
    print("|---|---|---|---|---|---|")
    base = [x for x, _ in per_round("memcached")]
    for s in servers:
        vm = per_round(s)
        v = [x for x, _ in vm]
        row = f"| {s} | {' '.join(f'{x:.0f}{m}' for x, m in vm)} | {mmm(v)} |"
        if s == "memcached":
            row += " | | |"
        else:
            per, med, verdict = compare(v, base)
            row += f" {per} | {med} | {verdict} |"
        print(row)
    print()

print("# memcached-skeptic summary\n")
if note:
    print(f"**{note}**\n")
print(f"Run: {header}.  \nMachine before: {before}; after: {after}.  \nRaw: `{pname}`, `{sname}`.\n")
print(f"Throughput at SLO = the highest offered load at which that point and every lower one "
      f"has p99 ≤ {slo:.0f} µs and reached 95 % of its offered load. Medians [min–max] over "
      f"{len(rounds)} rounds; ratios are per round (the servers' runs of a round are back to back).\n")

for client in clients:
    kind = next(r["load_kind"] for r in rows if r["client"] == client)
    has_p99 = any(f(r["p99_us"]) == f(r["p99_us"]) for r in rows if r["client"] == client)
    print(f"## {client} ({kind} load)\n")
    if kind == "closed-loop":
        for what, key in (("closed-loop req/s", "achieved_rps"), ("closed-loop p99 µs", "p99_us")):
            if key != "p99_us" or has_p99:
                ratio_table(what, lambda s: [(f(by[(client, s, i)][0][key]), "") for i in rounds])
    elif has_p99:
        ratio_table("throughput at SLO", lambda s: [at_slo(by[(client, s, i)]) for i in rounds])
        print("(per round: `+` every point of the grid passed, so the server's limit lies above it; "
              "`c` a client-bound client up to or at the first failing point, so the client may have set the limit)\n")
    else:
        print("(no percentiles from this client)\n")
    print("| offered req/s | server | achieved req/s | p50 µs | p99 µs | client CPU % | server user µs/req | server sys µs/req | softirq CPU0 / CPU1 µs/req | labels (rounds) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    loads = sorted({r["offered_rps"] for r in rows if r["client"] == client}, key=f)
    for load in loads:
        for s in servers:
            pts = [r for r in rows if r["client"] == client and r["server"] == s and r["offered_rps"] == load]
            col = lambda k: [f(r[k]) for r in pts]
            labels = collections.Counter(l for r in pts for l in r["label"].split())
            lab = ", ".join(f"{k} ({n})" for k, n in labels.items())
            print(f"| {load} | {s} | {mmm(col('achieved_rps'))} | {mmm(col('p50_us'))} | {mmm(col('p99_us'))} "
                  f"| {mmm(col('client_cpu_pct'))} | {mmm(col('server_user_us_per_req'), '{:.2f}')} "
                  f"| {mmm(col('server_sys_us_per_req'), '{:.2f}')} | {mmm(col('softirq_cpu0_us_per_req'), '{:.2f}')} / "
                  f"{mmm(col('softirq_cpu1_us_per_req'), '{:.2f}')} | {lab} |")
    print()

print(f"## Host CPU per request at an equal offered load of {cpu_load:.0f} req/s\n")
print("Server process (all threads) user and system time, and the softirq time of both CPUs, per request the server "
      "counted; \"all\" = user + system + both softirqs (an upper bound: without IRQ_TIME_ACCOUNTING a softirq tick "
      "that interrupts the server is in its system time too). Per-round ratios to memcached in the same round. "
      "(A closed-loop client's CPU per request, at its own load, is in its section.)\n")
print("| load kind (client) | server | user µs/req | system µs/req | softirq CPU0 / CPU1 µs/req | user+system | ÷ memcached per round | median [min–max] | verdict | all counted | ÷ memcached, median [min–max] | verdict |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for client in [c for c in clients if not any(r["load_kind"] == "closed-loop" for r in rows if r["client"] == c)]:
    kind = next(r["load_kind"] for r in rows if r["client"] == client)
    def per_round(s, key):
        out = []
        for i in rounds:
            p = [r for r in by[(client, s, i)] if f(r["offered_rps"]) == cpu_load]
            out.append(key(p[0]) if p else float("nan"))
        return out
    us = lambda r: f(r["server_user_us_per_req"]) + f(r["server_sys_us_per_req"])
    al = lambda r: us(r) + f(r["softirq_cpu0_us_per_req"]) + f(r["softirq_cpu1_us_per_req"])
    base_us, base_al = per_round("memcached", us), per_round("memcached", al)
    for s in servers:
        u = per_round(s, lambda r: f(r["server_user_us_per_req"]))
        y = per_round(s, lambda r: f(r["server_sys_us_per_req"]))
        q0 = per_round(s, lambda r: f(r["softirq_cpu0_us_per_req"]))
        q1 = per_round(s, lambda r: f(r["softirq_cpu1_us_per_req"]))
        a, b = per_round(s, us), per_round(s, al)
        row = (f"| {kind} ({client}) | {s} | {mmm(u, '{:.2f}')} | {mmm(y, '{:.2f}')} | {mmm(q0, '{:.2f}')} / "
               f"{mmm(q1, '{:.2f}')} | {mmm(a, '{:.2f}')} |")
        if s == "memcached":
            row += f" | | | {mmm(b, '{:.2f}')} | | |"
        else:
            per, med, verdict = compare(a, base_us)
            _, med_all, verdict_all = compare(b, base_al)
            row += f" {per} | {med} | {verdict} | {mmm(b, '{:.2f}')} | {med_all} | {verdict_all} |"
        print(row)
print()

if calls:
    client = calls[0]["client"]
    print(f"## System calls per request ({client}, {cpu_load:.0f} req/s offered, `perf stat -e raw_syscalls:sys_enter -p PID`)\n")
    print("| server | per round | median [min–max] |")
    print("|---|---|---|")
    for s in servers:
        v = [f(c["syscalls_per_req"]) for c in calls if c["server"] == s]
        print(f"| {s} | {' '.join(f'{x:.2f}' for x in v)} | {mmm(v, '{:.2f}')} |")
    print()
PY
echo "$me: $points_csv, $syscalls_csv, $summary_md; logs in $WORK_DIR"
