// Row-wise softmax / log_softmax and layer_norm / rms_norm, forward and
// backward, on contiguous [rows, n] data; plus the two softmax steps of the
// fused attention kernel. 16-bit floats compute in float. Each row is reduced
// by one thread, so results never depend on the thread count.
#include <cmath>

#include "backend/cpu/kernels/common.h"

namespace tessera::cpu::TESSERA_ISA {
namespace {

template <typename T> using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;


// sum_i f(i), vectorized: the simd reduction fixes the summation order for a
// given instruction set (it never depends on the thread count).
template <typename A, typename F>
static inline A row_sum(int64_t n, F&& f) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += f(i);
  return s;
}

// max_i x[i]; NaN if any element is NaN. The simd reduction pragma is what
// makes the compiler vectorize a float max (max is exact, so order is moot).
template <typename T>
static inline Acc<T> row_max(const T* x, int64_t n) {
  using A = Acc<T>;
  A m = -INFINITY;
  int bad = 0;
#pragma omp simd reduction(max : m) reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) {
    A v = static_cast<A>(ld(x[i]));
    m = v > m ? v : m;
    bad |= v != v;
  }
  return bad ? A(NAN) : m;
}

template <typename T>
void softmax_fwd(const void* xv, void* yv, int64_t rows, int64_t n, bool log) {
  using A = Acc<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = static_cast<const T*>(xv) + r * n;
    T* y = static_cast<T*>(yv) + r * n;
    A m = row_max(x, n);
    if constexpr (std::is_same_v<T, A>) {
      if (!log) {
        // Plain loops the compiler vectorizes: exp into y, sum y, scale y.
        for (int64_t i = 0; i < n; ++i) y[i] = vexp_ftz(x[i] - m);
        A inv = A(1) / row_sum<A>(n, [&](int64_t i) { return y[i]; });
        for (int64_t i = 0; i < n; ++i) y[i] *= inv;
        continue;
      }
    }
    A sum = row_sum<A>(n, [&](int64_t i) { return vexp(static_cast<A>(ld(x[i])) - m); });
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
    if (log) {
      A s = row_sum<A>(n, [&](int64_t i) { return static_cast<A>(ld(gy[i])); });
      for (int64_t i = 0; i < n; ++i) gx[i] = st<T>(static_cast<A>(ld(gy[i])) - vexp(static_cast<A>(ld(y[i]))) * s);
    } else {
      A s = row_sum<A>(n, [&](int64_t i) { return static_cast<A>(ld(gy[i])) * static_cast<A>(ld(y[i])); });
      for (int64_t i = 0; i < n; ++i) gx[i] = st<T>(static_cast<A>(ld(y[i])) * (static_cast<A>(ld(gy[i])) - s));
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
    A mean = rms ? A(0) : row_sum<A>(n, [&](int64_t i) { return static_cast<A>(ld(x[i])); }) / static_cast<A>(n);
    A var = row_sum<A>(n, [&](int64_t i) {
              A d = static_cast<A>(ld(x[i])) - mean;
              return d * d;
            }) / static_cast<A>(n);
    A rstd = A(1) / std::sqrt(var + static_cast<A>(eps));
    if (meanv) static_cast<A*>(meanv)[r] = mean;
    if (rstdv) static_cast<A*>(rstdv)[r] = rstd;
    if (w && b) {
      for (int64_t i = 0; i < n; ++i)
        y[i] = st<T>((static_cast<A>(ld(x[i])) - mean) * rstd * static_cast<A>(ld(w[i])) + static_cast<A>(ld(b[i])));
    } else if (w) {
      for (int64_t i = 0; i < n; ++i) y[i] = st<T>((static_cast<A>(ld(x[i])) - mean) * rstd * static_cast<A>(ld(w[i])));
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
    // One pass: weight/bias gradients and the two row sums of g = gy * w.
    A sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
    for (int64_t i = 0; i < n; ++i) {
      A gyi = static_cast<A>(ld(gy[i]));
      A xh = (static_cast<A>(ld(x[i])) - mean) * rstd;
      if (gw) gw[i] += gyi * xh;
      if (gb) gb[i] += gyi;
      A g = w ? gyi * static_cast<A>(ld(w[i])) : gyi;
      sg += g;
      sgx += g * xh;
    }
    if (!gxv) continue;
    T* gx = static_cast<T*>(gxv) + r * n;
    A inv_n = A(1) / static_cast<A>(n);
    A mg = rms ? A(0) : sg * inv_n, mgx = sgx * inv_n;
    if (w) {
      for (int64_t k = 0; k < n; ++k) {
        A xh = (static_cast<A>(ld(x[k])) - mean) * rstd;
        gx[k] = st<T>(rstd * (static_cast<A>(ld(gy[k])) * static_cast<A>(ld(w[k])) - mg - xh * mgx));
      }
    } else {
      for (int64_t k = 0; k < n; ++k) {
        A xh = (static_cast<A>(ld(x[k])) - mean) * rstd;
        gx[k] = st<T>(rstd * (static_cast<A>(ld(gy[k])) - mg - xh * mgx));
      }
    }
  }
}

// Attention forward: scores s [rows, n] become probabilities in place; lse[r]
// receives the row's log-sum-exp.
template <typename T>
void attn_softmax(void* sv, void* lsev, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    T* s = static_cast<T*>(sv) + r * n;
    T m = row_max(s, n);
    for (int64_t i = 0; i < n; ++i) s[i] = vexp_ftz(s[i] - m);
    T sum = row_sum<T>(n, [&](int64_t i) { return s[i]; });
    T inv = T(1) / sum;
    for (int64_t i = 0; i < n; ++i) s[i] *= inv;
    static_cast<T*>(lsev)[r] = m + vlog(sum);
  }
}

// Attention backward: s = exp(s - lse[r]) in place.
template <typename T>
void attn_exp(void* sv, const void* lsev, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    T* s = static_cast<T*>(sv) + r * n;
    T l = static_cast<const T*>(lsev)[r];
    for (int64_t i = 0; i < n; ++i) s[i] = vexp_ftz(s[i] - l);
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
  t.attn_softmax[idx(DType::F32)] = &attn_softmax<float>;
  t.attn_softmax[idx(DType::F64)] = &attn_softmax<double>;
  t.attn_exp[idx(DType::F32)] = &attn_exp<float>;
  t.attn_exp[idx(DType::F64)] = &attn_exp<double>;
}

}  // namespace tessera::cpu::TESSERA_ISA
