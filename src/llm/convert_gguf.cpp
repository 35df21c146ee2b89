// GGUF tensors as f32, and convert_gguf: a file's weights in another type
// (tessera quantize-gguf).
#include <cctype>
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

// The backend's name of a quantized ggml type ("q8_0", "q4_0", "q4_k", "q6_k"):
// its ggml name in lower case.
std::string quant_format(GgmlType t) {
  std::string n = ggml_type_name(t);
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return n;
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
    case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::Q4_K: case GgmlType::Q6_K:
      return ops::dequantize_weight(f.tensor(t.name), {}, {}, quant_format(t.type));
    default: TS_ERROR(f.what(), ": tensor '", t.name, "' is ", ggml_type_name(t.type), ", which Tessera does not "
                      "dequantize yet (F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K it does)");
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
    case GgmlType::Q4_0:
    case GgmlType::Q4_K:
    case GgmlType::Q6_K: {
      const std::string format = quant_format(type);
      const int64_t block = ggml_block_size(type);
      TS_CHECK(x.size(1) % block == 0, format, " needs rows of a multiple of ", block, " values, got ", x.size(1));
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
  if (ggml_block_size(type) > 1)
    w.set("general.quantization_version", GgufValue::integer(GgufType::U32, 2));
  // Q4_K keeps the output matrix (or the tied embedding) in Q6_K, as llama.cpp does.
  const std::string output = in.find_tensor("output.weight") ? "output.weight" : "token_embd.weight";
  NoGradGuard no_grad;
  for (const GgufTensorInfo& t : in.tensors()) {
    const GgmlType to = type == GgmlType::Q4_K && t.name == output ? GgmlType::Q6_K : type;
    const bool convert = t.ne.size() >= 2 && t.ne[0] % ggml_block_size(to) == 0 && quantizable(t.name) && t.type != to;
    if (!convert) {
      w.add_tensor(t.name, t.type, t.ne, bytes_of(in.tensor(t.name)));
      continue;
    }
    w.add_tensor(t.name, to, t.ne, to_ggml_bytes(dequantize_gguf_tensor(in, t), to));
  }
  return w;
}

}  // namespace tessera::llm
