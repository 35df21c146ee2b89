#include "tessera/compile/executor.h"

#include "tessera/core/error.h"

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

}  // namespace

Executable::Executable(Graph g) : graph_(std::move(g)) {
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
    std::string sig = std::string(dtype_name(v->dtype)) + sym_shape_str(v->shape, names);
    TS_CHECK(x.defined(), "compiled graph: input '", v->name, "' is an undefined tensor; expected ", sig);
    TS_CHECK(x.dtype() == v->dtype && x.dim() == static_cast<int64_t>(v->shape.size()), "compiled graph: input '",
             v->name, "' is ", dtype_name(x.dtype()), shape_str(x.shape()), "; expected ", sig);
    for (size_t d = 0; d < v->shape.size(); ++d) {
      int64_t have = x.shape()[d];
      int s = pure_symbol(v->shape[d]);
      if (s < 0) {
        TS_CHECK(v->shape[d].is_static() && v->shape[d].static_value() == have, "compiled graph: input '", v->name,
                 "' has size ", have, " in dim ", d, " (shape ", shape_str(x.shape()), "); expected ", sig);
      } else if (syms[s] < 0) {
        TS_CHECK(have >= 2, "compiled graph: dynamic dimension ", names[s], " of input '", v->name, "' is ", have,
                 "; a graph with dynamic dimensions runs sizes of 2 and more (sizes 0 and 1 get their own "
                 "graph from compile())");
        syms[s] = have;
      } else {
        TS_CHECK(syms[s] == have, "compiled graph: dynamic dimension ", names[s], " is ", syms[s],
                 " in one input and ", have, " in input '", v->name, "'");
      }
    }
  }
  return syms;
}

TensorList Executable::run(const TensorList& inputs) const {
  std::vector<int64_t> syms = bind_symbols(inputs);
  std::vector<Tensor> slots(num_slots_);
  for (size_t i = 0; i < inputs.size(); ++i) slots[graph_.inputs()[i]->id] = inputs[i];
  for (const auto& [slot, t] : fixed_) slots[slot] = t;
  TensorList args;
  for (const Step& s : steps_) {
    args.clear();
    for (int id : s.inputs) args.push_back(id >= 0 ? slots[id] : Tensor());
    TensorList outs = s.node->sym_attrs.empty() ? ops::invoke(s.node->op, args, s.node->attrs)
                                                : ops::invoke(s.node->op, args, resolve(*s.node, syms));
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
  return out;
}

}  // namespace tessera::compile
