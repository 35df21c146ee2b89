// A Llama-style decoder with Hugging Face's module names: RMSNorm, rotary
// position embeddings, SwiGLU MLP and grouped-query attention.
#include <cmath>

#include "tessera/nn/init.h"
#include "tessera/nn/checkpoint.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"

namespace tessera::nn::zoo {

Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t start) {
  const int64_t T = x.size(-2), D = x.size(-1);
  TS_CHECK(start >= 0 && start + T <= cos.size(0), "apply_rope: positions ", start, "..", start + T - 1,
           " exceed the table of ", cos.size(0), " positions (max_seq_len)");
  Tensor c = cos.slice(0, start, start + T), s = sin.slice(0, start, start + T);
  Tensor x1 = x.slice(-1, 0, D / 2), x2 = x.slice(-1, D / 2, D);
  Tensor rotated = ops::cat({ops::neg(x2), x1}, -1);
  return ops::add(ops::mul(x, c), ops::mul(rotated, s));
}

LlamaAttention::LlamaAttention(const LlamaConfig& c)
    : Module("LlamaAttention"), n_heads(c.n_heads), n_kv_heads(c.n_kv_heads), head_dim(c.dim / c.n_heads) {
  TS_CHECK(c.n_heads > 0 && c.dim % c.n_heads == 0 && head_dim % 2 == 0, "Llama: dim=", c.dim,
           " must be divisible by n_heads=", c.n_heads, " into an even head_dim");
  TS_CHECK(c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0, "Llama: n_heads=", c.n_heads,
           " must be a multiple of n_kv_heads=", c.n_kv_heads);
  q_proj = register_module("q_proj", std::make_shared<Linear>(c.dim, n_heads * head_dim, false));
  k_proj = register_module("k_proj", std::make_shared<Linear>(c.dim, n_kv_heads * head_dim, false));
  v_proj = register_module("v_proj", std::make_shared<Linear>(c.dim, n_kv_heads * head_dim, false));
  o_proj = register_module("o_proj", std::make_shared<Linear>(n_heads * head_dim, c.dim, false));
}

Tensor LlamaAttention::forward(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  trace::ScopeGuard scope = trace_scope();
  // The heads this module holds, from its projections: all of them, or a
  // tensor-parallel rank's share (distributed/tensor_parallel.h).
  const int64_t hq = q_proj->out_features / head_dim, hkv = k_proj->out_features / head_dim, rep = hq / hkv;
  const int64_t B = x.size(0), T = x.size(1);
  auto heads = [&](const Tensor& t, int64_t n) { return t.view({B, T, n, head_dim}).transpose(1, 2); };
  Tensor q = apply_rope(heads((*q_proj)(x), hq), cos, sin);
  Tensor k = apply_rope(heads((*k_proj)(x), hkv), cos, sin);
  Tensor v = heads((*v_proj)(x), hkv);
  if (rep > 1) {  // each key/value head serves `rep` consecutive query heads
    k = k.unsqueeze(2).expand({B, hkv, rep, T, head_dim}).reshape({B, hq, T, head_dim});
    v = v.unsqueeze(2).expand({B, hkv, rep, T, head_dim}).reshape({B, hq, T, head_dim});
  }
  Tensor y = ops::scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
  return (*o_proj)(y.transpose(1, 2).reshape({B, T, hq * head_dim}));
}

LlamaMLP::LlamaMLP(int64_t dim, int64_t hidden) : Module("LlamaMLP") {
  gate_proj = register_module("gate_proj", std::make_shared<Linear>(dim, hidden, false));
  up_proj = register_module("up_proj", std::make_shared<Linear>(dim, hidden, false));
  down_proj = register_module("down_proj", std::make_shared<Linear>(hidden, dim, false));
}

Tensor LlamaMLP::forward(const Tensor& x) {
  return (*down_proj)(ops::mul(ops::silu((*gate_proj)(x)), (*up_proj)(x)));
}

