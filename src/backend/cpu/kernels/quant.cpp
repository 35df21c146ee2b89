// Quantized matrix products (formats: Note [Quantized weight formats] in
// backend/cpu/quant.h), compiled once per instruction set.
//
// Two families:
//   float activations: each weight row is decoded a unit at a time (32 weights,
//     or one Int4 group) into a small buffer that stays in L1 and multiplied
//     with up to 16 activation rows; plus plain row dequantization for the
//     GEMM path of larger batches.
//   int8 activations: 32-element int8 dot products (AVX2: vpmaddubsw/vpmaddwd
//     with the sign trick, as in ggml), one float multiply-add per block.
#include <algorithm>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "backend/cpu/kernels/common.h"
#include "backend/cpu/quant.h"

namespace tessera::cpu::TESSERA_ISA {
namespace {

constexpr int kLanes = 8;

// The decoding unit: 32 weights, or a whole Int4 group (its two nibble halves).
inline int64_t unit_of(const QuantMatrix& w) { return w.format == QFormat::Int4 ? w.group : kQBlock; }

// Weights [u*U, u*U + n) of row r into out (n = U except Int8's last unit).
template <QFormat F>
inline void decode_unit(const QuantMatrix& w, const uint8_t* row, int64_t r, int64_t u, int64_t n, float* out) {
  if constexpr (F == QFormat::Q8_0) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + u;
    float d = h2f(b->d);
    for (int j = 0; j < kQBlock; ++j) out[j] = d * static_cast<float>(b->qs[j]);
  } else if constexpr (F == QFormat::Q4_0) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(row) + u;
    float d = h2f(b->d);
    for (int j = 0; j < kQBlock / 2; ++j) {
      out[j] = d * static_cast<float>((b->qs[j] & 15) - 8);
      out[j + 16] = d * static_cast<float>((b->qs[j] >> 4) - 8);
    }
  } else if constexpr (F == QFormat::Int8) {
    const auto* q = reinterpret_cast<const int8_t*>(row) + u * kQBlock;
    float d = static_cast<const float*>(w.scales)[r];
    for (int64_t j = 0; j < n; ++j) out[j] = d * static_cast<float>(q[j]);
  } else {
    const int64_t groups = w.cols / w.group, half = w.group / 2;
    const uint8_t* q = row + u * half;
    float s = h2f(static_cast<const uint16_t*>(w.scales)[r * groups + u]);
    float m = h2f(static_cast<const uint16_t*>(w.mins)[r * groups + u]);
    for (int64_t j = 0; j < half; ++j) {
      out[j] = s * static_cast<float>(q[j] & 15) + m;
      out[j + half] = s * static_cast<float>(q[j] >> 4) + m;
    }
  }
}

template <QFormat F>
void dequant_rows(const QuantMatrix& w, int64_t r0, int64_t r1, float* out) {
  const int64_t U = unit_of(w), units = (w.cols + U - 1) / U, rb = qrow_bytes(F, w.cols);
  alignas(64) float buf[256];
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data + r * rb;
    float* o = out + (r - r0) * w.cols;
    for (int64_t u = 0; u < units; ++u) {
      int64_t n = std::min(U, w.cols - u * U);
      decode_unit<F>(w, row, r, u, n, buf);
      std::memcpy(o + u * U, buf, n * sizeof(float));
    }
  }
}

// y[i * ldy + r] = sum_k x[i * ldx + k] * w[r, k] for i < m, r in [r0, r1).
// Lane-wise partial sums (kLanes per activation row) keep the loop vectorizable
// without reassociating a scalar sum.
template <QFormat F>
void matmul_rows(const QuantMatrix& w, const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy, int64_t r0,
                 int64_t r1) {
  const int64_t U = unit_of(w), full = w.cols / U, rb = qrow_bytes(F, w.cols);
  const int64_t tail = w.cols - full * U;  // Int8 only
  alignas(64) float buf[256];
  alignas(64) float acc[16][kLanes];
  for (int64_t i0 = 0; i0 < m; i0 += 16) {
    const int64_t mi = std::min<int64_t>(16, m - i0);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* row = w.data + r * rb;
      for (int64_t i = 0; i < mi; ++i)
        for (int l = 0; l < kLanes; ++l) acc[i][l] = 0.f;
      for (int64_t u = 0; u < full; ++u) {
        decode_unit<F>(w, row, r, u, U, buf);
        for (int64_t i = 0; i < mi; ++i) {
          const float* xi = x + (i0 + i) * ldx + u * U;
          float* a = acc[i];
          for (int64_t j = 0; j < U; j += kLanes)
            for (int l = 0; l < kLanes; ++l) a[l] += buf[j + l] * xi[j + l];
        }
      }
      float extra[16] = {};
      if (tail) {
        decode_unit<F>(w, row, r, full, tail, buf);
        for (int64_t i = 0; i < mi; ++i) {
          const float* xi = x + (i0 + i) * ldx + full * U;
          for (int64_t j = 0; j < tail; ++j) extra[i] += buf[j] * xi[j];
        }
      }
      for (int64_t i = 0; i < mi; ++i) {
        float s = extra[i];
        for (int l = 0; l < kLanes; ++l) s += acc[i][l];
        y[(i0 + i) * ldy + r] = s;
      }
    }
  }
}

