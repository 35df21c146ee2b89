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

// f16 scale to float: one instruction where the ISA has F16C.
inline float f16(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return h2f(h);
#endif
}

// The decoding unit: 32 weights, a whole Int4 group (its two nibble halves),
// or a K-quant super-block.
inline int64_t unit_of(const QuantMatrix& w) {
  return w.format == QFormat::Int4 ? w.group : qformat_is_block(w.format) ? qblock_elems(w.format) : kQBlock;
}

// 16 bytes of an int4 group: low nibbles to lo, high ones to hi. A constant
// trip count and restrict pointers let it vectorize (a loop over the group's
// unknown half-size with two store streams stayed scalar).
inline void decode_nibbles16(const uint8_t* __restrict q, float* __restrict lo, float* __restrict hi, float s,
                             float m) {
  for (int j = 0; j < 16; ++j) {
    lo[j] = s * static_cast<float>(q[j] & 15) + m;
    hi[j] = s * static_cast<float>(q[j] >> 4) + m;
  }
}

// Weights [u*U, u*U + n) of row r into out (n = U except Int8's last unit).
template <QFormat F>
inline void decode_unit(const QuantMatrix& w, const uint8_t* row, int64_t r, int64_t u, int64_t n, float* out) {
  if constexpr (F == QFormat::Q8_0) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + u;
    float d = f16(b->d);
    for (int j = 0; j < kQBlock; ++j) out[j] = d * static_cast<float>(b->qs[j]);
  } else if constexpr (F == QFormat::Q4_0) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(row) + u;
    float d = f16(b->d);
    for (int j = 0; j < kQBlock / 2; ++j) {
      out[j] = d * static_cast<float>((b->qs[j] & 15) - 8);
      out[j + 16] = d * static_cast<float>((b->qs[j] >> 4) - 8);
    }
  } else if constexpr (F == QFormat::Int8) {
    const auto* q = reinterpret_cast<const int8_t*>(row) + u * kQBlock;
    float d = static_cast<const float*>(w.scales)[r];
    for (int64_t j = 0; j < n; ++j) out[j] = d * static_cast<float>(q[j]);
  } else if constexpr (F == QFormat::Q4_K) {  // ggml's dequantize_row_q4_K
    const auto* b = reinterpret_cast<const BlockQ4_K*>(row) + u;
    const float d = f16(b->d), dmin = f16(b->dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      q4_k_scale_min(j, b->scales, sc, m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      const uint8_t* q = b->qs + 32 * (j / 2);
      const int shift = 4 * (j & 1);
      for (int l = 0; l < 32; ++l) out[32 * j + l] = d1 * static_cast<float>((q[l] >> shift) & 15) - m1;
    }
  } else if constexpr (F == QFormat::Q6_K) {  // ggml's dequantize_row_q6_K
    const auto* b = reinterpret_cast<const BlockQ6_K*>(row) + u;
    const float d = f16(b->d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b->ql + 64 * h;
      const uint8_t* qh = b->qh + 32 * h;
      const int8_t* sc = b->scales + 8 * h;
      float* y = out + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        y[l] = d * sc[is] * static_cast<float>(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
        y[l + 32] = d * sc[is + 2] * static_cast<float>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        y[l + 64] = d * sc[is + 4] * static_cast<float>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        y[l + 96] = d * sc[is + 6] * static_cast<float>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
  } else {
    const int64_t groups = w.cols / w.group, half = w.group / 2;
    const uint8_t* q = row + u * half;
    float s = f16(static_cast<const uint16_t*>(w.scales)[r * groups + u]);
    float m = f16(static_cast<const uint16_t*>(w.mins)[r * groups + u]);
    for (int64_t c = 0; c < half; c += 16) decode_nibbles16(q + c, out + c, out + half + c, s, m);
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

// One weight row against MI activation rows: lane-wise partial sums (kLanes
// per activation row, held in registers) keep the loop vectorizable without
// reassociating a scalar sum.
template <QFormat F, int MI>
inline void matmul_row(const QuantMatrix& w, const uint8_t* row, int64_t r, const float* const* xs, float* out) {
  const int64_t U = unit_of(w), full = w.cols / U;
  const int64_t tail = w.cols - full * U;  // Int8 only
  alignas(64) float buf[256];
  float acc[MI][kLanes] = {};
  for (int64_t u = 0; u < full; ++u) {
    decode_unit<F>(w, row, r, u, U, buf);
    for (int i = 0; i < MI; ++i) {
      const float* xi = xs[i] + u * U;
      for (int64_t j = 0; j < U; j += kLanes)
        for (int l = 0; l < kLanes; ++l) acc[i][l] += buf[j + l] * xi[j + l];
    }
  }
  float extra[MI] = {};
  if (tail) {
    decode_unit<F>(w, row, r, full, tail, buf);
    for (int i = 0; i < MI; ++i)
      for (int64_t j = 0; j < tail; ++j) extra[i] += buf[j] * xs[i][full * U + j];
  }
  for (int i = 0; i < MI; ++i) {
    float s = extra[i];
    for (int l = 0; l < kLanes; ++l) s += acc[i][l];
    out[i] = s;
  }
}

// y[i * ldy + r] = sum_k x[i * ldx + k] * w[r, k] for i < m, r in [r0, r1),
// weights decoded once per 4 activation rows.
template <QFormat F>
void matmul_rows(const QuantMatrix& w, const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy, int64_t r0,
                 int64_t r1) {
  const int64_t rb = qrow_bytes(F, w.cols);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data + r * rb;
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
      const float* xs[4];
      float out[4];
      const int mi = static_cast<int>(std::min<int64_t>(4, m - i0));
      for (int i = 0; i < mi; ++i) xs[i] = x + (i0 + i) * ldx;
      switch (mi) {
        case 1: matmul_row<F, 1>(w, row, r, xs, out); break;
        case 2: matmul_row<F, 2>(w, row, r, xs, out); break;
        case 3: matmul_row<F, 3>(w, row, r, xs, out); break;
        default: matmul_row<F, 4>(w, row, r, xs, out); break;
      }
      for (int i = 0; i < mi; ++i) y[(i0 + i) * ldy + r] = out[i];
    }
  }
}

// ---- int8 activations ---------------------------------------------------------

void quantize_act(const float* x, int64_t cols, BlockQ8Act* out) {
  for (int64_t b = 0; b < cols / kQBlock; ++b) {
    const float* v = x + b * kQBlock;
    float amax = 0.f;
    bool finite = true;
    for (int j = 0; j < kQBlock; ++j) {
      float a = v[j] < 0.f ? -v[j] : v[j];
      amax = a > amax ? a : amax;
      finite = finite && a <= 3.4e38f;  // false for NaN and infinities
    }
    // A non-finite input makes the block's scale NaN, so the outputs it feeds
    // are NaN (as the float product's would be), never a rounded garbage value.
    float d = finite ? amax / 127.f : NAN, id = finite && d != 0.f ? 1.f / d : 0.f;
    int32_t sum = 0;
    for (int j = 0; j < kQBlock; ++j) {
      auto q = static_cast<int8_t>(finite ? std::nearbyint(v[j] * id) : 0.f);
      out[b].qs[j] = q;
      sum += q;
    }
    out[b].d = d;
    out[b].s = d * static_cast<float>(sum);
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
// trick (|w| as unsigned, x carrying w's sign); 4-bit codes are unsigned already.
template <bool kSigned>
inline __m256i dot32(__m256i w, __m256i x) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i p;
  if constexpr (kSigned) p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  else p = _mm256_maddubs_epi16(w, x);
  return _mm256_madd_epi16(p, ones);
}
// Eight int32 sums of w . x over 32 bytes, the products of bytes 0-15 times
// s0 and of bytes 16-31 times s1 (lanes 0-3 and 4-7): the K-quants' integer
// sub-block scales, applied exactly (|w x| pairs fit int16, times |s| <= 128
// fit int32). Signed codes (Q6_K) use the sign trick.
template <bool kSigned>
inline __m256i dot32_scaled(__m256i w, __m256i x, int s0, int s1) {
  const __m256i s = _mm256_setr_m128i(_mm_set1_epi16(static_cast<int16_t>(s0)), _mm_set1_epi16(static_cast<int16_t>(s1)));
  __m256i p;
  if constexpr (kSigned) p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  else p = _mm256_maddubs_epi16(w, x);
  return _mm256_madd_epi16(p, s);
}
// 16 bytes of nibbles -> 32 bytes: the low nibbles, then the high ones.
inline __m256i unpack_nibbles16(const uint8_t* p) {
  __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
  return _mm256_and_si256(b, _mm256_set1_epi8(15));
}

// One weight row against MI activation rows. Each 32-block contributes
// d_w * d_x * isum (as a vector of 8 partial sums) plus a scalar per-block
// term: Q4_0's
// codes are stored unsigned, so -8 * d_w * s_x; Int4's min, m * s_x.
template <QFormat F, int MI>
inline void dot_row(const QuantMatrix& w, const uint8_t* row, int64_t r, const BlockQ8Act* const* xs, float* out) {
  const int64_t nb = w.cols / kQBlock;
  __m256 acc[MI];
  float extra[MI];
  for (int i = 0; i < MI; ++i) acc[i] = _mm256_setzero_ps(), extra[i] = 0.f;
  auto block = [&](int64_t b, __m256i qw, float d, float e) {
    for (int i = 0; i < MI; ++i) {
      const BlockQ8Act& a = xs[i][b];
      __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
      __m256 p = _mm256_cvtepi32_ps(dot32<F == QFormat::Q8_0 || F == QFormat::Int8>(qw, qx));
      acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d), p, acc[i]);
      if constexpr (F == QFormat::Q4_0 || F == QFormat::Int4) extra[i] += e * a.s;
    }
  };
  // A K-quant block: codes times their sub-blocks' integer scales s0, s1.
  auto kblock = [&](int64_t b, __m256i qw, int s0, int s1, float d, float e) {
    for (int i = 0; i < MI; ++i) {
      const BlockQ8Act& a = xs[i][b];
      __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
      __m256 p = _mm256_cvtepi32_ps(dot32_scaled<F == QFormat::Q6_K>(qw, qx, s0, s1));
      acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d), p, acc[i]);
      if constexpr (F == QFormat::Q4_K) extra[i] += e * a.s;
    }
  };
  if constexpr (F == QFormat::Q8_0) {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(row);
    for (int64_t b = 0; b < nb; ++b)
      block(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[b].qs)), f16(blk[b].d), 0.f);
  } else if constexpr (F == QFormat::Q4_0) {
    const auto* blk = reinterpret_cast<const BlockQ4_0*>(row);
    for (int64_t b = 0; b < nb; ++b) {
      float d = f16(blk[b].d);
      block(b, unpack_nibbles16(blk[b].qs), d, -8.f * d);
    }
  } else if constexpr (F == QFormat::Int8) {
    for (int64_t b = 0; b < nb; ++b) block(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * kQBlock)), 1.f, 0.f);
  } else if constexpr (F == QFormat::Q4_K) {
    const __m256i lo = _mm256_set1_epi8(15);
    const auto* blk = reinterpret_cast<const BlockQ4_K*>(row);
    for (int64_t s = 0; s < nb / 8; ++s) {
      const float d = f16(blk[s].d), dmin = f16(blk[s].dmin);
      for (int p = 0; p < 4; ++p) {  // sub-blocks 2p (low nibbles) and 2p + 1 (high) of 32 bytes
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[s].qs + 32 * p));
        int sc, m;
        q4_k_scale_min(2 * p, blk[s].scales, sc, m);
        kblock(8 * s + 2 * p, _mm256_and_si256(v, lo), sc, sc, d, -(dmin * static_cast<float>(m)));
        q4_k_scale_min(2 * p + 1, blk[s].scales, sc, m);
        kblock(8 * s + 2 * p + 1, _mm256_and_si256(_mm256_srli_epi16(v, 4), lo), sc, sc, d,
               -(dmin * static_cast<float>(m)));
      }
    }
  } else if constexpr (F == QFormat::Q6_K) {
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
    const auto* blk = reinterpret_cast<const BlockQ6_K*>(row);
    // Code = low 4 bits | 2 high bits << 4, less 32 (shifts are per 16 bits;
    // the masks keep bits from crossing into the neighbouring byte).
    auto code = [&](__m256i low4, __m256i qh, int shift) {
      const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), m2), 4);
      return _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(low4, m4), hi), off);
    };
    for (int64_t s = 0; s < nb / 8; ++s) {
      const float d = f16(blk[s].d);
      for (int h = 0; h < 2; ++h) {  // 128 values: blocks i = 0..3 of 32
        const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[s].ql + 64 * h));
        const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[s].ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[s].qh + 32 * h));
        const int8_t* sc = blk[s].scales + 8 * h;
        const int64_t b0 = 8 * s + 4 * h;
        kblock(b0, code(ql0, qh, 0), sc[0], sc[1], d, 0.f);
        kblock(b0 + 1, code(ql1, qh, 2), sc[2], sc[3], d, 0.f);
        kblock(b0 + 2, code(_mm256_srli_epi16(ql0, 4), qh, 4), sc[4], sc[5], d, 0.f);
        kblock(b0 + 3, code(_mm256_srli_epi16(ql1, 4), qh, 6), sc[6], sc[7], d, 0.f);
      }
    }
  } else {
    const int64_t groups = w.cols / w.group, half = w.group / 2, bpg = w.group / kQBlock;
    const auto* sc = static_cast<const uint16_t*>(w.scales) + r * groups;
    const auto* mn = static_cast<const uint16_t*>(w.mins) + r * groups;
    const __m256i lo = _mm256_set1_epi8(15);
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* q = row + g * half;
      const float s = f16(sc[g]), m = f16(mn[g]);
      const int64_t b0 = g * bpg;
      if (half == 16) {
        block(b0, unpack_nibbles16(q), s, m);
        continue;
      }
      for (int64_t c = 0; c < half; c += 32) {  // bytes c..c+31 hold weights c.. (low) and half + c.. (high)
        __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + c));
        block(b0 + c / kQBlock, _mm256_and_si256(v, lo), s, m);
        block(b0 + (half + c) / kQBlock, _mm256_and_si256(_mm256_srli_epi16(v, 4), lo), s, m);
      }
    }
  }
  const float rs = F == QFormat::Int8 ? static_cast<const float*>(w.scales)[r] : 1.f;
  for (int i = 0; i < MI; ++i) out[i] = (hsum(acc[i]) + extra[i]) * rs;
}
#else
// Portable: the same sums, one code at a time.
template <QFormat F, int MI>
inline void dot_row(const QuantMatrix& w, const uint8_t* row, int64_t r, const BlockQ8Act* const* xs, float* out) {
  const int64_t nb = w.cols / kQBlock;
  const int64_t groups = F == QFormat::Int4 ? w.cols / w.group : 0, half = w.group / 2;
  float acc[MI] = {};
  for (int64_t b = 0; b < nb; ++b) {
    int qw[kQBlock];
    int s16[2] = {1, 1};  // the integer scales of values 0-15 and 16-31 (K-quants)
    float d = 1.f, mn = 0.f;
    if constexpr (F == QFormat::Q8_0) {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
      for (int j = 0; j < kQBlock; ++j) qw[j] = blk->qs[j];
      d = f16(blk->d);
    } else if constexpr (F == QFormat::Q4_0) {
      const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
      for (int j = 0; j < 16; ++j) {
        qw[j] = (blk->qs[j] & 15) - 8;
        qw[j + 16] = (blk->qs[j] >> 4) - 8;
      }
      d = f16(blk->d);
    } else if constexpr (F == QFormat::Int8) {
      for (int j = 0; j < kQBlock; ++j) qw[j] = reinterpret_cast<const int8_t*>(row)[b * kQBlock + j];
    } else if constexpr (F == QFormat::Q4_K) {
      const auto* blk = reinterpret_cast<const BlockQ4_K*>(row) + b / 8;
      const int sub = static_cast<int>(b % 8);
      int m;
      q4_k_scale_min(sub, blk->scales, s16[0], m);
      s16[1] = s16[0];
      for (int j = 0; j < kQBlock; ++j) qw[j] = q4_k_code(*blk, sub * kQBlock + j);
      d = f16(blk->d);
      mn = -(f16(blk->dmin) * static_cast<float>(m));
    } else if constexpr (F == QFormat::Q6_K) {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(row) + b / 8;
      const int k0 = static_cast<int>(b % 8) * kQBlock;
      for (int j = 0; j < kQBlock; ++j) qw[j] = q6_k_code(*blk, k0 + j) - 32;
      s16[0] = blk->scales[k0 / 16];
      s16[1] = blk->scales[k0 / 16 + 1];
      d = f16(blk->d);
    } else {
      const int64_t k0 = b * kQBlock, g = k0 / w.group;
      const uint8_t* q = row + g * half;
      for (int j = 0; j < kQBlock; ++j) {
        const int64_t jj = k0 % w.group + j;
        qw[j] = jj < half ? (q[jj] & 15) : (q[jj - half] >> 4);
      }
      d = f16(static_cast<const uint16_t*>(w.scales)[r * groups + g]);
      mn = f16(static_cast<const uint16_t*>(w.mins)[r * groups + g]);
    }
    for (int i = 0; i < MI; ++i) {
      const BlockQ8Act& a = xs[i][b];
      int32_t s = 0;
      for (int j = 0; j < kQBlock; ++j) s += s16[j / 16] * qw[j] * a.qs[j];
      acc[i] += static_cast<float>(s) * (d * a.d);
      if constexpr (F == QFormat::Int4 || F == QFormat::Q4_K) acc[i] += mn * a.s;
    }
  }
  const float rs = F == QFormat::Int8 ? static_cast<const float*>(w.scales)[r] : 1.f;
  for (int i = 0; i < MI; ++i) out[i] = acc[i] * rs;
}
#endif

