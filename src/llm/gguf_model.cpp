// What the Llama and GPT GGUF converters share (src/llm/gguf_model.h).
#include "llm/gguf_model.h"

#include <string_view>
#include <unordered_set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/ops/ops.h"

namespace tessera::llm::detail {

uint32_t u32_of(const GgufFile& f, const std::string& key) {
  const int64_t v = f.get(key).as_int(key);
  TS_CHECK(v > 0, f.what(), ": ", key, " is ", v, " (must be positive)");
  TS_CHECK(v < (int64_t{1} << 31), f.what(), ": ", key, " is ", v, ", above the largest Tessera reads (2^31 - 1)");
  return static_cast<uint32_t>(v);
}

uint32_t layer_count(const GgufFile& f, const std::string& key, int64_t per_layer, const std::string& arch) {
  const uint32_t n = u32_of(f, key);
  const int64_t present = static_cast<int64_t>(f.tensors().size());
  TS_CHECK(int64_t{n} * per_layer <= present, f.what(), ": ", key, " is ", n, ", but the file holds ", present,
           " tensors, and a ", arch, " layer has ", per_layer, " (at most ", present / per_layer, " layers)");
  return n;
}

void check_tensors(const GgufFile& f, const std::vector<TensorName>& names, const std::string& arch, int64_t layers,
                   std::string (*hint)(const std::string&)) {
  // Checked before anything is allocated, so sizes are those of tensors in the file.
  for (const TensorName& n : names) {
    const GgufTensorInfo* t = f.find_tensor(n.gguf);
    TS_CHECK(t != nullptr, f.what(), ": the file has no tensor '", n.gguf, "', which a ", arch, " model of ", layers,
             " layers needs");
    TS_CHECK(t->shape() == n.shape, f.what(), ": ", n.gguf, " is ", shape_str(t->shape()), ", the configuration "
             "needs ", shape_str(n.shape));
  }
  std::unordered_set<std::string_view> known;
  for (const TensorName& n : names) known.insert(n.gguf);
  for (const GgufTensorInfo& t : f.tensors())
    TS_CHECK(known.count(t.name), f.what(), ": tensor '", t.name, "' is not part of the ", arch, " models Tessera reads",
             hint ? hint(t.name) : std::string());
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

void add_parameters(GgufWriter& w, const nn::Module& model, const std::vector<TensorName>& names, GgmlType type,
                    const std::vector<std::string>& keep_f32, Tensor (*reorder)(const Tensor&, int64_t)) {
  NoGradGuard no_grad;
  nn::NamedTensors params = model.named_parameters();
  for (const TensorName& n : names) {
    const Tensor* p = find_param(params, n.param);
    TS_CHECK(p != nullptr, "GGUF export: the model has no parameter '", n.param, "'");
    Tensor t = p->detach().to(DType::F32);
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
