// The LLM inference stack (gguf, tokenizer, jinja, model, engine, sampler,
// scheduler, grammar, LoRA adapters) depends on core, io and the backend
// seam only (backend/, never a backend's own folder); the bridges to training
// (src/llm/bridges/ and their headers) are the one place llm/ meets nn/,
// ops/, autograd/ and quant/ (docs/architecture.md,
// "The LLM stack"). This reads every inference file's includes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// The public headers of the bridges: Tessera's modules to and from GGUF,
// LoRA training, and the converters over quant/.
const std::set<std::string> kBridgeHeaders = {"llama_gguf.h", "gpt_gguf.h", "lora.h", "convert_gguf.h"};

bool allowed(const std::string& inc) {
  for (const std::string& h : kBridgeHeaders)
    if (inc == "tessera/llm/" + h) return false;
  if (inc.starts_with("llm/bridges/") || inc.starts_with("backend/cpu/")) return false;
  for (const char* ok : {"tessera/core/", "tessera/io/", "tessera/llm/", "backend/", "llm/"})
    if (inc.starts_with(ok)) return true;
  return inc.find('/') == std::string::npos;  // a file beside the includer, in src/llm/
}

std::vector<fs::path> inference_files() {
  const fs::path root = TESSERA_SOURCE_DIR;
  std::vector<fs::path> files;
  for (const fs::path dir : {root / "src/llm", root / "src/llm/jinja"})
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path());
  for (const auto& e : fs::directory_iterator(root / "include/tessera/llm"))
    if (!kBridgeHeaders.count(e.path().filename().string())) files.push_back(e.path());
  return files;
}

TEST(LlmLayering, InferenceStackIncludesNoTrainingLayer) {
  const std::regex include_re(R"re(^\s*#\s*include\s*"([^"]+)")re");
  const std::vector<fs::path> files = inference_files();
  ASSERT_GT(files.size(), 30u) << "the source tree was not found under " << TESSERA_SOURCE_DIR;
  for (const fs::path& p : files) {
    std::ifstream in(p);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      if (std::regex_search(line, m, include_re))
        EXPECT_TRUE(allowed(m[1])) << p.string() << ":" << n << " includes \"" << m[1]
                                   << "\"; the inference stack may include core/, io/, llm/ and the backend "
                                      "seam (backend/, not backend/cpu/) "
                                      "(training's layers are reached through src/llm/bridges/)";
    }
  }
}

TEST(LlmLayering, TheCheckRefusesATrainingInclude) {
  EXPECT_FALSE(allowed("tessera/nn/zoo/zoo.h"));
  EXPECT_FALSE(allowed("tessera/ops/ops.h"));
  EXPECT_FALSE(allowed("tessera/llm/llama_gguf.h"));
  EXPECT_FALSE(allowed("llm/bridges/gguf_model.h"));
  EXPECT_TRUE(allowed("tessera/llm/engine.h"));
  EXPECT_FALSE(allowed("backend/cpu/kernel_table.h"));
  EXPECT_TRUE(allowed("backend/llm_kernels.h"));
  EXPECT_TRUE(allowed("quant_view.h"));
}

}  // namespace
