// The LLM engine (llm/engine.h): logits equal to Tessera's Llama module on the
// same weights; bit-identical tokens and logits whatever else shares a step,
// however the prompt is chunked, wherever the cache blocks lie and at 1 or 2
// threads; no allocation during decode steps; the cache's blocks come back;
// bad input is an error before anything changes.
#include <gtest/gtest.h>

#include <functional>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>

#include "tessera/core/allocator.h"
#include "tessera/core/half.h"
#include "tessera/core/parallel.h"
#include "tessera/llm/convert_gguf.h"
#include "tessera/llm/engine.h"
#include "tessera/llm/gpt_gguf.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"
#include "test_util.h"

// Every operator new in this test binary is counted while g_count_news is
// set. Not under AddressSanitizer, whose own operator new the replacement
// would be mixed with (its allocations freed by ours); there the test checks
// Tessera's allocator only.
static std::atomic<bool> g_count_news{false};
static std::atomic<int64_t> g_news{0};
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCountsNews = false;
#else
constexpr bool kCountsNews = true;
void* operator new(size_t n) {
  if (g_count_news.load(std::memory_order_relaxed)) g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
#endif

namespace tessera {
namespace {

using llm::Chunk;
using llm::Engine;
using llm::GgmlType;

nn::zoo::LlamaConfig small_config(int64_t kv_heads = 2, int64_t head_dim = 32) {
  nn::zoo::LlamaConfig c;
  c.vocab_size = 96, c.n_heads = 4, c.dim = 4 * head_dim, c.n_layers = 2, c.n_kv_heads = kv_heads;
  c.hidden_dim = 160, c.max_seq_len = 256, c.norm_eps = 1e-5, c.rope_theta = 10000;
  return c;
}

std::shared_ptr<nn::zoo::Llama> small_llama(uint64_t seed, int64_t kv_heads = 2) {
  manual_seed(seed);
  auto m = std::make_shared<nn::zoo::Llama>(small_config(kv_heads));
  m->eval();
  // Larger weights than the initializer's, so that logits are far from uniform.
  NoGradGuard ng;
  for (auto& [n, p] : m->named_parameters())
    if (p.dim() == 2) p.copy_(ops::mul(p, 3.0));
  return m;
}

std::vector<int32_t> tokens(int64_t n, uint64_t seed) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((seed * 7919 + i * 104729 + i * i * 31) % 96);
  return t;
}

// ||got - want|| / ||want|| over the engine's logits and the module's.
double relative_error(const std::vector<float>& got, const Tensor& want) {
  const float* w = want.contiguous().data_ptr<float>();
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (got[i] - w[i]) * (double(got[i]) - w[i]);
    norm += double(w[i]) * w[i];
  }
  return std::sqrt(err / norm);
}

// The logits of the module a GGUF file loads as (llm::load_llama_gguf) on
// one sequence: what the engine is compared against.
Tensor module_logits(const llm::GgufFile& f, const std::vector<int32_t>& ids) {
  auto module = llm::load_llama_gguf(f);
  module->eval();
  NoGradGuard ng;
  const auto n = static_cast<int64_t>(ids.size());
  return (*module)(tensor(std::vector<int64_t>(ids.begin(), ids.end()), {1, n})).contiguous();
}

// Every position's logits of `ids` run in chunks of `chunk` tokens, after
// `shift` other sequences took cache blocks.
std::vector<float> run_chunked(Engine& e, const std::vector<int32_t>& ids, int64_t chunk, int64_t shift = 0) {
  std::vector<int64_t> others;
  for (int64_t i = 0; i < shift; ++i) {
    others.push_back(e.add_sequence());
    std::vector<int32_t> t = tokens(17, i);
    Chunk c{others.back(), t, 0};
    e.step({&c, 1});
  }
  const int64_t seq = e.add_sequence();
  std::vector<float> out;
  for (size_t i = 0; i < ids.size(); i += chunk) {
    const size_t n = std::min<size_t>(chunk, ids.size() - i);
    Chunk c{seq, std::span<const int32_t>(ids.data() + i, n), static_cast<int64_t>(n)};
    auto l = e.step({&c, 1});
    out.insert(out.end(), l.begin(), l.end());
  }
  e.remove_sequence(seq);
  for (int64_t s : others) e.remove_sequence(s);
  return out;
}

llm::EngineOptions opts(int64_t batch = 128) {
  llm::EngineOptions o;
  o.max_batch_tokens = batch;
  o.max_logit_rows = batch;
  o.max_sequences = 16;
  o.kv_memory = 8 << 20;
  return o;
}

TEST(LlmEngine, MatchesTheLlamaModuleInF32) {
  for (int64_t kv_heads : {4, 2, 1}) {
    auto m = small_llama(11, kv_heads);
    Engine e(llm::model_from_llama(*m, GgmlType::F32), opts());
    const std::vector<int32_t> ids = tokens(40, 5);
    const std::vector<float> got = run_chunked(e, ids, 40);
    Tensor t = tensor(std::vector<int64_t>(ids.begin(), ids.end()), {1, 40});
    NoGradGuard ng;
    Tensor want = (*m)(t).contiguous();
    ASSERT_EQ(want.numel(), static_cast<int64_t>(got.size()));
    double err = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, std::fabs(double(got[i]) - want.data_ptr<float>()[i]));
      scale = std::max(scale, std::fabs(double(want.data_ptr<float>()[i])));
    }
    // The cache holds keys and values in f16: about 1e-3 of the logits' size.
    EXPECT_LT(err, 3e-3 * scale) << "kv heads " << kv_heads << ", logits up to " << scale;
    EXPECT_GT(scale, 1.0);
  }
}