LlamaLayer::LlamaLayer(const LlamaConfig& c) : Module("LlamaDecoderLayer") {
  self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(c));
  mlp = register_module("mlp", std::make_shared<LlamaMLP>(c.dim, c.hidden_dim));
  input_layernorm = register_module("input_layernorm", std::make_shared<RMSNorm>(IntArrayRef{c.dim}, c.norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", std::make_shared<RMSNorm>(IntArrayRef{c.dim}, c.norm_eps));
}

Tensor LlamaLayer::forward(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  trace::ScopeGuard scope = trace_scope();
  Tensor h = ops::add(x, self_attn->forward((*input_layernorm)(x), cos, sin));
  return ops::add(h, (*mlp)((*post_attention_layernorm)(h)));
}

LlamaModel::LlamaModel(const LlamaConfig& c) : Module("LlamaModel") {
  embed_tokens = register_module("embed_tokens", std::make_shared<Embedding>(c.vocab_size, c.dim));
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.n_layers; ++i) layers->push_back(std::make_shared<LlamaLayer>(c));
  norm = register_module("norm", std::make_shared<RMSNorm>(IntArrayRef{c.dim}, c.norm_eps));
}

Llama::Llama(LlamaConfig c) : Module("Llama"), config(c) {
  TS_CHECK(c.vocab_size > 0 && c.dim > 0 && c.n_layers > 0 && c.hidden_dim > 0 && c.max_seq_len > 0,
           "Llama: vocab_size, dim, n_layers, hidden_dim and max_seq_len must be positive");
  model = register_module("model", std::make_shared<LlamaModel>(c));
  if (c.tie_embeddings)
    tied_head = register_module("lm_head", std::make_shared<TiedLinear>(model->embed_tokens));
  else
    lm_head = register_module("lm_head", std::make_shared<Linear>(c.dim, c.vocab_size, false));
  const int64_t D = c.dim / c.n_heads;
  rope_cos = register_buffer("rope_cos", empty({c.max_seq_len, D}), false);
  rope_sin = register_buffer("rope_sin", empty({c.max_seq_len, D}), false);
  for (size_t i = 0; i < model->layers->size(); ++i) {
    auto& layer = model->layers->at<LlamaLayer>(i);
    layer.rope_cos = rope_cos;
    layer.rope_sin = rope_sin;
  }
  reset_parameters();
  reset_buffers();
}

void Llama::reset_parameters() {
  for (auto* m : modules()) {  // Hugging Face: N(0, 0.02) everywhere
    if (auto* l = dynamic_cast<Linear*>(m)) init::normal_(l->weight, 0.0, 0.02);
    if (auto* e = dynamic_cast<Embedding*>(m)) init::normal_(e->weight, 0.0, 0.02);
  }
}

// The rotary tables, on the buffers' device.
void Llama::reset_buffers() {
  const int64_t D = config.dim / config.n_heads;
  DeviceScope on(rope_cos.device());
  Tensor inv_freq = ops::pow(config.rope_theta, ops::div(arange(0, D, 2, DType::F64), static_cast<double>(D)));
  inv_freq = ops::reciprocal(inv_freq);
  Tensor freqs = ops::outer(arange(config.max_seq_len, DType::F64), inv_freq);
  Tensor emb = ops::cat({freqs, freqs}, -1);
  rope_cos.copy_(ops::cos(emb));
  rope_sin.copy_(ops::sin(emb));
}

// In forward order; a tied head shares embed_tokens' weight, so the two are
// one segment, gathered around each use (Note [ZeRO-3 units]).
std::vector<Module*> Llama::shard_units() {
  std::vector<Module*> units{model->embed_tokens.get()};
  for (Module* l : Module::shard_units()) units.push_back(l);
  units.push_back(lm_head ? static_cast<Module*>(lm_head.get()) : tied_head.get());
  return units;
}

Tensor Llama::forward(const Tensor& ids) {
  TS_CHECK(ids.dim() == 2 && !is_floating(ids.dtype()), "Llama: expected integer token ids [batch, seq], got ",
           dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
  TS_CHECK(ids.size(1) <= config.max_seq_len, "Llama: sequence length ", ids.size(1), " exceeds max_seq_len ",
           config.max_seq_len);
  Tensor x = (*model->embed_tokens)(ids);
  x = run_blocks(static_cast<int64_t>(model->layers->size()), config.gradient_checkpointing,
                 config.checkpoint_segments, x, [this](int64_t i, const Tensor& in) {
                   return (*(*model->layers)[i])(in);  // through operator(): its hooks run
                 });
  x = (*model->norm)(x);
  return lm_head ? (*lm_head)(x) : (*tied_head)(x);
}

}  // namespace tessera::nn::zoo
