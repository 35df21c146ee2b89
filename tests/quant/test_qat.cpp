// Quantization-aware training: fake_quantize's values and gradients (straight
// through for x, LSQ for a learnable scale) against a direct f64 reference,
// prepare_qat's layers, a QAT model that learns, and convert_qat's int8 graph
// agreeing with the fake-quantized model it came from.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/autograd/engine.h"
#include "tessera/compile/model.h"
#include "tessera/nn/nn.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/optimizer.h"
#include "tessera/quant/qat.h"
#include "test_util.h"

using namespace tessera;

TEST(FakeQuantize, ValuesAndGradientsFollowTheDefinition) {
  // Per channel (axis 1) with a learnable scale, in f64: values, dx and
  // dscale against loops over the definition.
  Tensor x = tessera::testing::rand_f64({4, 3, 5}, -3.0, 3.0, 1).requires_grad_(true);
  Tensor s = tensor(std::vector<float>{0.02f, 0.05f, 0.01f}).requires_grad_(true);
  Tensor z = tensor(std::vector<float>{10.f, 0.f, 128.f});
  const int64_t qmin = 0, qmax = 255;
  Tensor y = ops::fake_quantize(x, s, z, 1, qmin, qmax);
  Tensor g = tessera::testing::rand_f64({4, 3, 5}, -1.0, 1.0, 2);
  autograd::backward({y}, {g});
  auto xv = x.detach().contiguous().to_vector<double>(), gv = g.contiguous().to_vector<double>();
  auto yv = y.detach().contiguous().to_vector<double>(), dx = x.grad().contiguous().to_vector<double>();
  auto ds = s.grad().to(DType::F64).to_vector<double>();
  std::vector<double> want_ds(3, 0.0);
  for (int64_t i = 0; i < 60; ++i) {
    const int64_t c = (i / 5) % 3;
    const double sc = s.to(DType::F64).to_vector<double>()[c], zp = z.to(DType::F64).to_vector<double>()[c];
    const double xs = xv[i] * (1.0 / static_cast<float>(sc)), r = std::nearbyint(xs), q = r + zp;
    const bool in = q >= qmin && q <= qmax;
    const double qc = std::clamp(q, double(qmin), double(qmax));
    EXPECT_NEAR(yv[i], (qc - zp) * sc, 1e-6) << i;
    EXPECT_EQ(dx[i], in ? gv[i] : 0.0) << i;
    want_ds[c] += gv[i] * (in ? r - xs : qc - zp);
  }
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(ds[c], want_ds[c] / std::sqrt(20.0 * qmax), 1e-4) << c;

  // Per tensor, with s8 codes: saturation at both ends.
  Tensor big = tensor(std::vector<float>{-10.f, -1.f, 0.26f, 10.f});
  auto v = ops::fake_quantize(big, full({1}, 0.5, DType::F32), zeros({1}, DType::F32), -1, -4, 3).to_vector<float>();
  EXPECT_EQ(v, (std::vector<float>{-2.f, -1.f, 0.5f, 1.5f}));
  auto err = [](const std::function<void()>& f) { return tessera::testing::error_of(f); };
  EXPECT_NE(err([&] { ops::fake_quantize(big, full({2}, 0.5, DType::F32), zeros({2}, DType::F32), 0, 0, 255); })
                .find("2 scales need axis 0"),
            std::string::npos);
  EXPECT_NE(err([&] { ops::fake_quantize(big, full({1}, 0.5, DType::F32), zeros({1}, DType::F32), 0, 0, 300); })
                .find("int8 or uint8 range"),
            std::string::npos);
}

namespace {

// Two classes of 8x8 images told apart by where their bright square sits,
// with noise: a conv net learns it in a few dozen steps.
std::pair<Tensor, Tensor> squares(int64_t n, uint64_t seed) {
  Tensor x = ops::mul(tessera::testing::rand_f64({n, 1, 8, 8}, -1, 1, seed), 0.3).to(DType::F32).contiguous();
  std::vector<int64_t> y(n);
  float* p = x.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    y[i] = (i * 7 + seed) % 2;
    const int64_t r0 = y[i] ? 1 : 5, c0 = (i % 3) + 1;
    for (int64_t r = r0; r < r0 + 2; ++r)
      for (int64_t c = c0; c < c0 + 3; ++c) p[i * 64 + r * 8 + c] += 1.5f;
  }
  return {x, tensor(y)};
}

