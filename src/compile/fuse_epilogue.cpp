// Epilogue fusion: a product followed by its activation and/or a residual add
// becomes one node whose primitive applies both before storing (oneDNN
// post-ops): the product's output is written once instead of being read back
// by each pointwise op.
//   linear -> act -> add(residual)   =>  fused_linear   (a transformer MLP)
//   conv2d -> add(residual) -> act   =>  fused_conv2d   (a ResNet block's tail)
// The orders are the ones the primitives apply (linear's post-ops: eltwise
// then binary add; conv's: sum then eltwise).
#include "ops/op_utils.h"
#include "compile/pattern.h"
#include "tessera/compile/passes.h"
#include "tessera/ops/op_table.h"

namespace tessera::compile {
namespace {

using ops::OpId;

// The epilogue activation name of a unary node (ops.def's kEpilogueActivation:
// the op's name, gelu's tanh form "gelu_tanh"), or "" if it has none.
std::string activation_of(const Node* n) {
  if (!ops::op_entry(n->op).has(ops::kEpilogueActivation)) return "";
  if (n->op == OpId::gelu && n->attrs.s("approximate") == "tanh") return "gelu_tanh";
  return std::string(n->op_name());
}

bool same_type(const Value* a, const Value* b) { return a->dtype == b->dtype && a->shape == b->shape; }

// The single node reading `v`, if v is read once and is not a graph output.
Node* only_user(const Value* v, const std::vector<std::vector<Node*>>& uses, const std::vector<bool>& is_out) {
  return !is_out[v->id] && uses[v->id].size() == 1 ? uses[v->id][0] : nullptr;
}

// The add node reading `cur` once with a same-typed other operand (the
// residual), or nullptr.
Node* residual_add(Value* cur, Value*& residual, const std::vector<std::vector<Node*>>& uses,
                   const std::vector<bool>& is_out) {
  Node* u = only_user(cur, uses, is_out);
  if (!u || u->op != OpId::add || u->attrs.scalar("alpha").to_double() != 1.0 || u->inputs.size() != 2) return nullptr;
  Value* other = u->inputs[0] == cur ? u->inputs[1] : u->inputs[0];
  if (!other || other == cur || !same_type(other, cur) || !same_type(u->outputs[0], cur)) return nullptr;
  residual = other;
  return u;
}

// conv2d [-> add(residual)] [-> act] as fused_conv2d; returns whether it fused.
bool fuse_conv(Graph& g, Node* n, const std::vector<std::vector<Node*>>& uses, const std::vector<bool>& is_out) {
  Value* y = n->outputs[0];
  if (y->dtype != DType::F32) return false;
  Node* last = n;
  Value* residual = nullptr;
  if (Node* u = residual_add(y, residual, uses, is_out)) last = u;
  std::string act = "none";
  if (Node* u = only_user(last->outputs[0], uses, is_out); u && u->inputs.size() == 1 && !activation_of(u).empty()) {
    act = activation_of(u);
    last = u;
  }
  if (last == n) return false;
  ops::Attrs attrs = n->attrs;
  attrs.set("activation", act);
  attrs.set("input_block", int64_t{0});  // NCHW; the layout pass may block them
  attrs.set("output_block", int64_t{0});
  Node* f = g.add_node(OpId::fused_conv2d, {n->inputs[0], n->inputs[1], n->inputs[2], residual}, attrs,
                       {{last->outputs[0]->dtype, last->outputs[0]->shape}}, last);
  f->scope = n->scope;
  g.replace_uses(last->outputs[0], f->outputs[0]);
  return true;
}

// x @ W^T (+ bias) written as matmul(x, permute(W, [1, 0])) and an add, as
// ONNX carries a linear layer, or as matmul(x, B) with B a constant (the
// weight stored transposed, or folded so): the linear node itself, so that
// its activation fuses and (in inference graphs) its weights are packed once.
// W is a 2-D constant or parameter; bias a vector of W's rows.
bool matmul_as_linear(Graph& g, Node* n, const std::vector<std::vector<Node*>>& uses,
                      const std::vector<bool>& is_out) {
  Value* x = n->inputs[0];
  Value* wt = n->inputs[1];
  if (x->dtype != DType::F32 || x->shape.size() < 2 || wt->shape.size() != 2 || wt->dtype != DType::F32) return false;
  Value* w = nullptr;
  if (wt->kind == ValueKind::kConstant) {
    w = g.add_constant(wt->data.t().contiguous());  // [N, K], as linear keeps it
  } else if (wt->kind == ValueKind::kNode) {
    const Node* p = wt->producer;
    bool transposed = (p->op == OpId::permute && p->attrs.ints("dims") == std::vector<int64_t>{1, 0}) ||
                      (p->op == OpId::transpose && p->attrs.i("dim0") != p->attrs.i("dim1"));
    if (transposed && (p->inputs[0]->kind == ValueKind::kConstant || p->inputs[0]->kind == ValueKind::kParameter))
      w = p->inputs[0];
  }
  if (!w) return false;
  Node* last = n;
  Value* bias = nullptr;
  if (Node* u = only_user(n->outputs[0], uses, is_out);
      u && u->op == OpId::add && u->inputs.size() == 2 && u->attrs.scalar("alpha").to_double() == 1.0) {
    Value* b = u->inputs[0] == n->outputs[0] ? u->inputs[1] : u->inputs[0];
    bool vector = b != n->outputs[0] && b->dtype == DType::F32 && b->shape.size() == 1 && b->shape[0] == w->shape[0] &&
                  (b->kind == ValueKind::kConstant || b->kind == ValueKind::kParameter);
    if (vector && same_type(u->outputs[0], n->outputs[0])) {
      bias = b;
      last = u;
    }
  }
  Node* f = g.add_node(OpId::linear, {x, w, bias}, {}, {{last->outputs[0]->dtype, last->outputs[0]->shape}}, last);
  f->scope = n->scope;
  g.replace_uses(last->outputs[0], f->outputs[0]);
  return true;
}

// linear [-> act] [-> add(residual)] as fused_linear; returns whether it fused.
bool fuse_linear(Graph& g, Node* n, const std::vector<std::vector<Node*>>& uses, const std::vector<bool>& is_out) {
  Value* y = n->outputs[0];
  const Value* w = n->inputs[1];
  if (y->dtype != DType::F32 || w->shape.size() != 2 || y->shape.size() < 2) return false;
  Node* last = n;
  std::string act = "none";
  if (Node* u = only_user(y, uses, is_out); u && u->inputs.size() == 1 && !activation_of(u).empty()) {
    act = activation_of(u);
    last = u;
  }
  Value* residual = nullptr;
  if (Node* u = residual_add(last->outputs[0], residual, uses, is_out)) last = u;
  if (last == n) return false;
  // At `last`'s place: every input (x, weight, bias defined before n, the
  // residual read by `last`) exists there.
  Node* f = g.add_node(OpId::fused_linear, {n->inputs[0], n->inputs[1], n->inputs[2], residual},
                       ops::Attrs{{"activation", act}}, {{last->outputs[0]->dtype, last->outputs[0]->shape}}, last);
  f->scope = n->scope;
  g.replace_uses(last->outputs[0], f->outputs[0]);
  return true;
}

}  // namespace

int fuse_epilogues(Graph& g) {
  int changes = 0;
  {
    auto uses = g.uses();
    auto is_out = g.is_output();
    int made = 0;
    for (Node* n : g.nodes())
      if (n->op == OpId::matmul && matmul_as_linear(g, n, uses, is_out)) ++made;
    if (made) {
      eliminate_dead_code(g);
      changes += made;
    }
  }
  changes += rewrite_until_done(g, [&](Node* n, const Uses& u) {
    if (n->op == OpId::conv2d) return fuse_conv(g, n, u.of, u.is_out);
    return n->op == OpId::linear && fuse_linear(g, n, u.of, u.is_out);
  });
  return changes;
}

}  // namespace tessera::compile
