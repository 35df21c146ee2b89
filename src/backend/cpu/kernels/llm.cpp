// The LLM engine's row kernels (backend/cpu/llm.h), compiled once per
// instruction set. Sums run in kW float lanes over a row in order, the lanes
// then added by a fixed halving tree: the same bits for a row whatever else
// runs (Note [Batch-invariant LLM kernels]).
#include <cmath>
#include <cstring>
#include <type_traits>

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
    bool finite = true;  // a NaN or infinity (a diverged model) makes the scale NaN, the codes 0
    for (int j = 0; j < kQBlock; ++j) {
      const float a = std::fabs(v[j]);
      amax = a > amax ? a : amax;
      finite = finite && a <= 3.4e38f;
    }
    const float d = finite ? amax / 127.f : NAN, id = finite && d != 0.f ? 1.f / d : 0.f;
    BlockQ8_0 blk;
    blk.d = f2h(d);
    for (int j = 0; j < kQBlock; ++j) blk.qs[j] = static_cast<int8_t>(finite ? std::roundf(v[j] * id) : 0.f);
    std::memcpy(out + b * sizeof(BlockQ8_0), &blk, sizeof blk);
  }
}

constexpr int64_t kMaxHeadDim = 512;  // the buffers below (the engine checks models against it)

// Values [off, off + n) of a stored row to f32 (n a multiple of 32 for Q8_0,
// off too).
inline void kv_load(KvFormat f, const uint8_t* row, int64_t off, int64_t n, float* out) {
  if (f == KvFormat::F16) {
    const auto* h = reinterpret_cast<const uint16_t*>(row) + off;
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
#endif
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

// An f16 cache's keys of the run at slot s0 of block b, key head at offset
// off: dimension d of its 16 keys at the result + d * block_tokens.
inline const uint16_t* f16_key_run(const KvLayer& L, int64_t b, int64_t s0, int64_t off) {
  return reinterpret_cast<const uint16_t*>(L.k) + (b * L.kv_dim + off) * L.block_tokens + s0;
}

// 16 keys' values for one key head: kt[d * 16 + j] = dimension d of key j
// of the run starting at slot s0 of block b.
inline void load_keys16(const KvLayer& L, int64_t b, int64_t s0, int64_t off, int64_t hd, float* kt) {
  const int64_t bt = L.block_tokens;
  if (L.k_format == KvFormat::F16) {
    const uint16_t* h = f16_key_run(L, b, s0, off);
    for (int64_t d = 0; d < hd; ++d) kv_load(KvFormat::F16, reinterpret_cast<const uint8_t*>(h + d * bt), 0, 16, kt + d * 16);
    return;
  }
  alignas(64) float row[kMaxHeadDim];
  for (int j = 0; j < 16; ++j) {
    kv_load(L.k_format, kv_head_row(L, L.k_format, L.k, b, s0 + j, off / hd), 0, hd, row);
    for (int64_t d = 0; d < hd; ++d) kt[d * 16 + j] = row[d];
  }
}

// Note [Prefetching the next runs]
// A sequence's blocks lie anywhere in the pool, and one key head's run of 16
// keys is 2 KB of f16 keys and 2 KB of values: too short for the hardware
// prefetcher to follow. Decode attention waited on every run's lines and
// read the cache at 11 GB/s a thread, where one thread reads memory in order
// at 31 (AMD EPYC Zen 4). The loops over runs ask for the run kAhead further
// on while working on this one, into L2 (prefetcht1; prefetcht0 gained
// nothing: a run's 32 lines queue behind L1's few miss buffers). A step of 8
// decodes of the 110M model at 1,024 tokens of context: 17.9 -> 12.3 ms; at
// 256, 6.8 -> 6.0 ms (2 threads). No effect on any result.
constexpr int64_t kAhead = 2;
inline void prefetch_bytes(const uint8_t* p, int64_t bytes) {
  for (int64_t l = 0; l < bytes; l += 64) _mm_prefetch(reinterpret_cast<const char*>(p + l), _MM_HINT_T1);
}
// The keys of the run at slot s0 of block b, key head at offset off.
inline void prefetch_keys16(const KvLayer& L, int64_t b, int64_t s0, int64_t off, int64_t hd) {
  const int64_t bt = L.block_tokens;
  if (L.k_format != KvFormat::F16)
    return prefetch_bytes(kv_head_row(L, L.k_format, L.k, b, s0, off / hd), 16 * kv_row_bytes(L.k_format, hd));
  const auto* h = reinterpret_cast<const uint8_t*>(f16_key_run(L, b, s0, off));
  if (bt == 16) return prefetch_bytes(h, hd * 32);  // the run's dimensions lie together
  for (int64_t d = 0; d < hd; ++d) prefetch_bytes(h + d * bt * 2, 32);
}

// 16 float lanes whatever the ISA, passed by reference: a 64-byte vector by
// value changes the ABI below AVX-512.
#if defined(__AVX512F__)
typedef float V16 __attribute__((vector_size(64)));
inline V16 vmax(const V16& a, const V16& b) { return a > b ? a : b; }
inline void load16(V16& v, const float* p) { std::memcpy(&v, p, sizeof v); }
#else
// Below AVX-512, two (AVX2) or four (SSE2) native vectors: GCC lowered a
// 64-byte generic vector there through the stack, an op at a time, and the
// AVX2 tier's attention took half of a 512-token prefill (110M model, Zen 5).
// The same operations lane by lane, so the same bits.
struct V16 {
#if defined(__AVX2__)
  static constexpr int kParts = 2;
#else
  static constexpr int kParts = 4;
#endif
  typedef float P __attribute__((vector_size(64 / kParts)));
  P p[kParts] = {};
  V16& operator+=(const V16& o) {
    for (int i = 0; i < kParts; ++i) p[i] += o.p[i];
    return *this;
  }
  V16& operator-=(float s) {
    for (int i = 0; i < kParts; ++i) p[i] -= s;
    return *this;
  }
  float operator[](int l) const { return p[l / (16 / kParts)][l % (16 / kParts)]; }
};
inline V16 operator*(float s, const V16& v) {
  V16 r;
  for (int i = 0; i < V16::kParts; ++i) r.p[i] = s * v.p[i];
  return r;
}
inline V16 operator*(const V16& v, float s) {
  V16 r;
  for (int i = 0; i < V16::kParts; ++i) r.p[i] = v.p[i] * s;
  return r;
}
inline V16 operator+(const V16& a, const V16& b) {
  V16 r;
  for (int i = 0; i < V16::kParts; ++i) r.p[i] = a.p[i] + b.p[i];
  return r;
}
inline V16 vmax(const V16& a, const V16& b) {
  V16 r;
  for (int i = 0; i < V16::kParts; ++i) r.p[i] = a.p[i] > b.p[i] ? a.p[i] : b.p[i];
  return r;
}
inline void load16(V16& v, const float* p) {
  for (int i = 0; i < V16::kParts; ++i) std::memcpy(&v.p[i], p + i * (16 / V16::kParts), sizeof v.p[i]);
}
#endif
inline float hsum16(const V16& v) {
  float a[16];
  std::memcpy(a, &v, sizeof a);
  for (int h = 8; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l) a[l] += a[l + h];
  return a[0];
}

// Queries whose scores and outputs are computed together, so each key and
// value loaded feeds that many products: groups of 4, then of 2, with
// AVX-512's 32 vectors to hold their accumulators; one at a time with fewer.
// (AVX2 in pairs, the scores in runs of 8 keys so that 2 queries' chains
// fit its 16 registers, made attention 13% of a 512-token prefill where
// one at a time takes 11.5%: each query's broadcast then fed half as many
// products.) f(j, G) for each group [j, j + G), G a compile-time constant.
template <typename F>
inline void by_groups(int nq, const F& f) {
  int j = 0;
#if defined(__AVX512F__)
  for (; j + 4 <= nq; j += 4) f(j, std::integral_constant<int, 4>{});
  for (; j + 2 <= nq; j += 2) f(j, std::integral_constant<int, 2>{});
#endif
  for (; j < nq; ++j) f(j, std::integral_constant<int, 1>{});
}
// Up to this many queries read an f16 cache's runs as they are, widening in
// registers; more widen each run to floats once for all of them.
#if defined(__AVX512F__)
constexpr int kDirect = 2;
#else
constexpr int kDirect = 1;
#endif

// 16 values as floats: from floats, or widened from f16 (exact either way).
inline void load16(V16& v, const uint16_t* h) {
#if defined(__AVX512F__)
  const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
  std::memcpy(&v, &x, sizeof v);
#elif defined(__F16C__)
  const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 8)));
  std::memcpy(&v, &lo, sizeof lo);
  std::memcpy(reinterpret_cast<char*>(&v) + sizeof lo, &hi, sizeof hi);
