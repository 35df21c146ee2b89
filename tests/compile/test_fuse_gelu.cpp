// GELU fusion: GELU written out op by op (erf and tanh forms, the orders
// exporters write) becomes one gelu node with the same values, then fuses
// into the linear layer before it; near misses stay as they are.
#include <cmath>

#include "tessera/compile/compile.h"
#include "tessera/compile/model.h"
#include "tessera/compile/onnx.h"
#include "tessera/nn/zoo/zoo.h"
#include "compile/graph_test_util.h"
#include "test_util.h"

namespace tessera {
namespace {

using namespace compile;
using namespace ops;
using testing::count_op;

// Captures fn on x, optimizes it, lets `check` look at the graph, and checks
// the graph's values against eager fn.
void optimized_and_checked(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                           const std::function<void(const Graph&)>& check) {
  CaptureOptions co;
  co.dynamic = {{0, 0, "N"}};
  Graph g = capture([&](const TensorList& in) { return TensorList{fn(in[0])}; }, {x}, {}, co);
  optimize(g);
  check(g);
  Executable exe(std::move(g));
  Tensor other = randn({5, x.size(1)});
  for (const Tensor& in : {x, other}) EXPECT_CLOSE(exe.run({in})[0], fn(in), 1e-5, 1e-6);
}

TEST(FuseGelu, ErfFormsBecomeOneGelu) {
  manual_seed(1);
  const Tensor x = randn({3, 16});
  // Tessera's export: 0.5 * (x * (erf(x * 1/sqrt2) + 1)).
  auto ours = [](const Tensor& v) { return mul(mul(v, add(erf(mul(v, M_SQRT1_2)), 1.0)), 0.5); };
  // PyTorch's: (x * 0.5) * (1 + erf(x / sqrt2)), and the product the other way round.
  auto torch = [](const Tensor& v) { return mul(mul(v, 0.5), add(erf(div(v, M_SQRT2)), 1.0)); };
  auto flipped = [](const Tensor& v) { return mul(add(erf(div(v, M_SQRT2)), 1.0), mul(v, 0.5)); };
  for (const auto& fn : {std::function<Tensor(const Tensor&)>(ours), std::function<Tensor(const Tensor&)>(torch),
                         std::function<Tensor(const Tensor&)>(flipped)}) {
    optimized_and_checked(fn, x, [](const Graph& g) {
      EXPECT_EQ(count_op(g, "erf"), 0) << dump(g);
      EXPECT_EQ(count_op(g, "fused_elementwise") + count_op(g, "gelu"), 1) << dump(g);
    });
  }
  // Through gelu itself, before fuse-elementwise would take it.
  CaptureOptions co;
  Graph g = capture([&](const TensorList& in) { return TensorList{ours(in[0])}; }, {x}, {}, co);
  EXPECT_EQ(fuse_gelu(g), 1);
  EXPECT_EQ(count_op(g, "gelu"), 1) << dump(g);
  for (const Node* n : g.nodes())
    if (n->op_name() == "gelu") EXPECT_EQ(n->attrs.s("approximate"), "none");
}

TEST(FuseGelu, TanhFormBecomesGeluTanh) {
  manual_seed(2);
  const Tensor x = randn({4, 8});
  const double c = std::sqrt(2.0 / M_PI);
  auto cubed = [&](const Tensor& v) {  // Tessera's export: (x * x) * x
    return mul(mul(add(tanh(mul(add(v, mul(mul(mul(v, v), v), 0.044715)), c)), 1.0), v), 0.5);
  };
  auto powed = [&](const Tensor& v) { return mul(mul(v, 0.5), add(tanh(mul(c, add(v, mul(0.044715, pow(v, 3.0))))), 1.0)); };
  for (const auto& fn : {std::function<Tensor(const Tensor&)>(cubed), std::function<Tensor(const Tensor&)>(powed)}) {
    CaptureOptions co;
    Graph g = capture([&](const TensorList& in) { return TensorList{fn(in[0])}; }, {x}, {}, co);
    EXPECT_EQ(fuse_gelu(g), 1) << dump(g);
    ASSERT_EQ(count_op(g, "gelu"), 1) << dump(g);
    EXPECT_EQ(count_op(g, "tanh"), 0) << dump(g);
    for (const Node* n : g.nodes())
      if (n->op_name() == "gelu") EXPECT_EQ(n->attrs.s("approximate"), "tanh");
    Executable exe(std::move(g));
    EXPECT_CLOSE(exe.run({x})[0], fn(x), 1e-5, 1e-6);
  }
}

TEST(FuseGelu, NearMissesStay) {
  manual_seed(3);
  const Tensor x = randn({3, 16});
  CaptureOptions co;
  // A different constant (1/2 instead of 1/sqrt 2), x replaced by another
  // value in the product, and an intermediate read twice.
  auto wrong_constant = [](const Tensor& v) { return mul(mul(v, add(erf(mul(v, 0.5)), 1.0)), 0.5); };
  auto other_x = [](const Tensor& v) { return mul(mul(exp(v), add(erf(mul(v, M_SQRT1_2)), 1.0)), 0.5); };
  for (const auto& fn : {std::function<Tensor(const Tensor&)>(wrong_constant), std::function<Tensor(const Tensor&)>(other_x)}) {
    Graph g = capture([&](const TensorList& in) { return TensorList{fn(in[0])}; }, {x}, {}, co);
    EXPECT_EQ(fuse_gelu(g), 0) << dump(g);
  }
  Graph g = capture([&](const TensorList& in) {
    Tensor e = add(erf(mul(in[0], M_SQRT1_2)), 1.0);
    return TensorList{mul(mul(in[0], e), 0.5), e};
  }, {x}, {}, co);
  EXPECT_EQ(fuse_gelu(g), 0) << dump(g);
}

// The GPT's MLP comes back from ONNX as linear + one fused GELU epilogue:
// no erf left, no separate elementwise pass.
TEST(FuseGelu, ExportedGptGetsItsGeluEpiloguesBack) {
  testing::ExportedGpt e = testing::exported_small_gpt(5);
  NoGradGuard ng;
  auto& gpt = e.gpt;
  Model& m = e.imported;
  const Graph& imported = m.graph();
  EXPECT_EQ(count_op(imported, "erf"), 0) << dump(imported);
  EXPECT_EQ(count_op(imported, "fused_elementwise"), 0) << dump(imported);
  int gelu_epilogues = 0;
  for (const Node* n : imported.nodes())
    gelu_epilogues += n->op_name() == "fused_linear" && n->attrs.s("activation") == "gelu";
  EXPECT_EQ(gelu_epilogues, 2) << dump(imported);
  Tensor ids = randint(0, 16, {3, 9});
  EXPECT_CLOSE(m.run({ids})[0], (*gpt)(ids), 1e-4, 1e-5);
}

}  // namespace
}  // namespace tessera
