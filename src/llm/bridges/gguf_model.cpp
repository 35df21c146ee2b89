// What the Llama and GPT bridges share (gguf_model.h).
#include "gguf_model.h"

#include <string_view>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/llm/convert_gguf.h"
#include "tessera/ops/ops.h"

namespace tessera::llm::detail {

std::vector<TensorName> parameter_names(const ModelSpec& s, const NameMap& top, const NameMap& layer,
                                        const std::string& layer_prefix) {
  auto lookup = [](const NameMap& map, std::string_view stem) -> const std::string* {
    for (const auto& [gguf, param] : map)
      if (gguf == stem) return &param;
    return nullptr;
  };
  std::vector<TensorName> out;
  for (GgufTensorSpec& t : gguf_tensors(s)) {
    const size_t dot = t.name.rfind('.');
    std::string_view stem = std::string_view(t.name).substr(0, dot), suffix = std::string_view(t.name).substr(dot);
    std::string param;
    if (stem.starts_with("blk.")) {
      const size_t end = stem.find('.', 4);
      const std::string* p = lookup(layer, stem.substr(end + 1));
      TS_CHECK(p, "GGUF bridge: no parameter for ", t.name);
      param = layer_prefix + std::string(stem.substr(4, end - 4)) + "." + *p;
    } else if (stem == "rope_freqs") {
      continue;  // RoPE's per-dimension factors: the engine's, no module's
    } else {
      const std::string* p = lookup(top, stem);
      TS_CHECK(p, "GGUF bridge: no parameter for ", t.name);
      param = *p;
    }
    out.push_back({param + std::string(suffix), std::move(t.name), std::move(t.shape)});
  }
  return out;
}

namespace {
Tensor* find_param(nn::NamedTensors& params, const std::string& name) {
  for (auto& [n, t] : params)
    if (n == name) return &t;
  return nullptr;
}
}  // namespace

int64_t export_file_type(GgmlType type) {
  TS_CHECK(type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 || type == GgmlType::Q8_0 ||
               type == GgmlType::Q4_0,
           "GGUF export: weights are written as F32, F16, BF16, Q8_0 or Q4_0, not ", ggml_type_name(type),
           " (for Q4_K or Q6_K, export F32 and convert it with `tessera quantize-gguf` / llm::convert_gguf, which "
           "keeps the matrices whose rows are not whole super-blocks of 256)");
  return ggml_file_type(type);
}

int64_t exported_vocab(const char* what, int64_t model_vocab, const Tokenizer* tokenizer) {
  if (!tokenizer) return model_vocab;
  TS_CHECK(tokenizer->size() <= model_vocab, what, ": the tokenizer has ", tokenizer->size(),
           " tokens but the model's vocabulary only ", model_vocab);
  return tokenizer->size();
}

void add_parameters(GgufWriter& w, const nn::Module& model, const std::vector<TensorName>& names, GgmlType type,
                    const std::vector<std::string>& keep_f32, Tensor (*reorder)(const Tensor&, int64_t),
                    int64_t vocab_rows) {
  NoGradGuard no_grad;
  nn::NamedTensors params = model.named_parameters();
  for (const TensorName& n : names) {
    const Tensor* p = find_param(params, n.param);
    TS_CHECK(p != nullptr, "GGUF export: the model has no parameter '", n.param, "'");
    Tensor t = p->detach().to(DType::F32);
    if (vocab_rows >= 0 && (n.gguf == "token_embd.weight" || n.gguf == "output.weight") && t.size(0) > vocab_rows)
      t = t.narrow(0, 0, vocab_rows);
    if (n.rope_heads && reorder) t = reorder(t, n.rope_heads);
    bool f32 = t.dim() == 1;  // norms and biases stay F32, as llama.cpp writes them
    for (const std::string& k : keep_f32) f32 = f32 || k == n.gguf;
    if (f32) w.add_tensor(n.gguf, t.contiguous());
    else w.add_tensor(n.gguf, type, {t.size(1), t.size(0)}, to_ggml_bytes(t, type));
  }
}

void load_parameters(const GgufFile& f, nn::Module& model, const std::vector<TensorName>& names,
                     Tensor (*reorder)(const Tensor&, int64_t)) {
  NoGradGuard no_grad;
  nn::NamedTensors params = model.named_parameters();
  for (const TensorName& n : names) {
    Tensor* dst = find_param(params, n.param);
    TS_CHECK(dst != nullptr && f.tensor_info(n.gguf).shape() == dst->shape(), "GGUF import: the model's parameter '",
             n.param, "' does not match ", n.gguf);
    Tensor w = dequantize_gguf_tensor(f, f.tensor_info(n.gguf)).reshape(dst->shape());
    TS_CHECK(ops::all(ops::isfinite(w)).item<bool>(), f.what(), ": ", n.gguf, " holds values that are not finite");
    if (n.rope_heads && reorder) w = reorder(w, n.rope_heads);
    dst->copy_(w);
  }
}

}  // namespace tessera::llm::detail
