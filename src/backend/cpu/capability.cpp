#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "backend/cpu/kernel_table.h"
#include "tessera/core/error.h"

namespace tessera::cpu {
namespace {

enum class Isa { Base, Avx2, Avx512, Avx512Bf16, Avx512Amx };

// F16C from CPUID leaf 1 (clang's __builtin_cpu_supports does not know "f16c").
bool has_f16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

// AMX int8 tiles: the CPU has them (CPUID leaf 7: AMX-TILE, AMX-INT8) and
// Linux lets this process use their 8 KB of state (asked once, for every
// thread; refused by kernels older than 5.16).
bool has_amx_int8() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return false;
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
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
  const char* want = std::getenv("TESSERA_CPU_CAPABILITY");
  const bool amx_wanted = !want || !std::strcmp(want, "avx512_amx");
  if (best == Isa::Avx512Bf16 && amx_wanted && has_amx_int8()) best = Isa::Avx512Amx;
  if (want) {
    Isa w = best;
    if (!std::strcmp(want, "base")) w = Isa::Base;
    else if (!std::strcmp(want, "avx2")) w = Isa::Avx2;
    else if (!std::strcmp(want, "avx512")) w = Isa::Avx512;
    else if (!std::strcmp(want, "avx512_bf16")) w = Isa::Avx512Bf16;
    else if (!std::strcmp(want, "avx512_amx")) w = Isa::Avx512Amx;
    else TS_ERROR("TESSERA_CPU_CAPABILITY=", want, " is not one of base, avx2, avx512, avx512_bf16, avx512_amx");
    if (w < best) best = w;  // only ever lower it: a higher ISA would crash
  }
  return best;
}

KernelTable build() {
  KernelTable t;
  switch (detect()) {
    case Isa::Base: isa_base::fill_kernel_table(t); t.isa = "base"; break;
    case Isa::Avx2:
      isa_avx2::fill_kernel_table(t);
      isa_avx2::fill_qgemm_avx2_kernels(t);
      t.isa = "avx2";
      break;
    case Isa::Avx512: isa_avx512::fill_kernel_table(t); t.isa = "avx512"; break;
    case Isa::Avx512Bf16:
      isa_avx512::fill_kernel_table(t);
      isa_avx512::fill_bf16_dot_kernels(t);
      isa_avx512::fill_qgemm_vnni_kernels(t);
      t.isa = "avx512_bf16";
      break;
    case Isa::Avx512Amx:
      isa_avx512::fill_kernel_table(t);
      isa_avx512::fill_bf16_dot_kernels(t);
      isa_avx512::fill_qgemm_amx_kernels(t);
      t.isa = "avx512_amx";
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
