#include "tessera/autograd/node.h"

#include <atomic>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/trace.h"

namespace tessera::autograd {

thread_local void (*detail::t_on_record)() = nullptr;

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};

// A new TensorImpl over the same storage, shape and strides, without autograd.
Tensor alias_of(const Tensor& t) {
  auto impl = make_intrusive<TensorImpl>(t.storage(), t.shape(), t.strides(), t.offset(), t.dtype());
  impl->is_view = t.impl()->is_view;
  return Tensor(impl);
}
}  // namespace

// A gradient can become .grad without a copy only if nothing else can see it.
bool steal_ok(const Tensor& g) {
  return g.is_contiguous() && g.impl()->use_count() == 1 && g.storage()->use_count() == 1 && !g.requires_grad() &&
         g.numel() * static_cast<int64_t>(g.itemsize()) == static_cast<int64_t>(g.storage()->nbytes());
}

// Note [Releasing deep graphs]
// Nodes own their inputs' nodes (through edges and saved tensors), so freeing
// the head of a 100,000-op chain would free the chain recursively and overflow
// the stack. Instead, a dying node hands the nodes it owns to a per-thread
// queue, and only the outermost destructor drains it, one node at a time.
namespace {
struct ReleaseQueue {
  std::vector<std::shared_ptr<Node>> pending;
  bool draining = false;
};
thread_local ReleaseQueue t_release;

void defer_release(std::shared_ptr<Node>&& n) {
  if (n) t_release.pending.push_back(std::move(n));
}
void drain_releases() {
  if (t_release.draining) return;
  t_release.draining = true;
  while (!t_release.pending.empty()) {
    std::shared_ptr<Node> n = std::move(t_release.pending.back());
    t_release.pending.pop_back();
    n.reset();  // may queue more nodes
  }
  t_release.draining = false;
}
}  // namespace

Node::~Node() {
  for (Edge& e : next_edges) defer_release(std::move(e.fn));
  drain_releases();
}

OpNode::~OpNode() {
  for (auto& s : saved) defer_release(s.take_grad_fn_if_last());
}

std::shared_ptr<Node> SavedTensor::take_grad_fn_if_last() {
  if (!data_.defined() || is_output_) return nullptr;
  TensorImpl* impl = data_.impl();
  if (impl->use_count() != 1 || !impl->autograd) return nullptr;
  return std::move(impl->autograd->grad_fn);
}

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

SavedTensor::SavedTensor(const Tensor& t, bool is_output) : is_output_(is_output) {
  if (!t.defined()) return;
  version_ = t.version();
  requires_grad_ = t.requires_grad();
  if (is_output) {
    output_nr_ = t.impl()->autograd ? t.impl()->autograd->output_nr : 0;
    data_ = alias_of(t);
  } else {
    data_ = t;  // inputs are safe to hold: they do not point at this node
  }
}

// Note [Saved tensors and version counters]
// Each saved tensor remembers the storage version at save time. In-place ops
// bump the version; a VJP that finds it changed would compute with the wrong
// values, so unpacking raises an error naming the op that saved it.
Tensor SavedTensor::unpack(const std::shared_ptr<Node>& owner, const char* op) const {
  if (!data_.defined()) return Tensor();
  TS_CHECK(data_.version() == version_, "autograd: a tensor saved by ", op,
           " for its backward was modified by an in-place operation (its version is now ",
           data_.version(), ", it was ", version_,
           " when saved); clone it before modifying it, or modify a copy instead");
  if (!is_output_) return data_;
  Tensor t = alias_of(data_);
  if (requires_grad_ && owner) {
    auto& m = t.impl()->autograd_meta();
    m.requires_grad = true;
    m.grad_fn = owner;
    m.output_nr = output_nr_;
  }
  return t;
}

