// Quantized formats and kernels: GGUF byte layouts, round-trip error bounds,
// and every ISA's fast kernels against the portable references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/kernel_table.h"
#include "kernel_tables.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/sparse.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"

using namespace tessera;
using namespace tessera::cpu;

namespace {

std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

struct Case {
  QFormat f;
  int64_t rows, cols, group;
};

std::vector<Case> cases() {
  return {{QFormat::Q8_0, 37, 96, 0},  {QFormat::Q4_0, 37, 96, 0},  {QFormat::Int8, 37, 96, 0},
          {QFormat::Int8, 13, 75, 0},  {QFormat::Int4, 37, 96, 32}, {QFormat::Int4, 21, 128, 64},
          {QFormat::Int4, 9, 256, 128}, {QFormat::Int4, 9, 512, 256}, {QFormat::Q4_K, 21, 512, 0},
          {QFormat::Q4_K, 5, 256, 0},   {QFormat::Q6_K, 21, 512, 0},   {QFormat::Q6_K, 5, 256, 0}};
}

std::string name_of(const Case& c) {
  return std::string(qformat_name(c.f)) + " " + std::to_string(c.rows) + "x" + std::to_string(c.cols) +
         (c.group ? " g" + std::to_string(c.group) : "");
}

std::vector<KernelTable> tables() { return tessera::testing::kernel_tables(); }

}  // namespace

// The bytes ggml writes for one block, worked by hand: amax 3 -> d = 3/127.
TEST(QuantFormats, Q8_0BytesFollowGguf) {
  std::vector<float> w(32, 0.f);
  w[0] = 3.f, w[1] = -1.5f, w[31] = 0.25f;
  auto q = quantize_ref(QFormat::Q8_0, w.data(), 1, 32);
  ASSERT_EQ(q.data.size(), 34u);
  BlockQ8_0 b;
  std::memcpy(&b, q.data.data(), 34);
  EXPECT_EQ(b.d, Half::from_float(3.f / 127.f));
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], -64);  // roundf(-63.5) rounds away from zero, like ggml
  EXPECT_EQ(b.qs[31], 11);  // 0.25 * 127 / 3 = 10.58
  EXPECT_EQ(b.qs[2], 0);
}

// q4_0: d = max / -8 keeps the largest-magnitude weight exact at q = 0.
TEST(QuantFormats, Q4_0BytesFollowGguf) {
  std::vector<float> w(32, 0.f);
  w[0] = -4.f, w[16] = 2.f, w[5] = 1.f;
  auto q = quantize_ref(QFormat::Q4_0, w.data(), 1, 32);
  ASSERT_EQ(q.data.size(), 18u);
  BlockQ4_0 b;
  std::memcpy(&b, q.data.data(), 18);
  EXPECT_EQ(Half::to_float(b.d), 0.5f);  // -4 / -8
  // weight 0 = -4 -> q = -4/0.5 + 8.5 = 0.5 -> 0; weight 16 = 2 -> 4 + 8.5 -> 12.
  EXPECT_EQ(b.qs[0], 0 | (12 << 4));
  EXPECT_EQ(b.qs[5] & 15, 10);  // 1 / 0.5 + 8.5 = 10.5 -> 10
  EXPECT_EQ(b.qs[1], 8 | (8 << 4));
  std::vector<float> back(32);
  QuantMatrix m = view_of(q, QFormat::Q4_0, 1, 32);
  dequantize_ref(m, 0, 1, back.data());
  EXPECT_EQ(back[0], -4.f);
  EXPECT_EQ(back[16], 2.f);
  EXPECT_EQ(back[5], 1.f);
}

