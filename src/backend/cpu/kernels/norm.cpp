// Row-wise softmax / log_softmax and layer_norm / rms_norm, forward and
// backward, on contiguous [rows, n] data. 16-bit floats compute in float.
#include <cmath>

#include "backend/cpu/kernels/common.h"

namespace tessera::cpu::TESSERA_ISA {
namespace {

template <typename T> using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
void softmax_fwd(const void* xv, void* yv, int64_t rows, int64_t n, bool log) {
  using A = Acc<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = static_cast<const T*>(xv) + r * n;
    T* y = static_cast<T*>(yv) + r * n;
    A m = -INFINITY;
    for (int64_t i = 0; i < n; ++i) m = std::fmax(m, static_cast<A>(ld(x[i])));
    bool has_nan = false;
    for (int64_t i = 0; i < n; ++i) has_nan |= ld(x[i]) != ld(x[i]);
    if (has_nan) m = NAN;
    A sum = 0;
    if constexpr (std::is_same_v<T, A>) {
      if (!log) {
        for (int64_t i = 0; i < n; ++i) {
          A e = vexp(x[i] - m);
          y[i] = e;
          sum += e;
        }
        A inv = A(1) / sum;
        for (int64_t i = 0; i < n; ++i) y[i] *= inv;
        continue;
      }
    }
    for (int64_t i = 0; i < n; ++i) sum += vexp(static_cast<A>(ld(x[i])) - m);
    if (log) {
      A lse = m + vlog(sum);
      for (int64_t i = 0; i < n; ++i) y[i] = st<T>(static_cast<A>(ld(x[i])) - lse);
    } else {
      A inv = A(1) / sum;
      for (int64_t i = 0; i < n; ++i) y[i] = st<T>(vexp(static_cast<A>(ld(x[i])) - m) * inv);
    }
  }
}

template <typename T>
void softmax_bwd(const void* gyv, const void* yv, void* gxv, int64_t rows, int64_t n, bool log) {
  using A = Acc<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* gy = static_cast<const T*>(gyv) + r * n;
    const T* y = static_cast<const T*>(yv) + r * n;
    T* gx = static_cast<T*>(gxv) + r * n;
    A s = 0;
    if (log) {
      for (int64_t i = 0; i < n; ++i) s += static_cast<A>(ld(gy[i]));
      for (int64_t i = 0; i < n; ++i)
        gx[i] = st<T>(static_cast<A>(ld(gy[i])) - vexp(static_cast<A>(ld(y[i]))) * s);
    } else {
      for (int64_t i = 0; i < n; ++i) s += static_cast<A>(ld(gy[i])) * static_cast<A>(ld(y[i]));
      for (int64_t i = 0; i < n; ++i)
        gx[i] = st<T>(static_cast<A>(ld(y[i])) * (static_cast<A>(ld(gy[i])) - s));
    }
  }
}

template <typename T>
void layer_norm_fwd(const void* xv, const void* wv, const void* bv, void* yv, void* meanv, void* rstdv,
                    int64_t rows, int64_t n, double eps, bool rms) {
  using A = Acc<T>;
  const T* w = static_cast<const T*>(wv);
  const T* b = static_cast<const T*>(bv);
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = static_cast<const T*>(xv) + r * n;
    T* y = static_cast<T*>(yv) + r * n;
    A mean = 0;
    if (!rms) {
      for (int64_t i = 0; i < n; ++i) mean += static_cast<A>(ld(x[i]));
      mean /= static_cast<A>(n);
    }
    A var = 0;
    for (int64_t i = 0; i < n; ++i) {
      A d = static_cast<A>(ld(x[i])) - mean;
      var += d * d;
    }
    var /= static_cast<A>(n);
    A rstd = A(1) / std::sqrt(var + static_cast<A>(eps));
    if (meanv) static_cast<A*>(meanv)[r] = mean;
    if (rstdv) static_cast<A*>(rstdv)[r] = rstd;
    if (w && b) {
      for (int64_t i = 0; i < n; ++i)
        y[i] = st<T>((static_cast<A>(ld(x[i])) - mean) * rstd * static_cast<A>(ld(w[i])) + static_cast<A>(ld(b[i])));
    } else if (w) {
      for (int64_t i = 0; i < n; ++i)
        y[i] = st<T>((static_cast<A>(ld(x[i])) - mean) * rstd * static_cast<A>(ld(w[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = st<T>((static_cast<A>(ld(x[i])) - mean) * rstd);
    }
  }
}

template <typename T>
void layer_norm_bwd(const void* gyv, const void* xv, const void* wv, const void* meanv, const void* rstdv,
                    void* gxv, void* gwv, void* gbv, int64_t r0, int64_t r1, int64_t n, bool rms) {
  using A = Acc<T>;
  const T* w = static_cast<const T*>(wv);
  A* gw = static_cast<A*>(gwv);
  A* gb = static_cast<A*>(gbv);
  for (int64_t r = r0; r < r1; ++r) {
    const T* gy = static_cast<const T*>(gyv) + r * n;
    const T* x = static_cast<const T*>(xv) + r * n;
    A mean = static_cast<const A*>(meanv)[r];
    A rstd = static_cast<const A*>(rstdv)[r];
    if (gw || gb) {
      for (int64_t i = 0; i < n; ++i) {
        A g = static_cast<A>(ld(gy[i]));
        if (gw) gw[i] += g * (static_cast<A>(ld(x[i])) - mean) * rstd;
        if (gb) gb[i] += g;
      }
    }
    if (!gxv) continue;
    T* gx = static_cast<T*>(gxv) + r * n;
    A sum_g = 0, sum_gx = 0;
    for (int64_t i = 0; i < n; ++i) {
      A g = static_cast<A>(ld(gy[i])) * (w ? static_cast<A>(ld(w[i])) : A(1));
      A xh = (static_cast<A>(ld(x[i])) - mean) * rstd;
      sum_g += g;
      sum_gx += g * xh;
    }
    A inv_n = A(1) / static_cast<A>(n);
    A mg = rms ? A(0) : sum_g * inv_n;
    A mgx = sum_gx * inv_n;
    for (int64_t i = 0; i < n; ++i) {
      A g = static_cast<A>(ld(gy[i])) * (w ? static_cast<A>(ld(w[i])) : A(1));
      A xh = (static_cast<A>(ld(x[i])) - mean) * rstd;
      gx[i] = st<T>(rstd * (g - mg - xh * mgx));
    }
  }
}

}  // namespace

void fill_norm_kernels(KernelTable& t) {
  for_types<TS_FLOAT_TYPES>([&]<typename T>() {
    int d = idx(dtype_v<T>);
    t.softmax_fwd[d] = &softmax_fwd<T>;
    t.softmax_bwd[d] = &softmax_bwd<T>;
    t.layer_norm_fwd[d] = &layer_norm_fwd<T>;
    t.layer_norm_bwd[d] = &layer_norm_bwd<T>;
  });
}

}  // namespace tessera::cpu::TESSERA_ISA
