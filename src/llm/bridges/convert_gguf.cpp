// A GGUF file's weights in another type (tessera quantize-gguf), and f32
// matrices as ggml's bytes (include/tessera/llm/convert_gguf.h).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <string>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/llm/convert_gguf.h"
#include "tessera/ops/ops.h"
#include "tessera/quant/weights.h"

namespace tessera::llm {
namespace {

// Whether llama.cpp's quantizer converts a tensor of this name: weights, but
// not norms, MoE routers, position or token-type embeddings.
bool quantizable(const std::string& name) {
  if (!name.ends_with("weight")) return false;
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

namespace {

// A file with each tensor in type_of(tensor) where it converts (2-D or more,
// whole blocks, a weight llama.cpp quantizes), the rest copied as they are.
template <class TypeOf>
GgufWriter convert_each(const GgufFile& in, int64_t file_type, bool blocks, TypeOf type_of) {
  GgufWriter w(static_cast<uint32_t>(in.alignment()));
  for (const auto& [key, v] : in.metadata())
    if (key != "general.alignment") w.set(key, v);
  w.set("general.file_type", GgufValue::integer(GgufType::U32, file_type));
  if (blocks) w.set("general.quantization_version", GgufValue::integer(GgufType::U32, 2));
  NoGradGuard no_grad;
  for (const GgufTensorInfo& t : in.tensors()) {
    const GgmlType to = type_of(t);
    const bool convert = t.ne.size() >= 2 && t.ne[0] % ggml_block_size(to) == 0 && quantizable(t.name) && t.type != to;
    if (!convert) {
      w.add_tensor(t.name, t.type, t.ne, bytes_of(in.tensor(t.name)));
      continue;
    }
    w.add_tensor(t.name, to, t.ne, to_ggml_bytes(dequantize_gguf_tensor(in, t), to));
  }
  return w;
}

// The matrix K-quants keep in Q6_K: the output, or the token embedding
// when it is tied.
std::string output_matrix(const GgufFile& in) {
  return in.find_tensor("output.weight") ? "output.weight" : "token_embd.weight";
}

// The layer of a tensor named blk.N...., or -1.
int64_t layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int64_t n = 0;
  size_t i = 4;
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && n < (1 << 20); ++i) n = n * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '.' ? n : -1;
}

}  // namespace

GgufWriter convert_gguf(const GgufFile& in, GgmlType type) {
  const std::string output = output_matrix(in);
  // Q4_K keeps the output matrix (or the tied embedding) in Q6_K, as llama.cpp does.
  return convert_each(in, ggml_file_type(type), ggml_block_size(type) > 1, [&](const GgufTensorInfo& t) {
    return type == GgmlType::Q4_K && t.name == output ? GgmlType::Q6_K : type;
  });
}

GgufWriter convert_gguf(const GgufFile& in, GgufMix mix) {
  TS_CHECK(mix == GgufMix::Q4_K_M, "convert_gguf: unknown mix");
  const std::string output = output_matrix(in);
  // llama.cpp's choice (llama_tensor_get_type for a dense model): the first
  // and last eighth of the layers and every third one between get more bits.
  int64_t n_layer = 0;
  for (const GgufTensorInfo& t : in.tensors())
    if (t.name.ends_with(".attn_v.weight") || t.name.ends_with(".ffn_down.weight"))
      n_layer = std::max(n_layer, layer_of(t.name) + 1);
  auto more_bits = [&](int64_t i) { return i < n_layer / 8 || i >= 7 * n_layer / 8 || (i - n_layer / 8) % 3 == 2; };
  constexpr int64_t kQ4KM = 15;  // llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M
  return convert_each(in, kQ4KM, true, [&](const GgufTensorInfo& t) {
    if (t.name == output) return GgmlType::Q6_K;
    const int64_t i = layer_of(t.name);
    const bool v_or_down = t.name.ends_with(".attn_v.weight") || t.name.ends_with(".ffn_down.weight");
    return v_or_down && i >= 0 && more_bits(i) ? GgmlType::Q6_K : GgmlType::Q4_K;
  });
}

std::optional<GgufMix> gguf_mix_from_name(const std::string& name) {
  std::string upper = name;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper == "Q4_K_M") return GgufMix::Q4_K_M;
  return std::nullopt;
}

}  // namespace tessera::llm
