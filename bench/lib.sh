# Shared helpers of the bench scripts (sourced, not run). Callers set OUT_DIR and RUN_ID
# and define `die`.

# start_server NAME CPUS BIN ARGS... ; starts BIN pinned to CPUS, waits for its
# 'listening on 127.0.0.1:PORT' banner; sets SERVER_PID and PORT
start_server() {
  local name=$1 cpus=$2 bin=$3
  shift 3
  local log=$OUT_DIR/server-$name-$RUN_ID.log
  : >"$log" # exists before the background child opens it (no race with sed)
  taskset -c "$cpus" "$bin" "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  PORT=""
  local i
  for ((i = 0; i < 200; i++)); do
    PORT=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' "$log" | head -n1)
    [[ -n $PORT ]] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log" >&2; die "$name server exited before listening"; }
    sleep 0.05
  done
  cat "$log" >&2
  die "$name server did not print 'listening on 127.0.0.1:PORT' within 10s"
}

# json_field JSON KEY -> number
json_field() { sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p" <<<"$1"; }

# stats FILE [DIGITS] -> "median min max" of the numbers in FILE (one per line), with
# DIGITS decimals (default 1); FILE - reads standard input
stats() {
  sort -g "$1" | awk -v d="${2:-1}" '{ v[NR] = $1 } END {
    if (NR == 0) { print "nan nan nan"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    f = "%." d "f"
    printf f " " f " " f "\n", m, v[1], v[NR] }'
}

# cpu_ticks PID -> user + system CPU time of the process (all its threads) in clock ticks
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# seconds DURATION -> seconds in a "5s" / "500ms" / "2" duration
seconds() {
  case $1 in
    *ms) awk -v v="${1%ms}" 'BEGIN { print v / 1000 }' ;;
    *s) echo "${1%s}" ;;
    *) echo "$1" ;;
  esac
}

# net_bench SCRIPT TOOLS... : for the ebb-net-bench scripts — prints "SKIPPED: SCRIPT:
# ..." and exits 0 when one of TOOLS is missing, else builds ebb-net-bench (package
# bench/net) and sets REPO and NET_BENCH (its executable)
net_bench() {
  local script=$1 tool
  shift
  for tool in "$@" cargo python3; do
    command -v "$tool" >/dev/null || { echo "SKIPPED: $script: \`$tool\` is not installed"; exit 0; }
  done
  REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  (cd "$REPO" && cargo build --release -q -p ebb-net-bench)
  NET_BENCH="${CARGO_TARGET_DIR:-$REPO/target}/release/ebb-net-bench"
}
