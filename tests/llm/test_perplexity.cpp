// tessera perplexity (llm/perplexity.h): llama-perplexity's chunks and
// scoring, checked against the Llama module's own log-probs and against
// llama.cpp's on the same GGUF file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "llama_cpp_reference.h"
#include "llm_fixture.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/io/file.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/llm/perplexity.h"
#include "tessera/ops/ops.h"
#include "test_util.h"

namespace tessera {
namespace {

// Tokens spread over the fixture's vocabulary (BOS is 1).
std::vector<int32_t> text_tokens(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(3 + (i * 37) % 260);
  return t;
}

// The mean negative log-likelihood of each chunk's second half, from
// per-position log-probs of the chunk (BOS first) as `logprobs(chunk)` gives them.
template <typename LogProbs>
double reference_perplexity(const std::vector<int32_t>& tokens, int64_t ctx, int64_t chunks, LogProbs logprobs) {
  double nll = 0;
  int64_t count = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<int64_t> chunk(tokens.begin() + c * ctx, tokens.begin() + (c + 1) * ctx);
    chunk[0] = 1;
    const std::vector<std::vector<double>> lp = logprobs(chunk);
    for (int64_t j = ctx / 2; j < ctx - 1; ++j, ++count) nll -= lp[static_cast<size_t>(j)][static_cast<size_t>(chunk[j + 1])];
  }
  return std::exp(nll / static_cast<double>(count));
}

TEST(Perplexity, ScoresTheSecondHalfOfEachChunk) {
  nn::zoo::Llama* m = nullptr;
  testing::Fixture f = testing::fixture(&m, 2);
  const std::vector<int32_t> tokens = text_tokens(3 * 16 + 5);
  m->eval();
  NoGradGuard ng;
  const double want = reference_perplexity(tokens, 16, 3, [&](const std::vector<int64_t>& chunk) {
    Tensor lp = ops::log_softmax((*m)(tensor(chunk).reshape({1, -1})), -1).select(0, 0).to(DType::F64).contiguous();
    std::vector<std::vector<double>> rows(chunk.size());
    for (size_t t = 0; t < chunk.size(); ++t)
      rows[t].assign(lp.data_ptr<double>() + t * lp.size(1), lp.data_ptr<double>() + (t + 1) * lp.size(1));
    return rows;
  });
  // One step a chunk, and steps of 5 tokens (each returning the rows past the chunk's middle).
  for (int64_t batch : {16, 5}) {
    llm::EngineOptions eo;
    eo.context = 16, eo.max_sequences = 1, eo.max_batch_tokens = batch, eo.max_logit_rows = batch;
    llm::Engine e(f.model, eo);
    std::vector<double> seen;
    const llm::PerplexityResult r =
        llm::perplexity(e, tokens, {.context = 16, .chunks = -1, .bos = 1}, [&](int64_t, double p) { seen.push_back(p); });
    EXPECT_EQ(r.chunks, 3);
    EXPECT_EQ(r.scored, 3 * 7);
    EXPECT_NEAR(r.perplexity, want, 1e-4 * want) << batch;
    EXPECT_GT(r.error, 0);
    EXPECT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen.back(), r.perplexity);
  }
  llm::EngineOptions eo;
  eo.context = 16, eo.max_sequences = 1, eo.max_batch_tokens = 16, eo.max_logit_rows = 16;
  llm::Engine e(f.model, eo);
  EXPECT_EQ(llm::perplexity(e, tokens, {.context = 16, .chunks = 2, .bos = 1}).chunks, 2);
  EXPECT_THROW_MSG(llm::perplexity(e, text_tokens(31), {.context = 16}),
                   "the text is 31 tokens; a context of 16 needs at least 32");
  EXPECT_THROW_MSG(llm::perplexity(e, text_tokens(64), {.context = 32}), "the engine holds 16 positions");
}

TEST(Perplexity, TheCommandReadsAFileAndPrintsLlamaCppsEstimate) {
  nn::zoo::Llama* m = nullptr;
  testing::Fixture f = testing::fixture(&m, 1);
  const std::string dir = testing::scratch_dir("perplexity_cli");
  std::filesystem::create_directories(dir);
  llm::save_llama_gguf(*m, dir + "/m.gguf", {.type = llm::GgmlType::F32, .tokenizer = &f.tok});
  std::string text;
  for (int i = 0; i < 40; ++i) text += "abc cab bca ";
  io::write_file_atomic(dir + "/t.txt", [&](io::Writer& w) { w.write(text); });
  std::string out;
  EXPECT_EQ(testing::cli("perplexity " + dir + "/m.gguf -f " + dir + "/t.txt -c 32 --chunks 3", &out), 0) << out;
  EXPECT_NE(out.find("[1]"), std::string::npos) << out;
  EXPECT_NE(out.find("[3]"), std::string::npos) << out;
  EXPECT_EQ(out.find("[4]"), std::string::npos) << out;
  EXPECT_NE(out.find("Final estimate: PPL = "), std::string::npos) << out;
  EXPECT_EQ(testing::cli("perplexity " + dir + "/m.gguf -f " + dir + "/t.txt -c 4096", &out), 1);
  EXPECT_NE(out.find("needs at least 8192"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

// The same file and tokens in llama.cpp: its log-probs of each chunk (from
// an empty context, BOS first) give a perplexity within 0.1% of Tessera's.
TEST(Perplexity, MatchesLlamaCpp) {
  TESSERA_REFERENCE(pkg, "TESSERA_NODE_LLAMA_CPP");
  nn::zoo::Llama* m = nullptr;
  testing::Fixture f = testing::fixture(&m, 2);
  const std::string dir = testing::scratch_dir("perplexity_llama_cpp");
  std::filesystem::create_directories(dir);
  const std::vector<int32_t> tokens = text_tokens(4 * 24);
  for (llm::GgmlType type : {llm::GgmlType::F32, llm::GgmlType::Q8_0}) {
    const std::string path = dir + "/m-" + llm::ggml_type_name(type) + ".gguf";
    llm::save_llama_gguf(*m, path, {.type = type, .tokenizer = &f.tok});
    llm::EngineOptions eo;
    eo.context = 24, eo.max_sequences = 1, eo.max_batch_tokens = 24, eo.max_logit_rows = 24;
    llm::Engine e(llm::Model::load(path), eo);
    const double ours = llm::perplexity(e, tokens, {.context = 24, .chunks = -1, .bos = 1}).perplexity;
    const double theirs = reference_perplexity(tokens, 24, 4, [&](const std::vector<int64_t>& chunk) {
      const nlohmann::json j = testing::llama_cpp_logprobs(pkg, path, chunk, f.tok.size());
      std::vector<std::vector<double>> rows;
      for (const nlohmann::json& r : j) {
        rows.emplace_back();
        for (const nlohmann::json& v : r) rows.back().push_back(v.is_null() ? -1e30 : v.get<double>());
      }
      return rows;
    });
    std::printf("%s: perplexity %.5f, llama.cpp %.5f (%+.4f%%)\n", llm::ggml_type_name(type), ours, theirs,
                100 * (ours / theirs - 1));
    EXPECT_NEAR(ours, theirs, 1e-3 * theirs) << llm::ggml_type_name(type);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
