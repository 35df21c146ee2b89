#include <cpuid.h>

#include <cstdlib>
#include <cstring>

#include "backend/cpu/kernel_table.h"
#include "tessera/core/error.h"

namespace tessera::cpu {
namespace {

enum class Isa { Base, Avx2, Avx512, Avx512Bf16 };

// F16C from CPUID leaf 1 (clang's __builtin_cpu_supports does not know "f16c").
bool has_f16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

Isa detect() {
  __builtin_cpu_init();
  Isa best = Isa::Base;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c())
    best = Isa::Avx2;
  if (best == Isa::Avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    best = Isa::Avx512;
  if (best == Isa::Avx512 && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni"))
    best = Isa::Avx512Bf16;
  if (const char* want = std::getenv("TESSERA_CPU_CAPABILITY")) {
    Isa w = best;
    if (!std::strcmp(want, "base")) w = Isa::Base;
    else if (!std::strcmp(want, "avx2")) w = Isa::Avx2;
    else if (!std::strcmp(want, "avx512")) w = Isa::Avx512;
    else if (!std::strcmp(want, "avx512_bf16")) w = Isa::Avx512Bf16;
    else TS_ERROR("TESSERA_CPU_CAPABILITY=", want, " is not one of base, avx2, avx512, avx512_bf16");
    if (w < best) best = w;  // only ever lower it: a higher ISA would crash
  }
  return best;
}

KernelTable build() {
  KernelTable t;
  switch (detect()) {
    case Isa::Base: isa_base::fill_kernel_table(t); t.isa = "base"; break;
    case Isa::Avx2: isa_avx2::fill_kernel_table(t); t.isa = "avx2"; break;
    case Isa::Avx512: isa_avx512::fill_kernel_table(t); t.isa = "avx512"; break;
    case Isa::Avx512Bf16:
      isa_avx512::fill_kernel_table(t);
      isa_avx512::fill_bf16_dot_kernels(t);
      isa_avx512::fill_qgemm_vnni_kernels(t);
      t.isa = "avx512_bf16";
      break;
  }
  return t;
}

}  // namespace

const KernelTable& kernels() {
  static const KernelTable table = build();
  return table;
}

}  // namespace tessera::cpu
