// How the zoo's GPT and Llama are split across a tensor-parallel group
// (tessera/distributed/tensor_parallel.h): each attention and MLP becomes a
// split region with one entry and one exit, the vocabulary is split in the
// embedding and the head, and with sequence parallelism the norms and
// dropouts between the regions run on a block of the sequence.
#include <memory>

#include "tessera/core/error.h"
#include "tessera/distributed/tensor_parallel.h"
#include "tessera/nn/attention.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"

namespace tessera::distributed {

namespace {

using Rows = std::vector<std::pair<int64_t, int64_t>>;

// What every split module of one model shares.
struct Context {
  SplitGroup split;                // entries and exits as the options ask
  SplitGroup whole;                // the same group, activations whole (GPT's token embedding)
  std::shared_ptr<RegionRng> rng;  // for dropout on values this rank alone holds
};

// f() with the split-region generator when the values it draws for are this
// rank's alone, else with the default one (kept alike on every rank).
template <typename F>
Tensor drawing(bool split_values, RegionRng& rng, F&& f) {
  if (!split_values) return f();
  auto fork = rng.fork();
  return f();
}

void check_divides(int64_t n, int size, const char* model, const char* what) {
  TS_CHECK(n % size == 0, model, ": ", what, " = ", n, " must divide by the tensor-parallel size ", size,
           " (each rank holds ", what, " / ", size, ")");
}

// The rows of a per-head projection [heads * head_dim, in] this rank holds.
Rows head_rows(int64_t heads, int64_t head_dim, int rank, int size) {
  const int64_t per = heads / size;
  return {{rank * per * head_dim, (rank + 1) * per * head_dim}};
}

// ---- GPT ---------------------------------------------------------------------------------------

struct ParallelCausalSelfAttention : nn::CausalSelfAttention {
  Context ctx;
  ParallelCausalSelfAttention(const nn::CausalSelfAttention& d, Context c)
      : nn::CausalSelfAttention(d.n_embd, d.n_head, d.c_attn->bias.defined(), d.dropout), ctx(std::move(c)) {
    const int64_t C = d.n_embd, per = C / ctx.split.size(), r = ctx.split.rank();
    // The fused projection's rows are q, k and v: this rank's heads of each.
    Rows rows{{r * per, (r + 1) * per}, {C + r * per, C + (r + 1) * per}, {2 * C + r * per, 2 * C + (r + 1) * per}};
    c_attn = std::make_shared<ColumnParallelLinear>(*d.c_attn, ctx.split, rows);
    c_proj = std::make_shared<RowParallelLinear>(*d.c_proj, ctx.split);
    replace_module("c_attn", c_attn);
    replace_module("c_proj", c_proj);
  }
  Tensor forward(const Tensor& x) override {
    TS_CHECK(x.dim() == 3 && x.size(2) == n_embd, "CausalSelfAttention: expected [batch, seq, ", n_embd, "], got ",
             shape_str(x.shape()));
    const int64_t local = c_attn->out_features / 3, D = n_embd / n_head, heads = local / D;
    Tensor qkv_all = (*c_attn)(x);  // the whole sequence, this rank's heads
    const int64_t B = qkv_all.size(0), L = qkv_all.size(1);
    TensorList qkv = ops::split(qkv_all, local, 2);
    auto split_heads = [&](const Tensor& t) { return t.view({B, L, heads, D}).transpose(1, 2); };
    Tensor y = drawing(true, *ctx.rng, [&] {
      return ops::scaled_dot_product_attention(split_heads(qkv[0]), split_heads(qkv[1]), split_heads(qkv[2]), Tensor(),
                                               training_ ? dropout : 0.0, true);
    });
    y = (*c_proj)(y.transpose(1, 2).reshape({B, L, local}));
    return drawing(ctx.split.sequence_parallel, *ctx.rng, [&] { return (*resid_dropout)(y); });
  }
};

struct ParallelGPTMLP : nn::GPTMLP {
  Context ctx;
  ParallelGPTMLP(const nn::GPTMLP& d, Context c)
      : nn::GPTMLP(d.c_fc->in_features, d.c_fc->bias.defined(), d.dropout->p), ctx(std::move(c)) {
    c_fc = std::make_shared<ColumnParallelLinear>(*d.c_fc, ctx.split);
    c_proj = std::make_shared<RowParallelLinear>(*d.c_proj, ctx.split);
    replace_module("c_fc", c_fc);
    replace_module("c_proj", c_proj);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = (*c_proj)((*gelu)((*c_fc)(x)));
    return drawing(ctx.split.sequence_parallel, *ctx.rng, [&] { return (*dropout)(y); });
  }
};

// GPT's dropout after the embeddings, with sequence parallelism: where the
// whole activation becomes this rank's block of the sequence.
struct SequenceScatterDropout : nn::Dropout {
  Context ctx;
  SequenceScatterDropout(double p, Context c) : nn::Dropout(p), ctx(std::move(c)) {}
  Tensor forward(const Tensor& x) override {
    Tensor block = ops::scatter_to_group(x, ctx.split.name(), 1);
    return drawing(true, *ctx.rng, [&] { return nn::Dropout::forward(block); });
  }
};

std::shared_ptr<nn::LayerNorm> split_norm(const std::shared_ptr<nn::LayerNorm>& d, const Context& ctx) {
  if (!ctx.split.sequence_parallel) return d;
  return std::make_shared<SequenceParallelLayerNorm>(*d, ctx.split);
}

std::shared_ptr<nn::RMSNorm> split_norm(const std::shared_ptr<nn::RMSNorm>& d, const Context& ctx) {
  if (!ctx.split.sequence_parallel) return d;
  return std::make_shared<SequenceParallelRMSNorm>(*d, ctx.split);
}

void split_gpt(nn::zoo::GPT& g, const Context& ctx) {
  const nn::zoo::GPTConfig& c = g.config;
  const int T = ctx.split.size();
  check_divides(c.n_head, T, "GPT", "n_head");
  check_divides(4 * c.n_embd, T, "GPT", "the MLP's hidden size (4 * n_embd)");
  check_divides(c.vocab_size, T, "GPT", "vocab_size");

  nn::Module& transformer = g.submodule("transformer");
  auto wte = std::make_shared<VocabParallelEmbedding>(*g.wte, ctx.whole);
  transformer.replace_module("wte", wte);
  g.wte = wte;
  if (ctx.split.sequence_parallel) {
    g.drop = std::make_shared<SequenceScatterDropout>(g.drop->p, ctx);
    transformer.replace_module("drop", g.drop);
  }
  for (size_t i = 0; i < g.h->size(); ++i) {
    auto& block = g.h->at<nn::DecoderBlock>(i);
    block.attn = std::make_shared<ParallelCausalSelfAttention>(*block.attn, ctx);
    block.mlp = std::make_shared<ParallelGPTMLP>(*block.mlp, ctx);
    block.ln_1 = split_norm(block.ln_1, ctx);
    block.ln_2 = split_norm(block.ln_2, ctx);
    block.replace_module("ln_1", block.ln_1);
    block.replace_module("attn", block.attn);
    block.replace_module("ln_2", block.ln_2);
    block.replace_module("mlp", block.mlp);
  }
  g.ln_f = split_norm(g.ln_f, ctx);
  transformer.replace_module("ln_f", g.ln_f);
  if (g.tied_head) {
    g.tied_head = std::make_shared<VocabParallelTiedLinear>(wte, ctx.split);
    g.replace_module("lm_head", g.tied_head);
  } else {
    g.lm_head = std::make_shared<ColumnParallelLinear>(*g.lm_head, ctx.split);
    g.replace_module("lm_head", g.lm_head);
  }
}

// ---- Llama -------------------------------------------------------------------------------

nn::zoo::LlamaConfig attention_config(const nn::zoo::LlamaAttention& d) {
  nn::zoo::LlamaConfig c;
  c.dim = d.q_proj->in_features;
  c.n_heads = d.n_heads;
  c.n_kv_heads = d.n_kv_heads;
  return c;
}

// Key/value heads: each rank holds its block of them when they divide by the
// group; when fewer, each is held by size / n_kv_heads consecutive ranks
// (those whose query heads use it), which sum its gradients (`replicas`).
struct ParallelLlamaAttention : nn::zoo::LlamaAttention {
  Context ctx;
  ParallelLlamaAttention(const nn::zoo::LlamaAttention& d, Context c, const ProcessGroupPtr& replicas)
      : nn::zoo::LlamaAttention(attention_config(d)), ctx(std::move(c)) {
    const int r = ctx.split.rank(), T = ctx.split.size();
    const Rows kv = n_kv_heads % T == 0 ? head_rows(n_kv_heads, head_dim, r, T)
                                        : head_rows(n_kv_heads, head_dim, r / (T / n_kv_heads), n_kv_heads);
    q_proj = std::make_shared<ColumnParallelLinear>(*d.q_proj, ctx.split, head_rows(n_heads, head_dim, r, T), true);
    auto k = std::make_shared<ColumnParallelLinear>(*d.k_proj, ctx.split, kv, true);
    auto v = std::make_shared<ColumnParallelLinear>(*d.v_proj, ctx.split, kv, true);
    k->replicas = v->replicas = replicas;
    k_proj = k;
    v_proj = v;
    o_proj = std::make_shared<RowParallelLinear>(*d.o_proj, ctx.split);
    replace_module("q_proj", q_proj);
    replace_module("k_proj", k_proj);
    replace_module("v_proj", v_proj);
    replace_module("o_proj", o_proj);
  }
  // The dense attention on this rank's heads, its input taken into the
  // region once for q, k and v.
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin) override {
    return nn::zoo::LlamaAttention::forward(ctx.split.enter(x), cos, sin);
  }
};

struct ParallelLlamaMLP : nn::zoo::LlamaMLP {
  Context ctx;
  ParallelLlamaMLP(const nn::zoo::LlamaMLP& d, Context c)
      : nn::zoo::LlamaMLP(d.gate_proj->in_features, d.gate_proj->out_features), ctx(std::move(c)) {
    gate_proj = std::make_shared<ColumnParallelLinear>(*d.gate_proj, ctx.split, Rows{}, true);
    up_proj = std::make_shared<ColumnParallelLinear>(*d.up_proj, ctx.split, Rows{}, true);
    down_proj = std::make_shared<RowParallelLinear>(*d.down_proj, ctx.split);
    replace_module("gate_proj", gate_proj);
    replace_module("up_proj", up_proj);
    replace_module("down_proj", down_proj);
  }
  Tensor forward(const Tensor& x) override {
    Tensor in = ctx.split.enter(x);  // once for gate and up
    return (*down_proj)(ops::mul(ops::silu((*gate_proj)(in)), (*up_proj)(in)));
  }
};

void split_llama(nn::zoo::Llama& m, const Context& ctx) {
  const nn::zoo::LlamaConfig& c = m.config;
  const int T = ctx.split.size();
  check_divides(c.n_heads, T, "Llama", "n_heads");
  check_divides(c.hidden_dim, T, "Llama", "hidden_dim");
  check_divides(c.vocab_size, T, "Llama", "vocab_size");
  TS_CHECK(c.n_kv_heads % T == 0 || T % c.n_kv_heads == 0, "Llama: n_kv_heads = ", c.n_kv_heads,
           " must divide by the tensor-parallel size ", T, " or divide it (each key/value head then held by ",
           "size / n_kv_heads ranks)");
  // Collective over the group: the ranks sharing a key/value head.
  ProcessGroupPtr replicas;
  if (c.n_kv_heads % T != 0) replicas = ctx.split.group->split(ctx.split.rank() / (T / static_cast<int>(c.n_kv_heads)));

  nn::zoo::LlamaModel& model = *m.model;
  auto embed = std::make_shared<VocabParallelEmbedding>(*model.embed_tokens, ctx.split);
  model.replace_module("embed_tokens", embed);
  model.embed_tokens = embed;
  for (size_t i = 0; i < model.layers->size(); ++i) {
    auto& layer = model.layers->at<nn::zoo::LlamaLayer>(i);
    layer.self_attn = std::make_shared<ParallelLlamaAttention>(*layer.self_attn, ctx, replicas);
    layer.mlp = std::make_shared<ParallelLlamaMLP>(*layer.mlp, ctx);
    layer.input_layernorm = split_norm(layer.input_layernorm, ctx);
    layer.post_attention_layernorm = split_norm(layer.post_attention_layernorm, ctx);
    layer.replace_module("self_attn", layer.self_attn);
    layer.replace_module("mlp", layer.mlp);
    layer.replace_module("input_layernorm", layer.input_layernorm);
    layer.replace_module("post_attention_layernorm", layer.post_attention_layernorm);
  }
  model.norm = split_norm(model.norm, ctx);
  model.replace_module("norm", model.norm);
  if (m.tied_head) {
    m.tied_head = std::make_shared<VocabParallelTiedLinear>(embed, ctx.split);
    m.replace_module("lm_head", m.tied_head);
  } else {
    m.lm_head = std::make_shared<ColumnParallelLinear>(*m.lm_head, ctx.split);
    m.replace_module("lm_head", m.lm_head);
  }
}

}  // namespace

