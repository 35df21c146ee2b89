#include "tessera/llm/llama_gguf.h"

#include "gguf_model.h"

#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/ops/ops.h"
#include "tessera/quant/weights.h"

namespace tessera::llm {
namespace {

// The spec of a Llama of this configuration.
ModelSpec spec_of(const nn::zoo::LlamaConfig& c) {
  ModelSpec s;
  s.arch = "llama";
  s.vocab = c.vocab_size, s.dim = c.dim, s.n_layers = c.n_layers, s.n_heads = c.n_heads, s.n_kv_heads = c.n_kv_heads;
  s.head_dim = c.dim / c.n_heads, s.hidden = c.hidden_dim, s.context = c.max_seq_len;
  s.norm_eps = static_cast<float>(c.norm_eps), s.rope_theta = c.rope_theta, s.tied_output = c.tie_embeddings;
  return s;
}

// Every tensor of a Llama of this configuration: its parameter and GGUF
// names, the query and key weights with their heads (GGUF's row order).
std::vector<detail::TensorName> tensor_names(const nn::zoo::LlamaConfig& c) {
  const detail::NameMap top = {
      {"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}};
  const detail::NameMap layer = {
      {"attn_norm", "input_layernorm"},      {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},        {"attn_output", "self_attn.o_proj"},
      {"ffn_norm", "post_attention_layernorm"}, {"ffn_gate", "mlp.gate_proj"}, {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"}};
  std::vector<detail::TensorName> n = detail::parameter_names(spec_of(c), top, layer, "model.layers.");
  for (detail::TensorName& t : n) {
    if (t.gguf.ends_with(".attn_q.weight")) t.rope_heads = c.n_heads;
    if (t.gguf.ends_with(".attn_k.weight")) t.rope_heads = c.n_kv_heads;
  }
  return n;
}

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
  // A vocabulary padded past the tokenizer's is written without the padding.
  const int64_t vocab = detail::exported_vocab("llama_to_gguf", c.vocab_size, opts.tokenizer);
  w.set("llama.vocab_size", u32(vocab));
  w.set("llama.context_length", u32(c.max_seq_len));
  w.set("llama.embedding_length", u32(c.dim));
  w.set("llama.block_count", u32(c.n_layers));
  w.set("llama.feed_forward_length", u32(c.hidden_dim));
  w.set("llama.rope.dimension_count", u32(c.dim / c.n_heads));
  w.set("llama.attention.head_count", u32(c.n_heads));
  w.set("llama.attention.head_count_kv", u32(c.n_kv_heads));
  w.set("llama.attention.layer_norm_rms_epsilon", GgufValue::floating(GgufType::F32, c.norm_eps));
  w.set("llama.rope.freq_base", GgufValue::floating(GgufType::F32, c.rope_theta));
  if (opts.tokenizer) opts.tokenizer->to_gguf(w);
  detail::add_parameters(w, model, tensor_names(c), opts.type, {}, rope_rows_to_gguf, vocab);
  return w;
}

void save_llama_gguf(const nn::zoo::Llama& model, const std::string& path, const GgufExportOptions& opts) {
  llama_to_gguf(model, opts).save(path);
}

nn::zoo::LlamaConfig llama_config_from_gguf(const GgufFile& f, bool rope_scaling) {
  const GgufValue* arch = f.find("general.architecture");
  TS_CHECK(arch && arch->type() == GgufType::String && arch->as_string() == "llama", f.what(),
           ": general.architecture is ", arch ? arch->summary() : std::string("missing"), ", not \"llama\"");
  // Keys and tensors that would change the computation are refused unless
  // the caller computes them, so a file never loads as a different model.
  if (!rope_scaling) {
    if (const GgufValue* v = f.find("llama.rope.scaling.type"))
      TS_CHECK(v->as_string("llama.rope.scaling.type") == "none", f.what(), ": llama.rope.scaling.type '",
               v->as_string(), "' (RoPE scaling): the LLM engine runs it (tessera generate), the Llama module does not");
    for (const char* key : {"llama.rope.scaling.factor", "llama.rope.scale_linear"})
      if (const GgufValue* v = f.find(key))
        TS_CHECK(v->as_float(key) == 0.0 || v->as_float(key) == 1.0, f.what(), ": ", key, " ", v->as_float(),
                 " (RoPE scaling): the LLM engine runs it (tessera generate), the Llama module does not");
    TS_CHECK(!f.find_tensor("rope_freqs.weight"), f.what(), ": tensor 'rope_freqs.weight' is not part of the llama "
             "models Tessera reads (per-dimension RoPE frequencies, Llama 3.1's scaling: the LLM engine runs it, the "
             "Llama module does not)");
  }
  const ModelSpec s = read_model_spec(f);  // every tensor present, in its shape
  nn::zoo::LlamaConfig c;
  c.vocab_size = s.vocab, c.dim = s.dim, c.n_layers = s.n_layers, c.n_heads = s.n_heads, c.n_kv_heads = s.n_kv_heads;
  c.hidden_dim = s.hidden, c.max_seq_len = s.context, c.norm_eps = s.norm_eps, c.rope_theta = s.rope_theta;
  c.tie_embeddings = s.tied_output;
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
