#!/usr/bin/env bash
# Build ebb-vmm's fuzz targets and run each for SECONDS (default 10), from its seeds
# (tests/fuzz/run-targets.sh). Exits non-zero if any crashes, leaks, times out or fails
# to build. Input limits: an image needs room for segments; a virtqueue input is a
# 53-byte header and the start of guest memory (a 256-entry table is 4 KiB).
# Usage: crates/ebb-vmm/fuzz/run-all.sh [SECONDS]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../../../tests/fuzz/run-targets.sh" "$here" "${1:-10}" image:65536 virtqueue:8192
