// The int8 products over repacked Q8_0/Q4_0/Q4_K/Q6_K weights (backend/cpu/qgemm.h,
// Note [Packed int8 products]): AVX2's byte products in the avx2 tier (Note
// [Packed int8 products on AVX2], at the end), AVX512-VNNI in the
// avx512_bf16 tier (every CPU with AVX512-BF16 has VNNI), AMX tiles added in
// the avx512_amx tier.
// VNNI goes 16 weight rows at a time, a row in each int32 lane (the
// activation's 4 bytes broadcast), up to 12 tokens per pass so that each
// weight block is unpacked once for them (12, not 8: a speculative step of
// 9 tokens took a second pass over the weights for its last token; the 8
// code vectors, 12 sums and the block's factors still fit AVX-512's 32
// registers; 2M fortunes model, 9-token step 216 -> 202 us); AMX 16 tokens at a time, a
// block's 16 x 16 int32 sums taken out of the tile and scaled in the vector
// unit, 16 accumulators (one per token, a row in each lane) kept in
// registers. (Four 16 x 16 tiles a block, accumulators in memory, measured
// slower on a Xeon with AMX: the scaling, not the tiles, is the cost.)
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <utility>

#include <immintrin.h>

#include "backend/cpu/kernels/common.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/scratch.h"

namespace tessera::cpu::TESSERA_ISA {
namespace {

// Both kernels: how far ahead the weight stream is asked for, and an
// activation's 4 bytes for a broadcast.
[[maybe_unused]] constexpr int64_t kPrefetchBytes = 4096;
[[maybe_unused]] inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

#if defined(__AVX512F__)
namespace {

#define TS_VNNI __attribute__((target("avx512vnni")))
#define TS_AMX __attribute__((target("avx512vnni,amx-tile,amx-int8")))

constexpr int kVnniTokens = 12;  // tokens per VNNI pass
constexpr int kAmxTokens = 16;  // tokens per AMX tile

// Q6_K: chunk c's 2 high bits (at bits 2(c % 4) of each byte of h) moved
// to bits 4 and 5.
inline __m512i q6_high(__m512i h, int c) {
  const __m512i v = c == 0   ? _mm512_slli_epi16(h, 4)
                    : c == 1 ? _mm512_slli_epi16(h, 2)
                    : c == 2 ? h
                             : _mm512_srli_epi16(h, 2);
  return _mm512_and_si512(v, _mm512_set1_epi8(0x30));
}

// A block's 8 chunks of signed codes for 16 rows (chunk c: values 4c..4c+3).
template <QFormat F>
inline void load_codes(const uint8_t* o, __m512i wc[8]) {
  if constexpr (F == QFormat::Q8_0) {
    for (int c = 0; c < 8; ++c) wc[c] = _mm512_loadu_si512(o + 64 * c);
  } else if constexpr (F == QFormat::Q6_K) {  // low 4 bits as the nibbles below, high 2 from two more lines; q - 32
    const __m512i low4 = _mm512_set1_epi8(0x0F), bias = _mm512_set1_epi8(32);
    const __m512i h0 = _mm512_loadu_si512(o + 256), h1 = _mm512_loadu_si512(o + 320);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(o + 64 * c);
      const __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      wc[c] = _mm512_sub_epi8(_mm512_or_si512(lo, q6_high(h0, c)), bias);
      wc[c + 4] = _mm512_sub_epi8(_mm512_or_si512(hi, q6_high(h1, c)), bias);
    }
  } else {  // low nibbles: chunks 0-3, high nibbles: chunks 4-7; Q4_0's code - 8
    const __m512i low4 = _mm512_set1_epi8(0x0F), bias = _mm512_set1_epi8(F == QFormat::Q4_0 ? 8 : 0);
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(o + 64 * c);
      wc[c] = _mm512_sub_epi8(_mm512_and_si512(v, low4), bias);
      wc[c + 4] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), low4), bias);
    }
  }
}

// 128 times each of the 16 rows' code sums over a block (load_codes): what
// the activations' +128 adds, to take back out. Computed, not stored, so the
// weights stream no more bytes than the file's blocks.
TS_VNNI inline __m512i code_offsets(const __m512i wc[8]) {
  __m512i sum = _mm512_setzero_si512();
  for (int c = 0; c < 8; ++c) sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), wc[c]);
  return _mm512_slli_epi32(sum, 7);
}

// One block's factors for the 16 rows of a group, and the Note's formula
// with them, lane by lane.
template <QFormat F>
struct Factors {
  __m512i off;            // 128 x the codes' sums (Q6_K: each half's times its scale)
  __m512i sc_lo, sc_hi;   // Q6_K
  __m512 d, sc, dmin, m;  // Q8_0, Q4_0, Q6_K: d only

