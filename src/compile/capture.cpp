// Graph capture: the recorder that turns op calls into nodes, and the
// multi-trace fit that turns sizes into symbols (see compile/capture.h).
#include "tessera/compile/capture.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <unordered_map>

#include "ops/op_utils.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/ops/op_table.h"
#include "tessera/core/trace.h"
#include "tessera/ops/ops.h"

namespace tessera::compile {
namespace {

// Makes trace scopes (module paths) live while tracing, so nodes know which
// module they came from.
struct ScopeActivator final : trace::Listener {
  ScopeActivator() { trace::add_listener(this); }
  ~ScopeActivator() override { trace::remove_listener(this); }
};

// Note [Training captures]
// An inference capture keeps the outermost op call: the op the user wrote.
// A training capture also records the backward, whose VJPs read what the
// forward saved. An op that records its own autograd node (linear, softmax)
// saves its inputs and outputs, which are graph values: it stays one node. An
// op whose gradient comes from the nodes of the ops it calls (cross_entropy =
// log_softmax + nll_loss, embedding = index_select) has VJPs that read its
// inner values, so the tracer keeps those inner calls instead of it. Hence a
// frame per nested call while training, folded on the way out.
class Tracer final : public ops::Recorder {
 public:
  Tracer(Graph& g, const NamedTensors& params, bool training) : g_(g), training_(training) {
    for (const auto& [name, t] : params)
      if (t.defined()) params_.emplace(t.impl(), name);
  }

  void add_input(const std::string& name, const Tensor& t) {
    TS_CHECK(!values_.count(t.impl()), "compile: input '", name,
             "' is the same tensor as an earlier input; pass each input once");
    bind(t, g_.add_input(name, t.dtype(), static_shape(t.shape())));
  }

  bool begin(ops::OpId op, const Tensor* const* inputs, int n) override {
    if (!want(op)) return false;
    for (int i = 0; i < n; ++i) stack_.back().inputs.push_back(*inputs[i]);
    return true;
  }
  bool begin(ops::OpId op, const TensorList& inputs) override {
    if (!want(op)) return false;
    stack_.back().inputs = inputs;
    return true;
  }
  void attrs(ops::Attrs&& a) override { stack_.back().attrs = std::move(a); }
  void outputs(const Tensor* outs, int n) override {
    stack_.back().outputs.assign(outs, outs + n);
    stack_.back().done = true;
  }
  void grad_node() override {
    if (!stack_.empty()) stack_.back().own_grad = true;
  }
  // Runs in OpScope's destructor: must not throw. Errors wait in error_.
  void end() override {
    int depth = depth_--;
    if (depth > 1 && !training_) return;
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (!f.done) return;  // the op threw
    if (!stack_.empty()) {
      Frame& parent = stack_.back();
      parent.inner_grad = parent.inner_grad || f.own_grad || f.inner_grad;
      parent.children.push_back(std::move(f));
      return;
    }
    try {
      emit(f);
    } catch (const std::exception& e) {
      if (error_.empty()) error_ = e.what();
    }
  }
  void host_read(const Tensor& t) override {
    if (depth_ > 0 || !t.defined()) return;  // an op reading its own data
    auto it = values_.find(t.impl());
    if (it == values_.end()) return;
    const Value* v = it->second.value;
    if (v->kind != ValueKind::kInput && v->kind != ValueKind::kNode) return;
    std::string what = v->kind == ValueKind::kInput
                           ? "the graph input " + value_str(v)
                           : value_str(v) + ", the output of '" + std::string(v->producer->op_name()) + "'" +
                                 (v->producer->scope.empty() ? "" : " in module '" + v->producer->scope + "'");
    TS_ERROR("compile: the traced code reads the value of ", what,
             " (item() or to_vector()); a graph cannot depend on data through the host (data-dependent "
             "control flow). Compute with tensor ops instead (where, masked_fill, clamp), or run that part "
             "outside the compiled function");
  }

