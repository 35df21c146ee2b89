// Layout: convolutions hand each other their activations in oneDNN's
// channel-blocked layout ([N, C/b, H, W, b], nChw8c with AVX2) instead of
// NCHW. Each convolution otherwise reorders its input from NCHW and its
// output back (ResNet-18 at batch 32: 7% of its convolution time). A value
// stays blocked when a convolution makes it and only convolutions read it
// (as input or residual); other readers see NCHW as before, so the graph's
// meaning and its outputs do not change. A residual whose layout differs
// from its block's output is converted (channel_blocks) where it is added. Runs after fuse-epilogue, on
// graphs without autograd (fused_conv2d has no backward).
#include "backend/cpu/conv.h"
#include "ops/op_utils.h"
#include "tessera/compile/passes.h"

#include <unordered_set>

namespace tessera::compile {
namespace {

using ops::OpId;

bool is_conv(const Node* n) {
  if (n->op == OpId::conv2d) return true;
  return n->op == OpId::fused_conv2d && n->attrs.i("input_block") == 0 && n->attrs.i("output_block") == 0;
}

// weight dimension `dim` (0: output channels, 1: input channels) is a
// static multiple of `b`, for an f32 ungrouped convolution.
bool channels_divisible(const Node* n, int dim, int64_t b) {
  if (!is_conv(n)) return false;
  const Value* w = n->inputs[1];
  if (n->outputs[0]->dtype != DType::F32 || n->attrs.i("groups") != 1 || !w || w->shape.size() != 4)
    return false;
  return w->shape[dim].is_static() && w->shape[dim].static_value() % b == 0;
}

Value* residual_of(const Node* n) { return n->inputs.size() > 3 ? n->inputs[3] : nullptr; }

SymShape blocked_shape(const SymShape& s, int64_t b) {
  return {s[0], SymInt(s[1].static_value() / b), s[2], s[3], SymInt(b)};
}

}  // namespace

int block_conv_activations(Graph& g) {
  const int64_t b = cpu::conv_activation_block();
  if (b == 0) return 0;
  auto uses = g.uses();
  auto is_out = g.is_output();
  // The values to keep blocked: a convolution's output read only by
  // convolutions, as their input or as their residual.
  std::unordered_set<const Value*> blocked;
  for (Node* n : g.nodes()) {
    const Value* v = n->outputs[0];
    if (!channels_divisible(n, 0, b) || is_out[v->id] || uses[v->id].empty()) continue;
    bool ok = true;
    for (const Node* u : uses[v->id]) {
      if (!is_conv(u)) {
        ok = false;
        break;
      }
      bool as_input = u->inputs[0] == v && channels_divisible(u, 1, b);
      bool as_residual = residual_of(u) == v && channels_divisible(u, 0, b);
      bool elsewhere = u->inputs[1] == v || (u->inputs.size() > 2 && u->inputs[2] == v);
      ok = ok && (as_input || as_residual) && !elsewhere && (u->inputs[0] != v || as_input);
    }
    if (ok) blocked.insert(v);
  }
  // Blocking a value read only as residuals of NCHW outputs would just move
  // its reorder into a conversion: leave those NCHW.
  for (bool again = true; again;) {
    again = false;
    for (auto it = blocked.begin(); it != blocked.end();) {
      bool only_nchw_residual = true;
      for (const Node* u : uses[(*it)->id])
        only_nchw_residual = only_nchw_residual && u->inputs[0] != *it && !blocked.count(u->outputs[0]);
      if (only_nchw_residual) {
        it = blocked.erase(it);
        again = true;
      } else {
        ++it;
      }
    }
  }
  if (blocked.empty()) return 0;

  int changes = 0;
  std::unordered_set<const Value*> now_blocked;  // the rewritten graph's blocked values
  std::vector<Node*> order = g.nodes();
  for (Node* n : order) {
    if (!is_conv(n)) continue;
    Value* out = n->outputs[0];
    Value* residual = residual_of(n);
    bool in_b = now_blocked.count(n->inputs[0]) > 0, out_b = blocked.count(out) > 0;
    bool res_b = residual && now_blocked.count(residual) > 0;
    if (!in_b && !out_b && !res_b) continue;
    if (residual && res_b != out_b) {
      // The residual is added in the output's layout: convert it here (a
      // residual from elsewhere into a blocked block, or the last block's
      // shortcut back to NCHW).
      SymShape shape = out_b ? blocked_shape(residual->shape, b) : out->shape;
      Node* c = g.add_node(OpId::channel_blocks, {residual}, ops::Attrs{{"block", b}}, {{residual->dtype, shape}}, n);
      c->scope = n->scope;
      residual = c->outputs[0];
    }
    ops::Attrs attrs = n->attrs;
    if (n->op == OpId::conv2d) attrs.set("activation", std::string("none"));
    attrs.set("input_block", in_b ? b : int64_t{0});
    attrs.set("output_block", out_b ? b : int64_t{0});
    Value* bias = n->inputs.size() > 2 ? n->inputs[2] : nullptr;
    Node* f = g.add_node(OpId::fused_conv2d, {n->inputs[0], n->inputs[1], bias, residual}, attrs,
                         {{out->dtype, out_b ? blocked_shape(out->shape, b) : out->shape}}, n);
    f->scope = n->scope;
    f->sym_attrs = n->sym_attrs;
    g.replace_uses(out, f->outputs[0]);
    if (out_b) now_blocked.insert(f->outputs[0]);
    ++changes;
  }
  eliminate_dead_code(g);
  return changes;
}

}  // namespace tessera::compile
