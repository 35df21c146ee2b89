#include "tessera/nn/attention.h"

#include <cmath>

#include "tessera/nn/init.h"
#include "tessera/ops/ops.h"

namespace tessera::nn {

MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, double dropout, bool bias, bool batch_first)
    : Module("MultiheadAttention"), embed_dim(e), num_heads(h), dropout(dropout), batch_first(batch_first) {
  TS_CHECK(e > 0 && h > 0 && e % h == 0, "MultiheadAttention: embed_dim=", e, " must be divisible by num_heads=", h);
  TS_CHECK(dropout >= 0 && dropout < 1, "MultiheadAttention: dropout must be in [0, 1), got ", dropout);
  in_proj_weight = register_parameter("in_proj_weight", empty({3 * e, e}));
  init::xavier_uniform_(in_proj_weight);
  if (bias) in_proj_bias = register_parameter("in_proj_bias", zeros({3 * e}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(e, e, bias));
  if (bias) init::zeros_(out_proj->bias);
}

// After out_proj's own reset (children first): the constructor's draws in
// another order, so a materialized MultiheadAttention is initialized like a
// built one but not bit for bit.
void MultiheadAttention::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

// Folds key_padding_mask, attn_mask and causality into one mask for the
// attention op: boolean (true = attend) when every given mask is boolean,
// additive float otherwise. Returns an undefined tensor when there is none.
static Tensor combine_masks(const Tensor& kpm, const Tensor& attn_mask, bool causal, int64_t B, int64_t H, int64_t L,
                            int64_t S, DType dt) {
  TensorList allowed;   // boolean, true = attend, each broadcastable to [B, H, L, S]
  TensorList additive;  // float
  if (kpm.defined()) {
    TS_CHECK(kpm.dim() == 2 && kpm.size(0) == B && kpm.size(1) == S, "MultiheadAttention: key_padding_mask must be [",
             B, ", ", S, "] (batch, source length), got ", shape_str(kpm.shape()));
    Tensor m = kpm.view({B, 1, 1, S});
    if (kpm.dtype() == DType::Bool)
      allowed.push_back(ops::logical_not(m));
    else
      additive.push_back(m.to(dt));
  }
  if (attn_mask.defined()) {
    Tensor m;
    if (attn_mask.dim() == 2) {
      TS_CHECK(attn_mask.size(0) == L && attn_mask.size(1) == S, "MultiheadAttention: a 2-D attn_mask must be [", L,
               ", ", S, "], got ", shape_str(attn_mask.shape()));
      m = attn_mask;
    } else {
      TS_CHECK(attn_mask.dim() == 3 && attn_mask.size(0) == B * H && attn_mask.size(1) == L && attn_mask.size(2) == S,
               "MultiheadAttention: attn_mask must be [", L, ", ", S, "] or [", B * H, ", ", L, ", ", S, "], got ",
               shape_str(attn_mask.shape()));
      m = attn_mask.view({B, H, L, S});
    }
    if (attn_mask.dtype() == DType::Bool)
      allowed.push_back(ops::logical_not(m));  // PyTorch's MHA: true = not allowed
    else
      additive.push_back(m.to(dt));
  }
  if (causal && (!allowed.empty() || !additive.empty()))
    allowed.push_back(ops::tril(ones({L, S}, DType::Bool)));
  if (allowed.empty() && additive.empty()) return Tensor();
  Tensor ok;
  for (auto& a : allowed) ok = ok.defined() ? ops::logical_and(ok, a) : a;
  if (additive.empty()) return ok;
  Tensor add;
  for (auto& a : additive) add = add.defined() ? ops::add(add, a) : a;
  if (ok.defined()) add = ops::masked_fill(add.expand(broadcast_shapes(add.shape(), ok.shape(), "mask")),
                                           ops::logical_not(ok), -INFINITY);
  return add;
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& key_padding_mask, const Tensor& attn_mask, bool is_causal) {
  trace::ScopeGuard scope = trace_scope();
  for (const Tensor* t : {&query, &key, &value})
    TS_CHECK(t->dim() == 3 && t->size(2) == embed_dim, "MultiheadAttention: expected 3-D inputs ",
             batch_first ? "[batch, seq, " : "[seq, batch, ", embed_dim, "], got ", shape_str(t->shape()));
  Tensor q = batch_first ? query : query.transpose(0, 1);
  Tensor k = batch_first ? key : key.transpose(0, 1);
  Tensor v = batch_first ? value : value.transpose(0, 1);
  const int64_t B = q.size(0), L = q.size(1), S = k.size(1), E = embed_dim, H = num_heads, D = E / H;
  TS_CHECK(k.size(0) == B && v.size(0) == B && v.size(1) == S, "MultiheadAttention: query ",
           shape_str(query.shape()), ", key ", shape_str(key.shape()), " and value ", shape_str(value.shape()),
           " do not agree on batch and source length");
  if (query.impl() == key.impl() && key.impl() == value.impl()) {  // self-attention: one projection
    TensorList qkv = ops::chunk(ops::linear(q, in_proj_weight, in_proj_bias), 3, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    TensorList w = ops::chunk(in_proj_weight, 3, 0);
    TensorList b = in_proj_bias.defined() ? ops::chunk(in_proj_bias, 3, 0) : TensorList(3);
    q = ops::linear(q, w[0], b[0]);
    k = ops::linear(k, w[1], b[1]);
    v = ops::linear(v, w[2], b[2]);
  }
  auto heads = [&](const Tensor& t, int64_t len) { return t.reshape({B, len, H, D}).transpose(1, 2); };
  Tensor mask = combine_masks(key_padding_mask, attn_mask, is_causal, B, H, L, S, q.dtype());
  bool causal_only = is_causal && !mask.defined();
  Tensor o = ops::scaled_dot_product_attention(heads(q, L), heads(k, S), heads(v, S), mask,
                                               training_ ? dropout : 0.0, causal_only);
  o = (*out_proj)(o.transpose(1, 2).reshape({B, L, E}));
  return batch_first ? o : o.transpose(0, 1);
}

std::string MultiheadAttention::extra_repr() const {
  return detail::str("embed_dim=", embed_dim, ", num_heads=", num_heads, ", dropout=", dropout,
             ", batch_first=", batch_first ? "True" : "False");
}

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d, int64_t nhead, int64_t ff, double p,
                                                 const std::string& act, double eps, bool batch_first, bool nf)
    : Module("TransformerEncoderLayer"), norm_first(nf) {
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(d, nhead, p, true, batch_first));
  linear1 = register_module("linear1", std::make_shared<Linear>(d, ff));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
  linear2 = register_module("linear2", std::make_shared<Linear>(ff, d));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(IntArrayRef{d}, eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(IntArrayRef{d}, eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(p));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(p));
  TS_CHECK(act == "relu" || act == "gelu", "TransformerEncoderLayer: activation must be 'relu' or 'gelu', got '",
           act, "'");
  activation = make_activation(act);  // not registered: PyTorch keeps it as a plain attribute
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& kpm,
                                        bool is_causal) {
  trace::ScopeGuard scope = trace_scope();
  auto sa = [&](const Tensor& x) { return (*dropout1)(self_attn->forward(x, x, x, kpm, src_mask, is_causal)); };
  auto ff = [&](const Tensor& x) { return (*dropout2)((*linear2)((*dropout)((*activation)((*linear1)(x))))); };
  Tensor x = src;
  if (norm_first) {
    x = ops::add(x, sa((*norm1)(x)));
    return ops::add(x, ff((*norm2)(x)));
  }
  x = (*norm1)(ops::add(x, sa(x)));
  return (*norm2)(ops::add(x, ff(x)));
}