// y rows [r0, r1) for activation rows [0, m), up to 4 activation rows per pass
// over a weight row (the weights are decoded once for all of them).
template <QFormat F>
void dot_rows(const QuantMatrix& w, const BlockQ8Act* xq, int64_t m, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = w.cols / kQBlock, rb = qrow_bytes(F, w.cols);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data + r * rb;
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
      const BlockQ8Act* xs[4];
      float out[4];
      const int mi = static_cast<int>(std::min<int64_t>(4, m - i0));
      for (int i = 0; i < mi; ++i) xs[i] = xq + (i0 + i) * nb;
      switch (mi) {
        case 1: dot_row<F, 1>(w, row, r, xs, out); break;
        case 2: dot_row<F, 2>(w, row, r, xs, out); break;
        case 3: dot_row<F, 3>(w, row, r, xs, out); break;
        default: dot_row<F, 4>(w, row, r, xs, out); break;
      }
      for (int i = 0; i < mi; ++i) y[(i0 + i) * ldy + r] = out[i];
    }
  }
}

}  // namespace

// Rounds half to even by adding and subtracting 1.5 * 2^23 (the FPU's own
// rounding, exact for the clamped codes): plain arithmetic that vectorizes,
// unlike nearbyint.
template <typename Q>
bool quantize_affine_to(const float* x, int64_t n, float inv, float zp, float lo, float hi, Q* out) {
  constexpr float kMagic = 12582912.0f;
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] * inv + zp;
    bad |= v != v;
    const float c = std::min(std::max(v, lo), hi);
    out[i] = static_cast<Q>(static_cast<int>((c + kMagic) - kMagic));
  }
  return bad != 0;
}
bool quantize_affine(const float* x, int64_t n, float inv, float zp, float lo, float hi, void* out, bool u8) {
  return u8 ? quantize_affine_to(x, n, inv, zp, lo, hi, static_cast<uint8_t*>(out))
            : quantize_affine_to(x, n, inv, zp, lo, hi, static_cast<int8_t*>(out));
}

void fill_quant_kernels(KernelTable& t) {
  t.quantize_act = quantize_act;
  t.quantize_affine = quantize_affine;
#define TS_Q(F)                                                          \
  t.qmatmul_rows[static_cast<int>(QFormat::F)] = matmul_rows<QFormat::F>; \
  t.qdequant_rows[static_cast<int>(QFormat::F)] = dequant_rows<QFormat::F>; \
  t.qdot_rows[static_cast<int>(QFormat::F)] = dot_rows<QFormat::F>;
  TS_Q(Q8_0) TS_Q(Q4_0) TS_Q(Int8) TS_Q(Int4) TS_Q(Q4_K) TS_Q(Q6_K)
#undef TS_Q
}

}  // namespace tessera::cpu::TESSERA_ISA
