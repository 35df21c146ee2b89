// The CPU backend's indexing entries: gather/scatter and index_select/add,
// and the check of index values (the op layer checks shapes; values are data).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <cstring>
#include <vector>

#include "backend/cpu/backend.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu::entry {
namespace {

// Walks every position of `shape` in row-major order, calling f(coords).
template <typename F>
void for_each_coord(IntArrayRef shape, F&& f) {
  int64_t n = numel_of(shape);
  if (n == 0) return;
  int64_t nd = static_cast<int64_t>(shape.size());
  std::vector<int64_t> c(nd, 0);
  for (int64_t i = 0; i < n; ++i) {
    f(c.data());
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++c[d] < shape[d]) break;
      c[d] = 0;
    }
  }
}

int64_t offset_of(const int64_t* c, IntArrayRef strides, int64_t skip_dim = -1, int64_t at = 0) {
  int64_t o = 0;
  for (size_t d = 0; d < strides.size(); ++d)
    o += (static_cast<int64_t>(d) == skip_dim ? at : c[d]) * strides[d];
  return o;
}

}  // namespace

void index_check(const Tensor& idx, int64_t n, int64_t dim, const char* op) {
  const int64_t* p = idx.data_ptr<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i)
    TS_CHECK(p[i] >= -n && p[i] < n, op, ": index ", p[i], " is out of bounds for dimension ", dim, " with size ", n);
}

void gather(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& idx) {
  int64_t n = x.dim() == 0 ? 1 : x.shape()[dim];
  Shape xst = x.strides();
  const int64_t* ip = idx.data_ptr<int64_t>();
  visit_dtype(x.dtype(), [&]<typename T>() {
    const T* xp = x.data_ptr<T>();
    T* o = out.data_ptr<T>();
    int64_t lin = 0;
    for_each_coord(idx.shape(), [&](const int64_t* c) {
      int64_t k = ip[lin];
      if (k < 0) k += n;
      o[lin++] = xp[offset_of(c, xst, x.dim() == 0 ? -1 : dim, k)];
    });
  });
}

void scatter(const Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src, bool accumulate) {
  Shape ist = contiguous_strides(idx.shape());
  Shape sst = src.strides();
  Shape ost = out.strides();
  int64_t n = out.dim() == 0 ? 1 : out.shape()[dim];
  const int64_t* ip = idx.data_ptr<int64_t>();
  visit_dtype(out.dtype(), [&]<typename T>() {
    T* o = out.data_ptr<T>();
    const T* sp = src.data_ptr<T>();
    for_each_coord(idx.shape(), [&](const int64_t* c) {
      int64_t k = ip[offset_of(c, ist)];
      if (k < 0) k += n;
      T v = sp[offset_of(c, sst)];
      T& dst = o[offset_of(c, ost, dim, k)];
      if (accumulate) {
        if constexpr (std::is_same_v<T, bool>) dst = dst || v;
        else dst = static_cast<T>(static_cast<acc_t<T>>(dst) + static_cast<acc_t<T>>(v));
      } else {
        dst = v;
      }
    });
  });
}

void index_select(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& idx) {
  int64_t n = x.shape()[dim], k = idx.numel();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  const int64_t* ip = idx.data_ptr<int64_t>();
  size_t item = x.itemsize();
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  size_t row = static_cast<size_t>(inner) * item;
  parallel_for(0, outer * k, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int64_t o = i / k, j = i % k;
      int64_t s = ip[j] < 0 ? ip[j] + n : ip[j];
      std::memcpy(dst + i * row, src + (o * n + s) * row, row);
    }
  });
}

void index_add(const Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src) {
  int64_t n = out.dim() == 0 ? 1 : out.shape()[dim];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= out.shape()[d];
  for (int64_t d = dim + 1; d < out.dim(); ++d) inner *= out.shape()[d];
  int64_t k = idx.numel();
  const int64_t* ip = idx.data_ptr<int64_t>();
  visit_dtype(out.dtype(), [&]<typename T>() {
    T* o = out.data_ptr<T>();
    const T* s = src.data_ptr<T>();
    // Parallel over outer rows only: the same destination row may appear in
    // several indices, and a fixed order keeps the sums deterministic.
    parallel_for(0, outer, 1, [&](int64_t b, int64_t e) {
      for (int64_t oi = b; oi < e; ++oi)
        for (int64_t j = 0; j < k; ++j) {
          int64_t t = ip[j] < 0 ? ip[j] + n : ip[j];
          T* dst = o + (oi * n + t) * inner;
          const T* sr = s + (oi * k + j) * inner;
          for (int64_t i = 0; i < inner; ++i) {
            if constexpr (std::is_same_v<T, bool>) dst[i] = dst[i] || sr[i];
            else dst[i] = static_cast<T>(static_cast<acc_t<T>>(dst[i]) + static_cast<acc_t<T>>(sr[i]));
          }
        }
    });
  });
}

Tensor nonzero(const Tensor& nz) {
  const bool* p = nz.data_ptr<bool>();
  int64_t count = 0;
  for (int64_t i = 0; i < nz.numel(); ++i) count += p[i];
  int64_t nd = nz.dim();
  if (nd == 0) return empty({count, 0}, TensorOptions(DType::I64, nz.device()));  // no elements to write
  Tensor out = empty({count, nd}, TensorOptions(DType::I64, nz.device()));
  int64_t* o = out.data_ptr<int64_t>();
  int64_t lin = 0, w = 0;
  for_each_coord(nz.shape(), [&](const int64_t* c) {
    if (p[lin++])
      for (int64_t d = 0; d < nd; ++d) o[w++] = c[d];
  });
  return out;
}

// NaN sorts as the largest value.
void sort_rows(const Tensor& xt, const Tensor& values, const Tensor& indices, int64_t rows, int64_t len, int64_t k,
               bool descending, bool stable, bool sorted) {
  visit_dtype(xt.dtype(), [&]<typename T>() {
    const T* xp = xt.data_ptr<T>();
    T* vp = values.data_ptr<T>();
    int64_t* ip = indices.data_ptr<int64_t>();
    parallel_for(0, rows, 1, [&](int64_t b, int64_t e) {
      std::vector<int64_t> order(len);
      for (int64_t r = b; r < e; ++r) {
        const T* row = xp + r * len;
        std::iota(order.begin(), order.end(), 0);
        auto less = [&](int64_t i, int64_t j) {
          double a = static_cast<double>(static_cast<acc_t<T>>(row[i]));
          double c = static_cast<double>(static_cast<acc_t<T>>(row[j]));
          bool an = std::isnan(a), cn = std::isnan(c);
          if (descending) return an ? !cn : (!cn && a > c);
          return cn ? !an : (!an && a < c);
        };
        if (k < len && !stable) std::partial_sort(order.begin(), order.begin() + k, order.end(), less);
        else std::stable_sort(order.begin(), order.end(), less);
        if (!sorted && k < len) std::sort(order.begin(), order.begin() + k);
        for (int64_t i = 0; i < k; ++i) {
          vp[r * k + i] = row[order[i]];
          ip[r * k + i] = order[i];
        }
      }
    });
  });
}

}  // namespace tessera::cpu::entry
