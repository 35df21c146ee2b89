// Portable references of the LLM engine's kernels (backend/cpu/llm.h).
#include "backend/cpu/llm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/kernel_table.h"
#include "backend/cpu/quant.h"
#include "tessera/core/half.h"

namespace tessera::cpu {

void rms_norm_row_ref(const float* x, const float* w, float* y, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * r * w[i]);
}

void rope_row_ref(float* x, int64_t n_heads, int64_t head_dim, const float* cs) {
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      float* p = x + h * head_dim + 2 * i;
      const double c = cs[2 * i], s = cs[2 * i + 1], a = p[0], b = p[1];
      p[0] = static_cast<float>(a * c - b * s);
      p[1] = static_cast<float>(a * s + b * c);
    }
}

void swiglu_row_ref(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g[i];
    y[i] = static_cast<float>(gi / (1.0 + std::exp(-gi)) * u[i]);
  }
}

void kv_store_row_ref(KvFormat f, const float* x, int64_t n, uint8_t* out) {
  if (f == KvFormat::F16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = Half::from_float(x[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
    return;
  }
  for (int64_t b = 0; b < n / kQBlock; ++b) {  // ggml quantize_row_q8_0_ref
    const float* v = x + b * kQBlock;
    float amax = 0.f;
    bool finite = true;  // NaN or infinity: a NaN scale, codes 0
    for (int j = 0; j < kQBlock; ++j) {
      amax = std::max(amax, std::fabs(v[j]));
      finite = finite && std::fabs(v[j]) <= 3.4e38f;
    }
    const float d = finite ? amax / 127.f : NAN, id = finite && d != 0.f ? 1.f / d : 0.f;
    BlockQ8_0 blk;
    blk.d = Half::from_float(d);
    for (int j = 0; j < kQBlock; ++j) blk.qs[j] = static_cast<int8_t>(finite ? std::roundf(v[j] * id) : 0.f);
    std::memcpy(out + b * sizeof(BlockQ8_0), &blk, sizeof blk);
  }
}

float kv_load_ref(KvFormat f, const uint8_t* row, int64_t i) {
  if (f == KvFormat::F16) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    return Half::to_float(h);
  }
  BlockQ8_0 blk;
  std::memcpy(&blk, row + i / kQBlock * sizeof(BlockQ8_0), sizeof blk);
  return Half::to_float(blk.d) * static_cast<float>(blk.qs[i % kQBlock]);
}

namespace {
// A token's row (kv_dim values) into a head-major region, head by head.
void store_heads(const KvLayer& L, KvFormat f, uint8_t* base, const float* x, int64_t b, int64_t s) {
  for (int64_t h = 0; h < L.kv_dim / L.head_dim; ++h)
    kernels().kv_store_row(f, x + h * L.head_dim, L.head_dim, kv_head_row(L, f, base, b, s, h));
}
float load_head(const KvLayer& L, KvFormat f, uint8_t* base, int64_t b, int64_t s, int64_t e) {
  return kv_load_ref(f, kv_head_row(L, f, base, b, s, e / L.head_dim), e % L.head_dim);
}
}  // namespace

void kv_store_k(const KvLayer& L, const float* x, int64_t b, int64_t s) {
  if (L.k_format == KvFormat::Q8_0) return store_heads(L, L.k_format, L.k, x, b, s);
  auto* k = reinterpret_cast<uint16_t*>(L.k) + b * L.kv_dim * L.block_tokens + s;
  for (int64_t e = 0; e < L.kv_dim; ++e) k[e * L.block_tokens] = Half::from_float(x[e]);
}

void kv_store_v(const KvLayer& L, const float* x, int64_t b, int64_t s) { store_heads(L, L.v_format, L.v, x, b, s); }

float kv_load_k(const KvLayer& L, int64_t b, int64_t s, int64_t e) {
  if (L.k_format == KvFormat::Q8_0) return load_head(L, L.k_format, L.k, b, s, e);
  return Half::to_float(reinterpret_cast<const uint16_t*>(L.k)[(b * L.kv_dim + e) * L.block_tokens + s]);
}

float kv_load_v(const KvLayer& L, int64_t b, int64_t s, int64_t e) { return load_head(L, L.v_format, L.v, b, s, e); }

void paged_attention_ref(const PagedAttention& a, const AttnQuery& q, const int32_t* blocks, int64_t kv_head) {
  const KvLayer& L = a.layer;
  const int64_t n = q.n_keys, bt = L.block_tokens, off = kv_head * a.head_dim;
  std::vector<double> sc(static_cast<size_t>(n));
  double mx = -INFINITY;
  for (int64_t p = 0; p < n; ++p) {
    double s = 0;
    for (int64_t d = 0; d < a.head_dim; ++d) s += static_cast<double>(q.q[d]) * kv_load_k(L, blocks[p / bt], p % bt, off + d);
    sc[p] = s * a.scale;
    mx = std::max(mx, sc[p]);
  }
  double sum = 0;
  for (int64_t p = 0; p < n; ++p) sum += std::exp(sc[p] - mx);
  for (int64_t d = 0; d < a.head_dim; ++d) {
    double o = 0;
    for (int64_t p = 0; p < n; ++p) o += std::exp(sc[p] - mx) / sum * kv_load_v(L, blocks[p / bt], p % bt, off + d);
    q.out[d] = static_cast<float>(o);
  }
}

}  // namespace tessera::cpu
