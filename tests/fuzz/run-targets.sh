#!/usr/bin/env bash
# Builds the cargo-fuzz project in DIR and runs each of its TARGETS for SECONDS, from
# seeds/<target> (checked-in fixtures) into corpus/<target> (what the run finds).
# A target may carry its libFuzzer input limit as TARGET:MAX_LEN.
# Exits non-zero if any target crashes, leaks, times out or fails to build; the
# reproducers are in DIR/artifacts/.
# Usage: tests/fuzz/run-targets.sh DIR SECONDS TARGET[:MAX_LEN]...
# (each fuzz project's run-all.sh calls this with its own targets).
# With FUZZ_TARGET_DIR set, every project builds there (target names are unique across
# the projects): the crates they share (ebb-core, ebb-net, ebb-vmm, ...) are built for
# the sanitizers once instead of once per project. CI sets it.
set -euo pipefail

dir="$1"
seconds="$2"
shift 2
cd "$dir"

shared=()
if [[ -n "${FUZZ_TARGET_DIR:-}" ]]; then
    shared=(--target-dir "$FUZZ_TARGET_DIR")
fi
cargo +nightly fuzz build "${shared[@]}"
failed=()
for entry in "$@"; do
    target="${entry%%:*}"
    limit=()
    if [[ "$entry" == *:* ]]; then
        limit=(-max_len="${entry##*:}")
    fi
    mkdir -p "corpus/$target"
    echo "=== $target: ${seconds}s"
    log="$(mktemp)"
    if cargo +nightly fuzz run "${shared[@]}" "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" "${limit[@]}" -print_final_stats=1 >"$log" 2>&1; then
        grep -E '(DONE|^Done|^stat::number_of_executed_units|^stat::average_exec_per_sec)' "$log" || true
    else
        tail -n 40 "$log"
        failed+=("$target")
    fi
    rm -f "$log"
done

if ((${#failed[@]})); then
    echo "FAILED: ${failed[*]} (reproducers in $(pwd)/artifacts/)"
    exit 1
fi
echo "all $# targets ran ${seconds}s each without a crash"
