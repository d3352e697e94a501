#!/usr/bin/env bash
# Build every ebb-usernet fuzz target and run each for SECONDS (default 10).
# Exits non-zero if any target crashes, leaks, times out or fails to build.
# Usage: crates/ebb-usernet/fuzz/run-all.sh [SECONDS]
set -euo pipefail

seconds="${1:-10}"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

targets=(guest_frames)

cargo +nightly fuzz build
failed=()
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    echo "=== $target: ${seconds}s"
    log="$(mktemp)"
    # corpus/<target> collects new inputs; seeds/<target> holds checked-in fixtures.
    if cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
        grep -E '(DONE|^Done|^stat::number_of_executed_units|^stat::average_exec_per_sec)' "$log" || true
    else
        tail -n 40 "$log"
        failed+=("$target")
    fi
    rm -f "$log"
done

if ((${#failed[@]})); then
    echo "FAILED: ${failed[*]} (reproducers in $here/artifacts/)"
    exit 1
fi
echo "all ${#targets[@]} targets ran ${seconds}s each without a crash"
