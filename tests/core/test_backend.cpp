// The backend registry (backend/backend.h): the built-in backends provide
// every entry, and a backend missing one is refused, naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/kernel_table.h"
#include "backend/llm_kernels.h"

namespace tessera {
namespace {

TEST(Backend, BuiltinsProvideEveryEntry) {
  for (DeviceType t : {DeviceType::CPU, DeviceType::Meta}) {
    const backend::Backend& b = backend::get(t);
    EXPECT_EQ(b.type, t);
    EXPECT_TRUE(backend::missing_entries(b).empty()) << b.name;
  }
  EXPECT_THROW(backend::get(DeviceType::CUDA), Error);
}

TEST(Backend, OneMissingEntryIsRefusedByName) {
  backend::Kernels k = *backend::get(DeviceType::Meta).kernels;
  k.matmul = nullptr;
  static backend::Backend b = backend::get(DeviceType::Meta);
  b.name = "incomplete";
  b.type = DeviceType::CUDA;
  b.kernels = &k;
  b.synchronize = nullptr;
  try {
    backend::register_backend(b);
    FAIL() << "registered";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("kernels.matmul"), std::string::npos) << m;
    EXPECT_NE(m.find("synchronize"), std::string::npos) << m;
    EXPECT_NE(m.find("incomplete"), std::string::npos) << m;
  }
  EXPECT_THROW(backend::get(DeviceType::CUDA), Error);  // nothing was installed
}

// Nothing outside src/backend/ includes a CPU backend header: the layers
// reach kernels through backend/backend.h, and the registration
// (backend/registry.cpp) is inside backend/.
TEST(Backend, OnlyTheBackendIncludesCpuHeaders) {
  namespace fs = std::filesystem;
  std::set<std::string> found;
  for (const char* dir : {"src", "include", "apps"}) {
    for (const auto& f : fs::recursive_directory_iterator(fs::path(TESSERA_SOURCE_DIR) / dir)) {
      if (!f.is_regular_file()) continue;
      std::string rel = fs::relative(f.path(), TESSERA_SOURCE_DIR).string();
      if (rel.starts_with("src/backend/")) continue;
      std::ifstream in(f.path());
      std::string line;
      while (std::getline(in, line))
        if (line.starts_with("#include \"backend/cpu/")) {
          found.insert(rel);
          break;
        }
    }
  }
  for (const std::string& f : found) ADD_FAILURE() << f << " includes a backend/cpu header";
}

// Note [Kernel dtypes]: the rule the ops check is the CPU table's, kernel by
// kernel and dtype by dtype, in every tier (the table is the process's tier:
// scripts/test_tiers.sh runs this under each).
TEST(Backend, KernelDtypesMatchTheCpuTable) {
  const cpu::KernelTable& kt = cpu::kernels();
  for (int d = 0; d < kNumDTypes; ++d) {
    const DType t = static_cast<DType>(d);
    for (int k = 0; k < backend::kNumUnary; ++k)
      EXPECT_EQ(backend::unary_defined(static_cast<backend::UnaryKernel>(k), t), kt.unary[k][d] != nullptr)
          << "unary kernel " << k << " on " << dtype_name(t);
    for (int k = 0; k < backend::kNumBinary; ++k)
      EXPECT_EQ(backend::binary_defined(static_cast<backend::BinaryKernel>(k), t), kt.binary[k][d] != nullptr)
          << "binary kernel " << k << " on " << dtype_name(t);
  }
}

// The LLM engine's kernels: the CPU gives every one its tier has (the bf16
// dot and the packed int8 products exist only in some tiers); meta has none,
// and asking for them names it.
TEST(Backend, LlmKernelsOnCpuNotOnMeta) {
  const backend::LlmKernels& l = backend::llm_kernels(DeviceType::CPU);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) EXPECT_NE(l.skinny_rows[static_cast<int>(t)], nullptr);
  for (backend::QFormat f : {backend::QFormat::Q8_0, backend::QFormat::Q4_0, backend::QFormat::Q4_K,
                             backend::QFormat::Q6_K}) {
    EXPECT_NE(l.qdot_rows[static_cast<int>(f)], nullptr);
    EXPECT_NE(l.qdequant_rows[static_cast<int>(f)], nullptr);
  }
  for (auto* p : {reinterpret_cast<const void*>(l.quantize_act), reinterpret_cast<const void*>(l.packed_act_bytes),
                  reinterpret_cast<const void*>(l.packed_matrix_bytes), reinterpret_cast<const void*>(l.qpack_weights),
                  reinterpret_cast<const void*>(l.rms_norm_row), reinterpret_cast<const void*>(l.layer_norm_row),
                  reinterpret_cast<const void*>(l.rope_row), reinterpret_cast<const void*>(l.swiglu_row),
                  reinterpret_cast<const void*>(l.gelu_row), reinterpret_cast<const void*>(l.to_f32_row),
                  reinterpret_cast<const void*>(l.log_softmax_row), reinterpret_cast<const void*>(l.kv_store_k),
                  reinterpret_cast<const void*>(l.kv_store_v), reinterpret_cast<const void*>(l.paged_attention_set),
                  reinterpret_cast<const void*>(l.attention_scratch)})
    EXPECT_NE(p, nullptr);
  EXPECT_GT(l.pack_rows, 0);
  try {
    backend::llm_kernels(DeviceType::Meta);
    FAIL() << "meta gave LLM kernels";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("meta has none"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
