// Packing for the int8 dot-product products (backend/cpu/qgemm.h) and their
// portable reference.
#include "backend/cpu/qgemm.h"

#include <cmath>
#include <cstring>

#include "tessera/core/half.h"

namespace tessera::cpu {
namespace {

// Byte position of value j (0..31) of block b (0 or 1) of a pair.
inline int pair_slot(int b, int j) { return (j < 16 ? 0 : 32) + b * 16 + (j & 15); }
// Int32 lane 0..15 -> which block of the pair it sums.
inline int lane_block(int lane) { return (lane / 4) & 1; }

}  // namespace

void qpack_weights(const QuantMatrix& w, int64_t t0, int64_t t1, uint8_t* out) {
  const int64_t nb = w.cols / kQBlock, pairs = qpack_pairs(w.cols), rb = qrow_bytes(w.format, w.cols);
  const int64_t cb = packed_pair_code_bytes(w.format), tb = packed_tile_pair_bytes(w.format);
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t p = 0; p < pairs; ++p) {
      uint8_t* o = out + (t * pairs + p) * tb;
      for (int64_t k = 0; k < kPackRows; ++k) {
        const int64_t r = t * kPackRows + k;
        uint8_t* c = o + k * cb;
        float s[2] = {0.f, 0.f};
        for (int half = 0; half < 2; ++half) {
          const int64_t b = 2 * p + half;
          const bool real = r < w.rows && b < nb;
          const uint8_t* blk = real ? w.data + r * rb + b * (w.format == QFormat::Q8_0 ? 34 : 18) : nullptr;
          if (w.format == QFormat::Q8_0) {
            BlockQ8_0 q{};
            if (real) std::memcpy(&q, blk, sizeof q);
            for (int j = 0; j < kQBlock; ++j) c[pair_slot(half, j)] = static_cast<uint8_t>(q.qs[j] ^ 0x80);
            s[half] = real ? Half::to_float(q.d) : 0.f;
          } else {
            BlockQ4_0 q;
            std::memset(&q, 0x88, sizeof q);
            if (real) std::memcpy(&q, blk, sizeof q);
            std::memcpy(c + half * 16, q.qs, 16);
            s[half] = real ? Half::to_float(q.d) : 0.f;
          }
        }
        std::memcpy(o + kPackRows * cb + k * 8, s, 8);
      }
    }
}

void qpack_act(const float* x, int64_t cols, uint8_t* out) {
  const int64_t nb = cols / kQBlock, pairs = qpack_pairs(cols);
  for (int64_t p = 0; p < pairs; ++p) {
    uint8_t* o = out + p * kPackedActPairBytes;
    float d[2] = {0.f, 0.f};
    int32_t sum[2] = {0, 0};
    for (int half = 0; half < 2; ++half) {
      const int64_t b = 2 * p + half;
      int8_t q[kQBlock] = {};
      if (b < nb) {
        const float* v = x + b * kQBlock;
        float amax = 0.f;
        bool finite = true;
        for (int j = 0; j < kQBlock; ++j) {
          const float a = std::fabs(v[j]);
          amax = a > amax ? a : amax;
          finite = finite && a <= 3.4e38f;
        }
        d[half] = finite ? amax / 127.f : NAN;
        const float id = finite && d[half] != 0.f ? 1.f / d[half] : 0.f;
        // Round half to even by adding and subtracting 1.5 * 2^23 (what
        // nearbyint does in the default rounding mode, for |v| <= 127,
        // without a libm call per value on a baseline x86-64 build).
        constexpr float kMagic = 12582912.0f;
        for (int j = 0; j < kQBlock; ++j) {
          const float r = finite ? (v[j] * id + kMagic) - kMagic : 0.f;
          q[j] = static_cast<int8_t>(r);
          sum[half] += q[j];
        }
      }
      for (int j = 0; j < kQBlock; ++j) o[pair_slot(half, j)] = static_cast<uint8_t>(q[j]);
    }
    float dv[16], c8[16] = {}, c128[16] = {};
    for (int lane = 0; lane < 16; ++lane) dv[lane] = d[lane_block(lane)];
    for (int half = 0; half < 2; ++half) {
      c8[4 * half] = -8.f * d[half] * static_cast<float>(sum[half]);
      c128[4 * half] = -128.f * d[half] * static_cast<float>(sum[half]);
    }
    std::memcpy(o + 64, dv, 64);
    std::memcpy(o + 128, c8, 64);
    std::memcpy(o + 192, c128, 64);
  }
}

void qgemm_ref(const PackedQMatrix& w, const uint8_t* act, int64_t m, float* y, int64_t ldy) {
  const int64_t cb = packed_pair_code_bytes(w.format), tb = packed_tile_pair_bytes(w.format);
  const int64_t offset = w.format == QFormat::Q8_0 ? 128 : 8;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < w.rows; ++r) {
      double acc = 0;
      for (int64_t p = 0; p < w.pairs; ++p) {
        const uint8_t* a = act + (i * w.pairs + p) * kPackedActPairBytes;
        const uint8_t* tile = w.data + (r / kPackRows * w.pairs + p) * tb;
        const uint8_t* c = tile + r % kPackRows * cb;
        float s[2];
        std::memcpy(s, tile + kPackRows * cb + r % kPackRows * 8, 8);
        for (int half = 0; half < 2; ++half) {
          int64_t dot = 0, sum = 0;
          for (int j = 0; j < kQBlock; ++j) {
            const auto xq = static_cast<int8_t>(a[pair_slot(half, j)]);
            const int wq = w.format == QFormat::Q8_0 ? c[pair_slot(half, j)]  // the unsigned code
                                                     : (c[half * 16 + (j & 15)] >> (j < 16 ? 0 : 4)) & 15;
            dot += static_cast<int64_t>(wq) * xq;
            sum += xq;
          }
          float dx;
          std::memcpy(&dx, a + 64 + (half ? 16 : 0), 4);  // lane 0 or lane 4
          acc += static_cast<double>(s[half]) * dx * static_cast<double>(dot - offset * sum);
        }
      }
      y[i * ldy + r] = static_cast<float>(acc);
    }
}

}  // namespace tessera::cpu
