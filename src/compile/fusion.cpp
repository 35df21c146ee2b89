// Elementwise fusion: connected pointwise ops become one fused_elementwise
// node, whose kernel reads the group's inputs once and writes its outputs once.
#include <algorithm>
#include <unordered_map>

#include "ops/op_utils.h"
#include "tessera/compile/passes.h"
#include "tessera/core/numbers.h"
#include "tessera/core/error.h"

namespace tessera::compile {
namespace {

using ops::OpId;

bool float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }

// A 0-d constant (a wrapped Python-style number): an immediate in the program,
// converted to f32 as the eager op converts it.
bool scalar_constant(const Value* v) {
  return v->kind == ValueKind::kConstant && v->data.dim() == 0 && v->dtype != DType::Bool;
}

// The node's fused-kernel instruction, or "" if it cannot join a fused kernel.
std::string instruction(const Node* n) {
  if (n->outputs.size() != 1 || n->outputs[0]->dtype != DType::F32 || !n->sym_attrs.empty()) return "";
  if (n->outputs[0]->data_dependent_shape) return "";
  auto k = ops::elementwise_kernel(n->op, n->attrs, static_cast<int>(n->inputs.size()));
  if (!k) return "";
  for (size_t i = 0; i < n->inputs.size(); ++i) {
    const Value* v = n->inputs[i];
    if (!v) return "";
    bool cond = n->op == OpId::where && i == 0;
    if (cond ? v->dtype != DType::Bool : !(float_dtype(v->dtype) || scalar_constant(v))) return "";
  }
  return *k;
}

// b == broadcast(a, b): `a` broadcasts into `b` (sizes equal or a's is 1).
bool broadcasts_into(const SymShape& a, const SymShape& b) {
  if (a.size() > b.size()) return false;
  size_t off = b.size() - a.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[off + i]) && !(a[i].is_static() && a[i].static_value() == 1)) return false;
  return true;
}

struct Group {
  std::vector<Node*> members;  // in graph order
  SymShape shape;
  int first = 0;  // position of the first member
};

}  // namespace

