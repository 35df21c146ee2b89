// Tensor-parallel serving: the LLM engine over a model split across the
// ranks of a group (Model::load(path, {rank, size}), EngineOptions::group)
// gives the logits of the whole model's engine and the same greedy tokens,
// for the Llama (key/value heads split, and fewer than the ranks) and the
// GPT, in F32 and Q8_0, through prefill, decode, fork, truncation, prefix
// reuse, a refused call and an idle second (the heartbeat). Rank 0 drives
// both engines; the other ranks follow it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "tessera/core/generator.h"
#include "tessera/distributed/llm_group.h"
#include "tessera/llm/engine.h"
#include "tessera/llm/gpt_gguf.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/nn/zoo/zoo.h"
#include "model_parallel.h"

namespace tessera {
namespace {

using distributed::ProcessGroupPtr;
using testing::model_parallel_groups;

constexpr int64_t kVocab = 96;

std::shared_ptr<llm::Model> llama(int64_t kv_heads, llm::GgmlType type) {
  nn::zoo::LlamaConfig c;
  c.vocab_size = kVocab, c.dim = 128, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = kv_heads, c.hidden_dim = 256;
  c.max_seq_len = 64;
  manual_seed(5);
  nn::zoo::Llama m(c);
  return llm::model_from_llama(m, type);
}

std::shared_ptr<llm::Model> gpt(llm::GgmlType type) {
  nn::zoo::GPTConfig c;
  c.vocab_size = kVocab, c.block_size = 64, c.n_layer = 2, c.n_head = 4, c.n_embd = 128;
  manual_seed(6);
  nn::zoo::GPT m(c);
  return llm::model_from_gpt(m, type);
}

// Rank 0 drives `drive(split, whole)`; the other ranks of g follow its split engine.
void with_engines(const ProcessGroupPtr& g, const std::shared_ptr<llm::Model>& whole, llm::EngineOptions o,
                  const std::function<void(llm::Engine&, llm::Engine&)>& drive) {
  if (g->size() > 4) return;  // the models have 4 heads
  std::shared_ptr<llm::Model> part = llm::Model::from_gguf(whole->file(), {g->rank(), g->size()});
  EXPECT_EQ(part->spec().n_heads * g->size(), whole->spec().n_heads);
  EXPECT_EQ(part->spec().hidden * g->size(), whole->spec().hidden);
  llm::EngineOptions wo = o;
  o.group = distributed::llm_communicator(g);
  llm::Engine split(part, o);
  if (g->rank() != 0) {
    split.follow();
    return;
  }
  llm::Engine one(whole, wo);
  drive(split, one);
}

// Rows of logits equal within 1e-4 of the largest, with the same largest entry; returns the argmaxes.
std::vector<int32_t> expect_same_logits(std::span<const float> got, std::span<const float> want) {
  std::vector<int32_t> best;
  EXPECT_EQ(got.size(), want.size());
  if (got.size() != want.size()) return best;
  float scale = 0, diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    diff = std::max(diff, std::abs(got[i] - want[i]));
  }
  EXPECT_LE(diff, 1e-4f * scale);
  for (size_t r = 0; r < want.size() / kVocab; ++r) {
    auto g0 = got.begin() + static_cast<ptrdiff_t>(r * kVocab), w0 = want.begin() + static_cast<ptrdiff_t>(r * kVocab);
    const auto gb = std::max_element(g0, g0 + kVocab) - g0, wb = std::max_element(w0, w0 + kVocab) - w0;
    EXPECT_EQ(gb, wb) << "row " << r;
    best.push_back(static_cast<int32_t>(wb));
  }
  return best;
}

// Two prompts prefilled together, then decoded greedily together; a fork
// and a truncation; a prompt that begins like the first one (prefix reuse);
// a refused step. Every step's logits compared.
void greedy_session(llm::Engine& split, llm::Engine& one, bool idle) {
  auto both = [&](auto&& call) { return std::make_pair(call(split), call(one)); };
  auto [a, a1] = both([](llm::Engine& e) { return e.add_sequence(); });
  auto [b, b1] = both([](llm::Engine& e) { return e.add_sequence(); });
  ASSERT_EQ(a, a1);
  ASSERT_EQ(b, b1);
  std::vector<int32_t> ta = {1, 17, 33, 5, 60, 2, 9, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50}, tb = {7, 3, 88, 21, 4};
  auto step = [&](std::vector<llm::Chunk> chunks) {
    std::vector<float> want;
    {
      std::span<const float> w = one.step(chunks);
      want.assign(w.begin(), w.end());
    }
    return expect_same_logits(split.step(chunks), want);
  };
  std::vector<int32_t> next = step({{a, ta, 1}, {b, tb, 2}});
  ASSERT_EQ(next.size(), 3u);
  int32_t na = next[0], nb = next[2];
  for (int i = 0; i < 10; ++i) {
    ta.push_back(na);
    tb.push_back(nb);
    if (idle && i == 4) std::this_thread::sleep_for(std::chrono::milliseconds(1300));
    next = step({{a, std::span<const int32_t>(&ta.back(), 1), 1}, {b, std::span<const int32_t>(&tb.back(), 1), 1}});
    ASSERT_EQ(next.size(), 2u);
    na = next[0], nb = next[1];
  }
  // A fork of a's first 20 tokens, and b cut back to 3, each given a token.
  auto [f, f1] = both([&](llm::Engine& e) { return e.fork_sequence(a, 20); });
  ASSERT_EQ(f, f1);
  for (llm::Engine* e : {&split, &one}) e->truncate_sequence(b, 3);
  const int32_t t1 = 11, t2 = 12;
  step({{f, std::span<const int32_t>(&t1, 1), 1}, {b, std::span<const int32_t>(&t2, 1), 1}});
  // A refused step (a token outside the vocabulary) changes nothing on any rank.
  const int32_t bad = static_cast<int32_t>(kVocab);
  EXPECT_THROW(split.step(std::vector<llm::Chunk>{{a, std::span<const int32_t>(&bad, 1), 1}}), Error);
  // Prefix reuse: a prompt that begins with a's first 16 tokens.
  auto [c, c1] = both([](llm::Engine& e) { return e.add_sequence(); });
  ASSERT_EQ(c, c1);
  std::vector<int32_t> tc(ta.begin(), ta.begin() + 16);
  tc.insert(tc.end(), {70, 71, 72});
  auto [reused, reused1] = both([&](llm::Engine& e) { return e.reuse_prefix(c, tc, "salt"); });
  EXPECT_EQ(reused, reused1);
  step({{c, std::span<const int32_t>(tc).subspan(static_cast<size_t>(reused)), 2},
        {a, std::span<const int32_t>(&ta.back(), 1), 1}});
  for (llm::Engine* e : {&split, &one})
    for (int64_t s : {a, b, c, f}) e->remove_sequence(s);
  EXPECT_EQ(split.free_blocks(), one.free_blocks());
}

TEST(TensorParallelEngine, LlamaEqualsTheWholeModelForEveryKeyValueSplit) {
  for (const ProcessGroupPtr& g : model_parallel_groups())
    for (int64_t kv : {4, 2, 1})
      with_engines(g, llama(kv, llm::GgmlType::F32), {.max_sequences = 4, .prefix_caching = true},
                   [&](llm::Engine& split, llm::Engine& one) {
                     SCOPED_TRACE("T = " + std::to_string(g->size()) + ", key/value heads " + std::to_string(kv));
                     greedy_session(split, one, false);
                   });
}

TEST(TensorParallelEngine, QuantizedLlamaAndGptEqualTheWholeModel) {
  for (const ProcessGroupPtr& g : model_parallel_groups()) {
    with_engines(g, llama(2, llm::GgmlType::Q8_0), {.max_sequences = 4, .prefix_caching = true},
                 [&](llm::Engine& split, llm::Engine& one) { greedy_session(split, one, false); });
    with_engines(g, gpt(llm::GgmlType::F32), {.max_sequences = 4, .prefix_caching = true},
                 [&](llm::Engine& split, llm::Engine& one) { greedy_session(split, one, false); });
    with_engines(g, gpt(llm::GgmlType::Q8_0), {.max_sequences = 4, .k_type = llm::KvType::Q8_0},
                 [&](llm::Engine& split, llm::Engine& one) { greedy_session(split, one, g->size() == 2); });
  }
}

TEST(TensorParallelEngine, AFollowersOwnCallsAreRefused) {
  auto g = model_parallel_groups().front();
  auto whole = llama(2, llm::GgmlType::F32);
  auto part = llm::Model::from_gguf(whole->file(), {g->rank(), g->size()});
  llm::Engine e(part, {.max_sequences = 2, .group = distributed::llm_communicator(g)});
  if (g->rank() == 0) return;  // its engine ends at once, which ends the others' follow()
  try {
    e.add_sequence();
    ADD_FAILURE() << "a follower's own call was taken";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("Engine::follow"), std::string::npos) << err.what();
  }
  e.follow();
}

}  // namespace
}  // namespace tessera
