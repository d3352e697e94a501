#!/usr/bin/env bash
# ebb-net over a TAP device against Linux-to-Linux over a veth pair, in the same run.
#
# The client side is Linux in a network namespace (curl, echo-load, sockperf), pinned to
# CPU 1; the server is in the root namespace, pinned to CPU 0:
#   ebb   - the app on ebb-net, over a TAP device whose kernel end sits in the namespace
#   linux - the same app on Linux sockets (ebb_hosted::tcp), reached through a veth pair
#   linux-nooffload - as linux, with TSO/GSO/GRO off on both veth ends (ethtool)
# Workloads, alternated run by run (ROUNDS times each):
#   bulk:      curl downloads BYTES from apps/httpd (GET /bytes/N)
#   ping-pong: one connection, one 64-byte request in flight (bench echo-load), against
#              apps/sink --echo; plus sockperf server/ping-pong on Linux as a reference
# Every server is started for its run and stopped after it, so no idle server shares
# CPU 0. Prints a summary (median, min, max; ratios of medians) and writes raw results
# to OUT_DIR. Needs root (TAP, namespaces); prints SKIPPED otherwise.
#
# Usage: bench/scripts/net-tap-veth.sh        (env: ROUNDS=5 BYTES=1073741824
#        PP_SECONDS=5 OUT_DIR=/tmp/net-tap-veth CARGO_TARGET_DIR=...)
set -euo pipefail

ROUNDS=${ROUNDS:-5}
BYTES=${BYTES:-1073741824}
PP_SECONDS=${PP_SECONDS:-5}
OUT_DIR=${OUT_DIR:-/tmp/net-tap-veth}

skip() {
  echo "SKIPPED: net-tap-veth: $1"
  exit 0
}
die() {
  echo "net-tap-veth: $*" >&2
  exit 1
}

[[ $(id -u) -eq 0 ]] || skip "needs root (TAP devices, network namespaces)"
[[ -c /dev/net/tun ]] || skip "no /dev/net/tun"
for tool in ip curl taskset cargo; do
  command -v "$tool" >/dev/null || skip "\`$tool\` is not installed"
done
have_ethtool=0
command -v ethtool >/dev/null && have_ethtool=1
have_sockperf=0
command -v sockperf >/dev/null && have_sockperf=1

repo="$(cd "$(dirname "$0")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}"
mkdir -p "$OUT_DIR"

# Build fresh, right before measuring (ebb-net may be changing under us).
(cd "$repo" && cargo build --release -q -p httpd -p sink && cargo build --release -q -p ebb-bench --bin echo-load) ||
  die "build failed"
httpd="$target/release/httpd"
sink="$target/release/sink"
echo_load="$target/release/echo-load"

state_file="$OUT_DIR/state.txt"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git -C "$repo" rev-parse HEAD)"
  echo "uncommitted ebb-net/src files: $(git -C "$repo" status --porcelain crates/ebb-net/src | wc -l)"
  echo "ebb-net/src diff sha256: $(git -C "$repo" diff HEAD -- crates/ebb-net/src | sha256sum | cut -c1-16)"
  echo "kernel: $(uname -r); cpus: $(nproc)"
} | tee "$state_file"

id=$$
ns="ebbtv$id"
tap="ebtap$id"
veth_host="vtvh$id"
veth_ns="vtvn$id"
tap_linux=10.201.1.1
tap_ebb=10.201.1.2
veth_linux_ns=10.201.2.1
veth_linux_host=10.201.2.2
server_pid=""

cleanup() {
  stop_server
  ip netns del "$ns" 2>/dev/null || true
  ip link del "$veth_host" 2>/dev/null || true
}
trap cleanup EXIT

ip netns add "$ns"
ip -n "$ns" link set lo up
ip link add "$veth_host" type veth peer name "$veth_ns"
ip link set "$veth_ns" netns "$ns"
ip addr add "$veth_linux_host/24" dev "$veth_host"
ip link set "$veth_host" up
ip -n "$ns" addr add "$veth_linux_ns/24" dev "$veth_ns"
ip -n "$ns" link set "$veth_ns" up

offloads() { # offloads on|off: TSO, GSO, GRO on both veth ends
  ethtool -K "$veth_host" tso "$1" gso "$1" gro "$1" >/dev/null 2>&1 || true
  ip netns exec "$ns" ethtool -K "$veth_ns" tso "$1" gso "$1" gro "$1" >/dev/null 2>&1 || true
}
if ((have_ethtool)); then
  ethtool -k "$veth_host" | grep -E '^(tcp-segmentation-offload|generic-segmentation-offload|generic-receive-offload):' |
    sed 's/^/veth default: /' | tee -a "$state_file"
fi

stop_server() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}

# start_server NAME BIN ARGS...: BIN on CPU 0, waits for its 'listening on' line.
start_server() {
  local name=$1 bin=$2
  shift 2
  local log="$OUT_DIR/server-$name.log"
  : >"$log"
  taskset -c 0 "$bin" "$@" >"$log" 2>&1 &
  server_pid=$!
  local i
  for ((i = 0; i < 200; i++)); do
    grep -q 'listening on' "$log" && return 0
    kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; die "$name exited before listening"; }
    sleep 0.05
  done
  cat "$log" >&2
  die "$name did not print 'listening on' within 10 s"
}

# start_ebb NAME BIN ARGS...: BIN on ebb-net over the TAP device, whose kernel end is
# then moved into the namespace (it vanishes when the server exits).
start_ebb() {
  local name=$1 bin=$2
  shift 2
  start_server "$name" "$bin" "$@" --tap "$tap" --ip "$tap_ebb/24"
  ip link set "$tap" netns "$ns"
  ip -n "$ns" addr add "$tap_linux/24" dev "$tap"
  ip -n "$ns" link set "$tap" up
}