// Against the module holding the same (dequantized) weights: what is left is
// the engine's own rounding (int8 activations for Q8_0/Q4_0, bf16 ones on the
// bf16 dot kernel, the f16 cache).
// A GPT (gpt2 in GGUF): the file loads back to the same module, and the
// engine's logits are the module's, chunked or not, in every weight type.
TEST(LlmEngine, RunsTesserasGpt) {
  for (bool bias : {true, false}) {
    nn::zoo::GPTConfig c;
    c.vocab_size = 96, c.block_size = 64, c.n_layer = 2, c.n_head = 4, c.n_embd = 64, c.bias = bias;
    c.weight_tying = bias;
    manual_seed(16);
    nn::zoo::GPT m(c);
    m.eval();
    NoGradGuard ng;
    for (auto& [n, p] : m.named_parameters()) p.copy_(ops::add(ops::mul(p, 3.0), ops::mul(ops::randn(p.shape()), 0.05)));
    const std::vector<int32_t> ids = tokens(40, 8);
    Tensor t = tensor(std::vector<int64_t>(ids.begin(), ids.end()), {1, 40});
    Tensor want = m(t).contiguous();
    const std::string image = llm::gpt_to_gguf(m).bytes();
    auto back = llm::load_gpt_gguf(llm::GgufFile::parse(image.data(), image.size(), "gpt.gguf"));
    back->eval();
    EXPECT_CLOSE((*back)(t), want, 0, 0);
    for (GgmlType type : {GgmlType::F32, GgmlType::Q8_0}) {
      auto model = llm::model_from_gpt(m, type);
      auto same_weights = llm::load_gpt_gguf(model->file());  // the module on the file's (quantized) weights
      same_weights->eval();
      want = (*same_weights)(t).contiguous();
      Engine e(model, opts());
      EXPECT_EQ(e.model().spec().arch, "gpt2");
      EXPECT_TRUE(e.model().spec().gelu_erf);
      const std::vector<float> got = run_chunked(e, ids, 40);
      EXPECT_EQ(run_chunked(e, ids, 7), got);
      llm::EngineOptions longer = opts();
      longer.context = 65;
      EXPECT_THROW_MSG(Engine(llm::model_from_gpt(m), longer),
                       "context 65 is longer than the 64 positions this gpt2 model has embeddings for");
      // Q8_0: the int8 activations (random weights scaled up: large activations).
      EXPECT_LT(relative_error(got, want), type == GgmlType::F32 ? 1e-3 : 4e-2) << "bias " << bias;
    }
  }
}

TEST(LlmEngine, HalfAndQuantizedWeightsMatchTheModuleOnTheSameWeights) {
  auto m = small_llama(12);
  const std::vector<int32_t> ids = tokens(24, 9);
  Tensor t = tensor(std::vector<int64_t>(ids.begin(), ids.end()), {1, 24});
  for (auto [type, tol] : {std::pair{GgmlType::F16, 1e-3}, std::pair{GgmlType::BF16, 1.5e-2},
                           std::pair{GgmlType::Q8_0, 3e-2}, std::pair{GgmlType::Q4_0, 3e-2}}) {
    auto model = llm::model_from_llama(*m, type);
    Engine e(model, opts());
    const std::vector<float> got = run_chunked(e, ids, 24);
    auto same_weights = llm::load_llama_gguf(model->file());
    same_weights->eval();
    NoGradGuard ng;
    Tensor want = (*same_weights)(t).contiguous();
    EXPECT_LT(relative_error(got, want), tol) << llm::ggml_type_name(type);
  }
}

