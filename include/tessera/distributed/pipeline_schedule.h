#pragma once
// Pipeline schedules as data: each rank of a pipeline runs a list of actions
// (forward micro-batch i on stage s, backward it, send or receive an
// activation or its gradient), made by a generator and checked before the
// first step, so a schedule that would hang or run a backward before its
// forward is an error naming the action, never a hang.
//
//   Schedule s = one_f_one_b(/*ranks=*/4, /*micro_batches=*/8);
//   check_schedule(s);                     // throws on a bad schedule
//   simulate(s).bubble                     // 3 / 11 with unit costs
//
// Stages: with v virtual stages per rank (interleaved 1F1B) the model is cut
// into p * v stages, and rank r holds stages r, r + p, r + 2p, ... (Megatron's
// layout), so activations still flow from rank r to rank r + 1 and the last
// stage's rank wraps to the first.
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::distributed {

enum class PipeOp { kForward, kBackward, kSendActivation, kRecvActivation, kSendGrad, kRecvGrad };
const char* pipe_op_name(PipeOp op);

struct PipeAction {
  PipeOp op;
  int stage = 0;  // the model stage the action is for (0 .. stages - 1)
  int micro = 0;  // the micro-batch
  bool operator==(const PipeAction&) const = default;
  std::string str() const;  // "F3@s1", "recv-act3@s1"
};

struct Schedule {
  std::string name;  // "gpipe", "1f1b", "interleaved"
  int ranks = 1, micro_batches = 1, virtual_stages = 1;
  std::vector<std::vector<PipeAction>> actions;  // by rank
  int stages() const { return ranks * virtual_stages; }
  int rank_of(int stage) const { return stage % ranks; }
};

// Every forward, then every backward (GPipe): each rank holds all m
// micro-batches' activations at its peak.
Schedule gpipe(int ranks, int micro_batches);
// One forward, one backward (PipeDream-flush, Megatron's default): rank r
// runs p - r - 1 forwards ahead, then alternates, holding at most p
// micro-batches at a time. micro_batches must be at least ranks.
Schedule one_f_one_b(int ranks, int micro_batches);
// 1F1B over v virtual stages per rank (Megatron's interleaved schedule):
// the bubble shrinks by v. micro_batches must be a multiple of ranks.
Schedule interleaved_1f1b(int ranks, int micro_batches, int virtual_stages);
// By name: "gpipe", "1f1b" or "interleaved" (virtual_stages > 1 for the last).
Schedule make_schedule(const std::string& name, int ranks, int micro_batches, int virtual_stages = 1);

// Throws, naming the rank and the action, unless: every (stage, micro-batch)
// is run forward and backward exactly once, on the stage's rank, the forward
// first; every send has its receive on the neighbouring rank and comes after
// the compute that makes its data, every receive before the compute that
// uses it; and the ranks, running their lists, never wait on one another in
// a circle (simulate() would not finish).
void check_schedule(const Schedule& s);

// The schedule run with a forward taking `forward` time units and a
// backward `backward` (sends and receives free): when each rank is busy and
// how long the whole takes.
struct Simulation {
  double makespan = 0;
  double bubble = 0;  // 1 - busy time / (ranks * makespan)
  std::vector<int> peak_in_flight;  // per rank: most micro-batches forwarded, not yet backwarded
  std::vector<std::vector<std::pair<double, double>>> busy;  // per rank: [start, end) of each compute
};
Simulation simulate(const Schedule& s, double forward = 1, double backward = 1);

// (p - 1) / (m + p - 1): the bubble of GPipe and 1F1B with equal stage costs;
// interleaving divides the p - 1 by v.
double ideal_bubble(int ranks, int micro_batches, int virtual_stages = 1);

}  // namespace tessera::distributed
