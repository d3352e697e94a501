#!/usr/bin/env bash
# System calls per frame and per request for the network paths side by side (issue 23's
# "TAP, passt and AF_XDP" table): apps/memcached driven by mc-load (closed loop, CONNS
# connections, one request in flight each, ETC over KEYS preloaded keys, DURATION),
# with `perf stat -e raw_syscalls:sys_enter` on the server's processes over the window.
#
# Paths (PATHS):
#   sockets     hosted apps/memcached on Linux sockets over loopback (no frames: the
#               kernel's TCP; per request only), the baseline
#   tap-hosted  hosted apps/memcached on ebb-net over a TAP device (`--tap NAME --ip
#               10.0.2.15/24`), the TAP's kernel end in the client's namespace
#   tap-native  the native image under ebb-vmm (one vCPU, `--net tap=NAME`); the
#               monitor's virtio-net I/O thread is counted on its own as well
#   passt       `ebb run --cpus 1 memcached` (the main job: passt forwards 127.0.0.1:11211);
#               the ebb process and passt counted separately. passt's frames are not
#               visible from outside (its socket to the monitor is not an interface), so
#               frames per request are those of tap-native's run (the same guest stack and
#               workload) and marked so
#   xdp-hosted  hosted apps/memcached over AF_XDP (`--xdp VETH --ip 10.0.5.1/24`, veth
#               peer in the namespace): SKIPPED until the binary has --xdp
#   xdp-native  the native image with `--net xdp=VETH`: SKIPPED until ebb-vmm has it
# Frames = the packets the path's kernel-side interface counted, both ways
# (/sys/class/net/IF/statistics/{rx,tx}_packets in the namespace), over the same window.
# Requests = the server's `stats` cmd_get + cmd_set around the window.
#
# Output: a markdown table on stdout and in OUT_DIR/summary.md, raw rows in
# OUT_DIR/rows.csv (ROUNDS rows per path).
#
# Usage: bench/scripts/net-syscalls.sh   (root, perf; KVM and passt for the native paths;
#        env: PATHS="sockets tap-hosted tap-native passt xdp-hosted xdp-native" ROUNDS=3
#        CONNS=32 KEYS=100000 DURATION=3 SERVER_CPU=1 CLIENT_CPU=0
#        OUT_DIR=/tmp/net-syscalls CARGO_TARGET_DIR=...)
set -euo pipefail

PATHS=${PATHS:-sockets tap-hosted tap-native passt xdp-hosted xdp-native}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
KEYS=${KEYS:-100000}
DURATION=${DURATION:-3}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
OUT_DIR=${OUT_DIR:-/tmp/net-syscalls}

me=net-syscalls
die() { echo "$me: error: $*" >&2; exit 1; }
skip() { echo "SKIPPED: $me: $1"; exit 0; }
[[ $(id -u) == 0 ]] || skip "needs root (TAP devices, a network namespace, perf on other processes)"
for t in perf ip taskset python3; do command -v "$t" >/dev/null || skip "$t is not installed"; done
perf stat -e raw_syscalls:sys_enter -- true >/dev/null 2>&1 || skip "perf cannot count raw_syscalls:sys_enter here"

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
target=${CARGO_TARGET_DIR:-$PWD/target}
mkdir -p "$OUT_DIR"
# shellcheck source=bench/lib.sh
source bench/lib.sh
cargo build --release -q -p memcached
cargo build --release -q -p ebb-bench --bin mc-load
ebb_mc=$target/release/memcached
mc_load=$target/release/mc-load
vmm=$target/release/ebb-vmm
image=$target/x86_64-unknown-none/release/memcached
ebb=$target/release/ebb

# unavailable PATH -> why it cannot run here, or nothing
unavailable() {
  case $1 in
    sockets | tap-hosted) [[ -c /dev/net/tun || $1 == sockets ]] || echo "/dev/net/tun is missing" ;;
    xdp-hosted)
      local out
      out=$(timeout 5 "$ebb_mc" --xdp ebbns-none -p 1 2>&1 || true)
      if grep -q "unknown option --xdp" <<<"$out"; then
        echo "apps/memcached has no --xdp option yet"
      fi
      ;;
    tap-native | passt | xdp-native)
      [[ -w /dev/kvm ]] || { echo "needs /dev/kvm"; return; }
      [[ $1 != passt ]] || command -v passt >/dev/null || { echo "passt is not installed"; return; }
      if [[ $1 == passt ]] && python3 -c "import socket; socket.create_connection(('127.0.0.1', 11211), 1)" 2>/dev/null; then
        echo "127.0.0.1:11211 is in use (the main job forwards it)"
        return
      fi
      if [[ $1 == xdp-native ]] && ! "$vmm" --help 2>&1 | grep -q xdp; then
        echo "ebb-vmm has no --net xdp= backend yet"
      fi
      ;;
    *) echo "unknown path (sockets tap-hosted tap-native passt xdp-hosted xdp-native)" ;;
  esac
}

paths=()
native=0
for p in $PATHS; do
  case $p in tap-native | passt | xdp-native) native=1 ;; esac
