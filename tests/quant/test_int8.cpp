// Static int8: the oneDNN int8 convolution and linear layer against their
// portable references, the quantize/dequantize ops, u8 max pooling, and the
// observers' ranges.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/int8.h"
#include "tessera/core/error.h"
#include "tessera/ops/ops.h"
#include "tessera/quant/observer.h"
#include "test_util.h"

using namespace tessera;

namespace {

template <typename T>
std::vector<T> random_codes(int64_t n, int lo, int hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(gen));
  return v;
}
std::vector<float> random_floats(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// u8 outputs may differ by one code where the two round a value lying
// within float error of a half.
template <typename T>
void expect_close(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t off = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if constexpr (std::is_same_v<T, uint8_t>) {
      ASSERT_LE(std::abs(int(got[i]) - int(want[i])), 1) << what << " at " << i;
      off += got[i] != want[i];
    } else {
      ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::fabs(want[i]))) << what << " at " << i;
    }
  }
  EXPECT_LE(off, static_cast<int64_t>(got.size() / 100 + 1)) << what << ": too many codes off by one";
}

struct ConvCase {
  int64_t N, C, H, W, OC, K, stride, pad, groups;
  int32_t x_zp;
  bool relu, out_u8;
};

}  // namespace

TEST(Int8Kernels, ConvolutionMatchesReference) {
  const int amax = 255;  // the full u8 range: exact on every CPU (Note [int8 without VNNI])
  for (const ConvCase& c : std::vector<ConvCase>{{2, 1, 12, 12, 32, 3, 1, 1, 1, 60, true, true},
                                                 {3, 32, 9, 7, 64, 3, 1, 1, 1, 0, true, true},
                                                 {2, 16, 8, 8, 24, 3, 2, 0, 1, 7, false, true},
                                                 {1, 16, 6, 6, 32, 1, 1, 0, 2, 0, false, false},
                                                 {2, 8, 10, 10, 8, 5, 1, 2, 8, 3, true, false}}) {
    cpu::ConvGeometry g{c.N, c.C, c.H, c.W, c.OC, c.K, c.K, 0, 0, c.stride, c.stride, 1, 1,
                        c.pad, c.pad, c.pad, c.pad, c.groups, DType::U8};
    g.OH = (c.H + 2 * c.pad - c.K) / c.stride + 1;
    g.OW = (c.W + 2 * c.pad - c.K) / c.stride + 1;
   for (bool s8 : {false, true}) {  // u8 codes with a zero point, or symmetric s8 codes (a signed model input)
    auto x = s8 ? random_codes<uint8_t>(c.N * c.H * c.W * c.C, 0, 255, 1)  // the bytes of s8 codes
                : random_codes<uint8_t>(c.N * c.H * c.W * c.C, 0, amax, 1);
    auto w = random_codes<int8_t>(c.OC * (c.C / c.groups) * c.K * c.K, -127, 127, 2);
    auto ws = random_floats(c.OC, 0.001f, 0.01f, 3), bias = random_floats(c.OC, -2, 2, 4);
    cpu::Int8Epilogue e{0.02f, s8 ? 0 : c.x_zp, s8, ws.data(), bias.data(),
                        c.relu ? cpu::Epilogue::Relu : cpu::Epilogue::None, c.out_u8, 0.05f, c.relu ? 0 : 128};
    const int64_t n_out = c.N * g.OH * g.OW * c.OC;
    std::string what = "conv " + std::to_string(c.C) + "->" + std::to_string(c.OC) + " k" + std::to_string(c.K) +
                       " g" + std::to_string(c.groups) + (s8 ? " s8" : " u8") + " (" + cpu::int8_conv2d_impl(g, e) + ")";
    if (c.out_u8) {
      std::vector<uint8_t> got(n_out), want(n_out);
      cpu::int8_conv2d(g, x.data(), w.data(), e, got.data());
      cpu::int8_conv2d_ref(g, x.data(), w.data(), e, want.data());
      expect_close(got, want, what);
    } else {
      std::vector<float> got(n_out), want(n_out);
      cpu::int8_conv2d(g, x.data(), w.data(), e, got.data());
      cpu::int8_conv2d_ref(g, x.data(), w.data(), e, want.data());
      expect_close(got, want, what);
    }
   }
  }
}

