#!/usr/bin/env bash
# Instructions per request, by layer, for hosted Ebbflow memcached and memcached 1.6
# (docs/benchmarks.md, "memcached: instructions per request"): each server runs under
# `valgrind --tool=callgrind` (pinned to CPU 0) and serves the same request mix from the
# same client — bench's mc-load, natively, pinned to CPU 1: closed loop, depth 1, ETC
# (keys 20-70 B, values 1-1024 B, 30:1 gets to sets, Zipf 0.99 over KEYS preloaded keys,
# seed 1), CONNS connections (a list: each is measured).
#
# The measured phase is cut out with callgrind_control: the counters are zeroed (-z)
# before an mc-load window and dumped (-d) after it; the server's own `stats`
# (cmd_get + cmd_set) before and after count its requests. Two windows (SHORT, 1 s, and
# LONG, 8 s) are measured per configuration and the
# figures are their difference divided by the difference in requests, so the
# connections' set-up and tear-down drop out. Start-up and
# the preload are never counted. Ir is user space only: valgrind does not see the kernel,
# so the TCP stack (Linux's here) and the system calls' kernel side are not in it; the
# system calls per request are counted separately, natively (SYSCALLS=1: perf stat on
# the raw_syscalls tracepoint, per name, around a closed-loop window).
#
# Servers (SERVERS, in this order, RUNS times, fresh each run):
#   ebb         apps/memcached, release build (profile.release has debug = 1, so
#               callgrind sees the Rust functions and the inlined source files),
#               EBB_CPUS=1, EBB_IDLE_POLL_US=0: an idle core sleeps in epoll_wait at once
#               (the default 50 µs of polling spins on the clock, which under valgrind
#               counts wall-clock-dependent instructions; see ebb-poll)
#   ebb-poll    (not by default) the same with the default idle poll (50 µs): the
#               spinning's share; slow to start under callgrind on a busy CPU
#   ebb-tap     (not by default) apps/memcached as `ebb`, but on ebb-net, Ebbflow's own
#               TCP/IP stack, over a TAP device (`--tap NAME --ip 10.0.2.15/24`, port
#               11211): the protocol, store, TCP and IP code the native image runs, with
#               the TAP driver (crates/ebb-tap, read/writev) where native has
#               virtio-net, and software checksums (no offload on the TAP). The TAP's
#               kernel end goes into a network namespace as 10.0.2.2/24, where mc-load
#               (CPU 1) and the `stats` requests run. Needs root, /dev/net/tun and
#               `ip netns`: prints `SKIPPED: ...` and leaves it out otherwise
#   memcached   MEMCACHED_G: memcached 1.6.18 built from source with -g (Debian's
#               binary is stripped); skipped when unset. Recipe in
#               bench/results/memcached-callgrind.md
#   memcached-deb  Debian's /usr/bin/memcached 1.6.18 (stripped: split by object only)
# Both memcacheds: `-t 1 -m 1024 -c 1024`, under `ulimit -n 1036`: valgrind keeps 12
# descriptors for itself and shows the program a limit 12 lower, and memcached's
# setrlimit(RLIMIT_NOFILE, {1024, 1024}) succeeds under valgrind only when 1024 is
# exactly that limit (otherwise: "failed to set rlimit for open files").
#
# Layers: each function's self cost, attributed by the source file of the (possibly
# inlined) code when it is ours or memcached's, else by the enclosing function's name or
# object — so the layers sum to the total. The table is in layer() below. With ebb-tap,
# ebb-net's code splits into TCP (crates/ebb-net/src/tcp, the TCP header code in
# wire/tcp), the internet checksum (ebb-net-driver's checksum.rs), IP / ARP / Ethernet (iface,
# transport.rs and the other wire formats), the stack driver and its connections
# (ebb-net's stack.rs and steering.rs, crates/ebb-netstack) and the device (crates/ebb-tap,
# ebb-hosted's netstack.rs, crates/ebb-net-driver; rustix's read and writev, the system
# calls' user side, are inlined into ebb-tap's functions and go with them). The old paths
# (ebb-hosted's tap.rs, ebb-net's phy) stay in the patterns for runs of older commits.
#
# Usage: bench/scripts/memcached-callgrind.sh   (env: RUNS=2 CONNS="1 32" KEYS=100000
#        SHORT=1s LONG=8s SERVERS="ebb memcached memcached-deb" MEMCACHED_G=
#        SYSCALLS=1 SYSCALL_WINDOW=3s OUT_DIR=/tmp/memcached-callgrind CARGO_TARGET_DIR=...)
#   RUNS            runs of every server (fresh server each run; order alternates)
#   CONNS           mc-load connection counts, each measured
#   KEYS            keys preloaded and requested
#   SHORT, LONG     the two measured windows per configuration
#   SERVERS         the servers above, in order
#   MEMCACHED_G     memcached 1.6.18 built with -g (the `memcached` server)
#   SYSCALLS        1: count system calls per request natively with perf stat (if usable)
#   SYSCALL_WINDOW  its closed-loop window
#   OUT_DIR         dumps, logs, per-function lists and summary.md
#   DUMP_INSTR      yes: the dumps hold a cost per instruction address too (callgrind's
#                   --dump-instr), to tell moves, calls and checks apart with objdump
# shellcheck disable=SC2030,SC2031 # each server's environment is its own subshell's
set -euo pipefail

