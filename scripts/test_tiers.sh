#!/usr/bin/env bash
# Runs the op, kernel, quantization and autocast tests once per CPU tier this
# machine can execute, so that every kernel path is tested whatever the CPU:
# Tessera's kernel table (TESSERA_CPU_CAPABILITY) and oneDNN's instruction
# set (DNNL_MAX_CPU_ISA) are lowered together. Tessera's own kernels come in
# base, AVX2 and AVX-512 builds; the AVX-512 one adds bf16 and int8 (VNNI)
# dot products where the CPU has them (avx512_bf16), and int8 products on AMX
# tiles where it has those (avx512_amx); the VNNI tier is oneDNN's alone (int8
# dot products). Prints which tiers ran and which this CPU cannot.
#   scripts/test_tiers.sh [build dir, default build]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-${BUILD_DIR:-build}}
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }

# tier | Tessera's kernels | oneDNN's ISA | CPU flags it needs
tiers=(
  "base        base    SSE41            sse4_1"
  "avx2        avx2    AVX2             avx2 fma f16c"
  "avx512      avx512  AVX512_CORE      avx512f avx512bw avx512vl avx512dq"
  "avx512_vnni avx512  AVX512_CORE_VNNI avx512f avx512bw avx512vl avx512dq avx512_vnni"
  "avx512_bf16 avx512_bf16 AVX512_CORE_BF16 avx512f avx512bw avx512vl avx512dq avx512_vnni avx512_bf16"
  "avx512_amx  avx512_amx AVX512_CORE_AMX avx512f avx512bw avx512vl avx512dq avx512_vnni avx512_bf16 amx_tile amx_int8"
)
# The suites, run in one process per tier (the full run above runs each test in its own).
tests='OpTable.*:Backend.KernelDtypesMatchTheCpuTable:Backend.LlmKernelsOnCpuNotOnMeta:BackwardOps.*:Golden*.*:OptimGolden.*:NNGolden.*:MaxPool.*:ConcurrentGemm.*:Quant*.*:Int8*.*:Ptq.*:Qat.*:FakeQuantize.*:Observers.*:Autocast*.*:AmpTraining.*:Fusion.*:EpilogueFusion.*:Layout.*:Tier.*:Skinny.*:LlmKernels.*:LlmEngine.*:*OpInfoTest.*'

ran=() skipped=() failed=()
for row in "${tiers[@]}"; do
  read -r tier tessera dnnl needs <<<"$row"
  if ! has $needs; then
    skipped+=("$tier")
    continue
  fi
  echo "== tier $tier: Tessera kernels $tessera, oneDNN up to $dnnl"
  log=$(mktemp)
  t0=$SECONDS
  if TESSERA_TIER=$tier TESSERA_CPU_CAPABILITY=$tessera DNNL_MAX_CPU_ISA=$dnnl OMP_NUM_THREADS=2 \
     timeout 1800 "$build/tests/tessera_tests" --gtest_filter="$tests" --gtest_brief=1 >"$log" 2>&1; then
    echo "$(tail -n 1 "$log" | sed 's/^\[ *PASSED *\] //') in $((SECONDS - t0)) s"
    ran+=("$tier")
  else
    cat "$log"
    failed+=("$tier")
  fi
  rm -f "$log"
done
echo "kernel tiers tested: ${ran[*]:-none}${failed:+; FAILED: ${failed[*]}}"
echo "kernel tiers this CPU cannot run: ${skipped[*]:-none} ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'))"
[ ${#failed[@]} -eq 0 ]
