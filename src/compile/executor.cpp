#include "tessera/compile/executor.h"

#include <algorithm>

#include "ops/op_utils.h"
#include "tessera/core/allocator.h"
#include "tessera/core/error.h"
#include "tessera/ops/op_table.h"

namespace tessera::compile {
namespace {

// A symbolic dimension that is exactly one symbol (how dynamic input dims look).
int pure_symbol(const SymInt& d) {
  const auto& t = d.terms();
  if (t.size() != 1 || t[0].second != 1 || t[0].first == 0 || (t[0].first & (t[0].first - 1)) != 0) return -1;
  return __builtin_ctz(t[0].first);
}

std::string sym_shape_str(const SymShape& s, const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + s[i].str(names);
  return out + "]";
}

std::string node_context(const Node& n) {
  std::string out = "compiled graph: node " + std::to_string(n.id) + " (";
  for (size_t i = 0; i < n.outputs.size(); ++i) out += (i ? ", " : "") + value_str(n.outputs[i]);
  return out + " = " + std::string(n.op_name()) + (n.scope.empty() ? "" : ", in " + n.scope) + "): ";
}

ops::Attrs resolve(const Node& n, std::span<const int64_t> syms) {
  ops::Attrs a = n.attrs;
  for (const Node::SymAttr& s : n.sym_attrs) {
    ops::AttrValue* v = a.find(s.name);
    if (s.is_list) {
      auto& l = std::get<std::vector<int64_t>>(*v);
      for (size_t i = 0; i < l.size(); ++i) l[i] = s.values[i].eval(syms);
    } else if (std::holds_alternative<Scalar>(*v)) {
      *v = Scalar(s.values[0].eval(syms));
    } else {
      *v = s.values[0].eval(syms);
    }
  }
  return a;
}

// Ops whose outputs may share memory with their first input: views, and ops
// that return their input when there is nothing to do (ops.def's alias column).
bool may_alias(ops::OpId op) { return ops::op_entry(op).alias != ops::Alias::kFresh; }

// The input a node's output may be written over when that input dies at the
// node, or -1 (ops.def's kInPlaceResidual). The kernel must take the two being
// one buffer: fused_conv2d's f32 path adds its residual with oneDNN's sum
// post-op, which accumulates into the destination (so in place it also skips
// copying the residual there).
int in_place_input(const Node& n) {
  constexpr int kResidual = 3;
  if (ops::op_entry(n.op).has(ops::kInPlaceResidual) && static_cast<int>(n.inputs.size()) > kResidual &&
      n.inputs[kResidual] && n.outputs[0]->dtype == DType::F32)
    return kResidual;
  return -1;
}

// Hands out the planned places of one node's outputs, by size.
class NodeBuffers final : public PlannedBuffers {
 public:
  std::vector<std::pair<size_t, char*>> pending;
  void* take(size_t nbytes) override {
    for (auto it = pending.begin(); it != pending.end(); ++it)
      if (it->first == nbytes) {
        char* p = it->second;
        pending.erase(it);
        return p;
      }
    return nullptr;
  }
};

}  // namespace

Executable::Executable(Graph g, bool plan_memory) : graph_(std::move(g)), plan_memory_(plan_memory) {
  verify(graph_, "executor");
  num_slots_ = graph_.num_value_ids();
  for (const Value* v : graph_.parameters()) fixed_.push_back({v->id, v->data});
  for (const Value* v : graph_.constants()) fixed_.push_back({v->id, v->data});
  auto nodes = graph_.nodes();
  std::vector<int> last_use(num_slots_, -1);
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value* v : nodes[i]->inputs)
      if (v) last_use[v->id] = static_cast<int>(i);
  std::vector<bool> keep(num_slots_, false);
  for (const Value* v : graph_.outputs()) keep[v->id] = true;
  for (const auto& [slot, t] : fixed_) keep[slot] = true;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Step s{nodes[i], {}, {}, {}};
    for (const Value* v : nodes[i]->inputs) s.inputs.push_back(v ? v->id : -1);
    for (const Value* v : nodes[i]->outputs) {
      s.outputs.push_back(v->id);
      if (last_use[v->id] < 0 && !keep[v->id]) s.release.push_back(v->id);  // never used
    }
    steps_.push_back(std::move(s));
  }
  for (int id = 0; id < num_slots_; ++id)
    if (last_use[id] >= 0 && !keep[id]) steps_[last_use[id]].release.push_back(id);

  // Lifetimes for the memory plan: a value's memory lives until its last use
  // and the last use of anything that may be a view of it.
  alias_of_.assign(num_slots_, -1);
  def_step_.assign(num_slots_, -1);
  end_step_.assign(num_slots_, -1);
  int last = static_cast<int>(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value* v : nodes[i]->outputs) {
      def_step_[v->id] = static_cast<int>(i);
      end_step_[v->id] = std::max(static_cast<int>(i), last_use[v->id]);
      if (may_alias(nodes[i]->op) && nodes[i]->inputs[0]) alias_of_[v->id] = nodes[i]->inputs[0]->id;
    }
  for (const Value* v : graph_.outputs()) end_step_[v->id] = last;  // lives past the run
  // Push ends to alias roots, latest definitions first (a view is defined after its base).
  for (int i = static_cast<int>(nodes.size()) - 1; i >= 0; --i)
    for (const Value* v : nodes[i]->outputs)
      if (alias_of_[v->id] >= 0) {
        int base = alias_of_[v->id];
        end_step_[base] = std::max(end_step_[base], end_step_[v->id]);
      }

  // In-place chains: an output joins its input's chain when the input is a
  // plannable node output of the same type that nothing needs after this node
  // (its views included) and that the node reads through no other operand.
  chain_head_.resize(num_slots_);
  for (int id = 0; id < num_slots_; ++id) chain_head_[id] = id;
  chain_end_ = end_step_;
  auto plannable = [&](const Value* v) {
    return def_step_[v->id] >= 0 && alias_of_[v->id] < 0 && end_step_[v->id] < last && !v->data_dependent_shape;
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = *nodes[i];
    int k = in_place_input(n);
    if (k < 0 || n.outputs.size() != 1) continue;
    const Value *in = n.inputs[k], *out = n.outputs[0];
    bool read_once = std::count(n.inputs.begin(), n.inputs.end(), in) == 1;
    // An input that dies here can be written over by this node only, once.
    if (!plannable(in) || !plannable(out) || !read_once || end_step_[in->id] != static_cast<int>(i) ||
        in->dtype != out->dtype || !(in->shape == out->shape))
      continue;
    int head = chain_head_[in->id];
    chain_head_[out->id] = head;
    chain_end_[head] = std::max(chain_end_[head], end_step_[out->id]);
  }
}

