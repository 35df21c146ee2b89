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

#include <immintrin.h>

#include "backend/cpu/kernels/common.h"
#include "tessera/core/error.h"

namespace tessera::cpu::TESSERA_ISA {
namespace {

#if defined(__AVX512F__)
constexpr int kW = 16, kR = 4, kM = 6;  // 24 zmm accumulators of 32
#elif defined(__AVX2__)
constexpr int kW = 8, kR = 4, kM = 3;   // 12 ymm accumulators of 16
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

// The lanes added by the halving tree (lane l += lane l + h for h = kW/2
// down to 1) in registers: a sum through memory stalls on store forwarding,
// which cost ~15% of a batch-1 product.
inline float hsum(V v) {
#if defined(__AVX512F__)
  __m512 z;
  std::memcpy(&z, &v, sizeof z);
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(z), _mm512_extractf32x8_ps(z, 1));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
#elif defined(__AVX2__)
  __m256 a;
  std::memcpy(&a, &v, sizeof a);
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
#else
  __m128 b;
  std::memcpy(&b, &v, sizeof b);
#endif
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

#if defined(__AVX512F__)
// out[n] = hsum(v[n]) for n < N, 16 at a time: the same additions of the
// same lanes as hsum (the halving tree), for 16 vectors in 15 adds, 30
// shuffles and a permute where hsum takes 7 instructions each. Padding
// vectors are zero and their sums dropped.
template <int N>
inline void hsums(const V (&v)[N], float* out) {
  for (int g = 0; g < N; g += 16) {
    __m512 a[16];
    for (int n = 0; n < 16; ++n) {
      if (g + n < N) std::memcpy(&a[n], &v[g + n], sizeof(__m512));
      else a[n] = _mm512_setzero_ps();
    }
    // lane l + lane l + 8: two vectors' 8 sums a register
    __m512 t[8];
    for (int j = 0; j < 8; ++j)
      t[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0x44),
                           _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0xee));
    // + 4: four vectors' 4 sums, one vector a 128-bit lane
    __m512 s[4];
    for (int j = 0; j < 4; ++j)
      s[j] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0x88),
                           _mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0xdd));
    // + 2, then + 1, inside each 128-bit lane
    __m512 q[2];
    for (int j = 0; j < 2; ++j)
      q[j] = _mm512_add_ps(_mm512_shuffle_ps(s[2 * j], s[2 * j + 1], 0x44),
                           _mm512_shuffle_ps(s[2 * j], s[2 * j + 1], 0xee));
    __m512 o = _mm512_add_ps(_mm512_shuffle_ps(q[0], q[1], 0x88), _mm512_shuffle_ps(q[0], q[1], 0xdd));
    // element 4 L + c holds the sum of vector 4 c + L
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    alignas(64) float sums[16];
    _mm512_store_ps(sums, _mm512_permutexvar_ps(order, o));
    for (int n = 0; n < 16 && g + n < N; ++n) out[g + n] = sums[n];
  }
}
#elif defined(__AVX2__)
// The same for 8 vectors of 8 lanes at once.
template <int N>
inline void hsums(const V (&v)[N], float* out) {
  for (int g = 0; g < N; g += 8) {
    __m256 a[8];
    for (int n = 0; n < 8; ++n) {
      if (g + n < N) std::memcpy(&a[n], &v[g + n], sizeof(__m256));
      else a[n] = _mm256_setzero_ps();
    }
    __m256 t[4];  // lane l + lane l + 4: two vectors' 4 sums a register
    for (int j = 0; j < 4; ++j)
      t[j] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * j], a[2 * j + 1], 0x20),
                           _mm256_permute2f128_ps(a[2 * j], a[2 * j + 1], 0x31));
    __m256 q[2];  // + 2, then + 1, inside each 128-bit lane
    for (int j = 0; j < 2; ++j)
      q[j] = _mm256_add_ps(_mm256_shuffle_ps(t[2 * j], t[2 * j + 1], 0x44),
                           _mm256_shuffle_ps(t[2 * j], t[2 * j + 1], 0xee));
    const __m256 o = _mm256_add_ps(_mm256_shuffle_ps(q[0], q[1], 0x88), _mm256_shuffle_ps(q[0], q[1], 0xdd));
    // elements 0-3 hold the sums of vectors 0, 2, 4, 6; elements 4-7 of 1, 3, 5, 7
    alignas(32) float sums[8];
    _mm256_store_ps(sums, _mm256_permutevar8x32_ps(o, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    for (int n = 0; n < 8 && g + n < N; ++n) out[g + n] = sums[n];
  }
}
#endif

