#!/usr/bin/env bash
# boot-compare.sh: how long one native image takes from process start to exit when our
# monitor boots it, when QEMU boots it through its PVH entry (microvm, KVM and TCG), and
# what a bare process costs on this machine (/bin/true).
#
# Usage: bench/scripts/boot-compare.sh          (from anywhere; runs in the repo root)
#
# Environment (defaults in brackets):
#   RUNS [20]           hyperfine --runs (after --warmup 3), every command
#   GUEST [hello]       the test guest (tests/guests/src/bin/GUEST.rs) to boot
#   QEMU_TIMEOUT [60]   seconds before a QEMU boot is killed (`timeout`); a boot that
#                       does not finish in the pre-flight run is reported and left out
#   BEFORE_VMM, BEFORE_IMAGE
#                       optional: another monitor binary and image (e.g. built from an
#                       older commit) measured in the same run, for before/after
#   SKIP_BUILD [0]      1: use the binaries already built (ebb-vmm, ebb, the images)
#   OUT_DIR             raw results [target/boot-compare/YYYYmmdd-HHMMSS]
#
# Every command is first run once and checked: ebb-vmm must exit 0 and print the
# guest's line; QEMU must exit with status 1 (= guest exit code 0 through isa-debug-exit,
# `(code << 1) | 1`) and print the same line on the serial console.
#
# Then hyperfine times every command alike, with -N (no shell) and without -i: each runs
# under `expect-status --wait-descendants STATUS --` (bench/src/bin/expect-status.rs),
# which turns the expected status into 0 and anything else into a failure — a failed run
# stops the benchmark instead of counting as a fast one — and which waits for every
# process the command left behind. So **every row includes the VM's teardown**: QEMU
# tears its VM down before it exits; our monitor hands the teardown to a background
# process and exits first (what a user waiting for the exit status sees; the
# `ebb-vmm (exit status only)` row times that, without waiting for the teardown). The
# wrapper's own cost (one fork + exec, about 1 ms here) is in every row, /bin/true's too.
# The QEMU commands also run under `timeout` (its exec is part of their time). Prints a
# Markdown table (median, mean ± σ, min–max, ratios) and writes it to $OUT_DIR/boot.md
# with the JSON.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD

RUNS=${RUNS:-20}
GUEST=${GUEST:-hello}
QEMU_TIMEOUT=${QEMU_TIMEOUT:-60}
SKIP_BUILD=${SKIP_BUILD:-0}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
OUT_DIR=${OUT_DIR:-$TARGET/boot-compare/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT_DIR"

die() { echo "boot-compare: $*" >&2; exit 1; }
command -v hyperfine >/dev/null || die "hyperfine is not installed (apt-get install hyperfine)"

VMM=$TARGET/release/ebb-vmm
IMAGE=$TARGET/guests/x86_64-unknown-none/release/$GUEST
if [[ $SKIP_BUILD != 1 ]]; then
  cargo build --release -p ebb-vmm >&2
  cargo build --release --target x86_64-unknown-none \
    --manifest-path tests/guests/Cargo.toml --target-dir "$TARGET/guests" >&2
  cargo build --release -p ebb-cli >&2
  cargo build --release -p ebb-bench --bin expect-status >&2
  "$TARGET/release/ebb" build --native hello >&2
fi
EBB=$TARGET/release/ebb
EXPECT=$TARGET/release/expect-status
[[ -x $EXPECT ]] || die "no expect-status at $EXPECT (cargo build --release -p ebb-bench)"
APP_IMAGE=$TARGET/x86_64-unknown-none/release/hello
[[ -x $VMM ]] || die "no monitor at $VMM"
[[ -f $IMAGE ]] || die "no image at $IMAGE"

QEMU_ARGS=(-m 128M -smp 1 -kernel "$IMAGE" -nographic -no-reboot
  -device isa-debug-exit,iobase=0xf4,iosize=0x04)

names=()
commands=()
# check NAME EXPECTED_STATUS COMMAND...: one run, must exit EXPECTED_STATUS and print the
# guest's first line; on success the command joins the benchmark.
check() {
  local name=$1 expected=$2
  shift 2
  local out=$OUT_DIR/preflight-${name// /_}.txt status=0
  "$@" </dev/null >"$out" 2>&1 || status=$?
  if [[ $status != "$expected" ]] || ! grep -q "from ring 3\|$GUEST" "$out"; then
    echo "boot-compare: $name: left out (status $status, expected $expected):" >&2
    head -c 2000 "$out" >&2
    echo >&2
    return 0
  fi
  names+=("$name")
  commands+=("$EXPECT --wait-descendants $expected -- $*")
}

check "ebb-vmm" 0 "$VMM" "$IMAGE"
# The same, timed only until the exit status (the teardown continues in the background).
check "ebb-vmm (exit status only)" 0 "$VMM" "$IMAGE"
if [[ ${names[-1]} == "ebb-vmm (exit status only)" ]]; then
  commands[-1]="$EXPECT 0 -- $VMM $IMAGE"
fi
# The user's command: `ebb run` on the apps/hello image (given as a file, so no cargo
# call is timed; `ebb run hello` adds cargo's up-to-date check, ≈ 0.1 s).
if [[ -x $EBB && -f $APP_IMAGE ]]; then
  check "ebb run hello" 0 "$EBB" run "$APP_IMAGE"
fi
if [[ -n ${BEFORE_VMM:-} && -n ${BEFORE_IMAGE:-} ]]; then
  check "ebb-vmm before" 0 "$BEFORE_VMM" "$BEFORE_IMAGE"
fi
if command -v qemu-system-x86_64 >/dev/null; then
  if [[ -w /dev/kvm ]]; then
    check "qemu microvm kvm" 1 timeout "$QEMU_TIMEOUT" \
      qemu-system-x86_64 -M microvm -accel kvm "${QEMU_ARGS[@]}"
  else
    echo "boot-compare: qemu microvm kvm: left out (/dev/kvm not usable)" >&2
  fi
  check "qemu microvm tcg" 1 timeout "$QEMU_TIMEOUT" \
    qemu-system-x86_64 -M microvm -accel tcg "${QEMU_ARGS[@]}"
else
  echo "boot-compare: QEMU commands left out: qemu-system-x86_64 is not installed" >&2
fi
names+=("/bin/true")
commands+=("$EXPECT --wait-descendants 0 -- /bin/true")

hyperfine -N --warmup 3 --runs "$RUNS" --export-json "$OUT_DIR/boot.json" \
  "${commands[@]}" >"$OUT_DIR/hyperfine.txt" 2>&1 || {
  cat "$OUT_DIR/hyperfine.txt" >&2
  die "hyperfine failed"
}

NAMES=$(printf '%s\n' "${names[@]}") python3 - "$OUT_DIR/boot.json" >"$OUT_DIR/boot.md" <<'EOF'
import json, os, statistics, sys
names = os.environ["NAMES"].splitlines()
results = json.load(open(sys.argv[1]))["results"]
ms = lambda s: s * 1e3
med = {n: statistics.median(r["times"]) for n, r in zip(names, results)}
base, floor = med.get("ebb-vmm"), med.get("/bin/true")
print("| command | median | mean ± σ | min – max | × ebb-vmm | × /bin/true |")
print("|---|---|---|---|---|---|")
for n, r in zip(names, results):
    t = r["times"]
    print(f"| {n} | {ms(med[n]):.1f} ms | {ms(statistics.mean(t)):.1f} ± "
          f"{ms(statistics.stdev(t)):.1f} ms | {ms(min(t)):.1f} – {ms(max(t)):.1f} ms | "
          f"{med[n] / base:.2f} | {med[n] / floor:.1f} |")
print()
print("Commands:")
print()
for n, r in zip(names, results):
    print(f"- {n}: `{r['command']}`")
EOF
{
  echo "runs: $RUNS each after 3 warm-ups; $(date -u '+%Y-%m-%d %H:%M UTC'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  cat "$OUT_DIR/boot.md"
} | tee "$OUT_DIR/boot.md.tmp"
mv "$OUT_DIR/boot.md.tmp" "$OUT_DIR/boot.md"
echo "raw results: $OUT_DIR" >&2
