// The skinny-product kernel (backend/cpu/skinny.h): every ISA's kernel for
// f32, bf16 and f16 weights against an f64 reference, the bit-identical rows
// Note [Row-invariant skinny products] promises (whatever the number of rows,
// their grouping and the thread split), and gemm()'s epilogues on that path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/kernel_table.h"
#include "kernel_tables.h"
#include "backend/cpu/skinny.h"
#include "tessera/core/half.h"
#include "tessera/core/parallel.h"
#include "tessera/ops/ops.h"
#include "test_util.h"

namespace tessera {
namespace {

using namespace tessera::cpu;

std::vector<float> randn(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

std::vector<KernelTable> tables() { return tessera::testing::kernel_tables(); }

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor ac = a.contiguous(), bc = b.contiguous();
  return ac.shape() == bc.shape() && ac.dtype() == bc.dtype() &&
         std::memcmp(ac.raw_data(), bc.raw_data(), ac.nbytes()) == 0;
}

// Weights of one dtype, stored [n, ldw], and their values as float.
struct Weights {
  DType dtype;
  std::vector<uint16_t> half;  // bf16 or f16 bits
  std::vector<float> f32;      // the f32 weights, or the 16-bit ones' values
  const void* data() const { return dtype == DType::F32 ? static_cast<const void*>(f32.data()) : half.data(); }
};

Weights make_weights(DType dt, int64_t n, int64_t ldw, uint32_t seed) {
  Weights w{dt, {}, randn(n * ldw, seed)};
  if (dt == DType::F32) return w;
  w.half.resize(w.f32.size());
  for (size_t i = 0; i < w.f32.size(); ++i) {
    if (dt == DType::BF16) {
      BFloat16 b(w.f32[i]);
      w.half[i] = b.x;
      w.f32[i] = static_cast<float>(b);
    } else {
      Half h(w.f32[i]);
      w.half[i] = h.x;
      w.f32[i] = static_cast<float>(h);
    }
  }
  return w;
}

TEST(Skinny, EveryIsaAgainstF64) {
  for (const KernelTable& t : tables())
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (int64_t m : {1, 2, 3, 5, 16})
        for (int64_t k : {1, 7, 16, 33, 256, 785})
          for (int64_t n : {1, 5, 17, 64}) {
            const int64_t ldw = k + 3, ldx = k + 1;
            Weights w = make_weights(dt, n, ldw, static_cast<uint32_t>(k * 131 + n));
            std::vector<float> x = randn(m * ldx, static_cast<uint32_t>(m * 7 + k));
            std::vector<float> y(m * n, -1.f);
            t.skinny_rows[idx(dt)](w.data(), ldw, k, x.data(), ldx, m, y.data(), n, 0, n);
            for (int64_t i = 0; i < m; ++i)
              for (int64_t r = 0; r < n; ++r) {
                double want = 0, mag = 0;
                for (int64_t p = 0; p < k; ++p) {
                  want += static_cast<double>(x[i * ldx + p]) * w.f32[r * ldw + p];
                  mag += std::abs(static_cast<double>(x[i * ldx + p]) * w.f32[r * ldw + p]);
                }
                ASSERT_NEAR(y[i * n + r], want, 1e-6 * mag + 1e-6)
                    << t.isa << " " << dtype_name(dt) << " m " << m << " k " << k << " n " << n << " at " << i
                    << ", " << r;
              }
          }
}

// Each row the same bits alone (m = 1, one weight row at a time), among 16
// rows (blocks of weight rows, one pass per summation stream), and in any
// split of the weight rows; k with an odd and an even number of whole steps.
TEST(Skinny, RowsAreBitIdenticalWhateverTheBatch) {
  const int64_t n = 37, m = 16;
  for (const KernelTable& t : tables())
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (int64_t k : {300, 112, 785}) {
        Weights w = make_weights(dt, n, k, 5);
        std::vector<float> x = randn(m * k, 6), all(m * n), split(m * n), one(n);
        t.skinny_rows[idx(dt)](w.data(), k, k, x.data(), k, m, all.data(), n, 0, n);
        for (int64_t r0 = 0; r0 < n; r0 += 3)
          t.skinny_rows[idx(dt)](w.data(), k, k, x.data(), k, m, split.data(), n, r0, std::min<int64_t>(n, r0 + 3));
        EXPECT_EQ(std::memcmp(all.data(), split.data(), all.size() * sizeof(float)), 0) << t.isa << " k " << k;
        std::vector<float> three(3 * n);  // a small batch: one weight row at a time, three activation rows
        t.skinny_rows[idx(dt)](w.data(), k, k, x.data() + 5 * k, k, 3, three.data(), n, 0, n);
        EXPECT_EQ(std::memcmp(three.data(), all.data() + 5 * n, three.size() * sizeof(float)), 0)
            << t.isa << " " << dtype_name(dt) << " k " << k << " rows 5-7";
        for (int64_t i = 0; i < m; ++i) {
          t.skinny_rows[idx(dt)](w.data(), k, k, x.data() + i * k, k, 1, one.data(), n, 0, n);
          EXPECT_EQ(std::memcmp(one.data(), all.data() + i * n, n * sizeof(float)), 0)
              << t.isa << " " << dtype_name(dt) << " k " << k << " row " << i;
        }
      }
}

// Weights packed in interleaved groups (Note [Interleaved weight rows]):
// the same bits as the plain kernel for any batch and any split along
// groups; a k the tier's steps do not divide is refused, not packed.
TEST(Skinny, InterleavedRowsGiveTheSameBits) {
  const int64_t n = 37;
  for (const KernelTable& t : tables())
    for (DType dt : {DType::F32, DType::F16}) {
      ASSERT_TRUE(t.skinny_pack[idx(dt)] && t.skinny_rows_packed[idx(dt)]) << t.isa;
      const int64_t g = t.skinny_group;
      {
        Weights w = make_weights(dt, 5, 7, 1);
        std::vector<float> out(5 * 7, -1.f);
        EXPECT_FALSE(t.skinny_pack[idx(dt)](w.data(), 5, 7, out.data())) << t.isa;
        EXPECT_EQ(out[0], -1.f);
      }
      for (int64_t k : {112, 768})
        for (int64_t m : {1, 3, 16}) {
          Weights w = make_weights(dt, n, k, 9);
          std::vector<uint8_t> packed(n * k * dtype_size(dt));
          ASSERT_TRUE(t.skinny_pack[idx(dt)](w.data(), n, k, packed.data())) << t.isa << " k " << k;
          std::vector<float> x = randn(m * k, 10), plain(m * n), split(m * n, -1.f);
          t.skinny_rows[idx(dt)](w.data(), k, k, x.data(), k, m, plain.data(), n, 0, n);
          for (int64_t r0 = 0; r0 < n; r0 += 2 * g)
            t.skinny_rows_packed[idx(dt)](packed.data(), n, k, x.data(), k, m, split.data(), n, r0,
                                          std::min(n, r0 + 2 * g));
          EXPECT_EQ(std::memcmp(plain.data(), split.data(), plain.size() * sizeof(float)), 0)
              << t.isa << " " << dtype_name(dt) << " k " << k << " m " << m;
        }
      std::vector<float> x(768), y(n);
      Weights w = make_weights(dt, n, 768, 9);
      EXPECT_THROW_MSG(t.skinny_rows_packed[idx(dt)](w.data(), n, 768, x.data(), 768, 1, y.data(), n, 1, n),
                       "cut a group");
    }
}

// bf16 activation rows: the values and their bits.
struct Bf16Rows {
  std::vector<BFloat16> bits;
  std::vector<float> f32;
};
Bf16Rows bf16_rows(int64_t n, uint32_t seed) {
  Bf16Rows x{{}, randn(n, seed)};
  for (float& v : x.f32) {
    x.bits.emplace_back(v);
    v = static_cast<float>(x.bits.back());
  }
  return x;
}

// The bf16-dot kernel (Note [bf16 dot products]), where the CPU has one:
// against f64, every tail length, and the same bits whatever the batch.
TEST(Skinny, Bf16DotProducts) {
  const SkinnyRowsBf16 dot = kernels().skinny_rows_bf16;
  if (!dot) GTEST_SKIP() << "no bf16 dot products in kernel tier " << kernels().isa;
  for (int64_t m : {1, 2, 5, 16})
    for (int64_t k : {1, 7, 31, 32, 33, 64, 785})
      for (int64_t n : {1, 5, 17}) {
        const int64_t ldw = k + 3, ldx = k + 1;
        Weights w = make_weights(DType::BF16, n, ldw, static_cast<uint32_t>(k * 131 + n));
        Bf16Rows x = bf16_rows(m * ldx, static_cast<uint32_t>(m * 7 + k));
        std::vector<float> y(m * n, -1.f);
        dot(w.data(), ldw, k, x.bits.data(), ldx, m, y.data(), n, 0, n);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t r = 0; r < n; ++r) {
            double want = 0, mag = 0;
            for (int64_t p = 0; p < k; ++p) {
              want += static_cast<double>(x.f32[i * ldx + p]) * w.f32[r * ldw + p];
              mag += std::abs(static_cast<double>(x.f32[i * ldx + p]) * w.f32[r * ldw + p]);
            }
            ASSERT_NEAR(y[i * n + r], want, 1e-6 * mag + 1e-6) << "m " << m << " k " << k << " n " << n << " at " << i
                                                               << ", " << r;
          }
      }
  const int64_t k = 300, n = 37, m = 16;
  Weights w = make_weights(DType::BF16, n, k, 5);
  Bf16Rows x = bf16_rows(m * k, 6);
  std::vector<float> all(m * n), split(m * n), one(n);
  dot(w.data(), k, k, x.bits.data(), k, m, all.data(), n, 0, n);
  for (int64_t r0 = 0; r0 < n; r0 += 3) dot(w.data(), k, k, x.bits.data(), k, m, split.data(), n, r0, std::min<int64_t>(n, r0 + 3));
  EXPECT_EQ(std::memcmp(all.data(), split.data(), all.size() * sizeof(float)), 0);
  for (int64_t i = 0; i < m; ++i) {
    dot(w.data(), k, k, x.bits.data() + i * k, k, 1, one.data(), n, 0, n);
    EXPECT_EQ(std::memcmp(one.data(), all.data() + i * n, n * sizeof(float)), 0) << "row " << i;
  }
}

// linear() on the skinny path: against f64, and each row of a batch equal to
// the row alone, at 1 and 2 threads.
TEST(Skinny, LinearRowsMatchAloneAndReference) {
  for (DType dt : {DType::F32, DType::BF16}) {
    ASSERT_GE(skinny_max_rows(dt), 2) << "the skinny kernel is off (TESSERA_SKINNY_MAX_ROWS)";
    const int64_t rows = std::min<int64_t>(skinny_max_rows(dt), 8);
    Tensor w = testing::rand_f64({96, 200}, -1, 1, 1).to(dt), b = testing::rand_f64({96}, -1, 1, 2).to(dt);
    Tensor x = testing::rand_f64({rows, 200}, -1, 1, 3).to(dt);
    Tensor want = ops::add(ops::matmul(x.to(DType::F64), w.to(DType::F64).t()), b.to(DType::F64));
    for (int threads : {1, 2}) {
      int before = get_num_threads();
      set_num_threads(threads);
      Tensor y = ops::linear(x, w, b);
      EXPECT_CLOSE(y.to(DType::F64), want, dt == DType::F32 ? 1e-5 : 2e-2, 1e-5) << dtype_name(dt);
      for (int64_t i = 0; i < rows; ++i) {
        Tensor yi = ops::linear(x.narrow(0, i, 1), w, b);
        EXPECT_TRUE(same_bits(yi, y.narrow(0, i, 1))) << dtype_name(dt) << " row " << i << " threads " << threads;
      }
      set_num_threads(before);
    }
  }
}

// gemm()'s epilogues on the skinny path: act(alpha * A B + bias [+ C]) + residual.
TEST(Skinny, GemmEpilogues) {
  const int64_t m = 3, n = 20, k = 45;
  std::vector<float> a = randn(m * k, 1), w = randn(n * k, 2), bias = randn(n, 3), res = randn(m * n, 4);
  auto ref = [&](int64_t i, int64_t j) {
    double s = 0;
    for (int64_t p = 0; p < k; ++p) s += static_cast<double>(a[i * k + p]) * w[j * k + p];
    return s;
  };
  struct Act {
    Epilogue e;
    double (*f)(double);
  };
  const Act acts[] = {{Epilogue::None, [](double v) { return v; }},
                      {Epilogue::Relu, [](double v) { return v > 0 ? v : 0; }},
                      {Epilogue::Gelu, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }},
                      {Epilogue::Silu, [](double v) { return v / (1 + std::exp(-v)); }},
                      {Epilogue::Tanh, [](double v) { return std::tanh(v); }}};
  for (const Act& act : acts)
    for (bool accumulate : {false, true}) {
      if (accumulate && act.e != Epilogue::None) continue;  // gemm() fuses no epilogue into an accumulation
      std::vector<float> c(m * n, 0.5f);
      GemmArgs g;
      g.m = m, g.n = n, g.k = k;
      g.sa[0] = 0, g.sa[1] = k, g.sa[2] = 1;
      g.sb[0] = 0, g.sb[1] = 1, g.sb[2] = k;  // W^T
      g.sc[0] = 0, g.sc[1] = n, g.sc[2] = 1;
      g.a = a.data(), g.b = w.data(), g.c = c.data(), g.bias = bias.data();
      g.alpha = 0.5;
      g.accumulate = accumulate;
      g.act = act.e;
      g.residual = accumulate ? nullptr : res.data();
      ASSERT_TRUE(skinny_ok(g));
      gemm(g);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double v = act.f(0.5 * ref(i, j) + bias[j] + (accumulate ? 0.5 : 0.0)) + (accumulate ? 0.0 : res[i * n + j]);
          ASSERT_NEAR(c[i * n + j], v, 1e-4 * (1 + std::abs(v))) << static_cast<int>(act.e) << " at " << i << ", " << j;
        }
    }
}

}  // namespace
}  // namespace tessera
