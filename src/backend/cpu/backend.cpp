#include "backend/cpu/backend.h"

#include <cstring>

namespace tessera::cpu {
namespace {

void copy_bytes(void* dst, const void* src, size_t nbytes) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}
void synchronize() {}  // CPU kernels finish before they return

constexpr backend::Kernels kKernels{
#define TS_X(name, type) &entry::name,
    TS_BACKEND_KERNELS(TS_X)
#undef TS_X
};

}  // namespace

constinit const backend::Backend kBackend{"cpu",       DeviceType::CPU, &kCpuDeviceAllocator, copy_bytes, copy_bytes,
                                          synchronize, default_generator, &kKernels, llm_kernels};

}  // namespace tessera::cpu