  // `o`: the group's packed bytes; b: the block; code_off its code_offsets
  // (Q6_K: unused, its header holds them).
  __attribute__((always_inline)) Factors(const uint8_t* o, int64_t b, __m512i code_off) : off(code_off) {
    const uint8_t* head = o + packed_header_offset(F, b);  // K-quants
    if constexpr (F == QFormat::Q6_K) {
      const int64_t jb = b % (kQKBlock / kQBlock);
      d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(head)));
      const uint8_t* scales = head + kQ6ScaleAt + 2 * jb * kPackRows;
      sc_lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
      sc_hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + kPackRows)));
      off = _mm512_loadu_si512(head + kQ6OffsetAt + jb * kPackRows * 4);
      return;
    }
    const uint8_t* fac = o + packed_block_offset(F, b) + packed_block_code_bytes(F);
    if constexpr (F == QFormat::Q4_K) {
      d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(head)));
      dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(head + 32)));
      sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(fac))));
      m = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(fac + 16))));
    } else {
      d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(fac)));
    }
  }

  // acc plus the block's share for one token: s its int32 sums over the
  // block (+128 codes), `row` its packed activation row. Not for Q6_K.
  __m512 add(__m512i s, const uint8_t* row, int64_t cols, int64_t b, __m512 acc) const {
    const __m512 t = _mm512_cvtepi32_ps(_mm512_sub_epi32(s, off));
    const __m512 dx = _mm512_set1_ps(packed_act_scale(row, cols, b));
    if constexpr (F == QFormat::Q4_K) {
      acc = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_mul_ps(sc, t), acc);
      const __m512 sx = _mm512_set1_ps(static_cast<float>(packed_act_sum(row, cols, b)));
      return _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_mul_ps(m, sx), acc);
    } else {
      return _mm512_fmadd_ps(_mm512_mul_ps(d, dx), t, acc);
    }
  }
  // The same from the sums over values 0..15 (lo) and 16..31 (hi).
  __m512 add_halves(__m512i lo, __m512i hi, const uint8_t* row, int64_t cols, int64_t b, __m512 acc) const {
    if constexpr (F == QFormat::Q6_K) {
      const __m512i s = _mm512_sub_epi32(_mm512_add_epi32(_mm512_mullo_epi32(sc_lo, lo), _mm512_mullo_epi32(sc_hi, hi)), off);
      return _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(packed_act_scale(row, cols, b))), _mm512_cvtepi32_ps(s), acc);
    } else {
      return add(_mm512_add_epi32(lo, hi), row, cols, b, acc);
    }
  }
};

// Row group g (rows 16g.., lanes kept by `keep` written) against tokens
// [i0, i0 + T), by vpdpbusd.
template <QFormat F, int T>
TS_VNNI void vnni_tile(const PackedQMatrix& w, int64_t g, const uint8_t* act, int64_t i0, float* y, int64_t ldy,
                       __mmask16 keep) {
  const int64_t nb = w.cols / kQBlock, ab = packed_act_bytes(w.cols);
  const uint8_t* o = w.data + g * packed_group_bytes(F, w.cols);
  const uint8_t* a = act + i0 * ab;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = o + packed_block_offset(F, b);
    for (int64_t l = 0; l < packed_group_block_bytes(F); l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchBytes + l), _MM_HINT_T0);
    __m512i wc[8];
    load_codes<F>(blk, wc);
    const Factors<F> fac(o, b, F == QFormat::Q6_K ? _mm512_setzero_si512() : code_offsets(wc));
    for (int t = 0; t < T; ++t) {
      const uint8_t* x = a + t * ab + b * kQBlock;
      __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();  // values 0..15, 16..31
      for (int c = 0; c < 4; ++c) {
        lo = _mm512_dpbusd_epi32(lo, _mm512_set1_epi32(static_cast<int>(load_u32(x + 4 * c))), wc[c]);
        hi = _mm512_dpbusd_epi32(hi, _mm512_set1_epi32(static_cast<int>(load_u32(x + 16 + 4 * c))), wc[c + 4]);
      }
      acc[t] = fac.add_halves(lo, hi, a + t * ab, w.cols, b, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + (i0 + t) * ldy + g * kPackRows, keep, acc[t]);
}

using VnniTile = void (*)(const PackedQMatrix&, int64_t, const uint8_t*, int64_t, float*, int64_t, __mmask16);
template <QFormat F, int... Ts>
constexpr std::array<VnniTile, sizeof...(Ts)> vnni_tiles(std::integer_sequence<int, Ts...>) {
  return {vnni_tile<F, Ts + 1>...};
}

