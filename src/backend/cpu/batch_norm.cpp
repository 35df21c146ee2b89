// The CPU backend's batch norm entries (Note [Fused batch norm]).
#include <algorithm>

#include "backend/cpu/backend.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu::entry {
namespace {

// Note [Fused batch norm]: contiguous f32/f64 [N, C, *] input, one pass for the
// statistics (f64 accumulators, per channel), one for y = x * a + b with the
// per-channel scale a = w * rstd and shift b = bias - mean * a. The backward
// needs two reductions per channel (sum dy, sum dy * xhat) and one pass for gx.
template <typename T>
void bn_stats(const T* x, int64_t N, int64_t C, int64_t HW, double* mean, double* var) {
  parallel_for(0, C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0, ss = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* p = x + (n * C + c) * HW;
        double ps = 0, pss = 0;
        for (int64_t i = 0; i < HW; ++i) ps += p[i];
        s += ps;
        const double m_part = ps / static_cast<double>(HW);
        for (int64_t i = 0; i < HW; ++i) pss += (p[i] - m_part) * (p[i] - m_part);
        ss += pss + static_cast<double>(HW) * m_part * m_part;  // sum x^2 = pss + HW m_part^2
      }
      const double M = static_cast<double>(N * HW);
      mean[c] = s / M;
      var[c] = std::max(0.0, ss / M - mean[c] * mean[c]);
    }
  });
}

template <typename T>
void bn_apply(const T* x, T* y, int64_t N, int64_t C, int64_t HW, const double* scale, const double* shift) {
  parallel_for(0, N * C, std::max<int64_t>(1, 16384 / std::max<int64_t>(HW, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r % C;
      const T a = static_cast<T>(scale[c]), b = static_cast<T>(shift[c]);
      const T* xp = x + r * HW;
      T* yp = y + r * HW;
      for (int64_t i = 0; i < HW; ++i) yp[i] = xp[i] * a + b;
    }
  });
}

template <typename T>
void bn_backward(const T* g, const T* x, int64_t N, int64_t C, int64_t HW, const double* mean, const double* rstd,
                 const double* w, bool training, T* gx, double* gw, double* gb) {
  parallel_for(0, C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double sdy = 0, sdyx = 0;
      const double m = mean[c], r = rstd[c];
      for (int64_t n = 0; n < N; ++n) {
        const T* gp = g + (n * C + c) * HW;
        const T* xp = x + (n * C + c) * HW;
        double a = 0, b = 0;
        for (int64_t i = 0; i < HW; ++i) {
          a += gp[i];
          b += gp[i] * (xp[i] - m);
        }
        sdy += a;
        sdyx += b;
      }
      sdyx *= r;  // sum dy * xhat
      if (gw) gw[c] = sdyx;
      if (gb) gb[c] = sdy;
      if (!gx) continue;
      const double M = static_cast<double>(N * HW), k = w ? w[c] * r : r;
      // training: gx = k (dy - mean(dy) - xhat mean(dy xhat)); eval: gx = k dy
      const double c1t = training ? sdy / M : 0.0, c2 = training ? sdyx / M * r : 0.0;
      for (int64_t n = 0; n < N; ++n) {
        const T* gp = g + (n * C + c) * HW;
        const T* xp = x + (n * C + c) * HW;
        T* op = gx + (n * C + c) * HW;
        const T kk = static_cast<T>(k), a = static_cast<T>(c1t), b = static_cast<T>(c2), mm = static_cast<T>(m);
        for (int64_t i = 0; i < HW; ++i) op[i] = kk * (gp[i] - a - (xp[i] - mm) * b);
      }
    }
  });
}

// [N, C, HW] of a contiguous [N, C, *] tensor. Held as a struct, not as
// structured bindings: the lambdas below capture it, which clang before 16
// (Debian 12's, scripts/fuzz.sh) refuses for bindings.
struct NCHW {
  int64_t N, C, HW;
};
NCHW dims_of(const Tensor& x) {
  const int64_t N = x.shape()[0], C = x.shape()[1];
  return {N, C, C > 0 && N > 0 ? x.numel() / (N * C) : 0};
}

}  // namespace

void batch_norm_stats(const Tensor& x, const Tensor& mean, const Tensor& var) {
  const NCHW d = dims_of(x);
  visit_floating(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      bn_stats<T>(x.data_ptr<T>(), d.N, d.C, d.HW, mean.data_ptr<double>(), var.data_ptr<double>());
  });
}

void batch_norm_apply(const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor& shift) {
  const NCHW d = dims_of(x);
  visit_floating(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      bn_apply<T>(x.data_ptr<T>(), y.data_ptr<T>(), d.N, d.C, d.HW, scale.data_ptr<double>(), shift.data_ptr<double>());
  });
}

void batch_norm_bwd(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& w,
                    bool training, const Tensor& gx, const Tensor& gw, const Tensor& gb) {
  const NCHW d = dims_of(x);
  visit_floating(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      bn_backward<T>(g.data_ptr<T>(), x.data_ptr<T>(), d.N, d.C, d.HW, mean.data_ptr<double>(), rstd.data_ptr<double>(),
                     w.defined() ? w.data_ptr<double>() : nullptr, training, gx.defined() ? gx.data_ptr<T>() : nullptr,
                     gw.defined() ? gw.data_ptr<double>() : nullptr, gb.defined() ? gb.data_ptr<double>() : nullptr);
  });
}

}  // namespace tessera::cpu::entry
