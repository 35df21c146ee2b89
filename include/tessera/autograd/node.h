#pragma once
// The autograd graph. Every recorded op output points at a Node; a Node keeps
// what its VJP needs (saved tensors, attributes in the closure) and edges to the
// nodes that produced its inputs. Leaves end in an AccumulateGrad node.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;  // which of fn's outputs (gradient slots) this edge feeds
  bool valid() const { return static_cast<bool>(fn); }
};

// A tensor saved for backward. Saving one of the node's own outputs would make
// a cycle (output -> node -> output), so outputs are kept without their
// autograd metadata and re-attached to the node when unpacked.
// See Note [Saved tensors and version counters] in engine.cpp.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output);
  Tensor unpack(const std::shared_ptr<Node>& owner, const char* op) const;
  bool defined() const { return data_.defined(); }
  void reset() { data_ = Tensor(); }
  // The producer of a saved input, taken out when this is its last holder.
  std::shared_ptr<Node> take_grad_fn_if_last();

 private:
  Tensor data_;
  uint32_t version_ = 0;
  uint32_t output_nr_ = 0;
  bool is_output_ = false;
  bool requires_grad_ = false;
};

struct TensorMeta {
  Shape shape;
  DType dtype;
  Device device = Device::cpu();
};

using Hook = std::function<Tensor(const Tensor&)>;

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node();
  // grads: one per output slot (zeros where none flowed); returns one per edge.
  virtual TensorList apply(TensorList&& grads) = 0;
  virtual const char* name() const = 0;
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  std::vector<TensorMeta> outputs;  // shape/dtype/device per output slot
  uint64_t sequence_nr;
  // The module path open when the forward op ran; set only while tracing.
  const char* trace_path = nullptr;
  // Hooks on non-leaf tensors produced by this node, by output slot.
  std::vector<std::pair<uint32_t, Hook>> pre_hooks;
  // Non-leaf outputs that asked for retain_grad(), by output slot.
  std::vector<std::pair<uint32_t, IntrusivePtr<TensorImpl>>> retained;
};

// What a VJP sees: incoming gradients, the unpacked saved tensors, and which
// inputs need a gradient at all (so it can skip work).
struct VjpArgs {
  const TensorList& grads;
  const TensorList& saved;
  const std::vector<Edge>& edges;  // an input needs a gradient iff its edge is valid
  bool needs_grad(size_t i) const { return i < edges.size() && edges[i].valid(); }
  std::vector<bool> needs() const {
    std::vector<bool> r;
    for (const Edge& e : edges) r.push_back(e.valid());
    return r;
  }
};
using VjpFn = std::function<TensorList(const VjpArgs&)>;

// The node of an ordinary op: its VJP is a closure written in Tessera ops.
class OpNode : public Node {
 public:
  OpNode(const char* name, VjpFn vjp) : name_(name), vjp_(std::move(vjp)) {}
  ~OpNode() override;
  TensorList apply(TensorList&& grads) override;
  const char* name() const override { return name_; }
  void release_saved() override;

  std::vector<SavedTensor> saved;

 private:
  const char* name_;
  VjpFn vjp_;
  bool released_ = false;
};

// Sums incoming gradients into a leaf's .grad.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(Tensor variable);
  TensorList apply(TensorList&& grads) override;
  const char* name() const override { return "AccumulateGrad"; }
  Tensor variable;
};

// The edge a gradient for `t` should flow into (its grad_fn, or its leaf's
// accumulator), or an invalid edge when `t` does not require grad.
Edge gradient_edge(const Tensor& t);

// Graph capture (ops/capture.h) wants to know when an op records a node of
// its own; ops installs this hook while a recorder is active, so autograd
// needs no ops header (autograd sits below ops).
namespace detail {
extern thread_local void (*t_on_record)();
}

// Records `outputs` as produced by an op named `name` from `inputs`: builds the
// node, wires edges, saves tensors. `saved_inputs`/`saved_outputs` are indices
// into inputs/outputs; they appear in VjpArgs::saved in that order.
void record(const char* name, const TensorList& inputs, TensorList& outputs, VjpFn vjp,
            std::initializer_list<int> saved_inputs = {}, std::initializer_list<int> saved_outputs = {},
            const TensorList& extra_saved = {});

// True when grad mode is on and any of `ts` requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> ts);
bool any_requires_grad(const TensorList& ts);

// Re-points `self` (modified in place) at a new node; see in-place ops.
void rebase_history(Tensor& self, const std::shared_ptr<Node>& node);

}  // namespace tessera::autograd
