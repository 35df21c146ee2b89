#include "tessera/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/trace.h"

namespace tessera::autograd {
namespace {

struct GraphTask {
  // Gradients waiting for each node, one slot per node output.
  std::unordered_map<Node*, TensorList> buffers;
  std::unordered_map<Node*, int> dependencies;
  // For grad(): which (node, slot) pairs to capture, and into which result.
  std::unordered_map<Node*, std::vector<std::pair<uint32_t, size_t>>> captures;
  std::unordered_set<Node*> needed;  // empty: run everything reachable
  TensorList captured;
  bool retain_graph = false;
  bool create_graph = false;
};

void accumulate(TensorList& slots, size_t slot, Tensor g) {
  if (!slots[slot].defined()) slots[slot] = std::move(g);
  else slots[slot] = slots[slot] + g;
}

// Counts, for every node reachable from the roots, how many edges lead into it.
void compute_dependencies(const std::vector<Node*>& roots, GraphTask& task) {
  std::vector<Node*> stack(roots.begin(), roots.end());
  std::unordered_set<Node*> seen(roots.begin(), roots.end());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      Node* child = e.fn.get();
      task.dependencies[child]++;
      if (seen.insert(child).second) stack.push_back(child);
    }
  }
}

// Marks nodes from which a captured node is reachable: only they need to run.
void compute_needed(const std::vector<Node*>& roots, GraphTask& task) {
  // Post-order DFS, iterative: a node is needed if it is captured or a child is needed.
  std::unordered_map<Node*, int> state;  // 0 new, 1 open, 2 done
  std::vector<std::pair<Node*, size_t>> stack;
  for (Node* r : roots) {
    if (state[r]) continue;
    stack.push_back({r, 0});
    state[r] = 1;
    while (!stack.empty()) {
      auto& [n, i] = stack.back();
      if (i < n->next_edges.size()) {
        Node* child = n->next_edges[i++].fn.get();
        if (child && state[child] == 0) {
          state[child] = 1;
          stack.push_back({child, 0});
        }
        continue;
      }
      bool need = task.captures.count(n) > 0;
      for (const Edge& e : n->next_edges)
        if (e.valid() && task.needed.count(e.fn.get())) need = true;
      if (need) task.needed.insert(n);
      state[n] = 2;
      stack.pop_back();
    }
  }
}

struct ByPriority {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    // Later nodes first: they were created last in the forward pass.
    return a->sequence_nr < b->sequence_nr;
  }
};

void run(const std::vector<Edge>& roots, TensorList root_grads, GraphTask& task, bool capture_mode) {
  std::vector<Node*> root_nodes;
  for (const Edge& e : roots) root_nodes.push_back(e.fn.get());
  compute_dependencies(root_nodes, task);
  if (capture_mode) compute_needed(root_nodes, task);

  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, ByPriority> ready;
  for (size_t i = 0; i < roots.size(); ++i) {
    Node* n = roots[i].fn.get();
    auto& buf = task.buffers[n];
    buf.resize(n->outputs.size());
    accumulate(buf, roots[i].input_nr, std::move(root_grads[i]));
  }
  {
    std::unordered_set<Node*> pushed;
    for (const Edge& e : roots)
      if (task.dependencies[e.fn.get()] == 0 && pushed.insert(e.fn.get()).second) ready.push(e.fn);
  }

  GradMode::set_enabled(task.create_graph);
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    TensorList grads = std::move(task.buffers[node.get()]);
    task.buffers.erase(node.get());
    grads.resize(node->outputs.size());

    // Hooks and retain_grad on the tensors this node produced.
    for (auto& [slot, hook] : node->pre_hooks) {
      if (!grads[slot].defined()) continue;
      Tensor r = hook(grads[slot]);
      if (r.defined()) grads[slot] = r;
    }
    for (auto& [slot, impl] : node->retained) {
      if (!grads[slot].defined()) continue;
      auto& m = impl->autograd_meta();
      Tensor g = task.create_graph ? grads[slot] : grads[slot].detach();
      if (!m.grad || !m.grad->defined()) m.grad = std::make_unique<Tensor>(g.clone());
      else *m.grad = *m.grad + g;
    }

    if (auto it = task.captures.find(node.get()); it != task.captures.end())
      for (auto [slot, idx] : it->second)
        if (grads[slot].defined()) task.captured[idx] = grads[slot];
    if (capture_mode) {
      bool child_needed = false;
      for (const Edge& e : node->next_edges)
        if (e.valid() && task.needed.count(e.fn.get())) child_needed = true;
      if (!child_needed) continue;
    }

    // A node's backward runs on its outputs' device (Note [An op's device]).
    DeviceScope on_device(node->outputs.empty() ? current_device() : node->outputs[0].device);
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined()) grads[i] = zeros(node->outputs[i].shape, {node->outputs[i].dtype, node->outputs[i].device});
    TensorList outs;
    {
      trace::ScopeGuard scope(node->name(), node->trace_path);
      if (trace::active()) {
        TensorList ins = grads;  // apply() consumes them
        outs = node->apply(std::move(grads));
        trace::op_outputs(node->name(), true, node->trace_path, ins.data(), static_cast<int>(ins.size()),
                          outs.data(), static_cast<int>(outs.size()));
      } else {
        outs = node->apply(std::move(grads));
      }
    }
    if (!task.retain_graph) {
      node->release_saved();
      node->retained.clear();
    }

    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      Node* child = e.fn.get();
      if (i < outs.size() && outs[i].defined()) {
        const TensorMeta& expect = child->outputs[e.input_nr];
        Tensor& g = outs[i];
        TS_CHECK(IntArrayRef(g.shape()).equals(expect.shape), "autograd: ", node->name(),
                 " returned a gradient of shape ", shape_str(g.shape()), " for an input of shape ",
                 shape_str(expect.shape));
        if (g.dtype() != expect.dtype) g = g.to(expect.dtype);
        auto& buf = task.buffers[child];
        if (buf.size() < child->outputs.size()) buf.resize(child->outputs.size());
        accumulate(buf, e.input_nr, std::move(g));
      }
      if (--task.dependencies[child] == 0) ready.push(e.fn);
    }
  }
}