// ---- int8 activations ---------------------------------------------------------

void quantize_act(const float* x, int64_t cols, BlockQ8Act* out) {
  for (int64_t b = 0; b < cols / kQBlock; ++b) {
    const float* v = x + b * kQBlock;
    float amax = 0.f;
    for (int j = 0; j < kQBlock; ++j) {
      float a = v[j] < 0.f ? -v[j] : v[j];
      amax = a > amax ? a : amax;
    }
    float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
    int32_t sum = 0;
    for (int j = 0; j < kQBlock; ++j) {
      auto q = static_cast<int8_t>(std::nearbyint(v[j] * id));
      out[b].qs[j] = q;
      sum += q;
    }
    out[b].d = d;
    out[b].sum = sum;
  }
}

#if defined(__AVX2__)
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// Eight int32 partial sums of w . x over 32 bytes. Signed weights use the sign
// trick (|w| as unsigned, x carrying w's sign); Int4's nibbles are unsigned already.
template <bool kSigned>
inline __m256i dot32(__m256i w, __m256i x) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i p;
  if constexpr (kSigned) p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  else p = _mm256_maddubs_epi16(w, x);
  return _mm256_madd_epi16(p, ones);
}
// 16 bytes of nibbles -> 32 bytes: the low nibbles, then the high ones.
inline __m256i unpack_nibbles16(const uint8_t* p) {
  __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
  return _mm256_and_si256(b, _mm256_set1_epi8(15));
}
#endif

// y rows [r0, r1) for activation rows [0, m): sum over blocks of
// isum * d_w * d_x (+ min * d_x * sum(x_q) for Int4).
template <QFormat F>
void dot_rows(const QuantMatrix& w, const BlockQ8Act* xq, int64_t m, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = w.cols / kQBlock, rb = qrow_bytes(F, w.cols);
  const int64_t groups = F == QFormat::Int4 ? w.cols / w.group : 0;
  const int64_t bpg = F == QFormat::Int4 ? w.group / kQBlock : 1;  // blocks per group
  constexpr int MI = 4;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data + r * rb;
    for (int64_t i0 = 0; i0 < m; i0 += MI) {
      const int mi = static_cast<int>(std::min<int64_t>(MI, m - i0));
      const BlockQ8Act* xs[MI];
      for (int i = 0; i < MI; ++i) xs[i] = xq + (i0 + std::min(i, mi - 1)) * nb;
      float out[MI];
#if defined(__AVX2__)
      __m256 acc[MI];
      float macc[MI] = {};
      for (int i = 0; i < MI; ++i) acc[i] = _mm256_setzero_ps();
      alignas(32) uint8_t unpacked[256];
      for (int64_t b = 0; b < nb; ++b) {
        __m256i qw;
        float d = 1.f, mn = 0.f;
        if constexpr (F == QFormat::Q8_0) {
          const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
          qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
          d = h2f(blk->d);
        } else if constexpr (F == QFormat::Q4_0) {
          const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
          qw = _mm256_sub_epi8(unpack_nibbles16(blk->qs), _mm256_set1_epi8(8));
          d = h2f(blk->d);
        } else if constexpr (F == QFormat::Int8) {
          qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * kQBlock));
        } else {
          const int64_t g = b / bpg, half = w.group / 2;
          if (b % bpg == 0) {  // unpack the group's nibbles once: low halves, then high halves
            const uint8_t* q = row + g * half;
            if (half == 16) {
              _mm256_store_si256(reinterpret_cast<__m256i*>(unpacked), unpack_nibbles16(q));
            } else {
              const __m256i lo = _mm256_set1_epi8(15);
              for (int64_t c = 0; c < half; c += 32) {
                __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + c));
                _mm256_store_si256(reinterpret_cast<__m256i*>(unpacked + c), _mm256_and_si256(v, lo));
                _mm256_store_si256(reinterpret_cast<__m256i*>(unpacked + half + c),
                                   _mm256_and_si256(_mm256_srli_epi16(v, 4), lo));
              }
            }
          }
          qw = _mm256_load_si256(reinterpret_cast<const __m256i*>(unpacked + (b % bpg) * kQBlock));
          d = h2f(static_cast<const uint16_t*>(w.scales)[r * groups + g]);
          mn = h2f(static_cast<const uint16_t*>(w.mins)[r * groups + g]);
        }
        for (int i = 0; i < MI; ++i) {
          const BlockQ8Act& a = xs[i][b];
          __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
          __m256 p = _mm256_cvtepi32_ps(dot32<F != QFormat::Int4>(qw, qx));
          acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d), p, acc[i]);
          if constexpr (F == QFormat::Int4) macc[i] += mn * a.d * static_cast<float>(a.sum);
        }
      }
      for (int i = 0; i < MI; ++i) out[i] = hsum(acc[i]) + macc[i];
