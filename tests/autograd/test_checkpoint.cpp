// Gradient checkpointing: same gradients as the plain run, less memory.
#include <gtest/gtest.h>

#include "tessera/autograd/checkpoint.h"
#include "tessera/autograd/engine.h"
#include "tessera/core/allocator.h"
#include "tessera/nn/checkpoint.h"
#include "tessera/nn/loss.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/autocast.h"
#include "tessera/ops/ops.h"
#include "test_util.h"

using namespace tessera;
using namespace tessera::ops;

namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (!IntArrayRef(a.shape()).equals(b.shape())) return false;
  return all(eq(a, b)).item<bool>();
}

nn::zoo::GPTConfig tiny_gpt(bool ckpt, int64_t segments = 0) {
  nn::zoo::GPTConfig c;
  c.vocab_size = 32;
  c.block_size = 16;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_embd = 32;
  c.dropout = 0.1;  // the recomputation must draw the same masks
  c.gradient_checkpointing = ckpt;
  c.checkpoint_segments = segments;
  return c;
}

// Gradients of every parameter after one step of a tiny GPT.
std::vector<Tensor> gpt_grads(const nn::zoo::GPTConfig& c) {
  manual_seed(7);
  auto model = std::make_shared<nn::zoo::GPT>(c);
  model->train();
  manual_seed(11);
  Tensor ids = randint(0, c.vocab_size, {2, 16});
  Tensor logits = (*model)(ids);
  Tensor loss = cross_entropy(logits.reshape({-1, c.vocab_size}), ids.reshape({-1}));
  loss.backward();
  std::vector<Tensor> g;
  for (auto& [name, p] : model->named_parameters()) g.push_back(p.grad());
  return g;
}

}  // namespace

TEST(Checkpoint, GPTGradientsMatchBitwiseWithDropout) {
  auto plain = gpt_grads(tiny_gpt(false));
  for (int64_t segments : {0, 2}) {
    auto ckpt = gpt_grads(tiny_gpt(true, segments));
    ASSERT_EQ(plain.size(), ckpt.size());
    for (size_t i = 0; i < plain.size(); ++i)
      EXPECT_TRUE(bitwise_equal(plain[i], ckpt[i])) << "parameter " << i << ", segments " << segments;
  }
}

TEST(Checkpoint, LlamaGradientsMatch) {
  nn::zoo::LlamaConfig c;
  c.vocab_size = 32;
  c.dim = 32;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.hidden_dim = 64;
  c.max_seq_len = 16;
  auto grads = [&](bool ckpt) {
    c.gradient_checkpointing = ckpt;
    manual_seed(3);
    auto model = std::make_shared<nn::zoo::Llama>(c);
    manual_seed(4);
    Tensor ids = randint(0, 32, {2, 8});
    sum((*model)(ids)).backward();
    std::vector<Tensor> g;
    for (auto& [name, p] : model->named_parameters()) g.push_back(p.grad());
    return g;
  };
  auto a = grads(false), b = grads(true);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i], b[i])) << i;
}

TEST(Checkpoint, FunctionFormWithListsAndNonTensorArguments) {
  Tensor w = randn({3, 3}).requires_grad_();
  Tensor x = randn({2, 3}).requires_grad_();
  Tensor y = randn({2, 3}).requires_grad_();
  auto fn = [&](const Tensor& a, const TensorList& rest, double scale, int power) -> TensorList {
    Tensor h = mul(matmul(add(a, rest[0]), w), scale);
    return {pow(h, power), tanh(h)};
  };
  auto run = [&](bool ckpt) {
    for (Tensor* t : {&w, &x, &y}) t->impl()->autograd_meta().grad.reset();
    TensorList out = ckpt ? autograd::checkpoint(fn, x, TensorList{y}, 0.5, 3) : fn(x, {y}, 0.5, 3);
    add(sum(out[0]), sum(out[1])).backward();
    return std::vector<Tensor>{w.grad(), x.grad(), y.grad()};
  };
  auto a = run(false), b = run(true);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(bitwise_equal(a[i], b[i])) << i;
}

TEST(Checkpoint, GradLeavesParametersAlone) {
  Tensor w = randn({4}).requires_grad_();
  Tensor x = randn({4}).requires_grad_();
  Tensor y = autograd::checkpoint([&](const Tensor& a) { return sum(mul(a, w)); }, x);
  TensorList g = autograd::grad({y}, {x});
  EXPECT_CLOSE(g[0], w.detach());
  EXPECT_FALSE(w.grad().defined());
}