// Note [Prefetching the next rows]
// The R rows of a block are R interleaved streams; on short rows (an LLM's
// 768-wide f16 projections, 1.5 KB a row) the hardware prefetcher does not
// follow them and a batch-1 product read 8 GB/s where one row at a time read
// 27 (Zen 5). Touching the next block's rows, a cache line per row as this
// block's reads cross one, brings it back to 25. No effect on any result.
// A single activation row on AVX-512 now reads one row at a time (Note [One
// weight row at a time]), without it, and the LLM engine's F32/F16 groups
// prefetch the next group instead (prefetch_next_group).
// (An asm statement: GCC 12 drops __builtin_prefetch from these loops. Its
// address is a register operand and it is always inlined: with an "m"
// operand, or called out of line, GCC kept the block's accumulators on the
// stack, stored and reloaded every step, and F16 decode at one thread ran
// at 82 tokens/s where it now runs at 131-144; Zen 5, 110M model.)
template <typename T, int R>
[[gnu::always_inline]] inline void prefetch_next_rows(const T* w, int64_t ldw, int64_t p) {
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));  // elements per cache line
  if ((p & (kLine - 1)) == 0)
    for (int r = 0; r < R; ++r) asm volatile("prefetcht0 (%0)" : : "r"(w + (R + r) * ldw + p));
}

// The same for interleaved groups (Note [Interleaved weight rows]): the
// next group's bytes of this step, which start R * ldw elements on.
template <typename T, int R>
[[gnu::always_inline]] inline void prefetch_next_group(const T* w, int64_t ldw, int64_t p) {
  constexpr int64_t kBytes = R * kW * static_cast<int64_t>(sizeof(T));  // a step of the group
  const char* next = reinterpret_cast<const char*>(w + R * ldw + p * R);
  if constexpr (kBytes >= 64) {
    for (int64_t b = 0; b < kBytes; b += 64) asm volatile("prefetcht0 (%0)" : : "r"(next + b));
  } else if ((p * R * static_cast<int64_t>(sizeof(T))) % 64 == 0) {
    asm volatile("prefetcht0 (%0)" : : "r"(next));
  }
}

// out[r * M + i] = row r of w (R rows, stride ldw) . xs[i] (M rows), k long,
// with weights of type T widened to float. Packed: the R rows are a group
// interleaved step by step (Note [Interleaved weight rows]): row r's step at
// p is at w + p * R + r * kW, and k is a multiple of kW.
template <typename T, bool Packed = false>
struct Widening {
  using W = T;
  using X = float;
  static constexpr int kR = cpu::TESSERA_ISA::kR, kM = cpu::TESSERA_ISA::kM;
  static constexpr bool kPacked = Packed;
  // Whether rows() may hand it one weight row at a time (Note [One weight
  // row at a time]): one chain of multiply-adds per row keeps up with memory
  // at 16 lanes, not at 8 (AVX2: F16 decode fell from 89 to 61 tokens/s).
  static constexpr bool kLinearRows = kW >= 16 && !Packed;