RUNS=${RUNS:-2}
CONNS=${CONNS:-1 32}
KEYS=${KEYS:-100000}
SHORT=${SHORT:-1s}
LONG=${LONG:-8s}
SERVERS=${SERVERS:-ebb memcached memcached-deb}
MEMCACHED_G=${MEMCACHED_G:-}
SYSCALLS=${SYSCALLS:-1}
SYSCALL_WINDOW=${SYSCALL_WINDOW:-3s}
OUT_DIR=${OUT_DIR:-/tmp/memcached-callgrind}

die() { echo "memcached-callgrind: error: $*" >&2; exit 1; }
for t in valgrind callgrind_control memcached taskset python3; do
  command -v "$t" >/dev/null || { echo "SKIPPED: memcached-callgrind: $t is not installed"; exit 0; }
done
(($(nproc) >= 2)) || die "needs 2 CPUs"

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo=$PWD
target=${CARGO_TARGET_DIR:-$PWD/target}
# Two builds: `-p memcached -p ebb-bench --bin mc-load` would build mc-load alone.
cargo build --release -q -p memcached
cargo build --release -q -p ebb-bench --bin mc-load
ebb_mc=$target/release/memcached
load=$target/release/mc-load
mkdir -p "$OUT_DIR"
# memcached drops to nobody, and callgrind writes its dumps as the process's user.
chmod 1777 "$OUT_DIR"
rm -f "$OUT_DIR"/cg.* "$OUT_DIR"/phases.txt "$OUT_DIR"/syscalls.txt

echo "# $(git rev-parse --short HEAD) $(date -u +%FT%TZ) $(valgrind --version);" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"

# shellcheck source=bench/lib.sh
source bench/lib.sh
SERVER_PID=""
# ebb-tap: the client's network namespace (made once, when ebb-tap runs), the TAP device
# of the server running now (a fresh name per start: the last one may still be going
# away), and the addresses (QEMU's user network, as the native image's default)
NS=""
TAP=""
TAPS=0
SERVER_IP=10.0.2.15
CLIENT_IP=10.0.2.2
cleanup() {
  stop
  if [[ -n $NS ]]; then ip netns del "$NS" 2>/dev/null || true; fi
}
trap cleanup EXIT
trap "exit 130" INT TERM # so the EXIT trap runs on a signal too

# tap_usable -> 0 when ebb-tap can run here, else prints SKIPPED and the reason
tap_usable() {
  local why=""
  if [[ $(id -u) != 0 ]]; then
    why="needs root (it creates a TAP device and a network namespace)"
  elif [[ ! -c /dev/net/tun ]]; then
    why="/dev/net/tun does not exist (modprobe tun)"
  elif ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
    why="\`ip netns\` is not usable (iproute2)"
  fi
  [[ -z $why ]] && return 0
  echo "SKIPPED: memcached-callgrind ebb-tap: $why"
  return 1
}

