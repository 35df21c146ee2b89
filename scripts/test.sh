#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (what CI runs): the normal
# build, then the same suite under AddressSanitizer + UBSan.
#   scripts/test.sh          both
#   scripts/test.sh --quick  the normal build only
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
scripts/build.sh -DTESSERA_BUILD_TESTS=ON
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2 --timeout 900
if [ "${1:-}" != "--quick" ]; then
  bash scripts/sanitize.sh
fi
