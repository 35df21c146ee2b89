#include "tessera/autograd/checkpoint.h"

#include <set>
#include <unordered_map>
#include <unordered_set>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"
#include "tessera/core/generator.h"
#include "tessera/core/trace.h"

namespace tessera::autograd {

namespace {
RecomputeContext& recompute_context() {
  static RecomputeContext context;  // set once, when the library loads (ops/autocast.cpp)
  return context;
}
}  // namespace

void set_recompute_context(RecomputeContext context) { recompute_context() = std::move(context); }

namespace {

// Note [Checkpoint boundary]
// The function runs once with grad recording, like any code, so that the
// graph it builds tells us where it reads tensors that need gradients: each
// edge from a node made inside the run to a node made before it (or to a
// leaf's accumulator) is a boundary edge. The checkpoint node takes over those
// edges, the outputs are re-pointed at it, and the inner graph (and with it
// every saved activation) is dropped. In backward the function runs again on
// detached copies of its inputs and autograd::grad() gives the gradient for
// each boundary tensor, which the engine routes along the boundary edges,
// so backward(), grad(), hooks and create_graph all work as for any node.
class CheckpointNode : public Node {
 public:
  TensorList apply(TensorList&& grads) override;
  const char* name() const override { return "checkpoint"; }
  void release_saved() override {
    released_ = true;
    inputs_.clear();
  }

