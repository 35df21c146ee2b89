#pragma once
// Kernel scratch from the caching allocator, returned on scope exit: widened
// operands and partial results are as large as activations, and fresh pages
// cost ~15 us each here (core/allocator.h).
#include <algorithm>
#include <cstdint>

#include "tessera/core/allocator.h"

namespace tessera::cpu {

template <typename T>
class Scratch {
 public:
  explicit Scratch(int64_t n) : bytes_(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T)) {
    p_ = static_cast<T*>(cpu_allocate(bytes_));
  }
  ~Scratch() { cpu_free(p_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* data() const { return p_; }

 private:
  size_t bytes_;
  T* p_;
};
using F32Scratch = Scratch<float>;

}  // namespace tessera::cpu
