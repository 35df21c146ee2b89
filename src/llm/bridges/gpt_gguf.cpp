// Tessera's GPT as a GGUF "gpt2" file and back (include/tessera/llm/gpt_gguf.h).
#include "tessera/llm/gpt_gguf.h"

#include "gguf_model.h"

#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/ops/ops.h"

namespace tessera::llm {
namespace {

// The spec of a GPT of this configuration.
ModelSpec spec_of(const nn::zoo::GPTConfig& c) {
  ModelSpec s;
  s.arch = "gpt2";
  s.vocab = c.vocab_size, s.dim = c.n_embd, s.n_layers = c.n_layer, s.n_heads = s.n_kv_heads = c.n_head;
  s.head_dim = c.n_embd / c.n_head, s.hidden = 4 * c.n_embd, s.context = c.block_size;
  s.tied_output = c.weight_tying, s.biases = c.bias, s.gelu_erf = true;
  return s;
}

// Every tensor of a GPT of this configuration: its parameter and GGUF names.
std::vector<detail::TensorName> tensor_names(const nn::zoo::GPTConfig& c) {
  const detail::NameMap top = {{"token_embd", "transformer.wte"},
                               {"position_embd", "transformer.wpe"},
                               {"output_norm", "transformer.ln_f"},
                               {"output", "lm_head"}};
  const detail::NameMap layer = {{"attn_norm", "ln_1"},   {"attn_qkv", "attn.c_attn"}, {"attn_output", "attn.c_proj"},
                                 {"ffn_norm", "ln_2"},    {"ffn_up", "mlp.c_fc"},      {"ffn_down", "mlp.c_proj"}};
  return detail::parameter_names(spec_of(c), top, layer, "transformer.h.");
}

}  // namespace

GgufWriter gpt_to_gguf(const nn::zoo::GPT& model, const GgufExportOptions& opts) {
  const nn::zoo::GPTConfig& c = model.config;
  auto u32 = [](int64_t v) { return GgufValue::integer(GgufType::U32, v); };
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("gpt2"));
  w.set("general.name", GgufValue::string(opts.name));
  w.set("general.file_type", u32(detail::export_file_type(opts.type)));
  if (opts.type == GgmlType::Q8_0 || opts.type == GgmlType::Q4_0) w.set("general.quantization_version", u32(2));
  // A vocabulary padded past the tokenizer's is written without the padding.
  const int64_t vocab = detail::exported_vocab("gpt_to_gguf", c.vocab_size, opts.tokenizer);
  w.set("gpt2.vocab_size", u32(vocab));
  w.set("gpt2.context_length", u32(c.block_size));
  w.set("gpt2.embedding_length", u32(c.n_embd));
  w.set("gpt2.block_count", u32(c.n_layer));
  w.set("gpt2.feed_forward_length", u32(4 * c.n_embd));
  w.set("gpt2.attention.head_count", u32(c.n_head));
  w.set("gpt2.attention.layer_norm_epsilon", GgufValue::floating(GgufType::F32, 1e-5));
  w.set("tessera.gelu", GgufValue::string("erf"));
  if (opts.tokenizer) opts.tokenizer->to_gguf(w);
  // The position table stays F32 too, as llama.cpp's quantizer leaves it.
  detail::add_parameters(w, model, tensor_names(c), opts.type, {"position_embd.weight"}, nullptr, vocab);
  return w;
}

void save_gpt_gguf(const nn::zoo::GPT& model, const std::string& path, const GgufExportOptions& opts) {
  gpt_to_gguf(model, opts).save(path);
}

nn::zoo::GPTConfig gpt_config_from_gguf(const GgufFile& f) {
  const GgufValue* arch = f.find("general.architecture");
  TS_CHECK(arch && arch->type() == GgufType::String && arch->as_string() == "gpt2", f.what(),
           ": general.architecture is ", arch ? arch->summary() : std::string("missing"), ", not \"gpt2\"");
  const ModelSpec s = read_model_spec(f);  // every tensor present, in its shape
  nn::zoo::GPTConfig c;
  c.vocab_size = s.vocab, c.n_embd = s.dim, c.n_layer = s.n_layers, c.n_head = s.n_heads, c.block_size = s.context;
  c.weight_tying = s.tied_output, c.bias = s.biases;
  return c;
}

std::shared_ptr<nn::zoo::GPT> load_gpt_gguf(const GgufFile& f) {
  const nn::zoo::GPTConfig c = gpt_config_from_gguf(f);
  auto model = std::make_shared<nn::zoo::GPT>(c);
  detail::load_parameters(f, *model, tensor_names(c));
  return model;
}

std::shared_ptr<Model> model_from_gpt(const nn::zoo::GPT& model, GgmlType type) {
  GgufExportOptions o;
  o.type = type;
  const std::string image = gpt_to_gguf(model, o).bytes();
  return Model::from_gguf(GgufFile::parse(image.data(), image.size(), "Tessera GPT"));
}

}  // namespace tessera::llm