// K-quant matrices run on their own kernels, the file's blocks as they are
// (llama.cpp's Q4_0 files keep their output matrix in Q6_K): within the
// activations' 8-bit rounding of the module on the file's exact values.
TEST(LlmEngine, RunsKQuantMatrices) {
  nn::zoo::LlamaConfig c = small_config();
  c.dim = 256;  // rows of whole 256-value super-blocks
  c.n_heads = 8;
  manual_seed(17);
  nn::zoo::Llama m(c);
  m.eval();
  const std::string image = llm::llama_to_gguf(m).bytes();
  const llm::GgufFile src = llm::GgufFile::parse(image.data(), image.size(), "f32.gguf");
  for (GgmlType kq : {GgmlType::Q6_K, GgmlType::Q4_K}) {
    const int64_t block = kq == GgmlType::Q6_K ? 210 : 144;
    llm::GgufWriter w;
    for (const auto& [k, v] : src.metadata()) w.set(k, v);
    std::mt19937 g(3);
    for (const llm::GgufTensorInfo& t : src.tensors()) {
      // The output matrix and one layer's products in the K-quant.
      if (t.name != "output.weight" && t.name != "blk.0.attn_q.weight" && t.name != "blk.0.ffn_down.weight") {
        w.add_tensor(t.name, src.tensor(t.name));
        continue;
      }
      if (t.ne[0] % 256 != 0) {
        w.add_tensor(t.name, src.tensor(t.name));
        continue;
      }
      std::vector<uint8_t> blocks(static_cast<size_t>(t.numel() / 256 * block));
      for (uint8_t& b : blocks) b = static_cast<uint8_t>(g());
      for (size_t b = 0; b < blocks.size() / block; ++b) {  // a modest f16 d (and dmin) in each super-block
        const uint16_t d = Half::from_float(1e-3f * static_cast<float>(1 + b % 7));
        if (kq == GgmlType::Q6_K) {
          std::memcpy(blocks.data() + b * block + 208, &d, 2);
        } else {
          const uint16_t dmin = Half::from_float(5e-4f * static_cast<float>(1 + b % 5));
          std::memcpy(blocks.data() + b * block, &d, 2);
          std::memcpy(blocks.data() + b * block + 2, &dmin, 2);
        }
      }
      w.add_tensor(t.name, kq, t.ne, tensor(std::vector<uint8_t>(blocks.begin(), blocks.end())));
    }
    const std::string kimage = w.bytes();
    const llm::GgufFile kfile = llm::GgufFile::parse(kimage.data(), kimage.size(), "k.gguf");
    auto exact = llm::load_llama_gguf(kfile);
    exact->eval();
    const std::vector<int32_t> ids = tokens(20, 4);
    NoGradGuard ng;
    Tensor want = (*exact)(tensor(std::vector<int64_t>(ids.begin(), ids.end()), {1, 20})).contiguous();
    Engine e(llm::Model::from_gguf(kfile), opts());
    EXPECT_EQ(e.model().output().type, kq);  // run as they are, not requantized
    EXPECT_EQ(e.model().layers()[0].q.type, kq);
    const std::vector<float> got = run_chunked(e, ids, 20);
    EXPECT_LT(relative_error(got, want), 2e-2) << llm::ggml_type_name(kq);
    // The same logits whatever the chunking (the K-quant kernels are per-row too).
    EXPECT_EQ(run_chunked(e, ids, 7), got) << llm::ggml_type_name(kq);
  }
  // quantize-gguf's Q4_K: the layers in Q4_K, the output matrix in Q6_K, and
  // the engine within rounding of the module on the converted file.
  const std::string q4k = llm::convert_gguf(src, GgmlType::Q4_K).bytes();
  const llm::GgufFile qfile = llm::GgufFile::parse(q4k.data(), q4k.size(), "q4_k.gguf");
  Engine e(llm::Model::from_gguf(qfile), opts());
  EXPECT_EQ(e.model().layers()[0].q.type, GgmlType::Q4_K);
  EXPECT_EQ(e.model().output().type, GgmlType::Q6_K);
  const std::vector<int32_t> ids = tokens(12, 5);
  EXPECT_LT(relative_error(run_chunked(e, ids, 12), module_logits(qfile, ids)), 2e-2);
}