#else
  float f[16];
  for (int i = 0; i < 16; ++i) f[i] = h2f(h[i]);
  std::memcpy(&v, f, sizeof v);
#endif
}
inline float to_float(float x) { return x; }
inline float to_float(uint16_t h) { return h2f(h); }

// Scores of queries q[0, Q) against 16 keys, dimension-major (dimension d
// of the 16 keys at k + d * ks: floats widened once for a set, or the
// cache's own f16 run for a query or two):
// sv[j] = ((c0 + c1) + (c2 + c3)) * scale, chain c_r summing dimensions
// d = r mod 4 in order.
template <int Q, typename T>
inline void scores16(const float* const* q, const T* kd, int64_t ks, int64_t hd, float scale, V16* sv) {
  V16 acc[Q][4], k;
  for (int j = 0; j < Q; ++j)
    for (int r = 0; r < 4; ++r) acc[j][r] = V16{};
  int64_t d = 0;
  for (; d + 4 <= hd; d += 4)
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      load16(k, kd + (d + r) * ks);
#pragma GCC unroll 4
      for (int j = 0; j < Q; ++j) acc[j][r] += q[j][d + r] * k;
    }
  for (; d < hd; ++d) {
    load16(k, kd + d * ks);
    for (int j = 0; j < Q; ++j) acc[j][d & 3] += q[j][d] * k;
  }
  for (int j = 0; j < Q; ++j) sv[j] = ((acc[j][0] + acc[j][1]) + (acc[j][2] + acc[j][3])) * scale;
}

