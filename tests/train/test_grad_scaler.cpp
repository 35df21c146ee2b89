// GradScaler against PyTorch 1.13's GradScaler (tests/golden/grad_scaler.safetensors,
// from tests/golden/generate_amp.py): 14 steps of SGD with momentum on
// loss = sum(w * x_t), where some x_t hold inf/NaN or overflow once scaled.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/io/safetensors.h"
#include "tessera/ops/ops.h"
#include "tessera/train/grad_scaler.h"
#include "test_util.h"

using namespace tessera;

namespace {

// Same values, with NaN == NaN and inf == inf; finite ones to a relative 1e-6.
void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  Tensor g = got.to(DType::F64).contiguous(), w = want.to(DType::F64).contiguous();
  ASSERT_EQ(g.numel(), w.numel()) << what;
  for (int64_t i = 0; i < g.numel(); ++i) {
    double a = g.data_ptr<double>()[i], b = w.data_ptr<double>()[i];
    if (std::isnan(b)) EXPECT_TRUE(std::isnan(a)) << what << "[" << i << "]";
    else if (std::isinf(b)) EXPECT_EQ(a, b) << what << "[" << i << "]";
    else EXPECT_NEAR(a, b, 1e-6 * std::max(1.0, std::abs(b))) << what << "[" << i << "]";
  }
}

}  // namespace

TEST(GradScaler, MatchesPyTorchOnForcedOverflow) {
  auto f = io::SafetensorsFile::open(std::string(TESSERA_GOLDEN_DIR) + "/grad_scaler.safetensors");
  Tensor inputs = f.get("inputs"), scale_before = f.get("scale_before"), scale_after = f.get("scale_after");
  Tensor skipped = f.get("skipped"), tracker = f.get("growth_tracker"), weights = f.get("weights");
  Tensor unscaled = f.get("unscaled_grad");
  const int64_t n = inputs.size(0);
  ASSERT_EQ(n, 14);

  Tensor w = tensor({0.5, -1.0, 2.0, 0.25}).requires_grad_();
  optim::SGD opt({w}, {{"lr", 0.1}, {"momentum", 0.9}});
  train::GradScaler scaler({.init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 3});
  int64_t skips = 0;
  for (int64_t t = 0; t < n; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    EXPECT_EQ(scaler.get_scale(), scale_before[t].item<double>());
    opt.zero_grad();
    Tensor loss = ops::sum(ops::mul(w, inputs[t]));
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    expect_same(w.grad(), unscaled[t], "unscaled grad");
    optim::clip_grad_norm_({w}, 1.0);
    bool stepped = scaler.step(opt);
    EXPECT_EQ(!stepped, skipped[t].item<double>() == 1.0);
    scaler.update();
    skips += !stepped;
    EXPECT_EQ(scaler.get_scale(), scale_after[t].item<double>());
    EXPECT_EQ(scaler.growth_tracker(), static_cast<int32_t>(tracker[t].item<double>()));
    expect_same(w.detach(), weights[t], "weights");
  }
  EXPECT_EQ(scaler.skipped_steps(), skips);
  EXPECT_EQ(skips, 4);
}

TEST(GradScaler, StateRoundTripsAndMisuseIsAnError) {
  Tensor w = ones({2}).requires_grad_();
  optim::SGD opt({w}, {{"lr", 0.1}});
  train::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
  // step() without a scaled loss: the gradients would be unscaled wrongly.
  ops::sum(w).backward();
  try {
    scaler.step(opt);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no loss was scaled"), std::string::npos) << e.what();
  }
  EXPECT_THROW(scaler.update(), Error);  // no inf checks recorded
  opt.zero_grad();
  scaler.scale(ops::sum(w)).backward();
  scaler.unscale_(opt);
  EXPECT_THROW(scaler.unscale_(opt), Error);  // twice in one step
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_THROW(scaler.step(opt), Error);  // twice in one step
  scaler.update();
  EXPECT_EQ(scaler.growth_tracker(), 1);
  auto state = scaler.state_dict();
  EXPECT_EQ(state["scale"], 1024.0);
  EXPECT_EQ(state["_growth_tracker"], 1);
  train::GradScaler other;
  other.load_state_dict(state);
  EXPECT_EQ(other.get_scale(), 1024.0);
  EXPECT_EQ(other.growth_tracker(), 1);
  EXPECT_THROW(other.load_state_dict({{"scale", -1.0}}), Error);
  EXPECT_THROW(other.load_state_dict(nlohmann::json::array()), Error);
  EXPECT_THROW(train::GradScaler({.growth_factor = 0.5}), Error);
  // Disabled: everything passes through.
  train::GradScaler off({.enabled = false});
  Tensor l = ops::sum(w);
  EXPECT_EQ(off.scale(l).impl(), l.impl());
  EXPECT_EQ(off.get_scale(), 1.0);
}
