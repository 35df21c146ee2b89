// Epilogue fusion: a product followed by its activation and/or a residual add
// becomes one node whose primitive applies both before storing (oneDNN
// post-ops): the product's output is written once instead of being read back
// by each pointwise op.
//   linear -> act -> add(residual)   =>  fused_linear   (a transformer MLP)
//   conv2d -> add(residual) -> act   =>  fused_conv2d   (a ResNet block's tail)
// The orders are the ones the primitives apply (linear's post-ops: eltwise
// then binary add; conv's: sum then eltwise).
#include "ops/op_utils.h"
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

}  // namespace

int fuse_epilogues(Graph& g) {
  int changes = 0;
  for (bool again = true; again;) {
    again = false;
    auto uses = g.uses();
    auto is_out = g.is_output();
    for (Node* n : g.nodes()) {
      if (n->op == OpId::conv2d && fuse_conv(g, n, uses, is_out)) {
        ++changes;
        again = true;
        break;  // uses changed
      }
      if (n->op != OpId::linear) continue;
      Value* y = n->outputs[0];
      const Value* w = n->inputs[1];
      if (y->dtype != DType::F32 || w->shape.size() != 2 || y->shape.size() < 2) continue;
      Node* last = n;
      std::string act = "none";
      if (Node* u = only_user(y, uses, is_out); u && u->inputs.size() == 1 && !activation_of(u).empty()) {
        act = activation_of(u);
        last = u;
      }
      Value* residual = nullptr;
      if (Node* u = residual_add(last->outputs[0], residual, uses, is_out)) last = u;
      if (last == n) continue;
      // At `last`'s place: every input (x, weight, bias defined before n, the
      // residual read by `last`) exists there.
      Node* f = g.add_node(OpId::fused_linear, {n->inputs[0], n->inputs[1], n->inputs[2], residual},
                           ops::Attrs{{"activation", act}}, {{last->outputs[0]->dtype, last->outputs[0]->shape}}, last);
      f->scope = n->scope;
      g.replace_uses(last->outputs[0], f->outputs[0]);
      ++changes;
      again = true;
      break;  // uses changed
    }
    if (again) eliminate_dead_code(g);
  }
  return changes;
}

}  // namespace tessera::compile