// One multiply-add rounded as this tier's vector code rounds it (fused where
// the tier has FMA), so that the scalar remainder cannot depend on how the
// compiler treats the loop around it.
inline float fma_or_not(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return c + a * b;
#endif
}

// Dimensions [d, d + 16U) of weigh_values: U vectors a query held in
// registers across the keys.
template <int Q, int U, typename T>
inline void weigh_pass(float* const* acc, const float* const* w, int64_t n, const T* vb, int64_t hd, int64_t d) {
  V16 o[Q][U], v[U];
  for (int j = 0; j < Q; ++j)
    for (int u = 0; u < U; ++u) load16(o[j][u], acc[j] + d + 16 * u);
  for (int64_t i = 0; i < n; ++i) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) load16(v[u], vb + i * hd + d + 16 * u);
#pragma GCC unroll 4
    for (int j = 0; j < Q; ++j)
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) o[j][u] += w[j][i] * v[u];
  }
  for (int j = 0; j < Q; ++j) std::memcpy(acc[j] + d, o[j], sizeof o[j]);
}

// acc[j][0, hd) += w[j][i] * v[i] for keys i < n, in order, per dimension
// (v: key i's values at vb + i * hd, floats or the cache's f16).
template <int Q, typename T>
inline void weigh_values(float* const* acc, const float* const* w, int64_t n, const T* vb, int64_t hd) {
  int64_t d = 0;
#if defined(__AVX512F__)
  // 64 dimensions a pass where 32 vectors hold them; with 16 (AVX2) GCC kept
  // a pass's 8 accumulators on the stack, stored and reloaded every key
  // (prefill of 512 tokens, 110M model: attention 15% of the time).
  for (; d + 64 <= hd; d += 64) weigh_pass<Q, 4>(acc, w, n, vb, hd, d);
#endif
  // then 32 (two chains a query where one would wait on each add), then 16
  for (; d + 32 <= hd; d += 32) weigh_pass<Q, 2>(acc, w, n, vb, hd, d);
  for (; d + 16 <= hd; d += 16) weigh_pass<Q, 1>(acc, w, n, vb, hd, d);
  for (; d < hd; ++d)  // a head size not a multiple of 16
    for (int j = 0; j < Q; ++j)
      for (int64_t i = 0; i < n; ++i) acc[j][d] = fma_or_not(w[j][i], to_float(vb[i * hd + d]), acc[j][d]);
}

