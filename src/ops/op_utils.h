#pragma once
// Helpers shared by the op family files: type promotion, output allocation,
// running kernels through the device seam, and recording autograd nodes.
#include "backend/backend.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"
#include "tessera/core/trace.h"
#include "tessera/ops/capture.h"
#include "tessera/ops/ops.h"

namespace tessera::ops {

using autograd::VjpArgs;

// Every op of ops.def as an enumerator, so that code naming an op (trace
// scopes, the autocast table) is checked against the list at compile time.
enum class OpId : uint16_t {
#define OP(name, ...) name,
#include "ops/ops.def"
#undef OP
  kCount
};

// First line of every public op function: a trace scope named after the op
// (profiler, memory profiler), with its tensor inputs, which also reports the
// call to a graph recorder (ops/capture.h). An op called by another op opens a
// nested scope. Costs one relaxed load and one thread-local load when nothing
// listens.
class OpScope {
 public:
  OpScope(OpId id, const char* name, std::initializer_list<const Tensor*> inputs)
      : trace_(name, trace::ScopeKind::kOp, inputs) {
    for (const Tensor* t : inputs) enter_device(t, name);
    switch_device();
    if (Recorder* r = recorder()) {
      rec_ = r;
      top_ = r->begin(id, inputs.begin(), static_cast<int>(inputs.size()));
    }
  }
  OpScope(OpId id, const char* name, const TensorList& inputs)
      : trace_(name, trace::ScopeKind::kOp) {
    for (const Tensor& t : inputs) enter_device(&t, name);
    switch_device();
    if (Recorder* r = recorder()) {
      rec_ = r;
      top_ = r->begin(id, inputs);
    }
  }
  ~OpScope() {
    if (switched_) [[unlikely]] tessera::detail::t_current_device = prev_device_;
    if (rec_) rec_->end();
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

  // True when this call is being recorded into a graph.
  bool recording() const { return top_; }
  void attrs(Attrs&& a) { rec_->attrs(std::move(a)); }
  Tensor result(Tensor y) {
    if (top_) rec_->outputs(&y, 1);
    return y;
  }
  TensorList result(TensorList ys) {
    if (top_) rec_->outputs(ys.data(), static_cast<int>(ys.size()));
    return ys;
  }
  template <typename... T>
  std::tuple<T...> result(std::tuple<T...> ys) {
    if (top_) {
      std::apply([&](const auto&... t) {
        Tensor outs[] = {t...};
        rec_->outputs(outs, sizeof...(T));
      }, ys);
    }
    return ys;
  }
  // Graph capture replays ops with the default generator only.
  void check_generator(const Generator* gen, const char* op) const {
    TS_CHECK(!top_ || gen == nullptr || gen == &default_generator(), op,
             ": a call with its own Generator cannot be captured into a graph (a graph draws from the "
             "default generator); pass no generator");
  }

 private:
  // Note [An op's device]
  // An op runs on its tensor inputs' device, and every tensor it makes
  // (outputs, temporaries, wrapped numbers) is made there: while the op runs,
  // that device is the current one (tessera::current_device), which empty()
  // and the factories default to. Inputs on two devices are an error naming
  // both; a wrapped number (a Scalar made a tensor) joins any device, as
  // PyTorch's CPU scalars do. An op without tensor inputs (a factory) uses the caller's current
  // device (a DeviceScope, or the CPU).
  // The thread-local is touched only when the op's device differs from the
  // caller's (rare: a meta op called from CPU code), so the common op pays
  // one read of it and no writes.
  void enter_device(const Tensor* t, const char* name) {
    if (!t || !t->defined() || t->impl()->wrapped_number) return;  // a number joins any device
    Device d = t->device();
    if (!device_set_) {
      device_set_ = true;
      device_ = d;
    } else if (d != device_) [[unlikely]] {
      mixed_devices(name, device_, d);
    }
  }
  void switch_device() {
    if (!device_set_) return;
    Device& current = tessera::detail::t_current_device;
    if (current != device_) [[unlikely]] {
      prev_device_ = current;
      current = device_;
      switched_ = true;
    }
  }
  [[noreturn]] static void mixed_devices(const char* name, Device a, Device b);

  trace::ScopeGuard trace_;
  Device device_, prev_device_;
  bool device_set_ = false, switched_ = false;
  Recorder* rec_ = nullptr;
  bool top_ = false;
};

#define TS_OP_SCOPE(op, ...)                                                                \
  static_assert(::tessera::ops::OpId::op != ::tessera::ops::OpId::kCount, "op not in ops.def"); \
  ::tessera::ops::OpScope ts_op_scope_(::tessera::ops::OpId::op, #op, {__VA_ARGS__})
// For ops whose tensor arguments are one list (cat, stack, einsum).
#define TS_OP_SCOPE_LIST(op, list)                                                          \
  static_assert(::tessera::ops::OpId::op != ::tessera::ops::OpId::kCount, "op not in ops.def"); \
  ::tessera::ops::OpScope ts_op_scope_(::tessera::ops::OpId::op, #op, list)
// The op's attributes, as {"name", value} pairs; evaluated only while recording.
#define TS_OP_ATTRS(...) \
  if (ts_op_scope_.recording()) ts_op_scope_.attrs(::tessera::ops::Attrs{__VA_ARGS__})
// Every return of an op function with a TS_OP_SCOPE goes through this.
#define TS_RETURN(...) return ts_op_scope_.result(__VA_ARGS__)

// The function that runs an op from a graph node: `in` are its tensor inputs
// in TS_OP_SCOPE order, `a` its attributes. One per op of ops.def, next to the
// op; a missing one is a link error.
#define TS_OP_INVOKER(op) \
  TensorList invoke_##op([[maybe_unused]] const TensorList& in, [[maybe_unused]] const Attrs& a)
#define OP(name, ...) TS_OP_INVOKER(name);
#include "ops/ops.def"
#undef OP

// A Scalar as a 0-D tensor that promotes like a Python number.
Tensor wrap_scalar(const Scalar& s, DType dtype);
Tensor wrap_scalar(const Scalar& s);
// torch.result_type over several tensors (undefined tensors are skipped).
DType result_type(std::initializer_list<const Tensor*> ts);

// The output length of a sliding window (convolution, pooling): `in` padded
// with `pad` elements in all, a kernel of `k` taps `dil` apart, moved by
// `stride`. Checked arithmetic (sizes come from files); 0 when the window
// does not fit. ceil_mode rounds the last partial window up.
int64_t window_output_size(int64_t in, int64_t pad, int64_t k, int64_t dil, int64_t stride, bool ceil_mode,
                           const char* op);

// Ops that return a list of tensors (split, chunk, unbind) return at most
// kMaxOutputs, so a size from a file cannot ask for 2^40 views.
constexpr int64_t kMaxOutputs = int64_t{1} << 20;
inline void check_output_count(int64_t n, const char* op) {
  TS_CHECK(n <= kMaxOutputs, op, ": ", n, " outputs requested; at most ", kMaxOutputs, " are supported");
}

inline void check_defined(const Tensor& t, const char* op, const char* arg) {
  TS_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
}
inline void check_floating(const Tensor& t, const char* op, const char* arg) {
  TS_CHECK(is_floating(t.dtype()), op, ": argument '", arg, "' must be a floating-point tensor, got ",
           dtype_name(t.dtype()));
}
// Whether a 4-D tensor's memory is laid out [N, H, W, C] (channels-last; the
// strides of sizes of 1 do not matter).
inline bool is_channels_last(const Tensor& x) {
  if (x.dim() != 4) return false;
  int64_t expect = 1;
  for (int d : {1, 3, 2, 0}) {
    if (x.shape()[d] != 1 && x.strides()[d] != expect) return false;
    expect *= x.shape()[d];
  }
  return true;
}

// Whether checks of values (index ranges, probabilities in [0, 1]) can run on
// t: not on meta, which has shapes only (as PyTorch's meta skips them).
inline bool has_values(const Tensor& t) { return !t.is_meta(); }

// dst = src and dst = value through dst's backend (Note [Kernel entries]).
inline void copy_into(const Tensor& dst, const Tensor& src) { backend::kernels(dst).copy(dst, src); }
inline void fill_into(const Tensor& dst, const Scalar& value) { backend::kernels(dst).fill(dst, value); }

// Runs a unary kernel into a new tensor of dtype `out_dtype` (input already in
// the kernel's dtype).
Tensor run_unary(const Tensor& x, backend::UnaryKernel k, DType out_dtype, const double* params = nullptr);
// Runs a binary kernel over broadcast inputs already converted to `compute`.
Tensor run_binary(const Tensor& a, const Tensor& b, backend::BinaryKernel k, DType out_dtype);
// A binary elementwise op's forward: checks, broadcasting, PyTorch's type
// promotion, then the kernel (binary.cpp's ops, and pow in unary.cpp).
enum class BinaryKind { Arith, TrueDiv, Compare, Logical, IntDiv };
Tensor binary_op(const char* name, const Tensor& a, const Tensor& b, backend::BinaryKernel k, BinaryKind kind);
// No autograd; x itself if it has dtype t (and is not a wrapped number from
// another device, which moves to the op's).
Tensor cast(const Tensor& x, DType t);
// self = self (op) other, written straight into self's memory. Only for the
// no-autograd case where the result keeps self's shape and dtype and `other`
// does not alias self differently; returns false (doing nothing) otherwise.
bool binary_into(Tensor& self, const Tensor& other, backend::BinaryKernel k);


inline const char* reduction_name(const std::string& r, const char* op) {
  TS_CHECK(r == "mean" || r == "sum" || r == "none", op, ": reduction must be 'mean', 'sum' or 'none', got '",
           r, "'");
  return r.c_str();
}

// A fused op's activation attribute ("none", "relu", "gelu", "gelu_tanh",
// "silu", "tanh") as the backend's epilogue, and that activation applied by
// the plain ops (the fused ops' fallback).
backend::Epilogue epilogue_of(const std::string& activation, const char* op);
Tensor apply_epilogue(const Tensor& y, backend::Epilogue act);

// Grad of a view's input: zeros of `base_shape` with `g` written through the
// strided window (sizes, strides, offset) of a contiguous tensor of that shape.
Tensor strided_scatter(const Tensor& g, IntArrayRef base_shape, IntArrayRef sizes, IntArrayRef strides,
                       int64_t offset);
// The strided window itself (a view).
Tensor as_strided(const Tensor& x, IntArrayRef sizes, IntArrayRef strides, int64_t offset);

}  // namespace tessera::ops

namespace tessera::ops {

// Note [Fused ops and double backward]
// A fused op (softmax, layer_norm, attention, ...) has a fast backward kernel,
// used when the backward itself is not recorded. When it is (create_graph),
// its VJP instead differentiates the op's composite fallback, built from plain
// differentiable ops, so higher-order gradients stay exact. The fallback is
// also the op's test reference.
TensorList composite_vjp(const std::function<Tensor(const TensorList&)>& composite, const TensorList& inputs,
                         const std::vector<bool>& needs, const Tensor& grad);

}  // namespace tessera::ops