#else
      float acc[MI] = {};
      int8_t unpacked[256];
      for (int64_t b = 0; b < nb; ++b) {
        int8_t qw[kQBlock];
        float d = 1.f, mn = 0.f;
        if constexpr (F == QFormat::Q8_0) {
          const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
          std::memcpy(qw, blk->qs, kQBlock);
          d = h2f(blk->d);
        } else if constexpr (F == QFormat::Q4_0) {
          const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
          for (int j = 0; j < 16; ++j) {
            qw[j] = static_cast<int8_t>((blk->qs[j] & 15) - 8);
            qw[j + 16] = static_cast<int8_t>((blk->qs[j] >> 4) - 8);
          }
          d = h2f(blk->d);
        } else if constexpr (F == QFormat::Int8) {
          std::memcpy(qw, row + b * kQBlock, kQBlock);
        } else {
          const int64_t g = b / bpg, half = w.group / 2;
          if (b % bpg == 0) {
            const uint8_t* q = row + g * half;
            for (int64_t j = 0; j < half; ++j) {
              unpacked[j] = static_cast<int8_t>(q[j] & 15);
              unpacked[j + half] = static_cast<int8_t>(q[j] >> 4);
            }
          }
          std::memcpy(qw, unpacked + (b % bpg) * kQBlock, kQBlock);
          d = h2f(static_cast<const uint16_t*>(w.scales)[r * groups + g]);
          mn = h2f(static_cast<const uint16_t*>(w.mins)[r * groups + g]);
        }
        for (int i = 0; i < MI; ++i) {
          const BlockQ8Act& a = xs[i][b];
          int32_t s = 0;
          for (int j = 0; j < kQBlock; ++j) s += static_cast<int32_t>(qw[j]) * a.qs[j];
          acc[i] += static_cast<float>(s) * (d * a.d);
          if constexpr (F == QFormat::Int4) acc[i] += mn * a.d * static_cast<float>(a.sum);
        }
      }
      for (int i = 0; i < MI; ++i) out[i] = acc[i];
#endif
      float rs = F == QFormat::Int8 ? static_cast<const float*>(w.scales)[r] : 1.f;
      for (int i = 0; i < mi; ++i) y[(i0 + i) * ldy + r] = out[i] * rs;
    }
  }
}

}  // namespace

void fill_quant_kernels(KernelTable& t) {
  t.quantize_act = quantize_act;
#define TS_Q(F)                                                          \
  t.qmatmul_rows[static_cast<int>(QFormat::F)] = matmul_rows<QFormat::F>; \
  t.qdequant_rows[static_cast<int>(QFormat::F)] = dequant_rows<QFormat::F>; \
  t.qdot_rows[static_cast<int>(QFormat::F)] = dot_rows<QFormat::F>;
  TS_Q(Q8_0) TS_Q(Q4_0) TS_Q(Int8) TS_Q(Int4)
#undef TS_Q
}

}  // namespace tessera::cpu::TESSERA_ISA
