// The LLM engine's row kernels (backend/cpu/llm.h), compiled once per
// instruction set. Sums run in kW float lanes over a row in order, the lanes
// then added by a fixed halving tree: the same bits for a row whatever else
// runs (Note [Batch-invariant LLM kernels]).
#include <cmath>
#include <cstring>

#include <immintrin.h>

#include "backend/cpu/kernels/common.h"
#include "backend/cpu/llm.h"

namespace tessera::cpu::TESSERA_ISA {
namespace {

#if defined(__AVX512F__)
constexpr int kW = 16;
#elif defined(__AVX2__)
constexpr int kW = 8;
#else
constexpr int kW = 4;
#endif
typedef float V __attribute__((vector_size(kW * sizeof(float))));

inline V loadv(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storev(float* p, V v) { std::memcpy(p, &v, sizeof v); }
inline V splat(float f) { return V{} + f; }

// Lane l += lane l + h for h = kW/2 down to 1.
inline float hsum(V v) {
  float a[kW];
  std::memcpy(a, &v, sizeof a);
  for (int h = kW / 2; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l) a[l] += a[l + h];
  return a[0];
}

// sum_i a[i] * b[i]: kW lanes over the multiple of kW, then the tail in order.
inline float dot(const float* a, const float* b, int64_t n) {
  V acc = {};
  const int64_t nv = n / kW * kW;
  for (int64_t i = 0; i < nv; i += kW) acc += loadv(a + i) * loadv(b + i);
  float s = hsum(acc);
  for (int64_t i = nv; i < n; ++i) s += a[i] * b[i];
  return s;
}

void rms_norm_row(const float* x, const float* w, float* y, int64_t n, float eps) {
  const float ss = dot(x, x, n);
  const float r = 1.f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * r * w[i];
}

void rope_row(float* x, int64_t n_heads, int64_t head_dim, const float* cs) {
  for (int64_t h = 0; h < n_heads; ++h) {
    float* p = x + h * head_dim;
    for (int64_t i = 0; i < head_dim; i += 2) {
      const float a = p[i], b = p[i + 1], c = cs[i], s = cs[i + 1];
      p[i] = a * c - b * s;
      p[i + 1] = a * s + b * c;
    }
  }
}

void swiglu_row(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.f + vexp(-g[i])) * u[i];
}

void kv_store_row(KvFormat f, const float* x, int64_t n, uint8_t* out) {
  if (f == KvFormat::F16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = f2h(x[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
    return;
  }
  for (int64_t b = 0; b < n / kQBlock; ++b) {  // ggml quantize_row_q8_0_ref, bit for bit
    const float* v = x + b * kQBlock;
    float amax = 0.f;
    for (int j = 0; j < kQBlock; ++j) {
      const float a = std::fabs(v[j]);
      amax = a > amax ? a : amax;
    }
    const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
    BlockQ8_0 blk;
    blk.d = f2h(d);
    for (int j = 0; j < kQBlock; ++j) blk.qs[j] = static_cast<int8_t>(std::roundf(v[j] * id));
    std::memcpy(out + b * sizeof(BlockQ8_0), &blk, sizeof blk);
  }
}

// Values [off, off + n) of a stored row to f32 (n a multiple of 32 for Q8_0,
// off too).
inline void kv_load(KvFormat f, const uint8_t* row, int64_t off, int64_t n, float* out) {
  if (f == KvFormat::F16) {
    const auto* h = reinterpret_cast<const uint16_t*>(row) + off;
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
#endif
    for (; i < n; ++i) out[i] = h2f(h[i]);
    return;
  }
  const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + off / kQBlock;
  for (int64_t b = 0; b < n / kQBlock; ++b) {
    const float d = h2f(blk[b].d);
    for (int j = 0; j < kQBlock; ++j) out[b * kQBlock + j] = d * static_cast<float>(blk[b].qs[j]);
  }
}

constexpr int64_t kMaxHeadDim = 512;

// Two passes over the keys: the scores (and their max), then exp and the
// weighted sum of V rows in position order, vectorized across the head's
// dimensions; divided by the sum of weights at the end.
void paged_attention_head(const PagedAttention& a, const float* q, const int32_t* blocks, int64_t n_keys,
                          int64_t kv_head, float* scores, float* out) {
  const KvLayer& L = a.layer;
  const int64_t hd = a.head_dim, off = kv_head * hd;
  const int64_t kb = kv_row_bytes(L.k_format, L.kv_dim), vb = kv_row_bytes(L.v_format, L.kv_dim);
  alignas(64) float buf[kMaxHeadDim];
  float mx = -INFINITY;
  for (int64_t p = 0; p < n_keys; ++p) {
    const int64_t slot = blocks[p / L.block_tokens] * L.block_tokens + p % L.block_tokens;
    kv_load(L.k_format, L.k + slot * kb, off, hd, buf);
    const float s = dot(q, buf, hd) * a.scale;
    scores[p] = s;
    mx = s > mx ? s : mx;
  }
  for (int64_t p = 0; p < n_keys; ++p) scores[p] = vexp_ftz(scores[p] - mx);
  V sumv = {};
  const int64_t nv = n_keys / kW * kW;
  for (int64_t p = 0; p < nv; p += kW) sumv += loadv(scores + p);
  float sum = hsum(sumv);
  for (int64_t p = nv; p < n_keys; ++p) sum += scores[p];
  alignas(64) float acc[kMaxHeadDim];
  for (int64_t d = 0; d < hd; ++d) acc[d] = 0.f;
  for (int64_t p = 0; p < n_keys; ++p) {
    const int64_t slot = blocks[p / L.block_tokens] * L.block_tokens + p % L.block_tokens;
    kv_load(L.v_format, L.v + slot * vb, off, hd, buf);
    const float w = scores[p];
    for (int64_t d = 0; d < hd; ++d) acc[d] += w * buf[d];
  }
  const float inv = 1.f / sum;
  for (int64_t d = 0; d < hd; ++d) out[d] = acc[d] * inv;
}

}  // namespace

void fill_llm_kernels(KernelTable& t) {
  t.rms_norm_row = rms_norm_row;
  t.rope_row = rope_row;
  t.swiglu_row = swiglu_row;
  t.kv_store_row = kv_store_row;
  t.paged_attention_head = paged_attention_head;
}

}  // namespace tessera::cpu::TESSERA_ISA
