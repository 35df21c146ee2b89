#!/usr/bin/env bash
# Fuzzes the parsers of outside input (safetensors, .npy, tar shards, YAML
# configs, ONNX models, compiled graph.json, KServe infer requests, GGUF files,
# chat templates, OpenAI requests, grammars, sharded checkpoints' index.json)
# with libFuzzer under ASan + UBSan.
# Not part of CI: run by hand.
#   scripts/fuzz.sh [seconds per target, default 180] [targets...]
# Seeds: tests/fuzz/<target>/ (committed). New inputs go to build-fuzz/corpus/<target>;
# a finding is written to build-fuzz/findings/ and the script fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --fuzz
secs=${1:-180}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors npy tar yaml onnx graph infer_request gguf chat_template openai_request grammar
  checkpoint_index)
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DTESSERA_FUZZ=ON -DTESSERA_SANITIZE=ON \
  -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithAsserts >/dev/null
cmake --build build-fuzz --target $(printf 'fuzz_%s ' "${targets[@]}")
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p build-fuzz/findings
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  seeds="tests/fuzz/$t"
  [ -d "$seeds" ] || seeds=""
  echo "== fuzzing $t for ${secs}s"
  build-fuzz/tests/fuzz/fuzz_$t -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix="build-fuzz/findings/$t-" -print_final_stats=1 "build-fuzz/corpus/$t" $seeds 2>&1 |
    grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss|==[0-9]+==ERROR|SUMMARY)" || true
  if ls build-fuzz/findings/$t-* >/dev/null 2>&1; then
    echo "fuzz: $t produced findings in build-fuzz/findings/" >&2
    exit 1
  fi
done
echo "fuzz: no findings"
