#!/usr/bin/env bash
# Builds llama.cpp natively, CPU only, as the speed reference of the LLM
# benchmarks (bench/llm_compare.py, bench/llm_serve_bench.py). The source is
# the llama.cpp tree that the pinned node-llama-cpp package ships as
# llama/gitRelease.bundle (scripts/llm_compat.sh --install-only fetches it), so
# nothing but npm's registry is reached. About 13 minutes on 2 cores, once.
#
#   bench/build_llama_cpp.sh            native build (GGML_NATIVE: every ISA this CPU has)
#   bench/build_llama_cpp.sh --avx2     the AVX2 tier (GGML_NATIVE=OFF, AVX2+FMA+F16C, no AVX-512)
#   bench/build_llama_cpp.sh --print    print the binary folder of the native build (build if missing)
#   bench/build_llama_cpp.sh --avx2 --print
#
# The build lives in $TESSERA_CACHE/llama.cpp-bin/<release>-<variant>-<key>
# (default ~/.cache/tessera). A native build is keyed by this CPU's ISA flags:
# one made on an AVX-512 CPU would die of an illegal instruction on an
# AVX2-only one, so a CPU with other flags gets its own build. Each folder
# holds build-info.txt: the llama.cpp release and commit, the CMake flags and
# the flags key, which the bench scripts print beside every figure.
set -euo pipefail
cd "$(dirname "$0")/.."
variant=native
print=false
for a in "$@"; do
  case "$a" in
    --avx2) variant=avx2 ;;
    --print) print=true ;;
    *) echo "build_llama_cpp: unknown argument '$a' (expected --avx2 or --print)" >&2; exit 2 ;;
  esac
done
cache=${TESSERA_CACHE:-$HOME/.cache/tessera}
version=3.21.1 # node-llama-cpp's version, pinned in scripts/llm_compat.sh
src="$cache/llama.cpp-$version"
[ -d "$src/ggml" ] || scripts/llm_compat.sh --install-only >&2
info="$cache/node-llama-cpp/node_modules/node-llama-cpp/llama/llama.cpp.info.json"
release=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$info")
commit=$(git -C "$src" rev-parse --short=12 HEAD)

# The ISA flags ggml's native build can use; other /proc/cpuinfo flags (and
# microcode, frequency) do not change the code it emits.
isa=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
      grep -E '^(sse4_2|avx|avx2|fma|f16c|bmi2|avx_vnni|avx512[a-z0-9_]*|amx[a-z0-9_]*)$' | sort | tr '\n' ' ')
common=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF
        -DGGML_METAL=OFF -DGGML_OPENMP=ON -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF)
if [ "$variant" = native ]; then
  key=$(printf '%s' "$isa" | sha256sum | cut -c1-12)
  flags=(-DGGML_NATIVE=ON)
else
  grep -qw avx2 <<<"$isa" || { echo "build_llama_cpp: this CPU has no AVX2" >&2; exit 1; }
  key=x86-64-v3
  flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
         -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF)
fi
out="$cache/llama.cpp-bin/$release-$variant-$key"
targets=(llama-bench llama-batched-bench llama-server llama-perplexity llama-quantize)
built() { for t in "${targets[@]}"; do [ -x "$out/bin/$t" ] || return 1; done; }
if ! built; then
  echo "build_llama_cpp: building llama.cpp $release ($commit), $variant, into $out" >&2
  rm -rf "$out"
  mkdir -p "$out"
  cmake -S "$src" -B "$out/build" -G Ninja "${common[@]}" "${flags[@]}" >"$out/cmake.log" 2>&1 ||
    { tail -20 "$out/cmake.log" >&2; exit 1; }
  cmake --build "$out/build" --target "${targets[@]}" -j "$(nproc)" >"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log" >&2; exit 1; }
  mkdir -p "$out/bin"
  for t in "${targets[@]}"; do cp "$out/build/bin/$t" "$out/bin/"; done
  {
    echo "release: $release"
    echo "commit: $commit"
    echo "variant: $variant"
    echo "cmake: ${common[*]} ${flags[*]}"
    echo "isa: $isa"
    echo "built: $(date -u +%Y-%m-%dT%H:%MZ) with $(c++ --version | head -1)"
  } >"$out/build-info.txt"
  rm -rf "$out/build" # 1 GB of objects; the five static binaries are all the benchmarks use
fi
if $print; then echo "$out/bin"; else cat "$out/build-info.txt"; echo "binaries: $out/bin"; fi