# tap_to_ns: the server's TAP device goes into the namespace as 10.0.2.2/24 (it vanishes
# when the server exits)
tap_to_ns() {
  local i
  for ((i = 0; i < 100; i++)); do
    ip link show "$TAP" >/dev/null 2>&1 && break
    sleep 0.05
  done
  ip link set "$TAP" netns "$NS"
  ip -n "$NS" addr add "$CLIENT_IP/24" dev "$TAP"
  ip -n "$NS" link set "$TAP" up
}

# client CMD...: runs CMD where the client of the current server runs (in the namespace
# for ebb-tap)
client() { "${CLIENT[@]}" "$@"; }

# requests -> cmd_get + cmd_set of the current server (its `stats`, from the client's side)
requests() {
  # shellcheck disable=SC2016 # $1 and $2 are the inner shell's
  client bash -c 'source bench/lib.sh && mc_requests "$1" "$2"' requests "$PORT" "$HOST"
}

# serve NAME WRAP...: starts server NAME on CPU 0 under the command WRAP (valgrind ...,
# or nothing), on a free port (ebb-tap: 11211, in its own network); sets SERVER_PID,
# PORT, HOST (the server's address as its client sees it) and CLIENT (the client's
# command prefix)
serve() {
  local name=$1
  shift
  PORT=$(free_port)
  HOST=127.0.0.1
  CLIENT=()
  local log=$OUT_DIR/server-$name-$RUN_ID.log
  # As root, memcached runs as nobody from the start (not with -u nobody, which would
  # switch users under valgrind and leave callgrind_control unable to reach it).
  # callgrind_control (vgdb) reaches it only as the same user.
  local user=()
  [[ $(id -u) == 0 ]] && user=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
  AS=()
  case $name in
    ebb) (export EBB_CPUS=1 EBB_IDLE_POLL_US=0
      exec taskset -c 0 "$@" "$ebb_mc" -p "$PORT" -m 1024 -c 1024 -t 1) >"$log" 2>&1 & ;;
    ebb-poll) (export EBB_CPUS=1
      exec taskset -c 0 "$@" "$ebb_mc" -p "$PORT" -m 1024 -c 1024 -t 1) >"$log" 2>&1 & ;;
    ebb-tap)
      PORT=11211
      HOST=$SERVER_IP
      CLIENT=(ip netns exec "$NS")
      TAPS=$((TAPS + 1))
      TAP="ebcg$$x$TAPS"
      : >"$log" # exists before the background child opens it (no race with grep)
      (export EBB_CPUS=1 EBB_IDLE_POLL_US=0
        exec taskset -c 0 "$@" "$ebb_mc" -p "$PORT" -m 1024 -c 1024 -t 1 --tap "$TAP" \
          --ip "$SERVER_IP/24") >"$log" 2>&1 &
      ;;
    memcached | memcached-deb)
      local bin=/usr/bin/memcached
      [[ $name == memcached ]] && bin=$MEMCACHED_G
      AS=("${user[@]}")
      (ulimit -n 1036
        exec "${user[@]}" taskset -c 0 "$@" "$bin" -l 127.0.0.1 -p "$PORT" -U 0 -t 1 -m 1024 \
          -c 1024) >"$log" 2>&1 &
      ;;
  esac
  SERVER_PID=$!
  local i moved=0
  for ((i = 0; i < 600; i++)); do
    if [[ $name == ebb-tap && $moved == 0 ]] && grep -q 'listening on' "$log"; then
      tap_to_ns
      moved=1
    fi
    if [[ $name != ebb-tap || $moved == 1 ]]; then
      # shellcheck disable=SC2016 # $1 and $2 are the inner shell's
      client bash -c 'exec 3<>"/dev/tcp/$1/$2"' probe "$HOST" "$PORT" 2>/dev/null && return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  cat "$log" >&2
  die "$name did not start"
}

