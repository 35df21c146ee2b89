#!/usr/bin/env bash
# The test suite under sanitizers, each in a build of its own:
#   --asan     AddressSanitizer + UBSan, the whole suite (about 30 minutes on 2 cores)
#   --asan-ci  the same build, the tests of what reads outside input and what
#              owns memory: file parsers and loaders, tokenizers and templates,
#              the servers, the kernels (every op's golden tests, the LLM and
#              quantized kernels), the allocator and core (scripts/test.sh's
#              last phase; the training, autograd, compiler and CLI tests,
#              which take most of the whole run's time, are left to --asan)
#   --tsan  ThreadSanitizer, the threaded parts Tessera runs itself: the allocator,
#           the data loader, shards, the batcher, the server and hot reload, the
#           metrics endpoint, the LLM scheduler. OpenMP's thread pool (Debian's
#           libgomp) is not instrumented, so this run uses one OpenMP thread
#           (tests/tsan.supp).
#   (no flag: both)
# Only the test binary (and the command line it starts) is built for each.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
want=${1:-all}

# --asan-ci's tests, by suite.
parsers='Gguf|LlamaGguf|Safetensors|Npy|Config|OnnxImport|Serialize|Checkpoint|ShardedCheckpoint|HostileModels|Inspect|Tokenizer|BpeTokenizer|PreTokenizer|ChatTemplate|Grammar|JsonSchema|ToolCalls|ServeProtocol|Lora|Datasets|Shards|DataLoader|Targets/FuzzCorpus'
servers='ServeHttp|ServeService|ServeBatcher|ServeRepository|ServePrometheus|LlmService|LlmServiceCli|Metrics|Monitoring|Scheduler|Sampler|Generate'
kernels='LlmKernels|LlmEngine|Perplexity|QuantKernels|QuantFormats|Int8Kernels|Int8Ops|Skinny|Tier|ConcurrentGemm|Golden[A-Za-z]*|OpTable|MaxPool|Meta|MetaModels|Backend'
memory='Memory|MemoryLimit|MemoryStats|Tensor|DType|Random|Threads|Errors|Locale|CoreAlone'

if [ "$want" = all ] || [ "$want" = --asan ] || [ "$want" = --asan-ci ]; then
  cmake -S . -B build-asan -G Ninja -DTESSERA_SANITIZE=address -DCMAKE_BUILD_TYPE=RelWithAsserts \
    -DTESSERA_BUILD_TESTS=ON -DTESSERA_BUILD_BENCH=OFF >/dev/null
  targets=(tessera_tests tessera_core_tests tessera_cli)
  [ "$want" = --asan-ci ] || targets+=(tessera_dist_tests)  # the MPI tests run in the whole-suite run only
  cmake --build build-asan --target "${targets[@]}"
  # oneDNN's JIT kernels and libgomp are not instrumented; leaks in them are not ours.
  # The fortunes model's three-minute training is left out: the training loop
  # runs under the sanitizers in the other training tests.
  only=()
  [ "$want" = --asan-ci ] && only=(-R "^($parsers|$servers|$kernels|$memory)\\.")
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j2 --timeout 3000 -E '^FortunesModel\.' "${only[@]}"
fi

if [ "$want" = all ] || [ "$want" = --tsan ]; then
  cmake -S . -B build-tsan -G Ninja -DTESSERA_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithAsserts \
    -DTESSERA_BUILD_TESTS=ON -DTESSERA_BUILD_BENCH=OFF >/dev/null
  cmake --build build-tsan --target tessera_tests tessera_cli
  threaded='^(Memory[A-Za-z]*|DataLoader|Shards|ServeBatcher|ServeService|ServeHttp|ServeRepository|Metrics|Monitoring|HostileModels|Scheduler|LlmService|LlmServiceCli)\.|^ConcurrentGemm\.ThreadsSharing'
  TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1" \
    ctest --test-dir build-tsan -R "$threaded" --output-on-failure -j2 --timeout 3000
fi
