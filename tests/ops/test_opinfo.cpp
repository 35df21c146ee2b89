// Table-driven gradient tests (in the spirit of PyTorch's OpInfo): one row per
// differentiable op gives the function, input shapes and domain; each row is
// checked against f64 central differences on contiguous, transposed, strided
// and expanded inputs, and second derivatives on contiguous ones.
#include <cmath>

#include "tessera/compile/capture.h"
#include "tessera/compile/executor.h"
#include "test_util.h"

namespace tessera {
namespace {

using namespace ops;
using testing::gradcheck;
using testing::gradgradcheck;
using testing::rand_f64;

struct OpInfo {
  std::string name;
  testing::Fn fn;
  std::vector<std::vector<Shape>> shapes;
  double lo = -1, hi = 1;
  bool gradgrad = true;
  bool layouts = true;  // also try non-contiguous inputs
};

// Positive inputs away from zero for log/sqrt-like ops.
constexpr double kPos = 0.5, kPosHi = 2.0;

std::vector<OpInfo> op_table() {
  using S = std::vector<Shape>;
  std::vector<std::vector<Shape>> u = {{Shape{3, 4}}, {Shape{2, 3, 2}}, {Shape{}}, {Shape{0, 3}}};
  std::vector<std::vector<Shape>> b = {{Shape{3, 4}, Shape{3, 4}}, {Shape{3, 1}, Shape{1, 4}}, {Shape{2, 3}, Shape{}},
                                       {Shape{4}, Shape{2, 4}}, {Shape{0, 2}, Shape{2}}};
  auto U = [&](std::string n, std::function<Tensor(const Tensor&)> f, double lo = -1, double hi = 1, bool gg = true) {
    return OpInfo{n, [f](const TensorList& t) { return f(t[0]); }, u, lo, hi, gg};
  };
  auto B = [&](std::string n, std::function<Tensor(const Tensor&, const Tensor&)> f, double lo = -1, double hi = 1) {
    return OpInfo{n, [f](const TensorList& t) { return f(t[0], t[1]); }, b, lo, hi};
  };
  std::vector<OpInfo> rows = {
      U("neg", [](auto& x) { return neg(x); }),
      U("abs", [](auto& x) { return abs(x); }),
      U("exp", [](auto& x) { return exp(x); }),
      U("exp2", [](auto& x) { return exp2(x); }),
      U("log", [](auto& x) { return log(x); }, kPos, kPosHi),
      U("log2", [](auto& x) { return log2(x); }, kPos, kPosHi),
      U("log1p", [](auto& x) { return log1p(x); }, kPos, kPosHi),
      U("expm1", [](auto& x) { return expm1(x); }),
      U("sqrt", [](auto& x) { return sqrt(x); }, kPos, kPosHi),
      U("rsqrt", [](auto& x) { return rsqrt(x); }, kPos, kPosHi),
      U("square", [](auto& x) { return square(x); }),
      U("sin", [](auto& x) { return sin(x); }),
      U("cos", [](auto& x) { return cos(x); }),
      U("tan", [](auto& x) { return tan(x); }),
      U("tanh", [](auto& x) { return tanh(x); }),
      U("sigmoid", [](auto& x) { return sigmoid(x); }),
      U("relu", [](auto& x) { return relu(x); }),
      U("leaky_relu", [](auto& x) { return leaky_relu(x, 0.2); }),
      U("elu", [](auto& x) { return elu(x, 1.5); }),
      U("gelu", [](auto& x) { return gelu(x); }),
      U("gelu_tanh", [](auto& x) { return gelu(x, "tanh"); }),
      U("silu", [](auto& x) { return silu(x); }),
      U("mish", [](auto& x) { return mish(x); }),
      U("softplus", [](auto& x) { return softplus(x, 2.0, 1.0); }, -2, 2),
      U("hardtanh", [](auto& x) { return hardtanh(x, -0.5, 0.5); }),
      U("clamp", [](auto& x) { return clamp(x, -0.3, 0.4); }),
      U("reciprocal", [](auto& x) { return reciprocal(x); }, kPos, kPosHi),
      U("erf", [](auto& x) { return erf(x); }),
      U("pow_scalar", [](auto& x) { return pow(x, 3); }),
      U("pow_scalar_frac", [](auto& x) { return pow(x, 2.5); }, kPos, kPosHi),
      U("rpow", [](auto& x) { return pow(2.5, x); }),
      U("nan_to_num", [](auto& x) { return nan_to_num(x); }),
      U("sum_all", [](auto& x) { return sum(x); }),
      U("sum_dim", [](auto& x) { return x.dim() ? sum(x, {-1}, true) : sum(x); }),
      U("mean", [](auto& x) { return x.numel() ? mean(x, {0}) : sum(x); }),
      U("prod", [](auto& x) { return x.dim() ? prod(x, {0}) : prod(x); }),
      U("amax", [](auto& x) { return x.dim() && x.numel() ? amax(x, {-1}) : sum(x); }),
      U("amin", [](auto& x) { return x.dim() && x.numel() ? amin(x, {0}, true) : sum(x); }),
      U("max_dim", [](auto& x) { return x.numel() ? std::get<0>(max(x, -1)) : sum(x); }),
      U("var", [](auto& x) { return x.numel() > 1 ? var(x, {-1}) : sum(x); }),
      U("std", [](auto& x) { return x.numel() > 1 ? ops::std(x) : sum(x); }),
      U("logsumexp", [](auto& x) { return logsumexp(x, {-1}); }),
      U("norm2", [](auto& x) { return norm(x); }),
      U("norm1", [](auto& x) { return norm(x, 1, {-1}); }),
      U("norm_inf", [](auto& x) { return x.numel() ? norm(x, INFINITY) : sum(x); }),
      U("cumsum", [](auto& x) { return cumsum(x, -1); }),
      U("cumprod", [](auto& x) { return cumprod(x, -1); }, -1, 1, false),
      U("softmax", [](auto& x) { return softmax(x, -1); }),
      U("log_softmax", [](auto& x) { return log_softmax(x, 0); }),
      U("flip", [](auto& x) { return flip(x, {0}); }),
      U("clone", [](auto& x) { return x.clone(); }),
      B("add", [](auto& a, auto& b) { return add(a, b, 2.0); }),
      B("sub", [](auto& a, auto& b) { return sub(a, b); }),
      B("mul", [](auto& a, auto& b) { return mul(a, b); }),
      B("div", [](auto& a, auto& b) { return div(a, b); }, kPos, kPosHi),
      B("pow", [](auto& a, auto& b) { return pow(a, b); }, kPos, kPosHi),
      B("maximum", [](auto& a, auto& b) { return maximum(a, b); }),
      B("minimum", [](auto& a, auto& b) { return minimum(a, b); }),
      B("atan2", [](auto& a, auto& b) { return atan2(a, b); }, kPos, kPosHi),
      B("remainder", [](auto& a, auto& b) { return remainder(a, add(b, 3.0)); }, kPos, kPosHi),
      B("where", [](auto& a, auto& b) { return where(gt(a, 0), a, b); }),
      B("lerp", [](auto& a, auto& b) { return lerp(a, b, 0.3); }),
      B("addcmul", [](auto& a, auto& b) { return addcmul(a, b, b, 0.5); }),
      B("addcdiv", [](auto& a, auto& b) { return addcdiv(a, a, add(b, 3.0), 0.5); }),
  };
  auto add_row = [&](std::string n, testing::Fn f, std::vector<std::vector<Shape>> shapes, double lo = -1, double hi = 1,
                     bool gg = true, bool layouts = true) {
    rows.push_back(OpInfo{n, f, shapes, lo, hi, gg, layouts});
  };
  add_row("matmul", [](auto& t) { return matmul(t[0], t[1]); },
          {{S{Shape{3, 4}, Shape{4, 2}}}, {S{Shape{2, 3, 4}, Shape{4, 5}}}, {S{Shape{4}, Shape{4, 3}}},
           {S{Shape{3, 4}, Shape{4}}}, {S{Shape{4}, Shape{4}}}, {S{Shape{2, 1, 3, 4}, Shape{3, 4, 2}}}, {S{Shape{0, 3}, Shape{3, 2}}}});
  add_row("linear", [](auto& t) { return linear(t[0], t[1], t[2]); },
          {{S{Shape{3, 4}, Shape{5, 4}, Shape{5}}}, {S{Shape{2, 3, 4}, Shape{2, 4}, Shape{2}}}});
  add_row("einsum_bmm", [](auto& t) { return einsum("bij,bjk->bik", {t[0], t[1]}); },
          {{S{Shape{2, 3, 4}, Shape{2, 4, 2}}}});
  add_row("einsum_trace", [](auto& t) { return einsum("ii", {t[0]}); }, {{S{Shape{3, 3}}}}, -1, 1, true, false);
  add_row("einsum_outer", [](auto& t) { return einsum("i,j->ij", {t[0], t[1]}); }, {{S{Shape{3}, Shape{4}}}});
  add_row("outer", [](auto& t) { return outer(t[0], t[1]); }, {{S{Shape{3}, Shape{2}}}});
  add_row("addmm", [](auto& t) { return addmm(t[0], t[1], t[2], 0.5, 2.0); }, {{S{Shape{3, 2}, Shape{3, 4}, Shape{4, 2}}}});
  add_row("cat", [](auto& t) { return cat({t[0], t[1]}, 1); }, {{S{Shape{2, 3}, Shape{2, 1}}}});
  add_row("stack", [](auto& t) { return stack({t[0], t[1]}, 0); }, {{S{Shape{2, 3}, Shape{2, 3}}}});
  add_row("split", [](auto& t) { return mul(split(t[0], 2, 1)[1], 2.0); }, {{S{Shape{2, 5}}}});
  add_row("pad_constant", [](auto& t) { return pad(t[0], {1, 2, 0, 1}, "constant", 0.5); }, {{S{Shape{2, 3}}}});
  add_row("pad_reflect", [](auto& t) { return pad(t[0], {2, 1}, "reflect"); }, {{S{Shape{2, 4}}}});
  add_row("pad_replicate", [](auto& t) { return pad(t[0], {1, 2, 2, 0}, "replicate"); }, {{S{Shape{2, 3}}}});
  add_row("roll", [](auto& t) { return roll(t[0], {1, -1}, {0, 1}); }, {{S{Shape{3, 4}}}});
  add_row("repeat", [](auto& t) { return repeat(t[0], {2, 1, 3}); }, {{S{Shape{2, 3}}}});
  add_row("tril", [](auto& t) { return tril(t[0], 1); }, {{S{Shape{3, 4}}}});
  add_row("triu", [](auto& t) { return triu(t[0], -1); }, {{S{Shape{4, 3}}}});
  add_row("gather", [](auto& t) { return gather(t[0], 1, tensor(std::vector<int64_t>{0, 2, 1, 1, 0, 0}, {3, 2})); },
          {{S{Shape{3, 4}}}});
  add_row("scatter", [](auto& t) { return scatter(t[0], 1, tensor(std::vector<int64_t>{0, 2, 1, 3}, {2, 2}), t[1]); },
          {{S{Shape{2, 4}, Shape{2, 2}}}});
  add_row("scatter_add", [](auto& t) { return scatter_add(t[0], 0, tensor(std::vector<int64_t>{0, 1, 0, 0, 1, 1}, {2, 3}), t[1]); },
          {{S{Shape{2, 3}, Shape{2, 3}}}});
  add_row("index_select", [](auto& t) { return index_select(t[0], 0, tensor(std::vector<int64_t>{2, 0, 2})); }, {{S{Shape{3, 2}}}});
  add_row("index_add", [](auto& t) { return index_add(t[0], 1, tensor(std::vector<int64_t>{1, 1}), t[1], 2.0); },
          {{S{Shape{2, 3}, Shape{2, 2}}}});
  add_row("masked_fill", [](auto& t) { return masked_fill(t[0], gt(t[0].detach(), 0), 0.25); }, {{S{Shape{3, 4}}}});
  add_row("masked_select", [](auto& t) { return masked_select(t[0], gt(t[0].detach(), 0)); }, {{S{Shape{3, 4}}}});
  add_row("topk", [](auto& t) { return std::get<0>(topk(t[0], 2, -1)); }, {{S{Shape{3, 5}}}});
  add_row("sort", [](auto& t) { return std::get<0>(sort(t[0], 0, true)); }, {{S{Shape{4, 3}}}});
  add_row("views", [](auto& t) {
    return t[0].reshape({3, 4}).t().unsqueeze(0).expand({2, 4, 3}).narrow(1, 1, 2).diagonal(0, 1, 2).squeeze();
  }, {{S{Shape{4, 3}}}}, -1, 1, true, false);
  add_row("layer_norm", [](auto& t) { return layer_norm(t[0], {4}, t[1], t[2], 1e-5); },
          {{S{Shape{3, 4}, Shape{4}, Shape{4}}}, {S{Shape{2, 2, 4}, Shape{4}, Shape{4}}}});
  add_row("rms_norm", [](auto& t) { return rms_norm(t[0], {4}, t[1], 1e-6); }, {{S{Shape{3, 4}, Shape{4}}}});
  add_row("group_norm", [](auto& t) { return group_norm(t[0], 2, t[1], t[2]); },
          {{S{Shape{2, 4, 3}, Shape{4}, Shape{4}}}}, -1, 1, true, false);
  add_row("batch_norm_train", [](auto& t) { return batch_norm(t[0], Tensor(), Tensor(), t[1], t[2], true); },
          {{S{Shape{4, 3, 2}, Shape{3}, Shape{3}}}}, -1, 1, true, false);
  add_row("conv2d", [](auto& t) {
    Conv2dOptions o;
    o.stride = {2, 1};
    o.padding = {1, 0};
    o.dilation = {1, 2};
    return conv2d(t[0], t[1], t[2], o);
  }, {{S{Shape{2, 2, 5, 6}, Shape{3, 2, 3, 2}, Shape{3}}}}, -1, 1, false, false);
  add_row("conv2d_groups_same", [](auto& t) {
    Conv2dOptions o;
    o.groups = 2;
    o.padding_same = true;
    return conv2d(t[0], t[1], Tensor(), o);
  }, {{S{Shape{1, 4, 4, 4}, Shape{2, 2, 2, 3}}}}, -1, 1, false, false);
  add_row("conv1d", [](auto& t) { return conv1d(t[0], t[1], t[2], 2, 1); }, {{S{Shape{2, 3, 7}, Shape{4, 3, 3}, Shape{4}}}},
          -1, 1, false, false);
  add_row("conv_transpose2d", [](auto& t) { return conv_transpose2d(t[0], t[1], t[2], {2, 2}, {1, 0}, {1, 0}); },
          {{S{Shape{1, 2, 3, 3}, Shape{2, 3, 3, 2}, Shape{3}}}}, -1, 1, false, false);
  add_row("max_pool2d", [](auto& t) { return max_pool2d(t[0], {2, 2}, {2, 1}, {1, 0}, {1, 1}, true); },
          {{S{Shape{1, 2, 5, 4}}}}, -1, 1, true, false);
  add_row("avg_pool2d", [](auto& t) { return avg_pool2d(t[0], {3, 2}, {2, 1}, {1, 1}, true, false); },
          {{S{Shape{1, 2, 5, 4}}}}, -1, 1, true, false);
  add_row("adaptive_avg_pool2d", [](auto& t) { return adaptive_avg_pool2d(t[0], {2, 3}); }, {{S{Shape{1, 2, 5, 4}}}});
  add_row("interpolate_bilinear", [](auto& t) { return interpolate(t[0], {5, 3}, {}, "bilinear"); }, {{S{Shape{1, 2, 3, 4}}}});
  add_row("interpolate_nearest", [](auto& t) { return interpolate(t[0], {}, {2.0}, "nearest"); }, {{S{Shape{1, 2, 3, 2}}}});
  add_row("cross_entropy", [](auto& t) {
    return cross_entropy(t[0], tensor(std::vector<int64_t>{1, 0, 3}), Tensor(), -100, "mean", 0.1);
  }, {{S{Shape{3, 4}}}});
  add_row("cross_entropy_weight_ignore", [](auto& t) {
    return cross_entropy(t[0], tensor(std::vector<int64_t>{1, -100, 3}), t[1], -100, "mean");
  }, {{S{Shape{3, 4}, Shape{4}}}}, 0.5, 1.5);
  add_row("cross_entropy_probs", [](auto& t) { return cross_entropy(t[0], softmax(t[1], 1)); }, {{S{Shape{3, 4}, Shape{3, 4}}}});
  add_row("nll_loss_sum", [](auto& t) { return nll_loss(t[0], tensor(std::vector<int64_t>{1, 0}), Tensor(), -100, "sum"); },
          {{S{Shape{2, 3}}}});
  add_row("mse_loss", [](auto& t) { return mse_loss(t[0], t[1]); }, {{S{Shape{3, 4}, Shape{3, 4}}}});
  add_row("l1_loss", [](auto& t) { return l1_loss(t[0], t[1], "sum"); }, {{S{Shape{3, 4}, Shape{3, 4}}}});
  add_row("smooth_l1_loss", [](auto& t) { return smooth_l1_loss(t[0], t[1], "mean", 0.5); }, {{S{Shape{3, 4}, Shape{3, 4}}}});
  add_row("bce", [](auto& t) { return binary_cross_entropy(t[0], t[1]); }, {{S{Shape{3, 4}, Shape{3, 4}}}}, 0.1, 0.9);
  add_row("bce_logits", [](auto& t) { return binary_cross_entropy_with_logits(t[0], t[1], Tensor(), "mean", t[2]); },
          {{S{Shape{3, 4}, Shape{3, 4}, Shape{4}}}});
  add_row("kl_div", [](auto& t) { return kl_div(t[0], t[1], "batchmean"); }, {{S{Shape{3, 4}, Shape{3, 4}}}}, 0.1, 0.9);
  add_row("embedding", [](auto& t) { return embedding(t[0], tensor(std::vector<int64_t>{1, 3, 1, 0}, {2, 2})); },
          {{S{Shape{4, 3}}}});
  add_row("sdpa", [](auto& t) { return scaled_dot_product_attention(t[0], t[1], t[2]); },
          {{S{Shape{2, 3, 4}, Shape{2, 5, 4}, Shape{2, 5, 3}}}});
  add_row("sdpa_causal", [](auto& t) { return scaled_dot_product_attention(t[0], t[1], t[2], Tensor(), 0, true); },
          {{S{Shape{1, 2, 70, 4}, Shape{1, 2, 70, 4}, Shape{1, 2, 70, 3}}}}, -1, 1, false, false);
  add_row("sdpa_mask", [](auto& t) {
    Tensor m = tensor(std::vector<double>{0, -1, 0.5, 0, -INFINITY, 0.2, 0, 0, 0, 0.3, -0.4, 0}, {3, 4}).to(DType::F64);
    return scaled_dot_product_attention(t[0], t[1], t[2], m, 0, false, 0.7);
  }, {{S{Shape{2, 3, 2}, Shape{2, 4, 2}, Shape{1, 4, 2}}}});
  // Communication on this process's world of one (the rows across ranks are
  // in tests/distributed_mpi/test_ddp.cpp): the rules that hold at any size.
  add_row("all_reduce", [](auto& t) { return all_reduce(t[0]); }, {{S{Shape{3, 4}}}, {S{Shape{}}}});
  add_row("all_gather_dim1", [](auto& t) { return all_gather(t[0], "world", 1); }, {{S{Shape{3, 4}}}, {S{Shape{2, 3, 2}}}});
  add_row("reduce_scatter_dim_last", [](auto& t) { return reduce_scatter(t[0], "world", -1); }, {{S{Shape{3, 4}}}});
  add_row("copy_to_group", [](auto& t) { return copy_to_group(t[0]); }, {{S{Shape{3, 4}}}});
  add_row("reduce_from_group", [](auto& t) { return reduce_from_group(t[0]); }, {{S{Shape{3, 4}}}});
  add_row("gather_from_group_dim1", [](auto& t) { return gather_from_group(t[0], "world", 1); }, {{S{Shape{3, 4}}}});
  add_row("scatter_to_group", [](auto& t) { return scatter_to_group(t[0]); }, {{S{Shape{3, 4}}}, {S{Shape{2, 3, 2}}}});
  return rows;
}

// Builds the op's view of a leaf in the requested layout.
enum class Layout { Contiguous, Transposed, Strided, Expanded };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Transposed: return "transposed";
    case Layout::Strided: return "strided";
    default: return "expanded";
  }
}
bool applies(Layout l, const Shape& s) {
  switch (l) {
    case Layout::Contiguous: return true;
    case Layout::Transposed: return s.size() >= 2;
    case Layout::Strided: return !s.empty() && s.back() > 0;
    case Layout::Expanded: return !s.empty() && s[0] > 1;
  }
  return false;
}
Shape leaf_shape(Layout l, Shape s) {
  if (l == Layout::Transposed) std::reverse(s.begin(), s.end());
  if (l == Layout::Strided) s.back() *= 2;
  if (l == Layout::Expanded) s[0] = 1;
  return s;
}
Tensor view_of(Layout l, const Tensor& leaf, const Shape& s) {
  if (l == Layout::Transposed) {
    Shape perm;
    for (int64_t i = leaf.dim() - 1; i >= 0; --i) perm.push_back(i);
    return leaf.permute(perm);
  }
  if (l == Layout::Strided) return leaf.slice(-1, 0, leaf.shape().back(), 2);
  if (l == Layout::Expanded) return leaf.expand(s);
  return leaf;
}