done
if ((native)); then
  cargo build --release -q -p ebb-vmm
  cargo build --release -q -p ebb-cli
  cargo build --release -q -p memcached --target x86_64-unknown-none
fi
for p in $PATHS; do
  why=$(unavailable "$p")
  if [[ -n $why ]]; then echo "SKIPPED: $me: $p: $why"; else paths+=("$p"); fi
done
((${#paths[@]} > 0)) || skip "no path can run"

ns=ebbns$$
veth=ebbnsv$$
TAP=""
taps=0
SERVER_PID=""
CURRENT=""
cleanup() {
  halt
  ip link del "$veth" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link set lo up
ip link add "$veth" numtxqueues 1 numrxqueues 1 type veth peer name "${veth}p" numtxqueues 1 numrxqueues 1
ip link set "${veth}p" netns "$ns"
ip -n "$ns" addr add 10.0.5.2/24 dev "${veth}p"
ip netns exec "$ns" ethtool -K "${veth}p" tx-checksumming off >/dev/null 2>&1 || true
ip -n "$ns" link set "${veth}p" up
ip link set "$veth" up

# tap_to_ns: the server's TAP device into the namespace as 10.0.2.2/24
tap_to_ns() {
  local i
  for ((i = 0; i < 100; i++)); do
    ip link show "$TAP" >/dev/null 2>&1 && break
    sleep 0.05
  done
  ip link set "$TAP" netns "$ns"
  ip -n "$ns" addr add 10.0.2.2/24 dev "$TAP"
  ip -n "$ns" link set "$TAP" up
}

# serve PATH: starts the server of PATH on SERVER_CPU (its own process group); sets
# SERVER_PID, PIDS (processes counted), IO_TID (the I/O thread, if any), IFACE (the
# namespace-side interface whose packets are the frames, if any), HOST, PORT, CLIENT
serve() {
  local log=$OUT_DIR/server-$1-$round.log
  IO_TID="" IFACE="" CLIENT=(ip netns exec "$ns") PORT=11211
  : >"$log" # exists before the server writes it (the wait below reads it)
  taps=$((taps + 1))
  TAP=ebbnst$$x$taps
  case $1 in
    sockets)
      PORT=$(free_port) HOST=127.0.0.1 CLIENT=()
      EBB_CPUS=1 setsid taskset -c "$SERVER_CPU" "$ebb_mc" -p "$PORT" -t 1 -m 1024 -c 1024 >"$log" 2>&1 &
      ;;
    tap-hosted)
      HOST=10.0.2.15 IFACE=$TAP
      EBB_CPUS=1 setsid taskset -c "$SERVER_CPU" "$ebb_mc" --tap "$TAP" --ip 10.0.2.15/24 -p "$PORT" -t 1 \
        -m 1024 -c 1024 >"$log" 2>&1 &
      ;;
    tap-native)
      HOST=10.0.2.15 IFACE=$TAP
      setsid taskset -c "$SERVER_CPU" "$vmm" "$image" --cpus 1 --mem 1536M --net "tap=$TAP" -- \
        -m 1024 -c 1024 >"$log" 2>&1 &
      ;;
    passt)
      HOST=127.0.0.1 CLIENT=()
      setsid taskset -c "$SERVER_CPU" "$ebb" run --cpus 1 memcached >"$log" 2>&1 &
      ;;
    xdp-hosted)
      HOST=10.0.5.1 IFACE=${veth}p
      EBB_CPUS=1 setsid taskset -c "$SERVER_CPU" "$ebb_mc" --xdp "$veth" --ip 10.0.5.1/24 -p "$PORT" -t 1 \
        -m 1024 -c 1024 >"$log" 2>&1 &
      ;;
    xdp-native)
      HOST=10.0.5.1 IFACE=${veth}p
      setsid taskset -c "$SERVER_CPU" "$vmm" "$image" --cpus 1 --mem 1536M --net "xdp=$veth" -- \
        --ip 10.0.5.1/24 -m 1024 -c 1024 >"$log" 2>&1 &
      ;;
  esac
  SERVER_PID=$!
  PIDS=$SERVER_PID
  local i
  for ((i = 0; i < 300; i++)); do
    grep -q "listening on" "$log" && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "listening on" "$log" || { cat "$log" >&2; die "$1 did not start"; }
  case $1 in tap-hosted | tap-native) tap_to_ns ;; esac
  if [[ $1 == passt ]]; then
    local p
    p=$(pgrep -P "$SERVER_PID" passt | head -n1) || die "passt: no passt child of ebb"
    PIDS="$SERVER_PID,$p"
  fi
  if [[ $1 == *native || $1 == passt ]]; then
    local t
    for t in /proc/"$SERVER_PID"/task/*; do
      [[ $(cat "$t/comm" 2>/dev/null) == virtio-net* ]] && IO_TID=${t##*/}
    done
  fi
  for ((i = 0; i < 100; i++)); do
    "${CLIENT[@]}" python3 -c 'import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1).close()' \
      "$HOST" "$PORT" 2>/dev/null && return 0
    sleep 0.1
  done
  die "$1 is not reachable at $HOST:$PORT"
}

