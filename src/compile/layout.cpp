// Layout: convolutions hand each other their activations in oneDNN's
// channel-blocked layout ([N, C/b, H, W, b], nChw8c with AVX2) instead of
// NCHW. Each convolution otherwise reorders its input from NCHW and its
// output back (ResNet-18 at batch 32: 7% of its convolution time; the small
// CNN at batch 64: a third). A value stays blocked when a convolution makes it,
// or a max pooling of a blocked value, and only convolutions (as input or
// residual) and max poolings read it. A pooling of a blocked value pools the
// blocks and, if its readers need NCHW, converts its (smaller) output.
// Other readers see NCHW as before, so the graph's meaning and its outputs do
// not change. A residual whose layout differs from its block's output is
// converted (channel_blocks) where it is added, except a blocked one into an
// NCHW output: that sum runs blocked and its result is converted. The
// convolutions are asked for exactly these layouts (backend/cpu/conv.cpp), so
// the steady state runs no reorders but the conversions. Runs after fuse-epilogue, on
// graphs without autograd (fused_conv2d has no backward).
#include "ops/op_utils.h"
#include "tessera/ops/op_table.h"
#include "tessera/compile/passes.h"

#include <unordered_set>

namespace tessera::compile {
namespace {

using ops::OpId;

// The op a node runs as once its activations are blocked (a conv2d becomes a
// fused_conv2d) declares in ops.def that it reads and writes blocked tensors;
// verify() holds every pass to the same rule.
bool runs_blocked(OpId op) {
  return ops::op_entry(op == OpId::conv2d ? OpId::fused_conv2d : op).layout == ops::Layout::kBlocked;
}

bool is_conv(const Node* n) {
  if (!runs_blocked(n->op)) return false;
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

// An f32 NCHW max pooling (no indices) over channels a multiple of `b`.
bool is_pool(const Node* n, int64_t b) {
  if (!n || n->op != OpId::max_pool2d || !runs_blocked(n->op) || n->attrs.b("return_indices")) return false;
  if (n->attrs.has("channel_block") && n->attrs.i("channel_block") != 0) return false;
  const Value* x = n->inputs[0];
  return x && x->dtype == DType::F32 && x->shape.size() == 4 && x->shape[1].is_static() &&
         x->shape[1].static_value() % b == 0;
}

SymShape blocked_shape(const SymShape& s, int64_t b) {
  return {s[0], SymInt(s[1].static_value() / b), s[2], s[3], SymInt(b)};
}

}  // namespace

int block_conv_activations(Graph& g) {
  // Compiled graphs run on the CPU: its convolutions' preferred block.
  const int64_t b = backend::get(DeviceType::CPU).kernels->conv_activation_block();
  if (b == 0) return 0;
  auto uses = g.uses();
  auto is_out = g.is_output();
  // How u may read v blocked: as a convolution's input or residual, or as a
  // max pooling's input.
  auto blocked_read = [&](const Node* u, const Value* v) {
    if (is_pool(u, b)) return u->inputs[0] == v;
    if (!is_conv(u)) return false;
    bool as_input = u->inputs[0] == v && channels_divisible(u, 1, b);
    bool as_residual = residual_of(u) == v && channels_divisible(u, 0, b);
    bool elsewhere = u->inputs[1] == v || (u->inputs.size() > 2 && u->inputs[2] == v);
    return (as_input || as_residual) && !elsewhere && (u->inputs[0] != v || as_input);
  };
  // The values to keep blocked: made by a convolution, or by a max pooling of
  // a blocked value, and read only blocked. The largest such set: start with
  // every candidate and drop the ones that break a rule until none does.
  std::unordered_set<const Value*> blocked;
  for (Node* n : g.nodes()) {
    const Value* v = n->outputs[0];
    if ((channels_divisible(n, 0, b) || is_pool(n, b)) && !is_out[v->id] && !uses[v->id].empty()) blocked.insert(v);
  }
  auto keep = [&](const Value* v) {
    const Node* n = v->producer;
    if (is_pool(n, b) && !blocked.count(n->inputs[0])) return false;  // a pool runs blocked only on blocked input
    bool any_benefit = false;
    for (const Node* u : uses[v->id]) {
      if (!blocked_read(u, v)) return false;
      // Blocking a value read only as residuals of NCHW outputs would just
      // move its reorder into a conversion.
      any_benefit = any_benefit || u->inputs[0] == v || blocked.count(u->outputs[0]);
    }
    return any_benefit;
  };
  for (bool again = true; again;) {
    again = false;
    for (auto it = blocked.begin(); it != blocked.end();) {
      if (keep(*it)) {
        ++it;
      } else {
        it = blocked.erase(it);
        again = true;
      }
    }
  }
  if (blocked.empty()) return 0;

  int changes = 0;
  std::unordered_set<const Value*> now_blocked;  // the rewritten graph's blocked values
  auto convert = [&](Value* v, const SymShape& shape, Node* before, const Node* like) {
    Node* c = g.add_node(OpId::channel_blocks, {v}, ops::Attrs{{"block", b}}, {{v->dtype, shape}}, before);
    c->scope = like->scope;
    return c->outputs[0];
  };
  std::vector<Node*> order = g.nodes();
  std::unordered_set<const Node*> pools;  // before rewriting: their inputs' shapes change
  for (const Node* n : order)
    if (is_pool(n, b)) pools.insert(n);
  for (Node* n : order) {
    Value* out = n->outputs[0];
    bool in_b = !n->inputs.empty() && now_blocked.count(n->inputs[0]) > 0, out_b = blocked.count(out) > 0;
    if (pools.count(n)) {
      if (!in_b) continue;
      // Pools its input's blocks; converts back after it unless its readers take blocks.
      ops::Attrs attrs = n->attrs;
      attrs.set("channel_block", b);
      Node* f = g.add_node(OpId::max_pool2d, {n->inputs[0]}, attrs, {{out->dtype, blocked_shape(out->shape, b)}}, n);
      f->scope = n->scope;
      f->sym_attrs = n->sym_attrs;
      Value* r = f->outputs[0];
      if (out_b) {
        now_blocked.insert(r);
      } else {
        r = convert(r, out->shape, n, n);
      }
      g.replace_uses(out, r);
      ++changes;
      continue;
    }
    if (!is_conv(n)) continue;
    Value* residual = residual_of(n);
    bool res_b = residual && now_blocked.count(residual) > 0;
    if (!in_b && !out_b && !res_b) continue;
    // A blocked residual into an NCHW output (the last block's shortcut): the
    // sum runs blocked and only its result is converted, one reorder
    // instead of the residual's and the output's.
    const bool convert_after = res_b && !out_b;
    if (residual && res_b != out_b && !convert_after) {
      // The residual is added in the output's layout: convert it here (a
      // residual from elsewhere into a blocked block).
      residual = convert(residual, blocked_shape(residual->shape, b), n, n);
    }
    out_b = out_b || convert_after;
    ops::Attrs attrs = n->attrs;
    if (n->op == OpId::conv2d) attrs.set("activation", std::string("none"));
    attrs.set("input_block", in_b ? b : int64_t{0});
    attrs.set("output_block", out_b ? b : int64_t{0});
    Value* bias = n->inputs.size() > 2 ? n->inputs[2] : nullptr;
    Node* f = g.add_node(OpId::fused_conv2d, {n->inputs[0], n->inputs[1], bias, residual}, attrs,
                         {{out->dtype, out_b ? blocked_shape(out->shape, b) : out->shape}}, n);
    f->scope = n->scope;
    f->sym_attrs = n->sym_attrs;
    Value* r = f->outputs[0];
    if (convert_after) r = convert(r, out->shape, n, n);
    else if (out_b) now_blocked.insert(r);
    g.replace_uses(out, r);
    ++changes;
  }
  eliminate_dead_code(g);
  return changes;
}

int pack_constant_conv_weights(Graph& g) {
  int changes = 0;
  for (Node* n : g.nodes()) {
    bool conv = n->op == OpId::conv2d || n->op == OpId::fused_conv2d;
    // Parameters too: an inference graph retraces when one is updated in
    // place, and the packed copy follows the weights' version regardless.
    Value* w = n->inputs.size() >= 2 ? n->inputs[1] : nullptr;
    bool fixed = w && (w->kind == ValueKind::kConstant || w->kind == ValueKind::kParameter);
    if (!conv || !fixed || n->outputs[0]->dtype != DType::F32)
      continue;
    if (n->op == OpId::fused_conv2d) {
      if (n->attrs.has("constant_weights") && n->attrs.b("constant_weights")) continue;
      n->attrs.set("constant_weights", true);
      ++changes;
      continue;
    }
    ops::Attrs attrs = n->attrs;
    attrs.set("activation", std::string("none"));
    attrs.set("input_block", int64_t{0});
    attrs.set("output_block", int64_t{0});
    attrs.set("constant_weights", true);
    Value* out = n->outputs[0];
    Value* bias = n->inputs.size() > 2 ? n->inputs[2] : nullptr;
    Node* f = g.add_node(OpId::fused_conv2d, {n->inputs[0], n->inputs[1], bias, nullptr}, attrs,
                         {{out->dtype, out->shape}}, n);
    f->scope = n->scope;
    f->sym_attrs = n->sym_attrs;
    g.replace_uses(out, f->outputs[0]);
    ++changes;
  }
  if (changes) eliminate_dead_code(g);
  return changes;
}

int pack_constant_linear_weights(Graph& g) {
  int changes = 0;
  for (Node* n : g.nodes()) {
    if (n->op != OpId::linear && n->op != OpId::fused_linear) continue;
    const Value* x = n->inputs[0];
    Value* w = n->inputs[1];
    Value* out = n->outputs[0];
    bool fixed = w->kind == ValueKind::kConstant || w->kind == ValueKind::kParameter;
    if (!fixed || w->shape.size() != 2 || x->shape.size() < 2 || out->dtype != DType::F32 || w->dtype != DType::F32)
      continue;
    if (n->attrs.has("constant_weights") && n->attrs.b("constant_weights")) continue;
    if (n->op == OpId::fused_linear) {
      n->attrs.set("constant_weights", true);
      ++changes;
      continue;
    }
    Value* bias = n->inputs.size() > 2 ? n->inputs[2] : nullptr;
    Node* f = g.add_node(OpId::fused_linear, {n->inputs[0], w, bias, nullptr},
                         ops::Attrs{{"activation", std::string("none")}, {"constant_weights", true}},
                         {{out->dtype, out->shape}}, n);
    f->scope = n->scope;
    g.replace_uses(out, f->outputs[0]);
    ++changes;
  }
  if (changes) eliminate_dead_code(g);
  return changes;
}

}  // namespace tessera::compile