TEST(Checkpoint, DoubleBackward) {
  Tensor x = full({1}, 2.0, DType::F64).requires_grad_();
  Tensor y = autograd::checkpoint([](const Tensor& a) { return mul(mul(a, a), a); }, x);
  Tensor g = autograd::grad({sum(y)}, {x}, {}, true, true)[0];  // 3x^2 = 12
  EXPECT_DOUBLE_EQ(g.item<double>(), 12.0);
  Tensor gg = autograd::grad({sum(g)}, {x})[0];  // 6x = 12
  EXPECT_DOUBLE_EQ(gg.item<double>(), 12.0);
}

TEST(Checkpoint, ReturnsInputUnchanged) {
  Tensor x = randn({3}).requires_grad_();
  TensorList out = autograd::checkpoint([](const Tensor& a) -> TensorList { return {a, mul(a, 2.0)}; }, x);
  sum(add(out[0], out[1])).backward();
  EXPECT_CLOSE(x.grad(), full({3}, 3.0));
}

TEST(Checkpoint, UnderAutocastWithAWeightUsedOutsideToo) {
  Tensor w = randn({8, 8}).requires_grad_();
  Tensor x = randn({4, 8}).requires_grad_();
  auto run = [&](bool ckpt) {
    w.impl()->autograd_meta().grad.reset();
    Tensor y;
    {
      autocast::Guard amp(DType::BF16);
      Tensor h = linear(x, w);  // casts w (cached in this scope)
      auto block = [&](const Tensor& a) { return relu(linear(a, w)); };
      y = ckpt ? autograd::checkpoint(block, h) : block(h);
    }
    sum(y.to(DType::F32)).backward();
    return w.grad().clone();
  };
  // Not bitwise: without checkpointing both uses share one bf16 copy of w, whose
  // gradient sums the two contributions in bf16 before reaching w.
  Tensor plain = run(false), ckpt = run(true);
  EXPECT_TRUE(tessera::testing::all_close(plain, ckpt, 2e-2, 2e-2));
}

TEST(Checkpoint, ClearErrors) {
  Tensor x = randn({3});  // nothing requires grad
  try {
    autograd::checkpoint([](const Tensor& a) { return mul(a, 2.0); }, x);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("none of the function's outputs requires grad"), std::string::npos);
  }
  Tensor w = randn({3}).requires_grad_();
  Tensor hidden = mul(w, 2.0);  // a non-leaf from outside, not passed as an argument
  Tensor z = randn({3}).requires_grad_();
  try {
    autograd::checkpoint([&](const Tensor& a) { return mul(a, hidden); }, z);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pass it as an argument"), std::string::npos) << e.what();
  }
  // Under no grad it just runs.
  NoGradGuard no_grad;
  EXPECT_NO_THROW(autograd::checkpoint([](const Tensor& a) { return mul(a, 2.0); }, x));
}

TEST(Checkpoint, BackwardTwiceNeedsRetainGraph) {
  Tensor x = randn({3}).requires_grad_();
  Tensor y = sum(autograd::checkpoint([](const Tensor& a) { return exp(a); }, x));
  y.backward({}, true);
  y.backward();
  EXPECT_CLOSE(x.grad(), mul(exp(x.detach()), 2.0));
  EXPECT_THROW(y.backward(), Error);
}

TEST(Checkpoint, SequentialMatchesAndSavesMemory) {
  manual_seed(5);
  auto seq = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 16; ++i) {
    seq->push_back(std::make_shared<nn::Linear>(128, 128));
    seq->push_back(std::make_shared<nn::Tanh>());
  }
  Tensor x = randn({2048, 128});  // activations (1 MiB each) dwarf the weights
  auto run = [&](int64_t segments) {
    seq->zero_grad();
    reset_peak_memory();
    int64_t base = memory_allocated();
    Tensor y = segments ? nn::checkpoint_sequential(*seq, segments, x) : (*seq)(x);
    sum(y).backward();
    std::vector<Tensor> g;
    for (auto& [n, p] : seq->named_parameters()) g.push_back(p.grad().clone());
    return std::make_pair(g, max_memory_allocated() - base);
  };
  auto [plain, plain_peak] = run(0);
  auto [ckpt, ckpt_peak] = run(4);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(bitwise_equal(plain[i], ckpt[i])) << i;
  // 32 modules' activations against 3 segment inputs plus the last segment's
  // (not checkpointed) and, in backward, one recomputed segment's.
  EXPECT_LT(ckpt_peak, plain_peak * 7 / 10) << ckpt_peak << " vs " << plain_peak;
  EXPECT_THROW(nn::checkpoint_sequential(*seq, 0, x), Error);
}
