// Attention fusion: attention written out op by op, as ONNX files carry it
// (Tessera's own export included: ONNX 17 has no attention op) and as a
// model may spell it by hand,
//   s = q @ k^T  [* scale | / d]  [where(mask, s, -inf) | + mask]
//   y = softmax(s, dim=-1) @ v
// becomes one scaled_dot_product_attention node: the fused kernel never
// writes the [L, S] score matrix, and q @ k^T on heads viewed out of
// [T, H, d] no longer goes through a strided batched GEMM (oneDNN ran that
// one at a tenth of its speed on plain matrices). A lower-triangular boolean
// mask of ones becomes is_causal, which also skips the masked blocks.
#include <cmath>
#include <optional>

#include "compile/pattern.h"
#include "ops/op_utils.h"
#include "tessera/compile/passes.h"

namespace tessera::compile {
namespace {

using ops::OpId;

int64_t rank(const Value* v) { return static_cast<int64_t>(v->shape.size()); }
bool same_shape(const Value* a, const Value* b) { return a->dtype == b->dtype && a->shape == b->shape; }
int64_t norm_dim(int64_t d, int64_t r) { return d < 0 ? d + r : d; }

// k for kT = k^T: the input of a transpose of the last two dims, or of a
// permute whose last two entries, swapped, leave the rest in place (then k
// is that permute with the swap undone, added before `at`).
Value* untransposed(Graph& g, Value* kt, Node* at) {
  if (kt->kind != ValueKind::kNode) return nullptr;
  Node* p = kt->producer;
  const int64_t r = rank(kt);
  if (r < 2) return nullptr;
  if (p->op == OpId::transpose) {
    int64_t a = norm_dim(p->attrs.i("dim0"), r), b = norm_dim(p->attrs.i("dim1"), r);
    return std::min(a, b) == r - 2 && std::max(a, b) == r - 1 ? p->inputs[0] : nullptr;
  }
  if (p->op != OpId::permute) return nullptr;
  std::vector<int64_t> dims = p->attrs.ints("dims");
  if (static_cast<int64_t>(dims.size()) != r) return nullptr;
  for (int64_t& d : dims) d = norm_dim(d, r);
  std::swap(dims[r - 1], dims[r - 2]);
  bool identity = true;
  for (int64_t i = 0; i < r; ++i) identity = identity && dims[i] == i;
  Value* x = p->inputs[0];
  if (identity) return x;
  SymShape shape(r);
  for (int64_t i = 0; i < r; ++i) shape[i] = x->shape[dims[i]];
  Node* k = g.add_node(OpId::permute, {x}, ops::Attrs{{"dims", dims}}, {{x->dtype, shape}}, at);
  k->scope = p->scope;
  return k->outputs[0];
}

// Whether `mask` is the lower-triangular [L, L] boolean matrix of ones:
// tril(full(true)) as captured or imported, or that matrix as a constant.
bool is_causal_mask(const Value* mask, const SymInt& L, const SymInt& S) {
  if (mask->dtype != DType::Bool || rank(mask) != 2 || !(L == S)) return false;
  if (!(mask->shape[0] == L) || !(mask->shape[1] == S)) return false;
  if (mask->kind == ValueKind::kConstant && mask->data.defined() && L.is_static()) {
    Tensor m = mask->data.contiguous();
    const bool* p = m.data_ptr<bool>();
    const int64_t n = L.static_value();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        if (p[i * n + j] != (j <= i)) return false;
    return true;
  }
  if (mask->kind != ValueKind::kNode || mask->producer->op != OpId::tril) return false;
  const Node* t = mask->producer;
  if (t->attrs.i("diagonal") != 0) return false;
  const Value* ones = t->inputs[0];
  if (ones->kind != ValueKind::kNode || ones->producer->op != OpId::full) return false;
  // Its shape may be symbolic (a dynamic sequence length); its value is not.
  const Node* f = ones->producer;
  for (const Node::SymAttr& sa : f->sym_attrs)
    if (sa.name != "shape") return false;
  return f->attrs.scalar("value").to_double() == 1.0;
}

// Rewrites the attention ending in `out` (y = p @ v); returns whether it did.
bool fuse_one(Graph& g, Node* out, const Uses& u, bool inference) {
  Value* v = out->inputs[1];
  Node* sm = single_use_producer(out->inputs[0], OpId::softmax, u);
  if (!sm || out->outputs[0]->dtype != DType::F32 || v->dtype != DType::F32) return false;
  Value* s = sm->inputs[0];
  const int64_t r = rank(s);
  if (r < 2 || norm_dim(sm->attrs.i("dim"), r) != r - 1) return false;

  // Walk back from the softmax's input: an optional mask, then an optional scale.
  Value* mask = nullptr;
  bool causal = false;
  if (Node* w = single_use_producer(s, OpId::where, u)) {
    // Only -inf: a finite stand-in (-1e9) gives fully masked rows a uniform
    // softmax where the fused kernel gives NaN.
    std::optional<double> fill = scalar_of(w->inputs[2], inference);
    if (!fill || !std::isinf(*fill) || *fill > 0 || !same_shape(w->inputs[1], s)) return false;
    mask = w->inputs[0];
    s = w->inputs[1];
  } else if (Node* a = single_use_producer(s, OpId::add, u); a && a->attrs.scalar("alpha").to_double() == 1.0) {
    // Either operand may be the scores: the one a matmul (maybe scaled) made.
    auto scores_like = [&](const Value* x) {
      return x->kind == ValueKind::kNode &&
             (x->producer->op == OpId::matmul || x->producer->op == OpId::mul || x->producer->op == OpId::div);
    };
    int si = scores_like(a->inputs[0]) ? 0 : scores_like(a->inputs[1]) ? 1 : -1;
    if (si < 0 || !is_floating(a->inputs[1 - si]->dtype) || !same_shape(a->inputs[si], s)) return false;
    mask = a->inputs[1 - si];
    s = a->inputs[si];
  }
  double scale = 1.0;
  if (Node* m = single_use_producer(s, OpId::mul, u)) {
    int ci = scalar_of(m->inputs[1], inference) ? 1 : scalar_of(m->inputs[0], inference) ? 0 : -1;
    if (ci < 0 || !same_shape(m->inputs[1 - ci], s)) return false;
    scale = *scalar_of(m->inputs[ci], inference);
    s = m->inputs[1 - ci];
  } else if (Node* d = single_use_producer(s, OpId::div, u)) {
    std::optional<double> c = scalar_of(d->inputs[1], inference);
    if (!c || *c == 0 || !d->attrs.s("rounding_mode").empty() || !same_shape(d->inputs[0], s)) return false;
    scale = 1.0 / *c;
    s = d->inputs[0];
  }
  Node* qk = single_use_producer(s, OpId::matmul, u);
  if (!qk) return false;
  Value* q = qk->inputs[0];
  // q scaled before the product (PyTorch's exported multi-head attention).
  if (Node* m = single_use_producer(q, OpId::mul, u)) {
    int ci = scalar_of(m->inputs[1], inference) ? 1 : scalar_of(m->inputs[0], inference) ? 0 : -1;
    if (ci >= 0 && same_shape(m->inputs[1 - ci], q)) {
      scale *= *scalar_of(m->inputs[ci], inference);
      q = m->inputs[1 - ci];
    }
  } else if (Node* d = single_use_producer(q, OpId::div, u)) {
    std::optional<double> c = scalar_of(d->inputs[1], inference);
    if (c && *c != 0 && d->attrs.s("rounding_mode").empty() && same_shape(d->inputs[0], q)) {
      scale /= *c;
      q = d->inputs[0];
    }
  }
  if (q->dtype != DType::F32 || rank(q) != r || rank(qk->inputs[1]) != r || rank(v) != r) return false;
  // q [..., L, E], k^T [..., E, S], v [..., S, Ev], with the same batch dims.
  for (int64_t i = 0; i + 2 < r; ++i)
    if (!(q->shape[i] == qk->inputs[1]->shape[i]) || !(q->shape[i] == v->shape[i])) return false;
  const SymInt &L = q->shape[r - 2], &S = qk->inputs[1]->shape[r - 1];
  if (!(v->shape[r - 2] == S)) return false;
  if (mask && mask->dtype == DType::Bool) causal = is_causal_mask(mask, L, S);
  if (mask && !causal && mask->dtype != DType::Bool) {
    // An additive mask must be in the scores' type and broadcast into them.
    if (mask->dtype != DType::F32 || rank(mask) > r) return false;
  }
  Value* k = untransposed(g, qk->inputs[1], out);
  if (!k) return false;
  ops::Attrs attrs{{"dropout_p", 0.0}, {"is_causal", causal}, {"scale", std::optional<double>(scale)}};
  Node* f = g.add_node(OpId::scaled_dot_product_attention, {q, k, v, causal ? nullptr : mask}, attrs,
                       {{out->outputs[0]->dtype, out->outputs[0]->shape}}, out);
  f->scope = out->scope;
  g.replace_uses(out->outputs[0], f->outputs[0]);
  return true;
}

}  // namespace

int fuse_attention(Graph& g, bool inference) {
  return rewrite_until_done(g, [&](Node* n, const Uses& u) { return n->op == OpId::matmul && fuse_one(g, n, u, inference); });
}

}  // namespace tessera::compile
