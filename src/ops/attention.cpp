// scaled_dot_product_attention: a fused, memory-efficient kernel (see
// the backend's attention entries) with the explicit matmul-softmax-matmul as its
// composite fallback for create_graph and as its test reference.
#include <cmath>

#include "ops/autocast_policy.h"
#include "ops/op_utils.h"

namespace tessera::ops {
namespace {

Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                           double scale, const Tensor& keep_mask, double keep) {
  Tensor attn = mul(matmul(q, k.mT()), scale);
  int64_t L = q.shape()[q.dim() - 2], S = k.shape()[k.dim() - 2];
  if (causal) attn = masked_fill(attn, triu(ones({L, S}, DType::Bool), 1), -INFINITY);
  if (mask.defined()) attn = add(attn, mask);
  Tensor p = softmax(attn, -1);
  if (keep_mask.defined()) p = div(mul(p, keep_mask), keep);
  return matmul(p, v);
}

// t [..., r, c] broadcast to [batch..., r, c] and flattened to [bh, r, c] in dtype ct.
Tensor flatten_batch(const Tensor& t, const Shape& batch, int64_t r, int64_t c, DType ct) {
  Shape s = batch;
  s.push_back(r);
  s.push_back(c);
  return t.to(ct).expand(s).reshape({numel_of(batch), r, c});
}

// The checked operands and one run of the fused forward kernel.
struct AttentionRun {
  backend::AttentionParams a;
  Shape batch;  // the broadcast batch dimensions
  DType ct;     // the compute dtype (f32, or f64)
  Tensor qf, kf, vf, mflat, out, lse;
};

// With run = false the operands are checked and prepared but the kernel does
// not run (out and lse stay undefined).
AttentionRun attention_forward(const char* name, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& attn_mask, double dropout_p, bool is_causal, std::optional<double> scale_opt,
                               Generator* gen, bool run = true) {
  check_defined(q, name, "query");
  check_defined(k, name, "key");
  check_defined(v, name, "value");
  TS_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, name,
           ": query, key and value need at least 2 dimensions, got shapes ", shape_str(q.shape()), ", ",
           shape_str(k.shape()), ", ", shape_str(v.shape()));
  check_floating(q, name, "query");
  TS_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), name, ": query, key and value must share a dtype, got ",
           dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), ", ", dtype_name(v.dtype()));
  int64_t L = q.shape()[q.dim() - 2], E = q.shape().back();
  int64_t S = k.shape()[k.dim() - 2], Ev = v.shape().back();
  TS_CHECK(k.shape().back() == E, name, ": key's last dimension ", k.shape().back(), " must equal query's ", E);
  TS_CHECK(v.shape()[v.dim() - 2] == S, name, ": value has ", v.shape()[v.dim() - 2], " positions but key has ", S);
  TS_CHECK(dropout_p >= 0 && dropout_p < 1, name, ": dropout_p must be in [0, 1), got ", dropout_p);
  TS_CHECK(!(is_causal && attn_mask.defined()), name, ": pass either attn_mask or is_causal=true, not both");
  AttentionRun r;
  double scale = scale_opt.value_or(1.0 / std::sqrt(static_cast<double>(E)));
  r.batch = broadcast_shapes(Shape(q.shape().begin(), q.shape().end() - 2),
                             Shape(k.shape().begin(), k.shape().end() - 2), name);
  r.batch = broadcast_shapes(r.batch, Shape(v.shape().begin(), v.shape().end() - 2), name);
  int64_t BH = numel_of(r.batch);
  Shape ls = r.batch;
  ls.push_back(L);
  ls.push_back(S);
  r.ct = q.dtype() == DType::F64 ? DType::F64 : DType::F32;
  r.qf = flatten_batch(q.detach(), r.batch, L, E, r.ct);
  r.kf = flatten_batch(k.detach(), r.batch, S, E, r.ct);
  r.vf = flatten_batch(v.detach(), r.batch, S, Ev, r.ct);
  backend::AttentionParams& a = r.a;
  a.bh = BH; a.L = L; a.S = S; a.E = E; a.Ev = Ev;
  if (attn_mask.defined()) {
    // additive, broadcast to [batch..., L, S]
    Tensor m = attn_mask.dtype() == DType::Bool
                   ? where(attn_mask, scalar_tensor(0.0, r.ct), scalar_tensor(-INFINITY, r.ct))
                   : attn_mask.detach().to(r.ct);
    r.mflat = m.expand(ls).reshape({BH, L, S});
  }
  a.causal = is_causal;
  a.scale = scale;
  a.dropout_p = dropout_p;
  a.f64 = r.ct == DType::F64;
  if (dropout_p > 0) {
    Generator& g = gen ? *gen : default_generator();
    a.seed = g.seed();
    a.offset = g.reserve(backend::attention_rng_blocks(a));
  }
  if (!run) return r;
  r.out = empty({BH, L, Ev}, r.ct), r.lse = empty({BH, L}, r.ct);
  // Two products (q k^T, p v) of 2 flops per multiply-add.
  trace::add_flops(2 * a.bh * a.L * a.S * (a.E + a.Ev));
  backend::kernels(r.out).attention_fwd(a, r.qf, r.kf, r.vf, r.mflat, r.out, r.lse);
  return r;
}

