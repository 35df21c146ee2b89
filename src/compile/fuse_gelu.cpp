// GELU written out op by op, as ONNX files before opset 20 carry it
// (Tessera's own export and PyTorch's included),
//   0.5 * x * (1 + erf(x / sqrt 2))                          (exact)
//   0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))  (tanh)
// becomes one gelu node: one pass instead of five to nine, and a gelu after
// a linear layer then fuses into its GEMM's epilogue (fuse_epilogue.cpp).
// The products and sums may come in either operand order and the halving
// before or after the product with x; the constants must match to f32
// precision.
#include <cmath>
#include <optional>

#include "compile/pattern.h"
#include "ops/op_utils.h"
#include "tessera/compile/passes.h"

namespace tessera::compile {
namespace {

using ops::OpId;

bool near(std::optional<double> c, double want) { return c && std::abs(*c - want) <= 1e-6 * std::abs(want); }

// The operand of binary node n other than the scalar constant `want`, or null.
Value* other_than_scalar(const Node* n, double want, bool inference) {
  if (near(scalar_of(n->inputs[1], inference), want)) return n->inputs[0];
  if (near(scalar_of(n->inputs[0], inference), want)) return n->inputs[1];
  return nullptr;
}

// x for v = add(f(x), 1) where f is erf(x / sqrt 2) (tanh = false) or
// tanh(sqrt(2/pi) (x + 0.044715 x^3)) (tanh = true); each node read once.
Value* gelu_inner(const Value* v, bool tanh, const Uses& u, bool inference) {
  Node* add = single_use_producer(v, OpId::add, u);
  if (!add || add->attrs.scalar("alpha").to_double() != 1.0) return nullptr;
  Value* f = other_than_scalar(add, 1.0, inference);
  if (!tanh) {
    Node* erf = single_use_producer(f, OpId::erf, u);
    if (!erf) return nullptr;
    if (Node* m = single_use_producer(erf->inputs[0], OpId::mul, u)) return other_than_scalar(m, M_SQRT1_2, inference);
    Node* d = single_use_producer(erf->inputs[0], OpId::div, u);
    if (!d || !d->attrs.s("rounding_mode").empty() || !near(scalar_of(d->inputs[1], inference), M_SQRT2)) return nullptr;
    return d->inputs[0];
  }
  Node* th = single_use_producer(f, OpId::tanh, u);
  Node* scaled = th ? single_use_producer(th->inputs[0], OpId::mul, u) : nullptr;
  Value* inner = scaled ? other_than_scalar(scaled, std::sqrt(2.0 / M_PI), inference) : nullptr;
  Node* sum = single_use_producer(inner, OpId::add, u);
  if (!sum || sum->attrs.scalar("alpha").to_double() != 1.0) return nullptr;
  // x + 0.044715 x^3, either order; x^3 as pow(x, 3) or (x * x) * x.
  for (int xi : {0, 1}) {
    Value* x = sum->inputs[xi];
    Node* m = single_use_producer(sum->inputs[1 - xi], OpId::mul, u);
    Value* cube = m ? other_than_scalar(m, 0.044715, inference) : nullptr;
    if (!cube) continue;
    if (Node* p = single_use_producer(cube, OpId::pow, u)) {
      if (p->inputs[0] == x && p->inputs.size() == 2 && near(scalar_of(p->inputs[1], inference), 3.0)) return x;
      if (p->inputs[0] == x && p->inputs.size() == 1 && p->attrs.has("exponent") &&
          p->attrs.scalar("exponent").to_double() == 3.0)
        return x;
    }
    if (Node* c = single_use_producer(cube, OpId::mul, u)) {
      for (int s = 0; s < 2; ++s) {
        Node* sq = single_use_producer(c->inputs[s], OpId::mul, u);
        if (sq && c->inputs[1 - s] == x && sq->inputs[0] == x && sq->inputs[1] == x) return x;
      }
    }
  }
  return nullptr;
}

// Rewrites the GELU ending in `out` (a mul); returns whether it did.
bool fuse_one(Graph& g, Node* out, const Uses& u, bool inference) {
  for (bool tanh : {false, true}) {
    Value* x = nullptr;
    if (Value* p = other_than_scalar(out, 0.5, inference)) {
      // 0.5 * (x * inner), the product in either order.
      if (Node* m = single_use_producer(p, OpId::mul, u))
        for (int s = 0; s < 2 && !x; ++s)
          if (Value* xi = gelu_inner(m->inputs[s], tanh, u, inference); xi && xi == m->inputs[1 - s]) x = xi;
    }
    // (0.5 * x) * inner, either order.
    for (int s = 0; s < 2 && !x; ++s) {
      Node* half = single_use_producer(out->inputs[s], OpId::mul, u);
      Value* xh = half ? other_than_scalar(half, 0.5, inference) : nullptr;
      if (Value* xi = xh ? gelu_inner(out->inputs[1 - s], tanh, u, inference) : nullptr; xi && xi == xh) x = xi;
    }
    if (!x || !is_floating(x->dtype) || x->dtype != out->outputs[0]->dtype || !(x->shape == out->outputs[0]->shape))
      continue;
    Node* f = g.add_node(OpId::gelu, {x}, ops::Attrs{{"approximate", std::string(tanh ? "tanh" : "none")}},
                         {{x->dtype, x->shape}}, out);
    f->scope = out->scope;
    g.replace_uses(out->outputs[0], f->outputs[0]);
    return true;
  }
  return false;
}

}  // namespace

int fuse_gelu(Graph& g, bool inference) {
  return rewrite_until_done(g, [&](Node* n, const Uses& u) { return n->op == OpId::mul && fuse_one(g, n, u, inference); });
}

}  // namespace tessera::compile
