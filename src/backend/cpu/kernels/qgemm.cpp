// The int8 dot-product product over repacked Q8_0/Q4_0 weights
// (backend/cpu/qgemm.h, Note [Packed int8 products]): AVX512 VNNI only,
// filled into the avx512_bf16 tier (every CPU with AVX512-BF16 has VNNI).
// Tiles of 4 weight rows by 4 tokens: each weight pair of blocks is unpacked
// once for 4 tokens, each token's codes and scales loaded once for 4 rows.
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include <immintrin.h>

#include "backend/cpu/kernels/common.h"
#include "backend/cpu/qgemm.h"

namespace tessera::cpu::TESSERA_ISA {

#if defined(__AVX512F__)
namespace {

#define TS_VNNI __attribute__((target("avx512vnni")))

constexpr int kM = 4;  // tokens per tile (the rows: kPackRows)

// Lane l += lane l + h for h = 8, 4, 2, 1.
inline float hsum16(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// Rows [r0, r0 + 4) (those below r1 written) against tokens [i0, i0 + M).
template <QFormat F, int M>
TS_VNNI void tile(const PackedQMatrix& w, int64_t r0, int64_t r1, const uint8_t* act, int64_t i0, float* y,
                  int64_t ldy) {
  constexpr int R = static_cast<int>(kPackRows);
  const int64_t P = w.pairs, cb = packed_pair_code_bytes(F), tb = packed_tile_pair_bytes(F);
  // Lanes 0-3 and 8-11 take the pair's first scale, 4-7 and 12-15 the second.
  const __m512i spread = _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  constexpr int corr_at = F == QFormat::Q8_0 ? 192 : 128;
  const uint8_t* t = w.data + r0 / R * P * tb;
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < M; ++i) acc[r][i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < P; ++p, t += tb) {
    __m512i wc[R];
    __m512 dw[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* c = t + r * cb;
      if constexpr (F == QFormat::Q8_0) {
        wc[r] = _mm512_loadu_si512(c);
      } else {  // [b0 bytes | b1 bytes] twice; the upper copy's high nibbles
        __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c)));
        v = _mm512_mask_srli_epi16(v, static_cast<__mmask32>(0xFFFF0000u), v, 4);
        wc[r] = _mm512_and_si512(v, low4);
      }
      const auto* s = reinterpret_cast<const double*>(t + R * cb + r * 8);
      dw[r] = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(s))));
    }
    for (int i = 0; i < M; ++i) {
      const uint8_t* a = act + ((i0 + i) * P + p) * kPackedActPairBytes;
      const __m512i xc = _mm512_loadu_si512(a);
      const __m512 dx = _mm512_loadu_ps(a + 64);
      const __m512 cx = _mm512_loadu_ps(a + corr_at);
      for (int r = 0; r < R; ++r) {
        const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wc[r], xc);
        const __m512 t = _mm512_fmadd_ps(dx, _mm512_cvtepi32_ps(s), cx);
        acc[r][i] = _mm512_fmadd_ps(dw[r], t, acc[r][i]);
      }
    }
  }
  for (int r = 0; r < R && r0 + r < r1; ++r)
    for (int i = 0; i < M; ++i) y[(i0 + i) * ldy + r0 + r] = hsum16(acc[r][i]);
}

using TileFn = void (*)(const PackedQMatrix&, int64_t, int64_t, const uint8_t*, int64_t, float*, int64_t);
template <QFormat F, int... Ms>
constexpr std::array<TileFn, sizeof...(Ms)> tiles_of(std::integer_sequence<int, Ms...>) {
  return {tile<F, Ms + 1>...};
}

// Weight rows [r0, r1) (r0 a multiple of 4) against tokens [0, m), 4 rows by
// 4 tokens at a time.
template <QFormat F>
TS_VNNI void qgemm_rows(const PackedQMatrix& w, const uint8_t* act, int64_t m, float* y, int64_t ldy, int64_t r0,
                        int64_t r1) {
  static constexpr auto kTiles = tiles_of<F>(std::make_integer_sequence<int, kM>{});
  for (int64_t r = r0; r < r1; r += kPackRows)
    for (int64_t i = 0; i < m; i += kM) kTiles[std::min<int64_t>(kM, m - i) - 1](w, r, r1, act, i, y, ldy);
}

}  // namespace

void fill_qgemm_vnni_kernels(KernelTable& t) {
  t.qgemm_rows[static_cast<int>(QFormat::Q8_0)] = qgemm_rows<QFormat::Q8_0>;
  t.qgemm_rows[static_cast<int>(QFormat::Q4_0)] = qgemm_rows<QFormat::Q4_0>;
}
#endif

}  // namespace tessera::cpu::TESSERA_ISA