  // Graph outputs; an output the ops did not produce becomes a constant.
  void finish(const TensorList& outs) {
    rethrow();
    TS_CHECK(!outs.empty(), "compile: the function returned no tensors");
    std::vector<Value*> vs;
    for (size_t i = 0; i < outs.size(); ++i) {
      TS_CHECK(outs[i].defined(), "compile: output ", i, " of the function is an undefined tensor");
      vs.push_back(lookup(outs[i], "output " + std::to_string(i)));
    }
    g_.set_outputs(std::move(vs));
  }

  void rethrow() {
    if (!error_.empty()) {
      std::string e = std::move(error_);
      error_.clear();
      TS_ERROR(e);
    }
  }

 private:
  struct Bound {
    Value* value;
    uint32_t version;
  };
  struct Frame {
    ops::OpId op{};
    TensorList inputs;
    ops::Attrs attrs;
    TensorList outputs;
    bool done = false;
    std::string scope;
    bool own_grad = false;    // recorded an autograd node itself
    bool inner_grad = false;  // an inner call did
    std::vector<Frame> children;
  };

  // Opens a frame for a call whose details are wanted: the outermost one, or
  // every one while training.
  bool want(ops::OpId op) {
    if (depth_++ == 0) rethrow();
    else if (!training_) return false;
    stack_.push_back(Frame{});
    stack_.back().op = op;
    stack_.back().scope = trace::module_path();
    return true;
  }

  // Note [Training captures]: the call itself, or the inner calls its gradient
  // comes from.
  // A factory call inside an op is left out: the op may fill its result
  // through a kernel (adaptive pooling's averaging matrix), which a node could
  // not replay, so that tensor becomes a constant (checked like any other).
  void emit(Frame& f, bool inner = false) {
    if (inner && ops::op_entry(f.op).has(ops::kFactory)) return;
    if (training_ && !f.own_grad && f.inner_grad) {
      for (Frame& c : f.children) emit(c, true);
      return;
    }
    add_node(f);
  }

  void bind(const Tensor& t, Value* v) {
    values_[t.impl()] = Bound{v, t.version()};
    keep_.push_back(t);  // keeps the TensorImpl alive, so its address is not reused
    if (t.numel() > 0) by_data_[t.raw_data()].push_back({t, v});
  }

  // A tensor that is another handle on a bound value's elements: autograd
  // hands a VJP its saved outputs as new handles (no reference cycle), which
  // share the storage, offset, shape and strides of the original.
  Value* same_elements(const Tensor& t) const {
    if (t.numel() == 0) return nullptr;
    auto it = by_data_.find(t.raw_data());
    if (it == by_data_.end()) return nullptr;
    for (const auto& [u, v] : it->second)
      if (u.dtype() == t.dtype() && IntArrayRef(u.shape()).equals(t.shape()) &&
          IntArrayRef(u.strides()).equals(t.strides()) && u.version() == t.version())
        return v;
    return nullptr;
  }

  Value* lookup(const Tensor& t, const std::string& use) {
    auto it = values_.find(t.impl());
    if (it != values_.end()) {
      Value* v = it->second.value;
      TS_CHECK(t.version() == it->second.version || v->kind == ValueKind::kParameter, "compile: ",
               value_str(v), " (", kind_name(v->kind), ") was modified in place after it was ",
               v->kind == ValueKind::kInput ? "passed in" : "computed", ", then used as ", use,
               "; a graph cannot replay in-place updates of its values. Use the out-of-place op instead");
      return v;
    }
    Value* v = nullptr;
    if (auto p = params_.find(t.impl()); p != params_.end()) v = g_.add_parameter(p->second, t);
    else if (Value* same = same_elements(t)) v = same;
    else v = g_.add_constant(t);
    bind(t, v);
    return v;
  }