// quantize-gguf's Q4_K_M: Q6_K where llama.cpp puts it (the output, and the
// V and down products of layers 0, 3, 6 and 7 of 8: the first and last
// eighth, every third between), Q4_K elsewhere; the engine within rounding
// of the module on the converted file, every matrix repacked where it can be.
TEST(LlmEngine, QuantizesToLlamaCppsQ4KMMix) {
  nn::zoo::LlamaConfig c = small_config();
  c.dim = 256, c.n_heads = 8, c.hidden_dim = 256, c.n_layers = 8;
  manual_seed(19);
  nn::zoo::Llama m(c);
  m.eval();
  const std::string image = llm::llama_to_gguf(m).bytes();
  const llm::GgufFile src = llm::GgufFile::parse(image.data(), image.size(), "f32.gguf");
  ASSERT_EQ(llm::gguf_mix_from_name("Q4_K_M"), llm::GgufMix::Q4_K_M);
  EXPECT_FALSE(llm::gguf_mix_from_name("Q4_K_S").has_value());
  const std::string bytes = llm::convert_gguf(src, llm::GgufMix::Q4_K_M).bytes();
  const llm::GgufFile q = llm::GgufFile::parse(bytes.data(), bytes.size(), "q4_k_m.gguf");
  EXPECT_EQ(q.get("general.file_type").as_int(), 15);
  const bool tied = q.find_tensor("output.weight") == nullptr;
  EXPECT_EQ(q.find_tensor(tied ? "token_embd.weight" : "output.weight")->type, GgmlType::Q6_K);
  if (!tied) EXPECT_EQ(q.find_tensor("token_embd.weight")->type, GgmlType::Q4_K);
  for (int i = 0; i < 8; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    const GgmlType more = i == 0 || i == 3 || i == 6 || i == 7 ? GgmlType::Q6_K : GgmlType::Q4_K;
    EXPECT_EQ(q.find_tensor(b + "attn_v.weight")->type, more) << i;
    EXPECT_EQ(q.find_tensor(b + "ffn_down.weight")->type, more) << i;
    for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_output.weight", "ffn_gate.weight", "ffn_up.weight"})
      EXPECT_EQ(q.find_tensor(b + n)->type, GgmlType::Q4_K) << b << n;
    EXPECT_EQ(q.find_tensor(b + "attn_norm.weight")->type, GgmlType::F32);
  }
  Engine e(llm::Model::from_gguf(q), opts());
  EXPECT_EQ(e.model().layers()[3].v.type, GgmlType::Q6_K);
  EXPECT_EQ(e.model().layers()[4].down.type, GgmlType::Q4_K);
  const std::vector<int32_t> ids = tokens(12, 6);
  const std::vector<float> got = run_chunked(e, ids, 12);
  EXPECT_LT(relative_error(got, module_logits(q, ids)), 2e-2);
  EXPECT_EQ(run_chunked(e, ids, 5), got);
}

// A file the engine cannot run is an error that names the problem.
TEST(LlmEngine, RefusesFilesItCannotRun) {
  manual_seed(18);
  nn::zoo::LlamaConfig c = small_config();
  nn::zoo::Llama m(c);
  const std::string image = llm::llama_to_gguf(m).bytes();
  const llm::GgufFile good = llm::GgufFile::parse(image.data(), image.size(), "small.gguf");
  auto rewrite = [&](const std::string& drop, const std::string& key, llm::GgufValue v) {
    llm::GgufWriter w;
    for (const auto& [k, val] : good.metadata()) w.set(k, k == key ? v : val);
    if (!key.empty() && !good.find(key)) w.set(key, v);
    for (const llm::GgufTensorInfo& t : good.tensors())
      if (t.name != drop) w.add_tensor(t.name, good.tensor(t.name));
    return w.bytes();
  };
  auto error = [](const std::string& bytes) {
    return testing::error_of([&] { llm::Model::from_gguf(llm::GgufFile::parse(bytes.data(), bytes.size(), "bad.gguf")); });
  };
  EXPECT_NE(error(rewrite("blk.1.ffn_up.weight", "", {})).find("no tensor 'blk.1.ffn_up.weight'"), std::string::npos);
  EXPECT_NE(error(rewrite("", "general.architecture", llm::GgufValue::string("mamba"))).find("not \"llama\""),
            std::string::npos);
  EXPECT_NE(error(rewrite("", "llama.attention.head_count", llm::GgufValue::integer(llm::GgufType::U32, 3)))
                .find("do not divide the width"),
            std::string::npos);
  EXPECT_NE(error(rewrite("", "llama.rope.scaling.type", llm::GgufValue::string("longrope")))
                .find("llama.rope.scaling.type 'longrope' is not one the engine computes (none, linear, yarn)"),
            std::string::npos);
}