TensorList OpNode::apply(TensorList&& grads) {
  TS_CHECK(!released_, "autograd: trying to backward through the graph a second time (", name_,
           "'s saved tensors were already freed); pass retain_graph=true to the first backward call "
           "if you need to backward twice");
  TensorList unpacked;
  unpacked.reserve(saved.size());
  auto self = shared_from_this();
  for (const auto& s : saved) unpacked.push_back(s.unpack(self, name_));
  VjpArgs args{grads, unpacked, next_edges};
  TensorList out = vjp_(args);
  TS_INTERNAL_ASSERT(out.size() == next_edges.size());
  return out;
}

void OpNode::release_saved() {
  // Only nodes that had something to free refuse a second backward.
  if (!saved.empty()) released_ = true;
  saved.clear();
  saved.shrink_to_fit();
}

AccumulateGrad::AccumulateGrad(Tensor v) : variable(std::move(v)) {
  outputs.push_back({variable.shape(), variable.dtype(), variable.device()});
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor g = std::move(grads[0]);
  auto& meta = variable.impl()->autograd_meta();
  for (auto& hook : meta.hooks) {
    Tensor r = hook(g);
    if (r.defined()) g = r;
  }
  if (!meta.grad || !meta.grad->defined()) {
    // A fresh buffer when the graph is not being recorded, so that later
    // in-place accumulation cannot reach into a tensor the user still holds.
    if (GradMode::is_enabled()) meta.grad = std::make_unique<Tensor>(g);
    else meta.grad = std::make_unique<Tensor>(steal_ok(g) ? g : g.clone());
  } else if (GradMode::is_enabled()) {
    *meta.grad = *meta.grad + g;  // create_graph: keep the sum differentiable
  } else {
    meta.grad->add_(g);
  }
  for (auto& hook : meta.post_accumulate_hooks)
    if (hook) hook(variable);
  return {};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.impl()->autograd) return {};
  auto& m = *t.impl()->autograd;
  if (m.grad_fn) return {m.grad_fn, m.output_nr};
  if (!m.requires_grad) return {};
  auto acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    m.grad_accumulator = acc;
  }
  return {acc, 0};
}

bool any_requires_grad(std::initializer_list<const Tensor*> ts) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor* t : ts)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool any_requires_grad(const TensorList& ts) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const char* name, const TensorList& inputs, TensorList& outputs, VjpFn vjp,
            std::initializer_list<int> saved_inputs, std::initializer_list<int> saved_outputs,
            const TensorList& extra_saved) {
  if (detail::t_on_record) [[unlikely]] detail::t_on_record();
  auto node = std::make_shared<OpNode>(name, std::move(vjp));
  node->next_edges.reserve(inputs.size());
  for (const Tensor& in : inputs) node->next_edges.push_back(in.defined() && in.requires_grad() ? gradient_edge(in) : Edge{});
  node->saved.reserve(saved_inputs.size() + saved_outputs.size() + extra_saved.size());
  for (int i : saved_inputs) node->saved.emplace_back(inputs[i], false);
  // Outputs get their grad_fn before they are saved, so unpack can re-attach.
  node->outputs.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = outputs[i];
    node->outputs.push_back({out.shape(), out.dtype(), out.device()});
    if (!is_floating(out.dtype())) continue;  // integer outputs never carry gradients
    auto& m = out.impl()->autograd_meta();
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = static_cast<uint32_t>(i);
  }
  for (int i : saved_outputs) node->saved.emplace_back(outputs[i], true);
  for (const Tensor& t : extra_saved) node->saved.emplace_back(t, false);
  if (trace::active()) {
    node->trace_path = trace::intern(trace::module_path());
    trace::op_outputs(name, false, node->trace_path, inputs.data(), static_cast<int>(inputs.size()),
                      outputs.data(), static_cast<int>(outputs.size()));
  }
}

void rebase_history(Tensor& self, const std::shared_ptr<Node>& node) {
  auto& m = self.impl()->autograd_meta();
  m.grad_fn = node;
  m.output_nr = 0;
  m.requires_grad = true;
}

}  // namespace tessera::autograd
