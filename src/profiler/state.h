#pragma once
// The profiler's recorded data, shared by the recorder (profiler.cpp), the
// reports (report.cpp) and the trace writer (chrome_trace.cpp).
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tessera/profiler/profiler.h"

namespace tessera::profiler {

// One scope: an op, a backward node, a module or a phase.
struct Event {
  const char* name = "";
  trace::ScopeKind kind = trace::ScopeKind::kOp;
  Phase phase = Phase::kForward;
  const char* module = "";  // interned
  uint32_t tid = 0;
  int32_t depth = 0;
  int64_t t0 = 0, t1 = -1;  // ns since start
  int64_t child_ns = 0;     // time in nested (non-folded) op and backward scopes
  int64_t flops = 0;
  int64_t in_bytes = 0;     // tensor inputs
  int64_t alloc_bytes = 0;  // blocks allocated directly inside
  bool folded = false;      // an overload calling itself: counted in its parent
  std::string shapes;
};

// One allocation, from allocate to free.
struct Block {
  const void* p = nullptr;
  int64_t bytes = 0;
  int64_t alloc_seq = 0, free_seq = -1;  // order of allocation events
  int64_t t_alloc = 0;
  const char* op = "";
  const char* module = "";
  Phase phase = Phase::kOther;
  bool in_op = false;     // made inside an op or backward node
  bool in_phase = false;  // made inside a phase or backward
  bool survived = false;  // still alive when its op or node returned
  int label = -1;         // a MemoryKind given by label()
};

struct Frame {
  size_t event;
  const trace::Scope* scope;
  std::vector<size_t> blocks;  // allocated directly in this frame
};

struct Label {
  MemoryKind kind;
  const char* module;
  int64_t bytes;
};

struct Profiler::State : trace::Listener {
  std::mutex mu;
  ProfilerOptions options;
  bool recording = false;
  uint64_t generation = 0;
  int64_t t_start = 0, t_stop = 0;
  double wall_start_us = 0;  // system clock at start, to line up the traces of several processes
  std::vector<Event> events;
  // memory
  std::vector<Block> blocks;
  std::unordered_map<const void*, size_t> live;  // pointer -> index in blocks
  struct Gone {
    const void* p;
    int64_t bytes;
    int64_t seq;
  };
  std::vector<Gone> existing_freed;  // blocks from before start that were freed
  std::unordered_map<const void*, Label> labels;  // blocks from before start, labelled
  struct Point {
    int64_t t;
    int64_t bytes;
  };
  std::vector<Point> timeline;
  int64_t seq = 0;
  int64_t start_bytes = 0, current = 0, peak = 0, peak_seq = -1, peak_t = 0;
  int64_t allocations = 0, frees = 0;

  // Clears what was recorded (options and labels stay).
  void reset() {
    events.clear();
    blocks.clear();
    live.clear();
    existing_freed.clear();
    timeline.clear();
    seq = start_bytes = current = peak = peak_t = allocations = frees = 0;
    peak_seq = -1;
  }

  void scope_begin(const trace::Scope& s) override;
  void scope_end(const trace::Scope& s) override;
  void allocated(const void* p, int64_t bytes) override;
  void freed(const void* p, int64_t bytes) override;
};

}  // namespace tessera::profiler