// {dq, dk, dv} in the shapes of q, k, v (summed over broadcast dimensions)
// from the forward's operands, output and log-sum-exp.
TensorList attention_grads(backend::AttentionParams b, const Shape& batch, DType ct, const Tensor& q, const Tensor& k,
                           const Tensor& v, const Tensor& mflat, const Tensor& out, const Tensor& lse,
                           const Tensor& grad) {
  Tensor qf = flatten_batch(q, batch, b.L, b.E, ct);
  Tensor kf = flatten_batch(k, batch, b.S, b.E, ct);
  Tensor vf = flatten_batch(v, batch, b.S, b.Ev, ct);
  Tensor dout = grad.to(ct).contiguous();
  Tensor dq = empty({b.bh, b.L, b.E}, ct), dk = empty({b.bh, b.S, b.E}, ct), dv = empty({b.bh, b.S, b.Ev}, ct);
  // Recomputes q k^T, then dv, dp, dq, dk: four more products.
  trace::add_flops(2 * b.bh * b.L * b.S * (2 * b.E + 2 * b.Ev + b.E));
  backend::kernels(dq).attention_bwd(b, qf, kf, vf, mflat, dout, out, lse, dq, dk, dv);
  auto back = [&](const Tensor& g, int64_t r, int64_t c, const Tensor& like) {
    Shape s = batch;
    s.push_back(r);
    s.push_back(c);
    return sum_to(g.view(s), like.shape()).to(q.dtype());
  };
  return {back(dq, b.L, b.E, q), back(dk, b.S, b.E, k), back(dv, b.S, b.Ev, v)};
}

// The gradients through attention_composite (create_graph: differentiable
// again), with the forward's mask flattened to [bh, L, S] and its dropout.
TensorList composite_grads(const backend::AttentionParams& a, const Shape& batch, DType ct, const Tensor& q, const Tensor& k,
                           const Tensor& v, const Tensor& mflat, const VjpArgs& va) {
  Shape s = batch;
  s.push_back(a.L);
  s.push_back(a.S);
  Tensor keep_mask;
  if (a.dropout_p > 0) {
    Tensor km = empty({a.bh, a.L, a.S}, ct);
    backend::kernels(km).attention_keep_mask(a, km);
    keep_mask = km.view(s).to(q.dtype());
  }
  Tensor mask = mflat.defined() ? mflat.view(s).to(q.dtype()) : Tensor();
  const bool causal = a.causal;
  const double scale = a.scale, keep = 1.0 - a.dropout_p;
  return composite_vjp([&](const TensorList& in) {
    return attention_composite(in[0], in[1], in[2], mask, causal, scale, keep_mask, keep);
  }, {q, k, v}, va.needs(), va.grads[0]);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale_opt, Generator* gen) {
  TS_OP_SCOPE(scaled_dot_product_attention, &q, &k, &v, &attn_mask);
  TS_OP_ATTRS({"dropout_p", dropout_p}, {"is_causal", is_causal}, {"scale", scale_opt});
  ts_op_scope_.check_generator(gen, "scaled_dot_product_attention");
  TS_AUTOCAST(scaled_dot_product_attention, [&](const auto& cast) { return scaled_dot_product_attention(cast(q), cast(k), cast(v), cast(attn_mask), dropout_p, is_causal, scale_opt, gen); });
  const bool grad = autograd::any_requires_grad({&q, &k, &v});
  // Without dropout the backward reads the forward's output and log-sum-exp,
  // as graph values when a training step is captured (Note [Training captures]).
  if (grad && dropout_p == 0) TS_RETURN(attention_with_lse(q, k, v, attn_mask, is_causal, scale_opt)[0]);
  const char* name = "scaled_dot_product_attention";
  AttentionRun r = attention_forward(name, q, k, v, attn_mask, dropout_p, is_causal, scale_opt, gen);
  const backend::AttentionParams& a = r.a;
  Shape os = r.batch;
  os.push_back(a.L);
  os.push_back(a.Ev);
  Tensor y = r.out.view(os).to(q.dtype());
  if (grad) {
    TensorList outs{y};
    Shape batch = r.batch;
    DType ct = r.ct;
    autograd::record(name, {q, k, v}, outs, [a, batch, ct](const VjpArgs& va) -> TensorList {
      const Tensor& q = va.saved[0];
      const Tensor& k = va.saved[1];
      const Tensor& v = va.saved[2];
      const Tensor& mflat = va.saved[5];
      if (GradMode::is_enabled()) return composite_grads(a, batch, ct, q, k, v, mflat, va);
      TS_CHECK(!recorder(), "scaled_dot_product_attention: attention dropout cannot be captured into a training "
               "graph (its mask is drawn inside the kernel); use dropout_p=0 or run it eagerly");
      return attention_grads(a, batch, ct, q, k, v, mflat, va.saved[3], va.saved[4], va.grads[0]);
    }, {0, 1, 2}, {}, {r.out, r.lse, r.mflat});
  }
  TS_RETURN(y);
}