// |w - dequant(quant(w))| is at most half a step (plus f16 rounding of the scale).
TEST(QuantFormats, RoundTripErrorIsBounded) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(name_of(c));
    auto w = randn(c.rows * c.cols, 7);
    auto q = quantize_ref(c.f, w.data(), c.rows, c.cols, c.group);
    QuantMatrix m = view_of(q, c.f, c.rows, c.cols, c.group);
    std::vector<float> back(w.size());
    dequantize_ref(m, 0, c.rows, back.data());
    const int64_t unit = c.f == QFormat::Int4 ? c.group : c.f == QFormat::Int8 ? c.cols : c.f == QFormat::Q6_K ? 16 : 32;
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t u = 0; u < c.cols; u += unit) {
        float lo = 1e30f, hi = -1e30f, amax = 0.f;
        for (int64_t k = u; k < std::min(c.cols, u + unit); ++k) {
          float v = w[r * c.cols + k];
          lo = std::min(lo, v), hi = std::max(hi, v), amax = std::max(amax, std::fabs(v));
        }
        float step = c.f == QFormat::Int4   ? (hi - lo) / 15.f
                     : c.f == QFormat::Q4_K ? (hi - std::min(lo, 0.f)) / 15.f
                     : c.f == QFormat::Q4_0 ? amax / 8.f
                     : c.f == QFormat::Q6_K ? amax / 32.f
                                            : amax / 127.f;
        for (int64_t k = u; k < std::min(c.cols, u + unit); ++k) {
          float err = std::fabs(w[r * c.cols + k] - back[r * c.cols + k]);
          // Q4_0 clamps the far side at 15 (-8..7 around a scale set by one sign): a full step there.
          // The K-quants fit each sub-block's scale (and min) by least squares and
          // round it to 6 or 8 bits against the super-block's largest: a step at most.
          const bool full = c.f == QFormat::Q4_0 || c.f == QFormat::Q4_K || c.f == QFormat::Q6_K;
          float bound = (full ? 1.0f : 0.5f) * step * 1.01f + 2e-3f * amax;
          ASSERT_LE(err, bound) << "row " << r << " col " << k;
        }
      }
  }
}

TEST(QuantFormats, BadShapesAndValuesAreErrors) {
  std::vector<float> w(64, 1.f);
  EXPECT_THROW(quantize_ref(QFormat::Q4_0, w.data(), 2, 33), Error);
  EXPECT_THROW(quantize_ref(QFormat::Int4, w.data(), 1, 64, 48), Error);   // not a multiple of 32
  EXPECT_THROW(quantize_ref(QFormat::Int4, w.data(), 1, 64, 128), Error);  // does not divide 64
  try {
    quantize_ref(QFormat::Int4, w.data(), 1, 96, 64);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide the input dimension 96"), std::string::npos) << e.what();
  }
  w[5] = NAN;
  EXPECT_THROW(quantize_ref(QFormat::Q8_0, w.data(), 2, 32), Error);
  EXPECT_THROW(quantize_ref(QFormat::Q4_K, w.data(), 1, 64), Error);  // super-blocks of 256
  EXPECT_THROW(qformat_from_name("q5_k"), Error);
  EXPECT_EQ(qformat_from_name("q6_k"), QFormat::Q6_K);
  EXPECT_EQ(qformat_from_name("int4"), QFormat::Int4);
}

// The float-activation kernels and the dequantizer of every ISA against the references.
TEST(QuantKernels, EveryIsaMatchesTheReference) {
  for (const KernelTable& t : tables())
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(t.isa) + " " + name_of(c));
      auto w = randn(c.rows * c.cols, 11);
      auto q = quantize_ref(c.f, w.data(), c.rows, c.cols, c.group);
      QuantMatrix m = view_of(q, c.f, c.rows, c.cols, c.group);
      const int f = static_cast<int>(c.f);
      std::vector<float> ref(c.rows * c.cols), got(c.rows * c.cols);
      dequantize_ref(m, 0, c.rows, ref.data());
      t.qdequant_rows[f](m, 0, c.rows, got.data());
      ASSERT_EQ(ref, got);  // the same products, bit for bit
      for (int64_t mm : {1, 3, 16, 21}) {
        auto x = randn(mm * c.cols, 13 + mm);
        std::vector<float> yr(mm * c.rows), yk(mm * c.rows, -1.f);
        qmatmul_ref(m, x.data(), mm, yr.data());
        t.qmatmul_rows[f](m, x.data(), c.cols, mm, yk.data(), c.rows, 0, c.rows);
        for (size_t i = 0; i < yr.size(); ++i) ASSERT_NEAR(yk[i], yr[i], 2e-5f * (1.f + std::fabs(yr[i]))) << i;
      }
    }
}