int fuse_elementwise(Graph& g) {
  auto nodes = g.nodes();
  auto uses = g.uses();
  auto is_out = g.is_output();
  std::unordered_map<const Node*, int> pos;
  for (size_t i = 0; i < nodes.size(); ++i) pos[nodes[i]] = static_cast<int>(i);
  std::vector<Group> groups;
  std::unordered_map<const Node*, int> group_of;
  std::unordered_map<const Node*, std::string> instr;

  // A value defined before position p (so a fused node placed at p can read it).
  auto before = [&](const Value* v, int p) { return v->kind != ValueKind::kNode || pos.at(v->producer) < p; };
  // Every use of every member's output stays inside the group (plus `extra`).
  auto internal_only = [&](const Group& gr, const Node* extra) {
    for (const Node* m : gr.members) {
      const Value* out = m->outputs[0];
      if (is_out[out->id]) return false;
      for (const Node* u : uses[out->id])
        if (u != extra && (!group_of.count(u) || group_of.at(u) != group_of.at(m))) return false;
    }
    return true;
  };

  for (Node* n : nodes) {
    std::string ins = instruction(n);
    if (ins.empty()) continue;
    instr[n] = ins;
    const SymShape& shape = n->outputs[0]->shape;
    int chosen = -1;
    for (const Value* v : n->inputs) {
      if (v->kind != ValueKind::kNode || !group_of.count(v->producer)) continue;
      int gi = group_of.at(v->producer);
      if (gi == chosen) continue;
      Group& gr = groups[gi];
      // All inputs from outside the group must exist before the group starts.
      bool ok = true;
      for (const Value* w : n->inputs)
        if (!(w->kind == ValueKind::kNode && group_of.count(w->producer) && group_of.at(w->producer) == gi))
          ok = ok && before(w, gr.first);
      // Same shape, or the group is wholly consumed by n, which broadcasts it up.
      bool same = shape == gr.shape;
      ok = ok && (same || (broadcasts_into(gr.shape, shape) && internal_only(gr, n)));
      if (ok && (chosen < 0 || gr.first > groups[chosen].first)) chosen = gi;
    }
    if (chosen < 0) {
      groups.push_back({{n}, shape, pos.at(n)});
      group_of[n] = static_cast<int>(groups.size()) - 1;
      continue;
    }
    groups[chosen].members.push_back(n);
    groups[chosen].shape = shape;
    group_of[n] = chosen;
    // n may join other groups it reads (a diamond: two chains meeting in n)
    // into this one, when every member's outside inputs exist before the
    // merged group starts and shapes agree.
    for (const Value* v : n->inputs) {
      if (v->kind != ValueKind::kNode || !group_of.count(v->producer)) continue;
      int other = group_of.at(v->producer);
      if (other == chosen) continue;
      Group& a = groups[chosen];
      Group& b = groups[other];
      if (!(b.shape == a.shape) && !(broadcasts_into(b.shape, a.shape) && internal_only(b, n))) continue;
      int first = std::min(a.first, b.first);
      bool ok = true;
      for (const Group* gr : {&a, &b})
        for (const Node* m : gr->members)
          for (const Value* w : m->inputs) {
            bool inside = w->kind == ValueKind::kNode && group_of.count(w->producer) &&
                          (group_of.at(w->producer) == chosen || group_of.at(w->producer) == other);
            ok = ok && (inside || before(w, first));
          }
      if (!ok) continue;
      for (Node* m : b.members) {
        group_of[m] = chosen;
        a.members.push_back(m);
      }
      b.members.clear();
      std::sort(a.members.begin(), a.members.end(), [&](const Node* x, const Node* y) { return pos.at(x) < pos.at(y); });
      a.first = first;
    }
  }

  int fused = 0;
  for (const Group& gr : groups) {
    if (gr.members.size() < 2) continue;
    std::unordered_map<const Value*, int> reg;
    std::vector<Value*> inputs;
    std::string prog;
    int next = 0;
    auto operand = [&](Value* v) {
      if (auto it = reg.find(v); it != reg.end()) return it->second;
      int r = next++;
      if (scalar_constant(v)) {
        prog += "r" + std::to_string(r) + " = const " + format_double(v->data.item().to_double()) + "; ";
      } else {
        prog += "r" + std::to_string(r) + " = in" + std::to_string(inputs.size()) + "; ";
        inputs.push_back(v);
      }
      reg[v] = r;
      return r;
    };
    for (Node* m : gr.members) {
      std::vector<int> srcs;
      for (Value* v : m->inputs) srcs.push_back(operand(v));
      int r = next++;
      prog += "r" + std::to_string(r) + " = " + instr.at(m);
      for (int s : srcs) prog += " r" + std::to_string(s);
      prog += "; ";
      reg[m->outputs[0]] = r;
    }
    // Outputs: member values read outside the group.
    std::vector<Value*> outs;
    for (Node* m : gr.members) {
      Value* v = m->outputs[0];
      bool external = is_out[v->id];
      for (const Node* u : uses[v->id]) external = external || !group_of.count(u) || group_of.at(u) != group_of.at(m);
      if (!external) continue;
      TS_INTERNAL_ASSERT(v->shape == gr.shape);
      prog += "out" + std::to_string(outs.size()) + " = r" + std::to_string(reg.at(v)) + "; ";
      outs.push_back(v);
    }
    prog.resize(prog.size() - 2);
    std::vector<std::pair<DType, SymShape>> types(outs.size(), {DType::F32, gr.shape});
    Node* f = g.add_node(OpId::fused_elementwise, inputs, ops::Attrs{{"program", prog}}, types, gr.members.front());
    f->scope = gr.members.front()->scope;
    for (size_t k = 0; k < outs.size(); ++k) g.replace_uses(outs[k], f->outputs[k]);
    ++fused;
  }
  if (fused) eliminate_dead_code(g);
  return fused;
}

}  // namespace tessera::compile
