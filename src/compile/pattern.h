#pragma once
// Helpers of the passes that match op patterns in a graph (fuse_attention,
// fuse_gelu): who reads a value, which node made it, and the value of a
// scalar constant.
#include <functional>
#include <optional>
#include <vector>

#include "tessera/compile/graph.h"
#include "tessera/compile/passes.h"
#include "tessera/ops/op_table.h"

namespace tessera::compile {

// Each value's readers, and whether it is a graph output (by value id).
struct Uses {
  std::vector<std::vector<Node*>> of;
  std::vector<bool> is_out;
  explicit Uses(const Graph& g) : of(g.uses()), is_out(g.is_output()) {}
};

// The node producing v if it is `op` and v is read by that one node only (so
// a rewrite may drop it).
inline Node* single_use_producer(const Value* v, ops::OpId op, const Uses& u) {
  if (!v || v->kind != ValueKind::kNode || v->producer->op != op) return nullptr;
  if (u.is_out[v->id] || u.of[v->id].size() != 1) return nullptr;
  return v->producer;
}

// The value of a one-element float constant (or, in an inference graph, a
// frozen parameter: ONNX initializers import as parameters).
inline std::optional<double> scalar_of(const Value* v, bool inference) {
  if (!v || !(v->kind == ValueKind::kConstant || (inference && v->kind == ValueKind::kParameter))) return {};
  if (!v->data.defined() || v->data.numel() != 1 || !is_floating(v->data.dtype())) return {};
  return v->data.to(DType::F64).item<double>();
}

// Offers each node to `rewrite` (which returns whether it changed the graph)
// until a pass over all nodes changes nothing; the readers are recomputed
// and dead nodes removed after each change. Returns the number of rewrites.
inline int rewrite_until_done(Graph& g, const std::function<bool(Node*, const Uses&)>& rewrite) {
  int changes = 0;
  for (bool again = true; again;) {
    again = false;
    Uses u(g);
    for (Node* n : g.nodes()) {
      if (rewrite(n, u)) {
        ++changes;
        again = true;
        break;  // the readers changed
      }
    }
    if (again) eliminate_dead_code(g);
  }
  return changes;
}

}  // namespace tessera::compile