// Integer path: the activation quantizer is exact against its reference; the
// block products are exact int32 and only their float combination's order differs.
TEST(QuantKernels, IntegerDotMatchesTheQuantizedOperands) {
  for (const KernelTable& t : tables())
    for (const Case& c : cases()) {
      if (c.cols % 32) continue;
      SCOPED_TRACE(std::string(t.isa) + " " + name_of(c));
      auto w = randn(c.rows * c.cols, 17);
      auto q = quantize_ref(c.f, w.data(), c.rows, c.cols, c.group);
      QuantMatrix m = view_of(q, c.f, c.rows, c.cols, c.group);
      const int64_t nb = c.cols / 32;
      for (int64_t mm : {1, 2, 5}) {
        auto x = randn(mm * c.cols, 19 + mm, 3.f);
        std::vector<BlockQ8Act> xr(mm * nb), xk(mm * nb);
        for (int64_t i = 0; i < mm; ++i) {
          quantize_act_ref(x.data() + i * c.cols, c.cols, xr.data() + i * nb);
          t.quantize_act(x.data() + i * c.cols, c.cols, xk.data() + i * nb);
        }
        ASSERT_EQ(0, std::memcmp(xr.data(), xk.data(), xr.size() * sizeof(BlockQ8Act)));
        std::vector<float> yr(mm * c.rows), yk(mm * c.rows, -1.f);
        qdot_ref(m, xr.data(), mm, yr.data());
        t.qdot_rows[static_cast<int>(c.f)](m, xk.data(), mm, yk.data(), c.rows, 0, c.rows);
        float scale = 0.f;
        for (float v : yr) scale = std::max(scale, std::fabs(v));
        for (size_t i = 0; i < yr.size(); ++i) ASSERT_NEAR(yk[i], yr[i], 1e-5f * scale) << i;
        // And the integer result is the float product of the quantized operands.
        std::vector<float> xd(mm * c.cols);
        for (int64_t i = 0; i < mm * nb; ++i)
          for (int j = 0; j < 32; ++j) xd[i * 32 + j] = xr[i].d * xr[i].qs[j];
        std::vector<float> yd(mm * c.rows);
        qmatmul_ref(m, xd.data(), mm, yd.data());
        for (size_t i = 0; i < yr.size(); ++i) ASSERT_NEAR(yr[i], yd[i], 1e-5f * scale) << i;
      }
    }
}

// qmatmul's dispatch (threads, the GEMM path for larger batches) against the reference.
TEST(QuantKernels, DispatchMatchesTheReferenceAtEveryBatch) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(name_of(c));
    auto w = randn(c.rows * c.cols, 23);
    auto q = quantize_ref(c.f, w.data(), c.rows, c.cols, c.group);
    QuantMatrix m = view_of(q, c.f, c.rows, c.cols, c.group);
    for (int64_t mm : {1, 7, 40}) {
      auto x = randn(mm * c.cols, 29 + mm);
      std::vector<float> yr(mm * c.rows), yk(mm * c.rows);
      qmatmul_ref(m, x.data(), mm, yr.data());
      qmatmul(m, x.data(), mm, yk.data(), false);
      for (size_t i = 0; i < yr.size(); ++i) ASSERT_NEAR(yk[i], yr[i], 1e-4f * (1.f + std::fabs(yr[i]))) << i;
      if (!qdot_supported(m)) continue;
      qmatmul(m, x.data(), mm, yk.data(), true);
      float scale = 0.f, err = 0.f;
      for (size_t i = 0; i < yr.size(); ++i) {
        scale = std::max(scale, std::fabs(yr[i]));
        err = std::max(err, std::fabs(yk[i] - yr[i]));
      }
      EXPECT_LT(err, 0.03f * scale) << "int8 activations moved the result by " << err;
    }
  }
}