MemoryPlan Executable::make_plan(const std::vector<int64_t>& syms) const {
  MemoryPlan p;
  p.offset.assign(num_slots_, -1);
  p.bytes.assign(num_slots_, 0);
  int last = static_cast<int>(steps_.size());
  std::vector<int> ids;
  for (const Step& s : steps_)
    for (size_t k = 0; k < s.outputs.size(); ++k) {
      const Value* v = s.node->outputs[k];
      if (v->data_dependent_shape || alias_of_[v->id] >= 0 || end_step_[v->id] >= last) continue;
      int64_t n = 1;
      for (const SymInt& d : v->shape) n *= d.eval(syms);
      p.bytes[v->id] = n * static_cast<int64_t>(dtype_size(v->dtype));
      if (p.bytes[v->id] > 0) ids.push_back(v->id);
    }
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return p.bytes[a] > p.bytes[b]; });
  std::vector<int> placed;  // chain heads, placed for their whole chain's lifetime
  for (int id : ids) {
    p.planned_bytes += p.bytes[id];
    ++p.planned_values;
    if (chain_head_[id] != id) {  // takes its chain head's place, below
      ++p.in_place_values;
      continue;
    }
    int64_t size = (p.bytes[id] + kAlignment - 1) / kAlignment * kAlignment;
    // Blocks alive at the same time, by offset; take the first gap that fits.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (int o : placed)
      if (def_step_[o] <= chain_end_[id] && def_step_[id] <= chain_end_[o])
        busy.push_back({p.offset[o], (p.bytes[o] + kAlignment - 1) / kAlignment * kAlignment});
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    for (const auto& [off, len] : busy) {
      if (at + size <= off) break;
      at = std::max(at, off + len);
    }
    p.offset[id] = at;
    p.arena_bytes = std::max(p.arena_bytes, at + size);
    placed.push_back(id);
  }
  for (int id : ids)
    if (chain_head_[id] != id) p.offset[id] = p.offset[chain_head_[id]];
  return p;
}

