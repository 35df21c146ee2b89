#include "backend/cpu/scan.h"

#include "tessera/core/parallel.h"

namespace tessera::cpu {

void cumulative(const Tensor& x, const Tensor& out, bool prod) {
  int64_t n = x.dim() == 0 ? 1 : x.shape().back();
  int64_t rows = n == 0 ? 0 : x.numel() / n;
  visit_dtype(x.dtype(), [&]<typename T>() {
    using A = std::conditional_t<std::is_floating_point_v<acc_t<T>>, acc_t<T>, int64_t>;
    const T* xp = x.data_ptr<T>();
    visit_dtype(out.dtype(), [&]<typename O>() {
      O* op = out.data_ptr<O>();
      parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          A acc = prod ? A(1) : A(0);
          for (int64_t i = 0; i < n; ++i) {
            A v = static_cast<A>(static_cast<acc_t<T>>(xp[r * n + i]));
            acc = prod ? static_cast<A>(acc * v) : static_cast<A>(acc + v);
            op[r * n + i] = static_cast<O>(static_cast<acc_t<O>>(acc));
          }
        }
      });
    });
  });
}

void cumprod_backward(const Tensor& x, const Tensor& y, const Tensor& g, const Tensor& gx) {
  int64_t n = x.shape().back();
  int64_t rows = n == 0 ? 0 : x.numel() / n;
  visit_floating(x.dtype(), [&]<typename T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* xp = x.data_ptr<T>();
    const T* yp = y.data_ptr<T>();
    const T* gp = g.data_ptr<T>();
    T* out = gx.data_ptr<T>();
    parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = xp + r * n;
        const T* yr = yp + r * n;
        const T* gr = gp + r * n;
        T* o = out + r * n;
        int64_t z = n;  // first zero
        for (int64_t i = 0; i < n; ++i)
          if (static_cast<A>(xr[i]) == A(0)) {
            z = i;
            break;
          }
        // i < z: grad_i = (sum_{k>=i} g_k y_k) / x_i.
        A suffix = 0;
        for (int64_t k = n - 1; k >= 0; --k) {
          suffix += static_cast<A>(gr[k]) * static_cast<A>(yr[k]);
          if (k < z) o[k] = static_cast<T>(suffix / static_cast<A>(xr[k]));
        }
        if (z < n) {
          // i == z: sum_{k>=z} g_k * prod_{j<z} x_j * prod_{z<j<=k} x_j.
          A before = z > 0 ? static_cast<A>(yr[z - 1]) : A(1);
          A run = before, acc = static_cast<A>(gr[z]) * run;
          for (int64_t k = z + 1; k < n; ++k) {
            run *= static_cast<A>(xr[k]);
            acc += static_cast<A>(gr[k]) * run;
          }
          o[z] = static_cast<T>(acc);
          for (int64_t k = z + 1; k < n; ++k) o[k] = static_cast<T>(A(0));
        }
      }
    });
  });
}

}  // namespace tessera::cpu
