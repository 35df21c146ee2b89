#pragma once
// How op files apply autocast (include/tessera/ops/autocast.h):
//
//   Tensor matmul(const Tensor& a, const Tensor& b) {
//     TS_OP_SCOPE(matmul, &a, &b);
//     TS_AUTOCAST(matmul, [&](auto& cast) { return matmul(cast(a), cast(b)); });
//
// When autocast is on, the op is called again with its inputs cast by the
// op's policy and autocast paused; otherwise nothing happens.
#include "ops/op_utils.h"
#include "tessera/ops/autocast.h"

namespace tessera::autocast {

Policy policy(ops::OpId op);

namespace detail {
extern thread_local State t_state;
Tensor cast(const Tensor& t, Policy p, DType target);
// The widest floating dtype among ts (kPromote).
DType widest(const TensorList& ts);
}  // namespace detail

// Casts arguments for one op call.
struct Caster {
  Policy policy;
  DType target;
  // kPromote applies to lists (cat, stack); single tensors promote in the op.
  Tensor operator()(const Tensor& t) const {
    return policy == Policy::kPromote ? t : detail::cast(t, policy, target);
  }
  TensorList operator()(const TensorList& ts) const {
    DType to = policy == Policy::kPromote ? detail::widest(ts) : target;
    TensorList r;
    r.reserve(ts.size());
    for (const Tensor& t : ts) r.push_back(detail::cast(t, policy, to));
    return r;
  }
};

// Sets the thread's autocast state for a scope.
class StateGuard {
 public:
  explicit StateGuard(State s) : prev_(detail::t_state) { detail::t_state = s; }
  ~StateGuard() { detail::t_state = prev_; }
  StateGuard(const StateGuard&) = delete;
  StateGuard& operator=(const StateGuard&) = delete;

 private:
  State prev_;
};

}  // namespace tessera::autocast

#define TS_AUTOCAST(op, ...)                                                                     \
  do {                                                                                            \
    if (::tessera::autocast::detail::t_state.enabled) [[unlikely]] {                              \
      ::tessera::autocast::Caster ts_cast_{::tessera::autocast::policy(::tessera::ops::OpId::op), \
                                           ::tessera::autocast::detail::t_state.dtype};           \
      ::tessera::autocast::StateGuard ts_pause_({false, ts_cast_.target});                        \
      return ts_op_scope_.result((__VA_ARGS__)(ts_cast_));                                        \
    }                                                                                             \
  } while (0)
