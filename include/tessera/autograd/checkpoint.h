#pragma once
// Gradient (activation) checkpointing: run a function now, keep only its
// inputs, and run it again inside backward to get the activations its VJPs
// need. Memory for the function's internals is paid during its backward only.
//
//   Tensor y = autograd::checkpoint([&](const Tensor& h) { return (*block)(h); }, x);
//
// The function may take any mix of Tensor, TensorList and other values (held
// by the closure or passed through), and return a Tensor or a TensorList.
// Tensors it reads that require grad and are not arguments must be leaves
// (parameters); using another graph's intermediate tensor that way is an error
// naming the fix. The random-number state is restored for the recomputation,
// so dropout masks match; autocast is restored too.
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tessera/core/tensor.h"

namespace tessera::autograd {

using CheckpointFn = std::function<TensorList(const TensorList&)>;

// The core form: fn maps the flat tensor inputs to its outputs. Without grad
// recording (inference) this just calls fn.
TensorList checkpoint_flat(const CheckpointFn& fn, const TensorList& inputs);

// Note [Recompute context]
// A block is recomputed under the thread state of its first run. Autograd
// restores the random state itself; a layer above it with state of its own
// (autocast, in ops) registers a context: `save` is called when a block first
// runs and returns a function that opens that state again (a scope object,
// released after the call) around the recomputation; `first_run` opens a
// scope around the first run. Autograd does not know what the state is.
struct RecomputeContext {
  std::function<std::shared_ptr<void>()> first_run;
  std::function<std::function<std::shared_ptr<void>()>()> save;
};
void set_recompute_context(RecomputeContext context);

namespace detail {
inline void flatten(TensorList& out, const Tensor& t) { out.push_back(t); }
inline void flatten(TensorList& out, const TensorList& ts) { out.insert(out.end(), ts.begin(), ts.end()); }
template <typename T>
void flatten(TensorList&, const T&) {}

inline Tensor rebuild(const TensorList& flat, size_t& i, const Tensor&) { return flat[i++]; }
inline TensorList rebuild(const TensorList& flat, size_t& i, const TensorList& ts) {
  TensorList r(flat.begin() + static_cast<std::ptrdiff_t>(i), flat.begin() + static_cast<std::ptrdiff_t>(i + ts.size()));
  i += ts.size();
  return r;
}
template <typename T>
const T& rebuild(const TensorList&, size_t&, const T& v) {
  return v;
}
inline TensorList as_list(const Tensor& t) { return {t}; }
inline TensorList as_list(TensorList ts) { return ts; }
}  // namespace detail

template <typename F, typename... Args>
auto checkpoint(F&& fn, const Args&... args) {
  using R = std::invoke_result_t<F&, const Args&...>;
  static_assert(std::is_same_v<R, Tensor> || std::is_same_v<R, TensorList>,
                "checkpoint: the function must return a Tensor or a TensorList");
  TensorList flat;
  (detail::flatten(flat, args), ...);
  // The function and its arguments are copied: the recomputation runs in backward.
  CheckpointFn flat_fn = [fn, args...](const TensorList& in) -> TensorList {
    size_t i = 0;
    // Braced init: arguments are rebuilt left to right.
    return std::apply([&](auto&&... a) { return detail::as_list(fn(a...)); },
                      std::tuple<decltype(detail::rebuild(in, i, args))...>{detail::rebuild(in, i, args)...});
  };
  TensorList out = checkpoint_flat(flat_fn, flat);
  if constexpr (std::is_same_v<R, Tensor>) return out[0];
  else return out;
}

}  // namespace tessera::autograd