template <QFormat F>
TS_VNNI void vnni_tokens(const PackedQMatrix& w, int64_t g, const uint8_t* act, int64_t i0, int64_t m, float* y,
                         int64_t ldy, __mmask16 keep) {
  static constexpr auto kTiles = vnni_tiles<F>(std::make_integer_sequence<int, kVnniTokens>{});
  for (int64_t i = i0; i < m; i += kVnniTokens) kTiles[std::min<int64_t>(kVnniTokens, m - i) - 1](w, g, act, i, y, ldy, keep);
}

__mmask16 rows_kept(int64_t g, int64_t r1) {
  const int64_t n = std::min<int64_t>(kPackRows, r1 - g * kPackRows);
  return static_cast<__mmask16>((1u << n) - 1);
}

// Weight rows [r0, r1) (r0 a multiple of 16) against tokens [0, m).
template <QFormat F>
TS_VNNI void qgemm_rows_vnni(const PackedQMatrix& w, const uint8_t* act, int64_t m, float* y, int64_t ldy, int64_t r0,
                             int64_t r1) {
  for (int64_t g = r0 / kPackRows; g * kPackRows < r1; ++g) vnni_tokens<F>(w, g, act, 0, m, y, ldy, rows_kept(g, r1));
}

// AMX tiles 0-2 and 3-5, two sets: the activations (16 tokens x 32 bytes),
// the weights (8 x 64 bytes: 4 values of the 16 rows a line), the int32
// sums (16 tokens x 16 rows), for two blocks in flight; for Q6_K the two
// halves of a block (16 bytes a token, 4 lines of weights).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);
constexpr TileConfig tile_config(uint16_t act_bytes) {
  TileConfig c;
  for (int set = 0; set < 2; ++set) {
    c.colsb[3 * set] = act_bytes;
    c.rows[3 * set] = kAmxTokens;
    c.colsb[3 * set + 1] = 64;
    c.rows[3 * set + 1] = static_cast<uint8_t>(act_bytes / 4);
    c.colsb[3 * set + 2] = 64;
    c.rows[3 * set + 2] = kAmxTokens;
  }
  return c;
}
constexpr TileConfig kBlockTiles = tile_config(kQBlock), kHalfTiles = tile_config(kQBlock / 2);

// One block's (or half's) int32 sums for 16 tokens x 16 rows into s: tiles
// 0-2 or 3-5. The intrinsics paste the tile number into the
// instruction text, so it has to be a literal, not a template parameter.
template <bool Odd>
TS_AMX inline void tile_sums(const uint8_t* act, int64_t ab, const uint8_t* codes, int32_t (*s)[16]) {
  if constexpr (!Odd) {
    _tile_zero(2);
    _tile_loadd(0, act, ab);
    _tile_loadd(1, codes, 64);
    _tile_dpbusd(2, 0, 1);
    _tile_stored(2, s, 64);
  } else {
    _tile_zero(5);
    _tile_loadd(3, act, ab);
    _tile_loadd(4, codes, 64);
    _tile_dpbusd(5, 3, 4);
    _tile_stored(5, s, 64);
  }
}

