#pragma once
// A plain streaming read, the speed a product that reads each weight once is
// bounded by: n floats summed (as 32-bit lanes) with 4 independent
// accumulators per thread, loads only, at the widest vectors the CPU has.
#include <omp.h>

#include <cstdint>
#include <cstring>

namespace bench {
namespace detail {

typedef float V4 __attribute__((vector_size(16)));
typedef float V8 __attribute__((vector_size(32)));
typedef float V16 __attribute__((vector_size(64)));

template <typename V>
__attribute__((always_inline)) inline float stream_sum(const float* p, int64_t n) {
  constexpr int W = sizeof(V) / sizeof(float);
  V a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    V v0, v1, v2, v3;
    std::memcpy(&v0, p + i, sizeof v0);
    std::memcpy(&v1, p + i + W, sizeof v1);
    std::memcpy(&v2, p + i + 2 * W, sizeof v2);
    std::memcpy(&v3, p + i + 3 * W, sizeof v3);
    a0 += v0, a1 += v1, a2 += v2, a3 += v3;
  }
  V a = a0 + a1 + a2 + a3;
  float s = 0;
  for (int l = 0; l < W; ++l) s += a[l];
  for (; i < n; ++i) s += p[i];
  return s;
}
__attribute__((target("avx512f"))) inline float sum_avx512(const float* p, int64_t n) { return stream_sum<V16>(p, n); }
__attribute__((target("avx2"))) inline float sum_avx2(const float* p, int64_t n) { return stream_sum<V8>(p, n); }
inline float sum_sse(const float* p, int64_t n) { return stream_sum<V4>(p, n); }

}  // namespace detail

// The sum of p[0, n), split among `threads` threads.
inline float stream_read(const float* p, int64_t n, int threads) {
  using namespace detail;
  static const auto sum = __builtin_cpu_supports("avx512f") ? sum_avx512
                          : __builtin_cpu_supports("avx2")  ? sum_avx2
                                                            : sum_sse;
  float total = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const int64_t b = n * t / threads, e = n * (t + 1) / threads;
    total += sum(p + b, e - b);
  }
  return total;
}

}  // namespace bench