TEST(Int8Kernels, FastConvolutionIsNotOneDnnsReferenceLoop) {
  // The CNN's layers must run oneDNN's JIT kernels, not its (very slow) reference.
  std::vector<float> ws(64, 0.01f);
  cpu::ConvGeometry g{64, 32, 14, 14, 64, 3, 3, 14, 14, 1, 1, 1, 1, 1, 1, 1, 1, 1, DType::U8};
  cpu::Int8Epilogue e{0.02f, 0, false, ws.data(), nullptr, cpu::Epilogue::Relu, true, 0.05f, 0};
  EXPECT_EQ(cpu::int8_conv2d_impl(g, e).find("ref"), std::string::npos) << cpu::int8_conv2d_impl(g, e);
  e.x_zero_point = 37;
  EXPECT_EQ(cpu::int8_conv2d_impl(g, e).find("ref"), std::string::npos) << cpu::int8_conv2d_impl(g, e);
  e.x_zero_point = 0;
  e.x_s8 = true;
  EXPECT_EQ(cpu::int8_conv2d_impl(g, e).find("ref"), std::string::npos) << cpu::int8_conv2d_impl(g, e);
}

TEST(Int8Kernels, LinearMatchesReference) {
  const int amax = 255;  // the full u8 range: exact on every CPU (Note [int8 without VNNI])
  for (auto [m, n, k, zp, relu, u8] : std::vector<std::tuple<int64_t, int64_t, int64_t, int32_t, bool, bool>>{
           {1, 10, 128, 0, false, false}, {64, 128, 3136, 0, true, true}, {7, 33, 100, 90, false, true}}) {
    auto x = random_codes<uint8_t>(m * k, 0, amax, 5);
    auto w = random_codes<int8_t>(n * k, -127, 127, 6);
    auto ws = random_floats(n, 0.0005f, 0.002f, 7), bias = random_floats(n, -1, 1, 8);
    cpu::Int8Epilogue e{0.01f, zp, false, ws.data(), bias.data(), relu ? cpu::Epilogue::Relu : cpu::Epilogue::None,
                        u8, 0.1f, relu ? 0 : 100};
    std::string what = "linear " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    if (u8) {
      std::vector<uint8_t> got(m * n), want(m * n);
      cpu::int8_linear(m, n, k, x.data(), w.data(), e, got.data());
      cpu::int8_linear_ref(m, n, k, x.data(), w.data(), e, want.data());
      expect_close(got, want, what);
    } else {
      std::vector<float> got(m * n), want(m * n);
      cpu::int8_linear(m, n, k, x.data(), w.data(), e, got.data());
      cpu::int8_linear_ref(m, n, k, x.data(), w.data(), e, want.data());
      expect_close(got, want, what);
    }
  }
}

TEST(Int8Kernels, LinearWithS8InputMatchesReference) {
  const int64_t m = 9, n = 20, k = 70;
  auto x = random_codes<uint8_t>(m * k, 0, 255, 9);  // the bytes of s8 codes
  auto w = random_codes<int8_t>(n * k, -127, 127, 10);
  auto ws = random_floats(n, 0.0005f, 0.002f, 11);
  cpu::Int8Epilogue e{0.01f, 0, true, ws.data(), nullptr, cpu::Epilogue::None, false, 1.0f, 0};
  std::vector<float> got(m * n), want(m * n);
  cpu::int8_linear(m, n, k, x.data(), w.data(), e, got.data());
  cpu::int8_linear_ref(m, n, k, x.data(), w.data(), e, want.data());
  expect_close(got, want, "s8 linear");
}

TEST(Int8Ops, QuantizeDequantizeRoundTrip) {
  Tensor x = tessera::testing::rand_f64({4, 3, 5, 5}, -2.0, 3.0, 1).to(DType::F32);
  const double scale = 5.0 / 255;
  const int64_t zp = 102;
  Tensor q = ops::quantize_per_tensor(x, scale, zp);
  ASSERT_EQ(q.dtype(), DType::U8);
  Tensor back = ops::dequantize_per_tensor(q, scale, zp);
  EXPECT_LE(ops::abs(ops::sub(back, x)).max().item<float>(), scale / 2 + 1e-6);
  // ONNX's rounding: half to even, saturating.
  Tensor halves = tensor(std::vector<float>{0.5f, 1.5f, 2.5f, -0.5f, 1000.f, -1000.f});
  auto q1 = ops::quantize_per_tensor(halves, 1.0, 0, DType::I8).to(DType::I64).to_vector<int64_t>();
  EXPECT_EQ(q1, (std::vector<int64_t>{0, 2, 2, 0, 127, -128}));
  auto err = [](const std::function<void()>& f) { return tessera::testing::error_of(f); };
  EXPECT_NE(err([&] { ops::quantize_per_tensor(x, 0.0, 0); }).find("scale must be a positive finite"), std::string::npos);
  EXPECT_NE(err([&] { ops::quantize_per_tensor(x, 0.1, 300); }).find("zero_point must lie in [0, 255]"),
            std::string::npos);
  Tensor nan = tensor(std::vector<float>{1.f, NAN});
  EXPECT_NE(err([&] { ops::quantize_per_tensor(nan, 0.1, 0); }).find("NaN"), std::string::npos);
}

