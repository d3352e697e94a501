#!/usr/bin/env bash
# Native Ebbflow memcached (apps/memcached as a native image under ebb-vmm, one vCPU,
# ebb-net over virtio-net on a TAP device) against memcached 1.6 `-t 1` on the host, in
# the same run, both reached from a network namespace by bench's mc-load:
#
#   native    - ebb-vmm IMAGE --cpus 1 --net tap=NAME, the whole monitor process pinned to
#               CPU 0 (vCPU, virtio-net I/O thread and main thread share it); the TAP
#               device's kernel end is moved into the namespace as 10.0.2.2/24, the guest is
#               10.0.2.15;
#   native-split (not by default) - the same started on CPUs 0,1 with --pin (the vCPU on
#               CPU 0) and the virtio-net I/O thread moved to CPU 1, beside the client:
#               what a second CPU for the device buys (its CPU time is counted);
#   native-4k (not by default) - as native with `--huge-pages off`: guest memory on 4 KiB
#               host pages, for comparison;
#   native-xdp (not by default) - as native with `--net xdp=IFACE`: the monitor's AF_XDP
#               backend on one end of a veth pair with one queue each way, the other end
#               in the namespace as 10.0.2.2/24 (transmit checksumming off there);
#   memcached - memcached -t 1 on the host, pinned to CPU 0, listening on the host end of a
#               veth pair (10.0.3.1/24) whose other end (10.0.3.2) is in the namespace.
#
# mc-load runs in the namespace pinned to CPU 1: closed loop, CONNS connections, one
# request in flight each, ETC over KEYS preloaded keys; req/s, p50/p99, and the server's
# host CPU time per request (/proc/PID/stat: for native all of ebb-vmm's threads). Rounds
# run the servers in turn (in reverse order every other round); summary as median
# [min-max] and the ratio of medians of each native server to memcached.
#
# CLIENT=memcaslap drives the same servers with memcaslap (libmemcached-tools) instead, an
# independent client: one thread, CONNS concurrencies, bench/lib.sh's ETC-like mix
# (memcaslap_etc_config), no preload (memcaslap sets the keys it gets), DURATION per run;
# its TPS and the server's host CPU per operation (memcaslap reports no percentiles).
#
# Usage: bench/scripts/memcached-native.sh   (root, KVM; env: ROUNDS=3 CONNS=32
#        KEYS=100000 DURATION=3s SERVERS="native memcached" (add native-split, native-4k,
#        native-xdp)
#        CLIENT=mc-load|memcaslap OUT_DIR=/tmp/memcached-native CARGO_TARGET_DIR=...)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
KEYS=${KEYS:-100000}
DURATION=${DURATION:-3s}
SERVERS=${SERVERS:-native memcached}
OUT_DIR=${OUT_DIR:-/tmp/memcached-native}
CLIENT=${CLIENT:-mc-load}

die() { echo "memcached-native: error: $*" >&2; exit 1; }
skip() { echo "SKIPPED: memcached-native: $1"; exit 0; }
[[ $(id -u) == 0 ]] || skip "needs root (a TAP device and a network namespace)"
[[ -w /dev/kvm ]] || skip "needs /dev/kvm"
[[ $CLIENT == mc-load || $CLIENT == memcaslap ]] || die "CLIENT is mc-load or memcaslap, not $CLIENT"
for t in memcached ip taskset; do command -v "$t" >/dev/null || skip "$t is not installed"; done
[[ " $SERVERS " != *" native-xdp "* ]] || command -v ethtool >/dev/null || skip "ethtool is not installed (native-xdp)"
[[ $CLIENT == mc-load ]] || command -v memcaslap >/dev/null || skip "memcaslap is not installed (libmemcached-tools)"

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
target=${CARGO_TARGET_DIR:-$PWD/target}
# Two commands: `--bin` would limit both packages to that binary (ebb-vmm's would go stale).
cargo build --release -q -p ebb-vmm
cargo build --release -q -p ebb-bench --bin mc-load
cargo build --release -q -p memcached --target x86_64-unknown-none
vmm=$target/release/ebb-vmm
load=$target/release/mc-load
image=$target/x86_64-unknown-none/release/memcached
mkdir -p "$OUT_DIR"
# shellcheck source=bench/lib.sh
source bench/lib.sh