CausalSelfAttention::CausalSelfAttention(int64_t n_embd, int64_t n_head, bool bias, double p)
    : Module("CausalSelfAttention"), n_embd(n_embd), n_head(n_head), dropout(p) {
  TS_CHECK(n_embd > 0 && n_head > 0 && n_embd % n_head == 0, "CausalSelfAttention: n_embd=", n_embd,
           " must be divisible by n_head=", n_head);
  c_attn = register_module("c_attn", std::make_shared<Linear>(n_embd, 3 * n_embd, bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(n_embd, n_embd, bias));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(p));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  TS_CHECK(x.dim() == 3 && x.size(2) == n_embd, "CausalSelfAttention: expected [batch, seq, ", n_embd, "], got ",
           shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), D = n_embd / n_head;
  TensorList qkv = ops::split((*c_attn)(x), n_embd, 2);
  auto heads = [&](const Tensor& t) { return t.view({B, T, n_head, D}).transpose(1, 2); };
  Tensor y = ops::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), Tensor(),
                                               training_ ? dropout : 0.0, true);
  return (*resid_dropout)((*c_proj)(y.transpose(1, 2).reshape({B, T, n_embd})));
}

std::string CausalSelfAttention::extra_repr() const { return detail::str("n_embd=", n_embd, ", n_head=", n_head); }

GPTMLP::GPTMLP(int64_t n_embd, bool bias, double p) : Module("MLP") {
  c_fc = register_module("c_fc", std::make_shared<Linear>(n_embd, 4 * n_embd, bias));
  gelu = register_module("gelu", std::make_shared<GELU>());
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * n_embd, n_embd, bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
}

Tensor GPTMLP::forward(const Tensor& x) { return (*dropout)((*c_proj)((*gelu)((*c_fc)(x)))); }

DecoderBlock::DecoderBlock(int64_t n_embd, int64_t n_head, bool bias, double p) : Module("DecoderBlock") {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(IntArrayRef{n_embd}, 1e-5, true, bias));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(n_embd, n_head, bias, p));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(IntArrayRef{n_embd}, 1e-5, true, bias));
  mlp = register_module("mlp", std::make_shared<GPTMLP>(n_embd, bias, p));
}

Tensor DecoderBlock::forward(const Tensor& x) {
  Tensor h = ops::add(x, (*attn)((*ln_1)(x)));
  return ops::add(h, (*mlp)((*ln_2)(h)));
}

}  // namespace tessera::nn