  CheckpointFn fn;
  TensorList inputs_;               // the function's tensor inputs, as given
  std::vector<int> boundary_input;  // per edge: index into inputs_, or -1 for a leaf
  TensorList leaves;                // per edge: the leaf tensor when boundary_input is -1
  uint64_t rng_seed = 0, rng_offset = 0;
  std::function<std::shared_ptr<void>()> reenter;  // the registered context's state of the first run
  bool released_ = false;
};

TensorList CheckpointNode::apply(TensorList&& grads) {
  TS_CHECK(!released_, "autograd: trying to backward through a checkpoint a second time (its inputs were "
                       "already freed); pass retain_graph=true to the first backward call");
  // Recompute with the random state of the first run, on detached inputs;
  // when backward itself is recorded (create_graph) on the inputs themselves,
  // so the gradients stay functions of them (double backward).
  const bool higher_order = GradMode::is_enabled();
  TensorList detached;
  for (const Tensor& t : inputs_) {
    Tensor d = t.defined() && !higher_order ? t.detach() : t;
    if (d.defined() && t.requires_grad() && !higher_order) d.requires_grad_(true);
    detached.push_back(d);
  }
  Generator& gen = default_generator();
  uint64_t seed = gen.seed(), offset = gen.offset();
  gen.set_state(rng_seed, rng_offset);
  TensorList outs;
  try {
    EnableGradGuard grad;
    std::shared_ptr<void> context = reenter ? reenter() : nullptr;
    outs = fn(detached);
  } catch (...) {
    gen.set_state(seed, offset);
    throw;
  }
  gen.set_state(seed, offset);

  TensorList wrt;
  for (size_t e = 0; e < next_edges.size(); ++e)
    wrt.push_back(boundary_input[e] >= 0 ? detached[boundary_input[e]] : leaves[e]);
  TensorList roots, seeds;
  for (size_t i = 0; i < outs.size() && i < grads.size(); ++i)
    if (outs[i].defined() && outs[i].requires_grad()) {
      roots.push_back(outs[i]);
      seeds.push_back(grads[i]);
    }
  if (roots.empty() || wrt.empty()) return TensorList(next_edges.size());
  // A recorded backward refers back to the recomputed graph: keep it then.
  return grad(roots, wrt, seeds, higher_order, higher_order, true);
}

}  // namespace

TensorList checkpoint_flat(const CheckpointFn& fn, const TensorList& inputs) {
  if (!GradMode::is_enabled()) return fn(inputs);
  Generator& gen = default_generator();
  auto node = std::make_shared<CheckpointNode>();
  node->rng_seed = gen.seed();
  node->rng_offset = gen.offset();
  if (recompute_context().save) node->reenter = recompute_context().save();
  uint64_t first_inner = node->sequence_nr + 1;  // nodes made by fn come after this one

  TensorList outs;
  {
    std::shared_ptr<void> context = recompute_context().first_run ? recompute_context().first_run() : nullptr;
    outs = fn(inputs);
  }

  // Walk the inner graph and collect its boundary edges (Note [Checkpoint boundary]).
  std::unordered_map<const Node*, uint32_t> input_node;  // leaf accumulator or grad_fn -> input index
  std::vector<Edge> input_edges(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) input_edges[i] = gradient_edge(inputs[i]);
  auto inner = [&](const Node* n) { return n->sequence_nr >= first_inner && !dynamic_cast<const AccumulateGrad*>(n); };
  std::vector<const Node*> stack;
  std::unordered_set<const Node*> seen;
  bool any_grad = false;
  for (const Tensor& o : outs) {
    if (!o.defined() || !o.requires_grad()) continue;
    any_grad = true;
    Edge e = gradient_edge(o);
    if (e.valid() && inner(e.fn.get()) && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
  TS_CHECK(any_grad, "checkpoint: none of the function's outputs requires grad, so there is nothing to "
                     "recompute in backward; make sure an input or a parameter it uses requires grad, or "
                     "call the function without checkpoint");
  std::vector<std::pair<Edge, int>> boundary;  // edge, input index or -1
  TensorList leaves;
  auto key = [](const Edge& e) { return std::make_pair(e.fn.get(), e.input_nr); };
  std::set<std::pair<const Node*, uint32_t>> boundary_keys;
  // Outputs made outside the function (an input returned as is) are boundary
  // edges themselves.
  std::vector<Edge> direct;
  for (const Tensor& o : outs)
    if (o.defined() && o.requires_grad())
      if (Edge e = gradient_edge(o); e.valid() && !inner(e.fn.get())) direct.push_back(e);
  auto visit = [&](const std::vector<Edge>& edges) {
    for (const Edge& e : edges) {
      if (!e.valid()) continue;
      if (inner(e.fn.get())) {
        if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
        continue;
      }
      if (!boundary_keys.insert(key(e)).second) continue;
      int idx = -1;
      for (size_t i = 0; i < inputs.size(); ++i)
        if (input_edges[i].valid() && key(input_edges[i]) == key(e)) idx = static_cast<int>(i);
      if (idx < 0) {
        auto* acc = dynamic_cast<AccumulateGrad*>(e.fn.get());
        TS_CHECK(acc, "checkpoint: the function uses a tensor that requires grad, is not one of its inputs and "
                      "is not a leaf (it was computed by '", e.fn->name(), "' outside the function); pass it "
                      "as an argument so it can be recomputed in backward");
        leaves.resize(boundary.size() + 1);
        leaves.back() = acc->variable;
      } else {
        leaves.resize(boundary.size() + 1);
      }
      boundary.push_back({e, idx});
    }
  };
  visit(direct);
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    visit(n->next_edges);
  }
  node->fn = fn;
  node->inputs_ = inputs;
  for (auto& [e, idx] : boundary) {
    node->next_edges.push_back(e);
    node->boundary_input.push_back(idx);
  }
  node->leaves = std::move(leaves);
  node->leaves.resize(boundary.size());
  if (trace::active()) node->trace_path = trace::intern(trace::module_path());

  // Outputs become the checkpoint node's; the inner graph goes with `outs`.
  TensorList result;
  for (size_t i = 0; i < outs.size(); ++i) {
    Tensor r = outs[i].defined() ? outs[i].detach() : Tensor();
    if (r.defined()) {
      node->outputs.push_back({r.shape(), r.dtype(), r.device()});
      if (outs[i].requires_grad()) {
        auto& m = r.impl()->autograd_meta();
        m.requires_grad = true;
        m.grad_fn = node;
        m.output_nr = static_cast<uint32_t>(i);
      }
    } else {
      node->outputs.push_back({Shape{}, DType::F32});
    }
    result.push_back(r);
  }
  return result;
}

}  // namespace tessera::autograd
