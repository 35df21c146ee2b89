// Quantized formats: sizes, quantizers and the portable references
// (backend/quant_format.h).
#include "backend/quant_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>

#include "tessera/core/error.h"
#include "tessera/core/half.h"

namespace tessera::backend {

const char* qformat_name(QFormat f) {
  switch (f) {
    case QFormat::Q8_0: return "q8_0";
    case QFormat::Q4_0: return "q4_0";
    case QFormat::Int8: return "int8";
    case QFormat::Int4: return "int4";
    case QFormat::Q4_K: return "q4_k";
    case QFormat::Q6_K: return "q6_k";
  }
  return "?";
}

QFormat qformat_from_name(const std::string& name) {
  for (int i = 0; i < kNumQFormats; ++i)
    if (name == qformat_name(static_cast<QFormat>(i))) return static_cast<QFormat>(i);
  TS_ERROR("unknown quantized format '", name, "': expected one of q8_0, q4_0, int8, int4, q4_k, q6_k");
}

bool qformat_is_block(QFormat f) { return f != QFormat::Int8 && f != QFormat::Int4; }

int64_t qblock_elems(QFormat f) { return f == QFormat::Q4_K || f == QFormat::Q6_K ? kQKBlock : kQBlock; }

int64_t qblock_bytes(QFormat f) {
  switch (f) {
    case QFormat::Q8_0: return sizeof(BlockQ8_0);
    case QFormat::Q4_0: return sizeof(BlockQ4_0);
    case QFormat::Q4_K: return sizeof(BlockQ4_K);
    case QFormat::Q6_K: return sizeof(BlockQ6_K);
    default: return 0;
  }
}

int64_t qrow_bytes(QFormat f, int64_t cols) {
  if (qformat_is_block(f)) return cols / qblock_elems(f) * qblock_bytes(f);
  return f == QFormat::Int8 ? cols : cols / 2;
}

void check_qshape(QFormat f, int64_t cols, int64_t group) {
  TS_CHECK(cols > 0, qformat_name(f), ": the input dimension must be positive, got ", cols);
  if (qformat_is_block(f))
    TS_CHECK(cols % qblock_elems(f) == 0, qformat_name(f), " packs ", qblock_elems(f), "-element blocks along the "
             "input dimension, which is ", cols, " (not a multiple of ", qblock_elems(f), "); use ",
             qblock_elems(f) == kQBlock ? "int8 or int4 with a group that divides it" : "q8_0 or q4_0 (blocks of 32)",
             ", or keep the layer in float");
  if (f == QFormat::Int4) {
    TS_CHECK(group >= 32 && group <= 256 && group % 32 == 0, "int4: group size must be 32, 64, 96, ..., 256 (a "
             "multiple of 32), got ", group);
    TS_CHECK(cols % group == 0, "int4: group size ", group, " does not divide the input dimension ", cols,
             "; choose a group that does (e.g. 32 when it is a multiple of 32) or keep the layer in float");
  }
}

namespace {

uint16_t to_h(float f) { return Half::from_float(f); }
float from_h(uint16_t h) { return Half::to_float(h); }

template <typename T>
void put(std::vector<uint8_t>& bytes, int64_t i, T v) {
  std::memcpy(bytes.data() + i * sizeof(T), &v, sizeof(T));
}

// Reads weight (r, k) through the format's definition; the scalar ground truth.
float weight_at(const QuantMatrix& w, int64_t r, int64_t k) {
  const uint8_t* row = w.data + r * qrow_bytes(w.format, w.cols);
  switch (w.format) {
    case QFormat::Q8_0: {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + k / kQBlock;
      return from_h(b->d) * static_cast<float>(b->qs[k % kQBlock]);
    }
    case QFormat::Q4_0: {
      const auto* b = reinterpret_cast<const BlockQ4_0*>(row) + k / kQBlock;
      int j = static_cast<int>(k % kQBlock);
      int q = j < 16 ? (b->qs[j] & 15) : (b->qs[j - 16] >> 4);
      return from_h(b->d) * static_cast<float>(q - 8);
    }
    case QFormat::Int8:
      return static_cast<const float*>(w.scales)[r] * static_cast<float>(reinterpret_cast<const int8_t*>(row)[k]);
    case QFormat::Int4: {
      const int64_t g = k / w.group, j = k % w.group, half = w.group / 2, groups = w.cols / w.group;
      const uint8_t* q = row + g * half;
      int v = j < half ? (q[j] & 15) : (q[j - half] >> 4);
      float s = from_h(static_cast<const uint16_t*>(w.scales)[r * groups + g]);
      float m = from_h(static_cast<const uint16_t*>(w.mins)[r * groups + g]);
      return s * static_cast<float>(v) + m;
    }
    case QFormat::Q4_K: {  // as ggml's dequantize_row_q4_K: (d * sc) * q - dmin * m
      const auto* b = reinterpret_cast<const BlockQ4_K*>(row) + k / kQKBlock;
      const int j = static_cast<int>(k % kQKBlock), sub = j / 32;
      int sc, m;
      q4_k_scale_min(sub, b->scales, sc, m);
      const int q = q4_k_code(*b, j);
      return from_h(b->d) * static_cast<float>(sc) * static_cast<float>(q) - from_h(b->dmin) * static_cast<float>(m);
    }
    case QFormat::Q6_K: {  // as ggml's dequantize_row_q6_K: d * sc * (q - 32)
      const auto* b = reinterpret_cast<const BlockQ6_K*>(row) + k / kQKBlock;
      const int j = static_cast<int>(k % kQKBlock);
      return from_h(b->d) * static_cast<float>(b->scales[j / 16]) * static_cast<float>(q6_k_code(*b, j) - 32);
    }
  }
  return 0.f;
}

// Weight (r, k)'s integer code, and the integer scale of its 16 values
// (1 outside the K-quants), for the integer product's reference.
int code_at(const QuantMatrix& w, int64_t r, int64_t k, int& scale) {
  const uint8_t* row = w.data + r * qrow_bytes(w.format, w.cols);
  scale = 1;
  switch (w.format) {
    case QFormat::Q8_0: return (reinterpret_cast<const BlockQ8_0*>(row) + k / kQBlock)->qs[k % kQBlock];
    case QFormat::Q4_0: {
      const auto* b = reinterpret_cast<const BlockQ4_0*>(row) + k / kQBlock;
      const int j = static_cast<int>(k % kQBlock);
      return (j < 16 ? (b->qs[j] & 15) : (b->qs[j - 16] >> 4)) - 8;
    }
    case QFormat::Int8: return reinterpret_cast<const int8_t*>(row)[k];
    case QFormat::Int4: {
      const int64_t g = k / w.group, j = k % w.group, half = w.group / 2;
      const uint8_t* q = row + g * half;
      return j < half ? (q[j] & 15) : (q[j - half] >> 4);
    }
    case QFormat::Q4_K: {
      const auto* b = reinterpret_cast<const BlockQ4_K*>(row) + k / kQKBlock;
      const int j = static_cast<int>(k % kQKBlock), sub = j / 32;
      int m;
      q4_k_scale_min(sub, b->scales, scale, m);
      return q4_k_code(*b, j);
    }
    case QFormat::Q6_K: {
      const auto* b = reinterpret_cast<const BlockQ6_K*>(row) + k / kQKBlock;
      const int j = static_cast<int>(k % kQKBlock);
      scale = b->scales[j / 16];
      return q6_k_code(*b, j) - 32;
    }
  }
  return 0;
}

// The float factor of 32-block b of row r (times the integer sum) and its
// min (times the activations' d * sum), as the integer kernels combine them.
void block_factors(const QuantMatrix& w, int64_t r, int64_t b, float& d, float& mn) {
  const uint8_t* row = w.data + r * qrow_bytes(w.format, w.cols);
  const int64_t k = b * kQBlock;
  d = 1.f, mn = 0.f;
  switch (w.format) {
    case QFormat::Q8_0: d = from_h((reinterpret_cast<const BlockQ8_0*>(row) + b)->d); break;
    case QFormat::Q4_0: d = from_h((reinterpret_cast<const BlockQ4_0*>(row) + b)->d); break;
    case QFormat::Int8: break;
    case QFormat::Int4: {
      const int64_t g = k / w.group, groups = w.cols / w.group;
      d = from_h(static_cast<const uint16_t*>(w.scales)[r * groups + g]);
      mn = from_h(static_cast<const uint16_t*>(w.mins)[r * groups + g]);
      break;
    }
    case QFormat::Q4_K: {
      const auto* blk = reinterpret_cast<const BlockQ4_K*>(row) + k / kQKBlock;
      int sc, m;
      q4_k_scale_min(static_cast<int>(k % kQKBlock / 32), blk->scales, sc, m);
      d = from_h(blk->d);
      mn = -(from_h(blk->dmin) * static_cast<float>(m));
      break;
    }
    case QFormat::Q6_K: d = from_h((reinterpret_cast<const BlockQ6_K*>(row) + k / kQKBlock)->d); break;
  }
}

}  // namespace

QuantizedWeights quantize_ref(QFormat f, const float* w, int64_t rows, int64_t cols, int64_t group) {
  check_qshape(f, cols, group);
  TS_CHECK(rows >= 0, "quantize: negative row count ", rows);
  for (int64_t i = 0; i < rows * cols; ++i)
    TS_CHECK(std::isfinite(w[i]), "quantize (", qformat_name(f), "): weight [", i / cols, ", ", i % cols, "] is ", w[i],
             "; quantization needs finite weights");
  QuantizedWeights q;
  const int64_t rb = qrow_bytes(f, cols);
  q.data.resize(rows * rb);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = w + r * cols;
    uint8_t* out = q.data.data() + r * rb;
    if (f == QFormat::Q8_0) {  // ggml quantize_row_q8_0_ref
      for (int64_t b = 0; b < cols / kQBlock; ++b) {
        const float* v = x + b * kQBlock;
        float amax = 0.f;
        for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(v[j]));
        float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
        BlockQ8_0 blk;
        blk.d = to_h(d);
        for (int j = 0; j < kQBlock; ++j) blk.qs[j] = static_cast<int8_t>(std::roundf(v[j] * id));
        std::memcpy(out + b * sizeof(BlockQ8_0), &blk, sizeof blk);
      }
    } else if (f == QFormat::Q4_0) {  // ggml quantize_row_q4_0_ref
      for (int64_t b = 0; b < cols / kQBlock; ++b) {
        const float* v = x + b * kQBlock;
        float amax = 0.f, mx = 0.f;
        for (int j = 0; j < kQBlock; ++j)
          if (amax < std::fabs(v[j])) {
            amax = std::fabs(v[j]);
            mx = v[j];
          }
        float d = mx / -8.f, id = d != 0.f ? 1.f / d : 0.f;
        BlockQ4_0 blk;
        blk.d = to_h(d);
        for (int j = 0; j < 16; ++j) {
          auto q0 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(v[j] * id + 8.5f))));
          auto q1 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(v[j + 16] * id + 8.5f))));
          blk.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
        std::memcpy(out + b * sizeof(BlockQ4_0), &blk, sizeof blk);
      }
    } else if (f == QFormat::Q4_K) {
      quantize_q4_k(x, cols, reinterpret_cast<BlockQ4_K*>(out));
    } else if (f == QFormat::Q6_K) {
      quantize_q6_k(x, cols, reinterpret_cast<BlockQ6_K*>(out));
    } else if (f == QFormat::Int8) {
      if (r == 0) q.scales.resize(rows * sizeof(float));
      float amax = 0.f;
      for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(x[k]));
      float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
      put<float>(q.scales, r, d);
      for (int64_t k = 0; k < cols; ++k)
        out[k] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(x[k] * id), -127.f, 127.f)));
    } else {  // Int4: per group, scale and min rounded to f16 first, then q against them
      const int64_t groups = cols / group, half = group / 2;
      if (r == 0) {
        q.scales.resize(rows * groups * 2);
        q.mins.resize(rows * groups * 2);
      }
      for (int64_t g = 0; g < groups; ++g) {
        const float* v = x + g * group;
        float lo = v[0], hi = v[0];
        for (int64_t j = 1; j < group; ++j) {
          lo = std::min(lo, v[j]);
          hi = std::max(hi, v[j]);
        }
        uint16_t sh = to_h((hi - lo) / 15.f), mh = to_h(lo);
        put<uint16_t>(q.scales, r * groups + g, sh);
        put<uint16_t>(q.mins, r * groups + g, mh);
        float s = from_h(sh), m = from_h(mh), is = s != 0.f ? 1.f / s : 0.f;
        auto qv = [&](float val) { return static_cast<int>(std::clamp(std::nearbyint((val - m) * is), 0.f, 15.f)); };
        uint8_t* o = out + g * half;
        for (int64_t j = 0; j < half; ++j) o[j] = static_cast<uint8_t>(qv(v[j]) | (qv(v[j + half]) << 4));
      }
    }
  }
  return q;
}