std::shared_ptr<const MemoryPlan> Executable::memory_plan(const std::vector<int64_t>& symbols) const {
  std::lock_guard<std::mutex> lock(plan_mu_);
  auto it = plans_.find(symbols);
  if (it != plans_.end()) return it->second;
  if (plans_.size() >= 16) plans_.clear();  // bounded: a few batch sizes are the norm
  return plans_[symbols] = std::make_shared<const MemoryPlan>(make_plan(symbols));
}

std::vector<int64_t> Executable::bind_symbols(const TensorList& inputs) const {
  const auto& ins = graph_.inputs();
  const auto& names = graph_.symbols();
  TS_CHECK(inputs.size() == ins.size(), "compiled graph: expected ", ins.size(), " input",
           ins.size() == 1 ? "" : "s", ", got ", inputs.size());
  std::vector<int64_t> syms(names.size(), -1);
  for (size_t i = 0; i < ins.size(); ++i) {
    const Value* v = ins[i];
    const Tensor& x = inputs[i];
    // What the input should be, for the messages only (built on failure: a run
    // of a small model is a few microseconds).
    auto sig = [&] { return std::string(dtype_name(v->dtype)) + sym_shape_str(v->shape, names); };
    TS_CHECK(x.defined(), "compiled graph: input '", v->name, "' is an undefined tensor; expected ", sig());
    TS_CHECK(x.dtype() == v->dtype && x.dim() == static_cast<int64_t>(v->shape.size()), "compiled graph: input '",
             v->name, "' is ", dtype_name(x.dtype()), shape_str(x.shape()), "; expected ", sig());
    for (size_t d = 0; d < v->shape.size(); ++d) {
      int64_t have = x.shape()[d];
      int s = pure_symbol(v->shape[d]);
      if (s < 0) {
        TS_CHECK(v->shape[d].is_static() && v->shape[d].static_value() == have, "compiled graph: input '", v->name,
                 "' has size ", have, " in dim ", d, " (shape ", shape_str(x.shape()), "); expected ", sig());
      } else if (syms[s] < 0) {
        // Size 1 runs (a loaded model must serve batch 1); should an op treat
        // it differently from the traced sizes (broadcasting, squeeze), the
        // per-node shape check below fails loudly. compile() still traces
        // sizes 0 and 1 as graphs of their own.
        TS_CHECK(have >= 1, "compiled graph: dynamic dimension ", names[s], " of input '", v->name, "' is ", have,
                 "; a graph with dynamic dimensions runs sizes of 1 and more");
        syms[s] = have;
      } else {
        TS_CHECK(syms[s] == have, "compiled graph: dynamic dimension ", names[s], " is ", syms[s],
                 " in one input and ", have, " in input '", v->name, "'");
      }
    }
  }
  return syms;
}

// Arenas are kept between runs: a fresh one would be paged in (zeroed by
// the kernel) on every run, which costs more than a large model's pointwise ops.
Tensor Executable::take_arena(int64_t bytes) const {
  {
    std::lock_guard<std::mutex> lock(arena_mu_);
    for (size_t i = 0; i < arenas_.size(); ++i)
      if (arenas_[i].numel() >= bytes) {
        Tensor a = std::move(arenas_[i]);
        arenas_.erase(arenas_.begin() + static_cast<std::ptrdiff_t>(i));
        return a;
      }
  }
  return empty({bytes}, DType::U8);
}

void Executable::give_back_arena(Tensor arena) const {
  std::lock_guard<std::mutex> lock(arena_mu_);
  // As many as runs overlap; the smallest goes when a larger one comes back.
  arenas_.push_back(std::move(arena));
  std::sort(arenas_.begin(), arenas_.end(), [](const Tensor& a, const Tensor& b) { return a.numel() > b.numel(); });
  if (arenas_.size() > static_cast<size_t>(std::max(1, max_concurrent_.load()))) arenas_.pop_back();
}

