// Packing for the int8 products (backend/cpu/qgemm.h) and their scalar
// reference.
#include "backend/cpu/qgemm.h"

#include <cmath>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/core/half.h"

namespace tessera::cpu {
namespace {

// Byte of chunk c, row k, lane j in a block's codes.
inline int64_t code_at(int64_t k, int j) { return j / 4 * 64 + k * 4 + j % 4; }

// A row's block b (32 values) as codes and factors, whatever its format.
struct RowBlock {
  int8_t q[kQBlock] = {};  // Q8_0, Q4_0, Q6_K: signed codes; Q4_K: nibbles 0..15
  uint16_t d = 0;          // Q8_0, Q4_0: the block's scale; K-quants: the super-block's d
  uint16_t dmin = 0;       // Q4_K
  uint8_t sc = 0, m = 0;   // Q4_K
  int8_t sc6[2] = {};      // Q6_K: the scales of values 0..15 and 16..31
};

RowBlock row_block(const QuantMatrix& w, int64_t r, int64_t b) {
  RowBlock o;
  if (r >= w.rows) return o;  // a padding row: all zeros
  const uint8_t* row = w.data + r * qrow_bytes(w.format, w.cols);
  constexpr int64_t per = kQKBlock / kQBlock;
  const int j = static_cast<int>(b % per);  // K-quants: the block in its super-block
  if (w.format == QFormat::Q8_0) {
    BlockQ8_0 q;
    std::memcpy(&q, row + b * sizeof q, sizeof q);
    std::memcpy(o.q, q.qs, kQBlock);
    o.d = q.d;
  } else if (w.format == QFormat::Q4_0) {
    BlockQ4_0 q;
    std::memcpy(&q, row + b * sizeof q, sizeof q);
    for (int k = 0; k < kQBlock; ++k) o.q[k] = static_cast<int8_t>((k < 16 ? q.qs[k] & 15 : q.qs[k - 16] >> 4) - 8);
    o.d = q.d;
  } else if (w.format == QFormat::Q4_K) {
    BlockQ4_K q;
    std::memcpy(&q, row + b / per * sizeof q, sizeof q);
    for (int k = 0; k < kQBlock; ++k) o.q[k] = static_cast<int8_t>(q4_k_code(q, j * kQBlock + k));
    int sc, m;
    q4_k_scale_min(j, q.scales, sc, m);
    o.sc = static_cast<uint8_t>(sc);
    o.m = static_cast<uint8_t>(m);
    o.d = q.d;
    o.dmin = q.dmin;
  } else {
    BlockQ6_K q;
    std::memcpy(&q, row + b / per * sizeof q, sizeof q);
    for (int k = 0; k < kQBlock; ++k) o.q[k] = static_cast<int8_t>(q6_k_code(q, j * kQBlock + k) - 32);
    o.sc6[0] = q.scales[2 * j];
    o.sc6[1] = q.scales[2 * j + 1];
    o.d = q.d;
  }
  return o;
}

// Q6_K's 6-bit code of value j in a block's packed bytes (q - 32).
int q6_code_at(const uint8_t* o, int64_t k, int j) {
  const uint8_t low = o[code_at(k, j % 16)];
  const int c = j / 4;
  const int high = (o[256 + c / 4 * 64 + k * 4 + j % 4] >> (2 * (c % 4))) & 3;
  return ((j < 16 ? low & 15 : low >> 4) | high << 4) - 32;
}

}  // namespace

void qpack_weights(const QuantMatrix& w, int64_t g0, int64_t g1, uint8_t* out) {
  const QFormat f = w.format;
  TS_CHECK(packed_format(f), "qpack_weights: ", qformat_name(f),
           " has no packed form (Q8_0, Q4_0, Q4_K and Q6_K have)");
  const int64_t nb = w.cols / kQBlock, cb = packed_block_code_bytes(f), gbytes = packed_group_bytes(f, w.cols);
  constexpr int64_t per = kQKBlock / kQBlock;
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* og = out + g * gbytes;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = og + packed_block_offset(f, b);
      uint8_t* fac = o + cb;
      uint8_t* head = og + packed_header_offset(f, b);  // K-quants
      if (f != QFormat::Q8_0) std::memset(o, 0, static_cast<size_t>(cb));
      for (int64_t k = 0; k < kPackRows; ++k) {
        const RowBlock rb = row_block(w, g * kPackRows + k, b);
        int sum[2] = {0, 0};  // the codes' sums over values 0..15 and 16..31
        for (int j = 0; j < kQBlock; ++j) {
          sum[j / 16] += rb.q[j];
          if (f == QFormat::Q8_0) {
            o[code_at(k, j)] = static_cast<uint8_t>(rb.q[j]);
            continue;
          }
          // values j and j + 16 share a byte, low and high nibble
          const int u = f == QFormat::Q4_0 ? rb.q[j] + 8 : f == QFormat::Q6_K ? rb.q[j] + 32 : rb.q[j];
          o[code_at(k, j % 16)] |= static_cast<uint8_t>(j < 16 ? (u & 15) : (u & 15) << 4);
          if (f == QFormat::Q6_K) o[256 + j / 16 * 64 + k * 4 + j % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (j / 4 % 4)));
        }
        if (f == QFormat::Q6_K) {
          if (b % per == 0) std::memcpy(head + 2 * k, &rb.d, 2);
          const int64_t jb = b % per;
          head[kQ6ScaleAt + (2 * jb) * kPackRows + k] = static_cast<uint8_t>(rb.sc6[0]);
          head[kQ6ScaleAt + (2 * jb + 1) * kPackRows + k] = static_cast<uint8_t>(rb.sc6[1]);
          const int32_t off = 128 * (rb.sc6[0] * sum[0] + rb.sc6[1] * sum[1]);
          std::memcpy(head + kQ6OffsetAt + jb * kPackRows * 4 + 4 * k, &off, 4);
          continue;
        }
        if (f == QFormat::Q4_K) {
          fac[k] = rb.sc;
          fac[16 + k] = rb.m;
          if (b % per == 0) {
            std::memcpy(head + 2 * k, &rb.d, 2);
            std::memcpy(head + 32 + 2 * k, &rb.dmin, 2);
          }
        } else {
          std::memcpy(fac + 2 * k, &rb.d, 2);
        }
      }
    }
  }
}

