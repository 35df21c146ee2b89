#include "tessera/core/trace.h"

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

namespace tessera::trace {

thread_local HostReadHook t_host_read = nullptr;

namespace detail {
std::atomic<int> g_listeners{0};
}

namespace {

// Note [Listener lifetime]
// Listeners are called from every thread that allocates (data-loader workers
// too), so removing one must wait until no thread is inside it: callbacks run
// under a shared lock and remove_listener takes it exclusively. A callback
// that itself allocates or runs ops (anomaly mode does) re-enters the
// dispatcher on the same thread; the depth counter keeps it from locking twice.
struct Registry {
  std::shared_mutex mu;
  std::vector<Listener*> listeners;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: used by late frees
  return *r;
}

struct ThreadState {
  std::vector<Scope*> stack;
  int dispatch_depth = 0;
};
thread_local ThreadState t_state;

template <typename F>
void dispatch(F&& f) {
  Registry& r = registry();
  struct Depth {
    Depth() { t_state.dispatch_depth++; }
    ~Depth() { t_state.dispatch_depth--; }
  };
  if (t_state.dispatch_depth > 0) {
    Depth d;
    for (Listener* l : r.listeners) f(l);
    return;
  }
  std::shared_lock<std::shared_mutex> lock(r.mu);
  Depth d;
  for (Listener* l : r.listeners) f(l);
}

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
  std::unique_lock<std::shared_mutex> lock(r.mu);
  r.listeners.push_back(l);
  detail::g_listeners.fetch_add(1, std::memory_order_relaxed);
}

void remove_listener(Listener* l) {
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mu);  // waits for callbacks in flight
  auto it = std::find(r.listeners.begin(), r.listeners.end(), l);
  if (it == r.listeners.end()) return;
  r.listeners.erase(it);
  detail::g_listeners.fetch_sub(1, std::memory_order_relaxed);
}

namespace detail {

void begin(Scope& s) {
  t_state.stack.push_back(&s);
  dispatch([&](Listener* l) { l->scope_begin(s); });
}

void end(Scope& s) {
  dispatch([&](Listener* l) { l->scope_end(s); });
  // Scopes close in order; a listener added mid-scope still pops cleanly.
  auto& st = t_state.stack;
  if (!st.empty() && st.back() == &s) st.pop_back();
  else st.erase(std::remove(st.begin(), st.end(), &s), st.end());
}

void alloc(const void* p, int64_t bytes) {
  dispatch([&](Listener* l) { l->allocated(p, bytes); });
}

void free(const void* p, int64_t bytes) {
  dispatch([&](Listener* l) { l->freed(p, bytes); });
}

void outputs(const char* op, bool backward, const char* path, const Tensor* ins, int n_in, const Tensor* outs,
             int n_out) {
  dispatch([&](Listener* l) { l->op_outputs(op, backward, path, ins, n_in, outs, n_out); });
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
  const Scope* m = innermost(ScopeKind::kModule);
  return m && m->name ? m->name : "";
}

const Scope* innermost(ScopeKind kind) {
  auto& st = t_state.stack;
  for (auto it = st.rbegin(); it != st.rend(); ++it)
    if ((*it)->kind == kind) return *it;
  return nullptr;
}

}  // namespace tessera::trace
