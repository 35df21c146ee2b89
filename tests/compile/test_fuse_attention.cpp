// Attention fusion: attention written out op by op becomes one
// scaled_dot_product_attention node with the same values, in the forms
// exporters write it, and stays as it is where the rewrite would change what
// the graph computes.
#include <cmath>
#include <limits>

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

const double kInf = std::numeric_limits<double>::infinity();

// Captures fn on `in`, runs the default pipeline, and checks the optimized
// graph against eager fn on `in` and on `other` (a different batch).
Graph optimized(const std::function<TensorList(const TensorList&)>& fn, const TensorList& in) {
  CaptureOptions co;
  co.dynamic = {{0, 0, "N"}, {1, 0, "N"}, {2, 0, "N"}};  // q, k, v share a dynamic batch
  Graph g = capture(fn, in, {}, co);
  optimize(g);
  return g;
}

const Node* only_attention(const Graph& g) {
  for (const Node* n : g.nodes())
    if (n->op_name() == "scaled_dot_product_attention") return n;
  return nullptr;
}

TEST(FuseAttention, CausalMaskScaleAndTransposedKeys) {
  manual_seed(1);
  const int64_t H = 3, L = 8, E = 16;
  auto fn = [&](const TensorList& in) {
    Tensor s = mul(matmul(in[0], transpose(in[1], -2, -1)), 0.25);
    Tensor causal = tril(full({L, L}, true, DType::Bool));
    return TensorList{matmul(softmax(where(causal, s, -kInf), -1), in[2])};
  };
  TensorList ex{randn({2, H, L, E}), randn({2, H, L, E}), randn({2, H, L, E})};
  Graph g = optimized(fn, ex);
  EXPECT_EQ(count_op(g, "scaled_dot_product_attention"), 1) << dump(g);
  EXPECT_EQ(count_op(g, "softmax") + count_op(g, "matmul") + count_op(g, "where"), 0) << dump(g);
  const Node* a = only_attention(g);
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->attrs.b("is_causal"));
  EXPECT_EQ(a->inputs[3], nullptr);  // the mask became is_causal
  EXPECT_DOUBLE_EQ(*a->attrs.opt_f("scale"), 0.25);
  Executable exe(std::move(g));
  TensorList other{randn({3, H, L, E}), randn({3, H, L, E}), randn({3, H, L, E})};
  for (const TensorList& x : {ex, other}) EXPECT_CLOSE(exe.run(x)[0], fn(x)[0], 1e-5, 1e-5);
}

TEST(FuseAttention, AdditiveMaskDivisorAndScaledQueries) {
  manual_seed(2);
  // Heads viewed out of [N, T, H, d] (as a projection's output is split),
  // keys permuted straight to [N, H, d, T], q divided before the product,
  // and an additive mask, as PyTorch's exporter writes multi-head attention.
  auto fn = [&](const TensorList& in) {
    Tensor q = permute(in[0], {0, 2, 1, 3}), kt = permute(in[1], {0, 2, 3, 1}), v = permute(in[2], {0, 2, 1, 3});
    Tensor s = add(matmul(div(q, 4.0), kt), in[3]);
    return TensorList{matmul(softmax(s, 3), v)};
  };
  TensorList ex{randn({2, 6, 2, 16}), randn({2, 5, 2, 16}), randn({2, 5, 2, 8}), randn({6, 5})};
  Graph g = optimized(fn, ex);
  const Node* a = only_attention(g);
  ASSERT_TRUE(a) << dump(g);
  EXPECT_FALSE(a->attrs.b("is_causal"));
  EXPECT_NE(a->inputs[3], nullptr);
  EXPECT_DOUBLE_EQ(*a->attrs.opt_f("scale"), 0.25);
  EXPECT_EQ(count_op(g, "softmax"), 0) << dump(g);
  Executable exe(std::move(g));
  TensorList other{randn({1, 6, 2, 16}), randn({1, 5, 2, 16}), randn({1, 5, 2, 8}), randn({6, 5})};
  for (const TensorList& x : {ex, other}) EXPECT_CLOSE(exe.run(x)[0], fn(x)[0], 1e-5, 1e-5);
}

