#include "tessera/compile/graph.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "tessera/core/error.h"

namespace tessera::compile {

// ---- SymInt -----------------------------------------------------------------

SymInt::SymInt(int64_t c) {
  if (c != 0) terms_.push_back({0u, c});
}
SymInt SymInt::symbol(int index) {
  TS_CHECK(index >= 0 && index < 31, "SymInt: symbol index ", index, " out of range (at most 31 dynamic dims)");
  SymInt s;
  s.terms_.push_back({1u << index, 1});
  return s;
}
SymInt SymInt::from_terms(std::vector<Term> terms) {
  std::sort(terms.begin(), terms.end());
  SymInt s;
  for (const Term& t : terms) {
    if (t.second == 0) continue;
    if (!s.terms_.empty() && s.terms_.back().first == t.first) s.terms_.back().second += t.second;
    else s.terms_.push_back(t);
  }
  std::erase_if(s.terms_, [](const Term& t) { return t.second == 0; });
  return s;
}
bool SymInt::is_static() const { return terms_.empty() || (terms_.size() == 1 && terms_[0].first == 0); }
int64_t SymInt::static_value() const {
  TS_INTERNAL_ASSERT(is_static());
  return terms_.empty() ? 0 : terms_[0].second;
}
int64_t SymInt::eval(std::span<const int64_t> symbols) const {
  int64_t v = 0;
  for (const auto& [mask, c] : terms_) {
    int64_t p = c;
    for (uint32_t m = mask, i = 0; m; m >>= 1, ++i)
      if (m & 1u) {
        TS_INTERNAL_ASSERT(i < symbols.size());
        p *= symbols[i];
      }
    v += p;
  }
  return v;
}
bool SymInt::depends_on(int symbol) const {
  for (const auto& t : terms_)
    if (t.first & (1u << symbol)) return true;
  return false;
}
std::string SymInt::str(const std::vector<std::string>& names) const {
  if (terms_.empty()) return "0";
  // Symbolic terms first, the constant last: "T - 1", "B*T + 2".
  std::vector<Term> order(terms_.begin(), terms_.end());
  if (order.size() > 1 && order[0].first == 0) std::rotate(order.begin(), order.begin() + 1, order.end());
  std::string s;
  for (size_t k = 0; k < order.size(); ++k) {
    auto [mask, c] = order[k];
    std::string mono;
    for (uint32_t m = mask, i = 0; m; m >>= 1, ++i)
      if (m & 1u) mono += (mono.empty() ? "" : "*") + (i < names.size() ? names[i] : "s" + std::to_string(i));
    if (k > 0) s += c < 0 ? " - " : " + ";
    else if (c < 0) s += "-";
    int64_t a = c < 0 ? -c : c;
    if (mono.empty()) s += std::to_string(a);
    else s += (a == 1 ? "" : std::to_string(a) + "*") + mono;
  }
  return s;
}

SymShape static_shape(IntArrayRef s) { return SymShape(s.begin(), s.end()); }
Shape eval_shape(const SymShape& s, std::span<const int64_t> symbols) {
  Shape out;
  for (const SymInt& d : s) out.push_back(d.eval(symbols));
  return out;
}

const char* kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::kInput: return "input";
    case ValueKind::kParameter: return "parameter";
    case ValueKind::kConstant: return "constant";
    case ValueKind::kNode: return "value";
  }
  return "?";
}

// ---- Graph ------------------------------------------------------------------

Value* Graph::new_value(ValueKind k) {
  values_.push_back(std::make_unique<Value>());
  Value* v = values_.back().get();
  v->id = next_value_id_++;
  v->kind = k;
  return v;
}

Value* Graph::add_input(std::string name, DType dtype, SymShape shape) {
  Value* v = new_value(ValueKind::kInput);
  v->name = std::move(name);
  v->dtype = dtype;
  v->shape = std::move(shape);
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_parameter(std::string name, const Tensor& t) {
  Value* v = new_value(ValueKind::kParameter);
  v->name = std::move(name);
  v->dtype = t.dtype();
  v->shape = static_shape(t.shape());
  v->data = t;
  return v;
}

Value* Graph::add_constant(const Tensor& t) {
  Value* v = new_value(ValueKind::kConstant);
  v->dtype = t.dtype();
  v->shape = static_shape(t.shape());
  v->data = t;
  return v;
}

Node* Graph::add_node(ops::OpId op, std::vector<Value*> inputs, ops::Attrs attrs,
                      const std::vector<std::pair<DType, SymShape>>& outputs, Node* before) {
  auto n = std::make_unique<Node>();
  n->id = next_node_id_++;
  n->op = op;
  n->inputs = std::move(inputs);
  n->attrs = std::move(attrs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    Value* v = new_value(ValueKind::kNode);
    v->dtype = outputs[i].first;
    v->shape = outputs[i].second;
    v->producer = n.get();
    v->index = static_cast<int>(i);
    n->outputs.push_back(v);
  }
  Node* raw = n.get();
  if (before == nullptr) {
    nodes_.push_back(std::move(n));
  } else {
    auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& p) { return p.get() == before; });
    TS_INTERNAL_ASSERT(it != nodes_.end());
    nodes_.insert(it, std::move(n));
  }
  return raw;
}

