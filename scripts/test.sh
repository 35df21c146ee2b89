#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (what CI runs), in phases:
#   1. setup      the Debian packages (scripts/setup.sh --test)
#      references the LLM compatibility references (scripts/llm_reference.sh)
#   2. build      the library, command line, examples and tests
#   3. tests      the suite, each test in its own process (ctest)
#   4. tiers      the op, kernel, quantization and autocast tests again at every
#                 lower CPU tier this machine can run (scripts/test_tiers.sh)
#   5. install    the installed package: consumer, headers, symbols (scripts/check_install.sh)
#   6. sanitizers under AddressSanitizer + UBSan, the tests of parsers, servers,
#                 kernels and the allocator (scripts/sanitize.sh --asan-ci; the
#                 whole suite: scripts/sanitize.sh --asan, by hand)
# and prints each phase's time at the end.
#   scripts/test.sh          all phases
#   scripts/test.sh --quick  phases 1-5 (no sanitizer build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
phases=()
run_phase() {  # name, command...
  local name=$1 t0=$SECONDS
  shift
  echo "== $name"
  "$@"
  phases+=("$(printf '%-11s %5d s' "$name" $((SECONDS - t0)))")
}
report() {
  echo
  echo "== phase times"
  printf '  %s\n' "${phases[@]}"
  echo "  total       $(printf '%5d' "$SECONDS") s"
}
trap report EXIT

# The LLM compatibility references (node-llama-cpp's outputs, llama.cpp's
# vocabularies), exported for the tests that check against them.
# Without them those tests skip, or fail under CI.
references() {
  local env
  if env=$(scripts/llm_reference.sh); then eval "$env"
  else echo "test.sh: the LLM references could not be made; the tests that check against them skip (fail under CI)"; fi
}

run_phase setup scripts/setup.sh --test
run_phase references references
run_phase build scripts/build.sh -DTESSERA_BUILD_TESTS=ON
run_phase tests ctest --test-dir "$build" --output-on-failure -j2 --timeout 900
run_phase tiers scripts/test_tiers.sh "$build"
run_phase install scripts/check_install.sh "$build"
if [ "${1:-}" != "--quick" ]; then
  run_phase sanitizers bash scripts/sanitize.sh --asan-ci
fi
