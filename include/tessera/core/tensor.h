#pragma once
// Tensor: a cheap, reference-counted handle to a TensorImpl (storage + shape +
// strides + offset + dtype + device + optional autograd metadata). Copying a
// Tensor shares the data; views share storage with their base.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/intrusive_ptr.h"
#include "tessera/core/object_pool.h"
#include "tessera/core/scalar.h"
#include "tessera/core/shape.h"
#include "tessera/core/storage.h"

namespace tessera {

namespace autograd {
class Node;
}
class Tensor;
using TensorList = std::vector<Tensor>;

// Per-tensor autograd state, allocated only for tensors that take part in autograd.
struct AutogradMeta {
  std::shared_ptr<autograd::Node> grad_fn;       // the node that produced this tensor
  std::weak_ptr<autograd::Node> grad_accumulator; // for leaves: where .grad is summed
  std::unique_ptr<Tensor> grad;                  // accumulated gradient (leaves, retain_grad)
  std::vector<std::function<Tensor(const Tensor&)>> hooks;
  // Run after .grad of a leaf has been updated; a removed hook is left empty.
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
  uint32_t output_nr = 0;
  bool requires_grad = false;
  bool retains_grad = false;
  ~AutogradMeta();
  TS_POOLED(AutogradMeta)
};

class TensorImpl : public RefCounted {
 public:
  TensorImpl(StoragePtr storage, Shape shape, Shape strides, int64_t offset, DType dtype);
  ~TensorImpl() override;

  StoragePtr storage;
  Shape shape;
  Shape strides;
  int64_t offset = 0;  // in elements
  int64_t numel = 0;
  DType dtype;
  Device device;
  bool is_contiguous = true;
  bool is_view = false;          // shares storage with a tensor it was derived from
  bool wrapped_number = false;   // a Scalar turned into a tensor (promotion rule)
  std::unique_ptr<AutogradMeta> autograd;

  void refresh();  // recompute numel and is_contiguous after shape/stride edits
  AutogradMeta& autograd_meta();
  TS_POOLED(TensorImpl)
};

// The device that factories (empty, zeros, rand, a module's parameters) use
// when none is named: the CPU, or the innermost DeviceScope's. Inside an op
// it is the op's inputs' device (ops::OpScope), so every tensor an op makes
// lands beside its inputs.
namespace detail {
// Read by every empty(): constinit spares each read the TLS wrapper call, and
// the initial-exec model spares it __tls_get_addr (libtessera.so is loaded
// with the program, or dlopen'ed into glibc's spare static TLS).
extern __attribute__((tls_model("initial-exec"))) constinit thread_local Device t_current_device;
[[noreturn]] void throw_meta_data();
}
inline Device current_device() { return detail::t_current_device; }
class DeviceScope {
 public:
  explicit DeviceScope(Device d);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Device prev_;
};

struct TensorOptions {
  DType dtype = DType::F32;
  Device device = current_device();
  bool requires_grad = false;
  TensorOptions() = default;
  TensorOptions(DType t) : dtype(t) {}
  TensorOptions(DType t, Device d) : dtype(t), device(d) {}
  TensorOptions& with_requires_grad(bool r = true) { requires_grad = r; return *this; }
};

class Generator;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(IntrusivePtr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata --------------------------------------------------------
  bool defined() const { return static_cast<bool>(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  int64_t dim() const { return static_cast<int64_t>(impl_->shape.size()); }
  const Shape& shape() const { return impl_->shape; }
  const Shape& sizes() const { return impl_->shape; }
  const Shape& strides() const { return impl_->strides; }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return impl_->numel; }
  int64_t offset() const { return impl_->offset; }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->device; }
  size_t itemsize() const { return dtype_size(impl_->dtype); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(); }
  bool is_contiguous() const { return impl_->is_contiguous; }
  bool is_floating_point() const { return is_floating(dtype()); }
  const StoragePtr& storage() const { return impl_->storage; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  uint32_t version() const { return impl_->storage->version(); }
  std::string str() const;  // printed like PyTorch

  bool is_meta() const { return impl_->device.type == DeviceType::Meta; }

  // ---- data access -----------------------------------------------------
  // Throws on a meta tensor (Note [The meta device]): kernels and code that
  // read data meet the error instead of a null pointer.
  void* raw_data() const {
    if (is_meta()) [[unlikely]] detail::throw_meta_data();
    return static_cast<char*>(impl_->storage->data()) + impl_->offset * static_cast<int64_t>(itemsize());
  }
  template <typename T> T* data_ptr() const;
  template <typename T> T item() const;
  Scalar item() const;
  template <typename T> std::vector<T> to_vector() const;

  // ---- conversion and copies ------------------------------------------
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType t) const;
  // This tensor on `device`: itself if already there, else a copy (onto
  // meta: only shape, dtype and strides; from meta: an error, there is no
  // data to copy; use empty_like on the target device instead).
  Tensor to(Device device) const;

  // ---- views (share storage) ------------------------------------------
  Tensor view(IntArrayRef shape) const;
  Tensor reshape(IntArrayRef shape) const;
  Tensor permute(IntArrayRef dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose (or a no-op for 0-D/1-D)
  Tensor mT() const; // transpose of the last two dims
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand(IntArrayRef shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor broadcast_to(IntArrayRef shape) const { return expand(shape); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, IntArrayRef sizes) const;
  Tensor diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1) const;

  // ---- autograd --------------------------------------------------------
  bool requires_grad() const;
  Tensor& requires_grad_(bool r = true);
  bool is_leaf() const;
  Tensor grad() const;          // undefined Tensor when there is none
  void set_grad(const Tensor& g);
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  Tensor detach() const;
  Tensor& detach_();
  // Points this leaf at src's data (storage, shape, dtype), keeping its identity and
  // requires_grad: how Module::to(dtype) changes parameters that others hold.
  void set_data(const Tensor& src);
  void retain_grad();
  bool retains_grad() const;
  // The hook sees the gradient flowing into this tensor and may return a
  // replacement (or an undefined Tensor to keep it). Returns the hook's index.
  size_t register_hook(std::function<Tensor(const Tensor&)> hook);
  // For leaves: `hook(*this)` runs each time backward has summed a gradient
  // into .grad (data parallelism starts a bucket's all-reduce here). Returns a
  // handle for remove_post_accumulate_grad_hook.
  size_t register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook);
  void remove_post_accumulate_grad_hook(size_t handle);
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false,
                bool create_graph = false) const;