// RoPE angles with llama.cpp's scaling options, against the formulas written
// out in double: plain, linear, per-pair frequency factors, and YaRN (the
// fast dimensions keep their angles, the slow ones are interpolated, all are
// scaled by 0.1 ln(factor) + 1).
TEST(LlmEngine, RopeScalingAngles) {
  llm::ModelSpec s;
  s.head_dim = 32, s.rope_theta = 10000, s.context = 64;
  std::vector<float> cs(32);
  auto freq = [&](int64_t i) { return std::pow(10000.0, -2.0 * static_cast<double>(i) / 32.0); };
  auto expect_angles = [&](int64_t pos, const std::function<double(int64_t)>& angle, double mag, double tol) {
    llm::rope_cos_sin(s, pos, cs.data());
    for (int64_t i = 0; i < 16; ++i) {
      EXPECT_NEAR(cs[2 * i], mag * std::cos(angle(i)), tol) << "pair " << i << " at " << pos;
      EXPECT_NEAR(cs[2 * i + 1], mag * std::sin(angle(i)), tol) << "pair " << i << " at " << pos;
    }
  };
  expect_angles(37, [&](int64_t i) { return 37 * freq(i); }, 1.0, 2e-5);
  s.rope.type = llm::RopeScaling::Type::Linear;
  s.rope.factor = 4;
  expect_angles(37, [&](int64_t i) { return 37 / 4.0 * freq(i); }, 1.0, 2e-5);
  s.rope = {};
  for (int i = 0; i < 16; ++i) s.rope.freq_factors.push_back(1.0f + 0.5f * static_cast<float>(i));
  expect_angles(37, [&](int64_t i) { return 37 * freq(i) / (1.0 + 0.5 * static_cast<double>(i)); }, 1.0, 2e-5);
  s.rope = {};
  s.rope.type = llm::RopeScaling::Type::Yarn;
  s.rope.factor = 4, s.rope.original_context = 4096;
  s.context = 16384;
  // Correction range: pairs below floor(d(32)) extrapolate, above ceil(d(1)) interpolate.
  auto d = [](double rot) { return 32 * std::log(4096 / (rot * 2 * M_PI)) / (2 * std::log(10000.0)); };
  const int64_t lo = static_cast<int64_t>(std::floor(d(32))), hi = static_cast<int64_t>(std::ceil(d(1)));
  ASSERT_LT(lo, hi);
  ASSERT_LT(hi, 15);
  const double mag = 0.1 * std::log(4.0) + 1.0;
  llm::rope_cos_sin(s, 1000, cs.data());
  for (int64_t i : {int64_t{0}, lo}) {  // extrapolated: the original angle
    EXPECT_NEAR(cs[2 * i], mag * std::cos(1000 * freq(i)), 1e-3) << i;
    EXPECT_NEAR(cs[2 * i + 1], mag * std::sin(1000 * freq(i)), 1e-3) << i;
  }
  for (int64_t i : {hi, int64_t{15}}) {  // interpolated: position / factor
    EXPECT_NEAR(cs[2 * i], mag * std::cos(250 * freq(i)), 1e-4) << i;
    EXPECT_NEAR(cs[2 * i + 1], mag * std::sin(250 * freq(i)), 1e-4) << i;
  }
}

// Note [Batch-invariant LLM kernels]: chunking, neighbours, slots, threads.
TEST(LlmEngine, LogitsAreBitIdenticalWhateverSharesTheStep) {
  auto m = small_llama(13);
  const int threads = get_num_threads();
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0})
    for (llm::KvType kv : {llm::KvType::F16, llm::KvType::Q8_0}) {
      SCOPED_TRACE(std::string(llm::ggml_type_name(type)) + " weights, " + llm::kv_type_name(kv) + " cache");
      llm::EngineOptions o = opts();
      o.k_type = o.v_type = kv;
      Engine e(llm::model_from_llama(*m, type), o);
      const std::vector<int32_t> ids = tokens(70, 3);
      const std::vector<float> alone = run_chunked(e, ids, 70);
      for (int64_t chunk : {1, 7, 64}) EXPECT_EQ(run_chunked(e, ids, chunk), alone) << "chunks of " << chunk;
      EXPECT_EQ(run_chunked(e, ids, 70, 3), alone) << "other blocks";
      set_num_threads(threads == 1 ? 2 : 1);
      EXPECT_EQ(run_chunked(e, ids, 13), alone) << "threads";
      set_num_threads(threads);
      // In one step with 1 to 15 other sequences, some prefilling, some decoding.
      for (int64_t others : {1, 5, 15}) {
        const int64_t seq = e.add_sequence();
        std::vector<int64_t> seqs;
        std::vector<std::vector<int32_t>> their;
        for (int64_t i = 0; i < others; ++i) {
          seqs.push_back(e.add_sequence());
          their.push_back(tokens(i % 3 == 0 ? 1 : 5 + i, 100 + i));
        }
        std::vector<float> got;
        for (size_t p = 0; p < ids.size(); p += 10) {
          std::vector<Chunk> cs;
          for (int64_t i = 0; i < others; ++i)
            if ((p / 10 + i) % 2 == 0) cs.push_back({seqs[i], their[i], 1});
          const size_t n = std::min<size_t>(10, ids.size() - p);
          const size_t before = cs.size() / 2;  // chunks ahead of ours, one logit row each
          cs.insert(cs.begin() + static_cast<int64_t>(before),
                    Chunk{seq, std::span<const int32_t>(ids.data() + p, n), static_cast<int64_t>(n)});
          auto l = e.step(cs);
          got.insert(got.end(), l.begin() + static_cast<int64_t>(before * 96),
                     l.begin() + static_cast<int64_t>((before + n) * 96));
        }
        EXPECT_EQ(got, alone) << others << " other sequences";
        e.remove_sequence(seq);
        for (int64_t s : seqs) e.remove_sequence(s);
      }
      EXPECT_EQ(e.free_blocks(), e.total_blocks());
    }
}

