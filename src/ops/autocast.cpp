#include "ops/autocast_policy.h"

#include <memory>
#include <optional>
#include <unordered_map>

#include "tessera/autograd/checkpoint.h"
#include "tessera/ops/op_table.h"

namespace tessera::autocast {
namespace {

using ops::OpId;
using enum Policy;

// Note [Autocast op lists]
// What autocast does to each op is its row's amp column in ops.def, in the
// spirit of PyTorch's CPU autocast lists: products and convolutions gain from
// 16-bit inputs (half the bytes; native bf16 dot products where the CPU has
// them) and accumulate in f32 inside the kernels (kAmpLower); ops whose result
// is sensitive to rounding or range (exp/log, softmax, normalizations, losses,
// reductions) run in f32 (kAmpF32); ops that combine several inputs promote to
// the widest (kAmpPromote). Every op with a policy calls TS_AUTOCAST
// (tests/ops/test_autocast.cpp checks it), and docs/amp.md shows the table.

struct CastCache {
  struct Entry {
    Tensor source;  // held so its address is not reused while cached
    uint32_t version;
    DType dtype;
    Tensor cast;
  };
  std::unordered_map<const TensorImpl*, Entry> entries;
  int depth = 0;   // open Guards that enable autocast
  int bypass = 0;  // open NoCacheGuards
  int64_t casts = 0;
};
thread_local CastCache t_cache;

bool eligible(const Tensor& t) { return t.defined() && is_floating(t.dtype()) && !t.impl()->wrapped_number; }

}  // namespace

namespace detail {
thread_local State t_state;

Tensor cast(const Tensor& t, Policy p, DType target) {
  if (p == kF32) target = DType::F32;
  if (p == kNone || !eligible(t) || t.dtype() == target) return t;
  if (p == kLower && t.dtype() != DType::F32) return t;  // f64 stays f64, like PyTorch
  if (p == kF32 && t.dtype() != DType::F16 && t.dtype() != DType::BF16) return t;
  // Weights (leaves that require grad) are cast once per autocast scope.
  bool cacheable = t_cache.depth > 0 && t_cache.bypass == 0 && t.requires_grad() && !t.grad_fn();
  if (cacheable) {
    auto it = t_cache.entries.find(t.impl());
    if (it != t_cache.entries.end() && it->second.version == t.version() && it->second.dtype == target)
      return it->second.cast;
  }
  Tensor r = t.to(target);
  if (cacheable) {
    t_cache.entries[t.impl()] = {t, t.version(), target, r};
    t_cache.casts++;
  }
  return r;
}

DType widest(const TensorList& ts) {
  DType w = DType::F16;
  bool any = false;
  for (const Tensor& t : ts)
    if (eligible(t)) {
      w = any ? promote_types(w, t.dtype()) : t.dtype();
      any = true;
    }
  return any ? w : DType::F32;
}
}  // namespace detail

Policy policy(OpId op) { return ops::op_entry(op).amp; }

Guard::Guard(DType dtype, bool enable) : prev_(detail::t_state), counted_(enable) {
  TS_CHECK(dtype == DType::BF16 || dtype == DType::F16, "autocast: dtype must be bf16 or f16, got ",
           dtype_name(dtype), " (f32 training needs no autocast; use precision: f32)");
  detail::t_state = {enable, dtype};
  if (enable) t_cache.depth++;
}

Guard::~Guard() {
  if (counted_ && --t_cache.depth == 0) {
    // The weights may change before the next scope (optimizer step): drop
    // the copies.
    t_cache.entries.clear();
  }
  detail::t_state = prev_;
}

NoCacheGuard::NoCacheGuard() { t_cache.bypass++; }
NoCacheGuard::~NoCacheGuard() { t_cache.bypass--; }

bool enabled() { return detail::t_state.enabled; }
DType dtype() { return detail::t_state.dtype; }
State state() { return detail::t_state; }
int64_t cast_count() { return t_cache.casts; }

namespace {
// Checkpointed blocks (autograd::checkpoint) recompute under the autocast
// state of their first run; casts of weights made before the block would be
// tensors from outside it that cannot be recomputed, so the block casts its
// own (Note [Recompute context]).
struct BlockScope {
  std::optional<Guard> amp;
  NoCacheGuard own_casts;
};
[[maybe_unused]] const bool kRecomputeContext = [] {
  autograd::set_recompute_context({
      [] { return std::make_shared<BlockScope>(); },
      [] {
        const State s = state();
        return std::function<std::shared_ptr<void>()>([s] {
          auto scope = std::make_shared<BlockScope>();
          scope->amp.emplace(s.dtype, s.enabled);
          return scope;
        });
      },
  });
  return true;
}();
}  // namespace

}  // namespace tessera::autocast