// Row group g against tokens [i0, i0 + 16). `codes` holds the group's
// blocks' signed codes, a block every code_stride bytes (512 for the
// nibbles' unpacked copy; for Q8_0 the packed matrix itself), `offs` their
// code_offsets, a block's 16 after another (not for Q6_K).
template <QFormat F>
TS_AMX void amx_tile(const PackedQMatrix& w, int64_t g, const uint8_t* codes, int64_t code_stride,
                     const int32_t* offs, const uint8_t* act, int64_t i0, float* y, int64_t ldy, __mmask16 keep) {
  const int64_t nb = w.cols / kQBlock, ab = packed_act_bytes(w.cols);
  const uint8_t* o = w.data + g * packed_group_bytes(F, w.cols);
  const uint8_t* a = act + i0 * ab;
  alignas(64) int32_t sums[2][kAmxTokens][16];
  __m512 acc[kAmxTokens];  // a token each, its 16 rows in the lanes
  for (int t = 0; t < kAmxTokens; ++t) acc[t] = _mm512_setzero_ps();
  auto add_block = [&](int64_t b, const int32_t(*s)[16]) {
    const Factors<F> fac(o, b, _mm512_loadu_si512(offs + 16 * b));
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) acc[t] = fac.add(_mm512_load_si512(s[t]), a + t * ab, w.cols, b, acc[t]);
  };
  if constexpr (F == QFormat::Q6_K) {
    for (int64_t b = 0; b < nb; ++b) {
      tile_sums<false>(a + b * kQBlock, ab, codes + b * code_stride, sums[0]);
      tile_sums<true>(a + b * kQBlock + 16, ab, codes + b * code_stride + 256, sums[1]);
      const Factors<F> fac(o, b, _mm512_setzero_si512());
#pragma GCC unroll 16
      for (int t = 0; t < kAmxTokens; ++t)
        acc[t] = fac.add_halves(_mm512_load_si512(sums[0][t]), _mm512_load_si512(sums[1][t]), a + t * ab, w.cols, b,
                                acc[t]);
    }
    for (int t = 0; t < kAmxTokens; ++t) _mm512_mask_storeu_ps(y + (i0 + t) * ldy + g * kPackRows, keep, acc[t]);
    return;
  }
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    tile_sums<false>(a + b * kQBlock, ab, codes + b * code_stride, sums[0]);
    tile_sums<true>(a + (b + 1) * kQBlock, ab, codes + (b + 1) * code_stride, sums[1]);
    add_block(b, sums[0]);
    add_block(b + 1, sums[1]);
  }
  if (b < nb) {
    tile_sums<false>(a + b * kQBlock, ab, codes + b * code_stride, sums[0]);
    add_block(b, sums[0]);
  }
  for (int t = 0; t < kAmxTokens; ++t) _mm512_mask_storeu_ps(y + (i0 + t) * ldy + g * kPackRows, keep, acc[t]);
}

// Whole groups of 16 tokens on AMX, the rest on VNNI (the same bits).
template <QFormat F>
TS_AMX void qgemm_rows_amx(const PackedQMatrix& w, const uint8_t* act, int64_t m, float* y, int64_t ldy, int64_t r0,
                           int64_t r1) {
  const int64_t whole = m / kAmxTokens * kAmxTokens;
  const int64_t nb = w.cols / kQBlock;
  if (whole > 0) _tile_loadconfig(F == QFormat::Q6_K ? &kHalfTiles : &kBlockTiles);
  // Per row group, once for all its token tiles: the nibbles unpacked for
  // the tile loads, and the blocks' code offsets.
  std::optional<Scratch<uint8_t>> unpacked;
  std::optional<Scratch<int32_t>> offs;
  if (F != QFormat::Q8_0 && whole > 0) unpacked.emplace(nb * 512);
  if (F != QFormat::Q6_K && whole > 0) offs.emplace(nb * 16);
  for (int64_t g = r0 / kPackRows; g * kPackRows < r1; ++g) {
    const __mmask16 keep = rows_kept(g, r1);
    if (whole > 0) {
      const uint8_t* codes = w.data + g * packed_group_bytes(F, w.cols);
      int64_t stride = packed_group_block_bytes(F);
      for (int64_t b = 0; b < nb; ++b) {
        __m512i wc[8];
        load_codes<F>(codes + packed_block_offset(F, b), wc);
        if constexpr (F != QFormat::Q8_0)
          for (int c = 0; c < 8; ++c) _mm512_storeu_si512(unpacked->data() + b * 512 + 64 * c, wc[c]);
        if constexpr (F != QFormat::Q6_K) _mm512_storeu_si512(offs->data() + 16 * b, code_offsets(wc));
      }
      if constexpr (F != QFormat::Q8_0) {
        asm volatile("" ::: "memory");  // the tile loads below read what was just stored
        codes = unpacked->data();
        stride = 512;
      }
      const int32_t* o = F == QFormat::Q6_K ? nullptr : offs->data();
      for (int64_t i = 0; i < whole; i += kAmxTokens) amx_tile<F>(w, g, codes, stride, o, act, i, y, ldy, keep);
    }
    vnni_tokens<F>(w, g, act, whole, m, y, ldy, keep);
  }
  if (whole > 0) _tile_release();
}