void PrintTo(const OpInfo& op, std::ostream* os) { *os << op.name; }

class OpInfoTest : public ::testing::TestWithParam<OpInfo> {};

TEST_P(OpInfoTest, GradcheckAllLayouts) {
  const OpInfo& op = GetParam();
  for (size_t si = 0; si < op.shapes.size(); ++si) {
    const auto& shapes = op.shapes[si];
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Expanded}) {
      if (l != Layout::Contiguous && !op.layouts) continue;
      // Apply the layout to the first input that supports it.
      int target = -1;
      for (size_t i = 0; i < shapes.size() && target < 0; ++i)
        if (applies(l, shapes[i])) target = static_cast<int>(i);
      if (target < 0) continue;
      TensorList leaves;
      for (size_t i = 0; i < shapes.size(); ++i) {
        Shape ls = static_cast<int>(i) == target ? leaf_shape(l, shapes[i]) : shapes[i];
        leaves.push_back(rand_f64(ls, op.lo, op.hi, 100 * si + i).requires_grad_());
      }
      auto fn = [&](const TensorList& in) {
        TensorList v = in;
        v[target] = view_of(l, in[target], shapes[target]);
        return op.fn(v);
      };
      SCOPED_TRACE(op.name + " shapes#" + std::to_string(si) + " " + layout_name(l));
      Tensor probe = fn(leaves);
      if (!probe.requires_grad()) continue;  // e.g. zero-size inputs
      EXPECT_TRUE(gradcheck(fn, leaves));
      if (op.gradgrad && l == Layout::Contiguous) EXPECT_TRUE(gradgradcheck(fn, leaves));
    }
  }
}

