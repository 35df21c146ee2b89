#include "tessera/llm/llama_gguf.h"

#include "llm/gguf_model.h"

#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/ops/ops.h"
#include "tessera/quant/weights.h"

namespace tessera::llm {
namespace {

using Name = detail::TensorName;
using detail::u32_of;

std::vector<Name> tensor_names(const nn::zoo::LlamaConfig& c) {
  const int64_t d = c.dim, kv = c.dim / c.n_heads * c.n_kv_heads, h = c.hidden_dim;
  std::vector<Name> n = {{"model.embed_tokens.weight", "token_embd.weight", {c.vocab_size, d}}};
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".", b = "blk." + std::to_string(i) + ".";
    n.push_back({p + "input_layernorm.weight", b + "attn_norm.weight", {d}});
    n.push_back({p + "self_attn.q_proj.weight", b + "attn_q.weight", {d, d}, c.n_heads});
    n.push_back({p + "self_attn.k_proj.weight", b + "attn_k.weight", {kv, d}, c.n_kv_heads});
    n.push_back({p + "self_attn.v_proj.weight", b + "attn_v.weight", {kv, d}});
    n.push_back({p + "self_attn.o_proj.weight", b + "attn_output.weight", {d, d}});
    n.push_back({p + "post_attention_layernorm.weight", b + "ffn_norm.weight", {d}});
    n.push_back({p + "mlp.gate_proj.weight", b + "ffn_gate.weight", {h, d}});
    n.push_back({p + "mlp.up_proj.weight", b + "ffn_up.weight", {h, d}});
    n.push_back({p + "mlp.down_proj.weight", b + "ffn_down.weight", {d, h}});
  }
  n.push_back({"model.norm.weight", "output_norm.weight", {d}});
  if (!c.tie_embeddings) n.push_back({"lm_head.weight", "output.weight", {c.vocab_size, d}});
  return n;
}

// The tensors of one layer (tensor_names).
constexpr int64_t kLayerTensors = 9;

// The longest context whose RoPE tables the model precomputes from a file.
constexpr int64_t kMaxContext = int64_t{1} << 18;

// [rows, cols] with rows = heads * d regrouped: (h, half, i) <-> (h, i, half).
Tensor regroup(const Tensor& w, int64_t heads, bool to_gguf) {
  TS_CHECK(w.dim() == 2 && heads > 0 && w.size(0) % (2 * heads) == 0, "Llama GGUF: a query/key weight of shape ",
           shape_str(w.shape()), " does not split into ", heads, " heads of an even size");
  const int64_t half = w.size(0) / heads / 2, cols = w.size(1);
  Tensor v = to_gguf ? w.reshape({heads, 2, half, cols}) : w.reshape({heads, half, 2, cols});
  return ops::permute(v, {0, 2, 1, 3}).contiguous().reshape({w.size(0), cols});
}

}  // namespace

Tensor rope_rows_to_gguf(const Tensor& w, int64_t n_heads) { return regroup(w, n_heads, true); }
Tensor rope_rows_from_gguf(const Tensor& w, int64_t n_heads) { return regroup(w, n_heads, false); }

GgufWriter llama_to_gguf(const nn::zoo::Llama& model, const GgufExportOptions& opts) {
  const nn::zoo::LlamaConfig& c = model.config;
  const int64_t ftype = detail::export_file_type(opts.type);
  auto u32 = [](int64_t v) { return GgufValue::integer(GgufType::U32, v); };
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("llama"));
  w.set("general.name", GgufValue::string(opts.name));
  w.set("general.file_type", u32(ftype));
  if (opts.type == GgmlType::Q8_0 || opts.type == GgmlType::Q4_0) w.set("general.quantization_version", u32(2));
  w.set("llama.vocab_size", u32(c.vocab_size));
  w.set("llama.context_length", u32(c.max_seq_len));
  w.set("llama.embedding_length", u32(c.dim));
  w.set("llama.block_count", u32(c.n_layers));
  w.set("llama.feed_forward_length", u32(c.hidden_dim));
  w.set("llama.rope.dimension_count", u32(c.dim / c.n_heads));
  w.set("llama.attention.head_count", u32(c.n_heads));
  w.set("llama.attention.head_count_kv", u32(c.n_kv_heads));
  w.set("llama.attention.layer_norm_rms_epsilon", GgufValue::floating(GgufType::F32, c.norm_eps));
  w.set("llama.rope.freq_base", GgufValue::floating(GgufType::F32, c.rope_theta));
  if (opts.tokenizer) {
    TS_CHECK(opts.tokenizer->size() == c.vocab_size, "llama_to_gguf: the tokenizer has ", opts.tokenizer->size(),
             " tokens but the model's vocabulary is ", c.vocab_size);
    opts.tokenizer->to_gguf(w);
  }
  detail::add_parameters(w, model, tensor_names(c), opts.type, {}, rope_rows_to_gguf);
  return w;
}

void save_llama_gguf(const nn::zoo::Llama& model, const std::string& path, const GgufExportOptions& opts) {
  llama_to_gguf(model, opts).save(path);
}

