// The backend registry (backend/backend.h): the built-in backends provide
// every entry, and a backend missing one is refused, naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "backend/backend.h"

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

// Nothing outside src/backend/ includes a CPU backend header (the layers
// reach kernels through backend/backend.h), except the files still listed
// here, which are the seam's remaining work.
const std::set<std::string> kStillIncludeCpu = {
    "src/compile/sparse_weights.cpp",
    "src/llm/dequantize.cpp",
    "src/llm/engine.cpp",
    "src/llm/model.cpp",
    "src/llm/quant_view.h",
    "src/llm/sampler.cpp",
    "src/ops/fused.cpp",
    "src/ops/int8.cpp",
    "src/ops/op_utils.h",
    "src/ops/quant.cpp",
    "src/ops/sparse.cpp",
    "src/quant/ptq.cpp",
    "src/quant/qat.cpp",
    "src/quant/weights.cpp",
};

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
  for (const std::string& f : found) EXPECT_TRUE(kStillIncludeCpu.count(f)) << f << " includes a backend/cpu header";
  for (const std::string& f : kStillIncludeCpu)
    EXPECT_TRUE(found.count(f)) << f << " no longer includes backend/cpu: take it off the list";
}

}  // namespace
}  // namespace tessera
