// The recording side of the profiler: a trace listener that turns scopes into
// timed events and allocations into a block timeline. Reports are in
// report.cpp; the Chrome trace writer in chrome_trace.cpp.
#include "profiler/state.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "tessera/core/allocator.h"
#include "tessera/core/error.h"

namespace tessera::profiler {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kOther: return "other";
  }
  return "?";
}

const char* kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::kParameter: return "parameter";
    case MemoryKind::kGradient: return "gradient";
    case MemoryKind::kOptimizerState: return "optimizer state";
    case MemoryKind::kActivation: return "activation";
    case MemoryKind::kTemporary: return "temporary";
    case MemoryKind::kBackward: return "backward buffer";
    case MemoryKind::kInput: return "input / other";
    case MemoryKind::kExisting: return "before profiling";
  }
  return "?";
}

namespace {

std::atomic<uint64_t> g_next_generation{1};
std::atomic<uint32_t> g_next_tid{0};
std::atomic<Profiler::State*> g_recording{nullptr};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// This thread's open scopes, for the profiler recording now.
struct ThreadFrames {
  uint64_t generation = 0;
  uint32_t tid = g_next_tid.fetch_add(1);
  std::vector<Frame> frames;
};
thread_local ThreadFrames t_frames;

std::vector<Frame>& frames_for(uint64_t generation) {
  if (t_frames.generation != generation) {
    t_frames.frames.clear();
    t_frames.generation = generation;
  }
  return t_frames.frames;
}

Phase phase_of(const char* name) {
  if (std::strcmp(name, "forward") == 0) return Phase::kForward;
  if (std::strcmp(name, "backward") == 0) return Phase::kBackward;
  if (std::strcmp(name, "optimizer") == 0) return Phase::kOptimizer;
  return Phase::kOther;
}

// The phase and module path of what runs now on this thread. Inside a
// backward node the module is the one its forward op ran in.
void context(Phase& phase, const char*& module, bool& in_phase) {
  const auto& st = trace::stack();
  phase = Phase::kForward;
  in_phase = false;
  module = nullptr;
  for (auto it = st.rbegin(); it != st.rend(); ++it) {
    const trace::Scope* s = *it;
    if (s->kind == trace::ScopeKind::kBackward) {
      phase = Phase::kBackward;
      module = s->path;
      in_phase = true;
      break;
    }
    if (s->kind == trace::ScopeKind::kPhase) {
      phase = phase_of(s->name);
      in_phase = true;
      break;
    }
  }
  if (!module) module = trace::intern(trace::module_path());
}

int64_t tensor_bytes(const Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.itemsize()) : 0;
}

std::string shapes_of(const trace::Scope& s) {
  std::string r;
  for (int i = 0; i < s.num_inputs; ++i) {
    if (i) r += ", ";
    const Tensor* t = s.inputs[i];
    r += t && t->defined() ? shape_str(t->shape()) : "-";
  }
  return r;
}

}  // namespace

// ---- the listener -----------------------------------------------------------------

void Profiler::State::scope_begin(const trace::Scope& s) {
  int64_t t = now_ns();
  std::lock_guard<std::mutex> lock(mu);
  if (!recording) return;
  auto& fr = frames_for(generation);
  Event e;
  e.name = s.name ? s.name : "";
  e.kind = s.kind;
  e.tid = t_frames.tid;
  e.t0 = t - t_start;
  e.depth = static_cast<int32_t>(fr.size());
  bool in_phase = false;
  context(e.phase, e.module, in_phase);
  if (s.kind == trace::ScopeKind::kBackward) {
    e.phase = Phase::kBackward;
    e.module = s.path ? s.path : "";
  }
  for (int i = 0; i < s.num_inputs; ++i)
    if (s.inputs[i]) e.in_bytes += tensor_bytes(*s.inputs[i]);
  if (options.record_shapes && s.num_inputs > 0) e.shapes = shapes_of(s);
  // An op called by an overload of itself (add(Tensor, Scalar) -> add(Tensor,
  // Tensor)) is one call.
  if (s.kind == trace::ScopeKind::kOp && !fr.empty()) {
    const Event& parent = events[fr.back().event];
    e.folded = parent.kind == trace::ScopeKind::kOp && std::strcmp(parent.name, e.name) == 0;
  }
  fr.push_back({events.size(), &s, {}});
  events.push_back(std::move(e));
}

