#include "tessera/core/shape.h"

#include "tessera/core/error.h"

namespace tessera {

bool IntArrayRef::equals(IntArrayRef o) const {
  if (size_ != o.size_) return false;
  for (size_t i = 0; i < size_; ++i)
    if (data_[i] != o.data_[i]) return false;
  return true;
}

std::string shape_str(IntArrayRef s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

std::ostream& operator<<(std::ostream& os, IntArrayRef s) { return os << shape_str(s); }

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  TS_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": ", a, " * ", b, " does not fit in a 64-bit integer");
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  TS_CHECK(!__builtin_add_overflow(a, b, &r), what, ": ", a, " + ", b, " does not fit in a 64-bit integer");
  return r;
}

int64_t numel_of(IntArrayRef shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    TS_CHECK(d >= 0, "shape ", shape_str(shape), " has a negative size ", d);
    overflow |= __builtin_mul_overflow(n, d, &n);
  }
  // A zero anywhere makes the product 0 whatever the other sizes are.
  TS_CHECK(!overflow || n == 0, "shape ", shape_str(shape), " has more elements than a 64-bit count holds");
  return n;
}

Shape contiguous_strides(IntArrayRef shape) {
  Shape st(shape.size(), 1);
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    TS_CHECK(!__builtin_mul_overflow(acc, std::max<int64_t>(shape[i], 1), &acc), "shape ", shape_str(shape),
             " is too large: its strides overflow 64-bit integers");
  }
  return st;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = ndim == 0 ? 1 : ndim;  // a 0-D tensor accepts dim 0 and -1, as in PyTorch
  TS_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor with ", ndim,
           " dimension", ndim == 1 ? "" : "s", " (expected a dim in [", -n, ", ", n - 1, "])");
  return dim < 0 ? dim + n : dim;
}

Shape broadcast_shapes(IntArrayRef a, IntArrayRef b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TS_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast: dimension ", i, " is ", da, " in one and ", db,
             " in the other (sizes must match or one of them must be 1)");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

uint64_t dim_mask(IntArrayRef dims, int64_t ndim, const char* op) {
  TS_CHECK(ndim <= kMaxDims, op, ": tensors with more than ", kMaxDims, " dimensions are not supported");
  if (dims.empty()) return ndim == 64 ? ~0ull : ((1ull << ndim) - 1);
  uint64_t m = 0;
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, ndim, op);
    if (ndim == 0) continue;
    TS_CHECK(!(m >> w & 1), op, ": dim ", w, " appears more than once in ", shape_str(dims));
    m |= 1ull << w;
  }
  return m;
}

}  // namespace tessera
