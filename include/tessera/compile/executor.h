#pragma once
// Runs a graph: an interpreter over its nodes that calls each op through its
// invoker, keeps values in slots, and drops each value after its last use.
// One Executable may run on many threads at once: each run has its own slots;
// parameters and constants are shared read-only.
#include "tessera/compile/graph.h"

namespace tessera::compile {

class Executable {
 public:
  explicit Executable(Graph g);

  // Inputs are checked against the graph's signature (count, dtype, rank,
  // static sizes, consistent dynamic sizes); outputs in graph order.
  TensorList run(const TensorList& inputs) const;

  const Graph& graph() const { return graph_; }
  // The values of the symbols for these inputs (after the same checks).
  std::vector<int64_t> bind_symbols(const TensorList& inputs) const;

 private:
  struct Step {
    const Node* node;
    std::vector<int> inputs;   // slot per input (-1: absent)
    std::vector<int> outputs;  // slot per output
    std::vector<int> release;  // slots whose last use is this step
  };
  Graph graph_;
  std::vector<Step> steps_;
  std::vector<std::pair<int, Tensor>> fixed_;  // parameter and constant slots
  int num_slots_ = 0;
};

}  // namespace tessera::compile
