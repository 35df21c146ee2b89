#pragma once
// The profiler: where every millisecond and every byte went.
//
//   profiler::Profiler prof;          // records from construction (or start())
//   ... run some steps ...
//   prof.stop();
//   std::cout << prof.table();        // per op: calls, self/total time, FLOPs, bytes
//   std::cout << prof.memory_table(); // the peak, and what was alive at it
//   prof.export_chrome_trace("trace.json");  // open in Perfetto / chrome://tracing
//
// It listens to the trace points (core/trace.h): op scopes, autograd nodes,
// module scopes and allocations. Ops are grouped by name and by module path,
// forward and backward separately. Memory is a timeline of allocations and
// frees, each tagged with the op, module path and phase that made it; at the
// peak, every live block is attributed to a module and a kind.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/core/trace.h"

namespace tessera::profiler {

struct ProfilerOptions {
  bool record_memory = true;  // allocation timeline, peak attribution, memory track
  bool record_shapes = false; // input shapes in the trace events' args
};

enum class Phase : uint8_t { kForward, kBackward, kOptimizer, kOther };
const char* phase_name(Phase p);

// What a block of memory was for.
enum class MemoryKind : uint8_t {
  kParameter,
  kGradient,
  kOptimizerState,
  kActivation,  // made by a forward op and alive after it returned
  kTemporary,   // freed before the op (or backward node) that made it returned
  kBackward,    // made during backward and alive after its node: gradients in flight
  kInput,       // made outside any op or phase (data batches, user tensors)
  kExisting,    // alive before profiling started and not labelled
};
const char* kind_name(MemoryKind k);

// One row of the op table.
struct OpStat {
  std::string name;    // op name; backward nodes read "<op>_backward"
  std::string module;  // module path ("" = top level) when grouped by module
  Phase phase = Phase::kForward;
  int64_t calls = 0;
  int64_t self_ns = 0;   // excluding nested op scopes
  int64_t total_ns = 0;  // including them
  int64_t flops = 0;
  int64_t bytes = 0;  // bytes read (tensor inputs) + bytes newly allocated (outputs, buffers)
};

enum class GroupBy : uint8_t { kOp, kModule };

// What was alive at the memory peak.
struct PeakBlock {
  std::string module;
  std::string op;
  Phase phase;
  MemoryKind kind;
  int64_t bytes;
};
struct MemoryReport {
  int64_t peak_bytes = 0;        // live bytes at the peak (same accounting as memory_stats())
  int64_t peak_time_ns = 0;      // since start
  int64_t start_bytes = 0;       // live bytes when profiling started
  int64_t end_bytes = 0;
  int64_t allocations = 0;
  int64_t frees = 0;
  std::vector<PeakBlock> at_peak;  // every block alive at the peak, largest first
};

class Profiler {
 public:
  explicit Profiler(ProfilerOptions options = {});
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Recording runs from construction until stop(); start() clears and restarts.
  // One profiler records at a time.
  void start();
  void stop();
  bool recording() const;

  // Says what the memory of `t` is, for blocks the profiler cannot classify
  // by itself (parameters and optimizer state made before start()).
  // `module` names its owner (e.g. "h.0.attn" for a parameter of that module).
  void label(const Tensor& t, MemoryKind kind, const std::string& module = "");

  std::vector<OpStat> op_stats(GroupBy by = GroupBy::kOp) const;
  // A table like PyTorch's key_averages().table(): rows sorted by self time.
  std::string table(GroupBy by = GroupBy::kOp, int max_rows = 30) const;
  MemoryReport memory_report() const;
  // The peak and its attribution by module and by kind.
  std::string memory_table(int max_rows = 20) const;
  // Chrome trace / Perfetto JSON: one slice per op, backward node, module and
  // phase on each thread (a distributed run's communication thread is its
  // "comm ..." track), plus a "memory" counter track.
  void export_chrome_trace(const std::string& path) const;
  std::string chrome_trace() const;  // the same JSON, as text

  struct State;

 private:
  std::unique_ptr<State> s_;
};

// Marks a phase (forward, backward, optimizer) for the profiler's attribution
// and the trace's timeline; the Trainer opens one around each part of a step.
// The traces of a distributed run's ranks (chrome_trace's texts, rank by
// rank, gathered to one rank over the process group: no shared file system
// needed) written as one: rank r is process r ("rank r"), its timeline
// shifted by when its profiler started relative to the others' (wall clock).
void merge_chrome_traces(const std::vector<std::string>& rank_traces, const std::string& out);

class PhaseScope {
 public:
  explicit PhaseScope(Phase p) : guard_(phase_name(p), trace::ScopeKind::kPhase) {}

 private:
  trace::ScopeGuard guard_;
};

}  // namespace tessera::profiler
