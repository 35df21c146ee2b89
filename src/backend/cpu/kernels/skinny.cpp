// Skinny products y = x W^T for a few activation rows (a decoded token, a
// small batch), compiled once per instruction set. Each weight row is read
// from memory once and multiplied with up to kM activation rows held in
// L1/L2; kR weight rows at a time give kR * kM independent accumulators, so
// the loop runs at the speed weights stream in (backend/cpu/skinny.h).
//
// Note [Row-invariant skinny products]
// y[i, r] is the same sum in the same order whatever m is, whichever rows are
// grouped with row i and however the rows of W are split among threads:
// kW-lane partial sums over k in order (one fused multiply-add per lane and
// step), the lanes added by a fixed halving tree, then the k % kW tail in
// order. A decode step (m = 1) and a verification of several draft tokens
// (m > 1) thus give each row bit-identical results.
#include <cstring>
#include <utility>

#if defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "backend/cpu/kernels/common.h"

namespace tessera::cpu::TESSERA_ISA {
namespace {

#if defined(__AVX512F__)
constexpr int kW = 16, kR = 4, kM = 4;  // 16 zmm accumulators of 32
#elif defined(__AVX2__)
constexpr int kW = 8, kR = 4, kM = 2;   // 8 ymm accumulators of 16
#else
constexpr int kW = 4, kR = 2, kM = 2;   // SSE2
#endif

typedef float V __attribute__((vector_size(kW * sizeof(float))));
typedef uint16_t U16 __attribute__((vector_size(kW * sizeof(uint16_t))));
typedef uint32_t U32 __attribute__((vector_size(kW * sizeof(uint32_t))));

inline V load_x(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// kW weights widened to float.
template <typename T>
inline V load_w(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return load_x(p);
  } else if constexpr (std::is_same_v<T, BFloat16>) {  // the bits, 16 places up
#if defined(__AVX512F__)
    V v;
    __m512 f = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
    std::memcpy(&v, &f, sizeof v);
    return v;
#elif defined(__AVX2__)
    V v;
    __m256 f = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
    std::memcpy(&v, &f, sizeof v);
    return v;
#else
    U16 h;
    std::memcpy(&h, p, sizeof h);
    return reinterpret_cast<V>(__builtin_convertvector(h, U32) << 16);
#endif
  } else {
#if defined(__AVX512F__)
    V v;
    __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    std::memcpy(&v, &f, sizeof v);
    return v;
#elif defined(__F16C__)
    V v;
    __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    std::memcpy(&v, &f, sizeof v);
    return v;
#else
    V v;
    for (int l = 0; l < kW; ++l) v[l] = h2f(p[l].x);
    return v;
#endif
  }
}

inline float hsum(V v) {
  float a[kW];
  std::memcpy(a, &v, sizeof a);
  for (int h = kW / 2; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l) a[l] += a[l + h];
  return a[0];
}

// out[r * M + i] = row r of w (R rows, stride ldw) . xs[i] (M rows), k long.
template <typename T, int R, int M>
inline void block(const T* w, int64_t ldw, int64_t k, const float* const* xs, float* out) {
  V acc[R][M] = {};
  const int64_t kv = k / kW * kW;
  for (int64_t p = 0; p < kv; p += kW) {
    V xv[M];
    for (int i = 0; i < M; ++i) xv[i] = load_x(xs[i] + p);
    for (int r = 0; r < R; ++r) {
      const V wv = load_w(w + r * ldw + p);
      for (int i = 0; i < M; ++i) acc[r][i] += wv * xv[i];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < M; ++i) {
      float tail = 0.0f;
      for (int64_t p = kv; p < k; ++p) tail += ld(w[r * ldw + p]) * xs[i][p];
      out[r * M + i] = hsum(acc[r][i]) + tail;
    }
}

// The block for a runtime (rows, cols) <= (kR, kM): one instantiation each.
template <typename T, int R, int... Ms>
inline void block_m(int m, std::integer_sequence<int, Ms...>, const T* w, int64_t ldw, int64_t k,
                    const float* const* xs, float* out) {
  ((m == Ms + 1 ? (block<T, R, Ms + 1>(w, ldw, k, xs, out), 0) : 0), ...);
}
template <typename T, int... Rs>
inline void block_rm(int r, int m, std::integer_sequence<int, Rs...>, const T* w, int64_t ldw, int64_t k,
                     const float* const* xs, float* out) {
  ((r == Rs + 1 ? (block_m<T, Rs + 1>(m, std::make_integer_sequence<int, kM>{}, w, ldw, k, xs, out), 0) : 0), ...);
}

// y[i * ldy + r] = x[i, :] . w[r, :] for i < m, r in [r0, r1).
template <typename T>
void skinny_rows(const void* wp, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t m, float* y,
                 int64_t ldy, int64_t r0, int64_t r1) {
  const T* w = static_cast<const T*>(wp);
  for (int64_t r = r0; r < r1; r += kR) {
    const int rr = static_cast<int>(std::min<int64_t>(kR, r1 - r));
    for (int64_t i0 = 0; i0 < m; i0 += kM) {
      const int mi = static_cast<int>(std::min<int64_t>(kM, m - i0));
      const float* xs[kM];
      for (int i = 0; i < mi; ++i) xs[i] = x + (i0 + i) * ldx;
      float out[kR * kM];
      block_rm<T>(rr, mi, std::make_integer_sequence<int, kR>{}, w + r * ldw, ldw, k, xs, out);
      for (int j = 0; j < rr; ++j)
        for (int i = 0; i < mi; ++i) y[(i0 + i) * ldy + r + j] = out[j * mi + i];
    }
  }
}

}  // namespace

void fill_skinny_kernels(KernelTable& t) {
  t.skinny_rows[idx(DType::F32)] = skinny_rows<float>;
  t.skinny_rows[idx(DType::BF16)] = skinny_rows<BFloat16>;
  t.skinny_rows[idx(DType::F16)] = skinny_rows<Half>;
}

}  // namespace tessera::cpu::TESSERA_ISA