TEST(LlmEngine, DecodeStepsAllocateNothing) {
  auto m = small_llama(14);
  for (GgmlType type : {GgmlType::F32, GgmlType::Q8_0}) {
    Engine e(llm::model_from_llama(*m, type), opts());
    const int64_t seq = e.add_sequence();
    std::vector<int32_t> prompt = tokens(9, 1);
    Chunk c{seq, prompt, 1};
    e.step({&c, 1});
    int32_t next = 5;
    Chunk d{seq, std::span<const int32_t>(&next, 1), 1};
    e.step({&d, 1});  // warm: the thread pool exists
    const int64_t allocs = memory_stats().allocations;
    g_news = 0;
    g_count_news = true;
    for (int i = 0; i < 100; ++i) {
      auto l = e.step({&d, 1});
      next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    }
    g_count_news = false;
    if (kCountsNews) EXPECT_EQ(g_news.load(), 0) << llm::ggml_type_name(type);
    EXPECT_EQ(memory_stats().allocations, allocs);
    EXPECT_EQ(e.sequence_length(seq), 110);
  }
}

TEST(LlmEngine, CacheBlocksComeBackAndAFullCacheIsAnError) {
  auto m = small_llama(15);
  llm::EngineOptions o = opts();
  o.block_tokens = 16;
  o.kv_memory = 0;
  o.max_sequences = 2;
  o.context = 64;
  Engine e(llm::model_from_llama(*m), o);
  EXPECT_EQ(e.kv_bytes_per_token(), 2 * 2 * (2 * 32) * 2);  // layers * (K, V) * kv_dim * f16
  EXPECT_EQ(e.total_blocks(), 2 * 64 / 16);
  const int64_t a = e.add_sequence(), b = e.add_sequence();
  EXPECT_THROW_MSG(e.add_sequence(), "all 2 sequences are in use");
  std::vector<int32_t> t = tokens(40, 2);
  Chunk ca{a, t, 0};
  e.step({&ca, 1});
  EXPECT_EQ(e.free_blocks(), 8 - 3);
  e.truncate_sequence(a, 16);
  EXPECT_EQ(e.free_blocks(), 8 - 1);
  EXPECT_EQ(e.sequence_length(a), 16);
  e.remove_sequence(a);
  EXPECT_EQ(e.free_blocks(), 8);
  Chunk cb{b, t, 1};
  e.step({&cb, 1});
  Chunk more{b, std::span<const int32_t>(t.data(), 30), 0};
  EXPECT_THROW_MSG(e.step({&more, 1}), "past the context of 64");

  // Errors before anything changes.
  const int64_t len = e.sequence_length(b), free = e.free_blocks();
  int32_t bad = 96;
  Chunk cbad{b, std::span<const int32_t>(&bad, 1), 1};
  EXPECT_THROW_MSG(e.step({&cbad, 1}), "token id 96 is outside the vocabulary [0, 96)");
  Chunk twice[2] = {{b, std::span<const int32_t>(t.data(), 1), 0}, {b, std::span<const int32_t>(t.data(), 1), 0}};
  EXPECT_THROW_MSG(e.step(twice), "has two chunks in one step");
  Chunk none{a, std::span<const int32_t>(t.data(), 1), 0};
  EXPECT_THROW_MSG(e.step({&none, 1}), "no sequence 0");
  EXPECT_EQ(e.sequence_length(b), len);
  EXPECT_EQ(e.free_blocks(), free);
  llm::EngineOptions small = opts();
  small.kv_memory = 1000;
  EXPECT_THROW_MSG(Engine(llm::model_from_llama(*m), small), "holds no cache block");
  llm::EngineOptions tiny = opts();
  tiny.kv_memory = 2 * 16 * 2 * 64 * 2 * 2;  // two blocks
  Engine f(llm::model_from_llama(*m), tiny);
  const int64_t s = f.add_sequence();
  Chunk big{s, t, 0};
  EXPECT_THROW_MSG(f.step({&big, 1}), "the KV cache is full (3 blocks needed, 2 free of 2)");
  EXPECT_EQ(f.free_blocks(), 2);
}

// The default cache is whole blocks: a context shorter than one block (down
// to 1) still gets a block per sequence, not an error about a --kv-memory
// nobody gave.
TEST(LlmEngine, AContextShorterThanABlockGetsABlock) {
  auto m = small_llama(15);
  llm::EngineOptions o = opts();
  o.block_tokens = 16;
  o.kv_memory = 0;
  o.max_sequences = 3;
  for (int64_t context : {1, 5, 17}) {
    o.context = context;
    Engine e(llm::model_from_llama(*m), o);
    EXPECT_EQ(e.total_blocks(), 3 * ((context + 15) / 16)) << context;
    const int64_t s = e.add_sequence();
    std::vector<int32_t> t = tokens(context, 2);
    Chunk c{s, t, 1};
    EXPECT_EQ(e.step({&c, 1}).size(), 96u) << context;
  }
}

