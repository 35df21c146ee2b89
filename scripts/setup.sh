#!/usr/bin/env bash
# Installs the Debian packages Tessera needs, only those missing. Idempotent
# and quiet when everything is there. Run as root (or with sudo).
#   scripts/setup.sh          build + tests
#   scripts/setup.sh --bench  also the references for bench/ (libtorch, PyTorch)
#   scripts/setup.sh --fuzz   also clang with libFuzzer (scripts/fuzz.sh)
#   scripts/setup.sh --test   also what the integration tests start (prometheus),
#                             Debian's locale sources (locales: a comma-decimal locale test)
#                             sentencepiece (spm_train/spm_encode: the fortunes tokenizer)
#                             and npm (node-llama-cpp: the LLM references, scripts/llm_reference.sh)
set -euo pipefail

# Build: compiler, CMake, oneDNN, JSON/YAML/CLI parsing, zlib, HTTP for the
# metrics endpoint (httplib) and the inference server (Boost.Beast's parser),
# simdjson for its requests, the ONNX schema and checker, ICU's Unicode
# categories for LLM tokenizers, Open MPI for distributed training (docs/dependencies.md),
# pybind11, Python's headers and DLPack's for the `tessera` Python module, venv and pip
# to install it (docs/python.md).
# Data: Fashion-MNIST (the default training job) and the fortunes corpus.
packages=(g++ cmake ninja-build ccache pkg-config libgtest-dev libdnnl-dev python3
          nlohmann-json3-dev libsimdjson-dev libsodium-dev libboost-dev libyaml-cpp-dev libcli11-dev zlib1g-dev libcpp-httplib-dev
          libonnx-dev libprotobuf-dev libicu-dev libopenmpi-dev openmpi-bin pybind11-dev python3-dev python3-numpy libdlpack-dev python3-venv python3-pip
          dataset-fashion-mnist fortunes)
if [ "${1:-}" = "--test" ]; then
  packages+=(prometheus locales sentencepiece)
  # The Python module's tests: pytest and mypy's stubgen (the checked-in .pyi).
  packages+=(python3-pytest python3-mypy)
  # Node.js and npm: the LLM compatibility references (scripts/llm_reference.sh);
  # a Node.js installed otherwise serves as well.
  command -v npm >/dev/null || packages+=(nodejs npm)
fi
if [ "${1:-}" = "--fuzz" ]; then
  packages+=(clang libclang-rt-14-dev)
fi
if [ "${1:-}" = "--bench" ]; then
  # libopenblas0-pthread: without it libtorch falls back to the reference BLAS (~3 GFLOP/s).
  # wrk: a second load generator for the serving load test (bench/serve_bench.py).
  # python3-onnx, python3-numpy: the ONNX checks; python3-matplotlib: bench/report.py's charts.
  packages+=(libtorch-dev python3-torch libopenblas0-pthread linux-perf wrk python3-onnx python3-numpy
             python3-matplotlib)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "setup.sh: run as root to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "setup.sh: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