// Int8 weights at batch > 4 with int8 activations: one int8 GEMM, activations
// quantized per tensor; exact int32 products times the two scales.
TEST(QuantKernels, Int8BatchesRunAnExactInt8Gemm) {
  const int64_t rows = 48, cols = 80, m = 9;
  auto w = randn(rows * cols, 31);
  auto q = quantize_ref(QFormat::Int8, w.data(), rows, cols);
  QuantMatrix qm = view_of(q, QFormat::Int8, rows, cols);
  auto x = randn(m * cols, 37, 2.f);
  float amax = 0.f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float d = amax / 127.f;
  std::vector<float> y(m * rows);
  qmatmul(qm, x.data(), m, y.data(), true);
  const auto* codes = reinterpret_cast<const int8_t*>(q.data.data());
  const auto* ws = reinterpret_cast<const float*>(q.scales.data());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t isum = 0;
      for (int64_t k = 0; k < cols; ++k)
        isum += static_cast<int64_t>(std::nearbyint(x[i * cols + k] / d)) * codes[r * cols + k];
      const float want = static_cast<float>(isum) * (ws[r] * d);
      ASSERT_NEAR(y[i * rows + r], want, 1e-5f * (1.f + std::fabs(want))) << i << "," << r;
    }
}

// A NaN or infinity in the activations gives NaN (or infinite) outputs on the
// integer paths too, never finite garbage from rounding a NaN to int8.
TEST(QuantKernels, NonFiniteActivationsPropagate) {
  for (const Case& c : cases()) {
    if (c.cols % 32) continue;
    SCOPED_TRACE(name_of(c));
    auto w = randn(c.rows * c.cols, 41);
    auto q = quantize_ref(c.f, w.data(), c.rows, c.cols, c.group);
    QuantMatrix m = view_of(q, c.f, c.rows, c.cols, c.group);
    for (int64_t mm : {1, 9}) {
      auto x = randn(mm * c.cols, 43);
      x[5] = NAN;  // row 0
      std::vector<float> y(mm * c.rows);
      qmatmul(m, x.data(), mm, y.data(), true);
      for (int64_t r = 0; r < c.rows; ++r) EXPECT_TRUE(std::isnan(y[r])) << "row 0 col " << r << " = " << y[r];
      if (mm > 1 && c.f != QFormat::Int8)  // per-32 scales: the other rows are untouched
        for (int64_t r = 0; r < c.rows; ++r) EXPECT_TRUE(std::isfinite(y[c.rows + r]));
    }
  }
}

// The static-int8 activation quantizer of every table against nearbyint
// (round half to even), bitwise, with ties, saturation and NaN.
TEST(QuantKernels, AffineQuantizerMatchesNearbyint) {
  std::vector<float> x = randn(1000, 11, 3.f);
  for (float v : {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 127.5f, 300.f, -300.f, 1e30f, -1e30f}) x.push_back(v / 0.1f * 0.1f);
  for (const KernelTable& t : tables()) {
    for (bool u8 : {true, false}) {
      const float zp = u8 ? 100.f : -3.f, lo = u8 ? 0.f : -128.f, hi = u8 ? 255.f : 127.f, inv = 10.f;
      std::vector<uint8_t> got(x.size());
      EXPECT_FALSE(t.quantize_affine(x.data(), static_cast<int64_t>(x.size()), inv, zp, lo, hi, got.data(), u8));
      for (size_t i = 0; i < x.size(); ++i) {
        const int want = static_cast<int>(std::clamp(std::nearbyint(x[i] * inv + zp), lo, hi));
        const int have = u8 ? got[i] : static_cast<int8_t>(got[i]);
        ASSERT_EQ(have, want) << t.isa << (u8 ? " u8 " : " s8 ") << "x = " << x[i];
      }
    }
    std::vector<float> nan = {1.f, NAN, 2.f};
    std::vector<uint8_t> out(3);
    EXPECT_TRUE(t.quantize_affine(nan.data(), 3, 1.f, 0.f, 0.f, 255.f, out.data(), true)) << t.isa;
  }
}

