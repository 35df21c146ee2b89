// Epilogue fusion: linear followed by its activation and/or a residual add
// becomes one fused_linear node, whose GEMM applies both before storing
// (oneDNN post-ops): the product's output is written once instead of being
// read back by each pointwise op.
#include "ops/op_utils.h"
#include "tessera/compile/passes.h"

namespace tessera::compile {
namespace {

using ops::OpId;

// The fused_linear activation name of a unary node, or "" if it has none.
std::string activation_of(const Node* n) {
  switch (n->op) {
    case OpId::relu: return "relu";
    case OpId::silu: return "silu";
    case OpId::tanh: return "tanh";
    case OpId::gelu: return n->attrs.s("approximate") == "tanh" ? "gelu_tanh" : "gelu";
    default: return "";
  }
}

bool same_type(const Value* a, const Value* b) { return a->dtype == b->dtype && a->shape == b->shape; }

// The single node reading `v`, if v is read once and is not a graph output.
Node* only_user(const Value* v, const std::vector<std::vector<Node*>>& uses, const std::vector<bool>& is_out) {
  return !is_out[v->id] && uses[v->id].size() == 1 ? uses[v->id][0] : nullptr;
}

}  // namespace

int fuse_epilogues(Graph& g) {
  int changes = 0;
  for (bool again = true; again;) {
    again = false;
    auto uses = g.uses();
    auto is_out = g.is_output();
    for (Node* n : g.nodes()) {
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
      Value* cur = last->outputs[0];
      if (Node* u = only_user(cur, uses, is_out);
          u && u->op == OpId::add && u->attrs.scalar("alpha").to_double() == 1.0 && u->inputs.size() == 2) {
        Value* other = u->inputs[0] == cur ? u->inputs[1] : u->inputs[0];
        if (other && other != cur && same_type(other, cur) && same_type(u->outputs[0], cur)) {
          residual = other;
          last = u;
        }
      }
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