  // acc += the kW-element step of k at p.
  template <int R, int M, bool Prefetch>
  [[gnu::always_inline]] static inline void step(const T* w, int64_t ldw, int64_t p, const float* const* xs,
                                                 V (&acc)[R][M]) {
    V xv[M];
    for (int i = 0; i < M; ++i) xv[i] = load_x(xs[i] + p);
    if constexpr (Prefetch && Packed) prefetch_next_group<T, R>(w, ldw, p);
    else if constexpr (Prefetch) prefetch_next_rows<T, R>(w, ldw, p);
    for (int r = 0; r < R; ++r) {
      const V wv = load_w(Packed ? w + p * R + r * kW : w + r * ldw + p);
      for (int i = 0; i < M; ++i) acc[r][i] += wv * xv[i];
    }
  }

  template <int R, int M, bool Prefetch>
  static void block(const T* w, int64_t ldw, int64_t k, const float* const* xs, float* out) {
    const int64_t kv = k / kW * kW;
    V acc[R][M];  // zeroed one by one: with `= {}` GCC zeroed a copy in memory (rep stos) in some instantiations
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < M; ++i) acc[r][i] = V{};
    for (int64_t p = 0; p < kv; p += kW) step<R, M, Prefetch>(w, ldw, p, xs, acc);
#if defined(__AVX512F__) || defined(__AVX2__)
    if constexpr (R * M >= kW / 2) {
      hsums(reinterpret_cast<const V(&)[R * M]>(acc), out);
    } else
#endif
    {
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < M; ++i) out[r * M + i] = hsum(acc[r][i]);
    }
    if (kv < k)
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < M; ++i) {
          float tail = 0.0f;
          for (int64_t p = kv; p < k; ++p) tail += ld(w[r * ldw + p]) * xs[i][p];
          out[r * M + i] += tail;
        }
  }
};

// K::block for a runtime (rows, cols) <= (kR, kM): one instantiation each.
// Prefetch: whether this pass over the rows is the first (the next rows are
// touched once, not once per group of activation rows).
template <class K, bool Prefetch, int R, int... Ms>
inline void block_m(int m, std::integer_sequence<int, Ms...>, const typename K::W* w, int64_t ldw, int64_t k,
                    const typename K::X* const* xs, float* out) {
  ((m == Ms + 1 ? (K::template block<R, Ms + 1, Prefetch>(w, ldw, k, xs, out), 0) : 0), ...);
}
template <class K, bool Prefetch, int... Rs>
inline void block_rm(int r, int m, std::integer_sequence<int, Rs...>, const typename K::W* w, int64_t ldw, int64_t k,
                     const typename K::X* const* xs, float* out) {
  ((r == Rs + 1 ? (block_m<K, Prefetch, Rs + 1>(m, std::make_integer_sequence<int, K::kM>{}, w, ldw, k, xs, out), 0)
                : 0),
   ...);
}

