#!/usr/bin/env bash
# Builds the whole suite with AddressSanitizer + UndefinedBehaviorSanitizer and
# runs it (scripts/test.sh runs it after the normal suite; about 3x slower).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=build-asan scripts/build.sh -DTESSERA_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithAsserts
# oneDNN's JIT kernels and libgomp are not instrumented; leaks in them are not ours.
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan --output-on-failure -j2 --timeout 3000