// qpack_act_ref's bits, 32 values a step: the conversion rounds v * id half
// to even, as the reference's nearbyint does.
void qpack_act(const float* x, int64_t cols, uint8_t* out) {
  const int64_t nb = cols / kQBlock;
  const __m512 huge = _mm512_set1_ps(3.4e38f);
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + b * kQBlock), v1 = _mm512_loadu_ps(x + b * kQBlock + 16);
    const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
    // Ordered compares: false for NaN as for infinities.
    const bool finite = (_mm512_cmp_ps_mask(a0, huge, _CMP_LE_OQ) & _mm512_cmp_ps_mask(a1, huge, _CMP_LE_OQ)) == 0xFFFF;
    const float amax = finite ? _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)) : 0.f;  // exact in any order
    const float d = finite ? amax / 127.f : NAN;
    const float id = finite && d != 0.f ? 1.f / d : 0.f;
    const __m512 s = _mm512_set1_ps(id);
    const __m512i zero = _mm512_setzero_si512();  // a non-finite block's codes
    const __m512i q0 = finite ? _mm512_cvtps_epi32(_mm512_mul_ps(v0, s)) : zero;
    const __m512i q1 = finite ? _mm512_cvtps_epi32(_mm512_mul_ps(v1, s)) : zero;
    const __m128i bias = _mm_set1_epi8(static_cast<char>(0x80));  // + 128 on codes in [-127, 127]
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b * kQBlock), _mm_xor_si128(_mm512_cvtepi32_epi8(q0), bias));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b * kQBlock + 16), _mm_xor_si128(_mm512_cvtepi32_epi8(q1), bias));
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    std::memcpy(out + cols + b * 4, &d, 4);
    std::memcpy(out + cols + nb * 4 + b * 4, &sum, 4);
  }
}

}  // namespace

void fill_qgemm_vnni_kernels(KernelTable& t) {
  t.qpack_act = qpack_act;
  t.qgemm_rows[static_cast<int>(QFormat::Q8_0)] = qgemm_rows_vnni<QFormat::Q8_0>;
  t.qgemm_rows[static_cast<int>(QFormat::Q4_0)] = qgemm_rows_vnni<QFormat::Q4_0>;
  t.qgemm_rows[static_cast<int>(QFormat::Q4_K)] = qgemm_rows_vnni<QFormat::Q4_K>;
  t.qgemm_rows[static_cast<int>(QFormat::Q6_K)] = qgemm_rows_vnni<QFormat::Q6_K>;
}

void fill_qgemm_amx_kernels(KernelTable& t) {
  t.qpack_act = qpack_act;
  t.qgemm_rows[static_cast<int>(QFormat::Q8_0)] = qgemm_rows_amx<QFormat::Q8_0>;
  t.qgemm_rows[static_cast<int>(QFormat::Q4_0)] = qgemm_rows_amx<QFormat::Q4_0>;
  t.qgemm_rows[static_cast<int>(QFormat::Q4_K)] = qgemm_rows_amx<QFormat::Q4_K>;
  t.qgemm_rows[static_cast<int>(QFormat::Q6_K)] = qgemm_rows_amx<QFormat::Q6_K>;
}
#elif defined(__AVX2__)
// Note [Packed int8 products on AVX2]
// Without VNNI a block's 4-byte dot products are vpmaddubsw (unsigned x
// signed bytes, adjacent pairs summed to int16, saturating) then vpmaddwd
// with ones (int16 pairs to int32). Which operand is unsigned depends on the
// codes:
// - Q4_0 and Q4_K: the 4-bit codes u (0..15, before Q4_0's -8) are the
//   unsigned operand and the activations' signed codes x the other: a pair
//   is at most 2 * 15 * 127, so four chunks' pairs add in int16 before one
//   vpmaddwd. Q4_0's -8 comes back as -8 times the activation block's sum.
//   No code sums are needed, which the VNNI form (x + 128 against signed
//   codes) must take out again at a cost as large as the products' for one
//   token (decode).
// - Q6_K: the activations' codes + 128 are the unsigned operand (|w| <= 32:
//   a pair is at most 2 * 255 * 32, so two chunks' pairs add in int16), and
//   vpmaddwd multiplies by each row's 16-value scale instead of ones; the
//   offsets kept in the block's header come back out as in the VNNI kernel.
// - Q8_0's codes would saturate either way, so the signs move to the
//   activations (|w| times x * sign(w), at most 2 * 128 * 127 per pair).
// All are the same integers as the Note's s minus its offset, so the results
// are qgemm_ref's bits. AVX2 has 8 lanes: a 16-row group is done as two halves
// of 8 rows, up to kAvx2Tokens tokens a pass (the second half reads the
// group's bytes from cache). One token (decode) takes both halves block by
// block instead (avx2_token): done half after half, the first half waited on
// memory and the second ran from cache, and decode at 1 thread ran 0.82-0.98x
// of llama.cpp's AVX2 build for Q4_0/Q4_K/Q4_K_M; block by block it is
// 1.08-1.39x (AMD EPYC Zen 5 at TESSERA_CPU_CAPABILITY=avx2).
namespace {

constexpr int kAvx2Tokens = 4;

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m128i load64(const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }

inline __m256i q6_high(__m256i h, int c) {
  const __m256i v = c == 0   ? _mm256_slli_epi16(h, 4)
                    : c == 1 ? _mm256_slli_epi16(h, 2)
                    : c == 2 ? h
                             : _mm256_srli_epi16(h, 2);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x30));
}