// Validates outputs/grad_outputs and returns root edges and seed gradients.
void prepare_roots(const TensorList& outputs, const TensorList& grad_outputs, const char* api,
                   std::vector<Edge>& roots, TensorList& seeds) {
  TS_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), api, ": got ", outputs.size(),
           " outputs but ", grad_outputs.size(), " grad_outputs (expected one per output)");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    TS_CHECK(out.defined(), api, ": output ", i, " is undefined");
    TS_CHECK(out.requires_grad(), api, ": output ", i,
             " does not require grad and has no grad_fn (was it computed under NoGradGuard, or from "
             "tensors that do not require grad?)");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      TS_CHECK(out.numel() == 1, api, ": a gradient can be implicitly created only for a tensor with ",
               "one element, but output ", i, " has shape ", shape_str(out.shape()),
               "; pass the gradient explicitly");
      g = ones_like(out);
    } else {
      TS_CHECK(IntArrayRef(g.shape()).equals(out.shape()), api, ": grad_output ", i, " has shape ",
               shape_str(g.shape()), " but output ", i, " has shape ", shape_str(out.shape()));
      if (g.dtype() != out.dtype()) g = g.to(out.dtype());
    }
    roots.push_back(gradient_edge(out));
    seeds.push_back(g);
  }
}

// Note [End-of-backward callbacks]
// queue_callback() appends here; the outermost backward/grad on the thread runs
// the list when its graph is done. Nested calls (a checkpoint recomputing its
// segment inside backward) only count depth, so a hook that fires inside the
// recompute still has its callback run after the whole backward.
struct Callbacks {
  int depth = 0;
  std::vector<std::function<void()>> queued;
};
thread_local Callbacks t_callbacks;

class BackwardScope {
 public:
  BackwardScope() { ++t_callbacks.depth; }
  ~BackwardScope() {
    if (--t_callbacks.depth == 0) t_callbacks.queued.clear();  // only left non-empty when backward failed
  }
  // The outermost scope runs the callbacks once its graph finished cleanly.
  void finish() {
    if (t_callbacks.depth != 1) return;
    for (size_t i = 0; i < t_callbacks.queued.size(); ++i) {
      std::function<void()> fn = std::move(t_callbacks.queued[i]);
      fn();
    }
    t_callbacks.queued.clear();
  }
};

class GradModeRestore {
 public:
  GradModeRestore() : prev_(GradMode::is_enabled()) {}
  ~GradModeRestore() { GradMode::set_enabled(prev_); }

 private:
  bool prev_;
};

}  // namespace

void backward(const TensorList& outputs, const TensorList& grad_outputs, bool retain_graph, bool create_graph) {
  std::vector<Edge> roots;
  TensorList seeds;
  prepare_roots(outputs, grad_outputs, "backward", roots, seeds);
  GraphTask task;
  task.retain_graph = retain_graph || create_graph;
  task.create_graph = create_graph;
  BackwardScope scope;
  {
    GradModeRestore restore;
    run(roots, std::move(seeds), task, false);
  }
  scope.finish();
}

void queue_callback(std::function<void()> fn) {
  TS_CHECK(t_callbacks.depth > 0, "queue_callback: no backward is running on this thread; call it from a hook");
  t_callbacks.queued.push_back(std::move(fn));
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
  std::vector<Edge> roots;
  TensorList seeds;
  prepare_roots(outputs, grad_outputs, "grad", roots, seeds);
  GraphTask task;
  task.retain_graph = retain_graph.value_or(create_graph);
  task.create_graph = create_graph;
  task.captured.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    TS_CHECK(inputs[i].defined() && inputs[i].requires_grad(), "grad: input ", i,
             " does not require grad; call requires_grad_() on it before the forward pass");
    Edge e = gradient_edge(inputs[i]);
    task.captures[e.fn.get()].push_back({e.input_nr, i});
  }
  BackwardScope scope;
  {
    GradModeRestore restore;
    run(roots, std::move(seeds), task, true);
  }
  scope.finish();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!task.captured[i].defined()) {
      TS_CHECK(allow_unused, "grad: input ", i,
               " was not used to compute the outputs; pass allow_unused=true if this is expected");
      continue;
    }
    if (!create_graph) task.captured[i] = task.captured[i].detach();
  }
  return task.captured;
}

}  // namespace tessera::autograd
