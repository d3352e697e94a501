#!/usr/bin/env bash
# Build ebb-vmm's fuzz targets and run each for SECONDS (default 10) from its seeds.
# Exits non-zero if any crashes, leaks, times out or fails to build.
# Usage: crates/ebb-vmm/fuzz/run-all.sh [SECONDS]
set -euo pipefail

seconds="${1:-10}"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

# target:max_len — an image needs room for segments; a virtqueue input is a 53-byte
# header and the start of guest memory (a 256-entry table is 4 KiB).
targets=(image:65536 virtqueue:8192)

cargo +nightly fuzz build
failed=0
for entry in "${targets[@]}"; do
    target="${entry%%:*}"
    max_len="${entry##*:}"
    mkdir -p "corpus/$target"
    echo "=== $target: ${seconds}s"
    log="$(mktemp)"
    if cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -max_len="$max_len" -print_final_stats=1 >"$log" 2>&1; then
        grep -E '(DONE|^Done|^stat::number_of_executed_units|^stat::average_exec_per_sec)' "$log" || true
        echo "the $target target ran ${seconds}s without a crash"
    else
        tail -n 40 "$log"
        echo "FAILED: $target (reproducers in $here/artifacts/$target/)"
        failed=1
    fi
    rm -f "$log"
done
exit "$failed"
