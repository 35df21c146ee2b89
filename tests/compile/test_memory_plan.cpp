// Static memory planning: values share an arena by liveness, outputs match the
// unplanned run, and the measured peak is checked against the plan.
#include "tessera/compile/compile.h"
#include "tessera/core/allocator.h"
#include "tessera/nn/zoo/zoo.h"
#include "test_util.h"

namespace tessera {
namespace {

using namespace compile;
namespace zoo = nn::zoo;

Graph traced(nn::Module& m, const Tensor& x, std::vector<DynamicDim> dyn = {}) {
  m.eval();
  CaptureOptions o;
  o.dynamic = std::move(dyn);
  NamedTensors ps = m.named_parameters();
  for (auto& b : m.named_buffers()) ps.push_back(b);
  Graph g = capture([&](const TensorList& in) { return TensorList{m(in[0])}; }, {x}, ps, o);
  optimize(g);
  return g;
}

TEST(MemoryPlan, ResNetReusesTheArenaAndMatchesUnplanned) {
  manual_seed(21);
  zoo::ResNetConfig c;
  c.widths = {8, 16, 16, 32};
  zoo::ResNet net(c);
  NoGradGuard ng;
  Tensor x = ops::randn({2, 3, 32, 32});
  Graph g = traced(net, x, {{0, 0, "N"}});
  Executable planned(g.clone(), true), plain(std::move(g), false);
  for (int n : {2, 5}) {
    Tensor xi = ops::randn({n, 3, 32, 32});
    EXPECT_CLOSE(planned.run({xi})[0], plain.run({xi})[0], 0, 0);
    auto plan = planned.memory_plan({n});
    EXPECT_GT(plan->planned_values, 10);
    // Each block's tail convolution writes its output over its shortcut.
    EXPECT_EQ(plan->in_place_values, 8);
    // Liveness reuse: the arena is a fraction of the values added up.
    EXPECT_LT(plan->arena_bytes * 2, plan->planned_bytes) << plan->arena_bytes << " of " << plan->planned_bytes;
  }
  EXPECT_EQ(planned.alias_copies(), 0);
  // Measured against planned: the run's peak holds the arena, plus what ops
  // allocate outside the plan (their scratch, the output).
  Tensor xi = ops::randn({4, 3, 32, 32});
  planned.run({xi});  // warm the allocator's cache; the executable keeps the arena
  auto plan = planned.memory_plan({4});
  int64_t before = memory_allocated() - plan->arena_bytes;
  reset_peak_memory();
  Tensor y = planned.run({xi})[0];
  int64_t measured = max_memory_allocated() - before;
  std::printf("[MemoryPlan] ResNet-18 (widths 8-32), batch 4: arena %lld B planned for %lld B of values; measured "
              "peak %lld B\n", static_cast<long long>(plan->arena_bytes), static_cast<long long>(plan->planned_bytes),
              static_cast<long long>(measured));
  EXPECT_GE(measured, plan->arena_bytes);
}

TEST(MemoryPlan, GptWithViewsNeedsNoCopies) {
  manual_seed(22);
  zoo::GPTConfig c;
  c.vocab_size = 16, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 8;
  zoo::GPT gpt(c);
  NoGradGuard ng;
  Graph g = traced(gpt, ops::randint(0, 16, {2, 5}), {{0, 0, "B"}, {0, 1, "T"}});
  Executable planned(g.clone(), true), plain(std::move(g), false);
  for (auto [b, t] : {std::pair{2, 5}, {3, 11}}) {
    Tensor ids = ops::randint(0, 16, {b, t});
    EXPECT_CLOSE(planned.run({ids})[0], plain.run({ids})[0], 0, 0);
  }
  EXPECT_EQ(planned.alias_copies(), 0);
}

TEST(MemoryPlan, AResidualIsOverwrittenOnlyWhenNothingElseNeedsIt) {
  // fused_conv2d's output may take its residual's place when the residual
  // dies there; not when a later node or another operand still reads it.
  Tensor w = ops::randn({8, 8, 3, 3}), b = ops::randn({8});
  ops::Conv2dOptions o;
  o.padding = {1, 1};
  auto fn = [&](const TensorList& in) {
    Tensor r1 = ops::exp(in[0]);                                   // dies at c1: in place
    Tensor c1 = ops::fused_conv2d(in[0], w, b, r1, o, "relu");
    Tensor r2 = ops::sin(c1);                                      // read again below
    Tensor c2 = ops::fused_conv2d(c1, w, b, r2, o, "none");
    Tensor c3 = ops::fused_conv2d(c2, w, Tensor(), c2, o, "none");  // its own input
    return TensorList{ops::add(c3, r2)};
  };
  Tensor x = ops::randn({2, 8, 6, 6});
  Graph g = capture(fn, {x});
  Executable planned(g.clone(), true), plain(std::move(g), false);
  EXPECT_CLOSE(planned.run({x})[0], plain.run({x})[0], 0, 0);
  EXPECT_CLOSE(planned.run({x})[0], fn({x})[0], 1e-5, 1e-5);
  EXPECT_EQ(planned.memory_plan({})->in_place_values, 1);
}

TEST(MemoryPlan, AnOpReturningItsInputKeepsThatMemoryAlive) {
  // dropout at inference returns its input itself: a's place must not be
  // reused (by c) while b, which is a, is still needed. The graph is not
  // optimized, so the dropout node stays.
  auto fn = [](const TensorList& in) {
    Tensor a = ops::exp(in[0]);
    Tensor b = ops::dropout(a, 0.5, false);  // returns `a` itself
    Tensor c = ops::mul(in[0], 3.0);          // could reuse a's place if a were dead
    return TensorList{ops::add(b, c)};
  };
  Graph g = capture(fn, {ops::randn({64})});
  Executable planned(std::move(g), true);
  Tensor x = ops::randn({64});
  EXPECT_CLOSE(planned.run({x})[0], fn({x})[0], 0, 0);
}

}  // namespace
}  // namespace tessera