std::shared_ptr<RegionRng> tensor_parallelize(nn::Module& model, const ProcessGroupPtr& group,
                                              TensorParallelOptions options) {
  TS_CHECK(group, "tensor_parallelize: the group is null (a rank outside the group it was split into)");
  Generator& gen = default_generator();
  Context ctx{SplitGroup{group, options.sequence_parallel}, SplitGroup{group, false},
              std::make_shared<RegionRng>(gen.seed(), group->rank())};
  // The dense modules the split ones replace are built on meta, and nothing
  // draws from the default generator: every rank's stream stays the one
  // process's.
  const uint64_t seed = gen.seed(), offset = gen.offset();
  {
    DeviceScope on_meta(Device::meta());
    if (auto* g = dynamic_cast<nn::zoo::GPT*>(&model))
      split_gpt(*g, ctx);
    else if (auto* l = dynamic_cast<nn::zoo::Llama*>(&model))
      split_llama(*l, ctx);
    else
      TS_ERROR("tensor_parallelize: a ", model.type_name(), " cannot be split; the zoo's GPT and Llama can, and "
               "other models build theirs from ColumnParallelLinear, RowParallelLinear and VocabParallelEmbedding");
  }
  gen.set_state(seed, offset);
  return ctx.rng;
}

std::vector<std::pair<std::string, ShardSpec>> tensor_parallel_shards(nn::Module& model) {
  std::vector<std::pair<std::string, ShardSpec>> out;
  auto name = [](const std::string& prefix, const char* leaf) { return prefix.empty() ? leaf : prefix + "." + leaf; };
  auto along = [](int64_t dim, const ShardSpec& like, Shape dense) {
    ShardSpec s;
    s.dim = dim;
    s.ranges = like.ranges;
    s.dense_shape = std::move(dense);
    return s;
  };
  for (auto& [prefix, m] : model.named_modules()) {
    if (auto* c = dynamic_cast<ColumnParallelLinear*>(m)) {
      const int64_t out_dense = c->weight_spec.dense_shape[0];
      out.emplace_back(name(prefix, "weight"), c->weight_spec);
      if (c->bias.defined()) out.emplace_back(name(prefix, "bias"), along(0, c->weight_spec, Shape{out_dense}));
      if (c->lora) out.emplace_back(name(prefix, "lora_B"), along(0, c->weight_spec, Shape{out_dense, c->lora->rank}));
    } else if (auto* r = dynamic_cast<RowParallelLinear*>(m)) {
      out.emplace_back(name(prefix, "weight"), r->weight_spec);
      if (r->lora)
        out.emplace_back(name(prefix, "lora_A"),
                         along(1, r->weight_spec, Shape{r->lora->rank, r->weight_spec.dense_shape[1]}));
    } else if (auto* e = dynamic_cast<VocabParallelEmbedding*>(m)) {
      ShardSpec s;
      s.ranges = {{e->vocab_begin, e->vocab_begin + e->num_embeddings}};
      s.dense_shape = Shape{e->num_embeddings * e->split.size(), e->embedding_dim};
      out.emplace_back(name(prefix, "weight"), s);
    }
  }
  return out;
}

}  // namespace tessera::distributed
