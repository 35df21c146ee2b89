#pragma once
// Trace points: ops, backward nodes, modules and training phases announce where
// they begin and end, and the allocator announces every block it hands out or
// takes back. Listeners (the profiler, the memory profiler, anomaly mode) see
// them. With no listener a trace point costs one relaxed atomic load.
//
// Scopes nest on a per-thread stack, so a listener that sees an allocation can
// ask which op, which module path and which phase caused it.
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tessera {
class Tensor;
}

namespace tessera::trace {

enum class ScopeKind : uint8_t {
  kOp,        // a Tessera op (forward, or inside a VJP during backward)
  kBackward,  // one autograd node's VJP
  kModule,    // a module's forward; name is its full dotted path ("h.0.attn")
  kPhase,     // a training phase: forward, backward, optimizer, data
  kUser,      // a range the user marked
};
const char* kind_name(ScopeKind k);

struct Scope {
  const char* name;  // static storage, or owned by the caller for the scope's life
  ScopeKind kind;
  const Tensor* const* inputs = nullptr;  // op inputs (may be null), valid during begin only
  int num_inputs = 0;
  int64_t flops = 0;  // added by the op while it runs (add_flops)
  // For kBackward: the module path that was open when the forward op ran.
  const char* path = nullptr;
};

class Listener {
 public:
  virtual ~Listener() = default;
  virtual void scope_begin(const Scope&) {}
  virtual void scope_end(const Scope&) {}
  // `bytes` is the block size the allocator accounts (rounded).
  virtual void allocated(const void* /*p*/, int64_t /*bytes*/) {}
  virtual void freed(const void* /*p*/, int64_t /*bytes*/) {}
  // The inputs and outputs of an op that recorded an autograd node (forward),
  // or of a node's VJP (backward: inputs are the incoming gradients). For
  // anomaly mode. `path` is the module path of the forward op.
  virtual void op_outputs(const char* /*op*/, bool /*backward*/, const char* /*path*/, const Tensor* /*ins*/,
                          int /*n_in*/, const Tensor* /*outs*/, int /*n_out*/) {}
};

namespace detail {
extern std::atomic<int> g_listeners;
void begin(Scope& s);
void end(Scope& s);
void alloc(const void* p, int64_t bytes);
void free(const void* p, int64_t bytes);
void outputs(const char* op, bool backward, const char* path, const Tensor* ins, int n_in, const Tensor* outs,
             int n_out);
}  // namespace detail

inline bool active() { return detail::g_listeners.load(std::memory_order_relaxed) != 0; }

// Listeners are global (allocations on any thread are seen); registering is
// thread-safe. A listener must outlive its registration.
void add_listener(Listener* l);
void remove_listener(Listener* l);

// Marks a scope for its lifetime.
class ScopeGuard {
 public:
  ScopeGuard() : scope_{nullptr, ScopeKind::kUser} {}  // marks nothing
  ScopeGuard(const char* name, ScopeKind kind) : scope_{name, kind} {
    if (active()) {
      detail::begin(scope_);
      on_ = true;
    }
  }
  ScopeGuard(const char* name, ScopeKind kind, std::initializer_list<const Tensor*> inputs) : scope_{name, kind} {
    if (active()) {
      scope_.inputs = inputs.begin();
      scope_.num_inputs = static_cast<int>(inputs.size());
      detail::begin(scope_);
      scope_.inputs = nullptr;
      scope_.num_inputs = 0;
      on_ = true;
    }
  }
  // A backward scope (one node's VJP) with the forward op's module path.
  ScopeGuard(const char* name, const char* path) : scope_{name, ScopeKind::kBackward} {
    if (active()) {
      scope_.path = path;
      detail::begin(scope_);
      on_ = true;
    }
  }
  ~ScopeGuard() {
    if (on_) detail::end(scope_);
  }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  Scope scope_;
  bool on_ = false;
};

inline void allocated(const void* p, int64_t bytes) {
  if (active()) detail::alloc(p, bytes);
}
inline void freed(const void* p, int64_t bytes) {
  if (active()) detail::free(p, bytes);
}
inline void op_outputs(const char* op, bool backward, const char* path, const Tensor* ins, int n_in,
                       const Tensor* outs, int n_out) {
  if (active()) detail::outputs(op, backward, path, ins, n_in, outs, n_out);
}
// Adds floating-point operations to the innermost op (or backward node) scope
// of this thread.
void add_flops(int64_t n);

// Called when user code reads a tensor's values on the host (item(),
// to_vector()); graph capture installs it to find data-dependent control flow.
using HostReadHook = void (*)(const Tensor&);
extern thread_local HostReadHook t_host_read;
inline void host_read(const Tensor& t) {
  if (t_host_read) [[unlikely]] t_host_read(t);
}

// A string kept for the life of the process (module paths saved in autograd
// nodes while tracing); equal strings give the same pointer.
const char* intern(const std::string& s);

// This thread's open scopes, outermost first.
const std::vector<Scope*>& stack();
// The module path of the innermost open module scope ("" outside any).
std::string module_path();
// The innermost open scope of `kind` on this thread, or null.
const Scope* innermost(ScopeKind kind);

}  // namespace tessera::trace
