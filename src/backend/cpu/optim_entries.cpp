// The CPU backend's RMSprop, Adagrad and Lion steps (backend/backend.h):
// scalar loops over f32 or f64 parameters, threaded by element. (Adam and SGD
// have per-ISA kernels in kernels/optim.cpp: entries.cpp.)
#include <cmath>

#include "backend/cpu/backend.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu::entry {
namespace {

template <typename F>
void dispatch(const Tensor& p, F&& f) {
  if (p.dtype() == DType::F32)
    f(float{});
  else
    f(double{});
}

template <typename F>
void for_each(int64_t n, F&& f) {
  parallel_for(0, n, kGrainSize / 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

}  // namespace

void rmsprop_step(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& grad_avg,
                  const Tensor& buf, const backend::RmspropArgs& a) {
  const double lr = a.lr, alpha = a.alpha, eps = a.eps, wd = a.weight_decay, mom = a.momentum;
  const bool maximize = a.maximize;
  dispatch(param, [&](auto zero) {
    using T = decltype(zero);
    T *p = param.data_ptr<T>(), *sp = square_avg.data_ptr<T>();
    T* gp = grad_avg.defined() ? grad_avg.data_ptr<T>() : nullptr;
    T* bp = buf.defined() ? buf.data_ptr<T>() : nullptr;
    const T* g = grad.data_ptr<T>();
    for_each(param.numel(), [&](int64_t i) {
      T d = maximize ? -g[i] : g[i];
      if (wd != 0) d += T(wd) * p[i];
      sp[i] = sp[i] * T(alpha) + d * d * T(1 - alpha);
      T avg;
      if (gp) {
        gp[i] = gp[i] * T(alpha) + d * T(1 - alpha);
        avg = std::sqrt(sp[i] - gp[i] * gp[i]) + T(eps);
      } else {
        avg = std::sqrt(sp[i]) + T(eps);
      }
      if (bp) {
        bp[i] = bp[i] * T(mom) + d / avg;
        p[i] -= T(lr) * bp[i];
      } else {
        p[i] -= T(lr) * (d / avg);
      }
    });
  });
}

void adagrad_step(const Tensor& param, const Tensor& grad, const Tensor& sum, const backend::AdagradArgs& a) {
  const double clr = a.lr, wd = a.weight_decay, eps = a.eps;
  const bool maximize = a.maximize;
  dispatch(param, [&](auto zero) {
    using T = decltype(zero);
    T *p = param.data_ptr<T>(), *sp = sum.data_ptr<T>();
    const T* g = grad.data_ptr<T>();
    for_each(param.numel(), [&](int64_t i) {
      T d = maximize ? -g[i] : g[i];
      if (wd != 0) d += T(wd) * p[i];
      sp[i] += d * d;
      p[i] -= T(clr) * (d / (std::sqrt(sp[i]) + T(eps)));
    });
  });
}

void lion_step(const Tensor& param, const Tensor& grad, const Tensor& m, const backend::LionArgs& a) {
  const double lr = a.lr, b1 = a.beta1, b2 = a.beta2, wd = a.weight_decay;
  dispatch(param, [&](auto zero) {
    using T = decltype(zero);
    T *p = param.data_ptr<T>(), *mp = m.data_ptr<T>();
    const T* g = grad.data_ptr<T>();
    for_each(param.numel(), [&](int64_t i) {
      p[i] *= T(1 - lr * wd);
      T c = mp[i] * T(b1) + g[i] * T(1 - b1);
      p[i] -= T(lr) * T((c > 0) - (c < 0));
      mp[i] = mp[i] * T(b2) + g[i] * T(1 - b2);
    });
  });
}

}  // namespace tessera::cpu::entry
