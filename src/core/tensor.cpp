#include "tessera/core/tensor.h"

#include <cstring>

#include "tessera/core/allocator.h"
#include "tessera/core/trace.h"

namespace tessera {

AutogradMeta::~AutogradMeta() = default;

TensorImpl::TensorImpl(StoragePtr s, Shape sh, Shape st, int64_t off, DType dt)
    : storage(std::move(s)), shape(std::move(sh)), strides(std::move(st)), offset(off), dtype(dt),
      device(storage->device()) {
  refresh();
}

void detail::throw_meta_data() {
  TS_ERROR("a meta tensor has no data: meta tensors carry shapes, dtypes and strides only. Materialize it on a "
           "device with memory first (Module::to_empty, or empty_like on the CPU)");
}

TensorImpl::~TensorImpl() = default;

void TensorImpl::refresh() {
  TS_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "a tensor of ", shape.size(), " dimensions; at most ",
           kMaxDims, " are supported");
  numel = numel_of(shape);
  // Contiguous: row-major strides, ignoring dims of size 1 (their stride is free).
  bool c = true;
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) {
      c = false;
      break;
    }
    expected *= shape[i];
  }
  is_contiguous = c || numel == 0;
}

AutogradMeta& TensorImpl::autograd_meta() {
  if (!autograd) autograd = std::make_unique<AutogradMeta>();
  return *autograd;
}

int64_t Tensor::size(int64_t d) const { return impl_->shape[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return impl_->strides[wrap_dim(d, dim(), "stride")]; }

void detail::host_read(const Tensor& t) { trace::host_read(t); }

Scalar Tensor::item() const {
  TS_CHECK(defined(), "item: the tensor is undefined");
  trace::host_read(*this);
  TS_CHECK(numel() == 1, "item: only a tensor with one element can be converted to a scalar, got shape ",
           shape_str(shape()), " (", numel(), " elements)");
  return visit_dtype(dtype(), [&]<typename T>() -> Scalar {
    T v;
    std::memcpy(&v, raw_data(), sizeof(T));
    return Scalar(v);
  });
}

Tensor empty(IntArrayRef shape, TensorOptions opts) {
  for (int64_t d : shape)
    TS_CHECK(d >= 0, "empty: negative dimension ", d, " in shape ", shape_str(shape));
  TS_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "empty: ", shape.size(),
           " dimensions requested; at most ", kMaxDims, " are supported");
  // Checked sizes, then checked allocation: Note [Sizes from outside] in shape.h.
  int64_t n = numel_of(shape);
  int64_t bytes;
  TS_CHECK(!__builtin_mul_overflow(n, static_cast<int64_t>(dtype_size(opts.dtype)), &bytes), "empty: a tensor of shape ",
           shape_str(shape), " ", dtype_name(opts.dtype), " needs more bytes than a 64-bit count holds");
  StoragePtr storage;
  try {
    storage = make_intrusive<Storage>(static_cast<size_t>(bytes), opts.device);
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(detail::str("a tensor of shape ", shape_str(shape), " ", dtype_name(opts.dtype), ": ", e.what()));
  }
  auto impl = make_intrusive<TensorImpl>(std::move(storage), shape.shape(), contiguous_strides(shape), 0, opts.dtype);
  if (opts.requires_grad) {  // set here: core does not call into autograd
    TS_CHECK(is_floating(opts.dtype), "empty: only floating-point tensors can require gradients, got ",
             dtype_name(opts.dtype));
    impl->autograd_meta().requires_grad = true;
  }
  return Tensor(std::move(impl));
}

Tensor empty_like(const Tensor& t, std::optional<DType> dtype) {
  return empty(t.shape(), TensorOptions(dtype.value_or(t.dtype()), t.device()));
}

Tensor from_blob(void* data, IntArrayRef shape, IntArrayRef strides, DType dtype,
                 std::function<void(void*)> deleter) {
  TS_CHECK(shape.size() == strides.size(), "from_blob: shape ", shape_str(shape), " and strides ",
           shape_str(strides), " differ in length");
  TS_CHECK(data != nullptr || numel_of(shape) == 0, "from_blob: data is null");
  int64_t extent = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    TS_CHECK(shape[i] >= 0, "from_blob: negative dimension ", shape[i], " in shape ", shape_str(shape));
    TS_CHECK(strides[i] >= 0, "from_blob: negative stride ", strides[i], " is not supported");
    if (shape[i] > 0) extent = checked_add(extent, checked_mul(shape[i] - 1, strides[i], "from_blob"), "from_blob");
  }
  size_t bytes = numel_of(shape) == 0
                     ? 0
                     : static_cast<size_t>(checked_mul(extent + 1, static_cast<int64_t>(dtype_size(dtype)), "from_blob"));
  auto storage = make_intrusive<Storage>(data, bytes, std::move(deleter));
  return Tensor(make_intrusive<TensorImpl>(std::move(storage), shape.shape(), strides.shape(), 0, dtype));
}

Tensor from_blob(void* data, IntArrayRef shape, DType dtype, std::function<void(void*)> deleter) {
  return from_blob(data, shape, contiguous_strides(shape), dtype, std::move(deleter));
}

Tensor from_buffer(const void* data, IntArrayRef shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  if (t.nbytes()) std::memcpy(t.raw_data(), data, t.nbytes());
  return t;
}

}  // namespace tessera
