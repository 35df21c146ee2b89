// The tier runs of scripts/test_tiers.sh: each sets TESSERA_TIER with the
// capability it lowers Tessera and oneDNN to; this checks that both really
// run at that level (a run that silently used the best kernels would test
// nothing new).
#include <gtest/gtest.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <string>

#include "backend/cpu/kernel_table.h"

namespace tessera {
namespace {

TEST(Tier, KernelsRunAtTheLevelAsked) {
  const char* tier_env = std::getenv("TESSERA_TIER");
  if (!tier_env) GTEST_SKIP() << "not a tier run (scripts/test_tiers.sh)";
  const std::string tier = tier_env;
  // Tessera's kernels have one AVX-512 table and its bf16/VNNI and AMX
  // additions; the VNNI tier is oneDNN's alone.
  const std::string want = tier == "avx512_vnni" ? "avx512" : tier;
  EXPECT_EQ(std::string(cpu::kernels().isa), want);
  using I = dnnl::cpu_isa;
  const I isa = dnnl::get_effective_cpu_isa();
  if (tier == "base") EXPECT_TRUE(isa == I::sse41) << static_cast<int>(isa);
  if (tier == "avx2") EXPECT_TRUE(isa == I::avx2) << static_cast<int>(isa);
  if (tier == "avx512") EXPECT_TRUE(isa == I::avx512_core) << static_cast<int>(isa);
  if (tier == "avx512_vnni") EXPECT_TRUE(isa == I::avx512_core_vnni) << static_cast<int>(isa);
  if (tier == "avx512_bf16") EXPECT_TRUE(isa == I::avx512_core_bf16) << static_cast<int>(isa);
  if (tier == "avx512_amx") EXPECT_TRUE(isa == I::avx512_core_amx) << static_cast<int>(isa);
}

}  // namespace
}  // namespace tessera
