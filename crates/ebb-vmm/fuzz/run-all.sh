#!/usr/bin/env bash
# Build ebb-vmm's fuzz target and run it for SECONDS (default 10) from its seeds.
# Exits non-zero if it crashes, leaks, times out or fails to build.
# Usage: crates/ebb-vmm/fuzz/run-all.sh [SECONDS]
set -euo pipefail

seconds="${1:-10}"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

cargo +nightly fuzz build
mkdir -p corpus/image
echo "=== image: ${seconds}s"
log="$(mktemp)"
if cargo +nightly fuzz run image corpus/image seeds/image -- \
    -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 >"$log" 2>&1; then
    grep -E '(DONE|^Done|^stat::number_of_executed_units|^stat::average_exec_per_sec)' "$log" || true
    rm -f "$log"
    echo "the image target ran ${seconds}s without a crash"
else
    tail -n 40 "$log"
    rm -f "$log"
    echo "FAILED: image (reproducers in $here/artifacts/image/)"
    exit 1
fi