ns=ebbmcn$$
tap=ebbmct$$
veth=ebbmcv$$
xveth=ebbmcx$$
SERVER_PID=""
cleanup() {
  stop
  ip link del "$veth" 2>/dev/null || true
  ip link del "$xveth" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link set lo up
ip link add "$veth" type veth peer name "${veth}p"
ip link set "${veth}p" netns "$ns"
ip addr add 10.0.3.1/24 dev "$veth"
ip link set "$veth" up
ip -n "$ns" addr add 10.0.3.2/24 dev "${veth}p"
ip -n "$ns" link set "${veth}p" up

# serve NAME: starts the server on CPU 0; sets SERVER_PID and ADDR
serve() {
  local log=$OUT_DIR/server-$1-$2.log
  case $1 in
    native | native-4k | native-split)
      if [[ $1 == native ]]; then
        taskset -c 0 "$vmm" "$image" --cpus 1 --mem 1536M --net "tap=$tap" -- -m 1024 -c 1024 >"$log" 2>&1 &
      elif [[ $1 == native-4k ]]; then
        taskset -c 0 "$vmm" "$image" --cpus 1 --mem 1536M --huge-pages off --net "tap=$tap" -- -m 1024 -c 1024 >"$log" 2>&1 &
      else
        taskset -c 0,1 "$vmm" "$image" --cpus 1 --pin --mem 1536M --net "tap=$tap" -- -m 1024 -c 1024 >"$log" 2>&1 &
      fi
      SERVER_PID=$!
      local i
      for ((i = 0; i < 100; i++)); do
        grep -q "listening on" "$log" && break
        sleep 0.1
      done
      grep -q "listening on" "$log" || { cat "$log" >&2; die "native memcached did not start"; }
      if [[ $1 == native-split ]]; then
        io_thread_to "$SERVER_PID" 1 || die "cannot move the virtio-net thread to CPU 1"
      fi
      ip link set "$tap" netns "$ns"
      ip -n "$ns" addr add 10.0.2.2/24 dev "$tap"
      ip -n "$ns" link set "$tap" up
      ADDR=10.0.2.15:11211
      ;;
    native-xdp)
      ip link add "$xveth" numtxqueues 1 numrxqueues 1 type veth peer name "${xveth}p" \
        numtxqueues 1 numrxqueues 1
      ip link set "${xveth}p" netns "$ns"
      ip -n "$ns" addr add 10.0.2.2/24 dev "${xveth}p"
      ip -n "$ns" link set "${xveth}p" up
      ip netns exec "$ns" ethtool -K "${xveth}p" tx off >/dev/null
      ip link set "$xveth" up
      taskset -c 0 "$vmm" "$image" --cpus 1 --mem 1536M --net "xdp=$xveth" -- -m 1024 -c 1024 >"$log" 2>&1 &
      SERVER_PID=$!
      local i
      for ((i = 0; i < 100; i++)); do
        grep -q "listening on" "$log" && break
        sleep 0.1
      done
      grep -q "listening on" "$log" || { cat "$log" >&2; die "native memcached over AF_XDP did not start"; }
      ADDR=10.0.2.15:11211
      ;;
    memcached)
      taskset -c 0 memcached -l 10.0.3.1 -p 11211 -U 0 -t 1 -m 1024 -c 1024 -u nobody >"$log" 2>&1 &
      SERVER_PID=$!
      ADDR=10.0.3.1:11211
      ;;
  esac
  local i
  for ((i = 0; i < 100; i++)); do
    ip netns exec "$ns" bash -c "exec 3<>/dev/tcp/${ADDR%:*}/${ADDR#*:}" 2>/dev/null && return 0
    sleep 0.1
  done
  die "$1 is not reachable at $ADDR"
}

common=(--conns "$CONNS" --workload etc --keys "$KEYS")
memcaslap_etc_config "$OUT_DIR/etc.cfg"
: >"$OUT_DIR/closed.txt"
for ((round = 1; round <= ROUNDS; round++)); do
  # shellcheck disable=SC2086 # the names, one word each
  round_order "$round" $SERVERS
  for name in "${ORDER[@]}"; do
    serve "$name" "$round"
    RUN_ID=$name-$round
    if [[ $CLIENT == memcaslap ]]; then
      mc_memcaslap "$name" "$SERVER_PID" "$DURATION" "$OUT_DIR/etc.cfg" \
        ip netns exec "$ns" taskset -c 1 memcaslap -s "$ADDR" -c "$CONNS" -T 1
    else
      mc_closed_loop "$name" "$SERVER_PID" "$DURATION" \
        ip netns exec "$ns" taskset -c 1 "$load" --addr "$ADDR" "${common[@]}"
    fi
    stop
    # The veth goes with its run: the next native run's TAP takes 10.0.2.2 in the namespace.
    [[ $name != native-xdp ]] || ip link del "$xveth"
  done
done
: >"$OUT_DIR/summary.txt"
for name in $SERVERS; do
  [[ $name == memcached ]] || mc_summary "$name" memcached "host CPU µs/req" append
done
