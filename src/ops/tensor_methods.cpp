// Tensor's autograd methods, in-place ops, operators and method forms of ops.
#include "ops/op_utils.h"
#include "tessera/autograd/engine.h"

namespace tessera {



// ---- autograd ------------------------------------------------------------------
bool Tensor::requires_grad() const { return impl_->autograd && impl_->autograd->requires_grad; }

Tensor& Tensor::requires_grad_(bool r) {
  TS_CHECK(!r || is_floating(dtype()), "requires_grad_: only floating-point tensors can require gradients, got ",
           dtype_name(dtype()));
  if (!r && !impl_->autograd) return *this;
  auto& m = impl_->autograd_meta();
  TS_CHECK(!m.grad_fn || r, "requires_grad_: you can only change requires_grad of leaf tensors; use detach() to get "
           "a tensor that does not require grad");
  m.requires_grad = r;
  return *this;
}

bool Tensor::is_leaf() const { return !impl_->autograd || !impl_->autograd->grad_fn; }

Tensor Tensor::grad() const {
  if (!impl_->autograd || !impl_->autograd->grad) return Tensor();
  return *impl_->autograd->grad;
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined())
    TS_CHECK(IntArrayRef(g.shape()).equals(shape()), "set_grad: gradient of shape ", shape_str(g.shape()),
             " does not match the tensor's shape ", shape_str(shape()));
  impl_->autograd_meta().grad = std::make_unique<Tensor>(g);
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  return impl_->autograd ? impl_->autograd->grad_fn : none;
}

Tensor Tensor::detach() const { return ops::detach(*this); }

Tensor& Tensor::detach_() {
  if (impl_->autograd) {
    impl_->autograd->grad_fn.reset();
    impl_->autograd->requires_grad = false;
  }
  return *this;
}

void Tensor::set_data(const Tensor& src) {
  TS_CHECK(src.defined(), "set_data: the source tensor is undefined");
  TS_CHECK(is_leaf(), "set_data: only leaf tensors (parameters, buffers) can have their data replaced");
  TS_CHECK(!src.requires_grad() || src.is_leaf(), "set_data: the source must not be part of a graph; detach it");
  TS_CHECK(!requires_grad() || is_floating(src.dtype()), "set_data: a tensor that requires grad needs floating "
           "data, got ", dtype_name(src.dtype()));
  if (src.dtype() != dtype() || src.device() != device() || !IntArrayRef(src.shape()).equals(shape()))
    set_grad(Tensor());
  impl_->storage = src.impl_->storage;
  impl_->shape = src.impl_->shape;
  impl_->strides = src.impl_->strides;
  impl_->offset = src.impl_->offset;
  impl_->dtype = src.impl_->dtype;
  impl_->device = src.impl_->device;
  impl_->is_view = src.impl_->is_view;
  impl_->refresh();
}

void Tensor::retain_grad() {
  TS_CHECK(requires_grad(), "retain_grad: cannot retain the gradient of a tensor that does not require grad");
  if (is_leaf()) return;
  auto& m = *impl_->autograd;
  if (m.retains_grad) return;
  m.retains_grad = true;
  m.grad_fn->retained.push_back({m.output_nr, impl_});
}

bool Tensor::retains_grad() const { return impl_->autograd && impl_->autograd->retains_grad; }

size_t Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) {
  TS_CHECK(requires_grad(), "register_hook: cannot register a hook on a tensor that does not require grad");
  auto& m = *impl_->autograd;
  if (m.grad_fn) {
    m.grad_fn->pre_hooks.push_back({m.output_nr, std::move(hook)});
    return m.grad_fn->pre_hooks.size() - 1;
  }
  m.hooks.push_back(std::move(hook));
  return m.hooks.size() - 1;
}

size_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) {
  TS_CHECK(requires_grad() && is_leaf(),
           "register_post_accumulate_grad_hook: only a leaf that requires grad has a .grad to hook (a parameter)");
  auto& hooks = impl_->autograd->post_accumulate_hooks;
  hooks.push_back(std::move(hook));
  return hooks.size() - 1;
}

