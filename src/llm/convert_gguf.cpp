// GGUF tensors as f32, and convert_gguf: a file's weights in another type
// (tessera quantize-gguf).
#include <cstring>
#include <string>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/llm/gguf.h"
#include "tessera/ops/ops.h"
#include "tessera/quant/weights.h"

namespace tessera::llm {
namespace {

// Whether llama.cpp's quantizer converts a tensor of this name: weights, but
// not norms, MoE routers, position or token-type embeddings.
bool quantizable(const std::string& name) {
  auto ends_with = [&](const std::string& s) { return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0; };
  if (!ends_with("weight")) return false;
  for (const char* skip : {"norm", "ffn_gate_inp", "pos_embd", "token_types", "ssm_conv1d", "attn_rel_b"})
    if (name.find(skip) != std::string::npos) return false;
  return true;
}

// A tensor's bytes as a U8 view that keeps `t` (and what it maps) alive.
Tensor bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  return from_blob(c.raw_data(), {static_cast<int64_t>(c.nbytes())}, DType::U8, [c](void*) {});
}

}  // namespace

Tensor dequantize_gguf_tensor(const GgufFile& f, const GgufTensorInfo& t) {
  const int64_t cols = t.ne[0], rows = cols == 0 ? 0 : t.numel() / cols;
  switch (t.type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
      return f.tensor(t.name).to(DType::F32).reshape({rows, cols});
    case GgmlType::Q8_0: return ops::dequantize_weight(f.tensor(t.name), {}, {}, "q8_0");
    case GgmlType::Q4_0: return ops::dequantize_weight(f.tensor(t.name), {}, {}, "q4_0");
    case GgmlType::Q4_K:
    case GgmlType::Q6_K: {
      Tensor out = empty({rows, cols}, DType::F32);
      const auto* src = reinterpret_cast<const uint8_t*>(f.tensor_data(t));
      (t.type == GgmlType::Q4_K ? dequantize_q4_k : dequantize_q6_k)(src, rows * cols, out.data_ptr<float>());
      return out;
    }
    default: TS_ERROR(f.what(), ": tensor '", t.name, "' is ", ggml_type_name(t.type), ", which Tessera does not "
                      "dequantize yet (F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K it does)");
  }
}

// ggml's K-quant layouts (ggml-common.h): 256 values per super-block.
namespace {
// Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins (8 of each), 128
// bytes of nibbles; sub-block j's scale and min (ggml's get_scale_min_k4).
void scale_min(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}
// A Q4_K super-block's f16 d and dmin as floats.
void q4_k_scales(const uint8_t* x, float& d, float& dmin) {
  uint16_t dh, mh;
  std::memcpy(&dh, x, 2);
  std::memcpy(&mh, x + 2, 2);
  d = Half::to_float(dh);
  dmin = Half::to_float(mh);
}
}  // namespace

void q4_k_to_int4(const uint8_t* blocks, int64_t n, uint8_t* nibbles, uint16_t* scales, uint16_t* mins) {
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* x = blocks + b * 144;
    float d, dmin;
    q4_k_scales(x, d, dmin);
    const uint8_t* q = x + 16;
    for (int s = 0; s < 8; ++s) {  // sub-block s: the low (even s) or high (odd s) nibbles of 32 bytes
      uint8_t sc, m;
      scale_min(s, x + 4, sc, m);
      const int64_t g = b * 8 + s;
      scales[g] = Half::from_float(d * sc);
      mins[g] = Half::from_float(-(dmin * m));
      const uint8_t* src = q + (s / 2) * 32;
      const int shift = (s & 1) * 4;
      for (int k = 0; k < 16; ++k)  // Int4's order: value k low, value k + 16 high
        nibbles[g * 16 + k] = static_cast<uint8_t>(((src[k] >> shift) & 15) | (((src[k + 16] >> shift) & 15) << 4));
    }
  }
}

void dequantize_q4_k(const uint8_t* blocks, int64_t n, float* out) {
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* x = blocks + b * 144;
    float d, dmin;
    q4_k_scales(x, d, dmin);
    const uint8_t* scales = x + 4;
    const uint8_t* q = x + 16;
    float* y = out + b * 256;
    for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
      uint8_t sc, m;
      scale_min(is, scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      scale_min(is + 1, scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void dequantize_q6_k(const uint8_t* blocks, int64_t n, float* out) {
  // 128 bytes of low 4 bits, 64 bytes of high 2 bits, 16 int8 scales, f16 d.
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* x = blocks + b * 210;
    const uint8_t* ql = x;
    const uint8_t* qh = x + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(x + 192);
    uint16_t dh;
    std::memcpy(&dh, x + 208, 2);
    const float d = Half::to_float(dh);
    float* y = out + b * 256;
    for (int h = 0; h < 256; h += 128, y += 128, ql += 64, qh += 32, sc += 8)
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
  }
}

Tensor to_ggml_bytes(const Tensor& x, GgmlType type) {
  TS_CHECK(x.dim() == 2, "to_ggml_bytes: a matrix is needed, got ", shape_str(x.shape()));
  Tensor f = x.to(DType::F32);
  switch (type) {
    case GgmlType::F32: return bytes_of(f);
    case GgmlType::F16: return bytes_of(f.to(DType::F16));
    case GgmlType::BF16: return bytes_of(f.to(DType::BF16));
    case GgmlType::Q8_0:
    case GgmlType::Q4_0: {
      const char* format = type == GgmlType::Q8_0 ? "q8_0" : "q4_0";
      TS_CHECK(x.size(1) % 32 == 0, format, " needs rows of a multiple of 32 values, got ", x.size(1));
      return bytes_of(quant::quantize_weight(f, format).qweight);
    }
    default: TS_ERROR("to_ggml_bytes: Tessera does not write ", ggml_type_name(type));
  }
}

GgufWriter convert_gguf(const GgufFile& in, GgmlType type) {
  const int64_t ftype = ggml_file_type(type);
  GgufWriter w(static_cast<uint32_t>(in.alignment()));
  for (const auto& [key, v] : in.metadata())
    if (key != "general.alignment") w.set(key, v);
  w.set("general.file_type", GgufValue::integer(GgufType::U32, ftype));
  if (type == GgmlType::Q8_0 || type == GgmlType::Q4_0)
    w.set("general.quantization_version", GgufValue::integer(GgufType::U32, 2));
  NoGradGuard no_grad;
  for (const GgufTensorInfo& t : in.tensors()) {
    const bool convert = t.ne.size() >= 2 && t.ne[0] % ggml_block_size(type) == 0 && quantizable(t.name) && t.type != type;
    if (!convert) {
      w.add_tensor(t.name, t.type, t.ne, bytes_of(in.tensor(t.name)));
      continue;
    }
    w.add_tensor(t.name, type, t.ne, to_ggml_bytes(dequantize_gguf_tensor(in, t), type));
  }
  return w;
}

}  // namespace tessera::llm
