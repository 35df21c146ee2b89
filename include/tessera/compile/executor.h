#pragma once
// Runs a graph: an interpreter over its nodes that calls each op through its
// invoker, keeps values in slots, and drops each value after its last use.
// One Executable may run on many threads at once: each run has its own slots;
// parameters and constants are shared read-only.
#include <atomic>
#include <map>
#include <mutex>

#include "tessera/compile/graph.h"

namespace tessera::compile {

// Static memory plan for one binding of the dynamic dimensions: node outputs
// that die before the run ends share one arena, by liveness (greedy by size:
// the largest value first, each at the lowest offset free for its lifetime).
// Graph outputs, and values that ops may return views of, are not planned.
struct MemoryPlan {
  std::vector<int64_t> offset;  // per value id; -1: not planned
  std::vector<int64_t> bytes;   // per value id
  int64_t arena_bytes = 0;      // the planned peak of the arena
  int64_t planned_bytes = 0;    // the planned values' bytes added up (no reuse)
  int planned_values = 0;
  int in_place_values = 0;      // outputs planned in the place of an input that dies at their node
};

class Executable {
 public:
  // `plan_memory`: run with a static memory plan (see MemoryPlan).
  explicit Executable(Graph g, bool plan_memory = true);

  // Inputs are checked against the graph's signature (count, dtype, rank,
  // static sizes, consistent dynamic sizes); outputs in graph order.
  TensorList run(const TensorList& inputs) const;

  const Graph& graph() const { return graph_; }
  // The values of the symbols for these inputs (after the same checks).
  std::vector<int64_t> bind_symbols(const TensorList& inputs) const;
  // The plan used for inputs with these symbol values.
  std::shared_ptr<const MemoryPlan> memory_plan(const std::vector<int64_t>& symbols) const;
  // Outputs that came back as views of arena memory they could not keep, and were copied.
  int64_t alias_copies() const { return alias_copies_.load(); }
  // Planned places a node's output took, and planned places left unused
  // (the op returned memory of its own), over all runs.
  int64_t planned_taken() const { return planned_taken_.load(); }
  int64_t planned_unused() const { return planned_unused_.load(); }

 private:
  struct Step {
    const Node* node;
    std::vector<int> inputs;   // slot per input (-1: absent)
    std::vector<int> outputs;  // slot per output
    std::vector<int> release;  // slots whose last use is this step
  };
  MemoryPlan make_plan(const std::vector<int64_t>& symbols) const;
  Tensor take_arena(int64_t bytes) const;
  void give_back_arena(Tensor arena) const;

  Graph graph_;
  bool plan_memory_;
  std::vector<Step> steps_;
  std::vector<int> alias_of_;   // per value id: the value whose memory it may share (-1: fresh)
  std::vector<int> def_step_;   // per value id: the step that defines it (-1: not a node output)
  std::vector<int> end_step_;   // per value id: last step that needs its memory (aliases included)
  // In-place chains: per value id, the first value of the chain of outputs
  // written over inputs that die at their node (itself if none), and per chain
  // head the last step any member needs. A chain shares one place in the plan.
  std::vector<int> chain_head_;
  std::vector<int> chain_end_;
  mutable std::mutex plan_mu_;
  mutable std::map<std::vector<int64_t>, std::shared_ptr<const MemoryPlan>> plans_;
  mutable std::atomic<int64_t> alias_copies_{0}, planned_taken_{0}, planned_unused_{0};
  std::vector<std::pair<int, Tensor>> fixed_;  // parameter and constant slots
  mutable std::mutex arena_mu_;
  mutable std::vector<Tensor> arenas_;  // kept between runs, largest first
  mutable std::atomic<int> running_{0}, max_concurrent_{0};
  int num_slots_ = 0;
};

}  // namespace tessera::compile