TEST(FuseAttention, BooleanMaskOtherThanCausal) {
  manual_seed(3);
  // A padding mask (true = attend), not triangular: passed on as attn_mask.
  Tensor keep = gt(rand({1, 1, 6, 6}), 0.3).contiguous();
  for (int64_t i = 0; i < 6; ++i) keep.data_ptr<bool>()[i * 6 + i] = true;  // no row fully masked
  auto fn = [&](const TensorList& in) {
    Tensor s = mul(matmul(in[0], transpose(in[1], 2, 3)), 0.5);
    return TensorList{matmul(softmax(where(keep, s, -kInf), -1), in[2])};
  };
  TensorList ex{randn({2, 2, 6, 4}), randn({2, 2, 6, 4}), randn({2, 2, 6, 4})};
  Graph g = optimized(fn, ex);
  const Node* a = only_attention(g);
  ASSERT_TRUE(a) << dump(g);
  EXPECT_FALSE(a->attrs.b("is_causal"));
  EXPECT_NE(a->inputs[3], nullptr);
  EXPECT_CLOSE(Executable(std::move(g)).run(ex)[0], fn(ex)[0], 1e-5, 1e-5);
}

TEST(FuseAttention, LeavesWhatItCannotFuseAlone) {
  manual_seed(4);
  TensorList ex{randn({2, 2, 5, 4}), randn({2, 2, 5, 4}), randn({2, 2, 5, 4})};
  Tensor causal = tril(full({5, 5}, true, DType::Bool));
  auto scores = [](const TensorList& in) { return matmul(in[0], transpose(in[1], -2, -1)); };
  std::vector<std::pair<const char*, std::function<TensorList(const TensorList&)>>> cases = {
      // softmax over the queries, not the keys
      {"softmax dim", [&](const TensorList& in) { return TensorList{matmul(softmax(scores(in), 2), in[2])}; }},
      // the scores are an output too
      {"scores read twice",
       [&](const TensorList& in) {
         Tensor s = scores(in);
         return TensorList{matmul(softmax(s, -1), in[2]), s};
       }},
      // a finite fill: fully masked rows would differ
      {"finite fill",
       [&](const TensorList& in) {
         return TensorList{matmul(softmax(where(causal, scores(in), -1e9), -1), in[2])};
       }},
      // a scale that is an input, not a constant
      {"input scale",
       [&](const TensorList& in) { return TensorList{matmul(softmax(mul(scores(in), in[3]), -1), in[2])}; }},
  };
  for (auto& [what, fn] : cases) {
    TensorList in = ex;
    in.push_back(full({}, 0.5));
    Graph g = optimized(fn, in);
    EXPECT_EQ(count_op(g, "scaled_dot_product_attention"), 0) << what << "\n" << dump(g);
    TensorList got = Executable(std::move(g)).run(in), want = fn(in);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_CLOSE(got[i], want[i], 1e-5, 1e-5) << what;
  }
}

// A GPT exported to ONNX carries its attention as MatMul, Mul, Where,
// Softmax, MatMul; the imported graph runs the fused kernel again, causal,
// with a dynamic sequence length.
TEST(FuseAttention, ExportedGptRunsFusedAttentionAgain) {
  testing::ExportedGpt e = testing::exported_small_gpt(5);
  NoGradGuard ng;
  auto& gpt = e.gpt;
  Model& m = e.imported;
  const Graph& imported = m.graph();
  EXPECT_EQ(count_op(imported, "scaled_dot_product_attention"), 2) << dump(imported);
  EXPECT_EQ(count_op(imported, "softmax"), 0) << dump(imported);
  for (const Node* n : imported.nodes())
    if (n->op_name() == "scaled_dot_product_attention") EXPECT_TRUE(n->attrs.b("is_causal"));
  for (Shape s : {Shape{2, 5}, Shape{3, 9}}) {
    Tensor ids = randint(0, 16, s);
    EXPECT_CLOSE(m.run({ids})[0], (*gpt)(ids), 1e-4, 1e-5);
  }
}

}  // namespace
}  // namespace tessera
