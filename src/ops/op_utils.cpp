#include "ops/op_utils.h"

namespace tessera::ops {

int64_t window_output_size(int64_t in, int64_t pad, int64_t k, int64_t dil, int64_t stride, bool ceil_mode,
                           const char* op) {
  TS_CHECK(k > 0 && dil > 0 && stride > 0, op, ": kernel size, dilation and stride must be positive, got ", k, ", ",
           dil, " and ", stride);
  const int64_t reach = checked_add(checked_mul(dil, k - 1, op), 1, op);  // the window's extent
  const int64_t span = checked_add(in, pad, op) - reach;
  if (span < 0) return 0;
  return span / stride + (ceil_mode && span % stride != 0 ? 1 : 0) + 1;
}

Tensor wrap_scalar(const Scalar& s, DType dtype) {
  Tensor t = empty({}, dtype);
  backend::kernels(t).fill(t, s);
  t.impl()->wrapped_number = true;
  return t;
}

Tensor wrap_scalar(const Scalar& s) { return wrap_scalar(s, s.is_floating() ? DType::F64 : s.dtype()); }

namespace {
// PyTorch's combine_categories: a higher-priority class keeps its dtype unless
// the lower class is of a higher category (bool < integer < float).
DType combine(std::optional<DType> higher, std::optional<DType> lower, bool& defined) {
  defined = higher || lower;
  if (!higher) return lower.value_or(DType::F32);
  if (!lower) return *higher;
  if (is_floating(*higher)) return *higher;
  if (*higher == DType::Bool || is_floating(*lower)) return promote_types(*higher, *lower);
  return *higher;
}
void merge(std::optional<DType>& acc, DType t) { acc = acc ? promote_types(*acc, t) : t; }
}  // namespace

DType result_type(std::initializer_list<const Tensor*> ts) {
  // Fast path: the same dtype everywhere and no wrapped numbers.
  bool same = true;
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (!first) first = t;
    same = same && t->dtype() == first->dtype() && !t->impl()->wrapped_number;
  }
  if (same && first) return first->dtype();
  std::optional<DType> dim, zero, wrapped;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (t->impl()->wrapped_number) {
      DType w = t->dtype();
      if (is_floating(w)) w = default_float_dtype();
      merge(wrapped, w);
    } else if (t->dim() == 0) {
      merge(zero, t->dtype());
    } else {
      merge(dim, t->dtype());
    }
  }
  bool d1 = false, d2 = false;
  DType low = combine(zero, wrapped, d1);
  return combine(dim, d1 ? std::optional<DType>(low) : std::nullopt, d2);
}

DType result_type(const Tensor& a, const Tensor& b) { return result_type({&a, &b}); }

void OpScope::mixed_devices(const char* name, Device a, Device b) {
  TS_ERROR(name, ": expected all tensors on the same device, got tensors on ", a, " and on ", b,
           "; move them to one device with to() first");
}

Tensor cast(const Tensor& x, DType t) {
  // A wrapped number made outside the op (add(meta, 1.0) wraps 1.0 on the
  // caller's device) joins the op's device (Note [An op's device]).
  if (x.impl()->wrapped_number && x.device() != current_device()) [[unlikely]] return cast(x.to(current_device()), t);
  if (x.dtype() == t) return x;
  Tensor out = empty(x.shape(), TensorOptions(t, x.device()));
  backend::kernels(out).copy(out, x);
  return out;
}

Tensor run_unary(const Tensor& x, backend::UnaryKernel k, DType out_dtype, const double* params) {
  TS_INTERNAL_ASSERT(backend::unary_defined(k, x.dtype()));
  Tensor out = empty(x.shape(), TensorOptions(out_dtype, x.device()));
  backend::kernels(out).unary(out, x, k, params);
  return out;
}