void Tensor::remove_post_accumulate_grad_hook(size_t handle) {
  TS_CHECK(impl_ && impl_->autograd && handle < impl_->autograd->post_accumulate_hooks.size(),
           "remove_post_accumulate_grad_hook: no hook with handle ", handle, " on this tensor");
  impl_->autograd->post_accumulate_hooks[handle] = nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

// ---- in-place ops -----------------------------------------------------------------
namespace {

bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

// Note [In-place ops]
// An in-place op computes its out-of-place result and writes it into `self`.
// When autograd records, the result is computed from a clone of self (so the
// saved values survive the write) and self's history is re-pointed at the
// result's node. Leaves that require grad, and views taking part in autograd,
// are refused with an error rather than given wrong gradients.
template <typename F>
Tensor& apply_inplace(Tensor& self, const char* name, std::initializer_list<const Tensor*> others, F compute) {
  TS_CHECK(self.defined(), name, ": the tensor is undefined");
  bool record = GradMode::is_enabled() && (self.requires_grad() || autograd::any_requires_grad(others));
  if (record) {
    TS_CHECK(!(self.requires_grad() && self.is_leaf()), name,
             ": a leaf tensor that requires grad is being modified in place; do it under NoGradGuard, or on a "
             "clone()");
    TS_CHECK(!self.impl()->is_view, name,
             ": modifying a view in place while autograd records is not supported; clone() the view first, or "
             "apply the op to the base tensor");
  }
  Tensor src = record ? ops::clone(self) : self.detach();
  Tensor r = compute(src);
  TS_CHECK(IntArrayRef(r.shape()).equals(self.shape()), name, ": the result's shape ", shape_str(r.shape()),
           " does not match the shape ", shape_str(self.shape()), " of the tensor being modified in place");
  TS_CHECK(can_cast(r.dtype(), self.dtype()), name, ": the result type ", dtype_name(r.dtype()),
           " cannot be stored in a tensor of dtype ", dtype_name(self.dtype()), " in place");
  ops::copy_into(self, r);
  self.storage()->bump_version();
  if (record && r.grad_fn()) autograd::rebase_history(self, r.grad_fn());
  return self;
}

}  // namespace

// Whether an in-place op on self with `other` is outside autograd's view.
static bool not_recording(const Tensor& self, const Tensor& other) {
  return !GradMode::is_enabled() || !(self.requires_grad() || other.requires_grad());
}

Tensor& Tensor::add_(const Tensor& o, const Scalar& alpha) {
  if (not_recording(*this, o) &&
      ops::binary_into(*this, alpha.to_double() == 1.0 ? o : ops::mul(o, alpha), backend::BinaryKernel::Add))
    return *this;
  return apply_inplace(*this, "add_", {&o}, [&](const Tensor& s) { return ops::add(s, o, alpha); });
}
Tensor& Tensor::add_(const Scalar& o) {
  if (ops::binary_into(*this, ops::wrap_scalar(o), backend::BinaryKernel::Add)) return *this;
  return apply_inplace(*this, "add_", {}, [&](const Tensor& s) { return ops::add(s, o); });
}
Tensor& Tensor::sub_(const Tensor& o, const Scalar& alpha) {
  if (not_recording(*this, o) &&
      ops::binary_into(*this, alpha.to_double() == 1.0 ? o : ops::mul(o, alpha), backend::BinaryKernel::Sub))
    return *this;
  return apply_inplace(*this, "sub_", {&o}, [&](const Tensor& s) { return ops::sub(s, o, alpha); });
}
Tensor& Tensor::sub_(const Scalar& o) {
  return apply_inplace(*this, "sub_", {}, [&](const Tensor& s) { return ops::sub(s, o); });
}
Tensor& Tensor::mul_(const Tensor& o) {
  if (ops::binary_into(*this, o, backend::BinaryKernel::Mul)) return *this;
  return apply_inplace(*this, "mul_", {&o}, [&](const Tensor& s) { return ops::mul(s, o); });
}
Tensor& Tensor::mul_(const Scalar& o) {
  if (ops::binary_into(*this, ops::wrap_scalar(o), backend::BinaryKernel::Mul)) return *this;
  return apply_inplace(*this, "mul_", {}, [&](const Tensor& s) { return ops::mul(s, o); });
}
Tensor& Tensor::div_(const Tensor& o) {
  if (ops::binary_into(*this, o, backend::BinaryKernel::Div)) return *this;
  return apply_inplace(*this, "div_", {&o}, [&](const Tensor& s) { return ops::div(s, o); });
}
Tensor& Tensor::div_(const Scalar& o) {
  if (ops::binary_into(*this, ops::wrap_scalar(o), backend::BinaryKernel::Div)) return *this;
  return apply_inplace(*this, "div_", {}, [&](const Tensor& s) { return ops::div(s, o); });
}
Tensor& Tensor::zero_() { return fill_(0); }
Tensor& Tensor::fill_(const Scalar& v) {
  if (!GradMode::is_enabled() || !requires_grad()) {
    TS_CHECK(!(v.is_floating() && !is_floating_point()), "fill_: cannot fill a ", dtype_name(dtype()),
             " tensor with the float value ", v);
    ops::fill_into(*this, v);
    storage()->bump_version();
    return *this;
  }
  return apply_inplace(*this, "fill_", {}, [&](const Tensor& s) {
    return ops::where(ones_like(s, DType::Bool), v, s);
  });
}
Tensor& Tensor::copy_(const Tensor& src) {
  TS_CHECK(src.defined(), "copy_: the source tensor is undefined");
  if (!GradMode::is_enabled() || !(requires_grad() || src.requires_grad())) {
    Tensor s = ops::expand(src.detach(), shape());
    if (s.storage() == storage()) s = s.clone();  // overlapping memory: copy through a buffer
    ops::copy_into(*this, s);
    storage()->bump_version();
    return *this;
  }
  return apply_inplace(*this, "copy_", {&src}, [&](const Tensor& s) {
    return ops::where(ones_like(s, DType::Bool), ops::expand(src, shape()).to(dtype()), s);
  });
}
Tensor& Tensor::clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi) {
  return apply_inplace(*this, "clamp_", {}, [&](const Tensor& s) { return ops::clamp(s, lo, hi); });
}
Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& v) {
  return apply_inplace(*this, "masked_fill_", {}, [&](const Tensor& s) { return ops::masked_fill(s, mask, v); });
}
Tensor& Tensor::index_add_(int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha) {
  return apply_inplace(*this, "index_add_", {&src},
                       [&](const Tensor& s) { return ops::index_add(s, dim, index, src, alpha); });
}
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src) {
  return apply_inplace(*this, "scatter_", {&src}, [&](const Tensor& s) { return ops::scatter(s, dim, index, src); });
}
Tensor& Tensor::scatter_add_(int64_t dim, const Tensor& index, const Tensor& src) {
  return apply_inplace(*this, "scatter_add_", {&src},
                       [&](const Tensor& s) { return ops::scatter_add(s, dim, index, src); });
}
Tensor& Tensor::index_fill_(int64_t dim, const Tensor& index, const Scalar& v) {
  return apply_inplace(*this, "index_fill_", {}, [&](const Tensor& s) {
    // Rows of `dim` listed in index become v: scatter a filled block there.
    Shape ishape = s.shape();
    ishape[wrap_dim(dim, s.dim(), "index_fill_")] = index.numel();
    Tensor mask = ops::index_add(zeros_like(s, DType::F32), dim, index, ones(ishape, DType::F32));
    return ops::where(ops::gt(mask, 0), v, s);
  });
}