// Prefix caching (Note [Prefix caching]): a sequence that begins as an
// earlier one did takes its full blocks and gets the same logits bit for
// bit; forks and truncation into shared blocks copy before writing; freed
// registered blocks are kept and evicted least recently used first.
TEST(LlmEngine, PrefixCacheSharesBlocksWithTheSameLogits) {
  auto m = small_llama(16);
  llm::EngineOptions o = opts();
  o.max_sequences = 4;
  o.prefix_caching = true;
  o.kv_memory = 10 * 16 * 2 * 2 * 64 * 2;  // ten blocks
  Engine e(llm::model_from_llama(*m), o);
  ASSERT_EQ(e.total_blocks(), 10);
  const std::vector<int32_t> t = tokens(40, 3);
  auto last_logits = [&](int64_t seq, int64_t from) {
    Chunk c{seq, std::span<const int32_t>(t.data() + from, t.size() - static_cast<size_t>(from)), 1};
    const std::span<const float> l = e.step({&c, 1});
    return std::vector<float>(l.begin(), l.end());
  };
  const int64_t a = e.add_sequence();
  EXPECT_EQ(e.reuse_prefix(a, t), 0);
  const std::vector<float> want = last_logits(a, 0);
  e.remove_sequence(a);
  EXPECT_EQ(e.cached_blocks(), 2);  // the two full blocks; the partial third was freed
  EXPECT_EQ(e.free_blocks(), 10);

  const int64_t b = e.add_sequence();
  EXPECT_EQ(e.reuse_prefix(b, t), 32);
  EXPECT_EQ(e.cached_blocks(), 0);
  EXPECT_EQ(last_logits(b, 32), want);
  // Another salt, other tokens in the second block, or a prompt of exactly
  // two blocks (one token is always left to compute).
  const int64_t c = e.add_sequence();
  EXPECT_EQ(e.reuse_prefix(c, t, "tenant 7"), 0);
  e.remove_sequence(c);
  std::vector<int32_t> other = t;
  other[20] = (other[20] + 1) % 96;
  const int64_t d = e.add_sequence();
  EXPECT_EQ(e.reuse_prefix(d, other), 16);
  e.remove_sequence(d);
  const int64_t x = e.add_sequence();
  EXPECT_EQ(e.reuse_prefix(x, std::span<const int32_t>(t.data(), 32)), 16);
  e.remove_sequence(x);

  // A fork part-way through a block, and a truncation into a shared one.
  const int64_t f = e.fork_sequence(b, 20);
  EXPECT_EQ(e.sequence_length(f), 20);
  EXPECT_EQ(last_logits(f, 20), want);
  e.remove_sequence(f);
  const int64_t g = e.fork_sequence(b, 40);
  e.truncate_sequence(g, 24);
  EXPECT_EQ(last_logits(g, 24), want);
  e.truncate_sequence(b, 24);  // b's own block now: written in place
  EXPECT_EQ(last_logits(b, 24), want);
  e.remove_sequence(g);
  e.remove_sequence(b);
  EXPECT_EQ(e.free_blocks(), 10);

  // Eviction: sequences that need the whole cache take the kept blocks,
  // least recently used first, and the prefix is computed again after.
  EXPECT_GT(e.cached_blocks(), 0);
  const int64_t p = e.add_sequence(), q = e.add_sequence();
  const std::vector<int32_t> u = tokens(80, 9), v = tokens(96, 10);
  Chunk cu{p, u, 0}, cv{q, v, 0};
  e.step({&cu, 1});  // 5 blocks
  EXPECT_THROW_MSG(e.step({&cv, 1}), "the KV cache is full (6 blocks needed, 5 free of 10)");
  Chunk cv2{q, std::span<const int32_t>(v.data(), 80), 0};
  e.step({&cv2, 1});  // the other 5: the kept blocks are taken too
  EXPECT_EQ(e.free_blocks(), 0);
  EXPECT_EQ(e.cached_blocks(), 0);
  e.remove_sequence(p);
  e.remove_sequence(q);
  const int64_t r = e.add_sequence();
  EXPECT_EQ(e.reuse_prefix(r, t), 0);
  const int64_t w = e.add_sequence();
  EXPECT_EQ(e.reuse_prefix(w, u), 64);  // what is kept now
  e.remove_sequence(r);
  e.remove_sequence(w);
  EXPECT_EQ(e.free_blocks(), 10);
}

