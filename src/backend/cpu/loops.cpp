#include "backend/cpu/loops.h"

#include <cstring>

#include "tessera/core/parallel.h"

namespace tessera::cpu {
namespace {

constexpr int kMaxArgs = 4;

struct Geometry {
  int nargs = 0;
  int ndim = 0;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxArgs][kMaxDims];  // bytes
  char* base[kMaxArgs];
};

// Lays out each operand's byte strides on the output's dims (0 where an input
// broadcasts), then merges dims that are contiguous for every operand.
void build(Geometry& g, const Tensor& out, std::initializer_list<const Tensor*> ins) {
  g.nargs = 1 + static_cast<int>(ins.size());
  TS_INTERNAL_ASSERT(g.nargs <= kMaxArgs);
  int od = static_cast<int>(out.dim());
  const Tensor* ops[kMaxArgs] = {&out};
  int k = 1;
  for (const Tensor* t : ins) ops[k++] = t;
  int nd = 0;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxArgs][kMaxDims];
  for (int d = 0; d < od; ++d) {
    int64_t size = out.shape()[d];
    if (size == 1) continue;  // size-1 dims carry no iteration
    shape[nd] = size;
    for (int a = 0; a < g.nargs; ++a) {
      const Tensor& t = *ops[a];
      int td = d - (od - static_cast<int>(t.dim()));
      int64_t st = 0;
      if (td >= 0 && t.shape()[td] != 1) st = t.strides()[td] * static_cast<int64_t>(t.itemsize());
      strides[a][nd] = st;
    }
    ++nd;
  }
  // Coalesce from the innermost dim outwards.
  g.ndim = 0;
  for (int d = nd - 1; d >= 0; --d) {
    if (g.ndim > 0) {
      int last = g.ndim - 1;
      bool ok = true;
      for (int a = 0; a < g.nargs && ok; ++a) ok = strides[a][d] == strides[a][last] * g.shape[last];
      if (ok) {
        g.shape[last] *= shape[d];
        continue;
      }
    }
    g.shape[g.ndim] = shape[d];
    for (int a = 0; a < g.nargs; ++a) g.strides[a][g.ndim] = strides[a][d];
    ++g.ndim;
  }
  // g is now innermost-first.
  if (g.ndim == 0) {
    g.ndim = 1;
    g.shape[0] = 1;
    for (int a = 0; a < g.nargs; ++a) g.strides[a][0] = 0;
  }
  for (int a = 0; a < g.nargs; ++a) g.base[a] = static_cast<char*>(ops[a]->raw_data());
}

void run_range(const Geometry& g, int64_t begin, int64_t end, Loop1d loop, const double* params) {
  int64_t counter[kMaxDims];
  int64_t rem = begin;
  char* ptrs[kMaxArgs];
  for (int a = 0; a < g.nargs; ++a) ptrs[a] = g.base[a];
  for (int d = 0; d < g.ndim; ++d) {
    counter[d] = rem % g.shape[d];
    rem /= g.shape[d];
    for (int a = 0; a < g.nargs; ++a) ptrs[a] += counter[d] * g.strides[a][d];
  }
  int64_t inner_strides[kMaxArgs];
  for (int a = 0; a < g.nargs; ++a) inner_strides[a] = g.strides[a][0];
  int64_t left = end - begin;
  while (left > 0) {
    int64_t run = std::min(g.shape[0] - counter[0], left);
    loop(ptrs, inner_strides, run, params);
    left -= run;
    if (left == 0) break;
    // Advance the counter by `run` in dim 0, carrying into outer dims.
    for (int a = 0; a < g.nargs; ++a) ptrs[a] -= counter[0] * g.strides[a][0];
    counter[0] = 0;
    for (int d = 1; d < g.ndim; ++d) {
      for (int a = 0; a < g.nargs; ++a) ptrs[a] += g.strides[a][d];
      if (++counter[d] < g.shape[d]) break;
      for (int a = 0; a < g.nargs; ++a) ptrs[a] -= counter[d] * g.strides[a][d];
      counter[d] = 0;
    }
  }
}

}  // namespace

void run_elementwise(const Tensor& out, std::initializer_list<const Tensor*> ins, Loop1d loop,
                     const double* params, int64_t grain) {
  int64_t n = out.numel();
  if (n == 0) return;
  if (grain < 0) grain = kGrainSize;
  // Fast path: everything contiguous with the output's shape (the common case).
  bool flat = out.is_contiguous();
  for (const Tensor* t : ins) flat = flat && t->is_contiguous() && t->numel() == n;
  if (flat) {
    char* base[kMaxArgs];
    int64_t strides[kMaxArgs];
    base[0] = static_cast<char*>(out.raw_data());
    strides[0] = static_cast<int64_t>(out.itemsize());
    int k = 1;
    for (const Tensor* t : ins) {
      base[k] = static_cast<char*>(t->raw_data());
      strides[k++] = static_cast<int64_t>(t->itemsize());
    }
    if (n <= grain) {
      loop(base, strides, n, params);
      return;
    }
    parallel_for(0, n, grain, [&](int64_t b, int64_t e) {
      char* p[kMaxArgs];
      for (int a = 0; a < k; ++a) p[a] = base[a] + b * strides[a];
      loop(p, strides, e - b, params);
    });
    return;
  }
  Geometry g;
  build(g, out, ins);
  if (n <= grain) {
    run_range(g, 0, n, loop, params);
    return;
  }
  parallel_for(0, n, grain, [&](int64_t b, int64_t e) { run_range(g, b, e, loop, params); });
}

void copy_into(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous() && dst.numel() == src.numel()) {
    int64_t bytes = static_cast<int64_t>(dst.nbytes());
    if (bytes <= kGrainSize * 4) {
      if (bytes) std::memmove(dst.raw_data(), src.raw_data(), bytes);
      return;
    }
    char* d = static_cast<char*>(dst.raw_data());
    const char* s = static_cast<const char*>(src.raw_data());
    parallel_for(0, bytes, kGrainSize * 4, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, e - b); });
    return;
  }
  run_elementwise(dst, {&src}, kernels().cast[idx(src.dtype())][idx(dst.dtype())]);
}

void fill(const Tensor& dst, const Scalar& value) {
  double params[2];
  params[0] = value.to_double();
  int64_t iv = value.to_int();
  std::memcpy(&params[1], &iv, sizeof iv);
  run_elementwise(dst, {}, kernels().fill[idx(dst.dtype())], params);
}

}  // namespace tessera::cpu