closed() { # closed CONNS DURATION -> mc-load's JSON
  client "$load" --addr "$HOST:$PORT" --pin-core 1 --conns "$1" --workload etc --keys "$KEYS" \
    --closed-loop --depth 1 --warmup 0s --duration "$2" --json
}

preload() { # preload: the keys, and 1 s of load (start-up, not measured)
  client "$load" --addr "$HOST:$PORT" --pin-core 1 --conns 4 --workload etc --keys "$KEYS" \
    --closed-loop --preload --warmup 0s --duration 1s >/dev/null
}

servers=()
for name in $SERVERS; do
  if [[ $name == memcached && -z $MEMCACHED_G ]]; then
    echo "(memcached: MEMCACHED_G is not set, so no symbol split for memcached; see the recipe)"
    continue
  fi
  if [[ $name == ebb-tap ]]; then
    tap_usable || continue
    NS="ebcg$$"
    ip netns add "$NS"
    ip -n "$NS" link set lo up
  fi
  servers+=("$name")
done
((${#servers[@]} > 0)) || { echo "SKIPPED: memcached-callgrind: no server to measure"; exit 0; }

DUMP=0
for ((run = 1; run <= RUNS; run++)); do
  order=("${servers[@]}")
  if ((run % 2 == 0)); then # alternate the order run by run
    order=()
    for ((i = ${#servers[@]} - 1; i >= 0; i--)); do order+=("${servers[i]}"); done
  fi
  for name in "${order[@]}"; do
    RUN_ID="$run-$name"
    out=$OUT_DIR/cg.$name.$run
    serve "$name" valgrind --tool=callgrind "--dump-instr=${DUMP_INSTR:-no}" --callgrind-out-file="$out"
    preload
    DUMP=0
    for conns in $CONNS; do
      for window in "$SHORT" "$LONG"; do
        n0=$(requests)
        "${AS[@]}" callgrind_control -z "$SERVER_PID" >/dev/null
        closed "$conns" "$window" >"$OUT_DIR/mc-load-$RUN_ID-$conns-$window.json"
        "${AS[@]}" callgrind_control -d "$SERVER_PID" >/dev/null
        n1=$(requests)
        DUMP=$((DUMP + 1))
        # callgrind numbers the dumps .1, .2, ...: wait for this one to be written
        for ((i = 0; i < 100; i++)); do [[ -s $out.$DUMP ]] && break; sleep 0.1; done
        echo "$name $run $conns $window $((n1 - n0)) $out.$DUMP" | tee -a "$OUT_DIR/phases.txt"
      done
    done
    stop
  done
done

# The system calls, natively (no valgrind): perf stat counts the server's system calls
# by name around one closed-loop window.
if [[ $SYSCALLS == 1 ]] && command -v perf >/dev/null &&
  perf stat -e raw_syscalls:sys_enter -- true >/dev/null 2>&1; then
  names="read readv recvfrom recvmsg write writev sendto sendmsg epoll_wait epoll_pwait"
  names="$names epoll_pwait2 epoll_ctl accept4 close futex nanosleep clock_nanosleep clock_gettime getrusage"
  events="raw_syscalls:sys_enter"
  for s in $names; do # the tracepoints this kernel has
    [[ -d /sys/kernel/tracing/events/syscalls/sys_enter_$s ]] && events="$events,syscalls:sys_enter_$s"
  done
  secs=${SYSCALL_WINDOW%s}
  for name in "${servers[@]}"; do
    for conns in $CONNS; do
      RUN_ID="sys-$name-$conns"
      serve "$name"
      preload
      n0=$(requests)
      perf stat -x, -e "$events" -p "$SERVER_PID" -o "$OUT_DIR/perf-$RUN_ID.csv" -- \
        sleep "$(awk -v s="$secs" 'BEGIN { print s + 1 }')" &
      perf_pid=$!
      sleep 0.5
      closed "$conns" "$SYSCALL_WINDOW" >/dev/null
      wait "$perf_pid"
      n1=$(requests)
      # perf's window covers the client's connect and close too: a little over
      echo "$name $conns $((n1 - n0)) $OUT_DIR/perf-$RUN_ID.csv" | tee -a "$OUT_DIR/syscalls.txt"
      stop
    done
  done
fi

python3 - "$OUT_DIR" "$repo" <<'PY' | tee "$OUT_DIR/summary.md"
import collections, os, re, statistics, sys

out_dir, repo = sys.argv[1], sys.argv[2]

def parse(path):
    """Self cost (Ir) per (object, function's file, source file of the code, function)."""
    names = {"ob": {}, "fl": {}, "fn": {}}
    kind = {"ob": "ob", "cob": "ob", "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl",
            "cfl": "fl", "fn": "fn", "cfn": "fn"}
    def name(k, v):
        m = re.match(r"\((\d+)\)(?: (.*))?$", v)
        if not m:
            return v
        d = names[kind[k]]
        if m.group(2) is not None:
            d[m.group(1)] = m.group(2)
        return d.get(m.group(1), "?")
    cost = collections.Counter()
    ob = fl = cur = fn = "?"
    skip = False  # the cost line after calls= is the call's inclusive cost
    for line in open(path):
        c = line[:1]
        if c.isdigit() or c in "+-*":
            if skip:
                skip = False
            else:
                cost[(ob, fl, cur, fn)] += int(line.split()[-1])
            continue
        m = re.match(r"(\w+)[=:]\s?(.*)$", line.rstrip("\n"))
        if not m:
            continue
        k, v = m.groups()
        if k in kind:
            n = name(k, v)
            if k == "ob":
                ob = n
            elif k == "fl":
                fl = cur = n
            elif k in ("fi", "fe"):
                cur = n
            elif k == "fn":
                fn, cur = n, fl
        elif k == "calls":
            skip = True
    return cost

TCP, IP, CSUM, DRIVER, DEVICE = ("TCP (ebb-net)", "IP / ARP / Ethernet (ebb-net)",
                                 "checksums (ebb-net, software)",
                                 "stack driver (ebb-net stack, ebb-netstack)",
                                 "device (TAP driver + read/writev, user side)")
LAYERS = ["protocol", "store", "server / connection", "buffers (IOBuf)", "event loop / runtime",
          "locks (pthread mutex)", "socket calls (user side)", TCP, CSUM, IP, DRIVER, DEVICE,
          "allocator", "memcpy / memset / memcmp", "other"]

# Rust paths (a function's name, or the crate part of a source path) -> layer
RUST = [
    (r"memcached::protocol|apps/memcached/src/protocol/|memchr", "protocol"),
    (r"memcached::store|apps/memcached/src/store/|foldhash|ebb_core::rcu::hashmap|ebb-core/src/rcu/hashmap",
     "store"),
    (r"memcached::server|apps/memcached/src/(server/\w+|server|main|lib)\.rs|^memcached::|ebb/src/net", "server / connection"),
    (r"ebb_core::iobuf|ebb-core/src/iobuf/|ebb_core::buf", "buffers (IOBuf)"),
    (r"ebb_hosted::tcp|ebb-hosted/src/tcp|rustix::net|rustix::io", "socket calls (user side)"),
    # ebb-net (ebb-tap): the TAP driver and the device seam; the rustix system calls it
    # makes are inlined into it (so they go by its name)
    (r"ebb_net::wire::checksum|ebb-net/src/wire/checksum|ebb_net_driver::checksum|"
     r"ebb-net-driver/src/checksum", CSUM),
    (r"ebb_tap|ebb-tap/src/|ebb_hosted::netstack|ebb-hosted/src/netstack\.rs|ebb_net_driver|"
     r"ebb-net-driver/src/|ebb_hosted::tap|ebb-hosted/src/tap\.rs|ebb_net::phy|ebb-net/src/phy/|"
     r"ebb_netstack::device|ebb-netstack/src/device\.rs", DEVICE),
    (r"ebb_net::(wire::)?tcp|ebb-net/src/(wire/)?tcp", TCP),
    (r"ebb_net::(iface|wire|transport)|ebb-net/src/(iface/|wire/|transport\.rs)", IP),
    (r"ebb_netstack|ebb-netstack/src/|ebb_net::|ebb-net/src/", DRIVER),
    (r"ebb_core|ebb-core/src/|ebb_hosted|ebb-hosted/src/|crossbeam|futures|Timespec|std::time|"
     r"std::sys::pal::unix::time|rustix::event", "event loop / runtime"),
    (r"__rust_(alloc|dealloc|realloc|alloc_zeroed)|__rdl_|finish_grow|grow_one|grow_amortized|"
     r"alloc::alloc::|ebb_mem", "allocator"),
]
# memcached's C source files -> layer
C_FILES = [
    (r"(^|/)proto_(text|bin|proxy)\.c$", "protocol"),
    (r"(^|/)(items|slabs|assoc|hash|murmur3_hash|jenkins_hash|crawler|slab_automove.*|extstore|storage)\.c$",
     "store"),
    (r"(^|/)(memcached|itoa_ljust|util|stats_prefix)\.c$", "server / connection"),
    (r"(^|/)(thread|cache|bipbuffer)\.c$", "event loop / runtime"),
]
LIBC = [
    (r"^(malloc|free|cfree|calloc|realloc|_int_\w+|tcache\w*|malloc_\w+|unlink_chunk|sysmalloc|"
     r"__libc_(malloc|free|calloc|realloc)|arena_\w+)$", "allocator"),
    (r"^__(mem|str|wmem)\w*|^(memcpy|memmove|memset|memcmp|bcmp)", "memcpy / memset / memcmp"),
    (r"^(__libc_)?(read|write|writev|readv|recv\w*|send\w*|accept4?|epoll_\w+|__GI_\w*read|"
     r"__GI_\w*write|close|__close|__libc_sendmsg|__libc_recvmsg|shutdown|setsockopt|getsockopt|"
     r"__libc_read|__libc_write|syscall)(@.*)?$", "socket calls (user side)"),
    (r"^(pthread_mutex\w*|__pthread_mutex\w*|___pthread_mutex\w*|lll_\w+|__lll_\w+)",
     "locks (pthread mutex)"),
    (r"^(clock_gettime|__clock_gettime|pthread_\w+|__pthread\w*|___pthread\w*|"
     r"futex\w*|__futex\w*|sem_\w+|nanosleep|__nanosleep|clock_nanosleep|__GI___clock\w*)",
     "event loop / runtime"),
]

# memcached's functions that live in another layer's file (thread.c's item locks)
C_FUNCTIONS = [(r"^(item_|do_item|assoc_|slabs_|lru_)", "store")]

def layer(ob, fl, fi, fn):
    obj = os.path.basename(ob)
    if obj.startswith("libevent"):
        return "event loop / runtime"
    if obj.startswith("libc.so") or obj.startswith("ld-linux"):
        base = fn.split("@")[0]
        for rx, l in LIBC:
            if re.search(rx, base):
                return l
        return "other"
    if re.search(r"\.[ch]$", fl):  # C: by function name, else file (inlined headers: the caller's)
        for rx, l in C_FUNCTIONS:
            if re.search(rx, fn):
                return l
        for f in (fi, fl):
            for rx, l in C_FILES:
                if re.search(rx, f):
                    return l
    ours = [f for f in (fi, fl) if f.startswith(repo + "/")]
    for key in ours[:1] + [fn]:
        for rx, l in RUST:
            if re.search(rx, key):
                return l
    # drop_in_place<T>, <T as Trait>::f: by T
    m = re.search(r"drop_in_place<([\w:]+)|^<([\w:]+)", fn)
    if m:
        for rx, l in RUST:
            if re.search(rx, m.group(1) or m.group(2)):
                return l
    if re.search(r"(^|/)memcached$", ob) and fn.startswith("0x"):
        return "memcached binary (no symbols)"
    return "other"

phases = [l.split() for l in open(os.path.join(out_dir, "phases.txt"))]
# (server, run, conns) -> {window: (requests, per-layer Counter, per-function Counter)}
data = collections.defaultdict(dict)
for name, run, conns, window, n, path in phases:
    cost = parse(path)
    by_layer, by_fn = collections.Counter(), collections.Counter()
    for (ob, fl, fi, fn), v in cost.items():
        by_layer[layer(ob, fl, fi, fn)] += v
        by_fn[(layer(ob, fl, fi, fn), os.path.basename(ob), fn)] += v
    data[(name, int(run), int(conns))][window] = (int(n), by_layer, by_fn)

def slope(d):
    (w1, (n1, l1, f1)), (w2, (n2, l2, f2)) = sorted(d.items(), key=lambda kv: kv[1][0])
    dn = n2 - n1
    return dn, n2, {k: (l2[k] - l1[k]) / dn for k in set(l1) | set(l2)}, \
        {k: (f2[k] - f1[k]) / dn for k in set(f1) | set(f2)}, sum(l2.values()) / n2

servers = []
for (name, run, conns) in data:
    if name not in servers:
        servers.append(name)
conns_list = sorted({c for (_, _, c) in data})

print("## Instructions per request (user space, callgrind)\n")
print("Difference of the LONG and SHORT windows divided by the difference in requests;"
      " runs listed separately (they repeat within the spread shown).\n")
print("| server | connections | requests (diff) | Ir/request per run | Ir/request, whole LONG window |")
print("|---|---|---|---|---|")
per = {}
for name in servers:
    for c in conns_list:
        rows = [slope(data[(name, r, c)]) for (n_, r, c_) in sorted(data) if n_ == name and c_ == c]
        if not rows:
            continue
        totals = [sum(r[2].values()) for r in rows]
        per[(name, c)] = rows
        print(f"| {name} | {c} | {', '.join(str(r[0]) for r in rows)} | "
              f"{' / '.join(f'{t:,.0f}' for t in totals)} | "
              f"{' / '.join(f'{r[4]:,.0f}' for r in rows)} |")

for c in conns_list:
    names = [n for n in servers if (n, c) in per]
    present = [l for l in LAYERS + ["memcached binary (no symbols)"]
               if any(abs(statistics.mean(r[2].get(l, 0) for r in per[(n, c)])) >= 0.5 for n in names)]
    print(f"\n## By layer, {c} connection{'s' if c > 1 else ''} (Ir/request, mean of runs; % of the server's total)\n")
    print("| layer | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    tot = {n: statistics.mean(sum(r[2].values()) for r in per[(n, c)]) for n in names}
    for l in present:
        cells = []
        for n in names:
            v = statistics.mean(r[2].get(l, 0) for r in per[(n, c)])
            cells.append(f"{v:,.0f} ({100 * v / tot[n]:.0f} %)")
        print(f"| {l} | " + " | ".join(cells) + " |")
    print("| **total** | " + " | ".join(f"**{tot[n]:,.0f}**" for n in names) + " |")

for name in servers:
    for c in conns_list:
        if (name, c) not in per:
            continue
        fns = collections.Counter()
        for r in per[(name, c)]:
            for k, v in r[3].items():
                fns[k] += v / len(per[(name, c)])
        with open(os.path.join(out_dir, f"functions-{name}-{c}.txt"), "w") as f:
            for (l, ob, fn), v in fns.most_common(60):
                f.write(f"{v:10.1f}  {l:<44} {ob:<18} {fn}\n")

sys_path = os.path.join(out_dir, "syscalls.txt")
if os.path.exists(sys_path):
    print("\n## System calls per request (natively, perf stat, one closed-loop window)\n")
    print("| server | connections | requests | all | by name |")
    print("|---|---|---|---|---|")
    for line in open(sys_path):
        name, c, n, path = line.split()
        n = int(n)
        counts = {}
        for row in open(path):
            parts = row.strip().split(",")
            if len(parts) > 2 and parts[0].replace(".", "").isdigit():
                counts[parts[2].split(":")[-1].replace("sys_enter_", "")] = float(parts[0])
        allc = counts.pop("sys_enter", 0)
        detail = ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])
                           if v / n >= 0.005)
        print(f"| {name} | {c} | {n} | {allc / n:.2f} | {detail} |")
PY
echo "dumps, per-function lists (functions-SERVER-CONNS.txt) and logs: $OUT_DIR"
