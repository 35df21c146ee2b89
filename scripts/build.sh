#!/usr/bin/env bash
# Configures and builds Tessera into build/ (or $BUILD_DIR).
#   scripts/build.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DTESSERA_BUILD_BENCH=OFF "$@" >/dev/null
cmake --build "$build"
