#pragma once
// Shapes, strides and the rules that relate them: broadcasting, dim wrapping,
// contiguous strides. IntArrayRef is the non-owning view every API takes.
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

#include "tessera/core/small_vector.h"

namespace tessera {

using Shape = SmallVector<int64_t, 6>;

// A non-owning view of int64_t values: built from {a, b}, a vector or a Shape.
class IntArrayRef {
 public:
  IntArrayRef() = default;
  IntArrayRef(const int64_t* p, size_t n) : data_(p), size_(n) {}
  // Like std::span over a braced list: valid for the full expression it is used in.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
  IntArrayRef(std::initializer_list<int64_t> il) : data_(il.begin()), size_(il.size()) {}
#pragma GCC diagnostic pop
  IntArrayRef(const std::vector<int64_t>& v) : data_(v.data()), size_(v.size()) {}
  template <size_t N>
  IntArrayRef(const SmallVector<int64_t, N>& v) : data_(v.data()), size_(v.size()) {}
  IntArrayRef(const int64_t& single) : data_(&single), size_(1) {}

  const int64_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const int64_t* begin() const { return data_; }
  const int64_t* end() const { return data_ + size_; }
  int64_t operator[](size_t i) const { return data_[i]; }
  int64_t back() const { return data_[size_ - 1]; }
  Shape shape() const { return Shape(begin(), end()); }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }
  bool equals(IntArrayRef o) const;

 private:
  const int64_t* data_ = nullptr;
  size_t size_ = 0;
};

// "[2, 3, 4]"
std::string shape_str(IntArrayRef s);
std::ostream& operator<<(std::ostream& os, IntArrayRef s);
template <size_t N>
std::ostream& operator<<(std::ostream& os, const SmallVector<int64_t, N>& s) {
  return os << IntArrayRef(s);
}

// Note [Sizes from outside]
// Sizes read from files, requests and configs reach core as shapes (empty(),
// views, the shape rules of ops). Every element count, stride and byte count
// is computed with the overflow checks below, in one place, and a tensor's
// byte count is checked against the allocation limits (allocator.h) before
// anything is allocated. A size that does not fit is a tessera::Error naming
// the shape; the importer and the executor add the node it came from.

// a * b and a + b, or an Error saying that `what` does not fit in 64 bits.
int64_t checked_mul(int64_t a, int64_t b, const char* what);
int64_t checked_add(int64_t a, int64_t b, const char* what);
// The product of the dims: every dim must be >= 0 and the product fit in int64.
int64_t numel_of(IntArrayRef shape);
Shape contiguous_strides(IntArrayRef shape);
// Wraps a possibly negative dim into [0, ndim); `op` names the caller in the error.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// NumPy broadcasting of two shapes; throws naming `op` when they do not broadcast.
Shape broadcast_shapes(IntArrayRef a, IntArrayRef b, const char* op);
// A bitmask of the (wrapped, deduplicated-checked) dims; empty `dims` means all.
uint64_t dim_mask(IntArrayRef dims, int64_t ndim, const char* op);

constexpr int64_t kMaxDims = 64;

}  // namespace tessera
