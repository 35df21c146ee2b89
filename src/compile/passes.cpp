// The pass pipeline and the clean-up passes: dead code, common
// subexpressions, constant folding, algebraic simplification.
#include "tessera/compile/passes.h"

#include <unordered_map>

#include "ops/op_utils.h"
#include "tessera/ops/op_table.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"

namespace tessera::compile {
namespace {

using ops::OpId;

// Randomness and side effects are declared in ops.def.
bool is_random(const Node& n) { return ops::is_random(n.op, n.attrs); }
bool has_side_effects(const Node& n) { return ops::has_side_effects(n.op, n.attrs); }

bool same_type(const Value* a, const Value* b) {
  return a->dtype == b->dtype && a->shape == b->shape && !a->data_dependent_shape && !b->data_dependent_shape;
}

// Replaces the single output of `n` by `v` when they agree in dtype and shape.
bool forward_to(Graph& g, Node* n, Value* v) {
  if (n->outputs.size() != 1 || !v || !same_type(n->outputs[0], v)) return false;
  g.replace_uses(n->outputs[0], v);
  return true;
}

std::string node_key(const Node& n) {
  std::string k = std::to_string(static_cast<int>(n.op)) + "(";
  for (const Value* v : n.inputs) k += (v ? std::to_string(v->id) : "-") + ",";
  for (const ops::Attr& a : n.attrs.items()) k += a.name + "=" + ops::attr_str(a.value) + ";";
  for (const Node::SymAttr& s : n.sym_attrs)
    for (const SymInt& x : s.values) k += s.name + ":" + x.str({}) + ";";
  return k;
}

bool is_wrapped_constant(const Value* v, double value) {
  return v && v->kind == ValueKind::kConstant && v->data.numel() == 1 && v->data.dim() == 0 &&
         v->data.item().to_double() == value;
}

}  // namespace

int eliminate_dead_code(Graph& g) {
  // Side-effecting nodes count as used: give them a fake use by keeping their
  // outputs alive through the graph's output list for the duration.
  std::vector<Value*> outs = g.outputs(), extended = outs;
  for (Node* n : g.nodes())
    if (has_side_effects(*n)) extended.push_back(n->outputs[0]);
  g.set_outputs(extended);
  int removed = g.remove_unused();
  g.set_outputs(outs);
  return removed;
}

int eliminate_common_subexpressions(Graph& g) {
  std::unordered_map<std::string, Node*> seen;
  int changes = 0;
  for (Node* n : g.nodes()) {
    if (is_random(*n) || has_side_effects(*n)) continue;
    auto [it, fresh] = seen.emplace(node_key(*n), n);
    if (fresh) continue;
    for (size_t i = 0; i < n->outputs.size(); ++i) g.replace_uses(n->outputs[i], it->second->outputs[i]);
    ++changes;
  }
  if (changes) eliminate_dead_code(g);
  return changes;
}

int fold_constants(Graph& g) {
  constexpr int64_t kMaxFoldedElements = int64_t{1} << 20;  // do not grow the graph's constants without bound
  int changes = 0;
  NoGradGuard no_grad;
  for (Node* n : g.nodes()) {
    if (is_random(*n) || has_side_effects(*n) || !n->sym_attrs.empty()) continue;
    bool all_const = true;
    for (const Value* v : n->inputs) all_const = all_const && (!v || v->kind == ValueKind::kConstant);
    if (!all_const) continue;
    bool small = true;
    for (const Value* v : n->outputs) {
      int64_t numel = 1;
      for (const SymInt& d : v->shape) numel = d.is_static() ? numel * d.static_value() : kMaxFoldedElements + 1;
      small = small && numel <= kMaxFoldedElements;
    }
    // A filled tensor (zeros to scatter gradients into) is cheaper to make
    // again than to keep resident; small ones (scalars, index ranges) fold.
    bool factory = ops::op_entry(n->op).has(ops::kFactory);
    for (const Value* v : n->outputs)
      if (factory && (!v->shape.empty() || n->op != OpId::full)) {
        int64_t numel = 1;
        for (const SymInt& d : v->shape) numel *= d.is_static() ? d.static_value() : 1 << 20;
        small = small && numel <= 1024;
      }
    if (!small) continue;
    TensorList args;
    for (const Value* v : n->inputs) args.push_back(v ? v->data : Tensor());
    TensorList outs = ops::invoke(n->op, args, n->attrs);
    // What the op computes must be what the graph declares (a graph from a file may lie).
    TS_CHECK(outs.size() == n->outputs.size(), "graph: node ", n->id, " (", n->op_name(), ") computes ", outs.size(),
             " outputs; the graph declares ", n->outputs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      // A view would alias another constant's storage; folded constants own theirs.
      Value* c = g.add_constant(outs[i].contiguous().clone());
      TS_CHECK(same_type(c, n->outputs[i]), "graph: node ", n->id, " (", n->op_name(), ") computes ",
               dtype_name(c->dtype), shape_str(outs[i].shape()), " for output ", i, "; the graph declares ",
               value_str(n->outputs[i]), " of another type or shape");
      g.replace_uses(n->outputs[i], c);
    }
    ++changes;
  }
  if (changes) eliminate_dead_code(g);
  return changes;
}

int simplify(Graph& g, bool no_autograd) {
  int changes = 0;
  auto producer_op = [](const Value* v, OpId op) -> Node* {
    return v && v->kind == ValueKind::kNode && v->producer->op == op ? v->producer : nullptr;
  };
  for (Node* n : g.nodes()) {
    Value* x = n->inputs.empty() ? nullptr : n->inputs[0];
    bool done = false;
    // A graph computes values: view and reshape agree, except that view
    // refuses a layout it cannot alias, which removing a contiguous() below
    // (or a different memory plan) may produce.
    if (n->op == OpId::view) {
      n->op = OpId::reshape;
      ++changes;
    }
    switch (n->op) {
      case OpId::detach:  // only values matter without autograd
        if (no_autograd) done = forward_to(g, n, x);
        break;
      case OpId::dropout:  // identity at inference or p == 0
        if (!n->attrs.b("training") || n->attrs.f("p") == 0) done = forward_to(g, n, x);
        break;
      case OpId::to_dtype:
      case OpId::contiguous:
      case OpId::clone:
        // Values, not memory layouts, are what a graph promises; in-place
        // updates are not captured, so a copy is never needed for aliasing.
        if (x && x->kind == ValueKind::kNode) done = forward_to(g, n, x);
        break;
      case OpId::reshape:
      case OpId::view:
      case OpId::expand:
        if (n->sym_attrs.empty() && forward_to(g, n, x)) {
          done = true;
        } else if (n->op != OpId::expand) {
          Node* p = producer_op(x, OpId::reshape);
          if (!p) p = producer_op(x, OpId::view);
          if (p) {  // reshape(reshape(y, s1), s2) == reshape(y, s2), maybe y itself
            n->op = OpId::reshape;
            n->inputs[0] = p->inputs[0];
            if (n->sym_attrs.empty()) forward_to(g, n, n->inputs[0]);
            done = true;
          }
        }
        break;
      case OpId::transpose:
        if (Node* p = producer_op(x, OpId::transpose)) {
          // Dims normalized to the rank (std::minmax would return references to temporaries).
          int64_t r = static_cast<int64_t>(x->shape.size());
          auto norm = [r](int64_t d) { return d < 0 ? d + r : d; };
          int64_t a0 = norm(n->attrs.i("dim0")), a1 = norm(n->attrs.i("dim1"));
          int64_t b0 = norm(p->attrs.i("dim0")), b1 = norm(p->attrs.i("dim1"));
          if (std::min(a0, a1) == std::min(b0, b1) && std::max(a0, a1) == std::max(b0, b1))
            done = forward_to(g, n, p->inputs[0]);
        }
        break;
      case OpId::permute:
        if (Node* p = producer_op(x, OpId::permute)) {
          const auto &outer = n->attrs.ints("dims"), &inner = p->attrs.ints("dims");
          if (outer.size() == inner.size()) {
            std::vector<int64_t> composed(outer.size());
            int64_t r = static_cast<int64_t>(outer.size());
            bool identity = true;
            for (size_t i = 0; i < outer.size(); ++i) {
              int64_t o = outer[i] < 0 ? outer[i] + r : outer[i];
              int64_t c = inner[o] < 0 ? inner[o] + r : inner[o];
              composed[i] = c;
              identity = identity && c == static_cast<int64_t>(i);
            }
            if (identity) {
              done = forward_to(g, n, p->inputs[0]);
            } else {
              n->inputs[0] = p->inputs[0];
              n->attrs.set("dims", composed);
              done = true;
            }
          }
        }
        break;
      case OpId::mul:  // x * 1, 1 * x
        if (is_wrapped_constant(n->inputs[1], 1.0)) done = forward_to(g, n, n->inputs[0]);
        else if (is_wrapped_constant(n->inputs[0], 1.0)) done = forward_to(g, n, n->inputs[1]);
        break;
      case OpId::add:  // x + 0
      case OpId::sub:
        if (is_wrapped_constant(n->inputs[1], 0.0)) done = forward_to(g, n, n->inputs[0]);
        break;
      case OpId::div:  // x / 1
        if (n->attrs.s("rounding_mode").empty() && is_wrapped_constant(n->inputs[1], 1.0))
          done = forward_to(g, n, n->inputs[0]);
        break;
      default: break;
    }
    changes += done;
  }
  if (changes) eliminate_dead_code(g);
  return changes;
}

const std::vector<Pass>& default_passes() {
  static const std::vector<Pass> passes = {
      {"simplify", "identity ops, transpose/permute/reshape chains, x*1, x+0",
       [](Graph& g, const PassOptions& o) { return simplify(g, o.no_autograd); }},
      {"fold-batch-norm", "conv/linear + batch_norm into new weights (inference graphs)",
       [](Graph& g, const PassOptions& o) { return o.inference ? fold_batch_norm(g) : 0; }},
      {"remove-pruned-channels", "output channels a layer computes as exactly 0 (structurally pruned filters) "
                                 "leave it and the layer that reads them (inference graphs)",
       [](Graph& g, const PassOptions& o) { return o.inference ? remove_pruned_channels(g) : 0; }},
      {"sparse-weights", "a linear layer whose constant weight has at most 5% nonzeros runs sparse_linear over it "
                         "in CSR form (inference graphs)",
       [](Graph& g, const PassOptions& o) { return o.inference ? sparse_weights(g) : 0; }},
      {"fold", "evaluates nodes whose inputs are all constants",
       [](Graph& g, const PassOptions&) { return fold_constants(g); }},
      {"cse", "merges nodes with the same op, inputs and attributes",
       [](Graph& g, const PassOptions&) { return eliminate_common_subexpressions(g); }},
      {"dce", "removes nodes whose outputs are unused",
       [](Graph& g, const PassOptions&) { return eliminate_dead_code(g); }},
      {"fuse-attention", "q @ k^T, scale, mask, softmax and @ v written out op by op (as ONNX carries attention) "
                         "become one scaled_dot_product_attention",
       [](Graph& g, const PassOptions& o) { return fuse_attention(g, o.inference); }},
      {"fuse-gelu", "GELU written out op by op (erf or tanh form, as ONNX before opset 20 carries it) becomes one gelu",
       [](Graph& g, const PassOptions& o) { return fuse_gelu(g, o.inference); }},
      {"fuse-epilogue", "linear/conv2d + activation / residual add become one fused_linear / fused_conv2d (graphs run without autograd)",
       [](Graph& g, const PassOptions& o) { return o.no_autograd ? fuse_epilogues(g) : 0; }},
      {"layout", "convolutions pass activations to each other channel-blocked, without reorders (graphs run without "
                 "autograd), and convolutions and linear layers read constant weights packed once (inference)",
       [](Graph& g, const PassOptions& o) {
         int n = o.no_autograd ? block_conv_activations(g) : 0;
         return n + (o.inference ? pack_constant_conv_weights(g) + pack_constant_linear_weights(g) : 0);
       }},
      {"fuse-elementwise", "groups of pointwise ops become one fused_elementwise kernel (graphs run without autograd)",
       [](Graph& g, const PassOptions& o) { return o.no_autograd ? fuse_elementwise(g) : 0; }},
  };
  return passes;
}

std::vector<PassReport> optimize(Graph& g, const PassOptions& opts) {
  const auto& passes = default_passes();
  for (const std::string& d : opts.disable) {
    bool known = std::any_of(passes.begin(), passes.end(), [&](const Pass& p) { return p.name == d; });
    if (!known) {
      std::string names;
      for (const Pass& p : passes) names += (names.empty() ? "" : ", ") + p.name;
      TS_ERROR("compile: unknown pass '", d, "' to disable; the passes are: ", names);
    }
  }
  std::vector<PassReport> report;
  verify(g, "capture");
  for (const Pass& p : passes) {
    if (std::find(opts.disable.begin(), opts.disable.end(), p.name) != opts.disable.end()) continue;
    int changes = p.run(g, opts);
    verify(g, p.name);
    report.push_back({p.name, changes, g.num_nodes()});
    g.renumber();
    if (opts.dump) *opts.dump << "// after " << p.name << " (" << changes << " changes)\n" << dump(g);
  }
  return report;
}

}  // namespace tessera::compile
