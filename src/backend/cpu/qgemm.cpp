// Packing for the int8 products (backend/cpu/qgemm.h) and their scalar
// reference.
#include "backend/cpu/qgemm.h"

#include <cmath>
#include <cstring>

#include "tessera/core/half.h"

namespace tessera::cpu {

void qpack_weights(const QuantMatrix& w, int64_t g0, int64_t g1, uint8_t* out) {
  const int64_t nb = w.cols / kQBlock, rb = qrow_bytes(w.format, w.cols);
  const int64_t cb = packed_block_code_bytes(w.format), gb = packed_group_block_bytes(w.format);
  const bool q8 = w.format == QFormat::Q8_0;
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + (g * nb + b) * gb;
      uint16_t d[kPackRows];
      int16_t sum[kPackRows];
      for (int64_t k = 0; k < kPackRows; ++k) {
        const int64_t r = g * kPackRows + k;
        const uint8_t* blk = r < w.rows ? w.data + r * rb + b * (q8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0)) : nullptr;
        int s = 0;
        if (q8) {
          BlockQ8_0 q{};  // a padding row: scale 0, codes 0
          if (blk) std::memcpy(&q, blk, sizeof q);
          for (int j = 0; j < kQBlock; ++j) {
            o[j / 4 * 64 + k * 4 + j % 4] = static_cast<uint8_t>(q.qs[j]);
            s += q.qs[j];
          }
          d[k] = q.d;
        } else {
          BlockQ4_0 q;
          std::memset(&q, 0x88, sizeof q);  // a padding row: codes 8 - 8 = 0
          q.d = 0;
          if (blk) std::memcpy(&q, blk, sizeof q);
          for (int j = 0; j < kQBlock / 2; ++j) {
            o[j / 4 * 64 + k * 4 + j % 4] = q.qs[j];
            s += (q.qs[j] & 15) + (q.qs[j] >> 4) - 16;
          }
          d[k] = q.d;
        }
        sum[k] = static_cast<int16_t>(s);
      }
      std::memcpy(o + cb, d, sizeof d);
      std::memcpy(o + cb + 32, sum, sizeof sum);
    }
}

void qpack_act(const float* x, int64_t cols, uint8_t* out) {
  const int64_t nb = cols / kQBlock;
  for (int64_t b = 0; b < nb; ++b) {
    const float* v = x + b * kQBlock;
    float amax = 0.f;
    bool finite = true;
    for (int j = 0; j < kQBlock; ++j) {
      const float a = std::fabs(v[j]);
      amax = a > amax ? a : amax;
      finite = finite && a <= 3.4e38f;
    }
    const float d = finite ? amax / 127.f : NAN;
    const float id = finite && d != 0.f ? 1.f / d : 0.f;
    // Round half to even by adding and subtracting 1.5 * 2^23 (what
    // nearbyint does in the default rounding mode, for |v| <= 127, without
    // a libm call per value on a baseline x86-64 build).
    constexpr float kMagic = 12582912.0f;
    for (int j = 0; j < kQBlock; ++j) {
      const float r = finite ? (v[j] * id + kMagic) - kMagic : 0.f;
      out[b * kQBlock + j] = static_cast<uint8_t>(static_cast<int>(r) + 128);
    }
    std::memcpy(out + cols + b * 4, &d, 4);
  }
}

void qgemm_ref(const PackedQMatrix& w, const uint8_t* act, int64_t m, float* y, int64_t ldy) {
  const int64_t nb = w.cols / kQBlock, cb = packed_block_code_bytes(w.format);
  const int64_t gb = packed_group_block_bytes(w.format), ab = packed_act_bytes(w.cols);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < w.rows; ++r) {
      const int64_t k = r % kPackRows;
      float acc = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* o = w.data + (r / kPackRows * nb + b) * gb;
        const uint8_t* a = act + i * ab + b * kQBlock;
        int32_t s = 0;
        for (int j = 0; j < kQBlock; ++j) {
          int code;
          if (w.format == QFormat::Q8_0) {
            code = static_cast<int8_t>(o[j / 4 * 64 + k * 4 + j % 4]);
          } else {
            const uint8_t byte = o[j % 16 / 4 * 64 + k * 4 + j % 4];
            code = (j < 16 ? byte & 15 : byte >> 4) - 8;
          }
          s += a[j] * code;
        }
        uint16_t d;
        int16_t sum;
        float dx;
        std::memcpy(&d, o + cb + 2 * k, 2);
        std::memcpy(&sum, o + cb + 32 + 2 * k, 2);
        std::memcpy(&dx, act + i * ab + w.cols + b * 4, 4);
        s -= 128 * sum;
        const float scale = Half::to_float(d) * dx;
        acc = std::fma(scale, static_cast<float>(s), acc);
      }
      y[i * ldy + r] = acc;
    }
}

}  // namespace tessera::cpu
