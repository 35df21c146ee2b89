#pragma once
// Kernel scratch from the caching allocator, returned on scope exit: widened
// operands and partial results are as large as activations, and fresh pages
// cost ~15 us each here (core/allocator.h).
#include <algorithm>
#include <cstdint>

#include "tessera/core/allocator.h"

namespace tessera::cpu {

class F32Scratch {
 public:
  explicit F32Scratch(int64_t n) : bytes_(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float)) {
    p_ = static_cast<float*>(cpu_allocate(bytes_));
  }
  ~F32Scratch() { cpu_free(p_, bytes_); }
  F32Scratch(const F32Scratch&) = delete;
  F32Scratch& operator=(const F32Scratch&) = delete;
  float* data() const { return p_; }

 private:
  size_t bytes_;
  float* p_;
};

}  // namespace tessera::cpu
