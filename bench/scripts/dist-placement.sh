#!/usr/bin/env bash
# Where a native node's threads run, and what it does to the Messenger's figures
# (docs/benchmarks.md, "Distributed Ebbs", seventh run).
#
# Runs `cluster --bench ROUNDS` with one native node on the network (PATH=user: its
# user-mode network; PATH=tap, as root: a TAP device on a bridge, against Linux TCP
# across a veth pair) and, once the node's threads exist, pins its device thread
# (`virtio-net`) to CPU DT and its vCPU (`vcpu0`) to CPU VCPU with taskset; `none`
# leaves a thread where the node allocator put it. The front end's core is CPU 0
# (EBB_CPUS=1). Also, with LINUX_ONE_CPU=1, runs the whole bench on CPU 0 only, to show
# the Linux TCP ping-pong's round trip on one CPU (the node's figures of that run mean
# nothing: everything shares the CPU).
#
#   DT=0 VCPU=1 PATH_KIND=user ROUNDS=5 bench/scripts/dist-placement.sh
#
# Prints the bench's per-round lines and its summary.
set -euo pipefail
cd "$(dirname "$0")/../.."
DT=${DT:-none}
VCPU=${VCPU:-none}
PATH_KIND=${PATH_KIND:-user}
ROUNDS=${ROUNDS:-5}
cargo build --release -q -p cluster
cargo build --release -q -p cluster --target x86_64-unknown-none
front=target/release/cluster
image=target/x86_64-unknown-none/release/cluster
log=$(mktemp)
args=(--node-image "$image" --nodes 1 --bench "$ROUNDS" --ops 10 --increments 1)
pin=(taskset -c 0)
[[ ${LINUX_ONE_CPU:-0} == 1 ]] || pin=()

cleanup() {
  if [[ $PATH_KIND == tap ]]; then
    ip link del ebbpb$$ 2>/dev/null || true
    ip link del ebbpv$$ 2>/dev/null || true
    ip netns del ebbpn$$ 2>/dev/null || true
  fi
  rm -f "$log"
}
trap cleanup EXIT

if [[ $PATH_KIND == tap ]]; then
  if [[ $(id -u) -ne 0 ]]; then echo "SKIPPED: PATH_KIND=tap needs root"; exit 0; fi
  bridge=ebbpb$$; netns=ebbpn$$; veth=ebbpv$$
  ip link add "$bridge" type bridge && ip addr add 10.79.0.1/24 dev "$bridge" && ip link set "$bridge" up
  ip netns add "$netns"
  ip link add "$veth" type veth peer name "${veth}p" netns "$netns"
  ip addr add 10.80.0.1/24 dev "$veth" && ip link set "$veth" up
  ip -n "$netns" addr add 10.80.0.2/24 dev "${veth}p" && ip -n "$netns" link set "${veth}p" up
  export EBB_BENCH_PEER_NETNS="$netns:10.80.0.2"
  args+=(--tap-bridge "$bridge:10.79.0.1")
else
  args+=(--transport network)
fi

EBB_CPUS=1 "${pin[@]}" "$front" "${args[@]}" > "$log" 2>&1 &
pid=$!
thread() { ps -eLo pid,tid,comm | awk -v p="$pid" -v c="$1" '$1 == p && $3 == c {print $2}'; }
for _ in $(seq 400); do
  dt=$(thread virtio-net); vcpu=$(thread vcpu0)
  [[ -n $dt && -n $vcpu ]] && break
  sleep 0.05
done
[[ $DT != none && -n ${dt:-} ]] && taskset -pc "$DT" "$dt" > /dev/null
[[ $VCPU != none && -n ${vcpu:-} ]] && taskset -pc "$VCPU" "$vcpu" > /dev/null
wait "$pid"
echo "== $PATH_KIND, device thread on CPU $DT, vCPU on CPU $VCPU${pin:+, everything on CPU 0}"
grep -E "^bench" "$log"
