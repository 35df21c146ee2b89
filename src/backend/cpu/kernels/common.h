#pragma once
// Shared pieces of the per-ISA kernel files: element load/store that computes
// 16-bit floats in float, and dtype lists for registration.
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backend/cpu/kernel_table.h"
#include "backend/cpu/kernels/vecmath.h"

namespace tessera::cpu::TESSERA_ISA {

template <typename T> struct Compute { using type = T; };
template <> struct Compute<Half> { using type = float; };
template <> struct Compute<BFloat16> { using type = float; };
template <typename T> using C = typename Compute<T>::type;

template <typename T>
static inline C<T> ld(const T& v) {
  if constexpr (std::is_same_v<T, Half>) return h2f(v.x);
  else if constexpr (std::is_same_v<T, BFloat16>) return bf2f(v.x);
  else return v;
}

template <typename T, typename A>
static inline T st(A v) {
  if constexpr (std::is_same_v<T, Half>) {
    T r;
    r.x = f2h(static_cast<float>(v));
    return r;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    T r;
    r.x = f2bf(static_cast<float>(v));
    return r;
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != A(0);
  } else if constexpr (std::is_integral_v<T> && std::is_floating_point_v<A>) {
    // Float to integer without undefined behaviour: NaN -> 0, saturate the rest.
    constexpr A lo = static_cast<A>(std::numeric_limits<T>::min());
    constexpr A hi = static_cast<A>(std::numeric_limits<T>::max());
    return v != v ? T(0) : (v <= lo ? std::numeric_limits<T>::min()
                                   : (v >= hi ? std::numeric_limits<T>::max() : static_cast<T>(v)));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T> constexpr bool is_float_v = std::is_floating_point_v<C<T>>;

// Calls f.template operator()<T>() for each listed C++ type.
template <typename... Ts, typename F>
static inline void for_types(F&& f) {
  (f.template operator()<Ts>(), ...);
}
#define TS_ALL_TYPES bool, uint8_t, int8_t, int32_t, int64_t, Half, BFloat16, float, double
#define TS_NUMERIC_TYPES uint8_t, int8_t, int32_t, int64_t, Half, BFloat16, float, double
#define TS_INT_TYPES uint8_t, int8_t, int32_t, int64_t
#define TS_FLOAT_TYPES Half, BFloat16, float, double

}  // namespace tessera::cpu::TESSERA_ISA

namespace tessera::cpu::TESSERA_ISA {
void fill_elementwise_kernels(KernelTable& t);
void fill_reduce_kernels(KernelTable& t);
void fill_norm_kernels(KernelTable& t);
void fill_optim_kernels(KernelTable& t);
void fill_pool_kernels(KernelTable& t);
void fill_quant_kernels(KernelTable& t);
void fill_sparse_kernels(KernelTable& t);
void fill_skinny_kernels(KernelTable& t);
void fill_llm_kernels(KernelTable& t);
}  // namespace tessera::cpu::TESSERA_ISA