void Graph::replace_uses(Value* from, Value* to) {
  for (auto& n : nodes_)
    for (Value*& v : n->inputs)
      if (v == from) v = to;
  for (Value*& v : outputs_)
    if (v == from) v = to;
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

std::vector<Value*> Graph::parameters() const {
  std::vector<Value*> out;
  for (const auto& v : values_)
    if (v->kind == ValueKind::kParameter) out.push_back(v.get());
  return out;
}
std::vector<Value*> Graph::constants() const {
  std::vector<Value*> out;
  for (const auto& v : values_)
    if (v->kind == ValueKind::kConstant) out.push_back(v.get());
  return out;
}

std::vector<std::vector<Node*>> Graph::uses() const {
  std::vector<std::vector<Node*>> u(next_value_id_);
  for (const auto& n : nodes_)
    for (Value* v : n->inputs)
      if (v && (u[v->id].empty() || u[v->id].back() != n.get())) u[v->id].push_back(n.get());
  return u;
}
std::vector<bool> Graph::is_output() const {
  std::vector<bool> o(next_value_id_, false);
  for (Value* v : outputs_) o[v->id] = true;
  return o;
}

void Graph::erase(Node* n) {
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& p) { return p.get() == n; });
  TS_INTERNAL_ASSERT(it != nodes_.end());
  nodes_.erase(it);
}

int Graph::remove_unused() {
  // Walk backwards: a node is live if one of its outputs is a graph output or
  // an input of a live node. Random ops are kept only when used, like others:
  // an unused draw changes no result (the generator offset aside, which the
  // graph does not promise).
  std::vector<bool> live(next_value_id_, false);
  for (Value* v : outputs_) live[v->id] = true;
  std::vector<std::unique_ptr<Node>> kept;
  int removed = 0;
  for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
    Node* n = it->get();
    bool used = std::any_of(n->outputs.begin(), n->outputs.end(), [&](Value* v) { return live[v->id]; });
    if (!used) {
      ++removed;
      continue;
    }
    for (Value* v : n->inputs)
      if (v) live[v->id] = true;
    kept.push_back(std::move(*it));
  }
  std::reverse(kept.begin(), kept.end());
  nodes_ = std::move(kept);
  for (Value* v : inputs_) live[v->id] = true;  // inputs stay: they are the signature
  for (const auto& n : nodes_)  // outputs of a kept node stay with it, even unused ones
    for (Value* v : n->outputs) live[v->id] = true;
  std::erase_if(values_, [&](const auto& v) { return !live[v->id]; });
  return removed;
}

void Graph::renumber() {
  int id = 0;
  for (Value* v : inputs_) v->id = id++;
  for (Value* v : parameters()) v->id = id++;
  for (Value* v : constants()) v->id = id++;
  for (auto& n : nodes_)
    for (Value* v : n->outputs) v->id = id++;
  next_value_id_ = id;
}

Graph Graph::clone() const {
  Graph g;
  g.symbols_ = symbols_;
  g.next_node_id_ = next_node_id_;
  std::unordered_map<const Value*, Value*> map;
  for (const auto& v : values_) {
    auto c = std::make_unique<Value>(*v);
    c->producer = nullptr;
    map[v.get()] = c.get();
    g.values_.push_back(std::move(c));
  }
  g.next_value_id_ = next_value_id_;
  for (const auto& n : nodes_) {
    auto c = std::make_unique<Node>(*n);
    for (Value*& v : c->inputs)
      if (v) v = map.at(v);
    for (Value*& v : c->outputs) {
      v = map.at(v);
      v->producer = c.get();
    }
    g.nodes_.push_back(std::move(c));
  }
  for (Value* v : inputs_) g.inputs_.push_back(map.at(v));
  for (Value* v : outputs_) g.outputs_.push_back(map.at(v));
  return g;
}

}  // namespace tessera::compile