// Half `half` (rows 8 half ..) of a block's 8 chunks of signed codes: the
// 64-byte chunks of qgemm.h, 32 bytes of each.
template <QFormat F>
inline void load_codes(const uint8_t* o, int half, __m256i wc[8]) {
  o += 32 * half;
  if constexpr (F == QFormat::Q8_0) {
    for (int c = 0; c < 8; ++c) wc[c] = load256(o + 64 * c);
  } else if constexpr (F == QFormat::Q6_K) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), bias = _mm256_set1_epi8(32);
    const __m256i h0 = load256(o + 256), h1 = load256(o + 320);
    for (int c = 0; c < 4; ++c) {
      const __m256i v = load256(o + 64 * c);
      const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
      wc[c] = _mm256_sub_epi8(_mm256_or_si256(lo, q6_high(h0, c)), bias);
      wc[c + 4] = _mm256_sub_epi8(_mm256_or_si256(hi, q6_high(h1, c)), bias);
    }
  } else {  // Q4_0, Q4_K: unsigned codes 0..15 (the Note)
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m256i v = load256(o + 64 * c);
      wc[c] = _mm256_and_si256(v, low4);
      wc[c + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    }
  }
}

// Each row's sums of 16 values' products, values 0..15 (lo) and 16..31 (hi)
// of a block: x the activation bytes (codes + 128), w the 8 chunks of codes.
// Q6_K's sums come multiplied by the rows' scales (scale[0] for lo, scale[1]
// for hi: int16, twice in each row's lane).
template <QFormat F>
inline void block_dot(const uint8_t* x, const __m256i w[8], const __m256i scale[2], __m256i& lo, __m256i& hi) {
  // Activation bytes 4c..4c+3 in every lane (a broadcast from memory); signed: without the + 128, flipped in
  // the vector unit (a flip of the scalar first cost a move to the vector unit each: Q8_0 prefill 10% slower).
  auto bytes = [&](int c, bool is_signed) {
    const __m256i v = _mm256_set1_epi32(static_cast<int>(load_u32(x + 4 * c)));
    return is_signed ? _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))) : v;
  };
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (F == QFormat::Q4_0 || F == QFormat::Q4_K) {
    // Unsigned codes against signed activations; four chunks' int16 pairs
    // (each at most 2 * 15 * 127) add before one vpmaddwd.
    __m256i p[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      p[h] = _mm256_maddubs_epi16(w[4 * h], bytes(4 * h, true));
#pragma GCC unroll 3
      for (int c = 1; c < 4; ++c)
        p[h] = _mm256_add_epi16(p[h], _mm256_maddubs_epi16(w[4 * h + c], bytes(4 * h + c, true)));
    }
    lo = _mm256_madd_epi16(p[0], ones);
    hi = _mm256_madd_epi16(p[1], ones);
  } else if constexpr (F == QFormat::Q6_K) {
    // Two chunks' int16 pairs (each at most 2 * 255 * 32) add, then one
    // vpmaddwd by the rows' scales.
    __m256i acc[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      acc[h] = _mm256_setzero_si256();
#pragma GCC unroll 2
      for (int c = 4 * h; c < 4 * h + 4; c += 2) {
        const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(bytes(c, false), w[c]),
                                           _mm256_maddubs_epi16(bytes(c + 1, false), w[c + 1]));
        acc[h] = _mm256_add_epi32(acc[h], _mm256_madd_epi16(p, scale[h]));
      }
    }
    lo = acc[0];
    hi = acc[1];
  } else {  // Q8_0: the signs move to the activations
    auto dot = [&](int c) {
      const __m256i xs = bytes(c, true);
      return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w[c]), _mm256_sign_epi8(xs, w[c])), ones);
    };
    lo = dot(0);
    hi = dot(4);
#pragma GCC unroll 3
    for (int c = 1; c < 4; ++c) {
      lo = _mm256_add_epi32(lo, dot(c));
      hi = _mm256_add_epi32(hi, dot(c + 4));
    }
  }
}

// One block's factors for 8 rows, and the Note's formula with them, in the
// VNNI kernel's order of operations.
template <QFormat F>
struct Factors {
  __m256i off = _mm256_setzero_si256();  // subtracted from the sums (Q6_K: from its header)
  __m256i scale[2];                      // Q6_K: each row's scales of values 0..15 and 16..31, as block_dot takes them
  __m256 d, sc, dmin, m;

