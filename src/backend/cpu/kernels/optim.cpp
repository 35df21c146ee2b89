// Optimizer update kernels (Adam/AdamW, SGD): one pass over a parameter, its
// gradient and its state, with PyTorch 1.13's operation order. The flags are
// template parameters so the inner loops have no branches and vectorize.
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels/common.h"

namespace tessera::cpu::TESSERA_ISA {
namespace {

template <typename T, bool kAmsgrad, bool kDecoupled>
void adam_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, T* __restrict vmax, int64_t n,
               const AdamArgs& a) {
  const T b1 = T(a.beta1), b2 = T(a.beta2), one_b1 = T(1 - a.beta1), one_b2 = T(1 - a.beta2);
  const T sign = a.maximize ? T(-1) : T(1), wd = T(a.weight_decay), decay = T(1 - a.lr * a.weight_decay);
  const T step_size = T(a.step_size), bc2 = T(a.bc2_sqrt), eps = T(a.eps);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    T d = sign * g[i];
    T pi = p[i];
    if constexpr (kDecoupled)
      pi *= decay;
    else
      d += wd * pi;
    const T mi = m[i] * b1 + d * one_b1;
    const T vi = v[i] * b2 + d * d * one_b2;
    m[i] = mi;
    v[i] = vi;
    T second = vi;
    if constexpr (kAmsgrad) {
      second = std::max(vmax[i], vi);
      vmax[i] = second;
    }
    p[i] = pi - step_size * (mi / (std::sqrt(second) / bc2 + eps));
  }
}

template <typename T>
void adam_step(void* p, const void* g, void* m, void* v, void* vmax, int64_t n, const AdamArgs& a) {
  auto P = static_cast<T*>(p), M = static_cast<T*>(m), V = static_cast<T*>(v), X = static_cast<T*>(vmax);
  auto G = static_cast<const T*>(g);
  if (a.amsgrad)
    a.decoupled ? adam_loop<T, true, true>(P, G, M, V, X, n, a) : adam_loop<T, true, false>(P, G, M, V, X, n, a);
  else
    a.decoupled ? adam_loop<T, false, true>(P, G, M, V, X, n, a) : adam_loop<T, false, false>(P, G, M, V, X, n, a);
}

template <typename T>
void sgd_step(void* pv, const void* gv, void* bufv, int64_t n, const SgdArgs& a) {
  T* __restrict p = static_cast<T*>(pv);
  const T* __restrict g = static_cast<const T*>(gv);
  T* __restrict b = static_cast<T*>(bufv);
  const T sign = a.maximize ? T(-1) : T(1), wd = T(a.weight_decay), lr = T(a.lr), mom = T(a.momentum),
          damp = T(1 - a.dampening);
  if (!b) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) p[i] -= lr * (sign * g[i] + wd * p[i]);
    return;
  }
  const bool first = a.first, nesterov = a.nesterov;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T d = sign * g[i] + wd * p[i];
    const T bi = first ? d : mom * b[i] + damp * d;
    b[i] = bi;
    p[i] -= lr * (nesterov ? d + mom * bi : bi);
  }
}

}  // namespace

void fill_optim_kernels(KernelTable& t) {
  t.adam_step[idx(DType::F32)] = &adam_step<float>;
  t.adam_step[idx(DType::F64)] = &adam_step<double>;
  t.sgd_step[idx(DType::F32)] = &sgd_step<float>;
  t.sgd_step[idx(DType::F64)] = &sgd_step<double>;
}

}  // namespace tessera::cpu::TESSERA_ISA
