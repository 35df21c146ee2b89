#pragma once
// The per-ISA kernel tables a kernel test compares: the portable one, AVX2's
// where the CPU runs AVX-512, and the one this CPU runs (each tier of
// scripts/test_tiers.sh lowers the last).
#include <string>
#include <vector>

#include "backend/cpu/kernel_table.h"

namespace tessera::testing {

inline std::vector<cpu::KernelTable> kernel_tables() {
  std::vector<cpu::KernelTable> ts(1);
  cpu::isa_base::fill_kernel_table(ts[0]);
  ts[0].isa = "base";
  if (std::string(cpu::kernels().isa) == "avx512") {
    ts.emplace_back();
    cpu::isa_avx2::fill_kernel_table(ts.back());
    ts.back().isa = "avx2";
  }
  ts.push_back(cpu::kernels());
  return ts;
}

}  // namespace tessera::testing
