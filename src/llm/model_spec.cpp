// llm::ModelSpec: a GGUF file's hyperparameters, read and checked against
// its tensors, and RoPE's angles (include/tessera/llm/model_spec.h).
#include "tessera/llm/model_spec.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_set>

#include "tessera/core/error.h"

namespace tessera::llm {
namespace {

// The longest context a file may claim: RoPE tables and position embeddings
// are built for every position.
constexpr int64_t kMaxContext = int64_t{1} << 18;

// A count from the file between 1 and 2^31 - 1 (an error naming the key and
// the value otherwise).
int64_t count_of(const GgufFile& f, const std::string& key) {
  const int64_t v = f.get(key).as_int(key);
  TS_CHECK(v > 0, f.what(), ": ", key, " is ", v, " (must be positive)");
  TS_CHECK(v < (int64_t{1} << 31), f.what(), ": ", key, " is ", v, ", above the largest Tessera reads (2^31 - 1)");
  return v;
}

// The file's layer count under `key`, checked against the tensors it holds
// (each layer has at least `per_layer`) before anything proportional to the
// claim is built: a header claiming 2^31 layers is refused at once.
int64_t layer_count(const GgufFile& f, const std::string& key, int64_t per_layer, const std::string& arch) {
  const int64_t n = count_of(f, key);
  const int64_t present = static_cast<int64_t>(f.tensors().size());
  TS_CHECK(n * per_layer <= present, f.what(), ": ", key, " is ", n, ", but the file holds ", present,
           " tensors, and a ", arch, " layer has ", per_layer, " (at most ", present / per_layer, " layers)");
  return n;
}

// The vocabulary: token_embd.weight's rows, the width checked.
int64_t vocab_of(const GgufFile& f, int64_t dim) {
  const GgufTensorInfo& embd = f.tensor_info("token_embd.weight");
  TS_CHECK(embd.ne.size() == 2 && embd.ne[0] == dim, f.what(), ": token_embd.weight is ", shape_str(embd.shape()),
           ", not [vocabulary, ", dim, "]");
  return embd.ne[1];
}

void read_llama(const GgufFile& f, ModelSpec& s) {
  s.dim = count_of(f, "llama.embedding_length");
  s.n_layers = layer_count(f, "llama.block_count", 9, "llama");
  s.hidden = count_of(f, "llama.feed_forward_length");
  s.n_heads = count_of(f, "llama.attention.head_count");
  s.n_kv_heads = f.find("llama.attention.head_count_kv") ? count_of(f, "llama.attention.head_count_kv") : s.n_heads;
  s.context = count_of(f, "llama.context_length");
  s.norm_eps = static_cast<float>(
      f.get("llama.attention.layer_norm_rms_epsilon").as_float("llama.attention.layer_norm_rms_epsilon"));
  if (const GgufValue* v = f.find("llama.rope.freq_base")) s.rope_theta = v->as_float("llama.rope.freq_base");
  s.vocab = vocab_of(f, s.dim);
  if (const GgufValue* v = f.find("llama.vocab_size"))
    TS_CHECK(v->as_int("llama.vocab_size") == s.vocab, f.what(), ": llama.vocab_size ", v->as_int(),
             " disagrees with token_embd.weight's ", s.vocab, " rows");
  TS_CHECK(s.n_heads % s.n_kv_heads == 0 && s.dim % s.n_heads == 0 && (s.dim / s.n_heads) % 2 == 0, f.what(),
           ": ", s.n_heads, " heads (", s.n_kv_heads, " for keys and values) do not divide the width ", s.dim,
           " into even head sizes");
  s.head_dim = s.dim / s.n_heads;
  if (const GgufValue* v = f.find("llama.rope.dimension_count"))
    TS_CHECK(v->as_int("llama.rope.dimension_count") == s.head_dim, f.what(), ": RoPE over ", v->as_int(),
             " of each head's ", s.head_dim, " dimensions is not supported (all of them are)");
  TS_CHECK(s.context <= kMaxContext, f.what(), ": llama.context_length ", s.context, " is above the ", kMaxContext,
           " positions Tessera precomputes RoPE tables for");
  s.rope = rope_scaling_from_gguf(f, s.head_dim);
}

void read_gpt2(const GgufFile& f, ModelSpec& s) {
  s.dim = count_of(f, "gpt2.embedding_length");
  s.n_layers = layer_count(f, "gpt2.block_count", 6, "gpt2");  // six weights a layer, biases or not
  s.n_heads = s.n_kv_heads = count_of(f, "gpt2.attention.head_count");
  s.context = count_of(f, "gpt2.context_length");
  TS_CHECK(s.dim % s.n_heads == 0, f.what(), ": ", s.n_heads, " heads do not divide the width ", s.dim);
  s.head_dim = s.dim / s.n_heads;
  s.hidden = count_of(f, "gpt2.feed_forward_length");
  TS_CHECK(s.hidden == 4 * s.dim, f.what(), ": gpt2.feed_forward_length ", s.hidden, " is not 4 x the width ", s.dim,
           " (Tessera's GPT)");
  TS_CHECK(s.context <= kMaxContext, f.what(), ": gpt2.context_length ", s.context, " is above ", kMaxContext);
  s.norm_eps = static_cast<float>(
      f.get("gpt2.attention.layer_norm_epsilon").as_float("gpt2.attention.layer_norm_epsilon"));
  s.vocab = vocab_of(f, s.dim);
  s.biases = f.find_tensor("blk.0.attn_qkv.bias") != nullptr;
  if (const GgufValue* v = f.find("tessera.gelu")) {
    const std::string g = v->as_string("tessera.gelu");
    TS_CHECK(g == "erf" || g == "tanh", f.what(), ": tessera.gelu is '", g, "', not 'erf' or 'tanh'");
    s.gelu_erf = g == "erf";
  }
}

}  // namespace

ModelSpec read_model_spec(const GgufFile& f) {
  const GgufValue* arch = f.find("general.architecture");
  const std::string name = arch && arch->type() == GgufType::String ? arch->as_string() : std::string();
  TS_CHECK(name == "llama" || name == "gpt2", f.what(), ": general.architecture is ",
           arch ? arch->summary() : std::string("missing"), ", not \"llama\" or \"gpt2\" (the models Tessera reads)");
  ModelSpec s;
  s.arch = name;
  if (name == "llama") read_llama(f, s);
  else read_gpt2(f, s);
  s.tied_output = f.find_tensor("output.weight") == nullptr;
  TS_CHECK(s.norm_eps >= 0.f && s.rope_theta > 0.0, f.what(), ": the norm's epsilon ", s.norm_eps,
           " and RoPE base ", s.rope_theta, " must be non-negative and positive");

  // Every tensor the model needs, in its shape, and no other. Checked before
  // anything is allocated, so sizes are those of tensors in the file.
  const std::vector<GgufTensorSpec> names = gguf_tensors(s);
  for (const GgufTensorSpec& n : names) {
    const GgufTensorInfo* t = f.find_tensor(n.name);
    TS_CHECK(t != nullptr, f.what(), ": the file has no tensor '", n.name, "', which a ", s.arch, " model of ",
             s.n_layers, " layers needs");
    TS_CHECK(t->shape() == n.shape, f.what(), ": ", n.name, " is ", shape_str(t->shape()), ", the configuration "
             "needs ", shape_str(n.shape));
  }
  std::unordered_set<std::string_view> known;
  for (const GgufTensorSpec& n : names) known.insert(n.name);
  for (const GgufTensorInfo& t : f.tensors())
    TS_CHECK(known.count(t.name), f.what(), ": tensor '", t.name, "' is not part of the ", s.arch,
             " models Tessera reads");
  return s;
}

std::vector<GgufTensorSpec> gguf_tensors(const ModelSpec& s) {
  const int64_t d = s.dim, q = s.n_heads * s.head_dim, kv = s.n_kv_heads * s.head_dim, h = s.hidden;
  const bool gpt = s.arch == "gpt2";
  std::vector<GgufTensorSpec> n = {{"token_embd.weight", {s.vocab, d}}};
  if (gpt) n.push_back({"position_embd.weight", {s.context, d}});
  // A weight, and its bias where the model has them.
  auto add = [&](const std::string& name, Shape shape) {
    const int64_t rows = shape[0];
    n.push_back({name + ".weight", std::move(shape)});
    if (s.biases) n.push_back({name + ".bias", {rows}});
  };
  for (int64_t i = 0; i < s.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    add(b + "attn_norm", {d});
    if (gpt) {
      add(b + "attn_qkv", {3 * d, d});
    } else {
      add(b + "attn_q", {q, d});
      add(b + "attn_k", {kv, d});
      add(b + "attn_v", {kv, d});
    }
    add(b + "attn_output", {d, q});
    add(b + "ffn_norm", {d});
    if (!gpt) add(b + "ffn_gate", {h, d});
    add(b + "ffn_up", {h, d});
    add(b + "ffn_down", {d, h});
  }
  add("output_norm", {d});
  if (!s.tied_output) n.push_back({"output.weight", {s.vocab, d}});
  if (!s.rope.freq_factors.empty()) n.push_back({"rope_freqs.weight", {s.head_dim / 2}});
  return n;
}

RopeScaling rope_scaling_from_gguf(const GgufFile& f, int64_t head_dim) {
  RopeScaling r;
  auto number = [&](const char* key, double& out) {
    if (const GgufValue* v = f.find(key)) out = v->as_float(key);
  };
  std::string type = "linear";  // llama.cpp's default, a no-op with no factor
  if (const GgufValue* v = f.find("llama.rope.scaling.type")) type = v->as_string("llama.rope.scaling.type");
  double factor = 0.0;
  number("llama.rope.scale_linear", factor);
  number("llama.rope.scaling.factor", factor);
  TS_CHECK(std::isfinite(factor) && factor >= 0.0 && factor <= 1024.0, f.what(), ": llama.rope.scaling.factor ",
           factor, " is not between 0 and 1024");
  TS_CHECK(type == "none" || type == "linear" || type == "yarn", f.what(), ": llama.rope.scaling.type '", type,
           "' is not one the engine computes (none, linear, yarn)");
  if (type == "none" || factor == 0.0 || factor == 1.0) r.type = RopeScaling::Type::None;
  else r.type = type == "linear" ? RopeScaling::Type::Linear : RopeScaling::Type::Yarn;
  r.factor = factor == 0.0 ? 1.0 : factor;
  if (const GgufValue* v = f.find("llama.rope.scaling.original_context_length"))
    r.original_context = v->as_int("llama.rope.scaling.original_context_length");
  number("llama.rope.scaling.attn_factor", r.attn_factor);
  number("llama.rope.scaling.yarn_beta_fast", r.beta_fast);
  number("llama.rope.scaling.yarn_beta_slow", r.beta_slow);
  number("llama.rope.scaling.yarn_ext_factor", r.ext_factor);
  TS_CHECK(r.original_context >= 0 && r.original_context <= (int64_t{1} << 24) && std::isfinite(r.attn_factor) &&
               r.attn_factor > 0 && std::isfinite(r.beta_fast) && std::isfinite(r.beta_slow) && r.beta_fast > 0 &&
               r.beta_slow > 0 && std::isfinite(r.ext_factor),
           f.what(), ": RoPE scaling parameters out of range (original context ", r.original_context, ", attention "
           "factor ", r.attn_factor, ", YaRN betas ", r.beta_fast, "/", r.beta_slow, ")");
  if (const GgufTensorInfo* t = f.find_tensor("rope_freqs.weight")) {
    const Tensor w = dequantize_gguf_tensor(f, *t);
    TS_CHECK(w.numel() == head_dim / 2, f.what(), ": rope_freqs.weight has ", w.numel(), " values for ",
             head_dim / 2, " dimension pairs");
    r.freq_factors.assign(w.contiguous().data_ptr<float>(), w.contiguous().data_ptr<float>() + w.numel());
    for (float x : r.freq_factors)
      TS_CHECK(std::isfinite(x) && x > 0, f.what(), ": rope_freqs.weight holds ", x, " (factors must be positive)");
  }
  return r;
}

void rope_cos_sin(const ModelSpec& s, int64_t position, float* out) {
  // ggml_rope_cache_init and rope_yarn (ggml-cpu/ops.cpp), in float as there.
  const RopeScaling& r = s.rope;
  const int64_t n_dims = s.head_dim;
  const float base = static_cast<float>(s.rope_theta);
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(n_dims));
  const bool scaled = r.type != RopeScaling::Type::None;
  const float freq_scale = scaled ? static_cast<float>(1.0 / r.factor) : 1.0f;
  const float ext = r.ext_factor >= 0 ? static_cast<float>(r.ext_factor) : r.type == RopeScaling::Type::Yarn ? 1.0f : 0.0f;
  // llama.cpp's attention factor: with YaRN's mix on, its own magnitude
  // correction (0.1 ln(factor) + 1) is applied once, by rope_yarn below.
  float mscale = static_cast<float>(r.attn_factor);
  if (ext != 0.0f) {
    const float factor = 1.0f / freq_scale;
    const float m = factor <= 1.0f ? 1.0f : 0.1f * std::log(factor) + 1.0f;
    mscale *= m / (1.0f + 0.1f * std::log(factor));
  }
  float corr[2] = {0, 0};
  if (ext != 0.0f) {
    const int64_t orig = r.original_context > 0 ? r.original_context : s.context;
    auto dim = [&](float rot) {
      return static_cast<float>(n_dims) * std::log(static_cast<float>(orig) / (rot * 2.0f * static_cast<float>(M_PI))) /
             (2.0f * std::log(base));
    };
    corr[0] = std::max(0.0f, std::floor(dim(static_cast<float>(r.beta_fast))));
    corr[1] = std::min(static_cast<float>(n_dims - 1), std::ceil(dim(static_cast<float>(r.beta_slow))));
  }
  float theta = static_cast<float>(position);
  for (int64_t i0 = 0; i0 < n_dims; i0 += 2) {
    const float ff = r.freq_factors.empty() ? 1.0f : r.freq_factors[i0 / 2];
    const float extrap = theta / ff;
    const float interp = freq_scale * extrap;
    float angle = interp, ms = mscale;
    if (ext != 0.0f) {
      const float y = (static_cast<float>(i0 / 2) - corr[0]) / std::max(0.001f, corr[1] - corr[0]);
      const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * ext;
      angle = interp * (1.0f - ramp) + extrap * ramp;
      ms *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
    }
    out[i0] = std::cos(angle) * ms;
    out[i0 + 1] = std::sin(angle) * ms;
    theta *= theta_scale;
  }
}

}  // namespace tessera::llm
