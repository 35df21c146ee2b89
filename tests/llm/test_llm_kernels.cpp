// The LLM engine's row kernels (backend/cpu/llm.h) at every kernel tier
// against their portable references: the cache's stored rows bit for bit,
// the float kernels within a few ulp of the sums' size; and each row's result
// the same wherever its cache blocks lie.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/kernel_table.h"
#include "kernel_tables.h"

namespace tessera {
namespace {

using cpu::KernelTable;
using cpu::KvFormat;

std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " [" << i << "]";
}

TEST(LlmKernels, RowKernelsMatchTheirReferences) {
  for (const KernelTable& kt : testing::kernel_tables()) {
    SCOPED_TRACE(kt.isa);
    for (int64_t n : {1, 7, 64, 100, 4096}) {
      const std::vector<float> x = randn(n, 1), w = randn(n, 2), u = randn(n, 3, 4.f);
      std::vector<float> y(n), r(n);
      kt.rms_norm_row(x.data(), w.data(), y.data(), n, 1e-5f);
      cpu::rms_norm_row_ref(x.data(), w.data(), r.data(), n, 1e-5f);
      expect_near_all(y, r, 1e-5, "rms_norm");
      kt.swiglu_row(u.data(), w.data(), y.data(), n);
      cpu::swiglu_row_ref(u.data(), w.data(), r.data(), n);
      expect_near_all(y, r, 1e-5, "swiglu");
    }
    for (int64_t hd : {2, 16, 64, 128}) {
      const int64_t heads = 3;
      std::vector<float> cs(hd);
      for (int64_t i = 0; i < hd / 2; ++i) {
        cs[2 * i] = std::cos(0.37f * static_cast<float>(i + 1));
        cs[2 * i + 1] = std::sin(0.37f * static_cast<float>(i + 1));
      }
      std::vector<float> a = randn(heads * hd, 4), b = a;
      kt.rope_row(a.data(), heads, hd, cs.data());
      cpu::rope_row_ref(b.data(), heads, hd, cs.data());
      expect_near_all(a, b, 1e-6, "rope");
    }
    for (KvFormat f : {KvFormat::F16, KvFormat::Q8_0}) {
      const int64_t n = 256;
      std::vector<float> x = randn(n, 5, 3.f);
      x[7] = 0.f;
      x[40] = -1e-8f;
      for (int j = 64; j < 96; ++j) x[j] = 0.f;  // an all-zero Q8_0 block
      x[100] = NAN;                               // and one with a NaN
      x[140] = INFINITY;
      std::vector<uint8_t> got(cpu::kv_row_bytes(f, n)), want(got.size());
      kt.kv_store_row(f, x.data(), n, got.data());
      cpu::kv_store_row_ref(f, x.data(), n, want.data());
      EXPECT_EQ(got, want) << cpu::kv_format_name(f);
    }
  }
}

// Every query's output is the reference's within float rounding, and the
// same bits whatever set it comes in and wherever its blocks lie.
TEST(LlmKernels, PagedAttentionMatchesTheReferenceWhateverTheSetAndBlocks) {
  for (const KernelTable& kt : testing::kernel_tables())
    for (KvFormat kf : {KvFormat::F16, KvFormat::Q8_0})
      for (KvFormat vf : {KvFormat::F16, KvFormat::Q8_0})
        for (int64_t hd : {64, 16, 96, 24, 32}) {  // head sizes below, at and past the passes of 64, 32 and 16 dimensions
        if ((kf == KvFormat::Q8_0 || vf == KvFormat::Q8_0) && hd % 32) continue;  // Q8_0 rows hold whole blocks
        SCOPED_TRACE(std::string(kt.isa) + " K " + cpu::kv_format_name(kf) + " V " + cpu::kv_format_name(vf) +
                     " head " + std::to_string(hd));
        const int64_t kv_heads = 2, kv_dim = hd * kv_heads, bt = 32, n_blocks = 8, keys = 150;
        const int64_t kb = kf == KvFormat::F16 ? kv_dim * 2 : cpu::kv_row_bytes(kf, kv_dim);
        const int64_t vb = cpu::kv_row_bytes(vf, kv_dim);
        std::vector<uint8_t> k(n_blocks * bt * kb), v(n_blocks * bt * vb), k2 = k, v2 = v;
        cpu::KvLayer la{kf, vf, bt, kv_dim, hd, k.data(), v.data()}, lb{kf, vf, bt, kv_dim, hd, k2.data(), v2.data()};
        // The same tokens in two block layouts: in order, and scattered.
        const std::vector<int32_t> a = {0, 1, 2, 3, 4}, b = {6, 3, 0, 7, 2};
        for (int64_t p = 0; p < keys; ++p) {
          const std::vector<float> kr = randn(kv_dim, 100 + p, 2.f), vr = randn(kv_dim, 500 + p);
          cpu::kv_store_k(la, kr.data(), a[p / bt], p % bt);
          cpu::kv_store_v(la, vr.data(), a[p / bt], p % bt);
          cpu::kv_store_k(lb, kr.data(), b[p / bt], p % bt);
          cpu::kv_store_v(lb, vr.data(), b[p / bt], p % bt);
        }
        for (int64_t p = 0; p < keys; p += 37)
          for (int64_t e = 0; e < kv_dim; e += 13) ASSERT_EQ(cpu::kv_load_k(la, a[p / bt], p % bt, e),
                                                             cpu::kv_load_k(lb, b[p / bt], p % bt, e));
        cpu::PagedAttention pa{la, hd, 0.125f}, pb{lb, hd, 0.125f};
        std::vector<float> scratch(cpu::attention_scratch(keys));
        const std::vector<int64_t> n_keys = {1, 15, 16, 17, 150, 149, 33};
        std::vector<std::vector<float>> q, alone(n_keys.size());
        for (size_t j = 0; j < n_keys.size(); ++j) q.push_back(randn(hd, 7 + j));
        for (int64_t h = 0; h < kv_heads; ++h) {
          for (size_t j = 0; j < n_keys.size(); ++j) {
            alone[j].assign(hd, 0.f);
            std::vector<float> want(hd);
            cpu::AttnQuery one{q[j].data(), alone[j].data(), n_keys[j]};
            kt.paged_attention_set(pa, &one, 1, a.data(), h, scratch.data());
            cpu::AttnQuery ref{q[j].data(), want.data(), n_keys[j]};
            cpu::paged_attention_ref(pa, ref, a.data(), h);
            expect_near_all(alone[j], want, 2e-5, "attention");
          }
          // Sets of 2 to 7 queries, in the other block layout.
          for (int nq = 2; nq <= static_cast<int>(n_keys.size()); ++nq)
            for (size_t j0 = 0; j0 + nq <= n_keys.size(); ++j0) {
              std::vector<std::vector<float>> out(nq, std::vector<float>(hd));
              cpu::AttnQuery qs[cpu::kAttnQueries];
              for (int j = 0; j < nq; ++j) qs[j] = {q[j0 + j].data(), out[j].data(), n_keys[j0 + j]};
              kt.paged_attention_set(pb, qs, nq, b.data(), h, scratch.data());
              for (int j = 0; j < nq; ++j) EXPECT_EQ(out[j], alone[j0 + j]) << "set of " << nq << ", query " << j0 + j;
            }
        }
      }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// The activation rows the int8 products read: the kernel's bytes are the
// reference's, ties rounded half to even, a block with a NaN or an infinity
// all zero codes and a NaN scale, an all-zero block a zero scale.
TEST(LlmKernels, PackedActivationRowsMatchTheReference) {
  const KernelTable& kt = cpu::kernels();
  if (!kt.qpack_act) GTEST_SKIP() << "no VNNI kernels in tier " << kt.isa;
  const int64_t cols = 256, ab = cpu::packed_act_bytes(cols);
  std::vector<float> x = randn(cols, 21, 3.f);
  for (int j = 0; j < 32; ++j) x[j] = j == 7 ? 127.f : static_cast<float>(j % 9) - 4.5f;  // d = 1: ties at .5
  for (int j = 32; j < 64; ++j) x[j] = 0.f;
  x[64 + 3] = NAN;
  x[96 + 31] = INFINITY;
  x[128] = -INFINITY;
  x[160] = 3.3e38f;   // finite, the largest scale
  x[192] = -1e-30f;   // a block of tiny values
  for (int j = 193; j < 224; ++j) x[j] = 1e-31f * static_cast<float>(j - 200);
  std::vector<uint8_t> got(ab), want(ab);
  kt.qpack_act(x.data(), cols, got.data());
  cpu::qpack_act_ref(x.data(), cols, want.data());
  EXPECT_EQ(got, want);
  // The ties, and the non-finite and zero blocks, as stated.
  const int8_t ties[9] = {-4, -4, -2, -2, 0, 0, 2, 2, 4};  // -4.5 .. 3.5 rounded half to even
  for (int j = 0; j < 32; ++j)
    if (j != 7) EXPECT_EQ(static_cast<int>(got[j]) - 128, ties[j % 9]) << j;
  float d[8];
  std::memcpy(d, got.data() + cols, sizeof d);
  EXPECT_EQ(d[0], 1.f);
  EXPECT_EQ(d[1], 0.f);
  EXPECT_TRUE(std::isnan(d[2]) && std::isnan(d[3]) && std::isnan(d[4]));
  for (int j = 64; j < 160; ++j) EXPECT_EQ(got[j], 128) << j;
  for (int seed = 0; seed < 20; ++seed) {  // random rows of several magnitudes
    const std::vector<float> r = randn(cols, 100 + seed, std::pow(10.f, static_cast<float>(seed % 7 - 3)));
    kt.qpack_act(r.data(), cols, got.data());
    cpu::qpack_act_ref(r.data(), cols, want.data());
    ASSERT_EQ(got, want) << seed;
  }
}

// The int8 products over repacked Q8_0/Q4_0/Q4_K/Q6_K weights (the avx2 tier's
// vpmaddubsw kernel, the avx512_bf16 tier's VNNI kernel; the avx512_amx tier's
// AMX tiles for whole groups of 16 tokens):
// the reference's bits (Note [Packed int8 products]), which are within float
// rounding of the f64 product of the dequantized values; each token's
// outputs the same bits alone or among others, whatever the row split.
TEST(LlmKernels, PackedInt8ProductsMatchTheReferenceAndAreBatchInvariant) {
  const KernelTable& kt = cpu::kernels();
  if (!kt.qgemm_rows[static_cast<int>(cpu::QFormat::Q8_0)]) GTEST_SKIP() << "no VNNI kernels in tier " << kt.isa;
  for (cpu::QFormat f : {cpu::QFormat::Q8_0, cpu::QFormat::Q4_0, cpu::QFormat::Q4_K, cpu::QFormat::Q6_K})
    for (int64_t cols : {32, 96, 256, 512}) {
      if (cols % cpu::qblock_elems(f)) continue;
      const int64_t rows = 40, m = 37;  // two whole AMX token groups and 5 tokens more; a part row group
      const std::vector<float> w = randn(rows * cols, 11, 0.5f), x = randn(m * cols, 12, 2.f);
      const cpu::QuantizedWeights q = cpu::quantize_ref(f, w.data(), rows, cols);
      const cpu::QuantMatrix qm = cpu::view_of(q, f, rows, cols);
      std::vector<uint8_t> packed(cpu::packed_matrix_bytes(f, rows, cols));
      cpu::qpack_weights(qm, 0, (rows + cpu::kPackRows - 1) / cpu::kPackRows, packed.data());
      const int64_t ab = cpu::packed_act_bytes(cols);
      std::vector<uint8_t> act(m * ab);
      for (int64_t i = 0; i < m; ++i) kt.qpack_act(x.data() + i * cols, cols, act.data() + i * ab);
      const cpu::PackedQMatrix pm{f, rows, cols, packed.data()};
      std::vector<float> all(m * rows), want(m * rows);
      kt.qgemm_rows[static_cast<int>(f)](pm, act.data(), m, all.data(), rows, 0, rows);
      cpu::qgemm_ref(pm, act.data(), m, want.data(), rows);
      for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], want[i]) << cpu::qformat_name(f) << " " << cols << " " << i;
      // The reference against the f64 product of what the codes stand for.
      std::vector<float> wd(rows * cols);
      cpu::dequantize_ref(qm, 0, rows, wd.data());
      for (int64_t i = 0; i < m; ++i) {
        std::vector<float> xd(cols);
        for (int64_t c = 0; c < cols; ++c) {
          float dx;
          std::memcpy(&dx, act.data() + i * ab + cols + c / 32 * 4, 4);
          xd[c] = dx * static_cast<float>(act[i * ab + c] - 128);
          if (c % 32 == 31) {  // the block's code sum, as packed
            int32_t sx = 0, want_sx = 0;
            std::memcpy(&sx, act.data() + i * ab + cols + cols / 32 * 4 + c / 32 * 4, 4);
            for (int64_t k = c - 31; k <= c; ++k) want_sx += act[i * ab + k] - 128;
            ASSERT_EQ(sx, want_sx);
          }
        }
        for (int64_t r = 0; r < rows; ++r) {
          double e = 0, mag = 0;
          for (int64_t c = 0; c < cols; ++c) {
            e += static_cast<double>(wd[r * cols + c]) * xd[c];
            mag += std::fabs(static_cast<double>(wd[r * cols + c]) * xd[c]);
          }
          ASSERT_NEAR(want[i * rows + r], e, 2e-6 * mag + 1e-30) << i << " " << r;
        }
      }
      for (int64_t i = 0; i < m; ++i) {  // each token alone, rows split at a group
        std::vector<float> one(rows);
        kt.qgemm_rows[static_cast<int>(f)](pm, act.data() + i * ab, 1, one.data(), rows, 0, 16);
        kt.qgemm_rows[static_cast<int>(f)](pm, act.data() + i * ab, 1, one.data(), rows, 16, rows);
        for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(one[r], all[i * rows + r]) << cpu::qformat_name(f) << " " << cols;
      }
      // 16 tokens from the middle (an AMX tile of other neighbours), every row.
      std::vector<float> mid(16 * rows);
      kt.qgemm_rows[static_cast<int>(f)](pm, act.data() + 5 * ab, 16, mid.data(), rows, 0, rows);
      for (int64_t r = 0; r < 16 * rows; ++r) EXPECT_EQ(mid[r], all[5 * rows + r]) << cpu::qformat_name(f) << " " << cols;
    }
}

}  // namespace
}  // namespace tessera