  // ---- in-place ops ----------------------------------------------------
  Tensor& add_(const Tensor& o, const Scalar& alpha = 1);
  Tensor& add_(const Scalar& o);
  Tensor& sub_(const Tensor& o, const Scalar& alpha = 1);
  Tensor& sub_(const Scalar& o);
  Tensor& mul_(const Tensor& o);
  Tensor& mul_(const Scalar& o);
  Tensor& div_(const Tensor& o);
  Tensor& div_(const Scalar& o);
  Tensor& zero_();
  Tensor& fill_(const Scalar& v);
  Tensor& copy_(const Tensor& src);
  Tensor& clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi);
  Tensor& masked_fill_(const Tensor& mask, const Scalar& v);
  Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha = 1);
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& index_fill_(int64_t dim, const Tensor& index, const Scalar& v);

  // ---- common ops as methods (the functions live in tessera::ops) -----
  Tensor sum() const;
  Tensor sum(IntArrayRef dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(IntArrayRef dims, bool keepdim = false) const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor pow(const Scalar& e) const;
  Tensor matmul(const Tensor& o) const;
  Tensor max() const;
  Tensor min() const;

 private:
  IntrusivePtr<TensorImpl> impl_;
};

// Arithmetic operators: same as ops::add / sub / mul / div / neg.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Scalar& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Scalar& b);
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- factories ----------------------------------------------------------
Tensor empty(IntArrayRef shape, TensorOptions opts = {});
Tensor zeros(IntArrayRef shape, TensorOptions opts = {});
Tensor ones(IntArrayRef shape, TensorOptions opts = {});
Tensor full(IntArrayRef shape, const Scalar& value, TensorOptions opts = {});
// full() with the dtype of the value (bool, i64 or the default float).
Tensor full(IntArrayRef shape, const Scalar& value, std::nullptr_t);
Tensor scalar_tensor(const Scalar& value, DType dtype);
// dtype defaults to i64 for an integer end, the default float dtype otherwise (as torch.arange).
Tensor arange(const Scalar& end, std::optional<DType> dtype = {});
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1, std::optional<DType> dtype = {});
Tensor linspace(double start, double end, int64_t steps, TensorOptions opts = {});
Tensor eye(int64_t n, std::optional<int64_t> m = {}, TensorOptions opts = {});
Tensor empty_like(const Tensor& t, std::optional<DType> dtype = {});
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype = {});
Tensor ones_like(const Tensor& t, std::optional<DType> dtype = {});
Tensor full_like(const Tensor& t, const Scalar& value, std::optional<DType> dtype = {});
// Copies `values` into a new tensor of `shape` (defaults to 1-D).
template <typename T>
Tensor tensor(const std::vector<T>& values, IntArrayRef shape = {});
Tensor tensor(std::initializer_list<double> values, IntArrayRef shape = {}, DType dtype = DType::F32);
// Wraps an existing buffer without copying; `deleter` (optional) runs when the
// last tensor using it is gone. The caller keeps the buffer alive until then.
Tensor from_blob(void* data, IntArrayRef shape, DType dtype, std::function<void(void*)> deleter = {});
Tensor from_blob(void* data, IntArrayRef shape, IntArrayRef strides, DType dtype,
                 std::function<void(void*)> deleter = {});
// Copies a raw buffer of numel(shape) elements.
Tensor from_buffer(const void* data, IntArrayRef shape, DType dtype);

namespace detail {
void host_read(const Tensor& t);  // trace::host_read, without including trace.h here
}

// ---- inline definitions ---------------------------------------------------
template <typename T>
T* Tensor::data_ptr() const {
  TS_CHECK(defined(), "data_ptr: the tensor is undefined");
  TS_CHECK(dtype_v<T> == dtype(), "data_ptr<", dtype_name(dtype_v<T>), ">: the tensor's dtype is ",
           dtype_name(dtype()));
  return static_cast<T*>(raw_data());
}

template <typename T>
T Tensor::item() const {
  return item().to<T>();
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  detail::host_read(*this);
  Tensor c = to(dtype_v<T>).contiguous();
  const T* p = c.data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}

template <typename T>
Tensor tensor(const std::vector<T>& values, IntArrayRef shape) {
  Shape s = shape.empty() ? Shape{static_cast<int64_t>(values.size())} : shape.shape();
  TS_CHECK(numel_of(s) == static_cast<int64_t>(values.size()), "tensor: ", values.size(),
           " values cannot fill shape ", shape_str(s), " (", numel_of(s), " elements)");
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> b(values.begin(), values.end());
    return from_buffer(b.data(), s, DType::Bool);
  } else {
    return from_buffer(values.data(), s, dtype_v<T>);
  }
}

}  // namespace tessera
