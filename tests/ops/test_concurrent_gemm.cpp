// oneDNN products run from several threads at once (attention runs one GEMM
// per head in parallel; serving runs requests side by side) must not share
// scratch memory: every run gives the same bits as a run alone.
#include <cstring>
#include <thread>

#include "backend/cpu/gemm.h"
#include "tessera/core/parallel.h"
#include "test_util.h"

namespace tessera {
namespace {

// One product with a transposed B (the attention scores' q k^T), which makes
// oneDNN pack B into its scratchpad.
Tensor product(const Tensor& a, const Tensor& bt) {
  Tensor c = zeros({a.size(0), bt.size(0)});
  cpu::GemmArgs g;
  g.m = a.size(0), g.n = bt.size(0), g.k = a.size(1);
  g.sa[0] = 0, g.sa[1] = a.size(1), g.sa[2] = 1;
  g.sb[0] = 0, g.sb[1] = 1, g.sb[2] = bt.size(1);
  g.sc[0] = 0, g.sc[1] = bt.size(0), g.sc[2] = 1;
  g.a = a.raw_data(), g.b = bt.raw_data(), g.c = c.raw_data();
  cpu::gemm(g);
  return c;
}

TEST(ConcurrentGemm, ThreadsSharingAPrimitiveGetTheirOwnResults) {
  constexpr int kThreads = 4;
  std::vector<Tensor> as, bs, want(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    as.push_back(ops::randn({16, 32}));
    bs.push_back(ops::randn({16, 32}));
    want[t] = product(as[t], bs[t]);
  }
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      for (int rep = 0; rep < 200; ++rep)
        {
          Tensor c = product(as[t], bs[t]);
          if (std::memcmp(c.raw_data(), want[t].raw_data(), c.nbytes()) != 0) ++bad[t];
        }
    });
  for (auto& th : pool) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

// The bug this guards against showed here: a GPT's attention over views of one
// qkv tensor gave different outputs on repeated calls at two threads.
TEST(ConcurrentGemm, AttentionIsDeterministicAcrossCalls) {
  int prev = get_num_threads();
  set_num_threads(2);
  NoGradGuard ng;
  Tensor qkv = ops::randn({2, 16, 192}), w = ops::randn({64, 64});
  auto run = [&] {
    TensorList p = ops::split(qkv, 64, 2);
    auto heads = [](const Tensor& t) { return t.view({2, 16, 2, 32}).transpose(1, 2); };
    Tensor y = ops::scaled_dot_product_attention(heads(p[0]), heads(p[1]), heads(p[2]), Tensor(), 0.0, true);
    ops::linear(y.transpose(1, 2).reshape({2, 16, 64}), w);  // other products between the calls
    return y.clone();
  };
  Tensor first = run();
  for (int rep = 0; rep < 8; ++rep) EXPECT_CLOSE(run(), first, 0, 0) << "call " << rep;
  set_num_threads(prev);
}

}  // namespace
}  // namespace tessera
