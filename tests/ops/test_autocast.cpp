// Autocast: which ops run in 16 bits, which in f32, the weight-cast cache, and
// that the table, the ops and docs/amp.md agree.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "tessera/ops/autocast.h"
#include "tessera/ops/ops.h"
#include "tessera/ops/op_table.h"
#include "test_util.h"

using namespace tessera;
using namespace tessera::ops;

namespace {
std::string read(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

class Autocast : public ::testing::TestWithParam<DType> {};

TEST_P(Autocast, ProductsRunLowAndGradientsReachF32Weights) {
  const DType low = GetParam();
  manual_seed(0);
  Tensor x = randn({8, 16});
  Tensor w = mul(randn({32, 16}), 0.25).requires_grad_();
  Tensor b = zeros({32}).requires_grad_();
  Tensor ref = linear(x, w.detach(), b.detach());
  Tensor y;
  {
    autocast::Guard amp(low);
    y = linear(x, w, b);
    EXPECT_EQ(y.dtype(), low);
    EXPECT_EQ(matmul(x, w.t()).dtype(), low);
    EXPECT_EQ(bmm(x.unsqueeze(0), w.t().unsqueeze(0)).dtype(), low);
    EXPECT_EQ(matmul(x.to(DType::F64), w.detach().t().to(DType::F64)).dtype(), DType::F64);  // f64 untouched
  }
  EXPECT_TRUE(tessera::testing::all_close(y.to(DType::F32), ref, 2e-2, 2e-2));
  sum(y.to(DType::F32)).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::F32);
  EXPECT_EQ(b.grad().dtype(), DType::F32);
  // d sum(x w^T) / dw = column sums of x, per row of w.
  Tensor expect = sum(x, {0}).unsqueeze(0).expand({32, 16});
  EXPECT_TRUE(tessera::testing::all_close(w.grad(), expect, 3e-2, 3e-2));
}

TEST_P(Autocast, ConvAndAttentionRunLow) {
  const DType low = GetParam();
  manual_seed(1);
  Tensor x = randn({2, 3, 8, 8});
  Tensor w = mul(randn({4, 3, 3, 3}), 0.2);
  Tensor q = randn({2, 2, 5, 8}), k = randn({2, 2, 5, 8}), v = randn({2, 2, 5, 8});
  Tensor conv_ref = conv2d(x, w, Tensor(), {.padding = {1, 1}});
  Tensor att_ref = scaled_dot_product_attention(q, k, v);
  autocast::Guard amp(low);
  Tensor c = conv2d(x, w, Tensor(), {.padding = {1, 1}});
  EXPECT_EQ(c.dtype(), low);
  EXPECT_TRUE(tessera::testing::all_close(c.to(DType::F32), conv_ref, 3e-2, 3e-2));
  Tensor a = scaled_dot_product_attention(q, k, v);
  EXPECT_EQ(a.dtype(), low);
  EXPECT_TRUE(tessera::testing::all_close(a.to(DType::F32), att_ref, 3e-2, 3e-2));
}

TEST_P(Autocast, SensitiveOpsRunInF32) {
  const DType low = GetParam();
  Tensor h = randn({4, 10}).to(low);
  Tensor target = randint(0, 10, {4});
  autocast::Guard amp(low);
  EXPECT_EQ(softmax(h, -1).dtype(), DType::F32);
  EXPECT_EQ(log_softmax(h, -1).dtype(), DType::F32);
  EXPECT_EQ(cross_entropy(h, target).dtype(), DType::F32);
  EXPECT_EQ(layer_norm(h, {10}).dtype(), DType::F32);
  EXPECT_EQ(sum(h).dtype(), DType::F32);
  EXPECT_EQ(mean(h).dtype(), DType::F32);
  EXPECT_EQ(exp(h).dtype(), DType::F32);
  EXPECT_EQ(log(abs(h)).dtype(), DType::F32);
  EXPECT_EQ(mse_loss(h, h).dtype(), DType::F32);
  // Ops outside the table keep their input's dtype.
  EXPECT_EQ(relu(h).dtype(), low);
  EXPECT_EQ(add(h, h).dtype(), low);
  // cat promotes to the widest input.
  EXPECT_EQ(cat({h, randn({4, 10})}, 0).dtype(), DType::F32);
}

INSTANTIATE_TEST_SUITE_P(LowPrecision, Autocast, ::testing::Values(DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(AutocastCache, WeightCastOncePerScope) {
  Tensor w = randn({8, 8}).requires_grad_();
  Tensor x = randn({2, 8});
  int64_t before = autocast::cast_count();
  {
    autocast::Guard amp(DType::BF16);
    linear(x, w);
    linear(x, w);
    matmul(x, w);
    EXPECT_EQ(autocast::cast_count() - before, 1);
    {
      autocast::Guard inner(DType::BF16);  // nested scopes share the cache
      linear(x, w);
      EXPECT_EQ(autocast::cast_count() - before, 1);
    }
    {
      NoGradGuard no_grad;
      w.add_(1.0);  // the weight changed: its copy is stale
    }
    linear(x, w);
    EXPECT_EQ(autocast::cast_count() - before, 2);
  }
  {
    autocast::Guard amp(DType::BF16);  // a new scope casts again
    linear(x, w);
    EXPECT_EQ(autocast::cast_count() - before, 3);
  }
  // Activations (no grad) are not cached.
  autocast::Guard amp(DType::BF16);
  linear(x, randn({8, 8}));
  EXPECT_EQ(autocast::cast_count() - before, 3);
}

TEST(AutocastCache, DisabledInsideAndBadDtype) {
  Tensor x = randn({2, 8}), w = randn({8, 8});
  {
    autocast::Guard amp(DType::BF16);
    EXPECT_TRUE(autocast::enabled());
    autocast::Guard off(DType::BF16, false);
    EXPECT_FALSE(autocast::enabled());
    EXPECT_EQ(matmul(x, w).dtype(), DType::F32);
  }
  EXPECT_FALSE(autocast::enabled());
  try {
    autocast::Guard amp(DType::F64);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dtype must be bf16 or f16, got f64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(autocast::Guard(DType::I32), Error);
  EXPECT_FALSE(autocast::enabled());
}

// Every op with an autocast policy in ops.def calls TS_AUTOCAST (and no other
// op does), and docs/amp.md lists every one under its policy.
TEST(AutocastTable, OpsAndDocsAgree) {
  std::filesystem::path root = TESSERA_SOURCE_DIR;
  std::string docs = read(root / "docs/amp.md");
  std::string sources;
  for (auto& f : std::filesystem::directory_iterator(root / "src/ops"))
    if (f.path().extension() == ".cpp") sources += read(f.path());
  int n = 0;
  for (int i = 0; i < ops::op_count(); ++i) {
    const ops::OpEntry& e = ops::op_table()[i];
    const std::string op(e.name);
    const bool calls = sources.find("TS_AUTOCAST(" + op + ",") != std::string::npos;
    EXPECT_EQ(calls, e.amp != autocast::Policy::kNone) << op << (calls ? " calls TS_AUTOCAST but has no policy in ops.def"
                                                                      : " has a policy in ops.def but no TS_AUTOCAST");
    if (e.amp == autocast::Policy::kNone) continue;
    EXPECT_NE(docs.find("`" + op + "`"), std::string::npos) << op << " is missing from docs/amp.md";
    ++n;
  }
  EXPECT_GT(n, 40);
}