# halt: stops the server: `ebb run` with Ctrl-C's SIGINT to its group (passt too), the
# others with SIGTERM (hosted memcached does not end on SIGINT)
halt() {
  [[ -n $SERVER_PID ]] || return 0
  if [[ $CURRENT == passt ]]; then
    kill -INT -- "-$SERVER_PID" 2>/dev/null || true
  else
    kill -TERM -- "-$SERVER_PID" 2>/dev/null || kill "$SERVER_PID" 2>/dev/null || true
  fi
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

requests() { "${CLIENT[@]}" bash -c "source bench/lib.sh && mc_requests $PORT $HOST"; }
frames() {
  [[ -n $IFACE ]] || { echo 0; return; }
  ip netns exec "$ns" cat "/sys/class/net/$IFACE/statistics/rx_packets" "/sys/class/net/$IFACE/statistics/tx_packets" |
    awk '{ s += $1 } END { print s }'
}
count() { awk -F, '$3 ~ /raw_syscalls:sys_enter/ { print $1 }' "$1"; }

echo "round,path,requests,frames,syscalls,syscalls_passt,syscalls_io_thread" >"$OUT_DIR/rows.csv"
for ((round = 1; round <= ROUNDS; round++)); do
  round_order "$round" "${paths[@]}"
  for p in "${ORDER[@]}"; do
    CURRENT=$p
    serve "$p"
    load=("${CLIENT[@]}" taskset -c "$CLIENT_CPU" "$mc_load" --addr "$HOST:$PORT" --pin-core "$CLIENT_CPU"
      --conns "$CONNS" --workload etc --keys "$KEYS")
    "${load[@]}" --closed-loop --preload --warmup 0s --duration 1s >/dev/null
    perf stat -x, -e raw_syscalls:sys_enter -p "${PIDS%%,*}" -o "$OUT_DIR/perf-$p-$round.csv" &
    perfs=($!)
    if [[ $PIDS == *,* ]]; then
      perf stat -x, -e raw_syscalls:sys_enter -p "${PIDS#*,}" -o "$OUT_DIR/perf-$p-$round-passt.csv" &
      perfs+=($!)
    fi
    if [[ -n $IO_TID ]]; then
      perf stat -x, -e raw_syscalls:sys_enter -t "$IO_TID" -o "$OUT_DIR/perf-$p-$round-io.csv" &
      perfs+=($!)
    fi
    sleep 0.3
    n0=$(requests) f0=$(frames)
    "${load[@]}" --closed-loop --warmup 0s --duration "${DURATION}s" >/dev/null
    n1=$(requests) f1=$(frames)
    kill -INT "${perfs[@]}"
    wait "${perfs[@]}" || true
    s=$(count "$OUT_DIR/perf-$p-$round.csv")
    sp=$([[ $PIDS == *,* ]] && count "$OUT_DIR/perf-$p-$round-passt.csv" || echo "")
    si=$([[ -n $IO_TID ]] && count "$OUT_DIR/perf-$p-$round-io.csv" || echo "")
    echo "$round,$p,$((n1 - n0)),$((f1 - f0)),$s,$sp,$si" | tee -a "$OUT_DIR/rows.csv"
    halt
  done
done

python3 - "$OUT_DIR/rows.csv" "$CONNS" <<'PY' | tee "$OUT_DIR/summary.md"
import collections, csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def mmm(v, fmt="{:.2f}"):
    v = [x for x in v if x is not None]
    if not v:
        return "–"
    return f"{fmt.format(statistics.median(v))} [{fmt.format(min(v))}–{fmt.format(max(v))}]"
by = collections.defaultdict(list)
for r in rows:
    by[r["path"]].append(r)
def per(r, k, d):
    return float(r[k]) / float(r[d]) if r[k] and float(r[d]) > 0 else None
tap_fpr = [per(r, "frames", "requests") for r in by.get("tap-native", [])]
print(f"\n| path | frames / request | system calls / request (server) | / frame | I/O thread's / frame | passt's / request | passt's / frame |")
print("|---|---|---|---|---|---|---|")
for path, rs in by.items():
    fpr = [per(r, "frames", "requests") or None for r in rs]  # sockets: no frames to count
    note = ""
    if path == "passt" and tap_fpr:
        fpr, note = tap_fpr, " (tap-native's)"
    spr = [per(r, "syscalls", "requests") for r in rs]
    spf = [s / f if s is not None and f else None for s, f in zip(spr, fpr)]
    io = [per(r, "syscalls_io_thread", "requests") for r in rs]
    iof = [s / f if s is not None and f else None for s, f in zip(io, fpr)]
    pp = [per(r, "syscalls_passt", "requests") for r in rs]
    ppf = [s / f if s is not None and f else None for s, f in zip(pp, fpr)]
    print(f"| {path} | {mmm(fpr)}{note} | {mmm(spr)} | {mmm(spf)} | {mmm(iof)} | {mmm(pp)} | {mmm(ppf)} |")
print(f"\nmedian [min–max] over {len(next(iter(by.values())))} rounds; mc-load closed loop, {sys.argv[2]} connections")
PY
