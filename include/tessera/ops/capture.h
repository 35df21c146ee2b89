#pragma once
// The hook that graph capture (compile/) installs into the ops, and the way
// back: running one op from its name, inputs and attributes.
//
// While a Recorder is installed on a thread, every op call on that thread
// reports its tensor inputs, its attributes and its outputs. Ops nest (linear
// calls matmul); the recorder sees the depth and usually keeps only the
// outermost call, which is the op the user wrote. (A training capture keeps
// the inner calls of an op whose gradient comes from them: see grad_node.) Scalar overloads (add(x, 2)) forward to the
// tensor form without a scope of their own, so the recorded op is always the
// canonical form its invoker can call again.
#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/ops/attrs.h"

namespace tessera::ops {

enum class OpId : uint16_t;

class Recorder {
 public:
  virtual ~Recorder() = default;
  // An op call begins. `inputs` holds its tensor arguments in order (an
  // undefined tensor for an optional one left out). Returns true if this call
  // is wanted (attrs() and outputs() follow).
  virtual bool begin(OpId op, const Tensor* const* inputs, int n) = 0;
  virtual bool begin(OpId op, const TensorList& inputs) = 0;
  // Only for a call that begin() accepted.
  virtual void attrs(Attrs&& a) = 0;
  virtual void outputs(const Tensor* outs, int n) = 0;
  // Every begun call ends (also when the op throws).
  virtual void end() = 0;
  // user code read a tensor's values (item(), to_vector()) outside any op.
  virtual void host_read(const Tensor& t) = 0;
  // The innermost op call in progress recorded an autograd node of its own
  // (autograd::record).
  virtual void grad_node() {}
};

// The recorder of this thread (null when not capturing).
Recorder* recorder();

// Installs `r` on this thread for the guard's lifetime (restores the previous one).
class RecorderGuard {
 public:
  explicit RecorderGuard(Recorder* r);
  ~RecorderGuard();
  RecorderGuard(const RecorderGuard&) = delete;
  RecorderGuard& operator=(const RecorderGuard&) = delete;

 private:
  Recorder* prev_;
};

// Runs op `op` on `inputs` with `attrs`, as a graph node does. Errors from the
// op itself name the op; a missing attribute names the attribute.
TensorList invoke(OpId op, const TensorList& inputs, const Attrs& attrs);

// The id of an op by name (ops.def), or nullopt.
std::optional<OpId> op_id(std::string_view name);
std::string_view op_name(OpId op);

}  // namespace tessera::ops