void qpack_act_ref(const float* x, int64_t cols, uint8_t* out) {
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
    int32_t sum = 0;
    for (int j = 0; j < kQBlock; ++j) {
      const int q = static_cast<int>(finite ? std::nearbyint(v[j] * id) : 0.f);
      out[b * kQBlock + j] = static_cast<uint8_t>(q + 128);
      sum += q;
    }
    std::memcpy(out + cols + b * 4, &d, 4);
    std::memcpy(out + cols + nb * 4 + b * 4, &sum, 4);
  }
}

void qgemm_ref(const PackedQMatrix& w, const uint8_t* act, int64_t m, float* y, int64_t ldy) {
  const QFormat f = w.format;
  const int64_t nb = w.cols / kQBlock, cb = packed_block_code_bytes(f);
  const int64_t gbytes = packed_group_bytes(f, w.cols), ab = packed_act_bytes(w.cols);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < w.rows; ++r) {
      const int64_t k = r % kPackRows;
      float acc = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* og = w.data + r / kPackRows * gbytes;
        const uint8_t* o = og + packed_block_offset(f, b);
        const uint8_t* fac = o + cb;
        const uint8_t* head = og + packed_header_offset(f, b);
        const uint8_t* a = act + i * ab + b * kQBlock;
        int32_t s[2] = {0, 0};  // over values 0..15 and 16..31, activation codes + 128
        int32_t sum = 0;        // of the weight codes
        for (int j = 0; j < kQBlock; ++j) {
          int code;
          if (f == QFormat::Q8_0) {
            code = static_cast<int8_t>(o[code_at(k, j)]);
          } else if (f == QFormat::Q6_K) {
            code = q6_code_at(o, k, j);
          } else {
            const uint8_t byte = o[code_at(k, j % 16)];
            code = (j < 16 ? byte & 15 : byte >> 4) - (f == QFormat::Q4_0 ? 8 : 0);
          }
          s[j / 16] += a[j] * code;
          sum += code;
        }
        const float dx = packed_act_scale(act + i * ab, w.cols, b);
        uint16_t d;
        if (f == QFormat::Q6_K) {
          const int64_t jb = b % (kQKBlock / kQBlock);
          const auto sc_lo = static_cast<int8_t>(head[kQ6ScaleAt + 2 * jb * kPackRows + k]);
          const auto sc_hi = static_cast<int8_t>(head[kQ6ScaleAt + (2 * jb + 1) * kPackRows + k]);
          int32_t off;
          std::memcpy(&off, head + kQ6OffsetAt + jb * kPackRows * 4 + 4 * k, 4);
          std::memcpy(&d, head + 2 * k, 2);
          const int32_t t = sc_lo * s[0] + sc_hi * s[1] - off;
          acc = std::fma(Half::to_float(d) * dx, static_cast<float>(t), acc);
          continue;
        }
        const int32_t t = s[0] + s[1] - 128 * sum;
        if (f == QFormat::Q4_K) {
          uint16_t dmin;
          const int32_t sx = packed_act_sum(act + i * ab, w.cols, b);
          std::memcpy(&d, head + 2 * k, 2);
          std::memcpy(&dmin, head + 32 + 2 * k, 2);
          acc = std::fma(Half::to_float(d) * dx, static_cast<float>(fac[k]) * static_cast<float>(t), acc);
          acc = std::fma(-(Half::to_float(dmin) * dx), static_cast<float>(fac[16 + k]) * static_cast<float>(sx), acc);
        } else {
          std::memcpy(&d, fac + 2 * k, 2);
          acc = std::fma(Half::to_float(d) * dx, static_cast<float>(t), acc);
        }
      }
      y[i * ldy + r] = acc;
    }
}

}  // namespace tessera::cpu
