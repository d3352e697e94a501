#!/usr/bin/env bash
# Build every httpd fuzz target and run each for SECONDS (default 10), from its seeds
# (tests/fuzz/run-targets.sh). Exits non-zero if any crashes, leaks, times out or fails
# to build.
# Usage: apps/httpd/fuzz/run-all.sh [SECONDS]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../../../tests/fuzz/run-targets.sh" "$here" "${1:-10}" http_head:20000 http_stream:8192