TEST_P(OpInfoTest, F32MatchesF64) {
  const OpInfo& op = GetParam();
  const auto& shapes = op.shapes[0];
  TensorList in64, in32;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor t = rand_f64(shapes[i], op.lo, op.hi, 50 + i);
    in64.push_back(t);
    in32.push_back(t.to(DType::F32));
  }
  Tensor r64 = op.fn(in64), r32 = op.fn(in32);
  if (r64.dtype() != DType::F64) GTEST_SKIP() << "op output is not floating";
  EXPECT_EQ(r32.dtype(), DType::F32);
  EXPECT_CLOSE(r32, r64, 1e-4, 1e-5);
}

// Every op row as a captured graph: the graph holds the op, and running it on
// new inputs gives what eager gives on them (nothing was frozen at trace time).
TEST_P(OpInfoTest, CapturedGraphMatchesEager) {
  const OpInfo& op = GetParam();
  for (size_t si = 0; si < op.shapes.size(); ++si) {
    const auto& shapes = op.shapes[si];
    TensorList example, fresh;
    for (size_t i = 0; i < shapes.size(); ++i) {
      example.push_back(rand_f64(shapes[i], op.lo, op.hi, 70 + i));
      fresh.push_back(rand_f64(shapes[i], op.lo, op.hi, 90 + i));
    }
    SCOPED_TRACE(op.name + " shapes#" + std::to_string(si));
    compile::Graph g = compile::capture([&](const TensorList& in) { return TensorList{op.fn(in)}; }, example);
    compile::verify(g);
    ASSERT_GE(g.num_nodes(), 1) << compile::dump(g);
    compile::Executable exe(std::move(g));
    EXPECT_CLOSE(exe.run(fresh)[0], op.fn(fresh), 0, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpInfoTest, ::testing::ValuesIn(op_table()),
                         [](const ::testing::TestParamInfo<OpInfo>& info) { return info.param.name; });

}  // namespace
}  // namespace tessera