// y[i * ldy + r] = x[i, :] . w[r, :] for i < m, r in [r0, r1).
template <class K>
inline void rows(const void* wp, int64_t ldw, int64_t k, const typename K::X* x, int64_t ldx, int64_t m, float* y,
                 int64_t ldy, int64_t r0, int64_t r1) {
  const auto* w = static_cast<const typename K::W*>(wp);
  constexpr int kR = K::kR, kM = K::kM;
  // Long rows are long streams the hardware follows; prefetching them as
  // well lands lines too early (4096x4096 f32 at one row: 69% of a streaming
  // read with it, 72-90% without, Zen 5).
  const int64_t row_bytes = k * static_cast<int64_t>(sizeof(typename K::W));
  // An interleaved group is one stream, but at 16 activation rows and two
  // threads its first pass still waited on memory without the prefetch
  // (16 sequences' F16 decode: 620-660 tokens/s without, 730-920 with).
  const bool prefetch = K::kPacked || row_bytes <= 4096;
  // Note [One weight row at a time]
  // A decoded token's product reads each weight once, from memory: one row
  // at a time, a linear stream that the hardware prefetcher follows. In a
  // test loop over an LLM's 1.5 KB f16 rows, 35-41 GB/s where 4 interleaved
  // rows read 25-31 even with software prefetch of the next ones; in F16
  // decode of a 110M model, a median of 108 tokens/s against 101 (8
  // alternated runs; Zen 5, one thread). With 2 to kM activation rows the
  // blocks of kR rows stay: one row against 4 sequences decoded them at 330
  // tokens/s where the blocks gave 560 (the same CPU, two threads).
  // Note [Weight rows in L1 across activation tiles]
  // With more activation rows (a prompt, a batch of sequences) the weight
  // rows of a chunk (up to kChunkBytes, whole blocks of kR rows) stay in L1
  // while each group of kM activation rows passes over them, so a block
  // reads weights and activations from L1; walking block by block instead,
  // each block streamed all the activation rows through L2.
  // Neither changes the order of any sum: the bits are the same.
  constexpr int64_t kChunkBytes = 24 * 1024;
  const int step = m == 1 && K::kLinearRows ? 1 : kR;
  const int64_t chunk =
      m <= kM ? step : std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(1, row_bytes) / kR) * kR;
  for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
    const int64_t c1 = std::min(r1, c0 + chunk);
    for (int64_t i0 = 0; i0 < m; i0 += kM) {
      const int mi = static_cast<int>(std::min<int64_t>(kM, m - i0));
      const typename K::X* xs[kM];
      for (int i = 0; i < mi; ++i) xs[i] = x + (i0 + i) * ldx;
      for (int64_t r = c0; r < c1; r += step) {
        const int rr = static_cast<int>(std::min<int64_t>(step, c1 - r));
        float out[kR * kM];
        if (i0 == 0 && prefetch && step > 1)
          block_rm<K, true>(rr, mi, std::make_integer_sequence<int, kR>{}, w + r * ldw, ldw, k, xs, out);
        else
          block_rm<K, false>(rr, mi, std::make_integer_sequence<int, kR>{}, w + r * ldw, ldw, k, xs, out);
        for (int j = 0; j < rr; ++j)
          for (int i = 0; i < mi; ++i) y[(i0 + i) * ldy + r + j] = out[j * mi + i];
      }
    }
  }
}

template <typename T>
void skinny_rows(const void* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t m, float* y,
                 int64_t ldy, int64_t r0, int64_t r1) {
  rows<Widening<T>>(w, ldw, k, x, ldx, m, y, ldy, r0, r1);
}

// The group of rows from r0 starts where row r0 would unpacked, at element
// r0 * k: every group before it is whole.
template <typename T>
void skinny_rows_packed(const void* packed, int64_t rows_n, int64_t k, const float* x, int64_t ldx, int64_t m,
                        float* y, int64_t ldy, int64_t r0, int64_t r1) {
  TS_CHECK(r0 % kR == 0 && (r1 % kR == 0 || r1 == rows_n), "skinny_rows_packed: rows [", r0, ", ", r1,
           ") cut a group of ", kR);
  rows<Widening<T, true>>(packed, k, k, x, ldx, m, y, ldy, r0, r1);
}

template <typename T>
bool skinny_pack(const void* wp, int64_t rows_n, int64_t k, void* outp) {
  if (k % kW != 0) return false;
  const T* w = static_cast<const T*>(wp);
  T* out = static_cast<T*>(outp);
  for (int64_t g = 0; g < rows_n; g += kR) {
    const int64_t gr = std::min<int64_t>(kR, rows_n - g);
    for (int64_t p = 0; p < k; p += kW)
      for (int64_t r = 0; r < gr; ++r)
        std::memcpy(out + g * k + p * gr + r * kW, w + (g + r) * k + p, kW * sizeof(T));
  }
  return true;
}