TEST(Int8Ops, ConvolutionOpMatchesDequantizedFloatConvolution) {
  // int8_conv2d(q(x), q(w)) against conv2d(dq(q(x)), dq(q(w))) in f32: equal
  // up to the output's rounding (one code).
  Tensor x = tessera::testing::rand_f64({2, 8, 9, 9}, -1.0, 2.0, 3).to(DType::F32);
  Tensor w = tessera::testing::rand_f64({16, 8, 3, 3}, -0.5, 0.5, 4).to(DType::F32);
  Tensor b = tessera::testing::rand_f64({16}, -0.2, 0.2, 5).to(DType::F32);
  const double xs = 3.0 / 255;
  const int64_t xz = 85;
  auto [wq, ws] = quant::quantize_weight_per_channel(w);
  Tensor xq = ops::quantize_per_tensor(x, xs, xz);
  ops::Conv2dOptions o;
  o.padding = {1, 1};
  Tensor wf = ops::mul(wq.to(DType::F32), ws.reshape({16, 1, 1, 1}));
  Tensor ref = ops::relu(ops::conv2d(ops::dequantize_per_tensor(xq, xs, xz), wf, b, o));
  const double ys = ref.max().item<float>() / 255;
  Tensor y = ops::int8_conv2d(xq, wq, ws, b, o, xs, xz, ys, 0, "relu");
  EXPECT_EQ(y.dtype(), DType::U8);
  EXPECT_EQ(y.shape(), ref.shape());
  Tensor diff = ops::abs(ops::sub(ops::dequantize_per_tensor(y, ys, 0), ref));
  EXPECT_LE(diff.max().item<float>(), ys * 0.5 + 1e-5);
  Tensor yf = ops::int8_conv2d(xq, wq, ws, b, o, xs, xz, 0, 0, "relu", DType::F32);
  EXPECT_LE(ops::abs(ops::sub(yf, ref)).max().item<float>(), 1e-4);
  // The weights' shape, dtype and scales are checked.
  auto err = [](const std::function<void()>& f) { return tessera::testing::error_of(f); };
  EXPECT_NE(err([&] { ops::int8_conv2d(xq, w, ws, b, o, xs, xz, ys, 0); }).find("contiguous i8"), std::string::npos);
  EXPECT_NE(err([&] { ops::int8_conv2d(xq, wq, ws.narrow(0, 0, 3).contiguous(), b, o, xs, xz, ys, 0); })
                .find("one per output channel"),
            std::string::npos);
  EXPECT_NE(err([&] { ops::int8_conv2d(x, wq, ws, b, o, xs, xz, ys, 0); }).find("4-D u8"), std::string::npos);
}

TEST(Int8Ops, MaxPoolOnCodesEqualsPoolingTheValues) {
  Tensor x = tessera::testing::rand_f64({2, 16, 8, 8}, -1.0, 1.0, 6).to(DType::F32);
  Tensor q = ops::quantize_per_tensor(x, 2.0 / 255, 128);
  Tensor want = ops::quantize_per_tensor(ops::max_pool2d(x, {2, 2}), 2.0 / 255, 128);
  EXPECT_EQ(ops::max_pool2d(q, {2, 2}).to_vector<uint8_t>(), want.to_vector<uint8_t>());
  // Channels-last codes (an int8 convolution's output) pool in their layout.
  Tensor cl = q.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  Tensor y = ops::max_pool2d(cl, {2, 2});
  EXPECT_EQ(y.contiguous().to_vector<uint8_t>(), want.to_vector<uint8_t>());
  EXPECT_EQ(y.strides()[1], 1);  // still channels-last
}

