#include "tessera/core/trace.h"

#include <algorithm>
#include <mutex>
#include <unordered_set>

namespace tessera::trace {

namespace detail {
std::atomic<int> g_listeners{0};
}

namespace {

// Listeners are few and change rarely; readers copy the list under the lock
// only when it changed (generation counter), so a trace point does not lock.
struct Registry {
  std::mutex mu;
  std::vector<Listener*> listeners;
  std::atomic<uint64_t> generation{0};
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: used by late frees
  return *r;
}

struct ThreadState {
  std::vector<Scope*> stack;
  std::vector<Listener*> listeners;
  uint64_t generation = ~uint64_t(0);
  const std::vector<Listener*>& current() {
    Registry& r = registry();
    uint64_t g = r.generation.load(std::memory_order_acquire);
    if (g != generation) {
      std::lock_guard<std::mutex> lock(r.mu);
      listeners = r.listeners;
      generation = r.generation.load(std::memory_order_relaxed);
    }
    return listeners;
  }
};
thread_local ThreadState t_state;

}  // namespace

const char* kind_name(ScopeKind k) {
  switch (k) {
    case ScopeKind::kOp: return "op";
    case ScopeKind::kBackward: return "backward";
    case ScopeKind::kModule: return "module";
    case ScopeKind::kPhase: return "phase";
    case ScopeKind::kUser: return "user";
  }
  return "?";
}

void add_listener(Listener* l) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.listeners.push_back(l);
  r.generation.fetch_add(1, std::memory_order_release);
  detail::g_listeners.fetch_add(1, std::memory_order_relaxed);
}

void remove_listener(Listener* l) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = std::find(r.listeners.begin(), r.listeners.end(), l);
  if (it == r.listeners.end()) return;
  r.listeners.erase(it);
  r.generation.fetch_add(1, std::memory_order_release);
  detail::g_listeners.fetch_sub(1, std::memory_order_relaxed);
}

namespace detail {

void begin(Scope& s) {
  t_state.stack.push_back(&s);
  for (Listener* l : t_state.current()) l->scope_begin(s);
}

void end(Scope& s) {
  for (Listener* l : t_state.current()) l->scope_end(s);
  // Scopes close in order; a listener added mid-scope still pops cleanly.
  auto& st = t_state.stack;
  if (!st.empty() && st.back() == &s) st.pop_back();
  else st.erase(std::remove(st.begin(), st.end(), &s), st.end());
}

void alloc(const void* p, int64_t bytes) {
  for (Listener* l : t_state.current()) l->allocated(p, bytes);
}

void free(const void* p, int64_t bytes) {
  for (Listener* l : t_state.current()) l->freed(p, bytes);
}

void outputs(const char* op, bool backward, const char* path, const Tensor* ins, int n_in, const Tensor* outs,
             int n_out) {
  for (Listener* l : t_state.current()) l->op_outputs(op, backward, path, ins, n_in, outs, n_out);
}

}  // namespace detail

void add_flops(int64_t n) {
  if (!active()) return;
  auto& st = t_state.stack;
  for (auto it = st.rbegin(); it != st.rend(); ++it)
    if ((*it)->kind == ScopeKind::kOp || (*it)->kind == ScopeKind::kBackward) {
      (*it)->flops += n;
      return;
    }
}

const char* intern(const std::string& s) {
  static std::mutex mu;
  static auto* strings = new std::unordered_set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  return strings->insert(s).first->c_str();
}

const std::vector<Scope*>& stack() { return t_state.stack; }

std::string module_path() {
  std::string path;
  for (const Scope* s : t_state.stack) {
    if (s->kind != ScopeKind::kModule || !s->name || !*s->name) continue;
    if (!path.empty()) path += '.';
    path += s->name;
  }
  return path;
}

const Scope* innermost(ScopeKind kind) {
  auto& st = t_state.stack;
  for (auto it = st.rbegin(); it != st.rend(); ++it)
    if ((*it)->kind == kind) return *it;
  return nullptr;
}

}  // namespace tessera::trace