// Note [Batch-invariant LLM kernels]: every step below runs per query in an
// order fixed by its n_keys alone, so the set a query comes in changes nothing.
//   scores, 16 keys at a time: four chains over the dimensions d = c mod 4,
//     in order, added as (0 + 1) + (2 + 3), times the scale;
//   the max; exp(s - max); their sum in 16 lanes by runs of 16, the lanes
//     added by the halving tree, then the leftover keys in order;
//   the output: sum over keys in order of weight * value, then / sum.
// Each run of 16 keys is read and widened once for all the queries of the
// set, and used by a group of them at a time (by_groups); a query's scores
// past its n_keys are computed with the others' and never read. Up to
// kDirect queries (a decode; a decode's query heads sharing a key head)
// read an f16 cache's runs as they are, widening in registers: the same
// values, so the same bits, without the trip through scratch (a decode at
// 2,048 tokens of context on a 110M model: 7.3 to 5.5 ms a token, AMD EPYC
// Zen 4, 2 threads).
void paged_attention_set(const PagedAttention& a, const AttnQuery* qs, int nq, const int32_t* blocks,
                         int64_t kv_head, float* scratch) {
  const KvLayer& L = a.layer;
  const int64_t hd = a.head_dim, off = kv_head * hd, bt = L.block_tokens;
  int64_t most = 0;
  for (int j = 0; j < nq; ++j) most = qs[j].n_keys > most ? qs[j].n_keys : most;
  const int64_t stride = (most + 15) / 16 * 16;
  float* scores = scratch;
  float* kt = scratch + kAttnQueries * stride;
  float* vb = kt + 16 * kMaxHeadDim;
  const float* q[kAttnQueries];
  for (int j = 0; j < nq; ++j) q[j] = qs[j].q;
  const bool direct_k = nq <= kDirect && L.k_format == KvFormat::F16;
  const bool direct_v = nq <= kDirect && L.v_format == KvFormat::F16;
  const auto prefetch_keys = [&](int64_t c) {
    if (c < most) prefetch_keys16(L, blocks[c / bt], c % bt, off, hd);
  };
  for (int64_t r = 1; r < kAhead; ++r) prefetch_keys(16 * r);
  for (int64_t c = 0; c < most; c += 16) {
    prefetch_keys(c + 16 * kAhead);
    // A query or two read the cache's f16 run as it is: widening it to kt first costs more.
    if (!direct_k) load_keys16(L, blocks[c / bt], c % bt, off, hd, kt);
    by_groups(nq, [&](int j, auto g) {
      constexpr int G = decltype(g)::value;
      V16 sv[G];
      if (direct_k) scores16<G>(q + j, f16_key_run(L, blocks[c / bt], c % bt, off), bt, hd, a.scale, sv);
      else scores16<G>(q + j, kt, 16, hd, a.scale, sv);
      for (int t = 0; t < G; ++t) std::memcpy(scores + (j + t) * stride + c, &sv[t], sizeof sv[t]);
    });
  }
  float inv[kAttnQueries];
  for (int j = 0; j < nq; ++j) {
    float* sc = scores + j * stride;
    const int64_t n = qs[j].n_keys;
    // The max in 16 lanes, then across them: exact in any order.
    V16 lanes_mx = {}, s;
    lanes_mx -= INFINITY;
    int64_t p0 = 0;
    for (; p0 + 16 <= n; p0 += 16) {
      load16(s, sc + p0);
      lanes_mx = vmax(s, lanes_mx);
    }
    float mx = -INFINITY;
    for (int l = 0; l < 16; ++l) mx = lanes_mx[l] > mx ? lanes_mx[l] : mx;
    for (int64_t p = p0; p < n; ++p) mx = sc[p] > mx ? sc[p] : mx;
    for (int64_t p = 0; p < n; ++p) sc[p] = vexp_ftz(sc[p] - mx);
    V16 lanes = {};
    const int64_t full = n / 16 * 16;
    for (int64_t p = 0; p < full; p += 16) {
      V16 e;
      load16(e, sc + p);
      lanes += e;
    }
    float sum = hsum16(lanes);
    for (int64_t p = full; p < n; ++p) sum += sc[p];
    inv[j] = 1.f / sum;
  }
  alignas(64) float acc[kAttnQueries][kMaxHeadDim];
  float* accs[kAttnQueries];
  for (int j = 0; j < nq; ++j) {
    accs[j] = acc[j];
    for (int64_t d = 0; d < hd; ++d) acc[j][d] = 0.f;
  }
  const int64_t vrb = kv_row_bytes(L.v_format, hd), head = off / hd;
  const auto prefetch_values = [&](int64_t c) {
    if (c < most) prefetch_bytes(kv_head_row(L, L.v_format, L.v, blocks[c / bt], c % bt, head), 16 * vrb);
  };
  for (int64_t r = 0; r < kAhead; ++r) prefetch_values(16 * r);
  for (int64_t c = 0; c < most; c += 16) {
    prefetch_values(c + 16 * kAhead);
    const int64_t rows = most - c < 16 ? most - c : 16;
    // A run of 16 never crosses a block (block_tokens is a multiple of 16): its rows lie together.
    const uint8_t* run = kv_head_row(L, L.v_format, L.v, blocks[c / bt], c % bt, head);
    const float* w[kAttnQueries];
    int64_t n[kAttnQueries];
    for (int j = 0; j < nq; ++j) {
      w[j] = scores + j * stride + c;
      n[j] = qs[j].n_keys - c < rows ? qs[j].n_keys - c : rows;
    }
    // A group's keys all of them take together, then each one's own rest, in order.
    const auto weigh = [&](const auto* values) {
      by_groups(nq, [&](int j, auto g) {
        constexpr int G = decltype(g)::value;
        int64_t common = n[j];
        for (int t = 1; t < G; ++t) common = n[j + t] < common ? n[j + t] : common;
        if (common < 0) common = 0;
        if (common > 0) weigh_values<G>(accs + j, w + j, common, values, hd);
        for (int t = 0; t < G; ++t) {
          const float* wt = w[j + t] + common;
          if (n[j + t] > common) weigh_values<1>(accs + j + t, &wt, n[j + t] - common, values + common * hd, hd);
        }
      });
    };
    if (direct_v) {
      weigh(reinterpret_cast<const uint16_t*>(run));
    } else {
      kv_load(L.v_format, run, 0, rows * hd, vb);
      weigh(static_cast<const float*>(vb));
    }
  }
  for (int j = 0; j < nq; ++j)
    for (int64_t d = 0; d < hd; ++d) qs[j].out[d] = acc[j][d] * inv[j];
}

}  // namespace

void fill_llm_kernels(KernelTable& t) {
  t.rms_norm_row = rms_norm_row;
  t.rope_row = rope_row;
  t.swiglu_row = swiglu_row;
  t.kv_store_row = kv_store_row;
  t.paged_attention_set = paged_attention_set;
}

}  // namespace tessera::cpu::TESSERA_ISA
