// Tessera's GPT as a GGUF "gpt2" file and back (include/tessera/llm/gpt_gguf.h).
#include "tessera/llm/gpt_gguf.h"

#include "llm/gguf_model.h"

#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/ops/ops.h"

namespace tessera::llm {
namespace {

using Name = detail::TensorName;
using detail::u32_of;

// Every tensor of a GPT of this configuration: its parameter and GGUF names.
std::vector<Name> tensor_names(const nn::zoo::GPTConfig& c) {
  const int64_t d = c.n_embd, h = 4 * c.n_embd;
  std::vector<Name> n = {{"transformer.wte.weight", "token_embd.weight", {c.vocab_size, d}},
                         {"transformer.wpe.weight", "position_embd.weight", {c.block_size, d}}};
  auto add = [&](const std::string& p, const std::string& g, Shape s, bool bias_too, int64_t bias_size) {
    n.push_back({p + ".weight", g + ".weight", std::move(s)});
    if (bias_too) n.push_back({p + ".bias", g + ".bias", {bias_size}});
  };
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".", b = "blk." + std::to_string(i) + ".";
    add(p + "ln_1", b + "attn_norm", {d}, c.bias, d);
    add(p + "attn.c_attn", b + "attn_qkv", {3 * d, d}, c.bias, 3 * d);
    add(p + "attn.c_proj", b + "attn_output", {d, d}, c.bias, d);
    add(p + "ln_2", b + "ffn_norm", {d}, c.bias, d);
    add(p + "mlp.c_fc", b + "ffn_up", {h, d}, c.bias, h);
    add(p + "mlp.c_proj", b + "ffn_down", {d, h}, c.bias, d);
  }
  add("transformer.ln_f", "output_norm", {d}, c.bias, d);
  if (!c.weight_tying) n.push_back({"lm_head.weight", "output.weight", {c.vocab_size, d}});
  return n;
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
  w.set("gpt2.vocab_size", u32(c.vocab_size));
  w.set("gpt2.context_length", u32(c.block_size));
  w.set("gpt2.embedding_length", u32(c.n_embd));
  w.set("gpt2.block_count", u32(c.n_layer));
  w.set("gpt2.feed_forward_length", u32(4 * c.n_embd));
  w.set("gpt2.attention.head_count", u32(c.n_head));
  w.set("gpt2.attention.layer_norm_epsilon", GgufValue::floating(GgufType::F32, 1e-5));
  w.set("tessera.gelu", GgufValue::string("erf"));
  if (opts.tokenizer) {
    TS_CHECK(opts.tokenizer->size() == c.vocab_size, "gpt_to_gguf: the tokenizer has ", opts.tokenizer->size(),
             " tokens but the model's vocabulary is ", c.vocab_size);
    opts.tokenizer->to_gguf(w);
  }
  // The position table stays F32 too, as llama.cpp's quantizer leaves it.
  detail::add_parameters(w, model, tensor_names(c), opts.type, {"position_embd.weight"});
  return w;
}

void save_gpt_gguf(const nn::zoo::GPT& model, const std::string& path, const GgufExportOptions& opts) {
  gpt_to_gguf(model, opts).save(path);
}

nn::zoo::GPTConfig gpt_config_from_gguf(const GgufFile& f) {
  const GgufValue* arch = f.find("general.architecture");
  TS_CHECK(arch && arch->type() == GgufType::String && arch->as_string() == "gpt2", f.what(),
           ": general.architecture is ", arch ? arch->summary() : std::string("missing"), ", not \"gpt2\"");
  nn::zoo::GPTConfig c;
  c.n_embd = u32_of(f, "gpt2.embedding_length");
  c.n_layer = detail::layer_count(f, "gpt2.block_count", 6, "gpt2");  // six weights a layer, biases or not
  c.n_head = u32_of(f, "gpt2.attention.head_count");
  c.block_size = u32_of(f, "gpt2.context_length");
  TS_CHECK(c.n_embd % c.n_head == 0, f.what(), ": ", c.n_head, " heads do not divide the width ", c.n_embd);
  TS_CHECK(u32_of(f, "gpt2.feed_forward_length") == 4 * c.n_embd, f.what(), ": gpt2.feed_forward_length ",
           f.get("gpt2.feed_forward_length").as_int(), " is not 4 x the width ", c.n_embd, " (Tessera's GPT)");
  TS_CHECK(c.block_size <= (int64_t{1} << 18), f.what(), ": gpt2.context_length ", c.block_size,
           " is above 262144");
  const GgufTensorInfo& embd = f.tensor_info("token_embd.weight");
  TS_CHECK(embd.ne.size() == 2 && embd.ne[0] == c.n_embd, f.what(), ": token_embd.weight is ",
           shape_str(embd.shape()), ", not [vocabulary, ", c.n_embd, "]");
  c.vocab_size = embd.ne[1];
  c.weight_tying = f.find_tensor("output.weight") == nullptr;
  c.bias = f.find_tensor("blk.0.attn_qkv.bias") != nullptr;
  detail::check_tensors(f, tensor_names(c), "gpt2", c.n_layer);
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
