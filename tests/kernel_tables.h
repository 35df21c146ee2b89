#pragma once
// The per-ISA kernel tables a kernel test compares: the portable one, AVX2's
// where the CPU runs AVX-512, plain AVX-512's where it adds bf16 dot
// products, and the one this CPU runs (each tier of
// scripts/test_tiers.sh lowers the last).
#include <string>
#include <vector>

#include "backend/cpu/kernel_table.h"

namespace tessera::testing {

inline std::vector<cpu::KernelTable> kernel_tables() {
  std::vector<cpu::KernelTable> ts(1);
  cpu::isa_base::fill_kernel_table(ts[0]);
  ts[0].isa = "base";
  const std::string isa = cpu::kernels().isa;
  if (isa == "avx512" || isa == "avx512_bf16") {
    ts.emplace_back();
    cpu::isa_avx2::fill_kernel_table(ts.back());
    ts.back().isa = "avx2";
  }
  if (isa == "avx512_bf16") {
    ts.emplace_back();
    cpu::isa_avx512::fill_kernel_table(ts.back());
    ts.back().isa = "avx512";
  }
  ts.push_back(cpu::kernels());
  return ts;
}

}  // namespace tessera::testing