TEST(Observers, Ranges) {
  std::vector<float> v(10000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) / 9999.0f;  // uniform on [0, 1]
  v[0] = -50.0f;                                                                // one outlier
  Tensor t = tensor(v);
  auto range_of = [&](quant::ObserverConfig c) {
    auto o = quant::make_observer(c);
    o->observe(t, "t");
    return o->range();
  };
  auto mm = range_of({"minmax"});
  EXPECT_EQ(mm.first, -50.0);
  EXPECT_NEAR(mm.second, 1.0, 1e-6);
  auto pc = range_of({"percentile", 0.01, 99.9});
  EXPECT_GT(pc.first, -0.05);  // the outlier is cut
  EXPECT_NEAR(pc.second, 0.999, 0.03);
  // Moving average: the second batch moves the range by c of the difference.
  auto ma = quant::make_observer({"moving_average", 0.5});
  ma->observe(tensor(std::vector<float>{0.f, 2.f}), "a");
  ma->observe(tensor(std::vector<float>{-2.f, 4.f}), "b");
  EXPECT_EQ(ma->range(), (std::pair<double, double>{-1.0, 3.0}));
  // Entropy keeps the mass and drops a long sparse tail.
  std::vector<float> tail(20000);
  std::mt19937 gen(1);
  std::exponential_distribution<float> ex(1.0f);
  for (auto& x : tail) x = ex(gen);
  tail[0] = 100.0f;
  auto en = quant::make_observer({"entropy"});
  en->observe(tensor(tail), "tail");
  EXPECT_LT(en->range().second, 50.0);
  EXPECT_GT(en->range().second, 3.0);
  // Bad values and settings are errors.
  auto err = [](const std::function<void()>& f) { return tessera::testing::error_of(f); };
  EXPECT_NE(err([&] { quant::make_observer({})->observe(tensor(std::vector<float>{1.f, INFINITY}), "conv1 input"); })
                .find("conv1 input has NaN or infinite"),
            std::string::npos);
  EXPECT_NE(err([&] { quant::make_observer({"kl"}); }).find("minmax, moving_average, percentile or entropy"),
            std::string::npos);
}

TEST(Observers, AffineParameters) {
  auto p = quant::affine_qparams(-1.0, 3.0);
  EXPECT_NEAR(p.scale, 4.0 / 255, 1e-12);
  EXPECT_EQ(p.zero_point, 64);
  auto r = quant::affine_qparams(0.5, 2.0, 127);  // widened to hold 0
  EXPECT_NEAR(r.scale, 2.0 / 127, 1e-12);
  EXPECT_EQ(r.zero_point, 0);
  auto z = quant::affine_qparams(0.0, 0.0);  // always zero: any scale is exact
  EXPECT_EQ(z.scale, 1.0);
  EXPECT_THROW(quant::affine_qparams(NAN, 1.0), Error);
  auto [q, s] = quant::quantize_weight_per_channel(tensor(std::vector<float>{0.f, 0.f, -2.f, 1.f}).reshape({2, 2}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1.f, 2.f / 127}));
  EXPECT_EQ(q.to(DType::I64).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, -127, 64}));
}

// The integer path bit for bit: with unit scales, no bias and f32 output the
// kernels store their int32 sums (exact in f32 below 2^24), which must equal
// the reference's sums exactly — u8 with a zero point, and s8.
TEST(Int8Kernels, IntegerSumsAreExact) {
  std::vector<float> ones_scales(48, 1.0f);
  cpu::ConvGeometry g{2, 24, 7, 7, 48, 3, 3, 7, 7, 1, 1, 1, 1, 1, 1, 1, 1, 1, DType::U8};
  for (bool s8 : {false, true}) {
    auto x = random_codes<uint8_t>(2 * 7 * 7 * 24, 0, 255, 31);
    auto w = random_codes<int8_t>(48 * 24 * 9, -127, 127, 32);
    cpu::Int8Epilogue e{1.0f, s8 ? 0 : 9, s8, ones_scales.data(), nullptr, cpu::Epilogue::None, false, 1.0f, 0};
    std::vector<float> got(2 * 7 * 7 * 48), want(got.size());
    cpu::int8_conv2d(g, x.data(), w.data(), e, got.data());
    cpu::int8_conv2d_ref(g, x.data(), w.data(), e, want.data());
    EXPECT_EQ(got, want) << (s8 ? "s8" : "u8");
    std::vector<float> lg(5 * 48), lw(5 * 48);
    cpu::int8_linear(5, 48, 24 * 9, x.data(), w.data(), e, lg.data());
    cpu::int8_linear_ref(5, 48, 24 * 9, x.data(), w.data(), e, lw.data());
    EXPECT_EQ(lg, lw) << (s8 ? "s8" : "u8");
  }
}
