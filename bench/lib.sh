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

# stop: ends the server start_server (or the caller) started as SERVER_PID, if any, and
# waits for it; for `trap stop EXIT` too
stop() {
  if [[ -n $SERVER_PID ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}

# free_port -> a TCP port on 127.0.0.1 that nothing listens on (now)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# mc_requests PORT [HOST] -> cmd_get + cmd_set of the memcached on HOST:PORT (its
# `stats`); HOST defaults to 127.0.0.1
mc_requests() {
  python3 - "$1" "${2:-127.0.0.1}" <<'PY'
import socket, sys
s = socket.create_connection((sys.argv[2], int(sys.argv[1])), timeout=120)
s.sendall(b"stats\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    buf += chunk
stats = dict(l.split()[1:3] for l in buf.decode().splitlines() if l.startswith("STAT "))
print(int(stats["cmd_get"]) + int(stats["cmd_set"]))
PY
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

# mc_closed_loop NAME PID DURATION LOAD... : with LOAD a full mc-load command but for
# its mode (e.g. `ip netns exec NS taskset -c 1 mc-load --addr A --conns 32 ...`):
# preloads and runs 1 s of load (the warm-up, not measured), then one closed-loop window
# of DURATION with the server PID's CPU time around it; appends "NAME req/s p50_us
# p99_us cpu_us_per_request" to $OUT_DIR/closed.txt. (Until 2026-11-25 the measured run
# had its own 1 s warm-up inside the CPU window, so the CPU per request of the runs
# recorded before then is overstated by (DURATION + 1 s) / DURATION, both servers alike.)
mc_closed_loop() {
  local name=$1 pid=$2 duration=$3
  shift 3
  "$@" --closed-loop --preload --warmup 0s --duration 1s >/dev/null
  local before after out cpu
  before=$(cpu_ticks "$pid")
  out=$("$@" --closed-loop --warmup 0s --duration "$duration" --json)
  after=$(cpu_ticks "$pid")
  cpu=$(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$(json_field "$out" requests)" \
    'BEGIN { if (n > 0) printf "%.2f", t * 1e6 / hz / n; else print "nan" }')
  echo "$name $(json_field "$out" rps) $(json_field "$out" p50_us) $(json_field "$out" p99_us) $cpu" |
    tee -a "$OUT_DIR/closed.txt"
}

# mc_summary A B CPU_LABEL [append]: the table of $OUT_DIR/closed.txt for servers A and
# B (median [min-max] per column) and req/s A / B with a verdict ("parity" where the
# ranges overlap), into $OUT_DIR/summary.txt too (added to it with `append`).
mc_summary() {
  local a=$1 b=$2 name col m lo hi
  col_of() { awk -v n="$1" -v c="$2" '$1 == n { print $c }' "$OUT_DIR/closed.txt" | stats - 1; }
  {
    echo
    echo "| server | req/s | p50 µs | p99 µs | $3 |"
    echo "|---|---|---|---|---|"
    for name in "$a" "$b"; do
      local row="| $name"
      for col in 2 3 4 5; do
        read -r m lo hi <<<"$(col_of "$name" "$col")"
        row="$row | $m [$lo-$hi]"
      done
      echo "$row |"
    done
    local am alo ahi bm blo bhi
    read -r am alo ahi <<<"$(col_of "$a" 2)"
    read -r bm blo bhi <<<"$(col_of "$b" 2)"
    awk -v a="$a" -v b="$b" -v am="$am" -v alo="$alo" -v ahi="$ahi" -v bm="$bm" -v blo="$blo" \
      -v bhi="$bhi" 'BEGIN {
      r = am / bm
      v = (alo <= bhi && blo <= ahi) ? "parity (ranges overlap)" : (r > 1 ? a " ahead" : b " ahead")
      printf "closed-loop req/s, %s / %s: %.2fx (%s)\n", a, b, r, v }'
  } | if [[ ${4:-} == append ]]; then tee -a "$OUT_DIR/summary.txt"; else tee "$OUT_DIR/summary.txt"; fi
}

# round_order ROUND NAMES... : sets the array ORDER to NAMES, reversed in even rounds, so
# that no server always runs first or last
round_order() {
  local round=$1 i j t
  shift
  ORDER=("$@")
  if ((round % 2 == 0)); then
    for ((i = 0, j = ${#ORDER[@]} - 1; i < j; i++, j--)); do
      t=${ORDER[i]} ORDER[i]=${ORDER[j]} ORDER[j]=$t
    done
  fi
}

# io_thread_to PID CPU: moves ebb-vmm PID's virtio-net I/O thread (and only it) to CPU;
# fails if the process has none.
io_thread_to() {
  local t
  for t in /proc/"$1"/task/*; do
    if [[ $(cat "$t/comm" 2>/dev/null) == virtio-net ]]; then
      taskset -p -c "$2" "${t##*/}" >/dev/null || return 1
      return 0
    fi
  done
  echo "ebb-vmm (pid $1) has no virtio-net thread" >&2
  return 1
}

# memcaslap_etc_config FILE: writes memcaslap's (-F) ETC-like mix to FILE: keys 20-70 B
# (uniform), values 1-1024 B in four bands approximating mutilate's ETC value sizes
# (44 % of 1-14 B; 12 % 15-64 B; 25 % 65-256 B; 19 % 257-1024 B: the generalized
# Pareto(15, 214.5, 0.348) tail truncated at 1024 B), 30 gets per set (set 0.0323, get
# 0.9677). Unlike mc-load's ETC, memcaslap's keys are not Zipf: each concurrency reads
# and writes within its own task window of 10k keys (-w default) and only gets keys it
# has set, so there are no misses.
memcaslap_etc_config() {
  cat >"$1" <<'EOF'
# ETC-like mix for memcaslap (bench/lib.sh memcaslap_etc_config)
key
20 70 1
value
1 14 0.44
15 64 0.12
65 256 0.25
257 1024 0.19
cmd
0 0.0323
1 0.9677
EOF
}

# mc_memcaslap NAME PID DURATION CONFIG LOAD... : with LOAD a memcaslap command but for
# -F, -t and --stat_freq (e.g. `ip netns exec NS taskset -c 1 memcaslap -s A -c 32 -T 1`):
# one run of DURATION with CONFIG and the server PID's CPU time around it; appends
# "NAME ops/s nan nan cpu_us_per_request" to $OUT_DIR/closed.txt, the format of
# mc_closed_loop (memcaslap reports no percentiles), so mc_summary tabulates both. Its
# ops/s and request count are memcaslap's own (TPS, Ops), over its whole run.
mc_memcaslap() {
  local name=$1 pid=$2 duration=$3 config=$4
  shift 4
  local before after out ops tps cpu
  before=$(cpu_ticks "$pid")
  out=$("$@" -F "$config" -t "$duration" 2>&1) || { echo "$out" >&2; die "memcaslap failed against $name"; }
  after=$(cpu_ticks "$pid")
  echo "$out" >"$OUT_DIR/memcaslap-$name-$RUN_ID.txt"
  ops=$(sed -n 's/.*Ops: *\([0-9]*\).*/\1/p' <<<"$out" | tail -n1)
  tps=$(sed -n 's/.*TPS: *\([0-9]*\).*/\1/p' <<<"$out" | tail -n1)
  [[ -n $ops && -n $tps ]] || { echo "$out" >&2; die "no Ops/TPS in memcaslap's output for $name"; }
  cpu=$(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$ops" \
    'BEGIN { if (n > 0) printf "%.2f", t * 1e6 / hz / n; else print "nan" }')
  echo "$name $tps nan nan $cpu" | tee -a "$OUT_DIR/closed.txt"
}
