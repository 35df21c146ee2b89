#!/usr/bin/env bash
# Sets up, builds and runs the demo: a small network trained with Tessera's
# autograd on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh -DTESSERA_BUILD_TESTS=OFF
"${BUILD_DIR:-build}"/apps/tessera_demo "$@"