nn::zoo::LlamaConfig llama_config_from_gguf(const GgufFile& f, bool rope_scaling) {
  const GgufValue* arch = f.find("general.architecture");
  TS_CHECK(arch && arch->type() == GgufType::String && arch->as_string() == "llama", f.what(),
           ": general.architecture is ", arch ? arch->summary() : std::string("missing"), ", not \"llama\"");
  nn::zoo::LlamaConfig c;
  c.dim = u32_of(f, "llama.embedding_length");
  c.n_layers = detail::layer_count(f, "llama.block_count", kLayerTensors, "llama");
  c.hidden_dim = u32_of(f, "llama.feed_forward_length");
  c.n_heads = u32_of(f, "llama.attention.head_count");
  c.n_kv_heads = f.find("llama.attention.head_count_kv") ? u32_of(f, "llama.attention.head_count_kv") : c.n_heads;
  c.max_seq_len = u32_of(f, "llama.context_length");
  c.norm_eps = f.get("llama.attention.layer_norm_rms_epsilon").as_float("llama.attention.layer_norm_rms_epsilon");
  if (const GgufValue* v = f.find("llama.rope.freq_base")) c.rope_theta = v->as_float("llama.rope.freq_base");
  const GgufTensorInfo& embd = f.tensor_info("token_embd.weight");
  TS_CHECK(embd.ne.size() == 2 && embd.ne[0] == c.dim, f.what(), ": token_embd.weight is ", shape_str(embd.shape()),
           ", not [vocabulary, ", c.dim, "]");
  c.vocab_size = embd.ne[1];
  if (const GgufValue* v = f.find("llama.vocab_size"))
    TS_CHECK(v->as_int("llama.vocab_size") == c.vocab_size, f.what(), ": llama.vocab_size ", v->as_int(),
             " disagrees with token_embd.weight's ", c.vocab_size, " rows");
  TS_CHECK(c.n_heads % c.n_kv_heads == 0 && c.dim % c.n_heads == 0 && (c.dim / c.n_heads) % 2 == 0, f.what(),
           ": ", c.n_heads, " heads (", c.n_kv_heads, " for keys and values) do not divide the width ", c.dim,
           " into even head sizes");
  if (const GgufValue* v = f.find("llama.rope.dimension_count"))
    TS_CHECK(v->as_int("llama.rope.dimension_count") == c.dim / c.n_heads, f.what(), ": RoPE over ", v->as_int(),
             " of each head's ", c.dim / c.n_heads, " dimensions is not supported (all of them are)");
  c.tie_embeddings = f.find_tensor("output.weight") == nullptr;
  TS_CHECK(c.max_seq_len <= kMaxContext, f.what(), ": llama.context_length ", c.max_seq_len, " is above the ",
           kMaxContext, " positions Tessera's Llama precomputes RoPE tables for");
  // Keys and tensors that would change the computation are refused unless
  // Tessera computes them, so a file never loads as a different model.
  if (!rope_scaling) {
    if (const GgufValue* v = f.find("llama.rope.scaling.type"))
      TS_CHECK(v->as_string("llama.rope.scaling.type") == "none", f.what(), ": llama.rope.scaling.type '",
               v->as_string(), "' (RoPE scaling): the LLM engine runs it (tessera generate), the Llama module does not");
    for (const char* key : {"llama.rope.scaling.factor", "llama.rope.scale_linear"})
      if (const GgufValue* v = f.find(key))
        TS_CHECK(v->as_float(key) == 0.0 || v->as_float(key) == 1.0, f.what(), ": ", key, " ", v->as_float(),
                 " (RoPE scaling): the LLM engine runs it (tessera generate), the Llama module does not");
  }
  // Every tensor the model needs, in its shape, and no other.
  std::vector<Name> names = tensor_names(c);
  if (rope_scaling && f.find_tensor("rope_freqs.weight"))
    names.push_back({"", "rope_freqs.weight", {c.dim / c.n_heads / 2}, 0});
  detail::check_tensors(f, names, "llama", c.n_layers, [](const std::string& t) {
    return std::string(t == "rope_freqs.weight" ? " (per-dimension RoPE frequencies, Llama 3.1's scaling: the LLM "
                                                  "engine runs it, the Llama module does not)" : "");
  });
  return c;
}

std::shared_ptr<nn::zoo::Llama> load_llama_gguf(const GgufFile& f) {
  const nn::zoo::LlamaConfig c = llama_config_from_gguf(f);
  auto model = std::make_shared<nn::zoo::Llama>(c);
  detail::load_parameters(f, *model, tensor_names(c), rope_rows_from_gguf);
  return model;
}

std::shared_ptr<Model> model_from_llama(const nn::zoo::Llama& model, GgmlType type) {
  GgufExportOptions o;
  o.type = type;
  const std::string image = llama_to_gguf(model, o).bytes();
  return Model::from_gguf(GgufFile::parse(image.data(), image.size(), "Tessera Llama"));
}

}  // namespace tessera::llm