in_ns() { ip netns exec "$ns" taskset -c 1 "$@"; }

# bulk CONFIG: one curl download; appends "CONFIG MB/s" to bulk.txt
bulk() {
  local config=$1 ip
  case $config in
    ebb) start_ebb httpd-ebb "$httpd" --port 8080; ip=$tap_ebb ;;
    linux | linux-nooffload)
      [[ $config == linux-nooffload ]] && offloads off
      start_server httpd-linux "$httpd" --addr "$veth_linux_host" --port 8080
      ip=$veth_linux_host
      ;;
  esac
  local out size secs
  out=$(in_ns curl -sS --fail --max-time 120 -o /dev/null -w '%{size_download} %{time_total}' \
    "http://$ip:8080/bytes/$BYTES") || die "$config: curl failed"
  stop_server
  [[ $config == linux-nooffload ]] && offloads on
  read -r size secs <<<"$out"
  [[ $size -eq $BYTES ]] || die "$config: got $size of $BYTES bytes"
  awk -v c="$config" -v b="$size" -v s="$secs" 'BEGIN { printf "%s %.1f\n", c, b / s / 1e6 }' |
    tee -a "$OUT_DIR/bulk.txt"
}

json_field() { sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p" <<<"$1"; }

# pingpong CONFIG: one run; appends "CONFIG rps p50_us p99_us" to pingpong.txt
pingpong() {
  local config=$1 out ip
  case $config in
    ebb | linux)
      if [[ $config == ebb ]]; then
        start_ebb echo-ebb "$sink" --echo --port 7000
        ip=$tap_ebb
      else
        start_server echo-linux "$sink" --echo --addr "$veth_linux_host" --port 7000
        ip=$veth_linux_host
      fi
      out=$(in_ns "$echo_load" --addr "$ip:7000" --conns 1 --size 64 \
        --duration "${PP_SECONDS}s" --warmup 1s) || die "$config: echo-load failed"
      stop_server
      echo "$config $(json_field "$out" rps) $(json_field "$out" p50_us) $(json_field "$out" p99_us)" |
        tee -a "$OUT_DIR/pingpong.txt"
      ;;
    sockperf)
      taskset -c 0 sockperf server --tcp -i "$veth_linux_host" -p 7001 >"$OUT_DIR/server-sockperf.log" 2>&1 &
      server_pid=$!
      sleep 0.5
      out=$(in_ns sockperf ping-pong --tcp -i "$veth_linux_host" -p 7001 -m 64 --full-rtt \
        -t "$PP_SECONDS" 2>&1) || die "sockperf failed: $out"
      stop_server
      local runtime received p50 p99
      runtime=$(sed -n 's/.*RunTime=\([0-9.]*\) sec.*/\1/p' <<<"$out" | head -n1)
      received=$(sed -n 's/.*ReceivedMessages=\([0-9]*\).*/\1/p' <<<"$out" | head -n1)
      p50=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' <<<"$out" | head -n1)
      p99=$(sed -n 's/.*percentile 99.000 = *\([0-9.]*\).*/\1/p' <<<"$out" | head -n1)
      awk -v r="$received" -v t="$runtime" -v a="$p50" -v b="$p99" \
        'BEGIN { printf "sockperf %.1f %s %s\n", r / t, a, b }' | tee -a "$OUT_DIR/pingpong.txt"
      ;;
  esac
}

: >"$OUT_DIR/bulk.txt"
: >"$OUT_DIR/pingpong.txt"
bulk_configs=(ebb linux)
((have_ethtool)) && bulk_configs+=(linux-nooffload)
pp_configs=(ebb linux)
((have_sockperf)) && pp_configs+=(sockperf)

echo "== bulk: curl GET /bytes/$BYTES, $ROUNDS rounds of: ${bulk_configs[*]} (MB/s)"
for ((round = 1; round <= ROUNDS; round++)); do
  for config in "${bulk_configs[@]}"; do bulk "$config"; done
done
echo "== ping-pong: 64 B, 1 connection, ${PP_SECONDS}s, $ROUNDS rounds of: ${pp_configs[*]} (rps p50_us p99_us)"
for ((round = 1; round <= ROUNDS; round++)); do
  for config in "${pp_configs[@]}"; do pingpong "$config"; done
done

# summary FILE CONFIG COLUMN -> "median min max"
summary() {
  awk -v c="$2" -v k="$3" '$1 == c { print $k }' "$1" | sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "nan nan nan"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.1f %.1f %.1f\n", m, v[1], v[NR] }'
}
median() { summary "$@" | cut -d' ' -f1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo
echo "== summary (median [min-max] over $ROUNDS runs)"
for config in "${bulk_configs[@]}"; do
  read -r m lo hi <<<"$(summary "$OUT_DIR/bulk.txt" "$config" 2)"
  echo "bulk $config: $m MB/s [$lo-$hi]; ebb/this $(ratio "$(median "$OUT_DIR/bulk.txt" ebb 2)" "$m")"
done
for config in "${pp_configs[@]}"; do
  read -r r rlo rhi <<<"$(summary "$OUT_DIR/pingpong.txt" "$config" 2)"
  read -r p50 p50lo p50hi <<<"$(summary "$OUT_DIR/pingpong.txt" "$config" 3)"
  read -r p99 p99lo p99hi <<<"$(summary "$OUT_DIR/pingpong.txt" "$config" 4)"
  echo "ping-pong $config: $r rt/s [$rlo-$rhi]; p50 $p50 us [$p50lo-$p50hi]; p99 $p99 us [$p99lo-$p99hi]; ebb/this rt/s $(ratio "$(median "$OUT_DIR/pingpong.txt" ebb 2)" "$r")"
done
