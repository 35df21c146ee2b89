#!/usr/bin/env bash
# Checks Tessera's LLM parts against llama.cpp, through npm's node-llama-cpp
# (pinned; installed once into $TESSERA_CACHE/node-llama-cpp, default
# ~/.cache/tessera; works offline afterwards). Not part of CI: it needs npm.
#   scripts/llm_compat.sh [build dir, default build]
# Today: every vocabulary GGUF of llama.cpp's source tree (which the package
# carries as a git bundle) loads with `tessera gguf info`, and each
# SentencePiece vocabulary tokenizes llama.cpp's test texts to llama.cpp's ids
# (Tokenizer.LlamaCppVectors).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-${BUILD_DIR:-build}}
cache=${TESSERA_CACHE:-$HOME/.cache/tessera}
pkg="$cache/node-llama-cpp"
version=3.21.1
if [ ! -f "$pkg/node_modules/node-llama-cpp/package.json" ] ||
   ! grep -q "\"version\": \"$version\"" "$pkg/node_modules/node-llama-cpp/package.json"; then
  command -v npm >/dev/null || { echo "llm_compat: npm is needed (apt-get install npm)" >&2; exit 1; }
  mkdir -p "$pkg"
  (cd "$pkg" && npm i -E --omit=optional --ignore-scripts --no-audit --no-fund \
     "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version" >/dev/null)
fi
src="$cache/llama.cpp-$version"
if [ ! -d "$src/models" ]; then
  rm -rf "$src"
  git clone -q "$pkg/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$src" 2>/dev/null
fi
[ -x "$build/apps/tessera" ] && [ -x "$build/tests/tessera_tests" ] || cmake --build "$build" --target tessera_cli tessera_tests

echo "== GGUF: llama.cpp's vocabulary files"
n=0
for f in "$src"/models/ggml-vocab-*.gguf; do
  "$build/apps/tessera" gguf info "$f" >/dev/null || { echo "llm_compat: $f does not load" >&2; exit 1; }
  n=$((n + 1))
done
echo "$n files load"

echo "== tokenizers: llama.cpp's test vectors"
TESSERA_LLAMA_CPP_VOCABS="$src/models" "$build/tests/tessera_tests" --gtest_filter='Tokenizer.LlamaCppVectors' \
  --gtest_brief=1 | grep -E "texts tokenize|PASSED|FAILED"
