// GPT with nanoGPT's module names and initialisation.
#include <cmath>

#include "tessera/nn/init.h"
#include "tessera/nn/checkpoint.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"

namespace tessera::nn::zoo {

GPT::GPT(GPTConfig c) : Module("GPT"), config(c) {
  TS_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0, "GPT: vocab_size, block_size and n_layer must be "
           "positive");
  TS_CHECK(c.n_embd > 0 && c.n_head > 0 && c.n_embd % c.n_head == 0, "GPT: n_embd=", c.n_embd,
           " must be divisible by n_head=", c.n_head);
  auto transformer = register_module("transformer", std::make_shared<ModuleDict>());
  wte = std::make_shared<Embedding>(c.vocab_size, c.n_embd);
  wpe = std::make_shared<Embedding>(c.block_size, c.n_embd);
  drop = std::make_shared<Dropout>(c.dropout);
  h = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<DecoderBlock>(c.n_embd, c.n_head, c.bias, c.dropout));
  ln_f = std::make_shared<LayerNorm>(IntArrayRef{c.n_embd}, 1e-5, true, c.bias);
  transformer->insert("wte", wte).insert("wpe", wpe).insert("drop", drop).insert("h", h).insert("ln_f", ln_f);
  if (c.weight_tying)
    tied_head = register_module("lm_head", std::make_shared<TiedLinear>(wte));
  else
    lm_head = register_module("lm_head", std::make_shared<Linear>(c.n_embd, c.vocab_size, false));
  reset_parameters();
}

// nanoGPT: N(0, 0.02) for every Linear and Embedding, zero biases, and the
// residual projections scaled by 1/sqrt(2 * n_layer).
void GPT::reset_parameters() {
  for (auto& [name, m] : named_modules()) {
    if (auto* l = dynamic_cast<Linear*>(m)) {
      double std = name.ends_with("c_proj") ? 0.02 / std::sqrt(2.0 * config.n_layer) : 0.02;
      init::normal_(l->weight, 0.0, std);
      if (l->bias.defined()) init::zeros_(l->bias);
    } else if (auto* e = dynamic_cast<Embedding*>(m)) {
      init::normal_(e->weight, 0.0, 0.02);
    }
  }
}

// In forward order; a tied head shares wte's weight, so the two are one
// segment, gathered around each use (Note [ZeRO-3 units]).
std::vector<Module*> GPT::shard_units() {
  std::vector<Module*> units{wte.get(), wpe.get()};
  for (Module* b : Module::shard_units()) units.push_back(b);
  units.push_back(lm_head ? static_cast<Module*>(lm_head.get()) : tied_head.get());
  return units;
}

Tensor GPT::forward(const Tensor& ids) {
  TS_CHECK(ids.dim() == 2 && !is_floating(ids.dtype()), "GPT: expected integer token ids [batch, seq], got ",
           dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
  const int64_t T = ids.size(1);
  TS_CHECK(T <= config.block_size, "GPT: sequence length ", T, " exceeds block_size ", config.block_size);
  Tensor pos = arange(T, DType::I64);
  Tensor x = (*drop)(ops::add((*wte)(ids), (*wpe)(pos)));
  x = run_blocks(static_cast<int64_t>(h->size()), config.gradient_checkpointing, config.checkpoint_segments, x,
                 [this](int64_t i, const Tensor& in) { return (*(*h)[i])(in); });
  x = (*ln_f)(x);
  return lm_head ? (*lm_head)(x) : (*tied_head)(x);
}

}  // namespace tessera::nn::zoo