Tensor binary_op(const char* name, const Tensor& a, const Tensor& b, backend::BinaryKernel k, BinaryKind kind) {
  check_defined(a, name, "input");
  check_defined(b, name, "other");
  DType ct = result_type(a, b);
  if (kind == BinaryKind::TrueDiv && !is_floating(ct)) ct = default_float_dtype();
  DType out_dtype = (kind == BinaryKind::Compare || kind == BinaryKind::Logical) ? DType::Bool : ct;
  TS_CHECK(backend::binary_defined(k, ct), name, ": not supported for ", dtype_name(ct), " tensors (inputs are ",
           dtype_name(a.dtype()), " and ", dtype_name(b.dtype()), ")",
           ct == DType::Bool ? "; convert bool tensors with to() first" : "");
  if (!IntArrayRef(a.shape()).equals(b.shape())) broadcast_shapes(a.shape(), b.shape(), name);
  Tensor ac = cast(a, ct), bc = cast(b, ct);
  if (kind == BinaryKind::IntDiv && !is_floating(ct)) {
    Tensor zero = run_binary(bc, cast(wrap_scalar(0), ct), backend::BinaryKernel::Eq, DType::Bool);
    TS_CHECK(!any(zero).item<bool>(), name, ": integer division by zero (the divisor of dtype ", dtype_name(ct),
             " contains 0)");
  }
  return run_binary(ac, bc, k, out_dtype);
}

Tensor run_binary(const Tensor& a, const Tensor& b, backend::BinaryKernel k, DType out_dtype) {
  TS_INTERNAL_ASSERT(backend::binary_defined(k, a.dtype()) && a.dtype() == b.dtype());
  Shape shape = IntArrayRef(a.shape()).equals(b.shape()) ? a.shape() : broadcast_shapes(a.shape(), b.shape(), "binary");
  Tensor out = empty(shape, TensorOptions(out_dtype, a.device()));
  backend::kernels(out).binary(out, a, b, k);
  return out;
}

bool binary_into(Tensor& self, const Tensor& other, backend::BinaryKernel k) {
  if (self.requires_grad() && GradMode::is_enabled()) return false;
  if (other.requires_grad() && GradMode::is_enabled()) return false;
  if (result_type(self, other) != self.dtype()) return false;
  if (!IntArrayRef(broadcast_shapes(self.shape(), other.shape(), "in-place")).equals(self.shape())) return false;
  // Reading other while writing self is safe only if they do not overlap, or
  // are the very same elements.
  if (other.storage() == self.storage() &&
      !(other.offset() == self.offset() && IntArrayRef(other.strides()).equals(self.strides()) &&
        IntArrayRef(other.shape()).equals(self.shape())))
    return false;
  if (!backend::binary_defined(k, self.dtype())) return false;
  if (other.device() != self.device()) return false;  // the op names both devices, or moves a wrapped number
  Tensor oc = cast(other, self.dtype());
  backend::kernels(self).binary(self, self, oc, k);
  self.storage()->bump_version();
  return true;
}


}  // namespace tessera::ops

#include "tessera/autograd/engine.h"

namespace tessera::ops {

backend::Epilogue epilogue_of(const std::string& activation, const char* op) {
  using E = backend::Epilogue;
  if (activation == "none") return E::None;
  if (activation == "relu") return E::Relu;
  if (activation == "gelu") return E::Gelu;
  if (activation == "gelu_tanh") return E::GeluTanh;
  if (activation == "silu") return E::Silu;
  if (activation == "tanh") return E::Tanh;
  TS_ERROR(op, ": activation must be none, relu, gelu, gelu_tanh, silu or tanh, got '", activation, "'");
}

Tensor apply_epilogue(const Tensor& y, backend::Epilogue act) {
  switch (act) {
    case backend::Epilogue::Relu: return relu(y);
    case backend::Epilogue::Gelu: return gelu(y);
    case backend::Epilogue::GeluTanh: return gelu(y, "tanh");
    case backend::Epilogue::Silu: return silu(y);
    case backend::Epilogue::Tanh: return tanh(y);
    case backend::Epilogue::None: break;
  }
  return y;
}

TensorList composite_vjp(const std::function<Tensor(const TensorList&)>& composite, const TensorList& inputs,
                         const std::vector<bool>& needs, const Tensor& grad) {
  TensorList wrt;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (i < needs.size() && needs[i] && inputs[i].defined()) wrt.push_back(inputs[i]);
  TensorList result(inputs.size());
  if (wrt.empty()) return result;
  Tensor out;
  {
    EnableGradGuard enable;
    out = composite(inputs);
  }
  TensorList g = autograd::grad({out}, wrt, {grad}, true, true, true);
  size_t k = 0;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (i < needs.size() && needs[i] && inputs[i].defined()) result[i] = g[k++];
  return result;
}

}  // namespace tessera::ops
