#include "backend/meta/backend.h"

namespace tessera::meta {
namespace {

// Note [The meta device]
// A meta tensor has a shape, a dtype, strides and a storage that counts its
// bytes but holds none (Note [Meta memory] in core/device.cpp). An op on meta
// tensors runs all of its own code — validation, shape and dtype rules,
// allocation of outputs, views, autograd recording — and then calls this
// backend's kernel entry, which does nothing. So every op that reaches its
// kernel through the seam works on meta, and one that reads data itself meets
// Tensor::raw_data's error ("a meta tensor has no data"): the op-table test
// runs every op on meta to find those. Values are never invented: an op whose
// output shape depends on data (nonzero, a check over values) fails on meta.
template <typename Fn>
struct Nothing;
template <typename R, typename... Args>
struct Nothing<R (*)(Args...)> {
  static R run(Args...) {
    if constexpr (!std::is_void_v<R>) return R{};
  }
};

constexpr backend::Kernels kKernels{
#define TS_X(name, type) &Nothing<backend::type>::run,
    TS_BACKEND_KERNELS(TS_X)
#undef TS_X
};

void copy_in(void*, const void*, size_t) {}  // nowhere to put the bytes: nothing to do
void copy_out(void*, const void*, size_t) { tessera::detail::throw_meta_data(); }
void synchronize() {}

}  // namespace

constinit const backend::Backend kBackend{"meta", DeviceType::Meta, &kMetaDeviceAllocator, copy_in, copy_out,
                                          synchronize, default_generator, &kKernels};

}  // namespace tessera::meta
