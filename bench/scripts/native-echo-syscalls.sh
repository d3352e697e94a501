#!/usr/bin/env bash
# System calls of the monitor (every thread) per 64-byte echo round trip, by backend:
# tests/guests' net_echo under ebb-vmm, one vCPU, `--net xdp=IFACE` (one end of a veth
# pair with one queue each way, in a namespace of the monitor's) or `--net tap=NAME` (in
# the client's namespace); the client (python3, TCP_NODELAY, one connection) in a network
# namespace as 10.0.2.2/24. After 300 warm-up round trips, `strace -c -f` counts the
# monitor's calls over N round trips, and the monitor's counters (SIGUSR1) before and
# after give its frames, exits, kicks and wake-ups. STRACE=0: no strace, round-trip time
# only (strace slows every call).
#
# Usage: bench/scripts/native-echo-syscalls.sh xdp|tap   (root, KVM, ip, ethtool, strace;
#        env: N=3000 STRACE=1 VMM=target/debug/ebb-vmm
#        GUEST=target/guests/x86_64-unknown-none/release/net_echo — build both first, e.g.
#        by `cargo test -p ebb-vmm --test net --no-run`)
set -euo pipefail
mode=${1:?usage: native-echo-syscalls.sh xdp|tap}
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
vmm=$(realpath "${VMM:-target/debug/ebb-vmm}")
guest=$(realpath "${GUEST:-target/guests/x86_64-unknown-none/release/net_echo}")
N=${N:-3000}
[[ $(id -u) == 0 ]] || { echo "SKIPPED: native-echo-syscalls: needs root"; exit 0; }
for t in ip ethtool strace python3; do
  command -v "$t" >/dev/null || { echo "SKIPPED: native-echo-syscalls: $t is not installed"; exit 0; }
done
L=ebbscl$$
M=ebbscm$$
log=$(mktemp)
counts=$(mktemp)
PID=""
cleanup() {
  [[ -z $PID ]] || kill "$PID" 2>/dev/null || true
  ip netns del "$L" 2>/dev/null || true
  ip netns del "$M" 2>/dev/null || true
  rm -f "$log" "$counts"
}
trap cleanup EXIT
ip netns add "$L"
ip -n "$L" link set lo up
if [[ $mode == xdp ]]; then
  ip netns add "$M"
  ip -n "$M" link set lo up
  ip -n "$M" link add sx0 numtxqueues 1 numrxqueues 1 type veth peer name sx1 \
    numtxqueues 1 numrxqueues 1 netns "$L"
  ip -n "$M" link set sx0 up
  ip -n "$L" addr add 10.0.2.2/24 dev sx1
  ip -n "$L" link set sx1 up
  ip netns exec "$L" ethtool -K sx1 tx off >/dev/null
  ip netns exec "$M" "$vmm" "$guest" --timeout 300 --cpus 1 --net xdp=sx0 >"$log" 2>&1 &
else
  ip -n "$L" tuntap add dev st0 mode tap
  ip -n "$L" addr add 10.0.2.2/24 dev st0
  ip -n "$L" link set st0 up
  ip netns exec "$L" "$vmm" "$guest" --timeout 300 --cpus 1 --net tap=st0 >"$log" 2>&1 &
fi
for _ in $(seq 100); do
  PID=$(pgrep -f -- "$vmm $guest" | head -1 || true)
  [[ -n $PID ]] && grep -q listening "$log" && break
  sleep 0.1
done
grep -q listening "$log" || { cat "$log" >&2; exit 1; }
coproc CLIENT {
  ip netns exec "$L" python3 -c "
import socket, sys, time
s = socket.create_connection(('10.0.2.15', 7))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
m = b'x' * 64
def round_trips(n):
    for _ in range(n):
        s.sendall(m)
        got = b''
        while len(got) < 64:
            got += s.recv(64 - len(got))
round_trips(300)
print('warm', flush=True)
sys.stdin.readline()
t = time.time()
round_trips($N)
print('%.1f' % ((time.time() - t) * 1e6 / $N), flush=True)
"
}
read -r _ <&"${CLIENT[0]}"
SPID=""
if [[ ${STRACE:-1} == 1 ]]; then
  strace -c -f -p "$PID" -o "$counts" 2>/dev/null &
  SPID=$!
  sleep 0.5
fi
kill -USR1 "$PID"
sleep 0.2
echo go >&"${CLIENT[1]}"
read -r us <&"${CLIENT[0]}"
kill -USR1 "$PID"
sleep 0.2
[[ -z $SPID ]] || { kill -INT "$SPID"; wait "$SPID" 2>/dev/null || true; }
echo "$mode: $N round trips of 64 bytes, $us µs each$([[ -z $SPID ]] || echo ' (under strace)')"
grep "virtio-net:" "$log" | tail -2 | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^(tx_frames|rx_frames|exits|kicks|wakeups)=/) printf "%s ", $i; print "" }'
if [[ -n $SPID ]]; then
  awk -v n="$N" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" { printf "  %-14s %8d calls  %.3f per round trip\n", $NF, $4, $4 / n }
                 $NF == "total" { printf "  %-14s %8d calls  %.3f per round trip\n", "all", $4, $4 / n }' "$counts"
fi
