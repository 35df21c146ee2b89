// The LLM engine's row kernels (backend/cpu/llm.h) at every kernel tier
// against their portable references: the cache's stored rows bit for bit,
// the float kernels within a few ulp of the sums' size; and each row's result
// the same wherever its cache blocks lie.
#include <gtest/gtest.h>

#include <cmath>
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
      std::vector<uint8_t> got(cpu::kv_row_bytes(f, n)), want(got.size());
      kt.kv_store_row(f, x.data(), n, got.data());
      cpu::kv_store_row_ref(f, x.data(), n, want.data());
      EXPECT_EQ(got, want) << cpu::kv_format_name(f);
    }
  }
}

TEST(LlmKernels, PagedAttentionMatchesTheReferenceWhereverTheBlocksLie) {
  for (const KernelTable& kt : testing::kernel_tables())
    for (KvFormat kf : {KvFormat::F16, KvFormat::Q8_0})
      for (KvFormat vf : {KvFormat::F16, KvFormat::Q8_0}) {
        SCOPED_TRACE(std::string(kt.isa) + " K " + cpu::kv_format_name(kf) + " V " + cpu::kv_format_name(vf));
        const int64_t hd = 64, kv_heads = 2, kv_dim = hd * kv_heads, bt = 16, n_blocks = 12, keys = 150;
        const int64_t kb = cpu::kv_row_bytes(kf, kv_dim), vb = cpu::kv_row_bytes(vf, kv_dim);
        std::vector<uint8_t> k(n_blocks * bt * kb), v(n_blocks * bt * vb);
        // The same rows in two block layouts: blocks 0..9 in order, and scattered.
        const std::vector<int32_t> a = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, b = {11, 3, 7, 0, 10, 2, 9, 5, 1, 8};
        std::vector<uint8_t> k2 = k, v2 = v;
        for (int64_t p = 0; p < keys; ++p) {
          const std::vector<float> kr = randn(kv_dim, 100 + p, 2.f), vr = randn(kv_dim, 500 + p);
          for (auto [kk, vv, tab] : {std::tuple{&k, &v, &a}, std::tuple{&k2, &v2, &b}}) {
            const int64_t slot = (*tab)[p / bt] * bt + p % bt;
            kt.kv_store_row(kf, kr.data(), kv_dim, kk->data() + slot * kb);
            kt.kv_store_row(vf, vr.data(), kv_dim, vv->data() + slot * vb);
          }
        }
        cpu::PagedAttention pa;
        pa.layer = {kf, vf, bt, kv_dim, k.data(), v.data()};
        pa.head_dim = hd;
        pa.scale = 0.125f;
        cpu::PagedAttention pb = pa;
        pb.layer.k = k2.data();
        pb.layer.v = v2.data();
        const std::vector<float> q = randn(hd, 7);
        for (int64_t n : {1, 15, 16, 17, 150})
          for (int64_t h = 0; h < kv_heads; ++h) {
            std::vector<float> scores(keys), got(hd), again(hd), want(hd);
            kt.paged_attention_head(pa, q.data(), a.data(), n, h, scores.data(), got.data());
            kt.paged_attention_head(pb, q.data(), b.data(), n, h, scores.data(), again.data());
            cpu::paged_attention_head_ref(pa, q.data(), a.data(), n, h, scores.data(), want.data());
            expect_near_all(got, want, 2e-5, "attention");
            EXPECT_EQ(got, again) << n << " keys, head " << h;
          }
      }
}

}  // namespace
}  // namespace tessera