TensorList Executable::run(const TensorList& inputs) const {
  struct Running {
    std::atomic<int>& n;
    std::atomic<int>& max;
    explicit Running(std::atomic<int>& n_, std::atomic<int>& max_) : n(n_), max(max_) {
      int now = ++n;
      for (int m = max.load(); now > m && !max.compare_exchange_weak(m, now);) {}
    }
    ~Running() { --n; }
  } running(running_, max_concurrent_);
  std::vector<int64_t> syms = bind_symbols(inputs);
  std::vector<Tensor> slots(num_slots_);
  for (size_t i = 0; i < inputs.size(); ++i) slots[graph_.inputs()[i]->id] = inputs[i];
  for (const auto& [slot, t] : fixed_) slots[slot] = t;
  std::shared_ptr<const MemoryPlan> plan;
  Tensor arena;
  char* base = nullptr;
  if (plan_memory_) {
    plan = memory_plan(syms);
    if (plan->arena_bytes > 0) {
      arena = take_arena(plan->arena_bytes);
      base = static_cast<char*>(arena.raw_data());
    }
  }
  // Nothing the run returns lives in the arena, so the next run may reuse it.
  struct GiveBack {
    const Executable* exe;
    Tensor& arena;
    ~GiveBack() {
      if (arena.defined()) exe->give_back_arena(std::move(arena));
    }
  } give_back{this, arena};
  NodeBuffers buffers;
  TensorList args;
  for (size_t si = 0; si < steps_.size(); ++si) {
    const Step& s = steps_[si];
    args.clear();
    for (int id : s.inputs) args.push_back(id >= 0 ? slots[id] : Tensor());
    buffers.pending.clear();
    if (base)
      for (int id : s.outputs)
        if (plan->offset[id] >= 0) buffers.pending.push_back({static_cast<size_t>(plan->bytes[id]), base + plan->offset[id]});
    TensorList outs;
    try {  // an op's error names the node it ran for (graphs come from files)
      PlannedBuffersGuard planned(base ? &buffers : nullptr);
      outs = s.node->sym_attrs.empty() ? ops::invoke(s.node->op, args, s.node->attrs)
                                       : ops::invoke(s.node->op, args, resolve(*s.node, syms));
    } catch (const OutOfMemoryError& e) {
      throw OutOfMemoryError(node_context(*s.node) + e.what());
    } catch (const Error& e) {
      throw Error(node_context(*s.node) + e.what());
    }
    if (base) {
      // An output inside the arena but not in its own planned place is a view
      // of another planned value; keep it only if that value's place is not
      // reused before this output's last use.
      for (size_t k = 0; k < outs.size() && k < s.outputs.size(); ++k) {
        const char* d = outs[k].defined() ? static_cast<const char*>(outs[k].raw_data()) : nullptr;
        int id = s.outputs[k];
        if (plan->offset[id] >= 0) ++(d == base + plan->offset[id] ? planned_taken_ : planned_unused_);
        if (!d || d < base || d >= base + plan->arena_bytes) continue;
        if (plan->offset[id] >= 0 && d == base + plan->offset[id]) continue;
        // The planned value whose place this is *now* (places are shared over
        // time: only values live at this step own theirs; an op's scratch may
        // have taken an output's place, and the output another's).
        int64_t off = d - base;
        const int step = static_cast<int>(si);
        bool safe = false;
        for (int v = 0; v < num_slots_ && !safe; ++v)
          if (plan->offset[v] >= 0 && def_step_[v] <= step && end_step_[v] >= step && off >= plan->offset[v] &&
              off < plan->offset[v] + plan->bytes[v])
            safe = end_step_[v] >= end_step_[id];
        if (!safe) {
          outs[k] = outs[k].clone();
          ++alias_copies_;
        }
      }
    }
    TS_CHECK(outs.size() == s.outputs.size(), "compiled graph: op ", s.node->op_name(), " returned ", outs.size(),
             " outputs, the graph expects ", s.outputs.size());
    for (size_t k = 0; k < outs.size(); ++k) {
      const Value* v = s.node->outputs[k];
      // A graph that no longer fits its inputs must fail loudly, not compute on.
      TS_CHECK(outs[k].dtype() == v->dtype &&
                   (v->data_dependent_shape || IntArrayRef(outs[k].shape()).equals(eval_shape(v->shape, syms))),
               "compiled graph: ", value_str(v), " = ", s.node->op_name(), "(...) came out ",
               dtype_name(outs[k].dtype()), shape_str(outs[k].shape()), ", the graph says ", dtype_name(v->dtype),
               sym_shape_str(v->shape, graph_.symbols()));
      slots[s.outputs[k]] = std::move(outs[k]);
    }
    for (int id : s.release) slots[id] = Tensor();
  }
  TensorList out;
  for (const Value* v : graph_.outputs()) out.push_back(slots[v->id]);
  return out;  // never in the arena: outputs are not planned
}

}  // namespace tessera::compile
