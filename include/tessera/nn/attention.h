#pragma once
// Attention layers and transformer blocks.
//
// MultiheadAttention has PyTorch's parameter names and masks: in_proj_weight
// [3E, E], in_proj_bias [3E], out_proj; key_padding_mask [B, S] with true =
// ignore that key; attn_mask [L, S] or [B * heads, L, S], boolean (true = not
// allowed) or additive float. It runs on the flash-style attention op, so the
// [L, S] score matrix is never materialised.
#include "tessera/nn/activation.h"
#include "tessera/nn/linear.h"
#include "tessera/nn/norm.h"

namespace tessera::nn {

struct MultiheadAttention : Module {
  int64_t embed_dim, num_heads;
  double dropout;
  bool batch_first;
  Tensor in_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false);
  // query [B, L, E] (batch_first) or [L, B, E]; key/value likewise with S.
  void reset_parameters() override;
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& key_padding_mask = Tensor(), const Tensor& attn_mask = Tensor(),
                 bool is_causal = false);
  Tensor forward(const Tensor& x) override { return forward(x, x, x); }  // self-attention
  std::string extra_repr() const override;
};

// Post-LN (norm_first=false, PyTorch's default) or pre-LN encoder layer, with
// PyTorch's submodule names (self_attn, linear1, linear2, norm1, norm2, ...).
struct TransformerEncoderLayer : Module {
  bool norm_first;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  ModulePtr activation;
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward = 2048, double dropout = 0.1,
                          const std::string& activation = "relu", double layer_norm_eps = 1e-5,
                          bool batch_first = false, bool norm_first = false);
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
};

// GPT-style causal self-attention over [B, T, C] with one fused QKV
// projection (c_attn) and an output projection (c_proj): nanoGPT's names.
struct CausalSelfAttention : Module {
  int64_t n_embd, n_head;
  double dropout;
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> resid_dropout;
  CausalSelfAttention(int64_t n_embd, int64_t n_head, bool bias = true, double dropout = 0.0);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

// c_fc -> GELU -> c_proj -> dropout.
struct GPTMLP : Module {
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<GELU> gelu;
  std::shared_ptr<Dropout> dropout;
  GPTMLP(int64_t n_embd, bool bias = true, double dropout = 0.0);
  Tensor forward(const Tensor& x) override;
};

// Pre-LN decoder block: x + attn(ln_1(x)), then x + mlp(ln_2(x)).
struct DecoderBlock : Module {
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<GPTMLP> mlp;
  DecoderBlock(int64_t n_embd, int64_t n_head, bool bias = true, double dropout = 0.0);
  Tensor forward(const Tensor& x) override;
};

}  // namespace tessera::nn