TensorList attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                              bool is_causal, std::optional<double> scale_opt) {
  TS_OP_SCOPE(attention_with_lse, &q, &k, &v, &attn_mask);
  TS_OP_ATTRS({"is_causal", is_causal}, {"scale", scale_opt});
  const char* name = "attention_with_lse";
  AttentionRun r = attention_forward(name, q, k, v, attn_mask, 0.0, is_causal, scale_opt, nullptr);
  Shape os = r.batch, ls = r.batch;
  os.push_back(r.a.L);
  os.push_back(r.a.Ev);
  ls.push_back(r.a.L);
  Tensor y = r.out.view(os).to(q.dtype()), lse = r.lse.view(ls);
  if (autograd::any_requires_grad({&q, &k, &v})) {
    TensorList outs{y};
    autograd::record(name, {q, k, v}, outs, [a = r.a, batch = r.batch, ct = r.ct](const VjpArgs& va) -> TensorList {
      const Tensor& q = va.saved[0];
      const Tensor& k = va.saved[1];
      const Tensor& v = va.saved[2];
      if (GradMode::is_enabled()) return composite_grads(a, batch, ct, q, k, v, va.saved[5], va);
      const Tensor& mask = va.saved[6];
      return attention_backward(va.grads[0], q, k, v, mask, a.causal, a.scale, va.saved[3], va.saved[4]);
    }, {0, 1, 2}, {0}, {lse, r.mflat, attn_mask});
  }
  TS_RETURN((TensorList{y, lse}));
}

TensorList attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& attn_mask, bool is_causal, std::optional<double> scale, const Tensor& out,
                              const Tensor& lse) {
  TS_OP_SCOPE(attention_backward, &grad, &q, &k, &v, &attn_mask, &out, &lse);
  TS_OP_ATTRS({"is_causal", is_causal}, {"scale", scale});
  const char* name = "attention_backward";
  check_defined(grad, name, "grad");
  TS_CHECK(out.defined() == lse.defined(), name, ": pass the forward's out and lse together, or neither");
  const bool given = out.defined();
  AttentionRun r = attention_forward(name, q, k, v, attn_mask, 0.0, is_causal, scale, nullptr, !given);
  Shape os = r.batch, ls = r.batch;
  os.push_back(r.a.L);
  os.push_back(r.a.Ev);
  ls.push_back(r.a.L);
  TS_CHECK(IntArrayRef(grad.shape()).equals(os), name, ": grad has shape ", shape_str(grad.shape()),
           " but the attention's output has shape ", shape_str(os));
  if (given) {
    TS_CHECK(IntArrayRef(out.shape()).equals(os), name, ": out has shape ", shape_str(out.shape()),
             " but the attention's output has shape ", shape_str(os));
    TS_CHECK(IntArrayRef(lse.shape()).equals(ls) && lse.dtype() == r.ct, name, ": lse must be the forward's ",
             dtype_name(r.ct), " log-sum-exp of shape ", shape_str(ls), ", got ", dtype_name(lse.dtype()), " ",
             shape_str(lse.shape()));
    r.out = out.detach().to(r.ct).reshape({r.a.bh, r.a.L, r.a.Ev}).contiguous();
    r.lse = lse.detach().reshape({r.a.bh, r.a.L}).contiguous();
  }
  TS_RETURN(attention_grads(r.a, r.batch, r.ct, q.detach(), k.detach(), v.detach(), r.mflat, r.out, r.lse,
                            grad.detach()));
}

// ---- invokers (graph nodes run ops through these) ----
TS_OP_INVOKER(attention_backward) {
  auto opt = [&](size_t i) { return i < in.size() ? in[i] : Tensor(); };
  return attention_backward(in[0], in[1], in[2], in[3], opt(4), a.b("is_causal"), a.opt_f("scale"), opt(5), opt(6));
}
TS_OP_INVOKER(attention_with_lse) {
  return attention_with_lse(in[0], in[1], in[2], in.size() > 3 ? in[3] : Tensor(), a.b("is_causal"), a.opt_f("scale"));
}
TS_OP_INVOKER(scaled_dot_product_attention) {
  return {scaled_dot_product_attention(in[0], in[1], in[2], in[3], a.f("dropout_p"), a.b("is_causal"),
                                       a.opt_f("scale"))};
}

}  // namespace tessera::ops