QuantMatrix view_of(const QuantizedWeights& q, QFormat f, int64_t rows, int64_t cols, int64_t group) {
  QuantMatrix m;
  m.format = f;
  m.rows = rows;
  m.cols = cols;
  m.group = f == QFormat::Int4 ? group : 0;
  m.data = q.data.data();
  m.scales = q.scales.empty() ? nullptr : q.scales.data();
  m.mins = q.mins.empty() ? nullptr : q.mins.data();
  return m;
}

void dequantize_ref(const QuantMatrix& w, int64_t r0, int64_t r1, float* out) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t k = 0; k < w.cols; ++k) out[(r - r0) * w.cols + k] = weight_at(w, r, k);
}

void qmatmul_ref(const QuantMatrix& w, const float* x, int64_t m, float* y) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < w.rows; ++r) {
      double s = 0;
      for (int64_t k = 0; k < w.cols; ++k) s += static_cast<double>(x[i * w.cols + k]) * weight_at(w, r, k);
      y[i * w.rows + r] = static_cast<float>(s);
    }
}

void quantize_act_ref(const float* x, int64_t cols, BlockQ8Act* out) {
  for (int64_t b = 0; b < cols / kQBlock; ++b) {
    const float* v = x + b * kQBlock;
    float amax = 0.f;
    bool finite = true;
    for (int j = 0; j < kQBlock; ++j) {
      amax = std::max(amax, std::fabs(v[j]));
      finite = finite && std::isfinite(v[j]);
    }
    float d = finite ? amax / 127.f : NAN, id = finite && d != 0.f ? 1.f / d : 0.f;
    int32_t sum = 0;
    for (int j = 0; j < kQBlock; ++j) {
      out[b].qs[j] = static_cast<int8_t>(finite ? std::nearbyint(v[j] * id) : 0.f);
      sum += out[b].qs[j];
    }
    out[b].d = d;
    out[b].s = d * static_cast<float>(sum);
  }
}

bool qdot_supported(const QuantMatrix& w) { return w.cols % kQBlock == 0; }

void qdot_ref(const QuantMatrix& w, const BlockQ8Act* xq, int64_t m, float* y) {
  TS_CHECK(qdot_supported(w), "qdot: the input dimension ", w.cols, " is not a multiple of 32");
  const int64_t nb = w.cols / kQBlock;
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8Act& a = xq[i * nb + b];
        int32_t isum = 0;
        for (int j = 0; j < kQBlock; ++j) {
          int scale;
          const int q = code_at(w, r, b * kQBlock + j, scale);
          isum += scale * q * a.qs[j];
        }
        float d, mn;
        block_factors(w, r, b, d, mn);
        acc += static_cast<float>(isum) * (d * a.d);
        acc += mn * a.s;
      }
      if (w.format == QFormat::Int8) acc *= static_cast<const float*>(w.scales)[r];
      y[i * w.rows + r] = acc;
    }
}

}  // namespace tessera::backend