#if defined(__AVX512F__)
// Note [bf16 dot products]
// With AVX512-BF16 (Zen 4, Cooper Lake, Sapphire Rapids) one vdpbf16ps
// multiplies 32 bf16 pairs and adds each lane's two products to an f32
// accumulator: bf16 weights need no widening, so a row streams at the speed
// of the loads (the widening kernel above is bound by its shifts at about
// half of that). The products of two bf16 values are exact in f32; the
// instruction flushes subnormal inputs and results to zero. Lane l sums
// elements 2l and 2l + 1 of each 32-element step in k order and the k % 32
// tail is the same step with zeros loaded past the end, so a row's result
// is, as above, the same whatever m and the thread split.
#define TS_BF16_DOT __attribute__((target("avx512bf16")))

struct Bf16Dot {
  using W = uint16_t;
  using X = uint16_t;
  static constexpr int kR = 4, kM = 4;
  static constexpr bool kPacked = false;
  static constexpr bool kLinearRows = false;  // blocks of kR rows even for one activation row (not measured alone)

  template <int R, int M, bool Tail, bool Prefetch>
  TS_BF16_DOT static inline void step(__m512 (&acc)[R][M], const uint16_t* w, int64_t ldw, const uint16_t* const* xs,
                                      int64_t p, __mmask32 mask) {
    __m512bh xv[M];
    for (int i = 0; i < M; ++i)
      xv[i] = (__m512bh)(Tail ? _mm512_maskz_loadu_epi16(mask, xs[i] + p) : _mm512_loadu_si512(xs[i] + p));
    if constexpr (Prefetch) prefetch_next_rows<uint16_t, R>(w, ldw, p);
    for (int r = 0; r < R; ++r) {
      const uint16_t* wr = w + r * ldw + p;
      const __m512bh wv = (__m512bh)(Tail ? _mm512_maskz_loadu_epi16(mask, wr) : _mm512_loadu_si512(wr));
      for (int i = 0; i < M; ++i) acc[r][i] = _mm512_dpbf16_ps(acc[r][i], wv, xv[i]);
    }
  }

  template <int R, int M, bool Prefetch>
  TS_BF16_DOT static void block(const uint16_t* w, int64_t ldw, int64_t k, const uint16_t* const* xs, float* out) {
    __m512 acc[R][M];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < M; ++i) acc[r][i] = _mm512_setzero_ps();
    const int64_t kv = k / 32 * 32;
    for (int64_t p = 0; p < kv; p += 32) step<R, M, false, Prefetch>(acc, w, ldw, xs, p, 0);
    if (kv < k)
      step<R, M, true, Prefetch>(acc, w, ldw, xs, kv, static_cast<__mmask32>((uint64_t{1} << (k - kv)) - 1));
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < M; ++i) {
        V v;
        std::memcpy(&v, &acc[r][i], sizeof v);
        out[r * M + i] = hsum(v);
      }
  }
};

TS_BF16_DOT void skinny_rows_bf16(const void* w, int64_t ldw, int64_t k, const BFloat16* x, int64_t ldx, int64_t m,
                                  float* y, int64_t ldy, int64_t r0, int64_t r1) {
  rows<Bf16Dot>(w, ldw, k, reinterpret_cast<const uint16_t*>(x), ldx, m, y, ldy, r0, r1);
}
#endif

}  // namespace

void fill_skinny_kernels(KernelTable& t) {
  t.skinny_rows[idx(DType::F32)] = skinny_rows<float>;
  t.skinny_rows[idx(DType::BF16)] = skinny_rows<BFloat16>;
  t.skinny_rows[idx(DType::F16)] = skinny_rows<Half>;
  t.skinny_rows_packed[idx(DType::F32)] = skinny_rows_packed<float>;
  t.skinny_rows_packed[idx(DType::F16)] = skinny_rows_packed<Half>;
  t.skinny_pack[idx(DType::F32)] = skinny_pack<float>;
  t.skinny_pack[idx(DType::F16)] = skinny_pack<Half>;
  t.skinny_group = kR;
}

#if defined(__AVX512F__)
void fill_bf16_dot_kernels(KernelTable& t) { t.skinny_rows_bf16 = skinny_rows_bf16; }
#endif

}  // namespace tessera::cpu::TESSERA_ISA