// Salts are compared as bytes, never trusted to their hash: with every salt
// hashed to one value, two tenants' equal prompts still never share a block,
// and each gets the logits it gets alone.
TEST(LlmEngine, SaltsForcedToOneHashNeverShareBlocks) {
  auto m = small_llama(16);
  llm::EngineOptions o = opts();
  o.max_sequences = 3;
  o.prefix_caching = true;
  o.kv_memory = 10 * 16 * 2 * 2 * 64 * 2;  // ten blocks
  o.prefix_salt_hash = [](std::string_view) { return uint64_t{42}; };
  Engine e(llm::model_from_llama(*m), o);
  const std::vector<int32_t> t = tokens(40, 3);
  auto run = [&](const std::string& salt, int64_t want_reused) {
    const int64_t s = e.add_sequence();
    EXPECT_EQ(e.reuse_prefix(s, t, salt), want_reused) << salt;
    const int64_t from = e.sequence_length(s);
    Chunk c{s, std::span<const int32_t>(t.data() + from, t.size() - static_cast<size_t>(from)), 1};
    const std::span<const float> l = e.step({&c, 1});
    std::vector<float> out(l.begin(), l.end());
    e.remove_sequence(s);
    return out;
  };
  Engine solo(llm::model_from_llama(*m), opts());
  const int64_t s = solo.add_sequence();
  Chunk c{s, t, 1};
  const std::span<const float> sl = solo.step({&c, 1});
  const std::vector<float> want(sl.begin(), sl.end());

  EXPECT_EQ(run("tenant a", 0), want);
  EXPECT_EQ(e.cached_blocks(), 2);
  EXPECT_EQ(run("tenant b", 0), want);  // same tokens, same hash, another salt: computed anew
  EXPECT_EQ(run("", 0), want);          // nor does the empty salt share them
  EXPECT_EQ(run("tenant a", 32), want); // its own are still there
  EXPECT_EQ(run(std::string("tenant a\0", 9), 0), want);  // bytes, not C strings
  EXPECT_EQ(e.free_blocks(), 10);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// A split that cannot be made is an error naming what does not divide
// (tests/distributed_mpi/test_tp_engine.cpp runs the split engines).
TEST(LlmEngine, ASplitModelNamesWhatDoesNotDivide) {
  auto contains = [](const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; };
  auto split_error = [](const nn::zoo::LlamaConfig& c, llm::TensorSplit split, GgmlType type = GgmlType::F32) {
    manual_seed(3);
    nn::zoo::Llama m(c);
    const std::string image = type == GgmlType::F32 ? llm::llama_to_gguf(m).bytes()
                                                    : llm::convert_gguf([&] {
                                                        const std::string f32 = llm::llama_to_gguf(m).bytes();
                                                        return llm::GgufFile::parse(f32.data(), f32.size(), "f32");
                                                      }(), type).bytes();
    try {
      llm::Model::from_gguf(llm::GgufFile::parse(image.data(), image.size(), "model.gguf"), split);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nn::zoo::LlamaConfig c = small_config();  // 4 heads, 2 key/value heads, width 160
  EXPECT_PRED2(contains, split_error(c, {0, 3}), "4 attention heads do not split over 3 ranks");
  EXPECT_PRED2(contains, split_error(c, {2, 2}), "rank 2 of a tensor-parallel group of 2");
  c.hidden_dim = 162;
  EXPECT_PRED2(contains, split_error(c, {1, 4}), "feed-forward width 162 does not split over 4");
  c = small_config(3, 16);
  c.n_heads = 6, c.dim = 96;
  EXPECT_PRED2(contains, split_error(c, {0, 2}), "3 key/value heads neither split over 2");
  // Q4_K's 256-value blocks: a rank's 128 columns of the output projection cut through one.
  c = small_config();
  c.dim = 256, c.n_heads = 8, c.hidden_dim = 256;
  EXPECT_PRED2(contains, split_error(c, {0, 2}, GgmlType::Q4_K), "cuts through one");
  EXPECT_EQ(split_error(c, {1, 2}, GgmlType::Q8_0), "");  // Q8_0's 32-value blocks split
  // A part runs only in an engine with a group to sum the parts over.
  manual_seed(3);
  nn::zoo::Llama m(small_config());
  const auto part = llm::Model::from_gguf(llm::model_from_llama(m)->file(), {1, 2});
  EXPECT_EQ(part->spec().n_heads, 2);
  EXPECT_EQ(part->spec().n_kv_heads, 1);
  EXPECT_EQ(part->spec().hidden, 80);
  try {
    llm::Engine e(part);
    ADD_FAILURE() << "an engine ran a part without a group";
  } catch (const Error& e) {
    EXPECT_PRED2(contains, e.what(), "no group");
  }
}

}  // namespace
}  // namespace tessera