  void add_node(Frame& f) {
    std::string op(ops::op_name(f.op));
    std::vector<Value*> ins;
    for (size_t i = 0; i < f.inputs.size(); ++i)
      ins.push_back(f.inputs[i].defined() ? lookup(f.inputs[i], "input " + std::to_string(i) + " of " + op)
                                          : nullptr);
    std::vector<std::pair<DType, SymShape>> outs;
    for (const Tensor& t : f.outputs) {
      TS_CHECK(t.defined(), "compile: op ", op, " returned an undefined tensor");
      outs.push_back({t.dtype(), static_shape(t.shape())});
    }
    bool data_shape = ops::data_dependent_shape(f.op, f.attrs);
    for (const Value* v : ins) data_shape = data_shape || (v && v->data_dependent_shape);
    Node* n = g_.add_node(f.op, std::move(ins), std::move(f.attrs), outs);
    n->scope = std::move(f.scope);
    for (Value* v : n->outputs) v->data_dependent_shape = data_shape;
    for (size_t i = 0; i < f.outputs.size(); ++i) bind(f.outputs[i], n->outputs[i]);
  }

  Graph& g_;
  std::unordered_map<const TensorImpl*, std::string> params_;
  std::unordered_map<const TensorImpl*, Bound> values_;
  std::unordered_map<const void*, std::vector<std::pair<Tensor, Value*>>> by_data_;
  TensorList keep_;
  bool training_;
  int depth_ = 0;
  std::vector<Frame> stack_;
  std::string error_;
};

Graph trace_once(const Function& fn, const TensorList& inputs, const NamedTensors& params,
                 const std::vector<std::string>& names, bool grad) {
  Graph g;
  Tracer tracer(g, params, grad);
  for (size_t i = 0; i < inputs.size(); ++i) tracer.add_input(names[i], inputs[i]);
  TensorList outs;
  {
    std::optional<NoGradGuard> no_grad;
    if (!grad) no_grad.emplace();
    ScopeActivator scopes;
    ops::RecorderGuard guard(&tracer);
    outs = fn(inputs);
  }
  tracer.finish(outs);
  return g;
}

// ---- comparing traces ---------------------------------------------------------

std::string node_desc(const Node* n) {
  return "node %" + std::to_string(n->outputs.empty() ? -1 : n->outputs[0]->id) + " (" + std::string(n->op_name()) +
         (n->scope.empty() ? "" : " in module '" + n->scope + "'") + ")";
}

std::vector<const Value*> values_by_id(const Graph& g) {
  std::vector<const Value*> v(g.num_value_ids(), nullptr);
  for (const Value* x : g.inputs()) v[x->id] = x;
  for (const Value* x : g.parameters()) v[x->id] = x;
  for (const Value* x : g.constants()) v[x->id] = x;
  for (const Node* n : g.nodes())
    for (const Value* x : n->outputs) v[x->id] = x;
  return v;
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || !IntArrayRef(a.shape()).equals(b.shape())) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

// Same nodes, same wiring, same attribute names; what may differ between the
// traces is sizes and integer attributes. `why` says what the traces were.
void check_same_structure(const Graph& a, const Graph& b, const std::string& why) {
  auto na = a.nodes(), nb = b.nodes();
  auto prefix = "compile: the traced graph changes " + why + ": ";
  size_t common = std::min(na.size(), nb.size());
  for (size_t i = 0; i < common; ++i) {
    const Node *x = na[i], *y = nb[i];
    TS_CHECK(x->op == y->op, prefix, node_desc(x), " became ", node_desc(y),
             "; the function's control flow depends on the input (sizes or values)");
    TS_CHECK(x->inputs.size() == y->inputs.size() && x->outputs.size() == y->outputs.size(), prefix, node_desc(x),
             " has different inputs or outputs");
    for (size_t k = 0; k < x->inputs.size(); ++k) {
      const Value *u = x->inputs[k], *w = y->inputs[k];
      TS_CHECK((u == nullptr) == (w == nullptr) && (!u || (u->id == w->id && u->kind == w->kind)), prefix,
               "input ", k, " of ", node_desc(x), " comes from a different value");
    }
    const auto &ia = x->attrs.items(), &ib = y->attrs.items();
    TS_CHECK(ia.size() == ib.size(), prefix, node_desc(x), " has different attributes");
    for (size_t k = 0; k < ia.size(); ++k)
      TS_CHECK(ia[k].name == ib[k].name && ia[k].value.index() == ib[k].value.index(), prefix, "attribute '",
               ia[k].name, "' of ", node_desc(x), " changes kind");
  }
  TS_CHECK(na.size() == nb.size(), prefix, "one trace has ", na.size(), " op calls, the other ", nb.size(),
           "; the function's control flow depends on the input (sizes or values)");
  TS_CHECK(a.num_value_ids() == b.num_value_ids(), prefix, "the number of values differs");
  auto va = values_by_id(a), vb = values_by_id(b);
  for (size_t i = 0; i < va.size(); ++i) {
    if (!va[i]) continue;
    TS_CHECK(vb[i] && vb[i]->kind == va[i]->kind && vb[i]->name == va[i]->name, prefix, "value ", value_str(va[i]),
             " is not the same kind of value in both traces");
  }
  TS_CHECK(a.outputs().size() == b.outputs().size(), prefix, "the number of outputs differs");
  for (size_t i = 0; i < a.outputs().size(); ++i)
    TS_CHECK(a.outputs()[i]->id == b.outputs()[i]->id, prefix, "output ", i, " comes from a different value");
}

std::string consumer_of(const Graph& g, const Value* c) {
  for (const Node* n : g.nodes())
    for (size_t k = 0; k < n->inputs.size(); ++k)
      if (n->inputs[k] == c) return "input " + std::to_string(k) + " of " + node_desc(n);
  return "a graph output";
}

void check_constants(const Graph& a, const Graph& b, const std::string& why) {
  auto vb = values_by_id(b);
  for (const Value* c : a.constants()) {
    const Value* d = vb[c->id];
    TS_CHECK(same_tensor(c->data, d->data), "compile: the tensor used as ", consumer_of(a, c),
             " is not made by a Tessera op but changes ", why,
             ": it was computed from the inputs outside the ops (a kernel called directly, values copied "
             "through the host, a tensor built from sizes) and would be frozen into the graph. Build it "
             "with ops (full, arange, ...) inside the function, or pass it as an input");
  }
}

// ---- fitting sizes to symbols -----------------------------------------------------

// q[mask] observed at sizes base[i] + bit i of mask: the multilinear polynomial
// through those 2^k points, in the symbols themselves.
SymInt fit(const std::vector<int64_t>& q, const std::vector<int64_t>& base) {
  size_t k = base.size(), n = q.size();
  // Möbius inversion in u_i = s_i - base_i (0 or 1): d[S] = sum over T in S of ±q[T].
  std::vector<int64_t> d(q);
  for (size_t i = 0; i < k; ++i)
    for (size_t m = 0; m < n; ++m)
      if (m & (size_t{1} << i)) d[m] -= d[m ^ (size_t{1} << i)];
  // Expand prod (s_i - base_i) over each S into monomials of s.
  std::vector<SymInt::Term> terms;
  for (size_t S = 0; S < n; ++S) {
    if (d[S] == 0) continue;
    for (size_t T = S;; T = (T - 1) & S) {
      int64_t c = d[S];
      for (size_t i = 0; i < k; ++i)
        if ((S & (size_t{1} << i)) && !(T & (size_t{1} << i))) c *= -base[i];
      terms.push_back({static_cast<uint32_t>(T), c});
      if (T == 0) break;
    }
  }
  return SymInt::from_terms(std::move(terms));
}

struct Sample {
  const Graph* g;
  std::vector<const Value*> values;
};

// The integers an attribute holds (an int, a list, an integral Scalar), or
// nullopt for other kinds.
std::optional<std::vector<int64_t>> int_parts(const ops::AttrValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return std::vector<int64_t>{*i};
  if (const auto* l = std::get_if<std::vector<int64_t>>(&v)) return *l;
  if (const auto* s = std::get_if<Scalar>(&v); s && !s->is_floating()) return std::vector<int64_t>{s->to_int()};
  return std::nullopt;
}

Graph generalize(std::vector<Graph>& corners, const Graph& check, const std::vector<int64_t>& base,
                 const std::vector<int64_t>& check_sizes, const std::vector<std::string>& names) {
  std::vector<Sample> s;
  for (const Graph& g : corners) s.push_back({&g, values_by_id(g)});
  auto vcheck = values_by_id(check);
  Graph& g0 = corners[0];
  auto fit_one = [&](auto&& get, const std::string& what) {
    std::vector<int64_t> q;
    for (const Sample& x : s) q.push_back(get(x.g, x.values));
    SymInt f = fit(q, base);
    int64_t want = get(&check, vcheck);
    TS_CHECK(f.eval(check_sizes) == want, "compile: ", what, " depends on the dynamic dimensions in a way a graph "
             "cannot follow (", f.str(names), " fits the traced sizes but gives ", f.eval(check_sizes),
             " instead of ", want, " at another size); mark fewer dimensions dynamic");
    return f;
  };
  // Value shapes.
  auto v0 = values_by_id(g0);
  for (const Value* cv : v0) {
    if (!cv) continue;
    Value* v = const_cast<Value*>(cv);
    if (v->data_dependent_shape) continue;  // not a function of the sizes
    for (size_t d = 0; d < v->shape.size(); ++d) {
      for (const Sample& x : s)
        TS_CHECK(x.values[v->id]->shape.size() == v->shape.size(), "compile: the rank of ", value_str(v),
                 " changes with the dynamic dimensions");
      SymInt f = fit_one([&](const Graph*, const std::vector<const Value*>& vals) {
        return vals[v->id]->shape[d].static_value();
      }, "dimension " + std::to_string(d) + " of " + value_str(v));
      if (v->kind == ValueKind::kConstant || v->kind == ValueKind::kParameter)
        TS_CHECK(f.is_static(), "compile: the size of constant ", value_str(v), " (used as ",
                 consumer_of(g0, v), ") changes with the dynamic dimensions; build it with ops (full, arange, "
                 "...) inside the function");
      v->shape[d] = f;
    }
  }
  // Integer attributes.
  auto nodes0 = g0.nodes();
  std::vector<std::vector<Node*>> node_lists;
  for (const Sample& x : s) node_lists.push_back(x.g->nodes());
  auto check_nodes = check.nodes();
  for (size_t ni = 0; ni < nodes0.size(); ++ni) {
    Node* n = nodes0[ni];
    const auto& items = n->attrs.items();
    for (size_t ai = 0; ai < items.size(); ++ai) {
      const std::string& name = items[ai].name;
      auto at = [&](const Graph* g, size_t c) -> const ops::AttrValue& {
        const Node* m = g == &check ? check_nodes[ni] : node_lists[c][ni];
        return m->attrs.items()[ai].value;
      };
      auto p0 = int_parts(items[ai].value);
      bool differs = false;
      for (size_t c = 1; c < s.size(); ++c)
        differs = differs || !ops::attr_equal(items[ai].value, at(s[c].g, c));
      differs = differs || !ops::attr_equal(items[ai].value, at(&check, 0));
      if (!differs) continue;
      TS_CHECK(p0.has_value(), "compile: attribute '", name, "' (", ops::attr_str(items[ai].value), ") of ",
               node_desc(n), " changes with the dynamic dimensions and is not an integer; mark fewer "
               "dimensions dynamic");
      std::vector<std::vector<int64_t>> parts;
      for (size_t c = 0; c < s.size(); ++c) parts.push_back(*int_parts(at(s[c].g, c)));
      auto pc = int_parts(at(&check, 0));
      for (const auto& p : parts)
        TS_CHECK(p.size() == p0->size() && pc && pc->size() == p0->size(), "compile: the length of attribute '",
                 name, "' of ", node_desc(n), " changes with the dynamic dimensions");
      Node::SymAttr sa{name, {}, std::holds_alternative<std::vector<int64_t>>(items[ai].value)};
      for (size_t e = 0; e < p0->size(); ++e) {
        std::vector<int64_t> q;
        for (const auto& p : parts) q.push_back(p[e]);
        SymInt f = fit(q, base);
        TS_CHECK(f.eval(check_sizes) == (*pc)[e], "compile: attribute '", name, "' of ", node_desc(n),
                 " depends on the dynamic dimensions in a way a graph cannot follow (", f.str(names),
                 " fits the traced sizes but not another); mark fewer dimensions dynamic");
        sa.values.push_back(f);
      }
      n->sym_attrs.push_back(std::move(sa));
    }
  }
  g0.symbols() = names;
  return std::move(g0);
}

// Scalars computed from sizes (mean's divisor, in the forward or in a
// backward: div(sum(x), N)) are 0-d constants that change with the dynamic
// dimensions. When one holds an integer in every trace it becomes a `full`
// node whose value attribute generalize() then fits like any size.
void symbolize_size_scalars(const std::vector<Graph*>& gs) {
  auto v0 = values_by_id(*gs[0]);
  for (const Value* c : gs[0]->constants()) {
    if (c->data.dim() != 0) continue;
    std::vector<Value*> same;
    bool differs = false, integral = true, comparable = true;
    for (Graph* g : gs) {
      auto vs = values_by_id(*g);
      const Value* d = c->id < static_cast<int>(vs.size()) ? vs[c->id] : nullptr;
      if (!d || d->kind != ValueKind::kConstant || d->data.dim() != 0 || d->dtype != c->dtype) {
        comparable = false;  // the structure check reports it
        break;
      }
      double x = d->data.item<double>();
      integral = integral && std::isfinite(x) && x == std::round(x) && std::abs(x) < 9e15;
      differs = differs || !same_tensor(d->data, c->data);
      same.push_back(const_cast<Value*>(d));
    }
    if (!comparable || !differs || !integral) continue;
    // A wrapped Python-style number (div(x, 12.0)) promotes weakly: as a
    // tensor it takes the floating dtype of what it is combined into.
    DType dtype = c->dtype;
    if (c->data.impl()->wrapped_number && is_floating(dtype))
      for (const Node* n : gs[0]->nodes())
        if (std::find(n->inputs.begin(), n->inputs.end(), c) != n->inputs.end() && !n->outputs.empty() &&
            is_floating(n->outputs[0]->dtype)) {
          dtype = n->outputs[0]->dtype;
          break;
        }
    for (size_t i = 0; i < gs.size(); ++i) {
      Graph& g = *gs[i];
      auto nodes = g.nodes();
      auto value = static_cast<int64_t>(same[i]->data.item<double>());
      Node* n = g.add_node(ops::OpId::full, {},
                           ops::Attrs{{"shape", std::vector<int64_t>{}}, {"value", Scalar(value)}, {"dtype", dtype}},
                           {{dtype, SymShape{}}}, nodes.empty() ? nullptr : nodes.front());
      g.replace_uses(same[i], n->outputs[0]);
    }
  }
  for (Graph* g : gs) g->remove_unused();
}

// The example resized along its dynamic dims: elements repeat cyclically, so
// values stay in their domain (token ids, class labels).
Tensor resize_dims(const Tensor& x, const std::vector<std::pair<int, int64_t>>& dims) {
  Tensor y = x;
  for (auto [d, n] : dims) {
    int64_t have = x.shape()[d];
    Tensor idx = ops::remainder(arange(n, DType::I64), have);
    y = ops::index_select(y, d, idx);
  }
  return y;
}

}  // namespace

Graph capture(const Function& fn, const TensorList& inputs, const NamedTensors& params, const CaptureOptions& opts) {
  TS_CHECK(static_cast<bool>(fn), "compile: no function given");
  std::vector<std::string> names = opts.input_names;
  TS_CHECK(names.empty() || names.size() == inputs.size(), "compile: ", names.size(), " input names for ",
           inputs.size(), " inputs");
  for (size_t i = names.size(); i < inputs.size(); ++i) names.push_back("x" + std::to_string(i));
  for (size_t i = 0; i < inputs.size(); ++i)
    TS_CHECK(inputs[i].defined(), "compile: example input ", i, " ('", names[i], "') is an undefined tensor");

  // Symbols and where they appear.
  std::vector<std::string> syms;
  std::vector<int64_t> base;
  std::vector<std::vector<std::pair<int, int>>> where;  // per input: (dim, symbol)
  where.resize(inputs.size());
  for (const DynamicDim& d : opts.dynamic) {
    TS_CHECK(d.input >= 0 && d.input < static_cast<int>(inputs.size()), "compile: dynamic dimension '", d.name,
             "' refers to input ", d.input, ", but there are ", inputs.size(), " inputs");
    const Tensor& x = inputs[d.input];
    int dim = d.dim < 0 ? d.dim + static_cast<int>(x.dim()) : d.dim;
    TS_CHECK(dim >= 0 && dim < x.dim(), "compile: dynamic dimension '", d.name, "' is dim ", d.dim, " of input ",
             d.input, ", which has shape ", shape_str(x.shape()));
    TS_CHECK(!d.name.empty(), "compile: a dynamic dimension needs a name (\"B\", \"T\")");
    int64_t size = x.shape()[dim];
    auto it = std::find(syms.begin(), syms.end(), d.name);
    int sym = static_cast<int>(it - syms.begin());
    if (it == syms.end()) {
      TS_CHECK(size >= 2, "compile: the example's size of dynamic dimension '", d.name, "' is ", size,
               "; give an example of size 2 or more (sizes 0 and 1 are specialized, as broadcasting treats them "
               "differently)");
      syms.push_back(d.name);
      base.push_back(size);
    } else {
      TS_CHECK(base[sym] == size, "compile: dynamic dimension '", d.name, "' has size ", base[sym],
               " in one input and ", size, " in input ", d.input);
    }
    where[d.input].push_back({dim, sym});
  }

  if (syms.empty()) {
    Graph g = trace_once(fn, inputs, params, names, opts.grad);
    if (opts.check_constants && !g.constants().empty()) {
      TensorList flipped;
      for (const Tensor& x : inputs) {
        std::vector<int64_t> all(x.dim());
        for (int64_t i = 0; i < x.dim(); ++i) all[i] = i;
        flipped.push_back(x.dim() == 0 ? x : ops::flip(x, all).contiguous());
      }
      Graph g1 = trace_once(fn, flipped, params, names, opts.grad);
      check_same_structure(g, g1, "when the input values change");
      check_constants(g, g1, "with the input values");
    }
    verify(g, "capture");
    return g;
  }

  TS_CHECK(syms.size() <= 4, "compile: ", syms.size(), " dynamic dimensions; at most 4 are supported");
  auto at_sizes = [&](const std::vector<int64_t>& sizes) {
    TensorList xs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::vector<std::pair<int, int64_t>> dims;
      for (auto [d, sym] : where[i]) dims.push_back({d, sizes[sym]});
      xs.push_back(dims.empty() ? inputs[i] : resize_dims(inputs[i], dims));
    }
    return trace_once(fn, xs, params, names, opts.grad);
  };
  std::vector<Graph> corners;
  for (size_t m = 0; m < (size_t{1} << syms.size()); ++m) {
    std::vector<int64_t> sizes(base);
    for (size_t i = 0; i < syms.size(); ++i) sizes[i] += (m >> i) & 1;
    corners.push_back(at_sizes(sizes));
    if (m > 0) check_same_structure(corners[0], corners[m], "with the dynamic dimensions");
  }
  std::vector<int64_t> check_sizes(base);
  for (auto& c : check_sizes) c += 3;
  Graph check = at_sizes(check_sizes);
  {
    std::vector<Graph*> all;
    for (Graph& c : corners) all.push_back(&c);
    all.push_back(&check);
    symbolize_size_scalars(all);
  }
  for (size_t m = 1; m < corners.size(); ++m) check_constants(corners[0], corners[m], "with the dynamic dimensions");
  check_same_structure(corners[0], check, "with the dynamic dimensions");
  check_constants(corners[0], check, "with the dynamic dimensions");
  Graph g = generalize(corners, check, base, check_sizes, syms);
  verify(g, "capture");
  return g;
}

}  // namespace tessera::compile
