// The text form of a graph (compile::dump) and the verifier.
#include <sstream>
#include <unordered_set>

#include "tessera/compile/graph.h"
#include "tessera/core/error.h"
#include "tessera/ops/op_table.h"

namespace tessera::compile {
namespace {

std::string type_str(const Value* v, const std::vector<std::string>& syms) {
  std::string s = std::string(dtype_name(v->dtype)) + "[";
  for (size_t i = 0; i < v->shape.size(); ++i) s += (i ? ", " : "") + v->shape[i].str(syms);
  return s + (v->data_dependent_shape ? "]?" : "]");  // "?": the traced shape, set by the data
}

// A constant's contents when short enough to read.
std::string constant_str(const Tensor& t) {
  if (t.numel() == 1) {
    std::ostringstream os;
    os << t.item();
    return os.str();
  }
  return "<" + std::to_string(t.numel()) + " elements>";
}

std::string attr_text(const Node* n, const ops::Attr& a, const std::vector<std::string>& syms) {
  for (const Node::SymAttr& s : n->sym_attrs) {
    if (s.name != a.name) continue;
    std::string t = s.is_list ? "[" : "";
    for (size_t i = 0; i < s.values.size(); ++i) t += (i ? ", " : "") + s.values[i].str(syms);
    return s.is_list ? t + "]" : t;
  }
  return ops::attr_str(a.value);
}

}  // namespace

std::string value_str(const Value* v) {
  if (v == nullptr) return "none";
  switch (v->kind) {
    case ValueKind::kInput:
    case ValueKind::kParameter: return "%" + v->name;
    case ValueKind::kConstant: return "%c" + std::to_string(v->id);
    case ValueKind::kNode: return "%" + std::to_string(v->id);
  }
  return "?";
}

std::string dump(const Graph& g) {
  const auto& syms = g.symbols();
  std::ostringstream os;
  os << "graph(";
  for (size_t i = 0; i < g.inputs().size(); ++i)
    os << (i ? ", " : "") << value_str(g.inputs()[i]) << ": " << type_str(g.inputs()[i], syms);
  os << ")";
  if (!syms.empty()) {
    os << "  # dynamic:";
    for (const auto& s : syms) os << " " << s;
  }
  os << " {\n";
  for (const Value* p : g.parameters()) os << "  " << value_str(p) << ": " << type_str(p, syms) << " = parameter\n";
  for (const Value* c : g.constants())
    os << "  " << value_str(c) << ": " << type_str(c, syms) << " = constant " << constant_str(c->data) << "\n";
  for (const Node* n : g.nodes()) {
    std::string lhs;
    for (size_t i = 0; i < n->outputs.size(); ++i)
      lhs += (i ? ", " : "") + value_str(n->outputs[i]) + ": " + type_str(n->outputs[i], syms);
    os << "  " << (n->outputs.size() == 1 ? lhs : "(" + lhs + ")") << " = " << n->op_name() << "(";
    bool first = true;
    for (const Value* v : n->inputs) {
      os << (first ? "" : ", ") << value_str(v);
      first = false;
    }
    for (const ops::Attr& a : n->attrs.items()) {
      os << (first ? "" : ", ") << a.name << "=" << attr_text(n, a, syms);
      first = false;
    }
    os << ")";
    if (!n->scope.empty()) os << "  # " << n->scope;
    os << "\n";
  }
  os << "  return (";
  for (size_t i = 0; i < g.outputs().size(); ++i) os << (i ? ", " : "") << value_str(g.outputs()[i]);
  os << ")\n}\n";
  return os.str();
}

namespace {
// The node's inputs and outputs against its op's signature in ops.def: a
// graph from a file may have too few, too many, or null where a tensor is
// required (the passes and invokers index them).
template <typename Fail>
void check_arity(const Node& n, const Fail& fail) {
  const ops::OpEntry& e = ops::op_entry(n.op);
  const int k = static_cast<int>(n.inputs.size()), m = static_cast<int>(n.outputs.size());
  if (!e.in.variadic && (k < e.in.min || k > e.in.max))
    fail(&n, "takes " + std::to_string(e.in.min) + (e.in.max > e.in.min ? " to " + std::to_string(e.in.max) : "") +
                 " inputs (" + std::string(e.inputs) + "), got " + std::to_string(k));
  for (int i = 0; i < k; ++i)
    if (!n.inputs[i] && (e.in.variadic || i < e.in.required))
      fail(&n, "input " + std::to_string(i) + " (of " + std::string(e.inputs) + ") must not be null");
  if (!e.out.variadic && (m < e.out.min || m > e.out.max))
    fail(&n, "has " + std::to_string(m) + " outputs; the op returns " + std::string(e.outputs));
}

// Only an op whose ops.def row says kBlocked takes channel-blocked tensors
// by attribute (the layout pass must not hand them to any other).
template <typename Fail>
void check_layout(const Node& n, const Fail& fail) {
  if (ops::op_entry(n.op).layout == ops::Layout::kBlocked) return;
  for (const char* name : {"input_block", "output_block", "channel_block"})
    if (const ops::AttrValue* a = n.attrs.find(name); a && std::holds_alternative<int64_t>(*a) && std::get<int64_t>(*a))
      fail(&n, std::string("has a nonzero '") + name + "' but its ops.def row declares no blocked layout");
}
}  // namespace

void verify(const Graph& g, const std::string& after) {
  std::string where = after.empty() ? "" : " (after pass '" + after + "')";
  auto fail = [&](const Node* n, const std::string& what) {
    TS_ERROR("graph verifier", where, ": ",
             n ? "node " + std::to_string(n->id) + " (" + std::string(n->op_name()) + "): " : "", what);
  };
  std::unordered_set<const Value*> defined;
  std::unordered_set<int> ids;
  for (const Value* v : g.inputs()) {
    if (v->kind != ValueKind::kInput) fail(nullptr, "graph input " + value_str(v) + " is not of kind input");
    defined.insert(v);
  }
  for (const Value* v : g.parameters()) {
    if (!v->data.defined() || v->data.dtype() != v->dtype || static_shape(v->data.shape()) != v->shape)
      fail(nullptr, "parameter " + value_str(v) + " does not match its tensor");
    defined.insert(v);
  }
  for (const Value* v : g.constants()) {
    if (!v->data.defined() || v->data.dtype() != v->dtype || static_shape(v->data.shape()) != v->shape)
      fail(nullptr, "constant " + value_str(v) + " does not match its tensor");
    defined.insert(v);
  }
  for (const Node* n : g.nodes()) {
    if (!ids.insert(n->id).second) fail(n, "node id used twice");
    if (static_cast<int>(n->op) >= ops::op_count()) fail(n, "invalid op id");
    check_arity(*n, fail);
    check_layout(*n, fail);
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Value* v = n->inputs[i];
      if (v && !defined.count(v))
        fail(n, "input " + std::to_string(i) + " (" + value_str(v) + ") is not defined before the node");
    }
    if (n->outputs.empty()) fail(n, "has no outputs");
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      const Value* v = n->outputs[i];
      if (v->kind != ValueKind::kNode || v->producer != n || v->index != static_cast<int>(i))
        fail(n, "output " + std::to_string(i) + " does not point back to its node");
      if (!defined.insert(v).second) fail(n, "output " + value_str(v) + " is defined twice");
    }
    for (const Node::SymAttr& s : n->sym_attrs) {
      const ops::AttrValue* a = n->attrs.find(s.name);
      if (!a) fail(n, "symbolic attribute '" + s.name + "' is not an attribute of the node");
      const auto* list = std::get_if<std::vector<int64_t>>(a);
      if (s.is_list ? !list : !(std::holds_alternative<int64_t>(*a) || std::holds_alternative<Scalar>(*a)))
        fail(n, "symbolic attribute '" + s.name + "' must be " + (s.is_list ? "a list of ints" : "an int"));
      size_t want = s.is_list ? list->size() : 1;
      if (s.values.size() != want) fail(n, "symbolic attribute '" + s.name + "' has the wrong number of values");
      for (const SymInt& x : s.values)
        for (const auto& t : x.terms())
          if (t.first >> g.symbols().size()) fail(n, "symbolic attribute uses an unknown dynamic dimension");
    }
  }
  if (g.outputs().empty()) fail(nullptr, "the graph has no outputs");
  for (const Value* v : g.outputs())
    if (!defined.count(v)) fail(nullptr, "graph output " + value_str(v) + " is not defined");
}

}  // namespace tessera::compile
