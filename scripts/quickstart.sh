#!/usr/bin/env bash
# The README's first command: installs what is missing, builds Tessera and
# trains the default model (a CNN on Fashion-MNIST) with a live progress bar,
# then saves its checkpoint and prints what to try next.
#   scripts/quickstart.sh [extra `tessera train` arguments, e.g. --set train.epochs=3]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "building Tessera (the first build takes a few minutes)..."
scripts/build.sh -DTESSERA_BUILD_TESTS=OFF
"${BUILD_DIR:-build}"/apps/tessera train examples/configs/fashion_mnist_cnn.yaml "$@"