// The sparse-weight product of every table against the CSR reference, at
// one activation row (gather-dot) and several (transposed activations).
TEST(QuantKernels, CsrProductMatchesReference) {
  const int64_t rows = 37, cols = 91;
  std::vector<float> w = randn(rows * cols, 21);
  for (size_t i = 0; i < w.size(); ++i)
    if (i % 7 != 0) w[i] = 0.f;  // 86% zeros; row 0 of some rows empty
  for (int64_t j = 0; j < cols; ++j) w[5 * cols + j] = 0.f;
  CsrData c = csr_from_dense(w.data(), rows, cols);
  CsrMatrix m{rows, cols, c.row_ptr.data(), c.col_idx.data(), c.values.data()};
  std::vector<float> bias = randn(rows, 22);
  for (int64_t n : {int64_t{1}, int64_t{7}}) {
    std::vector<float> x = randn(n * cols, 23), want(n * rows), xt(n * cols);
    csr_linear_ref(m, x.data(), n, bias.data(), want.data());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < cols; ++j) xt[j * n + i] = x[i * cols + j];
    for (const KernelTable& t : tables()) {
      std::vector<float> got(n * rows);
      t.csr_rows(m, n == 1 ? x.data() : xt.data(), n, bias.data(), got.data(), 0, rows);
      for (int64_t i = 0; i < n * rows; ++i) ASSERT_NEAR(got[i], want[i], 1e-4f) << t.isa << " m " << n << " at " << i;
    }
    std::vector<float> got(n * rows);
    csr_linear(m, x.data(), n, bias.data(), got.data());
    for (int64_t i = 0; i < n * rows; ++i) ASSERT_NEAR(got[i], want[i], 1e-4f) << "csr_linear m " << n;
    EXPECT_EQ(got[5], bias[5]);  // an empty row is its bias
  }
}

// The K-quants' search for scales pays: on Gaussian weights Q4_K's error is
// below Q4_0's at the same 4 bits (plus 0.5 of scales), Q6_K's between
// Q4_K's and Q8_0's (relative RMS errors measured: Q8_0 0.0054, Q6_K 0.0177,
// Q4_K 0.0713, Q4_0 0.0861; llama.cpp reports the same ranking).
TEST(QuantFormats, KQuantErrorsRankAsTheirBits) {
  const int64_t rows = 64, cols = 1024;
  auto w = randn(rows * cols, 47);
  auto rms = [&](QFormat f) {
    auto q = quantize_ref(f, w.data(), rows, cols);
    std::vector<float> back(w.size());
    dequantize_ref(view_of(q, f, rows, cols), 0, rows, back.data());
    double e = 0, n = 0;
    for (size_t i = 0; i < w.size(); ++i) e += (w[i] - back[i]) * (w[i] - back[i]), n += w[i] * w[i];
    return std::sqrt(e / n);
  };
  const double q8 = rms(QFormat::Q8_0), q6k = rms(QFormat::Q6_K), q4k = rms(QFormat::Q4_K), q4 = rms(QFormat::Q4_0);
  EXPECT_LT(q8, q6k);
  EXPECT_LT(q6k, 0.3 * q4k);
  EXPECT_LT(q4k, 0.9 * q4);
}