std::shared_ptr<nn::Sequential> net() {
  manual_seed(5);
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 8, 3, 1, 1), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(8 * 4 * 4, 16), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(16, 2)});
}

double accuracy(const Tensor& logits, const Tensor& y) {
  auto p = ops::argmax(logits, 1).to_vector<int64_t>(), t = y.to_vector<int64_t>();
  int64_t right = 0;
  for (size_t i = 0; i < t.size(); ++i) right += p[i] == t[i];
  return static_cast<double>(right) / static_cast<double>(t.size());
}

}  // namespace

TEST(Qat, PreparedModelLearnsAndConvertsToTheInt8GraphItSimulated) {
  for (bool learn : {false, true}) {
    auto m = net();
    quant::QatReport rep = quant::prepare_qat(*m, {.learn_scales = learn});
    EXPECT_EQ(rep.layers.size(), 3u) << rep.str();
    auto sd = m->state_dict();
    bool has_scale = false;
    for (const auto& [k, t] : sd.entries) has_scale |= k == (learn ? "0.input_log_scale" : "0.input_scale");
    EXPECT_TRUE(has_scale);
    auto opt = optim::make_optimizer("adam", {{m->parameters(), {}}}, {{"lr", 0.01}});
    auto [x, y] = squares(64, 1);
    m->train();
    double first = 0, last = 0;
    for (int step = 0; step < 60; ++step) {
      Tensor loss = ops::cross_entropy((*m)(x), y);
      if (step == 0) first = loss.item<float>();
      last = loss.item<float>();
      opt->zero_grad();
      loss.backward();
      opt->step();
    }
    EXPECT_LT(last, 0.3 * first) << "QAT did not learn (learn_scales " << learn << "): " << first << " -> " << last;
    auto [xt, yt] = squares(200, 9);
    m->eval();
    Tensor simulated;
    {
      NoGradGuard ng;
      simulated = (*m)(xt);
    }
    EXPECT_GT(accuracy(simulated, yt), 0.95);
    // The int8 graph: the learned ranges, no calibration needed for them
    // (one batch for the logits' range).
    auto r = quant::convert_qat(*m, xt, {{x}});
    EXPECT_EQ(r.report.quantized(), 3) << r.report.text();
    Model i8(std::move(r.graph));
    Tensor real = i8(xt);
    EXPECT_EQ(ops::argmax(real, 1).to_vector<int64_t>(), ops::argmax(simulated, 1).to_vector<int64_t>());
    const float range = ops::sub(simulated.max(), simulated.min()).item<float>();
    EXPECT_LT(ops::abs(ops::sub(real, simulated)).max().item<float>(), 0.02f * range) << "learn " << learn;
    EXPECT_FALSE(quant::is_qat_prepared(*m));
  }
}

TEST(Qat, ConfigAndMisuse) {
  auto m = net();
  auto err = [](const std::function<void()>& f) { return tessera::testing::error_of(f); };
  EXPECT_NE(err([&] { quant::prepare_qat(*m, {.skip = {"9"}}); }).find("skip names '9'"), std::string::npos);
  auto rep = quant::prepare_qat(*m, {.skip = {"6"}});
  EXPECT_EQ(rep.layers.size(), 2u);
  EXPECT_EQ(rep.skipped, std::vector<std::string>{"6"});
  EXPECT_NE(err([&] { quant::prepare_qat(*m); }).find("already prepared"), std::string::npos);
  auto c = quant::qat_config_from_json(quant::to_json({.skip = {"a"}, .learn_scales = true}));
  EXPECT_TRUE(c.learn_scales);
  EXPECT_EQ(c.skip, std::vector<std::string>{"a"});
  EXPECT_NE(err([&] { quant::qat_config_from_json(nlohmann::json{{"learn_scale", true}}); })
                .find("unknown key 'learn_scale'"),
            std::string::npos);
  auto plain = net();
  EXPECT_NE(err([&] { quant::convert_qat(*plain, zeros({1, 1, 8, 8})); }).find("not prepared"), std::string::npos);
}