  Factors(const uint8_t* o, int64_t b, int half) {
    const uint8_t* head = o + packed_header_offset(F, b);
    if constexpr (F == QFormat::Q6_K) {
      const int64_t jb = b % (kQKBlock / kQBlock);
      d = _mm256_cvtph_ps(load128(head + 16 * half));
      const uint8_t* scales = head + kQ6ScaleAt + 2 * jb * kPackRows + 8 * half;
      for (int h = 0; h < 2; ++h) {
        const __m256i s32 = _mm256_cvtepi8_epi32(load64(scales + h * kPackRows));
        scale[h] = _mm256_or_si256(_mm256_and_si256(s32, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s32, 16));
      }
      off = load256(head + kQ6OffsetAt + jb * kPackRows * 4 + 32 * half);
      return;
    }
    const uint8_t* fac = o + packed_block_offset(F, b) + packed_block_code_bytes(F);
    if constexpr (F == QFormat::Q4_K) {
      d = _mm256_cvtph_ps(load128(head + 16 * half));
      dmin = _mm256_cvtph_ps(load128(head + 32 + 16 * half));
      sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(load64(fac + 8 * half)));
      m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(load64(fac + 16 + 8 * half)));
    } else {
      d = _mm256_cvtph_ps(load128(fac + 16 * half));
    }
  }

  __m256 add(__m256i lo, __m256i hi, const uint8_t* row, int64_t cols, int64_t b, __m256 acc) const {
    const __m256 dx = _mm256_set1_ps(packed_act_scale(row, cols, b));
    if constexpr (F == QFormat::Q6_K) {
      const __m256i s = _mm256_sub_epi32(_mm256_add_epi32(lo, hi), off);  // scaled in block_dot
      return _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(s), acc);
    }
    __m256i s = _mm256_add_epi32(lo, hi);
    if constexpr (F == QFormat::Q4_0)  // the codes' -8 (the Note)
      s = _mm256_sub_epi32(s, _mm256_set1_epi32(8 * packed_act_sum(row, cols, b)));
    const __m256 t = _mm256_cvtepi32_ps(s);
    if constexpr (F == QFormat::Q4_K) {
      acc = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_mul_ps(sc, t), acc);
      const __m256 sx = _mm256_set1_ps(static_cast<float>(packed_act_sum(row, cols, b)));
      return _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_mul_ps(m, sx), acc);
    }
    return _mm256_fmadd_ps(_mm256_mul_ps(d, dx), t, acc);
  }
};

// Rows 16 g + 8 half .. (the first `keep` of them written) against tokens [i0, i0 + T).
template <QFormat F, int T>
void avx2_tile(const PackedQMatrix& w, int64_t g, int half, const uint8_t* act, int64_t i0, float* y, int64_t ldy,
               int keep) {
  const int64_t nb = w.cols / kQBlock, ab = packed_act_bytes(w.cols);
  const uint8_t* o = w.data + g * packed_group_bytes(F, w.cols);
  const uint8_t* a = act + i0 * ab;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = o + packed_block_offset(F, b);
    if (half == 0 && i0 == 0)
      for (int64_t l = 0; l < packed_group_block_bytes(F); l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchBytes + l), _MM_HINT_T0);
    __m256i wc[8];
    load_codes<F>(blk, half, wc);
    const Factors<F> fac(o, b, half);
    for (int t = 0; t < T; ++t) {
      __m256i lo, hi;
      block_dot<F>(a + t * ab + b * kQBlock, wc, fac.scale, lo, hi);
      acc[t] = fac.add(lo, hi, a + t * ab, w.cols, b, acc[t]);
    }
  }
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(keep), lanes);
  for (int t = 0; t < T; ++t) _mm256_maskstore_ps(y + (i0 + t) * ldy + g * kPackRows + 8 * half, mask, acc[t]);
}

// One token (decode): both halves of group g's rows block by block, so each
// block's bytes are read from memory once, in order, and used at once.
template <QFormat F>
void avx2_token(const PackedQMatrix& w, int64_t g, const uint8_t* act, float* y, int keep) {
  const int64_t nb = w.cols / kQBlock;
  const uint8_t* o = w.data + g * packed_group_bytes(F, w.cols);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = o + packed_block_offset(F, b);
    for (int64_t l = 0; l < packed_group_block_bytes(F); l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchBytes + l), _MM_HINT_T0);
    for (int half = 0; half < 2; ++half) {
      __m256i wc[8];
      load_codes<F>(blk, half, wc);
      const Factors<F> fac(o, b, half);
      __m256i lo, hi;
      block_dot<F>(act + b * kQBlock, wc, fac.scale, lo, hi);
      acc[half] = fac.add(lo, hi, act, w.cols, b, acc[half]);
    }
  }
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int half = 0; half < 2; ++half) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(keep - 8 * half), lanes);
    _mm256_maskstore_ps(y + g * kPackRows + 8 * half, mask, acc[half]);
  }
}