void Profiler::State::scope_end(const trace::Scope& s) {
  int64_t t = now_ns();
  std::lock_guard<std::mutex> lock(mu);
  auto& fr = frames_for(generation);
  // Find the frame (scopes that began before start() have none).
  auto it = std::find_if(fr.rbegin(), fr.rend(), [&](const Frame& f) { return f.scope == &s; });
  if (it == fr.rend()) return;
  size_t idx = static_cast<size_t>(fr.rend() - it) - 1;
  Frame f = std::move(fr[idx]);
  fr.erase(fr.begin() + static_cast<ptrdiff_t>(idx), fr.end());
  Event& e = events[f.event];
  e.t1 = (recording ? t : t_stop) - t_start;
  e.flops += s.flops;
  for (size_t b : f.blocks)
    if (blocks[b].free_seq < 0) blocks[b].survived = true;
  bool timed = e.kind == trace::ScopeKind::kOp || e.kind == trace::ScopeKind::kBackward;
  if (!timed || fr.empty()) return;
  Event& parent = events[fr.back().event];
  if (e.folded) {
    parent.child_ns += e.child_ns;
    parent.flops += e.flops;
    parent.alloc_bytes += e.alloc_bytes;
  } else {
    parent.child_ns += e.t1 - e.t0;
  }
}

void Profiler::State::allocated(const void* p, int64_t bytes) {
  int64_t t = now_ns();
  std::lock_guard<std::mutex> lock(mu);
  if (!recording || !options.record_memory) return;
  Block b;
  b.p = p;
  b.bytes = bytes;
  b.alloc_seq = seq++;
  b.t_alloc = t - t_start;
  const trace::Scope* op = trace::innermost(trace::ScopeKind::kOp);
  const trace::Scope* bw = trace::innermost(trace::ScopeKind::kBackward);
  b.op = op ? op->name : bw ? bw->name : "";
  bool in_phase = false;
  context(b.phase, b.module, in_phase);
  b.in_op = op != nullptr || bw != nullptr;
  b.in_phase = in_phase;
  // Credit the innermost op or backward frame: its output bytes, and whether
  // the block outlives it.
  auto& fr = frames_for(generation);
  for (auto it = fr.rbegin(); it != fr.rend(); ++it) {
    Event& e = events[it->event];
    if (e.kind == trace::ScopeKind::kOp || e.kind == trace::ScopeKind::kBackward) {
      e.alloc_bytes += bytes;
      it->blocks.push_back(blocks.size());
      break;
    }
  }
  live[p] = blocks.size();
  blocks.push_back(b);
  current += bytes;
  timeline.push_back({b.t_alloc, current});
  if (current > peak) {
    peak = current;
    peak_seq = b.alloc_seq;
    peak_t = b.t_alloc;
  }
  allocations++;
}

void Profiler::State::freed(const void* p, int64_t bytes) {
  int64_t t = now_ns();
  std::lock_guard<std::mutex> lock(mu);
  if (!recording || !options.record_memory) return;
  int64_t sq = seq++;
  auto it = live.find(p);
  if (it != live.end()) {
    blocks[it->second].free_seq = sq;
    live.erase(it);
  } else {
    // A block from before start(): remember when it went, for the peak.
    existing_freed.push_back({p, bytes, sq});
  }
  current -= bytes;
  timeline.push_back({t - t_start, current});
  frees++;
}

// ---- Profiler ---------------------------------------------------------------------

Profiler::Profiler(ProfilerOptions options) : s_(std::make_unique<State>()) {
  s_->options = options;
  start();
}

Profiler::~Profiler() { stop(); }

void Profiler::start() {
  stop();
  State* expected = nullptr;
  TS_CHECK(g_recording.compare_exchange_strong(expected, s_.get()),
           "Profiler: another profiler is already recording; stop it before starting this one");
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->reset();
    s_->generation = g_next_generation.fetch_add(1);
    s_->t_start = now_ns();
    s_->wall_start_us = std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch()).count();
    s_->start_bytes = memory_allocated();
    s_->current = s_->peak = s_->start_bytes;
    s_->timeline.push_back({0, s_->current});
    s_->recording = true;
  }
  trace::add_listener(s_.get());
}

void Profiler::stop() {
  if (!recording()) return;
  trace::remove_listener(s_.get());
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->recording = false;
    s_->t_stop = now_ns();
    // Scopes still open are closed at the stop time.
    for (Event& e : s_->events)
      if (e.t1 < 0) e.t1 = s_->t_stop - s_->t_start;
  }
  g_recording.store(nullptr);
}

bool Profiler::recording() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->recording;
}

void Profiler::label(const Tensor& t, MemoryKind kind, const std::string& module) {
  if (!t.defined() || !t.storage()) return;
  const void* p = t.storage()->data();
  std::lock_guard<std::mutex> lock(s_->mu);
  const char* m = trace::intern(module);
  if (auto it = s_->live.find(p); it != s_->live.end()) {
    Block& b = s_->blocks[it->second];
    b.label = static_cast<int>(kind);
    if (!module.empty()) b.module = m;
    return;
  }
  s_->labels[p] = {kind, m, static_cast<int64_t>(allocation_size(t.storage()->nbytes()))};
}

}  // namespace tessera::profiler
