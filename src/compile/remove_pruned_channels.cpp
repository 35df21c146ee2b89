// Removing pruned channels: an output channel of a convolution or linear
// layer whose weights and bias are all zero (a filter structured pruning
// removed, Note [Pruning masks]) outputs exactly 0, and stays 0 through ReLU,
// pooling and dropout; the next layer multiplies it by its weights and adds
// nothing. So the channel leaves both layers: the producer computes fewer
// outputs and the consumer reads fewer inputs, and the graph computes the
// same values (the sums lose only zero terms). Pruned weights (weight_orig *
// weight_mask in the graph) become constants first.
//
//   conv2d/linear -> [relu | max_pool2d | avg_pool2d | dropout]* -> conv2d
//   conv2d -> ...* -> reshape [N, C, H, W] -> [N, C*H*W] -> linear
//   linear -> ...* -> linear
#include "ops/op_utils.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/compile/passes.h"
#include "tessera/ops/op_table.h"

namespace tessera::compile {
namespace {

using ops::OpId;

bool frozen(const Value* v) { return !v || v->kind == ValueKind::kParameter || v->kind == ValueKind::kConstant; }

Shape static_shape_of(const Value* v) {
  Shape s;
  for (const SymInt& d : v->shape) s.push_back(d.is_static() ? d.static_value() : -1);
  return s;
}

// Ops that map a zero channel to a zero channel and keep channels apart
// (ops.def's kKeepsZeroChannels), on NCHW tensors (not channel-blocked).
bool keeps_zero_channels(const Node* n) {
  if (!ops::op_entry(n->op).has(ops::kKeepsZeroChannels)) return false;
  return !n->attrs.has("channel_block") || n->attrs.i("channel_block") == 0;
}

// The output channels of a layer that are exactly zero: weight row and bias 0.
std::vector<int64_t> kept_channels(const Value* w, const Value* b) {
  Tensor wf = w->data.to(DType::F64).contiguous();
  Tensor bf = b ? b->data.to(DType::F64).contiguous() : Tensor();
  const int64_t oc = wf.size(0), per = wf.numel() / std::max<int64_t>(oc, 1);
  if (b && bf.numel() != oc) return {};  // not a bias of this layer (a graph from a file): leave the layer alone
  const double* p = wf.data_ptr<double>();
  std::vector<int64_t> keep;
  for (int64_t c = 0; c < oc; ++c) {
    bool zero = !b || bf.data_ptr<double>()[c] == 0.0;
    for (int64_t j = 0; zero && j < per; ++j) zero = p[c * per + j] == 0.0;
    if (!zero) keep.push_back(c);
  }
  return keep;
}

// A chain from a layer's output to the layer that reads it.
struct Chain {
  std::vector<Node*> through;   // ops the channels pass through (a flatten last, if any)
  Node* consumer = nullptr;     // conv2d or linear
  int64_t block = 1;            // consumer input features per channel (H*W after a flatten)
};

bool find_chain(Value* v, const std::vector<std::vector<Node*>>& uses, const std::vector<bool>& is_out, Chain& c) {
  for (;;) {
    if (is_out[v->id] || uses[v->id].size() != 1) return false;
    Node* u = uses[v->id][0];
    if (u->inputs.empty() || u->inputs[0] != v) return false;
    if (keeps_zero_channels(u) && v->shape.size() >= 2) {
      c.through.push_back(u);
      v = u->outputs[0];
      continue;
    }
    if (u->op == OpId::conv2d && u->attrs.i("groups") == 1 && frozen(u->inputs[1]) && v->shape.size() == 4) {
      c.consumer = u;
      return true;
    }
    if (u->op == OpId::linear && frozen(u->inputs[1]) && v->shape.size() == 2) {
      c.consumer = u;
      return true;
    }
    // A flatten of a static [N, C, H, W] into a linear layer.
    if (u->op == OpId::reshape && v->shape.size() == 4 && u->outputs[0]->shape.size() == 2) {
      const SymShape &in = v->shape, &out = u->outputs[0]->shape;
      if (!in[1].is_static() || !in[2].is_static() || !in[3].is_static() || !out[1].is_static() || !(in[0] == out[0]))
        return false;
      const int64_t hw = in[2].static_value() * in[3].static_value();
      if (out[1].static_value() != in[1].static_value() * hw) return false;
      c.through.push_back(u);
      c.block = hw;
      v = u->outputs[0];
      if (is_out[v->id] || uses[v->id].size() != 1) return false;
      Node* l = uses[v->id][0];
      if (l->op != OpId::linear || l->inputs[0] != v || !frozen(l->inputs[1])) return false;
      c.consumer = l;
      return true;
    }
    return false;
  }
}

// A pruned layer's weight (and bias) is computed in the graph as
// mul(orig, mask) of two parameters; for an inference graph that product is
// a constant. Returns how many were made constants.
int fold_masked_weights(Graph& g) {
  int n = 0;
  for (Node* l : g.nodes()) {
    if (l->op != OpId::conv2d && l->op != OpId::linear && l->op != OpId::conv1d) continue;
    for (size_t i = 1; i < l->inputs.size() && i < 3; ++i) {
      Value* v = l->inputs[i];
      if (!v || v->kind != ValueKind::kNode || v->producer->op != OpId::mul) continue;
      Node* m = v->producer;
      if (m->inputs.size() != 2 || !frozen(m->inputs[0]) || !frozen(m->inputs[1]) || !m->inputs[0] || !m->inputs[1])
        continue;
      Tensor t = ops::mul(m->inputs[0]->data, m->inputs[1]->data).contiguous();
      if (!IntArrayRef(t.shape()).equals(static_shape_of(v)) || t.dtype() != v->dtype) continue;
      g.replace_uses(v, g.add_constant(t));
      ++n;
    }
  }
  return n;
}

}  // namespace

int remove_pruned_channels(Graph& g) {
  NoGradGuard no_grad;
  int changes = fold_masked_weights(g);
  auto uses = g.uses();
  auto is_out = g.is_output();
  for (Node* p : g.nodes()) {
    // A layer whose zero output channels can be cut (kChannelProducer): ungrouped.
    if (!ops::op_entry(p->op).has(ops::kChannelProducer) || (p->attrs.has("groups") && p->attrs.i("groups") != 1))
      continue;
    const bool lin = p->op == OpId::linear, conv = !lin;
    Value *w = p->inputs[1], *b = p->inputs.size() > 2 ? p->inputs[2] : nullptr;
    if (!frozen(w) || !frozen(b) || !w || w->dtype != DType::F32 || w->shape.size() != (conv ? 4u : 2u)) continue;
    std::vector<int64_t> keep = kept_channels(w, b);
    const int64_t oc = w->data.size(0), k = static_cast<int64_t>(keep.size());
    if (k == oc || k == 0) continue;  // nothing pruned; or everything (the layer is constant 0: left alone)
    Chain c;
    if (!find_chain(p->outputs[0], uses, is_out, c)) continue;
    const int ch = lin ? static_cast<int>(p->outputs[0]->shape.size()) - 1 : 1;
    // Every value on the chain carries the channels at `ch` (declared shapes come from files).
    bool fits = ch >= 0 && static_cast<int>(p->outputs[0]->shape.size()) > ch;
    for (Node* t : c.through) fits = fits && static_cast<int>(t->outputs[0]->shape.size()) > std::max(ch, 1);
    if (!fits) continue;
    Tensor idx = tensor(keep);
    p->inputs[1] = g.add_constant(ops::index_select(w->data, 0, idx).contiguous());
    if (b) p->inputs[2] = g.add_constant(ops::index_select(b->data, 0, idx).contiguous());
    p->outputs[0]->shape[ch] = SymInt(k);
    for (Node* t : c.through) {
      Value* o = t->outputs[0];
      if (t->op == OpId::reshape) {
        o->shape[1] = SymInt(k * c.block);
        std::vector<int64_t> s = t->attrs.ints("shape");
        if (s.size() == 2 && s[1] != -1) s[1] = k * c.block;
        t->attrs.set("shape", s);
        for (Node::SymAttr& a : t->sym_attrs)
          if (a.name == "shape" && a.values.size() == 2) a.values[1] = SymInt(k * c.block);
      } else {
        o->shape[ch] = SymInt(k);
      }
    }
    // The consumer reads only the kept channels' inputs.
    Value* cw = c.consumer->inputs[1];
    std::vector<int64_t> cols;
    for (int64_t ch_i : keep)
      for (int64_t j = 0; j < c.block; ++j) cols.push_back(ch_i * c.block + j);
    c.consumer->inputs[1] = g.add_constant(ops::index_select(cw->data, 1, tensor(cols)).contiguous());
    ++changes;
    uses = g.uses();
    is_out = g.is_output();
  }
  if (changes) eliminate_dead_code(g);
  return changes;
}

}  // namespace tessera::compile