using Avx2Tile = void (*)(const PackedQMatrix&, int64_t, int, const uint8_t*, int64_t, float*, int64_t, int);
template <QFormat F, int... Ts>
constexpr std::array<Avx2Tile, sizeof...(Ts)> avx2_tiles(std::integer_sequence<int, Ts...>) {
  return {avx2_tile<F, Ts + 1>...};
}

// Weight rows [r0, r1) (r0 a multiple of 16) against tokens [0, m).
template <QFormat F>
void qgemm_rows_avx2(const PackedQMatrix& w, const uint8_t* act, int64_t m, float* y, int64_t ldy, int64_t r0,
                     int64_t r1) {
  static constexpr auto kTiles = avx2_tiles<F>(std::make_integer_sequence<int, kAvx2Tokens>{});
  for (int64_t g = r0 / kPackRows; g * kPackRows < r1; ++g) {
    const int64_t n = std::min<int64_t>(kPackRows, r1 - g * kPackRows);
    if (m == 1) {
      avx2_token<F>(w, g, act, y, static_cast<int>(n));
      continue;
    }
    for (int half = 0; half < 2 && 8 * half < n; ++half)
      for (int64_t i = 0; i < m; i += kAvx2Tokens)
        kTiles[std::min<int64_t>(kAvx2Tokens, m - i) - 1](w, g, half, act, i, y, ldy,
                                                          static_cast<int>(std::min<int64_t>(8, n - 8 * half)));
  }
}

inline float hmax(__m256 v) {
  const __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 b = _mm_max_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_max_ss(b, _mm_shuffle_ps(b, b, 1)));
}

inline int32_t hsum(__m256i v) {
  const __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i b = _mm_add_epi32(a, _mm_unpackhi_epi64(a, a));
  return _mm_cvtsi128_si32(_mm_add_epi32(b, _mm_shuffle_epi32(b, 1)));
}

// qpack_act_ref's bits, 32 values a step (as the AVX-512 version).
void qpack_act(const float* x, int64_t cols, uint8_t* out) {
  const int64_t nb = cols / kQBlock;
  const __m256 huge = _mm256_set1_ps(3.4e38f), sign = _mm256_set1_ps(-0.f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < nb; ++b) {
    __m256 v[4], a[4];
    bool finite = true;
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(x + b * kQBlock + 8 * j);
      a[j] = _mm256_andnot_ps(sign, v[j]);
      finite = finite && _mm256_movemask_ps(_mm256_cmp_ps(a[j], huge, _CMP_LE_OQ)) == 0xFF;  // false for NaN
    }
    const float amax = finite ? hmax(_mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]))) : 0.f;
    const float d = finite ? amax / 127.f : NAN;
    const float id = finite && d != 0.f ? 1.f / d : 0.f;
    __m256i q[4];
    for (int j = 0; j < 4; ++j)
      q[j] = finite ? _mm256_cvtps_epi32(_mm256_mul_ps(v[j], _mm256_set1_ps(id))) : _mm256_setzero_si256();
    // Codes in [-127, 127]: the packs never saturate; the permute undoes their lane interleave.
    const __m256i bytes = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b * kQBlock),
                        _mm256_xor_si256(bytes, _mm256_set1_epi8(static_cast<char>(0x80))));
    const int32_t sum = hsum(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    std::memcpy(out + cols + b * 4, &d, 4);
    std::memcpy(out + cols + nb * 4 + b * 4, &sum, 4);
  }
}

}  // namespace

void fill_qgemm_avx2_kernels(KernelTable& t) {
  t.qpack_act = qpack_act;
  t.qgemm_rows[static_cast<int>(QFormat::Q8_0)] = qgemm_rows_avx2<QFormat::Q8_0>;
  t.qgemm_rows[static_cast<int>(QFormat::Q4_0)] = qgemm_rows_avx2<QFormat::Q4_0>;
  t.qgemm_rows[static_cast<int>(QFormat::Q4_K)] = qgemm_rows_avx2<QFormat::Q4_K>;
  t.qgemm_rows[static_cast<int>(QFormat::Q6_K)] = qgemm_rows_avx2<QFormat::Q6_K>;
}
#endif

}  // namespace tessera::cpu::TESSERA_ISA