// ---- method forms ---------------------------------------------------------------
Tensor Tensor::sum() const { return ops::sum(*this); }
Tensor Tensor::sum(IntArrayRef d, bool k) const { return ops::sum(*this, d, k); }
Tensor Tensor::mean() const { return ops::mean(*this); }
Tensor Tensor::mean(IntArrayRef d, bool k) const { return ops::mean(*this, d, k); }
Tensor Tensor::abs() const { return ops::abs(*this); }
Tensor Tensor::exp() const { return ops::exp(*this); }
Tensor Tensor::log() const { return ops::log(*this); }
Tensor Tensor::sqrt() const { return ops::sqrt(*this); }
Tensor Tensor::pow(const Scalar& e) const { return ops::pow(*this, e); }
Tensor Tensor::matmul(const Tensor& o) const { return ops::matmul(*this, o); }
Tensor Tensor::max() const { return ops::max(*this); }
Tensor Tensor::min() const { return ops::min(*this); }

// ---- operators ------------------------------------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return ops::add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return ops::sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return ops::mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return ops::div(a, b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return ops::add(a, b); }
Tensor operator-(const Scalar& a, const Tensor& b) { return ops::sub(a, b); }
Tensor operator*(const Scalar& a, const Tensor& b) { return ops::mul(a, b); }
Tensor operator/(const Scalar& a, const Tensor& b) { return ops::div(a, b); }
Tensor operator-(const Tensor& a) { return ops::neg(a); }
Tensor operator==(const Tensor& a, const Tensor& b) { return ops::eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ops::ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return ops::lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return ops::le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return ops::gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ops::ge(a, b); }
Tensor operator==(const Tensor& a, const Scalar& b) { return ops::eq(a, b); }
Tensor operator<(const Tensor& a, const Scalar& b) { return ops::lt(a, b); }
Tensor operator>(const Tensor& a, const Scalar& b) { return ops::gt(a, b); }

}  // namespace tessera
