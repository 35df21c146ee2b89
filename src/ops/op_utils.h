#pragma once
// Helpers shared by the op family files: type promotion, output allocation,
// running CPU kernels, and recording autograd nodes.
#include "backend/cpu/kernel_table.h"
#include "backend/cpu/loops.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"
#include "tessera/core/trace.h"
#include "tessera/ops/ops.h"

namespace tessera::ops {

using autograd::VjpArgs;

// Every op of ops.def as an enumerator, so that code naming an op (trace
// scopes, the autocast table) is checked against the list at compile time.
enum class OpId : uint16_t {
#define OP(name, family, grad) name,
#include "ops/ops.def"
#undef OP
  kCount
};

// First line of every public op function: a trace scope named after the op
// (profiler, memory profiler), with its tensor inputs. An op called by another
// op opens a nested scope. Costs one relaxed load when nothing listens.
#define TS_OP_SCOPE(op, ...)                                                                \
  static_assert(::tessera::ops::OpId::op != ::tessera::ops::OpId::kCount, "op not in ops.def"); \
  ::tessera::trace::ScopeGuard ts_op_scope_(#op, ::tessera::trace::ScopeKind::kOp, {__VA_ARGS__})

// A Scalar as a 0-D tensor that promotes like a Python number.
Tensor wrap_scalar(const Scalar& s, DType dtype);
Tensor wrap_scalar(const Scalar& s);
// torch.result_type over several tensors (undefined tensors are skipped).
DType result_type(std::initializer_list<const Tensor*> ts);

inline void check_defined(const Tensor& t, const char* op, const char* arg) {
  TS_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
}
inline void check_floating(const Tensor& t, const char* op, const char* arg) {
  TS_CHECK(is_floating(t.dtype()), op, ": argument '", arg, "' must be a floating-point tensor, got ",
           dtype_name(t.dtype()));
}
void check_same_device(const Tensor& a, const Tensor& b, const char* op);

// Runs a unary kernel into a new tensor of dtype `out_dtype` (input already in
// the kernel's dtype).
Tensor run_unary(const Tensor& x, cpu::UnaryKernel k, DType out_dtype, const double* params = nullptr);
// Runs a binary kernel over broadcast inputs already converted to `compute`.
Tensor run_binary(const Tensor& a, const Tensor& b, cpu::BinaryKernel k, DType out_dtype);
Tensor cast(const Tensor& x, DType t);  // no autograd, returns x itself if same dtype
// self = self (op) other, written straight into self's memory. Only for the
// no-autograd case where the result keeps self's shape and dtype and `other`
// does not alias self differently; returns false (doing nothing) otherwise.
bool binary_into(Tensor& self, const Tensor& other, cpu::BinaryKernel k);


inline const char* reduction_name(const std::string& r, const char* op) {
  TS_CHECK(r == "mean" || r == "sum" || r == "none", op, ": reduction must be 'mean', 'sum' or 'none', got '",
           r, "'");
  return r.c_str();
}

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
