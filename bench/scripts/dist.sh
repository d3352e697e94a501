#!/usr/bin/env bash
# Distributed Ebbs (issue 25): the figures of docs/benchmarks.md, "Distributed Ebbs".
#
#   1. allocate → joined: apps/cluster's front end boots two native nodes in its own
#      process (rootless user-mode networking, a guest-to-host forward to its Messenger)
#      and prints, per node, the time from `allocate` to the node having joined (connected
#      back, received its node id). RUNS runs.
#   2. allocate → first network answer, in-process against a child `ebb run` (the
#      NodeAllocator's two backends; crates/ebb-dist/tests/nodes.rs, allocation_time).
#   3. the Messenger between the front end and a native node beside plain Linux TCP
#      between two processes on loopback, ROUNDS alternating rounds (`cluster --bench
#      ROUNDS`): 64 B call and message round trips against a 64 B TCP ping-pong, 1 MiB
#      messages against a TCP stream to a sink process, CPU per round trip on both sides
#      — once with the node on the shared-memory window (the default), once on TCP
#      through its user-mode network.
#   4. system calls per shared-memory round trip: `strace -f -c` over the whole front
#      end process (event loops, vCPU and monitor threads), message round trips only, at
#      two sample counts; the difference divided by the extra round trips.
#      A node on the network runs beside a front end of NET_FRONT_END_CPUS cores (1).
#   5. as root: the Messenger between the front end and a native node on a TAP device
#      enslaved to a bridge, against Linux TCP across a veth pair (the peer process in a
#      network namespace at its far end), ROUNDS alternating rounds. The script makes the
#      bridge, the pair and the namespace, and removes them.
#
# Raw output goes to OUT (default bench/results/dist/DATE-*.txt). PARTS (default
# "join alloc messenger syscalls tap") picks the parts to run.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-5}
ROUNDS=${ROUNDS:-5}
OUT=${OUT:-bench/results/dist/$(date +%F)}
mkdir -p "$(dirname "$OUT")"
cargo build --release -q -p cluster
cargo build --release -q -p cluster --target x86_64-unknown-none
image=target/x86_64-unknown-none/release/cluster
front=target/release/cluster
PARTS=${PARTS:-join alloc messenger syscalls tap}
# The front end's cores for a node on the network (parts messenger and tap): one by
# default. On two CPUs a second front-end core took the CPU the node's vCPU and device
# thread need (a message round trip 4x Linux TCP's with two, 1.7-2.2x with one, in
# alternation); a node on the shared window keeps every core (its vCPU avoids the core
# that polls the window).
NET_FRONT_END_CPUS=${NET_FRONT_END_CPUS:-1}
part() { [[ " $PARTS " == *" $1 "* ]]; }

if part join; then
echo "== allocate → joined ($RUNS runs of two nodes)" | tee "$OUT-join.txt"
for i in $(seq "$RUNS"); do
  "$front" --node-image "$image" --ops 1000 --increments 10 | grep "joined in" | tee -a "$OUT-join.txt"
done
fi

if part alloc; then
echo "== allocate → first answer: in-process against a child ebb run" | tee "$OUT-alloc.txt"
cargo test --release -q -p ebb-dist --test nodes -- --nocapture allocation_time 2>&1 \
  | grep -vE "^(running|test |$)" | tee -a "$OUT-alloc.txt"
fi

if part messenger; then
for transport in shared network; do
  echo "== the Messenger, front end ↔ native node over $transport, against Linux TCP ($ROUNDS rounds)" | tee -a "$OUT-messenger.txt"
  cpus=$(nproc); [[ $transport == network ]] && cpus=$NET_FRONT_END_CPUS
  EBB_CPUS=$cpus "$front" --node-image "$image" --nodes 1 --transport "$transport" --bench "$ROUNDS" --ops 1000 --increments 10 \
    | grep -E "^bench" | tee -a "$OUT-messenger.txt"
done
fi

if ! part syscalls; then
  :
elif command -v strace >/dev/null; then
  echo "== system calls per shared-memory round trip (strace -f -c, whole front end process)" | tee "$OUT-syscalls.txt"
  count() { # $1: round trips; prints the total system calls of the run
    EBB_BENCH_MESSAGES_ONLY=1 EBB_BENCH_SAMPLES="$1" strace -f -c -o "$OUT-strace-$1.txt" \
      "$front" --node-image "$image" --nodes 1 --transport shared --bench 1 --ops 1000 --increments 10 \
      | grep -E "^bench" >&2
    awk '/^100.00/ {print $4}' "$OUT-strace-$1.txt"
  }
  small=$(count 1000); large=$(count 101000)
  echo "1000 round trips: $small system calls; 101000: $large; per extra round trip: $(echo "scale=3; ($large - $small) / 100000" | bc)" | tee -a "$OUT-syscalls.txt"
else
  echo "SKIPPED: system calls per round trip: strace is not installed" | tee "$OUT-syscalls.txt"
fi

if part tap; then
  if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
    echo "SKIPPED: the Messenger on a TAP bridge: needs root and ip(8)" | tee "$OUT-tap.txt"
  else
    bridge=ebbdb$$; netns=ebbdp$$; veth=ebbdv$$
    # Runs twice (at the end and on exit): each step may find its device gone already.
    cleanup() {
      ip link del "$bridge" 2>/dev/null || true
      ip link del "$veth" 2>/dev/null || true
      ip netns del "$netns" 2>/dev/null || true
    }
    trap cleanup EXIT
    ip link add "$bridge" type bridge && ip addr add 10.77.0.1/24 dev "$bridge" && ip link set "$bridge" up
    ip netns add "$netns"
    ip link add "$veth" type veth peer name "${veth}p" netns "$netns"
    ip addr add 10.78.0.1/24 dev "$veth" && ip link set "$veth" up
    ip -n "$netns" addr add 10.78.0.2/24 dev "${veth}p" && ip -n "$netns" link set "${veth}p" up
    echo "== the Messenger, front end ↔ native node on a TAP bridge, against Linux TCP across a veth pair ($ROUNDS rounds)" | tee "$OUT-tap.txt"
    EBB_CPUS=$NET_FRONT_END_CPUS EBB_BENCH_PEER_NETNS="$netns:10.78.0.2" "$front" --node-image "$image" --nodes 1 \
      --tap-bridge "$bridge:10.77.0.1" --bench "$ROUNDS" --ops 1000 --increments 10 \
      | grep -E "^bench|joined" | tee -a "$OUT-tap.txt"
    cleanup
  fi
fi
